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
