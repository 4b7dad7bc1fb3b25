/*
 * model.c — open a model folder of a supported family (SEMANTICS §6, §7,
 * docs/MODELS.md): config.json, generation_config.json (optional: more stop
 * ids), the safetensors file(s), quant_model_description.json (optional:
 * absent = every tensor FLOAT).
 *
 * Load = parse the JSON files, map the tensors, resolve each layer's quant
 * types, then bind every tensor the family's descriptor (src/arch) names for
 * each layer — in the role table's order, with its shapes — into moe8_layer /
 * moe8_linear (model.h) while checking its contract: present, dtype and shape
 * consistent with the config and the quant type, and the few values used as
 * parameters (input scale/offset, deq_scale, weight scales/offsets) sane.
 * The int8 GEMMs accumulate in int32: widths and quant_bias values at which
 * that accumulator could wrap are refused here rather than computed wrong.
 * Errors name the file and tensor and say expected vs found.
 *
 * What a loaded model tells about itself (its layers, memory, shard) is
 * model_info.c.
 *
 * Does not: pack experts, convert dtypes, allocate KV cache or compute.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/dist.h"
#include "io/json_util.h"
#include "kernels/kernels.h"
#include "load/model.h"
#include "moe/moe.h"

/* ======================================================================== */
/* Tensor lookup and contract checks                                        */
/* ======================================================================== */

static void fmt_shape(char *buf, size_t n, int n_dims, const int64_t *shape) {
    size_t used = 0;
    used += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < n_dims && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
}

static const char *file_of(const moe8_model *m, const moe8_tensor *t) {
    const char *p = moe8_st_file_path(m->st, t->file_index);
    return p ? p : m->dir;
}

/* The tensor `name`, or an error (NULL *out) when `required`. */
static moe8_status find(const moe8_model *m, const char *name, int required,
                        const moe8_tensor **out, moe8_error *err) {
    *out = moe8_st_find(m->st, name);
    if (*out || !required) return MOE8_OK;
    return moe8_fail(err, MOE8_ERR_NOT_FOUND, -1, "'%s': tensor '%s' not found", m->dir, name);
}

static int is_float_dt(moe8_dtype dt) {
    return dt == MOE8_DT_F32 || dt == MOE8_DT_F16 || dt == MOE8_DT_BF16;
}

/* dtype check: `ok` says whether t->dtype is allowed; `want` spells them. */
static moe8_status want_dtype(const moe8_model *m, const moe8_tensor *t, int ok, const char *want,
                              moe8_error *err) {
    if (ok) return MOE8_OK;
    return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': expected dtype %s, found %s",
                     file_of(m, t), t->name, want, moe8_dtype_name(t->dtype));
}

/* Exact shape check; d1 < 0 means a 1-D shape [d0]. */
static moe8_status want_shape(const moe8_model *m, const moe8_tensor *t, int64_t d0, int64_t d1,
                              moe8_error *err) {
    int64_t want[2] = {d0, d1};
    int n = d1 < 0 ? 1 : 2;
    char ws[64], fs[160];
    if (t->n_dims == n && t->shape[0] == d0 && (n == 1 || t->shape[1] == d1)) return MOE8_OK;
    fmt_shape(ws, sizeof ws, n, want);
    fmt_shape(fs, sizeof fs, t->n_dims, t->shape);
    return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': expected shape %s, found %s",
                     file_of(m, t), t->name, ws, fs);
}

/* A float tensor of shape [d0] or [d0][d1]. */
static moe8_status float_tensor(const moe8_model *m, const char *name, int64_t d0, int64_t d1,
                                const moe8_tensor **out, moe8_error *err) {
    moe8_status st;
    if ((st = find(m, name, 1, out, err)) != MOE8_OK) return st;
    if ((st = want_dtype(m, *out, is_float_dt((*out)->dtype), "BF16, F16 or F32", err)) != MOE8_OK)
        return st;
    return want_shape(m, *out, d0, d1, err);
}

/* Every element finite and, if `integer`, an integer in [-128, 127]. */
static moe8_status check_values(const moe8_model *m, const moe8_tensor *t, int integer,
                                int *nonzero, moe8_error *err) {
    for (int64_t i = 0; i < t->n_elements; i++) {
        float v = moe8_tensor_f32_at(t, i);
        if (!isfinite(v))
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': element %lld is %g, "
                             "expected a finite value", file_of(m, t), t->name, (long long)i, v);
        if (integer && (v != floorf(v) || v < -128.0f || v > 127.0f))
            return moe8_fail(err, MOE8_ERR_FORMAT, -1,
                             "'%s': tensor '%s': element %lld is %g, expected an integer in "
                             "[-128, 127]", file_of(m, t), t->name, (long long)i, v);
        if (nonzero && v != 0.0f) *nonzero = 1;
    }
    return MOE8_OK;
}

/* ======================================================================== */
/* Linear layers                                                             */
/* ======================================================================== */

/* weight_scale / weight_offset: [n] or [n][1], float (offset may be integer). */
static moe8_status scale_like(const moe8_model *m, const moe8_tensor *t, int64_t n, int offset,
                              moe8_error *err) {
    int ok = is_float_dt(t->dtype) ||
             (offset && (t->dtype == MOE8_DT_I8 || t->dtype == MOE8_DT_I32 || t->dtype == MOE8_DT_I64));
    moe8_status st = want_dtype(m, t, ok, offset ? "F32, BF16, F16, I8, I32 or I64" : "F32, BF16 or F16",
                                err);
    if (st != MOE8_OK) return st;
    if (t->n_dims == 2 && t->shape[1] == 1) return want_shape(m, t, n, 1, err);
    return want_shape(m, t, n, -1, err);
}

