"""Handing flushed pages back to the kernel (StoreConfig.release_behind_bytes): the pages
leave the page cache, the bytes stay, and a refusal only costs the cache."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dledger import _store_py
from dledger._native import impl
from dledger.config import ConfigError, DLedgerConfig, member_store_config
from dledger.node_store import open_node_store
from dledger.store.mmap_store import MmapLogStore, StoreConfig, SyncMmapLogStore

pytestmark = pytest.mark.unit

PAGE = mmap.PAGESIZE
SEGMENT = 1 << 20
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def cached_pages(path: Path) -> list[bool]:
    """Which pages of the file are in the page cache (mincore through a fresh mapping
    that touches nothing, so it neither loads pages nor keeps any)."""
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        try:
            vec = ctypes.create_string_buffer(size // PAGE)
            assert _libc.mincore(addr, size, vec) == 0, ctypes.get_errno()
            return [bool(b & 1) for b in vec.raw]
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


@pytest.fixture(params=["compiled", "twin"])
def mod(request: pytest.FixtureRequest) -> Any:
    return impl if request.param == "compiled" else _store_py


def mapped_kib(mapped: mmap.mmap) -> int:
    """Resident KiB of this process's mapping (its page-table entries), from smaps."""
    view = ctypes.c_char.from_buffer(mapped)
    start = ctypes.addressof(view)
    del view  # the mapping must not stay exported
    vma = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if "-" in line.split(" ", 1)[0] and not line.startswith(("Rss", "Pss")):
            vma = int(line.split("-", 1)[0], 16)
        elif vma == start and line.startswith("Rss:"):
            return int(line.split()[1])
    raise AssertionError("mapping not found in smaps")


