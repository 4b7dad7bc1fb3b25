/*
 * hybrid_ref.h — the double-precision reference of the hybrid
 * linear-attention families (fixture_model.h FX_QWEN3_NEXT, FX_QWEN3_5_MOE;
 * tensors as fixture_hybrid.h writes them), written from transformers'
 * modeling_qwen3_next.py / modeling_qwen3_5_moe.py (torch_recurrent_ and
 * torch_chunk_gated_delta_rule, torch_causal_conv1d_update, the RMSNorms)
 * and vLLM's qwen3_next.py where transformers is implicit; it shares no code
 * with src/. Included by forward_ref.h (ref_forward dispatches here); every
 * function is static inline so a test that uses none pays nothing.
 *
 * Kinds, each usable alone:
 *   hy_conv           causal depthwise conv1d (kernel K, no bias) + SiLU over
 *                     x [n][C] with a per-sequence state [K-1][C] (the last
 *                     K-1 inputs, oldest first): y_t[c] = silu(sum_j
 *                     w[c][j] x_{t-K+1+j}[c]), x before the sequence = state
 *   hy_gdn_recurrent  the gated delta rule token by token (the reference):
 *                     q, k [n][NK][dk], v [n][NV][dv], g, beta [n][NV],
 *                     state S [NV][dk][dv]; value head h reads key head
 *                     h / (NV / NK) (repeat_interleave); q, k L2-normalised
 *                     (x / sqrt(sum x² + 1e-6)), q scaled by dk^-1/2;
 *                     S = e^g S; S += k (beta (v - Sᵀk))ᵀ; o = Sᵀq
 *   hy_gdn_chunked    the same in chunks of 64, transformers'
 *                     torch_chunk_gated_delta_rule (WY / UT transform by
 *                     forward substitution), only to check the recurrent one
 *   hy_rmsnorm_zc     zero-centred RMSNorm: x / rms(x) * (1 + w)
 *   the gated RMSNorm of the DeltaNet output (per value head of dv):
 *                     o / rms(o) * w * silu(z), w plain (initialised to 1)
 * Layers: hy_gdn_layer (projections: Qwen3-Next's in_proj_qkvz / in_proj_ba
 * grouped by key head as fix_query_key_value_ordering splits them, Qwen3.5's
 * flat in_proj_qkv / z / b / a; beta = sigmoid(b), g = -exp(A_log) *
 * softplus(a + dt_bias), softplus as torch's (x > 20: x); out_proj),
 * hy_attn_layer (q_proj per head [query D, gate D]; zero-centred q/k norms
 * per head; partial rotary of int(D * partial_rotary_factor) dims, rotate_half
 * within them (Qwen3.5's interleaved M-RoPE is this rotary for text, all three
 * position ids equal); causal GQA softmax at D^-1/2; times sigmoid(gate);
 * o_proj), hy_moe (softmax router, top-k with ties to the lower id,
 * renormalised (Qwen3.5 always, Qwen3-Next norm_topk_prob), plus
 * sigmoid(h . shared_expert_gate) * shared_expert(h)), the decoder layer
 * x += mixer(norm(x)); x += mlp(norm(x)) with zero-centred norms.
 * Linears: FLOAT in double, or W8A8_DYNAMIC (their weight is I8) as
 * forward_ref.h's ref_dynamic computes them (fp32 activation codes, exact
 * integer sums, then double); rm->float_experts dequantizes the experts.
 *
 *   hy_state st; hy_state_init(&st, &rm.o, cap);   // per-sequence state
 *   hy_forward(&rm, &st, ids, n, logits);          // n tokens after st.n_past
 *   hy_state_free(&st, &rm.o);
 * rm->hy_chunked runs a multi-token call's DeltaNet with hy_gdn_chunked.
 * MTP and vision tensors are never read.
 */
#ifndef MOE8_HYBRID_REF_H
#define MOE8_HYBRID_REF_H

#include <stdarg.h>

/* ---- tensors and linears ----------------------------------------------------- */

static inline const fx_tensor *hy_find(const ref_model *rm, const char *name) {
    for (int i = 0; i < rm->L.n; i++)
        if (!strcmp(rm->L.t[i].name, name)) return &rm->L.t[i];
    return NULL;
}

/* The tensor named by the format (the family's prefix not included). */
static inline const fx_tensor *hy_t(const ref_model *rm, const char *fmt, ...) {
    char name[256];
    const fx_tensor *t;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    t = hy_find(rm, name);
    if (!t) {
        fprintf(stderr, "hybrid_ref: no tensor %s\n", name);
        exit(2);
    }
    return t;
}

