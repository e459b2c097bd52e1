"""SQLite storage: schema, migrations and every query. The only module that writes SQL."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.clock import Clock, format_time, utc_now

log = logging.getLogger(__name__)

# Each migration runs in its own transaction together with its record in schema_migrations.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        event_id TEXT,
        number TEXT,
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        content TEXT NOT NULL,
        created_at TEXT NOT NULL,
        stored_at TEXT NOT NULL,
        archived INTEGER NOT NULL DEFAULT 0
    );
    -- Idempotency per agent: one agent can never claim (and so drop) another agent's event ids.
    CREATE UNIQUE INDEX messages_event ON messages (agent, event_id) WHERE event_id IS NOT NULL;
    CREATE INDEX messages_person ON messages (agent, phone, id);
    CREATE INDEX messages_window ON messages (agent, phone, archived, id);

    CREATE TABLE summaries (
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        text TEXT NOT NULL,
        through_id INTEGER,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (agent, phone)
    );

    CREATE TABLE memories (
        id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        phone TEXT,
        content TEXT NOT NULL,
        type TEXT NOT NULL CHECK (type IN ('fact', 'preference', 'context')),
        status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected')),
        confidence REAL,
        source TEXT NOT NULL CHECK (source IN ('manual', 'extracted')),
        metadata TEXT NOT NULL DEFAULT '{}',
        session_id TEXT,
        task_id TEXT,
        graph_id TEXT,
        source_turns TEXT NOT NULL DEFAULT '[]',
        seen_count INTEGER NOT NULL DEFAULT 1,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        expires_at TEXT
    );
    CREATE INDEX memories_person ON memories (agent, phone, status, created_at);
    CREATE INDEX memories_agent ON memories (agent, created_at);

    CREATE TABLE memory_history (
        id INTEGER PRIMARY KEY,
        memory_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        phone TEXT,
        action TEXT NOT NULL,
        actor TEXT NOT NULL,
        old_content TEXT,
        new_content TEXT,
        at TEXT NOT NULL
    );
    CREATE INDEX memory_history_memory ON memory_history (memory_id, id);
    CREATE INDEX memory_history_person ON memory_history (agent, phone);

    CREATE TABLE keys (
        id TEXT PRIMARY KEY,
        hash TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL,
        agents TEXT NOT NULL DEFAULT '[]',
        created_at TEXT NOT NULL,
        revoked_at TEXT
    );

    CREATE TABLE agent_settings (
        agent TEXT PRIMARY KEY,
        settings TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );

    -- Work for the vector indexer: which row (kind, ref_id) must be (re)embedded or removed.
    CREATE TABLE outbox (
        id INTEGER PRIMARY KEY,
        kind TEXT NOT NULL,
        ref_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        phone TEXT,
        enqueued_at TEXT NOT NULL
    );
    """,
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
    """
    -- Who searched what across people: staff searches, readable by admins.
    CREATE TABLE audit (
        id INTEGER PRIMARY KEY,
        at TEXT NOT NULL,
        key_id TEXT NOT NULL,
        query TEXT NOT NULL,
        filters TEXT NOT NULL,
        result_count INTEGER NOT NULL,
        results TEXT NOT NULL
    );
    CREATE INDEX audit_at ON audit (id);
    """,
    # Ids are never reused (AUTOINCREMENT): without it SQLite hands out the highest deleted id
    # again, so after a forget a new turn could take a forgotten person's message id, and the
    # indexer acknowledging a batch by outbox id deleted the new rows' entries. SQLite cannot
    # add AUTOINCREMENT to a table: each is rebuilt, ids kept, and the sequence starts above
    # the highest id in use.
    """
    CREATE TABLE messages_v4 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        agent TEXT NOT NULL,
        phone TEXT NOT NULL,
        event_id TEXT,
        number TEXT,
        role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
        content TEXT NOT NULL,
        created_at TEXT NOT NULL,
        stored_at TEXT NOT NULL,
        archived INTEGER NOT NULL DEFAULT 0
    );
    INSERT INTO messages_v4 (id, agent, phone, event_id, number, role, content, created_at,
        stored_at, archived)
        SELECT id, agent, phone, event_id, number, role, content, created_at, stored_at, archived
        FROM messages;
    DROP TABLE messages;
    ALTER TABLE messages_v4 RENAME TO messages;
    CREATE UNIQUE INDEX messages_event ON messages (agent, event_id) WHERE event_id IS NOT NULL;
    CREATE INDEX messages_person ON messages (agent, phone, id);
    CREATE INDEX messages_window ON messages (agent, phone, archived, id);
    -- Whether a phone is known to any agent (the audit of a staff search by phone).
    CREATE INDEX messages_phone ON messages (phone);
    -- Above any turn id still referenced, not only the highest one stored.
    INSERT INTO sqlite_sequence (name, seq) SELECT 'messages', 0
        WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'messages');
    UPDATE sqlite_sequence SET seq = MAX(seq,
        COALESCE((SELECT MAX(CAST(ref_id AS INTEGER)) FROM outbox WHERE kind = 'turn'), 0),
        COALESCE((SELECT MAX(through_id) FROM summaries), 0))
        WHERE name = 'messages';

    CREATE TABLE memory_history_v4 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        memory_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        phone TEXT,
        action TEXT NOT NULL,
        actor TEXT NOT NULL,
        old_content TEXT,
        new_content TEXT,
        at TEXT NOT NULL
    );
    INSERT INTO memory_history_v4 (id, memory_id, agent, phone, action, actor, old_content,
        new_content, at)
        SELECT id, memory_id, agent, phone, action, actor, old_content, new_content, at
        FROM memory_history;
    DROP TABLE memory_history;
    ALTER TABLE memory_history_v4 RENAME TO memory_history;
    CREATE INDEX memory_history_memory ON memory_history (memory_id, id);
    CREATE INDEX memory_history_person ON memory_history (agent, phone);

    CREATE TABLE outbox_v4 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        ref_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        phone TEXT,
        enqueued_at TEXT NOT NULL
    );
    INSERT INTO outbox_v4 (id, kind, ref_id, agent, phone, enqueued_at)
        SELECT id, kind, ref_id, agent, phone, enqueued_at FROM outbox;
    DROP TABLE outbox;
    ALTER TABLE outbox_v4 RENAME TO outbox;
    CREATE INDEX outbox_person ON outbox (agent, phone);

    CREATE TABLE audit_v4 (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        key_id TEXT NOT NULL,
        query TEXT NOT NULL,
        filters TEXT NOT NULL,
        result_count INTEGER NOT NULL,
        results TEXT NOT NULL
    );
    INSERT INTO audit_v4 (id, at, key_id, query, filters, result_count, results)
        SELECT id, at, key_id, query, filters, result_count, results FROM audit;
    DROP TABLE audit;
    ALTER TABLE audit_v4 RENAME TO audit;
    """,
]


