"""Rebuild a model's vector index from SQLite, the source of truth."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from embeddings.e5 import E5_SMALL, is_e5_model
from embeddings.encoder import Encoder, model_slug
from server.config import Settings
from server.errors import Conflict
from server.hooks import Hooks
from server.serving import ACTIVE_MODEL, ACTIVE_TABLE, no_server
from server.store import Store

if TYPE_CHECKING:
    from server.app import EncoderFactory

# LanceDB and the model stack are imported by _rebuild only, once the folder's lock allows
# the reindex: refused beside a server, it answers at once (tests/server/test_cli_live.py).


class NotItsDatabase(Conflict):
    """The configured database cannot be the one the vector index was built from."""


@dataclass(frozen=True)
class ReindexReport:
    model: str
    table: str
    items: int
    orphans_removed: int
    seconds: float
    queued_after: int = 0  # items written meanwhile that the table lacked, left to the indexer


def rebuild_index(
    settings: Settings,
    model: str,
    factory: EncoderFactory,
    *,
    progress: bool = True,
    chunk: int = 2000,
    hooks: Hooks | None = None,
) -> ReindexReport:
    """Re-embed every turn, memory and summary with `model` into its own table, remove rows
    whose source is gone, then mark the model active: a running server switches to it.

    Into the table a running server serves, safe next to it: its writes and a forget's purge
    take the index folder's write lock in turn (each write starts from the latest version, so
    a purge never pulls files from under it); a row is an orphan only when SQLite no longer
    has its source, so a turn stored meanwhile is never deleted; what arrived after its chunk
    was read is queued for the server's indexer; a person forgotten meanwhile is purged again
    at the end. Into another table (another model, or a newer table version), FolderInUse
    while a server serves the folder, and no server starts until it is done: until the server
    switches, it writes every change to the table it serves only, so an edit made after its
    chunk was written would stay stale in the new table. server/upgrade.py makes that move
    under traffic, writing both tables: restart the server with the model configured."""
    hooks = hooks or Hooks()
    started = time.perf_counter()
    store = Store.open(settings)
    try:
        with _loaded_alone_unless_served(settings, store, model, factory) as encoder:
            return _rebuild(settings, store, encoder, model, progress, chunk, hooks, started)
    finally:
        store.close()


@contextmanager
def _loaded_alone_unless_served(
    settings: Settings, store: Store, model: str, factory: EncoderFactory
) -> Iterator[Encoder]:
    """The model loaded, with the folder to ourselves (server/serving.py) unless its table is
    the one served, or nothing was ever served. A model other than the served one is refused
    (FolderInUse) before it loads: loading MiniLM beside a busy server took 15-28 s. The served
    model's table may still be of a newer version than the one served: known once loaded."""
    served = store.meta(ACTIVE_MODEL)
    if served is not None and _slug(served) != _slug(model):
        with no_server(settings.data_dir, _advice(model, f"{model}'s table")):
            yield factory(model)
        return
    from embeddings.index import table_name

    encoder = factory(model)
    target = table_name(encoder.name, encoder.dim)
    if store.meta(ACTIVE_TABLE) in (None, target):
        yield encoder
        return
    with no_server(settings.data_dir, _advice(encoder.name, target)):
        yield encoder


def _slug(model: str) -> str:
    """The model's part of its table's name, as the encoder will name it (e5 by either of its
    names; a folder by its own name): equal for two names of one table."""
    return model_slug(E5_SMALL if is_e5_model(model) else model)


def _advice(model: str, target: str) -> str:
    return (
        f"a reindex into {target} next to it would miss what the server writes meanwhile."
        f" To move it to {model}, restart it with MEMORY_EMBEDDING_MODEL={model}:"
        " it builds the new table while answering from the old one. Or stop it, then run"
        " this again"
    )


def _rebuild(
    settings: Settings,
    store: Store,
    encoder: Encoder,
    model: str,
    progress: bool,
    chunk: int,
    hooks: Hooks,
    started: float,
) -> ReindexReport:
    from embeddings.index import VectorIndex, WriteLock, vector_text
    from server.indexer import KINDS, orphans_of, queue_missing, source_rows
    from server.vectors import lance_location

    index = VectorIndex(lance_location(settings, store), encoder.name, encoder.dim)
    if store.count_sources() == 0 and index.count() > 0:
        # Every row would be an orphan and be deleted: this is not the database the index
        # was made from (MEMORY_DATABASE_URL unset, or another one, in this shell).
        raise NotItsDatabase(
            f"the database ({store.engine}) holds nothing while the vector table"
            f" {index.name} holds {index.count()} rows: is MEMORY_DATABASE_URL set as for"
            " the server? Nothing was changed"
        )
    written = 0
    bar = tqdm(
        total=store.count_sources(), desc=f"reindex {model}", unit=" items", disable=not progress
    )
    for kind in KINDS:
        for ids in store.iter_sources(kind, chunk):
            texts = sorted(
                {vector_text(r) for r in source_rows(store, kind, ids, settings.turn_window)}
            )
            vectors = dict(zip(texts, encoder.encode(texts), strict=True))
            hooks.reach("reindex.embedded")
            # Written from SQLite's state under the folder's write lock, which the server's
            # indexer and a forget hold while they read and write: an edit or a forget
            # since the read above is seen here, never overwritten with the old text.
            with WriteLock.of(index.location):
                rows = source_rows(store, kind, ids, settings.turn_window)
                changed = sorted({vector_text(r) for r in rows} - set(vectors))
                if changed:
                    vectors.update(zip(changed, encoder.encode(changed), strict=True))
                if rows:
                    index.upsert(rows, np.stack([vectors[vector_text(r)] for r in rows]))
            written += len(rows)
            _advance(bar, store, len(rows))
            hooks.reach("reindex.batch_written")
    bar.total = bar.n  # what was written, as the report says (turns may have come or gone)
    bar.close()
    orphans = orphans_of(store, index)
    index.delete_ids(orphans)
    if orphans:
        index.purge()  # deletions made physical: an orphan may be a forgotten person's
    else:
        index.optimize()
    queued = queue_missing(store, index)
    store.set_meta(ACTIVE_MODEL, encoder.name)
    store.set_meta(ACTIVE_TABLE, index.name)
    return ReindexReport(
        model=model,
        table=index.name,
        items=written,
        orphans_removed=len(orphans),
        seconds=round(time.perf_counter() - started, 2),
        queued_after=queued,
    )


def _advance(bar: tqdm[None], store: Store, written: int) -> None:
    """Count items written; past the total (counted at the start: a server beside it stores
    turns meanwhile), the total is counted again, so the bar never runs past it."""
    if bar.total is not None and bar.n + written > bar.total:
        bar.total = max(store.count_sources(), bar.n + written)
    bar.update(written)
