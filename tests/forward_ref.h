/*
 * forward_ref.h — an independent double-precision forward pass for tests,
 * written from SEMANTICS §4, §5 and §7 and Hugging Face's modeling code of
 * each family the fixture writes (fixture_model.h o.arch): Qwen3MoE (q/k
 * norms), Qwen2MoE (q/k/v biases added after the float linears, or already
 * in a W8A8 linear's quant_bias; the shared expert, sigmoid(h . g) *
 * shared(h), added to the routed experts' sum; norm_topk_prob as written)
 * and Mixtral (softmax over all experts, top-2, divided by their sum);
 * DeepSeek-V2/V3, GLM-4.5 and MiniMax-M2 below; the hybrid Gated DeltaNet
 * families (Qwen3-Next, Qwen3.5-MoE) in hybrid_ref.h.
 * It shares no code with src/: it reads the fixture's tensors (fixture_model.h,
 * values as written to the file) by name and computes everything in double,
 * except the activation codes of quantized layers, which it computes in fp32
 * as the spec defines them (then exact integer sums, then double).
 *
 *   ref_model rm;  ref_init(&rm, &opts);          // same opts as fx_write_model
 *   ref_forward(&rm, ids, n, logits);             // logits [n][vocab], positions 0..n-1
 *   ref_free(&rm);
 *
 * DeepSeek-V2 / V3 (o.arch FX_DEEPSEEK_V2 / V3) follow DeepSeek-V2-Lite's
 * modeling_deepseek.py and transformers' modeling_deepseek_v3.py in their
 * expanded (non-absorbed) form: q = q_proj(h) or q_b(rmsnorm_1e-6(q_a(h)));
 * kv_a(h) = [c (L), k_pe (dr)]; kv_b(rmsnorm_1e-6(c)) = per head [k_nope, v];
 * RoPE on q_pe and k_pe only, HF's layout (view [dr/2][2], transpose,
 * rotate_half: the pairs (2i, 2i+1) at theta^(-2i/dr)), YaRN's inv_freq and
 * cos/sin x yarn_get_mscale(f, mscale) / yarn_get_mscale(f, mscale_all_dim);
 * softmax scale (dn+dr)^-0.5 x yarn_get_mscale(f, mscale_all_dim)^2 with
 * YaRN. Routing (ref_route_deepseek): V2 softmax, greedy or group-limited
 * (a group's best score, topk_group groups kept), then either w /= sum
 * (top_k > 1 and norm_topk_prob) or w *= routed_scaling_factor, as V2's
 * MoEGate does; V3 sigmoid, selection on score + e_score_correction_bias
 * (a group's two best summed, dropped groups masked to 0.0), weights the
 * unbiased scores, w /= sum if norm_topk_prob, then always
 * w *= routed_scaling_factor. Shared experts added ungated. W8A8: the linears
 * of the attention read static codes (q_b_proj's input is the q_a_layernorm
 * output); a W8A8 kv_b_proj runs as its dequantized float weight
 * deq_scale[j] / input_scale * Wq[j][i] (its quant_bias only cancels the
 * input offset), as the engine absorbs it into attention.
 *
 * GLM-4.5 (FX_GLM4_MOE) and MiniMax-M2 (FX_MINIMAX_M2), ref_layer_sig, follow
 * transformers' modeling_glm4_moe.py and modeling_minimax_m2.py (vLLM's
 * glm4_moe.py and minimax_m2.py where transformers is silent: MiniMax's
 * rotary_dim, use_routing_bias): GQA at D^-0.5; q/k/v biases (GLM, float
 * `.bias` added, or inside a W8A8 quant_bias); q/k RMSNorm per head of D
 * (GLM's use_qk_norm) or over the whole q and k projections before the head
 * split (MiniMax); partial rotary (ref_rope_partial: the first rot dims,
 * rot = int(D * partial_rotary_factor) or rotary_dim, rotate_half within
 * them, inv_freq theta^(-2i/rot), the rest passed); sigmoid routing
 * (ref_route_sigmoid): selection on sigmoid + e_score_correction_bias, GLM
 * grouped (a group's two best summed, topk_group kept, the rest 0.0),
 * weights the unbiased scores, / (sum + 1e-20) with norm_topk_prob, x
 * routed_scaling_factor; MiniMax one group, always / sum, no factor;
 * GLM's shared experts added ungated, its first first_k_dense_replace layers
 * dense. The MTP layers are never read. rms_norm_eps and rope_theta from
 * fx_eps / fx_theta.
 *
 * rm.float_experts = 1 runs W8A8_DYNAMIC experts with dequantized weights
 * S·(Wq + O) in double (what --float-experts computes). An expert's (or the
 * shared expert's) FLOAT down_proj beside W8A8_DYNAMIC gate/up (o.down_float)
 * takes the float A: no second quantization.
 */
#ifndef MOE8_FORWARD_REF_H
#define MOE8_FORWARD_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    fx_opts o;
    fx_list L;
    int float_experts;
    int hy_chunked;           /* hybrid families: prefill DeltaNet layers in chunks (hybrid_ref.h) */
    int lm_head_int8;         /* a float lm_head quantized per row to int8 (--lm-head int8,
                               * SEMANTICS §6d): ref_head_int8 */
} ref_model;

static void ref_init(ref_model *rm, const fx_opts *o) {
    memset(rm, 0, sizeof *rm);
    rm->o = *o;
    rm->L.o = &rm->o;
    fx_build(&rm->L);
}

static void ref_free(ref_model *rm) { fx_list_free(&rm->L); }

static const fx_tensor *ref_t(const ref_model *rm, const char *fmt, long long a, long long b) {
    char name[200];
    snprintf(name, sizeof name, fmt, a, b);
    for (int i = 0; i < rm->L.n; i++)
        if (!strcmp(rm->L.t[i].name, name)) return &rm->L.t[i];
    fprintf(stderr, "forward_ref: no tensor %s\n", name);
    exit(2);
}

/* ---- linears ---------------------------------------------------------------- */

/* float: y[n] = sum_k x[k] W[n][k] */
static void ref_lin_float(double *y, const double *x, const fx_tensor *w) {
    int64_t n = w->shape[0], k = w->shape[1];
    for (int64_t i = 0; i < n; i++) {
        double a = 0;
        for (int64_t j = 0; j < k; j++) a += x[j] * fx_get(w, i * k + j);
        y[i] = a;
    }
}

