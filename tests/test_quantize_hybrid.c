/*
 * test_quantize_hybrid.c — moe8_quantize of the hybrid linear-attention
 * families (qwen3_next, qwen3_5_moe; issue 41 item 3) on `make-model tiny`
 * folders (4 layers: 3 Gated DeltaNet, 1 full attention; vocabulary cut to
 * 16384): msModelSlim's W8A8 recipe checked per tensor of the written
 * quant_model_description.json against this test's own rule (by name:
 * W8A8_DYNAMIC for the full-attention q/k/v_proj, qwen3_next's in_proj_qkvz
 * and the routed experts' gate/up/down_proj, everything else FLOAT), every
 * output tensor listed and qwen3_5_moe's stacked experts written per expert
 * (no stacked name left); the int8 codes and per-row scales of one quantized
 * tensor recomputed here from the float source (for qwen3_5_moe an expert's
 * up rows of the stacked gate_up_proj, so the split is checked); the W8A8
 * model's last-token logits against the float model's (cosine >= 0.999) and
 * 5 greedy tokens equal; --linear float (q/k/v, in_proj_qkvz FLOAT);
 * --experts w4a8: the routed experts W4A8_DYNAMIC, the rest as the recipe,
 * one expert's int4 codes and scales against this test's reading of the
 * clip-search rule, logits cosine >= 0.99 against the float model (0.95 for
 * the small stacked fixture; the
 * engine on W4A8 hybrids against the double-precision reference:
 * test_qwen3_next.c, test_qwen3_5_moe.c). A third source: fixture_hybrid.h's
 * float qwen3_5_moe with stacked experts (make-model writes per-expert names).
 */
#include <math.h>
#include <regex.h>

#include <cjson/cJSON.h>

#include "test.h"
#include "fixture_model.h"

#include "moe8.h"

#define TOK MOE8_TOKENIZER_DIR
#define V 16384
#define FMT(buf, ...)                                                             \
    do {                                                                          \
        if (snprintf(buf, sizeof buf, __VA_ARGS__) >= (int)sizeof buf) abort();   \
    } while (0)

static const int32_t prompt[] = {9707, 11, 847, 829, 374}; /* "Hello, my name is" */
#define N_PROMPT 5
#define N_GREEDY 5

/* Last-token logits of the prompt (ids mod vocab) and N_GREEDY greedy tokens. */
static void run_model(const char *dir, int32_t vocab, float *logits, int32_t *greedy) {
    moe8_model *m = test_load_model(dir);
    moe8_context_params cp = moe8_context_params_default();
    moe8_context *c = NULL;
    moe8_sampler *s = NULL;
    int32_t pos[N_PROMPT], seq[N_PROMPT] = {0}, n_out = 0, ids[N_PROMPT];
    const int32_t *pp = ids, np = N_PROMPT;
    moe8_error e;
    cp.n_ctx = 32;
    if (moe8_context_create(m, &cp, &c, &e) != MOE8_OK) {
        fprintf(stderr, "context %s: %s\n", dir, e.message);
        exit(2);
    }
    for (int i = 0; i < N_PROMPT; i++) pos[i] = i, ids[i] = prompt[i] % vocab;
    {
        moe8_batch b = {N_PROMPT, ids, pos, seq, NULL};
        CHECK(moe8_decode(c, &b, NULL) == MOE8_OK);
        memcpy(logits, moe8_context_logits(c, N_PROMPT - 1), (size_t)vocab * sizeof(float));
    }
    CHECK(moe8_sampler_create(NULL, vocab, &s, NULL) == MOE8_OK);
    {
        moe8_generate_request r = {1, &pp, &np, N_GREEDY, NULL, 0, NULL, NULL, greedy, &n_out, NULL};
        CHECK(moe8_generate(c, s, &r, NULL) == MOE8_OK && n_out == N_GREEDY);
    }
    moe8_sampler_free(s);
    moe8_context_free(c);
    moe8_model_free(m);
}

static float f32_at(const moe8_tensor *t, int64_t i) {
    if (t->dtype == MOE8_DT_BF16) return moe8_bf16_to_f32(((const uint16_t *)t->data)[i]);
    return ((const float *)t->data)[i];
}

static cJSON *read_json(const char *dir, const char *file) {
    char path[4200];
    size_t len = 0;
    char *text;
    cJSON *root;
    FMT(path, "%s/%s", dir, file);
    text = (char *)test_slurp(path, &len);
    root = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    return root;
}

