"""The relevance scale: a cosine turned into a score on which 0.7 means "relevant to the
question", the same for every calibrated model.

Three steps, per model, fitted on the dev parts (benchmarks/bench_relevance.py --fit writes
`embeddings/centres/<model>.json`):

1. **Centring.** Sentence encoders put every vector in a narrow cone (e5 gives filler a
   cosine of 0.78 to anything), so the raw cosine says little. The cosine is taken instead
   between vectors minus the model's mean vector, one mean for questions (the query form)
   and one for stored items (the passage form), measured on the project's own labelled facts
   (benchmarks/data/fact_pairs.json). What all texts share cancels out; what a question and
   an item share stays.
2. **The floor, by how many items are searched.** The centred cosine that questions about
   nothing a person said (greetings, small talk, questions on topics nobody raised: the dev
   part of benchmarks/data/offtopic.json) reach with one item is measured once per model as
   a distribution (`tail`). A search weighs all of a person's facts, and the more she has,
   the likelier one of them scores high by chance; so the floor for a search over n items is
   the level such a question passes with probability 1 - CHANCE for all n at once:
   the quantile CHANCE_OK ** (1 / n) of that distribution. 0.7 is placed there.
3. **A monotone map** onto 0-1: the typical unrelated pair (`low`, the median) maps to 0, the
   floor for n to 0.7, and `high` (the 90th percentile of the cosine of a question's
   evidence facts on the dev parts) to 1; linear in between.

So at the default floor 0.7 a question about nothing the person said gets no fact, from
however many she has, about 24 times in 25 (on the dev parts; benchmarks/README.md,
"Relevance scores", for the test parts). Within one search the order is the centred cosine's.
Archived turns have a scale of their own (chit-chat is nearer to any question than a fact
is): fitted the same way on the turns that say something, since a turn of a few words
("hola", "ok gracias") is never a hit. A model without a fitted file scores the raw cosine
itself."""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from embeddings.encoder import model_slug

Kind = Literal["fact", "turn"]
CENTRES = Path(__file__).resolve().parent / "centres"
FLOOR = 0.7  # the score the floor maps to: the default similarity threshold
# A question about nothing the person said passes the floor with one of her items at most
# this often (the dev parts' greetings and off-topic questions).
CHANCE_OK = 0.96
# The same model under other names.
ALIASES = {
    "multilingual_e5_small_engine": "multilingual_e5_small",
    "intfloat_multilingual_e5_small": "multilingual_e5_small",
    "sentence_transformers_all_minilm_l6_v2": "all_minilm_l6_v2",
}


@dataclass(frozen=True)
class Scale:
    """One model's centres and anchors. Uncalibrated (no centres): the raw cosine."""

    model: str
    query_centre: NDArray[np.float32] | None = None
    passage_centre: NDArray[np.float32] | None = None
    low: float = 0.0
    high: float = 1.0
    # (level, centred cosine): the distribution's upper quantiles, levels increasing
    tail: tuple[tuple[float, float], ...] = field(default=())

    @property
    def calibrated(self) -> bool:
        return self.query_centre is not None and bool(self.tail)

    def floor(self, items: int) -> float:
        """The centred cosine that maps to 0.7 for a search over this many items."""
        if not self.calibrated:
            return FLOOR
        level = CHANCE_OK ** (1.0 / max(items, 1))
        levels = [p for p, _ in self.tail]
        i = bisect.bisect_left(levels, level)
        if i <= 0:
            return self.tail[0][1]
        if i >= len(self.tail):
            return self.tail[-1][1]
        (p0, c0), (p1, c1) = self.tail[i - 1], self.tail[i]
        # interpolated on the log of 1 - level: the tail's levels are spaced that way
        x0, x1, x = (-math.log10(max(1 - p, 1e-12)) for p in (p0, p1, level))
        return c0 + (c1 - c0) * ((x - x0) / (x1 - x0) if x1 != x0 else 0.0)

    def centred_query(self, query: NDArray[np.float32]) -> NDArray[np.float32]:
        """The query minus the questions' mean, unit length (the raw query when uncentred)."""
        if self.query_centre is None:
            return query
        return _unit(query - self.query_centre)

    def centred(
        self, query: NDArray[np.float32], items: NDArray[np.float32]
    ) -> NDArray[np.float32]:
        """Centred cosines of one query to items (rows)."""
        items = np.asarray(items, dtype=np.float32).reshape(-1, len(query))
        if self.passage_centre is None:
            return np.asarray(items @ query, dtype=np.float32)
        shifted = items - self.passage_centre
        norms = np.linalg.norm(shifted, axis=1)
        norms[norms == 0] = 1.0
        return np.asarray((shifted @ self.centred_query(query)) / norms, dtype=np.float32)

    def score(self, centred: float, items: int = 1) -> float:
        """A centred cosine on the relevance scale, 0-1 (4 places), in a search over `items`."""
        floor = self.floor(items)
        high = max(self.high, floor + 0.05)
        low = min(self.low, floor - 0.05)
        if centred >= floor:
            value = FLOOR + (1 - FLOOR) * (centred - floor) / (high - floor)
        else:
            value = FLOOR * (centred - low) / (floor - low)
        return round(min(max(value, 0.0), 1.0), 4)

    def scores(
        self, query: NDArray[np.float32], items: NDArray[np.float32], searched: int = 1
    ) -> list[tuple[float, float]]:
        """(score, raw cosine) of one query to each item, in a search over `searched` items."""
        items = np.asarray(items, dtype=np.float32).reshape(-1, len(query))
        raw = items @ query
        centred = self.centred(query, items)
        return [
            (self.score(float(c), searched), round(float(r), 4))
            for c, r in zip(centred, raw, strict=True)
        ]


def _unit(vector: NDArray[np.float32]) -> NDArray[np.float32]:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 and math.isfinite(norm) else vector


def load_scale(path: Path, model: str, kind: Kind = "fact") -> Scale:
    """A fitted file's scale for facts (its top level) or for archived turns (`turns`: the
    same centres, the distribution of questions about nothing against turns that say
    something, and the cosine of evidence turns)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    anchors = data if kind == "fact" else data["turns"]
    return Scale(
        model,
        np.asarray(data["query"], dtype=np.float32),
        np.asarray(data["passage"], dtype=np.float32),
        float(anchors["low"]),
        float(anchors["high"]),
        tuple((float(p), float(c)) for p, c in anchors["tail"]),
    )


@cache
def scale_for(model: str, kind: Kind = "fact") -> Scale:
    """The model's scale for facts, or for archived turns (kind "turn")."""
    slug = model_slug(model)
    path = CENTRES / f"{ALIASES.get(slug, slug)}.json"
    return load_scale(path, model, kind) if path.exists() else Scale(model)
