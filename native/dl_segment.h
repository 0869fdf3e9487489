/* Raw helpers for mapped segments: msync of a range and page pre-faulting. */
#ifndef DL_SEGMENT_H
#define DL_SEGMENT_H
#include <stdint.h>
#include <stddef.h>
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static inline long dl_page_size(void) { return sysconf(_SC_PAGESIZE); }

/* msync(MS_SYNC) of [base+from, base+to); returns 0 or errno. */
static inline int dl_msync(unsigned char *base, size_t from, size_t to) {
    long page = dl_page_size();
    size_t start = from - (from % (size_t)page);
    if (to <= start) return 0;
    if (msync(base + start, to - start, MS_SYNC) != 0) return errno;
    return 0;
}

/* Fault in [base+from, base+to) writable without changing its bytes, so the writer
 * never pays for a first touch. Falls back to an atomic add of zero per page
 * (safe against a concurrent writer on x86) when MADV_POPULATE_WRITE is refused. */
static inline int dl_prefault(unsigned char *base, size_t from, size_t to) {
    long page = dl_page_size();
    size_t start = from - (from % (size_t)page);
    if (to <= start) return 0;
    if (madvise(base + start, to - start, MADV_POPULATE_WRITE) == 0) return 0;
    for (size_t off = start; off < to; off += (size_t)page) {
        __atomic_fetch_add((uint64_t *)(void *)(base + off), 0, __ATOMIC_RELAXED);
    }
    return 0;
}
#endif
