"""The person's working set (issue 42): a context for a person already seen reads no vector
from LanceDB, finds what the index would, and after an archive reads only the new turns."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from embeddings.index import VectorIndex
from server.conversation import MemoryService
from server.excerpts import PersonTurns
from server.fact_vectors import PersonFacts
from server.store.records import Message
from server.turn_vectors import RecentVectors, space_key
from tests.conftest import AGENT, PHONE, Api, admin

TOPICS = ["paella", "Lisbon", "the dentist", "a red bicycle", "the piano", "tax forms"]


def chat(api: Api, start: int, n: int) -> None:
    for i in range(start, start + n):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"turn {i}: we talked about {TOPICS[i % len(TOPICS)]} and day {i} of the trip"
        assert api.post_turn(text, role=role).status_code == 201


class Reads:
    """Counts the vector index's reads of one kind, or refuses them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, index: VectorIndex) -> None:
        self.calls: dict[str, list[Any]] = {
            "search": [],
            "vectors": [],
            "person_vectors": [],
            "get": [],
        }
        self.refuse = False
        for name in self.calls:
            original = getattr(index, name)
            monkeypatch.setattr(index, name, self._spy(name, original))

    def _spy(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def spy(*args: Any, **kwargs: Any) -> Any:
            if self.refuse:
                raise AssertionError(f"the context read the index: {name}")
            self.calls[name].append(args[0] if args else kwargs)
            return original(*args, **kwargs)

        return spy

    def clear(self) -> None:
        for calls in self.calls.values():
            calls.clear()


@pytest.fixture
def api(api_factory: Callable[..., Api]) -> Iterator[Api]:
    yield api_factory(turn_window=0)


def contexts(api: Api, queries: list[str], mode: str) -> list[list[tuple[int, Any, bool]]]:
    out = []
    for query in queries:
        body = api.context(query=query, excerpt_mode=mode).json()
        out.append([(e["id"], e["score"], e["hit"]) for e in body["excerpts"]])
    return out


QUERIES = ["where did we talk about paella?", "the red bicycle", "piano lessons", "taxes"]


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
def test_a_seen_person_is_searched_in_memory_with_what_the_index_would_find(
    api: Api, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    chat(api, 0, 45)  # compaction archives the first 25
    api.index()
    memory: MemoryService = api.services.memory
    reads = Reads(monkeypatch, api.services.indexer.space.index)
    # The index's answers: the working set filled (the first request reads it) but not used.
    with monkeypatch.context() as patched:
        patched.setattr(MemoryService, "_ready_vectors", staticmethod(lambda person: None))
        from_index = contexts(api, QUERIES, mode)
    assert reads.calls["search"], "the index answered"
    person = memory.person_turns(AGENT, PHONE)
    assert person is not None and person.vectors is not None and person.vectors.complete
    reads.refuse = True  # from now on, any read of the index fails the test
    in_memory = contexts(api, QUERIES, mode)
    assert [[i for i, _, _ in c] for c in in_memory] == [[i for i, _, _ in c] for c in from_index]
    for got, want in zip(in_memory, from_index, strict=True):
        for (_, a, hit_a), (_, b, hit_b) in zip(got, want, strict=True):
            assert hit_a == hit_b
            assert (a is None and b is None) or abs(a - b) < 1e-4
    assert memory.person_turns(AGENT, PHONE) is not None


@pytest.mark.parametrize("same_process", [True, False])
def test_after_an_archive_only_the_new_turns_are_read(
    api: Api, monkeypatch: pytest.MonkeyPatch, same_process: bool
) -> None:
    chat(api, 0, 45)
    api.index()
    reads = Reads(monkeypatch, api.services.indexer.space.index)
    api.context(query="paella", excerpt_mode="semantic")
    person = api.services.memory.person_turns(AGENT, PHONE)
    assert person is not None and person.vectors is not None and person.vectors.complete
    before = {m.id for m in person.turns}
    reads.clear()
    chat(api, 45, 25)  # more than 40 waiting again: another archive
    api.index()
    store = api.services.memory._store
    loads: list[str] = []
    for name in ("archived_turns", "archived_turns_after"):
        original = getattr(store, name)
        monkeypatch.setattr(
            store, name, lambda *a, _n=name, _o=original: (loads.append(_n), _o(*a))[1]
        )
    if not same_process:  # another replica's indexer archived them: none in memory here
        api.services.indexer.recent = RecentVectors()
    api.context(query="paella", excerpt_mode="semantic")
    assert loads == ["archived_turns_after"], "the cache was extended, not built again"
    person = api.services.memory.person_turns(AGENT, PHONE)
    assert person is not None and len(person.turns) > len(before)
    new = {f"turn:{m.id}" for m in person.turns if m.id not in before}
    read = [set(ids) for ids in reads.calls["vectors"]]
    if same_process:  # the indexer that archived them kept what it wrote
        assert read == [], "nothing read from the index"
    else:
        assert read == [new], "only the turns new to the cache were read"
    assert not reads.calls["person_vectors"] and not reads.calls["search"]
    assert person.vectors is not None and person.vectors.complete


def test_a_move_and_a_forget_leave_nothing_of_the_person_in_memory(api: Api) -> None:
    chat(api, 0, 45)
    api.index()
    found = api.context(query="paella", excerpt_mode="semantic").json()["excerpts"]
    assert found
    memory: MemoryService = api.services.memory
    moved = "+14155550199"
    response = api.client.post(
        f"/v1/agents/{AGENT}/people/{PHONE}/move", json={"to": moved}, headers=admin()
    )
    assert response.status_code == 200, response.text
    api.index()
    assert api.context(query="paella", excerpt_mode="semantic").json()["excerpts"] == []
    assert memory.person_turns(AGENT, PHONE) is None
    there = api.client.get(
        f"/v1/agents/{AGENT}/people/{moved}/context",
        params={"query": "paella", "excerpt_mode": "semantic"},
        headers=admin(),
    ).json()["excerpts"]
    assert [e["content"] for e in there] == [e["content"] for e in found]
    response = api.client.delete(f"/v1/agents/{AGENT}/people/{moved}", headers=admin())
    assert response.status_code == 200, response.text
    assert memory.person_turns(AGENT, moved) is None
    assert memory.turns_held() == 0
    index = api.services.indexer.space.index
    ids = [f"turn:{e['id']}" for e in there]
    assert api.services.indexer.recent.get(space_key(index), ids) == {}, "no vector lingers"


FACTS = [
    "Her dog is called Toby",
    "She is allergic to shellfish",
    "She moved to Sevilla in March",
    "She plays the piano on Sundays",
    "Her daughter studies medicine in Granada",
]


def add_fact(api: Api, content: str) -> str:
    response = api.client.post(
        f"/v1/agents/{AGENT}/memories", json={"content": content, "phone": PHONE}, headers=admin()
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def facts_of(api: Api, query: str) -> list[tuple[str, float]]:
    body = api.context(query=query, threshold=-1.0).json()
    found = [(f["id"], round(f["score"], 4)) for f in body["facts"]]
    scores = [score for _, score in found]
    assert scores == sorted(scores, reverse=True), "best first"
    return sorted(found, key=lambda f: (-f[1], f[0]))  # equal scores in any order


def test_facts_are_searched_in_memory_and_a_change_is_read_at_once(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [add_fact(api, text) for text in FACTS]
    queries = ["does she have pets?", "food allergies", "where does she live now?"]
    reads = Reads(monkeypatch, api.services.indexer.space.index)
    with monkeypatch.context() as patched:  # the index's answers
        patched.setattr(PersonFacts, "complete", property(lambda _self: False))
        from_index = [facts_of(api, q) for q in queries]
    assert reads.calls["search"]
    reads.refuse = True
    from_memory = [facts_of(api, q) for q in queries]
    assert from_memory == from_index
    assert all(len(found) == len(FACTS) for found in from_memory)
    # A change on any path is seen by the next context: the new text's vector is read once.
    reads.refuse = False
    reads.clear()
    response = api.client.patch(
        f"/v1/agents/{AGENT}/memories/{ids[0]}",
        json={"content": "Her cat is called Misu"},
        headers=admin(),
    )
    assert response.status_code == 200, response.text
    reads.clear()
    found = facts_of(api, "her cat Misu")
    assert found[0][0] == ids[0]
    assert [set(r) for r in reads.calls["get"]] == [{f"fact:{ids[0]}"}]
    assert not reads.calls["search"], "only the changed fact was read, by id"
    # A fact deleted, or replaced, leaves the context at once.
    api.client.delete(f"/v1/agents/{AGENT}/memories/{ids[1]}", headers=admin())
    assert ids[1] not in {i for i, _ in facts_of(api, "food allergies")}
    newer = api.client.post(
        f"/v1/agents/{AGENT}/memories",
        json={"content": "She moved to Cádiz in June", "phone": PHONE, "supersedes": ids[2]},
        headers=admin(),
    )
    assert newer.status_code == 201, newer.text
    now = [i for i, _ in facts_of(api, "she moved to Cádiz")]
    assert ids[2] not in now and newer.json()["id"] == now[0]


WORDS = ["paella", "Lisbon", "dentist", "bicycle", "piano", "taxes", "hola", "gracias", "the"]
GREETINGS = ["Hola Carmen, ¿qué tal?", "Thanks, Diego!", "Que descanses, Carmen", "ok carmen"]


def _turns(rng: random.Random, start: int, n: int) -> list[Message]:
    out = []
    for i in range(start, start + n):
        if rng.random() < 0.2:
            text = rng.choice(GREETINGS)
        else:
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
        role = "user" if rng.random() < 0.5 else "assistant"
        created = f"2026-01-01T00:00:{i % 60:02d}Z"
        out.append(Message(i, AGENT, PHONE, None, None, role, text, created, True))
    return out


@pytest.mark.no_database
@pytest.mark.parametrize("window", [0, 1, 2])
def test_a_cache_extended_by_an_archive_is_the_cache_built_from_all_its_turns(
    window: int,
) -> None:
    """Issue 42's incremental cache: extending by the turns each archive adds, again and
    again, gives what building from every turn gives: BM25, names, sides, short turns."""
    rng = random.Random(window)
    turns = _turns(rng, 1, 30)
    person = PersonTurns.build(turns, window)
    for _ in range(8):
        newer = _turns(rng, len(turns) + 1, rng.randint(1, 25))
        turns = turns + newer
        before = person
        queries = (["paella"], ["piano", "taxes"], ["carmen"], ["the", "lisbon"])
        answers = [before.bm25(q, 10) for q in queries]
        person = person.extended(newer)
        # the entry it extends (a request may be reading it) answers as it did
        assert [before.bm25(q, 10) for q in queries] == answers
        assert len(before.turns) == len(turns) - len(newer)
        built = PersonTurns.build(turns, window)
        assert person.names == built.names and person.addressees == built.addressees
        assert person.short == built.short and person.position == built.position
        assert person._lengths == built._lengths
        assert {t: sorted(p) for t, p in person._postings.items()} == {
            t: sorted(p) for t, p in built._postings.items()
        }
        for query in queries:
            assert person.bm25(query, 10) == built.bm25(query, 10)


@pytest.mark.no_database
def test_the_vectors_written_last_are_capped_and_dropped_with_their_person() -> None:
    from embeddings.index import IndexRow

    def row(i: int, phone: str, kind: str = "turn") -> IndexRow:
        return IndexRow(
            id=f"{kind}:{i}",
            kind=kind,
            ref_id=str(i),
            agent=AGENT,
            phone=phone,
            status="archived",
            type="user",
            created_at="2026-01-01T00:00:00Z",
            text="x",
        )

    recent = RecentVectors(size=3)
    other = "+14155550123"
    vectors = np.eye(5, 4, dtype=np.float32)
    rows = [row(1, PHONE), row(2, other), row(3, PHONE), row(9, PHONE, "fact"), row(4, PHONE)]
    recent.put("space", rows, vectors)
    assert len(recent) == 3, "three at most; facts are not kept"
    ids = ["turn:1", "turn:2", "turn:3", "turn:4"]
    assert sorted(recent.get("space", ids)) == ["turn:2", "turn:3", "turn:4"]
    assert recent.get("another model", ids) == {}
    recent.drop_person(AGENT, PHONE)
    assert sorted(recent.get("space", ids)) == ["turn:2"]
