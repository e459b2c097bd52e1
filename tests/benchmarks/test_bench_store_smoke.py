"""Smoke test of benchmarks/bench_store.py on the pass's own database engine."""

from __future__ import annotations

from benchmarks import bench_store
from tests.backends import on_postgres


def test_bench_store_smoke() -> None:
    database = "postgresql" if on_postgres() else "sqlite"
    results = bench_store.run(database, 30)
    names = ["store a turn, with the person's lock", "store a turn, without it"]
    names += (
        ["read recent turns, checked before lending", "read recent turns, unchecked"]
        if on_postgres()
        else ["read recent turns"]
    )
    assert list(results) == names
    assert all(row["n"] == 30 and row["p50_ms"] > 0 for row in results.values())
    assert database in bench_store.table(database, results)
