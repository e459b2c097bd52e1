"""Chains of memories linked by supersedes / superseded_by: who may replace whom, and how a
chain keeps exactly one current memory, and no cycle, as its memories are approved, rejected
and deleted. Each function runs inside its caller's write transaction, under the person's
lock, so two requests at once (through one replica or two) cannot interleave inside one."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

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
    memory it named is gone with nothing of its chain left. Returns `memory` as stored.

    When the one it replaces is a proposal never applied (pending or rejected, naming a memory
    its approval would replace), `memory` takes the proposal's place: the proposal is first
    linked where its approval would have put it, after the current memory of the chain it
    names (and so on back, for a proposal naming a proposal), so `memory` replaces, through
    it, what the proposal would have. Otherwise both would stay current. The proposal, ended
    by `memory`, is then a chain's middle: approving it later changes nothing."""
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
    links = _proposals_to_link(conn, last)
    _drop_lost_proposal(conn, links[0][0] if links else last)
    for older, newer in links:
        _end(conn, older, newer, memory, actor, now)
    _end(conn, last, memory, memory, actor, now)
    return replace(memory, supersedes=last.id)


def _end(conn: Conn, older: Memory, newer: Memory, approved: Memory, actor: str, now: str) -> None:
    """`older` is replaced by `newer`, on the approval of `approved` (`newer` itself, or one
    replacing it): it ends when that one began, as a proposal never approved did not hold."""
    ended = max(approved.since, older.since)
    conn.execute(
        "UPDATE memories SET invalid_at = ?, superseded_by = ?, updated_at = ? WHERE id = ?",
        (ended, newer.id, now, older.id),
    )
    if newer.supersedes != older.id:
        conn.execute("UPDATE memories SET supersedes = ? WHERE id = ?", (older.id, newer.id))
    history(conn, older, "supersede", actor, older.content, newer.content, now)
    enqueue(conn, "fact", older.id, older.agent, older.phone, now)


def _proposals_to_link(conn: Conn, memory: Memory) -> list[tuple[Memory, Memory]]:
    """The links (older, newer) to make, first ones first, before `memory` (a chain's current
    memory) is replaced: none unless it is a proposal never applied; then the one to what its
    approval would replace, and so on back while that one is such a proposal too."""
    links: list[tuple[Memory, Memory]] = []
    step = memory
    for _ in range(LONGEST_WALK):
        target = _proposed_target(conn, step)
        if target is None:
            break
        links.append((target, step))
        step = target
    return links[::-1]


def _drop_lost_proposal(conn: Conn, memory: Memory) -> None:
    """`memory`, about to be replaced, keeps no proposal that can no longer be applied (what it
    names is gone with its chain, or closes a cycle): replaced, it would still point at a
    memory left current beside its replacement."""
    if memory.status == "approved" or memory.invalid_at is not None:
        return
    named = read(conn, memory.supersedes)
    if memory.supersedes is not None and (named is None or named.superseded_by != memory.id):
        conn.execute("UPDATE memories SET supersedes = NULL WHERE id = ?", (memory.id,))


def _proposed_target(conn: Conn, memory: Memory) -> Memory | None:
    """What approving `memory` would replace now, when it is a proposal never applied (not
    approved, not replaced, naming a memory that it has not replaced): the current memory of
    the chain it names, of its person and not one it replaces already (a cycle); else None."""
    if memory.status == "approved" or memory.invalid_at is not None:
        return None
    named = read(conn, memory.supersedes)
    if named is None or named.superseded_by == memory.id:
        return None
    last = _last_of(conn, named)
    if last is None or (last.agent, last.phone) != (memory.agent, memory.phone):
        return None
    if last.id == memory.id or _replaces(conn, last.id, memory.id):
        return None
    return last


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
        _pass_proposals_on(conn, memory, stand_in, skip=after)


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


