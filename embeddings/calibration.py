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


E5_SMALL = Calibration(duplicate_threshold=0.9, excerpt_threshold=0.0)
MINILM = Calibration(duplicate_threshold=0.9, excerpt_threshold=0.0)
# Another sentence-transformers model: no sweep of ours, so the most conservative values (a
# duplicate must be near-identical; no excerpt floor).
OTHER = Calibration(duplicate_threshold=0.9, excerpt_threshold=0.0)


def calibration_for(model: str) -> Calibration:
    if model in E5_NAMES:
        return E5_SMALL
    if model in BUNDLED_NAMES:
        return MINILM
    return OTHER
