"""Invariants over the whole store that tests of any part can assert after each step."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from server.store import Memory, Store


def assert_chains_sound(source: Any) -> None:
    """Every chain of memories (linked by supersedes / superseded_by) is sound: links point
    both ways at a memory of the same agent and person, never at the memory itself, never
    round in a cycle (proposals of pending memories included), a chain is a line (one
    predecessor and one successor at most), only its last memory is true now, and when any
    memory of it is approved, that last one is approved: exactly one current memory, unless
    none of it is approved (all pending, rejected or deleted). A memory replaced by another
    holds no proposal of its own left unapplied (a pending one, replaced, would otherwise
    leave current both what it proposed to replace and what replaced it).

    `source`: a Store, or anything holding one as `.store` or `.services.store` (the tests'
    Api, the app's Services)."""
    problems = chain_problems(_store_of(source).every_memory())
    assert not problems, "unsound memory chains:\n" + "\n".join(problems)


def chain_problems(memories: Iterable[Memory]) -> list[str]:
    """What is wrong with the chains among `memories` (all of them: a chain is checked whole),
    one line per problem; empty when sound."""
    by_id = {m.id: m for m in memories}
    replaced = Counter(m.superseded_by for m in by_id.values() if m.superseded_by is not None)
    problems = [p for m in by_id.values() for p in _link_problems(m, by_id)]
    problems += [f"{i} replaced several memories at once" for i, n in replaced.items() if n > 1]
    problems += _cycle_problems(by_id, "supersedes")
    problems += _cycle_problems(by_id, "superseded_by")
    if problems:
        return problems  # the chains below are walked along links checked sound
    return _current_problems(by_id, set(replaced))


def _store_of(source: Any) -> Store:
    if isinstance(source, Store):
        return source
    if hasattr(source, "services"):
        source = source.services
    store = source.store
    assert isinstance(store, Store), f"no store in {source!r}"
    return store


def _link_problems(m: Memory, by_id: dict[str, Memory]) -> list[str]:
    problems = []
    if m.id in (m.supersedes, m.superseded_by):
        problems.append(f"{m.id} names itself (supersedes {m.supersedes}, by {m.superseded_by})")
    for name, other_id in (("supersedes", m.supersedes), ("superseded_by", m.superseded_by)):
        other = by_id.get(other_id) if other_id is not None else None
        if other_id is not None and other is None:
            problems.append(f"{m.id}.{name} names {other_id}, which does not exist")
        elif other is not None and (other.agent, other.phone) != (m.agent, m.phone):
            problems.append(f"{m.id}.{name} names {other_id} of another agent or person")
    if (m.invalid_at is None) != (m.superseded_by is None):
        problems.append(f"{m.id}: invalid_at {m.invalid_at} but superseded_by {m.superseded_by}")
    successor = by_id.get(m.superseded_by) if m.superseded_by is not None else None
    if successor is not None and successor.supersedes != m.id:
        problems.append(
            f"{m.id} is superseded by {successor.id}, which supersedes {successor.supersedes}"
        )
    if m.invalid_at is not None and m.invalid_at < m.since:
        problems.append(f"{m.id} ended ({m.invalid_at}) before it began ({m.since})")
    predecessor = by_id.get(m.supersedes) if m.supersedes is not None else None
    if m.status == "approved" and predecessor is not None and predecessor.superseded_by != m.id:
        problems.append(
            f"{m.id} is approved and supersedes {predecessor.id}, which is superseded by"
            f" {predecessor.superseded_by}: two current memories where there should be one"
        )
    if (
        m.superseded_by is not None
        and predecessor is not None
        and predecessor.superseded_by != m.id
    ):
        # A proposal replaced before its own replacement was applied: the chain it would
        # have joined and the chain that replaced it each keep a current memory.
        problems.append(
            f"{m.id} ({m.status}) was replaced by {m.superseded_by} while its proposal to"
            f" replace {predecessor.id} (superseded by {predecessor.superseded_by}) was never"
            " applied: two current memories, linked through it, where there should be one"
        )
    return problems


def _cycle_problems(by_id: dict[str, Memory], link: str) -> list[str]:
    problems = []
    for start in by_id.values():
        seen = {start.id}
        step: str | None = getattr(start, link)
        while step is not None and step in by_id:
            if step in seen:
                if step == start.id:
                    problems.append(f"{start.id} is in a cycle of {link}: {sorted(seen)}")
                break
            seen.add(step)
            step = getattr(by_id[step], link)
    return problems


def _current_problems(by_id: dict[str, Memory], successors: set[str]) -> list[str]:
    """Each chain from its first memory (one that replaced no other) to its last."""
    problems = []
    for first in (m for m in by_id.values() if m.id not in successors):
        chain = [first]
        while chain[-1].superseded_by is not None:
            chain.append(by_id[chain[-1].superseded_by])
        last = chain[-1]
        if last.invalid_at is not None:
            problems.append(f"chain {[m.id for m in chain]}: its last memory is not current")
        if len(chain) > 1 and last.status != "approved":
            problems.append(
                f"chain {[m.id for m in chain]} ({[m.status for m in chain]}): its last memory"
                f" is {last.status}, so no memory of it is current"
            )
    return problems
