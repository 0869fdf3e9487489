"""VoteHold: a member that may have lost entries it acknowledged neither votes nor stands
for election until it cannot be missing anything a quorum acknowledged.

Two ways to lose acknowledged entries:

- **An unclean restart with async flush.** A follower acknowledges an APPEND before the
  entries are on disk (DLedger's behaviour). If it then loses power, entries it helped
  commit are gone from its log, and its vote could let a member that never had them
  lead: both of them together are a majority, and neither holds the committed entries
  (simulation finding R1). A restart cannot tell a power loss from a process crash, so
  after any unclean shutdown the member holds. Its term and vote are safe (the `currterm`
  file is fsynced before a vote is granted); only log entries may be missing.
- **A lost or repaired disk** (`kind="rejoin"`): an empty store told that its group
  already exists (`--initial-cluster-state existing`), or a store cut back by `--repair`.
  Here the member also lost its term and vote, so it may not vote at all until it caught
  up: a vote it gave before the loss could otherwise be given again, to another
  candidate, in the same term. This hold has no time limit and survives restarts (the
  `rejoin` marker file, dledger.store.membership).

**Caught up** ends either hold: the member follows a leader and its committed index
reached that leader's ledger end as announced in its first heartbeat after the member
started holding (and, for a rejoin, the committed index it had recorded before it lost
data). A leader holds every committed entry, so the member then holds every entry it
could have acknowledged, and its log decides its votes again.

**Log ends of every member** end the unclean hold early, when no leader is there to
catch up with (two crashes a few seconds apart, or a majority restarting at once, would
otherwise leave every live member but one holding, and nobody could be elected). The
holding member asks every member, itself included, for its log end (a pre-vote round:
nothing changes at the members asked; every `VoteResponse` carries the answering
member's log end), and when all of them answered it takes the highest (term, index) end
reported as its *floor*. From then on it votes only for a candidate whose log is at least
as up to date as the floor, and stands only when its own log is; the floor goes once it
caught up with a leader. Why that is safe: an entry E that a quorum acknowledged, and
that this member lost, is either lost by every member that acknowledged it (then no rule
can bring it back: async flush losing it on all of them is the documented risk of async
flush) or held by some member M that still has it; M answered, so the floor is at least
M's log end, and a candidate at least as up to date as M's log holds E (the vote's own
argument, Raft §5.4.1). Answers from a mere quorum would not do: in a group of three, the
member that lost E and one member without E are a quorum, and the third, which holds E,
might not have answered. A rejoin hold does not end this way: its term and vote were lost
with the disk.

When a majority went down together and one of them never comes back, the members that
are back may all be holding, without every member's answer; the unclean hold therefore
ends after `max_ms` in any case, accepting what async flush can lose in that case (see
docs/SIMULATION.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LogEnd = tuple[int, int]
"""(term of the last entry, index of the last entry): Raft's log order."""


@dataclass(slots=True)
class VoteHold:
    """The hold of one member; pure bookkeeping, driven by the elector.

    Args:
        active: whether the member holds its vote now.
        max_ms: the longest an unclean hold lasts, counted from the first `release`
            call (a rejoin hold has no limit).
        kind: "unclean" (an unclean restart with async flush) or "rejoin" (a lost or
            repaired disk).
        min_index: a rejoin also waits until the committed index reaches this (the
            committed index the member had recorded before it lost data; -1: none).
    """

    active: bool
    max_ms: int
    kind: Literal["unclean", "rejoin"] = "unclean"
    min_index: int = -1
    deadline_ms: int | None = None
    leader: tuple[str, int] | None = None
    target_index: int = -1
    expired: bool = False
    floor: LogEnd | None = None
    released: bool = False

    @property
    def pending(self) -> bool:
        """Whether the hold, or a floor that replaced it, still applies."""
        return self.active or self.floor is not None

    @property
    def state(self) -> str:
        """What `dledger status` shows: "" (no hold), "unclean", "rejoin" or "floor"."""
        if self.active:
            return self.kind
        return "floor" if self.floor is not None else ""

    @property
    def wants_log_ends(self) -> bool:
        """Whether a round asking every member for its log end could end the hold."""
        return self.active and self.kind == "unclean"

    def on_leader(self, leader_id: str, term: int, leader_end_index: int) -> None:
        """A heartbeat from `leader_id` in `term` that this member accepted; the first one
        from each leader sets the index to catch up to."""
        if self.pending and self.leader != (leader_id, term):
            self.leader = (leader_id, term)
            self.target_index = leader_end_index

    def on_log_ends(self, ends: list[LogEnd]) -> None:
        """Every member's log end (this member's included): the floor replaces the hold
        (see the module docstring)."""
        if self.wants_log_ends and ends:
            self.floor = max(ends)
            self.active = False

    def release(self, now_ms: int, committed_index: int, leader_id: str | None, term: int) -> bool:
        """Whether the hold is still on, ending it (and any floor) when the member caught
        up with the leader it follows, or when `max_ms` passed (unclean hold only: a floor
        whose member went away for good must not stall the group either).
        `released` becomes True when it ends by catching up."""
        if not self.pending:
            return False
        if self.deadline_ms is None:
            self.deadline_ms = now_ms + self.max_ms
        caught_up = (
            self.leader is not None
            and self.leader == (leader_id, term)
            and committed_index >= max(self.target_index, self.min_index)
        )
        if caught_up:
            self.active, self.floor, self.released = False, None, True
        elif self.kind == "unclean" and now_ms >= self.deadline_ms:
            self.active, self.floor, self.expired = False, None, True
        return self.active

    def admits(self, candidate_end: LogEnd) -> bool:
        """Whether the floor (if any) lets this member vote for a candidate whose log
        ends at `candidate_end`."""
        return self.floor is None or candidate_end >= self.floor
