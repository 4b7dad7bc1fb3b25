/*
 * hybrid_test.h — what test_qwen3_next.c and test_qwen3_5_moe.c share: the
 * reference's whole-model self-checks (prefill = decode steps with the state
 * carried = any split; chunked DeltaNet prefill = recurrent), the fixture's
 * JSON read back, and the engine's long-prompt check across the chunk edge.
 * Include after test.h, fixture_model.h, forward_ref.h and family_test.h.
 */
#ifndef MOE8_HYBRID_TEST_H
#define MOE8_HYBRID_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline double hy_max_abs_diff(const double *a, const double *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i]));
    return d;
}

static inline double hy_max_abs(const double *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}

/* n token ids in [0, vocab), deterministic. */
static inline void hy_ids(int32_t *ids, int n, int64_t vocab, uint64_t seed) {
    test_rng r = {seed | 1};
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(test_rng_u64(&r) % (uint64_t)vocab);
}

/* The reference's own consistency on the model `o`: n tokens as one
 * prefill, token by token (state carried; with `steps`), split at `cut`, and
 * split with the DeltaNet layers' prefill chunked: the same logits
 * (recurrent within 1e-12, chunked within 1e-9 of the largest logit). */
static inline void hy_check_decode_vs_prefill(const char *label, const fx_opts *o, int n, int cut, int steps) {
    ref_model rm;
    hy_state st;
    const int64_t V = o->vocab;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    double *whole = malloc(sizeof(double) * (size_t)(n * V)), *l = malloc(sizeof(double) * (size_t)(n * V));
    double m, d_step, d_cut, d_chunk;
    hy_ids(ids, n, o->vocab, 77 + (uint64_t)n);
    ref_init(&rm, o);
    ref_forward(&rm, ids, n, whole);
    m = hy_max_abs(whole, (size_t)(n * V));
    d_step = 0;
    if (steps) {
        hy_state_init(&st, o, n);
        for (int t = 0; t < n; t++) hy_forward(&rm, &st, ids + t, 1, l + t * V);
        hy_state_free(&st, o);
        d_step = hy_max_abs_diff(whole, l, (size_t)(n * V));
    }
    hy_state_init(&st, o, n);
    hy_forward(&rm, &st, ids, cut, l);
    hy_forward(&rm, &st, ids + cut, n - cut, l + cut * V);
    hy_state_free(&st, o);
    d_cut = hy_max_abs_diff(whole, l, (size_t)(n * V));
    rm.hy_chunked = 1;
    hy_state_init(&st, o, n);
    hy_forward(&rm, &st, ids, cut, l);
    hy_forward(&rm, &st, ids + cut, n - cut, l + cut * V);
    hy_state_free(&st, o);
    d_chunk = hy_max_abs_diff(whole, l, (size_t)(n * V));
    printf("%-28s %d tokens: |logit| %.3g; decode steps %.3g, split at %d %.3g, chunked %.3g\n", label, n, m,
           d_step, cut, d_cut, d_chunk);
    CHECKF(m > 0 && d_step <= 1e-12 * m && d_cut <= 1e-12 * m, "%s: decode/split differ from prefill (%g, %g)",
           label, d_step, d_cut);
    CHECKF(d_chunk <= 1e-9 * m, "%s: chunked prefill differs from recurrent by %g", label, d_chunk);
    ref_free(&rm);
    free(ids); free(whole); free(l);
}

/* The logits of the reference on `o` against `base`: max |diff|. */
static inline double hy_ref_diff(const fx_opts *o, const int32_t *ids, int n, const double *base) {
    ref_model rm;
    double *l = malloc(sizeof(double) * (size_t)(n * o->vocab)), d;
    ref_init(&rm, o);
    ref_forward(&rm, ids, n, l);
    d = hy_max_abs_diff(l, base, (size_t)(n * o->vocab));
    ref_free(&rm);
    free(l);
    return d;
}

