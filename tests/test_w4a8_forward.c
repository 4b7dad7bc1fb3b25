/*
 * test_w4a8_forward.c — the whole forward of a model with W4A8_DYNAMIC
 * experts (SEMANTICS §4b) in msModelSlim's layout (fixture_model.h
 * w4a8_layers), layers mixed with W8A8_DYNAMIC and FLOAT experts, against
 * the double-precision reference (forward_ref.h, which decodes the int4
 * codes itself), quantized and dequantized (float_experts), and through the
 * packed cache: a second load maps the int4 experts the first context
 * packed and gives the same logits bit for bit. test_w4a8.c has the layer.
 */
#include "test.h"
#include "test_isa.h"
#include "fixture_model.h"
#include "forward_ref.h"

static const int32_t PROMPT[9] = {5, 17, 200, 3, 99, 42, 7, 128, 64};

static fx_opts w4a8_opts(void) {
    fx_opts o = fx_default_opts();
    o.quant = 1;
    o.n_layers = 4;
    o.w4a8_layers = 1u | 8u;       /* layers 0, 3 W4A8; 1 W8A8_DYNAMIC; 2 FLOAT */
    o.float_expert_layers = 4u;
    o.scale_2d = 1;
    o.seed = 4848;
    return o;
}

static const char *write_fixture(const char *name, const fx_opts *o) {
    static char dirs[8][4096];
    static int n;
    char *slot = dirs[n++ % 8];
    snprintf(slot, 4096, "%s", test_tmpdir(name));
    if (fx_write_model(slot, o) != 0) exit(2);
    return slot;
}

static moe8_context *new_ctx(moe8_model *m, int float_ex) {
    moe8_context_params p = moe8_context_params_default();
    moe8_context *c = NULL;
    moe8_error e;
    p.kv_type = MOE8_DT_F32;
    p.n_ctx = 32;
    p.n_seq_max = 1;
    p.n_outputs = 16;
    p.n_threads = 2;
    p.float_experts = float_ex;
    if (moe8_context_create(m, &p, &c, &e) != MOE8_OK) {
        fprintf(stderr, "context: %s\n", e.message);
        exit(2);
    }
    return c;
}

/* Logits of PROMPT (one batch) into out [9][V]. */
static void prefill(moe8_context *c, float *out) {
    int32_t pos[9], sq[9];
    int8_t lg[9];
    const int V = moe8_context_n_vocab(c);
    moe8_error e;
    for (int i = 0; i < 9; i++) pos[i] = i, sq[i] = 0, lg[i] = 1;
    moe8_batch b = {9, PROMPT, pos, sq, lg};
    CHECKF(moe8_decode(c, &b, &e) == MOE8_OK, "decode: %s", e.message);
    for (int i = 0; i < 9; i++) memcpy(out + (size_t)i * V, moe8_context_logits(c, i), sizeof(float) * V);
}

/* ---- the whole forward ------------------------------------------------------------ */

static double cos_worst(const float *got, const double *want, int n, int V) {
    double worst = 1;
    for (int t = 0; t < n; t++) worst = fmin(worst, test_cosine_ref(got + t * V, want + t * V, V));
    return worst;
}

static void test_forward(void) {
    const fx_opts o = w4a8_opts();
    const char *dir = write_fixture("w4a8_fwd", &o);
    const int V = (int)o.vocab;
    float *got = malloc(sizeof(float) * 9 * V), *first = malloc(sizeof(float) * 9 * V);
    double *want = malloc(sizeof(double) * 9 * V);
    ref_model rm;
    ref_init(&rm, &o);
    for (int fe = 0; fe < 2; fe++) {
        moe8_model *m = test_load_model(dir);
        moe8_context *c = new_ctx(m, fe);
        rm.float_experts = fe;
        ref_forward(&rm, PROMPT, 9, want);
        prefill(c, got);
        const double w = cos_worst(got, want, 9, V);
        printf("%-28s worst-position cosine %.8f\n", fe ? "forward, float_experts" : "forward",
               w);
        CHECKF(w >= (fe ? 0.99999 : 0.9999), "forward (float_experts %d): cosine %.8f", fe, w);
        if (!fe) memcpy(first, got, sizeof(float) * 9 * V);
        moe8_context_free(c);
        moe8_model_free(m);
    }
    /* The first context wrote the packed cache; this load maps it. */
    char cache[4200];
    struct stat sb;
    snprintf(cache, sizeof cache, "%s/.moe8-cache", dir);
    CHECKF(stat(cache, &sb) == 0, "no packed cache in %s", cache);
    moe8_model *m = test_load_model(dir);
    moe8_context *c = new_ctx(m, 0);
    prefill(c, got);
    CHECKF(memcmp(got, first, sizeof(float) * 9 * V) == 0, "logits from the packed cache differ");
    moe8_context_free(c);
    moe8_model_free(m);
    ref_free(&rm);
    free(got); free(first); free(want);
}

int main(void) {
    test_table_or_skip();
    test_forward();
    return test_summary();
}
