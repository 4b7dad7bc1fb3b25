/*
 * attn_avx512.c — flash attention of a tile of queries over the paged KV
 * cache (kernels.h moe8_flash_attn_fn), AVX-512F + FMA; F16 K/V widened with
 * vcvtph2ps, BF16 by a 16-bit shift. Any D >= 1 (a D % 16 tail runs under
 * lane masks).
 *
 * Per chunk of MOE8_ATTN_CHUNK_BLOCKS key blocks (64 positions, chunks
 * aligned to multiples of 64; each block read once for the whole tile):
 *   scores  S[r][j] = q_r.k_j as 16 lane partial sums (lane l: d = l mod 16,
 *           one FMA each, d in order; a D % 16 tail under a mask), added by
 *           the tree of moe8_avx512_hsum: lanes (l, l+8), (l, l+4), (l, l+2),
 *           (l, l+1) (a NaN's payload aside, the same whichever operand
 *           comes first). 16 keys' trees run at once as shuffles across the
 *           accumulators of keys g, g+4, g+8, g+12 (tree1/tree2), then across
 *           the 4 groups (tree34), so a block's 16 scores land in one vector;
 *           up to 8 rows x 2-4 keys of chains side by side;
 *   softmax m' = max(m, max_j scale*S), alpha = exp(m - m'), p = exp(scale*S
 *           - m') (keys a row does not see: p = 0 exactly), l = fma(l, alpha,
 *           hsum((p0 + p1) + (p2 + p3))) over the chunk's 4 vectors of keys;
 *   values  o_r = o_r alpha + sum_j p_j v_j, keys j in order, up to 6 rows
 *           x 64 dims, or a decode token's 7-8 rows x 32 dims (each V vector
 *           widened once for all of them);
 * and o_r / l at the end. K and V are read in place (F16/BF16 converted in
 * registers) when at most 12 rows share the chunk, else widened once into
 * the work buffer; a partial block's K is widened with zero rows. Every row's
 * operations are fixed by D and its own position: keys past it, in its chunk
 * or in a block the tile holds for other rows, add exact zeros (p = 0) to its
 * sums, rows never share a chain, and the grouping of rows and the widening
 * only choose which chains run side by side, so a token's attention is the
 * same bits alone (decode) or in any tile (prefill): batch invariance. A
 * decode step (1 token x G heads) is a tile of G rows. Differs from
 * moe8_flash_attn_ref by the order of the dot products (16 lanes, not 8),
 * FMA rounding and the polynomial exp (within 2 ulp): ~1e-6 relative.
 *
 * The next chunk's K and V are prefetched into L2 while a chunk computes:
 * each block is a page of its own, where the hardware's streams stop (decode
 * at context 8192 on Zen 4: attention 20-30% faster). A decode tile issues
 * them line by line beside the K and V rows it reads (tests/bench_attn.c,
 * context 8192, one thread, Zen 5 under load: 10-13% less time than one
 * burst of 512 prefetches at the chunk's start). The values step prefetches
 * each pass's own dims of the V rows ahead (a decode group's 4 passes of 32
 * dims), spread over the whole step rather than its first pass (same bench,
 * alternated runs: 669/696 -> 489/530 µs).
 *
 * Does not: write the cache, or read a key past the tile's last position.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/x86/avx512/avx512_load.h"
#include "kernels/x86/avx512/kernels_avx512.h"

#define BS MOE8_KV_BLOCK_TOKENS
#define CH MOE8_ATTN_CHUNK_BLOCKS
#define CK (CH * BS) /* keys per chunk */
#define MRA 8        /* most rows per group of scores */
#define MRV 6        /* most rows per group of values (24 accumulators of 64 dims) */
#define MRD 8        /* most rows of a decode group of values (16 accumulators of 32 dims) */
#define WIDEN_ROWS 12 /* more rows: K and V widened once per chunk */
#ifndef PF_CHUNKS
#define PF_CHUNKS 1   /* prefetch distance in chunks */
#endif
#define INLINE static inline __attribute__((always_inline))

