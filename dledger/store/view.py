"""StoreView: a read-only view of a node directory's committed entries, for offline
readers (the Spark source, tools) that must not disturb the store's owner.

The segment files are mapped read-only and the bounds come from `checkpoint` (or
`checkpoint.bak`, which Java's shutdown race can leave alone) and the first entry of
the first data segment. There is no recovery scan, nothing is ever written, created,
extended or deleted, and reads never go past the committed index, so the directory of a
running member (or a read-only copy, or a store written by Java DLedger) can be read
while its owner works on it. Every entry read is checked against its index unit and its
body CRC by the store core.

To validate a store (recovery included) open it read-only instead:
`MmapLogStore.open(node_dir, StoreConfig(read_only=True, ...))`.
"""

from __future__ import annotations

import logging
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dledger._native import impl
from dledger.codes import CorruptStoreError, DLedgerError, ResponseCode
from dledger.columns import ColumnBatch
from dledger.config import StoreConfig
from dledger.entry import HEADER_SIZE, INDEX_UNIT_SIZE, Entry
from dledger.record import with_records
from dledger.store import kvfile
from dledger.store.checkpoint import load_checkpoint
from dledger.store.layout import DATA_DIR, INDEX_DIR, RESET_FILE, is_segment_name
from dledger.store.recovery import first_entry_header

log = logging.getLogger(__name__)

INDEX_UNIT = np.dtype([("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8")])
"""One 32-byte index unit (big-endian; pos comes before size, unlike the entry header)."""
assert INDEX_UNIT.itemsize == INDEX_UNIT_SIZE

OPEN_ATTEMPTS = 3
"""Listing and mapping a directory is redone (at once) when a segment file disappears in
between: retention deleting the oldest segment of a running member."""


@dataclass(frozen=True, slots=True)
class EntryHeader:
    """The 48-byte header of a data record (DLedgerEntry's, big-endian)."""

    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int


@dataclass(frozen=True, slots=True)
class IndexUnit:
    """One 32-byte index unit: where entry `index` lies in the data."""

    magic: int
    pos: int
    size: int
    index: int
    term: int


def decode_entry_header(raw: bytes) -> EntryHeader:
    """Decode the header at the start of `raw` (at least HEADER_SIZE bytes)."""
    return EntryHeader(*impl.decode_header(raw))


def decode_index_unit(raw: bytes) -> IndexUnit:
    """Decode the index unit at the start of `raw` (at least INDEX_UNIT_SIZE bytes)."""
    return IndexUnit(*impl.decode_index_unit(raw))


