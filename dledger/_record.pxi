# Included by dledger/_store.pyx (one extension module): the record codec's reader (the body of
# a magic-16 entry: version, timestamp, key, headers, value; docs/FORMAT.md "Records";
# a version-2 body carries a 36-byte stamp after its version byte, which readers skip).
# Every read is bounds-checked against the body's length: a truncated or lying record is
# a ValueError, never an over-read. The record columns of a batch are built in
# _record_columns.pxi, and the writer is _record_write.pxi.
# Uses the C declarations of _store.pxd.

from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8

cdef enum:
    REC_OK = 0
    REC_E_TRUNCATED = 1
    REC_E_VERSION = 2
    REC_E_TIMESTAMP = 3
    REC_E_VARINT = 4
    REC_E_KEY = 5
    REC_E_HEADERS = 6
    REC_E_HEADER_KEY = 7
    REC_E_UTF8 = 8
    REC_E_TRAILING = 9
    REC_E_STAMP_TRUNCATED = 10
    REC_E_STAMP_NEGATIVE = 11
    REC_E_STAMP_COUNT = 12

cdef enum:
    REC_FIXED = 9  # version byte + int64 timestamp

_REC_ERRORS = (
    "",
    "truncated",
    "unsupported record version",
    "negative timestamp",
    "bad varint (over 2^31 - 1, or not minimal)",
    "key over %d bytes" % DL_REC_MAX_KEY,
    "more than %d headers" % DL_REC_MAX_HEADERS,
    "header key over %d bytes" % DL_REC_MAX_HEADER_KEY,
    "header key is not UTF-8",
    "bytes after the value",
    "truncated stamp",
    "negative stamp field",
    "stamp count not in 1..%d" % DL_REC_MAX_STAMP_COUNT,
)


cdef struct RecView:
    int64_t timestamp
    Py_ssize_t key_off      # -1: no key
    Py_ssize_t key_len
    Py_ssize_t hcount
    Py_ssize_t headers_off  # where the first header starts
    Py_ssize_t hkey_bytes   # header key bytes, all headers
    Py_ssize_t hval_bytes   # header value bytes, all headers
    Py_ssize_t value_off    # the value runs from here to the end of the body
    Py_ssize_t at           # where parsing stopped (the error position)


cdef inline int _varint(const unsigned char *b, Py_ssize_t n, Py_ssize_t *at, Py_ssize_t *out) noexcept nogil:
    """Unsigned LEB128 at b[at[0]], at most 5 bytes, value <= 2^31 - 1, minimal."""
    cdef uint32_t v = 0
    cdef int shift = 0
    cdef unsigned char c
    cdef Py_ssize_t i = at[0]
    while True:
        if i >= n:
            return REC_E_TRUNCATED
        c = b[i]
        i += 1
        if shift == 28 and c > 7:
            return REC_E_VARINT
        v |= (<uint32_t>(c & 0x7F)) << shift
        if c < 0x80:
            if c == 0 and shift > 0:
                return REC_E_VARINT
            break
        shift += 7
    at[0] = i
    out[0] = <Py_ssize_t>v
    return REC_OK


cdef inline int _utf8_ok(const unsigned char *s, Py_ssize_t n) noexcept nogil:
    """1 when s[0:n] is strict UTF-8 (no overlongs, surrogates or code points over
    U+10FFFF: what Python's bytes.decode accepts)."""
    cdef Py_ssize_t i = 0
    cdef unsigned char c, c1
    cdef int extra
    while i < n:
        c = s[i]
        if c < 0x80:
            i += 1
            continue
        if 0xC2 <= c <= 0xDF:
            extra = 1
        elif 0xE0 <= c <= 0xEF:
            extra = 2
        elif 0xF0 <= c <= 0xF4:
            extra = 3
        else:
            return 0
        if i + extra >= n:
            return 0
        c1 = s[i + 1]
        if (c1 & 0xC0) != 0x80:
            return 0
        if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F) or (c == 0xF0 and c1 < 0x90) \
                or (c == 0xF4 and c1 > 0x8F):
            return 0
        if extra >= 2 and (s[i + 2] & 0xC0) != 0x80:
            return 0
        if extra == 3 and (s[i + 3] & 0xC0) != 0x80:
            return 0
        i += extra + 1
    return 1


cdef inline int _rec_header(const unsigned char *b, Py_ssize_t n, Py_ssize_t *at, Py_ssize_t *koff,
                            Py_ssize_t *klen, Py_ssize_t *voff, Py_ssize_t *vlen) noexcept nogil:
    """Parse one header at b[at[0]]; checks bounds, the key limit and UTF-8."""
    cdef int err = _varint(b, n, at, klen)
    if err:
        return err
    if klen[0] > DL_REC_MAX_HEADER_KEY:
        return REC_E_HEADER_KEY
    if klen[0] > n - at[0]:
        return REC_E_TRUNCATED
    if not _utf8_ok(b + at[0], klen[0]):
        return REC_E_UTF8
    koff[0] = at[0]
    at[0] += klen[0]
    err = _varint(b, n, at, vlen)
    if err:
        return err
    if vlen[0] > n - at[0]:
        return REC_E_TRUNCATED
    voff[0] = at[0]
    at[0] += vlen[0]
    return REC_OK


