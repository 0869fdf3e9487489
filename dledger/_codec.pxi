# Included by dledger/_store.pyx (one extension module): entry and index-unit codecs,
# CRC helpers. The on-disk layout is native/dl_layout.h.
# Uses the C declarations of _store.pxd and the constants of _store.pyx.

def crc32(data, uint32_t value=0) -> int:
    """CRC-32 of `data` (the values of zlib and java.util.zip.CRC32); with `value`, the
    CRC-32 of earlier bytes continued over `data` (as `zlib.crc32(data, value)`)."""
    cdef Py_buffer view
    cdef uint32_t c
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            if value == 0:
                c = dl_crc32(<const unsigned char *>view.buf, <size_t>view.len)
            else:
                c = dl_crc32_update(value, <const unsigned char *>view.buf, <size_t>view.len)
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


cdef inline long long _whole(object value) except? -1:
    """An index, count, size or timestamp given to the public API, as a C integer: an
    int or what has `__index__` (numpy integers); a float or a str is a TypeError, as in
    Python's own indexing (a C-typed argument converts 1.9 to 1 silently). A value past
    int64 becomes int64's end on its side, which every caller's range check refuses or
    takes as "no limit" (an index of 2**63 is outside the log, not an OverflowError)."""
    if not PyLong_CheckExact(value):
        value = PyNumber_Index(value)
    try:
        return value
    except OverflowError:
        return LLONG_MAX if value > 0 else LLONG_MIN
