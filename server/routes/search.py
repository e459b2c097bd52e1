"""Staff search across people and agents, and its audit log."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from server import validation
from server.deps import PrincipalDep, ServicesDep
from server.relevance import in_words
from server.schemas import AuditList, AuditOut, StaffHit, StaffSearchIn, StaffSearchOut
from server.search import StaffQuery

router = APIRouter(prefix="/v1", tags=["staff search"])


@router.post("/search", response_model=StaffSearchOut)
def staff_search(
    principal: PrincipalDep, body: StaffSearchIn, services: ServicesDep
) -> StaffSearchOut:
    """Facts, archived and recent turns, and summaries, across the agents the key may read;
    by meaning, words, or both. Every search is recorded in the audit log."""
    query = StaffQuery(
        query=body.query,
        agents=[validation.agent_name(a) for a in body.agents] if body.agents else None,
        phone=validation.phone_number(body.phone) if body.phone else None,
        kinds=tuple(body.kinds or ("facts", "turns", "summaries")),
        mode=body.mode,
        since=validation.timestamp(body.since, what="since") if body.since else None,
        until=validation.timestamp(body.until, what="until") if body.until else None,
        limit=body.limit,
        offset=body.offset,
        threshold=body.threshold,
        min_relevance=body.min_relevance,
    )
    page = services.search.search(principal, query)
    items = [
        StaffHit(
            kind=f.kind,
            agent=f.agent,
            phone=f.phone,
            id=f.id,
            text=f.text,
            score=f.score,
            created_at=f.created_at,
            status=f.status,
            highlights=f.highlights,
            relevance=f.relevance,
            match=in_words(f.relevance),
            replaced_by=f.replaced_by,
            cosine=f.cosine,
        )
        for f in page.items
    ]
    return StaffSearchOut(
        items=items,
        next_offset=body.offset + body.limit if page.more else None,
        floor=page.floor,
        hidden=page.hidden,
    )


@router.get("/audit", response_model=AuditList)
def audit_log(
    principal: PrincipalDep,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before_id: Annotated[int | None, Query(ge=1, le=2**62)] = None,
) -> AuditList:
    """Staff searches, newest first (admin only)."""
    principal.require_admin()
    entries = services.store.audit_entries(limit=limit + 1, before_id=before_id)
    more = len(entries) > limit
    entries = entries[:limit]
    return AuditList(
        items=[
            AuditOut(
                id=e.id,
                at=e.at,
                key_id=e.key_id,
                query=e.query,
                filters=e.filters,
                result_count=e.result_count,
                results=e.results,
            )
            for e in entries
        ],
        next_before_id=entries[-1].id if more and entries else None,
    )
