"""The redaction bench's corpus: generated (seeded) secrets and ordinary messages by class.

Each class has two parts: dev (benchmarks/redaction_dev.py, the rules may be tuned on it) and
test (benchmarks/redaction_heldout.py, never tuned on). Every secret's value is valid for its
checksum (python-stdnum computes the check digits; Mexico's CLABE by its published weights), and
every ordinary value that would pass a card's, a CLABE's, a CPF's, a CUIT's or a CBU's check is
drawn again, so a miss or an alteration is the rules' own.

A secret is caught when no form of it is left (see `caught`); an ordinary message is altered
when its redacted text differs from it at all. The corpus checks itself as it is built: its
text without the secret's span counts as caught, and its text as it is does not.
"""

from __future__ import annotations

import random
import re
import string
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from stdnum import iban as iban_module
from stdnum import luhn
from stdnum.ar import cbu, cuit
from stdnum.br import cpf
from stdnum.es import dni, nie
from stdnum.mx import curp, rfc

from benchmarks import redaction_dev, redaction_heldout

PARTS = ("dev", "test")
WORDINGS: dict[str, dict[str, tuple[str, ...]]] = {
    "dev": {**redaction_dev.SECRETS, **redaction_dev.ORDINARY},
    "test": {**redaction_heldout.SECRETS, **redaction_heldout.ORDINARY},
}
SECRET_CLASSES: tuple[str, ...] = tuple(redaction_dev.SECRETS)
ORDINARY_CLASSES: tuple[str, ...] = tuple(redaction_dev.ORDINARY)
ROUND_1_CLASSES = frozenset({"card", "cvv", "code", "iban", "national_id", "password", "ordinary"})

_DIGITS = string.digits
_UPPER = string.ascii_uppercase


@dataclass(frozen=True, slots=True)
class Turn:
    """One message of the corpus; a secret's forms that must not survive redaction."""

    text: str
    klass: str
    part: str  # dev or test
    secret: str = ""  # the secret as written ("" for an ordinary message)
    compact: str = ""  # its digits (and letters), lower-case
    words: tuple[str, ...] = ()  # a multi-word password's words of 3 characters or more

    @property
    def is_secret(self) -> bool:
        return bool(self.secret)


# -- the "caught" check ---------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\[[^\[\]]*\]")


def normalise(text: str) -> str:
    """NFKC, every Unicode decimal digit as ASCII, format characters (zero-width...) dropped."""
    out = []
    for char in unicodedata.normalize("NFKC", text):
        if unicodedata.category(char) == "Cf":
            continue
        digit = unicodedata.decimal(char, None)
        out.append(str(digit) if digit is not None else char)
    return "".join(out)


def squash(text: str) -> str:
    """Letters and digits only, lower-case."""
    return "".join(c for c in text if c.isalnum()).lower()


def caught(turn: Turn, redacted: str) -> bool:
    """No form of the secret is left: neither its compact value in the text with every
    non-alphanumeric removed, nor its written form, nor (a multi-word password) any word of it;
    placeholders ([...]) are taken out first and the text is normalised."""
    text = normalise(_PLACEHOLDER.sub(" ", redacted)).lower()
    if turn.compact in squash(text) or normalise(turn.secret).lower() in text:
        return False
    return not any(re.search(rf"(?<!\w){re.escape(w)}(?!\w)", text) for w in turn.words)


# -- secrets' values: (written, compact) ----------------------------------------------------------

# (prefix, length): Visa, Mastercard (both ranges), Amex, Discover, JCB, Diners, UnionPay, and
# Brazil's Elo and Hipercard.
_ISSUERS: tuple[tuple[str, int], ...] = (
    ("4", 16),
    ("4", 16),
    ("4", 16),
    ("51", 16),
    ("55", 16),
    ("2221", 16),
    ("2720", 16),
    ("34", 15),
    ("37", 15),
    ("6011", 16),
    ("65", 16),
    ("3530", 16),
    ("3589", 16),
    ("36", 14),
    ("62", 16),
    ("4", 19),
    ("636368", 16),
    ("606282", 16),
    ("5067", 16),
)


def _digits(rng: random.Random, n: int) -> str:
    return str(rng.randrange(10**n)).zfill(n)


def card_number(rng: random.Random) -> str:
    """A Luhn-valid number of a real issuer's prefix and length."""
    prefix, length = rng.choice(_ISSUERS)
    body = prefix + _digits(rng, length - len(prefix) - 1)
    return body + luhn.calc_check_digit(body)


def card_groups(number: str) -> list[str]:
    """The groups a card is printed in: 4-6-5 (15), 4-6-4 (14), else fours."""
    if len(number) == 15:
        return [number[:4], number[4:10], number[10:]]
    if len(number) == 14:
        return [number[:4], number[4:10], number[10:]]
    return [number[i : i + 4] for i in range(0, len(number), 4)]