def test_unmap_pages_lets_go_of_the_whole_pages_inside_and_keeps_their_bytes(mod: Any, tmp_path: Path) -> None:
    path = tmp_path / "seg"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, SEGMENT)
    mapped = mmap.mmap(fd, SEGMENT)
    table = mod.MappedTable(SEGMENT)
    table.push(mapped, 0)
    data = os.urandom(SEGMENT)
    table.write(0, data)  # dirty, not msynced
    assert mapped_kib(mapped) == SEGMENT // 1024
    table.unmap_pages(100, SEGMENT // 2 + 100)  # the whole pages inside: 1 up to SEGMENT/2
    assert mapped_kib(mapped) == SEGMENT // 1024 - (SEGMENT // 2 // PAGE - 1) * PAGE // 1024
    assert all(cached_pages(path)), "the page cache keeps them"
    os.fsync(fd)  # the pages were still dirty: written now...
    os.posix_fadvise(fd, 0, SEGMENT, os.POSIX_FADV_DONTNEED)
    assert not any(cached_pages(path)[1 : SEGMENT // 2 // PAGE])  # ...so they can go
    assert os.pread(fd, SEGMENT, 0) == data  # read back from the disk
    assert table.read(0, SEGMENT) == data  # and through the mapping
    table.pop_last()
    mapped.close()
    os.close(fd)


CONFIG = StoreConfig(
    data_file_size=SEGMENT,
    index_file_size=64 * 1024,
    warm_ahead_bytes=0,
    checkpoint_interval_ms=10**9,
    release_behind_bytes=256 * 1024,
)
BODIES = [bytes([k % 251]) * 1000 for k in range(3000)]  # ~3 MiB of data over 3 segments, 94 KiB of index


def file_pages(directory: Path) -> list[tuple[int, bool]]:
    """(offset in the log, cached) of every page of a segment directory."""
    return [(int(path.name) + k * PAGE, cached) for path in sorted(directory.iterdir())
            for k, cached in enumerate(cached_pages(path))]  # fmt: skip


def cached_in(directory: Path, frm: int, to: int) -> list[bool]:
    """Cached or not, each whole page of [frm, to) of the log in a segment directory."""
    return [cached for offset, cached in file_pages(directory) if frm <= offset and offset + PAGE <= to]


def assert_released(directory: Path, frm: int, to: int) -> None:
    pages = cached_in(directory, frm, to)
    assert pages and not any(pages), "pages of the released range are still cached"


def assert_cached(directory: Path, frm: int, to: int) -> None:
    pages = cached_in(directory, frm, to)
    assert pages and all(pages), "pages of the window left the cache"


def _store(tmp_path: Path, **changes: Any) -> MmapLogStore:
    config = replace(CONFIG, **changes)
    store_cls = SyncMmapLogStore if config.flush_mode == "sync" else MmapLogStore
    store = store_cls(tmp_path, config)
    store.term = 1
    return store


def _flush_pass(store: MmapLogStore) -> None:
    store.flush()
    store._flush_once()


@pytest.mark.parametrize("flush_mode", ["async", "sync"])  # sync: appends write with pwrite
def test_the_flush_pass_releases_what_lies_further_back_than_the_window(flush_mode: str, tmp_path: Path) -> None:
    store = _store(tmp_path, flush_mode=flush_mode)
    store.append_many(BODIES)
    _flush_pass(store)
    first = store._released_data
    assert first == store.write_pos - CONFIG.release_behind_bytes
    store.append_many(BODIES)
    _flush_pass(store)
    end = int(store.write_pos)
    assert end > 5 * SEGMENT and store._released_data == end - CONFIG.release_behind_bytes
    # everything before the first step's end is gone (a folio across a step's end goes
    # with the next step), the last `release_behind_bytes` are cached
    assert_released(tmp_path / "data", 0, first)
    assert_cached(tmp_path / "data", store._released_data, end)
    assert [store.get_body(k) for k in range(len(BODIES))] == BODIES
    last = store.end_index
    store.close()
    reopened = MmapLogStore.open(tmp_path, replace(CONFIG, flush_mode=flush_mode))
    try:
        assert reopened.end_index == last
        assert [reopened.get_body(k) for k in range(2 * len(BODIES))] == BODIES + BODIES
    finally:
        reopened.close()


def test_nothing_goes_back_before_a_whole_step_is_due(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.append_many(BODIES[:300])  # ~307 KiB: 51 KiB past the window, less than a step (64 KiB)
    _flush_pass(store)
    assert store._released_data == 0
    assert all(cached for _, cached in file_pages(tmp_path / "data")[:70])
    store.close()


def test_the_index_keeps_its_own_window(tmp_path: Path) -> None:
    store = _store(tmp_path, release_behind_bytes=32 * 1024)
    store.append_many(BODIES)
    _flush_pass(store)
    end = len(BODIES) * 32
    assert store._released_index == end - 32 * 1024
    assert_released(tmp_path / "index", 0, store._released_index)
    assert_cached(tmp_path / "index", store._released_index, end)
    assert [store.get(k).index for k in range(0, len(BODIES), 97)] == list(range(0, len(BODIES), 97))
    store.close()


def test_bytes_rewritten_after_a_truncation_go_back_again(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.append_many(BODIES)
    _flush_pass(store)
    store.truncate(100)
    cut = int(store.write_pos)
    assert store._released_data == cut == 100 * 1048
    store.term = 2
    again = [b"new-%04d" % k * 80 for k in range(2 * len(BODIES))]  # 640 B bodies: the log regrows to ~4 MiB
    store.append_many(again[: len(BODIES)])
    _flush_pass(store)
    regrown = store._released_data
    assert regrown == store.write_pos - CONFIG.release_behind_bytes
    store.append_many(again[len(BODIES) :])
    _flush_pass(store)
    assert_released(tmp_path / "data", cut, regrown)
    assert_cached(tmp_path / "data", store._released_data, int(store.write_pos))
    assert [store.get_body(k) for k in range(100)] == BODIES[:100]
    assert [store.get_body(100 + k) for k in range(len(again))] == again
    assert store.get(100).term == 2
    store.close()


def test_a_segment_deleted_meanwhile_is_skipped(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.append_many(BODIES)
    store.flush()
    sorted((tmp_path / "data").iterdir())[0].unlink()  # as retention might, while a pass runs
    to = int(store.write_pos) - CONFIG.release_behind_bytes
    store.data_list.release(0, to)
    assert_released(tmp_path / "data", SEGMENT, to)
    assert [store.get_body(k) for k in range(1000, len(BODIES))] == BODIES[1000:]
    store.close()


def test_zero_keeps_every_page_cached(tmp_path: Path) -> None:
    store = _store(tmp_path, release_behind_bytes=0)
    store.append_many(BODIES)
    _flush_pass(store)
    assert all(cached for offset, cached in file_pages(tmp_path / "data") if offset + PAGE <= store.write_pos)
    store.close()


def test_a_refused_release_keeps_the_pages_and_the_store_going(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(tmp_path)
    calls: list[int] = []

    def refuse(segments: Any, released: int, to: int, step: int) -> int:
        calls.append(to)
        raise OSError(1, "release failed")

    monkeypatch.setattr(store, "_release_pages", refuse)
    store.append_many(BODIES)
    with caplog.at_level(logging.WARNING):
        store._flush_once()
    assert "keeping them cached" in caplog.text and len(calls) == 1
    store.append_many(BODIES[:10])
    store._flush_once()  # no second try, no second warning
    assert len(calls) == 1 and caplog.text.count("keeping them cached") == 1
    assert store._flushed_data == store.write_pos
    assert [store.get_body(k) for k in range(len(BODIES))] == BODIES
    store.close()


def test_the_setting_is_checked_and_reaches_a_node_store(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="release_behind_bytes"):
        StoreConfig(release_behind_bytes=-1)
    with pytest.raises(ConfigError, match="release_behind_bytes"):
        DLedgerConfig(store=member_store_config(release_behind_bytes=-1))
    assert DLedgerConfig().store.release_behind_bytes == 256 << 20
    assert StoreConfig().release_behind_bytes == 0  # the embedded store keeps its pages
    store = member_store_config(release_behind_bytes=5 << 20, data_file_size=SEGMENT, index_file_size=32 * 1024)
    node_store = open_node_store(DLedgerConfig(store_base_dir=str(tmp_path), store=store))
    try:
        assert isinstance(node_store, MmapLogStore) and node_store.config.release_behind_bytes == 5 << 20
    finally:
        node_store.close()
