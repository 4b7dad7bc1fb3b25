/*
 * family_test.h — what the model-family tests (test_arch.c, test_deepseek.c,
 * test_glm4_moe.c, test_minimax_m2.c)
 * share besides model_test.h: config parsing, a relative error, the check
 * against the double-precision reference and the corrupt-folder table's
 * hooks, and family_unknown (a family the engine does not know yet). Include
 * after test.h, fixture_model.h and forward_ref.h.
 */
#ifndef MOE8_FAMILY_TEST_H
#define MOE8_FAMILY_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "moe8.h"
#include "model_test.h"

static moe8_status parse(const char *json, moe8_config *c, moe8_error *e) {
    memset(e, 0, sizeof *e);
    return moe8_config_parse(json, strlen(json), "config.json", c, e);
}

/* A value only some families have (moe8_config_get_int / _num). */
static inline int64_t cfg_i(const moe8_config *c, const char *name) {
    return moe8_config_get_int(c, name, NULL);
}
static inline double cfg_d(const moe8_config *c, const char *name) {
    return moe8_config_get_num(c, name, NULL);
}

static double max_rel(const float *a, const double *b, int n) {
    double d = 0, m = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i])), m = fmax(m, fabs(b[i]));
    return d / m;
}

/* ---- against the family's double-precision reference (forward_ref.h) ---------- */

/* Float: rel err <= 1e-4 at every position, prefilled and decoded; W8A8:
 * cosine >= 0.9999 at every position. */
static void check_vs_ref(const char *label, const fx_opts *o) {
    const char *dir = write_fixture(label, o);
    moe8_model *m = test_load_model(dir);
    const int n = 9, V = (int)o->vocab;
    float *got = malloc(sizeof(float) * n * V);
    double *want = malloc(sizeof(double) * n * V);
    ref_model rm;
    ref_init(&rm, o);
    ref_forward(&rm, PROMPT, n, want);
    for (int mode = 0; mode < 2; mode++) {
        const int n_pre = mode ? 4 : n;
        run_logits(m, PROMPT, n, n_pre, got);
        if (!o->quant) {
            double last = max_rel(got + (n - 1) * V, want + (n - 1) * V, V), worst = 0;
            for (int t = 0; t < n; t++) worst = fmax(worst, max_rel(got + t * V, want + t * V, V));
            printf("%-30s %s: last-token rel err %.3g, worst position %.3g\n", label,
                   mode ? "prefill 4 + 5 decode" : "prefill 9", last, worst);
            CHECKF(last <= 1e-4 && worst <= 1e-4, "%s (%s): rel err %.3g (worst %.3g)", label,
                   mode ? "decode" : "prefill", last, worst);
        } else {
            double worst = 1;
            for (int t = 0; t < n; t++) worst = fmin(worst, test_cosine_ref(got + t * V, want + t * V, V));
            printf("%-30s %s: W8A8 vs double W8A8 maths: worst cosine %.10f\n", label,
                   mode ? "prefill 4 + 5 decode" : "prefill 9", worst);
            CHECKF(worst >= 0.9999, "%s (%s): cosine %.8f", label, mode ? "decode" : "prefill", worst);
        }
    }
    ref_free(&rm);
    free(got);
    free(want);
    moe8_model_free(m);
}

/* ---- make-model + quantize ---------------------------------------------------- */

#define QV 16384 /* the vocabulary of the made models (ids fold into it) */

static const char calib[] =
    "It was a bright cold day in April, and the clocks were striking thirteen. The quick brown "
    "fox jumps over the lazy dog; 42 apples cost $3.50 at the market.\n";

/* make-model's tiny preset of `arch` (2 layers, tokenizer `tok`) into fdir and
 * moe8 quantize of it (down_proj FLOAT with down_float) into qdir (cap bytes
 * each); the down_float run reuses the float model of the first. W8A8 vs the
 * float source: cosine >= 0.99 at every position of a 5-token prompt and the
 * same 5 greedy tokens. Both models are returned loaded for the family's own
 * checks (the caller frees them). */
