"""Turns of a conversation: store, list, export, and forget a person; their opt-out (STOP)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status

from server import validation
from server.deps import AgentDep, PhoneDep, PrincipalDep, ServicesDep
from server.errors import InvalidInput, NameNotSet, NotFound
from server.schemas import (
    CompactOut,
    DeletedCounts,
    ExportedMemory,
    ExportOut,
    ForgetOut,
    HistoryOut,
    MessageCreate,
    MessageOut,
    MessagePage,
    MessageStored,
    MovedCounts,
    MoveIn,
    MoveOut,
    OptOutOut,
    PersonNameIn,
    PersonNameOut,
    SummaryOut,
)
from server.store import Memory, Message

router = APIRouter(prefix="/v1/agents/{agent}/people/{phone}", tags=["conversation"])


@router.post(
    "/messages",
    status_code=status.HTTP_201_CREATED,
    response_model=MessageStored,
    responses={200: {"model": MessageStored, "description": "Duplicate event_id: nothing stored."}},
)
def store_message(
    principal: PrincipalDep,
    agent: AgentDep,
    phone: PhoneDep,
    body: MessageCreate,
    services: ServicesDep,
    response: Response,
) -> MessageStored:
    """Store one turn. The same event_id again stores nothing and answers 200."""
    principal.require_write(agent)
    content = validation.text_content(body.content, limit=services.settings.max_message_chars)
    number = validation.phone_number(body.number, code="invalid_number") if body.number else None
    created_at = validation.timestamp(body.created_at, stored=True) if body.created_at else None
    name = validation.provided_name(body.name) if body.name is not None else None
    message_id, stored = services.memory.remember(
        agent,
        phone,
        role=body.role,
        content=content,
        event_id=body.event_id,
        number=number,
        created_at=created_at,
        name=name,
    )
    if not stored:
        response.status_code = status.HTTP_200_OK
    return MessageStored(id=message_id, stored=stored)


@router.get("/messages", response_model=MessagePage)
def list_messages(
    principal: PrincipalDep,
    agent: AgentDep,
    phone: PhoneDep,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before_id: Annotated[int | None, Query(ge=1, le=2**62)] = None,
    after_id: Annotated[int | None, Query(ge=0, le=2**62)] = None,
) -> MessagePage:
    """Recent and archived turns, newest first, a page at a time: the newest (before
    `before_id`, when given), or the `limit` turns just after `after_id` (the staff page opens
    a timeline around a turn this way); `newer_after_id` pages on towards the newest."""
    principal.require_read(agent)
    if before_id is not None and after_id is not None:
        raise InvalidInput("give before_id or after_id, not both", "conflicting_cursors")
    items, older, newer = services.memory.list_messages(
        agent, phone, limit=limit, before_id=before_id, after_id=after_id
    )
    return MessagePage(
        items=[message_out(m) for m in items], next_before_id=older, newer_after_id=newer
    )


@router.get("/export", response_model=ExportOut)
def export_person(
    principal: PrincipalDep, agent: AgentDep, phone: PhoneDep, services: ServicesDep
) -> ExportOut:
    """Everything stored about the person for this agent."""
    principal.require_read(agent)
    found = services.memory.export_person(agent, phone)
    summary = found.summary
    return ExportOut(
        agent=agent,
        phone=phone,
        exported_at=services.memory.now(),
        messages=[message_out(m) for m in found.messages],
        summary=SummaryOut(
            text=summary.text, through_id=summary.through_id, updated_at=summary.updated_at
        )
        if summary
        else None,
        memories=[
            ExportedMemory(
                **memory_fields(m),
                history=[
                    HistoryOut(
                        action=h.action,
                        actor=h.actor,
                        old_content=h.old_content,
                        new_content=h.new_content,
                        at=h.at,
                    )
                    for h in found.history.get(m.id, [])
                ],
            )
            for m in found.memories
        ],
        opted_out_at=found.opted_out_at,
        name=PersonNameOut(name=found.name.name, updated_at=found.name.updated_at)
        if found.name
        else None,
    )


@router.put(
    "/name",
    response_model=PersonNameOut,
    responses={422: {"description": "A name with no letter, or too long (invalid_name)."}},
)
def set_name(
    principal: PrincipalDep,
    agent: AgentDep,
    phone: PhoneDep,
    body: PersonNameIn,
    services: ServicesDep,
) -> PersonNameOut:
    """Set the name the agent knows the person by. The context returns it; the excerpts'
    search leaves it out (the turns that say a person's name are greetings, not what they
    said); staff search finds whom a question names by it. The same name again changes
    nothing. A forget erases it; a move takes it to the new number."""
    principal.require_write(agent)
    done = services.memory.set_person_name(agent, phone, validation.person_name(body.name))
    return PersonNameOut(name=done.name, updated_at=done.updated_at)


@router.get(
    "/name",
    response_model=PersonNameOut,
    responses={404: {"description": "No name is set for the person (name_not_set)."}},
)
def read_name(
    principal: PrincipalDep, agent: AgentDep, phone: PhoneDep, services: ServicesDep
) -> PersonNameOut:
    """The person's name, when one is set."""
    principal.require_read(agent)
    found = services.memory.person_name(agent, phone)
    if found is None:
        raise NameNotSet("no name is set for this person")
    return PersonNameOut(name=found.name, updated_at=found.updated_at)


