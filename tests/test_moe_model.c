/*
 * test_moe_model.c — moe8_moe_layer_from_model on synthetic model folders
 * (fixture_model.h): the layer built from a loaded model, whole and as TP/EP
 * parts, against the independent reference (moe_ref.h) fed with the raw
 * tensors decoded here; float experts; errors for dense or missing layers.
 */
#include <stdint.h>

#include "load/model.h"
#include "moe/moe.h"
#include "moe8.h"
#include "moe_ref.h"
#include "test.h"
#include "fixture_model.h"

static test_rng rng = {0xabcdef01ULL};

/* Decode any float/int tensor element independently of src/io. */
static double raw_at(const moe8_tensor *t, int64_t i) {
    const void *p = t->data;
    switch (t->dtype) {
    case MOE8_DT_F32: return ((const float *)p)[i];
    case MOE8_DT_BF16: return ref_bf16(((const uint16_t *)p)[i]);
    case MOE8_DT_F16: return ref_f16(((const uint16_t *)p)[i]);
    case MOE8_DT_I8: return ((const int8_t *)p)[i];
    default: return NAN;
    }
}

static double *decode(const moe8_tensor *t) {
    double *v = malloc(sizeof(double) * (size_t)t->n_elements);
    for (int64_t i = 0; i < t->n_elements; i++) v[i] = raw_at(t, i);
    return v;
}

typedef struct {
    ref_expert *ex;
    double **owned;
    int n_owned;
} ref_model;

static void ref_model_of(ref_model *r, const moe8_layer *L, int E) {
    r->ex = calloc((size_t)E, sizeof *r->ex);
    r->owned = calloc((size_t)E * 9, sizeof(double *));
    r->n_owned = 0;
    for (int e = 0; e < E; e++)
        for (int p = 0; p < 3; p++) {
            const moe8_linear *l = p == 0 ? &L->experts[e].gate : p == 1 ? &L->experts[e].up
                                                                         : &L->experts[e].down;
            if (l->weight->dtype != MOE8_DT_I8) {
                r->ex[e].f[p] = r->owned[r->n_owned++] = decode(l->weight);
                continue;
            }
            r->ex[e].q[p] = l->weight->data;
            r->ex[e].s[p] = r->owned[r->n_owned++] = decode(l->weight_scale);
            if (l->weight_offset) r->ex[e].o[p] = r->owned[r->n_owned++] = decode(l->weight_offset);
        }
}

static void ref_model_free(ref_model *r) {
    for (int i = 0; i < r->n_owned; i++) free(r->owned[i]);
    free(r->owned);
    free(r->ex);
}

static const int8_t *ws_acodes(void *user, int t, int j, float *sa, int32_t *asum) {
    const moe8_moe_workspace *ws = user;
    int r = ws->row_of[t * ws->layer->rp.top_k + j];
    *sa = ws->sa[r];
    *asum = ws->asum[r];
    return ws->aq + (size_t)r * ws->lda;
}

/* Forward T tokens through `part` of layer li; check against the reference;
 * add the output to sum. */
