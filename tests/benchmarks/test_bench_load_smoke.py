"""bench_load runs end to end on a tiny load, against the real server in a subprocess: one
replica on SQLite, and two replicas on a PostgreSQL database of the run's own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


BURSTS = ["--soak-bursts", "1", "--gap-s", "0.5", "--burst-requests", "10", *TINY]


def _assert_bursts_sampled(result: dict[str, Any], engine: str, replicas: int) -> None:
    bursts = result["bursts"]
    assert bursts >= 1 and result["database"] == engine and result["replicas"] == replicas
    samples = result["samples"]
    assert [s["phase"] for s in samples] == ["start"] + ["burst", "gap"] * bursts
    each_twice = [n for n in range(1, bursts + 1) for _ in ("burst", "gap")]
    assert [s["burst"] for s in samples] == [0, *each_twice]
    for sample in samples:
        assert [r["replica"] for r in sample["replicas"]] == list(range(1, replicas + 1))
        for reading in sample["replicas"]:
            assert reading["fds"] > 0 and reading["threads"] > 0 and reading["rss_mib"] > 0
            assert reading["pool"]["engine"] == engine and reading["pool"]["size"] == 8
            assert 0 <= reading["pool_open"] <= 8
    # 20 memories to search, then 10 requests a burst, every one 2xx
    assert result["requests"] == samples[-1]["requests"] == 20 + 10 * bursts
    assert result["non_2xx"] == 0 and result["failures"] == [] and result["broke"] == []
    assert all(row["errors"] == 0 for row in result["results"])


def test_bench_load_bursts_sample_every_burst_and_gap(tmp_path: Path) -> None:
    assert main([*BURSTS, "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bench_load.bursts.sqlite.json").read_text())
    _assert_bursts_sampled(result, "sqlite", 1)
    assert all(s["pg_sessions"] is None for s in result["samples"])
    table = (tmp_path / "bench_load.bursts.sqlite.md").read_text()
    assert table.startswith("| burst | time s | replica | open files |")


@pytest.mark.postgresql
def test_bench_load_bursts_on_two_postgresql_replicas(tmp_path: Path) -> None:
    import psycopg

    argv = [*BURSTS, "--database", "postgresql", "--replicas", "2", "--out", str(tmp_path)]
    assert main(argv) == 0
    result = json.loads((tmp_path / "bench_load.bursts.postgresql-2.json").read_text())
    _assert_bursts_sampled(result, "postgresql", 2)
    for sample in result["samples"]:  # each replica's connections are among the sessions
        connections = [r["pg_connections"] for r in sample["replicas"]]
        # (read one after the other, not at one instant: just after a burst a replica's pool
        # may open or close a connection between the two readings, so no exact sum)
        assert all(n >= 1 for n in connections) and sample["pg_sessions"] >= max(connections)
    with psycopg.connect(PG_ADMIN_URL) as conn:  # the run's database is dropped
        name = result["database_name"]
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        assert found.fetchall() == []
