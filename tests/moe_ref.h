/*
 * moe_ref.h — an independent reference of the MoE layer (SEMANTICS §1-§4) for
 * the tests. Shares no code with src/: plain loops over the checkpoint
 * layout ([out][in] weights, per-expert arrays), no packing, no threads.
 *
 * Precision: activation codes are computed in fp32 exactly as SEMANTICS §4 writes
 * them; from the int32 accumulator on everything is double. Routing is double
 * (scores ranked exactly: by logit on the plain path).
 */
#ifndef MOE8_MOE_REF_H
#define MOE8_MOE_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- dtype decoding (independent of src/io/dtype.c) ---------------------- */

static inline double ref_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline double ref_f16(uint16_t b) {
    int sign = b >> 15, ex = (b >> 10) & 31, man = b & 1023;
    double v;
    if (ex == 0) v = ldexp((double)man, -24);
    else if (ex == 31) v = man ? NAN : INFINITY;
    else v = ldexp((double)(man + 1024), ex - 25);
    return sign ? -v : v;
}

/* ---- SEMANTICS §4 per-row quantization, fp32 ---------------------------------- */

static inline void ref_quant_row(const float *x, int k, int8_t *q, float *sx, int32_t *sum) {
    float amax = 0.0f;
    int32_t s = 0;
    for (int i = 0; i < k; i++) {
        float a = x[i] < 0 ? -x[i] : x[i];
        if (a > amax) amax = a;
    }
    *sx = amax / 127.0f;
    for (int i = 0; i < k; i++) {
        float v = *sx == 0.0f ? 0.0f : rintf(x[i] / *sx);
        if (v > 127.0f) v = 127.0f;
        if (v < -127.0f) v = -127.0f;
        q[i] = (int8_t)v;
        s += q[i];
    }
    *sum = s;
}

/* ---- routing (SEMANTICS §2) ---------------------------------------------------- */

typedef struct {
    int top_k, renorm, sigmoid, grouped, n_group, topk_group, top2;
    const float *bias;  /* [E] or NULL (grouped only) */
    double scale;       /* routed_scaling_factor */
} ref_router;

/* Index of the best of v[0..n) not yet taken (descending, ties -> lower index). */
static inline int ref_argbest(const double *v, const char *taken, int n) {
    int b = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (b < 0 || v[i] > v[b])) b = i;
    return b;
}

static inline void ref_route_token(const float *l, int E, const ref_router *p, int32_t *ids,
                                   double *w) {
    double *s = malloc(sizeof(double) * E), *key = malloc(sizeof(double) * E);
    char *taken = calloc((size_t)E, 1);
    double mx = -INFINITY, sum = 0.0;
    for (int e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++) {
        s[e] = p->sigmoid ? 1.0 / (1.0 + exp(-(double)l[e])) : exp((double)l[e] - mx);
        sum += s[e];
    }
    if (!p->sigmoid)
        for (int e = 0; e < E; e++) s[e] /= sum;
    for (int e = 0; e < E; e++) key[e] = p->grouped ? s[e] + (p->bias ? p->bias[e] : 0.0) : l[e];
    if (p->grouped) {
        int G = p->n_group, gs = E / G;
        double *gscore = malloc(sizeof(double) * G);
        char *gtaken = calloc((size_t)G, 1);
        for (int g = 0; g < G; g++) {
            double a = -INFINITY, b = -INFINITY;
            for (int e = g * gs; e < (g + 1) * gs; e++) {
                if (key[e] > a) { b = a; a = key[e]; }
                else if (key[e] > b) b = key[e];
            }
            gscore[g] = p->top2 ? a + b : a;
        }
        for (int i = 0; i < p->topk_group; i++) gtaken[ref_argbest(gscore, gtaken, G)] = 1;
        for (int e = 0; e < E; e++) taken[e] = !gtaken[e / gs]; /* dropped: never selectable */
        free(gscore);
        free(gtaken);
    }
    for (int j = 0; j < p->top_k; j++) {
        int b = ref_argbest(key, taken, E);
        ids[j] = b;
        taken[b] = 1;
        w[j] = s[b];
    }
    if (p->renorm) {
        double t = 0.0;
        for (int j = 0; j < p->top_k; j++) t += w[j];
        if (t > 0.0)
            for (int j = 0; j < p->top_k; j++) w[j] /= t;
    }
    for (int j = 0; j < p->top_k; j++) w[j] *= p->scale;
    free(s);
    free(key);
    free(taken);
}

/* ---- experts --------------------------------------------------------------- */

/* One expert in checkpoint layout: gate [I][H], up [I][H], down [H][I].
 * Quantized: q + s (+ o); float: f. Indexed [0]=gate, [1]=up, [2]=down. */
typedef struct {
    const int8_t *q[3];
    const double *s[3];
    const double *o[3];  /* NULL = 0 */
    const double *f[3];
} ref_expert;

typedef struct {
    int E, H, I;          /* full checkpoint shape */
    int i0, i1;           /* TP slice of I */
    int first, last;      /* local experts */
    int top_k;
    const ref_expert *ex; /* [E] */
} ref_layer;

/* int64 accumulator of codes x [k] with row n of a weight, columns [c0, c0+k). */
static inline int64_t ref_dot_q(const int8_t *x, const int8_t *W, int ld, int n, int c0, int k) {
    int64_t a = 0;
    for (int i = 0; i < k; i++) a += (int64_t)x[i] * W[(size_t)n * ld + c0 + i];
    return a;
}

