"""Snapshots in the threaded node: taken at the threshold, the log compacted, loaded at
restart (damaged ones skipped), a failing save dropped, and a follower left behind a
compacted log brought back by InstallSnapshot (LocalNetwork)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dledger.clock import ManualClock
from dledger.codes import DLedgerError, ResponseCode
from dledger.node import DLedgerNode
from dledger.node_store import open_node_store
from dledger.statemachine.snapshot_files import DATA_FILE, META_FILE, SnapshotMeta
from dledger.store.mmap_store import MmapLogStore
from tests.node.conftest import NodeCluster, wait_until
from tests.node.snapmachine import SumMachine

SNAP: dict[str, Any] = {"enable_snapshot": True, "snapshot_threshold": 20}


def snapshot_dirs(node_dir: Path) -> list[int]:
    root = node_dir / "snapshot"
    return sorted(int(p.name.split("_")[1]) for p in root.glob("snapshot_*"))


def append_values(node: DLedgerNode, values: range) -> None:
    for value in values:
        node.append([str(value).encode()]).result(10)


def append_until(node: DLedgerNode, done: Callable[[], bool], start: int = 0, limit: int = 2000) -> int:
    """Append start, start + 1, ... until `done()`; returns the next value."""
    value = start
    while not done():
        assert value < start + limit, "condition never reached"
        node.append([str(value).encode()]).result(10)
        value += 1
        if value % 20 == 0:
            wait_until(lambda: node.applied_index == node.store.end_index, what="apply")
    return value


def machine(cluster: NodeCluster, node_id: str) -> SumMachine:
    found = cluster.machines[node_id]
    assert isinstance(found, SumMachine)
    return found


def node_dir(cluster: NodeCluster, node_id: str) -> Path:
    return Path(cluster.config(node_id).default_path)


def test_threshold_takes_snapshot_compacts_and_restart_replays_only_the_rest(
    cluster_factory: Callable[..., NodeCluster],
) -> None:
    cluster = cluster_factory(1, machine_factory=SumMachine, **SNAP)
    node = cluster.leader()
    append_values(node, range(25))
    wait_until(lambda: node.snapshots is not None and node.snapshots.last_index >= 19, what="a snapshot")
    taken = node.snapshots.last_index if node.snapshots else -1
    assert snapshot_dirs(node_dir(cluster, "n0")) == [taken]
    # RESET_ALL_SYNC: the prefix up to the snapshot goes right after it (snapshot thread)
    # (every entry was in it here: the log is empty, ending at the snapshot)
    wait_until(lambda: node.store.begin_index in (-1, taken + 1), what="compaction")
    append_values(node, range(25, 30))
    assert node.store.begin_index == taken + 1
    end = node.store.end_index
    wait_until(lambda: node.applied_index == end, what="everything applied")
    assert node.status().snapshot_index == taken
    cluster.stop("n0")

    again = cluster.start("n0")
    sm = machine(cluster, "n0")
    assert sm.loads == [sm.loads[0]] and sm.loads[0] <= taken  # the snapshot loaded first
    wait_until(lambda: again.applied_index >= end, what="replay after restart")
    assert sm.applied and min(sm.applied) > taken  # only entries after the snapshot replayed
    assert sm.state() == (sum(range(30)), 30)


def test_damaged_newest_snapshot_falls_back_to_an_older_one(cluster_factory: Callable[..., NodeCluster]) -> None:
    cluster = cluster_factory(
        1,
        machine_factory=SumMachine,
        snapshot_entry_reset_strategy="RESET_BUT_KEEP_SOME_SYNC",
        reset_snapshot_entries_but_keep_last_entries_num=1000,  # keeps the whole log here
        **SNAP,
    )
    node = cluster.leader()
    # a snapshot is due after a batch applied once the last save ended: keep appending
    total = append_until(node, lambda: len(snapshot_dirs(node_dir(cluster, "n0"))) == 2)
    older, newest = snapshot_dirs(node_dir(cluster, "n0"))
    cluster.stop("n0")
    data = node_dir(cluster, "n0") / "snapshot" / f"snapshot_{newest}" / DATA_FILE
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0xFF
    data.write_bytes(bytes(raw))

    again = cluster.start("n0")
    sm = machine(cluster, "n0")
    assert sm.loads == [older]
    wait_until(lambda: again.applied_index >= again.store.end_index, what="replay")
    assert sm.state() == (sum(range(total)), total)
    assert min(sm.applied) == older + 1


def test_no_loadable_snapshot_over_a_compacted_log_refuses_to_start(
    cluster_factory: Callable[..., NodeCluster],
) -> None:
    cluster = cluster_factory(1, machine_factory=SumMachine, **SNAP)
    node = cluster.leader()
    append_values(node, range(25))
    wait_until(lambda: node.store.begin_index != 0, what="a snapshot and compaction")
    begin = node.store.end_index + 1  # the log is empty: it resumes after the snapshot
    cluster.stop("n0")
    for index in snapshot_dirs(node_dir(cluster, "n0")):
        (node_dir(cluster, "n0") / "snapshot" / f"snapshot_{index}" / DATA_FILE).write_bytes(b"garbage")

    with pytest.raises(DLedgerError) as refused:
        cluster.start("n0")
    assert refused.value.code == ResponseCode.LOAD_SNAPSHOT_ERROR
    assert f"log starts at index {begin}" in str(refused.value)
    cluster.nodes.pop("n0", None)
    cluster.net.unregister("n0")
    # nothing was lost: the store is untouched and its lock released (it opens again)
    shutil.rmtree(node_dir(cluster, "n0") / "snapshot")
    with pytest.raises(DLedgerError):
        cluster.start("n0")
    cluster.nodes.pop("n0", None)


def test_failing_load_is_skipped_and_the_log_replayed_when_it_starts_at_zero(
    cluster_factory: Callable[..., NodeCluster],
) -> None:
    cluster = cluster_factory(
        1,
        machine_factory=SumMachine,
        snapshot_entry_reset_strategy="RESET_BUT_KEEP_SOME_SYNC",
        reset_snapshot_entries_but_keep_last_entries_num=1000,
        **SNAP,
    )
    node = cluster.leader()
    append_values(node, range(25))
    wait_until(lambda: len(snapshot_dirs(node_dir(cluster, "n0"))) == 1, what="a snapshot")
    cluster.stop("n0")

    def failing() -> SumMachine:
        sm = SumMachine()
        sm.fail_load = True
        return sm

    cluster.machine_factory = failing
    again = cluster.start("n0")
    sm = machine(cluster, "n0")
    wait_until(lambda: again.applied_index >= again.store.end_index, what="replay")
    assert sm.loads == [] and sm.applied[0] == 0
    assert sm.state() == (sum(range(25)), 25)


def test_failing_save_is_dropped_and_apply_goes_on(cluster_factory: Callable[..., NodeCluster]) -> None:
    def failing() -> SumMachine:
        sm = SumMachine()
        sm.fail_save = True
        return sm

    cluster = cluster_factory(1, machine_factory=failing, **SNAP)
    node = cluster.leader()
    sm = machine(cluster, "n0")
    append_values(node, range(25))
    assert node.snapshots is not None and node.snapshots.manager is not None
    manager = node.snapshots.manager
    wait_until(lambda: manager.failures >= 1 and not manager.saving, what="a failed save")
    assert snapshot_dirs(node_dir(cluster, "n0")) == []
    assert not (node_dir(cluster, "n0") / "snapshot" / "tmp").exists()
    assert node.store.begin_index == 0  # nothing compacted
    sm.fail_save = False
    manager.clock = ManualClock(1 << 62)  # the retry delay after a failure has passed (it is 1 s)
    append_values(node, range(25, 50))
    wait_until(lambda: snapshot_dirs(node_dir(cluster, "n0")) != [], what="a snapshot once saves work")
    wait_until(lambda: node.applied_index == node.store.end_index, what="apply")
    assert sm.state() == (sum(range(50)), 50)


def test_apply_goes_on_while_a_save_is_in_flight(cluster_factory: Callable[..., NodeCluster]) -> None:
    gate_machine = SumMachine()
    gate = gate_machine.save_gate = __import__("threading").Event()
    cluster = cluster_factory(1, machine_factory=lambda: gate_machine, **SNAP)
    node = cluster.leader()
    append_values(node, range(25))
    assert node.snapshots is not None and node.snapshots.manager is not None
    manager = node.snapshots.manager
    wait_until(lambda: manager.saving, what="a save in flight")
    append_values(node, range(25, 60))  # applied while the save waits
    wait_until(lambda: node.applied_index == node.store.end_index, what="apply during the save")
    assert gate_machine.captures == 1  # at most one capture/save in flight
    gate.set()
    wait_until(lambda: snapshot_dirs(node_dir(cluster, "n0")) != [], what="the save")
    assert snapshot_dirs(node_dir(cluster, "n0"))[0] < 59  # the captured index, not the later one


def stop_seen_gone(cluster: NodeCluster, leader: DLedgerNode, node_id: str) -> None:
    """Stop `node_id`, and wait until the leader's heartbeats find it gone: until then its
    compaction keeps what that follower needs (dledger.raft.log_floors)."""
    cluster.stop(node_id)
    wait_until(lambda: not leader.core.elector.peers_live_table.get(node_id, True), what="the leader to see it gone")


def leave_a_follower_behind(cluster: NodeCluster) -> tuple[DLedgerNode, str]:
    """Append 0..59, a follower stopped after 0..4, until the leader compacted past it;
    the leader and the stopped follower's id."""
    leader = cluster.leader()
    append_values(leader, range(5))
    lagging = next(i for i in cluster.ids if i != leader.config.self_id)
    wait_until(lambda: cluster.nodes[lagging].applied_index >= 4, what="the follower caught up once")
    stop_seen_gone(cluster, leader, lagging)
    append_values(leader, range(5, 60))
    wait_until(lambda: leader.store.begin_index > 10, what="the leader compacted")
    return leader, lagging


