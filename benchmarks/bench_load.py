"""Load benchmark: the real server (uvicorn, subprocess) driven over HTTP on 127.0.0.1.

N people x M turns are stored from C concurrent clients; after every turn of a user, the
client builds that person's context, as an agent does before it answers. Then staff searches
run. Reports p50/p95/p99 latency and throughput of storing a turn, building a context and staff
search; the index lag over time; the server's peak memory; and the indexer's embed rate next to
the raw model's, measured in the same run (a ratio).

With --soak-memories SECONDS the clients instead add memories for that long (every fourth
one is read back and searched for), and every --sample-s seconds the server's RSS and the
LanceDB manifests on disk are sampled: does memory level off under steady memory writes?

Run with:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_load.py --people 1000 --turns 50 \
        --clients 4 --out benchmarks/results
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_load.py --soak-memories 900 \
        --clients 4 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import asyncio
import functools
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
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from server.config import DEFAULT_MODEL  # noqa: E402  (the server's default model)

ADMIN_KEY = "bench-admin-key-0123456789"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN_KEY}"}
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


WORDS = "dog night shift hospital Monday jacket refund blue order trip Lisbon sister".split()  # noqa: SIM905


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
    bar = tqdm(total=people * turns, desc="turns", unit="turn", file=sys.stderr)

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            person = queue.get_nowait()
            url = f"/v1/agents/{AGENT}/people/{phone_of(person)}"
            for turn in range(turns):
                role = "user" if turn % 2 == 0 else "assistant"
                text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30)))
                started = time.perf_counter()
                response = await client.post(
                    f"{url}/messages",
                    json={"role": role, "content": text, "event_id": f"e{person}-{turn}"},
                )
                store.ms.append((time.perf_counter() - started) * 1000)
                store.errors += response.status_code != 201
                bar.update()
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
    bar.close()
    return store, context, seconds


async def staff_searches(base: str, key: str, count: int, seed: int) -> Series:
    series = Series("staff search")
    rng = random.Random(seed)
    words = [
        "refund",
        "jacket",
        "night",
        "shift",
        "hospital",
        "trip",
        "Lisbon",
        "sister",
        "dog",
        "order",
        "blue",
    ]
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:
        for _ in range(count):
            query = " ".join(rng.sample(words, 3))
            started = time.perf_counter()
            response = await client.post("/v1/search", json={"query": query, "limit": 20})
            series.ms.append((time.perf_counter() - started) * 1000)
            series.errors += response.status_code != 200
    return series


class Watcher:
    """Samples the index lag and the server's memory every second, in a thread."""

    def __init__(self, base: str, pid: int) -> None:
        import threading

        self.base = base
        self.pid = pid
        self.lag: list[tuple[float, int]] = []
        self.peak_rss_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = time.monotonic()

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psutil

        process = psutil.Process(self.pid)
        while not self._stop.is_set():
            try:
                lag = httpx.get(f"{self.base}/health", timeout=5).json()["index_lag"]
                self.lag.append((round(time.monotonic() - self._started, 1), int(lag)))
                self.peak_rss_mb = max(self.peak_rss_mb, process.memory_info().rss / 2**20)
            except (httpx.HTTPError, psutil.Error):
                pass
            self._stop.wait(1.0)


def wait_for_index(base: str, limit_s: float = 1800) -> float:
    started = time.monotonic()
    while httpx.get(f"{base}/health", timeout=5).json()["index_lag"]:
        if time.monotonic() - started > limit_s:
            break
        time.sleep(0.5)
    return time.monotonic() - started


def indexer_rate(base: str) -> float:
    """Texts per second of embedding inside the server's indexer, from /metrics."""
    metrics = dict(
        line.split(" ", 1)
        for line in httpx.get(f"{base}/metrics", headers=ADMIN_HEADERS).text.splitlines()
        if line and not line.startswith("#") and "{" not in line
    )
    seconds = float(metrics["memory_indexer_embed_seconds_total"])
    return float(metrics["memory_indexer_embedded_total"]) / seconds if seconds else 0.0


def raw_rate(model_name: str, texts: list[str]) -> float:
    """Texts per second of the run's model alone, outside the server, at batch 64 on the same
    kind of text: e5's engine, or SentenceTransformer.encode."""
    from embeddings.e5 import E5Encoder, is_e5_model

    if is_e5_model(model_name):
        engine = E5Encoder(copies=1)
        encode = engine.encode  # stored texts are passages, as the indexer embeds them
    else:
        from sentence_transformers import SentenceTransformer

        from embeddings.encoder import resolve_model

        model = SentenceTransformer(resolve_model(model_name), device="cpu")
        encode = functools.partial(
            model.encode, batch_size=64, normalize_embeddings=True, show_progress_bar=False
        )
    encode(texts[:64])
    started = time.perf_counter()
    encode(texts)
    return len(texts) / (time.perf_counter() - started)


def sample_texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))) for _ in range(count)]


