"""Smoke test of benchmarks/bench_staff.py: tiny LoCoMo-shaped conversations, the hash
encoder (no model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_staff
from tests.benchmarks.tiny_locomo import write_tiny_locomo

# Opens no database of the server's: the same on both passes, so the postgresql pass
# skips it (tests/conftest.py).
pytestmark = pytest.mark.no_database


def test_bench_staff_smoke(tmp_path: Path) -> None:
    data = write_tiny_locomo(tmp_path)
    out = tmp_path / "out"
    args = ["--model", "hash:64", "--data", str(data), "--out", str(out)]
    assert bench_staff.main(args) == 0
    report = json.loads((out / "staff.locomo.hash.json").read_text(encoding="utf-8"))
    assert report["conversations"] == 2 and report["questions"] > 0
    floors = [row["floor"] for row in report["rows"]]
    assert floors == sorted(floors) and floors[0] == 0.0
    shown = [row["results shown (mean)"] for row in report["rows"]]
    assert shown == sorted(shown, reverse=True)  # a higher floor never shows more
    found = [row["answer on the page"] for row in report["rows"]]
    assert found == sorted(found, reverse=True) and 0.0 <= found[-1] <= found[0] <= 1.0
    assert found[0] == report["answer in the top 50"]  # no floor: every result shown
    assert "| relevance floor |" in (out / "staff.locomo.hash.md").read_text(encoding="utf-8")
