"""One text being redacted: the normalised views the rules read, the spans they claim, and
the text rebuilt with each span of the original replaced by its placeholder.

The rules never read the text as written. They read two views of it, of the same length:
- `view`: Unicode compatibility forms folded (NFKC: full-width letters and colons to ASCII),
  every decimal digit of any script as its ASCII digit (full-width, Arabic-Indic), every kind
  of space as a space, format characters (zero-width spaces and joiners) and combining marks
  removed, emoji and other symbols as a space, every arrow as "→";
- `fold`: the view in lower case without accents ("Código" reads "codigo"), for keywords.
Each character of the views knows where it came from, so a placeholder replaces exactly the
span of the original the rule found, whatever was normalised inside it.

A text that is all ASCII (most turns) is its own view: nothing is copied or mapped.
"""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

# Characters the rules' spans are masked with once claimed, one per kind: a claimed span reads
# as neither a word, a digit nor a space to the rules that come after (private use area).
MASKS: dict[str, str] = {
    "password": "\ue000",
    "card": "\ue001",
    "cvv": "\ue002",
    "iban": "\ue003",
    "national_id": "\ue004",
    "code": "\ue005",
    "email": "\ue006",
    "address": "\ue007",
}
MASKED = "\ue000-\ue007"  # for character classes: [^...{MASKED}]

_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_NON_ASCII_SPLIT = re.compile(r"([^\x00-\x7f]+)")
# Every arrow reads as this one: between digit groups a separator, after a password's word
# what introduces it ("clave ➡️ x").
ARROW = "→"
_ARROWS = frozenset("➡→⇒⟶➔➜➝➞➟➠➤➥➦⮕⭢👉▶►")


@functools.lru_cache(maxsize=65536)
def _normal(ch: str) -> tuple[str, str]:
    """(view, fold) of one non-ASCII character: fold has the length of view."""
    if ch.isdecimal():
        digit = str(unicodedata.decimal(ch))
        return digit, digit
    category = unicodedata.category(ch)
    if ch in _ARROWS:
        return ARROW, ARROW
    if ch in "ºª°\u00b4":  # ordinals, degrees and the acute accent people quote with, as written
        return ch, ch
    if category in ("Cf", "Mn", "Me"):  # zero-width characters, variation selectors, accents
        return "", ""
    if category in ("Zl", "Zp"):
        return "\n", "\n"
    if category == "Zs":
        return " ", " "
    if category in ("So", "Sk", "Cs", "Co") and ch not in MASKS.values():
        return " ", " "  # emoji and other symbols: between two groups of digits, a separator
    view = unicodedata.normalize("NFKC", ch)
    if (
        category == "No"
        or not view
        or any(c.isdigit() for c in view)
        or any(unicodedata.category(c) == "Mn" for c in view)
    ):  # (a character NFKC splits into a space and an accent stays as it is)
        view = ch  # ½ and ² stay: not digits a person typed one by one
    return view, "".join(_fold(c) for c in view)


@functools.lru_cache(maxsize=4096)
def _normal_run(run: str) -> tuple[str, str, bool]:
    """(view, fold, whether each character stayed one) of a run of non-ASCII characters."""
    pairs = [_normal(ch) for ch in run]
    view = "".join(view for view, _ in pairs)
    return (
        view,
        "".join(fold for _, fold in pairs),
        len(view) == len(run) and all(len(v) == 1 for v, _ in pairs),
    )


@functools.lru_cache(maxsize=65536)
def _fold(ch: str) -> str:
    """One character in lower case without its accent, always one character."""
    base = unicodedata.normalize("NFD", ch)[0].lower()
    if len(base) == 1:
        return base
    lower = ch.lower()
    return lower if len(lower) == 1 else ch


@dataclass(slots=True)
class Found:
    start: int  # in the views
    end: int
    label: str
    kind: str


