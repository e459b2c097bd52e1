"""Health and the stored schema."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from server import __version__
from server.store import MIGRATIONS, Store
from server.store.db import SchemaTooNew
from tests.conftest import Api, make_settings
from tests.live import ROOT, Server
from tests.server.test_startup import server_env


def test_health(api: Api) -> None:
    first = api.client.get("/health").json()["connections"]
    for _ in range(20):  # one request after another: each hands its connection back
        assert api.client.get("/health").status_code == 200
    body = api.client.get("/health").json()
    connections = body.pop("connections")
    assert connections["engine"] == api.services.store.engine
    assert connections["size"] == 8  # MEMORY_DB_POOL_SIZE's default
    assert connections["in_use"] == connections["waiting"] == 0
    # Requests one at a time reuse what is open: nothing opened since the first, all idle.
    assert first["open"] >= 1
    assert connections["open"] == first["open"]
    assert connections["idle"] == connections["open"]
    assert body == {
        "status": "ok",
        "problems": [],
        "index_lag": 0,
        "model": "fake-hash",
        "version": __version__,
        "erasure_pending": False,
        "move_pending": False,
        "upgrade": None,
        "indexer": "standby",  # (its loop does not run in this test, so it holds no lease)
    }


def test_migrations_are_recorded_and_run_once(api: Api) -> None:
    store = api.services.store
    assert store.schema_version() == len(MIGRATIONS)
    store._migrate()
    assert store.schema_version() == len(MIGRATIONS)


def test_a_database_migrated_by_a_newer_release_is_refused_at_start(tmp_path: Path) -> None:
    """An old replica next to an upgraded one must not run its old queries on new tables:
    `serve` exits 1 saying why, and the database is left as it was."""
    data = tmp_path / "data"
    store = Store.open(make_settings(data))
    newer = len(MIGRATIONS) + 1
    with store._db.transaction() as conn:  # as the next release's migration records itself
        conn.execute(
            "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
            (newer, "2027-01-01T00:00:00Z"),
        )
    store.close()
    with pytest.raises(SchemaTooNew, match=f"schema version {newer}"):
        Store.open(make_settings(data))
    server = Server(data, MEMORY_LOG_LEVEL="info")
    done = subprocess.run(
        [sys.executable, "-m", "server", "serve"],
        env={**os.environ, **server_env(server)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 1, done.stderr
    assert f"the database is at schema version {newer}" in done.stderr


def test_unknown_path_is_404_in_the_error_shape(api: Api) -> None:
    response = api.client.get("/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_wrong_method_is_405_in_the_error_shape(api: Api) -> None:
    response = api.client.put("/health")
    assert response.status_code == 405
    assert response.json()["error"]["status"] == 405


def test_health_says_degraded_while_the_indexer_keeps_failing_and_recovers(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The indexer's loop runs for real; its LanceDB write fails until the fault is removed
    (as when a file it had open vanished): /health says so, and the loop reopens the table."""
    indexer = api.services.indexer
    index = indexer.space.index
    real_upsert = index.upsert
    failing = {"on": True}

    def broken(*args: Any, **kwargs: Any) -> None:
        if failing["on"]:
            raise RuntimeError("lance: Not found: a data file is gone")
        real_upsert(*args, **kwargs)

    monkeypatch.setattr(index, "upsert", broken)
    monkeypatch.setattr(indexer, "_interval_s", 0.01)
    reopened = index.reopened
    api.post_turn("a turn the indexer cannot write yet")
    indexer.start()
    try:
        deadline = time.monotonic() + 30
        while indexer.stats.failing < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        body = api.client.get("/health").json()
        assert body["status"] == "degraded", body
        assert "indexer: " in body["problems"][0] and "a data file is gone" in body["problems"][0]
        assert index.reopened > reopened  # it opened the table afresh after each failure
        failing["on"] = False
        while api.services.store.outbox_size() and time.monotonic() < deadline:
            time.sleep(0.05)
        body = api.client.get("/health").json()
        assert body["status"] == "ok" and body["problems"] == [] and body["index_lag"] == 0
    finally:
        indexer.stop()
