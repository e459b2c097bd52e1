"""Smoke test of benchmarks/bench_relevance.py: four tiny LoCoMo-shaped conversations (two per
part), the real off-topic questions and fact pairs, the hash encoder (no model; scale_for gives
it the uncalibrated scale, the raw cosine), in a few seconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import bench_relevance
from tests.benchmarks.tiny_locomo import conversation

# Opens no database of the server's: the same on both passes, so the postgresql pass
# skips it (tests/conftest.py).
pytestmark = pytest.mark.no_database


def write_four(folder: Path) -> tuple[Path, Path]:
    """Four conversations (3 facts, 2 questions with evidence each) and parts naming them."""
    data = folder / "tiny.json"
    data.write_text(
        json.dumps(
            [
                conversation("conv-1", "Maya", "Tom", "dog", "Lisbon"),
                conversation("conv-2", "Ana", "Luis", "cat", "Porto"),
                conversation("conv-3", "Eva", "Raj", "parrot", "Quito"),
                conversation("conv-4", "Lena", "Omar", "rabbit", "Oslo"),
            ]
        )
    )
    parts = folder / "parts.json"
    both = {"dev": ["conv-1", "conv-2"], "test": ["conv-3", "conv-4"]}
    parts.write_text(json.dumps({"locomo": both, "multilingual": both}))
    return data, parts


def is_share(value: Any) -> bool:
    return value is not None and 0.0 <= value <= 1.0


def check_turns(t: dict[str, Any], offtopic: dict[str, int]) -> None:
    """The turn measures of one set x part: two people of 8 turns, raw and score."""
    assert t["turns"] == 2 * 8 and 0 <= t["short"] < t["turns"]
    assert t["top"] == bench_relevance.TURN_TOP and t["floor"] == 0.7
    for label in ("before", "after"):
        m = t[label]
        assert set(m) == {
            "evidence_turns",
            "questions_with_one",
            "precision",
            "hits_per_question",
            "offtopic_any",
            "n",
        }
        n = m["n"]
        assert 0 < n["questions"] <= 4 and n["evidence_turns"] >= n["questions"]
        assert is_share(m["evidence_turns"]) and is_share(m["questions_with_one"])
        # No hit in any top-30, no precision; otherwise a share.
        assert is_share(m["precision"]) if n["hits"] else m["precision"] is None
        assert m["hits_per_question"] == round(n["hits"] / n["questions"], 2)
        assert set(m["offtopic_any"]) == {"greeting", "unrelated", "other", "all"}
        assert all(is_share(v) for v in m["offtopic_any"].values())
        assert n["greeting"] == 2 * offtopic["greeting"] and n["other"] == 2 * 2


def test_offtopic_file() -> None:
    raw = json.loads(bench_relevance.DEFAULT_OFFTOPIC.read_text(encoding="utf-8"))
    assert "CC BY 4.0" in raw["about"]
    assert set(raw) == {"about", "dev", "test"}
    seen: dict[str, set[str]] = {}
    for part in ("dev", "test"):
        assert set(raw[part]) == {"greeting", "unrelated"}
        for kind, texts in raw[part].items():
            assert len(texts) >= 30, (part, kind)
            assert all(isinstance(t, str) and t.strip() for t in texts)
            assert len(set(texts)) == len(texts), (part, kind)
        seen[part] = {" ".join(t.lower().split()) for v in raw[part].values() for t in v}
    assert not seen["dev"] & seen["test"], "no text in both parts"
    # The dev part holds the drafts the shipped anchors were fitted on.
    assert {"hola", "👍", "ok"} <= set(raw["dev"]["greeting"])
    assert "who wrote Don Quixote" in raw["dev"]["unrelated"]


def test_bench_relevance_smoke(tmp_path: Path) -> None:
    data, parts = write_four(tmp_path)
    out = tmp_path / "out"
    report = bench_relevance.main(
        [
            *("--models", "hash:384", "--locomo", str(data), "--multilingual", str(data)),
            *("--parts", str(parts), "--out", str(out), "--fit", "--quiet"),
        ]
    )
    written = json.loads((out / "relevance.json").read_text(encoding="utf-8"))
    assert set(written) >= {"config", "datasets", "offtopic", "seconds", "models"}
    assert written["config"]["top_k"] == 10 and written["config"]["floor"] == 0.7
    assert written["offtopic"]["dev"]["greeting"] >= 30
    assert written["datasets"]["locomo"]["parts"]["test"]["samples"] == ["conv-3", "conv-4"]
    assert written["datasets"]["locomo"]["parts"]["dev"]["facts"] == 6

    model = written["models"]["hash:384"]
    scale = model["scale"]  # the hash model ships no scale: the raw cosine, 0.7 at 0.7
    assert scale["calibrated"] is False and scale["low"] == 0.0 and scale["high"] == 1.0
    assert set(scale["floor_at"].values()) == {0.7}
    assert set(model["results"]) == {"locomo", "multilingual"}
    for set_name in ("locomo", "multilingual"):
        for part in ("dev", "test"):
            r = model["results"][set_name][part]
            assert r["people"] == 2 and r["facts"] == 6 and r["questions"] == 4
            ev = r["evidence_kept"]
            assert ev["n"] == 4  # each question has one fact citing its evidence
            for key in ("before", "after", "questions_before", "questions_after"):
                assert is_share(ev[key]), key
            # Uncalibrated: the score is the raw cosine, so before and after agree.
            assert ev["before"] == ev["after"]
            off = r["offtopic_any"]
            assert set(off) == {"greeting", "unrelated", "other", "all"}
            assert off["greeting"]["n"] == 2 * written["offtopic"][part]["greeting"]
            assert off["other"]["n"] == 2 * 2  # the other person's two questions each
            assert off["all"]["n"] == sum(off[k]["n"] for k in ("greeting", "unrelated", "other"))
            for entry in off.values():
                assert is_share(entry["before"]) and is_share(entry["after"])
            sweep = r["sweep"]
            assert [s["floor"] for s in sweep] == bench_relevance.SWEEP
            kept = [s["evidence_kept"] for s in sweep]
            assert all(is_share(k) for k in kept)
            assert kept == sorted(kept, reverse=True), "fewer kept as the floor rises"
            for s in sweep:
                assert all(is_share(s[k]) for k in ("greeting", "unrelated", "other", "all"))
            check_turns(r["turns"], written["offtopic"][part])

    fit = model["fit"]
    # Every greeting and unrelated dev question x every fact of the dev person it is put to.
    dev_offtopic = sum(written["offtopic"]["dev"].values())
    assert fit["pairs"] == 2 * dev_offtopic * 6  # both sets, 6 dev facts each
    assert fit["evidence"] == 2 * 4
    assert fit["texts"] > 200
    assert fit["shipped"] is None  # nothing ships for the hash model
    fitted = fit["fitted_scale"]
    assert fitted["calibrated"] is True
    floors = [fitted["floor_at"][str(n)] for n in bench_relevance.FLOOR_AT]
    assert floors == sorted(floors), "more facts searched, a higher floor"
    assert -1.0 <= fitted["low"] <= floors[0] <= 1.0 and -1.0 <= fitted["high"] <= 1.0
    # The turns' section: every (greeting or unrelated dev question, dev turn not short) pair.
    said = sum(
        r["turns"]["turns"] - r["turns"]["short"]
        for r in (model["results"][s]["dev"] for s in ("locomo", "multilingual"))
    )
    assert 0 < said < 2 * 16
    assert fit["turn_pairs"] == dev_offtopic * said
    assert fit["turn_evidence"] > 0
    turns_fitted = fit["fitted_turn_scale"]
    assert turns_fitted["calibrated"] is True
    assert set(turns_fitted["floor_at"]) == {str(n) for n in bench_relevance.TURNS_AT}
    file = json.loads((out / "relevance.centres.hash_384.json").read_text(encoding="utf-8"))
    assert set(file) == {"model", "pairs", "low", "high", "tail", "query", "passage", "turns"}
    assert set(file["turns"]) == {"pairs", "low", "high", "tail"}
    assert file["turns"]["pairs"] == fit["turn_pairs"]
    assert file["turns"]["tail"][0] == [0.5, file["turns"]["low"]]
    turn_scale = bench_relevance.load_scale(out / "relevance.centres.hash_384.json", "x", "turn")
    assert turn_scale.calibrated and turn_scale.low == file["turns"]["low"]
    assert file["model"] == "hash:384" and len(file["query"]) == len(file["passage"]) == 384
    levels = [level for level, _ in file["tail"]]
    cosines = [cos for _, cos in file["tail"]]
    assert levels == sorted(levels) and levels[0] == 0.5 and levels[-1] == 1.0
    assert cosines == sorted(cosines) and cosines[0] == file["low"]
    assert bench_relevance.load_scale(out / "relevance.centres.hash_384.json", "x").calibrated
    # The fitted scale was measured too (it is not shipped).
    again = model["results_fitted"]["locomo"]["test"]
    assert is_share(again["evidence_kept"]["after"]) and is_share(
        again["offtopic_any"]["all"]["after"]
    )
    check_turns(again["turns"], written["offtopic"]["test"])

    hist = model["histograms"]
    for which in ("raw", "score"):
        # 2 sets x 2 parts, each 4 questions x 3 facts, 4 of them relevant.
        assert hist[which]["pairs"]["relevant"] == 4 * 4
        assert hist[which]["pairs"]["non_evidence"] == 4 * (4 * 3 - 4)
        assert is_share(hist[which]["relevant_at_floor"])
    assert hist["turns"]["pairs"]["relevant"] > 0 and hist["turns"]["pairs"]["offtopic"] > 0
    assert all(is_share(hist["turns"][k]) for k in ("relevant_at_floor", "offtopic_at_floor"))
    assert (out / model["plot"]).stat().st_size > 10_000
    text = (out / "relevance.md").read_text(encoding="utf-8")
    assert text.startswith("# The relevance scale per model")
    for heading in (
        "## The fit (dev parts)",
        "### The archived turns' scale",
        "## At the floor, the shipped",
        "### Turns, the shipped scale",
        "### Turns, the scale fitted by this run",
        "## Sweep: hash:384",
    ):
        assert heading in text
    assert "relevance.hash_384.png" in text and "Maharana" in text
    assert report["models"]["hash:384"]["results"] == model["results"]
