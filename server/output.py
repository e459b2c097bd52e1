"""What the CLI prints: JSON with --json (for scripts), readable text otherwise."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def _flat(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            rows += _flat(value, f"{name}.")
        else:
            rows.append((name, _cell(value)))
    return rows


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def record(data: Mapping[str, Any]) -> str:
    """One result: a `name  value` line per field, nested fields as `a.b`."""
    rows = _flat(data)
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Many results: a header and aligned columns ("(none)" when there are none)."""
    if not rows:
        return "(none)"
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def emit(as_json: bool, data: Any, text: str) -> None:
    print(json.dumps(data) if as_json else text)
