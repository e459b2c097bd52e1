"""A forget racing compaction, memory edits, re-embeds, the indexer, staff search and a slow
outside reader: whatever runs at the same moment, the person is gone afterwards from every
place, no acknowledged turn lacks its vector, and other people's writes never stall.

Each race is driven on purpose: a hook (server/hooks.py) runs the forget at the exact point
where the other operation has read the person and not yet written."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from server.hooks import Hooks
from server.reindex import rebuild_index
from server.store import MIGRATIONS, Store
from tests.backends import data_env
from tests.conftest import AGENT, PHONE, Api, admin
from tests.fake_llm import FakeLLM
from tests.fakes import fake_factory
from tests.server.test_erasure import lance_texts
from tests.server.test_memories import db

CANARY = "quokkacanary5d1e"
OTHER = "+15559990001"
PERSON = f"/v1/agents/{AGENT}/people/{PHONE}"
MEMORIES = f"/v1/agents/{AGENT}/memories"


@pytest.fixture
def hooks() -> Hooks:
    return Hooks()


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        fake.summary = f"They keep saying {CANARY}."
        yield fake


def forget(api: Api, phone: str = PHONE) -> None:
    response = api.client.delete(f"/v1/agents/{AGENT}/people/{phone}", headers=admin())
    assert response.status_code == 200, response.text


def assert_person_gone(api: Api, phone: str = PHONE) -> None:
    """Nothing of the person in SQLite, the index, export, context, staff search or audit."""
    tables = ("messages", "memories", "summaries", "memory_history", "outbox", "people")
    for table in (*tables, "person_name_words"):
        assert db(api, f"SELECT * FROM {table} WHERE phone = ?", phone) == [], table
    index = api.services.indexer.space.index
    assert index.count(f"phone = '{phone}'") == 0
    person = f"/v1/agents/{AGENT}/people/{phone}"
    export = api.client.get(f"{person}/export", headers=admin()).json()
    assert export["messages"] == [] and export["memories"] == [] and export["summary"] is None
    context = api.client.get(f"{person}/context?query={CANARY}&threshold=-1", headers=admin())
    body = context.json()
    assert body["facts"] == [] and body["summary"] is None and CANARY not in body["notes"]
    for mode in ("semantic", "keyword", "hybrid"):
        found = api.client.post(
            "/v1/search", json={"query": CANARY, "mode": mode}, headers=admin()
        ).json()["items"]
        assert all(item["phone"] != phone for item in found), mode
    audit = api.client.get("/v1/audit", headers=admin()).json()["items"]
    assert phone not in json.dumps(audit)


def conversation(api: Api, n: int = 45, *, phone: str = PHONE) -> None:
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        response = api.post_turn(f"turn {i}: {CANARY} at work", role=role, phone=phone)
        assert response.status_code == 201, response.text


# -- 1. compaction with a model -------------------------------------------------------------------


def test_a_forget_during_the_model_call_leaves_nothing_made_from_the_turns(
    api_factory: Callable[..., Api], llm: FakeLLM, hooks: Hooks
) -> None:
    api = api_factory(llm_base_url=llm.base_url, llm_retries=0, hooks=hooks)
    # She gives her name, and the model reads it: a forget while it answers leaves no name.
    assert api.post_turn("Hola, soy Rocío", role="user").status_code == 201
    assert api.post_turn("Hola Rocío, dime", role="assistant").status_code == 201
    llm.facts = json.dumps({"name": "Rocío", "facts": [{"content": f"Likes {CANARY}"}]})
    conversation(api)
    conversation(api, 3, phone=OTHER)
    hooks.once("compaction.model_answered", lambda: forget(api))

    response = api.client.post(f"{PERSON}/compact", headers=admin())

    assert response.status_code == 200, response.text
    assert response.json()["archived"] == 0 and response.json()["facts_added"] == 0
    assert len(llm.requests) == 2, "the model did run: the forget came while it answered"
    api.index()
    assert_person_gone(api)
    assert len(db(api, "SELECT * FROM messages WHERE phone = ?", OTHER)) == 3


def test_a_forget_during_a_background_compaction_leaves_nothing(
    api_factory: Callable[..., Api], llm: FakeLLM, hooks: Hooks
) -> None:
    api = api_factory(llm_base_url=llm.base_url, llm_retries=0, hooks=hooks, run_workers=True)
    forgot = threading.Event()
    posted = threading.Event()

    def forget_now() -> None:
        posted.wait(20)  # compaction may start before the last turns are in: forget after them
        forget(api)
        forgot.set()

    hooks.once("compaction.model_answered", forget_now)
    conversation(api, 46)  # assistant turns past the trigger queue a compaction
    posted.set()
    assert forgot.wait(20), "the background compaction never reached the model's answer"
    deadline = time.monotonic() + 20
    while not api.services.compaction.idle() or api.services.store.outbox_size():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.2)  # the worker's write, had it happened, comes right after the hook
    assert_person_gone(api)


# -- 2. memory edits and reviews ------------------------------------------------------------------


def _pending(api: Api) -> str:
    """A pending memory of the person (the agent reviews; an agent's key adds it)."""
    api.client.put(f"/v1/agents/{AGENT}/settings", json={"review": True}, headers=admin())
    key = api.key(f"agent:{AGENT}")
    response = api.client.post(
        MEMORIES, json={"content": f"Likes {CANARY}", "phone": PHONE}, headers=key
    )
    assert response.status_code == 201 and response.json()["status"] == "pending"
    return str(response.json()["id"])


ACTIONS: dict[str, Callable[[Api, str], Any]] = {
    "patch": lambda api, i: api.client.patch(
        f"{MEMORIES}/{i}", json={"content": f"Loves {CANARY} now"}, headers=admin()
    ),
    "delete": lambda api, i: api.client.delete(f"{MEMORIES}/{i}", headers=admin()),
    "approve": lambda api, i: api.client.post(f"{MEMORIES}/{i}/approve", headers=admin()),
    "reject": lambda api, i: api.client.post(f"{MEMORIES}/{i}/reject", headers=admin()),
}


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_a_forget_between_reading_and_writing_a_memory_leaves_no_history(
    api_factory: Callable[..., Api], hooks: Hooks, action: str
) -> None:
    api = api_factory(hooks=hooks)
    memory_id = _pending(api)
    hooks.once("memories.loaded", lambda: forget(api))

    response = ACTIONS[action](api, memory_id)

    if action == "delete":  # nothing left to delete; never a 500
        assert response.status_code in (200, 404), response.text
        assert response.status_code == 404 or response.json() == {"deleted": False}
    else:
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "not_found"
    assert db(api, "SELECT * FROM memory_history WHERE memory_id = ?", memory_id) == []
    history = api.client.get(f"{MEMORIES}/{memory_id}/history", headers=admin())
    assert history.status_code == 404
    api.index()
    assert_person_gone(api)


# -- 3. re-embedding ------------------------------------------------------------------------------


def test_a_forget_before_a_reembed_writes_no_vector_back(
    api_factory: Callable[..., Api], hooks: Hooks
) -> None:
    api = api_factory(hooks=hooks)
    response = api.client.post(
        MEMORIES, json={"content": f"Has a pet called {CANARY}", "phone": PHONE}, headers=admin()
    )
    memory_id = response.json()["id"]
    hooks.once("memories.before_reembed", lambda: forget(api))

    response = api.client.post(f"{MEMORIES}/{memory_id}/embedding", headers=admin())

    assert response.status_code == 404, response.text
    assert api.services.indexer.space.index.get([f"fact:{memory_id}"]) == {}
    assert CANARY not in lance_texts(api.services.settings.lance_path)
    assert_person_gone(api)


# -- 4. ids and the indexer's acknowledgement -----------------------------------------------------


def test_ids_are_never_reused_after_a_forget(api: Api) -> None:
    ids = [api.post_turn(f"hello {i}").json()["id"] for i in range(3)]
    forget(api)
    new = api.post_turn("a new person", phone=OTHER).json()["id"]
    assert new > max(ids)
    outbox = [r[0] for r in db(api, "SELECT id FROM outbox")]
    assert outbox and min(outbox) > 3, "outbox ids are not reused either"


def test_turns_stored_while_the_indexer_embeds_a_forgotten_batch_are_indexed(
    api_factory: Callable[..., Api], hooks: Hooks
) -> None:
    api = api_factory(hooks=hooks)
    for i in range(5):
        api.post_turn(f"{CANARY} number {i}")
    new_ids: list[int] = []

    def forget_then_write() -> None:
        forget(api)
        new_ids.extend(api.post_turn(f"other {i}", phone=OTHER).json()["id"] for i in range(8))

    hooks.once("indexer.embedded", forget_then_write)
    api.index()

    assert api.services.store.outbox_size() == 0
    assert api.client.get("/health").json()["index_lag"] == 0
    have = api.services.indexer.space.index.get([f"turn:{i}" for i in new_ids])
    assert sorted(have) == sorted(f"turn:{i}" for i in new_ids)
    assert all(row.phone == OTHER for row, _ in have.values())
    assert_person_gone(api)


def test_the_migration_keeps_ids_and_never_hands_them_out_again(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
    for version, script in enumerate(MIGRATIONS[:3], start=1):
        conn.executescript(script)
        conn.execute("INSERT INTO schema_migrations VALUES (?, 'then')", (version,))
    for i in (1, 2, 7):
        conn.execute(
            "INSERT INTO messages (id, agent, phone, role, content, created_at, stored_at)"
            " VALUES (?, 'a', '+15550000001', 'user', 'kept', 'then', 'then')",
            (i,),
        )
        conn.execute(
            "INSERT INTO outbox (id, kind, ref_id, agent, phone, enqueued_at)"
            " VALUES (?, 'turn', ?, 'a', '+15550000001', 'then')",
            (i, str(i)),
        )
    conn.commit()
    conn.close()

    store = Store(path)
    try:
        assert store.schema_version() == len(MIGRATIONS)
        assert [m.id for m in store.all_messages("a", "+15550000001")] == [1, 2, 7]
        assert [i.id for i in store.outbox_batch(10)] == [1, 2, 7]
        store.forget_person("a", "+15550000001")
        new_id, _ = store.insert_message(
            agent="a",
            phone="+15550000002",
            role="user",
            content="x",
            event_id=None,
            number=None,
            created_at=None,
        )
        assert new_id == 8
        assert [i.id for i in store.outbox_batch(10)] == [8]
    finally:
        store.close()


# -- 5. reindex while serving ---------------------------------------------------------------------


def test_reindex_under_traffic_and_a_forget_loses_nothing_and_keeps_nobody(
    api_factory: Callable[..., Api], hooks: Hooks
) -> None:
    api = api_factory()
    for i in range(30):
        api.post_turn(f"{CANARY} said {i}", phone=PHONE)
        api.post_turn(f"other said {i}", phone=OTHER)
    api.index()
    batches = 0

    def traffic() -> None:
        nonlocal batches
        batches += 1
        for i in range(4):
            api.post_turn(f"arrived during reindex {batches}.{i}", phone=OTHER)
        api.index()  # the server's indexer writes the same table meanwhile
        if batches == 2:  # the person's rows are in the table being built by now
            forget(api)

    hooks.on("reindex.batch_written", traffic)
    report = rebuild_index(
        api.services.settings, "fake-hash", fake_factory, progress=False, chunk=10, hooks=hooks
    )
    hooks.clear("reindex.batch_written")
    assert api.services.store.outbox_size() == report.queued_after
    api.index()  # what the reindex found missing at the end

    assert batches >= 4
    index = api.services.indexer.space.index
    messages = db(api, "SELECT id FROM messages")
    assert len(messages) == 30 + 4 * batches
    have = index.get([f"turn:{r[0]}" for r in messages])
    assert len(have) == len(messages), "every stored turn has its vector"
    assert index.count(f"phone = '{PHONE}'") == 0
    assert CANARY not in lance_texts(api.services.settings.lance_path)
    assert api.client.get("/health").json()["index_lag"] == 0
    assert_person_gone(api)


# -- 6. a forget next to an outside reader --------------------------------------------------------


def _canary_rows(api: Api) -> int:
    """The forgotten person's turns still in the database, on a connection of its own."""
    conn = sqlite3.connect(api.services.settings.sqlite_path)
    try:
        found = conn.execute(
            "SELECT COUNT(*) FROM messages WHERE content LIKE ?", (f"{CANARY}%",)
        ).fetchone()
        return int(found[0])
    finally:
        conn.close()


@pytest.mark.sqlite
def test_a_forget_never_stalls_writes_behind_an_outside_reader(api: Api) -> None:
    for i in range(5):
        api.post_turn(f"{CANARY} {i}")
    api.index()
    reader = sqlite3.connect(api.services.settings.sqlite_path)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM messages").fetchone()  # holds a read snapshot

    done = threading.Event()
    threading.Thread(target=lambda: (forget(api), done.set()), daemon=True).start()
    # Wait until the forget has erased the rows and purged the vectors (under the index lock,
    # which a memory write needs too: a slow purge is not what this test is about); it is then
    # trying its checkpoint, held off by the reader, for a second. (A fixed sleep of 0.2 s
    # raced a purge slowed by a busy machine.)
    deadline = time.monotonic() + 10
    while _canary_rows(api):
        assert time.monotonic() < deadline, "the forget never erased the rows"
        time.sleep(0.01)
    with api.services.indexer.lock:
        pass
    assert not done.is_set(), "the forget did not wait for the reader at all"
    # A write held off by a waiting checkpoint waits until the reader lets go, which it does
    # only at the end of this test (or SQLite's busy timeout of seconds): 2 s tells the two
    # apart with room for a loaded machine (0.5 s was once missed by 55 ms under the drills).
    started = time.perf_counter()
    memory = {"content": "Someone else likes tea", "phone": OTHER}
    assert api.client.post(MEMORIES, json=memory, headers=admin()).status_code == 201
    assert time.perf_counter() - started < 2.0, "another person's memory waited"
    assert done.wait(5), "the forget waited for the reader"
    started = time.perf_counter()
    assert api.post_turn("someone else", phone=OTHER).status_code == 201
    assert time.perf_counter() - started < 2.0, "another person's turn waited"
    assert api.services.store.checkpoint_pending
    assert api.client.get("/health").json()["erasure_pending"] is True

    reader.rollback()
    reader.close()
    deadline = time.monotonic() + 10
    while api.services.store.checkpoint_pending:
        assert time.monotonic() < deadline, "the WAL was never checkpointed"
        time.sleep(0.05)
    assert api.client.get("/health").json()["erasure_pending"] is False
    data = api.services.settings.data_dir
    for path in data.glob("memory.db*"):
        assert CANARY.encode() not in path.read_bytes(), path


# -- 7. staff search in flight --------------------------------------------------------------------


def test_a_staff_search_in_flight_during_a_forget_neither_shows_nor_audits_the_person(
    api_factory: Callable[..., Api], hooks: Hooks
) -> None:
    api = api_factory(hooks=hooks)
    api.post_turn(f"my word is {CANARY}")
    api.post_turn(f"I also say {CANARY}", phone=OTHER)
    api.index()
    hooks.once("staff.searched", lambda: forget(api))

    response = api.client.post(
        "/v1/search", json={"query": CANARY, "mode": "keyword"}, headers=admin()
    )

    assert response.status_code == 200, response.text
    phones = {item["phone"] for item in response.json()["items"]}
    assert phones == {OTHER}
    entry = api.client.get("/v1/audit", headers=admin()).json()["items"][0]
    assert PHONE not in json.dumps(entry) and entry["query"] == "[forgotten]"
    assert_person_gone(api)


# -- a forget from the command line next to a running server ----------------------------------


@pytest.mark.slow
def test_a_cli_forget_next_to_a_running_server_is_total_and_the_server_keeps_working(
    tmp_path: Path,
) -> None:
    import os
    import subprocess
    import sys

    import httpx

    from tests.live import ROOT, Server

    server = Server(tmp_path / "data")
    server.start(stderr=tmp_path / "server.log")
    try:
        base = f"{server.base}/v1/agents/{AGENT}/people"
        with httpx.Client(headers=admin(), timeout=10) as http:
            for i in range(30):
                for phone in (PHONE, OTHER):
                    body = {"role": "user", "content": f"{CANARY} {phone} turn {i}"}
                    assert http.post(f"{base}/{phone}/messages", json=body).status_code == 201
            assert http.post(f"{base}/{PHONE}/compact").status_code == 200
            server.wait_indexed()
            assert http.get(f"{base}/{PHONE}/context", params={"query": CANARY}).status_code == 200

            env = {
                **os.environ,
                **data_env(server.data_dir),
                "MEMORY_EMBEDDING_MODEL": "hash:64",
                "MEMORY_LOG_LEVEL": "warning",
            }
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "server",
                    "forget",
                    "--agent",
                    AGENT,
                    "--phone",
                    PHONE,
                    "--json",
                ],
                env=env,
                cwd=ROOT,
                capture_output=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr.decode()
            assert json.loads(done.stdout)["deleted"]["messages"] == 30

            # The server keeps answering, and answers without the person.
            for i in range(5):
                body = {"role": "user", "content": f"after the forget {i}"}
                assert http.post(f"{base}/{OTHER}/messages", json=body).status_code == 201
            server.wait_indexed(30)
            for mode in ("semantic", "keyword", "hybrid"):
                found = http.post(f"{server.base}/v1/search", json={"query": CANARY, "mode": mode})
                assert found.status_code == 200, found.text
                assert {i["phone"] for i in found.json()["items"]} <= {OTHER}, mode
                context = http.get(
                    f"{base}/{OTHER}/context", params={"query": CANARY, "excerpt_mode": mode}
                )
                assert context.status_code == 200, context.text
            export = http.get(f"{base}/{PHONE}/export").json()
            assert export["messages"] == [] and export["memories"] == []
            assert http.get(f"{server.base}/health").json()["status"] == "ok"
    finally:
        server.stop()
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log and "failed" not in log, log[-3000:]
    assert "Deprecation warning" not in log, log[-3000:]  # LanceDB's, once per search
    assert PHONE not in lance_texts(tmp_path / "data" / "lance")
    for path in (tmp_path / "data").glob("memory.db*"):
        assert f"{CANARY} {PHONE}".encode() not in path.read_bytes(), path


def test_a_checkpoint_held_off_at_shutdown_is_owed_again_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    store = Store(path)
    for i in range(5):
        store.insert_message(
            agent=AGENT,
            phone=PHONE,
            role="user",
            content=f"{CANARY} {i}",
            event_id=None,
            number=None,
            created_at=None,
        )
    reader = sqlite3.connect(path)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM messages").fetchone()
    store.forget_person(AGENT, PHONE)
    assert not store.checkpoint(wait_s=0.1) and store.checkpoint_pending
    store.close()

    reopened = Store(path)
    try:
        assert reopened.checkpoint_pending, "the owed checkpoint was forgotten on restart"
        reader.rollback()
        reader.close()
        deadline = time.monotonic() + 10
        while reopened.checkpoint_pending:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        for file in tmp_path.glob("memory.db*"):
            assert CANARY.encode() not in file.read_bytes(), file
    finally:
        reopened.close()


def test_an_edit_while_reindex_embeds_is_not_overwritten_with_the_old_text(
    api_factory: Callable[..., Api], hooks: Hooks
) -> None:
    api = api_factory()
    made = api.client.post(MEMORIES, json={"content": "Drinks old tea"}, headers=admin()).json()

    def edit() -> None:
        response = api.client.patch(
            f"{MEMORIES}/{made['id']}", json={"content": "Drinks new coffee"}, headers=admin()
        )
        assert response.status_code == 200, response.text

    hooks.once("reindex.embedded", edit)
    rebuild_index(api.services.settings, "fake-hash", fake_factory, progress=False, hooks=hooks)

    stored = api.services.indexer.space.index.get([f"fact:{made['id']}"])
    assert stored[f"fact:{made['id']}"][0].text == "Drinks new coffee"
    assert api.services.store.outbox_size() == 0


@pytest.mark.parametrize(
    "body",
    [
        {"query": "nothing matches this", "phone": PHONE, "mode": "keyword"},
        {"query": f"what did {PHONE} say", "mode": "keyword"},
    ],
)
def test_a_staff_search_naming_a_person_forgotten_meanwhile_keeps_neither_phone_nor_query(
    api_factory: Callable[..., Api], hooks: Hooks, body: dict[str, str]
) -> None:
    api = api_factory(hooks=hooks)
    api.post_turn(f"my word is {CANARY}")
    api.index()
    hooks.once("staff.searched", lambda: forget(api))

    response = api.client.post("/v1/search", json=body, headers=admin())

    assert response.status_code == 200, response.text
    entry = api.client.get("/v1/audit", headers=admin()).json()["items"][0]
    assert PHONE not in json.dumps(entry) and entry["query"] == "[forgotten]"


def test_a_staff_search_naming_someone_still_there_is_audited_as_asked(api: Api) -> None:
    api.post_turn(f"my word is {CANARY}")
    api.index()
    body = {"query": f"what did {PHONE} say", "phone": PHONE, "mode": "keyword"}
    assert api.client.post("/v1/search", json=body, headers=admin()).status_code == 200
    entry = api.client.get("/v1/audit", headers=admin()).json()["items"][0]
    assert entry["query"] == body["query"] and entry["filters"]["phone"] == PHONE


def test_the_migration_starts_ids_above_any_turn_still_referenced(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
    for version, script in enumerate(MIGRATIONS[:3], start=1):
        conn.executescript(script)
        conn.execute("INSERT INTO schema_migrations VALUES (?, 'then')", (version,))
    conn.execute(
        "INSERT INTO messages (id, agent, phone, role, content, created_at, stored_at)"
        " VALUES (3, 'a', '+15550000001', 'user', 'kept', 'then', 'then')"
    )
    # Turn 12 was deleted before the upgrade, but the outbox and a summary still name ids.
    conn.execute(
        "INSERT INTO outbox (kind, ref_id, agent, phone, enqueued_at)"
        " VALUES ('turn', '12', 'a', '+15550000001', 'then')"
    )
    conn.execute(
        "INSERT INTO summaries (agent, phone, text, through_id, updated_at)"
        " VALUES ('a', '+15550000009', 'old', 9, 'then')"
    )
    conn.commit()
    conn.close()
    store = Store(path)
    try:
        new_id, _ = store.insert_message(
            agent="a",
            phone="+15550000002",
            role="user",
            content="x",
            event_id=None,
            number=None,
            created_at=None,
        )
        assert new_id == 13
    finally:
        store.close()


def test_a_process_holding_the_index_lock_too_long_gets_503_not_a_hang(api: Api) -> None:
    import fcntl
    import os

    from embeddings.index import WriteLock

    folder = api.services.settings.lance_path
    lock = WriteLock.of(folder)
    lock.timeout_s = 0.3  # this app's lock object only: the folder is the test's own
    fd = os.open(folder / ".write.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a hung CLI process would
    try:
        started = time.perf_counter()
        response = api.client.post(MEMORIES, json={"content": "Likes tea"}, headers=admin())
        assert time.perf_counter() - started < 3
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "index_busy"
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    # The memory was stored before its indexing met the lock: sent again, it is not stored
    # twice, and it is indexed now.
    response = api.client.post(MEMORIES, json={"content": "Likes tea"}, headers=admin())
    assert response.status_code == 200 and response.json()["stored"] is False, response.text
    assert api.services.store.outbox_size() == 0
    assert api.services.indexer.space.index.get([f"fact:{response.json()['id']}"])
