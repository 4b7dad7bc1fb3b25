/*
 * quantize.c — moe8_quantize: a float model folder of any supported family to
 * a ModelSlim-layout W8A8 checkpoint (moe8.h "Model tools"; SEMANTICS §4-§6).
 * Which tensor is what comes from the family's descriptor (src/arch).
 *
 * Steps: load the input with moe8_model_load (so a bad folder gets the
 * loader's error), refuse a quantized input, calibrate the W8A8 static
 * linears on the float model (calib.c), drop the model, then stream every
 * tensor of the input's safetensors set, in the set's order:
 *   experts' (and a shared expert's) linears        -> W8A8_DYNAMIC (down_proj FLOAT
 *                                                      with down_proj_float; the
 *                                                      routed ones W4A8_DYNAMIC
 *                                                      with experts_w4a8)
 *   lm_head.weight, with lm_head_w8a8               -> W8A8_DYNAMIC (a moe8
 *                                                      extension; refused when
 *                                                      tied: embed stays float)
 *   self_attn.{q,k,v,o}_proj.weight, dense MLP      -> W8A8 static (W4A8_DYNAMIC
 *                                                      with linear_w4a8, moe8's own:
 *                                                      no calibration, a q/k/v
 *                                                      bias stays FLOAT, added after)
 *   self_attn.{q,k,v}_proj.bias (qwen2_moe)         -> folded into that linear's
 *                                                      quant_bias, not written
 *   anything else (router, embed, norms, lm_head)   -> FLOAT, bytes unchanged
 * The hybrids (qwen3_next, qwen3_5_moe: kinds.gdn_layers) follow msModelSlim's
 * W8A8 recipe instead: W8A8_DYNAMIC for the full-attention q/k/v_proj
 * (FLOAT with linear_float), qwen3_next's in_proj_qkvz (likewise) and the
 * routed experts; everything else FLOAT (in_proj_ba / qkv / z / b / a,
 * conv1d, A_log, dt_bias, norms, o_proj, out_proj, router, shared expert and
 * its gate); nothing calibrated, smoothing not applied; with experts_w4a8
 * the routed experts W4A8_DYNAMIC instead (the rest of the recipe as is).
 * qwen3_5_moe's stacked experts (gate_up_proj [E][2I][H], down_proj
 * [E][H][I]) are written per expert (mlp.experts.E.{gate,up,down}_proj, the
 * names the loader reads quantized, as msModelSlim's checkpoints carry them);
 * so are gpt_oss's, MXFP4 or float, with their biases (quantize_gptoss.c),
 * its o_proj bias folded like q/k/v's.
 * Output tensors of one source tensor (a "group") are planned together and
 * stay in one file:
 *   W8A8_DYNAMIC  .weight I8 [N][K], .weight_scale F32 [N][1],
 *                 .weight_offset F32 [N][1] (zeros)
 *   W4A8_DYNAMIC  .weight I8 [N/2][K] (msModelSlim's int4 pairs, SEMANTICS §4b),
 *                 .weight_scale, .weight_offset as above, .scale_bias F32
 *                 8·Σ_k Wq·S as [N][1], for down_proj per 16 K chunks [N][16]
 *                 (when 16 divides K; else [N][1])
 * Int4 codes (quant_row4): per row, symmetric, clip search. For clip ratios
 * c = 1, 0.95, ..., 0.5 the scale c·amax/7 gives codes clamp(rintf(w /
 * scale), -8, 7); the row keeps the c whose Σ (w - scale·code)² is least
 * (ties: the larger c). Like msModelSlim's ssz search it minimises the row's
 * own weight error over candidate scales, without its iterative refinement:
 * clipping the few largest weights of a row buys finer steps for all the
 * others, which int4's 16 levels need and int8's 255 do not.
 *   W8A8          the three above, .input_scale F32 [1], .input_offset I8 [1],
 *                 .deq_scale [N] I64 (fp32 bits, sign-extended as ModelSlim
 *                 does) or F32, .quant_bias I32 [N]
 * With x ~ s·(xq - o) and W ~ ws·Wq (SEMANTICS §5):
 *   x·W^T ~ s·ws·(xq·Wq^T - o·Σ_k Wq)  =>  deq_scale = fp32(s·ws),
 *   quant_bias = -o·Σ_k Wq
 * (an all-zero row, output 0 whatever its scale, gets deq_scale FLT_MIN, as
 * the loader wants it > 0). A float bias b of q/k/v is folded as msModelSlim
 * does: quant_bias += round(b / deq_scale) (fp32 division, ties to even). What the loader would refuse is refused here:
 * a non-finite weight (MOE8_ERR_FORMAT naming tensor and row), a non-finite
 * activation in calibration (calib.c), a width or quant_bias at which the
 * int32 accumulator could wrap.
 * Each source tensor's mapped pages are released once written, so resident
 * memory stays near one tensor (its int8 codes and one fp32 row per thread).
 *
 * Does not: quantize embeddings, router, norms, or lm_head unless asked; smooth or clip
 * activations; handle already-quantized inputs.
 */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "arch/arch.h"
#include "core/core.h"
#include "load/model.h"
#include "convert/convert.h"

moe8_quantize_params moe8_quantize_params_default(void) {
    moe8_quantize_params p;
    memset(&p, 0, sizeof p);
    return p;
}

