"""Scripted partition schedules for Pre-Vote and CheckQuorum, on the deterministic
cluster of tests/raft (ManualClock, the seeded InMemoryNetwork, one thread), with
invariants checked after every 5 ms step on top of the cluster's own (at most one leader
per term, committed prefixes agree):

- `rejoin`: one member is cut off from everyone for many election timeouts, then
  rejoins. Invariant: a member that cannot reach a quorum never raises its term, and
  after it rejoins the leader is not deposed.
- `bridge`: one member (the bridge) sees both halves, the leader and another member do
  not see each other. Invariant: once the partition settled (one election timeout after
  it began) leadership changes at most once.

The cut-off member (in `bridge`: either end of the cut, while it is cut from the leader)
is *eager*: whenever it is a candidate between rounds, it takes the
next term (DLedger's WAIT_TO_VOTE_NEXT, what a round answered by a quorum without a grant
leads to, and what plain Raft does on every election timeout). DLedger's own rounds keep a
lonely candidate at its term most of the time; the eager member is the worst case that
Pre-Vote must absorb.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dledger.raft.messages import ParseResult
from tests.raft.cluster import Cluster

ELECTION_TIMEOUT_MS = 300  # tests/raft/cluster.FAST: 100 ms heartbeats, leak 3


class ScheduleViolation(AssertionError):
    """An invariant of a schedule broke."""


@dataclass
class Outcome:
    """What a schedule observed."""

    leader_changes: int = 0
    max_term_of_cut_off: int = -1
    term_at_cut: int = -1
    trace: list[str] = field(default_factory=list)


class _Watch:
    """Per-step observation of leadership changes."""

    def __init__(self, c: Cluster) -> None:
        self.c = c
        self.leader = c.leader()
        self.changes = 0

    def step(self) -> None:
        self.c.step()
        now = self.c.leader()
        if now is not None and now != self.leader:
            self.changes += 1
            self.leader = now


def _eager(c: Cluster, node: str) -> None:
    elector = c.core(node).elector
    if c.core(node).member_state.is_candidate and elector._vote_round is None:
        elector.last_parse_result = ParseResult.WAIT_TO_VOTE_NEXT


def _settled(seed: int, n: int, options: dict[str, Any]) -> tuple[Cluster, str]:
    c = Cluster(n, seed=seed, **options)
    leader = c.elect()
    f = c.append(b"before")
    c.run_until(f.done)
    # every member has committed it: logs stay equal while nobody appends, so a new
    # leader writes no NOOP and any member may win a vote (the hardest case)
    c.run_until(lambda: c._all_follow() and all(c.core(n).member_state.committed_index == f.result() for n in c.ids))
    return c, leader


def rejoin(seed: int, cut_ms: int = 20 * ELECTION_TIMEOUT_MS, **options: Any) -> Outcome:
    """Cut one follower off for `cut_ms`, let it rejoin; raise ScheduleViolation when it
    raised its term while alone, or the leader lost leadership after the heal."""
    c, leader = _settled(seed, 3, options)
    try:
        cut = next(n for n in c.ids if n != leader)
        out = Outcome(term_at_cut=c.core(cut).member_state.current_term)
        c.net.isolate(cut)
        watch = _Watch(c)
        end = c.now + cut_ms
        while c.now < end:
            _eager(c, cut)
            watch.step()
            term = c.core(cut).member_state.current_term
            out.max_term_of_cut_off = max(out.max_term_of_cut_off, term)
            if term > out.term_at_cut:
                raise ScheduleViolation(f"term inflation: {cut}, cut off, moved from {out.term_at_cut} to {term}")
        c.net.heal()
        for _ in range((4 * ELECTION_TIMEOUT_MS) // c.step_ms):
            watch.step()
            if watch.changes:
                raise ScheduleViolation(f"{cut} rejoined and deposed {leader}: {c.describe()}")
        f = c.append(b"after")
        c.run_until(lambda: f.done() and all(c.bodies(n) == [b"before", b"after"] for n in c.ids))
        out.leader_changes = watch.changes
        return out
    finally:
        c.close()


def bridge(seed: int, run_ms: int = 20 * ELECTION_TIMEOUT_MS, **options: Any) -> Outcome:
    """Cut the leader off from one follower (the other, the bridge, sees both) for
    `run_ms`; raise ScheduleViolation when leadership changes more than once after the
    partition settled."""
    c, leader = _settled(seed, 3, options)
    try:
        cut = next(n for n in c.ids if n != leader)
        out = Outcome(term_at_cut=c.core(cut).member_state.current_term)
        c.net.block(leader, cut)
        watch = _Watch(c)
        for _ in range(ELECTION_TIMEOUT_MS // c.step_ms):
            watch.step()
        settled_changes = watch.changes
        end = c.now + run_ms
        while c.now < end:
            now_leader = c.leader()
            for end_node in (leader, cut):  # the two ends of the cut stand eagerly when cut from the leader
                if now_leader is not None and not c.net.can_talk(now_leader, end_node):
                    _eager(c, end_node)
            watch.step()
            if watch.changes - settled_changes > 1:
                raise ScheduleViolation(
                    f"leader flapping: {watch.changes - settled_changes} changes after the partition settled"
                )
        out.leader_changes = watch.changes - settled_changes
        c.net.heal()
        f = c.append(b"after")
        c.run_until(f.done)
        return out
    finally:
        c.close()
