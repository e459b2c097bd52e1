"""Retrieval recall on LoCoMo, through the server's own code path (in-process, no HTTP).

Each LoCoMo conversation becomes one person (agent "locomo", phone +1555000000N). Its turns
are replayed in order with MemoryService.remember (speaker_a -> role "user", speaker_b ->
"assistant"; an image turn's BLIP caption is appended as "[shared a photo of ...]"), so
compaction archives all but the newest 20 waiting turns whenever more than 40 wait. After each
session, its LLM-written `observation` entries are stored as approved facts whose source_turns
are the message ids of the dia_ids they cite. Then the indexer drains and every QA question is
asked as the query.

Recall of a question = share of its evidence turns covered by what is returned (the LoCoMo
paper's retrieval metric): a turn is covered when it is in the history (the recent,
unarchived window) or among the excerpts; a fact covers the turns of its source_turns.
Evidence ids are normalised (split on ";" and whitespace, "D:11:26" -> "D11:26",
"D30:05" -> "D30:5"); ids that still name no turn are dropped; questions left with no
evidence (4 of category 3) are skipped. Category 5 (adversarial) has evidence and is kept;
"all 1-4" leaves it out, as most LoCoMo reports do.

Methods (one run): history only; turns (history + excerpts) per excerpt mode and k; facts per
k (threshold 0); context (history + excerpts + facts at the same k); the seed design (newest
60 turns of the whole conversation + newest 30 facts, no retrieval); dense with no floor and
at 0.7 (k=10) for facts and for turns (history + semantic excerpts from the server's index);
plain dense top-10 over single turns (each turn's own words embedded alone, cosine over all of
the person's turns, nothing else: the textbook baseline); the server defaults (build_context
with only the query); and a threshold sweep for facts and semantic excerpts at k=10.

Run with:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_recall.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tqdm import tqdm  # noqa: E402

import embeddings.index as index_module  # noqa: E402
from benchmarks.locomo import clean_dia_ids, turn_content  # noqa: E402
from embeddings.encoder import Encoder  # noqa: E402
from server.app import open_services  # noqa: E402
from server.config import DEFAULT_MODEL, Settings  # noqa: E402
from server.conversation import ContextRequest  # noqa: E402
from server.deps import Services  # noqa: E402

EncoderFactory = Callable[[str], Encoder]

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
AGENT = "locomo"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
MODES = ("semantic", "keyword", "hybrid")
NO_FLOOR = -1.0  # the lowest cosine there is: no threshold at all
SESSION = re.compile(r"^session_(\d+)$")
DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"


# -- data --------------------------------------------------------------------------------------


def session_time(text: str | None, fallback: datetime) -> datetime:
    if text:
        try:
            return datetime.strptime(text.strip(), DATE_FORMAT).replace(tzinfo=UTC)
        except ValueError:
            pass
    return fallback


def select_conversations(samples: list[dict[str, Any]], spec: str | None) -> list[int]:
    """None: all. "3": the first three. "0,4" or "2-5" or "conv-26,conv-30": those ones."""
    if not spec:
        return list(range(len(samples)))
    spec = spec.strip()
    if spec.isdigit():
        return list(range(min(int(spec), len(samples))))
    by_id = {str(s.get("sample_id")): i for i, s in enumerate(samples)}
    chosen: list[int] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part in by_id:
            chosen.append(by_id[part])
        elif re.fullmatch(r"\d+-\d+", part):
            a, b = (int(x) for x in part.split("-"))
            chosen.extend(range(a, b + 1))
        else:
            chosen.append(int(part))
    bad = [i for i in chosen if not 0 <= i < len(samples)]
    if bad:
        raise SystemExit(f"--conversations: no conversation {bad} (there are {len(samples)})")
    return sorted(set(chosen))


@dataclass
class Question:
    conv: int
    category: int
    text: str
    evidence: frozenset[int]  # message ids


@dataclass
class Person:
    index: int
    sample_id: str
    phone: str
    dia_to_message: dict[str, int] = field(default_factory=dict)
    fact_turns: dict[str, frozenset[int]] = field(default_factory=dict)
    seed_turns: frozenset[int] = frozenset()
    turns: int = 0
    facts: int = 0
    archived: int = 0


class BenchClock:
    """The clock of the services: set to each session's time so facts get realistic dates."""

    def __init__(self) -> None:
        self.now = datetime(2023, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def sessions_of(conversation: dict[str, Any]) -> list[int]:
    numbers = [int(m[1]) for key in conversation if (m := SESSION.match(key))]
    return sorted(n for n in numbers if isinstance(conversation.get(f"session_{n}"), list))


def replay(
    services: Services,
    sample: dict[str, Any],
    person: Person,
    clock: BenchClock,
    bar: tqdm,  # type: ignore[type-arg]
) -> None:
    """Store the conversation turn by turn, each session's observations as facts after it."""
    memory = services.memory
    conversation = sample["conversation"]
    speaker_a = conversation.get("speaker_a")
    observations = sample.get("observation") or {}
    moment = datetime(2023, 1, 1, tzinfo=UTC)
    for number in sessions_of(conversation):
        moment = session_time(
            conversation.get(f"session_{number}_date_time"), moment + timedelta(days=1)
        )
        turn_time = moment
        for turn in conversation[f"session_{number}"]:
            role = "user" if turn.get("speaker") == speaker_a else "assistant"
            message_id, _ = memory.remember(
                AGENT,
                person.phone,
                role=role,
                content=turn_content(turn),
                created_at=iso(turn_time),
            )
            person.dia_to_message[str(turn["dia_id"])] = message_id
            person.turns += 1
            turn_time += timedelta(seconds=30)
            bar.update(1)
        clock.now = turn_time
        by_speaker = observations.get(f"session_{number}_observation") or {}
        for entries in by_speaker.values():
            for entry in entries:
                if not entry:
                    continue
                cited = clean_dia_ids(entry[1]) if len(entry) > 1 else []
                source = [person.dia_to_message[d] for d in cited if d in person.dia_to_message]
                memory.add_memory(
                    AGENT,
                    person.phone,
                    str(entry[0]),
                    type="fact",
                    status="approved",
                    source="extracted",
                    source_turns=source,
                )
                person.facts += 1
                clock.now += timedelta(milliseconds=1)
    services.indexer.drain()
    store = services.store
    facts = store.person_memories(AGENT, person.phone)
    stored = store.memories_by_ids([m.id for m in facts])
    person.fact_turns = {mid: frozenset(m.source_turns) for mid, m in stored.items()}
    person.archived = person.turns - store.waiting_turns(AGENT, person.phone)
    everything = store.all_messages(AGENT, person.phone)
    person.seed_turns = frozenset(m.id for m in everything[-60:])


def questions_of(sample: dict[str, Any], person: Person) -> tuple[list[Question], dict[str, int]]:
    skipped = {"no_evidence": 0, "unresolved_ids": 0}
    found: list[Question] = []
    for qa in sample.get("qa", []):
        ids = clean_dia_ids(qa.get("evidence") or [])
        resolved = [person.dia_to_message[d] for d in ids if d in person.dia_to_message]
        skipped["unresolved_ids"] += len([d for d in ids if d not in person.dia_to_message])
        if not resolved:
            skipped["no_evidence"] += 1
            continue
        found.append(
            Question(person.index, int(qa["category"]), str(qa["question"]), frozenset(resolved))
        )
    return found, skipped


# -- retrieval ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One method's answer to one question: the turns it covers and how many items it gave."""

    covered: frozenset[int]
    items: int


def recall(evidence: frozenset[int], covered: frozenset[int]) -> float:
    return len(evidence & covered) / len(evidence)


def ask(
    services: Services,
    person: Person,
    question: Question,
    *,
    ks: Sequence[int],
    modes: Sequence[str],
    thresholds: Sequence[float],
) -> dict[str, Outcome]:
    """Every method for one question. build_context for the grid and the defaults; the same
    MemoryService.search_facts / search_excerpts it calls, for the sweep and the baselines."""
    memory = services.memory
    phone = person.phone
    query = question.text
    out: dict[str, Outcome] = {}

    def fact_cover(ids: Sequence[str]) -> frozenset[int]:
        turns: set[int] = set()
        for mid in ids:
            turns |= person.fact_turns.get(mid, frozenset())
        return frozenset(turns)

    # The server's defaults (12,000-character budget, hybrid excerpts k=15, facts k=10 at 0.7).
    default = memory.build_context(AGENT, phone, ContextRequest(query=query))
    d_turns = frozenset(m.id for m in default.history) | frozenset(e.id for e in default.excerpts)
    d_facts = fact_cover([f.id for f in default.facts])
    out["default"] = Outcome(d_turns | d_facts, len(d_turns) + len(default.facts))
    # The two targets: history + excerpts, and facts, each with the server's defaults.
    out["default:turns"] = Outcome(d_turns, len(d_turns))
    out["default:facts"] = Outcome(d_facts, len(default.facts))
    history: frozenset[int] = frozenset()

    for mode in modes:
        for k in ks:
            ctx = memory.build_context(
                AGENT,
                phone,
                ContextRequest(
                    query=query,
                    k=k,
                    threshold=0.0,
                    excerpt_k=k,
                    excerpt_threshold=0.0,
                    excerpt_mode=mode,
                    max_messages=60,
                    budget_chars=10**9,
                ),
            )
            history = frozenset(m.id for m in ctx.history)  # the same for every request
            out.setdefault("history", Outcome(history, len(history)))
            turns = history | frozenset(e.id for e in ctx.excerpts)
            facts = fact_cover([f.id for f in ctx.facts])
            out[f"turns:{mode}:k{k}"] = Outcome(turns, len(turns))
            out[f"context:{mode}:k{k}"] = Outcome(turns | facts, len(turns) + len(ctx.facts))
            if f"facts:k{k}" not in out:
                out[f"facts:k{k}"] = Outcome(facts, len(ctx.facts))

    vector = services.indexer.space.encoder.encode_query([query])[0]
    cache: dict[tuple[str, float], Outcome] = {}

    def facts_at(threshold: float) -> Outcome:
        key = ("facts", threshold)
        if key not in cache:
            hits = memory.search_facts(AGENT, phone, vector, k=10, threshold=threshold)
            cache[key] = Outcome(fact_cover([h.id for h in hits]), len(hits))
        return cache[key]

    def excerpts_at(threshold: float) -> Outcome:
        key = ("excerpts", threshold)
        if key not in cache:
            hits = memory.search_excerpts(
                AGENT, phone, vector, query, k=10, threshold=threshold, mode="semantic"
            )
            cache[key] = Outcome(frozenset(h.id for h in hits), len(hits))
        return cache[key]

    for t in thresholds:
        f, e = facts_at(t), excerpts_at(t)
        out[f"sweep:facts@{t:.2f}"] = f
        out[f"sweep:excerpts@{t:.2f}"] = e
        out[f"sweep:turns@{t:.2f}"] = Outcome(history | e.covered, len(history | e.covered))
    for name, t in (("nofloor", NO_FLOOR), ("0.7", 0.7)):
        f, e = facts_at(t), excerpts_at(t)
        out[f"dense:facts:{name}:k10"] = f
        out[f"dense:turns:{name}:k10"] = Outcome(history | e.covered, len(history | e.covered))
    return out


# -- reporting ---------------------------------------------------------------------------------


def summarise(
    questions: Sequence[Question], per_method: dict[str, list[Outcome]]
) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for method, outcomes in per_method.items():
        scores = [recall(q.evidence, o.covered) for q, o in zip(questions, outcomes, strict=True)]
        row: dict[str, Any] = {"by_category": {}}
        for cat in sorted({q.category for q in questions}):
            picked = [s for s, q in zip(scores, questions, strict=True) if q.category == cat]
            row["by_category"][str(cat)] = {"n": len(picked), "recall": statistics.fmean(picked)}
        core = [s for s, q in zip(scores, questions, strict=True) if q.category != 5]
        row["all_1_4"] = statistics.fmean(core) if core else None
        row["all"] = statistics.fmean(scores)
        row["n"] = len(scores)
        row["mean_items"] = statistics.fmean(o.items for o in outcomes)
        results[method] = row
    return results


def table_methods(ks: Sequence[int], modes: Sequence[str]) -> list[str]:
    names = ["seed", "history", "default", "default:turns", "default:facts"]
    names += [f"turns:{m}:k{k}" for m in modes for k in ks]
    names += [f"facts:k{k}" for k in ks]
    names += [f"context:{m}:k{k}" for m in modes for k in ks]
    names += [
        f"dense:{w}:{t}:k10" for w in ("facts", "turns", "single-turns") for t in ("nofloor", "0.7")
    ]
    return names


class SingleTurns:
    """Plain dense retrieval over single turns: every turn of a person embedded alone."""

    def __init__(self, services: Services, people: Sequence[Person]) -> None:
        self._encoder = services.indexer.space.encoder
        self._turns: dict[int, tuple[list[int], Any]] = {}
        for person in people:
            messages = services.store.all_messages(AGENT, person.phone)
            vectors = self._encoder.encode([m.content for m in messages])
            self._turns[person.index] = ([m.id for m in messages], vectors)

    def outcomes(self, person: Person, query: str, k: int = 10) -> dict[str, Outcome]:
        ids, vectors = self._turns[person.index]
        scores = vectors @ self._encoder.encode_query([query])[0]
        best = sorted(range(len(ids)), key=lambda i: -float(scores[i]))[:k]
        out = {}
        for name, floor in (("nofloor", NO_FLOOR), ("0.7", 0.7)):
            kept = frozenset(ids[i] for i in best if float(scores[i]) >= floor)
            out[f"dense:single-turns:{name}:k{k}"] = Outcome(kept, len(kept))
        return out


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown(report: dict[str, Any]) -> str:
    results = report["results"]
    cats = sorted({c for r in results.values() for c in r["by_category"]}, key=int)
    head = ["method", *[f"{c} {CATEGORIES.get(int(c), '')}".strip() for c in cats]]
    head += ["all 1-4", "all 1-5", "items"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in report["table_methods"]:
        row = results.get(name)
        if row is None:
            continue
        cells = [name, *[fmt(row["by_category"].get(c, {}).get("recall")) for c in cats]]
        cells += [fmt(row["all_1_4"]), fmt(row["all"]), f"{row['mean_items']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Threshold sweep at k=10 (facts; semantic excerpts; history + semantic excerpts),"
        " recall over all 1-5 and mean items returned:",
        "",
        "| threshold | facts | facts items | excerpts | excerpt items | history+excerpts |",
        "|---|---|---|---|---|---|",
    ]
    for t in report["config"]["thresholds"]:
        f = results[f"sweep:facts@{t:.2f}"]
        e = results[f"sweep:excerpts@{t:.2f}"]
        h = results[f"sweep:turns@{t:.2f}"]
        lines.append(
            f"| {t:.2f} | {fmt(f['all'])} | {f['mean_items']:.2f} | {fmt(e['all'])}"
            f" | {e['mean_items']:.2f} | {fmt(h['all'])} |"
        )
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install matplotlib)")
        return False
    results = report["results"]
    ks = report["config"]["k"]
    modes = report["config"]["modes"]
    thresholds = report["config"]["thresholds"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    series = {f"turns {m}": [f"turns:{m}:k{k}" for k in ks] for m in modes}
    series["facts"] = [f"facts:k{k}" for k in ks]
    for label, names in series.items():
        left.plot(ks, [results[n]["all"] for n in names], marker="o", label=label)
    left.axhline(results["seed"]["all"], color="grey", linestyle="--", label="seed (60+30)")
    left.axhline(results["history"]["all"], color="grey", linestyle=":", label="history only")
    left.set(xlabel="k", ylabel="recall (all questions)", title="Recall vs k", ylim=(0, 1))
    left.legend(fontsize=8)
    for label, prefix in (
        ("facts", "sweep:facts"),
        ("semantic excerpts", "sweep:excerpts"),
        ("history + excerpts", "sweep:turns"),
    ):
        right.plot(
            thresholds,
            [results[f"{prefix}@{t:.2f}"]["all"] for t in thresholds],
            marker="o",
            label=label,
        )
    right.set(xlabel="cosine threshold", ylabel="recall", title="Recall vs threshold (k=10)")
    right.set_ylim(0, 1)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


# -- main --------------------------------------------------------------------------------------


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo10.json")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="embedding model")
    parser.add_argument("--k", type=ints, default=[5, 10, 25], help="k values, e.g. 5,10,25")
    parser.add_argument(
        "--threshold",
        type=floats,
        default=[round(0.1 * i, 1) for i in range(9)],
        help="thresholds of the sweep at k=10 (default 0.0,0.1,...,0.8)",
    )
    parser.add_argument(
        "--mode", type=lambda s: s.split(","), default=list(MODES), help="excerpt modes"
    )
    parser.add_argument(
        "--conversations", default=None, help="a count (3) or a list (0,4 / 2-5 / conv-26)"
    )
    parser.add_argument("--out", type=Path, default=None, help="write recall.json/.md/.png here")
    parser.add_argument("--compact-trigger", type=int, default=40)
    parser.add_argument("--compact-keep", type=int, default=20)
    parser.add_argument(
        "--keyword-analysis",
        default=index_module.KEYWORD_ANALYSIS,
        choices=sorted(index_module.KEYWORD_ANALYSES),
        help="how the full-text index reads text (stemming, stop words)",
    )
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    bad = [m for m in args.mode if m not in MODES]
    if bad:
        parser.error(f"--mode: unknown {bad}; choose from {MODES}")
    return args


def main(
    argv: Sequence[str] | None = None, *, encoder_factory: EncoderFactory | None = None
) -> dict[str, Any]:
    args = parse_args(argv)
    index_module.KEYWORD_ANALYSIS = args.keyword_analysis
    logging.basicConfig(level=logging.WARNING)
    samples: list[dict[str, Any]] = json.loads(Path(args.data).read_text(encoding="utf-8"))
    chosen = select_conversations(samples, args.conversations)
    started = time.perf_counter()
    clock = BenchClock()
    with tempfile.TemporaryDirectory(prefix="bench-recall-") as tmp:
        settings = Settings(  # type: ignore[call-arg]
            data_dir=Path(tmp),
            embedding_model=args.model,
            compact_trigger=args.compact_trigger,
            compact_keep=args.compact_keep,
        )
        services = open_services(settings, clock=clock, encoder_factory=encoder_factory)
        model_seconds = time.perf_counter() - started
        people: list[Person] = []
        total_turns = sum(
            len(samples[i]["conversation"][f"session_{n}"])
            for i in chosen
            for n in sessions_of(samples[i]["conversation"])
        )
        replay_started = time.perf_counter()
        with tqdm(total=total_turns, desc="replay", unit="turn", disable=args.quiet) as bar:
            for i in chosen:
                person = Person(i, str(samples[i].get("sample_id", i)), f"+1555000{i:04d}")
                replay(services, samples[i], person, clock, bar)
                people.append(person)
        replay_seconds = time.perf_counter() - replay_started

        questions: list[Question] = []
        skipped = {"no_evidence": 0, "unresolved_ids": 0}
        for person in people:
            found, miss = questions_of(samples[person.index], person)
            questions += found
            for key, value in miss.items():
                skipped[key] += value
        by_index = {p.index: p for p in people}
        seed_facts = {
            p.index: {
                m.id
                for m in services.store.newest_memories(AGENT, p.phone, status="approved", limit=30)
            }
            for p in people
        }
        single = SingleTurns(services, people)
        per_method: dict[str, list[Outcome]] = {}
        ask_started = time.perf_counter()
        for question in tqdm(questions, desc="questions", unit="q", disable=args.quiet):
            person = by_index[question.conv]
            outcomes = ask(
                services,
                person,
                question,
                ks=args.k,
                modes=args.mode,
                thresholds=args.threshold,
            )
            seed_turns = set(person.seed_turns)
            for mid in seed_facts[person.index]:
                seed_turns |= person.fact_turns.get(mid, frozenset())
            outcomes.update(single.outcomes(person, question.text))
            outcomes["seed"] = Outcome(
                frozenset(seed_turns), len(person.seed_turns) + len(seed_facts[person.index])
            )
            for name, outcome in outcomes.items():
                per_method.setdefault(name, []).append(outcome)
        ask_seconds = time.perf_counter() - ask_started
        services.indexer.stop()
        services.store.close()

    report: dict[str, Any] = {
        "dataset": str(args.data),
        "config": {
            "model": args.model,
            "keyword_analysis": args.keyword_analysis,
            "k": args.k,
            "modes": args.mode,
            "thresholds": args.threshold,
            "compact_trigger": args.compact_trigger,
            "compact_keep": args.compact_keep,
            "roles": "speaker_a -> user, speaker_b -> assistant",
            "conversations": [p.sample_id for p in people],
        },
        "counts": {
            "conversations": len(people),
            "turns": sum(p.turns for p in people),
            "archived_turns": sum(p.archived for p in people),
            "facts": sum(p.facts for p in people),
            "questions": len(questions),
            "questions_by_category": {
                str(c): sum(1 for q in questions if q.category == c)
                for c in sorted({q.category for q in questions})
            },
            "skipped_questions_no_evidence": skipped["no_evidence"],
            "dropped_unresolved_evidence_ids": skipped["unresolved_ids"],
        },
        "seconds": {
            "open_services": round(model_seconds, 1),
            "replay": round(replay_seconds, 1),
            "questions": round(ask_seconds, 1),
        },
        "table_methods": table_methods(args.k, args.mode),
        "results": summarise(questions, per_method),
    }
    table = markdown(report)
    print()
    print(table)
    print(json.dumps({"counts": report["counts"], "seconds": report["seconds"]}))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "recall.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.out / "recall.md").write_text(
            f"# Retrieval recall on {args.data.name} ({args.model})\n\n"
            f"Run with: `HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_recall.py"
            f" {' '.join(sys.argv[1:])}`\n\n"
            f"Counts: {json.dumps(report['counts'])}\n\n{table}"
        )
        if not args.no_plot and plot(report, args.out / "recall.png"):
            print(f"wrote {args.out / 'recall.png'}")
        print(f"wrote {args.out / 'recall.json'} and {args.out / 'recall.md'}")
    return report


if __name__ == "__main__":
    main()
