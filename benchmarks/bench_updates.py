"""Facts that change (issue 26): does the context give the current value, hide the stale one,
and answer the old one for a past time?

Each conversation of `benchmarks/data/<set>/updates.json` (people whose address, job, plan,
booking, card or stylist changes between sessions; README.md of each folder) is replayed through
HTTP (FastAPI's TestClient on the app), session by session, each turn with its time from the
data (the session's time, one minute per turn). After each session a compaction is forced
(`POST .../compact`, compact_keep 0: the whole session is folded), so the model extracts that
session's facts and, when the person already has facts near a new one, decides whether it
replaces one of them (server/compaction.py `_decide`).

The model, by default, is a scripted OpenAI-compatible server on 127.0.0.1 (tests/fake_llm.py):
it answers the extraction with the facts annotated for the session just compacted, and the
update call with the annotated supersession (the stored fact the annotation names, by the
S-label the call shows it under; "add" when it is not shown). With `--real` the server's own
settings are used instead (MEMORY_LLM_BASE_URL, MEMORY_LLM_API_KEY or OPENAI_API_KEY,
MEMORY_LLM_MODEL, MEMORY_LLM_API), so the same figures measure a real model.

Per changing fact, the context is asked the current-value question (`GET .../context?query=`,
the server's defaults unless `--threshold`) and:
- (a) current: a fact in the context names the new value (its terms in the annotation);
- (b) stale gone: no fact in the context names the old value; and none in `notes` (which also
  hold the rolling summary: with a real model, a summary that still says the old value counts);
- (c) as_of: asked the old-value question with `as_of` (a time between the two sessions), a fact
  names the old value; c_clean: and none names the new one.
Per unchanged fact (a control): (d) a fact in the context for its question still names it.
The same (a), (b), (d) are read on the person's stored current facts (`GET .../memories`,
"stored"), which no retrieval threshold hides.

Every conversation is replayed twice, under two agents: "validity" (the update call answered
as annotated) and "baseline" (the update call answered `[]`: every new fact goes through the
duplicate check and is added, as before issue 26; with `--real`, the update call is not made).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_updates.py --out benchmarks/results
    MEMORY_LLM_BASE_URL=https://api.openai.com/v1 OPENAI_API_KEY=... MEMORY_LLM_MODEL=gpt-4o-mini \\
        HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_updates.py --real
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
import unicodedata
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

from fastapi.testclient import TestClient  # noqa: E402

from benchmarks.bench_recall import BenchClock, iso  # noqa: E402
from server.app import create_app  # noqa: E402
from server.config import DEFAULT_MODEL, Settings  # noqa: E402
from server.llm import FACTS_INSTRUCTIONS, Decision, ExtractedFact, Stored  # noqa: E402
from tests.fake_llm import FakeLLM  # noqa: E402

DATA = ROOT / "benchmarks" / "data"
SETS = ("multilingual", "support")
MODES = ("validity", "baseline")
ADMIN = "bench-updates-admin-key-0123456789"
TURN_GAP = timedelta(minutes=1)
NEUTRAL_SUMMARY = "A chat between the person and the assistant."
NEW_FACT = re.compile(r"^New fact (\d+): (.*)$")
SHOWN = re.compile(r"^\s+(S\d+): (.+) \(since \d{4}-\d{2}-\d{2}\)$")
METRICS = ("a", "b", "b_notes", "c", "c_clean", "a_stored", "b_stored")
CONTROLS = ("d", "d_stored")


# -- data ------------------------------------------------------------------------------------


def load(name: str, data_dir: Path = DATA) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(
        (data_dir / name / "updates.json").read_text(encoding="utf-8")
    )
    return found


def moment(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def fold(text: str) -> str:
    """Lower case, accents dropped: 'Alcalá' and 'alcala' match."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def names(text: str, terms: Sequence[str]) -> bool:
    """Does the text name one of the terms, as whole words (accents and case aside)?"""
    folded = fold(text)
    return any(re.search(rf"(?<!\w){re.escape(fold(t))}(?!\w)", folded) for t in terms)


