/*
 * attn_avx2.c — flash attention of a tile of queries over the paged KV cache
 * (kernels.h moe8_flash_attn_fn), AVX2 + FMA; F16 K/V widened with F16C,
 * BF16 by a 16-bit shift.
 *
 * Per chunk of MOE8_ATTN_CHUNK_BLOCKS key blocks (64 positions, chunks
 * aligned to multiples of 64; each block read once for the whole tile;
 * F16/BF16 widened once into the work buffer, F32 read in place):
 *   scores  S[r][j] = scale * q_r.k_j   2 rows x 4 keys at a time, 8 lane
 *           partial sums per pair reduced as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))
 *   softmax m' = max(m, max_j S), alpha = exp(m - m'), p = exp(S - m'),
 *           l = l alpha + sum p (masked keys: p = 0 exactly), once per chunk
 *   values  o_r = o_r alpha + sum_j p_j v_j, j in order, up to 6 rows x 16 dims
 * One softmax step and one rescale of the accumulators per 64 keys instead of
 * per 16 is what makes the chunk: they cost as much as the dot products at 16.
 * and o_r / l at the end. Every row's operations are fixed by D and its own
 * position (masked keys add exact zeros), so a row's result is the same
 * whatever rows share its tile. Differs from moe8_flash_attn_ref by FMA
 * rounding and the polynomial exp (within 2 ulp): ~1e-6 relative.
 *
 * Decode (R <= 8) prefetches the next chunk's K and V rows into L2 beside
 * the keys it reads (few_scores).
 *
 * Does not: handle D % 8 != 0 (the reference runs those), or write the cache.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/x86/avx2/avx2_load.h"
#include "kernels/x86/avx2/kernels_avx2.h"

#define BS MOE8_KV_BLOCK_TOKENS
#define CH MOE8_ATTN_CHUNK_BLOCKS
#define CK (CH * BS) /* keys per chunk */
#define INLINE static inline __attribute__((always_inline))

/* exp(x) for x <= 0: Cephes' range reduction x = n ln2 + r and degree-5
 * polynomial (within 2 ulp); exactly 1 at 0, exactly 0 below -87 and at -inf,
 * NaN for NaN (max_ps returns its second operand when one is NaN). */
INLINE __m256 exp_ps(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    __m256 n, r, y;
    x = _mm256_max_ps(lo, x);
    n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(
                             _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23)));
    return _mm256_andnot_ps(under, y);
}

INLINE float hsum(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

INLINE float hmax(__m256 v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* The 4 dot products of a0..a3 (8 lane sums each), lanes added as
 * ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)). */
INLINE __m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* ---- one tile ------------------------------------------------------------- */

typedef struct {
    float *out;
    const float *q;
    int ldo, ldq, G, D;
    float scale;
    float *S, *M, *L, *A;   /* [R][CK] scores then weights, [R] max, sum, rescale */
} tile;

INLINE const float *qrow(const tile *t, int r) {
    return t->q + (size_t)(r / t->G) * t->ldq + (size_t)(r % t->G) * t->D;
}
INLINE float *orow(const tile *t, int r) {
    return t->out + (size_t)(r / t->G) * t->ldo + (size_t)(r % t->G) * t->D;
}

