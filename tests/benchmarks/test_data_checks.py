"""The recall sets' own checkers (benchmarks/data/*/check.py) pass on the files they check,
and fail on a broken copy: a set edited by hand stays in LoCoMo's format."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
pytestmark = pytest.mark.no_database


def checker(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}_check", DATA / name / "check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["multilingual", "support"])
def test_the_set_passes_its_checker(name: str) -> None:
    samples = json.loads((DATA / name / "chats.json").read_text(encoding="utf-8"))
    problems, stats = checker(name).check(samples)
    assert problems == []
    assert stats["turns"] > 0


@pytest.mark.parametrize("name", ["multilingual", "support"])
def test_a_broken_set_fails_its_checker(name: str) -> None:
    samples = json.loads((DATA / name / "chats.json").read_text(encoding="utf-8"))
    broken = copy.deepcopy(samples)
    first = broken[0]["conversation"]["session_1"][0]
    first["dia_id"] = "D9:99"
    problems, _ = checker(name).check(broken)
    assert any("dia_id" in p for p in problems)
