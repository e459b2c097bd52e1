"""Two tiny conversations in LoCoMo's format, for the benchmarks' smoke tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


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
                "evidence": ["D:2:1; D2:03"],  # LoCoMo's messy ids
                "category": 1,
            },
            {"question": "Unanswerable?", "answer": "x", "evidence": [], "category": 3},
        ],
    }


def write_tiny_locomo(folder: Path) -> Path:
    """Two conversations of 8 turns, 3 facts and 3 questions each (2 of the 6 without
    evidence), as a LoCoMo file."""
    path = folder / "locomo_tiny.json"
    path.write_text(
        json.dumps(
            [
                conversation("conv-1", "Maya", "Tom", "dog", "Lisbon"),
                conversation("conv-2", "Ana", "Luis", "cat", "Porto"),
            ]
        )
    )
    return path
