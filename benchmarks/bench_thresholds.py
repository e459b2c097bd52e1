"""Cosine constants per embedding model, from sweeps (issue 11: nothing carried over from MiniLM).

Models put cosines on different scales, so every score cut of the product is measured per model:

1. Duplicate threshold (compaction drops an extracted fact whose cosine to a known one reaches
   it). benchmarks/data/fact_pairs.json holds labelled pairs of short facts about a person
   (Spanish, English, code-switched): duplicates reworded, with typos, in the other language,
   shorter or longer; non-duplicates with a different value of the same attribute, negated,
   of another person, of another topic, or unrelated. Both sides are embedded in the query form
   (a symmetric comparison, as compaction does it) and "cosine >= t means duplicate" is scored
   for t = 0.50 .. 0.99: precision, recall, F1. Suggested: the lowest threshold from which
   precision stays >= 0.95 (at it and at every higher threshold): the product must rather
   miss a duplicate (a repeated fact is harmless) than merge two different facts (one is lost).

2. Excerpt floor (semantic excerpts below it are dropped). For every QA item of LoCoMo (and of
   benchmarks/data/multilingual/chats.json, in LoCoMo's format, when it exists) the question is
   embedded in the query form and every turn of its conversation in the passage form (each
   conversation's turns once per model); cosine(question, evidence turn) and cosine(question,
   other turn) are pooled over all questions. For floors 0.00 .. 0.95: the share of evidence
   and of other turns kept. Suggested: the highest floor that keeps >= 95 % of evidence turns.
   Evidence ids are normalised as in benchmarks/locomo.py; ids naming no turn are dropped and
   questions left without evidence are skipped. --window N embeds each turn with N neighbours
   each side laid out as the server's index does (server/indexer.py turn_text); default 0.

3. Facts floor (0.7 by default, the user's choice, kept): LoCoMo's `observation` entries are
   the facts, embedded in the passage form; a fact is evidence of a question when it cites one
   of the question's evidence turns. Reported: the share of evidence facts (and of the others)
   scoring >= 0.7 per model, and of questions with at least one evidence fact >= 0.7.

Run with:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_thresholds.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402
from tqdm import tqdm  # noqa: E402

from benchmarks.locomo import clean_dia_ids, turn_content  # noqa: E402
from embeddings.encoder import Encoder  # noqa: E402

Scores = npt.NDArray[np.float32]

DEFAULT_LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
DEFAULT_MULTILINGUAL = ROOT / "benchmarks" / "data" / "multilingual" / "chats.json"
DEFAULT_PAIRS = ROOT / "benchmarks" / "data" / "fact_pairs.json"
DEFAULT_OUT = ROOT / "benchmarks" / "results"
MODELS = ("multilingual-e5-small", "all-MiniLM-L6-v2")
DUPLICATE_THRESHOLDS = [round(0.50 + 0.01 * i, 2) for i in range(50)]  # 0.50 .. 0.99
FLOORS = [round(0.05 * i, 2) for i in range(20)]  # 0.00 .. 0.95
PERCENTILES = (5, 10, 25, 50, 75, 90, 95)
TARGET_PRECISION = 0.95
TARGET_KEPT = 0.95
FACTS_FLOOR = 0.7  # the product's default facts floor (MEMORY_SIMILARITY_THRESHOLD)
CURRENT_DUPLICATE = 0.9  # the value carried over from MiniLM
BATCH = 128
SESSION = re.compile(r"^session_(\d+)$")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


# -- encoders ----------------------------------------------------------------------------------


def load_encoder(name: str) -> Encoder:
    """hash:<dim> (no model, for tests), multilingual-e5-small or a sentence-transformers model.
    One engine copy each: this benchmark embeds from one thread."""
    from embeddings.hashing import hash_encoder, is_hash_model

    if is_hash_model(name):
        return hash_encoder(name)
    from embeddings.e5 import E5Encoder, is_e5_model

    if is_e5_model(name):
        return E5Encoder(copies=1)
    from embeddings.encoder import SentenceEncoder

    return SentenceEncoder(name, copies=1)


def embed(
    encode: Callable[[Sequence[str]], Any], texts: Sequence[str], desc: str, quiet: bool
) -> Scores:
    """texts in batches of BATCH, with a progress bar; unit vectors (n, dim)."""
    parts: list[Scores] = []
    with tqdm(total=len(texts), desc=desc, unit="text", disable=quiet, leave=False) as bar:
        for start in range(0, len(texts), BATCH):
            chunk = list(texts[start : start + BATCH])
            parts.append(np.asarray(encode(chunk), dtype=np.float32))
            bar.update(len(chunk))
    if not parts:
        return np.zeros((0, 1), dtype=np.float32)
    return np.concatenate(parts)


# -- statistics --------------------------------------------------------------------------------


def percentiles(values: Scores, which: Sequence[int] = PERCENTILES) -> dict[str, float | None]:
    if len(values) == 0:
        return {f"p{p}": None for p in which}
    found = np.percentile(values, list(which))
    return {f"p{p}": round(float(v), 4) for p, v in zip(which, found, strict=True)}


def share_at_least(values: Scores, floor: float) -> float | None:
    return None if len(values) == 0 else round(float(np.mean(values >= floor)), 4)


def rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


# -- 1. duplicate threshold --------------------------------------------------------------------


@dataclass
class Pair:
    a: str
    b: str
    duplicate: bool
    kind: str


def load_pairs(path: Path) -> list[Pair]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    items = raw["pairs"] if isinstance(raw, dict) else raw
    return [Pair(str(p["a"]), str(p["b"]), bool(p["duplicate"]), str(p["kind"])) for p in items]


def duplicate_sweep(encoder: Encoder, pairs: Sequence[Pair], quiet: bool) -> dict[str, Any]:
    """Both sides in the query form (symmetric); cosine >= t means duplicate."""
    left = embed(encoder.encode_query, [p.a for p in pairs], "pairs a", quiet)
    right = embed(encoder.encode_query, [p.b for p in pairs], "pairs b", quiet)
    scores = np.sum(left * right, axis=1)
    truth = np.array([p.duplicate for p in pairs], dtype=bool)
    sweep: list[dict[str, Any]] = []
    for t in DUPLICATE_THRESHOLDS:
        said = scores >= t
        tp = int(np.sum(said & truth))
        fp = int(np.sum(said & ~truth))
        fn = int(np.sum(~said & truth))
        precision = tp / (tp + fp) if tp + fp else None
        recall = tp / (tp + fn) if tp + fn else None
        f1 = (
            2 * precision * recall / (precision + recall)
            if precision is not None and recall is not None and precision + recall > 0
            else 0.0
        )
        sweep.append(
            {
                "threshold": t,
                "tp": tp,
                "fp": fp,
                "fn": fn,
                "precision": rounded(precision),
                "recall": rounded(recall),
                "f1": round(f1, 4),
            }
        )
    best = max(sweep, key=lambda r: (r["f1"], r["threshold"]))  # ties: the higher threshold
    safe: dict[str, Any] | None = None
    for row in reversed(sweep):  # from 0.99 down while precision holds
        if row["precision"] is not None and row["precision"] < TARGET_PRECISION:
            break
        if row["tp"] > 0:
            safe = row
    current = next((r for r in sweep if r["threshold"] == CURRENT_DUPLICATE), None)
    dup, non = scores[truth], scores[~truth]
    by_kind: dict[str, Any] = {}
    for kind in dict.fromkeys(p.kind for p in pairs):
        mine = np.array([p.kind == kind for p in pairs], dtype=bool)
        values = scores[mine]
        by_kind[kind] = {
            "duplicate": bool(truth[mine][0]),
            "n": int(mine.sum()),
            "mean": round(float(values.mean()), 4),
            "min": round(float(values.min()), 4),
            "max": round(float(values.max()), 4),
            "share_at_safe": (
                share_at_least(values, safe["threshold"]) if safe is not None else None
            ),
        }
    order = np.argsort(-scores)
    hardest_non = [int(i) for i in order if not truth[i]][:8]
    hardest_dup = [int(i) for i in order[::-1] if truth[i]][:8]

    def listed(indices: Sequence[int]) -> list[dict[str, Any]]:
        return [
            {"a": pairs[i].a, "b": pairs[i].b, "kind": pairs[i].kind, "cosine": float(scores[i])}
            for i in indices
        ]

    return {
        "n": len(pairs),
        "duplicates": int(truth.sum()),
        "non_duplicates": int((~truth).sum()),
        "percentiles": {"duplicate": percentiles(dup), "non_duplicate": percentiles(non)},
        "max_non_duplicate": round(float(non.max()), 4) if len(non) else None,
        "min_duplicate": round(float(dup.min()), 4) if len(dup) else None,
        "best_f1": best,
        "safe": safe,
        "current": current,
        "by_kind": by_kind,
        "hardest_non_duplicates": listed(hardest_non),
        "hardest_duplicates": listed(hardest_dup),
        "sweep": sweep,
    }


# -- 2/3. excerpt floor and facts --------------------------------------------------------------


@dataclass
class QA:
    text: str
    evidence: list[int]  # turn indices in the conversation
    group: str  # LoCoMo's category, or the multilingual file's question kind


@dataclass
class Conversation:
    sample_id: str
    turns: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    fact_turns: list[frozenset[int]] = field(default_factory=list)
    questions: list[QA] = field(default_factory=list)


@dataclass
class Dataset:
    name: str
    path: str
    conversations: list[Conversation]
    skipped_no_evidence: int = 0
    dropped_ids: int = 0

    @property
    def questions(self) -> int:
        return sum(len(c.questions) for c in self.conversations)


def sessions_of(conversation: dict[str, Any]) -> list[int]:
    numbers = [int(m[1]) for key in conversation if (m := SESSION.match(key))]
    return sorted(n for n in numbers if isinstance(conversation.get(f"session_{n}"), list))


def windowed(turns: Sequence[str], window: int) -> list[str]:
    """Each turn as the index embeds it with `window` neighbours (server/indexer.py)."""
    if window <= 0:
        return list(turns)
    out = []
    for i, turn in enumerate(turns):
        before, after = turns[max(0, i - window) : i], turns[i + 1 : i + 1 + window]
        out.append("\n".join([turn, *before, turn, *after]))
    return out


def load_dataset(name: str, path: Path, max_questions: int | None) -> Dataset:
    """LoCoMo's format. With max_questions, the first ones in file order (and only the
    conversations they come from)."""
    samples: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
    data = Dataset(name, str(path), [])
    budget = max_questions if max_questions is not None else 10**9
    for sample in samples:
        if budget <= 0:
            break
        conv = Conversation(str(sample.get("sample_id", len(data.conversations))))
        dialogue = sample["conversation"]
        position: dict[str, int] = {}
        for number in sessions_of(dialogue):
            for turn in dialogue[f"session_{number}"]:
                position[str(turn["dia_id"])] = len(conv.turns)
                conv.turns.append(turn_content(turn))
        for by_speaker in (sample.get("observation") or {}).values():
            for entries in (by_speaker or {}).values():
                for entry in entries or []:
                    if not entry:
                        continue
                    cited = clean_dia_ids(entry[1]) if len(entry) > 1 else []
                    conv.facts.append(str(entry[0]))
                    conv.fact_turns.append(frozenset(position[d] for d in cited if d in position))
        for qa in sample.get("qa", []):
            if budget <= 0:
                break
            ids = clean_dia_ids(qa.get("evidence") or [])
            data.dropped_ids += sum(1 for d in ids if d not in position)
            evidence = sorted({position[d] for d in ids if d in position})
            if not evidence:
                data.skipped_no_evidence += 1
                continue
            group = str(qa["kind"]) if "kind" in qa else str(qa.get("category", "?"))
            conv.questions.append(QA(str(qa["question"]), evidence, group))
            budget -= 1
        if conv.questions:
            data.conversations.append(conv)
    return data


@dataclass
class Pooled:
    """Scores pooled over questions."""

    evidence: list[Scores] = field(default_factory=list)
    other: list[Scores] = field(default_factory=list)
    best: list[float] = field(default_factory=list)  # each question's best evidence score
    groups: list[str] = field(default_factory=list)  # each question's group
    evidence_groups: list[str] = field(default_factory=list)  # each evidence score's group

    def arrays(self) -> tuple[Scores, Scores, Scores]:
        def cat(parts: list[Scores]) -> Scores:
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

        return cat(self.evidence), cat(self.other), np.array(self.best, dtype=np.float32)


def floor_summary(pooled: Pooled, floor_of_interest: float | None) -> dict[str, Any]:
    evidence, other, best = pooled.arrays()
    sweep: list[dict[str, Any]] = [
        {
            "floor": f,
            "evidence_kept": share_at_least(evidence, f),
            "other_kept": share_at_least(other, f),
            "questions_with_evidence_kept": share_at_least(best, f),
        }
        for f in FLOORS
    ]
    ok = [r for r in sweep if r["evidence_kept"] is not None and r["evidence_kept"] >= TARGET_KEPT]
    suggested = max(ok, key=lambda r: r["floor"]) if ok else None
    at = floor_of_interest if floor_of_interest is not None else (suggested or {}).get("floor")
    groups: dict[str, Any] = {}
    labels = np.array(pooled.evidence_groups)
    for group in sorted(set(pooled.groups), key=str):
        values = evidence[labels == group] if len(labels) else evidence
        groups[group] = {
            "questions": pooled.groups.count(group),
            "evidence_scores": len(values),
            **percentiles(values, (5, 10, 50)),
            "evidence_kept_at": share_at_least(values, at) if at is not None else None,
        }
    return {
        "questions": len(best),
        "evidence_scores": len(evidence),
        "other_scores": len(other),
        "evidence": percentiles(evidence),
        "other": percentiles(other),
        "suggested_floor": suggested,
        "at_floor": at,
        "by_group": groups,
        "sweep": sweep,
    }


def score_dataset(
    encoder: Encoder, data: Dataset, window: int, quiet: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(excerpts, facts) of one model on one dataset."""
    turns, facts = Pooled(), Pooled()
    without_facts = 0
    for conv in tqdm(data.conversations, desc=f"{data.name}", unit="conv", disable=quiet):
        t_vec = embed(encoder.encode, windowed(conv.turns, window), "turns", quiet)
        f_vec = embed(encoder.encode, conv.facts, "facts", quiet)
        q_vec = embed(encoder.encode_query, [q.text for q in conv.questions], "questions", quiet)
        turn_scores = q_vec @ t_vec.T
        fact_scores = q_vec @ f_vec.T if len(conv.facts) else None
        for qi, qa in enumerate(conv.questions):
            row = turn_scores[qi]
            mask = np.zeros(len(conv.turns), dtype=bool)
            mask[qa.evidence] = True
            turns.evidence.append(row[mask])
            turns.other.append(row[~mask])
            turns.best.append(float(row[mask].max()))
            turns.groups.append(qa.group)
            turns.evidence_groups += [qa.group] * int(mask.sum())
            cited = set(qa.evidence)
            fmask = np.array([bool(ft & cited) for ft in conv.fact_turns], dtype=bool)
            if fact_scores is None or not fmask.any():
                without_facts += 1
                continue
            frow = fact_scores[qi]
            facts.evidence.append(frow[fmask])
            facts.other.append(frow[~fmask])
            facts.best.append(float(frow[fmask].max()))
            facts.groups.append(qa.group)
            facts.evidence_groups += [qa.group] * int(fmask.sum())
    excerpts = floor_summary(turns, None)
    fact_report = floor_summary(facts, FACTS_FLOOR)
    ev, other, best = facts.arrays()
    fact_report.update(
        {
            "floor": FACTS_FLOOR,
            "evidence_facts_kept": share_at_least(ev, FACTS_FLOOR),
            "other_facts_kept": share_at_least(other, FACTS_FLOOR),
            "questions_with_evidence_fact_kept": share_at_least(best, FACTS_FLOOR),
            "questions_without_evidence_facts": without_facts,
        }
    )
    return excerpts, fact_report


