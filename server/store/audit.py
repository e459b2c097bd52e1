"""The audit log of staff searches, and what a forget removes from it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import phonenumbers

from server.phones import LEGACY_PHONE, e164
from server.store.db import Conn, Queries
from server.store.records import AuditEntry

FORGOTTEN = "[forgotten]"
MOVE = "[move]"  # the query of a move's entry (store/moves.py)
# meta: how many forgets have committed, a count that names no one. A staff search reads it
# before it reads anything; its audit entry is checked for a forget only when it has changed.
ERASURES = "erasures"


@dataclass(frozen=True, slots=True)
class AuditBaseline:
    """What a staff search's audit entry is checked against, read before the search reads
    anything: the forgets committed then, and the people (agent, phone) the numbers the
    search names (in its text or its phone filter) had then."""

    erasures: int
    named: frozenset[tuple[str, str]]


class AuditQueries(Queries):
    def audit_baseline(self, query: str, phone: str | None) -> AuditBaseline:
        """Read before a staff search reads anything (see add_audit)."""
        reader = self._reader()
        # The count first: a forget committed after it is one the search may have raced.
        erasures = _erasure_count(reader)
        numbers = numbers_named(query) | ({phone} if phone else set())
        return AuditBaseline(erasures, frozenset(_people_of(reader, numbers)))

    def add_audit(
        self,
        *,
        key_id: str,
        query: str,
        filters: dict[str, Any],
        results: list[list[str]],
        baseline: AuditBaseline,
    ) -> tuple[int, list[list[str]]]:
        """Record a staff search; results are the [agent, phone] pairs it returned. A person
        forgotten while the search ran (after its reads, before this write) is left out, and
        the query text then goes too, as a forget does to the entries it finds; so does the
        phone filter if it was theirs. Nothing is blanked when no forget committed since the
        baseline, nor for a number that had nothing stored when the search began: a number
        of no one, or of someone else, is audited as asked. Returns the entry's id and the
        people kept: the caller must not show the others."""
        with self._transaction() as conn:
            erasures = _erasure_count(conn, hold=self._db.name == "postgresql")
            kept = [pair for pair in results if person_exists(conn, pair[0], pair[1])]
            if erasures != baseline.erasures:
                gone = {phone for agent, phone in results if [agent, phone] not in kept}
                gone |= {p for a, p in baseline.named if not person_exists(conn, a, p)}
                if gone or len(kept) < len(results):
                    query = FORGOTTEN
                    if filters.get("phone") in gone:
                        filters = {**filters, "phone": FORGOTTEN}
            row = conn.execute(
                "INSERT INTO audit (at, key_id, query, filters, result_count, results)"
                " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                (self._now(), key_id, query, json.dumps(filters), len(kept), json.dumps(kept)),
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


def count_erasure(conn: Conn) -> None:
    """Count a forget, in its transaction, before it redacts the log: an add_audit that read
    the count before waits for the forget (PostgreSQL: its row lock; SQLite: one writer), so
    the entry it writes is either found by the forget's redaction or written after the
    forget's deletes, and checked against them."""
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, '1') ON CONFLICT (key) DO UPDATE"
        " SET value = CAST(CAST(meta.value AS BIGINT) + 1 AS TEXT)",
        (ERASURES,),
    )


