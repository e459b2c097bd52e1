"""Facts that stay true (issue 26): validity in time, superseding through the API and in
compaction, the context of now and of a past time, and where each fact came from.

Through HTTP, then the stored state; on SQLite and PostgreSQL (MEMORY_TEST_BACKEND)."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from server.store import MIGRATIONS, Store
from tests.backends import query
from tests.conftest import AGENT, PHONE, Api, FakeClock, admin, assert_error
from tests.fake_llm import FakeLLM

M = f"/v1/agents/{AGENT}/memories"
P = f"/v1/agents/{AGENT}/people/{PHONE}"
OTHER_PHONE = "+15551230002"


def add(api: Api, content: str, status: int = 201, **fields: Any) -> dict[str, Any]:
    headers = fields.pop("headers", None) or admin()
    response = api.client.post(
        M, json={"content": content, "phone": PHONE, **fields}, headers=headers
    )
    assert response.status_code == status, response.text
    found: dict[str, Any] = response.json()
    return found


def get(api: Api, memory_id: str) -> dict[str, Any]:
    response = api.client.get(f"{M}/{memory_id}", headers=admin())
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def listed(api: Api, **params: Any) -> list[str]:
    response = api.client.get(M, params={"phone": PHONE, **params}, headers=admin())
    assert response.status_code == 200, response.text
    return sorted(m["content"] for m in response.json()["items"])


def searched(api: Api, **fields: Any) -> list[str]:
    body = {"query": "where does she live", "phone": PHONE, "threshold": -1, **fields}
    response = api.client.post(f"{M}/search", json=body, headers=admin())
    assert response.status_code == 200, response.text
    return sorted(m["content"] for m in response.json()["items"])


def context_facts(api: Api, **params: Any) -> list[dict[str, Any]]:
    response = api.context(query="where does she live", threshold=-1, **params)
    assert response.status_code == 200, response.text
    facts: list[dict[str, Any]] = response.json()["facts"]
    return facts


def indexed_status(api: Api, memory_id: str) -> str | None:
    found = api.services.indexer.space.index.get([f"fact:{memory_id}"])
    row = found.get(f"fact:{memory_id}")
    return None if row is None else row[0].status


def moved(api: Api, clock: FakeClock) -> tuple[dict[str, Any], dict[str, Any]]:
    """'Lives in Madrid' in March; in June, 'Moved to Lisbon' supersedes it."""
    madrid = add(api, "Lives in Madrid")
    clock.advance(days=92)
    lisbon = add(api, "Moved to Lisbon", supersedes=madrid["id"])
    api.post_turn("hola")
    return madrid, lisbon


def test_a_memory_carries_its_validity_and_sources(api: Api) -> None:
    memory = add(api, "Has a dog called Biscuit")
    assert memory["valid_from"] == "2026-03-01T09:00:00.000Z" == memory["created_at"]
    assert memory["invalid_at"] is None and memory["superseded_by"] is None
    assert memory["supersedes"] is None and memory["source_message_ids"] == []
    assert get(api, memory["id"]) == {k: v for k, v in memory.items() if k != "stored"}


def test_supersedes_ends_the_old_memory_in_one_step(api: Api, clock: FakeClock) -> None:
    madrid, lisbon = moved(api, clock)
    assert lisbon["supersedes"] == madrid["id"] and lisbon["invalid_at"] is None
    assert lisbon["valid_from"] == "2026-06-01T09:00:00.000Z"
    old = get(api, madrid["id"])
    assert old["invalid_at"] == lisbon["valid_from"] and old["superseded_by"] == lisbon["id"]
    assert old["status"] == "approved" and old["content"] == "Lives in Madrid"
    history = api.client.get(f"{M}/{madrid['id']}/history", headers=admin()).json()["items"]
    assert [(h["action"], h["old_content"], h["new_content"]) for h in history] == [
        ("create", None, "Lives in Madrid"),
        ("supersede", "Lives in Madrid", "Moved to Lisbon"),
    ]
    # Stored state: one row each, the old one closed; its vector left the current searches.
    rows = query(
        api.services.settings,
        "SELECT id, invalid_at, superseded_by FROM memories ORDER BY created_at",
    )
    assert [(r["id"], r["superseded_by"]) for r in rows] == [
        (madrid["id"], lisbon["id"]),
        (lisbon["id"], None),
    ]
    assert indexed_status(api, madrid["id"]) == "superseded"
    assert indexed_status(api, lisbon["id"]) == "approved"


def test_the_context_is_about_now_and_as_of_answers_the_past(api: Api, clock: FakeClock) -> None:
    madrid, lisbon = moved(api, clock)
    now = context_facts(api)
    assert [(f["content"], f["valid_from"]) for f in now] == [
        ("Moved to Lisbon", "2026-06-01T09:00:00.000Z")
    ]
    notes = api.context(query="where does she live", threshold=-1).json()["notes"]
    assert "- Moved to Lisbon\n" in notes + "\n", "a fact of this month needs no date"
    assert "Madrid" not in notes
    clock.advance(days=40)
    notes = api.context(query="where does she live", threshold=-1).json()["notes"]
    assert "- Moved to Lisbon (since 2026-06)" in notes and "Madrid" not in notes
    old_notes = api.context(query="where", threshold=-1, as_of="2026-04-15T00:00:00Z").json()
    assert "- Lives in Madrid (since 2026-03)" in old_notes["notes"]

    april = context_facts(api, as_of="2026-04-15T00:00:00Z")
    assert [(f["content"], f["valid_from"]) for f in april] == [
        ("Lives in Madrid", "2026-03-01T09:00:00.000Z")
    ]
    assert context_facts(api, as_of="2026-02-01T00:00:00Z") == []
    # The boundary: the old one ends when the new one begins, never both at once.
    at_move = context_facts(api, as_of=lisbon["valid_from"])
    assert [f["content"] for f in at_move] == ["Moved to Lisbon"]
    # Without a query (no user turn to read it from), the newest current facts.
    assert madrid["id"] not in {f["id"] for f in api.context(k=5).json()["facts"]}


def test_listing_and_search_show_current_memories_unless_asked(api: Api, clock: FakeClock) -> None:
    moved(api, clock)
    assert listed(api) == ["Moved to Lisbon"]
    assert listed(api, include_superseded="true") == ["Lives in Madrid", "Moved to Lisbon"]
    assert listed(api, as_of="2026-04-01T00:00:00.000Z") == ["Lives in Madrid"]
    assert listed(api, as_of="2026-07-01T00:00:00Z", status="approved") == ["Moved to Lisbon"]
    for mode in ("semantic", "keyword", "hybrid"):
        assert searched(api, mode=mode, query="Madrid Lisbon") == ["Moved to Lisbon"], mode
        assert searched(api, mode=mode, query="Madrid Lisbon", include_superseded=True) == [
            "Lives in Madrid",
            "Moved to Lisbon",
        ], mode
        assert searched(
            api, mode=mode, query="Madrid Lisbon", as_of="2026-04-01T00:00:00Z", status="approved"
        ) == ["Lives in Madrid"], mode


def test_a_page_mark_still_pages(api: Api) -> None:
    for i in range(3):
        add(api, f"fact number {i}")
    first = api.client.get(M, params={"limit": 2}, headers=admin()).json()
    add(api, "added after the first page")
    second = api.client.get(
        M, params={"limit": 2, "offset": 2, "as_of": first["as_of"]}, headers=admin()
    ).json()
    assert [m["content"] for m in second["items"]] == ["fact number 0"]


def test_patch_corrects_in_place(api: Api, clock: FakeClock) -> None:
    memory = add(api, "Lives in Madird")
    clock.advance(days=1)
    response = api.client.patch(
        f"{M}/{memory['id']}", json={"content": "Lives in Madrid"}, headers=admin()
    )
    assert response.status_code == 200, response.text
    fixed = response.json()
    assert fixed["id"] == memory["id"] and fixed["invalid_at"] is None
    assert fixed["valid_from"] == memory["valid_from"], "a correction is not a change in the world"
    assert listed(api, include_superseded="true") == ["Lives in Madrid"]


def test_bad_supersedes_and_as_of_are_4xx_and_change_nothing(api: Api, clock: FakeClock) -> None:
    mine = add(api, "Lives in Madrid")
    someone_else = add(api, "Lives in Porto", phone=OTHER_PHONE)
    other_agent = api.client.post(
        "/v1/agents/other-bot/memories",
        json={"content": "Lives in Rome", "phone": PHONE},
        headers=admin(),
    ).json()
    for target in ("mem_0000000000000000", someone_else["id"], other_agent["id"]):
        response = api.client.post(
            M,
            json={"content": "Moved to Lisbon", "phone": PHONE, "supersedes": target},
            headers=admin(),
        )
        assert_error(response, 422, "invalid_supersedes")
    agent_wide = api.client.post(
        M, json={"content": "Moved to Lisbon", "supersedes": mine["id"]}, headers=admin()
    )
    assert_error(agent_wide, 422, "invalid_supersedes")
    for bad in ("", "mem 1", "x" * 65, 12):
        response = api.client.post(
            M,
            json={"content": "Moved to Lisbon", "phone": PHONE, "supersedes": bad},
            headers=admin(),
        )
        assert_error(response, 422)
    assert listed(api) == ["Lives in Madrid"]

    lisbon = add(api, "Moved to Lisbon", supersedes=mine["id"])
    again = api.client.post(
        M,
        json={"content": "Moved to Paris", "phone": PHONE, "supersedes": mine["id"]},
        headers=admin(),
    )
    assert_error(again, 409, "already_superseded")
    assert get(api, mine["id"])["superseded_by"] == lisbon["id"]
    assert listed(api, include_superseded="true") == ["Lives in Madrid", "Moved to Lisbon"]

    for bad in ("yesterday", "2026-13-01", "-5", "1e400"):
        assert_error(api.context(query="x", as_of=bad), 422)
        response = api.client.post(
            f"{M}/search", json={"query": "x", "as_of": bad}, headers=admin()
        )
        assert_error(response, 422)
    for bad in ("yesterday", "2026-13-01", "-5", "1e400", "9" * 30, "²", "١٢", "9" * 5000):
        assert_error(api.client.get(M, params={"as_of": bad}, headers=admin()), 422)


def test_a_pending_replacement_supersedes_on_approval_only(api: Api, clock: FakeClock) -> None:
    api.client.put(f"/v1/agents/{AGENT}/settings", json={"review": True}, headers=admin())
    agent_key = api.key(f"agent:{AGENT}")
    madrid = add(api, "Lives in Madrid")  # an admin's: approved
    clock.advance(days=30)
    lisbon = add(api, "Moved to Lisbon", supersedes=madrid["id"], headers=agent_key)
    assert lisbon["status"] == "pending" and lisbon["supersedes"] == madrid["id"]
    assert get(api, madrid["id"])["invalid_at"] is None
    api.post_turn("hola")
    assert [f["content"] for f in context_facts(api)] == ["Lives in Madrid"]

    clock.advance(days=1)
    approved = api.client.post(f"{M}/{lisbon['id']}/approve", headers=admin())
    assert approved.status_code == 200, approved.text
    old = get(api, madrid["id"])
    assert old["superseded_by"] == lisbon["id"] and old["invalid_at"] == lisbon["valid_from"]
    assert [f["content"] for f in context_facts(api)] == ["Moved to Lisbon"]
    assert indexed_status(api, madrid["id"]) == "superseded"


def test_a_rejected_replacement_leaves_the_old_memory_current(api: Api, clock: FakeClock) -> None:
    api.client.put(f"/v1/agents/{AGENT}/settings", json={"review": True}, headers=admin())
    agent_key = api.key(f"agent:{AGENT}")
    madrid = add(api, "Lives in Madrid")
    lisbon = add(api, "Moved to Lisbon", supersedes=madrid["id"], headers=agent_key)
    api.client.post(f"{M}/{lisbon['id']}/reject", headers=admin())
    assert get(api, madrid["id"])["invalid_at"] is None
    assert listed(api) == ["Lives in Madrid", "Moved to Lisbon"]  # rejected, still listed
    assert listed(api, status="approved") == ["Lives in Madrid"]


def test_export_and_forget_cover_the_whole_chain(api: Api, clock: FakeClock) -> None:
    madrid, lisbon = moved(api, clock)
    exported = api.client.get(f"{P}/export", headers=admin()).json()["memories"]
    chain = {m["id"]: m for m in exported}
    assert chain[madrid["id"]]["superseded_by"] == lisbon["id"]
    assert chain[lisbon["id"]]["supersedes"] == madrid["id"]
    assert [h["action"] for h in chain[madrid["id"]]["history"]] == ["create", "supersede"]

    assert api.client.delete(P, headers=admin()).status_code == 200
    settings = api.services.settings
    assert query(settings, "SELECT id FROM memories") == []
    assert query(settings, "SELECT id FROM memory_history") == []
    assert indexed_status(api, madrid["id"]) is None and indexed_status(api, lisbon["id"]) is None


# -- compaction ------------------------------------------------------------------------------


def history_of(api: Api, memory_id: str) -> list[str]:
    response = api.client.get(f"{M}/{memory_id}/history", headers=admin())
    return [h["action"] for h in response.json()["items"]]


def test_deleting_the_current_memory_makes_the_one_it_replaced_current_again(
    api: Api, clock: FakeClock
) -> None:
    madrid, lisbon = moved(api, clock)
    response = api.client.delete(f"{M}/{lisbon['id']}", headers=admin())
    assert response.status_code in (200, 204), response.text
    old = get(api, madrid["id"])
    assert old["invalid_at"] is None and old["superseded_by"] is None
    assert history_of(api, madrid["id"]) == ["create", "supersede", "reopen"]
    api.index()
    assert [f["content"] for f in context_facts(api)] == ["Lives in Madrid"]
    assert listed(api) == ["Lives in Madrid"]
    assert indexed_status(api, madrid["id"]) == "approved"


def test_rejecting_an_approved_replacement_reopens_and_approving_again_supersedes(
    api: Api, clock: FakeClock
) -> None:
    madrid, lisbon = moved(api, clock)
    rejected = api.client.post(f"{M}/{lisbon['id']}/reject", headers=admin())
    assert rejected.status_code == 200, rejected.text
    assert get(api, madrid["id"])["invalid_at"] is None
    api.index()
    assert [f["content"] for f in context_facts(api)] == ["Lives in Madrid"]
    approved = api.client.post(f"{M}/{lisbon['id']}/approve", headers=admin())
    assert approved.status_code == 200, approved.text
    assert get(api, madrid["id"])["superseded_by"] == lisbon["id"]
    api.index()
    assert [f["content"] for f in context_facts(api)] == ["Moved to Lisbon"]


def test_deleting_the_middle_of_a_chain_links_its_neighbours(api: Api, clock: FakeClock) -> None:
    madrid, lisbon = moved(api, clock)
    clock.advance(days=30)
    porto = add(api, "Moved to Porto", supersedes=lisbon["id"])
    assert api.client.delete(f"{M}/{lisbon['id']}", headers=admin()).status_code in (200, 204)
    old = get(api, madrid["id"])
    assert old["superseded_by"] == porto["id"] and old["invalid_at"] is not None
    assert get(api, porto["id"])["supersedes"] == madrid["id"]
    api.index()
    assert [f["content"] for f in context_facts(api)] == ["Moved to Porto"]
    assert listed(api, include_superseded="true") == ["Lives in Madrid", "Moved to Porto"]


def test_the_same_change_sent_twice_is_one_change(api: Api, clock: FakeClock) -> None:
    madrid = add(api, "Lives in Madrid")
    lisbon = add(api, "Moved to Lisbon")  # sent first without the link
    again = add(api, "Moved to Lisbon", 200, supersedes=madrid["id"])
    assert again["id"] == lisbon["id"] and again["supersedes"] == madrid["id"]
    assert get(api, madrid["id"])["superseded_by"] == lisbon["id"]
    assert add(api, "Moved to Lisbon", 200, supersedes=madrid["id"])["id"] == lisbon["id"]
    assert add(api, "Moved to Lisbon", 200, supersedes=lisbon["id"])["id"] == lisbon["id"]
    porto = add(api, "Lives in Porto")
    conflict = api.client.post(
        M,
        json={"content": "Moved to Lisbon", "phone": PHONE, "supersedes": porto["id"]},
        headers=admin(),
    )
    assert_error(conflict, 409, "supersedes_conflict")
    assert get(api, porto["id"])["invalid_at"] is None
    assert listed(api) == ["Lives in Porto", "Moved to Lisbon"]


def test_an_approval_whose_old_memory_is_gone_drops_the_proposal(
    api: Api, clock: FakeClock
) -> None:
    api.client.put(f"/v1/agents/{AGENT}/settings", json={"review": True}, headers=admin())
    agent_key = api.key(f"agent:{AGENT}")
    madrid = add(api, "Lives in Madrid")
    lisbon = add(api, "Moved to Lisbon", supersedes=madrid["id"], headers=agent_key)
    assert api.client.delete(f"{M}/{madrid['id']}", headers=admin()).status_code in (200, 204)
    approved = api.client.post(f"{M}/{lisbon['id']}/approve", headers=admin())
    assert approved.status_code == 200, approved.text
    assert approved.json()["supersedes"] is None
    assert get(api, lisbon["id"])["supersedes"] is None
    sql = "SELECT supersedes FROM memories WHERE id = ?"
    assert query(api.services.settings, sql, lisbon["id"])[0]["supersedes"] is None


def test_a_search_of_a_past_time_reads_past_later_memories(api: Api, clock: FakeClock) -> None:
    madrid = add(api, "Lives in Madrid")
    then = madrid["valid_from"]
    clock.advance(days=10)
    for n in range(24):
        add(api, f"Lives near the river, note {n}")
    api.index()
    body = {"query": "where does she live", "phone": PHONE, "threshold": -1, "limit": 2}
    response = api.client.post(f"{M}/search", json={**body, "as_of": then}, headers=admin())
    assert response.status_code == 200, response.text
    assert [m["content"] for m in response.json()["items"]] == ["Lives in Madrid"]


def test_a_search_of_pending_memories_with_the_chain_finds_a_replaced_one(
    api: Api, clock: FakeClock
) -> None:
    api.client.put(f"/v1/agents/{AGENT}/settings", json={"review": True}, headers=admin())
    agent_key = api.key(f"agent:{AGENT}")
    madrid = add(api, "Lives in Madrid", headers=agent_key)
    assert madrid["status"] == "pending"
    clock.advance(days=1)
    add(api, "Moved to Lisbon", supersedes=madrid["id"])  # an admin's: replaces it now
    api.index()
    assert searched(api, status="pending") == []
    assert searched(api, status="pending", include_superseded=True) == ["Lives in Madrid"]


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


@pytest.fixture
def model_api(api_factory: Callable[..., Api], llm: FakeLLM) -> Api:
    return api_factory(
        llm_base_url=llm.base_url,
        llm_api_key="sk-test",
        llm_model="fake-model-1",
        llm_retries=0,
        llm_timeout_s=5.0,
    )


def chat(api: Api, clock: FakeClock, n: int = 45) -> list[int]:
    ids = []
    for i in range(n):
        clock.advance(minutes=1)
        role = "user" if i % 2 == 0 else "assistant"
        response = api.post_turn(f"turn {i}: me mudé a Lisboa", role=role)
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    return ids


def facts_answer(*contents: str) -> str:
    return json.dumps([{"content": c, "type": "fact", "confidence": 0.9} for c in contents])


def shown_labels(text: str) -> dict[str, str]:
    """The update call's labels by the stored fact they stand for."""
    return {m[2]: m[1] for m in re.finditer(r"^\s+(S\d+): (.+?) \(since", text, re.M)}


