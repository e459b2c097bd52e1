"""Which data folders a server is serving, and with which model: a lock file every running
server holds shared, so that commands that must not run under it (`restore`, which replaces the
files the server has open; `reindex` into a table the server does not serve, whose switch would
lose the server's writes meanwhile) can tell and refuse. flock locks go with the process: a
killed server holds none."""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from server.errors import Conflict

LOCK_NAME = "server.lock"
# Meta keys (the database's meta table) of what a folder is served with, read before any model
# loads: the model the server should use (set by a reindex), and the table it answers from
# (its version included).
ACTIVE_MODEL = "active_model"
ACTIVE_TABLE = "active_table"
log = logging.getLogger(__name__)


class FolderInUse(Conflict):
    """A server is serving this data folder."""


class ServingLock:
    """Held shared by a server from start-up to shutdown."""

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Waits while a command has the folder to itself (a restore, a reindex into another
        table), saying so."""
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning(
                "%s is in use by a restore or a reindex: waiting for it to finish",
                self._path.parent,
            )
            fcntl.flock(fd, fcntl.LOCK_SH)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases its lock
            self._fd = None


@contextmanager
def no_server(data_dir: Path, advice: str = "stop it first, then run this again") -> Iterator[None]:
    """Exclusive use of the folder: FolderInUse (saying `advice`) at once when a server is
    serving it, and no server can start on it until the block ends."""
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderInUse(f"a server is serving {data_dir}: {advice}") from None
        yield
    finally:
        os.close(fd)
