/*
 * test_attention.c — flash attention (kernels.h moe8_flash_attn_fn, both
 * tables) and the attention driver (model/forward.h moe8_attention) against a
 * double-precision attention written here, over paged caches whose blocks lie
 * shuffled in the pool (slots never written hold NaN bytes):
 *   - every block-size edge: 1 token, BS-1, BS, BS+1, several blocks; tiles
 *     that start mid-block; decode (one token at the end)
 *   - GQA groups 1, 2, 4, 8; head dims 16, 64, 128 and 12 (no SIMD path)
 *   - F32 K/V within 1e-5 relative (max|a-b| / max|b| per row; 2e-5 for
 *     scores up to +-60); F16 and BF16 too, the reference reading the same
 *     rounded values
 *   - the table under test (MOE8_ISA) against the scalar twin; every row of a tile equal bit for bit to
 *     the same row computed alone
 *   - decode (G 8, D 128) at contexts 1, 15, 16, 17, 63, 64, 65, 511 and 8193
 *   - the driver over a batch mixing three sequences: equal to each token alone
 *     and identical for 1, 2 and 3 threads; the same with sinks (moe8_attention_sinks)
 * AVX2 comparisons are skipped, with a note, on a CPU without AVX2.
 */
#include <stdint.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "model/forward.h"

#include "test.h"
#include "test_isa.h"

#define BS MOE8_KV_BLOCK_TOKENS

static const moe8_kernels *tut; /* the table under test; NULL when it is the reference */
static test_rng rng = {0x51ed270b27c9e5a7ULL};
/* Scratch of a tile of `rows` query rows for the reference and the table under test. */
static size_t work_floats(int D, int rows) {
    const size_t a = moe8_kernels_ref()->attn_work_floats(D, rows);
    const size_t b = moe8_kernels_get()->attn_work_floats(D, rows);
    return a > b ? a : b;
}

static double worst_f32, worst_half, worst_twin; /* over all cases, for the summary line */

/* ---- a paged cache of one layer ----------------------------------------------- */

/* pool[n_blocks][2 (k, v)][n_kv][BS][D] of dt; sequence s holds len[s]
 * positions in the blocks table[s][0..), distinct and shuffled. */
typedef struct {
    int n_kv, D, n_seq, max_blocks, n_blocks;
    moe8_dtype dt;
    size_t head_bytes, block_bytes;
    unsigned char *pool;
    int32_t *table; /* [n_seq][max_blocks] */
    int32_t len[4];
} paged;

static void paged_init(paged *c, int n_kv, int D, moe8_dtype dt, int n_seq, const int32_t *len,
                       double amp) {
    int32_t *ids, n = 0;
    float *row = malloc(sizeof(float) * (size_t)D);
    memset(c, 0, sizeof *c);
    c->n_kv = n_kv, c->D = D, c->dt = dt, c->n_seq = n_seq;
    for (int s = 0; s < n_seq; s++) {
        c->len[s] = len[s];
        n += (len[s] + BS - 1) / BS;
        if ((len[s] + BS - 1) / BS > c->max_blocks) c->max_blocks = (len[s] + BS - 1) / BS;
    }
    c->n_blocks = n + 3; /* spare blocks nobody uses */
    ids = malloc(sizeof(int32_t) * (size_t)c->n_blocks);
    c->table = malloc(sizeof(int32_t) * (size_t)n_seq * (size_t)c->max_blocks);
    MOE8_ASSERT(ids && c->table);
    for (int i = 0; i < c->n_blocks; i++) ids[i] = i;
    for (int i = c->n_blocks - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)(test_rng_u64(&rng) % (uint64_t)(i + 1));
        int32_t t = ids[i];
        ids[i] = ids[j], ids[j] = t;
    }
    c->head_bytes = (size_t)BS * D * moe8_dtype_size(dt);
    c->block_bytes = 2 * (size_t)n_kv * c->head_bytes;
    c->pool = moe8_alloc_aligned((size_t)c->n_blocks * c->block_bytes);
    memset(c->pool, 0xff, (size_t)c->n_blocks * c->block_bytes); /* NaN in every dtype */
    n = 0;
    for (int s = 0; s < n_seq; s++)
        for (int b = 0; b < (len[s] + BS - 1) / BS; b++) c->table[s * c->max_blocks + b] = ids[n++];
    for (int s = 0; s < n_seq; s++)
        for (int p = 0; p < len[s]; p++)
            for (int h = 0; h < n_kv; h++)
                for (int kv = 0; kv < 2; kv++) {
                    const size_t blk = (size_t)c->table[s * c->max_blocks + p / BS];
                    unsigned char *dst = c->pool + blk * c->block_bytes +
                                         (size_t)(kv * n_kv + h) * c->head_bytes +
                                         (size_t)(p % BS) * D * moe8_dtype_size(dt);
                    for (int d = 0; d < D; d++) row[d] = (float)(test_rng_normal(&rng) * amp);
                    moe8_kv_store(dst, row, D, dt);
                }
    free(row);
    free(ids);
}

