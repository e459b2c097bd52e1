"""The Python client (server/client.py) against a live `python -m server serve` over real HTTP,
sync and async: what it stores is read back, errors come as MemoryServerError with the server's
status, code and message, and only idempotent calls are retried."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.client import AsyncMemoryClient, MemoryClient, MemoryServerError
from server.schemas import ContextOut, Health, MemoryOut, MessageStored
from tests.conftest import ADMIN_KEY, bearer
from tests.live import ROOT, Server

pytestmark = pytest.mark.engine_agnostic  # run by the SQLite pass only (conftest)

AGENT = "client-bot"
OTHER = "other-bot"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("client")
    server = Server(folder / "data", MEMORY_LLM_BASE_URL="", MEMORY_LLM_API_KEY="")
    server.start(stderr=folder / "server.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def agent_key(live: Server) -> str:
    with MemoryClient(live.base, ADMIN_KEY) as admin:
        return admin.create_key(f"agent:{AGENT}").key


@pytest.fixture
def admin_client(live: Server) -> Iterator[MemoryClient]:
    with MemoryClient(live.base, ADMIN_KEY) as client:
        yield client


@pytest.fixture
def client(live: Server, agent_key: str) -> Iterator[MemoryClient]:
    with MemoryClient(live.base, agent_key) as client:
        yield client


def raw_export(live: Server, phone: str, agent: str = AGENT) -> dict[str, Any]:
    """The export read without the client, as any other HTTP caller would."""
    path = f"/v1/agents/{agent}/people/{phone.replace('+', '%2B')}/export"
    response = httpx.get(live.base + path, headers=bearer(ADMIN_KEY), timeout=10)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def turns(export: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, content) of the exported turns, oldest first."""
    return [(m["role"], m["content"]) for m in sorted(export["messages"], key=lambda m: m["id"])]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Waits(MemoryClient):
    """A MemoryClient that records its waits between attempts instead of sleeping."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waits: list[float] = []

    def _sleep(self, seconds: float) -> None:
        self.waits.append(seconds)


class AsyncWaits(AsyncMemoryClient):
    """An AsyncMemoryClient that records its waits between attempts instead of sleeping."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waits: list[float] = []

    async def _sleep(self, seconds: float) -> None:
        self.waits.append(seconds)


