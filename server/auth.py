"""API keys: creation, hashing, lookup and what each scope may do."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field

from server.errors import Forbidden, InvalidInput, NotFound, Unauthorized
from server.store import ApiKey, Store

# fullmatch everywhere: "$" would also match before a final "\n" ("alpha\n" passing as "alpha").
AGENT_PATTERN = re.compile(r"[a-z0-9_-]{1,64}")
BOOTSTRAP_ID = "admin-bootstrap"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key's id and its scope."""

    key_id: str
    role: str  # admin | agent | staff
    agent: str | None = None
    agents: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def may_write(self, agent: str) -> bool:
        return self.is_admin or (self.role == "agent" and self.agent == agent)

    def may_read(self, agent: str) -> bool:
        if self.may_write(agent):
            return True
        return self.role == "staff" and (not self.agents or agent in self.agents)

    def require_write(self, agent: str) -> None:
        if not self.may_write(agent):
            raise Forbidden(f"this key may not write agent '{agent}'")

    def require_read(self, agent: str) -> None:
        if not self.may_read(agent):
            raise Forbidden(f"this key may not read agent '{agent}'")

    def require_admin(self) -> None:
        if not self.is_admin:
            raise Forbidden("this action needs an admin key")

    def require_operator(self) -> None:
        """Operations data (metrics): admin and staff keys, never an agent's key."""
        if self.role not in ("admin", "staff"):
            raise Forbidden("this action needs an admin or staff key")


@dataclass(frozen=True, slots=True)
class NewKey:
    key: ApiKey
    secret: str


def hash_key(secret: str) -> str:
    # Keys are 256-bit random strings, so a plain SHA-256 is enough: nothing to brute-force.
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def parse_scope(scope: str, agents: list[str] | None) -> tuple[str, list[str]]:
    """Validate a scope string and its agent list; returns (scope, agents)."""
    agents = list(agents or [])
    for agent in agents:
        if not AGENT_PATTERN.fullmatch(agent):
            raise InvalidInput(f"invalid agent name: {agent!r}", "invalid_agent")
    if scope in ("admin", "staff"):
        if agents and scope == "admin":
            raise InvalidInput("an admin key takes no agent list", "invalid_scope")
        return scope, sorted(set(agents))
    if scope.startswith("agent:"):
        agent = scope.removeprefix("agent:")
        if not AGENT_PATTERN.fullmatch(agent):
            raise InvalidInput(f"invalid agent in scope: {agent!r}", "invalid_agent")
        if agents:
            raise InvalidInput("an agent key takes no agent list", "invalid_scope")
        return scope, []
    raise InvalidInput("scope must be 'admin', 'staff' or 'agent:<agent>'", "invalid_scope")


class KeyRing:
    """Creates, checks and revokes keys; secrets are never stored, only their hashes."""

    def __init__(self, store: Store, admin_key: str | None) -> None:
        self._store = store
        self._admin_hash = hash_key(admin_key) if admin_key else None

    def create(self, scope: str, agents: list[str] | None = None) -> NewKey:
        scope, agent_list = parse_scope(scope, agents)
        secret = "mk_" + secrets.token_urlsafe(32)
        key = self._store.insert_key(
            "key_" + secrets.token_hex(8), hash_key(secret), scope, agent_list
        )
        return NewKey(key=key, secret=secret)

    def authenticate(self, secret: str | None) -> Principal:
        if not secret:
            raise Unauthorized("missing API key: send Authorization: Bearer <key>")
        digest = hash_key(secret)
        if self._admin_hash is not None and hmac.compare_digest(digest, self._admin_hash):
            return Principal(key_id=BOOTSTRAP_ID, role="admin")
        found = self._store.key_by_hash(digest)
        if found is None or not hmac.compare_digest(found[1], digest) or found[0].revoked_at:
            raise Unauthorized("unknown or revoked API key", key_sent=True)
        return principal_of(found[0])

    def list(self) -> list[ApiKey]:
        return self._store.list_keys()

    def revoke(self, key_id: str) -> bool:
        """True when this revoked it, False when it was revoked already."""
        done = self._store.revoke_key(key_id)
        if done is None:
            raise NotFound(f"no key with id {key_id!r}")
        return done


def principal_of(key: ApiKey) -> Principal:
    if key.scope.startswith("agent:"):
        return Principal(key_id=key.id, role="agent", agent=key.scope.removeprefix("agent:"))
    return Principal(key_id=key.id, role=key.scope, agents=tuple(key.agents))
