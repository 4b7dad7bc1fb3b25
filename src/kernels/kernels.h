/*
 * kernels.h — moe8's compute kernels, one table per instruction set.
 *
 * A table (moe8_kernels) holds everything that varies by ISA: the packed int8
 * weight layout its GEMMs read (moe8_qlayout), a supported() probe (CPUID and
 * the OS state the ISA needs), per-thread setup, the attention scratch size,
 * the kernels, and its roofline probes. The registry (registry.c) lists the
 * tables best first: the first one the machine supports is used, unless
 * MOE8_ISA=NAME forces one (MOE8_FORCE_REF=1 is MOE8_ISA=ref). Weights are
 * packed once, by the table chosen when they are prepared, and remember their
 * layout; a table's GEMMs take only weights of its own layout, while the
 * scalar reference (*_ref, kernels_ref.c) reads any layout, so every table is
 * checked against it on its own packing. Integer results of every table
 * equal the reference bit for bit; float results stay within the bound
 * stated beside each kernel.
 *
 * Adding an ISA: a folder src/kernels/x86/NAME/ (or src/kernels/arm/NAME/)
 * with its kernels and its table, one line in registry.c, one
 * moe8_isa_table() row in CMakeLists.txt (its compiler flags).
 */
#ifndef MOE8_KERNELS_H
#define MOE8_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "core/public.h"

#define MOE8_QK_KALIGN 8  /* the largest K alignment of any layout (q4k8's): activation
                           * rows are zeroed up to it, so every table reads zeros past k */

static inline int moe8_round_up(int x, int m) { return (x + m - 1) / m * m; }

typedef struct moe8_qmat moe8_qmat;

/* A packed int8 weight layout: W[n][k] int8 (checkpoint layout [out][in]) in
 * panels of nr output channels, K padded to a multiple of kalign. The layouts
 * are in qlayout.c; each table names the one its GEMMs read. */
typedef struct {
    const char *name;        /* "k2", "k4u" */
    int nr;                  /* output channels per panel: callers split columns on it */
    int kalign;              /* k_pad = round_up(k, kalign); activation rows are zeroed up to it */
    /* Bytes of packed data for W[n][k]. */
    size_t (*bytes)(int n, int k);
    /* Pack W (row stride ldw) into dst (bytes(n, k) bytes, 64-byte aligned). */
    void (*pack)(int8_t *dst, const int8_t *w, int n, int k, int ldw);
    /* Element W[i][j] of a packed matrix (the reference's and tests' reader). */
    int8_t (*at)(const moe8_qmat *w, int i, int j);
    int bits;                /* 8, or 4: codes in [-8, 7] (pack asserts it), two per byte */
} moe8_qlayout;

extern const moe8_qlayout moe8_qlayout_k2;   /* 16 channels, K in pairs (AVX2, ref) */
extern const moe8_qlayout moe8_qlayout_k4u;  /* 16 channels, K in quads, W + 128 (AVX-512 VNNI) */
/* int4 (W4A8, SEMANTICS §4b): 16 channels, K in groups of 8, each 64-byte
 * block two k4u quad-steps, step 2s in the low nibbles, 2s+1 in the high
 * ones, stored as W + 8 (0..15); the one int4 layout of every table. */
extern const moe8_qlayout moe8_qlayout_q4k8;

struct moe8_qmat {
    int32_t n, k;           /* logical shape of W[n][k] */
    int32_t n_pad, k_pad;   /* round_up(n, layout->nr), round_up(k, layout->kalign) */
    const int8_t *data;     /* layout->bytes(n, k) bytes, 64-byte aligned */
    const float *scale;     /* [n] per-output-channel weight scale */
    const int32_t *offset;  /* [n] weight offset, W ~ S*(Wq + O); NULL when all 0 */
    const moe8_qlayout *layout;
};

/* Fill q for data packed by L->pack. */
void moe8_qmat_init(moe8_qmat *q, const moe8_qlayout *L, const int8_t *data, int n, int k,
                    const float *scale, const int32_t *offset);
/* Element W[i][j] of a packed matrix (for tests and slow paths). */
static inline int8_t moe8_qmat_at(const moe8_qmat *w, int i, int j) {
    return w->layout->at(w, i, j);
}

/* Per-row dynamic quantization (SEMANTICS §4), m rows of k values:
 *   sx[r] = max|x[r]| / 127.0f; xq = clamp(rintf(x / sx), -127, 127); 0 for an all-zero row
 *   xsum[r] = sum of xq[r] (for weight offsets)
 * xq rows have stride ldq >= round_up(k, KALIGN); the tail k..round_up(k,KALIGN) is zeroed. */