@pytest.mark.parametrize("wiped", [False, True], ids=["left-behind", "wiped"])
def test_follower_behind_a_compacted_log_is_brought_back_by_install(
    cluster_factory: Callable[..., NodeCluster], wiped: bool
) -> None:
    cluster = cluster_factory(3, machine_factory=SumMachine, **SNAP)
    leader, lagging = leave_a_follower_behind(cluster)
    if wiped:
        shutil.rmtree(node_dir(cluster, lagging))
        cluster.start(lagging, initial_cluster_state="existing")
    else:
        cluster.start(lagging)
    follower = cluster.nodes[lagging]
    sm = machine(cluster, lagging)
    wait_until(lambda: follower.applied_index >= leader.store.end_index, 60, what="the follower caught up by install")
    assert sm.loads, "the follower loaded an installed snapshot"
    assert follower.snapshots is not None and follower.snapshots.last_index >= sm.loads[0]
    append_values(leader, range(60, 70))  # the log continues after the install
    end = leader.store.end_index
    wait_until(lambda: follower.applied_index >= end, 60, what="pushes after the install")
    wait_until(lambda: leader.applied_index >= end, 60, what="the leader's own apply")  # its own thread
    assert sm.state() == machine(cluster, leader.config.self_id).state() == (sum(range(70)), 70)


