"""Retention: an agent's retention_days forgets the people it has not heard from in that
long (the same erasure as DELETE) and deletes the older archived turns of the others; swept
at start-up, every MEMORY_RETENTION_SWEEP_S, and by `memory-server sweep`. The clock is
injected (FakeClock): days pass in a line."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from embeddings.index import VectorIndex
from server.app import create_app
from server.cli import main
from server.retention import Retention, Swept
from server.store import MIGRATIONS, Store
from server.store.retention import ARCHIVED_BEFORE, QUIET_PEOPLE
from tests.backends import execute, query, set_data_env
from tests.conftest import AGENT, PHONE, Api, FakeClock, admin, assert_error, make_settings
from tests.fakes import fake_factory
from tests.server.test_cli import run_and_list_heavy_imports
from tests.server.test_erasure import lance_texts

CANARY = "tapircanary51c2d8"
OTHER = "+15559990000"
THIRD = "+15559990001"
SETTINGS = f"/v1/agents/{AGENT}/settings"


def put_settings(api: Api, **values: Any) -> Any:
    answer = api.client.put(SETTINGS, json=values, headers=admin())
    assert answer.status_code == 200, answer.text
    return answer.json()


def sweep(api: Api) -> Swept:
    retention: Retention = api.client.app.state.retention  # type: ignore[attr-defined]
    return retention.sweep()


def export(api: Api, phone: str = PHONE, agent: str = AGENT) -> Any:
    answer = api.client.get(f"/v1/agents/{agent}/people/{phone}/export", headers=admin())
    assert answer.status_code == 200, answer.text
    return answer.json()


def contents(api: Api, phone: str, agent: str = AGENT) -> list[str]:
    return [m["content"] for m in export(api, phone, agent)["messages"]]


def assert_no_canary_in_files(api: Api) -> None:
    """No file of the data folder (SQLite, its WAL) and no Lance file holds the canary."""
    settings = api.services.settings
    if not settings.database_url:
        for path in (p for p in settings.data_dir.rglob("*") if p.is_file()):
            assert CANARY.encode() not in path.read_bytes(), path
    assert CANARY not in lance_texts(settings.lance_path)


def test_the_retention_setting_defaults_to_forever_and_null_clears_it(api: Api) -> None:
    assert api.client.get(SETTINGS, headers=admin()).json()["retention_days"] is None
    assert put_settings(api, retention_days=30)["retention_days"] == 30
    assert put_settings(api, top_k=3)["retention_days"] == 30  # left out: unchanged
    assert put_settings(api, retention_days=None)["retention_days"] is None  # null: forever
    assert api.client.get(SETTINGS, headers=admin()).json()["retention_days"] is None
    for bad in (0, -1, 1.5, "30", True, 100_001):
        answer = api.client.put(SETTINGS, json={"retention_days": bad}, headers=admin())
        assert_error(answer, 422)
    assert api.client.get(SETTINGS, headers=admin()).json()["retention_days"] is None
    agent_key = api.key(f"agent:{AGENT}")
    assert_error(api.client.put(SETTINGS, json={"retention_days": 9}, headers=agent_key), 403)


def test_a_sweep_forgets_quiet_people_with_the_erasure_of_delete(
    api: Api, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(10):
        api.post_turn(f"turn {i}: my secret is {CANARY}", role="user" if i % 2 else "assistant")
    api.services.memory.add_memory(AGENT, PHONE, f"Secret is {CANARY}")
    api.services.store.put_summary(AGENT, PHONE, f"They said {CANARY}", 3)
    api.post_turn("an old turn of someone who writes again", phone=OTHER)
    api.post_turn("another agent's old turn", agent="no-retention", phone=THIRD)
    api.client.post(f"/v1/agents/{AGENT}/people/{PHONE}/opt-out", headers=admin())
    api.index()
    staff = api.key("staff")
    quoting = {"query": f"who said {CANARY}", "mode": "keyword"}
    assert api.client.post("/v1/search", json=quoting, headers=staff).json()["items"]
    api.client.post("/v1/search", json={"query": "secret", "phone": PHONE}, headers=staff)

    clock.advance(days=40)
    api.post_turn("I am still here", phone=OTHER)
    put_settings(api, retention_days=30)
    caplog.set_level(logging.INFO, logger="server")
    swept = sweep(api)
    assert (swept.agents, swept.people, swept.archived_turns) == (1, 1, 0)

    settings = api.services.settings
    for table in ("messages", "memories", "summaries", "memory_history", "outbox", "opt_outs"):
        where = "agent = ? AND phone = ?"
        count = query(settings, f"SELECT COUNT(*) FROM {table} WHERE {where}", AGENT, PHONE)
        assert count[0][0] == 0, table
    assert_no_canary_in_files(api)
    # The audit of the searches before: the query that quoted them and the phone filter that
    # named them are "[forgotten]", as after a DELETE.
    audit = api.client.get("/v1/audit", headers=admin()).json()["items"]
    assert [a["query"] for a in audit] == ["[forgotten]", "[forgotten]"]
    assert PHONE not in json.dumps(audit) and CANARY not in json.dumps(audit)
    body = export(api)
    assert body["messages"] == [] and body["memories"] == [] and body["summary"] is None
    assert body["opted_out_at"] is None
    context = api.context(query=CANARY, threshold=-1, excerpt_mode="keyword").json()
    assert context["history"] == context["facts"] == context["excerpts"] == []
    for mode in ("semantic", "keyword", "hybrid"):
        items = api.client.post(
            "/v1/search", json={"query": CANARY, "mode": mode}, headers=staff
        ).json()["items"]
        assert all(CANARY not in item["text"] for item in items), mode
    # The person who wrote again keeps everything; an agent without a retention too.
    assert contents(api, OTHER) == ["an old turn of someone who writes again", "I am still here"]
    assert contents(api, THIRD, "no-retention") == ["another agent's old turn"]

    # Logged with counts, never a phone or a text.
    said = [r.getMessage() for r in caplog.records if r.name == "server.retention"]
    assert said == [
        "retention sweep: 1 agent(s) with a retention, 1 people forgotten, 0 archived turns"
        f" deleted, {swept.seconds:.1f} s"
    ]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert PHONE not in logged and CANARY not in logged

    # Run again (another replica, the next hour): nothing more to do.
    again = sweep(api)
    assert (again.people, again.archived_turns) == (0, 0)
    assert contents(api, OTHER) == ["an old turn of someone who writes again", "I am still here"]


def test_old_archived_turns_of_active_people_are_deleted_with_their_vectors(
    api_factory: Callable[..., Api], clock: FakeClock
) -> None:
    api = api_factory(compact_keep=5)
    for i in range(20):
        api.post_turn(f"old {i} about {CANARY}", role="user" if i % 2 else "assistant")
    clock.advance(days=40)
    for i in range(6):
        api.post_turn(f"recent {i} about the weather", role="user" if i % 2 else "assistant")
    compacted = api.client.post(f"/v1/agents/{AGENT}/people/{PHONE}/compact", headers=admin())
    assert compacted.json()["archived"] == 21  # the 20 old turns and the first recent one
    api.index()
    # The best 15 keyword hits are old turns (the first recent one has the word only from a
    # neighbour, so it ranks below every old turn that says it).
    found = api.context(query=CANARY, excerpt_mode="keyword", excerpt_k=15).json()["excerpts"]
    assert found and all(CANARY in e["content"] for e in found)
    # The first recent turn's keyword text holds its older neighbour's words (turn_window 1).
    index = api.services.indexer.space.index
    first_recent = export(api)["messages"][20]
    assert first_recent["content"] == "recent 0 about the weather"
    row = index.get([f"turn:{first_recent['id']}"])[f"turn:{first_recent['id']}"][0]
    assert CANARY in row.text
    # Another model's table (left by a model change) holds the same rows.
    held = index.get(index.all_ids())
    older_model = VectorIndex(index.location, "fake-older-model", 64)
    older_model.upsert(
        [r for r, _ in held.values()], np.stack([v for _, v in held.values()]).astype(np.float32)
    )
    assert older_model.count() == 26

    put_settings(api, retention_days=30)
    swept = sweep(api)
    assert (swept.people, swept.archived_turns) == (0, 20)
    # There, the deleted turns and the neighbours whose text held them are gone (the table
    # lacks them until it is served again, when they are queued).
    older_model.reopen()
    assert older_model.count() == 6 - api.services.settings.turn_window

    kept = export(api)["messages"]
    assert [m["content"] for m in kept] == [f"recent {i} about the weather" for i in range(6)]
    assert [m["archived"] for m in kept] == [True] + [False] * 5
    row = index.get([f"turn:{first_recent['id']}"])[f"turn:{first_recent['id']}"][0]
    assert CANARY not in row.text and "recent 0" in row.text
    assert index.count() == 6
    assert query(api.services.settings, "SELECT COUNT(*) FROM outbox")[0][0] == 0
    assert_no_canary_in_files(api)
    assert api.context(query=CANARY, excerpt_mode="keyword").json()["excerpts"] == []
    staff = api.key("staff")
    items = api.client.post(
        "/v1/search", json={"query": CANARY, "mode": "hybrid"}, headers=staff
    ).json()["items"]
    assert all(CANARY not in item["text"] for item in items)
    # The archived turn within the retention is still found.
    recent = api.context(query="recent weather", excerpt_mode="keyword").json()["excerpts"]
    assert [e["content"] for e in recent] == ["recent 0 about the weather"]
    assert sweep(api).archived_turns == 0


def test_who_is_kept_a_recent_opt_out_a_backfilled_turn_and_an_old_opt_out_alone(
    api: Api, clock: FakeClock
) -> None:
    """Newest turn old but a turn made later stored before it (a backfill): kept. Turns old but
    an opt-out within the retention: kept. An old opt-out and no turn: forgotten."""
    api.client.post(f"/v1/agents/{AGENT}/people/{THIRD}/opt-out", headers=admin())
    api.post_turn("old turn, then quiet until a STOP", phone=PHONE)
    clock.advance(days=35)
    api.client.post(f"/v1/agents/{AGENT}/people/{PHONE}/opt-out", headers=admin())
    api.post_turn("a recent turn", phone=OTHER)
    api.post_turn("an old turn stored late", phone=OTHER, created_at="2026-03-02T00:00:00Z")
    clock.advance(days=5)
    put_settings(api, retention_days=30)
    swept = sweep(api)
    assert swept.people == 1
    assert query(api.services.settings, "SELECT phone FROM opt_outs")[0][0] == PHONE
    assert contents(api, PHONE) == ["old turn, then quiet until a STOP"]
    assert sorted(contents(api, OTHER)) == ["a recent turn", "an old turn stored late"]
    assert export(api, THIRD)["opted_out_at"] is None

    # The opt-out is old too, 31 days on: now they go.
    clock.advance(days=31)
    assert sweep(api).people == 2
    assert contents(api, PHONE) == [] and contents(api, OTHER) == []
    assert query(api.services.settings, "SELECT COUNT(*) FROM opt_outs")[0][0] == 0


def test_one_process_sweeps_at_a_time(api: Api, clock: FakeClock) -> None:
    api.post_turn(f"quiet {CANARY}")
    clock.advance(days=10)
    put_settings(api, retention_days=7)
    settings = api.services.settings
    other_process = api.services.store.lease("retention", settings.data_dir)
    assert other_process.try_hold()
    try:
        skipped = sweep(api)
        assert skipped.skipped and skipped.people == 0
        assert len(contents(api, PHONE)) == 1
    finally:
        other_process.release()
    assert sweep(api).people == 1
    assert contents(api, PHONE) == []


def test_the_server_sweeps_at_start_up_and_then_every_interval(tmp_path: Path) -> None:
    clock = FakeClock()
    settings = make_settings(tmp_path / "data", retention_sweep_s=0.2)
    with TestClient(
        create_app(settings, clock=clock, encoder_factory=fake_factory, run_workers=False)
    ) as client:
        for phone in (PHONE, OTHER):
            client.post(
                f"/v1/agents/{AGENT}/people/{phone}/messages",
                json={"role": "user", "content": f"hello {CANARY}"},
                headers=admin(),
            )
        client.put(SETTINGS, json={"retention_days": 30}, headers=admin())
    clock.advance(days=31)
    app = create_app(settings, clock=clock, encoder_factory=fake_factory, run_workers=True)
    with TestClient(app) as client:

        def messages(phone: str) -> list[Any]:
            path = f"/v1/agents/{AGENT}/people/{phone}/messages"
            return list(client.get(path, headers=admin()).json()["items"])

        def eventually(check: Callable[[], bool]) -> None:
            deadline = time.monotonic() + 20
            while not check():
                assert time.monotonic() < deadline
                time.sleep(0.05)

        eventually(lambda: messages(PHONE) == [] and messages(OTHER) == [])
        client.post(
            f"/v1/agents/{AGENT}/people/{OTHER}/messages",
            json={"role": "user", "content": "back again"},
            headers=admin(),
        )
        time.sleep(0.5)  # sweeps meanwhile keep them: 0 days old
        assert len(messages(OTHER)) == 1
        clock.advance(days=31)
        eventually(lambda: messages(OTHER) == [])
    # Stopped at shutdown.
    assert not [t for t in threading.enumerate() if t.name == "retention"]


def test_sweep_from_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The CLI runs on the real clock: the data is made in 2020.
    clock = FakeClock(datetime(2020, 1, 1, tzinfo=UTC))
    settings = make_settings(tmp_path)
    set_data_env(monkeypatch, tmp_path)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    Store.open(settings).close()  # (a folder without a database is refused: test_cli.py)
    assert main(["sweep", "--json"]) == 0  # a new database: nothing to do, no model loaded
    assert json.loads(capsys.readouterr().out) == {"agents": 0, "people": 0, "archived_turns": 0}

    app = create_app(settings, clock=clock, encoder_factory=fake_factory, run_workers=False)
    with TestClient(app) as client:
        for phone in (PHONE, OTHER):
            client.post(
                f"/v1/agents/{AGENT}/people/{phone}/messages",
                json={"role": "user", "content": f"hi {CANARY}"},
                headers=admin(),
            )
        app.state.services.indexer.drain()
        client.put(SETTINGS, json={"retention_days": 365}, headers=admin())
    assert main(["sweep", "--json"], encoder_factory=fake_factory) == 0
    assert json.loads(capsys.readouterr().out) == {"agents": 1, "people": 2, "archived_turns": 0}
    assert query(settings, "SELECT COUNT(*) FROM messages")[0][0] == 0
    assert CANARY not in lance_texts(settings.lance_path)
    assert main(["sweep"], encoder_factory=fake_factory) == 0  # readable: a line a count
    out = capsys.readouterr().out
    assert out.splitlines() == ["agents          1", "people          0", "archived_turns  0"]


def test_a_sweep_with_nothing_to_do_does_not_import_the_model_stack(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data")
    store = Store.open(settings)
    store.put_agent_settings(AGENT, {"retention_days": 30})
    store.close()
    out, loaded, code = run_and_list_heavy_imports(tmp_path / "data", ["sweep"])
    assert (loaded, code) == ([], 0), out
    assert "agents" in out


def test_the_sweep_queries_read_indexes(api: Api) -> None:
    """People by their newest turn through (agent, phone, id); old archived turns through
    (agent, archived, created_at): no scan of the messages table."""
    settings = api.services.settings
    for i in range(30):
        api.post_turn(f"turn {i}", phone=f"+1555000{i:04d}")
    # Other agents' turns, old and archived among them: the agent is what narrows the search.
    rows = [
        (f"agent-{i % 40}", f"+1555100{i % 300:04d}", f"2025-0{1 + i % 9}-01", i % 2)
        for i in range(2000)
    ]
    for start in range(0, len(rows), 200):
        chunk = rows[start : start + 200]
        execute(
            settings,
            "INSERT INTO messages (agent, phone, role, content, created_at, stored_at, archived)"
            " VALUES " + ", ".join(["(?, ?, 'user', 'x', ?, ?, ?)"] * len(chunk)),
            *[v for agent, phone, at, archived in chunk for v in (agent, phone, at, at, archived)],
        )
    before = "2026-01-01T00:00:00.000Z"
    plan = _pg_plan if settings.database_url else _sqlite_plan
    quiet = plan(settings, QUIET_PEOPLE, *(AGENT, before) * 3)
    archived = plan(settings, ARCHIVED_BEFORE, AGENT, before)
    if settings.database_url:
        # (messages_window, which begins with agent and phone too, covers it as well)
        assert "Index Only Scan using messages_" in quiet, quiet
        assert "Index Cond: (agent = 'support-bot'::text)" in quiet, quiet
        assert "messages_archived_age" in archived, archived
        narrowed = "Index Cond: ((agent = 'support-bot'::text) AND (archived = 1) AND (created_at <"
        assert narrowed in archived, archived
        assert "Seq Scan on messages" not in quiet + archived
    else:
        # (messages_window, which begins with agent and phone too, covers it as well)
        assert "SEARCH messages USING COVERING INDEX messages_" in quiet, quiet
        assert "SEARCH messages USING INDEX messages_archived_age" in archived, archived
        assert "SCAN messages" not in quiet + archived


def _sqlite_plan(settings: Any, sql: str, *args: object) -> str:
    rows = query(settings, "EXPLAIN QUERY PLAN " + sql, *args)
    return "\n".join(str(r[3]) for r in rows)


def _pg_plan(settings: Any, sql: str, *args: object) -> str:
    """The plan PostgreSQL picks when a scan of the whole table costs what it does at scale
    (on a test's few rows it would rather scan)."""
    import psycopg

    from server.store.postgres import _sql

    with psycopg.connect(settings.database_url, cursor_factory=psycopg.ClientCursor) as conn:
        conn.execute("ANALYZE messages")
        conn.execute("SET enable_seqscan = off")
        rows = conn.execute("EXPLAIN " + _sql(sql), args).fetchall()
    return "\n".join(str(r[0]) for r in rows)


def test_a_database_of_version_5_gains_the_opt_outs_table(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    Store.open(settings).close()
    # The database as version 5 left it, with a turn.
    execute(settings, "DROP TABLE opt_outs")
    execute(settings, "DROP INDEX messages_archived_age")
    execute(settings, "DROP TABLE erasures")  # (version 7)
    execute(settings, "DROP INDEX memories_superseded_by")  # (version 8: its columns)
    execute(settings, "DROP TABLE people")  # (version 9)
    execute(settings, "DROP TABLE person_name_words")
    execute(settings, "DROP TABLE moves")  # (version 10)
    for column in ("valid_from", "invalid_at", "superseded_by", "supersedes"):
        execute(settings, f"ALTER TABLE memories DROP COLUMN {column}")
    execute(settings, "DELETE FROM schema_migrations WHERE version >= 6")
    execute(
        settings,
        "INSERT INTO messages (agent, phone, role, content, created_at, stored_at)"
        " VALUES (?, ?, 'user', 'from version 5', '2026-01-01', '2026-01-01')",
        AGENT,
        PHONE,
    )
    store = Store.open(settings)
    try:
        assert store.schema_version() == len(MIGRATIONS)
        assert store.opted_out_at(AGENT, PHONE) is None
        assert store.record_opt_out(AGENT, PHONE)
        assert [m.content for m in store.all_messages(AGENT, PHONE)] == ["from version 5"]
        assert store.quiet_people(AGENT, "2026-02-01") == [PHONE]
    finally:
        store.close()
