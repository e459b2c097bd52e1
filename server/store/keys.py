"""API keys, agent settings and the metadata table."""

from __future__ import annotations

import json
from typing import Any

from server.store.db import Queries
from server.store.records import ApiKey, key_of


class KeyQueries(Queries):
    def insert_key(self, key_id: str, key_hash: str, scope: str, agents: list[str]) -> ApiKey:
        now = self._now()
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO keys (id, hash, scope, agents, created_at) VALUES (?, ?, ?, ?, ?)",
                (key_id, key_hash, scope, json.dumps(agents), now),
            )
        return ApiKey(id=key_id, scope=scope, agents=agents, created_at=now, revoked_at=None)

    def key_by_hash(self, key_hash: str) -> tuple[ApiKey, str] | None:
        row = (
            self._reader()
            .execute(
                "SELECT id, hash, scope, agents, created_at, revoked_at FROM keys WHERE hash = ?",
                (key_hash,),
            )
            .fetchone()
        )
        return None if row is None else (key_of(row), row["hash"])

    def list_keys(self) -> list[ApiKey]:
        rows = self._reader().execute(
            "SELECT id, scope, agents, created_at, revoked_at FROM keys ORDER BY created_at, id"
        )
        return [key_of(r) for r in rows]

    def revoke_key(self, key_id: str) -> bool | None:
        """True: revoked now; False: it was revoked already; None: no such key."""
        with self._transaction() as conn:
            cur = conn.execute(
                "UPDATE keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                (self._now(), key_id),
            )
            if cur.rowcount:
                return True
            found = conn.execute("SELECT 1 FROM keys WHERE id = ?", (key_id,)).fetchone()
            return False if found is not None else None

    def agent_settings(self, agent: str) -> dict[str, Any]:
        row = (
            self._reader()
            .execute("SELECT settings FROM agent_settings WHERE agent = ?", (agent,))
            .fetchone()
        )
        return {} if row is None else dict(json.loads(row[0]))

    def put_agent_settings(self, agent: str, values: dict[str, Any]) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO agent_settings (agent, settings, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT (agent) DO UPDATE SET settings = excluded.settings,"
                " updated_at = excluded.updated_at",
                (agent, json.dumps(values), self._now()),
            )

    def meta(self, key: str) -> str | None:
        row = self._reader().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )
