/*
 * gemm_q8_avx2.c — exact int8 x int8 -> int32 GEMM over the packed weight
 * layout k2 (qlayout.c: panels of 16 channels, K in pairs, 32 bytes per pair):
 *     acc[r][j] = sum_k xq[r][k] * W[j][k]
 * and the fused dequant epilogue of SEMANTICS §4.
 *
 * Why vpmaddwd: AVX2 has no exact 8-bit dot product (vpmaddubsw saturates to
 * int16 on full-range data). Both operands are sign-extended to int16 and
 * vpmaddwd forms int32 pair sums (|sum| <= 2*128*127, exact), vpaddd
 * accumulates. Activations are widened once per row tile into a stack
 * buffer of int32 "pairs" (x[2kk], x[2kk+1]) that the micro-kernel
 * broadcasts; each 16-byte half of a weight pair-chunk is vpmovsxbw'ed once
 * and used by every row of the tile.
 *
 * Tiling, outermost first: blocks of panels of ~256 KB (stay in L2 while every
 * row tile passes over them; one row tile needs no blocks); rows in tiles of
 * MR=6 (12 ymm accumulators = 6 rows x 16 channels); one panel at a time; K
 * in chunks of KCP pairs (the activation buffer stays in L1; when K <= 2*KCP
 * it is filled once per row tile and block). One or two rows (decode: most
 * experts see one token) take a path that walks 4 (3) panels side by side so
 * several weight streams are in flight, each software-prefetched 2 KB ahead.
 * The other tiles prefetch into L2 as they go (a second stream): with several
 * row tiles, the next block, spread evenly over the tiles of this one, so DRAM
 * streams during the whole block and not only during its first tile (only the
 * first block's first tile reads DRAM); a lone tile, the next panel. Results
 * do not depend on the tiling (integer sums), so the kernels are deterministic
 * and the caller may split [n0, n1) across threads at panel boundaries.
 * Does not allocate; uses ~24 KB of stack.
 */
#include <immintrin.h>
#include <string.h>

#include "core/core.h"
#include "kernels/x86/avx2/kernels_avx2.h"

#define NR 16 /* channels per panel of the k2 layout */
#define MR 6
#define KCP 1024 /* k pairs per chunk: the int16 buffer is MR x KCP x 4 = 24 KB */

#define L2_BLOCK (256 * 1024) /* weight bytes per block of panels */
#define PF_DIST 1024 /* bytes ahead in the (sequential) weight stream */
#define PF_DECODE 2048 /* bytes ahead in each stream of the few-row path */
#define INLINE static inline __attribute__((always_inline))

/* Widen rows r0..r0+mr of xq, pairs kk0..kk0+nkk, into xa[r][2*KCP] int16. */
static void widen_rows(int16_t *xa, const int8_t *xq, int ldq, int mr, int kk0, int nkk) {
    for (int r = 0; r < mr; r++) {
        const int8_t *src = xq + (size_t)r * ldq + 2 * (size_t)kk0;
        int16_t *dst = xa + (size_t)r * 2 * KCP;
        int j = 0;
        for (; j + 16 <= 2 * nkk; j += 16)
            _mm256_storeu_si256((__m256i *)(dst + j),
                                _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(src + j))));
        for (; j < 2 * nkk; j++) dst[j] = src[j];
    }
}

/* One pair step: acc[2r], acc[2r+1] += rows x channels 0-7, 8-15 at pair kk. */
INLINE void step(__m256i *acc, const int16_t *xa, const int8_t *wp, int kk, const int mr) {
    const int8_t *wk = wp + 32 * (size_t)kk;
    __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wk));
    __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(wk + 16)));
#pragma GCC unroll 6
    for (int r = 0; r < mr; r++) {
        int32_t pair;
        memcpy(&pair, xa + (size_t)r * 2 * KCP + 2 * kk, sizeof pair);
        __m256i b = _mm256_set1_epi32(pair);
        acc[2 * r] = _mm256_add_epi32(acc[2 * r], _mm256_madd_epi16(w0, b));
        acc[2 * r + 1] = _mm256_add_epi32(acc[2 * r + 1], _mm256_madd_epi16(w1, b));
    }
}

