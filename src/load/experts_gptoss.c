/*
 * experts_gptoss.c — gpt_oss's stacked experts (arch/gpt_oss.c; SEMANTICS
 * §6e), bound at load with their biases (fp32, deinterleaved, owned by the
 * model). Two forms:
 *
 *   MXFP4 (as released)  gate_up_proj_blocks U8 [E][2I][H/32][16], _scales
 *                        U8 [E][2I][H/32]; down_proj_blocks [E][H][I/32][16],
 *                        _scales [E][H][I/32]: rows are outputs; gate_up's
 *                        row 2i is gate i, row 2i + 1 up i. Bound as
 *                        W8A8_DYNAMIC experts without int8 tensors: when the
 *                        MoE layer is built (moe_build.c) each local expert
 *                        is decoded (io/mxfp4.c) and quantized per row as
 *                        moe8 quantize does (amax / 127, round to even: the
 *                        kernels' reference quant_rows), packed, and the
 *                        int8 freed — one layer at a time, so the model is
 *                        never resident as int8 beside its packed copy (the
 *                        packed cache then keeps it, with the row scales:
 *                        a later load reads both from it and decodes
 *                        nothing, moe8_gptoss_experts_cached). With float experts
 *                        (dequantize) the exact decoded values are used,
 *                        fp32, owned by the layer.
 *   stacked float        gate_up_proj [E][H][2I] (inputs first: column 2i
 *                        gate i, 2i + 1 up i), down_proj [E][I][H]: written
 *                        out at load per expert, transposed, in their dtype,
 *                        and bound as FLOAT linears
 *
 * gate_up_proj_bias [E][2I] and down_proj_bias [E][H] (float) become fp32
 * per-expert biases (deinterleaved). A scale above 252 (255 is NaN; 253 and
 * 254 overflow fp32 for |code| = 6) is refused naming the tensor and index.
 *
 * Does not: quantize (moe8 quantize writes per-expert W8A8 from these), or
 * keep the mapped stacked tensors resident (their pages are released once
 * copied).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/mxfp4.h"
#include "kernels/kernels.h"
#include "load/model.h"

/* The stacked tensors of layer l: MXFP4 (*blocks set) or float. */
typedef struct {
    const moe8_tensor *gu_b, *gu_s, *dn_b, *dn_s; /* MXFP4 */
    const moe8_tensor *gu, *dn;                   /* float */
    const moe8_tensor *gu_bias, *dn_bias;
} stacked;

/* One layer's experts. */
struct moe8_gptoss_layer {
    stacked s;               /* its source tensors */
    void *w;                 /* float form: per expert gate [I][H], up [I][H], down [H][I] of
                              * the source dtype; NULL for MXFP4 (converted when built) */
    float *b;                /* per expert: gate [I], up [I], down [H] */
    moe8_tensor *t;          /* per expert: gate, up, down, their biases */
};

static moe8_status shape_err(const moe8_model *m, const moe8_tensor *t, const char *want,
                             moe8_error *err) {
    char got[160] = "[";
    for (int i = 0; i < t->n_dims; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "",
                 (long long)t->shape[i]);
    strcat(got, "]");
    return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': expected %s, found %s %s",
                     m->dir, t->name, want, moe8_dtype_name(t->dtype), got);
}

static int is_float(moe8_dtype dt) {
    return dt == MOE8_DT_BF16 || dt == MOE8_DT_F16 || dt == MOE8_DT_F32;
}

/* Tensor `name` with shape d[n] (and U8, or a float dtype). */
static moe8_status want(const moe8_model *m, const char *name, int u8, int n, const int64_t *d,
                        const moe8_tensor **out, moe8_error *err) {
    const moe8_tensor *t = moe8_st_find(m->st, name);
    char w[160];
    int ok;
    if (!t) return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s' missing", m->dir, name);
    ok = (u8 ? t->dtype == MOE8_DT_U8 : is_float(t->dtype)) && t->n_dims == n;
    for (int i = 0; ok && i < n; i++) ok = t->shape[i] == d[i];
    if (!ok) {
        snprintf(w, sizeof w, "%s [", u8 ? "U8" : "BF16, F16 or F32");
        for (int i = 0; i < n; i++)
            snprintf(w + strlen(w), sizeof w - strlen(w), "%s%lld", i ? ", " : "", (long long)d[i]);
        strcat(w, "]");
        return shape_err(m, t, w, err);
    }
    *out = t;
    return MOE8_OK;
}

