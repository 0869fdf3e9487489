"""Offline access to a store directory for the Spark source (no Spark here).

A store is opened read-only (`MmapLogStore` with `read_only=True`: nothing is written,
a torn tail is left in place) with its segment sizes read off its files, so stores
written by Java DLedger open too. Reads never go past the committed index recorded in
`checkpoint` (or `checkpoint.bak`, which Java's shutdown race can leave alone).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from dledger.clock import Clock, MonotonicClock
from dledger.codes import CorruptStoreError, DLedgerError, ResponseCode
from dledger.embedded import infer_segment_sizes, resolve_node_dir
from dledger.entry import INDEX_UNIT_SIZE
from dledger.spark.planning import DataLossError, IndexRange, LogBounds, SegmentSpan, check_data_loss, plan_local
from dledger.store import kvfile
from dledger.store.base import ColumnBatch
from dledger.store.mmap_store import CHECKPOINT_FILE, MmapLogStore, StoreConfig
from dledger.store.recovery import first_entry_header

log = logging.getLogger(__name__)

T = TypeVar("T")

OPEN_ATTEMPTS = 4
OPEN_RETRY_MS = 50
"""Opening a live node's directory can race with the node creating a segment file (it
is briefly shorter than the segment size); such an open is retried after a pause."""

INDEX_UNIT = np.dtype([("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8")])
"""One 32-byte index unit (big-endian; pos comes before size, unlike the entry header)."""
assert INDEX_UNIT.itemsize == INDEX_UNIT_SIZE


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


def _retrying(fn: Callable[[], T], clock: Clock | None = None) -> T:
    clock = clock or MonotonicClock()
    for attempt in range(OPEN_ATTEMPTS):
        try:
            return fn()
        except CorruptStoreError as exc:
            # a segment being created by a live node looks short for a moment
            if attempt == OPEN_ATTEMPTS - 1 or "short" not in exc.message:
                raise
            log.info("retrying store open after %s", exc)
            clock.sleep_ms(OPEN_RETRY_MS * (attempt + 1))
    raise AssertionError("unreachable")


def open_store(node_dir: Path) -> MmapLogStore:
    """Open a node directory read-only, with segment sizes taken from its files."""

    def attempt() -> MmapLogStore:
        data_size, index_size = infer_segment_sizes(node_dir)
        defaults = StoreConfig()
        config = StoreConfig(
            data_file_size=data_size or defaults.data_file_size,
            index_file_size=index_size or defaults.index_file_size,
            read_only=True,
            warm_ahead_bytes=0,
        )
        return MmapLogStore.open(node_dir, config)

    return _retrying(attempt)


def bounds_of(store: MmapLogStore) -> LogBounds:
    """The begin, end and committed indexes of an open store."""
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


def segment_spans(store: MmapLogStore) -> list[SegmentSpan]:
    """Every data segment that starts with an entry, with that entry's index."""
    table = store.data_list.table
    spans: list[SegmentSpan] = []
    for k in range(int(table.count)):
        start = int(table.first_offset) + k * int(table.file_size)
        header = first_entry_header(table, start)
        if header is not None and (not spans or int(header[2]) > spans[-1].first_index):
            spans.append(SegmentSpan(int(header[2]), start))
    return spans


def pos_function(store: MmapLogStore) -> Callable[[int], int]:
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
    store: MmapLogStore,
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


def read_meta(store: MmapLogStore, start: int, count: int) -> ColumnBatch:
    """index, term and pos of entries [start, start+count) straight from the index file
    (no data is touched); stops at the end of the index segment holding `start`."""
    table = store.index_list.table
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
        index, units["term"].astype(np.int64), units["pos"].astype(np.int64), np.zeros(count + 1, np.int32), bytearray()
    )