def _pass_proposals_on(conn: Conn, gone: Memory, stand_in: str | None, *, skip: str | None) -> None:
    """Memories naming `gone` (about to be deleted) as the one they replace name `stand_in`
    instead (none when linking would close a cycle): a pending replacement of a deleted
    memory replaces what took its place on approval, not nothing. Only the same person's
    memories can name it, and the person's index finds them (supersedes has none)."""
    person, args = ("phone IS NULL", ()) if gone.phone is None else ("phone = ?", (gone.phone,))
    rows = conn.execute(
        f"SELECT id FROM memories WHERE agent = ? AND {person} AND supersedes = ?",
        (gone.agent, *args, gone.id),
    ).fetchall()
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


# -- repairing chains an older release left unsound ------------------------------------------


@dataclass(frozen=True, slots=True)
class Link:
    """What a memory's place in its chain is made of."""

    id: str
    status: str
    created_at: str
    since: str
    invalid_at: str | None
    superseded_by: str | None
    supersedes: str | None


LINK_COLUMNS = (
    "id, agent, phone, status, created_at, valid_from, invalid_at, superseded_by, supersedes"
)


def link_of(row: Any) -> Link:
    return Link(
        id=row["id"],
        status=row["status"],
        created_at=row["created_at"],
        since=row["valid_from"] or row["created_at"],
        invalid_at=row["invalid_at"],
        superseded_by=row["superseded_by"],
        supersedes=row["supersedes"],
    )


def link_of_memory(memory: Memory) -> Link:
    return Link(
        id=memory.id,
        status=memory.status,
        created_at=memory.created_at,
        since=memory.since,
        invalid_at=memory.invalid_at,
        superseded_by=memory.superseded_by,
        supersedes=memory.supersedes,
    )


def repairs(person: Iterable[Link]) -> dict[str, Link]:
    """The links of one person's memories that must change for every chain among them to be
    sound, as they must become (empty when all are). Chains an older release could leave:
    a memory naming itself, a link to a memory gone (or another person's), a cycle (issue
    39: two memories replacing each other, neither current; the newest becomes current), a
    memory replacing two, a link one way only, a proposal replaced before it was applied
    (two current memories, linked through it), a chain ending in a rejected memory."""
    links = {link.id: link for link in person}
    before = dict(links)
    for fix in (_unknown_links, _cycles, _second_predecessors, _one_way_links):
        fix(links)
    _replaced_proposals(links)
    _dormant_links(links)
    _rejected_ends(links)
    return {i: link for i, link in links.items() if link != before[i]}


def write_repair(conn: Conn, memory: Memory, link: Link, now: str) -> None:
    """Store a repaired link, with a history entry ('reopen' when it is true again, else
    'repair') and an outbox row: the index labels it by whether it was replaced."""
    conn.execute(
        "UPDATE memories SET supersedes = ?, superseded_by = ?, invalid_at = ?, updated_at = ?"
        " WHERE id = ?",
        (link.supersedes, link.superseded_by, link.invalid_at, now, memory.id),
    )
    reopened = memory.invalid_at is not None and link.invalid_at is None
    action = "reopen" if reopened else "repair"
    history(conn, memory, action, "system", memory.content, memory.content, now)
    enqueue(conn, "fact", memory.id, memory.agent, memory.phone, now)


def _set(links: dict[str, Link], memory_id: str, **changes: Any) -> None:
    links[memory_id] = replace(links[memory_id], **changes)


def _unknown_links(links: dict[str, Link]) -> None:
    for link in list(links.values()):
        if link.supersedes is not None and (
            link.supersedes == link.id or link.supersedes not in links
        ):
            _set(links, link.id, supersedes=None)
        if link.superseded_by is not None and (
            link.superseded_by == link.id or link.superseded_by not in links
        ):
            _set(links, link.id, superseded_by=None)


def _cycles(links: dict[str, Link]) -> None:
    """Along superseded_by: the newest memory of a cycle ends it (it is replaced by none)."""
    for start in list(links):
        path: list[str] = []
        step: str | None = start
        while step is not None and step not in path:
            path.append(step)
            step = links[step].superseded_by
        if step is not None:
            cycle = path[path.index(step) :]
            newest = max(cycle, key=lambda i: (links[i].created_at, i))
            _set(links, newest, superseded_by=None)


