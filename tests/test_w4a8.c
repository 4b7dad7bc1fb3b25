/*
 * test_w4a8.c — W4A8_DYNAMIC experts (SEMANTICS §4b) from loading to the
 * MoE layer, on checkpoints the fixture writes in msModelSlim's layout (fixture_model.h
 * w4a8_layers: int4 codes two a byte along the output dimension, scale_bias
 * [N][1] and [N][16]) without any quantizer, layers mixed with W8A8_DYNAMIC
 * and FLOAT experts:
 *   - each layer's type as the description says; the MoE layer of a W4A8
 *     layer against the independent reference (moe_ref.h) fed with codes
 *     decoded here, whole, as EP parts (summing to the whole) and a TP part;
 *   - refusals naming the field or tensor: per-group (group_size,
 *     weight_scale_second), a bad scale_bias shape, an unpacked [N][K]
 *     weight; a scale_bias that disagrees with its weights is logged at WARN
 *     and changes nothing (the logits of the same model with a consistent
 *     one, bit for bit), as does its absence.
 * The whole forward is test_w4a8_forward.c's.
 */
#include "test.h"
#include "test_isa.h"
#include "fixture_model.h"
#include "moe_ref.h"

#include "load/model.h"
#include "moe/moe.h"

#include "w4a8_test.h"

/* ---- the MoE layer against moe_ref.h ------------------------------------------ */

/* W[i][j] of a loaded W4A8 weight [n/2][k]: decoded here, not by src/. */
static int8_t code_at(const moe8_tensor *w, int64_t i, int64_t j) {
    const uint8_t b = ((const uint8_t *)w->data)[(i / 2) * w->shape[1] + j];
    const int v = i % 2 ? b >> 4 : b & 15;
    return (int8_t)(v >= 8 ? v - 16 : v);
}

typedef struct {
    ref_expert *ex;
    int8_t *codes[64][3];
    double *s[64][3];
} ref_w4;

static void ref_w4_of(ref_w4 *r, const moe8_layer *L, int E) {
    r->ex = calloc((size_t)E, sizeof *r->ex);
    for (int e = 0; e < E; e++)
        for (int p = 0; p < 3; p++) {
            const moe8_linear *l = p == 0 ? &L->experts[e].gate : p == 1 ? &L->experts[e].up
                                                                         : &L->experts[e].down;
            const int64_t n = l->n_out, k = l->n_in;
            r->codes[e][p] = malloc((size_t)(n * k));
            r->s[e][p] = malloc(sizeof(double) * (size_t)n);
            for (int64_t i = 0; i < n; i++) {
                const float *s = l->weight_scale->data; /* F32 [n][1] as msModelSlim writes it */
                r->s[e][p][i] = s[i];
                for (int64_t j = 0; j < k; j++) r->codes[e][p][i * k + j] = code_at(l->weight, i, j);
            }
            r->ex[e].q[p] = r->codes[e][p];
            r->ex[e].s[p] = r->s[e][p];
        }
}

static void ref_w4_free(ref_w4 *r, int E) {
    for (int e = 0; e < E; e++)
        for (int p = 0; p < 3; p++) free(r->codes[e][p]), free(r->s[e][p]);
    free(r->ex);
}

static const int8_t *ws_acodes(void *user, int t, int j, float *sa, int32_t *asum) {
    const moe8_moe_workspace *ws = user;
    const int r = ws->row_of[t * ws->layer->rp.top_k + j];
    *sa = ws->sa[r];
    *asum = ws->asum[r];
    return ws->aq + (size_t)r * ws->lda;
}

/* T tokens through `part` of W4A8 layer li: rel err <= 1e-5 against the
 * reference on the same routing and the layer's own A codes; out added to sum. */
