"""Who may call what: every endpoint against every kind of key."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.backends import query
from tests.conftest import ADMIN_KEY, AGENT, PHONE, Api, admin, assert_error, bearer

P = f"/v1/agents/{AGENT}/people/{PHONE}"
TURN = {"role": "user", "content": "hi"}

# (method, path, body, kind): kind "write" needs admin or the agent; "read" also lets staff in;
# "admin" is admin only.
ENDPOINTS = [
    ("POST", f"{P}/messages", TURN, "write"),
    ("GET", f"{P}/messages", None, "read"),
    ("GET", f"{P}/context", None, "read"),
    ("GET", f"{P}/export", None, "read"),
    ("DELETE", P, None, "write"),
    ("POST", f"{P}/compact", None, "write"),
    ("POST", f"{P}/opt-out", None, "write"),
    ("GET", f"{P}/opt-out", None, "read"),
    ("POST", f"{P}/move", {"to": "+15557654321"}, "write"),
    ("PUT", f"{P}/name", {"name": "Carmen"}, "write"),
    ("GET", f"{P}/name", None, "read"),
    ("DELETE", f"{P}/name", None, "write"),
    ("POST", f"/v1/agents/{AGENT}/memories", {"content": "x", "phone": PHONE}, "write"),
    ("GET", f"/v1/agents/{AGENT}/memories/mem_unknown", None, "read"),
    ("GET", f"/v1/agents/{AGENT}/memories", None, "read"),
    ("DELETE", f"/v1/agents/{AGENT}/memories", None, "write"),
    ("POST", f"/v1/agents/{AGENT}/memories/search", {"query": "x"}, "read"),
    ("PATCH", f"/v1/agents/{AGENT}/memories/mem_unknown", {"content": "y"}, "write"),
    ("DELETE", f"/v1/agents/{AGENT}/memories/mem_unknown", None, "write"),
    ("POST", f"/v1/agents/{AGENT}/memories/mem_unknown/embedding", None, "write"),
    ("POST", f"/v1/agents/{AGENT}/memories/mem_unknown/approve", None, "admin"),
    ("POST", f"/v1/agents/{AGENT}/memories/mem_unknown/reject", None, "admin"),
    ("GET", f"/v1/agents/{AGENT}/memories/mem_unknown/history", None, "read"),
    ("GET", f"/v1/agents/{AGENT}/settings", None, "read"),
    ("POST", "/v1/search", {"query": "x"}, "search"),
    ("GET", "/v1/audit", None, "admin"),
    ("PUT", f"/v1/agents/{AGENT}/settings", {"top_k": 3}, "admin"),
    ("POST", "/v1/keys", {"scope": "staff"}, "admin"),
    ("GET", "/v1/keys", None, "admin"),
    ("DELETE", "/v1/keys/key_unknown", None, "admin"),
    ("GET", "/metrics", None, "operator"),
    # MCP: any live key connects; each tool call is then checked as its API call (test_mcp).
    ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}, "any"),
]

CALLERS: dict[str, Callable[[Api], dict[str, str]]] = {
    "none": lambda api: {},
    "garbage": lambda api: bearer("mk_not_a_real_key"),
    "not_bearer": lambda api: {"Authorization": f"Basic {ADMIN_KEY}"},
    "revoked": lambda api: revoked_key(api),
    "wrong_agent": lambda api: api.key("agent:other"),
    "right_agent": lambda api: api.key(f"agent:{AGENT}"),
    "staff_all": lambda api: api.key("staff"),
    "staff_listed": lambda api: api.key("staff", [AGENT, "x"]),
    "staff_other": lambda api: api.key("staff", ["other"]),
    "admin": lambda api: admin(),
}

# Every 401 names the scheme (RFC 6750), and says invalid_token when a key came and is not
# live: a client then asks for a bearer key (an MCP client would start an OAuth flow).
CHALLENGES = {
    "none": 'Bearer realm="memory-server"',
    "not_bearer": 'Bearer realm="memory-server"',
    "garbage": 'Bearer realm="memory-server", error="invalid_token"',
    "revoked": 'Bearer realm="memory-server", error="invalid_token"',
}

ALLOWED = {
    "write": {"right_agent", "admin"},
    "read": {"right_agent", "admin", "staff_all", "staff_listed"},
    "admin": {"admin"},
    "search": {"admin", "staff_all", "staff_listed", "staff_other"},
    "operator": {"admin", "staff_all", "staff_listed", "staff_other"},
    "any": {"admin", "staff_all", "staff_listed", "staff_other", "right_agent", "wrong_agent"},
}


def revoked_key(api: Api) -> dict[str, str]:
    response = api.client.post("/v1/keys", json={"scope": f"agent:{AGENT}"}, headers=admin())
    key = response.json()
    assert api.client.delete(f"/v1/keys/{key['id']}", headers=admin()).status_code == 200
    return bearer(key["key"])


# Who may call what is decided before any engine's code runs, the same on both: 360 cases
# run once, by the sqlite pass (keys' storage on PostgreSQL: the tests below).
@pytest.mark.engine_agnostic
@pytest.mark.parametrize(("method", "path", "body", "kind"), ENDPOINTS)
@pytest.mark.parametrize("caller", list(CALLERS))
def test_auth_matrix(
    api: Api, method: str, path: str, body: object, kind: str, caller: str
) -> None:
    headers = CALLERS[caller](api)
    response = api.client.request(method, path, json=body, headers=headers)
    if caller in ("none", "garbage", "not_bearer", "revoked"):
        assert_error(response, 401, "unauthorized")
        assert response.headers["WWW-Authenticate"] == CHALLENGES[caller], response.headers
    elif caller in ALLOWED[kind]:
        assert response.status_code < 400 or response.status_code == 404, response.text
    else:
        assert_error(response, 403, "forbidden")


PUBLIC = {("/health", "get"), ("/staff", "get")}


def _template(path: str) -> str:
    """The OpenAPI template of a concrete path of ENDPOINTS."""
    path = path.replace(P, "/v1/agents/{agent}/people/{phone}")
    path = path.replace(f"/v1/agents/{AGENT}/", "/v1/agents/{agent}/")
    path = path.replace("/memories/mem_unknown", "/memories/{memory_id}")
    return path.replace("/v1/keys/key_unknown", "/v1/keys/{key_id}")


def test_the_matrix_covers_every_endpoint_of_the_schema(api: Api) -> None:
    schema = api.client.get("/openapi.json").json()["paths"]
    in_schema = {(path, method) for path, ops in schema.items() for method in ops}
    covered = {(_template(path), method.lower()) for method, path, _, _ in ENDPOINTS}
    assert in_schema - PUBLIC - covered == set(), "an endpoint without an auth test"


def test_the_schema_documents_the_401_and_its_challenge(api: Api) -> None:
    paths = api.client.get("/openapi.json").json()["paths"]
    for method, path, _, _ in ENDPOINTS:
        answer = paths[_template(path)][method.lower()]["responses"]["401"]
        assert "WWW-Authenticate" in answer["headers"], (method, path)
        assert answer["content"]["application/json"]["schema"]["$ref"].endswith("/Error")


def test_public_endpoints_need_no_key(api: Api) -> None:
    for path, _ in PUBLIC:
        assert api.client.get(path).status_code == 200, path


def test_wrong_agent_key_changes_nothing(api: Api) -> None:
    api.post_turn("keep me")
    other = api.key("agent:other")
    assert_error(api.post_turn("sneaky", headers=other), 403)
    assert_error(api.client.delete(P, headers=other), 403)
    history = api.context().json()["history"]
    assert [h["content"] for h in history] == ["keep me"]


def test_staff_can_read_but_not_write(api: Api) -> None:
    api.post_turn("hello")
    staff = api.key("staff")
    assert api.client.get(f"{P}/messages", headers=staff).status_code == 200
    assert_error(api.post_turn("nope", headers=staff), 403)


def test_health_and_openapi_need_no_key(api: Api) -> None:
    assert api.client.get("/health").json()["status"] == "ok"
    assert api.client.get("/openapi.json").status_code == 200
    assert api.client.get("/docs").status_code == 200


def test_no_other_documentation_page_is_open(api: Api) -> None:
    for path in ("/redoc", "/docs/oauth2-redirect"):
        assert_error(api.client.get(path), 404)


BAD_BODIES = [
    b"{bad",
    b'{"role": "user", "role": "assistant", "content": "x"}',
    b'{"role": "user", "content": NaN}',
    b"[" * 5000,
    b'{"role": "user", "content": "\\ud800"}',
]


@pytest.mark.parametrize("body", BAD_BODIES)
@pytest.mark.parametrize("caller", ["none", "garbage", "revoked"])
def test_the_key_is_checked_before_the_body(api: Api, body: bytes, caller: str) -> None:
    """Without a valid key the answer is 401 whatever the body: a caller without a key learns
    nothing about how the body would have been read."""
    headers = {"Content-Type": "application/json", **CALLERS[caller](api)}
    for method, path in (("POST", f"{P}/messages"), ("PUT", f"/v1/agents/{AGENT}/settings")):
        response = api.client.request(method, path, content=body, headers=headers)
        assert_error(response, 401, "unauthorized")
    with_key = api.client.post(f"{P}/messages", content=body, headers=admin())
    assert with_key.status_code == 422


def test_openapi_declares_the_bearer_key(api: Api) -> None:
    schema = api.client.get("/openapi.json").json()
    schemes = schema["components"]["securitySchemes"]
    assert [s["scheme"].lower() for s in schemes.values()] == ["bearer"]
    operations = [
        (path, method, op) for path, ops in schema["paths"].items() for method, op in ops.items()
    ]
    for path, method, op in operations:
        if (path, method) in PUBLIC:
            assert "security" not in op, path
        else:
            assert op.get("security"), f"{method} {path} does not declare its key"


def test_keys_are_stored_hashed(api: Api) -> None:
    response = api.client.post(
        "/v1/keys", json={"scope": "staff", "agents": ["b", "a"]}, headers=admin()
    )
    assert response.status_code == 201
    body = response.json()
    assert body["scope"] == "staff" and body["agents"] == ["a", "b"]
    assert body["key"].startswith("mk_") and len(body["key"]) > 40
    stored = query(api.services.settings, "SELECT hash FROM keys WHERE id = ?", body["id"])[0][0]
    assert body["key"] not in stored and len(stored) == 64
    if api.services.store.engine == "sqlite":  # (PostgreSQL's files: tests/server/test_pg_*)
        with open(api.services.settings.sqlite_path, "rb") as db:
            assert body["key"].encode() not in db.read()
    listed = api.client.get("/v1/keys", headers=admin()).json()["items"]
    assert [k["id"] for k in listed] == [body["id"]]
    assert "key" not in listed[0]


def test_every_key_comparison_is_constant_time(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys are compared as SHA-256 digests with hmac.compare_digest, never with ==: a spy
    on compare_digest sees every request's key checked, the bootstrap key and a stored one."""
    import hashlib
    import hmac

    import server.auth

    stored = api.key("staff")["Authorization"].removeprefix("Bearer ")
    compared: list[tuple[object, object]] = []
    real_compare = hmac.compare_digest

    def spy(a: str, b: str) -> bool:
        compared.append((a, b))
        return real_compare(a, b)

    monkeypatch.setattr(server.auth.hmac, "compare_digest", spy)
    # The audit log is admin only: the staff key is known (403), the wrong one is not (401).
    for secret, status in ((ADMIN_KEY, 200), (stored, 403), ("mk_wrong", 401)):
        compared.clear()
        response = api.client.get("/v1/audit", headers=bearer(secret))
        assert response.status_code == status, secret
        digest = hashlib.sha256(secret.encode()).hexdigest()
        assert compared and all(digest in pair for pair in compared), secret
        assert all(secret not in pair for pair in compared), "a raw key was compared"