def _erasure_count(conn: Conn, *, hold: bool = False) -> int:
    """The forgets committed. hold (PostgreSQL, in a write transaction): the row is locked
    for share until the transaction ends, so a forget of another replica counts itself
    either before this read (and this transaction sees its deletes) or after this
    transaction commits (and its redaction sees this entry). The row is made when missing:
    a forget that makes it meanwhile is then waited for too."""
    lock = " FOR SHARE" if hold else ""
    row = conn.execute(f"SELECT value FROM meta WHERE key = ?{lock}", (ERASURES,)).fetchone()
    if row is None and hold:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, '0') ON CONFLICT (key) DO NOTHING",
            (ERASURES,),
        )
        row = conn.execute(f"SELECT value FROM meta WHERE key = ?{lock}", (ERASURES,)).fetchone()
    return 0 if row is None else int(row[0])


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
    """The entries that returned, filtered by or named the number. LIKE only narrows the
    scan (a query's number may be written with spaces: its digits in order); each entry is
    then compared exactly, so a longer or shorter number is never taken for this one."""
    rows = conn.execute(
        "SELECT id, query, filters, results FROM audit"
        " WHERE results LIKE ? OR filters LIKE ? OR query LIKE ?",
        (f"%{phone}%", f"%{phone}%", _digits_in_order(phone)),
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
        involved = named or len(results) < len(before) or phone in numbers_named(row["query"])
        if involved:
            conn.execute(
                "UPDATE audit SET query = ?, results = ?, filters = ? WHERE id = ?",
                (FORGOTTEN, json.dumps(results), json.dumps(filters), row["id"]),
            )


def _digits_in_order(phone: str) -> str:
    """A LIKE pattern that every way of writing the number matches: the digits of its
    national part in order, anything between them (spaces, dashes, a country code or a
    national prefix before them)."""
    try:
        national = str(phonenumbers.parse(phone, None).national_number)
    except phonenumbers.NumberParseException:  # a number an earlier release stored
        national = phone.lstrip("+")
    return "%" + "%".join(national) + "%"


# -- the numbers a text names -----------------------------------------------------------------

# How people write a number in a sentence: '+' (or 00, or a URL's %2B) then digit groups with a
# few separators between them (spaces of any kind, dots, dashes, parentheses, slashes, and
# the invisible characters a copy from a web page brings).
_SEPARATORS = r"[\s().\-/\u2010-\u2015\u200b-\u200d\u2060\ufeff]"
_NUMBER_RUN = re.compile(rf"(?:\+|%2[bB]|(?<![\w+])00)[0-9]+(?:{_SEPARATORS}{{1,3}}[0-9]+)*")
_GROUP = re.compile(r"[0-9]+")
_DIGITS_MIN, _DIGITS_MAX = 6, 17  # after '+' or 00, as validation.PHONE_COMPACT takes them


def numbers_named(text: str) -> set[str]:
    """The numbers a text names, in E.164 as they are stored (a number an earlier release
    stored that cannot exist: as written, without separators). Each run of digit groups is
    read at every group boundary: '+34 600 111 222 2023' names +34600111222 (a year after
    it), '+49 30 123456 7' names +4930123456 and +49301234567 (it could be either), and
    '+49301234567' names only itself: a number is never found inside a longer one."""
    found: set[str] = set()
    for run in _NUMBER_RUN.finditer(text):
        written = run.group()
        after = {"+": 1, "%": 3}.get(written[0], 2)  # '+', '%2B' or 00
        digits = ""
        for group in _GROUP.finditer(written, after):
            digits += group.group()
            if len(digits) > _DIGITS_MAX:
                break
            number = _stored_form(f"+{digits}")
            if number is not None:
                found.add(number)
    return found


def _stored_form(compact: str) -> str | None:
    """compact ('+' and digits) as the store holds it (validation.stored_phone_number's
    reading), or None."""
    if not _DIGITS_MIN <= len(compact) - 1 <= _DIGITS_MAX:
        return None
    number = e164(compact)
    if number is not None:
        return number
    return compact if LEGACY_PHONE.fullmatch(compact) else None


def _people_of(conn: Conn, phones: Iterable[str]) -> set[tuple[str, str]]:
    """The (agent, phone) pairs with anything stored, among these numbers."""
    found: set[tuple[str, str]] = set()
    numbers = sorted(phones)
    for start in range(0, len(numbers), 100):
        chunk = numbers[start : start + 100]
        marks = ", ".join("?" * len(chunk))
        rows = conn.execute(
            f"SELECT agent, phone FROM messages WHERE phone IN ({marks}) UNION"
            f" SELECT agent, phone FROM memories WHERE phone IN ({marks}) UNION"
            f" SELECT agent, phone FROM summaries WHERE phone IN ({marks})",
            tuple(chunk) * 3,
        ).fetchall()
        found |= {(str(r[0]), str(r[1])) for r in rows}
    return found


def person_exists(conn: Conn, agent: str, phone: str) -> bool:
    """Whether anything of the person is stored for the agent."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM messages WHERE agent = ? AND phone = ?)"
        " OR EXISTS (SELECT 1 FROM memories WHERE agent = ? AND phone = ?)"
        " OR EXISTS (SELECT 1 FROM summaries WHERE agent = ? AND phone = ?)",
        (agent, phone) * 3,
    ).fetchone()
    return bool(row[0])
