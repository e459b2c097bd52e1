"""Compaction: fold a person's old turns into the rolling summary and durable facts with a
model, then archive them. Runs in the background, one person at a time, retried with backoff."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from embeddings.calibration import calibration_for
from embeddings.index import quote
from server import words
from server.agent_settings import AgentConfig, AgentSettings
from server.clock import Clock, format_time, utc_now
from server.hooks import Hooks
from server.indexer import Indexer
from server.llm import Decision, ExtractedFact, ModelError, Stored, Summariser
from server.locks import KeyedLocks
from server.redaction import redact
from server.store import Memory, Message, Store

log = logging.getLogger(__name__)

REVIEW_DAYS = 7
DUPLICATE_CANDIDATES = 3  # stored facts compared again, in the symmetric form, with a new one
UPDATE_CANDIDATES = 3  # the person's current facts most like a new one, shown to the model
BACKOFF_S = (30.0, 60.0, 120.0, 300.0, 900.0)


# A claim outlives any model call with its retries; a crashed replica's runs out after it.
CLAIM_S = 600.0
# People queued for a background compaction or backing off after a failed one, at most: while
# the model is down every active person would wait here, one entry each, for as long as it
# stays down. Past it a request is dropped; the person's next turn asks again.
MAX_WAITING_PEOPLE = 10_000


@dataclass(frozen=True, slots=True)
class Compacted:
    archived: int
    facts_added: int
    summary_through_id: int | None
    facts_seen_again: int = 0


class Compaction:
    """Decides when to compact, calls the model first and writes every effect in one SQLite
    transaction, so a crash or a model failure loses nothing."""

    def __init__(
        self,
        store: Store,
        indexer: Indexer,
        agents: AgentSettings,
        model: Summariser | None,
        *,
        duplicate_threshold: float | None = None,
        clock: Clock = utc_now,
        backoff_s: Sequence[float] = BACKOFF_S,
        hooks: Hooks | None = None,
    ) -> None:
        self._store = store
        self._indexer = indexer
        self._agents = agents
        self._model = model
        self._duplicate_setting = duplicate_threshold  # None: the model's calibrated value
        self._clock = clock
        self._backoff_s = tuple(backoff_s)
        self._running = KeyedLocks()  # never two compactions of one person at once
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._queued: set[tuple[str, str]] = set()
        self._failures: dict[tuple[str, str], tuple[int, float]] = {}  # (count, retry at)
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None
        self._warned_no_model = False
        self._hooks = hooks or Hooks()
        # Background compactions failed in a row, whoever they were for (0 after a success),
        # and why the last one failed: /health says degraded while they keep failing.
        self.failing = 0
        self.last_error: str | None = None
        # This process's name on the compaction claims it takes (server/store/memories.py).
        self._holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._drop_dead_claims()

    @property
    def uses_model(self) -> bool:
        return self._model is not None

    # -- when ---------------------------------------------------------------------------------

    def after_turn(
        self, agent: str, phone: str, role: str, config: AgentConfig | None = None
    ) -> None:
        """Called after a turn is stored (with the agent's settings, when the caller has them).
        Without a model, archiving is a quick SQL update and happens at once; with one,
        compaction is queued after an assistant turn."""
        config = config or self._agents.resolve(agent)
        if self._store.waiting_turns(agent, phone) <= config.compact_trigger:
            return
        if self._model is None:
            self.run(agent, phone, force=False)
        elif role == "assistant":
            self.request(agent, phone)

    def request(self, agent: str, phone: str) -> None:
        """Queue a background compaction, unless one is queued or backing off."""
        key = (agent, phone)
        with self._guard:
            failed = self._failures.get(key)
            if key in self._queued or (failed and failed[1] > time.monotonic()):
                return
            if failed is None and len(self._queued) + len(self._failures) >= MAX_WAITING_PEOPLE:
                return
            self._queued.add(key)
        self._queue.put(key)

    # -- the work -----------------------------------------------------------------------------

    def run(self, agent: str, phone: str, *, force: bool) -> Compacted:
        """Compact one person now. force: even below the trigger. Raises ModelError, having
        changed nothing, when the model fails."""
        config = self._agents.resolve(agent)
        with self._running.hold((agent, phone)):
            # Across replicas too: the one holding the claim compacts, the others skip.
            if not self._store.claim_compaction(agent, phone, self._holder, seconds=CLAIM_S):
                log.debug("compaction of a person is claimed by another replica; skipped")
                summary = self._store.summary(agent, phone)
                return Compacted(0, 0, summary.through_id if summary else None)
            try:
                return self._run_claimed(agent, phone, config, force=force)
            finally:
                self._store.release_compaction(agent, phone, self._holder)

    def _drop_dead_claims(self) -> None:
        """Claims left by processes of this host that died (a crash mid-compaction): dropped
        at once, so a restart compacts those people again without waiting for the claims to
        run out (a dead host's claims run out after CLAIM_S)."""
        for holder in self._store.compaction_claims_of(f"{socket.gethostname()}:"):
            try:
                pid = int(holder.split(":")[1])
                os.kill(pid, 0)
            except (IndexError, ValueError, ProcessLookupError):
                dropped = self._store.drop_compaction_claims(holder)
                log.info("dropped %d compaction claims of a process that is gone", dropped)
            except PermissionError:
                pass  # alive, another user's

    def _run_claimed(
        self, agent: str, phone: str, config: AgentConfig, *, force: bool
    ) -> Compacted:
        waiting = self._store.recent_turns(agent, phone, 1_000_000)  # newest first
        summary = self._store.summary(agent, phone)
        through = summary.through_id if summary else None
        enough = len(waiting) > (config.compact_keep if force else config.compact_trigger)
        if not enough or len(waiting) <= config.compact_keep:
            return Compacted(0, 0, through)
        old = list(reversed(waiting[config.compact_keep :]))  # oldest first
        if self._model is None:
            return self._archive_only(agent, phone, old, through)
        return self._fold(agent, phone, old, summary.text if summary else None, config)

    def _archive_only(
        self, agent: str, phone: str, old: list[Message], through: int | None
    ) -> Compacted:
        if not self._warned_no_model:
            log.info("no model configured: compaction archives turns without a summary or facts")
            self._warned_no_model = True
        archived = self._store.archive_turns(agent, phone, through_id=old[-1].id)
        self._indexer.wake()
        return Compacted(len(archived), 0, through)

    def _fold(
        self, agent: str, phone: str, old: list[Message], previous: str | None, config: AgentConfig
    ) -> Compacted:
        assert self._model is not None
        review = config.review
        transcript = "\n".join(
            f"{'Person' if m.role == 'user' else 'Assistant'}: {m.content}" for m in old
        )
        # The model first: if it fails, nothing has been written.
        # The turns were redacted when stored; what the model writes is redacted too (it may
        # have been told a secret in a turn stored before redaction was turned on).
        summary = redact(self._model.summarise(previous, transcript), config.redact)
        extraction = self._model.extract(transcript)
        extracted = [
            dataclasses.replace(f, content=redact(f.content, config.redact))
            for f in extraction.facts
        ]
        name = _said_name(extraction.name, old, config)
        decided = self._decide(agent, phone, extracted)
        undecided = [f for f, d in decided if d is None]
        added = [f for f, d in decided if d is not None and d.action == "add"]
        # A fact the model saw next to the stored ones and called new is not checked against
        # them again ("dentist on 21 May" is not a repeat of "dentist on 14 May", though their
        # cosine may pass the duplicate threshold); against each other, all new facts are.
        new, seen_again = self._dedupe(agent, phone, undecided + added, trusted=len(added))
        facts = [self._memory(agent, phone, f, old, review) for f in new]
        replaced: set[str] = set()
        for fact, decision in decided:
            if decision is None or decision.target is None:
                continue
            if decision.action == "duplicate" and decision.target not in seen_again:
                seen_again.append(decision.target)
            elif decision.action == "supersede":
                # One replacement per stored fact: a second one is kept as a plain new fact.
                target = decision.target if decision.target not in replaced else None
                replaced.add(decision.target)
                facts.append(self._memory(agent, phone, fact, old, review, supersedes=target))
        self._hooks.reach("compaction.model_answered")
        applied = self._store.apply_compaction(
            agent,
            phone,
            summary=summary,
            through_id=old[-1].id,
            new_facts=facts,
            seen_again=seen_again,
            actor=f"model:{self._model.model}",
            from_turns=[m.id for m in old],
            name=(name, words.name_words(name)) if name is not None else None,
        )
        if applied is None:
            # Forgotten (or compacted) while the model ran: what it made from those turns
            # must not be stored.
            log.info("compaction dropped: the turns it read are gone")
            return Compacted(0, 0, None)
        # Facts are indexed now, so the next compaction's duplicate check sees them (and the
        # ones they replaced leave the searches of current facts).
        self._indexer.index_now("fact", applied.stored + sorted(replaced))
        self._indexer.wake()
        return Compacted(len(applied.archived), len(applied.stored), old[-1].id, applied.seen_again)

    def _decide(
        self, agent: str, phone: str, extracted: list[ExtractedFact]
    ) -> list[tuple[ExtractedFact, Decision | None]]:
        """Each new fact with the model's decision against the person's current facts most
        like it (add, supersede one, duplicate of one, skip); None where there is nothing to
        decide (no stored fact near it) or the model's answer for it cannot be used: those
        go through the duplicate check, as before this step existed. A failed call decides
        nothing and fails nothing: the summary and the facts are kept."""
        if not extracted or self._model is None:
            return [(f, None) for f in extracted]
        space = self._indexer.space
        where = (
            f"agent = {quote(agent)} AND phone = {quote(phone)} AND kind = 'fact'"
            " AND status IN ('approved', 'pending')"
        )
        vectors = space.encoder.encode_query([f.content for f in extracted])
        nearest = [
            [h.row.ref_id for h in space.index.search(v, where=where, k=UPDATE_CANDIDATES)]
            for v in vectors
        ]
        stored = self._store.memories_by_ids(sorted({i for ids in nearest for i in ids}))
        shown = [
            [
                Stored(m.id, m.content, m.since)
                for i in ids
                if (m := stored.get(i)) is not None
                and m.invalid_at is None
                and m.status in ("approved", "pending")
            ]
            for ids in nearest
        ]
        if not any(shown):
            return [(f, None) for f in extracted]
        try:
            decisions = self._model.decide_updates(extracted, shown)
        except ModelError as exc:
            log.warning("the fact-update call failed; the duplicate check decides: %s", exc)
            return [(f, None) for f in extracted]
        except Exception:  # a parser defect must not cost the facts: fall back, loudly
            log.exception("the fact-update answer could not be used; the duplicate check decides")
            return [(f, None) for f in extracted]
        return [
            (fact, decision)
            for fact, decision in zip(extracted, decisions, strict=True)
            if decision is None or decision.action != "skip"
        ]

    def _dedupe(
        self, agent: str, phone: str, extracted: list[ExtractedFact], trusted: int = 0
    ) -> tuple[list[ExtractedFact], list[str]]:
        """Split extracted facts into new ones and ids of existing facts they repeat (cosine at
        or above the duplicate threshold), also among themselves.

        Whether two facts say the same is a symmetric comparison: both sides are embedded in
        the query form (e5's authors' advice), while the index holds facts in the passage form.
        So the index gives the few nearest stored facts, and those are compared again with the
        new fact in the symmetric form. The last `trusted` facts are compared with the other new
        ones only: the model has judged them against the stored ones already."""
        if not extracted:
            return [], []
        space = self._indexer.space
        threshold = (
            self._duplicate_setting
            if self._duplicate_setting is not None
            else calibration_for(space.encoder.name).duplicate_threshold
        )
        contents = [f.content for f in extracted]
        stored = space.encoder.encode(contents)
        # Not a replaced fact: "lives in Madrid" again, after a move away and back, is new.
        where = (
            f"agent = {quote(agent)} AND phone = {quote(phone)} AND kind = 'fact'"
            " AND status != 'superseded'"
        )
        first_trusted = len(extracted) - trusted  # the last `trusted` facts: new, as decided
        nearest = [
            space.index.search(stored[i], where=where, k=DUPLICATE_CANDIDATES)
            if i < first_trusted
            else []
            for i in range(len(extracted))
        ]
        candidates = sorted({h.row.content or h.row.text for hits in nearest for h in hits})
        symmetric = space.encoder.encode_query(contents + candidates)
        mine, theirs = symmetric[: len(contents)], symmetric[len(contents) :]
        position = {text: j for j, text in enumerate(candidates)}
        new: list[ExtractedFact] = []
        kept: list[int] = []
        seen_again: list[str] = []
        for i, fact in enumerate(extracted):
            scored = [
                (float(mine[i] @ theirs[position[h.row.content or h.row.text]]), h.row.ref_id)
                for h in nearest[i]
            ]
            repeats = [ref for score, ref in sorted(scored, reverse=True) if score >= threshold]
            if repeats:
                if repeats[0] not in seen_again:
                    seen_again.append(repeats[0])
                continue
            if any(float(mine[i] @ mine[j]) >= threshold for j in kept):
                continue
            kept.append(i)
            new.append(fact)
        return new, seen_again

    def _memory(
        self,
        agent: str,
        phone: str,
        fact: ExtractedFact,
        turns: list[Message],
        review: bool,
        supersedes: str | None = None,
    ) -> Memory:
        """A new fact from these turns: true since the newest of them."""
        now = self._clock()
        stamp = format_time(now)
        return Memory(
            id="mem_" + secrets.token_hex(8),
            agent=agent,
            phone=phone,
            content=fact.content,
            type=fact.type,
            status="pending" if review else "approved",
            confidence=fact.confidence,
            source="extracted",
            metadata={},
            session_id=None,
            task_id=None,
            graph_id=None,
            source_turns=[m.id for m in turns],
            seen_count=1,
            created_at=stamp,
            updated_at=stamp,
            expires_at=format_time(now + timedelta(days=REVIEW_DAYS)) if review else None,
            valid_from=turns[-1].created_at if turns else stamp,
            supersedes=supersedes,
        )

    def expire_pending(self) -> int:
        """Pending memories nobody reviewed within 7 days become rejected."""
        expired = self._store.expire_pending(format_time(self._clock()))
        if expired:
            log.info("review expired for %d pending memories", len(expired))
            self._indexer.wake()
        return len(expired)

    # -- the background worker ------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="compaction", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=60)

    @property
    def waiting(self) -> int:
        """People queued or backing off now (at most MAX_WAITING_PEOPLE)."""
        with self._guard:
            return len(self._queued | self._failures.keys())

    def idle(self) -> bool:
        """True when nothing is queued or running (tests wait for it)."""
        with self._guard:
            return not self._queued and self._queue.empty()

    def _loop(self) -> None:
        last_sweep = -math.inf  # the first sweep runs at start-up, then one a minute
        while True:
            try:
                key = self._queue.get(timeout=1.0)
            except queue.Empty:
                key = ("", "")
            if key is None:
                return
            if time.monotonic() - last_sweep > 60:
                last_sweep = time.monotonic()
                self._safely(self.expire_pending)
            self._retry_due()
            if key != ("", ""):
                self._compact_queued(key)

    def _compact_queued(self, key: tuple[str, str]) -> None:
        try:
            self.run(*key, force=False)
        except ModelError as exc:
            with self._guard:
                count = self._failures.get(key, (0, 0.0))[0]
                delay = self._backoff_s[min(count, len(self._backoff_s) - 1)]
                self._failures[key] = (count + 1, time.monotonic() + delay)
                self.failing += 1
                self.last_error = exc.message
            log.warning(
                "compaction failed (attempt %d), retry in %.0f s: %s", count + 1, delay, exc
            )
        except Exception as exc:
            with self._guard:
                self.failing += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("compaction crashed; the turns stay waiting")
        else:
            with self._guard:
                self._failures.pop(key, None)
                self.failing = 0
                self.last_error = None
        finally:
            with self._guard:
                self._queued.discard(key)

    def _retry_due(self) -> None:
        now = time.monotonic()
        with self._guard:
            due = [
                k for k, (_, at) in self._failures.items() if at <= now and k not in self._queued
            ]
            for key in due:
                self._queued.add(key)
        for key in due:
            self._queue.put(key)

    def _safely(self, job: Callable[[], object]) -> None:
        try:
            job()
        except Exception:
            log.exception("background job failed")


def _said_name(name: str | None, turns: Sequence[Message], config: AgentConfig) -> str | None:
    """The name the model read in the turns, kept only when every word of it is one the
    person writes or one the agent addresses them by (a model that makes a name up, or takes
    the agent's for theirs, names no one), none of it is a name the person addresses the
    agent by, and redaction leaves it as it is."""
    if name is None or redact(name, config.redact) != name:
        return None
    wanted = set(words.name_words(name))
    if not wanted:
        return None
    sides = words.learn_addressees(
        [(m.role, m.content) for m in turns], words.learn_names([m.content for m in turns])
    )
    if wanted & sides.get("assistant", frozenset()):
        return None
    theirs = {words.fold(w) for m in turns if m.role == "user" for w in words.word_list(m.content)}
    return name if wanted <= theirs | sides.get("user", frozenset()) else None
