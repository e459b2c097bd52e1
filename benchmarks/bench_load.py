"""Load benchmark: the real server (uvicorn, subprocesses) driven over HTTP on 127.0.0.1.

N people x M turns are stored from C concurrent clients; after every turn of a user, the
client builds that person's context, as an agent does before it answers. Then staff searches
run. Reports p50/p95/p99 latency and throughput of storing a turn, building a context and staff
search; the CPU a request costs (the servers', and on PostgreSQL the database's); the index lag
over time; the server's peak memory; the indexer's embed rate next to the raw model's, measured
in the same run (a ratio); and every answer that was not a success, by replica.

--database postgresql keeps the server's state in a fresh database on the local PostgreSQL
(dropped at the end); --replicas N starts N servers on one database and one vector folder, and
the clients spread their requests over them round-robin, request by request.

With --soak-memories SECONDS the clients instead add memories for that long (every fourth
one is read back and searched for), and every --sample-s seconds the server's RSS, the memory
it allocated (its anonymous resident memory: RSS without the pages of the libraries it runs,
which grow the first time a code path runs) and the LanceDB manifests on disk are sampled: does
memory level off under steady memory writes?

With --soak-bursts SECONDS the clients instead send bursts of --burst-requests requests
(--burst-clients at a time: contexts, message lists, turns, /health, memory searches), each
followed by --gap-s idle seconds, longer than the server keeps an idle worker thread; after
every burst and at the end of every gap, each replica's open files, threads, RSS, connections
to PostgreSQL and read pool (/health) are sampled, and the database's sessions: do they stay
flat from burst to burst, or does each burst after a pause open new connections?

Run with:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_load.py --people 1000 --turns 50 \
        --clients 4 --out benchmarks/results
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_load.py --people 100 --turns 40 \
        --clients 4 --searches 100 --database postgresql --replicas 2 --out DIR
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_load.py --soak-memories 900 \
        --clients 4 --out benchmarks/results
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_load.py --soak-bursts 600 \
        --database postgresql --out benchmarks/results
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import json
import os
import random
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from server.cli import NEW_DATABASE  # noqa: E402
from server.config import DEFAULT_MODEL  # noqa: E402  (the server's default model)

ADMIN_KEY = "bench-admin-key-0123456789"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN_KEY}"}
AGENT = "bench-agent"
PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
# What the benchmark sets for each replica: a shell's own values must not leak in.
DECIDED = (
    "MEMORY_DATA_DIR",
    "MEMORY_DATABASE_URL",
    "MEMORY_LANCE_URI",
    "MEMORY_LANCE_STORAGE_OPTIONS",
    "MEMORY_PORT",
)
LOG_TAIL = 20  # lines of a replica's log printed at the end


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


def free_ports(count: int) -> list[int]:
    """Ports free now, all different (each socket is held until every one is chosen)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def free_port() -> int:
    return free_ports(1)[0]


def start_server(data_dir: Path, port: int, extra_env: dict[str, str]) -> subprocess.Popen[bytes]:
    """One server on `data_dir`, ready (bench_vector's; this benchmark starts a Cluster)."""
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


@dataclass
class Replica:
    """One `memory-server serve` process of the run; its output goes to `log`."""

    number: int
    port: int
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    log_lines: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def launch(self) -> None:
        env = {name: value for name, value in os.environ.items() if name not in DECIDED}
        env.update(
            {
                "MEMORY_PORT": str(self.port),
                "MEMORY_ADMIN_KEY": ADMIN_KEY,
                "MEMORY_LOG_LEVEL": "warning",
                "HF_HUB_OFFLINE": "1",
                **self.env,
            }
        )
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "server", "serve"],
                env=env,
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, limit_s: float = 120) -> None:
        """Until /health answers 200 with status ok: the model loaded, the database migrated."""
        assert self.process is not None
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(
                    f"replica {self.number} exited with {self.process.returncode} at start"
                )
            with contextlib.suppress(httpx.HTTPError, ValueError):
                answer = httpx.get(f"{self.base}/health", timeout=1)
                if answer.status_code == 200 and answer.json()["status"] == "ok":
                    return
            time.sleep(0.2)
        raise SystemExit(f"replica {self.number} was not ready within {limit_s:.0f} s")

    def health(self) -> dict[str, Any]:
        body: dict[str, Any] = httpx.get(f"{self.base}/health", timeout=5).json()
        return body

    def terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()

    def wait_stopped(self) -> None:
        if self.process is None:
            return
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)

    def read_log(self) -> None:
        with contextlib.suppress(OSError):
            self.log_lines = [
                line
                for line in self.log.read_text(errors="replace").splitlines()
                # the serve command says which folder it serves (and that it made the run's
                # new database): that is not a problem
                if not line.startswith(("memory-server: data folder ", NEW_DATABASE))
            ]


class Database:
    """A fresh PostgreSQL database for one run, made next to `admin_url`'s and dropped after."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.name = f"bench_load_{os.getpid()}_{secrets.token_hex(2)}"
        self.url = urlsplit(admin_url)._replace(path=f"/{self.name}").geturl()
        self._sessions: Any = None  # the connection that lists the database's sessions

    def create(self) -> None:
        self._admin(f"CREATE DATABASE {self.name}")

    def drop(self) -> None:
        if self._sessions is not None:
            self._sessions.close()
        self._admin(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")

    def session_pids(self) -> list[int]:
        """Process ids of the database's sessions now (the servers' connections)."""
        sql = "SELECT pid FROM pg_stat_activity WHERE datname = %s"
        rows = self._watch().execute(sql, (self.name,)).fetchall()
        return [int(row[0]) for row in rows]

    def client_sessions(self) -> int:
        """The database's client sessions now: the servers' connections (not autovacuum's
        workers, nor this benchmark's own, which is on the admin database anyway)."""
        sql = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        row = self._watch().execute(sql, (self.name,)).fetchone()
        return int(row[0])

    def _watch(self) -> Any:
        import psycopg

        if self._sessions is None:
            self._sessions = psycopg.connect(self.admin_url, autocommit=True)
        return self._sessions

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql)


