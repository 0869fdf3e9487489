# Included by dledger/_store.pyx after _record.pxi: the write side of the record codec
# (docs/FORMAT.md "Records"): `encode_record` for one record, and for a writer holding
# rows as Arrow-layout columns (the Spark sink), `encode_records`, which encodes a whole
# batch of them without per-row Python work. Every offset is checked against its
# buffer: a column that lies is a ValueError, never an over-read.
# Uses the C declarations of _store.pxd and REC_FIXED of _record.pxi.

cdef inline Py_ssize_t _varint_size(Py_ssize_t v) noexcept nogil:
    cdef Py_ssize_t s = 1
    while v >= 0x80:
        v >>= 7
        s += 1
    return s


cdef inline Py_ssize_t _put_varint(unsigned char *p, Py_ssize_t v) noexcept nogil:
    cdef Py_ssize_t i = 0
    while v >= 0x80:
        p[i] = <unsigned char>((v & 0x7F) | 0x80)
        v >>= 7
        i += 1
    p[i] = <unsigned char>v
    return i + 1


cdef long long _REC_MAX_STAMP = MAX_TIMESTAMP_MS  # ms: the most an int64 of microseconds holds


cdef inline int _check_timestamp(long long stamp, Py_ssize_t row) except -1:
    """A timestamp to encode: in [0, MAX_TIMESTAMP_MS] (row >= 0: named in the message)."""
    if 0 <= stamp <= _REC_MAX_STAMP:
        return 0
    where = "row %d: " % row if row >= 0 else ""
    if stamp < 0:
        raise ValueError("%srecord timestamp must be >= 0, got %d" % (where, stamp))
    raise ValueError("%srecord timestamp %d ms is past the last one a timestamp column holds, %d (year 294247)"
                     % (where, stamp, _REC_MAX_STAMP))


def encode_record(bytes value not None, key, timestamp, headers=()) -> bytes:
    """Encode a record body: version 1, `timestamp` (ms, >= 0), `key` (bytes or None),
    `headers` (a sequence of (str, bytes) pairs; repeats allowed, order kept) and
    `value`. ValueError when a field breaks a limit, TypeError for a wrong type."""
    cdef Py_ssize_t klen = 0, size, at, i, hcount, hklen
    cdef const char *hk
    cdef tuple hs = tuple(headers)
    cdef list hkeys = []
    cdef unsigned char *p
    cdef long long stamp = _whole(timestamp)
    _check_timestamp(stamp, -1)
    if key is not None:
        if type(key) is not bytes:
            raise TypeError("record key must be bytes or None, not %s" % type(key).__name__)
        klen = PyBytes_GET_SIZE(key)
        if klen > DL_REC_MAX_KEY:
            raise ValueError("record key is %d bytes, over the limit of %d" % (klen, DL_REC_MAX_KEY))
    hcount = len(hs)
    if hcount > DL_REC_MAX_HEADERS:
        raise ValueError("record has %d headers, over the limit of %d" % (hcount, DL_REC_MAX_HEADERS))
    size = REC_FIXED + _varint_size(klen + 1 if key is not None else 0) + klen + _varint_size(hcount)
    for i in range(hcount):
        pair = hs[i]
        if type(pair) is not tuple or len(<tuple>pair) != 2:
            raise TypeError("a record header must be a (str, bytes) pair")
        name, val = <tuple>pair
        if type(name) is not str or type(val) is not bytes:
            raise TypeError("a record header must be a (str, bytes) pair, not (%s, %s)"
                            % (type(name).__name__, type(val).__name__))
        hk = PyUnicode_AsUTF8AndSize(name, &hklen)
        if hklen > DL_REC_MAX_HEADER_KEY:
            raise ValueError("record header key is %d bytes, over the limit of %d" % (hklen, DL_REC_MAX_HEADER_KEY))
        hkeys.append(hk[:hklen])
        size += _varint_size(hklen) + hklen + _varint_size(PyBytes_GET_SIZE(val)) + PyBytes_GET_SIZE(val)
    size += _varint_size(PyBytes_GET_SIZE(value)) + PyBytes_GET_SIZE(value)
    out = PyBytes_FromStringAndSize(NULL, size)
    p = <unsigned char *>PyBytes_AS_STRING(out)
    p[0] = DL_REC_VERSION
    dl_put64(p + 1, stamp)
    at = REC_FIXED
    at += _put_varint(p + at, klen + 1 if key is not None else 0)
    if klen:
        memcpy(p + at, PyBytes_AS_STRING(key), klen)
        at += klen
    at += _put_varint(p + at, hcount)
    for i in range(hcount):
        name_bytes = <bytes>hkeys[i]
        val = (<tuple>hs[i])[1]
        at += _put_varint(p + at, PyBytes_GET_SIZE(name_bytes))
        memcpy(p + at, PyBytes_AS_STRING(name_bytes), PyBytes_GET_SIZE(name_bytes))
        at += PyBytes_GET_SIZE(name_bytes)
        at += _put_varint(p + at, PyBytes_GET_SIZE(val))
        memcpy(p + at, PyBytes_AS_STRING(val), PyBytes_GET_SIZE(val))
        at += PyBytes_GET_SIZE(val)
    at += _put_varint(p + at, PyBytes_GET_SIZE(value))
    memcpy(p + at, PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value))
    return out


