"""Forgetting a person: every row in one transaction, then no trace left in the files."""

from __future__ import annotations

from server.store.audit import redact_audit
from server.store.db import Queries
from server.store.records import PersonErasure


class ErasureQueries(Queries):
    def forget_person(self, agent: str, phone: str) -> PersonErasure:
        """Delete every row of the person in one transaction. The caller then calls
        checkpoint(), outside any lock of its own, so no old page image keeps their text."""
        with self._transaction() as conn:
            where = "agent = ? AND phone = ?"
            args = (agent, phone)
            messages = conn.execute(f"DELETE FROM messages WHERE {where}", args).rowcount
            memories = conn.execute(f"DELETE FROM memories WHERE {where}", args).rowcount
            summaries = conn.execute(f"DELETE FROM summaries WHERE {where}", args).rowcount
            history = conn.execute(f"DELETE FROM memory_history WHERE {where}", args).rowcount
            conn.execute(f"DELETE FROM outbox WHERE {where}", args)
            conn.execute(f"DELETE FROM compaction_claims WHERE {where}", args)
            redact_audit(conn, agent, phone)
        return PersonErasure(
            messages=messages, memories=memories, summaries=summaries, history=history
        )
