"""DLedgerNode with its real threads: election, commit, committed-only reads, the
state machine, coalesced appends, restarts, sync durability and metrics."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from prometheus_client import generate_latest

from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import MAGIC_NOOP, Entry
from dledger.store.mmap_store import MmapLogStore
from tests.node.conftest import NodeCluster, wait_until

pytestmark = pytest.mark.interaction

Factory = Callable[..., NodeCluster]


def test_elects_one_leader_and_replicates_committed_entries(cluster_factory: Factory) -> None:
    cluster = cluster_factory()
    leader = cluster.leader()
    last = leader.append([b"a", b"b", b"c"]).result(10)
    assert [e.body for e in leader.get(last - 2, 3)] == [b"a", b"b", b"c"]
    for node in cluster.nodes.values():
        wait_until(lambda n=node: n.committed_index >= last, what=f"{node.config.self_id} commit")  # type: ignore[misc]
        assert [e.body for e in node.get(last - 2, 3)] == [b"a", b"b", b"c"]
        assert node.status().leader_id == leader.config.self_id


def test_follower_refuses_appends_and_reads_stop_at_the_commit_index(cluster_factory: Factory) -> None:
    cluster = cluster_factory()
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes.values() if n is not leader)
    with pytest.raises(DLedgerError) as err:
        follower.append([b"x"])
    assert err.value.code is ResponseCode.NOT_LEADER
    last = leader.append([b"y"]).result(10)
    with pytest.raises(DLedgerError) as err:
        leader.get(last + 1)
    assert err.value.code is ResponseCode.INDEX_OUT_OF_RANGE
    assert leader.read_columns(last + 1, 10, 1 << 20).count == 0
    batch = leader.read_columns(0, 1000, 1 << 20)
    assert int(batch.index[-1]) == last and batch.body(batch.count - 1) == b"y"


def test_state_machine_applies_committed_user_entries_in_order(cluster_factory: Factory) -> None:
    cluster = cluster_factory()
    leader = cluster.leader()
    last = 0
    for k in range(20):
        last = leader.append([f"e{k}".encode()]).result(10)
    for node_id, node in cluster.nodes.items():
        assert node.caller is not None
        wait_until(lambda n=node: n.applied_index >= last, what=f"{node_id} applied")  # type: ignore[misc]
        applied = cluster.machines[node_id].applied
        assert [e.body for e in applied] == [f"e{k}".encode() for k in range(20)]
        assert all(e.magic != MAGIC_NOOP for e in applied)
        assert [e.index for e in applied] == sorted(e.index for e in applied)


def test_concurrent_single_appends_are_coalesced_into_one_store_append(cluster_factory: Factory) -> None:
    cluster = cluster_factory()
    leader = cluster.leader()
    calls: list[int] = []
    real_append = leader.store.append_many

    def counting(bodies: list[bytes]) -> int:
        calls.append(len(bodies))
        return real_append(bodies)

    leader.store.append_many = counting  # type: ignore[method-assign]
    results: dict[int, int] = {}

    def client(k: int) -> None:
        results[k] = leader.append([f"c{k}".encode()]).result(10)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(10)]
    with leader._lock:  # hold the node so all ten queue up behind it
        for t in threads:
            t.start()
        wait_until(lambda: len(leader._appends) == 10, what="ten queued appends")
    for t in threads:
        t.join(15)
    assert calls == [10]
    assert sorted(results.values()) == list(range(min(results.values()), min(results.values()) + 10))
    for k, index in results.items():
        assert leader.get(index)[0].body == f"c{k}".encode()


def test_a_backlog_waiting_for_appends_on_their_way_goes_when_push_gather_ms_ends(cluster_factory: Factory) -> None:
    cluster = cluster_factory(push_gather_ms=150, standby_push_ms=0)
    leader = cluster.leader()
    leader.append([b"warm"]).result(10)
    leader.set_incoming_appends(lambda: 1)  # a call that never reaches the node
    start = time.monotonic()
    index = leader.append([b"held"]).result(10)
    assert time.monotonic() - start >= 0.148  # held (the clock counts whole milliseconds)...
    assert leader.get(index)[0].body == b"held"  # ... and committed once the hold ended
    leader.set_incoming_appends(lambda: 0)
    leader.append([b"free"]).result(10)


def test_leader_shutdown_elects_a_new_leader_that_keeps_every_committed_entry(cluster_factory: Factory) -> None:
    cluster = cluster_factory()
    old = cluster.leader()
    acked = [old.append([f"k{k}".encode()]).result(10) for k in range(10)]
    old_id = old.config.self_id
    cluster.stop(old_id)
    new = cluster.leader()
    assert new.config.self_id != old_id
    more = new.append([b"after"]).result(10)
    assert [e.body for e in new.get(acked[0], len(acked))] == [f"k{k}".encode() for k in range(10)]
    restarted = cluster.start(old_id)  # recovers from its files and catches up
    wait_until(lambda: restarted.committed_index >= more, what="restarted node catch-up")
    assert restarted.get(more)[0].body == b"after"
    assert [e.body for e in restarted.get(acked[0], 10)] == [f"k{k}".encode() for k in range(10)]


def test_a_new_leader_wakes_the_passes_that_slept_as_a_follower(
    cluster_factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower's dispatcher and quorum passes have nothing to do and sleep until woken
    (RaftDriver.idle_wait); here they would sleep ten minutes. A new leader must still
    replicate at once (its dispatchers) and time out a request nobody acknowledges (its
    quorum pass: 300 ms here, long before a leader alone steps down after 3 missed 2 s
    heartbeats)."""
    monkeypatch.setattr("dledger.raft.driver.IDLE_WAIT_MS", 600_000)
    cluster = cluster_factory(heart_beat_time_interval_ms=2000, max_wait_ack_time_ms=300)
    old = cluster.leader()
    target = next(n for n in cluster.nodes.values() if n is not old)
    old.leadership_transfer(target.config.self_id).result(10)
    new = cluster.leader()
    assert new is target
    index = new.append([b"replicated"]).result(10)
    for node in cluster.nodes.values():
        wait_until(lambda n=node: n.committed_index >= index, what="every copy")  # type: ignore[misc]
    for node_id in [i for i in cluster.nodes if i != target.config.self_id]:
        cluster.stop(node_id)
    pending = new.append([b"alone"])
    with pytest.raises(DLedgerError) as err:  # not left hanging
        pending.result(10)
    assert err.value.code is ResponseCode.WAIT_QUORUM_ACK_TIMEOUT


