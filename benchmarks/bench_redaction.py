"""Redaction measured by class (issue 40): secrets caught and ordinary messages altered, per
class and per part (dev, held-out test), in Spanish (Spain and Latin America), English,
Portuguese (Brazil) and mixed, as WhatsApp users type them; and what it costs: per message of the
corpus, per 4,000-character turn, per 32,000-character adversarial field, and (if asked) on the
p50 of storing a turn over HTTP.

The corpus (benchmarks/redaction_corpus.py) is generated and seeded. Each class's wordings are
split in two parts written together before issue 40's rule changes: dev
(benchmarks/redaction_dev.py), which the rules may be tuned on, and test
(benchmarks/redaction_heldout.py), which they are not: `--misses dev` prints the dev part's
misses and alterations, never the test part's. A secret is caught when no form of it is left
(redaction_corpus.caught); an ordinary message is altered when its text changes at all.

Run with:
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_redaction.py --out benchmarks/results
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_redaction.py --store-rounds 0 --misses dev
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import server.redaction as redaction_module  # noqa: E402
from benchmarks import redaction_corpus as corpus  # noqa: E402
from benchmarks.redaction_corpus import Turn  # noqa: E402
from server.redaction import DEFAULT_KINDS, KINDS, redact  # noqa: E402

Redact = Callable[[str, frozenset[str]], str]

# -- quality --------------------------------------------------------------------------------------


def _percent(part: int, whole: int) -> float:
    return round(100 * part / max(whole, 1), 2)


def _timed(redact_fn: Redact, text: str, kinds: frozenset[str]) -> tuple[str, float, float]:
    """The redacted text, then the call's CPU time (this thread's: what the code costs, steady
    on a loaded machine) and its wall-clock time, in microseconds."""
    wall, cpu = time.perf_counter(), time.thread_time()
    out = redact_fn(text, kinds)
    return out, (time.thread_time() - cpu) * 1e6, (time.perf_counter() - wall) * 1e6


def measure(turns: Sequence[Turn], redact_fn: Redact, kinds: frozenset[str]) -> dict[str, Any]:
    """Per class and part: secrets caught or ordinary messages altered; the cost of each
    message; the dev part's misses and alterations (the test part's are never kept)."""
    for turn in turns[:200]:  # warm up
        redact_fn(turn.text, kinds)
    counts: dict[str, dict[str, list[int]]] = {}  # class -> part -> [hits, all]
    cpu: list[float] = []
    wall: list[float] = []
    dev_misses: list[dict[str, str]] = []
    for turn in turns:
        out, cpu_us, wall_us = _timed(redact_fn, turn.text, kinds)
        cpu.append(cpu_us)
        wall.append(wall_us)
        hit = corpus.caught(turn, out) if turn.is_secret else out != turn.text
        row = counts.setdefault(turn.klass, {p: [0, 0] for p in corpus.PARTS})[turn.part]
        row[0] += hit
        row[1] += 1
        if turn.part == "dev" and hit != turn.is_secret:
            dev_misses.append(
                {"class": turn.klass, "secret": turn.secret, "text": turn.text, "redacted": out}
            )
    secrets = {k: _rows(counts[k], "caught") for k in corpus.SECRET_CLASSES if k in counts}
    ordinary = {k: _rows(counts[k], "altered") for k in corpus.ORDINARY_CLASSES if k in counts}
    return {
        "secrets": secrets,
        "ordinary": ordinary,
        "totals": {p: _totals(secrets, ordinary, p) for p in corpus.PARTS},
        "cost_us": {**_spread(cpu), "wall": _spread(wall)},
        "dev_misses": dev_misses,
    }


def _rows(parts: dict[str, list[int]], what: str) -> dict[str, dict[str, Any]]:
    return {p: {what: h, "n": n, "percent": _percent(h, n)} for p, (h, n) in parts.items()}


def _totals(secrets: dict[str, Any], ordinary: dict[str, Any], part: str) -> dict[str, Any]:
    caught = sum(r[part]["caught"] for r in secrets.values())
    planted = sum(r[part]["n"] for r in secrets.values())
    altered = sum(r[part]["altered"] for r in ordinary.values())
    messages = sum(r[part]["n"] for r in ordinary.values())
    return {
        "secrets": planted,
        "caught": caught,
        "caught_percent": _percent(caught, planted),
        "ordinary": messages,
        "altered": altered,
        "altered_percent": _percent(altered, messages),
    }


def _spread(costs: Sequence[float]) -> dict[str, float]:
    ordered = sorted(costs)
    return {
        "n": len(ordered),
        "p50": round(statistics.median(ordered), 1),
        "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
        "max": round(ordered[-1], 1),
        "mean": round(statistics.fmean(ordered), 1),
    }


# -- cost -----------------------------------------------------------------------------------------


def long_turns(turns: Sequence[Turn], count: int, chars: int, seed: int, dense: bool) -> list[str]:
    """Distinct long turns of `chars` characters, joined by line breaks or spaces. Realistic:
    sentences with no number (corpus.PROSE), one in four a message of the corpus (one in twenty
    with a secret). Dense: messages of the corpus only (one in five with a secret)."""
    rng = random.Random(seed)
    secret = [t.text for t in turns if t.is_secret]
    ordinary = [t.text for t in turns if not t.is_secret]
    out = []
    for _ in range(count):
        pieces: list[str] = []
        while sum(len(p) + 1 for p in pieces) < chars:
            draw = rng.random()
            if dense:
                pieces.append(rng.choice(secret if draw < 0.2 else ordinary))
            else:
                pool = secret if draw < 0.05 else ordinary if draw < 0.25 else corpus.PROSE
                pieces.append(rng.choice(pool))
            pieces[-1] += rng.choice(["\n", " "])
        out.append("".join(pieces)[:chars])
    return out


def field_shapes(chars: int, seed: int) -> dict[str, str]:
    """Adversarial fields of `chars` characters: digits with every separator, single digits,
    one digit run, repeated keywords, IBAN-like groups, valid cards back to back, full-width
    digits between zero-width spaces."""
    rng = random.Random(seed)

    def digits(n: int) -> str:
        return "".join(rng.choice("0123456789") for _ in range(n))

    seps = [" ", "-", ".", "/", "  ", "\n", "\u2009", ", ", "_", "\t", " - "]
    groups = "".join(digits(rng.randint(1, 4)) + rng.choice(seps) for _ in range(chars // 2))
    keywords = (
        "código: 12 clave senha \u27a1\ufe0f cvv 4 password: pin 7 contraseña es la "
        "tarjeta nro dni 3 CLABE iban ES "
    )
    cards = " ".join(corpus.card_number(rng) for _ in range(chars // 16))
    full_width = "\u200b".join(chr(0xFF10 + int(c)) for c in digits(chars))
    shapes = {
        "digit groups, every separator": groups,
        "single digits and spaces": " ".join(digits(chars // 2)),
        "one digit run": digits(chars),
        "repeated keywords": keywords * (chars // len(keywords) + 1),
        "IBAN-like groups": " ".join(
            f"ES{digits(2)} {digits(4)} {digits(4)}" for _ in range(chars)
        ),
        "valid cards back to back": cards,
        "full-width digits, zero-width spaces": full_width,
    }
    return {name: text[:chars] for name, text in shapes.items()}


def measure_cost(
    turns: Sequence[Turn], redact_fn: Redact, args: argparse.Namespace
) -> dict[str, Any]:
    long: dict[str, dict[str, Any]] = {}
    for shape, dense in (("realistic", False), ("dense", True)):
        texts = long_turns(turns, args.long_runs, args.long_chars, args.seed, dense)
        for text in texts[:5]:
            redact_fn(text, DEFAULT_KINDS)
        timed = [_timed(redact_fn, text, DEFAULT_KINDS)[1:] for text in texts]
        cpu, wall = [c for c, _ in timed], [w for _, w in timed]
        long[shape] = {"chars": args.long_chars, **_spread(cpu), "wall": _spread(wall)}
    fields: dict[str, dict[str, float]] = {}
    for name, text in field_shapes(args.field_chars, args.seed).items():
        runs = [_timed(redact_fn, text, DEFAULT_KINDS)[1:] for _ in range(args.field_runs)]
        fields[name] = {
            "median_us": round(statistics.median(c for c, _ in runs), 1),
            "max_us": round(max(c for c, _ in runs), 1),
            "wall_median_us": round(statistics.median(w for _, w in runs), 1),
        }
    worst = max(fields, key=lambda name: fields[name]["median_us"])
    return {
        "long_turn": long,
        "field": {
            "chars": args.field_chars,
            "runs": args.field_runs,
            "shapes": fields,
            "worst": worst,
            "worst_us": fields[worst]["median_us"],
        },
    }


def store_turn_p50(
    turns: Sequence[Turn], rounds: int, encoder_factory: Any = None
) -> dict[str, float]:
    """p50 of POST .../messages over HTTP (in process, SQLite), redaction on and off: the same
    text to each in turn (which goes first alternates), so load on the machine hits both alike."""
    from fastapi.testclient import TestClient

    from server.app import create_app
    from server.config import Settings

    admin = "bench-admin-key-0123456789abcdef"
    header = {"Authorization": f"Bearer {admin}"}
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(data_dir=Path(folder), admin_key=admin, sqlite_synchronous="NORMAL")
        app = create_app(settings, run_workers=False, encoder_factory=encoder_factory)
        with TestClient(app) as client:
            client.put("/v1/agents/off/settings", json={"redact": "off"}, headers=header)
            timings: dict[str, list[float]] = {"on": [], "off": []}
            texts = [t.text for t in turns]
            for i in range(1, rounds * 100 + 1):
                text = texts[i % len(texts)]
                phone = f"+1555{i % 50:07d}"
                for agent in ("on", "off") if i % 2 == 0 else ("off", "on"):
                    started = time.perf_counter()
                    response = client.post(
                        f"/v1/agents/{agent}/people/{phone}/messages",
                        json={"role": "user", "content": text},
                        headers=header,
                    )
                    timings[agent].append((time.perf_counter() - started) * 1000)
                    assert response.status_code == 201, response.text
    on, off = statistics.median(timings["on"]), statistics.median(timings["off"])
    return {"on_ms": round(on, 3), "off_ms": round(off, 3), "added_ms": round(on - off, 3)}


def optional_kinds(seed: int, redact_fn: Redact) -> dict[str, Any]:
    """Round 1's optional kinds (emails, street addresses), with every kind on."""
    rng = random.Random(seed + 1)
    names = ["ana.perez", "jlopez", "maria_g", "tom.smith", "k.ito"]
    domains = ["gmail.com", "hotmail.es", "empresa.com.mx", "yahoo.com", "uol.com.br"]
    streets = [
        "Calle Mayor {n}, 3ºB",
        "calle de la Princesa {n}",
        "Avenida Insurgentes Sur {n}",
        "Av. Corrientes {n}",
        "{n} Main Street",
        "{n} Oak Avenue",
    ]
    turns = []
    for i in range(200):
        email = f"{rng.choice(names)}{rng.randint(1, 99)}@{rng.choice(domains)}"
        wording = ["mi correo es {s}", "email me at {s}", "escríbeme a {s}", "{s}"][i % 4]
        turns.append(_optional_turn("email", wording, email))
        address = streets[i % len(streets)].format(n=rng.randint(1, 999))
        wording = ["Envíalo a {s}", "ship it to {s}", "vivo en {s}", "my address is {s}"][i % 4]
        turns.append(_optional_turn("address", wording, address))
    out: dict[str, dict[str, int]] = {}
    for turn in turns:
        row = out.setdefault(turn.klass, {"caught": 0, "n": 0})
        row["caught"] += corpus.caught(turn, redact_fn(turn.text, frozenset(KINDS)))
        row["n"] += 1
    return {k: {**v, "percent": _percent(v["caught"], v["n"])} for k, v in out.items()}


