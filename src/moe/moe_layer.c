/*
 * moe_layer.c — the MoE layer object: build (validate, repack), workspace,
 * forward (SEMANTICS §1-§4) with OpenMP.
 *
 * Build: each local quantized expert is packed into three moe8_qmat (gate and
 * up [I_loc][H] from rows [i_begin, i_end), down [H][I_loc] from columns
 * [i_begin, i_end); W4A8 experts' int4 codes, two a byte in the checkpoint,
 * are unpacked one projection at a time into a scratch and packed in the
 * table's int4 layout, SEMANTICS §4b), scales (and offsets, only when one is non-zero)
 * converted to fp32/int32, all in memory the layer owns. Float experts and the
 * router weight stay where the caller keeps them, in their dtype. A layer
 * with down_float packs gate/up only and keeps every down in place as a float
 * expert's: its down GEMM reads the float A (SwiGLU output), unquantized.
 *
 * Forward: jobs of the thread pool (core/pool.h), chunks claimed at run time:
 *   [router GEMM by expert panels + quantize tokens] -> route + dispatch
 *   (on the calling thread for a few tokens) -> [gather rows of experts with
 *   >= 2 rows] -> [gate/up GEMMs + silu*up by I panels] -> requantize A by
 *   rows (inline for a few rows) -> [down GEMM + combine by H panels];
 *   a decode step is three joins.
 * Experts with one row read the token's own codes in place (no gather: at
 * decode every expert has one row). Every output element is computed by one
 * chunk, the same way for any thread count and any schedule.
 * With packed_take (a model's packed cache) the packed int8 of every
 * local expert is one region of the file, read in place (qdata stays NULL);
 * scales and offsets are still converted here (a few KB per expert).
 * Does not: all-reduce (the caller sums EP/TP partial outputs).
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "core/pool.h"
#include "moe/moe.h"

moe8_moe_layer_desc moe8_moe_layer_desc_default(void) {
    moe8_moe_layer_desc d;
    memset(&d, 0, sizeof d);
    d.quant = MOE8_QUANT_W8A8_DYNAMIC;
    d.router_dtype = MOE8_DT_F32;
    d.router_params = moe8_router_params_default();
    return d;
}

/* ======================================================================== */
/* Build                                                                     */
/* ======================================================================== */

static const char *const proj_name[3] = {"gate_proj", "up_proj", "down_proj"};

static int is_float_dt(moe8_dtype dt) {
    return dt == MOE8_DT_F32 || dt == MOE8_DT_BF16 || dt == MOE8_DT_F16;
}

/* Element i of a scale/offset vector as a double. */
static double read_value(const void *p, moe8_dtype dt, size_t i) {
    switch (dt) {
    case MOE8_DT_F32: return ((const float *)p)[i];
    case MOE8_DT_BF16: return moe8_bf16_to_f32(((const uint16_t *)p)[i]);
    case MOE8_DT_F16: return moe8_f16_to_f32(((const uint16_t *)p)[i]);
    case MOE8_DT_I8: return ((const int8_t *)p)[i];
    case MOE8_DT_I32: return ((const int32_t *)p)[i];
    default: return NAN;
    }
}

/* The slice of one projection: rows [r0, r0+n) of a weight [.][ld], or the
 * columns [c0, c0+k) for down. */
typedef struct {
    int n, k, ld, row0, col0;
} proj_shape;

static proj_shape shape_of(const moe8_moe_layer *L, int proj) {
    proj_shape s;
    if (proj < 2) {
        s = (proj_shape){L->inter, L->hidden, L->hidden, L->i_begin, 0};
    } else {
        s = (proj_shape){L->hidden, L->inter, L->inter_full, 0, L->i_begin};
    }
    return s;
}

/* Check one quantized projection; *nonzero_offset set when an offset != 0. */
static moe8_status check_qweight(const moe8_moe_layer *L, int e, int proj,
                                 const moe8_moe_weight *w, int *nonzero_offset, moe8_error *err) {
    const proj_shape s = shape_of(L, proj);
    const char *nm = proj_name[proj];
    if (!w->data || w->dtype != MOE8_DT_I8)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "'%s': expert %d %s: expected int8 (I8) weight data, got %s", L->name,
                         e, nm, w->data ? moe8_dtype_name(w->dtype) : "none");
    if (!w->scale || !is_float_dt(w->scale_dtype))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "'%s': expert %d %s: expected a weight_scale in F32, BF16 or F16",
                         L->name, e, nm);
    for (int i = 0; i < s.n; i++) {
        double v = read_value(w->scale, w->scale_dtype, (size_t)(s.row0 + i));
        if (!isfinite(v))
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                             "'%s': expert %d %s: weight_scale[%d] is not finite", L->name, e,
                             nm, s.row0 + i);
    }
    if (!w->offset) return MOE8_OK;
    if (!is_float_dt(w->offset_dtype) && w->offset_dtype != MOE8_DT_I8 &&
        w->offset_dtype != MOE8_DT_I32)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "'%s': expert %d %s: weight_offset dtype %s not supported", L->name, e,
                         nm, moe8_dtype_name(w->offset_dtype));
    for (int i = 0; i < s.n; i++) {
        double v = read_value(w->offset, w->offset_dtype, (size_t)(s.row0 + i));
        if (!(v >= -128.0 && v <= 127.0) || v != floor(v))
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                             "'%s': expert %d %s: weight_offset[%d] = %g, expected an integer "
                             "in [-128, 127]",
                             L->name, e, nm, s.row0 + i, v);
        if (v != 0.0) *nonzero_offset = 1;
    }
    return MOE8_OK;
}

