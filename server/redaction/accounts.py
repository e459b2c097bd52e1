"""Bank accounts: IBANs (mod 97 and each country's own check, python-stdnum), Argentina's CBU
(python-stdnum) and Mexico's CLABE (its published check: weights 3, 7, 1, mod 10), the last
two only when the clause names an account (they are bare digits).

An IBAN may be written with a space after the country code, spaces, dashes, dots, line breaks
or tabs between its groups, and full-width digits (the views already read those as ASCII).
"""

from __future__ import annotations

import functools
import re

from stdnum import iban
from stdnum.ar import cbu
from stdnum.exceptions import ValidationError
from stdnum.util import get_cc_module

from server.redaction.anchors import anchors, digit_before, number_windows
from server.redaction.cards import DOTS
from server.redaction.text import Scan
from server.redaction.words import GAP_CHARS

_SEPARATORS = " -.\n\t"
# On the view: a country code in capitals may have a space or a dot after it ("ES 91 2100"),
# one in lower case is glued to its check digits ("es9121000418...").
_IBAN = re.compile(
    r"\b(?:[A-Z]{2}[ .\-]{0,2}|[a-zA-Z]{2})\d{2}(?:[ \-.\n\t]{0,2}[a-zA-Z0-9]){10,30}\b"
)
_DIGIT = re.compile(r"\d")
_ACCOUNT_WORD = (
    r"cbu|cvu|clabe|spei|cuenta|conta|account|transferencia|transferencia bancaria|"
    r"transfer|deposito|deposit|deposita|depositar|transferir|interbancaria"
)
_ACCOUNT = re.compile(
    rf"\b(?:{_ACCOUNT_WORD})\b(?:{GAP_CHARS}|\([^)\n]{{0,50}}\)){{0,30}}?(?<![\d+])"
    r"(\d(?:[ .\-]?\d){17}(?:(?:[ .\-]?\d){4})?)(?![\d])"
)
# "030969592300380324 es mi clabe": the number before the words that name it.
_ACCOUNT_BEFORE = re.compile(
    r"(?<![\d+])(\d(?:[ .\-]?\d){17}(?:(?:[ .\-]?\d){4})?)\s++(?:(?:ese|este|esa|esta|that)\s++)?"
    r"(?:es|is|e|eh)\s++(?:(?:mi|my|la|el|a|o|minha|meu|the)\s++)?(?:cuenta\s++|conta\s++)?"
    r"(?:clabe|cbu|cvu)\b"
)
_CLABE_WEIGHTS = (3, 7, 1) * 6


def find_accounts(scan: Scan) -> None:
    _ibans(scan)
    scan.settle()
    fold = scan.fold
    for start, end in anchors(scan, "account"):
        match = _ACCOUNT.match(fold, start)
        if match is None:
            if not digit_before(scan, start, 60):
                continue
            match = _ACCOUNT_BEFORE.search(fold, max(0, start - 60), end)
            if match is None or match.end() != end:
                continue
        number = "".join(ch for ch in match.group(1) if ch.isdigit())
        if len(number) == 22 and _valid(cbu, number):
            scan.claim(match.start(1), match.end(1), f"[CBU {DOTS}{number[-4:]}]", "iban")
        elif len(number) == 18 and clabe_valid(number):
            scan.claim(match.start(1), match.end(1), f"[CLABE {DOTS}{number[-4:]}]", "iban")
    scan.settle()


def clabe_valid(number: str) -> bool:
    """Mexico's CLABE: 18 digits, the last the check of the first 17 (weights 3, 7, 1)."""
    if len(number) != 18 or not number.isdigit():
        return False
    total = sum(int(d) * w % 10 for d, w in zip(number[:17], _CLABE_WEIGHTS, strict=False))
    return (10 - total % 10) % 10 == int(number[17])


def _valid(module: object, number: str) -> bool:
    try:
        module.validate(number)  # type: ignore[attr-defined]
    except (ValidationError, ValueError, ArithmeticError):
        return False
    return True


def _ibans(scan: Scan) -> None:
    fold = scan.fold
    last = 0
    candidates = (
        match
        for start, end in number_windows(scan, 8, 16, 16)
        for match in _IBAN.finditer(scan.view, start, end)
    )
    # Verdicts of python-stdnum for this text only: an IBAN written a thousand times is
    # checked once, and no secret outlives the call.
    verdicts: dict[str, bool] = {}
    for match in candidates:
        if match.start() < last or len(_DIGIT.findall(match.group())) < 10:
            continue
        end = _iban_end(fold, match.start(), match.end(), verdicts)
        if end is None:
            continue
        number = _compact(fold[match.start() : end]).upper()
        scan.claim(match.start(), end, f"[IBAN {number[:4]}{DOTS}{number[-4:]}]", "iban")
        last = end


def _compact(written: str) -> str:
    return "".join(ch for ch in written if ch not in _SEPARATORS)


def _iban_end(text: str, start: int, end: int, verdicts: dict[str, bool]) -> int | None:
    """Where the IBAN that starts at start ends: the longest stretch that ends at the match's
    end or before one of its separators ("ES91 2100 ... 1332 ABC" is the IBAN and a word),
    holds 15-34 characters and passes the checksum. The mod-97 remainder is carried along the
    match once, so python-stdnum checks only a stretch whose remainder is right."""
    head_chars = _compact(text[start : start + 8])[:4]
    head = _base36_value(head_chars)
    if head is None or len(head_chars) < 4:
        return None
    head_value, head_digits = head
    stops: list[tuple[int, int, int]] = []  # (stop, characters, remainder of the BBAN)
    remainder, size, seen = 0, 4, 0
    for position in range(start, end):
        ch = text[position]
        if ch in _SEPARATORS:
            if seen >= 4:
                stops.append((position, size, remainder))
            continue
        seen += 1
        if seen <= 4:
            continue
        value = _BASE36.get(ch)
        if value is None:
            return None
        remainder = (remainder * (100 if value > 9 else 10) + value) % 97
        size += 1
    stops.append((end, size, remainder))
    shift = 10**head_digits
    for stop, size, remainder in reversed(stops):
        if not 15 <= size <= 34 or (remainder * shift + head_value) % 97 != 1:
            continue
        written = _compact(text[start:stop]).upper()
        if written not in verdicts:
            verdicts[written] = _valid_iban(written)
        if verdicts[written]:
            return stop
    return None


def _valid_iban(number: str) -> bool:
    """iban.is_valid, with the country's own module called directly (through iban.validate a
    Spanish IBAN was checked twice)."""
    country = number[:2]
    module = _country_iban(country) if country.isascii() and country.isalpha() else None
    return _valid(module or iban, number)


@functools.cache
def _country_iban(country: str) -> object | None:
    """python-stdnum's IBAN module of a country (stdnum.es.iban), or None."""
    return get_cc_module(country, "iban")


_BASE36 = {ch: int(ch, 36) for ch in "0123456789abcdefghijklmnopqrstuvwxyz"}


def _base36_value(chars: str) -> tuple[int, int] | None:
    """The number mod 97 writes for these characters (A=10 ... Z=35), and its digits."""
    written = ""
    for ch in chars:
        value = _BASE36.get(ch)
        if value is None:
            return None
        written += str(value)
    return int(written), len(written)
