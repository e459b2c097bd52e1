"""Builds the FastAPI app: opens the stores, mounts the routers, renders every error alike."""

from __future__ import annotations

import functools
import gc
import json
import logging
import math
import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import anyio
from fastapi import Depends, FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from embeddings.calibration import calibration_for
from embeddings.e5 import E5_ENGINE, E5Encoder, is_e5_model
from embeddings.encoder import CachedEncoder, Encoder, SentenceEncoder
from embeddings.hashing import hash_encoder, is_hash_model
from embeddings.index import READABLE_VERSIONS, VectorIndex, table_name, table_names
from server import __version__
from server.agent_settings import AgentSettings
from server.auth import KeyRing
from server.clock import Clock, utc_now
from server.compaction import Compaction
from server.config import Settings
from server.conversation import MemoryService
from server.deps import Services, bearer_secret
from server.errors import (
    ApiError,
    BodyTooLarge,
    error_body,
    field_code,
    install_error_handlers,
)
from server.hooks import Hooks
from server.indexer import ACTIVE_MODEL, ACTIVE_TABLE, Indexer, VectorSpace, queue_missing
from server.llm import OpenAICompatible
from server.memory_book import MemoryBook
from server.retention import Retention
from server.routes import (
    agents,
    context,
    docs,
    keys,
    memories,
    messages,
    ops,
    search,
    staff,
    strict,
)
from server.search import StaffSearch
from server.serving import ServingLock
from server.store import Store
from server.upgrade import Upgrade
from server.vectors import lance_location

log = logging.getLogger(__name__)


EncoderFactory = Callable[[str], Encoder]


def default_encoder_factory(
    settings: Settings, *, say: Callable[[str], None] | None = None
) -> EncoderFactory:
    """Models by name. The default model's ONNX files are built the first time (about a
    minute; `say` hears each step)."""

    def load(model: str) -> Encoder:
        if is_hash_model(model):  # "hash:<dim>": no model at all, for drills and smoke runs
            return hash_encoder(model)
        if model == E5_ENGINE:
            return E5Encoder(batch_size=settings.embedding_batch_size)
        if is_e5_model(model):
            from embeddings.e5_onnx import OnnxE5Encoder, ensure_built

            folder = ensure_built(settings.model_cache, say=say)
            return OnnxE5Encoder(folder, threads=settings.embedding_threads)
        return SentenceEncoder(model, batch_size=settings.embedding_batch_size)

    return load


def open_space(
    settings: Settings, store: Store, encoder: Encoder, *, name: str | None = None
) -> VectorSpace:
    """The model's own table. A new table is filled from SQLite in the background through the
    outbox, so changing the model never mixes vectors; a table that differs from SQLite (it
    missed writes while another model was active, or while a reindex built it under traffic)
    gets what it lacks queued."""
    index = VectorIndex(lance_location(settings, store), encoder.name, encoder.dim, name=name)
    if index.created:
        queued = store.enqueue_everything()
    elif index.count() != store.count_sources():
        queued = queue_missing(store, index)
    else:
        queued = 0
    if queued:
        log.info("index %s: %d items queued for embedding", index.name, queued)
    return VectorSpace(encoder=CachedEncoder(encoder), index=index)


def _serving_table(store: Store, model: str, dim: int, present: set[str]) -> str | None:
    """The table this folder was last served from: as recorded, or (a folder from before the
    record) the newest readable table of its model."""
    recorded = store.meta(ACTIVE_TABLE)
    if recorded:
        return recorded if recorded in present else None
    for version in READABLE_VERSIONS:
        if table_name(model, dim, version) in present:
            return table_name(model, dim, version)
    return None


