"""Excerpts within a budget (issue 25): windows around hits, per-person keyword statistics,
short turns discounted, the person's name left out of the search."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import pytest

import server.conversation as conversation
from embeddings.calibration import calibration_for
from server.conversation import EXCERPT_NEIGHBOURS as N
from server.conversation import EXCERPT_SPREAD
from server.excerpts import TURN_OVERHEAD_CHARS, PersonTurns, windows
from server.store.records import Message
from server.validation import one_line
from server.words import (
    is_short,
    learn_addressees,
    learn_names,
    named_side,
    proper_name_words,
    terms,
    terms_of_many,
    vocatives,
    without_names,
)
from tests.conftest import AGENT, PHONE, Api, admin, assert_error

OTHER = "+14155550123"


def chat(api: Api, lines: list[str], phone: str = PHONE) -> None:
    for i, text in enumerate(lines):
        response = api.post_turn(text, role="user" if i % 2 == 0 else "assistant", phone=phone)
        assert response.status_code == 201, response.text


# 45 turns: compaction archives the first 21 (more than 40 waiting: all but the newest 20), so
# the turns searched here are lines[0] to lines[20]; the rest is the history.
def filler(n: int, start: int = 0) -> list[str]:
    return [f"we talked about the weather on day {start + i} and it was fine" for i in range(n)]


def excerpts(api: Api, **params: Any) -> list[dict[str, Any]]:
    body = api.context(**params).json()
    return list(body["excerpts"])


def test_a_hit_comes_with_its_neighbours_in_time_order(api_factory: Callable[..., Api]) -> None:
    api = api_factory(turn_window=0)
    lines = filler(45)
    lines[10] = "what is your favourite food?"
    lines[11] = "paella with saffron, my grandmother's recipe"
    lines[12] = "sounds delicious"
    chat(api, lines)
    api.index()
    got = excerpts(api, query="paella saffron", excerpt_mode="keyword", excerpt_k=1)
    assert N >= 1
    assert [e["content"] for e in got] == lines[11 - N : 12 + N]  # N turns either side
    assert [e["hit"] for e in got] == [False] * N + [True] + [False] * N
    assert {e["window"] for e in got} == {0}
    assert got[N]["score"] > 0
    assert all(e["score"] is None for i, e in enumerate(got) if i != N)
    ids = [e["id"] for e in got]
    assert ids == sorted(ids)


def test_the_budget_caps_the_excerpts_and_the_best_hit_comes_first(
    api_factory: Callable[..., Api],
) -> None:
    api = api_factory(turn_window=0)
    lines = filler(45)
    lines[3] = "my sister Ana lives in Lisbon"
    lines[15] = "Ana, my sister, moved from Lisbon to Porto in June"
    chat(api, lines)
    api.index()
    got = excerpts(api, query="sister Ana Lisbon Porto", excerpt_mode="keyword")
    windows = [e["window"] for e in got]
    assert windows == sorted(windows)  # window after window
    assert got[[e["hit"] for e in got].index(True)]["content"] == lines[15]
    total = sum(len(e["content"]) + TURN_OVERHEAD_CHARS for e in got)
    assert total <= 4000
    alone = len(lines[15]) + TURN_OVERHEAD_CHARS + 10  # room for the hit, not one more turn
    small = excerpts(api, query="sister Ana Lisbon Porto", excerpt_budget_chars=alone)
    assert [e["content"] for e in small] == [lines[15]]  # only the best hit fits, alone
    assert excerpts(api, query="sister Ana Lisbon Porto", excerpt_budget_chars=0) == []


def test_hits_further_down_come_before_the_outer_neighbours_of_the_best(
    api_factory: Callable[..., Api],
) -> None:
    """Turns are taken in order of rank: a neighbour d turns from the hit of rank r ranks as
    r + EXCERPT_SPREAD * d, so the next hits are not crowded out by every neighbour of the
    best one; a neighbour never comes without its hit."""
    assert N >= 2 and 1 < EXCERPT_SPREAD <= 3
    api = api_factory(turn_window=0)
    lines = filler(45)
    lines[2] = "the garden gnome wears a red hat"  # rank 0: both words, short
    lines[9] = "the gnome by the pond got wet in the storm last night"  # rank 1
    lines[16] = "a new gnome for the shelf arrived this morning, very small"  # rank 2
    chat(api, lines)
    api.index()
    got = excerpts(api, query="garden gnome", excerpt_mode="keyword", excerpt_k=3)
    hits = [e["content"] for e in got if e["hit"]]
    assert hits == [lines[2], lines[9], lines[16]]
    cost = len(filler(1)[0]) + TURN_OVERHEAD_CHARS  # every neighbour here is a filler line
    three = sum(len(lines[i]) + TURN_OVERHEAD_CHARS for i in (2, 9, 16))
    # Room for the three hits and two neighbours more: the best hit's nearest ones (priority
    # 0 + spread), not its outer ones (0 + 2 * spread), nor the others' (1 + spread, ...).
    got = excerpts(
        api,
        query="garden gnome",
        excerpt_mode="keyword",
        excerpt_k=3,
        excerpt_budget_chars=three + 2 * cost + 5,
    )
    assert [e["content"] for e in got] == [*lines[1:4], lines[9], lines[16]]
    assert [e["window"] for e in got] == [0, 0, 0, 1, 2]
    # Room for the best hit alone and one turn more: its neighbour would need it; the next
    # hit (shorter than a filler line) comes instead.
    got = excerpts(
        api,
        query="garden gnome",
        excerpt_mode="keyword",
        excerpt_k=3,
        excerpt_budget_chars=len(lines[2]) + len(lines[9]) + 2 * TURN_OVERHEAD_CHARS + 5,
    )
    assert [e["content"] for e in got] == [lines[2], lines[9]]


def off_topic_neighbours(cosines: dict[int, float] | None, gate: float, budget: int) -> list[int]:
    """Positions taken from fifty turns of ten characters: hits at 10, 20, 30, 40 and 50 (ranks
    0-4), one neighbour either side; the best hit's neighbours are turn 9 (off the subject)
    and turn 11 (on it)."""
    turns = [
        Message(i + 1, AGENT, PHONE, None, None, "user", "x" * 10, "2026-01-01T00:00:00.000Z", True)
        for i in range(60)
    ]
    person = PersonTurns.build(turns, window=0)
    ranked = [(turns[p].id, 1.0 - rank / 10) for rank, p in enumerate((10, 20, 30, 40, 50))]
    got = windows(
        person,
        ranked,
        budget_chars=budget * (10 + TURN_OVERHEAD_CHARS),
        neighbours=1,
        spread=3.0,
        cosines=cosines,
        gate=gate,
    )
    return sorted(person.position[e.message.id] for e in got)


def test_a_neighbour_off_the_subject_gives_its_place_to_the_next_hit() -> None:
    """A neighbour ranks `gate` places lower per unit of cosine it falls short of its hit's:
    the best hit's on-topic neighbour keeps its place (rank 0 + spread 3 + 100 x 0.005 =
    3.5, before the fifth hit), the off-topic one (3 + 100 x 0.15 = 18) gives its place to
    that hit. Without cosines, or with gate 0, both come at 3, before the fifth hit."""
    cosines = {11: 0.85, 10: 0.70, 12: 0.845}  # message ids: turn 10 is id 11
    assert off_topic_neighbours(cosines, 100.0, 6) == [10, 11, 20, 30, 40, 50]
    assert off_topic_neighbours(cosines, 0.0, 6) == [9, 10, 11, 20, 30, 40]
    assert off_topic_neighbours(None, 100.0, 6) == [9, 10, 11, 20, 30, 40]
    # An unknown cosine costs nothing; a neighbour more like the question than its hit
    # gains nothing either (it would be a hit of its own).
    assert off_topic_neighbours({11: 0.85, 12: 0.85}, 100.0, 6) == [9, 10, 11, 20, 30, 40]
    assert off_topic_neighbours({11: 0.85, 10: 0.95, 12: 0.95}, 100.0, 6) == [
        9, 10, 11, 20, 30, 40
    ]
    # With room, everything comes: the gate orders, it never drops.
    assert off_topic_neighbours(cosines, 100.0, 30) == sorted(
        p + d for p in (10, 20, 30, 40, 50) for d in (-1, 0, 1)
    )


def test_excerpts_take_the_neighbour_on_the_subject_first(
    api_factory: Callable[..., Api], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through HTTP with the fake bag-of-words encoder given a gate (e5 has one; the fake's
    calibration has none): the best hit's neighbour that shares words with the question comes
    before the one that shares none; without the gate the earlier of the two comes first."""
    api = api_factory(turn_window=0, embedding_model="fake-hash-512d")
    lines = filler(45)
    lines[5] = "garden gnome"
    lines[6] = "the gnome sat in the garden all day long"  # on the subject, not a hit (k=2)
    lines[15] = "garden gnome again"
    chat(api, lines)
    api.index()
    three = sum(len(lines[i]) for i in (5, 15)) + len(lines[4]) + 3 * TURN_OVERHEAD_CHARS + 5
    params: dict[str, Any] = {
        "query": "garden gnome",
        "excerpt_mode": "semantic",
        "excerpt_k": 2,
        "excerpt_threshold": 0,
        "excerpt_budget_chars": three,
    }
    plain = excerpts(api, **params)
    assert [e["content"] for e in plain] == [lines[4], lines[5], lines[15]]
    gated = dataclasses.replace(calibration_for("fake-hash-512d"), excerpt_gate=10.0)
    monkeypatch.setattr(conversation, "calibration_for", lambda name: gated)
    got = excerpts(api, **params)
    assert [e["content"] for e in got] == [lines[5], lines[6], lines[15]]
    assert [e["hit"] for e in got] == [True, False, True]


