"""Relevance a person can read: a search score turned into 0-1, and in words.

Raw scores do not speak: e5 gives filler a cosine of 0.78, BM25 has no upper end, and a
hybrid score mixes both. Staff search shows instead where a result stands between what filler
scores (0) and what the answer to a question typically scores (1), for the model and mode in
use (embeddings/calibration.py); staff search hides what falls below the model's floor, but
never a result that says every word of the query (word_match). The mapping keeps the order of
the scores, so pages stay stable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np

from embeddings.calibration import Calibration
from embeddings.encoder import Vectors
from embeddings.index import BM25_SCALE, Hit
from embeddings.relevance import Scale
from server.words import terms

# Candidates read to rank by the relevance scale: the index ranks by the centred query, which
# differs from the scale's order only by each item's own length after centring.
RESCORE_DEPTH = 20

Match = Literal["strong", "good", "weak"]
STRONG = 0.75  # the relevance from which a result is called a strong match
WORDS: tuple[tuple[float, Match], ...] = ((STRONG, "strong"), (0.4, "good"), (0.0, "weak"))


def relevance(score: float, mode: str, calibration: Calibration) -> float:
    """0 at the filler's score or below, 1 at the answer's typical score or above."""
    if mode == "keyword":
        score = max(score, 0.0) / (max(score, 0.0) + BM25_SCALE)
        low, high = calibration.keyword_anchors
    elif mode == "semantic":
        low, high = calibration.semantic_anchors
    else:
        low, high = calibration.hybrid_anchors
    share = (score - low) / (high - low)
    return round(min(max(share, 0.0), 1.0), 3)


def in_words(value: float) -> Match:
    return next(word for bound, word in WORDS if value >= bound)


def word_match(query: str) -> Callable[[str], bool]:
    """Whether a text has every word of the query, read as keyword search reads words: by the
    full-text index's own analysis (lower case, accents folded, stop words dropped, English
    stems), so "cumpleanos" is in "Cumpleaños" and "refund" in "refunds". A query of stop words
    alone has no word to match. BM25 scores a word found in nearly every row at almost nothing,
    so relevance cannot tell such a match from filler; this can."""
    wanted = set(terms(query))
    return lambda text: bool(wanted) and wanted <= set(terms(text))


def rescored(
    scale: Scale, query: Vectors, hits: list[Hit], cosines: dict[str, float], searched: int
) -> list[Hit]:
    """Hits (read with their vectors) scored on the relevance scale for a search over
    `searched` items, best first; each raw cosine goes into `cosines` by row id. The vectors
    are not kept."""
    if not hits:
        return []
    if not scale.calibrated:  # the raw cosine is the score: nothing to read or compute
        for hit in hits:
            cosines[hit.row.id] = round(hit.score, 4)
        return [Hit(h.row, round(h.score, 4)) for h in hits]
    vectors = np.stack([np.asarray(h.vector, dtype=np.float32) for h in hits])
    out = []
    scores = scale.scores(np.asarray(query, np.float32), vectors, searched)
    for hit, (score, cosine) in zip(hits, scores, strict=True):
        cosines[hit.row.id] = cosine
        out.append(Hit(hit.row, score))
    out.sort(key=lambda h: -h.score)
    return out