class Cluster:
    """The run's replicas on a fresh data folder (and, on PostgreSQL, a fresh database); at
    the end, also on failure or Ctrl-C, every replica is stopped and both are removed.

    On SQLite every replica serves the one data folder (one database file, one vector folder,
    as the live replica tests run them). On PostgreSQL each replica has a data folder of its
    own, as on separate machines, and they share the vector folder through MEMORY_LANCE_URI."""

    def __init__(
        self, replicas: int, database: str, model: str, pg_admin_url: str, keep: bool
    ) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="bench-load-"))
        self.lance = self.root / "lance"
        self.keep = keep
        self.database = Database(pg_admin_url) if database == "postgresql" else None
        self.replicas = [
            Replica(number, port, self._env(number, model), self.root / f"replica-{number}.log")
            for number, port in enumerate(free_ports(replicas), start=1)
        ]

    def _env(self, number: int, model: str) -> dict[str, str]:
        if self.database is None:
            return {"MEMORY_DATA_DIR": str(self.root), "MEMORY_EMBEDDING_MODEL": model}
        return {
            "MEMORY_DATA_DIR": str(self.root / f"replica-{number}"),
            "MEMORY_LANCE_URI": str(self.lance),
            "MEMORY_DATABASE_URL": self.database.url,
            "MEMORY_EMBEDDING_MODEL": model,
        }

    def __enter__(self) -> Cluster:
        try:
            if self.database is not None:
                self.database.create()
            first, *rest = self.replicas
            first.launch()  # alone first: it makes the schema of the fresh database or folder
            first.wait_ready()
            for replica in rest:
                replica.launch()
            for replica in rest:
                replica.wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        for replica in self.replicas:
            replica.terminate()
        for replica in self.replicas:
            replica.wait_stopped()
            replica.read_log()
            if replica.log_lines:
                tail = replica.log_lines[-LOG_TAIL:]
                prefix = f"[replica {replica.number}] "
                print("\n".join(prefix + line for line in tail), file=sys.stderr)
        if self.keep:
            where = f" and database {self.database.url}" if self.database else ""
            print(f"kept the data in {self.root}{where}", file=sys.stderr)
            return
        shutil.rmtree(self.root, ignore_errors=True)
        if self.database is not None:
            try:
                self.database.drop()
            except Exception as exc:  # (say so, rather than hide why the run ended)
                print(f"could not drop {self.database.name}: {exc}", file=sys.stderr)

    @property
    def engine(self) -> str:
        return "postgresql" if self.database else "sqlite"

    def make_key(self, scope: str) -> str:
        made = httpx.post(
            f"{self.replicas[0].base}/v1/keys", json={"scope": scope}, headers=ADMIN_HEADERS
        )
        if made.status_code != 201:
            raise SystemExit(f"could not make a {scope} key: {made.status_code} {made.text}")
        return str(made.json()["key"])

    def roles(self) -> dict[int, str]:
        """Each replica's indexer role (active or standby; unreachable: its error)."""
        roles = {}
        for replica in self.replicas:
            try:
                roles[replica.number] = str(replica.health()["indexer"])
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                roles[replica.number] = type(exc).__name__
        return roles

    def settle_roles(self, limit_s: float = 10) -> dict[int, str]:
        """The roles once exactly one replica runs the indexer (or as they are after limit_s)."""
        deadline = time.monotonic() + limit_s
        while list((roles := self.roles()).values()).count("active") != 1:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        return roles

    def index_lag(self) -> int | None:
        """The outbox's size, from the first replica that answers (None: none does). The
        outbox is in the database, so every replica, active or standby, says the same."""
        for replica in self.replicas:
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                return int(replica.health()["index_lag"])
        return None

    def wait_for_index(self, limit_s: float = 1800) -> float:
        started = time.monotonic()
        while (lag := self.index_lag()) != 0:
            if lag is None:
                raise SystemExit("no replica answers /health")
            if time.monotonic() - started > limit_s:
                break
            time.sleep(0.5)
        return time.monotonic() - started

    def indexer_rate(self) -> float:
        """Texts per second of embedding inside the indexers, from every replica's /metrics
        (the lease may have moved during the run)."""
        embedded = seconds = 0.0
        for replica in self.replicas:
            text = httpx.get(f"{replica.base}/metrics", headers=ADMIN_HEADERS).text
            metrics = dict(
                line.split(" ", 1)
                for line in text.splitlines()
                if line and not line.startswith("#") and "{" not in line
            )
            embedded += float(metrics["memory_indexer_embedded_total"])
            seconds += float(metrics["memory_indexer_embed_seconds_total"])
        return embedded / seconds if seconds else 0.0


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """A SIGTERM (`kill`, a CI timeout) unwinds like Ctrl-C does, so that the replicas stop
    and the database is dropped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def leave(signum: int, _: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, leave)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


Answers = Counter[tuple[int, str, str]]  # (replica, operation, status) -> how many


class Balancer:
    """Spreads requests over the replicas round-robin, request by request, with no stickiness:
    one replica may store a person's turn and the next build their context. Counts every
    answer by replica, operation and status (a transport error by its class name)."""

    def __init__(
        self, replicas: list[Replica], key: str, answers: Answers, connections: int = 100
    ) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        limits = httpx.Limits(max_connections=connections)
        self._clients = [
            httpx.AsyncClient(base_url=r.base, headers=headers, limits=limits, timeout=60)
            for r in replicas
        ]
        self._numbers = [r.number for r in replicas]
        self._turns = itertools.cycle(range(len(replicas)))
        self.answers = answers

    async def __aenter__(self) -> Balancer:
        return self

    async def __aexit__(self, *_: object) -> None:
        for client in self._clients:
            await client.aclose()

    async def send(
        self, series: Series, ok: int, method: str, url: str, **kwargs: Any
    ) -> httpx.Response | None:
        """The request, timed into `series` (an answer other than `ok` is an error there)."""
        turn = next(self._turns)
        response: httpx.Response | None
        started = time.perf_counter()
        try:
            response = await self._clients[turn].request(method, url, **kwargs)
            status = str(response.status_code)
        except httpx.HTTPError as exc:
            response, status = None, type(exc).__name__
        series.ms.append((time.perf_counter() - started) * 1000)
        series.errors += status != str(ok)
        self.answers[(self._numbers[turn], series.name, status)] += 1
        return response


def phone_of(n: int) -> str:
    return f"+1555{n:07d}"


async def drive(
    cluster: Cluster, key: str, answers: Answers, args: argparse.Namespace
) -> tuple[Series, Series, float]:
    store, context = Series("store turn"), Series("build context")
    queue: asyncio.Queue[int] = asyncio.Queue()
    for person in range(args.people):
        queue.put_nowait(person)
    rng = random.Random(args.seed)
    bar = tqdm(total=args.people * args.turns, desc="turns", unit="turn", file=sys.stderr)

    async def worker(balancer: Balancer) -> None:
        while not queue.empty():
            person = queue.get_nowait()
            url = f"/v1/agents/{AGENT}/people/{phone_of(person)}"
            for turn in range(args.turns):
                role = "user" if turn % 2 == 0 else "assistant"
                text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30)))
                body = {"role": role, "content": text, "event_id": f"e{person}-{turn}"}
                await balancer.send(store, 201, "POST", f"{url}/messages", json=body)
                bar.update()
                if role == "user":
                    await balancer.send(context, 200, "GET", f"{url}/context")

    async with Balancer(cluster.replicas, key, answers, args.clients) as balancer:
        started = time.perf_counter()
        await asyncio.gather(*(worker(balancer) for _ in range(args.clients)))
        seconds = time.perf_counter() - started
    bar.close()
    return store, context, seconds


async def staff_searches(
    cluster: Cluster, key: str, answers: Answers, count: int, seed: int
) -> Series:
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
    async with Balancer(cluster.replicas, key, answers) as balancer:
        for _ in range(count):
            query = " ".join(rng.sample(words, 3))
            body = {"query": query, "limit": 20}
            await balancer.send(series, 200, "POST", "/v1/search", json=body)
    return series


class CpuMeter:
    """CPU seconds used so far by the replicas and, on PostgreSQL, by the database's sessions
    (the work SQLite does inside the server). A process is read whenever the meter is, and
    keeps its last reading once it is gone; a session that lives less than the watcher's
    second between two readings is missed (a standby's lease attempts)."""

    def __init__(self, cluster: Cluster) -> None:
        import psutil

        self._servers = [psutil.Process(r.pid) for r in cluster.replicas]
        self._database = cluster.database
        self._seen: dict[Any, float] = {}  # psutil.Process (pid and start time) -> seconds
        self._sessions: set[Any] = set()
        self._lock = threading.Lock()

    def reading(self) -> tuple[float, float]:
        """(server CPU s, database CPU s) so far, read now."""
        import psutil

        with self._lock:
            for process in self._servers:
                self._read(process)
            if self._database is not None:
                with contextlib.suppress(Exception):  # (a missed reading, not a failed run)
                    for pid in self._database.session_pids():
                        with contextlib.suppress(psutil.Error):
                            self._sessions.add(psutil.Process(pid))
                for process in self._sessions:
                    self._read(process)
            server = sum(self._seen.get(p, 0.0) for p in self._servers)
            database = sum(self._seen.get(p, 0.0) for p in self._sessions)
        return server, database

    def _read(self, process: Any) -> None:
        import psutil

        with contextlib.suppress(psutil.Error):
            if process.is_running():  # (not another process that took its pid)
                times = process.cpu_times()
                self._seen[process] = times.user + times.system


@dataclass
class Usage:
    """CPU readings at one moment: the servers', the database's, this benchmark's, the
    machine's (all its cores busy, whoever ran)."""

    server_s: float
    database_s: float
    bench_s: float
    machine_s: float
    at: float

    @classmethod
    def now(cls, meter: CpuMeter) -> Usage:
        import psutil

        server, database = meter.reading()
        times = psutil.cpu_times()
        busy = sum(times) - times.idle - getattr(times, "iowait", 0.0)
        return cls(server, database, time.process_time(), busy, time.monotonic())


def cost_row(phase: str, requests: int, start: Usage, end: Usage, postgres: bool) -> dict[str, Any]:
    """What a phase cost: CPU seconds by whom, and CPU ms per request (servers + database)."""
    server, database = end.server_s - start.server_s, end.database_s - start.database_s
    return {
        "phase": phase,
        "requests": requests,
        "seconds": round(end.at - start.at, 1),
        "server_cpu_s": round(server, 2),
        "database_cpu_s": round(database, 2) if postgres else None,
        "bench_cpu_s": round(end.bench_s - start.bench_s, 2),
        "machine_cpu_s": round(end.machine_s - start.machine_s, 2),
        "cpu_ms_per_request": round((server + database) / requests * 1000, 2) if requests else None,
    }


class Watcher:
    """Samples every second, in a thread, the index lag, every replica's memory and the CPU
    meter (so that short-lived database sessions are read while they live)."""

    def __init__(self, cluster: Cluster, meter: CpuMeter) -> None:
        self.cluster = cluster
        self.meter = meter
        self.lag: list[tuple[float, int]] = []
        self.peak_rss_mb = 0.0  # all replicas together (one replica: the server's)
        self.peak_rss_by_replica: dict[int, float] = {r.number: 0.0 for r in cluster.replicas}
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

        processes = {r.number: psutil.Process(r.pid) for r in self.cluster.replicas}
        while not self._stop.is_set():
            lag = self.cluster.index_lag()
            if lag is not None:
                self.lag.append((round(time.monotonic() - self._started, 1), lag))
            total = 0.0
            for number, process in processes.items():
                with contextlib.suppress(psutil.Error):
                    rss = process.memory_info().rss / 2**20
                    self.peak_rss_by_replica[number] = max(self.peak_rss_by_replica[number], rss)
                    total += rss
            self.peak_rss_mb = max(self.peak_rss_mb, total)
            self.meter.reading()
            self._stop.wait(1.0)


def raw_rate(model_name: str, texts: list[str]) -> float:
    """Texts per second of the run's model alone, outside the server, at batch 64 on the same
    kind of text: e5 as the server runs it (ONNX Runtime int8, or the engine by its name), or
    SentenceTransformer.encode."""
    from embeddings.e5 import is_e5_model
    from server.app import default_encoder_factory
    from server.config import Settings

    if is_e5_model(model_name):
        e5 = default_encoder_factory(Settings(embedding_model=model_name))(model_name)
        encode = e5.encode_bulk  # type: ignore[attr-defined]  # passages, as the indexer embeds them
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


def allocated_mib(pid: int) -> float | None:
    """The process's anonymous resident memory, MiB (Linux; None elsewhere)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Anonymous:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


class Soak:
    """Memory writes for a fixed time; a thread samples the server's RSS and the manifests."""

    def __init__(self, pid: int, lance: Path, sample_s: float) -> None:
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
            "allocated_mib": allocated_mib(self.pid),
            "manifests": self.manifests(),
            "open_files": psutil.Process(self.pid).num_fds(),
        }
        self.samples.append(sample)
        tqdm.write(
            f"{sample['s']:7.0f} s  {sample['writes']:7d} writes  {sample['writes_per_s']:6.1f}/s"
            f"  RSS {sample['rss_mib']:7.1f} MiB  allocated {sample['allocated_mib']} MiB"
            f"  {sample['manifests']:5d} manifests"
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
        allocated = (
            round(end["allocated_mib"] - at["allocated_mib"], 1)
            if end.get("allocated_mib") is not None and at.get("allocated_mib") is not None
            else None
        )
        return {
            "rss_start_mib": self.samples[0]["rss_mib"],
            "rss_peak_mib": max(r["rss_mib"] for r in self.samples),
            "rss_end_mib": end["rss_mib"],
            "last_third_growth_mib": round(early, 1),
            "last_third_mib_per_min": round(rate, 2),
            "allocated_last_third_growth_mib": allocated,
            "levelled": early <= max(25.0, 0.05 * at["rss_mib"]),
        }


async def soak_memories(
    cluster: Cluster, key: str, answers: Answers, args: argparse.Namespace, soak: Soak
) -> list[Series]:
    add, get, find = Series("add memory"), Series("get memory"), Series("search memories")
    url = f"/v1/agents/{AGENT}/memories"
    rng = random.Random(args.seed)
    deadline = time.monotonic() + args.soak_memories
    bar = tqdm(desc="memories", unit="write", file=sys.stderr)

    async def worker(balancer: Balancer) -> None:
        while time.monotonic() < deadline:
            phone = phone_of(rng.randrange(1000))
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20)))
            body = {"content": f"{text} #{soak.writes}", "phone": phone}
            made = await balancer.send(add, 201, "POST", url, json=body)
            soak.writes += 1
            bar.update()
            if soak.writes % 4 == 0 and made is not None and made.status_code == 201:
                await balancer.send(get, 200, "GET", f"{url}/{made.json()['id']}")
                query = {"query": text, "phone": phone, "threshold": 0.0, "limit": 5}
                await balancer.send(find, 200, "POST", f"{url}/search", json=query)

    async with Balancer(cluster.replicas, key, answers, args.clients) as balancer:
        await asyncio.gather(*(worker(balancer) for _ in range(args.clients)))
    bar.close()
    return [add, get, find]


