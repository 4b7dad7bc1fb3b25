/*
 * test_kernels.c — the kernel table in use (MOE8_ISA picks it: ctest runs
 * this program once per table, kernels_ISA) and the scalar reference, against
 * references written here from SEMANTICS §4 (independent of kernels_ref.c and
 * of the packed layouts), and the table against the reference bit for bit on
 * the table's own packing: activation codes, xsum, int32 accumulators and
 * dequantized floats. Every packed layout decodes back to its weights. Float
 * GEMMs (F32/F16/BF16 weights) are checked against a double-precision sum
 * within the dot-product bound 2·k·2^-24·Σ|x·w|, on buffers that end at an
 * unmapped page (the sanitizer build checks only their entry: entry_check.c).
 * A table this CPU lacks is skipped (exit 77).
 */
#include <fenv.h>
#include <stdint.h>

#include "core/core.h"
#include "kernels/kernels.h"

#include "test.h"
#include "test_isa.h"

static const moe8_kernels *tut;  /* the table under test; NULL when it is the reference */
static test_rng rng = {0x9e3779b97f4a7c15ULL};

static int rand_int(int lo, int hi) { return lo + (int)(test_rng_u64(&rng) % (uint64_t)(hi - lo + 1)); }

/* ---- independent references ---------------------------------------------- */

static void quant_expect(int8_t *q, float *s, int32_t *sum, const float *x, int k) {
    float amax = 0.0f;
    for (int j = 0; j < k; j++) {
        float a = x[j] < 0 ? -x[j] : x[j];
        if (a > amax) amax = a; /* NaN never compares greater */
    }
    *s = amax / 127.0f;
    *sum = 0;
    for (int j = 0; j < k; j++) {
        float v = *s > 0.0f ? rintf(x[j] / *s) : 0.0f;
        int c = v != v ? -127 : v < -127.0f ? -127 : v > 127.0f ? 127 : (int)v;
        q[j] = (int8_t)c;
        *sum += c;
    }
}

/* ---- a quantized problem: W[n][k] plain, packed copy, scales, offsets ---- */

typedef struct {
    int n, k;
    int8_t *w;        /* [n][k] */
    int8_t *packed;
    float *scale;     /* [n] */
    int32_t *offset;  /* [n] or NULL */
    moe8_qmat q;
} qprob;

static void qprob_init(qprob *p, int n, int k, int with_offset, int wfill) {
    p->n = n;
    p->k = k;
    p->w = malloc((size_t)n * k);
    for (size_t i = 0; i < (size_t)n * k; i++)
        p->w[i] = (int8_t)(wfill == 999 ? rand_int(-128, 127) : wfill);
    const moe8_qlayout *ql = moe8_kernels_get()->qlayout; /* the table's own packing */
    p->packed = moe8_alloc_aligned(ql->bytes(n, k));
    ql->pack(p->packed, p->w, n, k, k);
    p->scale = malloc(sizeof(float) * n);
    p->offset = with_offset ? malloc(sizeof(int32_t) * n) : NULL;
    for (int i = 0; i < n; i++) {
        p->scale[i] = (float)(1e-3 * (1.0 + test_rng_uniform(&rng)));
        if (p->offset) p->offset[i] = rand_int(-128, 127);
    }
    moe8_qmat_init(&p->q, ql, p->packed, n, k, p->scale, p->offset);
}

static void qprob_free(qprob *p) {
    free(p->w);
    moe8_free_aligned(p->packed);
    free(p->scale);
    free(p->offset);
}

/* Rows of x: random normal, one all-zero row, one row of huge/tiny values. */
static void fill_x(float *x, int m, int k) {
    for (int r = 0; r < m; r++)
        for (int j = 0; j < k; j++) {
            double v = test_rng_normal(&rng);
            x[(size_t)r * k + j] = r == 1 ? 0.0f : r == 2 ? (float)(v * 1e30) : (float)v;
        }
}


/* ---- quantization --------------------------------------------------------- */

