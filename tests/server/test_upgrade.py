"""A data folder made with one model, opened with another: the server answers from the old
table while the new one is built, then switches, and loses nothing written meanwhile."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from embeddings.encoder import Encoder
from embeddings.index import VectorIndex, table_name
from server.app import create_app
from server.deps import Services
from server.hooks import Hooks
from server.indexer import ACTIVE_MODEL, ACTIVE_TABLE, KINDS
from tests.backends import execute
from tests.conftest import AGENT, admin, make_settings
from tests.fakes import fake_factory

OLD, NEW = "fake-old-32d", "fake-new-48d"
ALICE, BOB, CARA = "+15550000001", "+15550000002", "+15550000003"


@contextmanager
def served(
    data: Path,
    model: str,
    *,
    hooks: Hooks | None = None,
    run_workers: bool = False,
    factory: Any = fake_factory,
) -> Iterator[TestClient]:
    settings = make_settings(data, embedding_model=model)
    app = create_app(settings, encoder_factory=factory, run_workers=run_workers, hooks=hooks)
    with TestClient(app) as client:
        yield client


def services(client: TestClient) -> Services:
    found: Services = client.app.state.services  # type: ignore[attr-defined]
    return found


def turn(client: TestClient, phone: str, content: str, role: str = "user") -> None:
    response = client.post(
        f"/v1/agents/{AGENT}/people/{phone}/messages",
        json={"role": role, "content": content},
        headers=admin(),
    )
    assert response.status_code == 201, response.text


def memory(client: TestClient, phone: str, content: str) -> str:
    response = client.post(
        f"/v1/agents/{AGENT}/memories",
        json={"content": content, "phone": phone},
        headers=admin(),
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def edit(client: TestClient, memory_id: str, content: str) -> None:
    response = client.patch(
        f"/v1/agents/{AGENT}/memories/{memory_id}", json={"content": content}, headers=admin()
    )
    assert response.status_code == 200, response.text


def sources(s: Services) -> set[str]:
    """Every item SQLite holds, as index row ids."""
    return {
        f"{kind}:{ref}" for kind in KINDS for part in s.store.iter_sources(kind) for ref in part
    }


def table(data: Path, model: str, dim: int) -> VectorIndex:
    return VectorIndex(data / "lance", model, dim)


def fill(client: TestClient) -> dict[str, str]:
    for i in range(12):
        turn(client, ALICE, f"alice talks about her garden number {i}")
        turn(client, CARA, f"cara orders blue shoes number {i}")
    return {
        "kept": memory(client, ALICE, "Alice keeps bees in the garden"),
        "edited": memory(client, ALICE, "Alice drinks tea"),
        "deleted": memory(client, ALICE, "Alice owns a red bicycle"),
        "cara": memory(client, CARA, "Cara wears size 38 shoes"),
    }


def test_upgrade_answers_from_the_old_table_then_switches_losing_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with served(data, OLD) as client:
        ids = fill(client)
        services(client).indexer.drain()
    old_rows = set(table(data, OLD, 32).all_ids())

    hooks = Hooks()
    during: dict[str, Any] = {}

    def traffic() -> None:
        """Between the build's chunks: writes of every kind, answered from the old model."""
        s = services(client)
        health = client.get("/health").json()
        during["health"] = health
        turn(client, BOB, "bob is new here and likes jazz")
        edit(client, ids["edited"], "Alice drinks coffee now")
        assert (
            client.delete(
                f"/v1/agents/{AGENT}/memories/{ids['deleted']}", headers=admin()
            ).status_code
            == 200
        )
        assert (
            client.delete(f"/v1/agents/{AGENT}/people/{CARA}", headers=admin()).status_code == 200
        )
        s.indexer.drain()  # the indexer writes to both tables while the new one is built
        search = client.post(
            f"/v1/agents/{AGENT}/memories/search",
            json={"query": "Alice keeps bees in the garden", "threshold": 0.5},
            headers=admin(),
        )
        during["search"] = [m["id"] for m in search.json()["items"]]

    chunks: list[int] = []

    def after_chunk() -> None:
        chunks.append(1)
        if len(chunks) == 1:  # the turns are in, the memories not yet
            traffic()
        elif len(chunks) == 2:  # the memories are in too: only the indexer can bring this
            edit(client, ids["kept"], "Alice keeps bees and hens in the garden")
            services(client).indexer.drain()

    hooks.on("upgrade.chunk_written", after_chunk)
    with served(data, NEW, hooks=hooks) as client:
        s = services(client)
        assert s.upgrade is not None
        assert s.indexer.space.encoder.name == OLD  # answering from the old table
        assert client.get("/health").json()["upgrade"]["state"] == "building"
        s.upgrade.run()

        health = client.get("/health").json()
        assert during["health"]["model"] == OLD
        assert during["health"]["upgrade"]["state"] == "building"
        assert ids["kept"] in during["search"]
        assert health["model"] == NEW
        assert health["upgrade"]["state"] == "done"
        assert health["upgrade"]["done"] == health["upgrade"]["total"] > 0
        assert s.store.meta(ACTIVE_MODEL) == NEW
        s.indexer.drain()
        assert health["index_lag"] == 0 or s.store.outbox_size() == 0

        new = table(data, NEW, 48)
        want = sources(s)
        assert set(new.all_ids()) == want  # everything, and nothing of the forgotten or deleted
        assert f"fact:{ids['deleted']}" not in want and f"fact:{ids['cara']}" not in want
        stored = new.get([f"fact:{ids['edited']}", f"fact:{ids['kept']}"])
        assert stored[f"fact:{ids['edited']}"][0].text == "Alice drinks coffee now"
        assert stored[f"fact:{ids['kept']}"][0].text == "Alice keeps bees and hens in the garden"
        assert len(chunks) == 2
        assert not new.count(f"phone = '{CARA}'")
        assert not table(data, OLD, 32).count(f"phone = '{CARA}'")
        assert new.count(f"phone = '{BOB}'") == 1  # written during the build, by the indexer
        found = client.post(
            f"/v1/agents/{AGENT}/memories/search",
            json={"query": "Alice drinks coffee now", "threshold": 0.5},
            headers=admin(),
        ).json()["items"]
        assert found[0]["id"] == ids["edited"]
    assert old_rows  # the old table was really in use before

    # Opened again with the new model: nothing left to do.
    with served(data, NEW) as client:
        assert services(client).upgrade is None
        assert client.get("/health").json()["upgrade"] is None


