/*
 * test_serve_hybrid.c — `moe8 serve` of a hybrid model (qwen3_next: Gated
 * DeltaNet layers with per-sequence recurrent state, fixture_hybrid.h) and
 * its /metrics of the recurrent-state pool, asserted after a known sequence
 * of requests (prompts as token ids, greedy, 2 tokens each, one at a time):
 *   A  150 ids                  a miss; snapshots at 64 and 128 kept
 *   B  A's 150 + 30 others      a hit (A's snapshot at 128: 128 cached
 *                               tokens), nothing new (192 is past its prompt)
 *   C  100 other ids            a miss; a snapshot at 64
 * then, idle: moe8:state_snapshot_hits_total 1, misses 2, evictions 0 (the
 * default pool holds them all), state_slots_used 3 (the three snapshots, no
 * sequence running), state_snapshot_bytes 3 slots, state_slots_total and
 * state_snapshot_bytes_limit those of --state-mb 1 with the slot size this
 * test computes from the fixture's shapes (every Gated DeltaNet layer's conv
 * state [K-1][C] and recurrent state [NV][dk][dv] in f32, the slot rounded up
 * to 16 floats: src/model/state_pool.h), prefix_cache_hits_total 128; the
 * state metrics absent for a model without Gated DeltaNet layers
 * (test_serve's). Each request's text equals the same request on a fresh
 * server without the prefix cache (a snapshot resumes as from scratch).
 */
#include "serve_test.h"

#define NAME "hybrid"

/* Bytes of one state slot of the fixture (state_pool.h's rule, written here). */
static double slot_bytes(const fx_opts *o) {
    int64_t C = 2 * o->lin_k_heads * o->lin_k_dim + o->lin_v_heads * o->lin_v_dim, n_gdn = 0;
    int64_t per = (o->conv_kernel - 1) * C + o->lin_v_heads * o->lin_k_dim * o->lin_v_dim, fl;
    for (int64_t l = 0; l < o->n_layers; l++) n_gdn += !fx_full_attn(o, l);
    fl = (n_gdn * per + 15) / 16 * 16;
    return (double)fl * 4.0;
}

/* A completion of the ids, greedy, 2 tokens: its text (into out). */
static void complete(server *sv, const int32_t *ids, int n, buf *out) {
    cJSON *o = cJSON_CreateObject(), *p = cJSON_AddArrayToObject(o, "prompt");
    buf b = {0};
    char *body;
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(p, cJSON_CreateNumber(ids[i]));
    cJSON_AddStringToObject(o, "model", NAME);
    cJSON_AddNumberToObject(o, "max_tokens", 2);
    cJSON_AddNumberToObject(o, "temperature", 0);
    body = cJSON_PrintUnformatted(o);
    CHECKF(post(sv, "/v1/completions", body, &b) == 200, "completion: %s", buf_s(&b));
    cJSON *r = cJSON_Parse(buf_s(&b));
    const char *text = jstr(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "choices"), 0), "text");
    out->n = 0;
    buf_str(out, text ? text : "?");
    cJSON_Delete(r);
    cJSON_Delete(o);
    free(body);
    buf_free(&b);
}

int main(int argc, char **argv) {
    fx_opts o = fx_hybrid_opts(FX_QWEN3_NEXT);
    server sv;
    char args[4400];
    const char *dir;
    int32_t a[150], b[180], c[100];
    buf ta[2] = {{0}}, tb[2] = {{0}}, tc[2] = {{0}};
    serve_test_parts(argc, argv);
    serve_test_init("test_serve_hybrid");
    if (!g_part_c) return test_summary();
    o.vocab = QWEN_VOCAB;
    o.seed = 4141;
    dir = fx_test_model("serve_hybrid", &o, 1);
    for (int i = 0; i < 180; i++) b[i] = (int32_t)((i * 7919 + 13) % 5000) + 100;
    memcpy(a, b, sizeof a);
    for (int i = 0; i < 100; i++) c[i] = (int32_t)((i * 104729 + 7) % 5000) + 5200;
    for (int run = 0; run < 2; run++) { /* with the prefix cache, then without */
        snprintf(args, sizeof args, "-m '%s' --ctx-size 512 --threads 2 --state-mb 1 "
                 "--served-model-name " NAME "%s", dir, run ? " --no-prefix-cache" : "");
        if (server_start(&sv, run ? "hybrid_nocache" : "hybrid", NULL, args) != 0) continue;
        complete(&sv, a, 150, &ta[run]);
        complete(&sv, b, 180, &tb[run]);
        complete(&sv, c, 100, &tc[run]);
        CHECK(wait_idle(&sv, 5));
        if (run == 0) {
            const double slot = slot_bytes(&o), total = metric(&sv, "moe8:state_slots_total", NULL);
            const double hits = metric(&sv, "moe8:state_snapshot_hits_total", NULL);
            const double misses = metric(&sv, "moe8:state_snapshot_misses_total", NULL);
            const double ev = metric(&sv, "moe8:state_snapshot_evictions_total", NULL);
            const double used = metric(&sv, "moe8:state_slots_used", NULL);
            const double snap = metric(&sv, "moe8:state_snapshot_bytes", NULL);
            const double limit = metric(&sv, "moe8:state_snapshot_bytes_limit", NULL);
            printf("state pool: %g of %g slots used, snapshots %g of %g bytes (slot %g); "
                   "hits %g, misses %g, evictions %g\n", used, total, snap, limit, slot, hits, misses, ev);
            CHECKF(hits == 1 && misses == 2 && ev == 0, "hits %g, misses %g, evictions %g", hits,
                   misses, ev);
            CHECKF(used == 3 && snap == 3 * slot, "used %g, snapshot bytes %g (slot %g)", used, snap,
                   slot);
            CHECKF(total == floor(1048576.0 / slot) && limit == total * slot,
                   "%g slots, limit %g: --state-mb 1 of %g-byte slots", total, limit, slot);
            CHECK(metric(&sv, "moe8:prefix_cache_hits_total", NULL) == 128);
        } else {
            CHECK(metric(&sv, "moe8:state_snapshot_hits_total", NULL) == 0 &&
                  metric(&sv, "moe8:state_snapshot_misses_total", NULL) == 0 &&
                  metric(&sv, "moe8:state_slots_used", NULL) == 0);
        }
        server_stop(&sv, 10);
    }
    CHECKF(!strcmp(buf_s(&ta[0]), buf_s(&ta[1])) && !strcmp(buf_s(&tb[0]), buf_s(&tb[1])) &&
               !strcmp(buf_s(&tc[0]), buf_s(&tc[1])),
           "texts with / without the prefix cache: '%s' '%s' '%s' / '%s' '%s' '%s'", buf_s(&ta[0]),
           buf_s(&tb[0]), buf_s(&tc[0]), buf_s(&ta[1]), buf_s(&tb[1]), buf_s(&tc[1]));
    for (int i = 0; i < 2; i++) buf_free(&ta[i]), buf_free(&tb[i]), buf_free(&tc[i]);
    curl_global_cleanup();
    printf("test_serve_hybrid: %.1f s\n", now_s() - g_t0);
    return test_summary();
}
