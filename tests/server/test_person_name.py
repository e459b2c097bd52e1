"""The person's name (issue 25, item 4): set through the API or with a turn, returned in the
context and the export, left out of the excerpts' search, how staff search finds whom a
question names; erased by a forget, carried by a move, swept by retention."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest

from server.retention import Retention
from tests.backends import query
from tests.conftest import AGENT, PHONE, Api, FakeClock, admin, assert_error

OTHER = "+15559990000"


def person(phone: str = PHONE, agent: str = AGENT) -> str:
    return f"/v1/agents/{agent}/people/{quote(phone, safe='')}"


def put_name(api: Api, name: Any, phone: str = PHONE, agent: str = AGENT) -> Any:
    return api.client.put(person(phone, agent) + "/name", json={"name": name}, headers=admin())


def get_name(api: Api, phone: str = PHONE) -> Any:
    return api.client.get(person(phone) + "/name", headers=admin())


def rows(api: Api) -> list[tuple[Any, ...]]:
    names = query(api.services.settings, "SELECT agent, phone, name FROM people ORDER BY phone")
    found = query(
        api.services.settings,
        "SELECT word, agent, phone FROM person_name_words ORDER BY phone, word",
    )
    return [tuple(r) for r in names] + [tuple(r) for r in found]


def chat(api: Api, lines: list[str], phone: str = PHONE, agent: str = AGENT) -> None:
    for i, text in enumerate(lines):
        role = "assistant" if i % 2 else "user"
        response = api.post_turn(text, role=role, phone=phone, agent=agent)
        assert response.status_code == 201, response.text


def test_set_read_change_and_clear_a_name(api: Api, clock: FakeClock) -> None:
    assert_error(get_name(api), 404, "name_not_set")
    first = put_name(api, "  María   José\tPérez ")
    assert first.status_code == 200, first.text
    assert first.json()["name"] == "María José Pérez"  # spaces collapsed
    assert get_name(api).json() == first.json()
    assert rows(api) == [
        (AGENT, PHONE, "María José Pérez"),
        ("jose", AGENT, PHONE),
        ("maria", AGENT, PHONE),
        ("perez", AGENT, PHONE),
    ]
    clock.advance(minutes=5)
    again = put_name(api, "María José Pérez")  # the same name: nothing changes, not its time
    assert again.json() == first.json()
    changed = put_name(api, "Pepa")
    assert changed.json()["name"] == "Pepa"
    assert changed.json()["updated_at"] > first.json()["updated_at"]
    assert rows(api) == [(AGENT, PHONE, "Pepa"), ("pepa", AGENT, PHONE)]
    cleared = api.client.delete(person() + "/name", headers=admin())
    assert cleared.status_code == 204
    assert rows(api) == []
    assert_error(get_name(api), 404, "name_not_set")
    assert api.client.delete(person() + "/name", headers=admin()).status_code == 204


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"name": ""}, "invalid_name"),
        ({"name": "   "}, "invalid_name"),
        ({"name": "12345"}, "invalid_name"),  # no letter
        ({"name": "🙂🙂"}, "invalid_name"),
        ({"name": "x" * 101}, "invalid_name"),
        ({"name": "Ana\u0007"}, "invalid_name"),  # a control character
        ({"name": None}, None),
        ({"name": 42}, None),
        ({}, None),
        ({"name": "Ana", "nick": "A"}, None),  # unknown field
    ],
)
def test_a_bad_name_is_a_422_and_nothing_is_stored(
    api: Api, body: dict[str, Any], code: str | None
) -> None:
    response = api.client.put(person() + "/name", json=body, headers=admin())
    assert_error(response, 422, code)
    assert rows(api) == []


def test_a_turn_may_carry_the_name_and_a_bad_one_never_fails_the_turn(
    api: Api, clock: FakeClock
) -> None:
    assert api.post_turn("hola", name="Carmen").status_code == 201
    first = get_name(api).json()
    assert first["name"] == "Carmen"
    clock.advance(minutes=1)
    api.post_turn("¿sigues ahí?", name="Carmen")  # unchanged: not written again
    assert get_name(api).json() == first
    api.post_turn("soy yo", name="Carmen Ruiz")
    assert get_name(api).json()["name"] == "Carmen Ruiz"
    # A profile name that is no name is the provider's, not the turn's fault: the turn is
    # stored, the name ignored.
    for bad in ("   ", "🙂", "12345", "x" * 101, "\u202e\u200b"):
        assert api.post_turn("x", name=bad).status_code == 201, bad
    assert get_name(api).json()["name"] == "Carmen Ruiz"
    assert query(api.services.settings, "SELECT COUNT(*) FROM messages")[0][0] == 8


# Invisible format characters (Unicode category Cf) that a name must not hold.
SPOOFS = [
    ("Eva \u202e0987654321", "U+202E"),  # RIGHT-TO-LEFT OVERRIDE: the fake number
    ("Eva \u2067x\u2069", "U+2067"),  # RIGHT-TO-LEFT ISOLATE
    ("Eva\u200f", "U+200F"),  # RIGHT-TO-LEFT MARK
    ("Eva\u200bLuna", "U+200B"),  # ZERO WIDTH SPACE
    ("Eva\u200cLuna", "U+200C"),  # ZERO WIDTH NON-JOINER between Latin letters
    ("Eva\u200d👍", "U+200D"),  # ZERO WIDTH JOINER not between two emoji
    ("\ufeffEva", "U+FEFF"),  # BYTE ORDER MARK
    ("Ana\u00adMaría", "U+00AD"),  # SOFT HYPHEN
    ("Ana\u2060Luz", "U+2060"),  # WORD JOINER
]


@pytest.mark.parametrize(("name", "code_point"), SPOOFS)
def test_a_name_with_a_format_character_is_a_422_naming_it(
    api: Api, name: str, code_point: str
) -> None:
    response = put_name(api, name)
    assert_error(response, 422, "invalid_name")
    message = response.json()["error"]["message"]
    assert message.startswith("name ") and code_point in message, message
    assert rows(api) == []


@pytest.mark.parametrize(
    "name",
    [
        "Ana 👨\u200d👩\u200d👧",  # a family: emoji joined by U+200D
        "Ana 👩🏽\u200d💻",  # a skin tone before the joiner
        "Ana 🏳\ufe0f\u200d🌈",  # the emoji presentation selector before it
        # Fatemeh-Zahra: Persian writes U+200C between the letters of a name.
        "\u0641\u0627\u0637\u0645\u0647\u200c\u0632\u0647\u0631\u0627",
    ],
)
def test_joiners_that_names_are_written_with_are_kept(api: Api, name: str) -> None:
    response = put_name(api, name)
    assert response.status_code == 200, response.text
    assert response.json()["name"] == name


def test_a_turn_s_name_loses_its_format_characters_and_keeps_the_rest(api: Api) -> None:
    response = api.post_turn("hola", name="Eva \u202e0987654321\u200b")
    assert response.status_code == 201, response.text
    assert get_name(api).json()["name"] == "Eva 0987654321"
    assert rows(api)[0] == (AGENT, PHONE, "Eva 0987654321")
    family = "Ana 👨\u200d👩\u200d👧"
    assert api.post_turn("hola", name="\ufeff" + family).status_code == 201
    assert get_name(api).json()["name"] == family


@pytest.mark.parametrize("field", ["session_id", "task_id", "graph_id"])
def test_a_memory_scope_id_with_a_format_character_is_a_422_naming_it(api: Api, field: str) -> None:
    body = {"content": "Likes tea", "phone": PHONE, field: "wa-\u202e2026"}
    response = api.client.post(f"/v1/agents/{AGENT}/memories", json=body, headers=admin())
    assert_error(response, 422)
    message = response.json()["error"]["message"]
    assert field in message and "U+202E" in message, message
    assert query(api.services.settings, "SELECT COUNT(*) FROM memories")[0][0] == 0


def test_the_context_and_the_export_show_the_name(api: Api) -> None:
    api.post_turn("hola")
    assert api.context().json()["name"] is None
    assert api.client.get(person() + "/export", headers=admin()).json()["name"] is None
    named = put_name(api, "Carmen").json()
    assert api.context().json()["name"] == "Carmen"
    exported = api.client.get(person() + "/export", headers=admin()).json()
    assert exported["name"] == named


def test_the_set_name_is_left_out_of_the_excerpts_search(
    api_factory: Callable[..., Api],
) -> None:
    """The agent greets her by name once (too few times for the name to be learned): the
    greeting is the best keyword hit for a question that names her, until her name is set."""
    api = api_factory(turn_window=0)
    lines = [f"hablamos del tiempo el día {i} y estuvo bien" for i in range(45)]
    lines[1] = "Hola Carmen"
    lines[10] = "a mí el marisco me da alergia, ojo con la paella"
    chat(api, lines)
    api.index()

    def best() -> str:
        got = api.context(
            query="¿Qué alergia tiene Carmen?", excerpt_mode="keyword", excerpt_k=1
        ).json()
        return next(e["content"] for e in got["excerpts"] if e["hit"])

    assert best() == lines[1]
    put_name(api, "Carmen Ruiz")
    assert best() == lines[10]


def test_staff_search_finds_a_person_by_the_name_set_for_them(api: Api) -> None:
    """No turn of hers says her name: the name set for her tells staff search who she is, and
    her turns come first, ranked by the rest of the question."""
    carmen = "+34600111222"
    chat(
        api,
        [f"charla sobre el tiempo, día {i}" for i in range(44)] + ["me da alergia el marisco"],
        phone=carmen,
    )
    chat(
        api,
        [f"otra charla {i}" for i in range(44)] + ["mi hija tiene alergia al polen"],
        phone=OTHER,
    )
    api.index()
    body = {"query": "¿Qué alergia tiene Carmen?", "kinds": ["turns"], "mode": "keyword"}

    def first() -> Any:
        response = api.client.post("/v1/search", json=body, headers=admin())
        assert response.status_code == 200, response.text
        return response.json()["items"][0]

    assert first()["phone"] == OTHER  # no one is named Carmen: the other turn says more
    put_name(api, "Carmen Ruiz", phone=carmen)
    assert (first()["phone"], first()["text"]) == (carmen, "me da alergia el marisco")
    # Named the same, the other one: the rest of the question decides.
    put_name(api, "Carmen", phone=OTHER)
    body["query"] = "¿Qué alergia tiene la hija de Carmen?"
    assert first()["phone"] == OTHER


def test_a_name_many_people_share_finds_the_one_the_question_is_about(api: Api) -> None:
    """More people share the name than are weighed one by one: one search among them all
    finds the María whose turn answers, and hers come before a turn of someone else that
    says more about dogs."""
    phones = [f"+1555000{i:04d}" for i in range(8)]
    for i, phone in enumerate(phones):
        said = "tengo un perro que se llama Toby" if i == 6 else f"me gusta el color número {i}"
        api.post_turn(said, phone=phone)
        put_name(api, f"María {i}", phone=phone)
    api.post_turn("perro: mi perro se llama Rex, perro", phone=OTHER)
    api.index()

    def first() -> Any:
        body = {"query": "¿Cómo se llama el perro de María?", "mode": "keyword"}
        response = api.client.post("/v1/search", json=body, headers=admin())
        assert response.status_code == 200, response.text
        return response.json()["items"][0]["phone"]

    assert first() == phones[6]
    for phone in phones:
        assert api.client.delete(person(phone) + "/name", headers=admin()).status_code == 204
    assert first() == OTHER  # no one named: the turn that says most comes first


def test_staff_search_never_names_a_person_of_an_agent_the_key_cannot_read(api: Api) -> None:
    api.post_turn("me da alergia el marisco", agent="hidden", phone=OTHER)
    put_name(api, "Carmen", phone=OTHER, agent="hidden")
    api.post_turn("me da alergia el polen")
    api.index()
    staff = api.key("staff", [AGENT])
    body = {"query": "¿Qué alergia tiene Carmen?", "mode": "keyword"}
    response = api.client.post("/v1/search", json=body, headers=staff)
    assert response.status_code == 200, response.text
    assert {i["agent"] for i in response.json()["items"]} == {AGENT}


def test_a_forget_erases_the_name(api: Api) -> None:
    api.post_turn("hola")
    put_name(api, "Carmen")
    put_name(api, "Luis", phone=OTHER)  # a number with only a name
    assert api.client.delete(person(), headers=admin()).status_code == 200
    assert api.client.delete(person(OTHER), headers=admin()).status_code == 200
    assert rows(api) == []


def test_a_move_carries_the_name_and_a_merge_keeps_the_newer(api: Api, clock: FakeClock) -> None:
    put_name(api, "Carmen")  # a name alone is something to move
    moved = api.client.post(person() + "/move", json={"to": OTHER}, headers=admin())
    assert moved.status_code == 200, moved.text
    assert moved.json()["moved"]["names"] == 1
    assert rows(api) == [(AGENT, OTHER, "Carmen"), ("carmen", AGENT, OTHER)]
    # Back, onto a number whose name was set later: that one stays.
    api.post_turn("hola")
    clock.advance(minutes=1)
    put_name(api, "Carmen Ruiz")
    moved = api.client.post(person(OTHER) + "/move", json={"to": PHONE}, headers=admin())
    assert moved.json()["moved"]["names"] == 0 and moved.json()["merged"] is True
    assert rows(api) == [
        (AGENT, PHONE, "Carmen Ruiz"),
        ("carmen", AGENT, PHONE),
        ("ruiz", AGENT, PHONE),
    ]


def test_retention_sweeps_a_name_nothing_else_was_stored_with(api: Api, clock: FakeClock) -> None:
    put_name(api, "Luis", phone=OTHER)
    api.post_turn("hola")
    clock.advance(days=40)
    api.post_turn("sigo aquí")
    put_name(api, "Carmen")
    settings = api.client.put(
        f"/v1/agents/{AGENT}/settings", json={"retention_days": 30}, headers=admin()
    )
    assert settings.status_code == 200, settings.text
    retention: Retention = api.client.app.state.retention  # type: ignore[attr-defined]
    assert retention.sweep().people == 1
    assert rows(api) == [(AGENT, PHONE, "Carmen"), ("carmen", AGENT, PHONE)]


def test_a_move_onto_a_number_with_an_older_name_brings_the_newer(
    api: Api, clock: FakeClock
) -> None:
    put_name(api, "Luis", phone=OTHER)
    clock.advance(minutes=1)
    put_name(api, "Luis Gómez")
    moved = api.client.post(person() + "/move", json={"to": OTHER}, headers=admin())
    assert moved.status_code == 200, moved.text
    assert moved.json()["moved"]["names"] == 1 and moved.json()["merged"] is False
    assert rows(api) == [
        (AGENT, OTHER, "Luis Gómez"),
        ("gomez", AGENT, OTHER),
        ("luis", AGENT, OTHER),
    ]
    assert_error(get_name(api), 404, "name_not_set")
