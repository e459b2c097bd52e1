"""Chains of memories linked by supersedes / superseded_by: who may replace whom, and how a
chain keeps exactly one current memory, and no cycle, as its memories are approved, rejected
and deleted. Each function runs inside its caller's write transaction, under the person's
lock, so two requests at once (through one replica or two) cannot interleave inside one."""

from __future__ import annotations

from dataclasses import replace

from server.errors import AlreadySuperseded, InvalidSupersedes, SupersedesCycle
from server.store.db import Conn
from server.store.outbox import enqueue
from server.store.records import MEMORY_COLUMNS, Memory, memory_of

# Walks stop after this many steps: a chain damaged by an older release (a cycle) must not
# hang a write. Real chains are a handful of memories long.
LONGEST_WALK = 10_000


def check_link(conn: Conn, memory: Memory) -> None:
    """`memory` may replace the one `memory.supersedes` names: a memory of the same agent
    and person (InvalidSupersedes), not replaced already (AlreadySuperseded), and neither
    `memory` itself nor one that replaces `memory`, now or once approved, directly or through
    others (SupersedesCycle: both would end, and the chain would hold no current memory)."""
    target = read(conn, memory.supersedes)
    if target is None or (target.agent, target.phone) != (memory.agent, memory.phone):
        raise InvalidSupersedes(
            f"supersedes: no memory {memory.supersedes!r} of this agent and person"
        )
    if target.invalid_at is not None:
        raise AlreadySuperseded(
            f"supersedes: memory {target.id!r} was superseded already (by {target.superseded_by!r})"
        )
    if target.id == memory.id or _replaces(conn, target.id, memory.id):
        raise SupersedesCycle(
            f"supersedes: memory {target.id!r} replaces memory {memory.id!r} (or will once"
            " approved), directly or through others: a memory cannot replace its own"
            " replacement"
        )


def apply(conn: Conn, memory: Memory, actor: str, now: str) -> Memory:
    """`memory`, approved, replaces the memory it names; when that one was replaced meanwhile
    (another approval came first, an edit raced with a compaction), the current memory of its
    chain instead, so that the chain keeps one current memory rather than two. The replaced
    one ends when `memory` began (never before it began itself). The link is dropped when the
    memory it named is gone with nothing of its chain left. Returns `memory` as stored."""
    if memory.supersedes is None:
        return memory
    named = read(conn, memory.supersedes)
    if named is not None and named.superseded_by == memory.id:
        return memory  # applied already: approved again after a rejection in a chain's middle
    last = None if named is None else _last_of(conn, named)
    if last is None or (last.agent, last.phone) != (memory.agent, memory.phone):
        conn.execute("UPDATE memories SET supersedes = NULL WHERE id = ?", (memory.id,))
        return replace(memory, supersedes=None)
    if last.id == memory.id or _replaces(conn, last.id, memory.id):
        return memory  # it is in that chain already, before its current memory
    ended = max(memory.since, last.since)
    conn.execute(
        "UPDATE memories SET invalid_at = ?, superseded_by = ?, updated_at = ? WHERE id = ?",
        (ended, memory.id, now, last.id),
    )
    if last.id != memory.supersedes:
        conn.execute("UPDATE memories SET supersedes = ? WHERE id = ?", (last.id, memory.id))
    history(conn, last, "supersede", actor, last.content, memory.content, now)
    enqueue(conn, "fact", last.id, last.agent, last.phone, now)
    return replace(memory, supersedes=last.id)


def leave(conn: Conn, memory: Memory, actor: str, now: str, *, deleting: bool) -> None:
    """`memory` (as stored now) is about to stop counting: deleted, or rejected. Its chain
    stays whole, with one current memory. When it was the current one, the memory it replaced
    is current again ('reopen' in that one's history), or, when that one was rejected, the
    nearest approved one before it. When it had been replaced itself and is deleted, its
    predecessor and its successor are linked to each other. Memories waiting for review that
    would replace a deleted one would now replace what stands in its place."""
    before = _replaced_by(conn, memory.id)
    after = memory.superseded_by if memory.invalid_at is not None else None
    if after is None and before is not None:
        _reopen(conn, before, memory, actor, now)
    elif deleting and after is not None:
        if before is not None:
            conn.execute(
                "UPDATE memories SET superseded_by = ? WHERE id = ? AND id != ?",
                (after, before.id, after),
            )
        conn.execute(
            "UPDATE memories SET supersedes = ? WHERE id = ?",
            (None if before is None else before.id, after),
        )
    if deleting:
        stand_in = after or (before.id if before is not None else memory.supersedes)
        _pass_proposals_on(conn, memory.id, stand_in, skip=after)


