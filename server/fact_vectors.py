"""A person's current facts' vectors in memory: a context searches them with no index read.

Each request reads the person's current facts (id and text) from the store, one indexed read
that also gives how many the search weighs (embeddings/relevance.py). A fact whose id and text
are in the copy keeps its vector; any other is read from the index, and kept only when the
index holds that same text as approved (so a fact changed on another replica, or not indexed
yet, is read again on the next request until the index has it; meanwhile the context searches
the index as before). A reindex into another model changes the space: everything is read
again. At most `max_bytes` (MEMORY_FACTS_CACHE_MB), least recently used first out."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from embeddings.index import VectorIndex

FACT_OVERHEAD_BYTES = 200  # a fact's id, its entry and its array row's bookkeeping


@dataclass(frozen=True, slots=True)
class PersonFacts:
    """Vectors of one person's current facts, row i for facts[i] (id, text)."""

    space: str
    facts: tuple[tuple[str, str], ...]
    matrix: NDArray[np.float32]  # (n, dim), as stored; zeros where missing
    present: NDArray[np.bool_]

    @property
    def complete(self) -> bool:
        return bool(self.present.all())

    @property
    def nbytes(self) -> int:
        chars = sum(len(i) + len(t) for i, t in self.facts)
        return int(self.matrix.nbytes) + len(self.facts) * FACT_OVERHEAD_BYTES + chars


class FactsCache:
    """People's current facts' vectors, checked against the store's list on each use."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._people: OrderedDict[tuple[str, str], PersonFacts] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def get(
        self,
        key: tuple[str, str],
        facts: Sequence[tuple[str, str]],
        index: VectorIndex,
        space: str,
    ) -> PersonFacts:
        """The person's facts' vectors for this list of (id, text), reading from the index
        only those the copy lacks."""
        wanted = tuple(facts)
        with self._lock:
            cached = self._people.get(key)
            fresh_enough = cached is not None and cached.space == space
            if fresh_enough and cached is not None and cached.facts == wanted and cached.complete:
                self._people.move_to_end(key)
                return cached
        fresh = _read(index, space, wanted, cached if cached and cached.space == space else None)
        with self._lock:
            old = self._people.pop(key, None)
            if old is not None:
                self._held -= old.nbytes
            if fresh.nbytes <= self._max_bytes:
                self._people[key] = fresh
                self._held += fresh.nbytes
            while self._held > self._max_bytes and self._people:
                _, dropped = self._people.popitem(last=False)
                self._held -= dropped.nbytes
        return fresh

    def drop(self, agent: str, phone: str) -> None:
        with self._lock:
            old = self._people.pop((agent, phone), None)
            if old is not None:
                self._held -= old.nbytes

    @property
    def held(self) -> int:
        with self._lock:
            return self._held


def _read(
    index: VectorIndex,
    space: str,
    facts: tuple[tuple[str, str], ...],
    known: PersonFacts | None,
) -> PersonFacts:
    n = len(facts)
    matrix = np.zeros((n, index.dim), dtype=np.float32)
    present = np.zeros(n, dtype=bool)
    if known is not None:
        rows = {fact: i for i, fact in enumerate(known.facts)}
        for i, fact in enumerate(facts):
            row = rows.get(fact)
            if row is not None and known.present[row]:
                matrix[i] = known.matrix[row]
                present[i] = True
    missing = [i for i in range(n) if not present[i]]
    if missing:
        stored = index.get([f"fact:{facts[i][0]}" for i in missing])
        for i in missing:
            found = stored.get(f"fact:{facts[i][0]}")
            if found is None:
                continue
            indexed, vector = found
            # the index's copy is of this text, and current: else read again next time
            if indexed.text == facts[i][1] and indexed.status == "approved":
                matrix[i] = vector
                present[i] = True
    return PersonFacts(space, facts, matrix, present)
