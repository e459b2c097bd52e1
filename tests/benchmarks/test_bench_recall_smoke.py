"""Smoke test of benchmarks/bench_recall.py on two tiny LoCoMo-shaped conversations."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.fakes import fake_factory

ROOT = Path(__file__).resolve().parents[2]


def load_bench() -> ModuleType:
    path = ROOT / "benchmarks" / "bench_recall.py"
    spec = importlib.util.spec_from_file_location("bench_recall", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_recall"] = module
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
        {"speaker": b, "dia_id": "D2:4", "text": "Congratulations on the nurse job!"},
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
            "session_3_date_time": "9:00 am on 1 July, 2023",  # a date with no session
        },
        "observation": {
            "session_1_observation": {
                a: [[f"{a} adopted a {pet} called Biscuit.", "D1:3"]],
                b: [[f"{b} has a rose garden.", ["D1:4"]]],
            },
            "session_2_observation": {
                a: [[f"{a} is moving to {city} for a nurse job.", "D2:1; D2:3"]],
                b: [],
            },
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
                "evidence": ["D:2:1", "D2:03"],
                "category": 1,
            },
            {"question": "Unanswerable?", "answer": "x", "evidence": [], "category": 3},
        ],
    }


def test_bench_recall_smoke(tmp_path: Path) -> None:
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
            "--no-plot",
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
    expected |= {f"dense:{w}:{t}:k10" for w in ("facts", "turns") for t in ("nofloor", "0.7")}
    expected |= {f"sweep:{w}@{t}" for w in ("facts", "excerpts", "turns") for t in ("0.00", "0.50")}
    assert expected <= set(results)
    for method, row in results.items():
        assert 0.0 <= row["all"] <= 1.0, method
        assert row["n"] == 4, method
        for cat in row["by_category"].values():
            assert 0.0 <= cat["recall"] <= 1.0, method
    # Two conversations of 8 turns fit entirely in the seed design's 60 newest turns.
    assert results["seed"]["all"] == 1.0
    assert (out / "recall.md").read_text().startswith("# Retrieval recall on LoCoMo")
