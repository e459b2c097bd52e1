"""The README runs: its shell examples, in order, against a live server with the default model,
each shown output compared with the real one.

How README.md's source maps to checks:

- Every fenced block marked `sh`, `bash` or `shell` runs, all of them in order in one bash
  (`set -euo pipefail`), so a walk-through's variables carry over from block to block.
  `http://127.0.0.1:8080` becomes the test server's address. The server runs as the README
  starts it: `MEMORY_ADMIN_KEY` from the README's serve command, the default model, no
  compaction model.
- A block whose fence has `<!-- not run: why -->` on the line before it is skipped; the reason
  is required. A new block therefore runs unless it says why not.
- curl reads a `.curlrc` with `--fail-with-body --show-error`: an HTTP error fails the block.
- Shown output is a comment whose text starts with `{`, `[` or `"` (`"facts":[...]` is a
  fragment of the answer's top-level object), right after a command or at the end of the
  command's line, continued on the comment lines after it until it parses; a trailing
  `(remark)` is left out. It is compared with the last JSON value printed since the previous
  check: an object on the fields shown only; a list on the items shown, in order, and no more
  unless it ends with `...`; a string ending in `...` is a prefix (`"mem_..."`, and `"..."` is
  anything); a number with a fraction within 0.02 (scores), any other value exactly.
- A count the prose gives for the walk-through ("Store three turns", "the person has 46
  turns") is in CLAIMS: the person's turns are read before and after the block that follows
  it, and the counts must be what that block did.

And what the README says without running anything:

- the table of contents lists every `##` section in order, each `###` under its own, and
  every link of either README to a heading or a file resolves (GitHub's anchors);
- the Performance table's figures are read from the JSON under `benchmarks/results/` that
  its command wrote (SUMMARY says where each one is; a row SUMMARY does not know fails);
- the counts in prose that the code decides (compaction's 40 and 20, seven schema versions,
  four MCP tools) and the table of thresholds per model are the code's;
- the Layout block names only paths that exist, and every module of `server/`.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from embeddings.calibration import OTHER, Calibration, calibration_for
from server.config import DEFAULT_MODEL, Settings
from server.mcp_server import build_mcp
from server.store.schema import POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS
from tests.live import Server

LIVE = [pytest.mark.model, pytest.mark.slow]  # the walk-through, against the real model
STATIC = pytest.mark.no_database  # reads files only: the same on both passes

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BENCHMARKS_README = ROOT / "benchmarks" / "README.md"
RESULTS = ROOT / "benchmarks" / "results"
README_BASE = "http://127.0.0.1:8080"
SHELLS = {"sh", "bash", "shell"}
TOLERANCE = 0.02
MORE = "..."

_FENCE = re.compile(r"^```(\S*)\s*$")
_NOT_RUN = re.compile(r"^<!-- not run: (.*\S) -->$")
_JSON_START = ("{", "[", '"')
_INLINE = re.compile(r"\s#\s*([{\[\"].*)$")
_REMARK = re.compile(r"\s+\([^()]*\)$")
_MARK = re.compile(r"\n?@@readme (\d+)@@\n")


@dataclass
class Segment:
    """Commands up to one shown output (or to the end of the block)."""

    code: list[str] = field(default_factory=list)
    shown: Any = None
    start: int = 0  # README line of the first command
    line: int = 0  # README line of the shown output, or of the last command
    checked: bool = False


@dataclass
class Block:
    line: int  # README line of the opening fence
    lines: list[str]
    skip: str | None

    def segments(self) -> list[Segment]:
        return _segments(self.lines, self.line + 1)


def shell_blocks(text: str) -> list[Block]:
    """The README's fenced shell blocks, with the reason each skipped one gives."""
    blocks: list[Block] = []
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        opening = _FENCE.match(lines[number])
        if not opening:
            number += 1
            continue
        end = next(i for i in range(number + 1, len(lines)) if lines[i].startswith("```"))
        before = _NOT_RUN.match(lines[number - 1].strip()) if number else None
        if opening.group(1) in SHELLS:
            body = lines[number + 1 : end]
            blocks.append(Block(number + 1, body, before.group(1) if before else None))
        number = end + 1
    return blocks


