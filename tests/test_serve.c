/*
 * test_serve.c — `moe8 serve` (the CLI at MOE8_CLI) end to end over HTTP
 * (libcurl, and raw sockets where a test needs to hang up or stay silent),
 * against independent references:
 *   - completions (string and token-array prompts) and chat, streamed and
 *     not, greedy and seeded sampling, stop strings: the text equals
 *     `moe8 generate`'s, the tokens its --ids, and every token, log-prob and
 *     top alternative equals this process's own moe8_sched run (bit-exact as
 *     floats); usage = /tokenize's count; SSE framing byte-exact;
 *   - the model's chat template: BOS written once, chat_template_kwargs, a
 *     raise_exception as a 400 with its message, no template as a 400;
 *   - <think> split into reasoning_content, on a model that says exactly one
 *     thing (tags whole and in pieces, streamed: never shown in part);
 *   - 64 concurrent streams (libcurl multi; mixed prompts, lengths, sampling,
 *     a KV pool small enough to preempt): each bit-identical to it alone;
 *   - a table of bad requests: status, error.type, error.param, the message
 *     naming the field; the server stays up;
 *   - auth on and off (the scheme in any case); --header-timeout on a silent
 *     and a half-sent connection (a 408); a non-stream answer slower than
 *     --timeout still arrives;
 *   - 503 past --max-queue; disconnects mid-stream and while queued (gauges
 *     back to 0, aborts counted); metrics counters = the sum of usages;
 *   - SIGTERM during a stream (final chunk, [DONE], new connections refused,
 *     exit 0); a burst of streams, hang-ups and bad requests (the ASan build
 *     runs this program on the ASan CLI: every server's stderr is checked for
 *     reports);
 *   - mpirun -np 2 serve --tp 2 (and --expert-parallel) when MPI is built;
 *   - the official OpenAI Node client (.deps/openai-node) when node exists:
 *     `--part clients` (ctest's test_serve_clients, labelled client; in the
 *     release build only: its requests are ones the C checks make, which the
 *     sanitizer run keeps), the rest `--part c`.
 * The ASan build (-O0, ~50x slower) runs the same program with fewer and
 * shorter requests, without most CLI comparisons and without mpirun.
 * Every server runs in its own process group, listens on 127.0.0.1 port 0,
 * and is stopped (SIGTERM, SIGKILL after a timeout; also on the way out of
 * a failing test) so that nothing outlives the test.
 */
#include <fcntl.h>

#include "test.h"
#include "fixture_model.h"
#include "serve_test.h"

#define MAXT 512 /* most tokens one checked request generates */

/* ---- references: the library's scheduler, and `moe8 generate` ---------------------------- */

typedef struct {
    int32_t prompt[4096];
    int n_prompt;
    int n;                                   /* tokens */
    int32_t tok[MAXT];
    float lp[MAXT];
    int n_top[MAXT];
    moe8_logprob top[MAXT][MOE8_MAX_LOGPROBS];
    buf text;
    moe8_finish finish;
} lib_res;

/* The prompt ids of r as the server should make them (chat: the ChatML
 * format, thinking as asked). */
static int lib_prompt(lib_env *L, const rq *r, int32_t *ids, int cap) {
    char text[16384];
    size_t n = 0;
    if (r->ids) {
        memcpy(ids, r->ids, (size_t)r->n_ids * sizeof *ids);
        return r->n_ids;
    }
    if (r->chat) {
        moe8_chat_message m = {"user", r->text};
        unsigned fl = MOE8_CHAT_ADD_ASSISTANT | (r->thinking == 0 ? MOE8_CHAT_NO_THINKING : 0);
        if (moe8_chat_format(&m, 1, fl, text, sizeof text, &n, NULL) != MOE8_OK) abort();
    } else {
        snprintf(text, sizeof text, "%s", r->text);
    }
    if (moe8_tokenize(L->tok, text, strlen(text), ids, (size_t)cap, &n, NULL) != MOE8_OK) abort();
    return (int)n;
}

/* r run alone on this process's own scheduler. */
static void lib_run(lib_env *L, const rq *r, lib_res *out) {
    moe8_request q = moe8_request_default();
    const char *stop[1] = {r->stop};
    int64_t id;
    moe8_error e;
    out->n = 0;
    out->text.n = 0;
    buf_add(&out->text, "", 0);
    out->n_prompt = lib_prompt(L, r, out->prompt, 4096);
    q.prompt = out->prompt;
    q.n_prompt = out->n_prompt;
    q.max_tokens = r->max_tokens;
    q.sampling = moe8_sampler_params_default();
    q.sampling.temperature = (float)r->temp;
    if (r->top_p > 0) q.sampling.top_p = (float)r->top_p;
    q.sampling.top_k = r->top_k;
    if (r->seed >= 0) q.sampling.seed = (uint64_t)r->seed;
    q.logprobs = r->logprobs < 0 ? 0 : r->logprobs;
    q.ignore_eos = r->ignore_eos;
    if (r->stop) q.stop = stop, q.n_stop = 1;
    CHECKF(moe8_sched_add(L->sched, &q, &id, &e) == MOE8_OK, "%s", e.message);
    while (moe8_sched_pending(L->sched) > 0) {
        const moe8_event *ev;
        int32_t n;
        if (moe8_sched_step(L->sched, &ev, &n, &e) != MOE8_OK) abort();
        for (int32_t k = 0; k < n; k++) {
            buf_add(&out->text, ev[k].text ? ev[k].text : "", ev[k].text_len);
            if (ev[k].type == MOE8_EVENT_FINISH) {
                out->finish = ev[k].finish;
            } else if (out->n < MAXT) {
                out->tok[out->n] = ev[k].token;
                out->lp[out->n] = ev[k].logprob;
                out->n_top[out->n] = ev[k].n_top;
                if (ev[k].n_top > 0) memcpy(out->top[out->n], ev[k].top, (size_t)ev[k].n_top * sizeof(moe8_logprob));
                out->n++;
            }
        }
    }
}

