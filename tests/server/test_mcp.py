"""MCP: `memory-server mcp` over stdio (forwarding to a live server) and /mcp over streamable
HTTP, driven by the official SDK's own client; then the stored rows, read over the API."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from embeddings.encoder import Vectors
from server.app import create_app
from tests.conftest import ADMIN_KEY, make_settings
from tests.fakes import HashEncoder
from tests.live import ROOT, Server

pytestmark = pytest.mark.engine_agnostic  # run by the SQLite pass only (conftest)

AGENT = "mcp-bot"
OTHER = "other-bot"
PHONE = "+34600111222"
TOOLS = {"remember", "get_context", "search_memories", "add_memory"}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("mcp") / "data")
    server.start(stderr=_log_of(server))
    try:
        yield server
    finally:
        server.stop()


def _log_of(server: Server) -> Path:
    """Where the live server's stderr (its log, at warning and above) goes."""
    return server.data_dir.parent / "server.log"


def _admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_KEY}"}


def _admin(server: Server) -> httpx.Client:
    return httpx.Client(base_url=server.base, headers=_admin_headers(), timeout=30)


def _agent_key(server: Server, agent: str) -> str:
    return _make_key(server, agent)[1]


def _make_key(server: Server, agent: str) -> tuple[str, str]:
    with _admin(server) as admin:
        made = admin.post("/v1/keys", json={"scope": f"agent:{agent}"})
        assert made.status_code == 201, made.text
        return str(made.json()["id"]), str(made.json()["key"])


@asynccontextmanager
async def _stdio(
    server: Server, key: str | None, errlog: Path | None = None
) -> AsyncIterator[Client]:
    """`memory-server mcp` in a subprocess; its stderr (its log) to errlog, when given."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HF_HUB_OFFLINE": "1",
        "MEMORY_URL": server.base,
        "MEMORY_DATA_DIR": str(server.data_dir.parent / "mcp-client-data"),
        "MEMORY_LOG_LEVEL": "warning",
    }
    if key is not None:
        env["MEMORY_API_KEY"] = key
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "server", "mcp"], env=env, cwd=str(ROOT)
    )
    if errlog is None:
        async with Client(params, read_timeout_seconds=60) as client:
            yield client
        return
    with errlog.open("a") as log:
        async with Client(stdio_client(params, errlog=log), read_timeout_seconds=60) as client:
            yield client


@asynccontextmanager
async def _http(server: Server, key: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(f"{server.base}/mcp", http_client=http)) as client,
    ):
        yield client


def _structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return dict(result.structured_content)
    return dict(json.loads(result.content[0].text))


def _error_text(result: Any) -> str:
    assert result.is_error, result
    return " ".join(getattr(part, "text", "") for part in result.content)


async def _exercise(client: Client, server: Server, phone: str) -> None:
    """Every tool once, then the stored state over the API."""
    listed = await client.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and len(tool.description) > 60  # something a model can act on
        assert tool.input_schema["type"] == "object"
    assert set(tools["remember"].input_schema["required"]) == {"agent", "phone", "role", "content"}
    assert set(tools["remember"].input_schema["properties"]["role"]["enum"]) == {
        "user",
        "assistant",
    }
    assert set(tools["get_context"].input_schema["required"]) == {"agent", "phone"}
    assert "ctx" not in tools["get_context"].input_schema["properties"]

    said = "Tengo un perro que se llama Canelo y trabajo de noche"
    first = _structured(
        await client.call_tool(
            "remember",
            {
                "agent": AGENT,
                "phone": phone,
                "role": "user",
                "content": said,
                "event_id": f"wa-{phone}",
            },
        )
    )
    assert first["stored"] is True
    again = _structured(
        await client.call_tool(
            "remember",
            {
                "agent": AGENT,
                "phone": phone,
                "role": "user",
                "content": said,
                "event_id": f"wa-{phone}",
            },
        )
    )
    assert again == {"id": first["id"], "stored": False}
    _structured(
        await client.call_tool(
            "remember",
            {"agent": AGENT, "phone": phone, "role": "assistant", "content": "¡Qué bonito!"},
        )
    )
    fact = "Tiene un perro llamado Canelo"
    added = _structured(
        await client.call_tool("add_memory", {"agent": AGENT, "content": fact, "phone": phone})
    )
    assert added["content"] == fact and added["type"] == "fact" and added["phone"] == phone
    assert added["stored"] is True
    twice = _structured(
        await client.call_tool("add_memory", {"agent": AGENT, "content": fact, "phone": phone})
    )
    assert (twice["id"], twice["stored"]) == (added["id"], False)  # kept once, and it says so
    found = _structured(
        await client.call_tool(
            "search_memories", {"agent": AGENT, "query": fact, "phone": phone, "limit": 5}
        )
    )
    assert [item["id"] for item in found["items"]][:1] == [added["id"]]
    context = _structured(
        await client.call_tool("get_context", {"agent": AGENT, "phone": phone, "query": fact})
    )
    assert [turn["content"] for turn in context["history"]] == [said, "¡Qué bonito!"]
    assert fact in context["notes"]
    # Canelo went to live with her sister: the agent replaces the fact, it does not add one.
    change = "Su perro Canelo ahora vive con su hermana"
    replaced = _structured(
        await client.call_tool(
            "add_memory",
            {"agent": AGENT, "content": change, "phone": phone, "supersedes": added["id"]},
        )
    )
    assert replaced["supersedes"] == added["id"] and replaced["stored"] is True
    now = _structured(
        await client.call_tool("get_context", {"agent": AGENT, "phone": phone, "query": change})
    )
    assert change in now["notes"] and fact not in now["notes"]

    with _admin(server) as admin:
        exported = admin.get(f"/v1/agents/{AGENT}/people/{phone}/export").json()
    assert [(m["role"], m["content"]) for m in exported["messages"]] == [
        ("user", said),
        ("assistant", "¡Qué bonito!"),
    ]
    chain = {m["content"]: m for m in exported["memories"]}
    assert set(chain) == {fact, change}
    assert chain[fact]["superseded_by"] == replaced["id"]


async def _refusals(client: Client, phone: str) -> None:
    """The server's errors are tool errors that say why, and the session goes on."""
    bad_phone = await client.call_tool(
        "remember", {"agent": AGENT, "phone": "0034600", "role": "user", "content": "hola"}
    )
    assert "422" in _error_text(bad_phone) and "invalid_phone" in _error_text(bad_phone)
    elsewhere = await client.call_tool(
        "remember", {"agent": OTHER, "phone": phone, "role": "user", "content": "hola"}
    )
    assert "403" in _error_text(elsewhere)
    bad_role = await client.call_tool(
        "remember", {"agent": AGENT, "phone": phone, "role": "system", "content": "hola"}
    )
    assert bad_role.is_error
    still = await client.call_tool("get_context", {"agent": AGENT, "phone": phone})
    assert not still.is_error


