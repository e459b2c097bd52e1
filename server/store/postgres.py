"""PostgreSQL through psycopg 3, for replicas: the same queries as SQLite (their `?`
placeholders become psycopg's), one writer connection per process behind a lock, a bounded
pool of read connections (psycopg_pool) shared by every thread, a per-person advisory lock in
write transactions, and VACUUM after a forget."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from server.errors import Unavailable
from server.store.db import Conn, Cursor
from server.store.leases import Lease, PostgresLease
from server.store.pool import DatabaseBusy, PooledReader, PoolStats

log = logging.getLogger(__name__)

# What a forget deletes from; VACUUM of these marks the dead rows' space free for reuse.
ERASED_TABLES = (
    "messages",
    "memories",
    "summaries",
    "memory_history",
    "outbox",
    "audit",
    "opt_outs",
    "erasures",
    "moves",
    "people",
    "person_name_words",
)
# Held while migrating, so that two replicas starting at once do not both apply a version.
MIGRATION_LOCK = 0x6D656D6F7279  # "memory"
# The first key of the two-key advisory locks on a person (their own key space: the one-key
# locks above and the leases' never collide with them).
PERSON_LOCK_CLASS = 0x6D656D  # "mem"
# Idle read connections beyond the first are closed after this long.
POOL_MAX_IDLE_S = 60.0


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

    def __init__(self, url: str, *, pool_size: int = 8, pool_timeout_s: float = 10.0) -> None:
        from server.store.schema import POSTGRES_MIGRATIONS

        self.migrations = POSTGRES_MIGRATIONS
        self.url = url
        self._write_lock = threading.RLock()
        self._writer = self._connect()
        self._pool_size = pool_size
        self._pool_timeout_s = pool_timeout_s
        # check: a connection is tried before it is lent, so one that a restart or
        # pg_terminate_backend broke while idle is replaced, not handed to a request.
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            url,
            kwargs={"autocommit": True, "row_factory": _row_factory, "connect_timeout": 5},
            min_size=1,
            max_size=pool_size,
            timeout=pool_timeout_s,
            max_idle=POOL_MAX_IDLE_S,
            check=ConnectionPool.check_connection,
            name="memory-server-readers",
            open=False,
        )
        self._pool.open(wait=False)
        self._reader = PooledReader(self._borrow)

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
        return self._reader

    @contextmanager
    def _borrow(self) -> Iterator[PgConn]:
        """A pooled read connection. None free within the pool's wait is a 503: busy when
        all of them are open and lent, else the database is unreachable (the pool keeps
        trying to connect)."""
        try:
            with self._pool.connection() as raw:
                yield PgConn(raw)
        except PoolTimeout as exc:
            stats = self.pool_stats()
            if stats.open >= stats.size and stats.idle == 0:
                raise DatabaseBusy(
                    f"all {stats.size} database connections stayed in use for"
                    f" {self._pool_timeout_s:g} s; retry shortly"
                ) from exc
            raise DatabaseUnavailable(
                f"no database connection within {self._pool_timeout_s:g} s: the database"
                " is unreachable; retry shortly"
            ) from exc

    def pool_stats(self) -> PoolStats:
        stats = self._pool.get_stats()
        size, idle = stats.get("pool_size", 0), stats.get("pool_available", 0)
        waiting = stats.get("requests_waiting", 0)
        return PoolStats(self._pool_size, size, size - idle, idle, waiting)

    def lock_person(self, conn: Conn, agent: str, phone: str) -> None:
        """The person's advisory lock, until the transaction ends: the writes of one person
        on every replica are serialized (two people sharing a 32-bit hash only wait for
        each other)."""
        digest = hashlib.blake2b(f"{agent}\x00{phone}".encode(), digest_size=4).digest()
        key = int.from_bytes(digest, "big", signed=True)
        conn.execute("SELECT pg_advisory_xact_lock(?, ?)", (PERSON_LOCK_CLASS, key))

    @contextmanager
    def transaction(self) -> Iterator[Conn]:
        with self._write_lock:
            if self._writer.closed or self._writer.broken:  # a restart, a terminated session
                self._writer = self._connect()
            with _reachable(), self._writer.transaction():
                yield PgConn(self._writer)

    @contextmanager
    def snapshot(self) -> Iterator[Conn]:
        with self._borrow() as conn, _reachable(), conn.raw.transaction():
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
        self._pool.close()
        with self._write_lock:
            self._writer.close()
