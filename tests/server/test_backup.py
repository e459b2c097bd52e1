"""Backup while the server runs, then restore into a fresh folder and compare."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from embeddings.index import VectorIndex
from server.cli import main
from tests.conftest import PHONE, Api, admin
from tests.fakes import fake_factory


def table(path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_backup_while_serving_then_restore(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(45):
        api.post_turn(f"turn {i} about my dog", role="user" if i % 2 == 0 else "assistant")
    api.post_turn("someone else", phone="+15559990000")
    api.services.memory.add_memory("support-bot", PHONE, "has a dog called Biscuit")
    api.index()
    settings = api.services.settings
    monkeypatch.setenv("MEMORY_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    before = table(settings.sqlite_path, "SELECT id, content, archived FROM messages ORDER BY id")
    index = api.services.indexer.space.index
    ids_before = sorted(index.all_ids())

    assert main(["backup", str(tmp_path / "bk")], encoder_factory=fake_factory) == 0
    assert '"messages": 46' in capsys.readouterr().out
    assert main(["backup", str(tmp_path / "bk")], encoder_factory=fake_factory) == 2

    # Life goes on after the backup: new turns, a forgotten person.
    api.post_turn("after the backup")
    api.client.delete("/v1/agents/support-bot/people/+15559990000", headers=admin())
    api.index()

    # A vector written between the table copy and the SQLite copy has no source: restore drops it.
    from dataclasses import replace

    copy = VectorIndex(tmp_path / "bk" / "lance", index.model, index.dim)
    (row, vector) = copy.get([ids_before[0]])[ids_before[0]]
    copy.upsert([replace(row, id="turn:999999", ref_id="999999")], vector[None, :])

    restored = tmp_path / "restored"
    monkeypatch.setenv("MEMORY_DATA_DIR", str(restored))
    assert main(["restore", str(tmp_path / "bk")], encoder_factory=fake_factory) == 0
    after = table(restored / "memory.db", "SELECT id, content, archived FROM messages ORDER BY id")
    assert after == before
    restored_index = VectorIndex(restored / "lance", index.model, index.dim)
    assert sorted(restored_index.all_ids()) == ids_before
    hits = restored_index.keyword("Biscuit", where="kind = 'fact'", k=5)
    assert [h.row.text for h in hits] == ["has a dog called Biscuit"]
    assert main(["restore", str(tmp_path / "nothing")], encoder_factory=fake_factory) == 2
