"""People's names: the name an agent knows a person by, and who is called a given word."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from server.store.db import Conn, Queries


@dataclass(frozen=True, slots=True)
class PersonName:
    name: str
    updated_at: str


class PeopleQueries(Queries):
    def set_name(self, agent: str, phone: str, name: str, words: Sequence[str]) -> PersonName:
        """Set the person's name and the folded words staff search finds them by, under the
        person's lock, as every write of a person's rows. The same name again changes
        nothing, not even its time."""
        now = self._now()
        with self._person_transaction(agent, phone) as conn:
            before = name_of(conn, agent, phone)
            if before is not None and before.name == name:
                return before
            conn.execute(
                "INSERT INTO people (agent, phone, name, updated_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (agent, phone) DO UPDATE SET name = excluded.name,"
                " updated_at = excluded.updated_at",
                (agent, phone, name, now),
            )
            _set_words(conn, agent, phone, words)
            return PersonName(name, now)

    def clear_name(self, agent: str, phone: str) -> bool:
        """Clear the person's name; whether one was set."""
        with self._person_transaction(agent, phone) as conn:
            return delete_names(conn, agent, phone)

    def name_of(self, agent: str, phone: str) -> PersonName | None:
        return name_of(self._reader(), agent, phone)

    def people_called(
        self, words: Sequence[str], agents: Sequence[str] | None, *, limit: int
    ) -> list[tuple[str, str, str]]:
        """(agent, phone, word) of the people whose name has one of these folded words, of
        these agents (None: all), through the words' primary key; at most `limit` a word."""
        if agents is not None and not agents:
            return []
        sql = "SELECT agent, phone, word FROM person_name_words WHERE word = ?"
        if agents is not None:
            sql += " AND agent IN (" + ",".join("?" * len(agents)) + ")"
        found: list[tuple[str, str, str]] = []
        for word in sorted(set(words)):  # through the primary key (word, agent, phone)
            args = (word, *(agents or ()), limit)
            rows = self._reader().execute(sql + " ORDER BY agent, phone LIMIT ?", args)
            found += [(str(r[0]), str(r[1]), str(r[2])) for r in rows]
        return found


def learn_name(
    conn: Conn, agent: str, phone: str, name: str, words: Sequence[str], now: str
) -> bool:
    """Inside a person's transaction: give the person `name` when they have none (a name set
    through the API, or learned before, stays). Whether it was set."""
    if name_of(conn, agent, phone) is not None:
        return False
    conn.execute(
        "INSERT INTO people (agent, phone, name, updated_at) VALUES (?, ?, ?, ?)",
        (agent, phone, name, now),
    )
    _set_words(conn, agent, phone, words)
    return True


def name_of(conn: Conn, agent: str, phone: str) -> PersonName | None:
    row = conn.execute(
        "SELECT name, updated_at FROM people WHERE agent = ? AND phone = ?", (agent, phone)
    ).fetchone()
    return None if row is None else PersonName(str(row[0]), str(row[1]))


def _set_words(conn: Conn, agent: str, phone: str, words: Sequence[str]) -> None:
    conn.execute("DELETE FROM person_name_words WHERE agent = ? AND phone = ?", (agent, phone))
    for word in sorted(set(words)):
        conn.execute(
            "INSERT INTO person_name_words (word, agent, phone) VALUES (?, ?, ?)",
            (word, agent, phone),
        )


def delete_names(conn: Conn, agent: str, phone: str) -> bool:
    """In a forget's (or a move's) transaction: the person's name and its words; whether
    there was one."""
    gone = conn.execute("DELETE FROM people WHERE agent = ? AND phone = ?", (agent, phone))
    conn.execute("DELETE FROM person_name_words WHERE agent = ? AND phone = ?", (agent, phone))
    return bool(gone.rowcount)


def move_names(conn: Conn, agent: str, old: str, new: str) -> int:
    """In a move's transaction: the old number's name goes to the new one, unless the new
    number has a name set later (the newer of the two stays). Returns the names moved."""
    moving = name_of(conn, agent, old)
    if moving is None:
        return 0
    staying = name_of(conn, agent, new)
    if staying is None or moving.updated_at > staying.updated_at:
        delete_names(conn, agent, new)
        for table in ("people", "person_name_words"):
            conn.execute(
                f"UPDATE {table} SET phone = ? WHERE agent = ? AND phone = ?", (new, agent, old)
            )
        return 1
    delete_names(conn, agent, old)
    return 0
