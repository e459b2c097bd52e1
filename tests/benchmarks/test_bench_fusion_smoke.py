"""Smoke test of benchmarks/bench_fusion.py: two tiny LoCoMo-shaped conversations as both
sets, with the hash encoder (no model), in a second or two."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_fusion
from tests.benchmarks.tiny_locomo import write_tiny_locomo

# Opens no database of the server's: the same on both passes, so the postgresql pass
# skips it (tests/conftest.py).
pytestmark = pytest.mark.no_database


def test_bench_fusion_smoke(tmp_path: Path) -> None:
    data = write_tiny_locomo(tmp_path)
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = [
        *("--model", "hash:64", "--locomo", str(data), "--multilingual", str(data)),
        *("--history", "2", "--k", "1,2", "--weights", "0.7", "--cache", str(cache)),
        *("--out", str(out)),
    ]
    assert bench_fusion.main(args) == 0
    report = json.loads((out / "fusion.other.json").read_text(encoding="utf-8"))
    assert report["history"] == 2
    assert set(report["results"]) == {"locomo", "multilingual"}
    table = report["results"]["locomo"]
    assert {"keyword", "semantic (own words)", "fused 0.7 (own words)", "RRF (own words)"} <= set(
        table
    )
    assert "semantic (with neighbours)" in table
    columns = {"k=1, window 1", "k=2, window 1", "k=1, window 2", "k=2, window 2"}
    for row in table.values():
        assert set(row) == columns
        assert all(0.0 <= v <= 1.0 for v in row.values())
        assert row["k=2, window 1"] >= row["k=1, window 1"]  # more excerpts never cover less
    assert "| keyword |" in (out / "fusion.other.md").read_text(encoding="utf-8")
    # The embeddings are cached and reused: a second run gives the same figures.
    assert sorted(p.name for p in cache.iterdir()) == [
        "fusion.locomo.other.npz",
        "fusion.multilingual.other.npz",
    ]
    assert bench_fusion.main(args) == 0
    again = json.loads((out / "fusion.other.json").read_text(encoding="utf-8"))
    assert again["results"] == report["results"]
