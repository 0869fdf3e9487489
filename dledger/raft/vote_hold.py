"""VoteHold: after a restart that may have lost acknowledged entries, a member neither
votes nor stands for election until it holds everything a leader had.

With `async` flush a follower acknowledges an APPEND before the entries are on disk
(DLedger's behaviour). If it then loses power, entries it helped commit are gone from its
log, and its vote could let a member that never had them lead: both of them together are a
majority, and neither holds the committed entries (simulation finding R1). A restart cannot
tell a power loss from a process crash, so after any unclean shutdown the member holds its
vote until it has caught up with a leader: until its committed index reaches the ledger end
that leader announced in its first heartbeat after the restart. A leader holds every
committed entry, so at that point the member holds every entry it could have acknowledged
before it went down.

When a majority went down together (a power cut of the whole cluster), every member may be
holding and nobody could be elected; the hold therefore ends after `max_ms` in any case,
accepting what async flush can lose in that case (see docs/SIMULATION.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class VoteHold:
    """The hold of one member; pure bookkeeping, driven by the elector.

    Args:
        active: whether the member restarted after an unclean shutdown and must hold.
        max_ms: the longest the hold lasts, counted from the first `release` call.
    """

    active: bool
    max_ms: int
    deadline_ms: int | None = None
    leader: tuple[str, int] | None = None
    target_index: int = -1
    expired: bool = False

    def on_leader(self, leader_id: str, term: int, leader_end_index: int) -> None:
        """A heartbeat from `leader_id` in `term` that this member accepted; the first one
        from each leader sets the index to catch up to."""
        if self.active and self.leader != (leader_id, term):
            self.leader = (leader_id, term)
            self.target_index = leader_end_index

    def release(self, now_ms: int, committed_index: int, leader_id: str | None, term: int) -> bool:
        """Whether the hold is still on, ending it when the member caught up with the leader
        it follows or when `max_ms` passed."""
        if not self.active:
            return False
        if self.deadline_ms is None:
            self.deadline_ms = now_ms + self.max_ms
        caught_up = (
            self.leader is not None and self.leader == (leader_id, term) and committed_index >= self.target_index
        )
        if caught_up or now_ms >= self.deadline_ms:
            self.active = False
            self.expired = not caught_up
        return self.active