def test_windows_that_touch_are_merged(api_factory: Callable[..., Api]) -> None:
    api = api_factory(turn_window=0)
    lines = filler(45)
    lines[10] = "the red bicycle has a flat tyre"
    lines[11] = "the red bicycle needs new brakes too"
    chat(api, lines)
    api.index()
    got = excerpts(api, query="red bicycle", excerpt_mode="keyword", excerpt_k=2)
    assert [e["content"] for e in got] == lines[10 - N : 12 + N]
    assert {e["window"] for e in got} == {0}
    assert len({e["id"] for e in got}) == len(got)


def test_excerpts_text_renders_the_windows(api_factory: Callable[..., Api]) -> None:
    api = api_factory(turn_window=0)
    lines = filler(45)
    lines[8] = "I am allergic to shellfish"
    chat(api, lines)
    api.index()
    body = api.context(query="shellfish allergy", excerpt_mode="keyword", excerpt_k=1).json()
    text = body["excerpts_text"]
    lines_out = text.splitlines()
    assert lines_out[0].startswith("Earlier turns that may matter now")
    # One window: its date and time once, then one line a turn, in time order.
    first = body["excerpts"][0]["created_at"]
    assert lines_out[1] == f"[{first[:16].replace('T', ' ')}]"
    assert lines_out[2:] == [f"{e['role']}: {e['content']}" for e in body["excerpts"]]
    assert "user: I am allergic to shellfish" in lines_out
    two = api.context(query="shellfish allergy red", excerpt_mode="keyword", excerpt_k=15).json()
    windows = {e["window"] for e in two["excerpts"]}
    lines_two = two["excerpts_text"].splitlines()
    assert lines_two.count("…") == len(windows) - 1
    assert len(lines_two) == 1 + len(windows) + (len(windows) - 1) + len(two["excerpts"])
    assert api.context(query="shellfish", excerpt_k=0).json()["excerpts_text"] == ""


