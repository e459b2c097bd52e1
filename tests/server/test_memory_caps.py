"""What the server keeps in memory between requests stays within its documented cap, whatever
the people, turns and requests it has seen (README, "Memory")."""

from __future__ import annotations

import gc
import random
import tracemalloc
from collections.abc import Callable

import pytest

from server import compaction
from tests.conftest import Api, admin

pytestmark = pytest.mark.engine_agnostic  # run by the SQLite pass only (conftest)

# Words enough that a long turn's keyword statistics are what real text makes of it.
VOCABULARY = [f"{a}{b}{c}" for a in "bdfgklmnprst" for b in "aeiou" for c in "lmnrs"]


def _text(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(VOCABULARY))
    return " ".join(words)[:chars]


def _traced_mb() -> float:
    gc.collect()
    return tracemalloc.get_traced_memory()[0] / 2**20


def test_the_turns_kept_for_excerpts_stay_within_their_cap(
    api_factory: Callable[..., Api],
) -> None:
    """The cache of people's archived turns counted turns (50,000): long turns, with the
    keyword statistics of each, held about 60 bytes a character, hundreds of megabytes before
    any turn was dropped. Here 24 people's 36 archived turns of 800 characters (about 40 MB
    by that measure) meet a 2 MB cap."""
    api = api_factory(turns_cache_mb=2, compact_trigger=4, compact_keep=2)
    rng = random.Random(7)
    people = [f"+1555020{n:04d}" for n in range(24)]
    for phone in people:
        for turn in range(38):
            role = "user" if turn % 2 == 0 else "assistant"
            assert api.post_turn(_text(rng, 800), role=role, phone=phone).status_code == 201
    api.index()
    api.context(phone=people[0], query="kal mes ron")  # every code path once, then measure
    tracemalloc.start()
    try:
        before = _traced_mb()
        for phone in people:
            answer = api.context(phone=phone, query="kal mes ron", excerpt_mode="keyword")
            assert answer.status_code == 200, answer.text
            assert answer.json()["excerpts"], "the archived turns are read for excerpts"
        grown = _traced_mb() - before
    finally:
        tracemalloc.stop()
    assert grown < 8, f"{grown:.1f} MB held after the contexts of {len(people)} people"


def test_people_waiting_for_a_compaction_are_capped(
    api_factory: Callable[..., Api], monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the model is down (here: no worker takes from the queue), every person past the
    trigger waited in memory, one entry each, for as long as it stayed down."""
    monkeypatch.setattr(compaction, "MAX_WAITING_PEOPLE", 5)
    api = api_factory(
        compact_trigger=1,
        llm_base_url="http://127.0.0.1:9/v1",  # never called: the workers do not run
        llm_api_key="sk-test",
    )
    for n in range(12):
        phone = f"+1555040{n:04d}"
        for role in ("user", "assistant", "user", "assistant"):
            answer = api.client.post(
                f"/v1/agents/bot/people/{phone}/messages",
                json={"role": role, "content": f"turn of person {n}"},
                headers=admin(),
            )
            assert answer.status_code == 201, answer.text
    assert api.services.compaction.waiting == 5