@pytest.mark.parametrize(
    ("transport", "phone"), [("stdio", "+34600111001"), ("http", "+34600111002")]
)
def test_tools_remember_and_recall(live: Server, transport: str, phone: str) -> None:
    key = _agent_key(live, AGENT)
    connect = {"stdio": _stdio, "http": _http}[transport]

    async def scenario() -> None:
        async with connect(live, key) as client:
            await _exercise(client, live, phone)
            await _refusals(client, phone)

    anyio.run(scenario)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_call_that_fails_is_a_tool_error_that_says_why(
    live: Server, transport: str, tmp_path: Path
) -> None:
    """A call the client cannot send (a 70,000-character query: no URL holds it) is a tool
    error with its status, code and message, as is a body over the server's limit (over stdio;
    over HTTP the whole /mcp message is refused 413). No traceback is logged for either."""
    key = _agent_key(live, AGENT)
    log = tmp_path / "bridge.log" if transport == "stdio" else _log_of(live)
    logged_before = log.stat().st_size if log.exists() else 0
    asked = {"agent": AGENT, "phone": PHONE}

    async def scenario() -> None:
        connect = _stdio(live, key, log) if transport == "stdio" else _http(live, key)
        async with connect as client:
            long = await client.call_tool("get_context", {**asked, "query": "q" * 70_000})
            assert "memory server error 0 url_too_long" in _error_text(long)
            assert "65,536" in _error_text(long)
            if transport == "stdio":
                turn = {**asked, "role": "user", "content": "x" * 5_000_000, "event_id": "big"}
                big = await client.call_tool("remember", turn)
                assert "memory server error 413 body_too_large" in _error_text(big)
            assert not (await client.call_tool("get_context", asked)).is_error

    anyio.run(scenario)
    logged = log.read_text()[logged_before:] if log.exists() else ""
    assert "Traceback" not in logged and "Error executing tool" not in logged