def read(conn: Conn, memory_id: str | None) -> Memory | None:
    if memory_id is None:
        return None
    row = conn.execute(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ?", (memory_id,))
    found = row.fetchone()
    return None if found is None else memory_of(found)


def history(
    conn: Conn,
    memory: Memory,
    action: str,
    actor: str,
    old: str | None,
    new: str | None,
    at: str,
) -> None:
    conn.execute(
        "INSERT INTO memory_history (memory_id, agent, phone, action, actor, old_content,"
        " new_content, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (memory.id, memory.agent, memory.phone, action, actor, old, new, at),
    )


def _reopen(conn: Conn, first: Memory, leaving: Memory, actor: str, now: str) -> None:
    """`first`, replaced by `leaving`, is true again; a rejected one is not what anyone holds
    true, so the walk goes on back to the nearest approved one (or the chain's start)."""
    reopened: Memory | None = first
    cause = leaving
    for _ in range(LONGEST_WALK):
        if reopened is None:
            return
        conn.execute(
            "UPDATE memories SET invalid_at = NULL, superseded_by = NULL, updated_at = ?"
            " WHERE id = ?",
            (now, reopened.id),
        )
        history(conn, reopened, "reopen", actor, cause.content, reopened.content, now)
        enqueue(conn, "fact", reopened.id, reopened.agent, reopened.phone, now)
        if reopened.status == "approved":
            return
        cause, reopened = reopened, _replaced_by(conn, reopened.id)


def _pass_proposals_on(conn: Conn, gone: str, stand_in: str | None, *, skip: str | None) -> None:
    """Memories naming `gone` (about to be deleted) as the one they replace name `stand_in`
    instead (none when linking would close a cycle): a pending replacement of a deleted
    memory replaces what took its place on approval, not nothing."""
    rows = conn.execute("SELECT id FROM memories WHERE supersedes = ?", (gone,)).fetchall()
    for row in rows:
        proposal = str(row["id"])
        if proposal == skip:
            continue
        target = stand_in
        if target is not None and (target == proposal or _replaces(conn, target, proposal)):
            target = None
        conn.execute("UPDATE memories SET supersedes = ? WHERE id = ?", (target, proposal))


def _replaced_by(conn: Conn, memory_id: str) -> Memory | None:
    """The memory that `memory_id` replaced (its predecessor in the chain), if any."""
    row = conn.execute(
        f"SELECT {MEMORY_COLUMNS} FROM memories WHERE superseded_by = ? ORDER BY id LIMIT 1",
        (memory_id,),
    ).fetchone()
    return None if row is None else memory_of(row)


def _last_of(conn: Conn, memory: Memory) -> Memory | None:
    """The current memory of `memory`'s chain: itself, or the last of those that replaced
    it; None when the chain is broken (a link to a memory that is gone, or a cycle)."""
    found: Memory | None = memory
    for _ in range(LONGEST_WALK):
        if found is None or found.invalid_at is None:
            return found
        found = read(conn, found.superseded_by)
    return None


def _replaces(conn: Conn, newer: str, older: str) -> bool:
    """True when `newer` replaces `older`, now or once approved, directly or through other
    memories: `older` is found walking back from `newer` along every link (`supersedes`,
    applied or proposed, and `superseded_by`)."""
    seen = {newer}
    frontier = [newer]
    while frontier and len(seen) < LONGEST_WALK:
        rows = conn.execute(
            "SELECT supersedes FROM memories WHERE id = ?"
            " UNION SELECT id FROM memories WHERE superseded_by = ?",
            (frontier[-1], frontier[-1]),
        ).fetchall()
        frontier.pop()
        for row in rows:
            found = row[0]
            if found == older:
                return True
            if found is not None and found not in seen:
                seen.add(found)
                frontier.append(found)
    return False
