/*
 * gemm_f32_avx512.c — float GEMM y[r][j] = sum_k x[r][k] * W[j][k] with the
 * weight read in place as F32, F16 (vcvtph2ps) or BF16 (shifted into fp32),
 * fp32 FMA in zmm. W is row-major [n][ldw] (checkpoint [out][in]); x is
 * [m][ldx] fp32. The lm_head of every decode step runs here.
 *
 * Dot-product form: a tile of mr rows x nc channels keeps mr*nc zmm
 * accumulators of 16 lane partial sums along k; one step reads 64 bytes of
 * every channel's row (16 F32 or 32 F16/BF16 weights). The summation order
 * of y[r][j] depends on k only:
 *   F32, F16  lane l takes k = l (mod 16), in order, one FMA each;
 *   BF16      a step of 32 weights splits into the even ones (the low
 *             halves of the 32-bit lanes, shifted up: one vpslld) and the
 *             odd ones (the high halves, kept by a zero-masked 16-bit load:
 *             no ALU op), x split the same way by two vpermt2ps: lane l
 *             takes k = 32s + 2l, then 32s + 2l + 1, for s in order;
 *   the k tail is one more step under lane masks (0 x 0 adds nothing);
 *   the lanes are added by one fixed tree (moe8_avx512_hsum).
 * Tiles, channel blocks, m, n0/n1 and threads only choose which accumulators
 * run side by side, never the operations of one, so a row's result is the
 * same bits alone or in any batch (batch invariance), and within the usual
 * dot-product bound ~k * 2^-24 * sum|x*w| of a double reference.
 *
 * Decode (m <= 4) streams W once: up to 8 channel rows in flight and a
 * software prefetch of the next tile's rows at the same offset (the
 * hardware prefetcher only finds a new row after it starts). Prefill walks
 * blocks of channels small enough to stay in L2 while every 4-row tile
 * passes over them.
 *
 * Does not: use vdpbf16ps (its bf16 products and order would differ), pack W.
 */
#include <immintrin.h>

#include "kernels/x86/avx512/avx512_load.h"
#include "kernels/x86/avx512/kernels_avx512.h"

#define L2_BLOCK (1024 * 1024) /* weight bytes per block of channels (L2 is 2 MB) */
#define MR 4                   /* rows per tile */
#define NC 8                   /* most channels per tile */
#define INLINE static inline __attribute__((always_inline))

/* Elements of one step: 64 bytes of a weight row. */
#define STEP(dt) ((dt) == MOE8_DT_F32 ? 16 : 32)

typedef struct {
    __mmask16 x0, x1; /* x lanes of the step's two halves (16-bit types) or one (F32) */
    __mmask32 w;      /* 16-bit weight lanes of a BF16 step */
} masks;

INLINE masks tail_masks(int rem) {
    masks m;
    m.x0 = moe8_avx512_lanes(rem);
    m.x1 = moe8_avx512_lanes(rem - 16);
    m.w = rem >= 32 ? 0xFFFFFFFFu : (__mmask32)((1u << rem) - 1);
    return m;
}

INLINE __m512 loadx(const float *p, const int full, __mmask16 m) {
    return full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

/* One step at element t of every tile row (x rows from x, weight row c at wb + c row). */
INLINE void step(__m512 acc[MR][NC], const float *x, int ldx, const char *wb, size_t row, int t,
                 const int mr, const int nc, const int dt, const int full, masks mk) {
    if (dt == MOE8_DT_BF16) {
        const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        __m512 xv[MR];
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) {
            const float *p = x + (size_t)r * ldx + t;
            xv[r] = _mm512_permutex2var_ps(loadx(p, full, mk.x0), ie, loadx(p + 16, full, mk.x1));
        }
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) {
            const void *p = wb + (size_t)c * row + (size_t)t * 2;
            const __m512i raw = full ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(mk.w, p);
            const __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(raw, 16));
#pragma GCC unroll 4
            for (int r = 0; r < mr; r++) acc[r][c] = _mm512_fmadd_ps(xv[r], we, acc[r][c]);
        }
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) {
            const float *p = x + (size_t)r * ldx + t;
            xv[r] = _mm512_permutex2var_ps(loadx(p, full, mk.x0), io, loadx(p + 16, full, mk.x1));
        }
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) {
            const void *p = wb + (size_t)c * row + (size_t)t * 2;
            const __m512 wo = _mm512_castsi512_ps(
                _mm512_maskz_loadu_epi16(full ? 0xAAAAAAAAu : mk.w & 0xAAAAAAAAu, p));
#pragma GCC unroll 4
            for (int r = 0; r < mr; r++) acc[r][c] = _mm512_fmadd_ps(xv[r], wo, acc[r][c]);
        }
        return;
    }
    const int halves = dt == MOE8_DT_F32 ? 1 : 2;
