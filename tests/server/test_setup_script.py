"""scripts/setup installs once: a later call asking for no more extras returns at once."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

# Opens no database of the server's: the same on both passes, so the postgresql pass
# skips it (tests/conftest.py).
pytestmark = pytest.mark.no_database

ROOT = Path(__file__).resolve().parents[2]


def project(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of scripts/setup beside a pyproject.toml, with a .venv whose python only logs
    what it is asked to do (pip installs included)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup", tmp_path / "scripts" / "setup")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    calls = tmp_path / "calls.log"
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/usr/bin/env bash\necho "$*" >> {calls}\n')
    python.chmod(0o755)
    return tmp_path, calls


def setup(root: Path, *extras: str) -> None:
    subprocess.run([str(root / "scripts" / "setup"), *extras], cwd=root, check=True)


def installs(calls: Path) -> list[str]:
    return calls.read_text().splitlines() if calls.exists() else []


def test_the_dev_install_covers_the_plain_one_and_a_new_extra_installs(tmp_path: Path) -> None:
    root, calls = project(tmp_path)
    setup(root, "dev,bench")  # ./scripts/test
    first = ["-m pip install -q torch==2.13.0", "-m pip install -q -e .[dev,bench]"]
    assert installs(calls) == first
    setup(root)  # ./scripts/serve afterwards: nothing to install
    setup(root, "dev")
    setup(root, "bench,dev")
    assert len(installs(calls)) == 2
    setup(root, "dev,models")  # an extra never installed: installs
    assert installs(calls)[-1] == "-m pip install -q -e .[dev,models]"
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text() + "\n# changed\n")
    setup(root)  # pyproject.toml changed: installs again
    assert installs(calls)[-1] == "-m pip install -q -e ."
