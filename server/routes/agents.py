"""Per-agent settings: retrieval thresholds and k, excerpt mode, compaction, review."""

from __future__ import annotations

import dataclasses

from fastapi import APIRouter

from server.agent_settings import AgentConfig
from server.deps import AgentDep, PrincipalDep, ServicesDep
from server.schemas import AgentSettingsIn, AgentSettingsOut

router = APIRouter(prefix="/v1/agents/{agent}", tags=["agents"])


@router.get("/settings", response_model=AgentSettingsOut)
def get_settings(
    principal: PrincipalDep, agent: AgentDep, services: ServicesDep
) -> AgentSettingsOut:
    """The agent's effective settings: the server's defaults with the agent's overrides."""
    principal.require_read(agent)
    return _out(agent, services.memory.agent_config(agent))


@router.put("/settings", response_model=AgentSettingsOut)
def put_settings(
    principal: PrincipalDep, agent: AgentDep, body: AgentSettingsIn, services: ServicesDep
) -> AgentSettingsOut:
    """Override settings for this agent; fields left out keep their value."""
    principal.require_admin()
    changes = body.model_dump(exclude_unset=True)
    return _out(agent, services.memory.set_agent_config(agent, changes))


def _out(agent: str, config: AgentConfig) -> AgentSettingsOut:
    return AgentSettingsOut(agent=agent, **dataclasses.asdict(config))
