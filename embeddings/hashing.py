"""A deterministic bag-of-words encoder: no model, no download. For tests, smoke runs and
crash drills; texts sharing words are close, others near orthogonal."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from embeddings.encoder import Vectors

PREFIX = "hash:"
_WORD = re.compile(r"[a-z0-9]+")


class HashEncoder:
    """Words hashed into signed buckets; identical texts give identical unit vectors."""

    def __init__(self, name: str = "hash:64", dim: int = 64) -> None:
        self._name = name
        self._dim = dim
        self.calls: list[int] = []  # batch sizes, so tests can check batching

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
            for word in _WORD.findall(text.lower()) or [text]:
                digest = hashlib.blake2b(word.encode("utf-8", "replace"), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self._dim
                out[row, bucket] += 1.0 if digest[4] % 2 else -1.0
            norm = float(np.linalg.norm(out[row]))
            if norm == 0:
                out[row, 0] = 1.0
            else:
                out[row] /= norm
        return out

    def encode_query(self, texts: Sequence[str]) -> Vectors:
        return self.encode(texts)  # questions and stored texts alike


def is_hash_model(name: str) -> bool:
    return name.startswith(PREFIX)


def hash_encoder(name: str) -> HashEncoder:
    """'hash:<dim>' gives a HashEncoder of that dimension."""
    dim = int(name.removeprefix(PREFIX) or 64)
    if not 2 <= dim <= 4096:
        raise ValueError("hash encoder dimension must be 2..4096")
    return HashEncoder(name=name, dim=dim)