/* Run `moe8 ARGV...` (no shell); stdout into out, stderr into err; exit status. */
static int cli_run(char *const *argv, buf *out, buf *err) {
    char po[4200], pe[4200];
    pid_t pid;
    int status = 0;
    snprintf(po, sizeof po, "%s/serve_cli.out", MOE8_TEST_TMP);
    snprintf(pe, sizeof pe, "%s/serve_cli.err", MOE8_TEST_TMP);
    fflush(NULL);
    if ((pid = fork()) == 0) {
        int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(MOE8_CLI, argv);
        _exit(127);
    }
    waitpid(pid, &status, 0);
    read_text(po, out);
    read_text(pe, err);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

typedef struct {
    buf text;                /* stdout without the final newline */
    int32_t ids[MAXT];       /* with --ids */
    int n_ids;
    int prompt_tokens;       /* the stats line */
} cli_res;

/* `moe8 generate` on r's prompt and sampling: once for the text, once --ids. */
static int cli_generate(const char *dir, const rq *r, cli_res *out) {
    char n_s[32], t_s[32], p_s[32], k_s[32], seed_s[32], ids_s[65536];
    char *argv[32];
    buf o = {0}, e = {0};
    int rc = 0;
    for (int pass = 0; pass < 2; pass++) {
        int a = 0;
        argv[a++] = "moe8";
        argv[a++] = "generate";
        argv[a++] = "-m";
        argv[a++] = (char *)dir;
        if (r->ids) {
            size_t u = 0;
            for (int i = 0; i < r->n_ids; i++)
                u += (size_t)snprintf(ids_s + u, sizeof ids_s - u, "%s%d", i ? "," : "", r->ids[i]);
            argv[a++] = "--prompt-ids";
            argv[a++] = ids_s;
        } else {
            argv[a++] = "-p";
            argv[a++] = (char *)r->text;
        }
        if (r->chat) argv[a++] = "--chat";
        if (r->chat && r->thinking >= 0) { /* as the request sends it (else both take the template's) */
            argv[a++] = "--chat-template-kwargs";
            argv[a++] = r->thinking ? "{\"enable_thinking\": true}" : "{\"enable_thinking\": false}";
        }
        snprintf(n_s, sizeof n_s, "%d", r->max_tokens);
        argv[a++] = "-n";
        argv[a++] = n_s;
        if (r->temp > 0) {
            snprintf(t_s, sizeof t_s, "%.17g", r->temp);
            argv[a++] = "--temp";
            argv[a++] = t_s;
        }
        if (r->top_p > 0) {
            snprintf(p_s, sizeof p_s, "%.17g", r->top_p);
            argv[a++] = "--top-p";
            argv[a++] = p_s;
        }
        if (r->top_k > 0) {
            snprintf(k_s, sizeof k_s, "%d", r->top_k);
            argv[a++] = "--top-k";
            argv[a++] = k_s;
        }
        if (r->seed >= 0) {
            snprintf(seed_s, sizeof seed_s, "%lld", r->seed);
            argv[a++] = "--seed";
            argv[a++] = seed_s;
        }
        if (r->ignore_eos) argv[a++] = "--ignore-eos";
        if (pass) argv[a++] = "--ids";
        argv[a] = NULL;
        rc |= cli_run(argv, &o, &e);
        CHECKF(rc == 0, "moe8 generate failed: %s", buf_s(&e));
        if (!pass) {
            const char *pt = strstr(buf_s(&e), "prompt_tokens=");
            out->text.n = 0;
            buf_add(&out->text, buf_s(&o), o.n && o.p[o.n - 1] == '\n' ? o.n - 1 : o.n);
            out->prompt_tokens = pt ? atoi(pt + 14) : -1;
        } else {
            char *p = o.p, *end;
            out->n_ids = 0;
            while (p && out->n_ids < MAXT) {
                long v = strtol(p, &end, 10);
                if (end == p) break;
                out->ids[out->n_ids++] = (int32_t)v;
                p = end;
            }
        }
    }
    buf_free(&o);
    buf_free(&e);
    return rc;
}


static void token_shown(lib_env *L, int32_t id, buf *out) {
    size_t nb = 0;
    const char *b = moe8_tokenizer_token_bytes(L->tok, id, &nb, NULL);
    utf8_shown((const unsigned char *)(b ? b : ""), b ? nb : 0, out);
}

/* One server entry (chat: {token, bytes, logprob}) against token `id` and its log-prob. */
static int entry_matches(lib_env *L, const cJSON *e, int chat, int32_t id, float lp, buf *tmp) {
    size_t nb = 0;
    const unsigned char *b = (const unsigned char *)moe8_tokenizer_token_bytes(L->tok, id, &nb, NULL);
    const cJSON *v = J(e, "logprob");
    token_shown(L, id, tmp);
    if (!jstr(e, "token") || strcmp(jstr(e, "token"), buf_s(tmp))) return 0;
    if (!cJSON_IsNumber(v) || (float)v->valuedouble != lp || fabs(v->valuedouble - lp) > 1e-6) return 0;
    if (chat) {
        const cJSON *by = J(e, "bytes");
        if (cJSON_GetArraySize(by) != (int)nb) return 0;
        for (size_t i = 0; i < nb; i++)
            if (cJSON_GetArrayItem(by, (int)i)->valueint != b[i]) return 0;
    }
    return 1;
}

/* The server's per-token log-probs equal the library's: every token, its
 * log-prob (as a float, bit for bit) and the top alternatives in order. */
static void check_logprobs(lib_env *L, const rq *r, const result *res, const lib_res *ref) {
    buf tmp = {0};
    int n = cJSON_GetArraySize(res->lp), bad = -1, offset = 0;
    CHECKF(res->lp && n == ref->n, "%d log-prob entries for %d tokens", n, ref->n);
    for (int i = 0; i < n && i < ref->n && bad < 0; i++) {
        const cJSON *e = cJSON_GetArrayItem(res->lp, i);
        const cJSON *top = r->chat ? J(e, "top_logprobs") : J(e, "top");
        if (!entry_matches(L, e, r->chat, ref->tok[i], ref->lp[i], &tmp)) bad = i;
        if (r->chat) {
            if (cJSON_GetArraySize(top) != ref->n_top[i] || ref->n_top[i] != r->logprobs) bad = i;
            for (int k = 0; k < ref->n_top[i] && bad < 0; k++)
                if (!entry_matches(L, cJSON_GetArrayItem(top, k), 1, ref->top[i][k].token,
                                   ref->top[i][k].logprob, &tmp))
                    bad = i;
        } else {
            /* a dict by shown text: the first (best) alternative of each text */
            int distinct = 0;
            for (int k = 0; k < ref->n_top[i] && bad < 0; k++) {
                const cJSON *v;
                int first = 1;
                buf t2 = {0};
                token_shown(L, ref->top[i][k].token, &tmp);
                for (int q = 0; q < k && first; q++) {
                    token_shown(L, ref->top[i][q].token, &t2);
                    first = strcmp(buf_s(&t2), buf_s(&tmp)) != 0;
                }
                buf_free(&t2);
                if (!first) continue;
                distinct++;
                v = J(top, buf_s(&tmp));
                if (!cJSON_IsNumber(v) || (float)v->valuedouble != ref->top[i][k].logprob) bad = i;
            }
            if (cJSON_GetArraySize(top) != distinct || ref->n_top[i] != r->logprobs) bad = i;
            /* offsets into the text: from 0, never back, within it */
            if (!cJSON_IsNumber(J(e, "text_offset")) || J(e, "text_offset")->valueint < offset ||
                (i == 0 && J(e, "text_offset")->valueint != 0) ||
                J(e, "text_offset")->valueint > (int)res->text.n)
                bad = i;
            else
                offset = J(e, "text_offset")->valueint;
        }
    }
    if (bad >= 0) {
        char *s = cJSON_PrintUnformatted(cJSON_GetArrayItem(res->lp, bad));
        CHECKF(0, "log-probs of token %d (id %d, lp %.9g) differ from the library's: %s", bad,
               ref->tok[bad], ref->lp[bad], s);
        free(s);
    }
    buf_free(&tmp);
}

/* ---- completions and chat against the references ------------------------------------------- */

static int64_t g_sum_prompt, g_sum_gen, g_n_stop, g_n_length, g_n_tokens_reqs;

static const char *finish_name(moe8_finish f) {
    return f == MOE8_FINISH_STOP ? "stop" : f == MOE8_FINISH_LENGTH || f == MOE8_FINISH_CONTEXT ? "length" : "abort";
}

/* /tokenize of r's prompt: the ids into ids, the count returned (-1: failed). */
static int server_tokenize(server *sv, const rq *r, int32_t *ids, int cap) {
    cJSON *o = cJSON_CreateObject(), *ans;
    char *s;
    buf out = {0};
    int n = -1;
    rq_add_prompt(o, r);
    s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (post(sv, "/tokenize", s, &out) == 200 && (ans = cJSON_Parse(buf_s(&out)))) {
        const cJSON *t = J(ans, "tokens"), *c = J(ans, "count");
        if (cJSON_IsArray(t) && cJSON_IsNumber(c) && c->valueint == cJSON_GetArraySize(t) &&
            cJSON_IsNumber(J(ans, "max_model_len"))) {
            n = c->valueint;
            for (int i = 0; i < n && i < cap; i++) ids[i] = cJSON_GetArrayItem(t, i)->valueint;
        }
        cJSON_Delete(ans);
    }
    CHECKF(n >= 0, "/tokenize: %s", buf_s(&out));
    free(s);
    buf_free(&out);
    return n;
}

/* r sent to the server equals the library's run and (when `cli`) moe8 generate's. */
static void check_case(server *sv, lib_env *L, const char *what, const rq *r, int cli, cli_res *cr,
                       lib_res *ref) {
    static int32_t tids[4096];
    result res;
    int nt;
    if (!run_rq(sv, r, &res)) {
        fprintf(stderr, "  case: %s\n", what);
        result_free(&res);
        return;
    }
    lib_run(L, r, ref);
    nt = server_tokenize(sv, r, tids, 4096);
    CHECKF(nt == ref->n_prompt && !memcmp(tids, ref->prompt, (size_t)nt * sizeof *tids),
           "%s: /tokenize gives %d ids, the library %d", what, nt, ref->n_prompt);
    /* usage */
    if (!r->stream || r->usage) {
        CHECKF(res.has_usage && res.prompt_tokens == nt && res.completion_tokens == ref->n &&
               res.total_tokens == nt + ref->n, "%s: usage %d+%d=%d, want %d+%d", what,
               res.prompt_tokens, res.completion_tokens, res.total_tokens, nt, ref->n);
    } else {
        CHECKF(!res.has_usage, "%s: usage without include_usage", what);
    }
    CHECKF(!strcmp(res.finish, finish_name(ref->finish)), "%s: finish '%s', library '%s'", what, res.finish,
           finish_name(ref->finish));
    /* text: the library's events, and the CLI's */
    CHECKF(res.reason.n == 0 || r->thinking != 0, "%s: reasoning with thinking off", what);
    if (res.reason.n == 0) {
        CHECKF(res.text.n == ref->text.n && !memcmp(buf_s(&res.text), buf_s(&ref->text), res.text.n),
               "%s: text '%s' differs from the library's '%s'", what, buf_s(&res.text), buf_s(&ref->text));
    }
    if (cli) {
        CHECKF(cr->n_ids == ref->n && !memcmp(cr->ids, ref->tok, (size_t)ref->n * sizeof(int32_t)),
               "%s: moe8 generate --ids gives %d tokens, the library %d", what, cr->n_ids, ref->n);
        CHECKF(cr->prompt_tokens == nt, "%s: moe8 generate read %d prompt tokens, /tokenize %d", what,
               cr->prompt_tokens, nt);
        CHECKF(res.text.n == cr->text.n && !memcmp(buf_s(&res.text), buf_s(&cr->text), res.text.n),
               "%s: text '%s' differs from moe8 generate's '%s'", what, buf_s(&res.text), buf_s(&cr->text));
    }
    if (r->logprobs >= 0) check_logprobs(L, r, &res, ref);
    else CHECKF(res.lp == NULL, "%s: log-probs not asked for", what);
    if (res.has_usage) { /* for the metrics check (streams without usage: the library's count) */
        g_sum_prompt += res.prompt_tokens, g_sum_gen += res.completion_tokens;
    } else {
        g_sum_prompt += nt, g_sum_gen += ref->n;
    }
    g_n_stop += !strcmp(res.finish, "stop");
    g_n_length += !strcmp(res.finish, "length");
    g_n_tokens_reqs += ref->n > 0;
    result_free(&res);
}

static const int32_t IDS_PROMPT[] = {9707, 11, 847, 829, 374, 151644, 77091, 198, 3, 100000, 42, 2048, 1, 0};

static int g_n_cases;

/* Each case streamed (with and without usage) and not. */
static void test_completions(server *sv, lib_env *L, const char *dir) {
    rq cases[8];
    const char *names[8];
    int n = 0, cli[8];
    lib_res *ref = calloc(1, sizeof *ref);
    cli_res cr;
    memset(&cr, 0, sizeof cr);
    cases[n] = rq_default(), names[n] = "completion, string prompt, greedy, logprobs 3", cli[n] = 1;
    cases[n].text = "Hello, my name is", cases[n].max_tokens = 12, cases[n].logprobs = 3, n++;
    cases[n] = rq_default(), names[n] = "completion, token ids, greedy, logprobs 5", cli[n] = 1;
    cases[n].ids = IDS_PROMPT, cases[n].n_ids = (int)(sizeof IDS_PROMPT / sizeof *IDS_PROMPT);
    cases[n].max_tokens = 10, cases[n].logprobs = 5, n++;
    cases[n] = rq_default(), names[n] = "completion, seeded sampling, top-k, top-p", cli[n] = 1;
    cases[n].text = "The capital of France is", cases[n].max_tokens = 16, cases[n].temp = 0.8;
    cases[n].top_p = 0.9, cases[n].top_k = 40, cases[n].seed = 1234, cases[n].logprobs = 0, n++;
    cases[n] = rq_default(), names[n] = "chat, thinking off, greedy, top_logprobs 2", cli[n] = 1;
    cases[n].chat = 1, cases[n].text = "Write a haiku about the sea.", cases[n].max_tokens = 12;
    cases[n].logprobs = 2, n++;
    cases[n] = rq_default(), names[n] = "chat, thinking off, seeded sampling", cli[n] = 1;
    cases[n].chat = 1, cases[n].text = "Tell me a joke", cases[n].max_tokens = 6, cases[n].temp = 1.2;
    cases[n].seed = 7, cases[n].ignore_eos = 1, n++; /* temperature alone: the whole vocabulary sorted */
    cases[n] = rq_default(), names[n] = "chat, thinking on (default), greedy", cli[n] = 0;
    cases[n].chat = 1, cases[n].text = "Write a haiku about the sea.", cases[n].max_tokens = 8;
    cases[n].thinking = -1, cases[n].logprobs = 1, n++;
    for (int c = 0; c < n; c++) {
        /* ASan (-O0): a string completion and the two chats, few tokens, the library alone */
        if (g_asan && c != 0 && c != 3 && c != 5) continue;
        if (g_asan) cli[c] = 0, cases[c].max_tokens = 3;
        if (cli[c]) cli_generate(dir, &cases[c], &cr);
        for (int mode = 0; mode < 3; mode++) { /* whole, stream, stream + usage */
            rq r = cases[c];
            char what[256];
            r.stream = mode > 0;
            r.usage = mode == 2;
            snprintf(what, sizeof what, "%s, %s", names[c],
                     mode == 0 ? "whole" : mode == 1 ? "stream" : "stream+usage");
            check_case(sv, L, what, &r, cli[c], &cr, ref);
            g_n_cases++;
        }
    }
    /* thinking on and off are different prompts (the empty think block) */
    {
        static int32_t a[4096], b[4096];
        int na = server_tokenize(sv, &cases[3], a, 4096), nb = server_tokenize(sv, &cases[5], b, 4096);
        rq t = cases[5];
        CHECKF(na > 0 && nb > 0 && na == nb + 4, "thinking off: %d prompt tokens, on: %d", na, nb);
        t.thinking = 1; /* explicit true = the default */
        CHECK(server_tokenize(sv, &t, a, 4096) == nb && !memcmp(a, b, (size_t)nb * sizeof *a));
    }
    /* a stop string taken from the greedy text: the text ends before it */
    if (!g_asan) {
        rq r = cases[0], g = cases[0];
        char stop[8] = "";
        g.max_tokens = 24;
        lib_run(L, &g, ref);
        for (size_t i = 4; i + 3 <= ref->text.n && !stop[0]; i++) {
            const unsigned char *t = (const unsigned char *)ref->text.p + i;
            if (t[0] > 32 && t[0] < 127 && t[1] > 32 && t[1] < 127 && t[2] > 32 && t[2] < 127) memcpy(stop, t, 3);
        }
        CHECKF(stop[0], "no ASCII in the greedy text '%s'", buf_s(&ref->text));
        if (stop[0]) {
            const char *at = strstr(buf_s(&ref->text), stop);
            size_t keep = (size_t)(at - ref->text.p);
            r.stop = stop;
            r.max_tokens = 24;
            for (int mode = 0; mode < 2; mode++) {
                result res;
                r.stream = mode;
                if (run_rq(sv, &r, &res)) {
                    lib_res *sref = calloc(1, sizeof *sref);
                    lib_run(L, &r, sref);
                    CHECKF(!strcmp(res.finish, "stop") && sref->finish == MOE8_FINISH_STOP,
                           "stop '%s': finish '%s'", stop, res.finish);
                    CHECKF(res.text.n == keep && !memcmp(res.text.p, ref->text.p, keep) &&
                           sref->text.n == keep && !memcmp(sref->text.p, ref->text.p, keep),
                           "stop '%s': text '%s', want '%.*s'", stop, buf_s(&res.text), (int)keep, ref->text.p);
                    if (!mode) g_sum_prompt += res.prompt_tokens, g_sum_gen += res.completion_tokens;
                    else g_sum_prompt += sref->n_prompt, g_sum_gen += sref->n;
                    g_n_stop++, g_n_tokens_reqs += sref->n > 0;
                    buf_free(&sref->text);
                    free(sref);
                }
                result_free(&res);
                g_n_cases++;
            }
        }
    }
    buf_free(&ref->text);
    buf_free(&cr.text);
    free(ref);
}

/* /v1/models, /health, /detokenize, and auth off (any Authorization header is fine). */
static void test_endpoints(server *sv, lib_env *L) {
    buf out = {0};
    cJSON *o;
    int32_t ids[64];
    size_t n = 0;
    char body[2048];
    CHECK(http(sv, "GET", "/v1/models", NULL, 0, NULL, &out) == 200);
    o = cJSON_Parse(buf_s(&out));
    CHECKF(o && !strcmp(jstr(o, "object") ? jstr(o, "object") : "", "list") &&
           cJSON_GetArraySize(J(o, "data")) == 1 &&
           !strcmp(jstr(cJSON_GetArrayItem(J(o, "data"), 0), "id"), "serve_text") &&
           J(cJSON_GetArrayItem(J(o, "data"), 0), "max_model_len")->valueint == 512, "%s", buf_s(&out));
    cJSON_Delete(o);
    CHECK(http(sv, "GET", "/health", NULL, 0, NULL, &out) == 200 && strstr(buf_s(&out), "\"ok\""));
    CHECK(http(sv, "GET", "/health", NULL, 0, "Bearer anything", &out) == 200);
    CHECK(http(sv, "GET", "/v1/models", NULL, 0, "Bearer anything", &out) == 200);
    /* detokenize(tokenize(text)) = text, ids = the library's */
    CHECK(moe8_tokenize(L->tok, "Hello, wörld — ok", strlen("Hello, wörld — ok"), ids, 64, &n, NULL) == MOE8_OK);
    {
        size_t u = (size_t)snprintf(body, sizeof body, "{\"tokens\":[");
        for (size_t i = 0; i < n; i++) u += (size_t)snprintf(body + u, sizeof body - u, "%s%d", i ? "," : "", ids[i]);
        snprintf(body + u, sizeof body - u, "]}");
    }
    CHECK(post(sv, "/detokenize", body, &out) == 200);
    o = cJSON_Parse(buf_s(&out));
    CHECKF(o && jstr(o, "prompt") && !strcmp(jstr(o, "prompt"), "Hello, wörld — ok"), "%s", buf_s(&out));
    cJSON_Delete(o);
    buf_free(&out);
}


/* ---- bad requests ------------------------------------------------------------------------- */

/* The main server: --ctx-size 512, model "serve_text". */
static void test_bad_requests(server *sv) {
    char long_prompt[8192], long_chat[16384];
    char *huge;
    size_t u = 0;
    const size_t huge_n = (4u << 20) + 100;
    result res;
    rq good = rq_default();
    u += (size_t)snprintf(long_prompt + u, sizeof long_prompt - u, "{\"prompt\":[");
    for (int i = 0; i < 400; i++)
        u += (size_t)snprintf(long_prompt + u, sizeof long_prompt - u, "%s%d", i ? "," : "", 100 + i);
    snprintf(long_prompt + u, sizeof long_prompt - u, "],\"max_tokens\":200}");
    u = (size_t)snprintf(long_chat, sizeof long_chat, "{\"messages\":[{\"role\":\"user\",\"content\":\"");
    for (int i = 0; i < 600; i++) u += (size_t)snprintf(long_chat + u, sizeof long_chat - u, " x");
    snprintf(long_chat + u, sizeof long_chat - u, "\"}]}");
    huge = malloc(huge_n + 1);
    memset(huge, ' ', huge_n);
    memcpy(huge, "{\"prompt\":\"", 11);
    memcpy(huge + huge_n - 2, "\"}", 2);
    huge[huge_n] = 0;
    const bad_case T[] = {
        /* the body */
        {"POST", CMPL, "{\"prompt\": \"hi\",", 0, 400, INV, NULL, NULL, "JSON"},
        {"POST", CMPL, "[1, 2, 3]", 0, 400, INV, NULL, NULL, "JSON object"},
        {"POST", CMPL, "", 0, 400, INV, NULL, NULL, "JSON"},
        {"POST", CMPL, "{\"prompt\": \"\xff\xfe hi\"}", 0, 400, INV, NULL, NULL, "UTF-8"},
        {"POST", CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\x28\"}]}", 0, 400, INV, NULL, NULL, "UTF-8"},
        {"POST", CMPL, "{\"prompt\": \"a\0b\"}", 17, 400, INV, NULL, NULL, "UTF-8"},
        {"POST", CMPL, "{\"prompt\": \"a\\u0000b\"}", 0, 400, INV, NULL, NULL, "NUL"},
        {"POST", CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\\u0000\"}]}", 0, 400, INV, NULL, NULL, "NUL"},
        {"POST", "/tokenize", "{\"prompt\": \"a\\u0000b\"}", 0, 400, INV, NULL, NULL, "NUL"},
        /* types */
        {"POST", CMPL, "{\"prompt\":\"hi\",\"max_tokens\":\"5\"}", 0, 400, INV, "max_tokens", NULL, "'max_tokens' must be an integer, got a string"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"stream\":\"yes\"}", 0, 400, INV, "stream", NULL, "'stream' must be a boolean"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"stream\":1}", 0, 400, INV, "stream", NULL, "'stream' must be a boolean, got a number"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"temperature\":\"hot\"}", 0, 400, INV, "temperature", NULL, "'temperature'"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"seed\":\"x\"}", 0, 400, INV, "seed", NULL, "'seed'"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"stop\":5}", 0, 400, INV, "stop", NULL, "'stop'"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"stop\":\"\"}", 0, 400, INV, "stop", NULL, "'stop'"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"stream\":true,\"stream_options\":\"x\"}", 0, 400, INV, "stream_options", NULL, "'stream_options'"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"stream\":true,\"stream_options\":{\"include_usage\":\"yes\"}}", 0, 400, INV, "include_usage", NULL, "'include_usage'"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"model\":5}", 0, 400, INV, "model", NULL, "'model'"},
        {"POST", CMPL, "{\"prompt\":5}", 0, 400, INV, "prompt", NULL, "'prompt'"},
        /* ranges */
        {"POST", CMPL, "{\"prompt\":\"hi\",\"max_tokens\":0}", 0, 400, INV, "max_tokens", NULL, "'max_tokens' must be at least 1"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"max_tokens\":-3}", 0, 400, INV, "max_tokens", NULL, "'max_tokens'"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"max_tokens\":2.5}", 0, 400, INV, "max_tokens", NULL, "integer"},
        {"POST", CHAT, "{" MSG ",\"max_completion_tokens\":0}", 0, 400, INV, "max_completion_tokens", NULL, "at least 1"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"temperature\":-0.5}", 0, 400, INV, "temperature", NULL, "'temperature' must be in"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"temperature\":1e999}", 0, 400, INV, "temperature", NULL, "'temperature'"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"top_p\":0}", 0, 400, INV, "top_p", NULL, "'top_p' must be in (0, 1]"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"top_p\":1.5}", 0, 400, INV, "top_p", NULL, "'top_p' must be in (0, 1]"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"top_k\":1.5}", 0, 400, INV, "top_k", NULL, "'top_k'"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"min_p\":2}", 0, 400, INV, "min_p", NULL, "'min_p'"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"logprobs\":21}", 0, 400, INV, "logprobs", NULL, "'logprobs'"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"logprobs\":true}", 0, 400, INV, "logprobs", NULL, "integer in [0, 20]"},
        {"POST", CHAT, "{" MSG ",\"logprobs\":true,\"top_logprobs\":21}", 0, 400, INV, "top_logprobs", NULL, "'top_logprobs'"},
        {"POST", CHAT, "{" MSG ",\"top_logprobs\":3}", 0, 400, INV, "top_logprobs", NULL, "'logprobs': true"},
        {"POST", CHAT, "{" MSG ",\"logprobs\":5}", 0, 400, INV, "logprobs", NULL, "'logprobs' must be a boolean"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"n\":17}", 0, 400, INV, "n", NULL, "'n' must be in [1, 16]"},
        {"POST", CHAT, "{" MSG ",\"n\":0}", 0, 400, INV, "n", NULL, "'n' must be in [1, 16]"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"echo\":1}", 0, 400, INV, "echo", NULL, "'echo' must be a boolean"},
        {"POST", CMPL, "{\"prompt\":\"hi\",\"model\":\"gpt-4\"}", 0, 404, INV, "model", "model_not_found", "'gpt-4' does not exist"},
        /* prompts */
        {"POST", CMPL, "{\"max_tokens\":3}", 0, 400, INV, "prompt", NULL, "'prompt' is required"},
        {"POST", CMPL, "{\"prompt\":[]}", 0, 400, INV, "prompt", NULL, "'prompt'"},
        {"POST", CMPL, "{\"prompt\":[1,-5]}", 0, 400, INV, "prompt", NULL, "'prompt'[1]"},
        {"POST", CMPL, "{\"prompt\":[1,151669]}", 0, 400, INV, "prompt", NULL, "[0, 151669)"},
        {"POST", CMPL, "{\"prompt\":[1,2.5]}", 0, 400, INV, "prompt", NULL, "'prompt'[1]"},
        {"POST", CMPL, "{\"prompt\":[\"a\",\"b\"]}", 0, 400, INV, "prompt", NULL, "one prompt per request"},
        {"POST", CMPL, "{\"prompt\":[[1,2],[3]]}", 0, 400, INV, "prompt", NULL, "one prompt per request"},
        {"POST", CMPL, long_prompt, 0, 400, INV, "max_tokens", NULL, "maximum context length is 512 tokens; the request has 400 prompt tokens and asks for 200"},
        {"POST", CHAT, long_chat, 0, 400, INV, "messages", NULL, "maximum context length is 512"},
        /* chat messages */
        {"POST", CHAT, "{\"max_tokens\":3}", 0, 400, INV, "messages", NULL, "'messages' is required"},
        {"POST", CHAT, "{\"messages\":[]}", 0, 400, INV, "messages", NULL, "must not be empty"},
        {"POST", CHAT, "{\"messages\":\"hi\"}", 0, 400, INV, "messages", NULL, "must be an array"},
        {"POST", CHAT, "{\"messages\":[5]}", 0, 400, INV, "messages[0]", NULL, "must be an object"},
        {"POST", CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"hi\"}]}", 0, 400, INV, "messages[0].role", NULL, "'messages[0].role'"},
        {"POST", CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"content\":\"hi\"}]}", 0, 400, INV, "messages[1].role", NULL, "'messages[1].role'"},
        {"POST", CHAT, "{\"messages\":[{\"role\":\"user\"}]}", 0, 400, INV, "messages[0].content", NULL, "is required"},
        {"POST", CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":7}]}", 0, 400, INV, "messages[0].content", NULL, "'messages[0].content'"},
        {"POST", CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://x/y.png\"}}]}]}", 0, 400, INV, "messages[0].content[0].type", NULL, "only text parts"},
        {"POST", CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", 0, 400, INV, "messages[0].content[0].text", NULL, "must be a string"},
        {"POST", CHAT, "{" MSG ",\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}}", 0, 400, INV, "enable_thinking", NULL, "'enable_thinking'"},
        {"POST", CHAT, "{" MSG ",\"chat_template_kwargs\":3}", 0, 400, INV, "chat_template_kwargs", NULL, "'chat_template_kwargs'"},
        /* tokenize / detokenize */
        {"POST", "/tokenize", "{\"prompt\":", 0, 400, INV, NULL, NULL, "JSON"},
        {"POST", "/tokenize", "{\"prompt\":[-1]}", 0, 400, INV, "prompt", NULL, "'prompt'[0]"},
        {"POST", "/detokenize", "{\"tokens\":\"abc\"}", 0, 400, INV, "tokens", NULL, "'tokens'"},
        {"POST", "/detokenize", "{\"tokens\":[5,999999]}", 0, 400, INV, "tokens", NULL, "'tokens'[1]"},
        /* routing, methods, size */
        {"GET", "/v1/nothing", NULL, 0, 404, INV, NULL, "not_found", "/v1/nothing"},
        {"POST", "/v1/embeddings", "{}", 0, 404, INV, NULL, "not_found", "/v1/embeddings"},
        {"GET", CMPL, NULL, 0, 405, INV, NULL, "method_not_allowed", "takes POST, not GET"},
        {"DELETE", CHAT, NULL, 0, 405, INV, NULL, "method_not_allowed", "not DELETE"},
        {"POST", "/health", "{}", 0, 405, INV, NULL, "method_not_allowed", "takes GET, not POST"},
        {"PUT", "/metrics", "{}", 0, 405, INV, NULL, "method_not_allowed", "takes GET, not PUT"},
        {"POST", CMPL, huge, huge_n, 413, INV, NULL, "body_too_large", "larger than 4194304 bytes"},
    };
    for (size_t i = 0; i < sizeof T / sizeof *T; i++) check_bad(sv, &T[i], NULL);
    free(huge);
    /* an escaped backslash before "u0000" is text, not NUL */
    {
        buf out = {0};
        CHECKF(post(sv, "/tokenize", "{\"prompt\": \"a\\\\u0000b\"}", &out) == 200 &&
               strstr(buf_s(&out), "\"count\":"), "%s", buf_s(&out));
        buf_free(&out);
    }
    /* "developer" is rendered as "system"; "tool" passes to the template */
    {
        buf a = {0}, b = {0}, t = {0};
        CHECK(post(sv, "/tokenize", "{\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
                   "{\"role\":\"user\",\"content\":\"hi\"}]}", &a) == 200);
        CHECK(post(sv, "/tokenize", "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                   "{\"role\":\"user\",\"content\":\"hi\"}]}", &b) == 200);
        CHECKF(!strcmp(buf_s(&a), buf_s(&b)), "developer %s vs system %s", buf_s(&a), buf_s(&b));
        CHECKF(post(sv, "/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
                    "{\"role\":\"tool\",\"content\":\"42\"}]}", &t) == 200 &&
               strstr(buf_s(&t), "\"count\":"), "%s", buf_s(&t));
        buf_free(&a);
        buf_free(&b);
        buf_free(&t);
    }
    /* still serving */
    good.text = "After the errors";
    good.max_tokens = 4;
    CHECK(run_rq(sv, &good, &res) && res.completion_tokens == 4 && !strcmp(res.finish, "length"));
    g_sum_prompt += res.prompt_tokens, g_sum_gen += res.completion_tokens, g_n_length++, g_n_tokens_reqs++;
    result_free(&res);
}

/* ---- concurrency: each stream bit-identical to itself alone -------------------------------- */

static const char *SENTENCE = "The quick brown fox jumps over the lazy dog and keeps running. ";

/* Request i of the mix: completions with token-array prompts of 1..300 ids,
 * string prompts and chats; 1..40 tokens; greedy or seeded; some log-probs. */
static char *mix_body(int i, const char **path, char *text, size_t cap) {
    test_rng g = {0x9E3779B97F4A7C15ull * (unsigned long long)(i + 1)};
    static int32_t ids[300];
    rq r = rq_default();
    r.stream = 1;
    r.usage = i % 2;
    r.max_tokens = 1 + (int)(test_rng_u64(&g) % (g_asan ? 6 : 40));
    if (i % 3 == 0) r.temp = 0.9, r.seed = 1000 + i, r.top_k = i ? 50 : 0;
    if (i % 5 == 0) r.logprobs = 2;
    r.ignore_eos = i % 2;
    if (i % 4 == 3 || i % 4 == 1) { /* text: a chat or a string prompt */
        size_t u = 0;
        int reps = 1 + (int)(test_rng_u64(&g) % (g_asan ? 2 : 12));
        for (int k = 0; k < reps; k++) u += (size_t)snprintf(text + u, cap - u, "%s", SENTENCE);
        snprintf(text + u, cap - u, "%d", i);
        r.text = text;
        r.chat = i % 4 == 3;
    } else {
        r.n_ids = 1 + (int)(test_rng_u64(&g) % (g_asan ? 40 : 300));
        for (int k = 0; k < r.n_ids; k++) ids[k] = (int32_t)(test_rng_u64(&g) % 150000);
        r.ids = ids;
    }
    *path = rq_path(&r);
    return rq_body(&r);
}

static void test_concurrent(const char *dir) {
    server sv;
    char args[4400], text[2048];
    const int n = g_asan ? 8 : 64;
    mreq *m = calloc((size_t)n, sizeof *m);
    int n_same = 0, n_ok = 0;
    double t0;
    snprintf(args, sizeof args, "-m '%s' --ctx-size 512 --parallel 8 --kv-mb 1 --threads 2", dir);
    if (server_start(&sv, "concurrent", NULL, args)) {
        free(m);
        return;
    }
    for (int i = 0; i < n; i++) m[i].body = mix_body(i, &m[i].path, text, sizeof text);
    t0 = now_s();
    multi_run(&sv, m, n);
    printf("test_serve: %d concurrent streams in %.2f s\n", n, now_s() - t0);
    for (int i = 0; i < n; i++) {
        result a, b;
        buf alone = {0};
        const int chat = strstr(m[i].path, "chat") != NULL, usage = strstr(m[i].body, "include_usage") != NULL;
        long st = post(&sv, m[i].path, m[i].body, &alone);
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        int ok = m[i].status == 200 && st == 200 && parse_stream(&a, chat, usage, buf_s(&m[i].out)) &&
                 parse_stream(&b, chat, usage, buf_s(&alone));
        n_ok += ok;
        if (ok && a.norm.n == b.norm.n && !memcmp(a.norm.p, b.norm.p, a.norm.n)) n_same++;
        else if (ok) fprintf(stderr, "  request %d: %s\n  concurrent: %.600s\n  alone: %.600s\n", i, m[i].body,
                             buf_s(&a.norm), buf_s(&b.norm));
        result_free(&a);
        result_free(&b);
        buf_free(&alone);
        buf_free(&m[i].out);
        free(m[i].body);
    }
    CHECKF(n_ok == n, "%d of %d concurrent streams well-formed", n_ok, n);
    CHECKF(n_same == n, "%d of %d concurrent streams equal the same request alone", n_same, n);
    CHECK(wait_idle(&sv, 5));
    CHECK(metric(&sv, "moe8:request_success_total", "finished_reason=\"abort\"") == 0);
    CHECK(metric(&sv, "moe8:time_to_first_token_seconds_count", NULL) == 2 * n);
    CHECK(metric(&sv, "moe8:e2e_request_latency_seconds_count", NULL) == 2 * n);
    server_stop(&sv, 10);
    free(m);
}

/* ---- auth, the served name, timeouts ------------------------------------------------------ */

static void test_auth_timeout(const char *dir) {
    static const struct { const char *method, *path, *body; int ok; } E[] = {
        {"POST", CMPL, "{\"prompt\":\"hi\",\"max_tokens\":2}", 200},
        {"POST", CHAT, "{" MSG ",\"max_tokens\":2}", 200},
        {"POST", "/tokenize", "{\"prompt\":\"hi\"}", 200},
        {"POST", "/detokenize", "{\"tokens\":[1,2]}", 200},
        {"GET", "/v1/models", NULL, 200},
        {"GET", "/v1/models/other", NULL, 200},
        {"GET", "/v1/nothing", NULL, 404},
    };
    static const char *wrong[] = {NULL, "Bearer wrong", "Bearer sekre", "Bearer sekret2", "Basic sekret",
                                  "Bearer "};
    static const char *right[] = {"Bearer sekret", "bearer sekret"}; /* the scheme in any case */
    server sv;
    char args[4400];
    buf out = {0};
    double t0, idle = -1, slow;
    int fd;
    snprintf(args, sizeof args, "-m '%s' --api-key sekret --served-model-name other --timeout 1 "
             "--header-timeout 1 --ctx-size 4096 --threads 2", dir);
    if (server_start(&sv, "auth", NULL, args)) return;
    for (size_t i = 0; i < sizeof E / sizeof *E; i++) {
        for (size_t w = 0; w < sizeof wrong / sizeof *wrong; w++) {
            bad_case b = {E[i].method, E[i].path, E[i].body, 0, 401, INV, NULL, "invalid_api_key", "API key"};
            check_bad(&sv, &b, wrong[w]);
        }
        for (size_t k = 0; k < sizeof right / sizeof *right; k++) {
            long st = http(&sv, E[i].method, E[i].path, E[i].body, E[i].body ? strlen(E[i].body) : 0,
                           right[k], &out);
            CHECKF(st == E[i].ok, "%s %s with '%s': %ld %s", E[i].method, E[i].path, right[k], st,
                   buf_s(&out));
        }
    }
    /* open under --api-key, as in vLLM: probes and scrapers carry no key */
    CHECK(http(&sv, "GET", "/health", NULL, 0, NULL, &out) == 200);
    CHECK(http(&sv, "GET", "/health", NULL, 0, "Bearer wrong", &out) == 200);
    CHECK(http(&sv, "GET", "/metrics", NULL, 0, NULL, &out) == 200 && strstr(buf_s(&out), "moe8:"));
    CHECK(http(&sv, "GET", "/version", NULL, 0, NULL, &out) == 200 && strstr(buf_s(&out), "\"version\""));
    CHECK(http(&sv, "GET", "/v1/models", NULL, 0, "Bearer sekret", &out) == 200 &&
          strstr(buf_s(&out), "\"id\":\"other\""));
    {
        bad_case b = {"POST", CMPL, "{\"prompt\":\"hi\",\"model\":\"serve_text\"}", 0, 404, INV, "model",
                      "model_not_found", "this server serves 'other'"};
        bad_case m = {"GET", "/v1/models/serve_text", NULL, 0, 404, INV, NULL, "model_not_found",
                      "this server serves 'other'"};
        check_bad(&sv, &b, "Bearer sekret");
        check_bad(&sv, &m, "Bearer sekret");
    }
    /* a connection that sends nothing, or half a request head, is closed after --header-timeout 1
     * (the half-sent one with a 408) */
    for (int k = 0; k < 2; k++) {
        fd = raw_connect(sv.port);
        CHECK(fd >= 0);
        if (fd < 0) continue;
        if (k == 1) CHECK(write(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n", 40) == 40);
        t0 = now_s();
        buf_free(&out);
        CHECK(raw_read_until(fd, &out, NULL, g_asan ? 20 : 8));
        idle = now_s() - t0;
        CHECKF(idle >= 0.5 && idle < (g_asan ? 8 : 4), "%s connection closed after %.2f s "
               "(--header-timeout 1)", k ? "a half-sent" : "an idle", idle);
        if (k == 1)
            CHECKF(!strncmp(buf_s(&out), "HTTP/1.1 408 ", 13), "a half-sent head got: %.200s", buf_s(&out));
        close(fd);
    }
    /* the timed-out half request may or may not be logged */
    sv.log_check = 0;
    /* a non-stream answer that takes longer than --timeout still arrives
     * (longer answers until one takes over 1.5 s, whatever the machine) */
    for (int n_tok = g_asan ? 40 : 1000; n_tok <= 4000; n_tok *= 2) {
        char body[256];
        long st;
        cJSON *o;
        snprintf(body, sizeof body, "{\"prompt\":[1,2,3],\"max_tokens\":%d,\"ignore_eos\":true,"
                 "\"temperature\":0,\"model\":\"other\"}", n_tok);
        t0 = now_s();
        st = http(&sv, "POST", CMPL, body, strlen(body), "Bearer sekret", &out);
        slow = now_s() - t0;
        o = cJSON_Parse(buf_s(&out));
        CHECKF(st == 200 && J(J(o, "usage"), "completion_tokens") &&
               J(J(o, "usage"), "completion_tokens")->valueint == n_tok,
               "a %.1f s answer: %ld %.300s", slow, st, buf_s(&out));
        cJSON_Delete(o);
        if (slow > 1.5 || n_tok * 2 > 4000) {
            CHECKF(slow > 1.5, "a %d-token answer took only %.2f s", n_tok, slow);
            printf("test_serve: idle connection closed after %.2f s; a %d-token answer took %.2f s\n", idle,
                   n_tok, slow);
            break;
        }
    }
    buf_free(&out);
    server_stop(&sv, 10);
}

/* ---- the queue, 503, hang-ups ------------------------------------------------------------- */

static void test_queue_disconnect(const char *dir) {
    server sv;
    char args[4400];
    buf a = {0}, b = {0}, out = {0};
    /* A must still run when the checks below are done, on any machine: 4000 tokens, each with
     * 20 log-prob alternatives (a log-softmax over the vocabulary), on one thread */
    const char *long_stream =
        "{\"prompt\":[1,2,3],\"max_tokens\":4000,\"ignore_eos\":true,\"temperature\":0,\"stream\":true,"
        "\"logprobs\":20}";
    const char *chat_stream =
        "{" MSG ",\"max_tokens\":50,\"stream\":true,\"chat_template_kwargs\":{\"enable_thinking\":false}}";
    const char *short_whole = "{\"prompt\":[1,2,3],\"max_tokens\":5,\"temperature\":0}";
    int fa, fb, n_chat_prompt;
    rq chat = rq_default();
    int32_t ids[64];
    double gen;
    snprintf(args, sizeof args, "-m '%s' --parallel 1 --max-queue 1 --ctx-size 4096 --threads 1", dir);
    if (server_start(&sv, "queue", NULL, args)) return;
    chat.chat = 1, chat.text = "hi";
    n_chat_prompt = server_tokenize(&sv, &chat, ids, 64);
    /* A runs; B waits (its role chunk comes at once) */
    fa = raw_post(&sv, CMPL, long_stream);
    CHECK(fa >= 0 && raw_read_until(fa, &a, "data: ", 20));
    CHECK(wait_metric(&sv, "moe8:num_requests_running", NULL, 1, 5));
    fb = raw_post(&sv, CHAT, chat_stream);
    CHECK(fb >= 0 && raw_read_until(fb, &b, "\"role\":\"assistant\"", 20));
    CHECK(wait_metric(&sv, "moe8:num_requests_waiting", NULL, 1, 5));
    /* the queue is full */
    {
        bad_case c = {"POST", CMPL, short_whole, 0, 503, "server_error", NULL, "overloaded", "--max-queue"};
        check_bad(&sv, &c, NULL);
        bad_case d = {"POST", CHAT, chat_stream, 0, 503, "server_error", NULL, "overloaded", "--max-queue"};
        check_bad(&sv, &d, NULL);
    }
    /* B hangs up while queued */
    close(fb);
    CHECK(wait_metric(&sv, "moe8:num_requests_waiting", NULL, 0, 5));
    CHECK(wait_metric(&sv, "moe8:request_success_total", "finished_reason=\"abort\"", 1, 5));
    /* so does a non-stream request */
    fb = raw_post(&sv, CMPL, short_whole);
    CHECK(fb >= 0 && wait_metric(&sv, "moe8:num_requests_waiting", NULL, 1, 5));
    close(fb);
    CHECK(wait_metric(&sv, "moe8:request_success_total", "finished_reason=\"abort\"", 2, 5));
    CHECK(metric(&sv, "moe8:num_requests_running", NULL) == 1);
    /* A hangs up mid-stream: nothing runs, no KV held */
    close(fa);
    CHECK(wait_idle(&sv, 5));
    CHECK(metric(&sv, "moe8:request_success_total", "finished_reason=\"abort\"") == 3);
    CHECK(metric(&sv, "moe8:request_success_total", "finished_reason=\"stop\"") == 0);
    CHECK(metric(&sv, "moe8:request_success_total", "finished_reason=\"length\"") == 0);
    CHECKF(metric(&sv, "moe8:prompt_tokens_total", NULL) == 3 + n_chat_prompt + 3, "prompt tokens %g, want %d",
           metric(&sv, "moe8:prompt_tokens_total", NULL), 6 + n_chat_prompt);
    gen = metric(&sv, "moe8:generation_tokens_total", NULL);
    CHECKF(gen >= 1 && gen < 4000, "generated %g tokens before the hang-up", gen);
    /* served as before */
    CHECK(post(&sv, CMPL, short_whole, &out) == 200 && strstr(buf_s(&out), "\"completion_tokens\":5"));
    CHECK(metric(&sv, "moe8:request_success_total", "finished_reason=\"length\"") == 1);
    CHECK(metric(&sv, "moe8:generation_tokens_total", NULL) == gen + 5);
    CHECK(wait_idle(&sv, 5));
    buf_free(&a);
    buf_free(&b);
    buf_free(&out);
    server_stop(&sv, 10);
}

/* ---- SIGTERM during a stream ------------------------------------------------------------------ */

typedef struct {
    buf out;
    server *sv;
    double t_term;
    double refused;  /* seconds after SIGTERM until new connections are refused (-1: never) */
} term_ctx;

static size_t on_term_body(char *p, size_t size, size_t n, void *user) {
    term_ctx *t = user;
    buf_add(&t->out, p, size * n);
    if (!t->t_term && strstr(buf_s(&t->out), "\"text\"")) {
        t->t_term = now_s();
        kill(t->sv->pid, SIGTERM);
        /* while it drains, a new connection is refused, not left waiting */
        t->refused = -1;
        while (now_s() - t->t_term < 3) {
            int fd = raw_connect(t->sv->port);
            if (fd < 0 && errno == ECONNREFUSED) {
                t->refused = now_s() - t->t_term;
                break;
            }
            if (fd >= 0) close(fd);
            sleep_s(0.05);
        }
    }
    return size * n;
}

static void test_sigterm(const char *dir) {
    server sv;
    char args[4400], url[128];
    term_ctx t;
    result res;
    int status = 0, exited = 0;
    double waited;
    const char *body = "{\"prompt\":[5,6,7],\"max_tokens\":4000,\"ignore_eos\":true,\"temperature\":0,\"stream\":true}";
    CURL *c;
    snprintf(args, sizeof args, "-m '%s' --ctx-size 4096 --threads 2", dir);
    if (server_start(&sv, "sigterm", NULL, args)) return;
    memset(&t, 0, sizeof t);
    t.sv = &sv;
    c = curl_easy_init();
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", sv.port, CMPL);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_term_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    sv.n_req++;
    CHECK(curl_easy_perform(c) == CURLE_OK);
    curl_easy_cleanup(c);
    memset(&res, 0, sizeof res);
    CHECKF(t.t_term > 0 && parse_stream(&res, 0, 0, buf_s(&t.out)), "stream after SIGTERM: %.300s",
           buf_s(&t.out));
    CHECKF(!strcmp(res.finish, "length") || !strcmp(res.finish, "abort"), "finish '%s'", res.finish);
    CHECKF(t.refused >= 0 && t.refused < 1, "connections during the drain: refused after %.2f s (-1: never)",
           t.refused);
    while (t.t_term && !(exited = waitpid(sv.pid, &status, WNOHANG) == sv.pid) && now_s() - t.t_term < 30)
        sleep_s(0.01);
    waited = now_s() - t.t_term;
    printf("test_serve: SIGTERM mid-stream: finish '%s', exit %.2f s later\n", res.finish, waited);
    CHECKF(exited && WIFEXITED(status) && WEXITSTATUS(status) == 0 && waited < (g_asan ? 20 : 8),
           "after SIGTERM: status 0x%x after %.1f s", status, waited);
    if (exited) { /* reaped here: server_stop checks the rest */
        buf e = {0};
        read_text(sv.err, &e);
        CHECKF(!sanitizer_report(buf_s(&e)), "%s", buf_s(&e));
        CHECK(count_lines(buf_s(&e), "moe8 serve: POST ") == 1);
        buf_free(&e);
        forget_group(sv.pid);
        CHECK(kill(-sv.pid, 0) != 0);
    } else {
        server_stop(&sv, 5);
    }
    result_free(&res);
    buf_free(&t.out);
}

/* ---- a burst: streams, hang-ups, client timeouts, bad requests (ASan) ------------------------ */

static void test_burst(const char *dir) {
    server sv;
    char args[4400], text[2048];
    const int n = g_asan ? 16 : 32;
    mreq *m = calloc((size_t)n, sizeof *m);
    int n_hung = 0, n_bad = 0, n_good = 0, ok = 1;
    buf out = {0};
    snprintf(args, sizeof args, "-m '%s' --ctx-size 4096 --parallel 4 --threads 2", dir);
    if (server_start(&sv, "burst", NULL, args)) {
        free(m);
        return;
    }
    for (int i = 0; i < n; i++) {
        switch (i % 4) {
        case 0: /* hangs up after its first events */
            m[i].path = CMPL;
            m[i].body = strdup("{\"prompt\":[9,8,7,6],\"max_tokens\":400,\"ignore_eos\":true,\"stream\":true,"
                               "\"logprobs\":3}");
            m[i].abort_at = 400;
            break;
        case 1: /* bad */
            m[i].path = i % 8 == 1 ? CHAT : CMPL;
            m[i].body = strdup(i % 8 == 1 ? "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}"
                                          : "{\"prompt\": [1, 2,");
            break;
        default:
            if (i % 8 == 6) { /* a non-stream answer the client stops waiting for */
                m[i].path = CMPL;
                m[i].body = strdup("{\"prompt\":[4,4,4],\"max_tokens\":4000,\"ignore_eos\":true}");
                m[i].timeout_ms = g_asan ? 1500 : 300;
            } else {
                m[i].body = mix_body(i, &m[i].path, text, sizeof text);
            }
            break;
        }
    }
    multi_run(&sv, m, n);
    for (int i = 0; i < n; i++) {
        if (i % 4 == 0 || i % 8 == 6) n_hung += m[i].aborted, ok &= m[i].aborted;
        else if (i % 4 == 1) n_bad += m[i].status == 400, ok &= m[i].status == 400;
        else n_good += m[i].status == 200, ok &= m[i].status == 200;
        if (!ok) {
            fprintf(stderr, "  burst request %d: %ld %.300s\n", i, m[i].status, buf_s(&m[i].out));
            ok = 1;
        }
        buf_free(&m[i].out);
        free(m[i].body);
    }
    CHECKF(n_hung == n / 4 + n / 8 && n_bad == n / 4 && n_good == n / 2 - n / 8, "burst: %d hung up, %d bad, %d good",
           n_hung, n_bad, n_good);
    CHECK(wait_idle(&sv, 10));
    CHECKF(metric(&sv, "moe8:request_success_total", "finished_reason=\"abort\"") == n_hung, "aborts %g, want %d",
           metric(&sv, "moe8:request_success_total", "finished_reason=\"abort\""), n_hung);
    CHECK(post(&sv, CMPL, "{\"prompt\":\"still here\",\"max_tokens\":3}", &out) == 200);
    CHECK(http(&sv, "GET", "/health", NULL, 0, NULL, &out) == 200);
    buf_free(&out);
    server_stop(&sv, 10);
    free(m);
}

/* ---- TP / EP under mpirun ------------------------------------------------------------------ */

#ifdef MOE8_MPIEXEC
/* Greedy request i (no log-probs: TP's logits differ in the last bits). */
static char *tp_body(int i, const char **path, char *text, size_t cap) {
    test_rng g = {0xD1B54A32D192ED03ull * (unsigned long long)(i + 3)};
    static int32_t ids[200];
    rq r = rq_default();
    r.stream = i % 2;
    r.usage = 1;
    r.max_tokens = 4 + (int)(test_rng_u64(&g) % 12);
    if (i % 3 == 2) {
        snprintf(text, cap, "%s%s %d", SENTENCE, SENTENCE, i);
        r.text = text;
        r.chat = 1;
    } else {
        r.n_ids = 1 + (int)(test_rng_u64(&g) % 200);
        for (int k = 0; k < r.n_ids; k++) ids[k] = (int32_t)(test_rng_u64(&g) % 150000);
        r.ids = ids;
    }
    *path = rq_path(&r);
    return rq_body(&r);
}

static void test_mpi(const char *dir, server *single) {
    static const char *modes[2] = {"--tp 2", "--tp 2 --expert-parallel"};
    enum { N = 8 };
    char args[4400], text[1024], prefix[512];
    mreq m[N];
    result ref[N];
    memset(m, 0, sizeof m);
    for (int i = 0; i < N; i++) { /* the references: one process, one request at a time */
        buf out = {0};
        int chat, stream;
        m[i].body = tp_body(i, &m[i].path, text, sizeof text);
        chat = strstr(m[i].path, "chat") != NULL, stream = strstr(m[i].body, "\"stream\":true") != NULL;
        memset(&ref[i], 0, sizeof ref[i]);
        CHECK(post(single, m[i].path, m[i].body, &out) == 200);
        CHECK(stream ? parse_stream(&ref[i], chat, 1, buf_s(&out)) : parse_whole(&ref[i], chat, buf_s(&out)));
        buf_free(&out);
    }
    snprintf(prefix, sizeof prefix, "%s --oversubscribe -np 2", MOE8_MPIEXEC);
    for (int k = 0; k < 2; k++) {
        server sv;
        int n_same = 0;
        snprintf(args, sizeof args, "-m '%s' %s --ctx-size 512 --parallel 4 --threads 1", dir, modes[k]);
        if (server_start(&sv, k ? "ep" : "tp", prefix, args)) continue;
        CHECKF(sv.n_ranks == 2, "%s: %d ranks under mpirun", modes[k], sv.n_ranks);
        /* --tp 2: SIGTERM to rank 0, which stops the others, and mpirun exits 0.
         * --expert-parallel: SIGTERM to mpirun, which signals every rank and
         * exits 1 (OpenMPI's way); every rank must end all the same. */
        if (k == 0) {
            for (int r = 0; r < sv.n_ranks; r++) {
                char path[64];
                buf env = {0};
                snprintf(path, sizeof path, "/proc/%d/environ", (int)sv.ranks[r]);
                read_text(path, &env);
                for (size_t at = 0; at < env.n; at += strlen(env.p + at) + 1)
                    if (!strcmp(env.p + at, "OMPI_COMM_WORLD_RANK=0")) sv.term = sv.ranks[r];
                buf_free(&env);
            }
            CHECKF(sv.term > 0, "no rank 0 among mpirun's children");
        } else {
            sv.any_status = 1;
        }
        multi_run(&sv, m, N);
        for (int i = 0; i < N; i++) {
            result r;
            const int chat = strstr(m[i].path, "chat") != NULL, stream = strstr(m[i].body, "\"stream\":true") != NULL;
            memset(&r, 0, sizeof r);
            if (m[i].status == 200 &&
                (stream ? parse_stream(&r, chat, 1, buf_s(&m[i].out)) : parse_whole(&r, chat, buf_s(&m[i].out))) &&
                r.norm.n == ref[i].norm.n && !memcmp(r.norm.p, ref[i].norm.p, r.norm.n))
                n_same++;
            else
                fprintf(stderr, "  %s request %d: %.400s\n  single process: %.400s\n", modes[k], i,
                        buf_s(&m[i].out), buf_s(&ref[i].norm));
            result_free(&r);
            buf_free(&m[i].out);
        }
        CHECKF(n_same == N, "%s: %d of %d concurrent greedy requests equal single-process serving", modes[k],
               n_same, N);
        CHECK(wait_idle(&sv, 5));
        printf("test_serve: mpirun -np 2 serve %s: %d/%d equal; stopped in %.2f s\n", modes[k], n_same, N,
               server_stop(&sv, 15));
    }
    for (int i = 0; i < N; i++) {
        free(m[i].body);
        result_free(&ref[i]);
    }
}
#endif

/* ---- reasoning: <think> ... </think> split out of chat answers ---------------------------- */

/* The split written here: content before <think>, reasoning up to </think>
 * (or the end), content after; with thinking off (0) only an answer that
 * starts with <think> is split, any other is content (a "<think>" later, in
 * a tool call's arguments say, is no think block). */
static void think_ref(const char *raw, int thinking, buf *content, buf *reason) {
    const char *open = strstr(raw, "<think>"), *close;
    content->n = reason->n = 0;
    buf_add(content, "", 0);
    buf_add(reason, "", 0);
    if (!open || (thinking == 0 && open != raw)) {
        buf_str(content, raw);
        return;
    }
    buf_add(content, raw, (size_t)(open - raw));
    open += 7;
    if (!(close = strstr(open, "</think>"))) {
        buf_str(reason, open);
        return;
    }
    buf_add(reason, open, (size_t)(close - open));
    buf_str(content, close + 8);
}

/* ---- the model's chat template ------------------------------------------------------------------ */

/* The model folder's tokenizer_config.json swapped for one whose template
 * writes BOS (add_bos_token is on: it must not come twice), reads a kwarg,
 * and raises on one message; then for one without a template. */
static void test_chat_template(const char *dir, lib_env *L) {
    static const char tmpl[] =
        "{{ bos_token }}{% for m in messages %}{% if m.content == 'forbidden' %}"
        "{{ raise_exception('the word ' ~ m.content ~ ' is not allowed') }}{% endif %}"
        "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{{ greeting|default('') }}{% endif %}";
    char path[4200], args[4400], saved_path[4300];
    cJSON *cfg = cJSON_CreateObject();
    char *cfg_text;
    server sv;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    snprintf(saved_path, sizeof saved_path, "%s.saved", path);
    CHECK(rename(path, saved_path) == 0);
    cJSON_AddBoolToObject(cfg, "add_bos_token", 1);
    cJSON_AddStringToObject(cfg, "bos_token", "<|endoftext|>");
    cJSON_AddStringToObject(cfg, "chat_template", tmpl);
    cfg_text = cJSON_PrintUnformatted(cfg);
    test_write_file(path, cfg_text, strlen(cfg_text));
    snprintf(args, sizeof args, "-m '%s' --ctx-size 256 --threads 2 --served-model-name serve_text", dir);
    if (server_start(&sv, "template", NULL, args) == 0) {
        static const struct { const char *body, *want_text; } T[] = {
            {"{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"hi\"}]}",
             "<|endoftext|><|im_start|>system\ns<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"},
            {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"add_generation_prompt\":false}",
             "<|endoftext|><|im_start|>user\nhi<|im_end|>\n"},
            {"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"chat_template_kwargs\":{\"greeting\":\"Sure: \"}}",
             "<|endoftext|><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nSure: "},
            {"{\"prompt\":\"hi\"}", "<|endoftext|>hi"}, /* a completion prompt still gets its BOS */
        };
        for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
            int32_t want[64], got[64];
            size_t nw = 0;
            buf out = {0};
            cJSON *o;
            int n = -1;
            CHECK(moe8_tokenize(L->tok, T[i].want_text, strlen(T[i].want_text), want, 64, &nw, NULL) == MOE8_OK);
            if (post(&sv, "/tokenize", T[i].body, &out) == 200 && (o = cJSON_Parse(buf_s(&out)))) {
                n = cJSON_GetArraySize(J(o, "tokens"));
                for (int k = 0; k < n && k < 64; k++) got[k] = cJSON_GetArrayItem(J(o, "tokens"), k)->valueint;
                cJSON_Delete(o);
            }
            CHECKF(n == (int)nw && !memcmp(got, want, nw * sizeof *want), "/tokenize %s: %s", T[i].body, buf_s(&out));
            buf_free(&out);
        }
        /* the template's raise_exception, and kwargs it cannot take: 400s with the message */
        bad_case B[] = {
            {"POST", CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"forbidden\"}]}", 0, 400, INV,
             "messages", NULL, "chat template: the word forbidden is not allowed"},
            {"POST", "/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"forbidden\"}]}", 0, 400, INV,
             "messages", NULL, "the word forbidden is not allowed"},
            {"POST", CHAT, "{" MSG ",\"chat_template_kwargs\":{\"messages\":[]}}", 0, 400, INV,
             "chat_template_kwargs", NULL, "cannot set 'messages'"},
        };
        for (size_t i = 0; i < sizeof B / sizeof *B; i++) check_bad(&sv, &B[i], NULL);
        /* a chat that renders still runs */
        {
            buf out = {0};
            CHECK(post(&sv, CHAT, "{" MSG ",\"max_tokens\":2}", &out) == 200 && strstr(buf_s(&out), "chat.completion"));
            buf_free(&out);
        }
        server_stop(&sv, 10);
    }
    /* no chat template: chat is a 400 saying so (and the server said so at start) */
    test_write_file(path, "{}", 2);
    if (server_start(&sv, "no_template", NULL, args) == 0) {
        bad_case b = {"POST", CHAT, "{" MSG "}", 0, 400, INV, "messages", NULL, "this model has no chat template"};
        buf e = {0};
        check_bad(&sv, &b, NULL);
        read_text(sv.err, &e);
        CHECKF(strstr(buf_s(&e), "note: /v1/chat/completions will answer 400"), "%s", buf_s(&e));
        buf_free(&e);
        server_stop(&sv, 10);
    }
    CHECK(rename(saved_path, path) == 0);
    cJSON_free(cfg_text);
    cJSON_Delete(cfg);
}

static void test_reasoning(const char *dir) {
    static const struct { int thinking, max_tokens; const char *content, *reason, *finish; } C[] = {
        {-1, 16, "Hello!", "Let me think", "stop"},
        {1, 16, "Hello!", "Let me think", "stop"},
        {0, 16, " Hmm<think>Hello!", "", "stop"}, /* thinking off: a <think> past the start is text */
        {-1, 3, "", "Let me", "length"},
        {-1, 6, "", "Let me think</think", "length"},  /* the held tag piece, released at the end */
        {0, 2, " Hmm<th", "", "length"},
    };
    server sv;
    lib_env L;
    lib_res *ref = calloc(1, sizeof *ref);
    buf c = {0}, r = {0}, out = {0};
    char args[4400];
    int n_checked = 0;
    snprintf(args, sizeof args, "-m '%s' --ctx-size 256 --threads 2 --served-model-name serve_text", dir);
    lib_open(&L, dir, MOE8_DT_F16);
    if (server_start(&sv, "reasoning", NULL, args) == 0) {
        for (size_t i = 0; i < sizeof C / sizeof *C; i++) {
            for (int stream = 0; stream < 2; stream++) {
                rq q = rq_default();
                result res;
                q.chat = 1, q.text = "Hi there", q.thinking = C[i].thinking, q.max_tokens = C[i].max_tokens;
                q.stream = stream, q.usage = stream;
                lib_run(&L, &q, ref);
                think_ref(buf_s(&ref->text), C[i].thinking, &c, &r);
                if (!run_rq(&sv, &q, &res)) continue;
                CHECKF(!strcmp(buf_s(&res.text), C[i].content) && !strcmp(buf_s(&res.reason), C[i].reason) &&
                       !strcmp(res.finish, C[i].finish),
                       "thinking %d, %d tokens, stream %d: content '%s' reasoning '%s' finish %s; want '%s' '%s' %s",
                       C[i].thinking, C[i].max_tokens, stream, buf_s(&res.text), buf_s(&res.reason), res.finish,
                       C[i].content, C[i].reason, C[i].finish);
                CHECKF(!strcmp(buf_s(&c), C[i].content) && !strcmp(buf_s(&r), C[i].reason),
                       "the library's text '%s' splits into '%s' + '%s'", buf_s(&ref->text), buf_s(&c), buf_s(&r));
                CHECK(res.completion_tokens == ref->n);
                /* streamed: a tag is never shown in part (held back until decided) */
                if (stream && C[i].finish[0] == 's' && C[i].thinking)
                    CHECKF(!strchr(buf_s(&res.norm), '<') && !strchr(buf_s(&res.norm), '>') &&
                           !strstr(buf_s(&res.norm), "\"ink\""), "a tag in part: %s", buf_s(&res.norm));
                n_checked++;
                result_free(&res);
            }
        }
        /* completions are not split */
        {
            static const int32_t p[] = {1, 2, 198};
            rq q = rq_default();
            result res;
            q.ids = p, q.n_ids = 3, q.max_tokens = 16;
            for (int stream = 0; stream < 2; stream++) {
                q.stream = stream;
                if (run_rq(&sv, &q, &res))
                    CHECKF(!strcmp(buf_s(&res.text), "<think>Let me think</think>Hello!") && res.reason.n == 0,
                           "completion: '%s'", buf_s(&res.text));
                result_free(&res);
            }
        }
        printf("test_serve: reasoning split: %d chat answers\n", n_checked);
        server_stop(&sv, 10);
    }
    lib_close(&L);
    buf_free(&c);
    buf_free(&r);
    buf_free(&out);
    buf_free(&ref->text);
    free(ref);
}

/* A template whose generation prompt opens the reasoning itself, as
 * DeepSeek-R1's ("...<|im_start|>assistant\n<think>"): the chain model then
 * answers "Let" " me" " think" "</" "think" ">" "Hello" without writing
 * <think>, and the server must still split it (vLLM's DeepSeek-R1 parser). */
static void test_reasoning_opened(const char *dir) {
    static const char tmpl[] =
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n<think>{% endif %}";
    char path[4200], saved[4300], args[4400];
    cJSON *cfg = cJSON_CreateObject();
    char *text;
    server sv;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    snprintf(saved, sizeof saved, "%s.saved", path);
    CHECK(rename(path, saved) == 0);
    cJSON_AddStringToObject(cfg, "chat_template", tmpl);
    text = cJSON_PrintUnformatted(cfg);
    test_write_file(path, text, strlen(text));
    snprintf(args, sizeof args, "-m '%s' --ctx-size 256 --threads 2 --served-model-name serve_text", dir);
    if (server_start(&sv, "reasoning_opened", NULL, args) == 0) {
        for (int stream = 0; stream < 2; stream++) {
            rq q = rq_default();
            result res;
            q.chat = 1, q.text = "Hi there", q.thinking = -1, q.max_tokens = 7, q.stream = stream;
            if (!run_rq(&sv, &q, &res)) continue;
            CHECKF(!strcmp(buf_s(&res.reason), "Let me think") && !strcmp(buf_s(&res.text), "Hello"),
                   "prompt-opened <think>, stream %d: content '%s' reasoning '%s'", stream,
                   buf_s(&res.text), buf_s(&res.reason));
            result_free(&res);
        }
        /* completions are never split */
        {
            static const int32_t p[] = {1, 2, 151667};
            rq q = rq_default();
            result res;
            q.ids = p, q.n_ids = 3, q.max_tokens = 7;
            if (run_rq(&sv, &q, &res))
                CHECKF(!strcmp(buf_s(&res.text), "Let me think</think>Hello") && res.reason.n == 0,
                       "completion: '%s'", buf_s(&res.text));
            result_free(&res);
        }
        server_stop(&sv, 10);
    }
    CHECK(rename(saved, path) == 0);
    cJSON_free(text);
    cJSON_Delete(cfg);
}

/* ---- the official OpenAI Node client ------------------------------------------------------- */

static void test_node_client(server *sv, const char *dir) {
    char pkg[4200], cmd[16384], outp[4200];
    buf out = {0};
    cli_res chat_ref, cmpl_ref;
    rq chat = rq_default(), cmpl = rq_default();
    cJSON *o;
    if (test_run("command -v node >/dev/null 2>&1") != 0) {
        printf("test_serve: OpenAI Node client: skipped: node not found (make deps installs it)\n");
        return;
    }
    snprintf(pkg, sizeof pkg, "%s/node_modules/openai/package.json", MOE8_OPENAI_NODE);
    if (access(pkg, R_OK) != 0) {
        CHECKF(0, "node is here but the openai package is not (%s): run make deps", pkg);
        return;
    }
    memset(&chat_ref, 0, sizeof chat_ref);
    memset(&cmpl_ref, 0, sizeof cmpl_ref);
    chat.chat = 1, chat.text = "Hello there, who are you?", chat.max_tokens = 12;
    cmpl.text = "Once upon a time", cmpl.max_tokens = 12;
    cli_generate(dir, &chat, &chat_ref);
    cli_generate(dir, &cmpl, &cmpl_ref);
    snprintf(outp, sizeof outp, "%s/serve_node.json", MOE8_TEST_TMP);
    snprintf(cmd, sizeof cmd,
             "node '%s/tests/openai_client.mjs' '%s' 'http://127.0.0.1:%d/v1' serve_text '%s' '%s' 12 >'%s'",
             MOE8_SOURCE_DIR, MOE8_OPENAI_NODE, sv->port, chat.text, cmpl.text, outp);
    CHECKF(test_run(cmd) == 0, "the OpenAI Node client failed (see above)");
    read_text(outp, &out);
    o = cJSON_Parse(buf_s(&out));
    CHECKF(o != NULL, "node printed: %s", buf_s(&out));
    if (o) {
        const cJSON *cs = J(o, "chat_stream"), *cw = J(o, "chat"), *pw = J(o, "completion"),
                    *ps = J(o, "completion_stream");
        const char *ver = jstr(o, "version");
        const cJSON *sections[4] = {cs, cw, pw, ps};
        const cli_res *refs[4] = {&chat_ref, &chat_ref, &cmpl_ref, &cmpl_ref};
        static const char *names[4] = {"chat stream", "chat", "completion", "completion stream"};
        sv->n_req += J(o, "requests") ? J(o, "requests")->valueint : 0;
        CHECKF(ver && !strncmp(ver, "6.", 2), "openai version '%s'", ver ? ver : "?");
        CHECK(cJSON_GetArraySize(J(o, "models")) == 1 &&
              !strcmp(cJSON_GetArrayItem(J(o, "models"), 0)->valuestring, "serve_text"));
        for (int k = 0; k < 4; k++) {
            const char *txt = jstr(sections[k], "text");
            CHECKF(txt && strlen(txt) == refs[k]->text.n && !memcmp(txt, refs[k]->text.p, refs[k]->text.n),
                   "OpenAI client %s: '%s', moe8 generate: '%s'", names[k], txt ? txt : "(none)",
                   buf_s(&refs[k]->text));
            CHECKF(jstr(sections[k], "finish_reason") &&
                   !strcmp(jstr(sections[k], "finish_reason"), refs[k]->n_ids == 12 ? "length" : "stop"),
                   "OpenAI client %s: finish_reason", names[k]);
            if (k < 3) {
                const cJSON *u = J(sections[k], "usage");
                CHECKF(J(u, "prompt_tokens") && J(u, "prompt_tokens")->valueint == refs[k]->prompt_tokens &&
                       J(u, "completion_tokens")->valueint == refs[k]->n_ids,
                       "OpenAI client %s: usage", names[k]);
            }
        }
        CHECK(jstr(cs, "role") && !strcmp(jstr(cs, "role"), "assistant") && jstr(cw, "role"));
        printf("test_serve: OpenAI Node client %s: chat and completion (streamed and whole) equal moe8 generate\n",
               ver ? ver : "?");
    }
    cJSON_Delete(o);
    buf_free(&out);
    buf_free(&chat_ref.text);
    buf_free(&cmpl_ref.text);
}

/* ---- main ----------------------------------------------------------------------------------- */

/* --part clients: the OpenAI Node client against its own server */
static void clients_part(void) {
    fx_opts ot = serve_fixture_opts();
    server sv;
    char args[4400];
    const char *dir = fx_test_model("serve_text_clients", &ot, 1);
    snprintf(args, sizeof args, "-m '%s' --ctx-size 512 --threads 2 --served-model-name serve_text", dir);
    if (server_start(&sv, "clients", NULL, args) == 0) {
        test_node_client(&sv, dir);
        phase("openai node client");
        server_stop(&sv, 10);
    }
}

int main(int argc, char **argv) {
    fx_opts ot = serve_fixture_opts();
    server sv;
    lib_env L;
    char args[4400];
    const char *dir;
    double t0;
    serve_test_parts(argc, argv);
    serve_test_init("test_serve");
    t0 = g_t0;
    if (g_part_clients) {
        if (g_asan) printf("test_serve: the OpenAI Node client: in the release build only\n");
        else clients_part();
    }
    if (!g_part_c) {
        curl_global_cleanup();
        return test_summary();
    }
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0); /* ctest sets these too */
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    dir = fx_test_model("serve_text", &ot, 1);
    lib_open(&L, dir, MOE8_DT_F16);

    snprintf(args, sizeof args, "-m '%s' --ctx-size 512 --threads 2", dir);
    if (server_start(&sv, "main", NULL, args) == 0) {
        test_endpoints(&sv, &L);
        phase("endpoints");
        test_completions(&sv, &L, dir);
        phase("completions and chat");
        test_bad_requests(&sv);
        phase("bad requests");
        /* the counters add up to what was sent */
        CHECK(wait_idle(&sv, 5));
        CHECKF(metric(&sv, "moe8:prompt_tokens_total", NULL) == (double)g_sum_prompt, "prompt tokens %g, sent %lld",
               metric(&sv, "moe8:prompt_tokens_total", NULL), (long long)g_sum_prompt);
        CHECKF(metric(&sv, "moe8:generation_tokens_total", NULL) == (double)g_sum_gen, "generated %g, answered %lld",
               metric(&sv, "moe8:generation_tokens_total", NULL), (long long)g_sum_gen);
        CHECK(metric(&sv, "moe8:request_success_total", "finished_reason=\"stop\"") == (double)g_n_stop);
        CHECK(metric(&sv, "moe8:request_success_total", "finished_reason=\"length\"") == (double)g_n_length);
        CHECK(metric(&sv, "moe8:request_success_total", "finished_reason=\"abort\"") == 0);
        CHECK(metric(&sv, "moe8:e2e_request_latency_seconds_count", NULL) == (double)(g_n_stop + g_n_length));
        CHECK(metric(&sv, "moe8:time_to_first_token_seconds_count", NULL) == (double)g_n_tokens_reqs);
        CHECK(metric(&sv, "moe8:inter_token_latency_seconds_count", NULL) == (double)(g_sum_gen - g_n_tokens_reqs));
        CHECK(metric(&sv, "moe8:prefix_cache_hits_total", NULL) > 0);
#ifdef MOE8_MPIEXEC
        if (g_asan) printf("test_serve: mpirun serve --tp 2: in the release build only\n");
        else test_mpi(dir, &sv);
        phase("mpirun serve");
#else
        printf("test_serve: mpirun serve --tp 2: skipped: this build has no MPI\n");
#endif
        server_stop(&sv, 10);
    }
    printf("test_serve: %d request cases, %d bad requests; %.1f s so far\n", g_n_cases, g_n_bad, now_s() - t0);
    test_chat_template(dir, &L);
    phase("chat template");
    {
        fx_opts oc = ot;
        oc.tensor_hook = chain_hook;
        const char *chain = fx_test_model("serve_chain", &oc, 1);
        test_reasoning(chain);
        test_reasoning_opened(chain);
        phase("reasoning");
    }
    test_concurrent(dir);
    phase("concurrent");
    test_auth_timeout(dir);
    phase("auth, timeout");
    test_queue_disconnect(dir);
    phase("queue, disconnects");
    test_sigterm(dir);
    phase("sigterm");
    test_burst(dir);
    phase("burst");
    lib_close(&L);
    curl_global_cleanup();
    printf("test_serve: %.1f s\n", now_s() - t0);
    return test_summary();
}
