"""One-time codes: 4-8 digits (up to 12 in groups of 3-4), written whole, in groups, in pairs
or digit by digit ("48 29 13", "4.8.2.9.1.3"), that a word naming a secret code introduces
("el código para recoger el paquete es 4821") or that "es tu código" follows.

A number is a code only when the words around it make it one: the words between the keyword
and the number, and those before the keyword in its clause, must not name an ordinary number
("código de rastreo 482913", "order code 55123", "el código de la oferta es 2024") unless
they are what the secret is for ("el código para retirar el pedido"). A date, a price or a
quantity after a code's word is not one.
"""

from __future__ import annotations

import re

from server.redaction.anchors import anchors, digit_before
from server.redaction.text import MASKED, Scan
from server.redaction.words import (
    clause_after,
    clause_before,
    ordinary_named,
    secret_named,
    since_last_number,
)

_KEYWORD = re.compile(
    r"(?:codigos?|codgo|cogido|cod\.?|codes?|numerito|mensajito|otp|pin|nip|passcode|token|clave|contrasena|senha|password|"
    r"verificacion|verificacao|verification|verify|2fa|autenticacion|autenticacao|"
    r"authentication|sms)\b"
)
SHORT_GAP, LONG_GAP = 40, 80
# A number: groups of digits with short separators, not part of a word, an amount or a path.
_NUMBER = (
    # (Not "AF-66866", an id's digits; "G-482913" is a code.)
    r"(?<![\w+/€$£#])(?<!\d[.,:])(?<![a-z][a-z]-)"
    r"\d{1,8}(?:[ .\-→]{1,3}\d{1,8}){0,11}(?![\w/:€$£%]|[.,]\d|-[a-z])"
)
_GAP_END = re.compile(rf"[\d\[.!?;{MASKED}]")  # where the words after a keyword stop
_NUMBER_AT = re.compile(_NUMBER)
# Words that introduce the number at the end of a long gap ("... por SMS al celular fue el").
_INTRODUCES = re.compile(
    r"(?:\b(?:es|fue|era|sera|is|was|e|eh|foi)|[:=])\s*+(?:(?:el|la|the|o|a)\s*+)?$"
)
_TAIL = (
    r"(?:es|is|sera|was|era|e|eh|foi)\s++(?:o\s++|a\s++)?(?:tu|your|su|el|the|mi|my|seu|teu|sua)"
    r"\s++(?:[a-z]+\s++){0,3}?(?:codigo|code|otp|pin|clave|passcode|senha|password)\b"
)
_BEFORE_KEYWORD = re.compile(
    rf"(?P<number>{_NUMBER})\s*+(?:[,:\-→←]\s*+)?(?:(?:ese|este|esse|that|this|isso|eso)\s++)?{_TAIL}"
)
# "ingresa el 482913 para continuar", "use 482913 to verify", "me llegó el 482913 por SMS".
_INSTRUCTED = re.compile(
    r"(?:use|usa|usar|utiliza|utilize|introduce|introduzca|ingresa|ingrese|digita|digite|"
    r"insira|insere|enter|type|escribe|escriba|informe|informa|teclea|marca|pon|ponga|coloca|"
    r"coloque)\s++(?:(?:el|o|the|este|this|esse)\s++)?(?P<number>"
    + _NUMBER
    + r")\s++(?:to|para|pra|como|as|en|no|na|in|on)\b"
)
_BY_SMS = re.compile(
    rf"(?P<number>{_NUMBER})\s++(?:que\s++)?(?:por|via|by|pelo|no|en\s++el|in\s++the|in\s++a)\s++"
    r"(?:sms|mensaje\s+de\s+texto|mensagem|text(?:\s+message)?)\b"
)
_GROUPS = re.compile(r"\d+")
_UNITS = (
    "€", "eur", "usd", "$", "pesos", "euros", "reais", "r$", "km", "kg", "segundo", "second",
    "minuto", "minute", "hora", "hour", "dia", "day", "ms", "mb", "gb", "unidades", "units",
    "%", "años", "anos", "years",
)  # fmt: skip


def find_codes(scan: Scan) -> None:
    fold = scan.fold
    for start, _ in anchors(scan, "code"):
        keyword = _KEYWORD.match(fold, start)
        if keyword is None:
            continue
        stop = _GAP_END.search(fold, keyword.end(), keyword.end() + LONG_GAP + 1)
        if stop is None or not fold[stop.start()].isdigit():
            continue
        match = _NUMBER_AT.match(fold, stop.start())
        if match is None:
            continue
        gap = fold[keyword.end() : stop.start()]
        if len(gap) > SHORT_GAP and not _INTRODUCES.search(gap):
            continue
        span = _code_span(fold, match.start(), match.end())
        if span is None or scan.claimed(*span):
            continue
        before = since_last_number(clause_before(fold, keyword.start(), 40))
        secret = secret_named(before)
        if (ordinary_named(gap) and not secret) or _QUANTITY.search(gap):
            continue
        if _after_is_ordinary(fold, span[1]) or (ordinary_named(before) and not secret):
            continue
        if _dated_year(fold, span[0]) or _a_time(fold, span[0], span[1]):
            continue
        scan.claim(span[0], span[1], "[código]", "code")
    # A number before the words that name it ("482913 es tu código", "... por SMS"), or
    # after a verb that hands it over ("ingresa el 482913 para continuar").
    found = [
        *(
            _BEFORE_KEYWORD.search(fold, max(0, s - 80), e)
            for s, e in anchors(scan, "tail")
            if digit_before(scan, s, 80)
        ),
        *(
            _BY_SMS.search(fold, max(0, s - 50), e)
            for s, e in anchors(scan, "sms")
            if digit_before(scan, s, 50)
        ),
        *(_INSTRUCTED.match(fold, s) for s, _ in anchors(scan, "verb")),
    ]
    for match in found:
        if match is None:
            continue
        span = _code_span(fold, match.start("number"), match.end("number"))
        if span is None or _after_is_ordinary(fold, match.end()):
            continue  # "2017-2110 es mi código de estudiante"
        scan.claim(span[0], span[1], "[código]", "code")
    scan.settle()