/* `<prefix>.weight_scale` (required iff `need`) and `.weight_offset` (optional). */
static moe8_status bind_weight_scales(const moe8_model *m, const char *prefix, moe8_linear *L,
                                      int need, moe8_error *err) {
    char name[256];
    moe8_status st;
    snprintf(name, sizeof name, "%s.weight_scale", prefix);
    if ((st = find(m, name, need, &L->weight_scale, err)) != MOE8_OK) return st;
    snprintf(name, sizeof name, "%s.weight_offset", prefix);
    if ((st = find(m, name, 0, &L->weight_offset, err)) != MOE8_OK) return st;
    if (!need) return MOE8_OK; /* present but unused (W8A8 static) */
    if ((st = scale_like(m, L->weight_scale, L->n_out, 0, err)) != MOE8_OK) return st;
    if ((st = check_values(m, L->weight_scale, 0, NULL, err)) != MOE8_OK) return st;
    if (!L->weight_offset) return MOE8_OK;
    if ((st = scale_like(m, L->weight_offset, L->n_out, 1, err)) != MOE8_OK) return st;
    if (L->weight_offset->n_dims != L->weight_scale->n_dims)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': shape differs from '%s'",
                         file_of(m, L->weight_offset), L->weight_offset->name, L->weight_scale->name);
    return check_values(m, L->weight_offset, 1, &L->nonzero_offset, err);
}

/* W4A8_DYNAMIC companions (SEMANTICS §4b): the per-group form's
 * weight_scale_second / weight_offset_second refused, naming the field;
 * scale_bias optional, float, [n], [n][1] or [n][16], finite (its values
 * are compared with the weights when they are packed: moe_build.c). */
static moe8_status bind_w4a8(const moe8_model *m, const char *prefix, moe8_linear *L,
                             moe8_error *err) {
    static const char *const per_group[] = {"weight_scale_second", "weight_offset_second"};
    char name[256];
    const moe8_tensor *t;
    moe8_status st;
    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof name, "%s.%s", prefix, per_group[i]);
        if ((st = find(m, name, 0, &t, err)) != MOE8_OK) return st;
        if (t)
            return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': tensor '%s': per-group "
                             "W4A8_DYNAMIC (%s) not supported, only per-channel",
                             file_of(m, t), t->name, per_group[i]);
    }
    snprintf(name, sizeof name, "%s.scale_bias", prefix);
    if ((st = find(m, name, 0, &L->scale_bias, err)) != MOE8_OK || !(t = L->scale_bias)) return st;
    if ((st = want_dtype(m, t, is_float_dt(t->dtype), "F32, BF16 or F16", err)) != MOE8_OK) return st;
    if ((t->n_dims == 2 && t->shape[0] == L->n_out && (t->shape[1] == 1 || t->shape[1] == 16)) ||
        (t->n_dims == 1 && t->shape[0] == L->n_out))
        return check_values(m, t, 0, NULL, err);
    char fs[160];
    fmt_shape(fs, sizeof fs, t->n_dims, t->shape);
    return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': expected shape [%lld], "
                     "[%lld, 1] or [%lld, 16], found %s", file_of(m, t), t->name,
                     (long long)L->n_out, (long long)L->n_out, (long long)L->n_out, fs);
}

/* input_scale [1] float > 0; input_offset [1] I8 or integer-valued float. */
static moe8_status bind_input_quant(const moe8_model *m, const char *prefix, moe8_linear *L,
                                    moe8_error *err) {
    char name[256], fs[160];
    const moe8_tensor *t[2];
    moe8_status st;
    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof name, "%s.%s", prefix, i ? "input_offset" : "input_scale");
        if ((st = find(m, name, 1, &t[i], err)) != MOE8_OK) return st;
        st = want_dtype(m, t[i], is_float_dt(t[i]->dtype) || (i && t[i]->dtype == MOE8_DT_I8),
                        i ? "I8, F32, BF16 or F16" : "F32, BF16 or F16", err);
        if (st != MOE8_OK) return st;
        fmt_shape(fs, sizeof fs, t[i]->n_dims, t[i]->shape);
        if (t[i]->n_elements != 1 || t[i]->n_dims > 1)
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': expected shape [1], found %s",
                             file_of(m, t[i]), t[i]->name, fs);
    }
    L->input_scale = t[0];
    L->input_offset = t[1];
    L->in_scale = moe8_tensor_f32_at(t[0], 0);
    if (!isfinite(L->in_scale) || L->in_scale <= 0.0f)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': value %g, expected a finite "
                         "scale > 0", file_of(m, t[0]), t[0]->name, L->in_scale);
    if ((st = check_values(m, t[1], 1, NULL, err)) != MOE8_OK) return st;
    L->in_offset = (int32_t)moe8_tensor_f32_at(t[1], 0);
    return MOE8_OK;
}

/* deq_scale [n_out]: I64 whose high word is 0 or the sign extension of the
 * fp32 bits in its low word, or F32; each value finite and > 0 (it is
 * input_scale x weight_scale). */
static moe8_status check_deq_scale(const moe8_model *m, const moe8_tensor *d, moe8_error *err) {
    for (int64_t i = 0; i < d->n_elements; i++) {
        float v = moe8_deq_scale_at(d, i);
        if (d->dtype == MOE8_DT_I64) {
            int64_t x;
            memcpy(&x, (const char *)d->data + (size_t)i * 8, 8);
            if (!moe8_deq_scale_high_ok(x))
                return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': element %lld is "
                                 "0x%016llx: high 32 bits must be 0 or the sign extension of the "
                                 "low 32 (fp32 bits)", file_of(m, d), d->name, (long long)i,
                                 (unsigned long long)x);
        }
        if (!isfinite(v) || !(v > 0.0f))
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': element %lld is %g, "
                             "expected a finite scale > 0", file_of(m, d), d->name, (long long)i, v);
    }
    return MOE8_OK;
}

