"""Scripted 3-node cluster scenarios over the in-memory network and a ManualClock."""

from __future__ import annotations

import pytest

from dledger.codes import DLedgerError, ResponseCode
from dledger.raft.member_state import Role
from tests.raft.cluster import Cluster

pytestmark = pytest.mark.interaction


def test_election_of_exactly_one_leader() -> None:
    c = Cluster(3, seed=1)
    leader = c.elect()
    c.run_for(2000)  # stays stable: heartbeats keep the followers
    assert c.leader() == leader
    term = c.core(leader).member_state.current_term
    assert all(c.core(n).member_state.current_term == term for n in c.ids)
    assert sorted(c.role(n).value for n in c.ids) == ["FOLLOWER", "FOLLOWER", "LEADER"]
    assert c.leaders_by_term == {term: {leader}}


@pytest.mark.parametrize("seed", range(5))
def test_replication_and_commit_on_all_nodes(seed: int) -> None:
    c = Cluster(3, seed=seed)
    c.elect()
    futures = [c.append(f"body-{i}".encode()) for i in range(10)]
    futures.append(c.append(*[f"batch-{i}".encode() for i in range(5)]))
    c.run_until(lambda: all(f.done() for f in futures))
    indexes = [f.result() for f in futures]
    assert indexes == sorted(indexes) and len(set(indexes)) == len(indexes)
    c.run_until(lambda: all(c.core(n).member_state.committed_index == indexes[-1] for n in c.ids))
    expected = [f"body-{i}".encode() for i in range(10)] + [f"batch-{i}".encode() for i in range(5)]
    for n in c.ids:
        assert c.bodies(n) == expected
        assert c.members[n].store.end_index == indexes[-1]


def test_leader_kill_elects_a_new_leader_that_keeps_committed_entries() -> None:
    c = Cluster(3, seed=2)
    old = c.elect()
    f = c.append(b"a", b"b")
    c.run_until(f.done)
    c.kill(old)
    c.run_until(lambda: c.leader() not in (None, old), max_ms=5 * 100 * 3 + 2000)
    new = c.leader()
    assert new is not None and new != old
    assert c.core(new).member_state.current_term > c.core(old).member_state.current_term
    f2 = c.append(b"c")
    c.run_until(f2.done)
    assert c.bodies(new) == [b"a", b"b", b"c"]
    # the old leader comes back as a follower and catches up
    c.restart(old)
    c.run_until(lambda: c.core(old).member_state.committed_index == c.core(new).member_state.committed_index)
    assert c.role(old) is Role.FOLLOWER
    assert c.bodies(old) == [b"a", b"b", b"c"]


def test_pending_requests_time_out_without_quorum_and_pending_full() -> None:
    c = Cluster(3, seed=3, max_pending_requests_num=3)
    leader = c.elect()
    for n in c.ids:
        if n != leader:
            c.net.isolate(n)
    futures = [c.append(b"x") for _ in range(3)]
    with pytest.raises(DLedgerError) as full:
        c.append(b"y")
    assert full.value.code == ResponseCode.LEADER_PENDING_FULL
    c.run_for(1100)
    for f in futures:
        exc = f.exception()
        assert isinstance(exc, DLedgerError)
        assert exc.code in (ResponseCode.WAIT_QUORUM_ACK_TIMEOUT, ResponseCode.TERM_CHANGED)


def test_batched_client_request_counts_once_against_the_pending_limit() -> None:
    c = Cluster(3, seed=4, max_pending_requests_num=2)
    c.elect()
    f1 = c.append(*[b"e"] * 500)
    f2 = c.append(*[b"e"] * 500)
    c.run_until(lambda: f1.done() and f2.done())
    assert f2.result() == f1.result() + 500


def test_not_leader_rejects_appends() -> None:
    c = Cluster(3, seed=5)
    leader = c.elect()
    follower = next(n for n in c.ids if n != leader)
    with pytest.raises(DLedgerError) as err:
        c.append(b"x", via=follower)
    assert err.value.code == ResponseCode.NOT_LEADER