/* y = W x for the linear `name` (without ".weight"): FLOAT in double, or
 * W8A8_DYNAMIC when its weight is I8 (experts dequantized with float_experts). */
static inline void hy_lin(double *y, const double *x, const ref_model *rm, const char *name) {
    const fx_tensor *w = hy_t(rm, "%s.weight", name);
    if (w->dtype == MOE8_DT_I8) {
        ref_dynamic(y, x, w, hy_t(rm, "%s.weight_scale", name), hy_t(rm, "%s.weight_offset", name),
                    rm->float_experts && strstr(name, ".experts.") != NULL);
        return;
    }
    ref_lin_float(y, x, w);
}

static inline double hy_sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

/* torch.nn.functional.softplus (beta 1, threshold 20). */
static inline double hy_softplus(double v) { return v > 20.0 ? v : log1p(exp(v)); }

/* Zero-centred RMSNorm (Qwen3NextRMSNorm / Qwen3_5MoeRMSNorm): x / rms * (1 + w). */
static inline void hy_rmsnorm_zc(double *y, const double *x, int64_t n, const fx_tensor *w, double eps) {
    double ss = 0, r;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    r = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * r * (1.0 + fx_get(w, i));
}

/* FLA's l2norm: x / sqrt(sum x² + 1e-6). */
static inline void hy_l2norm(double *y, const double *x, int64_t n) {
    double ss = 0, r;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    r = 1.0 / sqrt(ss + 1e-6);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * r;
}

/* ---- kinds ---------------------------------------------------------------------- */

/* Causal depthwise conv1d + SiLU over x [n][C]; w [C][1][K] as stored;
 * state [K-1][C] in/out. */
static inline void hy_conv(double *y, const double *x, int n, int64_t C, int64_t K, const fx_tensor *w,
                           double *state) {
    double *ns = malloc(sizeof(double) * (size_t)((K > 1 ? K - 1 : 1) * C));
    for (int t = 0; t < n; t++)
        for (int64_t c = 0; c < C; c++) {
            double a = 0;
            for (int64_t j = 0; j < K; j++) {
                int64_t p = t - (K - 1) + j;
                a += fx_get(w, c * K + j) * (p >= 0 ? x[p * C + c] : state[(p + K - 1) * C + c]);
            }
            y[t * C + c] = a / (1.0 + exp(-a));
        }
    for (int64_t s = 0; s < K - 1; s++) {
        int64_t p = n - (K - 1) + s;
        for (int64_t c = 0; c < C; c++) ns[s * C + c] = p >= 0 ? x[p * C + c] : state[(p + K - 1) * C + c];
    }
    memcpy(state, ns, sizeof(double) * (size_t)((K - 1) * C));
    free(ns);
}

typedef struct {
    int64_t NK, NV, dk, dv;   /* key heads, value heads (a multiple), their dims */
} hy_dims;

/* q, k of key head kh at token t: L2-normalised, q times dk^-1/2. */
static inline void hy_qk(double *qn, double *kn, const double *q, const double *k, int t, int64_t kh,
                         hy_dims d) {
    hy_l2norm(qn, q + (t * d.NK + kh) * d.dk, d.dk);
    hy_l2norm(kn, k + (t * d.NK + kh) * d.dk, d.dk);
    for (int64_t i = 0; i < d.dk; i++) qn[i] /= sqrt((double)d.dk);
}

/* The gated delta rule, recurrent (torch_recurrent_gated_delta_rule with
 * use_qk_l2norm_in_kernel): out [n][NV][dv]; S [NV][dk][dv] in/out. */
static inline void hy_gdn_recurrent(double *out, const double *q, const double *k, const double *v,
                                    const double *g, const double *beta, int n, hy_dims d, double *S) {
    double qn[256], kn[256], mem[256];
    for (int t = 0; t < n; t++)
        for (int64_t h = 0; h < d.NV; h++) {
            double *s = S + h * d.dk * d.dv;
            const double *vt = v + (t * d.NV + h) * d.dv, e = exp(g[t * d.NV + h]), b = beta[t * d.NV + h];
            hy_qk(qn, kn, q, k, t, h / (d.NV / d.NK), d);
            for (int64_t i = 0; i < d.dk * d.dv; i++) s[i] *= e;
            for (int64_t j = 0; j < d.dv; j++) {
                mem[j] = 0;
                for (int64_t i = 0; i < d.dk; i++) mem[j] += s[i * d.dv + j] * kn[i];
            }
            for (int64_t i = 0; i < d.dk; i++)
                for (int64_t j = 0; j < d.dv; j++) s[i * d.dv + j] += kn[i] * (vt[j] - mem[j]) * b;
            for (int64_t j = 0; j < d.dv; j++) {
                double a = 0;
                for (int64_t i = 0; i < d.dk; i++) a += s[i * d.dv + j] * qn[i];
                out[(t * d.NV + h) * d.dv + j] = a;
            }
        }
}

