"""Smoke test of benchmarks/bench_redaction.py (issue 27): a small corpus, the figures it
reports, and one round of turns stored over HTTP with redaction on and off."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import bench_redaction
from server.redaction import redact
from tests.fakes import fake_factory


def test_bench_redaction_smoke(tmp_path: Path) -> None:
    argv = ["--ordinary", "400", "--secrets", "40", "--store-rounds", "1", "--out", str(tmp_path)]
    result = bench_redaction.main(argv, progress=lambda _: None, encoder_factory=fake_factory)
    saved = json.loads((tmp_path / "redaction.json").read_text(encoding="utf-8"))
    assert saved["turns"] == result["turns"] == 400 + 40 * len(bench_redaction.WORDINGS)
    assert (tmp_path / "redaction.md").read_text(encoding="utf-8").startswith("| kind |")
    recall = result["default"]["recall"]
    for kind in bench_redaction.WORDINGS:
        caught = sum(v["caught"] for k, v in recall.items() if k.startswith(kind + "/"))
        planted = sum(v["n"] for k, v in recall.items() if k.startswith(kind + "/"))
        assert planted == 40 and caught >= 36, (kind, caught)
    ordinary = result["default"]["ordinary"]
    assert sum(p["turns"] for p in ordinary.values()) == 400
    assert sum(p["altered"] for p in ordinary.values()) <= 2
    assert result["store"]["on_ms"] > 0 and result["store"]["off_ms"] > 0


def test_a_secret_counts_as_caught_only_when_every_form_of_it_is_gone() -> None:
    turn = bench_redaction.Turn(
        "tarjeta 4111 1111 1111 1111", "card", ("4111 1111 1111 1111", "4111111111111111"), "dev"
    )
    assert bench_redaction.caught(turn, redact(turn.text))
    assert not bench_redaction.caught(turn, turn.text)
    assert not bench_redaction.caught(turn, "tarjeta 4111111111111111")
