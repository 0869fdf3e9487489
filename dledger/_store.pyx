# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, freethreading_compatible=False, binding=False, embedsignature=True
"""Compiled hot path of the store: codecs, mapped segment tables and the log core.

The pure-Python twin `dledger._store_py` has the same API and must give the same bytes
and results; `tests/property/test_twin.py` proves it, and `dledger/_store.pyi` types it
for callers. Layout constants come from `native/dl_layout.h`.

One extension module in layers: the files below are compiled as one unit, in this
order, and each may use what the ones before it define.

- `_store.pxd`: the C declarations (pthread, unistd, `native/*.h`);
- this file: module constants (scan stop reasons, states, failpoints);
- `_codec.pxi`: entry and index-unit codecs, CRC helpers;
- `_record.pxi`: the record codec's reader (magic 16 bodies) and `split_records`;
- `_record_write.pxi`: its writer: `encode_record`, and `encode_records` for
  Arrow-layout columns;
- `_quota.pxi`: `Quota`;
- `_table.pxi`: `MappedTable`, the mapped segments of one file list;
- `_core.pxi`: `LogCore`: state, locking, the write path and the public methods;
- `_core_stage.pxi`: the write-through stage (`LogCore.write_through`);
- `_core_read.pxi`: reads: single entries, runs of encoded entries, column batches;
- `_core_follow.pxi`: the follower's append of encoded runs;
- `_core_scan.pxi`: the recovery walks (`scan`, `write_units`, `unit_conflicts`).
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_FromStringAndSize, PyByteArray_AS_STRING, PyByteArray_Resize
from cpython.mem cimport PyMem_Malloc, PyMem_Realloc, PyMem_Free
from cpython.long cimport PyLong_CheckExact
from cpython.number cimport PyNumber_Index
from libc.string cimport memcpy, memset, memmove
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.limits cimport LLONG_MAX, LLONG_MIN

cimport cython

import errno
import os

from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import MAX_TIMESTAMP_MS, Entry, ScanResult

COMPILED = True
dl_crc_init()
CRC_IMPL = DL_CRC_IMPL.decode()

# Scan stop reasons (same numbers in the twin).
STOP_END = 0          # zero header or end of the last segment: the clean end of the log
STOP_BAD_HEADER = 1   # magic/size/bodySize inconsistent, or the entry overruns its segment
STOP_CRC = 2          # body CRC present and wrong
STOP_INDEX = 3        # index is not previous + 1
STOP_TERM = 4         # term lower than the previous entry's
STOP_POS = 5          # pos field is not the entry's own position
STOP_BLANK = 6        # blank record with an impossible length
STOP_NO_SEGMENT = 7   # the walk reached a position no segment covers (gap)

# Lifecycle states of a core, and failpoint codes (set from DLEDGER_FAILPOINT by the
# Python layer): C constants for the code here (a module global costs a dict lookup on
# every append), exported under the names the Python layer and the twin use.
cdef enum:
    ST_OK = 0
    ST_DISK_FULL = 1
    ST_DISK_ERROR = 2
    ST_READ_ONLY = 3
    FP_NONE = 0
    FP_AFTER_DATA_BEFORE_INDEX = 1

STATE_OK = ST_OK
STATE_DISK_FULL = ST_DISK_FULL
STATE_DISK_ERROR = ST_DISK_ERROR
STATE_READ_ONLY = ST_READ_ONLY
FAIL_NONE = FP_NONE
FAIL_AFTER_DATA_BEFORE_INDEX = FP_AFTER_DATA_BEFORE_INDEX

DEF GIL_RELEASE_BYTES = 65536
DEF STAGE_MAX_BYTES = 1048576  # write_through: staged bytes written per pwrite at most

include "_codec.pxi"
include "_record.pxi"
include "_record_columns.pxi"
include "_record_write.pxi"
include "_quota.pxi"
include "_table.pxi"
include "_core.pxi"
include "_core_stage.pxi"
include "_core_read.pxi"
include "_core_follow.pxi"
include "_core_scan.pxi"