/* Every e8m0 byte of t at most MOE8_MXFP4_MAX_SCALE. */
static moe8_status scales_ok(const moe8_model *m, const moe8_tensor *t, moe8_error *err) {
    const uint8_t *s = t->data;
    for (int64_t i = 0; i < t->n_elements; i++)
        if (s[i] > MOE8_MXFP4_MAX_SCALE)
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': e8m0 scale %u at "
                             "element %lld (above %d: NaN or past fp32)", m->dir, t->name,
                             (unsigned)s[i], (long long)i, MOE8_MXFP4_MAX_SCALE);
    return MOE8_OK;
}

static moe8_status find_stacked(const moe8_model *m, int64_t l, stacked *s, moe8_error *err) {
    const int64_t E = m->cfg.num_experts, H = m->cfg.hidden_size, I = m->cfg.moe_intermediate_size;
    char gu[200], dn[200], n[240];
    moe8_status st;
    memset(s, 0, sizeof *s);
    snprintf(gu, sizeof gu, m->arch->stacked_gate_up, (long long)l);
    snprintf(dn, sizeof dn, m->arch->stacked_down, (long long)l);
    snprintf(n, sizeof n, "%s_blocks", gu);
    if (moe8_st_find(m->st, n)) {
        const int64_t gb[4] = {E, 2 * I, H / 32, 16}, db[4] = {E, H, I / 32, 16};
        if ((st = want(m, n, 1, 4, gb, &s->gu_b, err))) return st;
        snprintf(n, sizeof n, "%s_scales", gu);
        if ((st = want(m, n, 1, 3, gb, &s->gu_s, err)) || (st = scales_ok(m, s->gu_s, err)))
            return st;
        snprintf(n, sizeof n, "%s_blocks", dn);
        if ((st = want(m, n, 1, 4, db, &s->dn_b, err))) return st;
        snprintf(n, sizeof n, "%s_scales", dn);
        if ((st = want(m, n, 1, 3, db, &s->dn_s, err)) || (st = scales_ok(m, s->dn_s, err)))
            return st;
    } else {
        const int64_t g[3] = {E, H, 2 * I}, d[3] = {E, I, H};
        if ((st = want(m, gu, 0, 3, g, &s->gu, err)) || (st = want(m, dn, 0, 3, d, &s->dn, err)))
            return st;
    }
    const int64_t gbias[2] = {E, 2 * I}, dbias[2] = {E, H};
    snprintf(n, sizeof n, "%s_bias", gu);
    if ((st = want(m, n, 0, 2, gbias, &s->gu_bias, err))) return st;
    snprintf(n, sizeof n, "%s_bias", dn);
    return want(m, n, 0, 2, dbias, &s->dn_bias, err);
}

/* t = a [rows][cols] tensor of dt over data, named after src. */
static void view(moe8_tensor *t, const moe8_tensor *src, moe8_dtype dt, int64_t rows,
                 int64_t cols, const void *data) {
    memset(t, 0, sizeof *t);
    t->name = src->name;
    t->dtype = dt;
    t->n_dims = cols > 0 ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols > 0 ? cols : 0;
    t->n_elements = rows * (cols > 0 ? cols : 1);
    t->n_bytes = (size_t)t->n_elements * moe8_dtype_size(dt);
    t->data = data;
    t->file_index = -1; /* not in the map: moe8_st_release leaves it alone */
}