static moe8_status check_fweight(const moe8_moe_layer *L, int e, int proj,
                                 const moe8_moe_weight *w, moe8_error *err) {
    if (!w->data || !is_float_dt(w->dtype))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "'%s': expert %d %s: expected float weight data (F32, BF16 or F16)",
                         L->name, e, proj_name[proj]);
    return MOE8_OK;
}

static const moe8_moe_weight *proj_of(const moe8_moe_expert *x, int proj) {
    return proj == 0 ? &x->gate : proj == 1 ? &x->up : &x->down;
}

/* The codes of a W4A8 slice (rows [row0, row0+n), columns [col0, col0+k) of
 * W [.][ld], stored two rows a byte row: W[2j][c] in the low nibble of byte
 * [j][c], W[2j+1][c] in the high one, SEMANTICS §4b) into dst [n][k], one a
 * byte, for packing. */
static void unpack_w4(int8_t *dst, const int8_t *w, const proj_shape *s) {
    for (int i = 0; i < s->n; i++) {
        const int r = s->row0 + i;
        const uint8_t *src = (const uint8_t *)w + (size_t)(r / 2) * s->ld + s->col0;
        const int sh = r % 2 ? 4 : 0;
        for (int j = 0; j < s->k; j++)
            dst[(size_t)i * s->k + j] = (int8_t)((int)((src[j] >> sh) & 15) ^ 8) - 8;
    }
}

/* Pack one projection of local expert le into qdata/scales/offsets (work:
 * n x k bytes for unpacking int4 codes). */
static void pack_proj(moe8_moe_layer *L, int le, int proj, const moe8_moe_weight *w,
                      int8_t *qdst, int packed, float *sdst, int32_t *odst, int8_t *work) {
    const proj_shape s = shape_of(L, proj);
    moe8_qmat *q = proj == 0 ? &L->qe[le].gate : proj == 1 ? &L->qe[le].up : &L->qe[le].down;
    int any = 0;
    if (!packed && L->qlayout->bits == 4) {
        unpack_w4(work, w->data, &s);
        L->qlayout->pack(qdst, work, s.n, s.k, s.k);
    } else if (!packed) {
        L->qlayout->pack(qdst, (const int8_t *)w->data + (size_t)s.row0 * s.ld + s.col0, s.n,
                         s.k, s.ld);
    }
    for (int i = 0; i < s.n; i++) sdst[i] = (float)read_value(w->scale, w->scale_dtype,
                                                              (size_t)(s.row0 + i));
    if (odst && w->offset)
        for (int i = 0; i < s.n; i++) {
            odst[i] = (int32_t)read_value(w->offset, w->offset_dtype, (size_t)(s.row0 + i));
            any |= odst[i] != 0;
        }
    moe8_qmat_init(q, L->qlayout, qdst, s.n, s.k, sdst, any ? odst : NULL);
}

/* The float down weights of a layer with down_float (TP: columns of the slice). */
static moe8_status build_float_down(moe8_moe_layer *L, const moe8_moe_expert *ex,
                                    moe8_error *err) {
    const int n_local = L->last - L->first;
    moe8_status st;
    L->fe = calloc((size_t)n_local, sizeof *L->fe);
    if (!L->fe) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", L->name);
    for (int le = 0; le < n_local; le++) {
        const moe8_moe_weight *d = &ex[L->first + le].down;
        if ((st = check_fweight(L, L->first + le, 2, d, err)) != MOE8_OK) return st;
        L->fe[le].down_dt = d->dtype;
        L->fe[le].ld_down = L->inter_full;
        L->fe[le].down = (const char *)d->data + (size_t)L->i_begin * moe8_dtype_size(d->dtype);
    }
    return MOE8_OK;
}

static moe8_status build_quantized(moe8_moe_layer *L, const moe8_moe_expert *ex,
                                   const moe8_moe_layer_desc *d, moe8_error *err) {
    const int n_local = L->last - L->first, I = L->inter, H = L->hidden;
    const int n_proj = L->down_float ? 2 : 3;
    /* packed once, for the table in use; int4 codes in its int4 layout */
    L->qlayout = L->quant == MOE8_QUANT_W4A8_DYNAMIC ? moe8_kernels_get()->q4layout
                                                     : moe8_kernels_get()->qlayout;
    const size_t qb_gu = L->qlayout->bytes(I, H);
    const size_t qb_d = L->down_float ? 0 : L->qlayout->bytes(H, I);
    const size_t q_stride = 2 * qb_gu + qb_d, s_stride = 2 * (size_t)I + (L->down_float ? 0 : H);
    int nonzero = 0, fail_nomem = 0;
    moe8_status st;
    for (int e = L->first; e < L->last; e++)
        for (int p = 0; p < n_proj; p++)
            if ((st = check_qweight(L, e, p, proj_of(&ex[e], p), &nonzero, err)) != MOE8_OK)
                return st;
    if (L->down_float && (st = build_float_down(L, ex, err)) != MOE8_OK) return st;
    /* Already packed (a model's packed cache) when the desc says so: no packing. */
    const int8_t *mapped = d->packed_take ? d->packed_take(d->packed_user, q_stride * n_local) : NULL;
    L->qe = calloc((size_t)n_local, sizeof *L->qe);
    if (!mapped) L->qdata = moe8_alloc_aligned(q_stride * n_local);
    int8_t *qbase = mapped ? (int8_t *)mapped : L->qdata; /* read-only when mapped */
    L->qmapped = mapped;
    L->qstride = q_stride;
    L->scales = moe8_alloc_aligned(s_stride * n_local * sizeof(float));
    if (nonzero) L->offsets = moe8_alloc_aligned(s_stride * n_local * sizeof(int32_t));
    if (!L->qe || !qbase || !L->scales || (nonzero && !L->offsets))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory packing %d experts",
                         L->name, n_local);
    L->packed_bytes = (q_stride + s_stride * (nonzero ? 8 : 4)) * n_local;
    /* Experts pack independently: one per thread (load time is mostly this). */
