# cython: language_level=3
# C declarations shared by the parts of `dledger._store` (`_store.pyx` and the `.pxi`
# files it includes): POSIX calls and the helpers in `native/*.h`.
#
# Cython reads this file as the declaration file of `_store.pyx` (same name), so every
# name here is visible in the module and its includes. Only `cdef extern` blocks live
# here: the module exports no C API.

from libc.stdint cimport int32_t, int64_t, uint32_t

cdef extern from "pthread.h" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *, const void *)
    int pthread_mutex_destroy(pthread_mutex_t *)
    int pthread_mutex_lock(pthread_mutex_t *)
    int pthread_mutex_trylock(pthread_mutex_t *)
    int pthread_mutex_unlock(pthread_mutex_t *)

cdef extern from "unistd.h":
    void _exit(int) nogil

# On-disk layout (byte-compatible with Java DLedger; the same values as dledger/entry.py).
cdef extern from "dl_layout.h":
    int DL_OFF_MAGIC, DL_OFF_SIZE, DL_OFF_INDEX, DL_OFF_TERM, DL_OFF_POS
    int DL_OFF_CHANNEL, DL_OFF_CHAIN_CRC, DL_OFF_BODY_CRC, DL_OFF_BODY_SIZE
    int DL_HEADER_SIZE, DL_MIN_ENTRY_SIZE_EXCL
    int DL_IDX_OFF_MAGIC, DL_IDX_OFF_POS, DL_IDX_OFF_SIZE, DL_IDX_OFF_INDEX, DL_IDX_OFF_TERM
    int DL_INDEX_UNIT, DL_MAGIC_BLANK, DL_MAGIC_NORMAL, DL_MAGIC_NOOP, DL_MIN_BLANK_LEN
    int DL_MAGIC_RECORD, DL_REC_VERSION, DL_REC_MAX_KEY, DL_REC_MAX_HEADERS, DL_REC_MAX_HEADER_KEY
    int DL_REC_STAMPED, DL_REC_STAMP_SIZE, DL_REC_MAX_STAMP_COUNT
    int DL_MAX_ENTRY_SIZE

# Big-endian loads and stores at unaligned addresses.
cdef extern from "dl_endian.h" nogil:
    void dl_put32(unsigned char *p, int32_t v)
    void dl_put64(unsigned char *p, int64_t v)
    int32_t dl_get32(const unsigned char *p)
    int64_t dl_get64(const unsigned char *p)

# CRC-32 (zlib / java.util.zip.CRC32 values), libdeflate when the build found it.
cdef extern from "dl_crc.h" nogil:
    void dl_crc_init()
    uint32_t dl_crc32(const unsigned char *p, size_t n)
    uint32_t dl_crc32_update(uint32_t crc, const unsigned char *p, size_t n)
    const char *DL_CRC_IMPL

# Segment helpers: each returns 0 or an errno value.
cdef extern from "dl_segment.h" nogil:
    int dl_msync(unsigned char *base, size_t frm, size_t to)
    int dl_prefault(unsigned char *base, size_t frm, size_t to)
    int dl_unmap_pages(unsigned char *base, size_t frm, size_t to)
    int dl_pwrite_all(int fd, const unsigned char *buf, size_t n, long long offset)
    int dl_close(int fd)
