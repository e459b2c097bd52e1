"""The context for an agent's next model call."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from server import validation
from server.config import CALIBRATED, ExcerptMode, Settings
from server.conversation import ContextRequest
from server.deps import AgentDep, PhoneDep, PrincipalDep, ServicesDep
from server.schemas import ContextOut, ExcerptOut, FactOut, Turn

router = APIRouter(prefix="/v1/agents/{agent}/people/{phone}", tags=["conversation"])


def _default(setting: str, per_agent: str | None = None) -> str:
    """Where a value left out comes from: the agent's setting (GET .../settings) when there is
    one, else the server's; and the server's out of the box, read from Settings so that the
    schema cannot say another default than the one served."""
    value = Settings.model_fields[setting].default
    server = f"MEMORY_{setting.upper()}"
    source = f"the agent's `{per_agent}` setting, else {server}" if per_agent else server
    return f"Default: {source}; out of the box {CALIBRATED if value is None else value}."


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
        Query(
            ge=0,
            le=10_000_000,
            description=f"History budget in characters. {_default('budget_chars')}",
        ),
    ] = None,
    max_messages: Annotated[
        int | None,
        Query(ge=0, le=1000, description=f"Most history turns. {_default('max_messages')}"),
    ] = None,
    k: Annotated[
        int | None,
        Query(ge=0, le=200, description=f"Most facts. {_default('top_k', 'top_k')}"),
    ] = None,
    threshold: Annotated[
        float | None,
        Query(
            ge=-1.0,
            le=1.0,
            description=f"Cosine floor for facts. {_default('similarity_threshold', 'threshold')}",
        ),
    ] = None,
    excerpt_k: Annotated[
        int | None,
        Query(
            ge=0,
            le=200,
            description=f"Most archived-turn excerpts. {_default('excerpt_k', 'excerpt_k')}",
        ),
    ] = None,
    excerpt_budget_chars: Annotated[
        int | None,
        Query(
            ge=0,
            le=1_000_000,
            description="Characters of excerpts: windows of archived turns around the best"
            " hits, best first, until spent."
            f" {_default('excerpt_budget_chars', 'excerpt_budget_chars')}",
        ),
    ] = None,
    excerpt_threshold: Annotated[
        float | None,
        Query(
            ge=-1.0,
            le=1.0,
            description="Cosine floor for semantic excerpts (and the semantic half of hybrid)."
            f" {_default('excerpt_threshold', 'excerpt_threshold')}",
        ),
    ] = None,
    excerpt_mode: Annotated[
        ExcerptMode | None,
        Query(
            description="How excerpts are found: semantic, keyword, or hybrid (both fused)."
            f" {_default('excerpt_mode', 'excerpt_mode')}"
        ),
    ] = None,
    as_of: Annotated[
        str | None,
        Query(
            max_length=64,
            description="An ISO 8601 time: the facts true then (superseded later or not), for"
            " audits and disputes; history and excerpts are as today.",
        ),
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
            excerpt_budget_chars=excerpt_budget_chars,
            excerpt_threshold=excerpt_threshold,
            excerpt_mode=excerpt_mode,
            as_of=validation.timestamp(as_of, what="as_of") if as_of else None,
        ),
    )
    return ContextOut(
        notes=context.notes,
        history=[Turn(role=m.role, content=m.content) for m in context.history],
        facts=[
            FactOut(
                id=f.id,
                content=f.content,
                type=f.type,
                score=f.score,
                valid_from=f.valid_from,
                cosine=f.cosine,
            )
            for f in context.facts
        ],
        excerpts=[
            ExcerptOut(
                id=e.id,
                role=e.role,
                content=e.content,
                created_at=e.created_at,
                score=e.score,
                window=e.window,
                hit=e.hit,
                relevance=e.relevance,
                cosine=e.cosine,
            )
            for e in context.excerpts
        ],
        summary=context.summary,
        days_since_last=context.days_since_last,
        opted_out_at=context.opted_out_at,
        excerpts_text=context.excerpts_text,
        name=context.name,
    )
