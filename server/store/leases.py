"""Leases: one holder at a time among the processes sharing a database, released when the
holder dies. The indexer holds one, so that among replicas exactly one runs it.

On PostgreSQL a session advisory lock on a connection of its own: a killed process's
connection closes and the lock goes with it (TCP keepalives find a vanished host within
about 11 s). On SQLite (processes of one machine on one data folder) an exclusive flock on a
file of the folder, which the kernel releases when the process dies."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from typing import Any

from embeddings.location import CrossProcessLock, FileLease

__all__ = ["FileLease", "Lease", "PostgresLease"]

log = logging.getLogger(__name__)


Lease = CrossProcessLock


class PostgresLease:
    """A session advisory lock. With keep_session, release unlocks but keeps the connection
    for the next hold (a lock taken for every write: no new connection each time)."""

    def __init__(self, url: str, name: str, *, keep_session: bool = False) -> None:
        self._url = url
        # A stable 63-bit key from the name: every replica computes the same one.
        self._key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") >> 1
        self._keep = keep_session
        self._conn: Any = None
        self._held = False
        self._guard = threading.Lock()

    def try_hold(self) -> bool:
        import psycopg

        with self._guard:
            if self._conn is not None:
                try:
                    if self._held:
                        self._conn.execute("SELECT 1")  # still ours while the session lives
                        return True
                    return self._take(self._conn)
                except psycopg.Error:
                    if self._held:
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
            except psycopg.Error as exc:
                log.warning("cannot reach the database for a lease: %s", exc)
                return False
            try:
                if self._take(conn):
                    self._conn = conn
                    return True
            except psycopg.Error as exc:
                log.warning("cannot take a lease: %s", exc)
            if self._keep and self._conn is None:
                self._conn = conn
            else:
                conn.close()
            return False

    def _take(self, conn: Any) -> bool:
        held = conn.execute("SELECT pg_try_advisory_lock(%s)", (self._key,)).fetchone()
        self._held = bool(held is not None and held[0])
        return self._held

    def release(self) -> None:
        with self._guard:
            if not self._keep or self._conn is None:
                self._drop()
                return
            if self._held:
                try:
                    self._conn.execute("SELECT pg_advisory_unlock(%s)", (self._key,))
                    self._held = False
                except Exception:
                    self._drop()  # the session ends: the lock is released with it

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()  # the session ends: the lock is released with it
            self._conn = None
        self._held = False