class Soak:
    """Memory writes for a fixed time; a thread samples the server's RSS and the manifests."""

    def __init__(self, pid: int, lance: Path, sample_s: float) -> None:
        import threading

        self.pid = pid
        self.lance = lance
        self.sample_s = sample_s
        self.writes = 0
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = time.monotonic()

    def __enter__(self) -> Soak:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        if time.monotonic() - self._started - self.samples[-1]["s"] >= 1.0:
            self._sample()  # the end, unless a sample was just taken

    def manifests(self) -> int:
        return sum(1 for _ in self.lance.glob("*.lance/_versions/*.manifest"))

    def _run(self) -> None:
        self._sample()
        while not self._stop.wait(self.sample_s):
            self._sample()

    def _sample(self) -> None:
        import psutil

        seconds = time.monotonic() - self._started
        last = self.samples[-1] if self.samples else {"s": 0.0, "writes": 0}
        span = seconds - last["s"]
        sample = {
            "s": round(seconds, 1),
            "writes": self.writes,
            "writes_per_s": round((self.writes - last["writes"]) / span, 1) if span else 0.0,
            "rss_mib": round(psutil.Process(self.pid).memory_info().rss / 2**20, 1),
            "manifests": self.manifests(),
            "open_files": psutil.Process(self.pid).num_fds(),
        }
        self.samples.append(sample)
        tqdm.write(
            f"{sample['s']:7.0f} s  {sample['writes']:7d} writes  {sample['writes_per_s']:6.1f}/s"
            f"  RSS {sample['rss_mib']:7.1f} MiB  {sample['manifests']:5d} manifests"
            f"  {sample['open_files']:5d} open files",
            file=sys.stderr,
        )

    def verdict(self) -> dict[str, Any]:
        """RSS growth over the last third of the run against the first two thirds: memory that
        levels off grows little at the end, memory that leaks grows at the same rate."""
        end = self.samples[-1]
        at = min(self.samples, key=lambda r: abs(r["s"] - end["s"] * 2 / 3))
        early = end["rss_mib"] - at["rss_mib"]
        rate = early / (end["s"] - at["s"]) * 60 if end["s"] > at["s"] else 0.0
        return {
            "rss_start_mib": self.samples[0]["rss_mib"],
            "rss_peak_mib": max(r["rss_mib"] for r in self.samples),
            "rss_end_mib": end["rss_mib"],
            "last_third_growth_mib": round(early, 1),
            "last_third_mib_per_min": round(rate, 2),
            "levelled": early <= max(25.0, 0.05 * at["rss_mib"]),
        }


async def soak_memories(
    base: str, key: str, seconds: float, clients: int, seed: int, soak: Soak
) -> list[Series]:
    add, get, find = Series("add memory"), Series("get memory"), Series("search memories")
    url = f"/v1/agents/{AGENT}/memories"
    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    bar = tqdm(desc="memories", unit="write", file=sys.stderr)

    async def timed(series: Series, call: Any, ok: int) -> Any:
        started = time.perf_counter()
        response = await call
        series.ms.append((time.perf_counter() - started) * 1000)
        series.errors += response.status_code != ok
        return response

    async def worker(client: httpx.AsyncClient) -> None:
        while time.monotonic() < deadline:
            phone = phone_of(rng.randrange(1000))
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20)))
            body = {"content": f"{text} #{soak.writes}", "phone": phone}
            made = await timed(add, client.post(url, json=body), 201)
            soak.writes += 1
            bar.update()
            if soak.writes % 4 == 0 and made.status_code == 201:
                await timed(get, client.get(f"{url}/{made.json()['id']}"), 200)
                query = {"query": text, "phone": phone, "threshold": 0.0, "limit": 5}
                await timed(find, client.post(f"{url}/search", json=query), 200)

    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=60) as c:
        await asyncio.gather(*(worker(c) for _ in range(clients)))
    bar.close()
    return [add, get, find]


def render_soak(samples: list[dict[str, Any]]) -> str:
    lines = [
        "| time s | writes | writes/s | RSS MiB | manifests | open files |",
        "|" + " --- |" * 6,
    ]
    for r in samples:
        lines.append(
            f"| {r['s']:.0f} | {r['writes']} | {r['writes_per_s']} | {r['rss_mib']} |"
            f" {r['manifests']} | {r.get('open_files', '')} |"
        )
    return "\n".join(lines)


