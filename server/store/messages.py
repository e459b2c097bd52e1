"""Turns: stored, listed, archived, and the people waiting for compaction."""

from __future__ import annotations

from collections.abc import Sequence

from server.store.db import Conn, Queries
from server.store.outbox import enqueue
from server.store.records import MESSAGE_COLUMNS, Message, message_of
from server.store.util import chunks


class MessageQueries(Queries):
    def insert_message(
        self,
        *,
        agent: str,
        phone: str,
        role: str,
        content: str,
        event_id: str | None,
        number: str | None,
        created_at: str | None,
    ) -> tuple[int, bool]:
        """Store a turn and queue it for the indexer. Returns (id, stored); a known event_id
        returns the first turn's id and stores nothing.

        A new user turn lifts the person's opt-out (STOP) in the same transaction, under the
        person's lock, so a turn and an opt-out sent through two replicas resolve in the order
        the database committed them, whatever their clocks say: an opt-out committed before
        the turn is lifted, one committed after it stays. A turn given its own created_at (an
        import of old turns) lifts only an opt-out made at or before that time."""
        now = self._now()
        with self._person_transaction(agent, phone) as conn:
            if event_id is not None:
                row = conn.execute(
                    "SELECT id FROM messages WHERE agent = ? AND event_id = ?", (agent, event_id)
                ).fetchone()
                if row is not None:
                    return int(row[0]), False
            # Another process (a replica) may store the same event between the check above
            # and this insert: the unique index decides, and the loser reads the winner's id.
            row = conn.execute(
                "INSERT INTO messages (agent, phone, event_id, number, role, content, created_at,"
                " stored_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (agent, event_id) WHERE event_id IS NOT NULL DO NOTHING"
                " RETURNING id",
                (agent, phone, event_id, number, role, content, created_at or now, now),
            ).fetchone()
            if row is None:
                row = conn.execute(
                    "SELECT id FROM messages WHERE agent = ? AND event_id = ?", (agent, event_id)
                ).fetchone()
                return int(row[0]), False
            message_id = int(row[0])
            enqueue(conn, "turn", str(message_id), agent, phone, now)
            if role == "user":
                conn.execute(
                    "DELETE FROM opt_outs WHERE agent = ? AND phone = ?"
                    " AND (CAST(? AS TEXT) IS NULL OR opted_out_at <= ?)",
                    (agent, phone, created_at, created_at),
                )
            return message_id, True

    def recent_turns(self, agent: str, phone: str, limit: int) -> list[Message]:
        """Turns not yet archived, newest first."""
        rows = self._reader().execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE agent = ? AND phone = ?"
            " AND archived = 0 ORDER BY id DESC LIMIT ?",
            (agent, phone, limit),
        )
        return [message_of(r) for r in rows]

    def latest_times(self, agent: str, phone: str, count: int = 2) -> list[str]:
        """created_at of the person's newest turns (archived or not), newest first."""
        rows = self._reader().execute(
            "SELECT created_at FROM messages WHERE agent = ? AND phone = ?"
            " ORDER BY id DESC LIMIT ?",
            (agent, phone, count),
        )
        return [r[0] for r in rows]

    def list_messages(
        self,
        agent: str,
        phone: str,
        *,
        limit: int,
        before_id: int | None,
        after_id: int | None = None,
    ) -> list[Message]:
        """All turns of a person, archived or not, newest first: the newest before a cursor,
        or (after_id) the oldest after one."""
        if after_id is not None:
            rows = self._reader().execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE agent = ? AND phone = ?"
                " AND id > ? ORDER BY id ASC LIMIT ?",
                (agent, phone, after_id, limit),
            )
            return [message_of(r) for r in rows][::-1]
        rows = self._reader().execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE agent = ? AND phone = ?"
            " AND id < ? ORDER BY id DESC LIMIT ?",
            (agent, phone, before_id if before_id is not None else 2**63 - 1, limit),
        )
        return [message_of(r) for r in rows]

    def neighbours(self, message: Message, window: int) -> tuple[list[str], list[str]]:
        """Contents of up to `window` turns before and after a turn, in order."""
        conn = self._reader()
        args = (message.agent, message.phone, message.id, window)
        before = conn.execute(
            "SELECT content FROM messages WHERE agent = ? AND phone = ? AND id < ?"
            " ORDER BY id DESC LIMIT ?",
            args,
        ).fetchall()
        after = conn.execute(
            "SELECT content FROM messages WHERE agent = ? AND phone = ? AND id > ?"
            " ORDER BY id LIMIT ?",
            args,
        ).fetchall()
        return [r[0] for r in reversed(before)], [r[0] for r in after]

    def archived_turns(self, agent: str, phone: str) -> list[Message]:
        """The person's archived turns, oldest first (what excerpts are drawn from)."""
        rows = self._reader().execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE agent = ? AND phone = ?"
            " AND archived = 1 ORDER BY id",
            (agent, phone),
        )
        return [message_of(r) for r in rows]

    def archived_turns_after(self, agent: str, phone: str, after_id: int) -> list[Message]:
        """The person's archived turns newer than `after_id`, oldest first: what an archive
        added to a copy of the rest."""
        rows = self._reader().execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE agent = ? AND phone = ?"
            " AND archived = 1 AND id > ? ORDER BY id",
            (agent, phone, after_id),
        )
        return [message_of(r) for r in rows]

    def archive_mark(self, agent: str, phone: str) -> tuple[int, int, int]:
        """(count, lowest id, highest id) of the person's archived turns: it changes whenever
        that set does (turns are archived, moved in, or erased), so a copy can be checked
        against it with one indexed read."""
        row = (
            self._reader()
            .execute(
                "SELECT COUNT(*), MIN(id), MAX(id) FROM messages WHERE agent = ? AND phone = ?"
                " AND archived = 1",
                (agent, phone),
            )
            .fetchone()
        )
        return int(row[0]), int(row[1] or 0), int(row[2] or 0)

    def all_messages(self, agent: str, phone: str) -> list[Message]:
        rows = self._reader().execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE agent = ? AND phone = ? ORDER BY id",
            (agent, phone),
        )
        return [message_of(r) for r in rows]

    def waiting_turns(self, agent: str, phone: str) -> int:
        row = (
            self._reader()
            .execute(
                "SELECT COUNT(*) FROM messages WHERE agent = ? AND phone = ? AND archived = 0",
                (agent, phone),
            )
            .fetchone()
        )
        return int(row[0])

    def archive_turns(self, agent: str, phone: str, through_id: int) -> list[int]:
        """Mark the person's waiting turns up to through_id archived and queue them for the
        indexer. Returns the archived ids."""
        with self._person_transaction(agent, phone) as conn:
            return archive(conn, agent, phone, through_id, self._now())

    def people_to_compact(
        self, *, more_than: int, agent: str | None = None, phone: str | None = None
    ) -> list[tuple[str, str]]:
        """(agent, phone) of people with more than `more_than` turns waiting."""
        rows = self._reader().execute(
            "SELECT agent, phone FROM messages WHERE archived = 0"
            " AND (CAST(? AS TEXT) IS NULL OR agent = ?) AND (CAST(? AS TEXT) IS NULL OR phone = ?)"
            " GROUP BY agent, phone HAVING COUNT(*) > ? ORDER BY agent, phone",
            (agent, agent, phone, phone, more_than),
        )
        return [(r[0], r[1]) for r in rows]

    def messages_by_ids(self, ids: Sequence[int]) -> dict[int, Message]:
        rows = self._rows_by_ids(f"SELECT {MESSAGE_COLUMNS} FROM messages", ids)
        return {row["id"]: message_of(row) for row in rows}


def count_waiting(conn: Conn, agent: str, phone: str, ids: Sequence[int]) -> int:
    """How many of these turn ids are the person's and still waiting (not archived)."""
    total = 0
    for chunk in chunks(sorted(set(ids))):
        marks = ",".join("?" * len(chunk))
        total += int(
            conn.execute(
                f"SELECT COUNT(*) FROM messages WHERE id IN ({marks}) AND agent = ?"
                " AND phone = ? AND archived = 0",
                (*chunk, agent, phone),
            ).fetchone()[0]
        )
    return total


def archive(conn: Conn, agent: str, phone: str, through_id: int, now: str) -> list[int]:
    ids = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM messages WHERE agent = ? AND phone = ? AND archived = 0"
            " AND id <= ? ORDER BY id",
            (agent, phone, through_id),
        )
    ]
    conn.executemany("UPDATE messages SET archived = 1 WHERE id = ?", [(i,) for i in ids])
    for message_id in ids:
        enqueue(conn, "turn", str(message_id), agent, phone, now)
    return ids
