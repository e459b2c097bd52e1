"""Slow and keyless clients against the real server over raw sockets: the key is checked before
the body is read, a body that stalls times out, a connection cap answers 503, and floods of
identical log lines are rate-limited."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from server.logs import RepeatFilter
from tests.conftest import ADMIN_KEY, AGENT, PHONE
from tests.live import Server

URL = f"/v1/agents/{AGENT}/people/{PHONE}/messages"
MIB = 1_048_576


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    live = Server(tmp_path_factory.mktemp("slow") / "data", MEMORY_BODY_TIMEOUT_S="1")
    live.start()
    yield live
    live.stop()


def _stall(
    port: int, *, key: str | None = None, declared: int = MIB, sent: int = MIB // 2
) -> socket.socket:
    """A POST that announces `declared` bytes of body, sends `sent` of them and stops."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    lines = [
        f"POST {URL} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {declared}",
    ]
    if key is not None:
        lines.append(f"Authorization: Bearer {key}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    body = (b'{"role": "user", "content": "' + b"x" * sent)[:sent]
    # The server may answer and hang up before the half body is through.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(head + body)
    return sock


def _response(sock: socket.socket, timeout: float) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of the one response on the socket; fails after `timeout`."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                pytest.fail(f"the connection closed without a response: {data!r}")
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in lines)}
        while len(body) < int(headers.get("content-length", "0")):
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
    except TimeoutError:
        pytest.fail(f"no response within {timeout} s")
    return int(status_line.split()[1]), headers, body


