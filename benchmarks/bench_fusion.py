"""Excerpt fusion sweep: how to combine semantic and keyword search, on LoCoMo and the
multilingual set, with one embedding pass per model.

Offline, without the server, so that dozens of variants cost one embedding pass: each
conversation's turns but the newest HISTORY go into a LanceDB table with the server's keyword
analysis (embeddings.index.fts_config) and the server's keyword text (server.indexer.turn_text:
own words, neighbours, own words again), and are embedded with the model, either their own words
(the server's vector since table version 4) or with one neighbour each side (before). Recall is
the share of a question's evidence turns among the newest HISTORY turns (the history) and the k
excerpts. Methods: semantic, keyword, reciprocal-rank fusion, and the server's score fusion
(embeddings.index.fuse_scores) at several weights. bench_recall.py then measures the chosen
default through the server.

Run with:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_fusion.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import lancedb
import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import embeddings.index as index_module  # noqa: E402
from benchmarks.locomo import clean_dia_ids, turn_content  # noqa: E402
from embeddings.index import (  # noqa: E402
    BM25_SCALE,
    Hit,
    IndexRow,
    _fts_text,
    fts_config,
    fuse_scores,
)
from server.app import default_encoder_factory  # noqa: E402
from server.config import DEFAULT_MODEL, Settings  # noqa: E402

SETS = {
    "locomo": ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json",
    "multilingual": ROOT / "benchmarks" / "data" / "multilingual" / "chats.json",
}
HISTORY = 24  # about what bench_recall measures as the history of these sets (24.5 and 29.1)
DEPTH = 30  # candidates taken from each list, as VectorIndex.hybrid does at k <= 15
RRF_K = 60


@dataclass
class Conversation:
    turns: list[str]
    questions: list[tuple[str, frozenset[int]]]  # categories 1-4 with evidence


def load(path: Path) -> list[Conversation]:
    out = []
    for sample in json.loads(path.read_text()):
        conversation = sample["conversation"]
        numbers = sorted(
            int(key.split("_")[1])
            for key, value in conversation.items()
            if key.startswith("session_") and key.count("_") == 1 and isinstance(value, list)
        )
        turns: list[str] = []
        position: dict[str, int] = {}
        for number in numbers:
            for turn in conversation[f"session_{number}"]:
                position[str(turn["dia_id"])] = len(turns)
                turns.append(turn_content(turn))
        questions = []
        for qa in sample.get("qa", []):
            ids = [position[d] for d in clean_dia_ids(qa.get("evidence") or []) if d in position]
            if ids and int(qa["category"]) in (1, 2, 3, 4):
                questions.append((str(qa["question"]), frozenset(ids)))
        out.append(Conversation(turns, questions))
    return out


DOUBLE_OWN_WORDS = True  # --single-own-words: the turn's words once, among its neighbours


def keyword_text(turns: Sequence[str], i: int, window: int) -> str:
    """server.indexer.turn_text on a list: own words, the neighbours, own words again."""
    if window <= 0:
        return turns[i]
    before, after = turns[max(0, i - window) : i], turns[i + 1 : i + 1 + window]
    if not DOUBLE_OWN_WORDS:
        return "\n".join([*before, turns[i], *after])
    return "\n".join([turns[i], *before, turns[i], *after])


def embed(model: str, convs: list[Conversation], cache: Path | None, neighbours: bool) -> Any:
    """Per conversation: own-word vectors, with-neighbour vectors (or None), question vectors."""
    if cache and cache.exists():
        data = np.load(cache, allow_pickle=True)
        if neighbours and "vt" not in data.files:
            raise SystemExit(f"{cache} has no with-neighbour vectors; delete it or drop them")
        return list(data["vo"]), list(data["vt"]) if neighbours else None, list(data["vq"])
    encoder = default_encoder_factory(Settings())(model)
    own, near, questions = [], [], []
    started = time.perf_counter()
    for n, conv in enumerate(convs, 1):
        own.append(encoder.encode(conv.turns))
        if neighbours:
            near.append(
                encoder.encode([keyword_text(conv.turns, i, 1) for i in range(len(conv.turns))])
            )
        questions.append(encoder.encode_query([q for q, _ in conv.questions]))
        print(f"  embedded {n}/{len(convs)} ({time.perf_counter() - started:.0f} s)", flush=True)
    if cache:
        arrays: dict[str, Any] = {
            "vo": np.array(own, dtype=object),
            "vq": np.array(questions, dtype=object),
        }
        if neighbours:
            arrays["vt"] = np.array(near, dtype=object)
        np.savez(cache, **arrays)
    return own, near if neighbours else None, questions


def rrf(lists: Sequence[Sequence[int]], k: int) -> list[int]:
    scores: dict[int, float] = {}
    for ranking in lists:
        for rank, i in enumerate(ranking, start=1):
            scores[i] = scores.get(i, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(scores, key=lambda i: -scores[i])[:k]


def fused(
    cosines: np.ndarray,
    keyword: Sequence[tuple[int, float]],
    k: int,
    weight: float,
    scale: float = BM25_SCALE,
) -> list[int]:
    """The server's fusion, on stand-in rows."""

    def hit(i: int, score: float) -> Hit:
        return Hit(IndexRow(str(i), "turn", str(i), "", "", "", "", "", ""), score)

    top = [int(i) for i in np.argsort(-cosines)[:DEPTH]]
    semantic = [hit(i, float(cosines[i])) for i in top]
    words = [hit(i, s) for i, s in keyword]
    every = {str(i): float(cosines[i]) for i in set(top) | {i for i, _ in keyword}}
    hits = fuse_scores(semantic, words, every, k, semantic_weight=weight, scale=scale)
    return [int(h.row.id) for h in hits]


