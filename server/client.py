"""The typed HTTP client of the memory server, sync and async, on the server's own models.

    from server.client import MemoryClient

    with MemoryClient() as memory:  # MEMORY_URL (default http://127.0.0.1:8080), MEMORY_API_KEY
        memory.remember("support-bot", "+15551234567", "user", "Hi!", event_id="evt-1")
        context = memory.context("support-bot", "+15551234567")  # a ContextOut

Every endpoint is described once, as a `_Call` (method, path, query, JSON body, how to read the
answer, idempotent or not) made by a function below. Request bodies are checked against the
server's request models and answers are validated with its response models (server/schemas.py),
so the two cannot drift. `MemoryClient` and `AsyncMemoryClient` differ only in how they send a
request and how they sleep between attempts; an async method returns an awaitable.

Errors: every failure raises `MemoryServerError(status, code, message)`.
- A non-2xx answer: the server's status, code and message from its error shape; code
  `http_error` when the body is not that shape (a proxy's page), the health check's status
  (`starting`) for /health while the server starts. An answer the server gives before it has
  read the whole request (413 `body_too_large` for a body over MEMORY_MAX_BODY_BYTES) is that
  answer too, and is not retried (the async client over https may still lose it: see "hearing
  an answer" below).
- A call that cannot be sent: status 0, code `url_too_long` (its path and query over 65,536
  characters, the most httpx sends: a context `query` that long, say; the server takes 4,000)
  or `invalid_url` (another URL httpx refuses).
- No answer after the retries: status 0, code `unreachable` (connection refused or reset, no
  such host) or `timeout`.
- An answer that cannot be read: code `invalid_answer`, with the status of a 2xx that does not
  fit its model, or status 0 when httpx cannot decode the body (its Content-Encoding).

Retries: idempotent calls (every GET, PUT and DELETE, the two searches, forget, opt-out,
remember with an event_id, which the server stores once, and adding a memory, which the server
does not store twice) are retried up to `retries` times on 503 and on connection errors and
timeouts, after the answer's Retry-After (at most 30 s) or else backoff * 2**n seconds (at most
8 s). Other calls (remember without an event_id, creating a key, compaction, review) are sent
once: a retry could do them twice.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import os
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, ParamSpec, Self, TypeVar, overload
from urllib.parse import quote

import anyio
import httpcore
import httpx
from anyio.abc import TaskStatus
from pydantic import BaseModel, ValidationError

from server.schemas import (
    AgentSettingsIn,
    AgentSettingsOut,
    AuditList,
    CompactOut,
    ContextOut,
    EmbeddingOut,
    ExportOut,
    ForgetOut,
    Health,
    KeyCreate,
    KeyCreated,
    KeyList,
    KeyRevoked,
    MemoriesCleared,
    MemoryCreate,
    MemoryCreated,
    MemoryDeleted,
    MemoryHistoryOut,
    MemoryList,
    MemoryOut,
    MemorySearch,
    MemorySearchOut,
    MemoryUpdate,
    MemoryWithEmbedding,
    MessageCreate,
    MessagePage,
    MessageStored,
    MoveOut,
    OptOutOut,
    PersonNameIn,
    PersonNameOut,
    StaffSearchIn,
    StaffSearchOut,
)

__all__ = ["AsyncMemoryClient", "MemoryClient", "MemoryServerError"]

DEFAULT_URL = "http://127.0.0.1:8080"
MAX_BACKOFF_S = 8.0
MAX_RETRY_AFTER_S = 30.0
# httpx builds no URL, and no part of one, longer than this (httpx.InvalidURL).
MAX_URL_CHARS = 65_536

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
P = ParamSpec("P")


class MemoryServerError(Exception):
    """Any failure of a call: `status` (0 when no answer was read), `code` and `message`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(status, code, message)
        self.status = status
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


# -- one call, described once ------------------------------------------------------------------


@dataclass(frozen=True)
class _Call(Generic[T]):
    method: str
    path: str
    read: Callable[[httpx.Response], T]
    params: dict[str, Any] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    idempotent: bool = False


