"""PostgreSQL's side of backup and restore: the snapshot pg_dump copies (with its counts), the
other sessions on the database, and the tables of a newer schema a restore must not leave."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from server.store.schema import POSTGRES_MIGRATIONS

if TYPE_CHECKING:
    import psycopg

# Every table the migrations make, and their record: what a restore may drop.
OUR_TABLES = frozenset(
    [*re.findall(r"CREATE TABLE (\w+)", "\n".join(POSTGRES_MIGRATIONS)), "schema_migrations"]
)


class PgError(Exception):
    """The database could not be reached or refused a query (libpq's message: it never holds
    the password)."""


@dataclass(frozen=True)
class Snapshot:
    """An exported snapshot, held open: pg_dump --snapshot copies exactly these rows."""

    name: str
    messages: int
    memories: int
    schema_version: int


@contextmanager
def _connect(url: str, *, autocommit: bool = True) -> Iterator[psycopg.Connection[Any]]:
    import psycopg  # only with MEMORY_DATABASE_URL

    try:
        with psycopg.connect(url, autocommit=autocommit, connect_timeout=10) as conn:
            yield conn
    except psycopg.Error as exc:
        raise PgError(f"the database: {str(exc).strip()}") from None


@contextmanager
def exported_snapshot(url: str) -> Iterator[Snapshot]:
    """A repeatable-read transaction whose snapshot stays importable while the block runs."""
    with _connect(url, autocommit=False) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        name = _one(conn, "SELECT pg_export_snapshot()")
        version = _schema_version(conn)
        messages = int(_one(conn, "SELECT COUNT(*) FROM messages")) if version else 0
        memories = int(_one(conn, "SELECT COUNT(*) FROM memories")) if version else 0
        yield Snapshot(name, messages, memories, version)
        conn.rollback()


def schema_version(url: str) -> int:
    """The database's schema version (0 when it has no schema yet)."""
    with _connect(url) as conn:
        return _schema_version(conn)


def other_sessions(url: str) -> list[str]:
    """Client sessions on the database other than this one, as `user application` (what any
    role may see of another role's sessions). Background workers (autovacuum) have no user."""
    with _connect(url) as conn:
        rows = conn.execute(
            "SELECT usename, application_name FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND usesysid IS NOT NULL"
            " AND (backend_type IS NULL OR backend_type = 'client backend')"
            " ORDER BY pid"
        ).fetchall()
    return [f"{user or '?'} {app or '(no application name)'}" for user, app in rows]


def drop_leftover_tables(url: str, restored: set[str]) -> list[str]:
    """Drop the tables of ours in the database's schema that the restored dump did not hold
    (made by a later migration than the backup's: left, the next start would fail to make
    them again). Tables that are not memory-server's are left alone."""
    with _connect(url, autocommit=False) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
        leftover = sorted({r[0] for r in rows} & OUR_TABLES - restored)
        for name in leftover:
            conn.execute(f'DROP TABLE IF EXISTS "{name}" CASCADE')
        conn.commit()
    return leftover


def _schema_version(conn: psycopg.Connection[Any]) -> int:
    if _one(conn, "SELECT to_regclass('schema_migrations') IS NOT NULL"):
        return int(_one(conn, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations"))
    return 0


def _one(conn: psycopg.Connection[Any], sql: str) -> Any:
    row = conn.execute(sql).fetchone()
    assert row is not None
    return row[0]
