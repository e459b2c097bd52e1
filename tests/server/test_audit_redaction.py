"""What a forget removes from the audit log, and what a staff search's entry keeps: a number is
the same number however it is written, a different number is never it (no substring), and
a query is blanked only for someone forgotten while it ran, never for a number of no one."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest

from server.hooks import Hooks
from server.store.audit import numbers_named
from server.validation import stored_phone_number
from tests.conftest import AGENT, PHONE, Api, admin
from tests.server.test_memories import db

BERLIN, BERLIN_LONGER = "+4930123456", "+49301234567"  # both valid German numbers
NOBODY = "+15550000000"


@pytest.fixture
def hooks() -> Hooks:
    return Hooks()


def forget(api: Api, phone: str) -> None:
    response = api.client.delete(f"/v1/agents/{AGENT}/people/{phone}", headers=admin())
    assert response.status_code == 200, response.text


def search(api: Api, query: str, **filters: str) -> list[dict[str, object]]:
    body = {"query": query, "mode": "keyword", **filters}
    response = api.client.post("/v1/search", json=body, headers=admin())
    assert response.status_code == 200, response.text
    items: list[dict[str, object]] = response.json()["items"]
    return items


def audit(api: Api) -> list[dict[str, object]]:
    """The entries, newest first."""
    items: list[dict[str, object]] = api.client.get("/v1/audit", headers=admin()).json()["items"]
    return items


def test_a_query_naming_a_number_of_no_one_keeps_its_text(api: Api) -> None:
    for i in range(25):
        assert api.post_turn(f"mi perro Bizcocho come pienso {i}").status_code == 201
    api.index()
    query = f"perro Bizcocho {NOBODY}"

    assert len(search(api, query)) == 20

    entry = audit(api)[0]
    assert entry["query"] == query and entry["result_count"] == 1


def test_a_filter_by_a_number_of_no_one_keeps_query_and_filter(api: Api) -> None:
    api.post_turn("mi perro Bizcocho")
    api.index()

    search(api, "perro", phone=NOBODY)

    entry = audit(api)[0]
    assert entry["query"] == "perro" and entry["filters"]["phone"] == NOBODY  # type: ignore[index]


@pytest.mark.parametrize(("forgotten", "named"), [(BERLIN, BERLIN_LONGER), (BERLIN_LONGER, BERLIN)])
def test_forgetting_a_number_leaves_the_query_that_named_a_longer_or_shorter_one(
    api: Api, forgotten: str, named: str
) -> None:
    api.post_turn("Ich heiße Anna", phone=forgotten)
    api.post_turn("Ich heiße Jonas", phone=named)
    api.index()
    query = f"was sagte {named} über den Umzug"
    search(api, query)

    forget(api, forgotten)

    assert audit(api)[0]["query"] == query
    assert re.search(rf"{re.escape(forgotten)}(?![0-9])", json.dumps(audit(api))) is None


@pytest.mark.parametrize(
    "written",
    [
        "+1 555 123 0001",
        "(+1) 555-123-0001",
        "+1.555.123.0001",
        "001 555 1230001",
        "+1 555 123 0001 2024",  # a year after it: still the number, written with spaces
    ],
)
def test_a_number_written_with_separators_is_redacted_by_its_forget(api: Api, written: str) -> None:
    api.post_turn("my word is quokka")
    api.index()
    search(api, f"what did {written} say?")

    forget(api, PHONE)

    assert audit(api)[0]["query"] == "[forgotten]"


def test_a_mexican_mobile_written_with_its_old_1_is_redacted(api: Api) -> None:
    mexico = "+525512345678"
    api.post_turn("hola", phone=mexico)
    api.index()
    search(api, "¿qué dijo +52 1 55 1234 5678?")

    forget(api, mexico)

    assert audit(api)[0]["query"] == "[forgotten]"


def test_a_forget_keeps_no_number_to_tell_searches_about(api: Api) -> None:
    api.post_turn("my word is quokka")
    api.index()

    forget(api, PHONE)

    meta = json.dumps([list(row) for row in db(api, "SELECT key, value FROM meta")])
    assert PHONE[1:] not in meta and "5551230001" not in meta


# -- a forget while a search runs ----------------------------------------------------------------


def test_a_forget_of_someone_else_during_a_search_keeps_the_query_naming_no_one(
    api_factory: Callable[..., Api], hooks: Hooks
) -> None:
    api = api_factory(hooks=hooks)
    api.post_turn("mi perro Bizcocho")
    api.post_turn("Ich heiße Anna", phone=BERLIN)
    api.index()
    hooks.once("staff.searched", lambda: forget(api, BERLIN))
    query = f"perro Bizcocho {NOBODY}"

    assert [item["phone"] for item in search(api, query)] == [PHONE]

    entry = audit(api)[0]
    assert entry["query"] == query and entry["results"] == [[AGENT, PHONE]]


def test_a_forget_of_a_longer_number_during_a_search_keeps_the_query(
    api_factory: Callable[..., Api], hooks: Hooks
) -> None:
    api = api_factory(hooks=hooks)
    api.post_turn("Ich heiße Anna", phone=BERLIN)
    api.post_turn("Ich heiße Jonas", phone=BERLIN_LONGER)
    api.index()
    hooks.once("staff.searched", lambda: forget(api, BERLIN_LONGER))
    query = f"was sagte {BERLIN} heute"

    search(api, query)

    assert audit(api)[0]["query"] == query


def test_a_forget_during_a_search_naming_them_with_spaces_blanks_the_query(
    api_factory: Callable[..., Api], hooks: Hooks
) -> None:
    api = api_factory(hooks=hooks)
    api.post_turn("my word is quokka")
    api.index()
    hooks.once("staff.searched", lambda: forget(api, PHONE))

    search(api, "nothing matches (+1) 555-123-0001")

    entry = audit(api)[0]
    assert entry["query"] == "[forgotten]" and PHONE not in json.dumps(entry)


def test_a_search_after_the_forget_is_kept_as_asked(api: Api) -> None:
    """Nothing says the number was ever stored (no forgotten number is kept, not even hashed):
    a search typed after the forget is a search for a number of no one."""
    api.post_turn("my word is quokka")
    api.index()
    forget(api, PHONE)
    query = f"what did {PHONE} say"

    search(api, query)

    assert audit(api)[0]["query"] == query


@pytest.mark.no_database
@pytest.mark.parametrize(
    "written",
    [
        "+34 600 11 12 22",
        "(+34) 600-11-12-22",
        "0034600111222",
        "+52 1 55 1234 5678",
        "+49 (0)30 123456",
        "+39 06 1234 5678",
        "+44 20 7946 0958",
        "+99912345678",
    ],
)
def test_the_audit_reads_a_number_as_the_api_stores_it(written: str) -> None:
    """The store cannot import validation.py (which imports the store): its reading of a
    number must not drift from the one the API stores under."""
    assert numbers_named(f"was {written}?") >= {stored_phone_number(written)}
