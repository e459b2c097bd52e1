"""Smoke test of benchmarks/bench_recall.py on two tiny LoCoMo-shaped conversations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_recall
from tests.benchmarks.tiny_locomo import write_tiny_locomo
from tests.fakes import fake_factory

# Opens no database of the server's: the same on both passes, so the postgresql pass
# skips it (tests/conftest.py).
pytestmark = pytest.mark.no_database


def test_bench_recall_smoke(tmp_path: Path) -> None:
    data = write_tiny_locomo(tmp_path)
    out = tmp_path / "out"
    report = bench_recall.main(
        [
            "--data",
            str(data),
            "--model",
            "fake-hash",
            "--k",
            "1,2",
            "--threshold",
            "0.0,0.5",
            "--compact-trigger",
            "4",
            "--compact-keep",
            "2",
            "--out",
            str(out),
            "--quiet",
        ],
        encoder_factory=fake_factory,
    )
    written = json.loads((out / "recall.json").read_text())
    assert written["counts"]["conversations"] == 2
    assert written["counts"]["turns"] == 16
    assert written["counts"]["facts"] == 6
    assert written["counts"]["questions"] == 4
    assert written["counts"]["skipped_questions_no_evidence"] == 2
    assert written["counts"]["archived_turns"] > 0
    results = written["results"]
    assert results == report["results"]
    expected = {"seed", "history", "default", "facts:k1", "facts:k2"}
    expected |= {f"turns:{m}:k{k}" for m in ("semantic", "keyword", "hybrid") for k in (1, 2)}
    expected |= {
        f"dense:{w}:{t}:k10" for w in ("facts", "turns", "single-turns") for t in ("nofloor", "0.7")
    }
    expected |= {f"sweep:{w}@{t}" for w in ("facts", "excerpts", "turns") for t in ("0.00", "0.50")}
    assert expected <= set(results)
    for method, row in results.items():
        assert 0.0 <= row["all"] <= 1.0, method
        assert row["n"] == 4, method
        for cat in row["by_category"].values():
            assert 0.0 <= cat["recall"] <= 1.0, method
    # Two conversations of 8 turns fit entirely in the seed design's 60 newest turns.
    assert results["seed"]["all"] == 1.0
    assert (out / "recall.md").read_text().startswith("# Retrieval recall on locomo_tiny.json")
    assert (out / "recall.png").read_bytes().startswith(b"\x89PNG"), "the plot is written"