#pragma omp parallel for schedule(dynamic) num_threads(L->n_threads ? L->n_threads : omp_get_max_threads())
    for (int le = 0; le < n_local; le++) {
        const size_t soff[3] = {0, (size_t)I, 2 * (size_t)I};
        const size_t qoff[3] = {0, qb_gu, 2 * qb_gu};
        int8_t *work = L->qlayout->bits == 4 && !mapped ? malloc((size_t)I * H) : NULL;
        if (L->qlayout->bits == 4 && !mapped && !work) { /* unpacking needs it */
#pragma omp atomic write
            fail_nomem = 1;
            continue;
        }
        for (int p = 0; p < n_proj; p++) {
            size_t so = s_stride * le + soff[p];
            pack_proj(L, le, p, proj_of(&ex[L->first + le], p), qbase + q_stride * le + qoff[p],
                      mapped != NULL, L->scales + so, L->offsets ? L->offsets + so : NULL, work);
        }
        free(work);
        if (d->on_packed) d->on_packed(d->on_packed_user, L->first + le);
    }
    if (fail_nomem)
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory unpacking int4 experts",
                         L->name);
    if (!mapped && d->packed_put) d->packed_put(d->packed_user, L->qdata, q_stride * n_local);
    return MOE8_OK;
}

static moe8_status build_float(moe8_moe_layer *L, const moe8_moe_expert *ex, moe8_error *err) {
    const int n_local = L->last - L->first;
    moe8_status st;
    L->fe = calloc((size_t)n_local, sizeof *L->fe);
    if (!L->fe) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", L->name);
    for (int le = 0; le < n_local; le++) {
        const moe8_moe_expert *x = &ex[L->first + le];
        moe8_fexpert *f = &L->fe[le];
        for (int p = 0; p < 3; p++)
            if ((st = check_fweight(L, L->first + le, p, proj_of(x, p), err)) != MOE8_OK)
                return st;
        f->gate_dt = x->gate.dtype;
        f->up_dt = x->up.dtype;
        f->down_dt = x->down.dtype;
        f->ld_gu = L->hidden;
        f->ld_down = L->inter_full;
        f->gate = (const char *)x->gate.data +
                  (size_t)L->i_begin * L->hidden * moe8_dtype_size(f->gate_dt);
        f->up = (const char *)x->up.data +
                (size_t)L->i_begin * L->hidden * moe8_dtype_size(f->up_dt);
        f->down = (const char *)x->down.data + (size_t)L->i_begin * moe8_dtype_size(f->down_dt);
    }
    return MOE8_OK;
}

/* gpt_oss: the router bias and each local expert's biases (this slice's gate
 * and up, down on the first slice only) as fp32 copies, and the clamped
 * SwiGLU, into every local expert's act. */
static moe8_status build_act(moe8_moe_layer *L, const moe8_moe_layer_desc *d, moe8_error *err) {
    const int n_local = L->last - L->first, I = L->inter, H = L->hidden;
    const size_t stride = 2 * (size_t)I + (size_t)H;
    int any = 0;
    for (int e = L->first; e < L->last; e++)
        any |= d->experts[e].gate.bias || d->experts[e].up.bias || d->experts[e].down.bias;
    if (d->router_bias) {
        if (!(L->router_bias = malloc((size_t)L->n_expert * sizeof(float))))
            return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", L->name);
        memcpy(L->router_bias, d->router_bias, (size_t)L->n_expert * sizeof(float));
    }
    if (any && !(L->ebias = calloc(stride * (size_t)n_local, sizeof(float))))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "'%s': out of memory", L->name);
    for (int le = 0; le < n_local; le++) {
        const moe8_moe_expert *x = &d->experts[L->first + le];
        float *b = L->ebias ? L->ebias + stride * (size_t)le : NULL;
        moe8_expert_act a = {b, b && L->i_begin == 0 ? b + 2 * I : NULL, d->act_limit,
                             d->act_alpha};
        for (int j = 0; b && j < I; j++) {
            if (x->gate.bias) b[j] = (float)read_value(x->gate.bias, x->gate.bias_dtype, L->i_begin + j);
            if (x->up.bias) b[I + j] = (float)read_value(x->up.bias, x->up.bias_dtype, L->i_begin + j);
        }
        for (int j = 0; b && x->down.bias && j < H; j++)
            b[2 * I + j] = (float)read_value(x->down.bias, x->down.bias_dtype, j);
        if (L->qe) L->qe[le].act = a;
        if (L->fe) L->fe[le].act = a;
    }
    return MOE8_OK;
}