static float ref_deq(const fx_tensor *t, int64_t i) {
    if (t->dtype == MOE8_DT_I64) {
        int64_t v;
        uint32_t lo;
        float f;
        memcpy(&v, (const char *)t->data + 8 * i, 8);
        lo = (uint32_t)(uint64_t)v;
        memcpy(&f, &lo, 4);
        return f;
    }
    return (float)fx_get(t, i);
}

/* W8A8 static (SEMANTICS §5): codes in fp32, exact integer sum, then double. */
static void ref_lin_static(double *y, const double *x, const ref_model *rm, const char *prefix,
                           long long l) {
    char f[320];
    const fx_tensor *w, *is, *io, *dq, *qb;
    snprintf(f, sizeof f, "%.200s.weight", prefix); w = ref_t(rm, f, l, 0);
    snprintf(f, sizeof f, "%.200s.input_scale", prefix); is = ref_t(rm, f, l, 0);
    snprintf(f, sizeof f, "%.200s.input_offset", prefix); io = ref_t(rm, f, l, 0);
    snprintf(f, sizeof f, "%.200s.deq_scale", prefix); dq = ref_t(rm, f, l, 0);
    snprintf(f, sizeof f, "%.200s.quant_bias", prefix); qb = ref_t(rm, f, l, 0);
    int64_t n = w->shape[0], k = w->shape[1];
    float s = (float)fx_get(is, 0), off = (float)fx_get(io, 0);
    int32_t *q = malloc((size_t)k * sizeof *q);
    for (int64_t j = 0; j < k; j++) {
        float v = rintf((float)x[j] / s + off);
        q[j] = (int32_t)(v < -128.0f ? -128.0f : v > 127.0f ? 127.0f : v);
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t acc = (int64_t)fx_get(qb, i);
        for (int64_t j = 0; j < k; j++) acc += (int64_t)q[j] * (int64_t)fx_get(w, i * k + j);
        y[i] = (double)acc * (double)ref_deq(dq, i);
    }
    free(q);
}

/* W8A8 dynamic (SEMANTICS §4) of weight w, scales sc, offsets of; with
 * `dequant` its dequantized twin S·(Wq + O) in double. */
static double ref_code(const fx_tensor *w, int64_t i, int64_t j, int64_t k) {
    return w->quant && !strcmp(w->quant, "W4A8_DYNAMIC") ? fx_w4_code(w, i, j)
                                                         : fx_get(w, i * k + j);
}

/* W4A8_DYNAMIC (SEMANTICS §4b) the same with int4 codes, two a byte: n is
 * twice the stored rows. */
static void ref_dynamic(double *y, const double *x, const fx_tensor *w, const fx_tensor *sc,
                        const fx_tensor *of, int dequant) {
    const int w4 = w->quant && !strcmp(w->quant, "W4A8_DYNAMIC");
    int64_t n = w4 ? 2 * w->shape[0] : w->shape[0], k = w->shape[1];
    if (dequant) {
        for (int64_t i = 0; i < n; i++) {
            double a = 0, s = fx_get(sc, i), o = fx_get(of, i);
            for (int64_t j = 0; j < k; j++) a += x[j] * s * (ref_code(w, i, j, k) + o);
            y[i] = a;
        }
        return;
    }
    float amax = 0.0f, sx;
    int64_t qsum = 0;
    int32_t *q = malloc((size_t)k * sizeof *q);
    for (int64_t j = 0; j < k; j++) amax = fmaxf(amax, fabsf((float)x[j]));
    sx = amax / 127.0f;
    for (int64_t j = 0; j < k; j++) {
        float v = sx > 0.0f ? rintf((float)x[j] / sx) : 0.0f;
        q[j] = (int32_t)(v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v);
        qsum += q[j];
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t acc = (int64_t)fx_get(of, i) * qsum;
        for (int64_t j = 0; j < k; j++) acc += (int64_t)q[j] * (int64_t)ref_code(w, i, j, k);
        y[i] = (double)acc * (double)sx * fx_get(sc, i);
    }
    free(q);
}

/* An expert's W8A8 dynamic linear, or its dequantized twin (float_experts). */
static void ref_lin_dynamic(double *y, const double *x, const ref_model *rm, const char *prefix,
                            long long l, long long e) {
    char f[320];
    const fx_tensor *w, *sc, *of;
    snprintf(f, sizeof f, "%.200s.weight", prefix); w = ref_t(rm, f, l, e);
    snprintf(f, sizeof f, "%.200s.weight_scale", prefix); sc = ref_t(rm, f, l, e);
    snprintf(f, sizeof f, "%.200s.weight_offset", prefix); of = ref_t(rm, f, l, e);
    ref_dynamic(y, x, w, sc, of, rm->float_experts);
}

/* A linear "model.layers.<l>.<rest>" of the model's attention/dense storage:
 * W4A8_DYNAMIC when its weight says so (quantize --linear w4a8, SEMANTICS
 * §5b: a float bias beside it added after), else as the fixture wrote it. */
static void ref_lin(double *y, const double *x, const ref_model *rm, long long l, const char *rest) {
    char prefix[200], f[320];
    snprintf(prefix, sizeof prefix, "model.layers.%%lld.%s", rest);
    snprintf(f, sizeof f, "%.200s.weight", prefix);
    const fx_tensor *wt = ref_t(rm, f, l, 0);
    if (wt->quant && !strcmp(wt->quant, "W4A8_DYNAMIC")) {
        snprintf(f, sizeof f, "%.200s.weight_scale", prefix);
        const fx_tensor *sc = ref_t(rm, f, l, 0);
        snprintf(f, sizeof f, "%.200s.weight_offset", prefix);
        ref_dynamic(y, x, wt, sc, ref_t(rm, f, l, 0), 0); /* float_experts: experts only */
        snprintf(f, sizeof f, "%.200s.bias", prefix);
        for (int i = 0; i < rm->L.n; i++) {
            char name[320];
            snprintf(name, sizeof name, f, l, 0LL);
            if (strcmp(rm->L.t[i].name, name)) continue;
            for (int64_t j = 0; j < rm->L.t[i].shape[0]; j++) y[j] += fx_get(&rm->L.t[i], j);
        }
        return;
    }
    if (rm->o.quant) {
        ref_lin_static(y, x, rm, prefix, l);   /* a q/k/v bias is inside quant_bias */
    } else {
        char f[320];
        snprintf(f, sizeof f, "%.200s.weight", prefix);
        ref_lin_float(y, x, ref_t(rm, f, l, 0));
        if ((rm->o.arch == FX_QWEN2 || (rm->o.arch == FX_GLM4_MOE && !rm->o.no_attn_bias)) &&
            strstr(rest, "self_attn.") && !strstr(rest, "o_proj")) {
            const fx_tensor *b;
            snprintf(f, sizeof f, "%.200s.bias", prefix);
            b = ref_t(rm, f, l, 0);
            for (int64_t i = 0; i < b->shape[0]; i++) y[i] += fx_get(b, i);
        }
    }
}