/* Raw dot products S[r][j0 + j] of mr (1, 2) rows from r and keys j < 4*ng of K[16][D]. */
INLINE void scores(const tile *t, int r, const float *K, int ng, int j0, const int mr) {
    const int D = t->D;
    const float *q0 = qrow(t, r), *q1 = mr > 1 ? qrow(t, r + 1) : q0;
    for (int g = 0; g < ng; g++) {
        const float *k = K + (size_t)g * 4 * D;
        __m256 a[2][4];
        for (int i = 0; i < 2; i++)
            for (int c = 0; c < 4; c++) a[i][c] = _mm256_setzero_ps();
        for (int d = 0; d < D; d += 8) {
            __m256 x0 = _mm256_loadu_ps(q0 + d), x1 = mr > 1 ? _mm256_loadu_ps(q1 + d) : x0;
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                __m256 kv = _mm256_loadu_ps(k + (size_t)c * D + d);
                a[0][c] = _mm256_fmadd_ps(x0, kv, a[0][c]);
                if (mr > 1) a[1][c] = _mm256_fmadd_ps(x1, kv, a[1][c]);
            }
        }
        _mm_storeu_ps(t->S + (size_t)r * CK + j0 + 4 * g,
                      reduce4(a[0][0], a[0][1], a[0][2], a[0][3]));
        if (mr > 1)
            _mm_storeu_ps(t->S + (size_t)(r + 1) * CK + j0 + 4 * g,
                          reduce4(a[1][0], a[1][1], a[1][2], a[1][3]));
    }
}

/* The online-softmax step of row r over its first c keys of the chunk
 * (nk keys written, a multiple of 8 after padding): S[r] becomes the weights. */
INLINE void softmax_step(const tile *t, int r, int c, int nk) {
    const __m256i vc = _mm256_set1_epi32(c);
    const __m256 ninf = _mm256_set1_ps(-INFINITY), sc = _mm256_set1_ps(t->scale);
    float *s = t->S + (size_t)r * CK;
    __m256 v[CK / 8], mx = ninf;
    const int nvec = (nk + 7) / 8;
    for (int i = 0; i < nvec; i++) {
        const __m256i j = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                           _mm256_set1_epi32(8 * i));
        const __m256 m = _mm256_castsi256_ps(_mm256_cmpgt_epi32(vc, j));
        v[i] = _mm256_blendv_ps(ninf, _mm256_mul_ps(_mm256_loadu_ps(s + 8 * i), sc), m);
        mx = _mm256_max_ps(mx, v[i]);
    }
    float m_new = hmax(mx), alpha;
    m_new = t->M[r] > m_new ? t->M[r] : m_new;
    const __m256 vm = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    alpha = _mm256_cvtss_f32(exp_ps(_mm256_set1_ps(t->M[r] - m_new)));
    for (int i = 0; i < nvec; i++) {
        v[i] = exp_ps(_mm256_sub_ps(v[i], vm));
        sum = _mm256_add_ps(sum, v[i]);
        _mm256_storeu_ps(s + 8 * i, v[i]);
    }
    t->L[r] = fmaf(t->L[r], alpha, hsum(sum)); /* one rounding, as the few-row path */
    t->M[r] = m_new;
    t->A[r] = alpha;
}

/* o_r = o_r alpha_r + sum_j p_rj v_j over the chunk's keys in order (block b
 * of the chunk: nv[b] rows at V[b]) for mr (1..6) rows from r, dims
 * [d0, d0 + 8*nd) (nd 1 or 2). */
INLINE void pv(const tile *t, int r, const float *const *V, const int *nv, int nb, int d0,
               const int mr, const int nd) {
    const int D = t->D;
    __m256 acc[6][2];
    float *o[6];
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++) {
        const __m256 al = _mm256_set1_ps(t->A[r + i]);
        o[i] = orow(t, r + i) + d0;
#pragma GCC unroll 2
        for (int e = 0; e < nd; e++) acc[i][e] = _mm256_mul_ps(_mm256_loadu_ps(o[i] + 8 * e), al);
    }
    for (int b = 0; b < nb; b++) {
        const float *Vb = V[b] + d0, *Sb = t->S + (size_t)r * CK + b * BS;
        for (int j = 0; j < nv[b]; j++) {
            __m256 v[2];
#pragma GCC unroll 2
            for (int e = 0; e < nd; e++) v[e] = _mm256_loadu_ps(Vb + (size_t)j * D + 8 * e);
#pragma GCC unroll 6
            for (int i = 0; i < mr; i++) {
                const __m256 p = _mm256_broadcast_ss(Sb + (size_t)i * CK + j);
#pragma GCC unroll 2
                for (int e = 0; e < nd; e++) acc[i][e] = _mm256_fmadd_ps(p, v[e], acc[i][e]);
            }
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int e = 0; e < nd; e++) _mm256_storeu_ps(o[i] + 8 * e, acc[i][e]);
}

