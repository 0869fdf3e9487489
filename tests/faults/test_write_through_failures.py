"""A failed write of appends written through the segment file (`data_writes="pwrite"`,
the sync-mode default): the call fails with DISK_FULL (ENOSPC) or DISK_ERROR, the log
ends where it ended before, nothing after it is acknowledged, and a reopen finds exactly
the entries written before the failure. The write really fails: the segment's
descriptor is replaced by /dev/full or by a read-only descriptor. A segment that cannot
be opened when it enters the table (no descriptor left) fails the roll the same way."""

from __future__ import annotations

import mmap
import os
import resource
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from dledger import _store_py
from dledger._native import impl
from dledger.codes import DLedgerError, ResponseCode
from dledger.store.mmap_store import MmapLogStore, StoreConfig

pytestmark = pytest.mark.faults

CONFIG = StoreConfig(
    data_file_size=1 << 16,
    index_file_size=1 << 12,
    flush_mode="sync",
    warm_ahead_bytes=0,
    checkpoint_interval_ms=10**9,
)
BEFORE = [f"entry-{k}".encode() * 20 for k in range(30)]


def break_segment(store: MmapLogStore, how: str) -> None:
    """Point the descriptor of the segment being written at /dev/full (ENOSPC on every
    write) or at a read-only descriptor of the same file (EBADF)."""
    target = store.data_list.table.fd_of(int(store.write_pos))
    assert target >= 0, "write-through segments keep their descriptor"
    if how == "full":
        other = os.open("/dev/full", os.O_WRONLY)
    else:
        other = os.open(store.data_list.path_of(int(store.write_pos) - int(store.write_pos) % (1 << 16)), os.O_RDONLY)
    try:
        os.dup2(other, target)
    finally:
        os.close(other)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MmapLogStore]:
    s = MmapLogStore.open(tmp_path / "dledger-n0", CONFIG)
    s.term = 1
    assert s.write_through
    s.append_many(BEFORE)
    yield s
    s.close()


CASES = [
    ("full", ResponseCode.DISK_FULL, impl.STATE_DISK_FULL),
    ("read-only", ResponseCode.DISK_ERROR, impl.STATE_DISK_ERROR),
]


@pytest.mark.parametrize(("how", "code", "state"), CASES)
@pytest.mark.parametrize("op", ["append", "append_many", "append_noop", "append_encoded"])
def test_a_failed_write_appends_nothing(store: MmapLogStore, how: str, code: int, state: int, op: str) -> None:
    end, write_pos, shrinks = store.end_index, int(store.write_pos), store.shrinks
    break_segment(store, how)
    with pytest.raises(DLedgerError) as failed:
        if op == "append":
            store.append(b"lost")
        elif op == "append_many":
            store.append_many([b"lost"] * 5)
        elif op == "append_noop":
            store.append_noop()
        else:
            store.append_encoded(impl.encode_entry(1, end + 1, 1, write_pos, b"lost"))
    assert failed.value.code == code
    assert "failed" in str(failed.value)
    assert (store.end_index, int(store.write_pos), store.state) == (end, write_pos, state)
    assert store.shrinks == shrinks  # the staged entries were never visible
    assert [store.get_body(i) for i in range(end + 1)] == BEFORE
    # a failed write fails the store as a failed flush does (a full disk does not)
    assert (store.failure is failed.value) == (how == "read-only")
    assert store.health.startswith("failed: DISK_ERROR" if how == "read-only" else "disk full")
    with pytest.raises(DLedgerError) as refused:
        store.append(b"after")
    assert refused.value.code == code
    if how == "full":
        store.wait_durable()  # what was acknowledged before is durable, nothing more
    else:  # fail-stop: a failed store confirms nothing any more
        with pytest.raises(DLedgerError, match="store failed after an I/O error"):
            store.wait_durable()


@pytest.mark.parametrize("how", ["full", "read-only"])
def test_reopening_after_a_failed_write_finds_the_entries_before_it(tmp_path: Path, how: str) -> None:
    node = tmp_path / "dledger-n0"
    s = MmapLogStore.open(node, CONFIG)
    s.term = 1
    s.append_many(BEFORE)
    s.update_committed_index(len(BEFORE) - 1)
    s.write_checkpoint()  # a store that failed writes no checkpoint any more (fail-stop)
    break_segment(s, how)
    with pytest.raises(DLedgerError):
        s.append_many([b"lost"] * 3)
    s.close()
    again = MmapLogStore.open(node, CONFIG)
    try:
        assert again.recovery.problem == ""
        assert (again.begin_index, again.end_index, again.committed_index) == (0, len(BEFORE) - 1, len(BEFORE) - 1)
        assert [again.get_body(i) for i in range(len(BEFORE))] == BEFORE
        again.term = 1
        assert again.append(b"next") == len(BEFORE)
    finally:
        again.close()


