"""Cutting the data segments of a file store (truncate, prefix reset), crash-safe.

The log always ends where its last entry ends. When that entry is followed by a blank
(the next entry did not fit and went to the next segment), truncating the next entry
removes the blank too: the leader's entry at that index may fit where the blank starts,
and a follower appends an entry only at the leader's position.

Every step leaves files that recovery reads as the old log or the new one: bytes are
zeroed (durably) before the segments after them are deleted, and a head blank's header
is durable before the bytes it covers are cleared (recovery tells an unfinished reset
from a damaged first entry by the `reset` file, and finishes it).
"""

from __future__ import annotations

from dledger.entry import MAGIC_BLANK
from dledger.store.segment_list import SegmentList

BLANK_HEADER_SIZE = 8


def blank_header(length: int) -> bytes:
    """The 8-byte header of a blank record covering `length` bytes (DLedger's layout)."""
    return MAGIC_BLANK.to_bytes(4, "big", signed=True) + length.to_bytes(4, "big")


def segment_end(segments: SegmentList, pos: int) -> int:
    """End offset of the mapped segment holding `pos`."""
    table = segments.table
    return int(pos - (pos - table.first_offset) % table.file_size + table.file_size)


def cut_data(segments: SegmentList, end: int, old_end: int) -> None:
    """End the data at `end`, a position inside a mapped segment, where the data ended
    at `old_end` (>= end): zero [end, old_end) in the segment holding `end` (a blank
    there included) durably, then delete every segment after that one."""
    table = segments.table
    if not table.count:
        return
    stop = min(old_end, segment_end(segments, end))
    if stop > end:
        segments.zero_range(end, stop)
        table.msync(end, stop)
    segments.truncate_to(end)


def write_head_blank(segments: SegmentList, pos: int) -> None:
    """Cover [first segment start, pos) with one blank record (DLedger 0.4.0's
    resetOffset): the header first, durably, then the bytes behind it read as zeros
    (`SegmentList.clear_range`: deallocated by the file system, no gigabyte of zeros
    written and msynced while the store is held)."""
    table = segments.table
    start = int(table.first_offset)
    dead = pos - start
    if dead < BLANK_HEADER_SIZE:
        return
    table.write(start, blank_header(dead))
    table.msync(start, start + BLANK_HEADER_SIZE)
    segments.clear_range(start + BLANK_HEADER_SIZE, pos)


def empty_data_at(segments: SegmentList, pos: int, old_end: int) -> None:
    """Delete every entry but keep the log's end position `pos` (the data ended at
    `old_end` >= pos): only the segment holding `pos` stays, as a head blank up to `pos`
    followed by zeros, so that the next entry lands at `pos`, also after a restart.
    Nothing stays when `pos` starts a segment or is not mapped: the next append creates
    the segment there."""
    table = segments.table
    mapped = table.count and table.first_offset <= pos < table.end_offset
    if not mapped or (pos - table.first_offset) % table.file_size == 0:
        segments.drop_all()
        return
    cut_data(segments, pos, old_end)
    while table.count > 1:
        segments.drop_first()
    write_head_blank(segments, pos)


def place_empty_at(segments: SegmentList, pos: int) -> None:
    """After `empty_data_at` left no segment: create the one holding `pos` with a head
    blank up to `pos`, so that the next entry lands there (an emptied log placed where
    the leader's next entry starts, after an installed snapshot). Nothing to do when a
    segment is mapped or `pos` starts one."""
    if segments.table.count or pos % segments.file_size == 0:
        return
    segments.roll(pos - pos % segments.file_size)
    write_head_blank(segments, pos)