static void check_quant(const moe8_kernels *kt, const float *x, int m, int k, const char *what) {
    const int ldq = moe8_round_up(k, MOE8_QK_KALIGN) + 4;
    int8_t *q = malloc((size_t)m * ldq), *qe = malloc((size_t)k + 1);
    float *s = malloc(sizeof(float) * m), se;
    int32_t *sum = malloc(sizeof(int32_t) * m), sume;
    memset(q, 0x55, (size_t)m * ldq);
    kt->quant_rows(q, ldq, s, sum, x, k, m, k);
    int bad = 0;
    for (int r = 0; r < m; r++) {
        quant_expect(qe, &se, &sume, x + (size_t)r * k, k);
        bad += memcmp(&se, &s[r], sizeof se) != 0 || sume != sum[r];
        bad += memcmp(qe, q + (size_t)r * ldq, (size_t)k) != 0;
        for (int j = k; j < moe8_round_up(k, MOE8_QK_KALIGN); j++) bad += q[(size_t)r * ldq + j] != 0;
        bad += q[(size_t)r * ldq + ldq - 1] != 0x55; /* past the padded row: untouched */
    }
    CHECKF(bad == 0, "%s quant_rows %s m=%d k=%d: %d mismatches", kt->isa, what, m, k, bad);
    free(q); free(qe); free(s); free(sum);
}

static void test_quant(void) {
    const int ks[] = {1, 7, 8, 31, 32, 33, 40, 72, 129, 2048};
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        const int k = ks[i], m = 5;
        float *x = malloc(sizeof(float) * m * k);
        fill_x(x, m, k);
        /* row 3: exact halves (x/s = n + 0.5 ties to even), row 4: NaN/inf/denormals */
        for (int j = 0; j < k; j++) x[3 * k + j] = (float)(j % 255 - 127) + 0.5f;
        x[3 * k] = 127.0f;
        for (int j = 0; j < k; j++)
            x[4 * k + j] = j % 5 == 0 ? NAN : j % 5 == 1 ? 1e-40f : (float)test_rng_normal(&rng);
        check_quant(moe8_kernels_ref(), x, m, k, "mixed");
        if (tut) check_quant(tut, x, m, k, "mixed");
        for (int j = 0; j < k; j++) x[j] = j % 3 == 0 ? INFINITY : 1.0f;
        check_quant(moe8_kernels_ref(), x, 1, k, "inf");
        if (tut) check_quant(tut, x, 1, k, "inf");
        for (int j = 0; j < k; j++) x[j] = 1e-44f; /* amax/127 underflows to 0 */
        check_quant(moe8_kernels_ref(), x, 1, k, "underflow");
        if (tut) check_quant(tut, x, 1, k, "underflow");
        free(x);
    }
}

/* SEMANTICS §4 fixes round-half-to-even: a host program's fesetround must not
 * change the codes (rintf and _MM_FROUND_CUR_DIRECTION would follow it). */
static void test_quant_rounding_mode(void) {
    enum { K = 300 };
    static const int modes[] = {FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO};
    float x[K], s0, s1;
    int8_t q0[K + 4], q1[K + 4];
    int32_t sum0, sum1;
    for (int j = 0; j < K; j++) x[j] = (float)(j % 254 - 127) + 0.5f; /* -126.5 .. 126.5 */
    x[0] = 127.0f; /* amax 127: s = 1, every other value is an exact half */
    const moe8_kernels *tables[2] = {moe8_kernels_ref(), tut};
    for (int t = 0; t < 2 && tables[t]; t++) {
        tables[t]->quant_rows(q0, K + 4, &s0, &sum0, x, K, 1, K);
        for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
            fesetround(modes[m]);
            tables[t]->quant_rows(q1, K + 4, &s1, &sum1, x, K, 1, K);
            fesetround(FE_TONEAREST);
            CHECKF(memcmp(q0, q1, K) == 0 && sum0 == sum1, "%s quant_rows changes with rounding mode %d",
                   tables[t]->isa, modes[m]);
        }
        CHECKF(q0[1] == -126 && q0[2] == -124, "%s: -125.5 -> %d, -124.5 -> %d (want -126, -124)",
               tables[t]->isa, q0[1], q0[2]);
    }
}

/* ---- int8 GEMM ------------------------------------------------------------- */

