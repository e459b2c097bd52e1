"""Retention: forget the people an agent has not heard from in its retention_days, and delete
the older archived turns of the others; at start-up, hourly, and on demand (`memory-server
sweep`). One process sweeps at a time (the store's lease "retention")."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from server.clock import Clock, format_time, utc_now
from server.store import ArchivedErasure, Store
from server.store.leases import Lease
from server.store.util import chunks

if TYPE_CHECKING:
    from server.conversation import MemoryService
    from server.deps import Services
    from server.indexer import Indexer

log = logging.getLogger(__name__)

LEASE_NAME = "retention"
LEASE_POLL_S = 0.1
SWEEP_WAIT_S = 120.0  # how long `memory-server sweep` waits for another process's sweep


@dataclass(frozen=True, slots=True)
class Swept:
    """What one sweep did: counts only (never a phone, never a text)."""

    agents: int  # agents with a retention
    people: int  # people forgotten
    archived_turns: int  # archived turns deleted (of people still active)
    seconds: float
    skipped: bool = False  # another process was sweeping: this one did nothing


def retention_days(store: Store) -> dict[str, int]:
    """retention_days of every agent that set one (unset or null: kept forever)."""
    found: dict[str, int] = {}
    for agent, values in store.all_agent_settings().items():
        days = values.get("retention_days")
        if isinstance(days, int) and not isinstance(days, bool) and days >= 1:
            found[agent] = days
    return found


def cutoff(now: datetime, days: int) -> str:
    """The time before which an agent's turns are past its retention."""
    return format_time(now - timedelta(days=days))


def sweep_due(store: Store, now: datetime) -> bool:
    """Whether a sweep would forget anyone or delete any turn (the CLI loads the model and
    the vector index only then)."""
    for agent, days in retention_days(store).items():
        before = cutoff(now, days)
        if store.quiet_people(agent, before) or store.people_with_archived_before(agent, before):
            return True
    return False


class Retention:
    """The sweep, and the background thread that runs it at start-up and every interval_s.

    A person whose turns (and opt-out) are all older than the agent's retention is forgotten
    through MemoryService.forget_quiet_person: the same erasure as DELETE, which checks again
    in its transaction that they did not write meanwhile. Of the others, archived turns older
    than the retention are deleted; the turns next to them are indexed again without their
    words (a turn's keyword text holds its neighbours), then the vector table is purged once,
    so no file keeps the deleted text."""

    def __init__(
        self,
        store: Store,
        memory: MemoryService,
        indexer: Indexer,
        *,
        turn_window: int,
        lease: Lease | None = None,
        clock: Clock = utc_now,
        interval_s: float = 3600.0,
    ) -> None:
        self._store = store
        self._memory = memory
        self._indexer = indexer
        self._window = turn_window
        # Among replicas (and a CLI sweep), one sweeps at a time; None: the only sweeper.
        self._lease = lease
        self._clock = clock
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last: Swept | None = None

    @classmethod
    def of(cls, services: Services, *, clock: Clock = utc_now) -> Retention:
        """The sweep of a server or a command, taking turns with the others on the database
        through the lease."""
        settings = services.settings
        return cls(
            services.store,
            services.memory,
            services.indexer,
            turn_window=settings.turn_window,
            lease=services.store.lease(LEASE_NAME, settings.data_dir),
            clock=clock,
            interval_s=settings.retention_sweep_s,
        )

    # -- the loop ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="retention", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop between two people (a sweep in progress ends early; the next one resumes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sweep()
            except Exception:  # the database away for a moment: the next sweep tries again
                log.exception("retention sweep failed; the next one runs in %g s", self._interval_s)
            self._stop.wait(self._interval_s)

    # -- one sweep ---------------------------------------------------------------------------

    def sweep(self, *, wait_s: float = 0.0) -> Swept:
        """Sweep now if no other process is sweeping (waiting up to wait_s for it to end);
        otherwise skip, since that sweep does the same work."""
        if self._lease is not None and not self._hold(wait_s):
            log.debug("retention sweep skipped: another process is sweeping")
            return Swept(agents=0, people=0, archived_turns=0, seconds=0.0, skipped=True)
        try:
            swept = self._sweep()
        finally:
            if self._lease is not None:
                self._lease.release()
        self.last = swept
        return swept

    def _hold(self, wait_s: float) -> bool:
        assert self._lease is not None
        deadline = time.monotonic() + wait_s
        while not self._lease.try_hold():
            if time.monotonic() >= deadline or self._stop.wait(LEASE_POLL_S):
                return False
        return True

    def _sweep(self) -> Swept:
        started = time.perf_counter()
        now = self._clock()
        agents = retention_days(self._store)
        people = 0
        erased: list[ArchivedErasure] = []
        try:
            for agent, days in agents.items():
                before = cutoff(now, days)
                for phone in self._store.quiet_people(agent, before):
                    if self._stop.is_set():
                        break
                    if self._memory.forget_quiet_person(agent, phone, before) is not None:
                        people += 1
                for phone in self._store.people_with_archived_before(agent, before):
                    if self._stop.is_set():
                        break
                    done = self._store.delete_archived_turns(
                        agent, phone, before, window=self._window
                    )
                    erased.append(done)
                    self._reindex(done)
        finally:
            # Whatever was deleted is purged, also when the sweep stopped half-way.
            deleted = [turn for done in erased for turn in done.deleted]
            if deleted:
                self._purge(deleted, [turn for done in erased for turn in done.retexted])
        swept = Swept(
            agents=len(agents),
            people=people,
            archived_turns=len(deleted),
            seconds=round(time.perf_counter() - started, 3),
        )
        log.info(
            "retention sweep: %d agent(s) with a retention, %d people forgotten, %d archived"
            " turns deleted, %.1f s",
            swept.agents,
            swept.people,
            swept.archived_turns,
            swept.seconds,
        )
        return swept

    def _reindex(self, done: ArchivedErasure) -> None:
        """Index the deleted turns (their vectors go) and their neighbours (their keyword
        text is made again without the deleted words) now, before the purge."""
        refs = [str(turn) for turn in done.deleted + done.retexted]
        for chunk in chunks(refs):
            self._indexer.index_now("turn", chunk)

    def _purge(self, deleted: list[int], retexted: list[int]) -> None:
        """Make the deletions physical in every vector table, as a forget does: the table in
        use and the one a model upgrade builds are purged (rewritten, old versions dropped);
        other models' tables lose the deleted turns and the neighbours whose text held them
        (what such a table lacks is queued again if it is ever served)."""
        from embeddings.index import purge_ids_from_table, table_names

        ids = [f"turn:{turn}" for turn in sorted({*deleted, *retexted})]
        with self._indexer.lock:
            index = self._indexer.space.index
            index.purge()
            building = self._indexer.building
            if building is not None:
                building.index.purge()
            kept = {index.name, building.index.name if building is not None else ""}
            location = index.location
            for name in table_names(location):
                if name in kept:
                    continue
                purge_ids_from_table(location, name, ids)
        self._store.checkpoint()
