"""Vector memory through HTTP: compaction, indexing, facts and excerpts, settings, crashes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from server.app import create_app
from server.config import Settings
from server.words import terms
from tests.backends import query, set_data_env
from tests.conftest import AGENT, PHONE, Api, admin, make_settings
from tests.fakes import HashEncoder, fake_factory

P = f"/v1/agents/{AGENT}/people/{PHONE}"


def count(api: Api, sql: str) -> int:
    return int(query(api.services.settings, sql)[0][0])


def hits(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The excerpts the search found, best first (not the neighbours that came with them)."""
    found = [e for e in body["excerpts"] if e["hit"]]
    return sorted(found, key=lambda e: -e["score"])


def chat(api: Api, n: int, text: Callable[[int], str] = lambda i: f"turn number {i}") -> None:
    for i in range(n):
        api.post_turn(text(i), role="user" if i % 2 == 0 else "assistant")


def test_more_than_forty_waiting_turns_archive_all_but_twenty(api: Api) -> None:
    chat(api, 40)
    assert count(api, "SELECT COUNT(*) FROM messages WHERE archived = 1") == 0
    chat(api, 1, lambda i: "the forty-first")
    assert count(api, "SELECT COUNT(*) FROM messages WHERE archived = 1") == 21
    assert count(api, "SELECT COUNT(*) FROM messages WHERE archived = 0") == 20
    history = api.context(budget_chars=10**6).json()["history"]
    assert len(history) == 20 and history[-1]["content"] == "the forty-first"
    listed = api.client.get(f"{P}/messages", params={"limit": 100}, headers=admin()).json()
    assert len(listed["items"]) == 41, "archived turns are kept"


def test_archived_turns_come_back_as_excerpts(api_factory: Callable[..., Api]) -> None:
    api = api_factory(turn_window=0)
    chat(api, 45, lambda i: "my dog Biscuit ate my homework" if i == 3 else f"chatting {i}")
    api.index()
    body = api.context(query="what did Biscuit the dog eat", excerpt_mode="semantic").json()
    assert hits(body)[0]["content"] == "my dog Biscuit ate my homework"
    assert hits(body)[0]["score"] > 0
    assert len(hits(body)) <= Settings.model_fields["excerpt_k"].default  # excerpt_k
    recent = {h["content"] for h in body["history"]}
    assert not recent & {e["content"] for e in body["excerpts"]}


def test_excerpt_modes_and_k(api_factory: Callable[..., Api]) -> None:
    api = api_factory(turn_window=0)
    chat(api, 45, lambda i: f"order {48000 + i} shipped" if i < 25 else f"other {i}")
    api.index()
    for mode in ("semantic", "keyword", "hybrid"):
        body = api.context(query="order 48007", excerpt_mode=mode, excerpt_k=3).json()
        assert len(hits(body)) == 3, mode
        if mode != "semantic":
            assert hits(body)[0]["content"] == "order 48007 shipped", mode
    assert api.context(query="order", excerpt_k=0).json()["excerpts"] == []


def test_facts_are_top_k_by_similarity_above_threshold(api: Api) -> None:
    memory = api.services.memory
    for text in [
        "likes green tea",
        "has a dog called Biscuit",
        "works night shifts",
        "lives in Lisbon",
        "sister is called Ana",
    ]:
        memory.add_memory(AGENT, PHONE, text)
    api.post_turn("hello")
    body = api.context(query="dog Biscuit", threshold=0.0, k=2).json()
    assert body["facts"][0]["content"] == "has a dog called Biscuit"
    assert len(body["facts"]) == 2
    assert body["facts"][0]["score"] >= body["facts"][1]["score"]
    everything = api.context(query="dog Biscuit", threshold=-1, k=10).json()
    assert len(everything["facts"]) == 5
    assert api.context(query="dog Biscuit", threshold=0.99).json()["facts"] == []
    exact = api.context(query="works night shifts", threshold=0.99).json()["facts"]
    assert [f["content"] for f in exact] == ["works night shifts"]


def test_default_threshold_is_point_seven(api: Api) -> None:
    api.services.memory.add_memory(AGENT, PHONE, "works night shifts at the hospital")
    api.post_turn("hi")
    assert api.context(query="works night shifts at the hospital").json()["facts"]
    assert api.context(query="completely unrelated words").json()["facts"] == []


def test_only_approved_facts_of_this_person_reach_the_context(api: Api) -> None:
    memory = api.services.memory
    memory.add_memory(AGENT, PHONE, "likes green tea", status="pending")
    memory.add_memory(AGENT, "+15550000000", "likes green tea")
    memory.add_memory("other", PHONE, "likes green tea")
    api.post_turn("hi")
    assert api.context(query="likes green tea", threshold=-1).json()["facts"] == []