float moe8_quant_row(int8_t *q, const float *w, int64_t k, int64_t *sum) {
    float amax = 0.0f, scale;
    int64_t s = 0;
    for (int64_t j = 0; j < k; j++) {
        float a = fabsf(w[j]);
        if (!isfinite(a)) {
            memset(q, 0, (size_t)k);
            *sum = 0;
            return -1.0f;
        }
        if (a > amax) amax = a;
    }
    scale = amax / 127.0f;
    for (int64_t j = 0; j < k; j++) {
        float v = scale > 0.0f ? moe8_round_even(w[j] / scale) : 0.0f;
        v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
        q[j] = (int8_t)v;
        s += q[j];
    }
    *sum = s;
    return scale;
}

/* ======================================================================== */
/* Which tensors are quantized                                               */
/* ======================================================================== */

typedef enum {
    KIND_FLOAT = 0,
    KIND_STATIC,
    KIND_DYNAMIC,
    KIND_FOLDED,   /* the bias of a W8A8 static q/k/v: folded into its quant_bias, not written */
    KIND_W4,       /* W4A8_DYNAMIC gate/up: scale_bias [N][1] */
    KIND_W4_DOWN,  /* W4A8_DYNAMIC down_proj: scale_bias [N][16] */
} qkind;

/* What to write for source tensor t of a model of family a and config c
 * (a name the descriptor does not know stays FLOAT); for W8A8 static also
 * the layer and calibration site of its input. */
static qkind classify(const moe8_tensor *t, const moe8_arch_desc *a, const moe8_config *c,
                      const moe8_quantize_params *p, int *layer, int *site) {
    const moe8_role_info *ri;
    moe8_role r;
    int64_t l, e;
    const char *suffix;
    if (moe8_arch_parse(a, t->name, &r, &l, &e, &suffix)) return KIND_FLOAT;
    if (!strcmp(suffix, "bias") && MOE8_FAM(c)->qkv_bias && !p->linear_float &&
        !p->linear_w4a8 && l >= 0 &&
        l < c->num_hidden_layers &&
        (r == MOE8_R_Q || r == MOE8_R_K || r == MOE8_R_V ||
         (r == MOE8_R_O && (a->kinds.attn_opts & MOE8_ATTN_O_BIAS))))
        return KIND_FOLDED; /* o's too (gpt_oss): folded on rank 0's columns */
    if (t->n_dims != 2 || (t->dtype != MOE8_DT_F32 && t->dtype != MOE8_DT_BF16 &&
                           t->dtype != MOE8_DT_F16) || strcmp(suffix, "weight"))
        return KIND_FLOAT;
    ri = moe8_role_of(r);
    if (r == MOE8_R_LM_HEAD)   /* untied: moe8_quantize refuses tied models */
        return p->lm_head_w8a8 ? KIND_DYNAMIC : KIND_FLOAT;
    if (l < 0 || l >= c->num_hidden_layers || !moe8_arch_in_layer(a, c, r, l)) return KIND_FLOAT;
    if (a->kinds.gdn_layers) { /* msModelSlim's hybrid recipe (header) */
        if (ri->kind == MOE8_KIND_EXPERT)
            return e < 0 || e >= c->num_experts ? KIND_FLOAT
                   : p->experts_w4a8 ? (r == MOE8_R_EXP_DOWN ? KIND_W4_DOWN : KIND_W4)
                   : r == MOE8_R_EXP_DOWN && p->down_proj_float ? KIND_FLOAT : KIND_DYNAMIC;
        return !p->linear_float && (r == MOE8_R_Q || r == MOE8_R_K || r == MOE8_R_V ||
                                    r == MOE8_R_GDN_QKVZ) ? KIND_DYNAMIC : KIND_FLOAT;
    }
    switch (ri->kind) {
    case MOE8_KIND_EXPERT:
        if (e < 0 || e >= c->num_experts) return KIND_FLOAT;
        if (p->experts_w4a8) return r == MOE8_R_EXP_DOWN ? KIND_W4_DOWN : KIND_W4;
        return r == MOE8_R_EXP_DOWN && p->down_proj_float ? KIND_FLOAT : KIND_DYNAMIC;
    case MOE8_KIND_SHARED:   /* like the routed experts (docs/MODELS.md) */
        return r == MOE8_R_SHEXP_DOWN && p->down_proj_float ? KIND_FLOAT : KIND_DYNAMIC;
    case MOE8_KIND_LINEAR:
        if (p->linear_float) return KIND_FLOAT;
        if (p->linear_w4a8) /* row-parallel ones: scale_bias per 16 K chunks, as down_proj's */
            return r == MOE8_R_O || r == MOE8_R_MLP_DOWN ? KIND_W4_DOWN : KIND_W4;
        *layer = (int)l;
        *site = r == MOE8_R_O          ? MOE8_CALIB_O
                : r == MOE8_R_Q_B      ? MOE8_CALIB_QB
                : r == MOE8_R_MLP_DOWN ? MOE8_CALIB_DOWN
                : r == MOE8_R_MLP_GATE || r == MOE8_R_MLP_UP ? MOE8_CALIB_MLP
                                                             : MOE8_CALIB_QKV;
        return KIND_STATIC;
    default: /* MOE8_KIND_ABSORBED (kv_b_proj) stays FLOAT: MLA runs it dequantized anyway */
        return KIND_FLOAT;
    }
}

/* ======================================================================== */
/* Planning                                                                  */
/* ======================================================================== */

