/* CRC-32 (the polynomial of zlib and java.util.zip.CRC32).
 * Uses libdeflate when it was found at build time (about 8x faster here), else zlib. */
#ifndef DL_CRC_H
#define DL_CRC_H
#include <stdint.h>
#include <stddef.h>

#ifdef DL_HAVE_LIBDEFLATE
#include <libdeflate.h>
static inline uint32_t dl_crc32(const unsigned char *p, size_t n) {
    return libdeflate_crc32(0, p, n);
}
#define DL_CRC_IMPL "libdeflate"
#else
#include <zlib.h>
static inline uint32_t dl_crc32(const unsigned char *p, size_t n) {
    uint32_t c = (uint32_t)crc32(0L, Z_NULL, 0);
    while (n > 0) {
        uInt chunk = n > 0x40000000u ? 0x40000000u : (uInt)n;
        c = (uint32_t)crc32(c, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return c;
}
#define DL_CRC_IMPL "zlib"
#endif
#endif
