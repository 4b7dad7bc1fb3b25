/*
 * forward.h — internal: the forward pass of every family (SEMANTICS §5, §7)
 * over the prepared weights (load/weights.h), and the scratch it runs in.
 *
 *   linear.h     running FLOAT and W8A8 linear layers (moe8_proj; linear.c)
 *   attention.h  RMSNorm, KV writes, causal GQA flash attention (attention.c), RoPE (rotary.c)
 *   forward.c    the per-layer loop over the layers' kinds (forward_run.h: what the kinds'
 *                files share: attn_gqa.c, mla.c, ffn.c)
 *   mla.c        DeepSeek's multi-head latent attention block
 *   context.c    contexts (KV cache, scratch), batches
 *
 * Shapes are [rows][cols], outermost first; T is the number of tokens of one
 * forward call, H the hidden size, D the head dim.
 */
#ifndef MOE8_FORWARD_H
#define MOE8_FORWARD_H

#include <stdint.h>

#include "kernels/kernels.h"
#include "load/model.h"
#include "load/weights.h"
#include "model/attention.h"
#include "model/linear.h"
#include "core/public.h"

/* Calibration hook (convert/calib.c): sees the input x[n_rows][n_cols] of the
 * linears of layer `layer` at `site` (0 q/k/v or MLA's q_proj / q_a_proj /
 * kv_a_proj_with_mqa, 1 o_proj, 2 dense gate/up, 3 dense down, 4 MLA's
 * q_b_proj). Unset (NULL) in normal use: one test per call site. */
typedef void (*moe8_observe_fn)(void *user, int layer, int site, const float *x, int n_rows,
                                int n_cols);

/* Scratch of one context, for up to n_batch tokens and n_out logits rows. */
typedef struct {
    int n_batch, n_out, ldq;
    float *x, *h, *q, *k, *v, *att, *tmp;  /* [B][H], [B][H], [B][NH*D], [B][NKV*D] x2, [B][NH*D], [B][H] */
    float *mlp;                            /* [B][2F] (dense layers) */
    int8_t *xq;                            /* [B][ldq] W8A8 codes */
    float *ones;                           /* [B] */
    int32_t *ones_i;                       /* [B] */
    float *attn_work;                      /* [n_threads][attn_work_floats] */
    size_t attn_work_floats;               /* moe8_attention_work_floats */
    int32_t *attn_tiles;                   /* [2][B] query tiles */
    moe8_moe_workspace **moe_ws;           /* [n_layer]: set for layers with ws_layer == itself */
    float *logits;                         /* [n_out][V] */
    float *lm_part, *lm_all;               /* TP: [n_out][v_chunk], [ranks][n_out][v_chunk] */
    float *lm_sx;                          /* W8A8_DYNAMIC lm_head: [n_out] row scales */
    int32_t *lm_xsum;                      /*   and [n_out] code sums (codes in xq) */
    float *dyn_sx;                         /* W8A8_DYNAMIC linears (shared expert): [B] row */
    int32_t *dyn_xsum;                     /*   scales and [B] code sums (codes in xq) */
    float *sh_out, *sh_score;              /* shared expert: [B][H] output, [B] gate logit */
    float *qa, *kva, *qc, *attv;           /* MLA: [B][QL], [B][C], [B][NH*C], [B][NH*DV];
                                            * att is then [B][NH*C] */
    float *qg, *gate;                      /* output gate: q_proj's [B][NH*2D], the gates
                                            * [B][NH*D] */
    /* Gated DeltaNet layers (attn_gdn.c; C = 2NKdk + NVdv, Z = NVdv): */
    float *g_raw;                          /* [B][C+Z] in_proj_qkvz's rows (grouped) */
    float *g_mix, *g_conv, *g_z, *g_o;     /* [B][C], [B][C], [B][Z], [B][Z] */
    float *g_ba, *g_b, *g_a, *g_g, *g_beta;/* [B][2NV], [B][NV] x4 */
    float *g_work;                         /* moe8_gdn_chunk_work_floats */
    float **g_S;                           /* [B] recurrent states of a decode group */
    struct moe8_state_pool *state;         /* the context's per-sequence states */
    void *block;
    moe8_observe_fn observe;               /* NULL unless calibrating */
    void *observe_user;
    long majflt;                           /* the process's major faults at the last forward */
} moe8_fwd_scratch;

/* One forward over T tokens (already validated, their blocks reserved):
 * token[T], seq[T], pos[T]; K/V of every token are written into the cache at
 * (seq, pos) first. Logits of the rows out_idx[n_out] go to s->logits. Runs
 * with the weights' kernel table (w->kt). Never allocates. */
moe8_status moe8_forward(const moe8_weights *w, moe8_fwd_scratch *s, const moe8_kv_view *kv,
                         int64_t n_ctx, const float *rope, const int32_t *token,
                         const int32_t *seq, const int32_t *pos, int T, const int32_t *out_idx,
                         int n_out, int n_threads, moe8_error *err);

/* Set (or clear, fn NULL) the calibration hook of a context (context.c). */
void moe8_context_set_observer(moe8_context *ctx, moe8_observe_fn fn, void *user);

#endif