static void check_part(const char *what, moe8_model *m, int li, const moe8_moe_part *part,
                       const float *h, int T, const ref_model *rm, double *sum) {
    const moe8_config *c = moe8_model_config(m);
    const int H = (int)c->hidden_size, E = (int)c->num_experts, K = (int)c->num_experts_per_tok;
    moe8_moe_layer *L = NULL;
    moe8_moe_workspace *ws = NULL;
    moe8_error err;
    float *out = malloc(sizeof(float) * T * H);
    double *ro = malloc(sizeof(double) * T * H), *wd = malloc(sizeof(double) * T * K);
    double *lg = malloc(sizeof(double) * T * E);
    moe8_status st = moe8_moe_layer_from_model(m, li, part, &L, &err);
    CHECKF(st == MOE8_OK, "%s: %s", what, err.message);
    if (st != MOE8_OK) return;
    CHECK(moe8_moe_workspace_create(L, T, 2, &ws, &err) == MOE8_OK);
    CHECKF(moe8_moe_layer_forward(L, ws, h, T, NULL, out, &err) == MOE8_OK, "%s", err.message);
    /* Router logits vs double h @ Wg^T. */
    const moe8_tensor *rw = m->layers[li].router;
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++) {
            double s = 0.0;
            for (int i = 0; i < H; i++) s += (double)h[t * H + i] * raw_at(rw, (int64_t)e * H + i);
            lg[t * E + e] = s;
        }
    CHECKF(ref_rel_max(ws->logits, lg, (size_t)T * E) <= 1e-5, "%s: router logits", what);
    ref_router rr = {K, c->norm_topk_prob, 0, 0, 0, 0, 0, NULL, 1.0};
    int bad = 0;
    for (int t = 0; t < T; t++) {
        int32_t ids[16];
        double w[16];
        ref_route_token(ws->logits + (size_t)t * E, E, &rr, ids, w);
        for (int j = 0; j < K; j++) bad += ids[j] != ws->ids[t * K + j] || fabs(w[j] - ws->weights[t * K + j]) > 1e-6;
    }
    CHECKF(bad == 0, "%s: %d routing slots differ", what, bad);
    for (int i = 0; i < T * K; i++) wd[i] = ws->weights[i];
    ref_layer rl = {E, H, (int)c->moe_intermediate_size, 0, (int)c->moe_intermediate_size, 0, E, K,
                    rm->ex};
    if (part && part->i_end) rl.i0 = part->i_begin, rl.i1 = part->i_end;
    if (part && part->expert_last) rl.first = part->expert_first, rl.last = part->expert_last;
    if (L->quant == MOE8_QUANT_W8A8_DYNAMIC) {
        ref_moe_quant(&rl, h, T, ws->ids, wd, ws_acodes, ws, ro, NULL, NULL);
        double e = ref_rel_max(out, ro, (size_t)T * H);
        CHECKF(e <= 1e-5, "%s: rel err %.3g vs reference", what, e);
    } else {
        ref_moe_float(&rl, h, T, ws->ids, wd, ro);
        double e = ref_rel_max(out, ro, (size_t)T * H);
        CHECKF(e <= 1e-4, "%s: float experts rel err %.3g", what, e);
    }
    for (int i = 0; sum && i < T * H; i++) sum[i] += out[i];
    moe8_moe_workspace_free(ws);
    moe8_moe_layer_free(L);
    free(out);
    free(ro);
    free(wd);
    free(lg);
}

static void run_model(const char *name, int quant, moe8_dtype scale_dt) {
    fx_opts o = fx_default_opts();
    const char *dir;
    moe8_model *m = NULL;
    moe8_error err;
    o.quant = quant;
    o.scale_dtype = scale_dt;
    o.dense_layer = 0;
    dir = test_tmpdir(name);
    CHECK(fx_write_model(dir, &o) == 0);
    CHECKF(moe8_model_load(dir, NULL, &m, &err) == MOE8_OK, "%s: %s", name, err.message);
    if (!m) return;
    const moe8_config *c = moe8_model_config(m);
    const int T = 6, H = (int)c->hidden_size, E = (int)c->num_experts, I = (int)c->moe_intermediate_size;
    float *h = malloc(sizeof(float) * T * H);
    double *full = calloc((size_t)T * H, sizeof(double)), *sum = calloc((size_t)T * H, sizeof(double));
    float *fullf = malloc(sizeof(float) * T * H);
    ref_model rm;
    for (int i = 0; i < T * H; i++) h[i] = (float)test_rng_normal(&rng);
    ref_model_of(&rm, &m->layers[1], E);
    check_part(name, m, 1, NULL, h, T, &rm, full);
    moe8_moe_part ep[2] = {{0, 0, 0, E / 2, 1, 0}, {0, 0, E / 2, E, 2, 0}};
    for (int p = 0; p < 2; p++) check_part("EP part", m, 1, &ep[p], h, T, &rm, sum);
    for (int i = 0; i < T * H; i++) fullf[i] = (float)full[i];
    CHECKF(ref_rel_max(fullf, sum, (size_t)T * H) <= 1e-6, "%s: EP parts do not sum to the whole",
           name);
    moe8_moe_part tp = {I / 2, I, 0, 0, 0, 0};
    check_part("TP part", m, 1, &tp, h, T, &rm, NULL);
    /* Errors: a dense layer, a layer out of range. */
    moe8_moe_layer *L = NULL;
    CHECK(moe8_moe_layer_from_model(m, 0, NULL, &L, &err) == MOE8_ERR_INVALID_ARG &&
          strstr(err.message, "not a MoE layer") && !L);
    CHECK(moe8_moe_layer_from_model(m, 2, NULL, &L, &err) == MOE8_ERR_INVALID_ARG);
    ref_model_free(&rm);
    free(h);
    free(full);
    free(sum);
    free(fullf);
    moe8_model_free(m);
}

