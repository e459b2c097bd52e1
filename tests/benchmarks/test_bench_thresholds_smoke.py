"""Smoke test of benchmarks/bench_thresholds.py: the real fact pairs and two tiny LoCoMo-shaped
conversations, with the hash encoder (no model), in a second or two."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import bench_thresholds
from tests.benchmarks.tiny_locomo import write_tiny_locomo

# Opens no database of the server's: the same on both passes, so the postgresql pass
# skips it (tests/conftest.py).
pytestmark = pytest.mark.no_database


def shares(rows: list[dict[str, Any]], *keys: str) -> None:
    for row in rows:
        for key in keys:
            value = row[key]
            assert value is None or 0.0 <= value <= 1.0, (key, row)


def test_fact_pairs_file() -> None:
    raw = json.loads(bench_thresholds.DEFAULT_PAIRS.read_text(encoding="utf-8"))
    assert "CC BY 4.0" in raw["about"]
    pairs = raw["pairs"]
    assert len(pairs) >= 200
    assert 0.40 <= sum(p["duplicate"] for p in pairs) / len(pairs) <= 0.50
    assert all(set(p) == {"a", "b", "duplicate", "kind"} for p in pairs)
    assert all(p["a"].strip() and p["b"].strip() and p["a"] != p["b"] for p in pairs)
    assert len({(p["a"], p["b"]) for p in pairs}) == len(pairs), "no pair twice"
    for kind in {p["kind"] for p in pairs}:  # a kind is all duplicates or none
        assert len({p["duplicate"] for p in pairs if p["kind"] == kind}) == 1, kind


def test_bench_thresholds_smoke(tmp_path: Path) -> None:
    data = write_tiny_locomo(tmp_path)
    out = tmp_path / "out"
    report = bench_thresholds.main(
        [
            *("--models", "hash:64", "--locomo", str(data)),
            *("--multilingual", str(tmp_path / "missing.json"), "--out", str(out), "--quiet"),
        ]
    )
    written = json.loads((out / "bench_thresholds.json").read_text(encoding="utf-8"))
    assert written["recommended"] == report["recommended"]
    assert set(written) >= {"config", "datasets", "seconds", "recommended", "models"}
    assert "does not exist" in written["datasets"]["multilingual"]["skipped"]
    locomo = written["datasets"]["locomo"]
    assert locomo["conversations"] == 2
    assert locomo["turns"] == 16
    assert locomo["facts"] == 6
    assert locomo["questions"] == 4
    assert locomo["skipped_questions_no_evidence"] == 2

    model = written["models"]["hash:64"]
    assert set(model) == {"duplicates", "excerpts", "facts", "recommended"}
    assert set(model["recommended"]) >= {"duplicate_threshold", "excerpt_threshold"}
    dup = model["duplicates"]
    assert dup["n"] >= 200 and dup["duplicates"] + dup["non_duplicates"] == dup["n"]
    assert [r["threshold"] for r in dup["sweep"]] == bench_thresholds.DUPLICATE_THRESHOLDS
    assert len(dup["sweep"]) == 50 and dup["sweep"][-1]["threshold"] == 0.99
    shares(dup["sweep"], "precision", "recall", "f1")
    for row in dup["sweep"]:
        assert row["tp"] + row["fn"] == dup["duplicates"]
    recalls = [r["recall"] for r in dup["sweep"]]
    assert recalls == sorted(recalls, reverse=True), "recall falls as the threshold rises"
    for key in ("duplicate", "non_duplicate"):
        values = list(dup["percentiles"][key].values())
        assert values == sorted(values) and all(-1.0 <= v <= 1.0001 for v in values)
    assert set(dup["by_kind"]) >= {"translation", "different-value", "negation", "unrelated"}

    excerpts = model["excerpts"]["locomo"]
    assert excerpts["questions"] == 4
    assert excerpts["evidence_scores"] == 6  # per conversation one evidence turn, then two
    assert excerpts["other_scores"] == 4 * 8 - 6
    assert [r["floor"] for r in excerpts["sweep"]] == bench_thresholds.FLOORS
    shares(excerpts["sweep"], "evidence_kept", "other_kept", "questions_with_evidence_kept")
    kept = [r["evidence_kept"] for r in excerpts["sweep"]]
    assert kept == sorted(kept, reverse=True)
    # The hash encoder counts shared words: evidence turns share more with their question.
    assert excerpts["evidence"]["p50"] > excerpts["other"]["p50"]
    # One evidence turn shares no word with its question: no floor keeps 95 % of them.
    assert excerpts["suggested_floor"] is None
    assert model["recommended"]["excerpt_threshold"] == 0.0
    assert model["recommended"]["excerpt_floor_below_grid"] is True

    facts = model["facts"]["locomo"]
    assert facts["floor"] == 0.7
    assert facts["questions"] == 4  # each question has a fact citing its evidence
    assert facts["questions_without_evidence_facts"] == 0
    for key in ("evidence_facts_kept", "other_facts_kept", "questions_with_evidence_fact_kept"):
        assert 0.0 <= facts[key] <= 1.0

    text = (out / "bench_thresholds.md").read_text(encoding="utf-8")
    assert text.startswith("# Cosine constants per model")
    for heading in ("## Recommended constants", "## Duplicate threshold", "## Excerpt floor"):
        assert heading in text


def test_bench_thresholds_multilingual_and_limit(tmp_path: Path) -> None:
    """The multilingual file is read when present; --max-questions caps each dataset."""
    data = write_tiny_locomo(tmp_path)
    out = tmp_path / "out"
    report = bench_thresholds.main(
        [
            *("--models", "hash:32", "--locomo", str(data), "--multilingual", str(data)),
            *("--max-questions", "1", "--window", "1", "--out", str(out), "--quiet"),
        ]
    )
    assert report["datasets"]["multilingual"]["questions"] == 1
    assert report["datasets"]["locomo"]["conversations"] == 1
    model = report["models"]["hash:32"]
    assert set(model["excerpts"]) == {"locomo", "multilingual"}
    assert model["excerpts"]["multilingual"]["questions"] == 1
    assert report["config"]["window"] == 1