/* Expert e of s into its weights w (gate, up, down of dt) and biases b. */
static void write_expert(const stacked *s, int64_t e, int64_t H, int64_t I, moe8_dtype dt,
                         char *w, float *b) {
    const size_t es = moe8_dtype_size(dt), gsz = (size_t)(I * H) * es;
    if (w) { /* [H][2I] -> gate, up [I][H]; [I][H] -> down [H][I]: element copies */
        const char *g = (const char *)s->gu->data + (size_t)(e * H * 2 * I) * es;
        const char *d = (const char *)s->dn->data + (size_t)(e * I * H) * es;
        for (int64_t h = 0; h < H; h++)
            for (int64_t c = 0; c < 2 * I; c++)
                memcpy(w + (c % 2 ? gsz : 0) + (size_t)((c / 2) * H + h) * es,
                       g + (size_t)(h * 2 * I + c) * es, es);
        for (int64_t i = 0; i < I; i++)
            for (int64_t h = 0; h < H; h++)
                memcpy(w + 2 * gsz + (size_t)(h * I + i) * es, d + (size_t)(i * H + h) * es, es);
    }
    for (int64_t c = 0; c < 2 * I; c++)
        b[(c % 2) * I + c / 2] = moe8_tensor_f32_at(s->gu_bias, e * 2 * I + c);
    for (int64_t h = 0; h < H; h++) b[2 * I + h] = moe8_tensor_f32_at(s->dn_bias, e * H + h);
}

static void release_stacked(const moe8_model *m, const stacked *s) {
    const moe8_tensor *all[] = {s->gu_b, s->gu_s, s->dn_b, s->dn_s, s->gu, s->dn};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) moe8_st_release(m->st, all[i]);
}

moe8_status moe8_gptoss_bind_experts(moe8_model *m, int64_t l, moe8_layer *ly, moe8_error *err) {
    const int64_t E = m->cfg.num_experts, H = m->cfg.hidden_size, I = m->cfg.moe_intermediate_size;
    struct moe8_gptoss_layer *g;
    stacked s;
    moe8_status st;
    char gu[200];
    snprintf(gu, sizeof gu, m->arch->stacked_gate_up, (long long)l);
    {
        char n[240];
        snprintf(n, sizeof n, "%s_blocks", gu);
        if (!moe8_st_find(m->st, n) && !moe8_st_find(m->st, gu)) return MOE8_OK; /* per expert */
    }
    if (ly->info.experts != MOE8_QUANT_FLOAT || ly->info.experts_down != MOE8_QUANT_FLOAT)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': stacked experts beside a "
                         "quant description that makes them quantized", m->dir, gu);
    if ((st = find_stacked(m, l, &s, err))) return st;
    const int mx = s.gu_b != NULL;
    const moe8_dtype dt = mx ? MOE8_DT_I8 : s.gu->dtype;
    if (!mx && s.dn->dtype != dt)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s' is %s, '%s' %s: expected "
                         "one dtype", m->dir, s.gu->name, moe8_dtype_name(dt), s.dn->name,
                         moe8_dtype_name(s.dn->dtype));
    const size_t per_w = 3 * (size_t)(I * H) * moe8_dtype_size(dt), per_b = (size_t)(2 * I + H);
    if (!m->gptoss && !(m->gptoss = calloc((size_t)m->cfg.num_hidden_layers, sizeof *m->gptoss)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", m->dir);
    g = &m->gptoss[l];
    g->s = s;
    g->w = mx ? NULL : moe8_alloc_aligned(per_w * (size_t)E);
    g->b = malloc(per_b * (size_t)E * sizeof(float));
    g->t = calloc((size_t)E * 6, sizeof *g->t);
    if ((!mx && !g->w) || !g->b || !g->t)
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': layer %lld: cannot allocate its "
                         "experts (%zu bytes)", m->dir, (long long)l, per_w * (size_t)E);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t e = 0; e < E; e++)
        write_expert(&s, e, H, I, dt, g->w ? (char *)g->w + (size_t)e * per_w : NULL,
                     g->b + (size_t)e * per_b);
    if (!mx) release_stacked(m, &s);
    const moe8_tensor *src[3] = {mx ? s.gu_b : s.gu, mx ? s.gu_b : s.gu, mx ? s.dn_b : s.dn};
    for (int64_t e = 0; e < E; e++) {
        moe8_tensor *t = g->t + e * 6;
        moe8_linear *lin[3] = {&ly->experts[e].gate, &ly->experts[e].up, &ly->experts[e].down};
        const int64_t rows[3] = {I, I, H}, cols[3] = {H, H, I};
        const float *b = g->b + (size_t)e * per_b;
        for (int k = 0; k < 3; k++) {
            if (!mx) view(&t[k], src[k], dt, rows[k], cols[k],
                          (const char *)g->w + (size_t)e * per_w + (size_t)k * (per_w / 3));
            view(&t[3 + k], k < 2 ? s.gu_bias : s.dn_bias, MOE8_DT_F32, rows[k], 0,
                 b + (k == 2 ? 2 * I : k * I));
            memset(lin[k], 0, sizeof *lin[k]);
            /* MXFP4: int8 per row at build time (moe8_gptoss_experts), no tensor until then */
            lin[k]->quant = mx ? MOE8_QUANT_W8A8_DYNAMIC : MOE8_QUANT_FLOAT;
            lin[k]->n_out = rows[k], lin[k]->n_in = cols[k];
            lin[k]->weight = mx ? NULL : &t[k];
            lin[k]->bias = &t[3 + k];
        }
    }
    if (mx) ly->info.experts = ly->info.experts_down = MOE8_QUANT_W8A8_DYNAMIC;
    ly->info_stacked = 1;
    if (l == 0) /* the one line a user sees (the CLI shows WARN and above) */
        moe8_log(mx ? MOE8_LOG_WARN : MOE8_LOG_INFO, "'%s': gpt_oss experts %s", m->dir,
                 mx ? "MXFP4: converted to W8A8_DYNAMIC (int8 per row) as each layer is "
                      "packed, or read so converted from the packed cache (float experts: their "
                      "exact values)"
                    : "stacked float: written out per expert at load");
    return MOE8_OK;
}

