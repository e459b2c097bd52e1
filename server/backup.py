"""Backup and restore of the database and the vector tables: SQLite through its online backup
API, PostgreSQL through pg_dump of an exported snapshot, LanceDB tables through a pinned
version, so that a copy taken while the server runs is consistent."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

from embeddings.index import quote, table_names
from embeddings.location import LanceLocation
from server import pgdump
from server.clock import format_time, utc_now
from server.config import Settings
from server.serving import no_server
from server.store import MIGRATIONS as SQLITE_MIGRATIONS
from server.store import POSTGRES_MIGRATIONS, Store, pg_backup
from server.vectors import lance_location

MANIFEST = "backup.json"
# The database copy in a backup folder, by the engine it came from.
COPIES = {"sqlite": "memory.db", "postgresql": "postgres.dump"}
_ENGINES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
MIGRATIONS = {"sqlite": SQLITE_MIGRATIONS, "postgresql": POSTGRES_MIGRATIONS}
_SESSIONS_GRACE_S = 3.0  # a closed session's backend leaves pg_stat_activity when it exits


class BackupError(Exception):
    pass


@dataclass(frozen=True)
class BackupReport:
    folder: str
    engine: str  # sqlite | postgresql: the database the copy came from (or went into)
    messages: int
    memories: int
    tables: dict[str, int]
    seconds: float
    queued: int = 0  # restore: items queued for the indexer to check against the copy


def backup(settings: Settings, dest: Path) -> BackupReport:
    """Copy the vector tables first, then the database: a vector written in between has its
    source in the database copy, and restore() removes any vector whose source is missing."""
    started = time.perf_counter()
    engine = _engine(settings)
    with _reported():
        if dest.exists() and any(dest.iterdir()):
            raise BackupError(f"{dest} is not empty")
        if engine == "postgresql":
            pgdump.require("pg_dump")  # before anything is copied
        elif not settings.sqlite_path.exists():
            raise BackupError(f"no database at {settings.sqlite_path}")
        made = not dest.exists()
        copy_database = _dump_postgres if engine == "postgresql" else _copy_sqlite
        try:
            (dest / "lance").mkdir(parents=True, exist_ok=True)
            vectors = lance_location(settings, None)
            tables = {
                name: _copy_table(vectors, LanceLocation(str(dest / "lance")), name)
                for name in table_names(vectors)
            }
            messages, memories, version = copy_database(settings, dest / COPIES[engine])
        except BaseException:
            _clear(dest, remove=made)  # no half backup that a second run would refuse
            raise
    seconds = round(time.perf_counter() - started, 2)
    report = BackupReport(str(dest), engine, messages, memories, tables, seconds)
    manifest = {"at": format_time(utc_now()), **asdict(report), "schema_version": version}
    (dest / MANIFEST).write_text(json.dumps(manifest))
    return report


def restore(settings: Settings, src: Path) -> BackupReport:
    """Replace the database and the vector tables with a backup's, then drop vectors whose
    source the backup does not hold, and queue every item for the indexer, which brings rows
    that changed between the two copies up to date. Refused (FolderInUse) while a server
    serves the folder: it would go on writing into what is replaced. On PostgreSQL also
    refused while any other session is connected to the database (a server elsewhere), and the
    indexer's lease is held throughout, so that no replica's indexer runs meanwhile."""
    engine = _engine(settings)
    made_by, version = _backup_of(src)
    if made_by != engine:
        setting = "with MEMORY_DATABASE_URL" if settings.database_url else "no MEMORY_DATABASE_URL"
        raise BackupError(
            f"{src} is a backup of a {_ENGINES[made_by]} database, and these settings use"
            f" {_ENGINES[engine]} ({setting}): restore it with the settings it was made with"
            " (a backup cannot move between the two)"
        )
    if version > len(MIGRATIONS[engine]):
        raise BackupError(
            f"{src} holds schema version {version}, newer than this memory-server's"
            f" ({len(MIGRATIONS[engine])}): restore it with the version that made it"
        )
    restore_database = _restore_postgres if engine == "postgresql" else _restore_sqlite
    with _reported(), no_server(settings.data_dir):
        return restore_database(settings, src)


def _restore_sqlite(settings: Settings, src: Path) -> BackupReport:
    started = time.perf_counter()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        settings.sqlite_path.with_name(settings.sqlite_path.name + suffix).unlink(missing_ok=True)
    shutil.copy2(src / COPIES["sqlite"], settings.sqlite_path)
    _replace_vectors(settings, src)
    return _reconcile(settings, src, started)


def _restore_postgres(settings: Settings, src: Path) -> BackupReport:
    """pg_restore in one transaction, then the tables of a later schema than the backup's
    dropped (the migrations make them again), then the vector tables."""
    started = time.perf_counter()
    url = _url(settings)
    pgdump.require("pg_restore")
    _refuse_newer_schema(url)
    _refuse_other_sessions(url)
    store = Store.open(settings)
    lease = store.lease("indexer", settings.data_dir)
    try:
        if not lease.try_hold():
            raise BackupError(
                "a server's indexer is running on the database: stop every server using it"
                " (on any machine), then run this again"
            )
        dump = src / COPIES["postgresql"]
        restored = pgdump.tables(dump)  # (reads the dump before anything is changed)
        pgdump.restore(url, dump)
        pg_backup.drop_leftover_tables(url, restored)
        _replace_vectors(settings, src)
        return _reconcile(settings, src, started)
    finally:
        lease.release()
        store.close()


def _reconcile(settings: Settings, src: Path, started: float) -> BackupReport:
    """Drop the vectors whose source the restored database lacks, queue every item."""
    store = Store.open(settings)  # (migrates a backup made by an older version)
    try:
        sources = _source_ids(store)
        vectors = lance_location(settings, None)
        db = vectors.connect()
        tables: dict[str, int] = {}
        for name in table_names(vectors):
            table = db.open_table(name)
            ids = table.to_lance().to_table(columns=["id"]).column("id").to_pylist()
            orphans = [i for i in ids if i not in sources]
            for start in range(0, len(orphans), 500):
                chunk = ", ".join(quote(i) for i in orphans[start : start + 500])
                table.delete(f"id IN ({chunk})")
            if orphans:  # deletions are soft: rewrite the files so the rows are gone
                table.to_lance().optimize.compact_files(materialize_deletions_threshold=0.0)
                table.to_lance().cleanup_old_versions(timedelta(0), delete_unverified=True)
            tables[name] = int(table.count_rows())
        # An item changed and indexed between the two copies (archived, approved, edited) or
        # indexed in between (so gone from the outbox) has an old or no row in the vector copy.
        # Queue everything: the indexer re-embeds only what differs from the stored rows.
        queued = store.enqueue_everything()
        messages = len([i for i in sources if i.startswith("turn:")])
        memories = len([i for i in sources if i.startswith("fact:")])
        engine = store.engine
    finally:
        store.close()
    seconds = round(time.perf_counter() - started, 2)
    return BackupReport(str(src), engine, messages, memories, tables, seconds, queued)


def _copy_sqlite(settings: Settings, file: Path) -> tuple[int, int, int]:
    source = sqlite3.connect(settings.sqlite_path, timeout=settings.busy_timeout_ms / 1000)
    target = sqlite3.connect(file)
    try:
        source.backup(target)
        messages = int(target.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
        memories = int(target.execute("SELECT COUNT(*) FROM memories").fetchone()[0])
        version = target.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0]
    finally:
        target.close()
        source.close()
    return messages, memories, int(version or 0)


def _dump_postgres(settings: Settings, file: Path) -> tuple[int, int, int]:
    """pg_dump of a snapshot exported by a transaction of ours, where the counts are taken:
    they are the dump's own."""
    url = _url(settings)
    with pg_backup.exported_snapshot(url) as snapshot:
        if not snapshot.schema_version:
            raise BackupError("the database has no memory-server schema yet: nothing to back up")
        pgdump.dump(url, file, snapshot.name)
    return snapshot.messages, snapshot.memories, snapshot.schema_version