class BrokenEncoder(HashEncoder):
    """Fails on a text with "poison" in it, as a model that crashes would."""

    def encode(self, texts: Sequence[str]) -> Vectors:
        if any("poison" in text for text in texts):
            raise RuntimeError("the encoder broke")
        return super().encode(texts)


def test_http_endpoint_reports_a_server_error_as_a_tool_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An unexpected error in the route a tool calls is a 500 in the error shape: the tool
    error says so, and the server logs the traceback once, not again as a tool crash."""
    settings = make_settings(tmp_path / "data")
    app = create_app(
        settings, encoder_factory=lambda model: BrokenEncoder(model), run_workers=False
    )
    search = {"name": "search_memories", "arguments": {"agent": AGENT, "query": "poison"}}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": search}
    headers = {**_admin_headers(), "Accept": "application/json, text/event-stream"}
    with TestClient(app) as client, caplog.at_level(logging.INFO):
        answer = client.post("/mcp", json=message, headers=headers)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["isError"] is True
    assert "memory server error 500 internal_error" in result["content"][0]["text"]
    assert [r.name for r in caplog.records if r.exc_info] == ["server.errors"]


def test_stdio_bridge_with_a_wrong_key_answers_tool_errors(live: Server) -> None:
    async def scenario() -> None:
        async with _stdio(live, "mk_not_a_key_at_all_0000000000") as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            result = await client.call_tool("get_context", {"agent": AGENT, "phone": PHONE})
            text = _error_text(result)
            assert "401" in text and "MEMORY_API_KEY" in text
            result = await client.call_tool(
                "remember", {"agent": AGENT, "phone": PHONE, "role": "user", "content": "x"}
            )
            assert "401" in _error_text(result)

    anyio.run(scenario)
    with _admin(live) as admin:
        assert admin.get(f"/v1/agents/{AGENT}/people/{PHONE}/export").json()["messages"] == []


def test_stdio_bridge_with_no_server_answers_tool_errors(tmp_path: Path) -> None:
    nobody = Server(tmp_path / "data")  # a free port nothing listens on

    async def scenario() -> None:
        async with _stdio(nobody, "mk_whatever_0000000000000000") as client:
            result = await client.call_tool("get_context", {"agent": AGENT, "phone": PHONE})
            assert "unreachable" in _error_text(result) or "connect" in _error_text(result)

    anyio.run(scenario)


def test_http_endpoint_needs_a_live_key(live: Server) -> None:
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {},
    }
    for headers in ({}, {"Authorization": "Bearer mk_not_a_key_at_all_0000000000"}):
        answer = httpx.post(f"{live.base}/mcp", json=hello, headers=headers, timeout=30)
        assert answer.status_code == 401, answer.text
        assert answer.json()["error"]["status"] == 401
        # The scheme is named: an MCP client asks for a bearer key instead of starting OAuth.
        assert answer.headers["WWW-Authenticate"].startswith('Bearer realm="memory-server"')
    # Refused before the body is read, or with no body at all: the same challenge.
    for body in (b"", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'):
        answer = httpx.post(f"{live.base}/mcp", content=body, timeout=30)
        assert answer.status_code == 401, answer.text
        assert answer.headers["WWW-Authenticate"] == 'Bearer realm="memory-server"'
    # Stateless: no event stream to GET, no session to DELETE; 405 in the error shape, at once.
    for method in ("GET", "DELETE"):
        answer = httpx.request(method, f"{live.base}/mcp", headers=_admin_headers(), timeout=30)
        assert answer.status_code == 405, answer.text
        assert answer.json()["error"]["code"] == "method_not_allowed"
    # A key revoked after the session began is refused at the next call.
    key_id, key = _make_key(live, AGENT)

    async def scenario() -> None:
        async with _http(live, key) as client:
            asked = {"agent": AGENT, "phone": PHONE}
            assert not (await client.call_tool("get_context", asked)).is_error
            with _admin(live) as admin:
                assert admin.delete(f"/v1/keys/{key_id}").status_code == 200
            # The SDK turns the HTTP 401 into an MCPError; no tool ran.
            with pytest.raises(MCPError):
                await client.call_tool("get_context", asked)

    anyio.run(scenario)
