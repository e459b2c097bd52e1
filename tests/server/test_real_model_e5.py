"""The default model, multilingual-e5-small (on ONNX Runtime int8, as served), for real:
Spanish, English and the two mixed, through the HTTP API with default settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from embeddings.e5 import E5_ENGINE, E5_SMALL, E5Encoder
from embeddings.e5_onnx import OnnxE5Encoder
from embeddings.encoder import Encoder
from server.app import create_app, default_encoder_factory
from server.config import DEFAULT_MODEL
from tests.conftest import AGENT, PHONE, admin, make_settings

pytestmark = [pytest.mark.model, pytest.mark.engine_agnostic]

P = f"/v1/agents/{AGENT}/people/{PHONE}"


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Encoder:
    """The server's own choice for the default model's name (the model cache's ONNX files,
    built by scripts/setup)."""
    settings = make_settings(tmp_path_factory.mktemp("e5"))
    made = default_encoder_factory(settings)(DEFAULT_MODEL)
    assert isinstance(made, OnnxE5Encoder) and made.name == E5_SMALL
    return made


def test_the_engine_stays_selectable_by_name_under_the_same_model_name(tmp_path: Path) -> None:
    made = default_encoder_factory(make_settings(tmp_path))(E5_ENGINE)
    assert isinstance(made, E5Encoder) and made.name == E5_SMALL  # the same table, the same model


@pytest.fixture
def client(tmp_path: Path, encoder: Encoder) -> Iterator[TestClient]:
    def factory(model: str) -> Encoder:
        assert model == E5_SMALL
        return encoder

    assert DEFAULT_MODEL == E5_SMALL
    settings = make_settings(tmp_path, embedding_model=DEFAULT_MODEL)  # every other default
    app = create_app(settings, encoder_factory=factory, run_workers=False)
    with TestClient(app) as test_client:
        yield test_client


def add_facts(client: TestClient, facts: list[str]) -> None:
    for fact in facts:
        response = client.post(
            f"/v1/agents/{AGENT}/memories",
            json={"content": fact, "phone": PHONE},
            headers=admin(),
        )
        assert response.status_code == 201, response.text


def facts_for(client: TestClient, query: str) -> list[dict[str, object]]:
    body = client.get(f"{P}/context", params={"query": query}, headers=admin()).json()
    facts: list[dict[str, object]] = body["facts"]
    return facts


def test_vectors_are_unit_batches_agree_and_questions_differ_from_passages(
    encoder: Encoder,
) -> None:
    texts = [f"mensaje número {i} sobre el perro 🐶 y https://ejemplo.com/{i}" for i in range(70)]
    batch = encoder.encode(texts)
    assert batch.shape == (70, 384) and batch.dtype == np.float32
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    assert float(encoder.encode([texts[65]])[0] @ batch[65]) > 0.9999
    query = encoder.encode_query([texts[3]])[0]
    assert 0.8 < float(query @ batch[3]) < 0.999  # the prefix changes the vector, not the sense
    long = " ".join(["el cumpleaños de mi abuela Rosa es en mayo"] * 120)  # > 510 tokens
    assert encoder.token_count(long) > 510  # type: ignore[attr-defined]
    vector = encoder.encode([long, "a\x00b", "\ud800"])
    assert np.allclose(np.linalg.norm(vector, axis=1), 1.0, atol=1e-5)


SPANISH_FACTS = [
    "Tiene un perro llamado Toby",
    "Trabaja de enfermera en el turno de noche",
    "Es alérgica al maní",
    "Se mudó a Valencia en marzo",
]


def test_a_spanish_question_finds_the_spanish_fact_first(client: TestClient) -> None:
    add_facts(client, SPANISH_FACTS)
    facts = facts_for(client, "¿Cómo se llama mi mascota?")
    assert facts[0]["content"] == "Tiene un perro llamado Toby"
    assert float(str(facts[0]["score"])) >= 0.7


def test_questions_find_facts_across_languages(client: TestClient) -> None:
    add_facts(client, [*SPANISH_FACTS, "Maya works night shifts at the hospital"])
    assert facts_for(client, "What is my dog's name?")[0]["content"] == SPANISH_FACTS[0]
    assert facts_for(client, "What am I allergic to?")[0]["content"] == SPANISH_FACTS[2]
    assert (
        facts_for(client, "¿Dónde trabaja Maya?")[0]["content"]
        == "Maya works night shifts at the hospital"
    )


ROSA = "My grandmother Rosa turns ninety on the fourteenth of May"
FILLER = [
    "Can you check the delivery of my order?",
    "Sure, it ships on Monday from the warehouse.",
    "I need a new charger for my phone",
    "We have USB-C chargers in black and white.",
    "The weather in Lisbon was lovely this week",
    "Glad to hear it! Anything else I can help with?",
]


def converse(client: TestClient, turns: list[str]) -> None:
    """The turns, user and assistant in turn, stored and indexed."""
    for i, text in enumerate(turns):
        role = "user" if i % 2 == 0 else "assistant"
        response = client.post(
            f"{P}/messages", json={"role": role, "content": text}, headers=admin()
        )
        assert response.status_code == 201
    client.app.state.services.indexer.drain()  # type: ignore[attr-defined]


def test_the_granny_paraphrase_finds_rosas_turn_with_default_settings(
    client: TestClient,
) -> None:
    rosa = ROSA
    converse(client, [rosa] + [FILLER[i % len(FILLER)] + f" ({i})" for i in range(44)])
    body = client.get(
        f"{P}/context", params={"query": "When is my granny having her birthday?"}, headers=admin()
    ).json()
    assert rosa not in [h["content"] for h in body["history"]]  # archived
    found = [e["content"] for e in body["excerpts"]]
    # Found by meaning (no content word is shared), first: the vector is the turn's own words,
    # so the turns next to it (which hold it in their keyword text) do not outrank it.
    assert found[0] == rosa, found


def test_the_duplicate_threshold_merges_rewrites_and_keeps_changed_values(
    encoder: Encoder,
) -> None:
    from embeddings.calibration import calibration_for

    threshold = calibration_for(E5_SMALL).duplicate_threshold

    def same(a: str, b: str) -> float:
        v = encoder.encode_query([a, b])  # the symmetric form, as compaction compares facts
        return float(v[0] @ v[1])

    assert same("Tiene un perro llamado Toby", "tiene un perro llamado toby.") >= threshold
    for a, b in [
        ("Tiene un perro llamado Toby", "Tiene un perro llamado Max"),
        ("Se mudó a Madrid", "Se mudó a Sevilla"),
        ("Her birthday is on 14 May", "Her birthday is on 15 May"),
    ]:
        assert same(a, b) < threshold, (a, b)


def test_staff_search_hides_filler_below_the_floor_and_keeps_the_paraphrase(
    client: TestClient,
) -> None:
    rosa = ROSA
    turns = [rosa, "I want a refund for the blue jacket, order 48213"]
    converse(client, turns + [FILLER[i % 4] + f" ({i})" for i in range(40)])

    def staff(**body: object) -> dict[str, object]:
        response = client.post("/v1/search", json={"kinds": ["turns"], **body}, headers=admin())
        assert response.status_code == 200, response.text
        found: dict[str, object] = response.json()
        return found

    # A paraphrase (no word shared) comes first, the filler is hidden and counted.
    found = staff(query="When is my granny having her birthday?", limit=50)
    items = found["items"]
    assert isinstance(items, list) and items[0]["text"] == rosa, items
    assert 0 < items[0]["relevance"] <= 1 and items[0]["match"] in ("weak", "good", "strong")
    assert found["floor"] == 0.01 and isinstance(found["hidden"], int) and found["hidden"] >= 20
    assert len(items) + found["hidden"] == 42  # everything was looked at: shown or hidden
    # the order is the mode's (hybrid); relevance is each result's own, on the scale: the
    # paraphrase is the most relevant of all
    assert items[0]["relevance"] == max(i["relevance"] for i in items)
    # min_relevance 0 shows everything: the filler that was hidden is what is at relevance 0.
    everything = staff(query="When is my granny having her birthday?", limit=50, min_relevance=0)
    shown = everything["items"]
    assert isinstance(shown, list) and len(shown) == 42 and everything["hidden"] == 0
    below = [i for i in shown if i["relevance"] < 0.01]
    assert len(below) == found["hidden"] and all(i["match"] == "weak" for i in below)
    # The order number, asked by its words: the one turn that has it is a strong match.
    exact = staff(query="order 48213 refund", mode="keyword")["items"]
    assert isinstance(exact, list) and exact[0]["text"].endswith("order 48213")
    assert exact[0]["match"] == "strong"


def test_bad_and_odd_input_on_the_onnx_path_is_a_4xx_or_stored_and_found(
    client: TestClient,
) -> None:
    """Empty, over-long and lone-surrogate text is a clear 4xx; the longest turn allowed
    (32,000 characters: many windows of 510 tokens) and emoji-only turns are stored, embedded
    and found; a query of odd text answers 200."""
    for content in ("", "   "):
        response = client.post(
            f"{P}/messages", json={"role": "user", "content": content}, headers=admin()
        )
        assert response.status_code == 422, response.text
        assert response.json()["error"]["code"]
    too_long = client.post(
        f"{P}/messages", json={"role": "user", "content": "a" * 32_001}, headers=admin()
    )
    assert too_long.status_code in (413, 422), too_long.text
    surrogate = client.post(
        f"{P}/messages",
        content=b'{"role": "user", "content": "hola \\ud800 mundo"}',
        headers={**admin(), "Content-Type": "application/json"},
    )
    assert surrogate.status_code == 422, surrogate.text
    longest = ("mi pedido 4471 llegó roto y quiero un reembolso " * 700)[:32_000]
    converse(client, [longest, "🎉🎉🎉", "👍", "😀😃😄😁😆😅🤣😂🙂🙃" * 50])
    health = client.get("/health").json()
    assert health["index_lag"] == 0
    for query in ("🎉", "reembolso del pedido roto", "\u200b", "x" * 4_000):
        response = client.get(f"{P}/context", params={"query": query}, headers=admin())
        assert response.status_code == 200, response.text
    found = client.post(
        "/v1/search",
        json={"kinds": ["turns"], "query": "reembolso pedido roto", "mode": "semantic"},
        headers=admin(),
    )
    assert found.status_code == 200, found.text
    texts = [hit["text"][:40] for hit in found.json()["items"]]
    assert texts[0] == longest[:40], texts
    emoji = client.post(
        "/v1/search",
        json={"kinds": ["turns"], "query": "🎉🎉", "mode": "semantic", "min_relevance": 0},
        headers=admin(),
    )
    assert emoji.status_code == 200 and len(emoji.json()["items"]) == 4, emoji.text


def test_a_question_about_nothing_the_person_said_gets_no_fact_and_no_hit(
    client: TestClient,
) -> None:
    """The relevance scale (embeddings/relevance.py): 0.7 means relevant. Facts about a pet,
    an allergy and a move pass for questions about them; greetings and a question about
    quantum physics get none, and no excerpt of the chat is marked a hit for them."""
    add_facts(client, [*SPANISH_FACTS, "Se mudó a Sevilla en marzo"])
    converse(client, [ROSA, *FILLER] * 7)  # 49 turns: compaction archives the older ones
    relevant = facts_for(client, "¿Cómo se llama mi perro?")
    assert relevant and relevant[0]["content"] == SPANISH_FACTS[0]
    assert all(float(str(f["score"])) >= 0.7 for f in relevant)
    assert all(isinstance(f["cosine"], float) for f in relevant), "the raw cosine beside it"
    for off_topic in ("quantum physics homework", "hola, buenos días", "thanks!", "👍"):
        body = client.get(f"{P}/context", params={"query": off_topic}, headers=admin()).json()
        assert body["facts"] == [], off_topic
        # ("thanks!" is near the assistant's "Glad to hear it!": a pleasantry that was said)
        if off_topic != "thanks!":
            assert not [e for e in body["excerpts"] if e["hit"]], off_topic
        assert body["history"], "the recent turns are still there"
    body = client.get(
        f"{P}/context", params={"query": "when is my grandmother's birthday?"}, headers=admin()
    ).json()
    hits = [e for e in body["excerpts"] if e["hit"]]
    assert hits and all(e["relevance"] >= 0.7 for e in hits)
    assert ROSA in {e["content"] for e in hits}
