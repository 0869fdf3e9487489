# Included by dledger/_store.pyx (one extension module): the reads of `LogCore`, as C
# functions its methods call: single entries (`get`, `get_body`; the lock or the GIL
# alone, see `LogCore.get_body`), runs of encoded entries (`read_run`, the leader's
# catch-up read) and column batches (`read_columns`, Spark), with the lock held.
# Uses the C declarations of _store.pxd, the codecs of _codec.pxi and `LogCore`.

# -- single entries

cdef const unsigned char *_locate(LogCore core, long long idx, long long *pos, long long *size) except NULL:
    """Data pointer of entry `idx` (caller holds the lock)."""
    if idx < core.begin_index or idx > core.end_index or core.begin_index < 0:
        raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE,
                           "index %d outside [%d, %d]" % (idx, core.begin_index, core.end_index))
    cdef unsigned char *u = core.index.at(idx * DL_INDEX_UNIT, DL_INDEX_UNIT)
    if u == NULL:
        raise DLedgerError(ResponseCode.DISK_ERROR, "index unit %d is not mapped" % idx)
    pos[0] = dl_get64(u + DL_IDX_OFF_POS)
    size[0] = dl_get32(u + DL_IDX_OFF_SIZE)
    cdef unsigned char *p = core.data.at(pos[0], size[0]) if size[0] >= DL_HEADER_SIZE else NULL
    if p == NULL or dl_get64(p + DL_OFF_INDEX) != idx or dl_get32(p + DL_OFF_SIZE) != size[0]:
        raise DLedgerError(ResponseCode.DISK_ERROR, "entry %d does not match its index unit (pos %d)" % (idx, pos[0]))
    cdef int32_t crc = dl_get32(p + DL_OFF_BODY_CRC)
    if crc != 0 and core.verify_crc and _crc_field(p + DL_HEADER_SIZE, size[0] - DL_HEADER_SIZE) != crc:
        raise DLedgerError(ResponseCode.DISK_ERROR, "body CRC mismatch for entry %d at pos %d" % (idx, pos[0]))
    return p


cdef object _read(LogCore core, long long idx, bint entry):
    """The body of entry `idx` (its Entry when `entry`). The CRC is checked on the
    copy returned. Caller holds the lock, or reads under the GIL alone (see get_body)."""
    cdef long long pos, size
    cdef const unsigned char *p
    cdef unsigned char *u
    cdef int32_t crc
    if idx < core.begin_index or idx > core.end_index or core.begin_index < 0:
        raise DLedgerError(ResponseCode.INDEX_OUT_OF_RANGE,
                           "index %d outside [%d, %d]" % (idx, core.begin_index, core.end_index))
    u = core.index.at(idx * DL_INDEX_UNIT, DL_INDEX_UNIT)
    if u == NULL:
        raise DLedgerError(ResponseCode.DISK_ERROR, "index unit %d is not mapped" % idx)
    pos = dl_get64(u + DL_IDX_OFF_POS)
    size = dl_get32(u + DL_IDX_OFF_SIZE)
    p = core.data.at(pos, size) if size >= DL_HEADER_SIZE else NULL
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
    if crc != 0 and core.verify_crc and \
            _crc_field(<const unsigned char *>PyBytes_AS_STRING(body), size - DL_HEADER_SIZE) != crc:
        raise DLedgerError(ResponseCode.DISK_ERROR, "body CRC mismatch for entry %d at pos %d" % (idx, pos))
    if entry:
        return Entry(idx, dl_get64(p + DL_OFF_TERM), pos, dl_get32(p + DL_OFF_MAGIC), body, crc)
    return body


# -- runs of encoded entries (catch-up reads)

cdef tuple _read_run(LogCore core, long long from_index, long long max_bytes):
    """`LogCore.read_run`: (bytes of the run, entry count)."""
    cdef long long pos, size, start, cur, idx
    cdef const unsigned char *p
    cdef unsigned char *q
    p = _locate(core, from_index, &pos, &size)
    start = pos
    cur = pos + size
    idx = from_index
    while idx < core.end_index:
        q = core.data.at(cur, DL_HEADER_SIZE)
        if q == NULL or dl_get32(q) == DL_MAGIC_BLANK:
            break
        size = dl_get32(q + DL_OFF_SIZE)
        if cur + size - start > max_bytes or dl_get64(q + DL_OFF_INDEX) != idx + 1 or size < DL_HEADER_SIZE:
            break
        cur += size
        idx += 1
    return PyBytes_FromStringAndSize(<const char *>p, cur - start), idx - from_index + 1


# -- column batches

cdef long long _column_span(LogCore core, long long from_index, long long max_count, long long max_bytes,
                            long long *body_bytes) except -1:
    """How many entries from `from_index` (in range) one column batch takes: up to
    `max_count`, none past `end_index`, bodies within `max_bytes` (at least one); their
    body bytes in `body_bytes`."""
    cdef long long n = 0, total = 0, idx = from_index, size
    cdef long long last = min(core.end_index, from_index + max_count - 1)
    cdef unsigned char *u
    while idx <= last:
        u = core.index.at(idx * DL_INDEX_UNIT, DL_INDEX_UNIT)
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
    body_bytes[0] = total
    return n