def test_wait_committed_wakes_on_commit(cluster_factory: Factory) -> None:
    cluster = cluster_factory()
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes.values() if n is not leader)
    start = follower.committed_index
    seen: list[int] = []
    waiter = threading.Thread(target=lambda: seen.append(follower.wait_committed(start + 1, 10)))
    waiter.start()
    leader.append([b"w1", b"w2"]).result(10)
    waiter.join(15)
    assert seen and seen[0] > start + 1


def test_sync_mode_acknowledges_only_durable_entries(cluster_factory: Factory) -> None:
    cluster = cluster_factory(flush_mode="sync")
    leader = cluster.leader()
    last = leader.append([b"s1", b"s2"]).result(10)
    assert isinstance(leader.store, MmapLogStore)
    assert leader.store._durable_end_index >= last
    durable = [
        n for n in cluster.nodes.values() if isinstance(n.store, MmapLogStore) and n.store._durable_end_index >= last
    ]
    assert len(durable) >= 2  # a majority holds the entry on disk when it is acknowledged


def test_shutdown_fails_pending_requests_and_refuses_new_ones(cluster_factory: Factory) -> None:
    cluster = cluster_factory()
    leader = cluster.leader()
    for other in [i for i in cluster.ids if i != leader.config.self_id]:
        cluster.net.isolate(leader.config.self_id, [other])
    pending = leader.append([b"never"])
    cluster.stop(leader.config.self_id)
    with pytest.raises(DLedgerError) as err:
        pending.result(10)
    assert err.value.code is ResponseCode.TERM_CHANGED
    with pytest.raises(DLedgerError):
        leader.append([b"late"])


def test_metrics_use_dledger_names(cluster_factory: Factory) -> None:
    cluster = cluster_factory()
    leader = cluster.leader()
    leader.append([b"m1", b"m2"]).result(10)
    leader.get(0)
    text = generate_latest(leader.metrics.registry).decode()
    labels = f'group="g",self_id="{leader.config.self_id}"'
    assert f"dledger_append_entry_latency_count{{{labels}}} 1.0" in text
    assert "dledger_append_entry_batch_count_sum" in text
    assert f"dledger_role{{{labels}}} 2.0" in text
    wait_until(lambda: "dledger_replicate_entry_latency_count" in generate_latest(leader.metrics.registry).decode())
    assert "dledger_commit_lag" in text


def test_iterate_yields_committed_entries_only(cluster_factory: Factory) -> None:
    cluster = cluster_factory()
    leader = cluster.leader()
    last = leader.append([f"i{k}".encode() for k in range(50)]).result(10)
    user = [e for e in leader.iterate() if not e.is_noop]
    assert [e.body for e in user] == [f"i{k}".encode() for k in range(50)]
    assert user[-1].index == last
    assert [e.index for e in leader.iterate(last - 4, last - 1)] == [last - 4, last - 3, last - 2]


class _HeldMachine:
    """Applies the first batch, then waits for `go` before each further batch."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.waiting = threading.Event()
        self.applied: list[int] = []

    def on_apply(self, entries: list[Entry]) -> None:
        if self.applied:
            self.waiting.set()
            self.go.wait(30)
        self.applied.extend(e.index for e in entries)


def test_retention_keeps_every_entry_a_state_machine_without_snapshots_replays(cluster_factory: Factory) -> None:
    """Entries committed but not applied stay, and applied ones too: without a snapshot a
    restart replays the whole log (tests/node/test_snapshots.py: with snapshots, the
    entries after the newest one)."""
    cluster = cluster_factory(1, machine_factory=_HeldMachine)
    node = cluster.leader()
    machine = cluster.machines["n0"]
    first = node.append([b"first"]).result(10)
    wait_until(lambda: node.applied_index >= first, what="the first entry applied")
    last = node.append([b"x"] * 50).result(10)
    wait_until(machine.waiting.is_set, what="the machine to hold the second batch")
    # the producer table folds what is applied (snapshots carry it): it waits with the machine
    wait_until(lambda: node.producers.saved_index >= node.applied_index, what="the producer table's fold")
    node._quorum_pass()  # the pass that sets the floor, run now rather than waited for
    assert node.committed_index == last  # committed, but not applied: retention may not take it
    assert node.store.retention_floor == 0 <= node.applied_index < last
    machine.go.set()
    wait_until(lambda: node.applied_index == last, what="everything applied")
    wait_until(lambda: node.producers.saved_index >= last, what="the producer table's fold")
    node._quorum_pass()
    assert node.store.retention_floor == 0  # applied, but in no snapshot: a restart replays it