def test_compaction_supersedes_a_changed_fact_and_keeps_an_unchanged_one(
    model_api: Api, llm: FakeLLM, clock: FakeClock
) -> None:
    api = model_api
    madrid = add(api, "Lives in Madrid")
    dog = add(api, "Has a dog called Biscuit")
    clock.advance(days=90)
    ids = chat(api, clock)
    llm.facts = facts_answer("Lives in Lisbon", "Has a dog called Biscuit", "Works as a nurse")
    seen: list[str] = []

    def decide(text: str) -> str:
        seen.append(text)
        labels = shown_labels(text)
        return json.dumps(
            [
                {"n": 1, "action": "supersede", "id": labels["Lives in Madrid"]},
                {"n": 2, "action": "duplicate", "id": labels["Has a dog called Biscuit"]},
                {"n": 3, "action": "add"},
            ]
        )

    llm.updates = decide
    body = api.client.post(f"{P}/compact", headers=admin()).json()
    assert body["archived"] == 25 and body["facts_added"] == 2
    assert len(seen) == 1 and "New fact 1: Lives in Lisbon" in seen[0]

    old = get(api, madrid["id"])
    current = {m["content"]: m for m in api.client.get(M, headers=admin()).json()["items"]}
    assert set(current) == {"Lives in Lisbon", "Has a dog called Biscuit", "Works as a nurse"}
    lisbon = current["Lives in Lisbon"]
    assert old["superseded_by"] == lisbon["id"] and lisbon["supersedes"] == madrid["id"]
    # True since the newest turn it was read from; those turns are its sources.
    archived = ids[:25]
    newest = query(api.services.settings, "SELECT created_at FROM messages WHERE id = ?", ids[24])
    assert lisbon["valid_from"] == newest[0]["created_at"] == old["invalid_at"]
    assert lisbon["source_message_ids"] == archived and lisbon["source"] == "extracted"
    kept = get(api, dog["id"])
    assert kept["invalid_at"] is None
    assert (
        query(api.services.settings, "SELECT seen_count FROM memories WHERE id = ?", dog["id"])[0][
            "seen_count"
        ]
        == 2
    )
    assert "Madrid" not in json.dumps(context_facts(api))


