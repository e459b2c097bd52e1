"""Smoke test of benchmarks/bench_peers.py: two tiny LoCoMo-shaped conversations, both systems.

The server side uses the fake hash encoder; mem0 runs with the real bundled MiniLM (a few
seconds). Without mem0 (the `bench` extra) the test is skipped."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.fakes import fake_factory

ROOT = Path(__file__).resolve().parents[2]


def load_bench() -> ModuleType:
    path = ROOT / "benchmarks" / "bench_peers.py"
    spec = importlib.util.spec_from_file_location("bench_peers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_peers"] = module
    spec.loader.exec_module(module)
    return module


def conversation(sample_id: str, a: str, b: str, pet: str, city: str) -> dict[str, Any]:
    s1 = [
        {"speaker": a, "dia_id": "D1:1", "text": f"Hi {b}! I adopted a {pet} last week."},
        {"speaker": b, "dia_id": "D1:2", "text": f"Wow {a}, what is the {pet} called?"},
        {"speaker": a, "dia_id": "D1:3", "text": "His name is Biscuit, he loves the park."},
        {
            "speaker": b,
            "dia_id": "D1:4",
            "text": "Look at my garden!",
            "blip_caption": "a photo of roses in a garden",
        },
    ]
    s2 = [
        {"speaker": a, "dia_id": "D2:1", "text": f"I am moving to {city} next month."},
        {"speaker": b, "dia_id": "D2:2", "text": f"{city} is lovely, why are you moving?"},
        {"speaker": a, "dia_id": "D2:3", "text": "A new job as a nurse at the hospital."},
    ]
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": a,
            "speaker_b": b,
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": s1,
            "session_2_date_time": "10:00 am on 20 June, 2023",
            "session_2": s2,
        },
        "qa": [
            {
                "question": f"What is the name of {a}'s {pet}?",
                "answer": "Biscuit",
                "evidence": ["D1:3"],
                "category": 4,
            },
            {
                "question": f"Why is {a} moving to {city}?",
                "answer": "a nurse job",
                "evidence": ["D:2:1; D2:03"],
                "category": 1,
            },
            {"question": "Unanswerable?", "answer": "x", "evidence": [], "category": 3},
        ],
    }


def test_bench_peers_smoke(tmp_path: Path) -> None:
    if importlib.util.find_spec("mem0") is None:
        pytest.skip("mem0 is not installed: pip install mem0ai==2.2.1 (meant for the bench extra)")
    data = tmp_path / "locomo_tiny.json"
    data.write_text(
        json.dumps(
            [
                conversation("conv-1", "Maya", "Tom", "dog", "Lisbon"),
                conversation("conv-2", "Ana", "Luis", "cat", "Porto"),
            ]
        )
    )
    out = tmp_path / "out"
    bench = load_bench()
    report = bench.main(
        [
            *("--data", str(data), "--conversations", "2", "--model", "fake-hash"),
            *("--out", str(out), "--quiet"),
        ],
        encoder_factory=fake_factory,
    )
    written = json.loads((out / "peers.json").read_text())
    assert written["systems"] == report["systems"]
    assert written["counts"]["turns"] == 14
    assert written["counts"]["questions"] == 4
    assert written["counts"]["skipped_questions_no_evidence"] == 2
    assert set(written["systems"]) == {"mem0", "server:semantic", "server:hybrid"}
    for name, row in written["systems"].items():
        search, ingest = row["search"], row["ingest"]
        assert search["searches"] == 4, name
        assert 0.0 <= search["recall_at_10"] <= 1.0, name
        assert search["p50_ms"] > 0 and search["p95_ms"] >= search["p50_ms"], name
        assert ingest["turns"] == 14 and ingest["turns_per_s"] > 0 and ingest["errors"] == 0
    # Every item fits in the top 10 (7 turns per person), so all evidence comes back.
    assert written["systems"]["mem0"]["search"]["recall_at_10"] == 1.0
    assert written["systems"]["server:semantic"]["search"]["recall_at_10"] == 1.0
    assert written["systems"]["mem0"]["search"]["errors"] == 0
    assert set(written["ratios_server_over_mem0"]) == {"server:semantic", "server:hybrid"}
    assert (out / "peers.md").read_text().startswith("# mem0 vs this server on LoCoMo")