static void check_part(const char *what, moe8_model *m, int li, const moe8_moe_part *part,
                       const float *h, int T, const ref_w4 *rw, double *sum) {
    const moe8_config *c = moe8_model_config(m);
    const int H = (int)c->hidden_size, E = (int)c->num_experts, K = (int)c->num_experts_per_tok;
    moe8_moe_layer *L = NULL;
    moe8_moe_workspace *ws = NULL;
    moe8_error err;
    float *out = malloc(sizeof(float) * T * H);
    double *ro = malloc(sizeof(double) * T * H), *wd = malloc(sizeof(double) * T * K);
    CHECKF(moe8_moe_layer_from_model(m, li, part, &L, &err) == MOE8_OK, "%s: %s", what, err.message);
    if (!L) return;
    CHECK(L->quant == MOE8_QUANT_W4A8_DYNAMIC && L->qlayout == &moe8_qlayout_q4k8);
    CHECK(moe8_moe_workspace_create(L, T, 2, &ws, &err) == MOE8_OK);
    CHECKF(moe8_moe_layer_forward(L, ws, h, T, NULL, out, &err) == MOE8_OK, "%s", err.message);
    for (int i = 0; i < T * K; i++) wd[i] = ws->weights[i];
    ref_layer rl = {E, H, (int)c->moe_intermediate_size, 0, (int)c->moe_intermediate_size, 0, E, K,
                    rw->ex};
    if (part && part->i_end) rl.i0 = part->i_begin, rl.i1 = part->i_end;
    if (part && part->expert_last) rl.first = part->expert_first, rl.last = part->expert_last;
    long mism = 0;
    ref_moe_quant(&rl, h, T, ws->ids, wd, ws_acodes, ws, ro, &mism, NULL);
    const double e = ref_rel_max(out, ro, (size_t)T * H);
    printf("%-28s rel err %.3g vs the reference (A codes differing: %ld)\n", what, e, mism);
    CHECKF(e <= 1e-5, "%s: rel err %.3g vs reference", what, e);
    for (int i = 0; sum && i < T * H; i++) sum[i] += out[i];
    moe8_moe_workspace_free(ws);
    moe8_moe_layer_free(L);
    free(out); free(ro); free(wd);
}

static void test_layer(void) {
    const fx_opts o = w4a8_opts();
    moe8_model *m = test_load_model(write_fixture("w4a8_layer", &o));
    const moe8_config *c = moe8_model_config(m);
    const int T = 7, H = (int)c->hidden_size, E = (int)c->num_experts, I = (int)c->moe_intermediate_size;
    const moe8_quant_type want[4] = {MOE8_QUANT_W4A8_DYNAMIC, MOE8_QUANT_W8A8_DYNAMIC,
                                     MOE8_QUANT_FLOAT, MOE8_QUANT_W4A8_DYNAMIC};
    for (int l = 0; l < 4; l++)
        CHECKF(m->layers[l].info.experts == want[l] && m->layers[l].info.experts_down == want[l],
               "layer %d: experts %s", l, moe8_quant_type_name(m->layers[l].info.experts));
    CHECK(m->layers[0].experts[1].gate.scale_bias && m->layers[0].experts[1].down.scale_bias &&
          m->layers[0].experts[1].down.scale_bias->shape[1] == 16);
    test_rng rng = {0x77};
    float *h = malloc(sizeof(float) * T * H), *fullf = malloc(sizeof(float) * T * H);
    double *full = calloc((size_t)T * H, sizeof(double)), *sum = calloc((size_t)T * H, sizeof(double));
    for (int i = 0; i < T * H; i++) h[i] = (float)test_rng_normal(&rng);
    ref_w4 rw;
    ref_w4_of(&rw, &m->layers[3], E);
    check_part("w4a8 layer 3", m, 3, NULL, h, T, &rw, full);
    moe8_moe_part ep[2] = {{0, 0, 0, E / 2, 1, 0}, {0, 0, E / 2, E, 2, 0}};
    for (int p = 0; p < 2; p++) check_part("w4a8 EP part", m, 3, &ep[p], h, T, &rw, sum);
    for (int i = 0; i < T * H; i++) fullf[i] = (float)full[i];
    CHECKF(ref_rel_max(fullf, sum, (size_t)T * H) <= 1e-6, "EP parts do not sum to the whole");
    moe8_moe_part tp = {I / 2 + 2, I, 0, 0, 0, 0}; /* an odd-width slice starting at an even row */
    check_part("w4a8 TP part", m, 3, &tp, h, T, &rw, NULL);
    moe8_moe_part tp2 = {3, I / 2 + 3, 0, 0, 0, 0}; /* starting at an odd row: a byte's high nibble */
    check_part("w4a8 TP part, odd start", m, 3, &tp2, h, T, &rw, NULL);
    ref_w4_free(&rw, E);
    free(h); free(fullf); free(full); free(sum);
    moe8_model_free(m);
}

/* ---- refusals and the scale_bias check ------------------------------------------- */

typedef struct { int kind; } hook_t;