int moe8_gptoss_is_mxfp4(const moe8_model *m, int64_t l) {
    return m->gptoss && m->gptoss[l].s.gu_b != NULL;
}

/* Rows [0, n) of an MXFP4 matrix of `cols` columns starting at source row r0
 * (stride `step` rows) into fp32 (f) or per-row int8 (q, scales sc). */
static void mx_rows(const moe8_tensor *b, const moe8_tensor *s, int64_t r0, int64_t step,
                    int64_t n, int64_t cols, float *f, int8_t *q, float *sc, float *row,
                    int8_t *qrow) {
    for (int64_t i = 0; i < n; i++) {
        const size_t r = (size_t)(r0 + i * step);
        float *dst = f ? f + (size_t)i * (size_t)cols : row;
        moe8_mxfp4_decode_row(dst, (const uint8_t *)b->data + r * (size_t)(cols / 2),
                              (const uint8_t *)s->data + r * (size_t)(cols / 32), cols);
        if (q) { /* moe8 quantize's per-row int8 (convert/quantize.c moe8_quant_row) */
            int32_t sum;
            moe8_quant_rows_ref(qrow, moe8_round_up((int)cols, MOE8_QK_KALIGN), sc + i, &sum, row,
                                (int)cols, 1, (int)cols);
            memcpy(q + (size_t)i * (size_t)cols, qrow, (size_t)cols);
        }
    }
}

moe8_status moe8_gptoss_experts(const moe8_model *m, int64_t l, int first, int last, int as_float,
                                moe8_moe_expert *ex, void **block, moe8_error *err) {
    const int64_t H = m->cfg.hidden_size, I = m->cfg.moe_intermediate_size;
    const stacked *s = &m->gptoss[l].s;
    const size_t nw = 3 * (size_t)(I * H), ns = 2 * (size_t)I + (size_t)H;
    const size_t per = as_float ? nw * sizeof(float) : nw + ns * sizeof(float);
    int nomem = 0;
    *block = moe8_alloc_aligned(per * (size_t)(last - first));
    if (!*block)
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': layer %lld: cannot allocate %zu bytes "
                         "to convert its MXFP4 experts", m->dir, (long long)l,
                         per * (size_t)(last - first));
