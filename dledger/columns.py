"""ColumnBatch: committed entries read column-wise, shared by the store, the transport,
the client and the Spark data source."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from dledger.entry import MAGIC_NOOP, MAGIC_NORMAL

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
