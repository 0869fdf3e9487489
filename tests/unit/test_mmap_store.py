"""MmapLogStore behaviour: durability modes, fail-stop, retention, java_compat, embedded."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import pytest

import dledger
from dledger.codes import DLedgerError, ResponseCode
from dledger.store import kvfile
from dledger.store.mmap_store import MmapLogStore, StoreConfig, SyncMmapLogStore
from dledger.store.segment_list import SegmentList

pytestmark = pytest.mark.unit

SMALL = StoreConfig(data_file_size=4096, index_file_size=1024, warm_ahead_bytes=0, checkpoint_interval_ms=10**9)


def test_positions_follow_dledger_blank_padding(tmp_path: Path) -> None:
    # AppendAndGetTest.testSingleServerInFile: 100-byte bodies land at i * 148 until a
    # segment cannot hold size + 8 more bytes; then a blank pads it and the entry moves on
    with MmapLogStore.open(tmp_path, SMALL) as store:
        store.term = 1
        for i in range(40):
            assert store.append(b"\0" * 100) == i
        per_segment = (4096 - 8) // 148
        assert store.get(per_segment - 1).pos == (per_segment - 1) * 148
        assert store.get(per_segment).pos == 4096
        blank = store.data_list.table.read(per_segment * 148, 8)
        assert blank == (-1).to_bytes(4, "big", signed=True) + (4096 - per_segment * 148).to_bytes(4, "big")


def test_sync_mode_acknowledges_only_durable_entries(tmp_path: Path) -> None:
    config = StoreConfig(
        data_file_size=1 << 20,
        index_file_size=1 << 16,
        flush_mode="sync",
        warm_ahead_bytes=0,
        flush_file_interval_ms=10**7,  # no periodic flush: every msync comes from a waiting append
    )
    synced: list[tuple[int, int]] = []
    store = MmapLogStore.open(tmp_path, config)
    assert isinstance(store, SyncMmapLogStore)
    real = store._msync
    writers = 4

    def recording(segments: SegmentList, frm: int, to: int) -> None:
        if segments is store.data_list and not synced:
            # hold the first flush until every writer has appended: they must all
            # wait for it and then share the next msync (group commit)
            deadline = time.monotonic() + 10
            while store.end_index < writers * 10 - 1 and time.monotonic() < deadline:
                threading.Event().wait(0.001)
        real(segments, frm, to)
        if segments is store.data_list:
            synced.append((frm, to))

    store._msync = recording  # type: ignore[method-assign]
    store.term = 1
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            first = store.append_many([b"x" * 1000] * 10)
            end = store.get(first + 9)
            # the append returned: its bytes lie in the msynced prefix of the data log
            assert max(to for _, to in synced) >= end.pos + end.size
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert store.end_index == writers * 10 - 1
    assert len(synced) <= 2  # the first flush, then one msync for all the writers that waited
    store.close()


def test_failed_flush_stops_all_writes(tmp_path: Path) -> None:
    store = MmapLogStore.open(tmp_path, SMALL)
    store.term = 1
    store.append(b"before")

    def broken(segments: SegmentList, frm: int, to: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    store._msync = broken  # type: ignore[method-assign]
    with pytest.raises(DLedgerError) as info:
        store.flush()
    assert info.value.code == ResponseCode.DISK_ERROR
    for attempt in (lambda: store.append(b"after"), lambda: store.append_many([b"x"]), store.append_noop):
        with pytest.raises(DLedgerError) as info:
            attempt()
        assert info.value.code == ResponseCode.DISK_ERROR
    assert store.get(0).body == b"before"  # reads still work
    assert store.end_index == 0
    store.close()


def test_java_compat_writes_no_crc_and_no_noop(tmp_path: Path) -> None:
    with MmapLogStore.open(tmp_path, StoreConfig(data_file_size=4096, index_file_size=1024, java_compat=True)) as s:
        s.term = 1
        s.append(b"abc")
        assert s.get(0).body_crc == 0
        with pytest.raises(DLedgerError) as info:
            s.append_noop()
        assert info.value.code == ResponseCode.UNSUPPORTED


def _fill(store: MmapLogStore, count: int) -> None:
    store.term = 1
    for _ in range(count):
        store.append(b"y" * 500)


def test_retention_deletes_expired_segments_but_never_above_the_floor(tmp_path: Path) -> None:
    config = StoreConfig(data_file_size=4096, index_file_size=1024, warm_ahead_bytes=0, clean_interval_ms=10**6)
    store = MmapLogStore.open(tmp_path, config)
    _fill(store, 70)  # 7 entries per 4 KiB segment -> 10 segments
    store.update_committed_index(69)
    cleaner = store.cleaner
    cleaner.usage = lambda path: 0.75  # above the 0.70 check ratio: cleaning is due
    cleaner.now_s = lambda: time.time() + 73 * 3600  # everything is older than 72 h
    store.set_retention_floor(20)  # a peer still needs entry 20
    cleaner.run_once()
    assert store.begin_index == 14  # segments holding 0..13 are gone; 14..20 stays
    assert store.get(20).body == b"y" * 500
    with pytest.raises(DLedgerError):
        store.get(13)
    store.close()
    reopened = MmapLogStore.open(tmp_path, config)
    assert (reopened.begin_index, reopened.end_index, reopened.committed_index) == (14, 69, 69)
    reopened.close()


def test_retention_keeps_young_segments_and_uncommitted_entries(tmp_path: Path) -> None:
    config = StoreConfig(data_file_size=4096, index_file_size=1024, warm_ahead_bytes=0, clean_interval_ms=10**6)
    store = MmapLogStore.open(tmp_path, config)
    _fill(store, 70)
    cleaner = store.cleaner
    cleaner.usage = lambda path: 0.75
    cleaner.run_once()  # files are young
    assert store.begin_index == 0
    cleaner.now_s = lambda: time.time() + 73 * 3600
    cleaner.run_once()  # old, but nothing is committed
    assert store.begin_index == 0
    store.update_committed_index(69)
    cleaner.run_once()
    assert store.begin_index == 63  # everything but the last segment; at most 10 per pass
    store.close()


@pytest.mark.parametrize("force", [False, True])
def test_a_nearly_full_disk_deletes_young_segments_only_when_force_clean_is_on(tmp_path: Path, force: bool) -> None:
    """DLedger's force clean deletes committed segments of any age above 0.85: with an
    embedded log (every entry committed) that lost acknowledged entries to disk pressure
    alone. It is off by default: the disk fills, appends get DISK_FULL, nothing goes."""
    config = StoreConfig(
        data_file_size=4096, index_file_size=1024, warm_ahead_bytes=0, clean_interval_ms=10**6,
        **({"enable_disk_force_clean": True} if force else {}),
    )  # fmt: skip
    store = MmapLogStore.open(tmp_path, config)
    _fill(store, 70)  # young segments, all committed
    store.update_committed_index(69)
    store.cleaner.usage = lambda path: 0.88  # above 0.85, below the 0.90 of DISK_FULL
    store.cleaner.run_once()
    assert store.begin_index == (63 if force else 0)
    store.close()


def test_disk_full_ratio_refuses_appends_until_space_returns(tmp_path: Path) -> None:
    config = StoreConfig(data_file_size=4096, index_file_size=1024, warm_ahead_bytes=0, clean_interval_ms=10**6)
    store = MmapLogStore.open(tmp_path, config)
    store.term = 1
    store.append(b"a")
    store.cleaner.usage = lambda path: 0.91
    store.cleaner.run_once()
    with pytest.raises(DLedgerError) as info:
        store.append(b"b")
    assert info.value.code == ResponseCode.DISK_FULL
    assert store.end_index == 0
    assert store.health == "disk full: appends refused until space comes back"  # what status shows
    store.cleaner.usage = lambda path: 0.50
    store.cleaner.run_once()
    assert store.append(b"b") == 1 and store.health == ""
    store.close()


def test_checkpoint_is_atomic_and_readable_from_bak(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    kvfile.write_atomic(path, {"committedIndex": "5", "endIndex": "7"})
    kvfile.write_atomic(path, {"committedIndex": "6", "endIndex": "8"})
    assert path.read_text() == "committedIndex=6\nendIndex=8\n"
    assert (tmp_path / "checkpoint.bak").read_text() == "committedIndex=5\nendIndex=7\n"
    path.unlink()
    assert kvfile.read(path) == {"committedIndex": "5", "endIndex": "7"}


def test_embedded_log_commits_everything_and_resumes(tmp_path: Path) -> None:
    node = tmp_path / "dledger-n0"
    with dledger.open_log(node, SMALL) as log:
        assert log.append_many([b"a", b"b"]) == 0
        assert log.committed_index == 1
    assert kvfile.read(node / "checkpoint") == {"committedIndex": "1", "endIndex": "1"}
    with dledger.open_log(tmp_path) as log:  # a storeBaseDir with one node directory works too
        assert [e.body for e in log.iterate()] == [b"a", b"b"]
        assert log.data_list.file_size == 4096  # sizes read off the files
        assert log.append(b"c") == 2


def test_an_embedded_truncate_from_a_negative_index_deletes_nothing(tmp_path: Path) -> None:
    """Before, `truncate(-1)` went the way of "from before the begin index": every entry
    of the log, all committed, was deleted."""
    with dledger.open_log(tmp_path / "dledger-n0", SMALL) as log:
        log.append_many([b"a", b"b", b"c"])
        with pytest.raises(ValueError, match="cannot truncate from index -1"):
            log.truncate(-1)
        assert [e.body for e in log.iterate()] == [b"a", b"b", b"c"]
        log.truncate(2)  # a suffix still goes
        assert [e.body for e in log.iterate()] == [b"a", b"b"] and log.committed_index == 1


def test_prefix_reset_to_the_end_survives_a_restart(tmp_path: Path) -> None:
    store = MmapLogStore.open(tmp_path, SMALL)
    _fill(store, 10)
    store.update_committed_index(9)
    assert store.reset(9, 1) == 10
    store.close()
    reopened = MmapLogStore.open(tmp_path, SMALL)
    assert (reopened.begin_index, reopened.end_index, reopened.end_term) == (-1, 9, 1)
    reopened.term = 1
    assert reopened.append(b"next") == 10
    reopened.close()


def test_open_refuses_a_file_as_node_dir(tmp_path: Path) -> None:
    target = tmp_path / "not-a-dir"
    target.write_text("x")
    with pytest.raises(DLedgerError) as info:
        MmapLogStore.open(target, SMALL)
    assert info.value.code == ResponseCode.DISK_ERROR


def test_read_only_open_changes_nothing(tmp_path: Path) -> None:
    with MmapLogStore.open(tmp_path, SMALL) as store:
        _fill(store, 20)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    config = StoreConfig(data_file_size=4096, index_file_size=1024, read_only=True)
    with MmapLogStore.open(tmp_path, config) as store:
        assert store.get(19).body == b"y" * 500
        with pytest.raises(DLedgerError):
            store.append(b"z")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert os.access(tmp_path, os.W_OK)


def test_warm_ahead_faults_the_index_again_only_as_the_writer_uses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = StoreConfig(data_file_size=1 << 20, index_file_size=32 * 4096, warm_ahead_bytes=64 * 1024)
    with MmapLogStore(tmp_path, config) as store:  # no thread runs the passes: the test does
        store.term = 1
        store.append(b"x")
        warmed: list[tuple[str, int, int]] = []
        real = store.warmer._warm_list

        def spy(segments: SegmentList, pos: int, window: int) -> None:
            warmed.append(("index" if segments is store.index_list else "data", pos, window))
            real(segments, pos, window)

        monkeypatch.setattr(store.warmer, "_warm_list", spy)
        store.warmer.run_once()
        assert [w for w in warmed if w[0] == "index"] == [("index", 32, 64 * 1024 // 4)]
        warmed.clear()
        for _ in range(5):  # idle passes: nothing new to fault
            store.warmer.run_once()
        assert warmed == []
        window = 64 * 1024 // 4
        for _ in range(window // 2 // 32 + 1):  # the writer uses half the warmed index window
            store.append(b"x")
        store.warmer.run_once()
        assert [w for w in warmed if w[0] == "index"] == [("index", (store.end_index + 1) * 32, window)]


def test_warm_ahead_sleeps_longer_while_the_writer_stands_still(tmp_path: Path) -> None:
    config = StoreConfig(data_file_size=1 << 20, index_file_size=32 * 4096, warm_ahead_bytes=64 * 1024)
    with MmapLogStore(tmp_path, config) as store:  # no thread runs the passes: the test does
        store.term = 1
        store.append(b"x")
        warmer = store.warmer
        assert warmer.run_once() is None  # the writer moved: a pass, then the usual 5 ms
        assert warmer.run_once() == warmer.IDLE_WAIT_MS  # it stood still
        store.append(b"y")
        assert warmer.run_once() is None
        assert warmer.run_once() == warmer.IDLE_WAIT_MS
        store.truncate(store.end_index)  # shrinks and grows back to the same place
        store.append(b"y")
        assert warmer.run_once() is None  # a reset warms from the writer again
