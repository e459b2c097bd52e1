"""Which database the suite runs on: SQLite (the default), or PostgreSQL with
MEMORY_TEST_BACKEND=postgresql, where every data folder gets a database of its own on the
local server (127.0.0.1:5432, trust auth), made on first use and dropped at the end."""

from __future__ import annotations

import atexit
import contextlib
import os
import uuid
from pathlib import Path
from typing import Any

BACKEND = os.environ.get("MEMORY_TEST_BACKEND", "sqlite")
ADMIN_URL = os.environ.get(
    "MEMORY_TEST_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
_made: dict[Path, str] = {}


def on_postgres() -> bool:
    return BACKEND == "postgresql"


_templates: list[str] = []


def database_url_for(data_dir: Path) -> str | None:
    """The database of a data folder (the same one each time: a restart finds its data)."""
    if not on_postgres():
        return None
    key = data_dir.resolve()
    if key not in _made:
        name = f"memtest_{uuid.uuid4().hex[:16]}"
        _admin(f"CREATE DATABASE {name} TEMPLATE {_migrated_template()}")
        _made[key] = _url(name)
    return _made[key]


def _migrated_template() -> str:
    """A database the current migrations were applied to, once per test run: each test's
    database is a copy of it (about 0.1 s, where migrating a new one took 0.35 s, times some
    700 tests). Tests of older schemas take a copy back to the version they need."""
    if not _templates:
        from server.store import Store

        name = f"memtemplate_{uuid.uuid4().hex[:16]}"
        _admin(f"CREATE DATABASE {name}")
        _templates.append(name)
        Store(database_url=_url(name)).close()  # no session may stay on a template
    return _templates[0]


def _url(name: str) -> str:
    return ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"


def _admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


def _drop(name: str) -> None:
    with contextlib.suppress(Exception):  # (the server may be gone at exit)
        _admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


_dropping: list[Any] = []  # the pool that drops finished tests' databases as the run goes


def drop_under(folder: Path) -> None:
    """Drop, in the background, the databases of data folders inside `folder` (a finished
    test's own temporary folder): the run does not wait for them, and at its end only the
    rest are left to drop (700 drops at exit took a minute of CI's time)."""
    root = folder.resolve()
    names = [_made.pop(key).rsplit("/", 1)[1] for key in list(_made) if key.is_relative_to(root)]
    if not names:
        return
    if not _dropping:
        from concurrent.futures import ThreadPoolExecutor

        _dropping.append(ThreadPoolExecutor(max_workers=2, thread_name_prefix="drop-db"))
    for name in names:
        _dropping[0].submit(_drop, name)


@atexit.register
def _drop_all() -> None:
    import threading

    if _dropping:
        _dropping.pop().shutdown(wait=True)
    # Eight at a time: each DROP mostly waits for the server's checkpoint of its files. (Plain
    # threads: concurrent.futures takes no work once the interpreter is shutting down.)
    names = [url.rsplit("/", 1)[1] for url in _made.values()]
    for start in range(0, len(names), 8):
        threads = [threading.Thread(target=_drop, args=(n,)) for n in names[start : start + 8]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    _made.clear()
    for name in _templates:
        _drop(name)
    _templates.clear()


def query(settings: Any, sql: str, *args: object) -> list[Any]:
    """Rows of a read on the settings' database, on a connection of its own (`?` marks the
    arguments on both engines); rows answer r[0] and r["column"]."""
    if settings.database_url:
        import psycopg

        from server.store.postgres import _row_factory, _sql

        with psycopg.connect(settings.database_url, row_factory=_row_factory) as conn:
            return list(conn.execute(_sql(sql), args).fetchall())
    import sqlite3

    conn = sqlite3.connect(settings.sqlite_path)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def execute(settings: Any, sql: str, *args: object) -> None:
    """A write on the settings' database, as another process would make it."""
    if settings.database_url:
        import psycopg

        from server.store.postgres import _sql

        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            conn.execute(_sql(sql), args)
        return
    import sqlite3

    conn = sqlite3.connect(settings.sqlite_path)
    try:
        with conn:
            conn.execute(sql, args)
    finally:
        conn.close()


def data_env(data_dir: Path) -> dict[str, str]:
    """The environment naming a data folder and, on PostgreSQL, its database: what a command
    or a server run for that folder needs."""
    env = {"MEMORY_DATA_DIR": str(data_dir)}
    url = database_url_for(Path(data_dir))
    if url:
        env["MEMORY_DATABASE_URL"] = url
    return env


def set_data_env(monkeypatch: Any, data_dir: Path) -> None:
    for name, value in data_env(data_dir).items():
        monkeypatch.setenv(name, value)