cdef int _rec_stamp(const unsigned char *b, Py_ssize_t n, Py_ssize_t *at) noexcept nogil:
    """Validate the stamp of the version-2 body b[0:n] (`at`: where a fault is)."""
    cdef uint32_t count
    cdef Py_ssize_t f
    if n < 1 + DL_REC_STAMP_SIZE:
        at[0] = 1
        return REC_E_STAMP_TRUNCATED
    for f in range(4):  # producer id, epoch, first seq at 1, 9, 17; append time at 29
        at[0] = 1 + 8 * f + (4 if f == 3 else 0)
        if dl_get64(b + at[0]) < 0:
            return REC_E_STAMP_NEGATIVE
    at[0] = 25
    count = <uint32_t>dl_get32(b + 25)
    if count < 1 or count > DL_REC_MAX_STAMP_COUNT:
        return REC_E_STAMP_COUNT
    return REC_OK


cdef int _rec_parse(const unsigned char *b, Py_ssize_t n, RecView *r) noexcept nogil:
    """Parse and validate the record body b[0:n] into `r` (REC_OK or an error code;
    `r.at` is where parsing stopped). A stamped (version 2) body is validated as its
    stamp, then read as the version-1 body that follows it (offsets stay the body's)."""
    cdef Py_ssize_t k, i, koff, klen, voff, vlen, base = 0
    cdef int err
    r.at = 0
    if n < 1:
        return REC_E_TRUNCATED
    if b[0] != DL_REC_VERSION:
        if b[0] != DL_REC_STAMPED:
            return REC_E_VERSION
        err = _rec_stamp(b, n, &r.at)
        if err:
            return err
        base = DL_REC_STAMP_SIZE
        r.at = base + 1
    if n < base + REC_FIXED:
        return REC_E_TRUNCATED
    r.timestamp = dl_get64(b + base + 1)
    if r.timestamp < 0:
        return REC_E_TIMESTAMP
    r.at = base + REC_FIXED
    err = _varint(b, n, &r.at, &k)
    if err:
        return err
    r.key_off = -1
    r.key_len = 0
    if k > 0:
        if k - 1 > DL_REC_MAX_KEY:
            return REC_E_KEY
        if k - 1 > n - r.at:
            return REC_E_TRUNCATED
        r.key_off = r.at
        r.key_len = k - 1
        r.at += k - 1
    err = _varint(b, n, &r.at, &r.hcount)
    if err:
        return err
    if r.hcount > DL_REC_MAX_HEADERS:
        return REC_E_HEADERS
    r.headers_off = r.at
    r.hkey_bytes = 0
    r.hval_bytes = 0
    for i in range(r.hcount):
        err = _rec_header(b, n, &r.at, &koff, &klen, &voff, &vlen)
        if err:
            return err
        r.hkey_bytes += klen
        r.hval_bytes += vlen
    err = _varint(b, n, &r.at, &vlen)
    if err:
        return err
    if vlen > n - r.at:
        return REC_E_TRUNCATED
    if vlen < n - r.at:
        return REC_E_TRAILING
    r.value_off = r.at
    return REC_OK


cdef _rec_error(int err, Py_ssize_t at, Py_ssize_t n):
    return ValueError("bad record body (%d bytes): %s at byte %d" % (n, _REC_ERRORS[err], at))


def decode_record(body) -> tuple:
    """Decode a record body: (timestamp, key or None, [(header key, value), ...], value).
    ValueError when it is truncated, lies about a length or breaks a limit."""
    cdef Py_buffer view
    cdef RecView r
    cdef int err
    cdef const unsigned char *b
    cdef Py_ssize_t i, at, koff = 0, klen = 0, voff = 0, vlen = 0
    PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
    try:
        b = <const unsigned char *>view.buf
        err = _rec_parse(b, view.len, &r)
        if err:
            raise _rec_error(err, r.at, view.len)
        key = None if r.key_off < 0 else PyBytes_FromStringAndSize(<const char *>b + r.key_off, r.key_len)
        headers = []
        at = r.headers_off
        for i in range(r.hcount):
            _rec_header(b, view.len, &at, &koff, &klen, &voff, &vlen)
            headers.append((PyUnicode_DecodeUTF8(<const char *>b + koff, klen, NULL),
                            PyBytes_FromStringAndSize(<const char *>b + voff, vlen)))
        value = PyBytes_FromStringAndSize(<const char *>b + r.value_off, view.len - r.value_off)
        return (r.timestamp, key, headers, value)
    finally:
        PyBuffer_Release(&view)


_REFUSED_STAMPED = "stamped records (version 2) are written by the leader, not sent by clients"


def check_records(bodies, bint allow_stamped=True) -> None:
    """Validate record bodies without decoding them into objects: ValueError naming the
    first bad one ("body k: bad record body ..."). With `allow_stamped` False (a
    client's request) a stamped body (version 2) is refused."""
    cdef Py_buffer view
    cdef RecView r
    cdef int err
    cdef Py_ssize_t k = 0
    for body in bodies:
        PyObject_GetBuffer(body, &view, PyBUF_SIMPLE)
        try:
            if not allow_stamped and view.len and (<const unsigned char *>view.buf)[0] == DL_REC_STAMPED:
                raise ValueError("body %d: %s" % (k, _REFUSED_STAMPED))
            err = _rec_parse(<const unsigned char *>view.buf, view.len, &r)
            if err:
                raise ValueError("body %d: %s" % (k, _rec_error(err, r.at, view.len)))
        finally:
            PyBuffer_Release(&view)
        k += 1
