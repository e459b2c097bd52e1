"""The invariants that must hold under any interleaving, driven by hypothesis' stateful
testing through the HTTP API: random sequences of turns, moves, forgets, compactions,
memories that supersede, approvals, rejections, deletions, edits, staff searches and
restarts, with the whole stored state checked after every step:

- every acknowledged turn and memory is stored once, under the number the person has now,
  and (the outbox drained) indexed under it and nothing else: findable by keyword and by
  meaning there;
- nothing of a forgotten person is readable in the database, in any file of the vector store
  (deleted rows and older versions included), in an export or in the audit log; no file of
  the vector store holds a person's words under a number they moved away from;
- every chain of memories has exactly one current memory unless none of it is approved
  (tests/invariants.py);
- no move or forget is left journaled.

CI runs a bounded number of steps on each engine (at least 200); `scripts/drills stateful`
runs it longer (MEMORY_DRILL_EXAMPLES, MEMORY_DRILL_STEPS). CI: 8 sequences of 25 steps, 200 steps
per engine (each sequence is checked 26 times: before its first step and after each)."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    multiple,
    precondition,
    rule,
)

from server.app import create_app
from server.hooks import Hooks
from server.retention import Retention
from tests.backends import query
from tests.conftest import ADMIN_KEY, make_settings
from tests.fakes import fake_factory
from tests.invariants import assert_chains_sound

AGENT = "drill"
PHONES = ("+34600990001", "+34600990002", "+34600990003", "+15550001234")
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
TOKEN = re.compile(r"\bzq[a-z]+x\b")  # the unique word of every turn and memory
MOVE_STEPS = ["move.committed", "move.rewritten", "move.left"]
EXAMPLES = int(os.environ.get("MEMORY_DRILL_EXAMPLES", "8"))
STEPS = int(os.environ.get("MEMORY_DRILL_STEPS", "25"))


def _token(n: int) -> str:
    letters = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        letters = chr(97 + r) + letters
    return f"zq{letters}x"


class _Clock:
    """A clock that moves on a minute at every step (times must differ for validity)."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def _person(phone: str) -> str:
    return f"/v1/agents/{AGENT}/people/{quote(phone, safe='')}"


