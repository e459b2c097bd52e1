"""Excerpts of a person's archived turns: keyword statistics of the person's own, and windows
of turns around the best hits that fill a character budget.

`PersonTurns` is one person's archived turns, kept in memory by `TurnsCache` between
requests and checked against the store on each one (one indexed read): the turns, their
keyword terms, BM25 over them, and the names the people in the chat call each other by
(server/words.py). BM25 counts how rare a word is among this person's turns, not everyone's:
a word everyone uses is still rare in one chat, and one person's name is not rare at all.

`windows` turns ranked hits into what the context carries: turns taken in order of rank, a
hit's neighbours (up to `neighbours` either side) ranking a few places below it, while the
budget lasts; merged into windows where they touch."""

from __future__ import annotations

import heapq
import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain

from server.store.records import Message
from server.turn_vectors import TurnVectors, vector_bytes
from server.words import (
    ADDRESSED,
    addressees_from,
    is_short,
    lower_words,
    names_from,
    terms_of_many,
    vocatives,
)

# BM25's usual constants (those of the full-text index).
K1 = 1.2
B = 0.75
# What a turn costs in the budget beyond its words: its role and line in the rendering, and a
# share of its window's date line and separator (server/conversation.py, render_excerpts).
TURN_OVERHEAD_CHARS = 14


@dataclass(frozen=True, slots=True)
class Excerpt:
    message: Message
    score: float | None  # the hit's score; None for a neighbour
    window: int  # windows numbered best hit first
    hit: bool


@dataclass
class PersonTurns:
    """One person's archived turns, oldest first, with what search needs of them."""

    turns: list[Message]
    window: int  # neighbours each side in a turn's keyword document (MEMORY_TURN_WINDOW)
    terms: list[list[str]] = field(default_factory=list)
    position: dict[int, int] = field(default_factory=dict)
    names: frozenset[str] = frozenset()
    addressees: dict[str, frozenset[str]] = field(default_factory=dict)  # role: its names
    short: list[bool] = field(default_factory=list)
    _postings: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # term: (i, tf)
    _lengths: list[int] = field(default_factory=list)
    # What names are learned from, added up turn by turn (server/words.py).
    _said: Counter[str] = field(default_factory=Counter)
    _lower: set[str] = field(default_factory=set)
    _said_to: dict[str, Counter[str]] = field(
        default_factory=lambda: {"user": Counter(), "assistant": Counter()}
    )
    ids: list[int] = field(default_factory=list)  # the turns' message ids, in order
    chars: int = 0  # the characters of all turns
    # Their stored vectors, row i for turn i (server/turn_vectors.py), filled on first use
    # under `lock`; `previous` holds the replaced entry's vectors and rows (message id: row)
    # until then, so that only turns new to the cache are read from the index.
    vectors: TurnVectors | None = None
    previous: tuple[TurnVectors, dict[int, int]] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def build(
        cls, turns: list[Message], window: int, known: dict[int, list[str]] | None = None
    ) -> PersonTurns:
        known = known or {}
        person = cls(turns=[], window=window)
        unknown = [m for m in turns if m.id not in known]
        found = dict(
            zip((m.id for m in unknown), terms_of_many([m.content for m in unknown]), strict=True)
        )
        person._append(turns, [known[m.id] if m.id in known else found[m.id] for m in turns])
        return person

    def extended(self, newer: list[Message]) -> PersonTurns:
        """A copy with these newer turns after the others (an archive): only they are read,
        and the postings of the last `window` turns before them, whose keyword documents now
        reach into them. This entry is left as it is (requests may be reading it)."""
        person = PersonTurns(
            turns=list(self.turns),
            window=self.window,
            terms=list(self.terms),
            position=dict(self.position),
            short=list(self.short),
            _postings=dict(self._postings),  # lists replaced, never changed, where touched
            _lengths=list(self._lengths),
            _said=Counter(self._said),
            _lower=set(self._lower),
            _said_to={side: Counter(c) for side, c in self._said_to.items()},
            ids=list(self.ids),
            chars=self.chars,
        )
        person._append(newer, terms_of_many([m.content for m in newer]))
        return person

    def _append(self, newer: list[Message], newer_terms: list[list[str]]) -> None:
        """Add turns after the ones held: their terms, names and postings."""
        start = len(self.turns)
        self.turns.extend(newer)
        self.ids.extend(m.id for m in newer)
        self.chars += sum(len(m.content) for m in newer)
        self.terms.extend(newer_terms)
        for i, m in enumerate(newer, start):
            self.position[m.id] = i
        self.short.extend(is_short(m.content) for m in newer)
        self._lower |= lower_words([m.content for m in newer])
        for m in newer:  # as vocative_counts and said_to_sides count, each turn read once
            said = list(vocatives(m.content))
            if not said:
                continue
            self._said.update(said)
            to = ADDRESSED.get(m.role)
            if to is not None:
                self._said_to.setdefault(to, Counter()).update(said)
        self.names = names_from(self._said, self._lower)
        self.addressees = addressees_from(self._said_to, self.names)
        # The documents of the last `window` turns held reach into the new ones: counted
        # again, in new lists (an entry that held them may be read right now). The new turns'
        # postings go at the end of the lists they share with the entry they extend, which
        # reads none past its own turns (bm25 stops there).
        redo = range(max(0, start - self.window), start)
        touched: dict[str, list[tuple[int, int]]] = {}
        for term in {t for i in redo for t in self._document(i, start)}:
            kept = list(self._postings.get(term, ()))
            while kept and kept[-1][0] >= redo.start:  # in order of turn: theirs are last
                kept.pop()
            touched[term] = kept

        def postings(term: str, own: bool) -> list[tuple[int, int]]:
            """The list to add to: a copy when `own` (an entry of a turn the extended entry
            holds) or the term is new, else the shared one."""
            found = touched.get(term)
            if found is None:
                shared = self._postings.get(term)
                if shared is None or own:
                    found = touched[term] = list(shared or ())
                else:
                    found = shared
            return found

        self._lengths = self._lengths[: redo.start]
        n = len(self.turns)
        for i in range(redo.start, n):
            doc, length = self._document(i, n), self._length(i, n)
            self._lengths.append(length)
            for term, tf in doc.items():
                postings(term, i < start).append((i, tf))
        for term, kept in touched.items():
            if kept:
                self._postings[term] = kept
            else:
                self._postings.pop(term, None)

    def _around(self, i: int, n: int) -> list[list[str]]:
        around = self.terms[max(0, i - self.window) : min(n, i + self.window + 1)]
        if self.window:
            around.append(self.terms[i])  # its own words weigh double, as in the index
        return around

    def _document(self, i: int, n: int) -> Counter[str]:
        """Turn i's keyword document when the person had n turns."""
        return Counter(chain.from_iterable(self._around(i, n)))

    def _length(self, i: int, n: int) -> int:
        return sum(len(t) for t in self._around(i, n))

    def bm25(self, query_terms: Sequence[str], k: int) -> list[tuple[int, float]]:
        """(message id, BM25) of the best k turns for these terms, best first; a turn is read
        with its neighbours, as the shared full-text index reads it."""
        wanted = [t for t in dict.fromkeys(query_terms) if t in self._postings]
        if not wanted or k <= 0 or not self.turns:
            return []
        n = len(self.turns)
        average = sum(self._lengths) / n or 1.0
        scores: dict[int, float] = {}
        for term in wanted:
            postings = self._postings[term]
            df = len(postings)
            while df and postings[df - 1][0] >= n:  # the same: not this entry's turns
                df -= 1
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            for i, tf in postings:
                if i >= n:  # a newer entry's turns, at the end of a list it shares
                    break
                norm = K1 * (1 - B + B * self._lengths[i] / average)
                scores[i] = scores.get(i, 0.0) + idf * tf * (K1 + 1) / (tf + norm)
        # the best k without sorting every turn a common word is in
        best = heapq.nsmallest(k, scores.items(), key=lambda s: (-s[1], s[0]))
        return [(self.turns[i].id, score) for i, score in best]

    @property
    def held_bytes(self) -> int:
        """The estimated memory of these turns in the cache (see TURN_BYTES)."""
        return TURN_BYTES * len(self.turns) + CHAR_BYTES * self.chars


