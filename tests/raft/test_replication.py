"""Replication pieces of issue 3: batched, pipelined pushes (one entry when idle, many
under load, in-flight bounds), resend after max_push_timeout_ms, the catch-up-only quota,
the follower's REPEATED_PUSH and abnormal-future check, pending limits by bytes, the
retention floor, and the split service passes the threaded node drives."""

from __future__ import annotations

import random
from concurrent.futures import Future
from pathlib import Path

import pytest

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig, member_store_config
from dledger.raft.core import RaftCore
from dledger.raft.dispatcher import COALESCE_BYTES, DispatchState, EntryDispatcher
from dledger.raft.elector import LeaderElector
from dledger.raft.entry_handler import MAX_CONTROL_QUEUE, EntryHandler
from dledger.raft.member_state import MemberState, MemoryTermStore
from dledger.raft.messages import HeartBeatRequest, PushEntryRequest, PushEntryResponse, PushType, RequestOrResponse
from dledger.raft.quorum_ack import QuorumAckChecker
from dledger.store.memory import MemoryLogStore
from dledger.store.mmap_store import MmapLogStore
from tests.raft.cluster import Cluster, Member

pytestmark = pytest.mark.interaction

PEERS = "n0-h:1;n1-h:2;n2-h:3"


class PushLog:
    """Records the APPEND pushes a network carries (a filter that drops nothing)."""

    def __init__(self, c: Cluster, drop_responses_from: str | None = None) -> None:
        self.appends: list[tuple[str, PushEntryRequest]] = []
        self.drop_from = drop_responses_from
        c.net.filter = self

    def __call__(self, src: str, dst: str, msg: RequestOrResponse) -> bool:
        if isinstance(msg, PushEntryRequest) and msg.type is PushType.APPEND:
            self.appends.append((dst, msg))
        return isinstance(msg, PushEntryResponse) and src == self.drop_from

    def counts(self, dst: str) -> list[int]:
        return [m.count for d, m in self.appends if d == dst]


def elected(seed: int = 0, **cfg: object) -> tuple[Cluster, str, list[str]]:
    c = Cluster(3, seed=seed, **cfg)
    leader = c.elect()
    c.run_for(300)  # the NOOP is replicated, dispatchers are in APPEND
    return c, leader, [n for n in c.ids if n != leader]


# -- batching and pipelining


def test_push_carries_one_entry_when_idle_and_many_under_load() -> None:
    c, leader, (f1, f2) = elected(seed=1)
    log = PushLog(c)
    # idle: one client append every 50 ms -> every push is that one entry
    for i in range(10):
        fut = c.append(f"idle-{i}".encode())
        c.run_until(fut.done)
        c.run_for(50)
    assert log.counts(f1) == [1] * 10 and log.counts(f2) == [1] * 10
    log.appends.clear()
    # load: 1,000 single-entry client requests arrive between two dispatcher passes
    futures = [c.append(f"load-{i}".encode()) for i in range(1000)]
    c.run_until(lambda: all(f.done() for f in futures))
    assert log.counts(f1) == [1000]  # one push carries the whole backlog
    assert log.counts(f2) == []  # the standby's (small) backlog waits
    c.run_for(c.core(leader).config.standby_push_ms + 2 * c.step_ms)
    assert log.counts(f2) == [1000]  # ... and then goes as one push too
    assert [f.result() for f in futures] == list(range(futures[0].result(), futures[0].result() + 1000))


def test_batch_size_is_bounded_by_max_push_batch_bytes_and_pushes_are_pipelined() -> None:
    # 100-byte bodies are 148-byte entries: at most 10 per 1,500-byte push
    c, _leader, (f1, _f2) = elected(seed=2, max_push_batch_bytes=1500)
    log = PushLog(c)
    fut = c.append(*[bytes(100)] * 95)
    c.step()  # one dispatcher pass
    counts = log.counts(f1)
    assert counts == [10] * 9 + [5]  # ten pushes in flight at once, none waited for an answer
    c.run_until(fut.done)


def test_in_flight_pushes_per_peer_are_bounded() -> None:
    c, leader, (f1, _f2) = elected(seed=3, max_push_batch_bytes=200, max_push_in_flight_per_peer=4)
    log = PushLog(c, drop_responses_from=f1)  # f1's answers are lost: nothing is acknowledged
    dispatcher = c.core(leader).dispatchers[f1]
    c.append(*[bytes(100)] * 50)
    for _ in range(15):  # 75 ms < max_push_timeout_ms: no resend yet
        c.step()
        assert len(dispatcher.pending) <= 4
    assert log.counts(f1) == [1, 1, 1, 1]
    c.run_for(100)  # the oldest push timed out: it alone is sent again
    sent = [m.first_index for d, m in log.appends if d == f1]
    assert len(sent) == 5 and sent[4] == sent[0]
    assert len(dispatcher.pending) == 4