/* quant_bias [n_out] I32 with |b| + 16384 * n_in <= INT32_MAX: the int32
 * accumulator of (codes in [-128, 127]) x (weights in [-128, 127]) plus the
 * bias cannot wrap. */
static moe8_status check_quant_bias(const moe8_model *m, const moe8_tensor *b, int64_t n_in,
                                    moe8_error *err) {
    const int64_t room = INT32_MAX - MOE8_W8A8_MAX_PRODUCT * n_in; /* >= 0: bind_linear */
    for (int64_t j = 0; j < b->n_elements; j++) {
        int32_t v;
        memcpy(&v, (const char *)b->data + (size_t)j * 4, 4);
        if (llabs((long long)v) > room)
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': element %lld is %d: "
                             "|bias| + %d x %lld inputs must be <= %d (int32 accumulator), so "
                             "|bias| <= %lld", file_of(m, b), b->name, (long long)j, (int)v,
                             MOE8_W8A8_MAX_PRODUCT, (long long)n_in, INT32_MAX, (long long)room);
    }
    return MOE8_OK;
}

static moe8_status bind_dequant(const moe8_model *m, const char *prefix, moe8_linear *L,
                                moe8_error *err) {
    char name[256];
    moe8_status st;
    const moe8_tensor *d, *b;
    snprintf(name, sizeof name, "%s.deq_scale", prefix);
    if ((st = find(m, name, 1, &d, err)) != MOE8_OK) return st;
    st = want_dtype(m, d, d->dtype == MOE8_DT_I64 || d->dtype == MOE8_DT_F32, "I64 or F32", err);
    if (st != MOE8_OK || (st = want_shape(m, d, L->n_out, -1, err)) != MOE8_OK) return st;
    if ((st = check_deq_scale(m, d, err)) != MOE8_OK) return st;
    snprintf(name, sizeof name, "%s.quant_bias", prefix);
    if ((st = find(m, name, 1, &b, err)) != MOE8_OK) return st;
    if ((st = want_dtype(m, b, b->dtype == MOE8_DT_I32, "I32", err)) != MOE8_OK) return st;
    if ((st = want_shape(m, b, L->n_out, -1, err)) != MOE8_OK) return st;
    if ((st = check_quant_bias(m, b, L->n_in, err)) != MOE8_OK) return st;
    L->deq_scale = d;
    L->quant_bias = b;
    return MOE8_OK;
}

/* The int8 GEMMs accumulate in int32: refuse widths at which it could wrap.
 * W8A8 static: 16384 x n_in (plus the bias, checked with it) <= INT32_MAX.
 * W8A8_DYNAMIC: the MoE layer's cap MOE8_MOE_MAX_DIM (codes +-127, weights
 * and offsets in [-128, 127]: 2 x 127 x 128 x 65536 < 2^31). */
static moe8_status check_width(const moe8_model *m, const moe8_linear *L, moe8_error *err) {
    int64_t cap = L->quant == MOE8_QUANT_W8A8 ? INT32_MAX / MOE8_W8A8_MAX_PRODUCT
                                              : (int64_t)MOE8_MOE_MAX_DIM;
    if (L->quant == MOE8_QUANT_FLOAT || L->n_in <= cap) return MOE8_OK;
    return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': tensor '%s': %lld inputs: %s int8 "
                     "products would overflow the int32 accumulator (at most %lld inputs)",
                     file_of(m, L->weight), L->weight->name, (long long)L->n_in,
                     moe8_quant_type_name(L->quant), (long long)cap);
}

/* Bind "<prefix>.weight" [n_out][n_in] and its companions for quant type q. */
static moe8_status bind_linear(const moe8_model *m, const char *prefix, moe8_quant_type q,
                               int64_t n_out, int64_t n_in, moe8_linear *L, moe8_error *err) {
    char name[256];
    moe8_status st;
    memset(L, 0, sizeof *L);
    L->quant = q;
    L->n_out = n_out;
    L->n_in = n_in;
    snprintf(name, sizeof name, "%s.weight", prefix);
    if ((st = find(m, name, 1, &L->weight, err)) != MOE8_OK) return st;
    if (q == MOE8_QUANT_FLOAT)
        st = want_dtype(m, L->weight, is_float_dt(L->weight->dtype),
                        m->has_quant_desc ? "BF16, F16 or F32 (FLOAT)"
                                          : "BF16, F16 or F32 (no quant_model_description.json: FLOAT)",
                        err);
    else
        st = want_dtype(m, L->weight, L->weight->dtype == MOE8_DT_I8,
                        q == MOE8_QUANT_W8A8 ? "I8 (W8A8)" : q == MOE8_QUANT_W4A8_DYNAMIC
                        ? "I8 (W4A8_DYNAMIC: two int4 codes a byte)" : "I8 (W8A8_DYNAMIC)", err);
    if (st == MOE8_OK && q == MOE8_QUANT_W4A8_DYNAMIC && n_out % 2)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': W4A8_DYNAMIC packs output "
                         "channels in pairs, %lld is odd", file_of(m, L->weight), L->weight->name,
                         (long long)n_out);
    if (st != MOE8_OK || (st = want_shape(m, L->weight, q == MOE8_QUANT_W4A8_DYNAMIC ? n_out / 2
                                                                                 : n_out,
                                          n_in, err)) != MOE8_OK)
        return st;
    if ((st = check_width(m, L, err)) != MOE8_OK) return st;
    if (q == MOE8_QUANT_W8A8) {
        if ((st = bind_input_quant(m, prefix, L, err)) != MOE8_OK) return st;
        if ((st = bind_dequant(m, prefix, L, err)) != MOE8_OK) return st;
        return bind_weight_scales(m, prefix, L, 0, err);
    }
    if (q == MOE8_QUANT_W8A8_DYNAMIC) return bind_weight_scales(m, prefix, L, 1, err);
    if (q == MOE8_QUANT_W4A8_DYNAMIC) {
        if ((st = bind_weight_scales(m, prefix, L, 1, err)) != MOE8_OK) return st;
        return bind_w4a8(m, prefix, L, err);
    }
    return MOE8_OK;
}

