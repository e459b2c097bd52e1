"""Opt-out (STOP): recorded under the agent's policy keep until the person's next user turn,
shown in the context, the export and the staff page's timeline; under forget, the person is
forgotten as by DELETE and nothing of theirs is kept."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from server.app import create_app
from tests.backends import query
from tests.conftest import (
    ADMIN_KEY,
    AGENT,
    PHONE,
    Api,
    FakeClock,
    admin,
    assert_error,
    make_settings,
)
from tests.fakes import fake_factory
from tests.server.test_erasure import lance_texts

CANARY = "okapicanary93b1e0"
OTHER = "+15559990000"
OPT_OUT = f"/v1/agents/{AGENT}/people/{PHONE}/opt-out"
PERSON = f"/v1/agents/{AGENT}/people/{PHONE}"


def export(api: Api, phone: str = PHONE) -> dict[str, object]:
    answer = api.client.get(f"/v1/agents/{AGENT}/people/{phone}/export", headers=admin())
    assert answer.status_code == 200, answer.text
    body: dict[str, object] = answer.json()
    return body


def opt_out_rows(api: Api) -> list[tuple[str, str, str]]:
    rows = query(api.services.settings, "SELECT agent, phone, opted_out_at FROM opt_outs")
    return [(r[0], r[1], r[2]) for r in rows]


def set_policy(api: Api, policy: str | None) -> dict[str, object]:
    answer = api.client.put(
        f"/v1/agents/{AGENT}/settings", json={"opt_out_policy": policy}, headers=admin()
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, object] = answer.json()
    return body


def test_keep_records_the_opt_out_until_the_next_user_turn(api: Api, clock: FakeClock) -> None:
    agent_key = api.key(f"agent:{AGENT}")
    api.post_turn("hello there", headers=agent_key)
    api.post_turn("how can I help?", role="assistant", headers=agent_key)
    assert api.context().json()["opted_out_at"] is None
    assert export(api)["opted_out_at"] is None

    clock.advance(minutes=5)
    answer = api.client.post(OPT_OUT, headers=agent_key)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"opted_out_at": "2026-03-01T09:05:00.000Z", "policy": "keep"}
    assert opt_out_rows(api) == [(AGENT, PHONE, "2026-03-01T09:05:00.000Z")]
    # The memory stays; the context and the export say since when they opted out.
    context = api.context().json()
    assert context["opted_out_at"] == "2026-03-01T09:05:00.000Z"
    assert [t["content"] for t in context["history"]] == ["hello there", "how can I help?"]
    body = export(api)
    assert body["opted_out_at"] == "2026-03-01T09:05:00.000Z"
    assert len(body["messages"]) == 2  # type: ignore[arg-type]
    read = api.client.get(OPT_OUT, headers=api.key("staff"))
    assert read.json() == {"opted_out_at": "2026-03-01T09:05:00.000Z", "policy": "keep"}

    # A retried call (the webhook again) answers the first time, and records nothing new.
    clock.advance(minutes=1)
    again = api.client.post(OPT_OUT, headers=agent_key).json()
    assert again["opted_out_at"] == "2026-03-01T09:05:00.000Z"
    assert len(opt_out_rows(api)) == 1

    # The agent's own (assistant) turn does not lift it; the person's next turn does.
    api.post_turn("we will miss you", role="assistant", headers=agent_key)
    assert api.context().json()["opted_out_at"] == "2026-03-01T09:05:00.000Z"
    clock.advance(days=2)
    assert api.post_turn("START, I am back", headers=agent_key).status_code == 201
    assert api.context().json()["opted_out_at"] is None
    assert export(api)["opted_out_at"] is None
    assert opt_out_rows(api) == []
    assert_error(api.client.get(OPT_OUT, headers=agent_key), 404, "not_found")


def test_a_user_turn_made_before_the_opt_out_does_not_lift_it(api: Api, clock: FakeClock) -> None:
    """The webhook may store the STOP message itself after reporting it, with its own time:
    that turn is older than the opt-out and leaves it in place. A retried turn neither."""
    api.post_turn("hi", event_id="e1")
    clock.advance(minutes=10)
    opted = api.client.post(OPT_OUT, headers=admin()).json()["opted_out_at"]
    stop = api.post_turn("STOP", event_id="e2", created_at="2026-03-01T09:09:59Z")
    assert stop.status_code == 201
    assert api.post_turn("hi", event_id="e1").status_code == 200  # a retry: nothing stored
    assert api.context().json()["opted_out_at"] == opted
    # A turn at the same moment or later lifts it.
    api.post_turn("hello again", created_at=opted)
    assert api.context().json()["opted_out_at"] is None


def test_an_opt_out_of_a_person_with_no_data_is_recorded(api: Api) -> None:
    """The webhook must not fail: 200, and the opt-out is kept (the agent may learn of the
    person later, and must still not write first)."""
    answer = api.client.post(OPT_OUT, headers=admin())
    assert answer.status_code == 200
    assert answer.json()["policy"] == "keep"
    body = export(api)
    assert body["messages"] == [] and body["opted_out_at"] == answer.json()["opted_out_at"]
    assert api.context().json()["opted_out_at"] == answer.json()["opted_out_at"]
    # Only this person of this agent.
    assert api.context(phone=OTHER).json()["opted_out_at"] is None
    assert api.context(agent="other-agent").json()["opted_out_at"] is None


def test_delete_forgets_the_opt_out_too(api: Api) -> None:
    api.post_turn("hi")
    api.client.post(OPT_OUT, headers=admin())
    assert api.client.delete(PERSON, headers=admin()).status_code == 200
    assert opt_out_rows(api) == []
    assert export(api)["opted_out_at"] is None


def test_policy_forget_forgets_the_person_and_keeps_nothing(api: Api, clock: FakeClock) -> None:
    # The other person opted out while the policy was keep: theirs stays.
    api.post_turn("the other person stays", phone=OTHER)
    api.client.post(f"/v1/agents/{AGENT}/people/{OTHER}/opt-out", headers=admin())
    assert set_policy(api, "forget")["opt_out_policy"] == "forget"
    for i in range(12):
        api.post_turn(f"turn {i}: my code word is {CANARY}", role="user" if i % 2 else "assistant")
    api.services.memory.add_memory(AGENT, PHONE, f"Code word {CANARY}")
    api.services.store.put_summary(AGENT, PHONE, f"They said {CANARY}", 4)
    api.index()
    staff = api.key("staff")
    found = api.client.post(
        "/v1/search", json={"query": CANARY, "mode": "keyword"}, headers=staff
    ).json()["items"]
    assert found, "the canary is indexed and found before the opt-out"

    clock.advance(hours=1)
    answer = api.client.post(OPT_OUT, headers=api.key(f"agent:{AGENT}"))
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"opted_out_at": "2026-03-01T10:00:00.000Z", "policy": "forget"}

    # Forgotten as by DELETE: nothing of theirs in the database, no opt-out marker either.
    settings = api.services.settings
    for table in ("messages", "memories", "summaries", "memory_history", "outbox", "opt_outs"):
        count = query(settings, f"SELECT COUNT(*) FROM {table} WHERE phone = ?", PHONE)
        assert count[0][0] == 0, table
    assert [r[1] for r in opt_out_rows(api)] == [OTHER]
    if not settings.database_url:
        for path in (p for p in settings.data_dir.rglob("*") if p.is_file()):
            data = path.read_bytes()
            assert CANARY.encode() not in data and PHONE.encode() not in data, path
    texts = lance_texts(settings.lance_path)
    assert CANARY not in texts and PHONE not in texts
    body = export(api)
    assert body["messages"] == [] and body["memories"] == [] and body["summary"] is None
    assert body["opted_out_at"] is None
    context = api.context(query=CANARY, threshold=-1).json()
    assert context["history"] == [] and context["facts"] == [] and context["opted_out_at"] is None
    for mode in ("semantic", "keyword", "hybrid"):
        items = api.client.post(
            "/v1/search", json={"query": CANARY, "mode": mode}, headers=staff
        ).json()["items"]
        assert all(CANARY not in item["text"] for item in items), mode
    assert PHONE not in json.dumps(api.client.get("/v1/audit", headers=admin()).json())
    assert [t["content"] for t in api.context(phone=OTHER).json()["history"]] == [
        "the other person stays"
    ]

    # A second STOP (a retry) finds nobody, and answers the same way.
    again = api.client.post(OPT_OUT, headers=admin())
    assert again.status_code == 200 and again.json()["policy"] == "forget"
    assert opt_out_rows(api) == [opt_out_rows(api)[0]]


def test_policy_setting_defaults_validates_and_resets(api: Api) -> None:
    settings = api.client.get(f"/v1/agents/{AGENT}/settings", headers=admin()).json()
    assert settings["opt_out_policy"] == "keep"
    bad = api.client.put(
        f"/v1/agents/{AGENT}/settings", json={"opt_out_policy": "erase"}, headers=admin()
    )
    assert_error(bad, 422)
    assert set_policy(api, "forget")["opt_out_policy"] == "forget"
    # Another field changed alone leaves the policy as it was; null sets the default again.
    other = api.client.put(f"/v1/agents/{AGENT}/settings", json={"top_k": 3}, headers=admin())
    assert other.json()["opt_out_policy"] == "forget"
    assert set_policy(api, None)["opt_out_policy"] == "keep"
    agent_key = api.key(f"agent:{AGENT}")
    forbidden = api.client.put(
        f"/v1/agents/{AGENT}/settings", json={"opt_out_policy": "forget"}, headers=agent_key
    )
    assert_error(forbidden, 403)


def test_opt_out_auth_and_bad_input(api: Api) -> None:
    assert_error(api.client.post(OPT_OUT), 401)
    assert_error(api.client.post(OPT_OUT, headers=api.key("staff")), 403)
    assert_error(api.client.post(OPT_OUT, headers=api.key("agent:someone-else")), 403)
    assert_error(api.client.get(OPT_OUT, headers=api.key("agent:someone-else")), 403)
    bad_phone = api.client.post(f"/v1/agents/{AGENT}/people/12345/opt-out", headers=admin())
    assert_error(bad_phone, 422, "invalid_phone")
    bad_agent = api.client.post(f"/v1/agents/Bad!/people/{PHONE}/opt-out", headers=admin())
    assert_error(bad_agent, 422, "invalid_agent")
    assert opt_out_rows(api) == []
    # URL-encoded phone, as for the other person routes.
    encoded = api.client.post(f"/v1/agents/{AGENT}/people/%2B15551230001/opt-out", headers=admin())
    assert encoded.status_code == 200 and opt_out_rows(api)[0][1] == PHONE


def test_the_openapi_schema_describes_the_opt_out(api: Api) -> None:
    schema = api.client.get("/openapi.json").json()
    path = schema["paths"]["/v1/agents/{agent}/people/{phone}/opt-out"]
    assert set(path) == {"post", "get"}
    assert set(schema["components"]["schemas"]["OptOutOut"]["properties"]) == {
        "opted_out_at",
        "policy",
    }
    assert "opted_out_at" in schema["components"]["schemas"]["ContextOut"]["properties"]
    assert "opted_out_at" in schema["components"]["schemas"]["ExportOut"]["properties"]


# -- the staff page --------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def page_server(tmp_path: Path) -> Iterator[tuple[str, Callable[..., httpx.Response]]]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    clock = FakeClock()
    app = create_app(
        make_settings(tmp_path), clock=clock, encoder_factory=fake_factory, run_workers=False
    )
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"

    def call(method: str, path: str, **kwargs: object) -> httpx.Response:
        return httpx.request(
            method, base + path, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, **kwargs
        )  # type: ignore[arg-type]

    for i in range(6):
        clock.advance(minutes=1)
        call("POST", f"{PERSON}/messages", json={"role": "user", "content": f"jacket talk {i}"})
    clock.advance(minutes=1)
    call("POST", OPT_OUT)
    clock.advance(minutes=1)
    call("POST", f"{PERSON}/messages", json={"role": "assistant", "content": "bye, jacket"})
    call(
        "POST",
        f"/v1/agents/{AGENT}/people/{OTHER}/messages",
        json={"role": "user", "content": "jacket"},
    )
    app.state.services.indexer.drain()
    try:
        yield base, call
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_the_staff_timeline_shows_the_opt_out(
    page_server: tuple[str, Callable[..., httpx.Response]],
) -> None:
    base, call = page_server
    if not CHROMIUM:
        pytest.fail("Debian's chromium is not installed (scripts/test installs it as root)")
    from playwright.sync_api import sync_playwright

    staff = call("POST", "/v1/keys", json={"scope": "staff"}).json()["key"]
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{base}/staff")
        page.fill("#key", staff)
        page.fill("#query", "jacket")
        page.select_option("#mode", "keyword")
        page.click("#go")
        page.wait_for_selector(".person")
        page.locator(".person", has_text=PHONE).locator("h2 button").click()
        page.wait_for_selector("#timeline .turn")
        page.wait_for_selector("#timeline .opted-out")
        banner = page.inner_text("#timeline .opted-out")
        assert "Opted out (STOP)" in banner and "no proactive messages" in banner
        # The marker sits among the turns at its time: after the sixth turn, before the
        # agent's goodbye.
        rows = page.locator("#timeline .turns > div").all_inner_texts()
        assert len(rows) == 8, rows
        assert "opted out" in rows[6].lower() and "bye, jacket" in rows[7]

        # Another person, never opted out: no banner, no marker.
        page.locator(".person", has_text=OTHER).locator("h2 button").click()
        page.wait_for_function(
            "document.querySelector('#timeline h2').textContent.includes('+15559990000')"
        )
        page.wait_for_selector("#timeline .turn")
        page.wait_for_timeout(300)  # (the opt-out is read after the turns)
        assert page.locator("#timeline .opted-out").count() == 0
        browser.close()
