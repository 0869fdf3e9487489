# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, freethreading_compatible=False, binding=False
"""Compiled hot path of the store: codecs, mapped segment tables and the log core.

The pure-Python twin `dledger._store_py` has the same API and must give the same bytes
and results; `tests/property/test_twin.py` proves it. Layout constants come from
`native/dl_layout.h`.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_WRITABLE, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.bytearray cimport PyByteArray_FromStringAndSize, PyByteArray_AS_STRING
from cpython.mem cimport PyMem_Malloc, PyMem_Realloc, PyMem_Free
from libc.string cimport memcpy, memset, memmove
from libc.stdint cimport int32_t, int64_t, uint32_t

cimport cython

cdef extern from "pthread.h" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *, const void *)
    int pthread_mutex_destroy(pthread_mutex_t *)
    int pthread_mutex_lock(pthread_mutex_t *)
    int pthread_mutex_trylock(pthread_mutex_t *)
    int pthread_mutex_unlock(pthread_mutex_t *)

cdef extern from "unistd.h":
    void _exit(int) nogil

cdef extern from "dl_layout.h":
    int DL_OFF_MAGIC, DL_OFF_SIZE, DL_OFF_INDEX, DL_OFF_TERM, DL_OFF_POS
    int DL_OFF_CHANNEL, DL_OFF_CHAIN_CRC, DL_OFF_BODY_CRC, DL_OFF_BODY_SIZE
    int DL_HEADER_SIZE, DL_MIN_ENTRY_SIZE_EXCL
    int DL_IDX_OFF_MAGIC, DL_IDX_OFF_POS, DL_IDX_OFF_SIZE, DL_IDX_OFF_INDEX, DL_IDX_OFF_TERM
    int DL_INDEX_UNIT, DL_MAGIC_BLANK, DL_MAGIC_NORMAL, DL_MAGIC_NOOP, DL_MIN_BLANK_LEN
    int DL_MAX_ENTRY_SIZE

cdef extern from "dl_endian.h" nogil:
    void dl_put32(unsigned char *p, int32_t v)
    void dl_put64(unsigned char *p, int64_t v)
    int32_t dl_get32(const unsigned char *p)
    int64_t dl_get64(const unsigned char *p)

cdef extern from "dl_crc.h" nogil:
    void dl_crc_init()
    uint32_t dl_crc32(const unsigned char *p, size_t n)
    const char *DL_CRC_IMPL

cdef extern from "dl_segment.h" nogil:
    int dl_msync(unsigned char *base, size_t frm, size_t to)
    int dl_prefault(unsigned char *base, size_t frm, size_t to)
    int dl_unmap_pages(unsigned char *base, size_t frm, size_t to)
    int dl_pwrite_all(int fd, const unsigned char *buf, size_t n, long long offset)
    int dl_close(int fd)

import errno
import os

from dledger.codes import DLedgerError, ResponseCode
from dledger.entry import Entry

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

# --------------------------------------------------------------------------- codecs

def crc32(data) -> int:
    """CRC-32 of `data` (the values of zlib and java.util.zip.CRC32)."""
    cdef Py_buffer view
    cdef uint32_t c
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            c = dl_crc32(<const unsigned char *>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return c


cdef inline int32_t _crc_field(const unsigned char *body, Py_ssize_t n) noexcept nogil:
    return <int32_t>dl_crc32(body, <size_t>n)


cdef inline void _write_header(unsigned char *p, int32_t magic, int32_t size, int64_t index,
                               int64_t term, int64_t pos, int32_t body_crc) noexcept nogil:
    dl_put32(p + DL_OFF_MAGIC, magic)
    dl_put32(p + DL_OFF_SIZE, size)
    dl_put64(p + DL_OFF_INDEX, index)
    dl_put64(p + DL_OFF_TERM, term)
    dl_put64(p + DL_OFF_POS, pos)
    dl_put32(p + DL_OFF_CHANNEL, 0)
    dl_put32(p + DL_OFF_CHAIN_CRC, 0)
    dl_put32(p + DL_OFF_BODY_CRC, body_crc)
    dl_put32(p + DL_OFF_BODY_SIZE, size - DL_HEADER_SIZE)


cdef inline void _write_unit(unsigned char *p, int32_t magic, int64_t pos, int32_t size,
                             int64_t index, int64_t term) noexcept nogil:
    dl_put32(p + DL_IDX_OFF_MAGIC, magic)
    dl_put64(p + DL_IDX_OFF_POS, pos)
    dl_put32(p + DL_IDX_OFF_SIZE, size)
    dl_put64(p + DL_IDX_OFF_INDEX, index)
    dl_put64(p + DL_IDX_OFF_TERM, term)


def encode_entry(int magic, long long index, long long term, long long pos, bytes body,
                 bint write_crc=True) -> bytes:
    """Encode one entry: the 48-byte big-endian header followed by the body."""
    cdef Py_ssize_t n = PyBytes_GET_SIZE(body)
    out = PyBytes_FromStringAndSize(NULL, DL_HEADER_SIZE + n)
    cdef unsigned char *p = <unsigned char *>PyBytes_AS_STRING(out)
    cdef const unsigned char *b = <const unsigned char *>PyBytes_AS_STRING(body)
    cdef int32_t crc = _crc_field(b, n) if write_crc else 0
    _write_header(p, magic, <int32_t>(DL_HEADER_SIZE + n), index, term, pos, crc)
    memcpy(p + DL_HEADER_SIZE, b, n)
    return out


def decode_header(data, Py_ssize_t offset=0) -> tuple:
    """Decode the 48-byte header at `offset`:
    (magic, size, index, term, pos, channel, chain_crc, body_crc, body_size)."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if offset < 0 or offset + DL_HEADER_SIZE > view.len:
            raise ValueError("header out of range")
        return _header_tuple(<const unsigned char *>view.buf + offset)
    finally:
        PyBuffer_Release(&view)


cdef tuple _header_tuple(const unsigned char *p):
    return (dl_get32(p + DL_OFF_MAGIC), dl_get32(p + DL_OFF_SIZE), dl_get64(p + DL_OFF_INDEX),
            dl_get64(p + DL_OFF_TERM), dl_get64(p + DL_OFF_POS), dl_get32(p + DL_OFF_CHANNEL),
            dl_get32(p + DL_OFF_CHAIN_CRC), dl_get32(p + DL_OFF_BODY_CRC),
            dl_get32(p + DL_OFF_BODY_SIZE))


def encode_index_unit(int magic, long long pos, int size, long long index, long long term) -> bytes:
    """Encode one 32-byte index unit (magic, pos, size, index, term)."""
    out = PyBytes_FromStringAndSize(NULL, DL_INDEX_UNIT)
    _write_unit(<unsigned char *>PyBytes_AS_STRING(out), magic, pos, size, index, term)
    return out