#if BS != 16 || CH != 4
#error "attn_avx512.c assumes 16-key blocks (one zmm of keys) and 4-block chunks"
#endif

/* exp(x) for x <= 0: Cephes' range reduction x = n ln2 + r and degree-5
 * polynomial (within 2 ulp), 2^n by vscalefps; exactly 1 at 0, exactly 0
 * below -87 and at -inf, NaN for NaN (max_ps returns its second operand when
 * one is NaN). */
INLINE __m512 exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.0f);
    const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    __m512 n, r, y;
    x = _mm512_max_ps(lo, x);
    n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    y = _mm512_set1_ps(1.9875691500e-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_mov_ps((__mmask16)~under, _mm512_scalef_ps(y, n));
}

/* The lane tree of moe8_avx512_hsum over 16 dot products at once. a[c]
 * holds the 16 lane partial sums of key g + 4c (c < 4) of one row; level 1
 * adds lane l and l + 8 of two keys, level 2 lanes l and l + 4 of four:
 * 128-bit lane L of the result holds the 4 partial sums of key g + 4L. */
INLINE __m512 tree1(__m512 a, __m512 b) {
    /* [a.L0 a.L1 b.L2 b.L3] + [a.L2 a.L3 b.L0 b.L1]: a blend in place of a
     * shuffle (the FMA pipes share the shuffle unit); b's pairs add commuted,
     * the same sum */
    return _mm512_add_ps(_mm512_mask_blend_ps(0xFF00, a, b), _mm512_shuffle_f32x4(a, b, 0x4E));
}
INLINE __m512 tree2(__m512 ab, __m512 cd) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
}

/* Levels 3 (lanes l, l + 2) and 4 (l, l + 1) of w[g] = tree12 of keys g, g + 4,
 * g + 8, g + 12: the 16 sums, key j in lane j. */
INLINE __m512 tree34(const __m512 w[4]) {
    /* level 3 as tree1: [w0 0 1, w1 2 3] + [w0 2 3, w1 0 1] in each 128-bit lane */
    const __m512 z01 = _mm512_add_ps(_mm512_mask_blend_ps(0xCCCC, w[0], w[1]),
                                     _mm512_shuffle_ps(w[0], w[1], 0x4E));
    const __m512 z23 = _mm512_add_ps(_mm512_mask_blend_ps(0xCCCC, w[2], w[3]),
                                     _mm512_shuffle_ps(w[2], w[3], 0x4E));
    return _mm512_add_ps(_mm512_shuffle_ps(z01, z23, 0x88), _mm512_shuffle_ps(z01, z23, 0xDD));
}

/* ---- the chunk's K and V widened into the work buffer --------------------- */

INLINE void widen_dt(float *dst, const char *src, size_t n, const moe8_dtype dt) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, moe8_avx512_load16(src, i, dt));
    if (i < n) {
        const __mmask16 m = moe8_avx512_lanes((int)(n - i));
        _mm512_mask_storeu_ps(dst + i, m, moe8_avx512_load16_mask(src, i, m, dt));
    }
}

/* Rows [nv][D] of dtype dt -> fp32 dst[nv][D], then rows nv..n_pad zeroed. */
static void widen(float *dst, const char *src, moe8_dtype dt, int nv, int n_pad, int D) {
    if (dt == MOE8_DT_F32) widen_dt(dst, src, (size_t)nv * D, MOE8_DT_F32);
    else if (dt == MOE8_DT_F16) widen_dt(dst, src, (size_t)nv * D, MOE8_DT_F16);
    else widen_dt(dst, src, (size_t)nv * D, MOE8_DT_BF16);
    for (size_t i = (size_t)nv * D; i < (size_t)n_pad * D; i++) dst[i] = 0.0f;
}

/* ---- one tile ------------------------------------------------------------- */

