"""Every field goes through redaction: a secret planted in each field a client can send (a
turn's content, name and event id, a memory's content, metadata of every JSON type and scope
ids, the person's name, the query strings of reads) is in no stored file, vector table,
export, staff page answer, prompt to the model or log line; and every text column of both
engines and of the vector tables is named in server/text_columns.py, so a new one cannot
skip redaction unnoticed."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import pytest

from server.logs import SecretsFilter, access_path
from server.text_columns import DATABASE_COLUMNS, VECTOR_COLUMNS
from tests.conftest import AGENT, PHONE, Api, admin, bearer
from tests.fake_llm import FakeLLM
from tests.live import Server
from tests.server.test_erasure import lance_texts
from tests.server.test_pg_erasure import pg_dump

CARD = "4111 1111 1111 1111"
CARD_NUMBER = 4111111111111111
IBAN = "ES91 2100 0418 4502 0005 1332"
CODE = "mi código es 482913"
PASSWORD = "mi contraseña es Perro2024!"
# What none of the stored, shown or logged text may hold.
RAW = [CARD, str(CARD_NUMBER), IBAN, IBAN.replace(" ", ""), "482913", "Perro2024"]


def _has_raw(text: str) -> list[str]:
    """The raw secrets in a text, as written or as a URL encodes them."""
    forms = {f for raw in RAW for f in (raw, quote(raw), quote_plus(raw))}
    return sorted(f for f in forms if f in text)


# -- the registry of text columns -------------------------------------------------------------

NUMERIC_PG_TYPES = {"integer", "bigint", "smallint", "double precision", "real", "numeric"}


def database_text_columns(api: Api) -> set[str]:
    """table.column of every column that can hold text, as the engine's catalogue lists them."""
    settings = api.services.settings
    if settings.database_url:
        import psycopg

        with psycopg.connect(settings.database_url) as conn:
            rows = conn.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = 'public'"
            ).fetchall()
        return {f"{t}.{c}" for t, c, kind in rows if kind not in NUMERIC_PG_TYPES}
    conn = sqlite3.connect(settings.sqlite_path)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%'"  # SQLite's own (sqlite_sequence: table names)
            )
        ]
        found = set()
        for table in tables:
            for _, column, declared, *_ in conn.execute(f"PRAGMA table_info({table})"):
                # SQLite's type affinity: INT, REAL, FLOA, DOUB hold numbers; anything else
                # (TEXT, BLOB, no type at all) can hold text.
                kind = str(declared).upper()
                if not any(n in kind for n in ("INT", "REAL", "FLOA", "DOUB")):
                    found.add(f"{table}.{column}")
        return found
    finally:
        conn.close()


def vector_text_columns(folder: Path) -> set[str]:
    import lancedb
    import pyarrow as pa

    from embeddings.index import table_names

    names = table_names(folder)
    assert names, "no vector table to read"
    db = lancedb.connect(str(folder))
    found = set()
    for name in names:
        for f in db.open_table(name).schema:
            if not (pa.types.is_list(f.type) or pa.types.is_fixed_size_list(f.type)):
                assert pa.types.is_string(f.type) or pa.types.is_large_string(f.type), f
                found.add(f.name)
    return found


def test_every_text_column_of_the_database_and_the_vectors_is_in_the_registry(api: Api) -> None:
    assert api.post_turn("hola", event_id="e1").status_code == 201
    api.index()
    columns = database_text_columns(api)
    assert columns - DATABASE_COLUMNS.keys() == set(), "name them in server/text_columns.py"
    assert DATABASE_COLUMNS.keys() - columns == set(), "gone from the schema: drop them"
    vectors = vector_text_columns(api.services.settings.data_dir / "lance")
    assert vectors - VECTOR_COLUMNS.keys() == set(), "name them in server/text_columns.py"
    assert VECTOR_COLUMNS.keys() - vectors == set(), "gone from the vector tables: drop them"


# -- every field, end to end ------------------------------------------------------------------


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        # A model that repeats secrets (told before redaction was on, say), names the person
        # with one, and writes a card with double spaces between its groups.
        fake.summary = f"Paid with 4111  1111  1111  1111; {CODE}."
        fake.facts = json.dumps(
            {
                "name": f"Ana {CARD}",
                "facts": [
                    {"content": f"Card on file is {CARD}", "type": "fact"},
                    {"content": f"Refund IBAN {IBAN}", "type": "fact"},
                    {"content": f"Says {PASSWORD}", "type": "fact"},
                ],
            }
        )
        yield fake


