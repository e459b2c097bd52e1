"""Long-term memories of an agent: create and read (the rest of the API comes with review)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status

from server import validation
from server.deps import AgentDep, PrincipalDep, ServicesDep
from server.routes.messages import memory_fields
from server.schemas import MemoryCreate, MemoryOut

router = APIRouter(prefix="/v1/agents/{agent}/memories", tags=["memories"])

MemoryId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=MemoryOut)
def create_memory(
    principal: PrincipalDep, agent: AgentDep, body: MemoryCreate, services: ServicesDep
) -> MemoryOut:
    """Store a memory; it is embedded and searchable when this call returns. With the agent's
    review setting on, memories not created by an admin start pending."""
    principal.require_write(agent)
    content = validation.text_content(body.content, limit=services.settings.max_memory_chars)
    phone = validation.phone_number(body.phone) if body.phone else None
    review = services.memory.agent_config(agent).review and not principal.is_admin
    memory = services.memory.add_memory(
        agent,
        phone,
        validation.one_line(content, limit=services.settings.max_memory_chars),
        type=body.type,
        status="pending" if review else "approved",
        confidence=body.confidence,
        actor=principal.key_id,
        metadata=body.metadata,
        session_id=body.session_id,
        task_id=body.task_id,
        graph_id=body.graph_id,
    )
    return MemoryOut(**memory_fields(memory))


@router.get("/{memory_id}", response_model=MemoryOut)
def get_memory(
    principal: PrincipalDep, agent: AgentDep, memory_id: MemoryId, services: ServicesDep
) -> MemoryOut:
    principal.require_read(agent)
    return MemoryOut(**memory_fields(services.memory.get_memory(agent, memory_id)))
