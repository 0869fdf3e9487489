# Included by dledger/_store.pyx (one extension module), after _record.pxi, whose parser
# it uses: `split_records` and the record columns of a column batch in Arrow's layouts
# (values, keys, timestamps, headers), built in C: pass 1 parses every body, pass 2
# copies the fields. `LogCore.read_records` (_core_read.pxi) copies values and keys in
# its pass 1 (`_row_copy`), and leaves pass 2 the headers.

cdef inline void _set_bit(unsigned char *bits, Py_ssize_t k) noexcept nogil:
    bits[k >> 3] |= <unsigned char>(1 << (k & 7))


cdef struct BodyRefs:
    # Where a batch's bodies are: one buffer and count + 1 offsets into it (`base`,
    # `off`), or one pointer and length per body (`ptr`, `len`: bodies read in place
    # from the data file).
    const unsigned char *base
    const int32_t *off
    const unsigned char **ptr
    const int32_t *len


cdef inline const unsigned char *_body_at(const BodyRefs *refs, Py_ssize_t k, Py_ssize_t *n) noexcept nogil:
    """Body k of `refs` and, in n, its length."""
    if refs.ptr != NULL:
        n[0] = refs.len[k]
        return refs.ptr[k]
    n[0] = refs.off[k + 1] - refs.off[k]
    return refs.base + refs.off[k]


def split_records(Py_ssize_t count, offsets, bodies, magic) -> tuple:
    """Record columns of a column batch, in Arrow's layouts, built in C.

    `offsets` (count + 1 native int32), `bodies` and `magic` (count native int32, or
    empty: every entry normal) are a batch's columns. Returns (value offsets, values,
    key offsets, keys, key validity bitmap, timestamps (native int64, -1 for entries
    that are not records), timestamp validity bitmap, header list offsets (count + 1),
    header key offsets, header keys, header value offsets, header values); bitmaps are
    Arrow's (LSB first, 1 = present). A plain entry reads as a record with no key, no
    timestamp, no headers and its body as value; without record entries the values are
    `offsets` and `bodies` themselves. ValueError names the first bad record.
    """
    cdef Py_buffer vo, vb, vm
    cdef BodyRefs refs
    cdef Py_ssize_t k
    PyObject_GetBuffer(offsets, &vo, PyBUF_SIMPLE)
    PyObject_GetBuffer(bodies, &vb, PyBUF_SIMPLE)
    PyObject_GetBuffer(magic, &vm, PyBUF_SIMPLE)
    try:
        if count < 0 or vo.len < (count + 1) * 4 or (vm.len != 0 and vm.len < count * 4):
            raise ValueError("split_records: columns shorter than %d entries" % count)
        refs.base = <const unsigned char *>vb.buf
        refs.off = <const int32_t *>vo.buf
        refs.ptr = NULL
        refs.len = NULL
        for k in range(count + 1):
            if refs.off[k] < 0 or refs.off[k] > vb.len or (k > 0 and refs.off[k] < refs.off[k - 1]):
                raise ValueError("split_records: offset %d out of order or past the bodies" % k)
        return _split(count, &refs, <const int32_t *>vm.buf if vm.len else NULL, offsets, bodies)
    finally:
        PyBuffer_Release(&vm)
        PyBuffer_Release(&vb)
        PyBuffer_Release(&vo)


cdef struct RecRows:
    # Pass 1's output: the columns of one row per entry, and the sizes of the others.
    int32_t *val_off
    int32_t *key_off
    unsigned char *key_valid
    int64_t *stamps
    unsigned char *stamp_valid
    int32_t *hdr_off
    Py_ssize_t nrec, tv, tk, th, thk, thv


