/*
 * gemm_q4_avx2.c — exact int4 x int8 -> int32 GEMM (W4A8, SEMANTICS §4b)
 * over the packed int4 layout q4k8 (qlayout.c: panels of 16 channels, K in
 * groups of 8, 64 bytes a group: bytes 4c..4c+3 are channel c's, the low
 * nibbles quad 2g, the high nibbles quad 2g + 1, each code stored as W + 8):
 *     acc[r][j] = sum_k xq[r][k] * W[j][k]
 * and the dequant epilogue of SEMANTICS §4.
 *
 * Why vpmaddubsw is exact here: it multiplies unsigned by signed bytes and
 * adds pairs into int16 with saturation; with the unsigned operand a nibble
 * (0..15) a pair is at most 2 * 15 * 128 = 3840 in magnitude, so it never
 * saturates (the int8 path cannot use it: SEMANTICS §4). The two quads of a
 * group add as int16 (|.| <= 7680), vpmaddwd by 1s widens to int32 quad
 * sums. The lanes sum (W + 8) x, and the accumulators start at -8 * rowsum
 * (row sum of xq over k_pad = round_up(k, 8)); past k the codes are 8
 * (W = 0), so the activation tail cancels. Exact modulo 2^32, true result
 * in int32.
 *
 * Nibbles are unpacked in registers (and 0x0f; srl 4 + and). Tiles: one row
 * x 4 panels (8 ymm accumulators) or two rows x 2 panels (blocks of
 * panels of ~L2_BLOCK bytes stay in L2 while every row pair passes), named registers;
 * each weight load serves every row of the tile. Integer sums: the tiling
 * never changes a result. Writes only rows < m and columns [n0, n1); n0 a
 * multiple of 16. No allocation.
 */
#include <immintrin.h>
#include <string.h>

#include "core/core.h"
#include "kernels/x86/avx2/kernels_avx2.h"

#define NR 16
#define PF_DIST 1024
#define L2_BLOCK (256 * 1024)
#define INLINE static inline __attribute__((always_inline))

typedef struct {
    int32_t *acc; int ldc;
    float *y; int ldy;
    const float *sx; const int32_t *xsum;
} tile_out;

/* Row r's 16 sums (lo: channels 0-7, hi: 8-15) at columns j..j+nc. */
INLINE void store16(const tile_out *o, const moe8_qmat *w, __m256i lo, __m256i hi, int r, int j,
                    int nc) {
    int32_t v[16];
    _mm256_storeu_si256((__m256i *)v, lo);
    _mm256_storeu_si256((__m256i *)(v + 8), hi);
    if (o->acc) {
        memcpy(o->acc + (size_t)r * o->ldc + j, v, (size_t)nc * sizeof(int32_t));
        return;
    }
    float *y = o->y + (size_t)r * o->ldy + j;
    const float sx = o->sx[r];
    for (int c = 0; c < nc; c++) {
        int32_t a = v[c];
        if (w->offset) a += w->offset[j + c] * o->xsum[r];
        y[c] = ((float)a * sx) * w->scale[j + c];
    }
}

static int32_t row_sum(const int8_t *x, int n) {
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256i s = _mm256_setzero_si256();
    int j = 0;
    for (; j + 32 <= n; j += 32) /* 1 x x pairs: |.| <= 256, no saturation */
        s = _mm256_add_epi32(s, _mm256_madd_epi16(
            _mm256_maddubs_epi16(ones8, _mm256_loadu_si256((const __m256i *)(x + j))), ones16));
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    int32_t t = _mm_cvtsi128_si32(h);
    for (; j < n; j++) t += x[j];
    return t;
}

#define FOR_P(X, r) X(r, 0) X(r, 1) X(r, 2) X(r, 3)
#define FOR_RP(X) FOR_P(X, 0) FOR_P(X, 1)
#define USED(r, p) ((r) < mr && (p) < np)

