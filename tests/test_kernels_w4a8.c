/*
 * test_kernels_w4a8.c — the W4A8 GEMMs (int4 weights x int8 codes, SEMANTICS
 * §4b) of the kernel table in use (MOE8_ISA: ctest runs it once per table)
 * and of the scalar reference, against a reference written here: plain
 * W[n][k] codes in [-8, 7], an int64 sum, the §4 epilogue in fp32 in its
 * order. The packed layout q4k8 is decoded here from its description (not
 * through the library's reader). Every row count 1-50, odd K and N, column
 * sub-ranges, activation tails holding garbage past k, the worst-case
 * magnitudes (-8 x -128 over long K), the decode shapes of Qwen3-30B-A3B's
 * experts, and the int8 path on the same codes (bit for bit the same y);
 * every table's quant_rows zeroes rows up to round_up(k, 8), the int4
 * kernels' K alignment, over garbage, in a buffer of exactly that stride.
 */
#include <stdint.h>

#include "core/core.h"
#include "kernels/kernels.h"

#include "test.h"
#include "test_isa.h"

static const moe8_kernels *tut; /* the table under test; NULL when it is the reference */
static test_rng rng = {0x5851f42d4c957f2dULL};

static int rand_int(int lo, int hi) { return lo + (int)(test_rng_u64(&rng) % (uint64_t)(hi - lo + 1)); }

typedef struct {
    int n, k;
    int8_t *w;       /* [n][k] codes in [-8, 7] */
    int8_t *packed;  /* q4k8 */
    float *scale;    /* [n] */
    int32_t *offset; /* [n] or NULL */
    moe8_qmat q;
} q4prob;

/* wfill: 999 random codes, else every code wfill. */
static void q4_init(q4prob *p, int n, int k, int with_offset, int wfill) {
    const moe8_qlayout *L = &moe8_qlayout_q4k8;
    p->n = n;
    p->k = k;
    p->w = malloc((size_t)n * k);
    for (size_t i = 0; i < (size_t)n * k; i++) p->w[i] = (int8_t)(wfill == 999 ? rand_int(-8, 7) : wfill);
    p->packed = moe8_alloc_aligned(L->bytes(n, k));
    L->pack(p->packed, p->w, n, k, k);
    p->scale = malloc(sizeof(float) * n);
    p->offset = with_offset ? malloc(sizeof(int32_t) * n) : NULL;
    for (int i = 0; i < n; i++) {
        p->scale[i] = (float)(1e-3 * (1.0 + test_rng_uniform(&rng)));
        if (p->offset) p->offset[i] = rand_int(-8, 7);
    }
    moe8_qmat_init(&p->q, L, p->packed, n, k, p->scale, p->offset);
}

static void q4_free(q4prob *p) {
    free(p->w);
    moe8_free_aligned(p->packed);
    free(p->scale);
    free(p->offset);
}

/* ---- the layout, decoded from its description ---------------------------- */

static void test_layout(void) {
    const int shapes[][2] = {{16, 8}, {17, 9}, {33, 70}, {5, 3}, {48, 2048 + 4}};
    const moe8_qlayout *L = &moe8_qlayout_q4k8;
    CHECK(L->bits == 4 && L->nr == 16 && L->kalign == 8 && !strcmp(L->name, "q4k8"));
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int n = shapes[s][0], k = shapes[s][1], n_pad = (n + 15) / 16 * 16;
        const int k_pad = (k + 7) / 8 * 8;
        q4prob p;
        q4_init(&p, n, k, 0, 999);
        CHECK(L->bytes(n, k) == (size_t)n_pad * k_pad / 2);
        int bad = 0;
        for (int i = 0; i < n_pad; i++)
            for (int j = 0; j < k_pad; j++) {
                /* panel i/16, group j/8, byte 4 (i%16) + j%4; quad j/4 odd: high nibble */
                const uint8_t b = (uint8_t)p.packed[((size_t)(i / 16) * (k_pad / 8) + j / 8) * 64 +
                                                    4 * (i % 16) + j % 4];
                const int code = ((j / 4) % 2 ? b >> 4 : b & 15) - 8;
                const int want = i < n && j < k ? p.w[(size_t)i * k + j] : 0;
                bad += code != want;
                if (i < n && j < k) bad += moe8_qmat_at(&p.q, i, j) != want;
            }
        CHECKF(bad == 0, "q4k8 n=%d k=%d: %d codes differ", n, k, bad);
        q4_free(&p);
    }
}