def test_settings_then_agent_then_request(api_factory: Callable[..., Api]) -> None:
    api = api_factory(top_k=1)
    for text in ["alpha one", "alpha two", "alpha three"]:
        api.services.memory.add_memory(AGENT, PHONE, text)
    api.post_turn("alpha")
    assert len(api.context(query="alpha", threshold=-1).json()["facts"]) == 1
    put = api.client.put(
        f"/v1/agents/{AGENT}/settings", json={"top_k": 2, "threshold": -1}, headers=admin()
    )
    assert put.status_code == 200 and put.json()["top_k"] == 2
    assert len(api.context(query="alpha").json()["facts"]) == 2
    assert len(api.context(query="alpha", k=3).json()["facts"]) == 3
    got = api.client.get(f"/v1/agents/{AGENT}/settings", headers=admin()).json()
    assert got["top_k"] == 2 and got["threshold"] == -1 and got["excerpt_k"] == 30
    other = api.client.get("/v1/agents/other/settings", headers=admin()).json()
    assert other["top_k"] == 1 and other["threshold"] == 0.7


def test_excerpt_settings_then_agent_then_request(api_factory: Callable[..., Api]) -> None:
    api = api_factory(excerpt_k=3)
    chat(api, 45, lambda i: f"dogs and cats {i}")
    api.index()
    assert len(hits(api.context(query="dogs").json())) == 3  # the server's setting
    put = api.client.put(
        f"/v1/agents/{AGENT}/settings",
        json={"excerpt_k": 2, "excerpt_mode": "semantic", "excerpt_threshold": 0.99},
        headers=admin(),
    )
    assert put.status_code == 200
    # The agent's mode and floor: semantic at 0.99 keeps nothing (keyword has no floor).
    assert api.context(query="dogs").json()["excerpts"] == []
    assert len(hits(api.context(query="dogs", excerpt_threshold=-1).json())) == 2
    by_request = api.context(query="dogs", excerpt_k=5, excerpt_mode="keyword").json()
    assert len(hits(by_request)) == 5
    other = api.client.get("/v1/agents/other/settings", headers=admin()).json()
    # The server's defaults: hybrid, and the model's calibrated floor (0.0 for an uncalibrated
    # model such as the fake one).
    assert (other["excerpt_k"], other["excerpt_mode"], other["excerpt_threshold"]) == (
        3,
        "hybrid",
        0.0,
    )


def test_agent_settings_need_admin_and_valid_values(api: Api) -> None:
    agent_key = api.key(f"agent:{AGENT}")
    url = f"/v1/agents/{AGENT}/settings"
    assert api.client.put(url, json={"top_k": 2}, headers=agent_key).status_code == 403
    assert api.client.get(url, headers=agent_key).status_code == 200
    for bad in ({"top_k": -1}, {"threshold": 2}, {"excerpt_mode": "x"}, {"nope": 1}):
        response = api.client.put(url, json=bad, headers=admin())
        assert response.status_code == 422, bad


def test_compaction_per_agent_settings_and_on_demand(api: Api) -> None:
    api.client.put(
        f"/v1/agents/{AGENT}/settings",
        json={"compact_trigger": 10, "compact_keep": 4},
        headers=admin(),
    )
    chat(api, 11)
    assert count(api, "SELECT COUNT(*) FROM messages WHERE archived = 0") == 4
    chat(api, 3)
    response = api.client.post(f"{P}/compact", headers=admin())
    assert response.json() == {"archived": 3, "facts_added": 0, "summary_through_id": None}
    again = api.client.post(f"{P}/compact", headers=admin())
    assert again.json()["archived"] == 0


def test_a_reply_is_found_through_its_neighbours(api: Api) -> None:
    """A turn's keyword text holds two neighbours each side: a short reply is found by what it
    answers. Its vector is its own words alone."""
    chat(
        api,
        45,
        lambda i: {
            3: "when is your sister Ana getting married",
            4: "Yes! In June",
            5: "lovely",
        }.get(i, f"chatting {i}"),
    )
    api.index()
    row = api.services.indexer.space.index.get(["turn:5"])["turn:5"][0]
    # Its own words first and once more in place: they weigh double against a neighbour's.
    assert row.text == (
        "Yes! In June\nchatting 2\nwhen is your sister Ana getting married\nYes! In June"
        "\nlovely\nchatting 6"
    )
    assert row.content == "Yes! In June"
    vector = api.services.indexer.space.index.get(["turn:5"])["turn:5"][1]
    own = api.services.indexer.space.encoder.encode(["Yes! In June"])[0]
    assert np.allclose(vector, own)
    # The five turns within two of the question all hold its words.
    body = api.context(query="sister Ana married", excerpt_mode="keyword", excerpt_k=5).json()
    assert "Yes! In June" in [e["content"] for e in body["excerpts"]]