def _previous_space(
    settings: Settings, store: Store, load: EncoderFactory, wanted: Encoder
) -> tuple[VectorSpace, VectorIndex] | None:
    """The space this folder was last served from, when it is not the configured model's
    current table (another model, or the same model's table of an older version) and it holds
    this folder's items: the server answers from it while the current table is built
    (server/upgrade.py). None: no upgrade to make (a new folder, the current table already,
    an empty old table, or an old model that cannot be loaded). With it, the current table,
    opened to see whether it is complete already."""
    previous = store.meta(ACTIVE_MODEL)
    if not previous or store.count_sources() == 0:
        return None
    wanted_table = table_name(wanted.name, wanted.dim)
    if previous == wanted.name:
        encoder = wanted
    else:
        try:
            encoder = load(previous)
        except Exception:
            log.warning(
                "previous model %s cannot be loaded: switching to %s at once, its table"
                " filling in the background",
                previous,
                wanted.name,
                exc_info=True,
            )
            return None
    location = lance_location(settings, store)
    present = set(table_names(location))
    serving = _serving_table(store, encoder.name, encoder.dim, present)
    if serving is None or serving == wanted_table:
        return None
    space = open_space(settings, store, encoder, name=serving)
    if space.index.count() == 0:
        return None
    target = VectorIndex(location, wanted.name, wanted.dim)
    if not target.created and target.count() == store.count_sources():
        return None  # the configured model's table is complete already (a finished reindex)
    store.set_meta(ACTIVE_TABLE, serving)  # a restart during the build serves from it again
    return space, target


def open_services(
    settings: Settings,
    *,
    clock: Clock = utc_now,
    encoder_factory: EncoderFactory | None = None,
    before_ack: Callable[[], None] | None = None,
    hooks: Hooks | None = None,
    progress: Callable[[str], None] | None = None,
    follow_folder: bool = False,
) -> Services:
    """Open the stores, the model and the index, and build the services (also for the CLI).
    Tests pass hooks to drive races at named points (see server/hooks.py); `progress` hears
    each step (serve logs it, and /health shows it while starting). With follow_folder (the
    CLI's forget and compact), the model and table the folder is served with, whatever the
    configured model: a command run with another MEMORY_EMBEDDING_MODEL must not move a
    running server to it, nor start a model upgrade."""
    hooks = hooks or Hooks()
    step = progress or (lambda _: None)
    where = "(PostgreSQL)" if settings.database_url else f"in {settings.data_dir}"
    step(f"opening the database {where}")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = Store.open(settings, clock=clock)
    load = encoder_factory or default_encoder_factory(settings, say=step)
    served = store.meta(ACTIVE_MODEL) if follow_folder else None
    step(f"loading the model {served or settings.embedding_model}")
    wanted = load(served or settings.embedding_model)
    location = lance_location(settings, store)
    step(f"opening the vector index in {location}")
    serving = None
    if served:  # the folder's own model and table, left recorded as they are
        table = store.meta(ACTIVE_TABLE)
        named = table if table in table_names(location) else None
        space = open_space(settings, store, wanted, name=named)
    elif (serving := _previous_space(settings, store, load, wanted)) is None:
        space = open_space(settings, store, wanted)
        store.set_meta(ACTIVE_MODEL, space.encoder.name)
        store.set_meta(ACTIVE_TABLE, space.index.name)
    else:  # answer from the previous model's table while the new one is built
        space = serving[0]
    indexer = Indexer(
        store,
        space,
        switch_to=lambda model: open_space(settings, store, load(model)),
        batch_size=settings.indexer_batch_size,
        interval_s=settings.indexer_interval_s,
        optimize_every=settings.index_optimize_every,
        before_ack=before_ack,
        turn_window=settings.turn_window,
        hooks=hooks,
        # The server's indexer loop runs in one replica at a time; a command's runs alone.
        lease=None if follow_folder else store.lease("indexer", settings.data_dir),
    )
    calibration = lambda: calibration_for(indexer.space.encoder.name)  # noqa: E731
    compaction = Compaction(
        store,
        indexer,
        AgentSettings(store, settings, calibration),
        OpenAICompatible(settings) if settings.llm_enabled else None,
        duplicate_threshold=settings.duplicate_threshold,
        clock=clock,
        backoff_s=settings.compact_backoff_s,
        hooks=hooks,
    )
    memory = MemoryService(store, settings, indexer, compaction, clock=clock, hooks=hooks)
    finished = memory.finish_erasures()  # forgets a crash cut short, before anything is served
    if finished:
        step(f"finished {finished} forgets that were cut short")
    moved = memory.finish_moves()  # moves a crash cut short: the old number purged
    if moved:
        step(f"finished {moved} moves that were cut short")
    folded, _ = memory.fold_phone_numbers()  # once per database (README, "Phone numbers")
    if folded:
        step(f"folded {folded} people's numbers into the form they have everywhere else")
    repaired = store.repair_chains()  # memory chains an older release left broken (issue 39)
    if repaired:
        step(f"repaired the memory chains of {repaired} people")
    upgrade = None
    if serving is not None:
        target = VectorSpace(encoder=CachedEncoder(wanted), index=serving[1])
        upgrade = Upgrade(store, indexer, target, turn_window=settings.turn_window, hooks=hooks)
    return Services(
        upgrade=upgrade,
        settings=settings,
        store=store,
        keys=KeyRing(store, settings.admin_key),
        memory=memory,
        indexer=indexer,
        compaction=compaction,
        book=MemoryBook(
            store, indexer, AgentSettings(store, settings, calibration), clock=clock, hooks=hooks
        ),
        search=StaffSearch(store, indexer, person_ranking=memory.ranked_turns, hooks=hooks),
    )


