/*
 * test_serve_prompt_cache.c — `moe8 serve --prompt-cache-dir` across a
 * restart: a completion and a Messages request answered by a first server
 * are asked again of a second one on the same directory; the answers are
 * the same, usage counts the prompt tokens read from the disk tier
 * (prompt_tokens_details.cached_tokens; cache_read_input_tokens in the
 * Messages API, input_tokens the rest), and /metrics counts the disk
 * tier's hits, misses and bytes read and written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "fixture_model.h"
#include "serve_test.h"

typedef struct {
    char text[4096];
    int prompt, cached;
} answer;

static void ask(server *sv, int messages, const char *prompt, answer *a) {
    char body[8192];
    buf out = {0};
    cJSON *j, *u;
    memset(a, 0, sizeof *a);
    if (messages)
        snprintf(body, sizeof body, "{\"model\":\"pc\",\"max_tokens\":6,\"temperature\":0,"
                 "\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", prompt);
    else
        snprintf(body, sizeof body, "{\"model\":\"pc\",\"prompt\":\"%s\",\"max_tokens\":6,"
                 "\"temperature\":0}", prompt);
    CHECK(post(sv, messages ? "/v1/messages" : "/v1/completions", body, &out) == 200);
    j = cJSON_Parse(buf_s(&out));
    CHECKF(j != NULL, "%s", buf_s(&out));
    if (j && messages) {
        const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "content"), 0);
        const cJSON *t = cJSON_GetObjectItem(c, "text");
        u = cJSON_GetObjectItem(j, "usage");
        snprintf(a->text, sizeof a->text, "%s", cJSON_IsString(t) ? t->valuestring : "?");
        a->cached = cJSON_GetObjectItem(u, "cache_read_input_tokens")->valueint;
        a->prompt = cJSON_GetObjectItem(u, "input_tokens")->valueint + a->cached;
    } else if (j) {
        const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        const cJSON *t = cJSON_GetObjectItem(c, "text");
        u = cJSON_GetObjectItem(j, "usage");
        snprintf(a->text, sizeof a->text, "%s", cJSON_IsString(t) ? t->valuestring : "?");
        a->prompt = cJSON_GetObjectItem(u, "prompt_tokens")->valueint;
        a->cached = cJSON_GetObjectItem(cJSON_GetObjectItem(u, "prompt_tokens_details"),
                                        "cached_tokens")->valueint;
    }
    cJSON_Delete(j);
    buf_free(&out);
}

int main(void) {
    fx_opts o = serve_fixture_opts();
    server sv;
    char args[8800], prompt[2][2048] = {"", ""}, dir[4096];
    answer cold[2], warm[2];
    serve_test_init("test_serve_prompt_cache");
    for (int i = 0; i < 30; i++) {
        strcat(prompt[0], "the quick brown fox jumps over the lazy dog ");
        strcat(prompt[1], "a stitch in time saves nine, said the old tailor ");
    }
    const char *model = fx_test_model("serve_pc_model", &o, 1);
    snprintf(dir, sizeof dir, "%s", test_tmpdir("serve_pc_dir"));
    snprintf(args, sizeof args, "-m '%s' --ctx-size 1024 --threads 2 --served-model-name pc "
             "--prompt-cache-dir '%s' --prompt-cache-gb 1", model, dir);
    if (server_start(&sv, "pc_cold", NULL, args) == 0) {
        for (int m = 0; m < 2; m++) ask(&sv, m, prompt[m], &cold[m]);
        CHECK(cold[0].cached == 0 && cold[1].cached == 0 && cold[0].prompt > 200);
        CHECK(metric(&sv, "moe8:prompt_cache_disk_misses_total", NULL) == 2);
        CHECK(metric(&sv, "moe8:prompt_cache_disk_hits_total", NULL) == 0);
        server_stop(&sv, 10); /* writes what is queued */
    }
    if (server_start(&sv, "pc_warm", NULL, args) == 0) {
        for (int m = 0; m < 2; m++) {
            ask(&sv, m, prompt[m], &warm[m]);
            CHECKF(!strcmp(warm[m].text, cold[m].text) && warm[m].prompt == cold[m].prompt,
                   "api %d: '%s' after the restart, '%s' before", m, warm[m].text, cold[m].text);
            CHECKF(warm[m].cached == (cold[m].prompt - 1) / 16 * 16, "api %d: %d of %d cached", m,
                   warm[m].cached, warm[m].prompt);
        }
        const double hits = metric(&sv, "moe8:prompt_cache_disk_hits_total", NULL);
        CHECKF(hits == (double)(warm[0].cached + warm[1].cached) / 16, "%g disk hits", hits);
        CHECK(metric(&sv, "moe8:prompt_cache_disk_read_bytes_total", NULL) > 0);
        CHECK(metric(&sv, "moe8:prompt_cache_disk_rejected_total", NULL) == 0);
        CHECK(metric(&sv, "moe8:prompt_cache_disk_written_bytes_total", NULL) >= 0);
        server_stop(&sv, 10);
    }
    curl_global_cleanup();
    return test_summary();
}
