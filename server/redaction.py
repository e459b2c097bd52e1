"""Secrets taken out of text before it is stored: cards, CVVs, one-time codes, IBANs, national
ids, passwords (and, when an agent asks, emails and street addresses).

Each kind is found by a pattern and, where the kind has one, confirmed by its checksum with
python-stdnum (Luhn for cards, mod 97 for IBANs, each id's own check). What is found is
replaced by a readable placeholder that says what was there and, where that is safe, its last
digits: "[tarjeta ••••1111]", "[código]", "[IBAN ES91••••1332]". A text with no digit, no '@'
and no password word is returned at once (most turns). Redacting twice changes nothing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from stdnum import ean, iban, luhn
from stdnum.ar import cbu, cuit
from stdnum.br import cpf
from stdnum.es import dni, nie
from stdnum.exceptions import ValidationError
from stdnum.mx import curp, rfc
from stdnum.util import get_cc_module

# The kinds, in the order they are looked for (a later one never sees an earlier one's text).
KINDS: tuple[str, ...] = (
    "password",
    "card",
    "cvv",
    "iban",
    "national_id",
    "code",
    "email",
    "address",
)
DEFAULT_KINDS: frozenset[str] = frozenset(
    ("password", "card", "cvv", "iban", "national_id", "code")
)
OPTIONAL_KINDS: frozenset[str] = frozenset(KINDS) - DEFAULT_KINDS

DOTS = "••••"

# -- patterns ---------------------------------------------------------------------------------

_I = re.IGNORECASE
# A run of groups of digits with single spaces or dashes between them, not part of a word or a
# phone number (+...): a card is found among its groups ("1 4111 1111 1111 1111 123" holds
# one), so a quantity before it or a CVV after it does not hide it.
# (Separators: a space, a no-break space, a dash or a dot: "4111.1111.1111.1111".)
_DIGIT_RUN = re.compile(r"(?<![\w+•.])\d+(?:[ \u00a0\u202f.\-]\d+)*(?![\w•])")
_GROUP = re.compile(r"\d+")
MAX_CARD_GROUPS = 6  # a card is written in 1 to 5 groups; more is a list of numbers
# Issuers' prefixes and the lengths their cards have: (first, last) prefix of a given number of
# digits, lengths. A Luhn-valid number of another shape (a 14-digit tracking number starting
# 28, say) is not a card.
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
    (50, 50, 2, frozenset(range(12, 20))),  # Maestro
    (56, 69, 2, frozenset(range(12, 20))),
)
_CVV = re.compile(
    r"(?<!\[)\b(?:cvv2?|cvc2?|ccv|cid|c[oó]digo\s+de\s+seguridad|c[oó]d\.?\s+seg(?:uridad)?|"
    r"sec(?:urity)?\.?\s+code|c[oó]digo\s+de\s+atr[aá]s|(?:los\s+)?\d\s+(?:n[uú]meros\s+)?de\s+atr[aá]s|"
    r"(?:the\s+)?\d\s+digits\s+on\s+the\s+back)\b"
    r"[^\d\n]{0,20}?(?<!\d)(\d{3,4})(?!\d)",
    _I,
)
# A card's placeholder followed by an expiry (optional) and 3-4 digits: the CVV written after it.
_CVV_AFTER_CARD = re.compile(
    r"(\[tarjeta ••••\d{4}\])([\s,;:/-]*+(?:(?:exp\w*|cad\w*|venc\w*|valid\w*)[\s.:]*+)?"
    r"(?:\d{2}\s*+(?:/\s*+)?\d{2,4}[\s,;:-]++|\d\s*+/\s*+\d{2,4}[\s,;:-]*+)?"
    r"(?:(?:cvv|cvc|y|and)[\s.:]*+)?)"
    r"(?<!\d)(\d{3,4})(?![\d/])"
)
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?:[ \-]?[A-Z0-9]){10,30}\b", _I)
# Argentina's bank accounts, where IBANs do not apply: the CBU (22 digits, two checks, by
# python-stdnum), when the clause names an account. (Mexico's CLABE has no check in
# python-stdnum: not redacted.)
_ACCOUNT = re.compile(
    r"\b(?:cbu|cuenta|account|transferencia|transfer|dep[oó]sito|deposit)\b"
    r"[^\d\n]{0,30}?(?<![\d+])(\d{22}|\d{8}[ \-]\d{14})(?![\d])",
    _I,
)
# National ids (each confirmed by python-stdnum): DNI 12345678Z, NIE X1234567L, CURP, RFC,
# CUIT 20-12345678-6 and CPF 123.456.789-09 (both also bare 11 digits, but then only when
# named: "cuit", "cuil", "cpf").
# (The letter after a space or a dash only in capitals: "84731247 y el..." is not a DNI.)
_DNI = re.compile(r"(?<![\w+.])(?:\d{8}|\d{1,2}\.\d{3}\.\d{3})(?:[ \-]?[A-Z]|[a-z])(?!\w)")
_NIE = re.compile(r"(?<!\w)[XYZxyz][ \-]?\d{7}(?:[ \-]?[A-Z]|[a-z])(?!\w)")
_CURP = re.compile(r"(?<!\w)[A-Z]{4}\d{6}[HMX][A-Z]{5}[A-Z0-9]\d(?!\w)", _I)
_RFC = re.compile(r"(?<!\w)[A-ZÑ&]{3,4}\d{6}[A-Z0-9]{3}(?!\w)", _I)
_CUIT = re.compile(r"(?<![\w+])\d{2}-\d{8}-\d(?!\w)")
_CPF = re.compile(r"(?<![\w+])\d{3}\.\d{3}\.\d{3}-\d{2}(?!\w)")
_NAMED_11 = re.compile(
    r"\b(cuit|cuil|cpf)\b[^\d\n]{0,15}?(?<![\d+])"
    r"(\d{11}|\d{3} \d{3} \d{3} \d{2}|\d{2} \d{8} \d)(?![\d])",
    _I,
)
# One-time codes: 4-8 digits (or 3-3, 4-4 with a space or dash, as WhatsApp and banks write
# them) after a word that names a secret code, with no more than a few words between; or
# right before "es tu código", "is your code".
_CODE_DIGITS = (
    r"(?<![\w+/€$£#])(?<!\d[.,:])(\d{3,4}(?:[ \-]\d{3,4}){1,2}|\d{4,8})"
    r"(?![\w/:€$£%]|[.,]\d|-\d)"
)
_SECRET_WORD = (
    r"c[oó]digos?|codes?|otp|pin|nip|passcode|token|clave|contrase[nñ]a|password|"
    r"verificaci[oó]n|verification|verify|2fa|autenticaci[oó]n|authentication|sms"
)
# (Not a word inside a placeholder: "[código] y 123456" stays as it is on a second pass.)
# Words between the keyword and the code: up to SHORT_GAP characters, or up to LONG_GAP when
# they end in a verb that introduces it ("el código que me mandaron por SMS al celular fue
# el 948271").
SHORT_GAP, LONG_GAP = 40, 80
_INTRODUCES = re.compile(r"(?:\b(?:es|fue|era|ser[aá]|is|was)|[:=])\s*+(?:(?:el|la|the)\s*+)?$", _I)
_CODE_BEFORE = re.compile(
    rf"(?<!\[)\b(?P<word>{_SECRET_WORD})\b(?P<gap>[^\d\[.!?;]{{0,{LONG_GAP}}}?)" + _CODE_DIGITS, _I
)
_CODE_AFTER = re.compile(
    _CODE_DIGITS
    + r"\s*+(?:[,:-]\s*+)?(?:es|is|ser[aá]|será|was|era)\s++(?:tu|your|su|el|the|mi|my)\s++"
    r"(?:(?:nuevo|new)\s++)?(?:c[oó]digo|code|otp|pin|clave|passcode)\b",
    _I,
)
# Words that make a "code" an ordinary one (an order, a postcode, a discount): a number named
# by them is left alone.
_ORDINARY_CODE = re.compile(
    r"\b(?:pedido|order|orden|postal|zip|post|seguimiento|tracking|env[ií]o|shipping|"
    r"descuento|discount|promo(?:cional|tion)?|cup[oó]n|coupon|voucher|producto|product|"
    r"art[ií]culo|item|sku|barras|barcode|reserva|booking|reservation|referencia|reference|"
    r"ref|factura|invoice|ticket|cliente|customer|socio|member|[aá]rea|pa[ií]s|country|"
    r"regalo|gift|modelo|model|serie|serial|habitaci[oó]n|room|vuelo|flight|asiento|seat|"
    r"localizador|incidencia|caso|case|expediente|n[uú]mero de|number of|precio|price|"
    r"error|errores|fallo|versi[oó]n|version|review|revisi[oó]n|hs|html?|http|status|"
    r"estado|expira|expires?|expired|caduca|vence|validez)\b",
    _I,
)
_PASSWORD = re.compile(
    r"(?<!\[)\b(?:contrase[nñ]a|clave(?:\s+de\s+acceso)?|password|passwd|pwd|pw|pass(?=\s*+[:=]))\b"
    r"(?:\s+(?:nueva|new|actual|current|temporal|temporary|provisional|ahora|now|"
    r"que\s+(?:puse|tengo|uso|use|elegí|elegi|cambié|cambie)|(?:que|which|I)\s+\w+|"
    r"del?\s+(?:la\s+|el\s+|mi\s+|tu\s+|su\s+)?\w+|para\s+\w+|for\s+(?:the\s+|my\s+)?\w+)){0,3}"
    r"(?:\s*+[:=]\s*+|\s++(?:es|is|era|was|fue|ser[aá]|sigue\s++siendo)(?:\s*+:)?\s++|"
    r"[^\S\n]*+\n\s*+|\s++(?=[^\s\d]*+\d))"
    r"[\"'«“]?(?P<secret>[^\s\"'»”]{3,64})"
    # "usuario ana, pass Perro12": a user name then a bare "pass"/"clave" and the secret.
    r"|\b(?:usuario|user(?:name)?|login)\b[^\n]{1,40}?\b(?:pass(?:word)?|clave|contrase[nñ]a|pwd)"
    r"(?:\s*+[:=])?\s++(?P<paired>[^\s\"'»”]{3,64})",
    _I,
)
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]{1,64}@([A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})+)")
_ADDRESS = re.compile(
    r"\b(?:calle|c/|avenida|avda\.?|av\.|paseo|plaza|pza\.?|carrera|cra\.?|camino|ronda|"
    r"traves[ií]a|rua|street|avenue|road|boulevard|blvd\.?|lane|drive)"
    r"\s+(?:de\s+(?:la\s+|los\s+|las\s+)?)?[A-ZÁÉÍÓÚÑ][\w'.ÁÉÍÓÚÑáéíóúñ]*"
    r"(?:\s+[\w'.ÁÉÍÓÚÑáéíóúñ]+){0,4}?,?\s*(?:n[º°o]\.?\s*|#\s*)?\d{1,5}[A-Z]?"
    r"(?:\s*+(?:,\s*+)?\d{1,2}\s*+[º°ª]\s*+[A-Z]?)?"
    r"|\b\d{1,5}\s+(?:[A-Z][\w'.]*\s+){1,3}(?:street|st\.|avenue|ave\.|road|rd\.|boulevard|"
    r"blvd\.?|lane|ln\.|drive|dr\.)",
    _I,
)
# Fast path: a text with none of these holds nothing any kind looks for.
_PASSWORD_WORD = re.compile(r"contrase|clave|pass|pwd|\bpw\b", _I)
_ADDRESS_WORD = re.compile(
    r"calle|c/|avenida|avda|av\.|paseo|plaza|pza|carrera|cra|camino|"
    r"ronda|traves|rua|street|avenue|road|boulevard|blvd|lane|drive",
    _I,
)


# -- checks -------------------------------------------------------------------------------------


def _digits(text: str) -> str:
    return "".join(ch for ch in text if ch.isdigit())


def _valid(module: object, number: str, **kwargs: bool) -> bool:
    try:
        module.validate(number, **kwargs)  # type: ignore[attr-defined]
    except (ValidationError, ValueError, ArithmeticError):
        return False
    return True


def _card_lengths_by_head() -> dict[str, frozenset[int]]:
    """The card lengths each 4-digit head allows, from _CARD_RANGES (looked up once a number)."""
    lengths: dict[str, set[int]] = {}
    for first, last, digits, sizes in _CARD_RANGES:
        scale = 10 ** (4 - digits)
        for head in range(first * scale, (last + 1) * scale):
            lengths.setdefault(str(head), set()).update(sizes)
    return {head: frozenset(sizes) for head, sizes in lengths.items()}


_CARD_LENGTHS = _card_lengths_by_head()


def _card_shaped(number: str) -> bool:
    return len(number) in _CARD_LENGTHS.get(number[:4], ())


def _is_card(text: str, start: int, end: int, number: str) -> bool:
    """Whether text[start:end] (digits, single spaces or dashes), whose digits are number and
    pass the Luhn check, is a card number."""
    if not _card_shaped(number) and not _named_card(text, start, end):
        return False
    if not luhn.is_valid(number):  # python-stdnum confirms (and refuses digits beyond ASCII)
        return False
    # A bare 13-digit barcode (EAN-13) that happens to pass Luhn is a product, not a card; a
    # number the clause calls a tracking number, an order or an invoice is one.
    if len(number) == 13 and end - start == 13 and ean.is_valid(number):
        return False
    return not _named_ordinary(text, start)


_LUHN_DOUBLED = tuple((2 * d) % 10 + (2 * d) // 10 for d in range(10))


class _LuhnSums:
    """Luhn sums of every stretch of a string of digits, each in constant time: a long run of
    groups has up to eight stretches a group to check, and summing each anew made a run of
    32,000 characters cost a tenth of a second."""

    def __init__(self, digits: str) -> None:
        plain = list(map(int, digits))
        doubled = [_LUHN_DOUBLED[d] for d in plain]
        # Sums up to each position with the even positions plain and the odd ones doubled,
        # and the other way round: a stretch ending at an even position takes the first.
        even, odd = plain[:], doubled[:]
        even[1::2], odd[1::2] = doubled[1::2], plain[1::2]
        self._sums = ([0, *accumulate(even)], [0, *accumulate(odd)])

    def valid(self, start: int, end: int) -> bool:
        """Whether digits[start:end] passes the Luhn check."""
        sums = self._sums[(end - 1) % 2]
        return (sums[end] - sums[start]) % 10 == 0


def _card_run(match: re.Match[str]) -> str | None:
    """The run with each card among its groups replaced: from the left, the longest stretch
    of whole groups (12-19 digits) that is a card. At most MAX_CARD_GROUPS stretches a group,
    each summed in constant time: linear in the run's length."""
    text, base = match.string, match.start()
    if match.end() - base < 12:  # fewer than 12 characters: fewer than 12 digits
        return None
    groups = [(g.start() + base, g.end() + base) for g in _GROUP.finditer(match[0])]
    digits = "".join(text[start:end] for start, end in groups)
    offsets = [0, *accumulate(end - start for start, end in groups)]  # of each group in digits
    sums = _LuhnSums(digits)
    out: list[str] = []
    last, i = base, 0
    while i < len(groups):
        best, reach = None, min(len(groups), i + MAX_CARD_GROUPS)
        if offsets[reach] - offsets[i] < 12:  # too few digits within reach: no card starts here
            i += 1
            continue
        for j in range(i, reach):
            first, stop = offsets[i], offsets[j + 1]
            if stop - first > 19:
                break
            if stop - first < 12 or not sums.valid(first, stop):
                continue
            if _is_card(text, groups[i][0], groups[j][1], digits[first:stop]):
                best = j
        if best is None:
            i += 1
            continue
        start, end = groups[i][0], groups[best][1]
        out += [text[last:start], f"[tarjeta {DOTS}{_digits(text[start:end])[-4:]}]"]
        last, i = end, best + 1
    if not out:
        return None
    out.append(text[last : match.end()])
    return "".join(out)


