"""The staff search page: one self-contained HTML file, no build step, no external assets."""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, Response

router = APIRouter(tags=["staff search"])

_PAGE = resources.files("server").joinpath("static/staff.html").read_text(encoding="utf-8")
_ICON = resources.files("server").joinpath("static/favicon.svg").read_bytes()


@router.get("/staff", response_class=HTMLResponse)
def staff_page() -> HTMLResponse:
    """The page's static shell needs no key; every search it makes sends the key."""
    return HTMLResponse(_PAGE, headers={"Cache-Control": "no-store"})


@router.get("/favicon.ico", include_in_schema=False)
def favicon() -> Response:
    """The page's icon (an SVG, whatever the name: browsers ask this path by habit)."""
    return Response(
        _ICON, media_type="image/svg+xml", headers={"Cache-Control": "public, max-age=86400"}
    )
