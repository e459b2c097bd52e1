"""glibc's malloc, held to what the server uses.

Measured under steady memory writes (benchmarks/README.md, "Steady memory writes"): the native
memory in use stays flat, but glibc keeps freed memory in up to 8 arenas per core (one per
thread that allocated, and LanceDB runs dozens of threads), so RSS kept growing about 4 MiB a
minute with nothing leaking. Two arenas, and handing free memory back when the indexer is idle,
keep RSS close to what is in use. Elsewhere than glibc (macOS, musl) these do nothing.

Arrow's own buffers (the tables written to LanceDB and read back) came from the mimalloc that
pyarrow bundles, in a 1 GiB region of its own: with nothing of Arrow's left allocated
(`bytes_allocated()` 0), that region's resident memory grew by 4 to 5 MiB per 800 requests of
the load test, for as long as it ran (12 MiB to 62 MiB over 12 rounds; threads come and go, and
mimalloc keeps what a finished thread freed), while glibc's memory in use stayed flat. Arrow
on glibc's malloc, the arenas above, stays flat (tests/server/test_load.py)."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
from typing import Any

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # mallopt parameter, glibc's malloc.h
ARENAS = 2


def _libc() -> Any | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


_LIBC = _libc()


def limit_arenas(arenas: int = ARENAS) -> bool:
    """At most `arenas` malloc arenas from now on (as MALLOC_ARENA_MAX would at start-up)."""
    if _LIBC is None:
        return False
    return bool(_LIBC.mallopt(M_ARENA_MAX, arenas))


def trim() -> None:
    """Give free malloc memory back to the system (cheap: done when the indexer is idle)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def arrow_on_malloc() -> None:
    """Arrow's buffers from the system's malloc rather than its bundled mimalloc, before
    pyarrow makes its default pool (an operator's ARROW_DEFAULT_MEMORY_POOL is kept)."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    if "pyarrow" in sys.modules:  # imported already: its pool may be made, so set it
        import pyarrow

        if os.environ["ARROW_DEFAULT_MEMORY_POOL"] == "system":
            pyarrow.set_memory_pool(pyarrow.system_memory_pool())
