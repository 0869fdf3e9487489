"""MatchSearch: the leader's search for the last index where a follower's log matches.

Log matching makes "matches at i" monotone in i, so each COMPARE answer narrows
(`low`, `high`): `low` is the highest index proven to match (-1: the empty prefix),
`high` the lowest proven not to. Only once they meet is the match point known; then the
follower's tail after it conflicts, and only then is it truncated. (Jumping straight to
the follower's hint could land below the real match point and truncate matching, even
committed, entries.) The hint only picks the next probe.

A follower that answers LOG_DIVERGED committed another term at an index than the
leader's log holds: no match point exists that keeps its committed entries. The search
records that (`diverged`, logged once) until a later search finds a match (the member
was replaced by one that lost its store, say). SEGMENT_SIZE_MISMATCH (the follower's
data segments are of another size than the leader's) is taken alike.
"""

from __future__ import annotations

import logging

from dledger.codes import ResponseCode
from dledger.raft.member_state import MemberState
from dledger.raft.messages import PushEntryRequest, PushEntryResponse

log = logging.getLogger(__name__)

REFUSED_RETRY_MS = 1000
"""Pause before pushing again to a follower that refused a push as malformed."""


class MatchSearch:
    """The bounds of one search; `reset` starts over from the leader's ledger end."""

    def __init__(self, leader_end: int = -1) -> None:
        self.low = -1
        self.high = leader_end + 1
        self.diverged = False  # the follower answered LOG_DIVERGED and no match was found since
        self.refused_from = -1  # the first index of the last push it refused as malformed

    def reset(self, leader_end: int) -> None:
        """Forget the bounds: nothing proven yet about the follower's log."""
        self.low = -1
        self.high = leader_end + 1

    def narrow(self, probe: int, matched: bool, follower_end: int, leader_end: int) -> None:
        """Take in the answer to a COMPARE at `probe`."""
        if matched:
            self.low = max(self.low, probe)
            self.high = min(self.high, follower_end + 1, leader_end + 1)
        else:
            self.high = min(self.high, probe)
        if self.found:  # the follower shares this history (again)
            self.diverged = False

    @property
    def found(self) -> bool:
        """Whether the match point (`low`) is known."""
        return self.high <= self.low + 1

    def diverge(
        self, leader: MemberState, peer_id: str, resp: PushEntryResponse, leader_term: int, segment_size: int
    ) -> None:
        """Take in a LOG_DIVERGED answer from `peer_id`; `leader_term`: the term the
        leader's log holds at the conflicting index (`resp.x_index`). A
        SEGMENT_SIZE_MISMATCH answer is taken in the same way (`segment_size`: the
        leader's data segments, for the log line)."""
        if not self.diverged and resp.code == ResponseCode.SEGMENT_SIZE_MISMATCH:
            log.error(
                "%s: follower %s refuses this leader: its data segments are not of this leader's size (%d bytes), "
                "so it cannot hold entries at this leader's positions; it is left behind (give every member the "
                "same --segment-size)",
                leader.self_id,
                peer_id,
                segment_size,
            )
        elif not self.diverged and resp.x_index < 0:  # it had found out before, from another push
            log.error("%s: follower %s refuses this leader: its log is of another history", leader.self_id, peer_id)
        elif not self.diverged:
            log.error(
                "%s: follower %s committed term %d at index %d, where this leader's log holds term %d: "
                "its log is of another history of group %s (founded again without it?); it is left behind",
                leader.self_id,
                peer_id,
                resp.x_term,
                resp.x_index,
                leader_term,
                leader.group,
            )
        self.diverged = True

    def refused(self, leader: MemberState, peer_id: str, req: PushEntryRequest, resp: PushEntryResponse) -> int:
        """The pause (ms) before pushing to `peer_id` again after `resp` answered the
        APPEND `req`: REFUSED_RETRY_MS when the follower refused it as malformed
        (UNEXPECTED_ARGUMENT: a member of an older version that cannot store a kind of
        entry, helper N: the leader went on 400 times a second without a word), logged
        once per refused index; 0 otherwise."""
        if resp.code != ResponseCode.UNEXPECTED_ARGUMENT:
            return 0
        if req.first_index != self.refused_from:
            log.error(
                "%s: follower %s refuses the entries pushed from index %d as malformed (UNEXPECTED_ARGUMENT; its "
                "log says why: a member of an older version cannot store some kinds of entry): it stays behind",
                leader.self_id,
                peer_id,
                req.first_index,
            )
        self.refused_from = req.first_index
        return REFUSED_RETRY_MS

    def next_probe(self, resp: PushEntryResponse) -> int:
        """Where to COMPARE next, after `resp` (the last answer) did not settle it."""
        low, high = self.low, self.high
        if resp.code == ResponseCode.SUCCESS:  # matched: the follower's end (or ours) usually matches at once
            return high - 1
        hint = resp.x_index - 1 if resp.x_term != -1 and resp.x_index >= 0 else resp.end_index
        return hint if low < hint < high else (low + high) // 2
