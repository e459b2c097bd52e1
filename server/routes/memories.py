"""Long-term memories of an agent: add, list, search, read, update, delete, review, re-embed."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Response, status
from fastapi.responses import JSONResponse

from server import limits, validation
from server.config import Settings
from server.deps import AgentDep, PrincipalDep, ServicesDep
from server.errors import InvalidInput, NotFound, error_body
from server.memory_book import MemoryQuery
from server.routes.messages import memory_fields
from server.schemas import (
    EmbeddingOut,
    HistoryOut,
    MemoriesCleared,
    MemoryCreate,
    MemoryCreated,
    MemoryDeleted,
    MemoryHistoryOut,
    MemoryList,
    MemoryOut,
    MemorySearch,
    MemorySearchOut,
    MemoryUpdate,
    MemoryWithEmbedding,
    ScoredMemoryOut,
)
from server.store import Memory, MemoryFilter

router = APIRouter(prefix="/v1/agents/{agent}/memories", tags=["memories"])

MemoryId = Annotated[
    str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$", description="mem_...")
]


def _out(memory: Memory) -> MemoryOut:
    return MemoryOut(**memory_fields(memory))


def _optional_phone(phone: str | None) -> str | None:
    return validation.phone_number(phone) if phone else None


def _metadata(value: dict[str, Any], settings: Settings) -> dict[str, Any]:
    return limits.metadata_within(
        value, max_bytes=settings.max_metadata_bytes, max_depth=settings.max_metadata_depth
    )


def _optional_time(value: str | None, what: str) -> str | None:
    return validation.timestamp(value, what=what) if value else None


def _page_mark_or_time(as_of: str | None) -> tuple[int | None, str | None]:
    """The listing's `as_of`: a whole number is an earlier page's mark (memories stored
    later are left out), anything else must be a time (the memories true then)."""
    if as_of is None or not as_of.strip():
        return None, None
    text = as_of.strip()
    if text.isascii() and text.isdigit():  # "²" and "٣" are digits too, but no int()
        mark = int(text[:20])
        if len(text) > 20 or mark > 2**62:
            raise InvalidInput("as_of: a page mark is at most 2**62", "invalid_request")
        return mark, None
    return None, validation.timestamp(as_of, what="as_of")


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=MemoryCreated,
    responses={
        200: {
            "model": MemoryCreated,
            "description": "An identical current memory (same person, type and content,"
            " pending or approved) is stored already: that one, as it is; nothing is written.",
        }
    },
)
def create_memory(
    principal: PrincipalDep,
    agent: AgentDep,
    body: MemoryCreate,
    services: ServicesDep,
    response: Response,
) -> MemoryCreated:
    """Store a memory; it is embedded and searchable when this call returns. With the agent's
    review setting on, memories not created by an admin start pending for 7 days. The same
    memory again (after content is made one line; case kept) is not stored twice: 200 with the
    one stored, until it is deleted or rejected."""
    principal.require_write(agent)
    limit = services.settings.max_memory_chars
    content = validation.one_line(validation.text_content(body.content, limit=limit), limit=limit)
    state, expires_at = services.book.pending_status(agent, principal.is_admin)
    memory, stored = services.memory.store_memory(
        agent,
        _optional_phone(body.phone),
        content,
        type=body.type,
        status=state,
        confidence=body.confidence,
        actor=principal.key_id,
        metadata=_metadata(body.metadata, services.settings),
        session_id=body.session_id,
        task_id=body.task_id,
        graph_id=body.graph_id,
        expires_at=expires_at,
        supersedes=body.supersedes,
    )
    if not stored:
        response.status_code = status.HTTP_200_OK
    return MemoryCreated(**memory_fields(memory), stored=stored)


@router.get("", response_model=MemoryList)
def list_memories(
    principal: PrincipalDep,
    agent: AgentDep,
    services: ServicesDep,
    phone: str | None = None,
    status_: Annotated[
        Literal["pending", "approved", "rejected"] | None, Query(alias="status")
    ] = None,
    type_: Annotated[Literal["fact", "preference", "context"] | None, Query(alias="type")] = None,
    session_id: Annotated[str | None, Query(max_length=200)] = None,
    task_id: Annotated[str | None, Query(max_length=200)] = None,
    graph_id: Annotated[str | None, Query(max_length=200)] = None,
    start_date: str | None = None,
    end_date: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    order_by: Literal["created_at", "updated_at"] = "created_at",
    order: Literal["asc", "desc"] = "desc",
    as_of: Annotated[
        str | None,
        Query(
            max_length=64,
            description="An ISO 8601 time: the memories true then, instead of the current ones."
            " A whole number is the page mark of an earlier page (`as_of` in its answer).",
        ),
    ] = None,
    include_superseded: Annotated[
        bool, Query(description="Also memories another one has replaced (the whole chain).")
    ] = False,
) -> MemoryList:
    """Memories of the agent, filtered, newest first by default, a page at a time: the current
    ones (not replaced by another) unless `as_of` or `include_superseded` says otherwise."""
    principal.require_read(agent)
    mark, valid_at = _page_mark_or_time(as_of)
    where = MemoryFilter(
        phone=_optional_phone(phone),
        status=status_,
        type=type_,
        session_id=session_id,
        task_id=task_id,
        graph_id=graph_id,
        start_date=_optional_time(start_date, "start_date"),
        end_date=_optional_time(end_date, "end_date"),
        as_of=mark,
        valid_at=valid_at,
        include_superseded=include_superseded,
    )
    items, total, mark = services.book.page(
        agent, where, order_by=order_by, descending=order == "desc", limit=limit, offset=offset
    )
    return MemoryList(items=[_out(m) for m in items], total=total, as_of=mark)


@router.delete("", response_model=MemoriesCleared)
def clear_memories(
    principal: PrincipalDep, agent: AgentDep, services: ServicesDep, phone: str | None = None
) -> MemoriesCleared:
    """Delete every memory of the agent, or of one person when `phone` is given."""
    principal.require_write(agent)
    count = services.book.clear(agent, _optional_phone(phone), principal.key_id)
    return MemoriesCleared(deleted=count)


@router.post("/search", response_model=MemorySearchOut)
def search_memories(
    principal: PrincipalDep, agent: AgentDep, body: MemorySearch, services: ServicesDep
) -> MemorySearchOut:
    """Memories by meaning (cosine at or above `threshold`), by words (`keyword`), or both
    (`hybrid`), with filters; best first, each with its score."""
    principal.require_read(agent)
    query = MemoryQuery(
        query=body.query,
        limit=body.limit,
        threshold=body.threshold,
        mode=body.mode,
        where=MemoryFilter(
            phone=_optional_phone(body.phone),
            status=body.status,
            type=body.type,
            session_id=body.session_id,
            task_id=body.task_id,
            graph_id=body.graph_id,
            start_date=_optional_time(body.start_date, "start_date"),
            end_date=_optional_time(body.end_date, "end_date"),
            valid_at=_optional_time(body.as_of, "as_of"),
            include_superseded=body.include_superseded,
        ),
        metadata=None if body.metadata is None else _metadata(body.metadata, services.settings),
    )
    found = services.book.search(agent, query)
    return MemorySearchOut(
        items=[
            ScoredMemoryOut(**memory_fields(s.memory), score=s.score, cosine=s.cosine)
            for s in found
        ]
    )


@router.get("/{memory_id}", response_model=MemoryWithEmbedding, response_model_exclude_unset=True)
def get_memory(
    principal: PrincipalDep,
    agent: AgentDep,
    memory_id: MemoryId,
    services: ServicesDep,
    include_embedding: Annotated[
        bool, Query(description="Add the stored vector as `embedding`")
    ] = False,
) -> MemoryWithEmbedding:
    """One memory; with include_embedding=true also its vector (null until it is indexed)."""
    principal.require_read(agent)
    memory = MemoryWithEmbedding(**memory_fields(services.book.get(agent, memory_id)))
    if include_embedding:
        memory.embedding = services.book.stored_embedding(agent, memory_id)
    return memory


@router.patch("/{memory_id}", response_model=MemoryOut)
def update_memory(
    principal: PrincipalDep,
    agent: AgentDep,
    memory_id: MemoryId,
    body: MemoryUpdate,
    services: ServicesDep,
) -> MemoryOut:
    """Change content, metadata or type; new content is embedded before the reply."""
    principal.require_write(agent)
    changes = body.model_dump(exclude_unset=True, exclude_none=True)
    if "metadata" in changes:
        changes["metadata"] = _metadata(changes["metadata"], services.settings)
    if "content" in changes:
        limit = services.settings.max_memory_chars
        changes["content"] = validation.one_line(
            validation.text_content(changes["content"], limit=limit), limit=limit
        )
    return _out(services.book.update(agent, memory_id, changes, principal.key_id))


@router.delete("/{memory_id}", response_model=MemoryDeleted)
def delete_memory(
    principal: PrincipalDep, agent: AgentDep, memory_id: MemoryId, services: ServicesDep
) -> MemoryDeleted:
    principal.require_write(agent)
    return MemoryDeleted(deleted=services.book.delete(agent, memory_id, principal.key_id))


@router.post(
    "/{memory_id}/embedding",
    response_model=EmbeddingOut,
    responses={404: {"model": EmbeddingOut, "description": "Memory not found"}},
)
def regenerate_embedding(
    principal: PrincipalDep, agent: AgentDep, memory_id: MemoryId, services: ServicesDep
) -> EmbeddingOut | JSONResponse:
    """Embed the memory again with the current model and return the vector."""
    principal.require_write(agent)
    try:
        vector = services.book.regenerate_embedding(agent, memory_id)
    except NotFound:
        body = {"success": False, "message": "Memory not found", "embedding": None}
        body.update(error_body(404, "not_found", "Memory not found"))
        return JSONResponse(body, status_code=404)
    return EmbeddingOut(success=True, message="Embedding regenerated", embedding=vector)


@router.post("/{memory_id}/approve", response_model=MemoryOut)
def approve_memory(
    principal: PrincipalDep, agent: AgentDep, memory_id: MemoryId, services: ServicesDep
) -> MemoryOut:
    """Approve a memory (admin): it may now reach a context."""
    principal.require_admin()
    return _out(services.book.review(agent, memory_id, approve=True, actor=principal.key_id))


@router.post("/{memory_id}/reject", response_model=MemoryOut)
def reject_memory(
    principal: PrincipalDep, agent: AgentDep, memory_id: MemoryId, services: ServicesDep
) -> MemoryOut:
    """Reject a memory (admin): it never reaches a context."""
    principal.require_admin()
    return _out(services.book.review(agent, memory_id, approve=False, actor=principal.key_id))


@router.get("/{memory_id}/history", response_model=MemoryHistoryOut)
def memory_history(
    principal: PrincipalDep, agent: AgentDep, memory_id: MemoryId, services: ServicesDep
) -> MemoryHistoryOut:
    """Every change of the memory, oldest first: time, actor (key id), old and new content."""
    principal.require_read(agent)
    entries = services.book.history(agent, memory_id)
    return MemoryHistoryOut(
        items=[
            HistoryOut(
                action=e.action,
                actor=e.actor,
                old_content=e.old_content,
                new_content=e.new_content,
                at=e.at,
            )
            for e in entries
        ]
    )
