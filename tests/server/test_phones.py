"""Phone numbers as people write them (phonenumbers, stored in E.164), WhatsApp's Mexican
'+521' folded into '+52', stored numbers folded once at start-up, and a person who changes
number: everything moves, merged with what the new number holds."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from server.app import create_app
from server.cli import main
from tests.backends import execute, query, set_data_env
from tests.conftest import AGENT, PHONE, Api, FakeClock, admin, assert_error, make_settings
from tests.fakes import fake_factory
from tests.server.test_erasure import lance_texts

SPAIN = "+34600111222"
MEXICO = "+525512345678"  # as everywhere but WhatsApp
WHATSAPP_MEXICO = "+5215512345678"  # as WhatsApp reports the same mobile
NEW = "+15557654321"


def person(agent: str, phone: str) -> str:
    return f"/v1/agents/{agent}/people/{quote(phone, safe='')}"


def contents(api: Api, phone: str, agent: str = AGENT) -> list[str]:
    response = api.client.get(person(agent, phone) + "/messages", headers=admin())
    assert response.status_code == 200, response.text
    return [m["content"] for m in reversed(response.json()["items"])]


@pytest.mark.parametrize(
    "written",
    ["+34 600 11 12 22", "(+34) 600-11-12-22", "+34.600.111.222", "0034 600 111 222", SPAIN],
)
def test_the_usual_ways_of_writing_a_number_are_one_person(api: Api, written: str) -> None:
    response = api.client.post(
        person(AGENT, written) + "/messages",
        json={"role": "user", "content": "hola", "number": "+1 (555) 000-9999"},
        headers=admin(),
    )
    assert response.status_code == 201, response.text
    stored = query(api.services.settings, "SELECT phone, number FROM messages")
    assert [(r[0], r[1]) for r in stored] == [(SPAIN, "+15550009999")]
    assert contents(api, SPAIN) == ["hola"]


@pytest.mark.parametrize(
    ("phone", "code"),
    [
        ("+99912345678", "invalid_phone"),  # no such country code
        ("+34 600", "invalid_phone"),  # too short for Spain
        ("+1555123000111122", "invalid_phone"),  # too long
        ("34600111222", "invalid_phone"),  # no country: '+' or 00 first
        ("+34 600 11 12 22 ext 5", "invalid_phone"),
        ("+３４６００１１１２２２", "invalid_phone"),  # noqa: RUF001 (digits of another script)
    ],
)
def test_numbers_that_cannot_exist_are_refused(api: Api, phone: str, code: str) -> None:
    response = api.client.post(
        person(AGENT, phone) + "/messages", json={"role": "user", "content": "x"}, headers=admin()
    )
    assert_error(response, 422, code)
    body = {"role": "user", "content": "x", "number": "+99912345678"}
    assert_error(api.post_turn("x", **{k: v for k, v in body.items() if k == "number"}), 422)
    assert query(api.services.settings, "SELECT COUNT(*) FROM messages")[0][0] == 0


def test_whatsapps_mexican_mobile_is_the_same_person(api: Api) -> None:
    api.post_turn("desde WhatsApp", phone=WHATSAPP_MEXICO)
    api.post_turn("desde la web", phone="+52 55 1234 5678")
    assert contents(api, MEXICO) == ["desde WhatsApp", "desde la web"]
    assert contents(api, WHATSAPP_MEXICO) == ["desde WhatsApp", "desde la web"]
    phones = query(api.services.settings, "SELECT DISTINCT phone FROM messages")
    assert [r[0] for r in phones] == [MEXICO]


def test_filters_read_the_number_as_written_too(api: Api) -> None:
    api.post_turn("my jacket refund", phone=SPAIN)
    api.index()
    staff = api.key("staff")
    found = api.client.post(
        "/v1/search", json={"query": "jacket", "phone": "+34 600-111-222"}, headers=staff
    )
    assert found.status_code == 200 and [i["phone"] for i in found.json()["items"]] == [SPAIN]
    api.client.post(
        f"/v1/agents/{AGENT}/memories",
        json={"content": "Prefers tea", "phone": "(+34) 600 111 222"},
        headers=admin(),
    )
    listed = api.client.get(
        f"/v1/agents/{AGENT}/memories", params={"phone": "+34 600 111 222"}, headers=admin()
    ).json()
    assert [(m["phone"], m["content"]) for m in listed["items"]] == [(SPAIN, "Prefers tea")]


def test_the_cli_reads_numbers_as_the_api_does(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api.post_turn("borrame", phone=SPAIN)
    set_data_env(monkeypatch, api.services.settings.data_dir)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    argv = ["forget", "--agent", AGENT, "--phone", "+34 600 11 12 22", "--json"]
    assert main(argv, encoder_factory=fake_factory) == 0
    assert json.loads(capsys.readouterr().out)["deleted"]["messages"] == 1
    assert contents(api, SPAIN) == []
    assert main(["forget", "--agent", AGENT, "--phone", "34600111222"]) == 2  # no country
    # A number an earlier release stored, which the API refuses now, can still be forgotten.
    execute(
        api.services.settings,
        "INSERT INTO messages (agent, phone, role, content, created_at, stored_at, archived)"
        " VALUES (?, '+99912345678', 'user', 'from an older release', ?, ?, 0)",
        AGENT,
        "2030-01-01T00:00:00.000Z",
        "2030-01-01T00:00:00.000Z",
    )
    assert main([*argv[:4], "+99912345678", "--json"], encoder_factory=fake_factory) == 0
    assert json.loads(capsys.readouterr().out)["deleted"]["messages"] == 1


# -- a person who changes number ------------------------------------------------------------


def test_a_move_takes_everything_and_leaves_nothing_behind(api: Api) -> None:
    for i in range(4):
        api.post_turn(f"old number turn {i}", role="user" if i % 2 == 0 else "assistant")
    api.client.put(f"/v1/agents/{AGENT}/settings", json={"compact_keep": 2}, headers=admin())
    api.client.post(person(AGENT, PHONE) + "/compact", headers=admin())  # two archived
    made = api.client.post(
        f"/v1/agents/{AGENT}/memories",
        json={"content": "Lives in Madrid", "phone": PHONE},
        headers=admin(),
    ).json()
    api.client.patch(
        f"/v1/agents/{AGENT}/memories/{made['id']}",
        json={"content": "Lives in Madrid, Spain"},
        headers=admin(),
    )
    api.client.post(person(AGENT, PHONE) + "/opt-out", headers=admin())
    api.post_turn("another agent's person", agent="other-agent", phone=SPAIN)
    api.index()

    moved = api.client.post(
        person(AGENT, PHONE) + "/move", json={"to": "+1 (555) 765-4321"}, headers=admin()
    )
    assert moved.status_code == 200, moved.text
    assert moved.json() == {
        "from": PHONE,
        "to": NEW,
        "moved": {"messages": 4, "memories": 1, "summaries": 0, "opt_outs": 1, "names": 0},
        "merged": False,
    }
    assert contents(api, NEW) == [f"old number turn {i}" for i in range(4)]
    export = api.client.get(person(AGENT, NEW) + "/export", headers=admin()).json()
    assert [m["content"] for m in export["memories"]] == ["Lives in Madrid, Spain"]
    assert [h["action"] for h in export["memories"][0]["history"]] == ["create", "update"]
    assert export["opted_out_at"]
    assert sum(m["archived"] for m in export["messages"]) == 2
    old = api.client.get(person(AGENT, PHONE) + "/export", headers=admin()).json()
    assert old["messages"] == [] and old["memories"] == [] and old["summary"] is None
    assert api.client.get(person(AGENT, PHONE) + "/opt-out", headers=admin()).status_code == 404
    assert contents(api, SPAIN, agent="other-agent") == ["another agent's person"]

    # The vectors were rewritten before the answer: the old number is in none of them.
    lance = lance_texts(api.services.settings.data_dir / "lance")
    assert PHONE not in lance and NEW in lance
    staff = api.key("staff")
    found = api.client.post("/v1/search", json={"query": "old number turn"}, headers=staff)
    assert {i["phone"] for i in found.json()["items"] if i["agent"] == AGENT} == {NEW}
    context = api.context(phone=NEW, query="Madrid", threshold=-1).json()
    assert [f["content"] for f in context["facts"]] == ["Lives in Madrid, Spain"]

    audit = api.client.get("/v1/audit", headers=admin()).json()["items"]
    entry = next(a for a in audit if a["query"] == "[move]")
    assert entry["filters"]["from"] == PHONE and entry["filters"]["phone"] == NEW
    assert entry["key_id"] == "admin-bootstrap"  # the admin key of the settings


def test_a_move_onto_a_number_with_memory_merges_in_the_order_the_turns_arrived(
    api: Api,
) -> None:
    api.post_turn("first, on the old number", phone=PHONE)
    api.post_turn("second, already on the new one", phone=NEW)
    api.post_turn("third, on the old number", phone=PHONE)
    for phone in (PHONE, NEW):
        api.client.post(
            f"/v1/agents/{AGENT}/memories",
            json={"content": f"fact of {phone}", "phone": phone},
            headers=admin(),
        )
    api.client.post(person(AGENT, NEW) + "/opt-out", headers=admin())
    moved = api.client.post(person(AGENT, PHONE) + "/move", json={"to": NEW}, headers=admin())
    assert moved.status_code == 200 and moved.json()["merged"] is True
    assert contents(api, NEW) == [
        "first, on the old number",
        "second, already on the new one",
        "third, on the old number",
    ]
    listed = api.client.get(
        f"/v1/agents/{AGENT}/memories", params={"phone": NEW}, headers=admin()
    ).json()
    facts = sorted(m["content"] for m in listed["items"])
    assert facts == sorted([f"fact of {NEW}", f"fact of {PHONE}"])
    assert api.client.get(person(AGENT, NEW) + "/opt-out", headers=admin()).status_code == 200


def test_two_summaries_become_one_the_older_first(
    api_factory: Callable[..., Api], clock: FakeClock
) -> None:
    from tests.fake_llm import FakeLLM

    with FakeLLM() as llm:
        api = api_factory(llm_base_url=llm.base_url, llm_retries=0)
        api.client.put(f"/v1/agents/{AGENT}/settings", json={"compact_keep": 0}, headers=admin())
        for phone, said in ((NEW, "Summary of the new number."), (PHONE, "Summary of the old.")):
            llm.summary = said
            api.post_turn("hello from this number", phone=phone)
            assert api.client.post(person(AGENT, phone) + "/compact", headers=admin()).is_success
            clock.advance(minutes=5)
    moved = api.client.post(person(AGENT, PHONE) + "/move", json={"to": NEW}, headers=admin())
    assert moved.json()["moved"]["summaries"] == 1
    export = api.client.get(person(AGENT, NEW) + "/export", headers=admin()).json()
    assert export["summary"]["text"] == "Summary of the new number.\n\nSummary of the old."
    api.index()
    lance = lance_texts(api.services.settings.data_dir / "lance")
    assert "Summary of the old." in lance and PHONE not in lance


def test_bad_moves_are_refused_and_change_nothing(api: Api) -> None:
    api.post_turn("hello")
    url = person(AGENT, PHONE) + "/move"
    assert_error(api.client.post(url, json={"to": PHONE}, headers=admin()), 422, "same_phone")
    assert_error(
        api.client.post(url, json={"to": "+1 (555) 123-0001"}, headers=admin()), 422, "same_phone"
    )
    assert_error(api.client.post(url, json={"to": "+99912345678"}, headers=admin()), 422)
    assert_error(api.client.post(url, json={"to": 15557654321}, headers=admin()), 422)
    assert_error(api.client.post(url, json={}, headers=admin()), 422, "missing_field")
    assert_error(api.client.post(url, json={"to": NEW, "x": 1}, headers=admin()), 422)
    nobody = person(AGENT, "+15550001111") + "/move"
    assert_error(
        api.client.post(nobody, json={"to": NEW}, headers=admin()), 404, "person_not_found"
    )
    other_agent = api.key("agent:other-agent")
    assert_error(api.client.post(url, json={"to": NEW}, headers=other_agent), 403)
    assert_error(api.client.post(url, json={"to": NEW}, headers=api.key("staff")), 403)
    assert contents(api, PHONE) == ["hello"] and contents(api, NEW) == []
    # The person's own agent key may move them.
    mine = api.key(f"agent:{AGENT}")
    assert api.client.post(url, json={"to": NEW}, headers=mine).status_code == 200


def test_forgetting_the_moved_person_clears_the_move_from_the_audit_log(api: Api) -> None:
    api.post_turn("hello")
    api.client.post(person(AGENT, PHONE) + "/move", json={"to": NEW}, headers=admin())
    api.client.delete(person(AGENT, NEW), headers=admin())
    audit = json.dumps(api.client.get("/v1/audit", headers=admin()).json())
    assert PHONE not in audit and NEW not in audit


# -- stored numbers, read again once --------------------------------------------------------


def test_stored_whatsapp_mexican_numbers_are_folded_once_at_start_up(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data")
    with TestClient(create_app(settings, encoder_factory=fake_factory, run_workers=False)) as c:
        c.post(
            person(AGENT, MEXICO) + "/messages",
            json={"role": "user", "content": "on the folded number, first"},
            headers=admin(),
        )
    # Rows an older release stored under WhatsApp's form, which the API now folds: written
    # behind its back, as that release left them.
    execute(
        settings,
        "INSERT INTO messages (agent, phone, role, content, created_at, stored_at, archived)"
        " VALUES (?, ?, 'user', 'under the +521 form', ?, ?, 0)",
        AGENT,
        WHATSAPP_MEXICO,
        "2030-01-01T00:00:00.000Z",
        "2030-01-01T00:00:00.000Z",
    )
    for agent in (AGENT, "other-agent"):
        execute(
            settings,
            "INSERT INTO opt_outs (agent, phone, opted_out_at) VALUES (?, ?, ?)",
            agent,
            WHATSAPP_MEXICO,
            "2030-01-01T00:00:00.000Z",
        )
    execute(settings, "DELETE FROM meta WHERE key = 'phones_folded'")
    with TestClient(create_app(settings, encoder_factory=fake_factory, run_workers=False)) as c:
        api = Api(c)
        assert contents(api, MEXICO) == ["on the folded number, first", "under the +521 form"]
        assert c.get(person("other-agent", MEXICO) + "/opt-out", headers=admin()).is_success
        phones = "SELECT phone FROM messages UNION SELECT phone FROM opt_outs"
        assert sorted(r[0] for r in query(settings, phones)) == [MEXICO]
        audit = c.get("/v1/audit", headers=admin()).json()["items"]
        moves = [a for a in audit if a["query"] == "[move]"]
        assert len(moves) == 2 and {a["key_id"] for a in moves} == {"migration:phones"}
        # Once: rows written under the old form later stay as they are.
        execute(
            settings,
            "INSERT INTO opt_outs (agent, phone, opted_out_at) VALUES (?, ?, ?)",
            "third-agent",
            WHATSAPP_MEXICO,
            "2030-01-01T00:00:00.000Z",
        )
        assert api.services.memory.fold_phone_numbers() == (0, 0)


def test_a_move_waits_for_a_forget_or_a_compaction_under_way(api: Api) -> None:
    """A forget journaled for either number (under way in another request or replica), or a
    compaction claimed for either: 409 person_busy, nothing moved. Moving then would let rows
    escape the forget, or let the compaction overwrite the merged summary."""
    api.post_turn("hello")
    url = person(AGENT, PHONE) + "/move"
    settings = api.services.settings
    for table, row in (
        ("erasures (agent, phone, requested_at)", (AGENT, NEW, "2030-01-01T00:00:00.000Z")),
        ("compaction_claims (agent, phone, holder, until)", (AGENT, PHONE, "other", "2999-01-01")),
    ):
        marks = ", ".join("?" * len(row))
        execute(settings, f"INSERT INTO {table} VALUES ({marks})", *row)
        assert_error(api.client.post(url, json={"to": NEW}, headers=admin()), 409, "person_busy")
        assert contents(api, PHONE) == ["hello"] and contents(api, NEW) == []
        execute(settings, f"DELETE FROM {table.split()[0]}")
    expired = (AGENT, PHONE, "dead-process", "2000-01-01T00:00:00.000Z")
    execute(settings, "INSERT INTO compaction_claims VALUES (?, ?, ?, ?)", *expired)
    assert api.client.post(url, json={"to": NEW}, headers=admin()).status_code == 200


def test_a_turn_written_from_the_new_number_after_the_opt_out_lifts_it(
    api: Api, clock: FakeClock
) -> None:
    api.post_turn("hola", phone=PHONE)
    api.client.post(person(AGENT, PHONE) + "/opt-out", headers=admin())
    clock.advance(minutes=10)
    api.post_turn("ya tengo número nuevo", phone=NEW)  # the person writes again
    api.client.post(person(AGENT, PHONE) + "/move", json={"to": NEW}, headers=admin())
    assert api.client.get(person(AGENT, NEW) + "/opt-out", headers=admin()).status_code == 404


def test_forgetting_after_a_move_clears_searches_made_under_the_old_number(api: Api) -> None:
    api.post_turn("mi perro Toby es alérgico al pollo")
    api.index()
    staff = api.key("staff")
    asked = {"query": "perro Toby alérgico", "mode": "keyword"}
    assert api.client.post("/v1/search", json=asked, headers=staff).json()["items"]
    api.client.post(person(AGENT, PHONE) + "/move", json={"to": NEW}, headers=admin())
    api.client.post(person(AGENT, NEW) + "/move", json={"to": SPAIN}, headers=admin())
    api.client.delete(person(AGENT, SPAIN), headers=admin())
    audit = json.dumps(api.client.get("/v1/audit", headers=admin()).json(), ensure_ascii=False)
    for gone in (PHONE, NEW, SPAIN, "perro Toby"):
        assert gone not in audit, gone


def test_metadata_is_redacted_on_edit_too(api: Api) -> None:
    made = api.client.post(
        f"/v1/agents/{AGENT}/memories", json={"content": "x", "phone": PHONE}, headers=admin()
    ).json()
    edited = api.client.patch(
        f"/v1/agents/{AGENT}/memories/{made['id']}",
        json={"metadata": {"notes": ["pin 4821", {"iban": "ES9121000418450200051332"}]}},
        headers=admin(),
    )
    assert edited.json()["metadata"] == {"notes": ["pin [código]", {"iban": "[IBAN ES91••••1332]"}]}
