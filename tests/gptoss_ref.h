/*
 * gptoss_ref.h — a double-precision gpt-oss forward written for the tests
 * from transformers' modeling_gpt_oss.py, sharing no code with src/: it reads
 * a made folder's tensors through the public safetensors API, dequantizes the
 * MXFP4 experts itself (the OCP e2m1 table, e8m0 2^(s - 127), low nibble
 * first, gate_up rows 2i / 2i + 1 = gate / up), and runs the whole model over
 * one sequence at positions 0..T-1: RMSNorm, q/k/v/o with biases, rotate_half
 * with YaRN (truncate false: the correction range unrounded; cos and sin x
 * 0.1 ln(factor) + 1), softmax over the window (sliding layers) with the
 * head's sink as one more logit, the router's bias, softmax over the top-k
 * logits, the clamped SwiGLU with biases. Include after test.h.
 */
#ifndef MOE8_GPTOSS_REF_H
#define MOE8_GPTOSS_REF_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe8.h"
#include "moe8_safetensors.h"

typedef struct {
    int V, H, NH, NKV, D, E, K, I, L, window;
    double eps, theta, yarn_factor, beta_fast, beta_slow, orig, limit;
    int sliding[64];
    int no_window;           /* ignore the window (to show it matters) */
    moe8_st *st;
} gref;

static double *gref_tensor(const gref *g, const char *name, int64_t n) {
    const moe8_tensor *t = moe8_st_find(g->st, name);
    double *d = malloc(sizeof(double) * (size_t)n);
    float *f = malloc(sizeof(float) * (size_t)n);
    if (!t || t->n_elements != n || moe8_convert_to_f32(f, t->data, t->dtype, (size_t)n, NULL)) {
        fprintf(stderr, "gref: tensor %s missing or of %lld elements (want %lld)\n", name,
                t ? (long long)t->n_elements : -1LL, (long long)n);
        exit(2);
    }
    for (int64_t i = 0; i < n; i++) d[i] = f[i];
    free(f);
    return d;
}

/* MXFP4 row r of tensor `base`_blocks / _scales with `cols` columns, decoded. */
static void gref_mx_row(const gref *g, const char *base, int64_t row, int cols, double *out) {
    static const double e2m1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
    char n[200];
    snprintf(n, sizeof n, "%s_blocks", base);
    const uint8_t *b = moe8_st_find(g->st, n)->data;
    snprintf(n, sizeof n, "%s_scales", base);
    const uint8_t *s = moe8_st_find(g->st, n)->data;
    for (int j = 0; j < cols; j++) {
        const uint8_t byte = b[row * (cols / 2) + j / 2];
        out[j] = ldexp(e2m1[j % 2 ? byte >> 4 : byte & 15], (int)s[row * (cols / 32) + j / 32] - 127);
    }
}

