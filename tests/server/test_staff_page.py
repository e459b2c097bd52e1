"""The staff page in real headless Chromium (Debian's package, driven by Playwright)."""

from __future__ import annotations

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

from server.app import create_app, default_encoder_factory
from server.config import DEFAULT_MODEL
from tests.conftest import ADMIN_KEY, make_settings

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _browser() -> str:
    """Chromium's path. scripts/test installs Debian's chromium (and Playwright): a machine
    where it cannot run fails these tests with the reason, it does not skip them."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.fail("the playwright package is not installed (scripts/test installs it)")
    if not CHROMIUM:
        pytest.fail("Debian's chromium is not installed (scripts/test installs it as root)")
    return CHROMIUM


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[str]:
    """The real default model (e5): the relevance, its floor and the screenshots are what a
    support agent sees."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = make_settings(tmp_path, embedding_model=DEFAULT_MODEL, compact_keep=20)
    app = create_app(settings, encoder_factory=default_encoder_factory(settings), run_workers=False)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}

    def say(phone: str, content: str, role: str = "user", agent: str = "shop") -> None:
        answer = httpx.post(
            f"{base}/v1/agents/{agent}/people/{phone}/messages",
            json={"role": role, "content": content},
            headers=admin,
        )
        assert answer.status_code == 201, answer.text

    # Maya: the jacket turn, then 44 turns of small talk about the weather.
    say(MAYA, "I want a refund for the blue jacket, order 48213")
    for i in range(44):
        say(MAYA, f"chatting about the weather {i}", "assistant" if i % 2 else "user")
    # Leo, the second-best person: a jacket too, in other words; he must not sit below
    # Maya's small talk.
    say(LEO, "Hola, the jacket I ordered came in the wrong size, can I send it back?")
    say(LEO, "thanks, have a nice day", "assistant")
    # Another agent's customer, and a fact: for the filters.
    say("+15550000002", "👍🏽 the jacket I bought with my card was charged twice", agent="bank")
    httpx.post(
        f"{base}/v1/agents/shop/memories",
        json={"content": "Prefers a refund to credit for the jacket", "phone": MAYA},
        headers=admin,
    )
    services = app.state.services
    services.memory.compact("shop", MAYA)  # the oldest turns are archived: "archived" shows
    services.indexer.drain()
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=10)


PAGER = "(document.querySelector('.pager .note') || {{}}).textContent?.includes('{}')"
MAYA = "+15550000001"
LEO = "+15550000003"
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def new_key(base: str, **body: Any) -> str:
    answer = httpx.post(
        f"{base}/v1/keys", json=body, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["key"])


def test_staff_find_a_paraphrase_and_open_the_timeline(live_server: str) -> None:
    chromium = _browser()
    from playwright.sync_api import sync_playwright

    staff_key = new_key(live_server, scope="staff")
    shop_only = new_key(live_server, scope="staff", agents=["shop"])
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{live_server}/staff")

        page.fill("#key", "mk_wrong")
        page.fill("#query", "blue jacket refund")
        page.click("#go")
        page.wait_for_selector("#status.error")
        assert "not accepted" in page.inner_text("#status")

        # A 403 says exactly why: this key may not read that agent.
        page.fill("#key", shop_only)
        page.fill("#agents", "bank")
        page.click("#go")
        page.wait_for_selector("#status.error")
        assert "may not read agent 'bank'" in page.inner_text("#status")
        page.fill("#agents", "")

        page.fill("#key", staff_key)
        page.fill("#query", "customer wanting a refund for a blue jacket")
        people, _ = search(page)
        first = page.inner_text(".hit >> nth=0")
        assert "refund for the blue jacket" in first
        assert page.locator(".hit >> nth=0 >> mark").count() >= 2
        # Relevance in words and as a bar, not a raw score.
        assert "strong match" in first or "good match" in first
        assert "score" not in first
        assert page.locator(".hit >> nth=0 >> .bar span").count() == 1
        # Each person once, best first; Maya's other results folded under her best one, so
        # Leo (a jacket too) comes right after it, not below her small talk.
        assert people[:2] == [f"{MAYA} · shop", f"{LEO} · shop"] or people[:2] == [
            f"{LEO} · shop",
            f"{MAYA} · shop",
        ]
        assert len(people) == len(set(people))
        visible = page.locator(".hit:visible").count()
        assert visible == page.locator(".person").count()  # one shown per person
        # The weather small talk is below the floor: hidden, and said so, one click away.
        assert "weather" not in page.inner_text("#results").split("weaker result")[0]
        hidden = page.inner_text("#results")
        assert "weaker result(s) hidden" in hidden, hidden
        page.screenshot(path=str(ARTIFACTS / "staff-desktop.png"))

        # The timeline opens at the matched turn, highlighted, with the turns around it.
        page.locator(".person", has_text=MAYA).locator(".open-at").first.click()
        page.wait_for_selector("#timeline .turn.matched")
        matched = page.inner_text("#timeline .turn.matched")
        assert "refund for the blue jacket" in matched and "the match" in matched
        assert "archived" in matched  # compacted: the timeline still has it
        turns = page.locator("#timeline .turn")
        assert turns.count() == 11  # the match (her first turn) and the 10 after it
        assert page.locator("#timeline .turn.matched").is_visible()
        page.click("#timeline >> text=later turns")
        page.wait_for_function("document.querySelectorAll('#timeline .turn').length === 31")
        page.screenshot(path=str(ARTIFACTS / "staff-timeline.png"))

        # Show the hidden ones too: the small talk appears (Maya's, folded under her best).
        page.click("#show-weaker")
        page.wait_for_function(
            "document.getElementById('status').textContent.includes('result(s) from')"
        )
        assert page.locator(".hit", has_text="weather").count() > 0
        assert page.locator("#show-weaker").count() == 0

        # Next and previous pages (30 results a page).
        page.fill("#query", "weather")
        page.select_option("#mode", "keyword")
        search(page)
        assert "results 1-30" in page.inner_text(".pager")
        assert page.is_disabled("#prev") and not page.is_disabled("#next")
        page.click("#next")
        page.wait_for_function(PAGER.format("31"))
        assert "results 31-44" in page.inner_text(".pager")
        assert not page.is_disabled("#prev") and page.is_disabled("#next")
        page.click("#prev")
        page.wait_for_function(PAGER.format("1-30"))
        page.select_option("#mode", "hybrid")

        # The filters: agent, person, kind, dates.
        page.fill("#query", "jacket")
        page.fill("#agents", "bank")
        people, kinds = search(page)
        assert people == ["+15550000002 · bank"] and kinds == ["turn"]
        # After an emoji (two UTF-16 units each) the mark still covers the word itself.
        assert page.locator(".hit mark").all_inner_texts() == ["jacket"]
        page.fill("#agents", "")
        page.fill("#phone", MAYA)
        people, kinds = search(page)
        assert people == [f"{MAYA} · shop"] and "turn" in kinds
        page.uncheck("input[name=kind][value=turns]")
        people, kinds = search(page)
        assert kinds == ["fact"]
        page.check("input[name=kind][value=turns]")
        page.fill("#until", "2000-01-01")
        assert search(page) == ([], [])
        page.fill("#until", "")
        page.fill("#since", "2000-01-01")
        assert search(page)[0] == [f"{MAYA} · shop"]
        page.fill("#phone", "")
        page.fill("#since", "")

        page.fill("#query", "zzzz qqqq")
        page.select_option("#mode", "keyword")
        page.click("#go")
        page.wait_for_function("document.getElementById('status').textContent.startsWith('No')")
        assert "No results" in page.inner_text("#status")
        browser.close()


