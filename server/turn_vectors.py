"""A person's archived turns' vectors in memory, beside their cached turns (server/excerpts.py):
a context for a person already seen reads no vector from LanceDB.

The vectors are the index's own (read from it, never embedded again), in the order of the
person's turns, unit length. They are read once per person, and after an archive or a
retention only for the turns that are new to the cache (the rest are carried over by message
id). Turns the indexer has not written yet are read again on the next request, and until then
the context searches LanceDB as before. A reindex into another model changes the space the
vectors belong to: they are read again from its table. The cache entry they belong to is
checked against the store's archive mark on every request (server/excerpts.TurnsCache), so
a move, a forget or a retention on any replica is seen at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from embeddings.index import VectorIndex

# Reading a person's turns by id is one IN (...) filter; past this many missing, a filter on
# the person reads them all at once instead (the same scan, no list of ids to parse).
BY_ID_MAX = 200


@dataclass(frozen=True, slots=True)
class TurnVectors:
    """Vectors of one person's archived turns, row i for turn i; `present[i]` false where the
    index had none yet."""

    space: str  # the model (and table) the vectors were read from
    matrix: NDArray[np.float32]  # (n, dim), unit rows, zeros where missing
    present: NDArray[np.bool_]

    @property
    def complete(self) -> bool:
        return bool(self.present.all())

    def cosines(self, query: NDArray[np.float32]) -> NDArray[np.float32]:
        """Cosine of every turn to the query (-inf where the vector is missing)."""
        q = np.asarray(query, dtype=np.float32)
        norm = float(np.linalg.norm(q))
        out = self.matrix @ (q / norm if norm > 0 else q)
        out[~self.present] = -np.inf
        return np.asarray(out, dtype=np.float32)

    def top(
        self, query: NDArray[np.float32], k: int, min_score: float | None
    ) -> list[tuple[int, float]]:
        """(row, cosine) of the best k turns at or above min_score, best first."""
        scores = self.cosines(query)
        n = len(scores)
        if n == 0 or k <= 0:
            return []
        best = np.argsort(-scores, kind="stable") if k >= n else np.argpartition(-scores, k - 1)[:k]
        rows = sorted(best.tolist(), key=lambda i: (-scores[i], i))
        floor = -np.inf if min_score is None else min_score
        return [(i, float(scores[i])) for i in rows if scores[i] >= floor]

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes + self.present.nbytes)


def vector_bytes(turns: int, dim: int) -> int:
    """What the vectors of this many turns hold in memory."""
    return turns * (dim * 4 + 1)


def read_turn_vectors(
    index: VectorIndex,
    space: str,
    message_ids: Sequence[int],
    person: tuple[str, str],
    known: TurnVectors | None,
    known_rows: dict[int, int] | None = None,
) -> TurnVectors:
    """Vectors for these turns of a person (agent, phone), in order: those `known` holds (of
    the same space, found by message id through `known_rows`) carried over, the rest read
    from the index in one read (none when nothing is missing)."""
    n, dim = len(message_ids), index.dim
    matrix = np.zeros((n, dim), dtype=np.float32)
    present = np.zeros(n, dtype=bool)
    if known is not None and known.space == space and known_rows:
        for i, message_id in enumerate(message_ids):
            row = known_rows.get(message_id)
            if row is not None and known.present[row]:
                matrix[i] = known.matrix[row]
                present[i] = True
    missing = [i for i in range(n) if not present[i]]
    if missing:
        if len(missing) <= BY_ID_MAX:
            stored = index.vectors([f"turn:{message_ids[i]}" for i in missing])
        else:
            stored = index.person_vectors(*person, kind="turn")
        for i in missing:
            vector = stored.get(f"turn:{message_ids[i]}")
            if vector is not None:
                norm = float(np.linalg.norm(vector))
                matrix[i] = vector / norm if norm > 0 else vector
                present[i] = True
    return TurnVectors(space, matrix, present)
