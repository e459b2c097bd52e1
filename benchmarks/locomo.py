"""LoCoMo's format, shared by the benchmarks: evidence ids and turn text."""

from __future__ import annotations

import re
from typing import Any

DIA = re.compile(r"^D:?(\d+):(\d+)$")


def clean_dia_ids(raw: Any) -> list[str]:
    """Evidence or observation ids as LoCoMo writes them -> canonical "D<s>:<t>" strings.
    Strings that do not look like a dia_id at all (such as "D") are kept as they are; the
    caller drops ids that name no turn."""
    items = raw if isinstance(raw, list) else [raw]
    out: list[str] = []
    for item in items:
        for part in re.split(r"[;\s]+", str(item)):
            if not part:
                continue
            match = DIA.match(part)
            out.append(f"D{int(match[1])}:{int(match[2])}" if match else part)
    return out


def turn_content(turn: dict[str, Any]) -> str:
    """A turn's text; a shared photo is described by its caption."""
    text = str(turn.get("text", "")).strip()
    caption = turn.get("blip_caption")
    if caption:
        text = f"{text} [shared a photo of {caption}]".strip()
    return text or "(empty)"