typedef struct {
    const moe8_quantize_params *p;
    moe8_config cfg;
    const moe8_arch_desc *arch;
    moe8_range *ranges;        /* [layers][MOE8_CALIB_SITES], NULL with linear_float */
    moe8_st *src;
    moe8_shards *sh;
    cJSON *desc;
    moe8_quantize_stats *stats;
} qz;

static const char *kind_name(qkind k) {
    return k == KIND_STATIC ? "W8A8" : k == KIND_DYNAMIC ? "W8A8_DYNAMIC"
           : k == KIND_W4 || k == KIND_W4_DOWN ? "W4A8_DYNAMIC" : "FLOAT";
}

/* Columns of a W4A8 scale_bias: 16 K chunks for down_proj as msModelSlim writes it. */
static int64_t sb_cols(qkind k, int64_t K) { return k == KIND_W4_DOWN && K % 16 == 0 ? 16 : 1; }

/* "<prefix>.weight" -> "<prefix>.<suffix>" */
static void companion(char *out, size_t cap, const char *weight_name, const char *suffix) {
    size_t n = strlen(weight_name) - strlen("weight");
    snprintf(out, cap, "%.*s%s", (int)n, weight_name, suffix);
}

static moe8_status plan_one(qz *z, const char *name, moe8_dtype dt, int n_dims, int64_t d0,
                            int64_t d1, qkind k, moe8_error *err) {
    const int64_t shape[2] = {d0, d1};
    if (!cJSON_AddStringToObject(z->desc, name, kind_name(k)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    z->stats->n_tensors_out++;
    return moe8_shards_plan(z->sh, name, dt, n_dims, shape, err);
}

static moe8_status plan_group(qz *z, const moe8_tensor *t, qkind k, moe8_error *err) {
    const int64_t N = t->n_dims ? t->shape[0] : 1, K = t->n_dims == 2 ? t->shape[1] : 1;
    const moe8_dtype deq = z->p->deq_scale_f32 ? MOE8_DT_F32 : MOE8_DT_I64;
    char n[512];
    moe8_status st;
    if (k == KIND_FOLDED) return MOE8_OK;
    if (k == KIND_FLOAT) {
        moe8_shards_group(z->sh, t->n_bytes);
        if (!cJSON_AddStringToObject(z->desc, t->name, "FLOAT"))
            return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
        z->stats->n_tensors_out++;
        return moe8_shards_plan(z->sh, t->name, t->dtype, t->n_dims, t->shape, err);
    }
    if ((k == KIND_W4 || k == KIND_W4_DOWN) && N % 2)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "tensor '%s': %lld output channels: "
                         "W4A8_DYNAMIC packs them in pairs", t->name, (long long)N);
    if (k == KIND_W4 || k == KIND_W4_DOWN) {
        moe8_shards_group(z->sh, (uint64_t)(N / 2) * (uint64_t)K + 8 * (uint64_t)N +
                                 4 * (uint64_t)N * (uint64_t)sb_cols(k, K));
        if ((st = plan_one(z, t->name, MOE8_DT_I8, 2, N / 2, K, k, err))) return st;
        companion(n, sizeof n, t->name, "weight_scale");
        if ((st = plan_one(z, n, MOE8_DT_F32, 2, N, 1, k, err))) return st;
        companion(n, sizeof n, t->name, "weight_offset");
        if ((st = plan_one(z, n, MOE8_DT_F32, 2, N, 1, k, err))) return st;
        companion(n, sizeof n, t->name, "scale_bias");
        return plan_one(z, n, MOE8_DT_F32, 2, N, sb_cols(k, K), k, err);
    }
    moe8_shards_group(z->sh, (uint64_t)N * (uint64_t)K + 8 * (uint64_t)N +
                             (k == KIND_STATIC ? 12 * (uint64_t)N + 5 : 0));
    if ((st = plan_one(z, t->name, MOE8_DT_I8, 2, N, K, k, err))) return st;
    companion(n, sizeof n, t->name, "weight_scale");
    if ((st = plan_one(z, n, MOE8_DT_F32, 2, N, 1, k, err))) return st;
    companion(n, sizeof n, t->name, "weight_offset");
    if ((st = plan_one(z, n, MOE8_DT_F32, 2, N, 1, k, err))) return st;
    if (k == KIND_DYNAMIC) return MOE8_OK;
    companion(n, sizeof n, t->name, "input_scale");
    if ((st = plan_one(z, n, MOE8_DT_F32, 1, 1, 0, k, err))) return st;
    companion(n, sizeof n, t->name, "input_offset");
    if ((st = plan_one(z, n, MOE8_DT_I8, 1, 1, 0, k, err))) return st;
    companion(n, sizeof n, t->name, "deq_scale");
    if ((st = plan_one(z, n, deq, 1, N, 0, k, err))) return st;
    companion(n, sizeof n, t->name, "quant_bias");
    return plan_one(z, n, MOE8_DT_I32, 1, N, 0, k, err);
}

/* ======================================================================== */
/* Writing                                                                   */
/* ======================================================================== */

typedef struct {
    int8_t *codes;     /* [N][K] */
    float *scale;      /* [N] */
    float *zero;       /* [N] zeros */
    int64_t *sum;      /* [N] Σ_k codes */
    int64_t *deq;      /* [N] I64 or F32 (fits either) */
    int32_t *bias;     /* [N] */
    float *bias_in;    /* [N] the float bias of a W8A8 q/k/v (qkv_bias), or NULL */
} qbufs;

static void qbufs_free(qbufs *b) {
    free(b->codes);
    free(b->scale);
    free(b->zero);
    free(b->sum);
    free(b->deq);
    free(b->bias);
    free(b->bias_in);
}

/* The first non-finite element of row i of t (file: its path), as an error. */
static moe8_status bad_row(const moe8_tensor *t, const char *file, int64_t i, moe8_error *err) {
    const int64_t K = t->shape[1];
    const size_t esz = moe8_dtype_size(t->dtype);
    for (int64_t j = 0; j < K; j++) {
        float v;
        moe8_convert_to_f32(&v, (const char *)t->data + ((size_t)i * (size_t)K + (size_t)j) * esz,
                            t->dtype, 1, NULL);
        if (!isfinite(v))
            return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': row %lld, column %lld "
                             "is %g: cannot quantize a non-finite weight", file, t->name,
                             (long long)i, (long long)j, v);
    }
    return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': tensor '%s': row %lld holds a non-finite "
                     "weight", file, t->name, (long long)i);
}