def render_soak(samples: list[dict[str, Any]]) -> str:
    lines = [
        "| time s | writes | writes/s | RSS MiB | allocated MiB | manifests | open files |",
        "|" + " --- |" * 7,
    ]
    for r in samples:
        lines.append(
            f"| {r['s']:.0f} | {r['writes']} | {r['writes_per_s']} | {r['rss_mib']} |"
            f" {r.get('allocated_mib', '')} | {r['manifests']} | {r.get('open_files', '')} |"
        )
    return "\n".join(lines)


def run_soak(args: argparse.Namespace, argv: list[str] | None) -> int:
    answers: Answers = Counter()
    with (
        sigterm_unwinds(),
        Cluster(1, args.database, args.model, args.pg_admin_url, args.keep_data) as cluster,
    ):
        key = cluster.make_key(f"agent:{AGENT}")
        with Soak(cluster.replicas[0].pid, cluster.lance, args.sample_s) as soak:
            series = asyncio.run(soak_memories(cluster, key, answers, args, soak))

    seconds = soak.samples[-1]["s"]
    verdict = soak.verdict()
    rows = [s.row(seconds) for s in series]
    broke = what_broke(cluster, answers, {}, 0)
    result = {
        "command": "benchmarks/bench_load.py " + " ".join(argv or sys.argv[1:]),
        "model": args.model,
        "database": cluster.engine,
        "replicas": 1,
        "clients": args.clients,
        "seconds": seconds,
        "writes": soak.writes,
        **verdict,
        "samples": soak.samples,
        "cpus": os.cpu_count(),
        "results": rows,
        "failures": failures(answers),
        "broke": broke,
    }
    table = (
        render_soak(soak.samples)
        + "\n\n"
        + render(rows)
        + f"\n\n{soak.writes} memories from {args.clients} clients in {seconds:.0f} s"
        f" ({args.model}, {cluster.engine}); RSS {verdict['rss_start_mib']:.0f} MiB at the"
        f" start, peak {verdict['rss_peak_mib']:.0f}, end {verdict['rss_end_mib']:.0f}; last"
        f" third {verdict['last_third_growth_mib']:+.0f} MiB"
        f" ({verdict['last_third_mib_per_min']:+.1f} MiB/min; allocated"
        f" {verdict['allocated_last_third_growth_mib']} MiB):"
        f" {'levelled' if verdict['levelled'] else 'still growing'}." + render_broke(broke)
    )
    write_out(args.out, "bench_load.soak", result, table)
    return 0