def card(rng: random.Random) -> tuple[str, str]:
    """Round 1's cards: spaces, dashes or none."""
    number = card_number(rng)
    style = rng.choice(["spaces", "plain", "dashes"])
    if style == "plain":
        return number, number
    return (" " if style == "spaces" else "-").join(card_groups(number)), number


_GAPS = {
    "double space": ["  "],
    "tab": ["\t", " \t"],
    "spaced dash": [" - "],
    "slash": ["/", " / "],
    "comma": [",", ", "],
    "underscore": ["_"],
    "line break": ["\n", " \n"],
    "thin space": ["\u2009"],
    "no-break space": ["\u00a0", "\u202f"],  # no-break, narrow no-break
    "zero-width": ["\u200b", " \u200b", "\u2060", "\ufeff"],  # zero-width space, joiner, BOM
    "emoji": [" 💳 ", "✨", " \u2796 ", "🔹", " 👉 "],
}


def _small_groups(rng: random.Random, number: str) -> list[str]:
    groups, i = [], 0
    while i < len(number):
        size = rng.randint(1, 3)
        groups.append(number[i : i + size])
        i += size
    return groups


def card_separators(rng: random.Random) -> tuple[str, str]:
    """A card typed the way people type it: odd separators, small groups, parentheses."""
    number = card_number(rng)
    groups = card_groups(number)
    style = rng.choice([*_GAPS, "small groups", "parentheses", "mixed"])
    if style == "small groups":
        return rng.choice([" ", "  ", "-"]).join(_small_groups(rng, number)), number
    if style == "parentheses":
        first = f"({groups[0]})"
        return rng.choice([" ", "", "-"]).join([first, *groups[1:]]), number
    if style == "mixed":
        gaps = [g for options in _GAPS.values() for g in options]
        written = groups[0]
        for group in groups[1:]:
            written += rng.choice(gaps) + group
        return written, number
    return rng.choice(_GAPS[style]).join(groups), number


_DIGIT_SETS = {"full-width": 0xFF10, "arabic-indic": 0x0660, "extended arabic-indic": 0x06F0}


def _shift_digits(text: str, zero: int) -> str:
    return "".join(chr(zero + int(c)) if c.isdigit() else c for c in text)


def card_digits(rng: random.Random) -> tuple[str, str]:
    """A card in full-width or Arabic-Indic digits (or ASCII and full-width groups mixed)."""
    number = card_number(rng)
    groups = card_groups(number)
    zero = rng.choice(list(_DIGIT_SETS.values()))
    if rng.random() < 0.2:
        shifted = [_shift_digits(g, 0xFF10) if i % 2 else g for i, g in enumerate(groups)]
        return " ".join(shifted), number
    sep = rng.choice([" ", "", "-", "\u3000" if zero == 0xFF10 else " "])
    return sep.join(_shift_digits(g, zero) for g in groups), number


def card_glued(rng: random.Random) -> tuple[str, str]:
    """A card whose wording glues it to a word or a '+': plain, spaced or dashed."""
    number = card_number(rng)
    style = rng.choice(["plain", "plain", "spaces", "dashes"])
    if style == "plain":
        return number, number
    return (" " if style == "spaces" else "-").join(card_groups(number)), number


def cvv(rng: random.Random) -> tuple[str, str]:
    value = _digits(rng, rng.choice([3, 3, 4]))
    return value, value


def cvv_typed(rng: random.Random) -> tuple[str, str]:
    """3 digits (4 for an Amex), as they are or digit by digit."""
    value = _digits(rng, 3 if rng.random() < 0.9 else 4)
    if rng.random() < 0.4:
        return rng.choice([" ", "-", " - ", ".", ", "]).join(value), value
    return value, value


def code(rng: random.Random) -> tuple[str, str]:
    """Round 1's one-time codes: 4 to 8 digits, some as 3-3."""
    n = rng.choice([4, 6, 6, 6, 8])
    value = _digits(rng, n)
    if n == 6 and rng.random() < 0.25:
        return f"{value[:3]}-{value[3:]}", value
    return value, value


_KEYCAP = "\ufe0f\u20e3"