def _optional_turn(klass: str, wording: str, secret: str) -> Turn:
    compact = corpus.squash(corpus.normalise(secret))
    return Turn(wording.replace("{s}", secret), klass, "dev", secret, compact)


# -- reporting ------------------------------------------------------------------------------------


def code_state() -> dict[str, Any]:
    """Which code was measured: the commit, and whether the redaction had uncommitted changes."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
        )
        return done.stdout.strip() if done.returncode == 0 else "unknown"

    status = git("status", "--porcelain", "--", "server/redaction.py", "server/redaction")
    module = Path(redaction_module.__file__ or "")
    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "redaction_modified": status not in ("", "unknown"),
        "module": str(module.relative_to(ROOT)) if module.is_relative_to(ROOT) else str(module),
        "load_average": round(os.getloadavg()[0], 1),
        "cores": os.cpu_count(),
    }


def table(result: dict[str, Any]) -> str:
    code, quality, cost = result["code"], result["quality"], result["cost"]
    state = "with uncommitted changes" if code["redaction_modified"] else "as committed"
    lines = [
        f"Redaction at {code['commit']} ({code['module']}, {state}); seed {result['seed']}, "
        f"{result['secrets_per_part']} secrets and {result['ordinary_per_part']} ordinary "
        f"messages per class and part; load average {code['load_average']} on {code['cores']} "
        "cores at the start. Both parts were written before issue 40's rule changes; "
        "the test part is held out (never tuned on). ¹ round 1's class: its dev wordings are "
        "round 1's (all seen by its rules), its test wordings new.",
        "",
        "| secrets caught | dev | dev % | test | test % |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += _class_rows(quality["secrets"], "caught")
    totals = quality["totals"]
    lines.append(
        "| **all** | "
        + " | ".join(
            f"{totals[p]['caught']}/{totals[p]['secrets']} | {totals[p]['caught_percent']}"
            for p in corpus.PARTS
        )
        + " |"
    )
    lines += [
        "",
        "| ordinary altered | dev | dev % | test | test % |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += _class_rows(quality["ordinary"], "altered")
    lines.append(
        "| **all** | "
        + " | ".join(
            f"{totals[p]['altered']}/{totals[p]['ordinary']} | {totals[p]['altered_percent']}"
            for p in corpus.PARTS
        )
        + " |"
    )
    turn, field, long = quality["cost_us"], cost["field"], cost["long_turn"]
    lines += [
        "",
        "| cost (default kinds), CPU µs | p50 | p99 | max | wall p50 | wall p99 |",
        "| --- | --- | --- | --- | --- | --- |",
        _cost_row(f"a message of the corpus ({turn['n']})", turn),
        _cost_row(
            f"a {long['realistic']['chars']:,}-character turn, mostly prose "
            f"({long['realistic']['n']} distinct)",
            long["realistic"],
        ),
        _cost_row(
            f"a {long['dense']['chars']:,}-character turn, corpus messages only "
            f"({long['dense']['n']} distinct)",
            long["dense"],
        ),
        "",
        f"| a {field['chars']:,}-character field, median of {field['runs']} | CPU µs | wall µs |",
        "| --- | --- | --- |",
    ]
    for name, shape in field["shapes"].items():
        worst = " (worst)" if name == field["worst"] else ""
        lines.append(
            f"| {name}{worst} | {shape['median_us']:,.0f} | {shape['wall_median_us']:,.0f} |"
        )
    optional = result["optional"]
    lines += [
        "",
        "Optional kinds (every kind on, round 1's wordings): "
        + ", ".join(f"{k} {v['caught']}/{v['n']}" for k, v in optional.items())
        + " caught.",
    ]
    if "store" in result:
        s = result["store"]
        lines.append(
            f"Storing a turn over HTTP (in process, SQLite), p50: {s['on_ms']} ms with "
            f"redaction, {s['off_ms']} ms without: {s['added_ms']:+} ms."
        )
    return "\n".join(lines)


def _cost_row(what: str, spread: dict[str, Any]) -> str:
    wall = spread["wall"]
    cells = [spread["p50"], spread["p99"], spread["max"], wall["p50"], wall["p99"]]
    return f"| {what} | " + " | ".join(f"{c:,}" for c in cells) + " |"


def _class_rows(rows: dict[str, Any], what: str) -> list[str]:
    out = []
    for klass, parts in rows.items():
        mark = "¹" if klass in corpus.ROUND_1_CLASSES else ""
        cells = [f"{parts[p][what]}/{parts[p]['n']} | {parts[p]['percent']}" for p in corpus.PARTS]
        out.append(f"| {klass}{mark} | {' | '.join(cells)} |")
    return out


def print_misses(misses: Sequence[dict[str, str]], progress: Callable[[str], None]) -> None:
    """The dev part's missed secrets and altered ordinary messages, by class."""
    progress(f"\n{len(misses)} dev misses and alterations:")
    for miss in sorted(misses, key=lambda m: m["class"]):
        what = f"missed {miss['secret']!r}" if miss["secret"] else "altered"
        progress(f"[{miss['class']}] {what}\n    {miss['text']!r}\n -> {miss['redacted']!r}")


