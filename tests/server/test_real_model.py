"""A few tests on the real bundled model: paraphrases find their fact and their turn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from embeddings.encoder import Encoder, SentenceEncoder
from server.app import create_app
from tests.conftest import AGENT, PHONE, admin, make_settings

pytestmark = [pytest.mark.model, pytest.mark.engine_agnostic]

P = f"/v1/agents/{AGENT}/people/{PHONE}"


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    return SentenceEncoder("all-MiniLM-L6-v2")


@pytest.fixture
def client(tmp_path: Path, encoder: SentenceEncoder) -> Iterator[TestClient]:
    def factory(model: str) -> Encoder:
        assert model == "all-MiniLM-L6-v2"
        return encoder

    settings = make_settings(tmp_path, embedding_model="all-MiniLM-L6-v2")
    app = create_app(settings, encoder_factory=factory, run_workers=False)
    with TestClient(app) as test_client:
        yield test_client


def test_encoder_gives_unit_vectors_and_batches_agree(encoder: SentenceEncoder) -> None:
    texts = [f"sentence number {i} about dogs" for i in range(70)]
    batch = encoder.encode(texts)
    assert batch.shape == (70, 384) and batch.dtype == np.float32
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    one = encoder.encode([texts[65]])[0]
    assert float(one @ batch[65]) > 0.9999


def test_paraphrased_question_finds_its_fact_at_the_default_threshold(client: TestClient) -> None:
    memory = client.app.state.services.memory  # type: ignore[attr-defined]
    for fact in [
        "Maya works night shifts at the hospital",
        "Maya has a dog called Biscuit",
        "Maya is allergic to peanuts",
    ]:
        memory.add_memory(AGENT, PHONE, fact)
    client.post(
        f"{P}/messages",
        json={"role": "user", "content": "What is the name of Maya's dog?"},
        headers=admin(),
    )
    body = client.get(f"{P}/context", headers=admin()).json()
    # The relevance scale (embeddings/relevance.py): her other facts name her as the question
    # does, and may pass too, below the one about the dog.
    assert body["facts"][0]["content"] == "Maya has a dog called Biscuit"
    assert body["facts"][0]["score"] >= 0.7
    assert body["facts"][0]["score"] > max((f["score"] for f in body["facts"][1:]), default=0)
    assert "- Maya has a dog called Biscuit" in body["notes"]


def test_archived_turn_comes_back_for_a_paraphrase(client: TestClient) -> None:
    turns = ["I left my blue jacket at the hotel in Lisbon"] + [
        f"Let's talk about the weather on day {i}, it was sunny and warm" for i in range(44)
    ]
    for i, text in enumerate(turns):
        role = "user" if i % 2 == 0 else "assistant"
        client.post(f"{P}/messages", json={"role": role, "content": text}, headers=admin())
    client.app.state.services.indexer.drain()  # type: ignore[attr-defined]
    # A paraphrase sharing no word needs meaning: hybrid (or semantic) excerpts.
    body = client.get(
        f"{P}/context",
        params={"query": "Where did I forget my coat?", "excerpt_mode": "hybrid"},
        headers=admin(),
    ).json()
    assert body["excerpts"][0]["content"] == turns[0]
    # The default (keyword) finds it by a shared word.
    default = client.get(
        f"{P}/context", params={"query": "did anyone find my jacket?"}, headers=admin()
    ).json()
    assert default["excerpts"][0]["content"] == turns[0]
    assert turns[0] not in [h["content"] for h in body["history"]]


def test_staff_find_a_paraphrase_and_hybrid_finds_an_order_number(client: TestClient) -> None:
    # The order sits between neighbours, each indexed with it in its window (turn_window 1):
    # the turn that says it must still come first, not the greeting before it.
    target = "I want a refund for the blue jacket, order 48213"
    turns = (
        ["Hello, I need some help with an order", "Sure, what can I do for you?", target]
        + [
            f"My order {50000 + 37 * i} has not arrived yet, can you check the delivery?"
            for i in range(30)
        ]
        + [f"Thanks, have a nice day number {i}" for i in range(14)]
    )
    for i, text in enumerate(turns):
        role = "user" if i % 2 == 0 else "assistant"
        client.post(f"{P}/messages", json={"role": role, "content": text}, headers=admin())
    client.app.state.services.indexer.drain()  # type: ignore[attr-defined]

    def top(query: str, mode: str) -> list[str]:
        body = {"query": query, "mode": mode, "kinds": ["turns"], "limit": 3}
        items = client.post("/v1/search", json=body, headers=admin()).json()["items"]
        return [i["text"] for i in items]

    paraphrase = "customer who wanted their money back for a jacket"
    for mode in ("hybrid", "keyword", "semantic"):
        assert top(paraphrase, mode)[0] == target, mode
    assert top("48213", "hybrid")[0] == target
    assert top("48213", "keyword")[0] == target


def test_loading_the_model_prints_no_progress_bars() -> None:
    """A serve log once held a "Loading weights" bar per model copy; it holds none now."""
    import subprocess
    import sys

    code = (
        "from embeddings.encoder import SentenceEncoder\n"
        "encoder = SentenceEncoder('all-MiniLM-L6-v2')\n"
        "print(encoder.dim)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "384"
    assert "Loading weights" not in done.stderr and "it/s" not in done.stderr, done.stderr