/* The description's type of tensor name in dir ("" when absent). */
static const char *desc_type(const char *dir, const char *name) {
    static char out[32];
    cJSON *d = read_json(dir, "quant_model_description.json");
    cJSON *it = cJSON_GetObjectItemCaseSensitive(d, name);
    snprintf(out, sizeof out, "%s", cJSON_IsString(it) ? it->valuestring : "");
    cJSON_Delete(d);
    return out;
}

/* The recipe by name (this test's rule): "W8A8_DYNAMIC" or "FLOAT". */
static const char *recipe(const char *name, int next) {
    static regex_t re[3];
    static int init;
    const char *pat[3] = {
        "\\.layers\\.[0-9]+\\.self_attn\\.[qkv]_proj\\.weight(_scale|_offset)?$",
        "\\.layers\\.[0-9]+\\.mlp\\.experts\\.[0-9]+\\.(gate|up|down)_proj\\.weight(_scale|_offset)?$",
        "\\.layers\\.[0-9]+\\.linear_attn\\.in_proj_qkvz\\.weight(_scale|_offset)?$"};
    if (!init) {
        for (int i = 0; i < 3; i++) CHECK(regcomp(&re[i], pat[i], REG_EXTENDED | REG_NOSUB) == 0);
        init = 1;
    }
    if (!strncmp(name, "mtp.", 4)) return "FLOAT";
    for (int i = 0; i < (next ? 3 : 2); i++)
        if (!regexec(&re[i], name, 0, NULL, 0)) return "W8A8_DYNAMIC";
    return "FLOAT";
}

/* Every description key against the recipe; every output tensor described;
 * the number of W8A8_DYNAMIC weights: 3 per expert and layer, 3 for the
 * full layer, (qwen3_next) 1 per linear layer; no stacked expert left. */
static void check_desc(const char *q_dir, int next, int64_t E) {
    cJSON *d = read_json(q_dir, "quant_model_description.json"), *it;
    moe8_st *st = NULL;
    moe8_error e;
    int64_t n_dyn = 0, n_keys = 0;
    CHECK(d != NULL);
    CHECK(moe8_st_open(q_dir, &st, &e) == MOE8_OK);
    if (!d || !st) return;
    cJSON_ArrayForEach(it, d) {
        if (!strcmp(it->string, "model_quant_type") || !strcmp(it->string, "version")) continue;
        n_keys++;
        CHECKF(cJSON_IsString(it) && !strcmp(it->valuestring, recipe(it->string, next)),
               "%s: %s, recipe says %s", it->string, cJSON_IsString(it) ? it->valuestring : "?",
               recipe(it->string, next));
        CHECKF(moe8_st_find(st, it->string) != NULL, "%s described but not written", it->string);
        CHECKF(!strstr(it->string, "experts.gate_up_proj") &&
                   !strstr(it->string, "experts.down_proj"), "%s: stacked name left", it->string);
        if (cJSON_IsString(it) && !strcmp(it->valuestring, "W8A8_DYNAMIC")) {
            const moe8_tensor *t = moe8_st_find(st, it->string);
            size_t n = strlen(it->string);
            if (n > 7 && !strcmp(it->string + n - 7, ".weight")) {
                n_dyn++;
                CHECK(t && t->dtype == MOE8_DT_I8);
            }
        }
    }
    CHECK(n_keys == (int64_t)moe8_st_count(st));
    CHECKF(n_dyn == 4 * 3 * E + 3 + (next ? 3 : 0), "%lld W8A8_DYNAMIC weights", (long long)n_dyn);
    CHECK(!strcmp(cJSON_GetObjectItem(d, "model_quant_type")->valuestring, "W8A8_DYNAMIC"));
    moe8_st_free(st);
    cJSON_Delete(d);
}

/* q_name's int8 codes [N][K] and weight_scale against rows r0.. of float
 * source tensor src_name (per row: scale = amax / 127, code = round(w /
 * scale), |code| <= 127), zero weight_offset. */