#pragma GCC unroll 2
    for (int h = 0; h < halves; h++) {
        const __mmask16 mx = h ? mk.x1 : mk.x0;
        __m512 xv[MR];
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) xv[r] = loadx(x + (size_t)r * ldx + t + 16 * h, full, mx);
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) {
            const __m512 wv = full ? moe8_avx512_load16(wb + (size_t)c * row, (size_t)t + 16 * h, dt)
                                   : moe8_avx512_load16_mask(wb + (size_t)c * row, (size_t)t + 16 * h, mx, dt);
#pragma GCC unroll 4
            for (int r = 0; r < mr; r++) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
        }
    }
}

/* y[r][j0+c] for r < mr, c < nc; pf: prefetch the next nc rows of W. */
INLINE void tile(float *y, int ldy, const float *x, int ldx, const void *w, int ldw, int j0, int k,
                 const int mr, const int nc, const int dt, const int pf) {
    const size_t es = dt == MOE8_DT_F32 ? 4 : 2, row = (size_t)ldw * es;
    const int se = STEP(dt);
    const char *wb = (const char *)w + (size_t)j0 * row;
    __m512 acc[MR][NC];
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) acc[r][c] = _mm512_setzero_ps();
    const masks full = {0, 0, 0};
    int t = 0;
    for (; t + se <= k; t += se) {
        if (pf) {
#pragma GCC unroll 8
            for (int c = 0; c < nc; c++) _mm_prefetch(wb + (nc + c) * row + (size_t)t * es, _MM_HINT_T0);
        }
        step(acc, x, ldx, wb, row, t, mr, nc, dt, 1, full);
    }
    if (t < k) step(acc, x, ldx, wb, row, t, mr, nc, dt, 0, tail_masks(k - t));
#pragma GCC unroll 4
    for (int r = 0; r < mr; r++)
#pragma GCC unroll 8
        for (int c = 0; c < nc; c++) y[(size_t)r * ldy + j0 + c] = moe8_avx512_hsum(acc[r][c]);
}

/* Channels per tile by rows per tile: 8 streams for 1-2 rows, 24 accumulators at 3-4. */
#define NC_OF(mr) ((mr) <= 2 ? 8 : 6)

typedef void (*span_fn)(float *y, int ldy, const float *x, int ldx, const void *w, int ldw, int j0,
                        int j1, int k);

/* Channels [j0, j1) for mr rows: tiles of NC_OF(mr) channels, then one tile
 * of the rest. With pf the tiles prefetch, and the rest goes to `plain` (this
 * span without prefetch), so each rest tile is compiled once. */
INLINE void span(float *y, int ldy, const float *x, int ldx, const void *w, int ldw, int j0, int j1,
                 int k, const int mr, const int dt, const int pf, span_fn plain) {
    const int ncmax = NC_OF(mr);
    int j = j0;
    for (; j + ncmax <= j1; j += ncmax) tile(y, ldy, x, ldx, w, ldw, j, k, mr, ncmax, dt, pf);
    if (pf) {
        if (j < j1) plain(y, ldy, x, ldx, w, ldw, j, j1, k);
        return;
    }
    switch (j1 - j) {
    case 7: if (ncmax > 7) tile(y, ldy, x, ldx, w, ldw, j, k, mr, 7, dt, 0); break;
    case 6: if (ncmax > 6) tile(y, ldy, x, ldx, w, ldw, j, k, mr, 6, dt, 0); break;
    case 5: tile(y, ldy, x, ldx, w, ldw, j, k, mr, 5, dt, 0); break;
    case 4: tile(y, ldy, x, ldx, w, ldw, j, k, mr, 4, dt, 0); break;
    case 3: tile(y, ldy, x, ldx, w, ldw, j, k, mr, 3, dt, 0); break;
    case 2: tile(y, ldy, x, ldx, w, ldw, j, k, mr, 2, dt, 0); break;
    case 1: tile(y, ldy, x, ldx, w, ldw, j, k, mr, 1, dt, 0); break;
    default: break;
    }
}