def _segments(lines: list[str], first: int) -> list[Segment]:
    segments = [Segment()]
    pending: list[str] = []  # comment lines of a shown output that does not parse yet
    pending_line = 0
    for offset, line in enumerate(lines):
        number = first + offset
        current = segments[-1]
        stripped = line.strip()
        comment = stripped[1:].strip() if stripped.startswith("#") else None
        if pending and comment is None:
            raise ValueError(f"README.md:{pending_line}: shown output does not parse")
        if comment is not None and (pending or comment.startswith(_JSON_START)):
            if not pending and (current.checked or not current.code):
                raise ValueError(f"README.md:{number}: shown output follows no command")
            pending.append(comment)
            pending_line = pending_line or number
            shown = _parse_shown(" ".join(pending))
            if shown is not None:
                current.shown, current.line, current.checked = shown[0], pending_line, True
                segments.append(Segment())
                pending, pending_line = [], 0
            continue
        if comment is not None:
            continue
        inline = _INLINE.search(line)
        current.start = current.start or number
        current.code.append(line[: inline.start()] if inline else line)
        current.line = number
        if inline:
            shown = _parse_shown(inline.group(1))
            if shown is None:
                raise ValueError(f"README.md:{number}: shown output does not parse")
            current.shown, current.checked = shown[0], True
            segments.append(Segment())
    if pending:
        raise ValueError(f"README.md:{pending_line}: shown output does not parse")
    return [s for s in segments if s.code]


def _parse_shown(text: str) -> tuple[Any] | None:
    """(the shown value,), or None when the text is not (yet) whole JSON."""
    text = _REMARK.sub("", text.strip())
    if text.startswith('"'):
        text = "{" + text + "}"
    try:
        return (json.loads(_ellipses_to_json(text)),)
    except json.JSONDecodeError:
        return None


def _ellipses_to_json(text: str) -> str:
    """A bare `...` becomes `"..."`: a value, a list's last item, or an object member."""
    out: list[str] = []
    stack: list[str] = []
    in_string = escaped = False
    i = 0
    while i < len(text):
        char = text[i]
        if in_string:
            escaped = char == "\\" and not escaped
            in_string = escaped or char != '"'
        elif text.startswith(MORE, i):
            previous = "".join(out).rstrip()[-1:]
            member = stack[-1:] == ["{"] and previous != ":"
            out.append(f'"{MORE}": "{MORE}"' if member else f'"{MORE}"')
            i += len(MORE)
            continue
        elif char == '"':
            in_string = True
        elif char in "{[":
            stack.append(char)
        elif char in "}]" and stack:
            stack.pop()
        out.append(char)
        i += 1
    return "".join(out)


def differences(shown: Any, real: Any, path: str = "$") -> list[str]:
    """Where the real value differs from the shown one, by the rules in the module docstring."""
    if shown == MORE:
        return []
    if isinstance(shown, str) and shown.endswith(MORE):
        ok = isinstance(real, str) and real.startswith(shown[: -len(MORE)])
    elif isinstance(shown, dict):
        if not isinstance(real, dict):
            return [f"{path}: shown an object, got {real!r}"]
        found = [
            d
            for key, value in shown.items()
            if key != MORE
            for d in (
                differences(value, real[key], f"{path}.{key}")
                if key in real
                else [f"{path}.{key}: missing"]
            )
        ]
        return found
    elif isinstance(shown, list):
        return _list_differences(shown, real, path)
    elif isinstance(shown, float):
        ok = isinstance(real, int | float) and abs(real - shown) <= TOLERANCE
    else:
        ok = type(real) is type(shown) and real == shown
    return [] if ok else [f"{path}: shown {shown!r}, got {real!r}"]


def _list_differences(shown: list[Any], real: Any, path: str) -> list[str]:
    more = bool(shown) and shown[-1] == MORE
    items = shown[:-1] if more else shown
    if not isinstance(real, list):
        return [f"{path}: shown a list, got {real!r}"]
    if len(real) < len(items) or (not more and len(real) != len(items)):
        return [f"{path}: shown {len(items)} items{' or more' if more else ''}, got {len(real)}"]
    return [d for i, item in enumerate(items) for d in differences(item, real[i], f"{path}[{i}]")]


def _json_values(text: str) -> list[Any]:
    decoder = json.JSONDecoder()
    values: list[Any] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            return values
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            newline = text.find("\n", position)
            position = len(text) if newline < 0 else newline + 1  # a line that is not JSON
            continue
        values.append(value)


