"""Replicas writing one person at once: a forget, a retention sweep's forget and an opt-out
each decide and delete in one view that the other replica's writes of that person cannot slip
into. Two apps on one database stand for two replicas. On PostgreSQL an outside session holds
a row of the person, so a forget stops half-way (as a slow disk or a busy table would make it)
while the other replica stores a turn: that turn must end up erased with the person, or kept
and indexed, never kept and unindexed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from server.app import create_app
from server.config import Settings
from tests.backends import query
from tests.conftest import AGENT, PHONE, Api, FakeClock, admin, make_settings
from tests.fakes import fake_factory


@contextmanager
def replicas(settings: Settings, *clocks: FakeClock) -> Iterator[list[Api]]:
    """Apps on one database and one vector folder, each with its own clock; their background
    workers do not run (the tests drain the outbox by hand)."""
    apps = [
        create_app(settings, clock=clock, encoder_factory=fake_factory, run_workers=False)
        for clock in clocks
    ]
    clients = [TestClient(app) for app in apps]
    for client in clients:
        client.__enter__()
    try:
        yield [Api(client) for client in clients]
    finally:
        for client in reversed(clients):
            client.__exit__(None, None, None)


def opted_out(api: Api) -> str | None:
    answer = api.client.get(f"/v1/agents/{AGENT}/people/{PHONE}/opt-out", headers=admin())
    return None if answer.status_code == 404 else str(answer.json()["opted_out_at"])


def opt_out(api: Api) -> None:
    answer = api.client.post(f"/v1/agents/{AGENT}/people/{PHONE}/opt-out", headers=admin())
    assert answer.status_code == 200, answer.text


def test_a_user_turn_committed_after_an_opt_out_lifts_it_whatever_the_clocks_say(
    tmp_path: Path,
) -> None:
    """The opt-out goes through a replica whose clock is five minutes ahead, the person's next
    turn through one on time: the turn came later, so the opt-out is lifted (it was compared
    by the replicas' clocks, and stayed)."""
    ahead = FakeClock()
    on_time = FakeClock(ahead.now - timedelta(minutes=5))
    with replicas(make_settings(tmp_path), ahead, on_time) as (a, b):
        opt_out(a)
        assert opted_out(b) is not None
        assert b.post_turn("hola de nuevo").status_code == 201
        assert opted_out(a) is None and opted_out(b) is None
        assert a.context().json()["opted_out_at"] is None


def test_an_opt_out_committed_after_a_user_turn_stays_whatever_the_clocks_say(
    tmp_path: Path,
) -> None:
    """The reverse: the turn through the replica ahead, then STOP through the one on time
    (whose time is earlier than the turn's): the opt-out came later and stays. The same at an
    equal millisecond."""
    ahead = FakeClock()
    on_time = FakeClock(ahead.now - timedelta(minutes=5))
    with replicas(make_settings(tmp_path), ahead, on_time) as (a, b):
        assert a.post_turn("una pregunta").status_code == 201
        opt_out(b)
        assert opted_out(a) is not None
        assert b.post_turn("ok", role="assistant").status_code == 201  # not the person's
        assert opted_out(a) is not None


def test_an_opt_out_and_a_turn_at_the_same_millisecond_resolve_by_commit_order(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    with replicas(make_settings(tmp_path), clock, clock) as (a, b):
        for n in range(5):
            opt_out(a)
            assert b.post_turn(f"turn {n}").status_code == 201
            assert opted_out(a) is None  # the turn came after: lifted
            assert a.post_turn(f"again {n}").status_code == 201
            opt_out(b)
            assert opted_out(a) == clock.now.strftime("%Y-%m-%dT%H:%M:%S.000Z")  # stays
            assert b.post_turn(f"back {n}").status_code == 201


def test_an_imported_turn_dated_before_the_opt_out_does_not_lift_it(tmp_path: Path) -> None:
    clock = FakeClock()
    with replicas(make_settings(tmp_path), clock) as (a,):
        opt_out(a)
        earlier = (clock.now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert a.post_turn("old turn, imported", created_at=earlier).status_code == 201
        assert opted_out(a) is not None
        later = (clock.now + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert a.post_turn("a new one", created_at=later).status_code == 201
        assert opted_out(a) is None


# -- a forget held half-way (PostgreSQL) -------------------------------------------------------


@contextmanager
def holding_a_row(settings: Settings, sql: str) -> Iterator[None]:
    """An outside session holding row locks (SELECT ... FOR UPDATE) until the block ends."""
    import psycopg

    assert settings.database_url
    with psycopg.connect(settings.database_url) as conn:
        locked = conn.execute(sql.replace("?", "%s"), (AGENT, PHONE)).fetchall()
        assert locked, "nothing to hold"
        yield
        conn.rollback()


def waiting_on_locks(settings: Settings) -> int:
    """Sessions of the database waiting for a lock."""
    rows = query(
        settings,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock'",
    )
    return int(rows[0][0])


def until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def in_thread(run: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(run()))
    thread.start()
    return thread, out


@pytest.mark.postgresql
@pytest.mark.parametrize(
    ("sweep", "held"),
    [
        # A forget stopped at its memories (its turns deleted already) ...
        (False, "SELECT 1 FROM memories WHERE agent = ? AND phone = ? FOR UPDATE"),
        # ... and a retention sweep's, stopped at the turns, after its 'still quiet?' check.
        (True, "SELECT 1 FROM messages WHERE agent = ? AND phone = ? FOR UPDATE"),
    ],
)
def test_a_turn_stored_through_another_replica_during_a_forget_is_erased_or_kept_and_indexed(
    tmp_path: Path, sweep: bool, held: str
) -> None:
    clock = FakeClock()
    settings = make_settings(tmp_path)
    with replicas(settings, clock, clock) as (a, b):
        for n in range(3):
            assert a.post_turn(f"old turn {n}").status_code == 201
        memory = {"phone": PHONE, "content": "Likes green tea"}
        created = a.client.post(f"/v1/agents/{AGENT}/memories", json=memory, headers=admin())
        assert created.status_code == 201
        a.index()
        clock.advance(days=40)

        def forget() -> Any:
            memory = b.services.memory
            if sweep:  # quiet since 30 days ago: the sweep's own check
                before = (clock.now - timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
                return memory.forget_quiet_person(AGENT, PHONE, before)
            return memory.forget_person(AGENT, PHONE)

        with holding_a_row(settings, held):
            forgetting, _ = in_thread(forget)
            until(lambda: waiting_on_locks(settings) >= 1, 10, "the forget never waited")
            storing, answers = in_thread(lambda: a.post_turn("a new turn", event_id="new"))
            # The turn is stored at once (the defect), or waits for the forget's person lock.
            until(
                lambda: bool(answers) or waiting_on_locks(settings) >= 2,
                10,
                "the turn neither stored nor waiting",
            )
        forgetting.join(timeout=30)
        storing.join(timeout=30)
        assert answers and answers[0].status_code == 201, answers
        a.index()
        turns = {int(r[0]) for r in query(settings, "SELECT id FROM messages")}
        queued = query(settings, "SELECT COUNT(*) FROM outbox")[0][0]
        index = a.services.indexer.space.index
        index.reopen()
        vectors = {i for i in index.all_ids() if i.startswith("turn:")}
        assert queued == 0
        assert vectors == {f"turn:{i}" for i in turns}, "a turn kept without its vector"
        assert len(turns) <= 1  # the old turns went with the person
        assert query(settings, "SELECT COUNT(*) FROM memories")[0][0] == 0