def test_archiving_gives_a_turn_the_turns_after_it_without_re_embedding(api: Api) -> None:
    inner = api.services.indexer.space.encoder._inner
    assert isinstance(inner, HashEncoder)
    for i in range(40):  # indexed as they come: each with the turns before it only
        api.post_turn(f"turn number {i}")
        api.index()
    api.post_turn("the forty-first")  # 41 waiting: the oldest 21 are archived
    inner.calls.clear()
    api.index()
    # Only the new turn is embedded: the archived ones keep their vectors (their own words
    # did not change) and get the turns after them in their keyword text.
    assert sum(inner.calls) == 1
    row = api.services.indexer.space.index.get(["turn:21"])["turn:21"][0]
    assert row.text == (
        "turn number 20\nturn number 18\nturn number 19\nturn number 20\nturn number 21"
        "\nturn number 22"
    )
    body = api.context(query="number 22", excerpt_mode="keyword", excerpt_k=21).json()
    assert "turn number 20" in [e["content"] for e in body["excerpts"]]


def test_indexer_batches_and_reuses_vectors_when_a_turn_is_archived(
    api_factory: Callable[..., Api],
) -> None:
    api = api_factory(turn_window=0)
    chat(api, 30)
    encoder = api.services.indexer.space.encoder
    inner = encoder._inner
    assert isinstance(inner, HashEncoder)
    inner.calls.clear()
    api.index()
    assert inner.calls == [30], "one batch for thirty turns"
    chat(api, 11, lambda i: f"later turn {i}")
    inner.calls.clear()
    api.index()
    assert sum(inner.calls) == 11, "archiving changes the status, not the text: no re-embedding"
    index = api.services.indexer.space.index
    assert index.count("kind = 'turn' AND status = 'archived'") == 21
    assert index.count() == 41


def test_index_lag_in_health_and_metrics(api: Api) -> None:
    chat(api, 5)
    assert api.client.get("/health").json()["index_lag"] == 5
    metrics = api.client.get("/metrics", headers=admin()).text
    assert "memory_index_lag 5" in metrics
    api.index()
    assert api.client.get("/health").json()["index_lag"] == 0
    metrics = api.client.get("/metrics", headers=api.key("staff")).text
    assert "memory_index_rows 5" in metrics and "memory_indexer_items_total 5" in metrics


def test_memories_are_searchable_when_created(api: Api) -> None:
    api.services.memory.add_memory(AGENT, PHONE, "allergic to peanuts")
    assert api.client.get("/health").json()["index_lag"] == 0
    api.post_turn("hi")
    facts = api.context(query="allergic to peanuts").json()["facts"]
    assert [f["content"] for f in facts] == ["allergic to peanuts"]


class Crash(Exception):
    pass


def test_indexer_crash_between_embedding_and_ack_loses_and_duplicates_nothing(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path, indexer_batch_size=7)
    crashes = iter([True, False, True])

    def before_ack() -> None:
        if next(crashes, False):
            raise Crash("killed between upsert and outbox delete")

    from server.app import open_services

    services = open_services(settings, encoder_factory=fake_factory, before_ack=before_ack)
    for i in range(20):
        services.memory.remember(AGENT, PHONE, role="user", content=f"message {i}")
    with pytest.raises(Crash):
        services.indexer.run_once()
    assert services.store.outbox_size() == 20, "nothing acknowledged after the crash"
    assert services.indexer.run_once() == 7
    with pytest.raises(Crash):
        services.indexer.run_once()
    services.store.close()

    restarted = open_services(settings, encoder_factory=fake_factory)
    assert restarted.indexer.drain() == 13
    index = restarted.indexer.space.index
    assert index.count() == 20
    assert sorted(index.all_ids()) == sorted(f"turn:{i}" for i in range(1, 21))
    restarted.store.close()