/* Codes, scales and row sums of t[N][K]; a non-finite weight is an error
 * naming the first such row. */
/* Int4 codes of one row (the clip search of the header): the scale, -1 for
 * a non-finite weight, 0 (codes 0) for an all-zero row; *sum = Σ codes. */
static float quant_row4(int8_t *q, const float *w, int64_t K, int64_t *sum) {
    float amax = 0.0f, best = 0.0f;
    double best_err = INFINITY;
    for (int64_t j = 0; j < K; j++) {
        if (!isfinite(w[j])) return -1.0f;
        amax = fmaxf(amax, fabsf(w[j]));
    }
    *sum = 0;
    if (amax == 0.0f) {
        memset(q, 0, (size_t)K);
        return 0.0f;
    }
    for (int c = 20; c >= 10; c--) { /* ratio c / 20 */
        const float s = (float)c / 20.0f * amax / 7.0f;
        double e = 0.0;
        for (int64_t j = 0; j < K; j++) {
            const float v = fminf(fmaxf(moe8_round_even(w[j] / s), -8.0f), 7.0f);
            e += ((double)w[j] - (double)s * v) * ((double)w[j] - (double)s * v);
        }
        if (e < best_err) best_err = e, best = s;
    }
    for (int64_t j = 0; j < K; j++) {
        q[j] = (int8_t)fminf(fmaxf(moe8_round_even(w[j] / best), -8.0f), 7.0f);
        *sum += q[j];
    }
    return best;
}

static moe8_status quant_weight(const moe8_tensor *t, const char *file, int w4, qbufs *b,
                                moe8_error *err) {
    const int64_t N = t->shape[0], K = t->shape[1];
    const size_t esz = moe8_dtype_size(t->dtype);
    int64_t first_bad = N;
    int failed = 0;
    b->codes = malloc((size_t)N * (size_t)K);
    b->scale = malloc((size_t)N * sizeof(float));
    b->zero = calloc((size_t)N, sizeof(float));
    b->sum = malloc((size_t)N * sizeof(int64_t));
    b->deq = malloc((size_t)N * sizeof(int64_t));
    b->bias = malloc((size_t)N * sizeof(int32_t));
    if (!b->codes || !b->scale || !b->zero || !b->sum || !b->deq || !b->bias)
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': out of memory", t->name);
#pragma omp parallel reduction(| : failed) reduction(min : first_bad)
    {
        float *row = malloc((size_t)K * sizeof(float));
        failed |= row == NULL;
#pragma omp for schedule(static)
        for (int64_t i = 0; i < N; i++) {
            if (!row) continue;
            moe8_convert_to_f32(row, (const char *)t->data + (size_t)i * (size_t)K * esz, t->dtype,
                                (size_t)K, NULL);
            b->scale[i] = w4 ? quant_row4(b->codes + (size_t)i * (size_t)K, row, K, &b->sum[i])
                             : moe8_quant_row(b->codes + (size_t)i * (size_t)K, row, K, &b->sum[i]);
            if (b->scale[i] < 0.0f && i < first_bad) first_bad = i;
        }
        free(row);
    }
    if (failed) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': out of memory", t->name);
    if (first_bad < N) return bad_row(t, file, first_bad, err);
    return MOE8_OK;
}

/* The float bias of q/k/v row i, folded into quant_bias as msModelSlim
 * does: round(bias / deq_scale) in fp32, ties to even (an all-zero row, whose
 * product is 0, gets deq_scale |bias| / 16384 so the bias stays exact to
 * 1/16384 of itself). *d is the row's deq_scale (may be changed). */
static moe8_status fold_bias(const moe8_tensor *t, int64_t i, float bias, int zero_row, float *d,
                             int64_t *q, moe8_error *err) {
    float v;
    if (!isfinite(bias))
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "tensor '%s': row %lld: bias %g is not "
                         "finite", t->name, (long long)i, bias);
    if (zero_row && bias != 0.0f) *d = fabsf(bias) / 16384.0f > FLT_MIN ? fabsf(bias) / 16384.0f
                                                                      : FLT_MIN;
    v = moe8_round_even(bias / *d);
    if (!(fabsf(v) <= 2147483648.0f))
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "tensor '%s': row %lld: bias %g / "
                         "deq_scale %g does not fit the int32 quant_bias", t->name, (long long)i,
                         bias, *d);
    *q += (int64_t)v;
    return MOE8_OK;
}