def _json(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: model.model_validate(response.json())


def _text(response: httpx.Response) -> str:
    return response.text


def _nothing(response: httpx.Response) -> None:
    return None


def _segment(value: str) -> str:
    """A path segment, URL-encoded: a phone's `+` travels as %2B."""
    return quote(str(value), safe="")


def _person(agent: str, phone: str) -> str:
    return f"/v1/agents/{_segment(agent)}/people/{_segment(phone)}"


def _memories(agent: str, memory_id: str | None = None) -> str:
    path = f"/v1/agents/{_segment(agent)}/memories"
    return f"{path}/{_segment(memory_id)}" if memory_id is not None else path


def _given(**values: Any) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


def _body(model: type[BaseModel], values: dict[str, Any]) -> dict[str, Any]:
    """The JSON body as the server's request model writes it. A body the model refuses is sent
    as it is: the server refuses it the same way and its error (status, code, message) is the
    one the caller gets, as with any other client."""
    try:
        return model.model_validate(values).model_dump(mode="json", exclude_unset=True)
    except ValidationError:
        return values


# -- the endpoints -----------------------------------------------------------------------------


def _remember(
    agent: str,
    phone: str,
    role: str,
    content: str,
    event_id: str | None = None,
    *,
    number: str | None = None,
    created_at: str | None = None,
    name: str | None = None,
) -> _Call[MessageStored]:
    """Store one turn (role "user" or "assistant"). With an event_id the same event again
    stores nothing (`stored` false), so this call is retried only when it has one. A `name`
    (the person's WhatsApp profile name) becomes theirs when it differs from the stored one."""
    values = _given(
        role=role,
        content=content,
        event_id=event_id,
        number=number,
        created_at=created_at,
        name=name,
    )
    return _Call(
        "POST",
        _person(agent, phone) + "/messages",
        _json(MessageStored),
        body=_body(MessageCreate, values),
        idempotent=event_id is not None,
    )


def _context(
    agent: str,
    phone: str,
    query: str | None = None,
    *,
    budget_chars: int | None = None,
    max_messages: int | None = None,
    k: int | None = None,
    threshold: float | None = None,
    excerpt_k: int | None = None,
    excerpt_threshold: float | None = None,
    excerpt_mode: str | None = None,
    excerpt_budget_chars: int | None = None,
    as_of: str | None = None,
) -> _Call[ContextOut]:
    """The context for the next model call: `notes` for its instructions, `history` as input.
    With `as_of` (an ISO time), the facts true then instead of now."""
    params = _given(
        query=query,
        budget_chars=budget_chars,
        max_messages=max_messages,
        k=k,
        threshold=threshold,
        excerpt_k=excerpt_k,
        excerpt_threshold=excerpt_threshold,
        excerpt_mode=excerpt_mode,
        excerpt_budget_chars=excerpt_budget_chars,
        as_of=as_of,
    )
    return _Call(
        "GET", _person(agent, phone) + "/context", _json(ContextOut), params, idempotent=True
    )


def _messages(
    agent: str,
    phone: str,
    *,
    limit: int | None = None,
    before_id: int | None = None,
    after_id: int | None = None,
) -> _Call[MessagePage]:
    """Recent and archived turns, newest first, a page at a time."""
    params = _given(limit=limit, before_id=before_id, after_id=after_id)
    return _Call(
        "GET", _person(agent, phone) + "/messages", _json(MessagePage), params, idempotent=True
    )


def _export(agent: str, phone: str) -> _Call[ExportOut]:
    """Everything stored about the person for this agent."""
    return _Call("GET", _person(agent, phone) + "/export", _json(ExportOut), idempotent=True)


def _forget(agent: str, phone: str) -> _Call[ForgetOut]:
    """Erase the person: turns, summary, memories and their history, vectors."""
    return _Call("DELETE", _person(agent, phone), _json(ForgetOut), idempotent=True)


def _move(agent: str, phone: str, to: str) -> _Call[MoveOut]:
    """The person changed number: everything stored about them moves to `to` (merged if it
    has memory already). Not retried: a move that went through leaves nothing to move (404)."""
    return _Call("POST", _person(agent, phone) + "/move", _json(MoveOut), body={"to": to})


def _set_name(agent: str, phone: str, name: str) -> _Call[PersonNameOut]:
    """Set the name the agent knows the person by (retried: the same name changes nothing)."""
    body = _body(PersonNameIn, {"name": name})
    return _Call(
        "PUT", _person(agent, phone) + "/name", _json(PersonNameOut), body=body, idempotent=True
    )


def _get_name(agent: str, phone: str) -> _Call[PersonNameOut]:
    """The person's name; MemoryServerError 404 (name_not_set) when none is set."""
    return _Call("GET", _person(agent, phone) + "/name", _json(PersonNameOut), idempotent=True)


def _clear_name(agent: str, phone: str) -> _Call[None]:
    """Clear the person's name."""
    return _Call("DELETE", _person(agent, phone) + "/name", _nothing, idempotent=True)


def _compact(agent: str, phone: str) -> _Call[CompactOut]:
    """Archive all but the newest turns now (summary and facts with a model)."""
    return _Call("POST", _person(agent, phone) + "/compact", _json(CompactOut))


def _opt_out(agent: str, phone: str) -> _Call[OptOutOut]:
    """The person opted out (STOP). With the agent's opt_out_policy forget they are forgotten
    as by forget(); with keep (the default) `opted_out_at` shows in their context and export
    until their next user turn. Retried: a second opt-out changes nothing more."""
    return _Call("POST", _person(agent, phone) + "/opt-out", _json(OptOutOut), idempotent=True)


def _get_opt_out(agent: str, phone: str) -> _Call[OptOutOut]:
    """When the person opted out, while they are; MemoryServerError 404 when they are not."""
    return _Call("GET", _person(agent, phone) + "/opt-out", _json(OptOutOut), idempotent=True)


def _add_memory(
    agent: str, content: str, phone: str | None = None, type: str = "fact", **fields: Any
) -> _Call[MemoryCreated]:
    """Add a memory (fields: confidence, metadata, session_id, task_id, graph_id, and
    supersedes: the id of the current memory it replaces); it is searchable when the call
    returns. An identical current memory is not stored twice: its
    answer is that one, with `stored` false; so a retry adds nothing and the call is retried."""
    values = {"content": content, "type": type, **_given(phone=phone), **fields}
    body = _body(MemoryCreate, values)
    return _Call("POST", _memories(agent), _json(MemoryCreated), body=body, idempotent=True)


def _get_memory(
    agent: str, memory_id: str, *, include_embedding: bool = False
) -> _Call[MemoryWithEmbedding]:
    """One memory; with include_embedding also its vector (None until it is indexed)."""
    params = {"include_embedding": "true"} if include_embedding else {}
    read = _json(MemoryWithEmbedding)
    return _Call("GET", _memories(agent, memory_id), read, params, idempotent=True)


def _list_memories(agent: str, **filters: Any) -> _Call[MemoryList]:
    """Memories of the agent; filters: phone, status, type, session_id, task_id, graph_id,
    start_date, end_date, limit, offset, order_by, order, include_superseded, and as_of (an
    earlier page's mark, or an ISO time: the memories true then)."""
    return _Call("GET", _memories(agent), _json(MemoryList), _given(**filters), idempotent=True)


def _update_memory(
    agent: str,
    memory_id: str,
    *,
    content: str | None = None,
    metadata: dict[str, Any] | None = None,
    type: str | None = None,
) -> _Call[MemoryOut]:
    """Change content (re-embedded before the answer), metadata or type."""
    values = _given(content=content, metadata=metadata, type=type)
    body = _body(MemoryUpdate, values)
    return _Call("PATCH", _memories(agent, memory_id), _json(MemoryOut), body=body)


def _delete_memory(agent: str, memory_id: str) -> _Call[MemoryDeleted]:
    return _Call("DELETE", _memories(agent, memory_id), _json(MemoryDeleted), idempotent=True)


def _delete_memories(agent: str, phone: str | None = None) -> _Call[MemoriesCleared]:
    """Delete every memory of the agent, or of one person."""
    params = _given(phone=phone)
    return _Call("DELETE", _memories(agent), _json(MemoriesCleared), params, idempotent=True)


def _search_memories(
    agent: str,
    query: str,
    phone: str | None = None,
    *,
    limit: int | None = None,
    threshold: float | None = None,
    **filters: Any,
) -> _Call[MemorySearchOut]:
    """Memories by meaning, words or both, best first; filters: mode, start_date, end_date,
    status, type, session_id, task_id, graph_id, metadata, as_of (an ISO time: the memories
    true then), include_superseded."""
    values = {"query": query, **_given(phone=phone, limit=limit, threshold=threshold), **filters}
    body = _body(MemorySearch, values)
    return _Call(
        "POST", _memories(agent) + "/search", _json(MemorySearchOut), body=body, idempotent=True
    )


def _approve_memory(agent: str, memory_id: str) -> _Call[MemoryOut]:
    """Approve a pending memory (admin)."""
    return _Call("POST", _memories(agent, memory_id) + "/approve", _json(MemoryOut))


def _reject_memory(agent: str, memory_id: str) -> _Call[MemoryOut]:
    """Reject a memory (admin): it never reaches a context."""
    return _Call("POST", _memories(agent, memory_id) + "/reject", _json(MemoryOut))


def _memory_history(agent: str, memory_id: str) -> _Call[MemoryHistoryOut]:
    """Every change of the memory, oldest first."""
    path = _memories(agent, memory_id) + "/history"
    return _Call("GET", path, _json(MemoryHistoryOut), idempotent=True)


def _memory_embedding(agent: str, memory_id: str) -> _Call[EmbeddingOut]:
    """Embed the memory again with the current model; the answer holds the vector."""
    return _Call("POST", _memories(agent, memory_id) + "/embedding", _json(EmbeddingOut))


def _staff_search(
    query: str,
    *,
    agents: list[str] | None = None,
    phone: str | None = None,
    kinds: list[str] | None = None,
    mode: str | None = None,
    since: str | None = None,
    until: str | None = None,
    limit: int | None = None,
    threshold: float | None = None,
    offset: int | None = None,
    min_relevance: float | None = None,
) -> _Call[StaffSearchOut]:
    """Facts, turns and summaries across the agents the key may read (staff or admin)."""
    values = _given(
        query=query,
        agents=agents,
        phone=phone,
        kinds=kinds,
        mode=mode,
        since=since,
        until=until,
        limit=limit,
        threshold=threshold,
        offset=offset,
        min_relevance=min_relevance,
    )
    body = _body(StaffSearchIn, values)
    return _Call("POST", "/v1/search", _json(StaffSearchOut), body=body, idempotent=True)


def _audit(*, limit: int | None = None, before_id: int | None = None) -> _Call[AuditList]:
    """The staff searches made, newest first (admin)."""
    params = _given(limit=limit, before_id=before_id)
    return _Call("GET", "/v1/audit", _json(AuditList), params, idempotent=True)


def _create_key(scope: str, agents: list[str] | None = None) -> _Call[KeyCreated]:
    """A new key (admin); its secret is in this answer only. Not retried."""
    body = _body(KeyCreate, _given(scope=scope, agents=agents))
    return _Call("POST", "/v1/keys", _json(KeyCreated), body=body)


def _list_keys() -> _Call[KeyList]:
    return _Call("GET", "/v1/keys", _json(KeyList), idempotent=True)


def _revoke_key(key_id: str) -> _Call[KeyRevoked]:
    return _Call("DELETE", f"/v1/keys/{_segment(key_id)}", _json(KeyRevoked), idempotent=True)


def _get_settings(agent: str) -> _Call[AgentSettingsOut]:
    """The agent's effective settings."""
    path = f"/v1/agents/{_segment(agent)}/settings"
    return _Call("GET", path, _json(AgentSettingsOut), idempotent=True)


def _put_settings(agent: str, **changes: Any) -> _Call[AgentSettingsOut]:
    """Override some of the agent's settings (admin); the others keep their value."""
    path = f"/v1/agents/{_segment(agent)}/settings"
    body = _body(AgentSettingsIn, changes)
    return _Call("PUT", path, _json(AgentSettingsOut), body=body, idempotent=True)


def _health() -> _Call[Health]:
    """Liveness, model, index lag; retried while the server answers 503 starting."""
    return _Call("GET", "/health", _json(Health), idempotent=True)


def _metrics() -> _Call[str]:
    """Prometheus text (admin or staff key)."""
    return _Call("GET", "/metrics", _text, idempotent=True)


# -- sending -----------------------------------------------------------------------------------


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header: a number of seconds or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _error_of(response: httpx.Response) -> MemoryServerError:
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            return MemoryServerError(status, error["code"], str(error.get("message", "")))
        if isinstance(body.get("status"), str):  # /health while starting, or failed to start
            state = body["status"]
            detail = "; ".join(str(p) for p in body.get("problems") or []) or body.get("phase")
            message = f"the server is {state}" + (f" ({detail})" if detail else "")
            return MemoryServerError(status, state, message)
    text = response.text.strip()[:500] or response.reason_phrase
    return MemoryServerError(status, "http_error", text)


def _no_answer(call: _Call[Any], url: str, error: httpx.TransportError) -> MemoryServerError:
    code = "timeout" if isinstance(error, httpx.TimeoutException) else "unreachable"
    detail = str(error) or type(error).__name__
    return MemoryServerError(0, code, f"{call.method} {url}{call.path}: {detail}")


def _unusable(call: _Call[Any], error: httpx.HTTPError | httpx.InvalidURL) -> MemoryServerError:
    """httpx's failures other than a transport's: a URL it refuses to build, an answer whose
    body it cannot decode."""
    code = "invalid_url" if isinstance(error, httpx.InvalidURL) else "invalid_answer"
    detail = str(error) or type(error).__name__
    return MemoryServerError(0, code, f"{call.method} {call.path}: {detail}")


def _check_length(call: _Call[Any]) -> None:
    """url_too_long for a URL httpx would refuse, said before anything is sent. Shorter ones
    go out: the server says what it makes of them (a 422 for a context query over 4,000
    characters)."""
    query = str(httpx.QueryParams(call.params))
    length = len(call.path) + (len(query) + 1 if query else 0)
    if length > MAX_URL_CHARS:
        message = (
            f"{call.method} {call.path}: its path and query would be {length:,} characters,"
            f" over the {MAX_URL_CHARS:,} that can be sent"
        )
        raise MemoryServerError(0, "url_too_long", message)


# -- hearing an answer the server gives before the request's end -------------------------------
#
# The server answers some requests before it has read their body, and closes the connection:
# 413 for a body over its limit (also 401 without a live key, 408, 503 overloaded). The client
# is then still sending, and its write fails. httpcore reads the answer after a failed write,
# and the sync transport finds it (the kernel keeps it). Over asyncio it is gone: anyio's stream
# reads only while a read is awaited, and asyncio closes the socket as soon as a write fails,
# with the answer unread. The async client took the 413 for an unreachable server (ReadError)
# and, for an idempotent call, sent the whole body again on each retry. So the async client's
# connections listen while they write, and keep what they hear for the response.

_READ_SIZE = 64 * 1024


class _ListeningStream(httpcore.AsyncNetworkStream):
    """A connection that reads while it writes; what it read comes first at the next reads."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream
        self._heard: deque[bytes] = deque()
        self._ended = False  # the server closed, or the connection broke: nothing more to hear

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if not self._heard:
            return await self._stream.read(max_bytes, timeout)
        data = self._heard.popleft()
        if len(data) > max_bytes:
            self._heard.appendleft(data[max_bytes:])
        return data[:max_bytes]

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        async with anyio.create_task_group() as group:
            if not self._ended:
                # Listening before the first byte goes: asyncio runs the read callbacks of an
                # event loop turn before its write callbacks, so what arrived before a write
                # fails is read first, but only if the read was asked for in an earlier turn.
                await group.start(self._listen)
            # Raised outside the task group, which would wrap it in an ExceptionGroup.
            failure = await _failure_of(self._stream.write(buffer, timeout))
            group.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _listen(self, *, task_status: TaskStatus[None]) -> None:
        """Reads until the write is over (cancelled then) or the server closes."""
        task_status.started()  # the read below asks for data before this task first waits
        while not self._ended:
            try:
                data = await self._stream.read(_READ_SIZE)
            except httpcore.ReadError:
                self._ended = True  # the next read meets the broken connection itself
                return
            self._heard.append(data)
            self._ended = not data

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        # Not wrapped: anyio's TLS stream sends from a read (pending TLS records), and two
        # tasks sending at once on one socket is an error. Over TLS an early answer can still
        # be lost.
        return await self._stream.start_tls(ssl_context, server_hostname, timeout)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


async def _failure_of(work: Awaitable[None]) -> Exception | None:
    try:
        await work
    except Exception as exc:
        return exc
    return None


class _ListeningBackend(httpcore.AsyncNetworkBackend):
    """httpcore's anyio backend, with connections that listen while they write."""

    def __init__(self) -> None:
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        return _ListeningStream(stream)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_unix_socket(path, timeout, socket_options)
        return _ListeningStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)  # httpx's default