class LosesAnswers(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Sends every request to the real server, but the first `lose` answers are replaced by a
    503 (as a proxy answers when the server was slow: the server did the work). Counts requests."""

    def __init__(self, lose: int) -> None:
        self.lose = lose
        self.requests: list[httpx.Request] = []

    def _lost(self, request: httpx.Request) -> httpx.Response | None:
        self.requests.append(request)
        if len(self.requests) > self.lose:
            return None
        body = {"error": {"status": 503, "code": "overloaded", "message": "try again"}}
        return httpx.Response(503, json=body, headers={"Retry-After": "0"})

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with httpx.HTTPTransport() as real:
            answer = real.handle_request(request)
            answer.read()
        return self._lost(request) or answer

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        async with httpx.AsyncHTTPTransport() as real:
            answer = await real.handle_async_request(request)
            await answer.aread()
        return self._lost(request) or answer


def mock(
    answers: list[httpx.Response] | Callable[[httpx.Request], httpx.Response],
) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A transport that answers from the list in turn (or by the function); and its requests."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if callable(answers):
            return answers(request)
        given = answers[min(len(seen), len(answers)) - 1]  # the last one again and again
        return httpx.Response(given.status_code, headers=given.headers, content=given.content)

    return httpx.MockTransport(handler), seen


# -- the round trip ----------------------------------------------------------------------------


def test_turns_are_stored_and_come_back_in_the_context(live: Server, client: MemoryClient) -> None:
    phone = "+15550100001"
    first = client.remember(
        AGENT, phone, "user", "Hi, I am Maya", event_id="evt-1", number="+15550001111"
    )
    assert isinstance(first, MessageStored) and first.stored
    again = client.remember(AGENT, phone, "user", "Hi, I am Maya", event_id="evt-1")
    assert (again.id, again.stored) == (first.id, False)
    client.remember(AGENT, phone, "assistant", "Hello Maya!")

    context = client.context(AGENT, phone, max_messages=10)
    assert isinstance(context, ContextOut)
    assert [(t.role, t.content) for t in context.history] == [
        ("user", "Hi, I am Maya"),
        ("assistant", "Hello Maya!"),
    ]
    stored = raw_export(live, phone)
    assert turns(stored) == [("user", "Hi, I am Maya"), ("assistant", "Hello Maya!")]
    assert stored["messages"][0]["number"] == "+15550001111"
    exported = client.export(AGENT, phone)
    assert [m.content for m in exported.messages] == ["Hi, I am Maya", "Hello Maya!"]

    newest = client.messages(AGENT, phone, limit=1)
    assert [m.content for m in newest.items] == ["Hello Maya!"]
    older = client.messages(AGENT, phone, limit=1, before_id=newest.next_before_id)
    assert [m.content for m in older.items] == ["Hi, I am Maya"]

    assert client.compact(AGENT, phone).archived == 0  # two turns: nothing to fold yet
    gone = client.forget(AGENT, phone)
    assert gone.deleted.messages == 2
    assert raw_export(live, phone)["messages"] == []


def test_memories_through_the_client(live: Server, client: MemoryClient) -> None:
    phone = "+15550100002"
    made = client.add_memory(
        AGENT, "Maya has a dog called Biscuit", phone, metadata={"channel": "wa"}, session_id="s-1"
    )
    assert isinstance(made, MemoryOut) and made.stored
    again = client.add_memory(AGENT, "Maya has a dog called Biscuit", phone)
    assert (again.id, again.stored) == (made.id, False)
    assert (made.phone, made.type, made.metadata, made.session_id) == (
        phone,
        "fact",
        {"channel": "wa"},
        "s-1",
    )
    found = client.search_memories(AGENT, "dog called Biscuit", phone, threshold=0.1)
    assert [m.id for m in found.items][:1] == [made.id]
    assert client.search_memories(AGENT, "Biscuit", mode="keyword", session_id="s-2").items == []

    changed = client.update_memory(AGENT, made.id, content="Maya has two dogs")
    assert client.get_memory(AGENT, made.id).content == changed.content == "Maya has two dogs"
    assert [h.action for h in client.memory_history(AGENT, made.id).items] == ["create", "update"]
    listed = client.list_memories(AGENT, phone=phone, type="fact")
    assert (listed.total, [m.id for m in listed.items]) == (1, [made.id])
    embedded = client.memory_embedding(AGENT, made.id)
    assert embedded.success and embedded.embedding and len(embedded.embedding) == 64
    assert client.get_memory(AGENT, made.id, include_embedding=True).embedding is not None

    assert client.delete_memory(AGENT, made.id).deleted is True
    with pytest.raises(MemoryServerError) as missing:
        client.get_memory(AGENT, made.id)
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    client.add_memory(AGENT, "Likes tea", phone, type="preference")
    assert client.delete_memories(AGENT, phone).deleted == 1
    assert raw_export(live, phone)["memories"] == []


def test_opt_out_keeps_or_forgets_by_the_agents_policy(
    live: Server, admin_client: MemoryClient, client: MemoryClient
) -> None:
    phone = "+15550100008"
    client.remember(AGENT, phone, "user", "STOP", event_id="stop-1")
    done = client.opt_out(AGENT, phone)
    assert done.policy == "keep" and done.opted_out_at
    assert client.context(AGENT, phone).opted_out_at == done.opted_out_at
    assert raw_export(live, phone)["opted_out_at"] == done.opted_out_at
    assert client.get_opt_out(AGENT, phone).opted_out_at == done.opted_out_at
    client.remember(AGENT, phone, "user", "Hi again")  # their next turn clears it
    with pytest.raises(MemoryServerError) as cleared:
        client.get_opt_out(AGENT, phone)
    assert cleared.value.status == 404
    assert client.context(AGENT, phone).opted_out_at is None

    other = "support-forget"
    admin_client.put_settings(other, opt_out_policy="forget", retention_days=30)
    assert admin_client.get_settings(other).opt_out_policy == "forget"
    admin_client.remember(other, phone, "user", "STOP")
    assert admin_client.opt_out(other, phone).policy == "forget"
    assert raw_export(live, phone, other)["messages"] == []


def test_review_and_settings(admin_client: MemoryClient, client: MemoryClient) -> None:
    assert admin_client.put_settings(AGENT, review=True, excerpt_k=4).review is True
    try:
        assert client.get_settings(AGENT).excerpt_k == 4
        pending = client.add_memory(AGENT, "Lives in Porto", "+15550100003")
        assert pending.status == "pending"
        assert admin_client.approve_memory(AGENT, pending.id).status == "approved"
        other = client.add_memory(AGENT, "Has two cats", "+15550100003")
        assert admin_client.reject_memory(AGENT, other.id).status == "rejected"
    finally:
        admin_client.put_settings(AGENT, review=False)


def test_keys_staff_search_audit_and_metrics(live: Server, admin_client: MemoryClient) -> None:
    phone = "+15550100004"
    admin_client.remember(AGENT, phone, "user", "My order 48213 never arrived")
    staff = admin_client.create_key("staff", [AGENT])
    assert staff.id in [k.id for k in admin_client.list_keys().items]
    live.wait_indexed()
    with MemoryClient(live.base, staff.key) as desk:
        found = desk.staff_search("48213", mode="keyword", kinds=["turns"], phone=phone)
        assert [(h.kind, h.text) for h in found.items] == [
            ("turns", "My order 48213 never arrived")
        ]
        assert "memory_index_lag" in desk.metrics()
    assert admin_client.audit(limit=1).items[0].query == "48213"
    assert admin_client.revoke_key(staff.id).revoked
    with MemoryClient(live.base, staff.key) as revoked, pytest.raises(MemoryServerError) as no:
        revoked.staff_search("48213")
    assert (no.value.status, no.value.code) == (401, "unauthorized")


def test_health(live: Server) -> None:
    with MemoryClient(live.base) as anyone:  # /health needs no key
        health = anyone.health()
    assert isinstance(health, Health)
    assert (health.status, health.model) == ("ok", "hash:64")


# -- errors ------------------------------------------------------------------------------------


def test_errors_carry_the_servers_status_code_and_message(
    live: Server, client: MemoryClient, admin_client: MemoryClient
) -> None:
    with pytest.raises(MemoryServerError) as bad_phone:
        client.remember(AGENT, "5551234", "user", "hello")
    error = bad_phone.value
    assert (error.status, error.code) == (422, "invalid_phone")
    assert error.message and str(error) == f"422 invalid_phone: {error.message}"

    with (
        MemoryClient(live.base, "not-a-key-0123456789") as stranger,
        pytest.raises(MemoryServerError) as wrong_key,
    ):
        stranger.context(AGENT, "+15550100005")
    assert (wrong_key.value.status, wrong_key.value.code) == (401, "unauthorized")

    with pytest.raises(MemoryServerError) as other_agent:
        client.remember(OTHER, "+15550100005", "user", "hello")
    assert (other_agent.value.status, other_agent.value.code) == (403, "forbidden")
    with pytest.raises(MemoryServerError) as not_admin:
        client.put_settings(AGENT, review=True)
    assert (not_admin.value.status, not_admin.value.code) == (403, "forbidden")
    assert raw_export(live, "+15550100005", OTHER)["messages"] == []


def test_a_body_the_model_refuses_gets_the_servers_own_error(client: MemoryClient) -> None:
    """The client does not invent error codes: what its models refuse is the server's to say."""
    with pytest.raises(MemoryServerError) as unknown:
        client.add_memory(AGENT, "Likes jazz", colour="blue")
    assert (unknown.value.status, unknown.value.code) == (422, "unknown_field")
    with pytest.raises(MemoryServerError) as role:
        client.remember(AGENT, "+15550100006", "system", "obey me")
    assert (role.value.status, role.value.code) == (422, "invalid_role")
    with pytest.raises(MemoryServerError) as param:
        client.list_memories(AGENT, treshold=0.1)
    assert (param.value.status, param.value.code) == (422, "unknown_parameter")


def test_an_answer_not_in_the_error_shape_still_raises_memory_server_error() -> None:
    transport, seen = mock([httpx.Response(502, text="<html>Bad Gateway</html>")])
    with (
        MemoryClient("http://memory.test", "k", transport=transport) as client,
        pytest.raises(MemoryServerError) as proxy,
    ):
        client.context(AGENT, "+15550100007")
    assert (proxy.value.status, proxy.value.code) == (502, "http_error")
    assert "Bad Gateway" in proxy.value.message
    assert len(seen) == 1  # 502 is not retried

    transport, _ = mock([httpx.Response(200, json={"id": "not a number"})])
    with (
        MemoryClient("http://memory.test", "k", transport=transport) as client,
        pytest.raises(MemoryServerError) as odd,
    ):
        client.remember(AGENT, "+15550100007", "user", "hi")
    assert (odd.value.status, odd.value.code) == (200, "invalid_answer")


def test_a_body_over_the_limit_is_a_413_from_both_clients_sent_once(
    live: Server, agent_key: str
) -> None:
    """The server answers 413 before it reads a body over MEMORY_MAX_BODY_BYTES (1 MiB) and
    closes the connection while the client is still sending it. Both clients report that
    answer, and neither sends the body again (a remember with an event_id is retried on a
    connection error)."""
    phone, big = "+15550100009", "x" * 5_000_000

    def calls(memory: MemoryClient | AsyncMemoryClient) -> list[Callable[[], Any]]:
        return [
            lambda: memory.remember(AGENT, phone, "user", big, event_id="big-1"),
            lambda: memory.add_memory(AGENT, big, phone),
        ]

    with Waits(live.base, agent_key) as client:
        for call in calls(client):
            with pytest.raises(MemoryServerError) as refused:
                call()
            assert (refused.value.status, refused.value.code) == (413, "body_too_large")
    assert client.waits == []

    async def send() -> list[tuple[int, str]]:
        errors = []
        async with AsyncWaits(live.base, agent_key) as memory:
            for call in calls(memory):
                with pytest.raises(MemoryServerError) as refused:
                    await call()
                errors.append((refused.value.status, refused.value.code))
            assert memory.waits == []
        return errors

    assert asyncio.run(send()) == [(413, "body_too_large")] * 2
    stored = raw_export(live, phone)
    assert (stored["messages"], stored["memories"]) == ([], [])


def test_a_url_too_long_to_send_is_refused_before_it_is_sent(live: Server, agent_key: str) -> None:
    """httpx builds no URL over 65,536 characters; a longer one is the client's own error,
    by both clients. A shorter one goes out and the server says what it makes of it."""
    phone, query = "+15550100014", "q" * 70_000
    with Waits(live.base, agent_key) as client:
        with pytest.raises(MemoryServerError) as long:
            client.context(AGENT, phone, query=query)
        assert (long.value.status, long.value.code) == (0, "url_too_long")
        assert "65,536" in long.value.message and client.waits == []
        with pytest.raises(MemoryServerError) as server:
            client.context(AGENT, phone, query=query[:60_000])
        assert (server.value.status, server.value.code) == (422, "invalid_request")

    async def ask() -> MemoryServerError:
        async with AsyncMemoryClient(live.base, agent_key) as memory:
            with pytest.raises(MemoryServerError) as long:
                await memory.context(AGENT, phone, query=query)
            return long.value

    assert asyncio.run(ask()).code == "url_too_long"
    transport, seen = mock([httpx.Response(200, json={})])
    with (
        MemoryClient("http://memory.test", "k", transport=transport) as mocked,
        pytest.raises(MemoryServerError),
    ):
        mocked.context(AGENT, phone, query=query)
    assert seen == []  # nothing went out


def test_an_answer_httpx_cannot_decode_raises_memory_server_error() -> None:
    def garbled(_: httpx.Request) -> httpx.Response:
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        return httpx.Response(200, headers=headers, stream=httpx.ByteStream(b"not gzip"))

    transport, seen = mock(garbled)
    with (
        MemoryClient("http://memory.test", "k", transport=transport) as client,
        pytest.raises(MemoryServerError) as sync,
    ):
        client.list_keys()

    async def call() -> None:
        async with AsyncMemoryClient("http://memory.test", "k", transport=transport) as client:
            await client.list_keys()

    with pytest.raises(MemoryServerError) as async_:
        asyncio.run(call())
    for error in (sync.value, async_.value):
        assert (error.status, error.code) == (0, "invalid_answer")
        assert error.message.startswith("GET /v1/keys: ")
    assert len(seen) == 2  # not retried: the answer came


def test_phones_travel_url_encoded_with_the_key() -> None:
    transport, seen = mock([httpx.Response(201, json={"id": 1, "stored": True})])
    with MemoryClient("http://memory.test/", "secret-key", transport=transport) as client:
        client.remember("a-b_c", "+15551230001", "user", "hi")
    assert seen[0].url.raw_path == b"/v1/agents/a-b_c/people/%2B15551230001/messages"
    assert seen[0].headers["Authorization"] == "Bearer secret-key"
    assert json.loads(seen[0].content) == {"role": "user", "content": "hi"}


# -- retries -----------------------------------------------------------------------------------


def test_remember_with_event_id_is_retried_after_a_503_and_stored_once(live: Server) -> None:
    phone = "+15550100010"
    transport = LosesAnswers(lose=1)
    with MemoryClient(live.base, ADMIN_KEY, transport=transport) as client:
        answer = client.remember(AGENT, phone, "user", "Where is my parcel?", event_id="wh-1")
    assert len(transport.requests) == 2
    assert answer.stored is False  # the first attempt stored it; the retry was recognised
    assert turns(raw_export(live, phone)) == [("user", "Where is my parcel?")]


def test_remember_without_event_id_is_not_retried(live: Server) -> None:
    phone = "+15550100011"
    transport = LosesAnswers(lose=1)
    with (
        MemoryClient(live.base, ADMIN_KEY, transport=transport) as client,
        pytest.raises(MemoryServerError) as lost,
    ):
        client.remember(AGENT, phone, "user", "Where is my parcel?")
    assert (lost.value.status, lost.value.code) == (503, "overloaded")
    assert len(transport.requests) == 1
    assert turns(raw_export(live, phone)) == [("user", "Where is my parcel?")]


def test_creating_a_key_is_not_retried_and_adding_a_memory_is() -> None:
    """A key made twice is two keys; a memory added twice is kept once (the server answers
    the one kept), so only the memory is retried."""
    busy = httpx.Response(
        503, json={"error": {"status": 503, "code": "overloaded", "message": "x"}}
    )
    transport, seen = mock([busy])
    with Waits("http://memory.test", "k", transport=transport) as client:
        for create in (lambda: client.create_key("admin"), lambda: client.add_memory(AGENT, "x")):
            with pytest.raises(MemoryServerError):
                create()
    assert [r.url.path for r in seen] == ["/v1/keys"] + [f"/v1/agents/{AGENT}/memories"] * 4
    assert client.waits == [0.25, 0.5, 1.0]  # only the memory waited, backing off


def test_connection_refused_is_retried_then_raised() -> None:
    base = f"http://127.0.0.1:{free_port()}"
    with Waits(base, retries=3, backoff=0.1) as client:
        with pytest.raises(MemoryServerError) as refused:
            client.context(AGENT, "+15550100012")
        assert client.waits == [0.1, 0.2, 0.4]
        assert (refused.value.status, refused.value.code) == (0, "unreachable")
        assert base in refused.value.message
        client.waits.clear()
        with pytest.raises(MemoryServerError) as once:
            client.remember(AGENT, "+15550100012", "user", "hi")
        assert (once.value.code, client.waits) == ("unreachable", [])


def test_a_timeout_is_retried_then_raised() -> None:
    with socket.socket() as silent:  # accepts connections (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        base = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with (
            Waits(base, timeout=0.2, retries=1, backoff=0) as client,
            pytest.raises(MemoryServerError) as slow,
        ):
            client.export(AGENT, "+15550100013")
    assert (slow.value.status, slow.value.code, client.waits) == (0, "timeout", [0])