def problems_of(samples: list[dict[str, Any]]) -> list[str]:
    """What is wrong with an updates.json: the benchmark's own checks (the smoke test runs them
    on both sets)."""
    problems: list[str] = []
    seen_ids: set[str] = set()
    for sample in samples:
        sid = str(sample.get("id"))
        if sid in seen_ids:
            problems.append(f"{sid}: id used twice")
        seen_ids.add(sid)
        for key in ("language", "person", "agent", "sessions", "changes", "unchanged"):
            if key not in sample:
                problems.append(f"{sid}: no {key}")
        sessions = sample.get("sessions", [])
        if not 2 <= len(sessions) <= 4:
            problems.append(f"{sid}: {len(sessions)} sessions (2 to 4 wanted)")
        times = [moment(s["date_time"]) for s in sessions]
        if times != sorted(times) or len(set(times)) != len(times):
            problems.append(f"{sid}: sessions not in increasing time")
        for n, session in enumerate(sessions, start=1):
            end = times[n - 1] + TURN_GAP * len(session["turns"])
            if n < len(sessions) and end >= times[n]:
                problems.append(f"{sid}: session {n} runs into session {n + 1}")
            speakers = [t.get("speaker") for t in session["turns"]]
            if not speakers or set(speakers) - {"person", "agent"} or speakers[0] != "person":
                problems.append(f"{sid}: session {n}: turns must start with the person's")
            if any(not str(t.get("text", "")).strip() for t in session["turns"]):
                problems.append(f"{sid}: session {n}: an empty turn")
            if not session.get("facts"):
                problems.append(f"{sid}: session {n}: no facts")
        # Every fact by content: the session it is said in; what it supersedes must be earlier.
        said: dict[str, int] = {}
        for n, session in enumerate(sessions, start=1):
            for fact in session.get("facts", []):
                content = fact["content"]
                if content in said:
                    problems.append(f"{sid}: fact said twice: {content}")
                if fact.get("type", "fact") not in ("fact", "preference", "context"):
                    problems.append(f"{sid}: bad type: {content}")
                for key in ("supersedes", "duplicate_of"):
                    target = fact.get(key)
                    if target is not None and said.get(target, n) >= n:
                        problems.append(f"{sid}: {key} names no earlier fact: {target}")
                said[content] = n
        replaced = {
            f["supersedes"]: f["content"]
            for s in sessions
            for f in s.get("facts", [])
            if f.get("supersedes")
        }
        everything = list(said)
        for change in sample.get("changes", []):
            what = f"{sid}/{change.get('what')}"
            old_n, new_n = change["old_session"], change["new_session"]
            if not 1 <= old_n < new_n <= len(sessions):
                problems.append(f"{what}: sessions out of order")
                continue
            olds = [c for c in everything if said[c] == old_n and names(c, change["old_terms"])]
            news = [c for c in everything if said[c] == new_n and names(c, change["new_terms"])]
            if len(olds) != 1 or len(news) != 1:
                problems.append(f"{what}: {len(olds)} old and {len(news)} new facts name the terms")
                continue
            old, new = olds[0], news[0]
            if replaced.get(old) != new:
                problems.append(f"{what}: the new fact does not supersede the old one")
            for content in everything:
                if content != old and names(content, change["old_terms"]):
                    problems.append(f"{what}: old terms also in: {content}")
                if content != new and names(content, change["new_terms"]):
                    problems.append(f"{what}: new terms also in: {content}")
            as_of = moment(change["as_of"])
            old_end = times[old_n - 1] + TURN_GAP * len(sessions[old_n - 1]["turns"])
            if not old_end < as_of < times[new_n - 1]:
                problems.append(f"{what}: as_of is not between the two sessions")
            for key in ("question", "old_question", "old", "new"):
                if not str(change.get(key, "")).strip():
                    problems.append(f"{what}: no {key}")
        for control in sample.get("unchanged", []):
            what = f"{sid}/{control.get('what')}"
            hits = [c for c in everything if names(c, control["terms"])]
            if len(hits) != 1 or said[hits[0]] != control["session"]:
                problems.append(f"{what}: {len(hits)} facts name the terms (one, of its session)")
            elif hits[0] in replaced:
                problems.append(f"{what}: an unchanged fact is superseded")
            if not str(control.get("question", "")).strip():
                problems.append(f"{what}: no question")
    return problems


# -- the scripted model ------------------------------------------------------------------------