static moe8_status check_desc(const moe8_moe_layer_desc *d, const char *nm, moe8_error *err) {
    const int E = d->n_expert;
    if (E < 1 || d->hidden < 1 || d->intermediate < 1 || d->hidden > MOE8_MOE_MAX_DIM ||
        d->intermediate > MOE8_MOE_MAX_DIM)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "'%s': n_expert %d, hidden %d, intermediate %d: expected >= 1 (dims "
                         "<= %d)",
                         nm, E, d->hidden, d->intermediate, MOE8_MOE_MAX_DIM);
    if (d->i_begin < 0 || d->i_end < d->i_begin || d->i_end > d->intermediate ||
        (d->i_end == d->i_begin && d->i_begin != 0))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "'%s': intermediate slice [%d, %d) not inside [0, %d)", nm, d->i_begin,
                         d->i_end, d->intermediate);
    if (d->expert_first < 0 || d->expert_last < d->expert_first || d->expert_last > E ||
        (d->expert_last == d->expert_first && d->expert_first != 0))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "'%s': expert range [%d, %d) not inside [0, %d)", nm, d->expert_first,
                         d->expert_last, E);
    if (d->quant != MOE8_QUANT_W8A8_DYNAMIC && d->quant != MOE8_QUANT_W4A8_DYNAMIC &&
        d->quant != MOE8_QUANT_FLOAT)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "'%s': experts of type %s not supported (FLOAT, W8A8_DYNAMIC or "
                         "W4A8_DYNAMIC)", nm, moe8_quant_type_name(d->quant));
    if (d->down_float && d->quant != MOE8_QUANT_W8A8_DYNAMIC)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "'%s': down_float needs W8A8_DYNAMIC gate/up experts", nm);
    if (!d->experts)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "'%s': no expert weights", nm);
    if (d->router && !is_float_dt(d->router_dtype))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "'%s': router weight dtype %s, expected F32, BF16 or F16", nm,
                         moe8_dtype_name(d->router_dtype));
    return MOE8_OK;
}

moe8_status moe8_moe_layer_create(const moe8_moe_layer_desc *d, moe8_moe_layer **out,
                                  moe8_error *err) {
    moe8_moe_layer *L;
    moe8_status st;
    const char *nm = d && d->name ? d->name : "moe layer";
    if (!d || !out) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "moe layer: bad arguments");
    *out = NULL;
    if ((st = check_desc(d, nm, err)) != MOE8_OK) return st;
    if ((st = moe8_kernels_check(err)) != MOE8_OK) return st; /* a bad MOE8_ISA */
    if ((st = moe8_router_params_check(&d->router_params, d->n_expert, err)) != MOE8_OK) {
        moe8_error_prefix(err, "'%s'", nm);
        return st;
    }
    if (!(L = calloc(1, sizeof *L))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    snprintf(L->name, sizeof L->name, "%s", nm);
    L->n_expert = d->n_expert;
    L->hidden = d->hidden;
    L->inter_full = d->intermediate;
    L->i_begin = d->i_begin;
    L->inter = d->i_end > d->i_begin ? d->i_end - d->i_begin : d->intermediate;
    L->first = d->expert_first;
    L->last = d->expert_last > d->expert_first ? d->expert_last : d->n_expert;
    L->quant = d->quant;
    L->down_float = d->down_float != 0;
    L->rp = d->router_params;
    L->router = d->router;
    L->router_dt = d->router_dtype;
    L->n_threads = d->n_threads > 0 ? d->n_threads : 0;
    if (L->rp.e_score_correction_bias) {
        if (!(L->bias = malloc((size_t)L->n_expert * sizeof(float)))) {
            st = moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
            goto fail;
        }
        memcpy(L->bias, L->rp.e_score_correction_bias, (size_t)L->n_expert * sizeof(float));
        L->rp.e_score_correction_bias = L->bias;
    }
    st = L->quant == MOE8_QUANT_FLOAT ? build_float(L, d->experts, err)
                                      : build_quantized(L, d->experts, d, err);
    if (st == MOE8_OK) st = build_act(L, d, err);
    if (st != MOE8_OK) goto fail;
    *out = L;
    return MOE8_OK;
fail:
    moe8_moe_layer_free(L);
    return st;
}

void moe8_moe_layer_free(moe8_moe_layer *L) {
    if (!L) return;
    free(L->bias);
    free(L->router_bias);
    free(L->ebias);
    free(L->qe);
    free(L->fe);
    moe8_free_aligned(L->qdata);
    moe8_free_aligned(L->scales);
    moe8_free_aligned(L->offsets);
    moe8_free_aligned(L->owned_f32);
    free(L);
}

int moe8_moe_layer_same_shape(const moe8_moe_layer *a, const moe8_moe_layer *b) {
    return a->n_expert == b->n_expert && a->hidden == b->hidden && a->inter == b->inter &&
           a->first == b->first && a->last == b->last && a->quant == b->quant &&
           a->down_float == b->down_float &&
           a->rp.top_k == b->rp.top_k && (a->router != NULL) == (b->router != NULL) &&
           a->n_threads == b->n_threads;
}

void moe8_moe_layer_get_info(const moe8_moe_layer *L, moe8_moe_layer_info *o) {
    o->n_expert = L->n_expert;
    o->hidden = L->hidden;
    o->intermediate = L->inter;
    o->i_begin = L->i_begin;
    o->expert_first = L->first;
    o->expert_last = L->last;
    o->top_k = L->rp.top_k;
    o->quant = L->quant;
    o->packed_bytes = L->packed_bytes;
}