@pytest.mark.parametrize(
    "answer",
    [
        "not json at all",
        '[{"n": 1, "action": "supersede", "id": "S99"}]',  # a label it was not shown
        '[{"n": 1, "action": "replace", "id": "S1"}]',  # an unknown action
        '[{"n": "first", "action": "supersede"}]',
        '{"decisions": "none"}',
        "",
        '[{"n": Infinity, "action": "add"}]',  # int(inf): OverflowError
        '[{"n": 1e400, "action": "add"}]',
        '[{"n": 1' + "0" * 5000 + ', "action": "add"}]',  # past Python's int-digit limit
        "[" * 100_000,  # deeper than the JSON parser recurses
    ],
)
def test_an_unusable_update_answer_falls_back_to_adding(
    model_api: Api, llm: FakeLLM, clock: FakeClock, answer: str
) -> None:
    api = model_api
    madrid = add(api, "Lives in Madrid")
    chat(api, clock)
    llm.facts = facts_answer("Lives in Lisbon")
    llm.updates = answer
    response = api.client.post(f"{P}/compact", headers=admin())
    assert response.status_code == 200, response.text
    assert response.json()["facts_added"] == 1
    assert get(api, madrid["id"])["invalid_at"] is None
    assert listed(api) == ["Lives in Lisbon", "Lives in Madrid"]