cdef tuple _row_columns(Py_ssize_t count, RecRows *rows):
    """Allocate the per-row columns of `count` entries and point `rows` at them: (value
    offsets, key offsets, key validity, timestamps, timestamp validity, header list
    offsets)."""
    cdef Py_ssize_t nbits = (count + 7) >> 3
    out = (PyByteArray_FromStringAndSize(NULL, (count + 1) * 4), PyByteArray_FromStringAndSize(NULL, (count + 1) * 4),
           PyByteArray_FromStringAndSize(NULL, nbits), PyByteArray_FromStringAndSize(NULL, count * 8),
           PyByteArray_FromStringAndSize(NULL, nbits), PyByteArray_FromStringAndSize(NULL, (count + 1) * 4))
    rows.val_off = <int32_t *>PyByteArray_AS_STRING(out[0])
    rows.key_off = <int32_t *>PyByteArray_AS_STRING(out[1])
    rows.key_valid = <unsigned char *>PyByteArray_AS_STRING(out[2])
    rows.stamps = <int64_t *>PyByteArray_AS_STRING(out[3])
    rows.stamp_valid = <unsigned char *>PyByteArray_AS_STRING(out[4])
    rows.hdr_off = <int32_t *>PyByteArray_AS_STRING(out[5])
    memset(rows.key_valid, 0, nbits)
    memset(rows.stamp_valid, 0, nbits)
    rows.val_off[0] = rows.key_off[0] = rows.hdr_off[0] = 0
    rows.nrec = rows.tv = rows.tk = rows.th = rows.thk = rows.thv = 0
    return out


cdef inline int _row(RecRows *rows, Py_ssize_t k, const unsigned char *b, Py_ssize_t n, bint record,
                     RecView *r) noexcept nogil:
    """Pass 1 for entry k (body b[0:n]): validate a record, fill row k of `rows` and
    count the sizes of the other columns. Returns REC_OK or the error (`r.at`: where)."""
    cdef int err
    if not record:
        rows.stamps[k] = -1
        rows.tv += n
    else:
        err = _rec_parse(b, n, r)
        if err:
            return err
        rows.nrec += 1
        rows.stamps[k] = r.timestamp
        _set_bit(rows.stamp_valid, k)
        if r.key_off >= 0:
            rows.tk += r.key_len
            _set_bit(rows.key_valid, k)
        rows.tv += n - r.value_off
        rows.th += r.hcount
        rows.thk += r.hkey_bytes
        rows.thv += r.hval_bytes
    rows.val_off[k + 1] = <int32_t>rows.tv
    rows.key_off[k + 1] = <int32_t>rows.tk
    rows.hdr_off[k + 1] = <int32_t>rows.th
    return REC_OK


cdef inline int _row_copy(RecRows *rows, Py_ssize_t k, const unsigned char *b, Py_ssize_t n, bint record,
                          RecView *r, unsigned char *vals, unsigned char *keys) noexcept nogil:
    """`_row`, then copy entry k's value and key out while its body is in the CPU's cache
    (into buffers as large as all the bodies: `_field_buffers`)."""
    cdef Py_ssize_t vlen, klen
    cdef int err = _row(rows, k, b, n, record, r)
    if err:
        return err
    vlen = rows.val_off[k + 1] - rows.val_off[k]
    memcpy(vals + rows.val_off[k], b + n - vlen, vlen)
    klen = rows.key_off[k + 1] - rows.key_off[k]
    if klen:
        memcpy(keys + rows.key_off[k], b + r.key_off, klen)
    return REC_OK


cdef tuple _field_buffers(Py_ssize_t body_bytes):
    """The values and keys buffers `_row_copy` fills for bodies of `body_bytes` in all
    (a bound of both; `_cut_fields` cuts them to size)."""
    return PyByteArray_FromStringAndSize(NULL, body_bytes), PyByteArray_FromStringAndSize(NULL, body_bytes)


cdef tuple _cut_fields(tuple fields, const RecRows *rows):
    """The buffers of `_field_buffers`, cut to the values and keys pass 1 copied."""
    PyByteArray_Resize(fields[0], rows.tv)
    PyByteArray_Resize(fields[1], rows.tk)
    return fields


cdef inline Py_ssize_t _key_start(const unsigned char *b, Py_ssize_t key_len) noexcept nogil:
    """Where the key of length `key_len` starts in the valid record body b: after the
    version byte (and a stamp), the timestamp and the minimal varint key_len + 1."""
    cdef Py_ssize_t at = (DL_REC_STAMP_SIZE if b[0] == DL_REC_STAMPED else 0) + REC_FIXED + 1
    cdef Py_ssize_t v = (key_len + 1) >> 7
    while v:
        at += 1
        v >>= 7
    return at


