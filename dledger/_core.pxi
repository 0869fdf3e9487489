# Included by dledger/_store.pyx (one extension module): `LogCore`: its state, locking,
# write path and public methods. The work of some methods is done by C functions that
# take the core, in the files included after this one: the write-through stage in
# _core_stage.pxi, reads in _core_read.pxi, the follower's run append in
# _core_follow.pxi, the recovery walks in _core_scan.pxi.
# Uses the C declarations of _store.pxd, the codecs of _codec.pxi and `MappedTable`.

cdef int _check_append_magic(LogCore core, long long magic) except -1:
    """`append_many`'s magic: normal, or record unless records are off (java_compat)."""
    if magic == DL_MAGIC_RECORD:
        if not core.allow_records:
            raise DLedgerError(ResponseCode.UNSUPPORTED,
                               "record entries are disabled (java_compat): Java DLedger cannot read them")
    elif magic != DL_MAGIC_NORMAL:
        raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT,
                           "append_many writes magic %d (normal) or %d (record), not %d"
                           % (DL_MAGIC_NORMAL, DL_MAGIC_RECORD, magic))
    return 0


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
    cdef object on_write_failure  # called with the error when a write fails (not for a full disk)
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
    cdef public bint allow_records
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
        self.allow_records = True
        self.write_through = False
        self.stage = NULL
        self.stage_cap = 0
        self.stage_len = 0

    def __dealloc__(self):
        pthread_mutex_destroy(&self.lock)
        PyMem_Free(self.stage)

    def _init_core(self, MappedTable data not None, MappedTable index not None, roller,
                   on_write_failure=None) -> None:
        self.data = data
        self.index = index
        self.roller = roller
        self.on_write_failure = on_write_failure

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
        _flush_stage(self)
        self.roller(kind, offset)
        return 0

    cdef inline int _failpoint_after_data(self) except -1:
        """The `after_data_before_index` crash point: with it set, the entry's bytes
        reach their file and the process dies before its index unit is written."""
        if self.failpoint == FP_AFTER_DATA_BEFORE_INDEX:
            _flush_stage(self)
            _exit(137)
        return 0

    cdef inline unsigned char *_dest(self, long long pos, long long size) except NULL:
        """Where the `size` bytes of the entry at log position `pos` are written: the
        mapping, or with write_through the stage (written out by `_flush_stage`)."""
        cdef unsigned char *p
        if self.write_through:
            return _stage_slot(self, pos, size)
        p = self.data.at(pos, size)
        if p == NULL:
            raise DLedgerError(ResponseCode.DISK_ERROR, "data position %d is not mapped" % pos)
        return p

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
            self._check_writable()  # again: a close() the lock waited for ends writing
            idx = self._append_one(src, n, DL_MAGIC_NORMAL)
            _flush_stage(self)
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
            self._check_writable()
            idx = self._append_one(<const unsigned char *>b"", 0, DL_MAGIC_NOOP)
            _flush_stage(self)
            return idx
        finally:
            self._unlock()

    def append_many(self, bodies, magic=DL_MAGIC_NORMAL) -> int:
        """Append several bodies as consecutive entries of `magic` (1 normal, 16
        record: every body must then be a valid record body); returns the first index
        (or the next index when `bodies` is empty)."""
        cdef tuple items = tuple(bodies)
        cdef Py_ssize_t i, k = len(items)
        cdef long long first
        cdef RecView r
        cdef int err, kind
        cdef long long asked = _whole(magic)
        self._check_writable()
        _check_append_magic(self, asked)
        kind = <int>asked
        for i in range(k):
            b = items[i]
            if type(b) is not bytes:
                raise TypeError("bodies must be bytes")
            self._check_size(DL_HEADER_SIZE + PyBytes_GET_SIZE(b))
            if kind == DL_MAGIC_RECORD:
                err = _rec_parse(<const unsigned char *>PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b), &r)
                if err:
                    raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "body %d: %s (nothing was appended)"
                                       % (i, _rec_error(err, r.at, PyBytes_GET_SIZE(b))))
        self._lock()
        try:
            self._check_writable()
            first = self.end_index + 1
            try:
                for i in range(k):
                    b = items[i]
                    self._append_one(<const unsigned char *>PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b), kind)
            finally:
                _flush_stage(self)
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
        self._check_writable()
        PyObject_GetBuffer(run, &view, PyBUF_SIMPLE)
        self._lock()
        try:
            self._check_writable()
            _check_run(self, <const unsigned char *>view.buf, view.len)
            return _write_run(self, <const unsigned char *>view.buf, view.len)
        finally:
            self._unlock()
            PyBuffer_Release(&view)

    # -- read path (the reads themselves are in _core_read.pxi)

    @cython.binding(False)
    def get(self, idx) -> Entry:
        """The entry at `idx` (raises DLedgerError INDEX_OUT_OF_RANGE outside the log)."""
        cdef long long at = _whole(idx)
        if not self.exclusive:
            return _read(self, at, True)  # under the GIL alone: see get_body
        self._lock()
        try:
            return _read(self, at, True)
        finally:
            self._unlock()

    @cython.binding(False)
    def get_body(self, idx) -> bytes:
        """The body of the entry at `idx` (the fastest single read).

        Reads without the lock unless a multi-step change holds it: the caller holds the
        GIL, which no step of `_read` releases, and everything else that changes the
        tables or the bytes of entries up to `end_index` either holds the GIL throughout
        (appends publish an entry by moving `end_index` once its bytes are written; their
        GIL-free copies write past it) or runs between `_acquire` and `_release`."""
        cdef long long at = _whole(idx)
        if not self.exclusive:
            return _read(self, at, False)
        self._lock()
        try:
            return _read(self, at, False)
        finally:
            self._unlock()

    def term_at(self, idx) -> int:
        """Term of the entry at `idx`, read from its index unit."""
        cdef long long at = _whole(idx)
        self._lock()
        try:
            if at < self.begin_index or at > self.end_index or self.begin_index < 0:
                raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE, "index %d outside [%d, %d]" % (at, self.begin_index, self.end_index))
            u = self.index.at(at * DL_INDEX_UNIT, DL_INDEX_UNIT)
            if u == NULL:
                raise DLedgerError(ResponseCode.DISK_ERROR, "index unit %d is not mapped" % at)
            return dl_get64(u + DL_IDX_OFF_TERM)
        finally:
            self._unlock()

    def read_run(self, long long from_index, long long max_bytes) -> tuple:
        """Already-encoded entries from `from_index` on, as one bytes object: at least one
        entry, then more while the total stays within `max_bytes`, all from one data
        segment and none above `end_index`. Returns (bytes, count)."""
        self._lock()
        try:
            return _read_run(self, from_index, max_bytes)
        finally:
            self._unlock()

    def read_columns(self, from_index, max_count, max_bytes) -> tuple:
        """Column-wise batch from `from_index`: (count, index, term, pos, offsets, bodies,
        magic) where index/term/pos are native int64 bytearrays, offsets native int32 with
        count+1 values (Arrow's binary layout), bodies one bytearray and magic native
        int32 (1 normal, 2 NOOP). Stops at `end_index`, after `max_count` entries or once
        bodies exceed `max_bytes` (at least one entry is returned when `from_index` is in
        range)."""
        self._lock()
        try:
            return _read_columns(self, _whole(from_index), _whole(max_count), _whole(max_bytes))
        finally:
            self._unlock()

    def read_records(self, from_index, max_count, max_bytes) -> tuple:
        """The entries `read_columns` would return, with their record columns instead of
        their bodies: (count, index, term, pos, magic, record columns as `split_records`
        returns them), the fields copied straight from the data file (no bodies column
        in between). ValueError names a record entry whose body is not a valid record."""
        self._lock()
        try:
            return _read_records(self, _whole(from_index), _whole(max_count), _whole(max_bytes))
        finally:
            self._unlock()

    # -- recovery support (the walks are in _core_scan.pxi; the caller holds the lock)

    def scan(self, long long start, long long prev_index, long long prev_term, bint check_crc,
             bint check_index) -> ScanResult:
        """Walk entries from data position `start` across segments, validating headers
        the way recovery does. `prev_index` = -1 accepts any first index.

        Returns a `ScanResult` (dledger/entry.py): the walk stopped at data position
        stop_pos for stop_reason (a STOP_* code) after entry_count entries, first_index
        to last_index (of last_term); mismatch_index is the first index whose unit
        disagrees with the data (-1 when all agree or `check_index` is false) and
        mismatch_pos its data position; last_end is where the last entry ends (-1
        without entries), before stop_pos when a blank follows it.
        """
        return _scan(self, start, prev_index, prev_term, check_crc, check_index)

    def write_units(self, long long start, long long from_index, long long to_index) -> None:
        """Rewrite index units for entries from_index..to_index walking the data from
        position `start` (the data position of from_index). Caller holds the lock."""
        _write_units(self, start, from_index, to_index)

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
        return _unit_conflicts(self, start, from_index, to_index, prev_term, prev_end)
