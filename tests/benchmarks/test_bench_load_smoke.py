"""bench_load runs end to end on a tiny load, against the real server in a subprocess: one
replica on SQLite, and two replicas on a PostgreSQL database of the run's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.bench_load import PG_ADMIN_URL, main

pytestmark = pytest.mark.slow
TINY = ["--clients", "2", "--model", "hash:64"]


def test_bench_load_runs(tmp_path: Path) -> None:
    argv = ["--people", "3", "--turns", "6", "--searches", "5", *TINY, "--out", str(tmp_path)]
    assert main(argv) == 0
    result = json.loads((tmp_path / "bench_load.json").read_text())
    operations = {row["operation"]: row for row in result["results"]}
    assert operations["store turn"]["requests"] == 18 and operations["store turn"]["errors"] == 0
    assert operations["build context"]["requests"] == 9
    assert operations["staff search"]["requests"] == 5
    assert result["index_catch_up_s"] >= 0 and result["peak_rss_mb"] > 0
    assert result["database"] == "sqlite" and result["replicas"] == 1
    assert result["failures"] == [] and result["broke"] == []
    assert result["cost"][0]["cpu_ms_per_request"] > 0
    assert (tmp_path / "bench_load.md").read_text().startswith("| operation |")


@pytest.mark.postgresql
def test_bench_load_runs_two_replicas_on_postgresql(tmp_path: Path) -> None:
    import psycopg

    argv = ["--people", "4", "--turns", "6", "--searches", "6", *TINY]
    argv += ["--database", "postgresql", "--replicas", "2", "--out", str(tmp_path)]
    assert main(argv) == 0
    result = json.loads((tmp_path / "bench_load.json").read_text())
    assert result["database"] == "postgresql" and result["replicas"] == 2
    assert result["failures"] == [] and result["broke"] == []
    assert all(row["errors"] == 0 for row in result["results"])
    replicas = result["replica_results"]
    assert sorted(r["indexer"] for r in replicas) == ["active", "standby"]
    assert [r["requests"] for r in replicas] == [21, 21]  # 24 turns, 12 contexts, 6 searches
    assert all(set(r["statuses"]) <= {"200", "201"} for r in replicas)
    assert result["cost"][0]["database_cpu_s"] is not None
    with psycopg.connect(PG_ADMIN_URL) as conn:  # the run's database is dropped
        name = result["database_name"]
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        assert found.fetchall() == []
