"""Backup while the server runs, then restore into a fresh folder (on PostgreSQL: a fresh
database) and compare, on both back ends; PostgreSQL's own refusals and its password."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from embeddings.index import VectorIndex
from server.app import create_app
from server.backup import MIGRATIONS
from server.cli import main
from server.config import Settings
from server.store import Store
from tests.backends import execute, on_postgres, query, set_data_env
from tests.conftest import ADMIN_KEY, AGENT, PHONE, Api, admin, make_settings
from tests.fakes import fake_factory
from tests.s3 import S3Server

TABLES = ("messages", "summaries", "memories", "memory_history", "keys", "agent_settings")
OTHER = "+15559990000"
DURING = "+15558880000"


def dump(settings: Settings) -> dict[str, list[tuple[Any, ...]]]:
    return {
        name: [tuple(r) for r in query(settings, f"SELECT * FROM {name} ORDER BY 1")]
        for name in TABLES
    }


def cli(*args: str) -> int:
    return main(list(args), encoder_factory=fake_factory)


@contextmanager
def served(data_dir: Path) -> Iterator[TestClient]:
    """A server on a restored folder, its index brought up to date as the indexer would."""
    app = create_app(make_settings(data_dir), encoder_factory=fake_factory, run_workers=False)
    with TestClient(app) as client:
        client.app.state.services.indexer.drain()  # type: ignore[attr-defined]
        yield client


def test_backup_while_serving_then_restore(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(45):
        api.post_turn(f"turn {i} about my dog", role="user" if i % 2 == 0 else "assistant")
    api.post_turn("someone else", phone=OTHER)
    memory = api.services.memory.add_memory(AGENT, PHONE, "has a dog called Biscuit")
    api.client.patch(
        f"/v1/agents/{AGENT}/memories/{memory.id}",
        json={"metadata": {"source": "call"}},
        headers=admin(),
    )
    api.client.put(f"/v1/agents/{AGENT}/settings", json={"top_k": 4}, headers=admin())
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
            api.post_turn(f"during the backup {n}", phone=DURING, event_id=f"d{n}")
            api.services.indexer.run_once()
            n += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(0.05)
        assert cli("backup", str(tmp_path / "bk")) == 0
    finally:
        stop.set()
        thread.join()
    assert capsys.readouterr().out.splitlines()[0].startswith("folder ")  # readable by default
    assert cli("backup", str(tmp_path / "bk")) == 2
    assert "is not empty" in capsys.readouterr().err
    manifest = json.loads((tmp_path / "bk" / "backup.json").read_text())
    engine = "postgresql" if on_postgres() else "sqlite"
    assert manifest["engine"] == engine
    assert manifest["schema_version"] == len(MIGRATIONS[engine])
    copy = {"sqlite": "memory.db", "postgresql": "postgres.dump"}[engine]
    assert sorted(p.name for p in (tmp_path / "bk").iterdir()) == sorted(
        ["backup.json", "lance", copy]
    )
    # Only the writer's turns differ between the copy and the tables now.
    after = dump(settings)
    assert 46 <= manifest["messages"] <= len(after["messages"])
    assert manifest["memories"] == len(after["memories"]) == 1

    # Life goes on after the backup: new turns, a forgotten person, a changed setting.
    api.post_turn("after the backup")
    api.client.delete(f"/v1/agents/{AGENT}/people/{OTHER}", headers=admin())
    api.client.put(f"/v1/agents/{AGENT}/settings", json={"top_k": 9}, headers=admin())
    api.index()

    # The vector copy is taken first. A vector written between the two copies has no source in
    # the database copy: restore drops it. A turn indexed (and so gone from the outbox) between
    # them has a source but no vector, and one archived in between has a stale row: restore
    # queues everything and the indexer brings both up to date.
    vectors = VectorIndex(tmp_path / "bk" / "lance", index.model, index.dim)
    (row, vector) = vectors.get(["turn:1"])["turn:1"]
    assert row.status == "archived"
    vectors.upsert([replace(row, id="turn:999999", ref_id="999999")], vector[None, :])
    vectors.upsert([replace(row, status="recent", text="stale text")], vector[None, :])
    vectors.delete_ids(["turn:2"])

    restored = tmp_path / "restored"
    set_data_env(monkeypatch, restored)
    assert cli("restore", str(tmp_path / "bk"), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["engine"] == engine
    assert report["queued"] == report["messages"] + report["memories"]
    back = dump(make_settings(restored))
    assert len(back["messages"]) == report["messages"] == manifest["messages"]
    assert back["messages"] == after["messages"][: len(back["messages"])], "a prefix, as it was"
    assert {r[0] for r in after["messages"][len(back["messages"]) :]} <= {
        r[0] for r in query(settings, "SELECT id FROM messages WHERE phone = ?", DURING)
    }, "what the copy lacks was written during the backup"
    assert {k: v for k, v in back.items() if k != "messages"} == {
        k: v for k, v in after.items() if k != "messages"
    }, "every other table comes back as it was"

    with served(restored) as client:
        services = client.app.state.services  # type: ignore[attr-defined]
        sources = {f"turn:{r[0]}" for r in back["messages"]}
        sources |= {f"fact:{r[0]}" for r in back["memories"]}
        assert sorted(services.indexer.space.index.all_ids()) == sorted(sources)
        fixed = services.indexer.space.index.get(["turn:1"])["turn:1"][0]
        assert (fixed.status, fixed.content) == ("archived", "turn 0 about my dog")
        assert "stale" not in fixed.text

        # Through HTTP: the state at backup time.
        person = f"/v1/agents/{AGENT}/people"
        gone = client.get(f"{person}/{OTHER}/export", headers=admin()).json()
        assert [m["content"] for m in gone["messages"]] == ["someone else"]
        mine = client.get(f"{person}/{PHONE}/export", headers=admin()).json()
        assert "after the backup" not in [m["content"] for m in mine["messages"]]
        assert len(mine["messages"]) == 45
        found = client.post(
            f"/v1/agents/{AGENT}/memories/search",
            json={"query": "Biscuit", "mode": "keyword"},
            headers=admin(),
        ).json()["items"]
        assert [(m["content"], m["metadata"]) for m in found] == [
            ("has a dog called Biscuit", {"source": "call"})
        ]
        staff = client.post(
            "/v1/search", json={"query": "someone else", "mode": "keyword"}, headers=admin()
        ).json()["items"]
        assert any(item["text"] == "someone else" for item in staff)
        top_k = client.get(f"/v1/agents/{AGENT}/settings", headers=admin()).json()["top_k"]
        assert top_k == 4
    assert cli("restore", str(tmp_path / "nothing")) == 2
    assert "is not a backup" in capsys.readouterr().err


def test_restore_refuses_while_a_server_serves_the_folder(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    api.post_turn("turn before the backup")
    settings = api.services.settings
    set_data_env(monkeypatch, settings.data_dir)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    assert cli("backup", str(tmp_path / "bk")) == 0
    api.post_turn("turn after the backup")
    capsys.readouterr()

    assert cli("restore", str(tmp_path / "bk")) == 2
    assert "a server is serving" in capsys.readouterr().err
    # Nothing was replaced: the server keeps its data and keeps answering.
    assert len(query(settings, "SELECT id FROM messages")) == 2
    assert api.post_turn("and one more").status_code == 201
    assert api.context(query="turn").status_code == 200

    api.client.__exit__(None, None, None)  # the server stops: now the folder may be restored
    assert cli("restore", str(tmp_path / "bk")) == 0
    assert [r[0] for r in query(settings, "SELECT content FROM messages")] == [
        "turn before the backup"
    ]

    # A backup made by a later version (a newer schema) is not restored by this one.
    manifest = tmp_path / "bk" / "backup.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "schema_version": 99}))
    capsys.readouterr()
    assert cli("restore", str(tmp_path / "bk")) == 2
    assert "holds schema version 99, newer than" in capsys.readouterr().err


# -- PostgreSQL ----------------------------------------------------------------------------------


@pytest.mark.postgresql
def test_restore_refuses_while_a_server_elsewhere_uses_the_database(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replica on another machine holds no lock in this data folder: its sessions show it."""
    api.post_turn("turn before the backup")
    settings = api.services.settings
    set_data_env(monkeypatch, settings.data_dir)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    assert cli("backup", str(tmp_path / "bk")) == 0
    api.post_turn("turn after the backup")
    capsys.readouterr()

    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path / "this-machine"))
    assert cli("restore", str(tmp_path / "bk")) == 2
    said = capsys.readouterr().err
    assert "the database is in use" in said and "stop every server" in said
    assert len(query(settings, "SELECT id FROM messages")) == 2
    assert api.post_turn("and one more").status_code == 201

    api.client.__exit__(None, None, None)
    assert cli("restore", str(tmp_path / "bk")) == 0
    assert [r[0] for r in query(settings, "SELECT content FROM messages")] == [
        "turn before the backup"
    ]