/* One out-of-line span per (rows, dtype, prefetch), reached through a table:
 * inlined into one function they made this file the longest compile of the
 * library (41 s under the sanitizers, 14 s at -O2; now 12 and 6), and the
 * code each runs is the same. */
#define SPAN_FN(MR_, DT_, PF_, PLAIN)                                                              \
    static __attribute__((noinline)) void span_##MR_##_##DT_##_##PF_(                              \
        float *y, int ldy, const float *x, int ldx, const void *w, int ldw, int j0, int j1, int k) { \
        span(y, ldy, x, ldx, w, ldw, j0, j1, k, MR_, MOE8_DT_##DT_, PF_, PLAIN);                   \
    }
#define SPAN_FNS(MR_, DT_) SPAN_FN(MR_, DT_, 0, NULL) SPAN_FN(MR_, DT_, 1, span_##MR_##_##DT_##_0)
#define SPAN_DT(DT_) SPAN_FNS(1, DT_) SPAN_FNS(2, DT_) SPAN_FNS(3, DT_) SPAN_FNS(4, DT_)
#define SPAN_ROW(DT_, PF_) {span_1_##DT_##_##PF_, span_2_##DT_##_##PF_, span_3_##DT_##_##PF_, span_4_##DT_##_##PF_}
SPAN_DT(F32)
SPAN_DT(F16)
SPAN_DT(BF16)
/* [F32, F16, BF16][prefetch][rows - 1] */
static const span_fn spans[3][2][MR] = {
    {SPAN_ROW(F32, 0), SPAN_ROW(F32, 1)},
    {SPAN_ROW(F16, 0), SPAN_ROW(F16, 1)},
    {SPAN_ROW(BF16, 0), SPAN_ROW(BF16, 1)},
};

void moe8_gemm_f32_wf_avx512(float *y, int ldy, const float *x, int ldx, const void *w,
                             moe8_dtype wdt, int ldw, int m, int n0, int n1, int k) {
#if MOE8_KERNEL_ENTRY_CHECK
    moe8_gemm_f32_wf_check(y, ldy, x, ldx, w, wdt, ldw, m, n0, n1, k);
#endif
    if (m <= 0 || n1 <= n0) return;
    if (wdt != MOE8_DT_F32 && wdt != MOE8_DT_F16 && wdt != MOE8_DT_BF16) {
        moe8_gemm_f32_wf_ref(y, ldy, x, ldx, w, wdt, ldw, m, n0, n1, k);
        return;
    }
    const span_fn(*fn)[MR] = spans[wdt == MOE8_DT_F32 ? 0 : wdt == MOE8_DT_F16 ? 1 : 2];
    if (m <= MR) { /* decode: every weight once, streamed */
        fn[1][m - 1](y, ldy, x, ldx, w, ldw, n0, n1, k);
        return;
    }
    /* prefill: blocks of channels that stay in L2 while every row tile passes */
    const size_t row_bytes = (size_t)k * (wdt == MOE8_DT_F32 ? 4 : 2) + 1;
    const int nc = NC_OF(MR);
    const int nb = row_bytes >= (size_t)(L2_BLOCK / nc) ? nc : nc * (int)(L2_BLOCK / row_bytes / nc);
    for (int j = n0; j < n1; j += nb) {
        const int j1 = n1 - j < nb ? n1 : j + nb;
        for (int r0 = 0; r0 < m; r0 += MR)
            fn[0][(m - r0 < MR ? m - r0 : MR) - 1](y + (size_t)r0 * ldy, ldy, x + (size_t)r0 * ldx,
                                                   ldx, w, ldw, j, j1, k);
    }
}
