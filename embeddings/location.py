"""Where the vector tables live: a local folder, or a prefix of an S3-compatible bucket that
several replicas share (`s3://bucket/prefix`). LanceDB reads and writes both; this class holds
what differs: how to connect, how to list the tables, and how to list and read the files (the
erasure tests read every byte to prove a forgotten person's text is gone)."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

TABLE_PREFIX = "memory_"


class CrossProcessLock(Protocol):
    def try_hold(self) -> bool:
        """True while this process holds it (taking it when it is free); never waits."""
        ...

    def release(self) -> None: ...


class FileLease:
    """An exclusive flock on a file: among the processes of one machine, released by the
    kernel when the holder dies."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None
        self._guard = threading.Lock()

    def try_hold(self) -> bool:
        with self._guard:
            if self._fd is not None:
                return True
            self._path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            self._fd = fd
            return True

    def release(self) -> None:
        with self._guard:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                self._fd = None


@dataclass(frozen=True)
class LanceLocation:
    uri: str  # a local folder, or s3://bucket/prefix
    # Object-store options (aws_endpoint, aws_region, aws_access_key_id, ...); empty: the AWS_*
    # variables of the environment, which LanceDB's object store reads itself.
    storage_options: Mapping[str, str] = field(default_factory=dict)
    # The writers' lock of a shared bucket, among every process writing to it (the server
    # passes its database's lease); None: only this process writes there. A local folder's is
    # an flock in the folder.
    lock: Callable[[], CrossProcessLock] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, where: Path | str | LanceLocation) -> LanceLocation:
        if isinstance(where, LanceLocation):
            return where
        return cls(str(where))

    @property
    def remote(self) -> bool:
        return "://" in self.uri

    @property
    def local(self) -> Path | None:
        """The folder, for a local location."""
        return None if self.remote else Path(self.uri)

    @property
    def key(self) -> str:
        """The same for every handle on the same store in this process."""
        return self.uri.rstrip("/") if self.remote else str(Path(self.uri).resolve())

    def __str__(self) -> str:
        return self.uri

    def writer_lock(self) -> CrossProcessLock | None:
        if self.local is not None:
            return FileLease(self.local / ".write.lock")
        return self.lock() if self.lock is not None else None

    def connect(self, **kwargs: Any) -> Any:
        # Imported here: the commands that open no vector table (--help, keys) stay quick.
        import lancedb

        if self.local is not None:
            self.local.mkdir(parents=True, exist_ok=True)
            return lancedb.connect(str(self.local), **kwargs)
        return lancedb.connect(self.uri, storage_options=dict(self.storage_options), **kwargs)

    def table_names(self) -> list[str]:
        """Every table of the store: one per model, dimension and schema version ever used."""
        if self.local is not None:
            if not self.local.exists():
                return []
            return sorted(
                p.name.removesuffix(".lance") for p in self.local.glob(f"{TABLE_PREFIX}*.lance")
            )
        db = self.connect(read_consistency_interval=timedelta(0))
        names: list[str] = []
        token: str | None = None
        while True:
            page = db.list_tables(page_token=token, limit=1000)
            names.extend(page.tables)
            token = page.page_token
            if not token or not page.tables:
                break
        return sorted(n for n in names if n.startswith(TABLE_PREFIX))

    # -- files, for the erasure proofs and for backups ---------------------------------------

    def files(self, table: str | None = None) -> list[str]:
        """Every file of the store (or of one table): paths, or object keys' URIs."""
        if self.local is not None:
            folder = self.local / f"{table}.lance" if table else self.local
            return sorted(str(p) for p in folder.rglob("*") if p.is_file())
        from pyarrow import fs as pafs

        fs, base = self._filesystem()
        prefix = f"{base}/{table}.lance" if table else base
        found = fs.get_file_info(pafs.FileSelector(prefix, recursive=True, allow_not_found=True))
        return sorted(f"s3://{f.path}" for f in found if f.type == pafs.FileType.File)

    def read(self, file: str) -> bytes:
        if self.local is not None:
            return Path(file).read_bytes()
        fs, _ = self._filesystem()
        with fs.open_input_stream(file.removeprefix("s3://")) as stream:
            return bytes(stream.read())

    def contents(self, table: str | None = None) -> Iterator[tuple[str, bytes]]:
        for file in self.files(table):
            yield file, self.read(file)

    def _filesystem(self) -> tuple[Any, str]:
        """pyarrow's S3 file system with the same options LanceDB was given."""
        from pyarrow import fs as pafs

        parts = urlsplit(self.uri)
        options = {k.lower(): v for k, v in self.storage_options.items()}
        kwargs: dict[str, Any] = {}
        endpoint = options.get("aws_endpoint") or options.get("endpoint")
        if endpoint:
            target = urlsplit(endpoint)
            kwargs["endpoint_override"] = target.netloc or endpoint
            kwargs["scheme"] = target.scheme or "https"
        if "aws_access_key_id" in options:
            kwargs["access_key"] = options["aws_access_key_id"]
            kwargs["secret_key"] = options.get("aws_secret_access_key", "")
        if "aws_session_token" in options:
            kwargs["session_token"] = options["aws_session_token"]
        if "aws_region" in options or "region" in options:
            kwargs["region"] = options.get("aws_region") or options["region"]
        return pafs.S3FileSystem(**kwargs), f"{parts.netloc}{parts.path}".rstrip("/")
