"""Idempotent producers in the threaded node: the producer table travels in snapshots
(a member brought back by InstallSnapshot knows the producers stamped before it), is
saved and read back at restart, and holds retention back until saved."""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import generate_latest

from dledger import node_producers
from dledger.codes import DLedgerError, ResponseCode
from dledger.config import DLedgerConfig, StoreConfig
from dledger.entry import HEADER_SIZE, MAGIC_RECORD, MAX_ENTRY_SIZE, Entry
from dledger.node_producers import NodeProducers, read_stamp
from dledger.raft.producer_log import StampFold
from dledger.raft.producers import MAX_ID, ProducerTable, Stamp, Verdict
from dledger.record import STAMP_SIZE, encode_record, stamp_record_body
from dledger.statemachine.snapshot_manager import read_companion
from dledger.store.mmap_store import MmapLogStore
from tests.node.conftest import NodeCluster, wait_until
from tests.node.snapmachine import SumMachine
from tests.node.test_snapshots import SNAP, append_values, node_dir, stop_seen_gone

PID = 77
RESEND = (ResponseCode.NOT_LEADER, ResponseCode.TERM_CHANGED, ResponseCode.WAIT_QUORUM_ACK_TIMEOUT)


class RecordSumMachine(SumMachine):
    """SumMachine that counts record entries as 0."""

    def on_apply(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.total += int(entry.body) if entry.magic != MAGIC_RECORD else 0
            self.count += 1
            self.last = entry.index
            self.applied.append(entry.index)


def _produce(cluster: NodeCluster, first_seq: int, count: int) -> tuple[tuple[int, int], ...]:
    """Send one numbered request to the leader, as a client does: again, to whoever leads
    then, until it is answered (on a loaded machine an election may come in between)."""
    bodies = [encode_record(b"p%d" % seq) for seq in range(first_seq, first_seq + count)]
    for _ in range(10):
        try:
            answer = cluster.leader().append_idempotent(bodies, PID, 0, first_seq)
            answer.future.result(10)
            return answer.runs
        except DLedgerError as exc:
            if exc.code not in (
                ResponseCode.NOT_LEADER,
                ResponseCode.TERM_CHANGED,
                ResponseCode.WAIT_QUORUM_ACK_TIMEOUT,
            ):
                raise
    raise AssertionError("no leader took the request")


def test_a_member_brought_back_by_install_knows_the_producers_in_the_snapshot(
    cluster_factory: Callable[..., NodeCluster],
) -> None:
    cluster = cluster_factory(3, machine_factory=RecordSumMachine, **SNAP)
    leader = cluster.leader()
    runs = _produce(cluster, 0, 3)
    lagging = next(i for i in cluster.ids if i != leader.config.self_id)
    stop_seen_gone(cluster, leader, lagging)
    append_values(leader, range(60))
    wait_until(lambda: leader.store.begin_index > runs[0][0] + 3, what="the leader compacted the producer's entries")
    snapshot = leader.snapshots.store.latest() if leader.snapshots is not None else None
    assert snapshot is not None
    with snapshot.open() as reader:  # the snapshot carries the table
        assert read_companion(reader) is not None
    shutil.rmtree(node_dir(cluster, lagging))
    follower = cluster.start(lagging, initial_cluster_state="existing")
    wait_until(lambda: follower.applied_index >= leader.store.end_index, 60, what="the follower installed")
    store = follower.store  # it never saw the stamped entries (an empty log starts at -1: after its end)
    first_held = store.end_index + 1 if store.begin_index < 0 else store.begin_index
    assert first_held > runs[0][0]
    check = follower.producers.log.committed.table.check(Stamp(PID, 0, 0, 3))
    assert (check.verdict, check.runs) == (Verdict.DUPLICATE, runs)
    # ... and a later leader answers a retry from it: nothing is appended twice
    cluster.stop(leader.config.self_id)
    new = cluster.leader()
    end = new.store.end_index
    retry = new.append_idempotent([encode_record(b"p%d" % s) for s in range(3)], PID, 0, 0)
    assert retry.duplicate and retry.runs == runs and retry.future.result(10) == runs[0][0] + 2
    assert new.store.end_index == end


def test_the_saved_table_is_read_back_at_restart(cluster_factory: Callable[..., NodeCluster]) -> None:
    cluster = cluster_factory(1)
    node = cluster.leader()
    runs = _produce(cluster, 0, 4) + _produce(cluster, 4, 2)
    wait_until(lambda: node.producers.log.folded_index >= runs[-1][0] + 1, what="the fold")
    assert node.status().producers == 1  # what the metrics export, to watch against maxProducers
    assert 'dledger_producers{group="g",self_id="n0"} 1.0' in generate_latest(node.metrics.registry).decode()
    cluster.stop("n0")
    assert (Path(node_dir(cluster, "n0")) / "producers").exists()
    again = cluster.start("n0")
    assert again.producers.saved_index >= runs[-1][0] + 1  # read back, not refolded from 0
    assert again.status().producers == 1
    cluster.leader()
    retry = again.append_idempotent([encode_record(b"p%d" % s) for s in range(4)], PID, 0, 0)
    assert retry.duplicate and retry.runs == (runs[0],)
    assert _produce(cluster, 6, 1)[0][0] == again.store.end_index


def test_a_body_the_stamp_would_push_over_the_entry_limit_is_refused(
    cluster_factory: Callable[..., NodeCluster],
) -> None:
    cluster = cluster_factory(1)
    node = cluster.leader()
    limit = MAX_ENTRY_SIZE - HEADER_SIZE
    body = encode_record(b"x" * (limit - 20))  # fits as a plain record, not with 36 more bytes
    assert limit - STAMP_SIZE < len(body) <= limit
    end = node.store.end_index
    with pytest.raises(DLedgerError, match="producer stamp") as info:
        node.append_idempotent([body], PID, 0, 0)
    assert info.value.code == ResponseCode.UNEXPECTED_ARGUMENT and node.store.end_index == end
    assert _produce(cluster, 0, 1)  # the producer is not started by the refusal: 0 is still new


@pytest.mark.parametrize(
    ("first_seq", "count", "code"),
    [
        (MAX_ID, 1, ResponseCode.UNKNOWN_PRODUCER),  # in range: the last number is 2^63 - 1
        (MAX_ID - 1, 2, ResponseCode.UNKNOWN_PRODUCER),
        (MAX_ID, 2, ResponseCode.UNEXPECTED_ARGUMENT),  # the last one would be 2^63
        (-1, 1, ResponseCode.UNEXPECTED_ARGUMENT),
    ],
)
def test_sequence_numbers_are_checked_to_the_int64_edge_as_stamps_are(
    cluster_factory: Callable[..., NodeCluster], first_seq: int, count: int, code: ResponseCode
) -> None:
    node = cluster_factory(1).leader()
    end = node.store.end_index
    bodies = [encode_record(b"v")] * count
    in_range = True
    try:
        Stamp(PID, 0, first_seq, count, 0)
    except ValueError:
        in_range = False
    assert in_range == (code != ResponseCode.UNEXPECTED_ARGUMENT)  # the node agrees with Stamp
    with pytest.raises(DLedgerError) as info:
        node.append_idempotent(bodies, PID, 0, first_seq)
    assert info.value.code == code and node.store.end_index == end


def test_stamps_a_snapshot_capture_folds_hold_retention_until_saved(tmp_path: Path) -> None:
    """The capture for a snapshot folds up to its index itself: stamps folded there are
    not in the saved table yet, so retention may not take their entries before a save."""
    store = MmapLogStore(tmp_path, StoreConfig())
    try:
        body = stamp_record_body(encode_record(b"p0"), PID, 0, 0, 1, 5)
        store.append_many([body, encode_record(b"x")], MAGIC_RECORD)
        end = store.end_index
        config = DLedgerConfig(group="g", self_id="n0", peers="n0-127.0.0.1:1")
        clock = [0]
        producers = NodeProducers(store, tmp_path, config, lambda: end, wall_ms=lambda: clock[0])
        assert producers.capture(end) is not None
        producers.fold_pass()  # nothing left to fold, and no save due yet
        assert producers.retention_floor() == 0  # the stamp at 0 is not saved anywhere
        clock[0] = 10_000
        producers.fold_pass()  # due: saved
        assert producers.retention_floor() == end + 1 and (tmp_path / "producers").exists()
    finally:
        store.close()


def test_a_leader_far_behind_in_folding_refuses_numbered_requests_until_the_fold_catches_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a saved table on a long log, the first numbered request would fold it all
    under the node's lock: it is refused (LEADER_NOT_READY, retried by clients) until the
    background fold has come within the limit."""
    monkeypatch.setattr(node_producers, "LEADER_FOLD_LIMIT", 10)
    store = MmapLogStore(tmp_path, StoreConfig())
    try:
        store.append_many([encode_record(b"old-%d" % k) for k in range(30)], MAGIC_RECORD)
        member = SimpleNamespace(is_leader=True, current_term=2, committed_index=store.end_index, leader_id="n0")

        def append_requests(batches: list[list[bytes]], _now_ms: int, magics: list[int]) -> list[Future[int]]:
            done: Future[int] = Future()
            done.set_result(store.append_many(batches[0], magics[0]))
            return [done]

        driver: Any = SimpleNamespace(
            core=SimpleNamespace(member_state=member), append_requests=append_requests, dispatch_all=lambda _ms: None
        )
        config = DLedgerConfig(group="g", self_id="n0", peers="n0-127.0.0.1:1")
        producers = NodeProducers(store, None, config, lambda: member.committed_index)
        end = store.end_index
        with pytest.raises(DLedgerError) as info:
            producers.append(driver, [encode_record(b"new")], PID, 0, 0, 0)
        assert info.value.code == ResponseCode.LEADER_NOT_READY and store.end_index == end
        assert "30 committed entries to go" in str(info.value)
        while producers.log.folded_index < end - 10:
            producers.fold_pass()  # what the background thread does
        answer = producers.append(driver, [encode_record(b"new")], PID, 0, 0, 0)
        assert answer.runs == ((end + 1, 1),) and store.end_index == end + 1
    finally:
        store.close()


def test_a_save_writes_outside_the_lock_and_a_snapshot_table_adopted_meanwhile_is_saved_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save takes its image under the producers' lock and writes it without the lock
    (numbered appends go on meanwhile). What is folded in, or a snapshot's table adopted,
    while it writes is not taken for saved: the next save writes it, after the first."""
    store = MmapLogStore(tmp_path, StoreConfig())
    try:
        store.append_many([stamp_record_body(encode_record(b"p0"), PID, 0, 0, 1, 5)], MAGIC_RECORD)
        committed = [store.end_index]
        config = DLedgerConfig(group="g", self_id="n0", peers="n0-127.0.0.1:1")
        producers = NodeProducers(store, tmp_path, config, lambda: committed[0], wall_ms=lambda: 10_000)
        writing, release, written = threading.Event(), threading.Event(), []
        real_write = node_producers.write_synced

        def slow_write(path: Path, data: bytes) -> None:
            writing.set()
            assert release.wait(30)
            real_write(path, data)
            written.append(data)

        monkeypatch.setattr(node_producers, "write_synced", slow_write)
        first = threading.Thread(target=producers.fold_pass)
        first.start()
        assert writing.wait(30)
        assert producers.lock.acquire(blocking=False)  # free while the image is written
        producers.lock.release()
        assert producers.retention_floor() == 0  # not saved until written
        ahead = StampFold(ProducerTable(), 0, read_stamp)  # a snapshot's table, further on
        ahead.table.record(Stamp(PID + 1, 0, 0, 1, 6), 0)
        ahead.next_index = 5
        second = threading.Thread(target=producers.load, args=(ahead.encode(),))
        second.start()
        wait_until(lambda: producers.log.committed.next_index == 5)  # adopted; its save waits
        release.set()
        first.join(30)
        second.join(30)
        assert len(written) == 2 and written[1] == ahead.encode()  # the adopted table, written last
        assert StampFold.decode((tmp_path / "producers").read_bytes(), read_stamp).encode() == ahead.encode()
        assert producers.retention_floor() == 5
    finally:
        store.close()


def test_a_save_that_cannot_write_keeps_retention_and_is_done_again_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A full disk fails the save: the warning says so, retention still keeps the stamped
    entries (nothing saved covers them), and the next pass saves once writes work."""
    store = MmapLogStore(tmp_path, StoreConfig())
    try:
        store.append_many([stamp_record_body(encode_record(b"p0"), PID, 0, 0, 1, 5)], MAGIC_RECORD)
        end = store.end_index
        config = DLedgerConfig(group="g", self_id="n0", peers="n0-127.0.0.1:1")
        clock = [10_000]
        producers = NodeProducers(store, tmp_path, config, lambda: end, wall_ms=lambda: clock[0])
        real_write = node_producers.write_synced

        def full_disk(path: Path, data: bytes) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(node_producers, "write_synced", full_disk)
        with caplog.at_level(logging.WARNING, logger="dledger.node_producers"):
            producers.fold_pass()
        assert "cannot save the producer table" in caplog.text and "No space left" in caplog.text
        assert producers.retention_floor() == 0 and not (tmp_path / "producers").exists()
        monkeypatch.setattr(node_producers, "write_synced", real_write)
        producers.fold_pass()  # the disk has room again: saved
        assert producers.retention_floor() == end + 1
        assert StampFold.decode((tmp_path / "producers").read_bytes(), read_stamp).encode() == (
            producers.log.committed.encode()
        )
    finally:
        store.close()