def test_a_failed_update_call_keeps_the_compaction(
    model_api: Api, llm: FakeLLM, clock: FakeClock
) -> None:
    api = model_api
    add(api, "Lives in Madrid")
    chat(api, clock)
    llm.facts = facts_answer("Lives in Lisbon")

    def fail(text: str) -> str:
        raise RuntimeError("the fake drops the connection")

    llm.updates = fail
    response = api.client.post(f"{P}/compact", headers=admin())
    assert response.status_code == 200, response.text
    assert response.json()["archived"] == 25 and response.json()["facts_added"] == 1
    assert listed(api) == ["Lives in Lisbon", "Lives in Madrid"]


def test_compaction_in_review_proposes_and_approval_supersedes(
    model_api: Api, llm: FakeLLM, clock: FakeClock
) -> None:
    api = model_api
    madrid = add(api, "Lives in Madrid")
    api.client.put(f"/v1/agents/{AGENT}/settings", json={"review": True}, headers=admin())
    chat(api, clock)
    llm.facts = facts_answer("Lives in Lisbon")
    llm.updates = lambda text: json.dumps(
        [{"n": 1, "action": "supersede", "id": shown_labels(text)["Lives in Madrid"]}]
    )
    assert api.client.post(f"{P}/compact", headers=admin()).json()["facts_added"] == 1
    pending = api.client.get(M, params={"status": "pending"}, headers=admin()).json()["items"]
    assert [(m["content"], m["supersedes"]) for m in pending] == [("Lives in Lisbon", madrid["id"])]
    assert get(api, madrid["id"])["invalid_at"] is None
    api.client.post(f"{M}/{pending[0]['id']}/approve", headers=admin())
    assert get(api, madrid["id"])["superseded_by"] == pending[0]["id"]
    assert listed(api) == ["Lives in Lisbon"]


