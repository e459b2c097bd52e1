"""Long-term memories managed directly: list, search, update, delete, review, re-embed."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from embeddings.index import Hit, quote
from embeddings.relevance import scale_for
from server import redacted_fields
from server.agent_settings import AgentSettings
from server.clock import Clock, format_time, utc_now
from server.errors import NotFound
from server.hooks import Hooks
from server.indexer import Indexer, fact_row, search_deeper
from server.redaction import redact, redact_json
from server.relevance import RESCORE_DEPTH, rescored
from server.store import HistoryEntry, Memory, MemoryFilter, Store

REVIEW_DAYS = 7


@dataclass(frozen=True, slots=True)
class MemoryQuery:
    """A search over an agent's memories; None means no filter. No defaults here: they are the
    request's (server/schemas.py MemorySearch), in one place."""

    query: str
    limit: int
    threshold: float
    mode: str
    where: MemoryFilter = field(default_factory=MemoryFilter)
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Scored:
    memory: Memory
    score: float  # semantic: on the relevance scale; keyword: BM25; hybrid: fused
    cosine: float | None = None  # semantic: the raw cosine


class MemoryBook:
    """An agent's memories. Every change is recorded in the memory's history and queued for
    the indexer; changes to content are embedded before the call returns."""

    def __init__(
        self,
        store: Store,
        indexer: Indexer,
        agents: AgentSettings,
        *,
        clock: Clock = utc_now,
        hooks: Hooks | None = None,
    ) -> None:
        self._store = store
        self._indexer = indexer
        self._agents = agents
        self._clock = clock
        self._hooks = hooks or Hooks()

    def get(self, agent: str, memory_id: str) -> Memory:
        """A memory of this agent; another agent's memory does not exist for the caller."""
        memory = self._store.memories_by_ids([memory_id]).get(memory_id)
        if memory is None or memory.agent != agent:
            raise NotFound("Memory not found")
        return memory

    def page(
        self,
        agent: str,
        where: MemoryFilter,
        *,
        order_by: str = "created_at",
        descending: bool = True,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[Memory], int, int]:
        """A page of the agent's memories; scope ids are looked up as stored (redacted)."""
        where = redacted_fields.memory_filter(where, self._agents.resolve(agent).redact)
        return self._store.list_memories(
            agent, where, order_by=order_by, descending=descending, limit=limit, offset=offset
        )

    def update(self, agent: str, memory_id: str, changes: dict[str, Any], actor: str) -> Memory:
        memory = self.get(agent, memory_id)
        kinds = self._agents.resolve(agent).redact  # redacted as when it was stored
        if "content" in changes:
            changes["content"] = redact(changes["content"], kinds)
        if "metadata" in changes:
            changes["metadata"] = redact_json(changes["metadata"], kinds)
        changes = {k: v for k, v in changes.items() if getattr(memory, k) != v}
        if not changes:
            return memory
        self._hooks.reach("memories.loaded")
        updated = self._store.update_memory(memory, changes=changes, action="update", actor=actor)
        return self._indexed(updated)

    def review(self, agent: str, memory_id: str, *, approve: bool, actor: str) -> Memory:
        memory = self.get(agent, memory_id)
        status = "approved" if approve else "rejected"
        self._hooks.reach("memories.loaded")
        if memory.status == status and memory.expires_at is None:
            return memory  # approving an approved memory changes nothing, and records nothing
        updated = self._store.update_memory(
            memory,
            changes={"status": status, "expires_at": None},
            action="approve" if approve else "reject",
            actor=actor,
        )
        return self._indexed(updated)

    def _indexed(self, updated: Memory | None) -> Memory:
        """The stored memory after a change, embedded; NotFound when it vanished meanwhile
        (deleted, or its person forgotten, after it was read): then nothing was written."""
        if updated is None:
            raise NotFound("Memory not found")
        # An approval may have applied its supersession: the replaced one is indexed again.
        replaced = [updated.supersedes] if updated.supersedes else []
        self._indexer.index_now("fact", [updated.id, *replaced])
        return updated

    def delete(self, agent: str, memory_id: str, actor: str) -> bool:
        found = self._store.memories_by_ids([memory_id]).get(memory_id)
        if found is None or found.agent != agent:
            return False
        self._hooks.reach("memories.loaded")
        if not self._store.delete_memories([found], actor=actor):
            return False  # deleted by someone else meanwhile
        self._indexer.index_now("fact", [memory_id])
        return True

    def clear(self, agent: str, phone: str | None, actor: str) -> int:
        memories = self._store.agent_memories(agent, phone)
        count = self._store.delete_memories(memories, actor=actor)
        self._indexer.index_now("fact", [m.id for m in memories])
        return count

    def history(self, agent: str, memory_id: str) -> list[HistoryEntry]:
        entries = self._store.memory_history([memory_id])
        if not entries or entries[0].agent != agent:
            raise NotFound("Memory not found")
        return entries

    def stored_embedding(self, agent: str, memory_id: str) -> list[float] | None:
        """The memory's vector as the index holds it now; None until the indexer has it."""
        self.get(agent, memory_id)
        found = self._indexer.space.index.get([f"fact:{memory_id}"])
        if f"fact:{memory_id}" not in found:
            return None
        return [float(x) for x in found[f"fact:{memory_id}"][1]]

    def regenerate_embedding(self, agent: str, memory_id: str) -> list[float]:
        """Embed the memory again now and store the vector; returns it. The memory is read
        again under the indexer's lock, which a forget holds while it erases: a memory deleted
        or forgotten since the first read is not written back (NotFound)."""
        self.get(agent, memory_id)
        self._hooks.reach("memories.before_reembed")
        with self._indexer.lock:
            memory = self.get(agent, memory_id)
            space = self._indexer.space
            vector = space.encoder.encode_bulk([memory.content])
            space.index.upsert([fact_row(memory)], vector)
        return [float(x) for x in vector[0]]

    def pending_status(self, agent: str, by_admin: bool) -> tuple[str, str | None]:
        """(status, expires_at) for a new memory: pending for 7 days when the agent reviews."""
        if by_admin or not self._agents.resolve(agent).review:
            return "approved", None
        return "pending", format_time(self._clock() + timedelta(days=REVIEW_DAYS))

    def search(self, agent: str, q: MemoryQuery) -> list[Scored]:
        """Best first: cosine at or above the threshold (semantic), full text (keyword), or
        both fused by score (hybrid). Filters apply inside LanceDB; metadata, which
        the index does not hold, is checked on a wider candidate set. Scope ids and metadata
        are looked up as they were stored (redacted)."""
        kinds = self._agents.resolve(agent).redact
        q = replace(
            q,
            where=redacted_fields.memory_filter(q.where, kinds),
            metadata=redacted_fields.metadata_filter(q.metadata, kinds),
        )
        depth = q.limit if not q.metadata else min(1000, q.limit * 20)
        where = self._where(agent, q)
        space = self._indexer.space

        cosines: dict[str, float] = {}

        def keep(hits: list[Hit]) -> list[Scored]:
            current = self._store.memories_by_ids([h.row.ref_id for h in hits])
            return [
                Scored(memory, round(hit.score, 4), cosines.get(hit.row.id))
                for hit in hits
                if (q.mode != "semantic" or hit.score >= q.threshold)
                and (memory := current.get(hit.row.ref_id)) is not None
                and memory.agent == agent
                and _matches(memory, q)
            ]

        def search(k: int) -> list[Hit]:
            if q.mode != "semantic":
                return space.retrieve(q.mode, q.query, where=where, k=k, min_score=q.threshold)
            # On the relevance scale: ranked by the centred query, then scored exactly.
            scale = scale_for(space.encoder.name)
            searched = (
                self._store.count_current_facts(agent, q.where.phone) if scale.calibrated else 1
            )
            vector = space.encoder.encode_query([q.query])[0]
            hits = space.index.search(
                scale.centred_query(vector), where=where, k=k, with_vectors=scale.calibrated
            )
            return rescored(scale, vector, hits, cosines, searched)

        return search_deeper(
            search,
            keep,
            want=q.limit,
            depth=max(depth, RESCORE_DEPTH) if q.mode == "semantic" else depth,
        )

    @staticmethod
    def _where(agent: str, q: MemoryQuery) -> str:
        """The same filters as a LanceDB filter: they run inside the index."""
        parts = ["kind = 'fact'", f"agent = {quote(agent)}"]
        whole_chain = q.where.valid_at is not None or q.where.include_superseded
        for column, value in q.where.equalities():
            if column == "status" and whole_chain:
                # a replaced memory is indexed as 'superseded' (server/indexer.py, fact_row),
                # whatever its status: the store's row decides (_matches)
                parts.append(f"status IN ({quote(value)}, 'superseded')")
            else:
                parts.append(f"{column} = {quote(value)}")
        if not whole_chain:
            parts.append("status != 'superseded'")
        if q.where.start_date is not None:
            parts.append(f"created_at >= {quote(q.where.start_date)}")
        if q.where.end_date is not None:
            parts.append(f"created_at <= {quote(q.where.end_date)}")
        return " AND ".join(parts)


def _matches(memory: Memory, q: MemoryQuery) -> bool:
    """The index may lag: check the filters again on the stored memory, and the metadata."""
    if not q.where.matches(memory):
        return False
    return all(memory.metadata.get(k) == v for k, v in (q.metadata or {}).items())