def sweep(
    convs: list[Conversation],
    history_turns: int,
    vectors: Any,
    ks: Sequence[int],
    windows: Sequence[int],
    weights: Sequence[float],
    scales: Sequence[float],
    folder: Path,
    per_conversation: bool = False,
) -> dict[str, dict[str, float]]:
    """Every conversation's archived turns in one table, each searched with a filter, as the
    server keeps every person in one table: BM25's term statistics are the whole table's
    (per_conversation: a table each, as if BM25 counted one person's words only)."""
    own, near, questions = vectors
    scores: dict[str, dict[str, list[float]]] = {}
    db = lancedb.connect(str(folder))
    archived = [list(range(max(0, len(c.turns) - history_turns))) for c in convs]
    groups = [[c] for c in range(len(convs))] if per_conversation else [list(range(len(convs)))]
    for window in windows:
        tables: dict[int, Any] = {}
        for g, group in enumerate(groups):
            table = db.create_table(
                f"w{window}_g{g}",
                pa.table(
                    {
                        "conv": [c for c in group for _ in archived[c]],
                        "id": [i for c in group for i in archived[c]],
                        "text": [
                            keyword_text(convs[c].turns, i, window)
                            for c in group
                            for i in archived[c]
                        ],
                    }
                ),
                mode="overwrite",
            )
            table.create_index("text", config=fts_config(), replace=True)
            tables.update({c: table for c in group})
        for c, conv in enumerate(convs):
            history = frozenset(range(len(archived[c]), len(conv.turns)))
            own_v = np.asarray(own[c])[archived[c]]
            near_v = np.asarray(near[c])[archived[c]] if near is not None else None
            for q, (question, evidence) in enumerate(conv.questions):
                qv = np.asarray(questions[c])[q]
                cos_own = own_v @ qv
                found = (
                    tables[c]
                    .search(_fts_text(question), query_type="fts")
                    .where(f"conv = {c}", prefilter=True)
                    .limit(DEPTH)
                    .to_list()
                )
                keyword = [(int(r["id"]), float(r["_score"])) for r in found]
                sem_own = [int(i) for i in np.argsort(-cos_own)[:DEPTH]]
                for k in ks:
                    methods: dict[str, list[int]] = {
                        "semantic (own words)": sem_own[:k],
                        "keyword": [i for i, _ in keyword[:k]],
                        "RRF (own words)": rrf([sem_own, [i for i, _ in keyword]], k),
                    }
                    for weight in weights:
                        for scale in scales:
                            name = f"fused {weight:.1f}" + ("" if scale == 5 else f" s{scale:g}")
                            methods[f"{name} (own words)"] = fused(
                                cos_own, keyword, k, weight, scale
                            )
                    if near_v is not None:
                        cos_near = near_v @ qv
                        sem_near = [int(i) for i in np.argsort(-cos_near)[:DEPTH]]
                        methods["semantic (with neighbours)"] = sem_near[:k]
                        methods["RRF (with neighbours)"] = rrf(
                            [sem_near, [i for i, _ in keyword]], k
                        )
                        methods["fused 0.7 (with neighbours)"] = fused(cos_near, keyword, k, 0.7)
                    column = f"k={k}, window {window}"
                    for name, got in methods.items():
                        covered = history | frozenset(got)
                        scores.setdefault(name, {}).setdefault(column, []).append(
                            len(evidence & covered) / len(evidence)
                        )
    return {m: {col: statistics.fmean(v) for col, v in cols.items()} for m, cols in scores.items()}