_CLAUSE_END = re.compile(r"[.;!?\n](?:\s|$)")
_CARD_WORD = re.compile(r"tarjeta|card|visa|mastercard|amex|d[eé]bito|cr[eé]dito|debit|credit", _I)


def _named_card(text: str, start: int, end: int) -> bool:
    """Whether the clause around the number calls it a card ("la tarjeta es la ...", "... es
    mi visa"): then an issuer this module does not list is still a card."""
    return bool(_CARD_WORD.search(_clause_before(text, start, 40) + text[end : end + 15]))


def _clause_before(text: str, start: int, width: int) -> str:
    before = text[max(0, start - width) : start]
    ends = list(_CLAUSE_END.finditer(before))
    return before[ends[-1].end() :] if ends else before


def _named_ordinary(text: str, start: int) -> bool:
    """Whether the words just before `start`, in the same clause, name an ordinary number (an
    order, a postcode, a tracking number) and no card."""
    before = _clause_before(text, start, 30)
    # Only the words since the last number count: "habitación 1234, PIN de la caja 4321".
    last_digit = max((i for i, ch in enumerate(before) if ch.isdigit()), default=-1)
    before = before[last_digit + 1 :]
    return bool(_ORDINARY_CODE.search(before)) and not _CARD_WORD.search(before)