def code_split(rng: random.Random) -> tuple[str, str]:
    """A one-time code split in pairs or digits, with dots, emoji or zero-width characters."""
    value = _digits(rng, rng.choice([6, 6, 6, 4, 8]))
    pairs = [value[i : i + 2] for i in range(0, len(value), 2)]
    style = rng.choice(["pairs", "digits", "dots", "emoji", "keycaps", "zero-width", "dashes"])
    if style == "pairs":
        return rng.choice([" ", "  ", " - "]).join(pairs), value
    if style == "digits":
        return " ".join(value), value
    if style == "dots":
        return ".".join(rng.choice([pairs, list(value)])), value
    if style == "emoji":
        return rng.choice(["🔸", " 👉 ", "⭐"]).join(rng.choice([pairs, list(value)])), value
    if style == "keycaps":
        return "".join(c + _KEYCAP for c in value), value
    if style == "zero-width":
        return rng.choice(["\u200b", "\u200c", "\u2060"]).join(value), value
    return "-".join(value), value


def code_purpose(rng: random.Random) -> tuple[str, str]:
    value = _digits(rng, rng.choice([4, 5, 6, 6, 8]))
    return value, value


_IBAN_COUNTRIES = (("ES", 20), ("DE", 18), ("FR", 23), ("IT", 23), ("PT", 21))


def iban_number(rng: random.Random) -> str:
    while True:
        country, bban_len = rng.choice(_IBAN_COUNTRIES)
        bban = _digits(rng, bban_len)
        if country == "IT":
            bban = rng.choice(_UPPER) + bban[1:]
        number = country + iban_module.calc_check_digits(country + "00" + bban) + bban
        if iban_module.is_valid(number):  # a national check (Spain's, France's) may fail
            return number


def _fours(number: str) -> list[str]:
    return [number[i : i + 4] for i in range(0, len(number), 4)]


def iban(rng: random.Random) -> tuple[str, str]:
    """Round 1's IBANs: in groups of four or as one run."""
    number = iban_number(rng)
    if rng.random() < 0.6:
        return " ".join(_fours(number)), number
    return number, number


def iban_typed(rng: random.Random) -> tuple[str, str]:
    """An IBAN with a space after the country, dots, line breaks, full-width digits or dashes."""
    number = iban_number(rng)
    groups = _fours(number)
    style = rng.choice(["country space", "dots", "line breaks", "full-width", "lower", "dashes"])
    if style == "country space":
        rest = rng.choice([" ".join(groups[1:]), "".join(groups[1:])])
        return f"{number[:2]} {number[2:4]} {rest}", number
    if style == "dots":
        return ".".join(groups), number
    if style == "line breaks":
        cut = rng.randint(2, len(groups) - 1)
        return " ".join(groups[:cut]) + "\n" + " ".join(groups[cut:]), number
    if style == "full-width":
        return " ".join(_shift_digits(g, 0xFF10) for g in groups), number
    if style == "lower":
        return " ".join(groups).lower(), number
    return "-".join(groups), number


def _dni_number(rng: random.Random) -> str:
    body = _digits(rng, 8)
    return body + dni.calc_check_digit(body)


def _nie_number(rng: random.Random) -> str:
    body = rng.choice("XYZ") + _digits(rng, 7)
    return body + nie.calc_check_digit(body)


def _curp_number(rng: random.Random) -> str:
    while True:
        date = f"{rng.randint(50, 99):02d}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}"
        body = "".join(rng.choice(_UPPER) for _ in range(4)) + date + rng.choice("HM")
        body += rng.choice(["DF", "JC", "NL", "MC", "GT", "PL"])
        body += "".join(rng.choice("BCDFGHJKLMNPQRSTVWXZ") for _ in range(3)) + rng.choice(_UPPER)
        number = body + curp.calc_check_digit(body)
        if curp.is_valid(number):
            return number


def _rfc_number(rng: random.Random, letters: int = 4) -> str:
    while True:
        date = f"{rng.randint(50, 99):02d}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}"
        body = "".join(rng.choice(_UPPER) for _ in range(letters)) + date
        # the homoclave's alphabet: [1-9A-V][1-9A-Z], then the check digit
        body += rng.choice("123456789ABCDEFGHIJKLMNOPQRSTUV")
        body += rng.choice("123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")
        number = body + rfc.calc_check_digit(body)
        if rfc.is_valid(number, validate_check_digits=True):
            return number


def _cuit_number(rng: random.Random) -> str:
    while True:
        body = rng.choice(["20", "23", "27", "30", "33"]) + _digits(rng, 8)
        number = body + cuit.calc_check_digit(body)
        if cuit.is_valid(number):
            return number


def _cpf_number(rng: random.Random) -> str:
    while True:
        body = _digits(rng, 9)
        for i in range(100):
            if cpf.is_valid(body + f"{i:02d}"):
                return body + f"{i:02d}"


