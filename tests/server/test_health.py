"""Health and the stored schema."""

from __future__ import annotations

import time
from typing import Any

import pytest

from server import __version__
from server.store import MIGRATIONS
from tests.conftest import Api


def test_health(api: Api) -> None:
    body = api.client.get("/health").json()
    assert body == {
        "status": "ok",
        "problems": [],
        "index_lag": 0,
        "model": "fake-hash",
        "version": __version__,
        "erasure_pending": False,
        "upgrade": None,
        "indexer": "standby",  # (its loop does not run in this test, so it holds no lease)
    }


def test_migrations_are_recorded_and_run_once(api: Api) -> None:
    store = api.services.store
    assert store.schema_version() == len(MIGRATIONS)
    store._migrate()
    assert store.schema_version() == len(MIGRATIONS)


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
