"""scripts/example_agent.py as a user runs it: a subprocess reading turns on stdin, against a
live memory server and the fake OpenAI-compatible model of tests/fake_llm.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.client import MemoryClient
from tests.conftest import ADMIN_KEY
from tests.fake_llm import FakeLLM
from tests.live import ROOT, Server

pytestmark = pytest.mark.engine_agnostic  # run by the SQLite pass only (conftest)

AGENT = "example-bot"
PHONE = "+15550200001"
SCRIPT = ROOT / "scripts" / "example_agent.py"
REPLY = "Maya works night shifts at the hospital."  # the fake model's "prose" answer


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("example")
    # The server calls no model itself: every request the fake model sees is the agent's.
    server = Server(folder / "data", MEMORY_LLM_BASE_URL="", MEMORY_LLM_API_KEY="")
    server.start(stderr=folder / "server.log")
    try:
        yield server
    finally:
        server.stop()


def run_agent(lines: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT)],
        input="".join(line + "\n" for line in lines),
        env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def turn(text: str, event_id: str) -> str:
    return json.dumps({"agent": AGENT, "phone": PHONE, "text": text, "event_id": event_id})


def test_the_agent_stores_both_turns_and_sends_the_model_notes_and_history(live: Server) -> None:
    with MemoryClient(live.base, ADMIN_KEY) as admin:
        key = admin.create_key(f"agent:{AGENT}").key
        admin.put_settings(AGENT, threshold=-1.0)  # every fact reaches the notes
        admin.add_memory(AGENT, "Maya has a dog called Biscuit", PHONE)

    with FakeLLM() as llm:
        llm.mode = "prose"
        done = run_agent(
            [
                turn("Hi, I am Maya", "wa-1"),
                turn("Hi, I am Maya", "wa-1"),  # the webhook's retry
                "not json",
                turn("Do you remember my dog?", "wa-2"),
            ],
            MEMORY_URL=live.base,
            MEMORY_API_KEY=key,
            MEMORY_LLM_BASE_URL=llm.base_url,
            MEMORY_LLM_API_KEY="test-key",
            MEMORY_LLM_MODEL="fake-chat",
        )
    assert done.returncode == 1, done.stderr  # the line that is not JSON failed, alone
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(o.get("event_id"), o.get("reply"), o.get("duplicate")) for o in out] == [
        ("wa-1", REPLY, False),
        ("wa-1", None, True),
        (None, None, None),
        ("wa-2", REPLY, False),
    ]
    assert "not a turn" in out[2]["error"]

    with MemoryClient(live.base, key) as memory:
        stored = memory.export(AGENT, PHONE).messages
    assert [(m.role, m.content, m.event_id) for m in stored] == [
        ("user", "Hi, I am Maya", "wa-1"),
        ("assistant", REPLY, "wa-1:reply"),
        ("user", "Do you remember my dog?", "wa-2"),
        ("assistant", REPLY, "wa-2:reply"),
    ]

    calls: list[dict[str, Any]] = [r["body"] for r in llm.requests]
    assert [r["path"] for r in llm.requests] == ["/v1/chat/completions"] * 2
    assert {c["model"] for c in calls} == {"fake-chat"}
    for call in calls:
        system = call["messages"][0]
        assert system["role"] == "system"
        assert "Maya has a dog called Biscuit" in system["content"]  # the context's notes
    history = [[(m["role"], m["content"]) for m in c["messages"][1:]] for c in calls]
    assert history == [
        [("user", "Hi, I am Maya")],
        [("user", "Hi, I am Maya"), ("assistant", REPLY), ("user", "Do you remember my dog?")],
    ]


def test_without_a_model_it_says_what_to_set() -> None:
    done = run_agent([turn("Hi", "wa-9")], MEMORY_URL="http://127.0.0.1:9")
    assert done.returncode == 1
    assert "OPENAI_API_KEY" in done.stderr and done.stdout == ""