@pytest.mark.parametrize("log_left", ["entries", "none"])
def test_a_leader_whose_newest_snapshot_is_damaged_takes_a_new_one_for_a_follower(
    cluster_factory: Callable[..., NodeCluster], log_left: str
) -> None:
    """The newest snapshot that verifies ends below the leader's log (a newer one was
    damaged on disk): it cannot bring a follower up to date. Before, the leader sent it
    again and again (about 40 times a second) and the follower never caught up; now it
    takes a snapshot at its applied index and sends that. `none`: the damaged snapshot
    ended at the leader's last entry, so compaction left no entry (the check took the
    empty log's first index, -1, and sent the older snapshot again and again)."""
    cluster = cluster_factory(3, machine_factory=SumMachine, **SNAP)
    leader = cluster.leader()
    own = node_dir(cluster, leader.config.self_id)
    lagging = next(i for i in cluster.ids if i != leader.config.self_id)
    assert leader.snapshots is not None and leader.snapshots.manager is not None
    manager = leader.snapshots.manager

    def quiet() -> bool:  # every entry applied, and no snapshot saving or due (the apply thread starts it)
        applied = leader.applied_index
        return applied == leader.store.end_index and not manager.saving and applied - manager.last_index < 20

    def two_snapshots_and_the_log_left() -> bool:
        found = snapshot_dirs(own)
        if log_left == "none":  # one entry at a time: a snapshot then covers the whole log
            wait_until(quiet, what="a quiet leader")
            return len(found) >= 2 and leader.store.begin_index < 0
        return len(found) >= 2 and leader.store.begin_index > found[0] + 1

    total = append_until(leader, two_snapshots_and_the_log_left)
    wait_until(quiet, what="a quiet leader")
    damaged = snapshot_dirs(own)[-1]
    cluster.stop(lagging)
    shutil.rmtree(node_dir(cluster, lagging))
    data = own / "snapshot" / f"snapshot_{damaged}" / DATA_FILE
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    assert leader.snapshots.store.latest() is not None and leader.snapshots.store.latest().index < damaged

    cluster.start(lagging, initial_cluster_state="existing")
    follower = cluster.nodes[lagging]
    wait_until(lambda: follower.applied_index >= leader.store.end_index, 30, what="the follower caught up by install")
    sm = machine(cluster, lagging)
    assert sm.loads and sm.loads[-1] >= leader.store.begin_index - 1
    assert sm.state() == (sum(range(total)), total)
    latest = leader.snapshots.store.latest()
    assert latest is not None and latest.index >= damaged  # taken again, the damaged one replaced