def _copy_table(source: LanceLocation, dest: LanceLocation, name: str) -> int:
    """Copy one table as of its current version (Lance versions are immutable)."""
    for attempt in range(3):
        try:
            table = source.connect().open_table(name)
            data = table.to_lance().to_table()  # the version opened: later writes are not seen
            # "overwrite" of a table not there yet made Lance log a WARN on the terminal ("No
            # existing dataset at ..., it will be created"): a new table is created as such.
            mode = "overwrite" if name in dest.table_names() else "create"
            dest.connect().create_table(name, data, mode=mode)
            return int(data.num_rows)
        except (OSError, RuntimeError, ValueError):
            if attempt == 2:
                raise
            time.sleep(0.5)  # a compaction removed the version under us: read the new one
    return 0


def _replace_vectors(settings: Settings, src: Path) -> None:
    """The store's tables become the backup's: a folder is replaced; in a bucket every table
    is dropped, then the backup's are written."""
    vectors = lance_location(settings, None)
    if vectors.local is not None:
        shutil.rmtree(vectors.local, ignore_errors=True)
        shutil.copytree(src / "lance", vectors.local)
        return
    db = vectors.connect()
    for name in table_names(vectors):
        db.drop_table(name)
    copy = LanceLocation(str(src / "lance"))
    for name in table_names(copy):
        _copy_table(copy, vectors, name)