/* ======================================================================== */
/* Layers                                                                    */
/* ======================================================================== */

/* Quant type of linear role r in a layer of resolved types li. */
static moe8_quant_type quant_of(const moe8_layer_info *li, moe8_role r) {
    switch (r) {
    case MOE8_R_Q: case MOE8_R_K: case MOE8_R_V: return li->qkv;
    case MOE8_R_Q_A: case MOE8_R_KV_A: return li->qkv;
    case MOE8_R_Q_B: return li->q_b;
    case MOE8_R_KV_B: return li->kv_b;
    case MOE8_R_O: return li->o;
    case MOE8_R_EXP_GATE: case MOE8_R_EXP_UP: return li->experts;
    case MOE8_R_EXP_DOWN: return li->experts_down;
    case MOE8_R_SHEXP_GATE: case MOE8_R_SHEXP_UP: return li->shared_gate_up;
    case MOE8_R_SHEXP_DOWN: return li->shared_down;
    case MOE8_R_MLP_GATE: case MOE8_R_MLP_UP: return li->mlp_gate_up;
    case MOE8_R_MLP_DOWN: return li->mlp_down;
    case MOE8_R_GDN_QKVZ: case MOE8_R_GDN_QKV: return li->gdn_in;
    case MOE8_R_GDN_Z: return li->gdn_z;
    case MOE8_R_GDN_OUT: return li->gdn_out;
    default: return MOE8_QUANT_FLOAT;
    }
}

/* Where role r of layer ly (expert e for expert roles) is bound. */
static moe8_linear *linear_of(moe8_layer *ly, moe8_role r, int64_t e) {
    switch (r) {
    case MOE8_R_Q: return &ly->q;
    case MOE8_R_K: return &ly->k;
    case MOE8_R_V: return &ly->v;
    case MOE8_R_O: return &ly->o;
    case MOE8_R_Q_A: return &ly->q_a;
    case MOE8_R_Q_B: return &ly->q_b;
    case MOE8_R_KV_A: return &ly->kv_a;
    case MOE8_R_KV_B: return &ly->kv_b;
    case MOE8_R_EXP_GATE: return &ly->experts[e].gate;
    case MOE8_R_EXP_UP: return &ly->experts[e].up;
    case MOE8_R_EXP_DOWN: return &ly->experts[e].down;
    case MOE8_R_SHEXP_GATE: return &ly->sh_gate;
    case MOE8_R_SHEXP_UP: return &ly->sh_up;
    case MOE8_R_SHEXP_DOWN: return &ly->sh_down;
    case MOE8_R_MLP_GATE: return &ly->mlp_gate;
    case MOE8_R_MLP_UP: return &ly->mlp_up;
    case MOE8_R_MLP_DOWN: return &ly->mlp_down;
    case MOE8_R_GDN_QKVZ: case MOE8_R_GDN_QKV: return &ly->gdn_in;
    case MOE8_R_GDN_Z: return &ly->gdn_z;
    case MOE8_R_GDN_OUT: return &ly->gdn_out;
    default: return NULL;
    }
}

static const moe8_tensor **tensor_of(moe8_layer *ly, moe8_role r) {
    switch (r) {
    case MOE8_R_ATTN_NORM: return &ly->attn_norm;
    case MOE8_R_FFN_NORM: return &ly->ffn_norm;
    case MOE8_R_Q_NORM: return &ly->q_norm;
    case MOE8_R_K_NORM: return &ly->k_norm;
    case MOE8_R_Q_A_NORM: return &ly->q_a_norm;
    case MOE8_R_KV_A_NORM: return &ly->kv_a_norm;
    case MOE8_R_ROUTER: return &ly->router;
    case MOE8_R_SHEXP_SCORE: return &ly->sh_score;
    case MOE8_R_GDN_BA: return &ly->gdn_ba;
    case MOE8_R_GDN_B: return &ly->gdn_b;
    case MOE8_R_GDN_A: return &ly->gdn_a;
    case MOE8_R_GDN_NORM: return &ly->gdn_norm;
    case MOE8_R_GDN_A_LOG: return &ly->gdn_a_log;
    case MOE8_R_GDN_DT_BIAS: return &ly->gdn_dt_bias;
    case MOE8_R_SINKS: return &ly->sinks;
    default: return NULL;
    }
}

/* "<prefix>.bias" [n_out] float: required on a FLOAT or W4A8_DYNAMIC linear
 * (added after it), optional and unused on a W8A8 one (folded into
 * quant_bias); an expert's (gpt_oss) required and kept whatever its storage. */
static moe8_status bind_bias(const moe8_model *m, const char *prefix, moe8_linear *L, int expert,
                             moe8_error *err) {
    char name[256];
    const moe8_tensor *t;
    moe8_status st;
    snprintf(name, sizeof name, "%s.bias", prefix);
    const int added = expert || L->quant == MOE8_QUANT_FLOAT || L->quant == MOE8_QUANT_W4A8_DYNAMIC;
    if ((st = find(m, name, added, &t, err)) != MOE8_OK || !t) return st;
    if ((st = float_tensor(m, name, L->n_out, -1, &t, err)) != MOE8_OK) return st;
    if (added) L->bias = t;
    return MOE8_OK;
}

/* Bind role r of layer l (expert e for expert roles) with its contract:
 * shape from the role table, storage from the layer's resolved types. */
