"""A snapshot whose `snapshot_meta` or `data` is not a regular file (a FIFO, a directory,
a link to a device) is damaged: skipped with a warning by the store, the manager's
start-up load and `dledger check`, and never opened in a way that blocks or reads
forever. A FIFO opened for reading blocks until a writer comes: each call runs on a
thread, and a call still blocked is released by opening the FIFO's write end, then
fails the test."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

import pytest

import dledger
from dledger.entry import Entry
from dledger.statemachine.snapshot import SnapshotStore
from dledger.statemachine.snapshot_files import Snapshot
from dledger.statemachine.snapshot_manager import SnapshotManager
from tests.unit.test_store_tools import CONFIG, run

pytestmark = pytest.mark.unit

T = TypeVar("T")
_GUARD_S = 20.0


def unblocked(call: Callable[[], T], fifos: list[Path]) -> T:
    """call(), which must return without a writer on any of `fifos`."""
    out: list[T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            out.append(call())
        except BaseException as exc:  # handed to the test thread
            errors.append(exc)

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(_GUARD_S)
    if worker.is_alive():
        for fifo in fifos:  # release the blocked open, then fail
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        worker.join()
        pytest.fail(f"blocked on a FIFO: {fifos}")
    if errors:
        raise errors[0]
    return out[0]


def save(store: SnapshotStore, index: int, data: bytes) -> Snapshot:
    writer = store.begin_save()
    writer.write(data)
    return writer.commit(index, 1)


def fifo_meta(directory: Path) -> Path:
    (directory / "snapshot_meta").unlink(missing_ok=True)
    os.mkfifo(directory / "snapshot_meta")
    return directory / "snapshot_meta"


def fifo_data(directory: Path) -> Path:
    (directory / "data").unlink()
    os.mkfifo(directory / "data")
    return directory / "data"


def java_fifo_data(directory: Path) -> Path:
    (directory / "snapshot_meta").write_text('{"lastIncludedIndex":8,"lastIncludedTerm":1}')
    return fifo_data(directory)


def empty_fifo_data(directory: Path) -> Path:
    """A verified meta saying `data` is empty (a FIFO's size is 0 too)."""
    return fifo_data(directory)


def directory_data(directory: Path) -> None:
    (directory / "data").unlink()
    (directory / "data").mkdir()


def device_meta(directory: Path) -> None:
    (directory / "snapshot_meta").unlink()
    (directory / "snapshot_meta").symlink_to("/dev/zero")


SPECIAL = [fifo_meta, fifo_data, java_fifo_data, directory_data, device_meta]


def damage(store: SnapshotStore, how: Callable[[Path], Path | None], data: bytes = b"eight") -> list[Path]:
    """A good snapshot 3 and a snapshot 8 damaged by `how`; the FIFOs made."""
    save(store, 3, b"three")
    made = how(save(store, 8, b"" if how is empty_fifo_data else data).path)
    return [made] if made is not None else []


@pytest.mark.parametrize("how", [*SPECIAL, empty_fifo_data])
def test_the_store_skips_a_snapshot_whose_files_are_not_regular(
    tmp_path: Path, how: Callable[[Path], Path | None], caplog: pytest.LogCaptureFixture
) -> None:
    fifos = damage(SnapshotStore(tmp_path), how)
    store = SnapshotStore(tmp_path)  # a restart: nothing verified yet
    with caplog.at_level(logging.WARNING):
        assert [s.index for s in unblocked(store.snapshots, fifos)] == [3]
    assert any("snapshot_8 is damaged" in r.getMessage() for r in caplog.records)
    assert not unblocked(lambda: store.is_valid(8), fifos)


def test_a_meta_replaced_by_a_fifo_after_verification_is_not_read(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    save(store, 3, b"three")
    newest = save(store, 8, b"eight")
    assert store.is_valid(8)  # verified as published: its data file is remembered
    fifos = [fifo_meta(newest.path)]
    assert not unblocked(lambda: store.is_valid(8), fifos)
    assert [s.index for s in unblocked(store.snapshots, fifos)] == [3]


class Machine:
    """A snapshotting state machine that records what it loaded."""

    def __init__(self) -> None:
        self.loaded: bytes | None = None

    def on_apply(self, entries: list[Entry]) -> None:
        """Nothing to apply here."""

    def on_snapshot_capture(self) -> None:
        """Nothing to capture."""

    def on_snapshot_save(self, writer: BinaryIO) -> None:
        """Nothing to save."""

    def on_snapshot_load(self, reader: BinaryIO) -> None:
        """Keep the bytes."""
        self.loaded = reader.read()


def test_start_up_loads_the_older_snapshot(tmp_path: Path) -> None:
    fifos = damage(SnapshotStore(tmp_path), fifo_meta) + damage(SnapshotStore(tmp_path / "other"), fifo_data)
    for node in (tmp_path, tmp_path / "other"):
        machine = Machine()
        manager = SnapshotManager(SnapshotStore(node), machine, threshold=10)
        loaded = unblocked(lambda: manager.load_newest(4), fifos)  # noqa: B023 - called right here
        assert loaded is not None and loaded.index == 3 and machine.loaded == b"three"


@pytest.mark.parametrize("how", SPECIAL)
def test_check_reports_the_snapshot_as_damaged(tmp_path: Path, how: Callable[[Path], Path | None]) -> None:
    node = tmp_path / "dledger-n0"
    with dledger.open_log(node, CONFIG) as log:
        log.append_many([b"entry %d" % i for i in range(10)])
    fifos = damage(SnapshotStore(node), how)
    result = unblocked(lambda: run("check", str(node)), fifos)
    assert result.exit_code == 1, result.output
    assert f"problem: snapshot {node / 'snapshot' / 'snapshot_8'} is damaged" in result.stderr
    assert "is not a regular file" in result.stderr
    assert "1 valid, newest 3" in result.stdout
