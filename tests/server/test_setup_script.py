"""scripts/setup installs once: a later call asking for no more extras returns at once; a first
install says each step, its progress and its time."""

from __future__ import annotations

import re
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


def setup(root: Path, *extras: str, **env: str) -> str:
    """Run scripts/setup; what it printed."""
    done = subprocess.run(
        [str(root / "scripts" / "setup"), *extras],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        timeout=60,
    )
    return done.stdout + done.stderr


def installs(calls: Path) -> list[str]:
    return calls.read_text().splitlines() if calls.exists() else []


def test_the_dev_install_covers_the_plain_one_and_a_new_extra_installs(tmp_path: Path) -> None:
    root, calls = project(tmp_path)
    setup(root, "dev,bench")  # ./scripts/test
    pip = "-m pip install --progress-bar off"
    first = [f"{pip} torch==2.13.0", f"{pip} -e .[dev,bench]", "-m server build-model"]
    assert installs(calls) == first
    assert setup(root) == ""  # ./scripts/serve afterwards: nothing to install, nothing said
    setup(root, "dev")
    setup(root, "bench,dev")
    assert len(installs(calls)) == 3
    setup(root, "dev,models")  # an extra never installed: installs
    assert installs(calls)[-2:] == [f"{pip} -e .[dev,models]", "-m server build-model"]
    (root / "pyproject.toml").write_text((root / "pyproject.toml").read_text() + "\n# changed\n")
    setup(root)  # pyproject.toml changed: installs again
    assert installs(calls)[-2:] == [f"{pip} -e .", "-m server build-model"]


def test_a_first_install_says_each_step_its_progress_and_its_time(tmp_path: Path) -> None:
    """The first ./scripts/serve was silent for about 2 minutes (pip -q): now a line per step,
    a line of progress every SETUP_PROGRESS_S seconds while pip works (a dozen lines for two
    minutes at the default 10 s: readable in a CI log), and each step's time."""
    root, calls = project(tmp_path)
    python = root / ".venv" / "bin" / "python"
    python.write_text(  # a pip that collects three packages, a second apart, then installs
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {calls}\n'
        '[ "$2" = pip ] || { echo "the model is built"; exit 0; }\n'
        "for p in alpha beta gamma; do echo \"Collecting $p\"; sleep 1; done\n"
        'echo "Installing collected packages: alpha, beta, gamma"; sleep 1.5\n'
        'echo "WARNING: Location \'/opt/x\' is ignored: it is neither a file nor a directory."\n'
        'echo "Successfully installed alpha beta gamma"\n'
    )
    said = setup(root, SETUP_PROGRESS_S="1").splitlines()
    steps = [line for line in said if not line.startswith("setup:   ")]
    assert steps[0] == "setup: installing into .venv (a first install takes a few minutes)"
    assert steps[1] == "setup: 1/3 torch==2.13.0 (CPU), first"
    assert re.fullmatch(r"setup: 1/3 torch==2\.13\.0 \(CPU\), first: done in \d+ s", steps[2])
    assert steps[3] == "setup: 2/3 memory-server and its dependencies"
    assert re.fullmatch(r"setup: 2/3 memory-server and its dependencies: done in \d+ s", steps[4])
    assert steps[5] == "setup: 3/3 the default model's ONNX files (built once, offline)"
    assert re.fullmatch(r"setup: 3/3 the default model's ONNX files: done in \d+ s", steps[6])
    assert re.fullmatch(r"setup: ready in \d+ s", steps[7]), steps
    assert len(steps) == 8, said  # pip's own lines stay in its log; its noise never shows
    progress = [line for line in said if line.startswith("setup:   ")]
    assert 4 <= len(progress) <= 12, said  # about 9 s at a line a second
    collecting = r"setup:   \d+ s: \d packages? collected, the last \w+"
    assert any(re.fullmatch(collecting, p) for p in progress), said
    assert any(re.fullmatch(r"setup:   \d+ s: installing 3 packages", p) for p in progress)


def test_a_failing_install_shows_what_pip_said_and_the_step(tmp_path: Path) -> None:
    root, _ = project(tmp_path)
    python = root / ".venv" / "bin" / "python"
    python.write_text(
        '#!/usr/bin/env bash\necho "ERROR: No matching distribution found for torch==2.13.0"\n'
        "exit 1\n"
    )
    done = subprocess.run(
        [str(root / "scripts" / "setup")], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "ERROR: No matching distribution found for torch==2.13.0" in done.stderr
    assert re.search(r"setup: 1/3 torch==2\.13\.0 \(CPU\), first: failed after \d+ s", done.stderr)
    assert not (root / ".venv" / ".memory-server-installed").exists()