#define HY_CHUNK 64

/* One chunk of value head h, m of its HY_CHUNK rows real: Q, K [C][dk]
 * normalised (Q scaled), VB [C][dv] = beta v, KB [C][dk] = beta k, G [C] the
 * cumulative log decay; S [dk][dv] in/out; o [m][dv]. The padding rows
 * m..C-1 (k = v = beta = 0, G constant) add exactly nothing to any sum, so
 * the loops stop at m. */
static inline void hy_chunk_step(double *o, int m, const double *Q, const double *K, const double *KB,
                                 const double *VB, const double *G, int64_t dk, int64_t dv, double *S) {
    enum { C = HY_CHUNK };
    double A[C][C], Dm[C][C], row[C], eG[C], eE[C];
    double *U = malloc(sizeof(double) * C * (size_t)dv), *W = malloc(sizeof(double) * C * (size_t)dk);
    double *VN = malloc(sizeof(double) * C * (size_t)dv), *S2 = malloc(sizeof(double) * (size_t)(dk * dv));
    const double eL = exp(G[C - 1]);
    for (int i = 0; i < m; i++) {
        eG[i] = exp(G[i]);
        eE[i] = exp(G[C - 1] - G[i]); /* the decay from i to the chunk's end */
        for (int j = 0; j <= i; j++) Dm[i][j] = exp(G[i] - G[j]); /* the decay from j to i */
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
            double a = 0;
            for (int64_t x = 0; x < dk && j < i; x++) a += KB[i * dk + x] * K[j * dk + x];
            A[i][j] = j < i ? -a * Dm[i][j] : 0.0;
        }
    for (int i = 1; i < m; i++) { /* the UT transform: forward substitution, row by row */
        for (int j = 0; j < i; j++) row[j] = A[i][j];
        for (int j = 0; j < i; j++) {
            double a = row[j];
            for (int x = 0; x < i; x++) a += row[x] * A[x][j];
            A[i][j] = a;
        }
    }
    for (int i = 0; i < m; i++) { /* (A + I) times beta v and times beta k e^G */
        for (int64_t x = 0; x < dv; x++) {
            double a = VB[i * dv + x];
            for (int j = 0; j < i; j++) a += A[i][j] * VB[j * dv + x];
            U[i * dv + x] = a;
        }
        for (int64_t x = 0; x < dk; x++) {
            double a = KB[i * dk + x] * eG[i];
            for (int j = 0; j < i; j++) a += A[i][j] * KB[j * dk + x] * eG[j];
            W[i * dk + x] = a;
        }
    }
    for (int i = 0; i < m; i++) /* the new values: what the old state does not predict */
        for (int64_t x = 0; x < dv; x++) {
            double a = U[i * dv + x];
            for (int64_t y = 0; y < dk; y++) a -= W[i * dk + y] * S[y * dv + x];
            VN[i * dv + x] = a;
        }
    for (int i = 0; i < m; i++) {
        for (int j = 0; j <= i; j++) { /* the intra-chunk attention, decayed */
            double qk = 0;
            for (int64_t y = 0; y < dk; y++) qk += Q[i * dk + y] * K[j * dk + y];
            row[j] = qk * Dm[i][j];
        }
        for (int64_t x = 0; x < dv; x++) {
            double a = 0;
            for (int64_t y = 0; y < dk; y++) a += Q[i * dk + y] * eG[i] * S[y * dv + x];
            for (int j = 0; j <= i; j++) a += row[j] * VN[j * dv + x];
            o[i * dv + x] = a;
        }
    }
    for (int64_t y = 0; y < dk; y++)
        for (int64_t x = 0; x < dv; x++) {
            double a = S[y * dv + x] * eL;
            for (int i = 0; i < m; i++) a += K[i * dk + y] * eE[i] * VN[i * dv + x];
            S2[y * dv + x] = a;
        }
    memcpy(S, S2, sizeof(double) * (size_t)(dk * dv));
    free(U); free(W); free(VN); free(S2);
}