/* ---- GEMMs ------------------------------------------------------------------ */

/* Both q4 kernels of kt on rows [0, m), columns [n0, n1) against the plain
 * sums; columns outside stay untouched. */
static int check_q4(const moe8_kernels *kt, const q4prob *p, const int8_t *xq, int ldq,
                    const float *sx, const int32_t *xsum, int m, int n0, int n1) {
    const int n = p->n, k = p->k, ldc = n + 3;
    int32_t *acc = malloc(sizeof(int32_t) * m * ldc);
    float *y = malloc(sizeof(float) * m * ldc);
    for (int i = 0; i < m * ldc; i++) { acc[i] = 0x7a7a7a7a; y[i] = -7.0f; }
    kt->gemm_q4_i32(acc, ldc, xq, ldq, &p->q, m, n0, n1);
    kt->gemm_q4_f32(y, ldc, xq, ldq, sx, xsum, &p->q, m, n0, n1);
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
            const int32_t full = (int32_t)a + (p->offset ? p->offset[j] * xsum[r] : 0);
            const float ye = ((float)full * sx[r]) * p->scale[j];
            bad += a != acc[o] || memcmp(&ye, &y[o], sizeof ye) != 0;
        }
    free(acc);
    free(y);
    return bad;
}

/* Codes of m rows of k (quant_rows of random rows: one all-zero, one huge),
 * stride ldq = round_up(k, 8) + 8, the bytes past k garbage (0x55 / 0xa5 ...):
 * the kernels must cancel whatever is there. */
static int8_t *make_rows(int m, int k, int *ldq, float *sx, int32_t *xsum) {
    const int ld = moe8_round_up(k, 8) + 8;
    float *x = malloc(sizeof(float) * (size_t)m * k);
    int8_t *xq = malloc((size_t)m * ld);
    for (int r = 0; r < m; r++)
        for (int j = 0; j < k; j++) {
            const double v = test_rng_normal(&rng);
            x[(size_t)r * k + j] = r == 1 ? 0.0f : r == 2 ? (float)(v * 1e30) : (float)v;
        }
    moe8_kernels_ref()->quant_rows(xq, ld, sx, xsum, x, k, m, k);
    for (int r = 0; r < m; r++)
        for (int j = k; j < ld; j++) xq[(size_t)r * ld + j] = (int8_t)(0x55 ^ (j * 37 + r));
    free(x);
    *ldq = ld;
    return xq;
}

static void q4_case(int m, int n, int k, int with_offset, int n0, int n1) {
    q4prob p;
    float *sx = malloc(sizeof(float) * m);
    int32_t *xsum = malloc(sizeof(int32_t) * m);
    int ldq;
    q4_init(&p, n, k, with_offset, 999);
    int8_t *xq = make_rows(m, k, &ldq, sx, xsum);
    int bad = check_q4(moe8_kernels_ref(), &p, xq, ldq, sx, xsum, m, n0, n1);
    CHECKF(bad == 0, "ref q4 m=%d n=%d k=%d off=%d [%d,%d): %d mismatches", m, n, k, with_offset, n0, n1, bad);
    if (tut) {
        bad = check_q4(tut, &p, xq, ldq, sx, xsum, m, n0, n1);
        CHECKF(bad == 0, "%s q4 m=%d n=%d k=%d off=%d [%d,%d): %d mismatches", tut->isa, m, n, k,
               with_offset, n0, n1, bad);
    }
    free(xq); free(sx); free(xsum);
    q4_free(&p);
}

