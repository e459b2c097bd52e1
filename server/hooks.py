"""Named points in concurrent code where a test runs its own code (a forget, a pause), so a
race is driven on purpose instead of by luck. Nothing is registered in production."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Hooks:
    """`reach(name)` runs what a test registered for that point with `on(name, fn)`, else
    nothing. The points in the code: compaction.model_answered, memories.loaded,
    memories.before_reembed, indexer.embedded, reindex.embedded, reindex.batch_written,
    staff.searched, forget.journaled, forget.rows_erased, forget.vectors_deleted,
    forget.vectors_erased, move.committed, move.rewritten, move.left."""

    def __init__(self) -> None:
        self._at: dict[str, Callable[[], None]] = {}
        self._guard = threading.Lock()

    def on(self, name: str, run: Callable[[], None]) -> None:
        with self._guard:
            self._at[name] = run

    def clear(self, name: str) -> None:
        with self._guard:
            self._at.pop(name, None)

    def reach(self, name: str) -> None:
        run = self._at.get(name)
        if run is not None:
            run()

    def once(self, name: str, run: Callable[[], None]) -> None:
        """Run `run` the first time the point is reached, then nothing."""

        def first() -> None:
            self.clear(name)
            run()

        self.on(name, first)