@dataclass
class Script:
    """What the scripted model answers: the facts of the session being compacted, and per
    mode the update call's decisions. Counts how often the annotated target was shown."""

    mode: str = "validity"
    facts: list[dict[str, Any]] = field(default_factory=list)
    expected: int = 0  # supersessions and duplicates the annotation asks for
    shown: int = 0  # ... whose target the update call showed with the new fact
    calls: int = 0

    def facts_answer(self) -> str:
        return json.dumps(
            [
                {"content": f["content"], "type": f.get("type", "fact"), "confidence": 0.9}
                for f in self.facts
            ],
            ensure_ascii=False,
        )

    def decide(self, text: str) -> str:
        self.calls += 1
        if self.mode == "baseline":
            return "[]"
        shown: dict[int, dict[str, str]] = {}
        contents: dict[int, str] = {}
        current = 0
        for line in text.splitlines():
            if m := NEW_FACT.match(line):
                current = int(m[1])
                contents[current] = m[2]
                shown[current] = {}
            elif (m := SHOWN.match(line)) and current:
                shown[current][m[2]] = m[1]
        by_content = {f["content"]: f for f in self.facts}
        decisions = []
        for n, content in contents.items():
            fact = by_content.get(content, {})
            decision: dict[str, Any] = {"n": n, "action": "add"}
            for key, action in (("supersedes", "supersede"), ("duplicate_of", "duplicate")):
                target = fact.get(key)
                if target:
                    self.expected += 1
                    if target in shown[n]:
                        self.shown += 1
                        decision = {"n": n, "action": action, "id": shown[n][target]}
            decisions.append(decision)
        return json.dumps(decisions)


class ScriptedLLM(FakeLLM):
    """tests/fake_llm.py's fake OpenAI-compatible server, answering from the script: the
    extraction with the session's annotated facts, the update call as annotated, and a
    summary that names no value (so `notes` show only what the facts say)."""

    def __init__(self, script: Script) -> None:
        super().__init__()
        self.summary = NEUTRAL_SUMMARY
        self.updates = script.decide
        self._script = script

    def answer(self, body: dict[str, Any]) -> tuple[int, str]:
        instructions = body.get("instructions") or body.get("messages", [{}])[0].get("content", "")
        if instructions == FACTS_INSTRUCTIONS:
            return 200, self._script.facts_answer()
        return super().answer(body)


class NoUpdateCall:
    """The real model with the update call left out (the baseline of `--real`): every new fact
    undecided, as an answer of `[]` leaves it."""

    def __init__(self, model: Any, script: Script) -> None:
        self._model = model
        self._script = script

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def decide_updates(
        self, facts: list[ExtractedFact], shown: list[list[Stored]]
    ) -> list[Decision | None]:
        if self._script.mode == "baseline":
            return [None] * len(facts)
        decided: list[Decision | None] = self._model.decide_updates(facts, shown)
        return decided


# -- replay and questions ----------------------------------------------------------------------


def agent_of(name: str, mode: str) -> str:
    return f"updates-{name}-{mode}"


def replay(
    client: TestClient,
    clock: BenchClock,
    script: Script,
    agent: str,
    phone: str,
    sample: dict[str, Any],
) -> dict[str, Any]:
    """Every session's turns at their times, then a forced compaction with that session's facts
    as the scripted extraction."""
    headers = {"Authorization": f"Bearer {ADMIN}"}
    added = 0
    for session in sample["sessions"]:
        at = moment(session["date_time"])
        for turn in session["turns"]:
            clock.now = at
            response = client.post(
                f"/v1/agents/{agent}/people/{phone}/messages",
                json={
                    "role": "user" if turn["speaker"] == "person" else "assistant",
                    "content": turn["text"],
                    "created_at": iso(at),
                },
                headers=headers,
            )
            response.raise_for_status()
            at += TURN_GAP
        clock.now = at
        script.facts = session["facts"]
        response = client.post(f"/v1/agents/{agent}/people/{phone}/compact", headers=headers)
        response.raise_for_status()
        added += int(response.json()["facts_added"])
    return {"facts_added": added}