/* Runs both q8 kernels of kt on rows [0,m), columns [n0,n1) and compares them with
 * the plain-W sums. Columns outside [n0,n1) must stay untouched. */
static int check_q8(const moe8_kernels *kt, const qprob *p, const int8_t *xq, int ldq,
                    const float *sx, const int32_t *xsum, int m, int n0, int n1) {
    const int n = p->n, k = p->k, ldc = n + 3;
    int32_t *acc = malloc(sizeof(int32_t) * m * ldc);
    float *y = malloc(sizeof(float) * m * ldc);
    for (int i = 0; i < m * ldc; i++) { acc[i] = 0x7a7a7a7a; y[i] = -7.0f; }
    kt->gemm_q8_i32(acc, ldc, xq, ldq, &p->q, m, n0, n1);
    kt->gemm_q8_f32(y, ldc, xq, ldq, sx, xsum, &p->q, m, n0, n1);
    int bad = 0;
    for (int r = 0; r < m; r++)
        for (int j = 0; j < ldc; j++) {
            const size_t o = (size_t)r * ldc + j;
            if (j < n0 || j >= n1) {
                bad += acc[o] != 0x7a7a7a7a || y[o] != -7.0f;
                continue;
            }
            int64_t a = 0;
            for (int t = 0; t < k; t++) a += (int64_t)xq[(size_t)r * ldq + t] * p->w[(size_t)j * k + t];
            const int32_t a32 = (int32_t)a;
            const int32_t full = a32 + (p->offset ? p->offset[j] * xsum[r] : 0);
            const float ye = ((float)full * sx[r]) * p->scale[j];
            bad += a != acc[o] || memcmp(&ye, &y[o], sizeof ye) != 0;
        }
    free(acc);
    free(y);
    return bad;
}

static void q8_case(int m, int n, int k, int with_offset, int n0, int n1) {
    qprob p;
    qprob_init(&p, n, k, with_offset, 999);
    const int ldq = moe8_round_up(k, MOE8_QK_KALIGN) + 8;
    float *x = malloc(sizeof(float) * m * k), *sx = malloc(sizeof(float) * m);
    int8_t *xq = malloc((size_t)m * ldq);
    int32_t *xsum = malloc(sizeof(int32_t) * m);
    fill_x(x, m, k);
    moe8_kernels_ref()->quant_rows(xq, ldq, sx, xsum, x, k, m, k);
    int bad = check_q8(moe8_kernels_ref(), &p, xq, ldq, sx, xsum, m, n0, n1);
    CHECKF(bad == 0, "ref q8 m=%d n=%d k=%d off=%d [%d,%d): %d mismatches", m, n, k, with_offset, n0, n1, bad);
    if (tut) {
        bad = check_q8(tut, &p, xq, ldq, sx, xsum, m, n0, n1);
        CHECKF(bad == 0, "%s q8 m=%d n=%d k=%d off=%d [%d,%d): %d mismatches", tut->isa, m, n, k, with_offset, n0, n1, bad);
    }
    free(x); free(sx); free(xq); free(xsum);
    qprob_free(&p);
}

static void test_q8_shapes(void) {
    const int ms[] = {1, 2, 3, 5, 8, 17, 64};
    const int nk[][2] = {{16, 32}, {40, 72}, {129, 40}, {72, 129}, {33, 7}, {48, 2}, {17, 300}};
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < sizeof nk / sizeof nk[0]; b++) {
            const int n = nk[b][0], k = nk[b][1];
            q8_case(ms[a], n, k, (int)((a + b) % 2), 0, n);
        }
    q8_case(7, 129, 72, 1, 32, 129); /* sub-ranges starting at a panel boundary */
    q8_case(3, 129, 72, 0, 16, 100);
    q8_case(1, 129, 72, 1, 16, 129); /* few-row paths: groups of 4 (3) panels + rest */
    q8_case(2, 129, 72, 0, 32, 120);
    q8_case(1, 200, 8, 0, 0, 200);
    q8_case(6, 100, 40, 1, 48, 64);
    q8_case(2, 40, 2200, 1, 0, 40); /* K spans several activation chunks */
}