/* deq_scale and quant_bias of a W8A8 static linear with input (s, o) and
 * float bias b->bias_in (NULL: none), within what moe8_model_load accepts:
 * deq_scale finite and > 0 (an all-zero row, whose output is 0 whatever its
 * scale, gets FLT_MIN), |quant_bias| + 16384 x K <= INT32_MAX so the int32
 * accumulator cannot wrap. */
static moe8_status static_params(const moe8_tensor *t, qbufs *b, float s, int o, int deq_f32,
                                 moe8_error *err) {
    const int64_t room = INT32_MAX - MOE8_W8A8_MAX_PRODUCT * t->shape[1];
    if (room < 0)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "tensor '%s': %lld inputs: W8A8 int8 "
                         "products would overflow the int32 accumulator (at most %d inputs)",
                         t->name, (long long)t->shape[1], INT32_MAX / MOE8_W8A8_MAX_PRODUCT);
    for (int64_t i = 0; i < t->shape[0]; i++) {
        float d = b->scale[i] == 0.0f ? FLT_MIN : s * b->scale[i];
        int64_t bias = -(int64_t)o * b->sum[i];
        uint32_t bits;
        moe8_status st;
        if (b->bias_in &&
            (st = fold_bias(t, i, b->bias_in[i], b->scale[i] == 0.0f, &d, &bias, err)))
            return st;
        if (bias < -room || bias > room)
            return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "tensor '%s': row %lld: quant_bias "
                             "%lld: |bias| + %d x %lld inputs overflows the int32 accumulator",
                             t->name, (long long)i, (long long)bias, MOE8_W8A8_MAX_PRODUCT,
                             (long long)t->shape[1]);
        if (!isfinite(d) || !(d > 0.0f))
            return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "tensor '%s': row %lld: deq_scale = "
                             "input scale %g x weight scale %g = %g, not a finite value > 0",
                             t->name, (long long)i, s, b->scale[i], d);
        b->bias[i] = (int32_t)bias;
        memcpy(&bits, &d, 4);
        if (deq_f32) memcpy((float *)b->deq + i, &d, 4);
        else b->deq[i] = (int64_t)(int32_t)bits;
    }
    return MOE8_OK;
}

/* b->bias_in = fp32 "<prefix>.bias" of weight t when the source has it. */
static moe8_status read_bias(const qz *z, const moe8_tensor *t, qbufs *b, moe8_error *err) {
    char n[512];
    const moe8_tensor *bt;
    companion(n, sizeof n, t->name, "bias");
    if (!(bt = moe8_st_find(z->src, n))) return MOE8_OK;
    if (bt->n_elements != t->shape[0])
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "tensor '%s': %lld elements, expected %lld",
                         n, (long long)bt->n_elements, (long long)t->shape[0]);
    if (!(b->bias_in = malloc((size_t)t->shape[0] * sizeof(float))))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': out of memory", n);
    for (int64_t i = 0; i < t->shape[0]; i++) b->bias_in[i] = moe8_tensor_f32_at(bt, i);
    return MOE8_OK;
}

/* A W4A8_DYNAMIC group from its codes (SEMANTICS §4b): pairs of rows into
 * bytes (row 2j low nibble), scales, zero offsets, and scale_bias = 8·Σ Wq·S
 * in fp32 (per 16 K chunks for down_proj), as msModelSlim computes it. */
static moe8_status write_w4(qz *z, const moe8_tensor *t, qkind k, const qbufs *b,
                            moe8_error *err) {
    const int64_t N = t->shape[0], K = t->shape[1], nc = sb_cols(k, K);
    uint8_t *packed = malloc((size_t)(N / 2) * (size_t)K);
    float *sb = malloc((size_t)(N * nc) * sizeof(float));
    char n[512];
    moe8_status st = MOE8_OK;
    if (!packed || !sb) st = moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': out of memory", t->name);
    for (int64_t j = 0; !st && j < N / 2; j++)
        for (int64_t c = 0; c < K; c++)
            packed[j * K + c] = (uint8_t)((b->codes[2 * j * K + c] & 15) |
                                          (b->codes[(2 * j + 1) * K + c] & 15) << 4);
    for (int64_t i = 0; !st && i < N; i++)
        for (int64_t c = 0; c < nc; c++) {
            float s = 0.0f;
            for (int64_t j = c * (K / nc); j < (c + 1) * (K / nc); j++)
                s += (float)b->codes[i * K + j] * b->scale[i];
            sb[i * nc + c] = 8.0f * s;
        }
    if (!st) st = moe8_shards_write(z->sh, t->name, packed, (size_t)(N / 2) * (size_t)K, err);
    companion(n, sizeof n, t->name, "weight_scale");
    if (!st) st = moe8_shards_write(z->sh, n, b->scale, (size_t)N * 4, err);
    companion(n, sizeof n, t->name, "weight_offset");
    if (!st) st = moe8_shards_write(z->sh, n, b->zero, (size_t)N * 4, err);
    companion(n, sizeof n, t->name, "scale_bias");
    if (!st) st = moe8_shards_write(z->sh, n, sb, (size_t)(N * nc) * 4, err);
    free(packed);
    free(sb);
    return st;
}