static void paged_free(paged *c) {
    moe8_free_aligned(c->pool);
    free(c->table);
}

/* K (kv 0) or V (kv 1) element as stored, widened. */
static double kv_get(const paged *c, int s, int h, int p, int kv, int d) {
    const size_t blk = (size_t)c->table[s * c->max_blocks + p / BS];
    const unsigned char *r = c->pool + blk * c->block_bytes +
                             (size_t)(kv * c->n_kv + h) * c->head_bytes +
                             (size_t)(p % BS) * c->D * moe8_dtype_size(c->dt);
    uint16_t u;
    float f;
    if (c->dt == MOE8_DT_F32) {
        memcpy(&f, r + 4 * (size_t)d, 4);
        return f;
    }
    memcpy(&u, r + 2 * (size_t)d, 2);
    return c->dt == MOE8_DT_F16 ? moe8_f16_to_f32(u) : moe8_bf16_to_f32(u);
}

static moe8_kv_pages pages(const paged *c, int s, int h) {
    moe8_kv_pages p = {(const char *)c->pool + (size_t)h * c->head_bytes, c->block_bytes,
                       (size_t)c->n_kv * c->head_bytes, c->table + s * c->max_blocks, c->dt, NULL};
    return p;
}

/* ---- the double reference -------------------------------------------------------- */

/* out[D] = softmax(q.k_p / sqrt(D)) v over positions 0..pos of (s, kv head h). */
static const float *drv_sinks; /* [n_head]: the driver's sinks (moe8_attention_sinks); NULL: none */
static double ref_sink = -INFINITY; /* ref_row's sink logit (-inf: none) */

static void ref_row(double *out, const float *q, const paged *c, int s, int h, int pos) {
    const int D = c->D;
    double *w = malloc(sizeof(double) * (size_t)(pos + 1)), mx = ref_sink, sum = 0;
    for (int p = 0; p <= pos; p++) {
        double a = 0;
        for (int d = 0; d < D; d++) a += (double)q[d] * kv_get(c, s, h, p, 0, d);
        w[p] = a / sqrt((double)D);
        mx = fmax(mx, w[p]);
    }
    for (int p = 0; p <= pos; p++) sum += (w[p] = exp(w[p] - mx));
    sum += exp(ref_sink - mx); /* the sink: a logit of the denominator only (SEMANTICS §7i) */
    for (int d = 0; d < D; d++) {
        double a = 0;
        for (int p = 0; p <= pos; p++) a += w[p] * kv_get(c, s, h, p, 1, d);
        out[d] = a / sum;
    }
    free(w);
}

static double row_rel(const float *a, const double *b, int n) {
    double d = 0, m = 0;
    for (int i = 0; i < n; i++) {
        d = fmax(d, fabs(a[i] - b[i]));
        m = fmax(m, fabs(b[i]));
    }
    return m > 0 ? d / m : d;
}

