"""The fields a client sends besides a turn's or a memory's text, redacted as that text is:
a person's name and the words staff search finds it by, a turn's event id, a memory's scope
ids, and the filters that look those up (so an id or a value as sent finds what was stored)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from server.redaction import redact, redact_json
from server.store import MemoryFilter
from server.words import name_words


def optional(value: str | None, kinds: Iterable[str]) -> str | None:
    """A free-text field that may be absent (an event id, a scope id), redacted."""
    return None if value is None else redact(value, kinds)


def person_name(name: str, kinds: Iterable[str]) -> tuple[str, list[str]]:
    """The name as stored (redacted) and the folded words staff search finds it by: those
    of the redacted name that the name as sent has (a placeholder's "tarjeta" would make
    every question about cards name this person)."""
    redacted = redact(name, kinds)
    words = name_words(redacted)
    if redacted != name:
        sent = set(name_words(name))
        words = [w for w in words if w in sent]
    return redacted, words


def memory_filter(where: MemoryFilter, kinds: Iterable[str]) -> MemoryFilter:
    """A memory filter whose scope ids are compared as they were stored: redacted."""
    wanted = frozenset(kinds)
    return dataclasses.replace(
        where,
        session_id=optional(where.session_id, wanted),
        task_id=optional(where.task_id, wanted),
        graph_id=optional(where.graph_id, wanted),
    )


def metadata_filter(metadata: dict[str, Any] | None, kinds: Iterable[str]) -> dict[str, Any] | None:
    """A metadata filter compared as the stored metadata was stored: redacted."""
    return None if metadata is None else dict(redact_json(metadata, kinds))
