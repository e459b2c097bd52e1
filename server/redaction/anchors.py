"""Where the keyword-led rules may match: one pass over the fold view finds every word that
starts or names a secret (a password's word, a code's, a CVV's, an id's, an account's, a verb
that hands a code over), and each rule then tries its pattern only there. Twelve scans of a
4,000-character turn became one.
"""

from __future__ import annotations

import re

from server.redaction.text import MASKED, Scan

# Each word (or stem) and the rules it is an anchor for.
_RULES: dict[str, tuple[str, ...]] = {}


def _words(rule: str, words: str) -> None:
    for word in words.split():
        _RULES[word] = (*_RULES.get(word, ()), rule)


_words("password", "contrase clave pass pasw passphrase pwd pw senha psw palavra contra frase")
_words("user", "usuario user login")
_words(
    "code",
    "codigo codgo cogido cod code otp pin nip passcode token clave contrasena senha password "
    "numerito mensajito "
    "verificacion "
    "verificacao verification verify 2fa autenticacion autenticacao authentication sms",
)
_words(
    "cvv",
    "cvv cvc ccv cvn cav cid csc seguridad seguranca seg sec security card atras tras detras "
    "reverso verso dorso back costas rear digit numeros numeritos numerinhos numbers",
)
_words(
    "id",
    "dni d.n.i nif nie n.i.e tie extranjero extranjeria residencia documento cedula c.c cc "
    "identidad id cuit cuil cpf c.p.f rg curp rfc ine pasaporte doc nro",
)
_words(
    "account",
    "cbu cvu clabe spei cuenta conta account transferencia transfer deposito deposit deposita "
    "depositar transferir interbancaria",
)
_words(
    "verb",
    "use usa usar utiliza utilize introduce introduzca ingresa ingrese digita digite insira "
    "insere enter type escribe escriba informe informa teclea marca pon ponga coloca coloque",
)
_words("sms", "sms mensaje mensagem text")
# Words that end a code's sentence: "482913 es tu código", "482913 is your code".
_words("tail", "codigo code otp pin clave passcode senha password")


def _trie(words: list[str]) -> str:
    """An alternation of words factored by their common prefixes (c(?:vv|vc|odigo)...): the
    regex engine tries one branch a character instead of every word at every position. The
    longest word wins at each place."""
    heads: dict[str, list[str]] = {}
    ends = False
    for word in words:
        if word:
            heads.setdefault(word[0], []).append(word[1:])
        else:
            ends = True
    if not heads:
        return ""
    branches = [re.escape(head) + _trie(rest) for head, rest in sorted(heads.items())]
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    return f"(?:{body})?" if ends else body


# (Not inside another word or a placeholder: the lookbehind first is also the fastest form,
# since most places of a text are inside a word.)
_ANCHOR = re.compile(rf"(?<![a-z0-9\[{MASKED}])" + _trie(list(_RULES)))
# Short words and verbs that are anchors only as whole words ("no", "numero", "idea",
# "contrato", "backup", "used", "informacion" are not): the rest are stems ("contrase",
# "digit", "verifica").
_WHOLE = frozenset(
    (  # noqa: SIM905 (a list of words reads better as text)
        "nro doc id cc c.c rg ine nie tie cid csc sec seg cod pin nip pw pass contra "
        "conta card back text use usa usar utiliza utilize introduce introduzca ingresa ingrese "
        "digita digite insira insere enter type escribe escriba informe informa teclea marca "
        "pon ponga coloca coloque"
    ).split()
)
# A match is the longest word at its place: it stands for every word it starts with too
# ("contrasena" for "contrase", "password" for "pass").
_MATCHED: dict[str, tuple[str, ...]] = {
    word: tuple(
        sorted({rule for stem, rules in _RULES.items() if word.startswith(stem) for rule in rules})
    )
    for word in _RULES
}


def words_of(rule: str) -> list[str]:
    """The words (and stems) that are anchors of a rule."""
    return sorted(word for word, rules in _RULES.items() if rule in rules)


def anchors(scan: Scan, rule: str) -> list[tuple[int, int]]:
    """The (start, end) of every anchor of a rule in the scan's fold view, a word's start not
    inside another word or a placeholder (found once a scan, for every rule)."""
    found = scan.cache.get("anchors")
    if found is None:
        found = {}
        fold = scan.fold
        for match in _ANCHOR.finditer(fold):
            word, end = match.group(), match.end()
            if word in _WHOLE and end < len(fold) and fold[end].isalpha():
                continue
            for name in _MATCHED[word]:
                found.setdefault(name, []).append(match.span())
        scan.cache["anchors"] = found
    result: list[tuple[int, int]] = found.get(rule, [])
    return result


# Groups of digits with short runs of separators between them: where every number-led rule
# (cards, ids, accounts) looks, found once a text.
NUMBER_RUN = re.compile(r"\d+(?:[ \t\n.\-/,_()*→]{1,4}\d+)*")
_NOT_DIGITS = re.compile(r"\D+")


def number_runs(scan: Scan) -> list[tuple[int, int, int]]:
    """(start, end, digits) of every run of digit groups in the view (found once a scan)."""
    runs = scan.cache.get("runs")
    if runs is None:
        runs = [
            (m.start(), m.end(), len(_NOT_DIGITS.sub("", m.group())))
            for m in NUMBER_RUN.finditer(scan.view)
        ]
        scan.cache["runs"] = runs
    result: list[tuple[int, int, int]] = runs
    return result


def number_windows(scan: Scan, digits: int, before: int, after: int) -> list[tuple[int, int]]:
    """Stretches of the view around every run of at least `digits` digits, merged."""
    windows: list[tuple[int, int]] = []
    size = len(scan.view)
    for start, end, count in number_runs(scan):
        if count < digits:
            continue
        first, last = max(0, start - before), min(size, end + after)
        if windows and first <= windows[-1][1]:
            windows[-1] = (windows[-1][0], last)
        else:
            windows.append((first, last))
    return windows


_DIGIT = re.compile(r"\d")


def digit_before(scan: Scan, start: int, width: int) -> bool:
    """Whether a digit stands in the `width` characters before `start` (a cheap test before
    a rule looks back for a number written before its words)."""
    return _DIGIT.search(scan.fold, max(0, start - width), start) is not None