# -- the redactor -------------------------------------------------------------------------------


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
    wanted = frozenset(kinds)
    if not wanted or not text:
        return text
    has_digit = any(ch.isdigit() for ch in text)
    if (
        not has_digit
        and ("email" not in wanted or "@" not in text)
        and ("password" not in wanted or not _PASSWORD_WORD.search(text))
    ):
        return text
    for kind in KINDS:
        if kind in wanted:
            text = _STEPS[kind](text)
    return text


def _password(text: str) -> str:
    if not _PASSWORD_WORD.search(text):
        return text

    def replace(match: re.Match[str]) -> str:
        group = "secret" if match.group("secret") is not None else "paired"
        secret = match.group(group).rstrip(".,;")
        if secret.startswith("[") or secret.lower() in _NOT_A_PASSWORD:
            return match.group(0)
        start = match.start(group) - match.start()
        return match.group(0)[:start] + "[contraseña]" + match.group(0)[start + len(secret) :]

    return _PASSWORD.sub(replace, text)


# Words after "mi contraseña es" that are not the password itself.
_NOT_A_PASSWORD = frozenset(
    (  # noqa: SIM905 (a list of words reads better as text)
        "incorrecta correcta nueva vieja antigua segura larga corta la el una un mía mia tuya "
        "wrong correct new old the a my mine your too muy very demasiado igual same válida "
        "valida invalid inválida invalida que not no working expired expirada caducada caduca "
        "caducó expira forgot olvidé olvide olvidada tener ser hacer esperar paciencia "
        "bloqueada locked blocked reset resetear cambiada changed required obligatoria needed "
        "necesaria ok okay fine bien mal de del en in on para for por with con sin without"
    ).split()
)


