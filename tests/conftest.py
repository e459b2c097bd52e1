"""Shared fixtures: an app on a temporary data folder, keys, and the error-shape check."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from server.app import create_app
from server.config import Settings
from server.deps import Services
from server.hooks import Hooks
from tests.backends import database_url_for, drop_under, on_postgres
from tests.fakes import fake_factory
from tests.s3 import S3Server

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ADMIN_KEY = "test-admin-key-0123456789"
PHONE = "+15551230001"
AGENT = "support-bot"


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def make_settings(data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "admin_key": ADMIN_KEY,
        "embedding_model": "fake-hash",
        # Tests do not survive power loss anyway; skipping the fsync per commit keeps them fast.
        "sqlite_synchronous": "NORMAL",
    }
    values.update(overrides)
    if "database_url" not in values:  # PostgreSQL under MEMORY_TEST_BACKEND=postgresql
        values["database_url"] = database_url_for(Path(values["data_dir"]))
    return Settings(**values)


class Api:
    """A TestClient with the app's services and helpers for keys."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    @property
    def services(self) -> Services:
        services: Services = self.client.app.state.services  # type: ignore[attr-defined]
        return services

    def key(self, scope: str, agents: list[str] | None = None) -> dict[str, str]:
        body: dict[str, Any] = {"scope": scope}
        if agents is not None:
            body["agents"] = agents
        response = self.client.post("/v1/keys", json=body, headers=admin())
        assert response.status_code == 201, response.text
        return bearer(response.json()["key"])

    def post_turn(
        self,
        content: str,
        *,
        role: str = "user",
        agent: str = AGENT,
        phone: str = PHONE,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> httpx.Response:
        return self.client.post(
            f"/v1/agents/{agent}/people/{phone}/messages",
            json={"role": role, "content": content, **extra},
            headers=headers or admin(),
        )

    def index(self) -> int:
        """Drain the outbox into the vector index, as the background indexer would."""
        return self.services.indexer.drain()

    def context(
        self,
        *,
        agent: str = AGENT,
        phone: str = PHONE,
        headers: dict[str, str] | None = None,
        **params: Any,
    ) -> httpx.Response:
        return self.client.get(
            f"/v1/agents/{agent}/people/{phone}/context", params=params, headers=headers or admin()
        )


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def admin() -> dict[str, str]:
    return bearer(ADMIN_KEY)


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> None:
    """Every error has the one shape, with the status repeated in the body."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["status"] == status
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert isinstance(body["error"]["code"], str)
    if code is not None:
        assert body["error"]["code"] == code, body


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api_factory(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., Api]]:
    clients: list[TestClient] = []

    def build(*, run_workers: bool = False, hooks: Hooks | None = None, **overrides: Any) -> Api:
        settings = make_settings(tmp_path / f"data{len(clients)}", **overrides)
        app = create_app(
            settings,
            clock=clock,
            encoder_factory=fake_factory,
            run_workers=run_workers,
            hooks=hooks,
        )
        client = TestClient(app)
        client.__enter__()
        clients.append(client)
        return Api(client)

    yield build
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def api(api_factory: Callable[..., Api]) -> Api:
    return api_factory()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests of one engine's own machinery skip on the other, saying so: SQLite's WAL and
    files, and PostgreSQL's sessions (terminated backends, restore's refusal), pg_dump and
    erasure as a dump sees it."""
    other = "sqlite" if on_postgres() else "postgresql"
    skip = pytest.mark.skip(reason=f"a {other}-only behaviour, run by the {other} pass")
    # A test that opens no database of the server's (the encoders, LanceDB alone, the
    # benchmarks' own folders, the compose file) runs the same code on both passes: once is
    # enough.
    same = pytest.mark.skip(reason="opens no database: the same on both passes, run by sqlite")
    # A test that opens a database but checks what does not depend on the engine (a page in
    # a browser, the real models, a cache's cap, the client library, MCP) runs once too.
    agnostic = pytest.mark.skip(reason="checks nothing of the engine's: run by the sqlite pass")
    for item in items:
        if item.get_closest_marker(other):
            item.add_marker(skip)
        elif on_postgres() and item.get_closest_marker("no_database"):
            item.add_marker(same)
        elif on_postgres() and item.get_closest_marker("engine_agnostic"):
            item.add_marker(agnostic)


@pytest.fixture(autouse=True)
def _drop_the_tests_databases(request: pytest.FixtureRequest) -> Iterator[None]:
    """On PostgreSQL, a test's own databases are dropped in the background once it ends."""
    own = None
    if on_postgres() and "tmp_path" in request.fixturenames:
        own = request.getfixturevalue("tmp_path")
    yield
    if own is not None:
        drop_under(own)


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """An S3-compatible server on 127.0.0.1 (moto), for the whole run; each test makes its
    own bucket (S3Server.new_uri)."""
    server = S3Server()
    yield server
    server.stop()