def run_soak(args: argparse.Namespace, argv: list[str] | None) -> int:
    data_dir = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    port = free_port()
    server = start_server(data_dir, port, {"MEMORY_EMBEDDING_MODEL": args.model})
    try:
        base = f"http://127.0.0.1:{port}"
        scope = {"scope": f"agent:{AGENT}"}
        made = httpx.post(f"{base}/v1/keys", json=scope, headers=ADMIN_HEADERS)
        with Soak(server.pid, data_dir / "lance", args.sample_s) as soak:
            series = asyncio.run(
                soak_memories(
                    base, made.json()["key"], args.soak_memories, args.clients, args.seed, soak
                )
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
        if not args.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)

    seconds = soak.samples[-1]["s"]
    verdict = soak.verdict()
    rows = [s.row(seconds) for s in series]
    result = {
        "command": "benchmarks/bench_load.py " + " ".join(argv or sys.argv[1:]),
        "model": args.model,
        "clients": args.clients,
        "seconds": seconds,
        "writes": soak.writes,
        **verdict,
        "samples": soak.samples,
        "cpus": os.cpu_count(),
        "results": rows,
    }
    table = (
        render_soak(soak.samples)
        + "\n\n"
        + render(rows)
        + f"\n\n{soak.writes} memories from {args.clients} clients in {seconds:.0f} s"
        f" ({args.model}); RSS {verdict['rss_start_mib']:.0f} MiB at the start, peak"
        f" {verdict['rss_peak_mib']:.0f}, end {verdict['rss_end_mib']:.0f}; last third"
        f" {verdict['last_third_growth_mib']:+.0f} MiB ({verdict['last_third_mib_per_min']:+.1f}"
        f" MiB/min): {'levelled' if verdict['levelled'] else 'still growing'}."
    )
    write_out(args.out, "bench_load.soak", result, table)
    return 0


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
    parser.add_argument("--searches", type=int, default=200, help="staff searches after ingest")
    parser.add_argument(
        "--model", default=DEFAULT_MODEL, help="MEMORY_EMBEDDING_MODEL (hash:64: no model)"
    )
    parser.add_argument("--out", type=Path, help="folder for bench_load.json and bench_load.md")
    parser.add_argument("--keep-data", action="store_true", help="keep the server's data folder")
    parser.add_argument(
        "--soak-memories",
        type=float,
        metavar="SECONDS",
        help="instead of turns, add memories for this long and sample the server's memory",
    )
    parser.add_argument("--sample-s", type=float, default=30.0, help="soak: seconds per sample")
    args = parser.parse_args(argv)
    if args.soak_memories:
        return run_soak(args, argv)

    data_dir = Path(tempfile.mkdtemp(prefix="bench-load-"))
    port = free_port()
    server = start_server(data_dir, port, {"MEMORY_EMBEDDING_MODEL": args.model})
    try:
        base = f"http://127.0.0.1:{port}"
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        made = httpx.post(f"{base}/v1/keys", json={"scope": f"agent:{AGENT}"}, headers=admin)
        staff = httpx.post(f"{base}/v1/keys", json={"scope": "staff"}, headers=admin)
        with Watcher(base, server.pid) as watcher:
            store, context, seconds = asyncio.run(
                drive(base, made.json()["key"], args.people, args.turns, args.clients, args.seed)
            )
            health = httpx.get(f"{base}/health").json()
            catch_up_s = wait_for_index(base)
            search = asyncio.run(
                staff_searches(base, staff.json()["key"], args.searches, args.seed)
            )
            search_seconds = sum(search.ms) / 1000
        indexer_per_s = indexer_rate(base)
    finally:
        server.terminate()
        server.wait(timeout=30)
        if not args.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)

    hashing = args.model.startswith("hash:")
    raw_per_s = 0.0 if hashing else raw_rate(args.model, sample_texts(1000, args.seed))
    rows = [store.row(seconds), context.row(seconds), search.row(search_seconds)]
    result = {
        "command": "benchmarks/bench_load.py " + " ".join(argv or sys.argv[1:]),
        "people": args.people,
        "turns": args.turns,
        "clients": args.clients,
        "seconds": round(seconds, 1),
        "index_lag_at_end_of_ingest": health["index_lag"],
        "index_catch_up_s": round(catch_up_s, 1),
        "index_lag_over_time": watcher.lag,
        "peak_rss_mb": round(watcher.peak_rss_mb, 1),
        "indexer_embed_per_s": round(indexer_per_s, 1),
        "raw_encode_per_s": round(raw_per_s, 1),
        "indexer_to_raw_ratio": round(indexer_per_s / raw_per_s, 3) if raw_per_s else None,
        "cpus": os.cpu_count(),
        "results": rows,
    }
    table = render(rows) + (
        f"\n\n{args.people} people x {args.turns} turns, {args.clients} clients, {seconds:.1f} s;"
        f" index lag at the end of ingest {health['index_lag']}, caught up {catch_up_s:.0f} s"
        f" later; peak server memory {watcher.peak_rss_mb:.0f} MB; indexer"
        f" {indexer_per_s:.0f} texts/s vs raw encode {raw_per_s:.0f} texts/s"
        f" (ratio {result['indexer_to_raw_ratio']})."
    )
    write_out(args.out, "bench_load", result, table)
    return 0


def write_out(out: Path | None, stem: str, result: dict[str, Any], table: str) -> None:
    """Print the table; with --out, write it and the JSON there."""
    print(table)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{stem}.json").write_text(json.dumps(result, indent=2))
        (out / f"{stem}.md").write_text(table + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