BURST_MIX = ("build context", "list messages", "store turn", "health", "search memories")
BURST_PEOPLE = 20  # the people a burst's requests are about, in turn
# What must not grow from burst to burst, per replica, besides the database's sessions (RSS is
# reported, not judged: caches fill up to their bounds).
FLAT = ("fds", "threads", "pool_open", "pg_connections")
JUDGED_FROM = 6  # bursts: fewer are too few to tell a rise from the start-up
COUNTER_NAMES = {
    "pg_sessions": "PG sessions (the database's)",
    "fds": "open files",
    "threads": "threads",
    "rss_mib": "RSS MiB",
    "pg_connections": "PG connections",
    "pool_open": "read pool open",
}


def burst_request(kind: str, n: int, burst: int, rng: random.Random) -> tuple[int, str, str, Any]:
    """A burst's `n`th request: (the status of success, method, URL, JSON body or None)."""
    phone = phone_of(n % BURST_PEOPLE)
    person = f"/v1/agents/{AGENT}/people/{phone}"
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 20)))
    if kind == "build context":
        return 200, "GET", f"{person}/context", None
    if kind == "list messages":
        return 200, "GET", f"{person}/messages", None
    if kind == "store turn":
        turn = {"role": "user", "content": words, "event_id": f"b{burst}-{n}"}
        return 201, "POST", f"{person}/messages", turn
    if kind == "health":
        return 200, "GET", "/health", None
    query = {"query": words, "phone": phone, "threshold": 0.0, "limit": 5}
    return 200, "POST", f"/v1/agents/{AGENT}/memories/search", query