cdef tuple _read_columns(LogCore core, long long from_index, long long max_count, long long max_bytes):
    """`LogCore.read_columns`: (count, index, term, pos, offsets, bodies, magic)."""
    cdef long long n, total = 0, pos, size, k
    cdef const unsigned char *p
    cdef MetaRows meta
    if max_count <= 0 or from_index > core.end_index:
        return (0, bytearray(), bytearray(), bytearray(), bytearray(4), bytearray(), bytearray())
    _locate(core, from_index, &pos, &size)
    n = _column_span(core, from_index, max_count, max_bytes, &total)
    a_i, a_t, a_p, a_m = _meta_columns(n, &meta)
    a_o = PyByteArray_FromStringAndSize(NULL, (n + 1) * 4)
    a_b = PyByteArray_FromStringAndSize(NULL, total)
    cdef int32_t *co = <int32_t *>PyByteArray_AS_STRING(a_o)
    cdef char *cb = PyByteArray_AS_STRING(a_b)
    co[0] = 0
    total = 0
    for k in range(n):
        p = _locate(core, from_index + k, &pos, &size)
        _meta_at(&meta, k, from_index + k, pos, p)
        memcpy(cb + total, p + DL_HEADER_SIZE, size - DL_HEADER_SIZE)
        total += size - DL_HEADER_SIZE
        co[k + 1] = <int32_t>total
    return (n, a_i, a_t, a_p, a_o, a_b, a_m)


cdef tuple _read_records(LogCore core, long long from_index, long long max_count, long long max_bytes):
    """`LogCore.read_records`: (count, index, term, pos, magic, record columns). Each
    record is parsed, and its key and value copied out, right after `_locate` has read
    it for its CRC (while it is in the CPU's cache): the values and keys buffers start
    at the batch's body bytes (a bound of both) and are cut to size after. Headers, when
    a record has some, are copied in a second pass (`_finish`)."""
    cdef long long n, total, pos, size, k
    cdef Py_ssize_t blen
    cdef const unsigned char *p
    cdef unsigned char *cv
    cdef unsigned char *ck
    cdef MetaRows meta
    cdef BodyRefs refs
    cdef RecRows rows
    cdef RecView r
    cdef int err
    if max_count <= 0 or from_index > core.end_index:
        return (0, bytearray(), bytearray(), bytearray(), bytearray(), split_records(0, bytearray(4), b"", b""))
    _locate(core, from_index, &pos, &size)
    n = _column_span(core, from_index, max_count, max_bytes, &total)
    a_i, a_t, a_p, a_m = _meta_columns(n, &meta)
    row_cols = _row_columns(n, &rows)
    fields = _field_buffers(total)
    cv = <unsigned char *>PyByteArray_AS_STRING(fields[0])
    ck = <unsigned char *>PyByteArray_AS_STRING(fields[1])
    refs.base = NULL
    refs.off = NULL
    refs.ptr = <const unsigned char **>PyMem_Malloc(n * sizeof(const unsigned char *))
    refs.len = <const int32_t *>PyMem_Malloc(n * sizeof(int32_t))
    try:
        if refs.ptr == NULL or refs.len == NULL:
            raise MemoryError()
        for k in range(n):
            p = _locate(core, from_index + k, &pos, &size)
            _meta_at(&meta, k, from_index + k, pos, p)
            blen = size - DL_HEADER_SIZE
            refs.ptr[k] = p + DL_HEADER_SIZE
            (<int32_t *>refs.len)[k] = <int32_t>blen
            err = _row_copy(&rows, k, p + DL_HEADER_SIZE, blen, meta.magic[k] == DL_MAGIC_RECORD, &r, cv, ck)
            if err:
                raise ValueError("entry %d: %s" % (from_index + k, _rec_error(err, r.at, blen)))
        return (n, a_i, a_t, a_p, a_m, _finish(n, &refs, meta.magic, &rows, row_cols, True, _cut_fields(fields, &rows)))
    finally:
        PyMem_Free(refs.ptr)
        PyMem_Free(<void *>refs.len)


cdef struct MetaRows:
    # The index, term, pos and magic columns of a column batch, one row per entry.
    int64_t *index
    int64_t *term
    int64_t *pos
    int32_t *magic


cdef tuple _meta_columns(long long n, MetaRows *meta):
    """Allocate the index, term, pos (int64) and magic (int32) columns of n entries,
    uninitialized, and point `meta` at them."""
    out = (PyByteArray_FromStringAndSize(NULL, n * 8), PyByteArray_FromStringAndSize(NULL, n * 8),
           PyByteArray_FromStringAndSize(NULL, n * 8), PyByteArray_FromStringAndSize(NULL, n * 4))
    meta.index = <int64_t *>PyByteArray_AS_STRING(out[0])
    meta.term = <int64_t *>PyByteArray_AS_STRING(out[1])
    meta.pos = <int64_t *>PyByteArray_AS_STRING(out[2])
    meta.magic = <int32_t *>PyByteArray_AS_STRING(out[3])
    return out


cdef inline void _meta_at(MetaRows *meta, long long k, long long idx, long long pos,
                          const unsigned char *p) noexcept nogil:
    """Row k of `meta`: entry `idx` at data position `pos`, its header at p."""
    meta.index[k] = idx
    meta.term[k] = dl_get64(p + DL_OFF_TERM)
    meta.pos[k] = pos
    meta.magic[k] = dl_get32(p + DL_OFF_MAGIC)