/* The gated delta rule in chunks of 64 (torch_chunk_gated_delta_rule with
 * use_qk_l2norm_in_kernel and an initial state): same arguments as
 * hy_gdn_recurrent. */
static inline void hy_gdn_chunked(double *out, const double *q, const double *k, const double *v,
                                  const double *g, const double *beta, int n, hy_dims d, double *S) {
    enum { C = HY_CHUNK };
    const int64_t dk = d.dk, dv = d.dv;
    double *Q = malloc(sizeof(double) * C * (size_t)dk), *K = malloc(sizeof(double) * C * (size_t)dk);
    double *KB = malloc(sizeof(double) * C * (size_t)dk), *VB = malloc(sizeof(double) * C * (size_t)dv);
    double *o = malloc(sizeof(double) * C * (size_t)dv), G[C];
    for (int64_t h = 0; h < d.NV; h++)
        for (int c0 = 0; c0 < n; c0 += C) {
            const int m = n - c0 < C ? n - c0 : C;
            memset(Q, 0, sizeof(double) * C * (size_t)dk), memset(K, 0, sizeof(double) * C * (size_t)dk);
            memset(KB, 0, sizeof(double) * C * (size_t)dk), memset(VB, 0, sizeof(double) * C * (size_t)dv);
            for (int i = 0; i < C; i++) {
                const int t = c0 + i;
                double b;
                G[i] = (i ? G[i - 1] : 0.0) + (i < m ? g[t * d.NV + h] : 0.0);
                if (i >= m) continue;
                b = beta[t * d.NV + h];
                hy_qk(Q + i * dk, K + i * dk, q, k, t, h / (d.NV / d.NK), d);
                for (int64_t x = 0; x < dk; x++) KB[i * dk + x] = K[i * dk + x] * b;
                for (int64_t x = 0; x < dv; x++) VB[i * dv + x] = v[(t * d.NV + h) * dv + x] * b;
            }
            hy_chunk_step(o, m, Q, K, KB, VB, G, dk, dv, S + h * dk * dv);
            for (int i = 0; i < m; i++) memcpy(out + ((c0 + i) * d.NV + h) * dv, o + i * dv, sizeof(double) * (size_t)dv);
        }
    free(Q); free(K); free(KB); free(VB); free(o);
}

/* ---- per-sequence state ------------------------------------------------------------ */

typedef struct {
    int64_t n_past, cap;      /* tokens seen; KV capacity */
    double **conv;            /* [n_layers]: linear layers' [K-1][C] */
    double **ssm;             /* [n_layers]: linear layers' [NV][dk][dv] */
    double **kc, **vc;        /* [n_layers]: full layers' [cap][NKV*D] */
} hy_state;

static inline void hy_state_init(hy_state *st, const fx_opts *o, int64_t cap) {
    const int64_t L = o->n_layers, C = fx_lin_conv_dim(o), kv = o->n_kv_heads * o->head_dim;
    st->n_past = 0;
    st->cap = cap;
    st->conv = calloc((size_t)L, sizeof(double *));
    st->ssm = calloc((size_t)L, sizeof(double *));
    st->kc = calloc((size_t)L, sizeof(double *));
    st->vc = calloc((size_t)L, sizeof(double *));
    for (int64_t l = 0; l < L; l++) {
        if (fx_full_attn(o, l)) {
            st->kc[l] = calloc((size_t)(cap * kv), sizeof(double));
            st->vc[l] = calloc((size_t)(cap * kv), sizeof(double));
        } else {
            st->conv[l] = calloc((size_t)((o->conv_kernel - 1) * C + 1), sizeof(double));
            st->ssm[l] = calloc((size_t)(o->lin_v_heads * o->lin_k_dim * o->lin_v_dim), sizeof(double));
        }
    }
}

static inline void hy_state_free(hy_state *st, const fx_opts *o) {
    for (int64_t l = 0; l < o->n_layers; l++) free(st->conv[l]), free(st->ssm[l]), free(st->kc[l]), free(st->vc[l]);
    free(st->conv); free(st->ssm); free(st->kc); free(st->vc);
}

/* ---- layers --------------------------------------------------------------------------- */

/* The projections of a Gated DeltaNet layer for one token h[H] into the
 * conv input mixed [C] (q, k, v flat), z [NV dv], b, a [NV]. */