def context(
    client: TestClient, agent: str, phone: str, query: str, params: dict[str, Any]
) -> dict[str, Any]:
    response = client.get(
        f"/v1/agents/{agent}/people/{phone}/context",
        params={"query": query, **params},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def stored(client: TestClient, agent: str, phone: str) -> list[str]:
    """The person's current stored facts (not superseded)."""
    response = client.get(
        f"/v1/agents/{agent}/memories",
        params={"phone": phone, "limit": 1000},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    response.raise_for_status()
    return [m["content"] for m in response.json()["items"]]


def ask(
    client: TestClient, agent: str, phone: str, sample: dict[str, Any], params: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows per changing fact and per unchanged one."""
    current = stored(client, agent, phone)
    changes = []
    for change in sample["changes"]:
        now = context(client, agent, phone, change["question"], params)
        then = context(
            client, agent, phone, change["old_question"], {**params, "as_of": change["as_of"]}
        )
        facts = [f["content"] for f in now["facts"]]
        past = [f["content"] for f in then["facts"]]
        old, new = change["old_terms"], change["new_terms"]
        changes.append(
            {
                "conversation": sample["id"],
                "what": change["what"],
                "a": any(names(f, new) for f in facts),
                "b": not any(names(f, old) for f in facts),
                "b_notes": not names(now["notes"], old),
                "c": any(names(f, old) for f in past),
                "c_clean": not any(names(f, new) for f in past),
                "a_stored": any(names(f, new) for f in current),
                "b_stored": not any(names(f, old) for f in current),
                "facts": facts,
                "facts_as_of": past,
            }
        )
    controls = []
    for control in sample["unchanged"]:
        now = context(client, agent, phone, control["question"], params)
        facts = [f["content"] for f in now["facts"]]
        controls.append(
            {
                "conversation": sample["id"],
                "what": control["what"],
                "d": any(names(f, control["terms"]) for f in facts),
                "d_stored": any(names(f, control["terms"]) for f in current),
                "facts": facts,
            }
        )
    return changes, controls


def summarise(changes: list[dict[str, Any]], controls: list[dict[str, Any]]) -> dict[str, Any]:
    def share(rows: list[dict[str, Any]], key: str) -> float | None:
        return round(100 * statistics.fmean(float(r[key]) for r in rows), 1) if rows else None

    return {
        "conversations": len({r["conversation"] for r in changes + controls}),
        "changes": len(changes),
        "unchanged": len(controls),
        **{key: share(changes, key) for key in METRICS},
        **{key: share(controls, key) for key in CONTROLS},
    }


# -- the run -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", choices=(*SETS, "both"), default="both")
    parser.add_argument("--conversations", default=None, help="ids, comma-separated (default all)")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="the embedding model")
    parser.add_argument(
        "--real",
        action="store_true",
        help="the model of the server's settings (MEMORY_LLM_*), not the scripted one",
    )
    parser.add_argument(
        "--threshold", type=float, default=None, help="the context's fact floor (default: server's)"
    )
    parser.add_argument("--database-url", default=None, help="PostgreSQL (default SQLite)")
    parser.add_argument("--out", type=Path, default=None, help="write updates.<set>.json/.md")
    parser.add_argument("--quiet", action="store_true")
    return parser.parse_args(argv)


def main(
    argv: Sequence[str] | None = None,
    *,
    encoder_factory: Callable[[str], Any] | None = None,
) -> dict[str, Any]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    names_ = SETS if args.data == "both" else (args.data,)
    wanted = {c.strip() for c in args.conversations.split(",")} if args.conversations else None
    sets = {name: load(name) for name in names_}
    for name, samples in sets.items():
        problems = problems_of(samples)
        if problems:
            raise SystemExit(f"{name}/updates.json: " + "; ".join(problems[:5]))
        if wanted:
            sets[name] = [s for s in samples if s["id"] in wanted]
    params = {} if args.threshold is None else {"threshold": args.threshold}
    started = time.perf_counter()
    script = Script()
    clock = BenchClock()
    rows: dict[tuple[str, str], tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    llm: FakeLLM | None = None
    shown: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-updates-") as tmp:
        overrides: dict[str, Any] = {
            "data_dir": Path(tmp),
            "embedding_model": args.model,
            "admin_key": ADMIN,
            "compact_keep": 0,
            "database_url": args.database_url or os.environ.get("MEMORY_DATABASE_URL"),
        }
        if not args.real:
            llm = ScriptedLLM(script).__enter__()
            overrides |= {
                "llm_base_url": llm.base_url,
                "llm_api_key": "sk-scripted",
                "llm_model": "scripted",
                "llm_api": "responses",
                "llm_retries": 0,
            }
        try:
            settings = Settings(**overrides)  # type: ignore[arg-type]
            if not settings.llm_enabled:
                raise SystemExit("--real: set MEMORY_LLM_BASE_URL and/or MEMORY_LLM_API_KEY")
            model_name = settings.llm_model if args.real else "scripted"
            app = create_app(
                settings, clock=clock, run_workers=False, encoder_factory=encoder_factory
            )
            with TestClient(app) as client:
                services = app.state.services
                if args.real:
                    compaction = services.compaction
                    compaction._model = NoUpdateCall(compaction._model, script)
                for s_index, (name, samples) in enumerate(sets.items()):
                    for mode in MODES:
                        script.mode = mode
                        agent = agent_of(name, mode)
                        for i, sample in enumerate(samples):
                            phone = f"+1555{s_index}{i:06d}"
                            replay(client, clock, script, agent, phone, sample)
                            if not args.quiet:
                                print(f"{name} {mode} {sample['id']}: replayed", flush=True)
                        services.indexer.drain()
                        if mode == "validity":
                            shown[name] = {"expected": script.expected, "shown": script.shown}
                            script.expected = script.shown = 0
                        last = (
                            max(moment(s["sessions"][-1]["date_time"]) for s in samples)
                            if samples
                            else clock.now
                        )
                        clock.now = max(clock.now, last) + timedelta(days=1)
                        changes: list[dict[str, Any]] = []
                        controls: list[dict[str, Any]] = []
                        for i, sample in enumerate(samples):
                            phone = f"+1555{s_index}{i:06d}"
                            more, also = ask(client, agent, phone, sample, params)
                            changes += more
                            controls += also
                        rows[(name, mode)] = (changes, controls)
        finally:
            if llm is not None:
                llm.__exit__()
    report = build_report(args, sets, rows, shown, model_name, time.perf_counter() - started)
    for name in [*sets, *(["all"] if len(sets) > 1 else [])]:
        text = markdown(report, name)
        print(text + "\n", flush=True)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            part = report if name == "all" else {**report, "sets": {name: report["sets"][name]}}
            (args.out / f"updates.{name}.json").write_text(
                json.dumps(part, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
            )
            (args.out / f"updates.{name}.md").write_text(text + "\n", encoding="utf-8")
    return report


# -- the report --------------------------------------------------------------------------------

COLUMNS = {
    "changes": "changes",
    "a": "(a) current in context",
    "b": "(b) stale absent: facts",
    "b_notes": "(b) stale absent: notes",
    "c": "(c) as_of: old value",
    "c_clean": "(c) as_of: new value absent",
    "unchanged": "unchanged",
    "d": "(d) unchanged current",
    "a_stored": "stored: current",
    "b_stored": "stored: stale gone",
    "d_stored": "stored: unchanged",
}


def build_report(
    args: argparse.Namespace,
    sets: dict[str, list[dict[str, Any]]],
    rows: dict[tuple[str, str], tuple[list[dict[str, Any]], list[dict[str, Any]]]],
    shown: dict[str, dict[str, int]],
    model_name: str,
    seconds: float,
) -> dict[str, Any]:
    report: dict[str, Any] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "embedding_model": args.model,
        "llm": model_name,
        "real": bool(args.real),
        "threshold": args.threshold,
        "database": "postgresql"
        if (args.database_url or os.environ.get("MEMORY_DATABASE_URL"))
        else "sqlite",
        "seconds": round(seconds, 1),
        "sets": {},
        "all": {},
    }
    for name, samples in sets.items():
        report["sets"][name] = {
            "conversations": [s["id"] for s in samples],
            "update_targets_shown": shown.get(name),
            "modes": {
                mode: {
                    "summary": summarise(*rows[(name, mode)]),
                    "changes": rows[(name, mode)][0],
                    "unchanged": rows[(name, mode)][1],
                }
                for mode in MODES
            },
        }
    for mode in MODES:
        changes = [r for name in sets for r in rows[(name, mode)][0]]
        controls = [r for name in sets for r in rows[(name, mode)][1]]
        report["all"][mode] = summarise(changes, controls)
    return report


def markdown(report: dict[str, Any], name: str) -> str:
    if name == "all":
        title = "both sets"
        summaries = report["all"]
        targets = [report["sets"][n]["update_targets_shown"] for n in report["sets"]]
        ids = sum(len(report["sets"][n]["conversations"]) for n in report["sets"])
        count = f"{ids} conversations"
    else:
        title = f"the {name} set"
        summaries = {m: v["summary"] for m, v in report["sets"][name]["modes"].items()}
        targets = [report["sets"][name]["update_targets_shown"]]
        count = f"{len(report['sets'][name]['conversations'])} conversations"
    expected = sum(t["expected"] for t in targets if t)
    found = sum(t["shown"] for t in targets if t)
    floor = "server default" if report["threshold"] is None else str(report["threshold"])
    lines = [
        f"# Facts that change: {title}",
        "",
        f"{count}; model {report['llm']}, encoder {report['embedding_model']}, fact floor"
        f" {floor}, {report['database']}, {report['when']}. Shares in %."
        + (
            f" The update call showed the annotated stored fact for {found} of {expected}"
            " supersessions."
            if expected and not report["real"]
            else ""
        ),
        "",
        "| mode | " + " | ".join(COLUMNS.values()) + " |",
        "| --- |" + " --- |" * len(COLUMNS),
    ]
    for mode, summary in summaries.items():
        cells = ["-" if summary[k] is None else str(summary[k]) for k in COLUMNS]
        lines.append(f"| {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
