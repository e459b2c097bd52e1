"""Storing and listing turns over HTTP, then reading the rows back."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.backends import query
from tests.conftest import AGENT, PHONE, Api, admin, assert_error


def rows(api: Api, sql: str, *args: object) -> list[Any]:
    return query(api.services.settings, sql, *args)


def test_store_turn_then_row_holds_every_field(api: Api) -> None:
    response = api.post_turn(
        "Hi, I'm Maya",
        event_id="evt-1",
        number="+15550009999",
        created_at="2026-03-01T10:00:00+02:00",
    )
    assert response.status_code == 201
    body = response.json()
    assert body["stored"] is True
    (row,) = rows(api, "SELECT * FROM messages")
    assert row["id"] == body["id"]
    assert (row["agent"], row["phone"], row["role"]) == (AGENT, PHONE, "user")
    assert row["content"] == "Hi, I'm Maya"
    assert row["event_id"] == "evt-1"
    assert row["number"] == "+15550009999"
    assert row["created_at"] == "2026-03-01T08:00:00.000Z"
    assert row["archived"] == 0


def test_created_at_defaults_to_now(api: Api) -> None:
    api.post_turn("hello")
    (row,) = rows(api, "SELECT created_at FROM messages")
    assert row["created_at"] == "2026-03-01T09:00:00.000Z"


def test_duplicate_event_id_stores_nothing(api: Api) -> None:
    first = api.post_turn("hello", event_id="evt-dup")
    second = api.post_turn("hello", event_id="evt-dup")
    assert first.status_code == 201
    assert second.status_code == 200
    assert second.json() == {"id": first.json()["id"], "stored": False}
    assert len(rows(api, "SELECT id FROM messages")) == 1
    assert len(rows(api, "SELECT id FROM outbox")) == 1


def test_concurrent_retries_of_one_event_store_it_once(api: Api) -> None:
    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(lambda _: api.post_turn("hi", event_id="evt-race"), range(16)))
    assert sorted(r.status_code for r in responses) == [200] * 15 + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    assert len(rows(api, "SELECT id FROM messages")) == 1


def test_event_ids_are_scoped_to_the_agent(api: Api) -> None:
    """Agent b cannot pre-claim agent a's event ids and so make a's turns vanish."""
    assert api.post_turn("from b", agent="b", event_id="evt-7").status_code == 201
    assert api.post_turn("from a", agent="a", event_id="evt-7").status_code == 201
    assert len(rows(api, "SELECT id FROM messages")) == 2


def test_turns_without_event_id_never_collide(api: Api) -> None:
    for _ in range(3):
        assert api.post_turn("same text", role="assistant").status_code == 201
    assert len(rows(api, "SELECT id FROM messages")) == 3


def test_concurrent_posts_for_one_person_keep_each_senders_order(
    api_factory: Callable[..., Api],
) -> None:
    api = api_factory(compact_trigger=1000)

    def sender(n: int) -> list[int]:
        return [api.post_turn(f"s{n}-{i}", event_id=f"e{n}-{i}").json()["id"] for i in range(15)]

    with ThreadPoolExecutor(6) as pool:
        ids_by_sender = list(pool.map(sender, range(6)))
    stored = rows(api, "SELECT id, content FROM messages ORDER BY id")
    assert len(stored) == 90
    for n, ids in enumerate(ids_by_sender):
        assert ids == sorted(ids)
        mine = [r["content"] for r in stored if r["content"].startswith(f"s{n}-")]
        assert mine == [f"s{n}-{i}" for i in range(15)]
    history = api.context(max_messages=200, budget_chars=10**6).json()["history"]
    assert [h["content"] for h in history] == [r["content"] for r in stored]


def test_one_persons_turns_run_one_at_a_time_while_people_run_in_parallel(
    api_factory: Callable[..., Api], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two quick messages of one person never race; another person's do not wait for them.
    The store is slowed down so that overlapping calls would show."""
    api = api_factory(compact_trigger=1000)
    store = api.services.store
    real_insert = store.insert_message
    guard = threading.Lock()
    running: Counter[str] = Counter()
    peak = {"same_person": 0, "all": 0}

    def slow_insert(**fields: Any) -> tuple[int, bool]:
        with guard:
            running[fields["phone"]] += 1
            peak["same_person"] = max(peak["same_person"], running[fields["phone"]])
            peak["all"] = max(peak["all"], sum(running.values()))
        try:
            time.sleep(0.03)
            return real_insert(**fields)
        finally:
            with guard:
                running[fields["phone"]] -= 1

    monkeypatch.setattr(store, "insert_message", slow_insert)
    people = ["+15550000001", "+15550000002"]

    def sender(n: int) -> None:
        for i in range(4):
            response = api.post_turn(f"s{n}-{i}", phone=people[n % 2], event_id=f"e{n}-{i}")
            assert response.status_code == 201

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(sender, range(6)))
    assert peak["same_person"] == 1, "two turns of one person were stored at once"
    assert peak["all"] == 2, "one person's turns held up another's"
    assert len(rows(api, "SELECT id FROM messages")) == 24


