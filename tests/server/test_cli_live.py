"""Every data-changing command of memory-server run next to a live server (issue 12): the
server keeps answering contexts and searches, keeps indexing, and shows the command's effect.
(`forget` next to a live server: tests/server/test_forget_races.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from embeddings.index import VectorIndex, table_names
from server.app import create_app
from server.cli import main
from server.hooks import Hooks
from server.reindex import rebuild_index
from server.serving import ServingLock
from tests.backends import data_env, on_postgres, set_data_env
from tests.conftest import ADMIN_KEY, admin, bearer, make_settings
from tests.fake_llm import GOOD_FACTS, FakeLLM
from tests.fakes import fake_factory
from tests.live import ROOT, Server
from tests.server.test_cli import run_and_list_heavy_imports

pytestmark = pytest.mark.slow

AGENT = "cli-bot"
MODEL = "hash:64"


@dataclass
class Live:
    """The module's server, its fake model and an admin client; `mark` is where this test's
    part of the server's log starts."""

    server: Server
    llm: FakeLLM
    http: httpx.Client
    log: Path
    mark: int = 0
    env: dict[str, str] = field(default_factory=dict)
    said: dict[str, list[str]] = field(default_factory=dict)  # every turn stored, by person

    def cli(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """`python -m server ARGS` on the served folder, as an operator would run it."""
        return subprocess.run(
            [sys.executable, "-m", "server", *args],
            env={**self.env, **env},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def people(self, phone: str) -> str:
        return f"/v1/agents/{AGENT}/people/{phone}"

    def converse(self, phone: str, turns: int, words: str) -> list[str]:
        """Turns user, assistant, user... Returns their contents, oldest first."""
        first = len(self.said.setdefault(phone, []))
        contents = [f"{words} {phone} turn {i}" for i in range(first, first + turns)]
        for i, content in enumerate(contents):
            body = {"role": "user" if i % 2 == 0 else "assistant", "content": content}
            response = self.http.post(f"{self.people(phone)}/messages", json=body)
            assert response.status_code == 201, response.text
            self.said[phone].append(content)
        return contents

    def context(self, phone: str, query: str, **params: Any) -> dict[str, Any]:
        response = self.http.get(f"{self.people(phone)}/context", params={"query": query, **params})
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def search(self, query: str, **body: Any) -> list[dict[str, Any]]:
        response = self.http.post("/v1/search", json={"query": query, **body})
        assert response.status_code == 200, response.text
        items: list[dict[str, Any]] = response.json()["items"]
        return items

    def health(self) -> dict[str, Any]:
        body: dict[str, Any] = self.http.get("/health").json()
        return body

    def still_serves(self, phone: str) -> None:
        """Contexts and searches answer from the person's turns, a new turn gets indexed, and
        the server reports nothing wrong."""
        said = self.said[phone]
        history = [t["content"] for t in self.context(phone, said[-1])["history"]]
        assert history and history == said[-len(history) :], history
        for mode in ("semantic", "keyword", "hybrid"):
            found = self.search(said[-2], mode=mode, phone=phone)
            assert said[-2] in [i["text"] for i in found], (mode, found)
        [new] = self.converse(phone, 1, "afterwards")
        self.server.wait_indexed(30)
        for mode in ("semantic", "keyword"):
            assert new in [i["text"] for i in self.search(new, mode=mode, phone=phone)], mode
        assert self.health()["status"] == "ok", self.health()

    def new_log(self) -> str:
        return self.log.read_text(errors="replace")[self.mark :]


@pytest.fixture(scope="module")
def module_live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    folder = tmp_path_factory.mktemp("live")
    llm_settings = {
        "MEMORY_LLM_BASE_URL": "",  # set below, once the fake model listens
        "MEMORY_LLM_API_KEY": "sk-fake",
        "MEMORY_LLM_RETRIES": "0",
        # The server compacts nobody on its own: what compacts here is the command.
        "MEMORY_COMPACT_TRIGGER": "1000",
    }
    with FakeLLM() as llm:
        llm_settings["MEMORY_LLM_BASE_URL"] = llm.base_url
        server = Server(folder / "data", **llm_settings)
        log = folder / "server.log"
        server.start(stderr=log)
        env = {
            **os.environ,
            **data_env(server.data_dir),
            "MEMORY_ADMIN_KEY": ADMIN_KEY,
            "MEMORY_EMBEDDING_MODEL": MODEL,
            "MEMORY_LOG_LEVEL": "warning",
            "HF_HUB_OFFLINE": "1",
            **llm_settings,
        }
        try:
            with httpx.Client(base_url=server.base, headers=admin(), timeout=30) as http:
                yield Live(server, llm, http, log, env=env)
        finally:
            server.stop()


@pytest.fixture
def live(module_live: Live) -> Iterator[Live]:
    """The module's server; after the test, its log since the test began shows no failure."""
    module_live.mark = len(module_live.log.read_text(errors="replace"))
    yield module_live
    assert module_live.server.process is not None
    assert module_live.server.process.poll() is None, "the server exited"
    said = module_live.new_log()
    assert "Traceback" not in said and "indexer batch failed" not in said, said[-4000:]


class Traffic:
    """Turns, contexts and searches sent to the server while a command runs; any answer
    that is not a success is kept in `failures`."""

    def __init__(self, live: Live, phone: str, words: str) -> None:
        self._live = live
        self._phone = phone
        self._words = words
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self.stored: list[str] = []
        self.failures: list[str] = []
        self.searches = 0

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        people = self._live.people(self._phone)
        with httpx.Client(base_url=self._live.server.base, headers=admin(), timeout=30) as http:
            n = 0
            while not self._stop.is_set():
                content = f"{self._words} during {n}"
                answers = [
                    http.post(f"{people}/messages", json={"role": "user", "content": content}),
                    http.get(f"{people}/context", params={"query": self._words}),
                    http.post("/v1/search", json={"query": self._words, "mode": "hybrid"}),
                ]
                self.searches += 1
                for answer in answers:
                    if answer.status_code >= 300:
                        self.failures.append(f"{answer.request.url}: {answer.text}")
                if answers[0].status_code == 201:
                    self.stored.append(content)
                n += 1


# -- compact -------------------------------------------------------------------------------------


def test_compact_while_serving_archives_and_summarises_what_the_server_then_shows(
    live: Live,
) -> None:
    phones = ("+15552000001", "+15552000002")
    said = {phone: live.converse(phone, 30, "compact-canary") for phone in phones}
    live.server.wait_indexed(30)

    done = live.cli("compact", "--agent", AGENT, "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    totals = json.loads(done.stdout)
    assert totals["archived"] == 20 and totals["failed"] == 0, totals  # 30 - compact_keep each

    for phone in phones:
        context = live.context(phone, str(GOOD_FACTS[0]["content"]))
        # The newest compact_keep turns stay in the history; the rest are archived.
        assert [t["content"] for t in context["history"]] == said[phone][10:]
        assert context["summary"] == live.llm.summary
        assert GOOD_FACTS[0]["content"] in [f["content"] for f in context["facts"]]
        listed = live.http.get(f"{live.people(phone)}/messages", params={"limit": 100}).json()
        archived = {m["content"] for m in listed["items"] if m["archived"]}
        assert archived == set(said[phone][:10])
    live.server.wait_indexed(30)
    # The index has the archived turns as archived: they come back as excerpts.
    oldest = said[phones[0]][0]
    excerpts = live.context(phones[0], oldest, excerpt_mode="keyword")["excerpts"]
    assert oldest in [e["content"] for e in excerpts]
    facts = live.search("night shifts", kinds=["facts"], phone=phones[0], mode="keyword")
    assert GOOD_FACTS[0]["content"] in [i["text"] for i in facts]
    live.still_serves(phones[1])


def test_compact_and_forget_with_another_model_configured_leave_the_server_on_its_own(
    live: Live,
) -> None:
    """An operator's shell with another MEMORY_EMBEDDING_MODEL: the commands use the model
    the folder is served with, so the server is not moved to another model under traffic."""
    phone = "+15552000024"
    said = live.converse(phone, 30, "other-model-canary")
    live.server.wait_indexed(30)
    done = live.cli(
        "compact",
        "--agent",
        AGENT,
        "--phone",
        phone,
        "--json",
        "--quiet",
        MEMORY_EMBEDDING_MODEL="hash:32",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["archived"] == 10  # 30 turns, compact_keep 20
    gone = live.cli(
        "forget",
        "--agent",
        AGENT,
        "--phone",
        "+15552000025",
        "--json",
        MEMORY_EMBEDDING_MODEL="hash:32",
    )
    assert gone.returncode == 0, gone.stderr
    time.sleep(1.5)  # the server's indexer checks the folder's model about every second
    health = live.http.get("/health").json()
    assert health["model"] == MODEL and health["upgrade"] is None, health
    # Nor was a table made for the other model (the start of an upgrade nobody runs).
    assert [t for t in table_names(live.server.data_dir / "lance") if t.endswith("_32")] == []
    live.server.wait_indexed(30)
    oldest = said[0]
    excerpts = live.context(phone, oldest, excerpt_mode="keyword")["excerpts"]
    assert oldest in [e["content"] for e in excerpts]  # archived by the command, found by it
    live.still_serves(phone)


# -- reindex -------------------------------------------------------------------------------------


def test_reindex_of_the_served_model_while_serving_loses_nothing(live: Live) -> None:
    """The reindex writes the table the server reads and writes; with a row left whose source
    is gone, it also purges, which deletes files the server's handles were reading."""
    phone = "+15552000003"
    live.converse(phone, 40, "reindex-canary")
    live.server.wait_indexed(30)
    served = VectorIndex(live.server.data_dir / "lance", MODEL, 64)
    [(row, vector)] = served.get(["turn:1"]).values()
    orphan = replace(row, id="turn:999999", ref_id="999999", text="leftoverorphan", content="")
    served.upsert([orphan], vector[None, :])

    with Traffic(live, "+15552000013", "reindex-traffic") as traffic:
        done = live.cli("reindex", "--quiet", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["model"] == MODEL and report["orphans_removed"] == 1, report
    assert not traffic.failures, traffic.failures[:3]
    assert traffic.searches >= 1 and traffic.stored

    live.server.wait_indexed(30)
    indexed = {i["text"] for i in live.search("reindex-traffic during", mode="keyword", limit=100)}
    assert set(traffic.stored) <= indexed, "every turn stored during the reindex is searchable"
    assert not live.search("leftoverorphan", mode="keyword")
    live.still_serves(phone)
    assert live.health()["model"] == MODEL


# -- backup and restore --------------------------------------------------------------------------


def test_backup_while_serving_restores_what_the_server_held(
    live: Live,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    phone = "+15552000004"
    said = live.converse(phone, 12, "backup-canary")
    fact = {"content": "Keeps bees on the roof", "phone": phone}
    assert live.http.post(f"/v1/agents/{AGENT}/memories", json=fact).status_code == 201
    live.server.wait_indexed(30)

    with Traffic(live, "+15552000005", "backup-traffic") as traffic:
        done = live.cli("backup", str(tmp_path / "bk"), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["messages"] >= len(said)
    assert not traffic.failures, traffic.failures[:3]
    live.still_serves(phone)

    # The served folder is not restored under the server, which is left as it was.
    set_data_env(monkeypatch, live.server.data_dir)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", MODEL)
    assert main(["restore", str(tmp_path / "bk")]) == 2
    assert "a server is serving" in capsys.readouterr().err
    live.still_serves(phone)
    if on_postgres():  # nor is its database, from a folder of another machine
        monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path / "elsewhere"))
        assert main(["restore", str(tmp_path / "bk")]) == 2
        assert "the database is in use" in capsys.readouterr().err
        live.still_serves(phone)

    # Restored into another folder, the backup serves the person as the server did.
    restored = tmp_path / "restored"
    set_data_env(monkeypatch, restored)
    assert main(["restore", str(tmp_path / "bk")]) == 0
    settings = make_settings(restored, embedding_model=MODEL, indexer_interval_s=0.05)
    with TestClient(create_app(settings)) as copy:
        deadline = time.monotonic() + 30
        while copy.get("/health").json()["index_lag"]:
            assert time.monotonic() < deadline, "the restored folder was not indexed"
            time.sleep(0.05)
        people = f"/v1/agents/{AGENT}/people/{phone}"
        context = copy.get(f"{people}/context", params={"query": fact["content"]}, headers=admin())
        assert context.status_code == 200, context.text
        assert [t["content"] for t in context.json()["history"]] == said
        assert [f["content"] for f in context.json()["facts"]] == [fact["content"]]
        body = {"query": said[3], "mode": "keyword", "phone": phone}
        found = copy.post("/v1/search", json=body, headers=admin())
        assert found.status_code == 200 and said[3] in [i["text"] for i in found.json()["items"]]


def test_reindex_into_another_model_while_serving_is_refused_and_changes_nothing(
    live: Live,
) -> None:
    """Until the server switches to the new table it writes every change to the one it
    serves only, so an edit made after its chunk was rebuilt would stay stale in the new
    table: the model upgrade (restarting with the model configured) is the way, and says so."""
    phone = "+15552000007"
    live.converse(phone, 6, "switch-canary")
    live.server.wait_indexed(30)
    tables = sorted(os.listdir(live.server.data_dir / "lance"))

    done = live.cli("reindex", "--model", "hash:32", "--json")
    assert done.returncode == 2, done.stdout
    assert "a server is serving" in done.stderr, done.stderr
    assert "MEMORY_EMBEDDING_MODEL=hash:32" in done.stderr, done.stderr
    assert sorted(os.listdir(live.server.data_dir / "lance")) == tables
    assert live.health()["model"] == MODEL
    live.still_serves(phone)


def test_reindex_into_a_model_the_server_does_not_serve_is_refused_before_it_loads(
    live: Live,
) -> None:
    """Beside a running server, `reindex --model all-MiniLM-L6-v2` loaded the model (two
    copies) and was refused 15-28 s later: the folder's lock is now taken, or refused, first."""
    phone = "+15552000009"
    live.converse(phone, 4, "minilm-canary")
    live.server.wait_indexed(30)
    started = time.perf_counter()
    done = live.cli("reindex", "--model", "all-MiniLM-L6-v2", "--json")
    seconds = time.perf_counter() - started
    assert done.returncode == 2, done.stdout
    assert "a server is serving" in done.stderr, done.stderr
    assert "MEMORY_EMBEDDING_MODEL=all-MiniLM-L6-v2" in done.stderr, done.stderr
    assert done.stdout == ""
    assert seconds < 5, f"refused after {seconds:.1f} s"  # 1-2 s here; 15-28 s with the model
    out, loaded, code = run_and_list_heavy_imports(
        live.server.data_dir, ["reindex", "--model", "all-MiniLM-L6-v2"]
    )
    assert (loaded, code) == ([], 2), out
    assert live.health()["model"] == MODEL
    live.still_serves(phone)


# -- keys ----------------------------------------------------------------------------------------


def test_keys_created_and_revoked_while_serving_work_and_stop_at_once(live: Live) -> None:
    phone = "+15552000006"
    live.converse(phone, 4, "keys-canary")
    made = live.cli("keys", "create", "--scope", f"agent:{AGENT}", "--json")
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)
    agent_key = bearer(key["key"])
    people = live.people(phone)

    turn = {"role": "user", "content": "keys-canary from the new key"}
    assert live.http.post(f"{people}/messages", json=turn, headers=agent_key).status_code == 201
    live.said[phone].append(turn["content"])
    answer = live.http.get(f"{people}/context", params={"query": "keys"}, headers=agent_key)
    assert answer.status_code == 200, answer.text

    revoked = live.cli("keys", "revoke", key["id"], "--json")
    assert revoked.returncode == 0, revoked.stderr
    assert json.loads(revoked.stdout)["revoked"] is True
    answer = live.http.get(f"{people}/context", params={"query": "keys"}, headers=agent_key)
    assert answer.status_code == 401, answer.text
    refused = live.http.post(f"{people}/messages", json=turn, headers=agent_key)
    assert refused.status_code == 401, refused.text
    assert json.loads(live.cli("keys", "list", "--json").stdout)[-1]["revoked_at"]
    live.still_serves(phone)


def test_reindex_into_another_model_runs_once_stopped_and_holds_off_a_server_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings(tmp_path, embedding_model="fake-hash")
    with TestClient(create_app(settings, encoder_factory=fake_factory)) as client:
        body = {"role": "user", "content": "a turn before the switch"}
        stored = client.post(
            f"/v1/agents/{AGENT}/people/+15552000008/messages", json=body, headers=admin()
        )
        assert stored.status_code == 201, stored.text
    # The server stopped: the reindex may build another model's table.
    set_data_env(monkeypatch, tmp_path)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    argv = ["reindex", "--model", "fake-other-32d", "--quiet"]
    assert main(argv, encoder_factory=fake_factory) == 0
    assert "memory_v4_fake_other_32d_32" in capsys.readouterr().out

    # A server starting during a reindex into another table waits for it to end.
    events: list[str] = []
    starting = ServingLock(tmp_path)

    def server_starts() -> None:
        starting.acquire()
        events.append("server started")

    def while_reindexing() -> None:
        threading.Thread(target=server_starts).start()
        time.sleep(0.3)  # time enough to start, were the folder free
        events.append("reindex still running")

    hooks = Hooks()
    hooks.once("reindex.batch_written", while_reindexing)
    rebuild_index(settings, "fake-hash", fake_factory, progress=False, hooks=hooks)
    deadline = time.monotonic() + 10
    while len(events) < 2:
        assert time.monotonic() < deadline, "the server never started"
        time.sleep(0.01)
    starting.release()
    assert events == ["reindex still running", "server started"]