typedef struct {
    float *out;
    const float *q;
    int ldo, ldq, G, D;
    int32_t pos0;
    float scale;
    float *S, *M, *L, *A;   /* [R][CK] scores then weights, [R] max, sum, rescale */
} tile;

INLINE const float *qrow(const tile *t, int r) {
    return t->q + (size_t)(r / t->G) * t->ldq + (size_t)(r % t->G) * t->D;
}
INLINE float *orow(const tile *t, int r) {
    return t->out + (size_t)(r / t->G) * t->ldo + (size_t)(r % t->G) * t->D;
}
INLINE int32_t rpos(const tile *t, int r) { return t->pos0 + r / t->G; }

/* Lane partial sums acc[i][c] of mr rows from q and nk keys at k[c]: the
 * FMA chains over d (16 lanes), the D % 16 tail under a mask (0 x 0 adds
 * nothing). */
INLINE void dots(__m512 acc[MRA][4], const float *const *q, const char *const *k, int D,
                 const int mr, const int nk, const int dt) {
    const int nfull = D / 16;
    const __mmask16 mt = moe8_avx512_lanes(D - 16 * nfull);
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int c = 0; c < nk; c++) acc[i][c] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int s = 0; s < nfull; s++) {
        __m512 kv[4];
#pragma GCC unroll 4
        for (int c = 0; c < nk; c++) kv[c] = moe8_avx512_load16(k[c], (size_t)16 * s, dt);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            const __m512 qv = _mm512_loadu_ps(q[i] + 16 * s);
#pragma GCC unroll 4
            for (int c = 0; c < nk; c++) acc[i][c] = _mm512_fmadd_ps(qv, kv[c], acc[i][c]);
        }
    }
    if (mt) {
        __m512 kv[4];
#pragma GCC unroll 4
        for (int c = 0; c < nk; c++) kv[c] = moe8_avx512_load16_mask(k[c], (size_t)16 * nfull, mt, dt);
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            const __m512 qv = _mm512_maskz_loadu_ps(mt, q[i] + 16 * nfull);
#pragma GCC unroll 4
            for (int c = 0; c < nk; c++) acc[i][c] = _mm512_fmadd_ps(qv, kv[c], acc[i][c]);
        }
    }
}

/* Raw scores S[r + i][j0 + j] of mr rows against the 16 keys of one block
 * (rows of dtype dt, row_bytes apart, from K), key group g = keys g, g+4,
 * g+8, g+12 at a time: up to 4 rows take the 4 keys together, more rows two
 * pairs one after the other (the same operations, fewer accumulators). */
INLINE void scores(const tile *t, int r, const char *K, size_t row_bytes, int j0, const int mr,
                   const int dt, const char *pf) {
    const float *q[MRA];
    __m512 w[MRA][4];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) q[i] = qrow(t, r + i);
    for (int g = 0; g < 4; g++) {
        const char *k[4];
        __m512 acc[MRA][4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) k[c] = K + (size_t)(g + 4 * c) * row_bytes;
        for (int c = 0; pf && c < 4; c++) /* the same keys of a block ahead: into L2 */
            for (size_t o = 0; o < row_bytes; o += 64)
                _mm_prefetch(pf + (size_t)(g + 4 * c) * row_bytes + o, _MM_HINT_T1);
        if (mr <= 4) {
            dots(acc, q, k, t->D, mr, 4, dt);
#pragma GCC unroll 4
            for (int i = 0; i < mr; i++)
                w[i][g] = tree2(tree1(acc[i][0], acc[i][1]), tree1(acc[i][2], acc[i][3]));
        } else {
            __m512 ab[MRA];
            dots(acc, q, k, t->D, mr, 2, dt);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) ab[i] = tree1(acc[i][0], acc[i][1]);
            dots(acc, q, k + 2, t->D, mr, 2, dt);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) w[i][g] = tree2(ab[i], tree1(acc[i][0], acc[i][1]));
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) _mm512_storeu_ps(t->S + (size_t)(r + i) * CK + j0, tree34(w[i]));
}