/* The logits of rm with tensor `name` changed (I8 values negated, float ones
 * x 0.5 + 0.1) against `base`, the tensor restored after: max |diff|. */
static inline double hy_edit_diff(ref_model *rm, const char *name, const int32_t *ids, int n,
                                  const double *base) {
    fx_tensor *t = (fx_tensor *)hy_t(rm, "%s", name);
    void *keep = malloc(t->n_bytes);
    double *l = malloc(sizeof(double) * (size_t)(n * rm->o.vocab)), d;
    memcpy(keep, t->data, t->n_bytes);
    for (int64_t i = 0; i < fx_numel(t); i++)
        fx_set(t, i, t->dtype == MOE8_DT_I8 ? -fx_get(t, i) : fx_get(t, i) * 0.5 + 0.1);
    ref_forward(rm, ids, n, l);
    d = hy_max_abs_diff(l, base, (size_t)(n * rm->o.vocab));
    memcpy(t->data, keep, t->n_bytes);
    free(keep);
    free(l);
    return d;
}

/* config.json (or quant_model_description.json) of the folder, parsed. */
static inline cJSON *hy_json(const char *dir, const char *file) {
    char path[4400];
    size_t len;
    unsigned char *text;
    cJSON *c;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    text = test_slurp(path, &len);
    c = cJSON_Parse(text ? (const char *)text : "");
    free(text);
    if (!c || !cJSON_IsObject(c)) {
        CHECKF(0, "%s: not a JSON object", path);
        cJSON_Delete(c);
        return cJSON_CreateObject();
    }
    return c;
}

static inline const char *hy_jstr(const cJSON *o, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(it) ? it->valuestring : "";
}

static inline double hy_jnum(const cJSON *o, const char *k) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(it) ? it->valuedouble : NAN;
}

/* The engine on a prompt of n tokens (crossing the DeltaNet chunk edge of
 * 64) prefilled at once, logits asked at a few positions, then `steps`
 * decode steps, against the reference: float within 1e-4 relative, W8A8 at
 * cosine >= 0.9999. */
static inline void hy_check_long(const char *label, const fx_opts *o, int n, int steps) {
    const char *dir = write_fixture(label, o);
    moe8_model *m = test_load_model(dir);
    moe8_context_params p = moe8_context_params_default();
    moe8_context *c = NULL;
    moe8_error e;
    const int total = n + steps, V = (int)o->vocab;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)total), *pos = malloc(sizeof(int32_t) * (size_t)total);
    int32_t *seq = calloc((size_t)total, sizeof(int32_t));
    int8_t *want = calloc((size_t)total, 1);
    double *ref = malloc(sizeof(double) * (size_t)total * (size_t)V), worst = 0, worst_cos = 1;
    ref_model rm;
    const int at[5] = {0, 62, 63, 64, n - 1};
    hy_ids(ids, total, o->vocab, 4242);
    ref_init(&rm, o);
    ref_forward(&rm, ids, total, ref);
    ref_free(&rm);
    p.kv_type = MOE8_DT_F32;
    p.n_ctx = total + 16;
    p.n_outputs = 8;
    p.n_threads = g_threads;
    CHECKF(moe8_context_create(m, &p, &c, &e) == MOE8_OK, "context: %s", e.message);
    for (int i = 0; i < total; i++) pos[i] = i;
    for (int j = 0; j < 5; j++) want[at[j]] = 1;
    {
        moe8_batch b = {n, ids, pos, seq, want};
        CHECKF(c && moe8_decode(c, &b, &e) == MOE8_OK, "%s: prefill: %s", label, e.message);
    }
    for (int i = 0; c && i < total; i++) {
        const float *got;
        if (i >= n) {
            moe8_batch b1 = {1, ids + i, pos + i, seq, want + i};
            want[i] = 1;
            CHECKF(moe8_decode(c, &b1, &e) == MOE8_OK, "%s: step %d: %s", label, i, e.message);
        } else if (!want[i]) {
            continue;
        }
        got = moe8_context_logits(c, i >= n ? 0 : i);
        if (!got) {
            CHECKF(0, "%s: no logits at %d", label, i);
            continue;
        }
        worst = fmax(worst, max_rel(got, ref + (size_t)i * V, V));
        worst_cos = fmin(worst_cos, test_cosine_ref(got, ref + (size_t)i * V, (size_t)V));
    }
    printf("%-30s prefill %d + %d decode: worst rel err %.3g, worst cosine %.10f\n", label, n, steps, worst,
           worst_cos);
    if (o->quant) CHECKF(worst_cos >= 0.9999, "%s: cosine %.8f", label, worst_cos);
    else CHECKF(worst <= 1e-4, "%s: rel err %.3g", label, worst);
    moe8_context_free(c);
    moe8_model_free(m);
    free(ids); free(pos); free(seq); free(want); free(ref);
}

