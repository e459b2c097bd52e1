"""What the context holds: evidence turns in the context an agent gets, and its size.

Each conversation of a LoCoMo-format set becomes one person, replayed turn by turn as
benchmarks/bench_recall.py does (speaker_a -> user, speaker_b -> assistant; compaction with no
model archives all but the newest 20 turns whenever more than 40 wait; each session's
observations stored as approved facts citing their turns). Every question is then asked as
the context's query, through HTTP (`GET .../context`, FastAPI's TestClient on the app), with
the server's defaults unless a configuration says otherwise.

Per question:
- turns: share of its evidence turns in the history or the excerpts (LoCoMo's retrieval
  metric; the issue's figure);
- facts: share covered by the facts returned (each fact covers the turns it cites);
- context: history + excerpts + facts;
- size: characters of what the model reads (notes, the history's turns, the excerpts' text),
  and XLM-R tokens of the same text (the default model's tokenizer).

With `--staff`, each question is also asked of staff search with its defaults, across everyone
replayed (`POST /v1/search`, top 10): staff_top10 is the share of questions with an evidence
turn on that page, staff_person_first the share whose first result is the right person's (a
question that names no one, as the multilingual set's first-person ones, cannot be placed).

Baselines at equal size, per question: plain dense retrieval over single turns (each turn's
own words embedded alone, cosine over all of the person's turns) given as many characters as
that question's history + excerpts took; and the same list cut at ten turns (dense top-10).

Parts: LoCoMo's conversations 0-4 are its dev part and 5-9 its test part; the multilingual
set's parts are listed in its README; the support set is held out (test only). Tune with
`--part dev`; report with `--part test`.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_context.py --part dev
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_context.py \\
        --data benchmarks/data/support/chats.json --part test --out benchmarks/results

With `--names`, each person's name (the set's speaker_a) is set through `PUT .../name` after
the replay, as an agent that passes on the WhatsApp profile name would; without it the server
knows only the names it learns from the chat (the independent check sets none).

`--grid NAME=V1,V2 ...` sweeps settings on the same replay (dev parts only):
excerpt_budget_chars, excerpt_k, excerpt_mode, neighbours, spread, short_weight, names (0/1),
weight (the hybrid's semantic weight), scale (BM25's squashing scale), gate (places a
neighbour ranks lower per unit of cosine it falls short of its hit's), other_side (what the
other side's turns score times when a question names one side of the chat).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402
from tqdm import tqdm  # noqa: E402

import server.conversation as conversation  # noqa: E402
import server.words as words  # noqa: E402
from benchmarks.bench_recall import (  # noqa: E402
    AGENT,
    BenchClock,
    Person,
    Question,
    questions_of,
    replay,
    sessions_of,
)
from server.app import create_app  # noqa: E402
from server.config import DEFAULT_MODEL, Settings  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
ADMIN = "bench-context-admin-key-0123456789"
PARTS: dict[str, dict[str, list[str]]] = {
    "locomo": {
        "dev": ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43"],
        "test": ["conv-44", "conv-47", "conv-48", "conv-49", "conv-50"],
    },
    "multilingual": {
        "dev": ["ml-01-lucia", "ml-02-javier", "ml-05-emily", "ml-06-tom", "ml-08-diego"],
        "test": ["ml-03-camila", "ml-04-andres", "ml-07-priya", "ml-09-valeria", "ml-10-marcos"],
    },
}
# Settings a grid may sweep that are module constants, not request parameters.
KNOBS = {
    "neighbours",
    "short_weight",
    "names",
    "spread",
    "weight",
    "scale",
    "gate",
    "other_side",
}


def set_name(data: Path) -> str:
    if "multilingual" in str(data):
        return "multilingual"
    if "support" in str(data):
        return "support"
    return "locomo"


def chosen_samples(samples: list[dict[str, Any]], data: Path, part: str) -> list[int]:
    name = set_name(data)
    if part == "all":
        return list(range(len(samples)))
    if name == "support":
        if part != "test":
            raise SystemExit("the support set is held out: --part test (or all) only")
        return list(range(len(samples)))
    wanted = set(PARTS[name][part])
    found = [i for i, s in enumerate(samples) if str(s.get("sample_id")) in wanted]
    if len(found) != len(wanted):
        raise SystemExit(f"{data}: the {part} part names samples the file does not hold")
    return found


@contextmanager
def knobs(config: dict[str, Any]) -> Iterator[None]:
    """Module constants a configuration changes, put back afterwards."""
    saved = (conversation.EXCERPT_NEIGHBOURS, words.SHORT_TURN_WEIGHT)
    saved_spread = conversation.EXCERPT_SPREAD
    saved_calibration = conversation.calibration_for
    saved_without = conversation.without_names
    try:
        if "neighbours" in config:
            conversation.EXCERPT_NEIGHBOURS = int(config["neighbours"])
        if "spread" in config:
            conversation.EXCERPT_SPREAD = float(config["spread"])
        fusion = {
            field: float(config[knob])
            for knob, field in (
                ("weight", "excerpt_weight"),
                ("scale", "excerpt_scale"),
                ("gate", "excerpt_gate"),
                ("other_side", "excerpt_other_side"),
            )
            if knob in config
        }
        if fusion:
            conversation.calibration_for = lambda name: dataclasses.replace(  # type: ignore[assignment]
                saved_calibration(name), **fusion
            )
        if "short_weight" in config:
            words.SHORT_TURN_WEIGHT = float(config["short_weight"])
        if "names" in config and not int(config["names"]):
            conversation.without_names = lambda query, names: query  # type: ignore[assignment]
        yield
    finally:
        conversation.EXCERPT_NEIGHBOURS, words.SHORT_TURN_WEIGHT = saved
        conversation.EXCERPT_SPREAD = saved_spread
        conversation.calibration_for = saved_calibration
        conversation.without_names = saved_without


class Tokens:
    """XLM-R tokens (the default model's tokenizer), or None when it cannot be loaded."""

    def __init__(self) -> None:
        self._tokenizer: Any = None
        try:
            from embeddings.e5_onnx import TOKENIZER_FILE, ensure_built
            from embeddings.e5_tokenizer import E5Tokenizer

            self._tokenizer = E5Tokenizer.load(ensure_built() / TOKENIZER_FILE)
        except Exception:  # sizes in characters still stand
            self._tokenizer = None

    def count(self, text: str) -> int | None:
        if self._tokenizer is None:
            return None
        return len(self._tokenizer.content_ids(text))


def ask(
    client: TestClient,
    person: Person,
    recent: list[int],
    question: Question,
    params: dict[str, Any],
    tokens: Tokens,
) -> dict[str, Any]:
    response = client.get(
        f"/v1/agents/{AGENT}/people/{person.phone}/context",
        params={"query": question.text, **params},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    response.raise_for_status()
    body = response.json()
    turns = {e["id"] for e in body["excerpts"]}
    # History turns are the newest of the person's recent turns (nothing is written while the
    # questions are asked): the last len(history) of them.
    history = set(recent[len(recent) - len(body["history"]) :]) if body["history"] else set()
    facts: set[int] = set()
    for fact in body["facts"]:
        facts |= person.fact_turns.get(fact["id"], frozenset())
    evidence = question.evidence
    text = "\n".join(
        [body["notes"], *(h["content"] for h in body["history"]), body.get("excerpts_text", "")]
    )
    covered_turns = history | turns
    return {
        "missed": sorted(evidence - covered_turns),
        "turns": len(evidence & covered_turns) / len(evidence),
        "facts": len(evidence & facts) / len(evidence),
        "context": len(evidence & (covered_turns | facts)) / len(evidence),
        "chars": len(text),
        "turn_chars": sum(len(h["content"]) for h in body["history"])
        + len(body.get("excerpts_text", "")),
        "tokens": tokens.count(text),
        "excerpts": len(body["excerpts"]),
        "windows": len({e["window"] for e in body["excerpts"]}),
        "short_hits": sum(1 for e in body["excerpts"] if e["hit"] and words.is_short(e["content"])),
        "hits": sum(1 for e in body["excerpts"] if e["hit"]),
        "evidence_hits": sum(1 for e in body["excerpts"] if e["hit"] and e["id"] in evidence),
        "any_fact": float(bool(body["facts"])),
        "any_hit": float(any(e["hit"] for e in body["excerpts"])),
        "excerpt_texts": [
            f"{'*' if e['hit'] else ' '} {e['id']} {e['content'][:80]}" for e in body["excerpts"]
        ],
    }


OFFTOPIC = ROOT / "benchmarks" / "data" / "offtopic.json"
OTHERS_PER_PERSON = 40


def offtopic(
    client: TestClient,
    people: list[Person],
    questions: list[Question],
    part: str,
    params: dict[str, Any],
    quiet: bool,
) -> dict[str, dict[str, float | int]]:
    """Questions about nothing each person said, through the context API: the part's
    greetings and unrelated questions (benchmarks/data/offtopic.json; "all" asks the test
    part's), and up to 40 of the other people's questions (seeded). Per kind: how many were
    asked, the share whose context carried any fact, and the share with an excerpt marked a
    hit."""
    data = json.loads(OFFTOPIC.read_text(encoding="utf-8"))[part if part != "all" else "test"]
    asked: dict[str, list[tuple[bool, bool]]] = {"greeting": [], "unrelated": [], "other": []}
    jobs: list[tuple[Person, str, str]] = []
    for person in people:
        for kind in ("greeting", "unrelated"):
            jobs += [(person, kind, text) for text in data[kind]]
        others = [q.text for q in questions if q.conv != person.index]
        random.Random(person.index).shuffle(others)
        jobs += [(person, "other", text) for text in others[:OTHERS_PER_PERSON]]
    for person, kind, text in tqdm(jobs, desc="off-topic", unit="q", disable=quiet, leave=False):
        response = client.get(
            f"/v1/agents/{AGENT}/people/{person.phone}/context",
            params={"query": text, **params},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        response.raise_for_status()
        body = response.json()
        asked[kind].append((bool(body["facts"]), any(e["hit"] for e in body["excerpts"])))
    out: dict[str, dict[str, float | int]] = {}
    every = [pair for pairs in asked.values() for pair in pairs]
    for kind, pairs in [*asked.items(), ("all", every)]:
        out[kind] = {
            "questions": len(pairs),
            "any_fact": round(100 * statistics.fmean(f for f, _ in pairs), 1) if pairs else 0.0,
            "any_hit": round(100 * statistics.fmean(h for _, h in pairs), 1) if pairs else 0.0,
        }
    return out


def missed_row(
    services: Any, person: Person, question: Question, row: dict[str, Any], config: dict[str, Any]
) -> dict[str, Any]:
    """One question the context missed evidence of: the missing turns' text, for reading."""
    by_id = {m.id: m for m in services.store.all_messages(AGENT, person.phone)}
    return {
        "config": config,
        "conversation": person.sample_id,
        "category": question.category,
        "question": question.text,
        "missed": [
            {"id": i, "role": by_id[i].role, "text": by_id[i].content}
            for i in row["missed"]
            if i in by_id
        ],
        "excerpts": row.get("excerpt_texts", []),
    }


def staff(client: TestClient, person: Person, question: Question) -> dict[str, Any]:
    """Staff search with its defaults, across everyone replayed (`POST /v1/search`, top 10):
    is an evidence turn on the first page, and is the first result the right person's?"""
    response = client.post(
        "/v1/search",
        json={"query": question.text, "limit": 10},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    response.raise_for_status()
    items = response.json()["items"]
    turns = {int(i["id"]) for i in items if i["kind"] == "turns"}
    return {
        "staff_top10": 1.0 if question.evidence & turns else 0.0,
        "staff_person_first": 1.0 if items and items[0]["phone"] == person.phone else 0.0,
        "staff_items": [
            f"{'=' if i['phone'] == person.phone else 'x'} {i['kind'][0]} {i['score']:.3f}"
            f" {i['text'][:80]}"
            for i in items
        ],
    }


def dense_at_size(
    dense: dict[int, tuple[list[int], list[int], Any]],
    encoder: Any,
    person: Person,
    question: Question,
    chars: int,
) -> dict[str, float]:
    """Plain dense over single turns: best turns by cosine until `chars` are spent; and the
    best ten."""
    ids, lengths, vectors = dense[person.index]
    scores = vectors @ encoder.encode_query([question.text])[0]
    order = sorted(range(len(ids)), key=lambda i: -float(scores[i]))
    spent, kept = 0, []
    for i in order:
        if spent + lengths[i] > chars:
            break
        spent += lengths[i]
        kept.append(ids[i])
    evidence = question.evidence
    top10 = {ids[i] for i in order[:10]}
    return {
        "dense_equal": len(evidence & set(kept)) / len(evidence),
        "dense_equal_turns": len(kept),
        "dense_top10": len(evidence & top10) / len(evidence),
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def mean(key: str) -> float | None:
        values = [r[key] for r in rows if r.get(key) is not None]
        return round(100 * statistics.fmean(values), 1) if values else None

    def median(key: str) -> float | None:
        values = [r[key] for r in rows if r.get(key) is not None]
        return round(statistics.median(values)) if values else None

    return {
        "questions": len(rows),
        "turns": mean("turns"),
        "facts": mean("facts"),
        "context": mean("context"),
        "dense_equal": mean("dense_equal"),
        "dense_top10": mean("dense_top10"),
        "staff_top10": mean("staff_top10"),
        "staff_person_first": mean("staff_person_first"),
        "median_chars": median("chars"),
        "median_tokens": median("tokens"),
        "median_turn_chars": median("turn_chars"),
        "median_excerpts": median("excerpts"),
        "short_hit_share": round(
            100 * sum(r["short_hits"] for r in rows) / max(1, sum(r["hits"] for r in rows)), 1
        ),
        # The relevance scale (issue 41): questions with any fact, with any excerpt marked a
        # hit, and the share of hits that are evidence turns.
        "any_fact": mean("any_fact"),
        "any_hit": mean("any_hit"),
        "hit_precision": round(
            100 * sum(r["evidence_hits"] for r in rows) / max(1, sum(r["hits"] for r in rows)), 1
        ),
    }


def configs_of(grid: Sequence[str]) -> list[dict[str, Any]]:
    axes: list[tuple[str, list[str]]] = []
    for item in grid:
        name, _, values = item.partition("=")
        axes.append((name.strip(), [v for v in values.split(",") if v]))
    if not axes:
        return [{}]
    return [
        dict(zip([a for a, _ in axes], combo, strict=True))
        for combo in itertools.product(*(v for _, v in axes))
    ]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--part", choices=("dev", "test", "all"), default="test")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--grid", nargs="*", default=[], help="NAME=V1,V2 ... (dev only)")
    parser.add_argument("--out", type=Path, default=None, help="write context.<set>.<part>.*")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument(
        "--misses",
        type=Path,
        default=None,
        help="write each question whose evidence turns the context missed (JSON lines; dev only)",
    )
    parser.add_argument(
        "--staff", action="store_true", help="also ask each question of staff search (top 10)"
    )
    parser.add_argument(
        "--offtopic",
        action="store_true",
        help="also ask each person questions about nothing she said (benchmarks/data/"
        "offtopic.json's greetings and unrelated questions of the part, and up to 40 of the"
        " other people's questions): how often the context carries a fact or a hit",
    )
    parser.add_argument(
        "--names",
        action="store_true",
        help="set each person's name (speaker_a's) through PUT .../name, as an agent that gets"
        " the WhatsApp profile name would",
    )
    args = parser.parse_args(argv)
    if args.grid and args.part != "dev":
        parser.error("--grid tunes: only on --part dev")
    if args.misses and args.part != "dev":
        parser.error("--misses is for tuning: only on --part dev")
    logging.basicConfig(level=logging.WARNING)
    samples: list[dict[str, Any]] = json.loads(args.data.read_text(encoding="utf-8"))
    chosen = chosen_samples(samples, args.data, args.part)
    configs = configs_of(args.grid)
    started = time.perf_counter()
    clock = BenchClock()
    tokens = Tokens()
    results: list[dict[str, Any]] = []
    misses: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-context-") as tmp:
        settings = Settings(  # type: ignore[call-arg]
            data_dir=Path(tmp), embedding_model=args.model, admin_key=ADMIN
        )
        app = create_app(settings, clock=clock, run_workers=False)
        with TestClient(app) as client:
            services = app.state.services
            people: list[Person] = []
            recent: dict[int, list[int]] = {}
            total = sum(
                len(samples[i]["conversation"][f"session_{n}"])
                for i in chosen
                for n in sessions_of(samples[i]["conversation"])
            )
            with tqdm(total=total, desc="replay", unit="turn", disable=args.quiet) as bar:
                for i in chosen:
                    person = Person(i, str(samples[i].get("sample_id", i)), f"+1555000{i:04d}")
                    replay(services, samples[i], person, clock, bar)
                    name = samples[i]["conversation"].get("speaker_a")
                    if args.names and name:
                        client.put(
                            f"/v1/agents/{AGENT}/people/{person.phone}/name",
                            json={"name": name},
                            headers={"Authorization": f"Bearer {ADMIN}"},
                        ).raise_for_status()
                    newest = services.store.recent_turns(AGENT, person.phone, 10_000)
                    recent[i] = [m.id for m in reversed(newest)]
                    people.append(person)
            replay_s = time.perf_counter() - started
            questions: list[Question] = []
            for person in people:
                questions += questions_of(samples[person.index], person)[0]
            by_index = {p.index: p for p in people}
            encoder = services.indexer.space.encoder
            dense: dict[int, tuple[list[int], list[int], Any]] = {}
            for person in people:
                messages = services.store.all_messages(AGENT, person.phone)
                dense[person.index] = (
                    [m.id for m in messages],
                    [len(m.content) for m in messages],
                    encoder.encode([m.content for m in messages]),
                )
            for config in configs:
                params = {k: v for k, v in config.items() if k not in KNOBS}
                rows: list[dict[str, Any]] = []
                with knobs(config):
                    label = ", ".join(f"{k}={v}" for k, v in config.items()) or "defaults"
                    for question in tqdm(
                        questions, desc=label, unit="q", disable=args.quiet, leave=False
                    ):
                        person = by_index[question.conv]
                        row = ask(client, person, recent[person.index], question, params, tokens)
                        row.update(
                            dense_at_size(dense, encoder, person, question, row["turn_chars"])
                        )
                        if args.staff:
                            row.update(staff(client, person, question))
                        row["category"] = question.category
                        rows.append(row)
                        if args.misses and row["missed"]:
                            misses.append(missed_row(services, person, question, row, config))
                        if args.misses and args.staff and row["staff_top10"] == 0.0:
                            miss = missed_row(
                                services,
                                person,
                                question,
                                {**row, "missed": question.evidence},
                                config,
                            )
                            misses.append({**miss, "staff": row["staff_items"], "excerpts": []})
                        row.pop("staff_items", None)
                summary = summarise(rows)
                by_category = {
                    str(c): summarise([r for r in rows if r["category"] == c])
                    for c in sorted({r["category"] for r in rows})
                }
                result = {"config": config, "all": summary, "by_category": by_category}
                if args.offtopic:
                    with knobs(config):
                        result["offtopic"] = offtopic(
                            client, people, questions, args.part, params, args.quiet
                        )
                    print(json.dumps({"offtopic": result["offtopic"]}), flush=True)
                results.append(result)
                print(json.dumps({"config": config, **summary}), flush=True)
    report = {
        "dataset": str(args.data),
        "set": set_name(args.data),
        "part": args.part,
        "samples": [p.sample_id for p in people],
        "model": args.model,
        "names": args.names,
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "replay_s": round(replay_s, 1),
        "seconds": round(time.perf_counter() - started, 1),
        "results": results,
    }
    if args.misses:
        args.misses.write_text("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in misses))
    text = markdown(report)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        stem = (
            f"context.{report['set']}.{args.part}"
            + (".grid" if args.grid else "")
            + (".names" if args.names else "")
            + (".offtopic" if args.offtopic else "")
        )
        (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.out / f"{stem}.md").write_text(text + "\n")
    return report


def markdown(report: dict[str, Any]) -> str:
    columns = [
        "questions",
        "turns",
        "facts",
        "context",
        "dense_equal",
        "dense_top10",
        "staff_top10",
        "staff_person_first",
        "median_chars",
        "median_tokens",
        "median_turn_chars",
        "median_excerpts",
        "short_hit_share",
        "any_fact",
        "any_hit",
        "hit_precision",
    ]
    lines = [
        f"# Context recall: {report['set']}, {report['part']} part",
        "",
        f"{len(report['samples'])} conversations ({', '.join(report['samples'])}), model"
        f" {report['model']}, {report['when']}; recall in % of evidence turns.",
        "",
        "| config | " + " | ".join(columns) + " |",
        "| --- |" + " --- |" * len(columns),
    ]
    for result in report["results"]:
        label = ", ".join(f"{k}={v}" for k, v in result["config"].items()) or "defaults"
        lines.append(
            f"| {label} | " + " | ".join(str(result["all"].get(c)) for c in columns) + " |"
        )
    for result in report["results"]:
        if "offtopic" not in result:
            continue
        label = ", ".join(f"{k}={v}" for k, v in result["config"].items()) or "defaults"
        lines += [
            "",
            f"Questions about nothing the person said ({label}): % whose context carries any"
            " fact / any excerpt marked a hit.",
            "",
            "| kind | questions | any fact | any hit |",
            "| --- | --- | --- | --- |",
        ]
        for kind, row in result["offtopic"].items():
            lines.append(f"| {kind} | {row['questions']} | {row['any_fact']} | {row['any_hit']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