cdef tuple _split(Py_ssize_t count, const BodyRefs *refs, const int32_t *mg, object same_offsets,
                  object same_bodies):
    """The record columns of `count` bodies (`split_records`' tuple): pass 1 over every
    body, then `_finish`. When no entry is a record the values are `same_offsets` and
    `same_bodies` (no copy). A bad record is a ValueError naming its place in the batch.
    (Copying values and keys in pass 1, as `LogCore.read_records` does from the data
    file, gains nothing here: pass 2 reads one buffer in order, which the CPU prefetches.)"""
    cdef RecRows rows
    cdef RecView r
    cdef Py_ssize_t k, n
    cdef const unsigned char *b
    cdef int err
    row_cols = _row_columns(count, &rows)
    for k in range(count):
        b = _body_at(refs, k, &n)
        err = _row(&rows, k, b, n, mg != NULL and mg[k] == DL_MAGIC_RECORD, &r)
        if err:
            raise ValueError("entry %d of the batch: %s" % (k, _rec_error(err, r.at, n)))
    if rows.nrec:
        return _finish(count, refs, mg, &rows, row_cols, True)
    return (same_offsets, same_bodies) + _finish(count, refs, mg, &rows, row_cols, False)[2:]


cdef tuple _finish(Py_ssize_t count, const BodyRefs *refs, const int32_t *mg, RecRows *rows, tuple row_cols,
                   bint copy_values, tuple copied=None):
    """Pass 2, after pass 1 (`_row`) over every entry: allocate and fill the variable
    columns (values only with `copy_values`; only the headers when pass 1 `copied` the
    values and keys); `split_records`' tuple."""
    cdef bint fields = copied is None
    vals, keys = (PyByteArray_FromStringAndSize(NULL, rows.tv if copy_values else 0),
                  PyByteArray_FromStringAndSize(NULL, rows.tk)) if fields else copied
    hk_off = PyByteArray_FromStringAndSize(NULL, (rows.th + 1) * 4)
    hkeys = PyByteArray_FromStringAndSize(NULL, rows.thk)
    hv_off = PyByteArray_FromStringAndSize(NULL, (rows.th + 1) * 4)
    hvals = PyByteArray_FromStringAndSize(NULL, rows.thv)
    (<int32_t *>PyByteArray_AS_STRING(hk_off))[0] = (<int32_t *>PyByteArray_AS_STRING(hv_off))[0] = 0
    if fields or rows.th:
        _copy_fields(count, refs, mg, rows,
                     <unsigned char *>PyByteArray_AS_STRING(vals) if copy_values and fields else NULL,
                     <unsigned char *>PyByteArray_AS_STRING(keys) if fields else NULL,
                     <int32_t *>PyByteArray_AS_STRING(hk_off), <unsigned char *>PyByteArray_AS_STRING(hkeys),
                     <int32_t *>PyByteArray_AS_STRING(hv_off), <unsigned char *>PyByteArray_AS_STRING(hvals))
    return (row_cols[0], vals, row_cols[1], keys, row_cols[2], row_cols[3], row_cols[4], row_cols[5],
            hk_off, hkeys, hv_off, hvals)


cdef void _copy_fields(Py_ssize_t count, const BodyRefs *refs, const int32_t *mg, const RecRows *rows,
                       unsigned char *vals, unsigned char *keys, int32_t *hk_off, unsigned char *hkeys,
                       int32_t *hv_off, unsigned char *hvals) noexcept nogil:
    """Copy the values and keys (unless NULL) and headers of bodies pass 1 validated,
    where its offsets say."""
    cdef Py_ssize_t k, i, n, at, klen, koff = 0, hklen = 0, voff = 0, vlen = 0, th = 0, thk = 0, thv = 0
    cdef const unsigned char *b
    cdef RecView r
    hk_off[0] = 0
    hv_off[0] = 0
    for k in range(count):
        b = _body_at(refs, k, &n)
        if vals != NULL:
            vlen = rows.val_off[k + 1] - rows.val_off[k]
            memcpy(vals + rows.val_off[k], b + n - vlen, vlen)
        klen = rows.key_off[k + 1] - rows.key_off[k]
        if klen and keys != NULL:
            memcpy(keys + rows.key_off[k], b + _key_start(b, klen), klen)
        if rows.hdr_off[k + 1] == rows.hdr_off[k]:
            continue
        _rec_parse(b, n, &r)
        at = r.headers_off
        for i in range(r.hcount):
            _rec_header(b, n, &at, &koff, &hklen, &voff, &vlen)
            memcpy(hkeys + thk, b + koff, hklen)
            thk += hklen
            memcpy(hvals + thv, b + voff, vlen)
            thv += vlen
            th += 1
            hk_off[th] = <int32_t>thk
            hv_off[th] = <int32_t>thv