/* acc (+)= one panel over nkk pairs (of a panel of n_kk). Besides the near
 * prefetch, the same offset of the next panel is prefetched into L2: a second
 * DRAM stream, which the few-row tiles need to approach full bandwidth.
 * One pair per iteration on purpose: with two, GCC reassociates the adds
 * across pairs and spills accumulators. */
INLINE void micro(__m256i *acc, const int16_t *xa, const int8_t *wp, int nkk, const int8_t *pf,
                  size_t pfs, const int mr) {
    for (int kk = 0; kk < nkk; kk++) {
        _mm_prefetch((const char *)(wp + 32 * (size_t)kk + PF_DIST), _MM_HINT_T0);
        _mm_prefetch((const char *)(pf + pfs * (size_t)kk), _MM_HINT_T1);
        step(acc, xa, wp, kk, mr);
    }
}

/* Output of one (row tile, panel): int32 sums or the dequantized floats. */
typedef struct {
    int32_t *acc; int ldc;                       /* i32 variant, or NULL */
    float *y; int ldy;                           /* f32 variant */
    const float *sx; const int32_t *xsum;        /* [mr] of this tile */
} tile_out;

INLINE void store_tile(const tile_out *o, const moe8_qmat *w, const __m256i *acc, int mr, int j0,
                       int nc) {
    for (int r = 0; r < mr; r++) {
        __m256i a[2] = {acc[2 * r], acc[2 * r + 1]};
        if (o->acc) {
            int32_t *dst = o->acc + (size_t)r * o->ldc + j0;
            if (nc == 16) {
                _mm256_storeu_si256((__m256i *)dst, a[0]);
                _mm256_storeu_si256((__m256i *)(dst + 8), a[1]);
            } else {
                int32_t tmp[16];
                memcpy(tmp, a, sizeof tmp);
                memcpy(dst, tmp, (size_t)nc * sizeof *dst);
            }
            continue;
        }
        float tmp[16], *dst = o->y + (size_t)r * o->ldy + j0;
        float *out = nc == 16 ? dst : tmp;
        const __m256 vsx = _mm256_set1_ps(o->sx[r]);
        for (int h = 0; h < 2; h++) {
            __m256i v = a[h];
            if (w->offset) {
                __m256i off;
                if (nc == 16) {
                    off = _mm256_loadu_si256((const __m256i *)(w->offset + j0 + 8 * h));
                } else { /* offset[] has only n entries */
                    int32_t t[8] = {0};
                    for (int c = 0; c < 8 && 8 * h + c < nc; c++) t[c] = w->offset[j0 + 8 * h + c];
                    off = _mm256_loadu_si256((const __m256i *)t);
                }
                v = _mm256_add_epi32(v, _mm256_mullo_epi32(off, _mm256_set1_epi32(o->xsum[r])));
            }
            __m256 s;
            if (nc == 16) {
                s = _mm256_loadu_ps(w->scale + j0 + 8 * h);
            } else {
                float t[8] = {0};
                for (int c = 0; c < 8 && 8 * h + c < nc; c++) t[c] = w->scale[j0 + 8 * h + c];
                s = _mm256_loadu_ps(t);
            }
            _mm256_storeu_ps(out + 8 * h, _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(v), vsx), s));
        }
        if (nc < 16) memcpy(dst, tmp, (size_t)nc * sizeof *dst);
    }
}

/* Few-row (decode) tile: np panels side by side, i.e. np sequential weight
 * streams, each prefetched PF_DECODE bytes ahead; one stream alone leaves
 * DRAM bandwidth unused. Needs the whole K in xa (one chunk). */
