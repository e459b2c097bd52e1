"""Forgetting a person: every row in one transaction, then no trace left in the files."""

from __future__ import annotations

from server.store.audit import redact_audit
from server.store.db import Conn, Queries
from server.store.records import PersonErasure


class StillActive(Exception):
    """A forget of a quiet person (the retention sweep) found a turn or an opt-out of theirs
    made since the sweep chose them: nothing was deleted."""


class ErasureQueries(Queries):
    def forget_person(
        self, agent: str, phone: str, *, quiet_before: str | None = None
    ) -> PersonErasure:
        """Delete every row of the person in one transaction. The caller then calls
        checkpoint(), outside any lock of its own, so no old page image keeps their text.
        With quiet_before, only a person with no turn and no opt-out made at or after that
        time: else StillActive, and nothing is deleted."""
        with self._transaction() as conn:
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
            redact_audit(conn, agent, phone)
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
