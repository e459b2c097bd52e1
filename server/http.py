"""The HTTP protocol uvicorn runs: h11, with a deadline for a connection's first request."""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.h11_impl import H11Protocol


def with_header_timeout(seconds: float) -> type[H11Protocol]:
    """h11 that closes a connection whose first request has not arrived whole (headers) within
    `seconds`. uvicorn sets no timer before the first request, and any byte cancels its
    keep-alive timer, so a client trickling headers (slowloris) would hold a file descriptor
    for ever."""

    class HeaderTimeoutH11(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._first_request_timer: asyncio.TimerHandle | None = self.loop.call_later(
                seconds, self._close_without_request
            )

        def _close_without_request(self) -> None:
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            timer = getattr(self, "_first_request_timer", None)
            if timer is not None:
                timer.cancel()
            super().connection_lost(exc)

    return HeaderTimeoutH11