def _code_span(fold: str, start: int, end: int) -> tuple[int, int] | None:
    """The code among the number's groups: the longest run of groups from the first that is
    written as one code (one group of 4-8 digits; 3-4 digit groups up to 12 digits; pairs or
    single digits up to 8) and is not a date."""
    groups = [(m.start(), m.end()) for m in _GROUPS.finditer(fold, start, end)]
    if _is_date(fold[start:end]):
        return None
    sizes = [e - s for s, e in groups]
    best = None
    for last in range(len(groups)):
        chosen = sizes[: last + 1]
        total = sum(chosen)
        if len(chosen) == 1:
            ok = 4 <= total <= 8
        elif all(3 <= size <= 4 for size in chosen):
            ok = 6 <= total <= 12
        elif all(size <= 2 for size in chosen):
            ok = 4 <= total <= 8
        else:
            break
        if total > 12:
            break
        if ok:
            best = last
    if best is None:
        return None
    span = (groups[0][0], groups[best][1])
    if best > 0 and _is_date(fold[span[0] : span[1]]):
        return None
    return span


def _is_date(written: str) -> bool:
    """12.03.26, 2024-05-01, 12/03/2026: day, month and year in either order, with one of
    a date's separators."""
    parts = [int(p) for p in _GROUPS.findall(written)]
    separators = set(_GROUPS.split(written)[1:-1])
    if len(parts) != 3 or len(separators) != 1 or separators.pop().strip() not in ("/", "-", "."):
        return False
    day, month, year = parts
    if 1 <= day <= 31 and 1 <= month <= 12:
        return True
    year, month, day = parts
    return year >= 1900 and 1 <= month <= 12 and 1 <= day <= 31


def _after_is_ordinary(fold: str, end: int) -> bool:
    """A unit or a currency right after the number (an amount), or an ordinary noun it
    belongs to ("código 2024 de la tienda")."""
    rest = fold[end : end + 40]
    if rest.lstrip().startswith(_UNITS):
        return True
    belongs = _BELONGS.match(rest)
    if belongs is not None and ordinary_named(belongs.group(1)):
        return True
    return _DISCOUNT.search(clause_after(fold, end, 50)) is not None


# A discount later in the clause makes the code a promotion's ("usé el código 5401 y no me
# hizo el descuento").
_DISCOUNT = re.compile(
    r"\b(?:descuento|discount|desconto|promo\w*|cupon|cupom|coupon|oferta|offer|rebaja|voucher)\b"
)


_BELONGS = re.compile(
    r"\s*+(?:de|del|do|da|of|for)\s++((?:(?:la|el|los|las|o|a|the|my|mi|tu|su)\s++)?\w+)"
)
# Words that make the number after them a quantity ("my password manager has 1234 entries").
_QUANTITY = re.compile(
    r"\b(?:has|have|had|tiene|tienen|tenia|tem|tinha|hay|with|con|com|cuesta|costs?|custa|"
    r"mide|pesa|dura|tarda|lasts?|takes?|leva|demora|son|sao|are|were|fueron|foram)\b"
)


# A year after a word that dates it ("caduca el 2025", "since 2019") is not a code.
_DATED_YEAR = re.compile(
    r"\b(?:el|en|in|on|de|del|desde|hasta|since|until|ano|year|for|em|no|do)\s+$"
)


# "the code came at 10.50": a time, after the words that give one.
_AT = re.compile(r"\b(?:at|a\s+las|a\s+la|as|ate|hasta|from|desde|until|by|around|sobre)\s*+$")
_CLOCK = re.compile(r"([01]?\d|2[0-3])[.:h]([0-5]\d)")


def _a_time(fold: str, start: int, end: int) -> bool:
    return bool(_CLOCK.fullmatch(fold, start, end)) and bool(
        _AT.search(fold, max(0, start - 12), start)
    )


def _dated_year(fold: str, start: int) -> bool:
    number = fold[start : start + 5]
    if not (number[:4].isdigit() and number[:2] in ("19", "20")) or number[4:].isdigit():
        return False
    return bool(_DATED_YEAR.search(fold[max(0, start - 12) : start]))
