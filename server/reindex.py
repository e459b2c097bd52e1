"""Rebuild a model's vector index from SQLite, the source of truth."""

from __future__ import annotations

import time
from dataclasses import dataclass

from tqdm import tqdm

from embeddings.index import IndexRow, VectorIndex
from server.app import EncoderFactory
from server.config import Settings
from server.indexer import ACTIVE_MODEL, fact_row, summary_row, turn_rows
from server.store import Store


@dataclass(frozen=True)
class ReindexReport:
    model: str
    table: str
    items: int
    orphans_removed: int
    seconds: float


def rebuild_index(
    settings: Settings, model: str, factory: EncoderFactory, *, progress: bool = True
) -> ReindexReport:
    """Re-embed every turn, memory and summary with `model` into its own table, remove rows
    whose source is gone, then mark the model active: a running server switches to it."""
    started = time.perf_counter()
    store = Store(settings.sqlite_path, busy_timeout_ms=settings.busy_timeout_ms)
    try:
        encoder = factory(model)
        index = VectorIndex(settings.lance_path, encoder.name, encoder.dim)
        seen: set[str] = set()
        bar = tqdm(
            total=store.count_sources(), desc=f"reindex {model}", unit="item", disable=not progress
        )
        for kind in ("turn", "fact", "summary"):
            for ids in store.iter_sources(kind):
                rows = _rows(store, kind, ids, settings.turn_window)
                index.upsert(rows, encoder.encode([r.text for r in rows]))
                seen.update(r.id for r in rows)
                bar.update(len(ids))
        bar.close()
        orphans = [i for i in index.all_ids() if i not in seen]
        index.delete_ids(orphans)
        index.optimize()
        store.set_meta(ACTIVE_MODEL, model)
        return ReindexReport(
            model=model,
            table=index.name,
            items=len(seen),
            orphans_removed=len(orphans),
            seconds=round(time.perf_counter() - started, 2),
        )
    finally:
        store.close()


def _rows(store: Store, kind: str, ids: list[str], window: int) -> list[IndexRow]:
    if kind == "turn":
        messages = store.messages_by_ids([int(i) for i in ids]).values()
        return turn_rows(store, list(messages), window)
    if kind == "fact":
        return [fact_row(m) for m in store.memories_by_ids(ids).values()]
    found = store.summaries_of(ids)
    return [summary_row(agent, phone, s) for agent, phone, s in found.values()]