static inline void hy_gdn_project(double *mixed, double *z, double *b, double *a, const double *h,
                                  const ref_model *rm, const char *p) {
    const fx_opts *o = &rm->o;
    const int64_t NK = o->lin_k_heads, NV = o->lin_v_heads, dk = o->lin_k_dim, dv = o->lin_v_dim;
    const int64_t r = NV / NK, gs = 2 * dk + 2 * r * dv;
    char n[256];
    if (o->arch == FX_QWEN3_5_MOE) {
        snprintf(n, sizeof n, "%s.linear_attn.in_proj_qkv", p), hy_lin(mixed, h, rm, n);
        snprintf(n, sizeof n, "%s.linear_attn.in_proj_z", p), hy_lin(z, h, rm, n);
        snprintf(n, sizeof n, "%s.linear_attn.in_proj_b", p), hy_lin(b, h, rm, n);
        snprintf(n, sizeof n, "%s.linear_attn.in_proj_a", p), hy_lin(a, h, rm, n);
        return;
    }
    double *qkvz = malloc(sizeof(double) * (size_t)(NK * gs)), *ba = malloc(sizeof(double) * (size_t)(2 * NV));
    snprintf(n, sizeof n, "%s.linear_attn.in_proj_qkvz", p), hy_lin(qkvz, h, rm, n);
    snprintf(n, sizeof n, "%s.linear_attn.in_proj_ba", p), hy_lin(ba, h, rm, n);
    for (int64_t g = 0; g < NK; g++) { /* fix_query_key_value_ordering */
        const double *grp = qkvz + g * gs;
        memcpy(mixed + g * dk, grp, sizeof(double) * (size_t)dk);
        memcpy(mixed + NK * dk + g * dk, grp + dk, sizeof(double) * (size_t)dk);
        for (int64_t m = 0; m < r; m++) {
            const int64_t vh = g * r + m;
            memcpy(mixed + 2 * NK * dk + vh * dv, grp + 2 * dk + m * dv, sizeof(double) * (size_t)dv);
            memcpy(z + vh * dv, grp + 2 * dk + r * dv + m * dv, sizeof(double) * (size_t)dv);
            b[vh] = ba[g * 2 * r + m];
            a[vh] = ba[g * 2 * r + r + m];
        }
    }
    free(qkvz);
    free(ba);
}

/* A Gated DeltaNet layer (prefix p, state slot l) over h[n][H] into out[n][H]. */
static inline void hy_gdn_layer(double *out, const double *h, int n, const ref_model *rm, const char *p,
                                hy_state *st, long long l) {
    const fx_opts *o = &rm->o;
    const int64_t H = o->hidden, NK = o->lin_k_heads, NV = o->lin_v_heads, dk = o->lin_k_dim;
    const int64_t dv = o->lin_v_dim, C = fx_lin_conv_dim(o);
    const hy_dims d = {NK, NV, dk, dv};
    const double eps = fx_eps(o);
    double *mixed = malloc(sizeof(double) * (size_t)(n * C)), *cv = malloc(sizeof(double) * (size_t)(n * C));
    double *z = malloc(sizeof(double) * (size_t)(n * NV * dv)), *b = malloc(sizeof(double) * (size_t)(n * NV));
    double *a = malloc(sizeof(double) * (size_t)(n * NV)), *g = malloc(sizeof(double) * (size_t)(n * NV));
    double *q = malloc(sizeof(double) * (size_t)(n * NK * dk)), *k = malloc(sizeof(double) * (size_t)(n * NK * dk));
    double *v = malloc(sizeof(double) * (size_t)(n * NV * dv)), *core = malloc(sizeof(double) * (size_t)(n * NV * dv));
    const fx_tensor *A = hy_t(rm, "%s.linear_attn.A_log", p), *dt = hy_t(rm, "%s.linear_attn.dt_bias", p);
    const fx_tensor *nw = hy_t(rm, "%s.linear_attn.norm.weight", p);
    char name[256];
    for (int t = 0; t < n; t++)
        hy_gdn_project(mixed + t * C, z + t * NV * dv, b + t * NV, a + t * NV, h + t * H, rm, p);
    hy_conv(cv, mixed, n, C, o->conv_kernel, hy_t(rm, "%s.linear_attn.conv1d.weight", p), st->conv[l]);
    for (int t = 0; t < n; t++) {
        memcpy(q + t * NK * dk, cv + t * C, sizeof(double) * (size_t)(NK * dk));
        memcpy(k + t * NK * dk, cv + t * C + NK * dk, sizeof(double) * (size_t)(NK * dk));
        memcpy(v + t * NV * dv, cv + t * C + 2 * NK * dk, sizeof(double) * (size_t)(NV * dv));
        for (int64_t hh = 0; hh < NV; hh++) {
            g[t * NV + hh] = -exp(fx_get(A, hh)) * hy_softplus(a[t * NV + hh] + fx_get(dt, hh));
            b[t * NV + hh] = hy_sigmoid(b[t * NV + hh]);
        }
    }
    if (rm->hy_chunked && n > 1) hy_gdn_chunked(core, q, k, v, g, b, n, d, st->ssm[l]);
    else hy_gdn_recurrent(core, q, k, v, g, b, n, d, st->ssm[l]);
    snprintf(name, sizeof name, "%s.linear_attn.out_proj", p);
    for (int t = 0; t < n; t++) {
        for (int64_t hh = 0; hh < NV; hh++) { /* gated RMSNorm: norm before gate */
            double *x = core + (t * NV + hh) * dv, ss = 0, r;
            const double *zz = z + (t * NV + hh) * dv;
            for (int64_t j = 0; j < dv; j++) ss += x[j] * x[j];
            r = 1.0 / sqrt(ss / (double)dv + eps);
            for (int64_t j = 0; j < dv; j++) x[j] = x[j] * r * fx_get(nw, j) * ref_silu(zz[j]);
        }
        hy_lin(out + t * H, core + t * NV * dv, rm, name);
    }
    free(mixed); free(cv); free(z); free(b); free(a); free(g); free(q); free(k); free(v); free(core);
}