def _script(segments: list[Segment], base: str) -> str:
    lines = ["set -euo pipefail"]
    for number, segment in enumerate(segments):
        lines += [line.replace(README_BASE, base) for line in segment.code]
        lines.append(f"printf '\\n@@readme {number}@@\\n'")
    return "\n".join(lines) + "\n"


def _outputs(stdout: str) -> dict[int, str]:
    """What each segment printed, by segment number."""
    parts = _MARK.split(stdout)
    return {int(parts[i]): parts[i - 1] for i in range(1, len(parts), 2)}


def _admin_key(blocks: list[Block]) -> str:
    for block in blocks:
        for line in block.lines:
            if found := re.search(r"MEMORY_ADMIN_KEY=(\S+) \./scripts/serve", line):
                return found.group(1)
    raise AssertionError("the README starts the server with no MEMORY_ADMIN_KEY")


# -- counts the prose gives for the walk-through ----------------------------------------------

WORDS = {
    w: n
    for n, w in enumerate(
        ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"), 1
    )
}
WALKED = ("support-bot", "+15551234567")  # the person of "First steps with curl"


@dataclass(frozen=True)
class Turns:
    total: int
    archived: int


@dataclass(frozen=True)
class Claim:
    """Counts the prose gives (its pattern's groups, digits or words) for the runnable block that
    follows it, and the true counts from the person's turns before and after that block."""

    pattern: str
    true: Callable[[Turns, Turns], list[int]]


CLAIMS = [
    Claim(
        r"Store (\w+) turns of a conversation", lambda before, after: [after.total - before.total]
    ),
    Claim(
        r"one about\s+a refund and (\d+) more, so that the person has (\d+) turns and the first"
        r"\s+(\d+) are archived",
        lambda before, after: [after.total - before.total - 2, after.total, after.archived],
    ),
]


def _count(text: str) -> int:
    return int(text) if text.isdigit() else WORDS[text.lower()]


def _claimed(text: str, claim: Claim) -> tuple[int, list[int]]:
    """(the README line the claim is on, the counts it gives)."""
    found = re.search(claim.pattern, text)
    assert found, f"the README no longer says {claim.pattern!r}: update CLAIMS"
    return text.count("\n", 0, found.start()) + 1, [_count(g) for g in found.groups()]


def _probe(admin: str) -> Segment:
    """Prints the walked person's export (an error, before the person exists)."""
    agent, phone = WALKED
    url = f"{README_BASE}/v1/agents/{agent}/people/{phone.replace('+', '%2B')}/export"
    return Segment(code=[f'curl -s "{url}" -H "Authorization: Bearer {admin}" || true'])


def _turns(printed: str) -> Turns:
    values = _json_values(printed)
    messages = values[-1].get("messages", []) if values else []
    return Turns(len(messages), sum(1 for m in messages if m["archived"]))


@dataclass
class Walk:
    """The runnable blocks run once, with a probe before and after each claim's block."""

    segments: list[Segment]
    outputs: dict[int, str]
    failure: str | None
    probes: dict[int, tuple[int, int]]  # claim index -> (probe segment before, after)