/* ======================================================================== */
/* Workspace                                                                 */
/* ======================================================================== */

/* Carves 64-byte aligned arrays out of one allocation: a first pass sums
 * the sizes (overflow-checked), a second hands out pointers. */
typedef struct {
    char *base;
    size_t used;
    int overflow;
} carver;

static void *carve(carver *c, size_t n, size_t elem) {
    size_t b, end;
    void *p = c->base ? c->base + c->used : NULL;
    if (moe8_mul_size(n, elem, &b) || moe8_add_size(b, 63, &b) ||
        moe8_add_size(c->used, b & ~(size_t)63, &end)) {
        c->overflow = 1;
        return NULL;
    }
    c->used = end;
    return p;
}

static void carve_all(carver *c, moe8_moe_workspace *w, const moe8_moe_layer *L, size_t T,
                      size_t M) {
    const size_t K = (size_t)L->rp.top_k, EL = (size_t)(L->last - L->first);
    const size_t H = (size_t)L->hidden, I = (size_t)L->inter;
    const int q = L->quant != MOE8_QUANT_FLOAT;
    w->xq_tok = q ? carve(c, T, (size_t)w->ldq) : NULL;
    w->sx_tok = q ? carve(c, T, sizeof(float)) : NULL;
    w->xsum_tok = q ? carve(c, T, sizeof(int32_t)) : NULL;
    w->logits = L->router ? carve(c, T * (size_t)L->n_expert, sizeof(float)) : NULL;
    w->ids = carve(c, T * K, sizeof(int32_t));
    w->weights = carve(c, T * K, sizeof(float));
    w->row_of = carve(c, T * K, sizeof(int32_t));
    w->order = carve(c, M, sizeof(int32_t));
    w->count = carve(c, EL, sizeof(int32_t));
    w->offs = carve(c, EL + 1, sizeof(int32_t));
    w->xq_g = q ? carve(c, M, (size_t)w->ldq) : NULL;
    w->sx_g = q ? carve(c, M, sizeof(float)) : NULL;
    w->xsum_g = q ? carve(c, M, sizeof(int32_t)) : NULL;
    w->xf_g = q ? NULL : carve(c, M * H, sizeof(float));
    w->y1 = carve(c, M * 2 * I, sizeof(float));
    const int qa = q && !L->down_float;  /* A is re-quantized for an int8 down */
    w->aq = qa ? carve(c, M, (size_t)w->lda) : NULL;
    w->sa = qa ? carve(c, M, sizeof(float)) : NULL;
    w->asum = qa ? carve(c, M, sizeof(int32_t)) : NULL;
    w->y2 = carve(c, M * H, sizeof(float));
    w->scratch = carve(c, (size_t)w->max_threads, w->scratch_stride * sizeof(float));
}

moe8_status moe8_moe_workspace_create(const moe8_moe_layer *L, int max_tokens, int n_threads,
                                      moe8_moe_workspace **out, moe8_error *err) {
    moe8_moe_workspace *w;
    carver c = {0};
    size_t T = (size_t)max_tokens, M, kl;
    if (!L || !out || max_tokens < 1 || n_threads < 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "moe workspace: expected a layer and max_tokens >= 1 (got %d)",
                         max_tokens);
    *out = NULL;
    kl = (size_t)(L->rp.top_k < L->last - L->first ? L->rp.top_k : L->last - L->first);
    if ((uint64_t)T * (size_t)L->rp.top_k > INT32_MAX || moe8_mul_size(T, kl, &M))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "moe workspace: %d tokens x top_k %d is too many slots", max_tokens,
                         L->rp.top_k);
    if (!(w = calloc(1, sizeof *w))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    w->layer = L;
    w->max_tokens = max_tokens;
    w->max_threads = n_threads ? n_threads : L->n_threads ? L->n_threads : omp_get_max_threads();
    if (w->max_threads < 1) w->max_threads = 1;
    w->ldq = moe8_round_up(L->hidden, 64);
    w->lda = moe8_round_up(L->inter, 64);
    w->ldy1 = 2 * L->inter;
    w->scratch_stride = (moe8_route_scratch_floats(L->n_expert) + 15) & ~(size_t)15;
    carve_all(&c, w, L, T, M);
    if (c.overflow || !(c.base = moe8_alloc_aligned(c.used))) {
        free(w);
        return moe8_fail(err, c.overflow ? MOE8_ERR_INVALID_ARG : MOE8_ERR_NOMEM, -1,
                         "moe workspace: cannot allocate %zu bytes for %d tokens", c.used,
                         max_tokens);
    }
    w->block = c.base;
    moe8_touch_pages(c.base, c.used, w->max_threads); /* resident before the first forward */
    c.used = 0;
    carve_all(&c, w, L, T, M);
    *out = w;
    return MOE8_OK;
}

void moe8_moe_workspace_free(moe8_moe_workspace *w) {
    if (!w) return;
    moe8_free_aligned(w->block);
    free(w);
}

void moe8_moe_workspace_routing(const moe8_moe_workspace *w, int *n_tokens, const int32_t **ids,
                                const float **weights) {
    if (n_tokens) *n_tokens = w->n_tokens;
    if (ids) *ids = w->ids;
    if (weights) *weights = w->weights;
}