def test_number_replacement_keeps_the_same_memory(api: Api) -> None:
    api.post_turn("I have a dog called Biscuit", number="+15550000001")
    api.post_turn("Nice!", role="assistant", number="+15550000001")
    before = api.context().json()
    api.post_turn("It's me again, new number?", number="+15550000002")
    after = api.context().json()
    assert after["history"][:2] == before["history"]
    assert len(after["history"]) == 3
    numbers = [r["number"] for r in rows(api, "SELECT number FROM messages ORDER BY id")]
    assert numbers == ["+15550000001", "+15550000001", "+15550000002"]


def test_url_encoded_phone_is_the_same_person(api: Api) -> None:
    api.post_turn("one")
    response = api.client.post(
        f"/v1/agents/{AGENT}/people/%2B15551230001/messages",
        json={"role": "user", "content": "two"},
        headers=admin(),
    )
    assert response.status_code == 201
    assert {r["phone"] for r in rows(api, "SELECT phone FROM messages")} == {PHONE}


@pytest.mark.parametrize(
    ("phone", "agent", "body", "code"),
    [
        ("15551230001", AGENT, {"role": "user", "content": "x"}, "invalid_phone"),
        ("+1555", AGENT, {"role": "user", "content": "x"}, "invalid_phone"),
        ("+1555123000111122", AGENT, {"role": "user", "content": "x"}, "invalid_phone"),
        ("+1555abc0001", AGENT, {"role": "user", "content": "x"}, "invalid_phone"),
        (PHONE, "Support", {"role": "user", "content": "x"}, "invalid_agent"),
        (PHONE, "a" * 65, {"role": "user", "content": "x"}, "invalid_agent"),
        (PHONE, "bad.agent", {"role": "user", "content": "x"}, "invalid_agent"),
        (PHONE, AGENT, {"role": "system", "content": "x"}, "invalid_role"),
        (PHONE, AGENT, {"role": "user", "content": ""}, "invalid_content"),
        (PHONE, AGENT, {"role": "user", "content": "   \n"}, "invalid_content"),
        (PHONE, AGENT, {"role": "user", "content": 5}, "invalid_content"),
        (PHONE, AGENT, {"role": "user"}, "missing_field"),
        (PHONE, AGENT, {"role": "user", "content": "x", "extra": 1}, "unknown_field"),
        (PHONE, AGENT, {"role": "user", "content": "x", "number": "123"}, "invalid_number"),
        (PHONE, AGENT, {"role": "user", "content": "x", "created_at": "soon"}, "invalid_date"),
        (PHONE, AGENT, {"role": "user", "content": "x", "event_id": ""}, None),
        (PHONE, AGENT, {"role": "user", "content": "x" * 32_001}, "content_too_long"),
        (PHONE, AGENT, [1, 2], None),
    ],
)
def test_bad_input_is_422_and_stores_nothing(
    api: Api, phone: str, agent: str, body: object, code: str | None
) -> None:
    response = api.client.post(
        f"/v1/agents/{agent}/people/{phone}/messages", json=body, headers=admin()
    )
    assert_error(response, 422, code)
    assert rows(api, "SELECT id FROM messages") == []


def test_longest_content_is_accepted(api: Api) -> None:
    assert api.post_turn("x" * 32_000).status_code == 201


def test_invalid_json_and_lone_surrogates_are_422(api: Api) -> None:
    url = f"/v1/agents/{AGENT}/people/{PHONE}/messages"
    broken = api.client.post(url, content=b'{"role": "user", "content": ', headers=admin())
    assert_error(broken, 422, "invalid_json")
    surrogate = api.client.post(
        url,
        content=b'{"role": "user", "content": "\\ud800"}',
        headers={**admin(), "Content-Type": "application/json"},
    )
    assert_error(surrogate, 422, "invalid_content")
    bad_utf8 = api.client.post(
        url,
        content=b'{"role": "user", "content": "\xff\xfe"}',
        headers={**admin(), "Content-Type": "application/json"},
    )
    assert_error(bad_utf8, 400, "invalid_body")
    assert rows(api, "SELECT id FROM messages") == []


