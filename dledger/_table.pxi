# Included by dledger/_store.pyx (one extension module): `MappedTable`, the mapped
# segments of one file list as raw pointers.
# Uses the C declarations of _store.pxd and the constants of _store.pyx.

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