static void make_quantize_compare(int arch, int down_float, const char *tok, char *fdir,
                                  char *qdir, size_t cap, moe8_model **mf, moe8_model **mq) {
    const char *name = moe8_arch_name((moe8_arch)arch);
    static const int32_t prompt[5] = {9707, 11, 847, 829, 374};
    char label[64];
    moe8_make_model_params mp = moe8_make_model_params_default();
    moe8_quantize_params qp = moe8_quantize_params_default();
    moe8_error e;
    float *lf = malloc(sizeof(float) * 5 * QV), *lq = malloc(sizeof(float) * 5 * QV);
    int32_t tf[5], tq[5];
    FMT(label, "mk_%s", name);
    if (down_float) snprintf(fdir, cap, "%s/%s", test_tmp_root(), label); /* made by the first run */
    else snprintf(fdir, cap, "%s", test_tmpdir(label));
    FMT(label, "mkq_%s%s", name, down_float ? "_down_float" : "");
    snprintf(qdir, cap, "%s", test_tmpdir(label));
    mp.arch = (moe8_arch)arch;
    mp.vocab_size = QV;
    mp.tokenizer_dir = tok;
    mp.force = 1;
    mp.seed = 3;
    mp.n_layers = 2;
    if (!down_float)
        CHECKF(moe8_make_model(&mp, fdir, &e) == MOE8_OK, "make-model %s: %s", name, e.message);
    qp.force = 1;
    qp.n_threads = 2;
    qp.down_proj_float = down_float;
    qp.calib_text = calib;
    qp.calib_len = strlen(calib);
    CHECKF(moe8_quantize(fdir, qdir, &qp, NULL, &e) == MOE8_OK, "quantize %s: %s", name, e.message);
    *mf = test_load_model(fdir);
    *mq = test_load_model(qdir);
    CHECK(moe8_model_config(*mf)->arch == (moe8_arch)arch &&
          moe8_model_config(*mq)->arch == (moe8_arch)arch);
    run_logits(*mf, prompt, 5, 5, lf);
    run_logits(*mq, prompt, 5, 5, lq);
    double worst = 1;
    for (int t = 0; t < 5; t++) worst = fmin(worst, test_cosine(lq + t * QV, lf + t * QV, QV));
    CHECK(greedy(*mf, prompt, 5, tf, 5) == 5 && greedy(*mq, prompt, 5, tq, 5) == 5);
    printf("%-30s W8A8%s vs float source: worst cosine %.10f, greedy %s\n", name,
           down_float ? " (down_proj FLOAT)" : "", worst,
           memcmp(tf, tq, sizeof tf) ? "DIFFER" : "equal");
    CHECKF(worst >= 0.99, "%s: W8A8 vs float cosine %.6f", name, worst);
    CHECKF(!memcmp(tf, tq, sizeof tf), "%s: greedy tokens of W8A8 differ from the float model", name);
    free(lf);
    free(lq);
}

/* ---- corrupt folders: a tensor omitted or mis-shaped, or a JSON key edited ---- */

enum { D_NONE, D_OMIT, D_SHAPE };

typedef struct {
    const char *label;
    int arch, quant;
    int action;               /* on `tensor` */
    const char *tensor;
    int n_dims;
    int64_t shape[2];
    const char *file, *key, *value;   /* JSON edit: value as JSON text (NULL: delete) */
    moe8_status code;
    const char *msg;
} defect;

static void hook_tensor(void *user, fx_tensor *t) {
    const defect *d = user;
    if (!d->tensor || strcmp(t->orig_name, d->tensor)) return;
    if (d->action == D_OMIT) t->omit = 1;
    if (d->action == D_SHAPE) fx_retype(t, t->dtype, d->n_dims, d->shape);
}

static void hook_json(void *user, const char *file, cJSON *root) {
    const defect *d = user;
    if (!d->file || strcmp(file, d->file)) return;
    cJSON_DeleteItemFromObjectCaseSensitive(root, d->key);
    if (d->value) cJSON_AddItemToObject(root, d->key, cJSON_Parse(d->value));
}

/* Write the fixture `o` (2 layers) with defect d applied and check its load fails as d says. */
static void check_defect(const defect *d, fx_opts o) {
    moe8_model *m = NULL;
    moe8_error e;
    moe8_status st;
    char label[64];
    o.n_layers = 2;
    o.tensor_hook = hook_tensor;
    o.json_hook = hook_json;
    o.user = (void *)d;
    FMT(label, "bad_%s", d->label);
    memset(&e, 0, sizeof e);
    st = moe8_model_load(write_fixture(label, &o), NULL, &m, &e);
    CHECKF(st == d->code, "%s: status %d, want %d (%s)", d->label, st, d->code, e.message);
    if (d->msg) CHECKF(strstr(e.message, d->msg) != NULL, "%s: '%s' lacks '%s'", d->label,
                       e.message, d->msg);
    moe8_model_free(m);
}

/* ---- a family the engine may not know yet --------------------------------------- */

/* 1 when moe8 refuses the fixture `o`'s model_type as not supported (the
 * engine lacks the family): the test then prints SKIP and exits 77, which
 * ctest reports as skipped (SKIP_RETURN_CODE 77 in CMakeLists.txt). Any other
 * outcome, a load or a different error, is left to the test's checks. */
static inline int family_unknown(const char *model_type, fx_opts o) {
    moe8_model *m = NULL;
    moe8_error e;
    moe8_status st;
    char want[128], label[96];
    FMT(want, "model_type \"%s\" not supported", model_type);
    FMT(label, "probe_%s", model_type);
    o.n_layers = 1;
    memset(&e, 0, sizeof e);
    st = moe8_model_load(write_fixture(label, &o), NULL, &m, &e);
    moe8_model_free(m);
    return st == MOE8_ERR_UNSUPPORTED && strstr(e.message, want) != NULL;
}

#endif