/* ---- blocks -------------------------------------------------------------------- */

static void ref_rmsnorm(double *y, const double *x, int64_t n, const fx_tensor *w, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * r * fx_get(w, i);
}

static void ref_rope(double *x, int64_t n_head, int64_t D, int64_t pos, double theta) {
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t i = 0; i < D / 2; i++) {
            double a = (double)pos * pow(theta, -2.0 * (double)i / (double)D);
            double c = cos(a), s = sin(a), x1 = x[h * D + i], x2 = x[h * D + i + D / 2];
            x[h * D + i] = x1 * c - x2 * s;
            x[h * D + i + D / 2] = x2 * c + x1 * s;
        }
}

static double ref_silu(double v) { return v / (1.0 + exp(-v)); }

/* Whether module "<prefix>" (l, e filled in) is stored quantized. */
static int ref_quantized(const ref_model *rm, const char *prefix) {
    char f[320];
    snprintf(f, sizeof f, "%.200s.weight", prefix);
    return strcmp(ref_t(rm, f, 0, 0)->quant, "FLOAT") != 0;
}

/* One SwiGLU expert "<prefix>.{gate,up,down}" (module names without
 * ".weight") of width I: W8A8_DYNAMIC (or W4A8_DYNAMIC) or FLOAT as the
 * fixture wrote each (a quantized model's down_proj FLOAT with o.down_float,
 * a layer's experts FLOAT with o.float_expert_layers). */
static void ref_swiglu(double *y, const double *h, const ref_model *rm, const char *gate,
                       const char *up, const char *down, int64_t I) {
    char f[320];
    double *g = malloc(sizeof(double) * I), *u = malloc(sizeof(double) * I);
    if (ref_quantized(rm, gate)) {
        ref_lin_dynamic(g, h, rm, gate, 0, 0);
        ref_lin_dynamic(u, h, rm, up, 0, 0);
    } else {
        snprintf(f, sizeof f, "%.200s.weight", gate);
        ref_lin_float(g, h, ref_t(rm, f, 0, 0));
        snprintf(f, sizeof f, "%.200s.weight", up);
        ref_lin_float(u, h, ref_t(rm, f, 0, 0));
    }
    for (int64_t i = 0; i < I; i++) g[i] = ref_silu(g[i]) * u[i];
    if (ref_quantized(rm, down)) {
        ref_lin_dynamic(y, g, rm, down, 0, 0);
    } else {
        snprintf(f, sizeof f, "%.200s.weight", down);
        ref_lin_float(y, g, ref_t(rm, f, 0, 0));
    }
    free(g);
    free(u);
}

static void ref_expert(double *y, const double *h, const ref_model *rm, long long l, long long e) {
    char p[3][200];
    for (int i = 0; i < 3; i++)
        snprintf(p[i], sizeof p[i], "model.layers.%lld.%s.experts.%lld.%s", l, fx_moe_block(&rm->o),
                 e, fx_expert_proj(&rm->o, i));
    ref_swiglu(y, h, rm, p[0], p[1], p[2], rm->o.moe_inter);
}

/* Qwen2-MoE's shared expert with its gate: sigmoid(h . g) * shared(h). */
static void ref_shared(double *y, const double *h, const ref_model *rm, long long l) {
    const int64_t H = rm->o.hidden;
    char p[3][200];
    double z = 0;
    static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
    const fx_tensor *g = ref_t(rm, "model.layers.%lld.mlp.shared_expert_gate.weight", l, 0);
    for (int i = 0; i < 3; i++)
        snprintf(p[i], sizeof p[i], "model.layers.%lld.mlp.shared_expert.%s", l, proj[i]);
    ref_swiglu(y, h, rm, p[0], p[1], p[2], rm->o.shared_inter);
    for (int64_t i = 0; i < H; i++) z += h[i] * fx_get(g, i);
    for (int64_t i = 0; i < H; i++) y[i] *= 1.0 / (1.0 + exp(-z));
}

/* softmax over the E router logits, top-k (ties to the lower id),
 * renormalized (Mixtral always, the Qwen families unless o.no_renorm), then
 * the shared expert (Qwen2-MoE). */
static void ref_moe(double *out, const double *h, const ref_model *rm, long long l) {
    int64_t H = rm->o.hidden, E = rm->o.n_experts, K = rm->o.top_k;
    double *lg = malloc(sizeof(double) * E), *y = malloc(sizeof(double) * H), mx = -INFINITY, sum = 0;
    int *used = calloc((size_t)E, sizeof(int));
    int64_t ids[64];
    double w[64], wsum = 0;
    char rn[200];
    const int renorm = rm->o.arch == FX_MIXTRAL || !rm->o.no_renorm;
    snprintf(rn, sizeof rn, "model.layers.%%lld.%s.gate.weight", fx_moe_block(&rm->o));
    ref_lin_float(lg, h, ref_t(rm, rn, l, 0));
    for (int64_t e = 0; e < E; e++) mx = fmax(mx, lg[e]);
    for (int64_t e = 0; e < E; e++) sum += (lg[e] = exp(lg[e] - mx));
    for (int64_t j = 0; j < K; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++)
            if (!used[e] && (best < 0 || lg[e] > lg[best])) best = e;
        used[best] = 1;
        ids[j] = best;
        w[j] = lg[best] / sum;
        wsum += w[j];
    }
    memset(out, 0, sizeof(double) * H);
    for (int64_t j = 0; j < K; j++) {
        ref_expert(y, h, rm, l, ids[j]);
        for (int64_t i = 0; i < H; i++) out[i] += (renorm ? w[j] / wsum : w[j]) * y[i];
    }
    if (rm->o.arch == FX_QWEN2) {
        ref_shared(y, h, rm, l);
        for (int64_t i = 0; i < H; i++) out[i] += y[i];
    }
    free(lg);
    free(y);
    free(used);
}

static void ref_dense(double *out, const double *h, const ref_model *rm, long long l) {
    int64_t F = rm->o.inter;
    double *g = malloc(sizeof(double) * F), *u = malloc(sizeof(double) * F);
    ref_lin(g, h, rm, l, "mlp.gate_proj");
    ref_lin(u, h, rm, l, "mlp.up_proj");
    for (int64_t i = 0; i < F; i++) g[i] = ref_silu(g[i]) * u[i];
    ref_lin(out, g, rm, l, "mlp.down_proj");
    free(g);
    free(u);
}

