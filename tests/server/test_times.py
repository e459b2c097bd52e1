"""Times: a turn's created_at falls in the years 1900-2200 (else 422), every time is written
with a four-digit year, so stored times sort as text in time order, and turns stored before
this rule with fewer year digits are padded by a migration."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from server.clock import format_time
from server.store import MIGRATIONS, Store
from tests.backends import execute, query
from tests.conftest import AGENT, PHONE, Api, admin, assert_error, make_settings


def test_format_time_always_writes_four_year_digits() -> None:
    assert format_time(datetime(999, 6, 1, tzinfo=UTC)) == "0999-06-01T00:00:00.000Z"
    assert format_time(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00.000Z"
    assert format_time(datetime(2026, 3, 1, 9, 14, tzinfo=UTC)) == "2026-03-01T09:14:00.000Z"


@pytest.mark.parametrize(
    "created_at",
    ["0999-06-01T00:00:00Z", "1899-12-31T23:59:59Z", "2201-01-01T00:00:00Z", "0001-01-01"],
)
def test_a_turn_dated_outside_1900_2200_is_422_and_stores_nothing(
    api: Api, created_at: str
) -> None:
    assert_error(api.post_turn("hola", created_at=created_at), 422, "invalid_date")
    assert api.client.get(
        f"/v1/agents/{AGENT}/people/{PHONE}/messages", headers=admin()
    ).json()["items"] == []


@pytest.mark.parametrize(
    ("created_at", "stored"),
    [
        ("1900-01-01T00:00:00Z", "1900-01-01T00:00:00.000Z"),
        ("2200-12-31T23:59:59.999+00:00", "2200-12-31T23:59:59.999Z"),
        ("1969-07-20T21:17:00-05:00", "1969-07-21T02:17:00.000Z"),
    ],
)
def test_a_turn_dated_at_the_edges_is_stored_in_the_one_format(
    api: Api, created_at: str, stored: str
) -> None:
    assert api.post_turn("hola", created_at=created_at).status_code == 201
    items = api.client.get(
        f"/v1/agents/{AGENT}/people/{PHONE}/messages", headers=admin()
    ).json()["items"]
    assert [m["created_at"] for m in items] == [stored]
    assert api.context().status_code == 200


def test_filters_take_any_year_normalised_to_four_digits(api: Api) -> None:
    assert api.post_turn("the red kayak").status_code == 201
    api.index()
    answer = api.client.post(
        "/v1/search",
        json={"query": "kayak", "since": "0500-01-01T00:00:00Z", "mode": "keyword"},
        headers=admin(),
    )
    assert answer.status_code == 200, answer.text


def test_turns_stored_with_a_three_digit_year_are_padded_and_count_as_old(
    tmp_path: Path,
) -> None:
    """A database of version 6 holding '999-06-01T...' (the context answered 500 on it, and
    retention read it as newer than any cutoff): version 7 pads it."""
    settings = make_settings(tmp_path)
    Store.open(settings).close()
    execute(settings, "DROP TABLE erasures")
    execute(settings, "DELETE FROM schema_migrations WHERE version = 7")
    for n, day in enumerate(["999-06-01T10:00:00.000Z", "999-06-02T10:00:00.000Z"]):
        execute(
            settings,
            "INSERT INTO messages (agent, phone, role, content, created_at, stored_at)"
            " VALUES (?, ?, 'user', ?, ?, '2026-01-01T00:00:00.000Z')",
            AGENT,
            PHONE,
            f"turn {n}",
            day,
        )
    store = Store.open(settings)
    try:
        assert store.schema_version() == len(MIGRATIONS)
        assert store.latest_times(AGENT, PHONE) == [
            "0999-06-02T10:00:00.000Z",
            "0999-06-01T10:00:00.000Z",
        ]
        assert store.quiet_people(AGENT, "2026-01-01T00:00:00.000Z") == [PHONE]
    finally:
        store.close()
    rows = query(settings, "SELECT created_at FROM messages ORDER BY id")
    assert [r[0] for r in rows] == ["0999-06-01T10:00:00.000Z", "0999-06-02T10:00:00.000Z"]
