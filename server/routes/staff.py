"""The staff search page: one self-contained HTML file, no build step, no external assets."""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter(tags=["staff search"])

_PAGE = resources.files("server").joinpath("static/staff.html").read_text(encoding="utf-8")


@router.get("/staff", response_class=HTMLResponse)
def staff_page() -> HTMLResponse:
    """The page's static shell needs no key; every search it makes sends the key."""
    return HTMLResponse(_PAGE, headers={"Cache-Control": "no-store"})
