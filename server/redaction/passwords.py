# ruff: noqa: RUF001, RUF003 (dashes and quotation marks of every kind are what people type)
"""Passwords: what follows a password's word ("contraseña", "clave", "password", "senha",
"pwd") and what introduces it (a colon of any width, an arrow, "es", "is", "é", a line
break). A password in quotes is replaced whole, spaces and all. A keyword used as an ordinary
word is left alone: "la clave es llamar antes de las 9", "my password is stolen", "a senha
não funciona".
"""

from __future__ import annotations

import re

from server.redaction.anchors import anchors
from server.redaction.text import MASKED, Scan
from server.redaction.words import ordinary_named, secret_named

_WORD = (
    r"contrasenas?|contrasenia|contrasenha|claves?(?:\s+de\s+acceso|\s+secreta)?|passwords?|"
    r"pasword|passwrd|paswd|passwd|pwd|pw|senhas?|palavra[- ]passe|psw|passw|"
    r"passphrase|pass\s+phrase|frase\s+(?:secreta|de\s+paso|de\s+acceso)|frase-senha|"
    r"contra(?=\s*+(?:[:=→]|es\s|del?\s))|pass(?=\s++(?:is|es|era|was|e|del?|do|da)\s)|pass(?=\s*+(?:[:=→]|->|=>))"
)
_MODIFIER = (
    r"nueva|new|nova|actual|current|atual|temporal|temporary|temporaria|provisional|provisoria|"
    r"ahora|now|agora|correcta|correct|correta|real|verdadera|de\s+verdad|"
    r"que\s+(?:puse|tengo|uso|use|elegi|cambie|pus|coloquei|uso|tenho)|(?:que|which|I)\s+\w+|"
    r"del?\s+(?:la\s+|el\s+|mi\s+|tu\s+|su\s+)?\w+|d[oa]s?\s+(?:meu\s+|minha\s+)?[\w-]+|"
    r"para\s+\w+|pra\s+\w+|for\s+(?:the\s+|my\s+)?\w+|of\s+(?:the\s+|my\s+)?\w+|"
    r"\([^)\n]{0,30}\)|[\w-]+(?=\s*+[:=→])|"  # an aside in brackets; one word before a colon
    r"(?:a|al|en|on|to)\s+(?:la\s+|el\s+|the\s+|mi\s+|my\s+)?[\w-]+(?=\s*+[:=→])"
)
_INTRO = (
    r"\s*+(?:->|=>)\s*+|\s*+[:=→]\s*+|\s*+[—–]\s*+|\s++(?=[\"'«“\u2018`„‹´*_])|"
    r"\s++(?P<verb>es|is|era|was|fue|sera|e|eh|foi|sigue\s++siendo|continua\s++sendo)"
    r"(?:\s*+:)?\s++|[^\S\n]*+\n\s*+|\s++(?=[^\s\d]*+\d)|"
    r"\s++(?P<to>a|to|para|pra|por)\s++"  # "cambié la contraseña a Sol5338#": a strong one only
)
_QUOTES = "\"'«“\u2018`„‹´*_"
_CLOSING = "\"'»”\u2019`“›´*_"
_SECRET = (
    rf"[{_QUOTES}]{{1,2}}(?P<quoted>[^{_CLOSING}\n{MASKED}]{{1,64}})[{_CLOSING}]|"
    # (A bare password may hold "*" and "´", which only open a quoted one.)
    rf"(?P<bare>[^\s\"'«»“”\u2018\u2019`„‹›{MASKED}][^\s\"'«»“”\u2018\u2019`„‹›{MASKED}]{{2,63}})"
)
_PASSWORD = re.compile(
    # (The words between and what introduces the secret are read once, never again another
    # way: redacting twice must find what redacting once did.)
    rf"(?:{_WORD})\b(?>(?:\s+(?:{_MODIFIER})){{0,3}}(?:{_INTRO}))(?:{_SECRET})"
    # "usuario ana, pass Perro12": a user name then a bare "pass"/"clave" and the secret.
    r"|(?:usuario|user(?:name)?|login)\b[^\n]{1,40}?\b(?:pass(?:word)?|clave|contrasena|pwd|"
    rf"senha)(?:\s*+[:=])?\s++(?:[{_QUOTES}]{{1,2}}(?P<pquoted>[^{_CLOSING}\n{MASKED}]{{1,64}})"
    rf"[{_CLOSING}]|(?P<paired>[^\s\"'»”]{{3,64}}))"
)

