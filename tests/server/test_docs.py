"""The README documents every setting and its default; the OpenAPI schema every contract path."""

from __future__ import annotations

import json
import re
from pathlib import Path

from server.config import Settings
from tests.conftest import Api

ROOT = Path(__file__).resolve().parents[2]


def test_readme_documents_every_setting() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [
        f"MEMORY_{name.upper()}"
        for name in Settings.model_fields
        if f"`MEMORY_{name.upper()}`" not in readme
    ]
    assert missing == []


def test_readme_gives_each_setting_its_own_default() -> None:
    """The README's settings table repeats each default: it must be the one Settings has.
    (A default described in words, such as the model's calibrated value, is left alone.)"""
    readme = (ROOT / "README.md").read_text()
    section = readme.partition("\n## Settings\n")[2].partition("\n## ")[0]
    rows = re.findall(r"^\| `MEMORY_(\w+)` \| ([^|]+?) \|", section, flags=re.MULTILINE)
    assert len(rows) >= len(Settings.model_fields)
    checked = 0
    for name, cell in rows:
        field = Settings.model_fields[name.lower()]
        default = field.get_default(call_default_factory=True)
        if cell == "unset":
            assert default is None, name
        elif (literal := re.fullmatch(r"`([^`<]+)`", cell)) is not None:
            assert _same(literal.group(1), default), (name, cell, default)
        else:
            continue
        checked += 1
    # (in words: lance_uri, the calibrated two, the model cache's folder and the threads)
    assert checked >= len(Settings.model_fields) - 5


def _same(text: str, default: object) -> bool:
    if isinstance(default, Path):
        return Path(text) == default
    if isinstance(default, str):
        return text == default
    value = json.loads(text)
    return bool(value == (list(default) if isinstance(default, tuple) else default))


def test_request_bodies_carry_examples(api: Api) -> None:
    schemas = api.client.get("/openapi.json").json()["components"]["schemas"]
    for name in (
        "MessageCreate",
        "MemoryCreate",
        "MemoryUpdate",
        "MemorySearch",
        "KeyCreate",
        "AgentSettingsIn",
    ):
        assert schemas[name].get("examples"), name


def test_every_setting_has_a_description() -> None:
    assert [n for n, f in Settings.model_fields.items() if not f.description] == []


def test_openapi_lists_the_contract_paths(api: Api) -> None:
    paths = api.client.get("/openapi.json").json()["paths"]
    person = "/v1/agents/{agent}/people/{phone}"
    expected = {
        "/health": {"get"},
        "/v1/keys": {"get", "post"},
        "/v1/keys/{key_id}": {"delete"},
        f"{person}/messages": {"get", "post"},
        f"{person}/context": {"get"},
        f"{person}/export": {"get"},
        person: {"delete"},
        f"{person}/compact": {"post"},
        "/v1/agents/{agent}/memories": {"get", "post", "delete"},
        "/v1/agents/{agent}/memories/search": {"post"},
        "/v1/agents/{agent}/memories/{memory_id}": {"get", "patch", "delete"},
        "/v1/agents/{agent}/memories/{memory_id}/embedding": {"post"},
        "/v1/agents/{agent}/memories/{memory_id}/approve": {"post"},
        "/v1/agents/{agent}/memories/{memory_id}/reject": {"post"},
        "/v1/agents/{agent}/memories/{memory_id}/history": {"get"},
        "/v1/agents/{agent}/settings": {"get", "put"},
        "/metrics": {"get"},
        "/v1/search": {"post"},
        "/v1/audit": {"get"},
        "/staff": {"get"},
        "/mcp": {"post"},
    }
    for path, methods in expected.items():
        assert methods <= set(paths[path]), path


def test_memory_endpoints_show_examples_of_what_they_return(api: Api) -> None:
    """Every memories and settings operation shows an example of its 2xx body in OpenAPI, and
    every example in the schema is valid for its model."""
    import server.schemas

    schema = api.client.get("/openapi.json").json()
    components = schema["components"]["schemas"]
    for path, operations in schema["paths"].items():
        if not path.startswith("/v1/agents/{agent}/memories") and not path.endswith("/settings"):
            continue
        for method, operation in operations.items():
            ok = [r for code, r in operation["responses"].items() if code.startswith("2")]
            body = ok[0]["content"]["application/json"]["schema"]
            name = body["$ref"].rsplit("/", 1)[-1]
            assert components[name].get("examples"), f"{method} {path}: {name} has no example"
    for name, component in components.items():
        model = getattr(server.schemas, name, None)
        for example in component.get("examples", []) if model is not None else []:
            model.model_validate(example)
