"""Pure-Python reference twin of the compiled `dledger._store`.

Same classes, functions and results, written for clarity. Property tests prove the
two agree byte for byte; set DLEDGER_NO_EXTENSIONS=1 to run the package on this one.
`tests/unit/test_twin_api.py` checks that both have the names and parameters of the
typed stub `dledger/_store.pyi`.

This module is the twin's public face; the work is done in the modules it re-exports,
laid out like the compiled parts:

- `_store_py_codec`: entry and index-unit codecs and the module's constants
  (`_codec.pxi`, `_store.pyx`);
- `_store_py_record`: the record codec, `split_records` and `encode_records`
  (`_record.pxi`, `_record_write.pxi`);
- `_store_py_table`: `MappedTable` (`_table.pxi`);
- `_store_py_core`: `LogCore`: state, locking, appends and reads (`_core*.pxi`);
- `_store_py_scan`: the recovery walks (`_core_scan.pxi`);
- `Quota` (`_quota.pxi`) is here.
"""

from __future__ import annotations

from dledger._store_py_codec import (
    FAIL_AFTER_DATA_BEFORE_INDEX,
    FAIL_NONE,
    STATE_DISK_ERROR,
    STATE_DISK_FULL,
    STATE_OK,
    STATE_READ_ONLY,
    STOP_BAD_HEADER,
    STOP_BLANK,
    STOP_CRC,
    STOP_END,
    STOP_INDEX,
    STOP_NO_SEGMENT,
    STOP_POS,
    STOP_TERM,
    crc32,
    decode_header,
    decode_index_unit,
    encode_entry,
    encode_index_unit,
)
from dledger._store_py_codec import crc_field as _crc_field  # noqa: F401 (tests compare header CRCs with it)
from dledger._store_py_core import LogCore
from dledger._store_py_record import (
    check_records,
    decode_record,
    encode_record,
    encode_records,
    split_records,
)
from dledger._store_py_table import MappedTable

__all__ = [
    "COMPILED",
    "CRC_IMPL",
    "STOP_END",
    "STOP_BAD_HEADER",
    "STOP_CRC",
    "STOP_INDEX",
    "STOP_TERM",
    "STOP_POS",
    "STOP_BLANK",
    "STOP_NO_SEGMENT",
    "STATE_OK",
    "STATE_DISK_FULL",
    "STATE_DISK_ERROR",
    "STATE_READ_ONLY",
    "FAIL_NONE",
    "FAIL_AFTER_DATA_BEFORE_INDEX",
    "crc32",
    "encode_entry",
    "decode_header",
    "encode_index_unit",
    "decode_index_unit",
    "encode_record",
    "encode_records",
    "decode_record",
    "split_records",
    "check_records",
    "Quota",
    "MappedTable",
    "LogCore",
]

COMPILED = False
CRC_IMPL = "zlib"


class Quota:
    """Per-second byte budget over a window of 5 one-second slots (DLedger's Quota)."""

    def __init__(self, max_per_second: int) -> None:
        self.max_per_second = max_per_second
        self._samples = [0] * 5
        self._seconds = [-1] * 5

    def sample(self, value: int, now_ms: int) -> None:
        """Account `value` bytes to the second containing `now_ms`."""
        sec = now_ms // 1000
        slot = sec % 5
        if self._seconds[slot] != sec:
            self._seconds[slot] = sec
            self._samples[slot] = value
        else:
            self._samples[slot] += value

    def validate_now(self, now_ms: int) -> bool:
        """True when this second's budget is used up (the caller must wait)."""
        sec = now_ms // 1000
        slot = sec % 5
        return self._seconds[slot] == sec and self._samples[slot] >= self.max_per_second

    def left_now_ms(self, now_ms: int) -> int:
        """Milliseconds until the next second starts."""
        return 1000 - now_ms % 1000
