"""The records the store reads and writes, and how a row becomes one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Message:
    id: int
    agent: str
    phone: str
    event_id: str | None
    number: str | None
    role: str
    content: str
    created_at: str
    archived: bool


@dataclass(frozen=True, slots=True)
class Summary:
    text: str
    through_id: int | None
    updated_at: str


@dataclass(frozen=True, slots=True)
class Memory:
    id: str
    agent: str
    phone: str | None
    content: str
    type: str
    status: str
    confidence: float | None
    source: str
    metadata: dict[str, Any]
    session_id: str | None
    task_id: str | None
    graph_id: str | None
    source_turns: list[int]
    seen_count: int
    created_at: str
    updated_at: str
    expires_at: str | None
    # When it became true (the source turn's time, else its creation; None: created_at), when
    # it stopped (None while current) and the memory that replaced it.
    valid_from: str | None = None
    invalid_at: str | None = None
    superseded_by: str | None = None
    supersedes: str | None = None  # pending: the memory it replaces once approved

    @property
    def since(self) -> str:
        return self.valid_from or self.created_at

    def true_at(self, moment: str) -> bool:
        """True at `moment` (an ISO time): it had become true and had not yet stopped."""
        return self.since <= moment and (self.invalid_at is None or moment < self.invalid_at)


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    memory_id: str
    agent: str
    action: str
    actor: str
    old_content: str | None
    new_content: str | None
    at: str


@dataclass(frozen=True, slots=True)
class ApiKey:
    id: str
    scope: str
    agents: list[str]
    created_at: str
    revoked_at: str | None


@dataclass(frozen=True, slots=True)
class PersonErasure:
    messages: int
    memories: int
    summaries: int
    history: int


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """Filters of the memory list; None means no filter."""

    phone: str | None = None
    status: str | None = None
    type: str | None = None
    session_id: str | None = None
    task_id: str | None = None
    graph_id: str | None = None
    start_date: str | None = None
    end_date: str | None = None
    as_of: int | None = None  # the page mark: memories stored later are left out
    # Validity: at a time (the API's `as_of=<time>`: memories true then), else current ones
    # only unless include_superseded.
    valid_at: str | None = None
    include_superseded: bool = False

    EQUALITY = ("phone", "status", "type", "session_id", "task_id", "graph_id")

    def equalities(self) -> list[tuple[str, str]]:
        """(column, value) of the equality filters that are set."""
        return [(c, v) for c in self.EQUALITY if (v := getattr(self, c)) is not None]

    def matches(self, memory: Memory) -> bool:
        """The filters, checked on a memory in Python (the index may lag behind SQLite)."""
        if any(getattr(memory, column) != value for column, value in self.equalities()):
            return False
        if self.start_date is not None and memory.created_at < self.start_date:
            return False
        if self.end_date is not None and memory.created_at > self.end_date:
            return False
        if self.valid_at is not None:
            return memory.true_at(self.valid_at)
        return self.include_superseded or memory.invalid_at is None

    def sql(self, agent: str, as_of: int, seq: str) -> tuple[str, tuple[Any, ...]]:
        """The WHERE clause and its arguments; `seq` is the column of insertion order."""
        clauses = ["agent = ?", f"{seq} <= ?"]
        args: list[Any] = [agent, as_of]
        for column, value in self.equalities():
            clauses.append(f"{column} = ?")
            args.append(value)
        if self.start_date is not None:
            clauses.append("created_at >= ?")
            args.append(self.start_date)
        if self.end_date is not None:
            clauses.append("created_at <= ?")
            args.append(self.end_date)
        if self.valid_at is not None:
            clauses.append("COALESCE(valid_from, created_at) <= ?")
            clauses.append("(invalid_at IS NULL OR invalid_at > ?)")
            args += [self.valid_at, self.valid_at]
        elif not self.include_superseded:
            clauses.append("invalid_at IS NULL")
        return " AND ".join(clauses), tuple(args)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    at: str
    key_id: str
    query: str
    filters: dict[str, Any]
    result_count: int
    results: list[list[str]]


@dataclass(frozen=True, slots=True)
class OutboxItem:
    id: int
    kind: str  # turn | fact | summary
    ref_id: str
    agent: str
    phone: str | None


MESSAGE_COLUMNS = "id, agent, phone, event_id, number, role, content, created_at, archived"
MEMORY_COLUMNS = (
    "id, agent, phone, content, type, status, confidence, source, metadata, session_id, task_id,"
    " graph_id, source_turns, seen_count, created_at, updated_at, expires_at, valid_from,"
    " invalid_at, superseded_by, supersedes"
)


def message_of(row: Any) -> Message:
    return Message(
        id=row["id"],
        agent=row["agent"],
        phone=row["phone"],
        event_id=row["event_id"],
        number=row["number"],
        role=row["role"],
        content=row["content"],
        created_at=row["created_at"],
        archived=bool(row["archived"]),
    )


def memory_of(row: Any) -> Memory:
    return Memory(
        id=row["id"],
        agent=row["agent"],
        phone=row["phone"],
        content=row["content"],
        type=row["type"],
        status=row["status"],
        confidence=row["confidence"],
        source=row["source"],
        metadata=json.loads(row["metadata"]),
        session_id=row["session_id"],
        task_id=row["task_id"],
        graph_id=row["graph_id"],
        source_turns=json.loads(row["source_turns"]),
        seen_count=row["seen_count"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        expires_at=row["expires_at"],
        valid_from=row["valid_from"],
        invalid_at=row["invalid_at"],
        superseded_by=row["superseded_by"],
        supersedes=row["supersedes"],
    )


def key_of(row: Any) -> ApiKey:
    return ApiKey(
        id=row["id"],
        scope=row["scope"],
        agents=json.loads(row["agents"]),
        created_at=row["created_at"],
        revoked_at=row["revoked_at"],
    )
