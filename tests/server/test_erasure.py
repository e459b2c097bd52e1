"""Forget a person after their words were compacted, indexed, reviewed and searched: no file
under the data folder holds a canary of theirs, and nothing finds them any more."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import fake_llm
from tests.conftest import AGENT, PHONE, Api, admin
from tests.fake_llm import FakeLLM
from tests.s3 import S3Server

CANARY = "zebracanary7f3a9c"
OTHER = "+15559998888"


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        fake.summary = f"They told us the secret word {CANARY} twice."
        fake_llm.ANSWERS["canary"] = json.dumps(
            [
                {"content": f"Secret word is {CANARY}", "type": "fact", "confidence": 0.9},
                {"content": f"Prefers {CANARY} tea", "type": "preference", "confidence": 0.7},
            ]
        )
        fake.mode = "canary"
        yield fake


def lance_texts(folder: Path) -> str:
    from lance.file import LanceFileReader

    texts = []
    for path in folder.rglob("*.lance"):
        if path.is_file():
            texts.append(str(LanceFileReader(str(path)).read_all().to_table().to_pylist()))
    return "\n".join(texts)


@pytest.mark.parametrize("vectors", ["folder", "s3"])
def test_forget_after_compaction_review_search_and_audit(
    api_factory: Callable[..., Api],
    llm: FakeLLM,
    vectors: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """On a vector folder, and on a bucket shared by replicas (MEMORY_LANCE_URI=s3://...)."""
    shared: dict[str, object] = {}
    if vectors == "s3":
        s3: S3Server = request.getfixturevalue("s3")
        uri = s3.new_uri()
        shared = {"lance_uri": uri, "lance_storage_options": s3.options}
    api: Api = api_factory(llm_base_url=llm.base_url, llm_retries=0, **shared)
    api.client.put(f"/v1/agents/{AGENT}/settings", json={"review": True}, headers=admin())
    for i in range(45):
        api.post_turn(
            f"turn {i}: my secret word is {CANARY}",
            role="user" if i % 2 == 0 else "assistant",
            event_id=f"e{i}",
        )
    api.post_turn("the other person talks about tea", phone=OTHER)
    assert (
        api.client.post(f"/v1/agents/{AGENT}/people/{PHONE}/compact", headers=admin()).json()[
            "facts_added"
        ]
        == 2
    )
    memories = api.client.get(f"/v1/agents/{AGENT}/memories", headers=admin()).json()["items"]
    api.client.post(f"/v1/agents/{AGENT}/memories/{memories[0]['id']}/approve", headers=admin())
    api.client.patch(
        f"/v1/agents/{AGENT}/memories/{memories[1]['id']}",
        json={"content": f"Really prefers {CANARY} tea"},
        headers=admin(),
    )
    api.index()

    staff = api.key("staff")
    quoting = {"query": f"who said {CANARY}", "mode": "keyword"}  # the query quotes them
    found = api.client.post("/v1/search", json=quoting, headers=staff).json()
    assert any(CANARY in item["text"] for item in found["items"])
    api.client.post("/v1/search", json={"query": "tea", "phone": PHONE}, headers=staff)
    unrelated = {"query": "other person tea", "phone": OTHER}
    api.client.post("/v1/search", json=unrelated, headers=staff)
    assert api.context(query="secret word", threshold=-1).json()["facts"]

    response = api.client.delete(f"/v1/agents/{AGENT}/people/{PHONE}", headers=admin())
    deleted = response.json()["deleted"]
    assert deleted["messages"] == 45 and deleted["memories"] == 2 and deleted["summaries"] == 1
    assert deleted["vectors"] == 45 + 2 + 1

    data = api.services.settings.data_dir
    lance = data / "lance"
    if vectors == "s3":
        assert not lance.exists()  # nothing of the vectors on local disk
        assert s3.holding(uri, CANARY.encode()) == []
        lance = s3.download(uri, tmp_path / "bucket")
        assert any(lance.rglob("*.lance"))  # (the other person's rows are there)
    for path in (p for p in data.rglob("*") if p.is_file()):
        assert CANARY.encode() not in path.read_bytes(), path
    assert CANARY not in lance_texts(lance)
    assert PHONE not in lance_texts(lance)

    export = api.client.get(f"/v1/agents/{AGENT}/people/{PHONE}/export", headers=admin()).json()
    assert export["messages"] == [] and export["memories"] == [] and export["summary"] is None
    assert api.context(query=CANARY, threshold=-1).json()["facts"] == []
    for mode in ("semantic", "keyword", "hybrid"):
        items = api.client.post(
            "/v1/search", json={"query": CANARY, "mode": mode}, headers=staff
        ).json()["items"]
        assert all(CANARY not in item["text"] for item in items), mode
    audit = api.client.get("/v1/audit", headers=admin()).json()["items"]
    assert PHONE not in json.dumps(audit)
    before_forget = audit[-3:]  # oldest last
    assert [a["query"] for a in before_forget] == ["other person tea", "[forgotten]", "[forgotten]"]
    assert before_forget[0]["filters"]["phone"] == OTHER
    listed = api.client.get(f"/v1/agents/{AGENT}/memories", headers=admin()).json()
    assert listed["total"] == 0


def test_export_holds_everything_about_the_person_and_nothing_else(
    api_factory: Callable[..., Api], llm: FakeLLM
) -> None:
    api: Api = api_factory(llm_base_url=llm.base_url, llm_retries=0)
    for i in range(45):
        api.post_turn(f"turn {i} {CANARY}", role="user" if i % 2 == 0 else "assistant")
    api.post_turn("not mine", phone=OTHER)
    api.post_turn("not mine either", agent="other-agent")
    api.client.post(
        f"/v1/agents/{AGENT}/memories", json={"content": "manual", "phone": PHONE}, headers=admin()
    )
    api.client.post(
        f"/v1/agents/{AGENT}/memories", json={"content": "other's", "phone": OTHER}, headers=admin()
    )
    api.client.post(f"/v1/agents/{AGENT}/people/{PHONE}/compact", headers=admin())
    export = api.client.get(f"/v1/agents/{AGENT}/people/{PHONE}/export", headers=admin()).json()
    assert len(export["messages"]) == 45
    assert sum(m["archived"] for m in export["messages"]) == 25
    assert export["summary"]["text"] == llm.summary
    assert sorted(m["content"] for m in export["memories"]) == sorted(
        ["manual", f"Secret word is {CANARY}", f"Prefers {CANARY} tea"]
    )
    assert all(m["history"] for m in export["memories"])
    text = json.dumps(export)
    assert "not mine" not in text and "other's" not in text and OTHER not in text