/* Every row count of the tiled paths (AMX: blocks of 32 and 16 rows, the
 * rest in shorter tiles; AVX-512: tiles of 4) over K with and without a
 * partial 64-input chunk, odd panel counts and sub-ranges. */
static void test_q8_rows(void) {
    const int nk[][2] = {{48, 128}, {33, 100}, {80, 4}, {16, 64 + 36}};
    for (int m = 1; m <= 50; m++) {
        const int b = m % 4, n = nk[b][0], k = nk[b][1];
        q8_case(m, n, k, m % 3 == 0, 0, n);
    }
    q8_case(64, 129, 72, 1, 16, 129);
    q8_case(100, 40, 300, 0, 0, 40);
    q8_case(97, 200, 192, 1, 32, 176);
}

/* All 127 x -128 (and -127 x -128, alternating) over long K: the largest |acc|.
 * Rows repeat three patterns, m rows (3: the AVX-512 tiles; 24: AMX's). */
static void q8_worst_case(int m) {
    const int n = 40, k = 4100, ldq = moe8_round_up(k, MOE8_QK_KALIGN);
    qprob p;
    qprob_init(&p, n, k, 1, -128);
    for (int i = 0; i < n; i++) p.offset[i] = i % 2 ? -128 : 127;
    int8_t *xq = calloc((size_t)m * ldq, 1);
    float sx[24];
    int32_t xsum[24] = {0};
    for (int r = 0; r < m; r++) {
        sx[r] = r % 3 == 0 ? 1.0f : r % 3 == 1 ? 0.5f : 0.0f;
        for (int j = 0; j < k; j++) {
            int8_t *q = &xq[(size_t)r * ldq + j];
            *q = r % 3 == 0 ? 127 : r % 3 == 2 ? -127 : j % 2 ? 127 : -127;
            xsum[r] += *q;
        }
    }
    int bad = check_q8(moe8_kernels_ref(), &p, xq, ldq, sx, xsum, m, 0, n);
    CHECKF(bad == 0, "ref q8 worst case m=%d: %d mismatches", m, bad);
    if (tut) {
        bad = check_q8(tut, &p, xq, ldq, sx, xsum, m, 0, n);
        CHECKF(bad == 0, "%s q8 worst case m=%d: %d mismatches", tut->isa, m, bad);
        int32_t acc[24 * 40];
        tut->gemm_q8_i32(acc, n, xq, ldq, &p.q, m, 0, n);
        CHECK(acc[0] == -127 * 128 * k && acc[2 * n + 5] == 127 * 128 * k && acc[n] == 0);
    }
    free(xq);
    qprob_free(&p);
}

static void test_q8_worst_case(void) {
    q8_worst_case(3);
    q8_worst_case(24);
}

/* The real gate+up shape (2I x H = 1536 x 2048), at 7 rows (decode tiles) and
 * 40 (AMX tiles over several blocks of panels), the table against ref only. */
static void q8_real_shape(int m) {
    const int n = 1536, k = 2048;
    qprob p;
    qprob_init(&p, n, k, 0, 999);
    float *x = malloc(sizeof(float) * m * k), sx[64];
    int8_t *xq = malloc((size_t)m * k);
    int32_t xsum[64];
    int32_t *a = malloc(sizeof(int32_t) * m * n), *b = malloc(sizeof(int32_t) * m * n);
    float *ya = malloc(sizeof(float) * m * n), *yb = malloc(sizeof(float) * m * n);
    fill_x(x, m, k);
    tut->quant_rows(xq, k, sx, xsum, x, k, m, k);
    moe8_kernels_ref()->gemm_q8_i32(a, n, xq, k, &p.q, m, 0, n);
    tut->gemm_q8_i32(b, n, xq, k, &p.q, m, 0, n);
    CHECK(memcmp(a, b, sizeof(int32_t) * m * n) == 0);
    moe8_kernels_ref()->gemm_q8_f32(ya, n, xq, k, sx, xsum, &p.q, m, 0, n);
    tut->gemm_q8_f32(yb, n, xq, k, sx, xsum, &p.q, m, 0, n);
    CHECK(memcmp(ya, yb, sizeof(float) * m * n) == 0);
    free(x); free(xq); free(a); free(b); free(ya); free(yb);
    qprob_free(&p);
}

