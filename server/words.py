"""Words in a person's turns, read the same way in any language: how keyword search splits a
text into terms, which turns say almost nothing, and which word is the person's own name.

Nothing here knows a language's grammar. A short turn is one of few words ("¡Hola, Diego!
Contame.", "ok gracias", "Wow, Caroline!"): under 2 % of the turns that answer a question are
that short, while such turns were a third of the excerpts returned before this module existed
(issue 25). A name is learned from how people in the chat address each other: a capitalised
word said as a vocative ("Hola Rocío, ¿en qué te ayudo?", "Que descanses, Carmen", "Thanks,
Melanie!") more than once, never written in lower case. Questions name the person in the third
person ("¿Qué comida le sienta mal a Carmen?") while the evidence is in the first ("a mí el
marisco me da alergia"), so the name only pulls greetings up; search leaves it out."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

import lancedb

from embeddings.index import fts_config

# A turn of at most this many words is a short one (greetings, thanks, one-word answers), and
# its score in excerpts and staff search is multiplied by SHORT_TURN_WEIGHT (chosen on the dev
# parts: benchmarks/README.md, "Excerpts: windows within a budget").
SHORT_TURN_WORDS = 6
SHORT_TURN_WEIGHT = 0.85
# A learned name: said as a vocative at least this often, and never in lower case.
NAME_MIN_VOCATIVES = 2
_WORD = re.compile(r"\w+", re.UNICODE)
# Between a vocative and the next word: punctuation that closes an address.
_CLOSING = re.compile(r"[,!?.;:…)]")
# The full-text index's settings that say how a text becomes terms.
_ANALYSIS = (
    "base_tokenizer",
    "language",
    "max_token_length",
    "lower_case",
    "stem",
    "remove_stop_words",
    "custom_stop_words",
    "ascii_folding",
    "ngram_min_length",
    "ngram_max_length",
    "prefix_only",
)


@lru_cache(maxsize=1)
def _analysis() -> dict[str, Any]:
    config = fts_config()
    return {name: getattr(config, name) for name in _ANALYSIS}


def terms(text: str) -> list[str]:
    """The terms keyword search reads in a text: the full-text index's own analysis (lower
    case, accents folded, stop words dropped, English stems), so per-person BM25 and the
    shared index agree on what a word is."""
    return [token.text for token in lancedb.tokenize(text, **_analysis())]


# Between texts analysed in one call: a word no analysis changes and no one writes.
_SEPARATOR = "qqzxturnzxqq"


def terms_of_many(texts: Sequence[str]) -> list[list[str]]:
    """`terms` of each text, in one call of the analyser (a call costs about 0.5 ms before it
    reads a word, mostly its settings; a person's archive is read at once). A text that holds
    the separator itself is analysed alone."""
    if len(texts) <= 1:
        return [terms(t) for t in texts]
    if any(_SEPARATOR in t.casefold() for t in texts):
        return [terms(t) for t in texts]
    out: list[list[str]] = [[]]
    for token in lancedb.tokenize(f" {_SEPARATOR} ".join(texts), **_analysis()):
        if token.text == _SEPARATOR:
            out.append([])
        else:
            out[-1].append(token.text)
    if len(out) != len(texts):  # the analysis split or dropped the separator: one by one
        return [terms(t) for t in texts]
    return out


def fold(word: str) -> str:
    """Lower case without accents: "Rocío" and "rocio" are the same name."""
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def proper_name_words(name: str) -> list[str]:
    """The folded words of a name that are written capitalised, as a name is ("Carmen de la
    Fuente" -> carmen, fuente): the words that can tell whom a question is about."""
    return [fold(w) for w in _WORD.findall(name) if len(w) >= 2 and w.isalpha() and w[0].isupper()]


def name_words(name: str) -> list[str]:
    """The folded words of a person's name that can name them in a question ("María José
    Pérez" -> maria, jose, perez): letters only, two or more."""
    return [fold(w) for w in _WORD.findall(name) if len(w) >= 2 and w.isalpha()]


def word_list(text: str) -> list[str]:
    """The words of a text, as written."""
    return _WORD.findall(text)


def word_count(text: str) -> int:
    return len(_WORD.findall(text))


def is_short(text: str) -> bool:
    """A turn that says almost nothing on its own: few words, in any language."""
    return word_count(text) <= SHORT_TURN_WORDS


def _capitalised(word: str) -> bool:
    return len(word) >= 2 and word[0].isupper() and word[1:].islower() and word.isalpha()


def vocatives(text: str) -> Iterable[str]:
    """Capitalised words said as an address: second word of the turn, or after a comma, and
    followed by closing punctuation or the end of the turn ("Hola Rocío, …", "Wow, Caroline!",
    "Que descanses, Carmen"). The first word never counts: it is the greeting itself."""
    found = list(_WORD.finditer(text))
    # Past the second word only a word after a comma can be one: most turns have no comma.
    for i in range(1, len(found)) if "," in text else range(1, min(2, len(found))):
        match = found[i]
        if i > 1 and "," not in text[found[i - 1].end() : match.start()]:
            continue
        word = match.group()
        if not _capitalised(word):
            continue
        if i + 1 < len(found) and not _CLOSING.search(text, match.end(), found[i + 1].start()):
            continue
        yield fold(word)


def learn_names(texts: Sequence[str]) -> frozenset[str]:
    """Folded names the people in a chat call each other by (see the module's docstring)."""
    return names_from(vocative_counts(texts), lower_words(texts))


def vocative_counts(texts: Sequence[str]) -> Counter[str]:
    """How often each folded word is said as a vocative in these texts."""
    return Counter(name for text in texts for name in vocatives(text))


def lower_words(texts: Sequence[str]) -> set[str]:
    """The words these texts write in lower case, folded (a name is never written so)."""
    lower = {w for text in texts for w in _WORD.findall(text) if w.islower()}
    return {w if w.isascii() else fold(w) for w in lower}


def names_from(said: Counter[str], lower: set[str]) -> frozenset[str]:
    """The learned names of a chat from its vocative counts and its lower-case words: both
    add up turn by turn, so a cache extends them with new turns alone."""
    candidates = {name for name, n in said.items() if n >= NAME_MIN_VOCATIVES}
    return frozenset(candidates - lower)


def learn_addressees(
    turns: Sequence[tuple[str, str]], names: frozenset[str]
) -> dict[str, frozenset[str]]:
    """Which side of the chat each of its learned `names` belongs to, from its (role, text)
    turns: a name said as a vocative in the assistant's turns is the user's ("Que descanses,
    Carmen"), one said in the user's turns the assistant's. A name said to both sides as
    often belongs to neither."""
    return addressees_from(said_to_sides(turns), names)


# The side a turn's vocatives address: the other one.
ADDRESSED = {"user": "assistant", "assistant": "user"}


def said_to_sides(turns: Sequence[tuple[str, str]]) -> dict[str, Counter[str]]:
    """How often each folded word is said as a vocative to each side (user, assistant)."""
    said_to: dict[str, Counter[str]] = {"user": Counter(), "assistant": Counter()}
    for role, text in turns:
        to = ADDRESSED.get(role)
        if to is not None:
            said_to[to].update(vocatives(text))
    return said_to


def addressees_from(
    said_to: dict[str, Counter[str]], names: frozenset[str]
) -> dict[str, frozenset[str]]:
    """learn_addressees from the counts of said_to_sides (which add up turn by turn)."""
    if not names:
        return {}
    user, assistant = said_to["user"], said_to["assistant"]
    return {
        "user": frozenset(n for n in user if n in names and user[n] > assistant[n]),
        "assistant": frozenset(n for n in assistant if n in names and assistant[n] > user[n]),
    }


def named_side(query: str, addressees: dict[str, frozenset[str]]) -> str | None:
    """The side of the chat (user or assistant) whose names, and only whose, the query says
    (capitalised, as names are written: "la" in "sobre la paella" is not the "la" of "Carmen
    de la Fuente"): a question about someone is most often answered in their own words."""
    said = {fold(w) for w in _WORD.findall(query) if len(w) >= 2 and w[0].isupper()}
    sides = [role for role, names in addressees.items() if said & names]
    return sides[0] if len(sides) == 1 else None


def without_names(query: str, names: Iterable[str]) -> str:
    """The query with the given (folded) names left out, and a possessive "'s" after them;
    the query itself when nothing else would be left."""
    wanted = set(names)
    if not wanted:
        return query
    kept: list[str] = []
    last = 0
    dropped = False
    for match in _WORD.finditer(query):
        if fold(match.group()) in wanted:
            kept.append(query[last : match.start()])
            end = match.end()
            possessive = re.match(r"['\u2019]s\b", query[end:])
            last = end + (possessive.end() if possessive else 0)
            dropped = True
    if not dropped:
        return query
    kept.append(query[last:])
    rest = re.sub(r"\s+", " ", "".join(kept)).strip()
    rest = re.sub(r"\s+([,?!.;:])", r"\1", rest)
    return rest if _WORD.search(rest) else query
