# ruff: noqa: RUF001 (dashes and quotation marks of every kind are what people type)
"""Card numbers and their CVVs.

A card is a stretch of 12-19 digits, in groups of any size with any separators between them
(spaces of every kind, line breaks, tabs, `. - / , _`, parentheses, emoji), that passes the
Luhn check (python-stdnum) and has an issuer's prefix and length; or any Luhn-valid 12-19
digits the clause calls a card. No word around it (an order, a tracking number) hides a
number that passes a card's checks. A CVV is 3-4 digits named by a CVV's words (also
described: "los 3 números de atrás"), or written right after a card and its expiry.
"""

from __future__ import annotations

import bisect
import re
from itertools import accumulate

from stdnum import ean, luhn

from server.redaction.anchors import anchors, digit_before, number_runs
from server.redaction.text import MASKED, MASKS, Scan
from server.redaction.words import names_card

DOTS = "••••"

_GROUP = re.compile(r"\d+")
MAX_GROUPS = 19  # digit by digit
MAX_MULTI_GROUP = 6  # a group of a card written in groups has at most 6 digits (Amex: 4-6-5)
OVERLAP = 3  # how many groups into a card a stretch overlapping it is looked for

# Issuers' prefixes and the lengths their cards have: (first, last) prefix of a given number of
# digits, lengths. A Luhn-valid number of another shape is a card only when named one.
_CARD_RANGES: tuple[tuple[int, int, int, frozenset[int]], ...] = (
    (4, 4, 1, frozenset((13, 16, 19))),  # Visa
    (51, 55, 2, frozenset((16,))),  # Mastercard
    (2221, 2720, 4, frozenset((16,))),  # Mastercard 2-series
    (34, 34, 2, frozenset((15,))),  # American Express
    (37, 37, 2, frozenset((15,))),
    (300, 305, 3, frozenset((14, 16, 19))),  # Diners Club
    (36, 36, 2, frozenset((14, 16, 19))),
    (38, 39, 2, frozenset((14, 16, 19))),
    (3528, 3589, 4, frozenset(range(16, 20))),  # JCB
    (6011, 6011, 4, frozenset(range(16, 20))),  # Discover
    (644, 649, 3, frozenset(range(16, 20))),
    (65, 65, 2, frozenset(range(16, 20))),
    (62, 62, 2, frozenset(range(16, 20))),  # UnionPay
    (50, 50, 2, frozenset(range(16, 20))),  # Maestro (12-15 digits: only when named a card)
    (56, 69, 2, frozenset(range(16, 20))),
    (606282, 606282, 6, frozenset((16,))),  # Hipercard (Brazil)
    (636368, 636368, 6, frozenset((16,))),  # Elo (Brazil)
)
_NAMED_LENGTHS = frozenset(range(12, 20))


def _lengths_by_head() -> dict[str, frozenset[int]]:
    """The card lengths each 4-digit head allows (looked up once a stretch)."""
    lengths: dict[str, set[int]] = {}
    for first, last, digits, sizes in _CARD_RANGES:
        if digits > 4:
            first, last, digits = first // 10 ** (digits - 4), last // 10 ** (digits - 4), 4
        scale = 10 ** (4 - digits)
        for head in range(first * scale, (last + 1) * scale):
            lengths.setdefault(str(head), set()).update(sizes)
    return {head: frozenset(sizes) for head, sizes in lengths.items()}


