"""Cosine constants per model, from the sweeps of benchmarks/bench_thresholds.py.

Models put scores on different scales: MiniLM gives unrelated texts about 0.0-0.3 and a
paraphrase about 0.5-0.8, e5 squeezes everything into 0.7-0.9. A constant tuned for one means
something else for the other, so each is measured per model (README, "Thresholds per model").
The facts floor (`MEMORY_SIMILARITY_THRESHOLD`, 0.7) is the user's choice and is not here."""

from __future__ import annotations

from dataclasses import dataclass

from embeddings.e5 import E5_NAMES
from embeddings.encoder import BUNDLED_NAMES


@dataclass(frozen=True, slots=True)
class Calibration:
    duplicate_threshold: float  # two facts whose symmetric cosine reaches this say the same
    excerpt_threshold: float  # semantic excerpts below this cosine to the question are dropped
    # hybrid search: fused = weight * cosine + (1 - weight) * bm25 / (bm25 + 5)
    semantic_weight: float
    # Staff search's relevance (server/relevance.py), per mode, as (filler, answer): the score
    # that the filler on a page of results gets (the median of results that are not the
    # answer), and the score of the turn that answers the question (its median). Keyword
    # scores are BM25 squashed by bm25 / (bm25 + 5) first. benchmarks/results/staff.*.md.
    # Unswept models: the score itself, read on a plain scale, and nothing hidden.
    semantic_anchors: tuple[float, float] = (0.0, 0.6)
    hybrid_anchors: tuple[float, float] = (0.0, 0.6)
    keyword_anchors: tuple[float, float] = (0.0, 0.5)
    staff_floor: float = 0.0  # relevance below which staff search does not show a result
    # Excerpts, and a named person's turns in staff search: the same fusion with BM25 counted
    # over the person's own turns, fused = excerpt_weight * cosine + (1 - excerpt_weight) *
    # bm25 / (bm25 + excerpt_scale).
    excerpt_weight: float = 0.5
    excerpt_scale: float = 5.0
    # Excerpts: places a hit's neighbour ranks lower for each unit of cosine it is less like
    # the question than its hit (server/excerpts.py, windows); 0 takes neighbours by distance
    # alone.
    excerpt_gate: float = 0.0
    # Excerpts: when a question names one side of the chat (the person, or the agent), the
    # other side's turns score this times as much; 1 weighs both sides alike.
    excerpt_other_side: float = 1.0


# benchmarks/results/bench_thresholds.md (222 labelled fact pairs; LoCoMo and the multilingual
# set's questions against their evidence turns). Duplicates: a false merge drops a new fact as
# a repeat of another ("moved to Sevilla" taken for "moved to Madrid"), so the threshold is the
# lowest with no false merge on the pairs, not the best F1; e5 puts facts that differ in one
# value at 0.94 on average and as high as 0.98, so only near-identical facts merge. Excerpts:
# the highest 0.05 step that keeps at least 95 % of evidence turns on both sets.
# Hybrid weight: benchmarks/results/fusion.*.md (bench_fusion.py: LoCoMo and the multilingual
# set, history + 15 excerpts, keyword text with two neighbours). e5's cosines lie in a narrow
# band, so its semantic half gets more weight; MiniLM's spread wider and get less.
# Excerpt weight and scale: benchmarks/bench_context.py's grids on the dev parts of LoCoMo and
# the multilingual set, through the server, once BM25 was counted over the person's own turns
# (issue 25): e5 at 0.85 and 10 found the most evidence turns of the grid on LoCoMo (86.7 %
# against 85.0 % at 0.7 and 5, the same size) and tied best on the multilingual set.
# The other side's weight: on LoCoMo's dev part, 82 % of the evidence of a question that
# names one of the two people is that person's own words; at 0.94-0.97 the excerpts found 87.2-
# 87.3 % of evidence turns against 86.9 % at 1 (a 2,900 budget), 0.9 and below fewer; at the
# chosen 2,850, 0.96 found 87.3 % against 86.8 %
# (benchmarks/results/context.locomo.dev.side.txt). The multilingual set's questions are in
# the first person and name no one: no change there.
# Staff relevance (benchmarks/results/staff.*.md, bench_staff.py: every conversation in one
# table, each question asked of everyone, hybrid): filler's hybrid score has a median of 0.59
# on the multilingual set and 0.71 on LoCoMo, whose chit-chat shares words with every
# question; the answer's is 0.71 and 0.76. So 0 is put below both sets' filler and the floor
# hides only what is no better than that: it keeps the answer on the page as often as showing
# everything does, where any higher floor cost answers (benchmarks/README.md, "Staff search
# relevance").
E5_SMALL = Calibration(
    duplicate_threshold=0.985,
    excerpt_threshold=0.70,
    semantic_weight=0.7,
    semantic_anchors=(0.75, 0.84),
    hybrid_anchors=(0.57, 0.75),
    staff_floor=0.01,
    excerpt_weight=0.85,
    excerpt_scale=10.0,
    excerpt_gate=100.0,
    excerpt_other_side=0.96,
)
MINILM = Calibration(
    duplicate_threshold=0.98,
    excerpt_threshold=0.0,
    semantic_weight=0.5,
    # filler's hybrid median is 0.30 (multilingual) and 0.40 (LoCoMo), the answer's 0.50; 0 sits
    # at the answer's 10th percentile on the multilingual set, which MiniLM reads poorly
    semantic_anchors=(0.08, 0.4),
    hybrid_anchors=(0.15, 0.5),
    staff_floor=0.01,
    # LoCoMo's dev part: 85.7 % of evidence turns against 85.2 % with no gate (25 and 50: 85.6)
    excerpt_gate=100.0,
    # LoCoMo's dev part: 86.0-86.3 % from 0.9 down to 0.6 against 85.8 % at 1 (and at 0.96):
    # MiniLM's scores spread wider than e5's, so the other side needs a lower weight to move
    excerpt_other_side=0.8,
)
# Another sentence-transformers model: no sweep of ours, so the most conservative values (a
# duplicate must be near-identical; no excerpt floor; semantic and keyword halves even).
OTHER = Calibration(duplicate_threshold=0.985, excerpt_threshold=0.0, semantic_weight=0.5)


def calibration_for(model: str) -> Calibration:
    if model in E5_NAMES:
        return E5_SMALL
    if model in BUNDLED_NAMES:
        return MINILM
    return OTHER