static moe8_status bind_role(moe8_model *m, int64_t l, int64_t e, moe8_role r, moe8_layer *ly,
                             moe8_error *err) {
    const moe8_role_info *ri = moe8_role_of(r);
    const int64_t d0 = moe8_dim_of(&m->cfg, ri->out);
    const int64_t d1 = ri->in == MOE8_DIM_NONE ? -1 : moe8_dim_of(&m->cfg, ri->in);
    char p[200];
    moe8_linear *L;
    moe8_status st;
    if (moe8_arch_tensor_name(m->arch, r, l, e, NULL, p, sizeof p - 8))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': no tensor name for %s", m->dir,
                         ri->what);
    if (ri->kind == MOE8_KIND_NORM || ri->kind == MOE8_KIND_FLOAT) {
        if (r != MOE8_R_GDN_A_LOG && r != MOE8_R_GDN_DT_BIAS && r != MOE8_R_SINKS) /* whole */
            strcat(p, ".weight");
        return float_tensor(m, p, d0, d1, tensor_of(ly, r), err);
    }
    if (d0 <= 0 || (ri->in != MOE8_DIM_NONE && d1 <= 0))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': %s of layer %lld has no width in the "
                         "config", m->dir, ri->what, (long long)l);
    L = linear_of(ly, r, e);
    if ((st = bind_linear(m, p, quant_of(&ly->info, r), d0, d1, L, err)) != MOE8_OK) return st;
    if (((ly->plan.attn_opts & MOE8_ATTN_QKV_BIAS) && (r == MOE8_R_Q || r == MOE8_R_K || r == MOE8_R_V)) ||
        ((ly->plan.attn_opts & MOE8_ATTN_O_BIAS) && r == MOE8_R_O))
        return bind_bias(m, p, L, 0, err);
    if (ly->plan.act == MOE8_ACT_SWIGLU_CLAMPED && ri->scope == MOE8_SCOPE_EXPERT)
        return bind_bias(m, p, L, 1, err); /* gpt_oss's experts carry biases */
    return MOE8_OK;
}

/* conv1d.weight [C][1][K] of a Gated DeltaNet layer, float. */
static moe8_status bind_conv(moe8_model *m, int64_t l, moe8_layer *ly, moe8_error *err) {
    const moe8_family_cfg *fc = MOE8_FAM(&m->cfg);
    const int64_t want[3] = {moe8_dim_of(&m->cfg, MOE8_DIM_GC), 1, fc->linear_conv_kernel_dim};
    char name[200], ws[64], fs[160];
    const moe8_tensor *t;
    moe8_status st;
    moe8_arch_tensor_name(m->arch, MOE8_R_GDN_CONV, l, -1, "weight", name, sizeof name);
    if ((st = find(m, name, 1, &t, err)) ||
        (st = want_dtype(m, t, is_float_dt(t->dtype), "BF16, F16 or F32", err)))
        return st;
    if (t->n_dims != 3 || t->shape[0] != want[0] || t->shape[1] != 1 || t->shape[2] != want[2]) {
        fmt_shape(ws, sizeof ws, 3, want);
        fmt_shape(fs, sizeof fs, t->n_dims, t->shape);
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': expected shape %s "
                         "(linear_conv_kernel_dim %lld), found %s", file_of(m, t), t->name, ws,
                         (long long)want[2], fs);
    }
    ly->gdn_conv = t;
    return MOE8_OK;
}

/* A Gated DeltaNet layer's tensors (arch.h MOE8_R_GDN_*), each with its contract. */
static moe8_status bind_gdn(moe8_model *m, int64_t l, moe8_layer *ly, moe8_error *err) {
    moe8_status st;
    for (int r = MOE8_R_GDN_QKVZ; r <= MOE8_R_GDN_OUT; r++)
        if (r != MOE8_R_GDN_CONV && moe8_arch_in_layer(m->arch, &m->cfg, (moe8_role)r, l) &&
            (st = bind_role(m, l, -1, (moe8_role)r, ly, err)) != MOE8_OK)
            return st;
    return bind_conv(m, l, ly, err);
}

static moe8_status bind_attention(moe8_model *m, int64_t l, moe8_layer *ly, moe8_error *err) {
    moe8_status st;
    for (int r = MOE8_R_ATTN_NORM; r <= MOE8_R_O; r++)
        if (moe8_arch_in_layer(m->arch, &m->cfg, (moe8_role)r, l) &&
            (st = bind_role(m, l, -1, (moe8_role)r, ly, err)) != MOE8_OK)
            return st;
    if (ly->info.gdn) return bind_gdn(m, l, ly, err);
    if (moe8_arch_in_layer(m->arch, &m->cfg, MOE8_R_SINKS, l) &&
        (st = bind_role(m, l, -1, MOE8_R_SINKS, ly, err)))
        return st;
    if (ly->plan.attn == MOE8_ATTN_GQA && ly->info.qkv == MOE8_QUANT_W8A8 &&
        (ly->q.in_scale != ly->k.in_scale || ly->q.in_scale != ly->v.in_scale ||
         ly->q.in_offset != ly->k.in_offset || ly->q.in_offset != ly->v.in_offset)) {
        ly->qkv_input_differ = 1;
        moe8_log(MOE8_LOG_INFO, "layer %lld: q/k/v input scales differ; each projection uses its own",
                 (long long)l);
    }
    return MOE8_OK;
}

/* A stacked expert tensor t [E][a][b], float. */
static moe8_status stacked_shape(const moe8_model *m, const moe8_tensor *t, int64_t a, int64_t b,
                                 const char *what, moe8_error *err) {
    const int64_t want[3] = {m->cfg.num_experts, a, b};
    char ws[64], fs[160];
    moe8_status st = want_dtype(m, t, is_float_dt(t->dtype), "BF16, F16 or F32", err);
    if (st || (t->n_dims == 3 && t->shape[0] == want[0] && t->shape[1] == a && t->shape[2] == b))
        return st;
    fmt_shape(ws, sizeof ws, 3, want);
    fmt_shape(fs, sizeof fs, t->n_dims, t->shape);
    return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': expected shape %s (%s), "
                     "found %s", file_of(m, t), t->name, ws, what, fs);
}

