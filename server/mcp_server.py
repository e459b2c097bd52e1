"""The memory as Model Context Protocol tools, for agent frameworks that speak MCP.

Two ways in, one set of tools:
- `memory-server mcp` speaks MCP over stdio and forwards every call to a running server
  (MEMORY_URL, with the key in MEMORY_API_KEY) through `AsyncMemoryClient`;
- the server itself answers MCP over streamable HTTP at `/mcp`: each call is sent, with the
  caller's own bearer key, through the same HTTP routes in-process.

Either way the tools are plain API calls: keys, scopes, validation and errors are the server's,
and every failure of a call (a MemoryServerError: the server's error, a call the client cannot
send, no answer) becomes an MCP tool error that says its status, code and message, logged
without a traceback (the session goes on).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from server import __version__
from server.client import AsyncMemoryClient, MemoryServerError
from server.schemas import ContextOut, MemoryCreated, MemorySearch, MemorySearchOut, MessageStored

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

T = TypeVar("T")
SEARCH_LIMIT: int = MemorySearch.model_fields["limit"].default  # the API's own default
ClientSource = Callable[[Context[Any, Any]], AbstractAsyncContextManager[AsyncMemoryClient]]

INSTRUCTIONS = (
    "Long-term memory of the people an agent talks to, keyed by agent (a persona or product"
    " name: 1-64 characters of a-z 0-9 _ -) and the person's phone number in international"
    " form (+, the country code and the number; stored in E.164). Store every turn with"
    " `remember`; before answering a person, call"
    " `get_context` and put its `notes` in your instructions and its `history` before the new"
    " message. Use `search_memories` to look facts up by meaning, and `add_memory` to keep a"
    " durable fact the conversation revealed."
)

Agent = Annotated[
    str, Field(description="The agent (persona or product): 1-64 characters of a-z 0-9 _ -.")
]
Phone = Annotated[
    str,
    Field(
        description="The person's phone number in international form, e.g. +34600111222 or"
        " +34 600 11 12 22 (stored in E.164)."
    ),
]


def build_mcp(clients: ClientSource) -> MCPServer:
    """The MCP server with the four memory tools; `clients` gives the API client for a call.
    (The tools' annotations are read from this module's globals: Context is imported here.)"""
    server = _quietly(
        lambda: MCPServer(
            "memory-server", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING"
        )
    )

    @server.tool(
        description="Store one turn of the conversation with a person (call it for every"
        " message the person sends and every reply the agent sends). Pass the messaging"
        " provider's message id as event_id: the same event_id again stores nothing twice."
    )
    async def remember(
        agent: Agent,
        phone: Phone,
        role: Annotated[
            Literal["user", "assistant"],
            Field(description="user: the person wrote it; assistant: the agent replied it."),
        ],
        content: Annotated[str, Field(description="The text of the turn (at most 32,000 chars).")],
        ctx: Context,
        event_id: Annotated[
            str | None, Field(description="The provider's message id, for idempotency.")
        ] = None,
    ) -> MessageStored:
        return await _call(
            clients(ctx), lambda c: c.remember(agent, phone, role, content, event_id=event_id)
        )

    @server.tool(
        description="Build the context for the next reply to a person: `notes` (durable facts"
        " about them, labelled as data not instructions, and a summary of older turns) to put"
        " in the model's instructions, and `history` (recent turns, oldest first) to send"
        " before the new message. `opted_out_at`, when set, means the person sent STOP: send"
        " them nothing proactive."
    )
    async def get_context(
        agent: Agent,
        phone: Phone,
        ctx: Context,
        query: Annotated[
            str | None,
            Field(
                description="What the facts should be relevant to; default: the person's"
                " newest message."
            ),
        ] = None,
    ) -> ContextOut:
        return await _call(clients(ctx), lambda c: c.context(agent, phone, query=query))

    @server.tool(
        description="Search an agent's stored memories (facts, preferences, context) by"
        " meaning, best first; give phone to search one person's only."
    )
    async def search_memories(
        agent: Agent,
        query: Annotated[str, Field(description="What to look for, in any language.")],
        ctx: Context,
        phone: Annotated[str | None, Field(description="Only this person's (E.164).")] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="Most results.")] = SEARCH_LIMIT,
    ) -> MemorySearchOut:
        return await _call(
            clients(ctx), lambda c: c.search_memories(agent, query, phone, limit=limit)
        )

    @server.tool(
        description="Keep a durable memory: a fact about a person (with phone) or about the"
        " agent's work in general (without). It is searchable as soon as this returns. The"
        " same memory again (same person, type and content) is not kept twice: the answer is"
        " the one kept already, with stored false."
    )
    async def add_memory(
        agent: Agent,
        content: Annotated[str, Field(description="The memory, one short sentence.")],
        ctx: Context,
        phone: Annotated[str | None, Field(description="The person it is about (E.164).")] = None,
        type: Annotated[
            Literal["fact", "preference", "context"],
            Field(description="fact (default), preference, or context."),
        ] = "fact",
        supersedes: Annotated[
            str | None,
            Field(
                description="The id of the person's current memory this one replaces, when"
                " something changed (moved, new job, new plan): the old one stops being true."
            ),
        ] = None,
    ) -> MemoryCreated:
        extra = {"supersedes": supersedes} if supersedes else {}
        return await _call(
            clients(ctx), lambda c: c.add_memory(agent, content, phone=phone, type=type, **extra)
        )

    return server


class ToolFailed(ToolError):
    """The server refused or failed the call; the MCP client sees this text as a tool error."""


async def _call(
    client: AbstractAsyncContextManager[AsyncMemoryClient],
    request: Callable[[AsyncMemoryClient], Awaitable[T]],
) -> T:
    try:
        async with client as c:
            return await request(c)
    except MemoryServerError as exc:
        raise ToolFailed(_describe(exc)) from None


def _describe(exc: MemoryServerError) -> str:
    why = f"memory server error {exc.status} {exc.code}: {exc.message}"
    if exc.status == 401:
        why += " (the API key is missing, unknown or revoked: check MEMORY_API_KEY)"
    elif exc.status == 403:
        why += " (the API key is valid but not for this agent or action)"
    return why


def _quietly(make: Callable[[], T]) -> T:
    """MCPServer() calls logging.basicConfig; the server's own logging set-up stays as it is."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        return make()
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


