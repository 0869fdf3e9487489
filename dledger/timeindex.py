"""Finding entries by time: the first record at or after a timestamp, by binary search
over the log (O(log n) small reads, never a scan; interpolation picks the probes, so an
evenly growing log takes a handful). Used by the embedded API
(`LocalLog.index_at_time`) and the Spark source (`startingTimestamp`, `endingTimestamp`),
offline and live; the reads are passed in, so the same search runs over a store
directory, a local log and a cluster.

Semantics (Kafka's `offsetsForTimes`, adapted; docs/SPARK.md "Reading from a time"):

- The answer is the index of the first record (magic 16) whose event timestamp is at or
  after `timestamp_ms`, or the end of the searched range when no record is.
- A record's timestamp is an event time set by its writer: nothing makes it grow along
  the log. When timestamps do not decrease along the log the answer is exact. Otherwise
  it is *a* record with a timestamp at or after the time such that every record the
  search looked at before it was older; records before it may be newer (as Kafka, whose
  time index is built from the largest timestamp seen so far, gives no more either).
- Plain entries (magic 1) and NOOPs carry no time. They count as older than any time
  (Kafka's NO_TIMESTAMP, -1): a read starting at a time skips the plain entries before
  the first record it finds, and includes those after it. A probe that lands on a plain
  entry looks at the next `PROBE_WINDOW` entries (one read) for a record; a longer run of
  only plain entries is passed over as older. So the answer is exact when the records'
  timestamps do not decrease and plain entries come before the first record (a log that
  went from plain entries to records, the usual upgrade) or in runs of fewer than
  `PROBE_WINDOW` between records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from dledger.columns import ColumnBatch
from dledger.record import with_records

PROBE_WINDOW = 64
"""Entries one probe reads: a probe landing on plain entries finds the next record within
this many entries."""
PROBE_BYTES = 1 << 20
"""Body bytes one probe reads at most (at least one entry is always read)."""

WindowReader = Callable[[int, int], ColumnBatch]
"""(start, count) -> committed entries from `start`, at most `count` of them and at least
one (count >= 1, start inside the log)."""


@dataclass(frozen=True)
class TimeSearch:
    """The result of a search.

    Attributes:
        index: the first record at or after the time, or the range's end when none is.
        timestamp: that record's timestamp in ms (None when none was found).
        probes: how many reads the search made.
    """

    index: int
    timestamp: int | None
    probes: int

    @property
    def found(self) -> bool:
        """Whether a record at or after the time was found."""
        return self.timestamp is not None


def record_times(batch: ColumnBatch) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(indexes, timestamps) of the entries of `batch` that carry a time (its records),
    in log order, built from the C record columns (no Python work per entry).

    Raises:
        ValueError: a record entry whose body is not a valid record body.
    """
    records = with_records(batch).records
    assert records is not None
    count = batch.count
    valid = np.unpackbits(np.frombuffer(records.timestamp_valid, dtype=np.uint8), count=count, bitorder="little")
    has_time = valid.astype(bool)
    return batch.index[has_time].astype(np.int64), records.timestamps[:count][has_time].astype(np.int64)


def check_timestamp(timestamp_ms: int) -> int:
    """`timestamp_ms` as an int, checked: ms since the epoch, >= 0.

    Raises:
        ValueError: negative or not an integer.
    """
    if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int | np.integer):
        raise ValueError(f"a timestamp is an integer of ms since the epoch, got {timestamp_ms!r}")
    if timestamp_ms < 0:
        raise ValueError(f"a timestamp is ms since the epoch (>= 0), got {timestamp_ms}")
    return int(timestamp_ms)