static void test_q8_real_shape(void) {
    if (!tut) return;
    q8_real_shape(7);
    q8_real_shape(40);
}

/* ---- float GEMM ------------------------------------------------------------- */

static int check_f32(const moe8_kernels *kt, const float *x, int ldx, const void *w, moe8_dtype dt,
                     int ldw, int m, int n, int n0, int n1, int k) {
    const int ldy = n + 1;
    const size_t ny = sizeof(float) * m * ldy;
    float *y = test_guarded_alloc(ny);
    if (!y) return 1;
    for (int i = 0; i < m * ldy; i++) y[i] = -3.0f;
    kt->gemm_f32_wf(y, ldy, x, ldx, w, dt, ldw, m, n0, n1, k);
    int bad = 0;
    for (int r = 0; r < m; r++)
        for (int j = 0; j < ldy; j++) {
            const float got = y[(size_t)r * ldy + j];
            if (j < n0 || j >= n1) { bad += got != -3.0f; continue; }
            double e = 0.0, mag = 0.0;
            for (int t = 0; t < k; t++) {
                const size_t i = (size_t)j * ldw + t;
                double wv = dt == MOE8_DT_F32 ? ((const float *)w)[i]
                          : dt == MOE8_DT_F16 ? moe8_f16_to_f32(((const uint16_t *)w)[i])
                                              : moe8_bf16_to_f32(((const uint16_t *)w)[i]);
                e += (double)x[(size_t)r * ldx + t] * wv;
                mag += fabs((double)x[(size_t)r * ldx + t] * wv);
            }
            bad += !(fabs(got - e) <= 2.0 * k * 0x1p-24 * mag + 1e-30);
        }
    test_guarded_free(y, ny);
    return bad;
}

/* x, W and y end at an unmapped page (x and W at their last row's k-th
 * element): a kernel that reads or writes past what it may touch faults. */
static void f32_case(int m, int n, int k, moe8_dtype dt, int n0, int n1) {
    const int ldx = k + 3, ldw = k + 5;
    const size_t n_x = (size_t)(m - 1) * ldx + k, n_w = (size_t)(n - 1) * ldw + k;
    const size_t nb_w = n_w * moe8_dtype_size(dt);
    float *x = test_guarded_alloc(sizeof(float) * n_x);
    void *w = test_guarded_alloc(nb_w);
    CHECK(x && w);
    if (!x || !w) return;
    for (size_t i = 0; i < n_x; i++) x[i] = (float)test_rng_normal(&rng);
    for (size_t i = 0; i < n_w; i++) {
        float v = (float)test_rng_normal(&rng);
        if (dt == MOE8_DT_F32) ((float *)w)[i] = v;
        else if (dt == MOE8_DT_F16) ((uint16_t *)w)[i] = moe8_f32_to_f16(v);
        else ((uint16_t *)w)[i] = moe8_f32_to_bf16(v);
    }
    int bad = check_f32(moe8_kernels_ref(), x, ldx, w, dt, ldw, m, n, n0, n1, k);
    CHECKF(bad == 0, "ref f32 %s m=%d n=%d k=%d: %d out of bound", moe8_dtype_name(dt), m, n, k, bad);
    if (tut) {
        bad = check_f32(tut, x, ldx, w, dt, ldw, m, n, n0, n1, k);
        CHECKF(bad == 0, "%s f32 %s m=%d n=%d k=%d: %d out of bound", tut->isa, moe8_dtype_name(dt), m, n, k, bad);
    }
    test_guarded_free(x, sizeof(float) * n_x);
    test_guarded_free(w, nb_w);
}

static void test_f32(void) {
    const moe8_dtype dts[] = {MOE8_DT_F32, MOE8_DT_F16, MOE8_DT_BF16};
    const int ms[] = {1, 2, 3, 5, 8, 17};
    const int nk[][2] = {{16, 32}, {40, 72}, {129, 40}, {7, 129}, {5, 3}};
    for (int d = 0; d < 3; d++) {
        for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
            for (size_t b = 0; b < sizeof nk / sizeof nk[0]; b++)
                f32_case(ms[a], nk[b][0], nk[b][1], dts[d], 0, nk[b][0]);
        f32_case(4, 129, 72, dts[d], 5, 100);
        f32_case(2, 300, 2048, dts[d], 0, 300);
    }
}