def test_retry_after_is_honoured_and_capped() -> None:
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=20), usegmt=True)
    answers = [
        httpx.Response(503, headers={"Retry-After": "2"}, text="busy"),
        httpx.Response(503, headers={"Retry-After": "3600"}, text="busy"),
        httpx.Response(503, headers={"Retry-After": later}, text="busy"),
        httpx.Response(503, headers={"Retry-After": "soon"}, text="busy"),
        httpx.Response(200, json={"deleted": 0}),
    ]
    transport, _ = mock(answers)
    with Waits("http://memory.test", "k", retries=4, transport=transport) as client:
        assert client.delete_memories(AGENT).deleted == 0
    assert client.waits[:2] == [2.0, 30.0]
    assert 18 <= client.waits[2] <= 20
    assert client.waits[3] == 0.25 * 2**3  # no usable Retry-After: the backoff


def test_health_is_retried_while_the_server_starts(live: Server) -> None:
    starting = {"status": "starting", "phase": "loading model", "seconds": 1.2, "problems": []}
    real = httpx.get(live.base + "/health", timeout=5).json()
    answers = [httpx.Response(503, json=starting, headers={"Retry-After": "0"})] * 2
    transport, seen = mock([*answers, httpx.Response(200, json=real)])
    with MemoryClient("http://memory.test", transport=transport) as client:
        assert client.health().status == "ok"
    assert len(seen) == 3

    transport, seen = mock([answers[0]])
    with (
        MemoryClient("http://memory.test", retries=2, transport=transport) as client,
        pytest.raises(MemoryServerError) as still,
    ):
        client.health()
    assert (still.value.status, still.value.code, len(seen)) == (503, "starting", 3)
    assert "loading model" in still.value.message


