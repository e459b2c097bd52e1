"""A person who changes number: the move in the database, then their vectors rewritten under
the new number and the old number purged, journaled so that a crash never leaves it half done."""

from __future__ import annotations

import contextlib
import logging

from server.errors import InvalidInput, PersonBusyError, PersonNotFound, SamePhone
from server.excerpts import TurnsCache
from server.fact_vectors import FactsCache
from server.hooks import Hooks
from server.indexer import Indexer
from server.locks import KeyedLocks
from server.store import NothingToMove, PendingMove, PersonBusy, PersonMove, Store
from server.validation import phone_number

log = logging.getLogger(__name__)

PHONES_FOLDED = "phones_folded"  # meta: stored numbers were read again with phonenumbers


class PersonMoves:
    """Moves a person's memory from one number to another, and finishes moves a crash cut
    short. Shares the service's person locks and turns cache."""

    def __init__(
        self,
        store: Store,
        indexer: Indexer,
        people: KeyedLocks,
        turns: TurnsCache,
        hooks: Hooks,
        facts: FactsCache | None = None,
    ) -> None:
        self._store = store
        self._hooks = hooks
        self._indexer = indexer
        self._people = people
        self._turns = turns
        self._facts = facts

    def move_person(self, agent: str, old: str, new: str, *, actor: str) -> PersonMove:
        """Everything stored about the person under `old` moves to `new` (merged with what
        `new` holds), in one transaction that also journals the move; then, before this
        returns, their vectors are rewritten under the new number (the indexer reuses each
        vector: nothing is embedded again) and the old number's are purged from every table,
        version and file, as a forget does; then the journal row goes. If that write fails,
        the journal row stays and the indexer settles the move when it can; a crash leaves
        it for the next start-up (finish_moves)."""
        if old == new:
            raise SamePhone("the person already has that number")
        with contextlib.ExitStack() as held:
            for phone in sorted((old, new)):  # in one order: no deadlock
                held.enter_context(self._people.hold((agent, phone)))
            try:
                moved = self._store.move_person(agent, old, new, actor=actor)
            except NothingToMove as exc:
                raise PersonNotFound(str(exc)) from exc
            except PersonBusy as exc:
                raise PersonBusyError(str(exc)) from exc
            for phone in (old, new):
                self._turns.drop(agent, phone)
                if self._facts is not None:
                    self._facts.drop(agent, phone)
        self._hooks.reach("move.committed")
        self._settle(PendingMove(agent, old, new))
        log.info(
            "moved a person of agent %s to a new number: %d turns, %d memories%s",
            agent,
            moved.messages,
            moved.memories,
            " (merged)" if moved.merged else "",
        )
        return moved

    def finish_moves(self) -> int:
        """Settle the moves a crash (or a failed write) left journaled: their vectors under
        the new number, the old number purged. Returns how many."""
        finished = self._indexer.settle_moves()
        if finished:
            log.warning("finished %d moves that a stop had cut short", finished)
        return finished

    def fold_phone_numbers(self) -> tuple[int, int]:
        """Once per database: a person stored under a number that reads differently now
        (WhatsApp's Mexican '+521' and ten digits, which is '+52' and those ten digits) moves
        to the number it folds into, merged with what is stored there, logged. A number that
        cannot exist is left as it is, logged. Returns (moved, impossible)."""
        if self._store.meta(PHONES_FOLDED) is not None:
            return 0, 0
        moved = impossible = busy = 0
        for agent, phone in self._store.stored_people():
            try:
                folded = phone_number(phone)
            except InvalidInput:
                impossible += 1
                continue
            if folded == phone:
                continue
            try:
                done = self._store.move_person(agent, phone, folded, actor="migration:phones")
            except NothingToMove:
                continue  # moved by a replica starting alongside
            except PersonBusy:
                busy += 1  # a claim left by a process that died: the next start-up folds it
                continue
            self._settle(PendingMove(agent, phone, folded))
            moved += 1
            log.info(
                "folded a person of agent %s into the number they are everywhere else:"
                " %d turns, %d memories%s",
                agent,
                done.messages,
                done.memories,
                " (merged)" if done.merged else "",
            )
        if impossible:
            log.warning(
                "%d people are stored under numbers that cannot exist; left as they are (the"
                " API refuses such numbers now: see README, 'Phone numbers')",
                impossible,
            )
        if busy:
            log.warning("%d people's numbers were not folded (busy); the next start-up will", busy)
        else:
            self._store.set_meta(PHONES_FOLDED, "1")
        self._indexer.wake()
        return moved, impossible

    def _settle(self, move: PendingMove) -> None:
        try:
            self._indexer.settle_move(move)
        except Exception:  # the journal and the outbox keep it: the indexer settles it later
            log.exception("a move's vectors were not settled now; the indexer will retry")
            self._indexer.wake()