@pytest.fixture(scope="module")
def blocks() -> list[Block]:
    return shell_blocks(README.read_text())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, blocks: list[Block]) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("readme")
    live = Server(
        folder / "data",
        MEMORY_ADMIN_KEY=_admin_key(blocks),
        MEMORY_EMBEDDING_MODEL=DEFAULT_MODEL,
        MEMORY_LLM_BASE_URL="",  # as ./scripts/serve without a model: compaction archives only
        MEMORY_LLM_API_KEY="",  # (and an OPENAI_API_KEY around the tests is not used)
        MEMORY_LOG_LEVEL="warning",
    )
    live.start(stderr=folder / "server.log")
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="module")
def walk(server: Server, blocks: list[Block], tmp_path_factory: pytest.TempPathFactory) -> Walk:
    text = README.read_text()
    runnable = [b for b in blocks if b.skip is None]
    claimed = [_claimed(text, claim)[0] for claim in CLAIMS]
    probe = _probe(_admin_key(blocks))
    segments: list[Segment] = []
    probes: dict[int, tuple[int, int]] = {}
    for block in runnable:
        mine = [i for i, line in enumerate(claimed) if line < block.line and i not in probes]
        before = len(segments)
        segments += [probe] if mine else []
        segments += block.segments()
        if mine:
            segments.append(probe)
            probes.update({i: (before, len(segments) - 1) for i in mine})
    home = tmp_path_factory.mktemp("walk")
    (home / ".curlrc").write_text("fail-with-body\nshow-error\n")
    result = subprocess.run(
        ["bash", "-c", _script(segments, server.base)],
        cwd=home,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    outputs = _outputs(result.stdout)
    failure = None
    if result.returncode != 0:
        failed = segments[min(len(outputs), len(segments) - 1)]
        failure = (
            f"README.md:{failed.start}-{failed.line}: a command failed (exit {result.returncode})"
            f"\nstderr: {result.stderr[-2000:]}\nstdout: {_MARK.split(result.stdout)[-1][-2000:]}"
        )
    return Walk(segments, outputs, failure, probes)


@pytest.mark.model
@pytest.mark.slow
def test_every_shell_block_runs_and_prints_what_it_shows(walk: Walk) -> None:
    if walk.failure:
        pytest.fail(walk.failure)
    problems: list[str] = []
    for number, segment in enumerate(walk.segments):
        if not segment.checked:
            continue
        values = _json_values(walk.outputs[number])
        if not values:
            problems.append(f"README.md:{segment.line}: printed no JSON: {walk.outputs[number]!r}")
            continue
        found = differences(segment.shown, values[-1])
        if found:
            real = json.dumps(values[-1], ensure_ascii=False)[:1500]
            problems.append(f"README.md:{segment.line}: {'; '.join(found)}\n  real: {real}")
    assert not problems, "\n".join(problems)


@pytest.mark.model
@pytest.mark.slow
def test_the_counts_in_prose_are_what_the_walk_through_does(walk: Walk) -> None:
    if walk.failure:
        pytest.fail(walk.failure)
    text = README.read_text()
    assert sorted(walk.probes) == list(range(len(CLAIMS))), "a claim has no block after it"
    problems = []
    for index, claim in enumerate(CLAIMS):
        line, counts = _claimed(text, claim)
        before, after = (_turns(walk.outputs[n]) for n in walk.probes[index])
        true = claim.true(before, after)
        if counts != true:
            problems.append(f"README.md:{line}: says {counts}, the walk-through did {true}")
    assert not problems, "\n".join(problems)


@STATIC
def test_blocks_not_run_are_the_ones_that_cannot_be(blocks: list[Block]) -> None:
    """The serve commands, the README's own key, a real model, a restore that needs every
    replica stopped, and the command-line synopsis: each one named, so a new skipped block must
    say why here too."""
    skipped = [b.skip for b in blocks if b.skip]
    assert skipped == [
        "they set up .venv and serve, or run the whole suite",
        "the README's test starts the server itself, with this key",
        "it needs a model (tests/server/test_example_agent.py runs it with a fake one)",
        "they start the server with a model (the test's server has none)",
        "needs every replica stopped and a backup folder",
        "a synopsis (placeholders such as M and DIR; restore needs the server stopped)",
    ], skipped
    assert sum(1 for b in blocks if not b.skip and any(s.checked for s in b.segments())) >= 6


@STATIC
def test_shown_output_rules() -> None:
    shown = _parse_shown('"items":[{"id":"mem_...","score":0.85,...}, ...]  (a remark)')
    assert shown is not None
    first: dict[str, Any] = {"id": "mem_9", "score": 0.861, "x": 1}
    real = {"items": [first, {"id": "mem_2"}], "as_of": 3}
    assert differences(shown[0], real) == []
    first["score"] = 0.9
    assert differences(shown[0], real) == ["$.items[0].score: shown 0.85, got 0.9"]
    assert differences([1], [1, 2]) == ["$: shown 1 items, got 2"]
    assert differences({"id": 1}, {"id": True}) == ["$.id: shown 1, got True"]
    assert _parse_shown('{"history":[{"role":"user",') is None


# -- headings, the table of contents and links ------------------------------------------------


@dataclass(frozen=True)
class Heading:
    level: int
    title: str
    anchor: str


def anchor(title: str) -> str:
    """GitHub's anchor of a heading: its text lower-cased, punctuation but `-` and `_` dropped,
    each space a hyphen (a repeated heading gets -1, -2... from `headings`)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def _prose(text: str) -> list[str]:
    """The lines outside fenced blocks ('' in their place, so line numbers hold)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            lines.append("")
            continue
        lines.append("" if fenced else line)
    return lines


def headings(text: str) -> list[Heading]:
    found: list[Heading] = []
    seen: dict[str, int] = {}
    for line in _prose(text):
        if match := re.match(r"^(#{1,6}) (.+?)\s*$", line):
            base = anchor(match.group(2))
            name = f"{base}-{seen[base]}" if base in seen else base
            seen[base] = seen.get(base, 0) + 1
            found.append(Heading(len(match.group(1)), match.group(2), name))
    return found


def section(text: str, title: str) -> str:
    """The text of the `##` section with this title, up to the next `##` heading."""
    assert f"\n## {title}\n" in text, f"no section {title!r}"
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


_LINK = re.compile(r"\]\(([^)\s]+)\)|<img src=\"([^\"]+)\"")


def links(text: str) -> list[str]:
    return [a or b for line in _prose(text) for a, b in _LINK.findall(line)]


def _link_problems(source: Path) -> list[str]:
    problems = []
    for target in links(source.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not followed
        path, _, fragment = target.partition("#")
        file = (source.parent / path).resolve() if path else source
        if not file.exists():
            problems.append(f"{source.name}: {target}: no such file")
        elif fragment and fragment not in {h.anchor for h in headings(file.read_text())}:
            problems.append(f"{source.name}: {target}: no such heading in {file.name}")
    return problems


@STATIC
def test_the_contents_list_every_section_in_order() -> None:
    text = README.read_text()
    listed = re.findall(r"^( *)- \[([^\]]+)\]\(#([^)]+)\)$", section(text, "Contents"), re.M)
    document = [h for h in headings(text) if h.level in (2, 3) and h.title != "Contents"]
    by_anchor = {h.anchor: h for h in document}
    assert [a for _, _, a in listed if a not in by_anchor] == [], "a link to no heading"
    entries = [by_anchor[a] for _, _, a in listed]
    assert [h.title for h in entries] == [title for _, title, _ in listed], "a link's words"
    missing = [h.title for h in document if h.level == 2 and h not in entries]
    assert missing == [], f"## sections not in the contents: {missing}"
    # In the document's order with every ## listed, a ### nested one step is under its own ##.
    assert entries == [h for h in document if h in entries], "the contents' order"
    for indent, title, name in listed:
        level = by_anchor[name].level
        assert len(indent) == 2 * (level - 2), f"{title}: nested as a level {level} heading"


@STATIC
@pytest.mark.parametrize("source", [README, BENCHMARKS_README], ids=lambda p: str(p.parent.name))
def test_every_link_finds_its_file_and_heading(source: Path) -> None:
    assert links(source.read_text()), "no link found: the pattern is broken"
    assert _link_problems(source) == []


@STATIC
def test_anchors_are_githubs() -> None:
    assert anchor("Opt-out (STOP)") == "opt-out-stop"
    assert anchor("MCP: memory for agent frameworks") == "mcp-memory-for-agent-frameworks"
    assert anchor("Recall on LoCoMo (`bench_recall.py`)") == "recall-on-locomo-bench_recallpy"
    assert anchor("Connections over a long run (`--soak-bursts`)") == (
        "connections-over-a-long-run---soak-bursts"
    )


# -- the Performance table: every figure from its result file ---------------------------------

JsonPath = tuple[Any, ...]  # keys and list indices into a JSON file; a dict picks the list's item


@dataclass(frozen=True)
class Figures:
    """Where a row's figures are: its result file and the JSON path of each number shown, in the
    order the row shows them."""

    file: str
    paths: list[JsonPath]


def _load(operation: str, field: str) -> JsonPath:
    return ("results", {"operation": operation}, field)


def _recall(*rows: str, categories: bool = True) -> list[JsonPath]:
    return [
        ("results", row, key)
        for row in rows
        for key in (("all", "all_1_4") if categories else ("all",))
    ]


E5 = {"model": "multilingual-e5-small"}
SUMMARY = {
    "Recall on LoCoMo, all questions (categories 1-4): history + excerpts; facts;"
    " the whole context": Figures(
        "recall.locomo.e5.json", _recall("default:turns", "default:facts", "default")
    ),
    "Recall on the multilingual set: history + excerpts; facts; the whole context": Figures(
        "recall.multilingual.e5.json",
        _recall("default:turns", "default:facts", "default", categories=False),
    ),
    "Staff search, the answer on the page at the default floor (showing everything), LoCoMo": (
        Figures(
            "staff.locomo.e5.json",
            [
                ("scale rows", {"floor": 0.01}, "answer on the page"),
                ("scale rows", {"floor": 0.0}, "answer on the page"),
            ],
        )
    ),
    "Staff search, the same on the multilingual set": Figures(
        "staff.multilingual.e5.json",
        [
            ("scale rows", {"floor": 0.01}, "answer on the page"),
            ("scale rows", {"floor": 0.0}, "answer on the page"),
        ],
    ),
    "A context against one query embedding, a person with 100 / 1,000 / 10,000 archived"
    " turns: context p50 / embedding p50; the first context after an archive / context p50": (
        Figures(
            "working_set.json",
            [
                *[("rows", {"archived turns": n}, "ratio") for n in (84, 987, 9996)],
                *[
                    ("rows", {"archived turns": n}, "after an archive / p50")
                    for n in (84, 987, 9996)
                ],
            ],
        )
    ),
    "One client: store a turn over HTTP, p50 ms; a context over HTTP with a large index,"
    " p50 / p99 ms": Figures(
        "vector.onnx.json",
        [(E5, "store_p50_ms"), (E5, "context_p50_ms"), (E5, "context_p99_ms")],
    ),
    "Indexer, turns embedded a second; server memory after start-up, MiB": Figures(
        "vector.onnx.json", [(E5, "indexer_items_per_s"), (E5, "rss_after_startup_mib")]
    ),
    "The same context with today's excerpts (turns by rank within 2,850 characters, neighbours"
    " by their subject, the named side first; a slower machine than the rows above), p50 / p95"
    " ms": (
        Figures(
            "vector.side.json",
            [("context", "row", "p50_ms"), ("context", "row", "p95_ms")],
        )
    ),
    "Under load, one replica on SQLite: store p50 / p99 ms; context p50 / p99 ms; turns a second": (
        Figures(
            "bench_load.onnx.sqlite-1.json",
            [
                _load("store turn", "p50_ms"),
                _load("store turn", "p99_ms"),
                _load("build context", "p50_ms"),
                _load("build context", "p99_ms"),
                _load("store turn", "per_s"),
            ],
        )
    ),
    "The same run, for sizing: CPU ms per request (with the indexing of its turn); peak memory MB;"
    " the model's bulk rate, texts a second": Figures(
        "bench_load.onnx.sqlite-1.json",
        [
            ("cpu_ms_per_ingest_request",),
            ("cpu_ms_per_ingest_request_indexed",),
            ("peak_rss_mb",),
            ("raw_encode_per_s",),
        ],
    ),
    "Under load, two replicas on PostgreSQL: store p50 / p99 ms; context p50 / p99 ms; turns a"
    " second; peak memory of both, MB": Figures(
        "bench_load.replicas.postgresql-2.e5.json",
        [
            _load("store turn", "p50_ms"),
            _load("store turn", "p99_ms"),
            _load("build context", "p50_ms"),
            _load("build context", "p99_ms"),
            _load("store turn", "per_s"),
            ("peak_rss_mb",),
        ],
    ),
    "Fifteen minutes of steady memory writes (model-free encoder): memories written; server memory"
    " at the end, MiB; its growth over the last third, MiB": Figures(
        "bench_load.soak900.flat.hash.json",
        [("writes",), ("rss_end_mib",), ("last_third_growth_mib",)],
    ),
}
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class Row:
    figure: str
    measured: str
    file: str
    command: str  # the script and its arguments
    line: int


def summary_rows(text: str) -> list[Row]:
    body = section(text, "Performance")
    first = text.count("\n", 0, text.index("\n## Performance\n")) + 2
    rows: list[Row] = []
    command = ""
    for offset, line in enumerate(body.splitlines()):
        cells = (
            [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        )
        if len(cells) != 5 or cells[0] in ("figure", "---"):
            continue
        command = command if cells[3] == "the same" else cells[3].strip("`")
        rows.append(Row(cells[0], cells[1], cells[2].strip("`"), command, first + offset))
    return rows


def _pick(value: Any, path: JsonPath) -> Any:
    for step in path:
        if isinstance(step, dict):
            value = next(v for v in value if all(v.get(k) == w for k, w in step.items()))
        else:
            value = value[step]
    return value


def _near(shown: str, real: float) -> bool:
    """Rounded as shown: 0.770 is 0.7695-0.7705, 213 is 212.5-213.5."""
    decimals = len(shown.partition(".")[2])
    return abs(float(shown.replace(",", "")) - real) <= 0.5 * 10.0**-decimals + 1e-9


def _arguments(command: str) -> dict[str, str]:
    words = shlex.split(command)[1:]
    return {
        words[i]: words[i + 1] for i in range(0, len(words) - 1, 2) if words[i].startswith("--")
    }


def _command_problems(row: Row, result: Any) -> list[str]:
    """The command is the one that wrote the file: the benchmark's own record of it when it
    keeps one (bench_load), else what the file says of its set, model and parameters."""
    script, *_ = row.command.split()
    problems = [] if (ROOT / "benchmarks" / script).exists() else [f"no benchmarks/{script}"]
    given = _arguments(row.command)
    if isinstance(result, dict) and "command" in result:
        recorded = re.sub(r" --out \S+", "", result["command"])
        if recorded != f"benchmarks/{row.command}":
            problems.append(f"the file was written by {recorded!r}")
    elif script == "bench_recall.py":
        config = result["config"]
        data = given.get("--data", "locomo10.json")
        if not result["dataset"].endswith(data) or config["model"] != given.get(
            "--model", DEFAULT_MODEL
        ):
            problems.append(f"the file is of {result['dataset']} with {config['model']}")
        if [int(k) for k in given["--k"].split(",")] != config["k"]:
            problems.append(f"the file has k {config['k']}")
        if [float(given["--threshold"])] != config["thresholds"]:
            problems.append(f"the file has thresholds {config['thresholds']}")
    elif script == "bench_staff.py":
        if result["set"] != given["--set"] or result["model"] != given.get(
            "--model", DEFAULT_MODEL
        ):
            problems.append(f"the file is of {result['set']} with {result['model']}")
        if "--conversations" in given and int(given["--conversations"]) != result["conversations"]:
            problems.append(f"the file has {result['conversations']} conversations")
    elif script == "bench_vector.py":
        if [m["model"] for m in result] != given["--models"].split(","):
            problems.append(f"the file has models {[m['model'] for m in result]}")
    elif script == "bench_working_set.py":
        if result["model"] != given.get("--model", DEFAULT_MODEL):
            problems.append(f"the file is of {result['model']}")
        if result["queries"] != int(given.get("--queries", 60)):
            problems.append(f"the file has {result['queries']} queries")
    else:
        problems.append(f"{script}: no way to tell that it wrote the file")
    return problems


@STATIC
def test_the_performance_figures_are_the_result_files() -> None:
    rows = summary_rows(README.read_text())
    assert [r.figure for r in rows] == list(SUMMARY), "a row not in SUMMARY, or one missing"
    problems = []
    for row in rows:
        figures = SUMMARY[row.figure]
        where = f"README.md:{row.line}"
        if row.file != figures.file or not (RESULTS / row.file).is_file():
            problems.append(f"{where}: result file {row.file!r}, expected {figures.file}")
            continue
        result = json.loads((RESULTS / row.file).read_text())
        shown = _NUMBER.findall(row.measured)
        real = [_pick(result, path) for path in figures.paths]
        if len(shown) != len(real):
            problems.append(f"{where}: shows {len(shown)} figures, {row.file} gives {len(real)}")
        problems += [
            f"{where}: shows {s}, {row.file} says {r}"
            for s, r in zip(shown, real, strict=False)
            if not _near(s, r)
        ]
        problems += [f"{where}: {p}" for p in _command_problems(row, result)]
    assert not problems, "\n".join(problems)


@STATIC
def test_rounding_as_shown() -> None:
    assert _near("0.770", 0.7701344) and not _near("0.771", 0.7701344)
    assert _near("213", 212.72) and _near("69.7", 69.65) and _near("10,407", 10407)
    assert not _near("4.6", 4.53)


# -- counts and constants the code decides ----------------------------------------------------


def _default(name: str) -> Any:
    return Settings.model_fields[name].get_default(call_default_factory=True)


def _tools() -> int:
    return len(asyncio.run(build_mcp(None).list_tools()))  # type: ignore[arg-type]


CODE_COUNTS: list[tuple[str, Callable[[], list[int]]]] = [
    (r"when a person's window passes (\d+) turns", lambda: [_default("compact_trigger")]),
    (
        r"When more than (\d+) turns are waiting, all but the newest (\d+) are archived",
        lambda: [_default("compact_trigger"), _default("compact_keep")],
    ),
    (r"the same schema and migrations \((\w+) versions", lambda: [len(POSTGRES_MIGRATIONS)]),
    (r"use the memory with no code, through (\w+) tools", lambda: [_tools()]),
]


@STATIC
def test_the_counts_the_code_decides_are_the_codes() -> None:
    text = " ".join(README.read_text().split())  # a sentence may wrap
    assert len(SQLITE_MIGRATIONS) == len(POSTGRES_MIGRATIONS)
    problems = []
    for pattern, true in CODE_COUNTS:
        found = re.search(pattern, text)
        assert found, f"the README no longer says {pattern!r}: update CODE_COUNTS"
        said = [_count(g) for g in found.groups()]
        if said != true():
            problems.append(f"{found.group(0)!r}: the code says {true()}")
    rows = re.findall(
        r"^\| `(\w+)` \| .* \|$", section(README.read_text(), "For agent developers"), re.M
    )
    assert len(rows) == _tools(), f"the MCP table lists {rows}"
    assert not problems, "\n".join(problems)


THRESHOLD_COLUMNS = {
    "duplicate facts": "duplicate_threshold",
    "excerpt floor": "excerpt_threshold",
    "hybrid weight w": "semantic_weight",
    "staff search floor": "staff_floor",
    "excerpt weight": "excerpt_weight",
    "excerpt BM25 scale": "excerpt_scale",
    "excerpt neighbour gate": "excerpt_gate",
    "excerpt other side": "excerpt_other_side",
}


@STATIC
def test_the_thresholds_per_model_are_the_calibrations() -> None:
    text = README.read_text()
    table = text.split("\n### Thresholds per model\n", 1)[1].split("\n\n| ", 1)[1].split("\n\n")[0]
    header, _, *rows = ("| " + table).splitlines()
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns[1:] == list(THRESHOLD_COLUMNS)
    models = []
    for row in rows:
        model, *cells = (c.strip() for c in row.strip("|").split("|"))
        calibration: Calibration = OTHER if model == "any other" else calibration_for(model)
        models.append(model)
        for column, cell in zip(columns[1:], cells, strict=True):
            real = getattr(calibration, THRESHOLD_COLUMNS[column])
            assert float(cell) == real, f"{model}, {column}: {cell}, calibration.py says {real}"
    assert models == [DEFAULT_MODEL, "all-MiniLM-L6-v2", "any other"]


# -- Layout -----------------------------------------------------------------------------------

_NAMED = re.compile(
    r"(?<![\w/.-])(\.?[\w-]+(?:\.[\w-]+)*\.(?:py|md|json|yaml|conf|html|svg|example)|[\w-]+/)"
)


def layout() -> list[tuple[int, str, str]]:
    """The Layout block's entries: (README line, path, what the entry's words name), a path
    indented under a folder being inside it; a line indented as far as the words continues
    them."""
    text = README.read_text()
    body = section(text, "Layout")
    block = body.split("```\n", 1)[1].split("```", 1)[0]
    first = text.count("\n", 0, text.index(block)) + 1
    entries: list[tuple[int, str, str]] = []
    parents: list[str] = []
    for offset, line in enumerate(block.splitlines()):
        indent = len(line) - len(line.lstrip())
        if indent >= 8:  # the words of the entry above, continued
            number, path, words = entries[-1]
            entries[-1] = (number, path, f"{words} {line.strip()}")
            continue
        name, _, words = line.strip().partition(" ")
        parents = parents[: indent // 2]
        path = "".join(parents) + name
        entries.append((first + offset, path, words.strip()))
        if name.endswith("/"):
            parents.append(name)
    return entries


@STATIC
def test_the_layout_names_what_exists_and_every_module_of_server() -> None:
    entries = layout()
    problems = []
    for number, path, words in entries:
        if not (ROOT / path).exists():
            problems.append(f"README.md:{number}: {path} does not exist")
        folder = ROOT / (path if path.endswith("/") else str(Path(path).parent))
        for named in _NAMED.findall(words):
            if not any((base / named).exists() for base in (folder, folder.parent, ROOT)):
                problems.append(f"README.md:{number}: {named} (under {path}) does not exist")
    listed = {path for _, path, _ in entries}
    modules = {
        f"server/{p.name}" + ("/" if p.is_dir() else "")
        for p in (ROOT / "server").iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py")
        or (p.is_dir() and p.name != "__pycache__")
    }
    problems += [f"server's {m} is not in the Layout" for m in sorted(modules - listed)]
    assert not problems, "\n".join(problems)