def test_in_flight_bytes_per_peer_are_bounded() -> None:
    c, leader, (f1, _f2) = elected(seed=4, max_push_batch_bytes=1000, max_push_in_flight_bytes=2500)
    log = PushLog(c, drop_responses_from=f1)
    c.append(*[bytes(100)] * 60)
    c.step()
    # 6 entries (888 bytes) per push; sending stops once 2,500 bytes are in flight
    assert log.counts(f1) == [6, 6, 6]
    assert c.core(leader).dispatchers[f1].pending_bytes == 3 * 6 * 148


def test_lost_push_is_resent_after_max_push_timeout() -> None:
    c, leader, (f1, _f2) = elected(seed=5)
    dropped: list[PushEntryRequest] = []

    def drop_first_append(src: str, dst: str, msg: RequestOrResponse) -> bool:
        if isinstance(msg, PushEntryRequest) and msg.type is PushType.APPEND and dst == f1 and not dropped:
            dropped.append(msg)
            return True
        return False

    c.net.filter = drop_first_append
    fut = c.append(b"x")
    index = c.members[leader].store.end_index
    start = c.now
    c.run_until(lambda: c.members[f1].store.end_index == index)
    assert c.now - start >= c.core(leader).config.max_push_timeout_ms
    assert dropped and dropped[0].first_index == index
    c.run_until(fut.done)
    assert fut.result() == index


# -- coalescing: a small backlog waits for the push in flight


def acked(req: PushEntryRequest) -> PushEntryResponse:
    """The follower's SUCCESS answer to APPEND `req`."""
    return PushEntryResponse(
        group="g", local_id="n1", remote_id="n0", term=req.term, index=req.first_index, end_index=req.last_index
    )


def test_small_backlog_waits_for_the_push_in_flight_and_then_goes_as_one_push() -> None:
    ms, d = leader_with_log(1, max_push_timeout_ms=60_000)
    store = ms.store
    (first,) = d.tick(0)
    assert (first.first_index, first.count) == (0, 1)
    for k in range(20):  # twenty single-entry client requests while `first` is in flight
        store.append(b"c%d" % k)
        assert d.tick(1 + k) == []
    d.on_response(first, acked(first), 30)
    (second,) = d.tick(30)
    assert (second.first_index, second.count) == (1, 20) and d.match_index == 0
    store.append(b"late")
    assert d.tick(31) == []
    d.on_response(second, acked(second), 40)
    (third,) = d.tick(40)
    assert (third.first_index, third.count) == (21, 1)


