"""Group commit and flush bookkeeping of the file store (dledger/store/flusher.py)."""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from dledger.codes import DLedgerError, ResponseCode
from dledger.store.mmap_store import MmapLogStore, StoreConfig, SyncMmapLogStore
from dledger.store.segment_list import SegmentList

pytestmark = pytest.mark.unit

SYNC = StoreConfig(
    data_file_size=1 << 20,
    index_file_size=1 << 16,
    flush_mode="sync",
    warm_ahead_bytes=0,
    checkpoint_interval_ms=10**9,
)
WAIT_S = 10.0  # bound for every wait below (they end at once when the code is right)


def _until(predicate: Callable[[], bool]) -> None:
    """Wait (bounded) for another thread to reach a state, polling."""
    ready = threading.Event()
    for _ in range(int(WAIT_S * 1000)):
        if predicate():
            return
        ready.wait(0.001)
    raise AssertionError("the other thread never got there")


class Recorder:
    """Replaces the store's msync: records data ranges once durable; can hold the next
    data msync until released, or fail."""

    def __init__(self, store: MmapLogStore) -> None:
        self.store = store
        self.real = store._msync
        self.synced: list[tuple[int, int]] = []
        self.hold = False
        self.holding = threading.Event()
        self.release = threading.Event()
        self.error: OSError | None = None
        store._msync = self  # type: ignore[method-assign]

    def __call__(self, segments: SegmentList, frm: int, to: int) -> None:
        if segments is not self.store.data_list:
            self.real(segments, frm, to)
            return
        if self.error is not None:
            raise self.error
        if self.hold:
            self.hold = False
            self.holding.set()
            assert self.release.wait(WAIT_S)
        self.real(segments, frm, to)
        self.synced.append((frm, to))

    def durable_to(self) -> int:
        """End of the data prefix the recorded msyncs cover (from 0, in order)."""
        end = 0
        for frm, to in self.synced:
            if frm - frm % 4096 <= end:
                end = max(end, to)
        return end


def test_every_sync_append_returns_with_its_bytes_msynced(tmp_path: Path) -> None:
    store = SyncMmapLogStore(tmp_path, SYNC)
    store.term = 1
    rec = Recorder(store)
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for _ in range(20):
                first = store.append_many([bytes([k]) * 700] * 5)
                last = store.get(first + 4)
                assert rec.durable_to() >= last.pos + last.size
                assert store._durable_end_index >= first + 4
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert store.end_index == 6 * 20 * 5 - 1
    assert len(rec.synced) <= 6 * 20  # never more than one msync per append
    store.close()


def test_waiters_arriving_during_an_msync_share_the_next_one(tmp_path: Path) -> None:
    store = SyncMmapLogStore(tmp_path, SYNC)
    store.term = 1
    rec = Recorder(store)
    rec.hold = True
    first = threading.Thread(target=store.append, args=(b"a" * 100,))
    first.start()
    assert rec.holding.wait(WAIT_S)  # the first append's msync is in flight
    others = [threading.Thread(target=store.append_many, args=([b"b" * 100] * 3,)) for _ in range(4)]
    for t in others:
        t.start()
    _until(lambda: len(store._sleepers) == 4)
    rec.release.set()
    for t in [first, *others]:
        t.join()
    assert store._durable_end_index == store.end_index == 12
    assert len(rec.synced) == 2  # the one in flight, then one for all four
    store.close()


def test_a_truncation_voids_the_msync_in_flight(tmp_path: Path) -> None:
    """An msync that started before the log's end moved back must not publish its end
    index: entries appended at those indexes afterwards are not durable yet."""
    store = SyncMmapLogStore(tmp_path, SYNC)
    store.term = 1
    store.append_many([b"old"] * 10)
    rec = Recorder(store)
    rec.hold = True
    appender = threading.Thread(target=store.append_many, args=([b"doomed"] * 5,))
    appender.start()
    assert rec.holding.wait(WAIT_S)  # flushing entries 10..14
    # cut the log back to 0..7 and append two new entries 8, 9 without waiting
    store._acquire()
    try:
        cut = store.get_locked(8).pos
        store._set_state(store.begin_index, 7, 1, cut)
        store._after_shrink()
    finally:
        store._release()
    MmapLogStore.append_many(store, [b"new8", b"new9"])
    new_end = int(store.write_pos)
    rec.release.set()
    appender.join()
    # the held msync published nothing: the appender flushed again, past the new entries
    assert store._durable_end_index == store.end_index == 9
    assert store._flushed_data == new_end
    assert rec.synced[-1][1] == new_end and len(rec.synced) == 2
    store.close()


def test_a_failed_msync_fails_every_waiter_and_the_store(tmp_path: Path) -> None:
    store = SyncMmapLogStore(tmp_path, SYNC)
    store.term = 1
    store.append(b"durable")
    rec = Recorder(store)
    rec.hold = True
    outcomes: list[BaseException | int] = []

    def append() -> None:
        try:
            outcomes.append(store.append(b"never acknowledged"))
        except BaseException as exc:
            outcomes.append(exc)

    first = threading.Thread(target=append)
    first.start()
    assert rec.holding.wait(WAIT_S)
    others = [threading.Thread(target=append) for _ in range(3)]
    for t in others:
        t.start()
    _until(lambda: len(store._sleepers) == 3)
    rec.error = OSError(errno.EIO, "Input/output error")

    def failing(segments: SegmentList, frm: int, to: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    rec.real = failing
    rec.release.set()
    for t in [first, *others]:
        t.join()
    assert len(outcomes) == 4
    for outcome in outcomes:
        assert isinstance(outcome, DLedgerError) and outcome.code == ResponseCode.DISK_ERROR
    assert store._durable_end_index == 0
    with pytest.raises(DLedgerError) as info:
        store.append(b"after")
    assert info.value.code == ResponseCode.DISK_ERROR
    store.close()


def test_async_flush_covers_padding_past_the_last_entry(tmp_path: Path) -> None:
    config = StoreConfig(data_file_size=4096, index_file_size=1024, warm_ahead_bytes=0, checkpoint_interval_ms=10**9)
    store = MmapLogStore(tmp_path, config)
    store.term = 1
    rec = Recorder(store)
    store.append(b"x" * 3000)
    store.append(b"y" * 2000)  # pads the first segment with a blank, lands in the second
    store.flush()
    assert rec.durable_to() == store._flushed_data == store.write_pos == 4096 + 48 + 2000
    assert store._flushed_index == 2 * 32
    store.flush()  # nothing new: no msync
    assert len(rec.synced) == 1
    store.close()


def test_sync_mode_leaves_the_data_to_the_appends_and_flushes_the_index_with_the_checkpoint(
    tmp_path: Path,
) -> None:
    store = SyncMmapLogStore(tmp_path, SYNC)
    store.term = 1
    store.append_many([b"z"] * 3)
    rec = Recorder(store)
    store._last_checkpoint_ms = float("-inf")  # the checkpoint is due
    store._flush_once()
    assert rec.synced == [] and store._flushed_index == 3 * 32
    assert (tmp_path / "checkpoint").exists()
    store.append(b"w")  # msyncs its data itself
    synced, flushed_index = list(rec.synced), store._flushed_index
    store._flush_once()  # no checkpoint due: no index flush either
    assert rec.synced == synced and store._flushed_index == flushed_index
    store.close()