def markdown(
    model: str,
    results: dict[str, dict[str, dict[str, float]]],
    counts: dict[str, Any],
    history_turns: int,
) -> str:
    lines = [f"# Excerpt fusion sweep ({model})", ""]
    lines.append(
        f"History (the newest {history_turns} turns) + k excerpts; recall of evidence turns over"
        " categories 1-4; keyword text with `window` neighbours each side. Run with:"
        f" `HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_fusion.py {' '.join(sys.argv[1:])}`"
    )
    for name, table in results.items():
        columns = list(next(iter(table.values())))
        lines += ["", f"## {name} ({counts[name]})", ""]
        lines.append("| method | " + " | ".join(columns) + " |")
        lines.append("|---|" + "---|" * len(columns))
        for method, row in sorted(table.items(), key=lambda kv: -kv[1][columns[-1]]):
            lines.append(f"| {method} | " + " | ".join(f"{row[c]:.3f}" for c in columns) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="a model name, or hash:<dim>")
    parser.add_argument("--locomo", type=Path, default=SETS["locomo"])
    parser.add_argument("--multilingual", type=Path, default=SETS["multilingual"])
    parser.add_argument("--history", type=int, default=HISTORY, help="newest turns as history")
    parser.add_argument("--sets", default="locomo,multilingual")
    parser.add_argument("--k", default="10,15")
    parser.add_argument("--window", default="1,2", help="keyword text neighbours each side")
    parser.add_argument("--weights", default="0.5,0.6,0.7,0.8,0.9")
    parser.add_argument("--scales", default="5", help="BM25 squash scales, x / (x + scale)")
    parser.add_argument("--no-neighbour-vectors", action="store_true", help="own-word vectors only")
    parser.add_argument(
        "--keyword-analysis",
        default=index_module.KEYWORD_ANALYSIS,
        choices=sorted(index_module.KEYWORD_ANALYSES),
        help="how the full-text index reads text (stemming, stop words)",
    )
    parser.add_argument(
        "--single-own-words",
        action="store_true",
        help="keyword text with the turn's words once, not twice",
    )
    parser.add_argument(
        "--table-per-conversation",
        action="store_true",
        help="a table per conversation (BM25 statistics of one person) instead of one table",
    )
    parser.add_argument("--cache", type=Path, help="folder for the embeddings (reused when there)")
    parser.add_argument("--out", type=Path, help="write fusion.<model>.json/.md here")
    args = parser.parse_args(argv)
    index_module.KEYWORD_ANALYSIS = args.keyword_analysis
    global DOUBLE_OWN_WORDS
    DOUBLE_OWN_WORDS = not args.single_own_words
    ks = [int(x) for x in args.k.split(",")]
    windows = [int(x) for x in args.window.split(",")]
    weights = [float(x) for x in args.weights.split(",")]
    scales = [float(x) for x in args.scales.split(",")]
    slug = "e5" if "e5" in args.model else "minilm" if "MiniLM" in args.model else "other"
    results, counts = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.sets.split(","):
            convs = load(getattr(args, name))
            counts[name] = (
                f"{len(convs)} conversations, {sum(len(c.turns) for c in convs)} turns,"
                f" {sum(len(c.questions) for c in convs)} questions"
            )
            print(f"{name}: {counts[name]}", flush=True)
            cache = args.cache / f"fusion.{name}.{slug}.npz" if args.cache else None
            if args.cache:
                args.cache.mkdir(parents=True, exist_ok=True)
            vectors = embed(args.model, convs, cache, not args.no_neighbour_vectors)
            results[name] = sweep(
                convs,
                args.history,
                vectors,
                ks,
                windows,
                weights,
                scales,
                Path(tmp) / name,
                per_conversation=args.table_per_conversation,
            )
    text = markdown(args.model, results, counts, args.history)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"fusion.{slug}.md").write_text(text)
        report = {
            "model": args.model,
            "history": args.history,
            "keyword_analysis": args.keyword_analysis,
            "own_words_doubled": DOUBLE_OWN_WORDS,
            "table_per_conversation": args.table_per_conversation,
            "counts": counts,
            "results": results,
        }
        (args.out / f"fusion.{slug}.json").write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.out}/fusion.{slug}.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