INLINE void pv_rows(const tile *t, int r, const float *const *V, const int *nv, int nb,
                    const int mr) {
    int d0 = 0;
    for (; d0 + 16 <= t->D; d0 += 16) pv(t, r, V, nv, nb, d0, mr, 2);
    if (d0 < t->D) pv(t, r, V, nv, nb, d0, mr, 1);
}

/* F16/BF16 rows [n][D] -> fp32 dst[n][D]; rows n..n_pad zeroed. The dtype
 * test is outside the loops (D % 8 == 0: whole vectors). */
static void widen(float *dst, const char *src, moe8_dtype dt, int n, int n_pad, int D) {
    const size_t n_el = (size_t)n * D;
    if (dt == MOE8_DT_F16) {
        for (size_t i = 0; i < n_el; i += 8)
            _mm256_storeu_ps(dst + i, moe8_avx2_load8(src, i, MOE8_DT_F16));
    } else {
        for (size_t i = 0; i < n_el; i += 8)
            _mm256_storeu_ps(dst + i, moe8_avx2_load8(src, i, MOE8_DT_BF16));
    }
    for (size_t i = n_el; i < (size_t)n_pad * D; i++) dst[i] = 0.0f;
}

/* Rows [r0, R) of the tile against one chunk of nb key blocks (block b: K[b],
 * V[b], nv[b] valid keys; all full but the last), the chunk's first key at
 * position kpos0. */
static void chunk_step(const tile *t, int r0, int R, const float *const *K, const float *const *V,
                       const int *nv, int nb, int32_t pos0, int32_t kpos0) {
    const int G = t->G;
    int n_keys = 0;
    for (int b = 0; b < nb; b++) {
        const int ng = (nv[b] + 3) / 4;
        /* rows before this block's first key see none of it: skip their scores */
        const int rb = (int)(kpos0 + b * BS - pos0) * G > r0 ? (int)(kpos0 + b * BS - pos0) * G : r0;
        int r = rb;
        for (; r + 2 <= R; r += 2) scores(t, r, K[b], ng, b * BS, 2);
        if (r < R) scores(t, r, K[b], ng, b * BS, 1);
        n_keys = b * BS + nv[b];
    }
    for (int r = r0; r < R; r++) {
        const int32_t c = pos0 + r / G - kpos0 + 1;
        softmax_step(t, r, c < n_keys ? (int)c : n_keys, n_keys);
    }
    int r = r0;
    for (; r + 6 <= R; r += 6) pv_rows(t, r, V, nv, nb, 6);
    switch (R - r) {
    case 5: pv_rows(t, r, V, nv, nb, 5); break;
    case 4: pv_rows(t, r, V, nv, nb, 4); break;
    case 3: pv_rows(t, r, V, nv, nb, 3); break;
    case 2: pv_rows(t, r, V, nv, nb, 2); break;
    case 1: pv_rows(t, r, V, nv, nb, 1); break;
    default: break;
    }
}

/* ---- few rows (decode): up to 8 query rows, one per vector lane ---------------
 *
 * With R <= 8 rows (one decode token and its G query heads) the tile path
 * spends as much time widening K/V into the work buffer and walking scores
 * row by row as on the dot products. Here every key's scores of all rows are
 * one vector (lanes = rows): K and V rows are widened in registers as they
 * are used, the softmax runs on vectors of rows, and nothing but the scores
 * [CK][8] and the rows' state is written. The arithmetic of each row is the
 * tile path's, operation for operation (the same lane partial sums over d
 * and reduction tree per score, the same lane-then-tree order of the sum of
 * weights, FMA for the running sum, the accumulator rescaled then updated key
 * by key), so a token's attention is the same bits whichever path its tile
 * takes (batch invariance). */

