"""ReadIndex and lease reads in the I/O-free core (dledger.raft.read_index), on the
deterministic cluster (ManualClock, in-memory network): one round for a burst, reads
arriving during a round wait for the next, a deposed leader never answers, a round
answered in an old term does not count, the own-term commit rule, the lease and its end."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from dledger.codes import DLedgerError, ResponseCode
from dledger.raft.messages import HeartBeatRequest, HeartBeatResponse, ReadIndexRequest, ReadIndexResponse
from tests.raft.cluster import Cluster

pytestmark = pytest.mark.interaction


def settled(n: int = 3, seed: int = 1, **cfg: object) -> tuple[Cluster, str]:
    """A cluster with a leader and one committed entry everywhere."""
    c = Cluster(n, seed=seed, **cfg)
    leader = c.elect()
    f = c.append(b"a")
    c.run_until(f.done)
    c.run_until(lambda: all(c.core(x).member_state.committed_index == f.result() for x in c.ids))
    return c, leader


def test_a_burst_of_reads_costs_one_round_and_later_reads_wait_for_the_next() -> None:
    c, leader = settled()
    core, driver = c.core(leader), c.members[leader].driver
    rounds = core.reads.rounds
    burst = [driver.read_index(c.now) for _ in range(20)]
    assert core.reads.rounds == rounds + 1  # the first read started the round, the rest joined nothing yet
    late = [driver.read_index(c.now) for _ in range(5)]  # during the round: the next one
    assert core.reads.rounds == rounds + 1 and not any(f.done() for f in burst + late)
    c.run_until(lambda: all(f.done() for f in burst))
    assert {f.result() for f in burst} == {core.member_state.committed_index}
    c.run_until(lambda: all(f.done() for f in late))
    assert core.reads.rounds == rounds + 2  # 25 reads, two rounds
    assert {f.result() for f in late} == {core.member_state.committed_index}


def test_the_read_index_covers_writes_committed_before_the_read() -> None:
    c, leader = settled()
    f = c.append(b"b", b"c")
    c.run_until(f.done)
    read = c.members[leader].driver.read_index(c.now)
    c.run_until(read.done)
    assert read.result() >= f.result()


def test_a_deposed_leader_never_answers() -> None:
    c, old = settled()
    c.net.isolate(old)
    reads = [c.members[old].driver.read_index(c.now) for _ in range(3)]
    others = [x for x in c.ids if x != old]
    c.run_until(lambda: any(c.core(x).member_state.is_leader for x in others))
    c.run_until(lambda: all(f.done() for f in reads), max_ms=10_000)
    for f in reads:
        with pytest.raises(DLedgerError) as err:
            f.result()
        assert err.value.code in (ResponseCode.NOT_LEADER, ResponseCode.TIMEOUT)
    new = next(x for x in others if c.core(x).member_state.is_leader)
    fresh = c.members[new].driver.read_index(c.now)
    c.run_until(fresh.done)
    assert fresh.result() >= 0


def test_a_follower_is_refused_and_a_stepped_down_leader_fails_its_reads() -> None:
    c, leader = settled()
    follower = next(x for x in c.ids if x != leader)
    with pytest.raises(DLedgerError) as err:
        c.members[follower].driver.read_index(c.now)
    assert err.value.code == ResponseCode.NOT_LEADER
    core = c.core(leader)
    read = core.read_index(c.now)  # queued, no round yet
    core.elector.change_role_to_candidate(core.member_state.current_term)
    with pytest.raises(DLedgerError) as err:
        read.result(0)
    assert err.value.code == ResponseCode.NOT_LEADER


def _round(c: Cluster, leader: str) -> tuple[Future[int], list[tuple[str, HeartBeatRequest]]]:
    core = c.core(leader)
    read = core.read_index(c.now)
    out = core.tick_reads(c.now)  # sent by hand: answers are fed below
    assert out and all(isinstance(o.request, HeartBeatRequest) for o in out)
    return read, [(o.target_id, o.request) for o in out]  # type: ignore[misc]


def _answer(request: HeartBeatRequest, term: int, code: ResponseCode = ResponseCode.SUCCESS) -> HeartBeatResponse:
    return HeartBeatResponse(group="g", local_id=request.remote_id, remote_id=request.local_id, term=term, code=code)


def test_an_answer_in_another_term_or_a_refusal_does_not_count() -> None:
    c, leader = settled()
    core = c.core(leader)
    term = core.member_state.current_term
    read, sent = _round(c, leader)
    (p1, r1), (p2, r2) = sent
    core.reads.on_heartbeat_response(p1, r1, _answer(r1, term - 1), c.now)  # an old term
    core.reads.on_heartbeat_response(p2, r2, _answer(r2, term, ResponseCode.INCONSISTENT_LEADER), c.now)
    assert not read.done()  # no quorum: the reads wait for another round
    core.reads.on_heartbeat_response(p1, r1, _answer(r1, term), c.now)  # a repeat answer: ignored
    assert not read.done()
    assert core.tick_reads(c.now) == []  # the failed round's reads start again after RETRY_ROUND_MS
    c.clock.advance(20)
    out = core.tick_reads(c.now)
    assert len(out) == 2
    (q1, s1) = out[0].target_id, out[0].request
    assert isinstance(s1, HeartBeatRequest)
    core.reads.on_heartbeat_response(q1, s1, _answer(s1, term), c.now)
    assert read.result(0) == core.member_state.committed_index


def test_the_own_term_commit_rule_holds_reads_until_the_log_of_the_election_is_committed() -> None:
    # without the new leader's NOOP, entries of an older term commit only with a new write
    c, old = settled(seed=3, enable_fast_advance_commit_index=False)
    others = [x for x in c.ids if x != old]
    for x in others:
        c.net.block(x, old, both_ways=False)  # the leader never hears the acks: b"x" stays uncommitted
    c.append(b"x")
    c.run_until(lambda: all(c.members[x].store.end_index >= 1 for x in c.ids))
    c.kill(old)
    assert all(c.core(x).member_state.committed_index < c.members[x].store.end_index for x in others)
    c.run_until(lambda: any(c.core(x).member_state.is_leader for x in others))
    new = next(x for x in others if c.core(x).member_state.is_leader)
    core = c.core(new)
    read = c.members[new].driver.read_index(c.now)
    assert core.lease_read_index(c.now) is None
    c.run_for(300)
    assert not read.done() and core.reads.rounds == 0  # the commit index is not known yet
    write = c.append(b"y", via=new)
    c.run_until(write.done)
    c.run_until(read.done)
    assert read.result() >= write.result()  # b"x" (index 1) is under it: committed with b"y"


def test_the_lease_holds_from_a_quorum_round_until_election_timeout_minus_the_drift() -> None:
    c, leader = settled(lease_drift_ms=100)  # election timeout 300 ms
    core = c.core(leader)
    c.run_for(200)  # elector heartbeats every 100 ms
    start = core.reads.lease_start_ms
    assert start is not None and core.lease_read_index(c.now) == core.member_state.committed_index
    c.net.isolate(leader)  # no more acknowledged rounds
    c.run_until(lambda: c.now >= start + 190)
    last = core.reads.lease_start_ms
    assert last is not None
    c.run_until(lambda: c.now >= last + 195)
    assert core.member_state.is_leader and core.lease_read_index(c.now) is not None
    c.run_until(lambda: c.now >= last + 200)
    assert core.lease_read_index(c.now) is None  # expired: reads take a round
    assert core.reads.lease_holds(c.now - 1)


def test_no_lease_without_check_quorum_during_a_transfer_or_after_a_role_change() -> None:
    c, leader = settled(check_quorum=False, lease_drift_ms=100)
    c.run_for(200)
    assert c.core(leader).lease_read_index(c.now) is None
    c, leader = settled(lease_drift_ms=400)  # as long as the election timeout (300 ms): never
    c.run_for(200)
    assert c.core(leader).lease_read_index(c.now) is None
    c, leader = settled(lease_drift_ms=100)
    c.run_for(200)
    core = c.core(leader)
    assert core.lease_read_index(c.now) is not None
    transferee = next(x for x in c.ids if x != leader)
    core.member_state.transferee = transferee
    assert core.lease_read_index(c.now) is None
    core.member_state.transferee = None
    assert core.lease_read_index(c.now) is None  # nor for a while after: its vote requests may still come
    wait = 300 + core.config.leadership_transfer_wait_timeout_ms
    c.run_for(wait - 10)
    assert core.lease_read_index(c.now) is None
    c.run_for(20)
    assert core.lease_read_index(c.now) is not None
    core.elector.change_role_to_candidate(core.member_state.current_term)
    assert core.reads.lease_start_ms is None and core.lease_read_index(c.now) is None


def test_a_group_of_one_reads_at_once() -> None:
    c, leader = settled(n=1)
    read = c.members[leader].driver.read_index(c.now)
    assert read.result(0) == c.core(leader).member_state.committed_index
    assert c.core(leader).lease_read_index(c.now) == read.result()


def test_a_follower_gets_its_read_index_from_the_leader() -> None:
    c, leader = settled()
    follower = next(x for x in c.ids if x != leader)
    term = c.core(follower).member_state.current_term
    request = ReadIndexRequest(group="g", local_id=follower, remote_id=leader, term=term)
    answer = c.members[leader].driver.deliver(request, c.now)
    c.run_until(answer.done)
    response = answer.result()
    assert isinstance(response, ReadIndexResponse) and response.ok
    assert response.index == c.core(leader).member_state.committed_index
    refused = c.members[follower].driver.deliver(
        ReadIndexRequest(group="g", local_id=leader, remote_id=follower, term=term), c.now
    )
    assert refused.result(0).code == ResponseCode.NOT_LEADER
    stranger = c.members[leader].driver.deliver(
        ReadIndexRequest(group="g", local_id="x9", remote_id=leader, term=term), c.now
    )
    assert stranger.result(0).code == ResponseCode.UNKNOWN_MEMBER
    later = c.members[leader].driver.deliver(  # the asker knows a later term: this leader was deposed
        ReadIndexRequest(group="g", local_id=follower, remote_id=leader, term=term + 5), c.now
    )
    assert later.result(0).code == ResponseCode.NOT_LEADER
