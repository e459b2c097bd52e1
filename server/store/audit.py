"""The audit log of staff searches, and what a forget removes from it."""

from __future__ import annotations

import json
import re
from typing import Any

from server.store.db import Conn, Queries
from server.store.records import AuditEntry


class AuditQueries(Queries):
    def add_audit(
        self, *, key_id: str, query: str, filters: dict[str, Any], results: list[list[str]]
    ) -> tuple[int, list[list[str]]]:
        """Record a staff search; results are the [agent, phone] pairs it returned. A person
        forgotten while the search ran (after its reads, before this write) is left out, and
        the query text then goes too, as a forget does to the entries it finds. Returns the
        entry's id and the people kept: the caller must not show the others."""
        with self._transaction() as conn:
            kept = [pair for pair in results if person_exists(conn, pair[0], pair[1])]
            # A phone the search named (its filter, or in its text) of whom nothing is stored
            # may be someone forgotten while it ran: the entry keeps neither.
            named = set(PHONE_IN_TEXT.findall(query))
            if filters.get("phone"):
                named.add(str(filters["phone"]))
            gone = {p for p in named if not phone_exists(conn, p, filters.get("agents"))}
            if len(kept) < len(results) or gone:
                query = FORGOTTEN
                if filters.get("phone"):
                    filters = {**filters, "phone": FORGOTTEN}
            results = kept
            row = conn.execute(
                "INSERT INTO audit (at, key_id, query, filters, result_count, results)"
                " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                (
                    self._now(),
                    key_id,
                    query,
                    json.dumps(filters),
                    len(results),
                    json.dumps(results),
                ),
            ).fetchone()
            return int(row[0]), kept

    def audit_entries(self, *, limit: int, before_id: int | None) -> list[AuditEntry]:
        rows = self._reader().execute(
            "SELECT id, at, key_id, query, filters, result_count, results FROM audit"
            " WHERE id < ? ORDER BY id DESC LIMIT ?",
            (before_id if before_id is not None else 2**63 - 1, limit),
        )
        return [
            AuditEntry(
                id=r["id"],
                at=r["at"],
                key_id=r["key_id"],
                query=r["query"],
                filters=json.loads(r["filters"]),
                result_count=r["result_count"],
                results=json.loads(r["results"]),
            )
            for r in rows
        ]


FORGOTTEN = "[forgotten]"
MOVE = "[move]"  # the query of a move's entry (store/moves.py)


def redact_audit(conn: Conn, agent: str, phone: str) -> None:
    """Remove a forgotten person from the audit log. An entry that returned them, filtered by
    their phone or named it loses its query text too: a search that found someone is likely
    to quote their words ("who said ..."), which must go with them. Who searched and when
    stay; so do the other people it returned. A person who moved here from other numbers
    (a move's entry: filters.from) is removed under those numbers too, and theirs before."""
    pending, seen = [phone], set()
    while pending:
        number = pending.pop()
        if number not in seen:
            seen.add(number)
            pending.extend(_moved_from(conn, agent, number))
            _redact_number(conn, agent, number)


def _moved_from(conn: Conn, agent: str, phone: str) -> list[str]:
    """The numbers this agent's person moved to `phone` from, by the moves' audit entries."""
    rows = conn.execute(
        "SELECT filters FROM audit WHERE query = ? AND filters LIKE ?", (MOVE, f"%{phone}%")
    ).fetchall()
    found = []
    for row in rows:
        filters = json.loads(row["filters"])
        if filters.get("phone") == phone and agent in filters.get("agents", []):
            found.append(str(filters.get("from")))
    return found


def _redact_number(conn: Conn, agent: str, phone: str) -> None:
    rows = conn.execute(
        "SELECT id, query, filters, results FROM audit"
        " WHERE results LIKE ? OR filters LIKE ? OR query LIKE ?",
        (f"%{phone}%",) * 3,
    ).fetchall()
    for row in rows:
        before = json.loads(row["results"])
        results = [r for r in before if r != [agent, phone]]
        filters = json.loads(row["filters"])
        named = phone in (filters.get("phone"), filters.get("from"))
        if named:  # a search filtered by their number, or a move from or to it
            filters["phone"] = FORGOTTEN
            if "from" in filters:
                filters["from"] = FORGOTTEN
        involved = named or len(results) < len(before) or phone in row["query"]
        conn.execute(
            "UPDATE audit SET query = ?, results = ?, filters = ? WHERE id = ?",
            (
                FORGOTTEN if involved else row["query"],
                json.dumps(results),
                json.dumps(filters),
                row["id"],
            ),
        )


PHONE_IN_TEXT = re.compile(r"\+[0-9]{8,15}")


def phone_exists(conn: Conn, phone: str, agents: list[str] | None) -> bool:
    """Whether anything of a phone is stored, for these agents (None: any)."""
    found = conn.execute(
        "SELECT agent FROM messages WHERE phone = ? UNION SELECT agent FROM memories"
        " WHERE phone = ? UNION SELECT agent FROM summaries WHERE phone = ?",
        (phone,) * 3,
    ).fetchall()
    return any(agents is None or row[0] in agents for row in found)


def person_exists(conn: Conn, agent: str, phone: str) -> bool:
    """Whether anything of the person is stored for the agent."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM messages WHERE agent = ? AND phone = ?)"
        " OR EXISTS (SELECT 1 FROM memories WHERE agent = ? AND phone = ?)"
        " OR EXISTS (SELECT 1 FROM summaries WHERE agent = ? AND phone = ?)",
        (agent, phone) * 3,
    ).fetchone()
    return bool(row[0])