def _cards(text: str) -> str:
    return _sub(_DIGIT_RUN, text, _card_run)


def _cvvs(text: str) -> str:
    text = _CVV.sub(lambda m: _replace_group(m, 1, "[CVV]"), text)
    if "[tarjeta" in text:
        text = _CVV_AFTER_CARD.sub(lambda m: m.group(1) + m.group(2) + "[CVV]", text)
    return text


def _ibans(text: str) -> str:
    out: list[str] = []
    last = 0
    # Verdicts of python-stdnum (a tenth of a millisecond each) for this text only: an IBAN
    # written a thousand times is checked once, and no secret outlives the call.
    verdicts: dict[str, bool] = {}
    for match in _IBAN.finditer(text):
        if match.start() < last:
            continue
        span = _iban_end(text, match.start(), match.end(), verdicts)
        if span is None:
            continue
        number = iban.compact(text[match.start() : span])
        out.append(text[last : match.start()])
        out.append(f"[IBAN {number[:4].upper()}{DOTS}{number[-4:]}]")
        last = span
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def _iban_end(text: str, start: int, end: int, verdicts: dict[str, bool]) -> int | None:
    """Where the IBAN that starts at start ends: the longest stretch that ends at the match's
    end or before one of its spaces or dashes ("ES91 2100 ... 1332 ABC" is the IBAN and a
    word), holds 15-34 characters and passes the checksum. The mod-97 remainder is carried
    along the match once, so python-stdnum checks only a stretch whose remainder is right
    (about one in 97 of the others): a text of IBAN-like groups costs one pass."""
    head = _base36_value(text[start : start + 4])
    if head is None:
        return _iban_end_checked(text, start, end)
    head_value, head_digits = head
    stops: list[tuple[int, int, int]] = []  # (stop, characters, remainder of the BBAN)
    remainder, size = 0, 4
    for position in range(start + 4, end):
        ch = text[position]
        if ch in " -":
            stops.append((position, size, remainder))
            continue
        value = _BASE36.get(ch)
        if value is None:  # a letter case folding matched (U+017F, long s): stdnum decides
            return _iban_end_checked(text, start, end)
        remainder = (remainder * (100 if value > 9 else 10) + value) % 97
        size += 1
    stops.append((end, size, remainder))
    shift = 10**head_digits
    for stop, size, remainder in reversed(stops):
        if not 15 <= size <= 34 or (remainder * shift + head_value) % 97 != 1:
            continue
        written = text[start:stop]
        if written not in verdicts:
            verdicts[written] = _valid_iban(written)
        if verdicts[written]:
            return stop
    return None