#define SC(dt)                                                         \
    switch (mr) {                                                      \
    case 1: scores(t, r, K, row_bytes, j0, 1, dt, pf); break;          \
    case 2: scores(t, r, K, row_bytes, j0, 2, dt, pf); break;          \
    case 3: scores(t, r, K, row_bytes, j0, 3, dt, pf); break;          \
    case 4: scores(t, r, K, row_bytes, j0, 4, dt, pf); break;          \
    case 5: scores(t, r, K, row_bytes, j0, 5, dt, pf); break;          \
    case 6: scores(t, r, K, row_bytes, j0, 6, dt, pf); break;          \
    case 7: scores(t, r, K, row_bytes, j0, 7, dt, pf); break;          \
    default: scores(t, r, K, row_bytes, j0, 8, dt, pf); break;         \
    }

/* pf: the K block whose rows are prefetched beside this block's (or NULL). */
static void scores_any(const tile *t, int r, int mr, const char *K, moe8_dtype dt, int j0,
                       const char *pf) {
    const size_t row_bytes = (size_t)t->D * (dt == MOE8_DT_F32 ? 4 : 2);
    if (dt == MOE8_DT_F32) SC(MOE8_DT_F32)
    else if (dt == MOE8_DT_F16) SC(MOE8_DT_F16)
    else SC(MOE8_DT_BF16)
}

/* The online-softmax step of row r, which sees the chunk's first c keys:
 * S[r] becomes the weights (0 for every other key). */
static void softmax_step(const tile *t, int r, int c) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY), sc = _mm512_set1_ps(t->scale);
    float *s = t->S + (size_t)r * CK;
    __m512 v[CH], mx = ninf;
#pragma GCC unroll 4
    for (int i = 0; i < CH; i++) {
        const __mmask16 m = moe8_avx512_lanes(c - 16 * i);
        v[i] = _mm512_mask_mul_ps(ninf, m, _mm512_maskz_loadu_ps(m, s + 16 * i), sc);
        mx = _mm512_max_ps(mx, v[i]);
    }
    float m_new = _mm512_reduce_max_ps(mx);
    m_new = t->M[r] > m_new ? t->M[r] : m_new;
    const __m512 vm = _mm512_set1_ps(m_new);
    const float alpha = _mm512_cvtss_f32(exp16(_mm512_set1_ps(t->M[r] - m_new)));
#pragma GCC unroll 4
    for (int i = 0; i < CH; i++) {
        v[i] = exp16(_mm512_sub_ps(v[i], vm));
        _mm512_storeu_ps(s + 16 * i, v[i]);
    }
    const float sum = moe8_avx512_hsum(_mm512_add_ps(_mm512_add_ps(v[0], v[1]),
                                                     _mm512_add_ps(v[2], v[3])));
    t->L[r] = fmaf(t->L[r], alpha, sum);
    t->M[r] = m_new;
    t->A[r] = alpha;
}

/* o_r = o_r alpha_r + sum_j p_rj v_j for mr rows from r over the chunk's
 * first nk keys in order (block b: V[b], rows of D elements of dtype dt),
 * dims [d0, d0 + 16 nd), the last vector under mask ml. */