/* Gated full attention (prefix p, KV slot l) over h[n][H] at positions
 * st->n_past.. into out[n][H]. */
static inline void hy_attn_layer(double *out, const double *h, int n, const ref_model *rm, const char *p,
                                 hy_state *st, long long l) {
    const fx_opts *o = &rm->o;
    const int64_t H = o->hidden, NH = o->n_heads, NKV = o->n_kv_heads, D = o->head_dim, G = NH / NKV;
    const int64_t rot = fx_rot_dim(o);
    const double eps = fx_eps(o), theta = fx_theta(o);
    double *qg = malloc(sizeof(double) * (size_t)(2 * NH * D)), *q = malloc(sizeof(double) * (size_t)(NH * D));
    double *gate = malloc(sizeof(double) * (size_t)(NH * D)), *att = malloc(sizeof(double) * (size_t)(NH * D));
    double *s = malloc(sizeof(double) * (size_t)(st->n_past + n));
    const fx_tensor *qn = hy_t(rm, "%s.self_attn.q_norm.weight", p), *kn = hy_t(rm, "%s.self_attn.k_norm.weight", p);
    char nq[256], nk[256], nv[256], no[256];
    snprintf(nq, sizeof nq, "%s.self_attn.q_proj", p);
    snprintf(nk, sizeof nk, "%s.self_attn.k_proj", p);
    snprintf(nv, sizeof nv, "%s.self_attn.v_proj", p);
    snprintf(no, sizeof no, "%s.self_attn.o_proj", p);
    for (int t = 0; t < n; t++) {
        const int64_t pos = st->n_past + t;
        double *kt = st->kc[l] + pos * NKV * D, *vt = st->vc[l] + pos * NKV * D;
        if (pos >= st->cap) {
            fprintf(stderr, "hybrid_ref: KV capacity %lld exceeded\n", (long long)st->cap);
            exit(2);
        }
        hy_lin(qg, h + t * H, rm, nq);
        for (int64_t hd = 0; hd < NH; hd++) /* per head [query D, gate D] */
            for (int64_t d = 0; d < D; d++) q[hd * D + d] = qg[hd * 2 * D + d], gate[hd * D + d] = qg[hd * 2 * D + D + d];
        hy_lin(kt, h + t * H, rm, nk);
        hy_lin(vt, h + t * H, rm, nv);
        for (int64_t hd = 0; hd < NH; hd++) hy_rmsnorm_zc(q + hd * D, q + hd * D, D, qn, eps);
        for (int64_t hd = 0; hd < NKV; hd++) hy_rmsnorm_zc(kt + hd * D, kt + hd * D, D, kn, eps);
        ref_rope_partial(q, NH, D, rot, pos, theta);
        ref_rope_partial(kt, NKV, D, rot, pos, theta);
        for (int64_t hd = 0; hd < NH; hd++) {
            const int64_t kh = hd / G;
            double mx = -INFINITY, sum = 0;
            for (int64_t i = 0; i <= pos; i++) {
                double a = 0;
                for (int64_t d = 0; d < D; d++) a += q[hd * D + d] * st->kc[l][(i * NKV + kh) * D + d];
                s[i] = a / sqrt((double)D);
                mx = fmax(mx, s[i]);
            }
            for (int64_t i = 0; i <= pos; i++) sum += (s[i] = exp(s[i] - mx));
            for (int64_t d = 0; d < D; d++) {
                double a = 0;
                for (int64_t i = 0; i <= pos; i++) a += s[i] / sum * st->vc[l][(i * NKV + kh) * D + d];
                att[hd * D + d] = a * hy_sigmoid(gate[hd * D + d]);
            }
        }
        hy_lin(out + t * H, att, rm, no);
    }
    free(qg); free(q); free(gate); free(att); free(s);
}