def test_compaction_proposing_a_change_already_stored_links_the_stored_one(
    model_api: Api, llm: FakeLLM, clock: FakeClock
) -> None:
    api = model_api
    madrid = add(api, "Lives in Madrid")
    lisbon = add(api, "Lives in Lisbon")  # stored by hand, without the link
    chat(api, clock)
    llm.facts = facts_answer("Lives in Lisbon")
    llm.updates = lambda text: json.dumps(
        [{"n": 1, "action": "supersede", "id": shown_labels(text)["Lives in Madrid"]}]
    )
    response = api.client.post(f"{P}/compact", headers=admin())
    assert response.status_code == 200, response.text
    assert response.json()["facts_added"] == 0
    assert get(api, madrid["id"])["superseded_by"] == lisbon["id"]
    assert get(api, lisbon["id"])["supersedes"] == madrid["id"]
    assert listed(api) == ["Lives in Lisbon"]


def test_a_fact_true_again_after_a_change_is_stored_again(
    model_api: Api, llm: FakeLLM, clock: FakeClock
) -> None:
    """Madrid, then Lisbon, then back to Madrid: the duplicate check does not count the
    replaced 'Lives in Madrid' as the same fact, so the return is stored, current."""
    api = model_api
    madrid = add(api, "Lives in Madrid")
    add(api, "Moved to Lisbon", supersedes=madrid["id"])
    chat(api, clock)
    llm.facts = facts_answer("Lives in Madrid")
    assert api.client.post(f"{P}/compact", headers=admin()).json()["facts_added"] == 1
    assert listed(api) == ["Lives in Madrid", "Moved to Lisbon"]
    assert len(listed(api, include_superseded="true")) == 3