INLINE void multi_panel(const tile_out *o, const int16_t *xa, const moe8_qmat *w, int j0,
                        const int mr, const int np) {
    const int n_kk = w->k_pad / 2;
    const int8_t *wp = w->data + (size_t)(j0 / NR) * n_kk * 32;
    __m256i acc[2 * MR];
#pragma GCC unroll 12
    for (int i = 0; i < 2 * mr * np; i++) acc[i] = _mm256_setzero_si256();
    for (int kk = 0; kk < n_kk; kk++) {
#pragma GCC unroll 4
        for (int p = 0; p < np; p++) {
            const int8_t *wk = wp + ((size_t)p * n_kk + kk) * 32;
            _mm_prefetch((const char *)(wk + PF_DECODE), _MM_HINT_T0);
            __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wk));
            __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(wk + 16)));
#pragma GCC unroll 2
            for (int r = 0; r < mr; r++) {
                int32_t pair;
                memcpy(&pair, xa + (size_t)r * 2 * KCP + 2 * kk, sizeof pair);
                __m256i b = _mm256_set1_epi32(pair);
                __m256i *a = acc + 2 * (p * mr + r);
                a[0] = _mm256_add_epi32(a[0], _mm256_madd_epi16(w0, b));
                a[1] = _mm256_add_epi32(a[1], _mm256_madd_epi16(w1, b));
            }
        }
    }
    for (int p = 0; p < np; p++) {
        __m256i t[2 * MR];
        for (int r = 0; r < mr; r++) {
            t[2 * r] = acc[2 * (p * mr + r)];
            t[2 * r + 1] = acc[2 * (p * mr + r) + 1];
        }
        store_tile(o, w, t, mr, j0 + p * NR, NR);
    }
}

/* Far (L2) prefetch of a row tile: base == NULL: the next panel, as we go;
 * else panel i of the tile prefetches [base + i*len, +len) at stride bytes per pair. */
typedef struct { const int8_t *base; size_t len, stride; } pf_plan;

/* Rows [0, mr) (mr <= MR) of the tile, panels covering [n0, n1). */
INLINE void row_tile(const tile_out *o, const int8_t *xq, int ldq, const moe8_qmat *w, int n0,
                     int n1, const pf_plan *pp, const int mr) {
    int16_t xa[MR * 2 * KCP] __attribute__((aligned(64)));
    const int n_kk = w->k_pad / 2, n_chunks = (n_kk + KCP - 1) / KCP;
    int j0 = n0;
    if (mr <= 2 && n_chunks == 1) {
        const int np = mr == 1 ? 4 : 3;
        widen_rows(xa, xq, ldq, mr, 0, n_kk);
        for (; j0 + np * NR <= n1; j0 += np * NR) {
            if (mr == 1) multi_panel(o, xa, w, j0, 1, 4);
            else multi_panel(o, xa, w, j0, 2, 3);
        }
    }
    for (; j0 < n1; j0 += NR) {
        const int8_t *wp = w->data + (size_t)(j0 / NR) * n_kk * 32;
        __m256i acc[2 * MR];
#pragma GCC unroll 12
        for (int i = 0; i < 2 * mr; i++) acc[i] = _mm256_setzero_si256();
        for (int c = 0; c < n_chunks; c++) {
            const int kk0 = c * KCP, nkk = n_kk - kk0 < KCP ? n_kk - kk0 : KCP;
            if (n_chunks > 1 || j0 == n0) widen_rows(xa, xq, ldq, mr, kk0, nkk);
            const int8_t *pf = wp + 32 * (size_t)n_kk;
            size_t pfs = 32;
            if (pp->base) {
                pf = pp->base + (size_t)((j0 - n0) / NR) * pp->len;
                pfs = pp->stride;
            }
            micro(acc, xa, wp + 32 * (size_t)kk0, nkk, pf + pfs * (size_t)kk0, pfs, mr);
        }
        store_tile(o, w, acc, mr, j0, n1 - j0 < NR ? n1 - j0 : NR);
    }
}

/* Where row tile ti of the nt micro() tiles over the block [n0, n1) prefetches:
 * the next block [n1, n2) is spread evenly over tiles first..nt-1, so it is in
 * L2 when its turn comes and DRAM streams during the whole block, not only
 * during its first tile. Tile 0 of the first block (first = 1) streams its
 * own weights (next panel as it goes), as does a lone tile. */
