# Included by dledger/_store.pyx (one extension module): the follower's append of a run
# of already-encoded entries (`LogCore.append_encoded`), as C functions the method calls
# with the lock held: validate the whole run, then write it.
# Uses the C declarations of _store.pxd, the codecs of _codec.pxi and `LogCore`.

cdef int _check_run(LogCore core, const unsigned char *r, Py_ssize_t total) except -1:
    """Validate every header of the run [r, r+total) against the log's end, simulating
    the positions `_pre_append` will give (blank padding included): magic, sizes, CRC
    when present, contiguous indexes from ``end_index + 1``, non-decreasing terms and
    ``pos``. Raises DLedgerError at the first bad entry; writes nothing."""
    cdef Py_ssize_t off = 0
    cdef long long idx = core.end_index, term = core.end_term, wp = core.write_pos
    cdef long long pos, size, fs = core.data.file_size, rel
    cdef int32_t magic, bsize, crc
    while off < total:
        if off + DL_HEADER_SIZE > total:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "run ends inside a header at %d" % off)
        magic = dl_get32(r + off + DL_OFF_MAGIC)
        size = dl_get32(r + off + DL_OFF_SIZE)
        bsize = dl_get32(r + off + DL_OFF_BODY_SIZE)
        if magic != DL_MAGIC_NORMAL and magic != DL_MAGIC_NOOP and magic != DL_MAGIC_RECORD:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "bad magic %d at run offset %d" % (magic, off))
        if size < DL_HEADER_SIZE or bsize + DL_HEADER_SIZE != size or off + size > total:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "bad size %d at run offset %d" % (size, off))
        core._check_size(size)
        if dl_get64(r + off + DL_OFF_INDEX) != idx + 1:
            raise DLedgerError(ResponseCode.INCONSISTENT_INDEX,
                               "run entry index %d, expected %d" % (dl_get64(r + off + DL_OFF_INDEX), idx + 1))
        if dl_get64(r + off + DL_OFF_TERM) < term:
            raise DLedgerError(ResponseCode.INCONSISTENT_TERM, "run entry term goes backwards at index %d" % (idx + 1))
        crc = dl_get32(r + off + DL_OFF_BODY_CRC)
        if crc != 0 and core.verify_crc and _crc_field(r + off + DL_HEADER_SIZE, bsize) != crc:
            raise DLedgerError(ResponseCode.UNEXPECTED_ARGUMENT, "body CRC mismatch at index %d" % (idx + 1))
        rel = wp % fs if core.data.count == 0 else (wp - core.data.first_offset) % fs
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
    return 0


cdef long long _write_run(LogCore core, const unsigned char *r, Py_ssize_t total) except -1:
    """Append the entries of a run `_check_run` accepted, verbatim; returns how many."""
    cdef Py_ssize_t off = 0
    cdef long long idx, term, pos, size, cnt = 0
    try:
        while off < total:
            size = dl_get32(r + off + DL_OFF_SIZE)
            idx = core.end_index + 1
            unit = core._unit_slot(idx)
            pos = core._pre_append(size)
            p = core._dest(pos, size)
            if size >= GIL_RELEASE_BYTES and not core.write_through:
                with nogil:
                    memcpy(p, r + off, size)
            else:
                memcpy(p, r + off, size)
            core._failpoint_after_data()
            term = dl_get64(r + off + DL_OFF_TERM)
            _write_unit(unit, dl_get32(r + off + DL_OFF_MAGIC), pos, <int32_t>size, idx, term)
            core._publish(idx, term, pos + size)
            off += size
            cnt += 1
    finally:
        _flush_stage(core)
    return cnt