static void check_codes(const char *src_dir, const char *q_dir, const char *src_name,
                        int64_t r0, const char *q_name) {
    moe8_st *s = NULL, *q = NULL;
    const moe8_tensor *w, *c, *sc, *of;
    char n[512];
    moe8_error e;
    int64_t N, K, bad = 0;
    CHECK(moe8_st_open(src_dir, &s, &e) == MOE8_OK && moe8_st_open(q_dir, &q, &e) == MOE8_OK);
    if (!s || !q) return;
    w = moe8_st_find(s, src_name);
    c = moe8_st_find(q, q_name);
    FMT(n, "%.*s_scale", (int)strlen(q_name), q_name);
    sc = moe8_st_find(q, n);
    FMT(n, "%.*s_offset", (int)strlen(q_name), q_name);
    of = moe8_st_find(q, n);
    CHECKF(w && c && sc && of, "%s / %s", src_name, q_name);
    if (!w || !c || !sc || !of) return;
    N = c->shape[0], K = c->shape[1];
    CHECK(w->shape[w->n_dims - 1] == K && sc->n_elements == N && of->n_elements == N);
    for (int64_t i = 0; i < N; i++) {
        double amax = 0, scale = ((const float *)sc->data)[i];
        for (int64_t j = 0; j < K; j++) amax = fmax(amax, fabs(f32_at(w, (r0 + i) * K + j)));
        if (fabs(scale - amax / 127.0) > 1e-6 * amax) bad++;
        if (((const float *)of->data)[i] != 0.0f) bad++;
        for (int64_t j = 0; j < K; j++) {
            double x = f32_at(w, (r0 + i) * K + j), code = ((const int8_t *)c->data)[i * K + j];
            if (fabs(code - x / scale) > 0.5 + 1e-3) bad++;
        }
    }
    CHECKF(bad == 0, "%s: %lld codes or scales off", q_name, (long long)bad);
    moe8_st_free(s);
    moe8_st_free(q);
}

/* --experts w4a8: the routed experts' weights W4A8_DYNAMIC (I8 [I/2][H] for
 * gate/up, [H/2][I] for down, with weight_scale, weight_offset and
 * scale_bias described alike), the rest of the recipe unchanged. */
static void check_w4_desc(const char *q_dir, int next, int64_t E) {
    cJSON *d = read_json(q_dir, "quant_model_description.json"), *it;
    moe8_st *st = NULL;
    moe8_error e;
    int64_t n_w4 = 0, n_dyn = 0;
    CHECK(d && moe8_st_open(q_dir, &st, &e) == MOE8_OK);
    if (!d || !st) return;
    cJSON_ArrayForEach(it, d) {
        const char *want, *got = cJSON_IsString(it) ? it->valuestring : "?";
        size_t n = strlen(it->string);
        if (!strcmp(it->string, "model_quant_type") || !strcmp(it->string, "version") ||
            !strcmp(it->string, "group_size"))
            continue;
        want = recipe(it->string, next);
        if (strstr(it->string, ".mlp.experts.") && strncmp(it->string, "mtp.", 4) &&
            (!strcmp(want, "W8A8_DYNAMIC") || strstr(it->string, ".scale_bias")))
            want = "W4A8_DYNAMIC";
        CHECKF(!strcmp(got, want), "w4a8 %s: %s, expected %s", it->string, got, want);
        CHECKF(moe8_st_find(st, it->string) != NULL, "%s described but not written", it->string);
        if (n > 7 && !strcmp(it->string + n - 7, ".weight"))
            n_w4 += !strcmp(got, "W4A8_DYNAMIC"), n_dyn += !strcmp(got, "W8A8_DYNAMIC");
    }
    CHECKF(n_w4 == 4 * 3 * E && n_dyn == 3 + (next ? 3 : 0), "w4a8: %lld W4A8, %lld W8A8 weights",
           (long long)n_w4, (long long)n_dyn);
    moe8_st_free(st);
    cJSON_Delete(d);
}

/* Squared error of K weights from element i0 of w as int4 codes of `scale`. */
static double w4_err2(const moe8_tensor *w, int64_t i0, int64_t K, float scale) {
    double e2 = 0;
    for (int64_t j = 0; j < K && scale > 0; j++) {
        const float v = f32_at(w, i0 + j), q4 = fminf(fmaxf(rintf(v / scale), -8.0f), 7.0f);
        e2 += ((double)v - (double)scale * q4) * ((double)v - (double)scale * q4);
    }
    return e2;
}

/* q_name's W4A8 codes (two's complement nibbles, row 2j in the low nibble of
 * byte row j) and weight_scale against rows r0.. of src_name, by this test's
 * reading of the rule: the scale one of c amax / 7 for c = 1, 0.95, ..., 0.5
 * whose codes clamp(rint(w / scale), -8, 7) give the least squared error
 * (within 1e-6 of the least: ties and rounding), the codes those of it. */