/* One routed expert e of the MoE under prefix p: per-expert tensors or
 * Qwen3.5's fused experts.gate_up_proj [E][2I][H] / experts.down_proj [E][H][I]. */
static inline void hy_expert(double *y, const double *h, const ref_model *rm, const char *p, int64_t e) {
    const int64_t H = rm->o.hidden, I = rm->o.moe_inter;
    double *gt = malloc(sizeof(double) * (size_t)I), *up = malloc(sizeof(double) * (size_t)I);
    char n[256];
    snprintf(n, sizeof n, "%s.mlp.experts.gate_up_proj", p);
    const fx_tensor *gu = hy_find(rm, n);
    if (gu) {
        const fx_tensor *dn = hy_t(rm, "%s.mlp.experts.down_proj", p);
        for (int64_t i = 0; i < I; i++) {
            double a = 0, c = 0;
            for (int64_t j = 0; j < H; j++) {
                a += fx_get(gu, (e * 2 * I + i) * H + j) * h[j];
                c += fx_get(gu, (e * 2 * I + I + i) * H + j) * h[j];
            }
            gt[i] = ref_silu(a) * c;
        }
        for (int64_t j = 0; j < H; j++) {
            double a = 0;
            for (int64_t i = 0; i < I; i++) a += fx_get(dn, (e * H + j) * I + i) * gt[i];
            y[j] = a;
        }
    } else {
        snprintf(n, sizeof n, "%s.mlp.experts.%lld.gate_proj", p, (long long)e), hy_lin(gt, h, rm, n);
        snprintf(n, sizeof n, "%s.mlp.experts.%lld.up_proj", p, (long long)e), hy_lin(up, h, rm, n);
        for (int64_t i = 0; i < I; i++) gt[i] = ref_silu(gt[i]) * up[i];
        snprintf(n, sizeof n, "%s.mlp.experts.%lld.down_proj", p, (long long)e), hy_lin(y, gt, rm, n);
    }
    free(gt);
    free(up);
}

/* SwiGLU "<p>.<mlp>.{gate,up,down}_proj" of width I. */
static inline void hy_swiglu(double *y, const double *h, const ref_model *rm, const char *p, const char *mlp,
                             int64_t I) {
    double *gt = malloc(sizeof(double) * (size_t)I), *up = malloc(sizeof(double) * (size_t)I);
    char n[256];
    snprintf(n, sizeof n, "%s.%s.gate_proj", p, mlp), hy_lin(gt, h, rm, n);
    snprintf(n, sizeof n, "%s.%s.up_proj", p, mlp), hy_lin(up, h, rm, n);
    for (int64_t i = 0; i < I; i++) gt[i] = ref_silu(gt[i]) * up[i];
    snprintf(n, sizeof n, "%s.%s.down_proj", p, mlp), hy_lin(y, gt, rm, n);
    free(gt);
    free(up);
}

/* The sparse MoE block: softmax router, top-k (ties to the lower id),
 * renormalised (Qwen3.5 always, Qwen3-Next with norm_topk_prob), plus the
 * shared expert behind sigmoid(h . shared_expert_gate). */