def search_time(
    timestamp_ms: int,
    begin: int,
    end: int,
    read: WindowReader,
    window: int = PROBE_WINDOW,
    *,
    interpolate: bool = True,
) -> TimeSearch:
    """The first record in [begin, end) whose timestamp is at or after `timestamp_ms`
    (see the module doc for the semantics), by a binary search whose probes are guided
    by interpolation: at most 2 + 2 log2(end - begin) reads of at most `window` entries,
    a handful when timestamps grow about evenly along the log.

    The first probe reads the start of the range, the second its end; after that each
    probe goes where the time falls between the nearest older and newer records seen
    (interpolation), except after an interpolated probe that did not halve the range:
    then it bisects, so every two probes at least halve it.

    Args:
        timestamp_ms: the time, ms since the epoch (>= 0).
        begin, end: the range searched (the log's first kept index and its committed
            index + 1); empty when end <= begin.
        read: reads entries (see `WindowReader`).
        window: entries one probe reads (>= 1).
        interpolate: False: plain bisection (every probe in the middle; for comparison).

    Returns:
        The record's index and timestamp, or `end` (timestamp None) when there is none.

    Raises:
        ValueError: a bad timestamp or window, or a record whose body does not decode.
        RuntimeError: `read` returned no entry, or not the entries asked for.
    """
    target = check_timestamp(timestamp_ms)
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    best, best_ts = end, None
    older: tuple[int, int] | None = None  # (index, timestamp) of the last older record seen
    lo, hi, probes, bisect = begin, end, 0, not interpolate
    while lo < hi:
        size = hi - lo
        newer = None if best_ts is None else (best, best_ts)
        mid = _probe_position(target, lo, hi, probes, older, newer, window, bisect)
        interpolated = not bisect and probes >= 2 and older is not None and newer is not None
        count = min(window, hi - mid)
        batch = read(mid, count)
        probes += 1
        if batch.count == 0 or int(batch.index[0]) != mid:
            first = int(batch.index[0]) if batch.count else None
            raise RuntimeError(f"a read of entry {mid} returned {batch.count} entries starting at {first}")
        count = min(count, batch.count)  # a byte limit may have cut the read short
        indexes, times = record_times(batch)
        in_range = indexes < mid + count
        indexes, times = indexes[in_range], times[in_range]
        at_or_after = np.flatnonzero(times >= target)
        if len(at_or_after) == 0 and len(indexes) == 0 and mid + count == hi:
            hi = mid  # plain entries up to hi: no answer among them, it lies before mid
        elif len(at_or_after) == 0:  # only older records and plain entries (older than any time)
            lo = mid + count
            if len(indexes):
                older = (int(indexes[-1]), int(times[-1]))
        elif at_or_after[0] > 0:
            # older records, then a newer one: that is the answer (every record before it
            # that was probed is older)
            best, best_ts = int(indexes[at_or_after[0]]), int(times[at_or_after[0]])
            lo = hi = mid
        else:
            best, best_ts = int(indexes[0]), int(times[0])
            hi = mid  # entries mid..best-1 are plain: the answer is best or before mid
        bisect = not interpolate or (interpolated and (hi - lo) * 2 > size)
    return TimeSearch(best, best_ts, probes)


def _probe_position(
    target: int,
    lo: int,
    hi: int,
    probes: int,
    older: tuple[int, int] | None,
    newer: tuple[int, int] | None,
    window: int,
    bisect: bool,
) -> int:
    """Where the next probe reads, in [lo, hi): the start, then the end of the range,
    then by interpolation between the older and the newer record (the window centred on
    the estimate), or the middle when told to bisect or when an anchor is missing."""
    if bisect:
        return (lo + hi) // 2
    if probes == 0:
        return lo
    if probes == 1 and newer is None:
        return max(lo, hi - window)
    if older is None or newer is None or newer[1] <= older[1]:
        return (lo + hi) // 2
    (a_index, a_ts), (b_index, b_ts) = older, newer
    estimate = a_index + (target - a_ts) * (b_index - a_index) // (b_ts - a_ts)
    return min(max(estimate - window // 2, lo), hi - 1)


class ColumnReadable(Protocol):
    """A store read column-wise: `MmapLogStore`, a local log, `StoreView`."""

    @property
    def begin_index(self) -> int:
        """The first kept entry (-1 when none is)."""
        ...

    @property
    def committed_index(self) -> int:
        """The last committed entry."""
        ...

    def read_columns(self, from_index: int, max_count: int, max_bytes: int) -> ColumnBatch:
        """Entries from `from_index` column-wise."""
        ...


def search_store(
    store: ColumnReadable, timestamp_ms: int, window: int = PROBE_WINDOW, *, interpolate: bool = True
) -> TimeSearch:
    """`search_time` over a store's committed entries (from its first kept one): the
    first record at or after `timestamp_ms`, else committed index + 1.

    Raises:
        ValueError: a bad timestamp, or a record whose body does not decode.
    """
    end = int(store.committed_index) + 1
    begin = int(store.begin_index)
    begin = end if begin < 0 else begin

    def read(start: int, count: int) -> ColumnBatch:
        return store.read_columns(start, count, PROBE_BYTES)

    return search_time(timestamp_ms, begin, end, read, window, interpolate=interpolate)
