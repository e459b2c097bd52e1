"""Leases: one holder at a time among the processes sharing a database, released when the
holder dies. The indexer holds one, so that among replicas exactly one runs it.

On PostgreSQL a session advisory lock on a connection of its own: a killed process's
connection closes and the lock goes with it (TCP keepalives find a vanished host within
about 11 s). On SQLite (processes of one machine on one data folder) an exclusive flock on a
file of the folder, which the kernel releases when the process dies."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import threading
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)


class Lease(Protocol):
    def try_hold(self) -> bool:
        """True while this process holds it (taking it when it is free); never waits."""
        ...

    def release(self) -> None: ...


class FileLease:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None
        self._guard = threading.Lock()

    def try_hold(self) -> bool:
        with self._guard:
            if self._fd is not None:
                return True
            self._path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            self._fd = fd
            return True

    def release(self) -> None:
        with self._guard:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                self._fd = None


class PostgresLease:
    def __init__(self, url: str, name: str) -> None:
        self._url = url
        # A stable 63-bit key from the name: every replica computes the same one.
        self._key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") >> 1
        self._conn: Any = None
        self._guard = threading.Lock()

    def try_hold(self) -> bool:
        import psycopg

        with self._guard:
            if self._conn is not None:
                try:
                    self._conn.execute("SELECT 1")  # still ours while the session lives
                    return True
                except psycopg.Error:
                    log.warning("lost the database session holding a lease; taking it again")
                    self._drop()
            try:
                conn = psycopg.connect(
                    self._url,
                    autocommit=True,
                    keepalives=1,
                    keepalives_idle=5,
                    keepalives_interval=2,
                    keepalives_count=3,
                )
                held = conn.execute("SELECT pg_try_advisory_lock(%s)", (self._key,)).fetchone()
            except psycopg.Error as exc:
                log.warning("cannot reach the database for a lease: %s", exc)
                return False
            if held is not None and held[0]:
                self._conn = conn
                return True
            conn.close()
            return False

    def release(self) -> None:
        with self._guard:
            self._drop()

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()  # the session ends: the lock is released with it
            self._conn = None