def test_follower_with_conflicting_uncommitted_tail_is_truncated() -> None:
    c = Cluster(3, seed=6)
    old = c.elect()
    f = c.append(b"committed")
    c.run_until(f.done)
    c.run_for(200)
    # the old leader is cut off and appends entries nobody else receives
    c.net.isolate(old)
    lost = [c.append(b"lost-1", via=old), c.append(b"lost-2", via=old)]
    c.run_until(lambda: c.leader() not in (None, old))
    new = c.leader()
    assert new is not None
    f2 = c.append(b"new-1")
    f3 = c.append(b"new-2", b"new-3")
    c.run_until(lambda: f2.done() and f3.done())
    assert c.members[old].store.end_index >= 2  # still holds its uncommitted tail
    c.net.heal()
    c.run_until(
        lambda: (
            c.core(old).member_state.committed_index == c.core(new).member_state.committed_index
            and c.role(old) is Role.FOLLOWER
        )
    )
    for n in c.ids:
        assert c.bodies(n) == [b"committed", b"new-1", b"new-2", b"new-3"]
        assert c.bodies(n, committed_only=False) == [b"committed", b"new-1", b"new-2", b"new-3"]
    for fut in lost:
        assert fut.done() and isinstance(fut.exception(), DLedgerError)


@pytest.mark.parametrize("seed", range(6))
def test_replication_over_a_lossy_duplicating_reordering_network(seed: int) -> None:
    c = Cluster(3, seed=seed)
    c.net.drop_rate, c.net.duplicate_rate, c.net.reorder = 0.05, 0.05, True
    c.net.max_delay_ms = 20
    acked: list[tuple[int, bytes]] = []
    for round_no in range(8):
        c.run_until(lambda: c.leader() is not None)
        leader = c.leader()
        assert leader is not None
        batch = [f"r{round_no}-{i}".encode() for i in range(3)]
        try:
            fut = c.append(*batch)
        except DLedgerError:
            continue
        c.run_for(300)
        if fut.done() and fut.exception() is None:
            last = fut.result()
            acked.extend((last - 2 + i, body) for i, body in enumerate(batch))
    c.net.drop_rate = c.net.duplicate_rate = 0.0
    leader = c.elect()
    fin = c.append(b"final")
    c.run_until(fin.done)
    c.run_until(lambda: all(c.core(n).member_state.committed_index == fin.result() for n in c.ids))
    assert acked, "no append was acknowledged"
    for n in c.ids:
        store = c.members[n].store
        for index, body in acked:  # every acknowledged append is at its index everywhere
            assert store.get_body(index) == body
    assert c.net.stats.dropped > 0 and c.net.stats.duplicated > 0


def test_push_missed_every_third_push_still_commits_everything() -> None:
    """AppendAndPushTest.testPushMissed: a follower loses every third push."""
    c = Cluster(3, seed=8)
    leader = c.elect()
    victim = next(n for n in c.ids if n != leader)
    seen = [0]

    def drop_third(src: str, dst: str, msg: object) -> bool:
        from dledger.raft.messages import PushEntryRequest

        if dst == victim and isinstance(msg, PushEntryRequest):
            seen[0] += 1
            return seen[0] % 3 == 0
        return False

    c.net.filter = drop_third
    futures = [c.append(f"m{i}".encode()) for i in range(10)]
    c.run_until(lambda: all(f.done() for f in futures))
    assert all(f.exception() is None for f in futures)
    c.run_until(lambda: c.core(victim).member_state.committed_index == futures[-1].result())
    assert c.bodies(victim) == [f"m{i}".encode() for i in range(10)]


@pytest.mark.parametrize("seed", range(3))
def test_a_round_trip_longer_than_the_heartbeat_interval_keeps_the_leader(seed: int) -> None:
    """Links of 60-70 ms each way (a round trip of 120-140 ms against 100 ms heartbeats,
    below half the 300 ms election timeout): every follower answers every heartbeat, only
    after the next one is due. The leader stepped down again and again (CheckQuorum saw no
    answer, since a heartbeat round ended at the next heartbeat) and failed its pending
    appends; now it leads throughout and commits."""
    cluster = Cluster(seed=seed, max_push_timeout_ms=1000, follower_push_timeout_ms=1000)  # pushes wait for slow links
    leader = cluster.elect()
    term = cluster.core(leader).member_state.current_term
    cluster.net.min_delay_ms, cluster.net.max_delay_ms = 60, 70
    changes: list[Role] = []
    cluster.core(leader).elector.listeners.append(lambda _term, role: changes.append(role))
    written = [cluster.append(b"slow-%d" % k) for k in range(5)]
    cluster.run_for(3_000)
    assert changes == [] and cluster.leader() == leader
    assert cluster.core(leader).member_state.current_term == term
    assert [f.result() for f in written] == sorted(f.result() for f in written)