static pf_plan plan_prefetch(const moe8_qmat *w, int n0, int n1, int n2, int first, int ti,
                             int nt) {
    const int n_kk = w->k_pad / 2, np = (n1 - n0) / NR, spread = nt - first;
    const size_t panel_bytes = (size_t)n_kk * 32;
    const size_t next_bytes = (size_t)((n2 - n1 + NR - 1) / NR) * panel_bytes;
    pf_plan pp = {NULL, 0, 0};
    if (nt > 1 && ti >= first && ti < nt && next_bytes > 0 && np > 0) {
        pp.len = (next_bytes + (size_t)spread * np - 1) / ((size_t)spread * np);
        pp.stride = (pp.len + n_kk - 1) / n_kk;
        pp.base = w->data + (size_t)(n1 / NR) * panel_bytes + (size_t)(ti - first) * np * pp.len;
    }
    return pp;
}

/* All row tiles over the block of panels [n0, n1); [n1, n2) is the next block. */
static void tile_rows(tile_out o, const int8_t *xq, int ldq, const moe8_qmat *w, int m, int n0,
                      int n1, int n2, int first) {
    /* tiles that go through micro(): all but a 1-2 row remainder of one chunk */
    const int rem = m % MR, nt = m / MR + (rem > 2 || (rem > 0 && w->k_pad / 2 > KCP));
    for (int r0 = 0; r0 < m; r0 += MR) {
        const pf_plan pp = plan_prefetch(w, n0, n1, n2, first, r0 / MR, nt);
        tile_out t = o;
        const int8_t *xr = xq + (size_t)r0 * ldq;
        if (t.acc) t.acc += (size_t)r0 * t.ldc;
        else { t.y += (size_t)r0 * t.ldy; t.sx += r0; t.xsum += r0; }
        switch (m - r0 < MR ? m - r0 : MR) {
        case 1: row_tile(&t, xr, ldq, w, n0, n1, &pp, 1); break;
        case 2: row_tile(&t, xr, ldq, w, n0, n1, &pp, 2); break;
        case 3: row_tile(&t, xr, ldq, w, n0, n1, &pp, 3); break;
        case 4: row_tile(&t, xr, ldq, w, n0, n1, &pp, 4); break;
        case 5: row_tile(&t, xr, ldq, w, n0, n1, &pp, 5); break;
        default: row_tile(&t, xr, ldq, w, n0, n1, &pp, 6); break;
        }
    }
}

/* Blocks of panels small enough that one block and the next stay in L2 while
 * every row tile passes over the first; one row tile needs no blocks. */
static void run(tile_out o, const int8_t *xq, int ldq, const moe8_qmat *w, int m, int n0, int n1) {
    const size_t panel_bytes = (size_t)w->k_pad * NR;
    int nb = NR * (panel_bytes >= L2_BLOCK ? 1 : (int)(L2_BLOCK / panel_bytes));
    if (m <= MR) nb = n1 - n0;
    for (int j = n0; j < n1; j += nb) {
        const int e = n1 - j < nb ? n1 : j + nb;
        tile_rows(o, xq, ldq, w, m, j, e, n1 - e < nb ? n1 : e + nb, j == n0);
    }
}

void moe8_gemm_q8_i32_avx2(int32_t *acc, int ldc, const int8_t *xq, int ldq, const moe8_qmat *w,
                           int m, int n0, int n1) {
    tile_out o = {acc, ldc, NULL, 0, NULL, NULL};
    MOE8_ASSERT(w->layout == &moe8_qlayout_k2);
    run(o, xq, ldq, w, m, n0, n1);
}

void moe8_gemm_q8_f32_avx2(float *y, int ldy, const int8_t *xq, int ldq, const float *sx,
                           const int32_t *xsum, const moe8_qmat *w, int m, int n0, int n1) {
    tile_out o = {NULL, 0, y, ldy, sx, xsum};
    MOE8_ASSERT(w->layout == &moe8_qlayout_k2);
    run(o, xq, ldq, w, m, n0, n1);
}
