"""The staff page in real headless Chromium (Debian's package, driven by Playwright)."""

from __future__ import annotations

import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from server.app import create_app, default_encoder_factory
from server.config import DEFAULT_MODEL
from tests.conftest import ADMIN_KEY, make_settings
from tests.fakes import fake_factory

pytestmark = pytest.mark.engine_agnostic  # run by the SQLite pass only (conftest)

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


@contextmanager
def serving(app: Any, *, start_s: float = 30) -> Iterator[str]:
    """The app on a free local port, in a thread, while the block runs; its base URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_s
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[str]:
    """The real default model (e5): the relevance, its floor and the screenshots are what a
    support agent sees."""
    settings = make_settings(tmp_path, embedding_model=DEFAULT_MODEL, compact_keep=20)
    app = create_app(settings, encoder_factory=default_encoder_factory(settings), run_workers=False)
    with serving(app, start_s=60) as base:
        _store_conversations(app, base)
        yield base


def _store_conversations(app: Any, base: str) -> None:
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
    named = httpx.put(
        f"{base}/v1/agents/shop/people/{MAYA}/name", json={"name": "Maya Chen"}, headers=admin
    )
    assert named.status_code == 200, named.text
    services = app.state.services
    services.memory.compact("shop", MAYA)  # the oldest turns are archived: "archived" shows
    services.indexer.drain()


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
        page.wait_for_function(
            "document.querySelector('#timeline h2').textContent.includes('Maya Chen')"
        )
        assert f"Maya Chen ({MAYA}) with shop" in page.inner_text("#timeline h2")
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
    app = create_app(make_settings(tmp_path), encoder_factory=fake_factory, run_workers=False)
    with serving(app) as base:
        yield base


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


@pytest.fixture
def small_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The fake model (no floor: nothing hidden) and little data, for the page's own states:
    35 turns about the weather (two pages of 30 in keyword mode) and two facts about no one
    person. Its base URL and a staff key."""
    app = create_app(make_settings(tmp_path), encoder_factory=fake_factory, run_workers=False)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with serving(app) as base:
        for i in range(35):
            turn = {"role": "assistant" if i % 2 else "user", "content": f"the weather {i}"}
            answer = httpx.post(
                f"{base}/v1/agents/shop/people/{MAYA}/messages", json=turn, headers=admin
            )
            assert answer.status_code == 201, answer.text
        for fact in ("Parcels ship on Mondays", "Parcels to the islands take a week"):
            answer = httpx.post(
                f"{base}/v1/agents/shop/memories", json={"content": fact}, headers=admin
            )
            assert answer.status_code == 201 and answer.json()["phone"] is None, answer.text
        app.state.services.indexer.drain()
        yield base, new_key(base, scope="staff")


@contextmanager
def staff_page(base: str, width: int = 1280, height: int = 800) -> Iterator[Any]:
    """The staff page in Chromium at that size."""
    chromium = _browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.goto(f"{base}/staff")
        try:
            yield page
        finally:
            browser.close()


def status_error(page: Any) -> str:
    page.click("#go")
    page.wait_for_selector("#status.error")
    return str(page.inner_text("#status"))


def test_a_refused_key_closes_the_conversation(small_server: tuple[str, str]) -> None:
    base, staff_key = small_server
    with staff_page(base) as page:
        page.fill("#key", staff_key)
        page.fill("#query", "weather")
        page.select_option("#mode", "keyword")
        search(page)
        page.locator(".open-at").first.click()
        page.wait_for_selector("#timeline .turn.matched")

        # A refused key: what the good one read goes, the conversation with the results.
        page.fill("#key", "mk_wrong")
        assert "not accepted" in status_error(page)
        assert page.locator("#timeline .turn").count() == 0
        assert "Open a result" in page.inner_text("#timeline")
        assert page.locator(".hit").count() == 0

        # The key fixed: results, and the error gone.
        page.fill("#key", staff_key)
        search(page)
        assert page.locator(".hit").count() == 30
        assert page.locator("#status.error").count() == 0


def test_a_good_search_clears_an_old_error(small_server: tuple[str, str]) -> None:
    """The key refused while a conversation opens (it changed since the results): the
    conversation does not open, and once the key is fixed no error stays on the page."""
    base, staff_key = small_server
    with staff_page(base) as page:
        page.fill("#key", staff_key)
        page.fill("#query", "weather")
        page.select_option("#mode", "keyword")
        search(page)
        page.fill("#key", "mk_wrong")
        page.locator(".open-at").first.click()
        page.wait_for_selector("#status.error, #timeline .error")
        assert page.locator("#timeline .turn").count() == 0
        page.fill("#key", staff_key)
        search(page)
        assert page.locator(".hit").count() == 30
        assert page.locator("#status.error").count() == 0
        assert page.locator(".error:visible").count() == 0, page.inner_text("main")