class BurstSampler:
    """Each replica's open file descriptors, threads, RSS, connections to PostgreSQL (its TCP
    sockets to the database's port) and read pool (its /health), and the database's client
    sessions, at one moment; every answer so far, and how many were not 2xx."""

    def __init__(self, cluster: Cluster, answers: Answers) -> None:
        import psutil

        self.cluster = cluster
        self.answers = answers
        self.samples: list[dict[str, Any]] = []
        self._processes = {r.number: psutil.Process(r.pid) for r in cluster.replicas}
        database = cluster.database
        self._pg_port = (urlsplit(database.url).port or 5432) if database else None
        self._started = time.monotonic()

    def sample(self, burst: int, phase: str) -> dict[str, Any]:
        """Read now: `phase` is start (before the first burst), burst (just after one) or gap
        (at the end of the idle gap after it)."""
        seconds = time.monotonic() - self._started
        replicas = [self._replica(number) for number in self._processes]
        database = self.cluster.database
        sample = {
            "burst": burst,
            "phase": phase,
            "s": round(seconds, 1),
            "requests": sum(self.answers.values()),
            "non_2xx": sum(n for (_, _, status), n in self.answers.items() if not _ok(status)),
            "pg_sessions": database.client_sessions() if database else None,
            "replicas": replicas,
        }
        self.samples.append(sample)
        tqdm.write(_sample_line(sample), file=sys.stderr)
        return sample

    def _replica(self, number: int) -> dict[str, Any]:
        process = self._processes[number]
        reading: dict[str, Any] = {
            "replica": number,
            "fds": process.num_fds(),
            "threads": process.num_threads(),
            "rss_mib": round(process.memory_info().rss / 2**20, 1),
            "pg_connections": None,
        }
        if self._pg_port is not None:
            reading["pg_connections"] = sum(
                1
                for c in process.net_connections(kind="tcp")
                if c.raddr and c.raddr.port == self._pg_port
            )
        # After the process's own counters: the /health request's socket is not among them.
        replica = self.cluster.replicas[number - 1]
        try:
            pool = replica.health()["connections"]
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            pool = {"error": type(exc).__name__}
        reading["pool"] = pool
        reading["pool_open"] = pool.get("open")
        reading["pool_in_use"] = pool.get("in_use")
        return reading


def _sample_line(sample: dict[str, Any]) -> str:
    sessions = "" if sample["pg_sessions"] is None else f"  {sample['pg_sessions']} PG sessions"
    replicas = "; ".join(
        f"[{r['replica']}] {r['fds']} fds {r['threads']} threads {r['rss_mib']:.0f} MiB"
        f" pool {r['pool_open']} open {r['pool_in_use']} in use"
        for r in sample["replicas"]
    )
    return (
        f"{sample['s']:7.0f} s  burst {sample['burst']:3d} {sample['phase']:5s}"
        f"  {sample['non_2xx']} non-2xx{sessions}  {replicas}"
    )


async def soak_bursts(
    cluster: Cluster, key: str, answers: Answers, args: argparse.Namespace, sampler: BurstSampler
) -> list[tuple[Series, float]]:
    """Bursts of requests, each followed by an idle gap, for --soak-bursts seconds (at least
    one); sampled after every burst and at the end of every gap. Returns each series of
    requests with the seconds it ran in (the bursts' together, without the gaps)."""
    series = {kind: Series(kind) for kind in BURST_MIX}
    seeded = Series("add memory")
    rng = random.Random(args.seed)
    busy_s = 0.0
    async with Balancer(cluster.replicas, key, answers, args.burst_clients) as balancer:
        started = time.monotonic()
        for person in range(BURST_PEOPLE):  # so that the searches find something
            body = {"content": f"likes {rng.choice(WORDS)}", "phone": phone_of(person)}
            await balancer.send(seeded, 201, "POST", f"/v1/agents/{AGENT}/memories", json=body)
        seed_s = time.monotonic() - started
        sampler.sample(0, "start")
        deadline = time.monotonic() + args.soak_bursts
        burst = 0
        while burst == 0 or time.monotonic() < deadline:
            burst += 1
            started = time.monotonic()
            await _burst(balancer, series, burst, args, rng)
            busy_s += time.monotonic() - started
            sampler.sample(burst, "burst")
            await asyncio.sleep(args.gap_s)
            sampler.sample(burst, "gap")
    return [(seeded, seed_s), *((s, busy_s) for s in series.values())]


async def _burst(
    balancer: Balancer,
    series: dict[str, Series],
    burst: int,
    args: argparse.Namespace,
    rng: random.Random,
) -> None:
    at_once = asyncio.Semaphore(args.burst_clients)

    async def one(n: int) -> None:
        kind = BURST_MIX[n % len(BURST_MIX)]
        ok, method, url, body = burst_request(kind, n, burst, rng)
        async with at_once:
            await balancer.send(series[kind], ok, method, url, json=body)

    await asyncio.gather(*(one(n) for n in range(args.burst_requests)))


def _values(samples: list[dict[str, Any]], phase: str, number: int, counter: str) -> list[Any]:
    """A counter of one replica over the bursts, as sampled in `phase`."""
    return [
        r[counter]
        for s in samples
        if s["phase"] == phase
        for r in s["replicas"]
        if r["replica"] == number
    ]


