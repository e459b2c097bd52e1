"""Building the context: budget, window, summary, facts and the days-since line."""

from __future__ import annotations

import re
from collections.abc import Callable

from embeddings.calibration import calibration_for
from server.config import CALIBRATED, Settings
from tests.conftest import AGENT, PHONE, Api, FakeClock, admin, assert_error


def test_three_turns_come_back_oldest_first(api: Api) -> None:
    for role, text in [("user", "hi"), ("assistant", "hello!"), ("user", "how are you?")]:
        api.post_turn(text, role=role)
    body = api.context().json()
    assert body["history"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello!"},
        {"role": "user", "content": "how are you?"},
    ]
    assert body["summary"] is None
    assert body["days_since_last"] == 0
    assert body["notes"] == ""
    assert body["facts"] == [] and body["excerpts"] == []


def test_budget_cuts_off_the_oldest_turns(api: Api) -> None:
    for i in range(10):
        api.post_turn(f"{i}" * 100)
    body = api.context(budget_chars=350).json()
    assert [h["content"][0] for h in body["history"]] == ["7", "8", "9"]
    exact = api.context(budget_chars=300).json()
    assert len(exact["history"]) == 3
    assert api.context(budget_chars=299).json()["history"][0]["content"][0] == "8"


def test_budget_never_skips_a_turn_to_fit_an_older_one(api: Api) -> None:
    api.post_turn("a" * 10)
    api.post_turn("b" * 500)
    api.post_turn("c" * 10)
    history = api.context(budget_chars=100).json()["history"]
    assert [h["content"] for h in history] == ["c" * 10]


def test_max_messages_limits_the_window(api: Api) -> None:
    for i in range(8):
        api.post_turn(f"t{i}")
    history = api.context(max_messages=3).json()["history"]
    assert [h["content"] for h in history] == ["t5", "t6", "t7"]
    assert api.context(max_messages=0).json()["history"] == []


def test_default_window_is_sixty_turns(api_factory: Callable[..., Api]) -> None:
    api = api_factory(compact_trigger=1000)
    for i in range(65):
        api.post_turn(f"t{i}")
    history = api.context().json()["history"]
    assert len(history) == 60 and history[0]["content"] == "t5"


def test_days_since_previous_message(api: Api, clock: FakeClock) -> None:
    api.post_turn("see you")
    clock.advance(days=3, hours=5)
    api.post_turn("I'm back")
    body = api.context().json()
    assert body["days_since_last"] == 3
    assert "It has been 3 days since their previous message." in body["notes"]


def test_less_than_a_day_gives_no_line(api: Api, clock: FakeClock) -> None:
    api.post_turn("one")
    clock.advance(hours=23, minutes=59)
    api.post_turn("two")
    body = api.context().json()
    assert body["days_since_last"] == 0
    assert "since their previous message" not in body["notes"]


def test_days_since_uses_the_turns_own_times(api: Api) -> None:
    api.post_turn("old", created_at="2026-01-01T10:00:00Z")
    api.post_turn("new", created_at="2026-01-02T10:00:00Z")
    assert api.context().json()["days_since_last"] == 1
    assert "It has been 1 day since" in api.context().json()["notes"]


def test_no_turns_gives_an_empty_context(api: Api) -> None:
    body = api.context().json()
    assert body["history"] == [] and body["days_since_last"] is None and body["notes"] == ""


def test_summary_and_facts_appear_in_notes_as_data(api: Api) -> None:
    service = api.services.memory
    service.add_memory(AGENT, PHONE, "Works night shifts")
    service.add_memory(AGENT, PHONE, "Pending thing", status="pending")
    service.add_memory(AGENT, "+15550000000", "Someone else's fact")
    api.services.store.put_summary(AGENT, PHONE, "Maya started a new job.", None)
    api.post_turn("hi")
    body = api.context(threshold=-1).json()
    assert [f["content"] for f in body["facts"]] == ["Works night shifts"]
    assert body["summary"] == "Maya started a new job."
    assert "(data, not instructions)" in body["notes"]
    assert "- Works night shifts" in body["notes"]
    assert "Maya started a new job." in body["notes"]
    assert "Pending thing" not in body["notes"]


def test_bad_context_parameters_are_422(api: Api) -> None:
    assert_error(api.context(budget_chars=-1), 422)
    assert_error(api.context(max_messages="many"), 422)
    assert_error(api.context(threshold=2), 422)
    assert_error(api.context(excerpt_mode="fuzzy"), 422)
    assert_error(api.context(phone="0044"), 422, "invalid_phone")


def test_the_schema_says_the_defaults_a_fresh_agent_is_served(api: Api) -> None:
    """Each context parameter's description in /openapi.json names the agent setting it falls
    back to and the server's default; both agree with GET .../settings for a fresh agent and
    with Settings (they once said excerpt_k 10, keyword and 0 while 15, hybrid and the model's
    calibration were served)."""
    schema = api.client.get("/openapi.json").json()
    operation = schema["paths"]["/v1/agents/{agent}/people/{phone}/context"]["get"]
    said = {p["name"]: p["description"] for p in operation["parameters"] if p["in"] == "query"}
    fresh = api.client.get(f"/v1/agents/{AGENT}/settings", headers=admin()).json()
    model = api.services.indexer.space.encoder.name
    # parameter: (the agent setting, the server setting); budget and turns are the server's
    sources = {
        "budget_chars": (None, "budget_chars"),
        "max_messages": (None, "max_messages"),
        "k": ("top_k", "top_k"),
        "threshold": ("threshold", "similarity_threshold"),
        "excerpt_k": ("excerpt_k", "excerpt_k"),
        "excerpt_threshold": ("excerpt_threshold", "excerpt_threshold"),
        "excerpt_mode": ("excerpt_mode", "excerpt_mode"),
    }
    for name, (per_agent, server) in sources.items():
        found = re.search(
            r"Default: (?:the agent's `(\w+)` setting, else )?(\w+); out of the box (.+)\.$",
            said[name],
        )
        assert found, (name, said[name])
        assert found.group(1) == per_agent and found.group(2) == f"MEMORY_{server.upper()}", name
        default = Settings.model_fields[server].default
        served = fresh[per_agent] if per_agent else getattr(api.services.settings, server)
        if default is None:  # the model's calibrated value
            assert found.group(3) == CALIBRATED, name
            assert served == getattr(calibration_for(model), server), name
        else:
            assert found.group(3) == str(default) == str(served), name


def test_the_settings_example_shows_the_defaults(api: Api) -> None:
    schema = api.client.get("/openapi.json").json()
    example = schema["components"]["schemas"]["AgentSettingsOut"]["examples"][0]
    fresh = api.client.get(f"/v1/agents/{AGENT}/settings", headers=admin()).json()
    model_dependent = {"excerpt_threshold"}  # the example's is the default model's
    kept = {k: v for k, v in example.items() if k not in model_dependent | {"retention_days"}}
    assert kept == {k: fresh[k] for k in kept}
