"""The vote hold after an unclean restart (async flush; simulation finding R1): a member
that may have lost entries it acknowledged neither votes nor stands until it caught up
with a leader, and it still follows the terms the others reach."""

from __future__ import annotations

import random

import pytest

from dledger.config import DLedgerConfig, member_store_config
from dledger.raft.core import RaftCore
from dledger.raft.elector import LeaderElector
from dledger.raft.member_state import MemberState, MemoryTermStore
from dledger.raft.messages import HeartBeatRequest, VoteRequest, VoteResult
from dledger.raft.vote_hold import VoteHold
from dledger.store.memory import MemoryLogStore

pytestmark = pytest.mark.unit

PEERS3 = "n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913"
HOLD_MS = 5_000


def restarted(entries: int = 2, *, unclean: bool = True, **cfg: object) -> tuple[LeaderElector, MemberState]:
    """n0 after a restart, holding `entries` entries of term 1, none committed."""
    config = DLedgerConfig(group="g", self_id="n0", peers=PEERS3, max_vote_hold_ms=HOLD_MS, **cfg)  # type: ignore[arg-type]
    store = MemoryLogStore()
    store.term = 1
    for _ in range(entries):
        store.append(b"x")
    ms = MemberState(config, store, MemoryTermStore(term=1))
    return LeaderElector(config, ms, random.Random(1), unclean_restart=unclean), ms


def vote(candidate: str, term: int, end_index: int = 10, end_term: int = 1) -> VoteRequest:
    return VoteRequest(
        group="g",
        local_id=candidate,
        remote_id="n0",
        leader_id=candidate,
        term=term,
        ledger_end_index=end_index,
        ledger_end_term=end_term,
    )


def heartbeat(leader: str, term: int, end_index: int) -> HeartBeatRequest:
    return HeartBeatRequest(
        group="g", local_id=leader, remote_id="n0", leader_id=leader, term=term, ledger_end_index=end_index
    )


# -- VoteHold alone


def test_an_inactive_hold_never_holds() -> None:
    hold = VoteHold(active=False, max_ms=10)
    assert not hold.release(0, -1, None, 0)
    hold.on_leader("n1", 1, 5)
    assert hold.leader is None and not hold.release(1, -1, "n1", 1)


def test_the_hold_ends_when_the_commit_reaches_the_first_announced_end() -> None:
    hold = VoteHold(active=True, max_ms=1_000)
    assert hold.release(0, 9, None, 1)  # no leader heard yet
    hold.on_leader("n1", 2, 7)
    hold.on_leader("n1", 2, 50)  # later beats of the same leader do not move the target
    assert hold.target_index == 7
    assert hold.release(10, 6, "n1", 2)
    assert hold.release(10, 7, "n2", 2)  # caught up with someone else's leader: not this one
    assert not hold.release(10, 7, "n1", 2)
    assert not hold.active and not hold.expired


def test_a_new_leader_sets_a_new_target() -> None:
    hold = VoteHold(active=True, max_ms=1_000)
    hold.on_leader("n1", 2, 7)
    hold.on_leader("n2", 3, 12)
    assert (hold.leader, hold.target_index) == (("n2", 3), 12)
    assert hold.release(0, 11, "n2", 3)
    assert not hold.release(0, 12, "n2", 3)


def test_the_hold_times_out_from_its_first_check() -> None:
    hold = VoteHold(active=True, max_ms=1_000)
    assert hold.release(500, -1, None, 1)
    assert hold.release(1_499, -1, None, 1)
    assert not hold.release(1_500, -1, None, 1)
    assert hold.expired


# -- in the elector


def test_a_clean_restart_votes_at_once() -> None:
    elector, _ = restarted(unclean=False)
    assert elector.handle_vote(vote("n1", 1), 0).vote_result == VoteResult.ACCEPT