def test_keyword_statistics_are_the_persons_own(api_factory: Callable[..., Api]) -> None:
    """A word every other person says is rare in this chat: it still finds the turn."""
    api = api_factory(turn_window=0)
    for n in range(3):
        chat(
            api,
            [f"my pizza order number {n}-{i} arrived cold" for i in range(45)],
            OTHER[:-1] + str(n),
        )
    lines = filler(45)
    lines[4] = "pizza is my favourite dinner"
    chat(api, lines)
    api.index()
    got = excerpts(api, query="pizza", excerpt_mode="keyword", excerpt_k=1)
    assert [e["content"] for e in got if e["hit"]] == [lines[4]]


def test_short_turns_rank_below_informative_ones(api_factory: Callable[..., Api]) -> None:
    api = api_factory(turn_window=0)
    lines = filler(45)
    lines[6] = "thanks for the train tickets"
    lines[16] = "the train tickets are in the kitchen drawer"
    chat(api, lines)
    api.index()
    got = excerpts(api, query="train tickets", excerpt_mode="keyword", excerpt_k=2)
    hits = [e["content"] for e in got if e["hit"]]
    assert hits[0] == lines[16]


def test_the_persons_name_does_not_pull_greetings_up(api_factory: Callable[..., Api]) -> None:
    api = api_factory(turn_window=0)
    lines = filler(45)
    lines[1] = "Hola Carmen, ¿en qué te ayudo?"
    lines[9] = "Que descanses, Carmen"
    lines[15] = "¡Gracias, Carmen! Hasta mañana"
    lines[18] = "a mí el marisco me da alergia"
    chat(api, lines)
    api.index()
    got = excerpts(api, query="¿Qué alergia tiene Carmen?", excerpt_mode="keyword", excerpt_k=1)
    assert [e["content"] for e in got if e["hit"]] == [lines[18]]