/* view = rows [r0, r0 + n) of the [rows][cols] matrix e of stacked t. */
static moe8_linear stacked_view(moe8_tensor *view, const moe8_tensor *t, int64_t e, int64_t r0,
                                int64_t n, int64_t cols) {
    const size_t es = moe8_dtype_size(t->dtype);
    const size_t off = ((size_t)e * (size_t)t->shape[1] + (size_t)r0) * (size_t)cols * es;
    moe8_linear L;
    *view = *t;
    view->n_dims = 2;
    view->shape[0] = n, view->shape[1] = cols, view->shape[2] = 0;
    view->n_elements = n * cols;
    view->n_bytes = (size_t)(n * cols) * es;
    view->data = (const char *)t->data + off;
    view->file_offset = t->file_offset + (int64_t)off;
    memset(&L, 0, sizeof L);
    L.quant = MOE8_QUANT_FLOAT;
    L.n_out = n, L.n_in = cols;
    L.weight = view;
    return L;
}

/* The family's stacked experts of layer l when the checkpoint has them
 * (gate_up_proj [E][2I][H]: gate rows then up rows; down_proj [E][H][I]):
 * each expert's gate, up and down bound as views of its rows, FLOAT. */
static moe8_status bind_stacked(moe8_model *m, int64_t l, moe8_layer *ly, moe8_error *err) {
    const int64_t E = m->cfg.num_experts, I = m->cfg.moe_intermediate_size, H = m->cfg.hidden_size;
    const moe8_arch_desc *a = m->arch;
    const moe8_tensor *gu, *dn;
    char name[200];
    moe8_status st;
    if (!(a->kinds.tensors & MOE8_TENSORS_STACKED_EXPERTS) || !a->stacked_gate_up) return MOE8_OK;
    snprintf(name, sizeof name, a->stacked_gate_up, (long long)l);
    if (!(gu = moe8_st_find(m->st, name))) return MOE8_OK; /* per-expert names */
    if (ly->info.experts != MOE8_QUANT_FLOAT || ly->info.experts_down != MOE8_QUANT_FLOAT)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': tensor '%s': stacked experts "
                         "quantized not supported yet", m->dir, name);
    if ((st = stacked_shape(m, gu, 2 * I, H, "[E, 2 x moe_intermediate_size, hidden_size]", err)))
        return st;
    snprintf(name, sizeof name, a->stacked_down, (long long)l);
    if ((st = find(m, name, 1, &dn, err)) ||
        (st = stacked_shape(m, dn, H, I, "[E, hidden_size, moe_intermediate_size]", err)))
        return st;
    if (!m->stacked &&
        !(m->stacked = calloc((size_t)(m->cfg.num_hidden_layers * E * 3), sizeof *m->stacked)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", m->dir);
    moe8_tensor *v = m->stacked + (size_t)(ly->experts - m->expert_store) * 3;
    for (int64_t e = 0; e < E; e++, v += 3) {
        ly->experts[e].gate = stacked_view(&v[0], gu, e, 0, I, H);
        ly->experts[e].up = stacked_view(&v[1], gu, e, I, I, H);
        ly->experts[e].down = stacked_view(&v[2], dn, e, 0, H, I);
    }
    ly->info_stacked = 1;
    return MOE8_OK;
}

static moe8_status bind_moe(moe8_model *m, int64_t l, moe8_layer *ly, moe8_error *err) {
    static const moe8_role shared[] = {MOE8_R_SHEXP_GATE, MOE8_R_SHEXP_UP, MOE8_R_SHEXP_DOWN,
                                       MOE8_R_SHEXP_SCORE};
    moe8_status st;
    if ((st = bind_role(m, l, -1, MOE8_R_ROUTER, ly, err)) != MOE8_OK) return st;
    if (ly->plan.correction_bias) { /* e_score_correction_bias [E] (deepseek_v3, minimax_m2) */
        char name[200];
        moe8_arch_router_bias_name(m->arch, l, name, sizeof name);
        if ((st = float_tensor(m, name, m->cfg.num_experts, -1, &ly->router_bias, err)) ||
            (st = check_values(m, ly->router_bias, 0, NULL, err)))
            return st;
    }
    if (ly->plan.router_bias) { /* the router's own bias (gpt_oss) */
        char name[200];
        moe8_arch_tensor_name(m->arch, MOE8_R_ROUTER, l, -1, "bias", name, sizeof name);
        if ((st = float_tensor(m, name, m->cfg.num_experts, -1, &ly->router_lbias, err)) ||
            (st = check_values(m, ly->router_lbias, 0, NULL, err)))
            return st;
    }
    st = (m->arch->kinds.tensors & MOE8_TENSORS_GPTOSS_EXPERTS) ? moe8_gptoss_bind_experts(m, l, ly, err)
                                                                : bind_stacked(m, l, ly, err);
    if (st != MOE8_OK) return st;
    for (int64_t e = 0; !ly->info_stacked && e < m->cfg.num_experts; e++)
        for (int r = MOE8_R_EXP_GATE; r <= MOE8_R_EXP_DOWN; r++)
            if ((st = bind_role(m, l, e, (moe8_role)r, ly, err)) != MOE8_OK) return st;
    for (size_t i = 0; ly->info.has_shared && i < sizeof shared / sizeof shared[0]; i++)
        if (moe8_arch_in_layer(m->arch, &m->cfg, shared[i], l) &&
            (st = bind_role(m, l, -1, shared[i], ly, err)) != MOE8_OK)
            return st;
    return MOE8_OK;
}

static moe8_status bind_dense(moe8_model *m, int64_t l, moe8_layer *ly, moe8_error *err) {
    moe8_status st;
    for (int r = MOE8_R_MLP_GATE; r <= MOE8_R_MLP_DOWN; r++)
        if ((st = bind_role(m, l, -1, (moe8_role)r, ly, err)) != MOE8_OK) return st;
    return MOE8_OK;
}

/* lm_head [V][H] of type q (resolve_quant): the embedding when tied, which
 * stays float (so a W8A8_DYNAMIC lm_head.weight is refused there); else
 * lm_head.weight, FLOAT or W8A8_DYNAMIC with the experts' contract (I8
 * weight, finite weight_scale [V] or [V][1], optional integer offsets). */
static moe8_status bind_lm_head(moe8_model *m, moe8_quant_type q, moe8_error *err) {
    const moe8_config *c = &m->cfg;
    char name[200];
    moe8_arch_tensor_name(m->arch, MOE8_R_LM_HEAD, 0, 0, NULL, name, sizeof name);
    if (!c->tie_word_embeddings)
        return bind_linear(m, name, q, c->vocab_size, c->hidden_size, &m->lm_head, err);
    if (q != MOE8_QUANT_FLOAT)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': lm_head.weight is %s but "
                         "tie_word_embeddings is true: a tied lm_head is the float embedding",
                         m->dir, moe8_quant_type_name(q));
    memset(&m->lm_head, 0, sizeof m->lm_head);
    m->lm_head.quant = MOE8_QUANT_FLOAT;
    m->lm_head.n_out = c->vocab_size;
    m->lm_head.n_in = c->hidden_size;
    m->lm_head.weight = m->embed;
    return MOE8_OK;
}

