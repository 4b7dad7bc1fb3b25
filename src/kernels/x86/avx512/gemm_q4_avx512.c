/*
 * gemm_q4_avx512.c — exact int4 x int8 -> int32 GEMM (W4A8, SEMANTICS §4b)
 * over the packed int4 layout q4k8 (qlayout.c: panels of 16 channels, K in
 * groups of 8, 64 bytes a group: the low nibbles are the k4u chunk of quad
 * 2g, the high nibbles that of quad 2g + 1, each code stored as W + 8):
 *     acc[r][j] = sum_k xq[r][k] * W[j][k]
 * and the dequant epilogue of SEMANTICS §4 (avx512_load.h's q8_out16).
 *
 * The nibbles are unpacked in registers, never in memory: one 64-byte load,
 * `and 0x0f` gives quad 2g's unsigned operand, `srl 4` + `and` quad 2g+1's.
 * vpdpbusd multiplies them (0..15) by the signed activation quads broadcast
 * from memory, so the lanes sum (W + 8) x and
 *     sum_k W x = sum_k (W + 8) x - 8 * sum_k x        (mod 2^32, exact)
 * with sum_k x the row sum of xq over k_pad = round_up(k, 8): the
 * accumulators start at -8 * rowsum. Past k the packed codes are 8 (W = 0),
 * so whatever the activation tail holds cancels.
 *
 * Tiling: blocks of panels of ~L2_BLOCK bytes that stay in L2 while every row
 * tile passes over them (one row tile: no blocks); rows in tiles of MR = 4,
 * 4 panels side by side (16 zmm accumulators, the weight group loaded once
 * per step and used by every row). One or two rows (decode) walk NPD = 8
 * panels side by side: 8 sequential weight streams, each prefetched
 * PF_DECODE bytes ahead. Named registers throughout (gcc keeps arrays of
 * __m512i in memory); the unused ones fold away at compile time. Integer
 * sums, so the tiling never changes a result; writes only rows < m and
 * columns [n0, n1); n0 a multiple of 16. No allocation, little stack.
 */
#include <immintrin.h>
#include <string.h>

#include "core/core.h"
#include "kernels/x86/avx512/avx512_load.h"
#include "kernels/x86/avx512/kernels_avx512.h"

#define NR 16 /* channels per panel */
#define MR 4  /* rows per tile */
#define NP 4  /* panels per tile */
#define NPD 8 /* panels side by side on the 1-2 row path */

#define L2_BLOCK (512 * 1024) /* weight bytes per block of panels */
#define PF_DIST 1024          /* bytes ahead in each weight stream of the tiles */
#define PF_DECODE 1024        /* bytes ahead in each stream of the few-row path */
#define INLINE static inline __attribute__((always_inline))

typedef struct {
    int32_t *acc; int ldc;                       /* i32 variant, or NULL */
    float *y; int ldy;                           /* f32 variant */
    const float *sx; const int32_t *xsum;        /* [mr] of this tile */
} tile_out;

INLINE void store16(const tile_out *o, const moe8_qmat *w, __m512i v, int r, int j, int nc) {
    if (o->acc) moe8_avx512_q8_out16(o->acc + (size_t)r * o->ldc, NULL, 0, 0, w, v, j, nc);
    else moe8_avx512_q8_out16(NULL, o->y + (size_t)r * o->ldy, o->sx[r], o->xsum[r], w, v, j, nc);
}

#define FOR_P(X, r) X(r, 0) X(r, 1) X(r, 2) X(r, 3) X(r, 4) X(r, 5) X(r, 6) X(r, 7)
#define FOR_RP(X) FOR_P(X, 0) FOR_P(X, 1) FOR_P(X, 2) FOR_P(X, 3)
#define FOR_R(X) X(0) X(1) X(2) X(3)
#define FOR_W(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define USED(r, p) ((r) < mr && (p) < np)

/* Rows [0, mr) x panels [j0/16, j0/16 + np) over the whole K (mr * np <= 16
 * accumulators); rs[r] is the row sum of xq[r] over k_pad; pfd: bytes ahead
 * of each weight stream to prefetch. Columns >= n1 are not stored. */
