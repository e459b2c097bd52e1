"""Per-agent settings: the server's defaults, overridden by what an admin set for the agent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from embeddings.calibration import Calibration, calibration_for
from server.config import Settings
from server.redaction import kinds_of
from server.store import Store

OptOutPolicy = Literal["keep", "forget"]


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Retrieval, compaction, review, opt-out and retention settings of one agent."""

    review: bool
    threshold: float
    top_k: int
    excerpt_k: int
    excerpt_budget_chars: int
    excerpt_threshold: float
    excerpt_mode: str
    compact_trigger: int
    compact_keep: int
    opt_out_policy: OptOutPolicy  # what an opt-out (STOP) does
    retention_days: int | None  # None: keep forever
    redact: tuple[str, ...]  # the kinds of secret redacted before storage; () for none


AGENT_SETTING_NAMES = tuple(AgentConfig.__dataclass_fields__)


class AgentSettings:
    """Reads and writes per-agent overrides; resolve() gives the effective values."""

    def __init__(
        self,
        store: Store,
        settings: Settings,
        calibration: Callable[[], Calibration] | None = None,
    ) -> None:
        """calibration gives the constants of the model in use (it may change at run time);
        by default those of the configured model."""
        self._store = store
        self._settings = settings
        self._calibration = calibration or (lambda: calibration_for(settings.embedding_model))

    def resolve(self, agent: str) -> AgentConfig:
        s = self._settings
        values: dict[str, Any] = {
            "review": False,
            "threshold": s.similarity_threshold,
            "top_k": s.top_k,
            "excerpt_k": s.excerpt_k,
            "excerpt_budget_chars": s.excerpt_budget_chars,
            "excerpt_threshold": (
                s.excerpt_threshold
                if s.excerpt_threshold is not None
                else self._calibration().excerpt_threshold
            ),
            "excerpt_mode": s.excerpt_mode,
            "compact_trigger": s.compact_trigger,
            "compact_keep": s.compact_keep,
            "opt_out_policy": "keep",
            "retention_days": None,  # an explicit null stored clears it back to forever
            "redact": None,  # the default kinds; "off" or a list as stored
        }
        stored = self._store.agent_settings(agent)
        values.update({k: v for k, v in stored.items() if k in values and v is not None})
        values["redact"] = tuple(sorted(kinds_of(values["redact"])))
        return AgentConfig(**values)

    def update(self, agent: str, changes: dict[str, Any]) -> AgentConfig:
        stored = self._store.agent_settings(agent)
        stored.update({k: v for k, v in changes.items() if k in AGENT_SETTING_NAMES})
        self._store.put_agent_settings(agent, stored)
        return self.resolve(agent)
