"""API keys: create, list, revoke (admin only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status

from server.deps import PrincipalDep, ServicesDep
from server.schemas import KeyCreate, KeyCreated, KeyList, KeyOut, KeyRevoked

router = APIRouter(prefix="/v1/keys", tags=["keys"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=KeyCreated)
def create_key(principal: PrincipalDep, body: KeyCreate, services: ServicesDep) -> KeyCreated:
    """Create a key; its secret is in this response only."""
    principal.require_admin()
    made = services.keys.create(body.scope, body.agents)
    return KeyCreated(id=made.key.id, key=made.secret, scope=made.key.scope, agents=made.key.agents)


@router.get("", response_model=KeyList)
def list_keys(principal: PrincipalDep, services: ServicesDep) -> KeyList:
    principal.require_admin()
    return KeyList(
        items=[
            KeyOut(
                id=k.id,
                scope=k.scope,
                agents=k.agents,
                created_at=k.created_at,
                revoked_at=k.revoked_at,
            )
            for k in services.keys.list()
        ]
    )


@router.delete("/{key_id}", response_model=KeyRevoked)
def revoke_key(
    principal: PrincipalDep,
    key_id: Annotated[str, Path(max_length=64)],
    services: ServicesDep,
) -> KeyRevoked:
    principal.require_admin()
    newly = services.keys.revoke(key_id)
    return KeyRevoked(id=key_id, revoked=True, already_revoked=not newly)
