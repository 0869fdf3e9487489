"""The snapshot store's file calls go through `FileOps` (snapshot_files.file_ops), in the
order that makes a snapshot durable before it is visible: data and meta fsynced, their
directory fsynced, renamed, the parent fsynced. The simulation's power-loss model
(tests/sim/snapshot_disk.py) relies on seeing every one of them."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from dledger.statemachine.snapshot import SnapshotStore
from dledger.statemachine.snapshot_files import FileOps, file_ops, set_file_ops


class RecordingOps(FileOps):
    """Plain FileOps that also records (operation, path relative to `snapshot/`)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def _note(self, op: str, path: Path) -> None:
        parts = Path(path).parts
        self.calls.append((op, "/".join(parts[parts.index("snapshot") + 1 :])))

    def open_new(self, path: Path) -> int:
        self._note("create", path)
        return super().open_new(path)

    def fsync(self, fd: int, path: Path) -> None:
        self._note("fsync", path)
        super().fsync(fd, path)

    def fsync_path(self, path: Path, directory: bool = False) -> None:
        self._note("fsync-dir" if directory else "fsync", path)
        super().fsync_path(path, directory)

    def mkdir(self, path: Path) -> None:
        self._note("mkdir", path)
        super().mkdir(path)

    def replace(self, source: Path, target: Path) -> None:
        self._note("rename-to", target)
        super().replace(source, target)

    def remove_tree(self, path: Path) -> bool:
        self._note("remove", path)
        return super().remove_tree(path)


@pytest.fixture
def ops() -> Iterator[RecordingOps]:
    recording = RecordingOps()
    previous = set_file_ops(recording)
    try:
        yield recording
    finally:
        assert set_file_ops(previous) is recording


def test_production_uses_plain_file_ops() -> None:
    assert type(file_ops()) is FileOps


def test_a_save_is_durable_before_it_is_renamed_into_place(tmp_path: Path, ops: RecordingOps) -> None:
    store = SnapshotStore(tmp_path)
    writer = store.begin_save()
    writer.write(b"state")
    before_commit = list(ops.calls)
    writer.commit(7, 2)
    calls = ops.calls
    assert ("mkdir", "tmp") in before_commit and ("create", "tmp/data") in before_commit
    order = [
        ("fsync", "tmp/data"),
        ("create", "tmp/snapshot_meta"),
        ("fsync", "tmp/snapshot_meta"),
        ("fsync-dir", "tmp"),
        ("rename-to", "snapshot_7"),
        ("fsync-dir", ""),
    ]
    positions = [calls.index(call) for call in order]
    assert positions == sorted(positions), calls
    latest = store.latest()
    assert latest is not None and latest.index == 7


def test_an_install_is_written_synced_and_published_through_file_ops(tmp_path: Path, ops: RecordingOps) -> None:
    store = SnapshotStore(tmp_path)
    install = store.begin_install(9, 3)
    install.write_chunk(0, b"abc", zlib.crc32(b"abc"))
    install.finish(9, 3, zlib.crc32(b"abc"), 3)
    calls = ops.calls
    order = [
        ("mkdir", "install_tmp"),
        ("create", "install_tmp/data"),
        ("fsync", "install_tmp/data"),
        ("rename-to", "snapshot_9"),
        ("fsync-dir", ""),
    ]
    positions = [calls.index(call) for call in order]
    assert positions == sorted(positions), calls