static moe8_status write_quant(qz *z, const moe8_tensor *t, qkind k, int layer, int site,
                               moe8_error *err) {
    const int64_t N = t->shape[0], K = t->shape[1];
    qbufs b;
    char n[512];
    float s = 0.0f;
    int o = 0;
    int8_t o8;
    moe8_status st;
    const char *file = moe8_st_file_path(z->src, t->file_index);
    memset(&b, 0, sizeof b);
    st = quant_weight(t, file ? file : "?", k == KIND_W4 || k == KIND_W4_DOWN, &b, err);
    if (k == KIND_W4 || k == KIND_W4_DOWN) {
        if (!st) st = write_w4(z, t, k, &b, err);
        qbufs_free(&b);
        return st;
    }
    if (!st && k == KIND_STATIC && MOE8_FAM(&z->cfg)->qkv_bias &&
        (site == MOE8_CALIB_QKV || site == MOE8_CALIB_O)) /* no o bias: nothing read */
        st = read_bias(z, t, &b, err);
    if (!st && k == KIND_STATIC) {
        if (moe8_range_params(&z->ranges[(size_t)layer * MOE8_CALIB_SITES + site], &s, &o))
            st = moe8_fail(err, MOE8_ERR_FORMAT, -1, "tensor '%s': calibration range of layer %d "
                           "not finite", t->name, layer); /* moe8_calibrate refuses it first */
        else
            st = static_params(t, &b, s, o, z->p->deq_scale_f32, err);
    }
    if (!st) st = moe8_shards_write(z->sh, t->name, b.codes, (size_t)N * (size_t)K, err);
    companion(n, sizeof n, t->name, "weight_scale");
    if (!st) st = moe8_shards_write(z->sh, n, b.scale, (size_t)N * 4, err);
    companion(n, sizeof n, t->name, "weight_offset");
    if (!st) st = moe8_shards_write(z->sh, n, b.zero, (size_t)N * 4, err);
    if (!st && k == KIND_STATIC) {
        o8 = (int8_t)o;
        companion(n, sizeof n, t->name, "input_scale");
        if (!st) st = moe8_shards_write(z->sh, n, &s, 4, err);
        companion(n, sizeof n, t->name, "input_offset");
        if (!st) st = moe8_shards_write(z->sh, n, &o8, 1, err);
        companion(n, sizeof n, t->name, "deq_scale");
        if (!st) st = moe8_shards_write(z->sh, n, b.deq, (size_t)N * (z->p->deq_scale_f32 ? 4 : 8), err);
        companion(n, sizeof n, t->name, "quant_bias");
        if (!st) st = moe8_shards_write(z->sh, n, b.bias, (size_t)N * 4, err);
    }
    qbufs_free(&b);
    return st;
}

/* ======================================================================== */
/* Stacked experts (qwen3_5_moe: gate_up_proj [E][2I][H], down_proj [E][H][I]) */
/* ======================================================================== */

/* The number of per-expert tensors stacked t splits into (E gate + E up
 * for gate_up_proj, E for down_proj: the names the loader reads per expert,
 * as msModelSlim's checkpoints carry them), 0 for a tensor not stacked;
 * *layer its layer, *gu 1 for gate_up_proj. */
static int64_t stacked_parts(const qz *z, const moe8_tensor *t, int64_t *layer, int *gu,
                             moe8_error *err, moe8_status *st) {
    const moe8_arch_desc *a = z->arch;
    const int64_t E = z->cfg.num_experts, I = z->cfg.moe_intermediate_size, H = z->cfg.hidden_size;
    char n[256];
    *st = MOE8_OK;
    if (!(a->kinds.tensors & MOE8_TENSORS_STACKED_EXPERTS) || !a->stacked_gate_up ||
        t->n_dims != 3)
        return 0;
    for (int64_t l = 0; l < z->cfg.num_hidden_layers; l++)
        for (int g = 0; g < 2; g++) {
            snprintf(n, sizeof n, g ? a->stacked_gate_up : a->stacked_down, (long long)l);
            if (strcmp(n, t->name)) continue;
            if (t->n_dims != 3 || t->shape[0] != E || t->shape[1] != (g ? 2 * I : H) ||
                t->shape[2] != (g ? H : I)) { /* the loader checked it first */
                *st = moe8_fail(err, MOE8_ERR_FORMAT, -1, "tensor '%s': not [E][%s]", t->name,
                                g ? "2I][H" : "H][I");
                return 0;
            }
            *layer = l, *gu = g;
            return g ? 2 * E : E;
        }
    return 0;
}

/* view = part j of stacked t (stacked_parts): expert j / 2's gate (j even)
 * or up rows of gate_up_proj, or expert j's down_proj, named per expert. */
static moe8_status stacked_part(const qz *z, const moe8_tensor *t, int64_t layer, int gu,
                                int64_t j, moe8_tensor *view, char *name, size_t cap,
                                moe8_error *err) {
    const int64_t e = gu ? j / 2 : j, rows = t->shape[1] / (gu ? 2 : 1), K = t->shape[2];
    const int64_t r0 = e * t->shape[1] + (gu && j % 2 ? rows : 0);
    const moe8_role r = !gu ? MOE8_R_EXP_DOWN : j % 2 ? MOE8_R_EXP_UP : MOE8_R_EXP_GATE;
    if (moe8_arch_tensor_name(z->arch, r, layer, e, "weight", name, cap))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "tensor '%s': no per-expert name", t->name);
    *view = *t;
    view->name = name;
    view->n_dims = 2;
    view->shape[0] = rows, view->shape[1] = K, view->shape[2] = 0;
    view->n_elements = rows * K;
    view->n_bytes = (size_t)view->n_elements * moe8_dtype_size(t->dtype);
    view->data = (const char *)t->data + (size_t)(r0 * K) * moe8_dtype_size(t->dtype);
    return MOE8_OK;
}

