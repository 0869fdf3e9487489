# Included by dledger/_store.pyx (one extension module): the append byte budget.

cdef class Quota:
    """Per-second byte budget over a window of 5 one-second slots (DLedger's Quota)."""
    cdef public long long max_per_second
    cdef long long samples[5]
    cdef long long seconds[5]

    def __cinit__(self, long long max_per_second):
        self.max_per_second = max_per_second
        cdef int i
        for i in range(5):
            self.samples[i] = 0
            self.seconds[i] = -1

    cpdef void sample(self, long long value, long long now_ms):
        """Account `value` bytes to the second containing `now_ms`."""
        cdef long long sec = now_ms // 1000
        cdef int slot = <int>(sec % 5)
        if self.seconds[slot] != sec:
            self.seconds[slot] = sec
            self.samples[slot] = value
        else:
            self.samples[slot] += value

    cpdef bint validate_now(self, long long now_ms):
        """True when this second's budget is used up (the caller must wait)."""
        cdef long long sec = now_ms // 1000
        cdef int slot = <int>(sec % 5)
        return self.seconds[slot] == sec and self.samples[slot] >= self.max_per_second

    cpdef long long left_now_ms(self, long long now_ms):
        """Milliseconds until the next second starts."""
        return 1000 - now_ms % 1000