def burst_summary(samples: list[dict[str, Any]], numbers: list[int]) -> dict[str, Any]:
    """Each counter (per replica; PostgreSQL's sessions for the database) after a burst and
    after a gap: the first burst's value, the last's and the largest; and which grew: every
    value in the last third of the bursts above every value in the first third (a steady rise,
    not one busy moment). Fewer than JUDGED_FROM bursts are not judged (flat is None)."""
    series: list[tuple[str, int | None, str, list[Any]]] = []
    for phase in ("burst", "gap"):
        sessions = [s["pg_sessions"] for s in samples if s["phase"] == phase]
        series.append(("pg_sessions", None, phase, sessions))
        for number in numbers:
            for counter in ("fds", "threads", "rss_mib", "pg_connections", "pool_open"):
                series.append((counter, number, phase, _values(samples, phase, number, counter)))
    bursts = sum(1 for s in samples if s["phase"] == "burst")
    rows = []
    for counter, replica, phase, values in series:
        if not values or None in values:
            continue  # (not on SQLite; or a /health that did not answer)
        third = max(1, len(values) // 3)
        judged = counter == "pg_sessions" or counter in FLAT
        grew = judged and bursts >= JUDGED_FROM and min(values[-third:]) > max(values[:third])
        rows.append(
            {
                "counter": counter,
                "replica": replica,
                "after": phase,
                "first": values[0],
                "last": values[-1],
                "max": max(values),
                "grew": grew,
            }
        )
    grew_rows = [_counter_name(r, numbers) + f" after a {r['after']}" for r in rows if r["grew"]]
    flat = None if bursts < JUDGED_FROM else not grew_rows
    return {"counters": rows, "grew": grew_rows, "flat": flat}


def _counter_name(row: dict[str, Any], numbers: list[int]) -> str:
    name = COUNTER_NAMES[row["counter"]]
    return f"{name}, replica {row['replica']}" if len(numbers) > 1 and row["replica"] else name


def render_bursts(samples: list[dict[str, Any]]) -> str:
    """One row per burst and replica; each cell: just after the burst / at the end of the gap
    after it (the start row: before the first burst)."""
    lines = [
        "| burst | time s | replica | open files | threads | RSS MiB | PG sessions"
        " | PG connections | pool open | pool in use | non-2xx |",
        "|" + " --- |" * 11,
    ]
    pairs: dict[int, list[dict[str, Any]]] = {}
    for sample in samples:
        pairs.setdefault(sample["burst"], []).append(sample)
    for burst, pair in pairs.items():
        sessions = " / ".join(_shown(s["pg_sessions"]) for s in pair)
        for index, replica in enumerate(pair[0]["replicas"]):
            keys = ("fds", "threads", "rss_mib", "pg_connections", "pool_open", "pool_in_use")
            fds, threads, rss, connections, pool_open, in_use = (
                " / ".join(_shown(s["replicas"][index][key]) for s in pair) for key in keys
            )
            lines.append(
                f"| {burst or 'start'} | {pair[0]['s']:.0f} | {replica['replica']} | {fds} |"
                f" {threads} | {rss} | {sessions} | {connections} | {pool_open} | {in_use} |"
                f" {pair[-1]['non_2xx']} |"
            )
    return "\n".join(lines)


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if isinstance(value, float) else str(value)


def render_burst_summary(summary: dict[str, Any], numbers: list[int]) -> str:
    """The first burst against the last, and the largest, of each counter (each cell: after
    the burst / after the gap); then the verdict."""
    lines = ["| counter | first burst | last burst | max |", "|" + " --- |" * 4]
    pairs: dict[tuple[str, int | None], dict[str, dict[str, Any]]] = {}
    for row in summary["counters"]:
        pairs.setdefault((row["counter"], row["replica"]), {})[row["after"]] = row
    for pair in pairs.values():
        cells = (
            " / ".join(_shown(pair[phase][key]) for phase in ("burst", "gap") if phase in pair)
            for key in ("first", "last", "max")
        )
        name = _counter_name(next(iter(pair.values())), numbers)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if summary["flat"] is None:
        verdict = f"Too few bursts to judge (fewer than {JUDGED_FROM})."
    elif summary["flat"]:
        verdict = "Flat: no counter rose from the first third of the bursts to the last."
    else:
        grew = "; ".join(summary["grew"])
        verdict = f"GREW from the first third of the bursts to the last: {grew}."
    return "\n".join(lines) + "\n\n" + verdict


def run_bursts(args: argparse.Namespace, argv: list[str] | None) -> int:
    answers: Answers = Counter()
    with (
        sigterm_unwinds(),
        Cluster(
            args.replicas, args.database, args.model, args.pg_admin_url, args.keep_data
        ) as cluster,
    ):
        roles_at_start = cluster.settle_roles()
        key = cluster.make_key(f"agent:{AGENT}")
        sampler = BurstSampler(cluster, answers)
        series = asyncio.run(soak_bursts(cluster, key, answers, args, sampler))
        roles_at_end = cluster.roles()
        cpu_by_replica = {r.number: _cpu_s(r.pid) for r in cluster.replicas}

    samples = sampler.samples
    numbers = [r.number for r in cluster.replicas]
    summary = burst_summary(samples, numbers)
    peaks = {
        n: max(rss for p in ("start", "burst", "gap") for rss in _values(samples, p, n, "rss_mib"))
        for n in numbers
    }
    replicas = replica_rows(cluster, answers, (roles_at_start, roles_at_end), peaks, cpu_by_replica)
    broke = what_broke(cluster, answers, roles_at_start, 0)
    rows = [s.row(seconds) for s, seconds in series]
    bursts = samples[-1]["burst"]
    result = {
        "command": "benchmarks/bench_load.py " + " ".join(argv or sys.argv[1:]),
        "model": args.model,
        "database": cluster.engine,
        "database_name": cluster.database.name if cluster.database else None,
        "replicas": args.replicas,
        "burst_requests": args.burst_requests,
        "burst_clients": args.burst_clients,
        "gap_s": args.gap_s,
        "seconds": samples[-1]["s"],
        "bursts": bursts,
        "requests": samples[-1]["requests"],
        "non_2xx": samples[-1]["non_2xx"],
        **summary,
        "samples": samples,
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(n, 2) for n in os.getloadavg()],
        "results": rows,
        "replica_results": replicas,
        "failures": failures(answers),
        "broke": broke,
    }
    engine = "PostgreSQL" if cluster.database else "SQLite"
    servers = f"{args.replicas} replica{'s' if args.replicas > 1 else ''} on {engine}"
    table = (
        render_bursts(samples)
        + f"\n\n{bursts} bursts of {args.burst_requests} requests ({args.burst_clients} at a"
        f" time), each followed by {args.gap_s:g} s idle, over {samples[-1]['s']:.0f} s;"
        f" {servers}, {args.model}; {result['requests']} requests, {result['non_2xx']}"
        " non-2xx. Each cell: just after the burst / at the end of the gap.\n\n"
        + render_burst_summary(summary, numbers)
        + "\n\n"
        + render(rows)
        + "\n\n"
        + render_replicas(replicas)
        + render_broke(broke)
    )
    stem = f"bench_load.bursts.{cluster.engine}"
    write_out(args.out, stem + (f"-{args.replicas}" if args.replicas > 1 else ""), result, table)
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