static moe8_status bind_all(moe8_model *m, moe8_quant_type lm_head, moe8_error *err) {
    const moe8_config *c = &m->cfg;
    int64_t V = c->vocab_size, H = c->hidden_size, n_moe = 0;
    moe8_status st;
    char name[200];
    moe8_arch_tensor_name(m->arch, MOE8_R_EMBED, 0, 0, "weight", name, sizeof name);
    if ((st = float_tensor(m, name, V, H, &m->embed, err)) != MOE8_OK) return st;
    moe8_arch_tensor_name(m->arch, MOE8_R_FINAL_NORM, 0, 0, "weight", name, sizeof name);
    if ((st = float_tensor(m, name, H, -1, &m->final_norm, err)) != MOE8_OK) return st;
    if ((st = bind_lm_head(m, lm_head, err)) != MOE8_OK) return st;
    if (m->arch->skip_prefix) { /* a vision tower: never read */
        size_t n = 0, len = strlen(m->arch->skip_prefix);
        for (size_t i = 0; i < moe8_st_count(m->st); i++)
            n += !strncmp(moe8_st_get(m->st, i)->name, m->arch->skip_prefix, len);
        if (n)
            moe8_log(MOE8_LOG_INFO, "'%s': %s: skipping %zu tensors under %s (text only)",
                     m->dir, m->arch->model_type, n, m->arch->skip_prefix);
    }
    for (int64_t l = 0; l < c->num_hidden_layers; l++) n_moe += m->layers[l].info.is_moe;
    if (n_moe > 0) {
        /* n_moe <= 512 and E <= 4096 (config caps): no overflow */
        m->expert_store = calloc((size_t)(n_moe * c->num_experts), sizeof *m->expert_store);
        if (!m->expert_store) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", m->dir);
    }
    n_moe = 0;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        moe8_layer *ly = &m->layers[l];
        if ((st = bind_attention(m, l, ly, err)) != MOE8_OK) return st;
        if (ly->info.is_moe) ly->experts = m->expert_store + (n_moe++) * c->num_experts;
        st = ly->info.is_moe ? bind_moe(m, l, ly, err) : bind_dense(m, l, ly, err);
        if (st != MOE8_OK) return st;
    }
    return MOE8_OK;
}

/* ======================================================================== */
/* JSON files of the folder                                                  */
/* ======================================================================== */

static char *join(const char *dir, const char *file) {
    size_t n = strlen(dir) + strlen(file) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, file);
    return p;
}

