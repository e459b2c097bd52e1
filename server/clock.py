"""Time: an injectable clock and the one ISO 8601 format the API speaks (UTC, milliseconds, Z)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def format_time(moment: datetime) -> str:
    """2026-03-01T09:14:00.000Z: always 24 characters (a four-digit year, which strftime's %Y
    does not give before the year 1000), so stored times sort as text in time order."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone(UTC)
    return f"{moment.year:04d}-{moment:%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}Z"


def parse_time(text: str) -> datetime:
    """Parse ISO 8601; a time without an offset is taken as UTC. Raises ValueError."""
    moment = datetime.fromisoformat(text.strip().replace("z", "Z"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def normalise_time(text: str) -> str:
    return format_time(parse_time(text))