def _valid_iban(written: str) -> bool:
    """iban.is_valid, with the country's own module called directly: python-stdnum's country
    modules check the IBAN in full before their own check, so through iban.validate a Spanish
    IBAN was checked twice (0.1 ms, the costliest secret of a text of IBANs)."""
    country = iban.compact(written)[:2]
    module = _country_iban(country) if country.isascii() and country.isalpha() else None
    return _valid(module or iban, written)


@functools.cache
def _country_iban(country: str) -> object | None:
    """python-stdnum's IBAN module of a country (stdnum.es.iban), or None."""
    return get_cc_module(country, "iban")


_BASE36 = {
    ch: int(ch, 36) for ch in "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
}


def _base36_value(chars: str) -> tuple[int, int] | None:
    """The number mod 97 writes for these characters (A=10 ... Z=35), and its digits."""
    written = ""
    for ch in chars:
        value = _BASE36.get(ch)
        if value is None:
            return None
        written += str(value)
    return int(written), len(written)


def _iban_end_checked(text: str, start: int, end: int) -> int | None:
    """_iban_end by python-stdnum alone, each stop in turn (a match of unusual letters)."""
    stops = [end, *(p for p in range(end - 1, start, -1) if text[p] in " -")]
    for stop in stops:
        size = sum(1 for ch in text[start:stop] if ch not in " -")
        if 15 <= size <= 34 and _valid(iban, text[start:stop]):
            return stop
    return None


