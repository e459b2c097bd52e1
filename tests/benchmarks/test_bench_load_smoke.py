"""bench_load runs end to end on a tiny load, against the real server in a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.bench_load import main

pytestmark = pytest.mark.slow


def test_bench_load_runs(tmp_path: Path) -> None:
    argv = [
        "--people",
        "3",
        "--turns",
        "6",
        "--clients",
        "2",
        "--searches",
        "5",
        "--model",
        "hash:64",
        "--out",
        str(tmp_path),
    ]
    assert main(argv) == 0
    result = json.loads((tmp_path / "bench_load.json").read_text())
    operations = {row["operation"]: row for row in result["results"]}
    assert operations["store turn"]["requests"] == 18 and operations["store turn"]["errors"] == 0
    assert operations["build context"]["requests"] == 9
    assert operations["staff search"]["requests"] == 5
    assert result["index_catch_up_s"] >= 0 and result["peak_rss_mb"] > 0
    assert (tmp_path / "bench_load.md").read_text().startswith("| operation |")
