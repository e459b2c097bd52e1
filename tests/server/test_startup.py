"""`serve` answers /health "starting" while it loads, then serves; a failed start stops it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.backends import data_env, on_postgres
from tests.conftest import ADMIN_KEY
from tests.live import ROOT, Server

# Loaded through PYTHONPATH by the server's interpreter: importing LanceDB (the model stack
# the real app needs) takes 3 s longer, so the starting phase lasts long enough to be seen.
SLOW_IMPORT = """
import importlib.abc, sys, time

class Slow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "lancedb":
            sys.meta_path.remove(self)
            time.sleep(3)
        return None

sys.meta_path.insert(0, Slow())
"""


def test_health_says_starting_until_the_model_stack_is_loaded(tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SLOW_IMPORT)
    server = Server(tmp_path / "data", PYTHONPATH=str(hook), MEMORY_LOG_LEVEL="info")
    log = tmp_path / "serve.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "server", "serve"],
            env={**os.environ, **server_env(server)},
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        spawned = time.monotonic()
        seen: list[dict[str, object]] = []
        refused = None
        first = ready = None
        while time.monotonic() - spawned < 60:
            assert process.poll() is None, log.read_text()
            try:
                answer = httpx.get(f"{server.base}/health", timeout=2)
            except httpx.HTTPError:
                time.sleep(0.05)
                continue
            first = first or time.monotonic() - spawned
            if answer.status_code == 200:
                ready = time.monotonic() - spawned
                break
            assert answer.status_code == 503
            assert answer.headers["retry-after"] == "2"
            seen.append(answer.json())
            if refused is None:
                refused = httpx.get(
                    f"{server.base}/v1/keys", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
                )
            time.sleep(0.05)
        assert first is not None and ready is not None, log.read_text()
        assert seen, "no starting answer before the server was ready"
        assert seen[0]["status"] == "starting"
        assert seen[0]["phase"] == "importing the model stack"
        assert seen[0]["model"] == "hash:64" and seen[0]["version"]
        assert ready - first >= 2.5  # the 3 s import came after the socket answered
        assert refused is not None and refused.status_code == 503
        assert refused.json()["error"]["code"] == "starting"
        assert refused.headers["retry-after"] == "2"
        # Then the real app answers everything.
        health = httpx.get(f"{server.base}/health").json()
        assert health["status"] == "ok" and health["index_lag"] == 0
        keys = httpx.get(f"{server.base}/v1/keys", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        assert keys.status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=30)
    text = log.read_text()
    for step in ("importing the model stack", "opening the database", "loading the model hash:64"):
        assert f"start-up: {step}" in text, text
    assert "ready in" in text
    assert process.returncode in (0, -15)  # (uvicorn re-raises the SIGTERM it handled)


def test_a_start_that_fails_stops_the_server_with_exit_1(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "memory.db").write_text("this is not a SQLite database")
    broken = {"MEMORY_LOG_LEVEL": "info"}
    if on_postgres():  # a database that does not exist, where SQLite has a broken file
        broken["MEMORY_DATABASE_URL"] = "postgresql://postgres@127.0.0.1:5432/memtest_none"
    server = Server(data, **broken)
    done = subprocess.run(
        [sys.executable, "-m", "server", "serve"],
        env={**os.environ, **server_env(server)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 1, done.stderr
    assert "start-up failed" in done.stderr
    reason = "does not exist" if on_postgres() else "DatabaseError"
    assert reason in done.stderr  # the reason, in the log


def server_env(server: Server) -> dict[str, str]:
    return {
        **data_env(server.data_dir),
        "MEMORY_PORT": str(server.port),
        "MEMORY_ADMIN_KEY": ADMIN_KEY,
        "MEMORY_LOG_LEVEL": "warning",
        "MEMORY_EMBEDDING_MODEL": "hash:64",
        "HF_HUB_OFFLINE": "1",
        **server.env,
    }