static void test_shapes(void) {
    const int nk[][2] = {{16, 32}, {40, 72}, {129, 41}, {73, 129}, {33, 7}, {48, 2}, {17, 301},
                         {200, 8}, {135, 1001}};
    for (int m = 1; m <= 50; m++) {
        const int b = m % 9, n = nk[b][0], k = nk[b][1];
        q4_case(m, n, k, m % 5 == 0, 0, n);
    }
    q4_case(7, 129, 72, 1, 32, 129); /* sub-ranges starting at a panel boundary */
    q4_case(3, 129, 73, 0, 16, 100);
    q4_case(1, 200, 75, 1, 16, 190); /* the few-row paths: 8 (4) panels + the rest */
    q4_case(2, 200, 72, 0, 32, 199);
    q4_case(4, 250, 9, 0, 0, 250);
    q4_case(97, 211, 203, 1, 32, 176); /* several blocks of panels */
}

/* -8 x -128 everywhere (the largest |acc|: 1024 k), 7 x 127 and mixed rows. */
static void worst_case(int m) {
    const int n = 40, k = 8191;
    int ldq = moe8_round_up(k, 8);
    q4prob p;
    q4_init(&p, n, k, 0, -8);
    for (int i = 20; i < n; i++)
        for (int j = 0; j < k; j++) p.w[(size_t)i * k + j] = 7;
    moe8_qmat_init(&p.q, &moe8_qlayout_q4k8, p.packed, n, k, p.scale, NULL);
    moe8_qlayout_q4k8.pack(p.packed, p.w, n, k, k);
    int8_t *xq = calloc((size_t)m * ldq, 1);
    float sx[8];
    int32_t xsum[8] = {0};
    for (int r = 0; r < m; r++) {
        sx[r] = r % 2 ? 0.5f : 1.0f;
        for (int j = 0; j < k; j++) {
            int8_t *q = &xq[(size_t)r * ldq + j];
            *q = (int8_t)(r % 3 == 0 ? -128 : r % 3 == 1 ? 127 : j % 2 ? 127 : -128);
            xsum[r] += *q;
        }
    }
    int bad = check_q4(moe8_kernels_ref(), &p, xq, ldq, sx, xsum, m, 0, n);
    CHECKF(bad == 0, "ref q4 worst case m=%d: %d mismatches", m, bad);
    if (tut) {
        bad = check_q4(tut, &p, xq, ldq, sx, xsum, m, 0, n);
        CHECKF(bad == 0, "%s q4 worst case m=%d: %d mismatches", tut->isa, m, bad);
        int32_t acc[8 * 40];
        tut->gemm_q4_i32(acc, n, xq, ldq, &p.q, m, 0, n);
        CHECK(acc[0] == 1024 * k && acc[20] == -128 * 7 * k && (m < 2 || acc[n] == -8 * 127 * k));
    }
    free(xq);
    q4_free(&p);
}

static void test_worst_case(void) {
    for (int m = 1; m <= 6; m++) worst_case(m);
}

/* Qwen3-30B-A3B's expert (H 2048, I 768): gate/up [768][2048], down
 * [2048][768], at decode row counts and a prefill tile; the table's q4
 * result equals the reference's and the table's own int8 path on the same
 * codes (packed in its int8 layout) bit for bit. */