INLINE void tile(const tile_out *o, const int8_t *xq, int ldq, const int32_t *rs,
                 const moe8_qmat *w, int j0, int n1, const int mr, const int np, const int pfd) {
    const int n_g = w->k_pad / 8;
    const size_t ps = (size_t)n_g * 64; /* bytes per panel */
    const uint8_t *wk = (const uint8_t *)w->data + (size_t)(j0 / NR) * ps;
    const __m512i zero = _mm512_setzero_si512(), low4 = _mm512_set1_epi8(0x0f);
#define BIAS(r) const __m512i bias##r = \
        (r) < mr ? _mm512_set1_epi32((int32_t)(0u - 8u * (uint32_t)rs[(r) < mr ? (r) : 0])) : zero;
    FOR_R(BIAS)
#define INIT(r, p) __m512i a##r##p = USED(r, p) ? bias##r : zero;
    FOR_RP(INIT)
    for (int g = 0; g < n_g; g++, wk += 64) {
#define BCAST(r) __m512i bl##r = zero, bh##r = zero; \
        if ((r) < mr) { \
            int32_t q0, q1; \
            memcpy(&q0, xq + (size_t)(r) * ldq + 8 * (size_t)g, sizeof q0); \
            memcpy(&q1, xq + (size_t)(r) * ldq + 8 * (size_t)g + 4, sizeof q1); \
            bl##r = _mm512_set1_epi32(q0); \
            bh##r = _mm512_set1_epi32(q1); \
        }
        FOR_R(BCAST)
#define MAC(r, p) if (USED(r, p)) { \
            a##r##p = _mm512_dpbusd_epi32(a##r##p, wl##p, bl##r); \
            a##r##p = _mm512_dpbusd_epi32(a##r##p, wh##p, bh##r); \
        }
#define PANEL(p) if ((p) < np) { \
            if (pfd) _mm_prefetch((const char *)(wk + (p) * ps + pfd), _MM_HINT_T0); \
            __m512i wv##p = _mm512_loadu_si512(wk + (p) * ps); \
            __asm__("" : "+v"(wv##p)); /* loaded here: gcc otherwise hoists and spills it */ \
            const __m512i wl##p = _mm512_and_si512(wv##p, low4); \
            const __m512i wh##p = _mm512_and_si512(_mm512_srli_epi16(wv##p, 4), low4); \
            MAC(0, p) MAC(1, p) MAC(2, p) MAC(3, p) \
        }
        FOR_W(PANEL)
    }
#define STORE(r, p) if (USED(r, p)) { \
        const int j = j0 + (p) * NR; \
        store16(o, w, a##r##p, r, j, n1 - j < NR ? n1 - j : NR); \
    }
    FOR_RP(STORE)
}

/* One row tile of mr rows over the panels covering [ja, jb), NP at a time. */
INLINE void row_tile(const tile_out *o, const int8_t *xq, int ldq, const int32_t *rs,
                     const moe8_qmat *w, int ja, int jb, const int mr) {
    for (int j0 = ja; j0 < jb; j0 += NP * NR) {
        switch ((jb - j0 + NR - 1) / NR) {
        case 1: tile(o, xq, ldq, rs, w, j0, jb, mr, 1, PF_DIST); break;
        case 2: tile(o, xq, ldq, rs, w, j0, jb, mr, 2, PF_DIST); break;
        case 3: tile(o, xq, ldq, rs, w, j0, jb, mr, 3, PF_DIST); break;
        default: tile(o, xq, ldq, rs, w, j0, jb, mr, 4, PF_DIST); break;
        }
    }
}