def _accounts(text: str) -> str:
    def replace(match: re.Match[str]) -> str | None:
        number = _digits(match.group(1))
        if not _valid(cbu, number):
            return None
        return _replace_group(match, 1, f"[CBU {DOTS}{number[-4:]}]")

    return _sub(_ACCOUNT, text, replace)


# Every national id holds six digits in a row, or three groups of three with dots (a CPF, a
# DNI written 12.345.678-Z): a text without either holds none.
_ID_DIGITS = re.compile(r"\d{6}|\d\.\d{3}\.\d{3}|\d{2}-\d{8}|\d{3} \d{3} \d{3}")


def _national_ids(text: str) -> str:
    if not _ID_DIGITS.search(text):
        return text
    text = _sub(_NIE, text, lambda m: "[NIE]" if _valid(nie, m.group(0)) else None)
    text = _sub(_DNI, text, lambda m: "[DNI]" if _valid(dni, m.group(0).replace(".", "")) else None)
    text = _sub(_CURP, text, lambda m: "[CURP]" if _valid(curp, m.group(0)) else None)
    text = _sub(
        _RFC,
        text,
        lambda m: "[RFC]" if _valid(rfc, m.group(0), validate_check_digits=True) else None,
    )
    text = _sub(_CUIT, text, lambda m: "[CUIT]" if _valid(cuit, m.group(0)) else None)
    text = _sub(_CPF, text, lambda m: "[CPF]" if _valid(cpf, m.group(0)) else None)

    def named(match: re.Match[str]) -> str | None:
        word, number = match.group(1).lower(), match.group(2)
        if word == "cpf":
            ok, label = _valid(cpf, number), "[CPF]"
        else:
            ok, label = _valid(cuit, number), "[CUIT]"
        return _replace_group(match, 2, label) if ok else None

    return _sub(_NAMED_11, text, named)


