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

#include "w4a8_test.h"

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
