"""Several processes on one database, as replicas are: what the database itself must settle
(on SQLite, two stores on one file; on PostgreSQL, two on one database)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from server.app import open_services
from server.store import Store
from tests.backends import query
from tests.conftest import AGENT, PHONE, make_settings
from tests.fakes import fake_factory


def test_the_same_event_sent_to_two_replicas_at_once_is_stored_once(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    replicas = [Store.open(settings), Store.open(settings)]
    start = threading.Barrier(8)
    answers: list[tuple[int, bool]] = []
    guard = threading.Lock()

    def send(n: int) -> None:
        store = replicas[n % 2]
        start.wait()
        for event in range(30):
            got = store.insert_message(
                agent="bot",
                phone="+15550002222",
                role="user",
                content=f"event {event}",
                event_id=f"wamid.{event}",
                number=None,
                created_at=None,
            )
            with guard:
                answers.append(got)

    threads = [threading.Thread(target=send, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert len(answers) == 8 * 30  # every call answered, none failed on the unique index
        stored = query(settings, "SELECT event_id, id FROM messages ORDER BY id")
        assert len(stored) == 30  # each event once
        ids = {row["event_id"]: row["id"] for row in stored}
        assert sum(1 for _, new in answers if new) == 30  # exactly one caller stored each
        assert {message_id for message_id, _ in answers} == set(ids.values())
        queued = query(settings, "SELECT COUNT(*) FROM outbox WHERE kind = 'turn'")[0][0]
        assert queued == 30  # and queued for the indexer once
    finally:
        for store in replicas:
            store.close()


def wait_until(check: Callable[[], bool], seconds: float, what: str) -> float:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < seconds, what
        time.sleep(0.05)
    return time.monotonic() - started


def test_one_replica_runs_the_indexer_and_a_standby_takes_over(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, indexer_interval_s=0.05)
    a = open_services(settings, encoder_factory=fake_factory)
    b = open_services(settings, encoder_factory=fake_factory)
    try:
        a.indexer.start()
        b.indexer.start()
        wait_until(
            lambda: {a.indexer.role, b.indexer.role} == {"active", "standby"},
            15,
            "one active indexer",
        )
        active, standby = (a, b) if a.indexer.role == "active" else (b, a)
        time.sleep(1.5)  # the standby keeps trying, and keeps standing by
        assert standby.indexer.role == "standby"
        for i in range(20):  # stored through the standby: indexed by the active one
            standby.memory.remember(AGENT, PHONE, role="user", content=f"through the standby {i}")
        # The indexer counts a batch just after it acks the outbox rows: wait for both.
        wait_until(
            lambda: standby.store.outbox_size() == 0 and active.indexer.stats.items_indexed >= 20,
            15,
            "indexed by the active one",
        )
        assert standby.indexer.stats.items_indexed == 0
        active.indexer.stop()  # (a crash does the same: the lease goes with the process)
        took = wait_until(lambda: standby.indexer.role == "active", 15, "the standby took over")
        assert took < 3
        standby.memory.remember(AGENT, PHONE, role="user", content="after the take-over")
        wait_until(
            lambda: standby.store.outbox_size() == 0 and standby.indexer.stats.items_indexed > 0,
            15,
            "indexed after the take-over",
        )
        assert standby.indexer.stats.items_indexed == 1
        assert active.indexer.stats.items_indexed == 20  # it stopped: nothing more went to it
    finally:
        for services in (a, b):
            services.indexer.stop()
            services.store.close()


def test_a_person_is_compacted_by_one_replica_at_a_time(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    a, b = Store.open(settings), Store.open(settings)
    try:
        assert a.claim_compaction("bot", "+15550004444", "replica-a", seconds=600)
        assert a.claim_compaction("bot", "+15550004444", "replica-a", seconds=600)  # its own
        assert not b.claim_compaction("bot", "+15550004444", "replica-b", seconds=600)
        assert b.claim_compaction("bot", "+15550005555", "replica-b", seconds=600)  # another
        a.release_compaction("bot", "+15550004444", "replica-a")
        assert b.claim_compaction("bot", "+15550004444", "replica-b", seconds=600)
        # A claim whose holder died runs out; another replica then takes it.
        assert b.claim_compaction("bot", "+15550006666", "replica-b", seconds=-1)
        assert a.claim_compaction("bot", "+15550006666", "replica-a", seconds=600)
        # A forget takes the person's claims with it.
        a.forget_person("bot", "+15550004444")
        assert (
            query(
                settings, "SELECT COUNT(*) FROM compaction_claims WHERE phone = ?", "+15550004444"
            )[0][0]
            == 0
        )
    finally:
        a.close()
        b.close()


def test_two_replicas_compacting_one_person_at_once_call_the_model_once(tmp_path: Path) -> None:
    from tests.fake_llm import FakeLLM

    with FakeLLM() as llm:
        llm.delay_s = 1.0  # a slow model: both replicas ask while the first one waits
        settings = make_settings(
            tmp_path, llm_base_url=llm.base_url, llm_api_key="sk-test", llm_retries=0
        )
        replicas = [open_services(settings, encoder_factory=fake_factory) for _ in range(2)]
        try:
            for i in range(45):
                replicas[0].memory.remember(
                    AGENT, PHONE, role="user" if i % 2 == 0 else "assistant", content=f"t {i}"
                )
            done: list[int] = []
            threads = [
                threading.Thread(
                    target=lambda s=s: done.append(s.memory.compact(AGENT, PHONE).archived)
                )
                for s in replicas
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
            assert sorted(done) == [0, 25]  # one compacted, the other skipped
            assert len(llm.requests) == 2  # the summary and the facts, of one compaction
        finally:
            for services in replicas:
                services.store.close()


def test_one_persons_turns_keep_their_order_across_replicas_with_skewed_clocks(
    tmp_path: Path,
) -> None:
    """A person's turns, sent one after another alternately through two replicas whose clocks
    disagree by five minutes, come back in the order they were sent: history is ordered by
    the database's ids, never by a replica's clock."""
    from datetime import timedelta

    from fastapi.testclient import TestClient

    from server.app import create_app
    from tests.conftest import Api, FakeClock, admin

    settings = make_settings(tmp_path)
    ahead = FakeClock()
    behind = FakeClock(ahead.now - timedelta(minutes=5))
    apps = [
        create_app(settings, clock=clock, encoder_factory=fake_factory) for clock in (ahead, behind)
    ]
    with TestClient(apps[0]) as a, TestClient(apps[1]) as b:
        replicas = [Api(a), Api(b)]
        for n in range(20):
            answer = replicas[n % 2].post_turn(f"turn {n}", event_id=f"e{n}")
            assert answer.status_code == 201, answer.text
            ahead.advance(seconds=1)
            behind.advance(seconds=1)
        for api in replicas:
            history = api.context(max_messages=50).json()["history"]
            assert [m["content"] for m in history] == [f"turn {n}" for n in range(20)]
            exported = api.client.get(
                f"/v1/agents/{AGENT}/people/{PHONE}/export", headers=admin()
            ).json()["messages"]
            assert [m["content"] for m in exported] == [f"turn {n}" for n in range(20)]