cdef int _check_offsets(const int32_t *off, Py_ssize_t count, Py_ssize_t size, str what) except -1:
    """Offsets off[0..count] must be >= 0, ascending and within `size` bytes."""
    cdef Py_ssize_t k
    if count and (off[0] < 0 or off[count] > size):
        raise ValueError("%s: offsets outside the %d bytes of data" % (what, size))
    for k in range(count):
        if off[k + 1] < off[k]:
            raise ValueError("%s: offset %d is below offset %d" % (what, k + 1, k))
    return 0


def encode_records(Py_ssize_t count, value_offsets, values, key_offsets, keys, key_valid,
                   timestamps, long long now) -> list:
    """Record bodies (version 1, no headers) of `count` rows given as Arrow-layout columns:
    `value_offsets` (count + 1 native int32) into `values`; `key_offsets` (count + 1 native
    int32) into `keys`, or empty for rows without keys; `key_valid` (count bytes, 0 = no
    key), or empty when every row has its key; `timestamps` (count native int64, ms >= 0),
    or empty for `now` on every row. Each body equals `encode_record(value, key,
    timestamp)` of its row; ValueError for a column that lies, a negative timestamp or a
    key over the limit (nothing is returned then)."""
    cdef Py_buffer bufs[6]
    cdef int held = 0, i
    cdef const int32_t *voff
    cdef const int32_t *koff = NULL
    cdef const unsigned char *kval = NULL
    cdef const int64_t *ts = NULL
    cdef Py_ssize_t k, vlen, klen, size, at
    cdef long long stamp = now
    cdef bint has_key
    cdef unsigned char *p
    cdef list out = []
    try:
        for obj in (value_offsets, values, key_offsets, keys, key_valid, timestamps):
            PyObject_GetBuffer(obj, &bufs[held], PyBUF_SIMPLE)
            held += 1
        if count < 0 or bufs[0].len < (count + 1) * 4:
            raise ValueError("encode_records: value offsets shorter than %d rows" % count)
        voff = <const int32_t *>bufs[0].buf
        _check_offsets(voff, count, bufs[1].len, "encode_records: values")
        if bufs[2].len:
            if bufs[2].len < (count + 1) * 4:
                raise ValueError("encode_records: key offsets shorter than %d rows" % count)
            koff = <const int32_t *>bufs[2].buf
            _check_offsets(koff, count, bufs[3].len, "encode_records: keys")
        if bufs[4].len:
            if bufs[4].len < count:
                raise ValueError("encode_records: key validity shorter than %d rows" % count)
            kval = <const unsigned char *>bufs[4].buf
        if bufs[5].len:
            if bufs[5].len < count * 8:
                raise ValueError("encode_records: timestamps shorter than %d rows" % count)
            ts = <const int64_t *>bufs[5].buf
        if ts == NULL:
            _check_timestamp(now, -1)
        for k in range(count):
            if ts != NULL:
                stamp = ts[k]
                _check_timestamp(stamp, k)
            has_key = koff != NULL and (kval == NULL or kval[k] != 0)
            klen = koff[k + 1] - koff[k] if has_key else 0
            if klen > DL_REC_MAX_KEY:
                raise ValueError("row %d: record key is %d bytes, over the limit of %d" % (k, klen, DL_REC_MAX_KEY))
            vlen = voff[k + 1] - voff[k]
            size = REC_FIXED + _varint_size(klen + 1 if has_key else 0) + klen + 1 + _varint_size(vlen) + vlen
            body = PyBytes_FromStringAndSize(NULL, size)
            p = <unsigned char *>PyBytes_AS_STRING(body)
            p[0] = DL_REC_VERSION
            dl_put64(p + 1, stamp)
            at = REC_FIXED + _put_varint(p + REC_FIXED, klen + 1 if has_key else 0)
            if klen:
                memcpy(p + at, <const unsigned char *>bufs[3].buf + koff[k], klen)
                at += klen
            p[at] = 0  # no headers
            at += 1
            at += _put_varint(p + at, vlen)
            memcpy(p + at, <const unsigned char *>bufs[1].buf + voff[k], vlen)
            out.append(body)
        return out
    finally:
        for i in range(held):
            PyBuffer_Release(&bufs[i])