METADATA = {
    "card": CARD,
    "n": CARD_NUMBER,
    "nested": {"list": [IBAN, {"pin": CODE}], "deep": [[CARD_NUMBER]]},
    CARD: "a secret as a key",
    "pw": PASSWORD,
}
SCOPES = {"session_id": f"s {IBAN}", "task_id": f"t {CODE}", "graph_id": f"g {PASSWORD}"}


def test_no_raw_secret_from_any_field_anywhere(
    api_factory: Callable[..., Api], llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    api: Api = api_factory(llm_base_url=llm.base_url, llm_retries=0)
    person = f"/v1/agents/{AGENT}/people/{PHONE}"
    memories = f"/v1/agents/{AGENT}/memories"
    shown: list[str] = []  # every answer a client, staff or the staff page reads

    def read(response: httpx.Response, status: int = 200) -> Any:
        assert response.status_code == status, response.text
        shown.append(response.text)
        return response.json()

    # A turn: its content, the name its provider sends, its event id; then its retry.
    event = f"wa {CARD}"
    first = api.post_turn(f"pagué con {CARD}, {CODE}", event_id=event, name=f"Ana {CARD}")
    assert first.status_code == 201
    again = api.post_turn(f"pagué con {CARD}, {CODE}", event_id=event, name=f"Ana {CARD}")
    assert (again.status_code, again.json()) == (200, {"id": first.json()["id"], "stored": False})
    assert read(api.client.get(f"{person}/name", headers=admin()))["name"] == (
        "Ana [tarjeta ••••1111]"
    )
    for i in range(30):  # enough turns for a compaction
        api.post_turn(f"turn {i} {PASSWORD}", role="user" if i % 2 else "assistant")
    listed = read(api.client.get(f"{person}/messages?limit=1000", headers=admin()))["items"]
    assert listed[-1]["event_id"] == "wa [tarjeta ••••1111]"
    assert listed[-1]["content"] == "pagué con [tarjeta ••••1111], mi código es [código]"

    # The person's name, set.
    named = read(
        api.client.put(f"{person}/name", json={"name": f"Ana {PASSWORD}"}, headers=admin())
    )
    assert named["name"].startswith("Ana mi contraseña es [contraseña]")

    # A memory: content, metadata of every JSON type, scope ids; then an edit.
    body = {"content": f"Paga con {CARD}", "phone": PHONE, "metadata": METADATA, **SCOPES}
    memory = read(api.client.post(memories, json=body, headers=admin()), 201)
    assert memory["content"] == "Paga con [tarjeta ••••1111]"
    assert memory["session_id"] == "s [IBAN ES91••••1332]"
    assert memory["metadata"]["n"] == "[tarjeta ••••1111]"
    assert memory["metadata"]["nested"]["deep"] == [["[tarjeta ••••1111]"]]
    assert "[tarjeta ••••1111]" in memory["metadata"]
    edit = {"metadata": {"iban": IBAN, "n": CARD_NUMBER}, "content": f"IBAN {IBAN}"}
    read(api.client.patch(f"{memories}/{memory['id']}", json=edit, headers=admin()))
    # A scope id or a metadata value as sent still finds the memory (both compared redacted).
    found = read(api.client.get(memories, params=SCOPES, headers=admin()))
    assert [m["id"] for m in found["items"]] == [memory["id"]]
    search = {"query": f"IBAN {IBAN}", "mode": "keyword", "metadata": {"n": CARD_NUMBER}, **SCOPES}
    found = read(api.client.post(f"{memories}/search", json=search, headers=admin()))
    assert [m["id"] for m in found["items"]] == [memory["id"]]
    read(api.client.get(f"{memories}/{memory['id']}/history", headers=admin()))

    # Compaction: the model's summary, facts and the name it read.
    compacted = read(api.client.post(f"{person}/compact", headers=admin()))
    assert compacted["facts_added"] == 3
    api.index()

    # Reads with secrets in their query strings, and what the staff page reads.
    context = read(api.context(query=f"mi tarjeta {CARD}", threshold=-1))
    assert "[tarjeta ••••1111]" in context["summary"]
    export = read(api.client.get(f"{person}/export", headers=admin()))
    assert export["name"]["name"] == named["name"]
    staff = api.key("staff")
    for mode in ("semantic", "keyword", "hybrid"):
        hits = read(
            api.client.post("/v1/search", json={"query": CARD, "mode": mode}, headers=staff)
        )
        for hit in hits["items"]:
            if hit["kind"] == "facts":
                read(
                    api.client.get(f"/v1/agents/{hit['agent']}/memories/{hit['id']}", headers=staff)
                )
    read(api.client.get(f"{person}/messages", headers=staff))
    read(api.client.get(f"{person}/name", headers=staff))
    audit = read(api.client.get("/v1/audit", headers=admin()))
    assert audit["items"][0]["query"] == "[tarjeta ••••1111]"

    prompts = json.dumps(llm.requests, ensure_ascii=False)
    assert "[tarjeta ••••1111]" in prompts  # the model read the redacted turns
    # The server's lines: not the test client's own (it logs the URLs it asks for).
    server_lines = [r for r in caplog.records if "http://testserver/" not in r.getMessage()]
    logged = "\n".join(
        [r.getMessage() for r in server_lines]
        + [logging.Formatter().formatException(r.exc_info) for r in server_lines if r.exc_info]
    )
    everything = {"answers": "\n".join(shown), "prompts": prompts, "log": logged}
    settings = api.services.settings
    if settings.database_url:  # PostgreSQL: the whole database, as pg_dump reads it
        everything["database"] = pg_dump(settings.database_url)
    everything["vectors"] = lance_texts(settings.data_dir / "lance")
    assert "[tarjeta ••••1111]" in everything["vectors"]
    for where, text in everything.items():
        assert _has_raw(text) == [], where
    files = [p for p in settings.data_dir.rglob("*") if p.is_file()]
    assert any(p.name.endswith("-wal") for p in files) or settings.database_url
    for path in files:
        data = path.read_bytes()
        assert [r for r in RAW if r.encode() in data] == [], path


def test_a_name_is_found_by_its_own_words_not_by_a_placeholder(api: Api) -> None:
    url = f"/v1/agents/{AGENT}/people/{PHONE}/name"
    done = api.client.put(url, json={"name": f"Carmen {CARD}"}, headers=admin())
    assert done.json()["name"] == "Carmen [tarjeta ••••1111]"
    store = api.services.store
    assert store.people_called(["carmen"], None, limit=5) == [(AGENT, PHONE, "carmen")]
    assert store.people_called(["tarjeta"], None, limit=5) == []


def test_an_event_id_without_a_secret_is_kept_and_retried_as_sent(api: Api) -> None:
    assert api.post_turn("hola", event_id="wamid.HBgLMTU1NTEyMzAwMDEVAgASGBQz").status_code == 201
    retry = api.post_turn("hola", event_id="wamid.HBgLMTU1NTEyMzAwMDEVAgASGBQz")
    assert retry.status_code == 200
    other = api.post_turn("hola", event_id=f"wa {CODE}")  # redacted, a different event
    assert other.status_code == 201
    listed = api.client.get(f"/v1/agents/{AGENT}/people/{PHONE}/messages", headers=admin()).json()
    assert [m["event_id"] for m in listed["items"]] == [
        "wa mi código es [código]",
        "wamid.HBgLMTU1NTEyMzAwMDEVAgASGBQz",
    ]


def test_redaction_off_keeps_every_field_as_sent(api: Api) -> None:
    api.client.put(f"/v1/agents/{AGENT}/settings", json={"redact": "off"}, headers=admin())
    api.post_turn("hola", event_id=f"wa {CARD}", name=f"Ana {CARD}")
    body = {"content": "x", "phone": PHONE, "metadata": {"c": CARD}, "session_id": CARD}
    memory = api.client.post(f"/v1/agents/{AGENT}/memories", json=body, headers=admin()).json()
    assert (memory["metadata"], memory["session_id"]) == ({"c": CARD}, CARD)
    name = api.client.get(f"/v1/agents/{AGENT}/people/{PHONE}/name", headers=admin()).json()
    assert name["name"] == f"Ana {CARD}"


def test_health_shows_a_failing_loops_error_redacted(api: Api) -> None:
    """/health needs no key, and a loop's last error may quote what it failed on."""
    stats = api.services.indexer.stats
    stats.failing, stats.last_error = 3, f"IntegrityError: duplicate key (wa {CARD})"
    problems = api.client.get("/health").json()["problems"]
    assert problems == [
        "indexer: 3 passes failed in a row: IntegrityError: duplicate key (wa [tarjeta ••••1111])"
    ]


# -- the log ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "printed"),
    [
        ("/v1/agents/a/people/%2B15551230001/context?query=mi%20tarjeta%204111", None),
        ("/health", "/health"),
        (
            "/v1/agents/a/memories?session_id=x&limit=5",
            "/v1/agents/a/memories?session_id=…&limit=…",
        ),
        ("/v1/agents/a/people/4111%201111%201111%201111/name", None),
        ("/x?4111111111111111=1&=2&a", "/x?…&…&a=…"),
    ],
)
def test_the_access_log_prints_no_query_value_and_a_redacted_path(
    target: str, printed: str | None
) -> None:
    shown = access_path(target)
    assert _has_raw(shown) == [] and "4111" not in shown.partition("?")[2]
    if printed is not None:
        assert shown == printed
    if target.startswith("/v1/agents/a/people/%2B"):
        assert shown == "/v1/agents/a/people/%2B15551230001/context?query=…"