/* kB of a field of /proc/self/status ("VmHWM:", "RssFile:"), -1 if unreadable. */
static long status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, strlen(field))) v = strtol(line + strlen(field), NULL, 10);
    if (f) fclose(f);
    return v;
}

/* SEMANTICS §6b: packing never holds a layer's mapped experts beside their
 * packed copy. With one packing thread, the peak during the build of a layer
 * of 16 int8 experts (24 MB) stays within the packed bytes plus a few
 * experts' pages; releasing the pages only after the whole layer would add
 * all 24 MB. The mapped pages are gone afterwards. */
static void test_pack_releases(void) {
    fx_opts o = fx_default_opts();
    const char *dir;
    moe8_model *m = NULL;
    moe8_moe_layer *L = NULL;
    moe8_moe_layer_info info;
    moe8_error err;
    FILE *clear;
    o.quant = 1;
    o.hidden = 1024, o.moe_inter = 512, o.n_experts = 16, o.top_k = 2, o.inter = 256;
    o.n_layers = 2, o.dense_layer = 0;
    dir = test_tmpdir("moe_model_pack_rss");
    CHECK(fx_write_model(dir, &o) == 0);
    CHECKF(moe8_model_load(dir, NULL, &m, &err) == MOE8_OK, "%s", err.message);
    if (!m) return;
    const double expert_kb = 3.0 * 1024 * 512 / 1024.0;
    const long file0 = status_kb("RssFile:");
    if (!(clear = fopen("/proc/self/clear_refs", "w")) || fputs("5", clear) < 0) {
        printf("pack rss: /proc/self/clear_refs not writable, peak not checked\n");
    }
    if (clear) fclose(clear);
    const long base = status_kb("VmRSS:");
    moe8_moe_part part = {0, 0, 0, 0, 1, 0}; /* one packing thread */
    CHECKF(moe8_moe_layer_from_model(m, 1, &part, &L, &err) == MOE8_OK, "%s", err.message);
    if (L) {
        moe8_moe_layer_get_info(L, &info);
        const long peak = status_kb("VmHWM:"), file1 = status_kb("RssFile:");
        const double packed_kb = (double)info.packed_bytes / 1024.0;
        printf("pack rss: peak +%ld kB for %.0f kB packed (%.0f kB of mapped experts), file "
               "pages %+ld kB\n", peak - base, packed_kb, 16 * expert_kb, file1 - file0);
        CHECKF(peak - base <= packed_kb * 1.15 + 4 * expert_kb + 2048,
               "peak %ld kB above the start for %.0f kB packed", peak - base, packed_kb);
        CHECKF(file1 - file0 <= 2 * expert_kb, "%ld kB of mapped experts still resident",
               file1 - file0);
    }
    moe8_moe_layer_free(L);
    moe8_model_free(m);
}

int main(void) {
    test_pack_releases();
    run_model("moe_model_q", 1, MOE8_DT_BF16);
    run_model("moe_model_q32", 1, MOE8_DT_F32);
    run_model("moe_model_f", 0, MOE8_DT_F32);
    return test_summary();
}
