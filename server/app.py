"""Builds the FastAPI app: opens the stores, mounts the routers, renders every error alike."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from embeddings.encoder import CachedEncoder, Encoder, SentenceEncoder
from embeddings.hashing import hash_encoder, is_hash_model
from embeddings.index import VectorIndex
from server import __version__
from server.agent_settings import AgentSettings
from server.auth import KeyRing
from server.clock import Clock, utc_now
from server.compaction import Compaction
from server.config import Settings
from server.deps import Services
from server.errors import error_body, install_error_handlers
from server.indexer import ACTIVE_MODEL, Indexer, VectorSpace
from server.llm import OpenAICompatible
from server.memories import MemoryBook
from server.memory import MemoryService
from server.routes import agents, context, keys, memories, messages, ops, search, staff
from server.search import StaffSearch
from server.store import Store

log = logging.getLogger(__name__)


EncoderFactory = Callable[[str], Encoder]


def default_encoder_factory(settings: Settings) -> EncoderFactory:
    def load(model: str) -> Encoder:
        if is_hash_model(model):  # "hash:<dim>": no model at all, for drills and smoke runs
            return hash_encoder(model)
        return SentenceEncoder(model, batch_size=settings.embedding_batch_size)

    return load


def open_space(settings: Settings, store: Store, encoder: Encoder) -> VectorSpace:
    """The model's own table. A table that is new, or behind SQLite while nothing is queued
    (it missed writes while another model was active), is refilled from SQLite in the
    background through the outbox, so changing the model never mixes vectors."""
    index = VectorIndex(settings.lance_path, encoder.name, encoder.dim)
    behind = store.outbox_size() == 0 and index.count() != store.count_sources()
    if (index.created or behind) and (queued := store.enqueue_everything()):
        log.info("index %s: %d items queued for embedding", index.name, queued)
    return VectorSpace(encoder=CachedEncoder(encoder), index=index)


def open_services(
    settings: Settings,
    *,
    clock: Clock = utc_now,
    encoder_factory: EncoderFactory | None = None,
    before_ack: Callable[[], None] | None = None,
) -> Services:
    """Open the stores, the model and the index, and build the services (also for the CLI)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = Store(
        settings.sqlite_path,
        busy_timeout_ms=settings.busy_timeout_ms,
        clock=clock,
        synchronous=settings.sqlite_synchronous,
    )
    load = encoder_factory or default_encoder_factory(settings)
    space = open_space(settings, store, load(settings.embedding_model))
    store.set_meta(ACTIVE_MODEL, settings.embedding_model)
    indexer = Indexer(
        store,
        space,
        switch_to=lambda model: open_space(settings, store, load(model)),
        batch_size=settings.indexer_batch_size,
        interval_s=settings.indexer_interval_s,
        optimize_every=settings.index_optimize_every,
        before_ack=before_ack,
    )
    compaction = Compaction(
        store,
        indexer,
        AgentSettings(store, settings),
        OpenAICompatible(settings) if settings.llm_enabled else None,
        duplicate_threshold=settings.duplicate_threshold,
        clock=clock,
        backoff_s=settings.compact_backoff_s,
    )
    return Services(
        settings=settings,
        store=store,
        keys=KeyRing(store, settings.admin_key),
        memory=MemoryService(store, settings, indexer, compaction, clock=clock),
        indexer=indexer,
        compaction=compaction,
        book=MemoryBook(store, indexer, AgentSettings(store, settings), clock=clock),
        search=StaffSearch(store, indexer),
    )


def create_app(
    settings: Settings,
    *,
    clock: Clock = utc_now,
    encoder_factory: EncoderFactory | None = None,
    run_workers: bool = True,
) -> FastAPI:
    """The ASGI app. Stores, model, indexer and compaction open at start-up and close at
    shutdown. Tests pass a fake encoder_factory, and run_workers=False to drive the background
    work (indexing, compaction) by hand."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services = open_services(settings, clock=clock, encoder_factory=encoder_factory)
        app.state.services = services
        if run_workers:
            services.indexer.start()
            services.compaction.start()
        log.info(
            "memory server %s ready: data in %s, model %s",
            __version__,
            settings.data_dir,
            services.indexer.space.encoder.name,
        )
        try:
            yield
        finally:
            services.compaction.stop()
            services.indexer.stop()
            services.memory.close()
            services.store.close()

    app = FastAPI(
        title="Memory server",
        version=__version__,
        description="Conversation memory for AI agents: turns, context, facts, forgetting.",
        lifespan=lifespan,
        # JSON is the only body format, so a body without a Content-Type is read as JSON.
        strict_content_type=False,
    )
    install_error_handlers(app)
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
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    return app


class BodyLimit:
    """Refuses bodies over the limit with 413, whether announced by Content-Length or streamed."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_bytes
            except ValueError:
                too_big = False
            if too_big:
                await _refuse(send, self.max_bytes)
                return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body.extend(message.get("body", b""))
            if len(body) > self.max_bytes:
                await _refuse(send, self.max_bytes)
                return
            more = message.get("more_body", False)
        if body:
            scope = _as_json(scope)
        await self.app(scope, _replay(bytes(body), receive), send)


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


async def _refuse(send: Send, max_bytes: int) -> None:
    payload = json.dumps(
        error_body(413, "body_too_large", f"request body is larger than {max_bytes} bytes")
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
