"""Health and the stored schema."""

from __future__ import annotations

from server import __version__
from server.store import MIGRATIONS
from tests.conftest import Api


def test_health(api: Api) -> None:
    body = api.client.get("/health").json()
    assert body == {
        "status": "ok",
        "index_lag": 0,
        "model": "fake-hash",
        "version": __version__,
        "erasure_pending": False,
        "upgrade": None,
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
