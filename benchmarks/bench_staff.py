"""Staff search: does the relevance floor keep the answer and drop the filler?

Support staff search everyone's turns at once, so this puts every conversation of a set in
one LanceDB table (as the server does) and asks each question with no filter, in hybrid
mode, the way the staff page does. For each question it records where the first evidence
turn ranks and the relevance (server/relevance.py) of every hit, then tries relevance
floors: how often the answer is still on the page, and how many results the page shows.
The anchors it prints (filler's and the answer's scores) are what calibration.py holds.

    python benchmarks/bench_staff.py --set locomo --conversations 3 --cache /tmp/staff.npz
    python benchmarks/bench_staff.py --set multilingual

It prints a table and writes benchmarks/results/staff.<set>.<model>.{json,md}. The model's
anchors (the cosine of unrelated turns, and of evidence) are printed too: they are what
embeddings/calibration.py holds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_fusion import SETS, embed, load  # noqa: E402
from embeddings.calibration import calibration_for  # noqa: E402
from embeddings.index import IndexRow, VectorIndex  # noqa: E402
from embeddings.relevance import scale_for  # noqa: E402
from server.config import DEFAULT_MODEL  # noqa: E402
from server.relevance import relevance, word_match  # noqa: E402
from server.staff_relevance import judged  # noqa: E402
from server.words import is_short  # noqa: E402

PAGE = 50  # the staff page asks for 50 results
FLOORS = (0.0, 0.01, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 0.7)
STRONG = 0.75


def run(
    set_name: str, model: str, conversations: int, cache: Path | None, data: Path | None = None
) -> dict[str, Any]:
    convs = load(data or SETS[set_name])
    convs = convs[:conversations] if conversations else convs
    own, _, questions = embed(model, convs, cache, neighbours=False)
    calibration = calibration_for(model)
    with tempfile.TemporaryDirectory() as folder:
        index = VectorIndex(Path(folder), model, dim=len(own[0][0]))
        for c, conv in enumerate(convs):
            rows = [
                IndexRow(
                    id=f"turn:{c}:{i}",
                    kind="turn",
                    ref_id=f"{c}:{i}",
                    agent="bench",
                    phone=f"+1555000{c:04d}",
                    status="archived",
                    type="user",
                    created_at="2026-01-01T00:00:00Z",
                    text=text,
                    content=text,
                )
                for i, text in enumerate(conv.turns)
            ]
            index.upsert(rows, np.asarray(own[c], dtype=np.float32))
        index.update_indexes()
        all_own = np.concatenate([np.asarray(v) for v in own])
        unrelated, evidence_cos = [], []
        ranks: list[int | None] = []
        evidence_rel: list[float] = []
        answer_scores: list[float] = []
        filler_scores: list[float] = []
        pages: list[list[tuple[float, bool]]] = []
        # the relevance scale (server/staff_relevance.py): each hit's own vector, in a search
        # over every turn of the table
        scale = scale_for(model, "turn")
        vectors = {
            f"turn:{c}:{i}": np.asarray(own[c][i], dtype=np.float32)
            for c, conv in enumerate(convs)
            for i in range(len(conv.turns))
        }
        scaled: list[list[tuple[float, bool, bool]]] = []  # (relevance, evidence, short)
        for c, conv in enumerate(convs):
            for q, (question, evidence) in enumerate(conv.questions):
                qv = np.asarray(questions[c][q], dtype=np.float32)
                sample = all_own[:: max(1, len(all_own) // 200)] @ qv
                unrelated.append(float(np.median(sample)))
                evidence_cos.append(max(float(np.asarray(own[c][i]) @ qv) for i in evidence))
                hits = index.hybrid(
                    qv,
                    question,
                    where="kind = 'turn'",
                    k=PAGE,
                    column="content",
                    semantic_weight=calibration.semantic_weight,
                )
                wanted = {f"turn:{c}:{i}" for i in evidence}
                scored = [
                    (relevance(h.score, "hybrid", calibration), h.row.id in wanted) for h in hits
                ]
                pages.append(scored)
                if scale.calibrated and hits:
                    says_all = word_match(question)
                    values = scale.scores(
                        qv, np.stack([vectors[h.row.id] for h in hits]), len(vectors)
                    )
                    scaled.append(
                        [
                            (
                                judged(v, h.row.content, True, says_all(h.row.content)),
                                h.row.id in wanted,
                                is_short(h.row.content),
                            )
                            for h, (v, _) in zip(hits, values, strict=True)
                        ]
                    )
                first = next((n for n, h in enumerate(hits) if h.row.id in wanted), None)
                ranks.append(first)
                if first is not None:
                    evidence_rel.append(scored[first][0])
                    answer_scores.append(hits[first].score)
                filler_scores.extend(h.score for h in hits if h.row.id not in wanted)
    rows = []
    for floor in FLOORS:
        kept = [[hit for r, hit in page if r >= floor] for page in pages]
        rows.append(
            {
                "floor": floor,
                "answer on the page": statistics.fmean(any(page) for page in kept),
                "results shown (mean)": statistics.fmean(len(p) for p in kept),
                "results shown (p90)": float(np.percentile([len(p) for p in kept], 90)),
            }
        )
    scale_rows = []
    for floor in FLOORS if scaled else ():
        kept_scaled = [[r for r in page if r[0] >= floor] for page in scaled]
        scale_rows.append(
            {
                "floor": floor,
                "answer on the page": statistics.fmean(
                    any(ev for _, ev, _ in p) for p in kept_scaled
                ),
                "results shown (mean)": statistics.fmean(len(p) for p in kept_scaled),
                "results shown (p90)": float(np.percentile([len(p) for p in kept_scaled], 90)),
            }
        )
    flat = [r for page in scaled for r in page]
    strong = [r for r in flat if r[0] >= STRONG]
    firsts = [next((r for r in page if r[1]), None) for page in scaled]
    found_answers = [r for r in firsts if r is not None]
    labels = {
        "results labelled strong (share of all results)": (len(strong) / len(flat))
        if flat
        else None,
        "strong results that are evidence": (sum(r[1] for r in strong) / len(strong))
        if strong
        else None,
        "short turns labelled strong": sum(r[2] for r in strong),
        "first evidence on the page labelled strong / good / weak": [
            sum(r[0] >= STRONG for r in found_answers) / max(len(found_answers), 1),
            sum(0.4 <= r[0] < STRONG for r in found_answers) / max(len(found_answers), 1),
            sum(r[0] < 0.4 for r in found_answers) / max(len(found_answers), 1),
        ],
        "other results labelled strong / good / weak": [
            sum(r[0] >= STRONG for r in flat if not r[1]) / max(sum(not r[1] for r in flat), 1),
            sum(0.4 <= r[0] < STRONG for r in flat if not r[1])
            / max(sum(not r[1] for r in flat), 1),
            sum(r[0] < 0.4 for r in flat if not r[1]) / max(sum(not r[1] for r in flat), 1),
        ],
    }
    return {
        "scale rows": scale_rows,
        "scale labels": labels,
        "set": set_name,
        "model": model,
        "conversations": len(convs),
        "turns": sum(len(c.turns) for c in convs),
        "questions": len(pages),
        "anchors": {
            "median cosine to a random turn (p50 of questions)": statistics.median(unrelated),
            "cosine to the best evidence turn (p10, p50)": [
                float(np.percentile(evidence_cos, 10)),
                statistics.median(evidence_cos),
            ],
            "hybrid score of the answer (p10, p50)": [
                float(np.percentile(answer_scores, 10)) if answer_scores else None,
                statistics.median(answer_scores) if answer_scores else None,
            ],
            "hybrid score of the other results (p50, p90)": [
                statistics.median(filler_scores),
                float(np.percentile(filler_scores, 90)),
            ],
            "calibration": {
                "semantic_anchors": calibration.semantic_anchors,
                "hybrid_anchors": calibration.hybrid_anchors,
            },
        },
        "answer in the top 50": statistics.fmean(r is not None for r in ranks),
        "answer's relevance (p10, p50)": [
            float(np.percentile(evidence_rel, 10)) if evidence_rel else None,
            statistics.median(evidence_rel) if evidence_rel else None,
        ],
        "default floor": calibration.staff_floor,
        "rows": rows,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# Staff search relevance: {result['set']}, {result['model']}",
        "",
        f"{result['conversations']} conversations, {result['turns']} turns in one table, "
        f"{result['questions']} questions, hybrid, top {PAGE}, default floor "
        f"{result['default floor']}.",
        "",
        f"- answer in the top {PAGE}: {result['answer in the top 50']:.3f}",
        "- answer's relevance p10/p50: " + str(result["answer's relevance (p10, p50)"]),
        f"- anchors: {json.dumps(result['anchors'])}",
        "",
        "| relevance floor | answer on the page | results shown (mean) | (p90) |",
        "| --- | --- | --- | --- |",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['floor']:.2f} | {row['answer on the page']:.3f} | "
            f"{row['results shown (mean)']:.1f} | {row['results shown (p90)']:.0f} |"
        )
    if result.get("scale rows"):
        lines += [
            "",
            "On the relevance scale (server/staff_relevance.py: each result's own vector, in a"
            " search over every turn of the table; at least strong when it says every word of"
            " the question; a short turn never strong):",
            "",
            f"- labels: {json.dumps(result['scale labels'])}",
            "",
            "| relevance floor | answer on the page | results shown (mean) | (p90) |",
            "| --- | --- | --- | --- |",
        ]
        for row in result["scale rows"]:
            lines.append(
                f"| {row['floor']:.2f} | {row['answer on the page']:.3f} | "
                f"{row['results shown (mean)']:.1f} | {row['results shown (p90)']:.0f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=sorted(SETS), default="locomo")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--conversations", type=int, default=0, help="0: all")
    parser.add_argument("--cache", type=Path, default=None, help="reuse embeddings (.npz)")
    parser.add_argument("--data", type=Path, default=None, help="the set's file (default: its own)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    result = run(args.set, args.model, args.conversations, args.cache, args.data)
    text = markdown(result)
    print(text)
    short = "e5" if "e5" in args.model else args.model.split("/")[-1].split(":")[0]
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"staff.{args.set}.{short}"
    Path(f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    Path(f"{stem}.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
