"""The HTTP protocol uvicorn runs: h11, with a deadline for every request's headers."""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.h11_impl import H11Protocol


def with_header_timeout(seconds: float) -> type[H11Protocol]:
    """h11 that closes a connection whose next request has not arrived whole (its headers)
    within `seconds` of the connection opening or of the previous response. uvicorn sets no
    timer before a first request, and any byte cancels its keep-alive timer, so a client
    trickling headers (slowloris), before or after a first request, would hold a file
    descriptor for ever."""

    class HeaderTimeoutH11(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_header_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            super().connection_lost(exc)

        def _arm_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            waiting_after = self.cycle  # a new request replaces the cycle
            self._header_timer = self.loop.call_later(
                seconds, self._close_if_no_new_request, waiting_after
            )

        def _close_if_no_new_request(self, waiting_after: object) -> None:
            if self.cycle is waiting_after and not self.transport.is_closing():
                self.transport.close()

    return HeaderTimeoutH11