def _source_ids(store: Store) -> set[str]:
    ids: set[str] = set()
    for kind in ("turn", "fact", "summary"):
        for chunk in store.iter_sources(kind):
            ids.update(f"{kind}:{ref}" for ref in chunk)
    return ids


def _backup_of(src: Path) -> tuple[str, int]:
    """The engine a backup folder's database copy came from, and its schema version;
    BackupError if the folder is no backup."""
    try:
        manifest = json.loads((src / MANIFEST).read_text())
    except (OSError, ValueError):
        manifest = None
    # Backups made before PostgreSQL was supported have no engine: they are SQLite's.
    engine = manifest.get("engine", "sqlite") if isinstance(manifest, dict) else None
    if engine not in COPIES or not (src / COPIES[engine]).is_file():
        raise BackupError(f"{src} is not a backup made by `memory-server backup`")
    if not (src / "lance").is_dir():
        raise BackupError(f"{src} is not a backup made by `memory-server backup`")
    return str(engine), int(manifest.get("schema_version") or 0)


def _engine(settings: Settings) -> str:
    return "postgresql" if settings.database_url else "sqlite"


def _url(settings: Settings) -> str:
    assert settings.database_url
    return settings.database_url


def _refuse_newer_schema(url: str) -> None:
    have, known = pg_backup.schema_version(url), len(POSTGRES_MIGRATIONS)
    if have > known:
        raise BackupError(
            f"the database is at schema version {have}, newer than this memory-server's"
            f" ({known}): restore with the version that wrote it, or into an empty database"
        )


def _refuse_other_sessions(url: str) -> None:
    """A server on another machine holds no lock of ours: its sessions are what shows it.
    Those of a server that just stopped may still be listed for a moment: looked at again."""
    deadline = time.monotonic() + _SESSIONS_GRACE_S
    while (others := pg_backup.other_sessions(url)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if others:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        raise BackupError(
            f"the database is in use: {_sessions(len(others))} ({shown}); stop"
            " every server using it (on any machine) and close other clients, then run this"
            " again"
        )


@contextmanager
def _reported() -> Iterator[None]:
    """A missing or failing pg_dump, an unreachable database: a BackupError saying why."""
    try:
        yield
    except (pgdump.PgToolError, pg_backup.PgError) as exc:
        raise BackupError(str(exc)) from None


def _clear(folder: Path, *, remove: bool) -> None:
    if remove:
        shutil.rmtree(folder, ignore_errors=True)
        return
    for child in folder.iterdir():
        if child.is_dir():
            shutil.rmtree(child)
        else:
            child.unlink()


def _sessions(count: int) -> str:
    return "1 other session is connected" if count == 1 else f"{count} other sessions are connected"
