"""Crash drills: the real server in a subprocess, killed with SIGKILL mid-stream, during
indexing and during compaction, then restarted. Nothing acknowledged is lost or doubled, and
the index catches up with SQLite with no orphan and no missing vector."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from embeddings.index import VectorIndex
from tests.backends import query
from tests.conftest import ADMIN_KEY, make_settings
from tests.fake_llm import FakeLLM
from tests.live import Server

pytestmark = pytest.mark.slow

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    made = Server(tmp_path / "data")
    yield made
    made.stop()


def post(base: str, phone: str, event_id: str, text: str, role: str = "user") -> httpx.Response:
    return httpx.post(
        f"{base}/v1/agents/drill/people/{phone}/messages",
        json={"role": role, "content": text, "event_id": event_id},
        headers=ADMIN,
        timeout=10,
    )


def sqlite_rows(data_dir: Path, sql: str) -> list[tuple[object, ...]]:
    """Rows of the data folder's database (SQLite, or its PostgreSQL database)."""
    return [tuple(r) for r in query(make_settings(data_dir), sql)]


def assert_index_matches_sqlite(server: Server, model: str = "hash:64", dim: int = 64) -> None:
    server.wait_indexed()
    server.stop()
    sources = {f"turn:{r[0]}" for r in sqlite_rows(server.data_dir, "SELECT id FROM messages")}
    sources |= {f"fact:{r[0]}" for r in sqlite_rows(server.data_dir, "SELECT id FROM memories")}
    sources |= {
        f"summary:{r[0]}|{r[1]}"
        for r in sqlite_rows(server.data_dir, "SELECT agent, phone FROM summaries")
    }
    ids = VectorIndex(server.data_dir / "lance", model, dim).all_ids()
    assert len(ids) == len(set(ids)), "a vector is indexed twice"
    assert set(ids) == sources, "orphans or missing vectors"


# Four clients of this many turns each; the server is killed once KILL_AFTER are acknowledged
# (a quarter of the way through every client, with turns in flight on each).
PER_CLIENT = 75
KILL_AFTER = 60


def test_sigkill_mid_stream_loses_nothing_acknowledged(server: Server) -> None:
    server.start()
    acked: dict[str, int] = {}
    lock = threading.Lock()

    def client(n: int) -> None:
        for i in range(PER_CLIENT):
            event = f"c{n}-{i}"
            try:
                response = post(server.base, f"+1555000{n:04d}", event, f"client {n} turn {i}")
            except httpx.HTTPError:
                return
            if response.status_code in (200, 201):
                with lock:
                    acked[event] = response.json()["id"]

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while len(acked) < KILL_AFTER:
        assert any(t.is_alive() for t in threads), "the clients stopped before enough acks"
        assert time.monotonic() < deadline, "the acks did not come within a minute"
        time.sleep(0.01)
    server.kill()
    for thread in threads:
        thread.join()

    server.start()
    for n in range(4):  # every event is delivered again: a webhook retries until it gets a 2xx
        for i in range(PER_CLIENT):
            response = post(server.base, f"+1555000{n:04d}", f"c{n}-{i}", f"client {n} turn {i}")
            assert response.status_code in (200, 201)
            if f"c{n}-{i}" in acked:
                assert response.status_code == 200
                assert response.json() == {"id": acked[f"c{n}-{i}"], "stored": False}
    rows = sqlite_rows(server.data_dir, "SELECT event_id, COUNT(*) FROM messages GROUP BY 1")
    assert len(rows) == 4 * PER_CLIENT and {count for _, count in rows} == {1}
    assert_index_matches_sqlite(server)


def test_sigkill_during_indexing_then_the_index_catches_up(server: Server) -> None:
    """The kill must land while the outbox still holds work. How fast the indexer drains it
    depends on the machine, so the drill does not guess: four clients post a burst, the
    server is killed at once, and SQLite itself says whether work was pending. If a fast
    machine had already indexed everything, another burst and another kill follow."""
    server.env["MEMORY_INDEXER_BATCH_SIZE"] = "4"
    server.env["MEMORY_INDEX_OPTIMIZE_EVERY"] = "1"  # the indexer also compacts, mid-stream
    pending_at_kill = 0
    for burst in range(5):
        server.start()

        def client(n: int, burst: int = burst) -> None:
            for i in range(100):
                event = f"b{burst}-c{n}-{i}"
                response = post(server.base, "+15550001111", event, f"turn {event} about dogs")
                assert response.status_code == 201

        threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        server.kill()
        pending_at_kill = sqlite_rows(server.data_dir, "SELECT COUNT(*) FROM outbox")[0][0]
        if pending_at_kill:
            break
    assert pending_at_kill, "five bursts in a row were indexed before the kill"
    server.env.clear()  # catch up at the default pace
    server.start()
    assert_index_matches_sqlite(server)
    total = sqlite_rows(server.data_dir, "SELECT COUNT(*) FROM messages")[0][0]
    assert total == 400 * (burst + 1)


def test_sigkill_during_compaction_keeps_every_turn(tmp_path: Path) -> None:
    with FakeLLM() as llm:
        llm.delay_s = 2.0
        server = Server(
            tmp_path / "data",
            MEMORY_LLM_BASE_URL=llm.base_url,
            MEMORY_LLM_RETRIES="0",
            MEMORY_LLM_TIMEOUT_S="20",
            MEMORY_COMPACT_BACKOFF_S="[0.1]",
        )
        try:
            server.start()
            for i in range(42):
                role = "user" if i % 2 == 0 else "assistant"
                response = post(server.base, "+15550002222", f"e{i}", f"turn {i}", role=role)
                assert response.status_code == 201
            deadline = time.monotonic() + 10
            while not llm.requests:  # the model call is under way
                assert time.monotonic() < deadline
                time.sleep(0.05)
            server.kill()
            assert sqlite_rows(server.data_dir, "SELECT COUNT(*) FROM messages") == [(42,)]
            assert sqlite_rows(server.data_dir, "SELECT COUNT(*) FROM summaries") == [(0,)]
            assert sqlite_rows(
                server.data_dir, "SELECT COUNT(*) FROM messages WHERE archived = 1"
            ) == [(0,)]

            llm.delay_s = 0.0
            server.start()
            post(server.base, "+15550002222", "e42", "turn 42", role="user")
            post(server.base, "+15550002222", "e43", "turn 43", role="assistant")
            deadline = time.monotonic() + 30
            while sqlite_rows(server.data_dir, "SELECT COUNT(*) FROM summaries") == [(0,)]:
                assert time.monotonic() < deadline, "compaction did not run after the restart"
                time.sleep(0.1)
            assert sqlite_rows(server.data_dir, "SELECT COUNT(*) FROM messages") == [(44,)]
            assert sqlite_rows(
                server.data_dir, "SELECT COUNT(*) FROM messages WHERE archived = 1"
            ) == [(24,)]
            assert_index_matches_sqlite(server)
        finally:
            server.stop()
