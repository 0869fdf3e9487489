# Included by dledger/_store.pyx (one extension module): the write-through stage of
# `LogCore` (see its docstring): with `write_through` set, appends copy entries into a
# private buffer that is written to the segment file with pwrite, instead of copying
# them into the mapping (RocketMQ's transient store pool).
# Uses the C declarations of _store.pxd and `LogCore`.

cdef unsigned char *_stage_slot(LogCore core, long long pos, long long size) except NULL:
    """Room in the stage for the `size` bytes of the entry at log position `pos`; the
    stage is written out first when the entry does not follow it or would overfill it."""
    cdef unsigned char *p
    cdef Py_ssize_t cap
    if core.stage_len and (core.stage_pos + core.stage_len != pos
                           or core.stage_len + size > STAGE_MAX_BYTES):
        _flush_stage(core)
    if core.stage_len + size > core.stage_cap:
        # grow geometrically (a batch's first pass reallocates O(log n) times, not
        # once per entry), never past what one stage can hold
        cap = max(core.stage_len + size, min(2 * core.stage_cap, STAGE_MAX_BYTES))
        p = <unsigned char *>PyMem_Realloc(core.stage, cap)
        if p == NULL:
            raise MemoryError()
        core.stage = p
        core.stage_cap = cap
    if core.stage_len == 0:
        core.stage_pos = pos
        core.stage_begin = core.begin_index
        core.stage_end_index = core.end_index
        core.stage_end_term = core.end_term
    p = core.stage + core.stage_len
    core.stage_len += size
    return p


cdef int _flush_stage(LogCore core) except -1:
    """pwrite the staged entries (if any) to their segment file. When that fails the
    log ends again before them and the store refuses writes: DISK_FULL on
    ENOSPC/EDQUOT, DISK_ERROR otherwise."""
    cdef long long rel = 0
    cdef Py_ssize_t n = core.stage_len
    cdef int err
    if n == 0:
        return 0
    core.stage_len = 0
    # the staged entries are not published while the GIL is released for the write:
    # the ledger shows its state before them, and shows them again once written
    cdef long long begin = core.begin_index, end = core.end_index
    cdef long long end_term = core.end_term, write_pos = core.write_pos
    core.begin_index = core.stage_begin
    core.end_index = core.stage_end_index
    core.end_term = core.stage_end_term
    core.write_pos = core.stage_pos
    cdef int fd = core.data.fd_at(core.stage_pos, &rel)
    if fd < 0 or rel + n > core.data.file_size:
        err = errno.EBADF
    else:
        with nogil:
            err = dl_pwrite_all(fd, core.stage, <size_t>n, rel)
    if err == 0:
        core.begin_index = begin
        core.end_index = end
        core.end_term = end_term
        core.write_pos = write_pos
        return 0
    full = err in (errno.ENOSPC, errno.EDQUOT)
    core.state = ST_DISK_FULL if full else ST_DISK_ERROR
    failed = DLedgerError(ResponseCode.DISK_FULL if full else ResponseCode.DISK_ERROR,
                          "writing %d bytes at data position %d failed: %s"
                          % (n, core.stage_pos, os.strerror(err)))
    if not full and core.on_write_failure is not None:
        core.on_write_failure(failed)
    raise failed
