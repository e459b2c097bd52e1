"""The indexer's outbox, and the sources it embeds (turns, memories, summaries)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from server.store.db import Conn, Queries
from server.store.records import (
    OutboxItem,
)
from server.store.util import chunks


class OutboxQueries(Queries):
    def iter_sources(self, kind: str, chunk: int = 2000) -> Iterator[list[str]]:
        """Every id of a kind, in chunks, for a rebuild of the index."""
        source = _SOURCES[kind]
        sql = f"SELECT {source.ref} FROM {source.table} ORDER BY {source.order}"
        for batch in self._db.stream(sql, chunk):
            yield [r[0] for r in batch]

    def count_sources(self) -> int:
        row = (
            self._reader()
            .execute(
                "SELECT (SELECT COUNT(*) FROM messages) + (SELECT COUNT(*) FROM memories)"
                " + (SELECT COUNT(*) FROM summaries)"
            )
            .fetchone()
        )
        return int(row[0])

    def outbox_size(self) -> int:
        row = self._reader().execute("SELECT COUNT(*) FROM outbox").fetchone()
        return int(row[0])

    def oldest_outbox_time(self) -> str | None:
        row = self._reader().execute("SELECT MIN(enqueued_at) FROM outbox").fetchone()
        return None if row is None else row[0]

    def outbox_batch(self, limit: int) -> list[OutboxItem]:
        rows = self._reader().execute(
            "SELECT id, kind, ref_id, agent, phone FROM outbox ORDER BY id LIMIT ?", (limit,)
        )
        return [OutboxItem(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    def outbox_for(self, kind: str, ref_ids: Sequence[str]) -> list[OutboxItem]:
        found: list[OutboxItem] = []
        for chunk in chunks(list(ref_ids)):  # (PostgreSQL refuses an empty IN list)
            marks = ",".join("?" * len(chunk))
            rows = self._reader().execute(
                "SELECT id, kind, ref_id, agent, phone FROM outbox"
                f" WHERE kind = ? AND ref_id IN ({marks})",
                (kind, *chunk),
            )
            found.extend(OutboxItem(r[0], r[1], r[2], r[3], r[4]) for r in rows)
        return sorted(found, key=lambda item: item.id)

    def outbox_done(self, ids: Sequence[int]) -> None:
        with self._transaction() as conn:
            conn.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in ids])

    def existing_refs(self, kind: str, refs: Sequence[str]) -> set[str]:
        """Which of these ref_ids of a kind still have their source row (a reindex's orphan
        check: a row is an orphan when SQLite no longer has it, not when a scan missed it)."""
        source = _SOURCES[kind]
        found: set[str] = set()
        for chunk in chunks(_keys_of(source, refs)):
            marks = ",".join("?" * len(chunk))
            rows = self._reader().execute(
                f"SELECT {source.ref} FROM {source.table} WHERE {source.key} IN ({marks})",
                tuple(chunk),
            )
            found.update(str(r[0]) for r in rows)
        return found

    def stored_under(self, agent: str, phone: str, index_ids: Sequence[str]) -> set[str]:
        """Which of these index row ids ("<kind>:<ref_id>") name an item the database holds
        under this person now (a move elsewhere may have taken it, or brought it back)."""
        refs: dict[str, list[str]] = {}
        for index_id in index_ids:
            kind, _, ref = index_id.partition(":")
            if kind in _SOURCES:
                refs.setdefault(kind, []).append(ref)
        found: set[str] = set()
        for kind, wanted in refs.items():
            source = _SOURCES[kind]
            for chunk in chunks(_keys_of(source, wanted)):
                marks = ",".join("?" * len(chunk))
                rows = self._reader().execute(
                    f"SELECT {source.ref} FROM {source.table} WHERE {source.key} IN ({marks})"
                    " AND agent = ? AND phone = ?",
                    (*chunk, agent, phone),
                )
                found.update(f"{kind}:{r[0]}" for r in rows)
        return found

    def outbox_of(self, agent: str, phone: str) -> list[OutboxItem]:
        """The person's items waiting for the indexer."""
        rows = self._reader().execute(
            "SELECT id, kind, ref_id, agent, phone FROM outbox WHERE agent = ? AND phone = ?"
            " ORDER BY id",
            (agent, phone),
        )
        return [OutboxItem(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    def queued_refs(self, kind: str) -> set[str]:
        """ref_ids of a kind waiting in the outbox."""
        rows = self._reader().execute("SELECT ref_id FROM outbox WHERE kind = ?", (kind,))
        return {str(r[0]) for r in rows}

    def enqueue_refs(self, kind: str, refs: Sequence[str]) -> int:
        """Queue these items of a kind for the indexer (those whose source still exists)."""
        source = _SOURCES[kind]
        queued = 0
        now = self._now()
        with self._transaction() as conn:
            for chunk in chunks(_keys_of(source, refs)):
                marks = ",".join("?" * len(chunk))
                queued += int(
                    conn.execute(
                        "INSERT INTO outbox (kind, ref_id, agent, phone, enqueued_at)"
                        f" SELECT ?, {source.ref}, agent, phone, ? FROM {source.table}"
                        f" WHERE {source.key} IN ({marks})",
                        (kind, now, *chunk),
                    ).rowcount
                )
        return queued

    def enqueue_person(self, agent: str, phone: str) -> int:
        """Queue every turn, memory and summary of one person for the indexer."""
        now = self._now()
        queued = 0
        with self._person_transaction(agent, phone) as conn:
            for kind, source in _SOURCES.items():
                queued += int(
                    conn.execute(
                        "INSERT INTO outbox (kind, ref_id, agent, phone, enqueued_at)"
                        f" SELECT ?, {source.ref}, agent, phone, ? FROM {source.table}"
                        " WHERE agent = ? AND phone = ?",
                        (kind, now, agent, phone),
                    ).rowcount
                )
        return queued

    def enqueue_everything(self) -> int:
        """Queue every turn, memory and summary for the indexer (a rebuild for a new model)."""
        with self._transaction() as conn:
            return sum(enqueue_all(conn, kind, self._now()) for kind in _SOURCES)


@dataclass(frozen=True, slots=True)
class _Source:
    table: str
    ref: str  # the SQL of an item's ref_id: the index row is "<kind>:<ref_id>"
    order: str  # the table's own key, for reading every item in order
    key: str  # the column to look ref_ids up by (through its index where there is one)
    numeric: bool = False  # ref_ids are the text of integer keys


_SOURCES = {
    "turn": _Source("messages", "CAST(id AS TEXT)", "id", "id", numeric=True),
    "fact": _Source("memories", "id", "id", "id"),
    "summary": _Source(
        "summaries", "agent || '|' || phone", "agent, phone", "agent || '|' || phone"
    ),
}


def _keys_of(source: _Source, refs: Sequence[str]) -> list[Any]:
    if not source.numeric:
        return list(refs)
    return [int(r) for r in refs if r.isdigit()]


def enqueue_all(conn: Conn, kind: str, now: str) -> int:
    """Queue every item of one kind for the indexer."""
    source = _SOURCES[kind]
    return int(
        conn.execute(
            "INSERT INTO outbox (kind, ref_id, agent, phone, enqueued_at)"
            f" SELECT ?, {source.ref}, agent, phone, ? FROM {source.table}",
            (kind, now),
        ).rowcount
    )


def enqueue(conn: Conn, kind: str, ref_id: str, agent: str, phone: str | None, now: str) -> None:
    conn.execute(
        "INSERT INTO outbox (kind, ref_id, agent, phone, enqueued_at) VALUES (?, ?, ?, ?, ?)",
        (kind, ref_id, agent, phone, now),
    )
