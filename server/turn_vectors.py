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

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat

import numpy as np
from numpy.typing import NDArray

from embeddings.index import IndexRow, VectorIndex

# Turn vectors the indexer wrote last, kept for the next context of their person (an archive
# rewrites every turn it archives: the first context after it then reads none from the index).
RECENT_MAX = 10_000


def space_key(index: VectorIndex) -> str:
    """Which model's table vectors were read from or written to."""
    return f"{index.location}|{index.name}"


class RecentVectors:
    """The turn vectors the indexer wrote last (at most RECENT_MAX, oldest first out), by row
    id, with their person: what the first context after an archive would otherwise read back
    from the index. A forget drops its person's at once."""

    def __init__(self, size: int = RECENT_MAX) -> None:
        self._size = size
        self._held: OrderedDict[str, tuple[str, tuple[str, str], NDArray[np.float32]]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def put(self, space: str, rows: Sequence[IndexRow], vectors: NDArray[np.float32]) -> None:
        if self._size <= 0:
            return
        with self._lock:
            for row, vector in zip(rows, vectors, strict=True):
                if row.kind != "turn":
                    continue
                self._held[row.id] = (space, (row.agent, row.phone), np.array(vector))
                self._held.move_to_end(row.id)
            while len(self._held) > self._size:
                self._held.popitem(last=False)

    def get(self, space: str, ids: Sequence[str]) -> dict[str, NDArray[np.float32]]:
        with self._lock:
            out = {}
            for row_id in ids:
                held = self._held.get(row_id)
                if held is not None and held[0] == space:
                    out[row_id] = held[2]
            return out

    def drop_person(self, agent: str, phone: str) -> None:
        with self._lock:
            for row_id in [k for k, v in self._held.items() if v[1] == (agent, phone)]:
                del self._held[row_id]

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)


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
    # The arrays `matrix` and `present` are the first n rows of (room for later turns)
    buffer: NDArray[np.float32] | None = None
    present_buffer: NDArray[np.bool_] | None = None

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
    recent: RecentVectors | None = None,
) -> TurnVectors:
    """Vectors for these turns of a person (agent, phone), in order: those `known` holds (of
    the same space, found by message id through `known_rows`) carried over, then those the
    indexer just wrote (`recent`), the rest read from the index in one read (none when
    nothing is missing)."""
    n, dim = len(message_ids), index.dim
    same = known is not None and known.space == space and bool(known_rows)
    if same and known is not None and known_rows and _appended(message_ids, known_rows):
        # An archive added turns after the ones held: the new rows go after theirs in the
        # same buffer (grown by doubling), which the entry held reads only up to its own.
        matrix, present = _grown(known, n)
    else:
        matrix = np.zeros((n, dim), dtype=np.float32)
        present = np.zeros(n, dtype=bool)
    if same and known is not None and known_rows and not present.any():
        rows = np.fromiter(map(known_rows.get, message_ids, repeat(-1)), dtype=np.int64, count=n)
        held = rows >= 0
        held[held] = known.present[rows[held]]
        matrix[held] = known.matrix[rows[held]]
        present[held] = True
    missing: list[int] = np.flatnonzero(~present).tolist()
    if missing and recent is not None:
        written = recent.get(space, [f"turn:{message_ids[i]}" for i in missing])
        missing = _place(matrix, present, missing, message_ids, written)
    if missing:
        if len(missing) <= BY_ID_MAX:
            stored = index.vectors([f"turn:{message_ids[i]}" for i in missing])
        else:
            stored = index.person_vectors(*person, kind="turn")
        _place(matrix, present, missing, message_ids, stored)
    return TurnVectors(space, matrix, present, matrix.base, present.base)


def _place(
    matrix: NDArray[np.float32],
    present: NDArray[np.bool_],
    rows: list[int],
    message_ids: Sequence[int],
    found: dict[str, NDArray[np.float32]],
) -> list[int]:
    """Put the vectors `found` (by row id) of these rows in place, unit length; the rows
    still missing."""
    left = []
    for i in rows:
        vector = found.get(f"turn:{message_ids[i]}")
        if vector is None:
            left.append(i)
            continue
        norm = float(np.linalg.norm(vector))
        matrix[i] = vector / norm if norm > 0 else vector
        present[i] = True
    return left


def _appended(message_ids: Sequence[int], known_rows: dict[int, int]) -> bool:
    """Whether these turns are the ones held (in their rows) and then newer ones."""
    held = len(known_rows)
    return held <= len(message_ids) and list(message_ids[:held]) == list(known_rows)


def _grown(known: TurnVectors, n: int) -> tuple[NDArray[np.float32], NDArray[np.bool_]]:
    """Views of n rows over the known entry's buffers, its rows first. A row after them may
    have been written by another extension of the same entry: the same turn (turns are
    archived in the order of their ids), so its vector stays. The buffers grow by a quarter,
    so the memory held is at most that much over what is counted."""
    held = len(known.present)
    matrix, present = known.buffer, known.present_buffer
    if matrix is None or present is None or len(matrix) < n:
        capacity = n + max(n // 4, 256)
        matrix = np.zeros((capacity, known.matrix.shape[1]), dtype=np.float32)
        present = np.zeros(capacity, dtype=bool)
        matrix[:held] = known.matrix
        present[:held] = known.present
    return matrix[:n], present[:n]