typedef void (*moe8_quant_rows_fn)(int8_t *xq, int ldq, float *sx, int32_t *xsum,
                                   const float *x, int ldx, int m, int k);

/* acc[r][j] = sum_k xq[r][k] * W[j][k], exact int32, for r < m, n0 <= j < n1.
 * acc points at row 0, column 0 (stride ldc); n0 is a multiple of NR. */
typedef void (*moe8_gemm_q8_i32_fn)(int32_t *acc, int ldc, const int8_t *xq, int ldq,
                                    const moe8_qmat *w, int m, int n0, int n1);

/* y[r][j] = ((float)(acc[r][j] + O[j]*xsum[r]) * sx[r]) * S[j]   (SEMANTICS §4, fp32 in this order).
 * Bit-identical across variants (the integer part is exact, the float part fixed). */
typedef void (*moe8_gemm_q8_f32_fn)(float *y, int ldy, const int8_t *xq, int ldq,
                                    const float *sx, const int32_t *xsum, const moe8_qmat *w,
                                    int m, int n0, int n1);

/* The W4A8 GEMMs (SEMANTICS §4b) have the q8 signatures and results (the
 * same sums and epilogue) on a weight of the table's q4layout (codes in
 * [-8, 7]); activation rows are read up to k_pad = round_up(k, 8) (ldq >=
 * k_pad; quant_rows zeroes them up to there, though whatever they hold past k
 * cancels). */

/* y[r][j] = sum_k x[r][k] * W[j][k] for a float weight W[n][ldw] stored as
 * F32, F16 or BF16 (read in place). fp32 accumulation; variants may sum in a
 * different order: relative error vs a double reference <= 1e-5 * k-ish. */
typedef void (*moe8_gemm_f32_wf_fn)(float *y, int ldy, const float *x, int ldx, const void *w,
                                    moe8_dtype wdt, int ldw, int m, int n0, int n1, int k);

/* The K/V of one sequence and one kv head of one layer in the paged cache
 * (SEMANTICS §7, §10): key block b (positions 16b .. 16b+15) is K[16][D] of
 * dtype dt at base + blocks[b] * block_bytes, its values V[16][D] v_off bytes
 * further. dt is F32, F16 or BF16; values are widened to fp32 on reading. */
typedef struct {
    const char *base;        /* K rows of block 0 (of this layer and kv head) */
    size_t block_bytes;      /* stride between blocks */
    size_t v_off;            /* bytes from a block's K rows to its V rows */
    const int32_t *blocks;   /* the sequence's block table */
    moe8_dtype dt;
    float *stats;            /* NULL, or [rows][2]: each row's final max m and sum l */
} moe8_kv_pages;

/* Flash attention of a tile of queries against one kv head: n_tok
 * consecutive tokens of one sequence, token i at position pos0 + i attending
 * to positions 0..pos0+i, times G query heads sharing the kv head. Query row
 * (i, g) is q[i*ldq + g*D .. +D), its output out[i*ldo + g*D .. +D):
 *     out = sum_p softmax_p(scale * q.k_p) v_p
 * Key blocks are read once per tile, in position order; each row keeps a
 * running max, a running sum and a rescaled accumulator (online softmax) and
 * is computed in an order that depends only on D and its own position, never
 * on the other rows of the tile (batch invariance, SEMANTICS §10). Variants
 * differ by FMA and exp rounding: relative error vs a double reference ~1e-6
 * for scores of unit scale; large scores add their own fp32 rounding (at
 * |s| ~ 60, ulp 4e-6 moves a weight by as much).
 * kv->stats, when not NULL: on return stats[2r] and stats[2r + 1] hold row
 * r's (r = i*G + g) final running max m and sum l, out being the
 * accumulator divided by l (attention sinks, SEMANTICS §7i, fold in after).
 * work: moe8_attn_work_floats(D, n_tok * G) floats. */
typedef void (*moe8_flash_attn_fn)(float *out, int ldo, const float *q, int ldq, int n_tok,
                                   int G, int D, int32_t pos0, float scale,
                                   const moe8_kv_pages *kv, float *work);

/* Key blocks per online-softmax step of the optimized kernels (the reference
 * takes one block at a time). */
#define MOE8_ATTN_CHUNK_BLOCKS 4

/* Scratch floats of one flash-attention tile of `rows` query rows: widened
 * K and V of a chunk of MOE8_ATTN_CHUNK_BLOCKS blocks ([C*16][D] each), then
 * scores [rows][C*16], max, sum, rescale [rows] (a multiple of 16 floats, so
 * per-thread slices stay 64-byte aligned). */
static inline size_t moe8_attn_work_floats(int D, int rows) {
    const size_t keys = (size_t)MOE8_ATTN_CHUNK_BLOCKS * MOE8_KV_BLOCK_TOKENS;
    size_t n = 2 * keys * (size_t)D + (keys + 3) * (size_t)rows;
    return (n + 15) / 16 * 16;
}

