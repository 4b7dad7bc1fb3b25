/*
 * test_request_wire.c — a moe8_request through the TP broadcast's wire form
 * (sched/request_wire.c): the field table covers every byte of the struct,
 * every sent field comes back equal (checked field by field here, written
 * independently of the table), the fields rank 0 keeps come back at their
 * defaults, and every truncation or bad count of a message is refused with
 * MOE8_ERR_COMM, never read past.
 */
#include <stdlib.h>
#include <string.h>

#include "sched/request_wire.h"
#include "test.h"

static void same_request(const moe8_request *a, const moe8_request *b) {
    const moe8_request d = moe8_request_default();
    CHECK(b->n_prompt == a->n_prompt && !memcmp(b->prompt, a->prompt, 4 * (size_t)a->n_prompt));
    CHECK(b->sampling.temperature == a->sampling.temperature && b->sampling.top_k == a->sampling.top_k);
    CHECK(b->sampling.top_p == a->sampling.top_p && b->sampling.min_p == a->sampling.min_p);
    CHECK(b->sampling.seed == a->sampling.seed && b->max_tokens == a->max_tokens);
    CHECK(b->n_stop_ids == a->n_stop_ids &&
          (!a->n_stop_ids || !memcmp(b->stop_ids, a->stop_ids, 4 * (size_t)a->n_stop_ids)));
    CHECK(b->n_stop == a->n_stop);
    for (int i = 0; i < a->n_stop && i < b->n_stop; i++) CHECK(!strcmp(b->stop[i], a->stop[i]));
    CHECK(b->logprobs == a->logprobs && b->ignore_eos == a->ignore_eos);
    CHECK(b->n_prompt_logits == a->n_prompt_logits && b->n_bias == a->n_bias);
    CHECK(!a->n_bias || (!memcmp(b->bias_ids, a->bias_ids, 4 * (size_t)a->n_bias) &&
                         !memcmp(b->bias, a->bias, 4 * (size_t)a->n_bias)));
    CHECK(b->min_tokens == a->min_tokens && b->repetition_penalty == a->repetition_penalty);
    CHECK(b->frequency_penalty == a->frequency_penalty &&
          b->presence_penalty == a->presence_penalty);
    /* kept by rank 0 */
    CHECK(b->user == d.user && b->grammar == d.grammar && b->grammar_after == d.grammar_after);
}

int main(void) {
    char why[256];
    const int ok = moe8_request_wire_covers(why, sizeof why);
    CHECKF(ok, "%s", why);
    printf("field table: %s\n", why);

    static const int32_t prompt[5] = {7, 1, 65000, 3, 0}, stop_ids[2] = {151643, 9};
    static const int32_t bias_ids[3] = {5, 6, 7};
    static const float bias[3] = {-100.f, 2.5f, 0.125f};
    const char *stop[3] = {"</s>", "", "\xe4\xbd\xa0\xe5\xa5\xbd"};
    moe8_request r = moe8_request_default();
    r.prompt = prompt, r.n_prompt = 5;
    r.sampling.temperature = 0.7f, r.sampling.top_k = 40, r.sampling.top_p = 0.9f;
    r.sampling.min_p = 0.05f, r.sampling.seed = 0x123456789abcdefULL;
    r.max_tokens = 33, r.stop_ids = stop_ids, r.n_stop_ids = 2, r.stop = stop, r.n_stop = 3;
    r.logprobs = 4, r.ignore_eos = 1, r.user = &r, r.n_prompt_logits = 5;
    r.bias_ids = bias_ids, r.bias = bias, r.n_bias = 3, r.min_tokens = 2;
    r.repetition_penalty = 1.1f, r.frequency_penalty = 0.5f, r.presence_penalty = -0.25f;
    r.grammar = (const moe8_grammar *)&r, r.grammar_after = "</think>";

    const moe8_request variants[2] = {r, moe8_request_default()};
    for (int v = 0; v < 2; v++) {
        moe8_request a = variants[v], b;
        if (v == 1) a.prompt = prompt, a.n_prompt = 1;
        const size_t n = moe8_request_wire_size(&a);
        unsigned char *w = malloc(n + 1);
        const char *strs[MOE8_MAX_STOP_STRINGS];
        size_t at = 0;
        moe8_request_wire_put(&a, w);
        moe8_error e;
        CHECKF(moe8_request_wire_get(w, n, &at, &b, strs, &e) == MOE8_OK, "%s", e.message);
        CHECK(at == n);
        same_request(&a, &b);
        /* every truncation refused, inside the bytes it was given */
        int refused = 0;
        for (size_t cut = 0; cut < n; cut++) {
            unsigned char *t = malloc(cut ? cut : 1);
            memcpy(t, w, cut);
            at = 0;
            refused += moe8_request_wire_get(t, cut, &at, &b, strs, &e) == MOE8_ERR_COMM;
            free(t);
        }
        CHECKF(refused == (int)n, "%d of %zu truncations refused", refused, n);
        /* two requests back to back: each read where the other ends */
        unsigned char *two = malloc(2 * n);
        memcpy(two, w, n);
        memcpy(two + n, w, n);
        at = 0;
        CHECK(moe8_request_wire_get(two, 2 * n, &at, &b, strs, &e) == MOE8_OK && at == n);
        CHECK(moe8_request_wire_get(two, 2 * n, &at, &b, strs, &e) == MOE8_OK && at == 2 * n);
        free(two);
        free(w);
        printf("%s request: %zu bytes, round trip equal, %zu truncations refused\n",
               v ? "default" : "full", n, n);
    }
    /* a count no message can hold: refused naming the field, not allocated or read */
    {
        moe8_request a = r;
        const size_t n = moe8_request_wire_size(&a);
        unsigned char *w = malloc(n);
        const char *strs[MOE8_MAX_STOP_STRINGS];
        moe8_request b;
        moe8_error e;
        size_t at = 0;
        moe8_request_wire_put(&a, w);
        const int32_t huge = 0x7fffffff, neg = -1, many = MOE8_MAX_STOP_STRINGS + 1;
        memcpy(w, &huge, 4); /* n_prompt is the first value */
        CHECK(moe8_request_wire_get(w, n, &at, &b, strs, &e) == MOE8_ERR_COMM &&
              strstr(e.message, "prompt"));
        memcpy(w, &neg, 4);
        at = 0;
        CHECK(moe8_request_wire_get(w, n, &at, &b, strs, &e) == MOE8_ERR_COMM);
        moe8_request_wire_put(&a, w);
        /* n_stop: after n_prompt, 5 sampling values (24 bytes), max_tokens, n_stop_ids */
        memcpy(w + 4 + 24 + 4 + 4, &many, 4);
        at = 0;
        CHECK(moe8_request_wire_get(w, n, &at, &b, strs, &e) == MOE8_ERR_COMM &&
              strstr(e.message, "stop"));
        free(w);
        printf("impossible counts (prompt, stop strings) refused\n");
    }
    return test_summary();
}