def national_id(rng: random.Random) -> tuple[str, str]:
    """Round 1's ids: DNI, NIE, CURP, RFC, CUIT, CPF in their usual printed forms."""
    which = rng.choice(["DNI", "NIE", "CURP", "RFC", "CUIT", "CPF"])
    if which == "DNI":
        number = _dni_number(rng)
        return (number if rng.random() < 0.7 else f"{number[:8]}-{number[8]}"), number
    if which == "NIE":
        number = _nie_number(rng)
        return number, number
    if which == "CURP":
        number = _curp_number(rng)
        return number, number
    if which == "RFC":
        number = _rfc_number(rng)
        return number, number
    if which == "CUIT":
        number = _cuit_number(rng)
        return f"{number[:2]}-{number[2:10]}-{number[10]}", number
    number = _cpf_number(rng)
    return f"{number[:3]}.{number[3:6]}.{number[6:9]}-{number[9:]}", number


def dni_es(rng: random.Random) -> tuple[str, str]:
    """Spain's DNI with spaces, dots or dashes, or a lower-case letter."""
    number = _dni_number(rng)
    digits, letter = number[:8], number[8]
    letter = rng.choice([letter, letter.lower()])
    body = rng.choice([digits, f"{digits[:2]} {digits[2:5]} {digits[5:]}", digits])
    if rng.random() < 0.25:
        body = f"{digits[:2]}.{digits[2:5]}.{digits[5:]}"
    sep = rng.choice([" ", "", "-", " - "]) if letter.isupper() else rng.choice([" ", "", "-"])
    return body + sep + letter, number.lower()


def nie_es(rng: random.Random) -> tuple[str, str]:
    """Spain's NIE with spaces or dashes, or in lower case."""
    number = _nie_number(rng)
    first, digits, letter = number[0], number[1:8], number[8]
    if rng.random() < 0.4:
        first, letter = first.lower(), letter.lower()
    a, b = rng.choice([(" ", " "), ("-", "-"), ("", " "), (" ", ""), ("", "")])
    return f"{first}{a}{digits}{b}{letter}", number.lower()


def curp_spaced(rng: random.Random) -> tuple[str, str]:
    """A CURP with spaces in one of the places people put them, or in lower case."""
    number = _curp_number(rng)
    parts = [number[:4], number[4:10], number[10:16], number[16:]]
    style = rng.choice(["all", "date", "tail", "lower"])
    if style == "all":
        return " ".join(parts), number.lower()
    if style == "date":
        return f"{parts[0]} {parts[1]} {''.join(parts[2:])}", number.lower()
    if style == "tail":
        return f"{''.join(parts[:3])} {parts[3]}", number.lower()
    return number.lower(), number.lower()


def rfc_dashed(rng: random.Random) -> tuple[str, str]:
    """An RFC (a person's or a company's) with dashes or spaces, or in lower case."""
    number = _rfc_number(rng, letters=rng.choice([4, 4, 3]))
    head = len(number) - 9
    parts = [number[:head], number[head : head + 6], number[head + 6 :]]
    style = rng.choice(["dashes", "dashes", "spaces", "tail", "lower"])
    if style == "dashes":
        return "-".join(parts), number.lower()
    if style == "spaces":
        return " ".join(parts), number.lower()
    if style == "tail":
        return f"{parts[0]}{parts[1]}-{parts[2]}", number.lower()
    return "-".join(parts).lower(), number.lower()


def cuit_dotted(rng: random.Random) -> tuple[str, str]:
    """A CUIT or CUIL with dots, spaces or mixed separators."""
    number = _cuit_number(rng)
    kind, body, check = number[:2], number[2:10], number[10]
    dotted = f"{body[:2]}.{body[2:5]}.{body[5:]}"
    written = rng.choice(
        [
            f"{kind}.{body}.{check}",
            f"{kind}-{dotted}-{check}",
            f"{kind}.{dotted}-{check}",
            f"{kind} {body} {check}",
            f"{kind} {dotted} {check}",
        ]
    )
    return written, number


def cpf_printed(rng: random.Random) -> tuple[str, str]:
    """A CPF in its three printed forms: 123.456.789-09, 123456789-09, 12345678909."""
    number = _cpf_number(rng)
    dotted = f"{number[:3]}.{number[3:6]}.{number[6:9]}-{number[9:]}"
    written = rng.choice([dotted, f"{number[:9]}-{number[9:]}", number])
    return written, number


def dni_ar(rng: random.Random) -> tuple[str, str]:
    """Argentina's DNI: 7 or 8 digits, with dots or without (no check digit)."""
    number = str(rng.randint(5_000_000, 47_999_999))
    head = len(number) - 6
    written = rng.choice(
        [
            f"{number[:head]}.{number[head : head + 3]}.{number[head + 3 :]}",
            number,
            f"{number[:head]}.{number[head : head + 3]}.{number[head + 3 :]}",
            f"{number[:head]} {number[head : head + 3]} {number[head + 3 :]}",
        ]
    )
    return written, number