def create_app(
    settings: Settings,
    *,
    clock: Clock = utc_now,
    encoder_factory: EncoderFactory | None = None,
    run_workers: bool = True,
    hooks: Hooks | None = None,
    progress: Callable[[str], None] | None = None,
) -> FastAPI:
    """The ASGI app. Stores, model, indexer and compaction open at start-up and close at
    shutdown. Tests pass a fake encoder_factory, and run_workers=False to drive the background
    work (indexing, compaction) by hand."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        serving = ServingLock(settings.data_dir)  # `restore` refuses while it is held
        serving.acquire()
        # In a worker thread: the event loop stays free to answer while the model loads
        # (server/startup.py answers /health "starting" meanwhile).
        try:
            services = await anyio.to_thread.run_sync(
                functools.partial(
                    open_services,
                    settings,
                    clock=clock,
                    encoder_factory=encoder_factory,
                    hooks=hooks,
                    progress=progress,
                )
            )
        except BaseException:
            serving.release()
            raise
        app.state.services = services
        retention = app.state.retention = Retention.of(services, clock=clock)
        if run_workers:
            services.indexer.start()
            services.compaction.start()
            if services.upgrade is not None:
                services.upgrade.start()
            retention.start()  # a sweep now, then every MEMORY_RETENTION_SWEEP_S
        log.info(
            "memory server %s ready: data in %s, model %s",
            __version__,
            settings.data_dir,
            services.indexer.space.encoder.name,
        )
        try:
            async with mcp_endpoint.running():
                yield
        finally:
            retention.stop()
            if services.upgrade is not None:
                services.upgrade.stop()
            services.compaction.stop()
            services.indexer.stop()
            services.memory.close()
            services.store.close()
            serving.release()

    app = FastAPI(
        title="Memory server",
        version=__version__,
        description="Conversation memory for AI agents: turns, context, facts, forgetting.",
        lifespan=lifespan,
        # JSON is the only body format, so a body without a Content-Type is read as JSON.
        strict_content_type=False,
        # No 307 to a "parent" path: DELETE .../memories/%2F must never become DELETE .../memories.
        redirect_slashes=False,
        # /docs is the one documentation page, served offline (server/routes/docs.py); no
        # second one, no OAuth2 redirect to secure.
        docs_url=None,
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
        dependencies=[Depends(strict.refuse_unknown_query)],
    )
    install_error_handlers(app)
    docs.install(app)
    routers = (
        ops.router,
        keys.router,
        messages.router,
        context.router,
        agents.router,
        memories.router,
        search.router,
        staff.router,
    )
    for router in routers:
        app.include_router(router)
    # MCP over streamable HTTP, with the same bearer keys (server/mcp_server.py).
    from starlette.routing import Route

    from server.mcp_server import HttpEndpoint, with_openapi

    mcp_endpoint = HttpEndpoint(app, _authenticate)
    # POST only: stateless, so no event stream to GET and no session to DELETE (405).
    app.router.routes.append(Route(HttpEndpoint.path, mcp_endpoint, methods=["POST"]))
    app.openapi = with_openapi(app.openapi)  # type: ignore[method-assign]
    app.add_middleware(
        BodyLimit,
        max_bytes=settings.max_body_bytes,
        timeout_s=settings.body_timeout_s,
        max_in_flight=settings.max_connections,
    )
    return app


class BodyLimit:
    """Guards the app against bodies it should not read or wait for. Beyond `max_in_flight`
    requests at once the answer is 503 overloaded. A body method that announces a body needs a
    live key before a byte of it is read (401 at once). A body over the limit is 413, whether
    announced by Content-Length or streamed; one that has not arrived in full `timeout_s` after
    the first read is 408. A JSON body no route should see is 422, or 413 when it holds more
    values than any route takes (see strict_json_problem).
    Every early answer closes the connection, so the unread rest is never taken for a request."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float, max_in_flight: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.max_in_flight = max_in_flight
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            log.warning("overloaded: %d requests in flight, answering 503", self.in_flight)
            message = f"more than {self.max_in_flight} requests at once; retry shortly"
            await _send_error(send, 503, "overloaded", message, close=True)
            return
        self.in_flight += 1
        try:
            await self._guard(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _guard(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        try:
            length = int(declared) if declared is not None else None
        except ValueError:
            length = None
        if length is not None and length > self.max_bytes:
            await _refuse(send, self.max_bytes, close=True)
            return
        announced = bool(length) or b"transfer-encoding" in headers
        needs_key = scope.get("method") in _BODY_METHODS
        if announced and not needs_key:
            # No GET or DELETE of this API takes a body: refused unread, so nobody can make
            # the server buffer one without a key.
            method = scope.get("method")
            message = f"{method} takes no request body"
            await _send_error(send, 400, "unexpected_body", message, close=True)
            return
        if needs_key and announced:
            needs_key = False
            # The key first: without one the answer is 401 whatever the body holds, as for
            # every other request, and a keyless client cannot make the server wait or buffer.
            try:
                _authenticate(scope)
            except ApiError as exc:
                await _send_error(send, exc.status, exc.code, exc.message, exc.headers, close=True)
                return
        try:
            with anyio.fail_after(self.timeout_s):
                body = await _read_body(receive, self.max_bytes)
        except TimeoutError:
            message = f"the request body did not arrive within {self.timeout_s:g} s"
            await _send_error(send, 408, "body_timeout", message, close=True)
            return
        except BodyTooLarge:
            await _refuse(send, self.max_bytes, close=True)
            return
        if body is None:
            return  # the client went away
        if body:
            scope = _as_json(scope)
            if needs_key:  # a body that came unannounced (an ASGI client may send one)
                try:
                    _authenticate(scope)
                except ApiError as exc:
                    await _send_error(send, exc.status, exc.code, exc.message, exc.headers)
                    return
            if scope.get("method") in _BODY_METHODS:
                problem = strict_json_problem(body)
                if problem is not None:
                    await _send_error(send, *problem)
                    return
        await self.app(scope, _replay(body, receive), send)


async def _read_body(receive: Receive, max_bytes: int) -> bytes | None:
    """The whole body, or None when the client disconnects; BodyTooLarge past max_bytes."""
    body = bytearray()
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body.extend(message.get("body", b""))
        if len(body) > max_bytes:
            raise BodyTooLarge(f"request body is larger than {max_bytes} bytes")
        more = message.get("more_body", False)
    return bytes(body)


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _authenticate(scope: Scope) -> None:
    """Raises Unauthorized unless the request carries a live key (every body-taking endpoint
    needs one)."""
    header = dict(scope.get("headers") or []).get(b"authorization", b"")
    services: Services = scope["app"].state.services
    services.keys.authenticate(bearer_secret(header.decode("latin-1")))


MAX_JSON_DEPTH = 64
# More values (arrays, objects and the items between commas) than any body of this API holds:
# the largest, a memory with metadata of the default 16 KiB, holds a few thousand. A megabyte
# of "[[],[],...]" is a quarter of a million: parsing it cost a second of CPU on the event
# loop (mostly the garbage collector's passes over the new lists), so it is counted first.
MAX_JSON_VALUES = 20_000
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_RAW_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")  # U+D800-DFFF as UTF-8 bytes: Python decodes it


class _NotStrictJson(Exception):
    pass


def strict_json_problem(body: bytes) -> tuple[int, str, str] | None:
    """Why a body that parses as JSON must still be refused, as (status, code, message), else
    None.

    Python's parser accepts what no route should see: NaN and Infinity (not JSON), numbers that
    overflow to infinity, duplicate keys (which one wins?), nesting deep enough to exhaust the
    stack, and keys or strings with lone surrogates, escaped or as raw bytes, which cannot be
    stored or sent back as UTF-8 (a metadata value with one used to be stored, then failed
    every read with a 500). More than MAX_JSON_VALUES values is 413. A body that is not JSON
    at all is left to the route, which answers 400 or 422 as before."""
    if _more_values_than(body, MAX_JSON_VALUES):
        message = f"request body holds more than {MAX_JSON_VALUES} JSON values"
        return 413, "too_many_json_values", message
    try:
        value = json.loads(
            body,
            parse_constant=_no_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except _NotStrictJson as exc:
        return 422, "invalid_json", str(exc)
    except RecursionError:
        return 422, "invalid_json", f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    except ValueError:
        return None
    brackets = body.count(b"[") + body.count(b"{")
    if (
        brackets <= MAX_JSON_DEPTH
        and b"\\u" not in body
        and b"\x00" not in body
        and not _RAW_SURROGATE.search(body)
    ):
        return None  # no escape, NUL or raw surrogate: no bad text; too few brackets for depth
    for path, depth, text in _walk(value):
        if depth > MAX_JSON_DEPTH:
            return 422, "invalid_json", f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
        if text is not None and (why := _bad_text(text)):
            code = field_code(path[0]) if path else "invalid_request"
            return 422, code, f"{_label(path)}: {why}"
    return None


def _more_values_than(body: bytes, limit: int) -> bool:
    """Whether a JSON body holds more than limit values, counted without building them: the
    commas and opening brackets outside strings. Commas in text count only when there are
    more marks than the limit in all: then a parse without the garbage collector (a few
    milliseconds a megabyte) proves the body is JSON, and the strings, which then start at the
    quotes a left-to-right scan meets, are cut out in one pass."""
    if body.count(b",") + body.count(b"[") + body.count(b"{") <= limit:
        return False
    try:
        with _collector_paused():
            json.loads(body)
    except (ValueError, RecursionError):
        return False  # not JSON (or too deep): the strict parse says why
    structure = _JSON_STRING.sub(b"", body)
    return structure.count(b",") + structure.count(b"[") + structure.count(b"{") > limit


@contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _no_constant(name: str) -> float:
    raise _NotStrictJson(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise _NotStrictJson(f"number out of range: {text[:40]}")
    return number


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _NotStrictJson(f"duplicate key {_label((key,))!r} in a JSON object")
            seen.add(key)
    return obj


def _walk(value: object) -> Iterator[tuple[tuple[str, ...], int, str | None]]:
    """(path, depth, text) for every container (text None), key and string, without recursion."""
    stack: list[tuple[object, tuple[str, ...], int]] = [(value, (), 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, dict):
            yield path, depth + 1, None
            for key, item in node.items():
                yield (*path, key), depth + 1, key
                stack.append((item, (*path, key), depth + 1))
        elif isinstance(node, list):
            yield path, depth + 1, None
            stack.extend((item, (*path, str(i)), depth + 1) for i, item in enumerate(node))
        elif isinstance(node, str):
            yield path, depth, node


def _bad_text(text: str) -> str | None:
    if "\x00" in text:  # (no person writes one, and PostgreSQL cannot store one)
        return "contains a NUL character (U+0000), which is not stored"
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate, which is not valid Unicode text"
    return None


def _label(path: tuple[str, ...]) -> str:
    """A JSON path for a message: printable ASCII, short."""
    label = ".".join(
        part if part.isascii() and part.isprintable() else ascii(part) for part in path
    )
    return (label or "body")[:200]


def _as_json(scope: Scope) -> Scope:
    """Every body of this API is JSON: read it as JSON whatever Content-Type the client sent
    (curl -d sends application/x-www-form-urlencoded)."""
    headers = [(k, v) for k, v in scope.get("headers", []) if k != b"content-type"]
    headers.append((b"content-type", b"application/json"))
    return {**scope, "headers": headers}


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _refuse(send: Send, max_bytes: int, *, close: bool = False) -> None:
    message = f"request body is larger than {max_bytes} bytes"
    await _send_error(send, 413, "body_too_large", message, close=close)


async def _send_error(
    send: Send,
    status: int,
    code: str,
    message: str,
    extra: dict[str, str] | None = None,
    *,
    close: bool = False,
) -> None:
    """The one error shape, with the error's own headers (a 401's WWW-Authenticate); close=True
    when the body was not read to its end."""
    payload = json.dumps(error_body(status, code, message)).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        *((name.lower().encode(), value.encode()) for name, value in (extra or {}).items()),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