# -- reporting ---------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *["| " + " | ".join(r) + " |" for r in rows],
    ]


def recommend(model: dict[str, Any]) -> dict[str, Any]:
    """duplicate: the safe threshold; excerpts: the lowest of the datasets' suggested floors
    (so that every dataset keeps >= 95 % of its evidence turns)."""
    safe = model["duplicates"]["safe"]
    suggested = [d["suggested_floor"] for d in model["excerpts"].values()]
    floors = [s["floor"] if s is not None else FLOORS[0] for s in suggested]
    return {
        "duplicate_threshold": safe["threshold"] if safe else None,
        # No floor keeps 95 % somewhere: the lowest of the grid (0.0, the old default).
        "excerpt_threshold": min(floors) if floors else None,
        "excerpt_floor_below_grid": any(s is None for s in suggested),
    }


def markdown(report: dict[str, Any]) -> str:
    models: dict[str, Any] = report["models"]
    names = list(models)
    out: list[str] = []
    rows = []
    for name, m in models.items():
        rec = m["recommended"]
        dup = m["duplicates"]
        safe = dup["safe"] or {}
        best = dup["best_f1"]
        cells = [
            name,
            fmt(rec["duplicate_threshold"], 2),
            f"P {fmt(safe.get('precision'))} R {fmt(safe.get('recall'))}",
            f"{best['threshold']:.2f} (F1 {best['f1']:.3f}, P {fmt(best['precision'])})",
            fmt(rec["excerpt_threshold"], 2),
        ]
        kept = []
        for dname, d in m["excerpts"].items():
            row = next((r for r in d["sweep"] if r["floor"] == rec["excerpt_threshold"]), None)
            if row is not None:
                kept.append(
                    f"{dname}: evidence {pct(row['evidence_kept'])}, other {pct(row['other_kept'])}"
                )
        cells.append("; ".join(kept) or "-")
        rows.append(cells)
    out += ["## Recommended constants", ""]
    out += table(
        [
            "model",
            "duplicate threshold",
            "at it",
            "best F1 at",
            "excerpt floor",
            "kept at the floor",
        ],
        rows,
    )
    out += [
        "",
        f"Duplicate threshold: the lowest from which precision stays >= {TARGET_PRECISION}."
        f" Excerpt floor: the highest floor keeping >= {TARGET_KEPT:.0%} of evidence turns"
        " on every dataset.",
        "",
    ]

    # 1. duplicates
    first = models[names[0]]["duplicates"]
    out += [
        f"## Duplicate threshold ({first['n']} fact pairs: {first['duplicates']} duplicates,"
        f" {first['non_duplicates']} not)",
        "",
        "Cosine percentiles, both sides in the query form:",
        "",
    ]
    ps = [f"p{p}" for p in PERCENTILES]
    rows = []
    for name, m in models.items():
        for label, key in (("duplicates", "duplicate"), ("non-duplicates", "non_duplicate")):
            rows.append([name, label, *[fmt(m["duplicates"]["percentiles"][key][p]) for p in ps]])
        rows.append(
            [
                name,
                "max non-dup / min dup",
                fmt(m["duplicates"]["max_non_duplicate"]),
                fmt(m["duplicates"]["min_duplicate"]),
                *[""] * (len(ps) - 2),
            ]
        )
    out += table(["model", "pairs", *ps], rows)
    out += ["", "By kind (mean / min / max cosine; share >= the model's duplicate threshold):", ""]
    rows = []
    for kind, info in first["by_kind"].items():
        cells = [kind, "yes" if info["duplicate"] else "no", str(info["n"])]
        for m in models.values():
            k = m["duplicates"]["by_kind"][kind]
            cells += [f"{k['mean']:.3f} / {k['min']:.3f} / {k['max']:.3f}", pct(k["share_at_safe"])]
        rows.append(cells)
    head = ["kind", "duplicate", "n"]
    for name in names:
        head += [f"{name} mean/min/max", ">= thr"]
    out += table(head, rows)
    out += ["", "Sweep (precision / recall / F1 of cosine >= t):", ""]
    rows = []
    for i, t in enumerate(DUPLICATE_THRESHOLDS):
        cells = [f"{t:.2f}"]
        for m in models.values():
            r = m["duplicates"]["sweep"][i]
            cells.append(f"{fmt(r['precision'])} / {fmt(r['recall'])} / {fmt(r['f1'])}")
        rows.append(cells)
    out += table(["t", *names], rows)
    for name, m in models.items():
        out += ["", f"Hardest non-duplicates for {name} (highest cosine):", ""]
        out += table(
            ["cosine", "kind", "a", "b"],
            [
                [f"{h['cosine']:.3f}", h["kind"], h["a"], h["b"]]
                for h in m["duplicates"]["hardest_non_duplicates"][:5]
            ],
        )
        out += ["", f"Hardest duplicates for {name} (lowest cosine):", ""]
        out += table(
            ["cosine", "kind", "a", "b"],
            [
                [f"{h['cosine']:.3f}", h["kind"], h["a"], h["b"]]
                for h in m["duplicates"]["hardest_duplicates"][:5]
            ],
        )

    # 2. excerpts
    datasets = report["datasets"]
    for dname, info in datasets.items():
        if info.get("skipped"):
            out += ["", f"## Excerpt floor ({dname})", "", f"Skipped: {info['skipped']}"]
            continue
        out += [
            "",
            f"## Excerpt floor ({dname}: {info['questions']} questions,"
            f" {info['conversations']} conversations, {info['turns']} turns,"
            f" window {report['config']['window']})",
            "",
            "cosine(question in the query form, turn in the passage form):",
            "",
        ]
        rows = []
        for name, m in models.items():
            e = m["excerpts"][dname]
            for label, key in (("evidence", "evidence"), ("other turns", "other")):
                rows.append([name, label, *[fmt(e[key][p]) for p in ("p5", "p10", "p50", "p90")]])
        out += table(["model", "turns", "p5", "p10", "p50", "p90"], rows)
        out += [
            "",
            "Share kept per floor (evidence turns / other turns / questions with an evidence"
            " turn kept):",
            "",
        ]
        rows = []
        for i, f in enumerate(FLOORS):
            cells = [f"{f:.2f}"]
            for m in models.values():
                r = m["excerpts"][dname]["sweep"][i]
                cells.append(
                    f"{pct(r['evidence_kept'])} / {pct(r['other_kept'])}"
                    f" / {pct(r['questions_with_evidence_kept'])}"
                )
            rows.append(cells)
        out += table(["floor", *names], rows)
        out += ["", "Evidence cosine by question group (p5 / p10 / p50; kept at the floor):", ""]
        rows = []
        groups = models[names[0]]["excerpts"][dname]["by_group"]
        for group in groups:
            label = f"{group} {CATEGORIES.get(int(group), '')}" if group.isdigit() else group
            cells = [label.strip(), str(groups[group]["questions"])]
            for m in models.values():
                g = m["excerpts"][dname]["by_group"][group]
                cells.append(
                    f"{fmt(g['p5'])} / {fmt(g['p10'])} / {fmt(g['p50'])}"
                    f" ({pct(g['evidence_kept_at'])} at {fmt(m['excerpts'][dname]['at_floor'], 2)})"
                )
            rows.append(cells)
        out += table(["group", "questions", *names], rows)

    # 3. facts
    out += [
        "",
        f"## Facts floor {FACTS_FLOOR} (observations as facts, passage form)",
        "",
    ]
    rows = []
    for name, m in models.items():
        for dname, f in m["facts"].items():
            rows.append(
                [
                    name,
                    dname,
                    str(f["questions"]),
                    str(f["evidence_scores"]),
                    fmt(f["evidence"]["p10"]),
                    fmt(f["evidence"]["p50"]),
                    pct(f["evidence_facts_kept"]),
                    pct(f["other_facts_kept"]),
                    pct(f["questions_with_evidence_fact_kept"]),
                    fmt((f["suggested_floor"] or {}).get("floor"), 2),
                ]
            )
    out += table(
        [
            "model",
            "dataset",
            "questions",
            "evidence facts",
            "p10",
            "p50",
            f"evidence >= {FACTS_FLOOR}",
            f"other >= {FACTS_FLOOR}",
            "questions with one >=",
            "floor keeping 95 %",
        ],
        rows,
    )
    return "\n".join(out) + "\n"


