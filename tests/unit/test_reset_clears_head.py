"""A prefix reset's head blank: the bytes it covers read as zeros, deallocated by the
file system (no zeros written) where it can punch holes, zeroed and msynced where it
cannot; a crash before the clear is finished by recovery."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from dledger.config import member_store_config
from dledger.store import MmapLogStore, segment_list
from dledger.store.segment_list import SegmentList, punch_hole

pytestmark = pytest.mark.unit

SEGMENT = 1 << 20
CFG = member_store_config(data_file_size=SEGMENT, index_file_size=32 * 4096)


def filled_store(path: Path, count: int = 3000) -> MmapLogStore:
    store = MmapLogStore(path, CFG)
    store.term = 1
    for i in range(count):
        store.append(os.urandom(200 + i % 13))
    store.flush()
    return store


def first_segment(path: Path) -> Path:
    return min((path / "data").iterdir())


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def can_punch(directory: Path) -> bool:
    probe = directory / "probe"
    probe.write_bytes(b"x" * (1 << 16))
    fd = os.open(probe, os.O_RDWR)
    try:
        return punch_hole(fd, 0, 1 << 16)
    finally:
        os.close(fd)
        probe.unlink()


def test_a_reset_frees_the_dead_head_and_it_reads_as_zeros(tmp_path: Path) -> None:
    store = filled_store(tmp_path / "s")
    keep = 2500
    head_segment = store.get(keep).pos // SEGMENT * SEGMENT
    dead = store.get(keep).pos - head_segment
    assert dead > 64 << 10
    before = allocated(first_segment(tmp_path / "s"))
    kept = store.get(keep).body
    store.reset(keep - 1, 1)
    segment = first_segment(tmp_path / "s")
    raw = segment.read_bytes()
    assert raw[:4] == (-1).to_bytes(4, "big", signed=True) and int.from_bytes(raw[4:8], "big") == dead
    assert raw[8:dead].count(0) == dead - 8
    if can_punch(tmp_path):
        assert allocated(segment) <= before - (dead - 8192)  # the dead head's blocks were freed
    store.close()
    again = MmapLogStore(tmp_path / "s", CFG)
    assert (again.begin_index, again.end_index) == (keep, 2999)
    assert again.get(keep).body == kept
    again.close()


def test_where_holes_cannot_be_punched_the_head_is_zeroed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segment_list, "punch_hole", lambda fd, offset, length: False)
    store = filled_store(tmp_path / "s")
    before = allocated(first_segment(tmp_path / "s"))
    dead = store.get(2000).pos - store.get(2000).pos // SEGMENT * SEGMENT
    store.reset(1999, 1)
    raw = first_segment(tmp_path / "s").read_bytes()
    assert raw[8:dead].count(0) == dead - 8
    assert allocated(first_segment(tmp_path / "s")) == before  # zeros written, nothing freed
    store.close()


def test_a_failing_punch_falls_back_to_zeros_and_the_reset_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(fd: int, offset: int, length: int) -> bool:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(segment_list, "punch_hole", broken)
    store = filled_store(tmp_path / "s")
    dead = store.get(2000).pos - store.get(2000).pos // SEGMENT * SEGMENT
    kept = [store.get(i).body for i in (2000, 2999)]
    assert store.reset(1999, 1) == 2000
    raw = first_segment(tmp_path / "s").read_bytes()
    assert raw[8:dead].count(0) == dead - 8
    store.close()
    again = MmapLogStore(tmp_path / "s", CFG)
    assert (again.begin_index, again.end_index) == (2000, 2999)
    assert [again.get(i).body for i in (2000, 2999)] == kept  # nothing kept was lost
    again.close()


def test_clear_range_zeroes_across_segments_and_only_the_range(tmp_path: Path) -> None:
    segments = SegmentList(tmp_path / "seg", 1 << 16)
    segments.roll(0)
    segments.roll(1 << 16)
    segments.table.write(0, b"\x07" * (1 << 16))
    segments.table.write(1 << 16, b"\x09" * (1 << 16))
    segments.clear_range(1000, (1 << 16) + 3000)
    assert segments.table.read(0, 1000) == b"\x07" * 1000
    assert segments.table.read(1000, (1 << 16) - 1000) == bytes((1 << 16) - 1000)
    assert segments.table.read(1 << 16, 3000) == bytes(3000)
    assert segments.table.read((1 << 16) + 3000, 10) == b"\x09" * 10
    segments.clear_range(5 << 16, 6 << 16)  # not mapped: nothing to do
    segments.close()


def test_punch_hole_reports_a_bad_descriptor() -> None:
    with pytest.raises(OSError):
        punch_hole(-1, 0, 4096)
    assert punch_hole(-1, 0, 0) is False  # nothing to punch
