"""Forgetting a person leaves no row and no byte of their text in the SQLite files."""

from __future__ import annotations

from pathlib import Path

from tests.backends import query
from tests.conftest import AGENT, PHONE, Api, admin

CANARY = "canary-7f3a9c-zebra-lighthouse"


def data_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def assert_no_canary_in_lance(folder: Path, canary: str = CANARY) -> None:
    """Lance compresses strings, so read every file back, deleted rows included."""
    from lance.file import LanceFileReader

    files = [p for p in folder.rglob("*.lance") if p.is_file()]
    assert files
    for path in files:
        table = LanceFileReader(str(path)).read_all().to_table()
        for column in table.columns:
            assert canary not in str(column.to_pylist()), path


def test_forget_leaves_nothing(api: Api) -> None:
    for i in range(45):
        api.post_turn(f"{CANARY} turn {i} " + "padding " * 50, event_id=f"e{i}")
    api.services.memory.add_memory(AGENT, PHONE, f"{CANARY} is a fact")
    api.services.store.put_summary(AGENT, PHONE, f"summary with {CANARY}", 3)
    api.post_turn("another person keeps theirs", phone="+15559998888")
    api.index()
    found = api.context(query=f"{CANARY} turn", excerpt_mode="keyword", threshold=-1).json()
    assert found["facts"] and found["excerpts"], "the canary must be indexed before forgetting"

    response = api.client.delete(f"/v1/agents/{AGENT}/people/{PHONE}", headers=admin())
    assert response.status_code == 200
    assert response.json()["deleted"] == {
        "messages": 45,
        "memories": 1,
        "summaries": 1,
        "vectors": 47,
    }

    settings = api.services.settings
    for table in ("messages", "memories", "summaries", "memory_history", "outbox"):
        count = query(settings, f"SELECT COUNT(*) FROM {table} WHERE phone = ?", PHONE)
        assert count[0][0] == 0, table
    assert query(settings, "SELECT COUNT(*) FROM messages")[0][0] == 1

    wal = settings.sqlite_path.with_name(settings.sqlite_path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    for path in data_files(settings.data_dir):
        assert CANARY.encode() not in path.read_bytes(), path
    assert_no_canary_in_lance(settings.lance_path)
    assert api.services.indexer.space.index.count() == 1

    export = api.client.get(f"/v1/agents/{AGENT}/people/{PHONE}/export", headers=admin()).json()
    assert export["messages"] == [] and export["memories"] == [] and export["summary"] is None
    assert api.context().json()["history"] == []


def test_event_ids_can_be_reused_after_forgetting(api: Api) -> None:
    api.post_turn("before", event_id="evt-1")
    api.client.delete(f"/v1/agents/{AGENT}/people/{PHONE}", headers=admin())
    assert api.post_turn("after", event_id="evt-1").status_code == 201


def test_forgetting_nobody_is_fine(api: Api) -> None:
    response = api.client.delete(f"/v1/agents/{AGENT}/people/{PHONE}", headers=admin())
    assert response.json()["deleted"]["messages"] == 0


def test_export_holds_the_person_and_nobody_else(api: Api) -> None:
    api.post_turn("mine", event_id="e1", number="+15550001111")
    api.post_turn("theirs", phone="+15559998888")
    api.post_turn("other agent", agent="other")
    api.services.memory.add_memory(AGENT, PHONE, "likes tea")
    body = api.client.get(f"/v1/agents/{AGENT}/people/{PHONE}/export", headers=admin()).json()
    assert body["agent"] == AGENT and body["phone"] == PHONE
    assert [m["content"] for m in body["messages"]] == ["mine"]
    assert body["messages"][0]["number"] == "+15550001111"
    assert [m["content"] for m in body["memories"]] == ["likes tea"]
    assert [h["action"] for h in body["memories"][0]["history"]] == ["create"]