@pytest.mark.sqlite
def test_memories_stored_before_validity_became_true_when_they_were_stored(
    tmp_path: Path,
) -> None:
    """A database of the version before: its memories gain valid_from = created_at and are
    current; the rest of the row is as it was."""
    path = tmp_path / "memory.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
    for version, script in enumerate(MIGRATIONS[:7], start=1):
        conn.executescript(script)
        conn.execute("INSERT INTO schema_migrations VALUES (?, 'then')", (version,))
    conn.execute(
        "INSERT INTO memories (id, agent, phone, content, type, status, source, source_turns,"
        " created_at, updated_at) VALUES ('mem_old', 'a', '+15550000001', 'Lives in Madrid',"
        " 'fact', 'approved', 'extracted', '[3, 4]', '2025-01-02T03:04:05.000Z',"
        " '2025-01-02T03:04:05.000Z')"
    )
    conn.commit()
    conn.close()
    store = Store(path)
    try:
        assert store.schema_version() == len(MIGRATIONS) >= 8
        old = store.memories_by_ids(["mem_old"])["mem_old"]
        assert (old.valid_from, old.invalid_at, old.superseded_by, old.supersedes) == (
            "2025-01-02T03:04:05.000Z",
            None,
            None,
            None,
        )
        assert old.source_turns == [3, 4] and old.content == "Lives in Madrid"
    finally:
        store.close()


