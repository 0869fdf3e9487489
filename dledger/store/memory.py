"""MemoryLogStore: the LogStore kept in memory (DLedgerMemoryStore, without its bugs)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dledger._native import impl
from dledger.codes import DLedgerError, ResponseCode
from dledger.columns import ColumnBatch
from dledger.entry import HEADER_SIZE, MAGIC_NOOP, MAGIC_NORMAL, MAGIC_RECORD, MAX_ENTRY_SIZE, Entry
from dledger.service_thread import PeriodicPass


class MemoryLogStore:
    """An in-memory log with the same semantics as MmapLogStore (positions are
    cumulative entry sizes: no segments, so no blank padding).

    Args:
        write_crc: compute the body CRC-32 on append (Java writes 0).
    """

    def __init__(self, write_crc: bool = True) -> None:
        self.term = 0
        self.failure: BaseException | None = None  # nothing here fails
        self._write_crc = write_crc
        self._encoded: list[bytes] = []  # entry k has index before_begin + 1 + k
        self._positions: list[int] = []
        self._before_begin_index = -1
        self._before_begin_term = -1
        self._next_pos = 0
        self._committed = -1
        self._lock = threading.Lock()

    @property
    def health(self) -> str:
        """ "": a store in memory always takes writes."""
        return ""

    @property
    def begin_index(self) -> int:
        return self._before_begin_index + 1 if self._encoded else -1

    @property
    def end_index(self) -> int:
        return self._before_begin_index + len(self._encoded)

    @property
    def end_term(self) -> int:
        if self._encoded:
            return int(impl.decode_header(self._encoded[-1])[3])
        return self._before_begin_term

    @property
    def committed_index(self) -> int:
        return self._committed

    @property
    def write_pos(self) -> int:
        """Position of the next entry: where the last entry ends (kept across a reset)."""
        return self._next_pos

    # -- writes

    def _push(self, encoded: bytes, pos: int) -> int:
        self._encoded.append(encoded)
        self._positions.append(pos)
        self._next_pos = pos + len(encoded)
        return self.end_index

    def _append_body(self, body: bytes, magic: int) -> int:
        if self.term < self.end_term:
            raise DLedgerError(ResponseCode.INCONSISTENT_TERM, f"term {self.term} is below the last entry's term")
        if HEADER_SIZE + len(body) > MAX_ENTRY_SIZE:
            raise DLedgerError(
                ResponseCode.UNEXPECTED_ARGUMENT, f"entry of {HEADER_SIZE + len(body)} bytes is too large"
            )
        encoded = impl.encode_entry(magic, self.end_index + 1, self.term, self._next_pos, body, self._write_crc)
        return self._push(encoded, self._next_pos)

    def append(self, body: bytes) -> int:
        with self._lock:
            return self._append_body(body, MAGIC_NORMAL)

    def append_many(self, bodies: Sequence[bytes], magic: int = MAGIC_NORMAL) -> int:
        if magic not in (MAGIC_NORMAL, MAGIC_RECORD):
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"append_many cannot write magic {magic}")
        if magic == MAGIC_RECORD:
            try:
                impl.check_records(bodies)
            except ValueError as exc:
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"{exc} (nothing was appended)") from None
        with self._lock:
            first = self.end_index + 1
            for body in bodies:
                self._append_body(body, magic)
            return first

    def append_noop(self) -> int:
        with self._lock:
            return self._append_body(b"", MAGIC_NOOP)

    def append_encoded(self, run: bytes) -> int:
        with self._lock:
            view = memoryview(run)
            entries: list[tuple[bytes, int]] = []
            off, idx, term = 0, self.end_index, self.end_term
            while off < len(view):
                if off + HEADER_SIZE > len(view):
                    raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"run ends inside a header at {off}")
                magic, size, e_idx, e_term, pos, _, _, crc, bsize = impl.decode_header(view, off)
                if magic not in (MAGIC_NORMAL, MAGIC_NOOP, MAGIC_RECORD):
                    raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"bad magic {magic} at run offset {off}")
                if bsize + HEADER_SIZE != size or size < HEADER_SIZE or off + size > len(view):
                    raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"bad size {size} at run offset {off}")
                if e_idx != idx + 1:
                    raise DLedgerError(ResponseCode.INCONSISTENT_INDEX, f"run entry index {e_idx}, expected {idx + 1}")
                if e_term < term:
                    raise DLedgerError(ResponseCode.INCONSISTENT_TERM, f"run entry term goes backwards at {e_idx}")
                body = view[off + HEADER_SIZE : off + size]
                if crc != 0 and impl.crc32(body) != crc & 0xFFFFFFFF:  # the header keeps it signed
                    raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, f"body CRC mismatch at index {e_idx}")
                entries.append((bytes(view[off : off + size]), pos))
                idx, term, off = e_idx, e_term, off + size
            for encoded, pos in entries:
                self._push(encoded, pos)
            return len(entries)

    # -- reads

    def _slot(self, index: int) -> int:
        k = index - self._before_begin_index - 1
        if index < 0 or k < 0 or k >= len(self._encoded):
            raise DLedgerError(
                ResponseCode.INDEX_OUT_OF_RANGE, f"index {index} outside [{self.begin_index}, {self.end_index}]"
            )
        return k

    def get(self, index: int) -> Entry:
        with self._lock:
            k = self._slot(index)
            encoded = self._encoded[k]
            magic, _, _, term, pos, _, _, crc, _ = impl.decode_header(encoded)
            return Entry(index, term, pos, magic, encoded[HEADER_SIZE:], crc)

    def get_body(self, index: int) -> bytes:
        with self._lock:
            return self._encoded[self._slot(index)][HEADER_SIZE:]

    def get_range(self, from_index: int, to_index: int) -> list[Entry]:
        lo, hi = max(from_index, self.begin_index), min(to_index, self.end_index + 1)
        return [self.get(i) for i in range(lo, hi)]

    def term_at(self, index: int) -> int:
        with self._lock:
            return int(impl.decode_header(self._encoded[self._slot(index)])[3])

    def read_run(self, from_index: int, max_bytes: int) -> tuple[bytes, int]:
        with self._lock:
            k = self._slot(from_index)
            parts = [self._encoded[k]]
            total = len(parts[0])
            for encoded in self._encoded[k + 1 :]:
                if total + len(encoded) > max_bytes:
                    break
                parts.append(encoded)
                total += len(encoded)
            return b"".join(parts), len(parts)

    def read_columns(self, from_index: int, max_count: int, max_bytes: int) -> ColumnBatch:
        with self._lock:
            if max_count <= 0 or from_index > self.end_index:
                return ColumnBatch.empty()
            k = self._slot(from_index)
            chosen: list[bytes] = []
            total = 0
            for encoded in self._encoded[k : k + max_count]:
                if chosen and total + len(encoded) - HEADER_SIZE > max_bytes:
                    break
                chosen.append(encoded)
                total += len(encoded) - HEADER_SIZE
            n = len(chosen)
            headers = [impl.decode_header(e) for e in chosen]
            offsets = np.zeros(n + 1, dtype=np.int32)
            offsets[1:] = np.cumsum([len(e) - HEADER_SIZE for e in chosen])
            return ColumnBatch(
                np.arange(from_index, from_index + n, dtype=np.int64),
                np.array([h[3] for h in headers], dtype=np.int64),
                np.array(self._positions[k : k + n], dtype=np.int64),
                offsets,
                bytearray(b"".join(e[HEADER_SIZE:] for e in chosen)),
                np.array([h[0] for h in headers], dtype=np.int32),
            )

    # -- truncation, compaction, commit

    def truncate(self, from_index: int) -> None:
        with self._lock:
            if from_index > self.end_index:
                return
            k = max(0, from_index - self._before_begin_index - 1)
            # the log ends where the last kept entry ends (as MmapLogStore: positions
            # appended verbatim from a leader may skip a segment-end blank)
            if k > 0:
                self._next_pos = self._positions[k - 1] + len(self._encoded[k - 1])
            elif self._positions:
                self._next_pos = self._positions[0]
            del self._encoded[k:]
            del self._positions[k:]
            self._committed = min(self._committed, self.end_index)

    def reset(self, before_begin_index: int, before_begin_term: int, next_pos: int | None = None) -> int:
        with self._lock:
            if before_begin_index <= self._before_begin_index:
                return self._before_begin_index + 1
            drop = min(before_begin_index - self._before_begin_index, len(self._encoded))
            del self._encoded[:drop]
            del self._positions[:drop]
            self._before_begin_index = before_begin_index
            self._before_begin_term = before_begin_term
            if not self._encoded and next_pos is not None:
                self._next_pos = next_pos
            return before_begin_index + 1

    def update_committed_index(self, index: int) -> None:
        with self._lock:
            self._committed = max(self._committed, min(index, self.end_index))

    def set_retention_floor(self, index: int) -> None:
        """Memory stores never expire entries; kept for the protocol."""

    @property
    def node_dir(self) -> Path | None:
        """None: nothing of this store is on disk."""
        return None

    def periodic_passes(self) -> list[PeriodicPass]:
        """None: a store in memory has no background work."""
        return []

    @property
    def durable_index(self) -> int:
        """The end index: nothing here waits for a disk."""
        return self.end_index

    def wait_durable(self) -> None:
        """Returns at once: nothing to sync."""

    def flush(self) -> None:
        """Nothing to make durable."""

    def close(self) -> None:
        """Nothing to release."""