def _recording_tool(folder: Path, name: str, log: Path, *, fail: str | None = None) -> None:
    """A stand-in for a PostgreSQL client tool on PATH: notes its arguments and the
    PGPASSWORD it got, then runs the real one (or fails, saying `fail`)."""
    real = next(
        Path(d) / name
        for d in os.environ["PATH"].split(os.pathsep)
        if (Path(d) / name).is_file() and Path(d) != folder
    )
    then = f'echo "{fail}" >&2; exit 3' if fail else f'exec "{real}" "$@"'
    script = folder / name
    script.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "{name} $*" "PGPASSWORD=$PGPASSWORD" >> "{log}"\n{then}\n'
    )
    script.chmod(0o755)


@pytest.mark.postgresql
def test_the_database_password_is_never_shown_nor_on_a_command_line(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    password = "hunter2pw-0b7c"
    url = api.services.settings.database_url
    assert url and "@" in url
    with_password = url.replace("postgres@", f"postgres:{password}@")  # trust auth ignores it
    api.post_turn("turn before the backup")
    api.client.__exit__(None, None, None)
    set_data_env(monkeypatch, api.services.settings.data_dir)
    monkeypatch.setenv("MEMORY_DATABASE_URL", with_password)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    tools, log = tmp_path / "bin", tmp_path / "tools.log"
    tools.mkdir()
    for name in ("pg_dump", "pg_restore"):
        _recording_tool(tools, name, log)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")

    assert cli("backup", str(tmp_path / "bk")) == 0
    assert cli("restore", str(tmp_path / "bk")) == 0
    printed = capsys.readouterr()
    lines = log.read_text().splitlines()
    calls = [line for line in lines if not line.startswith("PGPASSWORD=")]
    assert [c.split()[0] for c in calls] == ["pg_dump", "pg_restore", "pg_restore"]
    assert "--format=custom" in calls[0] and "--snapshot=" in calls[0]
    assert calls[1].startswith("pg_restore --list")  # the dump is read before any change
    for flag in ("--clean", "--if-exists", "--no-owner", "--single-transaction"):
        assert flag in calls[2]
    assert f"PGPASSWORD={password}" in lines  # the tools get it from the environment only
    assert all(password not in c for c in calls)
    for text in (printed.out, printed.err, (tmp_path / "bk" / "backup.json").read_text()):
        assert password not in text

    # A failing pg_dump: its message, with the password masked; exit 2; no half backup.
    _recording_tool(tools, "pg_dump", log, fail=f"pg_dump: error: bad thing near {password}")
    assert cli("backup", str(tmp_path / "bk2")) == 2
    said = capsys.readouterr().err.partition("\n")[2]  # (after the line naming the folder)
    assert said.startswith("memory-server: pg_dump failed (exit 3): pg_dump: error: bad thing")
    assert password not in said and "***" in said and "Traceback" not in said
    assert not (tmp_path / "bk2").exists()

    # No pg_dump at all: said before anything is copied.
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert cli("backup", str(tmp_path / "bk3")) == 2
    assert "pg_dump is not on PATH" in capsys.readouterr().err
    assert not (tmp_path / "bk3").exists()


@pytest.mark.postgresql
def test_a_backup_restores_only_into_the_engine_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    monkeypatch.setenv("MEMORY_ADMIN_KEY", ADMIN_KEY)
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path / "lite"))
    monkeypatch.delenv("MEMORY_DATABASE_URL", raising=False)
    assert cli("keys", "create", "--scope", "admin") == 0  # makes the SQLite database
    assert cli("backup", str(tmp_path / "lite-bk")) == 0
    set_data_env(monkeypatch, tmp_path / "pg")
    assert cli("keys", "create", "--scope", "admin") == 0
    assert cli("backup", str(tmp_path / "pg-bk")) == 0
    capsys.readouterr()

    assert cli("restore", str(tmp_path / "lite-bk")) == 2
    assert "is a backup of a SQLite database" in capsys.readouterr().err
    monkeypatch.delenv("MEMORY_DATABASE_URL")
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path / "lite"))
    assert cli("restore", str(tmp_path / "pg-bk")) == 2
    assert "is a backup of a PostgreSQL database" in capsys.readouterr().err
    assert len(query(make_settings(tmp_path / "lite", database_url=None), "SELECT * FROM keys"))


