"""Rules for names, phones and text that every entry point shares."""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import unquote

from server.auth import AGENT_PATTERN
from server.clock import normalise_time
from server.errors import InvalidInput

PHONE_PATTERN = re.compile(r"\+[0-9]{8,15}")  # used with fullmatch, never match


def agent_name(value: str) -> str:
    if not AGENT_PATTERN.fullmatch(value):
        raise InvalidInput(
            "agent must be 1-64 characters of a-z, 0-9, '_' and '-'", "invalid_agent"
        )
    return value


def phone_number(value: str, *, code: str = "invalid_phone") -> str:
    """E.164: '+' then 8-15 digits. Accepts it URL-encoded (%2B...) too."""
    candidate = unquote(value) if "%" in value else value
    if not PHONE_PATTERN.fullmatch(candidate):
        raise InvalidInput("phone must be E.164: '+' then 8 to 15 digits", code)
    return candidate


def text_content(value: str, *, limit: int, what: str = "content") -> str:
    """Non-empty, within the limit, and storable as UTF-8 (no lone surrogates)."""
    if not value.strip():
        raise InvalidInput(f"{what} must not be empty", "invalid_content")
    if len(value) > limit:
        raise InvalidInput(f"{what} is longer than {limit} characters", "content_too_long")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(f"{what} is not valid Unicode text", "invalid_content") from exc
    return value


# The years a stored time (a turn's created_at) may fall in: a chat turn dated outside them is
# a client's bug (a zero timestamp, milliseconds read as seconds), refused rather than kept.
EARLIEST_YEAR, LATEST_YEAR = 1900, 2200


def timestamp(value: str, *, what: str = "created_at", stored: bool = False) -> str:
    """An ISO 8601 time in the API's one format (UTC, milliseconds, Z). A time to be stored
    (stored=True) must fall in the years 1900-2200; a filter may be any year."""
    try:
        normalised = normalise_time(value)
    except (ValueError, OverflowError) as exc:
        raise InvalidInput(f"{what} must be an ISO 8601 time", "invalid_date") from exc
    if stored and not EARLIEST_YEAR <= int(normalised[:4]) <= LATEST_YEAR:
        raise InvalidInput(
            f"{what} must fall in the years {EARLIEST_YEAR}-{LATEST_YEAR}", "invalid_date"
        )
    return normalised


def one_line(value: str, *, limit: int) -> str:
    """Text reduced to one printable line: control characters and newlines become spaces."""
    # isprintable() is False for every character the loop below replaces (and for some
    # spaces it keeps): most texts skip the loop.
    cleaned = (
        value
        if value.isprintable()
        else "".join(
            " " if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch for ch in value
        )
    )
    return " ".join(cleaned.split())[:limit]