static void defect_hook(void *user, fx_tensor *t) {
    const hook_t *k = user;
    const char *e1 = "model.layers.0.mlp.experts.1.";
    if (strncmp(t->name, e1, strlen(e1))) return;
    if (k->kind == 1 && strstr(t->name, "gate_proj.weight_offset")) /* per-group companion */
        snprintf(t->name, sizeof t->name, "model.layers.0.mlp.experts.1.gate_proj.weight_scale_second");
    if (k->kind == 2 && strstr(t->name, "up_proj.scale_bias")) {
        const int64_t shape[2] = {t->shape[0], 3};
        fx_retype(t, MOE8_DT_F32, 2, shape);
    }
    if (k->kind == 3 && strstr(t->name, "down_proj.weight")) { /* one code a byte: [N][K] */
        const int64_t shape[2] = {2 * t->shape[0], t->shape[1]};
        fx_retype(t, MOE8_DT_I8, 2, shape);
    }
    if (k->kind == 4 && strstr(t->name, "gate_proj.scale_bias"))
        for (int64_t i = 0; i < fx_numel(t); i++) fx_set(t, i, fx_get(t, i) + 1.0);
    if (k->kind == 5 && strstr(t->name, "scale_bias")) t->omit = 1;
}

static void group_json(void *user, const char *file, cJSON *root) {
    (void)user;
    if (!strcmp(file, "quant_model_description.json")) {
        cJSON_DeleteItemFromObject(root, "group_size");
        cJSON_AddNumberToObject(root, "group_size", 64);
    }
}

static void expect_refused(const char *name, int kind, const char *msg) {
    fx_opts o = w4a8_opts();
    hook_t k = {kind};
    moe8_model *m = NULL;
    moe8_error e;
    o.tensor_hook = defect_hook;
    o.user = &k;
    if (kind == 0) o.json_hook = group_json;
    const moe8_status st = moe8_model_load(write_fixture(name, &o), NULL, &m, &e);
    CHECKF(st != MOE8_OK && !m && strstr(e.message, msg), "%s: status %d, '%s' lacks '%s'", name,
           st, st ? e.message : "", msg);
    moe8_model_free(m);
}

static char logged[1024];
static int n_warn;
static void log_fn(moe8_log_level lv, const char *msg, void *user) {
    (void)user;
    if (lv == MOE8_LOG_WARN && strstr(msg, "scale_bias")) {
        n_warn++;
        snprintf(logged, sizeof logged, "%s", msg);
    }
}

/* A disagreeing scale_bias (kind 4) is logged and unused; none (kind 5) is fine. */
static void scale_bias_case(int kind, const char *name, int want_warn) {
    fx_opts o = w4a8_opts();
    hook_t k = {kind};
    o.tensor_hook = defect_hook;
    o.user = &k;
    const char *dir = write_fixture(name, &o);
    moe8_model *m = test_load_model(dir);
    float *got = malloc(sizeof(float) * 9 * o.vocab);
    float *want = malloc(sizeof(float) * 9 * o.vocab);
    n_warn = 0;
    logged[0] = 0;
    moe8_set_log(log_fn, NULL);
    moe8_context *c = new_ctx(m, 0);
    moe8_set_log(NULL, NULL);
    CHECKF(want_warn ? n_warn == 1 && strstr(logged, "experts.1.gate_proj.scale_bias") &&
                           strstr(logged, "model.layers.0.mlp")
                     : n_warn == 0,
           "%s: %d warnings, '%s'", name, n_warn, logged);
    if (want_warn) printf("logged: %s\n", logged);
    prefill(c, got);
    moe8_context_free(c);
    moe8_model_free(m);
    o.tensor_hook = NULL; /* the same model with its scale_bias as written */
    m = test_load_model(write_fixture("w4a8_sb_clean", &o));
    c = new_ctx(m, 0);
    prefill(c, want);
    CHECKF(memcmp(got, want, sizeof(float) * 9 * (size_t)o.vocab) == 0, "%s: logits differ", name);
    free(got); free(want);
    moe8_context_free(c);
    moe8_model_free(m);
}

static void test_refusals(void) {
    expect_refused("w4a8_group", 0, "group_size 64: per-group W4A8_DYNAMIC");
    expect_refused("w4a8_second", 1,
                   "tensor 'model.layers.0.mlp.experts.1.gate_proj.weight_scale_second': per-group");
    expect_refused("w4a8_sb_shape", 2,
                   "tensor 'model.layers.0.mlp.experts.1.up_proj.scale_bias': expected shape [32], "
                   "[32, 1] or [32, 16], found [32, 3]");
    expect_refused("w4a8_unpacked", 3,
                   "tensor 'model.layers.0.mlp.experts.1.down_proj.weight': expected shape [32, 32]");
    scale_bias_case(4, "w4a8_sb_bad", 1);
    scale_bias_case(5, "w4a8_sb_none", 0);
}

int main(void) {
    test_table_or_skip();
    test_layer();
    test_refusals();
    return test_summary();
}
