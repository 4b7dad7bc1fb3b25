/*
 * gdn.h — the compute core of the Gated DeltaNet layer kind (Qwen3-Next,
 * Qwen3.5-MoE; SEMANTICS "Gated DeltaNet"), fp32, one sequence's or a batch
 * of sequences' rows, independent of how a family names or lays out its
 * tensors. A layer's forward calls, after its projections:
 *
 *   moe8_gdn_conv        mixed [T][C] -> q,k,v [T][C] (causal conv + SiLU, conv state)
 *   moe8_gdn_qk_norm     q, k in place: L2 per key head, q times dk^-1/2
 *   moe8_gdn_gates       a, b [T][NV] -> g, beta [T][NV]
 *   moe8_gdn_chunked     prefill: o [T][NV][dv], state S [NV][dk][dv] in/out
 *   moe8_gdn_recurrent   the same token by token (decode, short runs)
 *   moe8_gdn_decode      one token of each of n sequences (each its own S)
 *   moe8_gdn_gated_norm  o / rms(o) * w * silu(z) per value head
 * then its out_proj. Channel order of C (= 2 NK dk + NV dv): q of key heads
 * 0..NK-1, k of key heads, v of value heads (transformers' mixed_qkv after
 * fix_query_key_value_ordering). Value head h reads key head h / (NV / NK).
 * The vector work goes through the kernel table (kernels.h gemm_f32_nn,
 * gdn_step, exp_f32); nothing here allocates; work is split by value head
 * (or sequence and value head), so results do not depend on n_threads.
 */
#ifndef MOE8_GDN_H
#define MOE8_GDN_H

#include <stddef.h>

#define MOE8_GDN_CHUNK 64     /* tokens per chunk of the chunked form */
#define MOE8_GDN_MAX_DIM 256  /* the largest dk, dv (and K) accepted */

typedef struct {
    int n_k_heads, n_v_heads;  /* NK, NV (a multiple of NK) */
    int dk, dv;                /* key and value head dims */
    int conv_k;                /* the depthwise conv's kernel K (>= 1) */
} moe8_gdn_dims;

/* 0 when the dims are usable (positive, NV a multiple of NK, dk, dv and K
 * at most MOE8_GDN_MAX_DIM), else -1. */
int moe8_gdn_dims_check(const moe8_gdn_dims *d);
/* C = 2 NK dk + NV dv, the conv's channels. */
int moe8_gdn_conv_channels(const moe8_gdn_dims *d);
/* Floats of a sequence's conv state [K-1][C] and recurrent state [NV][dk][dv]. */
size_t moe8_gdn_conv_state_floats(const moe8_gdn_dims *d);
size_t moe8_gdn_state_floats(const moe8_gdn_dims *d);

/* The conv weight as stored, w [C][1][K] (fp32), into wt [K][C]. */
void moe8_gdn_conv_weight(float *wt, const float *w, const moe8_gdn_dims *d);
/* y[t][c] = silu(sum_j wt[j][c] x_{t-K+1+j}[c]) for t < T, c < C, where the
 * K-1 inputs before x[0] come from state [K-1][C] (oldest first); state then
 * holds the last K-1 inputs. Prefill (any T) and decode (T = 1) alike. x
 * rows of stride ldx, y of ldy; y must not overlap x or state. */
void moe8_gdn_conv(float *y, int ldy, const float *x, int ldx, int T, const moe8_gdn_dims *d,
                   const float *wt, float *state);
/* q [T][NK dk] (stride ldq) and k (ldk) in place: x / sqrt(sum x^2 + 1e-6)
 * per key head, q then times dk^-1/2 (may be the conv's output rows). */
void moe8_gdn_qk_norm(float *q, int ldq, float *k, int ldk, int T, const moe8_gdn_dims *d);
/* g[t][h] = -exp(A_log[h]) * softplus(a[t][h] + dt_bias[h]) (softplus(x) =
 * x above 20), beta[t][h] = sigmoid(b[t][h]); a, b rows of stride lda, ldb;
 * g, beta [T][NV]. In double, rounded once. */
void moe8_gdn_gates(float *g, float *beta, const float *a, int lda, const float *b, int ldb,
                    const float *A_log, const float *dt_bias, int T, int NV);

/* The gated delta rule over T tokens of one sequence, recurrent: q, k
 * normalised (rows of NK dk, strides ldq, ldk), v (ldv), g, beta [T][NV];
 * o [T][NV dv] (stride ldo); S [NV][dk][dv] in/out. Per token and head:
 * S = e^g S; S += k (beta (v - Sᵀk))ᵀ; o = Sᵀq. */
void moe8_gdn_recurrent(float *o, int ldo, const float *q, int ldq, const float *k, int ldk,
                        const float *v, int ldv, const float *g, const float *beta, int T,
                        const moe8_gdn_dims *d, float *S, int n_threads);
/* One token of each of n_seq sequences: row r of q, k, v, g, beta, o is
 * sequence r, whose state is S[r]. */
void moe8_gdn_decode(float *o, int ldo, const float *q, int ldq, const float *k, int ldk,
                     const float *v, int ldv, const float *g, const float *beta, int n_seq,
                     const moe8_gdn_dims *d, float *const *S, int n_threads);
/* Scratch of moe8_gdn_chunked on n_threads threads (floats, 64-byte multiples per thread). */
size_t moe8_gdn_chunk_work_floats(const moe8_gdn_dims *d, int n_threads);
/* The same result as moe8_gdn_recurrent (within fp32 rounding) in chunks of
 * MOE8_GDN_CHUNK tokens: transformers' torch_chunk_gated_delta_rule, the WY
 * representation in matrix form (UT transform by forward substitution) on
 * the kernel table's matrix product. work: moe8_gdn_chunk_work_floats. */
void moe8_gdn_chunked(float *o, int ldo, const float *q, int ldq, const float *k, int ldk,
                      const float *v, int ldv, const float *g, const float *beta, int T,
                      const moe8_gdn_dims *d, float *S, float *work, int n_threads);
/* y = o / sqrt(mean(o^2) + eps) * w * silu(z) per value head (dv values,
 * w [dv] shared by the heads); rows of NV dv, strides ldy, ldo, ldz; y may be o. */
void moe8_gdn_gated_norm(float *y, int ldy, const float *o, int ldo, const float *z, int ldz,
                         const float *w, int T, int NV, int dv, float eps);

#endif