static double row_rel_f(const float *a, const float *b, int n) {
    double d = 0, m = 0;
    for (int i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

/* ---- the kernel on one tile ------------------------------------------------------- */

/* n_tok tokens from pos0 of sequence s, G query heads on kv head h, q and out
 * with padded row strides; both tables against the reference and each other,
 * and every row again alone. q and K/V of amplitude amp give scores of
 * standard deviation amp^2: 1e-5 relative at amp 1; at amp 4 scores reach
 * +-60, whose fp32 rounding alone (ulp 4e-6) moves a softmax weight by that
 * much, so the bound is 2e-5 there. */
static void tile_case(const paged *c, int s, int h, int G, int32_t pos0, int n_tok, double amp) {
    const int D = c->D, R = n_tok * G, ldq = G * D + 8, ldo = G * D + 16;
    const double tol = amp > 1 ? 2e-5 : 1e-5;
    const float scale = (float)(1.0 / sqrt((double)D));
    const moe8_kv_pages kv = pages(c, s, h);
    const moe8_kernels *tables[2] = {moe8_kernels_ref(), tut};
    float *q = malloc(sizeof(float) * (size_t)n_tok * ldq);
    float *out[2] = {malloc(sizeof(float) * (size_t)n_tok * ldo),
                     malloc(sizeof(float) * (size_t)n_tok * ldo)};
    float *one = malloc(sizeof(float) * (size_t)D);
    float *work = moe8_alloc_aligned(work_floats(D, R) * sizeof(float));
    double *want = malloc(sizeof(double) * (size_t)R * D);
    for (int i = 0; i < n_tok * ldq; i++) q[i] = (float)(test_rng_normal(&rng) * amp);
    for (int r = 0; r < R; r++)
        ref_row(want + (size_t)r * D, q + (size_t)(r / G) * ldq + (size_t)(r % G) * D, c, s, h,
                pos0 + r / G);
    for (int v = 0; v < 2; v++) {
        const moe8_kernels *kt = tables[v];
        double worst = 0;
        int alone_bad = 0;
        if (!kt) continue;
        for (int i = 0; i < n_tok * ldo; i++) out[v][i] = -7.0f;
        kt->flash_attn(out[v], ldo, q, ldq, n_tok, G, D, pos0, scale, &kv, work);
        for (int r = 0; r < R; r++) {
            const size_t qo = (size_t)(r / G) * ldq + (size_t)(r % G) * D;
            const float *o = out[v] + (size_t)(r / G) * ldo + (size_t)(r % G) * D;
            worst = fmax(worst, row_rel(o, want + (size_t)r * D, D));
            kt->flash_attn(one, D, q + qo, D, 1, 1, D, pos0 + r / G, scale, &kv, work);
            alone_bad += memcmp(one, o, sizeof(float) * (size_t)D) != 0;
        }
        for (int i = 0; i < n_tok; i++) /* the padding between rows is not written */
            for (int j = G * D; j < ldo; j++) alone_bad += out[v][(size_t)i * ldo + j] != -7.0f;
        if (c->dt == MOE8_DT_F32) worst_f32 = fmax(worst_f32, worst);
        else worst_half = fmax(worst_half, worst);
        CHECKF(worst <= tol, "%s D %d G %d %s pos0 %d n_tok %d: rel err %.3g vs double", kt->isa,
               D, G, moe8_dtype_name(c->dt), pos0, n_tok, worst);
        CHECKF(alone_bad == 0, "%s D %d G %d %s pos0 %d n_tok %d: %d rows differ from the row "
               "alone (or padding written)", kt->isa, D, G, moe8_dtype_name(c->dt), pos0, n_tok,
               alone_bad);
    }
    if (tut) {
        double d = 0;
        for (int r = 0; r < R; r++) {
            const size_t oo = (size_t)(r / G) * ldo + (size_t)(r % G) * D;
            d = fmax(d, row_rel_f(out[1] + oo, out[0] + oo, D));
        }
        worst_twin = fmax(worst_twin, d);
        CHECKF(d <= tol, "%s vs ref D %d G %d %s pos0 %d n_tok %d: rel diff %.3g", tut->isa, D, G,
               moe8_dtype_name(c->dt), pos0, n_tok, d);
    }
    free(q);
    free(out[0]);
    free(out[1]);
    free(one);
    free(want);
    moe8_free_aligned(work);
}

static void test_tiles(void) {
    static const int Ds[4] = {16, 64, 128, 12}, Gs[4] = {1, 2, 4, 8};
    static const moe8_dtype dts[3] = {MOE8_DT_F32, MOE8_DT_F16, MOE8_DT_BF16};
    /* four sequences: BS+1, 1, several blocks, several chunks of the optimized
     * kernels (MOE8_ATTN_CHUNK_BLOCKS blocks per softmax step) */
    static const int32_t lens[4] = {17, 1, 100, 200};
    const int CK = MOE8_ATTN_CHUNK_BLOCKS * BS;
    int n_case = 0;
    for (int di = 0; di < 4; di++)
        for (int ti = 0; ti < 3; ti++) {
            const double amp = (di + ti) % 2 ? 4.0 : 1.0; /* 4: score gaps past exp's range */
            paged c;
            paged_init(&c, 2, Ds[di], dts[ti], 4, lens, amp);
            for (int gi = 0; gi < 4; gi++) {
                const int G = Gs[gi];
                static const int32_t prefill[4] = {1, BS - 1, BS, BS + 1};
                for (int k = 0; k < 4; k++, n_case++) /* prefill of 1, 15, 16, 17 tokens */
                    tile_case(&c, 0, k % 2, G, 0, prefill[k], amp);
                tile_case(&c, 1, 1, G, 0, 1, amp);            /* the one-token sequence */
                tile_case(&c, 2, 0, G, 0, 100, amp);          /* several blocks at once */
                tile_case(&c, 2, 1, G, 99, 1, amp);           /* decode at the end */
                tile_case(&c, 2, 0, G, 13, 7, amp);           /* mid-block, across a boundary */
                tile_case(&c, 2, 1, G, 47, BS + 2, amp);      /* last slot of a block onwards */
                tile_case(&c, 0, 0, G, BS, 1, amp);           /* first slot of block 1 */
                tile_case(&c, 3, 1, G, CK - 1, 1, amp);       /* last key of a chunk */
                tile_case(&c, 3, 0, G, CK, 1, amp);           /* first key of chunk 1 */
                tile_case(&c, 3, 1, G, 2 * CK + 1, 1, amp);   /* into chunk 2 */
                tile_case(&c, 3, 0, G, CK - 4, 11, amp);      /* a tile across a chunk edge */
                tile_case(&c, 3, 1, G, 199, 1, amp);          /* decode at the end: 3+ chunks */
                n_case += 11;
            }
            paged_free(&c);
        }
    printf("%d tiles: worst rel err vs double %.3g (F32 K/V), %.3g (F16/BF16 K/V, rounded values); "
           "table vs ref %.3g\n", n_case, worst_f32, worst_half, worst_twin);
}

/* Decode (one token; G 8, D 128: Qwen3-30B-A3B's shape) at contexts across
 * the block (16) and chunk (64) edges and long ones, against the double
 * reference, the scalar twin and each row alone: F16 K/V at every context,
 * BF16 and F32 at 511 and 8193. */
static void test_long_decode(void) {
    static const int32_t ctxs[9] = {1, 15, 16, 17, 63, 64, 65, 511, 8193};
    static const moe8_dtype dts[3] = {MOE8_DT_F16, MOE8_DT_BF16, MOE8_DT_F32};
    const int32_t len = 8193;
    const double f32 = worst_f32, half = worst_half;
    worst_f32 = worst_half = 0;
    for (int ti = 0; ti < 3; ti++) {
        paged c;
        paged_init(&c, 2, 128, dts[ti], 1, &len, 1.0);
        for (int i = 0; i < 9; i++)
            if (ti == 0 || ctxs[i] >= 511) tile_case(&c, 0, i % 2, 8, ctxs[i] - 1, 1, 1.0);
        paged_free(&c);
    }
    printf("decode at contexts 1..8193 (G 8, D 128): worst rel err vs double %.3g (F32 K/V), "
           "%.3g (F16/BF16 K/V)\n", worst_f32, worst_half);
    worst_f32 = fmax(worst_f32, f32);
    worst_half = fmax(worst_half, half);
}

/* ---- the driver ---------------------------------------------------------------- */

/* A batch of T tokens: seq 2 positions 60..99 (40), seq 1 position 0, seq 0
 * positions 10..16, interleaved (each sequence in position order). */
static int mixed_batch(int32_t *seq, int32_t *pos) {
    int T = 0, a = 60, b = 10;
    for (int i = 0; i < 48; i++) {
        if (i == 5) seq[T] = 1, pos[T++] = 0;
        else if (i % 6 == 3 && b <= 16) seq[T] = 0, pos[T++] = b++;
        else if (a < 100) seq[T] = 2, pos[T++] = a++;
    }
    while (b <= 16) seq[T] = 0, pos[T++] = b++;
    return T;
}

static void run_driver(const paged *c, int NH, const float *q, float *out, const int32_t *seq,
                       const int32_t *pos, int T, int n_threads) {
    const moe8_kv_view kv = {c->pool, c->block_bytes, c->dt, c->table, c->max_blocks,
                             NULL, NULL, NULL};
    const moe8_attn_cache ac = moe8_attn_cache_layer(&kv, NH, c->n_kv, c->D, 0);
    const size_t wf = moe8_attention_work_floats(c->D, NH / c->n_kv);
    float *work = moe8_alloc_aligned((size_t)n_threads * wf * sizeof(float));
    int32_t *tiles = malloc(sizeof(int32_t) * 2 * (size_t)T);
    if (drv_sinks)
        moe8_attention_sinks(moe8_kernels_get(), out, q, &ac, seq, pos, T, drv_sinks, tiles, work,
                             wf, n_threads);
    else
        moe8_attention(moe8_kernels_get(), out, q, &ac, seq, pos, T, tiles, work, wf, n_threads);
    free(tiles);
    moe8_free_aligned(work);
}

static void driver_case(int n_kv, int G, int D, moe8_dtype dt) {
    static const int32_t lens[3] = {17, 1, 100};
    const int NH = n_kv * G;
    int32_t seq[64], pos[64];
    const int T = mixed_batch(seq, pos);
    const size_t row = (size_t)NH * D;
    float *q = malloc(sizeof(float) * T * row), *out[3], *alone = malloc(sizeof(float) * row);
    double *want = malloc(sizeof(double) * (size_t)D), worst = 0;
    int bad = 0;
    paged c;
    paged_init(&c, n_kv, D, dt, 3, lens, 1.0);
    for (size_t i = 0; i < T * row; i++) q[i] = (float)test_rng_normal(&rng);
    for (int n = 0; n < 3; n++) {
        out[n] = malloc(sizeof(float) * T * row);
        run_driver(&c, NH, q, out[n], seq, pos, T, n + 1);
    }
    CHECKF(!memcmp(out[0], out[1], sizeof(float) * T * row) &&
           !memcmp(out[0], out[2], sizeof(float) * T * row),
           "driver n_kv %d G %d D %d %s: 1 vs 2 vs 3 threads differ", n_kv, G, D,
           moe8_dtype_name(dt));
    for (int t = 0; t < T; t++) {
        for (int n = 1; n <= 3; n++) { /* alone: a decode step, on 1..3 threads */
            run_driver(&c, NH, q + t * row, alone, &seq[t], &pos[t], 1, n);
            bad += memcmp(alone, out[0] + t * row, sizeof(float) * row) != 0;
        }
        for (int h = 0; h < NH; h++) {
            ref_sink = drv_sinks ? drv_sinks[h] : -INFINITY;
            ref_row(want, q + t * row + (size_t)h * D, &c, seq[t], h / G, pos[t]);
            worst = fmax(worst, row_rel(out[0] + t * row + (size_t)h * D, want, D));
        }
    }
    ref_sink = -INFINITY;
    CHECKF(bad == 0, "driver n_kv %d G %d D %d %s%s: %d tokens differ from the token alone", n_kv,
           G, D, moe8_dtype_name(dt), drv_sinks ? " sinks" : "", bad);
    CHECKF(worst <= 1e-5, "driver n_kv %d G %d D %d %s%s: rel err %.3g vs double", n_kv, G, D,
           moe8_dtype_name(dt), drv_sinks ? " sinks" : "", worst);
    for (int n = 0; n < 3; n++) free(out[n]);
    free(q);
    free(alone);
    free(want);
    paged_free(&c);
}

/* Qwen3-30B-A3B's shape (4 kv heads, groups of 8, head dim 128): a chunk of
 * 64 tokens at positions 236..299 and a decode step, F16 K/V. */
static void driver_a3b(void) {
    const int32_t len = 300;
    const int n_kv = 4, G = 8, D = 128, NH = n_kv * G, T = 64;
    const size_t row = (size_t)NH * D;
    int32_t seq[64] = {0}, pos[64];
    float *q = malloc(sizeof(float) * T * row), *out = malloc(sizeof(float) * T * row);
    float *one = malloc(sizeof(float) * row);
    double *want = malloc(sizeof(double) * (size_t)D), worst = 0;
    paged c;
    paged_init(&c, n_kv, D, MOE8_DT_F16, 1, &len, 1.0);
    for (int t = 0; t < T; t++) pos[t] = len - T + t;
    for (size_t i = 0; i < T * row; i++) q[i] = (float)test_rng_normal(&rng);
    run_driver(&c, NH, q, out, seq, pos, T, 2);
    run_driver(&c, NH, q + (T - 1) * row, one, seq, pos + T - 1, 1, 2);
    CHECK(!memcmp(one, out + (T - 1) * row, sizeof(float) * row));
    for (int t = 0; t < T; t += 7)
        for (int h = 0; h < NH; h++) {
            ref_row(want, q + t * row + (size_t)h * D, &c, 0, h / G, pos[t]);
            worst = fmax(worst, row_rel(out + t * row + (size_t)h * D, want, D));
        }
    printf("a3b shape, 300 positions: rel err %.3g vs double\n", worst);
    CHECKF(worst <= 1e-5, "a3b shape: rel err %.3g vs double", worst);
    free(q);
    free(out);
    free(one);
    free(want);
    paged_free(&c);
}

/* The a3b shape's decode step at context 8193 through the driver: the same
 * bits on 1, 2 and 3 threads (4 kv heads; 3 threads leave one a second head). */
static void driver_long(void) {
    const int32_t len = 8193;
    const int n_kv = 4, NH = 32, D = 128;
    const size_t row = (size_t)NH * D;
    int32_t seq = 0, pos = len - 1;
    float *q = malloc(sizeof(float) * row), *out[3];
    paged c;
    paged_init(&c, n_kv, D, MOE8_DT_F16, 1, &len, 1.0);
    for (size_t i = 0; i < row; i++) q[i] = (float)test_rng_normal(&rng);
    for (int n = 0; n < 3; n++) {
        out[n] = malloc(sizeof(float) * row);
        run_driver(&c, NH, q, out[n], &seq, &pos, 1, n + 1);
    }
    CHECKF(!memcmp(out[0], out[1], sizeof(float) * row) &&
           !memcmp(out[0], out[2], sizeof(float) * row),
           "driver a3b shape at context %d: 1 vs 2 vs 3 threads differ", len);
    for (int n = 0; n < 3; n++) free(out[n]);
    free(q);
    paged_free(&c);
}

static void test_driver(void) {
    driver_a3b();
    driver_long();
    driver_case(2, 8, 64, MOE8_DT_F32);   /* tiles of 16 tokens; decode splits the group */
    driver_case(2, 8, 64, MOE8_DT_F16);
    driver_case(1, 4, 128, MOE8_DT_BF16); /* tiles of 32 tokens */
    driver_case(4, 1, 16, MOE8_DT_F16);   /* tiles of 128 tokens: the batch's runs */
    driver_case(1, 2, 12, MOE8_DT_F32);   /* head dim off the SIMD path */
}

/* gpt_oss's sinks (SEMANTICS §7i) on the driver: sinks far below the scores
 * (no effect), near them, and far above (the sink's side of the fold; rows
 * at position 0 and 1 shrink to ~e^-12), against the double reference with
 * the sink in its softmax; batch and thread invariance as driver_case. */
static void test_driver_sinks(void) {
    static const float sinks[16] = {-90.0f, 0.0f, 1.5f, -2.0f, 12.0f, 0.5f, 3.0f, -0.25f,
                                    2.0f,   -1.0f, 40.0f, 0.0f, 1.0f, 5.0f, -5.0f, 0.75f};
    drv_sinks = sinks;
    driver_case(2, 8, 64, MOE8_DT_F16); /* gpt_oss's group of 8 */
    driver_case(1, 4, 128, MOE8_DT_BF16);
    driver_case(1, 2, 12, MOE8_DT_F32);
    drv_sinks = NULL;
    printf("driver with sinks: as the double reference, batch and thread invariant\n");
}

/* A NaN query or an inf key makes the rows that see it NaN in both tables,
 * never a finite number (a broken model must not look like a working one). */
static void test_non_finite(void) {
    static const int32_t len[1] = {20};
    const moe8_kernels *tables[2] = {moe8_kernels_ref(), tut};
    const int D = 16, G = 2;
    float q[2 * 2 * 16], out[2 * 2 * 16], work[4096];
    paged c;
    paged_init(&c, 1, D, MOE8_DT_F32, 1, len, 1.0);
    const moe8_kv_pages kv = pages(&c, 0, 0);
    MOE8_ASSERT(work_floats(D, 2 * G) <= 4096);
    for (int v = 0; v < 2; v++) {
        if (!tables[v]) continue;
        for (int i = 0; i < 2 * G * D; i++) q[i] = (float)test_rng_normal(&rng);
        q[5] = NAN; /* token 0, head 0 */
        tables[v]->flash_attn(out, G * D, q, G * D, 2, G, D, 18, 0.25f, &kv, work);
        CHECKF(isnan(out[0]) && isfinite(out[D]) && isfinite(out[2 * D]),
               "%s: a NaN query gives %g (its row), %g, %g", tables[v]->isa, out[0], out[D],
               out[2 * D]);
    }
    float *k16 = (float *)(void *)(c.pool + (size_t)c.table[1] * c.block_bytes);
    for (int d = 0; d < D; d++) k16[d] = INFINITY;
    for (int v = 0; v < 2; v++) { /* key 16 is inf: rows at positions 18, 19 see it */
        if (!tables[v]) continue;
        for (int i = 0; i < 2 * G * D; i++) q[i] = 1.0f;
        tables[v]->flash_attn(out, G * D, q, G * D, 2, G, D, 18, 0.25f, &kv, work);
        CHECKF(isnan(out[0]) && isnan(out[G * D]), "%s: an inf key gives %g, %g",
               tables[v]->isa, out[0], out[G * D]);
    }
    paged_free(&c);
}

/* ---- K/V rows into the cache ------------------------------------------------------ */

static void test_kv_store(void) {
    const float src[5] = {1.0f, -2.5f, 1.0f + 0x1p-11f + 0x1p-23f, 1.0f + 0x1p-8f, 65520.0f};
    uint16_t h[5];
    float f[5];
    moe8_kv_store(f, src, 5, MOE8_DT_F32);
    CHECK(!memcmp(f, src, sizeof f));
    moe8_kv_store(h, src, 5, MOE8_DT_F16);
    for (int i = 0; i < 5; i++) CHECK(h[i] == moe8_f32_to_f16(src[i]));
    CHECK(h[2] == 0x3c01 && h[4] == 0x7c00); /* above the tie rounds up; past 65504: inf */
    moe8_kv_store(h, src, 5, MOE8_DT_BF16);
    for (int i = 0; i < 5; i++) CHECK(h[i] == moe8_f32_to_bf16(src[i]));
    CHECK(h[3] == 0x3f80); /* a tie to even: 1 + 2^-8 -> 1 */
}

int main(void) {
    const char *same;
    tut = test_table_besides_ref();
    same = TEST_SHARED(tut, flash_attn);
    if (same && TEST_SHARED(tut, attn_work_floats)) {
        printf("test_attention: %s's attention kernel is %s's, checked in that table's run\n", tut->isa, same);
        return 77;
    }
    test_kv_store();
    test_tiles();
    test_long_decode();
    test_driver();
    test_driver_sinks();
    test_non_finite();
    return test_summary();
}