def test_reset_but_keep_some_keeps_the_last_entries_before_the_snapshot(
    cluster_factory: Callable[..., NodeCluster],
) -> None:
    cluster = cluster_factory(
        1,
        machine_factory=SumMachine,
        snapshot_entry_reset_strategy="RESET_BUT_KEEP_SOME_SYNC",
        reset_snapshot_entries_but_keep_last_entries_num=7,
        **SNAP,
    )
    node = cluster.leader()
    append_values(node, range(25))
    wait_until(lambda: node.store.begin_index > 0, what="compaction")
    assert node.snapshots is not None
    assert node.store.begin_index == node.snapshots.last_index - 7 + 1
    assert node.get(node.store.begin_index)[0].body == str(node.store.begin_index).encode()
    with pytest.raises(DLedgerError) as gone:
        node.get(node.store.begin_index - 1)
    assert gone.value.code == ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN
    cluster.stop("n0")
    again = cluster.start("n0")  # the kept entries stay kept across a restart
    assert again.store.begin_index == node.snapshots.last_index - 7 + 1


def test_restart_drops_a_log_whose_entry_at_the_snapshot_index_is_another(
    cluster_factory: Callable[..., NodeCluster],
) -> None:
    """Found by the snapshot simulation's power losses (tests/sim/snapshot_power.py): a
    follower installed snapshot (N, t) over a log holding an uncommitted entry of another
    term at N; the power failed before its log reset was durable, so it restarted with
    the snapshot and that stale log. The entry at N and the ones after it are not
    committed (the committed entry at N is the snapshot's), so the log is dropped from
    there instead of being taken as committed up to N."""
    keep = 5
    cluster = cluster_factory(
        1,
        machine_factory=SumMachine,
        snapshot_entry_reset_strategy="RESET_BUT_KEEP_SOME_SYNC",
        reset_snapshot_entries_but_keep_last_entries_num=keep,
        **SNAP,
    )
    node = cluster.leader()
    append_values(node, range(25))
    wait_until(lambda: node.store.begin_index > 0, what="compaction")
    taken = snapshot_dirs(node_dir(cluster, "n0"))[-1]
    log_term = node.store.term_at(taken)
    append_values(node, range(25, 28))  # entries after the snapshot, of the same history
    cluster.stop("n0")
    # the snapshot is of another history at `taken`: the term of its last entry differs
    snap = node_dir(cluster, "n0") / "snapshot" / f"snapshot_{taken}"
    old = SnapshotMeta.from_json((snap / META_FILE).read_bytes())
    meta = SnapshotMeta(taken, log_term + 1, old.crc32, old.size)
    (snap / META_FILE).write_bytes(meta.to_json())

    again = cluster.start("n0")
    sm = machine(cluster, "n0")
    assert sm.loads == [taken]
    store = again.store
    # nothing at or below the snapshot's index is left in the log, nor after it: the
    # log continues right after the snapshot, in its term
    assert store.end_index >= taken
    assert store.begin_index == -1 or store.begin_index > taken, (store.begin_index, store.end_index)
    if store.begin_index >= 0:  # (empty here: the log ends at the snapshot)
        for index in range(store.begin_index, store.end_index + 1):
            assert store.term_at(index) > log_term  # written in the new leadership's terms
    # and the log is usable: new entries commit and apply after the snapshot
    assert cluster.leader() is again
    append_values(again, range(100, 103))
    wait_until(lambda: again.applied_index == again.store.end_index, what="apply")
    assert all(index > taken for index in sm.applied)