/* ---- kernel-time accounting --------------------------------------------------- */

static void test_timing(void) {
    qprob p;
    qprob_init(&p, 64, 256, 0, 999);
    int8_t xq[256];
    for (int j = 0; j < 256; j++) xq[j] = (int8_t)rand_int(-127, 127);
    int32_t a[64], b[64];
    moe8_kernel_times t;
    moe8_bench_kernel_times(&t, 1);
    moe8_bench_kernel_timing(1);
    const moe8_kernels *kt = moe8_kernels_get();
    kt->gemm_q8_i32(a, 64, xq, 256, &p.q, 1, 0, 64);
    moe8_bench_kernel_timing(0);
    moe8_kernels_get()->gemm_q8_i32(b, 64, xq, 256, &p.q, 1, 0, 64);
    moe8_bench_kernel_times(&t, 1);
    CHECK(kt != moe8_kernels_get() && !strcmp(kt->isa, moe8_kernels_get()->isa) &&
          kt->qlayout == moe8_kernels_get()->qlayout);
    CHECK(t.n_calls == 1 && t.gemm_q8_s > 0.0 && t.quant_s == 0.0);
    CHECK(memcmp(a, b, sizeof a) == 0 && t.attn_s == 0.0);
    qprob_free(&p);

    /* flash attention: one query on one key (the output is its value) */
    float kv[2 * 16 * 8] = {0}, q[8] = {1, 2, 3, 4, 5, 6, 7, 8}, o[8], work[2048];
    const int32_t blocks[1] = {0};
    const moe8_kv_pages pg = {(const char *)kv, sizeof kv, 16 * 8 * sizeof(float), blocks,
                              MOE8_DT_F32, NULL};
    for (int d = 0; d < 8; d++) kv[16 * 8 + d] = (float)(d - 3);
    MOE8_ASSERT(moe8_kernels_get()->attn_work_floats(8, 1) <= 2048);
    moe8_bench_kernel_timing(1);
    kt = moe8_kernels_get();
    kt->flash_attn(o, 8, q, 8, 1, 1, 8, 0, 0.35f, &pg, work);
    moe8_bench_kernel_timing(0);
    moe8_bench_kernel_times(&t, 1);
    CHECK(t.n_calls == 1 && t.attn_s > 0.0 && t.gemm_q8_s == 0.0);
    for (int d = 0; d < 8; d++) CHECK(o[d] == (float)(d - 3));
}

/* ---- packed layouts ------------------------------------------------------------ */

/* Every layout of the registry's tables decodes back to W, zeros outside it,
 * and fills exactly bytes(n, k). */
static void test_layouts(void) {
    const int nk[][2] = {{1, 1}, {16, 4}, {17, 5}, {33, 7}, {40, 130}, {129, 2049}};
    for (int t = 0; t < moe8_kernels_n_tables(); t++) {
        const moe8_qlayout *L = moe8_kernels_table(t)->qlayout;
        for (size_t c = 0; c < sizeof nk / sizeof nk[0]; c++) {
            const int n = nk[c][0], k = nk[c][1], ldw = k + 3;
            int8_t *w = malloc((size_t)n * ldw);
            for (size_t i = 0; i < (size_t)n * ldw; i++) w[i] = (int8_t)rand_int(-128, 127);
            const size_t nb = L->bytes(n, k);
            int8_t *d = moe8_alloc_aligned(nb + 64);
            memset(d, 0x33, nb + 64);
            L->pack(d, w, n, k, ldw);
            moe8_qmat q;
            moe8_qmat_init(&q, L, d, n, k, NULL, NULL);
            int bad = 0;
            for (int i = 0; i < q.n_pad; i++)
                for (int j = 0; j < q.k_pad; j++)
                    bad += moe8_qmat_at(&q, i, j) != (i < n && j < k ? w[(size_t)i * ldw + j] : 0);
            for (int i = 0; i < 64; i++) bad += d[nb + i] != 0x33; /* nothing past bytes() */
            CHECKF(bad == 0 && q.n_pad % L->nr == 0 && q.k_pad % L->kalign == 0 &&
                       nb == (size_t)q.n_pad * q.k_pad,
                   "layout %s n=%d k=%d: %d bad elements", L->name, n, k, bad);
            free(w);
            moe8_free_aligned(d);
        }
    }
}