@pytest.mark.parametrize("mod", [impl, _store_py], ids=["compiled", "twin"])
def test_both_cores_roll_back_a_failed_stage_alike(tmp_path: Path, mod: object) -> None:
    data_fd = os.open(tmp_path / "data", os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(data_fd, 4096)
    index_fd = os.open(tmp_path / "index", os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(index_fd, 4096)
    data = mod.MappedTable(4096)  # type: ignore[attr-defined]
    index = mod.MappedTable(4096)  # type: ignore[attr-defined]
    data.push(mmap.mmap(data_fd, 4096), 0, data_fd)
    index.push(mmap.mmap(index_fd, 4096), 0)
    os.close(index_fd)

    def no_roll(kind: int, offset: int) -> None:
        raise DLedgerError(ResponseCode.DISK_FULL, "no next segment")

    core = mod.LogCore()  # type: ignore[attr-defined]
    told: list[BaseException] = []
    core._init_core(data, index, no_roll, told.append)
    core.write_through = True
    core.term = 3
    assert core.append_many([b"a" * 100, b"b" * 200]) == 0
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, data_fd)
    os.close(full)
    with pytest.raises(DLedgerError) as failed:
        core.append_many([b"c" * 50] * 4)
    assert failed.value.code == ResponseCode.DISK_FULL
    assert told == []  # a full disk is not a failed store
    assert (core.begin_index, core.end_index, core.end_term, core.write_pos) == (0, 1, 3, 2 * 48 + 300)
    assert core.state == mod.STATE_DISK_FULL  # type: ignore[attr-defined]
    assert [core.get_body(i) for i in range(2)] == [b"a" * 100, b"b" * 200]
    read_only = os.open(tmp_path / "data", os.O_RDONLY)
    os.dup2(read_only, data_fd)
    os.close(read_only)
    core.state = mod.STATE_OK  # type: ignore[attr-defined]
    with pytest.raises(DLedgerError) as broken:
        core.append(b"d" * 10)
    assert broken.value.code == ResponseCode.DISK_ERROR and told == [broken.value]
    assert core.state == mod.STATE_DISK_ERROR  # type: ignore[attr-defined]
    data.pop_last()
    index.pop_last()


def test_a_segment_file_that_cannot_be_opened_at_a_roll_appends_nothing(tmp_path: Path) -> None:
    """Write-through segments get their descriptor when they enter the table. When no
    descriptor is left (EMFILE, a real RLIMIT_NOFILE), the roll fails with DISK_ERROR,
    the log still ends at its last entry, and the next append rolls once one is free."""
    node = tmp_path / "dledger-n0"
    store = MmapLogStore(node, replace(CONFIG, warm_ahead_bytes=1 << 16))  # no background threads
    store.term = 1
    body = b"r" * 900
    while int(store.write_pos) + 48 + len(body) + 8 <= CONFIG.data_file_size:
        store.append(body)  # until the next one does not fit this segment
    end, write_pos = store.end_index, int(store.write_pos)
    store.wait_warm()  # the next segment is created and mapped ahead: the roll only opens it
    assert store.data_list.spare() is not None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest_free = os.dup(0)
    os.close(lowest_free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
    try:
        with pytest.raises(DLedgerError) as failed:
            store.append(body)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert failed.value.code == ResponseCode.DISK_ERROR
    assert "cannot open segment" in str(failed.value)
    assert (store.end_index, int(store.write_pos)) == (end, write_pos)
    assert [store.get_body(i) for i in range(end + 1)] == [body] * (end + 1)
    assert store.append(body) == end + 1  # a descriptor is free again: the roll works
    assert store.get(end + 1).pos == CONFIG.data_file_size
    store.close()
    again = MmapLogStore.open(node, CONFIG)
    try:
        assert again.recovery.problem == ""
        assert [again.get_body(i) for i in range(end + 2)] == [body] * (end + 2)
    finally:
        again.close()
