"""Opt-outs (STOP): who asked for no more messages, until their next user turn."""

from __future__ import annotations

from server.store.db import Queries


class OptOutQueries(Queries):
    def record_opt_out(self, agent: str, phone: str) -> str:
        """Record that the person opted out, now, unless an opt-out is recorded already.
        Returns the recorded time: the first one, so a retried call answers the same."""
        with self._person_transaction(agent, phone) as conn:
            conn.execute(
                "INSERT INTO opt_outs (agent, phone, opted_out_at) VALUES (?, ?, ?)"
                " ON CONFLICT (agent, phone) DO NOTHING",
                (agent, phone, self._now()),
            )
            row = conn.execute(
                "SELECT opted_out_at FROM opt_outs WHERE agent = ? AND phone = ?", (agent, phone)
            ).fetchone()
        return str(row[0])

    def opted_out_at(self, agent: str, phone: str) -> str | None:
        row = (
            self._reader()
            .execute(
                "SELECT opted_out_at FROM opt_outs WHERE agent = ? AND phone = ?", (agent, phone)
            )
            .fetchone()
        )
        return None if row is None else str(row[0])
