"""Secrets taken out of text before it is stored: cards, CVVs, one-time codes, IBANs and other
bank accounts, national ids, passwords (and, when an agent asks, emails and street addresses).

The text is read through one normalisation (server/redaction/text.py: compatibility forms,
digits of any script, spaces of any kind, zero-width characters, emoji, case and accents), so
a secret is found however it was typed; each span found maps back to the original, and its
placeholder replaces exactly what was written. Each kind is found by its rule (one module
each) and, where the kind has one, confirmed by its checksum with python-stdnum. A
placeholder says what was there and, where that is safe, its last digits: "[tarjeta ••••1111]",
"[código]", "[IBAN ES91••••1332]". A text with no digit, no '@' and no password word is
returned at once (most turns). Redacting twice changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from server.redaction.accounts import find_accounts
from server.redaction.anchors import words_of
from server.redaction.cards import DOTS, find_cards, find_cvvs
from server.redaction.codes import find_codes
from server.redaction.contact import find_addresses, find_emails
from server.redaction.ids import find_ids
from server.redaction.passwords import find_passwords
from server.redaction.text import Scan

__all__ = [
    "DEFAULT_KINDS",
    "DOTS",
    "KINDS",
    "OPTIONAL_KINDS",
    "Redactor",
    "kinds_of",
    "redact",
    "redact_json",
]

# The kinds, in the order they are looked for (a later one never sees an earlier one's span):
# an IBAN before a card, since a stretch of an IBAN's digits may pass a card's checks.
KINDS: tuple[str, ...] = (
    "password",
    "iban",
    "card",
    "cvv",
    "national_id",
    "code",
    "email",
    "address",
)
DEFAULT_KINDS: frozenset[str] = frozenset(
    ("password", "card", "cvv", "iban", "national_id", "code")
)
OPTIONAL_KINDS: frozenset[str] = frozenset(KINDS) - DEFAULT_KINDS

_STEPS: dict[str, Callable[[Scan], None]] = {
    "password": find_passwords,
    "card": find_cards,
    "cvv": find_cvvs,
    "iban": find_accounts,
    "national_id": find_ids,
    "code": find_codes,
    "email": find_emails,
    "address": find_addresses,
}

# Placeholders already in the text (a second pass, a text pasted back): kept as written, and
# read by the rules as the kind they stand for.
_PLACEHOLDER = re.compile(
    r"\[(?:(?P<card>tarjeta ••••\d{4})|(?P<cvv>CVV)|(?P<code>código)|"
    r"(?P<iban>(?:IBAN [A-Z]{2}\d{2}|CBU |CLABE )••••[A-Z0-9]{4})|"
    r"(?P<national_id>DNI|NIE|CURP|RFC|CUIT|CPF|RUT)|(?P<password>contraseña)|"
    r"(?P<email>email ••••@[^\]\s]{1,255})|(?P<address>dirección))\]"
)
_DIGIT = re.compile(r"\d")
# The fast path's test for a password's word: the password rule's own anchors (an ASCII text
# with none of them and no digit holds no password the rule would find).
_PASSWORD_WORD = re.compile(
    "|".join(re.escape(word) for word in words_of("password")), re.IGNORECASE
)


@dataclass(frozen=True, slots=True)
class Redactor:
    """Redacts the kinds it was built with; an empty set leaves every text as it is."""

    kinds: frozenset[str]

    def __call__(self, text: str) -> str:
        return redact(text, self.kinds)

    @property
    def active(self) -> bool:
        return bool(self.kinds)


def redact(text: str, kinds: Iterable[str] = DEFAULT_KINDS) -> str:
    """The text with every secret of these kinds replaced by its placeholder."""
    wanted = kinds if isinstance(kinds, frozenset) else frozenset(kinds)
    if not wanted or not text:
        return text
    if (
        text.isascii()
        and not _DIGIT.search(text)
        and ("email" not in wanted or "@" not in text)
        and ("password" not in wanted or not _PASSWORD_WORD.search(text))
    ):
        return text
    scan = Scan(text)
    if "[" in scan.view:
        for match in _PLACEHOLDER.finditer(scan.view):
            kind = match.lastgroup or "code"
            scan.mask(match.start(), match.end(), kind)
        scan.settle()
    for kind in KINDS:
        if kind in wanted:
            _STEPS[kind](scan)
    return scan.result()


def redact_json(value: Any, kinds: Iterable[str] = DEFAULT_KINDS) -> Any:
    """A JSON value (a memory's metadata) with every secret in it redacted: strings, keys, and
    numbers (a card sent as a number becomes the redacted string). A string met again is
    redacted once (metadata of one value repeated costs one redaction)."""
    wanted = frozenset(kinds)
    done: dict[str, str] = {}

    def text(item: str) -> str:
        if item not in done:
            done[item] = redact(item, wanted)
        return done[item]

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return text(item)
        if isinstance(item, bool) or item is None:
            return item
        if isinstance(item, int | float):
            written = text(str(item))
            return item if written == str(item) else written
        if isinstance(item, dict):
            return {text(str(k)): walk(v) for k, v in item.items()}
        if isinstance(item, list):
            return [walk(v) for v in item]
        return item

    return walk(value)


def kinds_of(setting: str | Sequence[str] | None) -> frozenset[str]:
    """The kinds an agent's `redact` setting asks for: None or "default" the default set,
    "off" none, a list its kinds ("default" in a list stands for the default set)."""
    if setting is None or setting == "default":
        return DEFAULT_KINDS
    if setting == "off":
        return frozenset()
    if isinstance(setting, str):
        raise ValueError(f"unknown redact setting {setting!r}")
    kinds: set[str] = set()
    for item in setting:
        if item == "default":
            kinds |= DEFAULT_KINDS
        elif item in KINDS:
            kinds.add(item)
        else:
            raise ValueError(f"unknown kind {item!r}")
    return frozenset(kinds)
