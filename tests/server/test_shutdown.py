"""Stopping: the background indexer does not wait for a whole batch of a slow model, and
`serve` stops on SIGTERM or Ctrl-C without a lifespan error or a traceback."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import pytest

from embeddings.encoder import Vectors
from embeddings.hashing import HashEncoder
from tests.conftest import ADMIN_KEY, Api
from tests.live import Server


class Slow(HashEncoder):
    """A model that takes 5 ms a text (a batch of 512: 2.6 s)."""

    def __init__(self) -> None:
        super().__init__("fake-hash", 64)  # the model in use: no switch
        self.started = threading.Event()

    def encode(self, texts: Sequence[str]) -> Vectors:
        self.started.set()
        time.sleep(0.005 * len(texts))
        return super().encode(texts)


def test_stop_during_a_batch_returns_soon_and_keeps_the_rows(
    api_factory: Callable[..., Api],
) -> None:
    api = api_factory()
    for i in range(300):
        assert api.post_turn(f"turn number {i} about the weekend").status_code == 201
    indexer = api.services.indexer
    slow = Slow()
    indexer.space.encoder._inner = slow  # type: ignore[attr-defined]
    waiting = api.services.store.outbox_size()
    indexer.start()
    assert slow.started.wait(10)
    started = time.monotonic()
    indexer.stop()
    assert time.monotonic() - started < 1.0  # one slice, not the whole batch
    assert api.services.store.outbox_size() == waiting  # nothing acknowledged, nothing lost


def test_a_memory_written_while_stopping_is_stored_and_answered_503(api: Api) -> None:
    from tests.conftest import AGENT, PHONE, admin, assert_error

    api.services.indexer.stop()  # as at shutdown, with requests still in flight
    response = api.client.post(
        f"/v1/agents/{AGENT}/memories",
        json={"content": "Prefers window seats", "phone": PHONE},
        headers=admin(),
    )
    assert_error(response, 503, "shutting_down")
    assert api.services.store.outbox_size() == 1  # stored, and queued for the next start


def _serve_then_signal(tmp_path: Path, sig: signal.Signals) -> tuple[str, int]:
    """Start `serve` (logging at info, where uvicorn reports a lifespan that failed), make one
    MCP call (the session manager's task group then holds a finished task), send `sig`: the
    log and the exit code."""
    server = Server(tmp_path / "data", MEMORY_LOG_LEVEL="info")
    log = tmp_path / "serve.log"
    server.start(stderr=log)
    try:
        hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        headers = {"Authorization": f"Bearer {ADMIN_KEY}", "Accept": "application/json"}
        answer = httpx.post(f"{server.base}/mcp", json=hello, headers=headers, timeout=30)
        assert answer.status_code == 200, answer.text
        assert server.process is not None
        server.process.send_signal(sig)
        code = server.process.wait(timeout=60)
    finally:
        server.stop()
    return log.read_text(), code


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_server_without_a_lifespan_error(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """The app's lifespan is entered in the start-up task and left in the one that serves the
    lifespan protocol (server/startup.py); the MCP session manager's task group, entered in
    the first, used to fail in the second ("Attempted to exit cancel scope in a different task
    than it was entered in"), which uvicorn logged as "ASGI 'lifespan' protocol appears
    unsupported."."""
    log, code = _serve_then_signal(tmp_path, sig)
    shutdown, finished, _ = log.partition("Finished server process")
    assert finished, log
    assert "Application shutdown complete." in shutdown, log
    for sign in ("lifespan", "cancel scope", "Traceback", " ERROR "):
        assert sign not in shutdown, log
    if sig == signal.SIGTERM:  # (uvicorn raises the signal it handled again once stopped)
        assert "Traceback" not in log and code in (0, -signal.SIGTERM), (code, log)


def test_ctrl_c_ends_without_a_traceback(tmp_path: Path) -> None:
    log, code = _serve_then_signal(tmp_path, signal.SIGINT)
    assert "Traceback" not in log and code in (0, 130, -signal.SIGINT), (code, log)