_CLABE_BANKS = ("002", "012", "014", "021", "030", "036", "044", "072", "127", "137", "646", "638")


def clabe_check_digit(first17: str) -> str:
    """Mexico's CLABE check digit: weights 3, 7, 1 repeated, each product mod 10, sum mod 10."""
    total = sum((int(d) * (3, 7, 1)[i % 3]) % 10 for i, d in enumerate(first17))
    return str((10 - total % 10) % 10)


def clabe_valid(number: str) -> bool:
    return len(number) == 18 and number.isdigit() and clabe_check_digit(number[:17]) == number[17]


def clabe(rng: random.Random) -> tuple[str, str]:
    """Mexico's CLABE: bank (3), branch (3), account (11), check digit; plain or grouped."""
    first17 = rng.choice(_CLABE_BANKS) + _digits(rng, 14)
    number = first17 + clabe_check_digit(first17)
    written = rng.choice(
        [
            number,
            number,
            f"{number[:3]} {number[3:6]} {number[6:17]} {number[17]}",
            " ".join([number[i : i + 4] for i in range(0, 18, 4)]),
            f"{number[:3]}-{number[3:6]}-{number[6:17]}-{number[17]}",
        ]
    )
    return written, number


_PASSWORD_WORDS = ("Perro", "Sol", "Luna", "Tango", "River", "Madrid", "Coco", "Blue", "Tiger")
_PASSWORD_MORE = ("Flamengo", "gatinho", "Boca", "chivas", "Mar", "pollito", "Estrela", "azul")


def password(rng: random.Random) -> tuple[str, str]:
    """Round 1's passwords: a word, a number, maybe a sign."""
    value = rng.choice(_PASSWORD_WORDS) + str(rng.randint(10, 9999))
    value += rng.choice(["!", "#", "", "*", "$"])
    return value, squash(value)


def password_typed(rng: random.Random) -> tuple[str, str]:
    """A one-word password of several shapes."""
    word = rng.choice(_PASSWORD_WORDS + _PASSWORD_MORE)
    style = rng.choice(["word number sign", "word@year", "random", "snake"])
    if style == "word number sign":
        value = word + str(rng.randint(1, 9999)) + rng.choice(["!", "#", "", "*", "$", "&"])
    elif style == "word@year":
        value = f"{word.lower()}{rng.choice('@_.')}{rng.randint(1990, 2026)}"
    elif style == "random":
        alphabet = string.ascii_letters + _DIGITS + "#$%&*!"
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(8, 12)))
        value = rng.choice(_UPPER) + value[1:]
    else:
        value = f"{word.lower()}_{rng.choice(['y', 'e', 'and'])}_{rng.choice(_PASSWORD_MORE)}"
        value = value.lower() + str(rng.randint(1, 99))
    return value, squash(value)


_PHRASE_WORDS = (
    "gato",
    "preto",
    "luna",
    "cielo",
    "verde",
    "monkey",
    "purple",
    "dishwasher",
    "tigre",
    "naranja",
    "montaña",
    "estrela",
    "amarelo",
    "caballo",
    "river",
    "campeón",
    "biblioteca",
    "chocolate",
    "mariposa",
    "girassol",
    "elefante",
    "horse",
    "battery",
    "staple",
    "correct",
    "tortuga",
    "abacaxi",
    "saudade",
)


def password_phrase(rng: random.Random) -> tuple[str, str]:
    """A password of 2 to 4 words (maybe with a number), written inside quotes."""
    words = rng.sample(_PHRASE_WORDS, rng.randint(2, 4))
    if rng.random() < 0.3:
        words.insert(rng.randint(0, len(words)), rng.choice(["de", "la", "mi", "do", "my"]))
    if rng.random() < 0.4:
        words.append(str(rng.randint(1, 2026)))
    if rng.random() < 0.3:
        words[0] = words[0].capitalize()
    value = " ".join(words)
    return value, squash(value)


SECRET_VALUES: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "card": card,
    "cvv": cvv,
    "code": code,
    "iban": iban,
    "national_id": national_id,
    "password": password,
    "card_separators": card_separators,
    "card_digits": card_digits,
    "card_glued": card_glued,
    "card_after_order": card,
    "cvv_typed": cvv_typed,
    "code_split": code_split,
    "code_purpose": code_purpose,
    "iban_typed": iban_typed,
    "password_typed": password_typed,
    "password_phrase": password_phrase,
    "dni_es": dni_es,
    "nie_es": nie_es,
    "curp": curp_spaced,
    "rfc": rfc_dashed,
    "cuit": cuit_dotted,
    "cpf": cpf_printed,
    "dni_ar": dni_ar,
    "clabe": clabe,
}


# -- ordinary values ------------------------------------------------------------------------------


