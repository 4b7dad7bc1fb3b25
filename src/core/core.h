/*
 * core.h — internal helpers shared by every part of moe8: error filling,
 * logging, overflow-checked arithmetic, aligned allocation, CPU features.
 * Not part of the public API.
 */
#ifndef MOE8_CORE_H
#define MOE8_CORE_H

#include <stdint.h>
#include <stddef.h>
#include <time.h>

#include "core/public.h"

#if defined(__GNUC__)
#define MOE8_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MOE8_PRINTF(a, b)
#endif

/* Fill `err` (may be NULL) and return `code`, so call sites read
 *   return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': bad header", path); */
moe8_status moe8_fail(moe8_error *err, moe8_status code, int64_t offset, const char *fmt, ...)
    MOE8_PRINTF(4, 5);
/* Prefix an existing error message: "<prefix>: <old message>". */
void moe8_error_prefix(moe8_error *err, const char *fmt, ...) MOE8_PRINTF(2, 3);

void moe8_log(moe8_log_level level, const char *fmt, ...) MOE8_PRINTF(2, 3);

/* Always-on invariant check (a failed one is a bug in moe8, not bad input). */
#define MOE8_ASSERT(cond)                                                         \
    do {                                                                          \
        if (!(cond)) moe8_assert_fail(#cond, __FILE__, __LINE__);                 \
    } while (0)
void moe8_assert_fail(const char *cond, const char *file, int line);

/* Overflow-checked size arithmetic: return 0 on success, -1 on overflow. */
static inline int moe8_mul_size(size_t a, size_t b, size_t *out) {
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}
static inline int moe8_add_size(size_t a, size_t b, size_t *out) {
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

/* Round to nearest, ties to even, whatever the caller's floating-point
 * rounding mode (rintf follows fesetround; SEMANTICS §4 fixes half-to-even).
 * floorf and the subtraction below are exact, so no mode can change them. */
static inline float moe8_round_even(float x) {
    float f = __builtin_floorf(x), d = x - f;
    if (d > 0.5f || (d == 0.5f && __builtin_fmodf(f, 2.0f) != 0.0f)) f += 1.0f;
    return f;
}

/* XXH3 64-bit (hash.c, libxxhash): the hash of every table, fingerprint and
 * checksum in moe8; moe8_hash_str hashes a NUL-terminated string, seed 0. */
uint64_t moe8_hash64(const void *p, size_t n, uint64_t seed);
uint64_t moe8_hash_str(const char *s);

/* UTF-8 (utf8.c). One character at s[0..n), n >= 1: its length (> 0) when
 * valid and complete, 0 when s is a valid but incomplete prefix, or -k when
 * invalid, k >= 1 being the bytes to replace by one U+FFFD (the maximal
 * subpart rule of Unicode Table 3-7, as Rust's from_utf8_lossy). */
int moe8_utf8_char(const uint8_t *s, size_t n);
/* moe8_utf8_char, and the code point of a valid character in *cp (left as
 * it was otherwise). */
int moe8_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);
/* cp (<= U+10FFFF, no surrogate) as UTF-8 into out[4]: its length, or 0
 * for a value that is no code point. */
int moe8_utf8_encode(uint32_t cp, char out[4]);
/* Offset of the first byte of the first invalid or truncated UTF-8 sequence
 * of s[0..n), or (size_t)-1 when all of it is valid. */
size_t moe8_utf8_valid(const char *s, size_t n);

/* Forward-phase accounting (phase.c; moe8.h moe8_bench_forward_timing). */
int moe8_phase_on(void);
void moe8_phase_add(moe8_phase phase, double seconds);
void moe8_phase_forward(double seconds);     /* one whole moe8_decode */
void moe8_phase_moe(int active_experts);     /* one MoE layer call */

/* 64-byte aligned allocation (NULL on failure or overflow); free with moe8_free_aligned. */
void *moe8_alloc_aligned(size_t n_bytes);
void moe8_free_aligned(void *p);
/* Write a zero into every 4 KB page of [p, p + n_bytes) on n_threads threads,
 * split as the row loops split their rows, so scratch is resident (and, on
 * NUMA, local to the threads that use it) before the first forward. */
void moe8_touch_pages(void *p, size_t n_bytes, int n_threads);

/* CPU features probed once at run time (each with the OS state it needs). */
typedef struct {
    int avx2;        /* AVX2 + FMA + F16C, ymm state saved */
    int avx512;      /* AVX-512 F/BW/VL/VNNI, zmm and opmask state saved */
    int avx512_bf16; /* and AVX512-BF16 */
    int amx_int8;    /* AMX-TILE + AMX-INT8, tile state saved and granted (Linux) */
    int amx_bf16;    /* and AMX-BF16 */
} moe8_cpu_features;
const moe8_cpu_features *moe8_cpu(void);

#endif /* MOE8_CORE_H */
