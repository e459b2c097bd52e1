"""/docs with no network: Swagger UI 5's files come from the fastapi-offline package (its
static folder only) and are served here, not from a public CDN (FastAPI's default), so the
page works on an offline machine and the browser asks nothing of anyone else. Swagger UI 5,
because FastAPI writes OpenAPI 3.1, which Swagger UI 4 refuses to render. Only the three
files the page loads are served."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

from server.errors import NotFound

ASSETS = "/docs/assets"
FILES = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon.png": "image/png",
}
STATIC = Path(str(resources.files("fastapi_offline").joinpath("static")))


def install(app: FastAPI) -> None:
    """The page at /docs and its files under /docs/assets (create the app with docs_url=None)."""
    router = APIRouter(include_in_schema=False)

    @router.get("/docs")
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
            # No badge from validator.swagger.io: the page asks no other host for anything.
            swagger_ui_parameters={"validatorUrl": None},
        )

    @router.get(ASSETS + "/{name}")
    def asset(name: str) -> FileResponse:
        if name not in FILES:
            raise NotFound("no such documentation file")
        return FileResponse(
            STATIC / name,
            media_type=FILES[name],
            headers={"Cache-Control": "public, max-age=86400"},
        )

    app.include_router(router)