/* y[i] = expf((x[i] - sub) / div) for i < n (y may be x): the subtraction and
 * the division in fp32, then the exponential of SEMANTICS §10 ("The
 * exponential"), which is glibc's expf bit for bit: ARM optimized-routines'
 * algorithm, in double, with a 32-entry table of 2^(i/32) and a cubic. Every
 * table equals the reference bit for bit, for every float input. */
typedef void (*moe8_exp_f32_fn)(float *y, const float *x, int n, float sub, float div);

/* The algorithm's constants (softmax.c): x / ln2 * 32 splits into k + r,
 * exp(x) = 2^(k/32) * 2^(r/32), 2^(r/32) ~ 1 + C2 r + C1 r^2 + C0 r^3. TAB[i]
 * holds the bits of 2^(i/32) (rounded to nearest) minus i << 47, so adding
 * k << 47 to TAB[k % 32] gives the bits of 2^(k/32) for any |k| < 150*32. */
#define MOE8_EXPF_INVLN2N 0x1.71547652b82fep+5 /* 32 / ln 2 */
#define MOE8_EXPF_SHIFT 0x1.8p+52              /* rounds z to an integer in its low bits */
#define MOE8_EXPF_C0 0x1.c6af84b912394p-20
#define MOE8_EXPF_C1 0x1.ebfce50fac4f3p-13
#define MOE8_EXPF_C2 0x1.62e42ff0c52d6p-6
#define MOE8_EXPF_OFLOW 0x1.62e42ep6f          /* above: +inf */
#define MOE8_EXPF_UFLOW (-0x1.9fe368p6f)       /* below: +0 */
#define MOE8_EXPF_MAY_UFLOW (-0x1.9d1d9ep6f)   /* below (and not under UFLOW): 0x1p-149 */
extern const uint64_t moe8_expf_tab[32];

void moe8_exp_f32_ref(float *y, const float *x, int n, float sub, float div);
/* The largest of x[0..n), NaN ignored; -INFINITY when there is none. */
float moe8_max_f32(const float *x, int n);
/* Softmax's exponentials: p[i] = expf((x[i] - mx) / div) by the chosen
 * table's exp_f32 (p may be NULL: not kept), and their sum in double, added
 * in index order. */
double moe8_exp_sum(float *p, const float *x, int n, float mx, float div);

/* Gated DeltaNet (src/model/gdn.c drives these two; SEMANTICS "Gated DeltaNet").
 * c[i][j] = (acc ? c[i][j] : 0) + sum_p a[i][p] b[p][j] for i < m, j < n,
 * p < k; all fp32 row-major. MOE8_GEMM_TRI_A: a is lower triangular (a[i][p]
 * for p > i must be 0 up to p < k: a kernel may read them or skip them);
 * MOE8_GEMM_TRI_C: only c[i][j] for j <= i is wanted (the others may be
 * written with any value). fp32 accumulation
 * in an order fixed by m, n, k and the flags: relative error vs a double sum
 * <= k * 2^-23 * sum |a b|. The chunked prefill's matrix products. */
#define MOE8_GEMM_ACC 1
#define MOE8_GEMM_TRI_A 2
#define MOE8_GEMM_TRI_C 4
typedef void (*moe8_gemm_f32_nn_fn)(float *c, int ldc, const float *a, int lda, const float *b,
                                    int ldb, int m, int n, int k, int flags);
/* One token of the gated delta rule on one value head, the state read once
 * and written once: S [dk][dv] fp32 in/out, q, k [dk] (L2-normalised, q
 * scaled), v [dv], e = exp(g), beta; o [dv]:
 *   u = Sᵀk, w = Sᵀq (one pass over S); d = beta (v - e u);
 *   o = e w + (k.q) d; S = e S + k dᵀ (second pass, S still in cache)
 * which equals S = eS; S += k beta (v - Sᵀk)ᵀ; o = Sᵀq. fp32; relative
 * error vs double ~ dk * 2^-23 of the magnitudes summed. */
typedef void (*moe8_gdn_step_fn)(float *o, float *S, const float *q, const float *k,
                                 const float *v, float e, float beta, int dk, int dv);

