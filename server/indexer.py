"""Drains the outbox into the vector index: loads the rows, embeds in batches, upserts, acks."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import numpy as np

from embeddings.calibration import calibration_for
from embeddings.encoder import CachedEncoder, Vectors
from embeddings.index import (
    Hit,
    IndexRow,
    VectorIndex,
    WriteLock,
    person_ids_in_table,
    purge_ids_from_table,
    purge_person_from_table,
    table_names,
    vector_text,
)
from server import native
from server.errors import Unavailable
from server.hooks import Hooks
from server.serving import ACTIVE_MODEL as ACTIVE_MODEL  # (defined where no model stack loads)
from server.serving import ACTIVE_TABLE as ACTIVE_TABLE
from server.store import Memory, Message, OutboxItem, PendingMove, Store, Summary
from server.store.leases import Lease
from server.turn_vectors import RecentVectors, space_key

log = logging.getLogger(__name__)

KINDS = ("turn", "fact", "summary")
# A standby replica tries the lease this often: it takes over within about a second of
# the holder's death (PostgreSQL: of its session's end).
LEASE_POLL_S = 1.0
# A move's journal row older than this is settled by the loop: its request failed to, or died.
MOVE_SETTLE_AFTER_S = 60.0


@dataclass
class IndexerStats:
    """Counters for /metrics."""

    items_indexed: int = 0
    items_removed: int = 0
    texts_embedded: int = 0
    vectors_reused: int = 0
    embed_seconds: float = 0.0
    batches: int = 0
    errors: int = 0
    last_error: str | None = None
    failing: int = 0  # passes failed in a row (0 once one succeeds): /health says degraded
    lag_samples: list[tuple[float, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class VectorSpace:
    """An encoder and the index table made with it: they are only ever used together."""

    encoder: CachedEncoder
    index: VectorIndex

    def retrieve(
        self,
        mode: str,
        query: str,
        *,
        where: str,
        k: int,
        min_score: float | None = None,
        vector: Vectors | Callable[[], Vectors] | None = None,
        own_words: bool = False,
    ) -> list[Hit]:
        """semantic (cosine, floored by min_score), keyword (full text) or hybrid (both, fused
        by score). The query is embedded unless its vector is given. Keyword search
        reads a turn with its neighbours (what a reply is about), or with own_words only what
        the turn itself says: the turn with the order number, not the one before it. `vector`
        may be a callable that gives it (hybrid starts the keyword half before calling it)."""
        column = "content" if own_words else "text"
        if mode == "keyword":
            return self.index.keyword(query, where=where, k=k, column=column)
        if vector is None:
            vector = self.encoder.encode_query([query])[0]
        if mode == "hybrid":  # a callable vector: called once the keyword half has started
            return self.index.hybrid(
                vector,
                query,
                where=where,
                k=k,
                min_score=min_score,
                column=column,
                semantic_weight=calibration_for(self.encoder.name).semantic_weight,
            )
        if callable(vector):
            vector = vector()
        return self.index.search(vector, where=where, k=k, min_score=min_score)


T = TypeVar("T")
MAX_SEARCH_DEPTH = 4000  # how deep a search reads into the index to fill what the store thins


def search_deeper(
    search: Callable[[int], list[Hit]],
    keep: Callable[[list[Hit]], list[T]],
    want: int,
    depth: int,
) -> list[T]:
    """The first `want` items `keep` makes of `search(depth)`'s hits. The store may turn
    hits down (stale in the index, not true at a time asked for, other metadata), leaving too
    few: then the search reads four times deeper, while the index has more, up to
    MAX_SEARCH_DEPTH."""
    while True:
        hits = search(depth)
        found = keep(hits)
        if len(found) >= want or len(hits) < depth or depth >= MAX_SEARCH_DEPTH:
            return found[:want]
        depth = min(MAX_SEARCH_DEPTH, depth * 4)


def turn_row(message: Message, text: str | None = None) -> IndexRow:
    """A turn's index row; `text` is what gets embedded and searched (see turn_text)."""
    return IndexRow(
        id=f"turn:{message.id}",
        kind="turn",
        ref_id=str(message.id),
        agent=message.agent,
        phone=message.phone,
        status="archived" if message.archived else "recent",
        type=message.role,
        created_at=message.created_at,
        text=message.content if text is None else text,
        content=message.content,
    )


