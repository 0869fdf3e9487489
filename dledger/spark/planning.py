"""Read planning of the `dledger` Spark data source, without Spark: index bounds, data
loss, streaming offsets, and splitting an index range into tasks (offline by data segment,
live across the cluster's nodes).

Indexes follow DLedger: 0-based, contiguous; a range is [start, end) with an exclusive end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Literal

from dledger.spark.options import ReadFrom, ReadOptions, Start
from dledger.spark.target import OptionError

log = logging.getLogger(__name__)

MIN_SPLIT_BYTES = 1 << 20
"""Offline reads are spread over `min_partitions` tasks only when every task gets at
least this much data; smaller ranges keep one task per data segment."""


class DataLossError(RuntimeError):
    """Entries a read needs are gone (deleted by retention or a snapshot reset)."""


@dataclass(frozen=True)
class LogBounds:
    """The readable part of a log.

    Attributes:
        begin: first kept index (-1 when no entry is kept).
        end: last index (-1 when nothing was ever appended).
        committed: highest committed index; reads never go past it.
    """

    begin: int
    end: int
    committed: int

    @property
    def earliest(self) -> int:
        """The first index that can be read (where "earliest" starts)."""
        return self.begin if self.begin >= 0 else self.end + 1

    @property
    def latest(self) -> int:
        """One past the last committed index (where "latest" starts; the end of a read)."""
        return self.committed + 1


@dataclass(frozen=True)
class IndexRange:
    """Entries [start, end) of the log."""

    start: int
    end: int

    @property
    def count(self) -> int:
        """Number of entries in the range."""
        return max(0, self.end - self.start)


# -- bounds and data loss


def resolve_start(starting: Start, bounds: LogBounds) -> int:
    """The first index of a new read: earliest (first kept entry), latest (committed + 1)
    or the given number."""
    if starting == "earliest":
        return bounds.earliest
    if starting == "latest":
        return bounds.latest
    return int(starting)


def resolve_end(ending: int | Literal["latest"], bounds: LogBounds) -> int:
    """The exclusive end of a batch read, never past the committed index."""
    if ending == "latest":
        return bounds.latest
    return min(int(ending), bounds.latest)


IndexAtTime = Callable[[int], int]
"""A time (ms since the epoch) -> the index of the first record at or after it, or one past
the last committed entry when none is (`dledger.timeindex`)."""


def resolve_range(opts: ReadOptions, bounds: LogBounds, at_time: IndexAtTime) -> IndexRange:
    """[start, end) of a batch read (a stream uses only the start): startingIndex or
    startingTimestamp, endingIndex or endingTimestamp, never past the committed index.
    `at_time` is only called for the timestamp options."""
    if opts.starting_timestamp is not None:
        start = at_time(opts.starting_timestamp)
    else:
        start = resolve_start(opts.starting, bounds)
    if opts.ending_timestamp is not None:
        end = min(at_time(opts.ending_timestamp), bounds.latest)
    else:
        end = resolve_end(opts.ending, bounds)
    return IndexRange(start, end)


def check_data_loss(start: int, bounds: LogBounds, fail_on_data_loss: bool) -> int:
    """`start`, or the first live index when entries from `start` on are gone (the prefix
    was compacted after a snapshot, or deleted by retention) and `fail_on_data_loss` is
    false (Kafka's semantics). A read of a compacted log (first index > 0) that starts at
    its first live index says so at INFO; one moved there, at WARNING.

    Raises:
        DataLossError: entries before the first live one were asked for and
            `fail_on_data_loss` is true.
    """
    earliest = bounds.earliest
    if start >= earliest:
        if start == earliest and bounds.begin > 0:
            log.info(
                "the log is compacted: it starts at index %d (older entries were compacted after a snapshot or "
                "deleted by retention); reading from its first live index %d",
                earliest,
                earliest,
            )
        return start
    if fail_on_data_loss:
        raise DataLossError(
            f"entries from index {start} were requested but the log now starts at index {earliest} "
            f"(older entries were compacted after a snapshot or deleted by retention); "
            f"set failOnDataLoss=false to start at its first live index {earliest}"
        )
    log.warning(
        "entries %d..%d are gone (the log now starts at index %d: compacted after a snapshot or deleted by "
        "retention); failOnDataLoss=false: reading from its first live index %d",
        start,
        earliest - 1,
        earliest,
        earliest,
    )
    return earliest


# -- streaming offsets


def make_offset(group: str, index: int, term: int | None = None) -> dict[str, Any]:
    """A stream offset: `{"group": g, "index": N}` with N the next index to read, and
    `"term"`: the term of entry N - 1 when known (`check_same_log`)."""
    offset: dict[str, Any] = {"group": group, "index": int(index)}
    if term is not None:
        offset["term"] = int(term)
    return offset


def check_same_log(offset: Mapping[str, Any], term_now: int | None, fail_on_data_loss: bool) -> None:
    """A checkpointed offset against the log the stream reads now: the entry before it
    must have the term the offset recorded. A re-founded group (its first term random)
    holds other entries at those indexes: read on, a longer new log would be read from
    the checkpoint's index, its head never delivered. `term_now` None: not known (no
    term recorded, or that entry is compacted): nothing to compare.

    Raises:
        DataLossError: the terms differ and `fail_on_data_loss` is true (false: a WARNING).
    """
    recorded = offset.get("term")
    if recorded is None or term_now is None or int(recorded) == term_now:
        return
    index = int(offset["index"])
    said = (
        f"the stream's checkpoint is at index {index} after an entry of term {recorded}, but entry {index - 1} "
        f"of the log now has term {term_now}: the log was replaced (a re-founded group?) since the checkpoint "
        "was written"
    )
    if fail_on_data_loss:
        raise DataLossError(f"{said}; use a new checkpointLocation to read it from the start")
    log.warning("%s; failOnDataLoss=false: going on from index %d", said, index)


def offset_index(offset: Mapping[str, Any], group: str) -> int:
    """The `index` of a stream offset, checking it belongs to `group`.

    Raises:
        OptionError: the offset (from a checkpoint) names another group, or is malformed.
    """
    try:
        index = int(offset["index"])
    except (KeyError, TypeError, ValueError):
        raise OptionError(f"malformed dledger stream offset {dict(offset)!r}: expected {{group, index}}") from None
    found = offset.get("group", group)
    if found != group:
        raise OptionError(
            f"the checkpoint was written for group {found!r} but option group is {group!r}; "
            "use a new checkpointLocation to read another group"
        )
    return index


def next_end(start: int, latest: int, max_rows: int | None, target: int | None) -> int:
    """End offset of the next micro-batch: up to `latest` (committed + 1), no further than
    an availableNow `target`, at most `max_rows` entries, never before `start`."""
    end = latest
    if target is not None:
        end = min(end, target)
    if max_rows is not None:
        end = min(end, start + max_rows)
    return max(start, end)


def behind_checkpoint(start: int, latest: int, fail_on_data_loss: bool) -> int:
    """The end of a stream's next micro-batch when the log now ends before the stream's
    position (`latest`, committed + 1, below the checkpointed `start`): the log was
    replaced, or restored from an older copy, since the checkpoint was written. Kafka's
    "offset was changed from X to Y, some data may have been missed": with
    `fail_on_data_loss` false the stream goes on from the log's end, `latest` (an empty
    micro-batch moves it there; entries below it in a new log are not read), with a
    WARNING log line.

    Raises:
        DataLossError: when `fail_on_data_loss` is true.
    """
    if fail_on_data_loss:
        raise DataLossError(
            f"the stream's checkpoint is at index {start} but the log now ends at committed index {latest - 1}: "
            "it was replaced, or restored from an older copy, since the checkpoint was written, and entries may "
            f"have been missed; set failOnDataLoss=false to go on from its end (index {latest}), or use a new "
            "checkpointLocation to read it again from the start"
        )
    log.warning(
        "the stream's checkpoint is at index %d but the log now ends at committed index %d (replaced, or "
        "restored from an older copy): some data may have been missed; failOnDataLoss=false: going on from "
        "index %d",
        start,
        latest - 1,
        latest,
    )
    return latest


def admit(available: int, min_rows: int | None, waited_ms: float, max_delay_ms: int) -> bool:
    """Admission control (Kafka's `minOffsetsPerTrigger` / `maxTriggerDelay`): may a
    micro-batch of `available` entries start, `waited_ms` after the last one did?

    Without a minimum any new entry starts one; with one, a batch waits until `min_rows`
    entries are there or `max_delay_ms` has passed (then whatever is there, if anything).
    """
    if available <= 0:
        return False
    return min_rows is None or available >= min_rows or waited_ms >= max_delay_ms


# -- splitting


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for a >= 0, b > 0."""
    return -(-a // b)


def split_even(start: int, end: int, parts: int) -> list[IndexRange]:
    """[start, end) in `parts` contiguous ranges differing in size by at most one
    (fewer when there are fewer entries; none when the range is empty)."""
    n = end - start
    if n <= 0:
        return []
    parts = max(1, min(parts, n))
    base, extra = divmod(n, parts)
    out: list[IndexRange] = []
    lo = start
    for k in range(parts):
        hi = lo + base + (1 if k < extra else 0)
        out.append(IndexRange(lo, hi))
        lo = hi
    return out


def first_index_at(pos: int, lo: int, hi: int, pos_of: Callable[[int], int]) -> int:
    """The first index in [lo, hi) whose entry starts at or after data position `pos`
    (`hi` when none does); positions grow with the index."""
    while lo < hi:
        mid = (lo + hi) // 2
        if pos_of(mid) < pos:
            lo = mid + 1
        else:
            hi = mid
    return lo


@dataclass(frozen=True)
class SegmentSpan:
    """A data segment and the index of its first entry."""

    first_index: int
    start_pos: int


def plan_local(
    segments: Sequence[SegmentSpan],
    start: int,
    end: int,
    pos_of: Callable[[int], int],
    min_partitions: int = 1,
    max_partition_bytes: int = 256 << 20,
) -> list[IndexRange]:
    """Split [start, end) of a local store into read tasks.

    One task per data segment holding part of the range; a segment part larger than
    `max_partition_bytes` is split by entry positions (looked up in the index file); and
    when the whole range is large (at least MIN_SPLIT_BYTES per task) the parts are split
    further so that there are at least `min_partitions` tasks (a multiple of it when the
    data of a single piece is split: whole waves of tasks).

    Args:
        segments: the data segments in order, each with the index of its first entry
            (segments without entries left out).
        start, end: the range, [start, end); `start` at or after the first segment's
            first entry.
        pos_of: data position of an entry, for indexes in [start, end] (the position of
            `end` may be the end of the written data).
        min_partitions: lower bound on the number of tasks for a large range.
        max_partition_bytes: upper bound on the data of one task.

    Returns:
        Contiguous ranges covering [start, end) in order.
    """
    if end <= start:
        return []
    pieces: list[IndexRange] = []
    for k, seg in enumerate(segments):
        seg_end = segments[k + 1].first_index if k + 1 < len(segments) else end
        lo = start if k == 0 else max(seg.first_index, start)
        hi = min(seg_end, end)
        if lo < hi:
            pieces.append(IndexRange(lo, hi))
    if not pieces:
        pieces = [IndexRange(start, end)]
    sizes = [max(0, pos_of(p.end) - pos_of(p.start)) for p in pieces]
    total = sum(sizes)
    # a large range gets a multiple of min_partitions tasks (whole waves of tasks)
    spread = min_partitions > 1 and total >= min_partitions * MIN_SPLIT_BYTES
    tasks = min_partitions * ceil_div(total, min_partitions * max_partition_bytes) if spread else 1
    out: list[IndexRange] = []
    for piece, size in zip(pieces, sizes, strict=True):
        parts = ceil_div(size, max_partition_bytes) if size else 1
        if spread:
            parts = max(parts, ceil_div(size * tasks, total))
        out.extend(_split_by_pos(piece, parts, size, pos_of))
    return out


def _split_by_pos(piece: IndexRange, parts: int, size: int, pos_of: Callable[[int], int]) -> list[IndexRange]:
    parts = min(parts, piece.count)
    if parts <= 1:
        return [piece]
    base = pos_of(piece.start)
    cuts = [piece.start]
    for j in range(1, parts):
        cut = first_index_at(base + size * j // parts, cuts[-1] + 1, piece.end, pos_of)
        if cut < piece.end:
            cuts.append(cut)
    cuts.append(piece.end)
    return [IndexRange(a, b) for a, b in pairwise(cuts) if a < b]


def plan_live(start: int, end: int, min_partitions: int, entries_per_partition: int) -> list[IndexRange]:
    """Split [start, end) of a live log into max(min_partitions, ceil(n / entries_per_partition))
    contiguous ranges (never more than one per entry)."""
    n = end - start
    if n <= 0:
        return []
    return split_even(start, end, max(min_partitions, ceil_div(n, entries_per_partition)))


# -- choosing nodes (live reads)


def candidate_nodes(read_from: ReadFrom, leader_id: str | None, node_ids: Sequence[str]) -> list[str]:
    """The nodes that serve reads first: the leader, the followers, or all nodes (leader
    first). Without a known leader every node is a candidate; a follower-only read of a
    one-node group falls back to the leader."""
    nodes = list(node_ids)
    if leader_id is None or leader_id not in nodes:
        return nodes
    followers = [n for n in nodes if n != leader_id]
    if read_from == "leader":
        return [leader_id]
    if read_from == "follower":
        return followers or [leader_id]
    return [leader_id, *followers]


def assign_nodes(
    ranges: Sequence[IndexRange], candidates: Sequence[str], node_ids: Sequence[str], leader_id: str | None
) -> list[tuple[IndexRange, tuple[str, ...]]]:
    """Give each range an ordered list of nodes to try: a primary chosen round-robin over
    the candidates, then the other candidates, then every other node (the leader before the
    remaining followers, since it has everything committed)."""
    out: list[tuple[IndexRange, tuple[str, ...]]] = []
    cands = list(candidates) or list(node_ids)
    rest = [n for n in node_ids if n not in cands]
    if leader_id in rest:
        rest.remove(leader_id)
        rest.insert(0, leader_id)
    for k, rng in enumerate(ranges):
        j = k % len(cands)
        order = cands[j:] + cands[:j] + rest
        out.append((rng, tuple(order)))
    return out
