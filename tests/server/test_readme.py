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
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from server.config import DEFAULT_MODEL
from tests.live import Server

pytestmark = [pytest.mark.model, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
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


def test_every_shell_block_runs_and_prints_what_it_shows(
    server: Server, blocks: list[Block], tmp_path: Path
) -> None:
    runnable = [b for b in blocks if b.skip is None]
    segments = [s for b in runnable for s in b.segments()]
    (tmp_path / ".curlrc").write_text("fail-with-body\nshow-error\n")
    result = subprocess.run(
        ["bash", "-c", _script(segments, server.base)],
        cwd=tmp_path,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    outputs = _outputs(result.stdout)
    if result.returncode != 0:
        failed = segments[min(len(outputs), len(segments) - 1)]
        pytest.fail(
            f"README.md:{failed.start}-{failed.line}: a command failed (exit {result.returncode})"
            f"\nstderr: {result.stderr[-2000:]}\nstdout: {_MARK.split(result.stdout)[-1][-2000:]}"
        )
    problems: list[str] = []
    for number, segment in enumerate(segments):
        if not segment.checked:
            continue
        values = _json_values(outputs[number])
        if not values:
            problems.append(f"README.md:{segment.line}: printed no JSON: {outputs[number]!r}")
            continue
        found = differences(segment.shown, values[-1])
        if found:
            real = json.dumps(values[-1], ensure_ascii=False)[:1500]
            problems.append(f"README.md:{segment.line}: {'; '.join(found)}\n  real: {real}")
    assert not problems, "\n".join(problems)


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