def render_cost(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| phase | requests | seconds | server CPU s | database CPU s | bench CPU s"
        " | machine CPU s | CPU ms per request |",
        "|" + " --- |" * 8,
    ]
    for r in rows:
        database = "in the server" if r["database_cpu_s"] is None else r["database_cpu_s"]
        per_request = "" if r["cpu_ms_per_request"] is None else r["cpu_ms_per_request"]
        lines.append(
            f"| {r['phase']} | {r['requests']} | {r['seconds']} | {r['server_cpu_s']} |"
            f" {database} | {r['bench_cpu_s']} | {r['machine_cpu_s']} | {per_request} |"
        )
    return "\n".join(lines)


def replica_rows(
    cluster: Cluster,
    answers: Answers,
    roles: tuple[dict[int, str], dict[int, str]],
    peaks: dict[int, float],
    cpu: dict[int, float],
) -> list[dict[str, Any]]:
    rows = []
    for replica in cluster.replicas:
        statuses: Counter[str] = Counter()
        for (number, _, status), count in answers.items():
            if number == replica.number:
                statuses[status] += count
        at_start, at_end = roles[0].get(replica.number), roles[1].get(replica.number)
        rows.append(
            {
                "replica": replica.number,
                "port": replica.port,
                "indexer": at_end if at_start == at_end else f"{at_start} -> {at_end}",
                "requests": sum(statuses.values()),
                "non_2xx": sum(n for status, n in statuses.items() if not _ok(status)),
                "statuses": dict(sorted(statuses.items())),
                "peak_rss_mb": round(peaks.get(replica.number, 0.0), 1),
                "cpu_s": round(cpu.get(replica.number, 0.0), 1),
                "log_lines": len(replica.log_lines),
            }
        )
    return rows


def render_replicas(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| replica | port | indexer | requests | non-2xx | answers | peak RSS MB"
        " | CPU s since start | log lines |",
        "|" + " --- |" * 9,
    ]
    for r in rows:
        statuses = ", ".join(f"{status}: {n}" for status, n in r["statuses"].items())
        lines.append(
            f"| {r['replica']} | {r['port']} | {r['indexer']} | {r['requests']} |"
            f" {r['non_2xx']} | {statuses} | {r['peak_rss_mb']} | {r['cpu_s']} |"
            f" {r['log_lines']} |"
        )
    return "\n".join(lines)


def _ok(status: str) -> bool:
    return status.isdigit() and 200 <= int(status) < 300


def failures(answers: Answers) -> list[dict[str, Any]]:
    """Every answer that was not 2xx (or no answer: a transport error), by replica."""
    return [
        {"replica": number, "operation": operation, "status": status, "count": count}
        for (number, operation, status), count in sorted(answers.items())
        if not _ok(status)
    ]


def what_broke(
    cluster: Cluster,
    answers: Answers,
    roles: dict[int, str],
    lag_after_wait: int | None,
) -> list[str]:
    """What went wrong, in words: answers other than 2xx, the indexer on other than exactly
    one replica, an index that did not catch up, anything a replica logged."""
    broke = [
        f"replica {f['replica']}: {f['operation']} answered {f['status']} x{f['count']}"
        for f in failures(answers)
    ]
    if roles and list(roles.values()).count("active") != 1:
        broke.append(f"indexer roles at the start were {roles}, not exactly one active")
    if lag_after_wait != 0:
        broke.append(f"the index did not catch up: lag {lag_after_wait} at the end")
    for replica in cluster.replicas:
        if replica.log_lines:
            broke.append(
                f"replica {replica.number} logged {len(replica.log_lines)} lines; the last:"
                f" {replica.log_lines[-1][:200]}"
            )
    return broke


def render_broke(broke: list[str]) -> str:
    if not broke:
        return "\n\nWhat broke: nothing (every request answered 2xx, nothing logged)."
    return "\n\nWhat broke:\n\n" + "\n".join(f"- {line}" for line in broke)