def test_oversized_body_is_413(api: Api) -> None:
    url = f"/v1/agents/{AGENT}/people/{PHONE}/messages"
    big = b'{"role": "user", "content": "' + b"x" * (1_048_576 + 10) + b'"}'
    assert_error(api.client.post(url, content=big, headers=admin()), 413, "body_too_large")

    def chunks():  # no Content-Length: streamed
        yield b'{"role": "user", "content": "'
        for _ in range(40):
            yield b"y" * 32_768
        yield b'"}'

    assert_error(api.client.post(url, content=chunks(), headers=admin()), 413, "body_too_large")
    assert rows(api, "SELECT id FROM messages") == []


def test_list_messages_pages_newest_first_with_archived(api: Api) -> None:
    ids = [api.post_turn(f"m{i}").json()["id"] for i in range(5)]
    with api.services.store._transaction() as conn:
        conn.execute("UPDATE messages SET archived = 1 WHERE id = ?", (ids[0],))
    url = f"/v1/agents/{AGENT}/people/{PHONE}/messages"
    first = api.client.get(url, params={"limit": 3}, headers=admin()).json()
    assert [m["id"] for m in first["items"]] == ids[:1:-1]
    assert first["next_before_id"] == ids[2]
    second = api.client.get(
        url, params={"limit": 3, "before_id": first["next_before_id"]}, headers=admin()
    ).json()
    assert [m["id"] for m in second["items"]] == [ids[1], ids[0]]
    assert second["items"][1]["archived"] is True
    assert second["next_before_id"] is None
    assert_error(api.client.get(url, params={"limit": 0}, headers=admin()), 422)
    assert_error(api.client.get(url, params={"before_id": "x"}, headers=admin()), 422)


def test_list_messages_after_a_turn_pages_towards_the_newest(api: Api) -> None:
    """The staff page opens a conversation at a matched turn: the turns just after it."""
    ids = [api.post_turn(f"m{i}").json()["id"] for i in range(6)]
    api.post_turn("someone else's", phone="+15550009999")  # not in this person's pages
    url = f"/v1/agents/{AGENT}/people/{PHONE}/messages"

    def page(**params: object) -> Any:
        response = api.client.get(url, params=params, headers=admin())
        assert response.status_code == 200, response.text
        return response.json()

    first = page(limit=2, after_id=ids[1])
    assert [m["id"] for m in first["items"]] == [ids[3], ids[2]]  # newest first, as always
    assert first["newer_after_id"] == ids[3] and first["next_before_id"] == ids[2]
    last = page(limit=5, after_id=first["newer_after_id"])
    assert [m["id"] for m in last["items"]] == [ids[5], ids[4]]
    assert last["newer_after_id"] is None
    assert page(limit=5, after_id=ids[5]) == {
        "items": [],
        "next_before_id": None,
        "newer_after_id": None,
    }
    # From the start: after_id 0 is the person's first turns.
    assert [m["id"] for m in page(limit=2, after_id=0)["items"]] == [ids[1], ids[0]]
    assert page(limit=2)["newer_after_id"] is None  # (only pages asked after a turn have it)
    assert_error(
        api.client.get(url, params={"before_id": 3, "after_id": 1}, headers=admin()),
        422,
        "conflicting_cursors",
    )
    assert_error(api.client.get(url, params={"after_id": -1}, headers=admin()), 422)


def test_other_people_and_agents_are_kept_apart(api: Api) -> None:
    api.post_turn("mine")
    api.post_turn("someone else", phone="+15559990000")
    api.post_turn("other agent", agent="other")
    history = api.context().json()["history"]
    assert [h["content"] for h in history] == ["mine"]


def test_bodies_are_json_whatever_the_content_type(api: Api) -> None:
    response = api.client.post(
        f"/v1/agents/{AGENT}/people/{PHONE}/messages",
        content=b'{"role": "user", "content": "sent like curl -d"}',
        headers={**admin(), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 201
    assert rows(api, "SELECT content FROM messages")[0]["content"] == "sent like curl -d"


def test_concurrent_writers_never_see_database_is_locked(api: Api) -> None:
    """Many threads of this process, and a second connection as another process would hold."""
    from server.store import Store

    other = Store.open(api.services.settings)

    def write(n: int) -> int:
        if n % 4 == 0:
            return other.insert_message(
                agent="b",
                phone=f"+1555000{n:04d}",
                role="user",
                content="x",
                event_id=None,
                number=None,
                created_at=None,
            )[0]
        return api.post_turn(f"t{n}", phone=f"+1555000{n:04d}").status_code

    try:
        with ThreadPoolExecutor(12) as pool:
            results = list(pool.map(write, range(200)))
    finally:
        other.close()
    assert len(results) == 200
    assert len(rows(api, "SELECT id FROM messages")) == 200