@pytest.mark.postgresql
def test_restoring_an_older_schema_drops_the_later_tables_and_migrates_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings(tmp_path / "data")
    Store.open(settings).close()
    # The database as version 4 left it (compaction_claims came with version 5, opt_outs and
    # an index of messages with version 6, erasures with version 7, memories' validity
    # with version 8, people's names with version 9, the moves' journal with version 10).
    execute(settings, "DROP TABLE compaction_claims")
    execute(settings, "DROP TABLE erasures")
    execute(settings, "DROP TABLE opt_outs")
    execute(settings, "DROP INDEX messages_archived_age")
    execute(settings, "DROP INDEX memories_superseded_by")  # (version 8: its columns)
    execute(settings, "DROP TABLE people")  # (version 9)
    execute(settings, "DROP TABLE person_name_words")
    execute(settings, "DROP TABLE moves")  # (version 10)
    for column in ("valid_from", "invalid_at", "superseded_by", "supersedes"):
        execute(settings, f"ALTER TABLE memories DROP COLUMN {column}")
    execute(settings, "DELETE FROM schema_migrations WHERE version >= 5")
    execute(
        settings,
        "INSERT INTO messages (agent, phone, role, content, created_at, stored_at)"
        " VALUES (?, ?, 'user', 'from version 4', '2026-01-01', '2026-01-01')",
        AGENT,
        PHONE,
    )
    set_data_env(monkeypatch, settings.data_dir)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    assert cli("backup", str(tmp_path / "bk")) == 0
    Store.open(settings).close()  # the latest version again: compaction_claims is back
    execute(settings, "CREATE TABLE not_ours (x INTEGER)")  # another application's
    execute(settings, "INSERT INTO not_ours VALUES (7)")

    assert cli("restore", str(tmp_path / "bk")) == 0
    assert [r[0] for r in query(settings, "SELECT content FROM messages")] == ["from version 4"]
    latest = len(MIGRATIONS["postgresql"])
    assert query(settings, "SELECT MAX(version) FROM schema_migrations")[0][0] == latest
    assert query(settings, "SELECT COUNT(*) FROM compaction_claims")[0][0] == 0
    assert query(settings, "SELECT COUNT(*) FROM opt_outs")[0][0] == 0
    assert [r[0] for r in query(settings, "SELECT x FROM not_ours")] == [7], "left alone"

    execute(settings, "INSERT INTO schema_migrations (version, applied_at) VALUES (99, 'x')")
    capsys.readouterr()
    assert cli("restore", str(tmp_path / "bk")) == 2
    assert "newer than this memory-server's" in capsys.readouterr().err


