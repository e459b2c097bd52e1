"""Deterministic stand-ins for the embedding model."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from embeddings.encoder import Vectors

WORD = re.compile(r"[a-z0-9]+")


class HashEncoder:
    """Bag of words hashed into buckets: texts sharing words are close, others near 0.
    Identical texts give identical vectors; every vector has unit norm."""

    def __init__(self, name: str = "fake-hash", dim: int = 64) -> None:
        self._name = name
        self._dim = dim
        self.calls: list[int] = []  # batch sizes, to check batching

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    def encode(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(len(texts))
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            words = WORD.findall(text.lower()) or [text]
            for word in words:
                digest = hashlib.blake2b(word.encode("utf-8", "replace"), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self._dim
                sign = 1.0 if digest[4] % 2 else -1.0
                out[row, bucket] += sign
            norm = float(np.linalg.norm(out[row]))
            if norm == 0:
                out[row, 0] = 1.0
            else:
                out[row] /= norm
        return out


def hash_factory(dim: int = 64) -> HashEncoder:
    return HashEncoder(dim=dim)


def fake_factory(model: str) -> HashEncoder:
    """Any model name gives a fake encoder; a name ending in -<n>d has dimension n."""
    match = re.search(r"-(\d+)d$", model)
    return HashEncoder(name=model, dim=int(match.group(1)) if match else 64)
