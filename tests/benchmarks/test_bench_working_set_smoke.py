"""Smoke test of benchmarks/bench_working_set.py: tiny LoCoMo-shaped conversations, the hash
encoder (no model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_working_set
from tests.benchmarks.tiny_locomo import write_tiny_locomo

# Its own app on its own temporary folder (SQLite): the same on both passes.
pytestmark = pytest.mark.no_database


def test_bench_working_set_smoke(tmp_path: Path) -> None:
    data = write_tiny_locomo(tmp_path)
    out = tmp_path / "out"
    args = ["--model", "hash:64", "--data", str(data), "--sizes", "30,60"]
    args += ["--queries", "3", "--archives", "1", "--out", str(out)]
    assert bench_working_set.main(args) == 0
    report = json.loads((out / "working_set.json").read_text(encoding="utf-8"))
    assert [r["archived turns"] for r in report["rows"]] == sorted(
        r["archived turns"] for r in report["rows"]
    )
    for row in report["rows"]:
        assert row["archived turns"] > 0 and row["context p50 ms"] > 0
        assert row["ratio"] == round(row["context p50 ms"] / row["one query embedding p50 ms"], 2)
    assert "| archived turns |" in (out / "working_set.md").read_text(encoding="utf-8")
