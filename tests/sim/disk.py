"""The simulated disk under each node's real MmapLogStore: a durable image of its segment
files, kept beside the files themselves, and the two ways a node can go down.

- **Process crash**: the process dies, the page cache survives. Every byte written
  (through the mmap, or with pwrite in sync mode) stays in the files; only the mappings
  go away (no flush).
- **Power loss**: the page cache is lost. Each data/index segment file reverts to its
  durable image (what was last msynced), except for a torn tail: a random part of the
  bytes that were written but never made durable still reaches the disk (a random
  prefix of them, or a random subset of their 4 KiB pages, as kernel write-back would).
  `checkpoint`, `currterm` and `reset` are written atomically with fsync
  (kvfile.write_atomic), so they are always at their last written version already.

The durable image is honest because it does not trust the store's own bookkeeping
(`_flushed_data` and friends): every msync of a segment range is observed at the
MappedTable, the one place data becomes durable, and copies the bytes it made durable.
Segment creation (posix_fallocate + directory fsync) makes a durable all-zero file;
deleting a segment is taken as durable too (a simplification: the store does not fsync
the directory after an unlink, so a real power loss could bring a deleted segment back).

The store picks these classes up through `traced_segment_lists`, which swaps the
SegmentList class the store module uses for `TracingSegmentList` for the duration of a
test; no store code is changed.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dledger._native import impl
from dledger.store import mmap_store
from dledger.store.layout import is_segment_name
from dledger.store.segment_list import SegmentList

PAGE = 4096
KINDS = ("data", "index")


class SimCrash(BaseException):
    """The simulated process died inside a store call (a crash point before an msync).

    A BaseException so no `except Exception` in the code under test can swallow it."""


@dataclass
class TornReport:
    """What one power loss did to one file list (offsets are the list's logical ones)."""

    kind: str
    mode: str
    dirty_from: int = -1
    dirty_to: int = -1
    dirty_bytes: int = 0
    kept_bytes: int = 0


@dataclass
class NodeDisk:
    """The durable image of one node's `data/` and `index/` segment files.

    Attributes:
        node_dir: the node's store directory.
        durable: per kind, segment start offset -> its durable bytes (missing = zeros).
        crash_armed: the next msync of this node raises SimCrash (and sets `crashed`).
        crashed: a SimCrash was raised (the harness takes the node down).
        msyncs: how many msyncs were observed.
        atom: the unit a torn write is cut at (1: any byte; 512: a disk whose sector
            writes are atomic, so an 8-byte header at a sector's start is never torn).
    """

    node_dir: Path
    durable: dict[str, dict[int, bytearray]] = field(default_factory=lambda: {k: {} for k in KINDS})
    crash_armed: bool = False
    crashed: bool = False
    msyncs: int = 0
    atom: int = 1

    # -- observation (called by TracingTable / TracingSegmentList)

    def record_msync(self, kind: str, table: Any, frm: int, to: int) -> None:
        """[frm, to) of the list's logical offsets is now durable with its current bytes."""
        self.msyncs += 1
        if table.count == 0 or to <= frm:
            return
        size = int(table.file_size)
        start, end = max(frm, int(table.first_offset)), min(to, int(table.end_offset))
        images = self.durable[kind]
        while start < end:
            seg = start - start % size
            stop = min(end, seg + size)
            image = images.get(seg)
            if image is None:
                image = images[seg] = bytearray(size)
            image[start - seg : stop - seg] = table.read(start, stop - start)
            start = stop

    def segment_created(self, kind: str, offset: int) -> None:
        """A new preallocated, all-zero segment file whose name is durable."""
        self.durable[kind].pop(offset, None)

    def segment_deleted(self, kind: str, offset: int) -> None:
        self.durable[kind].pop(offset, None)

    # -- power loss

    def _files(self, kind: str) -> list[tuple[int, Path]]:
        directory = self.node_dir / kind
        if not directory.is_dir():
            return []
        return sorted((int(n), directory / n) for n in os.listdir(directory) if is_segment_name(n))

    def dirty_bytes(self) -> int:
        """Bytes in the files that differ from the durable image (what a power loss now
        could lose). Reads the files: call it while the store is down or quiescent."""
        total = 0
        for kind in KINDS:
            for offset, path in self._files(kind):
                current = np.fromfile(path, dtype=np.uint8)
                image = self.durable[kind].get(offset)
                durable = np.frombuffer(image, dtype=np.uint8) if image is not None else np.zeros_like(current)
                total += int(np.count_nonzero(current != durable[: len(current)]))
        return total

    def power_loss(self, rng: random.Random, mode: str | None = None) -> list[TornReport]:
        """Revert every segment file to its durable image plus a torn part of the unsynced
        bytes (`mode` forces "lost", "kept", "prefix" or "pages"). The store must be down
        (its mappings closed). Afterwards everything on disk is durable."""
        reports = []
        for kind in KINDS:
            files = self._files(kind)
            images = self.durable[kind]
            current: dict[int, np.ndarray[Any, Any]] = {}
            durable: dict[int, np.ndarray[Any, Any]] = {}
            dirty: list[int] = []  # logical offsets of dirty pages
            lo, hi = -1, -1
            for offset, path in files:
                cur = np.fromfile(path, dtype=np.uint8)
                image = images.get(offset)
                dur = np.zeros_like(cur)
                if image is not None:
                    n = min(len(image), len(cur))
                    dur[:n] = np.frombuffer(image, dtype=np.uint8)[:n]
                current[offset], durable[offset] = cur, dur
                diff = np.flatnonzero(cur != dur)
                if len(diff):
                    lo = offset + int(diff[0]) if lo < 0 else lo
                    hi = offset + int(diff[-1]) + 1
                    dirty.extend(offset + int(p) * PAGE for p in np.unique(diff // PAGE))
            report = TornReport(kind, "clean", lo, hi)
            if lo >= 0:
                report.dirty_bytes = sum(int(np.count_nonzero(current[o] != durable[o])) for o in current)
                keep = self._torn_selection(rng, report, lo, hi, dirty, mode, self.atom)
                for offset, path in files:
                    cur, new = current[offset], durable[offset].copy()
                    for start, stop in keep:
                        a, b = max(start, offset), min(stop, offset + len(cur))
                        if a < b:
                            new[a - offset : b - offset] = cur[a - offset : b - offset]
                    report.kept_bytes += int(np.count_nonzero((new != durable[offset]) & (new == cur)))
                    if not np.array_equal(new, cur):
                        with open(path, "r+b") as fh:
                            fh.write(new.tobytes())
                            fh.flush()
                            os.fsync(fh.fileno())
                    images[offset] = bytearray(new.tobytes())
            else:
                for offset in current:
                    images[offset] = bytearray(current[offset].tobytes())
            for offset in [o for o in images if o not in current]:
                del images[offset]
            reports.append(report)
        return reports

    @staticmethod
    def _torn_selection(
        rng: random.Random,
        report: TornReport,
        lo: int,
        hi: int,
        dirty_pages: list[int],
        mode: str | None,
        atom: int = 1,
    ) -> list[tuple[int, int]]:
        """Which unsynced byte ranges reach the disk: nothing, everything, a random prefix
        (a torn tail, cut at any byte), or a random subset of the dirty pages with the
        last one of them torn."""
        roll = rng.random()
        if mode is not None:
            roll = {"lost": 0.0, "kept": 0.3, "prefix": 0.5, "pages": 0.9}[mode]
        if roll < 0.25:
            report.mode = "lost"
            return []
        if roll < 0.35:
            report.mode = "kept"
            return [(lo, hi)]
        if roll < 0.85 or (len(dirty_pages) < 2 and mode is None):
            report.mode = "prefix"
            cut = rng.randint(lo, hi)
            return [(lo, max(lo, cut - cut % atom))]
        report.mode = "pages"
        chosen = [p for p in dirty_pages if rng.random() < 0.5]
        ranges = [(p, p + PAGE) for p in chosen]
        if ranges:
            last = ranges[-1][0]
            cut = rng.randint(0, PAGE)
            ranges[-1] = (last, last + cut - cut % atom)
        return ranges


# -- the hooks the store uses (through traced_segment_lists)

_DISKS: dict[Path, NodeDisk] = {}


def register_disk(disk: NodeDisk) -> None:
    """Observe the segment lists opened under `disk.node_dir` from now on."""
    _DISKS[disk.node_dir.resolve()] = disk


def unregister_disk(disk: NodeDisk) -> None:
    _DISKS.pop(disk.node_dir.resolve(), None)


class TracingTable(impl.MappedTable):  # type: ignore[misc,name-defined]
    """A MappedTable whose msync reports what it made durable (and can crash first)."""

    disk: NodeDisk | None = None
    kind: str = ""

    def msync(self, frm: int, to: int) -> None:
        disk = self.disk
        if disk is not None and (disk.crash_armed or disk.crashed):
            disk.crash_armed, disk.crashed = False, True
            raise SimCrash(f"{disk.node_dir.name}: crashed before msync [{frm}, {to}) of {self.kind}")
        super().msync(frm, to)
        if disk is not None:
            disk.record_msync(self.kind, self, frm, to)


class TracingSegmentList(SegmentList):
    """SegmentList reporting segment creation/deletion and msyncs to its node's disk."""

    def __init__(
        self, directory: str | os.PathLike[str], file_size: int, read_only: bool = False, keep_fds: bool = False
    ) -> None:
        super().__init__(directory, file_size, read_only, keep_fds)
        self.disk = _DISKS.get(Path(directory).resolve().parent)
        self.kind = Path(directory).name
        if self.disk is not None:
            table = TracingTable(file_size)
            table.disk, table.kind = self.disk, self.kind
            self.table = table

    def _create(self, offset: int) -> Any:
        existed = self.path_of(offset).exists()
        mapped = super()._create(offset)
        if self.disk is not None and not existed:
            self.disk.segment_created(self.kind, offset)
        return mapped

    def drop_last(self) -> None:
        offset = self.table.end_offset - self.file_size
        super().drop_last()
        if self.disk is not None:
            self.disk.segment_deleted(self.kind, offset)

    def drop_first(self) -> None:
        offset = self.table.first_offset
        super().drop_first()
        if self.disk is not None:
            self.disk.segment_deleted(self.kind, offset)


@contextmanager
def traced_segment_lists() -> Iterator[None]:
    """Make MmapLogStore use TracingSegmentList while the context is open."""
    namespace = vars(mmap_store)
    saved = namespace["SegmentList"]
    namespace["SegmentList"] = TracingSegmentList
    try:
        yield
    finally:
        namespace["SegmentList"] = saved
