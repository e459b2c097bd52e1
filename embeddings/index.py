"""The vector index on LanceDB: one table per model and dimension, upsert, search, purge."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import lancedb
import numpy as np
import pyarrow as pa
from lancedb.index import FTS, Bitmap, BTree
from lancedb.query import LanceVectorQueryBuilder

from embeddings.encoder import Vectors, model_slug
from embeddings.location import CrossProcessLock, LanceLocation
from embeddings.stopwords import stop_words

T = TypeVar("T")
# Hybrid search fuses scores, not ranks: weight * cosine + (1 - weight) * bm25 / (bm25 + scale).
# Reciprocal-rank fusion gives the semantic list's 10th guess as much as the keyword list's
# 10th exact match; keeping the scores lets a strong keyword match lead and the cosine order
# the rest (benchmarks/README.md, "Choosing the excerpt default": with the same vectors at
# k = 15, LoCoMo 6 to 7 points above RRF, the multilingual set 1 to 3 below). The weight is
# per model (embeddings/calibration.py).
BM25_SCALE = 5.0
# Hybrid's two halves run at once: LanceDB's calls wait on its own event loop, not the GIL.
_HALVES = ThreadPoolExecutor(max_workers=4, thread_name_prefix="hybrid")

# LanceDB caches what it opened (manifests, fragment and deletion metadata, index pages) by
# file, and every write makes new files: with its default bounds (6 GB of index pages, 1 GB of
# metadata) the entries of superseded versions were only ever evicted past a gigabyte, so the
# server's memory grew with every write. A 100k-row table's working set is about 35 MB (see
# benchmarks/README.md, the memory-write soak).
INDEX_CACHE_BYTES = 128 * 2**20
METADATA_CACHE_BYTES = 32 * 2**20

# Folding new rows into the indexes (LanceDB's optimize_indices, or a rebuild after a purge)
# makes new index files, and LanceDB 0.40 keeps every superseded full-text index open for the
# life of the connection: 2 to 4 file descriptors and 1 to 2 MiB each time, for ever (the
# memory-write soak). Searches see rows the indexes do not cover yet (a flat scan of those), so
# the indexes are brought up to date only now and then, and the connection is then opened
# afresh, which lets go of the superseded files.
INDEX_UPDATE_ROWS = 2000
INDEX_UPDATE_S = 300.0
CLEANUP_MIN = 10
# A connection also grows by about 90 KiB per write beyond its bounded caches (measured: 9 MiB
# per 100 single-row writes, flat when it is opened afresh): a fresh one every this many writes.
REOPEN_WRITES = 200

# Filters run inside LanceDB on scalar indexes (exact vector search over the rows that pass).
_INDEXES: dict[str, Callable[[], Any]] = {
    "id": BTree,
    "phone": BTree,
    "agent": Bitmap,
    "kind": Bitmap,
    "status": Bitmap,
}
# Full-text indexes: a turn with its neighbours (`text`) and an item's own words (`content`).
FTS_COLUMNS = ("text", "content")

# How keyword search reads text: always lower case with accents folded ("cumpleanos" finds
# "cumpleaños"); these differ in stemming and stop words (README, "Keyword search in two
# languages", measured with benchmarks/bench_recall.py --keyword-analysis).
KEYWORD_ANALYSES: dict[str, dict[str, Any]] = {
    # LanceDB's default: English stems, English stop words only.
    "english": {"language": "English", "stem": True},
    # English stems, English and Spanish stop words.
    "bilingual": {"language": "English", "stem": True, "custom_stop_words": stop_words()},
    # No stemming, English and Spanish stop words.
    "bilingual-nostem": {"stem": False, "custom_stop_words": stop_words()},
    # Spanish stems, English and Spanish stop words.
    "spanish": {"language": "Spanish", "stem": True, "custom_stop_words": stop_words()},
}
KEYWORD_ANALYSIS = "bilingual"


def fts_config() -> FTS:
    return FTS(lower_case=True, ascii_folding=True, **KEYWORD_ANALYSES[KEYWORD_ANALYSIS])


def fts_index_name(column: str) -> str:
    """The analysis is part of the name: a table indexed another way is re-indexed."""
    return f"{column}_fts_{KEYWORD_ANALYSIS.replace('-', '_')}"


@dataclass(frozen=True, slots=True)
class IndexRow:
    """One embedded item: a fact, a turn or a summary."""

    id: str  # "<kind>:<ref_id>", unique across kinds
    kind: str  # fact | turn | summary
    ref_id: str
    agent: str
    phone: str  # "" for memories about no one person
    status: str  # facts: pending/approved/rejected; turns: recent/archived; summaries: current
    type: str  # facts: fact/preference/context; turns: user/assistant; summaries: summary
    created_at: str
    text: str  # what is embedded and keyword-searched; a turn's also holds its neighbours
    # Isolation scopes of memories ("" when none), so searches filter on them in LanceDB.
    session_id: str = ""
    task_id: str = ""
    graph_id: str = ""
    content: str = ""  # the item's own words, for keyword search on them alone ("": = text)


_ROW_COLUMNS = list(IndexRow.__dataclass_fields__)  # every column but the vector


def vector_text(row: IndexRow) -> str:
    """What a row's vector is made from: the item's own words. A turn's neighbours help
    keyword search find a short reply ("yes, the blue one") but blur what the turn itself
    means, so they are in `text` and not in the vector (benchmarks/README.md, "Choosing the
    excerpt default")."""
    return row.content or row.text


@dataclass(frozen=True, slots=True)
class Hit:
    row: IndexRow
    score: float  # cosine similarity for semantic, fused or BM25 score otherwise
    # The stored vector, where the search returned it (keyword search, for hybrid's cosine).
    vector: Vectors | None = field(default=None, compare=False, repr=False)


class SharedLock:
    """Many readers or one exclusive holder: searches run in parallel, while compaction and
    purge (which delete old files) wait for them and hold them off."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._exclusive = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive and self._readers == 0)
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class IndexBusy(TimeoutError):
    """The vector store's write lock could not be had in time (another process holds it)."""


class WriteLock:
    """One LanceDB writer at a time per vector store, across threads and processes (a
    `memory-server reindex` or `forget` next to a running server, or replicas sharing a bucket):
    a purge deletes old versions' files, so a write must never run from a version a purge
    removed, and two writers' purge and upsert running at once can corrupt a table. Re-entrant
    in the holding thread. The cross-process part is the location's lock (embeddings/
    location.py): an flock on `<folder>/.write.lock`, or for a shared bucket the lease the
    server gives it (an advisory lock of the shared database)."""

    _registry: ClassVar[dict[str, WriteLock]] = {}
    _registry_guard: ClassVar[threading.Lock] = threading.Lock()

    timeout_s = 30.0  # then IndexBusy: the caller answers 503 rather than hang

    def __init__(self, name: str, holder: CrossProcessLock | None) -> None:
        self._name = name
        self._holder = holder
        self._lock = threading.RLock()
        self._depth = 0

    @classmethod
    def of(cls, where: Path | LanceLocation) -> WriteLock:
        """The process's one lock object for a store (two objects would deadlock a thread)."""
        location = LanceLocation.of(where)
        with cls._registry_guard:
            if location.key not in cls._registry:
                cls._registry[location.key] = cls(location.uri, location.writer_lock())
            return cls._registry[location.key]

    def __enter__(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        if not self._lock.acquire(timeout=self.timeout_s):
            raise IndexBusy(f"the vector store is busy in this process for {self.timeout_s:g} s")
        if self._depth == 0 and self._holder is not None:
            try:
                self._hold(self._holder, deadline)
            except BaseException:
                self._lock.release()
                raise
        self._depth += 1

    def _hold(self, holder: CrossProcessLock, deadline: float) -> None:
        """The cross-process lock, polled: a hung process holding it must not hang us."""
        while not holder.try_hold():
            if time.monotonic() >= deadline:
                raise IndexBusy(
                    f"another process has held the write lock of {self._name} for"
                    f" {self.timeout_s:g} s"
                )
            time.sleep(0.01)

    def __exit__(self, *_: object) -> None:
        self._depth -= 1
        if self._depth == 0 and self._holder is not None:
            self._holder.release()
        self._lock.release()


def quote(value: str) -> str:
    """A SQL string literal for a LanceDB filter."""
    return "'" + value.replace("'", "''") + "'"


# Part of the table name: a new schema, or vectors made from other text, never meet an old
# table. 4: a turn's vector is its own words (3: the turn with its neighbours). A folder
# served from a table of a readable older version is moved to the current one in the
# background (server/upgrade.py), answering from the old table meanwhile.
SCHEMA_VERSION = 4
READABLE_VERSIONS = (4, 3)  # newest first; same columns, so this code can serve from them


def table_name(model: str, dim: int, version: int = SCHEMA_VERSION) -> str:
    return f"memory_v{version}_{model_slug(model)}_{dim}"


class VectorIndex:
    """Items of every agent in one LanceDB table named after the model and its dimension."""

    def __init__(
        self, where: Path | LanceLocation, model: str, dim: int, *, name: str | None = None
    ) -> None:
        """The model's current table in a folder or bucket, or `name` (a table of an older
        version, still served while its successor is built)."""
        self.location = LanceLocation.of(where)
        self.model = model
        self.dim = dim
        self.name = name or table_name(model, dim)
        self._db = self._connect()
        self._folder_lock = WriteLock.of(self.location)
        self._files = SharedLock()  # readers versus whoever deletes old files
        self._schema = pa.schema(
            [
                pa.field("id", pa.string(), nullable=False),
                pa.field("kind", pa.string(), nullable=False),
                pa.field("ref_id", pa.string(), nullable=False),
                pa.field("agent", pa.string(), nullable=False),
                pa.field("phone", pa.string(), nullable=False),
                pa.field("status", pa.string(), nullable=False),
                pa.field("type", pa.string(), nullable=False),
                pa.field("created_at", pa.string(), nullable=False),
                pa.field("text", pa.string(), nullable=False),
                pa.field("session_id", pa.string(), nullable=False),
                pa.field("task_id", pa.string(), nullable=False),
                pa.field("graph_id", pa.string(), nullable=False),
                pa.field("content", pa.string(), nullable=False),
                pa.field("vector", pa.list_(pa.float32(), dim), nullable=False),
            ]
        )
        self.created = self.name not in self.location.table_names()
        if self.created:
            with self._folder_lock:  # a reindex may be creating the same table
                self._table = self._db.create_table(self.name, schema=self._schema, exist_ok=True)
        else:
            self._table = self._db.open_table(self.name)
        self._indexed = self._has_indexes()
        if not self._indexed and not self.created and self._table.count_rows():
            # Indexed with another keyword analysis (or not at all): at open, not at the
            # first search.
            with self._writing():
                self._build_indexes()
        self._writes_since_optimize = 0
        self._rows_since_index_update = 0
        self._index_updated_at = time.monotonic()
        self._writes_since_reopen = 0
        self.reopened = 0  # how many times the connection was opened afresh

    def _connect(self) -> Any:
        session = lancedb.Session(
            index_cache_size_bytes=INDEX_CACHE_BYTES, metadata_cache_size_bytes=METADATA_CACHE_BYTES
        )
        # Readers look for a newer version at most a second after another process wrote one
        # (another replica, a CLI reindex or forget); this process's own writes are seen at once.
        return self.location.connect(
            session=session, read_consistency_interval=timedelta(seconds=1)
        )

    @property
    def path(self) -> Path:
        """The local folder (a remote store has none)."""
        if self.location.local is None:
            raise ValueError(f"{self.location} is not a local folder")
        return self.location.local

    def reopen(self) -> None:
        """A fresh connection and table handle (after a failure: a file may be gone)."""
        with self._folder_lock:
            self._reopen()

    def _reopen(self) -> None:
        """A fresh connection and table handle, under the write lock: the old ones, and every
        index file they kept open, go once the reads still using them finish."""
        db = self._connect()
        table = db.open_table(self.name)
        self._db, self._table = db, table
        self._writes_since_reopen = 0
        self.reopened += 1

    # -- writing -----------------------------------------------------------------------------

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """The folder's write lock, then the latest version: another process (or another
        handle) may have written or purged since this handle last looked."""
        with self._folder_lock:
            self._table.checkout_latest()  # type: ignore[no-untyped-call]
            yield

    def upsert(self, rows: Sequence[IndexRow], vectors: Vectors) -> None:
        """Insert or replace rows by id, all in one LanceDB version."""
        if not rows:
            return
        data = self._arrow(rows, vectors)
        with self._writing():
            (
                self._table.merge_insert("id")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute(data)
            )
            self._writes_since_optimize += 1
            self._writes_since_reopen += 1
            self._rows_since_index_update += len(rows)
            if not self._indexed:
                self._build_indexes()

    def delete_ids(self, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        where = "id IN (" + ", ".join(quote(i) for i in ids) + ")"
        with self._writing():
            count = int(self._table.count_rows(where))
            if count:
                self._table.delete(where)
                self._writes_since_optimize += 1
                self._writes_since_reopen += 1
            return count

    def delete_person(self, agent: str, phone: str) -> int:
        where = f"agent = {quote(agent)} AND phone = {quote(phone)}"
        with self._writing():
            count = int(self._table.count_rows(where))
            if count:
                self._table.delete(where)
            return count

    def purge(self) -> None:
        """Make deletions physical: rewrite fragments without deleted rows, drop old versions,
        rebuild the indexes, so no file keeps a deleted row's text."""
        with self._writing(), self._files.exclusive():
            dataset = self._table.to_lance()
            dataset.optimize.compact_files(materialize_deletions_threshold=0.0)
            self._table.checkout_latest()  # type: ignore[no-untyped-call]
            self._build_indexes(rebuild=True)
            self._cleanup()
            self._index_updated()

    def optimize(self) -> None:
        """Compact small fragments and drop versions older than ten minutes (a reader in
        another process, such as a reindex, may still use them); fold new rows into the
        indexes only once INDEX_UPDATE_ROWS rows or INDEX_UPDATE_S seconds have passed."""
        # Readers use the latest version, never one ten minutes old: no need to hold them off.
        with self._writing():
            dataset = self._table.to_lance()
            dataset.optimize.compact_files()
            dataset.cleanup_old_versions(timedelta(minutes=CLEANUP_MIN))
            self._table.checkout_latest()  # type: ignore[no-untyped-call]
            self._writes_since_optimize = 0
            due = self._rows_since_index_update >= INDEX_UPDATE_ROWS or (
                time.monotonic() - self._index_updated_at >= INDEX_UPDATE_S
            )
            if self._rows_since_index_update and due:
                self.update_indexes()
            elif self._writes_since_reopen >= REOPEN_WRITES:
                self._reopen()

    def update_indexes(self) -> None:
        """Fold every row into the indexes now, then let go of the superseded index files."""
        with self._writing():
            if self._indexed:
                self._table.to_lance().optimize.optimize_indices()
                self._table.checkout_latest()  # type: ignore[no-untyped-call]
            self._index_updated()

    def _index_updated(self) -> None:
        self._rows_since_index_update = 0
        self._index_updated_at = time.monotonic()
        self._reopen()

    @property
    def writes_since_optimize(self) -> int:
        return self._writes_since_optimize

    def _cleanup(self) -> None:
        self._table.to_lance().cleanup_old_versions(timedelta(0), delete_unverified=True)
        self._table.checkout_latest()  # type: ignore[no-untyped-call]
        self._writes_since_optimize = 0

    def _has_indexes(self) -> bool:
        return _has_indexes(self._table)

    def _build_indexes(self, *, rebuild: bool = False) -> None:
        """Scalar indexes for the filters and the full-text indexes; only the missing ones
        (or those made with another keyword analysis) unless rebuild (after a purge, so no
        index file keeps deleted text)."""
        if self._table.count_rows() == 0:
            if rebuild:  # nothing left to index: no index file may keep deleted text
                for index in self._table.list_indices():
                    self._table.drop_index(index.name)
                self._indexed = False
            return
        have = {tuple(i.columns) for i in self._table.list_indices()}
        for column, make in _INDEXES.items():
            if rebuild or (column,) not in have:
                self._table.create_index(column, config=make(), replace=True)
        _build_fts(self._table, rebuild=rebuild)
        self._indexed = True

    # -- reading -----------------------------------------------------------------------------

    def count(self, where: str | None = None) -> int:
        return int(self._read(lambda: self._table.count_rows(where)))

    def _read(self, run: Callable[[], T]) -> T:
        """Run a read; if it fails, read once more from the latest version. Another process
        (a CLI forget, a reindex) may have purged the files of the version this handle had
        open; the latest version has what it needs."""
        with self._files.shared():
            try:
                return run()
            except (RuntimeError, OSError, ValueError):
                self._table.checkout_latest()  # type: ignore[no-untyped-call]
                return run()

    def person_ids(self, agent: str, phone: str) -> list[str]:
        """The ids of every row stored under this person (agent and number)."""
        where = f"agent = {quote(agent)} AND phone = {quote(phone)}"
        table = self._read(lambda: self._table.to_lance().to_table(columns=["id"], filter=where))
        return [str(i) for i in table.column("id").to_pylist()]

    def person_vectors(self, agent: str, phone: str, *, kind: str) -> dict[str, Vectors]:
        """Stored vectors of a person's rows of one kind, by id (one scan)."""
        where = f"agent = {quote(agent)} AND phone = {quote(phone)} AND kind = {quote(kind)}"
        found = self._read(
            lambda: self._table.to_lance().to_table(columns=["id", "vector"], filter=where)
        )
        if not found.num_rows:
            return {}
        flat = found.column("vector").combine_chunks().flatten().to_numpy()
        matrix = np.asarray(flat, dtype=np.float32).reshape(found.num_rows, self.dim)
        return {str(i): matrix[n] for n, i in enumerate(found.column("id").to_pylist())}

    def all_ids(self) -> list[str]:
        table = self._read(lambda: self._table.to_lance().to_table(columns=["id"]))
        return [str(i) for i in table.column("id").to_pylist()]

    def get(self, ids: Sequence[str]) -> dict[str, tuple[IndexRow, Vectors]]:
        """Stored rows with their vectors, by id."""
        if not ids:
            return {}
        where = "id IN (" + ", ".join(quote(i) for i in ids) + ")"
        table = self._read(lambda: self._table.search().where(where).limit(len(ids)).to_arrow())
        rows = table.to_pylist()
        return {r["id"]: (_row(r), np.asarray(r["vector"], dtype=np.float32)) for r in rows}

    def vectors(self, ids: Sequence[str]) -> dict[str, Vectors]:
        """Stored vectors by id, without the rows' text (a context reads a hundred of these
        for the cosines of its hits' neighbours; as Python lists they cost more than the read)."""
        if not ids:
            return {}
        where = "id IN (" + ", ".join(quote(i) for i in ids) + ")"
        found = self._read(
            lambda: (
                self._table.search()
                .where(where)
                .select(["id", "vector"])
                .limit(len(ids))
                .to_arrow()
            )
        )
        if not found.num_rows:
            return {}
        flat = found.column("vector").combine_chunks().flatten().to_numpy()
        matrix = np.asarray(flat, dtype=np.float32).reshape(found.num_rows, self.dim)
        return {str(i): matrix[n] for n, i in enumerate(found.column("id").to_pylist())}

    def search(
        self,
        vector: Vectors,
        *,
        where: str,
        k: int,
        min_score: float | None = None,
        with_vectors: bool = False,
    ) -> list[Hit]:
        """Top-k by cosine similarity among rows matching the filter (prefiltered, exact).
        with_vectors: each hit carries its stored vector (read as one array, not lists)."""
        if k <= 0:
            return []
        vector_query = self._table.search(
            np.asarray(vector, dtype=np.float32), vector_column_name="vector"
        )
        assert isinstance(vector_query, LanceVectorQueryBuilder)
        query = vector_query.distance_type("cosine").where(where, prefilter=True).limit(k)
        if min_score is not None:
            # _distance is 1 - cosine, so a cosine floor is a distance ceiling.
            query = query.distance_range(upper_bound=1.0 - min_score + 1e-6)
        if with_vectors:
            table = self._read(query.select([*_ROW_COLUMNS, "vector", "_distance"]).to_arrow)
            if not table.num_rows:
                return []
            flat = table.column("vector").combine_chunks().flatten().to_numpy()
            matrix = np.asarray(flat, dtype=np.float32).reshape(table.num_rows, self.dim)
            records = table.drop_columns(["vector"]).to_pylist()
            return [
                Hit(_row(r), 1.0 - float(r["_distance"]), matrix[n]) for n, r in enumerate(records)
            ]
        # Not the vectors: turning 384 floats a row into Python objects cost more than the search.
        found = self._read(query.select([*_ROW_COLUMNS, "_distance"]).to_list)
        return [Hit(_row(r), 1.0 - float(r["_distance"])) for r in found]

    def keyword(self, text: str, *, where: str, k: int, column: str = "text") -> list[Hit]:
        """Top-k by BM25 over the full-text index of `column` (`text`, or `content`: an item's
        own words without a turn's neighbours), among rows matching the filter."""
        if k <= 0 or not text.strip():
            return []
        if not self._indexed:
            with self._writing():
                self._build_indexes()
        if not self._indexed:
            return []
        found = self._read(
            lambda: (
                self._table.search(_fts_text(text), query_type="fts", fts_columns=column)
                .where(where, prefilter=True)
                .limit(k)
                .to_arrow()
            )
        )
        if not found.num_rows:
            return []
        # The vectors (hybrid scores keyword matches by their cosine) as one array, not lists.
        flat = found.column("vector").combine_chunks().flatten().to_numpy()
        vectors = np.asarray(flat, dtype=np.float32).reshape(found.num_rows, self.dim)
        rows = found.drop_columns(["vector"]).to_pylist()
        return [Hit(_row(r), float(r.get("_score", 0.0)), vectors[i]) for i, r in enumerate(rows)]

    def hybrid(
        self,
        vector: Vectors | Callable[[], Vectors],
        text: str,
        *,
        where: str,
        k: int,
        min_score: float | None = None,
        column: str = "text",
        semantic_weight: float = 0.7,
    ) -> list[Hit]:
        """Semantic and keyword (on `column`) results fused by score (see fuse_scores); the
        score is the fused one, at most 1. A keyword match outside the semantic list
        gets its own cosine from its stored vector, so both halves score every candidate."""
        if k <= 0:
            return []
        depth = max(k * 2, 30)
        pending = _HALVES.submit(self.keyword, text, where=where, k=depth, column=column)
        if callable(vector):  # (the query's embedding, made while the keyword half runs)
            vector = vector()
        semantic = self.search(vector, where=where, k=depth, min_score=min_score)
        keyword = pending.result()
        cosines = {h.row.id: h.score for h in semantic}
        query = np.asarray(vector, dtype=np.float32)
        for hit in keyword:
            if hit.row.id not in cosines and hit.vector is not None:
                cosines[hit.row.id] = float(hit.vector @ query)
        return fuse_scores(semantic, keyword, cosines, k, semantic_weight=semantic_weight)

    def data_files(self) -> list[str]:
        """Every file of the table: local paths, or s3:// URIs."""
        return self.location.files(self.name)

    def _arrow(self, rows: Sequence[IndexRow], vectors: Vectors) -> pa.Table:
        columns: dict[str, Any] = {
            name: [getattr(r, name) for r in rows] for name in IndexRow.__dataclass_fields__
        }
        columns["content"] = [r.content or r.text for r in rows]
        flat = pa.array(np.asarray(vectors, dtype=np.float32).reshape(-1), type=pa.float32())
        columns["vector"] = pa.FixedSizeListArray.from_arrays(flat, self.dim)
        return pa.table(columns, schema=self._schema)


def table_names(where: Path | LanceLocation) -> list[str]:
    """Every table of the store: one per model and dimension ever used."""
    return LanceLocation.of(where).table_names()


def purge_person_from_table(where: Path | LanceLocation, name: str, agent: str, phone: str) -> int:
    """Delete a person from a table of another model, and make the deletion physical."""
    location = LanceLocation.of(where)
    with WriteLock.of(location):
        table = location.connect().open_table(name)
        return _purge_rows(table, f"agent = {quote(agent)} AND phone = {quote(phone)}")


def person_ids_in_table(
    where: Path | LanceLocation, name: str, agent: str, phone: str
) -> list[str]:
    """The ids of a person's rows in a table of another model."""
    table = LanceLocation.of(where).connect().open_table(name)
    found = table.to_lance().to_table(
        columns=["id"], filter=f"agent = {quote(agent)} AND phone = {quote(phone)}"
    )
    return [str(i) for i in found.column("id").to_pylist()]


def purge_ids_from_table(
    where: Path | LanceLocation, name: str, ids: Sequence[str], *, versions: bool = False
) -> int:
    """Delete rows by id from a table of another model, and make the deletions physical
    (one rewrite for all of them). With versions, older versions go even when no row did
    (rows rewritten under another number leave their old state in them)."""
    location = LanceLocation.of(where)
    step = 500
    filters = [
        "id IN (" + ", ".join(quote(i) for i in ids[at : at + step]) + ")"
        for at in range(0, len(ids), step)
    ]
    if not filters and not versions:
        return 0
    with WriteLock.of(location):
        return _purge_rows(location.connect().open_table(name), *filters, versions=versions)


def _purge_rows(table: Any, *filters: str, versions: bool = False) -> int:
    table.checkout_latest()
    count = 0
    for where in filters:
        found = int(table.count_rows(where))
        if found:
            table.delete(where)
        count += found
    if not count and versions:
        table.to_lance().cleanup_old_versions(timedelta(0), delete_unverified=True)
    if count:
        table.to_lance().optimize.compact_files(materialize_deletions_threshold=0.0)
        table.checkout_latest()  # type: ignore[no-untyped-call]
        if table.count_rows():
            _build_fts(table, rebuild=True)
        table.to_lance().cleanup_old_versions(timedelta(0), delete_unverified=True)
    return count


def _has_indexes(table: Any) -> bool:
    indices = table.list_indices()
    columns = {tuple(i.columns) for i in indices}
    names = {i.name for i in indices}
    return all((column,) in columns for column in _INDEXES) and all(
        fts_index_name(column) in names for column in FTS_COLUMNS
    )


def _build_fts(table: Any, *, rebuild: bool) -> None:
    """The full-text indexes with the current analysis; one made another way is dropped."""
    indices = table.list_indices()
    names = {i.name for i in indices}
    for column in FTS_COLUMNS:
        wanted = fts_index_name(column)
        for index in indices:
            if index.columns == [column] and index.name != wanted:
                table.drop_index(index.name)
        if rebuild or wanted not in names:
            table.create_index(column, config=fts_config(), replace=True, name=wanted)


def fuse_scores(
    semantic: Sequence[Hit],
    keyword: Sequence[Hit],
    cosines: dict[str, float],
    k: int,
    *,
    semantic_weight: float,
    scale: float = BM25_SCALE,
) -> list[Hit]:
    """weight * cosine + (1 - weight) * bm25 / (bm25 + scale) over the union of both lists.
    BM25 is squashed into [0, 1) by its own size, not by the best hit of the query, so one
    weak shared word stays weak; an item no keyword matched adds nothing from that half."""
    rows: dict[str, IndexRow] = {}
    bm25: dict[str, float] = {}
    for hit in semantic:
        rows[hit.row.id] = hit.row
    for hit in keyword:
        rows[hit.row.id] = hit.row
        bm25[hit.row.id] = max(hit.score, 0.0)
    scores = {
        i: semantic_weight * cosines.get(i, 0.0)
        + (1.0 - semantic_weight) * (bm25[i] / (bm25[i] + scale) if i in bm25 else 0.0)
        for i in rows
    }
    best = sorted(scores, key=lambda i: (-scores[i], i))[:k]
    return [Hit(rows[i], scores[i]) for i in best]


def _fts_text(text: str) -> str:
    # The full-text parser reads some characters as syntax; plain words are what we mean.
    cleaned = "".join(ch if ch.isalnum() or ch in "-_'" else " " for ch in text)
    return " ".join(cleaned.split())[:1000] or "_"


def _row(record: dict[str, Any]) -> IndexRow:
    return IndexRow(
        id=record["id"],
        kind=record["kind"],
        ref_id=record["ref_id"],
        agent=record["agent"],
        phone=record["phone"],
        status=record["status"],
        type=record["type"],
        created_at=record["created_at"],
        text=record["text"],
        session_id=record.get("session_id") or "",
        task_id=record.get("task_id") or "",
        graph_id=record.get("graph_id") or "",
        content=record.get("content") or "",
    )
