"""Memory writes at the same time share LanceDB writes, and each is searchable on its 201."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import lancedb
import pytest
from fastapi.testclient import TestClient

from embeddings.encoder import CachedEncoder, Vectors
from server.app import create_app
from server.indexer import VectorSpace
from tests.conftest import AGENT, PHONE, Api, FakeClock, admin, assert_error, make_settings
from tests.fakes import HashEncoder, fake_factory

M = f"/v1/agents/{AGENT}/memories"
WRITERS = 16


def version(api: Api) -> int:
    """The LanceDB table's latest version, read from disk: one per write."""
    index = api.services.indexer.space.index
    return int(lancedb.connect(str(index.path)).open_table(index.name).version)


def at_once(count: int, call: Callable[[int], Any]) -> list[Any]:
    """call(0..count-1), each in its own thread, released together."""
    start = threading.Barrier(count)
    out: list[Any] = [None] * count

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = call(i)
        except Exception as exc:  # the test reads it
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return out


def add_then_search(client: TestClient, i: int) -> tuple[httpx.Response, list[str]]:
    content = f"writer{i} keeps a parrot named Kiwi{i}"
    made = client.post(M, json={"content": content, "phone": PHONE}, headers=admin())
    found = client.post(
        f"{M}/search",
        json={"query": content, "phone": PHONE, "threshold": 0.99, "limit": 5},
        headers=admin(),
    )
    assert found.status_code == 200, found.text
    return made, [m["id"] for m in found.json()["items"]]


def test_concurrent_memory_writes_share_versions_and_are_searchable_at_once(api: Api) -> None:
    first = api.client.post(M, json={"content": "the table and its indexes exist"}, headers=admin())
    assert first.status_code == 201
    before = version(api)

    results = at_once(WRITERS, lambda i: add_then_search(api.client, i))

    for made, found in results:
        assert made.status_code == 201, made.text
        assert made.json()["id"] in found  # searchable when its 201 came back
    # One version per memory before group commit; now the writers waiting share writes.
    assert version(api) - before <= WRITERS // 2
    assert api.services.store.outbox_size() == 0


class Poisoned:
    """The fake encoder, failing on any batch holding the word "poison"."""

    def __init__(self, inner: HashEncoder) -> None:
        self._inner = inner

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def dim(self) -> int:
        return self._inner.dim

    def encode(self, texts: Sequence[str]) -> Vectors:
        if any("poison" in t for t in texts):
            raise RuntimeError("the encoder failed")
        return self._inner.encode(texts)

    def encode_query(self, texts: Sequence[str]) -> Vectors:
        return self.encode(texts)


@pytest.fixture
def lenient(tmp_path: Path, clock: FakeClock) -> Iterator[Api]:
    """An app whose TestClient answers a server error as the 500 a client sees."""
    app = create_app(make_settings(tmp_path / "data"), clock=clock, encoder_factory=fake_factory)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Api(client)


def test_a_failed_write_fails_its_own_caller_and_no_other(lenient: Api) -> None:
    indexer = lenient.services.indexer
    inner = HashEncoder(name=indexer.space.encoder.name, dim=indexer.space.encoder.dim)
    indexer.space = VectorSpace(CachedEncoder(Poisoned(inner)), indexer.space.index)

    def add(i: int) -> httpx.Response:
        word = "poison" if i == 0 else "fine"
        body = {"content": f"writer{i} is {word}", "phone": PHONE}
        return lenient.client.post(M, json=body, headers=admin())

    results = at_once(8, add)

    assert_error(results[0], 500)
    for response in results[1:]:
        assert response.status_code == 201, response.text
        memory_id = response.json()["id"]
        assert f"fact:{memory_id}" in indexer.space.index.get([f"fact:{memory_id}"])