# -- main --------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument(
        "--models",
        type=lambda s: [m.strip() for m in s.split(",") if m.strip()],
        default=list(MODELS),
        help="comma-separated: multilingual-e5-small, all-MiniLM-L6-v2, hash:64 (no model)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="write the results here")
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO, help="locomo10.json")
    parser.add_argument(
        "--multilingual",
        type=Path,
        default=DEFAULT_MULTILINGUAL,
        help="multilingual chats in LoCoMo's format (skipped if missing)",
    )
    parser.add_argument("--pairs", type=Path, default=DEFAULT_PAIRS, help="labelled fact pairs")
    parser.add_argument(
        "--max-questions", type=int, default=None, help="at most this many questions per dataset"
    )
    parser.add_argument(
        "--window", type=int, default=0, help="neighbours each side of an embedded turn"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    pairs = load_pairs(args.pairs)
    datasets: list[Dataset] = []
    notes: dict[str, Any] = {}
    for name, path in (("locomo", args.locomo), ("multilingual", args.multilingual)):
        if not path.exists():
            notes[name] = {"path": str(path), "skipped": f"{path} does not exist"}
            print(f"note: {path} does not exist; {name} skipped")
            continue
        datasets.append(load_dataset(name, path, args.max_questions))
    for data in datasets:
        notes[data.name] = {
            "path": data.path,
            "conversations": len(data.conversations),
            "turns": sum(len(c.turns) for c in data.conversations),
            "facts": sum(len(c.facts) for c in data.conversations),
            "questions": data.questions,
            "skipped_questions_no_evidence": data.skipped_no_evidence,
            "dropped_unresolved_evidence_ids": data.dropped_ids,
        }

    models: dict[str, Any] = {}
    seconds: dict[str, Any] = {}
    for name in args.models:
        t0 = time.perf_counter()
        encoder = load_encoder(name)
        t1 = time.perf_counter()
        result: dict[str, Any] = {
            "duplicates": duplicate_sweep(encoder, pairs, args.quiet),
            "excerpts": {},
            "facts": {},
        }
        t2 = time.perf_counter()
        for data in datasets:
            excerpts, facts = score_dataset(encoder, data, args.window, args.quiet)
            result["excerpts"][data.name] = excerpts
            result["facts"][data.name] = facts
        result["recommended"] = recommend(result)
        models[name] = result
        seconds[name] = {
            "load": round(t1 - t0, 1),
            "pairs": round(t2 - t1, 1),
            "datasets": round(time.perf_counter() - t2, 1),
        }
        del encoder

    report: dict[str, Any] = {
        "config": {
            "models": args.models,
            "pairs": str(args.pairs),
            "window": args.window,
            "max_questions": args.max_questions,
            "duplicate_thresholds": DUPLICATE_THRESHOLDS,
            "floors": FLOORS,
            "target_precision": TARGET_PRECISION,
            "target_evidence_kept": TARGET_KEPT,
            "facts_floor": FACTS_FLOOR,
            "forms": "pairs: query/query; questions: query; turns and facts: passage",
        },
        "datasets": notes,
        "seconds": {**seconds, "total": round(time.perf_counter() - started, 1)},
        "recommended": {name: m["recommended"] for name, m in models.items()},
        "models": models,
    }
    text = markdown(report)
    print()
    print(text)
    print(json.dumps({"recommended": report["recommended"], "seconds": report["seconds"]}))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_thresholds.json").write_text(
        json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    command = f"--models {','.join(args.models)} --out {args.out}"
    if args.max_questions is not None:
        command += f" --max-questions {args.max_questions}"
    if args.window:
        command += f" --window {args.window}"
    (args.out / "bench_thresholds.md").write_text(
        "# Cosine constants per model\n\n"
        f"Run with: `HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_thresholds.py {command}`"
        f"\n\nDatasets: {json.dumps(notes, ensure_ascii=False)}\n\n"
        f"Seconds: {json.dumps(report['seconds'])}\n\n{text}",
        encoding="utf-8",
    )
    print(f"wrote {args.out / 'bench_thresholds.json'} and {args.out / 'bench_thresholds.md'}")
    return report


if __name__ == "__main__":
    main()