def _secret_like(digits: str) -> bool:
    """Would pass a card's (any Luhn-valid 12-19 digits from 2 to 6), a CLABE's, a CPF's, a
    CUIT's or a CBU's check: not an ordinary number, whatever its words say."""
    n = len(digits)
    if 12 <= n <= 19 and digits[0] in "23456" and luhn.is_valid(digits):
        return True
    if n == 18 and clabe_valid(digits):
        return True
    if n == 11 and (cpf.is_valid(digits) or cuit.is_valid(digits)):
        return True
    return n == 22 and cbu.is_valid(digits)


def _looks_secret(value: str) -> bool:
    runs = re.findall(r"\d+", value)
    return any(_secret_like(r) for r in [*runs, "".join(runs)])


_MONTHS_ES = ("enero", "marzo", "abril", "mayo", "julio", "agosto", "octubre", "diciembre")
_MONTHS_EN = ("January", "March", "April", "May", "July", "August", "October", "December")


def _date(rng: random.Random) -> str:
    d, m, y = rng.randint(1, 28), rng.randint(1, 12), rng.randint(2023, 2027)
    return rng.choice(
        [
            f"{d:02d}/{m:02d}/{y}",
            f"{d}/{m}/{y}",
            f"{d:02d}-{m:02d}-{y}",
            f"{y}-{m:02d}-{d:02d}",
            f"{d:02d}.{m:02d}.{y}",
            f"{d}/{m}",
            f"{d:02d}/{m:02d}/{y % 100:02d}",
            f"{d} de {rng.choice(_MONTHS_ES)} de {y}",
            f"{rng.choice(_MONTHS_EN)} {d}, {y}",
        ]
    )


def _time(rng: random.Random) -> str:
    h, m = rng.randint(7, 22), rng.choice([0, 15, 30, 45, 10, 50])
    twelve = f"{h % 12 or 12}:{m:02d} pm"
    return rng.choice(
        [
            f"{h}:{m:02d}",
            f"{h:02d}:{m:02d}",
            f"{h}h{m:02d}",
            f"{h}h",
            twelve,
            f"{h}.{m:02d}",
            f"{h}hs",
        ]
    )


def _price(rng: random.Random) -> str:
    whole, cents = rng.randint(3, 25000), rng.randint(0, 99)
    thousands = f"{whole:,}"
    return rng.choice(
        [
            f"€ {thousands.replace(',', '.')},{cents:02d}",
            f"R$ {thousands.replace(',', '.')},{cents:02d}",
            f"${thousands}.{cents:02d}",
            f"MXN {thousands.replace(',', ' ')}",
            f"{whole},{cents:02d} €",
            f"$ {thousands.replace(',', '.')}",
            f"US$ {whole}",
            f"{whole} reais",
        ]
    )


def _phone(rng: random.Random) -> str:

    def d(n: int) -> str:
        return _digits(rng, n)

    return rng.choice(
        [
            f"+55119{d(8)}",
            f"+346{d(8)}",
            f"+52155{d(8)}",
            f"+54911{d(8)}",
            f"+1415{d(7)}",
            f"+34 6{d(2)} {d(3)} {d(3)}",
            f"+55 11 9{d(4)}-{d(4)}",
            f"6{d(2)} {d(2)} {d(2)} {d(2)}",
            f"(11) 9{d(4)}-{d(4)}",
            f"55 {d(4)} {d(4)}",
            f"011 15-{d(4)}-{d(4)}",
            f"11 9{d(4)} {d(4)}",
            f"(415) {d(3)}-{d(4)}",
            f"6{d(8)}",
        ]
    )


def _tracking(rng: random.Random) -> str:

    def d(n: int) -> str:
        return _digits(rng, n)

    return rng.choice(
        [
            d(6),
            f"LX{d(9)}ES",
            f"NL{d(9)}BR",
            f"OV{d(9)}BR",
            f"1Z{d(3)}AA{d(10)}",
            f"JD{d(18)}",
            d(10),
            d(12),
            d(14),
            f"MEL{d(9)}",
        ]
    )


def _e2e(rng: random.Random) -> str:
    """A Pix end-to-end id: E, the bank's ISPB (8), yyyyMMddHHmm, 11 letters and digits."""
    stamp = f"2025{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}{rng.randint(0, 23):02d}"
    stamp += f"{rng.randint(0, 59):02d}"
    tail = "".join(rng.choice(string.ascii_letters + _DIGITS) for _ in range(11))
    return f"E{_digits(rng, 8)}{stamp}{tail}"


def _ean13(rng: random.Random) -> str:
    body = _digits(rng, 12)
    total = sum(int(c) * (3 if i % 2 else 1) for i, c in enumerate(body))
    return body + str((10 - total % 10) % 10)