def turn_text(store: Store, message: Message, window: int) -> str:
    """A turn's keyword text: the turn with up to `window` turns of the same conversation
    before and after it. Neighbours carry what a reply is about ("yes, in June!"); see
    benchmarks/README.md for what they do to recall on LoCoMo. The turn's own words come first
    and once more in place, so they weigh double: the turn that says it ranks above the turns
    next to it. Turns after it exist once it is archived, which is when excerpts can find it.
    The vector is made from the own words alone (embeddings.index.vector_text)."""
    if window <= 0:
        return message.content
    before, after = store.neighbours(message, window)
    return "\n".join([message.content, *before, message.content, *after])


def turn_rows(store: Store, messages: Sequence[Message], window: int) -> list[IndexRow]:
    return [turn_row(m, turn_text(store, m, window)) for m in messages]


def fact_row(memory: Memory) -> IndexRow:
    return IndexRow(
        id=f"fact:{memory.id}",
        kind="fact",
        ref_id=memory.id,
        agent=memory.agent,
        phone=memory.phone or "",
        # A replaced memory leaves the searches of current ones (status = 'approved').
        status="superseded" if memory.invalid_at is not None else memory.status,
        type=memory.type,
        created_at=memory.created_at,
        text=memory.content,
        session_id=memory.session_id or "",
        task_id=memory.task_id or "",
        graph_id=memory.graph_id or "",
    )


def summary_row(agent: str, phone: str, summary: Summary) -> IndexRow:
    return IndexRow(
        id=f"summary:{agent}|{phone}",
        kind="summary",
        ref_id=f"{agent}|{phone}",
        agent=agent,
        phone=phone,
        status="current",
        type="summary",
        created_at=summary.updated_at,
        text=summary.text,
    )


class IndexerLock:
    """The indexer's lock within the process, then the index folder's write lock."""

    def __init__(self, folder: WriteLock) -> None:
        self._local = threading.RLock()
        self._folder = folder

    def __enter__(self) -> None:
        self._local.acquire()
        try:
            self._folder.__enter__()
        except BaseException:
            self._local.release()
            raise

    def __exit__(self, *_: object) -> None:
        self._folder.__exit__()
        self._local.release()


def queue_missing(store: Store, index: VectorIndex) -> int:
    """Queue every turn, memory and summary that SQLite holds and the index lacks, so a table
    that missed writes (a reindex racing new turns, a model switch under traffic) catches up
    through the indexer; what the outbox already holds is not queued twice. Returns how many
    were queued."""
    have = set(index.all_ids())
    queued = 0
    for kind in ("turn", "fact", "summary"):
        waiting = store.queued_refs(kind)
        for refs in store.iter_sources(kind):
            missing = [r for r in refs if f"{kind}:{r}" not in have and r not in waiting]
            if missing:
                queued += store.enqueue_refs(kind, missing)
    return queued


def orphans_of(store: Store, index: VectorIndex) -> list[str]:
    """Index rows whose source SQLite no longer holds."""
    by_kind: dict[str, list[str]] = {kind: [] for kind in KINDS}
    for row_id in index.all_ids():
        kind, _, ref = row_id.partition(":")
        by_kind.setdefault(kind, []).append(ref)
    orphans: list[str] = []
    for kind, refs in by_kind.items():
        alive = store.existing_refs(kind, refs) if kind in KINDS else set()
        orphans.extend(f"{kind}:{r}" for r in refs if r not in alive)
    return orphans


def source_rows(store: Store, kind: str, ids: list[str], window: int) -> list[IndexRow]:
    """The index rows of these sources of one kind, from SQLite's current state (sources
    gone are left out)."""
    if kind == "turn":
        messages = store.messages_by_ids([int(i) for i in ids]).values()
        return turn_rows(store, list(messages), window)
    if kind == "fact":
        return [fact_row(m) for m in store.memories_by_ids(ids).values()]
    found = store.summaries_of(ids)
    return [summary_row(agent, phone, s) for agent, phone, s in found.values()]