/* ---- the exponential (SEMANTICS §10) --------------------------------------------------------- */

static float f_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* exp_f32 of x[0..n) by the reference (into r) and table kt (into t): bad[0] counts the table's
 * differences from the reference, bad[1] the reference's from libm's expf (on glibc), bad[2] (with
 * `bound`) normal results past 0.502 ulp of exp in double. */
static void exp_compare(const moe8_kernels *kt, const float *x, float *r, float *t, int n, int bound, int bad[3]) {
    moe8_exp_f32_ref(r, x, n, 0.0f, 1.0f);
    kt->exp_f32(t, x, n, 0.0f, 1.0f);
    for (int i = 0; i < n; i++) {
        const float l = expf(x[i]);
        const double e = exp((double)x[i]);
        bad[0] += memcmp(&t[i], &r[i], 4) != 0;
#ifdef __GLIBC__
        bad[1] += memcmp(&l, &r[i], 4) != 0;
#else
        (void)l;
#endif
        if (bound && x[i] == x[i] && e < 0x1p127 && e > 0x1p-126)
            bad[2] += fabs((double)r[i] - e) > 0.502 * ldexp(1.0, ilogb(e) - 23);
    }
}

/* The table of 2^(i/32) against exp2l; the reference within half an ulp (and a little) of exp in
 * double, and on glibc bit for bit its expf; the table under test bit for bit the reference over
 * a sweep of every 509th float bit pattern (4093rd under ASan), the edges of each range, softmax-shaped inputs with a
 * subtraction and a division, tails and in place; max and the chunked sum. */