/* 8 key-row elements at d, as fp32. */
INLINE __m256 kv8(const char *row, int d, moe8_dtype dt) { return moe8_avx2_load8(row, (size_t)d, dt); }

typedef struct {
    const float *q[8];       /* row r's query (rows >= R repeat the last) */
    float *o[8];             /* row r's output (accumulator until the end) */
    __m256i pos;             /* lane r: row r's position */
    __m256 M, L;             /* running max and sum, lane r */
    int R, D;
    float scale;
} few_rows;

/* Scores of one key block (nv keys at K, row stride es*D bytes) into
 * ST[j0 + j][8], raw (unscaled), as reduce4 forms them for the tile path.
 * pf: a block of the next chunk (its K rows; V v_off further), whose row j
 * of K and of V is prefetched into L2 beside key j (NULL: none). */
INLINE void few_scores(const few_rows *f, const char *K, size_t row_bytes, int nv, float *ST,
                       int j0, const moe8_dtype dt, const char *pf, size_t v_off) {
    for (int j = 0; j < nv; j++) {
        const char *k = K + (size_t)j * row_bytes;
        __m256 a[8];
        for (size_t o = 0; pf && o < row_bytes; o += 64) {
            _mm_prefetch(pf + (size_t)j * row_bytes + o, _MM_HINT_T1);
            _mm_prefetch(pf + v_off + (size_t)j * row_bytes + o, _MM_HINT_T1);
        }
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) a[r] = _mm256_setzero_ps();
        for (int d = 0; d < f->D; d += 8) {
            const __m256 kv = kv8(k, d, dt);
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) a[r] = _mm256_fmadd_ps(_mm256_loadu_ps(f->q[r] + d), kv, a[r]);
        }
        const __m128 lo = reduce4(a[0], a[1], a[2], a[3]), hi = reduce4(a[4], a[5], a[6], a[7]);
        _mm256_storeu_ps(ST + (size_t)(j0 + j) * 8, _mm256_set_m128(hi, lo));
    }
}

/* One chunk: nb blocks (K[b], V[b] raw rows of dtype dt, nv[b] keys), the
 * chunk's first key at kpos0; pf[b]: the next chunk's block b (NULL: none). */
