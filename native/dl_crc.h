/* CRC-32 (the polynomial of zlib and java.util.zip.CRC32).
 *
 * Inputs of 32..288 bytes (small entry bodies) take a short path on x86-64 CPUs with
 * AVX2 and VPCLMULQDQ; everything else goes to libdeflate when it was found at build
 * time (about 8x faster than zlib here), else to zlib. Call dl_crc_init() once first.
 *
 * Why a short path: a point read computes the CRC right after two cache misses, and the
 * CPU can only overlap the next read's first miss with the current one while the work
 * in between fits its out-of-order window. libdeflate's general folding loop is about
 * 40 vector operations for 128 bytes; this path is about 15, and random point reads
 * of 128-byte bodies get about 30 % faster.
 *
 * The method: the input is cut into 32-byte windows aligned to its end (the first one
 * loaded from the start and masked to the bytes no other window covers). Each 16-byte
 * half H*x^64 + L of a window that ends d bytes before the end of the input contributes
 * H * x^(8d+64) + L * x^(8d) to the message polynomial M, so with one carry-less
 * multiplication per 8-byte part by a precomputed constant x^(8d+63) or x^(8d-1) mod P
 * (the multiplication of two bit-reflected values adds one more power of x) every part
 * lands in a 128-bit value congruent to M * x^32 mod P; they are XORed together,
 * folded to 64 bits (times x^95 and x^63 mod P) and reduced with a Barrett step.
 * The initial value 0xffffffff is the first 4 bytes complemented; XORing it into the
 * first (masked) window is right even when the second window covers some of them.
 * "Reflected" values hold the highest power of x in bit 0, as the CRC register does;
 * P = x^32 + ... + 1 = 0x104C11DB7. */
#ifndef DL_CRC_H
#define DL_CRC_H
#include <stdint.h>
#include <stddef.h>

#ifdef DL_HAVE_LIBDEFLATE
#include <libdeflate.h>
static inline uint32_t dl_crc32_update(uint32_t crc, const unsigned char *p, size_t n) {
    return libdeflate_crc32(crc, p, n);
}
#define DL_CRC_IMPL_BIG "libdeflate"
#else
#include <zlib.h>
static inline uint32_t dl_crc32_update(uint32_t c, const unsigned char *p, size_t n) {
    while (n > 0) {
        uInt chunk = n > 0x40000000u ? 0x40000000u : (uInt)n;
        c = (uint32_t)crc32(c, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return c;
}
#define DL_CRC_IMPL_BIG "zlib"
#endif

/* The CRC-32 of p[0..n) alone. dl_crc32_update(crc, p, n) continues the CRC-32 `crc`
 * of earlier bytes over p[0..n) (0 starts a new one), as zlib's crc32() does. */
static inline uint32_t dl_crc32_big(const unsigned char *p, size_t n) { return dl_crc32_update(0, p, n); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define DL_CRC_FAST_MIN 32
#define DL_CRC_FAST_MAX 288
#define DL_CRC_POLY 0x104C11DB7ull

/* dl_crc_win[d] = the constants of a window ending d bytes before the end of the
 * input: {x^(8(d+16)+63), x^(8(d+16)-1), x^(8d+63), x^(8d-1)} mod P, reflected, for
 * the H and L parts of its first and second half. */
static uint64_t dl_crc_win[DL_CRC_FAST_MAX - DL_CRC_FAST_MIN + 1][4] __attribute__((aligned(32)));
/* {x^95, x^63} mod P, reflected: folds 128 bits to 64. */
static const uint64_t dl_crc_fold[2] __attribute__((aligned(16))) = {0xccaa009eull, 0xb8bc6765ull};
/* {floor(x^64 / P), P}, reflected over 33 bits: the Barrett reduction. */
static const uint64_t dl_crc_barrett[2] __attribute__((aligned(16))) = {0x1f7011641ull, 0x1db710641ull};
/* 32 bytes 0xff then 32 zero bytes: 32 bytes from offset 32 - s keep the first s. */
static const unsigned char dl_crc_mask[64] = {
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
static int dl_crc_fast = 0;

__attribute__((target("avx2,vpclmulqdq,pclmul,sse4.1")))
static uint32_t dl_crc32_fast(const unsigned char *p, size_t n) {
    const size_t windows = (n + 31) >> 5, first = n - 32 * (windows - 1);
    const __m128i zero = _mm_setzero_si128();
    __m256i x, k, acc0, acc1;
    __m128i t, v, c;
    size_t i;
    x = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)p),
                         _mm256_loadu_si256((const __m256i *)(dl_crc_mask + 32 - first)));
    x = _mm256_xor_si256(x, _mm256_setr_epi32(-1, 0, 0, 0, 0, 0, 0, 0));
    k = _mm256_load_si256((const __m256i *)dl_crc_win[n - 32]);
    acc0 = _mm256_clmulepi64_epi128(x, k, 0x00);
    acc1 = _mm256_clmulepi64_epi128(x, k, 0x11);
    for (i = 0; i + 1 < windows; i++) {
        x = _mm256_loadu_si256((const __m256i *)(p + n - 32 * (i + 1)));
        k = _mm256_load_si256((const __m256i *)dl_crc_win[32 * i]);
        acc0 = _mm256_xor_si256(acc0, _mm256_clmulepi64_epi128(x, k, 0x00));
        acc1 = _mm256_xor_si256(acc1, _mm256_clmulepi64_epi128(x, k, 0x11));
    }
    acc0 = _mm256_xor_si256(acc0, acc1);
    t = _mm_xor_si128(_mm256_castsi256_si128(acc0), _mm256_extracti128_si256(acc0, 1));
    /* 128 -> 64 bits: the two top 32-bit parts times x^95 and x^63, plus the low half */
    v = _mm_unpacklo_epi32(t, zero);
    c = _mm_load_si128((const __m128i *)dl_crc_fold);
    v = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(v, c, 0x00), _mm_clmulepi64_si128(v, c, 0x11)),
                      _mm_srli_si128(t, 8));
    /* Barrett: q = top 32 bits of v, r = floor(q * mu / x^32), crc = low 32 bits of v + r * P */
    c = _mm_load_si128((const __m128i *)dl_crc_barrett);
    t = _mm_clmulepi64_si128(_mm_unpacklo_epi32(v, zero), c, 0x00);
    t = _mm_clmulepi64_si128(_mm_unpacklo_epi32(t, zero), c, 0x10);
    return ~(uint32_t)_mm_extract_epi32(_mm_xor_si128(v, t), 1);
}