def test_background_indexer_catches_up(api_factory: Callable[..., Api]) -> None:
    import time

    api = api_factory(run_workers=True, indexer_interval_s=0.05)
    chat(api, 12)
    deadline = time.monotonic() + 20
    while api.client.get("/health").json()["index_lag"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert api.client.get("/health").json()["index_lag"] == 0
    assert api.services.indexer.space.index.count() == 12


def test_reindex_to_another_model_and_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Into another model's table the reindex runs with the server stopped (next to a running
    one it is refused: tests/server/test_cli_live.py); the server then starts on it."""
    from server.cli import main

    settings = make_settings(tmp_path, embedding_model="fake-hash")
    app = create_app(settings, encoder_factory=fake_factory, run_workers=False)
    with TestClient(app) as client:
        services = app.state.services
        for i in range(45):
            client.post(
                f"{P}/messages", json={"role": "user", "content": f"dog {i}"}, headers=admin()
            )
        services.memory.add_memory(AGENT, PHONE, "has a dog")
        services.indexer.drain()
        before = services.indexer.space.index
        assert before.dim == 64 and before.count() == 46
        before_name = before.name

    set_data_env(monkeypatch, tmp_path)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    assert (
        main(["reindex", "--model", "fake-other-32d", "--quiet"], encoder_factory=fake_factory) == 0
    )
    report = capsys.readouterr().out
    assert "\nitems            46\n" in report  # readable; --json for scripts

    other = make_settings(tmp_path, embedding_model="fake-other-32d")
    app = create_app(other, encoder_factory=fake_factory, run_workers=False)
    with TestClient(app) as client:
        assert client.get("/health").json()["model"] == "fake-other-32d"
        after = app.state.services.indexer.space.index
        assert after.dim == 32 and after.count() == 46 and after.name != before_name
        body = client.get(
            f"{P}/context", params={"query": "has a dog", "threshold": 0.9}, headers=admin()
        ).json()
        assert [f["content"] for f in body["facts"]] == ["has a dog"]

    assert main(["reindex", "--quiet"], encoder_factory=fake_factory) == 0
    app = create_app(settings, encoder_factory=fake_factory, run_workers=False)
    with TestClient(app) as client:
        assert client.get("/health").json()["model"] == "fake-hash"
        assert app.state.services.indexer.space.index.dim == 64
        assert app.state.services.upgrade is None  # the table was complete: nothing to build


def test_memory_created_over_http_is_searchable_at_once(api: Api) -> None:
    agent_key = api.key(f"agent:{AGENT}")
    response = api.client.post(
        f"/v1/agents/{AGENT}/memories",
        json={
            "content": "allergic to\npeanuts",
            "phone": PHONE,
            "type": "preference",
            "metadata": {"source": "form"},
        },
        headers=agent_key,
    )
    assert response.status_code == 201, response.text
    memory = response.json()
    assert memory["content"] == "allergic to peanuts"
    assert (memory["status"], memory["source"], memory["type"]) == (
        "approved",
        "manual",
        "preference",
    )
    assert api.client.get("/health").json()["index_lag"] == 0
    api.post_turn("hello")
    facts = api.context(query="allergic to peanuts", threshold=0.9).json()["facts"]
    assert [f["id"] for f in facts] == [memory["id"]]
    got = api.client.get(f"/v1/agents/{AGENT}/memories/{memory['id']}", headers=agent_key)
    assert memory.pop("stored") is True  # (only the answer to the POST says whether it was new)
    assert got.json() == memory
    other = api.key("agent:other")
    assert (
        api.client.get(f"/v1/agents/other/memories/{memory['id']}", headers=other).status_code
        == 404
    )
    for bad in (
        {"content": ""},
        {"content": "x" * 2001},
        {"content": "x", "phone": "1"},
        {"content": "x", "type": "opinion"},
        {"content": "x", "id": "mine"},
    ):
        assert (
            api.client.post(f"/v1/agents/{AGENT}/memories", json=bad, headers=agent_key).status_code
            == 422
        ), bad


def test_a_hybrid_excerpt_scores_by_the_models_weight_of_cosine_and_bm25(api: Api) -> None:
    """The fake model is uncalibrated: half cosine, half squashed BM25 (e5 takes 0.7 cosine)."""
    text = "order 48213 is a blue jacket in size medium"
    chat(api, 45, lambda i: text if i == 3 else f"chatting {i}")
    api.index()
    body = api.context(query="blue jacket order", excerpt_k=1).json()
    assert [e["content"] for e in hits(body)] == [text]
    space = api.services.indexer.space
    # BM25 over the person's own archived turns, each read with its neighbours.
    person = api.services.memory.person_turns(AGENT, PHONE)
    assert person is not None
    bm25 = dict(person.bm25(terms("blue jacket order"), 10))[4]
    stored = space.index.get(["turn:4"])["turn:4"][1]
    cosine = float(stored @ space.encoder.encode_query(["blue jacket order"])[0])
    expected = 0.5 * cosine + 0.5 * bm25 / (bm25 + 5)
    assert hits(body)[0]["score"] == pytest.approx(expected, abs=1e-3)