/* Dequantized weight element, double: S*(Wq+O), or the float weight. */
static inline double ref_w(const ref_expert *x, int proj, int ld, int n, int c) {
    if (x->f[proj]) return x->f[proj][(size_t)n * ld + c];
    return x->s[proj][n] * ((double)x->q[proj][(size_t)n * ld + c] + (x->o[proj] ? x->o[proj][n] : 0.0));
}

/* A-code provider: codes of A for (token t, slot j), as the layer made them
 * ("the same quantized operands"); NULL = quantize the reference's own A. */
typedef const int8_t *(*ref_a_codes_fn)(void *user, int t, int j, float *sa, int32_t *asum);

/* Quantized layer (SEMANTICS §1, §4): out [T][H] (double) given routing ids/w.
 * *a_mismatch counts A codes of the provider that differ from the
 * reference's own codes, *a_maxdiff the largest difference. */
static inline void ref_moe_quant(const ref_layer *L, const float *h, int T, const int32_t *ids,
                                 const double *w, ref_a_codes_fn acodes, void *user, double *out,
                                 long *a_mismatch, int *a_maxdiff) {
    const int H = L->H, I = L->I, IL = L->i1 - L->i0, K = L->top_k;
    int8_t *xq = malloc((size_t)H), *aq = malloc((size_t)IL);
    float *af = malloc(sizeof(float) * IL);
    double *y = malloc(sizeof(double) * H);
    if (a_mismatch) *a_mismatch = 0;
    if (a_maxdiff) *a_maxdiff = 0;
    for (int t = 0; t < T; t++) {
        float sx;
        int32_t xs;
        ref_quant_row(h + (size_t)t * H, H, xq, &sx, &xs);
        for (int c = 0; c < H; c++) out[(size_t)t * H + c] = 0.0;
        for (int j = 0; j < K; j++) {
            const int e = ids[t * K + j];
            if (e < L->first || e >= L->last) continue;
            const ref_expert *x = &L->ex[e];
            for (int i = 0; i < IL; i++) {
                int n = L->i0 + i;
                double og = x->o[0] ? x->o[0][n] : 0.0, ou = x->o[1] ? x->o[1][n] : 0.0;
                double g = ((double)ref_dot_q(xq, x->q[0], H, n, 0, H) + og * xs) * sx * x->s[0][n];
                double u = ((double)ref_dot_q(xq, x->q[1], H, n, 0, H) + ou * xs) * sx * x->s[1][n];
                af[i] = (float)(g / (1.0 + exp(-g)) * u);
            }
            float sa;
            int32_t as;
            ref_quant_row(af, IL, aq, &sa, &as);
            const int8_t *use = aq;
            if (acodes) {
                float sa2;
                int32_t as2;
                use = acodes(user, t, j, &sa2, &as2);
                for (int i = 0; i < IL; i++) {
                    int d = abs((int)use[i] - (int)aq[i]);
                    if (d && a_mismatch) (*a_mismatch)++;
                    if (a_maxdiff && d > *a_maxdiff) *a_maxdiff = d;
                }
                sa = sa2;
                as = as2;
            }
            for (int n = 0; n < H; n++) {
                double od = x->o[2] ? x->o[2][n] : 0.0;
                y[n] = ((double)ref_dot_q(use, x->q[2], I, n, L->i0, IL) + od * as) * sa *
                       x->s[2][n];
                out[(size_t)t * H + n] += w[t * K + j] * y[n];
            }
        }
    }
    free(xq);
    free(aq);
    free(af);
    free(y);
}

/* Unquantized layer in double: dequantized (or float) weights, float
 * activations, no activation quantization. */
static inline void ref_moe_float(const ref_layer *L, const float *h, int T, const int32_t *ids,
                                 const double *w, double *out) {
    const int H = L->H, I = L->I, IL = L->i1 - L->i0, K = L->top_k;
    double *a = malloc(sizeof(double) * IL);
    for (int t = 0; t < T; t++) {
        const float *x = h + (size_t)t * H;
        for (int c = 0; c < H; c++) out[(size_t)t * H + c] = 0.0;
        for (int j = 0; j < K; j++) {
            const int e = ids[t * K + j];
            if (e < L->first || e >= L->last) continue;
            const ref_expert *ex = &L->ex[e];
            for (int i = 0; i < IL; i++) {
                double g = 0.0, u = 0.0;
                for (int c = 0; c < H; c++) {
                    g += ref_w(ex, 0, H, L->i0 + i, c) * x[c];
                    u += ref_w(ex, 1, H, L->i0 + i, c) * x[c];
                }
                a[i] = g / (1.0 + exp(-g)) * u;
            }
            for (int n = 0; n < H; n++) {
                double y = 0.0;
                for (int i = 0; i < IL; i++) y += ref_w(ex, 2, I, n, L->i0 + i) * a[i];
                out[(size_t)t * H + n] += w[t * K + j] * y;
            }
        }
    }
    free(a);
}

/* max|a-b| / max|b| (0 when both are 0). */
static inline double ref_rel_max(const float *a, const double *b, size_t n) {
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = e; /* NaN propagates */
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return m > 0.0 ? d / m : d;
}

/* ||a-b|| / ||b||. */
static inline double ref_rel_l2(const float *a, const double *b, size_t n) {
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        m += b[i] * b[i];
    }
    return m > 0.0 ? sqrt(d / m) : sqrt(d);
}

#endif