static uint32_t dl_crc_reflect32(uint64_t v) {
    uint32_t r = 0;
    for (int i = 0; i < 32; i++) r |= (uint32_t)((v >> i) & 1) << (31 - i);
    return r;
}

static void dl_crc_init(void) {
    /* pw[t] = x^(8t-1) mod P, reflected; x^-1 mod P = (P xor 1) / x */
    enum { N = DL_CRC_FAST_MAX - DL_CRC_FAST_MIN + 1 + 16 + 8 };
    uint32_t pw[N];
    uint64_t v = (DL_CRC_POLY ^ 1) >> 1;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("vpclmulqdq") ||
        !__builtin_cpu_supports("pclmul") || !__builtin_cpu_supports("sse4.1"))
        return;
    pw[0] = dl_crc_reflect32(v);
    v = 1u << 7;
    for (int t = 1; t < N; t++) {
        pw[t] = dl_crc_reflect32(v);
        for (int i = 0; i < 8; i++) {
            v <<= 1;
            if (v >> 32) v ^= DL_CRC_POLY;
        }
    }
    for (int d = 0; d <= DL_CRC_FAST_MAX - DL_CRC_FAST_MIN; d++) {
        dl_crc_win[d][0] = pw[d + 16 + 8];
        dl_crc_win[d][1] = pw[d + 16];
        dl_crc_win[d][2] = pw[d + 8];
        dl_crc_win[d][3] = pw[d];
    }
    dl_crc_fast = 1;
}

static inline uint32_t dl_crc32(const unsigned char *p, size_t n) {
    if (n - DL_CRC_FAST_MIN <= (size_t)(DL_CRC_FAST_MAX - DL_CRC_FAST_MIN) && dl_crc_fast)
        return dl_crc32_fast(p, n);
    return dl_crc32_big(p, n);
}
#define DL_CRC_IMPL (dl_crc_fast ? "vpclmulqdq+" DL_CRC_IMPL_BIG : DL_CRC_IMPL_BIG)

#else
static inline void dl_crc_init(void) {}
static inline uint32_t dl_crc32(const unsigned char *p, size_t n) { return dl_crc32_big(p, n); }
#define DL_CRC_IMPL DL_CRC_IMPL_BIG
#endif
#endif