class Drill(RuleBasedStateMachine):
    memories = Bundle("memories")

    def __init__(self) -> None:
        super().__init__()
        self._folder = Path(tempfile.mkdtemp(prefix="drill-"))
        self._clock = _Clock()
        self._client: TestClient | None = None
        self._hooks = Hooks()
        self._counter = itertools.count()
        self.turns: dict[str, str] = {}  # token -> the number it is stored under now
        self.facts: dict[str, tuple[str, str]] = {}  # memory id -> (token, number)
        self.erased: set[str] = set()  # tokens of forgotten people
        self.touched: list[str] = []  # tokens this step changed, checked for findability
        self._open()
        settings_ = {"review": True, "compact_trigger": 6, "compact_keep": 2, "retention_days": 30}
        self._ok(self.http.put(f"/v1/agents/{AGENT}/settings", json=settings_, headers=ADMIN))
        made = self.http.post("/v1/keys", json={"scope": f"agent:{AGENT}"}, headers=ADMIN)
        self.agent_key = {"Authorization": f"Bearer {made.json()['key']}"}
        made = self.http.post("/v1/keys", json={"scope": "staff"}, headers=ADMIN)
        self.staff_key = {"Authorization": f"Bearer {made.json()['key']}"}

    # -- the server ------------------------------------------------------------------------

    def _open(self) -> None:
        app = create_app(
            make_settings(self._folder / "data"),
            clock=self._clock,
            encoder_factory=fake_factory,
            run_workers=False,
            hooks=self._hooks,
        )
        self._client = TestClient(app)
        self._client.__enter__()

    def _close(self) -> None:
        if self._client is not None:
            self._client.__exit__(None, None, None)
            self._client = None

    @property
    def http(self) -> TestClient:
        assert self._client is not None
        return self._client

    @property
    def services(self) -> Any:
        return self.http.app.state.services  # type: ignore[attr-defined]

    def teardown(self) -> None:
        self._close()
        shutil.rmtree(self._folder, ignore_errors=True)

    def _ok(self, response: Any, *statuses: int) -> Any:
        allowed = statuses or (200, 201)
        assert response.status_code in allowed, (response.status_code, response.text)
        assert response.status_code < 500
        return response

    def _new_token(self) -> str:
        return _token(next(self._counter))

    def _of(self, phone: str) -> set[str]:
        return {t for t, p in self.turns.items() if p == phone} | {
            t for t, p in self.facts.values() if p == phone
        }

    # -- rules -----------------------------------------------------------------------------

    @rule(phone=st.sampled_from(PHONES), roles=st.lists(st.booleans(), min_size=1, max_size=4))
    def store_turns(self, phone: str, roles: list[bool]) -> None:
        for user in roles:
            self._store_turn(phone, "user" if user else "assistant")

    @rule(phone=st.sampled_from(PHONES))
    def store_turn(self, phone: str) -> None:
        self._store_turn(phone, "user")

    def _store_turn(self, phone: str, role: str) -> None:
        token = self._new_token()
        body = {"role": role, "content": f"a note on {token} and the weather", "event_id": token}
        self._ok(self.http.post(_person(phone) + "/messages", json=body, headers=ADMIN), 201)
        # The same event again (a retry) stores nothing new.
        again = self.http.post(_person(phone) + "/messages", json=body, headers=ADMIN)
        assert again.status_code == 200 and again.json()["stored"] is False, again.text
        self.turns[token] = phone
        self.touched.append(token)

    @rule(old=st.sampled_from(PHONES), new=st.sampled_from(PHONES))
    def move(self, old: str, new: str) -> None:
        self._move(old, new)

    @precondition(lambda self: bool(self._holding()))
    @rule(
        data=st.data(),
        shape=st.sampled_from(["back", "onto the old", "away from the new"]),
        point=st.sampled_from(MOVE_STEPS),
    )
    def move_during_a_move(self, data: st.DataObject, shape: str, point: str) -> None:
        """A second move that touches one of the first's numbers runs whole while the first
        is at one of its steps (its database change committed, its vectors rewritten, its
        old number left): the interleavings of two moves sent at once, driven on purpose.
        A to B with B to A, with C to A (a recycled number), or with B to C."""
        a = data.draw(st.sampled_from(self._holding()))
        b, c = data.draw(st.permutations([p for p in PHONES if p != a]))[:2]
        second = {"back": (b, a), "onto the old": (c, a), "away from the new": (b, c)}[shape]
        self._move(a, b, during=(point, lambda: self._move(*second)))

    @precondition(lambda self: bool(self._holding()))
    @rule(
        data=st.data(),
        forget_the_new=st.booleans(),
        point=st.sampled_from(MOVE_STEPS),
    )
    def forget_during_a_move(self, data: st.DataObject, forget_the_new: bool, point: str) -> None:
        """A forget of one of a move's two numbers while the move is at one of its steps."""
        old = data.draw(st.sampled_from(self._holding()))
        new = data.draw(st.sampled_from([p for p in PHONES if p != old]))
        forgotten = new if forget_the_new else old
        self._move(old, new, during=(point, lambda: self.forget(forgotten)))

    def _holding(self) -> list[str]:
        """The numbers that hold a turn or a memory."""
        return [p for p in PHONES if self._of(p)]

    def _move(
        self, old: str, new: str, during: tuple[str, Callable[[], None]] | None = None
    ) -> None:
        """Move old to new; with during, run another step when the move reaches a point
        (the move's database change is in the model from then on, as it is committed)."""
        holds = bool(self._of(old)) or self._has_summary(old)
        applied = False
        if during is not None:
            point, other = during

            def meanwhile() -> None:
                nonlocal applied
                self._moved(old, new)
                applied = True
                other()

            self._hooks.once(point, meanwhile)
        try:
            response = self.http.post(_person(old) + "/move", json={"to": new}, headers=ADMIN)
        finally:
            if during is not None:
                self._hooks.clear(during[0])
        if old == new:
            self._ok(response, 409, 422)
            return
        self._ok(response, 200 if holds else 404)
        if response.status_code == 200 and not applied:
            self._moved(old, new)

    def _moved(self, old: str, new: str) -> None:
        for token, phone in list(self.turns.items()):
            if phone == old:
                self.turns[token] = new
        for memory_id, (token, phone) in list(self.facts.items()):
            if phone == old:
                self.facts[memory_id] = (token, new)
        self.touched.extend(self._of(new))

    @rule(phone=st.sampled_from(PHONES))
    def forget(self, phone: str) -> None:
        self._ok(self.http.delete(_person(phone), headers=ADMIN), 200, 404)
        self.forget_in_model(phone)

    def forget_in_model(self, phone: str) -> None:
        gone = self._of(phone)
        self.erased |= gone
        self.turns = {t: p for t, p in self.turns.items() if p != phone}
        self.facts = {i: f for i, f in self.facts.items() if f[1] != phone}

    @rule(phone=st.sampled_from(PHONES))
    def compact(self, phone: str) -> None:
        self._ok(self.http.post(_person(phone) + "/compact", headers=ADMIN), 200, 404, 409)

    @rule(target=memories, phone=st.sampled_from(PHONES), by_admin=st.booleans())
    def add_memory(self, phone: str, by_admin: bool) -> Any:
        token = self._new_token()
        body = {"content": f"{token} is something to remember", "phone": phone}
        headers = ADMIN if by_admin else self.agent_key
        made = self._ok(self.http.post(f"/v1/agents/{AGENT}/memories", json=body, headers=headers))
        memory_id = made.json()["id"]
        self.facts[memory_id] = (token, phone)
        self.touched.append(token)
        return memory_id

    @rule(target=memories, old=memories, by_admin=st.booleans())
    def supersede(self, old: str, by_admin: bool) -> Any:
        if old not in self.facts:
            return multiple()
        phone = self.facts[old][1]
        token = self._new_token()
        body = {"content": f"{token} replaces it", "phone": phone, "supersedes": old}
        headers = ADMIN if by_admin else self.agent_key
        response = self.http.post(f"/v1/agents/{AGENT}/memories", json=body, headers=headers)
        self._ok(response, 200, 201, 404, 409, 422)
        if response.status_code != 201:
            return multiple()
        memory_id = response.json()["id"]
        self.facts[memory_id] = (token, phone)
        self.touched.append(token)
        return memory_id

    @rule(same=memories, other=memories)
    def repeat_memory(self, same: str, other: str) -> None:
        """The identical-memory rule, with a supersedes that may point anywhere (how the
        cycle of issue 39 was made)."""
        if same not in self.facts:
            return
        stored = self.http.get(f"/v1/agents/{AGENT}/memories/{same}", headers=ADMIN)
        if stored.status_code != 200:
            return
        body = {
            "content": stored.json()["content"],
            "phone": self.facts[same][1],
            "supersedes": other,
        }
        response = self.http.post(f"/v1/agents/{AGENT}/memories", json=body, headers=ADMIN)
        self._ok(response, 200, 201, 404, 409, 422)
        if response.status_code == 201:  # stored after all (the first was not current)
            token = self.facts[same][0]
            self.facts[response.json()["id"]] = (token, self.facts[same][1])

    @rule(memory=memories, approve=st.booleans())
    def review(self, memory: str, approve: bool) -> None:
        action = "approve" if approve else "reject"
        response = self.http.post(f"/v1/agents/{AGENT}/memories/{memory}/{action}", headers=ADMIN)
        self._ok(response, 200, 404, 409)

    @rule(memory=consumes(memories))
    def delete_memory(self, memory: str) -> None:
        response = self.http.delete(f"/v1/agents/{AGENT}/memories/{memory}", headers=ADMIN)
        self._ok(response, 200, 404, 409)
        if response.status_code == 200 and response.json()["deleted"]:
            self.facts.pop(memory, None)

    @rule(memory=memories)
    def edit_memory(self, memory: str) -> None:
        if memory not in self.facts:
            return
        token = self.facts[memory][0]
        body = {"content": f"{token} was edited at {next(self._counter)}"}
        response = self.http.patch(
            f"/v1/agents/{AGENT}/memories/{memory}", json=body, headers=ADMIN
        )
        self._ok(response, 200, 404, 409)
        self.touched.append(token)

    @precondition(lambda self: bool(self.turns or self.facts))
    @rule(data=st.data())
    def staff_search(self, data: st.DataObject) -> None:
        tokens = sorted({*self.turns, *(t for t, _ in self.facts.values())})
        token = data.draw(st.sampled_from(tokens))
        body = {"query": f"who wrote {token}", "mode": "keyword"}
        self._ok(self.http.post("/v1/search", json=body, headers=self.staff_key), 200)

    @rule(days=st.sampled_from([1, 20, 45]))
    def time_passes_and_retention_sweeps(self, days: int) -> None:
        """The agent keeps 30 days: people quiet for longer are forgotten, older archived
        turns of the others deleted (their words may stay in the summary)."""
        self._clock.now += timedelta(days=days)
        Retention.of(self.services, clock=self._clock).sweep()
        stored = _tokens(
            query(self.services.settings, "SELECT phone, content FROM messages")
            + query(self.services.settings, "SELECT phone, content FROM memories")
        )
        for phone in PHONES:
            mine = self._of(phone)
            if mine and not any(p == phone for p in stored.values()):
                self.forget_in_model(phone)  # forgotten as quiet
        self.turns = {t: p for t, p in self.turns.items() if t in stored}
        self.facts = {i: f for i, f in self.facts.items() if f[0] in stored}

    @rule()
    def restart(self) -> None:
        self._close()
        self._open()

    # -- after every step ------------------------------------------------------------------

    @invariant()
    def the_store_holds_what_was_acknowledged(self) -> None:
        if self._client is None:
            return
        self._clock.now += timedelta(minutes=1)
        self.services.indexer.drain()
        settings_ = self.services.settings
        assert query(settings_, "SELECT COUNT(*) FROM moves")[0][0] == 0
        assert query(settings_, "SELECT COUNT(*) FROM erasures")[0][0] == 0
        assert query(settings_, "SELECT COUNT(*) FROM outbox")[0][0] == 0
        health = self.http.get("/health").json()
        assert health["index_lag"] == 0, health
        turns = query(settings_, "SELECT id, phone, content FROM messages")
        found: dict[str, list[str]] = {}
        for row in turns:
            for token in TOKEN.findall(str(row[2])):
                found.setdefault(token, []).append(str(row[1]))
        assert {t: found.get(t) for t in self.turns} == {t: [p] for t, p in self.turns.items()}
        assert len(turns) == len(self.turns), "a turn stored twice, or one that should be gone"
        memories = {
            str(r[0]): (str(r[1]), str(r[2]))
            for r in query(settings_, "SELECT id, phone, content FROM memories")
        }
        assert set(memories) == set(self.facts)
        for memory_id, (token, phone) in self.facts.items():
            assert memories[memory_id][0] == phone and token in memories[memory_id][1]
        # The index holds exactly the database's items, each under its number now.
        index = self.services.indexer.space.index
        rows = index.get(index.all_ids())
        indexed = {i: row.phone for i, (row, _) in rows.items() if row.kind != "summary"}
        stored = {f"turn:{r[0]}": str(r[1]) for r in turns}
        stored |= {f"fact:{i}": m[0] for i, m in memories.items()}
        assert indexed == stored
        summaries = {str(r[0]) for r in query(settings_, "SELECT phone FROM summaries")}
        assert {row.phone for row, _ in rows.values() if row.kind == "summary"} == summaries
        assert_chains_sound(self.services.store)

    @invariant()
    def what_changed_is_found_by_keyword_and_by_meaning(self) -> None:
        if self._client is None:
            return
        touched, self.touched = self.touched[-4:], []
        for token in touched:
            phone = self.turns.get(token) or next(
                (p for t, p in self.facts.values() if t == token), None
            )
            if phone is None:
                continue  # forgotten or deleted since
            for mode in ("keyword", "semantic"):
                body = {"query": token, "mode": mode, "limit": 50, "threshold": -1.0}
                if mode == "semantic":
                    body["query"] = self._text_of(token)
                items = self._ok(
                    self.http.post("/v1/search", json=body, headers=self.staff_key), 200
                ).json()["items"]
                phones = {i["phone"] for i in items if token in i["text"]}
                assert phone in phones, (mode, token, phone, items[:3])
                assert phones <= {phone}, (mode, token, phone, phones)

    @invariant()
    def nothing_of_a_forgotten_or_moved_away_number_is_readable(self) -> None:
        if self._client is None:
            return
        settings_ = self.services.settings
        dump = json.dumps(
            [
                [list(r) for r in query(settings_, f"SELECT * FROM {table}")]
                for table in (
                    "messages",
                    "memories",
                    "memory_history",
                    "summaries",
                    "audit",
                    "outbox",
                    "people",
                )
            ]
        )
        leaked = self.erased & set(TOKEN.findall(dump))
        assert not leaked, f"forgotten words in the database: {sorted(leaked)}"
        for phone in PHONES:
            exported = self.http.get(_person(phone) + "/export", headers=ADMIN)
            leaked = self.erased & set(TOKEN.findall(exported.text))
            assert not leaked, f"forgotten words in {phone}'s export: {sorted(leaked)}"
        owners = {**self.turns, **{t: p for t, p in self.facts.values()}}
        rows, everything = _lance_files(settings_.data_dir / "lance")
        leaked = self.erased & set(TOKEN.findall(everything))
        assert not leaked, f"forgotten words in a file of the vector store: {sorted(leaked)}"
        for phone, text in rows:
            for token in TOKEN.findall(text):
                owner = owners.get(token)
                assert owner in (None, phone), f"{token} of {owner} under {phone} in a file"

    def _has_summary(self, phone: str) -> bool:
        found = query(
            self.services.settings,
            "SELECT 1 FROM summaries WHERE agent = ? AND phone = ?",
            AGENT,
            phone,
        )
        return bool(found)

    def _text_of(self, token: str) -> str:
        for table in ("messages", "memories"):
            sql = f"SELECT content FROM {table} WHERE content LIKE ?"
            rows = query(self.services.settings, sql, f"%{token}%")
            if rows:
                return str(rows[0][0])
        raise AssertionError(f"{token} is not stored")


