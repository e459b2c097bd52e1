"""Retention: who and what is older than an agent's retention, and the deletion of old
archived turns (with the re-indexing of the turns whose keyword text held them)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from server.store.db import Queries
from server.store.outbox import enqueue
from server.store.util import chunks

# (agent, before, agent, before). The newest turn by id: one row per person read through the
# index messages_person (agent, phone, id).
QUIET_PEOPLE = (
    "SELECT newest.phone FROM"
    " (SELECT phone, MAX(id) AS id FROM messages WHERE agent = ? GROUP BY phone) newest"
    " JOIN messages m ON m.id = newest.id WHERE m.created_at < ?"
    " UNION"
    " SELECT o.phone FROM opt_outs o WHERE o.agent = ? AND o.opted_out_at < ?"
    " AND NOT EXISTS (SELECT 1 FROM messages r WHERE r.agent = o.agent AND r.phone = o.phone)"
    " UNION"
    " SELECT p.phone FROM people p WHERE p.agent = ? AND p.updated_at < ?"
    " AND NOT EXISTS (SELECT 1 FROM messages r WHERE r.agent = p.agent AND r.phone = p.phone)"
    " AND NOT EXISTS (SELECT 1 FROM opt_outs o WHERE o.agent = p.agent AND o.phone = p.phone)"
    " ORDER BY 1"
)
# (agent, before), through the index messages_archived_age (agent, archived, created_at).
ARCHIVED_BEFORE = (
    "SELECT DISTINCT phone FROM messages WHERE agent = ? AND archived = 1 AND created_at < ?"
    " ORDER BY phone"
)


@dataclass(frozen=True, slots=True)
class ArchivedErasure:
    """Archived turns deleted, and the person's remaining turns whose keyword text (a turn
    with its neighbours, server/indexer.py turn_text) held one of them."""

    deleted: list[int]
    retexted: list[int]


class RetentionQueries(Queries):
    def all_agent_settings(self) -> dict[str, dict[str, Any]]:
        """The stored overrides of every agent that has any."""
        rows = self._reader().execute("SELECT agent, settings FROM agent_settings ORDER BY agent")
        return {str(r[0]): dict(json.loads(r[1])) for r in rows}

    def quiet_people(self, agent: str, before: str) -> list[str]:
        """Phones of the agent's people whose newest turn (by id, as everywhere: the store's
        order) was made before `before`, and of people with an opt-out older than that and no
        turn. A candidate list: the forget checks again, in its transaction, that no turn or
        opt-out of theirs is newer (a backfilled turn may be newer than a later-stored one).
        Reads the (agent, phone, id) index, then one row per person."""
        rows = self._reader().execute(QUIET_PEOPLE, (agent, before) * 3)
        return [str(r[0]) for r in rows]

    def people_with_archived_before(self, agent: str, before: str) -> list[str]:
        """Phones of the agent's people with archived turns made before `before` (the index
        messages_archived_age, schema version 6)."""
        rows = self._reader().execute(ARCHIVED_BEFORE, (agent, before))
        return [str(r[0]) for r in rows]

    def delete_archived_turns(
        self, agent: str, phone: str, before: str, *, window: int
    ) -> ArchivedErasure:
        """Delete the person's archived turns made before `before`, in one transaction, and
        queue for the indexer the deleted turns (their vectors go) and the turns within
        `window` of one (their keyword text is made again without it)."""
        now = self._now()
        with self._person_transaction(agent, phone) as conn:
            turns = conn.execute(
                "SELECT id, archived, created_at FROM messages WHERE agent = ? AND phone = ?"
                " ORDER BY id",
                (agent, phone),
            ).fetchall()
            doomed = {i for i, t in enumerate(turns) if t[1] and t[2] < before}
            near = {
                j
                for i in doomed
                for j in range(max(0, i - window), min(len(turns), i + window + 1))
                if j not in doomed
            }
            deleted = [int(turns[i][0]) for i in sorted(doomed)]
            retexted = [int(turns[j][0]) for j in sorted(near)]
            for chunk in chunks(deleted):
                marks = ",".join("?" * len(chunk))
                conn.execute(f"DELETE FROM messages WHERE id IN ({marks})", tuple(chunk))
            for turn_id in deleted + retexted:
                enqueue(conn, "turn", str(turn_id), agent, phone, now)
        return ArchivedErasure(deleted=deleted, retexted=retexted)
