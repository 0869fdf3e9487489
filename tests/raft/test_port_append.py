"""DLedger's replication test scenarios (DLEDGER.md §8), ported to the in-memory network
and run on MemoryLogStore and MmapLogStore: AppendAndGetTest, AppendAndPushTest,
BatchPushTest (the same scenarios with one entry per push vs batched pushes) and
CommitIndexTest. Test names follow DLedger's (testPushMissed -> test_push_missed)."""

from __future__ import annotations

import pytest

from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import HEADER_SIZE
from dledger.raft.messages import PushEntryRequest, PushEntryResponse, PushType
from tests.raft.cluster import Cluster

pytestmark = pytest.mark.interaction

ONE_BY_ONE = {"max_push_batch_bytes": 1}  # every push carries exactly one entry (DLedger's default)
BATCH = {"max_push_batch_bytes": 300}  # DLedger's BatchPushTest: maxBatchPushSize = 300


@pytest.fixture(params=["one_by_one", "batch"])
def push_mode(request: pytest.FixtureRequest) -> dict[str, int]:
    """AppendAndPushTest (one entry per push) and BatchPushTest (batched pushes)."""
    return ONE_BY_ONE if request.param == "one_by_one" else BATCH


def followers(c: Cluster, leader: str) -> list[str]:
    return [n for n in c.ids if n != leader]


def code(fut: object) -> ResponseCode:
    exc = fut.exception()  # type: ignore[attr-defined]
    assert isinstance(exc, DLedgerError), exc
    return exc.code


# -- AppendAndGetTest


def test_single_server(cluster_factory: type[Cluster]) -> None:
    """testSingleServerInMemory / InFile: 100-byte bodies get index i and pos i * 148."""
    c = cluster_factory(1)
    leader = c.elect(max_ms=1000)
    bodies = [bytes([i]) * 100 for i in range(10)]
    futures = [c.append(b) for b in bodies]
    c.run_until(lambda: all(f.done() for f in futures))
    assert [f.result() for f in futures] == list(range(10))
    store = c.members[leader].store
    for i, body in enumerate(bodies):
        entry = store.get(i)
        assert (entry.index, entry.pos, entry.body) == (i, i * (HEADER_SIZE + 100), body)
        assert c.core(leader).get_committed(i) == body


def test_three_server(cluster_factory: type[Cluster]) -> None:
    """testThreeServerInMemory / InFile: every member ends at 9 with the same bodies."""
    c = cluster_factory(3, seed=1)
    c.elect()
    for i in range(10):
        f = c.append(f"body-{i}".encode())
        c.run_until(f.done)
        assert f.result() == i
    c.run_until(lambda: all(c.core(n).member_state.committed_index == 9 for n in c.ids), max_ms=1000)
    for n in c.ids:
        assert c.members[n].store.end_index == 9
        assert [c.core(n).get_committed(i) for i in range(10)] == [f"body-{i}".encode() for i in range(10)]


def test_three_server_in_file_with_async_requests(cluster_factory: type[Cluster]) -> None:
    """10 appends without waiting: all done within 1 s, index i, same position everywhere."""
    c = cluster_factory(3, seed=2)
    leader = c.elect()
    futures = [c.append(bytes(128)) for _ in range(10)]
    start = c.now
    c.run_until(lambda: all(f.done() for f in futures), max_ms=1000)
    assert c.now - start < 1000
    assert [f.result() for f in futures] == list(range(10))
    c.run_until(lambda: all(c.members[n].store.end_index == 9 for n in c.ids))
    for i in range(10):
        positions = {c.members[n].store.get(i).pos for n in c.ids}
        assert positions == {c.members[leader].store.get(i).pos} == {i * (HEADER_SIZE + 128)}


# -- AppendAndPushTest / BatchPushTest


def test_push_committed_index(cluster_factory: type[Cluster], push_mode: dict[str, int]) -> None:
    """The leader appends 10 while its followers are down (nothing commits); a follower
    starts and both commit 9."""
    c = cluster_factory(3, seed=3, **push_mode)
    leader = c.elect()
    f1, f2 = followers(c, leader)
    c.kill(f1)
    c.kill(f2)
    futures = [c.append(f"m{i}".encode()) for i in range(10)]
    c.run_for(50)
    assert c.core(leader).member_state.committed_index == -1 and not any(f.done() for f in futures)
    c.restart(f1)
    c.run_until(lambda: all(f.done() for f in futures), max_ms=3000)
    assert [f.result() for f in futures] == list(range(10))
    c.run_until(lambda: c.core(f1).member_state.committed_index == 9, max_ms=3000)
    assert c.core(leader).member_state.committed_index == 9