def test_the_log_filter_redacts_messages_and_tracebacks() -> None:
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Keep()
    handler.addFilter(SecretsFilter())
    logger = logging.getLogger("tests.secrets")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        logger.warning("model said %s", f"pay with {CARD}")
        logger.info(
            'HTTP Request: GET http://127.0.0.1:8080/v1/c?query=%s "HTTP/1.1 200 OK"', quote(CARD)
        )
        try:
            raise ValueError(f"duplicate key {IBAN}")
        except ValueError:
            logger.exception("failed for %s", "someone")
        access = logging.getLogger("uvicorn.access")
        record = access.makeRecord(
            "uvicorn.access",
            logging.INFO,
            __file__,
            1,
            '%s - "%s %s HTTP/%s" %d',
            ("127.0.0.1:5000", "GET", f"/c?query={quote(CARD)}", "1.1", 200),
            None,
        )
        handler.handle(record)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    text = "\n".join(records)
    assert "pay with [tarjeta ••••1111]" in text and "duplicate key [IBAN ES91••••1332]" in text
    assert '"GET /c?query=… HTTP/1.1" 200' in text
    assert 'GET http://127.0.0.1:8080/v1/c?query=… "HTTP/1.1 200 OK"' in text
    assert _has_raw(text) == []


def test_a_live_servers_log_holds_no_secret_nor_query_value(tmp_path: Path) -> None:
    """The real server's stderr at log level info: the access log of reads and writes that
    carry secrets in query strings, bodies and paths, and the errors some of them cause."""
    server = Server(tmp_path / "data", MEMORY_LOG_LEVEL="info")
    log = tmp_path / "server.log"
    server.start(stderr=log)
    try:
        base = f"{server.base}/v1/agents/{AGENT}"
        with httpx.Client(headers=bearer("test-admin-key-0123456789"), timeout=30) as http:
            person = f"{base}/people/{PHONE}"
            body = {"role": "user", "content": f"pago {CARD}", "event_id": f"wa {CARD}"}
            assert http.post(f"{person}/messages", json=body).status_code == 201
            assert http.get(f"{person}/context", params={"query": f"tarjeta {CARD}"}).is_success
            assert http.get(f"{base}/memories", params={"session_id": f"s {IBAN}"}).is_success
            # Refused requests are logged too: a secret in the path, a bad query value.
            assert http.get(f"{base}/people/{quote(CARD)}/context").status_code == 422
            assert http.get(f"{person}/messages", params={"limit": CODE}).status_code == 422
            search = {"query": PASSWORD, "mode": "keyword"}
            assert http.post(f"{server.base}/v1/search", json=search).is_success
    finally:
        server.stop()
    text = log.read_text(encoding="utf-8", errors="replace")
    assert "/context?query=… HTTP/1.1" in text, text[-2000:]  # the access log was printed
    assert _has_raw(text) == [], text[-2000:]
    assert "Perro2024" not in text and "482913" not in text