def test_no_empty_results_card_before_there_is_something_to_show(
    small_server: tuple[str, str],
) -> None:
    base, staff_key = small_server
    with staff_page(base) as page:
        assert not page.is_visible("#results")
        # The conversation's panel keeps its column: it does not slide under the form's left.
        panel = page.locator("#timeline").bounding_box()
        assert panel is not None and panel["x"] > 1280 / 2
        page.fill("#key", staff_key)
        page.fill("#query", "zzzz qqqq")
        page.select_option("#mode", "keyword")
        search(page)
        assert "No results" in page.inner_text("#status")
        assert not page.is_visible("#results")
        page.fill("#query", "weather")
        search(page)
        assert page.is_visible("#results") and page.locator(".hit").count() == 30


def test_the_summary_says_when_more_results_follow(small_server: tuple[str, str]) -> None:
    base, staff_key = small_server
    with staff_page(base) as page:
        page.fill("#key", staff_key)
        page.fill("#query", "weather")
        page.select_option("#mode", "keyword")
        search(page)
        said = page.inner_text("#status")
        assert said.startswith("30 result(s) from 1 person(s)"), said
        assert "More on the next page" in said, said
        page.click("#next")
        page.wait_for_function(PAGER.format("31-35"))
        said = page.inner_text("#status")
        assert said.startswith("5 result(s)") and "next page" not in said, said


def test_results_about_no_one_person_are_not_from_this_person(
    small_server: tuple[str, str],
) -> None:
    base, staff_key = small_server
    with staff_page(base) as page:
        page.fill("#key", staff_key)
        page.fill("#query", "parcels")
        page.select_option("#mode", "keyword")
        search(page)
        assert page.inner_text(".person h2").startswith("about no one person · shop")
        assert page.inner_text("details.more > summary") == "1 more"


def test_the_filters_fit_at_1280_by_800(bare_server: str) -> None:
    """Six filters share a row at this width; the mode's longest choice shows whole."""
    with staff_page(bare_server, 1280, 800) as page:
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280
        mode = page.locator("#mode").bounding_box()
        filters = page.locator("#filters").bounding_box()
        assert mode is not None and filters is not None
        assert 0 <= mode["x"] <= 1280 - mode["width"]
        assert 0 <= mode["y"] <= 800 - mode["height"]
        assert filters["x"] <= mode["x"] <= filters["x"] + filters["width"] - mode["width"]
        # As wide as the select would be on its own, next to it (the label's font).
        whole = page.evaluate(
            """() => {
                const mode = document.getElementById("mode");
                const alone = mode.cloneNode(true);
                alone.removeAttribute("id");
                alone.style.cssText = "position: absolute; visibility: hidden; width: max-content";
                mode.after(alone);
                const width = alone.getBoundingClientRect().width;
                alone.remove();
                return width;
            }"""
        )
        assert mode["width"] >= whole - 0.5, (mode["width"], whole)
        assert page.input_value("#mode") == "hybrid"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "staff-1280x800.png"))


def test_the_page_has_an_icon(bare_server: str) -> None:
    """/favicon.ico answers with an SVG the browser draws; the page links it; no key."""
    with staff_page(bare_server) as page:
        href = page.evaluate("document.querySelector('link[rel=icon]').href")
        assert href == f"{bare_server}/favicon.ico"
        width = page.evaluate(
            """() => new Promise((done) => {
                const icon = new Image();
                icon.onload = () => done(icon.naturalWidth);
                icon.onerror = () => done(-1);
                icon.src = "/favicon.ico";
            })"""
        )
        assert width > 0
        answer = page.goto(f"{bare_server}/favicon.ico")
        assert answer is not None and answer.status == 200
        assert answer.headers["content-type"] == "image/svg+xml"


def test_a_fact_shows_since_when_what_it_replaced_and_its_source_turns(tmp_path: Path) -> None:
    """A support person opens where a fact came from: since when it holds, the fact it
    replaced, and its source turns, marked in the conversation."""
    app = create_app(make_settings(tmp_path), encoder_factory=fake_factory, run_workers=False)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with serving(app) as base:
        said = []
        for content in (
            "vivo en Madrid, cerca del Retiro",
            "¡Qué bien!",
            "el mes pasado me mudé a Lisboa",
            "¿Cambiamos la dirección de envío?",
            "sí, a Lisboa por favor",
            "Hecho.",
        ):
            role = "assistant" if len(said) % 2 else "user"
            answer = httpx.post(
                f"{base}/v1/agents/shop/people/{MAYA}/messages",
                json={"role": role, "content": content},
                headers=admin,
            )
            assert answer.status_code == 201, answer.text
            said.append(answer.json()["id"])
        memory = app.state.services.memory
        madrid = memory.add_memory(
            "shop", MAYA, "Maya lives in Madrid", source="extracted", source_turns=said[:1]
        )
        memory.store_memory(
            "shop",
            MAYA,
            "Maya moved to Lisbon",
            source="extracted",
            source_turns=said[2:5],
            supersedes=madrid.id,
        )
        app.state.services.indexer.drain()
        staff_key = new_key(base, scope="staff")
        with staff_page(base) as page:
            page.fill("#key", staff_key)
            page.fill("#query", "Maya Lisbon")
            page.select_option("#mode", "keyword")
            search(page)
            fact = page.locator(".hit:has(.provenance-open)").filter(has_text="moved to Lisbon")
            fact.locator(".provenance-open").click()
            page.wait_for_selector(".provenance")
            shown = page.inner_text(".provenance")
            assert "true since" in shown and "(current)" in shown, shown
            assert "replaced: Maya lives in Madrid" in shown, shown
            page.click(".source-turns")
            page.wait_for_selector("#timeline .turn.matched")
            marked = page.locator("#timeline .turn.matched").all_inner_texts()
            assert len(marked) == 3 and "me mudé a Lisboa" in marked[0], marked


