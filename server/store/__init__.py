"""Storage: the schema with its migrations and every query, on SQLite (the embedded default)
or PostgreSQL (replicas). The only package that writes SQL: one module per group of tables,
the engines' differences in db.py (and postgres.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from server.clock import Clock, utc_now
from server.store.audit import FORGOTTEN, AuditQueries
from server.store.db import Database, SqliteDatabase, migrate
from server.store.erasure import ErasureQueries, StillActive
from server.store.keys import KeyQueries
from server.store.leases import Lease
from server.store.memories import MemoryQueries
from server.store.messages import MessageQueries
from server.store.moves import MoveQueries, NothingToMove, PendingMove, PersonBusy, PersonMove
from server.store.optouts import OptOutQueries
from server.store.outbox import OutboxQueries
from server.store.people import PeopleQueries, PersonName
from server.store.pool import PoolStats
from server.store.records import (
    ApiKey,
    AuditEntry,
    HistoryEntry,
    Memory,
    MemoryFilter,
    Message,
    OutboxItem,
    PersonErasure,
    Summary,
)
from server.store.retention import ArchivedErasure, RetentionQueries
from server.store.schema import POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS

if TYPE_CHECKING:
    from server.config import Settings

MIGRATIONS = SQLITE_MIGRATIONS

__all__ = [
    "FORGOTTEN",
    "MIGRATIONS",
    "POSTGRES_MIGRATIONS",
    "ApiKey",
    "ArchivedErasure",
    "AuditEntry",
    "HistoryEntry",
    "Memory",
    "MemoryFilter",
    "Message",
    "NothingToMove",
    "OutboxItem",
    "PendingMove",
    "PersonBusy",
    "PersonErasure",
    "PersonMove",
    "PersonName",
    "StillActive",
    "Store",
    "Summary",
]


class Store(
    MessageQueries,
    MemoryQueries,
    KeyQueries,
    AuditQueries,
    OutboxQueries,
    ErasureQueries,
    OptOutQueries,
    RetentionQueries,
    MoveQueries,
    PeopleQueries,
):
    """Every query, on SQLite at `path` (WAL), or on PostgreSQL at `database_url`."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        busy_timeout_ms: int = 10_000,
        clock: Clock = utc_now,
        synchronous: str = "FULL",
        database_url: str | None = None,
        pool_size: int = 8,
        pool_timeout_s: float = 10.0,
    ):
        self.path = path
        self._clock = clock
        db: Database
        if database_url:
            from server.store.postgres import PostgresDatabase

            db = PostgresDatabase(
                database_url, pool_size=pool_size, pool_timeout_s=pool_timeout_s
            )
        elif path is not None:
            db = SqliteDatabase(
                path,
                busy_timeout_ms=busy_timeout_ms,
                synchronous=synchronous,
                pool_size=pool_size,
                pool_timeout_s=pool_timeout_s,
            )
        else:
            raise ValueError("a SQLite path or a database URL")
        self._db = db
        self.created = False  # whether opening it made the schema (it held none)
        try:
            self._migrate()
        except BaseException:
            db.close()
            raise

    @classmethod
    def open(cls, settings: Settings, *, clock: Clock = utc_now) -> Store:
        """The store the settings name: PostgreSQL at MEMORY_DATABASE_URL, else SQLite."""
        return cls(
            settings.sqlite_path,
            busy_timeout_ms=settings.busy_timeout_ms,
            clock=clock,
            synchronous=settings.sqlite_synchronous,
            database_url=settings.database_url,
            pool_size=settings.db_pool_size,
            pool_timeout_s=settings.db_pool_timeout_s,
        )

    def lease(self, name: str, folder: Path, *, keep_session: bool = False) -> Lease:
        """A lease named `name` among the processes sharing this database (server/store/
        leases.py): an advisory lock on PostgreSQL, a flock in `folder` on SQLite. With
        keep_session, a PostgreSQL lease keeps its connection between holds."""
        return self._db.lease(name, folder, keep_session=keep_session)

    @property
    def engine(self) -> str:
        """sqlite or postgresql."""
        return self._db.name

    def close(self) -> None:
        self._db.close()

    def _migrate(self) -> None:
        """Apply the migrations not applied yet (also run at every start)."""
        self.created = migrate(self._db, self._now())

    def schema_version(self) -> int:
        row = self._reader().execute("SELECT MAX(version) FROM schema_migrations").fetchone()
        return int(row[0] or 0)

    def checkpoint(self, *, wait_s: float = 1.0) -> bool:
        """After a forget, outside any lock of the caller's: no old copy of the deleted rows
        may stay (SQLite: a truncating WAL checkpoint, retried in the background while a
        reader holds it off; PostgreSQL: VACUUM of the tables). True when done now."""
        return self._db.erase_deleted(wait_s)

    def pool_stats(self) -> PoolStats:
        """The read connections: how many may be open, are open, in use, idle; waiters."""
        return self._db.pool_stats()

    @property
    def checkpoint_pending(self) -> bool:
        """A forget's erasure is still owed (SQLite: a reader has held the checkpoint off)."""
        return self._db.erasure_pending
