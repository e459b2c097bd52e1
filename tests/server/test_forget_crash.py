"""A forget killed by SIGKILL at each step (journaled; rows erased; vectors deleted but not
purged; vectors purged but the journal not closed) is finished at the next start-up: no file
holds a byte of the person afterwards, /health says erasure_pending until then, the other
person's memory is whole and indexed, and a turn the person stored after the crash is kept and
indexed."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.backends import query
from tests.conftest import ADMIN_KEY, make_settings
from tests.live import Server, run_until_killed
from tests.server.test_forget import assert_no_canary_in_lance, data_files

pytestmark = pytest.mark.slow

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
CANARY = "okapicanary5c2e81"
AGENT, PHONE, OTHER = "drill", "+15550004444", "+15550005555"
PERSON = f"/v1/agents/{AGENT}/people/{PHONE}"

# Runs a forget in a process of its own, on the folder's settings, and kills itself with
# SIGKILL when the forget reaches the named point (server/hooks.py).
CHILD = """
import os, signal, sys
from server.app import open_services
from server.config import Settings
from server.hooks import Hooks

point, agent, phone = sys.argv[1:4]
hooks = Hooks()
hooks.on(point, lambda: os.kill(os.getpid(), signal.SIGKILL))
services = open_services(Settings(), hooks=hooks)
services.memory.forget_person(agent, phone)
print("the forget finished without reaching", point)
"""


def fill(server: Server) -> None:
    with httpx.Client(base_url=server.base, headers=ADMIN, timeout=10) as http:
        for n in range(12):
            body = {"role": "user", "content": f"turn {n} says {CANARY}", "event_id": f"e{n}"}
            assert http.post(f"{PERSON}/messages", json=body).status_code == 201
            other = {"role": "user", "content": f"the other person's turn {n}"}
            assert http.post(f"/v1/agents/{AGENT}/people/{OTHER}/messages", json=other)
        memory = {"phone": PHONE, "content": f"Secret word is {CANARY}"}
        assert http.post(f"/v1/agents/{AGENT}/memories", json=memory).status_code == 201
        assert http.post(f"{PERSON}/compact").status_code == 200
    server.wait_indexed()


def kill_a_forget_at(point: str, server: Server) -> None:
    run_until_killed(server, CHILD, point, AGENT, PHONE)


@pytest.mark.parametrize(
    "point",
    ["forget.journaled", "forget.rows_erased", "forget.vectors_deleted", "forget.vectors_erased"],
)
def test_a_forget_killed_at_any_step_is_finished_at_the_next_start(
    tmp_path: Path, point: str
) -> None:
    data = tmp_path / "data"
    settings = make_settings(data)
    server = Server(data)
    server.start()
    fill(server)
    watcher = Server(data)  # another replica, up all along (SQLite: another process)
    watcher.start()
    server.stop()
    try:
        kill_a_forget_at(point, server)
        assert query(settings, "SELECT phone FROM erasures")[0][0] == PHONE  # journaled
        health = httpx.get(f"{watcher.base}/health", timeout=5).json()
        assert health["erasure_pending"] is True  # until a start-up finishes it
        # The person writes again before any process finished the forget.
        after = {"role": "user", "content": "a new conversation", "event_id": "after"}
        assert httpx.post(
            f"{watcher.base}{PERSON}/messages", json=after, headers=ADMIN, timeout=10
        ).status_code in (200, 201)
        watcher.stop()
        server.start()  # finishes the forget before it serves
        assert httpx.get(f"{server.base}/health", timeout=5).json()["erasure_pending"] is False
        server.wait_indexed()
        exported = httpx.get(f"{server.base}{PERSON}/export", headers=ADMIN, timeout=10).json()
        other = httpx.get(
            f"{server.base}/v1/agents/{AGENT}/people/{OTHER}/export", headers=ADMIN, timeout=10
        ).json()
    finally:
        watcher.stop()
        server.stop()
    assert CANARY not in str(exported)
    # The new turn stays, unless the forget was redone in full (its rows were not erased
    # yet when it was killed: the person asked to be forgotten, and nobody was told it was).
    kept = [m["content"] for m in exported["messages"]]
    assert kept in (["a new conversation"], [])
    assert len(other["messages"]) == 12
    assert query(settings, "SELECT COUNT(*) FROM erasures")[0][0] == 0
    from embeddings.index import VectorIndex

    ids = set(VectorIndex(data / "lance", "hash:64", 64).all_ids())
    turns = {f"turn:{r[0]}" for r in query(settings, "SELECT id FROM messages")}
    assert {i for i in ids if i.startswith("turn:")} == turns  # kept and indexed, no orphan
    if not settings.database_url:
        for path in data_files(data):
            assert CANARY.encode() not in path.read_bytes(), path
    assert_no_canary_in_lance(data / "lance", CANARY)