static void check_w4_codes(const char *src_dir, const char *q_dir, const char *src_name,
                           int64_t r0, const char *q_name) {
    moe8_st *s = NULL, *q = NULL;
    const moe8_tensor *w, *c, *sc;
    char n[512];
    moe8_error e;
    int64_t N, K, bad = 0;
    CHECK(moe8_st_open(src_dir, &s, &e) == MOE8_OK && moe8_st_open(q_dir, &q, &e) == MOE8_OK);
    if (!s || !q) return;
    w = moe8_st_find(s, src_name);
    c = moe8_st_find(q, q_name);
    FMT(n, "%.*s_scale", (int)strlen(q_name), q_name);
    sc = moe8_st_find(q, n);
    CHECKF(w && c && sc && c->dtype == MOE8_DT_I8, "%s / %s", src_name, q_name);
    if (!w || !c || !sc) return;
    N = 2 * c->shape[0], K = c->shape[1];
    CHECK(sc->n_elements == N && w->shape[w->n_dims - 1] == K);
    for (int64_t i = 0; i < N; i++) {
        const float got = ((const float *)sc->data)[i];
        double amax = 0, best = INFINITY, got_err = INFINITY;
        int is_candidate = 0;
        for (int64_t j = 0; j < K; j++) amax = fmax(amax, fabs(f32_at(w, (r0 + i) * K + j)));
        for (int k = 0; k <= 10; k++) { /* the candidates, and the stored scale's own error */
            const float scale = (float)(1.0 - 0.05 * k) * (float)amax / 7.0f;
            const double e2 = w4_err2(w, (r0 + i) * K, K, scale);
            best = fmin(best, e2);
            is_candidate |= fabs(got - scale) <= 1e-6 * scale;
        }
        got_err = w4_err2(w, (r0 + i) * K, K, got);
        if (amax > 0 && (!is_candidate || got_err > best * (1 + 1e-6))) bad++;
        for (int64_t j = 0; j < K && got > 0; j++) {
            const uint8_t b = ((const uint8_t *)c->data)[(i / 2) * K + j];
            const int v = i % 2 ? b >> 4 : b & 15, code = v >= 8 ? v - 16 : v;
            bad += code != (int)fminf(fmaxf(rintf(f32_at(w, (r0 + i) * K + j) / got), -8.0f), 7.0f);
        }
    }
    CHECKF(bad == 0, "%s: %lld int4 codes or scales off the rule", q_name, (long long)bad);
    moe8_st_free(s);
    moe8_st_free(q);
}

static double cosine(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return ab / sqrt(aa * bb);
}

/* Quantize src (family fam, config read back) into dst and check it all;
 * stacked: src holds qwen3_5_moe's stacked experts. */
static void check_family(const char *src, const char *dst, const char *w4, const char *fam,
                         int next, int stacked) {
    moe8_quantize_params qp = moe8_quantize_params_default();
    moe8_quantize_stats qs;
    char sname[256], qname[256];
    static float lf[V], lq[V];
    int32_t gf[N_GREEDY], gq[N_GREEDY];
    cJSON *cfg, *tc;
    int64_t E, I, Hd;
    int32_t vocab;
    moe8_error e;
    double cs;
    const char *P = next ? "model." : "model.language_model.";
    CHECKF(moe8_quantize(src, dst, &qp, &qs, &e) == MOE8_OK, "%s: %s", fam, e.message);
    CHECK(qs.n_calib_tokens == 0); /* nothing static: nothing calibrated */
    cfg = read_json(src, "config.json");
    tc = next ? cfg : cJSON_GetObjectItem(cfg, "text_config");
    E = (int64_t)cJSON_GetObjectItem(tc, "num_experts")->valuedouble;
    I = (int64_t)cJSON_GetObjectItem(tc, "moe_intermediate_size")->valuedouble;
    Hd = (int64_t)cJSON_GetObjectItem(tc, "hidden_size")->valuedouble;
    vocab = (int32_t)cJSON_GetObjectItem(tc, "vocab_size")->valuedouble;
    cJSON_Delete(cfg);
    CHECK(vocab <= V);
    check_desc(dst, next, E);
    if (next)
        check_codes(src, dst, "model.layers.0.linear_attn.in_proj_qkvz.weight", 0,
                    "model.layers.0.linear_attn.in_proj_qkvz.weight");
    /* expert 5's up rows (of the stacked gate_up_proj [E][2I][H]), the last expert's down */
    FMT(qname, "%slayers.2.mlp.experts.5.up_proj.weight", P);
    FMT(sname, "%slayers.2.mlp.experts.gate_up_proj", P);
    check_codes(src, dst, stacked ? sname : qname, stacked ? 5 * 2 * I + I : 0, qname);
    FMT(qname, "%slayers.1.mlp.experts.%lld.down_proj.weight", P, (long long)(E - 1));
    FMT(sname, "%slayers.1.mlp.experts.down_proj", P);
    check_codes(src, dst, stacked ? sname : qname, stacked ? (E - 1) * Hd : 0, qname);
    run_model(src, vocab, lf, gf);
    run_model(dst, vocab, lq, gq);
    cs = cosine(lf, lq, vocab);
    CHECKF(cs >= 0.999, "%s: W8A8 vs float logits cosine %.6f", fam, cs);
    CHECKF(!memcmp(gf, gq, sizeof gf), "%s: greedy tokens differ", fam);
    printf("%s%s: W8A8 vs float cosine %.6f, %d greedy tokens equal\n", fam,
           stacked ? " (stacked experts)" : "", cs, N_GREEDY);
    qp.experts_w4a8 = 1;
    CHECKF(moe8_quantize(src, w4, &qp, NULL, &e) == MOE8_OK, "%s w4a8: %s", fam, e.message);
    check_w4_desc(w4, next, E);
    FMT(qname, "%slayers.2.mlp.experts.5.up_proj.weight", P);
    FMT(sname, "%slayers.2.mlp.experts.gate_up_proj", P);
    check_w4_codes(src, w4, stacked ? sname : qname, stacked ? 5 * 2 * I + I : 0, qname);
    run_model(w4, vocab, lq, gq);
    cs = cosine(lf, lq, vocab);
    /* int4's 16 levels: ~0.999 on make-model tiny (experts 64 x 256); the
     * stacked fixture's experts are 32 x 64 of N(0, 1/64) (measured 0.972) */
    CHECKF(cs >= (stacked ? 0.95 : 0.99), "%s: W4A8 experts vs float logits cosine %.6f", fam, cs);
    printf("%s%s: W4A8 experts vs float cosine %.6f\n", fam, stacked ? " (stacked experts)" : "", cs);
}

