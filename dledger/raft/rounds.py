"""The records of one vote (or pre-vote) round and one heartbeat round of the
LeaderElector, and the `Outbound` requests the passes return."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from dledger.raft.member_state import MemberState
from dledger.raft.messages import (
    HeartBeatRequest,
    RequestOrResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)


@dataclass(slots=True)
class Outbound:
    """A request the shell must send to `target_id`."""

    target_id: str
    request: RequestOrResponse


Req = TypeVar("Req", VoteRequest, HeartBeatRequest)


@dataclass
class _Round(Generic[Req]):
    """What every round keeps: its term, its deadline, the request sent to each peer and
    who has answered."""

    term: int
    deadline_ms: int
    requests: dict[str, Req]
    answered: set[str] = field(default_factory=set)

    def take_answer(self, peer: str, request: Req) -> bool:
        """Whether this is `peer`'s first answer to the request this round sent it (it
        then counts as answered); an answer to another round's request, or a repeat, is
        not."""
        if self.requests.get(peer) is not request or peer in self.answered:
            return False
        self.answered.add(peer)
        return True

    @property
    def all_answered(self) -> bool:
        """Every peer asked has answered."""
        return len(self.answered) == len(self.requests)


@dataclass
class VoteRound(_Round[VoteRequest]):
    """One vote (or pre-vote) round of a candidate in `term`."""

    known_max_term: int = -1
    valid_num: int = 0
    accepted_num: int = 0
    not_ready_term_num: int = 0
    bigger_ledger_num: int = 0
    already_has_leader: bool = False
    pre_vote: bool = False
    probe: bool = False  # a pre-vote round asked for the members' log ends (vote_hold)
    ends: dict[str, tuple[int, int]] = field(default_factory=dict)  # (term, index) by member
    leaders: dict[str, str] = field(default_factory=dict)  # the leader each answer named ("": one before)

    def record(self, peer: str, response: VoteResponse) -> None:
        """Count one answer of `peer`."""
        result = response.vote_result
        if result != VoteResult.UNKNOWN and response.ok:
            self.ends[peer] = (response.ledger_end_term, response.ledger_end_index)
            if response.leader_id or response.leader_seen:
                self.leaders[peer] = response.leader_id or ""
        if result != VoteResult.UNKNOWN:
            self.valid_num += 1
        if result == VoteResult.ACCEPT:
            self.accepted_num += 1
        elif result == VoteResult.REJECT_ALREADY_HAS_LEADER:
            self.already_has_leader = True
        elif result in (VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, VoteResult.REJECT_EXPIRED_VOTE_TERM):
            self.known_max_term = max(self.known_max_term, response.term)
        elif result in (VoteResult.REJECT_EXPIRED_LEDGER_TERM, VoteResult.REJECT_SMALL_LEDGER_END_INDEX):
            self.bigger_ledger_num += 1
        elif result == VoteResult.REJECT_TERM_NOT_READY:
            self.not_ready_term_num += 1

    def done(self, member: MemberState) -> bool:
        """Whether the candidate stops waiting for answers.

        DLedger stops waiting on a quorum of ACCEPTs or when all answered. We also stop
        on a quorum of ACCEPT + TERM_NOT_READY: the revote then goes out at once, before
        the members that just moved to this term stand themselves (with a silent,
        partitioned member DLedger's rounds otherwise split the vote term after term).
        """
        if self.probe:
            return self.all_answered
        if self.not_ready_term_num and member.is_quorum(self.accepted_num + self.not_ready_term_num):
            return True
        return member.is_quorum(self.accepted_num) or self.all_answered


@dataclass
class HeartBeatRound(_Round[HeartBeatRequest]):
    """One heartbeat round of a leader in `term`."""

    succ_num: int = 1  # the leader itself
    started_ms: int = -1  # when it was sent (a quorum's answer renews the lease from there)
    not_ready_num: int = 0
    inconsistent_leader: bool = False
