"""Invisible characters that names and identifiers may not hold, and the joiners they may."""

from __future__ import annotations

import unicodedata

# Unicode's format characters (category Cf: bidi embeddings, overrides, isolates and marks,
# zero-width spaces and joiners, word joiners, the BOM, soft hyphens) print nothing: in a name
# shown next to a number, U+202E turns "Eva 0987654321" into a fake number and the real one
# backwards; zero-width ones make two names look alike. Controls (Cc) and lone surrogates
# (Cs) have no place in a name either.
_REFUSED = frozenset({"Cc", "Cf", "Cs"})
ZWNJ, ZWJ = "\u200c", "\u200d"
# What may follow an emoji before a joiner: the emoji presentation selector, skin tones.
_EMOJI_TAIL = frozenset({"\ufe0f", *map(chr, range(0x1F3FB, 0x1F400))})
# The scripts that write names with U+200C and U+200D between letters (Persian "فاطمه‌زهرا",
# Indic conjuncts): Arabic, Syriac, Thaana, N'Ko and the Indic blocks, Arabic presentation forms.
_JOINING_SCRIPTS = ((0x0600, 0x0DFF), (0xFB50, 0xFDFF), (0xFE70, 0xFEFC))
_BLACK_FLAG, _TAGS = "\U0001f3f4", range(0xE0020, 0xE0080)


def code_point(ch: str) -> str:
    """'U+202E RIGHT-TO-LEFT OVERRIDE': how an error names a character a person cannot see."""
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}" + (f" {name}" if name else "")


def refused_character(text: str, *, joiners: bool = True) -> str | None:
    """The first control, lone surrogate or format character of text, or None. With joiners,
    the format characters names are written with are not refused: U+200D between two emoji
    (a family "👨‍👩‍👧" in a WhatsApp name), U+200C and U+200D between two letters of a
    script that joins them, the tags of a subdivision flag (🏴 of Scotland)."""
    if text.isprintable():  # False for every refused character: most texts stop here
        return None
    for at, ch in enumerate(text):
        if unicodedata.category(ch) in _REFUSED and not (joiners and _is_kept(text, at)):
            return ch
    return None


def without_refused(text: str) -> str:
    """text without the characters refused_character refuses (joiners kept where names are
    written with them)."""
    if text.isprintable():
        return text
    return "".join(
        ch
        for at, ch in enumerate(text)
        if unicodedata.category(ch) not in _REFUSED or _is_kept(text, at)
    )


def _is_kept(text: str, at: int) -> bool:
    ch = text[at]
    before = text[:at].rstrip("".join(_EMOJI_TAIL)) if ch == ZWJ else text[:at]
    after = text[at + 1 : at + 2]
    if not before or not after:
        return False
    if ch == ZWJ and _is_emoji(before[-1]) and _is_emoji(after):
        return True
    if ch in (ZWNJ, ZWJ):
        return _joins(text[at - 1]) and _joins(after)
    return ord(ch) in _TAGS and (before[-1] == _BLACK_FLAG or ord(before[-1]) in _TAGS)


def _is_emoji(ch: str) -> bool:
    return unicodedata.category(ch) == "So"


def _joins(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LM" and any(
        low <= ord(ch) <= high for low, high in _JOINING_SCRIPTS
    )
