"""pg_dump and pg_restore of the configured database. The URL's password never reaches their
command line (where `ps` would show it), a log or a message: libpq reads it from PGPASSWORD."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_TOC_TABLE = re.compile(r"^\d+; \d+ \d+ TABLE (\S+) (\S+) ")


class PgToolError(Exception):
    """pg_dump or pg_restore is missing or failed; the message says which and why."""


@dataclass(frozen=True)
class _Target:
    conninfo: str  # the URL's parameters without the password
    env: dict[str, str]
    password: str | None


def require(tool: str) -> str:
    """The tool's path, or PgToolError saying how to get it."""
    path = shutil.which(tool)
    if path is None:
        raise PgToolError(
            f"{tool} is not on PATH: install the PostgreSQL client tools (postgresql-client,"
            " of the server's major version or newer)"
        )
    return path


def dump(url: str, file: Path, snapshot: str | None = None) -> None:
    """pg_dump --format=custom of the URL's database into `file`, of an exported snapshot."""
    args = ["--format=custom", "--no-password", f"--file={file}"]
    if snapshot:
        args.append(f"--snapshot={snapshot}")
    _run("pg_dump", args, url)


def restore(url: str, file: Path) -> None:
    """pg_restore of a custom-format dump into the URL's database in one transaction: the
    objects it holds are dropped and made again; on any error nothing changes."""
    args = ["--clean", "--if-exists", "--no-owner", "--single-transaction", "--no-password"]
    _run("pg_restore", [*args, str(file)], url)


def tables(file: Path) -> set[str]:
    """The names of the tables a dump holds (from its table of contents)."""
    listing = _run("pg_restore", ["--list", str(file)], None)
    return {m.group(2) for line in listing.splitlines() if (m := _TOC_TABLE.match(line))}


def _run(tool: str, args: list[str], url: str | None) -> str:
    command = [require(tool), *args]
    target = _target(url) if url else None
    if target:
        command.append(f"--dbname={target.conninfo}")
    try:
        done = subprocess.run(
            command,
            env=target.env if target else None,
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            check=False,
        )
    except OSError as exc:
        raise PgToolError(f"{tool} could not run: {exc}") from None
    if done.returncode != 0:
        said = done.stderr.strip() or done.stdout.strip() or "no message"
        if target and target.password:
            said = said.replace(target.password, "***")
        raise PgToolError(f"{tool} failed (exit {done.returncode}): {said[-2000:]}")
    return done.stdout


def _target(url: str) -> _Target:
    import psycopg  # only with MEMORY_DATABASE_URL
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        raise PgToolError("MEMORY_DATABASE_URL is not a valid connection URL") from None
    password = params.pop("password", None)
    env = dict(os.environ)
    if password:
        env["PGPASSWORD"] = str(password)
    return _Target(make_conninfo("", **params), env, str(password) if password else None)
