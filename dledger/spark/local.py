"""Offline access to a store directory for the Spark source (no Spark here).

A store is opened as a `StoreView`: its segment files are mapped read-only and its
bounds come from `checkpoint` (or `checkpoint.bak`, which Java's shutdown race can leave
alone) and the first entry of the first data segment. There is no recovery scan, nothing
is ever written, created, extended or deleted, and reads never go past the committed
index, so the directory of a running member (or a read-only copy, or a store written by
Java DLedger) can be read while its owner works on it. Every entry read is checked
against its index unit and its body CRC by the store core.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dledger._native import impl
from dledger.codes import CorruptStoreError, DLedgerError, ResponseCode
from dledger.columns import ColumnBatch
from dledger.embedded import resolve_node_dir
from dledger.entry import HEADER_SIZE, INDEX_UNIT_SIZE, Entry
from dledger.spark.planning import DataLossError, IndexRange, LogBounds, SegmentSpan, check_data_loss, plan_local
from dledger.store import kvfile
from dledger.store.layout import CHECKPOINT_FILE, RESET_FILE, is_segment_name
from dledger.store.mmap_store import StoreConfig
from dledger.store.recovery import first_entry_header

log = logging.getLogger(__name__)

INDEX_UNIT = np.dtype([("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8")])
"""One 32-byte index unit (big-endian; pos comes before size, unlike the entry header)."""
assert INDEX_UNIT.itemsize == INDEX_UNIT_SIZE

OPEN_ATTEMPTS = 3
"""Listing and mapping a directory is redone (at once) when a segment file disappears in
between: retention deleting the oldest segment of a running member."""


class StoreNotFoundError(FileNotFoundError):
    """The path given to the source is not a DLedger store directory."""


def node_dir_of(path: str | os.PathLike[str]) -> Path:
    """The node directory (`dledger-<selfId>`) for `path`: the directory itself, or the
    one `dledger-*` directory inside a storeBaseDir.

    Raises:
        StoreNotFoundError: `path` is neither.
    """
    try:
        node = resolve_node_dir(Path(path).absolute())
    except DLedgerError as exc:
        raise StoreNotFoundError(exc.message) from None
    if not node.is_dir() or not any((node / name).exists() for name in ("data", "index", CHECKPOINT_FILE)):
        raise StoreNotFoundError(
            f"{path} is not a DLedger store: expected a node directory dledger-<selfId> holding data/, index/ "
            "and checkpoint, or a storeBaseDir holding exactly one such directory"
        )
    return node


def _map_segments(directory: Path, default_size: int) -> Any:
    """A read-only `MappedTable` of the segment files in `directory`.

    The segment size is the size of the largest file. A last file shorter than that
    holds no entry (a running member is creating it: the file exists before it has its
    size, and nothing is written into it before that) and is left out; any other odd
    size, a misnamed file or a gap is a CorruptStoreError.
    """
    names = sorted(n for n in os.listdir(directory) if is_segment_name(n)) if directory.is_dir() else []
    sizes = [(directory / n).stat().st_size for n in names]
    file_size = max(sizes, default=0) or default_size
    table = impl.MappedTable(file_size)
    try:
        for k, (name, size) in enumerate(zip(names, sizes, strict=True)):
            path = directory / name
            if size != file_size:
                if k == len(names) - 1:
                    log.debug("leaving out %s: %d of %d bytes (being created)", path, size, file_size)
                    break
                raise CorruptStoreError(str(path), size, f"segment is {size} bytes, the others {file_size}")
            offset = int(name)
            if offset % file_size or (table.count and offset != table.end_offset):
                raise CorruptStoreError(str(path), 0, f"segment name does not follow the segment size {file_size}")
            fd = os.open(path, os.O_RDONLY)
            try:
                mapped = mmap.mmap(fd, file_size, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
            table.push(mapped, offset)
    except BaseException:
        _unmap(table)
        raise
    return table


def _unmap(table: Any) -> None:
    while table.count:
        table.pop_last()


def _read_only_roller(kind: int, offset: int) -> None:  # pragma: no cover - reads never roll
    raise DLedgerError(ResponseCode.DISK_ERROR, "store is read-only")


class StoreView:
    """A read-only view of a node directory's committed entries (see the module doc).

    Attributes:
        node_dir: the node directory.
        begin_index: the first entry kept (-1 when there is none).
        committed_index: the committed index (the checkpoint's, never past its endIndex).
        end_index: the last entry readable here: the committed index.
        write_pos: the data position just after the last committed entry.
        data_table, index_table: the read-only mapped segments.
    """

    def __init__(self, node_dir: Path, data_table: Any, index_table: Any) -> None:
        self.node_dir = node_dir
        self.data_table = data_table
        self.index_table = index_table
        self._core = impl.LogCore()
        self._core._init_core(data_table, index_table, _read_only_roller)
        self._core.state = impl.STATE_READ_ONLY
        self.begin_index = -1
        self.committed_index = -1
        self.write_pos = 0

    @classmethod
    def open(cls, node_dir: Path) -> StoreView:
        """Map `node_dir` read-only and find its bounds.

        Raises:
            DLedgerError: DISK_ERROR when the last committed entry cannot be read.
            CorruptStoreError: segment files of odd sizes or names.
        """
        for attempt in range(OPEN_ATTEMPTS):
            try:
                return cls._open(node_dir)
            except FileNotFoundError:
                if attempt == OPEN_ATTEMPTS - 1:
                    raise
                log.info("a segment of %s disappeared while it was opened; listing it again", node_dir)
        raise AssertionError("unreachable")

    @classmethod
    def _open(cls, node_dir: Path) -> StoreView:
        defaults = StoreConfig()
        data = _map_segments(node_dir / "data", defaults.data_file_size)
        try:
            index = _map_segments(node_dir / "index", defaults.index_file_size)
        except BaseException:
            _unmap(data)
            raise
        view = cls(node_dir, data, index)
        try:
            view._find_bounds()
        except BaseException:
            view.close()
            raise
        return view

    def _find_bounds(self) -> None:
        table = self.data_table
        begin = -1
        for k in range(int(table.count)):
            header = first_entry_header(table, int(table.first_offset) + k * int(table.file_size))
            if header is not None:
                begin = int(header[2])
                break
        committed = checkpoint_committed(self.node_dir)
        if begin < 0:
            # no entry is kept: everything up to the last reset was committed and deleted
            before_begin = kvfile.read_int(kvfile.read(self.node_dir / RESET_FILE), "beforeBeginIndex", -1)
            self.committed_index = max(committed, before_begin)
            return
        committed = max(committed, begin - 1)  # a deleted prefix was committed
        self.begin_index, self.committed_index = begin, committed
        if committed < begin:
            return
        core = self._core
        core._set_state(begin, committed, -1, 0)
        try:
            last = core.get(committed)
        except DLedgerError as exc:
            raise DLedgerError(
                ResponseCode.DISK_ERROR,
                f"{self.node_dir}: entry {committed} is committed (checkpoint) but cannot be read: {exc.message}",
            ) from None
        self.write_pos = int(last.pos) + HEADER_SIZE + len(last.body)
        core._set_state(begin, committed, int(last.term), self.write_pos)

    @property
    def end_index(self) -> int:
        """The last readable entry (the committed index)."""
        return self.committed_index

    def get(self, index: int) -> Entry:
        """The committed entry at `index` (DLedgerError INDEX_OUT_OF_RANGE outside)."""
        entry: Entry = self._core.get(index)
        return entry

    def read_columns(self, from_index: int, max_count: int, max_bytes: int) -> ColumnBatch:
        """Committed entries from `from_index` column-wise (see ColumnBatch)."""
        return ColumnBatch.from_raw(self._core.read_columns(from_index, max_count, max_bytes))

    def close(self) -> None:
        """Unmap the segments (idempotent)."""
        self._core._set_state(-1, -1, -1, 0)
        _unmap(self.data_table)
        _unmap(self.index_table)

    def __enter__(self) -> StoreView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_store(node_dir: Path) -> StoreView:
    """Open a node directory read-only (see `StoreView`)."""
    return StoreView.open(node_dir)


def bounds_of(store: StoreView) -> LogBounds:
    """The begin, end and committed indexes of an open store (end = committed: nothing
    past it is ever read offline)."""
    return LogBounds(int(store.begin_index), int(store.end_index), int(store.committed_index))


def checkpoint_committed(node_dir: Path) -> int:
    """The committed index recorded in `checkpoint` (or `checkpoint.bak`), -1 without one,
    never above the `endIndex` recorded with it (Java DLedger can leave a committed index
    past the end after a truncate, DLedger #316). Cheap: streams use it to see new entries
    without opening the store."""
    values = kvfile.read(node_dir / CHECKPOINT_FILE)
    committed = kvfile.read_int(values, "committedIndex", -1)
    end = kvfile.read_int(values, "endIndex", committed)
    return min(committed, end)


def segment_spans(store: StoreView) -> list[SegmentSpan]:
    """Every data segment that starts with an entry, with that entry's index."""
    table = store.data_table
    spans: list[SegmentSpan] = []
    for k in range(int(table.count)):
        start = int(table.first_offset) + k * int(table.file_size)
        header = first_entry_header(table, start)
        if header is not None and (not spans or int(header[2]) > spans[-1].first_index):
            spans.append(SegmentSpan(int(header[2]), start))
    return spans


def pos_function(store: StoreView) -> Callable[[int], int]:
    """Data position of entry i (the end of the written data for i past the end)."""
    end, write_pos = int(store.end_index), int(store.write_pos)

    def pos_of(index: int) -> int:
        return write_pos if index > end else int(store.get(index).pos)

    return pos_of


@dataclass(frozen=True)
class LocalTask:
    """One offline read task (pickled into a Spark partition): entries [start, end) of
    the store in `node_dir`.

    Attributes:
        node_dir: the node directory, as a string (executors must see the same path).
        start, end: the range.
        with_bodies: read the bodies.
        fail_on_data_loss: fail (true) or skip when entries were deleted since planning.
    """

    node_dir: str
    start: int
    end: int
    with_bodies: bool
    fail_on_data_loss: bool

    def read(self, batch_rows: int, batch_bytes: int) -> Iterator[ColumnBatch]:
        """The entries as column batches."""
        return read_range(
            Path(self.node_dir), self.start, self.end, self.with_bodies, self.fail_on_data_loss, batch_rows, batch_bytes
        )


@dataclass(frozen=True)
class LocalPlan:
    """A planned offline read: the store's bounds and the task ranges."""

    bounds: LogBounds
    ranges: list[IndexRange]


def plan_store(
    store: StoreView,
    start: int,
    end: int,
    fail_on_data_loss: bool,
    min_partitions: int,
    max_partition_bytes: int,
) -> LocalPlan:
    """Plan the read of [start, end) (end already bounded by the committed index)."""
    bounds = bounds_of(store)
    end = min(end, bounds.latest)
    if start >= end:
        return LocalPlan(bounds, [])
    start = check_data_loss(start, bounds, fail_on_data_loss)
    if start >= end:
        return LocalPlan(bounds, [])
    ranges = plan_local(segment_spans(store), start, end, pos_function(store), min_partitions, max_partition_bytes)
    return LocalPlan(bounds, ranges)


def read_range(
    node_dir: Path,
    start: int,
    end: int,
    with_bodies: bool,
    fail_on_data_loss: bool,
    batch_rows: int,
    batch_bytes: int,
) -> Iterator[ColumnBatch]:
    """Entries [start, end) of a store as column batches (executor side).

    The range was planned from committed entries, so every entry in it must still be
    there, unless retention deleted a prefix since (then `fail_on_data_loss` decides).

    Args:
        node_dir: the node directory.
        start, end: the range.
        with_bodies: read the bodies (else only index, term and pos, from the index file;
            `offsets` are all zero and `bodies` empty).
        fail_on_data_loss: raise when entries were deleted, else skip them.
        batch_rows, batch_bytes: size of one batch.

    Raises:
        DataLossError: entries of the range are gone.
    """
    store = open_store(node_dir)
    try:
        bounds = bounds_of(store)
        start = check_data_loss(start, bounds, fail_on_data_loss)
        if end > bounds.latest and start < end:
            raise DataLossError(
                f"entries [{max(start, bounds.latest)}, {end}) of {node_dir} were committed when the read was "
                f"planned but the store now ends at {bounds.latest - 1} (was the directory replaced?)"
            )
        index = start
        while index < end:
            count = min(batch_rows, end - index)
            batch = store.read_columns(index, count, batch_bytes) if with_bodies else read_meta(store, index, count)
            if batch.count == 0:
                raise DataLossError(f"entry {index} of {node_dir} could not be read")
            yield batch
            index += batch.count
    finally:
        store.close()


def read_meta(store: StoreView, start: int, count: int) -> ColumnBatch:
    """index, term, pos and magic of entries [start, start+count) straight from the
    index file (no data is touched); stops at the end of the index segment holding `start`."""
    table = store.index_table
    file_size = int(table.file_size)
    offset = start * INDEX_UNIT_SIZE
    in_segment = (file_size - (offset - int(table.first_offset)) % file_size) // INDEX_UNIT_SIZE
    count = max(0, min(count, in_segment, int(store.end_index) + 1 - start))
    if count == 0 or start < int(store.begin_index):
        return ColumnBatch.empty()
    units = np.frombuffer(table.read(offset, count * INDEX_UNIT_SIZE), dtype=INDEX_UNIT)
    index = units["index"].astype(np.int64)
    if np.any(index != np.arange(start, start + count, dtype=np.int64)):
        raise DLedgerError(
            ResponseCode.DISK_ERROR, f"index units {start}..{start + count - 1} of {store.node_dir} are inconsistent"
        )
    return ColumnBatch(
        index,
        units["term"].astype(np.int64),
        units["pos"].astype(np.int64),
        np.zeros(count + 1, np.int32),
        bytearray(),
        units["magic"].astype(np.int32),
    )