/* Plan (write 0) or write (write 1) one source tensor: its group, or each
 * per-expert part of a stacked one. */
static moe8_status do_tensor(qz *z, const moe8_tensor *t, int write, moe8_error *err) {
    int layer = 0, site = 0, gu = 0;
    int64_t sl = 0, np;
    moe8_status st;
    char name[256];
    moe8_tensor view;
    const int64_t gx = moe8_qz_gptoss_parts(z->arch, &z->cfg, t); /* gpt_oss's experts */
    if (gx < 0) return MOE8_OK;
    if (gx > 0) np = gx;
    else if ((np = stacked_parts(z, t, &sl, &gu, err, &st)) == 0 && st) return st;
    for (int64_t j = 0; j < (np ? np : 1); j++) {
        const moe8_tensor *s = t;
        float *buf = NULL;
        qkind k;
        if (gx && (st = moe8_qz_gptoss_part(z->arch, &z->cfg, z->src, t, j, &view,
                                            write ? &buf : NULL, name, sizeof name, err)))
            return st;
        if (!gx && np && (st = stacked_part(z, t, sl, gu, j, &view, name, sizeof name, err)))
            return st;
        if (np) s = &view;
        k = classify(s, z->arch, &z->cfg, z->p, &layer, &site);
        st = !write ? plan_group(z, s, k, err)
             : k == KIND_FOLDED ? MOE8_OK
             : k == KIND_FLOAT ? moe8_shards_write(z->sh, s->name, s->data, s->n_bytes, err)
                               : write_quant(z, s, k, layer, site, err);
        free(buf);
        if (st) return st;
    }
    return MOE8_OK;
}

/* Plan every group, then write them in the same order. */
static moe8_status write_tensors(qz *z, const char *dir, moe8_error *err) {
    const size_t n = moe8_st_count(z->src);
    uint64_t done = 0, total = 0;
    moe8_status st = moe8_shards_new(dir, z->p->shard_bytes, &z->sh, err);
    for (size_t i = 0; !st && i < n; i++) {
        const moe8_tensor *t = moe8_st_get(z->src, i);
        st = do_tensor(z, t, 0, err);
        total += t->n_bytes;
    }
    for (size_t i = 0; !st && i < n; i++) {
        const moe8_tensor *t = moe8_st_get(z->src, i);
        st = do_tensor(z, t, 1, err);
        moe8_st_release(z->src, t);
        done += t->n_bytes;
        if (!st && z->p->progress && z->p->progress(z->p->progress_user, "quantize", done, total))
            st = moe8_fail(err, MOE8_ERR_CANCELLED, -1, "quantize cancelled");
    }
    if (!st) st = moe8_shards_finish(z->sh, err);
    if (!st) {
        z->stats->n_tensors_in = (int64_t)n;
        z->stats->bytes_in = total;
        z->stats->bytes_out = moe8_shards_total_bytes(z->sh);
        z->stats->n_files = moe8_shards_count(z->sh);
    }
    return st;
}

/* ======================================================================== */
/* moe8_quantize                                                             */
/* ======================================================================== */

static moe8_status check_float_model(const moe8_model *m, const char *dir, moe8_error *err) {
    const moe8_config *c = moe8_model_config(m);
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        moe8_layer_info li;
        moe8_model_layer_info(m, l, &li);
        const int mx = moe8_gptoss_is_mxfp4(m, l); /* MXFP4 experts: decoded, not int8 */
        if (li.qkv || li.o || (li.experts && !mx) || (li.experts_down && !mx) ||
            li.mlp_gate_up || li.mlp_down ||
            li.shared_gate_up || li.shared_down || li.gdn_in || li.gdn_z || li.gdn_out)
            return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': layer %lld is already "
                             "quantized; quantize expects a float model", dir, (long long)l);
    }
    if (m->lm_head.quant != MOE8_QUANT_FLOAT)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': lm_head is already quantized; "
                         "quantize expects a float model", dir);
    return MOE8_OK;
}

