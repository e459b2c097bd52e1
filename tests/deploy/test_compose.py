"""deploy/: the compose file, its .env example, the proxy and the image agree with the server.

Nothing in deploy/ can be built or pulled here (no Docker registry), so it is read, not run:
every MEMORY_ variable it names is a setting the server reads, each replica's environment is
valid settings, the replicas share the stores and nothing else, and the image installs as
scripts/setup does.
"""

from __future__ import annotations

import os
import re
import secrets
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import AliasChoices

from server.config import Settings, load_settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
REPLICAS = ("memory-a", "memory-b")
SETTING_NAME = re.compile(r"\bMEMORY_[A-Z0-9_]+")
# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}; $$ is a literal $.
INTERPOLATION = re.compile(r"\$\$|\$\{(\w+)(?:(:?[-?])([^}]*))?\}")
DEPLOYMENT_SECTION = "## Deployment (several replicas)"


def _setting_names() -> set[str]:
    """The environment variables Settings reads: its aliases where a field has them, else
    the prefix and the field's name."""
    prefix = Settings.model_config.get("env_prefix", "")
    names = set()
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            names |= {choice for choice in alias.choices if isinstance(choice, str)}
        elif isinstance(alias, str):
            names.add(alias)
        else:
            names.add(f"{prefix}{name}")
    return {name.upper() for name in names}


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def _environment(service: dict[str, Any]) -> dict[str, str | None]:
    """A service's environment block, in either of compose's two forms."""
    block = service.get("environment") or {}
    if isinstance(block, list):
        pairs = [item.split("=", 1) for item in block]
        return {pair[0]: pair[1] if len(pair) == 2 else None for pair in pairs}
    return {key: None if value is None else str(value) for key, value in block.items()}


def _env_example() -> tuple[dict[str, str], set[str]]:
    """deploy/.env.example: the values it sets, and every name it mentions (also those in
    commented-out lines)."""
    values, mentioned = {}, set()
    for line in (DEPLOY / ".env.example").read_text().splitlines():
        match = re.fullmatch(r"\s*(#\s*)?([A-Z][A-Z0-9_]*)=(.*)", line)
        if match:
            mentioned.add(match[2])
            if not match[1]:
                values[match[2]] = match[3].strip()
    return values, mentioned


def _operator_env() -> dict[str, str]:
    """What an operator's deploy/.env holds: the example's values, its empty secrets filled."""
    values, _ = _env_example()
    return {name: value or secrets.token_hex(16) for name, value in values.items()}


def _interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's interpolation of one value (the forms deploy/compose.yaml uses)."""

    def substitute(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        name, operator, argument = match[1], match[2] or "", match[3] or ""
        value = env.get(name)
        missing = value is None or (operator.startswith(":") and value == "")
        if operator.endswith("?") and missing:
            raise AssertionError(f"compose would stop: {name} is required ({argument})")
        if operator.endswith("-") and missing:
            return argument
        return value or ""

    return INTERPOLATION.sub(substitute, text)


def _replica_env(name: str) -> dict[str, str]:
    """A replica's environment as the container gets it from an operator's deploy/.env."""
    env = _operator_env()
    resolved = {}
    for key, value in _environment(_compose()["services"][name]).items():
        if value is None:  # no value: taken from .env when set there, else unset
            if key in env:
                resolved[key] = env[key]
        else:
            resolved[key] = _interpolate(value, env)
    return resolved


def _readme_section() -> str:
    readme = (ROOT / "README.md").read_text()
    assert DEPLOYMENT_SECTION in readme
    return readme.split(DEPLOYMENT_SECTION, 1)[1].split("\n## ", 1)[0]


NAMING_FILES = [*sorted(p.name for p in DEPLOY.iterdir() if p.is_file()), "README.md"]


@pytest.mark.parametrize("name", NAMING_FILES)
def test_every_memory_variable_named_is_a_setting_the_server_reads(name: str) -> None:
    # The README: its deployment section (elsewhere it names the client's MEMORY_URL too).
    text = _readme_section() if name == "README.md" else (DEPLOY / name).read_text()
    named = set(SETTING_NAME.findall(text))
    assert named - _setting_names() == set()


def test_the_files_name_memory_variables_at_all() -> None:
    # Guards the test above against a pattern that silently matches nothing.
    assert {"MEMORY_DATABASE_URL", "MEMORY_LANCE_URI", "MEMORY_ADMIN_KEY"} <= set(
        SETTING_NAME.findall((DEPLOY / "compose.yaml").read_text())
    )


@pytest.mark.parametrize("replica", REPLICAS)
def test_a_replicas_environment_is_valid_settings(
    replica: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith("MEMORY_")]:
        monkeypatch.delenv(key)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for key, value in _replica_env(replica).items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert settings.host == "0.0.0.0"
    assert settings.database_url and settings.database_url.startswith("postgresql://")
    assert settings.lance_remote and settings.lance_uri and settings.lance_uri.startswith("s3://")
    assert {"aws_endpoint", "aws_access_key_id", "aws_secret_access_key"} <= set(
        settings.lance_storage_options
    )
    assert settings.admin_key is not None
    assert not settings.llm_enabled  # the example's LLM lines are commented out


def test_the_replicas_share_the_database_the_vector_store_and_the_settings() -> None:
    first, second = (_environment(_compose()["services"][name]) for name in REPLICAS)
    assert first["MEMORY_DATABASE_URL"] == second["MEMORY_DATABASE_URL"]
    assert first["MEMORY_LANCE_URI"] == second["MEMORY_LANCE_URI"]
    assert first == second


def test_each_replica_keeps_its_data_folder_to_itself() -> None:
    services = _compose()["services"]
    sources = []
    for name in REPLICAS:
        data_dir = _environment(services[name])["MEMORY_DATA_DIR"]
        mounted = [v.split(":")[0] for v in services[name]["volumes"] if f":{data_dir}" in v]
        assert len(mounted) == 1, f"{name}: one volume at {data_dir}"
        sources += mounted
    assert len(set(sources)) == len(REPLICAS)


@pytest.mark.parametrize("replica", REPLICAS)
def test_a_replica_is_checked_on_health_and_waits_for_its_stores(replica: str) -> None:
    service = _compose()["services"][replica]
    assert service["build"]["dockerfile"] == "deploy/Dockerfile"
    assert any("/health" in part for part in service["healthcheck"]["test"])
    assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert service["depends_on"]["minio"]["condition"] == "service_healthy"
    assert service["depends_on"]["create-bucket"]["condition"] == "service_completed_successfully"


def test_the_stores_have_healthchecks_and_the_bucket_is_created() -> None:
    services = _compose()["services"]
    postgres = services["postgres"]
    assert postgres["image"] == "postgres:15"
    assert "pg_isready" in postgres["healthcheck"]["test"]
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])
    assert services["minio"]["healthcheck"]["test"]
    job = services["create-bucket"]
    assert job["depends_on"]["minio"]["condition"] == "service_healthy"
    assert 'mc mb --ignore-existing "store/$$S3_BUCKET"' in job["command"][0]
    # The bucket the job creates is the one the replicas use.
    bucket = _interpolate(_environment(job)["S3_BUCKET"] or "", _operator_env())
    assert _replica_env("memory-a")["MEMORY_LANCE_URI"].startswith(f"s3://{bucket}/")


