"""Segment files created ahead of the writer (warm-ahead's spare) and segment files
deleted by a truncation take turns (`SegmentList._files_lock`).

Warm-ahead creates the next segment in its own thread, without the store's lock. Before,
a roll into that offset and a truncation dropping it could run in between: the pass then
mapped a deleted file (DISK_ERROR: the store failed and refused every write), or
installed the mapping of a deleted file as the spare, and the entries later rolled into
it were acknowledged and then gone (the reopened store found a segment gap).
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType

import pytest

import dledger
from dledger.store import StoreConfig
from dledger.store.segment_list import SegmentList

pytestmark = pytest.mark.faults

SEGMENT = 4096
SAFETY_S = 30.0
"""How long a paused thread waits at most (a bound against hangs, never reached when the
test passes)."""


class WatchedLock:
    """A re-entrant lock that tells when a thread had to wait for it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.waited = threading.Event()

    def __enter__(self) -> WatchedLock:
        if not self._lock.acquire(blocking=False):
            self.waited.set()
            self._lock.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._lock.release()


def files(directory: Path) -> list[int]:
    return sorted(int(p.name) for p in directory.iterdir())


def test_a_roll_and_a_truncation_wait_for_the_spare_being_created(tmp_path: Path) -> None:
    """The pass is held between creating the next segment's file and mapping it; the
    writer rolls into that offset and a truncation drops it. Both wait for the pass,
    the roll takes its spare, and the truncation deletes a file nothing maps."""
    segments = SegmentList(tmp_path / "data", SEGMENT)
    segments.roll(0)
    watched = WatchedLock()
    segments._files_lock = watched  # type: ignore[assignment]
    creating = threading.Event()
    plain_map = segments._map
    errors: list[BaseException] = []

    def held_map(path: Path) -> object:
        if threading.current_thread() is warm:
            creating.set()
            watched.waited.wait(SAFETY_S)  # until the writer waits (or, before, never)
        return plain_map(path)

    def run(work: object) -> None:
        try:
            work()  # type: ignore[operator]
        except BaseException as exc:  # reported below
            errors.append(exc)

    def roll_then_truncate() -> None:
        segments.roll(SEGMENT)
        segments.truncate_to(0)

    segments._map = held_map  # type: ignore[method-assign]
    warm = threading.Thread(target=run, args=(segments.prepare_next,))
    writer = threading.Thread(target=run, args=(roll_then_truncate,))
    warm.start()
    assert creating.wait(SAFETY_S)
    writer.start()
    for thread in (warm, writer):
        thread.join(SAFETY_S)
    assert not errors, errors
    assert watched.waited.is_set()
    assert (segments.table.count, segments.spare()) == (1, None)
    assert files(tmp_path / "data") == [0]
    segments.close()


def test_appends_and_truncations_beside_warm_ahead_keep_every_segment(tmp_path: Path) -> None:
    """A log with small segments and its warm-ahead thread, appended to and truncated
    back in rounds (the shape that lost acknowledged entries): the store stays
    writable, every segment it maps is a file on disk, and it reopens with every entry."""
    config = StoreConfig(data_file_size=1 << 16, index_file_size=32 * 256, warm_ahead_bytes=1 << 17)
    path = tmp_path / "log"
    with dledger.open_log(path, config) as log:
        for _ in range(300):
            log.append_many([b"%08d" % (log.end_index + 1 + k) + b"x" * 100 for k in range(40)])
            log.truncate(log.end_index - 30)
        end = log.end_index
        table = log.data_list.table
        mapped = [int(table.first_offset) + k * config.data_file_size for k in range(int(table.count))]
        assert set(mapped) <= set(files(path / "data"))
    with dledger.open_log(path, config) as log:
        assert log.end_index == end
        assert [log.get(i).body[:8] for i in (0, end)] == [b"%08d" % 0, b"%08d" % end]