/* make-model tiny (per-expert names). */
static void test_family(const char *base, moe8_arch arch, const char *fam) {
    moe8_make_model_params mp = moe8_make_model_params_default();
    char src[4096], dst[4096], w4[4096];
    moe8_error e;
    FMT(src, "%s/%s", base, fam);
    FMT(dst, "%s/%s-w8a8", base, fam);
    FMT(w4, "%s/%s-w4a8", base, fam);
    mp.arch = arch;
    mp.n_layers = 4;
    mp.vocab_size = V;
    mp.seed = 5;
    mp.tokenizer_dir = TOK;
    if (moe8_make_model(&mp, src, &e) != MOE8_OK) {
        fprintf(stderr, "make-model %s: %s\n", fam, e.message);
        exit(2);
    }
    check_family(src, dst, w4, fam, arch == MOE8_ARCH_QWEN3_NEXT, 0);
    if (arch == MOE8_ARCH_QWEN3_NEXT) { /* --linear float: q/k/v and in_proj_qkvz FLOAT too */
        moe8_quantize_params qp = moe8_quantize_params_default();
        qp.linear_float = 1;
        FMT(dst, "%s/%s-lf", base, fam);
        CHECKF(moe8_quantize(src, dst, &qp, NULL, &e) == MOE8_OK, "%s", e.message);
        CHECK(!strcmp(desc_type(dst, "model.layers.3.self_attn.q_proj.weight"), "FLOAT"));
        CHECK(!strcmp(desc_type(dst, "model.layers.0.linear_attn.in_proj_qkvz.weight"), "FLOAT"));
        CHECK(!strcmp(desc_type(dst, "model.layers.0.mlp.experts.3.gate_proj.weight"),
                      "W8A8_DYNAMIC"));
    }
}

/* fixture_hybrid.h's float qwen3_5_moe: stacked experts, as Qwen3.6's
 * float checkpoints store them (bf16, vocab 256, E 8). */
static void test_stacked(void) {
    fx_opts o = fx_hybrid_opts(FX_QWEN3_5_MOE);
    char src[4096], dst[4096], w4[4096];
    const char *base = test_tmpdir("quantize_hybrid_out"); /* a static buffer: copied */
    char b[4096];
    FMT(b, "%s", base);
    base = b;
    o.seed = 36;
    FMT(src, "%s", fx_test_model("quantize_hybrid_stacked", &o, 1));
    FMT(dst, "%s/stacked-w8a8", base);
    FMT(w4, "%s/stacked-w4a8", base);
    check_family(src, dst, w4, "qwen3_5_moe", 0, 1);
}

int main(void) {
    const char *base = test_tmpdir("quantize_hybrid");
    test_family(base, MOE8_ARCH_QWEN3_NEXT, "qwen3_next");
    test_family(base, MOE8_ARCH_QWEN3_5_MOE, "qwen3_5_moe");
    test_stacked();
    return test_summary();
}
