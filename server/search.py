"""Staff search: facts, turns and summaries across people and agents, by meaning or words,
with every search written to the audit log."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from embeddings.calibration import calibration_for
from embeddings.index import Hit, quote
from embeddings.relevance import scale_for
from server import words
from server.auth import Principal
from server.hooks import Hooks
from server.indexer import Indexer
from server.redaction import redact
from server.staff_relevance import Candidate, StaffScorer, passes
from server.store import Store
from server.store.records import Memory, Message

# Archived turns of one person, best first, for a query that names her: (agent, phone, query,
# k, mode, threshold) -> [(turn, score)] (MemoryService.ranked_turns: BM25 over the person's own
# turns, her names left out of the search).
PersonRanking = Callable[[str, str, str, int, str, float | None], list[tuple[Message, float]]]

KIND_OF = {"facts": "fact", "turns": "turn", "summaries": "summary"}
# Turns read to find whom a name in the query names (the keyword hits for the name alone).
NAME_PROBE = 50
# People a name may name whose items are weighed against the rest of the question.
NAMED_CANDIDATES = 5
# A name set for the person (PUT .../name) counts as this many vocatives: it says more.
NAME_SET_WEIGHT = 10
# At most this many people that share a name are weighed against the rest of the question.
NAMED_POOL = 500
_WORD = re.compile(r"\w+", re.UNICODE)
_STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "that",
        "this",
        "from",
        "was",
        "were",
        "are",
        "you",
        "your",
        "her",
        "his",
        "she",
        "him",
        "they",
        "them",
        "what",
        "who",
        "when",
        "where",
        "which",
        "about",
        "into",
        "have",
        "has",
        "had",
        "not",
        "but",
        "all",
        "any",
        "can",
        "our",
        "out",
    ]
)


@dataclass(frozen=True, slots=True)
class StaffQuery:
    query: str
    agents: list[str] | None = None
    phone: str | None = None
    kinds: tuple[str, ...] = ("facts", "turns", "summaries")
    mode: str = "hybrid"
    since: str | None = None
    until: str | None = None
    limit: int = 20
    offset: int = 0
    threshold: float | None = None
    # The relevance a result needs (server/staff_relevance.py); None: the model's floor.
    min_relevance: float | None = None


@dataclass(frozen=True, slots=True)
class StaffPage:
    items: list[Found]
    more: bool  # a next page exists
    floor: float  # the relevance a result needed to be shown
    hidden: int  # results found but not shown for being below it


@dataclass(frozen=True, slots=True)
class Found:
    kind: str  # facts | turns | summaries
    agent: str
    phone: str | None  # None: a memory about no one person
    id: str
    text: str
    score: float
    created_at: str
    status: str
    highlights: list[tuple[int, int]]
    relevance: float = 0.0  # on the relevance scale (server/staff_relevance.py)
    replaced_by: str | None = None  # a superseded fact: the current fact of its chain
    cosine: float | None = None  # the raw cosine of its stored vector to the query, when read


class StaffSearch:
    """Searches the index within the agents a key may read, checks each hit against SQLite,
    and records the search in the audit log."""

    def __init__(
        self,
        store: Store,
        indexer: Indexer,
        *,
        person_ranking: PersonRanking,
        hooks: Hooks | None = None,
    ) -> None:
        self._store = store
        self._indexer = indexer
        self._hooks = hooks or Hooks()
        self._person_ranking = person_ranking

    def search(self, principal: Principal, q: StaffQuery) -> StaffPage:
        # A secret in the query is redacted as stored text is: the audit log never keeps it,
        # and a card number finds the turns that hold its placeholder ("[tarjeta ••••5559]").
        q = replace(q, query=redact(q.query))
        # Before any read: the audit entry is checked for a forget that raced the search.
        baseline = self._store.audit_baseline(q.query, q.phone)
        agents = self._allowed_agents(principal, q.agents)
        space = self._indexer.space  # one model for the search and its reading, mid-upgrade too
        depth = q.offset + q.limit + 1  # one more: is there a next page?
        where = self._where(q, agents)
        calibration = calibration_for(space.encoder.name)
        # On a calibrated model `threshold` is a floor on the relevance scale (below): the
        # index's own searches take no raw floor then.
        raw = q if not scale_for(space.encoder.name).calibrated else replace(q, threshold=None)
        named = self._named_person(raw, where, agents) if q.phone is None else None
        rest = words.without_names(q.query, {named[2]}) if named is not None else None
        scorer = StaffScorer(space, q.query, q.mode, calibration, rest=rest, where=where)
        # Every floor is on the relevance scale on a calibrated model: `threshold` too, read
        # once a result's relevance is known, never as a raw score inside the index.
        asked = q.min_relevance if q.min_relevance is not None else None
        if asked is None and scorer.calibrated and q.threshold is not None:
            asked = q.threshold
        floor = calibration.staff_floor if asked is None else asked
        shows = passes(floor, asked is not None)
        min_score = raw.threshold
        hits: list[Hit] = []
        own: list[Found] = []  # a named person's archived turns, ranked by her own words

        def passing(candidates: list[Candidate]) -> list[bool]:
            values = scorer.relevances(candidates)
            return [
                shows(v, scorer.says_every_word(c.text))
                for c, v in zip(candidates, values, strict=True)
            ]

        if named is not None and rest is not None:
            # "What is Carmen allergic to?": Carmen's own items first, ranked by the rest of
            # the question (her name is in greetings, not in what she said), then the rest;
            # hers that the page would hide leave their places to others.
            agent, phone, _ = named
            person = f"{where} AND agent = {quote(agent)} AND phone = {quote(phone)}"
            if "turns" in q.kinds:
                # Her archived turns as the context ranks them: BM25 counted over her own
                # turns, where a word of the question is rare if she rarely says it.
                person += " AND NOT (kind = 'turn' AND status = 'archived')"
                ranked = [
                    (m, score)
                    for m, score in self._person_ranking(
                        agent, phone, q.query, depth, q.mode, min_score
                    )
                    if _in_time(m, q)
                ]
                keep_own = passing(
                    [Candidate(f"turn:{m.id}", m.content, s, named=True) for m, s in ranked]
                )
                own = [_found_turn(m, s) for (m, s), ok in zip(ranked, keep_own, strict=True) if ok]
            theirs = space.retrieve(
                q.mode, rest, where=person, k=depth, min_score=min_score, own_words=True
            )
            keep_hers = passing(
                [Candidate(h.row.id, h.row.content, h.score, named=True) for h in theirs]
            )
            hits = [h for h, ok in zip(theirs, keep_hers, strict=True) if ok]
        if len(hits) + len(own) < depth:
            seen = {h.row.id for h in hits}
            if named is not None:  # hers were weighed by the rest of the question above
                where += f" AND NOT (agent = {quote(named[0])} AND phone = {quote(named[1])})"
            others = space.retrieve(
                q.mode,
                q.query,
                where=where,
                k=depth,
                min_score=min_score,
                own_words=True,  # staff look for who said it: the turn itself comes first
            )
            hits += [h for h in others if h.row.id not in seen][: depth - len(hits) - len(own)]
        found_now = [*self._still_there(hits), *own]
        hers = {(named[0], named[1])} if named is not None else set()
        candidates = [
            Candidate(_row_id(f), f.text, f.score, named=(f.agent, f.phone) in hers)
            for f in found_now
        ]
        values = scorer.relevances(candidates)
        semantic = scorer.calibrated and q.mode == "semantic"
        there = [
            replace(
                f,
                # semantic search's score is the scale's, as the context's (the raw cosine
                # beside it); hybrid and keyword keep their own, which BM25 has no scale for
                score=scorer.scale_score(c) if semantic else f.score,
                relevance=value,
                cosine=scorer.cosine(c.row_id),
            )
            for f, c, value in zip(found_now, candidates, values, strict=True)
        ]
        # A turn that says almost nothing ("ok gracias", "Wow, Caroline!") goes below the ones
        # that say something at the same score (server/words.py); its score stays as found.
        # A named person's items stay first.
        there.sort(
            key=lambda f: (
                (f.agent, f.phone) not in hers,
                -f.score * (words.SHORT_TURN_WEIGHT if _short(f) else 1.0),
            )
        )
        there = self._current_first(there)
        shown = [f for f in there if shows(f.relevance, scorer.says_every_word(f.text))]
        window = shown[q.offset : q.offset + q.limit + 1]
        found = window[: q.limit]
        self._hooks.reach("staff.searched")
        people = sorted({(f.agent, f.phone) for f in found if f.phone})
        _, kept = self._store.add_audit(
            key_id=principal.key_id,
            query=q.query,
            filters=_filters(q),
            results=[[a, p] for a, p in people],
            baseline=baseline,
        )
        if len(kept) < len(people):  # forgotten while this search ran: not shown either
            still = {(a, p) for a, p in kept}
            found = [f for f in found if f.phone is None or (f.agent, f.phone) in still]
        return StaffPage(
            items=[replace(f, highlights=highlight(f.text, q.query)) for f in found],
            more=len(window) > q.limit,
            floor=floor,
            hidden=len(there) - len(shown),
        )

    def _named_person(
        self, q: StaffQuery, where: str, agents: list[str] | None
    ) -> tuple[str, str, str] | None:
        """(agent, phone, folded name) of the person a capitalised word of the query names:
        one whose name (PUT .../name) has that word, or one their chat addresses by it ("Hola
        Carmen, …", "Thanks, Carmen!"; server/words.py) at least twice. When several people
        are named so (two Johns), the one whose items best match the rest of the question,
        among the most named (a set name counts as much as NAME_SET_WEIGHT vocatives). None
        when no word names anyone."""
        candidates = {
            words.fold(w) for w in _WORD.findall(q.query) if len(w) >= 3 and w[0].isupper()
        }
        if not candidates or "turn" not in {KIND_OF[k] for k in q.kinds}:
            return None
        turns = re.sub(r"kind IN \([^)]*\)", "kind = 'turn'", where)
        # (agent, phone, name): how often the person is named so
        called = {
            person: NAME_SET_WEIGHT
            for person in self._store.people_called(sorted(candidates), agents, limit=NAMED_POOL)
        }
        for name in sorted(candidates):
            counts: dict[tuple[str, str], int] = {}
            for hit in self._indexer.space.index.keyword(
                name, where=turns, k=NAME_PROBE, column="content"
            ):
                if name in set(words.vocatives(hit.row.content)):
                    key = (hit.row.agent, hit.row.phone)
                    counts[key] = counts.get(key, 0) + 1
            for (agent, phone), n in counts.items():
                if n >= words.NAME_MIN_VOCATIVES or (agent, phone, name) in called:
                    called[(agent, phone, name)] = called.get((agent, phone, name), 0) + n
        named = [(n, agent, phone, name) for (agent, phone, name), n in called.items()]
        if not named:
            return None
        named.sort(key=lambda c: (-c[0], c[1], c[2]))
        if len(named) == 1:
            return named[0][1:]
        if len(named) > NAMED_CANDIDATES and named[NAMED_CANDIDATES][0] == named[0][0]:
            # A common name many people have as theirs (a thousand Marías): the one whose
            # items best answer the rest of the question, one search per name among them all.
            return self._best_answer(q, where, named[:NAMED_POOL])

        def answers(candidate: tuple[int, str, str, str]) -> float:
            _, agent, phone, name = candidate
            rest = words.without_names(q.query, {name})
            hits = self._indexer.space.retrieve(
                q.mode,
                rest,
                where=f"{where} AND agent = {quote(agent)} AND phone = {quote(phone)}",
                k=1,
                min_score=q.threshold,
                own_words=True,
            )
            return hits[0].score if hits else float("-inf")

        best = max(named[:NAMED_CANDIDATES], key=answers)  # the first of equals: most named
        return best[1:]

    def _best_answer(
        self, q: StaffQuery, where: str, named: list[tuple[int, str, str, str]]
    ) -> tuple[str, str, str] | None:
        """Of these people (count, agent, phone, name), the one with the item that best
        matches the question without the name; None when none has a match."""
        best: tuple[float, str, str, str] | None = None
        for name in sorted({c[3] for c in named}):
            people: dict[str, list[str]] = {}
            for _, agent, phone, n in named:
                if n == name:
                    people.setdefault(agent, []).append(phone)
            among = " OR ".join(
                f"(agent = {quote(agent)} AND phone IN ({', '.join(quote(p) for p in phones)}))"
                for agent, phones in sorted(people.items())
            )
            hits = self._indexer.space.retrieve(
                q.mode,
                words.without_names(q.query, {name}),
                where=f"{where} AND ({among})",
                k=1,
                min_score=q.threshold,
                own_words=True,
            )
            if hits and (best is None or hits[0].score > best[0]):
                best = (hits[0].score, hits[0].row.agent, hits[0].row.phone, name)
        return best[1:] if best is not None else None

    @staticmethod
    def _allowed_agents(principal: Principal, asked: list[str] | None) -> list[str] | None:
        """The agents to search: None means all (admin, or staff with no list)."""
        principal.require_operator()
        if asked is None:
            return None if principal.is_admin or not principal.agents else list(principal.agents)
        for agent in asked:
            principal.require_read(agent)
        return asked

    @staticmethod
    def _where(q: StaffQuery, agents: list[str] | None) -> str:
        kinds = ", ".join(quote(KIND_OF[k]) for k in q.kinds)
        parts = [f"kind IN ({kinds})"]
        if agents is not None:
            parts.append("agent IN (" + ", ".join(quote(a) for a in agents) + ")")
        if q.phone is not None:
            parts.append(f"phone = {quote(q.phone)}")
        if q.since is not None:
            parts.append(f"created_at >= {quote(q.since)}")
        if q.until is not None:
            parts.append(f"created_at <= {quote(q.until)}")
        return " AND ".join(parts)

    def _current_first(self, found: list[Found]) -> list[Found]:
        """What is true now first: a replaced fact goes right under the current fact of its
        chain (fetched when the search did not find it), which takes the place, score and
        relevance of the best match in the chain. A chain whose end is not current (deleted,
        rejected) is left as found."""
        heads: dict[str, Memory] = {}
        for f in found:
            if f.kind == "facts" and f.status == "superseded":
                end = self._chain_head(f.id)
                if end is not None:
                    heads[f.id] = end
        if not heads:
            return found
        groups: dict[str, list[Found]] = {}
        for f in found:
            key = (
                heads[f.id].id
                if f.id in heads
                else f.id
                if f.kind == "facts"
                else f"{f.kind}:{f.id}"
            )
            groups.setdefault(key, []).append(f)
        out: list[Found] = []
        for members in groups.values():
            head_id = next((heads[m.id].id for m in members if m.id in heads), None)
            if head_id is None:
                out += members
                continue
            head = next((m for m in members if m.id == head_id and m.kind == "facts"), None)
            best = max(members, key=lambda m: m.relevance)
            if head is None:
                memory = heads[next(m.id for m in members if m.id in heads)]
                head = Found(
                    "facts",
                    memory.agent,
                    memory.phone,
                    memory.id,
                    memory.content,
                    best.score,
                    memory.created_at,
                    memory.status,
                    [],
                )
            head = replace(head, score=max(head.score, best.score), relevance=best.relevance)
            rest = [replace(m, replaced_by=head_id) for m in members if m.id != head_id]
            out += [head, *rest]
        return out

    def _chain_head(self, memory_id: str) -> Memory | None:
        """The current fact at the end of a replaced fact's chain, or None."""
        seen = {memory_id}
        current = self._store.memories_by_ids([memory_id]).get(memory_id)
        while current is not None and current.superseded_by is not None:
            if current.superseded_by in seen:
                return None  # a cycle: no current fact to show
            seen.add(current.superseded_by)
            current = self._store.memories_by_ids([current.superseded_by]).get(
                current.superseded_by
            )
        if current is None or current.id == memory_id:
            return None
        if current.invalid_at is not None or current.status != "approved":
            return None
        return current

    def _still_there(self, hits: list[Hit]) -> list[Found]:
        """Keep hits whose source still exists, with its current text."""
        turns = self._store.messages_by_ids(
            [int(h.row.ref_id) for h in hits if h.row.kind == "turn"]
        )
        facts = self._store.memories_by_ids([h.row.ref_id for h in hits if h.row.kind == "fact"])
        summaries = self._store.summaries_of(
            [h.row.ref_id for h in hits if h.row.kind == "summary"]
        )
        out: list[Found] = []
        for hit in hits:
            row, score = hit.row, round(hit.score, 4)
            if row.kind == "turn" and (m := turns.get(int(row.ref_id))):
                out.append(_found_turn(m, score))
            elif row.kind == "fact" and (f := facts.get(row.ref_id)):
                out.append(
                    Found(
                        "facts",
                        f.agent,
                        f.phone,
                        f.id,
                        f.content,
                        score,
                        f.created_at,
                        "superseded" if f.invalid_at is not None else f.status,
                        [],
                    )
                )
            elif row.kind == "summary" and (s := summaries.get(row.ref_id)):
                agent, phone, summary = s
                out.append(
                    Found(
                        "summaries",
                        agent,
                        phone,
                        row.ref_id,
                        summary.text,
                        score,
                        summary.updated_at,
                        "current",
                        [],
                    )
                )
        return out


def _found_turn(message: Message, score: float) -> Found:
    status = "archived" if message.archived else "recent"
    return Found(
        "turns",
        message.agent,
        message.phone,
        str(message.id),
        message.content,
        round(score, 4),
        message.created_at,
        status,
        [],
    )


def _in_time(message: Message, q: StaffQuery) -> bool:
    return (q.since is None or message.created_at >= q.since) and (
        q.until is None or message.created_at <= q.until
    )


def _row_id(found: Found) -> str:
    """The index row a result was found as."""
    return f"{KIND_OF[found.kind]}:{found.id}"


def _short(found: Found) -> bool:
    return found.kind == "turns" and words.is_short(found.text)


def highlight(text: str, query: str) -> list[tuple[int, int]]:
    """[start, end) spans of the query's words (3+ letters, or digits) in the text."""
    words = {
        w.lower()
        for w in _WORD.findall(query)
        if (len(w) >= 3 or w.isdigit()) and w.lower() not in _STOPWORDS
    }
    return [(m.start(), m.end()) for m in _WORD.finditer(text) if m.group().lower() in words]


def _filters(q: StaffQuery) -> dict[str, Any]:
    return {
        "agents": q.agents,
        "phone": q.phone,
        "kinds": list(q.kinds),
        "mode": q.mode,
        "since": q.since,
        "until": q.until,
        "limit": q.limit,
        "offset": q.offset,
        "threshold": q.threshold,
        "min_relevance": q.min_relevance,
    }