def test_restart_keeps_a_log_that_matches_the_snapshot(cluster_factory: Callable[..., NodeCluster]) -> None:
    """The check above leaves a log whose entry at the snapshot's index has its term."""
    keep = 5
    cluster = cluster_factory(
        1,
        machine_factory=SumMachine,
        snapshot_entry_reset_strategy="RESET_BUT_KEEP_SOME_SYNC",
        reset_snapshot_entries_but_keep_last_entries_num=keep,
        **SNAP,
    )
    node = cluster.leader()
    append_values(node, range(25))
    wait_until(lambda: node.store.begin_index > 0, what="compaction")
    taken = snapshot_dirs(node_dir(cluster, "n0"))[-1]
    begin, end = node.store.begin_index, node.store.end_index
    cluster.stop("n0")
    again = cluster.start("n0")
    assert (again.store.begin_index, again.store.end_index) == (begin, end)
    assert again.store.begin_index <= taken <= again.store.end_index


def test_an_install_of_what_the_log_holds_or_has_committed_is_not_needed(tmp_path: Path) -> None:
    """A follower needs no snapshot at or below its committed index, nor one whose
    (index, term) its log holds (Raft §7: it keeps that entry and those after it); it
    needs one past its log, or where its log holds another term."""
    import threading
    from types import SimpleNamespace

    from dledger.config import DLedgerConfig
    from dledger.node_snapshots import NodeSnapshots
    from dledger.store.memory import MemoryLogStore

    store = MemoryLogStore()
    store.term = 1
    for _ in range(7):  # entries 0..6, term 1
        store.append(b"x")
    core = SimpleNamespace(member_state=SimpleNamespace(committed_index=3))
    host = SimpleNamespace(config=DLedgerConfig(), caller=None, store=store, _lock=threading.Lock(), core=core)
    snapshots = NodeSnapshots(host, tmp_path)  # type: ignore[arg-type]
    assert snapshots._holds(2, 1) == snapshots._holds(3, 7) == "its committed index 3 is at or past it"
    assert snapshots._holds(5, 1) == snapshots._holds(6, 1) == "its log holds that entry"
    assert snapshots._holds(5, 2) is None  # another term there: the log does not match
    assert snapshots._holds(7, 1) is None  # past the log


