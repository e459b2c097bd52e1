"""The context for an agent's next model call."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from server.deps import AgentDep, PhoneDep, PrincipalDep, ServicesDep
from server.memory import ContextRequest
from server.schemas import ContextOut, ExcerptOut, FactOut, Turn

router = APIRouter(prefix="/v1/agents/{agent}/people/{phone}", tags=["conversation"])

# Left out, a value comes from the agent's settings, else the server's (MEMORY_...) settings,
# whose defaults are given here.
_DEFAULT = "Default: the agent's setting, else the server's; out of the box"


@router.get("/context", response_model=ContextOut)
def build_context(
    principal: PrincipalDep,
    agent: AgentDep,
    phone: PhoneDep,
    services: ServicesDep,
    query: Annotated[
        str | None,
        Query(
            max_length=4000,
            description="What to match facts against; default the newest user message.",
        ),
    ] = None,
    budget_chars: Annotated[
        int | None,
        Query(ge=0, le=10_000_000, description=f"History budget in characters. {_DEFAULT} 12000."),
    ] = None,
    max_messages: Annotated[
        int | None, Query(ge=0, le=1000, description=f"Most history turns. {_DEFAULT} 60.")
    ] = None,
    k: Annotated[int | None, Query(ge=0, le=200, description=f"Most facts. {_DEFAULT} 10.")] = None,
    threshold: Annotated[
        float | None,
        Query(ge=-1.0, le=1.0, description=f"Cosine floor for facts. {_DEFAULT} 0.7."),
    ] = None,
    excerpt_k: Annotated[
        int | None,
        Query(ge=0, le=200, description=f"Most archived-turn excerpts. {_DEFAULT} 10."),
    ] = None,
    excerpt_threshold: Annotated[
        float | None,
        Query(ge=-1.0, le=1.0, description=f"Cosine floor for semantic excerpts. {_DEFAULT} 0."),
    ] = None,
    excerpt_mode: Annotated[
        Literal["semantic", "keyword", "hybrid"] | None,
        Query(description=f"How excerpts are found. {_DEFAULT} keyword."),
    ] = None,
) -> ContextOut:
    """Facts, summary, days since the previous message, and the recent turns within budget."""
    principal.require_read(agent)
    context = services.memory.build_context(
        agent,
        phone,
        ContextRequest(
            query=query or None,
            budget_chars=budget_chars,
            max_messages=max_messages,
            k=k,
            threshold=threshold,
            excerpt_k=excerpt_k,
            excerpt_threshold=excerpt_threshold,
            excerpt_mode=excerpt_mode,
        ),
    )
    return ContextOut(
        notes=context.notes,
        history=[Turn(role=m.role, content=m.content) for m in context.history],
        facts=[
            FactOut(id=f.id, content=f.content, type=f.type, score=f.score) for f in context.facts
        ],
        excerpts=[
            ExcerptOut(
                id=e.id, role=e.role, content=e.content, created_at=e.created_at, score=e.score
            )
            for e in context.excerpts
        ],
        summary=context.summary,
        days_since_last=context.days_since_last,
        opted_out_at=context.opted_out_at,
    )