def test_every_variable_compose_interpolates_is_in_the_env_example() -> None:
    text = (DEPLOY / "compose.yaml").read_text()
    used = {m[1] for m in INTERPOLATION.finditer(text) if m[1]}
    valueless = {
        key
        for service in _compose()["services"].values()
        for key, value in _environment(service).items()
        if value is None
    }
    _, mentioned = _env_example()
    assert (used | valueless) - mentioned == set()


def test_the_admin_key_and_the_store_secrets_are_required() -> None:
    env = _environment(_compose()["services"]["memory-a"])
    assert (env["MEMORY_ADMIN_KEY"] or "").startswith("${MEMORY_ADMIN_KEY:?")
    assert "${POSTGRES_PASSWORD:?" in (env["MEMORY_DATABASE_URL"] or "")
    assert "${S3_SECRET_ACCESS_KEY:?" in (env["MEMORY_LANCE_STORAGE_OPTIONS"] or "")


def test_the_proxy_balances_over_both_replicas() -> None:
    services = _compose()["services"]
    proxy = services["proxy"]
    assert "./nginx.conf:/etc/nginx/conf.d/default.conf:ro" in proxy["volumes"]
    assert {name: d["condition"] for name, d in proxy["depends_on"].items()} == dict.fromkeys(
        REPLICAS, "service_healthy"
    )
    conf = (DEPLOY / "nginx.conf").read_text()
    upstream = re.search(r"upstream memory_server \{(.*?)\}", conf, re.S)
    assert upstream is not None
    servers = re.findall(r"^\s*server (\S+)", upstream[1], re.M)
    ports = {_environment(services[name])["MEMORY_PORT"] for name in REPLICAS}
    assert servers == [f"{name}:{port}" for name in REPLICAS for port in ports]
    assert "proxy_pass http://memory_server;" in conf


def test_the_proxy_passes_the_key_and_retries_only_what_is_safe() -> None:
    conf = (DEPLOY / "nginx.conf").read_text()
    assert "proxy_set_header Authorization $http_authorization;" in conf
    retry = re.search(r"^\s*proxy_next_upstream ([^;]*);", conf, re.M)
    assert retry is not None
    assert set(retry[1].split()) == {"error", "timeout", "http_503"}  # no non_idempotent


def test_the_proxy_refuses_the_bodies_the_server_refuses() -> None:
    conf = (DEPLOY / "nginx.conf").read_text()
    size = re.search(r"client_max_body_size (\d+)([km]?);", conf)
    assert size is not None
    factor = {"": 1, "k": 1024, "m": 1024 * 1024}[size[2]]
    assert int(size[1]) * factor == Settings.model_fields["max_body_bytes"].default


def _dockerfile_steps() -> list[str]:
    text = (DEPLOY / "Dockerfile").read_text()
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line.strip() for line in joined.splitlines() if line.strip() and line[0] != "#"]


def test_the_image_pins_torch_as_scripts_setup_does_before_the_project() -> None:
    pin = re.search(r"torch==[0-9.]+", (ROOT / "scripts" / "setup").read_text())
    assert pin is not None and pin[0] == "torch==2.13.0"
    steps = _dockerfile_steps()
    assert steps[0] == "FROM python:3.11-slim"
    torch = [i for i, s in enumerate(steps) if s.startswith("RUN pip install") and pin[0] in s]
    project = [i for i, s in enumerate(steps) if re.match(r"RUN pip install \.(\s|$)", s)]
    assert len(torch) == 1 and len(project) == 1 and torch[0] < project[0]
    assert "--index-url https://download.pytorch.org/whl/cpu" in steps[torch[0]]
    assert any(s.startswith("ENV") and "HF_HUB_OFFLINE=1" in s for s in steps)
    assert steps[-1] == 'CMD ["memory-server", "serve"]'


def test_the_image_install_holds_every_package() -> None:
    # The image installs the project as a wheel (not editable): only the listed packages go in.
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("server", "embeddings")
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found - listed == set()
