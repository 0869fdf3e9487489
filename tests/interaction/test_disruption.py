"""Pre-Vote, CheckQuorum / leader stickiness and bounded terms on the deterministic
cluster (ManualClock, the in-memory network): a refused pre-vote changes no term, a
member cut off for many election timeouts rejoins without deposing the leader, an
isolated leader steps down within an election timeout, a stray higher-term vote is
refused by followers that hear their leader, terms above MAX_TERM and unknown member ids
are refused everywhere without changing anything, and leadership transfer still works."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from dledger.codes import DLedgerError, ResponseCode
from dledger.raft.member_state import MemberState, MemoryTermStore
from dledger.raft.messages import (
    MAX_TERM,
    HeartBeatRequest,
    HeartBeatResponse,
    LeadershipTransferRequest,
    ParseResult,
    PushEntryRequest,
    PushType,
    RequestOrResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from dledger.store.memory import MemoryLogStore
from tests.raft.cluster import Cluster

pytestmark = pytest.mark.interaction

ELECTION_TIMEOUT_MS = 300  # FAST: heartbeats every 100 ms, leak 3


def settled(seed: int = 1, **options: object) -> tuple[Cluster, str, list[str]]:
    c = Cluster(3, seed=seed, **options)
    leader = c.elect()
    f = c.append(b"a")
    c.run_until(f.done)
    c.run_until(lambda: c._all_follow() and all(c.core(n).member_state.committed_index == f.result() for n in c.ids))
    return c, leader, [n for n in c.ids if n != leader]


def ask(c: Cluster, src: str, dst: str, req: RequestOrResponse) -> RequestOrResponse:
    """Deliver `req` over the network while the cluster keeps running."""
    fut: Future[RequestOrResponse] = c.net.send(src, dst, req)
    c.run_until(fut.done, max_ms=1000)
    return fut.result()


def vote(candidate: str, to: str, term: int, c: Cluster, pre_vote: bool = False) -> VoteRequest:
    ms = c.core(candidate).member_state if candidate in c.ids else None
    return VoteRequest(
        group="g",
        local_id=candidate,
        remote_id=to,
        leader_id=candidate,
        term=term,
        ledger_end_index=ms.ledger_end_index if ms else 0,
        ledger_end_term=ms.ledger_end_term if ms else 1,
        pre_vote=pre_vote,
    )


def snapshot(c: Cluster) -> dict[str, tuple[int, str | None, int]]:
    """Term, vote and number of persists of every member."""
    return {
        n: (c.core(n).member_state.current_term, c.core(n).member_state.vote_for, len(c.members[n].term_store.history))
        for n in c.ids
    }


def test_a_refused_pre_vote_changes_no_term_anywhere() -> None:
    c, leader, (f, g) = settled()
    term = c.core(leader).member_state.current_term
    before = snapshot(c)
    for to in (g, leader):
        answer = ask(c, f, to, vote(f, to, term + 1, c, pre_vote=True))
        assert isinstance(answer, VoteResponse)
        assert answer.vote_result == VoteResult.REJECT_ALREADY_HAS_LEADER
    assert snapshot(c) == before
    assert c.leader() == leader


def test_a_granted_pre_vote_changes_nothing_either() -> None:
    # check_quorum off: no lease, so the pre-vote is granted; still nothing moves
    c, leader, (f, g) = settled(check_quorum=False)
    term = c.core(leader).member_state.current_term
    before = snapshot(c)
    answer = ask(c, f, g, vote(f, g, term + 1, c, pre_vote=True))
    assert isinstance(answer, VoteResponse) and answer.vote_result == VoteResult.ACCEPT
    assert snapshot(c) == before
    assert c.core(g).member_state.is_follower and c.leader() == leader


def test_a_member_cut_off_for_many_election_timeouts_rejoins_without_deposing_the_leader() -> None:
    c, leader, (f, _) = settled(seed=3)
    term = c.core(leader).member_state.current_term
    c.net.isolate(f)
    c.run_for(20 * ELECTION_TIMEOUT_MS)
    assert c.core(f).member_state.current_term == term  # pre-votes failed: its term stayed
    assert c.core(f).member_state.is_candidate
    c.net.heal()
    c.run_until(c._all_follow, max_ms=2000)
    c.run_for(4 * ELECTION_TIMEOUT_MS)
    assert c.leader() == leader
    assert {c.core(n).member_state.current_term for n in c.ids} == {term}


@pytest.mark.parametrize("check_quorum", [True, False])
def test_a_leader_cut_off_from_the_quorum_steps_down_within_an_election_timeout(check_quorum: bool) -> None:
    c, leader, _ = settled(seed=4, check_quorum=check_quorum)
    cut_at = c.now
    c.net.isolate(leader)
    c.run_until(lambda: not c.core(leader).member_state.is_leader, max_ms=5000)
    took = c.now - cut_at
    if check_quorum:
        assert took <= ELECTION_TIMEOUT_MS + c.step_ms
    else:  # DLedger's own rule: only at the end of a failed heartbeat round, later
        assert took > ELECTION_TIMEOUT_MS + c.step_ms


@pytest.mark.parametrize("check_quorum", [True, False])
def test_a_stray_higher_term_vote_is_refused_by_followers_that_hear_the_leader(check_quorum: bool) -> None:
    c, leader, (f, g) = settled(seed=5, check_quorum=check_quorum)
    term = c.core(leader).member_state.current_term
    stray = vote(f, g, term + 5, c)  # as if sent by f (forged, or f's own stale round)
    answer = ask(c, f, g, stray)
    assert isinstance(answer, VoteResponse)
    if check_quorum:
        assert answer.vote_result == VoteResult.REJECT_ALREADY_HAS_LEADER
        c.run_for(3 * ELECTION_TIMEOUT_MS)
        assert c.leader() == leader
        assert {c.core(n).member_state.current_term for n in c.ids} == {term}
    else:  # DLedger: g moves to the stray term at once, deposing the leader
        assert answer.vote_result == VoteResult.REJECT_TERM_NOT_READY
        assert c.core(g).member_state.current_term == term + 5


def _too_big_requests(c: Cluster, leader: str, to: str, term: int) -> list[RequestOrResponse]:
    base = {"group": "g", "local_id": leader, "remote_id": to, "leader_id": leader, "term": term}
    return [
        VoteRequest(**base, ledger_end_index=10, ledger_end_term=1),
        VoteRequest(**base, ledger_end_index=10, ledger_end_term=1, pre_vote=True),
        HeartBeatRequest(**base),
        PushEntryRequest(**base, type=PushType.COMMIT, prev_index=-1, commit_index=0),
        LeadershipTransferRequest(**base, transfer_id=to, transferee_id=leader),
    ]


@pytest.mark.parametrize("term", [MAX_TERM + 1, (1 << 63) - 1, 1 << 64])
def test_terms_above_max_term_are_refused_everywhere_and_never_stored(term: int) -> None:
    c, leader, followers = settled(seed=6)
    before = snapshot(c)
    for to in c.ids:
        sender = leader if to != leader else followers[0]
        for req in _too_big_requests(c, sender, to, term):
            answer = ask(c, sender, to, req)
            assert answer.code == ResponseCode.UNEXPECTED_ARGUMENT, (to, type(req).__name__)
    # an answer carrying such a term is dropped too (logged), never adopted
    hb = HeartBeatRequest(group="g", local_id=leader, remote_id=followers[0], leader_id=leader, term=before[leader][0])
    resp = HeartBeatResponse(group="g", local_id=followers[0], remote_id=leader, term=term)
    c.core(leader).on_response(followers[0], hb, resp, c.now)
    c.run_for(2 * ELECTION_TIMEOUT_MS)
    assert snapshot(c) == before
    assert c.leader() == leader


@pytest.mark.parametrize("stranger", ["n9", ""])
def test_unknown_member_ids_are_refused_and_change_nothing(stranger: str) -> None:
    c, leader, (f, _) = settled(seed=7)
    term = c.core(leader).member_state.current_term
    before = snapshot(c)
    base = {"group": "g", "local_id": stranger, "remote_id": f, "leader_id": stranger, "term": term + 3}
    for req in (
        VoteRequest(**base, ledger_end_index=99, ledger_end_term=term),
        HeartBeatRequest(**base),
        PushEntryRequest(**base, type=PushType.COMMIT, prev_index=-1, commit_index=0),
    ):
        answer = ask(c, leader, f, req)  # the network hop is the leader's; the ids are the stranger's
        assert answer.code == ResponseCode.UNKNOWN_MEMBER, type(req).__name__
    # a member's id as the leader, sent by a stranger, is refused as well
    forged = HeartBeatRequest(group="g", local_id=stranger, remote_id=f, leader_id=leader, term=term + 3)
    assert ask(c, leader, f, forged).code == ResponseCode.UNKNOWN_MEMBER
    c.run_for(2 * ELECTION_TIMEOUT_MS)
    assert snapshot(c) == before
    assert c.leader() == leader


def test_a_member_at_max_term_leads_it_but_never_stands_beyond_it() -> None:
    c = Cluster(1)
    c.members["n0"].term_store.term = MAX_TERM
    c.restart("n0")
    c.elect()
    ms = c.core("n0").member_state
    assert ms.current_term == MAX_TERM  # the highest term is still a term
    elector = c.core("n0").elector
    elector.change_role_to_candidate(MAX_TERM)
    elector.last_parse_result = ParseResult.WAIT_TO_VOTE_NEXT  # it would take the next term now
    c.run_for(2000)
    assert ms.current_term == MAX_TERM and ms.is_candidate  # refused (logged), nothing stored
    assert all(t <= MAX_TERM for t, _ in c.members["n0"].term_store.history)
    with pytest.raises(DLedgerError, match="MAX_TERM"):
        ms.next_term()
    c.close()


def test_a_stored_term_above_max_term_is_refused_on_start() -> None:
    c = Cluster(1)
    with pytest.raises(DLedgerError, match="outside"):
        MemberState(c.members["n0"].config, MemoryLogStore(), MemoryTermStore(term=MAX_TERM + 1))
    c.close()


def test_leadership_transfer_works_with_pre_vote_and_check_quorum_on() -> None:
    c, leader, (t, _) = settled(seed=8)
    assert c.core(t).config.pre_vote and c.core(t).config.check_quorum
    term = c.core(leader).member_state.current_term
    votes: list[VoteRequest] = []

    def spy(src: str, dst: str, msg: object) -> bool:
        if isinstance(msg, VoteRequest) and src == t:
            votes.append(msg)
        return False

    c.net.filter = spy
    fut = c.core(leader).leadership_transfer(t, c.now)
    c.run_until(fut.done, max_ms=3000)
    assert fut.result().code == ResponseCode.SUCCESS
    c.run_until(c._all_follow)
    assert c.leader() == t and c.core(t).member_state.current_term == term + 1
    # the transferee skipped pre-vote and named itself a transferee, so the members that
    # still heard the old leader voted for it
    assert votes and all(v.leadership_transfer and not v.pre_vote for v in votes)