def _d(rng: random.Random, n: int) -> str:
    return _digits(rng, n)


# How each field an ordinary wording may name is drawn.
_FIELDS: dict[str, Callable[[random.Random], str]] = {
    "order": lambda r: r.choice(
        [
            _d(r, r.randint(5, 10)),
            "A-" + _d(r, 6),
            "PED" + _d(r, 8),
            f"{_d(r, 4)}-{_d(r, 4)}",
            "#" + _d(r, 7),
        ]
    ),
    "order2": lambda r: _d(r, r.randint(5, 9)),
    "date": _date,
    "date2": _date,
    "time": _time,
    "time2": _time,
    "hour": lambda r: str(r.randint(7, 11)),
    "tracking": _tracking,
    "trk": _tracking,
    "price": _price,
    "phone": _phone,
    "n": lambda r: str(r.randint(1, 40)),
    "n2": lambda r: str(r.randint(2, 100)),
    "grams": lambda r: str(r.choice([50, 100, 250, 500, 750, 1000, 1500, 2000])),
    "postcode": lambda r: _d(r, 5),
    "cp": lambda r: _d(r, 5),
    "zip": lambda r: r.choice([_d(r, 5), f"{_d(r, 5)}-{_d(r, 4)}"]),
    "cep": lambda r: r.choice(
        [f"{_d(r, 5)}-{_d(r, 3)}", _d(r, 8), f"{_d(r, 2)}.{_d(r, 3)}-{_d(r, 3)}"]
    ),
    "cpa": lambda r: r.choice([f"C{_d(r, 4)}{''.join(r.choices(_UPPER, k=3))}", _d(r, 4)]),
    "invoice": lambda r: r.choice(["F" + _d(r, 7), _d(r, 8), "2026/" + _d(r, 5)]),
    "promo": lambda r: r.choice(["VERANO20", "SAVE" + _d(r, 2), "BIENVENIDA"]),
    "member": lambda r: _d(r, r.randint(6, 10)),
    "ean": lambda r: _ean13(r),
    "flight": lambda r: _d(r, 4),
    "seat": lambda r: f"{r.randint(1, 40)}{r.choice('ABCDEF')}",
    "room": lambda r: _d(r, 3),
    "model": lambda r: "X" + _d(r, 3),
    "serial": lambda r: "SN" + _d(r, 10),
    "last4": lambda r: _d(r, 4),
    "year": lambda r: str(r.randint(2015, 2026)),
    "km": lambda r: _d(r, 5),
    "aff": lambda r: r.choice(
        [_d(r, r.randint(4, 10)), "AF-" + _d(r, 5), f"{_d(r, 3)}-{_d(r, 6)}"]
    ),
    "emp": lambda r: r.choice([_d(r, r.randint(3, 8)), "E-" + _d(r, 4), "EMP" + _d(r, 5)]),
    "stu": lambda r: r.choice(
        [f"{r.randint(2015, 2025)}-{_d(r, 4)}", _d(r, 8), "A0" + _d(r, 7), _d(r, 6)]
    ),
    "br": lambda r: _d(r, r.choice([3, 4])),
    "prod": lambda r: r.choice(
        [_ean13(r), f"{_d(r, 5)}-{r.choice(_UPPER)}", _d(r, r.randint(5, 10))]
    ),
    "shop": lambda r: _d(r, r.randint(3, 6)),
    "enr": lambda r: r.choice(
        [_d(r, r.randint(4, 8)), "INS-" + _d(r, 4), f"20{r.randint(24, 26)}-{_d(r, 3)}"]
    ),
    "e2e": _e2e,
    "txid": lambda r: "".join(r.choices(string.ascii_letters + _DIGITS, k=30)),
    "offer": lambda r: r.choice(
        [
            str(r.randint(2023, 2026)),
            "2x1",
            "VERANO25",
            "BLACK50",
            _d(r, 3),
            _d(r, 4),
            "PROMO" + _d(r, 2),
        ]
    ),
}
ORDINARY_FIELDS = frozenset(_FIELDS)