EMBED_SLICE = 64  # texts embedded between two looks at the stop flag


class Stopping(Unavailable):
    """Background work asked to stop between two slices of a batch (nothing was written). A
    request that waited for it (a memory write) answers 503 shutting_down."""

    code = "shutting_down"

    def __init__(self) -> None:
        super().__init__("the server is stopping; the write is stored and will be indexed")


def embed_until(
    encode: Callable[[Sequence[str]], Vectors], texts: Sequence[str], stop: threading.Event
) -> Vectors:
    """Embed in slices, checking `stop` between them: a shutdown does not wait for a whole
    batch of a slow model (512 turns take 10 s or more on 2 cores)."""
    parts = []
    for start in range(0, len(texts), EMBED_SLICE):
        if stop.is_set():
            raise Stopping
        parts.append(encode(texts[start : start + EMBED_SLICE]))
    return np.concatenate(parts) if parts else encode(texts)


def _lower_priority() -> None:
    """Embedding is background work: let request threads have the CPU first. On Linux a
    thread's nice value is its own, and the model's worker threads started from this thread
    inherit it."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or not allowed
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


@dataclass(eq=False)
class _Waiting:
    """A caller of index_now: its outbox rows, and how the write that took them ended."""

    items: Sequence[OutboxItem]
    taken: bool = False  # a leader has taken them (under the waiting guard)
    written: bool = False
    error: Exception | None = None


class Indexer:
    """Background worker: one batch at a time, outbox rows removed only once LanceDB has them,
    so a crash anywhere loses nothing and a replay duplicates nothing (upserts by id)."""

    def __init__(
        self,
        store: Store,
        space: VectorSpace,
        *,
        batch_size: int = 512,
        interval_s: float = 0.5,
        optimize_every: int = 50,
        before_ack: Callable[[], None] | None = None,
        switch_to: Callable[[str], VectorSpace] | None = None,
        turn_window: int = 1,
        hooks: Hooks | None = None,
        lease: Lease | None = None,
    ) -> None:
        self._store = store
        # Among replicas, the one holding the lease runs the loop; the others stand by and
        # take it over when its holder dies (None: the only indexer, as in the CLI).
        self._lease = lease
        self._hooks = hooks or Hooks()
        self.space = space
        self._batch_size = batch_size
        self._interval_s = interval_s
        self._optimize_every = optimize_every
        self._before_ack = before_ack
        self._switch_to = switch_to
        self._window = turn_window
        # Turn vectors written last, for the first context after an archive (turn_vectors.py).
        self.recent = RecentVectors()
        # One batch, purge or switch at a time, in this process and across processes on the
        # same index folder (a CLI forget or reindex): reading SQLite's state and writing it to
        # LanceDB happen under it together, so a forget elsewhere never falls in between.
        self.lock = IndexerLock(WriteLock.of(space.index.location))
        self.stats = IndexerStats()
        # A model upgrade's table while it is built (server/upgrade.py): every batch written
        # to the table in use is written to it too, so it misses nothing that happens meanwhile.
        self.building: VectorSpace | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        # Callers of index_now waiting for their items (see index_now: a group commit).
        self._waiting: list[_Waiting] = []
        self._waiting_guard = threading.Lock()
        self._leader = threading.Lock()
        self._active = False  # holds the lease (see role)

    # -- the loop ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="indexer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if self._lease is not None:
            self._lease.release()
            self._active = False

    @property
    def role(self) -> Literal["active", "standby"]:
        """active: this process runs the indexer; standby: another replica does."""
        return "active" if self._lease is None or self._active else "standby"

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        _lower_priority()
        while not self._stop.is_set():
            if self._lease is not None and not self._hold_lease():
                self._stop.wait(LEASE_POLL_S)
                continue
            try:
                # Every pass, not only when idle: a steady stream of turns never empties the
                # outbox, and a finished reindex must still be picked up (one meta read).
                self._follow_active_model()
                done = self.run_once()
                if done == 0:
                    self._idle_maintenance()
                self.stats.failing = 0
            except Stopping:  # shutting down mid-batch: the rows stay in the outbox
                break
            except Exception as exc:  # keep the loop alive; the rows stay in the outbox
                self.stats.errors += 1
                self.stats.failing += 1
                self.stats.last_error = repr(exc)
                log.exception("indexer batch failed; retrying")
                done = 0
                self._recover()
                self._stop.wait(min(5.0, self._interval_s * 4))
            self._sample_lag()
            if done == 0:
                self._wake.wait(self._interval_s)
                self._wake.clear()
            elif done < self._batch_size:
                # A part batch: let more arrive before the next LanceDB write, so a steady stream
                # of turns makes a few larger versions rather than one per turn.
                self._stop.wait(self._interval_s)

    def _hold_lease(self) -> bool:
        assert self._lease is not None
        held = self._lease.try_hold()
        if held != self._active:
            log.info("indexer: %s", "active" if held else "standby (another replica runs it)")
            self._active = held
        return held

    def _recover(self) -> None:
        """After a failed pass, open the table afresh: a file the old handle had open may be
        gone (another process purged or rebuilt an index), and the latest version has what
        the next pass needs."""
        try:
            with self.lock:
                self.space.index.reopen()
        except Exception:
            log.exception("could not reopen the index table; retrying later")

    def _idle_maintenance(self) -> None:
        if self.settle_moves(older_than_s=MOVE_SETTLE_AFTER_S):
            log.warning("indexer: settled a move whose vectors its request could not write")
        if self.space.index.writes_since_optimize:
            with self.lock:
                self.space.index.optimize()
            native.trim()  # what the writes freed goes back to the system (server/native.py)

    def _sample_lag(self) -> None:
        try:
            size = self._store.outbox_size()
        except Exception:  # the database away for a moment: no sample, the loop goes on
            log.warning("indexer: could not read the outbox size", exc_info=True)
            return
        samples = self.stats.lag_samples
        samples.append((time.time(), size))
        del samples[:-600]

    def run_once(self) -> int:
        """Index one batch from the outbox. Returns how many outbox rows it handled.
        The embedding, the slow part, runs without the lock, so a memory created through the
        API or a forget never waits for a whole batch; the writes happen under the lock from
        the state SQLite holds then."""
        items = self._store.outbox_batch(self._batch_size)
        if items:
            space = self.space
            embedded = self._embed_new(space, self._load(items)[0])
            self._hooks.reach("indexer.embedded")
            with self.lock:
                self._process(items, embedded if space is self.space else {})
        if self.space.index.writes_since_optimize >= self._optimize_every:
            with self.lock:
                self.space.index.optimize()
        return len(items)

    def drain(self) -> int:
        """Index until the outbox is empty (tests, the CLI)."""
        total = 0
        while n := self.run_once():
            total += n
        return total

    def index_now(self, kind: str, ref_ids: Sequence[str]) -> None:
        """Index these items before returning (a memory created through the API).
        Callers at the same time share one LanceDB write, as the outbox's turns do: each
        queues its items; one caller at a time, the leader, takes every queued caller's items,
        embeds them in one batch and writes one version, and its followers return once it
        has. A caller alone writes at once. If the write fails, each caller's items are tried
        alone, so a caller sees its own error and no other."""
        items = self._store.outbox_for(kind, ref_ids)
        if not items:
            return
        mine = _Waiting(items)
        with self._waiting_guard:
            self._waiting.append(mine)
        with self._leader:
            if not mine.taken:
                self._commit(self._take_waiting(), gather=True)
        if mine.error is not None:
            raise mine.error
        if not mine.written:  # the leader stopped short of an error (KeyboardInterrupt...)
            raise RuntimeError("indexing was interrupted; the item stays in the outbox")

    def _take_waiting(self) -> list[_Waiting]:
        with self._waiting_guard:
            group, self._waiting = self._waiting, []
        for waiting in group:
            waiting.taken = True
        return group

    def _commit(self, group: list[_Waiting], *, gather: bool = False) -> None:
        """Embed and write the group's items in one version. With gather, callers that queued
        while the group was embedded join its write (their texts are embedded under the lock
        by _vectors), so steady callers make one version per round, not one per caller."""
        items = [item for waiting in group for item in waiting.items]
        try:
            space = self.space
            embedded = self._embed_new(space, self._load(items)[0])
            if gather and (late := self._take_waiting()):
                group = [*group, *late]
                items += [item for waiting in late for item in waiting.items]
            with self.lock:
                self._process(items, embedded if space is self.space else {})
        except Exception as exc:
            if len(group) == 1:
                group[0].error = exc
            else:
                log.warning("a group of %d memory writes failed; writing each alone", len(group))
                for waiting in group:
                    self._commit([waiting])
            return
        for waiting in group:
            waiting.written = True

    # -- one batch ---------------------------------------------------------------------------

    def _process(self, items: Sequence[OutboxItem], embedded: dict[str, Vectors]) -> None:
        """Under the lock: read the items' current state again (a forget or an edit may have
        happened while embedding), write it, then acknowledge the outbox rows."""
        rows, gone = self._load(items)
        index = self.space.index
        vectors = self._vectors(self.space, rows, embedded)
        index.upsert(rows, vectors)
        index.delete_ids(gone)
        self.recent.put(space_key(index), rows, vectors)
        if (building := self.building) is not None:
            building.index.upsert(rows, self._vectors(building, rows, {}))
            building.index.delete_ids(gone)
        if self._before_ack is not None:
            self._before_ack()
        self._store.outbox_done([item.id for item in items])
        self.stats.batches += 1
        self.stats.items_indexed += len(rows)
        self.stats.items_removed += len(gone)

    def _load(self, items: Sequence[OutboxItem]) -> tuple[list[IndexRow], list[str]]:
        """The current state of each queued item; items whose source is gone are removed."""
        refs: dict[str, set[str]] = {"turn": set(), "fact": set(), "summary": set()}
        for item in items:
            refs.setdefault(item.kind, set()).add(item.ref_id)
        rows: list[IndexRow] = []
        gone: list[str] = []
        messages = self._store.messages_by_ids([int(r) for r in refs["turn"]])
        for ref in sorted(refs["turn"]):
            message = messages.get(int(ref))
            if message:
                rows.append(turn_row(message, turn_text(self._store, message, self._window)))
            else:
                gone.append(f"turn:{ref}")
        memories = self._store.memories_by_ids(sorted(refs["fact"]))
        for ref in sorted(refs["fact"]):
            memory = memories.get(ref)
            if memory:
                rows.append(fact_row(memory))
            else:
                gone.append(f"fact:{ref}")
        summaries = self._store.summaries_of(sorted(refs["summary"]))
        for ref in sorted(refs["summary"]):
            found = summaries.get(ref)
            if found:
                rows.append(summary_row(*found))
            else:
                gone.append(f"summary:{ref}")
        return rows, gone

    def _embed_new(self, space: VectorSpace, rows: Sequence[IndexRow]) -> dict[str, Vectors]:
        """Vectors of the texts the index does not hold yet, by text (no lock held)."""
        stored = space.index.get([r.id for r in rows])
        texts = sorted(
            {
                vector_text(r)
                for r in rows
                if (h := stored.get(r.id)) is None or vector_text(h[0]) != vector_text(r)
            }
        )
        if not texts:
            return {}
        started = time.perf_counter()
        vectors = embed_until(space.encoder.encode_bulk, texts, self._stop)
        self.stats.embed_seconds += time.perf_counter() - started
        self.stats.texts_embedded += len(texts)
        return dict(zip(texts, vectors, strict=True))

    def _vectors(
        self, space: VectorSpace, rows: Sequence[IndexRow], embedded: dict[str, Vectors]
    ) -> Vectors:
        """Reuse stored vectors where the embedded words are the same (archiving a turn or
        approving a fact changes its status, not its words; a turn's new neighbour changes its
        keyword text, not its vector), then what was just embedded; embed the rest (a text that
        changed while the batch was being embedded)."""
        stored = space.index.get([r.id for r in rows])
        out = np.zeros((len(rows), space.encoder.dim), dtype=np.float32)
        todo = []
        for i, row in enumerate(rows):
            have = stored.get(row.id)
            if have is not None and vector_text(have[0]) == vector_text(row):
                out[i] = have[1]
                self.stats.vectors_reused += 1
            elif vector_text(row) in embedded:
                out[i] = embedded[vector_text(row)]
            else:
                todo.append(i)
        if todo:
            started = time.perf_counter()
            fresh = space.encoder.encode_bulk([vector_text(rows[i]) for i in todo])
            self.stats.embed_seconds += time.perf_counter() - started
            out[todo] = fresh
            self.stats.texts_embedded += len(todo)
        return out

    # -- erasure and model switches ----------------------------------------------------------

    def forget(self, agent: str, phone: str, erase_rows: Callable[[], object]) -> int:
        """Erase the person's SQLite rows (erase_rows) and their vectors in every table,
        with no batch in between that could write them back."""
        with self.lock:
            erase_rows()
            index = self.space.index
            removed = index.delete_person(agent, phone)
            self._hooks.reach("forget.vectors_deleted")
            index.purge()
            for name in table_names(index.location):
                if name != index.name:
                    purge_person_from_table(index.location, name, agent, phone)
            # The query cache holds recent texts; a forgotten person's must not linger, nor
            # the vectors of their turns written last.
            self.space.encoder.clear()
            self.recent.drop_person(agent, phone)
            return removed

    def leave_number(self, agent: str, phone: str) -> int:
        """After a person moved away from this number (their rows rewritten under the new
        one by id): every row of every vector table still under it whose item the database
        no longer holds under it goes, and no older version or file keeps it (as forget()
        makes sure of). An item another move brought back to the number stays: the
        database is read and the rows deleted under the lock every index write takes, so
        a move committed after the read writes its rows after the deletes. Returns how many
        rows left the table in use."""
        with self.lock:
            index = self.space.index
            removed = index.delete_ids(
                self._left_behind(agent, phone, index.person_ids(agent, phone))
            )
            index.purge()
            for name in table_names(index.location):
                if name != index.name:
                    ids = person_ids_in_table(index.location, name, agent, phone)
                    stale = self._left_behind(agent, phone, ids)
                    purge_ids_from_table(index.location, name, stale, versions=True)
            return removed

    def _left_behind(self, agent: str, phone: str, ids: Sequence[str]) -> list[str]:
        kept = self._store.stored_under(agent, phone, ids)
        return [i for i in ids if i not in kept]

    def settle_move(self, move: PendingMove) -> None:
        """A committed move's vectors: the person's items waiting under the new number are
        written first (their stored vectors reused), then the old number is left and the
        move's journal row ends. Safe to run again, and in any order with other moves."""
        refs: dict[str, list[str]] = {}
        for item in self._store.outbox_of(move.agent, move.new):
            refs.setdefault(item.kind, []).append(item.ref_id)
        for kind, ids in refs.items():
            self.index_now(kind, ids)
        self._hooks.reach("move.rewritten")
        self.leave_number(move.agent, move.old)
        self._hooks.reach("move.left")
        self._store.end_move(move)

    def settle_moves(self, *, older_than_s: float = 0.0) -> int:
        """Settle every move whose journal row is left (a crash, or a write that failed
        during the move's request); with older_than_s, only those journaled at least that
        long ago (the loop leaves a move its own request is still settling). Returns how
        many."""
        pending = self._store.pending_moves(older_than_s=older_than_s)
        for move in pending:
            self.settle_move(move)
        return len(pending)

    def _follow_active_model(self) -> None:
        """`memory-server reindex --model M` marks M (and its table) active when the table is
        built; switch."""
        wanted = self._store.meta(ACTIVE_MODEL)
        table = self._store.meta(ACTIVE_TABLE)
        if not wanted or self._switch_to is None:
            return
        if wanted == self.space.encoder.name and table in (None, self.space.index.name):
            return  # (the same model's table of a newer version: a reindex built it)
        try:
            space = self._switch_to(wanted)
        except Exception as exc:
            self.stats.errors += 1
            self.stats.last_error = repr(exc)
            log.exception("could not switch to model %s", wanted)
            return
        with self.lock:
            self.space = space
            self._store.set_meta(ACTIVE_TABLE, space.index.name)
        log.info("switched to model %s (table %s)", wanted, space.index.name)