# Words after "mi contraseña es" that are not the password itself.
NOT_A_PASSWORD = frozenset(
    (  # noqa: SIM905 (a list of words reads better as text)
        "incorrecta correcta nueva vieja antigua segura larga corta la el una un mía mia tuya "
        "wrong correct new old the a my mine your too muy very demasiado igual same válida "
        "valida invalid inválida invalida que not no working expired expirada caducada caduca "
        "caducó caduco expira forgot olvidé olvide olvidada tener ser hacer esperar paciencia "
        "bloqueada locked blocked reset resetear cambiada changed required obligatoria needed "
        "necesaria ok okay fine bien mal de del en in on para for por with con sin without "
        "weak strong fraca forte debil débil facil fácil dificil difícil easy hard simple long "
        "short longa curta errada errado invalida inválido invalido nao não incorrect "
        "incorrecto incorreta incorreto stolen hacked robada robado roubada roubado hackeada "
        "hackeado vazada filtrada leaked compromised comprometida same igual mesma diferente "
        "different this esta este esa ese essa esse isso eso esto that it its it's is was "
        "still ainda todavia todavía aun aún also tambien también muito mucho very too so tan "
        "tao tão importante important secreta secret privada private personal pessoal mine "
        "minha meu nuestra our nossa sua su tu teu your their sempre siempre always never "
        "nunca nada nothing none ninguna nenhuma ok vale sim yes si sí obvious obvia obvio "
        "one uno una um uma two dos duas simples sencilla sencillo complicada complicado "
        "esqueci esqueceu esquecida esquecido perdi perdeu perdida perdido mudei mudou cambie "
        "cambió cambio olvidaste forgotten lost perdí perdida ninguém nadie nobody "
        "funciona funcionou works work worked sirve vale serve aqui aquí here there ali alli "
        "allí acá aca abajo below above arriba anterior previous antiga"
    ).split()
)
_PARTICIPLE = ("ado", "ada", "ido", "ida", "ed", "en")
_VERB = ("ar", "er", "ir", "ando", "endo", "indo", "ing")
# A password that names itself: letters and digits or symbols, or mixed case.
_STRONG = re.compile(r"(?=.*\d)(?=.*[^\W\d])|[^\w\s]|[a-z].*[A-Z]|[A-Z].*[a-z].*[A-Z]")
# "Tango6585 es la clave del wifi": a strong token before the words that name it.
_BEFORE = re.compile(
    rf"(?<![^\s\"'«“(])(?P<secret>[^\s\"'»”{MASKED}]{{4,64}})\s++(?:es|is|e|era|was|fue|foi)\s++"
    r"(?:(?:la|el|a|o|the|my|mi|tu|su|meu|minha)\s++)?(?:nueva\s++|new\s++|nova\s++)?"
    r"(?:contrasena|clave|password|senha|pass|pwd)\b"
)
# What stands between a password and the words that name it, right before them.
_LINKED = re.compile(r"\b(?:es|is|e|era|was|fue|foi)\s++(?:\S+\s++){0,2}$")
_AMOUNT = re.compile(r"[$€£]?\d+(?:[.,]\d+)?(?:%|€|\$|x|º|ª)$")
_NEXT_WORD = re.compile(r"[^\S\n]+[^\W\d]")


def find_passwords(scan: Scan) -> None:
    fold = scan.fold
    for start, _ in (*anchors(scan, "password"), *anchors(scan, "user")):
        match = _PASSWORD.match(fold, start)
        if match is None:
            continue
        verb = match.group("verb")
        if verb == "e" and scan.view[match.start("verb")] not in "éÉ":
            continue  # Portuguese "e" is "and"; "é" is "is"
        for group in ("quoted", "pquoted", "bare", "paired"):
            if match.group(group) is not None:
                break
        start, end = match.start(group), match.end(group)
        named = fold[match.start() : start]  # "clave de empleado es": an id, not a password
        if named.startswith("clave") and ordinary_named(named) and not secret_named(named):
            continue
        if group not in ("quoted", "pquoted"):
            while end > start and scan.view[end - 1] in ".,;:!?)":
                end -= 1
            if end - start < 3 or not _looks_secret(scan, start, end):
                continue
            if match.group("to") is not None and not _STRONG.search(scan.view[start:end]):
                continue
        scan.claim(start, end, "[contraseña]", "password")
    for start, end in anchors(scan, "password"):
        if not _LINKED.search(fold, max(0, start - 30), start):
            continue
        match = _BEFORE.search(fold, max(0, start - 90), end + 12)
        if match is None or match.end() < end:
            continue
        secret = scan.view[match.start("secret") : match.end("secret")]
        if _STRONG.search(secret) and secret.lower() not in NOT_A_PASSWORD:
            scan.claim(match.start("secret"), match.end("secret"), "[contraseña]", "password")
    scan.settle()


def _looks_secret(scan: Scan, start: int, end: int) -> bool:
    """Whether a bare word after a password's words is a password, not the sentence going on."""
    written, folded = scan.view[start:end], scan.fold[start:end]
    if written[0] == "[" or not written[0].isprintable() or folded in NOT_A_PASSWORD:
        return False
    if _AMOUNT.match(written):
        return False  # "la clave del éxito es 100% esfuerzo"
    if not (written.isalpha() and written.islower()):
        return True  # digits, symbols or capitals: a password
    if len(folded) >= 5 and folded.endswith(_PARTICIPLE):
        return False  # "is stolen", "está bloqueada": what happened to it
    sentence_goes_on = bool(_NEXT_WORD.match(scan.view, end))
    return not (sentence_goes_on and folded.endswith(_VERB))  # "la clave es llamar antes"
