"""Compaction with a model, against a fake OpenAI-compatible server over real HTTP."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import AGENT, PHONE, Api, FakeClock, admin, assert_error
from tests.fake_llm import FakeLLM

P = f"/v1/agents/{AGENT}/people/{PHONE}"


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


@pytest.fixture
def model_api(api_factory: Callable[..., Api], llm: FakeLLM) -> Callable[..., Api]:
    def build(**overrides: Any) -> Api:
        values: dict[str, Any] = {
            "llm_base_url": llm.base_url,
            "llm_api_key": "sk-test",
            "llm_model": "fake-model-1",
            "llm_retries": 0,
            "llm_timeout_s": 1.0,
            "compact_backoff_s": (0.05,),
        }
        values.update(overrides)
        return api_factory(**values)

    return build


def conversation(api: Api, n: int = 45) -> None:
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        assert api.post_turn(f"turn {i}: chatting about work and tea", role=role).status_code == 201


def rows(api: Api, sql: str) -> list[sqlite3.Row]:
    conn = sqlite3.connect(api.services.settings.sqlite_path)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_45_turns_end_with_summary_typed_facts_and_25_archived(
    model_api: Callable[..., Api], llm: FakeLLM
) -> None:
    api = model_api()
    conversation(api)
    response = api.client.post(f"{P}/compact", headers=admin())
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["archived"] == 25 and body["facts_added"] == 3
    assert body["summary_through_id"] == rows(api, "SELECT id FROM messages ORDER BY id")[24][0]

    assert len(rows(api, "SELECT id FROM messages WHERE archived = 1")) == 25
    assert len(rows(api, "SELECT id FROM messages")) == 45
    facts = rows(api, "SELECT * FROM memories ORDER BY content")
    assert [(f["type"], f["confidence"], f["status"], f["source"]) for f in facts] == [
        ("context", 0.6, "approved", "extracted"),
        ("preference", 0.8, "approved", "extracted"),
        ("fact", 0.9, "approved", "extracted"),
    ]
    assert all(f["expires_at"] is None for f in facts)

    api.index()
    context = api.context(query="does Maya work night shifts", threshold=0.3).json()
    assert context["summary"] == llm.summary
    assert "Maya works night shifts at the hospital" in [f["content"] for f in context["facts"]]
    assert llm.summary in context["notes"]
    assert len(context["history"]) == 20

    # Both calls went to the configured model with store=False: the provider keeps no copy.
    assert len(llm.requests) == 2
    for request in llm.requests:
        assert request["path"] == "/v1/responses"
        assert request["body"]["store"] is False
        assert request["body"]["model"] == "fake-model-1"
    assert "turn 0: chatting" in llm.requests[0]["body"]["input"]
    assert "turn 25" not in llm.requests[0]["body"]["input"], "the newest 20 are kept"


def test_chat_completions_for_servers_without_responses(
    model_api: Callable[..., Api], llm: FakeLLM
) -> None:
    api = model_api(llm_api="chat")
    conversation(api)
    assert api.client.post(f"{P}/compact", headers=admin()).json()["facts_added"] == 3
    assert {r["path"] for r in llm.requests} == {"/v1/chat/completions"}


@pytest.mark.parametrize("mode", ["500", "429", "timeout"])
def test_model_failure_changes_nothing(
    model_api: Callable[..., Api], llm: FakeLLM, mode: str
) -> None:
    api = model_api()
    conversation(api)
    if mode == "timeout":
        llm.delay_s = 2.0
    else:
        llm.mode = mode
    assert_error(api.client.post(f"{P}/compact", headers=admin()), 503, "model_unavailable")
    assert len(rows(api, "SELECT id FROM messages WHERE archived = 0")) == 45
    assert rows(api, "SELECT * FROM summaries") == []
    assert rows(api, "SELECT * FROM memories") == []
    assert len(api.context(budget_chars=10**6).json()["history"]) == 45


def test_the_client_retries_a_flaky_model(model_api: Callable[..., Api], llm: FakeLLM) -> None:
    api = model_api(llm_retries=2)
    conversation(api)
    llm.mode = "flaky"
    llm.failures_left = 2
    assert api.client.post(f"{P}/compact", headers=admin()).json()["archived"] == 25
    assert len(llm.requests) == 4, "two failures, then the summary and the facts"


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("fenced", 3),
        ("bullets", 2),
        ("prose", 1),
        ("none", 0),
        ("invalid_json", 1),
        ("injection", 0),
    ],
)
def test_bad_answers_never_crash_compaction(
    model_api: Callable[..., Api], llm: FakeLLM, mode: str, expected: int
) -> None:
    api = model_api()
    conversation(api)
    llm.mode = mode
    body = api.client.post(f"{P}/compact", headers=admin()).json()
    assert body["archived"] == 25 and body["facts_added"] == expected
    for fact in rows(api, "SELECT content FROM memories"):
        assert "\n" not in fact["content"] and "\x07" not in fact["content"]
        assert "ignore" not in fact["content"].lower()
        assert "always agree" not in fact["content"].lower()


def test_near_duplicate_facts_are_not_stored_again(
    model_api: Callable[..., Api], llm: FakeLLM
) -> None:
    api = model_api()
    conversation(api)
    assert api.client.post(f"{P}/compact", headers=admin()).json()["facts_added"] == 3
    conversation(api, 30)
    again = api.client.post(f"{P}/compact", headers=admin()).json()
    assert again["archived"] > 0 and again["facts_added"] == 0
    assert len(rows(api, "SELECT id FROM memories")) == 3
    assert {r["seen_count"] for r in rows(api, "SELECT seen_count FROM memories")} == {2}
    seen = rows(api, "SELECT action FROM memory_history WHERE action = 'seen_again'")
    assert len(seen) == 3


def test_review_leaves_facts_pending_until_they_expire(
    model_api: Callable[..., Api], llm: FakeLLM, clock: FakeClock
) -> None:
    api = model_api()
    api.client.put(f"/v1/agents/{AGENT}/settings", json={"review": True}, headers=admin())
    conversation(api)
    assert api.client.post(f"{P}/compact", headers=admin()).json()["facts_added"] == 3
    facts = rows(api, "SELECT status, confidence, expires_at FROM memories")
    assert {f["status"] for f in facts} == {"pending"}
    assert {f["expires_at"] for f in facts} == {"2026-03-08T09:00:00.000Z"}
    assert all(f["confidence"] is not None for f in facts)
    api.index()
    assert api.context(query="night shifts hospital", threshold=-1).json()["facts"] == []

    compaction = api.services.compaction
    clock.advance(days=6, hours=23)
    assert compaction.expire_pending() == 0
    clock.advance(hours=1)
    assert compaction.expire_pending() == 3
    assert {f["status"] for f in rows(api, "SELECT status FROM memories")} == {"rejected"}
    expired = rows(api, "SELECT actor FROM memory_history WHERE action = 'expire'")
    assert len(expired) == 3
    api.index()
    index = api.services.indexer.space.index
    assert index.count("kind = 'fact' AND status = 'rejected'") == 3


def test_background_compaction_after_an_assistant_turn(
    model_api: Callable[..., Api], llm: FakeLLM
) -> None:
    api = model_api(run_workers=True)
    llm.delay_s = 0.2  # the model is slow; storing turns must not wait for it
    started = time.perf_counter()
    conversation(api, 42)
    assert time.perf_counter() - started < 10
    wait_for(lambda: bool(rows(api, "SELECT * FROM summaries")))
    wait_for(api.services.compaction.idle)
    assert len(rows(api, "SELECT id FROM messages WHERE archived = 1")) >= 22
    assert len(rows(api, "SELECT id FROM memories")) == 3
    summaries = [r for r in llm.requests if "summary" in r["body"]["instructions"].lower()]
    assert len(summaries) == 1, "never twice at once for one person"


def test_background_compaction_retries_after_a_failure(
    model_api: Callable[..., Api], llm: FakeLLM
) -> None:
    api = model_api(run_workers=True)
    llm.mode = "500"
    conversation(api, 42)
    wait_for(lambda: len(llm.requests) >= 1)
    time.sleep(0.1)
    assert rows(api, "SELECT * FROM summaries") == []
    assert len(rows(api, "SELECT id FROM messages WHERE archived = 0")) == 42
    llm.mode = "good"
    wait_for(lambda: bool(rows(api, "SELECT * FROM summaries")), seconds=10)
    assert len(rows(api, "SELECT id FROM messages WHERE archived = 1")) == 22


def test_compact_command_with_a_progress_bar(
    model_api: Callable[..., Api],
    llm: FakeLLM,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from server.cli import main
    from tests.fakes import fake_factory

    api = model_api()
    conversation(api)
    api.post_turn("hello", phone="+15559990000")
    settings = api.services.settings
    for name, value in {
        "MEMORY_DATA_DIR": str(settings.data_dir),
        "MEMORY_EMBEDDING_MODEL": "fake-hash",
        "MEMORY_LLM_BASE_URL": llm.base_url,
        "MEMORY_LLM_MODEL": "fake-model-1",
        "MEMORY_LLM_RETRIES": "0",
    }.items():
        monkeypatch.setenv(name, value)
    assert main(["compact", "--agent", AGENT], encoder_factory=fake_factory) == 0
    captured = capsys.readouterr()
    assert '"archived": 25' in captured.out and '"facts_added": 3' in captured.out
    assert "compact" in captured.err, "tqdm draws its bar on stderr"
    llm.mode = "500"
    conversation(api)
    assert main(["compact", "--quiet"], encoder_factory=fake_factory) == 1


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
