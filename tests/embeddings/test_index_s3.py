"""The vector index on an S3-compatible bucket (moto on 127.0.0.1): the same operations as on a
folder, new versions seen by another handle within a second, and a purge that leaves no
deleted text in any object of the bucket."""

from __future__ import annotations

import time

import numpy as np
import pytest

from embeddings.index import IndexRow, VectorIndex, WriteLock, table_name, table_names
from tests.s3 import S3Server

# Opens no database of the server's: the same on both passes, so the postgresql pass
# skips it (tests/conftest.py).
pytestmark = pytest.mark.no_database

DIM = 8


def row(n: int, text: str, phone: str = "+15550000001") -> IndexRow:
    return IndexRow(
        id=f"turn:{n}",
        kind="turn",
        ref_id=str(n),
        agent="a",
        phone=phone,
        status="archived",
        type="user",
        created_at="2026-01-01T00:00:00Z",
        text=text,
    )


def vector(n: int) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[n % DIM] = 1.0
    return v


def put(index: VectorIndex, rows: list[IndexRow]) -> None:
    index.upsert(rows, np.stack([vector(int(r.ref_id)) for r in rows]))


def test_upsert_search_keyword_and_delete_on_a_bucket(s3: S3Server) -> None:
    uri = s3.new_uri()
    index = VectorIndex(s3.location(uri), "model-s3", DIM)
    assert index.created
    put(index, [row(1, "the red bicycle"), row(2, "a blue umbrella"), row(3, "green tea")])
    put(index, [row(2, "a yellow umbrella")])  # an upsert replaces by id
    assert index.count() == 3
    hits = index.search(vector(2), where="agent = 'a'", k=1)
    assert [h.row.id for h in hits] == ["turn:2"] and hits[0].row.text == "a yellow umbrella"
    assert [h.row.id for h in index.keyword("bicycle", where="agent = 'a'", k=5)] == ["turn:1"]
    assert index.delete_ids(["turn:3"]) == 1
    assert sorted(index.all_ids()) == ["turn:1", "turn:2"]
    assert table_names(s3.location(uri)) == [table_name("model-s3", DIM)]
    assert all(f.startswith(f"{uri}/") for f in index.data_files())
    reopened = VectorIndex(s3.location(uri), "model-s3", DIM)
    assert not reopened.created and reopened.count() == 2


def test_another_handle_sees_a_new_version_within_a_second(s3: S3Server) -> None:
    """Two handles, as two replicas have: one writes, the other's reads see it within
    read_consistency_interval (1 s) without being reopened."""
    uri = s3.new_uri()
    writer = VectorIndex(s3.location(uri), "model-s3", DIM)
    reader = VectorIndex(s3.location(uri), "model-s3", DIM)
    put(writer, [row(1, "first")])
    time.sleep(1.1)
    assert reader.count() == 1
    put(writer, [row(2, "second")])
    written = time.monotonic()
    while reader.count() < 2:
        assert time.monotonic() - written < 2.5, "the reader did not see the new version"
        time.sleep(0.05)
    assert time.monotonic() - written < 2.5


def test_purge_leaves_no_deleted_text_in_any_object_of_the_bucket(s3: S3Server) -> None:
    uri = s3.new_uri()
    index = VectorIndex(s3.location(uri), "model-s3", DIM)
    put(index, [row(n, f"canaryzz secret {n}") for n in range(6)])
    put(index, [row(9, "another person", phone="+15550000002")])
    index.update_indexes()  # full-text index files that hold the words too
    assert s3.holding(uri, b"canaryzz")
    assert index.delete_person("a", "+15550000001") == 6
    index.purge()
    assert index.count() == 1
    assert s3.holding(uri, b"canaryzz") == []
    assert s3.holding(uri, b"another person")  # (the scan does see what is there)


def test_a_bucket_without_a_shared_lock_is_locked_within_the_process(s3: S3Server) -> None:
    """No lock given (a benchmark, a single process): writers of this process take turns."""
    location = s3.location(s3.new_uri())
    lock = WriteLock.of(location)
    assert WriteLock.of(s3.location(location.uri)) is lock  # one object per store
    with lock, lock:  # re-entrant
        pass
