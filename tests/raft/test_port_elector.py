"""DLedger's election test scenarios (DLEDGER.md §8), ported to the in-memory network and
run on MemoryLogStore and MmapLogStore: LeaderElectorTest, protocol/VoteRequestTest and
protocol/HeartbeatRequestTest. Requests of the protocol tests travel over the network to
a member whose state the test set up; test names follow DLedger's."""

from __future__ import annotations

import pytest

from dledger.codes import ResponseCode
from dledger.raft.core import RaftCore
from dledger.raft.member_state import Role
from dledger.raft.messages import (
    HeartBeatRequest,
    ParseResult,
    RequestOrResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from tests.raft.cluster import Cluster

pytestmark = pytest.mark.interaction

HEARTBEAT_MS = 100  # the test clusters' heart_beat_time_interval_ms


def ask(c: Cluster, src: str, dst: str, req: RequestOrResponse) -> RequestOrResponse:
    """Send `req` over the network and deliver until answered; the members do not run."""
    fut = c.net.send(src, dst, req)
    while not fut.done():
        c.clock.advance(1)
        c.net.step()
    return fut.result()


def vote(c: Cluster, to: str, candidate: str, term: int, end_index: int, end_term: int, src: str = "n1") -> VoteResult:
    resp = ask(
        c,
        src,
        to,
        VoteRequest(
            group="g",
            local_id=src,
            remote_id=to,
            leader_id=candidate,
            term=term,
            ledger_end_index=end_index,
            ledger_end_term=end_term,
        ),
    )
    assert isinstance(resp, VoteResponse)
    return resp.vote_result


def heartbeat(c: Cluster, to: str, leader: str, term: int) -> ResponseCode:
    src = leader if leader in c.ids else "n1"
    resp = ask(c, src, to, HeartBeatRequest(group="g", local_id=src, remote_id=to, leader_id=leader, term=term))
    return ResponseCode(resp.code)


def fill(c: Cluster, node: str, terms: list[int]) -> None:
    store = c.members[node].store
    for t in terms:
        store.term = t
        store.append(b"x")


def revote(core: RaftCore, term: int) -> None:
    """DLedger's `testRevote(term)`: stand again at `term` right away."""
    core.elector.change_role_to_candidate(term)
    core.elector.last_parse_result = ParseResult.WAIT_TO_VOTE_NEXT
    core.elector.next_time_to_request_vote = -1


# -- LeaderElectorTest


def test_single_server(cluster_factory: type[Cluster]) -> None:
    """A single member leads within 1 s; after a restart it leads again in the same term."""
    c = cluster_factory(1)
    c.elect(max_ms=1000)
    term = c.core("n0").member_state.current_term
    f = c.append(b"x")
    c.run_until(f.done)
    c.kill("n0")
    c.restart("n0")
    c.elect(max_ms=1000)
    assert c.core("n0").member_state.current_term == term
    assert c.bodies("n0") == [b"x"]


def test_three_server(cluster_factory: type[Cluster]) -> None:
    """One leader, two followers; ten times a rotating member stands at max term + 1 and
    wins; appends succeed after each change."""
    # check_quorum off: the rotating member stands while the others still hear their
    # leader, which leader stickiness (check_quorum, on by default) refuses by design
    c = cluster_factory(3, seed=1, check_quorum=False)
    c.elect()
    for k in range(10):
        node = c.ids[k % 3]
        max_term = max(c.core(n).member_state.current_term for n in c.ids)
        revote(c.core(node), max_term + 1)
        c.run_until(lambda n=node: c.leader() == n and c._all_follow(), max_ms=3000)
        assert c.core(node).member_state.current_term == max_term + 1
        f = c.append(f"after-{k}".encode())
        c.run_until(f.done)
        # the standby follower gets it up to standby_push_ms later; a member missing it
        # could not win the next vote
        c.run_until(lambda k=k: all(len(c.bodies(n)) == k + 1 for n in c.ids))


def test_three_server_and_restart_follower(cluster_factory: type[Cluster]) -> None:
    """Each follower restarts and rejoins as a follower; leader and term do not change."""
    c = cluster_factory(3, seed=2)
    leader = c.elect()
    term = c.core(leader).member_state.current_term
    for follower in [n for n in c.ids if n != leader]:
        c.kill(follower)
        c.run_for(50)
        c.restart(follower)
        c.run_until(lambda f=follower: c.role(f) is Role.FOLLOWER, max_ms=3000)
        c.run_for(4 * HEARTBEAT_MS)
        assert c.leader() == leader and c.core(leader).member_state.current_term == term
        assert c.core(follower).member_state.leader_id == leader and c.core(follower).member_state.current_term == term


def test_three_server_and_shutdown_leader(cluster_factory: type[Cluster]) -> None:
    """The leader dies: the other two elect a leader within 5 heartbeat intervals."""
    c = cluster_factory(3, seed=3)
    old = c.elect()
    c.kill(old)
    start = c.now
    c.run_until(lambda: c.leader() not in (None, old), max_ms=5 * HEARTBEAT_MS)
    assert c.now - start <= 5 * HEARTBEAT_MS
    new = c.leader()
    assert new is not None and c.core(new).member_state.current_term > c.core(old).member_state.current_term


def test_three_server_and_shutdown_followers(cluster_factory: type[Cluster]) -> None:
    """Both followers die: the leader becomes CANDIDATE within 4 heartbeat intervals, in
    the same term."""
    c = cluster_factory(3, seed=4)
    leader = c.elect()
    term = c.core(leader).member_state.current_term
    for n in c.ids:
        if n != leader:
            c.kill(n)
    start = c.now
    # no quorum for more than 3 beats: noticed when the 4th round of heartbeats fails
    slack = 2 * c.step_ms
    c.run_until(lambda: c.role(leader) is Role.CANDIDATE, max_ms=4 * HEARTBEAT_MS + slack)
    assert 3 * HEARTBEAT_MS < c.now - start <= 4 * HEARTBEAT_MS + slack
    assert c.core(leader).member_state.current_term == term


def test_three_server_and_preferred_leader(cluster_factory: type[Cluster]) -> None:
    """Preferred n2 leads; it dies and another member leads; it comes back and leads again
    in a new term."""
    c = cluster_factory(3, seed=5, preferred_leader_ids="n2", check_preferred_leader_interval_ms=200)
    c.run_until(lambda: c.leader() == "n2" and c._all_follow(), max_ms=3000)
    f = c.append(b"x")
    c.run_until(f.done)
    c.kill("n2")
    c.run_until(lambda: c.leader() not in (None, "n2"))
    other = c.leader()
    assert other is not None
    term = c.core(other).member_state.current_term
    f = c.append(b"y")
    c.run_until(f.done)
    c.restart("n2")
    c.run_until(lambda: c.leader() == "n2" and c._all_follow(), max_ms=5000)
    assert c.core("n2").member_state.current_term > term
    assert c.bodies("n2") == [b"x", b"y"]


# -- protocol/VoteRequestTest


def test_vote_normal(cluster_factory: type[Cluster]) -> None:
    c = cluster_factory(3, seed=6)
    fill(c, "n0", [0, 0])  # ledger end 1, term 0; current term 0
    assert vote(c, "n0", "n9", 0, 1, 0) == VoteResult.REJECT_UNKNOWN_LEADER
    assert vote(c, "n0", "n0", 0, 1, 0) == VoteResult.REJECT_UNEXPECTED_LEADER
    assert vote(c, "n0", "n1", 0, 1, -1) == VoteResult.REJECT_EXPIRED_LEDGER_TERM
    assert vote(c, "n0", "n1", 0, 0, 0) == VoteResult.REJECT_SMALL_LEDGER_END_INDEX
    # a vote in a larger term: TERM_NOT_READY, then ACCEPT once the member moved there
    assert vote(c, "n0", "n1", 1, 1, 0) == VoteResult.REJECT_TERM_NOT_READY
    c.core("n0").tick_elector(c.now)
    assert c.core("n0").member_state.current_term == 1
    assert vote(c, "n0", "n1", 1, 1, 0) == VoteResult.ACCEPT
    assert vote(c, "n0", "n1", 1, 1, 0) == VoteResult.ACCEPT  # asked again: same answer
    assert vote(c, "n0", "n2", 0, 1, 0, src="n2") == VoteResult.REJECT_EXPIRED_VOTE_TERM
    assert vote(c, "n0", "n2", 1, 1, 0, src="n2") == VoteResult.REJECT_ALREADY_VOTED
    assert heartbeat(c, "n0", "n1", 1) == ResponseCode.SUCCESS
    assert vote(c, "n0", "n2", 1, 1, 0, src="n2") == VoteResult.REJECT_ALREADY_HAS_LEADER
    assert c.members["n0"].term_store.history == [(1, None), (1, "n1")]


def test_vote_term_small_than_ledger(cluster_factory: type[Cluster]) -> None:
    """The member's log holds term-5 entries but its term is 0 (its term file was lost):
    a vote at term 0 gets REJECT_TERM_SMALL_THAN_LEDGER; the member then wins an election
    in term 6 (never again in term 5, whose entries exist)."""
    c = cluster_factory(3, seed=7)
    fill(c, "n0", [5, 5])
    resp = ask(
        c,
        "n1",
        "n0",
        VoteRequest(
            group="g", local_id="n1", remote_id="n0", leader_id="n1", term=0, ledger_end_index=1, ledger_end_term=5
        ),
    )
    assert isinstance(resp, VoteResponse)
    assert resp.vote_result == VoteResult.REJECT_TERM_SMALL_THAN_LEDGER and resp.term == 5
    leader = c.elect()
    assert leader == "n0" and c.core("n0").member_state.current_term == 6


def test_vote_already_voted(cluster_factory: type[Cluster]) -> None:
    """The member voted for n2 in this term: n1 gets REJECT_ALREADY_VOTED; the group
    still recovers a leader."""
    c = cluster_factory(3, seed=8)
    c.core("n0").member_state.set_vote_for("n2")
    assert vote(c, "n0", "n1", 0, -1, -1) == VoteResult.REJECT_ALREADY_VOTED
    c.kill("n2")
    leader = c.elect()
    assert leader in ("n0", "n1") and c.core(leader).member_state.current_term >= 1


# -- protocol/HeartbeatRequestTest


def test_heartbeat(cluster_factory: type[Cluster]) -> None:
    c = cluster_factory(3, seed=9)
    leader = c.elect()
    follower, other = [n for n in c.ids if n != leader]
    term = c.core(follower).member_state.current_term
    assert heartbeat(c, follower, "n3", term) == ResponseCode.UNKNOWN_MEMBER
    assert heartbeat(c, follower, follower, term) == ResponseCode.UNEXPECTED_MEMBER
    assert heartbeat(c, follower, leader, term - 1) == ResponseCode.EXPIRED_TERM
    assert heartbeat(c, follower, other, term) == ResponseCode.INCONSISTENT_LEADER
    assert heartbeat(c, follower, leader, term) == ResponseCode.SUCCESS
    assert heartbeat(c, follower, other, term + 1) == ResponseCode.TERM_NOT_READY
    c.clock.advance(HEARTBEAT_MS)
    c.core(follower).tick_elector(c.now)  # the state maintainer moves to term + 1
    assert heartbeat(c, follower, other, term + 1) == ResponseCode.SUCCESS
    assert c.core(follower).member_state.leader_id == other and c.role(follower) is Role.FOLLOWER