/* make-model's tiny preset of `arch` (4 layers: 3 Gated DeltaNet, 1 full;
 * vocab folded to 16384): it loads with those kinds, a KV cache for the full
 * layer only; its logits are finite,
 * the same bit for bit on 1 and 2 threads, and a prompt prefilled = 4
 * prefilled + 5 decode steps (chunked vs recurrent form) within 1e-4 (its
 * W8A8 and W4A8 quantizations: test_quantize_hybrid.c). */
static inline void hy_check_tiny(int arch) {
    enum { V = 16384, n = 9 };
    static const int32_t prompt[n] = {9707, 11, 847, 829, 374, 12, 5000, 77, 16000};
    const char *name = moe8_arch_name((moe8_arch)arch);
    char dir[4096], label[64];
    moe8_make_model_params mp = moe8_make_model_params_default();
    moe8_layer_info li;
    moe8_error e;
    float *a = malloc(sizeof(float) * n * V), *b = malloc(sizeof(float) * n * V);
    double worst = 0;
    int bad = 0;
    FMT(label, "hy_tiny_%s", name);
    snprintf(dir, sizeof dir, "%s", test_tmpdir(label));
    mp.arch = (moe8_arch)arch, mp.vocab_size = V, mp.tokenizer_dir = MOE8_TOKENIZER_DIR;
    mp.force = 1, mp.seed = 7;
    CHECKF(moe8_make_model(&mp, dir, &e) == MOE8_OK, "make-model %s: %s", name, e.message);
    moe8_model *m = test_load_model(dir);
    for (int l = 0; l < 4; l++)
        CHECKF(moe8_model_layer_info(m, l, &li) == 0 && li.gdn == (l != 3) && li.is_moe,
               "%s tiny: layer %d kinds", name, l);
    /* KV cache rows for the one full-attention layer only: 2 planes x 2 kv heads of 64 */
    CHECK(moe8_model_kv_block_bytes(m, MOE8_DT_F16) == (size_t)2 * 2 * MOE8_KV_BLOCK_TOKENS * 64 * 2);
    g_threads = 1;
    run_logits(m, prompt, n, n, a);
    g_threads = 2;
    run_logits(m, prompt, n, n, b);
    CHECKF(!memcmp(a, b, sizeof(float) * n * V), "%s tiny: logits differ on 1 and 2 threads", name);
    run_logits(m, prompt, n, 4, b);
    for (int i = 0; i < n * V; i++) bad += !isfinite(a[i]);
    for (int t = 0; t < n; t++) {
        double d = 0, mx = 0;
        for (int j = 0; j < V; j++)
            d = fmax(d, fabs(a[t * V + j] - b[t * V + j])), mx = fmax(mx, fabs(a[t * V + j]));
        worst = fmax(worst, d / mx);
    }
    printf("%-30s make-model tiny: prefill 9 vs 4 + 5 decode steps: rel %.3g\n", name, worst);
    CHECKF(!bad && worst <= 1e-4, "%s tiny: %d non-finite, prefill vs decode %.3g", name, bad, worst);
    moe8_model_free(m);
    free(a);
    free(b);
}

#endif
