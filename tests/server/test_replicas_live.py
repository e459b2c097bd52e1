"""Two `memory-server serve` processes on one database and one vector store (a folder, or an
S3-compatible bucket as replicas on several machines share): writes through one, the active
indexer's process killed mid-stream, the other takes over; a forget through one while the
other ingests the same person."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from embeddings.index import VectorIndex
from embeddings.location import LanceLocation
from tests.backends import query
from tests.conftest import ADMIN_KEY, make_settings
from tests.live import Server
from tests.s3 import S3Server

pytestmark = pytest.mark.slow

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
PERSON = "/v1/agents/bot/people/+15550003333/messages"


def health(server: Server) -> dict[str, object]:
    body: dict[str, object] = httpx.get(f"{server.base}/health", timeout=30).json()
    return body


class Vectors:
    """The replicas' shared vector store: the data folder's, or a bucket of its own."""

    def __init__(self, kind: str, data: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self.data = data
        self.s3: S3Server | None = request.getfixturevalue("s3") if kind == "s3" else None
        self.uri = self.s3.new_uri() if self.s3 else str(data / "lance")
        self.env = self.s3.env(self.uri) if self.s3 else {}

    def index(self) -> VectorIndex:
        where = self.s3.location(self.uri) if self.s3 else self.data / "lance"
        return VectorIndex(where, "hash:64", 64)

    def contents(self) -> list[bytes]:
        """Every file of the store, read once."""
        location = self.s3.location(self.uri) if self.s3 else LanceLocation(self.uri)
        return [body for _, body in location.contents()]


def wait_until(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def wait_for_roles(first: Server, second: Server) -> tuple[Server, Server]:
    """(active, standby) once exactly one of them runs the indexer."""
    deadline = time.monotonic() + 60
    while {health(first)["indexer"], health(second)["indexer"]} != {"active", "standby"}:
        assert time.monotonic() < deadline, "no single active indexer"
        time.sleep(0.1)
    return (first, second) if health(first)["indexer"] == "active" else (second, first)


@pytest.mark.parametrize("store", ["folder", "s3"])
def test_sigkill_of_the_active_indexer_the_other_takes_over_indexing_each_turn_once(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    data = tmp_path / "data"
    vectors = Vectors(store, data, request)
    first, second = Server(data, **vectors.env), Server(data, **vectors.env)
    first.start()
    second.start()
    try:
        active, standby = wait_for_roles(first, second)

        acknowledged: list[int] = []
        stop = threading.Event()

        def write() -> None:  # through the standby, all along
            n = 0
            with httpx.Client(base_url=standby.base, headers=ADMIN, timeout=60) as http:
                while not stop.is_set():
                    body = {"role": "user", "content": f"turn {n}", "event_id": f"e{n}"}
                    answer = http.post(PERSON, json=body)
                    if answer.status_code in (200, 201):
                        acknowledged.append(int(answer.json()["id"]))
                    n += 1

        writer = threading.Thread(target=write)
        writer.start()
        wait_until(lambda: len(acknowledged) > 10, 60, "turns before the kill")
        time.sleep(0.5)  # the active one is indexing what arrives
        active.kill()  # SIGKILL, mid-batch or between batches
        killed_at = time.monotonic()
        while health(standby)["indexer"] != "active":
            assert time.monotonic() - killed_at < 15, "the standby did not take over in 15 s"
            time.sleep(0.1)
        took_over = time.monotonic() - killed_at
        at_take_over = len(acknowledged)
        wait_until(lambda: len(acknowledged) > at_take_over + 10, 60, "turns after the kill")
        stop.set()
        writer.join(timeout=90)
        deadline = time.monotonic() + 60
        while health(standby)["index_lag"]:
            assert time.monotonic() < deadline, "the index did not catch up"
            time.sleep(0.1)
    finally:
        second.stop()
        first.stop()
    assert took_over < 15
    assert len(acknowledged) > 20
    settings = make_settings(data)
    stored = [int(r[0]) for r in query(settings, "SELECT id FROM messages")]
    assert sorted(stored) == sorted(acknowledged)  # nothing acknowledged lost, nothing more
    rows = Counter(i for i in vectors.index().all_ids() if i.startswith("turn:"))
    assert set(rows) == {f"turn:{i}" for i in acknowledged}  # every turn indexed
    assert set(rows.values()) == {1}  # once


@pytest.mark.parametrize("store", ["folder", "s3"])
def test_forget_through_one_replica_while_the_other_ingests_the_same_person(
    tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    """Turns acknowledged before the forget was sent are gone everywhere (database, vectors,
    every file of the vector store); turns sent after it returned are stored and indexed; no
    vector outlives its turn and none is missing."""
    data = tmp_path / "data"
    vectors = Vectors(store, data, request)
    a, b = Server(data, **vectors.env), Server(data, **vectors.env)
    a.start()
    b.start()
    sent: dict[int, float] = {}  # message id -> when its request was sent
    acked: dict[int, float] = {}  # message id -> when it was acknowledged
    marks: dict[int, bytes] = {}
    stop = threading.Event()

    def ingest() -> None:  # through A, all along
        n = 0
        # (a wide timeout: a loaded machine took over 10 s to answer one turn in a drill)
        with httpx.Client(base_url=a.base, headers=ADMIN, timeout=60) as http:
            while not stop.is_set():
                mark = f"mark{n:05d}q"
                body = {"role": "user", "content": f"turn {n} {mark}", "event_id": f"e{n}"}
                at = time.monotonic()
                answer = http.post(PERSON, json=body)
                assert answer.status_code in (200, 201), answer.text
                ident = int(answer.json()["id"])
                sent[ident], acked[ident], marks[ident] = at, time.monotonic(), mark.encode()
                n += 1

    contexts: Counter[int] = Counter()

    def read() -> None:  # contexts through B, all along, with a query (a vector search)
        with httpx.Client(base_url=b.base, headers=ADMIN, timeout=60) as http:
            while not stop.is_set():
                answer = http.get(PERSON.replace("/messages", "/context"), params={"query": "x"})
                contexts[answer.status_code] += 1

    writer = threading.Thread(target=ingest)
    reader = threading.Thread(target=read)
    try:
        wait_for_roles(a, b)
        writer.start()
        reader.start()
        # Counted, not timed: a busy machine acknowledges fewer turns a second.
        wait_until(lambda: len(acked) > 10, 60, "turns before the forget")
        time.sleep(0.5)  # the active indexer indexes what arrives
        forget_sent = time.monotonic()
        # A forget waits for the person and purges the bucket's files: seconds on a busy
        # machine (httpx's own 5 s timed out once in the drills).
        forgotten = httpx.delete(
            f"{b.base}{PERSON.removesuffix('/messages')}", headers=ADMIN, timeout=60
        )
        forget_done = time.monotonic()
        assert forgotten.status_code == 200, forgotten.text
        wait_until(
            lambda: sum(1 for at in list(sent.values()) if at > forget_done) > 10,
            60,
            "turns after the forget",
        )
        wait_until(lambda: contexts[200] > 10, 120, "contexts read meanwhile")
        stop.set()
        writer.join(timeout=90)
        reader.join(timeout=90)
        a.wait_indexed(60)
    finally:
        stop.set()
        b.stop()
        a.stop()
    assert set(contexts) == {200} and contexts[200] > 10, contexts
    before = {i for i, at in acked.items() if at < forget_sent}
    after = {i for i, at in sent.items() if at > forget_done}
    assert len(before) > 10 and len(after) > 10
    settings = make_settings(data)
    stored = {int(r[0]) for r in query(settings, "SELECT id FROM messages")}
    assert not stored & before  # erased
    assert after <= stored <= set(acked)  # kept, and nothing that was not acknowledged
    rows = Counter(i for i in vectors.index().all_ids() if i.startswith("turn:"))
    assert set(rows) == {f"turn:{i}" for i in stored} and set(rows.values()) == {1}
    files = vectors.contents()
    assert any(marks[max(after)] in body for body in files)  # (the scan finds what is there)
    for ident in before:
        assert not any(marks[ident] in body for body in files), ident


def test_what_one_replica_changes_holds_on_the_other_at_once(tmp_path: Path) -> None:
    """Keys, settings, memories and people live in the database: no replica answers from a
    copy of its own after another replica changed them."""
    data = tmp_path / "data"
    a, b = Server(data), Server(data)
    a.start()
    b.start()
    try:
        with (
            httpx.Client(base_url=a.base, headers=ADMIN, timeout=60) as on_a,
            httpx.Client(base_url=b.base, headers=ADMIN, timeout=60) as on_b,
        ):
            made = on_a.post("/v1/keys", json={"scope": "agent:bot"}).json()
            agent_key = {"Authorization": f"Bearer {made['key']}"}
            turn = {"role": "user", "content": "hello from a new key"}
            stored = httpx.post(f"{b.base}{PERSON}", json=turn, headers=agent_key, timeout=60)
            assert stored.status_code == 201
            assert on_a.delete(f"/v1/keys/{made['id']}").status_code == 200
            refused = httpx.post(f"{b.base}{PERSON}", json=turn, headers=agent_key, timeout=60)
            assert refused.status_code == 401  # revoked on A: refused on B at once

            settings = on_a.put("/v1/agents/bot/settings", json={"review": True})
            assert settings.status_code == 200, settings.text
            assert on_b.get("/v1/agents/bot/settings").json()["review"] is True  # A's, on B

            memory = on_b.post(
                "/v1/agents/bot/memories",
                json={"content": "Has a dog called Biscuit", "phone": "+15550003333"},
            ).json()
            assert on_a.delete(f"/v1/agents/bot/memories/{memory['id']}").status_code == 200
            found = on_b.post(
                "/v1/agents/bot/memories/search", json={"query": "dog Biscuit", "mode": "keyword"}
            ).json()["items"]
            assert memory["id"] not in [m["id"] for m in found]  # deleted on A: gone on B

            assert on_b.delete("/v1/agents/bot/people/+15550003333").status_code == 200
            export = on_a.get("/v1/agents/bot/people/+15550003333/export").json()
            assert export["messages"] == [] and export["memories"] == []  # forgotten on B
    finally:
        b.stop()
        a.stop()


@pytest.mark.postgresql
def test_terminated_database_sessions_are_503_for_a_moment_and_nothing_is_lost(
    tmp_path: Path,
) -> None:
    """pg_terminate_backend on every session of the server (as a PostgreSQL restart does):
    requests meanwhile get 503 in the error shape, never a 500, then work again."""
    import psycopg

    data = tmp_path / "data"
    server = Server(data)
    server.start()
    url = make_settings(data).database_url
    assert url is not None
    acknowledged: list[int] = []
    answers: list[tuple[float, int, str]] = []
    try:
        with httpx.Client(base_url=server.base, headers=ADMIN, timeout=60) as http:
            for n in range(10):
                body = {"role": "user", "content": f"before {n}", "event_id": f"b{n}"}
                acknowledged.append(int(http.post(PERSON, json=body).json()["id"]))
            with psycopg.connect(url, autocommit=True) as admin:
                killed = admin.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
            assert killed is not None and killed[0] >= 1
            started = time.monotonic()
            n = 0
            while time.monotonic() - started < 6:
                body = {"role": "user", "content": f"after {n}", "event_id": f"a{n}"}
                answer = http.post(PERSON, json=body)
                code = answer.json().get("error", {}).get("code", "") if answer.is_error else ""
                answers.append((time.monotonic() - started, answer.status_code, code))
                if answer.status_code in (200, 201):
                    acknowledged.append(int(answer.json()["id"]))
                context = http.get(PERSON.replace("/messages", "/context"))
                assert context.status_code in (200, 503), context.text
                n += 1
                time.sleep(0.05)
            deadline = time.monotonic() + 60
            while server.lag():
                assert time.monotonic() < deadline, "the index did not catch up"
                time.sleep(0.1)
    finally:
        server.stop()
    assert {status for _, status, _ in answers} <= {201, 503}, answers
    failed = [(at, code) for at, status, code in answers if status == 503]
    assert all(code == "database_unavailable" for _, code in failed), failed
    assert all(at < 3 for at, _ in failed), failed  # for a moment only
    assert answers[-1][1] == 201
    stored = sorted(int(r[0]) for r in query(make_settings(data), "SELECT id FROM messages"))
    assert stored == sorted(acknowledged)
