"""What the store's safety costs on the hot path: storing a turn with and without the person's
lock (PostgreSQL: an advisory transaction lock, one more round trip; SQLite: nothing to take),
and a read through the connection pool with and without the check before lending (PostgreSQL).
Each pair runs interleaved, in rounds, on one store, so load on the machine hits both alike.

Run with:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_store.py --database postgresql \
        --turns 3000 --out benchmarks/results
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_store.py --database sqlite --out DIR
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from server.store import Store  # noqa: E402

PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
ROUND = 100  # operations of one variant before switching to the other


@contextlib.contextmanager
def opened(database: str, folder: Path) -> Iterator[Store]:
    """A fresh store: SQLite in `folder`, or a new PostgreSQL database dropped at the end."""
    if database == "sqlite":
        store = Store(folder / "memory.db", synchronous="NORMAL")
        try:
            yield store
        finally:
            store.close()
        return
    import psycopg

    name = f"benchstore_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        store = Store(database_url=PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}")
        try:
            yield store
        finally:
            store.close()
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def timed(operation: Callable[[int], Any], n: int) -> float:
    started = time.perf_counter()
    operation(n)
    return (time.perf_counter() - started) * 1000


def interleaved(
    variants: dict[str, tuple[Callable[[], None], Callable[[int], Any]]], total: int
) -> dict[str, list[float]]:
    """Milliseconds per operation of each variant: `total` each, ROUND at a time in turn.
    A variant is (switch to it, one operation)."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    n = 0
    while n < total:
        for name, (switch, operation) in variants.items():
            switch()
            for i in range(n, min(n + ROUND, total)):
                samples[name].append(timed(operation, i))
        n += ROUND
    return samples


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1], 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
    }


def run(database: str, turns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder, opened(database, Path(folder)) as store:
        db: Any = store._db
        lock = db.lock_person

        def insert(i: int) -> None:
            store.insert_message(
                agent="bench",
                phone=f"+1555000{i % 50:04d}",
                role="user",
                content=f"turn {i}: the order 48213 left from Lisbon",
                event_id=None,
                number=None,
                created_at=None,
            )

        results: dict[str, Any] = {}
        stored = interleaved(
            {
                "store a turn, with the person's lock": (
                    lambda: setattr(db, "lock_person", lock),
                    insert,
                ),
                "store a turn, without it": (
                    lambda: setattr(db, "lock_person", lambda *_: None),
                    insert,
                ),
            },
            turns,
        )
        db.lock_person = lock
        results.update({name: summary(values) for name, values in stored.items()})

        def read(i: int) -> None:
            store.recent_turns("bench", f"+1555000{i % 50:04d}", 20)

        if database == "postgresql":
            pool = db._pool
            check = pool._check
            reads = interleaved(
                {
                    "read recent turns, checked before lending": (
                        lambda: setattr(pool, "_check", check),
                        read,
                    ),
                    "read recent turns, unchecked": (lambda: setattr(pool, "_check", None), read),
                },
                turns,
            )
            pool._check = check
        else:
            reads = interleaved({"read recent turns": (lambda: None, read)}, turns)
        results.update({name: summary(values) for name, values in reads.items()})
        return results


def table(database: str, results: dict[str, Any]) -> str:
    lines = [
        f"| {database} | p50 ms | p95 ms | mean ms | n |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, row in results.items():
        lines.append(
            f"| {name} | {row['p50_ms']} | {row['p95_ms']} | {row['mean_ms']} | {row['n']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--turns", type=int, default=3000, help="operations per variant")
    parser.add_argument("--out", type=Path, help="folder for bench_store.<database>.json/.md")
    args = parser.parse_args()
    results = run(args.database, args.turns)
    text = table(args.database, results)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = args.out / f"bench_store.{args.database}"
        stem.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
        stem.with_suffix(".md").write_text(text + "\n")


if __name__ == "__main__":
    main()