def test_push_network_offline(cluster_factory: type[Cluster], push_mode: dict[str, int]) -> None:
    """No follower: appends end WAIT_QUORUM_ACK_TIMEOUT; beyond max pending, LEADER_PENDING_FULL."""
    c = cluster_factory(3, seed=4, max_wait_ack_time_ms=200, max_pending_requests_num=5, **push_mode)
    leader = c.elect()
    for f in followers(c, leader):
        c.kill(f)
    futures = [c.append(b"x") for _ in range(5)]
    with pytest.raises(DLedgerError) as full:
        c.append(b"y")
    assert full.value.code == ResponseCode.LEADER_PENDING_FULL
    c.run_until(lambda: all(f.done() for f in futures), max_ms=1000)
    assert {code(f) for f in futures} == {ResponseCode.WAIT_QUORUM_ACK_TIMEOUT}
    assert c.core(leader).member_state.committed_index == -1


def test_push_network_not_stable(cluster_factory: type[Cluster], push_mode: dict[str, int]) -> None:
    """An append waits until a follower is back; the follower stops and restarts; both
    members end at index 1."""
    c = cluster_factory(3, seed=5, **push_mode)
    leader = c.elect()
    f1, f2 = followers(c, leader)
    c.kill(f2)
    c.kill(f1)
    first = c.append(b"first")
    c.run_for(50)
    assert not first.done()
    c.restart(f1)
    c.run_until(first.done)
    assert first.result() == 0
    c.kill(f1)
    second = c.append(b"second")
    c.run_for(50)
    assert not second.done()
    c.restart(f1)
    c.run_until(second.done)
    assert second.result() == 1
    c.run_until(lambda: c.core(f1).member_state.committed_index == 1)
    for n in (leader, f1):
        store = c.members[n].store
        assert (store.begin_index, store.end_index) == (0, 1)
    assert c.bodies(f1) == [b"first", b"second"]


def test_push_missed(cluster_factory: type[Cluster], push_mode: dict[str, int]) -> None:
    """A follower loses every third push: all 10 appends still succeed, it ends at 9."""
    c = cluster_factory(3, seed=8, **push_mode)
    leader = c.elect()
    victim, other = followers(c, leader)
    c.kill(other)  # the victim is needed for every commit
    seen = [0]

    def drop_third(src: str, dst: str, msg: object) -> bool:
        if dst == victim and isinstance(msg, PushEntryRequest):
            seen[0] += 1
            return seen[0] % 3 == 0
        return False

    c.net.filter = drop_third
    futures = [c.append(f"m{i}".encode()) for i in range(10)]
    c.run_until(lambda: all(f.done() for f in futures), max_ms=5000)
    assert [f.result() for f in futures] == list(range(10))
    c.run_until(lambda: c.core(victim).member_state.committed_index == 9)
    assert c.bodies(victim) == [f"m{i}".encode() for i in range(10)]
    assert seen[0] >= 3