def test_large_backlog_is_pushed_next_to_the_push_in_flight() -> None:
    # pipelining stays for big backlogs: a full batch, or COALESCE_BYTES not pushed yet
    ms, d = leader_with_log(1, max_push_batch_bytes=1500, max_push_timeout_ms=60_000)
    (first,) = d.tick(0)
    ms.store.append_many([bytes(100)] * 25)  # 25 x 148 bytes: two full pushes and a tail
    full = d.tick(1)
    assert [r.count for r in full] == [10, 10]  # the small tail waits for them all
    assert len(d.pending) == 3
    for k, req in enumerate([first, *full]):
        assert d.tick(10 + k) == []
        d.on_response(req, acked(req), 10 + k)
    assert [r.count for r in d.tick(20)] == [5]
    ms2, big = leader_with_log(1, max_push_timeout_ms=60_000)
    (first,) = big.tick(0)
    ms2.store.append_many([bytes(1000)] * (COALESCE_BYTES // 1000))
    assert [r.count for r in big.tick(1)] == [COALESCE_BYTES // 1000]


def test_held_backlog_follows_a_lost_push_once_it_is_answered() -> None:
    ms, d = leader_with_log(1, max_push_timeout_ms=100)
    (first,) = d.tick(0)
    ms.store.append(b"held")
    assert d.tick(50) == []
    (again,) = d.tick(100)  # the lost push goes again, alone; the backlog still waits
    assert again.first_index == first.first_index and again.count == 1
    d.on_response(again, acked(again), 120)
    (held,) = d.tick(120)
    assert (held.first_index, held.count) == (1, 1)


# -- standby followers: beyond the acks a quorum needs, small backlogs wait


def times_of_arrival(c: Cluster, node: str, count: int) -> list[int]:
    """Step until `node` holds `count` entries; the clock each time its log grew."""
    seen, times = len(c.bodies(node)), []
    while seen < count:
        c.step()
        now_held = len(c.bodies(node))
        times += [c.now] * (now_held - seen)
        seen = now_held
    return times


def commit_time(c: Cluster, body: bytes) -> int:
    """Append `body` and step until it commits: the milliseconds it took."""
    fut = c.append(body)
    start = c.now
    c.run_until(fut.done)
    return c.now - start


def test_standby_gets_small_backlogs_late_in_few_pushes_and_commits_do_not_wait() -> None:
    c, leader, (f1, f2) = elected(seed=11)
    wait = c.core(leader).config.standby_push_ms
    rtt = commit_time(c, b"warm")  # one push round trip to the first follower
    c.run_for(2 * wait)
    log = PushLog(c)
    start = c.now
    for k in range(6):  # one client request after the other: f1 gets each at once
        assert commit_time(c, b"r%d" % k) == rtt
    assert log.counts(f1) == [1] * 6
    arrived = times_of_arrival(c, f2, len(c.bodies(f1)))
    assert sum(log.counts(f2)) == 6 and len(log.counts(f2)) <= 3  # several per push
    assert arrived[0] - start >= wait  # the first one waited for the standby push
    assert c.bodies(f2) == c.bodies(f1) == c.bodies(leader)


def test_standby_is_pushed_at_once_when_the_follower_ahead_stops_answering() -> None:
    c, leader, (f1, f2) = elected(seed=12)
    config = c.core(leader).config
    rtt = commit_time(c, b"healthy")
    c.run_for(2 * config.standby_push_ms)
    log = PushLog(c, drop_responses_from=f1)  # f1 stops acknowledging
    # the standby's wait is the one extra delay: the commit comes with f2's ack
    assert config.standby_push_ms <= commit_time(c, b"first") <= config.standby_push_ms + rtt + c.step_ms
    # f1's push is overdue now, so f2 is no standby any more, also after f1's push is
    # sent again (max_push_timeout_ms): later requests commit after one round trip
    end = c.now + 3 * config.max_push_timeout_ms
    while c.now < end:
        assert commit_time(c, b"later") == rtt
    assert set(log.counts(f2)) == {1}  # each request pushed as it came, none held
    assert any(m.first_index == log.appends[0][1].first_index for d, m in log.appends[1:] if d == f1)  # resent


def test_no_standby_when_disabled_in_a_group_of_two_or_for_a_transferee() -> None:
    c, _leader, (f1, f2) = elected(seed=13, standby_push_ms=0)
    log = PushLog(c)
    fut = c.append(b"x")
    c.run_until(fut.done)
    assert log.counts(f1) == log.counts(f2) == [1]
    two = Cluster(2, seed=14)
    leader2 = two.elect()
    log2 = PushLog(two)
    fut = two.append(b"y")
    two.run_until(fut.done)
    (only,) = [n for n in two.ids if n != leader2]
    assert log2.counts(only) == [1]  # its ack is the one a commit needs
    c3, leader3, (_g1, g2) = elected(seed=15)
    log3 = PushLog(c3)
    fut = c3.append(b"z")
    c3.run_until(fut.done)
    assert log3.counts(g2) == []  # held: g2 is the standby
    transfer = c3.core(leader3).leadership_transfer(g2, c3.now)
    c3.step()
    assert log3.counts(g2) == [1]  # the transferee catches up at once
    c3.run_until(transfer.done, max_ms=2000)
    assert transfer.result().code == ResponseCode.SUCCESS and c3.leader() == g2


def test_a_group_of_five_has_two_followers_pushed_at_once_and_two_standbys() -> None:
    c = Cluster(5, seed=16)
    leader = c.elect()
    c.run_for(300)
    followers = [n for n in c.ids if n != leader]
    log = PushLog(c)
    fut = c.append(b"x")
    c.run_until(fut.done)
    assert [log.counts(f) for f in followers] == [[1], [1], [], []]
    c.run_for(c.core(leader).config.standby_push_ms + 2 * c.step_ms)
    assert [log.counts(f) for f in followers] == [[1], [1], [1], [1]]


# -- gathering: a small backlog waits for client appends on their way


def gathering(seed: int, **cfg: object) -> tuple[Cluster, list[str], list[int], PushLog]:
    """An elected group of three without standbys whose leader is told `on_the_way[0]`
    client appends are on their way."""
    c, leader, followers = elected(seed=seed, standby_push_ms=0, **cfg)
    on_the_way = [0]
    c.core(leader).incoming_appends = lambda: on_the_way[0]
    return c, followers, on_the_way, PushLog(c)


def test_appends_on_their_way_are_gathered_into_one_push() -> None:
    c, (f1, f2), on_the_way, log = gathering(seed=17, push_gather_ms=50)
    futures = []
    for k, left in enumerate((2, 1, 0)):  # three client calls: the first two find more coming
        on_the_way[0] = left
        futures.append(c.append(b"g%d" % k))
        c.step()
        assert log.counts(f1) == log.counts(f2) == ([3] if left == 0 else [])
    c.run_until(lambda: all(f.done() for f in futures))
    assert c.bodies(c.leader() or "")[-3:] == [b"g0", b"g1", b"g2"]


def test_a_lone_client_is_pushed_at_once_and_a_stuck_count_holds_at_most_push_gather_ms() -> None:
    c, (f1, f2), on_the_way, log = gathering(seed=18, push_gather_ms=50)
    leader = c.leader() or ""
    for k in range(3):  # nothing on its way: every append goes with the next pass
        fut = c.append(b"lone%d" % k)
        c.step()
        assert log.counts(f1) == log.counts(f2) == [1] * (k + 1)
        c.run_until(fut.done)
    log.appends.clear()
    on_the_way[0] = 1  # a call that never reaches its handler
    fut = c.append(b"held")
    c.step()
    start = c.now
    dispatcher = c.core(leader).dispatchers[f1]
    assert dispatcher.hold_until_ms == start + 50
    c.run_until(lambda: bool(log.counts(f1)))
    assert c.now == start + 50 and log.counts(f1) == log.counts(f2) == [1]
    assert dispatcher.hold_until_ms == -1
    c.run_until(fut.done)


def test_no_gathering_when_disabled_or_for_a_large_backlog() -> None:
    c, (f1, _f2), on_the_way, log = gathering(seed=19, push_gather_ms=0)
    on_the_way[0] = 5
    c.append(b"x")
    c.step()
    assert log.counts(f1) == [1]
    c2, (g1, _g2), on_the_way2, log2 = gathering(seed=20, push_gather_ms=50)
    on_the_way2[0] = 5
    c2.append(*[bytes(1000)] * (COALESCE_BYTES // 1000))
    c2.step()
    assert log2.counts(g1) == [COALESCE_BYTES // 1000]


# -- quota: catch-up traffic only


def leader_with_log(n: int, body: int = 100, **cfg: object) -> tuple[MemberState, EntryDispatcher]:
    config = DLedgerConfig(group="g", self_id="n0", peers=PEERS, **cfg)  # type: ignore[arg-type]
    store = MemoryLogStore()
    store.term = 1
    store.append_many([bytes(body)] * n)
    ms = MemberState(config, store, MemoryTermStore(1, "n0"))
    ms.change_to_leader(1)
    dispatcher = EntryDispatcher(config, ms, "n1", QuorumAckChecker(config, ms))
    dispatcher.reset(1)
    dispatcher.match_index = -1
    dispatcher._change_state(DispatchState.APPEND)  # as after a COMPARE that matched nothing
    return ms, dispatcher


def test_quota_throttles_only_a_follower_far_behind_in_entries_and_bytes() -> None:
    common = {
        "peer_push_quota": 10_000,
        "max_push_batch_bytes": 1480,
        "peer_push_throttle_lag_entries": 1000,
        "max_push_timeout_ms": 60_000,  # no resend in between
    }
    # 3,000 entries behind, 444 KB behind >= the throttle point: held to 10 KB/s
    _, slow = leader_with_log(3000, peer_push_throttle_point=100_000, **common)
    pushed = sum(r.count for r in slow.tick(0))
    assert slow.throttled and pushed == 70  # 7 pushes of 1,480 bytes fill the 10 KB of this second
    assert slow.tick(500) == []  # still this second
    assert sum(r.count for r in slow.tick(1000)) == 70  # the next second's budget
    # as far behind in entries, but fewer bytes than the throttle point: not throttled
    _, fast = leader_with_log(3000, peer_push_throttle_point=10**9, **common)
    assert sum(r.count for r in fast.tick(0)) == 3000 and not fast.throttled
    # many bytes behind but only 1,000 entries: not throttled either
    _, few = leader_with_log(1001, body=500, peer_push_throttle_point=100_000, **common)
    assert sum(r.count for r in few.tick(0)) == 1001 and not few.throttled


# -- follower side


def follower_handler(entries: int = 0, **settings: int) -> tuple[MemberState, EntryHandler, MemoryLogStore]:
    config = DLedgerConfig(group="g", self_id="n1", peers=PEERS, follower_push_timeout_ms=1000, **settings)  # type: ignore[arg-type]
    store = MemoryLogStore()
    store.term = 1
    for _ in range(entries):
        store.append(b"x")
    ms = MemberState(config, store, MemoryTermStore(1, None))
    LeaderElector(config, ms, random.Random(0)).handle_heartbeat(
        HeartBeatRequest(group="g", local_id="n0", remote_id="n1", leader_id="n0", term=1), 0
    )
    return ms, EntryHandler(config, ms), store


def append_push(leader_store: MemoryLogStore, first: int, count: int) -> PushEntryRequest:
    run, n = leader_store.read_run(first, 1 << 20)
    assert n >= count
    run = b"".join(leader_store.read_run(i, 1)[0] for i in range(first, first + count))
    return PushEntryRequest(
        group="g",
        local_id="n0",
        remote_id="n1",
        leader_id="n0",
        term=1,
        type=PushType.APPEND,
        first_index=first,
        count=count,
        entries=run,
        prev_index=first - 1,
        prev_term=-1 if first == 0 else leader_store.term_at(first - 1),
        last_term=leader_store.term_at(first + count - 1),
        commit_index=-1,
    )


def leader_log(n: int) -> MemoryLogStore:
    store = MemoryLogStore()
    store.term = 1
    for _ in range(n):
        store.append(b"x")
    return store


def test_repeated_push_answers_the_replaced_copy() -> None:
    _, h, store = follower_handler()
    log = leader_log(3)
    old = h.handle_push(append_push(log, 0, 2), 0)
    new = h.handle_push(append_push(log, 0, 2), 1)
    assert old.result().code == ResponseCode.REPEATED_PUSH
    while h.run_once(1):
        pass
    assert new.result().code == ResponseCode.SUCCESS and store.end_index == 1


def test_abnormal_future_check_acks_held_entries_and_asks_the_leader_to_compare() -> None:
    ms, h, store = follower_handler()
    log = leader_log(6)
    held = h.handle_push(append_push(log, 0, 2), 0)
    assert h.run_once(0) and held.result().code == ResponseCode.SUCCESS
    # the ack was lost; the leader resent [0, 2) and also pushed [4, 6) over a gap
    again = h.handle_push(append_push(log, 0, 2), 10)
    gap = h.handle_push(append_push(log, 4, 2), 10)
    assert h.run_once(10) and again.result().code == ResponseCode.SUCCESS  # repaired: acked, not re-appended
    assert store.end_index == 1
    assert not h.run_once(500)  # the gap request waits (follower_push_timeout_ms not reached)
    assert not gap.done()
    assert h.run_once(1500)  # timed out with nothing contiguous: the leader must compare
    assert gap.result().code == ResponseCode.INCONSISTENT_STATE
    assert store.end_index == 1 and ms.committed_index == -1


def test_compare_and_truncate_void_queued_appends() -> None:
    _, h, _store = follower_handler(entries=2)
    log = leader_log(6)
    queued = h.handle_push(append_push(log, 4, 1), 0)
    compare = h.handle_push(
        PushEntryRequest(
            group="g",
            local_id="n0",
            remote_id="n1",
            leader_id="n0",
            term=1,
            type=PushType.COMPARE,
            prev_index=1,
            prev_term=1,
        ),
        0,
    )
    assert queued.result().code == ResponseCode.INCONSISTENT_STATE
    assert h.run_once(0) and compare.result().code == ResponseCode.SUCCESS


def test_appends_waiting_for_their_predecessors_are_bounded_as_a_leaders_in_flight_pushes() -> None:
    """Pushes that must wait (a gap before them) are held up to what a leader keeps in
    flight to one follower, in count and in bytes; more is refused at once, never held
    in memory until it times out. A copy of a held push, and the next push, still go."""
    _, h, store = follower_handler(max_push_in_flight_per_peer=3)
    log = leader_log(40)
    held = [h.handle_push(append_push(log, first, 1), 0) for first in (10, 20, 30)]
    refused = h.handle_push(append_push(log, 35, 1), 0)
    assert refused.done() and refused.result().code == ResponseCode.PUSH_REQUEST_IS_FULL
    again = h.handle_push(append_push(log, 20, 1), 0)  # a copy replaces its original
    assert held[1].result().code == ResponseCode.REPEATED_PUSH and not again.done()
    following = h.handle_push(append_push(log, 0, 2), 0)
    assert h.run_once(0) and following.result().code == ResponseCode.SUCCESS and store.end_index == 1
    assert not any(f.done() for f in (held[0], held[2], again))

    size = len(append_push(log, 10, 2).entries)
    _, h, _ = follower_handler(max_push_in_flight_bytes=size, max_push_batch_bytes=size)
    assert not h.handle_push(append_push(log, 10, 4), 0).done()  # 2 * size: just in
    over = h.handle_push(append_push(log, 20, 1), 0)
    assert over.done() and over.result().code == ResponseCode.PUSH_REQUEST_IS_FULL


def control(kind: PushType, prev_index: int, commit: int = -1) -> PushEntryRequest:
    return PushEntryRequest(
        group="g",
        local_id="n0",
        remote_id="n1",
        leader_id="n0",
        term=1,
        type=kind,
        prev_index=prev_index,
        prev_term=-1 if prev_index < 0 else 1,
        commit_index=commit,
    )


def test_control_queue_goes_first_and_is_bounded() -> None:
    ms, h, store = follower_handler(entries=2)
    log = leader_log(4)
    append = h.handle_push(append_push(log, 2, 1), 0)  # the next index: ready to go
    commit = h.handle_push(control(PushType.COMMIT, 1, commit=1), 0)
    assert h.run_once(0) and commit.done() and not append.done()  # the queue first
    assert ms.committed_index == 1
    assert h.run_once(0) and append.result().code == ResponseCode.SUCCESS and store.end_index == 2
    # a full queue refuses at once instead of blocking (DLedger #282)
    queued = [h.handle_push(control(PushType.COMMIT, 2), 0) for _ in range(MAX_CONTROL_QUEUE)]
    refused = h.handle_push(control(PushType.COMMIT, 2), 0)
    assert refused.result().code == ResponseCode.PUSH_REQUEST_IS_FULL
    assert not any(f.done() for f in queued)
    while h.run_once(0):
        pass
    assert all(f.result().code == ResponseCode.SUCCESS for f in queued)


# -- leader pending limits


def test_pending_bytes_limit_counts_whole_client_requests() -> None:
    c, _leader, _ = elected(seed=6, max_pending_bytes=1000)
    c.net.filter = lambda src, dst, msg: isinstance(msg, PushEntryRequest)  # heartbeats still pass
    big = c.append(bytes(5000))  # alone it is accepted, whatever its size
    with pytest.raises(DLedgerError) as err:
        c.append(b"x")
    assert err.value.code == ResponseCode.LEADER_PENDING_FULL
    c.run_until(big.done, max_ms=2000)
    exc = big.exception()
    assert isinstance(exc, DLedgerError) and exc.code == ResponseCode.WAIT_QUORUM_ACK_TIMEOUT
    c.append(b"x")  # room again once the first request ended


# -- retention floor


def test_retention_floor_follows_the_slowest_follower_and_the_commit_index() -> None:
    c, leader, (f1, f2) = elected(seed=7)
    f = c.append(b"a", b"b", b"c")
    c.run_until(f.done)
    c.run_until(lambda: all(c.core(n).member_state.committed_index == f.result() for n in c.ids))
    c.run_for(50)
    committed = c.core(leader).member_state.committed_index
    assert c.core(leader).retention_floor() == committed + 1
    # the followers keep what the leader's next heartbeat says its members need
    c.run_until(lambda: c.core(f1).retention_floor() == committed + 1 == c.core(f2).retention_floor())
    # f2 is cut off: the leader keeps what f2 still needs while the commit index moves on
    c.net.isolate(f2)
    f_more = c.append(b"d", b"e")
    c.run_until(f_more.done)
    assert c.core(leader).member_state.committed_index == f_more.result()
    assert c.core(leader).retention_floor() == committed + 1
    # f1 keeps it too (the leader's heartbeats say so): were the leader lost, f1 would lead
    # and still bring f2 back (helper K: followers deleted it, and the group could not commit)
    c.run_until(lambda: c.core(f1).member_state.committed_index == f_more.result())
    c.run_for(2 * c.core(leader).config.heart_beat_time_interval_ms)
    assert c.core(f1).retention_floor() == committed + 1
    c.net.heal()
    c.run_until(lambda: c.core(leader).retention_floor() == f_more.result() + 1)
    c.run_until(lambda: c.core(f1).retention_floor() == f_more.result() + 1)  # the next heartbeat says so


def test_retention_floor_never_exceeds_committed_plus_one_and_is_zero_before_matching() -> None:
    config = DLedgerConfig(group="g", self_id="n0", peers=PEERS)
    store = MemoryLogStore()
    store.term = 1
    store.append_many([b"x"] * 10)
    core = RaftCore(config, store, MemoryTermStore(1, "n0"), random.Random(0))
    assert core.retention_floor() == 0  # a candidate that committed nothing
    core.member_state.update_committed_index(4)
    assert core.retention_floor() == 0  # no leader said what its members need
    core.member_state.leader_floor = 3
    assert core.retention_floor() == 3
    core.member_state.leader_floor = 9
    assert core.retention_floor() == 5  # never above its own commit index + 1
    core.elector.change_role_to_leader(1)
    assert core.retention_floor() == 0  # followers not matched yet in this term
    for d in core.dispatchers.values():
        d.match_index = 9  # acknowledged beyond the commit index
    assert core.retention_floor() == 5
    core.dispatchers["n1"].match_index = 2
    assert core.retention_floor() == 3


# -- the split passes


def test_split_passes_drive_a_cluster_like_tick() -> None:
    """The node's threads call tick_elector / tick_dispatcher / tick_handler /
    tick_quorum separately; driven that way the cluster elects, replicates and commits,
    and on_response says when an answer acknowledged entries."""
    c = Cluster(3, seed=8)
    moved: list[bool] = []
    hints: list[bool] = []

    def send(m: Member, target: str, request: RequestOrResponse) -> None:
        core = m.core
        fut = c.net.send(m.node_id, target, request)

        def done(f: Future[RequestOrResponse]) -> None:
            hints.append(core.on_response(target, request, None if f.exception() else f.result(), c.now))

        fut.add_done_callback(done)

    def step() -> None:
        c.clock.advance(c.step_ms)
        now = c.now
        for m in c.members.values():
            core = m.core
            for ob in core.tick_elector(now):
                send(m, ob.target_id, ob.request)
            while core.tick_handler(now):
                pass
            assert core.tick_handler(now) is False  # idle
            for peer in core.dispatchers:
                for ob in core.tick_dispatcher(peer, now):
                    send(m, ob.target_id, ob.request)
            moved.append(core.tick_quorum(now))
        c.net.step()
        c._check_invariants()

    c.step = step  # type: ignore[method-assign]
    leader = c.elect()
    follower = next(n for n in c.ids if n != leader)
    assert c.core(follower).tick_dispatcher(leader, c.now) == []  # only a leader dispatches
    c.run_for(300)
    moved.clear()
    hints.clear()
    f = c.append(b"x", b"y")
    c.run_until(f.done)
    assert f.result() == c.members[leader].store.end_index
    assert hints.count(True) == 1  # the first follower's ack committed it
    assert not any(moved)  # on_response already ran the quorum check
    c.run_until(lambda: all(c.bodies(n) == [b"x", b"y"] for n in c.ids))
    c.run_until(lambda: hints.count(True) == 2, max_ms=100)  # the standby's later ack is reported too
    moved.clear()
    c.run_for(100)
    assert not any(moved)  # nothing new to commit


def test_tick_quorum_reports_when_the_commit_index_moves() -> None:
    config = DLedgerConfig(group="g", self_id="n0", peers=PEERS)
    store = MemoryLogStore()
    core = RaftCore(config, store, MemoryTermStore(1, "n0"), random.Random(0))
    core.elector.change_role_to_leader(1)  # an empty log: no NOOP needed
    fut = core.append([b"x"], 0)
    assert core.tick_quorum(1) is False  # only the leader holds it
    core.quorum.update_peer_water_mark(1, "n2", 0)
    assert core.tick_quorum(2) is True and fut.result() == 0
    assert core.tick_quorum(3) is False


def test_lost_window_is_sent_again_once_the_first_resend_gets_through() -> None:
    """Several pushes in a row are lost: the oldest is resent alone after
    max_push_timeout_ms, and once that one is acknowledged the rest of the overdue window
    goes out at once (not one timeout per push)."""
    c, leader, (f1, f2) = elected(seed=9, max_push_batch_bytes=200)
    c.kill(f2)  # every commit needs f1
    lost = [True]
    c.net.filter = lambda src, dst, msg: lost[0] and isinstance(msg, PushEntryRequest) and dst == f1
    futures = [c.append(f"e{i}".encode()) for i in range(60)]
    start = c.now
    c.run_for(50)
    lost[0] = False
    c.run_until(lambda: all(f.done() for f in futures))
    timeout = c.core(leader).config.max_push_timeout_ms
    # one resend round trip, then the window: not 60 resends one after the other
    assert timeout <= c.now - start < 2 * timeout
    assert [f.result() for f in futures] == list(range(futures[0].result(), futures[0].result() + 60))


def test_a_run_whose_last_term_disagrees_with_the_push_is_taken_back() -> None:
    """A flipped bit in a header's term keeps the run valid for the store (terms still
    non-decreasing, no header CRC); the push's announced last term catches it."""
    _ms, handler, store = follower_handler()
    leader = leader_log(3)
    push = append_push(leader, 0, 3)
    damaged = bytearray(push.entries)
    last = 2 * len(push.entries) // 3  # the third entry's header (equal-sized entries)
    damaged[last + 16 + 7] ^= 0x02  # term 1 -> 3 in the last entry
    push.entries = bytes(damaged)
    answer = handler.handle_push(push, 0)
    handler.run_once(0)
    assert answer.result().code == ResponseCode.INCONSISTENT_STATE
    assert store.end_index == -1  # nothing kept
    good = append_push(leader, 0, 3)
    answer = handler.handle_push(good, 1)
    handler.run_once(1)
    assert answer.result().code == ResponseCode.SUCCESS and store.end_index == 2 and store.end_term == 1


def test_a_stale_truncate_never_deletes_what_the_same_leader_pushed_in_its_term() -> None:
    """A TRUNCATE delivered twice (network duplicate) must not cut the entries the
    leader appended after the first copy: they match the leader's log."""
    _ms, handler, store = follower_handler()
    leader = leader_log(4)
    truncate = PushEntryRequest(
        group="g", local_id="n0", remote_id="n1", leader_id="n0", term=1, type=PushType.TRUNCATE,
        first_index=0, prev_index=-1, prev_term=-1, commit_index=-1,
    )  # fmt: skip
    answer = handler.handle_push(truncate, 0)
    handler.run_once(0)
    assert answer.result().code == ResponseCode.SUCCESS
    answer = handler.handle_push(append_push(leader, 0, 4), 1)
    handler.run_once(1)
    assert answer.result().code == ResponseCode.SUCCESS and store.end_index == 3
    answer = handler.handle_push(truncate, 2)  # the duplicate arrives late
    handler.run_once(2)
    assert answer.result().code == ResponseCode.SUCCESS
    assert store.end_index == 3 and [store.get_body(i) for i in range(4)] == [b"x"] * 4


def test_an_emptied_log_placed_elsewhere_takes_the_leaders_entries_at_their_positions(tmp_path: Path) -> None:
    """Found by the snapshot simulation's power losses: a follower restarted with a
    snapshot (5, term 1) over a shorter log, so its log was emptied at its own end
    position, not where the leader's entry 6 starts. Every push of entry 6 was refused
    (position mismatch) and every compare succeeded: it never caught up. The handler now
    moves an emptied log to the leader's position of its next entry."""
    config = DLedgerConfig(group="g", self_id="n1", peers=PEERS, follower_push_timeout_ms=1000)
    store = MmapLogStore(tmp_path, member_store_config(data_file_size=4096, index_file_size=32 * 64))
    store.term = 1
    for _ in range(3):
        store.append(b"y" * 30)  # its own entries, at other positions than the leader's
    store.reset(5, 1)
    ms = MemberState(config, store, MemoryTermStore(1, None))
    LeaderElector(config, ms, random.Random(0)).handle_heartbeat(
        HeartBeatRequest(group="g", local_id="n0", remote_id="n1", leader_id="n0", term=1), 0
    )
    handler = EntryHandler(config, ms)
    log = leader_log(12)
    assert store.write_pos != log.get(6).pos
    answer = handler.handle_push(append_push(log, 6, 3), 0)
    while handler.run_once(0):
        pass
    assert answer.result().code == ResponseCode.SUCCESS
    assert store.end_index == 8 and [store.get(i).pos for i in (6, 8)] == [log.get(i).pos for i in (6, 8)]
    store.close()
    again = MmapLogStore(tmp_path, member_store_config(data_file_size=4096, index_file_size=32 * 64))
    assert (again.begin_index, again.end_index, again.get(7).pos) == (6, 8, log.get(7).pos)
    again.close()
