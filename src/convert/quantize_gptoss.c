/*
 * quantize_gptoss.c — gpt_oss's stacked experts split for moe8_quantize
 * (quantize.c; arch/gpt_oss.c): each source tensor of a layer's experts
 * becomes per-expert parts under the names the loader reads quantized
 * (mlp.experts.E.{gate,up,down}_proj.weight and .bias), their values fp32 in
 * [out][in] orientation:
 *
 *   gate_up_proj_blocks / _scales (MXFP4)  2E parts: gate e = rows 2i, up e =
 *                                          rows 2i + 1, decoded (io/mxfp4.c);
 *                                          the _scales tensors are read with
 *                                          their blocks and written nowhere
 *   down_proj_blocks / _scales             E parts [H][I]
 *   gate_up_proj [E][H][2I], down_proj [E][I][H] (float)  the same, transposed
 *   gate_up_proj_bias [E][2I], down_proj_bias [E][H]      per-expert biases,
 *                                          deinterleaved, FLOAT
 *
 * The output's config.json drops quantization_config (the experts are no
 * longer MXFP4; moe8_qz_gptoss_config).
 *
 * Does not: quantize (quantize.c does, part by part), or check shapes beyond
 * what it reads (moe8_model_load checked the folder first).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "arch/arch.h"
#include "convert/convert.h"
#include "core/core.h"
#include "io/mxfp4.h"
#include "load/model.h"

/* What t is: its layer and form, from the descriptor's stacked names. */
typedef enum { GX_NONE, GX_SKIP, GX_GU_MX, GX_DN_MX, GX_GU, GX_DN, GX_GU_BIAS, GX_DN_BIAS } gx_form;

static gx_form form_of(const moe8_arch_desc *a, const moe8_config *c, const char *name,
                       int64_t *layer) {
    static const struct {
        int gu;
        const char *sfx;
        gx_form f;
    } forms[] = {{1, "_blocks", GX_GU_MX}, {1, "_scales", GX_SKIP}, {1, "", GX_GU},
                 {1, "_bias", GX_GU_BIAS}, {0, "_blocks", GX_DN_MX}, {0, "_scales", GX_SKIP},
                 {0, "", GX_DN}, {0, "_bias", GX_DN_BIAS}};
    char n[256];
    if (!(a->kinds.tensors & MOE8_TENSORS_GPTOSS_EXPERTS)) return GX_NONE;
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
            snprintf(n, sizeof n, forms[i].gu ? a->stacked_gate_up : a->stacked_down, (long long)l);
            strncat(n, forms[i].sfx, sizeof n - strlen(n) - 1);
            if (!strcmp(n, name)) {
                *layer = l;
                return forms[i].f;
            }
        }
    return GX_NONE;
}

int64_t moe8_qz_gptoss_parts(const moe8_arch_desc *a, const moe8_config *c, const moe8_tensor *t) {
    int64_t l;
    const gx_form f = form_of(a, c, t->name, &l);
    const int64_t E = c->num_experts;
    switch (f) {
    case GX_NONE: return 0;
    case GX_SKIP: return -1;
    case GX_GU_MX: case GX_GU: case GX_GU_BIAS: return 2 * E;
    default: return E;
    }
}

moe8_status moe8_qz_gptoss_part(const moe8_arch_desc *a, const moe8_config *c, const moe8_st *src,
                                const moe8_tensor *t, int64_t j, moe8_tensor *view, float **buf,
                                char *name, size_t cap, moe8_error *err) {
    const int64_t H = c->hidden_size, I = c->moe_intermediate_size;
    int64_t l;
    const gx_form f = form_of(a, c, t->name, &l);
    const int gu = f == GX_GU_MX || f == GX_GU || f == GX_GU_BIAS;
    const int64_t e = gu ? j / 2 : j, par = gu ? j % 2 : 0; /* par 1: up */
    const int64_t rows = gu ? I : H, cols = f == GX_GU_BIAS || f == GX_DN_BIAS ? 0 : gu ? H : I;
    const moe8_role r = !gu ? MOE8_R_EXP_DOWN : par ? MOE8_R_EXP_UP : MOE8_R_EXP_GATE;
    const int bias = cols == 0;
    if (moe8_arch_tensor_name(a, r, l, e, bias ? "bias" : "weight", name, cap))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "tensor '%s': no per-expert name", t->name);
    memset(view, 0, sizeof *view);
    view->name = name;
    view->dtype = MOE8_DT_F32;
    view->n_dims = bias ? 1 : 2;
    view->shape[0] = rows;
    view->shape[1] = cols;
    view->n_elements = rows * (bias ? 1 : cols);
    view->n_bytes = (size_t)view->n_elements * sizeof(float);
    view->file_index = -1;
    if (!buf) return MOE8_OK; /* planning: the shape is enough */
    float *d = *buf = malloc(view->n_bytes);
    if (!d) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': out of memory", name);
    view->data = d;
    if (f == GX_GU_MX || f == GX_DN_MX) {
        char sn[256];
        const size_t n = strlen(t->name) - strlen("_blocks");
        snprintf(sn, sizeof sn, "%.*s_scales", (int)n, t->name);
        const moe8_tensor *s = moe8_st_find(src, sn);
        if (!s) return moe8_fail(err, MOE8_ERR_FORMAT, -1, "tensor '%s' missing", sn);
        for (int64_t i = 0; i < rows; i++) {
            const int64_t row = gu ? e * 2 * I + 2 * i + par : e * H + i;
            moe8_mxfp4_decode_row(d + i * cols, (const uint8_t *)t->data + row * (cols / 2),
                                  (const uint8_t *)s->data + row * (cols / 32), cols);
        }
    } else if (f == GX_GU || f == GX_DN) { /* [E][in][out]: column `out` of expert e */
        const int64_t outs = gu ? 2 * I : H;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t k = 0; k < cols; k++)
                d[i * cols + k] =
                    moe8_tensor_f32_at(t, (e * cols + k) * outs + (gu ? 2 * i + par : i));
    } else {
        for (int64_t i = 0; i < rows; i++)
            d[i] = moe8_tensor_f32_at(t, gu ? e * 2 * I + 2 * i + par : e * H + i);
    }
    return MOE8_OK;
}

moe8_status moe8_qz_gptoss_config(const char *in_dir, const char *dir, moe8_error *err) {
    char path[4096], *text = NULL, *out;
    size_t len;
    cJSON *j;
    moe8_status st;
    snprintf(path, sizeof path, "%s/config.json", in_dir);
    if ((st = moe8_read_file(path, (size_t)1 << 24, &text, &len, err))) return st;
    j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) return moe8_fail(err, MOE8_ERR_FORMAT, -1, "'%s': not JSON", path);
    cJSON_DeleteItemFromObjectCaseSensitive(j, "quantization_config");
    out = cJSON_Print(j);
    cJSON_Delete(j);
    if (!out) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    st = moe8_write_text(dir, "config.json", out, err);
    free(out);
    return st;
}
