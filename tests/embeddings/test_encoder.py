"""The query cache in front of the model, and the bulk path the indexer takes past it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from embeddings.encoder import CachedEncoder, Vectors
from embeddings.hashing import HashEncoder

# Opens no database of the server's: the same on both passes, so the postgresql pass
# skips it (tests/conftest.py).
pytestmark = pytest.mark.no_database


class Recording(HashEncoder):
    """A hash encoder that says which path each call took."""

    def __init__(self) -> None:
        super().__init__("hash:16", 16)
        self.paths: list[str] = []

    def encode(self, texts: Sequence[str]) -> Vectors:
        self.paths.append("query")
        return super().encode(texts)

    def encode_bulk(self, texts: Sequence[str]) -> Vectors:
        self.paths.append("bulk")
        return super().encode(texts)


def test_queries_are_cached_and_bulk_work_is_not() -> None:
    inner = Recording()
    cached = CachedEncoder(inner)
    first = cached.encode(["where is my jacket"])
    again = cached.encode(["where is my jacket"])
    assert np.array_equal(first, again) and inner.paths == ["query"], "the second is cached"

    bulk = cached.encode_bulk(["a turn of a person", "where is my jacket"])
    assert inner.paths == ["query", "bulk"], "bulk work takes the bulk path, even for a cached text"
    assert np.array_equal(bulk[1], first[0])
    # A bulk text never enters the cache: a batch embedded while its person is forgotten
    # cannot bring their words back into memory.
    cached.encode(["a turn of a person"])
    assert inner.paths == ["query", "bulk", "query"]


def test_bulk_falls_back_to_encode_when_the_inner_encoder_has_one_path() -> None:
    inner = HashEncoder("hash:16", 16)
    vectors = CachedEncoder(inner).encode_bulk(["a", "b"])
    assert vectors.shape == (2, 16) and inner.calls == [2]


def test_the_cache_holds_at_most_its_characters_whatever_the_queries_length() -> None:
    """It held 2,048 queries whatever their length, and a context's query is the person's
    last turn (up to 32,000 characters): up to 65 million characters, 260 MB."""
    inner = Recording()
    cached = CachedEncoder(inner, size=2048, max_chars=100_000)
    for n in range(40):
        cached.encode_query([f"{n:05d} " + "x" * 9_994])  # 10,000 characters each
    assert cached.held == (10, 100_000), "the oldest dropped past the characters, not the count"
    cached.encode_query(["00039 " + "x" * 9_994])
    assert inner.paths.count("query") == 40, "the newest are still cached"
    cached.encode_query(["y" * 100_001])
    cached.encode_query(["y" * 100_001])
    assert inner.paths.count("query") == 42, "a text longer than the cap is never kept"
    cached.forget(["00039 " + "x" * 9_994])
    assert cached.held == (9, 90_000)