def main(
    argv: Sequence[str] | None = None,
    progress: Callable[[str], None] = print,
    encoder_factory: Any = None,
    redact_fn: Redact | None = None,
) -> dict[str, Any]:
    """encoder_factory: the server's encoder for the HTTP part (tests pass a fake one);
    redact_fn: what is measured (the server's redact unless a test passes another)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--secrets", type=int, default=60, help="secrets per class and part")
    parser.add_argument("--ordinary", type=int, default=60, help="messages per class and part")
    parser.add_argument("--long-runs", type=int, default=300, help="distinct long turns timed")
    parser.add_argument("--long-chars", type=int, default=4000)
    parser.add_argument("--field-chars", type=int, default=32000)
    parser.add_argument("--field-runs", type=int, default=3, help="runs of each field shape")
    parser.add_argument("--store-rounds", type=int, default=10, help="0: skip the HTTP part")
    parser.add_argument(
        "--misses", choices=["dev"], default=None, help="print the dev part's misses"
    )
    parser.add_argument("--out", type=Path, default=None, help="write redaction.json/.md")
    parser.add_argument("--name", default="redaction", help="the result files' name")
    args = parser.parse_args(argv)
    measured = redact_fn or redact
    turns = corpus.build(args.seed, args.secrets, args.ordinary)
    progress(f"corpus: {len(turns)} messages, seed {args.seed}")
    quality = measure(turns, measured, DEFAULT_KINDS)
    dev_misses = quality.pop("dev_misses")
    result: dict[str, Any] = {
        "code": code_state(),
        "seed": args.seed,
        "secrets_per_part": args.secrets,
        "ordinary_per_part": args.ordinary,
        "default_kinds": sorted(DEFAULT_KINDS),
        "quality": quality,
        "cost": measure_cost(turns, measured, args),
        "optional": optional_kinds(args.seed, measured),
        "dev_miss_count": len(dev_misses),
    }
    if args.store_rounds:
        progress(f"storing {args.store_rounds * 200} turns over HTTP, redaction on and off")
        result["store"] = store_turn_p50(turns, args.store_rounds, encoder_factory)
    text = table(result)
    progress(text)
    if args.misses == "dev":
        print_misses(dev_misses, progress)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        dumped = json.dumps(result, indent=1, ensure_ascii=False)
        (args.out / f"{args.name}.json").write_text(dumped + "\n", encoding="utf-8")
        (args.out / f"{args.name}.md").write_text(text + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
