"""SnapshotManager after a failed save: the next attempt waits (1 s, doubling up to
60 s while they keep failing) instead of coming with every apply batch, the first
failure is logged with its traceback and each failed retry with one line; a success
ends the backoff. Time is a ManualClock; each save is waited for with `wait_idle`."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from dledger.clock import ManualClock
from dledger.entry import Entry
from dledger.statemachine.snapshot import SnapshotStore
from dledger.statemachine.snapshot_files import FileOps, set_file_ops
from dledger.statemachine.snapshot_manager import RETRY_FIRST_MS, RETRY_MAX_MS, SnapshotManager

pytestmark = pytest.mark.unit


class ReadOnlyDirectory(FileOps):
    """The snapshot directory refuses new entries (as with `chattr +i snapshot/`)."""

    def __init__(self) -> None:
        self.refusing = True
        self.attempts = 0

    def mkdir(self, path: Path) -> None:
        """Refuse while `refusing`."""
        self.attempts += 1
        if self.refusing:
            raise PermissionError(1, "Operation not permitted", str(path))
        super().mkdir(path)


class Machine:
    """A state machine whose snapshot is a fixed string."""

    def on_apply(self, entries: list[Entry]) -> None:
        """Nothing to apply."""

    def on_snapshot_capture(self) -> None:
        """Nothing to capture."""

    def on_snapshot_save(self, writer: BinaryIO) -> None:
        """Write the state."""
        writer.write(b"state")

    def on_snapshot_load(self, reader: BinaryIO) -> None:
        """Nothing to load."""


@pytest.fixture
def ops() -> Iterator[ReadOnlyDirectory]:
    ops = ReadOnlyDirectory()
    previous = set_file_ops(ops)
    try:
        yield ops
    finally:
        set_file_ops(previous)


def batches(manager: SnapshotManager, first: int, count: int) -> None:
    """`count` apply batches of one entry each, every save they start waited for."""
    for index in range(first, first + count):
        manager.after_apply(index, 1)
        assert manager.wait_idle(30)


def failures_logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.endswith("snapshot_manager") and r.levelno >= logging.WARNING]


def test_a_failing_save_is_retried_with_a_backoff_and_logged_once_with_its_traceback(
    tmp_path: Path, ops: ReadOnlyDirectory, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(5_000)
    manager = SnapshotManager(SnapshotStore(tmp_path), Machine(), threshold=10, clock=clock)
    caplog.set_level(logging.INFO)
    batches(manager, 100, 60)  # 60 batches within the same instant
    assert ops.attempts == 1 and manager.failures == 1
    [first] = failures_logged(caplog)
    assert first.levelno == logging.ERROR and first.exc_info is not None
    assert "cannot begin snapshot 100" in first.getMessage() and "next try in 1 s" in first.getMessage()

    clock.advance(RETRY_FIRST_MS - 1)
    batches(manager, 160, 10)
    assert ops.attempts == 1  # not yet
    clock.advance(1)
    batches(manager, 170, 10)
    assert ops.attempts == 2 and manager.failing == 2
    second = failures_logged(caplog)[-1]
    assert second.levelno == logging.WARNING and second.exc_info is None
    assert "PermissionError" in second.getMessage() and "2 failures in a row; next try in 2 s" in second.getMessage()

    delays = []
    for _ in range(10):  # doubling, up to the maximum
        before = ops.attempts
        waited = 0
        while ops.attempts == before:
            clock.advance(1_000)
            waited += 1_000
            batches(manager, 200 + waited, 1)
        delays.append(waited)
    assert delays == [2_000, 4_000, 8_000, 16_000, 32_000, RETRY_MAX_MS, RETRY_MAX_MS, 60_000, 60_000, 60_000]
    assert len(failures_logged(caplog)) == ops.attempts == 12
    assert sum(r.exc_info is not None for r in failures_logged(caplog)) == 1

    ops.refusing = False  # writable again: the next try succeeds and the backoff ends
    clock.advance(RETRY_MAX_MS)
    batches(manager, 1_000, 1)
    assert manager.last_index == 1_000 and manager.failing == 0
    assert any("saved again after 12 failed attempts" in r.getMessage() for r in caplog.records)
    assert (tmp_path / "snapshot" / "snapshot_1000").is_dir()

    ops.refusing = True  # a new run of failures starts from the first delay, traceback again
    batches(manager, 1_010, 5)
    assert ops.attempts == 14 and failures_logged(caplog)[-1].exc_info is not None
    clock.advance(RETRY_FIRST_MS)
    batches(manager, 1_020, 1)
    assert ops.attempts == 15


def test_a_failing_capture_backs_off_too(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    class Failing(Machine):
        captures = 0

        def on_snapshot_capture(self) -> None:
            """Always fails."""
            self.captures += 1
            raise RuntimeError("cannot capture")

    clock = ManualClock()
    machine = Failing()
    manager = SnapshotManager(SnapshotStore(tmp_path), machine, threshold=10, clock=clock)
    batches(manager, 100, 30)
    assert machine.captures == 1 and len(failures_logged(caplog)) == 1
    clock.advance(RETRY_FIRST_MS)
    batches(manager, 130, 30)
    assert machine.captures == 2 and len(failures_logged(caplog)) == 2


def test_save_now_ignores_the_threshold_but_not_the_backoff(tmp_path: Path, ops: ReadOnlyDirectory) -> None:
    """What a leader whose newest snapshot turned out damaged asks for."""
    clock = ManualClock(5_000)
    manager = SnapshotManager(SnapshotStore(tmp_path), Machine(), threshold=1_000, clock=clock)
    manager.after_apply(7, 1)  # below the threshold: nothing
    assert manager.wait_idle(30) and manager.last_index == -1
    assert manager.save_now(7, 1)  # fails: the directory refuses it
    assert manager.wait_idle(30) and manager.failing == 1
    ops.refusing = False
    assert not manager.save_now(7, 1)  # the pause after a failure holds
    clock.advance(RETRY_FIRST_MS)
    assert manager.save_now(7, 1)
    assert manager.wait_idle(30) and manager.last_index == 7
    assert SnapshotStore(tmp_path).latest() is not None