/* Causal attention of the n tokens' queries q[n][NH*D] on k, v [n][NKV*D]. */
static void ref_attend(double *att, const double *q, const double *k, const double *v, int n,
                       const fx_opts *o) {
    int64_t NH = o->n_heads, NKV = o->n_kv_heads, D = o->head_dim, G = NH / NKV;
    double *s = malloc(sizeof(double) * n);
    for (int t = 0; t < n; t++)
        for (int64_t h = 0; h < NH; h++) {
            double mx = -INFINITY, sum = 0;
            const int64_t kh = h / G;
            for (int i = 0; i <= t; i++) {
                double a = 0;
                for (int64_t d = 0; d < D; d++) a += q[(t * NH + h) * D + d] * k[(i * NKV + kh) * D + d];
                s[i] = a / sqrt((double)D);
                mx = fmax(mx, s[i]);
            }
            for (int i = 0; i <= t; i++) sum += (s[i] = exp(s[i] - mx));
            for (int64_t d = 0; d < D; d++) {
                double a = 0;
                for (int i = 0; i <= t; i++) a += s[i] / sum * v[(i * NKV + kh) * D + d];
                att[(t * NH + h) * D + d] = a;
            }
        }
    free(s);
}

static void ref_layer(double *x, int n, const ref_model *rm, long long l) {
    const fx_opts *o = &rm->o;
    const int64_t H = o->hidden, NH = o->n_heads, NKV = o->n_kv_heads, D = o->head_dim;
    const double eps = o->arch == FX_MIXTRAL ? 1e-5 : 1e-6, theta = 1e6;
    double *h = malloc(sizeof(double) * n * H), *q = malloc(sizeof(double) * n * NH * D);
    double *k = malloc(sizeof(double) * n * NKV * D), *v = malloc(sizeof(double) * n * NKV * D);
    double *att = malloc(sizeof(double) * n * NH * D), *y = malloc(sizeof(double) * H);
    const fx_tensor *qn = o->arch == FX_QWEN3 ? ref_t(rm, "model.layers.%lld.self_attn.q_norm.weight", l, 0) : NULL;
    const fx_tensor *kn = o->arch == FX_QWEN3 ? ref_t(rm, "model.layers.%lld.self_attn.k_norm.weight", l, 0) : NULL;
    for (int t = 0; t < n; t++) {
        ref_rmsnorm(h + t * H, x + t * H, H, ref_t(rm, "model.layers.%lld.input_layernorm.weight", l, 0), eps);
        ref_lin(q + t * NH * D, h + t * H, rm, l, "self_attn.q_proj");
        ref_lin(k + t * NKV * D, h + t * H, rm, l, "self_attn.k_proj");
        ref_lin(v + t * NKV * D, h + t * H, rm, l, "self_attn.v_proj");
        for (int64_t i = 0; qn && i < NH; i++) ref_rmsnorm(q + (t * NH + i) * D, q + (t * NH + i) * D, D, qn, eps);
        for (int64_t i = 0; kn && i < NKV; i++) ref_rmsnorm(k + (t * NKV + i) * D, k + (t * NKV + i) * D, D, kn, eps);
        ref_rope(q + t * NH * D, NH, D, t, theta);
        ref_rope(k + t * NKV * D, NKV, D, t, theta);
    }
    ref_attend(att, q, k, v, n, o);
    for (int t = 0; t < n; t++) {
        ref_lin(y, att + t * NH * D, rm, l, "self_attn.o_proj");
        for (int64_t i = 0; i < H; i++) x[t * H + i] += y[i];
        ref_rmsnorm(h + t * H, x + t * H, H,
                    ref_t(rm, "model.layers.%lld.post_attention_layernorm.weight", l, 0), eps);
        if (fx_dense(o, l)) ref_dense(y, h + t * H, rm, l);
        else ref_moe(y, h + t * H, rm, l);
        for (int64_t i = 0; i < H; i++) x[t * H + i] += y[i];
    }
    free(h); free(q); free(k); free(v); free(att); free(y);
}

/* ---- DeepSeek-V2 / V3 --------------------------------------------------------- */

/* DeepSeek's yarn_get_mscale. */
static double ref_yarn_mscale(double scale, double mscale) {
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

/* inv_freq[dr/2] of the rotary part: plain, or DeepseekV2YarnRotaryEmbedding's. */
static void ref_ds_inv_freq(const fx_opts *o, double *inv) {
    const int64_t d = o->qk_rope;
    const double base = o->ds_theta, pi = 3.14159265358979323846;
    double low = 0, high = 0;
    if (o->yarn) {
        const double m = (double)o->yarn_orig_max;
        low = floor(d * log(m / (o->yarn_beta_fast * 2 * pi)) / (2 * log(base)));
        high = ceil(d * log(m / (o->yarn_beta_slow * 2 * pi)) / (2 * log(base)));
        low = fmax(low, 0.0);
        high = fmin(high, (double)(d - 1));
        if (low == high) high += 0.001;
    }
    for (int64_t i = 0; i < d / 2; i++) {
        double extra = 1.0 / pow(base, (double)(2 * i) / (double)d), ramp, mask;
        if (!o->yarn) {
            inv[i] = extra;
            continue;
        }
        ramp = fmin(fmax(((double)i - low) / (high - low), 0.0), 1.0);
        mask = 1.0 - ramp;   /* inv_freq_mask: 1 keeps the extrapolated frequency */
        inv[i] = extra / o->yarn_factor * (1.0 - mask) + extra * mask;
    }
}

/* cos/sin factor and the attention's softmax scale. */
static double ref_ds_rope_mscale(const fx_opts *o) {
    return o->yarn ? ref_yarn_mscale(o->yarn_factor, o->yarn_mscale) /
                         ref_yarn_mscale(o->yarn_factor, o->yarn_mscale_all_dim)
                   : 1.0;
}
static double ref_ds_softmax_scale(const fx_opts *o) {
    double s = 1.0 / sqrt((double)(o->qk_nope + o->qk_rope));
    if (o->yarn && o->yarn_mscale_all_dim != 0.0) {
        double m = ref_yarn_mscale(o->yarn_factor, o->yarn_mscale_all_dim);
        s *= m * m;
    }
    return s;
}

/* HF's apply_rotary_pos_emb on one rotary vector x[d] at position pos:
 * de-interleave ([d/2][2] transposed; V3 with rope_interleave false: not),
 * then x*cos + rotate_half(x)*sin, with cos/sin x mscale. The result stays in
 * the de-interleaved layout (q_pe and k_pe alike, so their dot product is
 * that of the interleaved pairs). */
static void ref_ds_rope(double *x, int64_t d, int64_t pos, const double *inv, double mscale,
                        int interleave) {
    double y[256];
    for (int64_t j = 0; j < d / 2; j++)
        y[j] = interleave ? x[2 * j] : x[j], y[d / 2 + j] = interleave ? x[2 * j + 1] : x[d / 2 + j];
    for (int64_t j = 0; j < d / 2; j++) {
        double a = (double)pos * inv[j], c = cos(a) * mscale, s = sin(a) * mscale;
        x[j] = y[j] * c - y[d / 2 + j] * s;
        x[d / 2 + j] = y[d / 2 + j] * c + y[j] * s;
    }
}

/* Top-k of key[0..E) (ties to the lower id) into ids[k]. */
static void ref_topk(const double *key, int64_t E, int64_t k, int64_t *ids) {
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t i = 0; i < j; i++) taken |= ids[i] == e;
            if (!taken && (best < 0 || key[e] > key[best])) best = e;
        }
        ids[j] = best;
    }
}

