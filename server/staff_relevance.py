"""Staff search's relevance on the relevance scale (embeddings/relevance.py), in every mode.

A result's relevance is what its own stored vector says of the question, on the scale of its
kind (facts and summaries on the facts' scale, turns on the turns'), in a search over every
item of that kind the search covered (its agents, person, kinds and dates): as in the context,
where the floor rises with the facts a person has, 0.7 means that a question about nothing in
what was searched reaches it with any item about 1 time in 25. (Judged as one item alone, two
thirds of the top 50 on LoCoMo were "strong": every result there is small talk near the
question; benchmarks/README.md, "Staff search relevance".) Two things lift or cap it:

- a result that says every word of the question (as the full-text index reads words:
  server/relevance.word_match) is at least a strong match: staff who type an order number
  or a name want the turns that hold it, which an encoder may not rank high;
- a turn of a few words ("hi", "ok gracias") is never a strong match, whatever its score:
  it holds no fact to match.

The mode (semantic, keyword, hybrid) decides which results are found and in what order;
relevance says how relevant each is, the same in every mode. A model without a fitted scale
keeps the per-mode anchors of the score itself (server/relevance.relevance)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from embeddings.calibration import Calibration
from embeddings.index import VectorIndex
from embeddings.relevance import Scale, scale_for
from server import words
from server.indexer import VectorSpace
from server.relevance import STRONG, relevance, word_match

KINDS = ("turn", "fact")  # the two scales: turns, and facts (summaries read as facts)


@dataclass(frozen=True, slots=True)
class Candidate:
    row_id: str  # the index row: "turn:12", "fact:<id>", "summary:<agent>|<phone>"
    text: str
    score: float  # the mode's own score (cosine, fused, or BM25)
    named: bool = False  # an item of the person the query names: judged without the name


@dataclass
class StaffScorer:
    """Relevance of staff search's results for one query (vectors read once per result)."""

    space: VectorSpace
    query: str
    mode: str
    calibration: Calibration
    rest: str | None = None  # the query without the name of the person it names
    where: str = "true"  # what the search covers (the index filter): its size sets the floor
    _cache: dict[str, float] = field(default_factory=dict)
    _cosines: dict[str, float] = field(default_factory=dict)
    _vectors: dict[str, np.ndarray] = field(default_factory=dict)
    _counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._says_all = word_match(self.query)
        name = self.space.encoder.name
        self._scales: dict[str, Scale] = {
            "fact": scale_for(name, "fact"),
            "turn": scale_for(name, "turn"),
        }

    @property
    def calibrated(self) -> bool:
        return self._scales["fact"].calibrated

    def says_every_word(self, text: str) -> bool:
        return self._says_all(text)

    def relevances(self, candidates: Sequence[Candidate]) -> list[float]:
        """Each candidate's relevance, 0-1."""
        if self.calibrated:
            self._read([c for c in candidates if c.row_id not in self._cache])
        return [self._one(c) for c in candidates]

    def scale_score(self, c: Candidate) -> float:
        """The candidate's own vector's score on the scale (after `relevances` read it)."""
        return self._cache.get(c.row_id, 0.0)

    def cosine(self, row_id: str) -> float | None:
        """The raw cosine of the result's stored vector to the query, when it was read."""
        return self._cosines.get(row_id)

    def _one(self, c: Candidate) -> float:
        turn = c.row_id.startswith("turn:")
        if not self.calibrated:
            return judged(relevance(c.score, self.mode, self.calibration), c.text, turn, False)
        return judged(self._cache.get(c.row_id, 0.0), c.text, turn, self._says_all(c.text))

    def _read(self, candidates: Sequence[Candidate]) -> None:
        """Scale scores of these candidates from their stored vectors (one index read)."""
        if not candidates:
            return
        index: VectorIndex = self.space.index
        stored = index.vectors([c.row_id for c in candidates])
        by_query: dict[bool, list[Candidate]] = {}
        for c in candidates:
            if c.row_id in stored:
                by_query.setdefault(c.named and self.rest is not None, []).append(c)
            else:  # not indexed yet (a turn just stored): nothing to say of it
                self._cache[c.row_id] = 0.0
        for named, group in by_query.items():
            vector = self._vector(self.rest if named and self.rest else self.query)
            for kind in KINDS:
                mine = [c for c in group if (c.row_id.startswith("turn:")) == (kind == "turn")]
                if not mine:
                    continue
                scores = self._scales[kind].scores(
                    vector, np.stack([stored[c.row_id] for c in mine]), self._searched(kind)
                )
                for c, (score, cosine) in zip(mine, scores, strict=True):
                    self._cache[c.row_id] = score
                    self._cosines[c.row_id] = cosine

    def _searched(self, kind: str) -> int:
        """How many items of this kind the search covered (counted once)."""
        if kind not in self._counts:
            only = "kind = 'turn'" if kind == "turn" else "kind <> 'turn'"
            self._counts[kind] = max(self.space.index.count(f"({self.where}) AND {only}"), 1)
        return self._counts[kind]

    def _vector(self, text: str) -> np.ndarray:
        if text not in self._vectors:
            encoded = self.space.encoder.encode_query([text])[0]
            self._vectors[text] = np.asarray(encoded, dtype=np.float32)
        return self._vectors[text]


def judged(value: float, text: str, turn: bool, says_every_word: bool) -> float:
    """A result's relevance from its scale score: at least strong when it says every word of
    the query, never strong when it is a turn of a few words."""
    if says_every_word:
        value = max(value, STRONG)
    if turn and words.is_short(text):
        value = min(value, STRONG - 0.001)
    return round(value, 4)


def passes(floor: float, asked: bool) -> Callable[[float, bool], bool]:
    """Whether a result of this relevance (and whether it says every word of the query) is
    shown: the model's floor hides filler but never a result that says every word; a floor the
    caller asked for is applied as asked."""
    if asked:
        return lambda value, _says_all: value >= floor
    return lambda value, says_all: value >= floor or says_all