#pragma omp parallel for schedule(dynamic, 1)
    for (int e = first; e < last; e++) {
        char *base = (char *)*block + per * (size_t)(e - first);
        float *row = malloc((size_t)(H > I ? H : I) * sizeof(float));
        int8_t *qrow = malloc((size_t)moe8_round_up((int)(H > I ? H : I), MOE8_QK_KALIGN));
        if (!row || !qrow) {
#pragma omp atomic write
            nomem = 1;
        } else {
            moe8_moe_weight *w[3] = {&ex[e].gate, &ex[e].up, &ex[e].down};
            const int64_t rows[3] = {I, I, H}, cols[3] = {H, H, I};
            const int64_t r0[3] = {(int64_t)e * 2 * I, (int64_t)e * 2 * I + 1, (int64_t)e * H};
            float *sbase = (float *)(base + nw); /* int8: the scales after the codes */
            size_t off = 0, si = 0;
            for (int k = 0; k < 3; k++) {
                const moe8_tensor *b = k < 2 ? s->gu_b : s->dn_b, *sc = k < 2 ? s->gu_s : s->dn_s;
                const size_t n = (size_t)(rows[k] * cols[k]);
                w[k]->data = base + off * (as_float ? sizeof(float) : 1);
                w[k]->dtype = as_float ? MOE8_DT_F32 : MOE8_DT_I8;
                w[k]->scale = as_float ? NULL : sbase + si;
                w[k]->scale_dtype = MOE8_DT_F32;
                w[k]->offset = NULL;
                mx_rows(b, sc, r0[k], k < 2 ? 2 : 1, rows[k], cols[k],
                        as_float ? (float *)w[k]->data : NULL,
                        as_float ? NULL : (int8_t *)w[k]->data,
                        as_float ? NULL : sbase + si, row, qrow);
                off += n;
                si += (size_t)rows[k];
            }
        }
        free(row);
        free(qrow);
    }
    if (nomem) {
        moe8_free_aligned(*block);
        *block = NULL;
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': layer %lld: out of memory converting "
                         "its MXFP4 experts", m->dir, (long long)l);
    }
    return MOE8_OK;
}

moe8_status moe8_gptoss_experts_cached(const moe8_model *m, int64_t l, int first, int last,
                                       const float *scales, moe8_moe_expert *ex, void **block,
                                       moe8_error *err) {
    const int64_t H = m->cfg.hidden_size, I = m->cfg.moe_intermediate_size;
    const size_t ns = 2 * (size_t)I + (size_t)H;
    /* the packed bytes come from the cache too: the codes are never read, but
     * the layer wants int8 data; zeros, should a packing ever read them */
    *block = moe8_alloc_aligned((size_t)(I * H));
    if (!*block)
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': layer %lld: out of memory", m->dir,
                         (long long)l);
    memset(*block, 0, (size_t)(I * H));
    for (int e = first; e < last; e++) {
        moe8_moe_weight *w[3] = {&ex[e].gate, &ex[e].up, &ex[e].down};
        const size_t so[3] = {0, (size_t)I, 2 * (size_t)I};
        for (int k = 0; k < 3; k++) {
            w[k]->data = *block;
            w[k]->dtype = MOE8_DT_I8;
            w[k]->scale = scales + (size_t)(e - first) * ns + so[k];
            w[k]->scale_dtype = MOE8_DT_F32;
            w[k]->offset = NULL;
        }
    }
    return MOE8_OK;
}

void moe8_gptoss_free(moe8_model *m) {
    for (int64_t l = 0; m->gptoss && l < m->cfg.num_hidden_layers; l++) {
        moe8_free_aligned(m->gptoss[l].w);
        free(m->gptoss[l].b);
        free(m->gptoss[l].t);
    }
    free(m->gptoss);
    m->gptoss = NULL;
}
