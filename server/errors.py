"""One exception per failure, each carrying its HTTP status, and the one JSON error shape."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, ClassVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)


class ApiError(Exception):
    """Base of every error the API returns on purpose."""

    status: ClassVar[int] = 400
    code: ClassVar[str] = "bad_request"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def headers(self) -> dict[str, str]:
        """Headers the answer carries besides the error body."""
        return {}


REALM = "memory-server"


class Unauthorized(ApiError):
    """No live key. The answer names the scheme (RFC 6750), so that a client asks for a bearer
    key: an MCP client that gets a 401 without it starts an OAuth flow instead."""

    status = 401
    code = "unauthorized"

    def __init__(self, message: str, *, key_sent: bool = False) -> None:
        super().__init__(message)
        self.key_sent = key_sent  # a key came and is not live: invalid_token, says RFC 6750

    @property
    def headers(self) -> dict[str, str]:
        challenge = f'Bearer realm="{REALM}"'  # no error code without a key (section 3.1)
        if self.key_sent:
            challenge += ', error="invalid_token"'
        return {"WWW-Authenticate": challenge}


class Forbidden(ApiError):
    status = 403
    code = "forbidden"


class NotFound(ApiError):
    status = 404
    code = "not_found"


class Conflict(ApiError):
    status = 409
    code = "conflict"


class InvalidSupersedes(ApiError):
    """`supersedes` names no memory of this agent and person."""

    status = 422
    code = "invalid_supersedes"


class AlreadySuperseded(ApiError):
    """`supersedes` names a memory that another one has replaced already."""

    status = 409
    code = "already_superseded"


class SupersedesConflict(ApiError):
    """The memory sent is stored already (identical and current), and that one replaces a
    different memory than `supersedes` names: one memory replaces one other."""

    status = 409
    code = "supersedes_conflict"


class SupersedesCycle(ApiError):
    """`supersedes` names a memory that replaces, or would on approval, the memory sent
    (directly or through others): the chain would close on itself and leave no current
    memory."""

    status = 409
    code = "supersedes_cycle"


class SamePhone(ApiError):
    """A person moved onto the number they already have."""

    status = 422
    code = "same_phone"


class PersonNotFound(ApiError):
    """Nothing is stored for that number of this agent (nothing to move)."""

    status = 404
    code = "person_not_found"


class NameNotSet(ApiError):
    """No name is set for the person."""

    status = 404
    code = "name_not_set"


class PersonBusyError(ApiError):
    """A forget or a compaction of the person is under way: try the move again shortly."""

    status = 409
    code = "person_busy"


class BodyTooLarge(ApiError):
    status = 413
    code = "body_too_large"


class MetadataTooLarge(ApiError):
    """A memory's metadata (or a search's metadata filter) over MEMORY_MAX_METADATA_BYTES."""

    status = 413
    code = "metadata_too_large"


class InvalidInput(ApiError):
    """422 with a specific code, such as invalid_phone or invalid_agent."""

    status = 422
    code = "invalid_request"

    def __init__(self, message: str, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.specific_code = code


class Unavailable(ApiError):
    status = 503
    code = "unavailable"


def error_body(status: int, code: str, message: str) -> dict[str, Any]:
    return {"error": {"status": status, "code": code, "message": message}}


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(error_body(status, code, message), status_code=status, headers=headers)


# Body fields whose validation errors get their own code.
_FIELD_CODES = {
    "phone": "invalid_phone",
    "agent": "invalid_agent",
    "agents": "invalid_agent",
    "role": "invalid_role",
    "content": "invalid_content",
    "number": "invalid_number",
    "created_at": "invalid_date",
    "start_date": "invalid_date",
    "end_date": "invalid_date",
    "since": "invalid_date",
    "until": "invalid_date",
    "scope": "invalid_scope",
}


def field_code(field: str) -> str:
    """The error code for an invalid value of a body field: invalid_phone for phone, and so on."""
    return _FIELD_CODES.get(field, "invalid_request")


def _validation_code(errors: list[dict[str, Any]]) -> str:
    first = errors[0] if errors else {}
    kind = str(first.get("type", ""))
    loc = [str(part) for part in first.get("loc", ())]
    if kind == "json_invalid":
        return "invalid_json"
    if kind == "extra_forbidden":
        return "unknown_field"
    if kind == "missing":
        return "missing_field"
    for part in reversed(loc):
        if part in _FIELD_CODES:
            return _FIELD_CODES[part]
    return "invalid_request"


def _validation_message(errors: list[dict[str, Any]]) -> str:
    parts = []
    for err in errors[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    """Render every error, expected or not, in the one JSON shape."""
    # Here, not at the top: the CLI imports this module, and this pulls in LanceDB.
    from embeddings.index import IndexBusy

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        code = exc.specific_code if isinstance(exc, InvalidInput) else exc.code
        return error_response(exc.status, code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [dict(e) for e in exc.errors()]
        return error_response(422, _validation_code(errors), _validation_message(errors))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {400: "invalid_body", 404: "not_found", 405: "method_not_allowed"}
        code = codes.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(IndexBusy)
    async def _index_busy(_: Request, exc: IndexBusy) -> JSONResponse:
        return error_response(503, "index_busy", f"{exc}; retry shortly")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(500, "internal_error", "internal error")

    app.openapi = _with_error_responses(app.openapi)  # type: ignore[method-assign]


# The one error shape, as the OpenAPI schema describes it.
ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["status", "code", "message"],
            "properties": {
                "status": {"type": "integer", "minimum": 400, "maximum": 599},
                "code": {"type": "string", "examples": ["invalid_phone"]},
                "message": {"type": "string"},
            },
        }
    },
}


def _error_response(description: str) -> dict[str, Any]:
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    return {"description": description, "content": content}


# The 401 of every operation that takes a key, as the OpenAPI schema describes it.
UNAUTHORIZED_RESPONSE: dict[str, Any] = {
    **_error_response("No key, or a key that is unknown or revoked"),
    "headers": {
        "WWW-Authenticate": {
            "description": f'`Bearer realm="{REALM}"`, with `error="invalid_token"` when the'
            " request carried a key that is not live (RFC 6750).",
            "schema": {"type": "string"},
        }
    },
}


def _with_error_responses(build: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """Wrap FastAPI's schema builder so that every operation documents its errors: any 4xx
    (bad input, key, right, unknown id, body too large) in the one error shape, and 422 in that
    shape too instead of FastAPI's HTTPValidationError, which this API never sends."""
    done: dict[str, Any] | None = None

    def openapi() -> dict[str, Any]:
        nonlocal done
        schema = build()  # FastAPI caches it: the same dict every time
        if schema is not done:
            _document_errors(schema)
            done = schema
        return schema

    return openapi


def _document_errors(schema: dict[str, Any]) -> None:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["Error"] = ERROR_SCHEMA
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            if "422" in responses:
                responses["422"] = _error_response("Invalid request")
            if operation.get("security"):
                responses.setdefault("401", UNAUTHORIZED_RESPONSE)
            responses.setdefault("4XX", _error_response("Any other client error"))
    if "#/components/schemas/HTTPValidationError" not in json.dumps(schema.get("paths", {})):
        components.pop("HTTPValidationError", None)
        components.pop("ValidationError", None)
