"""A move killed by SIGKILL at each step (committed; vectors rewritten under the new number;
the old number left but the journal not closed) is finished at the next start-up: no file of
the vector store, in any version, holds the old number, and every item is indexed under the
new one."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from embeddings.index import VectorIndex
from tests.backends import query
from tests.conftest import ADMIN_KEY, make_settings
from tests.live import Server, run_until_killed
from tests.server.test_erasure import lance_texts

pytestmark = pytest.mark.slow

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
AGENT, OLD, NEW = "drill", "+15550006666", "+15550007777"

# Runs a move in a process of its own, on the folder's settings, and kills itself with
# SIGKILL when the move reaches the named point (server/hooks.py).
CHILD = """
import os, signal, sys
from server.app import open_services
from server.config import Settings
from server.hooks import Hooks

point, agent, old, new = sys.argv[1:5]
hooks = Hooks()
hooks.on(point, lambda: os.kill(os.getpid(), signal.SIGKILL))
services = open_services(Settings(), hooks=hooks)
services.memory.move_person(agent, old, new, actor="drill")
print("the move finished without reaching", point)
"""


def fill(server: Server, phone: str) -> None:
    person = f"/v1/agents/{AGENT}/people/{phone}"
    with httpx.Client(base_url=server.base, headers=ADMIN, timeout=10) as http:
        for n in range(12):
            body = {"role": "user", "content": f"turn {n} about the kiwi", "event_id": f"e{n}"}
            assert http.post(f"{person}/messages", json=body).status_code == 201
        memory = {"phone": phone, "content": "Likes kiwi"}
        assert http.post(f"/v1/agents/{AGENT}/memories", json=memory).status_code == 201
        assert http.post(f"{person}/compact").status_code == 200
    server.wait_indexed()


def kill_a_move_at(point: str, server: Server, old: str, new: str) -> None:
    run_until_killed(server, CHILD, point, AGENT, old, new)


def test_a_move_killed_at_any_step_is_finished_at_the_next_start(tmp_path: Path) -> None:
    """The person moves back and forth, the move killed at each step in turn, the server
    started again after each kill."""
    data = tmp_path / "data"
    settings = make_settings(data)
    server = Server(data)
    server.start()
    fill(server, OLD)
    server.stop()
    index = VectorIndex(data / "lance", "hash:64", 64)
    moves = [(OLD, NEW), (NEW, OLD), (OLD, NEW)]
    points = ["move.committed", "move.rewritten", "move.left"]
    for point, (old, new) in zip(points, moves, strict=True):
        kill_a_move_at(point, server, old, new)
        journal = query(settings, "SELECT old_phone, new_phone FROM moves")
        assert [tuple(r) for r in journal] == [(old, new)], point
        if point != "move.left":
            assert old in lance_texts(data / "lance"), point  # some version still holds it
        server.start()  # finishes the move before it serves
        try:
            server.wait_indexed()
            found = httpx.post(
                f"{server.base}/v1/search",
                json={"query": "kiwi", "mode": "keyword", "limit": 50},
                headers=ADMIN,
                timeout=10,
            ).json()["items"]
        finally:
            server.stop()
        assert found and {item["phone"] for item in found} == {new}, point
        assert query(settings, "SELECT COUNT(*) FROM moves")[0][0] == 0, point
        assert old not in lance_texts(data / "lance"), point
        index.reopen()
        turns = {f"turn:{r[0]}" for r in query(settings, "SELECT id FROM messages")}
        facts = {f"fact:{r[0]}" for r in query(settings, "SELECT id FROM memories")}
        assert set(index.person_ids(AGENT, new)) >= turns | facts, point
        assert index.person_ids(AGENT, old) == [], point
