/*
 * moe.h — internal interface of the MoE layer (src/moe): routing, dispatch
 * and combine, the expert MLP and the layer/workspace structs. Tests include
 * it to check intermediate results; nothing here is public API.
 *
 * Flow of one forward (SEMANTICS §1): router logits -> route.c (ids, weights per
 * token) -> quantize each token once -> dispatch.c (counting sort of the local
 * slots by expert, row_of) -> gather rows -> expert_mlp.c (gate/up GEMM,
 * silu*up, requantize, down GEMM) -> dispatch.c combine (slot order).
 */
#ifndef MOE8_MOE_H
#define MOE8_MOE_H

#include "core/core.h"
#include "kernels/kernels.h"

/* Largest H or I accepted: keeps acc + O*xsum exact in int32 (SEMANTICS §4). */
#define MOE8_MOE_MAX_DIM 65536

/* ======================================================================== */
/* route.c                                                                   */
/* ======================================================================== */

/* Validate router params for n_expert experts. */
moe8_status moe8_router_params_check(const moe8_router_params *p, int n_expert, moe8_error *err);
/* Floats of scratch one moe8_route_token call needs. */
size_t moe8_route_scratch_floats(int n_expert);
/* Route one token (built-in paths only; params already checked):
 * logits [E] -> ids [K], weights [K]; scratch [moe8_route_scratch_floats(E)]. */
void moe8_route_token(const float *logits, int n_expert, const moe8_router_params *p,
                      int32_t *ids, float *weights, float *scratch);
/* Check a custom callback's result: ids in [0,E), distinct per token, weights finite. */
moe8_status moe8_route_check(const int32_t *ids, const float *weights, int n_tokens,
                             int n_expert, int top_k, moe8_error *err);

/* ======================================================================== */
/* dispatch.c                                                                */
/* ======================================================================== */

/* Stable counting sort of the local slots (SEMANTICS §3). Experts [first, last):
 *   count[e-first] slots per expert, offs[e-first] first row of expert e
 *   (offs has last-first+1 entries), order[r] = flat slot of row r,
 *   row_of[i] = row of slot i or -1. Returns M, the number of local slots. */
int moe8_moe_dispatch(const int32_t *ids, int n_tokens, int top_k, int first, int last,
                      int32_t *count, int32_t *offs, int32_t *order, int32_t *row_of);
/* out[t][c] = sum over local slots j (in order) of w[t][j] * y2[row_of[t*K+j]][c],
 * for c in [c0, c1) and every token; 0 for a token with no local slot. */
void moe8_moe_combine(float *out, int ldo, const float *y2, int ldy, const float *w,
                      const int32_t *row_of, int n_tokens, int top_k, int c0, int c1);

/* ======================================================================== */
/* expert_mlp.c                                                              */
/* ======================================================================== */

/* What an expert adds to its products (gpt_oss): biases of gate and up (this
 * slice: b_gu[0..I) gate, b_gu[I..2I) up) and of down [H] (NULL on a TP slice
 * other than the first: the parts' sum adds it once), and the clamped
 * SwiGLU when limit > 0. All zero: plain silu(gate) * up. */
typedef struct {
    const float *b_gu, *b_down;
    float limit, alpha;
} moe8_expert_act;

/* One quantized expert (TP slice already applied): gate/up [I][H], down [H][I]. */
typedef struct {
    moe8_qmat gate, up, down;
    moe8_expert_act act;
} moe8_qexpert;

/* One float expert, weights in place: gate/up rows of stride ld_gu, down rows
 * of stride ld_down, all already offset to the TP slice. */
typedef struct {
    const void *gate, *up, *down;
    moe8_dtype gate_dt, up_dt, down_dt;
    int ld_gu, ld_down;
    moe8_expert_act act;
} moe8_fexpert;

/* Rows of one expert's input, quantized or float. */
typedef struct {
    int m;                /* rows */
    const int8_t *xq;     /* [m][ldq] codes (quantized experts) */
    int ldq;
    const float *sx;      /* [m] */
    const int32_t *xsum;  /* [m] */
    const float *xf;      /* [m][ldf] (float experts) */
    int ldf;
} moe8_mlp_rows;

/* Phase 1, output columns [c0, c1) of I (c0 a multiple of the layout's panel width):
 * gate and up GEMMs into y1 [m][ldy1] (gate at column 0, up at column I),
 * then A = silu(gate) * up written over the gate columns (with the expert's
 * act: biases first, then the clamped SwiGLU). */
void moe8_mlp_up(const moe8_kernels *k, const moe8_qexpert *qe, const moe8_fexpert *fe,
                 int hidden, int inter, const moe8_mlp_rows *x, float *y1, int ldy1, int c0,
                 int c1);
