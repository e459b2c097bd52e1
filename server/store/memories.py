"""Summaries, memories and their history, and compaction's writes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import replace
from datetime import timedelta
from itertools import groupby
from typing import Any, NamedTuple

import server.store.chains as chains  # (the module: the package imports this one)
from server.clock import format_time
from server.errors import (
    AlreadySuperseded,
    InvalidSupersedes,
    SupersedesConflict,
    SupersedesCycle,
)
from server.store.chains import history as _history
from server.store.db import AGENT_WIDE, Conn, Queries
from server.store.messages import archive, count_waiting
from server.store.outbox import enqueue
from server.store.people import learn_name
from server.store.records import (
    MEMORY_COLUMNS,
    HistoryEntry,
    Memory,
    MemoryFilter,
    Summary,
    memory_of,
)

# How many times a write follows a memory moved to another number since it was read (each
# move needs a request of its own: a few are already more than any client sends at once).
MOVES_FOLLOWED = 5


class Applied(NamedTuple):
    """What one compaction wrote: the turns it archived and the facts it stored."""

    archived: list[int]
    stored: list[str]
    seen_again: int  # facts stored before that this compaction saw again


class MemoryQueries(Queries):
    def claim_compaction(self, agent: str, phone: str, holder: str, *, seconds: float) -> bool:
        """Claim the person's compaction for `holder` until `seconds` from now: True when
        claimed (free, expired, or held by `holder` already), False when another holds it."""
        now = self._now()
        until = format_time(self._clock() + timedelta(seconds=seconds))
        with self._transaction() as conn:
            row = conn.execute(
                "INSERT INTO compaction_claims (agent, phone, holder, until) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (agent, phone) DO UPDATE SET holder = excluded.holder,"
                " until = excluded.until"
                " WHERE compaction_claims.until < ? OR compaction_claims.holder = excluded.holder"
                " RETURNING holder",
                (agent, phone, holder, until, now),
            ).fetchone()
        return row is not None

    def compaction_claims_of(self, prefix: str) -> list[str]:
        """The holders of the claims whose holder name starts with `prefix`."""
        rows = self._reader().execute(
            "SELECT DISTINCT holder FROM compaction_claims WHERE substr(holder, 1, ?) = ?",
            (len(prefix), prefix),
        )
        return [str(r[0]) for r in rows]

    def drop_compaction_claims(self, holder: str) -> int:
        with self._transaction() as conn:
            return int(
                conn.execute("DELETE FROM compaction_claims WHERE holder = ?", (holder,)).rowcount
            )

    def release_compaction(self, agent: str, phone: str, holder: str) -> None:
        with self._transaction() as conn:
            conn.execute(
                "DELETE FROM compaction_claims WHERE agent = ? AND phone = ? AND holder = ?",
                (agent, phone, holder),
            )

    def summaries_of(self, keys: Sequence[str]) -> dict[str, tuple[str, str, Summary]]:
        """Summaries by their index key 'agent|phone'."""
        found: dict[str, tuple[str, str, Summary]] = {}
        for key in keys:
            agent, _, phone = key.partition("|")
            summary = self.summary(agent, phone)
            if summary is not None:
                found[key] = (agent, phone, summary)
        return found

    def summary(self, agent: str, phone: str) -> Summary | None:
        row = (
            self._reader()
            .execute(
                "SELECT text, through_id, updated_at FROM summaries WHERE agent = ? AND phone = ?",
                (agent, phone),
            )
            .fetchone()
        )
        if row is None:
            return None
        return Summary(text=row["text"], through_id=row["through_id"], updated_at=row["updated_at"])

    def put_summary(self, agent: str, phone: str, text: str, through_id: int | None) -> None:
        with self._person_transaction(agent, phone) as conn:
            _put_summary(conn, agent, phone, text, through_id, self._now())

    def insert_memory(self, memory: Memory, *, actor: str) -> Memory:
        """Store a new memory, its 'create' history entry and its outbox row, atomically; or,
        when an identical current memory is stored already, return that one and write
        nothing (the caller tells them apart by id). An identical one sent with `supersedes`
        takes that supersession on, unless it already replaces another memory
        (SupersedesConflict) or the one named replaces it (SupersedesCycle): the same change
        sent twice is one change, and no chain closes on itself (server/store/chains.py).

        The check and the insert run in one write transaction that holds the person's lock
        (PostgreSQL: an advisory lock, on every replica; SQLite: BEGIN IMMEDIATE holds off
        every other writer), so two identical requests at once, through one replica or two,
        store one memory: the second waits, then its check (read after the lock: PostgreSQL
        reads committed rows per statement) finds the first. A unique index was the other
        way, not taken: it needs a new column with the content's hash (SQLite has no hash
        function; PostgreSQL cannot index 2,000 characters of every script), "current" changes
        after the insert (a review or an expiry rejects, an approval brings a rejected one
        back, an edit rewrites content) and each of those would meet a unique violation, and a
        database already holding duplicates could not build it."""
        with self._person_transaction(memory.agent, memory.phone) as conn:
            found = _identical(conn, memory)
            if found is not None:
                if memory.supersedes is None:
                    return found
                return _adopt_supersedes(conn, found, memory.supersedes, actor, self._now())
            if memory.supersedes is not None:
                chains.check_link(conn, memory)
            _insert_memory(conn, memory, actor)
            if memory.status == "approved":
                return chains.apply(conn, memory, actor, self._now())
        return memory

    def newest_memories(
        self, agent: str, phone: str, *, status: str, limit: int, valid_at: str | None = None
    ) -> list[Memory]:
        """The newest memories of a status, true now (or at `valid_at`)."""
        args: tuple[str, ...] = ()
        if valid_at is None:
            when = " AND invalid_at IS NULL"
        else:
            when = (
                " AND COALESCE(valid_from, created_at) <= ?"
                " AND (invalid_at IS NULL OR invalid_at > ?)"
            )
            args = (valid_at, valid_at)
        rows = self._reader().execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE agent = ? AND phone = ? AND status = ?"
            f"{when} ORDER BY created_at DESC, id DESC LIMIT ?",
            (agent, phone, status, *args, limit),
        )
        return [memory_of(r) for r in rows]

    def count_current_facts(self, agent: str, phone: str | None) -> int:
        """Approved memories true now, of one person or (phone None) of the whole agent: how
        many a search of them weighs (embeddings/relevance.py, the floor by count)."""
        row = (
            self._reader()
            .execute(
                "SELECT COUNT(*) AS n FROM memories WHERE agent = ?"
                " AND (CAST(? AS TEXT) IS NULL OR phone = ?)"
                " AND status = 'approved' AND invalid_at IS NULL",
                (agent, phone, phone),
            )
            .fetchone()
        )
        return int(row["n"]) if row is not None else 0

    def current_fact_texts(self, agent: str, phone: str) -> list[tuple[str, str]]:
        """(id, content) of a person's approved memories true now, by id: what a context's
        facts search weighs, and what its copy in memory is checked against."""
        rows = self._reader().execute(
            "SELECT id, content FROM memories WHERE agent = ? AND phone = ?"
            " AND status = 'approved' AND invalid_at IS NULL ORDER BY id",
            (agent, phone),
        )
        return [(str(r["id"]), str(r["content"])) for r in rows]

    def agent_memories(self, agent: str, phone: str | None) -> list[Memory]:
        """All memories of an agent, or of one person of it."""
        rows = self._reader().execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE agent = ?"
            " AND (CAST(? AS TEXT) IS NULL OR phone = ?)"
            " ORDER BY created_at, id",
            (agent, phone, phone),
        )
        return [memory_of(r) for r in rows]

    def every_memory(self) -> list[Memory]:
        """Every memory of every agent, in one snapshot: for checks over whole chains."""
        with self._snapshot() as conn:
            rows = conn.execute(f"SELECT {MEMORY_COLUMNS} FROM memories ORDER BY created_at, id")
            return [memory_of(r) for r in rows.fetchall()]

    def person_memories(self, agent: str, phone: str) -> list[Memory]:
        rows = self._reader().execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE agent = ? AND phone = ?"
            " ORDER BY created_at, id",
            (agent, phone),
        )
        return [memory_of(r) for r in rows]

    def list_memories(
        self,
        agent: str,
        where: MemoryFilter,
        *,
        order_by: str,
        descending: bool,
        limit: int,
        offset: int,
    ) -> tuple[list[Memory], int, int]:
        """A page of the agent's memories, the total that match, and the high-water mark
        (`as_of`): pass it back to keep later pages stable while others insert."""
        if order_by not in ("created_at", "updated_at"):
            raise ValueError("order_by")
        seq = self._db.memory_seq
        with self._snapshot() as conn:  # one snapshot for the count and the page
            as_of = where.as_of
            if as_of is None:
                as_of = int(
                    conn.execute(f"SELECT COALESCE(MAX({seq}), 0) FROM memories").fetchone()[0]
                )
            clause, args = where.sql(agent, as_of, seq)
            total = int(
                conn.execute(f"SELECT COUNT(*) FROM memories WHERE {clause}", args).fetchone()[0]
            )
            direction = "DESC" if descending else "ASC"
            rows = conn.execute(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {clause}"
                f" ORDER BY {order_by} {direction}, {seq} {direction} LIMIT ? OFFSET ?",
                (*args, limit, offset),
            ).fetchall()
        return [memory_of(r) for r in rows], total, as_of

    def update_memory(
        self, memory: Memory, *, changes: dict[str, Any], action: str, actor: str
    ) -> Memory | None:
        """Apply changes to a memory, record the history entry, queue it for the indexer.
        None, with nothing written, when the memory is gone (deleted or its person forgotten
        since the caller read it): no history entry may outlive it. A rejection keeps its
        chain whole and an approval applies its supersession (server/store/chains.py)."""
        allowed = {"content", "metadata", "type", "status", "expires_at"}
        if not set(changes) <= allowed:
            raise ValueError(f"cannot change {set(changes) - allowed}")
        phone = memory.phone
        for _ in range(MOVES_FOLLOWED):
            with self._person_transaction(memory.agent, phone) as conn:
                stored = chains.read(conn, memory.id)
                if stored is None or stored.agent != memory.agent:
                    return None
                if stored.phone == phone:
                    return _update(conn, stored, changes, action, actor, self._now())
                # Moved to another number since the caller read it: written under that
                # number's lock, or a write of that number could interleave with this one.
                phone = stored.phone
        return None

    def delete_memories(self, memories: Sequence[Memory], *, actor: str) -> int:
        """Delete memories, recording who did it; the indexer removes their vectors. Memories
        already gone (deleted, or their person forgotten) are skipped and leave no history.
        A chain stays whole: deleting the current memory makes the one it replaced current
        again; deleting one in the middle links its neighbours (server/store/chains.py).
        Returns how many were deleted."""
        deleted = 0
        todo = list(memories)
        for _ in range(MOVES_FOLLOWED):
            if not todo:
                break
            count, todo = self._delete_locked(todo, actor)
            deleted += count
        return deleted

    def _delete_locked(self, memories: Sequence[Memory], actor: str) -> tuple[int, list[Memory]]:
        """Delete, under their people's locks, the memories still of those people; returns
        how many, and those moved to another number since they were read (to delete under
        that number's lock)."""
        now = self._now()
        deleted = 0
        moved: list[Memory] = []
        people = {(m.agent, m.phone or AGENT_WIDE) for m in memories}
        with self._transaction() as conn:
            for agent, phone in sorted(people):
                self._db.lock_person(conn, agent, phone)  # in one order: no deadlock
            for memory in memories:
                stored = chains.read(conn, memory.id)
                if stored is None or stored.agent != memory.agent:
                    continue
                if (stored.agent, stored.phone or AGENT_WIDE) not in people:
                    moved.append(stored)
                    continue
                chains.leave(conn, stored, actor, now, deleting=True)
                conn.execute("DELETE FROM memories WHERE id = ?", (stored.id,))
                deleted += 1
                _history(conn, stored, "delete", actor, stored.content, None, now)
                enqueue(conn, "fact", stored.id, stored.agent, stored.phone, now)
        return deleted, moved

    def repair_chains(self) -> int:
        """Repair the chains of memories an older release left unsound (chains.repairs: a
        cycle, a self-reference, a link to a memory gone, a chain ending in a rejected memory),
        each person under their lock, read again there; returns how many people's chains were
        repaired. At start-up: cheap when all are sound, one read of the linked rows' links."""
        repaired = 0
        for agent, phone in self._people_with_unsound_chains():
            with self._person_transaction(agent, phone) as conn:
                person = {m.id: m for m in _person_memories(conn, agent, phone)}
                fixes = chains.repairs(chains.link_of_memory(m) for m in person.values())
                now = self._now()
                for memory_id, link in fixes.items():
                    chains.write_repair(conn, person[memory_id], link, now)
            repaired += bool(fixes)
        return repaired

    def _people_with_unsound_chains(self) -> list[tuple[str, str | None]]:
        found: list[tuple[str, str | None]] = []
        with self._snapshot() as conn:
            rows = conn.execute(
                f"SELECT {chains.LINK_COLUMNS} FROM memories WHERE supersedes IS NOT NULL"
                " OR superseded_by IS NOT NULL OR invalid_at IS NOT NULL"
                " ORDER BY agent, phone, id"
            ).fetchall()
            for (agent, phone), group in groupby(rows, key=lambda r: (r["agent"], r["phone"])):
                links = {r["id"]: chains.link_of(r) for r in group}
                links.update(_unlinked_targets(conn, agent, phone, links))
                if chains.repairs(links.values()):
                    found.append((agent, phone))
        return found

    def memory_history(self, memory_ids: Sequence[str]) -> list[HistoryEntry]:
        if not memory_ids:
            return []
        marks = ",".join("?" * len(memory_ids))
        rows = self._reader().execute(
            "SELECT memory_id, agent, action, actor, old_content, new_content, at"
            " FROM memory_history"
            f" WHERE memory_id IN ({marks}) ORDER BY id",
            tuple(memory_ids),
        )
        return [
            HistoryEntry(
                memory_id=r["memory_id"],
                agent=r["agent"],
                action=r["action"],
                actor=r["actor"],
                old_content=r["old_content"],
                new_content=r["new_content"],
                at=r["at"],
            )
            for r in rows
        ]

    def apply_compaction(
        self,
        agent: str,
        phone: str,
        *,
        summary: str,
        through_id: int,
        new_facts: Sequence[Memory],
        seen_again: Sequence[str],
        actor: str,
        from_turns: Sequence[int],
        name: tuple[str, Sequence[str]] | None = None,
    ) -> Applied | None:
        """All effects of one compaction in one transaction: the summary, the new facts (with
        history and outbox rows), the facts seen again, and the archived turns; returns the
        archived turns and the ids of the facts stored (one found stored already, identical,
        is seen again instead). The model ran
        before, outside any lock: if the turns it read (`from_turns`) are no longer all there
        and waiting (the person was forgotten meanwhile), nothing is written and None is
        returned, so nothing made from deleted turns can bring the person back. `name` (the
        name the model read in the turns, and its folded words) is the person's when they
        have none."""
        now = self._now()
        with self._person_transaction(agent, phone) as conn:
            if count_waiting(conn, agent, phone, from_turns) != len(set(from_turns)):
                return None
            _put_summary(conn, agent, phone, summary, through_id, now)
            if name is not None:
                learn_name(conn, agent, phone, name[0], name[1], now)
            repeated = list(seen_again)
            stored: list[str] = []
            for memory in new_facts:
                found = _identical(conn, memory)
                if found is None:
                    _insert_memory(conn, memory, actor)
                    stored.append(memory.id)
                    if memory.status == "approved":
                        # the one it names, or its chain's current one when that was
                        # replaced meanwhile; nothing when it is gone
                        chains.apply(conn, memory, actor, now)
                    continue
                if memory.supersedes is not None:
                    # a proposal that no longer fits (checked before any write): seen again
                    with suppress(
                        SupersedesConflict, SupersedesCycle, InvalidSupersedes, AlreadySuperseded
                    ):
                        found = _adopt_supersedes(conn, found, memory.supersedes, actor, now)
                if found.id not in repeated:
                    # Stored since the duplicate check, which reads the index (it may lag):
                    # the fact is seen again, not stored twice.
                    repeated.append(found.id)
            seen = 0
            for memory_id in repeated:
                if not conn.execute(
                    "UPDATE memories SET seen_count = seen_count + 1, updated_at = ?"
                    " WHERE id = ? AND agent = ? AND phone = ?",
                    (now, memory_id, agent, phone),
                ).rowcount:
                    continue  # deleted since the duplicate check: no history for it
                seen += 1
                conn.execute(
                    "INSERT INTO memory_history (memory_id, agent, phone, action, actor,"
                    " old_content, new_content, at) VALUES (?, ?, ?, 'seen_again', ?, NULL,"
                    " NULL, ?)",
                    (memory_id, agent, phone, actor, now),
                )
            return Applied(archive(conn, agent, phone, through_id, now), stored, seen)

    def expire_pending(self, now: str) -> list[Memory]:
        """Pending memories whose review time has passed become rejected."""
        with self._transaction() as conn:
            rows = conn.execute(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE status = 'pending'"
                " AND expires_at IS NOT NULL AND expires_at <= ?",
                (now,),
            ).fetchall()
            expired = []
            for memory in map(memory_of, rows):
                # Checked again as it is written: on PostgreSQL another replica's approval
                # may commit between the read and this write (this sweep holds no person's
                # lock), and an approved memory, its supersession applied, stays approved.
                if not conn.execute(
                    "UPDATE memories SET status = 'rejected', updated_at = ? WHERE id = ?"
                    " AND status = 'pending' AND expires_at IS NOT NULL AND expires_at <= ?",
                    (now, memory.id, now),
                ).rowcount:
                    continue
                expired.append(memory)
                _history(conn, memory, "expire", "system", memory.content, memory.content, now)
                enqueue(conn, "fact", memory.id, memory.agent, memory.phone, now)
        return expired

    def memories_by_ids(self, ids: Sequence[str]) -> dict[str, Memory]:
        rows = self._rows_by_ids(f"SELECT {MEMORY_COLUMNS} FROM memories", ids)
        return {row["id"]: memory_of(row) for row in rows}


def _put_summary(
    conn: Conn, agent: str, phone: str, text: str, through_id: int | None, now: str
) -> None:
    conn.execute(
        "INSERT INTO summaries (agent, phone, text, through_id, updated_at)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (agent, phone) DO UPDATE SET"
        " text = excluded.text, through_id = excluded.through_id,"
        " updated_at = excluded.updated_at",
        (agent, phone, text, through_id, now),
    )
    enqueue(conn, "summary", f"{agent}|{phone}", agent, phone, now)


def _identical(conn: Conn, memory: Memory) -> Memory | None:
    """The oldest current memory identical to `memory`: same agent, person (or both
    agent-wide), type and content, exactly (the routes have already made content one line;
    case is kept, as "ID AB12" and "id ab12" may not mean the same). Current: not deleted
    (deleted rows are gone), not rejected, and not pending past its review time (the sweep
    rejects those). A pending one counts: the same memory sent again is still waiting for the
    same review, and an admin's copy does not approve it; approving is its own, recorded act."""
    person, phone = (
        ("phone IS NULL", ()) if memory.phone is None else ("phone = ?", (memory.phone,))
    )
    row = conn.execute(
        f"SELECT {MEMORY_COLUMNS} FROM memories WHERE agent = ? AND {person} AND type = ?"
        " AND content = ? AND status IN ('pending', 'approved') AND invalid_at IS NULL"
        " AND (expires_at IS NULL OR expires_at > ?)"
        " ORDER BY created_at, id LIMIT 1",
        (memory.agent, *phone, memory.type, memory.content, memory.created_at),
    ).fetchone()
    return None if row is None else memory_of(row)


def _person_memories(conn: Conn, agent: str, phone: str | None) -> list[Memory]:
    person, args = ("phone IS NULL", ()) if phone is None else ("phone = ?", (phone,))
    rows = conn.execute(
        f"SELECT {MEMORY_COLUMNS} FROM memories WHERE agent = ? AND {person}", (agent, *args)
    )
    return [memory_of(r) for r in rows.fetchall()]


def _unlinked_targets(
    conn: Conn, agent: str, phone: str | None, links: dict[str, chains.Link]
) -> dict[str, chains.Link]:
    """The memories of this person that the links name and that have no link of their own
    (current ones that a pending memory would replace); one named and not found is gone."""
    named = sorted({k.supersedes for k in links.values() if k.supersedes} - set(links))
    found: dict[str, chains.Link] = {}
    for start in range(0, len(named), 500):
        chunk = named[start : start + 500]
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(
            f"SELECT {chains.LINK_COLUMNS} FROM memories WHERE id IN ({marks})", tuple(chunk)
        )
        for row in rows.fetchall():
            if (row["agent"], row["phone"]) == (agent, phone):
                found[row["id"]] = chains.link_of(row)
    return found


def _update(
    conn: Conn, stored: Memory, changes: dict[str, Any], action: str, actor: str, now: str
) -> Memory:
    values = {k: json.dumps(v) if k == "metadata" else v for k, v in changes.items()}
    values["updated_at"] = now
    assignments = ", ".join(f"{k} = ?" for k in values)
    if changes.get("status", "approved") != "approved":
        # Rejected: it is no longer true, so what it replaced is.
        chains.leave(conn, stored, actor, now, deleting=False)
    conn.execute(f"UPDATE memories SET {assignments} WHERE id = ?", (*values.values(), stored.id))
    new_content = changes.get("content", stored.content)
    _history(conn, stored, action, actor, stored.content, new_content, now)
    enqueue(conn, "fact", stored.id, stored.agent, stored.phone, now)
    updated = chains.read(conn, stored.id)
    assert updated is not None  # read under the person's lock, in this transaction
    if changes.get("status") == "approved":
        # The supersession proposed while it waited for review happens now.
        updated = chains.apply(conn, updated, actor, now)
    return updated


def _adopt_supersedes(conn: Conn, found: Memory, target: str, actor: str, now: str) -> Memory:
    """An identical memory was sent again, naming `target` as the one it replaces: the stored
    one takes that supersession on (applied now if it is approved, on approval if pending),
    when `target` may be replaced by it (chains.check_link). A stored one that replaces
    another memory already cannot replace a second."""
    if found.id == target:
        return found  # the same memory named as its own predecessor: nothing to change
    if found.supersedes is not None and found.supersedes != target:
        raise SupersedesConflict(
            f"supersedes: the identical memory {found.id!r} already replaces {found.supersedes!r}"
        )
    adopted = replace(found, supersedes=target)
    if found.supersedes is None:
        chains.check_link(conn, adopted)
        conn.execute(
            "UPDATE memories SET supersedes = ?, updated_at = ? WHERE id = ?",
            (target, now, found.id),
        )
    if found.status == "approved":
        chains.apply(conn, adopted, actor, now)
    stored = chains.read(conn, found.id)
    assert stored is not None  # read under the person's lock, in this transaction
    return stored


def _insert_memory(conn: Conn, memory: Memory, actor: str) -> None:
    conn.execute(
        f"INSERT INTO memories ({MEMORY_COLUMNS}) VALUES"
        " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            memory.id,
            memory.agent,
            memory.phone,
            memory.content,
            memory.type,
            memory.status,
            memory.confidence,
            memory.source,
            json.dumps(memory.metadata),
            memory.session_id,
            memory.task_id,
            memory.graph_id,
            json.dumps(memory.source_turns),
            memory.seen_count,
            memory.created_at,
            memory.updated_at,
            memory.expires_at,
            memory.since,
            memory.invalid_at,
            memory.superseded_by,
            memory.supersedes,
        ),
    )
    _history(conn, memory, "create", actor, None, memory.content, memory.created_at)
    enqueue(conn, "fact", memory.id, memory.agent, memory.phone, memory.created_at)
