"""The relevance scale (embeddings/relevance.py): each calibrated model's fitted file, the
floor that rises with the number of items searched, and the raw cosine for any other model."""

from __future__ import annotations

import numpy as np
import pytest

from embeddings.relevance import CENTRES, CHANCE_OK, FLOOR, scale_for

pytestmark = pytest.mark.no_database

MODELS = ["multilingual-e5-small", "all-MiniLM-L6-v2"]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("kind", ["fact", "turn"])
def test_each_shipped_scale_is_whole_and_monotone(model: str, kind: str) -> None:
    scale = scale_for(model, kind)  # type: ignore[arg-type]
    assert scale.calibrated
    assert scale.query_centre is not None and scale.query_centre.shape == (384,)
    levels = [p for p, _ in scale.tail]
    cosines = [c for _, c in scale.tail]
    assert levels == sorted(levels) and cosines == sorted(cosines), "quantiles increase"
    floors = [scale.floor(n) for n in (1, 10, 100, 1000, 100_000)]
    assert floors == sorted(floors) and floors[0] < floors[-1], "more items, a higher floor"
    assert scale.low < floors[0] and floors[1] < scale.high
    assert scale.score(scale.floor(20), 20) == pytest.approx(FLOOR, abs=1e-3)
    grid = np.linspace(-0.5, 1.0, 61)
    scores = [scale.score(float(c), 20) for c in grid]
    assert scores == sorted(scores) and scores[0] == 0.0 and scores[-1] == 1.0


def test_the_floor_is_the_quantile_for_all_n_items_at_once() -> None:
    scale = scale_for("multilingual-e5-small")
    # With one item the floor is the tail's CHANCE_OK quantile.
    level = CHANCE_OK
    below = max(c for p, c in scale.tail if p <= level)
    above = min(c for p, c in scale.tail if p >= level)
    assert below <= scale.floor(1) <= above


def test_the_engine_and_the_onnx_model_share_one_scale_and_other_models_get_the_cosine() -> None:
    assert scale_for("multilingual-e5-small-engine").tail == scale_for("multilingual-e5-small").tail
    other = scale_for("hash:384")
    assert not other.calibrated
    query = np.array([1.0, 0.0], dtype=np.float32)
    items = np.array([[0.6, 0.8], [1.0, 0.0]], dtype=np.float32)
    assert other.scores(query, items, 500) == [(0.6, 0.6), (1.0, 1.0)]
    assert {p.stem for p in CENTRES.glob("*.json")} == {"multilingual_e5_small", "all_minilm_l6_v2"}