/* DeepSeek's MoEGate on the router logits lg[E] (bias[E] for V3, else
 * NULL): the top_k expert ids and their weights. */
static void ref_route_deepseek(const fx_opts *o, const double *lg, const double *bias, int64_t *ids,
                               double *w) {
    const int64_t E = o->n_experts, K = o->top_k;
    const int v3 = o->arch == FX_DEEPSEEK_V3, grouped = v3 || o->group_limited;
    double sc[4096], key[4096], mx = -INFINITY, sum = 0;
    for (int64_t e = 0; e < E; e++) mx = fmax(mx, lg[e]);
    for (int64_t e = 0; e < E; e++) {
        sc[e] = v3 ? 1.0 / (1.0 + exp(-lg[e])) : exp(lg[e] - mx);
        sum += sc[e];
    }
    for (int64_t e = 0; e < E; e++) {
        if (!v3) sc[e] /= sum;
        key[e] = sc[e] + (v3 && bias ? bias[e] : 0.0);
    }
    if (grouped) {
        const int64_t G = o->n_group, gs = E / G;
        double gsc[4096] = {0};
        int64_t keep[4096];
        for (int64_t g = 0; g < G; g++) {
            int64_t top[2];
            ref_topk(key + g * gs, gs, v3 ? 2 : 1, top);
            gsc[g] = v3 ? key[g * gs + top[0]] + key[g * gs + top[1]] : key[g * gs + top[0]];
        }
        ref_topk(gsc, G, o->topk_group, keep);
        for (int64_t g = 0; g < G; g++) {
            int kept = 0;
            for (int64_t i = 0; i < o->topk_group; i++) kept |= keep[i] == g;
            for (int64_t e = 0; !kept && e < gs; e++) key[g * gs + e] = 0.0; /* masked_fill 0.0 */
        }
    }
    ref_topk(key, E, K, ids);
    sum = 0;
    for (int64_t j = 0; j < K; j++) {
        w[j] = v3 ? sc[ids[j]] : key[ids[j]];   /* V2: topk of the masked scores */
        sum += w[j];
    }
    if (v3) {
        for (int64_t j = 0; j < K; j++) {
            if (!o->no_renorm) w[j] /= sum + 1e-20;
            w[j] *= o->routed_scale;
        }
    } else {
        for (int64_t j = 0; j < K; j++)
            w[j] = K > 1 && !o->no_renorm ? w[j] / (sum + 1e-20) : w[j] * o->routed_scale;
    }
}

/* The MoE block: routed experts by ref_route_deepseek plus the shared
 * experts, ungated. */
static void ref_moe_deepseek(double *out, const double *h, const ref_model *rm, long long l) {
    const fx_opts *o = &rm->o;
    const int64_t H = o->hidden, E = o->n_experts, K = o->top_k;
    double *lg = malloc(sizeof(double) * E), *bias = NULL, *y = malloc(sizeof(double) * H), w[64];
    int64_t ids[64];
    char p[3][200];
    static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
    ref_lin_float(lg, h, ref_t(rm, "model.layers.%lld.mlp.gate.weight", l, 0));
    if (o->arch == FX_DEEPSEEK_V3) {
        const fx_tensor *b = ref_t(rm, "model.layers.%lld.mlp.gate.e_score_correction_bias", l, 0);
        bias = malloc(sizeof(double) * E);
        for (int64_t e = 0; e < E; e++) bias[e] = fx_get(b, e);
    }
    ref_route_deepseek(o, lg, bias, ids, w);
    memset(out, 0, sizeof(double) * H);
    for (int64_t j = 0; j < K; j++) {
        ref_expert(y, h, rm, l, ids[j]);
        for (int64_t i = 0; i < H; i++) out[i] += w[j] * y[i];
    }
    if (o->n_shared > 0) {
        for (int i = 0; i < 3; i++)
            snprintf(p[i], sizeof p[i], "model.layers.%lld.mlp.shared_experts.%s", l, proj[i]);
        ref_swiglu(y, h, rm, p[0], p[1], p[2], o->n_shared * o->moe_inter);
        for (int64_t i = 0; i < H; i++) out[i] += y[i];
    }
    free(lg);
    free(bias);
    free(y);
}

/* kv_b_proj: float, or a W8A8 one as its dequantized weight. */
static void ref_kv_b(double *y, const double *c, const ref_model *rm, long long l) {
    const fx_tensor *w = ref_t(rm, "model.layers.%lld.self_attn.kv_b_proj.weight", l, 0);
    if (!rm->o.quant || !rm->o.kvb_w8a8) {
        ref_lin_float(y, c, w);
        return;
    }
    const fx_tensor *is = ref_t(rm, "model.layers.%lld.self_attn.kv_b_proj.input_scale", l, 0);
    const fx_tensor *io = ref_t(rm, "model.layers.%lld.self_attn.kv_b_proj.input_offset", l, 0);
    const fx_tensor *dq = ref_t(rm, "model.layers.%lld.self_attn.kv_b_proj.deq_scale", l, 0);
    const fx_tensor *qb = ref_t(rm, "model.layers.%lld.self_attn.kv_b_proj.quant_bias", l, 0);
    const int64_t n = w->shape[0], k = w->shape[1];
    const double s = fx_get(is, 0), off = fx_get(io, 0);
    for (int64_t j = 0; j < n; j++) {
        /* y = deq (Wq . (x / s + off) + qb): the weight deq / s Wq, the bias
         * deq (qb + off sum Wq), 0 unless quant_bias folds a real bias */
        double a = 0, d = (double)ref_deq(dq, j) / s, sum = 0;
        for (int64_t i = 0; i < k; i++) {
            a += c[i] * d * fx_get(w, j * k + i);
            sum += fx_get(w, j * k + i);
        }
        y[j] = a + (double)ref_deq(dq, j) * (fx_get(qb, j) + off * sum);
    }
}

