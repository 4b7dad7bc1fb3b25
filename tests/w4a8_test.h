/*
 * w4a8_test.h — what test_w4a8.c and test_w4a8_forward.c share: the 4-layer
 * fixture mixing W4A8_DYNAMIC, W8A8_DYNAMIC and FLOAT expert layers, its
 * folder, a context (float_experts on or off) and the logits of PROMPT.
 * Include after test.h and fixture_model.h.
 */
#ifndef MOE8_W4A8_TEST_H
#define MOE8_W4A8_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe8.h"

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

#endif
