"""Forgetting a person: journaled first, every row in one transaction, then no trace left in
the files; a forget a crash cut short is finished at the next start-up."""

from __future__ import annotations

from dataclasses import dataclass

from server.store.audit import count_erasure, redact_audit
from server.store.db import Conn, Queries
from server.store.people import delete_names
from server.store.records import PersonErasure


class StillActive(Exception):
    """A forget of a quiet person (the retention sweep) found a turn or an opt-out of theirs
    made since the sweep chose them: nothing was deleted."""


@dataclass(frozen=True, slots=True)
class PendingErasure:
    """A journaled forget not finished yet. rows_erased: its database rows are gone (what is
    left is its vectors and the files' old copies)."""

    agent: str
    phone: str
    quiet_before: str | None
    rows_erased: bool


class ErasureQueries(Queries):
    def journal_erasure(self, agent: str, phone: str, *, quiet_before: str | None) -> None:
        """Record, before anything is deleted, that the person is being forgotten: a process
        killed half-way leaves the record, and the next start-up finishes the forget. A
        forget of anyone (quiet_before None) wins over a retention sweep's of a quiet person."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO erasures (agent, phone, quiet_before, requested_at, rows_erased)"
                " VALUES (?, ?, ?, ?, 0) ON CONFLICT (agent, phone) DO UPDATE SET"
                " rows_erased = 0, requested_at = excluded.requested_at,"
                " quiet_before = CASE WHEN erasures.quiet_before IS NULL THEN NULL"
                " ELSE excluded.quiet_before END",
                (agent, phone, quiet_before, self._now()),
            )

    def end_erasure(self, agent: str, phone: str) -> None:
        with self._transaction() as conn:
            conn.execute("DELETE FROM erasures WHERE agent = ? AND phone = ?", (agent, phone))

    def pending_erasures(self) -> list[PendingErasure]:
        rows = self._reader().execute(
            "SELECT agent, phone, quiet_before, rows_erased FROM erasures ORDER BY requested_at"
        )
        return [PendingErasure(r[0], r[1], r[2], bool(r[3])) for r in rows]

    def count_pending_erasures(self) -> int:
        return int(self._reader().execute("SELECT COUNT(*) FROM erasures").fetchone()[0])

    def forget_person(
        self, agent: str, phone: str, *, quiet_before: str | None = None
    ) -> PersonErasure:
        """Delete every row of the person in one transaction, under their lock: a turn another
        replica stores meanwhile is committed before (and deleted) or after (and kept, with
        its outbox row), never half of each. The caller then calls checkpoint(), outside any
        lock of its own, so no old page image keeps their text. With quiet_before, only a
        person with no turn and no opt-out made at or after that time, checked in the same
        view as the deletes: else StillActive, and nothing is deleted. The erasure's journal
        row, if any, records that the rows are gone."""
        with self._person_transaction(agent, phone) as conn:
            where = "agent = ? AND phone = ?"
            args = (agent, phone)
            if quiet_before is not None and _active_since(conn, agent, phone, quiet_before):
                raise StillActive(f"a person of agent {agent} was active since {quiet_before}")
            messages = conn.execute(f"DELETE FROM messages WHERE {where}", args).rowcount
            memories = conn.execute(f"DELETE FROM memories WHERE {where}", args).rowcount
            summaries = conn.execute(f"DELETE FROM summaries WHERE {where}", args).rowcount
            history = conn.execute(f"DELETE FROM memory_history WHERE {where}", args).rowcount
            conn.execute(f"DELETE FROM outbox WHERE {where}", args)
            conn.execute(f"DELETE FROM compaction_claims WHERE {where}", args)
            conn.execute(f"DELETE FROM opt_outs WHERE {where}", args)
            delete_names(conn, agent, phone)
            count_erasure(conn)  # before the redaction: a search's entry waits for it
            redact_audit(conn, agent, phone)
            conn.execute(f"UPDATE erasures SET rows_erased = 1 WHERE {where}", args)
        return PersonErasure(
            messages=messages, memories=memories, summaries=summaries, history=history
        )


def _active_since(conn: Conn, agent: str, phone: str, since: str) -> bool:
    args = (agent, phone, since)
    turn = conn.execute(
        "SELECT 1 FROM messages WHERE agent = ? AND phone = ? AND created_at >= ? LIMIT 1", args
    ).fetchone()
    if turn is not None:
        return True
    opt_out = conn.execute(
        "SELECT 1 FROM opt_outs WHERE agent = ? AND phone = ? AND opted_out_at >= ?", args
    ).fetchone()
    return opt_out is not None