static void few_chunk(few_rows *f, const char *const *K, const char *const *V, const int *nv,
                      int nb, int32_t kpos0, moe8_dtype dt, float *ST, const char *const *pf,
                      size_t v_off) {
    const size_t row_bytes = (size_t)f->D * (dt == MOE8_DT_F32 ? 4 : 2);
    const __m256 ninf = _mm256_set1_ps(-INFINITY), sc = _mm256_set1_ps(f->scale);
    int n_keys = 0;
    for (int b = 0; b < nb; b++) {
        if (dt == MOE8_DT_F32)
            few_scores(f, K[b], row_bytes, nv[b], ST, b * BS, MOE8_DT_F32, pf[b], v_off);
        else if (dt == MOE8_DT_F16)
            few_scores(f, K[b], row_bytes, nv[b], ST, b * BS, MOE8_DT_F16, pf[b], v_off);
        else few_scores(f, K[b], row_bytes, nv[b], ST, b * BS, MOE8_DT_BF16, pf[b], v_off);
        n_keys = b * BS + nv[b];
    }
    /* the tile path's vectors: keys 8i..8i+7; keys past n_keys are masked there */
    const int nvec = (n_keys + 7) / 8;
    __m256 mx = ninf;
    for (int j = 0; j < nvec * 8; j++) {
        /* lane r sees key j when kpos0 + j <= pos_r */
        const __m256 hidden = _mm256_castsi256_ps(
            _mm256_cmpgt_epi32(_mm256_set1_epi32(kpos0 + j), f->pos));
        __m256 v = j < n_keys ? _mm256_blendv_ps(_mm256_mul_ps(_mm256_loadu_ps(ST + (size_t)j * 8), sc),
                                                 ninf, hidden)
                              : ninf;
        _mm256_storeu_ps(ST + (size_t)j * 8, v);
        mx = _mm256_max_ps(mx, v);
    }
    const __m256 m_new = _mm256_max_ps(f->M, mx);
    const __m256 alpha = exp_ps(_mm256_sub_ps(f->M, m_new));
    __m256 part[8];
#pragma GCC unroll 8
    for (int l = 0; l < 8; l++) part[l] = _mm256_setzero_ps();
    for (int i = 0; i < nvec; i++)
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++) {
            float *p = ST + (size_t)(8 * i + l) * 8;
            const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(p), m_new));
            _mm256_storeu_ps(p, e);
            part[l] = _mm256_add_ps(part[l], e);
        }
    /* hsum's tree over the lane sums: ((s0+s4)+(s2+s6)) + ((s1+s5)+(s3+s7)) */
    const __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(part[0], part[4]),
                                                   _mm256_add_ps(part[2], part[6])),
                                     _mm256_add_ps(_mm256_add_ps(part[1], part[5]),
                                                   _mm256_add_ps(part[3], part[7])));
    f->L = _mm256_fmadd_ps(f->L, alpha, sum);
    f->M = m_new;
    float al[8];
    _mm256_storeu_ps(al, alpha);
    /* o_r = o_r alpha_r + sum_j p_rj v_j, 8 dims at a time, keys in order */
    for (int d = 0; d < f->D; d += 8) {
        __m256 acc[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            acc[r] = _mm256_mul_ps(_mm256_loadu_ps(f->o[r] + d), _mm256_set1_ps(al[r]));
        for (int b = 0; b < nb; b++)
            for (int j = 0; j < nv[b]; j++) {
                const __m256 v = kv8(V[b] + (size_t)j * row_bytes, d, dt);
                const float *p = ST + (size_t)(b * BS + j) * 8;
#pragma GCC unroll 8
                for (int r = 0; r < 8; r++)
                    acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + r), v, acc[r]);
            }
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) _mm256_storeu_ps(f->o[r] + d, acc[r]);
    }
}

/* Rows beyond R point at a spare buffer (part of work) and are never read. */
static void few_attn(float *out, int ldo, const float *q, int ldq, int n_tok, int G, int D,
                     int32_t pos0, float scale, const moe8_kv_pages *kv, float *work) {
    const int R = n_tok * G;
    const int32_t last = pos0 + n_tok - 1;
    float *ST = work, *spare = work + (size_t)CK * 8;
    few_rows f;
    int32_t pos[8];
    f.R = R, f.D = D, f.scale = scale;
    for (int r = 0; r < 8; r++) {
        const int rr = r < R ? r : R - 1;
        f.q[r] = q + (size_t)(rr / G) * ldq + (size_t)(rr % G) * D;
        f.o[r] = r < R ? out + (size_t)(r / G) * ldo + (size_t)(r % G) * D : spare + (size_t)(r - R) * D;
        pos[r] = pos0 + rr / G;
        for (int d = 0; d < D; d += 8) _mm256_storeu_ps(f.o[r] + d, _mm256_setzero_ps());
    }
    f.pos = _mm256_loadu_si256((const __m256i *)pos);
    f.M = _mm256_set1_ps(-INFINITY);
    f.L = _mm256_setzero_ps();
    for (int32_t c0 = 0; c0 <= last / BS; c0 += CH) {
        const char *K[CH], *V[CH], *pf[CH] = {0};
        int nv[CH], nb = 0;
        for (int32_t b = c0; b < c0 + CH && b <= last / BS; b++, nb++) {
            const char *kblk = kv->base + (size_t)kv->blocks[b] * kv->block_bytes;
            nv[nb] = last + 1 - b * BS < BS ? (int)(last + 1 - b * BS) : BS;
            K[nb] = kblk;
            V[nb] = kblk + kv->v_off;
        }
        /* the next chunk's K and V rows into L2 (blocks are pages of their own,
         * where the hardware's streams stop), row by row beside the keys this
         * chunk reads, as attn_avx512.c does (a burst at the chunk's start
         * fills the miss buffers and stalls the chunk's own loads) */
        for (int32_t b = c0 + CH; b < c0 + 2 * CH && b <= last / BS; b++)
            pf[b - c0 - CH] = kv->base + (size_t)kv->blocks[b] * kv->block_bytes;
        few_chunk(&f, K, V, nv, nb, c0 * BS, kv->dt, ST, pf, kv->v_off);
    }
    float l[8], m[8];
    _mm256_storeu_ps(l, f.L);
    _mm256_storeu_ps(m, f.M);
    for (int r = 0; r < R; r++) {
        const __m256 lv = _mm256_set1_ps(l[r]);
        for (int d = 0; d < D; d += 8)
            _mm256_storeu_ps(f.o[r] + d, _mm256_div_ps(_mm256_loadu_ps(f.o[r] + d), lv));
        if (kv->stats) {
            kv->stats[2 * r] = m[r];
            kv->stats[2 * r + 1] = l[r];
        }
    }
}