def test_backup_and_restore_of_vectors_in_a_bucket(
    api_factory: Any,
    s3: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """MEMORY_LANCE_URI=s3://...: backup copies the bucket's tables into the backup folder,
    restore writes them back into the bucket (the tables there dropped first)."""
    uri = s3.new_uri()
    shared = {"lance_uri": uri, "lance_storage_options": s3.options}
    api: Api = api_factory(**shared)
    for i in range(6):
        api.post_turn(f"turn {i} about the red kayak")
    api.post_turn("someone else entirely", phone=OTHER)
    api.index()
    set_data_env(monkeypatch, api.services.settings.data_dir)
    for name, value in s3.env(uri).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    assert cli("backup", str(tmp_path / "bk"), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    table = api.services.indexer.space.index.name
    assert report["tables"] == {table: 7}
    dim = api.services.indexer.space.index.dim
    assert VectorIndex(tmp_path / "bk" / "lance", "fake-hash", dim).count() == 7  # a local copy

    # After the backup: a person forgotten, their vectors purged from the bucket.
    api.client.delete(f"/v1/agents/{AGENT}/people/{PHONE}", headers=admin())
    assert s3.holding(uri, b"red kayak") == []

    restored = tmp_path / "restored"  # a fresh data folder (and database), the same bucket
    set_data_env(monkeypatch, restored)
    assert cli("restore", str(tmp_path / "bk"), "--json") == 0
    assert json.loads(capsys.readouterr().out)["tables"] == {table: 7}
    assert s3.holding(uri, b"red kayak")
    app = create_app(
        make_settings(restored, **shared), encoder_factory=fake_factory, run_workers=False
    )
    with TestClient(app) as client:
        services = client.app.state.services  # type: ignore[attr-defined]
        services.indexer.drain()
        assert len(services.indexer.space.index.all_ids()) == 7
        found = client.post(
            "/v1/search", json={"query": "kayak", "mode": "keyword"}, headers=admin()
        ).json()["items"]
        assert len(found) == 6 and all("red kayak" in item["text"] for item in found)
