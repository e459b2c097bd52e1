"""Deterministic stand-ins for the embedding model."""

from __future__ import annotations

import re

from embeddings.hashing import HashEncoder

__all__ = ["HashEncoder", "fake_factory"]


def fake_factory(model: str) -> HashEncoder:
    """Any model name gives a fake encoder; a name ending in -<n>d has dimension n."""
    match = re.search(r"-(\d+)d$", model)
    return HashEncoder(name=model, dim=int(match.group(1)) if match else 64)
