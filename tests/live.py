"""The real server in a subprocess (`python -m server serve`), for the crash drills, the load
test and schemathesis over real HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import BinaryIO

import httpx

from tests.backends import database_url_for
from tests.conftest import ADMIN_KEY

ROOT = Path(__file__).resolve().parents[1]


class Server:
    """`python -m server serve` on a free port, with a data folder that outlives it."""

    def __init__(self, data_dir: Path, **env: str) -> None:
        self.data_dir = data_dir
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self._log: BinaryIO | None = None
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.base = f"http://127.0.0.1:{self.port}"

    def start(self, stderr: Path | None = None) -> None:
        self._close_log()
        self._log = stderr.open("ab") if stderr else None
        env = {
            **os.environ,
            "MEMORY_DATA_DIR": str(self.data_dir),
            "MEMORY_PORT": str(self.port),
            "MEMORY_ADMIN_KEY": ADMIN_KEY,
            "MEMORY_LOG_LEVEL": "warning",
            "MEMORY_EMBEDDING_MODEL": "hash:64",
            "MEMORY_INDEXER_INTERVAL_S": "0.05",
            "HF_HUB_OFFLINE": "1",
            **self.database_env(),
            **self.env,
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "server", "serve"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self._log if self._log else subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{self.base}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert self.process.poll() is None, "server exited at start"
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)

    def database_env(self) -> dict[str, str]:
        """MEMORY_DATABASE_URL of this data folder, when the suite runs on PostgreSQL."""
        url = database_url_for(self.data_dir)
        return {"MEMORY_DATABASE_URL": url} if url else {}

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def lag(self) -> int:
        return int(httpx.get(f"{self.base}/health", timeout=5).json()["index_lag"])

    def wait_indexed(self, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while self.lag():
            assert time.monotonic() < deadline, "the index did not catch up"
            time.sleep(0.1)


def run_until_killed(server: Server, script: str, *args: str) -> None:
    """Run a Python script in a process of its own on the server's data folder and database
    (the server stopped), and check that it killed itself with SIGKILL (a hook of its own
    does, at the point a crash test names)."""
    env = {
        **os.environ,
        "MEMORY_DATA_DIR": str(server.data_dir),
        "MEMORY_EMBEDDING_MODEL": "hash:64",
        "MEMORY_LOG_LEVEL": "warning",
        "HF_HUB_OFFLINE": "1",
        **server.database_env(),
    }
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, (
        done.returncode,
        done.stdout,
        done.stderr[-2000:],
    )