_LENGTHS = _lengths_by_head()
_LUHN_DOUBLED = tuple((2 * d) % 10 + (2 * d) // 10 for d in range(10))


class _LuhnSums:
    """Luhn sums of every stretch of a string of digits, each in constant time."""

    def __init__(self, digits: str) -> None:
        plain = list(map(int, digits))
        doubled = [_LUHN_DOUBLED[d] for d in plain]
        even, odd = plain[:], doubled[:]
        even[1::2], odd[1::2] = doubled[1::2], plain[1::2]
        self._sums = ([0, *accumulate(even)], [0, *accumulate(odd)])

    def valid(self, start: int, end: int) -> bool:
        sums = self._sums[(end - 1) % 2]
        return (sums[end] - sums[start]) % 10 == 0


def find_cards(scan: Scan) -> None:
    for start, end, digits in number_runs(scan):
        if digits >= 12:
            _cards_in_run(scan, start, end)
    scan.settle()


def _cards_in_run(scan: Scan, base: int, run_end: int) -> None:
    view, fold = scan.view, scan.fold
    groups = [(g.start(), g.end()) for g in _GROUP.finditer(view, base, run_end)]
    digits = "".join(view[start:end] for start, end in groups)
    if len(digits) < 12:
        return
    offsets = [0, *accumulate(end - start for start, end in groups)]
    cores = [_core(view[groups[k][1] : groups[k + 1][0]]) for k in range(len(groups) - 1)]
    sums = _LuhnSums(digits)
    before = view[base - 1] if base else " "
    after = view[run_end] if run_end < len(view) else " "
    # Glued to letters on both sides: an identifier ("LX4111...ES"), not a card.
    glued_before, glued_after = before.isalpha(), after.isalpha()
    phone = before == "+"
    named = names_card(fold, base, run_end)
    # Every stretch that is a card, the longest from each group; overlapping ones are one
    # span ("17405-4731 5067 8984 6143 1823": a stretch from 4731 and one from 5067 both pass,
    # and which is the card cannot be told: both go, rather than leave a card's digits).
    cards: list[tuple[int, int]] = []
    i = 0
    while i < len(groups):
        # Past a card's first few groups, a stretch starting inside it is not looked for (a
        # run of cards back to back costs one look a card, not one a group).
        if cards and cards[-1][0] + OVERLAP < i <= cards[-1][1]:
            i = cards[-1][1] + 1
            continue
        first = offsets[i]
        sizes = _LENGTHS.get(digits[first : first + 4], frozenset())
        if named:
            sizes = sizes | _NAMED_LENGTHS
        best = None
        for size in sorted(sizes, reverse=True):
            j = bisect.bisect_left(offsets, first + size) - 1
            if j >= len(groups) or offsets[j + 1] != first + size or j - i >= MAX_GROUPS:
                continue
            shaped = _card_shape(groups, offsets, cores, i, j, named)
            if not shaped or not sums.valid(first, first + size):
                continue
            if glued_before and glued_after and i == 0 and j == len(groups) - 1:
                continue
            if phone and i == 0 and size < 16 and not named:
                continue
            number = digits[first : first + size]
            if not named and size == 13 and i == j and ean.is_valid(number):
                continue  # a bare 13-digit barcode (EAN-13) that happens to pass Luhn
            if luhn.is_valid(number):  # python-stdnum confirms
                best = j
                break
        if best is not None and cards and i <= cards[-1][1]:
            cards[-1] = (cards[-1][0], max(cards[-1][1], best))
        elif best is not None:
            cards.append((i, best))
        i += 1
    for i, j in cards:
        number = digits[offsets[i] : offsets[j + 1]]
        scan.claim(groups[i][0], groups[j][1], f"[tarjeta {DOTS}{number[-4:]}]", "card")


def _core(separator: str) -> str:
    """What a separator is once spaces and parentheses are set aside ("" for spaces)."""
    return "".join(ch for ch in separator if not ch.isspace() and ch not in "()")


def _card_shape(
    groups: list[tuple[int, int]],
    offsets: list[int],
    cores: list[str],
    i: int,
    j: int,
    named: bool,
) -> bool:
    """Whether groups i..j are written as one card: no group of more than six digits when
    there are several (two phone numbers are not a card), and one kind of separator between
    all of them ("4111 1111-1111 1111" is two numbers) unless the clause names a card or the
    groups are a card's own (4-4-4-4, 4-6-5)."""
    if i == j:
        return True
    sizes = [offsets[k + 1] - offsets[k] for k in range(i, j + 1)]
    if any(size > MAX_MULTI_GROUP for size in sizes):
        return False
    return named or len(set(cores[i:j])) == 1 or sizes in _CARD_LAYOUTS


_CARD_LAYOUTS = ([4, 4, 4, 4], [4, 6, 5], [4, 4, 4, 4, 3], [4, 6, 4], [4, 4, 4, 4, 2])


# -- CVVs --------------------------------------------------------------------------------------

_CVV_WORDS = (
    r"cvv2?|cvc2?|ccv|cvn|cav2?|cid|csc|"
    r"(?:c(?:odigo|od\.?)|numero|number)\s*(?:de\s+|do\s+)?(?:seguridad|seguranca|seg\.?)"
    r"(?:\s+de\s+(?:3|4|tres|cuatro|quatro)\s+(?:cifras|digitos|numeros))?"
    r"(?:\s+(?:de|do|da)\s+(?:la\s+|mi\s+|meu\s+|minha\s+)?(?:tarjeta|cartao))?|"
    r"codigo\s+(?:de\s+)?(?:verificacion|verificacao|validacion|validacao)\s+(?:de|do|da)\s+"
    r"(?:la\s+|mi\s+|meu\s+|minha\s+|o\s+)?(?:tarjeta|cartao)|"
    r"(?:el|lo|o|os|los|las|the\s+one)\s+(?:\d\s+)?(?:de\s+|do\s+|on\s+the\s+)?"
    r"(?:atras|tras|detras|back)\b|(?:back|rear|reverse)\s+(?:code|number|numbers|digits)|"
    r"security\s+(?:code|number)|sec\.?\s+code|card\s+(?:verification|security)\s+(?:code|value|number)|"
    r"(?:codigo|code|numero|number)\s+de\s+(?:3|4|tres|cuatro|tres|quatro)\s+(?:digitos|numeros)|"
    r"(?:3|4|three|four)[- ]digit\s+(?:security\s+)?code|"
    r"(?:codigo|numero|numeros|numeritos|digitos|numerinhos|code|number|numbers|digits)\s+"
    r"(?:[a-z]+\s+)?(?:de\s+|do\s+|del\s+|da\s+|on\s+the\s+|in\s+the\s+|at\s+the\s+)?"
    r"(?:atras|tras|detras|reverso|verso|dorso|back|costas)|"
    r"(?:(?:los|las|os|as|the|esos|those)\s+)?(?:(?:ultimos|last|primeros|first)\s+)?"
    r"(?:\d|tres|cuatro|quatro|three|four)\s+"
    r"(?:numeros|numerinhos|digitos|numbers|digits|numeritos)\s+"
    r"(?:de\s+|do\s+|del\s+|da\s+|on\s+the\s+|in\s+the\s+|at\s+the\s+)?"
    r"(?:atras|tras|detras|reverso|verso|dorso|back|costas)(?:\s+(?:de|do|da|of)\s+"
    r"(?:la\s+|a\s+|the\s+|mi\s+|my\s+|meu\s+|minha\s+)?(?:tarjeta|cartao|card))?"
)
_CVV = re.compile(
    rf"(?:{_CVV_WORDS})\b(?:[^\d(){MASKED}\[]|\([^()\d\n]{{0,30}}\)){{0,40}}?(?<![\d.,])"
    r"(\d{3,4}|\d(?:(?:\s*+[,.\-/→]\s*+|\s++)\d){2,3})(?![\d/:]|[.,\-]\d)"
)
_CARD_MASK = MASKS["card"]
_CVV_AFTER_CARD = re.compile(
    # The expiry (after its word, its digits are the expiry whatever their shape), then a
    # CVV's word or "y", then the CVV.
    rf"{_CARD_MASK}[\s,;:/\-]*+"
    r"(?:(?:exp\w*|cad\w*|venc\w*|valid\w*|val\.?)[\s.:]*+\d{1,2}\s*+(?:[/\-]\s*+)?\d{2,4}"
    r"[\s,;:\-]++|\d{2}\s*+(?:/\s*+)?\d{2,4}[\s,;:\-]++|\d\s*+/\s*+\d{2,4}[\s,;:\-]*+)?"
    r"(?:(?:cvv2?|cvc2?|cod(?:igo)?\.?|code|sec|seg|y|and|e)[\s.:]*+)?"
    r"(?<!\d)(\d{3,4}|\d(?:(?:\s*+[,.\-/→]\s*+|\s++)\d){2,3})"
    rf"(?![\d/]|\s*+[{MASKED}])"  # (not an expiry before a CVV redacted already)
)


# "823 es el cvv", "810 son los de atrás": the CVV before the words that name it.
_CVV_BEFORE = re.compile(
    r"(?<![\d.,/])(\d{3,4})(?:\s*+(?:[(\-–—:]|\n)\s*+|\s*+\n?\s*+(?:(?:ese|este|esse|that)\s++)?"
    r"(?:es|is|e|son|are|sao|eh)\s++)"
    r"(?:(?:el|la|los|las|o|a|os|the|my|mi|meu)\s++)?(?:(?:\d|tres|three)\s++)?"
    r"(?:cvv2?|cvc2?|ccv|codigo\s+de\s+segur(?:idad|anca)|security\s+code|"
    r"(?:de\s+)?segur(?:idad|anca)|(?:numeros\s+|digitos\s+|numbers\s+|digits\s+)?"
    r"(?:de\s+|do\s+|on\s+the\s+)?(?:atras|tras|detras|back|reverso|verso))\b"
)
# "atrás dice 543", "e atrás 928", "on the back it says 9, 0, 6": the back of the card and
# the digits right after it.
_CVV_BACK = re.compile(
    r"(?:on\s+the\s+back|atras|detras|no\s+verso|en\s+el\s+reverso|al\s+reverso|de\s+tras)"
    r"(?:\s+(?:del|de\s+la|do|da|of\s+the)\s+(?:plastico|tarjeta|cartao|card))?"
    r"(?:\s+(?:it\s+)?(?:dice|pone|diz|says|tiene|tem|has|is|es|e|son))?\s*+:?\s*+"
    r"(\d{3,4}|\d(?:(?:\s*+[,.\-/]\s*+|\s++)\d){2,3})(?![\d/:]|[.,\-]\d)"
)


def find_cvvs(scan: Scan) -> None:
    fold = scan.fold
    searched = 0  # each anchor's window starts where the last one's search ended
    for start, end in anchors(scan, "cvv"):
        window = max(searched, start - 50)
        if end <= window:
            continue
        for match in _CVV.finditer(fold, window, min(len(fold), end + 60)):
            searched = match.end()
            before = fold[match.start() - 1] if match.start() else " "
            if before.isalnum() or before == "[" or scan.claimed(match.start(1), match.end(1)):
                continue
            scan.claim(match.start(1), match.end(1), "[CVV]", "cvv")
    for start, end in anchors(scan, "cvv"):
        named = (
            _CVV_BEFORE.search(fold, max(0, start - 60), end)
            if digit_before(scan, start, 60)
            else None
        )
        if named is not None and named.end() == end:
            scan.claim(named.start(1), named.end(1), "[CVV]", "cvv")
        back = _CVV_BACK.search(fold, max(0, start - 12), end + 40)
        if back is not None and back.start() <= start:
            scan.claim(back.start(1), back.end(1), "[CVV]", "cvv")
    if _CARD_MASK in fold:
        for match in _CVV_AFTER_CARD.finditer(fold):
            if not scan.claimed(match.start(1), match.end(1)):
                scan.claim(match.start(1), match.end(1), "[CVV]", "cvv")
    scan.settle()