def test_push_truncate(cluster_factory: type[Cluster], push_mode: dict[str, int]) -> None:
    """n0 leads and writes 10 entries, n1 gets only the first 5; leadership moves to n1 and
    n0's uncommitted tail is truncated to end 4; new appends start at 5."""
    c = cluster_factory(3, seed=9, preferred_leader_ids="n0", check_preferred_leader_interval_ms=200, **push_mode)
    c.run_until(lambda: c.leader() == "n0" and c._all_follow(), max_ms=5000)
    c.run_for(300)
    c.kill("n2")
    got = [0]

    def first_five(src: str, dst: str, msg: object) -> bool:
        if isinstance(msg, PushEntryRequest) and msg.type is PushType.APPEND and dst == "n1":
            return msg.last_index > 4  # n1 receives entries 0..4 only
        return isinstance(msg, PushEntryResponse) and src == "n1"  # and none of its acks

    c.net.filter = first_five
    futures = [c.append(f"old-{i}".encode(), via="n0") for i in range(10)]
    c.run_until(lambda: c.members["n1"].store.end_index == 4)
    got[0] = c.members["n0"].store.end_index
    assert got[0] == 9 and c.core("n0").member_state.committed_index == -1
    # n0 goes away; n1 (longer log than n2) becomes leader with n2
    c.kill("n0")
    c.net.filter = None
    c.restart("n2")
    c.run_until(lambda: c.leader() == "n1", max_ms=5000)
    new = c.append(b"new", via="n1")
    c.run_until(new.done)
    # n1's NOOP (fast advance) or this append is index 5: the old tail 5..9 is gone
    c.restart("n0")
    n0_store, new_term = c.members["n0"].store, c.core("n1").member_state.current_term
    c.run_until(lambda: n0_store.end_index >= 5 and n0_store.term_at(5) == new_term)
    c.run_until(lambda: c.core("n0").member_state.committed_index == c.core("n1").member_state.committed_index)
    assert c.bodies("n0")[:5] == [f"old-{i}".encode() for i in range(5)]
    assert c.bodies("n0")[5:] == [b"new"]
    assert not any(f.done() and f.exception() is None for f in futures[5:])


def test_batch_append(cluster_factory: type[Cluster], push_mode: dict[str, int]) -> None:
    """testBatchAppend: one request of 10 bodies of 128 * (i + 1) bytes: positions
    48 i + 128 i (i + 1) / 2, last index 9, the follower ends at 9."""
    c = cluster_factory(3, seed=10, **push_mode)
    leader = c.elect()
    f = c.append(*[bytes(128 * (i + 1)) for i in range(10)])
    c.run_until(f.done)
    assert f.result() == 9
    c.run_until(lambda: all(c.members[n].store.end_index == 9 for n in c.ids))
    for n in c.ids:
        store = c.members[n].store
        assert [store.get(i).pos for i in range(10)] == [48 * i + 128 * i * (i + 1) // 2 for i in range(10)]
    assert c.bodies(leader)[9] == bytes(1280)


# -- CommitIndexTest


@pytest.mark.parametrize("fast_advance", [False, True], ids=["disable", "enable"])
def test_fast_advance_commit_index(cluster_factory: type[Cluster], fast_advance: bool) -> None:
    """testDisableFastAdvanceCommitIndex / testEnableFastAdvanceCommitIndex: entry 0 is
    replicated but its acks are lost (WAIT_QUORUM_ACK_TIMEOUT, nothing committed); the
    leader dies; the new leader must not commit the old-term entry by itself; with fast
    advance its NOOP commits it (index 1), without it only the next client append does;
    the restarted preferred n0 leads again with the same commit index."""
    c = cluster_factory(
        3,
        seed=11,
        preferred_leader_ids="n0",
        check_preferred_leader_interval_ms=200,
        enable_fast_advance_commit_index=fast_advance,
    )
    c.run_until(lambda: c.leader() == "n0" and c._all_follow(), max_ms=5000)
    c.run_for(300)  # the dispatchers matched their followers
    c.net.filter = lambda src, dst, msg: isinstance(msg, PushEntryResponse)
    f0 = c.append(b"zero")
    c.run_until(f0.done, max_ms=2000)
    assert code(f0) == ResponseCode.WAIT_QUORUM_ACK_TIMEOUT
    assert all(c.members[n].store.end_index == 0 and c.core(n).member_state.committed_index == -1 for n in c.ids)
    c.net.filter = None
    c.kill("n0")
    c.run_until(lambda: c.leader() not in (None, "n0"))
    new = c.leader()
    assert new is not None
    c.run_for(2000)
    if fast_advance:
        assert c.members[new].store.get(1).is_noop
        assert c.core(new).member_state.committed_index == 1
    else:
        assert c.core(new).member_state.committed_index == -1  # a majority holds entry 0, still not committed
    f = c.append(b"next")
    c.run_until(f.done)
    expected = 2 if fast_advance else 1
    assert f.result() == expected and c.core(new).member_state.committed_index == expected
    c.restart("n0")
    c.run_until(lambda: c.leader() == "n0", max_ms=5000)
    c.run_until(lambda: c.core("n0").member_state.committed_index == c.members["n0"].store.end_index)
    assert c.core("n0").member_state.committed_index >= expected
    assert c.bodies("n0") == [b"zero", b"next"]