/* Read dir/file into *text; *text NULL without error when optional and absent. */
static moe8_status read_json_file(const char *dir, const char *file, size_t max, int optional,
                                  char **text, size_t *len, char **path, moe8_error *err) {
    moe8_status st;
    *text = NULL;
    if (!(*path = join(dir, file))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    if (optional && access(*path, F_OK) != 0 && errno == ENOENT) return MOE8_OK;
    st = moe8_read_file(*path, max, text, len, err);
    return st;
}

static moe8_status load_config(moe8_model *m, moe8_error *err) {
    char *text = NULL, *path = NULL;
    size_t len = 0;
    moe8_status st = read_json_file(m->dir, "config.json", MOE8_CONFIG_MAX_BYTES, 0, &text, &len,
                                    &path, err);
    if (st == MOE8_OK) st = moe8_config_parse(text, len, path, &m->cfg, err);
    if (st == MOE8_OK) m->arch = moe8_arch_get(m->cfg.arch);
    free(text);
    free(path);
    return st;
}

/* generation_config.json: only eos_token_id is used (union with config.json's). */
static moe8_status load_generation_config(moe8_model *m, moe8_error *err) {
    char *text = NULL, *path = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    moe8_status st = read_json_file(m->dir, "generation_config.json", MOE8_CONFIG_MAX_BYTES, 1,
                                    &text, &len, &path, err);
    if (st != MOE8_OK || !text) goto done;
    if ((st = moe8_json_parse(text, len, path, &root, err)) != MOE8_OK) goto done;
    if (!cJSON_IsObject(root)) {
        st = moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': expected a JSON object", path);
        goto done;
    }
    st = moe8_config_read_eos(root, path, m->cfg.vocab_size, m->cfg.eos_token_ids, &m->cfg.n_eos_ids,
                              err);
done:
    cJSON_Delete(root);
    free(text);
    free(path);
    return st;
}

static int st_has(void *user, const char *name) {
    return moe8_st_find((const moe8_st *)user, name) != NULL;
}

static moe8_status resolve_quant(moe8_model *m, moe8_quant_type *lm_head, moe8_error *err) {
    char *text = NULL, *path = NULL;
    size_t len = 0;
    moe8_quant_desc *qd = NULL;
    moe8_layer_info *li;
    moe8_status st = read_json_file(m->dir, "quant_model_description.json",
                                    MOE8_QUANT_DESC_MAX_BYTES, 1, &text, &len, &path, err);
    if (st == MOE8_OK && text) st = moe8_quant_desc_parse(text, len, path, &qd, err);
    m->has_quant_desc = qd != NULL;
    free(text);
    free(path);
    if (st != MOE8_OK) return st;
    m->layers = calloc((size_t)m->cfg.num_hidden_layers, sizeof *m->layers);
    li = calloc((size_t)m->cfg.num_hidden_layers, sizeof *li);
    if (!m->layers || !li)
        st = moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", m->dir);
    else
        st = moe8_quant_desc_resolve(qd, &m->cfg, st_has, m->st, li, err);
    for (int64_t l = 0; st == MOE8_OK && l < m->cfg.num_hidden_layers; l++) {
        m->layers[l].info = li[l];
        moe8_plan_layer(&m->cfg, l, &m->layers[l].plan);
    }
    *lm_head = moe8_quant_desc_lm_head(qd, st_has, m->st);
    free(li);
    moe8_quant_desc_free(qd);
    return st;
}

/* Everything moe8_model_load does on one rank. */
static moe8_status load_parts(moe8_model *m, const char *dir, const moe8_model_params *params,
                              moe8_error *err) {
    moe8_quant_type lm_head = MOE8_QUANT_FLOAT;
    moe8_status st;
    m->params = params ? *params : moe8_model_params_default();
    if (m->params.cache_dir && !(m->params.cache_dir = strdup(m->params.cache_dir)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    if ((st = load_config(m, err)) != MOE8_OK) return st;
    if (m->arch->kinds.gdn_layers && moe8_dist_size(m->params.dist) > 1 &&
        MOE8_FAM(&m->cfg)->linear_num_key_heads % moe8_dist_size(m->params.dist))
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': %s: linear_num_key_heads %lld "
                         "over %d ranks (not a multiple) not supported yet", dir,
                         m->arch->model_type, (long long)MOE8_FAM(&m->cfg)->linear_num_key_heads,
                         moe8_dist_size(m->params.dist));
    if ((st = load_generation_config(m, err)) != MOE8_OK) return st;
    if ((st = moe8_st_open(dir, &m->st, err)) != MOE8_OK) return st;
    if ((st = resolve_quant(m, &lm_head, err)) != MOE8_OK) return st;
    return bind_all(m, lm_head, err);
}

/* ======================================================================== */
/* Public API                                                                */
/* ======================================================================== */

moe8_model_params moe8_model_params_default(void) {
    moe8_model_params p;
    memset(&p, 0, sizeof p);
    return p;
}

moe8_status moe8_model_load(const char *dir, const moe8_model_params *params, moe8_model **out,
                            moe8_error *err) {
    moe8_dist *dist = params ? params->dist : NULL;
    moe8_model *m;
    moe8_status st;
    int multi = moe8_dist_size(dist) > 1;
    if (!out) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "model load: NULL output");
    *out = NULL;
    if (!dir) st = moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "model load: NULL folder");
    else if ((st = moe8_kernels_check(err)) != MOE8_OK) (void)0; /* a bad MOE8_ISA */
    else if (params && (params->n_threads < 0 || params->n_threads > MOE8_MAX_THREADS))
        st = moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "model load: n_threads %d must be in "
                       "[0, %d] (0 = default)", params->n_threads, MOE8_MAX_THREADS);
    else if (!(m = calloc(1, sizeof *m)) || !(m->dir = strdup(dir))) {
        free(m);
        st = moe8_fail(err, MOE8_ERR_NOMEM, -1, "model load: out of memory");
    } else {
        m->refs = 1;
        pthread_mutex_init(&m->prep_lock, NULL);
        st = load_parts(m, dir, params, err);
        if (!st && !multi) st = moe8_dist_shard_of(&m->cfg, 0, 1, 0, &m->shard, err);
        /* Every rank reports here, failed or not, so none is left waiting. */
        if (multi) st = moe8_model_load_check(dist, st ? NULL : m, st, err);
        if (!st) {
            *out = m;
            return MOE8_OK;
        }
        moe8_model_free(m);
        return st;
    }
    return multi ? moe8_model_load_check(dist, NULL, st, err) : st;
}

/* The model stays alive while contexts hold it (moe8_model_ref): the last of
 * moe8_model_free and the contexts' unrefs frees it. */
static void model_destroy(moe8_model *m) {
    moe8_model_release_prepared(m); /* before the map its weights may point into */
    pthread_mutex_destroy(&m->prep_lock);
    moe8_st_free(m->st);
    moe8_gptoss_free(m);
    free(m->stacked);
    free(m->expert_store);
    free(m->layers);
    free((char *)m->params.cache_dir);
    free(m->dir);
    free(m);
}

void moe8_model_ref(moe8_model *m) { __atomic_add_fetch(&m->refs, 1, __ATOMIC_ACQ_REL); }

void moe8_model_unref(moe8_model *m) {
    if (m && __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) == 0) model_destroy(m);
}

void moe8_model_free(moe8_model *m) { moe8_model_unref(m); }
