"""Read connections: a bounded set shared by every thread, and the reader that borrows one for
each statement. Request threads come and go (the server's thread pool retires idle ones), so
a connection per thread grew with every burst of traffic; a pool keeps the count flat."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from server.errors import Unavailable


class DatabaseBusy(Unavailable):
    """Every read connection stayed in use for the pool's whole wait: the request fails with
    503 and may be retried (MEMORY_DB_POOL_SIZE, MEMORY_DB_POOL_TIMEOUT_S)."""

    code = "database_busy"


@dataclass(frozen=True, slots=True)
class PoolStats:
    """What /health and /metrics show of the read connections."""

    size: int  # the most that may be open
    open: int
    in_use: int
    idle: int
    waiting: int  # threads waiting for one


class Rows:
    """A statement's rows, read whole on a borrowed connection (which went back at once)."""

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        return self._rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


class PooledReader:
    """A Conn for reads: each statement borrows a pooled connection, reads every row and gives
    the connection back. (Several reads that must agree go through a snapshot instead.)"""

    def __init__(self, borrow: Callable[[], AbstractContextManager[Any]]) -> None:
        self._borrow = borrow

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        with self._borrow() as conn:
            cursor = conn.execute(sql, params)
            rows = cursor.fetchall() if cursor.description is not None else []
            return Rows(list(rows), cursor.rowcount)

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> Any:
        raise TypeError("the reader does not write: use a transaction")


class SqlitePool:
    """At most `size` SQLite read connections, opened on demand and kept for reuse (most
    recently used first, so a quiet server keeps using the same few). A thread that finds all
    of them in use waits up to `timeout_s`, then gets DatabaseBusy."""

    def __init__(
        self, connect: Callable[[], sqlite3.Connection], *, size: int, timeout_s: float
    ) -> None:
        if size < 1:
            raise ValueError("a pool holds at least one connection")
        self._connect = connect
        self._size = size
        self._timeout_s = timeout_s
        self._idle: list[sqlite3.Connection] = []
        self._open = 0
        self._waiting = 0
        self._closed = False
        self._cond = threading.Condition()

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        conn = self._take()
        try:
            yield conn
        finally:
            self._give(conn)

    def _take(self) -> sqlite3.Connection:
        with self._cond:
            deadline = time.monotonic() + self._timeout_s
            self._waiting += 1
            try:
                while not self._closed and not self._idle and self._open >= self._size:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise DatabaseBusy(
                            f"all {self._size} database connections stayed in use for"
                            f" {self._timeout_s:g} s; retry shortly"
                        )
                    self._cond.wait(left)
            finally:
                self._waiting -= 1
            if self._closed:
                raise Unavailable("the database is closed: the server is stopping")
            if self._idle:
                return self._idle.pop()
            self._open += 1
        try:
            return self._connect()
        except BaseException:
            self._forget_one()
            raise

    def _give(self, conn: sqlite3.Connection) -> None:
        try:
            if conn.in_transaction:  # a snapshot that failed half-way
                conn.rollback()
        except sqlite3.Error:
            conn.close()
            self._forget_one()
            return
        with self._cond:
            if not self._closed:
                self._idle.append(conn)
                self._cond.notify()
                return
        conn.close()
        self._forget_one()

    def _forget_one(self) -> None:
        with self._cond:
            self._open -= 1
            self._cond.notify()

    def stats(self) -> PoolStats:
        with self._cond:
            idle = len(self._idle)
            return PoolStats(self._size, self._open, self._open - idle, idle, self._waiting)

    def close(self) -> None:
        """Close the idle connections now, and the ones in use as they come back."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            self._cond.notify_all()
        for conn in idle:
            conn.close()