@pytest.mark.parametrize(
    "body",
    [
        {"scope": "root"},
        {"scope": "agent:Bad"},
        {"scope": "agent:a", "agents": ["b"]},
        {"scope": "admin", "agents": ["a"]},
        {"scope": "staff", "agents": ["NOPE"]},
        {},
    ],
)
def test_bad_scopes_are_422(api: Api, body: dict[str, object]) -> None:
    assert_error(api.client.post("/v1/keys", json=body, headers=admin()), 422)


def test_revoking_an_unknown_key_is_404(api: Api) -> None:
    assert_error(api.client.delete("/v1/keys/key_nope", headers=admin()), 404, "not_found")


def test_admin_key_must_be_strong(tmp_path: object) -> None:
    from pydantic import ValidationError

    from server.config import Settings

    with pytest.raises(ValidationError):
        Settings(admin_key="short")
    with pytest.raises(ValidationError):
        Settings(admin_key="changeme")


def test_revoking_a_revoked_key_says_it_was_revoked_already(api: Api) -> None:
    made = api.client.post("/v1/keys", json={"scope": "staff"}, headers=admin()).json()
    first = api.client.delete(f"/v1/keys/{made['id']}", headers=admin())
    assert first.json() == {"id": made["id"], "revoked": True, "already_revoked": False}
    again = api.client.delete(f"/v1/keys/{made['id']}", headers=admin())
    assert again.status_code == 200
    assert again.json() == {"id": made["id"], "revoked": True, "already_revoked": True}
    assert api.client.delete("/v1/keys/key_nope", headers=admin()).status_code == 404


def test_docs_work_offline_from_files_the_server_serves(api: Api) -> None:
    page = api.client.get("/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    html = page.text
    # Every script, style and icon the page loads is the server's own: no CDN, no other host.
    assert "http://" not in html and "https://" not in html, html
    assert '"validatorUrl": null' in html  # no validator badge fetched from swagger.io
    for path, kind in (
        ("/docs/assets/swagger-ui-bundle.js", "javascript"),
        ("/docs/assets/swagger-ui.css", "css"),
        ("/docs/assets/favicon.png", "image/png"),
    ):
        assert f"'{path}'" in html or f'"{path}"' in html, path
        got = api.client.get(path)
        assert got.status_code == 200 and kind in got.headers["content-type"], path
        assert len(got.content) > 500, path
    assert "SwaggerUIBundle" in api.client.get("/docs/assets/swagger-ui-bundle.js").text
    for other in ("redoc.standalone.js", "swagger-ui-bundle.js.map", "..%2F__init__.py"):
        assert_error(api.client.get(f"/docs/assets/{other}"), 404)