static void gref_rms(double *y, const double *x, const double *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

/* y[n] = W[n][k] x + b */
static void gref_lin(double *y, const double *W, const double *b, const double *x, int n, int k) {
    for (int i = 0; i < n; i++) {
        double s = b ? b[i] : 0;
        for (int j = 0; j < k; j++) s += W[(size_t)i * k + j] * x[j];
        y[i] = s;
    }
}

/* transformers' _compute_yarn_parameters (truncate false) -> inv_freq[D/2], returns the
 * attention factor. */
static double gref_yarn(const gref *g, double *inv) {
    const int R = g->D, half = R / 2;
    if (!(g->yarn_factor > 0)) {
        for (int i = 0; i < half; i++) inv[i] = pow(g->theta, -2.0 * i / R);
        return 1.0;
    }
    const double lo0 = R * log(g->orig / (g->beta_fast * 2 * M_PI)) / (2 * log(g->theta));
    const double hi0 = R * log(g->orig / (g->beta_slow * 2 * M_PI)) / (2 * log(g->theta));
    double lo = fmax(lo0, 0), hi = fmin(hi0, R - 1);
    if (lo == hi) hi += 0.001;
    for (int i = 0; i < half; i++) {
        const double pf = pow(g->theta, 2.0 * i / R);
        const double extra = 1.0 / pf, inter = 1.0 / (g->yarn_factor * pf);
        const double ramp = fmin(fmax((i - lo) / (hi - lo), 0), 1);
        const double ef = 1 - ramp;
        inv[i] = inter * (1 - ef) + extra * ef;
    }
    return 0.1 * log(g->yarn_factor) + 1.0;
}

static void gref_rope(double *x, int n_head, int D, int pos, const double *inv, double af) {
    for (int h = 0; h < n_head; h++) {
        double *v = x + (size_t)h * D;
        for (int i = 0; i < D / 2; i++) {
            const double c = cos(pos * inv[i]) * af, s = sin(pos * inv[i]) * af;
            const double a = v[i], b = v[i + D / 2];
            v[i] = a * c - b * s;
            v[i + D / 2] = b * c + a * s;
        }
    }
}

/* logits[T][V] of tokens[T]. */
static void gref_forward(gref *g, const int32_t *tok, int T, double *logits) {
    const int H = g->H, NH = g->NH, NKV = g->NKV, D = g->D, E = g->E, I = g->I, V = g->V;
    char n[200];
    double inv[512];
    const double af = gref_yarn(g, inv);
    double *x = calloc((size_t)T * H, sizeof(double)), *h = malloc(sizeof(double) * H);
    double *q = malloc(sizeof(double) * (size_t)T * NH * D), *k = malloc(sizeof(double) * (size_t)T * NKV * D);
    double *v = malloc(sizeof(double) * (size_t)T * NKV * D), *att = malloc(sizeof(double) * NH * D);
    double *o = malloc(sizeof(double) * H), *sc = malloc(sizeof(double) * (T + 1));
    double *emb = gref_tensor(g, "model.embed_tokens.weight", (int64_t)V * H);
    for (int t = 0; t < T; t++) memcpy(x + (size_t)t * H, emb + (size_t)tok[t] * H, sizeof(double) * H);
    free(emb);
    double *gu = malloc(sizeof(double) * 2 * I * H), *dn = malloc(sizeof(double) * H * I);
    for (int l = 0; l < g->L; l++) {
#define T_(suf, cnt) (snprintf(n, sizeof n, "model.layers.%d.%s", l, suf), gref_tensor(g, n, cnt))
        double *an = T_("input_layernorm.weight", H), *fn = T_("post_attention_layernorm.weight", H);
        double *Wq = T_("self_attn.q_proj.weight", (int64_t)NH * D * H), *bq = T_("self_attn.q_proj.bias", NH * D);
        double *Wk = T_("self_attn.k_proj.weight", (int64_t)NKV * D * H), *bk = T_("self_attn.k_proj.bias", NKV * D);
        double *Wv = T_("self_attn.v_proj.weight", (int64_t)NKV * D * H), *bv = T_("self_attn.v_proj.bias", NKV * D);
        double *Wo = T_("self_attn.o_proj.weight", (int64_t)H * NH * D), *bo = T_("self_attn.o_proj.bias", H);
        double *sk = T_("self_attn.sinks", NH);
        double *Wr = T_("mlp.router.weight", (int64_t)E * H), *br = T_("mlp.router.bias", E);
        double *bgu = T_("mlp.experts.gate_up_proj_bias", (int64_t)E * 2 * I);
        double *bdn = T_("mlp.experts.down_proj_bias", (int64_t)E * H);
        const int win = g->sliding[l] && !g->no_window ? g->window : 0;
        for (int t = 0; t < T; t++) {
            gref_rms(h, x + (size_t)t * H, an, H, g->eps);
            gref_lin(q + (size_t)t * NH * D, Wq, bq, h, NH * D, H);
            gref_lin(k + (size_t)t * NKV * D, Wk, bk, h, NKV * D, H);
            gref_lin(v + (size_t)t * NKV * D, Wv, bv, h, NKV * D, H);
            gref_rope(q + (size_t)t * NH * D, NH, D, t, inv, af);
            gref_rope(k + (size_t)t * NKV * D, NKV, D, t, inv, af);
        }
        for (int t = 0; t < T; t++) {
            const int lo = win && t - win + 1 > 0 ? t - win + 1 : 0;
            for (int hh = 0; hh < NH; hh++) {
                const int kv = hh / (NH / NKV);
                double mx = sk[hh], den = 0;
                for (int p = lo; p <= t; p++) {
                    double s = 0;
                    for (int d = 0; d < D; d++)
                        s += q[((size_t)t * NH + hh) * D + d] * k[((size_t)p * NKV + kv) * D + d];
                    sc[p] = s / sqrt((double)D);
                    mx = fmax(mx, sc[p]);
                }
                den = exp(sk[hh] - mx);
                for (int p = lo; p <= t; p++) den += (sc[p] = exp(sc[p] - mx));
                for (int d = 0; d < D; d++) {
                    double a = 0;
                    for (int p = lo; p <= t; p++) a += sc[p] * v[((size_t)p * NKV + kv) * D + d];
                    att[hh * D + d] = a / den;
                }
            }
            gref_lin(o, Wo, bo, att, H, NH * D);
            for (int j = 0; j < H; j++) x[(size_t)t * H + j] += o[j];
        }
        for (int t = 0; t < T; t++) { /* the MoE block */
            double rl[256], w[8];
            int id[8];
            gref_rms(h, x + (size_t)t * H, fn, H, g->eps);
            gref_lin(rl, Wr, br, h, E, H);
            for (int j = 0; j < g->K; j++) { /* top-k, ties to the lower id */
                id[j] = -1;
                for (int e = 0; e < E; e++) {
                    int used = 0;
                    for (int i = 0; i < j; i++) used |= id[i] == e;
                    if (!used && (id[j] < 0 || rl[e] > rl[id[j]])) id[j] = e;
                }
            }
            double mx = rl[id[0]], sum = 0;
            for (int j = 0; j < g->K; j++) sum += (w[j] = exp(rl[id[j]] - mx));
            for (int j = 0; j < g->K; j++) w[j] /= sum;
            for (int j = 0; j < g->K; j++) {
                const int e = id[j];
                char base[160];
                snprintf(base, sizeof base, "model.layers.%d.mlp.experts.gate_up_proj", l);
                for (int r = 0; r < 2 * I; r++) gref_mx_row(g, base, (int64_t)e * 2 * I + r, H, gu + (size_t)r * H);
                snprintf(base, sizeof base, "model.layers.%d.mlp.experts.down_proj", l);
                for (int r = 0; r < H; r++) gref_mx_row(g, base, (int64_t)e * H + r, I, dn + (size_t)r * I);
                double a[4096];
                for (int i = 0; i < I; i++) {
                    double gg = bgu[(size_t)e * 2 * I + 2 * i], uu = bgu[(size_t)e * 2 * I + 2 * i + 1];
                    for (int c = 0; c < H; c++)
                        gg += gu[(size_t)(2 * i) * H + c] * h[c], uu += gu[(size_t)(2 * i + 1) * H + c] * h[c];
                    gg = fmin(gg, g->limit);
                    uu = fmin(fmax(uu, -g->limit), g->limit);
                    a[i] = (uu + 1) * gg / (1 + exp(-1.702 * gg));
                }
                for (int c = 0; c < H; c++) {
                    double y = bdn[(size_t)e * H + c];
                    for (int i = 0; i < I; i++) y += dn[(size_t)c * I + i] * a[i];
                    x[(size_t)t * H + c] += w[j] * y;
                }
            }
        }
        free(an), free(fn), free(Wq), free(bq), free(Wk), free(bk), free(Wv), free(bv);
        free(Wo), free(bo), free(sk), free(Wr), free(br), free(bgu), free(bdn);
#undef T_
    }
    double *fw = gref_tensor(g, "model.norm.weight", H), *lm = gref_tensor(g, "lm_head.weight", (int64_t)V * H);
    for (int t = 0; t < T; t++) {
        gref_rms(h, x + (size_t)t * H, fw, H, g->eps);
        gref_lin(logits + (size_t)t * V, lm, NULL, h, V, H);
    }
    free(fw), free(lm), free(x), free(h), free(q), free(k), free(v), free(att), free(o), free(sc);
    free(gu), free(dn);
}

#endif
