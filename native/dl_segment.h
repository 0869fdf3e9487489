/* Raw helpers for segments: msync of a range, page pre-faulting, and writes through
 * the file descriptor. */
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

/* Drop this mapping's page-table entries for the whole pages inside [base+from,
 * base+to) (MADV_DONTNEED). The page cache keeps the pages (a dirty one stays dirty)
 * and the next access maps them again. Returns 0 or errno. */
static inline int dl_unmap_pages(unsigned char *base, size_t from, size_t to) {
    size_t page = (size_t)dl_page_size();
    size_t start = (from + page - 1) / page * page;
    size_t end = to - to % page;
    if (end <= start) return 0;
    return madvise(base + start, end - start, MADV_DONTNEED) == 0 ? 0 : errno;
}

/* pwrite all of [buf, buf+n) at `offset` of `fd`, retrying short writes and EINTR;
 * returns 0 or errno. */
static inline int dl_pwrite_all(int fd, const unsigned char *buf, size_t n, long long offset) {
    while (n > 0) {
        ssize_t w = pwrite(fd, buf, n, (off_t)offset);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (w == 0) return EIO;
        buf += w;
        n -= (size_t)w;
        offset += w;
    }
    return 0;
}

/* close(fd) when fd >= 0; returns 0 or errno. */
static inline int dl_close(int fd) {
    if (fd < 0) return 0;
    return close(fd) == 0 ? 0 : errno;
}
#endif
