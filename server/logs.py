"""Rate-limits repeated warnings and errors, so that a flood (an accept loop out of file
descriptors logs one line per try) can neither fill the disk nor drown the rest of the log."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable

_SUMMARY = "_memory_repeat_summary"
# Keys held at once; beyond, new messages share one key per logger, so memory stays bounded.
_MAX_KEYS = 1000


@dataclasses.dataclass(slots=True)
class _Window:
    start: float
    level: int
    seen: int = 0


class RepeatFilter(logging.Filter):
    """A handler filter: of the records at `level` and above with the same logger and message
    (its first line, before arguments are applied), the first `limit` per `interval_s` pass and
    the rest are dropped and counted. Once the interval is over, the next record logged at all
    brings one line "suppressed K similar messages ...". Lines below `level` (the access log)
    always pass. Attach one instance to one handler: it counts every record it sees."""

    def __init__(
        self,
        limit: int = 10,
        interval_s: float = 60.0,
        *,
        level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.limit = limit
        self.interval_s = interval_s
        self.level = level
        self.clock = clock
        self._windows: dict[tuple[str, str], _Window] = {}
        self._next_sweep = 0.0
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level or getattr(record, _SUMMARY, False):
            return True
        now = self.clock()
        key = (record.name, str(record.msg).split("\n", 1)[0][:200])
        with self._lock:
            expired = self._sweep(now)
            if key not in self._windows and len(self._windows) >= _MAX_KEYS:
                key = (record.name, "")
            window = self._windows.setdefault(key, _Window(now, record.levelno))
            window.seen += 1
            passes = window.seen <= self.limit
        for (name, message), done in expired:  # logged outside the lock: it comes back here
            logging.getLogger(name).log(
                done.level,
                "suppressed %d similar messages in %.0f s: %s",
                done.seen - self.limit,
                self.interval_s,
                message or "(many different messages)",
                extra={_SUMMARY: True},
            )
        return passes

    def _sweep(self, now: float) -> list[tuple[tuple[str, str], _Window]]:
        """Ends the windows that are over; returns those that dropped something."""
        if now < self._next_sweep:
            return []
        self._next_sweep = now + min(1.0, self.interval_s)
        over = [key for key, w in self._windows.items() if now - w.start >= self.interval_s]
        ended = [(key, self._windows.pop(key)) for key in over]
        return [(key, w) for key, w in ended if w.seen > self.limit]
