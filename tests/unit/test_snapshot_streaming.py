"""Snapshot data is streamed through the page cache: an install asks the kernel to write
each window back and drops the one before it; a reader drops what it has read. The
bytes stay exactly what was sent (dropping is only advice)."""

from __future__ import annotations

import itertools
import os
import zlib
from pathlib import Path

import pytest

from dledger.statemachine import snapshot_files, snapshot_install
from dledger.statemachine.snapshot import SnapshotStore
from tests.unit.test_snapshot_store import content, save

pytestmark = pytest.mark.unit

WINDOW = 10_000


def record_drops(monkeypatch: pytest.MonkeyPatch, module: object) -> list[tuple[int, int]]:
    calls: list[tuple[int, int]] = []
    real = snapshot_files.drop_cached

    def drop(fd: int, start: int, end: int) -> None:
        calls.append((start, end))
        real(fd, start, end)

    monkeypatch.setattr(module, "drop_cached", drop)
    return calls


def install(store: SnapshotStore, data: bytes, chunk: int) -> None:
    receiving = store.begin_install(100, 3)
    for offset in range(0, len(data), chunk):
        piece = data[offset : offset + chunk]
        receiving.write_chunk(offset, piece, zlib.crc32(piece))
    receiving.finish(100, 3, zlib.crc32(data), len(data))


def test_an_install_writes_back_each_window_and_drops_the_one_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot_install, "STREAM_WINDOW", WINDOW)
    drops = record_drops(monkeypatch, snapshot_install)
    data = os.urandom(100_000)
    store = SnapshotStore(tmp_path)
    install(store, data, chunk=4096)
    marks = [0, 0] + [end for _start, end in drops]
    assert [start for start, _end in drops] == marks[:-2]  # each call starts where the one before the last ended
    assert all(b - a >= WINDOW for a, b in itertools.pairwise(marks[1:]))  # one call per window written
    assert len(drops) == len(data) // 12_288  # 3 chunks make a window here
    assert content(store.latest()) == (100, 3, data)  # dropping dirty pages loses nothing


def test_a_small_install_is_never_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drops = record_drops(monkeypatch, snapshot_install)
    store = SnapshotStore(tmp_path)
    install(store, b"state" * 100, chunk=64)
    assert drops == []
    assert content(store.latest()) == (100, 3, b"state" * 100)


def test_a_reader_drops_what_it_read_and_rereads_after_seeking_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot_files, "STREAM_WINDOW", 1 << 20)
    drops = record_drops(monkeypatch, snapshot_files)
    data = os.urandom((5 << 20) // 2)  # two and a half windows, read 1 MiB at a time
    snapshot = save(SnapshotStore(tmp_path), 7, 1, data)
    drops.clear()  # the save's checksum reads the file with its own reader
    with snapshot.open() as reader:
        assert reader.read() == data
        assert drops == [(0, 1 << 20), (1 << 20, 2 << 20)]
        reader.seek(100)
        assert reader.read(1000) == data[100:1100]
    assert drops == [(0, 1 << 20), (1 << 20, 2 << 20)]  # nothing dropped twice


def test_drop_cached_ignores_an_empty_range(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    with open(path, "rb") as fh:
        snapshot_files.drop_cached(fh.fileno(), 5, 5)
        snapshot_files.drop_cached(fh.fileno(), 5, 1)  # nothing to drop: no EINVAL
        snapshot_files.drop_cached(fh.fileno(), 0, 1)
        assert fh.read() == b"x"