# -- stdio: memory-server mcp --------------------------------------------------------------------


def run_stdio(base_url: str, api_key: str | None, timeout: float) -> None:
    """Serve the tools over stdin/stdout, forwarding to the server at base_url, until the
    MCP client closes stdin."""
    import anyio

    async def serve() -> None:
        async with AsyncMemoryClient(base_url, api_key, timeout=timeout) as client:

            @asynccontextmanager
            async def shared(_: Context[Any, Any]) -> AsyncIterator[AsyncMemoryClient]:
                yield client  # one connection pool for the whole session

            await build_mcp(shared).run_stdio_async()

    anyio.run(serve)


# -- streamable HTTP: /mcp on the server itself --------------------------------------------------


class HttpEndpoint:
    """/mcp on the server's own app, as an ASGI endpoint. Stateless (each POST is one
    exchange), so any replica can answer any request. Each tool call goes through the app's
    own routes, in-process, with the caller's key: the same checks as any HTTP call."""

    path = "/mcp"

    def __init__(self, app: ASGIApp, authenticate: Callable[[Scope], None]) -> None:
        self._app = app
        self._authenticate = authenticate
        self._server = build_mcp(self._client_for)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Held for the app's lifetime. The SDK's session manager runs once only, so each
        start of the app makes a new one.

        The manager holds a task group, which must be left in the task that entered it; the
        app's lifespan need not be (`serve` enters it in its start-up task and leaves it in
        the one that answers uvicorn's shutdown, server/startup.py). So the manager runs in a
        task of its own, which this starts and stops."""
        from mcp.server.transport_security import TransportSecuritySettings

        # Keys guard it, not the Host header: behind a proxy the host is the deployment's own.
        self._server.streamable_http_app(
            streamable_http_path=self.path,
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        started = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()

        async def hold() -> None:
            async with self._server.session_manager.run():
                started.set_result(None)
                await stop.wait()

        task = asyncio.create_task(hold(), name="mcp-session-manager")
        await asyncio.wait((task, started), return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # the manager failed to start: raise why
        try:
            yield
        finally:
            stop.set()
            await task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._authenticate(scope)  # 401 in the error shape, before the SDK sees anything
        await self._server.session_manager.asgi_app(scope, receive, send)

    def _client_for(self, ctx: Context[Any, Any]) -> AbstractAsyncContextManager[AsyncMemoryClient]:
        import httpx

        secret = _bearer((ctx.headers or {}).get("authorization", ""))
        # An unexpected error in a route is logged by the app's handler, which answers 500 in
        # the error shape; that answer is the tool's error. Raised into the tool instead, it
        # would reach the caller as "Error executing tool" and be logged a second time.
        transport = httpx.ASGITransport(app=self._app, raise_app_exceptions=False)
        return AsyncMemoryClient(
            "http://memory-server",
            secret or "",  # never None: that would mean "MEMORY_API_KEY of this process"
            retries=0,
            transport=transport,
        )


def with_openapi(build: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """Wrap the app's schema builder so that /openapi.json describes POST /mcp too (it is a
    JSON-RPC endpoint, not a FastAPI route)."""

    from server.errors import UNAUTHORIZED_RESPONSE  # (FastAPI: not for the stdio bridge)

    operation = {**_OPERATION, "responses": {"401": UNAUTHORIZED_RESPONSE, **_RESPONSES}}

    def openapi() -> dict[str, Any]:
        schema = build()  # cached by FastAPI: the same dict every time
        schema["paths"].setdefault(HttpEndpoint.path, {"post": operation})
        schema["components"]["schemas"].setdefault("JsonRpcMessage", _JSON_RPC)
        return schema

    return openapi


_JSON_RPC: dict[str, Any] = {
    "title": "JsonRpcMessage",
    "description": "A JSON-RPC 2.0 message of the Model Context Protocol.",
    "type": "object",
    "required": ["jsonrpc"],
    "properties": {
        "jsonrpc": {"const": "2.0"},
        "id": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
        "method": {"type": "string", "examples": ["tools/list", "tools/call"]},
        "params": {"type": "object"},
        "result": {"type": "object"},
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "integer"}, "message": {"type": "string"}},
        },
    },
}
_RPC_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/JsonRpcMessage"}}}
_ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
_OPERATION: dict[str, Any] = {
    "tags": ["mcp"],
    "summary": "MCP over streamable HTTP",
    "description": "The Model Context Protocol (JSON-RPC 2.0), stateless: each POST carries"
    " one message and its answer is the response body (application/json). Tools: remember,"
    " get_context, search_memories, add_memory (`tools/list` describes them). Any live key"
    " may connect; each tool call is checked like the API call it makes (an agent key may use"
    " its own agent only). A GET (server-sent events) is 405: there is no stream.",
    "operationId": "mcp",
    "requestBody": {"required": True, "content": _RPC_CONTENT},
    "security": [{"HTTPBearer": []}],
}
_RESPONSES: dict[str, Any] = {
    "200": {
        "description": "The JSON-RPC answer (a result, or a JSON-RPC error)",
        "content": _RPC_CONTENT,
    },
    "202": {"description": "A notification or a response, accepted (no body)"},
    "400": {
        "description": "Not a JSON-RPC message (a JSON-RPC error)",
        "content": _RPC_CONTENT,
    },
    "406": {"description": "The Accept header excludes application/json"},
    "415": {"description": "Not application/json (a JSON-RPC error)", "content": _RPC_CONTENT},
    "4XX": {
        "description": "A body too large (413), and other errors, in the error shape",
        "content": _ERROR_CONTENT,
    },
}


def _bearer(header: str) -> str | None:
    scheme, _, secret = header.partition(" ")
    return secret.strip() if scheme.lower() == "bearer" and secret.strip() else None