@router.delete("/name", status_code=status.HTTP_204_NO_CONTENT)
def clear_name(
    principal: PrincipalDep, agent: AgentDep, phone: PhoneDep, services: ServicesDep
) -> Response:
    """Clear the person's name (nothing else of theirs changes); 204 whether one was set or
    not."""
    principal.require_write(agent)
    services.memory.clear_person_name(agent, phone)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/compact", response_model=CompactOut)
def compact_person(
    principal: PrincipalDep, agent: AgentDep, phone: PhoneDep, services: ServicesDep
) -> CompactOut:
    """Fold all but the newest compact_keep waiting turns out of the recent window now."""
    principal.require_write(agent)
    done = services.memory.compact(agent, phone)
    return CompactOut(
        archived=done.archived,
        facts_added=done.facts_added,
        summary_through_id=done.summary_through_id,
    )


@router.delete("", response_model=ForgetOut)
def forget_person(
    principal: PrincipalDep, agent: AgentDep, phone: PhoneDep, services: ServicesDep
) -> ForgetOut:
    """Erase the person: turns, summary, memories and their history, vectors."""
    principal.require_write(agent)
    gone = services.memory.forget_person(agent, phone)
    return ForgetOut(
        deleted=DeletedCounts(
            messages=gone.messages,
            memories=gone.memories,
            summaries=gone.summaries,
            vectors=gone.vectors,
        )
    )


@router.post(
    "/move",
    response_model=MoveOut,
    response_model_by_alias=True,
    responses={
        404: {"description": "Nothing is stored for that number (person_not_found)."},
        422: {"description": "An invalid new number (invalid_phone), or the same (same_phone)."},
    },
)
def move_person(
    principal: PrincipalDep, agent: AgentDep, phone: PhoneDep, body: MoveIn, services: ServicesDep
) -> MoveOut:
    """The person changed number: their turns, summary, memories with their history,
    opt-out and vectors move to `to`, in one transaction, merged in the order the turns
    arrived if `to` already has memory. The old number then holds nothing. The audit log
    records who moved whom."""
    principal.require_write(agent)
    new = validation.phone_number(body.to)
    moved = services.memory.move_person(agent, phone, new, actor=principal.key_id)
    return MoveOut.model_validate(
        {
            "from": phone,
            "to": new,
            "moved": MovedCounts(
                messages=moved.messages,
                memories=moved.memories,
                summaries=moved.summaries,
                opt_outs=moved.opt_outs,
                names=moved.names,
            ),
            "merged": moved.merged,
        }
    )


@router.post("/opt-out", response_model=OptOutOut)
def opt_out(
    principal: PrincipalDep, agent: AgentDep, phone: PhoneDep, services: ServicesDep
) -> OptOutOut:
    """The person opted out (STOP), as the messaging provider reports it. With the agent's
    opt_out_policy keep (the default) their memory stays and `opted_out_at` shows in the
    context and the export until their next user turn; with forget they are forgotten as by
    DELETE, and nothing of theirs is kept. Answers 200 for a person with no data too."""
    principal.require_write(agent)
    done = services.memory.opt_out(agent, phone)
    return OptOutOut(opted_out_at=done.opted_out_at, policy=done.policy)


@router.get(
    "/opt-out",
    response_model=OptOutOut,
    responses={404: {"description": "The person has not opted out (or wrote again since)."}},
)
def read_opt_out(
    principal: PrincipalDep, agent: AgentDep, phone: PhoneDep, services: ServicesDep
) -> OptOutOut:
    """When the person opted out, while they are opted out (the staff page's timeline shows
    it); 404 when they are not."""
    principal.require_read(agent)
    at = services.memory.opted_out_at(agent, phone)
    if at is None:
        raise NotFound("this person has not opted out")
    policy = services.memory.agent_config(agent).opt_out_policy
    return OptOutOut(opted_out_at=at, policy=policy)


def message_out(message: Message) -> MessageOut:
    return MessageOut(
        id=message.id,
        role=message.role,
        content=message.content,
        created_at=message.created_at,
        archived=message.archived,
        event_id=message.event_id,
        number=message.number,
    )


def memory_fields(memory: Memory) -> dict[str, Any]:
    return {
        "id": memory.id,
        "agent": memory.agent,
        "phone": memory.phone,
        "content": memory.content,
        "type": memory.type,
        "status": memory.status,
        "confidence": memory.confidence,
        "source": memory.source,
        "metadata": memory.metadata,
        "session_id": memory.session_id,
        "task_id": memory.task_id,
        "graph_id": memory.graph_id,
        "created_at": memory.created_at,
        "updated_at": memory.updated_at,
        "expires_at": memory.expires_at,
        "valid_from": memory.since,
        "invalid_at": memory.invalid_at,
        "superseded_by": memory.superseded_by,
        "supersedes": memory.supersedes,
        "source_message_ids": list(memory.source_turns),
    }