def decode_index_unit(data, Py_ssize_t offset=0) -> tuple:
    """Decode the index unit at `offset`: (magic, pos, size, index, term)."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if offset < 0 or offset + DL_INDEX_UNIT > view.len:
            raise ValueError("index unit out of range")
        return _unit_tuple(<const unsigned char *>view.buf + offset)
    finally:
        PyBuffer_Release(&view)


cdef tuple _unit_tuple(const unsigned char *p):
    return (dl_get32(p + DL_IDX_OFF_MAGIC), dl_get64(p + DL_IDX_OFF_POS),
            dl_get32(p + DL_IDX_OFF_SIZE), dl_get64(p + DL_IDX_OFF_INDEX),
            dl_get64(p + DL_IDX_OFF_TERM))


# --------------------------------------------------------------------------- quota

cdef class Quota:
    """Per-second byte budget over a window of 5 one-second slots (DLedger's Quota)."""
    cdef public long long max_per_second
    cdef long long samples[5]
    cdef long long seconds[5]

    def __cinit__(self, long long max_per_second):
        self.max_per_second = max_per_second
        cdef int i
        for i in range(5):
            self.samples[i] = 0
            self.seconds[i] = -1

    cpdef void sample(self, long long value, long long now_ms):
        """Account `value` bytes to the second containing `now_ms`."""
        cdef long long sec = now_ms // 1000
        cdef int slot = <int>(sec % 5)
        if self.seconds[slot] != sec:
            self.seconds[slot] = sec
            self.samples[slot] = value
        else:
            self.samples[slot] += value

    cpdef bint validate_now(self, long long now_ms):
        """True when this second's budget is used up (the caller must wait)."""
        cdef long long sec = now_ms // 1000
        cdef int slot = <int>(sec % 5)
        return self.seconds[slot] == sec and self.samples[slot] >= self.max_per_second

    cpdef long long left_now_ms(self, long long now_ms):
        """Milliseconds until the next second starts."""
        return 1000 - now_ms % 1000


# --------------------------------------------------------------------------- mapped tables

cdef class MappedTable:
    """The contiguous, fixed-size mapped segments of one file list (data or index).

    Holds a buffer export of each segment's mmap, so the mapping stays valid while it is
    in the table. Segment k covers [first_offset + k*file_size, ... + file_size). A
    segment may come with an open file descriptor (for appends written through the file,
    see `LogCore.write_through`); the table closes it when the segment leaves.
    """
    cdef readonly long long file_size
    cdef readonly long long first_offset
    cdef readonly Py_ssize_t count
    cdef readonly bint writable
    cdef Py_ssize_t cap
    cdef Py_buffer *views
    cdef int *fds
    cdef list objs
    cdef long long last_start       # offset of the last segment: `at` there needs no division
    cdef unsigned char *last_base   # its mapped bytes (NULL when the table is empty)

    def __cinit__(self, long long file_size):
        if file_size <= DL_MIN_BLANK_LEN:
            raise ValueError("segment size too small")
        self.file_size = file_size
        self.first_offset = -1
        self.count = 0
        self.cap = 0
        self.views = NULL
        self.fds = NULL
        self.objs = []
        self.writable = True
        self.last_start = 0
        self.last_base = NULL

    cdef inline void _cache_last(self) noexcept:
        if self.count:
            self.last_start = self.first_offset + (self.count - 1) * self.file_size
            self.last_base = <unsigned char *>self.views[self.count - 1].buf
        else:
            self.last_start = 0
            self.last_base = NULL

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self.count):
            PyBuffer_Release(&self.views[i])
            dl_close(self.fds[i])
        PyMem_Free(self.views)
        PyMem_Free(self.fds)

    @property
    def end_offset(self) -> int:
        if self.count == 0:
            return -1
        return self.first_offset + self.count * self.file_size

    def segments(self) -> list:
        """The mapped objects, first to last."""
        return list(self.objs)

    def push(self, obj, long long from_offset, int fd=-1) -> None:
        """Add a mapped segment after the last one (or as the first of an empty table);
        `fd`, when given, is an open descriptor of its file the table takes over."""
        if self.count and from_offset != self.first_offset + self.count * self.file_size:
            raise ValueError("segment offset %d does not follow the table" % from_offset)
        if from_offset % self.file_size != 0:
            raise ValueError("segment offset %d is not a multiple of the size" % from_offset)
        if self.count == self.cap:
            newcap = self.cap * 2 if self.cap else 8
            p = <Py_buffer *>PyMem_Realloc(self.views, newcap * sizeof(Py_buffer))
            if p == NULL:
                raise MemoryError()
            self.views = p
            f = <int *>PyMem_Realloc(self.fds, newcap * sizeof(int))
            if f == NULL:
                raise MemoryError()
            self.fds = f
            self.cap = newcap
        cdef Py_buffer *v = &self.views[self.count]
        try:
            PyObject_GetBuffer(obj, v, PyBUF_WRITABLE)
        except BufferError:
            PyObject_GetBuffer(obj, v, PyBUF_SIMPLE)
            self.writable = False
        if v.len != self.file_size:
            PyBuffer_Release(v)
            raise ValueError("segment length %d != configured size %d" % (v.len, self.file_size))
        if self.count == 0:
            self.first_offset = from_offset
        self.objs.append(obj)
        self.fds[self.count] = fd
        self.count += 1
        self._cache_last()

    def pop_first(self) -> None:
        """Drop the first segment (prefix deletion)."""
        if self.count == 0:
            raise IndexError("empty table")
        PyBuffer_Release(&self.views[0])
        dl_close(self.fds[0])
        memmove(self.views, self.views + 1, (self.count - 1) * sizeof(Py_buffer))
        memmove(self.fds, self.fds + 1, (self.count - 1) * sizeof(int))
        self.count -= 1
        del self.objs[0]
        self.first_offset = self.first_offset + self.file_size if self.count else -1
        self._cache_last()

    def pop_last(self) -> None:
        """Drop the last segment (truncation)."""
        if self.count == 0:
            raise IndexError("empty table")
        self.count -= 1
        PyBuffer_Release(&self.views[self.count])
        dl_close(self.fds[self.count])
        del self.objs[self.count]
        if self.count == 0:
            self.first_offset = -1
        self._cache_last()

    cdef inline unsigned char *at(self, long long offset, long long n) noexcept nogil:
        """Pointer to [offset, offset+n) when one segment holds it all, else NULL."""
        cdef long long rel = offset - self.last_start
        if self.last_base != NULL and rel >= 0:
            # the last segment (every append and most reads land there): no division
            return self.last_base + rel if rel + n <= self.file_size else NULL
        cdef long long inner
        cdef Py_ssize_t k = self.segment_of(offset, &inner)
        if k < 0 or inner + n > self.file_size:
            return NULL
        return <unsigned char *>self.views[k].buf + inner

    cdef inline Py_ssize_t segment_of(self, long long offset, long long *inner) noexcept nogil:
        """Which segment holds `offset` (-1 if none), and the offset inside it in `inner`."""
        if self.count == 0 or offset < self.first_offset:
            return -1
        cdef long long k = (offset - self.first_offset) // self.file_size
        if k >= self.count:
            return -1
        inner[0] = offset - self.first_offset - k * self.file_size
        return k

    cdef inline int fd_at(self, long long offset, long long *rel) noexcept nogil:
        """Descriptor of the segment holding `offset` (-1 if none or not kept), and the
        offset inside it in `rel`."""
        cdef Py_ssize_t k = self.segment_of(offset, rel)
        return -1 if k < 0 else self.fds[k]

    def fd_of(self, long long offset) -> int:
        """The open descriptor of the segment holding `offset`, -1 when it has none."""
        cdef long long rel = 0
        return self.fd_at(offset, &rel)

    def read(self, long long offset, long long n) -> bytes:
        """Copy of [offset, offset+n), which must lie inside one segment."""
        cdef unsigned char *p = self.at(offset, n)
        if p == NULL:
            raise IndexError("range %d+%d is not mapped" % (offset, n))
        return PyBytes_FromStringAndSize(<char *>p, n)

    def write(self, long long offset, bytes data) -> None:
        """Overwrite [offset, offset+len(data)) inside one segment."""
        cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
        cdef unsigned char *p = self.at(offset, n)
        if p == NULL or not self.writable:
            raise IndexError("range %d+%d is not mapped writable" % (offset, n))
        memcpy(p, PyBytes_AS_STRING(data), n)

    def zero(self, long long offset, long long n) -> None:
        """Zero [offset, offset+n) inside one segment."""
        cdef unsigned char *p = self.at(offset, n)
        if p == NULL or not self.writable:
            raise IndexError("range %d+%d is not mapped writable" % (offset, n))
        with nogil:
            memset(p, 0, n)

    def _span(self, long long frm, long long to, int op) -> None:
        # Runs op (0 = msync, 1 = prefault, 2 = unmap pages) over every segment part of
        # [frm, to) with the GIL released; each segment's buffer is re-exported for the
        # duration so a concurrent pop cannot unmap it.
        cdef Py_buffer view
        cdef long long start, end, seg_from, lo, hi
        cdef int rc = 0
        if self.count == 0 or to <= frm:
            return
        start = max(frm, self.first_offset)
        end = min(to, self.first_offset + self.count * self.file_size)
        while start < end:
            if self.count == 0 or start < self.first_offset:
                return  # the table shrank meanwhile: nothing left to do there
            k = (start - self.first_offset) // self.file_size
            if k >= self.count:
                return
            seg_from = self.first_offset + k * self.file_size
            lo = start - seg_from
            hi = min(end - seg_from, self.file_size)
            PyObject_GetBuffer(self.objs[k], &view, PyBUF_SIMPLE)
            with nogil:
                if op == 0:
                    rc = dl_msync(<unsigned char *>view.buf, <size_t>lo, <size_t>hi)
                elif op == 1:
                    rc = dl_prefault(<unsigned char *>view.buf, <size_t>lo, <size_t>hi)
                else:
                    rc = dl_unmap_pages(<unsigned char *>view.buf, <size_t>lo, <size_t>hi)
            PyBuffer_Release(&view)
            if rc != 0:
                raise OSError(rc, ("msync", "prefault", "unmap")[op] + " failed")
            start = seg_from + hi

    def msync(self, long long frm, long long to) -> None:
        """Make [frm, to) durable (msync MS_SYNC) without holding the GIL."""
        self._span(frm, to, 0)

    def prefault(self, long long frm, long long to) -> None:
        """Fault [frm, to) in writable without changing its bytes."""
        self._span(frm, to, 1)

    def unmap_pages(self, long long frm, long long to) -> None:
        """Drop this mapping's page-table entries for the whole pages inside [frm, to)
        (MADV_DONTNEED) without holding the GIL: the page cache keeps them, dirty ones
        stay dirty, and the next access maps them again."""
        self._span(frm, to, 2)


