"""Load benchmark: the real server (uvicorn, subprocess) driven over HTTP on 127.0.0.1.

N people x M turns are stored from C concurrent clients; after every turn of a user, the
client builds that person's context, as an agent does before it answers. Reports p50/p95/p99
latency and throughput of storing a turn and of building a context, and the index lag.

Run with:
    .venv/bin/python benchmarks/bench_load.py --people 1000 --turns 50 --clients 8 \
        --out benchmarks/results
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
ADMIN_KEY = "bench-admin-key-0123456789"
AGENT = "bench-agent"


@dataclass
class Series:
    """Latencies of one kind of request, in milliseconds."""

    name: str
    ms: list[float] = field(default_factory=list)
    errors: int = 0

    def row(self, seconds: float) -> dict[str, Any]:
        ordered = sorted(self.ms)

        def pct(p: float) -> float:
            if not ordered:
                return float("nan")
            return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

        return {
            "operation": self.name,
            "requests": len(self.ms),
            "errors": self.errors,
            "p50_ms": round(pct(50), 2),
            "p95_ms": round(pct(95), 2),
            "p99_ms": round(pct(99), 2),
            "mean_ms": round(statistics.fmean(ordered), 2) if ordered else float("nan"),
            "per_s": round(len(self.ms) / seconds, 1) if seconds else 0.0,
        }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(data_dir: Path, port: int, extra_env: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "MEMORY_DATA_DIR": str(data_dir),
        "MEMORY_PORT": str(port),
        "MEMORY_ADMIN_KEY": ADMIN_KEY,
        "MEMORY_LOG_LEVEL": "warning",
        "HF_HUB_OFFLINE": "1",
        **extra_env,
    }
    process = subprocess.Popen([sys.executable, "-m", "server", "serve"], env=env, cwd=ROOT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.2)
        if process.poll() is not None:
            raise SystemExit(f"server exited with {process.returncode}")
    process.kill()
    raise SystemExit("server did not start within 120 s")


def phone_of(n: int) -> str:
    return f"+1555{n:07d}"


async def drive(
    base: str, key: str, people: int, turns: int, clients: int, seed: int
) -> tuple[Series, Series, float]:
    store, context = Series("store turn"), Series("build context")
    queue: asyncio.Queue[int] = asyncio.Queue()
    for person in range(people):
        queue.put_nowait(person)
    rng = random.Random(seed)
    words = [
        "dog",
        "night",
        "shift",
        "hospital",
        "Monday",
        "jacket",
        "refund",
        "blue",
        "order",
        "trip",
        "Lisbon",
        "sister",
    ]

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            person = queue.get_nowait()
            url = f"/v1/agents/{AGENT}/people/{phone_of(person)}"
            for turn in range(turns):
                role = "user" if turn % 2 == 0 else "assistant"
                text = " ".join(rng.choice(words) for _ in range(rng.randint(5, 30)))
                started = time.perf_counter()
                response = await client.post(
                    f"{url}/messages",
                    json={"role": role, "content": text, "event_id": f"e{person}-{turn}"},
                )
                store.ms.append((time.perf_counter() - started) * 1000)
                store.errors += response.status_code != 201
                if role == "user":
                    started = time.perf_counter()
                    response = await client.get(f"{url}/context")
                    context.ms.append((time.perf_counter() - started) * 1000)
                    context.errors += response.status_code != 200

    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=60) as c:
        started = time.perf_counter()
        await asyncio.gather(*(worker(c) for _ in range(clients)))
        seconds = time.perf_counter() - started
    return store, context, seconds


def render(rows: list[dict[str, Any]]) -> str:
    head = "| operation | requests | errors | p50 ms | p95 ms | p99 ms | mean ms | per s |"
    lines = [head, "|" + " --- |" * 8]
    for r in rows:
        lines.append(
            f"| {r['operation']} | {r['requests']} | {r['errors']} | {r['p50_ms']} | "
            f"{r['p95_ms']} | {r['p99_ms']} | {r['mean_ms']} | {r['per_s']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--people", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, help="folder for bench_load.json and bench_load.md")
    parser.add_argument("--keep-data", action="store_true", help="keep the server's data folder")
    args = parser.parse_args(argv)

    data_dir = Path(tempfile.mkdtemp(prefix="bench-load-"))
    port = free_port()
    server = start_server(data_dir, port, {})
    try:
        base = f"http://127.0.0.1:{port}"
        made = httpx.post(
            f"{base}/v1/keys",
            json={"scope": f"agent:{AGENT}"},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        ).json()
        store, context, seconds = asyncio.run(
            drive(base, made["key"], args.people, args.turns, args.clients, args.seed)
        )
        health = httpx.get(f"{base}/health").json()
    finally:
        server.terminate()
        server.wait(timeout=30)
        if not args.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)

    rows = [store.row(seconds), context.row(seconds)]
    result = {
        "command": "benchmarks/bench_load.py " + " ".join(argv or sys.argv[1:]),
        "people": args.people,
        "turns": args.turns,
        "clients": args.clients,
        "seconds": round(seconds, 1),
        "index_lag_at_end": health["index_lag"],
        "cpus": os.cpu_count(),
        "results": rows,
    }
    table = render(rows)
    print(table)
    print(f"\n{args.people} people x {args.turns} turns, {args.clients} clients, {seconds:.1f} s")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_load.json").write_text(json.dumps(result, indent=2))
        (args.out / "bench_load.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
