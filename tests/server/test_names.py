"""Names, phones and scopes are checked whole: a trailing newline is not part of a valid one."""

from __future__ import annotations

import pytest

from tests.conftest import AGENT, PHONE, Api, admin, assert_error


@pytest.mark.parametrize("phone", [PHONE + "%0A", PHONE + "%0D%0A", PHONE + "%0A%0A"])
def test_a_phone_with_a_trailing_newline_is_refused(api: Api, phone: str) -> None:
    response = api.client.post(
        f"/v1/agents/{AGENT}/people/{phone}/messages",
        json={"role": "user", "content": "hello"},
        headers=admin(),
    )
    assert_error(response, 422, "invalid_phone")
    assert (
        api.client.get(f"/v1/agents/{AGENT}/people/{phone}/context", headers=admin()).status_code
        == 422
    )
    rows = api.services.store._reader().execute("SELECT phone FROM messages").fetchall()
    assert rows == []


def test_an_agent_with_a_trailing_newline_is_refused(api: Api) -> None:
    response = api.client.post(
        f"/v1/agents/{AGENT}%0A/people/{PHONE}/messages",
        json={"role": "user", "content": "hello"},
        headers=admin(),
    )
    assert_error(response, 422, "invalid_agent")


@pytest.mark.parametrize(
    "body",
    [
        {"scope": "agent:alpha\n"},
        {"scope": "staff", "agents": ["alpha\n"]},
        {"scope": "staff", "agents": ["alpha", "beta\n"]},
    ],
)
def test_a_key_scope_with_a_trailing_newline_is_refused(api: Api, body: dict[str, object]) -> None:
    response = api.client.post("/v1/keys", json=body, headers=admin())
    assert_error(response, 422, "invalid_agent")
    assert [k.scope for k in api.services.store.list_keys()] == []


def test_staff_search_filters_refuse_a_trailing_newline(api: Api) -> None:
    for body in ({"query": "x", "phone": PHONE + "\n"}, {"query": "x", "agents": [AGENT + "\n"]}):
        response = api.client.post("/v1/search", json=body, headers=admin())
        assert response.status_code == 422, response.text


def test_a_memory_id_with_a_trailing_newline_is_refused(api: Api) -> None:
    made = api.client.post(
        f"/v1/agents/{AGENT}/memories", json={"content": "Likes tea"}, headers=admin()
    ).json()
    assert api.client.get(f"/v1/agents/{AGENT}/memories/{made['id']}", headers=admin()).is_success
    response = api.client.get(f"/v1/agents/{AGENT}/memories/{made['id']}%0A", headers=admin())
    assert response.status_code == 422, response.text