def run_turns(args: argparse.Namespace, argv: list[str] | None) -> int:
    answers: Answers = Counter()
    with (
        sigterm_unwinds(),
        Cluster(
            args.replicas, args.database, args.model, args.pg_admin_url, args.keep_data
        ) as cluster,
    ):
        roles_at_start = cluster.settle_roles()
        agent_key = cluster.make_key(f"agent:{AGENT}")
        staff_key = cluster.make_key("staff")
        meter = CpuMeter(cluster)
        postgres = cluster.database is not None
        with Watcher(cluster, meter) as watcher:
            before = Usage.now(meter)
            store, context, seconds = asyncio.run(drive(cluster, agent_key, answers, args))
            ingested = Usage.now(meter)
            lag_at_end = cluster.index_lag()
            catch_up_s = cluster.wait_for_index()
            indexed = Usage.now(meter)
            lag_after_wait = cluster.index_lag()
            search = asyncio.run(
                staff_searches(cluster, staff_key, answers, args.searches, args.seed)
            )
            searched = Usage.now(meter)
            search_seconds = sum(search.ms) / 1000
        roles_at_end = cluster.roles()
        indexer_per_s = cluster.indexer_rate()
        cpu_by_replica = {r.number: _cpu_s(r.pid) for r in cluster.replicas}

    ingest_requests = len(store.ms) + len(context.ms)
    cost = [
        cost_row("ingest: store + context", ingest_requests, before, ingested, postgres),
        cost_row("index catch-up after ingest", 0, ingested, indexed, postgres),
        cost_row("staff search", len(search.ms), indexed, searched, postgres),
    ]
    indexed_cost = cost_row("ingest, indexed", ingest_requests, before, indexed, postgres)
    replicas = replica_rows(
        cluster,
        answers,
        (roles_at_start, roles_at_end),
        watcher.peak_rss_by_replica,
        cpu_by_replica,
    )
    broke = what_broke(cluster, answers, roles_at_start, lag_after_wait)
    hashing = args.model.startswith("hash:")
    raw_per_s = 0.0 if hashing else raw_rate(args.model, sample_texts(1000, args.seed))
    rows = [store.row(seconds), context.row(seconds), search.row(search_seconds)]
    result = {
        "command": "benchmarks/bench_load.py " + " ".join(argv or sys.argv[1:]),
        "model": args.model,
        "database": cluster.engine,
        "database_name": cluster.database.name if cluster.database else None,
        "replicas": args.replicas,
        "balancing": "round-robin per request over every replica",
        "people": args.people,
        "turns": args.turns,
        "clients": args.clients,
        "seconds": round(seconds, 1),
        "index_lag_at_end_of_ingest": lag_at_end,
        "index_catch_up_s": round(catch_up_s, 1),
        "index_lag_over_time": watcher.lag,
        "peak_rss_mb": round(watcher.peak_rss_mb, 1),
        "indexer_embed_per_s": round(indexer_per_s, 1),
        "raw_encode_per_s": round(raw_per_s, 1),
        "indexer_to_raw_ratio": round(indexer_per_s / raw_per_s, 3) if raw_per_s else None,
        "cpu_ms_per_ingest_request": cost[0]["cpu_ms_per_request"],
        "cpu_ms_per_ingest_request_indexed": indexed_cost["cpu_ms_per_request"],
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(n, 2) for n in os.getloadavg()],
        "results": rows,
        "cost": cost,
        "replica_results": replicas,
        "failures": failures(answers),
        "broke": broke,
    }
    engine = "PostgreSQL" if postgres else "SQLite"
    servers = f"{args.replicas} replica{'s' if args.replicas > 1 else ''} on {engine}"
    table = (
        render(rows)
        + f"\n\n{args.people} people x {args.turns} turns, {args.clients} clients, {servers},"
        f" {seconds:.1f} s; index lag at the end of ingest {lag_at_end}, caught up"
        f" {catch_up_s:.0f} s later; peak server memory {watcher.peak_rss_mb:.0f} MB"
        f"{' (all replicas)' if args.replicas > 1 else ''}; indexer {indexer_per_s:.0f}"
        f" texts/s vs raw encode {raw_per_s:.0f} texts/s"
        f" (ratio {result['indexer_to_raw_ratio']}).\n\n"
        + render_cost(cost)
        + f"\n\nIngest costs {cost[0]['cpu_ms_per_request']} CPU ms per request"
        f" ({indexed_cost['cpu_ms_per_request']} with the index catch-up after it), counting"
        f" {'every replica' if args.replicas > 1 else 'the server'}"
        f"{' and the database' if postgres else ''}.\n\n"
        + render_replicas(replicas)
        + render_broke(broke)
    )
    write_out(args.out, "bench_load", result, table)
    return 0


def _cpu_s(pid: int) -> float:
    import psutil

    with contextlib.suppress(psutil.Error):
        times = psutil.Process(pid).cpu_times()
        return float(times.user + times.system)
    return 0.0


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
    parser.add_argument(
        "--database",
        choices=("sqlite", "postgresql"),
        default="sqlite",
        help="sqlite: the embedded default; postgresql: a fresh database on --pg-admin-url's"
        " server, dropped at the end",
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="server processes on one database and one vector folder; the clients' requests"
        " go to them in turn",
    )
    parser.add_argument(
        "--pg-admin-url",
        default=PG_ADMIN_URL,
        help="a database on the PostgreSQL server where the run's database is made",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="folder for bench_load.json and .md (the soaks: bench_load.soak.*,"
        " bench_load.bursts.<database>[-<replicas>].*)",
    )
    parser.add_argument(
        "--keep-data",
        action="store_true",
        help="keep the servers' data folder (and the PostgreSQL database)",
    )
    parser.add_argument(
        "--soak-memories",
        type=float,
        metavar="SECONDS",
        help="instead of turns, add memories for this long and sample the server's memory",
    )
    parser.add_argument("--sample-s", type=float, default=30.0, help="soak: seconds per sample")
    parser.add_argument(
        "--soak-bursts",
        type=float,
        metavar="SECONDS",
        help="instead of turns, for this long repeat a burst of requests and an idle gap, and"
        " sample every replica's open files, threads, memory and database connections after"
        " each burst and each gap",
    )
    parser.add_argument(
        "--burst-requests", type=int, default=80, help="bursts: requests in each burst"
    )
    parser.add_argument(
        "--burst-clients", type=int, default=40, help="bursts: requests of a burst at a time"
    )
    parser.add_argument(
        "--gap-s",
        type=float,
        default=12.0,
        help="bursts: idle seconds after each burst; longer than the server's idle worker"
        " threads live (anyio retires them after 10 s), so each burst finds them gone",
    )
    args = parser.parse_args(argv)
    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    if args.soak_memories and args.soak_bursts:
        parser.error("--soak-memories or --soak-bursts, not both")
    if args.soak_memories:
        if args.replicas != 1:
            parser.error("--soak-memories samples one server: --replicas 1")
        return run_soak(args, argv)
    if args.soak_bursts:
        if args.burst_requests < 1 or args.burst_clients < 1 or args.gap_s < 0:
            parser.error("--burst-requests and --burst-clients at least 1, --gap-s at least 0")
        return run_bursts(args, argv)
    return run_turns(args, argv)


def write_out(out: Path | None, stem: str, result: dict[str, Any], table: str) -> None:
    """Print the table; with --out, write it and the JSON there."""
    print(table)
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{stem}.json").write_text(json.dumps(result, indent=2))
        (out / f"{stem}.md").write_text(table + "\n")


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        print("interrupted: the replicas are stopped and their data removed", file=sys.stderr)
        raise SystemExit(130) from None