def _listening_transport() -> httpx.AsyncHTTPTransport:
    """httpx's async transport, on connections that listen while they write."""
    ssl_context = httpx.create_ssl_context()  # some 20 ms: made once for both
    transport = httpx.AsyncHTTPTransport(verify=ssl_context, limits=_LIMITS)
    # httpx takes no network backend: the pool it made is made again, the same but for ours.
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=ssl_context,
        max_connections=_LIMITS.max_connections,
        max_keepalive_connections=_LIMITS.max_keepalive_connections,
        keepalive_expiry=_LIMITS.keepalive_expiry,
        network_backend=_ListeningBackend(),
    )
    return transport


class _Endpoint(Generic[P, T]):
    """One endpoint on the clients: on MemoryClient a method answering T, on
    AsyncMemoryClient a method answering an awaitable of T."""

    def __init__(self, build: Callable[P, _Call[T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, client: MemoryClient, owner: type[Any]) -> Callable[P, T]: ...

    @overload
    def __get__(
        self, client: AsyncMemoryClient, owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(self, client: _Client | None, owner: type[Any]) -> Any:
        if client is None:
            return self
        build, send = self.build, client._send

        @functools.wraps(build)
        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return send(build(*args, **kwargs))

        method.__name__ = method.__qualname__ = self.name
        return method


class _Client(ABC):
    """The surface of both clients, each endpoint described once."""

    remember = _Endpoint(_remember)
    context = _Endpoint(_context)
    messages = _Endpoint(_messages)
    export = _Endpoint(_export)
    forget = _Endpoint(_forget)
    move = _Endpoint(_move)
    set_name = _Endpoint(_set_name)
    get_name = _Endpoint(_get_name)
    clear_name = _Endpoint(_clear_name)
    compact = _Endpoint(_compact)
    opt_out = _Endpoint(_opt_out)
    get_opt_out = _Endpoint(_get_opt_out)
    add_memory = _Endpoint(_add_memory)
    get_memory = _Endpoint(_get_memory)
    list_memories = _Endpoint(_list_memories)
    update_memory = _Endpoint(_update_memory)
    delete_memory = _Endpoint(_delete_memory)
    delete_memories = _Endpoint(_delete_memories)
    search_memories = _Endpoint(_search_memories)
    approve_memory = _Endpoint(_approve_memory)
    reject_memory = _Endpoint(_reject_memory)
    memory_history = _Endpoint(_memory_history)
    memory_embedding = _Endpoint(_memory_embedding)
    staff_search = _Endpoint(_staff_search)
    audit = _Endpoint(_audit)
    create_key = _Endpoint(_create_key)
    list_keys = _Endpoint(_list_keys)
    revoke_key = _Endpoint(_revoke_key)
    get_settings = _Endpoint(_get_settings)
    put_settings = _Endpoint(_put_settings)
    health = _Endpoint(_health)
    metrics = _Endpoint(_metrics)

    def __init__(
        self, base_url: str | None, api_key: str | None, retries: int, backoff: float
    ) -> None:
        self.base_url = (base_url or os.environ.get("MEMORY_URL") or DEFAULT_URL).rstrip("/")
        key = api_key if api_key is not None else os.environ.get("MEMORY_API_KEY")
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.retries = retries
        self.backoff = backoff

    @abstractmethod
    def _send(self, call: _Call[Any]) -> Any:
        """Send the call, retrying as _wait says: MemoryClient blocks, AsyncMemoryClient
        returns an awaitable."""

    def _wait(
        self, call: _Call[Any], attempt: int, outcome: httpx.Response | httpx.TransportError
    ) -> float | None:
        """Seconds to wait before trying again, or None when this outcome is the answer."""
        if not call.idempotent or attempt >= self.retries:
            return None
        if isinstance(outcome, httpx.Response):
            if outcome.status_code != 503:
                return None
            after = _retry_after(outcome.headers.get("retry-after"))
            if after is not None:
                return min(after, MAX_RETRY_AFTER_S)
        return min(self.backoff * 2.0**attempt, MAX_BACKOFF_S)

    def _answer(self, call: _Call[T], outcome: httpx.Response | httpx.TransportError) -> T:
        if isinstance(outcome, httpx.TransportError):
            raise _no_answer(call, self.base_url, outcome) from outcome
        if not outcome.is_success:
            raise _error_of(outcome)
        try:
            return call.read(outcome)
        except ValueError as exc:  # not JSON, or not the model (ValidationError)
            raise MemoryServerError(
                outcome.status_code, "invalid_answer", f"{call.method} {call.path}: {exc}"
            ) from exc

    @staticmethod
    def _request(call: _Call[Any]) -> dict[str, Any]:
        """The arguments of build_request, once the call is known to fit in a URL."""
        _check_length(call)
        return {"method": call.method, "url": call.path, "params": call.params, "json": call.body}

    @staticmethod
    @contextmanager
    def _httpx_failures(call: _Call[Any]) -> Iterator[None]:
        """httpx's other failures as MemoryServerError (a transport's is the retry loop's), so
        that callers catch one exception type. httpx.InvalidURL is no httpx.HTTPError."""
        try:
            yield
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise _unusable(call, exc) from exc


class MemoryClient(_Client):
    """The memory server over HTTP. `base_url` defaults to MEMORY_URL, else
    http://127.0.0.1:8080; `api_key` to MEMORY_API_KEY. Every method raises MemoryServerError
    on failure; see the module docstring for retries."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.25,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, api_key, retries, backoff)
        self._http = httpx.Client(
            base_url=self.base_url, headers=self._headers, timeout=timeout, transport=transport
        )

    def _send(self, call: _Call[T]) -> T:
        with self._httpx_failures(call):
            request = self._http.build_request(**self._request(call))
            attempt = 0
            while True:
                try:
                    outcome: httpx.Response | httpx.TransportError = self._http.send(request)
                except httpx.TransportError as exc:
                    outcome = exc
                wait = self._wait(call, attempt, outcome)
                if wait is None:
                    return self._answer(call, outcome)
                self._sleep(wait)
                attempt += 1

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class AsyncMemoryClient(_Client):
    """MemoryClient for asyncio: the same methods, each returning an awaitable. Its own
    transport (when none is given) hears an answer the server sends before the request's end,
    as MemoryClient's does (see "hearing an answer" above)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.25,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(base_url, api_key, retries, backoff)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=self._headers,
            timeout=timeout,
            transport=transport if transport is not None else _listening_transport(),
        )

    async def _send(self, call: _Call[T]) -> T:
        with self._httpx_failures(call):
            request = self._http.build_request(**self._request(call))
            attempt = 0
            while True:
                try:
                    outcome: httpx.Response | httpx.TransportError = await self._http.send(request)
                except httpx.TransportError as exc:
                    outcome = exc
                wait = self._wait(call, attempt, outcome)
                if wait is None:
                    return self._answer(call, outcome)
                await self._sleep(wait)
                attempt += 1

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()
