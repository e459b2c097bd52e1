"""Moving a data folder to another embedding model while the server keeps answering.

A folder made with one model (say MiniLM) opened with another configured (the default
multilingual-e5-small): the server answers from the old model's table, and this builds the new
model's table from SQLite in the background. From the moment it starts, the indexer writes
every batch to both tables (Indexer.building), so turns, edits and deletions that happen during
the build reach the new table too; the build writes each chunk from SQLite's state under the
indexer's lock, so it never overwrites a newer write with an older one. When every source is
in, it switches the indexer to the new table in the same lock and marks the model active.
A forget during the build purges every table of the folder, the one being built included.
Interrupted (a restart), it starts again and skips what the table already holds."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import numpy as np

from embeddings.encoder import Vectors
from embeddings.index import IndexRow, vector_text
from server.hooks import Hooks
from server.indexer import (
    ACTIVE_MODEL,
    ACTIVE_TABLE,
    KINDS,
    Indexer,
    Stopping,
    VectorSpace,
    embed_until,
    orphans_of,
    queue_missing,
    source_rows,
)
from server.store import Store

log = logging.getLogger(__name__)
OPTIMIZE_CHUNKS = 10  # compact the table being built every this many chunks


@dataclass(frozen=True, slots=True)
class UpgradeStatus:
    state: str  # building | done | failed
    source_model: str
    target_model: str
    source_table: str
    target_table: str
    done: int
    total: int
    seconds: float
    error: str | None = None


class Upgrade:
    """Builds `target`'s table while the indexer serves from its current space, then switches."""

    def __init__(
        self,
        store: Store,
        indexer: Indexer,
        target: VectorSpace,
        *,
        turn_window: int,
        chunk: int = 512,
        hooks: Hooks | None = None,
    ) -> None:
        self._store = store
        self._indexer = indexer
        self._target = target
        self._window = turn_window
        self._chunk = chunk
        self._hooks = hooks or Hooks()
        self._source_model = indexer.space.encoder.name
        self._source_table = indexer.space.index.name
        self._state = "building"
        self._done = 0
        self._total = store.count_sources()
        self._error: str | None = None
        self._started = time.monotonic()
        self._finished: float | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._chunks = 0

    @property
    def target(self) -> VectorSpace:
        return self._target

    @property
    def status(self) -> UpgradeStatus:
        end = self._finished if self._finished is not None else time.monotonic()
        return UpgradeStatus(
            state=self._state,
            source_model=self._source_model,
            target_model=self._target.encoder.name,
            source_table=self._source_table,
            target_table=self._target.index.name,
            done=self._done,
            total=self._total,
            seconds=round(end - self._started, 1),
            error=self._error,
        )

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run_logged, name="upgrade", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _run_logged(self) -> None:
        try:
            self.run()
        except Stopping:
            self._indexer.building = None
            log.info("model upgrade stopped at %d of %d", self._done, self._total)
        except Exception as exc:  # the old table keeps serving; a restart tries again
            self._state = "failed"
            self._error = repr(exc)
            self._finished = time.monotonic()
            self._indexer.building = None
            log.exception("model upgrade to %s failed", self._target.encoder.name)

    def run(self) -> None:
        """Build, then switch (tests call this directly; the server runs it in a thread)."""
        target = self._target
        log.info(
            "model upgrade: answering from %s (table %s) while %s's table %s is built (%d items)",
            self._source_model,
            self._source_table,
            target.encoder.name,
            target.index.name,
            self._total,
        )
        with self._indexer.lock:
            self._indexer.building = target  # from now on every batch reaches both tables
        reported = 0.0
        for kind in KINDS:
            # Every id first: a cursor held open for the whole build would hold a read
            # transaction, and with it every WAL checkpoint (a forget's among them).
            every = [ref for part in self._store.iter_sources(kind) for ref in part]
            for start in range(0, len(every), self._chunk):
                ids = every[start : start + self._chunk]
                if self._stop.is_set():
                    self._indexer.building = None
                    log.info("model upgrade stopped at %d of %d", self._done, self._total)
                    return
                self._write_chunk(kind, ids)
                self._done += len(ids)
                self._chunks += 1
                if self._chunks % OPTIMIZE_CHUNKS == 0:
                    with self._indexer.lock:
                        target.index.optimize()
                self._hooks.reach("upgrade.chunk_written")
                if self._done / max(1, self._total) >= reported + 0.1:
                    reported = self._done / max(1, self._total)
                    log.info(
                        "model upgrade to %s: %d of %d items (%.0f%%)",
                        target.encoder.name,
                        self._done,
                        self._total,
                        100 * reported,
                    )
        with self._indexer.lock:
            # Rows the build wrote for sources deleted since (forgotten people are purged
            # from every table; this catches single deletions between a chunk and its write).
            orphans = orphans_of(self._store, target.index)
            if orphans:
                target.index.delete_ids(orphans)
                target.index.purge()
            queued = queue_missing(self._store, target.index)
            self._indexer.space = target
            self._indexer.building = None
            self._store.set_meta(ACTIVE_MODEL, target.encoder.name)
            self._store.set_meta(ACTIVE_TABLE, target.index.name)
            self._done = self._total = self._store.count_sources()  # all in, whatever changed
        self._state = "done"
        self._finished = time.monotonic()
        log.info(
            "model upgrade done: now answering from %s (table %s) after %.0f s; %d items"
            " queued for the indexer",
            target.encoder.name,
            target.index.name,
            self._finished - self._started,
            queued,
        )

    def _write_chunk(self, kind: str, ids: list[str]) -> None:
        """Embed outside the lock what the table lacks; write SQLite's state under it. A row
        the table holds with the same own words keeps its vector (a resumed build, or a turn
        whose keyword text only gained a neighbour)."""
        target = self._target

        def stale(row: IndexRow, have: dict[str, tuple[IndexRow, Vectors]]) -> bool:
            held = have.get(row.id)
            return held is None or vector_text(held[0]) != vector_text(row)

        rows = source_rows(self._store, kind, ids, self._window)
        have = target.index.get([r.id for r in rows])
        texts = sorted({vector_text(r) for r in rows if stale(r, have)})
        vectors: dict[str, Vectors] = {}
        if texts:
            embedded = embed_until(target.encoder.encode_bulk, texts, self._stop)
            vectors = dict(zip(texts, embedded, strict=True))
        with self._indexer.lock:
            rows = source_rows(self._store, kind, ids, self._window)
            have = target.index.get([r.id for r in rows])
            todo = [r for r in rows if (h := have.get(r.id)) is None or h[0].text != r.text]
            late = sorted({vector_text(r) for r in todo if stale(r, have)} - set(vectors))
            if late:  # edited since the read above
                vectors.update(zip(late, target.encoder.encode_bulk(late), strict=True))
            if todo:
                target.index.upsert(
                    todo,
                    np.stack(
                        [vectors[vector_text(r)] if stale(r, have) else have[r.id][1] for r in todo]
                    ),
                )