/* ======================================================================== */
/* Forward                                                                   */
/* ======================================================================== */

typedef struct {
    const moe8_moe_layer *L;
    moe8_moe_workspace *w;
    const moe8_kernels *k;
    const float *h;          /* [T][H] */
    const float *logits;     /* [T][E] */
    float *out;              /* [T][H] */
    int T;
    int compute_logits;      /* router GEMM first */
    int need_gather;         /* some expert has >= 2 rows (set by the dispatching thread) */
    moe8_status st;          /* custom routing result */
    moe8_error *err;
    double t_routed;         /* phase accounting (moe8_bench_forward_timing): when
                              * routing ended; 0 when off */
    int nt;                  /* pool threads (core/pool.h) */
    int n_router;            /* chunks of the router GEMM in the first job (0: none) */
} fwd_ctx;

/* [*a, *b) = part `i` of `n` of [0, total). */
static inline void part(int total, int i, int n, int *a, int *b) {
    *a = (int)((int64_t)total * i / n);
    *b = (int)((int64_t)total * (i + 1) / n);
}

/* Column range of chunk tid of nt in whole panels of nr columns over [0, n). */
static inline void panel_part(int n, int nr, int tid, int nt, int *c0, int *c1) {
    int p0, p1;
    part((n + nr - 1) / nr, tid, nt, &p0, &p1);
    *c0 = p0 * nr;
    *c1 = p1 * nr < n ? p1 * nr : n;
}

/* Panel width of the layer's packed experts (16 for float ones: any width works). */
static inline int layer_nr(const moe8_moe_layer *L) { return L->qlayout ? L->qlayout->nr : 16; }

/* Input rows of local expert le: in place for a single row, else gathered. */
static moe8_mlp_rows rows_x(const fwd_ctx *c, int le) {
    const moe8_moe_workspace *w = c->w;
    const int r = w->offs[le], m = w->count[le];
    moe8_mlp_rows x = {.m = m, .ldq = w->ldq, .ldf = c->L->hidden};
    if (m == 1) {
        const int t = w->order[r] / c->L->rp.top_k;
        x.xq = w->xq_tok ? w->xq_tok + (size_t)t * w->ldq : NULL;
        x.sx = w->sx_tok ? w->sx_tok + t : NULL;
        x.xsum = w->xsum_tok ? w->xsum_tok + t : NULL;
        x.xf = c->h + (size_t)t * c->L->hidden;
    } else {
        x.xq = w->xq_g ? w->xq_g + (size_t)r * w->ldq : NULL;
        x.sx = w->sx_g ? w->sx_g + r : NULL;
        x.xsum = w->xsum_g ? w->xsum_g + r : NULL;
        x.xf = w->xf_g ? w->xf_g + (size_t)r * c->L->hidden : NULL;
    }
    return x;
}

/* Rows of A (the down GEMM's input) of local expert le. */
static moe8_mlp_rows rows_a(const fwd_ctx *c, int le) {
    const moe8_moe_workspace *w = c->w;
    const int r = w->offs[le];
    moe8_mlp_rows a = {.m = w->count[le], .ldq = w->lda, .ldf = w->ldy1};
    if (w->aq) {
        a.xq = w->aq + (size_t)r * w->lda;
        a.sx = w->sa + r;
        a.xsum = w->asum + r;
    } else {
        a.xf = w->y1 + (size_t)r * w->ldy1;
    }
    return a;
}

static void phase_router(fwd_ctx *c, int tid, int nt) {
    const moe8_moe_layer *L = c->L;
    int c0, c1;
    panel_part(L->n_expert, 16, tid, nt, &c0, &c1);
    if (c0 < c1)
        c->k->gemm_f32_wf(c->w->logits, L->n_expert, c->h, L->hidden, L->router, L->router_dt,
                          L->hidden, c->T, c0, c1, L->hidden);
    for (int t = 0; L->router_bias && t < c->T; t++) /* gpt_oss's router bias */
        for (int e = c0; e < c1; e++) c->w->logits[(size_t)t * L->n_expert + e] += L->router_bias[e];
}

/* Quantize part tid of nt of the tokens. */
static void phase_quant(fwd_ctx *c, int tid, int nt) {
    moe8_moe_workspace *w = c->w;
    int t0, t1;
    part(c->T, tid, nt, &t0, &t1);
    if (t0 < t1)
        c->k->quant_rows(w->xq_tok + (size_t)t0 * w->ldq, w->ldq, w->sx_tok + t0,
                         w->xsum_tok + t0, c->h + (size_t)t0 * c->L->hidden, c->L->hidden,
                         t1 - t0, c->L->hidden);
}

/* The first job: the router GEMM's chunks, then the tokens' quantization
 * (which does not need the logits) in the same job. */
static void phase_first(fwd_ctx *c, int chunk, int nc, int thread) {
    (void)thread;
    if (chunk < c->n_router) phase_router(c, chunk, c->n_router);
    else phase_quant(c, chunk - c->n_router, nc - c->n_router);
}

/* Route part tid of nt of the tokens (routing scratch of `thread`). */
static void phase_route(fwd_ctx *c, int tid, int nt, int thread) {
    const moe8_moe_layer *L = c->L;
    moe8_moe_workspace *w = c->w;
    const int E = L->n_expert, K = L->rp.top_k;
    int t0, t1;
    part(c->T, tid, nt, &t0, &t1);
    for (int t = t0; t < t1; t++)
        moe8_route_token(c->logits + (size_t)t * E, E, &L->rp, w->ids + (size_t)t * K,
                         w->weights + (size_t)t * K, w->scratch + (size_t)thread * w->scratch_stride);
}

