"""Small helpers of the query modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def chunks(items: list[Any], size: int = 500) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