def test_an_interrupted_upgrade_resumes_and_skips_what_is_in(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with served(data, OLD) as client:
        fill(client)
        services(client).indexer.drain()

    hooks = Hooks()
    hooks.once("upgrade.chunk_written", lambda: services(client).upgrade.stop())  # type: ignore[union-attr]
    with served(data, NEW, hooks=hooks) as client:
        s = services(client)
        assert s.upgrade is not None
        s.upgrade.run()  # stops after its first chunk
        assert s.indexer.space.encoder.name == OLD
        assert s.store.meta(ACTIVE_MODEL) == OLD
        first = s.upgrade.status.done
        assert 0 < first < s.upgrade.status.total

    with served(data, NEW) as client:
        s = services(client)
        assert s.upgrade is not None
        encoder = s.upgrade.target.encoder
        before = len(encoder._inner.calls)  # type: ignore[attr-defined]
        s.upgrade.run()
        embedded = sum(encoder._inner.calls[before:])  # type: ignore[attr-defined]
        assert embedded <= s.upgrade.status.total - first  # the first chunk is not redone
        assert s.indexer.space.encoder.name == NEW
        assert set(table(data, NEW, 48).all_ids()) == sources(s)


def test_a_failed_upgrade_makes_health_degraded_and_keeps_serving_the_old_table(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with served(data, OLD) as client:
        fill(client)
        services(client).indexer.drain()

    def broken() -> None:
        raise OSError("No space left on device")

    hooks = Hooks()
    hooks.once("upgrade.chunk_written", broken)
    with served(data, NEW, hooks=hooks) as client:
        s = services(client)
        assert s.upgrade is not None
        s.upgrade._run_logged()  # as its thread runs it: the failure is kept, not raised
        body = client.get("/health").json()
        assert body["status"] == "degraded", body
        [problem] = body["problems"]
        assert problem.startswith(f"model upgrade to {NEW} failed") and "No space left" in problem
        assert body["upgrade"]["state"] == "failed" and body["model"] == OLD
        # The old table still answers.
        found = client.post(
            f"/v1/agents/{AGENT}/memories/search",
            json={"query": "Alice keeps bees in the garden", "threshold": 0.5},
            headers=admin(),
        )
        assert found.status_code == 200 and found.json()["items"], found.text


def test_a_table_of_the_previous_version_is_rebuilt_with_own_word_vectors(
    tmp_path: Path,
) -> None:
    """A folder from before version 4 (turn vectors made from the turn with its neighbours,
    no record of the table served) moves to the same model's current table like an upgrade."""
    data = tmp_path / "data"
    with served(data, OLD) as client:
        ids = fill(client)
        services(client).indexer.drain()
    current = table(data, OLD, 32)
    got = current.get(current.all_ids())
    rows = [row for row, _ in got.values()]
    legacy_name = table_name(OLD, 32, version=3)
    legacy = VectorIndex(data / "lance", OLD, 32, name=legacy_name)
    legacy.upsert(rows, fake_factory(OLD).encode([r.text for r in rows]))  # the old vectors
    shutil.rmtree(data / "lance" / f"{current.name}.lance")
    execute(make_settings(data), "DELETE FROM meta WHERE key = ?", ACTIVE_TABLE)

    with served(data, OLD) as client:
        s = services(client)
        assert s.upgrade is not None
        assert s.indexer.space.index.name == legacy_name  # answering from the old table
        assert s.store.meta(ACTIVE_TABLE) == legacy_name
        upgrade = client.get("/health").json()["upgrade"]
        assert upgrade["source_model"] == upgrade["target_model"] == OLD
        assert (upgrade["source_table"], upgrade["target_table"]) == (
            legacy_name,
            table_name(OLD, 32),
        )
        search = client.post(
            f"/v1/agents/{AGENT}/memories/search",
            json={"query": "Alice keeps bees in the garden", "threshold": 0.5},
            headers=admin(),
        ).json()["items"]
        assert search[0]["id"] == ids["kept"]
        hooks = services(client).upgrade._hooks  # type: ignore[union-attr]
        hooks.once("upgrade.chunk_written", lambda: s.upgrade.stop())  # type: ignore[union-attr]
        s.upgrade.run()  # stops after its first chunk: the turns
        assert s.store.meta(ACTIVE_TABLE) == legacy_name

    with served(data, OLD) as client:  # restarted: still answering from the old table
        s = services(client)
        assert s.upgrade is not None and s.indexer.space.index.name == legacy_name
        turn(client, ALICE, "alice is back with more garden news")  # 2 turns gain a neighbour
        inner = s.upgrade.target.encoder._inner  # type: ignore[attr-defined]
        before = len(inner.calls)
        s.upgrade.run()
        # The new turn and the 4 memories; the turns written before the stop keep their
        # vectors, even the two whose keyword text gained the new turn as a neighbour.
        assert sum(inner.calls[before:]) == 1 + 4
        assert s.indexer.space.index.name == table_name(OLD, 32)
        assert s.store.meta(ACTIVE_TABLE) == table_name(OLD, 32)
        rebuilt = table(data, OLD, 32)
        assert set(rebuilt.all_ids()) == sources(s)
        turn_row, vector = rebuilt.get(["turn:1"])["turn:1"]
        assert turn_row.text != turn_row.content  # keyword text: with its neighbours
        assert np.allclose(vector, fake_factory(OLD).encode([turn_row.content])[0])

    with served(data, OLD) as client:
        assert services(client).upgrade is None


@pytest.mark.model
def test_a_minilm_folder_moves_to_the_default_model_under_traffic(tmp_path: Path) -> None:
    from embeddings.e5 import E5_SMALL, E5Encoder
    from embeddings.encoder import SentenceEncoder

    cache: dict[str, Encoder] = {}

    def factory(model: str) -> Encoder:
        if model not in cache:
            cache[model] = E5Encoder() if model == E5_SMALL else SentenceEncoder(model)
        return cache[model]

    data = tmp_path / "data"
    with served(data, "all-MiniLM-L6-v2", factory=factory) as client:
        for i in range(60):
            turn(client, ALICE, f"day {i}: we talked about the garden and the weather")
        memory(client, ALICE, "Tiene un perro llamado Toby")
        services(client).indexer.drain()

    stop = threading.Event()
    written: list[str] = []

    def writer() -> None:
        i = 0
        while not stop.is_set():
            text = f"mensaje nuevo {i} mientras cambia el modelo"
            turn(client, BOB, text)
            written.append(text)
            i += 1
            time.sleep(0.02)

    with served(data, E5_SMALL, factory=factory, run_workers=True) as client:
        thread = threading.Thread(target=writer)
        thread.start()
        try:
            deadline = time.monotonic() + 120
            while client.get("/health").json()["upgrade"]["state"] == "building":
                assert time.monotonic() < deadline
                time.sleep(0.2)
        finally:
            stop.set()
            thread.join()
        s = services(client)
        assert client.get("/health").json()["model"] == E5_SMALL
        deadline = time.monotonic() + 60
        while s.store.outbox_size():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        new = VectorIndex(data / "lance", E5_SMALL, 384)
        assert set(new.all_ids()) == sources(s)
        assert new.count(f"phone = '{BOB}'") == len(written) > 0
        assert table_name(E5_SMALL, 384) == new.name
        body = client.get(
            f"/v1/agents/{AGENT}/people/{ALICE}/context",
            params={"query": "¿Cómo se llama mi mascota?"},
            headers=admin(),
        ).json()
        assert body["facts"][0]["content"] == "Tiene un perro llamado Toby"


def test_a_previous_model_that_cannot_be_loaded_switches_at_once_and_refills(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    with served(data, OLD) as client:
        fill(client)
        services(client).indexer.drain()

    def factory(model: str) -> Encoder:
        if model == OLD:
            raise OSError(f"{model}: no such model folder")
        return fake_factory(model)

    with caplog.at_level("WARNING"), served(data, NEW, factory=factory) as client:
        s = services(client)
        assert s.upgrade is None
        assert s.indexer.space.encoder.name == NEW  # no old table to answer from
        assert s.store.meta(ACTIVE_MODEL) == NEW
        assert s.store.meta(ACTIVE_TABLE) == table_name(NEW, 48)
        assert s.store.outbox_size() == len(sources(s))  # everything queued for the new table
        s.indexer.drain()
        assert set(table(data, NEW, 48).all_ids()) == sources(s)
    assert "previous model fake-old-32d cannot be loaded" in caplog.text
