"""Stopping the background indexer does not wait for a whole batch of a slow model."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from embeddings.encoder import Vectors
from embeddings.hashing import HashEncoder
from tests.conftest import Api


class Slow(HashEncoder):
    """A model that takes 5 ms a text (a batch of 512: 2.6 s)."""

    def __init__(self) -> None:
        super().__init__("fake-hash", 64)  # the model in use: no switch
        self.started = threading.Event()

    def encode(self, texts: Sequence[str]) -> Vectors:
        self.started.set()
        time.sleep(0.005 * len(texts))
        return super().encode(texts)


def test_stop_during_a_batch_returns_soon_and_keeps_the_rows(
    api_factory: Callable[..., Api],
) -> None:
    api = api_factory()
    for i in range(300):
        assert api.post_turn(f"turn number {i} about the weekend").status_code == 201
    indexer = api.services.indexer
    slow = Slow()
    indexer.space.encoder._inner = slow  # type: ignore[attr-defined]
    waiting = api.services.store.outbox_size()
    indexer.start()
    assert slow.started.wait(10)
    started = time.monotonic()
    indexer.stop()
    assert time.monotonic() - started < 1.0  # one slice, not the whole batch
    assert api.services.store.outbox_size() == waiting  # nothing acknowledged, nothing lost


def test_a_memory_written_while_stopping_is_stored_and_answered_503(api: Api) -> None:
    from tests.conftest import AGENT, PHONE, admin, assert_error

    api.services.indexer.stop()  # as at shutdown, with requests still in flight
    response = api.client.post(
        f"/v1/agents/{AGENT}/memories",
        json={"content": "Prefers window seats", "phone": PHONE},
        headers=admin(),
    )
    assert_error(response, 503, "shutting_down")
    assert api.services.store.outbox_size() == 1  # stored, and queued for the next start
