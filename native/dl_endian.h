/* Big-endian loads and stores on unaligned memory. */
#ifndef DL_ENDIAN_H
#define DL_ENDIAN_H
#include <stdint.h>
#include <string.h>

static inline void dl_put32(unsigned char *p, int32_t v) {
    uint32_t u = __builtin_bswap32((uint32_t)v);
    memcpy(p, &u, 4);
}
static inline void dl_put64(unsigned char *p, int64_t v) {
    uint64_t u = __builtin_bswap64((uint64_t)v);
    memcpy(p, &u, 8);
}
static inline int32_t dl_get32(const unsigned char *p) {
    uint32_t u;
    memcpy(&u, p, 4);
    return (int32_t)__builtin_bswap32(u);
}
static inline int64_t dl_get64(const unsigned char *p) {
    uint64_t u;
    memcpy(&u, p, 8);
    return (int64_t)__builtin_bswap64(u);
}
#endif
