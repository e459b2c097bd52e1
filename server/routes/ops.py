"""Operations: health."""

from __future__ import annotations

from fastapi import APIRouter

from server import __version__
from server.deps import ServicesDep
from server.schemas import Health

router = APIRouter(tags=["operations"])


@router.get("/health", response_model=Health)
def health(services: ServicesDep) -> Health:
    """Liveness and the indexer's lag (outbox rows not yet in the vector index)."""
    return Health(
        status="ok",
        index_lag=services.store.outbox_size(),
        model=services.settings.embedding_model,
        version=__version__,
    )
