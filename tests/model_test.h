/*
 * model_test.h — what the tests that load the fixture models share
 * (family_test.h for the model-family tests, test_cache.c): a context,
 * greedy decoding, fixture folders, running the CLI, and the logits of a
 * prefill + decode steps. Include after test.h and fixture_model.h.
 */
#ifndef MOE8_MODEL_TEST_H
#define MOE8_MODEL_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "moe8.h"

#define FMT(buf, ...)                                                             \
    do {                                                                          \
        if (snprintf(buf, sizeof buf, __VA_ARGS__) >= (int)sizeof buf) abort();   \
    } while (0)

static const int32_t PROMPT[9] = {5, 17, 200, 3, 99, 42, 7, 128, 64};

static int g_threads = 2; /* of new_ctx */

static moe8_context *new_ctx(moe8_model *m, int n_ctx) {
    moe8_context_params p = moe8_context_params_default();
    moe8_context *c = NULL;
    moe8_error e;
    p.kv_type = MOE8_DT_F32;
    p.n_ctx = n_ctx;
    p.n_outputs = 16;
    p.n_threads = g_threads;
    if (moe8_context_create(m, &p, &c, &e) != MOE8_OK) {
        fprintf(stderr, "context: %s\n", e.message);
        exit(2);
    }
    return c;
}

static int greedy(moe8_model *m, const int32_t *prompt, int n_prompt, int32_t *out, int n) {
    moe8_context *c = new_ctx(m, 32);
    moe8_sampler *s = NULL;
    int32_t n_out = 0, np = n_prompt;
    const int32_t *pp = prompt;
    moe8_generate_request r = {1, &pp, &np, n, NULL, 0, NULL, NULL, out, &n_out, NULL};
    CHECK(moe8_sampler_create(NULL, moe8_context_n_vocab(c), &s, NULL) == MOE8_OK);
    CHECK(moe8_generate(c, s, &r, NULL) == MOE8_OK);
    moe8_sampler_free(s);
    moe8_context_free(c);
    return n_out;
}

static const char *write_fixture(const char *name, const fx_opts *o) {
    static char dirs[8][4096];
    static int n;
    char *slot = dirs[n++ % 8];
    snprintf(slot, 4096, "%s", test_tmpdir(name));
    if (fx_write_model(slot, o) != 0) exit(2);
    return slot;
}

static int run(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    size_t n = 0;
    int st;
    if (!p) return -1;
    while (n + 1 < cap && !feof(p)) n += fread(out + n, 1, cap - 1 - n, p);
    out[n] = '\0';
    st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Logits of every position of ids[0..n) into out[n][V]: the first n_pre
 * tokens as one batch, then one token per decode step. */
static void run_logits(moe8_model *m, const int32_t *ids, int n, int n_pre, float *out) {
    moe8_context *c = new_ctx(m, 32);
    int32_t pos[16], seq[16] = {0};
    int8_t want[16];
    const int V = moe8_context_n_vocab(c);
    moe8_error e;
    for (int i = 0; i < n; i++) pos[i] = i, want[i] = 1;
    moe8_batch b = {n_pre, ids, pos, seq, want};
    CHECKF(moe8_decode(c, &b, &e) == MOE8_OK, "decode: %s", e.message);
    for (int i = 0; i < n_pre; i++) memcpy(out + (size_t)i * V, moe8_context_logits(c, i), sizeof(float) * V);
    for (int i = n_pre; i < n; i++) {
        moe8_batch b1 = {1, ids + i, pos + i, seq, want};
        CHECKF(moe8_decode(c, &b1, &e) == MOE8_OK, "decode step %d: %s", i, e.message);
        memcpy(out + (size_t)i * V, moe8_context_logits(c, 0), sizeof(float) * V);
    }
    moe8_context_free(c);
}

#endif