/* The few-row path: mr (1 or 2) rows over [n0, n1), NPD panels at a time. */
INLINE void decode_rows(const tile_out *o, const int8_t *xq, int ldq, const int32_t *rs,
                        const moe8_qmat *w, int n0, int n1, const int mr) {
    for (int j0 = n0; j0 < n1; j0 += NPD * NR) {
        switch ((n1 - j0 + NR - 1) / NR) {
        case 1: tile(o, xq, ldq, rs, w, j0, n1, mr, 1, PF_DECODE); break;
        case 2: tile(o, xq, ldq, rs, w, j0, n1, mr, 2, PF_DECODE); break;
        case 3: tile(o, xq, ldq, rs, w, j0, n1, mr, 3, PF_DECODE); break;
        case 4: tile(o, xq, ldq, rs, w, j0, n1, mr, 4, PF_DECODE); break;
        case 5: tile(o, xq, ldq, rs, w, j0, n1, mr, 5, PF_DECODE); break;
        case 6: tile(o, xq, ldq, rs, w, j0, n1, mr, 6, PF_DECODE); break;
        case 7: tile(o, xq, ldq, rs, w, j0, n1, mr, 7, PF_DECODE); break;
        default: tile(o, xq, ldq, rs, w, j0, n1, mr, NPD, PF_DECODE); break;
        }
    }
}

static tile_out at_row(const tile_out *o, int r0) {
    tile_out t = *o;
    if (t.acc) t.acc += (size_t)r0 * t.ldc;
    else { t.y += (size_t)r0 * t.ldy; t.sx += r0; t.xsum += r0; }
    return t;
}

static void run(const tile_out *o, const int8_t *xq, int ldq, const moe8_qmat *w, int m, int n0,
                int n1) {
    const int k_pad = w->k_pad;
    int32_t rs[MR];
    if (m <= 0 || n1 <= n0) return;
    if (m <= 2) {
        for (int r = 0; r < m; r++) rs[r] = moe8_avx512_row_sum(xq + (size_t)r * ldq, k_pad);
        if (m == 1) decode_rows(o, xq, ldq, rs, w, n0, n1, 1);
        else decode_rows(o, xq, ldq, rs, w, n0, n1, 2);
        return;
    }
    const size_t tile_bytes = (size_t)k_pad / 2 * NR * NP;
    int nb = NR * NP * (tile_bytes >= L2_BLOCK ? 1 : (int)(L2_BLOCK / tile_bytes));
    if (m <= MR) nb = n1 - n0;
    for (int ja = n0; ja < n1; ja += nb) {
        const int jb = n1 - ja < nb ? n1 : ja + nb;
        for (int r0 = 0; r0 < m; r0 += MR) {
            const int mr = m - r0 < MR ? m - r0 : MR;
            const int8_t *xr = xq + (size_t)r0 * ldq;
            const tile_out t = at_row(o, r0);
            for (int r = 0; r < mr; r++) rs[r] = moe8_avx512_row_sum(xr + (size_t)r * ldq, k_pad);
            switch (mr) {
            case 1: row_tile(&t, xr, ldq, rs, w, ja, jb, 1); break;
            case 2: row_tile(&t, xr, ldq, rs, w, ja, jb, 2); break;
            case 3: row_tile(&t, xr, ldq, rs, w, ja, jb, 3); break;
            default: row_tile(&t, xr, ldq, rs, w, ja, jb, MR); break;
            }
        }
    }
}

void moe8_gemm_q4_i32_avx512(int32_t *acc, int ldc, const int8_t *xq, int ldq,
                             const moe8_qmat *w, int m, int n0, int n1) {
    const tile_out o = {acc, ldc, NULL, 0, NULL, NULL};
    MOE8_ASSERT(w->layout == &moe8_qlayout_q4k8);
    run(&o, xq, ldq, w, m, n0, n1);
}

void moe8_gemm_q4_f32_avx512(float *y, int ldy, const int8_t *xq, int ldq, const float *sx,
                             const int32_t *xsum, const moe8_qmat *w, int m, int n0, int n1) {
    const tile_out o = {NULL, 0, y, ldy, sx, xsum};
    MOE8_ASSERT(w->layout == &moe8_qlayout_q4k8);
    run(&o, xq, ldq, w, m, n0, n1);
}