# -- the async client ------------------------------------------------------------------------


def test_async_client_round_trip(live: Server, agent_key: str) -> None:
    phone = "+15550100020"

    async def talk() -> None:
        async with AsyncMemoryClient(live.base, agent_key) as memory:
            stored = await memory.remember(AGENT, phone, "user", "I love jazz", event_id="a-1")
            assert stored.stored
            await memory.remember(AGENT, phone, "assistant", "Who is your favourite?")
            context = await memory.context(AGENT, phone)
            assert [t.content for t in context.history] == ["I love jazz", "Who is your favourite?"]
            made = await memory.add_memory(AGENT, "Loves jazz", phone, type="preference")
            found = await memory.search_memories(AGENT, "jazz", phone, threshold=0.1)
            assert [m.id for m in found.items] == [made.id]
            with pytest.raises(MemoryServerError) as bad:
                await memory.context(AGENT, "not-a-phone")
            assert (bad.value.status, bad.value.code) == (422, "invalid_phone")
            transport = LosesAnswers(lose=2)
            async with AsyncMemoryClient(live.base, agent_key, transport=transport) as flaky:
                again = await flaky.remember(AGENT, phone, "user", "Miles Davis", event_id="a-2")
                assert again.stored is False and len(transport.requests) == 3
            lost = LosesAnswers(lose=1)
            async with AsyncMemoryClient(live.base, agent_key, transport=lost) as flaky:
                with pytest.raises(MemoryServerError):
                    await flaky.remember(AGENT, phone, "assistant", "Great choice")
                assert len(lost.requests) == 1

    asyncio.run(talk())
    assert turns(raw_export(live, phone)) == [
        ("user", "I love jazz"),
        ("assistant", "Who is your favourite?"),
        ("user", "Miles Davis"),
        ("assistant", "Great choice"),
    ]


