"""Validate benchmarks/data/support/chats.json and print its counts.

The same checks as benchmarks/data/multilingual/check.py, with this set's own minimums: the
LoCoMo format (samples, sessions, dates, turns, dia_ids, observations, qa), that every
observation and evidence id names a turn of its sample, that session dates parse with
"%I:%M %p on %d %B, %Y" and increase, and two properties of the questions: a "paraphrase"
question shares no content word with its evidence turns (words compared accent-folded, a final
"s" dropped, by their first 5 letters), and a "cross_lingual" question is written in another
language than its evidence (by common-word counts).

Checks specific to this set (customer-support chats, questions asked by staff):

- 5 to 9 sessions, 80 to 120 turns and 12 to 16 questions per sample;
- the language mix: 4 samples in Spain Spanish (region es-ES), 4 in Latin American Spanish,
  2 in English and 2 code-switching;
- every question is asked in the third person, so it names the person (speaker_a's first
  name, accent-folded);
- no evidence turn is a bare greeting or acknowledgement (it must hold at least two content
  words beyond greetings, thanks, "ok", names and the like).

Exits 1 on any problem.

    .venv/bin/python benchmarks/data/support/check.py [path/to/chats.json]
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import unicodedata
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("chats.json")
# What this set shares with the multilingual set's checker (the format, the language test,
# word stems, id resolution) is that checker's: loaded from its file (the folders are no
# packages).
_SPEC = importlib.util.spec_from_file_location(
    "multilingual_check", Path(__file__).parent.parent / "multilingual" / "check.py"
)
assert _SPEC is not None and _SPEC.loader is not None
_SHARED = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_SHARED)
CATEGORIES = _SHARED.CATEGORIES
DATE_FORMAT = _SHARED.DATE_FORMAT
DIA = _SHARED.DIA
KINDS = _SHARED.KINDS
LANGUAGES = _SHARED.LANGUAGES
OBS_KEY = _SHARED.OBS_KEY
SESSION = _SHARED.SESSION
SESSION_DATE = _SHARED.SESSION_DATE
STOP = _SHARED.STOP
fold = _SHARED.fold
language = _SHARED.language
resolve_ids = _SHARED.resolve_ids
stems = _SHARED.stems
wordset = _SHARED.wordset
words = _SHARED.words

MINIMUM = {
    "samples": 12,
    "turns": 960,
    "observations": 150,
    "questions": 160,
    "cross_lingual": 30,
    "paraphrase": 25,
}
SESSIONS_PER_SAMPLE = (5, 9)
TURNS_PER_SAMPLE = (80, 120)
QUESTIONS_PER_SAMPLE = (12, 16)
MIX = {"es": 8, "en": 2, "es-en": 2}  # at least this many samples of each language
SPAIN = "es-ES"
REGION_MIX = {"spain": 4, "latam": 4}  # among the "es" samples


# Turns the data set promises to contain (sample language, turn text, an observation, a question).
ANCHORS = [
    (
        "es",
        "uso un 38 de zapatilla",
        "usa la talla 38 en zapatillas",
        "¿qué talla de zapatillas usa rocío?",
    ),
    (
        "en",
        "the first one showed up with a big tear",
        None,
        "what did kevin say was wrong with the first delivery?",
    ),
]

PHATIC = {
    unicodedata.normalize("NFKD", w).encode("ascii", "ignore").decode()
    for w in wordset(
        """
        hola holaa buenas buenos dias tardes noches gracias muchas mil perfecto perfecta genial
        vale ok okey oki dale listo bien vale claro super súper igualmente saludos chao chau
        adios adiós hasta luego nos vemos besos abrazo un placer gusto encantada encantado
        hi hey hello morning afternoon evening thanks thank cheers great perfect cool sure
        okay ok bye see soon lovely brilliant awesome good night welcome
        ayudo ayudar help
        """
    )
}


def content_words(text: str, names: set[str]) -> set[str]:
    found = re.findall(r"[a-z0-9]+", fold(text))
    return {
        w for w in found if len(w) >= 2 and w not in STOP and w not in PHATIC and w not in names
    }


def check(samples: Any) -> tuple[list[str], dict[str, Any]]:
    problems: list[str] = []
    stats: dict[str, Any] = {
        "samples": 0,
        "sessions": 0,
        "turns": 0,
        "turns_by_speaker": Counter(),
        "turn_language": Counter(),
        "observations": 0,
        "questions": 0,
        "category": Counter(),
        "kind": Counter(),
        "question_language": Counter(),
        "sample_language": Counter(),
        "region_group": Counter(),
        "per_sample": [],
    }
    if not isinstance(samples, list):
        return ["top level is not a list of samples"], stats
    seen_ids: set[str] = set()
    anchors_found = [False] * len(ANCHORS)
    for index, sample in enumerate(samples):
        sid = str(sample.get("sample_id", f"#{index}"))
        where = f"{sid}:"
        if sid in seen_ids:
            problems.append(f"{where} duplicate sample_id")
        seen_ids.add(sid)
        lang = sample.get("language")
        if lang not in LANGUAGES:
            problems.append(f"{where} language {lang!r} not one of {LANGUAGES}")
        stats["sample_language"][lang] += 1
        region = str(sample.get("region", ""))
        if not region:
            problems.append(f"{where} no region")
        if lang == "es":
            stats["region_group"]["spain" if region == SPAIN else "latam"] += 1
        conv = sample.get("conversation")
        if not isinstance(conv, dict):
            problems.append(f"{where} no conversation")
            continue
        a, b = conv.get("speaker_a"), conv.get("speaker_b")
        if not a or not b or a == b:
            problems.append(f"{where} speaker_a/speaker_b missing or equal")
        names = {fold(str(a)).split()[0] if a else "", fold(str(b)).split()[0] if b else ""}
        numbers = sorted(int(m[1]) for k in conv if (m := SESSION.match(k)))
        dated = sorted(int(m[1]) for k in conv if (m := SESSION_DATE.match(k)))
        if numbers != list(range(1, len(numbers) + 1)):
            problems.append(f"{where} sessions are not numbered 1..N: {numbers}")
        if dated != numbers:
            problems.append(f"{where} sessions {numbers} but dates for {dated}")
        low, high = SESSIONS_PER_SAMPLE
        if not low <= len(numbers) <= high:
            problems.append(f"{where} {len(numbers)} sessions, want {low}-{high}")
        turns: dict[str, dict[str, Any]] = {}
        previous: datetime | None = None
        sample_turns = 0
        for n in numbers:
            raw = conv.get(f"session_{n}_date_time", "")
            try:
                moment = datetime.strptime(str(raw), DATE_FORMAT)
            except ValueError:
                problems.append(f"{where} session {n} date {raw!r} does not parse")
                moment = None
            if moment and previous and moment <= previous:
                problems.append(f"{where} session {n} date {raw!r} is not after the one before")
            previous = moment or previous
            session = conv.get(f"session_{n}")
            if not isinstance(session, list) or not session:
                problems.append(f"{where} session {n} is empty")
                continue
            for t, turn in enumerate(session, 1):
                dia = turn.get("dia_id")
                if dia != f"D{n}:{t}":
                    problems.append(f"{where} session {n} turn {t} has dia_id {dia!r}")
                if dia in turns:
                    problems.append(f"{where} dia_id {dia} repeated")
                if turn.get("speaker") not in (a, b):
                    problems.append(f"{where} {dia} speaker {turn.get('speaker')!r}")
                text = turn.get("text")
                if not isinstance(text, str) or not text.strip():
                    problems.append(f"{where} {dia} has no text")
                    text = ""
                turns[str(dia)] = turn
                stats["turns_by_speaker"][
                    "speaker_a" if turn.get("speaker") == a else "speaker_b"
                ] += 1
                stats["turn_language"][language(text)] += 1
                sample_turns += 1
        low, high = TURNS_PER_SAMPLE
        if not low <= sample_turns <= high:
            problems.append(f"{where} {sample_turns} turns, want {low}-{high}")
        stats["sessions"] += len(numbers)
        stats["turns"] += sample_turns

        observations = sample.get("observation")
        sample_obs = 0
        if not isinstance(observations, dict):
            problems.append(f"{where} no observation dict")
            observations = {}
        obs_texts: list[str] = []
        for key, by_speaker in observations.items():
            m = OBS_KEY.match(key)
            if not m or int(m[1]) not in numbers:
                problems.append(f"{where} observation key {key!r} names no session")
                continue
            if not isinstance(by_speaker, dict) or set(by_speaker) - {a, b}:
                problems.append(f"{where} {key} is not keyed by the speakers")
                continue
            for speaker, entries in by_speaker.items():
                for entry in entries:
                    if not (isinstance(entry, list) and len(entry) == 2 and str(entry[0]).strip()):
                        problems.append(f"{where} {key} entry {entry!r} is not [fact, ids]")
                        continue
                    what = f"observation {entry[0][:40]!r}"
                    cited = resolve_ids(entry[1], what, turns, where, problems)
                    if any(int(c[1:].split(":")[0]) > int(m[1]) for c in cited):
                        problems.append(f"{where} {key} cites a later session: {entry[1]}")
                    if (
                        speaker == a
                        and lang in ("es", "en")
                        and language(entry[0]) not in (lang, "mixed")
                    ):
                        problems.append(f"{where} observation not in {lang}: {entry[0]!r}")
                    obs_texts.append(fold(str(entry[0])))
                    sample_obs += 1
        stats["observations"] += sample_obs

        qas = sample.get("qa")
        if not isinstance(qas, list) or not qas:
            problems.append(f"{where} no qa")
            qas = []
        low, high = QUESTIONS_PER_SAMPLE
        if not low <= len(qas) <= high:
            problems.append(f"{where} {len(qas)} questions, want {low}-{high}")
        questions_here: set[str] = set()
        first_name = fold(str(a)).split()[0] if a else ""
        for qa in qas:
            q = str(qa.get("question", "")).strip()
            label = f"question {q[:50]!r}"
            if not q or not str(qa.get("answer", "")).strip():
                problems.append(f"{where} {label} lacks question or answer")
            if q in questions_here:
                problems.append(f"{where} {label} repeated")
            questions_here.add(q)
            if first_name and first_name not in re.findall(r"[a-z]+", fold(q)):
                problems.append(f"{where} {label} does not name {a} (third person)")
            category = qa.get("category")
            if category not in CATEGORIES:
                problems.append(f"{where} {label} category {category!r}")
            kind = qa.get("kind")
            if kind not in KINDS:
                problems.append(f"{where} {label} kind {kind!r}")
            evidence = qa.get("evidence")
            if not isinstance(evidence, list):
                problems.append(f"{where} {label} evidence is not a list")
                evidence = []
            if len(set(evidence)) != len(evidence):
                problems.append(f"{where} {label} repeats an evidence id")
            cited = resolve_ids(evidence, label, turns, where, problems)
            for c in cited:
                if len(content_words(str(turns[c]["text"]), names)) < 2:
                    problems.append(f"{where} {label} cites {c}, a greeting or acknowledgement")
            if category == 1 and len(cited) < 2:
                problems.append(f"{where} {label} is multi-hop with one evidence turn")
            evidence_text = " ".join(str(turns[c]["text"]) for c in cited)
            qlang = language(q)
            stats["question_language"][qlang] += 1
            if kind == "paraphrase":
                shared = stems(q) & stems(evidence_text)
                if shared:
                    problems.append(f"{where} paraphrase {label} shares {sorted(shared)}")
            if kind == "cross_lingual":
                elang = language(evidence_text)
                if qlang == "mixed" or qlang == elang:
                    problems.append(
                        f"{where} cross_lingual {label}: question {qlang}, evidence {elang}"
                    )
            stats["category"][category] += 1
            stats["kind"][kind] += 1
        stats["questions"] += len(qas)
        turn_texts = [fold(str(t.get("text", ""))) for t in turns.values()]
        question_texts = [fold(str(qa.get("question", ""))).strip() for qa in qas]
        for i, (alang, aturn, aobs, aquestion) in enumerate(ANCHORS):
            if (
                lang == alang
                and any(fold(aturn) in t for t in turn_texts)
                and (aobs is None or any(fold(aobs) in o for o in obs_texts))
                and fold(aquestion) in question_texts
            ):
                anchors_found[i] = True
        stats["samples"] += 1
        stats["per_sample"].append(
            (sid, lang, region, a, b, len(numbers), sample_turns, sample_obs, len(qas))
        )
    for i, found in enumerate(anchors_found):
        if not found:
            problems.append(f"anchor {ANCHORS[i][1]!r} (turn, observation, question) is missing")
    for key, least in MINIMUM.items():
        have = stats[key] if key in stats else stats["kind"][key]
        if have < least:
            problems.append(f"{have} {key}, want at least {least}")
    for lang, least in MIX.items():
        if stats["sample_language"][lang] < least:
            problems.append(f"{stats['sample_language'][lang]} samples in {lang}, want {least}")
    for group, least in REGION_MIX.items():
        if stats["region_group"][group] < least:
            problems.append(f"{stats['region_group'][group]} {group} samples, want {least}")
    return problems, stats


def report(stats: dict[str, Any]) -> None:
    print(f"samples       {stats['samples']}  ({dict(stats['sample_language'])})")
    print(f"  es regions  {dict(stats['region_group'])}")
    print(f"sessions      {stats['sessions']}")
    print(f"turns         {stats['turns']}  ({dict(stats['turns_by_speaker'])})")
    print(f"turn language {dict(stats['turn_language'])}  (by common-word counts)")
    print(f"observations  {stats['observations']}")
    print(f"questions     {stats['questions']}")
    cats = ", ".join(f"{c} {CATEGORIES[c]}: {stats['category'][c]}" for c in sorted(CATEGORIES))
    print(f"  by category {cats}")
    kinds = ", ".join(f"{k}: {stats['kind'][k]}" for k in KINDS)
    print(f"  by kind     {kinds}")
    print(f"  by language {dict(stats['question_language'])}")
    print()
    print(
        f"{'sample':<18} {'lang':<6} {'region':<10} {'speaker_a':<10} {'speaker_b':<8}"
        " sess turns  obs  qa"
    )
    for sid, lang, region, a, b, sess, turns, obs, qa in stats["per_sample"]:
        print(
            f"{sid:<18} {lang:<6} {region[:10]:<10} {a:<10} {b:<8}"
            f" {sess:>4} {turns:>5} {obs:>4} {qa:>3}"
        )


def main(argv: list[str]) -> int:
    path = Path(argv[1]) if len(argv) > 1 else DATA
    try:
        samples = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        print(f"cannot read {path}: {error}")
        return 1
    problems, stats = check(samples)
    report(stats)
    if problems:
        print(f"\n{len(problems)} problem(s):")
        for problem in problems:
            print(f"  - {problem}")
        return 1
    print("\nOK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
