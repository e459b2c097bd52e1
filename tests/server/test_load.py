"""A bounded load test on 127.0.0.1: many people, concurrent clients, a few thousand requests;
no 5xx, no "database is locked", and memory that stays flat."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import ADMIN_KEY
from tests.live import Server

pytestmark = pytest.mark.slow

PEOPLE, TURNS, CLIENTS = 40, 30, 8
# The first phase warms LanceDB's caches up to their bounds (more with hybrid excerpts, which
# read the vectors and the full-text index): memory must stay flat from the second to the last.
PHASES = 3


def test_load_without_errors_and_with_flat_memory(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    server = Server(tmp_path / "data")
    server.start(stderr=log)
    assert server.process is not None
    process = psutil.Process(server.process.pid)
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    rss: list[float] = []

    def client(n: int, phase: int) -> None:
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        with httpx.Client(base_url=server.base, headers=headers, timeout=30) as http:
            for person in range(n, PEOPLE, CLIENTS):
                url = f"/v1/agents/load/people/+1555{person:07d}"
                for turn in range(phase * TURNS // PHASES, (phase + 1) * TURNS // PHASES):
                    codes = [
                        http.post(
                            f"{url}/messages",
                            json={
                                "role": "user" if turn % 2 == 0 else "assistant",
                                "content": f"person {person} turn {turn} about refunds and dogs",
                                "event_id": f"{person}-{turn}",
                            },
                        ).status_code,
                        http.get(f"{url}/context").status_code,
                    ]
                    if turn % 10 == 0:
                        codes.append(
                            http.post("/v1/search", json={"query": "refund dog"}).status_code
                        )
                    with lock:
                        statuses.update(codes)

    try:
        for phase in range(PHASES):
            threads = [threading.Thread(target=client, args=(n, phase)) for n in range(CLIENTS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            server.wait_indexed()
            rss.append(process.memory_info().rss / 2**20)
    finally:
        server.stop()

    total = sum(statuses.values())
    assert total >= 2000
    assert set(statuses) <= {200, 201}, statuses
    assert "database is locked" not in log.read_text()
    assert rss[-1] - rss[1] < 60, f"memory after each phase: {[round(r) for r in rss]} MB"
