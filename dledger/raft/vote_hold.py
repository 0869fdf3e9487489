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

**A founding member asks first.** A member started with an empty store and `new`
(`--initial-cluster-state`, the default) is either founding its group or a member that
lost its whole directory, its identity too, and was started as if the group were new.
The second must rejoin, or its lost vote and log could elect a member without what it
had acknowledged (two leaders in one term, acknowledged entries truncated). So it holds
too (`kind="founding"`, persisted by the `rejoin` marker) and asks every member for its
log end, as above, until either:

- an answer shows that the group exists: a member with an entry in its log, or one that
  follows, leads, or has followed or led at any time before (`leader_seen`, which every
  member persists when it first follows or leads, or gets a leader's heartbeat of a
  higher term, which it follows only a heartbeat later, before it answers that leader; a
  member rejoining after a lost disk says so too: it was told its group exists). The
  hold becomes a rejoin hold (and stays one across restarts), which a leader ends once
  it brought the member up to date; or
- a quorum, itself included, answered and none of them shows that: the group is being
  founded, and the member votes and stands. Founding members answer each other so while
  they hold (their logs are empty, they have seen no leader).

A founding member asked by a peer (for a vote or for its log end) asks every member at
once (`on_asked`), not at its next round: a member started before its peers were up
would otherwise learn only at its next round, 0.3-1 s later, that the others have
founded the group and elected a leader meanwhile, and hold as a rejoining member until
that leader brought it up to date: a leader lost in that window left no quorum.