/* One DeepSeek decoder layer over the n tokens x[n][H] at positions 0..n-1. */
static void ref_layer_mla(double *x, int n, const ref_model *rm, long long l) {
    const fx_opts *o = &rm->o;
    const int64_t H = o->hidden, NH = o->n_heads, dn = o->qk_nope, dr = o->qk_rope, dv = o->v_head;
    const int64_t qd = dn + dr, KL = o->kv_lora, QL = o->q_lora;
    const double eps = o->ds_eps, scale = ref_ds_softmax_scale(o), ms = ref_ds_rope_mscale(o);
    double inv[128];
    double *h = malloc(sizeof(double) * n * H), *q = malloc(sizeof(double) * n * NH * qd);
    double *kn = malloc(sizeof(double) * n * NH * dn), *v = malloc(sizeof(double) * n * NH * dv);
    double *kpe = malloc(sizeof(double) * n * dr), *att = malloc(sizeof(double) * n * NH * dv);
    double *tmp = malloc(sizeof(double) * (KL + dr + QL + NH * (dn + dv) + H));
    double *kv = tmp + KL + dr + QL, *y = kv + NH * (dn + dv), *s = malloc(sizeof(double) * n);
    ref_ds_inv_freq(o, inv);
    for (int t = 0; t < n; t++) {
        double *qt = q + t * NH * qd;
        ref_rmsnorm(h + t * H, x + t * H, H, ref_t(rm, "model.layers.%lld.input_layernorm.weight", l, 0), eps);
        if (QL > 0) {
            double *qa = tmp + KL + dr;
            ref_lin(qa, h + t * H, rm, l, "self_attn.q_a_proj");
            ref_rmsnorm(qa, qa, QL, ref_t(rm, "model.layers.%lld.self_attn.q_a_layernorm.weight", l, 0), 1e-6);
            ref_lin(qt, qa, rm, l, "self_attn.q_b_proj");
        } else {
            ref_lin(qt, h + t * H, rm, l, "self_attn.q_proj");
        }
        ref_lin(tmp, h + t * H, rm, l, "self_attn.kv_a_proj_with_mqa");
        memcpy(kpe + t * dr, tmp + KL, sizeof(double) * dr);
        ref_rmsnorm(tmp, tmp, KL, ref_t(rm, "model.layers.%lld.self_attn.kv_a_layernorm.weight", l, 0), 1e-6);
        ref_kv_b(kv, tmp, rm, l);
        for (int64_t hd = 0; hd < NH; hd++) {
            memcpy(kn + (t * NH + hd) * dn, kv + hd * (dn + dv), sizeof(double) * dn);
            memcpy(v + (t * NH + hd) * dv, kv + hd * (dn + dv) + dn, sizeof(double) * dv);
            ref_ds_rope(qt + hd * qd + dn, dr, t, inv, ms, !o->rope_halves);
        }
        ref_ds_rope(kpe + t * dr, dr, t, inv, ms, !o->rope_halves);
    }
    for (int t = 0; t < n; t++)
        for (int64_t hd = 0; hd < NH; hd++) {
            const double *qt = q + (t * NH + hd) * qd;
            double mx = -INFINITY, sum = 0;
            for (int i = 0; i <= t; i++) {
                double a = 0;
                for (int64_t d = 0; d < dn; d++) a += qt[d] * kn[(i * NH + hd) * dn + d];
                for (int64_t d = 0; d < dr; d++) a += qt[dn + d] * kpe[i * dr + d];
                s[i] = a * scale;
                mx = fmax(mx, s[i]);
            }
            for (int i = 0; i <= t; i++) sum += (s[i] = exp(s[i] - mx));
            for (int64_t d = 0; d < dv; d++) {
                double a = 0;
                for (int i = 0; i <= t; i++) a += s[i] / sum * v[(i * NH + hd) * dv + d];
                att[(t * NH + hd) * dv + d] = a;
            }
        }
    for (int t = 0; t < n; t++) {
        ref_lin(y, att + t * NH * dv, rm, l, "self_attn.o_proj");
        for (int64_t i = 0; i < H; i++) x[t * H + i] += y[i];
        ref_rmsnorm(h + t * H, x + t * H, H,
                    ref_t(rm, "model.layers.%lld.post_attention_layernorm.weight", l, 0), eps);
        if (fx_dense(o, l)) ref_dense(y, h + t * H, rm, l);
        else ref_moe_deepseek(y, h + t * H, rm, l);
        for (int64_t i = 0; i < H; i++) x[t * H + i] += y[i];
    }
    free(h); free(q); free(kn); free(v); free(kpe); free(att); free(tmp); free(s);
}

/* ---- GLM-4.5 (glm4_moe) and MiniMax-M2 (minimax_m2) ------------------------------ */

/* transformers' apply_rotary_pos_emb with a partial rotary embedding: in each
 * of the n_head heads of D dims, the first rot dims are rotated as
 * rotate_half does (the pairs (i, i + rot/2) at angle pos * theta^(-2i/rot),
 * inv_freq over the rotary dims only), dims rot..D-1 pass unchanged. */
static void ref_rope_partial(double *x, int64_t n_head, int64_t D, int64_t rot, int64_t pos,
                             double theta) {
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t i = 0; i < rot / 2; i++) {
            double a = (double)pos * pow(theta, -2.0 * (double)i / (double)rot);
            double c = cos(a), s = sin(a), x1 = x[h * D + i], x2 = x[h * D + i + rot / 2];
            x[h * D + i] = x1 * c - x2 * s;
            x[h * D + i + rot / 2] = x2 * c + x1 * s;
        }
}

enum { REF_QK_NONE = 0, REF_QK_HEAD = 1, REF_QK_WHOLE = 2 };

/* GQA self-attention of layer l on the normalized inputs h[n][H] into
 * out[n][H]: q/k/v projections (GLM's biases inside ref_lin), q/k RMSNorm
 * per head of D (Glm4MoeAttention with use_qk_norm: the [D] weights on each
 * head) or over the whole projection before the head split
 * (MiniMaxM2Attention: q_norm [NH*D], k_norm [NKV*D]), partial rotary of
 * rot dims, causal softmax attention at D^-0.5, o_proj. */
