"""The connection to the database, SQLite or PostgreSQL: everything that differs between the
two lives here (connections, transactions, placeholders, erasure after a DELETE). Queries
are written once, with `?` placeholders, in SQL both engines accept."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Protocol

from server.clock import Clock, format_time
from server.store.leases import FileLease, Lease
from server.store.pool import PooledReader, PoolStats, SqlitePool
from server.store.util import chunks

log = logging.getLogger(__name__)


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    """What queries use of a connection: rows answer r[0] and r["column"] alike."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> Any: ...


class Database(Protocol):
    name: str  # sqlite | postgresql
    memory_seq: str  # the column holding the memories' insertion order
    migrations: list[str]

    def transaction(self) -> Any: ...  # a context manager yielding a Conn (the writer)

    def migrating(self) -> Any: ...  # a context manager held while migrations run

    def after_migrations(self) -> None: ...

    def reader(self) -> Conn: ...  # each statement on a pooled connection, rows read whole

    def snapshot(self) -> Any: ...  # a context manager: one consistent view for several reads

    def lock_person(self, conn: Conn, agent: str, phone: str) -> None: ...

    def pool_stats(self) -> PoolStats: ...

    def stream(self, sql: str, chunk: int) -> Iterator[list[Any]]: ...

    def erase_deleted(self, wait_s: float) -> bool: ...

    def lease(self, name: str, folder: Path, *, keep_session: bool = False) -> Lease: ...

    @property
    def erasure_pending(self) -> bool: ...

    def close(self) -> None: ...


# The lock key of an agent's own memories (phone None): no person's number is empty.
AGENT_WIDE = ""


class Queries:
    """What every group of queries shares: the database and the clock."""

    _db: Database
    _clock: Clock

    def _transaction(self) -> Any:
        return self._db.transaction()

    def _reader(self) -> Conn:
        return self._db.reader()

    def _snapshot(self) -> Any:
        return self._db.snapshot()

    @contextmanager
    def _person_transaction(self, agent: str, phone: str | None) -> Iterator[Conn]:
        """A write transaction that holds the person's lock first: every write of a person's
        rows goes through one, so a forget, a retention sweep or an opt-out decides and
        deletes in one view that no other replica's write of that person can slip into
        (they wait for it, or it waits for them). phone None: the agent's own memories, under
        the agent-wide key (no person's number is empty)."""
        with self._transaction() as conn:
            self._db.lock_person(conn, agent, AGENT_WIDE if phone is None else phone)
            yield conn

    def _now(self) -> str:
        return format_time(self._clock())

    def _rows_by_ids(self, select: str, ids: Sequence[int | str]) -> Iterator[Any]:
        for chunk in chunks(list(ids)):
            marks = ",".join("?" * len(chunk))
            yield from self._reader().execute(f"{select} WHERE id IN ({marks})", tuple(chunk))


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer release: this one would run old queries on new
    tables. Raised at start-up, before anything is written."""


def migrate(db: Database, now: str) -> bool:
    """Each migration in its own transaction, together with its record. True when the
    database held no schema before: this call made it (under the migration lock, so of
    processes starting at once only the one that made it says so)."""
    with db.migrating():
        created = _migrate(db, now)
    db.after_migrations()
    return created


def _migrate(db: Database, now: str) -> bool:
    with db.transaction() as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations"
            " (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
        )
        done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
    known = len(db.migrations)
    if done and max(done) > known:
        raise SchemaTooNew(
            f"the database is at schema version {max(done)}, this release knows versions up to"
            f" {known}: run the newer release (README, Deployment: upgrade order)"
        )
    for version, script in enumerate(db.migrations, start=1):
        if version in done:
            continue
        with db.transaction() as conn:
            for statement in statements(script):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                (version, now),
            )
    return not done


def statements(script: str) -> list[str]:
    """Split a migration script into statements (no semicolons inside our literals)."""
    lines = [line for line in script.splitlines() if not line.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


# -- SQLite ----------------------------------------------------------------------------------


class SqliteDatabase:
    """SQLite in WAL mode: one writer connection behind a lock, and a bounded pool of read
    connections shared by every thread."""

    name = "sqlite"
    memory_seq = "rowid"

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout_ms: int,
        synchronous: str,
        pool_size: int = 8,
        pool_timeout_s: float = 10.0,
    ) -> None:
        from server.store.schema import SQLITE_MIGRATIONS

        self.migrations = SQLITE_MIGRATIONS
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError("synchronous must be FULL or NORMAL")
        self._synchronous = synchronous
        path.parent.mkdir(parents=True, exist_ok=True)
        self._write_lock = threading.RLock()
        self._pool = SqlitePool(self._connect, size=pool_size, timeout_s=pool_timeout_s)
        self._reader = PooledReader(self._pool.connection)
        self._checkpointer: sqlite3.Connection | None = None
        self._checkpoint_lock = threading.Lock()
        self._checkpoint_owed = threading.Event()
        self._checkpoint_thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._writer = self._connect()
        self._writer.execute("PRAGMA journal_mode = WAL")

    def migrating(self) -> Any:
        return nullcontext()  # each migration's BEGIN IMMEDIATE holds off other processes

    def after_migrations(self) -> None:
        wal = self.path.with_name(self.path.name + "-wal")
        # A forget's checkpoint may have been held off when the last process stopped.
        if wal.exists() and wal.stat().st_size and not self._try_checkpoint():
            self._checkpoint_later(quiet=True)

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

    def reader(self) -> Conn:
        return self._reader

    def pool_stats(self) -> PoolStats:
        return self._pool.stats()

    def lock_person(self, conn: Conn, agent: str, phone: str) -> None:
        """Nothing to take: BEGIN IMMEDIATE already holds every other writer off, in this
        process and in any other on the file."""

    @contextmanager
    def transaction(self) -> Iterator[Conn]:
        with self._write_lock:
            conn = self._writer
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn  # type: ignore[misc]
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def snapshot(self) -> Iterator[Conn]:
        with self._pool.connection() as conn:
            conn.execute("BEGIN")
            try:
                yield conn  # type: ignore[misc]
            finally:
                conn.execute("COMMIT")

    def lease(self, name: str, folder: Path, *, keep_session: bool = False) -> Lease:
        """Processes of one machine on one data folder: a flock in the folder."""
        return FileLease(folder / f"{name}.lease")

    def stream(self, sql: str, chunk: int) -> Iterator[list[Any]]:
        """Rows of a long read in batches, on a connection of its own."""
        cursor = self._connect().execute(sql)
        try:
            while batch := cursor.fetchmany(chunk):
                yield list(batch)
        finally:
            cursor.connection.close()

    def close(self) -> None:
        self._closing.set()
        thread = self._checkpoint_thread
        if thread is not None:
            thread.join(timeout=5)
        with self._checkpoint_lock:
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None
        self._pool.close()
        with self._write_lock:
            self._writer.close()

    # -- erasure: no old page image may keep deleted text ------------------------------------

    def erase_deleted(self, wait_s: float) -> bool:
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
    def erasure_pending(self) -> bool:
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
