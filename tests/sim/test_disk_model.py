"""The simulated disk is honest: power loss keeps exactly what was msynced (plus the torn
part it chose), a process crash keeps everything written; and the store survives both
the ways the simulation uses them."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.store.mmap_store import MmapLogStore, StoreConfig, SyncMmapLogStore
from tests.sim.disk import NodeDisk, SimCrash, register_disk, traced_segment_lists, unregister_disk

pytestmark = pytest.mark.sim

ASYNC = StoreConfig(data_file_size=4096, index_file_size=1024, warm_ahead_bytes=0, checkpoint_interval_ms=10**9)
SYNC = StoreConfig(
    data_file_size=4096, index_file_size=1024, warm_ahead_bytes=0, checkpoint_interval_ms=10**9, flush_mode="sync"
)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[NodeDisk]:
    node_disk = NodeDisk(tmp_path / "dledger-n0")
    register_disk(node_disk)
    with traced_segment_lists():
        yield node_disk
    unregister_disk(node_disk)


def crash(store: MmapLogStore) -> None:
    """A process crash: the mappings go, nothing is flushed."""
    store.data_list.close()
    store.index_list.close()
    store._lock.release()  # the kernel drops a killed process's lock


def bodies(store: MmapLogStore) -> list[bytes]:
    return [store.get_body(i) for i in range(store.end_index + 1)]


def fill(store: MmapLogStore, frm: int, to: int) -> None:
    store.term = 1
    for i in range(frm, to):
        assert store.append(b"%d." % i + b"x" * 200) == i


def test_power_loss_keeps_only_what_was_msynced(disk: NodeDisk) -> None:
    store = MmapLogStore(disk.node_dir, ASYNC)
    fill(store, 0, 30)  # several 4 KiB segments
    store.flush()
    fill(store, 30, 40)
    crash(store)
    disk.power_loss(random.Random(0), mode="lost")
    store = MmapLogStore(disk.node_dir, ASYNC)
    assert store.end_index == 29
    assert disk.dirty_bytes() == 0
    crash(store)


def test_process_crash_keeps_every_written_byte(disk: NodeDisk) -> None:
    store = MmapLogStore(disk.node_dir, ASYNC)
    fill(store, 0, 40)
    crash(store)
    assert disk.dirty_bytes() > 0  # none of it is durable
    store = MmapLogStore(disk.node_dir, ASYNC)
    assert store.end_index == 39
    crash(store)


@pytest.mark.parametrize("mode", ["kept", "prefix", "pages"])
def test_a_torn_tail_recovers_to_a_prefix(disk: NodeDisk, mode: str) -> None:
    store = MmapLogStore(disk.node_dir, ASYNC)
    fill(store, 0, 10)
    store.flush()
    fill(store, 10, 60)
    expected = bodies(store)
    crash(store)
    disk.power_loss(random.Random(3), mode=mode)
    store = MmapLogStore(disk.node_dir, ASYNC)
    assert 9 <= store.end_index <= 59
    assert bodies(store) == expected[: store.end_index + 1]
    if mode == "kept":
        assert store.end_index == 59
    crash(store)


def test_sync_appends_are_durable_when_they_return(disk: NodeDisk) -> None:
    store = SyncMmapLogStore(disk.node_dir, SYNC)
    fill(store, 0, 40)
    expected = bodies(store)
    crash(store)
    disk.power_loss(random.Random(0), mode="lost")
    store = SyncMmapLogStore(disk.node_dir, SYNC)
    assert bodies(store) == expected
    crash(store)


def test_a_crash_armed_msync_raises_before_syncing(disk: NodeDisk) -> None:
    store = SyncMmapLogStore(disk.node_dir, SYNC)
    fill(store, 0, 5)
    disk.crash_armed = True
    store.term = 1
    with pytest.raises(SimCrash):
        store.append(b"never durable")
    assert disk.crashed
    crash(store)
    disk.crashed = False  # the next process starts
    disk.power_loss(random.Random(0), mode="lost")
    store = SyncMmapLogStore(disk.node_dir, SYNC)
    assert store.end_index == 4
    crash(store)


def test_what_a_restart_recovered_is_durable(disk: NodeDisk) -> None:
    """Process crash with an unflushed tail, restart, checkpoint, then power loss: the
    checkpoint may only claim what is on disk, so the store must reopen (it refused to
    with CorruptStoreError when open() took the recovered tail as flushed)."""
    store = MmapLogStore(disk.node_dir, ASYNC)
    fill(store, 0, 10)
    store.flush()
    fill(store, 10, 20)  # in the page cache only
    crash(store)
    store = MmapLogStore(disk.node_dir, ASYNC)
    assert store.end_index == 19
    store.update_committed_index(19)
    store.flush()
    store.write_checkpoint()  # claims committedIndex=19, endIndex=19
    crash(store)
    disk.power_loss(random.Random(0), mode="lost")
    store = MmapLogStore(disk.node_dir, ASYNC)
    assert store.end_index == 19 and store.committed_index == 19
    crash(store)