static void ref_attn_gqa(double *out, const double *h, int n, const ref_model *rm, long long l,
                         int qk, int64_t rot, double eps, double theta) {
    const fx_opts *o = &rm->o;
    const int64_t H = o->hidden, NH = o->n_heads, NKV = o->n_kv_heads, D = o->head_dim;
    double *q = calloc((size_t)(n * NH * D), sizeof(double));
    double *k = calloc((size_t)(n * NKV * D), sizeof(double));
    double *v = calloc((size_t)(n * NKV * D), sizeof(double)), *att = malloc(sizeof(double) * n * NH * D);
    const fx_tensor *qn = qk ? ref_t(rm, "model.layers.%lld.self_attn.q_norm.weight", l, 0) : NULL;
    const fx_tensor *kn = qk ? ref_t(rm, "model.layers.%lld.self_attn.k_norm.weight", l, 0) : NULL;
    for (int t = 0; t < n; t++) {
        double *qt = q + t * NH * D, *kt = k + t * NKV * D;
        ref_lin(qt, h + t * H, rm, l, "self_attn.q_proj");
        ref_lin(kt, h + t * H, rm, l, "self_attn.k_proj");
        ref_lin(v + t * NKV * D, h + t * H, rm, l, "self_attn.v_proj");
        if (qk == REF_QK_WHOLE) {
            ref_rmsnorm(qt, qt, NH * D, qn, eps);
            ref_rmsnorm(kt, kt, NKV * D, kn, eps);
        } else if (qk == REF_QK_HEAD) {
            for (int64_t i = 0; i < NH; i++) ref_rmsnorm(qt + i * D, qt + i * D, D, qn, eps);
            for (int64_t i = 0; i < NKV; i++) ref_rmsnorm(kt + i * D, kt + i * D, D, kn, eps);
        }
        ref_rope_partial(qt, NH, D, rot, t, theta);
        ref_rope_partial(kt, NKV, D, rot, t, theta);
    }
    ref_attend(att, q, k, v, n, o);
    for (int t = 0; t < n; t++) ref_lin(out + t * H, att + t * NH * D, rm, l, "self_attn.o_proj");
    free(q); free(k); free(v); free(att);
}

/* Sigmoid routing with a selection bias, written from transformers'
 * Glm4MoeMoE.route_tokens_to_experts and MiniMaxM2TopKRouter: scores
 * s = sigmoid(logit), choice keys c = s + bias; with n_group > 1 each group's
 * two best keys summed, the topk_group best groups kept and the others'
 * keys set to 0.0 (masked_fill); the top_k keys (ties to the lower id); the
 * weights are the unbiased s, divided by their sum (+ eps) when renorm, then
 * times scale. */
static void ref_route_sigmoid(int64_t E, int64_t K, const double *lg, const double *bias,
                              int64_t n_group, int64_t topk_group, int renorm, double eps,
                              double scale, int64_t *ids, double *w) {
    double *s = malloc(sizeof(double) * E), *c = malloc(sizeof(double) * E), sum = 0;
    char *kept = calloc((size_t)(n_group > 0 ? n_group : 1), 1), *taken = calloc((size_t)E, 1);
    for (int64_t e = 0; e < E; e++) {
        s[e] = 1.0 / (1.0 + exp(-lg[e]));
        c[e] = s[e] + (bias ? bias[e] : 0.0);
    }
    if (n_group > 1) {
        const int64_t gs = E / n_group;
        double *gsum = malloc(sizeof(double) * n_group);
        for (int64_t g = 0; g < n_group; g++) {
            double a = -INFINITY, b = -INFINITY;
            for (int64_t e = g * gs; e < (g + 1) * gs; e++) {
                if (c[e] > a) b = a, a = c[e];
                else if (c[e] > b) b = c[e];
            }
            gsum[g] = a + b;
        }
        for (int64_t j = 0; j < topk_group; j++) {
            int64_t best = -1;
            for (int64_t g = 0; g < n_group; g++)
                if (!kept[g] && (best < 0 || gsum[g] > gsum[best])) best = g;
            kept[best] = 1;
        }
        for (int64_t e = 0; e < E; e++)
            if (!kept[e / gs]) c[e] = 0.0;
        free(gsum);
    }
    for (int64_t j = 0; j < K; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || c[e] > c[best])) best = e;
        taken[best] = 1;
        ids[j] = best;
        w[j] = s[best];
        sum += w[j];
    }
    for (int64_t j = 0; j < K; j++) w[j] = (renorm ? w[j] / (sum + eps) : w[j]) * scale;
    free(s); free(c); free(kept); free(taken);
}

/* The router logits gate . h (transformers: in fp32; here double) into
 * lg[E] and the correction bias (GLM: mlp.gate.e_score_correction_bias,
 * MiniMax-M2: block_sparse_moe.e_score_correction_bias) into bias[E]. */
static void ref_router_sig(double *lg, double *bias, const double *h, const ref_model *rm,
                           long long l) {
    const int glm = rm->o.arch == FX_GLM4_MOE;
    char f[200];
    const fx_tensor *b;
    snprintf(f, sizeof f, "model.layers.%%lld.%s.gate.weight", fx_moe_block(&rm->o));
    ref_lin_float(lg, h, ref_t(rm, f, l, 0));
    b = ref_t(rm, glm ? "model.layers.%lld.mlp.gate.e_score_correction_bias"
                      : "model.layers.%lld.block_sparse_moe.e_score_correction_bias", l, 0);
    for (int64_t e = 0; e < rm->o.n_experts; e++) bias[e] = fx_get(b, e);
}

/* GLM's Glm4MoeMoE (grouped sigmoid routing, norm_topk_prob, times
 * routed_scaling_factor, plus the shared experts ungated) or MiniMax-M2's
 * sparse MoE block (top-k of the biased sigmoid, always renormalized, no
 * groups, no scaling factor, no shared expert). */