static void real_shape(int m, int n, int k) {
    q4prob p;
    float sx[64];
    int32_t xsum[64];
    int ldq;
    q4_init(&p, n, k, 0, 999);
    int8_t *xq = make_rows(m, k, &ldq, sx, xsum);
    for (int r = 0; r < m; r++) memset(xq + (size_t)r * ldq + k, 0, (size_t)(ldq - k)); /* int8 path */
    const moe8_kernels *kt = tut ? tut : moe8_kernels_ref();
    const moe8_qlayout *L8 = moe8_kernels_get()->qlayout;
    int8_t *p8 = moe8_alloc_aligned(L8->bytes(n, k));
    moe8_qmat q8;
    L8->pack(p8, p.w, n, k, k);
    moe8_qmat_init(&q8, L8, p8, n, k, p.scale, NULL);
    float *ya = malloc(sizeof(float) * m * n), *yb = malloc(sizeof(float) * m * n);
    float *yc = malloc(sizeof(float) * m * n);
    moe8_kernels_ref()->gemm_q4_f32(ya, n, xq, ldq, sx, xsum, &p.q, m, 0, n);
    kt->gemm_q4_f32(yb, n, xq, ldq, sx, xsum, &p.q, m, 0, n);
    kt->gemm_q8_f32(yc, n, xq, ldq, sx, xsum, &q8, m, 0, n);
    CHECKF(memcmp(ya, yb, sizeof(float) * m * n) == 0, "%s q4 %dx%d m=%d differs from ref", kt->isa, n, k, m);
    CHECKF(memcmp(yb, yc, sizeof(float) * m * n) == 0, "%s q4 %dx%d m=%d differs from its q8", kt->isa, n, k, m);
    free(ya); free(yb); free(yc); free(xq);
    moe8_free_aligned(p8);
    q4_free(&p);
}

static void test_real_shapes(void) {
    const int ms[] = {1, 2, 3, 4, 40};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        real_shape(ms[i], 768, 2048);
        real_shape(ms[i], 2048, 768);
    }
}

/* quant_rows of each table zeroes every row up to round_up(k, 8), the
 * alignment the int4 GEMMs read to (it once stopped at round_up(k, 4), and a
 * row whose stride was exactly round_up(k, 8) kept the garbage it held
 * there): rows quantized into a buffer of exactly m * round_up(k, 8) bytes
 * filled with garbage first, then the GEMM on them against the reference. */
static void test_tail_zeroed(void) {
    const moe8_qlayout *layouts[] = {&moe8_qlayout_k2, &moe8_qlayout_k4u, &moe8_qlayout_q4k8};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        CHECKF(MOE8_QK_KALIGN % layouts[i]->kalign == 0, "layout %s aligns K to %d, "
               "quant_rows zeroes to %d", layouts[i]->name, layouts[i]->kalign, MOE8_QK_KALIGN);
    const int ks[] = {1, 3, 4, 5, 9, 12, 13, 20, 36, 61, 100, 1001};
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
        const int k = ks[t], m = 3 + (int)t % 5, ld = moe8_round_up(k, 8), n = 33;
        float *x = malloc(sizeof(float) * (size_t)m * k), sx[8];
        int8_t *xq = malloc((size_t)m * ld);
        int32_t xsum[8];
        q4prob p;
        for (size_t j = 0; j < (size_t)m * k; j++) x[j] = (float)test_rng_normal(&rng);
        for (int pass = 0; pass < 2; pass++) {
            const moe8_kernels *kt = pass ? tut : moe8_kernels_ref();
            if (!kt) continue;
            for (size_t j = 0; j < (size_t)m * ld; j++) xq[j] = (int8_t)(0x5a ^ (j * 13));
            kt->quant_rows(xq, ld, sx, xsum, x, k, m, k);
            int bad = 0;
            for (int r = 0; r < m; r++)
                for (int j = k; j < ld; j++) bad += xq[(size_t)r * ld + j] != 0;
            CHECKF(bad == 0, "%s quant_rows k=%d: %d bytes of the tail up to %d not zeroed",
                   kt->isa, k, bad, ld);
            q4_init(&p, n, k, 0, 999);
            bad = check_q4(kt, &p, xq, ld, sx, xsum, m, 0, n);
            CHECKF(bad == 0, "%s q4 on rows of stride round_up(k, 8), k=%d: %d mismatches",
                   kt->isa, k, bad);
            q4_free(&p);
        }
        free(x);
        free(xq);
    }
}

int main(void) {
    tut = test_table_besides_ref();
    if (tut) printf("W4A8 GEMMs of %s (layout %s)\n", tut->isa, tut->q4layout->name);
    test_layout();
    test_shapes();
    test_tail_zeroed();
    test_worst_case();
    test_real_shapes();
    return test_summary();
}
