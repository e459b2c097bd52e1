"""Database connections stay bounded: request threads come and go (the server's thread pool
retires idle ones after about 10 s), and each new burst of traffic must reuse the connections
of the last one instead of opening more. Counted as the operator sees them: open files of the
process (SQLite), sessions in pg_stat_activity (PostgreSQL)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from server.store import Store
from tests.conftest import ADMIN_KEY, AGENT, PHONE, Api, admin, assert_error, make_settings
from tests.live import Server

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def sessions(url: str) -> int:
    """Sessions on the database, but the one asking."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])


def connections_of(settings: Any, pid: int) -> int:
    """What the engine counts: the database's sessions, or the process's open files of the
    SQLite database (each connection holds the file and its WAL)."""
    if settings.database_url:
        return sessions(settings.database_url)
    database = str(settings.sqlite_path)
    return sum(1 for f in psutil.Process(pid).open_files() if f.path.startswith(database))


def most_connections(settings: Any, pool_size: int) -> int:
    """The most a process may hold with a pool of `pool_size`: the pool, the writer and one
    more for a moment (a checkpoint, a stream, a lease, a VACUUM); on SQLite each holds up to
    three files (the database, its WAL and its shared memory)."""
    return pool_size + 3 if settings.database_url else 3 * (pool_size + 2)


def burst_of_new_threads(read: Callable[[], object], threads: int = 40, each: int = 2) -> None:
    """`threads` threads never seen before, each reading a few times, all at once."""
    start = threading.Barrier(threads)
    failures: list[BaseException] = []

    def run() -> None:
        start.wait()
        try:
            for _ in range(each):
                read()
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert not failures, failures[:3]


def test_bursts_of_new_threads_reuse_a_bounded_set_of_connections(tmp_path: Path) -> None:
    """Five bursts of 40 new threads: the connections stay within the pool's size and the
    writer's (a connection per thread grew by about 40 a burst)."""
    import os

    settings = make_settings(tmp_path, db_pool_size=4)
    store = Store.open(settings)
    try:
        counts = []
        for _ in range(5):
            burst_of_new_threads(lambda: store.recent_turns(AGENT, PHONE, 10))
            counts.append(connections_of(settings, os.getpid()))
        assert max(counts) <= most_connections(settings, 4), counts
        stats = store.pool_stats()
        assert stats.open <= 4 and stats.in_use == 0, stats
    finally:
        store.close()


@pytest.mark.slow
def test_bursts_with_idle_pauses_on_the_live_server_keep_connections_flat(
    tmp_path: Path,
) -> None:
    """The adversarial run's drill, shortened: bursts of 80 GETs, 40 at a time, with a pause
    longer than the server's idle thread timeout (10 s) between them: after each, the
    connections are within the pool's size (4) and the writer's and leases' few. (A
    connection per thread: 75 sessions after the second burst here, 139 open files.)"""
    data = tmp_path / "data"
    server = Server(data, MEMORY_DB_POOL_SIZE="4")
    server.start()
    settings = make_settings(data)
    assert server.process is not None
    paths = [
        f"/v1/agents/{AGENT}/people/{PHONE}/context",
        f"/v1/agents/{AGENT}/people/{PHONE}/messages",
        "/health",
    ]
    try:
        with httpx.Client(base_url=server.base, headers=ADMIN, timeout=30) as http:
            http.post(paths[1], json={"role": "user", "content": "hola"})

            def get(n: int) -> int:
                return http.get(paths[n % len(paths)]).status_code

            counts = []
            for burst in range(2):
                if burst:
                    time.sleep(11)  # the request threads of the first burst retire
                with ThreadPoolExecutor(40) as pool:
                    assert set(pool.map(get, range(80))) == {200}
                counts.append(connections_of(settings, server.process.pid))
            pool_stats = http.get("/health").json()["connections"]
    finally:
        server.stop()
    assert max(counts) <= most_connections(settings, 4), counts
    assert pool_stats["open"] <= pool_stats["size"] == 4 and pool_stats["in_use"] <= 1


def test_every_connection_in_use_is_a_503_in_the_error_shape_then_reads_work_again(
    api_factory: Callable[..., Api],
) -> None:
    """A pool of one, held by a long read: the next read waits the pool's timeout and gets 503
    database_busy; once it is free, reads work."""
    api = api_factory(db_pool_size=1, db_pool_timeout_s=0.3)
    assert api.post_turn("hola").status_code == 201
    db = api.services.store._db
    with db.snapshot():
        answer = api.context()
    assert_error(answer, 503, "database_busy")
    assert api.context().status_code == 200
    health = api.client.get("/health", headers=admin()).json()["connections"]
    assert health["size"] == 1 and health["in_use"] == 0