def test_names_belong_to_the_side_of_the_chat_they_are_said_to() -> None:
    turns = [
        ("assistant", "Hola Carmen, ¿en qué te ayudo?"),
        ("user", "Gracias, Diego!"),
        ("assistant", "Que descanses, Carmen"),
        ("user", "Hasta luego, Diego."),
        ("user", "Hola Lucía, ¿vienes?"),  # Lucía: said to both sides once each
        ("assistant", "Claro, Lucía!"),
    ]
    names = learn_names([text for _, text in turns])
    assert names == {"carmen", "diego", "lucia"}
    sides = learn_addressees(turns, names)
    assert sides == {"user": {"carmen"}, "assistant": {"diego"}}
    assert learn_addressees(turns, frozenset()) == {}
    assert named_side("¿Qué alergia tiene Carmen?", sides) == "user"
    assert named_side("What did Diego promise?", sides) == "assistant"
    assert named_side("Did Carmen thank Diego?", sides) is None  # both sides: neither
    assert named_side("¿Y Lucía?", sides) is None
    assert named_side("what allergy?", sides) is None
    assert named_side("¿qué alergia tiene carmen?", sides) is None  # names are capitalised
    # A stored name's particles are not names: "la" in a question names no one.
    assert proper_name_words("Carmen de la Fuente") == ["carmen", "fuente"]
    stored = {"user": frozenset(proper_name_words("Carmen de la Fuente")), "assistant": {"diego"}}
    assert named_side("¿Qué dijo sobre la paella?", stored) is None
    assert named_side("¿Qué dijo Diego sobre la paella?", stored) == "assistant"


def test_a_discount_lowers_a_score_of_either_sign() -> None:
    assert conversation._discount(0.5, 0.8) == pytest.approx(0.4)
    assert conversation._discount(-0.5, 0.8) == pytest.approx(-0.625)
    assert conversation._discount(0.5, 1.0) == 0.5


