"""National ids, each confirmed by its check in python-stdnum: Spain's DNI and NIE, Mexico's
CURP and RFC, Argentina's CUIT/CUIL, Brazil's CPF, Chile's RUT; written with spaces, dots or
dashes in any place, a lower-case letter or none. Argentina's DNI (7-8 digits, no check) only
after its keyword; a bare CPF or CUIT (11 digits, like a phone number) only after theirs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from stdnum.ar import cuit
from stdnum.br import cpf
from stdnum.cl import rut
from stdnum.es import dni, nie
from stdnum.exceptions import ValidationError
from stdnum.mx import curp, rfc

from server.redaction.anchors import anchors, number_windows
from server.redaction.text import Scan
from server.redaction.words import GAP_CHARS

_S = r"[ .\-]?"  # one optional separator between any two characters
# Spain's DNI: 8 digits and a check letter; NIE: X/Y/Z, 7 digits and a check letter.
_L = r"(?:\s?[.\-]\s?|\s)?"  # before the check letter: a space, a dot or a dash, " - "
_DNI = re.compile(rf"(\d(?<![\w+.,]\d)(?:{_S}\d){{7}})({_L}[a-zA-Z])(?!\w)")
_NIE = re.compile(rf"([xyzXYZ](?<![\w+.,][xyzXYZ]){_S}\d(?:{_S}\d){{6}})({_L}[a-zA-Z])(?!\w)")
# On the fold view (lower case): CURP and RFC each hold six digits in a row (a date).
_CURP = re.compile(rf"(?<!\w)[a-z]{{4}}{_S}\d{{6}}{_S}[hmx]{_S}[a-z]{{5}}{_S}[a-z0-9]{_S}\d(?!\w)")
_RFC = re.compile(rf"(?<!\w)[a-z&]{{3,4}}{_S}\d{{6}}{_S}[a-z0-9]{{3}}(?!\w)")
_DATE_DIGITS = re.compile(r"\d{6}")
_CUIT = re.compile(r"\d(?<![\w+.,]\d)\d[ .\-]\d{8}[ .\-]\d(?![\w]|[.,]\d)")
_CUIT_DOTTED = re.compile(r"\d(?<![\w+.,]\d)\d[ .\-]\d{1,2}\.\d{3}\.\d{3}[ .\-]\d(?![\w]|[.,]\d)")
# Chile's RUT: 12.345.678-5 (the check may be K).
_RUT = re.compile(r"\d(?<![\w+.,]\d)\d?\.\d{3}\.\d{3}-[\dk](?![\w]|[.,]\d)")
_CPF = re.compile(r"\d(?<![\w+.,]\d)\d{2}\.?\d{3}\.?\d{3}-\d{2}(?![\w]|[.,]\d)")
# The ids written with digits only, in one pass (no two of them match at one place).
_DIGIT_IDS = re.compile(
    rf"(?P<cuit>{_CUIT.pattern})|(?P<cuit_dotted>{_CUIT_DOTTED.pattern})|"
    rf"(?P<cpf>{_CPF.pattern})|(?P<rut>{_RUT.pattern})"
)
_BY_KIND: dict[str, tuple[object, str]] = {
    "curp": (curp, "[CURP]"),
    "rfc": (rfc, "[RFC]"),
    "cuit": (cuit, "[CUIT]"),
    "cuit_dotted": (cuit, "[CUIT]"),
    "cpf": (cpf, "[CPF]"),
    "rut": (rut, "[RUT]"),
}
_ID_WORD = (
    r"dni|d\.n\.i\.?|nif|nie|n\.i\.e\.?|tie|extranjero|extranjeria|residencia|documento(?:\s+(?:de\s+identidad|nacional(?:\s+de\s+identidad)?))?|"
    r"cedula|c\.?\s?c\.?|identidad|id|cuit|cuil|cpf|c\.p\.f\.?|rg|curp|rfc|ine|pasaporte|"
    r"nro\.?\s+(?:de\s+)?doc(?:umento)?\.?|doc\.?"
)
_NAMED = re.compile(
    rf"(?:{_ID_WORD})\b(?:{GAP_CHARS}){{0,40}}?(?<![\d+.,])"
    r"(\d(?:[ .\-]?\d){6,10})(?![\d]|[.,]\d|[a-z]\b)"
)
_ID_WORDS = re.compile(rf"(?:{_ID_WORD})\b")


def find_ids(scan: Scan) -> None:
    view = scan.view
    windows = number_windows(scan, 6, 10, 14)
    named_before = [end for _, end in anchors(scan, "id")]
    for match in _each(_NIE, view, windows):
        number = _compact(match.group(0)).upper()
        if _valid(nie, number) and _letter_ok(match, named_before):
            scan.claim(match.start(), match.end(), "[NIE]", "national_id")
    for match in _each(_DNI, view, windows):
        number = _compact(match.group(0)).upper()
        ok = _valid(dni, number) and _letter_ok(match, named_before)
        if ok and not scan.claimed(match.start(), match.end()):
            scan.claim(match.start(), match.end(), "[DNI]", "national_id")
    scan.settle()
    fold = scan.fold
    patterns: list[re.Pattern[str]] = [_DIGIT_IDS]
    if any(_DATE_DIGITS.search(fold, start, end) for start, end in windows):
        patterns = [_CURP, _RFC, *patterns]
    for pattern in patterns:
        for match in _each(pattern, fold, windows):
            if scan.claimed(match.start(), match.end()):
                continue
            number = _compact(scan.view[match.start() : match.end()]).upper()
            kind = match.lastgroup or ("curp" if pattern is _CURP else "rfc")
            module, label = _BY_KIND[kind]
            if module is rfc:
                ok = _valid(rfc, number, validate_check_digits=True)
            else:
                ok = _valid(module, number)
            if ok:
                scan.claim(match.start(), match.end(), label, "national_id")
    scan.settle()
    _named_ids(scan)
    scan.settle()


def _each(
    pattern: re.Pattern[str], text: str, windows: list[tuple[int, int]]
) -> Iterator[re.Match[str]]:
    """The pattern's matches within the windows (every id holds six digits or more)."""
    for start, end in windows:
        yield from pattern.finditer(text, start, end)


