"""PostgreSQL through psycopg 3, for replicas: the same queries as SQLite (their `?`
placeholders become psycopg's), one writer connection per process behind a lock, a read
connection per thread, and VACUUM after a forget."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from server.errors import Unavailable
from server.store.db import Conn, Cursor
from server.store.leases import Lease, PostgresLease

log = logging.getLogger(__name__)

# What a forget deletes from; VACUUM of these marks the dead rows' space free for reuse.
ERASED_TABLES = ("messages", "memories", "summaries", "memory_history", "outbox", "audit")
# Held while migrating, so that two replicas starting at once do not both apply a version.
MIGRATION_LOCK = 0x6D656D6F7279  # "memory"


class DatabaseUnavailable(Unavailable):
    """The connection to PostgreSQL broke (a restart, a terminated session): the request
    fails with 503 and the next one reconnects. Nothing was committed by it."""

    code = "database_unavailable"


@contextmanager
def _reachable() -> Iterator[None]:
    try:
        yield
    except psycopg.OperationalError as exc:
        raise DatabaseUnavailable(f"the database is unreachable, retry shortly ({exc})") from exc


class Row(tuple[Any, ...]):
    """A row answering r[0] and r["column"], as sqlite3.Row does."""

    _names: dict[str, int]

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._names[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._names)


def _row_factory(cursor: Any) -> Any:
    names = {column.name: i for i, column in enumerate(cursor.description or [])}
    row_type = type("Row", (Row,), {"_names": names})

    def make(values: Sequence[Any]) -> Row:
        return row_type(values)  # type: ignore[no-any-return]

    return make


def _sql(sql: str) -> str:
    """Our `?` placeholders as psycopg's `%s` (a literal % doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


class PgConn:
    """A psycopg connection that takes the queries as written for SQLite."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.raw = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        with _reachable():
            return self.raw.execute(_sql(sql), tuple(params))  # type: ignore[return-value]

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> Any:
        with _reachable(), self.raw.cursor() as cursor:
            cursor.executemany(_sql(sql), [tuple(p) for p in params])


class PostgresDatabase:
    name = "postgresql"
    memory_seq = "seq"

    def __init__(self, url: str) -> None:
        from server.store.schema import POSTGRES_MIGRATIONS

        self.migrations = POSTGRES_MIGRATIONS
        self.url = url
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[psycopg.Connection[Any]] = []
        self._readers_lock = threading.Lock()
        self._writer = self._connect()

    def _connect(self, *, autocommit: bool = True) -> psycopg.Connection[Any]:
        with _reachable():
            return psycopg.connect(
                self.url, autocommit=autocommit, row_factory=_row_factory, connect_timeout=5
            )

    @contextmanager
    def migrating(self) -> Iterator[None]:
        """One replica at a time applies migrations (the others wait, then find them done)."""
        with self._write_lock:
            self._writer.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
            try:
                yield
            finally:
                self._writer.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))

    def after_migrations(self) -> None:
        pass

    def reader(self) -> Conn:
        conn: PgConn | None = getattr(self._local, "conn", None)
        if conn is None or conn.raw.closed or conn.raw.broken:
            raw = self._connect()
            conn = PgConn(raw)
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(raw)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[Conn]:
        with self._write_lock:
            if self._writer.closed or self._writer.broken:  # a restart, a terminated session
                self._writer = self._connect()
            with _reachable(), self._writer.transaction():
                yield PgConn(self._writer)

    @contextmanager
    def snapshot(self) -> Iterator[Conn]:
        conn = self.reader()
        assert isinstance(conn, PgConn)
        with conn.raw.transaction():
            conn.raw.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield conn

    def stream(self, sql: str, chunk: int) -> Iterator[list[Any]]:
        """Rows of a long read in batches, through a server-side cursor of its own."""
        with self._connect(autocommit=False) as conn, conn.cursor(name="stream") as cursor:
            cursor.execute(_sql(sql))
            while batch := cursor.fetchmany(chunk):
                yield list(batch)

    def lease(self, name: str, folder: Path, *, keep_session: bool = False) -> Lease:
        """Replicas anywhere on one database: a session advisory lock."""
        return PostgresLease(self.url, f"memory-server:{name}", keep_session=keep_session)

    def erase_deleted(self, wait_s: float) -> bool:
        """VACUUM what a forget deleted from: the dead rows' space is marked free, to be
        written over by later rows. (VACUUM FULL, which rewrites the files, would lock the
        tables; the WAL segments that held the rows are recycled by checkpoints.)"""
        with self._connect() as conn:
            for table in ERASED_TABLES:
                conn.execute(f"VACUUM {table}")
        return True

    @property
    def erasure_pending(self) -> bool:
        return False

    def close(self) -> None:
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
        with self._write_lock:
            self._writer.close()
