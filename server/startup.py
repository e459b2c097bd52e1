"""Serve before the model is loaded: `/health` answers "starting" as soon as the socket is up.

Importing the model stack and loading the model take seconds (15 s on a cold 2-core machine),
and uvicorn binds its socket only once the app's start-up is done. So `serve` runs this small
ASGI app instead: it binds at once, builds the real app in a thread (imports, model, index)
while it answers `/health` with 503 `{"status": "starting", "phase": ...}` and every other
request with 503 `starting` in the error shape, then hands every request to the real app.
A start-up that fails is logged and stops the server (exit 1) instead of serving errors.

Nothing heavy is imported here: this module is what makes the socket come first."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from server import __version__
from server.config import Settings
from server.errors import error_body

log = logging.getLogger(__name__)

Scope = dict[str, Any]
ASGIApp = Callable[..., Any]
RETRY_AFTER_S = 2


class Starter:
    """The ASGI app `serve` runs: `build` makes the real app (in a thread); until its start-up
    is done, requests are answered 503 starting. `on_failure` is called once if it fails,
    `on_ready` with the real app once its start-up is done."""

    def __init__(
        self,
        settings: Settings,
        build: Callable[[Callable[[str], None]], ASGIApp],
        *,
        on_failure: Callable[[], None],
        on_ready: Callable[[Any], None] | None = None,  # given the real app (FastAPI)
    ) -> None:
        self.settings = settings
        self._build = build
        self._on_failure = on_failure
        self._on_ready = on_ready
        self.phase = "importing the model stack"
        self.failure: str | None = None
        self.app: ASGIApp | None = None  # the real app, once its start-up is done
        self._lifespan: AbstractAsyncContextManager[Any] | None = None
        self._started = time.monotonic()
        self._boot: asyncio.Task[None] | None = None

    def progress(self, phase: str) -> None:
        """Called from the start-up thread at each step; logged, and shown by /health."""
        self.phase = phase
        log.info("start-up: %s (%.1f s)", phase, time.monotonic() - self._started)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
            return
        if self.app is not None:
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            return  # (websockets: none in this API)
        await self._answer_starting(scope, send)

    async def _serve_lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                log.info(
                    "memory server %s starting on http://%s:%d: data in %s, model %s",
                    __version__,
                    self.settings.host,
                    self.settings.port,
                    self.settings.data_dir,
                    self.settings.embedding_model,
                )
                self._boot = asyncio.create_task(self._start())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _start(self) -> None:
        self.progress(self.phase)
        try:
            app = await _in_thread(lambda: self._build(self.progress))
            lifespan = app.router.lifespan_context(app)
            await lifespan.__aenter__()  # the app's own start-up (it opens its stores in a thread)
        except Exception as exc:
            self.failure = f"{type(exc).__name__}: {exc}"
            log.exception("start-up failed after %.1f s", time.monotonic() - self._started)
            self._on_failure()
            return
        self._lifespan = lifespan
        self.app = app
        log.info("ready in %.1f s", time.monotonic() - self._started)
        if self._on_ready is not None:
            self._on_ready(app)

    async def _stop(self) -> None:
        if self._boot is not None and not self._boot.done():
            log.info("stopping while starting: waiting for the current step (%s)", self.phase)
            await asyncio.shield(self._boot)
        if self._lifespan is not None:
            await self._lifespan.__aexit__(None, None, None)

    async def _answer_starting(self, scope: Scope, send: Any) -> None:
        seconds = round(time.monotonic() - self._started, 1)
        if scope.get("path") == "/health":
            body: dict[str, Any] = {
                "status": "failed" if self.failure else "starting",
                "phase": self.phase,
                "seconds": seconds,
                "problems": [self.failure] if self.failure else [],
                "model": self.settings.embedding_model,
                "version": __version__,
            }
        else:
            message = (
                f"the server failed to start: {self.failure}"
                if self.failure
                else f"the server is starting ({self.phase}, {seconds} s so far); retry shortly"
            )
            body = error_body(503, "starting", message)
        payload = json.dumps(body).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 503,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(payload)).encode()),
                    (b"retry-after", str(RETRY_AFTER_S).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": payload})


async def _in_thread(work: Callable[[], Any]) -> Any:
    """Run `work` in a daemon thread (the process may exit while a model still loads)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def run() -> None:
        try:
            result = work()
        except BaseException as exc:
            loop.call_soon_threadsafe(_settle, done, None, exc)
        else:
            loop.call_soon_threadsafe(_settle, done, result, None)

    threading.Thread(target=run, name="memory-startup", daemon=True).start()
    return await done


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