static inline void hy_moe(double *out, const double *h, const ref_model *rm, const char *p) {
    const fx_opts *o = &rm->o;
    const int64_t H = o->hidden, E = o->n_experts, K = o->top_k;
    const int renorm = o->arch == FX_QWEN3_5_MOE || !o->no_renorm;
    double *lg = malloc(sizeof(double) * (size_t)E), *y = malloc(sizeof(double) * (size_t)H);
    double mx = -INFINITY, sum = 0, w[64], wsum = 0, z = 0;
    int64_t ids[64];
    char *used = calloc((size_t)E, 1);
    const fx_tensor *sg = hy_t(rm, "%s.mlp.shared_expert_gate.weight", p);
    ref_lin_float(lg, h, hy_t(rm, "%s.mlp.gate.weight", p));
    for (int64_t e = 0; e < E; e++) mx = fmax(mx, lg[e]);
    for (int64_t e = 0; e < E; e++) sum += (lg[e] = exp(lg[e] - mx));
    for (int64_t j = 0; j < K; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++)
            if (!used[e] && (best < 0 || lg[e] > lg[best])) best = e;
        used[best] = 1;
        ids[j] = best;
        wsum += (w[j] = lg[best] / sum);
    }
    memset(out, 0, sizeof(double) * (size_t)H);
    for (int64_t j = 0; j < K; j++) {
        hy_expert(y, h, rm, p, ids[j]);
        for (int64_t i = 0; i < H; i++) out[i] += (renorm ? w[j] / wsum : w[j]) * y[i];
    }
    hy_swiglu(y, h, rm, p, "mlp.shared_expert", o->shared_inter);
    for (int64_t i = 0; i < H; i++) z += h[i] * fx_get(sg, i);
    for (int64_t i = 0; i < H; i++) out[i] += hy_sigmoid(z) * y[i];
    free(lg); free(y); free(used);
}

/* n tokens ids[0..n) after st->n_past into logits[n][vocab]; the state
 * carried (conv and recurrent states, KV) and advanced. */
static inline void hy_forward(const ref_model *rm, hy_state *st, const int32_t *ids, int n, double *logits) {
    const fx_opts *o = &rm->o;
    const int64_t H = o->hidden, V = o->vocab;
    const char *P = fx_hy_prefix(o);
    const double eps = fx_eps(o);
    const fx_tensor *emb = hy_t(rm, "%sembed_tokens.weight", P);
    const fx_tensor *head = o->tie ? emb : hy_t(rm, "lm_head.weight");
    double *x = malloc(sizeof(double) * (size_t)(n * H)), *hn = malloc(sizeof(double) * (size_t)(n * H));
    double *y = malloc(sizeof(double) * (size_t)(n * H));
    char p[160];
    for (int t = 0; t < n; t++)
        for (int64_t i = 0; i < H; i++) x[t * H + i] = fx_get(emb, (int64_t)ids[t] * H + i);
    for (long long l = 0; l < o->n_layers; l++) {
        const fx_tensor *n1, *n2;
        snprintf(p, sizeof p, "%slayers.%lld", P, l);
        n1 = hy_t(rm, "%s.input_layernorm.weight", p);
        n2 = hy_t(rm, "%s.post_attention_layernorm.weight", p);
        for (int t = 0; t < n; t++) hy_rmsnorm_zc(hn + t * H, x + t * H, H, n1, eps);
        if (fx_full_attn(o, l)) hy_attn_layer(y, hn, n, rm, p, st, l);
        else hy_gdn_layer(y, hn, n, rm, p, st, l);
        for (int t = 0; t < n; t++) {
            for (int64_t i = 0; i < H; i++) x[t * H + i] += y[t * H + i];
            hy_rmsnorm_zc(hn, x + t * H, H, n2, eps);
            if (o->arch == FX_QWEN3_NEXT && l == o->dense_layer) hy_swiglu(y, hn, rm, p, "mlp", o->inter);
            else hy_moe(y, hn, rm, p);
            for (int64_t i = 0; i < H; i++) x[t * H + i] += y[i];
        }
    }
    for (int t = 0; t < n; t++) {
        hy_rmsnorm_zc(hn, x + t * H, H, hy_t(rm, "%snorm.weight", P), eps);
        for (int64_t j = 0; j < V; j++) {
            double a = 0;
            for (int64_t i = 0; i < H; i++) a += hn[i] * fx_get(head, j * H + i);
            logits[t * V + j] = a;
        }
    }
    st->n_past += n;
    free(x); free(hn); free(y);
}

/* ref_forward of a hybrid family: a fresh state, the n tokens at 0..n-1. */
static inline void hy_ref_forward(const ref_model *rm, const int32_t *ids, int n, double *logits) {
    hy_state st;
    hy_state_init(&st, &rm->o, n);
    hy_forward(rm, &st, ids, n, logits);
    hy_state_free(&st, &rm->o);
}

#endif
