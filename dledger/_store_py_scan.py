"""The recovery walks of the pure-Python twin's `LogCore`, over its data and index tables.

Part of `dledger._store_py` (see there); the compiled counterpart is
`dledger/_core_scan.pxi`. The caller holds the core's lock.
"""

from __future__ import annotations

from collections.abc import Iterator

from dledger._store_py_codec import (
    BLANK,
    HEADER,
    STOP_BAD_HEADER,
    STOP_BLANK,
    STOP_CRC,
    STOP_END,
    STOP_INDEX,
    STOP_NO_SEGMENT,
    STOP_POS,
    STOP_TERM,
    UNIT,
    crc_field,
)
from dledger._store_py_table import MappedTable, mapped_at
from dledger.entry import (
    HEADER_SIZE,
    INDEX_UNIT_SIZE,
    MAGIC_BLANK,
    MAGIC_NOOP,
    MAGIC_NORMAL,
    MAGIC_RECORD,
    MIN_BLANK_LEN,
    ScanResult,
)


def scan_entries(
    data: MappedTable,
    index: MappedTable,
    start: int,
    prev_index: int,
    prev_term: int,
    check_crc: bool,
    check_index: bool,
) -> ScanResult:
    """`LogCore.scan`: walk and validate entries from data position `start`."""
    fs = data.file_size
    cur, first, count, mismatch, mismatch_pos, reason = start, -1, 0, -1, -1, STOP_END
    last_end = -1
    while True:
        if data.count == 0 or cur >= data.end_offset:
            reason = STOP_END
            break
        loc = data._locate(cur, MIN_BLANK_LEN)
        if loc is None:
            reason = STOP_NO_SEGMENT
            break
        view, at = loc
        rel = (cur - data.first_offset) % fs
        magic, size = BLANK.unpack_from(view, at)
        if magic == MAGIC_BLANK:
            head_blank = rel == 0 and cur == data.first_offset
            if size < MIN_BLANK_LEN or rel + size > fs or (rel + size != fs and not head_blank):
                reason = STOP_BLANK
                break
            cur += size
            continue
        if magic == 0 and size == 0:
            reason = STOP_END
            break
        if rel + HEADER_SIZE > fs:
            reason = STOP_BAD_HEADER
            break
        _, _, idx, term, pos, _, _, crc, bsize = HEADER.unpack_from(view, at)
        if (
            magic not in (MAGIC_NORMAL, MAGIC_NOOP, MAGIC_RECORD)
            or size <= 44
            or size < HEADER_SIZE
            or bsize + HEADER_SIZE != size
            or rel + size > fs
        ):
            reason = STOP_BAD_HEADER
            break
        if pos != cur:
            reason = STOP_POS
            break
        if (prev_index >= 0 and idx != prev_index + 1) or idx < 0:
            reason = STOP_INDEX
            break
        if term < prev_term:
            reason = STOP_TERM
            break
        if check_crc and crc != 0 and crc_field(view[at + HEADER_SIZE : at + size]) != crc:
            reason = STOP_CRC
            break
        if check_index and mismatch < 0:
            uloc = index._locate(idx * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE)
            if uloc is None or UNIT.unpack_from(*uloc) != (magic, cur, size, idx, term):
                mismatch, mismatch_pos = idx, cur
        if first < 0:
            first = idx
        prev_index, prev_term = idx, term
        count += 1
        cur += size
        last_end = cur
    return ScanResult(cur, first, prev_index, prev_term, count, reason, mismatch, mismatch_pos, last_end)


def walk_entries(
    data: MappedTable, start: int, from_index: int, to_index: int
) -> Iterator[tuple[int, int, int, int, int, int]]:
    """(index, pos, magic, size, header index, term) of the entries from_index..to_index,
    walking the data from `start` over blanks."""
    cur, idx = start, from_index
    while idx <= to_index:
        view, at = mapped_at(data, cur, MIN_BLANK_LEN)
        magic, size = BLANK.unpack_from(view, at)
        if magic == MAGIC_BLANK:
            cur += size
            continue
        _, _, h_idx, term, *_ = HEADER.unpack_from(view, at)
        yield idx, cur, magic, size, h_idx, term
        cur += size
        idx += 1


def find_unit_conflicts(
    data: MappedTable, index: MappedTable, start: int, from_index: int, to_index: int, prev_term: int, prev_end: int
) -> list[tuple[int, int, int, int, int]]:
    """`LogCore.unit_conflicts`: entries whose index unit is there but describes another
    entry: [(index, pos, prev_term, prev_end, next_term)]."""
    out: list[list[int]] = []
    for idx, cur, magic, size, _h_idx, term in walk_entries(data, start, from_index, to_index):
        if out and out[-1][0] == idx - 1:
            out[-1][4] = term
        uloc = index._locate(idx * INDEX_UNIT_SIZE, INDEX_UNIT_SIZE)
        if uloc is not None:
            unit = bytes(uloc[0][uloc[1] : uloc[1] + INDEX_UNIT_SIZE])
            expected = UNIT.pack(magic, cur, size, idx, term)
            j = next((k for k in range(INDEX_UNIT_SIZE) if unit[k] != expected[k]), INDEX_UNIT_SIZE)
            torn = not any(unit[j:])
            if not torn and UNIT.unpack(unit)[1:] != (cur, size, idx, term):
                out.append([idx, cur, prev_term, prev_end, -1])
        prev_term, prev_end = term, cur + size
    return [(c[0], c[1], c[2], c[3], c[4]) for c in out]
