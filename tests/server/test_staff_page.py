"""The staff page in real headless Chromium (Debian's package, driven by Playwright)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from server.app import create_app
from tests.conftest import ADMIN_KEY, make_settings
from tests.fakes import fake_factory

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _browser_or_skip() -> str:
    """Chromium's path. Under ./scripts/test (and CI) MEMORY_REQUIRE_BROWSER=1 wherever
    Chromium is or can be installed, so a missing browser fails the test; only a bare pytest
    run, or a non-root machine without Chromium, skips it, with the reason."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        reason = "the playwright package is not installed (scripts/test installs it)"
    else:
        if CHROMIUM:
            return CHROMIUM
        reason = "Debian's chromium is not installed (scripts/test installs it as root)"
    if os.environ.get("MEMORY_REQUIRE_BROWSER") == "1":
        pytest.fail(f"browser test required but cannot run: {reason}")
    pytest.skip(reason)


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app = create_app(make_settings(tmp_path), encoder_factory=fake_factory, run_workers=False)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    person = f"{base}/v1/agents/shop/people/+15550000001/messages"
    httpx.post(
        person,
        json={"role": "user", "content": "I want a refund for the blue jacket, order 48213"},
        headers=admin,
    )
    for i in range(44):
        httpx.post(
            person,
            json={
                "role": "assistant" if i % 2 else "user",
                "content": f"chatting about the weather {i}",
            },
            headers=admin,
        )
    # Another agent's customer, and a fact: for the filters.
    httpx.post(
        f"{base}/v1/agents/bank/people/+15550000002/messages",
        json={"role": "user", "content": "👍🏽 the jacket I bought with my card was charged twice"},
        headers=admin,
    )
    httpx.post(
        f"{base}/v1/agents/shop/memories",
        json={"content": "Prefers a refund to credit for the jacket", "phone": "+15550000001"},
        headers=admin,
    )
    app.state.services.indexer.drain()
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_staff_find_a_paraphrase_and_open_the_timeline(live_server: str) -> None:
    chromium = _browser_or_skip()
    from playwright.sync_api import sync_playwright

    staff_key = httpx.post(
        f"{live_server}/v1/keys",
        json={"scope": "staff"},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    ).json()["key"]
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{live_server}/staff")

        page.fill("#key", "mk_wrong")
        page.fill("#query", "blue jacket refund")
        page.click("#go")
        page.wait_for_selector("#status.error")
        assert "not accepted" in page.inner_text("#status")

        page.fill("#key", staff_key)
        page.fill("#query", "customer wanting a refund for a blue jacket")
        page.click("#go")
        page.wait_for_selector(".hit")
        first = page.inner_text(".hit >> nth=0")
        assert "refund for the blue jacket" in first
        assert page.locator(".hit >> nth=0 >> mark").count() >= 2

        page.click(".person h2 button >> nth=0")
        page.wait_for_selector("#timeline .turn")
        assert page.locator("#timeline .turn").count() == 45
        assert "archived" in page.inner_text("#timeline")
        page.screenshot(path=str(ARTIFACTS / "staff.png"))

        # The filters: agent, person, kind, dates.
        page.fill("#query", "jacket")
        page.fill("#agents", "bank")
        people, kinds = search(page)
        assert people == ["+15550000002 · bank"] and kinds == ["turn"]
        # After an emoji (two UTF-16 units each) the mark still covers the word itself.
        assert page.locator(".hit mark").all_inner_texts() == ["jacket"]
        page.fill("#agents", "")
        page.fill("#phone", "+15550000001")
        people, kinds = search(page)
        assert people == ["+15550000001 · shop"] and set(kinds) == {"turn", "fact"}
        page.uncheck("input[name=kind][value=turns]")
        people, kinds = search(page)
        assert kinds == ["fact"]
        page.check("input[name=kind][value=turns]")
        page.fill("#until", "2000-01-01")
        assert search(page) == ([], [])
        page.fill("#until", "")
        page.fill("#since", "2000-01-01")
        assert search(page)[0] == ["+15550000001 · shop"]
        page.fill("#phone", "")
        page.fill("#since", "")

        page.fill("#query", "zzzz qqqq")
        page.select_option("#mode", "keyword")
        page.click("#go")
        page.wait_for_function("document.getElementById('status').textContent.startsWith('No')")
        assert "No results" in page.inner_text("#status")

        phone = browser.new_page(viewport={"width": 390, "height": 844})
        phone.goto(f"{live_server}/staff")
        assert phone.evaluate("document.documentElement.scrollWidth") <= 390
        browser.close()


def search(page: Any) -> tuple[list[str], list[str]]:
    """Submit the form, wait for the answer; the people shown and the kind of each hit."""
    page.click("#go")
    page.wait_for_function(
        "!['', 'Searching…'].includes(document.getElementById('status').textContent)"
    )
    people = [t.strip() for t in page.locator(".person h2 button").all_inner_texts()]
    kinds = [t.split("·")[0].strip().lower() for t in page.locator(".hit .kind").all_inner_texts()]
    return people, kinds