typedef struct moe8_kernels moe8_kernels;
struct moe8_kernels {
    const char *isa;                 /* "ref", "avx2", "avx512", "amx" (MOE8_ISA's names) */
    const moe8_qlayout *qlayout;     /* the int8 weight layout its GEMMs read */
    int (*supported)(void);          /* the CPU and the OS can run it (NULL: always) */
    void (*thread_init)(void);       /* per-thread setup before its kernels run (NULL: none) */
    size_t (*attn_work_floats)(int D, int rows); /* flash-attention scratch of a tile */
    moe8_quant_rows_fn quant_rows;
    moe8_gemm_q8_i32_fn gemm_q8_i32;
    moe8_gemm_q8_f32_fn gemm_q8_f32;
    const moe8_qlayout *q4layout;    /* the int4 layout its W4A8 GEMMs read (q4k8) */
    moe8_gemm_q8_i32_fn gemm_q4_i32;
    moe8_gemm_q8_f32_fn gemm_q4_f32;
    moe8_gemm_f32_wf_fn gemm_f32_wf;
    moe8_flash_attn_fn flash_attn;
    moe8_exp_f32_fn exp_f32;
    moe8_gemm_f32_nn_fn gemm_f32_nn;   /* NULL: the reference's */
    moe8_gdn_step_fn gdn_step;         /* NULL: the reference's */
    /* Roofline probes, one thread each (roofline.c runs them on every thread):
     * seconds to read n_bytes once; seconds for n_iter iterations of the
     * int8 MAC / fp32 FMA register probe of the instructions the kernels use,
     * int8_ops / fma_ops operations (2 per multiply-add) an iteration. */
    double (*read_stream)(const void *buf, size_t n_bytes, uint32_t *sink);
    double (*int8_peak)(long n_iter, uint32_t *sink);
    double (*fma_peak)(long n_iter, uint32_t *sink);
    double int8_ops, fma_ops;
    const char *int8_how, *fma_how; /* what the probes run, for the benchmark tables */
};

/* The table in use: MOE8_ISA (or MOE8_FORCE_REF=1) when set, else the first
 * supported table of the registry. A bad MOE8_ISA is reported by
 * moe8_kernels_check() (the library's entry points call it) and falls back
 * to the default here. */
const moe8_kernels *moe8_kernels_get(void);
/* MOE8_OK, or why MOE8_ISA cannot be honoured (unknown name, CPU lacks it). */
moe8_status moe8_kernels_check(moe8_error *err);
/* The registry: n_tables() tables, best first; by name (NULL when unknown). */
int moe8_kernels_n_tables(void);
const moe8_kernels *moe8_kernels_table(int i);
const moe8_kernels *moe8_kernels_find(const char *isa);
/* 1 when the machine can run table t. */
int moe8_kernels_supported(const moe8_kernels *t);
/* 1 when t's GEMMs read weights of layout L (its own int8 or int4 one; the reference reads any). */
int moe8_kernels_reads(const moe8_kernels *t, const moe8_qlayout *L);
/* The table whose layout is L (the one a packed matrix was made for). */
const moe8_kernels *moe8_kernels_for_layout(const moe8_qlayout *L);
/* Run t's per-thread setup on the calling thread, once per thread and table. */
void moe8_kernels_thread_init(const moe8_kernels *t);
/* The scalar references. */
const moe8_kernels *moe8_kernels_ref(void);
size_t moe8_attn_work_floats_ref(int D, int rows);

void moe8_quant_rows_ref(int8_t *xq, int ldq, float *sx, int32_t *xsum, const float *x, int ldx,
                         int m, int k);
void moe8_gemm_q8_i32_ref(int32_t *acc, int ldc, const int8_t *xq, int ldq, const moe8_qmat *w,
                          int m, int n0, int n1);
void moe8_gemm_q8_f32_ref(float *y, int ldy, const int8_t *xq, int ldq, const float *sx,
                          const int32_t *xsum, const moe8_qmat *w, int m, int n0, int n1);
void moe8_gemm_f32_wf_ref(float *y, int ldy, const float *x, int ldx, const void *w,
                          moe8_dtype wdt, int ldw, int m, int n0, int n1, int k);
void moe8_gemm_f32_nn_ref(float *c, int ldc, const float *a, int lda, const float *b, int ldb,
                          int m, int n, int k, int flags);
void moe8_gdn_step_ref(float *o, float *S, const float *q, const float *k, const float *v, float e,
                       float beta, int dk, int dv);
void moe8_flash_attn_ref(float *out, int ldo, const float *q, int ldq, int n_tok, int G, int D,
                         int32_t pos0, float scale, const moe8_kv_pages *kv, float *work);

/* Under ASan: an ASan report unless every byte a gemm_f32_wf call with these
 * arguments may read or write is addressable (entry_check.c); called first
 * by the float GEMMs that the sanitizer build leaves uninstrumented
 * (MOE8_KERNEL_ENTRY_CHECK). A no-op without ASan. */
void moe8_gemm_f32_wf_check(const float *y, int ldy, const float *x, int ldx, const void *w,
                            moe8_dtype wdt, int ldw, int m, int n0, int n1, int k);

#endif