# --------------------------------------------------------------------------- log core

cdef class LogCore:
    """Appends and reads entries over a data table and an index table.

    Role-agnostic: the caller decides who may append. All state changes happen under an
    internal lock. When an append needs a segment that is not mapped yet it calls
    ``roller(kind, offset)`` (kind 0 = data, 1 = index) with the lock held; the roller must
    push a segment starting at ``offset`` onto the table, or raise.

    Point reads (`get`, `get_body`) rely on the GIL instead of the lock unless a multi-step
    change is under way: every change that rewrites entries up to `end_index` or drops
    segments (truncate, reset, recovery, retention, close) must run between `_acquire()`
    and `_release()`; appends only write past `end_index` and then move it.

    With `write_through` set, appends copy entries into a private stage and write it to
    the segment file with pwrite (through the page cache, which the mappings share)
    instead of copying into the mapping: RocketMQ's transient store pool. Pages written
    this way are never mapped dirty, so an msync of them is cheaper (sync mode). The
    stage is written before the call returns and before a segment roll; while it is
    written (without the GIL) the ledger shows its state before the staged entries, so
    no reader or flush sees an entry whose bytes are not in place. When the write fails
    the log ends again before the staged entries.
    """
    cdef MappedTable data
    cdef MappedTable index
    cdef object roller
    cdef pthread_mutex_t lock
    cdef readonly int exclusive  # > 0 while a multi-step change holds the lock (_acquire)
    cdef bint held                # the lock is held (written and read with the GIL only)
    cdef public long long term
    cdef readonly long long begin_index
    cdef readonly long long end_index
    cdef readonly long long end_term
    cdef readonly long long write_pos
    cdef readonly long long shrinks  # times the log's end moved back (truncation)
    cdef public bint write_crc
    cdef public bint verify_crc
    cdef public int state
    cdef public int failpoint
    cdef public long long max_entry_size
    cdef public bint allow_noop
    cdef public bint write_through
    cdef unsigned char *stage
    cdef Py_ssize_t stage_cap
    cdef Py_ssize_t stage_len
    cdef long long stage_pos           # log position of stage[0]
    cdef long long stage_begin         # the ledger state before the first staged entry
    cdef long long stage_end_index
    cdef long long stage_end_term

    def __cinit__(self, *args, **kwargs):
        if pthread_mutex_init(&self.lock, NULL) != 0:
            raise MemoryError()
        self.exclusive = 0
        self.held = False
        self.begin_index = -1
        self.end_index = -1
        self.end_term = -1
        self.write_pos = 0
        self.shrinks = 0
        self.term = 0
        self.write_crc = True
        self.verify_crc = True
        self.state = ST_OK
        self.failpoint = FP_NONE
        self.max_entry_size = DL_MAX_ENTRY_SIZE
        self.allow_noop = True
        self.write_through = False
        self.stage = NULL
        self.stage_cap = 0
        self.stage_len = 0

    def __dealloc__(self):
        pthread_mutex_destroy(&self.lock)
        PyMem_Free(self.stage)

    def _init_core(self, MappedTable data not None, MappedTable index not None, roller) -> None:
        self.data = data
        self.index = index
        self.roller = roller

    # -- locking (also used by the Python layer for truncate / reset / recovery)

    cdef inline void _lock(self) noexcept:
        # a pthread mutex: PyThread_acquire_lock reads the clock on every call (3.11)
        if pthread_mutex_trylock(&self.lock) != 0:
            with nogil:
                pthread_mutex_lock(&self.lock)
        self.held = True

    cdef inline void _unlock(self) noexcept:
        self.held = False
        pthread_mutex_unlock(&self.lock)

    def _acquire(self) -> None:
        """Take the lock for a multi-step change (truncate, reset, recovery, retention,
        close). Point reads wait for it instead of reading without the lock."""
        self._lock()
        self.exclusive += 1

    def _release(self) -> None:
        self.exclusive -= 1
        self._unlock()

    def _set_state(self, long long begin_index, long long end_index, long long end_term,
                   long long write_pos) -> None:
        """Set the ledger bounds (recovery, truncate, reset). Caller holds the lock.
        Counts in `shrinks` when the end moves back."""
        if end_index < self.end_index or write_pos < self.write_pos:
            self.shrinks += 1
        self.begin_index = begin_index
        self.end_index = end_index
        self.end_term = end_term
        self.write_pos = write_pos

    # -- write path

    cdef inline int _check_writable(self) except -1:
        if self.state == ST_OK:
            return 0
        return self._refuse_write()

    cdef int _refuse_write(self) except -1:
        if self.state == ST_DISK_FULL:
            raise DLedgerError(ResponseCode.DISK_FULL, "disk full: appends refused")
        if self.state == ST_DISK_ERROR:
            raise DLedgerError(ResponseCode.DISK_ERROR, "store failed after an I/O error")
        raise DLedgerError(ResponseCode.DISK_ERROR, "store is read-only")

    cdef inline int _check_size(self, long long size) except -1:
        if size > self.max_entry_size or size + DL_MIN_BLANK_LEN > self.data.file_size:
            return self._refuse_size(size)
        return 0

    cdef int _refuse_size(self, long long size) except -1:
        raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT,
                           "entry of %d bytes exceeds the maximum entry size %d"
                           % (size, min(self.max_entry_size, self.data.file_size - DL_MIN_BLANK_LEN)))

    cdef int _roll(self, int kind, long long offset) except -1:
        # staged entries go to their file first: the roller runs Python code, during
        # which another thread may take the GIL and read up to end_index
        self._flush_stage()
        self.roller(kind, offset)
        return 0

    cdef inline int _failpoint_after_data(self) except -1:
        """The `after_data_before_index` crash point: with it set, the entry's bytes
        reach their file and the process dies before its index unit is written."""
        if self.failpoint == FP_AFTER_DATA_BEFORE_INDEX:
            self._flush_stage()
            _exit(137)
        return 0

    cdef inline unsigned char *_dest(self, long long pos, long long size) except NULL:
        """Where the `size` bytes of the entry at log position `pos` are written: the
        mapping, or with write_through the stage (written out by `_flush_stage`)."""
        cdef unsigned char *p
        if self.write_through:
            return self._stage_slot(pos, size)
        p = self.data.at(pos, size)
        if p == NULL:
            raise DLedgerError(ResponseCode.DISK_ERROR, "data position %d is not mapped" % pos)
        return p

    cdef unsigned char *_stage_slot(self, long long pos, long long size) except NULL:
        cdef unsigned char *p
        cdef Py_ssize_t cap
        if self.stage_len and (self.stage_pos + self.stage_len != pos
                               or self.stage_len + size > STAGE_MAX_BYTES):
            self._flush_stage()
        if self.stage_len + size > self.stage_cap:
            # grow geometrically (a batch's first pass reallocates O(log n) times, not
            # once per entry), never past what one stage can hold
            cap = max(self.stage_len + size, min(2 * self.stage_cap, STAGE_MAX_BYTES))
            p = <unsigned char *>PyMem_Realloc(self.stage, cap)
            if p == NULL:
                raise MemoryError()
            self.stage = p
            self.stage_cap = cap
        if self.stage_len == 0:
            self.stage_pos = pos
            self.stage_begin = self.begin_index
            self.stage_end_index = self.end_index
            self.stage_end_term = self.end_term
        p = self.stage + self.stage_len
        self.stage_len += size
        return p

    cdef int _flush_stage(self) except -1:
        """pwrite the staged entries (if any) to their segment file. When that fails the
        log ends again before them and the store refuses writes: DISK_FULL on
        ENOSPC/EDQUOT, DISK_ERROR otherwise."""
        cdef long long rel = 0
        cdef Py_ssize_t n = self.stage_len
        cdef int err
        if n == 0:
            return 0
        self.stage_len = 0
        # the staged entries are not published while the GIL is released for the write:
        # the ledger shows its state before them, and shows them again once written
        cdef long long begin = self.begin_index, end = self.end_index
        cdef long long end_term = self.end_term, write_pos = self.write_pos
        self.begin_index = self.stage_begin
        self.end_index = self.stage_end_index
        self.end_term = self.stage_end_term
        self.write_pos = self.stage_pos
        cdef int fd = self.data.fd_at(self.stage_pos, &rel)
        if fd < 0 or rel + n > self.data.file_size:
            err = errno.EBADF
        else:
            with nogil:
                err = dl_pwrite_all(fd, self.stage, <size_t>n, rel)
        if err == 0:
            self.begin_index = begin
            self.end_index = end
            self.end_term = end_term
            self.write_pos = write_pos
            return 0
        full = err in (errno.ENOSPC, errno.EDQUOT)
        self.state = ST_DISK_FULL if full else ST_DISK_ERROR
        raise DLedgerError(ResponseCode.DISK_FULL if full else ResponseCode.DISK_ERROR,
                           "writing %d bytes at data position %d failed: %s"
                           % (n, self.stage_pos, os.strerror(err)))

    cdef unsigned char *_unit_slot(self, long long idx) except NULL:
        cdef long long off = idx * DL_INDEX_UNIT
        cdef unsigned char *p = self.index.at(off, DL_INDEX_UNIT)
        if p == NULL:
            if self.index.count and off != self.index.first_offset + self.index.count * self.index.file_size:
                raise DLedgerError(ResponseCode.DISK_ERROR, "index slot %d is not mapped" % idx)
            self._roll(1, off - off % self.index.file_size)
            p = self.index.at(off, DL_INDEX_UNIT)
            if p == NULL:
                raise DLedgerError(ResponseCode.DISK_ERROR, "roller did not map index offset %d" % off)
        return p

    cdef long long _pre_append(self, long long size) except -1:
        """Position for an entry of `size` bytes; pads the segment with a blank and rolls
        to the next one when `size + 8` does not fit (DLedger's preAppend)."""
        cdef long long fs = self.data.file_size
        cdef long long rel, remaining
        cdef unsigned char *p
        if self.data.count == 0 or self.write_pos >= self.data.first_offset + self.data.count * fs:
            self._roll(0, self.write_pos)
        rel = (self.write_pos - self.data.first_offset) % fs
        remaining = fs - rel
        if size + DL_MIN_BLANK_LEN > remaining:
            p = self.data.at(self.write_pos, remaining)
            if p == NULL:
                raise DLedgerError(ResponseCode.DISK_ERROR, "data position %d is not mapped" % self.write_pos)
            dl_put32(p, DL_MAGIC_BLANK)
            dl_put32(p + 4, <int32_t>remaining)
            memset(p + 8, 0, remaining - 8)
            # roll before moving the write position: when there is no next segment (disk
            # full) the log still ends at its last entry (the blank is rewritten later)
            self._roll(0, self.write_pos + remaining)
            self.write_pos += remaining
        return self.write_pos

    cdef long long _append_one(self, const unsigned char *body, Py_ssize_t n, int magic) except -2:
        if self.term < self.end_term:
            raise DLedgerError(ResponseCode.INCONSISTENT_TERM,
                               "term %d is below the last entry's term %d" % (self.term, self.end_term))
        cdef long long size = DL_HEADER_SIZE + n
        cdef long long idx = self.end_index + 1
        cdef long long pos
        cdef unsigned char *unit = self._unit_slot(idx)
        pos = self._pre_append(size)
        cdef unsigned char *p = self._dest(pos, size)
        cdef int32_t crc = 0
        if n >= GIL_RELEASE_BYTES and not self.write_through:
            with nogil:
                memcpy(p + DL_HEADER_SIZE, body, n)
                if self.write_crc:
                    crc = _crc_field(body, n)
        else:
            memcpy(p + DL_HEADER_SIZE, body, n)
            if self.write_crc:
                crc = _crc_field(body, n)
        _write_header(p, magic, <int32_t>size, idx, self.term, pos, crc)
        self._failpoint_after_data()
        _write_unit(unit, magic, pos, <int32_t>size, idx, self.term)
        self._publish(idx, self.term, pos + size)
        return idx

    cdef inline void _publish(self, long long idx, long long term, long long end_pos) noexcept:
        """Move the log's end to entry `idx` (written in full, unit included)."""
        self.end_index = idx
        self.end_term = term
        self.write_pos = end_pos
        if self.begin_index < 0:
            self.begin_index = idx

    cdef inline long long _append_fast(self, const unsigned char *body, Py_ssize_t n) noexcept:
        """`_append_one` of a normal entry in the common case, or -1 to take the general
        path: mapped writes, a term that is not behind, the entry (with room for a blank
        after it) inside the last data segment and its unit inside the last index
        segment. The caller holds the GIL, and the lock unless nobody holds it."""
        cdef long long size = DL_HEADER_SIZE + n
        cdef long long idx = self.end_index + 1
        cdef long long pos = self.write_pos
        cdef long long rel = pos - self.data.last_start
        cdef long long urel = idx * DL_INDEX_UNIT - self.index.last_start
        if (self.write_through or self.failpoint != FP_NONE or self.term < self.end_term
                or n >= GIL_RELEASE_BYTES or self.data.last_base == NULL or self.index.last_base == NULL
                or rel < 0 or rel + size + DL_MIN_BLANK_LEN > self.data.file_size
                or urel < 0 or urel + DL_INDEX_UNIT > self.index.file_size):
            return -1
        cdef unsigned char *p = self.data.last_base + rel
        memcpy(p + DL_HEADER_SIZE, body, n)
        _write_header(p, DL_MAGIC_NORMAL, <int32_t>size, idx, self.term, pos,
                      _crc_field(body, n) if self.write_crc else 0)
        _write_unit(self.index.last_base + urel, DL_MAGIC_NORMAL, pos, <int32_t>size, idx, self.term)
        self._publish(idx, self.term, pos + size)
        return idx

    def append(self, bytes body not None) -> int:
        """Append one entry with the current `term`; returns its index."""
        cdef Py_ssize_t n = PyBytes_GET_SIZE(body)
        cdef const unsigned char *src = <const unsigned char *>PyBytes_AS_STRING(body)
        self._check_writable()
        self._check_size(DL_HEADER_SIZE + n)
        cdef long long idx
        if not self.held:
            # Nobody holds the lock, and nobody can take it before this returns: the GIL
            # is held throughout and `held` is set under the GIL right after the mutex
            # is taken (a thread that got the mutex without the GIL has not touched
            # anything yet). So the fast path needs no atomic operation.
            idx = self._append_fast(src, n)
            if idx >= 0:
                return idx
        self._lock()
        try:
            idx = self._append_one(src, n, DL_MAGIC_NORMAL)
            self._flush_stage()
            return idx
        finally:
            self._unlock()

    def append_noop(self) -> int:
        """Append an empty NOOP entry (magic 2) with the current `term`; returns its index."""
        self._check_writable()
        if not self.allow_noop:
            raise DLedgerError(ResponseCode.UNSUPPORTED, "NOOP entries are disabled (java_compat)")
        cdef long long idx
        self._lock()
        try:
            idx = self._append_one(<const unsigned char *>b"", 0, DL_MAGIC_NOOP)
            self._flush_stage()
            return idx
        finally:
            self._unlock()

    def append_many(self, bodies) -> int:
        """Append several bodies as consecutive entries; returns the first index
        (or the next index when `bodies` is empty)."""
        cdef tuple items = tuple(bodies)
        cdef Py_ssize_t i, k = len(items)
        cdef long long first
        self._check_writable()
        for i in range(k):
            b = items[i]
            if type(b) is not bytes:
                raise TypeError("bodies must be bytes")
            self._check_size(DL_HEADER_SIZE + PyBytes_GET_SIZE(b))
        self._lock()
        try:
            first = self.end_index + 1
            try:
                for i in range(k):
                    b = items[i]
                    self._append_one(<const unsigned char *>PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b),
                                     DL_MAGIC_NORMAL)
            finally:
                self._flush_stage()
            return first
        finally:
            self._unlock()

    def append_encoded(self, run) -> int:
        """Append a run of already-encoded entries verbatim (the follower path).

        Every header is validated first (magic, sizes, CRC when present, contiguous
        indexes from ``end_index + 1``, non-decreasing terms, and ``pos`` equal to where
        the entry lands here, blank padding included); nothing is written unless the
        whole run is valid. Returns the number of entries appended.
        """
        cdef Py_buffer view
        cdef const unsigned char *r
        cdef Py_ssize_t off = 0, total
        cdef long long idx, term, pos, wp, size, fs = self.data.file_size, rel, cnt = 0
        cdef int32_t magic, bsize, crc
        self._check_writable()
        PyObject_GetBuffer(run, &view, PyBUF_SIMPLE)
        self._lock()
        try:
            r = <const unsigned char *>view.buf
            total = view.len
            idx = self.end_index
            term = self.end_term
            wp = self.write_pos
            # validation pass: simulate the positions preAppend will give
            while off < total:
                if off + DL_HEADER_SIZE > total:
                    raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "run ends inside a header at %d" % off)
                magic = dl_get32(r + off + DL_OFF_MAGIC)
                size = dl_get32(r + off + DL_OFF_SIZE)
                bsize = dl_get32(r + off + DL_OFF_BODY_SIZE)
                if magic != DL_MAGIC_NORMAL and magic != DL_MAGIC_NOOP:
                    raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "bad magic %d at run offset %d" % (magic, off))
                if size < DL_HEADER_SIZE or bsize + DL_HEADER_SIZE != size or off + size > total:
                    raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "bad size %d at run offset %d" % (size, off))
                self._check_size(size)
                if dl_get64(r + off + DL_OFF_INDEX) != idx + 1:
                    raise DLedgerError(ResponseCode.INCONSISTENT_INDEX,
                                       "run entry index %d, expected %d" % (dl_get64(r + off + DL_OFF_INDEX), idx + 1))
                if dl_get64(r + off + DL_OFF_TERM) < term:
                    raise DLedgerError(ResponseCode.INCONSISTENT_TERM, "run entry term goes backwards at index %d" % (idx + 1))
                crc = dl_get32(r + off + DL_OFF_BODY_CRC)
                if crc != 0 and self.verify_crc and _crc_field(r + off + DL_HEADER_SIZE, bsize) != crc:
                    raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "body CRC mismatch at index %d" % (idx + 1))
                rel = wp % fs if self.data.count == 0 else (wp - self.data.first_offset) % fs
                if size + DL_MIN_BLANK_LEN > fs - rel:
                    wp += fs - rel
                pos = dl_get64(r + off + DL_OFF_POS)
                if pos != wp:
                    raise DLedgerError(ResponseCode.INCONSISTENT_STATE,
                                       "entry %d has pos %d but lands at %d" % (idx + 1, pos, wp))
                idx += 1
                term = dl_get64(r + off + DL_OFF_TERM)
                wp += size
                off += size
            # write pass
            off = 0
            try:
                while off < total:
                    size = dl_get32(r + off + DL_OFF_SIZE)
                    idx = self.end_index + 1
                    unit = self._unit_slot(idx)
                    pos = self._pre_append(size)
                    p = self._dest(pos, size)
                    if size >= GIL_RELEASE_BYTES and not self.write_through:
                        with nogil:
                            memcpy(p, r + off, size)
                    else:
                        memcpy(p, r + off, size)
                    self._failpoint_after_data()
                    term = dl_get64(r + off + DL_OFF_TERM)
                    _write_unit(unit, dl_get32(r + off + DL_OFF_MAGIC), pos, <int32_t>size, idx, term)
                    self._publish(idx, term, pos + size)
                    off += size
                    cnt += 1
            finally:
                self._flush_stage()
            return cnt
        finally:
            self._unlock()
            PyBuffer_Release(&view)

    # -- read path

    cdef const unsigned char *_locate(self, long long idx, long long *pos, long long *size) except NULL:
        """Data pointer of entry `idx` (caller holds the lock)."""
        if idx < self.begin_index or idx > self.end_index or self.begin_index < 0:
            raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE,
                               "index %d outside [%d, %d]" % (idx, self.begin_index, self.end_index))
        cdef unsigned char *u = self.index.at(idx * DL_INDEX_UNIT, DL_INDEX_UNIT)
        if u == NULL:
            raise DLedgerError(ResponseCode.DISK_ERROR, "index unit %d is not mapped" % idx)
        pos[0] = dl_get64(u + DL_IDX_OFF_POS)
        size[0] = dl_get32(u + DL_IDX_OFF_SIZE)
        cdef unsigned char *p = self.data.at(pos[0], size[0]) if size[0] >= DL_HEADER_SIZE else NULL
        if p == NULL or dl_get64(p + DL_OFF_INDEX) != idx or dl_get32(p + DL_OFF_SIZE) != size[0]:
            raise DLedgerError(ResponseCode.DISK_ERROR, "entry %d does not match its index unit (pos %d)" % (idx, pos[0]))
        cdef int32_t crc = dl_get32(p + DL_OFF_BODY_CRC)
        if crc != 0 and self.verify_crc and _crc_field(p + DL_HEADER_SIZE, size[0] - DL_HEADER_SIZE) != crc:
            raise DLedgerError(ResponseCode.DISK_ERROR, "body CRC mismatch for entry %d at pos %d" % (idx, pos[0]))
        return p

    cdef object _read(self, long long idx, bint entry):
        """The body of entry `idx` (its Entry when `entry`). The CRC is checked on the
        copy returned. Caller holds the lock, or reads under the GIL alone (see get_body)."""
        cdef long long pos, size
        cdef const unsigned char *p
        cdef unsigned char *u
        cdef int32_t crc
        if idx < self.begin_index or idx > self.end_index or self.begin_index < 0:
            raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE,
                               "index %d outside [%d, %d]" % (idx, self.begin_index, self.end_index))
        u = self.index.at(idx * DL_INDEX_UNIT, DL_INDEX_UNIT)
        if u == NULL:
            raise DLedgerError(ResponseCode.DISK_ERROR, "index unit %d is not mapped" % idx)
        pos = dl_get64(u + DL_IDX_OFF_POS)
        size = dl_get32(u + DL_IDX_OFF_SIZE)
        p = self.data.at(pos, size) if size >= DL_HEADER_SIZE else NULL
        if p == NULL:
            raise DLedgerError(ResponseCode.DISK_ERROR, "entry %d does not match its index unit (pos %d)" % (idx, pos))
        # Allocate before the first touch of the entry, which is likely a cache miss: the
        # less work queues up behind it, the sooner the CPU reaches the next read's first
        # miss (about 20 % on random reads of 128-byte bodies).
        body = PyBytes_FromStringAndSize(NULL, size - DL_HEADER_SIZE)
        if dl_get64(p + DL_OFF_INDEX) != idx or dl_get32(p + DL_OFF_SIZE) != size:
            raise DLedgerError(ResponseCode.DISK_ERROR, "entry %d does not match its index unit (pos %d)" % (idx, pos))
        memcpy(PyBytes_AS_STRING(body), p + DL_HEADER_SIZE, size - DL_HEADER_SIZE)
        crc = dl_get32(p + DL_OFF_BODY_CRC)
        if crc != 0 and self.verify_crc and \
                _crc_field(<const unsigned char *>PyBytes_AS_STRING(body), size - DL_HEADER_SIZE) != crc:
            raise DLedgerError(ResponseCode.DISK_ERROR, "body CRC mismatch for entry %d at pos %d" % (idx, pos))
        if entry:
            return Entry(idx, dl_get64(p + DL_OFF_TERM), pos, dl_get32(p + DL_OFF_MAGIC), body, crc)
        return body

    @cython.binding(False)
    def get(self, long long idx) -> Entry:
        """The entry at `idx` (raises DLedgerError INDEX_OUT_OF_RANGE outside the log)."""
        if not self.exclusive:
            return self._read(idx, True)  # under the GIL alone: see get_body
        self._lock()
        try:
            return self._read(idx, True)
        finally:
            self._unlock()

    @cython.binding(False)
    def get_body(self, long long idx) -> bytes:
        """The body of the entry at `idx` (the fastest single read).

        Reads without the lock unless a multi-step change holds it: the caller holds the
        GIL, which no step of `_read` releases, and everything else that changes the
        tables or the bytes of entries up to `end_index` either holds the GIL throughout
        (appends publish an entry by moving `end_index` once its bytes are written; their
        GIL-free copies write past it) or runs between `_acquire` and `_release`."""
        if not self.exclusive:
            return self._read(idx, False)
        self._lock()
        try:
            return self._read(idx, False)
        finally:
            self._unlock()

    def term_at(self, long long idx) -> int:
        """Term of the entry at `idx`, read from its index unit."""
        self._lock()
        try:
            if idx < self.begin_index or idx > self.end_index or self.begin_index < 0:
                raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE, "index %d outside [%d, %d]" % (idx, self.begin_index, self.end_index))
            u = self.index.at(idx * DL_INDEX_UNIT, DL_INDEX_UNIT)
            if u == NULL:
                raise DLedgerError(ResponseCode.DISK_ERROR, "index unit %d is not mapped" % idx)
            return dl_get64(u + DL_IDX_OFF_TERM)
        finally:
            self._unlock()

    def read_run(self, long long from_index, long long max_bytes) -> tuple:
        """Already-encoded entries from `from_index` on, as one bytes object: at least one
        entry, then more while the total stays within `max_bytes`, all from one data
        segment and none above `end_index`. Returns (bytes, count)."""
        cdef long long pos, size, start, cur, idx, last_end
        cdef const unsigned char *p
        cdef unsigned char *q
        self._lock()
        try:
            p = self._locate(from_index, &pos, &size)
            start = pos
            cur = pos + size
            idx = from_index
            while idx < self.end_index:
                q = self.data.at(cur, DL_HEADER_SIZE)
                if q == NULL or dl_get32(q) == DL_MAGIC_BLANK:
                    break
                size = dl_get32(q + DL_OFF_SIZE)
                if cur + size - start > max_bytes or dl_get64(q + DL_OFF_INDEX) != idx + 1 or size < DL_HEADER_SIZE:
                    break
                cur += size
                idx += 1
            return PyBytes_FromStringAndSize(<const char *>p, cur - start), idx - from_index + 1
        finally:
            self._unlock()

    def read_columns(self, long long from_index, long long max_count, long long max_bytes) -> tuple:
        """Column-wise batch from `from_index`: (count, index, term, pos, offsets, bodies,
        magic) where index/term/pos are native int64 bytearrays, offsets native int32 with
        count+1 values (Arrow's binary layout), bodies one bytearray and magic native
        int32 (1 normal, 2 NOOP). Stops at `end_index`, after `max_count` entries or once
        bodies exceed `max_bytes` (at least one entry is returned when `from_index` is in
        range)."""
        cdef long long n = 0, total = 0, idx, pos, size, last, k
        cdef unsigned char *u
        cdef const unsigned char *p
        cdef int64_t *ci
        cdef int64_t *ct
        cdef int64_t *cp
        cdef int32_t *co
        cdef int32_t *cm
        cdef char *cb
        self._lock()
        try:
            if max_count <= 0 or from_index > self.end_index:
                return (0, bytearray(), bytearray(), bytearray(), bytearray(4), bytearray(), bytearray())
            self._locate(from_index, &pos, &size)
            last = min(self.end_index, from_index + max_count - 1)
            idx = from_index
            while idx <= last:
                u = self.index.at(idx * DL_INDEX_UNIT, DL_INDEX_UNIT)
                if u == NULL:
                    break
                size = dl_get32(u + DL_IDX_OFF_SIZE) - DL_HEADER_SIZE
                if n > 0 and total + size > max_bytes:
                    break
                total += size
                n += 1
                idx += 1
            if total > 0x7FFFFFFF:
                raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "column batch over 2 GiB")
            a_i = PyByteArray_FromStringAndSize(NULL, n * 8)
            a_t = PyByteArray_FromStringAndSize(NULL, n * 8)
            a_p = PyByteArray_FromStringAndSize(NULL, n * 8)
            a_o = PyByteArray_FromStringAndSize(NULL, (n + 1) * 4)
            a_b = PyByteArray_FromStringAndSize(NULL, total)
            a_m = PyByteArray_FromStringAndSize(NULL, n * 4)
            ci = <int64_t *>PyByteArray_AS_STRING(a_i)
            ct = <int64_t *>PyByteArray_AS_STRING(a_t)
            cp = <int64_t *>PyByteArray_AS_STRING(a_p)
            co = <int32_t *>PyByteArray_AS_STRING(a_o)
            cb = PyByteArray_AS_STRING(a_b)
            cm = <int32_t *>PyByteArray_AS_STRING(a_m)
            co[0] = 0
            total = 0
            for k in range(n):
                p = self._locate(from_index + k, &pos, &size)
                ci[k] = from_index + k
                ct[k] = dl_get64(p + DL_OFF_TERM)
                cp[k] = pos
                cm[k] = dl_get32(p + DL_OFF_MAGIC)
                memcpy(cb + total, p + DL_HEADER_SIZE, size - DL_HEADER_SIZE)
                total += size - DL_HEADER_SIZE
                co[k + 1] = <int32_t>total
            return (n, a_i, a_t, a_p, a_o, a_b, a_m)
        finally:
            self._unlock()

    # -- recovery support

    def scan(self, long long start, long long prev_index, long long prev_term, bint check_crc,
             bint check_index) -> tuple:
        """Walk entries from data position `start` across segments, validating headers
        the way recovery does. `prev_index` = -1 accepts any first index.

        Returns (stop_pos, first_index, last_index, last_term, count, stop_reason,
        mismatch_index, mismatch_pos, last_end): the walk stopped at data position
        stop_pos; mismatch_index is the first index whose unit disagrees with the data
        (-1 when all agree or `check_index` is false) and mismatch_pos its data position;
        last_end is where the last entry ends (-1 without entries), before stop_pos when
        a blank follows it.
        """
        cdef long long fs = self.data.file_size, cur = start, rel, size, idx, term, pos
        cdef long long first = -1, count = 0, mismatch = -1, mismatch_pos = -1, last_end = -1
        cdef int reason = STOP_END
        cdef int32_t magic, bsize, crc
        cdef unsigned char *p
        cdef unsigned char *u
        while True:
            if self.data.count == 0 or cur >= self.data.first_offset + self.data.count * fs:
                reason = STOP_END
                break
            p = self.data.at(cur, DL_MIN_BLANK_LEN)
            if p == NULL:
                reason = STOP_NO_SEGMENT
                break
            rel = (cur - self.data.first_offset) % fs
            magic = dl_get32(p)
            size = dl_get32(p + 4)
            if magic == DL_MAGIC_BLANK:
                # padding runs to the end of its segment; only a reset's head blank (at the
                # start of the first segment) may stop earlier
                if size < DL_MIN_BLANK_LEN or rel + size > fs or (
                        rel + size != fs and not (rel == 0 and cur == self.data.first_offset)):
                    reason = STOP_BLANK
                    break
                cur += size
                continue
            if magic == 0 and size == 0:
                reason = STOP_END
                break
            if rel + DL_HEADER_SIZE > fs:
                reason = STOP_BAD_HEADER
                break
            bsize = dl_get32(p + DL_OFF_BODY_SIZE)
            if (magic != DL_MAGIC_NORMAL and magic != DL_MAGIC_NOOP) or size <= DL_MIN_ENTRY_SIZE_EXCL \
                    or size < DL_HEADER_SIZE or bsize + DL_HEADER_SIZE != size or rel + size > fs:
                reason = STOP_BAD_HEADER
                break
            idx = dl_get64(p + DL_OFF_INDEX)
            term = dl_get64(p + DL_OFF_TERM)
            pos = dl_get64(p + DL_OFF_POS)
            if pos != cur:
                reason = STOP_POS
                break
            if prev_index >= 0 and idx != prev_index + 1:
                reason = STOP_INDEX
                break
            if idx < 0:
                reason = STOP_INDEX
                break
            if term < prev_term:
                reason = STOP_TERM
                break
            crc = dl_get32(p + DL_OFF_BODY_CRC)
            if check_crc and crc != 0 and _crc_field(p + DL_HEADER_SIZE, bsize) != crc:
                reason = STOP_CRC
                break
            if check_index and mismatch < 0:
                u = self.index.at(idx * DL_INDEX_UNIT, DL_INDEX_UNIT)
                if u == NULL or dl_get32(u + DL_IDX_OFF_MAGIC) != magic \
                        or dl_get64(u + DL_IDX_OFF_POS) != cur or dl_get32(u + DL_IDX_OFF_SIZE) != size \
                        or dl_get64(u + DL_IDX_OFF_INDEX) != idx or dl_get64(u + DL_IDX_OFF_TERM) != term:
                    mismatch = idx
                    mismatch_pos = cur
            if first < 0:
                first = idx
            prev_index = idx
            prev_term = term
            count += 1
            cur += size
            last_end = cur
        return (cur, first, prev_index, prev_term, count, reason, mismatch, mismatch_pos, last_end)

    def write_units(self, long long start, long long from_index, long long to_index) -> None:
        """Rewrite index units for entries from_index..to_index walking the data from
        position `start` (the data position of from_index). Caller holds the lock."""
        cdef long long cur = start, idx = from_index, size, fs = self.data.file_size
        cdef unsigned char *p
        cdef unsigned char *u
        while idx <= to_index:
            p = self.data.at(cur, DL_MIN_BLANK_LEN)
            if p == NULL:
                raise DLedgerError(ResponseCode.DISK_ERROR, "data position %d is not mapped" % cur)
            if dl_get32(p) == DL_MAGIC_BLANK:
                cur += dl_get32(p + 4)
                continue
            size = dl_get32(p + DL_OFF_SIZE)
            u = self._unit_slot(idx)
            _write_unit(u, dl_get32(p), cur, <int32_t>size, dl_get64(p + DL_OFF_INDEX),
                        dl_get64(p + DL_OFF_TERM))
            cur += size
            idx += 1

    def unit_conflicts(self, long long start, long long from_index, long long to_index,
                       long long prev_term, long long prev_end) -> list:
        """Entries from_index..to_index (walking the data from `start`, the position of
        from_index, as write_units does) whose index unit is there but describes another
        entry than the data header: pos, size, index or term differ. A unit that is not
        mapped, all zero, or the leading bytes of the right unit followed by zeros (a
        torn write) is missing, not conflicting; magic is not compared (Java 0.4.0
        writes 1 for NOOP entries). Read-only; the caller holds the lock.

        Returns [(index, pos, prev_term, prev_end, next_term)]: the header term and end
        of the entry before it (`prev_term` / `prev_end` for from_index) and the header
        term of the entry after it (-1 for to_index)."""
        cdef long long cur = start, idx = from_index, size, term
        cdef int32_t magic
        cdef int j, k
        cdef unsigned char expected[32]  # DL_INDEX_UNIT
        cdef unsigned char *p
        cdef unsigned char *u
        cdef list out = []
        while idx <= to_index:
            p = self.data.at(cur, DL_MIN_BLANK_LEN)
            if p == NULL:
                raise DLedgerError(ResponseCode.DISK_ERROR, "data position %d is not mapped" % cur)
            magic = dl_get32(p)
            if magic == DL_MAGIC_BLANK:
                cur += dl_get32(p + 4)
                continue
            size = dl_get32(p + DL_OFF_SIZE)
            term = dl_get64(p + DL_OFF_TERM)
            if out and out[len(out) - 1][0] == idx - 1:
                out[len(out) - 1][4] = term
            u = self.index.at(idx * DL_INDEX_UNIT, DL_INDEX_UNIT)
            if u != NULL:
                _write_unit(expected, magic, cur, <int32_t>size, idx, term)
                j = 0
                while j < DL_INDEX_UNIT and u[j] == expected[j]:
                    j += 1
                k = j
                while k < DL_INDEX_UNIT and u[k] == 0:
                    k += 1
                if k < DL_INDEX_UNIT and (
                        dl_get64(u + DL_IDX_OFF_POS) != cur or dl_get32(u + DL_IDX_OFF_SIZE) != size
                        or dl_get64(u + DL_IDX_OFF_INDEX) != idx or dl_get64(u + DL_IDX_OFF_TERM) != term):
                    out.append([idx, cur, prev_term, prev_end, -1])
            prev_term = term
            prev_end = cur + size
            cur += size
            idx += 1
        return [tuple(c) for c in out]
