"""Moves that touch one number at once (A to B while B to A; A to B while C to A) keep every
vector of the person, on both engines: the old number is left only by rows whose item the
database no longer holds under it. A move is journaled: one cut short is settled later."""

from __future__ import annotations

import threading
from collections.abc import Callable
from urllib.parse import quote

import pytest

from embeddings.index import VectorIndex
from server.hooks import Hooks
from tests.backends import query
from tests.conftest import AGENT, Api, admin
from tests.server.test_erasure import lance_texts

A, B, C = "+34600990001", "+34600990002", "+34600990003"


def person(phone: str) -> str:
    return f"/v1/agents/{AGENT}/people/{quote(phone, safe='')}"


def fill(api: Api, phones: tuple[str, ...], turns: int = 5) -> dict[str, str]:
    """Turns with a unique word each, and a memory, on each number; indexed. Returns each
    word and the number it was written on."""
    words = {}
    for phone in phones:
        for n in range(turns):
            word = f"zq{phone[-4:]}w{n}"
            api.post_turn(f"turn {n} mentions {word}", phone=phone, event_id=f"{phone}-{n}")
            words[word] = phone
        made = api.client.post(
            f"/v1/agents/{AGENT}/memories",
            json={"content": f"fact of zq{phone[-4:]}fact", "phone": phone},
            headers=admin(),
        )
        assert made.status_code == 201, made.text
        words[f"zq{phone[-4:]}fact"] = phone
    api.index()
    return words


def move(api: Api, old: str, new: str) -> int:
    response = api.client.post(person(old) + "/move", json={"to": new}, headers=admin())
    assert response.status_code in (200, 404), response.text  # 404: nothing left to move
    return response.status_code


def assert_everything_findable(api: Api, words: dict[str, str]) -> None:
    """Every item the database holds is in the index under the number the database says,
    nothing else is, nothing waits, and a keyword search finds each word there."""
    settings = api.services.settings
    assert api.services.store.outbox_size() == 0
    index: VectorIndex = api.services.indexer.space.index
    turns = query(settings, "SELECT id, phone, content FROM messages")
    memories = query(settings, "SELECT id, phone, content FROM memories")
    stored = {f"turn:{r[0]}": r[1] for r in turns} | {f"fact:{r[0]}": r[1] for r in memories}
    rows = index.get(index.all_ids())
    indexed = {i: row.phone for i, (row, _) in rows.items() if row.kind != "summary"}
    assert indexed == stored
    staff = api.key("staff")
    for word in words:
        found = api.client.post(
            "/v1/search", json={"query": word, "mode": "keyword"}, headers=staff
        ).json()["items"]
        owner = next(str(r[1]) for r in [*turns, *memories] if word in str(r[2]))
        assert found and {item["phone"] for item in found} == {owner}, (word, found)


def test_a_move_back_while_the_first_settles_keeps_every_vector(
    api_factory: Callable[..., Api],
) -> None:
    """A to B commits; before its vectors settle, B to A runs whole; then the first settles.
    The first move's purge of A must not take the rows the second wrote under A."""
    hooks = Hooks()
    api = api_factory(hooks=hooks)
    words = fill(api, (A, B))
    hooks.once("move.committed", lambda: move(api, B, A))
    assert move(api, A, B) == 200
    phones = {r[0] for r in query(api.services.settings, "SELECT phone FROM messages")}
    assert phones == {A}
    assert_everything_findable(api, words)
    assert query(api.services.settings, "SELECT COUNT(*) FROM moves")[0][0] == 0


def test_a_move_onto_a_number_between_another_moves_rewrite_and_purge(
    api_factory: Callable[..., Api],
) -> None:
    """A to B has rewritten its rows under B; C to A (a recycled number) commits and settles
    before A to B purges A."""
    hooks = Hooks()
    api = api_factory(hooks=hooks)
    words = fill(api, (A, B, C))
    hooks.once("move.rewritten", lambda: move(api, C, A))
    assert move(api, A, B) == 200
    assert_everything_findable(api, words)


@pytest.mark.parametrize("pairs", [((A, B), (B, A)), ((A, B), (C, A)), ((A, B), (B, C))])
def test_concurrent_moves_over_http_lose_nothing(
    api_factory: Callable[..., Api], pairs: tuple[tuple[str, str], ...]
) -> None:
    """The issue's rounds, as they happen: both moves sent at once, four rounds."""
    api = api_factory()
    words = fill(api, (A, B, C))
    for round_ in range(4):
        for old, _ in pairs:  # each number that moves holds something new this round
            word = f"zq{old[-4:]}r{round_}"
            api.post_turn(f"round {round_} brings {word}", phone=old, event_id=word)
            words[word] = old
        api.index()
        start = threading.Barrier(len(pairs))
        codes: list[int] = []
        threads = [
            threading.Thread(target=_move_at, args=(api, start, codes, *pair)) for pair in pairs
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert 200 in codes
        api.index()
        assert_everything_findable(api, words)


def _move_at(api: Api, start: threading.Barrier, codes: list[int], old: str, new: str) -> None:
    start.wait()
    codes.append(move(api, old, new))


def test_a_move_whose_vectors_could_not_be_written_is_settled_later(
    api_factory: Callable[..., Api],
) -> None:
    """The rewrite fails during the request (the answer is still 200: the database moved);
    the journal row stays until the indexer settles the move."""
    hooks = Hooks()
    api = api_factory(hooks=hooks)
    words = fill(api, (A,))

    def fail() -> None:
        raise OSError("the vector store is away")

    hooks.once("move.rewritten", fail)
    assert move(api, A, B) == 200
    pending = query(api.services.settings, "SELECT agent, old_phone, new_phone FROM moves")
    assert [tuple(r) for r in pending] == [(AGENT, A, B)]
    assert api.client.get("/health").json()["move_pending"] is True
    lance = api.services.settings.data_dir / "lance"
    assert A in lance_texts(lance)  # older versions still hold the old number
    assert api.services.memory.finish_moves() == 1
    assert query(api.services.settings, "SELECT COUNT(*) FROM moves")[0][0] == 0
    assert api.services.indexer.space.index.person_ids(AGENT, A) == []
    assert A not in lance_texts(lance)
    assert api.client.get("/health").json()["move_pending"] is False
    assert_everything_findable(api, words)
