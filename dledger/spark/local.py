"""Offline reads of a store directory for the Spark source (no Spark here): planning
the tasks of a read and reading their ranges as column batches.

The store is opened as a `dledger.store.StoreView`: its segments mapped read-only, its
bounds from the checkpoint, no recovery, nothing ever written, and no read past the
committed index (see `dledger.store.view`), so a running member's directory can be read.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dledger.codes import DLedgerError
from dledger.columns import ColumnBatch
from dledger.spark.planning import DataLossError, IndexRange, LogBounds, SegmentSpan, check_data_loss, plan_local
from dledger.store import StoreView, holds_store, resolve_node_dir


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
    if not holds_store(node):
        raise StoreNotFoundError(
            f"{path} is not a DLedger store: expected a node directory dledger-<selfId> holding data/, index/ "
            "and checkpoint, or a storeBaseDir holding exactly one such directory"
        )
    return node


def open_store(node_dir: Path) -> StoreView:
    """Open a node directory read-only (see `dledger.store.StoreView`)."""
    return StoreView.open(node_dir)


def bounds_of(store: StoreView) -> LogBounds:
    """The begin, end and committed indexes of an open store (end = committed: nothing
    past it is ever read offline)."""
    return LogBounds(int(store.begin_index), int(store.end_index), int(store.committed_index))


def segment_spans(store: StoreView) -> list[SegmentSpan]:
    """Every data segment that starts with an entry, with that entry's index."""
    return [SegmentSpan(first_index, start) for first_index, start in store.segment_starts()]


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
        records: read the record columns instead of the bodies (with `with_bodies`).
    """

    node_dir: str
    start: int
    end: int
    with_bodies: bool
    fail_on_data_loss: bool
    records: bool = False

    def read(self, batch_rows: int, batch_bytes: int) -> Iterator[ColumnBatch]:
        """The entries as column batches."""
        return read_range(
            Path(self.node_dir),
            self.start,
            self.end,
            self.with_bodies,
            self.fail_on_data_loss,
            batch_rows,
            batch_bytes,
            self.records,
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
    records: bool = False,
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
        records: with `with_bodies`, read the record columns instead of the bodies
            (`StoreView.read_records`: each field copied once; `bodies` empty).

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
            if not with_bodies:
                batch = store.read_meta(index, count)
            elif records:
                batch = store.read_records(index, count, batch_bytes)
            else:
                batch = store.read_columns(index, count, batch_bytes)
            if batch.count == 0:
                raise DataLossError(f"entry {index} of {node_dir} could not be read")
            yield batch
            index += batch.count
    finally:
        store.close()
