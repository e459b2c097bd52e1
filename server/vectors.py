"""The vector store the settings name (MEMORY_LANCE_URI): a local folder, or a bucket that the
replicas share, whose writers take turns through a lease of the shared database."""

from __future__ import annotations

from embeddings.location import LanceLocation
from server.config import Settings
from server.store import Store

WRITE_LEASE = "lance-write"


def lance_location(settings: Settings, store: Store | None) -> LanceLocation:
    """With no store, no lock shared with other processes: for a backup's reads, or a restore,
    which runs with every server stopped."""
    if not settings.lance_remote:
        return LanceLocation(str(settings.lance_path))
    assert settings.lance_uri is not None
    if store is None:
        return LanceLocation(settings.lance_uri, settings.lance_storage_options)
    return LanceLocation(
        settings.lance_uri,
        settings.lance_storage_options,
        # Every process writing to the bucket (replicas, a CLI forget or reindex) shares the
        # database: an advisory lock on PostgreSQL, a flock in the data folder on SQLite.
        lock=lambda: store.lease(WRITE_LEASE, settings.data_dir, keep_session=True),
    )
