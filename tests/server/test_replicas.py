"""Several processes on one database, as replicas are: what the database itself must settle
(on SQLite, two stores on one file; on PostgreSQL, two on one database)."""

from __future__ import annotations

import threading
from pathlib import Path

from server.store import Store
from tests.backends import query
from tests.conftest import make_settings


def test_the_same_event_sent_to_two_replicas_at_once_is_stored_once(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    replicas = [Store.open(settings), Store.open(settings)]
    start = threading.Barrier(8)
    answers: list[tuple[int, bool]] = []
    guard = threading.Lock()

    def send(n: int) -> None:
        store = replicas[n % 2]
        start.wait()
        for event in range(30):
            got = store.insert_message(
                agent="bot",
                phone="+15550002222",
                role="user",
                content=f"event {event}",
                event_id=f"wamid.{event}",
                number=None,
                created_at=None,
            )
            with guard:
                answers.append(got)

    threads = [threading.Thread(target=send, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert len(answers) == 8 * 30  # every call answered, none failed on the unique index
        stored = query(settings, "SELECT event_id, id FROM messages ORDER BY id")
        assert len(stored) == 30  # each event once
        ids = {row["event_id"]: row["id"] for row in stored}
        assert sum(1 for _, new in answers if new) == 30  # exactly one caller stored each
        assert {message_id for message_id, _ in answers} == set(ids.values())
        queued = query(settings, "SELECT COUNT(*) FROM outbox WHERE kind = 'turn'")[0][0]
        assert queued == 30  # and queued for the indexer once
    finally:
        for store in replicas:
            store.close()