Why that is safe: an entry E was committed by a leader with a quorum Q1 that acknowledged
it, each of which had seen that leader first. A founding quorum Q2 answered that none of
its members has seen a leader. Q1 and Q2 share a member, and only a member that lost its
disk can be in both: the asking member, if it acknowledged E before it lost its disk;
then the rest of Q2 never heard any leader (in a group of three: the member cut off
since before the first leader's first heartbeat), or lost its disk too. That case
remains: a member that lost its disk and members that never heard a leader can found
the group again (started with `existing`, the lost member never does).

A term above 0 is not evidence: founding members raise their terms while they elect the
first leader. Like a rejoin hold, a founding hold also ends by catching up with a leader
it follows.

**A founding's own terms.** Should that case happen, the group has two histories: the
members of the new founding, and a member coming back with entries it committed in the
old one. Raft tells logs apart by the term at an index only, so a new history that
reached the same term numbers (DLedger's first leader leads term 0) could look like the
old one to it: it would take the new entries after its own, a log of neither history.
So a member whose founding hold ends stands first in a random term in
1..FOUNDING_TERMS (`founding_term`), not in term 0 (unless it has heard of another
founding member's term: it stands in that founding's terms then). Two foundings then hold different
terms at their entries (but with a chance of one in FOUNDING_TERMS), and the member of
the old history finds the new leader's log contradicting its committed entries: it
refuses it (LOG_DIVERGED, `dledger.raft.entry_handler`) instead of following it.

When a majority went down together and one of them never comes back, the members that
are back may all be holding, without every member's answer; the unclean hold therefore
ends after `max_ms` in any case, accepting what async flush can lose in that case (see
docs/SIMULATION.md).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Literal

log = logging.getLogger(__name__)

LogEnd = tuple[int, int]
"""(term of the last entry, index of the last entry): Raft's log order."""

FOUNDING_TERMS = 1 << 20
"""A founding member stands first in a random term up to this (see the module docstring):
far below `MAX_TERM`, and within the step above its own term a member accepts from a
peer (`dledger.transport.validate.MAX_TERM_STEP`, 2^32)."""


def founding_term(rng: random.Random) -> int:
    """The term a member whose founding hold ended stands in first, when it has not heard of
    another founding member's yet (its term is still 0). It stands there after a pre-vote
    like any term it raises on its own, so a leader another founding member has just
    become is not disrupted."""
    return rng.randint(1, FOUNDING_TERMS)


@dataclass(slots=True)
class VoteHold:
    """The hold of one member; pure bookkeeping, driven by the elector.

    Args:
        active: whether the member holds its vote now.
        max_ms: the longest an unclean hold lasts, counted from the first `release`
            call (a rejoin hold has no limit).
        kind: "unclean" (an unclean restart with async flush), "rejoin" (a lost or
            repaired disk) or "founding" (an empty store told `new`: it asks first).
        min_index: a rejoin also waits until the committed index reaches this (the
            committed index the member had recorded before it lost data; -1: none).
    """

    active: bool
    max_ms: int
    kind: Literal["unclean", "rejoin", "founding"] = "unclean"
    min_index: int = -1
    deadline_ms: int | None = None
    leader: tuple[str, int] | None = None
    target_index: int = -1
    expired: bool = False
    floor: LogEnd | None = None
    released: bool = False
    asked: bool = False  # a peer asked since this member's last log-end round (`on_asked`)

    @classmethod
    def at_start(cls, group: bool, max_ms: int, unclean: bool, rejoin_index: int | None, founding: bool) -> VoteHold:
        """The hold a member starts with: a rejoin or founding hold when it lost data
        (`rejoin_index` not None), an unclean hold after an unclean restart (`max_ms` > 0),
        none in a group of one (nobody to catch up with)."""
        if rejoin_index is not None and group:
            kind: Literal["rejoin", "founding"] = "founding" if founding else "rejoin"
            return cls(active=True, max_ms=0, kind=kind, min_index=rejoin_index)
        return cls(active=unclean and group and max_ms > 0, max_ms=max_ms)

    @property
    def pending(self) -> bool:
        """Whether the hold, or a floor that replaced it, still applies."""
        return self.active or self.floor is not None

    @property
    def state(self) -> str:
        """What `dledger status` shows: "" (no hold), "unclean", "rejoin", "founding" or
        "floor"."""
        if self.active:
            return self.kind
        return "floor" if self.floor is not None else ""

    @property
    def wants_log_ends(self) -> bool:
        """Whether a round asking every member for its log end could end the hold."""
        return self.active and self.kind != "rejoin"

    def on_asked(self) -> None:
        """A peer asked for this member's vote or log end. A founding member then asks
        every member for its log end at once rather than at its next round: the asker is up
        and may be founding the group with the others right now; answers collected before
        a leader's first heartbeat found the group with them, answers after it make this
        member rejoin (and hold its vote until a leader brought it up to date)."""
        self.asked = True

    @property
    def probe_due(self) -> bool:
        """Whether a founding member should ask every member for its log end now, not at
        its next round (see `on_asked`)."""
        return self.asked and self.active and self.kind == "founding"

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

    def on_founding_answers(
        self, self_id: str, ends: dict[str, LogEnd], leaders: dict[str, str], quorum: bool
    ) -> Literal["exists", "founded", ""]:
        """The answers of a founding member's log-end round (see the module docstring):
        `ends` by member (itself included), the leader each answer named ("": none now,
        but it has followed or been one), and whether a quorum answered. Returns
        "exists" (the hold became a rejoin hold), "founded" (it ended) or "" (not
        decided: too few answers)."""
        if not (self.active and self.kind == "founding"):
            return ""
        entries = [f"{peer} holds entries up to {index}" for peer, (_, index) in sorted(ends.items()) if index >= 0]
        evidence = entries + [
            f"{peer} knows leader {leader}" if leader else f"{peer} has followed a leader or is rejoining"
            for peer, leader in sorted(leaders.items())
        ]
        if evidence:
            self.kind = "rejoin"
            # entries: it lost its disk or joins late; a leader alone: the others founded first
            log.log(
                logging.WARNING if entries else logging.INFO,
                "%s: started with an empty store to found its group, but the group exists (%s): joins it, and "
                "votes once a leader brought it up to date (if this is its first start and no leader can come back, "
                "stop it, delete its `rejoin` file and start it again)",
                self_id,
                "; ".join(evidence),
            )
            return "exists"
        if not quorum:
            return ""
        self.active = False
        log.info("%s: %d members answered, none with an entry or a leader: founds the group", self_id, len(ends))
        return "founded"

    def release(
        self, now_ms: int, committed_index: int, leader_id: str | None, term: int, leading: bool = False
    ) -> bool:
        """Whether the hold is still on, ending it (and any floor) when the member caught
        up with the leader it follows, or when `max_ms` passed (unclean hold only: a floor
        whose member went away for good must not stall the group either). A floor also
        ends when the member leads (`leading`): a quorum elected it, its log at least the
        floor. `released` becomes True when it ends by catching up or leading."""
        if not self.pending:
            return False
        if self.deadline_ms is None:
            self.deadline_ms = now_ms + self.max_ms
        caught_up = (leading and not self.active) or (
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