/* Rows [0, mr) (mr <= 2) x panels [j0/16, +np) (np <= 4, mr * np <= 4). */
INLINE void tile(const tile_out *o, const int8_t *xq, int ldq, const int32_t *rs,
                 const moe8_qmat *w, int j0, int n1, const int mr, const int np) {
    const int n_g = w->k_pad / 8;
    const size_t ps = (size_t)n_g * 64;
    const uint8_t *wk = (const uint8_t *)w->data + (size_t)(j0 / NR) * ps;
    const __m256i zero = _mm256_setzero_si256(), low4 = _mm256_set1_epi8(0x0f);
    const __m256i ones16 = _mm256_set1_epi16(1);
    const __m256i bias0 = _mm256_set1_epi32((int32_t)(0u - 8u * (uint32_t)rs[0]));
    const __m256i bias1 = mr > 1 ? _mm256_set1_epi32((int32_t)(0u - 8u * (uint32_t)rs[1])) : zero;
#define INIT(r, p) __m256i a##r##p##l = USED(r, p) ? bias##r : zero, a##r##p##h = a##r##p##l;
    FOR_RP(INIT)
    for (int g = 0; g < n_g; g++, wk += 64) {
        int32_t q[4] = {0, 0, 0, 0};
        memcpy(&q[0], xq + 8 * (size_t)g, 4);
        memcpy(&q[1], xq + 8 * (size_t)g + 4, 4);
        if (mr > 1) {
            memcpy(&q[2], xq + (size_t)ldq + 8 * (size_t)g, 4);
            memcpy(&q[3], xq + (size_t)ldq + 8 * (size_t)g + 4, 4);
        }
        const __m256i bl0 = _mm256_set1_epi32(q[0]), bh0 = _mm256_set1_epi32(q[1]);
        const __m256i bl1 = _mm256_set1_epi32(q[2]), bh1 = _mm256_set1_epi32(q[3]);
#define MAC(r, p) if (USED(r, p)) { \
            a##r##p##l = _mm256_add_epi32(a##r##p##l, _mm256_madd_epi16(_mm256_add_epi16( \
                _mm256_maddubs_epi16(l0, bl##r), _mm256_maddubs_epi16(h0, bh##r)), ones16)); \
            a##r##p##h = _mm256_add_epi32(a##r##p##h, _mm256_madd_epi16(_mm256_add_epi16( \
                _mm256_maddubs_epi16(l1, bl##r), _mm256_maddubs_epi16(h1, bh##r)), ones16)); \
        }
#define PANEL(p) if ((p) < np) { \
            const uint8_t *b = wk + (p) * ps; \
            _mm_prefetch((const char *)(b + PF_DIST), _MM_HINT_T0); \
            const __m256i v0 = _mm256_loadu_si256((const __m256i *)b); \
            const __m256i v1 = _mm256_loadu_si256((const __m256i *)(b + 32)); \
            const __m256i l0 = _mm256_and_si256(v0, low4); \
            const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), low4); \
            const __m256i l1 = _mm256_and_si256(v1, low4); \
            const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), low4); \
            MAC(0, p) MAC(1, p) \
        }
        PANEL(0) PANEL(1) PANEL(2) PANEL(3)
    }
#define STORE(r, p) if (USED(r, p)) { \
        const int j = j0 + (p) * NR; \
        store16(o, w, a##r##p##l, a##r##p##h, r, j, n1 - j < NR ? n1 - j : NR); \
    }
    FOR_RP(STORE)
}

/* mr (1 or 2) rows over the panels covering [ja, jb): one row 4 panels at a
 * time, two rows 2 (then the rest). */
INLINE void rows(const tile_out *o, const int8_t *xq, int ldq, const int32_t *rs,
                 const moe8_qmat *w, int ja, int jb, const int mr) {
    const int npm = mr == 1 ? 4 : 2;
    for (int j0 = ja; j0 < jb;) {
        const int left = (jb - j0 + NR - 1) / NR, np = left < npm ? left : npm;
        if (mr == 1) {
            switch (np) {
            case 1: tile(o, xq, ldq, rs, w, j0, jb, 1, 1); break;
            case 2: tile(o, xq, ldq, rs, w, j0, jb, 1, 2); break;
            case 3: tile(o, xq, ldq, rs, w, j0, jb, 1, 3); break;
            default: tile(o, xq, ldq, rs, w, j0, jb, 1, 4); break;
            }
        } else if (np == 1) {
            tile(o, xq, ldq, rs, w, j0, jb, 2, 1);
        } else {
            tile(o, xq, ldq, rs, w, j0, jb, 2, 2);
        }
        j0 += np * NR;
    }
}

static void run(const tile_out *o, const int8_t *xq, int ldq, const moe8_qmat *w, int m, int n0,
                int n1) {
    const int k_pad = w->k_pad;
    if (m <= 0 || n1 <= n0) return;
    const size_t panel_bytes = (size_t)k_pad / 2 * NR;
    int nb = NR * (panel_bytes >= L2_BLOCK ? 1 : (int)(L2_BLOCK / panel_bytes));
    if (m <= 2) nb = n1 - n0;
    for (int ja = n0; ja < n1; ja += nb) {
        const int jb = n1 - ja < nb ? n1 : ja + nb;
        for (int r0 = 0; r0 < m; r0 += 2) {
            const int mr = m - r0 < 2 ? 1 : 2;
            const int8_t *xr = xq + (size_t)r0 * ldq;
            tile_out t = *o;
            int32_t rs[2] = {0, 0};
            if (t.acc) t.acc += (size_t)r0 * t.ldc;
            else { t.y += (size_t)r0 * t.ldy; t.sx += r0; t.xsum += r0; }
            for (int r = 0; r < mr; r++) rs[r] = row_sum(xr + (size_t)r * ldq, k_pad);
            if (mr == 1) rows(&t, xr, ldq, rs, w, ja, jb, 1);
            else rows(&t, xr, ldq, rs, w, ja, jb, 2);
        }
    }
}

void moe8_gemm_q4_i32_avx2(int32_t *acc, int ldc, const int8_t *xq, int ldq, const moe8_qmat *w,
                           int m, int n0, int n1) {
    const tile_out o = {acc, ldc, NULL, 0, NULL, NULL};
    MOE8_ASSERT(w->layout == &moe8_qlayout_q4k8);
    run(&o, xq, ldq, w, m, n0, n1);
}

void moe8_gemm_q4_f32_avx2(float *y, int ldy, const int8_t *xq, int ldq, const float *sx,
                           const int32_t *xsum, const moe8_qmat *w, int m, int n0, int n1) {
    const tile_out o = {NULL, 0, y, ldy, sx, xsum};
    MOE8_ASSERT(w->layout == &moe8_qlayout_q4k8);
    run(&o, xq, ldq, w, m, n0, n1);
}