def _tokens(rows: list[Any]) -> dict[str, str]:
    """The unique words in (phone, text) rows, with the phone of the row each is in."""
    return {token: str(row[0]) for row in rows for token in TOKEN.findall(str(row[1]))}


def _lance_files(folder: Path) -> tuple[list[tuple[str, str]], str]:
    """(phone, text and content) of every row of every data file of the vector store,
    deleted rows and older versions' files included, and everything every file holds,
    index files too (lance compresses strings: each file is read back)."""
    from lance.file import LanceFileReader

    rows = []
    everything = []
    for path in folder.rglob("*.lance"):
        if not path.is_file():
            continue
        table = LanceFileReader(str(path)).read_all().to_table()
        everything.extend(str(table.column(c).to_pylist()) for c in table.column_names)
        if "phone" not in table.column_names:
            continue  # an index's file
        names = [c for c in ("text", "content") if c in table.column_names]
        texts = [table.column(c).to_pylist() for c in names]
        for i, phone in enumerate(table.column("phone").to_pylist()):
            rows.append((str(phone), " ".join(str(column[i]) for column in texts)))
    return rows, "\n".join(everything)


Drill.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    derandomize=os.environ.get("MEMORY_DRILL_RANDOM") != "1",
    # Shrinking a failure of this machine takes many minutes: by hand only. A failure prints
    # its steps either way.
    phases=[Phase.explicit, Phase.reuse, Phase.generate]
    + ([Phase.shrink] if os.environ.get("MEMORY_DRILL_SHRINK") == "1" else []),
)
TestDrill = pytest.mark.slow(Drill.TestCase)
