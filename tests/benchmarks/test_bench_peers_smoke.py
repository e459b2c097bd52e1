"""Smoke test of benchmarks/bench_peers.py: two tiny LoCoMo-shaped conversations, both systems.

The server side uses the fake hash encoder; mem0 (the `bench` extra, which ./scripts/test
installs) runs with the real bundled MiniLM, a few seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench_peers
from tests.benchmarks.tiny_locomo import write_tiny_locomo
from tests.fakes import fake_factory

# Opens no database of the server's: the same on both passes, so the postgresql pass
# skips it (tests/conftest.py).
pytestmark = pytest.mark.no_database


def test_bench_peers_smoke(tmp_path: Path) -> None:
    data = write_tiny_locomo(tmp_path)
    out = tmp_path / "out"
    report = bench_peers.main(
        [
            *("--data", str(data), "--conversations", "2", "--model", "fake-hash"),
            *("--out", str(out), "--quiet"),
        ],
        encoder_factory=fake_factory,
    )
    written = json.loads((out / "peers.json").read_text())
    assert written["systems"] == report["systems"]
    assert written["counts"]["turns"] == 16
    assert written["counts"]["questions"] == 4
    assert written["counts"]["skipped_questions_no_evidence"] == 2
    assert set(written["systems"]) == {"mem0", "server:semantic", "server:hybrid"}
    for name, row in written["systems"].items():
        search, ingest = row["search"], row["ingest"]
        assert search["searches"] == 4, name
        assert 0.0 <= search["recall_at_10"] <= 1.0, name
        assert search["p50_ms"] > 0 and search["p95_ms"] >= search["p50_ms"], name
        assert ingest["turns"] == 16 and ingest["turns_per_s"] > 0 and ingest["errors"] == 0
    # Every item fits in the top 10 (8 turns per person), so all evidence comes back.
    assert written["systems"]["mem0"]["search"]["recall_at_10"] == 1.0
    assert written["systems"]["server:semantic"]["search"]["recall_at_10"] == 1.0
    assert written["systems"]["mem0"]["search"]["errors"] == 0
    assert set(written["ratios_server_over_mem0"]) == {"server:semantic", "server:hybrid"}
    assert (out / "peers.md").read_text().startswith("# mem0 vs this server on LoCoMo")
