"""The log's filters: repeated warnings and errors rate-limited, so that a flood (an accept
loop out of file descriptors logs one line per try) can neither fill the disk nor drown the
rest of the log; and secrets redacted from every line, query strings left out."""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable
from urllib.parse import quote, unquote, unquote_plus

from server.redaction import KINDS, redact

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


class SecretsFilter(logging.Filter):
    """A handler filter: no line leaves with a secret. The access log prints a request's path
    redacted (as percent-decoded text) and its query string's names only, never its values
    (a context's `query` is what the person said); every other line, its traceback too, is
    redacted (every kind: a log is no one's conversation). A line redaction fails on is
    withheld, not printed raw."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            _redact_record(record)
        except Exception:  # never let a log call fail, nor a raw line through
            record.msg, record.args, record.exc_info, record.exc_text = _WITHHELD, None, None, None
        return True


_WITHHELD = "[log line withheld: it could not be redacted]"
_ACCESS_LOGGER = "uvicorn.access"
# The API's parameters are words (budget_chars, as_of): any other name is printed as "…".
_PARAMETER_NAME = re.compile(r"[A-Za-z_]{1,40}")
_FORMATTER = logging.Formatter()
_URL = re.compile(r"(?P<site>https?://[^\s/?#\"'<>]+)(?P<target>[/?][^\s\"'<>]*)")


def _redact_record(record: logging.LogRecord) -> None:
    args = record.args
    if record.name == _ACCESS_LOGGER and isinstance(args, tuple) and len(args) == 5:
        # uvicorn's '%s - "%s %s HTTP/%s" %d': client, method, path and query, version, status
        record.args = (args[0], args[1], access_path(str(args[2])), args[3], args[4])
    else:
        message = record.getMessage()
        # A URL in a line (an HTTP client's "HTTP Request: GET http://...?query=..." in
        # `memory-server mcp`) is printed as the access log prints a request's target.
        redacted = redact(_URL.sub(_shown_url, message) if "://" in message else message, KINDS)
        if redacted != message:
            record.msg, record.args = redacted, None
    if record.exc_info and not record.exc_text:
        record.exc_text = redact(_FORMATTER.formatException(record.exc_info), KINDS)
    if record.stack_info:
        record.stack_info = redact(record.stack_info, KINDS)


def access_path(path_and_query: str) -> str:
    """A request's target as the access log prints it: the path redacted, the query string
    reduced to its parameters' names ("?query=…&k=…")."""
    path, _, query = path_and_query.partition("?")
    decoded = unquote(path)
    redacted = redact(decoded, KINDS)
    if redacted != decoded:
        path = quote(redacted, safe="/[]:@+,;=")
    if not query:
        return path
    names = (unquote_plus(p.partition("=")[0]) for p in query.split("&") if p)
    shown = "&".join(f"{n}=…" if _PARAMETER_NAME.fullmatch(n) else "…" for n in names)
    return f"{path}?{shown}"


def _shown_url(match: re.Match[str]) -> str:
    return match["site"] + access_path(match["target"])