class TurnsCache:
    """People's archived turns (and their vectors) kept between requests, checked against the
    store's archive mark on each use (so a compaction, a move or a forget is seen at once), at
    most `max_bytes` of them by PersonTurns.held_bytes' estimate and the vectors' size, least
    recently used first out."""

    def __init__(self, max_bytes: int = 100 * 2**20) -> None:
        self._max_bytes = max_bytes
        self._people: OrderedDict[
            tuple[str, str], tuple[tuple[int, int, int], PersonTurns, int]
        ] = OrderedDict()
        self._lock = threading.Lock()
        self._held = 0

    def get(
        self,
        key: tuple[str, str],
        mark: tuple[int, int, int],
        load: Callable[[], list[Message]],
        window: int,
        dim: int = 0,
        load_after: Callable[[int], list[Message]] | None = None,
    ) -> PersonTurns:
        """The person's entry when the store's mark is the one it was built at; else built
        again (terms and vectors of turns it held carried over), or extended with the turns
        an archive added (`load_after(id)`: the archived turns after that id) when that is
        all that changed. `dim`: the vectors' size, in the memory each turn is counted for."""
        with self._lock:
            cached = self._people.get(key)
            if cached is not None and cached[0] == mark and cached[1].window == window:
                self._people.move_to_end(key)
                return cached[1]
        person = None
        if cached is not None and load_after is not None and cached[1].window == window:
            person = _after_an_archive(cached[0], cached[1], mark, load_after)
        if person is None:
            turns = load()
            known = (
                {m.id: t for m, t in zip(cached[1].turns, cached[1].terms, strict=True)}
                if cached is not None
                else None
            )
            person = PersonTurns.build(turns, window, known)
        turns = person.turns
        if cached is not None:
            before = cached[1]
            if before.vectors is not None:
                person.previous = (before.vectors, before.position)
            elif before.previous is not None:
                person.previous = before.previous
        size = person.held_bytes + vector_bytes(len(turns), dim)
        with self._lock:
            old = self._people.pop(key, None)
            if old is not None:
                self._held -= old[2]
            if size <= self._max_bytes:
                self._people[key] = (mark, person, size)
                self._held += size
            while self._held > self._max_bytes and self._people:
                _, (_, _, dropped) = self._people.popitem(last=False)
                self._held -= dropped
        return person

    def drop(self, agent: str, phone: str) -> None:
        """Forget a person's copy at once (erasure), not at the next request."""
        with self._lock:
            old = self._people.pop((agent, phone), None)
            if old is not None:
                self._held -= old[2]

    @property
    def held(self) -> int:
        """The estimated bytes held now."""
        with self._lock:
            return self._held