def checkpoint_committed(node_dir: str | os.PathLike[str]) -> int:
    """The committed index recorded in `checkpoint` (or `checkpoint.bak`), -1 without a
    valid one, never above the `endIndex` recorded with it (Java DLedger can leave a
    committed index past the end after a truncate, DLedger #316): `load_checkpoint`'s
    reading. Cheap: streams use it to see new entries without opening the store."""
    return load_checkpoint(node_dir).committed


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
    Open one with `StoreView.open(node_dir)`; close it (or use it as a context manager).

    Attributes:
        node_dir: the node directory.
        begin_index: the first entry kept (-1 when there is none).
        committed_index: the committed index (the checkpoint's, never past its endIndex).
        end_index: the last entry readable here: the committed index.
        write_pos: the data position just after the last committed entry.
    """

    def __init__(self, node_dir: Path, data_table: Any, index_table: Any) -> None:
        self.node_dir = node_dir
        self._data = data_table
        self._index = index_table
        self._core = impl.LogCore()
        self._core._init_core(data_table, index_table, _read_only_roller)
        self._core.state = impl.STATE_READ_ONLY
        self.begin_index = -1
        self.committed_index = -1
        self.write_pos = 0

    @classmethod
    def open(cls, node_dir: str | os.PathLike[str]) -> StoreView:
        """Map `node_dir` read-only and find its bounds.

        Raises:
            DLedgerError: DISK_ERROR when the last committed entry cannot be read.
            CorruptStoreError: segment files of odd sizes or names.
        """
        for attempt in range(OPEN_ATTEMPTS):
            try:
                return cls._open(Path(node_dir))
            except FileNotFoundError:
                if attempt == OPEN_ATTEMPTS - 1:
                    raise
                log.info("a segment of %s disappeared while it was opened; listing it again", node_dir)
        raise AssertionError("unreachable")

    @classmethod
    def _open(cls, node_dir: Path) -> StoreView:
        defaults = StoreConfig()
        data = _map_segments(node_dir / DATA_DIR, defaults.data_file_size)
        try:
            index = _map_segments(node_dir / INDEX_DIR, defaults.index_file_size)
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
        begin = -1
        table = self._data
        for k in range(int(table.count)):  # the first segment that starts with an entry
            header = first_entry_header(
                table, self.node_dir / DATA_DIR, int(table.first_offset) + k * int(table.file_size)
            )
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

    def segment_starts(self) -> list[tuple[int, int]]:
        """(first entry index, start position) of every data segment that starts with an
        entry, in log order (a segment whose first entry is not past the previous
        segment's is left out)."""
        table = self._data
        starts: list[tuple[int, int]] = []
        for k in range(int(table.count)):
            start = int(table.first_offset) + k * int(table.file_size)
            header = first_entry_header(table, self.node_dir / DATA_DIR, start)
            if header is not None and (not starts or int(header[2]) > starts[-1][0]):
                starts.append((int(header[2]), start))
        return starts

    def get(self, index: int) -> Entry:
        """The committed entry at `index` (DLedgerError INDEX_OUT_OF_RANGE outside)."""
        entry: Entry = self._core.get(index)
        return entry

    def read_columns(self, from_index: int, max_count: int, max_bytes: int, records: bool = False) -> ColumnBatch:
        """Committed entries from `from_index` column-wise (see ColumnBatch); with
        `records`, their record columns too (`ColumnBatch.records`)."""
        batch = ColumnBatch.from_raw(self._core.read_columns(from_index, max_count, max_bytes))
        return with_records(batch) if records else batch

    def read_records(self, from_index: int, max_count: int, max_bytes: int) -> ColumnBatch:
        """The committed entries of `read_columns` with their record columns (a plain
        entry: no key, no timestamp, no headers, its body as value) and no bodies, each
        field copied once, straight from the data file (`ColumnBatch.from_record_raw`).

        Raises:
            ValueError: a record entry whose body is not a valid record (named by index).
        """
        return ColumnBatch.from_record_raw(self._core.read_records(from_index, max_count, max_bytes))

    def read_meta(self, start: int, count: int) -> ColumnBatch:
        """index, term, pos and magic of entries [start, start+count) straight from the
        index file (no data is touched; `offsets` are all zero and `bodies` empty); stops
        at the end of the index segment holding `start`.

        Raises:
            DLedgerError: DISK_ERROR when the index units do not number the entries.
        """
        table = self._index
        file_size = int(table.file_size)
        offset = start * INDEX_UNIT_SIZE
        in_segment = (file_size - (offset - int(table.first_offset)) % file_size) // INDEX_UNIT_SIZE
        count = max(0, min(count, in_segment, int(self.end_index) + 1 - start))
        if count == 0 or start < int(self.begin_index):
            return ColumnBatch.empty()
        units = np.frombuffer(table.read(offset, count * INDEX_UNIT_SIZE), dtype=INDEX_UNIT)
        index = units["index"].astype(np.int64)
        if np.any(index != np.arange(start, start + count, dtype=np.int64)):
            raise DLedgerError(
                ResponseCode.DISK_ERROR, f"index units {start}..{start + count - 1} of {self.node_dir} are inconsistent"
            )
        return ColumnBatch(
            index,
            units["term"].astype(np.int64),
            units["pos"].astype(np.int64),
            np.zeros(count + 1, np.int32),
            bytearray(),
            units["magic"].astype(np.int32),
        )

    def close(self) -> None:
        """Unmap the segments (idempotent)."""
        self._core._set_state(-1, -1, -1, 0)
        _unmap(self._data)
        _unmap(self._index)

    def __enter__(self) -> StoreView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