/* Phase 2, columns [c0, c1) of H: y2 = A @ down^T. A is aq/sa/asum
 * (quantized) or y1's gate columns (float). */
void moe8_mlp_down(const moe8_kernels *k, const moe8_qexpert *qe, const moe8_fexpert *fe,
                   int inter, const moe8_mlp_rows *a, float *y2, int ldy2, int c0, int c1);
/* Whole expert, one thread (unified_apply_mlp): y2 [m][ldy2] from x. For a
 * quantized expert aq [m][lda], sa [m], asum [m] receive A's codes. */
void moe8_unified_apply_mlp(const moe8_kernels *k, const moe8_qexpert *qe,
                            const moe8_fexpert *fe, int hidden, int inter,
                            const moe8_mlp_rows *x, float *y1, int ldy1, int8_t *aq, int lda,
                            float *sa, int32_t *asum, float *y2, int ldy2);

/* ======================================================================== */
/* moe_layer.c                                                               */
/* ======================================================================== */

struct moe8_moe_layer {
    char name[128];                /* for error messages */
    int n_expert;                  /* E (global) */
    int hidden;                    /* H */
    int inter_full;                /* I of the checkpoint */
    int i_begin, inter;            /* TP slice: [i_begin, i_begin + inter) */
    int first, last;               /* local experts [first, last) */
    moe8_quant_type quant;         /* FLOAT or W8A8_DYNAMIC (of gate/up) */
    int down_float;                /* W8A8_DYNAMIC gate/up with FLOAT down: qe holds gate/up,
                                    * fe the down weights, A is not re-quantized */
    moe8_router_params rp;         /* bias points at `bias` below */
    float *bias;                   /* [E] copy, or NULL */
    float *router_bias;            /* [E] added to the computed router logits (gpt_oss), or NULL */
    float *ebias;                  /* [last-first][2 inter + H] expert biases (gpt_oss), or NULL */
    const void *router;            /* [E][H] in router_dt, caller-owned, or NULL */
    moe8_dtype router_dt;
    int n_threads;                 /* 0 = omp_get_max_threads() */
    moe8_qexpert *qe;              /* [last-first] (quantized; down unused with down_float) */
    moe8_fexpert *fe;              /* [last-first] (float; only down with down_float) */
    const moe8_qlayout *qlayout;   /* the layout qdata is packed in (NULL: float experts) */
    int8_t *qdata;                 /* packed int8 of every local expert */
    const int8_t *qmapped;         /* the same, read in place from a packed cache, or NULL */
    size_t qstride;                /* bytes of one expert's gate, up and down there */
    float *scales;                 /* gate, up, down scales of every local expert */
    int32_t *offsets;              /* same layout as scales, NULL when all 0 */
    size_t packed_bytes;           /* qdata + scales + offsets (+ owned_f32) */
    float *owned_f32;              /* dequantized float experts (load/moe_build.c), or NULL */
};

/* moe8_moe_layer_forward with an explicit kernel table (tests, benchmarks). */
moe8_status moe8_moe_layer_forward_k(const moe8_moe_layer *L, moe8_moe_workspace *w,
                                     const moe8_kernels *k, const float *h, int n_tokens,
                                     const float *router_logits, float *out, moe8_error *err);

struct moe8_moe_workspace {
    const moe8_moe_layer *layer;
    int max_tokens, max_threads;
    int n_tokens;                  /* of the last forward */
    int n_rows;                    /* M of the last forward */
    int ldq, lda, ldy1;            /* H_pad, I_pad, 2I */
    int8_t *xq_tok;                /* [T][ldq] codes of each token */
    float *sx_tok;                 /* [T] */
    int32_t *xsum_tok;             /* [T] */
    float *logits;                 /* [T][E] when computed from the router weight */
    int32_t *ids;                  /* [T][K] */
    float *weights;                /* [T][K] */
    int32_t *row_of, *order;       /* [T*K] */
    int32_t *count, *offs;         /* [E_loc], [E_loc+1] */
    int8_t *xq_g;                  /* [M][ldq] gathered codes */
    float *sx_g;                   /* [M] */
    int32_t *xsum_g;               /* [M] */
    float *xf_g;                   /* [M][H] gathered float rows (float experts) */
    float *y1;                     /* [M][2I] */
    int8_t *aq;                    /* [M][lda] codes of A */
    float *sa;                     /* [M] */
    int32_t *asum;                 /* [M] */
    float *y2;                     /* [M][H] */
    float *scratch;                /* [max_threads][scratch_stride] routing scratch */
    size_t scratch_stride;
    void *block;                   /* the one allocation behind every array */
    int prefetch;                  /* set by the caller: tell the kernel which mapped
                                    * experts the forward is about to read (it is paging) */
};

#endif