def _second_predecessors(links: dict[str, Link]) -> None:
    """A memory replaces one other: the one it names, else the newest of those it ended."""
    ended: dict[str, list[str]] = {}
    for link in links.values():
        if link.superseded_by is not None:
            ended.setdefault(link.superseded_by, []).append(link.id)
    for successor, predecessors in ended.items():
        if len(predecessors) < 2:
            continue
        named = links[successor].supersedes
        keep = (
            named if named in predecessors else max(predecessors, key=lambda i: links[i].created_at)
        )
        for other in predecessors:
            if other != keep:
                _set(links, other, superseded_by=None)


def _one_way_links(links: dict[str, Link]) -> None:
    """A replaced memory and its replacement name each other; it ended when that one began."""
    for link in list(links.values()):
        if link.superseded_by is None:
            if link.invalid_at is not None:
                _set(links, link.id, invalid_at=None)
            continue
        successor = links[link.superseded_by]
        if successor.supersedes != link.id:
            _set(links, successor.id, supersedes=link.id)
        if link.invalid_at is None:
            _set(links, link.id, invalid_at=max(link.since, successor.since))


def _replaced_proposals(links: dict[str, Link]) -> None:
    """A proposal replaced while it still only proposed (an older release let a memory replace
    a pending one and leave what that one would have replaced current) is linked as `apply`
    links it now: after the current memory of the chain it names, which ends when its own
    chain's current memory began. One naming its own chain (a cycle) proposes nothing."""
    for _ in range(len(links)):
        found = _replaced_proposal(links)
        if found is None:
            return
        proposal, named = found
        last = _current_of(links, named)
        replaced_by = _current_path(links, proposal)
        if last is None or last in replaced_by:
            _set(links, proposal, supersedes=None)
            continue
        ended = max(links[last].since, links[replaced_by[-1]].since)
        _set(links, last, superseded_by=proposal, invalid_at=ended)
        _set(links, proposal, supersedes=last)


def _replaced_proposal(links: dict[str, Link]) -> tuple[str, str] | None:
    """A replaced memory whose own `supersedes` is not applied: (its id, the memory it names)."""
    for link in links.values():
        named = link.supersedes
        replaced = link.superseded_by is not None
        if named is not None and replaced and links[named].superseded_by != link.id:
            return link.id, named
    return None


def _current_path(links: dict[str, Link], start: str) -> list[str]:
    """`start` and the memories that replaced it, one after the other, to its chain's end."""
    path = [start]
    step = links[start].superseded_by
    while step is not None and step in links and step not in path:
        path.append(step)
        step = links[step].superseded_by
    return path


def _current_of(links: dict[str, Link], start: str) -> str | None:
    path = _current_path(links, start)
    return path[-1] if links[path[-1]].superseded_by is None else None


def _dormant_links(links: dict[str, Link]) -> None:
    """A link not applied stays only as a pending (or rejected) memory's proposal, and only
    when it closes no cycle; an approved memory's is dropped (it is current as it was)."""
    for link in list(links.values()):
        named = link.supersedes
        if named is None or links[named].superseded_by == link.id:
            continue
        if link.status == "approved" or _proposes(links, named, link.id):
            _set(links, link.id, supersedes=None)


def _proposes(links: dict[str, Link], newer: str, older: str) -> bool:
    seen: set[str] = set()
    step: str | None = newer
    while step is not None and step in links and step not in seen:
        if step == older:
            return True
        seen.add(step)
        step = links[step].supersedes
    return False


def _rejected_ends(links: dict[str, Link]) -> None:
    """A chain whose last memory is not approved ends at the nearest approved one before it."""
    ended = {link.superseded_by: link.id for link in links.values() if link.superseded_by}
    for start in list(links):
        last = links[start]
        while last.invalid_at is None and last.status != "approved" and last.id in ended:
            previous = ended.pop(last.id)
            _set(links, previous, superseded_by=None, invalid_at=None)
            last = links[previous]