static void ref_moe_sig(double *out, const double *h, const ref_model *rm, long long l) {
    const fx_opts *o = &rm->o;
    const int glm = o->arch == FX_GLM4_MOE;
    const int64_t H = o->hidden, E = o->n_experts, K = o->top_k;
    double *lg = malloc(sizeof(double) * E), *bias = malloc(sizeof(double) * E);
    double *y = malloc(sizeof(double) * H), w[64];
    int64_t ids[64];
    ref_router_sig(lg, bias, h, rm, l);
    if (glm) ref_route_sigmoid(E, K, lg, bias, o->n_group, o->topk_group, !o->no_renorm, 1e-20,
                               o->routed_scale, ids, w);
    else ref_route_sigmoid(E, K, lg, bias, 1, 1, 1, 0.0, 1.0, ids, w);
    memset(out, 0, sizeof(double) * H);
    for (int64_t j = 0; j < K; j++) {
        ref_expert(y, h, rm, l, ids[j]);
        for (int64_t i = 0; i < H; i++) out[i] += w[j] * y[i];
    }
    if (glm && o->n_shared > 0) {
        static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
        char p[3][200];
        for (int i = 0; i < 3; i++)
            snprintf(p[i], sizeof p[i], "model.layers.%lld.mlp.shared_experts.%s", l, proj[i]);
        ref_swiglu(y, h, rm, p[0], p[1], p[2], o->n_shared * o->moe_inter);
        for (int64_t i = 0; i < H; i++) out[i] += y[i];
    }
    free(lg); free(bias); free(y);
}

/* One GLM-4.5 / MiniMax-M2 decoder layer over x[n][H] at positions 0..n-1:
 * pre-norm attention, then the dense MLP (GLM's first first_k_dense_replace
 * layers) or the MoE block, residuals around both. */
static void ref_layer_sig(double *x, int n, const ref_model *rm, long long l) {
    const fx_opts *o = &rm->o;
    const int64_t H = o->hidden;
    const double eps = fx_eps(o);
    const int qk = o->arch == FX_MINIMAX_M2 ? REF_QK_WHOLE : o->no_qk_norm ? REF_QK_NONE : REF_QK_HEAD;
    double *h = malloc(sizeof(double) * n * H), *y = malloc(sizeof(double) * n * H);
    for (int t = 0; t < n; t++)
        ref_rmsnorm(h + t * H, x + t * H, H, ref_t(rm, "model.layers.%lld.input_layernorm.weight", l, 0), eps);
    ref_attn_gqa(y, h, n, rm, l, qk, fx_rot_dim(o), eps, fx_theta(o));
    for (int t = 0; t < n; t++) {
        for (int64_t i = 0; i < H; i++) x[t * H + i] += y[t * H + i];
        ref_rmsnorm(h, x + t * H, H, ref_t(rm, "model.layers.%lld.post_attention_layernorm.weight", l, 0), eps);
        if (fx_dense(o, l)) ref_dense(y, h, rm, l);
        else ref_moe_sig(y, h, rm, l);
        for (int64_t i = 0; i < H; i++) x[t * H + i] += y[i];
    }
    free(h);
    free(y);
}

#include "hybrid_ref.h"

/* --lm-head int8 (SEMANTICS §6d): each float row of head [V][H] quantized as
 * §4 quantizes a row (fp32: scale amax / 127, codes rint(w / scale) clamped
 * to ±127), the row h likewise, the exact integer sum times both scales. */
static void ref_head_int8(double *y, const double *h, const fx_tensor *head) {
    const int64_t V = head->shape[0], H = head->shape[1];
    int32_t *q = malloc(sizeof(int32_t) * (size_t)H);
    float amax = 0.0f, sx;
    for (int64_t j = 0; j < H; j++) amax = fmaxf(amax, fabsf((float)h[j]));
    sx = amax / 127.0f;
    for (int64_t j = 0; j < H; j++) {
        const float v = sx > 0.0f ? rintf((float)h[j] / sx) : 0.0f;
        q[j] = (int32_t)fminf(fmaxf(v, -127.0f), 127.0f);
    }
    for (int64_t i = 0; i < V; i++) {
        float wmax = 0.0f, sw;
        int64_t acc = 0;
        for (int64_t j = 0; j < H; j++) wmax = fmaxf(wmax, fabsf((float)fx_get(head, i * H + j)));
        sw = wmax / 127.0f;
        for (int64_t j = 0; j < H; j++) {
            const float c = sw > 0.0f ? rintf((float)fx_get(head, i * H + j) / sw) : 0.0f;
            acc += (int64_t)q[j] * (int64_t)fminf(fmaxf(c, -127.0f), 127.0f);
        }
        y[i] = (double)acc * (double)sx * (double)sw;
    }
    free(q);
}

/* logits[n][vocab] for the tokens ids[0..n) at positions 0..n-1. */
static void ref_forward(const ref_model *rm, const int32_t *ids, int n, double *logits) {
    const fx_opts *o = &rm->o;
    if (fx_hybrid(o)) { /* Qwen3-Next, Qwen3.5-MoE: hybrid_ref.h */
        hy_ref_forward(rm, ids, n, logits);
        return;
    }
    const int64_t H = o->hidden, V = o->vocab;
    const fx_tensor *emb = ref_t(rm, "model.embed_tokens.weight", 0, 0);
    const fx_tensor *head = o->tie ? emb : ref_t(rm, "lm_head.weight", 0, 0);
    double *x = malloc(sizeof(double) * n * H), *h = malloc(sizeof(double) * H);
    for (int t = 0; t < n; t++)
        for (int64_t i = 0; i < H; i++) x[t * H + i] = fx_get(emb, (int64_t)ids[t] * H + i);
    for (long long l = 0; l < o->n_layers; l++) {
        if (fx_deepseek(o)) ref_layer_mla(x, n, rm, l);
        else if (fx_glm_mm(o)) ref_layer_sig(x, n, rm, l);
        else ref_layer(x, n, rm, l);
    }
    for (int t = 0; t < n; t++) {
        ref_rmsnorm(h, x + t * H, H, ref_t(rm, "model.norm.weight", 0, 0),
                    fx_deepseek(o) ? o->ds_eps : fx_glm_mm(o) ? fx_eps(o) : o->arch == FX_MIXTRAL ? 1e-5 : 1e-6);
        if (rm->lm_head_int8 && !(o->lm_head_w8a8 && !o->tie)) {
            ref_head_int8(logits + t * V, h, head);
            continue;
        }
        if (o->lm_head_w8a8 && !o->tie) { /* always quantized: float_experts is the experts' */
            ref_dynamic(logits + t * V, h, head, ref_t(rm, "lm_head.weight_scale", 0, 0),
                        ref_t(rm, "lm_head.weight_offset", 0, 0), 0);
            continue;
        }
        for (int64_t j = 0; j < V; j++) {
            double a = 0;
            for (int64_t i = 0; i < H; i++) a += h[i] * fx_get(head, j * H + i);
            logits[t * V + j] = a;
        }
    }
    free(x);
    free(h);
}

#endif
