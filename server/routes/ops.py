"""Operations: health and Prometheus metrics."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from server import __version__
from server.deps import PrincipalDep, ServicesDep
from server.redaction import KINDS, redact
from server.schemas import ConnectionsOut, Health, UpgradeOut

router = APIRouter(tags=["operations"])
FAILING_PASSES = 3  # a pass that fails now and then is retried; three in a row is a problem


@router.get("/health", response_model=Health)
def health(services: ServicesDep) -> Health:
    """Liveness, the model in use and the index lag (outbox rows not yet in the index);
    degraded, with the problems, while a background loop keeps failing (the indexer,
    compaction) or a model upgrade failed."""
    problems = []
    stats = services.indexer.stats
    if stats.failing >= FAILING_PASSES:
        problems.append(f"indexer: {stats.failing} passes failed in a row: {stats.last_error}")
    compaction = services.compaction
    if compaction.failing >= FAILING_PASSES:
        problems.append(
            f"compaction: {compaction.failing} attempts failed in a row: {compaction.last_error}"
        )
    upgrade = services.upgrade.status if services.upgrade is not None else None
    if upgrade is not None and upgrade.state == "failed":
        problems.append(
            f"model upgrade to {upgrade.target_model} failed (the old table keeps serving;"
            f" a restart tries again): {upgrade.error}"
        )
    return Health(
        status="degraded" if problems else "ok",
        # An error's text may quote what failed (a row, a model's answer); /health needs no key.
        problems=[redact(p, KINDS) for p in problems],
        index_lag=services.store.outbox_size(),
        model=services.indexer.space.encoder.name,
        version=__version__,
        indexer=services.indexer.role,
        erasure_pending=(
            services.store.checkpoint_pending or services.store.count_pending_erasures() > 0
        ),
        move_pending=bool(services.store.pending_moves()),
        upgrade=UpgradeOut(**asdict(upgrade)) if upgrade is not None else None,
        connections=ConnectionsOut(
            engine=services.store.engine, **asdict(services.store.pool_stats())
        ),
    )


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(principal: PrincipalDep, services: ServicesDep) -> str:
    """Prometheus text format; an admin or staff key (scrapers send it as a bearer token)."""
    principal.require_operator()
    stats = services.indexer.stats
    index = services.indexer.space.index
    pool = services.store.pool_stats()
    lines = [
        (
            "memory_index_lag",
            "gauge",
            "Outbox rows waiting for the indexer.",
            services.store.outbox_size(),
        ),
        ("memory_index_rows", "gauge", "Rows in the active vector index.", index.count()),
        (
            "memory_indexer_items_total",
            "counter",
            "Items upserted by the indexer.",
            stats.items_indexed,
        ),
        (
            "memory_indexer_removed_total",
            "counter",
            "Items removed from the index.",
            stats.items_removed,
        ),
        (
            "memory_indexer_embedded_total",
            "counter",
            "Texts embedded by the indexer.",
            stats.texts_embedded,
        ),
        (
            "memory_indexer_reused_total",
            "counter",
            "Vectors reused because the text was unchanged.",
            stats.vectors_reused,
        ),
        (
            "memory_indexer_embed_seconds_total",
            "counter",
            "Seconds spent embedding.",
            round(stats.embed_seconds, 6),
        ),
        ("memory_indexer_batches_total", "counter", "Indexer batches done.", stats.batches),
        ("memory_indexer_errors_total", "counter", "Indexer batches that failed.", stats.errors),
        ("memory_db_connections_open", "gauge", "Open read connections.", pool.open),
        ("memory_db_connections_in_use", "gauge", "Read connections lent out.", pool.in_use),
        ("memory_db_connections_max", "gauge", "The read pool's size.", pool.size),
    ]
    out = []
    for name, kind, help_text, value in lines:
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
    out.append(f'memory_info{{version="{__version__}",model="{index.model}"}} 1')
    return "\n".join(out) + "\n"
