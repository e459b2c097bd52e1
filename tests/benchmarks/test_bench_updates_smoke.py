"""Smoke test of benchmarks/bench_updates.py (facts that change, issue 26): two conversations
of each set, replayed through HTTP with the scripted model and the hash encoder, on the
suite's engine (MEMORY_TEST_BACKEND); and the checks of both updates.json files."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import bench_updates
from tests.backends import database_url_for
from tests.fakes import fake_factory

CHOSEN = ["mlu-01-carmen", "mlu-04-diego", "supu-03-kevin", "supu-09-ignacio"]


def test_bench_updates_smoke(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["--model", "fake-hash", "--threshold", "-1", "--conversations", ",".join(CHOSEN)]
    argv += ["--out", str(out), "--quiet"]
    url = database_url_for(tmp_path / "db")
    if url:
        argv += ["--database-url", url]
    report = bench_updates.main(argv, encoder_factory=fake_factory)
    assert report["database"] == ("postgresql" if url else "sqlite")
    for name in ("multilingual", "support", "all"):
        assert (
            (out / f"updates.{name}.md")
            .read_text(encoding="utf-8")
            .startswith("# Facts that change")
        )
        assert json.loads((out / f"updates.{name}.json").read_text(encoding="utf-8"))["all"]
    for name in ("multilingual", "support"):
        part = report["sets"][name]
        assert len(part["conversations"]) == 2
        assert part["update_targets_shown"]["shown"] == part["update_targets_shown"]["expected"] > 0
        validity = part["modes"]["validity"]["summary"]
        assert validity["changes"] >= 3 and validity["unchanged"] == 2
        for key in (*bench_updates.METRICS, *bench_updates.CONTROLS):
            assert validity[key] == 100.0, (name, key)
        # Without the update call's answer, every new value is added next to the old one:
        # the current one is there, and so is the stale one, in the context and in the store.
        baseline = part["modes"]["baseline"]["summary"]
        assert baseline["a"] == baseline["a_stored"] == 100.0
        assert baseline["b"] == baseline["b_notes"] == baseline["b_stored"] == 0.0
        assert baseline["d"] == 100.0
        stale = part["modes"]["baseline"]["changes"][0]
        assert any(
            bench_updates.names(f, ["Madrid", "Maple", "Miami", "Yaris"]) for f in stale["facts"]
        )
    assert report["all"]["validity"]["changes"] == sum(
        report["sets"][n]["modes"]["validity"]["summary"]["changes"] for n in report["sets"]
    )


# -- the data --------------------------------------------------------------------------------


@pytest.mark.no_database
@pytest.mark.parametrize("name", bench_updates.SETS)
def test_the_updates_set_passes_its_checks(name: str) -> None:
    samples = bench_updates.load(name)
    assert bench_updates.problems_of(samples) == []
    assert 8 <= len(samples) <= 12
    languages = {s["language"] for s in samples}
    assert {"es", "en", "es-en"} <= languages
    for sample in samples:
        assert sample["changes"] and sample["unchanged"]
        sessions = sample["sessions"]
        for change in sample["changes"]:
            # Each question's terms are in the annotated facts, old in the old session's and
            # new in the new one's; the time of the old-value question lies between them.
            old = [f["content"] for f in sessions[change["old_session"] - 1]["facts"]]
            new = [f["content"] for f in sessions[change["new_session"] - 1]["facts"]]
            assert any(bench_updates.names(f, change["old_terms"]) for f in old), change
            assert any(bench_updates.names(f, change["new_terms"]) for f in new), change
            assert not any(bench_updates.names(f, change["old_terms"]) for f in new), change
            old_start = bench_updates.moment(sessions[change["old_session"] - 1]["date_time"])
            new_start = bench_updates.moment(sessions[change["new_session"] - 1]["date_time"])
            assert old_start < bench_updates.moment(change["as_of"]) < new_start
        for control in sample["unchanged"]:
            said = [f["content"] for f in sessions[control["session"] - 1]["facts"]]
            assert any(bench_updates.names(f, control["terms"]) for f in said), control


def broken(name: str, change: Any) -> list[str]:
    samples = copy.deepcopy(bench_updates.load(name))
    change(samples)
    return bench_updates.problems_of(samples)


@pytest.mark.no_database
@pytest.mark.parametrize("name", bench_updates.SETS)
def test_a_broken_updates_set_fails_its_checks(name: str) -> None:
    def as_of_after(samples: list[dict[str, Any]]) -> None:
        samples[0]["changes"][0]["as_of"] = "2030-01-01T00:00:00Z"

    def sessions_swapped(samples: list[dict[str, Any]]) -> None:
        s = samples[0]["sessions"]
        s[0]["date_time"], s[1]["date_time"] = s[1]["date_time"], s[0]["date_time"]

    def term_missing(samples: list[dict[str, Any]]) -> None:
        samples[0]["changes"][0]["new_terms"] = ["Ulan Bator"]

    def no_supersession(samples: list[dict[str, Any]]) -> None:
        for session in samples[0]["sessions"]:
            for fact in session["facts"]:
                fact.pop("supersedes", None)

    def control_changes(samples: list[dict[str, Any]]) -> None:
        sample = samples[0]
        sample["unchanged"][0]["terms"] = sample["changes"][0]["old_terms"]

    assert any("as_of" in p for p in broken(name, as_of_after))
    assert any("increasing time" in p for p in broken(name, sessions_swapped))
    assert any("name the terms" in p for p in broken(name, term_missing))
    assert any("does not supersede" in p for p in broken(name, no_supersession))
    assert any("superseded" in p for p in broken(name, control_changes))