static void phase_custom_route(fwd_ctx *c) {
    const moe8_moe_layer *L = c->L;
    moe8_moe_workspace *w = c->w;
    const int E = L->n_expert, K = L->rp.top_k;
    c->st = L->rp.custom(L->rp.custom_user, c->logits, c->T, E, K, L->rp.renormalize, w->ids,
                         w->weights, c->err);
    if (c->st == MOE8_OK) c->st = moe8_route_check(w->ids, w->weights, c->T, E, K, c->err);
}

static void phase_dispatch(fwd_ctx *c) {
    const moe8_moe_layer *L = c->L;
    moe8_moe_workspace *w = c->w;
    w->n_rows = moe8_moe_dispatch(w->ids, c->T, L->rp.top_k, L->first, L->last, w->count,
                                  w->offs, w->order, w->row_of);
    c->need_gather = 0;
    for (int le = 0; le < L->last - L->first; le++) c->need_gather |= w->count[le] > 1;
    /* Paging experts in from the cache: start reading every routed expert now,
     * all at once, rather than one fault at a time as the kernels reach them. */
    for (int le = 0; w->prefetch && L->qmapped && le < L->last - L->first; le++)
        if (w->count[le]) {
            const uintptr_t a = (uintptr_t)(L->qmapped + L->qstride * (size_t)le);
            const uintptr_t a0 = a & ~(uintptr_t)4095;
            madvise((void *)a0, L->qstride + (a - a0), MADV_WILLNEED);
        }
}

/* Copy the rows [r0, r1) that belong to experts with >= 2 rows. */
static void phase_gather(fwd_ctx *c, int tid, int nt) {
    const moe8_moe_layer *L = c->L;
    moe8_moe_workspace *w = c->w;
    const int K = L->rp.top_k, H = L->hidden;
    int r0, r1;
    part(w->n_rows, tid, nt, &r0, &r1);
    for (int le = 0; le < L->last - L->first && r0 < r1; le++) {
        const int a = w->offs[le], b = w->offs[le + 1];
        if (b - a < 2 || b <= r0 || a >= r1) continue;
        for (int r = a > r0 ? a : r0; r < (b < r1 ? b : r1); r++) {
            const int t = w->order[r] / K;
            if (w->xq_g) {
                memcpy(w->xq_g + (size_t)r * w->ldq, w->xq_tok + (size_t)t * w->ldq,
                       (size_t)w->ldq);
                w->sx_g[r] = w->sx_tok[t];
                w->xsum_g[r] = w->xsum_tok[t];
            } else {
                memcpy(w->xf_g + (size_t)r * H, c->h + (size_t)t * H, (size_t)H * sizeof(float));
            }
        }
    }
}

static void phase_up(fwd_ctx *c, int tid, int nt) {
    const moe8_moe_layer *L = c->L;
    moe8_moe_workspace *w = c->w;
    int c0, c1;
    panel_part(L->inter, layer_nr(L), tid, nt, &c0, &c1);
    if (c0 >= c1) return;
    for (int le = 0; le < L->last - L->first; le++) {
        if (!w->count[le]) continue;
        moe8_mlp_rows x = rows_x(c, le);
        moe8_mlp_up(c->k, L->qe ? &L->qe[le] : NULL, L->fe ? &L->fe[le] : NULL, L->hidden,
                    L->inter, &x, w->y1 + (size_t)w->offs[le] * w->ldy1, w->ldy1, c0, c1);
    }
}

static void phase_requant(fwd_ctx *c, int tid, int nt) {
    moe8_moe_workspace *w = c->w;
    int r0, r1;
    part(w->n_rows, tid, nt, &r0, &r1);
    if (r0 < r1)
        c->k->quant_rows(w->aq + (size_t)r0 * w->lda, w->lda, w->sa + r0, w->asum + r0,
                         w->y1 + (size_t)r0 * w->ldy1, w->ldy1, r1 - r0, c->L->inter);
}

static void phase_down_combine(fwd_ctx *c, int tid, int nt) {
    const moe8_moe_layer *L = c->L;
    moe8_moe_workspace *w = c->w;
    int c0, c1;
    panel_part(L->hidden, layer_nr(L), tid, nt, &c0, &c1);
    if (c0 >= c1) return;
    for (int le = 0; le < L->last - L->first; le++) {
        if (!w->count[le]) continue;
        moe8_mlp_rows a = rows_a(c, le);
        moe8_mlp_down(c->k, L->qe && !L->down_float ? &L->qe[le] : NULL,
                      L->fe ? &L->fe[le] : NULL, L->inter, &a,
                      w->y2 + (size_t)w->offs[le] * L->hidden, L->hidden, c0, c1);
    }
    moe8_moe_combine(c->out, L->hidden, w->y2, L->hidden, w->weights, w->row_of, c->T,
                     L->rp.top_k, c0, c1);
}

/* One phase as a job of the pool (core/pool.h): chunk `chunk` of nc; the
 * chunk, not the thread, fixes what is computed (`thread` only picks scratch). */
typedef void (*phase_fn)(fwd_ctx *c, int chunk, int nc, int thread);
typedef struct {
    fwd_ctx *c;
    phase_fn fn;
    int nc;
} phase_job;

