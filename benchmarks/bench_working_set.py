"""A context's speed against one query embedding, as a person's archive grows (issue 42).

For people with 100, 1,000 and 10,000 archived turns (LoCoMo's turns, cycled, posted through
HTTP and archived by the server itself, then embedded by its indexer with the shipped model),
it measures in one run on this machine:

- the context's p50 over HTTP (FastAPI's TestClient on the app; distinct LoCoMo questions, the
  person already seen), and the p50 of one query embedding of the same encoder on distinct
  texts: their ratio is the cost of everything but the model;
- the first context after an archive (41 more turns posted, so the server archives, and
  indexed) against that p50;
- the in-process stages of one context (the query embedding; the rest).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_working_set.py --out benchmarks/results

It prints a table and writes benchmarks/results/working_set.{json,md}. LoCoMo (CC BY-NC 4.0,
Maharana et al., 2024) is read from ../shared/data/locomo/locomo10.json, never copied.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from server.app import create_app  # noqa: E402
from server.config import DEFAULT_MODEL, Settings  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
ADMIN = "bench-working-set-admin-key-0123456789"
AGENT = "bench"
SIZES = (100, 1_000, 10_000)


def locomo_texts(path: Path) -> tuple[list[str], list[str]]:
    """Every turn's text and every question of LoCoMo, in order."""
    samples = json.loads(path.read_text(encoding="utf-8"))
    turns: list[str] = []
    questions: list[str] = []
    for sample in samples:
        conversation = sample["conversation"]
        n = 1
        while f"session_{n}" in conversation:
            turns += [t["text"] for t in conversation[f"session_{n}"] if t.get("text")]
            n += 1
        questions += [q["question"] for q in sample["qa"] if q.get("question")]
    return turns, questions


def p50(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def run(args: argparse.Namespace) -> dict[str, Any]:
    texts, questions = locomo_texts(args.data)
    headers = {"Authorization": f"Bearer {ADMIN}"}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-working-set-") as tmp:
        settings = Settings(  # type: ignore[call-arg]
            data_dir=Path(tmp), embedding_model=args.model, admin_key=ADMIN
        )
        app = create_app(settings, run_workers=False)
        with TestClient(app) as client:
            services = app.state.services
            encoder = services.indexer.space.encoder
            used = 0  # questions are never asked twice: no cached query vector helps

            def ask(phone: str) -> float:
                nonlocal used
                query = questions[used % len(questions)] + f" ({used})"
                used += 1
                t = time.perf_counter()
                response = client.get(
                    f"/v1/agents/{AGENT}/people/{phone}/context",
                    params={"query": query},
                    headers=headers,
                )
                elapsed = (time.perf_counter() - t) * 1000
                assert response.status_code == 200, response.text
                return elapsed

            def post(phone: str, start: int, n: int) -> None:
                for i in range(start, start + n):
                    body = {
                        "role": "user" if i % 2 == 0 else "assistant",
                        "content": texts[i % len(texts)],
                    }
                    response = client.post(
                        f"/v1/agents/{AGENT}/people/{phone}/messages", json=body, headers=headers
                    )
                    assert response.status_code == 201, response.text
                    if (i - start) % 500 == 499:
                        services.indexer.drain()
                services.indexer.drain()

            for size in args.sizes:
                phone = f"+1555{size:07d}"
                started = time.perf_counter()
                # archived: everything but the newest 20 (the server archives past 40 waiting)
                post(phone, 0, size + 20)
                archived = services.memory.person_turns(AGENT, phone)
                held = len(archived.turns) if archived is not None else 0
                print(f"  {size}: {held} archived turns in {time.perf_counter() - started:.0f} s")
                ask(phone)  # the person is seen once
                contexts = [ask(phone) for _ in range(args.queries)]
                embeddings = []
                for i in range(args.queries):
                    text = questions[(used + i) % len(questions)] + f" [{size}:{i}]"
                    t = time.perf_counter()
                    encoder.encode_query([text])
                    embeddings.append((time.perf_counter() - t) * 1000)
                after_archive = []
                posted = size + 20
                for _ in range(args.archives):
                    post(phone, posted, 41)  # past the trigger: the next turn archives
                    posted += 41
                    after_archive.append(ask(phone))
                rows.append(
                    {
                        "archived turns": held,
                        "context p50 ms": p50(contexts),
                        "one query embedding p50 ms": p50(embeddings),
                        "ratio": round(p50(contexts) / p50(embeddings), 2),
                        "first context after an archive ms": p50(after_archive),
                        "after an archive / p50": round(p50(after_archive) / p50(contexts), 2),
                    }
                )
                print(json.dumps(rows[-1]))
    base = rows[0]["context p50 ms"]
    for row in rows:
        row["p50 / p50 at the smallest"] = round(row["context p50 ms"] / base, 2)
    return {
        "model": args.model,
        "queries": args.queries,
        "archives": args.archives,
        "cpus": os.cpu_count(),
        "rows": rows,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# A context against one query embedding ({result['model']}, {result['cpus']} CPUs)",
        "",
        f"{result['queries']} contexts per person over HTTP (TestClient), distinct questions;"
        f" the first context after each of {result['archives']} archives.",
        "",
        "| archived turns | context p50 ms | one embedding p50 ms | ratio | p50 / p50 at"
        " the smallest | first after an archive ms | after an archive / p50 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['archived turns']:,} | {r['context p50 ms']} |"
            f" {r['one query embedding p50 ms']} | {r['ratio']} |"
            f" {r['p50 / p50 at the smallest']} | {r['first context after an archive ms']} |"
            f" {r['after an archive / p50']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=SIZES)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--archives", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    result = run(args)
    text = markdown(result)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "working_set.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "working_set.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