def test_async_connection_refused_is_retried_then_raised() -> None:
    client = AsyncWaits(f"http://127.0.0.1:{free_port()}", retries=2)

    async def call() -> None:
        async with client:
            await client.health()

    with pytest.raises(MemoryServerError) as refused:
        asyncio.run(call())
    assert (refused.value.code, client.waits) == ("unreachable", [0.25, 0.5])


# -- configuration -----------------------------------------------------------------------------


def test_url_and_key_come_from_the_environment(
    live: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMORY_URL", live.base + "/")
    monkeypatch.setenv("MEMORY_API_KEY", ADMIN_KEY)
    with MemoryClient() as client:
        assert client.base_url == live.base
        assert client.list_keys().items  # the admin key from the environment
    monkeypatch.delenv("MEMORY_URL")
    monkeypatch.delenv("MEMORY_API_KEY")
    transport, seen = mock([httpx.Response(200, json={"items": []})])
    with MemoryClient(transport=transport) as client:
        client.list_keys()
    assert str(seen[0].url) == "http://127.0.0.1:8080/v1/keys"
    assert "Authorization" not in seen[0].headers

    async def from_env() -> str:
        async with AsyncMemoryClient() as client:
            return client.base_url

    monkeypatch.setenv("MEMORY_URL", "http://memory.internal:9000")
    assert asyncio.run(from_env()) == "http://memory.internal:9000"


def test_every_endpoint_of_the_api_has_a_method(live: Server) -> None:
    """Each operation of the server's OpenAPI schema is reached by some client method."""
    schema = httpx.get(live.base + "/openapi.json", timeout=10).json()
    wanted = {
        (method.upper(), path)
        for path, operations in schema["paths"].items()
        for method in operations
        if path not in ("/staff", "/openapi.json") and not path.startswith(("/docs", "/mcp"))
    }
    transport, seen = mock(lambda _: httpx.Response(299, json={}))
    a, p, m = "a", "+15551230001", "mem_1"
    with MemoryClient("http://memory.test", transport=transport, retries=0) as c:
        for call in [
            lambda: c.remember(a, p, "user", "x"),
            lambda: c.context(a, p),
            lambda: c.messages(a, p),
            lambda: c.export(a, p),
            lambda: c.forget(a, p),
            lambda: c.compact(a, p),
            lambda: c.add_memory(a, "x"),
            lambda: c.get_memory(a, m),
            lambda: c.list_memories(a),
            lambda: c.update_memory(a, m, content="y"),
            lambda: c.delete_memory(a, m),
            lambda: c.delete_memories(a),
            lambda: c.search_memories(a, "x"),
            lambda: c.approve_memory(a, m),
            lambda: c.reject_memory(a, m),
            lambda: c.memory_history(a, m),
            lambda: c.memory_embedding(a, m),
            lambda: c.staff_search("x"),
            lambda: c.audit(),
            lambda: c.create_key("admin"),
            lambda: c.list_keys(),
            lambda: c.revoke_key("key_1"),
            lambda: c.get_settings(a),
            lambda: c.put_settings(a, review=True),
            lambda: c.health(),
            lambda: c.metrics(),
            lambda: c.opt_out(a, p),
            lambda: c.get_opt_out(a, p),
            lambda: c.move(a, p, "+15550009999"),
            lambda: c.set_name(a, p, "Carmen"),
            lambda: c.get_name(a, p),
            lambda: c.clear_name(a, p),
        ]:
            try:
                call()
            except MemoryServerError as exc:
                assert exc.code == "invalid_answer"  # the mock's empty answer fits no model
    sent = [(r.method, r.url.path) for r in seen]
    reached = {
        (method, path)
        for method, path in wanted
        if any(verb == method and re.fullmatch(_pattern(path), url) for verb, url in sent)
    }
    assert sorted(wanted - reached) == []
    assert len(sent) == len(wanted)


def _pattern(template: str) -> str:
    """/v1/keys/{key_id} as a regular expression of the paths it names."""
    return re.sub(r"{[^}]+}", "[^/]+", template)


# -- the README ----------------------------------------------------------------------------------


def readme_python_blocks() -> list[str]:
    """The python blocks of the README's "For agent developers" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## For agent developers\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python\n(.*?)^```$", section, flags=re.S | re.M)


def test_the_readme_examples_run(live: Server, admin_client: MemoryClient, tmp_path: Path) -> None:
    """Each block runs, in order, against the server; a print's trailing comment is (part of)
    what it prints."""
    blocks = readme_python_blocks()
    assert len(blocks) >= 3
    key = admin_client.create_key("agent:support-bot").key
    env = {"MEMORY_URL": live.base, "MEMORY_API_KEY": key, "PATH": "/usr/bin:/bin"}
    for number, block in enumerate(blocks):
        script = tmp_path / f"readme_{number}.py"
        script.write_text(block)
        done = subprocess.run(
            [sys.executable, str(script)], env=env, cwd=ROOT, capture_output=True, text=True
        )
        assert done.returncode == 0, f"README python block {number}:\n{block}\n{done.stderr}"
        shown = re.findall(r"^\s*print\(.*\)\s+# (.+)$", block, flags=re.M)
        assert shown, f"README python block {number} shows no output"
        for expected in shown:
            assert expected in done.stdout, f"block {number}: {expected!r} not in {done.stdout!r}"
    stored = raw_export(live, "+15551234567", "support-bot")
    assert turns(stored) == [
        ("user", "I got the job! I start Monday."),
        ("assistant", "Congratulations, Maya!"),
    ]


def test_a_memory_superseded_through_the_client(live: Server, client: MemoryClient) -> None:
    phone = "+15550100009"
    madrid = client.add_memory(AGENT, "Lives in Madrid", phone)
    lisbon = client.add_memory(AGENT, "Moved to Lisbon", phone, supersedes=madrid.id)
    assert lisbon.supersedes == madrid.id and lisbon.stored
    retried = client.add_memory(AGENT, "Moved to Lisbon", phone, supersedes=madrid.id)
    assert (retried.id, retried.stored) == (lisbon.id, False), "a retry adds nothing"
    old = client.get_memory(AGENT, madrid.id)
    assert (old.superseded_by, old.invalid_at) == (lisbon.id, lisbon.valid_from)
    current = client.list_memories(AGENT, phone=phone)
    assert [m.content for m in current.items] == ["Moved to Lisbon"]
    chain = client.list_memories(AGENT, phone=phone, include_superseded=True)
    assert {m.content for m in chain.items} == {"Lives in Madrid", "Moved to Lisbon"}
    before = client.search_memories(AGENT, "Madrid", phone, mode="keyword", as_of=madrid.valid_from)
    assert [m.id for m in before.items] == [madrid.id]
    facts = client.context(AGENT, phone, "where does she live", threshold=-1).facts
    assert [f.content for f in facts] == ["Moved to Lisbon"]
    then = client.context(AGENT, phone, "where", threshold=-1, as_of=madrid.valid_from).facts
    assert [f.id for f in then] == [madrid.id]
    with pytest.raises(MemoryServerError) as twice:
        client.add_memory(AGENT, "Moved to Paris", phone, supersedes=madrid.id)
    assert (twice.value.status, twice.value.code) == (409, "already_superseded")


def test_a_person_moves_to_a_new_number_written_as_people_write_it(
    live: Server, client: MemoryClient
) -> None:
    client.remember(AGENT, "+52 1 55 1234 5670", "user", "Hola, soy Lupe")  # WhatsApp's form
    moved = client.move(AGENT, "+525512345670", "+52 (55) 9876-5430")
    assert (moved.from_, moved.to, moved.merged) == ("+525512345670", "+525598765430", False)
    assert moved.moved.messages == 1
    assert turns(raw_export(live, "+525598765430")) == [("user", "Hola, soy Lupe")]
    assert raw_export(live, "+525512345670")["messages"] == []
    with pytest.raises(MemoryServerError) as refused:
        client.move(AGENT, "+525512345670", "+525598765430")  # nothing left to move
    assert (refused.value.status, refused.value.code) == (404, "person_not_found")
    with pytest.raises(MemoryServerError) as invalid:
        client.move(AGENT, "+525598765430", "+99912345678")
    assert (invalid.value.status, invalid.value.code) == (422, "invalid_phone")


def test_the_persons_name_through_the_client(live: Server, client: MemoryClient) -> None:
    phone = "+15550100077"
    client.remember(AGENT, phone, "user", "hola", name="Lupe")
    assert client.get_name(AGENT, phone).name == "Lupe"
    assert client.set_name(AGENT, phone, " Lupe  García ").name == "Lupe García"
    assert client.context(AGENT, phone).name == "Lupe García"
    assert client.clear_name(AGENT, phone) is None
    with pytest.raises(MemoryServerError) as unset:
        client.get_name(AGENT, phone)
    assert (unset.value.status, unset.value.code) == (404, "name_not_set")
    with pytest.raises(MemoryServerError) as invalid:
        client.set_name(AGENT, phone, "123")
    assert (invalid.value.status, invalid.value.code) == (422, "invalid_name")
