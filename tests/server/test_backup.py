"""Backup while the server runs, then restore into a fresh folder and compare."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from embeddings.index import VectorIndex
from server.app import open_services
from server.cli import main
from tests.backends import set_data_env
from tests.conftest import PHONE, Api, admin, make_settings
from tests.fakes import fake_factory

pytestmark = pytest.mark.sqlite  # SQLite's backup API; PostgreSQL: pg_dump


def table(path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


TABLES = ("messages", "summaries", "memories", "memory_history", "keys", "agent_settings")


def dump(path: Path) -> dict[str, list[tuple[object, ...]]]:
    return {name: table(path, f"SELECT * FROM {name} ORDER BY 1") for name in TABLES}


def test_backup_while_serving_then_restore(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(45):
        api.post_turn(f"turn {i} about my dog", role="user" if i % 2 == 0 else "assistant")
    api.post_turn("someone else", phone="+15559990000")
    memory = api.services.memory.add_memory("support-bot", PHONE, "has a dog called Biscuit")
    api.client.patch(
        f"/v1/agents/support-bot/memories/{memory.id}",
        json={"metadata": {"source": "call"}},
        headers=admin(),
    )
    api.client.put("/v1/agents/support-bot/settings", json={"top_k": 4}, headers=admin())
    api.key("staff")
    api.index()
    settings = api.services.settings
    set_data_env(monkeypatch, settings.data_dir)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    index = api.services.indexer.space.index

    # Turns keep arriving, and being indexed, while the backup runs.
    stop = threading.Event()

    def writer() -> None:
        n = 0
        while not stop.is_set():
            api.post_turn(f"during the backup {n}", phone="+15558880000", event_id=f"d{n}")
            api.services.indexer.run_once()
            n += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(0.05)
        assert main(["backup", str(tmp_path / "bk")], encoder_factory=fake_factory) == 0
    finally:
        stop.set()
        thread.join()
    assert capsys.readouterr().out.splitlines()[0].startswith("folder ")  # readable by default
    assert main(["backup", str(tmp_path / "bk")], encoder_factory=fake_factory) == 2
    snapshot = dump(tmp_path / "bk" / "memory.db")
    written = table(settings.sqlite_path, "SELECT COUNT(*) FROM messages")[0][0]
    assert 46 <= len(snapshot["messages"]) <= written

    # Life goes on after the backup: new turns, a forgotten person.
    api.post_turn("after the backup")
    api.client.delete("/v1/agents/support-bot/people/+15559990000", headers=admin())
    api.index()

    # The vector copy is taken first. A vector written between the two copies has no source in
    # the SQLite copy: restore drops it. A turn indexed (and so gone from the outbox) between
    # them has a source but no vector, and one archived in between has a stale row: restore
    # queues everything and the indexer brings both up to date.
    from dataclasses import replace

    copy = VectorIndex(tmp_path / "bk" / "lance", index.model, index.dim)
    (row, vector) = copy.get(["turn:1"])["turn:1"]
    assert row.status == "archived"
    copy.upsert([replace(row, id="turn:999999", ref_id="999999")], vector[None, :])
    copy.upsert([replace(row, status="recent", text="stale text")], vector[None, :])
    copy.delete_ids(["turn:2"])

    restored = tmp_path / "restored"
    set_data_env(monkeypatch, restored)
    assert main(["restore", str(tmp_path / "bk"), "--json"], encoder_factory=fake_factory) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["queued"] == report["messages"] + report["memories"]
    assert dump(restored / "memory.db") == snapshot, "every table comes back as it was"

    services = open_services(make_settings(restored), encoder_factory=fake_factory)
    try:
        services.indexer.drain()
        sources = {f"turn:{r[0]}" for r in snapshot["messages"]}
        sources |= {f"fact:{r[0]}" for r in snapshot["memories"]}
        assert sorted(services.indexer.space.index.all_ids()) == sorted(sources)
        fixed = services.indexer.space.index.get(["turn:1"])["turn:1"][0]
        assert (fixed.status, fixed.content) == ("archived", "turn 0 about my dog")
        assert "stale" not in fixed.text
        hits = services.indexer.space.index.keyword("Biscuit", where="kind = 'fact'", k=5)
        assert [h.row.text for h in hits] == ["has a dog called Biscuit"]
    finally:
        services.store.close()
    assert main(["restore", str(tmp_path / "nothing")], encoder_factory=fake_factory) == 2


def test_restore_refuses_while_a_server_serves_the_folder(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api.post_turn("turn before the backup")
    settings = api.services.settings
    set_data_env(monkeypatch, settings.data_dir)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    assert main(["backup", str(tmp_path / "bk")], encoder_factory=fake_factory) == 0
    api.post_turn("turn after the backup")
    capsys.readouterr()

    assert main(["restore", str(tmp_path / "bk")], encoder_factory=fake_factory) == 2
    assert "a server is serving" in capsys.readouterr().err
    # Nothing was replaced: the server keeps its data and keeps answering.
    assert len(table(settings.sqlite_path, "SELECT id FROM messages")) == 2
    assert api.post_turn("and one more").status_code == 201
    assert api.context(query="turn").status_code == 200

    api.client.__exit__(None, None, None)  # the server stops: now the folder may be restored
    assert main(["restore", str(tmp_path / "bk")], encoder_factory=fake_factory) == 0
    assert [r[0] for r in table(settings.sqlite_path, "SELECT content FROM messages")] == [
        "turn before the backup"
    ]