@dataclass(frozen=True, slots=True)
class Message:
    id: int
    agent: str
    phone: str
    event_id: str | None
    number: str | None
    role: str
    content: str
    created_at: str
    archived: bool


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    through_id: int | None
    updated_at: str


@dataclass(frozen=True, slots=True)
class Memory:
    id: str
    agent: str
    phone: str | None
    content: str
    type: str
    status: str
    confidence: float | None
    source: str
    metadata: dict[str, Any]
    session_id: str | None
    task_id: str | None
    graph_id: str | None
    source_turns: list[int]
    seen_count: int
    created_at: str
    updated_at: str
    expires_at: str | None


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    memory_id: str
    agent: str
    action: str
    actor: str
    old_content: str | None
    new_content: str | None
    at: str


@dataclass(frozen=True, slots=True)
class ApiKey:
    id: str
    scope: str
    agents: list[str]
    created_at: str
    revoked_at: str | None


@dataclass(frozen=True, slots=True)
class PersonErasure:
    messages: int
    memories: int
    summaries: int
    history: int


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """Filters of the memory list; None means no filter."""

    phone: str | None = None
    status: str | None = None
    type: str | None = None
    session_id: str | None = None
    task_id: str | None = None
    graph_id: str | None = None
    start_date: str | None = None
    end_date: str | None = None
    as_of: int | None = None

    EQUALITY = ("phone", "status", "type", "session_id", "task_id", "graph_id")

    def equalities(self) -> list[tuple[str, str]]:
        """(column, value) of the equality filters that are set."""
        return [(c, v) for c in self.EQUALITY if (v := getattr(self, c)) is not None]

    def matches(self, memory: Memory) -> bool:
        """The filters, checked on a memory in Python (the index may lag behind SQLite)."""
        if any(getattr(memory, column) != value for column, value in self.equalities()):
            return False
        if self.start_date is not None and memory.created_at < self.start_date:
            return False
        return self.end_date is None or memory.created_at <= self.end_date

    def sql(self, agent: str, as_of: int) -> tuple[str, tuple[Any, ...]]:
        clauses = ["agent = ?", "rowid <= ?"]
        args: list[Any] = [agent, as_of]
        for column, value in self.equalities():
            clauses.append(f"{column} = ?")
            args.append(value)
        if self.start_date is not None:
            clauses.append("created_at >= ?")
            args.append(self.start_date)
        if self.end_date is not None:
            clauses.append("created_at <= ?")
            args.append(self.end_date)
        return " AND ".join(clauses), tuple(args)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    at: str
    key_id: str
    query: str
    filters: dict[str, Any]
    result_count: int
    results: list[list[str]]


