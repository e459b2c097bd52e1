"""Forget a person on PostgreSQL after their words were compacted, reviewed, edited and
searched: a pg_dump of the database holds no canary of theirs, and nothing finds them.
(PostgreSQL's own files may still hold the deleted text until the space is reused: README,
"PostgreSQL".)"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Iterator

import pytest

from tests import fake_llm
from tests.conftest import AGENT, PHONE, Api, admin
from tests.fake_llm import FakeLLM

pytestmark = pytest.mark.postgresql

CANARY = "quokkacanary4e1d7b"
OTHER = "+15559997777"


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        fake.summary = f"They told us the secret word {CANARY} twice."
        fake_llm.ANSWERS["pg-canary"] = json.dumps(
            [
                {"content": f"Secret word is {CANARY}", "type": "fact", "confidence": 0.9},
                {"content": f"Prefers {CANARY} tea", "type": "preference", "confidence": 0.7},
            ]
        )
        fake.mode = "pg-canary"
        yield fake


def pg_dump(url: str) -> str:
    """The whole database as SQL (plain format), as pg_dump reads it."""
    tool = shutil.which("pg_dump")
    assert tool, "the PostgreSQL pass needs pg_dump on PATH"
    done = subprocess.run(
        [tool, "--format=plain", "--no-password", f"--dbname={url}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_forget_leaves_no_canary_in_a_dump_of_the_database(
    api_factory: Callable[..., Api], llm: FakeLLM
) -> None:
    api: Api = api_factory(llm_base_url=llm.base_url, llm_retries=0)
    url = api.services.settings.database_url
    assert url
    api.client.put(f"/v1/agents/{AGENT}/settings", json={"review": True}, headers=admin())
    for i in range(45):
        api.post_turn(
            f"turn {i}: my secret word is {CANARY}",
            role="user" if i % 2 == 0 else "assistant",
            event_id=f"e{i}",
        )
    api.post_turn("the other person talks about tea", phone=OTHER)
    compacted = api.client.post(f"/v1/agents/{AGENT}/people/{PHONE}/compact", headers=admin())
    assert compacted.json()["facts_added"] == 2
    memories = api.client.get(f"/v1/agents/{AGENT}/memories", headers=admin()).json()["items"]
    api.client.post(f"/v1/agents/{AGENT}/memories/{memories[0]['id']}/approve", headers=admin())
    api.client.patch(
        f"/v1/agents/{AGENT}/memories/{memories[1]['id']}",
        json={"content": f"Really prefers {CANARY} tea"},
        headers=admin(),
    )
    api.index()
    staff = api.key("staff")
    quoting = {"query": f"who said {CANARY}", "mode": "keyword", "phone": PHONE}
    found = api.client.post("/v1/search", json=quoting, headers=staff).json()["items"]
    assert any(CANARY in item["text"] for item in found)
    before = pg_dump(url)
    assert CANARY in before and PHONE in before, "the dump holds the person before the forget"

    response = api.client.delete(f"/v1/agents/{AGENT}/people/{PHONE}", headers=admin())
    deleted = response.json()["deleted"]
    assert deleted["messages"] == 45 and deleted["memories"] == 2 and deleted["summaries"] == 1

    after = pg_dump(url)
    assert CANARY not in after
    assert PHONE not in after
    assert "the other person talks about tea" in after, "the dump still holds everyone else"
    audit = api.client.get("/v1/audit", headers=admin()).json()["items"]
    assert [a["query"] for a in audit] == ["[forgotten]"], "the search that quoted them"
    assert CANARY not in json.dumps(audit) and PHONE not in json.dumps(audit)

    export = api.client.get(f"/v1/agents/{AGENT}/people/{PHONE}/export", headers=admin()).json()
    assert export["messages"] == [] and export["memories"] == [] and export["summary"] is None
    assert api.context(query=CANARY, threshold=-1).json()["facts"] == []
    for mode in ("semantic", "keyword", "hybrid"):
        items = api.client.post(
            "/v1/search", json={"query": CANARY, "mode": mode}, headers=staff
        ).json()["items"]
        assert all(CANARY not in item["text"] for item in items), mode
    assert api.client.get(f"/v1/agents/{AGENT}/memories", headers=admin()).json()["total"] == 0
