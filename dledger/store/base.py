"""The LogStore protocol every store implements, and the column batch it reads into."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dledger.entry import MAGIC_NOOP, MAGIC_NORMAL, Entry

_NORMAL_MAGIC: npt.NDArray[np.int32] = np.zeros(0, dtype=np.int32)
"""Sentinel default of `ColumnBatch.magic`: every entry is a normal one."""


@dataclass(frozen=True)
class ColumnBatch:
    """Committed entries read column-wise (Arrow's binary layout for the bodies).

    Attributes:
        index, term, pos: int64 arrays, one value per entry.
        offsets: int32 array of count+1 values; body k is bodies[offsets[k]:offsets[k+1]].
        bodies: all bodies back to back.
        magic: int32 array, one value per entry: MAGIC_NORMAL (1) or MAGIC_NOOP (2, the
            empty entry a new leader appends). Omitted: every entry is normal.
    """

    index: npt.NDArray[np.int64]
    term: npt.NDArray[np.int64]
    pos: npt.NDArray[np.int64]
    offsets: npt.NDArray[np.int32]
    bodies: bytearray
    magic: npt.NDArray[np.int32] = field(default_factory=lambda: _NORMAL_MAGIC)

    def __post_init__(self) -> None:
        if self.magic is _NORMAL_MAGIC:
            object.__setattr__(self, "magic", np.full(len(self.index), MAGIC_NORMAL, dtype=np.int32))

    @property
    def count(self) -> int:
        """Number of entries."""
        return len(self.index)

    @property
    def noop_count(self) -> int:
        """Number of NOOP entries."""
        return int(np.count_nonzero(self.magic == MAGIC_NOOP))

    def body(self, k: int) -> bytes:
        """The k-th body."""
        return bytes(self.bodies[self.offsets[k] : self.offsets[k + 1]])

    @classmethod
    def empty(cls) -> ColumnBatch:
        """A batch of no entries."""
        none = np.zeros(0, dtype=np.int64)
        return cls(none, none, none, np.zeros(1, dtype=np.int32), bytearray(), np.zeros(0, dtype=np.int32))

    @classmethod
    def from_raw(cls, raw: tuple[object, ...]) -> ColumnBatch:
        """Wrap the tuple returned by the core's `read_columns` without copying:
        (count, index, term, pos, offsets, bodies, magic)."""
        n = int(raw[0])  # type: ignore[call-overload]
        return cls(
            np.frombuffer(raw[1], dtype=np.int64, count=n),  # type: ignore[call-overload]
            np.frombuffer(raw[2], dtype=np.int64, count=n),  # type: ignore[call-overload]
            np.frombuffer(raw[3], dtype=np.int64, count=n),  # type: ignore[call-overload]
            np.frombuffer(raw[4], dtype=np.int32, count=n + 1),  # type: ignore[call-overload]
            raw[5],  # type: ignore[arg-type]
            np.frombuffer(raw[6], dtype=np.int32, count=n),  # type: ignore[call-overload]
        )


@runtime_checkable
class LogStore(Protocol):
    """A role-agnostic Raft log (DLedgerStore). No leader checks happen inside.

    Indexes are 0-based and contiguous in [begin_index, end_index]; an empty log has
    begin_index == end_index + 1 semantics expressed as begin_index = -1, end_index = -1
    on a fresh store (DLedger's convention), and end_index = before-begin after a reset.
    """

    term: int
    """The term stamped on entries appended with `append` / `append_many` / `append_noop`."""

    @property
    def begin_index(self) -> int:
        """First live index, or -1 when the log is empty."""
        ...

    @property
    def end_index(self) -> int:
        """Last index, or -1 when nothing was ever appended."""
        ...

    @property
    def end_term(self) -> int:
        """Term of the last entry (-1 when empty)."""
        ...

    @property
    def committed_index(self) -> int:
        """Highest index known committed (persisted in `checkpoint` by file stores)."""
        ...

    def append(self, body: bytes) -> int:
        """Leader append of one body with `term`; returns the new index."""
        ...

    def append_many(self, bodies: Sequence[bytes]) -> int:
        """Leader append of several bodies; returns the first new index."""
        ...

    def append_noop(self) -> int:
        """Leader append of a NOOP entry (magic 2); returns its index."""
        ...

    def append_encoded(self, run: bytes) -> int:
        """Follower append of already-encoded entries (validated, written verbatim);
        returns how many were appended."""
        ...

    def get(self, index: int) -> Entry:
        """The entry at `index`; DLedgerError(INDEX_OUT_OF_RANGE) outside the log."""
        ...

    def get_body(self, index: int) -> bytes:
        """The body of the entry at `index`."""
        ...

    def get_range(self, from_index: int, to_index: int) -> list[Entry]:
        """Entries in [from_index, to_index) that exist."""
        ...

    def term_at(self, index: int) -> int:
        """Term of the entry at `index`."""
        ...

    def read_run(self, from_index: int, max_bytes: int) -> tuple[bytes, int]:
        """Encoded entries from `from_index` (at least one) within `max_bytes`:
        (bytes, count). The bytes can be given to a follower's `append_encoded`."""
        ...

    def read_columns(self, from_index: int, max_count: int, max_bytes: int) -> ColumnBatch:
        """Entries from `from_index` column-wise, at most `max_count` and about `max_bytes`."""
        ...

    def truncate(self, from_index: int) -> None:
        """Delete entries [from_index, end_index]. Committed entries are the caller's
        responsibility (the Raft layer never truncates them)."""
        ...

    def reset(self, before_begin_index: int, before_begin_term: int) -> int:
        """Delete the prefix up to and including `before_begin_index` (snapshots,
        retention); returns the new begin index."""
        ...

    def update_committed_index(self, index: int) -> None:
        """Record the committed index (clamped to end_index; never decreases)."""
        ...

    def set_retention_floor(self, index: int) -> None:
        """Retention never deletes entries at or above `index`."""
        ...

    def flush(self) -> None:
        """Make everything appended so far durable."""
        ...

    def close(self) -> None:
        """Flush and release resources."""
        ...