INLINE void pv(const tile *t, int r, const char *const *V, int nk, int d0, __mmask16 ml,
               const int mr, const int nd, const int dt, const char *const *pf) {
    const int D = t->D;
    const size_t es = dt == MOE8_DT_F32 ? 4 : 2;
    __m512 acc[MRD][4];
    float *o[MRD];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        const __m512 al = _mm512_set1_ps(t->A[r + i]);
        o[i] = orow(t, r + i) + d0;
#pragma GCC unroll 4
        for (int e = 0; e < nd; e++)
            acc[i][e] = _mm512_mul_ps(e == nd - 1 ? _mm512_maskz_loadu_ps(ml, o[i] + 16 * e)
                                                  : _mm512_loadu_ps(o[i] + 16 * e), al);
    }
    for (int b = 0; b * BS < nk; b++) {
        const char *Vb = V[b] + (size_t)d0 * es;
        const float *Sb = t->S + (size_t)r * CK + b * BS;
        const int nj = nk - b * BS < BS ? nk - b * BS : BS;
        /* V of a block ahead, row j beside row j, the pass's dims only */
        const char *pfb = pf && pf[b] ? pf[b] + (size_t)d0 * es : NULL;
        for (int j = 0; j < nj; j++) {
            __m512 v[4];
            for (size_t o = 0; pfb && o < (size_t)16 * nd * es; o += 64)
                _mm_prefetch(pfb + (size_t)j * D * es + o, _MM_HINT_T1);
#pragma GCC unroll 4
            for (int e = 0; e < nd; e++)
                v[e] = e == nd - 1 ? moe8_avx512_load16_mask(Vb + (size_t)j * D * es, (size_t)16 * e, ml, dt)
                                   : moe8_avx512_load16(Vb + (size_t)j * D * es, (size_t)16 * e, dt);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) {
                const __m512 p = _mm512_set1_ps(Sb[(size_t)i * CK + j]);
#pragma GCC unroll 4
                for (int e = 0; e < nd; e++) acc[i][e] = _mm512_fmadd_ps(p, v[e], acc[i][e]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int e = 0; e < nd; e++) {
            if (e == nd - 1) _mm512_mask_storeu_ps(o[i] + 16 * e, ml, acc[i][e]);
            else _mm512_storeu_ps(o[i] + 16 * e, acc[i][e]);
        }
}

#define PV(mr, dt)                                                \
    switch (nd) {                                                 \
    case 1: pv(t, r, V, nk, d0, ml, mr, 1, dt, pf); break;        \
    case 2: pv(t, r, V, nk, d0, ml, mr, 2, dt, pf); break;        \
    case 3: pv(t, r, V, nk, d0, ml, mr, 3, dt, pf); break;        \
    default: pv(t, r, V, nk, d0, ml, mr, 4, dt, pf); break;       \
    }

/* 7 or 8 rows (a decode group): 32 dims per pass */
#define PV2(mr, dt)                                               \
    if (nd == 1) pv(t, r, V, nk, d0, ml, mr, 1, dt, pf);          \
    else pv(t, r, V, nk, d0, ml, mr, 2, dt, pf);

#define PV_MR(dt)                     \
    switch (mr) {                     \
    case 1: PV(1, dt) break;          \
    case 2: PV(2, dt) break;          \
    case 3: PV(3, dt) break;          \
    case 4: PV(4, dt) break;          \
    case 5: PV(5, dt) break;          \
    case 6: PV(6, dt) break;          \
    case 7: PV2(7, dt) break;         \
    default: PV2(8, dt) break;        \
    }

/* All of D for mr rows from r, 64 dims per pass (up to 6 rows) or 32 (7 or
 * 8: a decode group, each V vector converted once); V rows of dtype dt; each
 * pass prefetches its own dims of the V rows of pfv[b] (NULL: none), so the
 * prefetches spread over the whole values step. */
static void pv_rows(const tile *t, int r, int mr, const char *const *V, moe8_dtype dt, int nk,
                    const char *const *pfv) {
    const int step = mr > MRV ? 32 : 64;
    for (int d0 = 0; d0 < t->D; d0 += step) {
        const char *const *pf = pfv;
        const int rest = t->D - d0 < step ? t->D - d0 : step, nd = (rest + 15) / 16;
        const __mmask16 ml = moe8_avx512_lanes(rest - 16 * (nd - 1));
        if (dt == MOE8_DT_F32) PV_MR(MOE8_DT_F32)
        else if (dt == MOE8_DT_F16) PV_MR(MOE8_DT_F16)
        else PV_MR(MOE8_DT_BF16)
    }
}

/* The chunk's blocks: block b's K rows at K[b] of dtype kdt[b] (16 rows
 * readable), its V rows at V[b] of dtype vdt, n_keys keys in all. */
typedef struct {
    const char *K[CH];
    moe8_dtype kdt[CH];
    const char *V[CH];      /* all of dtype vdt */
    moe8_dtype vdt;
    int n_keys;
    const char *pf[CH];     /* the cache block PF_CHUNKS chunks ahead (its K; V v_off
                             * further), prefetched row by row as this chunk computes; NULL: none */
    size_t v_off, row_bytes;
} chunk;

/* Rows [r0, R) (each sees the chunk's first key, at position kpos0) against
 * the chunk. Rows go in balanced groups (scores: one of up to 8 rows, else
 * <= 6; values <= 6); a group skips the blocks and keys none of its rows
 * sees. */
static void chunk_step(const tile *t, int r0, int R, const chunk *ck, int32_t kpos0) {
    const int n_keys = ck->n_keys, nb = (n_keys + BS - 1) / BS;
    const char *pfv[CH];
    for (int b = 0; b < CH; b++) pfv[b] = ck->pf[b] ? ck->pf[b] + ck->v_off : NULL;
    /* scores: one group of up to 8 rows (decode: K read once), else groups of <= 6 */
    const int mrs = R - r0 <= MRA ? MRA : 6;
    for (int r = r0, mr; r < R; r += mr) {
        const int ng = (R - r + mrs - 1) / mrs;
        mr = (R - r + ng - 1) / ng;
        const int32_t seen = rpos(t, r + mr - 1) - kpos0 + 1; /* keys the group's last row sees */
        const int nbg = (int)((seen + BS - 1) / BS) < nb ? (int)((seen + BS - 1) / BS) : nb;
        for (int b = 0; b < nbg; b++)
            scores_any(t, r, mr, ck->K[b], ck->kdt[b], b * BS,
                       r == r0 && ck->kdt[b] == ck->vdt ? ck->pf[b] : NULL);
    }
    for (int r = r0; r < R; r++) {
        const int32_t c = rpos(t, r) - kpos0 + 1;
        softmax_step(t, r, c < n_keys ? (int)c : n_keys);
    }
    /* values: groups of <= 6 rows; the rows of one token (decode), up to 8,
     * in one group, so each V vector is converted once */
    const int mrv = R - r0 <= MRD && rpos(t, r0) == rpos(t, R - 1) ? MRD : MRV;
    for (int r = r0, mr; r < R; r += mr) {
        const int ng = (R - r + mrv - 1) / mrv;
        mr = (R - r + ng - 1) / ng;
        const int32_t seen = rpos(t, r + mr - 1) - kpos0 + 1;
        pv_rows(t, r, mr, ck->V, ck->vdt, seen < n_keys ? (int)seen : n_keys,
                r == r0 ? pfv : NULL);
    }
}

void moe8_flash_attn_avx512(float *out, int ldo, const float *q, int ldq, int n_tok, int G,
                            int D, int32_t pos0, float scale, const moe8_kv_pages *kv,
                            float *work) {
    const int R = n_tok * G;
    const int32_t last = pos0 + n_tok - 1;
    if (R <= 0 || D <= 0) return;
    float *Kw = work, *Vw = work + (size_t)CK * D, *S = Vw + (size_t)CK * D;
    const tile t = {out, q, ldo, ldq, G, D, pos0, scale,
                    S, S + (size_t)R * CK, S + (size_t)R * (CK + 1), S + (size_t)R * (CK + 2)};
    for (int r = 0; r < R; r++) {
        float *o = orow(&t, r);
        t.M[r] = -INFINITY;
        t.L[r] = 0.0f;
        for (int d = 0; d < D; d += 16)
            _mm512_mask_storeu_ps(o + d, moe8_avx512_lanes(D - d), _mm512_setzero_ps());
    }
    const size_t region = (size_t)BS * (size_t)D * moe8_dtype_size(kv->dt); /* K (or V) of a block */
    for (int32_t c0 = 0; c0 <= last / BS; c0 += CH) {
        chunk ck = {0};
        /* K and V PF_CHUNKS chunks ahead into L2 while this one computes:
         * blocks are pages of their own, where the hardware's streams stop.
         * Up to WIDEN_ROWS rows (decode), line by line beside the rows the
         * kernel reads (a burst of 512 prefetches filled the miss buffers and
         * stalled the loads of the chunk at hand); more rows, at the chunk's start. */
        ck.v_off = kv->v_off;
        for (int32_t b = c0 + PF_CHUNKS * CH; b < c0 + (PF_CHUNKS + 1) * CH && b <= last / BS; b++) {
            const char *kblk = kv->base + (size_t)kv->blocks[b] * kv->block_bytes;
            if (R <= WIDEN_ROWS) {
                ck.pf[b - c0 - PF_CHUNKS * CH] = kblk;
                continue;
            }
            for (size_t o = 0; o < region; o += 64) {
                _mm_prefetch(kblk + o, _MM_HINT_T1);
                _mm_prefetch(kblk + kv->v_off + o, _MM_HINT_T1);
            }
        }
        /* the first token that sees the chunk's first key */
        const int i0 = c0 * BS - pos0 > 0 ? (int)(c0 * BS - pos0) : 0;
        for (int32_t b = c0; b < c0 + CH && b <= last / BS; b++) {
            const int nb = (int)(b - c0);
            const char *kblk = kv->base + (size_t)kv->blocks[b] * kv->block_bytes;
            const int nv = last + 1 - b * BS < BS ? (int)(last + 1 - b * BS) : BS;
            /* K in place when one group of rows reads it once (converting as it
             * goes), widened once for several groups; a partial block widened
             * with zero rows, so no key past the tile's last is read */
            ck.K[nb] = kblk;
            ck.kdt[nb] = kv->dt;
            if (nv < BS || (R > WIDEN_ROWS && kv->dt != MOE8_DT_F32)) {
                float *kd = Kw + (size_t)nb * BS * D;
                widen(kd, kblk, kv->dt, nv, BS, D);
                ck.K[nb] = (const char *)kd;
                ck.kdt[nb] = MOE8_DT_F32;
            }
            /* V the same way (a partial block's rows past nv are never read) */
            ck.V[nb] = kblk + kv->v_off;
            ck.vdt = kv->dt;
            if (R > WIDEN_ROWS && kv->dt != MOE8_DT_F32) {
                float *vd = Vw + (size_t)nb * BS * D;
                widen(vd, kblk + kv->v_off, kv->dt, nv, nv, D);
                ck.V[nb] = (const char *)vd;
                ck.vdt = MOE8_DT_F32;
            }
            ck.n_keys = nb * BS + nv;
        }
        chunk_step(&t, i0 * G, R, &ck, c0 * BS);
    }
    for (int r = 0; r < R; r++) {
        float *o = orow(&t, r);
        const __m512 l = _mm512_set1_ps(t.L[r]);
        for (int d = 0; d < D; d += 16) {
            const __mmask16 m = moe8_avx512_lanes(D - d);
            _mm512_mask_storeu_ps(o + d, m, _mm512_div_ps(_mm512_maskz_loadu_ps(m, o + d), l));
        }
        if (kv->stats) {
            kv->stats[2 * r] = t.M[r];
            kv->stats[2 * r + 1] = t.L[r];
        }
    }
}

size_t moe8_attn_work_floats_avx512(int D, int rows) {
    /* Kt [CK][D] and widened V [CK][D], then S [rows][CK], M, L, A [rows]:
     * the layout moe8_attn_work_floats() describes. */
    const size_t n = 2 * (size_t)CK * (size_t)D + ((size_t)CK + 3) * (size_t)rows;
    return (n + 15) / 16 * 16;
}
