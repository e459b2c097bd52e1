"""Rules for names, phones and text that every entry point shares."""

from __future__ import annotations

import re
import unicodedata
from urllib.parse import unquote

from server.auth import AGENT_PATTERN
from server.characters import code_point, refused_character, without_refused
from server.clock import normalise_time
from server.errors import InvalidInput
from server.phones import LEGACY_PHONE, e164

# How people write a number: '+' (or 00) and digits, with spaces, dashes, dots or parentheses
# anywhere ("(+34) 600-11-12-22"); what is left without them must be '+' or 00 and digits.
PHONE_SEPARATORS = re.compile(r"[ ().\-]")
PHONE_COMPACT = re.compile(r"(?:\+|00)[0-9]{6,17}")  # used with fullmatch, never match
PHONE_MESSAGE = (
    "phone must be a number that can exist, in international form: '+', the country code and"
    " the number (spaces, dashes, dots and parentheses are fine), e.g. +34 600 11 12 22"
)


def agent_name(value: str) -> str:
    if not AGENT_PATTERN.fullmatch(value):
        raise InvalidInput(
            "agent must be 1-64 characters of a-z, 0-9, '_' and '-'", "invalid_agent"
        )
    return value


def phone_number(value: str, *, code: str = "invalid_phone") -> str:
    """The number in E.164 ('+34600111222'), read with phonenumbers from the ways people
    write it ('+34 600 11 12 22', '(+34) 600-11-12-22', '0034...'; URL-encoded too). A number
    that cannot exist (an unknown country code, too few or too many digits for its country)
    is refused. WhatsApp's Mexican mobiles, '+521' and ten digits, are the same person as
    '+52' and those ten digits everywhere else: folded into the latter."""
    written = unquote(value) if "%" in value else value
    candidate = PHONE_SEPARATORS.sub("", written) if len(written) <= 40 else written
    if not PHONE_COMPACT.fullmatch(candidate):
        raise InvalidInput(PHONE_MESSAGE, code)
    if candidate.startswith("00"):
        candidate = "+" + candidate[2:]
    number = e164(candidate)
    if number is None:
        raise InvalidInput(PHONE_MESSAGE, code)
    return number


def stored_phone_number(value: str) -> str:
    """phone_number, or, for a number that cannot exist but that an earlier release stored
    ('+99912345678'), that number as written: the command line's forget must reach everyone
    whose data is kept (README, 'Phone numbers')."""
    try:
        return phone_number(value)
    except InvalidInput:
        if LEGACY_PHONE.fullmatch(value.strip()):
            return value.strip()
        raise


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


# The longest name of a person (a WhatsApp profile name is at most 25 characters).
MAX_NAME_CHARS = 100


def person_name(value: str) -> str:
    """A person's name: one line of at most MAX_NAME_CHARS characters, spaces collapsed, with
    at least one letter (a name of digits or emoji only would match nothing and name no one),
    and nothing invisible that could change how the text next to it reads (characters.py)."""
    name = " ".join(value.split())
    if not name or not any(ch.isalpha() for ch in name):
        raise InvalidInput("name must hold at least one letter", "invalid_name")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidInput(f"name is longer than {MAX_NAME_CHARS} characters", "invalid_name")
    refused = refused_character(name)
    if refused is not None:
        raise InvalidInput(
            f"name must be printable text without invisible format characters; it holds"
            f" {code_point(refused)}",
            "invalid_name",
        )
    return name


def provided_name(value: str) -> str | None:
    """The name a messaging provider sends with a turn (a WhatsApp profile name, which its
    owner writes as they like): its controls and format characters removed, the rest kept;
    None when what is left is no name. It never refuses the turn it came with."""
    try:
        return person_name(without_refused(value))
    except InvalidInput:
        return None


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