class _Values(dict[str, str]):
    """The values of one ordinary message, each drawn when its wording first names it (again
    while it would pass a secret's check)."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self._rng = rng

    def __missing__(self, field: str) -> str:
        value = _FIELDS[field](self._rng)
        while _looks_secret(value):
            value = _FIELDS[field](self._rng)
        self[field] = value
        return value


def ordinary_text(rng: random.Random, wording: str) -> str:
    """An ordinary wording with its values drawn."""
    return wording.format_map(_Values(rng))


# Sentences with no number, for realistic long turns (a complaint, a story, a question).
PROSE: tuple[str, ...] = (
    "Hola, buenas tardes, les escribo porque tengo un problema con una compra que hice.",
    "La verdad es que estoy bastante molesta porque nadie me da una respuesta clara.",
    "Ya hablé con dos personas por teléfono y cada una me dijo una cosa distinta.",
    "Me dijeron que el paquete salía ayer pero en la página sigue apareciendo igual.",
    "No sé si me tienen que mandar otro o si me devuelven la plata, díganme ustedes.",
    "Hi, I hope you are doing well, I'm writing about the order I placed last week.",
    "The box arrived open and one of the items was missing, which is really annoying.",
    "I already sent photos through the app but nobody got back to me about it.",
    "Could you please check what happened and let me know the next steps?",
    "Oi, boa tarde! Tudo bem? Queria uma ajuda com a minha compra, por favor.",
    "O entregador disse que deixou na portaria mas o porteiro não recebeu nada.",
    "Já abri uma reclamação no site e até agora ninguém me respondeu.",
    "Se não for possível entregar essa semana prefiro cancelar e receber o reembolso.",
    "Mi hijo necesita el uniforme para el lunes, así que me urge bastante.",
    "Gracias por la paciencia, sé que no es culpa tuya pero ya es la tercera vez.",
    "Por cierto, la clave del wifi de la tienda no la tengo, pero eso da igual.",
    "El código que me mandaron por mail no sé dónde quedó, lo busco después.",
    "I changed my password last month and since then the app logs me out constantly.",
    "No quiero dar los datos de la tarjeta por acá, ¿hay otra forma de pagar?",
    "Me pidieron el DNI en la puerta y no entendí para qué lo necesitaban.",
    "Prefiero que me llamen a la tarde porque a la mañana estoy trabajando.",
    "Pueden dejarlo con el vecino del primero si no estoy, ya le avisé.",
    "A senha do aplicativo não funciona desde a atualização, já reinstalei e nada.",
    "Ok, then I'll wait for your email, but please don't forget about me this time.",
    "Bueno, quedo atenta, cualquier cosa me escriben por acá mismo.",
    "Si hace falta mando fotos del paquete y de la etiqueta, me avisan.",
    "It's a gift for my mom so I really need it before the weekend.",
    "Obrigada pela atenção, fico no aguardo do retorno de vocês.",
    "Perdón que escriba tanto, pero quiero que quede todo claro desde el principio.",
    "Honestly the service used to be great, I don't know what changed.",
)


# -- building it ----------------------------------------------------------------------------------

_SLOT = "\x00"


def _filler(rng: random.Random) -> str:
    """A round-1 ordinary sentence put around half the secrets: a longer, mixed message."""
    return ordinary_text(rng, rng.choice(redaction_dev.ORDINARY["ordinary"]))


def _secret_turn(rng: random.Random, klass: str, part: str, wording: str, long: bool) -> Turn:
    for _ in range(200):
        written, compact = SECRET_VALUES[klass](rng)
        frame = wording.replace("{s}", _SLOT)
        if long:
            glue = rng.choice([". ", "\n", " "])
            filler = _filler(rng)
            frame = f"{filler}{glue}{frame}" if rng.random() < 0.6 else f"{frame}{glue}{filler}"
        words: tuple[str, ...] = ()
        if klass == "password_phrase":
            words = tuple(w for w in re.findall(r"\w+", normalise(written).lower()) if len(w) >= 3)
        turn = Turn(frame.replace(_SLOT, written), klass, part, written, compact.lower(), words)
        if caught(turn, frame.replace(_SLOT, "[x]")) and not caught(turn, turn.text):
            return turn
    raise RuntimeError(f"no consistent {klass} turn for {wording!r}")


def _ordinary_turn(rng: random.Random, klass: str, part: str, wording: str) -> Turn:
    return Turn(ordinary_text(rng, wording), klass, part)


def build(seed: int, secrets_per_part: int, ordinary_per_part: int) -> list[Turn]:
    """Every class's two parts: each wording in turn, with fresh values; half the secrets inside
    a longer message. Each class and part has its own seeded generator, so adding a class or a
    wording to one leaves the others' values as they were."""
    turns: list[Turn] = []
    for part in PARTS:
        for klass in SECRET_CLASSES:
            rng = random.Random(f"{seed}/{part}/{klass}")
            wordings = WORDINGS[part][klass]
            for i in range(secrets_per_part):
                wording = wordings[i % len(wordings)]
                turns.append(_secret_turn(rng, klass, part, wording, long=i % 2 == 1))
        for klass in ORDINARY_CLASSES:
            rng = random.Random(f"{seed}/{part}/{klass}")
            wordings = WORDINGS[part][klass]
            for i in range(ordinary_per_part):
                turns.append(_ordinary_turn(rng, klass, part, wordings[i % len(wordings)]))
    return turns