class Scan:
    """A text's views, and what the rules have claimed in them so far."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.found: list[Found] = []
        self.cache: dict[str, Any] = {}  # what the rules compute once a text
        self._pending: list[Found] = []  # claimed since the last settle, by start
        self._pending_starts: list[int] = []
        self._starts: list[int] | None = None  # where each view character starts in text
        if text.isascii():
            self.view, self.fold = text, text.lower()
            return
        pieces = _NON_ASCII_SPLIT.split(text)  # ASCII, a run beyond it, ASCII, ...
        parts = pieces[0::2]
        runs = [_normal_run(run) for run in pieces[1::2]]
        if all(same for _, _, same in runs):
            # Every character stays one character (accents, full-width digits, spaces of
            # other kinds): each view character is where it was, and only the runs of
            # characters beyond ASCII are rewritten.
            self.view = _interleave(parts, [view for view, _, _ in runs])
            fold = _interleave(parts, [fold for _, fold, _ in runs]).lower()
            if len(fold) == len(self.view):
                self.fold = fold
                return
        self._map(text)

    def _map(self, text: str) -> None:
        """The views of a text some of whose characters are removed or become several: only
        the runs beyond ASCII that change length are read a character at a time."""
        views: list[str] = []
        folds: list[str] = []
        starts: list[int] = []
        last = 0
        for match in _NON_ASCII.finditer(text):
            head = text[last : match.start()]
            views.append(head)
            folds.append(head.lower())
            starts.extend(range(last, match.start()))
            run_view, run_fold, same = _normal_run(match.group())
            if same:
                views.append(run_view)
                folds.append(run_fold)
                starts.extend(range(match.start(), match.end()))
            else:
                for offset, ch in enumerate(match.group(), match.start()):
                    view, fold = _normal(ch)
                    if not view and unicodedata.category(ch) == "Cf" and views[-1][-1:].isdigit():
                        view = fold = " "  # a zero-width space between digits: a separator
                    views.append(view)
                    folds.append(fold)
                    starts.extend([offset] * len(view))
            last = match.end()
        views.append(text[last:])
        folds.append(text[last:].lower())
        starts.extend(range(last, len(text)))
        starts.append(len(text))
        self.view, self.fold = "".join(views), "".join(folds)
        self._starts = starts

    # -- claiming --------------------------------------------------------------------------

    def claim(self, start: int, end: int, label: str, kind: str) -> None:
        """Claim view[start:end] for a placeholder; masked in the views at the next settle().
        A span that overlaps one claimed already is not claimed twice."""
        self._add(Found(start, end, label, kind))

    def mask(self, start: int, end: int, kind: str) -> None:
        """Mask a span without a placeholder (one already in the text, kept as written)."""
        self._add(Found(start, end, "", kind))

    def claimed(self, start: int, end: int) -> bool:
        """Whether the span overlaps one claimed and not yet settled (the claims never
        overlap, so they are in order of their ends too: one look, by bisection)."""
        index = bisect.bisect_left(self._pending_starts, end)
        return index > 0 and self._pending[index - 1].end > start

    def _add(self, found: Found) -> None:
        if self.claimed(found.start, found.end):
            return
        index = bisect.bisect_left(self._pending_starts, found.start)
        self._pending.insert(index, found)
        self._pending_starts.insert(index, found.start)

    def settle(self) -> None:
        """Mask the spans claimed since the last settle (one pass over the views)."""
        if not self._pending:
            return
        pending, self._pending, self._pending_starts = self._pending, [], []
        self.found += pending
        self.view = _masked(self.view, pending)
        self.fold = _masked(self.fold, pending)

    # -- the result -----------------------------------------------------------------------

    def original(self, start: int, end: int) -> tuple[int, int]:
        """The span of the original text that view[start:end] came from."""
        if self._starts is None:
            return start, end
        first, last = self._starts[start], self._starts[end]
        # The marks of the span's last character go with it (a keycap's "️⃣").
        while last < len(self.text) and unicodedata.category(self.text[last]) in ("Mn", "Me"):
            last += 1
        return first, last

    def written(self, start: int, end: int) -> str:
        first, last = self.original(start, end)
        return self.text[first:last]

    def result(self) -> str:
        self.settle()
        out: list[str] = []
        last = 0
        for found in sorted(self.found, key=lambda f: f.start):
            if not found.label:
                continue
            start, end = self.original(found.start, found.end)
            out += [self.text[last:start], found.label]
            last = end
        if not out:
            return self.text
        out.append(self.text[last:])
        return "".join(out)


def _interleave(parts: list[str], runs: list[str]) -> str:
    """parts[0] + runs[0] + parts[1] + ... + parts[-1]."""
    out = [""] * (len(parts) + len(runs))
    out[0::2], out[1::2] = parts, runs
    return "".join(out)


def _masked(view: str, spans: list[Found]) -> str:
    out: list[str] = []
    last = 0
    for found in spans:
        out += [view[last : found.start], MASKS[found.kind] * (found.end - found.start)]
        last = found.end
    out.append(view[last:])
    return "".join(out)