def _codes(text: str) -> str:
    if not any(ch.isdigit() for ch in text):
        return text

    def before(match: re.Match[str]) -> str | None:
        gap = match.group("gap")
        if len(gap) > SHORT_GAP and not _INTRODUCES.search(gap):
            return None
        if _ORDINARY_CODE.search(gap) or _ordinary_after(text, match.end()):
            return None
        if _DATED_YEAR.search(text[max(0, match.end() - 16) : match.end()]):
            return None
        if _named_ordinary(text, match.start()):
            return None
        return _replace_group(match, 3, "[código]")

    text = _sub(_CODE_BEFORE, text, before)
    return _CODE_AFTER.sub(lambda m: _replace_group(m, 1, "[código]"), text)


def _ordinary_after(text: str, end: int) -> bool:
    """'código 28013 postal' is rare; 'código de 28013' is not a secret either: only what comes
    right after the number counts, a unit or a currency."""
    rest = text[end : end + 12].lstrip().lower()
    return rest.startswith(_UNITS)


_UNITS = (
    "€",
    "eur",
    "usd",
    "$",
    "pesos",
    "euros",
    "km",
    "kg",
    "segundo",
    "second",
    "minuto",
    "minute",
    "hora",
    "hour",
    "día",
    "dia",
    "day",
    "ms",
    "mb",
    "gb",
    "unidades",
    "units",
)
# A year after a word that dates it ("caduca el 2025", "since 2019") is not a code.
_DATED_YEAR = re.compile(
    r"\b(?:el|en|in|on|de|del|desde|hasta|since|until|año|year|for)\s+(?:19|20)\d\d$", _I
)


def _emails(text: str) -> str:
    if "@" not in text:
        return text
    return _EMAIL.sub(lambda m: f"[email {DOTS}@{m.group(1)}]", text)


def _addresses(text: str) -> str:
    if not _ADDRESS_WORD.search(text) or not any(ch.isdigit() for ch in text):
        return text
    return _ADDRESS.sub("[dirección]", text)


def _sub(
    pattern: re.Pattern[str], text: str, replace: Callable[[re.Match[str]], str | None]
) -> str:
    """pattern.sub where replace may decline a match (None keeps it as it is)."""

    def each(match: re.Match[str]) -> str:
        replaced = replace(match)
        return match.group(0) if replaced is None else replaced

    return pattern.sub(each, text)


def _replace_group(match: re.Match[str], group: int, label: str) -> str:
    whole = match.group(0)
    start, end = match.start(group) - match.start(), match.end(group) - match.start()
    return whole[:start] + label + whole[end:]


_STEPS: dict[str, Callable[[str], str]] = {
    "password": _password,
    "card": _cards,
    "cvv": _cvvs,
    "iban": lambda text: _accounts(_ibans(text)),
    "national_id": _national_ids,
    "code": _codes,
    "email": _emails,
    "address": _addresses,
}


def redact_json(value: Any, kinds: Iterable[str] = DEFAULT_KINDS) -> Any:
    """A JSON value (a memory's metadata) with every string in it redacted; keys too. A string
    met again is redacted once (metadata of one value repeated costs one redaction)."""
    wanted = frozenset(kinds)
    done: dict[str, str] = {}

    def text(item: str) -> str:
        if item not in done:
            done[item] = redact(item, wanted)
        return done[item]

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return text(item)
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