void moe8_flash_attn_avx2(float *out, int ldo, const float *q, int ldq, int n_tok, int G, int D,
                          int32_t pos0, float scale, const moe8_kv_pages *kv, float *work) {
    const int R = n_tok * G;
    const int32_t last = pos0 + n_tok - 1;
    float *kb = work, *vb = work + (size_t)CK * D, *S = vb + (size_t)CK * D;
    tile t = {out, q, ldo, ldq, G, D, scale, S, S + (size_t)R * CK, S + (size_t)R * (CK + 1),
              S + (size_t)R * (CK + 2)};
    if (D % 8) {
        moe8_flash_attn_ref(out, ldo, q, ldq, n_tok, G, D, pos0, scale, kv, work);
        return;
    }
    if (R <= 8) {
        few_attn(out, ldo, q, ldq, n_tok, G, D, pos0, scale, kv, work);
        return;
    }
    for (int r = 0; r < R; r++) {
        float *o = orow(&t, r);
        t.M[r] = -INFINITY;
        t.L[r] = 0.0f;
        for (int d = 0; d < D; d += 8) _mm256_storeu_ps(o + d, _mm256_setzero_ps());
    }
    for (int32_t c0 = 0; c0 <= last / BS; c0 += CH) {
        const float *K[CH], *V[CH];
        int nv[CH], nb = 0;
        /* the first token that sees the chunk's first key */
        const int i0 = c0 * BS - pos0 > 0 ? (int)(c0 * BS - pos0) : 0;
        for (int32_t b = c0; b < c0 + CH && b <= last / BS; b++, nb++) {
            const char *kblk = kv->base + (size_t)kv->blocks[b] * kv->block_bytes;
            nv[nb] = last + 1 - b * BS < BS ? (int)(last + 1 - b * BS) : BS;
            K[nb] = (const float *)(const void *)kblk;
            V[nb] = (const float *)(const void *)(kblk + kv->v_off);
            if (kv->dt != MOE8_DT_F32) {
                float *kd = kb + (size_t)nb * BS * D, *vd = vb + (size_t)nb * BS * D;
                widen(kd, kblk, kv->dt, nv[nb], (nv[nb] + 3) / 4 * 4, D);
                widen(vd, kblk + kv->v_off, kv->dt, nv[nb], nv[nb], D);
                K[nb] = kd;
                V[nb] = vd;
            }
        }
        chunk_step(&t, i0 * G, R, K, V, nv, nb, pos0, c0 * BS);
    }
    for (int r = 0; r < R; r++) {
        float *o = orow(&t, r);
        const __m256 l = _mm256_set1_ps(t.L[r]);
        for (int d = 0; d < D; d += 8)
            _mm256_storeu_ps(o + d, _mm256_div_ps(_mm256_loadu_ps(o + d), l));
        if (kv->stats) {
            kv->stats[2 * r] = t.M[r];
            kv->stats[2 * r + 1] = t.L[r];
        }
    }
}
