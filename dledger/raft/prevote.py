"""Pre-Vote, leader stickiness and term bounds: the decisions that keep a misbehaving or
partitioned member from disrupting a group (Raft thesis §9.6, etcd's PreVote and
CheckQuorum), without I/O.

- A pre-vote asks whether the addressee would vote for the candidate in `term`; the
  answer uses the VoteResponse results, and nothing (term, vote, role) changes for it.
- A member that heard from a live leader within the election timeout
  (`heart_beat_time_interval_ms * max_heart_beat_leak`) is in that leader's *lease*:
  with `check_quorum` on it refuses pre-votes and votes (REJECT_ALREADY_HAS_LEADER),
  except from the transferee of a leadership transfer.
- Terms above `MAX_TERM` are refused wherever they arrive.
"""

from __future__ import annotations

import logging

from dledger.config import DLedgerConfig
from dledger.raft.member_state import MemberState
from dledger.raft.messages import MAX_TERM, RequestOrResponse, VoteRequest, VoteResult

log = logging.getLogger(__name__)


def election_timeout_ms(config: DLedgerConfig) -> int:
    """How long a follower waits for its leader, and a leader for a quorum."""
    return config.heart_beat_time_interval_ms * config.max_heart_beat_leak


def term_out_of_range(msg: RequestOrResponse) -> bool:
    """True (and logged) when `msg` carries a term above MAX_TERM."""
    if msg.term <= MAX_TERM:
        return False
    log.warning(
        "refused %s from %r: term %d is above the highest term a member accepts (%d)",
        type(msg).__name__,
        msg.local_id,
        msg.term,
        MAX_TERM,
    )
    return True


def in_lease(config: DLedgerConfig, member: MemberState, last_leader_heart_beat_ms: int, now_ms: int) -> bool:
    """True while this member must refuse votes because a leader is alive: it leads
    itself, or follows a leader it heard within the election timeout (only with
    `check_quorum`)."""
    if not config.check_quorum:
        return False
    if member.is_leader:
        return True
    return (
        member.is_follower
        and member.leader_id is not None
        and now_ms - last_leader_heart_beat_ms <= election_timeout_ms(config)
    )


def answer_pre_vote(member: MemberState, req: VoteRequest, taking_leadership_rival: bool) -> VoteResult:
    """Whether this member would vote for `req`'s candidate in `req.term`, by the rules of
    a real vote (DLEDGER.md §3.5) but without changing anything: a pre-vote for a term above
    the current one is granted when the candidate's log is at least as up to date.

    Args:
        member: this member (read only).
        req: the pre-vote (addressing, membership, lease already checked).
        taking_leadership_rival: this member is a transferee taking leadership and the
            candidate's log is no better.
    """
    candidate = req.leader_id
    if req.ledger_end_term < member.ledger_end_term:
        return VoteResult.REJECT_EXPIRED_LEDGER_TERM
    if req.ledger_end_term == member.ledger_end_term and req.ledger_end_index < member.ledger_end_index:
        return VoteResult.REJECT_SMALL_LEDGER_END_INDEX
    if req.term < member.current_term:
        return VoteResult.REJECT_EXPIRED_VOTE_TERM
    if req.term == member.current_term:
        if member.leader_id is not None and member.leader_id != candidate:
            return VoteResult.REJECT_ALREADY_HAS_LEADER
        if member.vote_for is not None and member.vote_for != candidate:
            return VoteResult.REJECT_ALREADY_VOTED
    if req.term < member.ledger_end_term:
        return VoteResult.REJECT_TERM_SMALL_THAN_LEDGER
    if taking_leadership_rival:
        return VoteResult.REJECT_TAKING_LEADERSHIP
    return VoteResult.ACCEPT


def raises_own_term(member: MemberState) -> bool:
    """True when the member's next term would be one it raises on its own (a pre-vote
    must pass first), False when it adopts a higher term others already reached."""
    return member.known_max_term_in_group <= member.current_term


def at_max_term(member: MemberState) -> bool:
    """True (and logged) when the member's next term would pass MAX_TERM: it cannot
    stand (it still follows and votes)."""
    if member.peek_next_term() <= MAX_TERM:
        return False
    log.error("%s: cannot stand for election, its term %d is MAX_TERM", member.self_id, member.current_term)
    return True


def lost_quorum(config: DLedgerConfig, member: MemberState, last_quorum_ms: int, now_ms: int) -> bool:
    """CheckQuorum: True (and logged) when this leader has not heard from a quorum (itself
    included) for an election timeout, so another leader may exist already: it must step
    down. Always False with `check_quorum` off or in a group of one."""
    if not config.check_quorum or len(member.peer_map) < 2:
        return False
    if now_ms - last_quorum_ms <= election_timeout_ms(config):
        return False
    log.warning("%s: steps down, no quorum answered for an election timeout", member.self_id)
    return True