def _closed_by_server(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _assert_error(body: bytes, status: int, code: str) -> None:
    error = json.loads(body)
    assert set(error) == {"error"}, error
    assert error["error"]["status"] == status
    assert error["error"]["code"] == code, error
    assert isinstance(error["error"]["message"], str) and error["error"]["message"]


def _open_fds(server: Server) -> int:
    assert server.process is not None
    return int(psutil.Process(server.process.pid).num_fds())


@pytest.mark.parametrize("key", [None, "mk_wrong"])
def test_a_keyless_half_body_gets_401_at_once(server: Server, key: str | None) -> None:
    started = time.monotonic()
    sock = _stall(server.port, key=key)
    try:
        status, headers, body = _response(sock, timeout=3)
        took = time.monotonic() - started
        assert status == 401
        _assert_error(body, 401, "unauthorized")
        assert took < 1.0, f"401 after {took:.2f} s"
        # The unread body must not be read as the next request: the server hangs up.
        assert headers.get("connection") == "close"
        assert _closed_by_server(sock, timeout=2)
    finally:
        sock.close()


def test_a_stalled_body_gets_408_after_the_timeout(server: Server) -> None:
    started = time.monotonic()
    sock = _stall(server.port, key=ADMIN_KEY, declared=1000, sent=100)
    try:
        status, headers, body = _response(sock, timeout=4)
        took = time.monotonic() - started
        assert status == 408
        _assert_error(body, 408, "body_timeout")
        assert 0.9 <= took < 3.0, f"408 after {took:.2f} s"
        assert headers.get("connection") == "close"
        assert _closed_by_server(sock, timeout=2)
    finally:
        sock.close()


def test_a_trickling_body_times_out_in_total(server: Server) -> None:
    """A byte now and then does not keep the request alive: the timeout counts from the start."""
    sock = _stall(server.port, key=ADMIN_KEY, declared=1000, sent=10)
    started = time.monotonic()
    try:
        sock.settimeout(0.2)
        answered = b""
        while not answered and time.monotonic() - started < 4:
            try:
                sock.sendall(b"x")
                answered = sock.recv(65536)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        took = time.monotonic() - started
        assert answered.startswith(b"HTTP/1.1 408"), answered[:80]
        assert took < 2.5, f"408 after {took:.2f} s"
    finally:
        sock.close()


def test_many_keyless_half_bodies_leave_the_server_healthy(server: Server) -> None:
    baseline = _open_fds(server)
    socks = [_stall(server.port, sent=64 * 1024) for _ in range(200)]
    try:
        started = time.monotonic()
        health = httpx.get(f"{server.base}/health", timeout=5)
        assert health.status_code == 200
        assert time.monotonic() - started < 1.0
        deadline = time.monotonic() + 5
        while (fds := _open_fds(server)) > baseline + 10:
            assert time.monotonic() < deadline, f"{fds} fds open, {baseline} before"
            time.sleep(0.1)
        assert all(_response(sock, timeout=2)[0] == 401 for sock in socks)
    finally:
        for sock in socks:
            sock.close()


def test_over_the_cap_the_answer_is_503_until_the_stalled_time_out(tmp_path: Path) -> None:
    live = Server(tmp_path / "data", MEMORY_MAX_CONNECTIONS="20", MEMORY_BODY_TIMEOUT_S="1")
    live.start()
    stalled: list[socket.socket] = []
    try:
        stalled = [_stall(live.port, key=ADMIN_KEY, declared=1000, sent=100) for _ in range(20)]
        time.sleep(0.3)  # every stalled request has reached the app and waits for its body
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        extra = httpx.post(
            f"{live.base}{URL}", json={"role": "user", "content": "hi"}, headers=headers, timeout=5
        )
        assert extra.status_code == 503
        _assert_error(extra.content, 503, "overloaded")
        assert httpx.get(f"{live.base}/health", timeout=5).status_code == 503
        assert all(_response(sock, timeout=4)[0] == 408 for sock in stalled)
        again = httpx.post(
            f"{live.base}{URL}", json={"role": "user", "content": "hi"}, headers=headers, timeout=5
        )
        assert again.status_code == 201, again.text
        assert httpx.get(f"{live.base}/health", timeout=5).status_code == 200
    finally:
        for sock in stalled:
            sock.close()
        live.stop()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_repeated_log_lines_are_rate_limited() -> None:
    now = [0.0]
    handler = _Records()
    handler.addFilter(RepeatFilter(limit=3, interval_s=10, clock=lambda: now[0]))
    logger = logging.getLogger("tests.slow_clients.flood")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        for n in range(100):
            logger.error(
                "socket.accept() out of system resource: %s (%d)", "Too many open files", n
            )
        assert len(handler.messages) == 3
        logger.error("another template passes")
        for n in range(20):  # lines below WARNING (the access log) are never held back
            logger.info("GET /health %d", n)
        assert len(handler.messages) == 3 + 1 + 20
        now[0] = 10.5
        logger.error("socket.accept() out of system resource: %s (%d)", "Too many open files", 0)
        summary, first_again = handler.messages[-2:]
        assert summary.startswith("suppressed 97 similar messages")
        assert "socket.accept() out of system resource" in summary
        assert first_again.startswith("socket.accept()")
        now[0] = 30.0
        logger.warning("a quiet line")
        assert handler.messages[-1] == "a quiet line"  # nothing was suppressed: no summary
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


def test_a_connection_trickling_its_headers_is_closed_after_the_timeout(server: Server) -> None:
    before = _open_fds(server)
    with contextlib.ExitStack() as stack:
        socks = []
        for _ in range(50):
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", server.port), 5))
            sock.sendall(f"POST {URL} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode())  # never ends
            socks.append(sock)
        started = time.monotonic()
        for sock in socks[:5]:
            sock.sendall(b"X-Slow: 1\r\n")  # a byte now and then does not keep it open
        for sock in socks:
            assert _closed_by_server(sock, 5), "the server kept the connection open"
        assert time.monotonic() - started < 4
    deadline = time.monotonic() + 5
    while _open_fds(server) > before + 2:
        assert time.monotonic() < deadline, "file descriptors were not released"
        time.sleep(0.1)
    assert httpx.get(f"{server.base}/health", timeout=5).status_code == 200


def test_a_connection_trickling_headers_after_a_first_request_is_closed(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        status, _, _ = _response(sock, 5)  # the whole first response, headers and body
        assert status == 200
        started = time.monotonic()
        sock.sendall(b"G")  # cancels uvicorn's keep-alive timer; the request never ends
        assert _closed_by_server(sock, 5), "the server kept the connection open"
        assert time.monotonic() - started < 3


def test_a_keep_alive_connection_may_serve_several_requests(server: Server) -> None:
    with httpx.Client(base_url=server.base) as client:
        for _ in range(3):
            assert client.get("/health").status_code == 200
            time.sleep(0.3)


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_a_body_on_a_method_that_takes_none_is_refused_unread(server: Server, method: str) -> None:
    head = f"{method} {URL} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {MIB}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(head.encode() + b"x" * (MIB // 2))
        started = time.monotonic()
        status, _, body = _response(sock, 2)
        assert time.monotonic() - started < 1
        assert status == 400 and json.loads(body)["error"]["code"] == "unexpected_body"