def test_a_question_that_names_the_person_prefers_their_own_words(
    api_factory: Callable[..., Api], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same words said by both sides: with the calibration's excerpt_other_side below 1,
    a question that names the person (learned, or set through the API) finds the person's
    own turn first, one that names the agent the agent's, one that names nobody the older."""
    api = api_factory(turn_window=0)
    lines = filler(45)
    lines[1] = "Hola Carmen, ¿en qué te ayudo?"
    lines[3] = "Gracias, Carmen!"
    lines[4] = "Gracias, Diego!"
    lines[6] = "Hasta luego, Diego."
    lines[9] = "the garden gnome story"  # the assistant's
    lines[12] = "the garden gnome story"  # the person's, later
    chat(api, lines)
    api.index()

    def hit(query: str) -> str:
        got = excerpts(api, query=query, excerpt_mode="keyword", excerpt_k=1)
        return next(e["role"] for e in got if e["hit"])

    assert hit("Carmen's garden gnome story?") == "assistant"  # weighed alike: the older
    weighed = dataclasses.replace(calibration_for("fake-hash"), excerpt_other_side=0.9)
    monkeypatch.setattr(conversation, "calibration_for", lambda name: weighed)
    assert hit("Carmen's garden gnome story?") == "user"
    assert hit("Diego's garden gnome story?") == "assistant"
    assert hit("the garden gnome story?") == "assistant"
    assert hit("Did Carmen tell Diego the garden gnome story?") == "assistant"
    named = api.client.put(
        f"/v1/agents/{AGENT}/people/{PHONE}/name", json={"name": "Rosa Vidal"}, headers=admin()
    )
    assert named.status_code == 200, named.text
    assert hit("What is Rosa's garden gnome story?") == "user"  # the name set through the API


def test_the_budget_is_a_setting_of_the_server_the_agent_and_the_request(
    api_factory: Callable[..., Api],
) -> None:
    api = api_factory(turn_window=0, excerpt_budget_chars=100)
    lines = filler(45)
    lines[10] = "the blue jacket order was refunded"
    chat(api, lines)
    api.index()
    assert len(excerpts(api, query="blue jacket refund", excerpt_mode="keyword")) == 1
    settings = f"/v1/agents/{AGENT}/settings"
    got = api.client.put(settings, json={"excerpt_budget_chars": 2000}, headers=admin())
    assert got.status_code == 200 and got.json()["excerpt_budget_chars"] == 2000
    assert len(excerpts(api, query="blue jacket refund", excerpt_mode="keyword")) == 1 + 2 * N
    by_request = excerpts(
        api, query="blue jacket refund", excerpt_mode="keyword", excerpt_budget_chars=60
    )
    assert [e["content"] for e in by_request] == [lines[10]]


@pytest.mark.parametrize("bad", [-1, "many", 10**7, 1.5])
def test_a_bad_budget_is_a_422(api: Api, bad: object) -> None:
    assert_error(api.context(query="x", excerpt_budget_chars=bad), 422)
    settings = f"/v1/agents/{AGENT}/settings"
    response = api.client.put(settings, json={"excerpt_budget_chars": bad}, headers=admin())
    assert_error(response, 422)


def test_forget_drops_the_cached_turns(api_factory: Callable[..., Api]) -> None:
    api = api_factory(turn_window=0)
    lines = filler(45)
    lines[3] = "my locker code is behind the blue door"
    chat(api, lines)
    api.index()
    assert excerpts(api, query="blue door locker", excerpt_mode="keyword")
    response = api.client.delete(f"/v1/agents/{AGENT}/people/{PHONE}", headers=admin())
    assert response.status_code == 200, response.text
    assert excerpts(api, query="blue door locker", excerpt_mode="keyword") == []
    memory = api.services.memory
    assert memory.person_turns(AGENT, PHONE) is None
    assert (AGENT, PHONE) not in memory._turns._people


def test_new_archived_turns_are_seen_at_once(api_factory: Callable[..., Api]) -> None:
    api = api_factory(turn_window=0)
    chat(api, filler(45))
    api.index()
    assert excerpts(api, query="violin lessons", excerpt_mode="keyword") == []
    chat(api, ["my daughter starts violin lessons on Monday", *filler(40, 100)])
    api.index()
    got = excerpts(api, query="violin lessons", excerpt_mode="keyword")
    assert "my daughter starts violin lessons on Monday" in [e["content"] for e in got]


# -- the rules, on their own ------------------------------------------------------------------


def test_short_turns_in_any_language() -> None:
    for text in ("¡Hola, Diego! Contame.", "ok gracias", "Wow, Caroline!", "👍", "Buenas noches"):
        assert is_short(text), text
    assert not is_short("the train tickets to Sevilla cost forty euros")
    assert not is_short("me ha llegado una de cada talla y ninguna me vale")


def test_names_are_learned_from_how_people_are_addressed() -> None:
    texts = [
        "Hola Rocío, ¿en qué te ayudo?",
        "Que descanses, Rocio",
        "Wow, Caroline! The colors are amazing",
        "Thanks, Caroline!",
        "I went to Paris in May.",
        "Paris was lovely, Paris!",
        "Buenas Noches!",
        "buenas noches a todos",
        "Buenas Noches!",
    ]
    assert learn_names(texts) == {"rocio", "caroline"}


def test_a_vocative_is_the_second_word_or_one_after_a_comma() -> None:
    assert list(vocatives("Hola Carmen, ¿qué tal?")) == ["carmen"]
    assert list(vocatives("Hola Carmen")) == ["carmen"]  # the turn's end closes it
    assert list(vocatives("Hola Carmen qué tal")) == []  # no closing punctuation
    assert list(vocatives("Carmen, hola")) == []  # the first word is the greeting
    assert list(vocatives("Que descanses , Álvaro!")) == ["alvaro"]
    assert list(vocatives("Ok, muchas gracias Carmen!")) == []  # third word, no comma
    assert list(vocatives("Sí, vale, Carmen. Y tú, Lucía?")) == ["carmen", "lucia"]
    # A name someone also writes in lower case (with or without its accent) is a word.
    assert learn_names(["Gracias, Rocío!", "Hola Rocío!", "el rocío de la mañana"]) == set()


def test_one_line_replaces_control_and_separator_characters() -> None:
    assert one_line("plain text, ñandú 🙂", limit=100) == "plain text, ñandú 🙂"
    # str.split takes the no-break space too.
    assert one_line("a\nb\u2028c\u200bd\x00e\u00a0f", limit=100) == "a b c d e f"
    assert one_line("  many   spaces  ", limit=100) == "many spaces"
    assert one_line("abcdef", limit=3) == "abc"


def test_many_texts_are_read_in_one_call_as_each_alone() -> None:
    texts = [
        "I went to the beach with my kids",
        "",
        "ok",
        "the and of",  # stop words only: no term
        "¿Qué tal, Rocío? Me mudé a Lisboa",
        "Wow!!! 🎉",
        "a text that writes the separator qqzxturnzxqq itself",
    ]
    assert terms_of_many(texts) == [terms(t) for t in texts]
    assert terms_of_many(texts[:-1]) == [terms(t) for t in texts[:-1]]
    assert terms_of_many([]) == []


def test_the_name_is_left_out_of_the_query() -> None:
    names = {"carmen", "caroline"}
    assert without_names("¿Qué comida le sienta mal a Carmen?", names) == (
        "¿Qué comida le sienta mal a?"
    )
    assert without_names("What is Caroline's job?", names) == "What is job?"
    assert without_names("Carmen", names) == "Carmen"  # nothing else: kept as asked
    assert without_names("Where is Madrid?", names) == "Where is Madrid?"


def test_a_person_with_no_archived_turns_gets_no_excerpts(api: Api) -> None:
    api.post_turn("hello there")
    body = api.context(query="hello").json()
    assert body["excerpts"] == [] and body["excerpts_text"] == ""


def test_bm25_over_the_persons_turns_by_hand() -> None:
    """Three turns read alone (window 0): BM25 with k1 1.2 and b 0.75, as the index scores."""
    texts = ["red bicycle", "red car parked outside", "blue boat"]
    turns = [
        Message(i + 1, AGENT, PHONE, None, None, "user", t, "2026-01-01T00:00:00.000Z", True)
        for i, t in enumerate(texts)
    ]
    person = PersonTurns.build(turns, window=0)
    lengths = [2, 4, 2]  # terms: red, bicycl | red, car, park, outsid | blue, boat
    average = sum(lengths) / 3

    def part(df: int, length: int) -> float:
        idf = math.log(1 + (3 - df + 0.5) / (df + 0.5))
        return idf * 2.2 / (1 + 1.2 * (0.25 + 0.75 * length / average))

    got = dict(person.bm25(["red", "bicycl"], 10))
    assert got[1] == pytest.approx(part(2, 2) + part(1, 2))
    assert got[2] == pytest.approx(part(2, 4))
    assert 3 not in got
    assert [i for i, _ in person.bm25(["red", "bicycl"], 10)] == [1, 2]
