"""What a route needs, as Annotated dependencies: services, the caller, checked path values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Path, Request

from server import validation
from server.auth import KeyRing, Principal
from server.compaction import Compaction
from server.config import Settings
from server.indexer import Indexer
from server.memories import MemoryBook
from server.memory import MemoryService
from server.search import StaffSearch
from server.store import Store


@dataclass
class Services:
    """Everything the app opened at start-up; one per app."""

    settings: Settings
    store: Store
    keys: KeyRing
    memory: MemoryService
    indexer: Indexer
    compaction: Compaction
    book: MemoryBook
    search: StaffSearch


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def get_principal(
    services: Annotated[Services, Depends(get_services)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Principal:
    secret = None
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer":
            secret = value.strip()
    return services.keys.authenticate(secret)


def _agent(agent: Annotated[str, Path(description="Agent id: 1-64 of a-z 0-9 _ -")]) -> str:
    return validation.agent_name(agent)


def _phone(phone: Annotated[str, Path(description="The person's phone in E.164")]) -> str:
    return validation.phone_number(phone)


ServicesDep = Annotated[Services, Depends(get_services)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
AgentDep = Annotated[str, Depends(_agent)]
PhoneDep = Annotated[str, Depends(_phone)]