@pytest.mark.parametrize("snapshots", [False, True])
def test_time_retention_keeps_what_a_restart_replays(
    cluster_factory: Callable[..., NodeCluster], snapshots: bool
) -> None:
    """A member with a state machine replays the entries after its newest snapshot when it
    starts (all of them without snapshots). Time retention deleted applied entries of any
    segment old enough (after a wall clock stepped forward, seconds-old ones): the member
    then refused to start ("the log starts at index N, not 0"). Now it keeps every entry
    after the newest snapshot: none goes without snapshots."""
    options = {**SNAP, "snapshot_threshold": 400} if snapshots else {}
    cluster = cluster_factory(1, machine_factory=SumMachine, data_file_size=64 * 1024, **options)
    node = cluster.leader()
    for start in range(0, 500, 50):
        node.append([b"%01000d" % k for k in range(start, start + 50)]).result(10)
    keep = 400 if snapshots else 0
    wait_until(lambda: node.applied_index == 499 and node.store.begin_index in (0, keep), what="apply, compaction")

    def restarted() -> DLedgerNode:
        cluster.stop("n0")  # (its producer table is saved: that floor no longer holds entries back)
        cluster.start("n0")
        again = cluster.leader()
        wait_until(lambda: again.applied_index == 499, what="the replay after a restart")
        assert machine(cluster, "n0").state() == (sum(range(500)), 500)
        return again

    node = restarted()
    store = node.store
    assert isinstance(store, MmapLogStore) and store.data_list.table.count >= 2
    old = time.time() - 4 * 24 * 3600  # as if the wall clock had stepped four days forward
    for path in store.data_list.directory.iterdir():
        os.utime(path, (old, old))
    node._quorum_pass()  # the pass that sets the floor, run here once more
    assert store.retention_floor == keep
    store.cleaner.delete_expired(force=False)
    assert store.begin_index == keep
    restarted()


def test_a_member_store_expires_nothing_before_its_node_set_the_floor(
    cluster_factory: Callable[..., NodeCluster],
) -> None:
    """The store's own floor (every committed entry) held until the node's first pass: a
    retention pass in between deleted entries its state machine had still to replay."""
    cluster = cluster_factory(1, machine_factory=SumMachine, data_file_size=64 * 1024)
    node = cluster.leader()
    node.append([b"%01000d" % k for k in range(200)]).result(10)
    cluster.stop("n0")
    store = open_node_store(cluster.config("n0"))
    try:
        assert store.committed_index == 199 and store.retention_floor == 0
        assert store.cleaner.delete_expired(force=True) == 0
    finally:
        store.close()


def test_reads_below_a_log_compacted_to_empty_say_the_entries_are_gone(
    cluster_factory: Callable[..., NodeCluster],
) -> None:
    """A snapshot at the last entry compacts the whole log (first index -1): reads of its
    entries answered INDEX_OUT_OF_RANGE, which a Spark read took for a failure, not for
    entries compacted away (its failOnDataLoss did not apply)."""
    cluster = cluster_factory(1, machine_factory=SumMachine, **SNAP)
    node = cluster.leader()
    append_values(node, range(20))
    wait_until(lambda: node.store.begin_index < 0 and node.store.end_index == 19, what="the log compacted to empty")
    for read in (lambda: node.read_columns(5, 10, 1 << 20), lambda: node.get(5)):
        with pytest.raises(DLedgerError) as info:
            read()
        assert info.value.code == ResponseCode.INDEX_LESS_THAN_LOCAL_BEGIN and "first kept 20" in str(info.value)
    assert list(node.iterate(0, 20)) == []