static void test_exp(void) {
    const moe8_kernels *kt = tut ? tut : moe8_kernels_ref();
#ifdef __SANITIZE_ADDRESS__
    enum { B = 4096, STRIDE = 4093 }; /* a second under ASan per table, not eight */
#else
    enum { B = 4096, STRIDE = 509 };
#endif
    static float x[B], r[B], t[B];
    int bad_tab = 0, bad[3] = {0, 0, 0}, n_x = 0;
    for (int i = 0; i < 32; i++) {
        uint64_t u = moe8_expf_tab[i] + ((uint64_t)i << 47);
        double d;
        memcpy(&d, &u, 8);
        bad_tab += d != (double)exp2l(i / 32.0L);
    }
    CHECKF(bad_tab == 0, "%d of the 32 entries of 2^(i/32) are not exp2l's", bad_tab);
    for (uint64_t b = 0; b < (1ull << 32); b += (uint64_t)B * STRIDE) {
        int n = 0;
        for (uint64_t u = b; u < b + (uint64_t)B * STRIDE && u < (1ull << 32); u += STRIDE) x[n++] = f_of((uint32_t)u);
        exp_compare(kt, x, r, t, n, 1, bad);
        n_x += n;
    }
    /* each range's edges, a few ulps either side */
    {
        const float edge[] = {0.0f, -0.0f, 88.0f, -88.0f, MOE8_EXPF_OFLOW, MOE8_EXPF_UFLOW, MOE8_EXPF_MAY_UFLOW,
                              INFINITY, -INFINITY, NAN, -NAN, 1e-30f, -1e-30f, 0x1p-149f, 1.0f, -1.0f};
        int n = 0;
        for (size_t e = 0; e < sizeof edge / sizeof edge[0]; e++)
            for (int d = -4; d <= 4; d++) { /* edge[e] moved |d| ulps down or up */
                float v = edge[e];
                for (int k = 0; k < abs(d); k++) v = nextafterf(v, d < 0 ? -INFINITY : INFINITY);
                x[n++] = v;
            }
        exp_compare(kt, x, r, t, n, 0, bad);
        n_x += n;
    }
    CHECKF(bad[2] == 0, "the reference exponential: %d of %d past 0.502 ulp of exp", bad[2], n_x);
    CHECKF(bad[1] == 0, "the reference exponential differs from libm's expf on %d of %d floats", bad[1], n_x);
    CHECKF(bad[0] == 0, "%s exp_f32 differs from the reference on %d of %d floats", kt->isa, bad[0], n_x);
    /* softmax-shaped: logits around 0..20, (x - max) / temperature, every length to 40, in place */
    {
        const float temps[] = {1.0f, 0.7f, 1.3f, 0.05f};
        int bad = 0, bad_sum = 0, bad_max = 0;
        for (int n = 0; n <= 40; n++)
            for (size_t ti = 0; ti < sizeof temps / sizeof temps[0]; ti++) {
                float mx = -INFINITY, y[40], z[40];
                double want = 0.0;
                for (int i = 0; i < n; i++) {
                    x[i] = (float)rand_int(-2000000, 2000000) * 1e-5f;
                    if (rand_int(0, 9) == 0) x[i] = rand_int(0, 1) ? NAN : -INFINITY;
                    if (x[i] > mx) mx = x[i];
                }
                bad_max += memcmp(&mx, &(float){moe8_max_f32(x, n)}, 4) != 0;
                moe8_exp_f32_ref(y, x, n, mx, temps[ti]);
                memcpy(z, x, (size_t)n * sizeof *z);
                kt->exp_f32(z, z, n, mx, temps[ti]);
                bad += n && memcmp(y, z, (size_t)n * sizeof *y) != 0;
                for (int i = 0; i < n; i++) want += y[i];
                if (!tut) {
                    double got = moe8_exp_sum(z, x, n, mx, temps[ti]);
                    bad_sum += memcmp(&got, &want, 8) != 0 || (n && memcmp(y, z, (size_t)n * sizeof *y));
                }
            }
        CHECKF(bad == 0, "%s exp_f32 on softmax rows: %d rows differ from the reference", kt->isa, bad);
        CHECKF(bad_max == 0, "moe8_max_f32: %d rows not the largest non-NaN value", bad_max);
        CHECKF(bad_sum == 0, "moe8_exp_sum: %d rows not the reference's sum in index order", bad_sum);
    }
    /* the sum across chunks of 1024, with and without p */
    if (!tut) {
        float *big = malloc(3001 * sizeof *big), *p = malloc(3001 * sizeof *p);
        double want = 0.0, got, got_p;
        float mx;
        for (int i = 0; i < 3001; i++) big[i] = (float)rand_int(-3000000, 1000000) * 1e-5f;
        mx = moe8_max_f32(big, 3001);
        for (int i = 0; i < 3001; i++) {
            float e;
            moe8_exp_f32_ref(&e, big + i, 1, mx, 0.9f);
            want += e;
        }
        got = moe8_exp_sum(NULL, big, 3001, mx, 0.9f);
        got_p = moe8_exp_sum(p, big, 3001, mx, 0.9f);
        CHECKF(got == want && got_p == want, "moe8_exp_sum over 3001: %.17g and %.17g, want %.17g", got, got_p, want);
        free(big);
        free(p);
    }
}

/* A kernel the table borrows from a later one (TEST_SHARED) is checked in that table's run. */
static int own(const char *what, const char *same) {
    if (same) printf("test_kernels: %s: %s's, checked in that table's run\n", what, same);
    return !same;
}

int main(void) {
    tut = test_table_besides_ref();
    test_layouts();
    if (own("quant_rows", TEST_SHARED(tut, quant_rows))) {
        test_quant();
        test_quant_rounding_mode();
    }
    test_q8_shapes();
    test_q8_rows();
    test_q8_worst_case();
    test_q8_real_shape();
    if (own("gemm_f32_wf", TEST_SHARED(tut, gemm_f32_wf))) test_f32();
    test_timing();
    if (own("exp_f32", TEST_SHARED(tut, exp_f32))) test_exp();
    return test_summary();
}
