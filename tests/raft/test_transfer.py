"""Leadership transfer and the preferred leader (DLEDGER.md §4): the leader's checks with
DLedger's codes, appends rejected while transferring, the transferee's catch-up wait,
take-over in the next term with the short vote interval, REJECT_TAKING_LEADERSHIP,
timeouts, and the preferred leader taking over."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from dledger.codes import DLedgerError, ResponseCode
from dledger.raft.member_state import Role
from dledger.raft.messages import (
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    PushEntryRequest,
    RequestOrResponse,
    VoteRequest,
    VoteResult,
)
from tests.raft.cluster import Cluster

pytestmark = pytest.mark.interaction


def settled(seed: int = 1, **cfg: object) -> tuple[Cluster, str, list[str]]:
    """A 3-node cluster with a leader, two committed entries on every member."""
    c = Cluster(3, seed=seed, **cfg)
    leader = c.elect()
    f = c.append(b"a", b"b")
    c.run_until(f.done)
    c.run_until(lambda: all(c.core(n).member_state.committed_index == f.result() for n in c.ids))
    return c, leader, [n for n in c.ids if n != leader]


def code_of(fut: Future[LeadershipTransferResponse] | Future[RequestOrResponse]) -> ResponseCode:
    assert fut.done()
    return ResponseCode(fut.result().code)


def transfer_request(
    c: Cluster, to: str, transferee: str, term: int, transfer_id: str | None = None
) -> LeadershipTransferRequest:
    return LeadershipTransferRequest(
        group="g",
        local_id="admin",
        remote_id=to,
        term=term,
        transfer_id=to if transfer_id is None else transfer_id,
        transferee_id=transferee,
    )


def test_transfer_succeeds_and_appends_are_rejected_meanwhile() -> None:
    c, leader, (t, other) = settled()
    term = c.core(leader).member_state.current_term
    fut = c.core(leader).leadership_transfer(t, c.now)
    assert not fut.done()
    with pytest.raises(DLedgerError) as err:
        c.append(b"refused")
    assert err.value.code == ResponseCode.LEADER_TRANSFERRING
    c.run_until(fut.done, max_ms=2000)
    resp = fut.result()
    assert resp.code == ResponseCode.SUCCESS and resp.leader_id == t and resp.term == term + 1
    # the transferee leads the next term; the others follow it
    c.run_until(lambda: c.role(leader) is Role.FOLLOWER and c.role(other) is Role.FOLLOWER)
    assert c.leader() == t and c.core(t).member_state.current_term == term + 1
    assert c.core(leader).member_state.leader_id == t and c.core(leader).member_state.transferee is None
    assert c.core(t).member_state.term_to_take_leadership == -1  # the take-over is over
    f = c.append(b"c")
    c.run_until(f.done)
    c.run_until(lambda: all(c.bodies(n) == [b"a", b"b", b"c"] for n in c.ids))


def test_transfer_through_a_request_addressed_to_the_leader() -> None:
    c, leader, (t, _) = settled(seed=2)
    term = c.core(leader).member_state.current_term
    fut = c.core(leader).handle_request(transfer_request(c, leader, t, term), c.now)
    c.run_until(fut.done, max_ms=2000)
    assert code_of(fut) == ResponseCode.SUCCESS
    assert c.leader() == t


def test_leader_side_rejections() -> None:
    c, leader, (t, other) = settled(seed=3)
    core = c.core(leader)
    term = core.member_state.current_term
    assert code_of(core.leadership_transfer("n9", c.now)) == ResponseCode.UNKNOWN_MEMBER
    stale = core.handle_request(transfer_request(c, leader, t, term - 1), c.now)
    assert code_of(stale) == ResponseCode.INCONSISTENT_TERM
    assert code_of(c.core(other).leadership_transfer(t, c.now)) == ResponseCode.NOT_LEADER
    misrouted = c.core(other).handle_request(transfer_request(c, other, t, term, transfer_id=leader), c.now)
    assert code_of(misrouted) == ResponseCode.NOT_LEADER  # neither the leader nor the transferee
    wrong_addr = core.handle_request(transfer_request(c, other, t, term, transfer_id=leader), c.now)
    assert code_of(wrong_addr) == ResponseCode.UNKNOWN_MEMBER  # addressed to someone else
    assert code_of(core.leadership_transfer(leader, c.now)) == ResponseCode.SUCCESS  # already the leader
    # none of these started a transfer
    assert core.member_state.transferee is None
    c.append(b"accepted")


def test_fall_behind_too_much() -> None:
    c, leader, (t, _) = settled(seed=4, max_leadership_transfer_wait_index=10)
    c.net.isolate(t)
    f = c.append(*[b"x"] * 10)
    c.run_until(f.done)
    fut = c.core(leader).leadership_transfer(t, c.now)
    assert code_of(fut) == ResponseCode.FALL_BEHIND_TOO_MUCH
    assert c.core(leader).member_state.transferee is None
    # 9 entries behind is close enough: it waits for the transferee to catch up
    c.net.heal()
    c.run_until(lambda: c.core(leader).transfer.fall_behind(t) == 0)
    c.net.isolate(t)
    f2 = c.append(*[b"y"] * 9)
    c.run_until(f2.done)
    fut = c.core(leader).leadership_transfer(t, c.now)
    assert not fut.done()
    c.net.heal()
    c.run_until(fut.done, max_ms=2000)
    assert code_of(fut) == ResponseCode.SUCCESS and c.leader() == t
    assert c.bodies(t) == [b"a", b"b", *[b"x"] * 10, *[b"y"] * 9]


def test_a_second_transfer_is_rejected_while_one_runs() -> None:
    c, leader, (t, other) = settled(seed=5)
    c.net.isolate(t)  # keeps the first transfer waiting
    c.append(b"c")
    first = c.core(leader).leadership_transfer(t, c.now)
    second = c.core(leader).leadership_transfer(other, c.now)
    assert code_of(second) == ResponseCode.LEADER_TRANSFERRING
    assert not first.done()


def test_transferee_that_does_not_catch_up_fails_and_appends_resume() -> None:
    c, leader, (t, _) = settled(seed=6, leadership_transfer_wait_timeout_ms=400)
    c.net.isolate(t)
    c.append(b"c")  # t will never have it
    start = c.now
    fut = c.core(leader).leadership_transfer(t, c.now)
    c.run_until(fut.done, max_ms=1000)
    assert code_of(fut) == ResponseCode.TAKE_LEADERSHIP_FAILED
    assert 400 <= c.now - start < 400 + 2 * c.step_ms
    assert c.leader() == leader and c.core(leader).member_state.transferee is None
    f = c.append(b"d")  # accepted again
    c.run_until(f.done)


def test_lost_forwarded_request_ends_the_transfer() -> None:
    c, leader, (t, _) = settled(seed=7)

    def drop_transfer(src: str, dst: str, msg: object) -> bool:
        return isinstance(msg, LeadershipTransferRequest) and dst == t

    c.net.filter = drop_transfer
    fut = c.core(leader).leadership_transfer(t, c.now)
    c.run_until(fut.done, max_ms=2000)
    assert code_of(fut) == ResponseCode.NETWORK_ERROR
    assert c.leader() == leader and c.core(leader).member_state.transferee is None


def test_transferee_checks_the_leader_and_waits_for_its_log() -> None:
    c, leader, (t, other) = settled(seed=8, leadership_transfer_wait_timeout_ms=300)
    term = c.core(t).member_state.current_term
    end = c.members[t].store.end_index
    # the transfer must come from the leader it follows
    bad = c.core(t).handle_request(
        LeadershipTransferRequest(
            group="g", local_id=other, remote_id=t, term=term, transfer_id=other, transferee_id=t
        ),
        c.now,
    )
    assert code_of(bad) == ResponseCode.INCONSISTENT_LEADER
    # an index it never reaches: TAKE_LEADERSHIP_FAILED after the wait timeout, still a follower
    start = c.now
    never = c.core(t).handle_request(
        LeadershipTransferRequest(
            group="g",
            local_id=leader,
            remote_id=t,
            term=term,
            transfer_id=leader,
            transferee_id=t,
            take_leadership_ledger_index=end + 5,
        ),
        c.now,
    )
    c.run_until(never.done, max_ms=1000)
    assert code_of(never) == ResponseCode.TAKE_LEADERSHIP_FAILED and c.now - start >= 300
    assert c.role(t) is Role.FOLLOWER and c.core(t).member_state.current_term == term


def test_transferee_takes_leadership_with_the_short_vote_interval_and_rejects_rivals() -> None:
    # normal vote interval 300..1000 ms, taking leadership 30..100 ms
    c, leader, (t, other) = settled(seed=9, min_vote_interval_ms=300, max_vote_interval_ms=1000)
    term = c.core(t).member_state.current_term
    # the transferee's vote requests get lost: it stays candidate of term + 1
    c.net.filter = lambda src, dst, msg: isinstance(msg, VoteRequest) and src == t
    fut = c.core(leader).leadership_transfer(t, c.now)
    c.run_until(lambda: c.core(t).member_state.current_term == term + 1)
    core = c.core(t)
    assert core.member_state.is_taking_leadership() and core.member_state.term_to_take_leadership == term + 1
    waits = [core.elector.next_vote_time(0) for _ in range(50)]
    assert min(waits) >= 30 and max(waits) < 100
    # a rival with the same log in the same term gets REJECT_TAKING_LEADERSHIP
    ms = core.member_state
    rival = VoteRequest(
        group="g",
        local_id=other,
        remote_id=t,
        leader_id=other,
        term=ms.current_term,
        ledger_end_index=ms.ledger_end_index,
        ledger_end_term=ms.ledger_end_term,
    )
    resp = core.handle_request(rival, c.now).result()
    assert getattr(resp, "vote_result", None) == VoteResult.REJECT_TAKING_LEADERSHIP
    c.net.filter = None
    c.run_until(fut.done, max_ms=3000)
    assert code_of(fut) == ResponseCode.SUCCESS and c.leader() == t


def test_short_take_leadership_interval_is_used_only_while_taking_leadership() -> None:
    c = Cluster(3, seed=10, min_vote_interval_ms=300, max_vote_interval_ms=1000)
    core = c.core("n0")
    assert all(300 <= core.elector.next_vote_time(0) < 1000 for _ in range(50))
    core.member_state.term_to_take_leadership = core.member_state.current_term
    assert all(30 <= core.elector.next_vote_time(0) < 100 for _ in range(50))


def test_transferee_that_loses_the_election_answers_take_leadership_failed() -> None:
    c, leader, (t, _) = settled(seed=11, leadership_transfer_wait_timeout_ms=300)
    c.net.filter = lambda src, dst, msg: isinstance(msg, VoteRequest) and src == t
    fut = c.core(leader).leadership_transfer(t, c.now)
    c.run_until(fut.done, max_ms=3000)
    assert code_of(fut) in (ResponseCode.TAKE_LEADERSHIP_FAILED, ResponseCode.EXPIRED_TERM)
    assert c.core(t).member_state.term_to_take_leadership == -1
    c.net.filter = None
    c.elect()


def test_preferred_leader_takes_over() -> None:
    c = Cluster(3, seed=12, preferred_leader_ids="n2", check_preferred_leader_interval_ms=200)
    first = c.elect()
    assert first != "n2"  # (with this seed) so the preferred member has to take over
    first_term = c.core(first).member_state.current_term
    c.run_until(lambda: c.leader() == "n2" and c._all_follow(), max_ms=3000)
    assert c.core("n2").member_state.current_term == first_term + 1
    f = c.append(b"x")
    c.run_until(f.done)
    c.run_for(1000)
    assert c.leader() == "n2"  # and it stays


def test_lagging_preferred_leader_is_not_handed_leadership() -> None:
    """DLedger #85: a live preferred member far behind must not be made to take over."""
    c = Cluster(
        3,
        seed=13,
        preferred_leader_ids="n2",
        check_preferred_leader_interval_ms=200,
        max_leadership_transfer_wait_index=5,
    )
    c.net.isolate("n2")
    c.run_until(lambda: c.leader() is not None)
    leader = c.leader()
    assert leader is not None and leader != "n2"
    c.net.heal()
    # n2 is live (heartbeats pass) but gets no entries: 20 behind
    c.net.filter = lambda src, dst, msg: isinstance(msg, PushEntryRequest) and dst == "n2"
    f = c.append(*[b"x"] * 20)
    c.run_until(f.done)
    started_behind: list[int] = []

    def watch() -> bool:
        core = c.core(leader)
        if core.member_state.transferee == "n2":
            started_behind.append(core.transfer.fall_behind("n2"))
        return c.leader() == "n2"

    for _ in range(200):  # 1 s: five preferred-leader checks
        c.step()
        assert not watch()
    assert c.core(leader).transfer.fall_behind("n2") >= 20 and started_behind == []
    assert c.core(leader).elector.peers_live_table["n2"]
    # once it gets the entries it catches up, and then takes over
    c.net.filter = None
    c.run_until(watch, max_ms=3000)
    assert c.bodies("n2")[-20:] == [b"x"] * 20
    assert started_behind and max(started_behind) < 5


def test_transfer_fails_if_the_leader_steps_down_before_forwarding() -> None:
    c, leader, (t, _) = settled(seed=14)
    c.net.isolate(t)
    c.append(b"c")
    fut = c.core(leader).leadership_transfer(t, c.now)
    c.net.isolate(leader)  # loses its quorum, steps down after the heartbeat leak
    c.run_until(fut.done, max_ms=5000)
    assert code_of(fut) == ResponseCode.NOT_LEADER
    assert c.core(leader).member_state.transferee is None


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (ResponseCode.NETWORK_ERROR, "transfer to n2 failed (n2 did not answer the leader)"),
        (ResponseCode.FALL_BEHIND_TOO_MUCH, "transfer to n2 failed"),
    ],
)
def test_a_failed_transfer_says_whom_it_was_to_and_why(code: ResponseCode, said: str) -> None:
    from dledger.raft.messages import LeadershipTransferResponse
    from dledger.raft.transfer import new_term_of

    answer: Future[LeadershipTransferResponse] = Future()
    term = new_term_of(answer, "n2")
    answer.set_result(LeadershipTransferResponse(group="g", code=code, term=3))
    with pytest.raises(DLedgerError) as info:
        term.result()
    assert info.value.code == code and info.value.message == said
