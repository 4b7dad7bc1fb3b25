/*
 * kernels.h — moe8's compute kernels behind one dispatch table.
 *
 * Every kernel has an always-compiled scalar reference (*_ref, kernels_ref.c)
 * and may have an optimized twin of the same signature (x86/..._avx2.c).
 * moe8_kernels_get() picks AVX2 when the CPU has it and MOE8_FORCE_REF is not
 * set. Integer results of every variant equal the reference bit for bit;
 * float results stay within the bound stated beside each kernel.
 *
 * Packed int8 weights (moe8_qmat): W[n][k] int8 (checkpoint layout [out][in])
 * is stored in panels of MOE8_QK_NR output channels; inside a panel K is
 * walked in pairs, so one 32-byte chunk holds 16 channels x 2 inputs:
 *     data[p][kk][c][t] = W[NR*p + c][2*kk + t]      (zero outside n x k)
 * with p < n_pad/NR, kk < k_pad/2. That is the operand of vpmaddwd after
 * sign extension (int16 x int16 -> int32 pair sums: exact for all int8).
 */
#ifndef MOE8_KERNELS_H
#define MOE8_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "moe8.h"

#define MOE8_QK_NR 16     /* output channels per packed panel */
#define MOE8_QK_KALIGN 4  /* k_pad is a multiple of this; activation rows too */

static inline int moe8_round_up(int x, int m) { return (x + m - 1) / m * m; }

typedef struct {
    int32_t n, k;           /* logical shape of W[n][k] */
    int32_t n_pad, k_pad;   /* n_pad = round_up(n, NR), k_pad = round_up(k, KALIGN) */
    const int8_t *data;     /* [n_pad/NR][k_pad/2][NR][2], 64-byte aligned */
    const float *scale;     /* [n] per-output-channel weight scale */
    const int32_t *offset;  /* [n] weight offset, W ~ S*(Wq + O); NULL when all 0 */
} moe8_qmat;

/* Bytes of packed data for W[n][k]. */
size_t moe8_qmat_bytes(int n, int k);
/* Pack W (row stride ldw) into dst (moe8_qmat_bytes(n,k) bytes). */
void moe8_qmat_pack(int8_t *dst, const int8_t *w, int n, int k, int ldw);
/* Element W[i][j] of a packed matrix (for tests and slow paths). */
static inline int8_t moe8_qmat_at(const moe8_qmat *w, int i, int j) {
    size_t p = (size_t)(i / MOE8_QK_NR), c = (size_t)(i % MOE8_QK_NR);
    size_t kk = (size_t)(j / 2), t = (size_t)(j % 2);
    return w->data[((p * (size_t)(w->k_pad / 2) + kk) * MOE8_QK_NR + c) * 2 + t];
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

typedef struct {
    const char *isa;                 /* "ref", "avx2" */
    moe8_quant_rows_fn quant_rows;
    moe8_gemm_q8_i32_fn gemm_q8_i32;
    moe8_gemm_q8_f32_fn gemm_q8_f32;
    moe8_gemm_f32_wf_fn gemm_f32_wf;
    moe8_flash_attn_fn flash_attn;
} moe8_kernels;

/* The table in use: AVX2 when available unless MOE8_FORCE_REF=1. */
const moe8_kernels *moe8_kernels_get(void);
/* The scalar references. */
const moe8_kernels *moe8_kernels_ref(void);

void moe8_quant_rows_ref(int8_t *xq, int ldq, float *sx, int32_t *xsum, const float *x, int ldx,
                         int m, int k);
void moe8_gemm_q8_i32_ref(int32_t *acc, int ldc, const int8_t *xq, int ldq, const moe8_qmat *w,
                          int m, int n0, int n1);
void moe8_gemm_q8_f32_ref(float *y, int ldy, const int8_t *xq, int ldq, const float *sx,
                          const int32_t *xsum, const moe8_qmat *w, int m, int n0, int n1);
void moe8_gemm_f32_wf_ref(float *y, int ldy, const float *x, int ldx, const void *w,
                          moe8_dtype wdt, int ldw, int m, int n0, int n1, int k);
void moe8_flash_attn_ref(float *out, int ldo, const float *q, int ldq, int n_tok, int G, int D,
                         int32_t pos0, float scale, const moe8_kv_pages *kv, float *work);

#endif