def test_a_member_that_restarted_uncleanly_holds_its_vote_until_it_caught_up() -> None:
    # check_quorum off: n0 votes for n2 10 ms after n1's heartbeat, which leader
    # stickiness (check_quorum, on by default) refuses by design
    elector, ms = restarted(check_quorum=False)
    elector.change_role_to_candidate(2)
    ms.next_term()
    assert ms.current_term == 2
    answer = elector.handle_vote(vote("n1", 2), 0)
    assert answer.vote_result == VoteResult.REJECT_HOLDING_AFTER_RESTART
    assert ms.vote_for is None  # nothing persisted for a held vote

    # a leader of term 2 whose log ends at 3; n0 holds 0..1, commits up to 1, then to 3
    elector.handle_heartbeat(heartbeat("n1", 2, 3), 10)
    assert ms.is_follower and ms.leader_id == "n1"
    ms.update_committed_index(1)
    assert elector.holding_vote(20)
    for _ in range(2):
        ms.store.append(b"y")
    ms.update_committed_index(3)
    assert not elector.holding_vote(30)
    assert (
        elector.handle_vote(vote("n2", 3, end_index=3, end_term=2), 40).vote_result == VoteResult.REJECT_TERM_NOT_READY
    )
    elector.tick(41)  # moves to term 3
    assert elector.handle_vote(vote("n2", 3, end_index=3, end_term=2), 50).vote_result == VoteResult.ACCEPT


def test_a_holding_candidate_neither_stands_nor_stays_behind_in_term() -> None:
    elector, ms = restarted()
    elector.change_role_to_candidate(1)
    for now in range(0, 3_000, 50):
        out = elector.tick(now)  # only asks for the members' log ends (unanswered here), never votes
        assert all(isinstance(o.request, VoteRequest) and o.request.pre_vote for o in out)
    assert ms.current_term == 1
    # another candidate's term reaches it: it moves there (so the other can win) but does not vote
    assert elector.handle_vote(vote("n1", 4), 3_000).vote_result == VoteResult.REJECT_TERM_NOT_READY
    assert elector.tick(3_001) == []
    assert ms.current_term == 4
    assert elector.handle_vote(vote("n1", 4), 3_002).vote_result == VoteResult.REJECT_HOLDING_AFTER_RESTART


def test_the_hold_ends_after_its_maximum_and_the_member_stands_again() -> None:
    elector, _ = restarted()
    elector.change_role_to_candidate(1)
    for now in range(0, HOLD_MS, 10):  # probes nobody answers
        assert all(isinstance(o.request, VoteRequest) and o.request.pre_vote for o in elector.tick(now))
    requests = []
    for now in range(HOLD_MS, HOLD_MS + 3_000, 10):
        requests += elector.tick(now)
    assert elector.vote_hold.expired
    votes = [o for o in requests if isinstance(o.request, VoteRequest) and not o.request.pre_vote]
    assert {o.target_id for o in votes} == {"n1", "n2"}


def test_the_leader_announces_its_ledger_end_in_heartbeats() -> None:
    elector, ms = restarted(entries=4, unclean=False)
    elector.member_state.set_vote_for("n0")
    elector.change_role_to_leader(ms.current_term)
    beats = elector.tick(0)
    assert {o.target_id for o in beats} == {"n1", "n2"}
    assert all(isinstance(o.request, HeartBeatRequest) and o.request.ledger_end_index == 3 for o in beats)


@pytest.mark.parametrize(
    ("flush_mode", "peers", "holds"),
    # `unclean_restart`: a run in async mode ended uncleanly (the abort marker says which
    # mode it ran in); this run's own mode does not matter
    [("async", PEERS3, True), ("sync", PEERS3, True), ("async", "n0-127.0.0.1:20911", False)],
)
def test_members_of_a_group_hold_after_an_async_runs_unclean_end(flush_mode: str, peers: str, holds: bool) -> None:
    config = DLedgerConfig(group="g", self_id="n0", peers=peers, store=member_store_config(flush_mode=flush_mode))
    core = RaftCore(config, MemoryLogStore(), MemoryTermStore(), random.Random(1), unclean_restart=True)
    assert core.elector.vote_hold.active is holds