@dataclass(frozen=True, slots=True)
class OutboxItem:
    id: int
    kind: str  # turn | fact | summary
    ref_id: str
    agent: str
    phone: str | None


_MESSAGE_COLUMNS = "id, agent, phone, event_id, number, role, content, created_at, archived"
_MEMORY_COLUMNS = (
    "id, agent, phone, content, type, status, confidence, source, metadata, session_id, task_id,"
    " graph_id, source_turns, seen_count, created_at, updated_at, expires_at"
)


def _message(row: sqlite3.Row) -> Message:
    return Message(
        id=row["id"],
        agent=row["agent"],
        phone=row["phone"],
        event_id=row["event_id"],
        number=row["number"],
        role=row["role"],
        content=row["content"],
        created_at=row["created_at"],
        archived=bool(row["archived"]),
    )


def _memory(row: sqlite3.Row) -> Memory:
    return Memory(
        id=row["id"],
        agent=row["agent"],
        phone=row["phone"],
        content=row["content"],
        type=row["type"],
        status=row["status"],
        confidence=row["confidence"],
        source=row["source"],
        metadata=json.loads(row["metadata"]),
        session_id=row["session_id"],
        task_id=row["task_id"],
        graph_id=row["graph_id"],
        source_turns=json.loads(row["source_turns"]),
        seen_count=row["seen_count"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        expires_at=row["expires_at"],
    )


def _key(row: sqlite3.Row) -> ApiKey:
    return ApiKey(
        id=row["id"],
        scope=row["scope"],
        agents=json.loads(row["agents"]),
        created_at=row["created_at"],
        revoked_at=row["revoked_at"],
    )


class Store:
    """SQLite in WAL mode: one writer connection behind a lock, a read connection per thread."""

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout_ms: int = 10_000,
        clock: Clock = utc_now,
        synchronous: str = "FULL",
    ):
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError("synchronous must be FULL or NORMAL")
        self._synchronous = synchronous
        self._clock = clock
        path.parent.mkdir(parents=True, exist_ok=True)
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._checkpointer: sqlite3.Connection | None = None
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_owed = threading.Event()
        self._checkpoint_thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._writer = self._connect()
        self._writer.execute("PRAGMA journal_mode = WAL")
        self._migrate()
        wal = path.with_name(path.name + "-wal")
        # A forget's checkpoint may have been held off when the last process stopped.
        if wal.exists() and wal.stat().st_size and not self._try_checkpoint():
            self._checkpoint_later(quiet=True)

    # -- connections -------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=self._busy_timeout_ms / 1000,
        )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        # Deleted content is overwritten with zeros, so forgotten text leaves the file.
        conn.execute("PRAGMA secure_delete = ON")
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._write_lock:
            conn = self._writer
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        self._closing.set()
        thread = self._checkpoint_thread
        if thread is not None:
            thread.join(timeout=5)
        with self._checkpoint_lock:
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        with self._write_lock:
            self._writer.close()

    def _now(self) -> str:
        return format_time(self._clock())

    def _migrate(self) -> None:
        with self._transaction() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations"
                " (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
        for version, script in enumerate(MIGRATIONS, start=1):
            if version in done:
                continue
            with self._transaction() as conn:
                for statement in _statements(script):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                    (version, self._now()),
                )

    def schema_version(self) -> int:
        row = self._reader().execute("SELECT MAX(version) FROM schema_migrations").fetchone()
        return int(row[0] or 0)

    # -- messages ----------------------------------------------------------------------------

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
        returns the first turn's id and stores nothing."""
        now = self._now()
        with self._transaction() as conn:
            if event_id is not None:
                row = conn.execute(
                    "SELECT id FROM messages WHERE agent = ? AND event_id = ?", (agent, event_id)
                ).fetchone()
                if row is not None:
                    return int(row[0]), False
            cur = conn.execute(
                "INSERT INTO messages (agent, phone, event_id, number, role, content, created_at,"
                " stored_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (agent, phone, event_id, number, role, content, created_at or now, now),
            )
            message_id = int(cur.lastrowid or 0)
            _enqueue(conn, "turn", str(message_id), agent, phone, now)
            return message_id, True

    def recent_turns(self, agent: str, phone: str, limit: int) -> list[Message]:
        """Turns not yet archived, newest first."""
        rows = self._reader().execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE agent = ? AND phone = ?"
            " AND archived = 0 ORDER BY id DESC LIMIT ?",
            (agent, phone, limit),
        )
        return [_message(r) for r in rows]

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
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE agent = ? AND phone = ?"
                " AND id > ? ORDER BY id ASC LIMIT ?",
                (agent, phone, after_id, limit),
            )
            return [_message(r) for r in rows][::-1]
        rows = self._reader().execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE agent = ? AND phone = ?"
            " AND id < ? ORDER BY id DESC LIMIT ?",
            (agent, phone, before_id if before_id is not None else 2**63 - 1, limit),
        )
        return [_message(r) for r in rows]

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

    def all_messages(self, agent: str, phone: str) -> list[Message]:
        rows = self._reader().execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE agent = ? AND phone = ? ORDER BY id",
            (agent, phone),
        )
        return [_message(r) for r in rows]

    # -- summaries and memories ---------------------------------------------------------------

    def summaries_of(self, keys: Sequence[str]) -> dict[str, tuple[str, str, Summary]]:
        """Summaries by their index key 'agent|phone'."""
        found: dict[str, tuple[str, str, Summary]] = {}
        for key in keys:
            agent, _, phone = key.partition("|")
            summary = self.summary(agent, phone)
            if summary is not None:
                found[key] = (agent, phone, summary)
        return found

    def summary(self, agent: str, phone: str) -> Summary | None:
        row = (
            self._reader()
            .execute(
                "SELECT text, through_id, updated_at FROM summaries WHERE agent = ? AND phone = ?",
                (agent, phone),
            )
            .fetchone()
        )
        if row is None:
            return None
        return Summary(text=row["text"], through_id=row["through_id"], updated_at=row["updated_at"])

    def put_summary(self, agent: str, phone: str, text: str, through_id: int | None) -> None:
        with self._transaction() as conn:
            _put_summary(conn, agent, phone, text, through_id, self._now())

    def insert_memory(self, memory: Memory, *, actor: str) -> Memory:
        """Store a new memory, its 'create' history entry and its outbox row, atomically."""
        with self._transaction() as conn:
            _insert_memory(conn, memory, actor)
        return memory

    def newest_memories(self, agent: str, phone: str, *, status: str, limit: int) -> list[Memory]:
        rows = self._reader().execute(
            f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE agent = ? AND phone = ? AND status = ?"
            " ORDER BY created_at DESC, id DESC LIMIT ?",
            (agent, phone, status, limit),
        )
        return [_memory(r) for r in rows]

    def agent_memories(self, agent: str, phone: str | None) -> list[Memory]:
        """All memories of an agent, or of one person of it."""
        rows = self._reader().execute(
            f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE agent = ? AND (? IS NULL OR phone = ?)"
            " ORDER BY created_at, id",
            (agent, phone, phone),
        )
        return [_memory(r) for r in rows]

    def person_memories(self, agent: str, phone: str) -> list[Memory]:
        rows = self._reader().execute(
            f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE agent = ? AND phone = ?"
            " ORDER BY created_at, id",
            (agent, phone),
        )
        return [_memory(r) for r in rows]

    def list_memories(
        self,
        agent: str,
        where: MemoryFilter,
        *,
        order_by: str,
        descending: bool,
        limit: int,
        offset: int,
    ) -> tuple[list[Memory], int, int]:
        """A page of the agent's memories, the total that match, and the high-water mark
        (`as_of`): pass it back to keep later pages stable while others insert."""
        if order_by not in ("created_at", "updated_at"):
            raise ValueError("order_by")
        conn = self._reader()
        conn.execute("BEGIN")  # one snapshot for the count and the page
        try:
            as_of = where.as_of
            if as_of is None:
                as_of = int(
                    conn.execute("SELECT COALESCE(MAX(rowid), 0) FROM memories").fetchone()[0]
                )
            clause, args = where.sql(agent, as_of)
            total = int(
                conn.execute(f"SELECT COUNT(*) FROM memories WHERE {clause}", args).fetchone()[0]
            )
            direction = "DESC" if descending else "ASC"
            rows = conn.execute(
                f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE {clause}"
                f" ORDER BY {order_by} {direction}, rowid {direction} LIMIT ? OFFSET ?",
                (*args, limit, offset),
            ).fetchall()
        finally:
            conn.execute("COMMIT")
        return [_memory(r) for r in rows], total, as_of

    def update_memory(
        self, memory: Memory, *, changes: dict[str, Any], action: str, actor: str
    ) -> Memory | None:
        """Apply changes to a memory, record the history entry, queue it for the indexer.
        None, with nothing written, when the memory is gone (deleted or its person forgotten
        since the caller read it): no history entry may outlive it."""
        allowed = {"content", "metadata", "type", "status", "expires_at"}
        if not set(changes) <= allowed:
            raise ValueError(f"cannot change {set(changes) - allowed}")
        now = self._now()
        values = {k: json.dumps(v) if k == "metadata" else v for k, v in changes.items()}
        values["updated_at"] = now
        assignments = ", ".join(f"{k} = ?" for k in values)
        with self._transaction() as conn:
            cur = conn.execute(
                f"UPDATE memories SET {assignments} WHERE id = ?", (*values.values(), memory.id)
            )
            if cur.rowcount == 0:
                return None
            _history(
                conn,
                memory,
                action,
                actor,
                memory.content,
                changes.get("content", memory.content),
                now,
            )
            _enqueue(conn, "fact", memory.id, memory.agent, memory.phone, now)
            row = conn.execute(
                f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE id = ?", (memory.id,)
            ).fetchone()
        return _memory(row)

    def delete_memories(self, memories: Sequence[Memory], *, actor: str) -> int:
        """Delete memories, recording who did it; the indexer removes their vectors. Memories
        already gone (deleted, or their person forgotten) are skipped and leave no history.
        Returns how many were deleted."""
        now = self._now()
        deleted = 0
        with self._transaction() as conn:
            for memory in memories:
                if not conn.execute("DELETE FROM memories WHERE id = ?", (memory.id,)).rowcount:
                    continue
                deleted += 1
                _history(conn, memory, "delete", actor, memory.content, None, now)
                _enqueue(conn, "fact", memory.id, memory.agent, memory.phone, now)
        return deleted

    def memory_history(self, memory_ids: Sequence[str]) -> list[HistoryEntry]:
        if not memory_ids:
            return []
        marks = ",".join("?" * len(memory_ids))
        rows = self._reader().execute(
            "SELECT memory_id, agent, action, actor, old_content, new_content, at"
            " FROM memory_history"
            f" WHERE memory_id IN ({marks}) ORDER BY id",
            tuple(memory_ids),
        )
        return [
            HistoryEntry(
                memory_id=r["memory_id"],
                agent=r["agent"],
                action=r["action"],
                actor=r["actor"],
                old_content=r["old_content"],
                new_content=r["new_content"],
                at=r["at"],
            )
            for r in rows
        ]

    # -- erasure -----------------------------------------------------------------------------

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
            _redact_audit(conn, agent, phone)
        return PersonErasure(
            messages=messages, memories=memories, summaries=summaries, history=history
        )

    def checkpoint(self, *, wait_s: float = 1.0) -> bool:
        """Copy the WAL into the database file and truncate it, so no old page image keeps
        deleted text. True when the WAL is empty now.

        A truncating checkpoint must wait for every reader on an older snapshot (a sqlite3
        shell, a backup, a reindex in another process), and while it waits SQLite holds off
        every writer. So it never waits: each try runs on its own connection with no busy
        timeout, outside the write lock, and gives up at once when blocked; tries repeat for
        `wait_s`, then a background thread keeps trying until one succeeds."""
        deadline = time.monotonic() + wait_s
        while True:
            if self._try_checkpoint():
                return True
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        self._checkpoint_later()
        return False

    @property
    def checkpoint_pending(self) -> bool:
        """A truncating checkpoint is still owed (a reader has held it off)."""
        return self._checkpoint_owed.is_set()

    def _try_checkpoint(self) -> bool:
        with self._checkpoint_lock:
            if self._closing.is_set():
                return False
            if self._checkpointer is None:
                self._checkpointer = self._connect()
                self._checkpointer.execute("PRAGMA busy_timeout = 0")
            try:
                busy, _, _ = self._checkpointer.execute(
                    "PRAGMA wal_checkpoint(TRUNCATE)"
                ).fetchone()
            except sqlite3.OperationalError:  # locked by a writer: try again later
                return False
        if not busy:
            self._checkpoint_owed.clear()
        return not busy

    def _checkpoint_later(self, *, quiet: bool = False) -> None:
        if not quiet:
            log.warning("WAL checkpoint held off by a reader; retrying in the background")
        self._checkpoint_owed.set()
        with self._checkpoint_lock:
            if self._checkpoint_thread is not None and self._checkpoint_thread.is_alive():
                return
            self._checkpoint_thread = threading.Thread(
                target=self._checkpoint_loop, name="wal-checkpoint", daemon=True
            )
            self._checkpoint_thread.start()

    def _checkpoint_loop(self) -> None:
        while self._checkpoint_owed.is_set() and not self._closing.wait(0.25):
            if self._try_checkpoint():
                log.info("WAL checkpoint done")
                return

    # -- keys --------------------------------------------------------------------------------

    def insert_key(self, key_id: str, key_hash: str, scope: str, agents: list[str]) -> ApiKey:
        now = self._now()
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO keys (id, hash, scope, agents, created_at) VALUES (?, ?, ?, ?, ?)",
                (key_id, key_hash, scope, json.dumps(agents), now),
            )
        return ApiKey(id=key_id, scope=scope, agents=agents, created_at=now, revoked_at=None)

    def key_by_hash(self, key_hash: str) -> tuple[ApiKey, str] | None:
        row = (
            self._reader()
            .execute(
                "SELECT id, hash, scope, agents, created_at, revoked_at FROM keys WHERE hash = ?",
                (key_hash,),
            )
            .fetchone()
        )
        return None if row is None else (_key(row), row["hash"])

    def list_keys(self) -> list[ApiKey]:
        rows = self._reader().execute(
            "SELECT id, scope, agents, created_at, revoked_at FROM keys ORDER BY created_at, id"
        )
        return [_key(r) for r in rows]

    def revoke_key(self, key_id: str) -> bool | None:
        """True: revoked now; False: it was revoked already; None: no such key."""
        with self._transaction() as conn:
            cur = conn.execute(
                "UPDATE keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (self._now(), key_id),
            )
            if cur.rowcount:
                return True
            found = conn.execute("SELECT 1 FROM keys WHERE id = ?", (key_id,)).fetchone()
            return False if found is not None else None

    # -- agent settings ----------------------------------------------------------------------

    def agent_settings(self, agent: str) -> dict[str, Any]:
        row = (
            self._reader()
            .execute("SELECT settings FROM agent_settings WHERE agent = ?", (agent,))
            .fetchone()
        )
        return {} if row is None else dict(json.loads(row[0]))

    def put_agent_settings(self, agent: str, values: dict[str, Any]) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO agent_settings (agent, settings, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (agent) DO UPDATE SET settings = excluded.settings,"
                " updated_at = excluded.updated_at",
                (agent, json.dumps(values), self._now()),
            )

    # -- compaction --------------------------------------------------------------------------

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
        with self._transaction() as conn:
            return _archive(conn, agent, phone, through_id, self._now())

    def apply_compaction(
        self,
        agent: str,
        phone: str,
        *,
        summary: str,
        through_id: int,
        new_facts: Sequence[Memory],
        seen_again: Sequence[str],
        actor: str,
        from_turns: Sequence[int],
    ) -> list[int] | None:
        """All effects of one compaction in one transaction: the summary, the new facts (with
        history and outbox rows), the facts seen again, and the archived turns. The model ran
        before, outside any lock: if the turns it read (`from_turns`) are no longer all there
        and waiting (the person was forgotten meanwhile), nothing is written and None is
        returned, so nothing made from deleted turns can bring the person back."""
        now = self._now()
        with self._transaction() as conn:
            if _count_waiting(conn, agent, phone, from_turns) != len(set(from_turns)):
                return None
            _put_summary(conn, agent, phone, summary, through_id, now)
            for memory in new_facts:
                _insert_memory(conn, memory, actor)
            for memory_id in seen_again:
                if not conn.execute(
                    "UPDATE memories SET seen_count = seen_count + 1, updated_at = ?"
                    " WHERE id = ? AND agent = ? AND phone = ?",
                    (now, memory_id, agent, phone),
                ).rowcount:
                    continue  # deleted since the duplicate check: no history for it
                conn.execute(
                    "INSERT INTO memory_history (memory_id, agent, phone, action, actor,"
                    " old_content, new_content, at) VALUES (?, ?, ?, 'seen_again', ?, NULL,"
                    " NULL, ?)",
                    (memory_id, agent, phone, actor, now),
                )
            return _archive(conn, agent, phone, through_id, now)

    def expire_pending(self, now: str) -> list[Memory]:
        """Pending memories whose review time has passed become rejected."""
        with self._transaction() as conn:
            rows = conn.execute(
                f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE status = 'pending'"
                " AND expires_at IS NOT NULL AND expires_at <= ?",
                (now,),
            ).fetchall()
            expired = [_memory(r) for r in rows]
            for memory in expired:
                conn.execute(
                    "UPDATE memories SET status = 'rejected', updated_at = ? WHERE id = ?",
                    (now, memory.id),
                )
                _history(conn, memory, "expire", "system", memory.content, memory.content, now)
                _enqueue(conn, "fact", memory.id, memory.agent, memory.phone, now)
        return expired

    def people_to_compact(
        self, *, more_than: int, agent: str | None = None, phone: str | None = None
    ) -> list[tuple[str, str]]:
        """(agent, phone) of people with more than `more_than` turns waiting."""
        rows = self._reader().execute(
            "SELECT agent, phone FROM messages WHERE archived = 0"
            " AND (? IS NULL OR agent = ?) AND (? IS NULL OR phone = ?)"
            " GROUP BY agent, phone HAVING COUNT(*) > ? ORDER BY agent, phone",
            (agent, agent, phone, phone, more_than),
        )
        return [(r[0], r[1]) for r in rows]

    # -- the indexer's reads -------------------------------------------------------------------

    def messages_by_ids(self, ids: Sequence[int]) -> dict[int, Message]:
        rows = self._rows_by_ids(f"SELECT {_MESSAGE_COLUMNS} FROM messages", ids)
        return {row["id"]: _message(row) for row in rows}

    def memories_by_ids(self, ids: Sequence[str]) -> dict[str, Memory]:
        rows = self._rows_by_ids(f"SELECT {_MEMORY_COLUMNS} FROM memories", ids)
        return {row["id"]: _memory(row) for row in rows}

    def _rows_by_ids(self, select: str, ids: Sequence[int | str]) -> Iterator[sqlite3.Row]:
        for chunk in _chunks(list(ids)):
            marks = ",".join("?" * len(chunk))
            yield from self._reader().execute(f"{select} WHERE id IN ({marks})", tuple(chunk))

    def iter_sources(self, kind: str, chunk: int = 2000) -> Iterator[list[str]]:
        """Every id of a kind, in chunks, for a rebuild of the index."""
        source = _SOURCES[kind]
        cursor = self._connect().execute(
            f"SELECT {source.ref} FROM {source.table} ORDER BY {source.order}"
        )
        try:
            while batch := cursor.fetchmany(chunk):
                yield [r[0] for r in batch]
        finally:
            cursor.connection.close()

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

    # -- audit -------------------------------------------------------------------------------

    def add_audit(
        self, *, key_id: str, query: str, filters: dict[str, Any], results: list[list[str]]
    ) -> tuple[int, list[list[str]]]:
        """Record a staff search; results are the [agent, phone] pairs it returned. A person
        forgotten while the search ran (after its reads, before this write) is left out, and
        the query text then goes too, as a forget does to the entries it finds. Returns the
        entry's id and the people kept: the caller must not show the others."""
        with self._transaction() as conn:
            kept = [pair for pair in results if _person_exists(conn, pair[0], pair[1])]
            # A phone the search named (its filter, or in its text) of whom nothing is stored
            # may be someone forgotten while it ran: the entry keeps neither.
            named = set(_PHONE_IN_TEXT.findall(query))
            if filters.get("phone"):
                named.add(str(filters["phone"]))
            gone = {p for p in named if not _phone_exists(conn, p, filters.get("agents"))}
            if len(kept) < len(results) or gone:
                query = FORGOTTEN
                if filters.get("phone"):
                    filters = {**filters, "phone": FORGOTTEN}
            results = kept
            cur = conn.execute(
                "INSERT INTO audit (at, key_id, query, filters, result_count, results)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    self._now(),
                    key_id,
                    query,
                    json.dumps(filters),
                    len(results),
                    json.dumps(results),
                ),
            )
            return int(cur.lastrowid or 0), kept

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

    # -- outbox ------------------------------------------------------------------------------

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
        marks = ",".join("?" * len(ref_ids))
        rows = self._reader().execute(
            "SELECT id, kind, ref_id, agent, phone FROM outbox"
            f" WHERE kind = ? AND ref_id IN ({marks}) ORDER BY id",
            (kind, *ref_ids),
        )
        return [OutboxItem(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    def outbox_done(self, ids: Sequence[int]) -> None:
        with self._transaction() as conn:
            conn.executemany("DELETE FROM outbox WHERE id = ?", [(i,) for i in ids])

    def existing_refs(self, kind: str, refs: Sequence[str]) -> set[str]:
        """Which of these ref_ids of a kind still have their source row (a reindex's orphan
        check: a row is an orphan when SQLite no longer has it, not when a scan missed it)."""
        source = _SOURCES[kind]
        found: set[str] = set()
        for chunk in _chunks(_keys_of(source, refs)):
            marks = ",".join("?" * len(chunk))
            rows = self._reader().execute(
                f"SELECT {source.ref} FROM {source.table} WHERE {source.key} IN ({marks})",
                tuple(chunk),
            )
            found.update(str(r[0]) for r in rows)
        return found

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
            for chunk in _chunks(_keys_of(source, refs)):
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

    def enqueue_everything(self) -> int:
        """Queue every turn, memory and summary for the indexer (a rebuild for a new model)."""
        with self._transaction() as conn:
            return sum(_enqueue_all(conn, kind, self._now()) for kind in _SOURCES)

    # -- meta --------------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        row = self._reader().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )


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


def _enqueue_all(conn: sqlite3.Connection, kind: str, now: str) -> int:
    """Queue every item of one kind for the indexer."""
    source = _SOURCES[kind]
    return int(
        conn.execute(
            "INSERT INTO outbox (kind, ref_id, agent, phone, enqueued_at)"
            f" SELECT ?, {source.ref}, agent, phone, ? FROM {source.table}",
            (kind, now),
        ).rowcount
    )


def _enqueue(
    conn: sqlite3.Connection, kind: str, ref_id: str, agent: str, phone: str | None, now: str
) -> None:
    conn.execute(
        "INSERT INTO outbox (kind, ref_id, agent, phone, enqueued_at) VALUES (?, ?, ?, ?, ?)",
        (kind, ref_id, agent, phone, now),
    )


def _chunks(items: list[Any], size: int = 500) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _statements(script: str) -> list[str]:
    """Split a migration script into statements (no semicolons inside our literals)."""
    lines = [line for line in script.splitlines() if not line.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


FORGOTTEN = "[forgotten]"


def _redact_audit(conn: sqlite3.Connection, agent: str, phone: str) -> None:
    """Remove a forgotten person from the audit log. An entry that returned them, filtered by
    their phone or named it loses its query text too: a search that found someone is likely
    to quote their words ("who said ..."), which must go with them. Who searched and when
    stay; so do the other people it returned."""
    rows = conn.execute(
        "SELECT id, query, filters, results FROM audit"
        " WHERE results LIKE ?1 OR filters LIKE ?1 OR query LIKE ?1",
        (f"%{phone}%",),
    ).fetchall()
    for row in rows:
        before = json.loads(row["results"])
        results = [r for r in before if r != [agent, phone]]
        filters = json.loads(row["filters"])
        named = filters.get("phone") == phone
        if named:
            filters["phone"] = FORGOTTEN
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


def _count_waiting(conn: sqlite3.Connection, agent: str, phone: str, ids: Sequence[int]) -> int:
    """How many of these turn ids are the person's and still waiting (not archived)."""
    total = 0
    for chunk in _chunks(sorted(set(ids))):
        marks = ",".join("?" * len(chunk))
        total += int(
            conn.execute(
                f"SELECT COUNT(*) FROM messages WHERE id IN ({marks}) AND agent = ?"
                " AND phone = ? AND archived = 0",
                (*chunk, agent, phone),
            ).fetchone()[0]
        )
    return total


_PHONE_IN_TEXT = re.compile(r"\+[0-9]{8,15}")


def _phone_exists(conn: sqlite3.Connection, phone: str, agents: list[str] | None) -> bool:
    """Whether anything of a phone is stored, for these agents (None: any)."""
    found = conn.execute(
        "SELECT agent FROM messages WHERE phone = ?1 UNION SELECT agent FROM memories"
        " WHERE phone = ?1 UNION SELECT agent FROM summaries WHERE phone = ?1",
        (phone,),
    ).fetchall()
    return any(agents is None or row[0] in agents for row in found)


def _person_exists(conn: sqlite3.Connection, agent: str, phone: str) -> bool:
    """Whether anything of the person is stored for the agent."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM messages WHERE agent = ?1 AND phone = ?2)"
        " OR EXISTS (SELECT 1 FROM memories WHERE agent = ?1 AND phone = ?2)"
        " OR EXISTS (SELECT 1 FROM summaries WHERE agent = ?1 AND phone = ?2)",
        (agent, phone),
    ).fetchone()
    return bool(row[0])


def _archive(
    conn: sqlite3.Connection, agent: str, phone: str, through_id: int, now: str
) -> list[int]:
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
        _enqueue(conn, "turn", str(message_id), agent, phone, now)
    return ids


def _put_summary(
    conn: sqlite3.Connection, agent: str, phone: str, text: str, through_id: int | None, now: str
) -> None:
    conn.execute(
        "INSERT INTO summaries (agent, phone, text, through_id, updated_at)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (agent, phone) DO UPDATE SET"
        " text = excluded.text, through_id = excluded.through_id,"
        " updated_at = excluded.updated_at",
        (agent, phone, text, through_id, now),
    )
    _enqueue(conn, "summary", f"{agent}|{phone}", agent, phone, now)


def _insert_memory(conn: sqlite3.Connection, memory: Memory, actor: str) -> None:
    conn.execute(
        f"INSERT INTO memories ({_MEMORY_COLUMNS}) VALUES"
        " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            memory.id,
            memory.agent,
            memory.phone,
            memory.content,
            memory.type,
            memory.status,
            memory.confidence,
            memory.source,
            json.dumps(memory.metadata),
            memory.session_id,
            memory.task_id,
            memory.graph_id,
            json.dumps(memory.source_turns),
            memory.seen_count,
            memory.created_at,
            memory.updated_at,
            memory.expires_at,
        ),
    )
    _history(conn, memory, "create", actor, None, memory.content, memory.created_at)
    _enqueue(conn, "fact", memory.id, memory.agent, memory.phone, memory.created_at)


def _history(
    conn: sqlite3.Connection,
    memory: Memory,
    action: str,
    actor: str,
    old: str | None,
    new: str | None,
    at: str,
) -> None:
    conn.execute(
        "INSERT INTO memory_history (memory_id, agent, phone, action, actor, old_content,"
        " new_content, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (memory.id, memory.agent, memory.phone, action, actor, old, new, at),
    )