# "34139920 ese es el dni de mi mamá": Argentina's DNI before the words that name it.
_DNI_BEFORE = re.compile(
    r"(?<![\d+.,])(\d{1,2}[ .]?\d{3}[ .]?\d{3})\s++(?:(?:ese|este|esse|that)\s++)?"
    r"(?:es|is|e|eh)\s++(?:(?:el|mi|my|o|meu|the)\s++)?(?:dni|documento)\b"
)


def _named_ids(scan: Scan) -> None:
    """Numbers after an id's keyword: a bare CPF or CUIT (11 digits), Argentina's DNI."""
    fold = scan.fold
    for start, end in anchors(scan, "id"):
        if fold.startswith(("dni", "documento"), start):
            before = _DNI_BEFORE.search(fold, max(0, start - 40), end)
            if before is not None and before.end() == end:
                scan.claim(before.start(1), before.end(1), "[DNI]", "national_id")
        match = _NAMED.match(fold, start)
        if match is None:
            continue
        word = match.group(0)[: match.start(1) - match.start()].strip().split()[0]
        number = "".join(ch for ch in match.group(1) if ch.isdigit())
        label = None
        if len(number) == 11 and _valid(cpf, number):
            label = "[CPF]"
        elif len(number) == 11 and _valid(cuit, number):
            label = "[CUIT]"
        elif len(number) in (7, 8) and word.startswith(("dni", "d.n.i", "doc", "nro")):
            label = "[DNI]"  # Argentina's DNI: no check, so only after its keyword
        if label and not scan.claimed(match.start(1), match.end(1)):
            scan.claim(match.start(1), match.end(1), label, "national_id")


def _letter_ok(match: re.Match[str], named_ends: list[int]) -> bool:
    """A DNI's or NIE's letter in capitals, or glued to the number, counts; one in lower case
    after a separator ("84731247 y el ...") only when an id's keyword comes shortly before."""
    letter = match.group(2)
    if letter[-1].isupper() or len(letter) == 1:
        return True
    return any(-30 <= match.start() - end <= 40 for end in named_ends)


def _compact(written: str) -> str:
    return "".join(ch for ch in written if ch.isalnum())


def _valid(module: object, number: str, **kwargs: bool) -> bool:
    try:
        module.validate(number, **kwargs)  # type: ignore[attr-defined]
    except (ValidationError, ValueError, ArithmeticError):
        return False
    return True
