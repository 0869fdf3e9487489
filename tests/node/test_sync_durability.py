"""sync flush mode on threaded nodes with real file stores: an append is answered only once
a majority has it on disk (the leader counted only with its own flush done), and the
leader's flush runs in parallel with replication."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig, member_store_config
from dledger.node import DLedgerNode
from dledger.node_store import open_node_store
from dledger.store.mmap_store import MmapLogStore
from tests.node.conftest import NodeCluster, wait_until

pytestmark = pytest.mark.interaction

Factory = Callable[..., NodeCluster]


class DiskGate:
    """Holds every msync of one store while closed (the flush is blocked, the append not)."""

    def __init__(self, store: MmapLogStore) -> None:
        self.real = store._msync
        self.opened = threading.Event()
        self.opened.set()
        self.held = threading.Event()
        store._msync = self  # type: ignore[method-assign]

    def __call__(self, segments: Any, frm: int, to: int) -> None:
        if not self.opened.is_set():
            self.held.set()
            self.opened.wait(60)
        self.real(segments, frm, to)

    def close(self) -> None:
        self.opened.clear()
        self.held.clear()

    def open(self) -> None:
        self.opened.set()


@pytest.fixture
def sync_group(cluster_factory: Factory) -> Iterator[tuple[DLedgerNode, list[DLedgerNode], dict[str, DiskGate]]]:
    """A 3-member sync-mode group with a gate on every store (all open), an entry committed."""
    cluster = cluster_factory(flush_mode="sync")
    leader = cluster.leader()
    leader.append([b"first"]).result(10)
    followers = [n for n in cluster.nodes.values() if n is not leader]
    gates = {}
    for node in cluster.nodes.values():
        assert isinstance(node.store, MmapLogStore)
        gates[node.config.self_id] = DiskGate(node.store)
    yield leader, followers, gates
    for gate in gates.values():
        gate.open()


def append_in_thread(node: DLedgerNode, body: bytes) -> tuple[threading.Thread, Future[int]]:
    """`node.append` (which flushes the leader's copy) in a thread; the outcome in a future."""
    answer: Future[int] = Future()

    def run() -> None:
        try:
            answer.set_result(node.append([body]).result(30))
        except BaseException as exc:
            answer.set_exception(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, answer


def acked_by(leader: DLedgerNode, follower: DLedgerNode, index: int) -> Callable[[], bool]:
    """The leader has counted `follower`'s acknowledgement of `index` (durable there)."""
    return lambda: leader.core.quorum.peer_water_mark(leader.term, follower.config.self_id) >= index


def test_no_answer_while_only_one_follower_has_it_on_disk(sync_group: Any) -> None:
    leader, (slow, fast), gates = sync_group
    gates[leader.config.self_id].close()
    gates[slow.config.self_id].close()
    index = leader.store.end_index + 1
    _, answer = append_in_thread(leader, b"held")
    wait_until(acked_by(leader, fast, index), what="the free follower's acknowledgement")
    wait_until(gates[leader.config.self_id].held.is_set, what="the leader's flush")
    # one copy of three on disk: neither committed nor answered
    assert leader.committed_index < index and not answer.done()
    gates[leader.config.self_id].open()
    assert answer.result(15) == index
    assert isinstance(fast.store, MmapLogStore) and fast.store.durable_index >= index
    assert leader.store.durable_index >= index


def test_no_answer_while_only_the_leader_has_it_on_disk(sync_group: Any) -> None:
    leader, followers, gates = sync_group
    for follower in followers:
        gates[follower.config.self_id].close()
    index = leader.store.end_index + 1
    _, answer = append_in_thread(leader, b"held")
    wait_until(lambda: leader.store.durable_index >= index, what="the leader's flush")

    def pushed() -> list[DLedgerNode]:  # followers holding the entry, their flush held
        return [f for f in followers if f.store.end_index >= index and gates[f.config.self_id].held.is_set()]

    wait_until(lambda: bool(pushed()), what="a push and its held flush")
    assert leader.committed_index < index and not answer.done()
    gates[pushed()[0].config.self_id].open()
    assert answer.result(15) == index


def test_two_followers_commit_while_the_leaders_flush_is_held(sync_group: Any) -> None:
    leader, _, gates = sync_group
    gates[leader.config.self_id].close()
    index = leader.store.end_index + 1
    thread, answer = append_in_thread(leader, b"pushed before the leader's flush")
    # the pushes went out before the leader's own flush: two followers make the majority
    wait_until(lambda: leader.committed_index >= index, what="the commit by two followers")
    assert gates[leader.config.self_id].held.is_set()
    assert not answer.done()  # the appending thread answers only after the leader's own flush
    gates[leader.config.self_id].open()
    assert answer.result(15) == index
    thread.join(15)


def test_a_new_sync_leader_flushes_its_noop_without_a_client(cluster_factory: Factory) -> None:
    cluster = cluster_factory(flush_mode="sync", flush_file_interval_ms=600_000)  # no periodic flush
    leader = cluster.leader()
    leader.append([b"a"]).result(10)
    old = leader.config.self_id
    others = [i for i in cluster.ids if i != old]
    cluster.net.isolate(old, others)
    pending = leader.append([b"b"])  # on the old leader's disk only, never committed
    for node_id in [*others, old]:
        cluster.stop(node_id)
    assert pending.exception(10) is not None
    cluster.net.heal()
    cluster.start(old)
    cluster.start(others[0])
    new = cluster.leader()
    assert new.store.end_index > new.committed_index  # uncommitted entries: a NOOP of the new term
    # it commits with the NOOP: the leader's own flush was triggered, not left to a timer
    wait_until(lambda: new.committed_index >= new.store.end_index, what="the NOOP's commit")
    assert isinstance(new.store, MmapLogStore) and new.store.durable_index >= new.committed_index


@pytest.mark.parametrize(
    ("flush_mode", "data_writes", "through"),
    [("sync", "auto", True), ("sync", "mmap", False), ("async", "auto", False)],
)
def test_a_sync_members_store_writes_through_and_leaves_data_flushes_to_the_acks(
    tmp_path: Path, flush_mode: str, data_writes: str, through: bool
) -> None:
    store_config = member_store_config(
        flush_mode=flush_mode, data_writes=data_writes, data_file_size=1 << 20, index_file_size=32 * 4096
    )
    config = DLedgerConfig(
        group="g", self_id="n0", peers="n0-127.0.0.1:1", store_base_dir=str(tmp_path), store=store_config
    )
    store = open_node_store(config)
    try:
        assert isinstance(store, MmapLogStore)
        assert store.write_through is through  # sync mode's own default, kept for a member
        assert store.appends_wait is (flush_mode == "sync")  # the flush pass leaves the data to the waits
        index = store.append(b"x")  # opened async: the node decides when to wait
        store.wait_durable()
        assert store.durable_index == index
    finally:
        store.close()


def test_a_failed_leader_flush_leaves_the_outcome_to_the_followers(sync_group: Any) -> None:
    leader, followers, _ = sync_group

    def broken(segments: Any, frm: int, to: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    leader.store._msync = broken  # type: ignore[method-assign]
    index = leader.store.end_index + 1
    # the pushes went out before the flush failed: no false "not appended", the two
    # followers' copies commit it
    assert leader.append([b"kept"]).result(15) == index
    for follower in followers:
        wait_until(lambda f=follower: f.committed_index >= index, what="the commit on the followers")
        assert follower.get(index)[0].body == b"kept"
    with pytest.raises(DLedgerError) as info:  # the failed store takes nothing more...
        leader.append([b"refused"])
    assert info.value.code in (ResponseCode.DISK_ERROR, ResponseCode.LEADER_TRANSFERRING, ResponseCode.NOT_LEADER)
    assert leader.store.end_index == index
    assert leader.status().store_health == "failed: [Errno 5] Input/output error"  # what status shows
    # ... and hands leadership to a follower, which takes writes again
    wait_until(lambda: any(f.is_leader for f in followers), what="a follower leading")
    new = next(f for f in followers if f.is_leader)
    assert new.get(new.append([b"after"]).result(15))[0].body == b"after"
    node_dir = leader.store.node_dir
    leader.shutdown()  # what it had not flushed is not durable: its next start is unclean
    assert node_dir is not None and (node_dir / "abort").exists()


def test_a_failed_leader_write_hands_leadership_over(sync_group: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A write into the leader's data file fails (EBADF: the segment's descriptor is made
    read-only). Before, only a failed flush marked the store failed: this leader kept
    leading a group that took no write, logged nothing, and its next start was clean."""
    leader, followers, _ = sync_group
    store = leader.store
    target = store.data_list.table.fd_of(int(store.write_pos))
    segment = store.data_list.path_of(int(store.write_pos) - int(store.write_pos) % store.data_list.file_size)
    read_only = os.open(segment, os.O_RDONLY)
    try:
        os.dup2(read_only, target)
    finally:
        os.close(read_only)
    end = store.end_index
    with pytest.raises(DLedgerError) as info:
        leader.append([b"refused"]).result(15)
    assert info.value.code == ResponseCode.DISK_ERROR and "failed" in str(info.value)
    assert store.end_index == end
    assert leader.status().store_health.startswith("failed: DISK_ERROR (414): writing")
    failed = [r for r in caplog.records if r.name == "dledger.store.flusher" and "store failed" in r.getMessage()]
    assert len(failed) == 1
    wait_until(lambda: any(f.is_leader for f in followers), what="a follower leading")
    new = next(f for f in followers if f.is_leader)
    assert new.get(new.append([b"after"]).result(15))[0].body == b"after"
    node_dir = store.node_dir
    leader.shutdown()
    assert node_dir is not None and (node_dir / "abort").exists()