# The spoof (issue 39, item 5): a RIGHT-TO-LEFT OVERRIDE in a name, which an earlier
# release accepted and a turn's text still may hold, must not reorder what the page shows
# next to it: not the person's real number, not the labels.
SPOOF = "Eva \u202e0987654321"
SCRIPT = (Path(__file__).resolve().parents[2] / "server/static/staff.html").read_text()
# The expressions of the page's script that hold text a person or an agent wrote.
USER_TEXT = r"(?:\bname|\bphone|\bagent|\.content|\.text|\.phone|\.agent)"


def test_user_text_is_never_joined_to_the_page_s_own_words() -> None:
    """Browser-free: user text goes into elements of its own (isolate() makes a <bdi
    dir="auto">, blocks get dir="auto"), never concatenated with labels; CSS isolates them."""
    script = SCRIPT.split("<script>")[1]
    joined = re.findall(rf"{USER_TEXT}\s*\+(?!\+)|\+\s*{USER_TEXT}\b(?!\s*\()", script)
    assert joined == [], joined
    assert "`" not in script  # no template literal builds text around them either
    assert re.search(r"bdi,\s*\[dir=auto\]\s*\{\s*unicode-bidi:\s*isolate;", SCRIPT)
    helpers = {  # each makes the element a piece of user text goes in
        "isolate": r'el\("bdi", "", text\);\s*node\.dir = "auto";',
        "userBlock": r'el\("div", className, text\);\s*node\.dir = "auto";',
    }
    for name, body in helpers.items():
        assert re.search(rf"function {name}\([^)]*\) \{{[^}}]*{body}", script), name
    for block in ('userBlock("said", turn.content)', 'userBlock("text")'):
        assert block in script, block


def _title_order(page: Any, words: list[str]) -> list[tuple[float, float]]:
    """Where on screen (line, then left edge) the first character of each word in the
    timeline's title is, and every character of the last one: in reading order, these grow."""
    return [
        tuple(at)
        for at in page.evaluate(
            """(words) => {
                const title = document.querySelector('#timeline h2');
                const nodes = [];
                const walk = document.createTreeWalker(title, NodeFilter.SHOW_TEXT);
                while (walk.nextNode()) nodes.push(walk.currentNode);
                const left = (node, at) => {
                    const range = document.createRange();
                    range.setStart(node, at);
                    range.setEnd(node, at + 1);
                    const box = range.getBoundingClientRect();
                    return [Math.round(box.top), box.left];
                };
                const where = (word) => {
                    for (const node of nodes) {
                        const at = node.data.indexOf(word);
                        if (at >= 0) return [node, at];
                    }
                    throw new Error('not in the title: ' + word);
                };
                const out = words.slice(0, -1).map((w) => left(...where(w)));
                const last = words[words.length - 1];
                const [node, at] = where(last);
                for (let i = 0; i < last.length; i++) out.push(left(node, at + i));
                return out;
            }""",
            words,
        )
    ]


def test_a_bidi_override_in_a_name_cannot_spoof_the_number(tmp_path: Path) -> None:
    """In Chromium: a name stored with U+202E (as an earlier release allowed) and a turn
    holding one: the title still reads the label, the real number left to right, then the
    agent; the turn's override stays inside the turn."""
    app = create_app(make_settings(tmp_path), encoder_factory=fake_factory, run_workers=False)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with serving(app) as base:
        for content in ("parcel \u202e12345 is late", "parcel reply"):
            answer = httpx.post(
                f"{base}/v1/agents/shop/people/{MAYA}/messages",
                json={"role": "user", "content": content},
                headers=admin,
            )
            assert answer.status_code == 201, answer.text
        app.state.services.memory.set_person_name("shop", MAYA, SPOOF)
        app.state.services.indexer.drain()
        with staff_page(base) as page:
            page.fill("#key", ADMIN_KEY)
            page.fill("#query", "parcel")
            page.select_option("#mode", "keyword")
            search(page)
            page.locator(".person h2 button").first.click()
            page.wait_for_function(
                "document.querySelector('#timeline h2').textContent.includes('Eva')"
            )
            page.wait_for_selector("#timeline .turn")
            xs = _title_order(page, ["Conversation", "Eva", "with", "shop", MAYA])
            label, name, with_, agent, digits = xs[0], xs[1], xs[2], xs[3], xs[4:]
            assert label < name < digits[0], xs
            assert digits == sorted(digits) and len(set(digits)) == len(MAYA), xs
            assert digits[-1] < with_ < agent, xs
            # The override in a turn reorders that turn's text only, never its "who" line.
            who = page.locator("#timeline .turn .who").first.inner_text()
            assert who.startswith("person ·"), who