static void phase_chunk(void *ctx, int64_t chunk, int thread) {
    const phase_job *j = ctx;
    moe8_kernels_thread_init(j->c->k); /* AMX: the tile configuration of this thread */
    j->fn(j->c, (int)chunk, j->nc, thread);
}

static void run_phase(fwd_ctx *c, phase_fn fn, int nc) {
    phase_job j = {c, fn, nc};
    moe8_pool_run(c->nt, nc, phase_chunk, &j);
}

static void job_route(fwd_ctx *c, int i, int n, int th) { phase_route(c, i, n, th); }
static void job_gather(fwd_ctx *c, int i, int n, int th) { (void)th; phase_gather(c, i, n); }
static void job_up(fwd_ctx *c, int i, int n, int th) { (void)th; phase_up(c, i, n); }
static void job_requant(fwd_ctx *c, int i, int n, int th) { (void)th; phase_requant(c, i, n); }
static void job_down(fwd_ctx *c, int i, int n, int th) { (void)th; phase_down_combine(c, i, n); }

/* Rows few enough (decode: one a routed expert) that one thread does the
 * step inline rather than wait for the others at one more join. */
#define MOE_INLINE_ROWS 16

/* The whole forward as the fewest jobs: [router GEMM + quantize] ->
 * route (inline for a few tokens) + dispatch (inline) -> [gather] ->
 * [gate/up] -> requantize (inline for a few rows) -> [down + combine].
 * Chunk counts depend on the shapes and thread count only. */
static void forward_jobs(fwd_ctx *c) {
    const moe8_moe_layer *L = c->L;
    moe8_moe_workspace *w = c->w;
    const int per = c->T <= MOE_INLINE_ROWS ? 8 : 2, nt = c->nt, nr = layer_nr(L);
    c->n_router = c->compute_logits ? (int)moe8_pool_chunks((L->n_expert + 15) / 16, nt, 2) : 0;
    const int n_quant = w->xq_tok ? (int)moe8_pool_chunks(c->T, nt, 2) : 0;
    if (c->n_router + n_quant) run_phase(c, phase_first, c->n_router + n_quant);
    if (L->rp.custom) phase_custom_route(c);
    else if (c->T <= MOE_INLINE_ROWS) phase_route(c, 0, 1, 0);
    else run_phase(c, job_route, (int)moe8_pool_chunks(c->T, nt, 4));
    if (c->t_routed > 0) c->t_routed = moe8_time_s();
    if (c->st != MOE8_OK) return;
    phase_dispatch(c);
    if (c->need_gather) run_phase(c, job_gather, (int)moe8_pool_chunks(w->n_rows, nt, 2));
    run_phase(c, job_up, (int)moe8_pool_chunks((L->inter + nr - 1) / nr, nt, per));
    if (w->aq && w->n_rows <= MOE_INLINE_ROWS) phase_requant(c, 0, 1);
    else if (w->aq) run_phase(c, job_requant, (int)moe8_pool_chunks(w->n_rows, nt, 2));
    run_phase(c, job_down, (int)moe8_pool_chunks((L->hidden + nr - 1) / nr, nt, per));
}

moe8_status moe8_moe_layer_forward_k(const moe8_moe_layer *L, moe8_moe_workspace *w,
                                     const moe8_kernels *k, const float *h, int n_tokens,
                                     const float *router_logits, float *out, moe8_error *err) {
    fwd_ctx c = {L, w, k, h, router_logits, out, n_tokens, 0, 0, MOE8_OK, err, 0.0, 1, 0};
    const double t0 = moe8_phase_on() ? moe8_time_s() : 0.0;
    if (!L || !w || !h || !out || n_tokens < 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "moe forward: bad arguments");
    if (w->layer != L && !moe8_moe_layer_same_shape(w->layer, L))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "'%s': the workspace was made for '%s', of another shape", L->name,
                         w->layer->name);
    if (n_tokens > w->max_tokens)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "'%s': %d tokens exceed the workspace's %d", L->name, n_tokens,
                         w->max_tokens);
    if (L->qlayout && !moe8_kernels_reads(k, L->qlayout))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "'%s': its experts are packed in layout %s, which the %s kernels "
                         "do not read", L->name, L->qlayout->name, k->isa);
    if (!router_logits) {
        if (!L->router)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                             "'%s': no router logits given and no router weight", L->name);
        c.logits = w->logits;
        c.compute_logits = 1;
    }
    w->n_tokens = n_tokens;
    w->n_rows = 0;
    if (n_tokens == 0) return MOE8_OK;
    c.nt = w->max_threads;
    c.t_routed = t0;
    forward_jobs(&c);
    if (t0 > 0) {
        int active = 0;
        for (int le = 0; le < L->last - L->first; le++) active += w->count[le] > 0;
        moe8_phase_add(MOE8_PHASE_ROUTER, c.t_routed - t0);
        moe8_phase_add(MOE8_PHASE_EXPERTS, moe8_time_s() - c.t_routed);
        moe8_phase_moe(active);
    }
    return c.st;
}

moe8_status moe8_moe_layer_forward(const moe8_moe_layer *L, moe8_moe_workspace *w,
                                   const float *h, int n_tokens, const float *router_logits,
                                   float *out, moe8_error *err) {
    return moe8_moe_layer_forward_k(L, w, moe8_kernels_get(), h, n_tokens, router_logits, out,
                                    err);
}
