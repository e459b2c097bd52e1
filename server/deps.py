"""What a route needs, as Annotated dependencies: services, the caller, checked path values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from server import validation
from server.auth import KeyRing, Principal
from server.compaction import Compaction
from server.config import Settings
from server.conversation import MemoryService
from server.indexer import Indexer
from server.memory_book import MemoryBook
from server.search import StaffSearch
from server.store import Store
from server.upgrade import Upgrade


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
    upgrade: Upgrade | None = None  # a model upgrade started at this start-up, if any


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


BEARER = HTTPBearer(
    auto_error=False,  # a missing key is our 401 in our error shape, not FastAPI's
    description="An API key: `Authorization: Bearer <key>`. Missing or unknown: 401; a key "
    "without the right: 403.",
)


def bearer_secret(authorization: str | None) -> str | None:
    """The key in an Authorization header, or None unless it is `Bearer <key>`."""
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip() or None


def get_principal(
    services: Annotated[Services, Depends(get_services)],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
) -> Principal:
    return services.keys.authenticate(credentials.credentials if credentials else None)


def _agent(agent: Annotated[str, Path(description="Agent id: 1-64 of a-z 0-9 _ -")]) -> str:
    return validation.agent_name(agent)


def _phone(
    phone: Annotated[
        str,
        Path(
            description="The person's phone in international form ('+34 600 11 12 22' is fine;"
            " URL-encoded), stored in E.164"
        ),
    ],
) -> str:
    return validation.phone_number(phone)


ServicesDep = Annotated[Services, Depends(get_services)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
AgentDep = Annotated[str, Depends(_agent)]
PhoneDep = Annotated[str, Depends(_phone)]