/* Load the input (checks it), calibrate unless linear_float. */
static moe8_status load_and_calibrate(qz *z, const char *in_dir, moe8_error *err) {
    const moe8_quantize_params *p = z->p;
    moe8_model_params mp = moe8_model_params_default();
    moe8_model *m = NULL;
    moe8_tokenizer *tok = NULL;
    moe8_status st;
    int hybrid;
    mp.n_threads = p->n_threads;
    if ((st = moe8_model_load(in_dir, &mp, &m, err))) return st;
    z->cfg = *moe8_model_config(m);
    z->arch = moe8_arch_get(z->cfg.arch);
    hybrid = z->arch->kinds.gdn_layers; /* no W8A8 static linear: nothing to calibrate */
    st = check_float_model(m, in_dir, err);
    if (!st && hybrid && p->linear_w4a8)
        st = moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': W4A8 linears of %s (hybrid linear "
                       "attention) not supported yet (msModelSlim's recipe: W8A8_DYNAMIC)",
                       in_dir, z->cfg.model_type);
    if (!st && p->lm_head_w8a8 && z->cfg.tie_word_embeddings)
        st = moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "'%s': cannot quantize lm_head: "
                       "tie_word_embeddings is true and the shared embedding must stay float "
                       "(quantize lm_head only for an untied model)", in_dir);
    /* the tokenizer is read only to calibrate (with linear_float it is only
     * copied: a family whose tokenizer this build cannot parse still quantizes) */
    const int calib = !p->linear_float && !p->linear_w4a8 && !hybrid;
    if (!st && calib) st = moe8_tokenizer_load(in_dir, &tok, err);
    if (!st && calib) {
        const char *text = p->calib_text ? p->calib_text : moe8_calib_default_text();
        size_t len = p->calib_text ? p->calib_len : strlen(text);
        size_t n = (size_t)z->cfg.num_hidden_layers * MOE8_CALIB_SITES;
        if (!(z->ranges = calloc(n, sizeof *z->ranges)))
            st = moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
        if (!st && p->progress && p->progress(p->progress_user, "calibrate", 0, 1))
            st = moe8_fail(err, MOE8_ERR_CANCELLED, -1, "quantize cancelled");
        if (!st) st = moe8_calibrate(m, tok, text, len, p->n_threads, z->ranges,
                                     &z->stats->n_calib_tokens, err);
        if (!st && p->progress && p->progress(p->progress_user, "calibrate", 1, 1))
            st = moe8_fail(err, MOE8_ERR_CANCELLED, -1, "quantize cancelled");
    }
    moe8_tokenizer_free(tok);
    moe8_model_free(m);
    return st;
}

static moe8_status write_folder(qz *z, const char *in_dir, const char *dir, moe8_error *err) {
    static const char *optional[] = {"generation_config.json", "tokenizer_config.json",
                                     "vocab.json", "merges.txt", "special_tokens_map.json"};
    char *text;
    moe8_status st;
    if ((st = moe8_st_open(in_dir, &z->src, err))) return st;
    if (!(z->desc = cJSON_CreateObject()) ||
        !cJSON_AddStringToObject(z->desc, "model_quant_type", "W8A8_DYNAMIC") ||
        !cJSON_AddStringToObject(z->desc, "version", "1.0.0") ||
        ((z->p->experts_w4a8 || z->p->linear_w4a8) &&
         !cJSON_AddNumberToObject(z->desc, "group_size", 0)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    if ((st = write_tensors(z, dir, err))) return st;
    if (!(text = cJSON_Print(z->desc))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    st = moe8_write_text(dir, "quant_model_description.json", text, err);
    free(text);
    if (!st) /* gpt_oss: its MXFP4 quantization_config no longer holds */
        st = z->arch->kinds.tensors & MOE8_TENSORS_GPTOSS_EXPERTS
                 ? moe8_qz_gptoss_config(in_dir, dir, err)
                 : moe8_copy_file(in_dir, dir, "config.json", 0, err);
    if (!st) st = moe8_copy_file(in_dir, dir, "tokenizer.json", 0, err);
    for (size_t i = 0; !st && i < sizeof optional / sizeof optional[0]; i++)
        st = moe8_copy_file(in_dir, dir, optional[i], 1, err);
    return st;
}

static moe8_status check_input(const char *in_dir, moe8_error *err) {
    struct stat sb;
    if (!in_dir) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "quantize: no input folder given");
    if (stat(in_dir, &sb) != 0)
        return moe8_fail(err, MOE8_ERR_NOT_FOUND, -1, "input folder '%s' does not exist", in_dir);
    if (!S_ISDIR(sb.st_mode))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "input '%s' is not a folder", in_dir);
    return MOE8_OK;
}

moe8_status moe8_quantize(const char *in_dir, const char *out_dir, const moe8_quantize_params *p,
                          moe8_quantize_stats *stats, moe8_error *err) {
    const moe8_quantize_params def = moe8_quantize_params_default();
    moe8_quantize_stats local;
    moe8_outdir od;
    qz z;
    moe8_status st;
    memset(&z, 0, sizeof z);
    z.p = p ? p : &def;
    z.stats = stats ? stats : &local;
    memset(z.stats, 0, sizeof *z.stats);
    if (z.p->n_threads < 0 || z.p->n_threads > MOE8_MAX_THREADS)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "quantize: n_threads %d must be in "
                         "[0, %d] (0 = default)", z.p->n_threads, MOE8_MAX_THREADS);
    if (z.p->experts_w4a8 && z.p->down_proj_float)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "quantize: W4A8 experts with a FLOAT "
                         "down_proj not supported (W4A8_DYNAMIC gate, up and down)");
    if (z.p->linear_w4a8 && z.p->linear_float)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "quantize: linear_w4a8 and linear_float "
                         "exclude each other");
    if ((st = check_input(in_dir, err))) return st;
    if ((st = moe8_outdir_begin(&od, out_dir, z.p->force, &in_dir, 1, err))) return st;
    st = load_and_calibrate(&z, in_dir, err);
    if (!st) st = write_folder(&z, in_dir, od.tmp, err);
    moe8_shards_free(z.sh);
    moe8_st_free(z.src);
    cJSON_Delete(z.desc);
    free(z.ranges);
    if (!st) st = moe8_outdir_commit(&od, err);
    if (st) moe8_outdir_abort(&od);
    return st;
}