def _after_an_archive(
    held: tuple[int, int, int],
    person: PersonTurns,
    mark: tuple[int, int, int],
    load_after: Callable[[int], list[Message]],
) -> PersonTurns | None:
    """The cached entry extended with the turns an archive added, when the store's mark
    says nothing else changed (the same oldest turn, and the count grown by exactly those);
    None: build it again from all of them (a retention, a move, a forget)."""
    count, lowest, highest = held
    if not person.turns or mark[1] != lowest or mark[0] <= count or mark[2] <= highest:
        return None
    newer = load_after(highest)
    if count + len(newer) != mark[0] or not newer or newer[-1].id != mark[2]:
        return None
    return person.extended(newer)


# What a cached turn costs, measured with tracemalloc on the support and multilingual chats
# (45 characters a turn: 2.1 to 2.3 KB with its terms and postings, and its Message) and on
# longer turns (250 to 1,300 characters: 60 to 67 bytes a character): the postings of every
# term in each of its windows cost far more than the text. Counting turns alone (the cap was
# 50,000) let long turns hold gigabytes.
TURN_BYTES = 1200
CHAR_BYTES = 60


def windows(
    person: PersonTurns,
    ranked: Sequence[tuple[int, float]],
    *,
    budget_chars: int,
    neighbours: int,
    spread: float,
    skip: frozenset[int] = frozenset(),
    cosines: Mapping[int, float] | None = None,
    gate: float = 0.0,
) -> list[Excerpt]:
    """Turns taken one at a time in order of rank while they fit in the budget: a hit ranks as
    itself, a turn d places from the hit of rank r as r + spread * d (with spread 3 the next
    three hits come before the first neighbours of the best one, which come before the fourth
    hit), so a hit found far down the list does not wait for every neighbour of the ones above
    it. With `cosines` (message id: cosine to the question), a neighbour less like the
    question than its hit ranks `gate` places lower for each unit of cosine it falls short by:
    the hit's context comes with it when it is on the subject, and "haha, nice!" gives its
    place to the next hit. A neighbour is taken only with its hit; turns in `skip` are left
    out. Runs of consecutive turns are merged into windows, ordered by their best hit, each in
    time order."""
    n = len(person.turns)
    hits: dict[int, tuple[int, float]] = {}  # position -> (rank, score)
    for rank, (message_id, score) in enumerate(ranked):
        i = person.position.get(message_id)
        if i is not None and message_id not in skip and i not in hits:
            hits[i] = (rank, score)
    order: dict[int, tuple[float, int]] = {}  # position -> (priority, the hit it comes with)
    for i, (rank, _) in hits.items():
        for d in range(neighbours + 1):
            for j in {i - d, i + d}:
                if 0 <= j < n and (j in hits or person.turns[j].id not in skip):
                    p = rank + spread * d
                    if j not in hits:
                        p += _shortfall(person, i, j, cosines, gate)
                    if j not in order or p < order[j][0]:
                        order[j] = (p, i)
    taken: dict[int, float | None] = {}
    spent = 0
    for j, (_, source) in sorted(order.items(), key=lambda o: (o[1][0], o[1][1] != o[0], o[0])):
        if source != j and source not in taken and j not in hits:
            continue  # a neighbour comes only with its hit
        cost = len(person.turns[j].content) + TURN_OVERHEAD_CHARS
        if spent + cost > budget_chars:
            continue
        taken[j] = hits[j][1] if j in hits else None
        spent += cost
    if not taken:
        return []
    runs: list[list[int]] = []
    for i in sorted(taken):
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    runs.sort(key=lambda run: min((hits[i][0] for i in run if i in hits), default=len(ranked)))
    return [
        Excerpt(person.turns[i], taken[i], w, taken[i] is not None)
        for w, run in enumerate(runs)
        for i in run
    ]


def _shortfall(
    person: PersonTurns, hit: int, j: int, cosines: Mapping[int, float] | None, gate: float
) -> float:
    """Places a neighbour (position j) of a hit ranks lower for being less like the question
    than the hit is: `gate` a unit of cosine it falls short by; none when either cosine is
    unknown."""
    if not cosines or gate <= 0:
        return 0.0
    own = cosines.get(person.turns[hit].id)
    near = cosines.get(person.turns[j].id)
    if own is None or near is None:
        return 0.0
    return gate * max(0.0, own - near)
