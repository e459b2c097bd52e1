"""A person who changes number: everything stored under one number moves to another, merged
with what the new number already holds, in one transaction."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from server.clock import format_time
from server.store.audit import MOVE, person_exists
from server.store.db import Conn, Queries
from server.store.people import move_names, name_of


@dataclass(frozen=True, slots=True)
class PersonMove:
    """What moved: rows of each table, and whether the new number had memory already."""

    messages: int
    memories: int
    history: int
    summaries: int
    opt_outs: int
    merged: bool
    names: int = 0
    turn_ids: tuple[str, ...] = ()  # the person's items queued for the indexer, by kind
    memory_ids: tuple[str, ...] = ()
    summary_refs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PendingMove:
    """A move whose old number may still be in the vector store (its journal row)."""

    agent: str
    old: str
    new: str


class NothingToMove(LookupError):
    """The old number holds nothing for this agent."""


class PersonBusy(RuntimeError):
    """A forget or a compaction of one of the two numbers is under way: moving now would
    let rows escape the forget, or let the compaction overwrite the merged summary."""


# Every turn, memory and summary of the person, queued for the indexer under the new number:
# their vectors are rewritten with it (the indexer reuses a vector whose words are the same).
_ENQUEUE = (
    "INSERT INTO outbox (kind, ref_id, agent, phone, enqueued_at)"
    " SELECT 'turn', CAST(id AS TEXT), agent, phone, ? FROM messages"
    " WHERE agent = ? AND phone = ?",
    "INSERT INTO outbox (kind, ref_id, agent, phone, enqueued_at)"
    " SELECT 'fact', id, agent, phone, ? FROM memories WHERE agent = ? AND phone = ?",
    "INSERT INTO outbox (kind, ref_id, agent, phone, enqueued_at)"
    " SELECT 'summary', agent || '|' || phone, agent, phone, ? FROM summaries"
    " WHERE agent = ? AND phone = ?",
)


class MoveQueries(Queries):
    def stored_people(self) -> list[tuple[str, str]]:
        """Every (agent, phone) anything is stored for."""
        rows = self._reader().execute(
            "SELECT agent, phone FROM messages UNION SELECT agent, phone FROM memories"
            " WHERE phone IS NOT NULL UNION SELECT agent, phone FROM summaries"
            " UNION SELECT agent, phone FROM opt_outs UNION SELECT agent, phone FROM people"
            " ORDER BY 1, 2"
        )
        return [(str(r[0]), str(r[1])) for r in rows]

    def move_person(self, agent: str, old: str, new: str, *, actor: str) -> PersonMove:
        """Move the person's turns (ids kept, so the conversation reads in the order the turns
        arrived), memories with their history, summary and opt-out from `old` to `new`, under
        both numbers' locks, with an audit entry. Two summaries become one (the older first);
        of two opt-outs the first stays. The old number's vectors are queued for removal and
        the person's for rewriting under the new number. NothingToMove if `old` holds
        nothing."""
        now = self._now()
        with self._transaction() as conn:
            for phone in sorted({old, new}):
                self._db.lock_person(conn, agent, phone)  # in one order: no deadlock
            if (
                not person_exists(conn, agent, old)
                and not _opted_out(conn, agent, old)
                and name_of(conn, agent, old) is None
            ):
                raise NothingToMove(f"nothing is stored for that number of agent {agent}")
            _check_not_busy(conn, agent, (old, new), now)
            merged = person_exists(conn, agent, new)
            moved = {}
            for table in ("messages", "memories", "memory_history", "outbox"):
                moved[table] = conn.execute(
                    f"UPDATE {table} SET phone = ? WHERE agent = ? AND phone = ?",
                    (new, agent, old),
                ).rowcount
            conn.execute(
                "DELETE FROM compaction_claims WHERE agent = ? AND phone = ?", (agent, old)
            )
            keys = (agent, old, new)
            summaries = _move_row(
                conn, "summaries", "text, through_id, updated_at", keys, _merged_summaries
            )
            opt_outs = _move_row(conn, "opt_outs", "opted_out_at", keys, _merged_opt_outs)
            names = move_names(conn, *keys)
            # A user turn lifts an opt-out recorded before it (store/messages.py): after a
            # merge, a turn the person wrote from the other number may be that turn.
            conn.execute(
                "DELETE FROM opt_outs WHERE agent = ? AND phone = ? AND EXISTS (SELECT 1 FROM"
                " messages WHERE messages.agent = opt_outs.agent AND messages.phone ="
                " opt_outs.phone AND role = 'user' AND created_at > opted_out_at)",
                (agent, new),
            )
            for sql in _ENQUEUE:
                conn.execute(sql, (now, agent, new))
            args = (agent, new)
            turn_ids = tuple(
                str(r[0])
                for r in conn.execute("SELECT id FROM messages WHERE agent = ? AND phone = ?", args)
            )
            memory_ids = tuple(
                str(r[0])
                for r in conn.execute("SELECT id FROM memories WHERE agent = ? AND phone = ?", args)
            )
            conn.execute(  # journaled with the move itself: see pending_moves
                "INSERT INTO moves (agent, old_phone, new_phone, requested_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT (agent, old_phone, new_phone) DO NOTHING",
                (agent, old, new, now),
            )
            conn.execute(  # the old number's summary row in the index goes
                "INSERT INTO outbox (kind, ref_id, agent, phone, enqueued_at)"
                " VALUES ('summary', ?, ?, ?, ?)",
                (f"{agent}|{old}", agent, new, now),
            )
            result = PersonMove(
                messages=moved["messages"],
                memories=moved["memories"],
                history=moved["memory_history"],
                summaries=summaries,
                opt_outs=opt_outs,
                merged=merged,
                names=names,
                turn_ids=turn_ids,
                memory_ids=memory_ids,
                summary_refs=(f"{agent}|{old}", f"{agent}|{new}"),
            )
            conn.execute(
                "INSERT INTO audit (at, key_id, query, filters, result_count, results)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    now,
                    actor,
                    MOVE,
                    json.dumps(
                        {
                            "action": "move",
                            "agents": [agent],
                            "from": old,
                            "phone": new,
                            "moved": {
                                "messages": result.messages,
                                "memories": result.memories,
                                "summaries": result.summaries,
                                "opt_outs": result.opt_outs,
                                "names": result.names,
                            },
                            "merged": merged,
                        }
                    ),
                    1,
                    json.dumps([[agent, new]]),
                ),
            )
        return result

    def pending_moves(self, *, older_than_s: float = 0.0) -> list[PendingMove]:
        """Moves committed whose old number the vector store may still hold, oldest first: a
        process killed between the move's commit and the old number's purge leaves one.
        With older_than_s, only those journaled at least that long ago."""
        before = format_time(self._clock() - timedelta(seconds=older_than_s))
        rows = self._reader().execute(
            "SELECT agent, old_phone, new_phone FROM moves WHERE requested_at < ?"
            " ORDER BY requested_at",
            (before,) if older_than_s else ("9999",),
        )
        return [PendingMove(str(r[0]), str(r[1]), str(r[2])) for r in rows]

    def end_move(self, move: PendingMove) -> None:
        with self._transaction() as conn:
            conn.execute(
                "DELETE FROM moves WHERE agent = ? AND old_phone = ? AND new_phone = ?",
                (move.agent, move.old, move.new),
            )


def _check_not_busy(conn: Conn, agent: str, phones: tuple[str, str], now: str) -> None:
    erasing = conn.execute(
        "SELECT 1 FROM erasures WHERE agent = ? AND phone IN (?, ?)", (agent, *phones)
    ).fetchone()
    if erasing is not None:
        raise PersonBusy("a forget of one of the two numbers is under way")
    compacting = conn.execute(
        "SELECT 1 FROM compaction_claims WHERE agent = ? AND phone IN (?, ?) AND until >= ?",
        (agent, *phones, now),
    ).fetchone()
    if compacting is not None:
        raise PersonBusy("a compaction of one of the two numbers is running; try again shortly")


def _opted_out(conn: Conn, agent: str, phone: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM opt_outs WHERE agent = ? AND phone = ?", (agent, phone)
    ).fetchone()
    return row is not None


def _move_row(
    conn: Conn,
    table: str,
    columns: str,
    keys: tuple[str, str, str],
    merge: Callable[[Any, Any], dict[str, Any]],
) -> int:
    """Move the person's one row of a table keyed by (agent, phone) from the old number to the
    new; if the new number has one already, the two become one: `merge(moving, staying)` gives
    the columns to set on the staying row, and the moving row goes. Returns the rows moved."""
    agent, old, new = keys
    select = f"SELECT {columns} FROM {table} WHERE agent = ? AND phone = ?"
    moving = conn.execute(select, (agent, old)).fetchone()
    if moving is None:
        return 0
    staying = conn.execute(select, (agent, new)).fetchone()
    if staying is None:
        conn.execute(
            f"UPDATE {table} SET phone = ? WHERE agent = ? AND phone = ?", (new, *keys[:2])
        )
        return 1
    values = merge(moving, staying)
    sets = ", ".join(f"{column} = ?" for column in values)
    conn.execute(
        f"UPDATE {table} SET {sets} WHERE agent = ? AND phone = ?", (*values.values(), agent, new)
    )
    conn.execute(f"DELETE FROM {table} WHERE agent = ? AND phone = ?", (agent, old))
    return 1


def _merged_summaries(moving: Any, staying: Any) -> dict[str, Any]:
    """Both texts, the older first; the later of the two marks."""
    first, second = sorted([tuple(moving), tuple(staying)], key=lambda r: str(r[2]))
    throughs = [t for t in (moving[1], staying[1]) if t is not None]
    return {
        "text": f"{first[0]}\n\n{second[0]}",
        "through_id": max(throughs) if throughs else None,
        "updated_at": second[2],
    }


def _merged_opt_outs(moving: Any, staying: Any) -> dict[str, Any]:
    """The first opt-out stays (as a second opt-out keeps the first)."""
    return {"opted_out_at": min(str(moving[0]), str(staying[0]))}