def test_staff_page_on_a_phone(live_server: str) -> None:
    chromium = _browser()
    from playwright.sync_api import sync_playwright

    staff_key = new_key(live_server, scope="staff")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=BROWSER_ARGS)
        phone = browser.new_page(
            viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
        )
        phone.goto(f"{live_server}/staff")
        assert phone.evaluate("document.documentElement.scrollWidth") <= 390
        # The form leaves most of the screen to the results: the filters are folded.
        assert phone.locator("#search").bounding_box()["height"] < 844 / 2
        assert not phone.is_visible("#agents")
        phone.fill("#key", staff_key)
        phone.fill("#query", "customer wanting a refund for a blue jacket")
        search(phone)
        best = phone.locator(".hit").first.bounding_box()
        assert best is not None and best["y"] + best["height"] <= 844  # on the first screen
        assert phone.evaluate("document.documentElement.scrollWidth") <= 390
        phone.screenshot(path=str(ARTIFACTS / "staff-phone.png"))
        # A tapped result opens its conversation over the results, at the match.
        phone.locator(".person", has_text=MAYA).locator(".open-at").first.tap()
        phone.wait_for_selector("#timeline .turn.matched")
        panel = phone.locator("#timeline").bounding_box()
        assert panel is not None and panel["y"] == 0 and panel["width"] == 390
        matched = phone.locator("#timeline .turn.matched").bounding_box()
        assert matched is not None and 0 <= matched["y"] < 844
        phone.screenshot(path=str(ARTIFACTS / "staff-phone-timeline.png"))
        phone.tap("#close-timeline")
        assert not phone.is_visible("#timeline")
        assert phone.is_visible(".hit >> nth=0")
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


@pytest.fixture
def bare_server(tmp_path: Path) -> Iterator[str]:
    """A server with nothing stored and the fake model: for pages that need no data."""
    from tests.fakes import fake_factory

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app = create_app(make_settings(tmp_path), encoder_factory=fake_factory, run_workers=False)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_docs_render_with_no_network(bare_server: str) -> None:
    """/docs in Chromium with every request to another host refused: Swagger UI renders
    the whole API from the server's own files."""
    chromium = _browser()
    from playwright.sync_api import Route, sync_playwright

    elsewhere: list[str] = []

    def only_this_server(route: Route) -> None:
        if route.request.url.startswith(bare_server + "/"):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.route("**/*", only_this_server)
        page.goto(f"{bare_server}/docs")
        page.wait_for_selector(".swagger-ui .info .title", timeout=20_000)
        assert "Memory server" in page.inner_text(".swagger-ui .info .title")
        page.wait_for_selector(".opblock")
        assert page.locator(".opblock").count() >= 25  # every operation of the API
        assert "/v1/search" in page.inner_text(".swagger-ui")
        page.screenshot(path=str(ARTIFACTS / "docs.png"))
        browser.close()
    assert elsewhere == []
