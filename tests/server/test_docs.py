"""The README documents every setting, and the OpenAPI schema every contract path."""

from __future__ import annotations

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
    }
    for path, methods in expected.items():
        assert methods <= set(paths[path]), path
