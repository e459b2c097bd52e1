"""Size limits of request parts that settings set: a memory's metadata, in bytes and in depth."""

from __future__ import annotations

import json
from typing import Any

from server.errors import InvalidInput, MetadataTooLarge

_LITERALS = {True: 4, False: 5}  # true, false (null is 4 too)


def metadata_within(value: dict[str, Any], *, max_bytes: int, max_depth: int) -> dict[str, Any]:
    """The metadata as it came, or MetadataTooLarge (413) when its compact UTF-8 JSON is over
    max_bytes, or InvalidInput (422 metadata_too_deep) when it nests deeper than max_depth (the
    object itself is one level). Sizes are summed item by item and the walk stops at the
    limit, so a metadata of 1 MiB costs what one of the limit's size does."""
    size = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list) and depth > max_depth:
            raise InvalidInput(
                f"metadata nests more than {max_depth} levels deep (MEMORY_MAX_METADATA_DEPTH)",
                "metadata_too_deep",
            )
        # Each entry, item or character takes a byte at least: a huge one is refused before
        # its bytes are counted.
        floor = len(item) if isinstance(item, dict | list | str) else 1
        if size + floor > max_bytes or (size := size + _own_bytes(item)) > max_bytes:
            raise MetadataTooLarge(
                f"metadata is larger than {max_bytes} bytes as compact JSON"
                " (MEMORY_MAX_METADATA_BYTES)"
            )
        if isinstance(item, dict | list):
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return value


def _own_bytes(item: Any) -> int:
    """What item adds to compact JSON besides its children: brackets, commas, keys and colons
    for a container; the whole text for a scalar."""
    if isinstance(item, dict):
        keys = sum(_text_bytes(str(key)) + 1 for key in item)  # "key":
        return 2 + keys + max(0, len(item) - 1)
    if isinstance(item, list):
        return 2 + max(0, len(item) - 1)
    if isinstance(item, str):
        return _text_bytes(item)
    if isinstance(item, bool):
        return _LITERALS[item]
    if item is None:
        return 4
    return len(json.dumps(item))  # a number


def _text_bytes(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass"))
