# Included by dledger/_store.pyx (one extension module): the recovery walks of
# `LogCore` over the data table, as C functions its methods call: `scan` validates the
# log the way recovery does, `write_units` rebuilds index units from the data,
# `unit_conflicts` finds units that describe another entry. The caller holds the lock.
# Uses the C declarations of _store.pxd, the codecs of _codec.pxi and `LogCore`.

cdef int _entry_stop(const unsigned char *p, long long cur, long long rel, long long fs,
                     long long prev_index, long long prev_term, bint check_crc) except? -2:
    """Why a walk stops at the entry header at `p` (data position `cur`, `rel` bytes into
    a segment of `fs` bytes): a STOP_* reason, or -1 when the entry is whole and follows
    entry `prev_index` of term `prev_term` (any index when `prev_index` < 0). Blanks and
    the zero header that ends the log are the caller's."""
    cdef int32_t magic = dl_get32(p), bsize, crc
    cdef long long size = dl_get32(p + DL_OFF_SIZE), idx
    if rel + DL_HEADER_SIZE > fs:
        return STOP_BAD_HEADER
    bsize = dl_get32(p + DL_OFF_BODY_SIZE)
    if (magic != DL_MAGIC_NORMAL and magic != DL_MAGIC_NOOP and magic != DL_MAGIC_RECORD) or size <= DL_MIN_ENTRY_SIZE_EXCL \
            or size < DL_HEADER_SIZE or bsize + DL_HEADER_SIZE != size or rel + size > fs:
        return STOP_BAD_HEADER
    idx = dl_get64(p + DL_OFF_INDEX)
    if dl_get64(p + DL_OFF_POS) != cur:
        return STOP_POS
    if (prev_index >= 0 and idx != prev_index + 1) or idx < 0:
        return STOP_INDEX
    if dl_get64(p + DL_OFF_TERM) < prev_term:
        return STOP_TERM
    crc = dl_get32(p + DL_OFF_BODY_CRC)
    if check_crc and crc != 0 and _crc_field(p + DL_HEADER_SIZE, bsize) != crc:
        return STOP_CRC
    return -1


cdef object _scan(LogCore core, long long start, long long prev_index, long long prev_term, bint check_crc,
                  bint check_index):
    """`LogCore.scan`: walk and validate entries from data position `start`."""
    cdef long long fs = core.data.file_size, cur = start, rel, size, idx, term
    cdef long long first = -1, count = 0, mismatch = -1, mismatch_pos = -1, last_end = -1
    cdef int reason = STOP_END
    cdef int32_t magic
    cdef unsigned char *p
    cdef unsigned char *u
    while True:
        if core.data.count == 0 or cur >= core.data.first_offset + core.data.count * fs:
            reason = STOP_END
            break
        p = core.data.at(cur, DL_MIN_BLANK_LEN)
        if p == NULL:
            reason = STOP_NO_SEGMENT
            break
        rel = (cur - core.data.first_offset) % fs
        magic = dl_get32(p)
        size = dl_get32(p + 4)
        if magic == DL_MAGIC_BLANK:
            # padding runs to the end of its segment; only a reset's head blank (at the
            # start of the first segment) may stop earlier
            if size < DL_MIN_BLANK_LEN or rel + size > fs or (
                    rel + size != fs and not (rel == 0 and cur == core.data.first_offset)):
                reason = STOP_BLANK
                break
            cur += size
            continue
        if magic == 0 and size == 0:
            reason = STOP_END
            break
        reason = _entry_stop(p, cur, rel, fs, prev_index, prev_term, check_crc)
        if reason >= 0:
            break
        idx = dl_get64(p + DL_OFF_INDEX)
        term = dl_get64(p + DL_OFF_TERM)
        if check_index and mismatch < 0:
            u = core.index.at(idx * DL_INDEX_UNIT, DL_INDEX_UNIT)
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
    return ScanResult(cur, first, prev_index, prev_term, count, reason, mismatch, mismatch_pos, last_end)


cdef int _write_units(LogCore core, long long start, long long from_index, long long to_index) except -1:
    """`LogCore.write_units`: rewrite the index units of from_index..to_index."""
    cdef long long cur = start, idx = from_index, size, fs = core.data.file_size
    cdef unsigned char *p
    cdef unsigned char *u
    while idx <= to_index:
        p = core.data.at(cur, DL_MIN_BLANK_LEN)
        if p == NULL:
            raise DLedgerError(ResponseCode.DISK_ERROR, "data position %d is not mapped" % cur)
        if dl_get32(p) == DL_MAGIC_BLANK:
            cur += dl_get32(p + 4)
            continue
        size = dl_get32(p + DL_OFF_SIZE)
        u = core._unit_slot(idx)
        _write_unit(u, dl_get32(p), cur, <int32_t>size, dl_get64(p + DL_OFF_INDEX),
                    dl_get64(p + DL_OFF_TERM))
        cur += size
        idx += 1
    return 0


cdef list _unit_conflicts(LogCore core, long long start, long long from_index, long long to_index,
                          long long prev_term, long long prev_end):
    """`LogCore.unit_conflicts`: [(index, pos, prev_term, prev_end, next_term)]."""
    cdef long long cur = start, idx = from_index, size, term
    cdef int32_t magic
    cdef int j, k
    cdef unsigned char expected[32]  # DL_INDEX_UNIT
    cdef unsigned char *p
    cdef unsigned char *u
    cdef list out = []
    while idx <= to_index:
        p = core.data.at(cur, DL_MIN_BLANK_LEN)
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
        u = core.index.at(idx * DL_INDEX_UNIT, DL_INDEX_UNIT)
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
