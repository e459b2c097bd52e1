"""glibc's malloc settings the server applies (server/native.py)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from server import native

# Opens no database of the server's: the same on both passes, so the postgresql pass
# skips it (tests/conftest.py).
pytestmark = pytest.mark.no_database


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_arenas_are_limited_and_free_memory_is_trimmed() -> None:
    # In a fresh process, as `memory-server serve` does before anything starts threads.
    code = "from server import native; import sys; sys.exit(0 if native.limit_arenas(2) else 1)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
    native.trim()  # returns memory; must never fail