def test_staff_search_labels_a_replaced_fact(api: Api, clock: FakeClock) -> None:
    madrid, lisbon = moved(api, clock)
    api.index()
    response = api.client.post(
        "/v1/search",
        json={"query": "Madrid Lisbon", "kinds": ["facts"], "mode": "keyword"},
        headers=admin(),
    )
    assert response.status_code == 200, response.text
    status = {i["id"]: i["status"] for i in response.json()["items"]}
    assert status == {madrid["id"]: "superseded", lisbon["id"]: "approved"}


@pytest.mark.parametrize("said", ["add", None])
def test_a_fact_the_model_calls_new_is_not_taken_for_a_repeat(
    api_factory: Callable[..., Api], llm: FakeLLM, clock: FakeClock, said: str | None
) -> None:
    """A rescheduled date ("the 21st" after "the 14th") may pass the duplicate threshold by
    cosine (here it does: the threshold is 0); the model saw the stored fact and said add, so
    it is stored. Without the model's word, the duplicate check decides: a repeat."""
    api = api_factory(
        llm_base_url=llm.base_url,
        llm_api_key="sk-test",
        llm_model="fake-model-1",
        llm_retries=0,
        llm_timeout_s=5.0,
        duplicate_threshold=0.0,
    )
    add(api, "Dentist appointment on 14 May")
    chat(api, clock)
    llm.facts = facts_answer("Dentist appointment on 21 May")
    llm.updates = json.dumps([{"n": 1, "action": said}] if said else [])
    body = api.client.post(f"{P}/compact", headers=admin()).json()
    if said == "add":
        assert body["facts_added"] == 1, body
        assert listed(api) == ["Dentist appointment on 14 May", "Dentist appointment on 21 May"]
    else:
        assert body["facts_added"] == 0, body
        assert listed(api) == ["Dentist appointment on 14 May"]
