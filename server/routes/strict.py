"""Unknown query parameters are refused, as unknown body fields are: `?treshold=0.1` is a
typo the caller must hear about, not a request answered with the default threshold."""

from __future__ import annotations

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from server.errors import InvalidInput

_CACHE = "_memory_server_query_names"  # the names a route takes, kept on the route itself


def _query_names(dependant: Dependant) -> set[str]:
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


NUL = "\x00"


async def refuse_unknown_query(request: Request) -> None:
    """A dependency of every route: 422 unknown_parameter for a query name it does not take,
    and 422 invalid_text for a NUL character in the path or a query value (no person writes
    one, and PostgreSQL cannot store one; JSON bodies: server/app.py strict_json_problem)."""
    if NUL in request.scope.get("path", "") or any(
        NUL in value for _, value in request.query_params.multi_items()
    ):
        raise InvalidInput(
            "the path or a query value contains a NUL character (U+0000)", code="invalid_text"
        )
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not request.query_params:
        return
    allowed: frozenset[str] | None = getattr(route, _CACHE, None)
    if allowed is None:
        allowed = frozenset(_query_names(route.dependant))
        setattr(route, _CACHE, allowed)
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        takes = ", ".join(sorted(allowed)) or "none"
        raise InvalidInput(
            f"unknown query parameter {unknown[0]!r} (this endpoint takes: {takes})",
            code="unknown_parameter",
        )
