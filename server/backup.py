"""Backup and restore of a data folder: SQLite through its online backup API, LanceDB tables
through a pinned version, so a copy taken while the server runs is consistent."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

import lancedb

from embeddings.index import quote, table_names
from server.clock import format_time, utc_now
from server.config import Settings
from server.serving import no_server
from server.store import Store

MANIFEST = "backup.json"


class BackupError(Exception):
    pass


@dataclass(frozen=True)
class BackupReport:
    folder: str
    messages: int
    memories: int
    tables: dict[str, int]
    seconds: float
    queued: int = 0  # restore: items queued for the indexer to check against the copy


def backup(settings: Settings, dest: Path) -> BackupReport:
    """Copy the vector tables first, then SQLite: a vector written in between has its source
    in the SQLite copy, and restore() removes any vector whose source is missing."""
    started = time.perf_counter()
    _sqlite_only(settings, "backup")
    if dest.exists() and any(dest.iterdir()):
        raise BackupError(f"{dest} is not empty")
    if not settings.sqlite_path.exists():
        raise BackupError(f"no database at {settings.sqlite_path}")
    (dest / "lance").mkdir(parents=True, exist_ok=True)
    tables = {
        name: _copy_table(settings.lance_path, dest / "lance", name)
        for name in table_names(settings.lance_path)
    }
    source = sqlite3.connect(settings.sqlite_path, timeout=settings.busy_timeout_ms / 1000)
    target = sqlite3.connect(dest / "memory.db")
    try:
        source.backup(target)
        messages = int(target.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
        memories = int(target.execute("SELECT COUNT(*) FROM memories").fetchone()[0])
    finally:
        target.close()
        source.close()
    report = BackupReport(
        str(dest), messages, memories, tables, round(time.perf_counter() - started, 2)
    )
    (dest / MANIFEST).write_text(json.dumps({"at": format_time(utc_now()), **asdict(report)}))
    return report


def restore(settings: Settings, src: Path) -> BackupReport:
    """Replace the data folder's database and vector tables with a backup's, then drop
    vectors whose source the backup does not hold, and queue every item for the indexer,
    which brings rows that changed between the two copies up to date. Refused (FolderInUse)
    while a server serves the folder: it would go on writing into the replaced files."""
    if not (src / MANIFEST).exists() or not (src / "memory.db").exists():
        raise BackupError(f"{src} is not a backup made by `memory-server backup`")
    with no_server(settings.data_dir):
        return _restore(settings, src)


def _restore(settings: Settings, src: Path) -> BackupReport:
    _sqlite_only(settings, "restore")
    started = time.perf_counter()
    data = settings.data_dir
    data.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        settings.sqlite_path.with_name(settings.sqlite_path.name + suffix).unlink(missing_ok=True)
    shutil.copy2(src / "memory.db", settings.sqlite_path)
    shutil.rmtree(settings.lance_path, ignore_errors=True)
    shutil.copytree(src / "lance", settings.lance_path)
    store = Store(settings.sqlite_path, busy_timeout_ms=settings.busy_timeout_ms)
    try:
        sources = _source_ids(store)
        db = lancedb.connect(str(settings.lance_path))
        tables: dict[str, int] = {}
        for name in table_names(settings.lance_path):
            table = db.open_table(name)
            ids = table.to_lance().to_table(columns=["id"]).column("id").to_pylist()
            orphans = [i for i in ids if i not in sources]
            for start in range(0, len(orphans), 500):
                chunk = ", ".join(quote(i) for i in orphans[start : start + 500])
                table.delete(f"id IN ({chunk})")
            if orphans:  # deletions are soft: rewrite the files so the rows are gone
                table.to_lance().optimize.compact_files(materialize_deletions_threshold=0.0)
                table.to_lance().cleanup_old_versions(timedelta(0), delete_unverified=True)
            tables[name] = int(table.count_rows())
        # An item changed and indexed between the two copies (archived, approved, edited) or
        # indexed in between (so gone from the outbox) has an old or no row in the vector copy.
        # Queue everything: the indexer re-embeds only what differs from the stored rows.
        queued = store.enqueue_everything()
        messages = len([i for i in sources if i.startswith("turn:")])
        memories = len([i for i in sources if i.startswith("fact:")])
    finally:
        store.close()
    return BackupReport(
        str(src), messages, memories, tables, round(time.perf_counter() - started, 2), queued
    )


def _copy_table(source: Path, dest: Path, name: str) -> int:
    """Copy one table as of its current version (Lance versions are immutable)."""
    for attempt in range(3):
        try:
            table = lancedb.connect(str(source)).open_table(name)
            data = table.to_lance().to_table()  # the version opened: later writes are not seen
            lancedb.connect(str(dest)).create_table(name, data, mode="overwrite")
            return int(data.num_rows)
        except (OSError, RuntimeError, ValueError):
            if attempt == 2:
                raise
            time.sleep(0.5)  # a compaction removed the version under us: read the new one
    return 0


def _source_ids(store: Store) -> set[str]:
    ids: set[str] = set()
    for kind in ("turn", "fact", "summary"):
        for chunk in store.iter_sources(kind):
            ids.update(f"{kind}:{ref}" for ref in chunk)
    return ids


def _sqlite_only(settings: Settings, command: str) -> None:
    if settings.database_url:
        raise BackupError(
            f"{command} copies SQLite; with MEMORY_DATABASE_URL use pg_dump / pg_restore for"
            " the database and copy the vector store (README, Deployment)"
        )
