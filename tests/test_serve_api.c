/*
 * test_serve_api.c — what `moe8 serve` (the CLI at MOE8_CLI) gives
 * applications beyond plain completions, over HTTP on the tiny Qwen3
 * fixture, each against an independent reference:
 *   - the logits processors (logit_bias, min_tokens, presence / frequency /
 *     repetition penalties), greedy and seeded: every token, log-prob and
 *     alternative equals this process's own moe8_sched run with the same
 *     moe8_request fields (bit for bit), each greedy token is the arg-max of
 *     this file's own processing of the raw logits (the rules moe8.h
 *     states), and every log-prob is the raw model's (this file's
 *     log-softmax); each penalised case is one where the penalty changes
 *     the output; out-of-range values are 400s naming the field;
 *   - n: choice i is the single request seeded seed + i (and the
 *     library's), whole and streamed, usage summed; the prefix cache serves
 *     the other choices' prompts; no seed draws a fresh one;
 *   - echo: the prompt's text and log-probs (the library's PROMPT_LOGITS
 *     events), text offsets as the token bytes add up, max_tokens 0;
 *   - structured outputs: json_schema with a dozen fields (each output
 *     parsed strictly and checked by a validator written here), json_object,
 *     GBNF, their 400s; batch invariance of constrained and penalised
 *     requests among plain ones;
 *   - tool calling (hermes, the fixture's Qwen3 template): required, named,
 *     parallel_tool_calls false (one call by the grammar; in auto the request
 *     ends after the first call, a stream never shows the second),
 *     streamed deltas joined = the whole answer, required with response_format
 *     refused,
 *     none / auto render the tools, the 400s, a tool-call history rendered
 *     as tests/data/jinja/tool_goldens.json says (jinja2's output), and by
 *     `moe8 tokenize --messages` as by /tokenize (the calls kept);
 *   - the field policy (refused, accepted, an unknown field's one warning);
 *   - model 404s, /v1/models/{id}, CORS, open routes under --api-key,
 *     --kv-type f32 (the library's f32 context), --default-chat-template-
 *     kwargs, `moe8 bench serve`'s seed and cached tokens, its structured
 *     output flags (--json-schema, --json-object) and their refusals;
 *   - tests/clients/apps.mjs (the OpenAI library, the AI SDK, LangChain)
 *     when node and .deps/clients are there: `--part clients` (ctest's
 *     test_serve_api_clients, labelled client, release build only), the
 *     rest `--part c`;
 *   - thinking on the chain model (serve_test.h): a grammar (json_schema,
 *     required tools) starts after </think>, the reasoning as unconstrained,
 *     the whole text the library's with grammar_after; never closed =
 *     unconstrained; thinking off as before; batch invariance.
 * The ASan build runs fewer and shorter requests. Servers listen on
 * 127.0.0.1 port 0 in their own process groups (serve_test.h).
 */
#include <fcntl.h>
#include <strings.h>

#include "test.h"
#include "fixture_model.h"
#include "serve_test.h"

#define MAXT 640       /* most tokens one checked request generates */
#define MAXP 256       /* most prompt tokens whose log-probs are checked */
#define NAME "serve_text" /* --served-model-name: what serve_test.h's requests and checks expect */

/* The fixture's end-of-sequence ids: config.json's eos_token_id (2) and the
 * Qwen3 tokenizer's eos_token <|im_end|>; <|endoftext|> is not one. */
static const int32_t FX_EOS[] = {2, 151645};
#define IM_END 151645

/* ---- requests with the processors ------------------------------------------------------- */

typedef struct {
    int chat;                       /* chat (thinking off) or completion */
    const char *text;               /* the prompt, or the user message */
    const int32_t *ids;             /* or a token-id prompt */
    int n_ids;
    int max_tokens;
    double temp;
    long long seed;                 /* -1: not sent */
    int logprobs;                   /* -1: none */
    int n_bias;
    int32_t bias_ids[4];
    float bias[4];
    int min_tokens;                 /* 0: not sent */
    double pres, freq, rep;         /* NAN: not sent */
    int echo, n, stream, usage, ignore_eos;
    int thinking;                   /* chat: enable_thinking true (else false) */
    const moe8_grammar *grammar;    /* the library run's grammar (the body gives the server its own) */
    const char *grammar_after;      /* ... and its grammar_after */
} areq;

static areq areq_default(void) {
    areq r;
    memset(&r, 0, sizeof r);
    r.max_tokens = 8;
    r.seed = -1;
    r.logprobs = -1;
    r.pres = r.freq = r.rep = NAN;
    r.n = 1;
    return r;
}

static void areq_prompt(cJSON *o, const areq *r) {
    if (r->chat) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", r->text);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "messages"), m);
        cJSON_AddBoolToObject(cJSON_AddObjectToObject(o, "chat_template_kwargs"), "enable_thinking", r->thinking);
    } else if (r->ids) {
        cJSON *a = cJSON_AddArrayToObject(o, "prompt");
        for (int i = 0; i < r->n_ids; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(r->ids[i]));
    } else {
        cJSON_AddStringToObject(o, "prompt", r->text);
    }
}

static cJSON *areq_json(const areq *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", NAME);
    areq_prompt(o, r);
    cJSON_AddNumberToObject(o, "max_tokens", r->max_tokens);
    cJSON_AddNumberToObject(o, "temperature", r->temp);
    if (r->seed >= 0) cJSON_AddNumberToObject(o, "seed", (double)r->seed);
    if (r->logprobs >= 0) {
        if (r->chat) {
            cJSON_AddBoolToObject(o, "logprobs", 1);
            cJSON_AddNumberToObject(o, "top_logprobs", r->logprobs);
        } else {
            cJSON_AddNumberToObject(o, "logprobs", r->logprobs);
        }
    }
    if (r->n_bias) {
        cJSON *b = cJSON_AddObjectToObject(o, "logit_bias");
        for (int i = 0; i < r->n_bias; i++) {
            char key[16];
            snprintf(key, sizeof key, "%d", r->bias_ids[i]);
            cJSON_AddNumberToObject(b, key, (double)r->bias[i]); /* a float: the server's (float) is exact */
        }
    }
    if (r->min_tokens) cJSON_AddNumberToObject(o, "min_tokens", r->min_tokens);
    if (!isnan(r->pres)) cJSON_AddNumberToObject(o, "presence_penalty", (double)(float)r->pres);
    if (!isnan(r->freq)) cJSON_AddNumberToObject(o, "frequency_penalty", (double)(float)r->freq);
    if (!isnan(r->rep)) cJSON_AddNumberToObject(o, "repetition_penalty", (double)(float)r->rep);
    if (r->echo) cJSON_AddBoolToObject(o, "echo", 1);
    if (r->n != 1) cJSON_AddNumberToObject(o, "n", r->n);
    if (r->stream) {
        cJSON_AddBoolToObject(o, "stream", 1);
        if (r->usage) cJSON_AddBoolToObject(cJSON_AddObjectToObject(o, "stream_options"), "include_usage", 1);
    }
    if (r->ignore_eos) cJSON_AddBoolToObject(o, "ignore_eos", 1);
    return o;
}

static char *json_text(cJSON *o) { /* prints and frees o */
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static const char *areq_path(const areq *r) { return r->chat ? CHAT : CMPL; }

/* Send r; parse its (one-choice) answer into res. */
static int run_areq(server *sv, const areq *r, result *res) {
    char *body = json_text(areq_json(r));
    buf out = {0};
    long st = post(sv, areq_path(r), body, &out);
    int ok;
    memset(res, 0, sizeof *res);
    CHECKF(st == 200, "status %ld: %s (request %s)", st, buf_s(&out), body);
    ok = st == 200 && (r->stream ? parse_stream(res, r->chat, r->usage, buf_s(&out))
                                 : parse_whole(res, r->chat, buf_s(&out)));
    if (!ok) fprintf(stderr, "  request: %s\n  answer: %.2000s\n", body, buf_s(&out));
    res->ok = ok;
    free(body);
    buf_free(&out);
    return ok;
}

/* ---- the reference: the library's scheduler, and this file's own arithmetic --------------- */

typedef struct {
    int32_t prompt[2048];
    int n_prompt;
    int n;                                    /* generated tokens */
    int32_t tok[MAXT];
    float lp[MAXT];
    int n_top[MAXT];
    moe8_logprob top[MAXT][MOE8_MAX_LOGPROBS];
    int tlen[MAXT];                           /* the text each token's event released */
    float plp[MAXP];                          /* PROMPT_LOGITS at pos p: log-prob of prompt[p + 1] */
    int n_ptop[MAXP];
    moe8_logprob ptop[MAXP][MOE8_MAX_LOGPROBS];
    int n_plp;                                /* PROMPT_LOGITS events seen */
    buf text;
    moe8_finish finish;
    int own_bad;                              /* greedy draws that are not own_pick's */
    double lp_err;                            /* most |event log-prob - own_logprob| */
    float *logits0;                           /* [n_vocab] the raw logits of the first draw */
    int32_t watch;                            /* set by the caller (0: none): a token whose */
    float watch_margin;                       /* most raw lead of another token, over the draws */
} lib_res;

static lib_res *lib_res_new(void) { return calloc(1, sizeof(lib_res)); }

static void lib_res_free(lib_res *r) {
    if (!r) return;
    buf_free(&r->text);
    free(r->logits0);
    free(r);
}

/* The prompt ids of r as the server makes them (chat: Qwen3's ChatML, thinking as r says). */
static int lib_prompt(lib_env *L, const areq *r, int32_t *ids, int cap) {
    char text[16384];
    size_t n = 0;
    if (r->ids) {
        memcpy(ids, r->ids, (size_t)r->n_ids * sizeof *ids);
        return r->n_ids;
    }
    if (r->chat) {
        moe8_chat_message m = {"user", r->text};
        if (moe8_chat_format(&m, 1, MOE8_CHAT_ADD_ASSISTANT | (r->thinking ? 0 : MOE8_CHAT_NO_THINKING), text,
                             sizeof text, &n, NULL) != MOE8_OK)
            abort();
    } else {
        snprintf(text, sizeof text, "%s", r->text);
    }
    if (moe8_tokenize(L->tok, text, strlen(text), ids, (size_t)cap, &n, NULL) != MOE8_OK) abort();
    return (int)n;
}

/* Which positions of a library run have their log-probability checked against own_logprob:
 * all of them, but under ASan (numbers are the release build's to check; a double exp over the
 * vocabulary per token was a quarter of this test's time there) the first 4 and every 16th. */
static int lp_checked(int i) { return !g_asan || i < 4 || i % 16 == 0; }

/* log-softmax of x at t, in double (shares nothing with src/). */
static double own_logprob(const float *x, int32_t V, int32_t t) {
    double mx = -INFINITY, s = 0;
    for (int32_t i = 0; i < V; i++) mx = x[i] > mx ? x[i] : mx;
    for (int32_t i = 0; i < V; i++) s += exp((double)x[i] - mx);
    return (double)x[t] - mx - log(s);
}

/* The greedy token after r's processors on the raw logits, as moe8.h states
 * them, in its order: bias; eos banned before min_tokens; repetition p over
 * each distinct prompt or output token (x > 0 ? x / p : x * p); then
 * x - f * count and - q for each token of the output. Ties: the lower id. */
static int32_t own_pick(const float *raw, int32_t V, const areq *r, const int32_t *prompt, int n_prompt,
                        const int32_t *out, int n_out, float *x, unsigned char *mark, int *count) {
    int32_t best = 0;
    memcpy(x, raw, (size_t)V * sizeof *x);
    for (int i = 0; i < r->n_bias; i++) x[r->bias_ids[i]] += r->bias[i];
    if (n_out < r->min_tokens)
        for (size_t i = 0; i < sizeof FX_EOS / sizeof *FX_EOS; i++) x[FX_EOS[i]] = -INFINITY;
    if (!isnan(r->rep) && (float)r->rep != 1.0f) {
        const float p = (float)r->rep;
        for (int i = 0; i < n_prompt + n_out; i++) {
            const int32_t t = i < n_prompt ? prompt[i] : out[i - n_prompt];
            if (mark[t]) continue;
            mark[t] = 1;
            x[t] = x[t] > 0 ? x[t] / p : x[t] * p;
        }
        for (int i = 0; i < n_prompt + n_out; i++) mark[i < n_prompt ? prompt[i] : out[i - n_prompt]] = 0;
    }
    if (!isnan(r->freq) || !isnan(r->pres)) {
        const float f = isnan(r->freq) ? 0.0f : (float)r->freq, q = isnan(r->pres) ? 0.0f : (float)r->pres;
        for (int i = 0; i < n_out; i++) count[out[i]]++;
        for (int i = 0; i < n_out; i++) {
            const int32_t t = out[i];
            if (!count[t]) continue;
            x[t] = x[t] - f * (float)count[t];
            x[t] = x[t] - q;
            count[t] = 0;
        }
    }
    for (int32_t i = 1; i < V; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* r (one choice, seed + `seed_add`) run alone on this process's scheduler. */
static void lib_run(lib_env *L, const areq *r, int seed_add, lib_res *out) {
    moe8_request q = moe8_request_default();
    const int32_t V = L->n_vocab;
    float *x = malloc((size_t)V * sizeof *x);
    unsigned char *mark = calloc((size_t)V, 1);
    int *count = calloc((size_t)V, sizeof *count);
    int64_t id;
    moe8_error e;
    out->n = out->n_plp = out->own_bad = 0;
    out->lp_err = 0;
    out->text.n = 0;
    buf_add(&out->text, "", 0);
    out->n_prompt = lib_prompt(L, r, out->prompt, 2048);
    q.prompt = out->prompt;
    q.n_prompt = out->n_prompt;
    q.max_tokens = r->max_tokens;
    q.sampling = moe8_sampler_params_default();
    q.sampling.temperature = (float)r->temp;
    if (r->seed >= 0) q.sampling.seed = (uint64_t)r->seed + (uint64_t)seed_add;
    q.logprobs = r->logprobs < 0 ? 0 : r->logprobs;
    if (r->echo && r->logprobs >= 0) q.n_prompt_logits = out->n_prompt;
    q.bias_ids = r->bias_ids;
    q.bias = r->bias;
    q.n_bias = r->n_bias;
    q.min_tokens = r->min_tokens;
    if (!isnan(r->rep)) q.repetition_penalty = (float)r->rep;
    if (!isnan(r->freq)) q.frequency_penalty = (float)r->freq;
    if (!isnan(r->pres)) q.presence_penalty = (float)r->pres;
    q.ignore_eos = r->ignore_eos;
    q.grammar = r->grammar;
    q.grammar_after = r->grammar_after;
    CHECKF(moe8_sched_add(L->sched, &q, &id, &e) == MOE8_OK, "library: %s", e.message);
    for (int guard = 0; moe8_sched_pending(L->sched) > 0 && guard < 100000; guard++) {
        const moe8_event *ev;
        int32_t n;
        if (moe8_sched_step(L->sched, &ev, &n, &e) != MOE8_OK) abort();
        for (int32_t k = 0; k < n; k++) {
            const moe8_event *v = &ev[k];
            buf_add(&out->text, v->text ? v->text : "", v->text_len);
            if (v->type == MOE8_EVENT_FINISH) {
                out->finish = v->finish;
            } else if (v->type == MOE8_EVENT_PROMPT_LOGITS) {
                out->n_plp++;
                if (v->pos + 1 < out->n_prompt && v->pos < MAXP) {
                    double d = lp_checked(v->pos) ? fabs(own_logprob(v->logits, V, out->prompt[v->pos + 1]) - v->logprob) : 0;
                    out->plp[v->pos] = v->logprob;
                    out->n_ptop[v->pos] = v->n_top;
                    memcpy(out->ptop[v->pos], v->top, (size_t)v->n_top * sizeof *v->top);
                    out->lp_err = d > out->lp_err ? d : out->lp_err;
                }
            } else if (out->n < MAXT) {
                double d = lp_checked(out->n) ? fabs(own_logprob(v->logits, V, v->token) - v->logprob) : 0;
                out->lp_err = d > out->lp_err ? d : out->lp_err;
                if (out->watch > 0) {
                    float mx = -INFINITY;
                    for (int32_t t = 0; t < V; t++)
                        if (t != out->watch && v->logits[t] > mx) mx = v->logits[t];
                    if (out->n == 0 || mx - v->logits[out->watch] > out->watch_margin)
                        out->watch_margin = mx - v->logits[out->watch];
                }
                if (r->temp == 0 &&
                    own_pick(v->logits, V, r, out->prompt, out->n_prompt, out->tok, out->n, x, mark, count) !=
                        v->token)
                    out->own_bad++;
                if (out->n == 0) {
                    if (!out->logits0) out->logits0 = malloc((size_t)V * sizeof *out->logits0);
                    memcpy(out->logits0, v->logits, (size_t)V * sizeof *out->logits0);
                }
                out->tok[out->n] = v->token;
                out->lp[out->n] = v->logprob;
                out->n_top[out->n] = v->n_top;
                if (v->n_top) memcpy(out->top[out->n], v->top, (size_t)v->n_top * sizeof *v->top);
                out->tlen[out->n] = (int)v->text_len;
                out->n++;
            }
        }
    }
    free(x);
    free(mark);
    free(count);
}

static const char *finish_name(moe8_finish f) {
    return f == MOE8_FINISH_STOP ? "stop" : f == MOE8_FINISH_LENGTH || f == MOE8_FINISH_CONTEXT ? "length" : "abort";
}

static int same_tokens(const lib_res *a, const lib_res *b) {
    return a->n == b->n && !memcmp(a->tok, b->tok, (size_t)a->n * sizeof *a->tok);
}

/* ---- the server's log-prob entries against token ids ------------------------------------------ */


static size_t token_shown(lib_env *L, int32_t id, buf *out) {
    size_t nb = 0;
    const char *b = moe8_tokenizer_token_bytes(L->tok, id, &nb, NULL);
    utf8_shown((const unsigned char *)(b ? b : ""), b ? nb : 0, out);
    return b ? nb : 0;
}

static int lp_equal(const cJSON *v, float lp) {
    return cJSON_IsNumber(v) && (float)v->valuedouble == lp && fabs(v->valuedouble - lp) <= 1e-6;
}

/* entries[from + i] (take_logprobs' entries: completions {token, logprob, top,
 * text_offset}, chat {token, logprob, bytes, top_logprobs}) against tok[i],
 * lp[i] and the alternatives top[i][0..n_top[i]) for i < n: the first index
 * that differs, or -1. */
static int entries_diff(lib_env *L, const cJSON *ents, int from, int n, int chat, const int32_t *tok,
                        const float *lp, const int *n_top, const moe8_logprob (*top)[MOE8_MAX_LOGPROBS]) {
    buf a = {0}, b = {0};
    int bad = -1;
    for (int i = 0; i < n && bad < 0; i++) {
        const cJSON *e = cJSON_GetArrayItem(ents, from + i);
        const cJSON *t = chat ? J(e, "top_logprobs") : J(e, "top");
        token_shown(L, tok[i], &a);
        if (!e || !jstr(e, "token") || strcmp(jstr(e, "token"), buf_s(&a)) || !lp_equal(J(e, "logprob"), lp[i])) {
            bad = i;
            break;
        }
        if (chat) {
            if (cJSON_GetArraySize(t) != n_top[i]) bad = i;
            for (int k = 0; k < n_top[i] && bad < 0; k++) {
                const cJSON *x = cJSON_GetArrayItem(t, k);
                token_shown(L, top[i][k].token, &a);
                if (!jstr(x, "token") || strcmp(jstr(x, "token"), buf_s(&a)) || !lp_equal(J(x, "logprob"), top[i][k].logprob))
                    bad = i;
            }
        } else { /* a dict by shown text: the first (best) of equal texts */
            int distinct = 0;
            for (int k = 0; k < n_top[i] && bad < 0; k++) {
                int first = 1;
                token_shown(L, top[i][k].token, &a);
                for (int q = 0; q < k && first; q++) {
                    token_shown(L, top[i][q].token, &b);
                    first = strcmp(buf_s(&a), buf_s(&b)) != 0;
                }
                if (!first) continue;
                distinct++;
                if (!lp_equal(J(t, buf_s(&a)), top[i][k].logprob)) bad = i;
            }
            if (cJSON_GetArraySize(t) != distinct) bad = i;
        }
    }
    buf_free(&a);
    buf_free(&b);
    return bad;
}

/* A one-choice answer (whole or streamed) equals the library's run of r. */
static void check_vs_lib(lib_env *L, const char *what, const areq *r, const result *res, const lib_res *ref) {
    int n_ent = cJSON_GetArraySize(res->lp), bad;
    CHECKF(res->text.n == ref->text.n && !memcmp(buf_s(&res->text), buf_s(&ref->text), res->text.n),
           "%s: text '%s', the library's '%s'", what, buf_s(&res->text), buf_s(&ref->text));
    CHECKF(!strcmp(res->finish, finish_name(ref->finish)), "%s: finish '%s', the library's '%s'", what, res->finish,
           finish_name(ref->finish));
    if (!r->stream || r->usage)
        CHECKF(res->has_usage && res->prompt_tokens == ref->n_prompt && res->completion_tokens == ref->n,
               "%s: usage %d+%d, the library %d+%d", what, res->prompt_tokens, res->completion_tokens,
               ref->n_prompt, ref->n);
    if (r->logprobs >= 0) {
        CHECKF(n_ent == ref->n, "%s: %d log-prob entries for the library's %d tokens", what, n_ent, ref->n);
        bad = entries_diff(L, res->lp, 0, ref->n < n_ent ? ref->n : n_ent, r->chat, ref->tok, ref->lp, ref->n_top,
                           (const moe8_logprob(*)[MOE8_MAX_LOGPROBS])ref->top);
        if (bad >= 0) {
            char *s = cJSON_PrintUnformatted(cJSON_GetArrayItem(res->lp, bad));
            CHECKF(0, "%s: token %d: server %s, the library id %d lp %.9g", what, bad, s, ref->tok[bad], ref->lp[bad]);
            free(s);
        }
    }
    CHECKF(ref->lp_err < 1e-4, "%s: the library's log-probs are %.3g from the raw logits' log-softmax", what,
           ref->lp_err);
    if (r->temp == 0)
        CHECKF(ref->own_bad == 0, "%s: %d greedy tokens of the library are not the arg-max of the processed logits",
               what, ref->own_bad);
}

/* Send r and compare with the library (returns the library's run, kept). */
static void case_vs_lib(server *sv, lib_env *L, const char *what, const areq *r, lib_res *ref) {
    result res;
    lib_run(L, r, 0, ref);
    if (run_areq(sv, r, &res)) check_vs_lib(L, what, r, &res, ref);
    else fprintf(stderr, "  case: %s\n", what);
    result_free(&res);
}

/* ---- 1. the logits processors ------------------------------------------------------------------ */

/* The id of the k-th largest of x[0..V) (k < 8; ties: the lower id first). */
static int32_t rank_id(const float *x, int32_t V, int k) {
    int32_t best[8];
    int n = 0;
    for (int32_t i = 0; i < V; i++) {
        int j;
        if (n == k + 1 && !(x[i] > x[best[k]])) continue;
        j = n < k + 1 ? n++ : k; /* grow, or replace the last */
        while (j > 0 && x[i] > x[best[j - 1]]) {
            best[j] = best[j - 1];
            j--;
        }
        best[j] = i;
    }
    return best[k];
}

/* A penalty case where the penalty changes the output: a bias that makes the
 * runner-up token win the first draw by `margin` (so it repeats), and the
 * penalty's value, from small bounded lists; 1 when one was found. */
static int sensitive_case(lib_env *L, const areq *base, int kind, areq *out, lib_res *with, lib_res *without) {
    static const double margins[] = {0.5, 1.0, 2.0, 4.0, 8.0};
    static const double values[3][2] = {{2.0, 1.0}, {1.5, 0.7}, {2.0, 1.3}}; /* presence, frequency, repetition */
    lib_res *probe = lib_res_new();
    int32_t y, top;
    int found = 0;
    lib_run(L, base, 0, probe);
    if (!probe->logits0) {
        lib_res_free(probe);
        return 0;
    }
    top = rank_id(probe->logits0, L->n_vocab, 0);
    y = rank_id(probe->logits0, L->n_vocab, 1);
    for (size_t m = 0; m < sizeof margins / sizeof *margins && !found; m++) {
        for (int v = 0; v < 2 && !found; v++) {
            areq r = *base;
            r.n_bias = 1;
            r.bias_ids[0] = y;
            r.bias[0] = (float)(probe->logits0[top] - probe->logits0[y] + margins[m]);
            lib_run(L, &r, 0, without);
            if (kind == 0) r.pres = values[0][v];
            else if (kind == 1) r.freq = values[1][v];
            else r.rep = values[2][v];
            lib_run(L, &r, 0, with);
            if (!same_tokens(with, without)) {
                *out = r;
                found = 1;
            }
        }
    }
    lib_res_free(probe);
    return found;
}

static void test_processors(server *sv, lib_env *L) {
    static const char *kinds[3] = {"presence_penalty", "frequency_penalty", "repetition_penalty"};
    const int n_tok = g_asan ? 6 : 16;
    lib_res *ref = lib_res_new(), *alt = lib_res_new();
    areq base = areq_default();
    int32_t x_tok = 9707; /* "Hello" */
    base.text = "In the beginning there was";
    base.max_tokens = n_tok;
    base.logprobs = 1;
    lib_run(L, &base, 0, ref);
    if (ref->n < 1) {
        CHECKF(0, "the plain greedy run made no token");
        goto done;
    }
    if (ref->tok[0] == x_tok) x_tok = 9906;
    for (int seeded = 0; seeded < 2; seeded++) {
        areq r = base;
        char what[160];
        result res;
        if (seeded) r.temp = 1.0, r.seed = 77;
        /* +100 forces a token at every draw; its log-prob stays the model's raw one */
        r.n_bias = 1, r.bias_ids[0] = x_tok, r.bias[0] = 100;
        snprintf(what, sizeof what, "logit_bias +100, %s", seeded ? "seeded" : "greedy");
        case_vs_lib(sv, L, what, &r, alt);
        {
            int all = alt->n == n_tok;
            for (int i = 0; i < alt->n; i++) all &= alt->tok[i] == x_tok;
            CHECKF(all && alt->lp[0] < -1, "%s: %d tokens, not all %d, or a log-prob %.3g near 0 (processed)", what,
                   alt->n, x_tok, alt->n ? alt->lp[0] : 0);
        }
        /* -100 bans the plain run's first token */
        r = base;
        if (seeded) r.temp = 1.0, r.seed = 77;
        lib_run(L, &r, 0, alt);
        r.n_bias = 1, r.bias_ids[0] = alt->tok[0], r.bias[0] = -100;
        snprintf(what, sizeof what, "logit_bias -100 on the first token, %s", seeded ? "seeded" : "greedy");
        {
            const int32_t banned = alt->tok[0];
            case_vs_lib(sv, L, what, &r, alt);
            CHECKF(alt->n > 0 && alt->tok[0] != banned, "%s: the first token is still %d", what, banned);
        }
        /* min_tokens with eos lifted: none before min_tokens, then eos */
        r = base;
        if (seeded) r.temp = 1.0, r.seed = 77;
        r.n_bias = 1, r.bias_ids[0] = IM_END, r.bias[0] = 100, r.logprobs = 0;
        memset(&res, 0, sizeof res);
        if (run_areq(sv, &r, &res))
            CHECKF(res.completion_tokens == 0 && !strcmp(res.finish, "stop"), "eos +100 without min_tokens: %d tokens, %s",
                   res.completion_tokens, res.finish);
        result_free(&res);
        r.min_tokens = 5;
        snprintf(what, sizeof what, "min_tokens 5, eos +100, %s", seeded ? "seeded" : "greedy");
        case_vs_lib(sv, L, what, &r, alt);
        CHECKF(alt->n == 5 && alt->finish == MOE8_FINISH_STOP, "%s: %d tokens, finish %s", what, alt->n,
               finish_name(alt->finish));
        /* each penalty, where it changes the output */
        for (int k = 0; k < 3; k++) {
            areq p = base, b = base;
            if (seeded) b.temp = 1.0, b.seed = 77;
            snprintf(what, sizeof what, "%s, %s", kinds[k], seeded ? "seeded" : "greedy");
            if (!sensitive_case(L, &b, k, &p, ref, alt)) {
                CHECKF(0, "%s: no bias and value in the lists makes the penalty change the fixture's output", what);
                continue;
            }
            case_vs_lib(sv, L, what, &p, alt);
            if (k == 0 && !seeded) { /* streamed too */
                p.stream = 1, p.usage = 1;
                snprintf(what, sizeof what, "%s, greedy, streamed", kinds[k]);
                case_vs_lib(sv, L, what, &p, alt);
            }
        }
        /* presence counts a token once however often it came: a bias that keeps y 3
         * ahead of every other token along its own repetition keeps it there under
         * presence 2 (a penalty growing with the count would drop it) */
        if (!seeded) {
            const int32_t y = rank_id(ref->logits0, L->n_vocab, 3); /* the raw first-draw logits */
            int all = 1;
            r = base;
            r.n_bias = 1, r.bias_ids[0] = y, r.bias[0] = 100;
            alt->watch = y;
            lib_run(L, &r, 0, alt);
            alt->watch = 0;
            r.bias[0] = alt->watch_margin + 3, r.pres = 2;
            case_vs_lib(sv, L, "presence_penalty 2 beside a bias that keeps a token ahead by 3", &r, alt);
            for (int i = 0; i < alt->n; i++) all &= alt->tok[i] == y;
            CHECKF(all && alt->n == n_tok, "presence_penalty 2, bias %.3g on %d: %d tokens, not all %d", r.bias[0], y,
                   alt->n, y);
        }
        /* everything at once */
        r = base;
        if (seeded) r.temp = 1.0, r.seed = 77;
        r.n_bias = 2, r.bias_ids[0] = x_tok, r.bias[0] = 3, r.bias_ids[1] = IM_END, r.bias[1] = 4;
        r.min_tokens = 3, r.pres = 0.5, r.freq = 0.3, r.rep = 1.2, r.logprobs = 3;
        snprintf(what, sizeof what, "all processors, %s", seeded ? "seeded" : "greedy");
        case_vs_lib(sv, L, what, &r, alt);
        r.chat = 1, r.text = "Tell me about penalties";
        snprintf(what, sizeof what, "all processors, chat, %s", seeded ? "seeded" : "greedy");
        case_vs_lib(sv, L, what, &r, alt);
    }
    {
        const bad_case T[] = {
            {"POST", CMPL, "{\"prompt\":\"hi\",\"presence_penalty\":3}", 0, 400, INV, "presence_penalty", NULL, "'presence_penalty' must be in [-2, 2]"},
            {"POST", CHAT, "{" MSG ",\"frequency_penalty\":-2.5}", 0, 400, INV, "frequency_penalty", NULL, "'frequency_penalty' must be in [-2, 2]"},
            {"POST", CMPL, "{\"prompt\":\"hi\",\"repetition_penalty\":0}", 0, 400, INV, "repetition_penalty", NULL, "'repetition_penalty' must be in (0"},
            {"POST", CMPL, "{\"prompt\":\"hi\",\"repetition_penalty\":\"x\"}", 0, 400, INV, "repetition_penalty", NULL, "'repetition_penalty'"},
            {"POST", CMPL, "{\"prompt\":\"hi\",\"logit_bias\":{\"abc\":5}}", 0, 400, INV, "logit_bias", NULL, "key 'abc'"},
            {"POST", CHAT, "{" MSG ",\"logit_bias\":{\"151669\":1}}", 0, 400, INV, "logit_bias", NULL, "[0, 151669)"},
            {"POST", CMPL, "{\"prompt\":\"hi\",\"logit_bias\":{\"5\":101}}", 0, 400, INV, "logit_bias", NULL, "[-100, 100]"},
            {"POST", CMPL, "{\"prompt\":\"hi\",\"logit_bias\":[1,2]}", 0, 400, INV, "logit_bias", NULL, "'logit_bias' must be an object"},
            {"POST", CMPL, "{\"prompt\":\"hi\",\"max_tokens\":8,\"min_tokens\":9}", 0, 400, INV, "min_tokens", NULL, "'min_tokens' (9)"},
            {"POST", CMPL, "{\"prompt\":\"hi\",\"min_tokens\":-1}", 0, 400, INV, "min_tokens", NULL, "'min_tokens'"},
        };
        for (size_t i = 0; i < sizeof T / sizeof *T; i++) check_bad(sv, &T[i], NULL);
    }
done:
    lib_res_free(ref);
    lib_res_free(alt);
}

/* ---- 2. n ------------------------------------------------------------------------------------- */

/* An answer with n choices: res[i] per index (text, log-prob entries,
 * finish); usage into *pt / *ct (-1: none). Streams: each chunk one choice
 * (chat: its first chunk the role), no chunk of a choice after its finish,
 * the usage chunk after every finish, one [DONE] at the end. */
static int parse_n(result *res, int n, int chat, int stream, int include_usage, const char *body, int *pt, int *ct) {
    const char *object = chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    int seen[16] = {0}, finished[16] = {0}, done = 0, usage = 0;
    char id[64] = "";
    *pt = *ct = -1;
    for (int i = 0; i < n; i++) memset(&res[i], 0, sizeof res[i]);
    if (!stream) {
        cJSON *o = cJSON_Parse(body);
        int ok = o && envelope_ok(o, object, NULL) && cJSON_GetArraySize(J(o, "choices")) == n;
        for (int i = 0; ok && i < n; i++) {
            const cJSON *c = cJSON_GetArrayItem(J(o, "choices"), i);
            const char *t = chat ? jstr(J(c, "message"), "content") : jstr(c, "text");
            ok = cJSON_IsNumber(J(c, "index")) && J(c, "index")->valueint == i && t && jstr(c, "finish_reason") &&
                 take_logprobs(&res[i], chat, J(c, "logprobs"));
            if (ok) buf_str(&res[i].text, t), snprintf(res[i].finish, sizeof res[i].finish, "%s", jstr(c, "finish_reason"));
        }
        if (ok && take_usage(&res[0], J(o, "usage"))) *pt = res[0].prompt_tokens, *ct = res[0].completion_tokens;
        else ok = 0;
        cJSON_Delete(o);
        if (!ok) FAILR("n = %d: bad answer: %.600s", n, body);
        return 1;
    }
    for (const char *p = body; *p;) {
        const char *end = strstr(p, "\n\n");
        cJSON *o;
        const cJSON *ch, *c;
        int idx;
        if (done) FAILR("bytes after [DONE]: '%.40s'", p);
        if (strncmp(p, "data: ", 6) || !end) FAILR("not an SSE event: '%.60s'", p);
        if (end - p == 12 && !strncmp(p + 6, "[DONE]", 6)) {
            done = 1;
            p = end + 2;
            continue;
        }
        if (!(o = cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6)))) FAILR("not JSON: '%.80s'", p);
        if (!envelope_ok(o, object, id[0] ? id : NULL)) {
            cJSON_Delete(o);
            return 0;
        }
        snprintf(id, sizeof id, "%s", jstr(o, "id"));
        ch = J(o, "choices");
        if (cJSON_IsArray(ch) && cJSON_GetArraySize(ch) == 0) { /* the usage chunk */
            int all = 1;
            for (int i = 0; i < n; i++) all &= finished[i];
            if (!include_usage || usage || !all || !take_usage(&res[0], J(o, "usage"))) {
                cJSON_Delete(o);
                FAILR("a usage chunk out of place: '%.200s'", p);
            }
            usage = 1, *pt = res[0].prompt_tokens, *ct = res[0].completion_tokens;
            cJSON_Delete(o);
            p = end + 2;
            continue;
        }
        c = cJSON_GetArrayItem(ch, 0);
        idx = cJSON_IsNumber(J(c, "index")) ? J(c, "index")->valueint : -1;
        if (cJSON_GetArraySize(ch) != 1 || idx < 0 || idx >= n || finished[idx] || J(o, "usage") || usage) {
            cJSON_Delete(o);
            FAILR("a chunk out of place: '%.200s'", p);
        }
        if (chat) {
            const cJSON *d = J(c, "delta");
            const char *role = jstr(d, "role");
            if (!cJSON_IsObject(d) || !seen[idx] != (role && !strcmp(role, "assistant")) || (seen[idx] && role)) {
                cJSON_Delete(o);
                FAILR("choice %d: role wrong: '%.200s'", idx, p);
            }
            if (jstr(d, "content")) buf_str(&res[idx].text, jstr(d, "content"));
        } else if (jstr(c, "text")) {
            buf_str(&res[idx].text, jstr(c, "text"));
        } else {
            cJSON_Delete(o);
            FAILR("no text: '%.200s'", p);
        }
        seen[idx] = 1;
        if (!take_logprobs(&res[idx], chat, J(c, "logprobs"))) {
            cJSON_Delete(o);
            return 0;
        }
        if (jstr(c, "finish_reason")) {
            finished[idx] = 1;
            snprintf(res[idx].finish, sizeof res[idx].finish, "%s", jstr(c, "finish_reason"));
        }
        cJSON_Delete(o);
        p = end + 2;
    }
    for (int i = 0; i < n; i++)
        if (!finished[i]) FAILR("choice %d has no finish", i);
    if (!done) FAILR("no [DONE]");
    if (include_usage != usage) FAILR("usage chunk %d, include_usage %d", usage, include_usage);
    return 1;
}

static int same_entries(const result *a, const result *b) {
    return (!a->lp && !b->lp) || cJSON_Compare(a->lp, b->lp, 1);
}

static void test_n(server *sv, lib_env *L) {
    static char prompt[1024];
    const int n = 3, n_tok = g_asan ? 3 : 6;
    lib_res *ref = lib_res_new();
    areq r = areq_default();
    result single[3], multi[3];
    int32_t ids[2048];
    int n_prompt;
    snprintf(prompt, sizeof prompt, "Choices: %s%s%s%s", "The quick brown fox jumps over the lazy dog and keeps running. ",
             "A second sentence follows the first one closely. ", "Then a third comes along with more words. ",
             "And a fourth ends the list.");
    r.text = prompt;
    n_prompt = lib_prompt(L, &r, ids, 2048);
    if (n_prompt % MOE8_KV_BLOCK_TOKENS == 0) { /* a partial last block, whatever the tokenizer does */
        strcat(prompt, " Ok");
        n_prompt = lib_prompt(L, &r, ids, 2048);
    }
    CHECKF(n_prompt >= 40 && n_prompt % MOE8_KV_BLOCK_TOKENS, "the n prompt has %d tokens", n_prompt);
    r.max_tokens = n_tok, r.temp = 1.0, r.seed = 11, r.logprobs = 1, r.n = n;
    for (int chat = 0; chat < 2; chat++) {
        r.chat = chat;
        if (chat) r.text = "Give me three different answers, please.";
        for (int mode = 0; mode < 3; mode++) { /* whole, stream, stream + usage */
            char *body;
            buf out = {0};
            int pt = -1, ct = -1, sum = 0, prompt_tokens = -1;
            double hits0 = metric(sv, "moe8:prefix_cache_hits_total", NULL), hits;
            r.n = n, r.stream = mode > 0, r.usage = mode == 2;
            body = json_text(areq_json(&r));
            CHECKF(post(sv, areq_path(&r), body, &out) == 200, "n = 3: %s", buf_s(&out));
            hits = metric(sv, "moe8:prefix_cache_hits_total", NULL);
            if (!parse_n(multi, n, chat, r.stream, r.usage, buf_s(&out), &pt, &ct)) {
                fprintf(stderr, "  request: %s\n", body);
                free(body);
                buf_free(&out);
                continue;
            }
            /* the first time this prompt is seen: the other two choices take its whole blocks */
            if (mode == 0 && !chat) {
                const double want = 2.0 * MOE8_KV_BLOCK_TOKENS * ((n_prompt - 1) / MOE8_KV_BLOCK_TOKENS);
                CHECKF(hits - hits0 >= want, "n = 3 on %d prompt tokens: prefix cache hits grew by %g, want >= %g",
                       n_prompt, hits - hits0, want);
            }
            for (int i = 0; i < n; i++) {
                areq one = r;
                one.n = 1, one.stream = 0, one.seed = r.seed + i;
                if (!run_areq(sv, &one, &single[i])) continue;
                CHECKF(!strcmp(buf_s(&multi[i].text), buf_s(&single[i].text)) && same_entries(&multi[i], &single[i]) &&
                       !strcmp(multi[i].finish, single[i].finish),
                       "%s n = 3 %s: choice %d '%s' (%s), seed + %d alone '%s' (%s)", chat ? "chat" : "completion",
                       mode == 0 ? "whole" : "stream", i, buf_s(&multi[i].text), multi[i].finish, i,
                       buf_s(&single[i].text), single[i].finish);
                sum += single[i].completion_tokens;
                prompt_tokens = single[i].prompt_tokens;
                if (mode == 0) { /* and the library's run with seed + i */
                    lib_run(L, &r, i, ref);
                    {
                        char what[96];
                        areq q1 = one;
                        snprintf(what, sizeof what, "%s n = 3, choice %d", chat ? "chat" : "completion", i);
                        q1.stream = 1, q1.usage = 0; /* a choice has no usage of its own */
                        check_vs_lib(L, what, &q1, &multi[i], ref);
                    }
                }
                result_free(&single[i]);
            }
            if (mode != 1)
                CHECKF(pt == prompt_tokens && ct == sum, "n = 3 usage %d + %d, want %d once + the sum %d", pt, ct,
                       prompt_tokens, sum);
            else
                CHECKF(pt < 0, "a stream without include_usage has usage");
            for (int i = 0; i < n; i++) result_free(&multi[i]);
            free(body);
            buf_free(&out);
        }
    }
    /* no seed: a fresh one each time */
    {
        areq u = areq_default();
        result a, b;
        u.text = "Pick some random words:", u.temp = 1.0, u.max_tokens = 24, u.ignore_eos = 1;
        if (run_areq(sv, &u, &a) && run_areq(sv, &u, &b))
            CHECKF(strcmp(buf_s(&a.text), buf_s(&b.text)), "two unseeded answers are the same: '%s'", buf_s(&a.text));
        result_free(&a);
        result_free(&b);
    }
    lib_res_free(ref);
}

/* ---- 3. echo ---------------------------------------------------------------------------------- */

static void test_echo(server *sv, lib_env *L) {
    const char *prompt = "The quick brown fox jumps over the lazy dog";
    lib_res *ref = lib_res_new();
    cJSON *whole_lp = NULL;
    for (int k = 0; k < 4; k++) { /* logprobs 2 whole, streamed; max_tokens 0; no logprobs */
        areq r = areq_default();
        result res;
        char what[64];
        r.text = prompt, r.echo = 1, r.max_tokens = k == 2 ? 0 : 5, r.logprobs = k == 3 ? -1 : k == 2 ? 1 : 2;
        r.stream = k == 1, r.usage = k == 1;
        snprintf(what, sizeof what, "echo, %s", k == 0 ? "logprobs 2" : k == 1 ? "logprobs 2, streamed"
                                                : k == 2 ? "max_tokens 0" : "no logprobs");
        lib_run(L, &r, 0, ref);
        if (!run_areq(sv, &r, &res)) {
            result_free(&res);
            continue;
        }
        CHECKF(res.text.n == strlen(prompt) + ref->text.n && !memcmp(res.text.p, prompt, strlen(prompt)) &&
               !memcmp(res.text.p + strlen(prompt), buf_s(&ref->text), ref->text.n),
               "%s: text '%s', want the prompt + '%s'", what, buf_s(&res.text), buf_s(&ref->text));
        CHECKF(res.has_usage && res.prompt_tokens == ref->n_prompt && res.completion_tokens == ref->n &&
               !strcmp(res.finish, finish_name(ref->finish)), "%s: usage %d+%d, finish %s; the library %d+%d %s", what,
               res.prompt_tokens, res.completion_tokens, res.finish, ref->n_prompt, ref->n, finish_name(ref->finish));
        if (r.logprobs < 0) {
            CHECKF(res.lp == NULL, "%s: log-probs not asked for", what);
            result_free(&res);
            continue;
        }
        {
            const int np = ref->n_prompt, n_ent = cJSON_GetArraySize(res.lp);
            const cJSON *e0 = cJSON_GetArrayItem(res.lp, 0);
            buf t = {0};
            int bad, off = 0, offs_ok = 1;
            CHECKF(np > 2 && np < MAXP && ref->n_plp == np, "%s: %d prompt tokens, %d PROMPT_LOGITS events", what, np,
                   ref->n_plp);
            CHECKF(n_ent == np + ref->n, "%s: %d entries for %d prompt + %d tokens", what, n_ent, np, ref->n);
            token_shown(L, ref->prompt[0], &t);
            CHECKF(e0 && jstr(e0, "token") && !strcmp(jstr(e0, "token"), buf_s(&t)) && cJSON_IsNull(J(e0, "logprob")) &&
                   cJSON_IsNull(J(e0, "top")), "%s: the first prompt token's entry is not {token, null}", what);
            /* entry p (p >= 1): prompt[p] scored by the logits at p - 1 */
            bad = entries_diff(L, res.lp, 1, np - 1, 0, ref->prompt + 1, ref->plp, ref->n_ptop,
                               (const moe8_logprob(*)[MOE8_MAX_LOGPROBS])ref->ptop);
            CHECKF(bad < 0, "%s: the entry of prompt token %d differs from PROMPT_LOGITS at %d", what, bad + 1, bad);
            bad = entries_diff(L, res.lp, np, ref->n, 0, ref->tok, ref->lp, ref->n_top,
                               (const moe8_logprob(*)[MOE8_MAX_LOGPROBS])ref->top);
            CHECKF(bad < 0, "%s: generated token %d differs from the library's", what, bad);
            CHECKF(ref->lp_err < 1e-4, "%s: the library's prompt log-probs are %.3g from the raw log-softmax", what,
                   ref->lp_err);
            /* offsets: the prompt tokens' bytes before, from 0; then the prompt's length
             * plus the completion text released before */
            for (int i = 0; i < n_ent && i < np + ref->n; i++) {
                const cJSON *o = J(cJSON_GetArrayItem(res.lp, i), "text_offset");
                offs_ok &= cJSON_IsNumber(o) && o->valueint == off;
                off += i < np ? (int)token_shown(L, ref->prompt[i], &t) : ref->tlen[i - np];
                if (i == np - 1) offs_ok &= off == (int)strlen(prompt);
            }
            CHECKF(offs_ok, "%s: text_offset does not follow the token bytes", what);
            buf_free(&t);
        }
        if (k == 0) whole_lp = cJSON_Duplicate(res.lp, 1);
        if (k == 1)
            CHECKF(cJSON_Compare(whole_lp, res.lp, 1), "echo: streamed log-probs differ from the whole answer's");
        result_free(&res);
    }
    cJSON_Delete(whole_lp);
    lib_res_free(ref);
}

/* ---- 4. structured outputs -------------------------------------------------------------------- */

static size_t utf8_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* v against the JSON Schema subset the tests use: type (string, integer,
 * number, boolean, object, array), enum, const, minLength / maxLength (code
 * points), minimum / maximum, properties, required, additionalProperties
 * false, items, minItems / maxItems. 1 when valid; else why. */
static int validate(const cJSON *sc, const cJSON *v, const char *path, char *why, size_t cap) {
    const cJSON *t = J(sc, "type"), *en = J(sc, "enum"), *cst = J(sc, "const"), *k;
    const char *ty = cJSON_IsString(t) ? t->valuestring : NULL;
    char sub[256];
#define BAD(...) return snprintf(why, cap, __VA_ARGS__), 0
    if (en) {
        int hit = 0;
        cJSON_ArrayForEach(k, en) hit |= cJSON_Compare(k, v, 1);
        if (!hit) BAD("%s: not one of the enum", path);
    }
    if (cst && !cJSON_Compare(cst, v, 1)) BAD("%s: not the const", path);
    if (!ty) return 1;
    if (!strcmp(ty, "string")) {
        size_t n;
        if (!cJSON_IsString(v)) BAD("%s: not a string", path);
        n = utf8_chars(v->valuestring);
        if (J(sc, "minLength") && n < (size_t)J(sc, "minLength")->valueint) BAD("%s: %zu characters < minLength", path, n);
        if (J(sc, "maxLength") && n > (size_t)J(sc, "maxLength")->valueint) BAD("%s: %zu characters > maxLength", path, n);
    } else if (!strcmp(ty, "integer") || !strcmp(ty, "number")) {
        if (!cJSON_IsNumber(v)) BAD("%s: not a number", path);
        if (ty[0] == 'i' && v->valuedouble != floor(v->valuedouble)) BAD("%s: %g is not an integer", path, v->valuedouble);
        if (J(sc, "minimum") && v->valuedouble < J(sc, "minimum")->valuedouble) BAD("%s: %g < minimum", path, v->valuedouble);
        if (J(sc, "maximum") && v->valuedouble > J(sc, "maximum")->valuedouble) BAD("%s: %g > maximum", path, v->valuedouble);
    } else if (!strcmp(ty, "boolean")) {
        if (!cJSON_IsBool(v)) BAD("%s: not a boolean", path);
    } else if (!strcmp(ty, "object")) {
        const cJSON *props = J(sc, "properties");
        if (!cJSON_IsObject(v)) BAD("%s: not an object", path);
        cJSON_ArrayForEach(k, J(sc, "required")) if (!J(v, k->valuestring)) BAD("%s: no '%s'", path, k->valuestring);
        cJSON_ArrayForEach(k, v) {
            const cJSON *ps = J(props, k->string);
            if (!ps) {
                if (cJSON_IsFalse(J(sc, "additionalProperties"))) BAD("%s: key '%s' not allowed", path, k->string);
                continue;
            }
            snprintf(sub, sizeof sub, "%s/%s", path, k->string);
            if (!validate(ps, k, sub, why, cap)) return 0;
        }
    } else if (!strcmp(ty, "array")) {
        int n = cJSON_GetArraySize(v), i = 0;
        if (!cJSON_IsArray(v)) BAD("%s: not an array", path);
        if (J(sc, "minItems") && n < J(sc, "minItems")->valueint) BAD("%s: %d items < minItems", path, n);
        if (J(sc, "maxItems") && n > J(sc, "maxItems")->valueint) BAD("%s: %d items > maxItems", path, n);
        cJSON_ArrayForEach(k, v) {
            snprintf(sub, sizeof sub, "%s/%d", path, i++);
            if (J(sc, "items") && !validate(J(sc, "items"), k, sub, why, cap)) return 0;
        }
    } else {
        BAD("%s: the validator does not know type '%s'", path, ty);
    }
    return 1;
#undef BAD
}

/* text as one JSON value, nothing but whitespace after it, valid against sc. */
static int json_validates(const char *text, const cJSON *sc, char *why, size_t cap) {
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithOpts(text, &end, 1);
    int ok;
    if (!v) return snprintf(why, cap, "not JSON (near '%.30s')", end ? end : ""), 0;
    ok = validate(sc, v, "", why, cap);
    cJSON_Delete(v);
    return ok;
}

static const char RECORD_SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":8},"
    "\"code\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":4},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120},"
    "\"delta\":{\"type\":\"integer\",\"minimum\":-50,\"maximum\":50},"
    "\"color\":{\"enum\":[\"red\",\"green\",\"blue\"]},"
    "\"size\":{\"type\":\"string\",\"enum\":[\"S\",\"M\",\"L\"]},"
    "\"ok\":{\"type\":\"boolean\"},"
    "\"flag\":{\"type\":\"boolean\"},"
    "\"kind\":{\"const\":\"v1\"},"
    "\"nested\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":9},"
    "\"label\":{\"type\":\"string\",\"maxLength\":5}},\"required\":[\"x\",\"label\"],\"additionalProperties\":false},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":4},\"maxItems\":3},"
    "\"nums\":{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99},\"minItems\":1,\"maxItems\":4},"
    "\"note\":{\"type\":\"string\",\"maxLength\":6}},"
    "\"required\":[\"name\",\"code\",\"age\",\"delta\",\"color\",\"size\",\"ok\",\"flag\",\"kind\",\"nested\",\"tags\",\"nums\"],"
    "\"additionalProperties\":false}";

/* A constrained request: chat or completion, seeded at temperature 1. */
static cJSON *constrained_body(int chat, long long seed, int max_tokens, const char *rf_type, const char *schema,
                               const char *grammar) {
    areq r = areq_default();
    cJSON *o;
    r.chat = chat, r.text = chat ? "Describe a record as JSON." : "A record as JSON:", r.temp = 1.0, r.seed = seed;
    r.max_tokens = max_tokens;
    o = areq_json(&r);
    if (rf_type) {
        cJSON *rf = cJSON_AddObjectToObject(o, "response_format");
        cJSON_AddStringToObject(rf, "type", rf_type);
        if (schema) {
            cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
            cJSON_AddStringToObject(js, "name", "record");
            cJSON_AddItemToObject(js, "schema", cJSON_Parse(schema));
            cJSON_AddBoolToObject(js, "strict", 1);
        }
    }
    if (grammar) cJSON_AddStringToObject(o, "grammar", grammar);
    return o;
}

static int32_t one_token(lib_env *L, const char *text) {
    int32_t ids[4];
    size_t n = 0;
    if (moe8_tokenize(L->tok, text, strlen(text), ids, 4, &n, NULL) != MOE8_OK || n != 1) abort();
    return ids[0];
}

static void test_structured(server *sv, lib_env *L) {
    const int n_schema = g_asan ? 3 : 20;
    cJSON *sc = cJSON_Parse(RECORD_SCHEMA);
    int n_valid = 0, n_stop = 0;
    /* json_schema: every answer parses and validates */
    for (int i = 0; i < n_schema; i++) {
        const int chat = i % 2;
        char *body = json_text(constrained_body(chat, 100 + i, 500, "json_schema", RECORD_SCHEMA, NULL));
        result res;
        char why[300] = "";
        buf out = {0};
        memset(&res, 0, sizeof res);
        if (post(sv, chat ? CHAT : CMPL, body, &out) == 200 && parse_whole(&res, chat, buf_s(&out))) {
            int valid = json_validates(buf_s(&res.text), sc, why, sizeof why);
            n_valid += valid, n_stop += !strcmp(res.finish, "stop");
            if (!valid || strcmp(res.finish, "stop"))
                fprintf(stderr, "  json_schema seed %d (%s): finish %s, %s: %s\n", 100 + i, chat ? "chat" : "completion",
                        res.finish, why, buf_s(&res.text));
        } else {
            fprintf(stderr, "  json_schema seed %d: %s\n", 100 + i, buf_s(&out));
        }
        result_free(&res);
        buf_free(&out);
        free(body);
    }
    CHECKF(n_valid == n_schema && n_stop == n_schema, "json_schema: %d of %d valid, %d finished 'stop'", n_valid,
           n_schema, n_stop);
    printf("test_serve_api: json_schema with 13 fields: %d of %d answers valid\n", n_valid, n_schema);
    /* json_object: with '}', '"' and eos lifted the answer is a short object (without the
     * grammar the first token would be one of those) */
    {
        const int32_t close = one_token(L, "}"), quote = one_token(L, "\"");
        for (int i = 0; i < (g_asan ? 2 : 6); i++) {
            cJSON *o = constrained_body(i % 2, 200 + i, 200, "json_object", NULL, NULL), *lb;
            char *body, key[16];
            result res;
            buf out = {0};
            const char *end = NULL;
            cJSON *v;
            lb = cJSON_AddObjectToObject(o, "logit_bias");
            snprintf(key, sizeof key, "%d", close);
            cJSON_AddNumberToObject(lb, key, 100);
            snprintf(key, sizeof key, "%d", quote);
            cJSON_AddNumberToObject(lb, key, 100);
            snprintf(key, sizeof key, "%d", IM_END);
            cJSON_AddNumberToObject(lb, key, 100);
            body = json_text(o);
            memset(&res, 0, sizeof res);
            if (post(sv, i % 2 ? CHAT : CMPL, body, &out) == 200 && parse_whole(&res, i % 2, buf_s(&out))) {
                v = cJSON_ParseWithOpts(buf_s(&res.text), &end, 1);
                CHECKF(v && cJSON_IsObject(v) && !strcmp(res.finish, "stop"), "json_object seed %d: finish %s, '%s'",
                       200 + i, res.finish, buf_s(&res.text));
                cJSON_Delete(v);
            } else {
                CHECKF(0, "json_object: %s", buf_s(&out));
            }
            result_free(&res);
            buf_free(&out);
            free(body);
        }
    }
    /* GBNF: exactly one of the alternatives */
    for (int i = 0; i < (g_asan ? 2 : 6); i++) {
        char *body = json_text(constrained_body(0, 300 + i, 20, NULL, NULL, "root ::= \"yes\" | \"no\""));
        result res;
        buf out = {0};
        memset(&res, 0, sizeof res);
        CHECKF(post(sv, CMPL, body, &out) == 200 && parse_whole(&res, 0, buf_s(&out)) &&
               (!strcmp(buf_s(&res.text), "yes") || !strcmp(buf_s(&res.text), "no")) && !strcmp(res.finish, "stop"),
               "grammar yes|no: '%s' (%s): %s", buf_s(&res.text), res.finish, buf_s(&out));
        result_free(&res);
        buf_free(&out);
        free(body);
    }
    {
        const bad_case T[] = {
            {"POST", CMPL, "{\"prompt\":\"hi\",\"grammar\":\"root ::= a\\na ::= [0-9\"}", 0, 400, INV, "grammar", NULL, "line 2 col"},
            {"POST", CMPL, "{\"prompt\":\"hi\",\"grammar\":\"root ::= \\\"yes\"}", 0, 400, INV, "grammar", NULL, "line 1 col"},
            {"POST", CHAT, "{" MSG ",\"grammar\":5}", 0, 400, INV, "grammar", NULL, "'grammar' must be a string"},
            {"POST", CMPL, "{\"prompt\":\"hi\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
             "\"schema\":{\"type\":\"object\",\"properties\":{\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]+$\"}}}}}}", 0, 400,
             INV, "response_format.json_schema.schema", NULL, "'pattern' at /properties/zip"},
            {"POST", CHAT, "{" MSG ",\"grammar\":\"root ::= \\\"a\\\"\",\"response_format\":{\"type\":\"json_schema\","
             "\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"object\"}}}}", 0, 400, INV, "grammar", NULL, "both constrain"},
            {"POST", CMPL, "{\"prompt\":\"hi\",\"response_format\":{\"type\":\"xml\"}}", 0, 400, INV, "response_format.type", NULL, "'response_format.type'"},
            {"POST", CMPL, "{\"prompt\":\"hi\",\"response_format\":{\"type\":\"json_schema\"}}", 0, 400, INV, "response_format.json_schema", NULL, "must be an object"},
        };
        for (size_t i = 0; i < sizeof T / sizeof *T; i++) check_bad(sv, &T[i], NULL);
    }
    cJSON_Delete(sc);
}

/* Batch invariance: constrained and penalised requests beside plain ones,
 * each equal to itself alone. */
static void test_batch(server *sv) {
    const int n_c = g_asan ? 3 : 8, n_p = g_asan ? 6 : 24, n = n_c + n_p;
    mreq *m = calloc((size_t)n, sizeof *m);
    int n_same = 0;
    for (int i = 0; i < n; i++) {
        if (i < n_c) {
            cJSON *o;
            cJSON *lb;
            const int chat = i % 2;
            if (i % 4 == 0) o = constrained_body(chat, 400 + i, 300, "json_schema", RECORD_SCHEMA, NULL);
            else if (i % 4 == 1) o = constrained_body(chat, 400 + i, 40, NULL, NULL, "root ::= (\"ab\" | \"c\")+ \"!\"");
            else o = constrained_body(chat, 400 + i, 24, NULL, NULL, NULL);
            cJSON_AddNumberToObject(o, "presence_penalty", 0.7);
            cJSON_AddNumberToObject(o, "frequency_penalty", 0.4);
            cJSON_AddNumberToObject(o, "repetition_penalty", 1.3);
            cJSON_AddNumberToObject(o, "min_tokens", 2);
            cJSON_AddNumberToObject(o, "logprobs", 0); /* a number: completions; chat below */
            if (chat) {
                cJSON_DeleteItemFromObject(o, "logprobs");
                cJSON_AddBoolToObject(o, "logprobs", 1);
                cJSON_AddNumberToObject(o, "top_logprobs", 2);
            }
            lb = cJSON_AddObjectToObject(o, "logit_bias");
            cJSON_AddNumberToObject(lb, "9707", 2.5);
            cJSON_AddNumberToObject(lb, "151645", -3);
            if (i >= 4) cJSON_AddBoolToObject(o, "stream", 1);
            m[i].path = chat ? CHAT : CMPL;
            m[i].body = json_text(o);
        } else {
            rq r = rq_default();
            test_rng g = {0xA24BAED4963EE407ull * (unsigned long long)(i + 1)};
            r.chat = i % 3 == 0;
            r.text = r.chat ? "Say something plain." : "A plain completion of some words";
            r.max_tokens = 1 + (int)(test_rng_u64(&g) % (g_asan ? 5 : 20));
            if (i % 2) r.temp = 0.9, r.seed = 500 + i;
            r.stream = i % 4 < 2;
            r.usage = r.stream;
            r.ignore_eos = 1;
            if (i % 5 == 0) r.logprobs = 1;
            m[i].path = rq_path(&r);
            m[i].body = rq_body(&r);
        }
    }
    multi_run(sv, m, n);
    for (int i = 0; i < n; i++) {
        result a, b;
        buf alone = {0};
        const int chat = strstr(m[i].path, "chat") != NULL, stream = strstr(m[i].body, "\"stream\":true") != NULL,
                  usage = strstr(m[i].body, "include_usage") != NULL;
        long st = post(sv, m[i].path, m[i].body, &alone);
        int ok;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        ok = m[i].status == 200 && st == 200 &&
             (stream ? parse_stream(&a, chat, usage, buf_s(&m[i].out)) : parse_whole(&a, chat, buf_s(&m[i].out))) &&
             (stream ? parse_stream(&b, chat, usage, buf_s(&alone)) : parse_whole(&b, chat, buf_s(&alone)));
        if (ok && a.norm.n == b.norm.n && !memcmp(a.norm.p, b.norm.p, a.norm.n)) n_same++;
        else fprintf(stderr, "  batch request %d: %s\n  together: %.600s\n  alone: %.600s\n", i, m[i].body,
                     buf_s(&m[i].out), buf_s(&alone));
        result_free(&a);
        result_free(&b);
        buf_free(&alone);
        buf_free(&m[i].out);
        free(m[i].body);
    }
    CHECKF(n_same == n, "%d of %d requests (%d constrained and penalised) equal themselves alone", n_same, n, n_c);
    free(m);
}

/* ---- 5. tool calling -------------------------------------------------------------------------- */

static const char WEATHER_PARAMS[] =
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":10},"
    "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7},\"unit\":{\"type\":\"string\",\"enum\":[\"C\",\"F\"]}},"
    "\"required\":[\"city\",\"days\",\"unit\"],\"additionalProperties\":false}";
static const char LOOKUP_PARAMS[] =
    "{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\",\"maxLength\":6},"
    "\"n\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":3}},\"required\":[\"q\"],\"additionalProperties\":false}";

static cJSON *tools_array(int both) {
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; k < (both ? 2 : 1); k++) {
        cJSON *t = cJSON_CreateObject(), *f;
        cJSON_AddStringToObject(t, "type", "function");
        f = cJSON_AddObjectToObject(t, "function");
        cJSON_AddStringToObject(f, "name", k ? "lookup" : "get_weather");
        cJSON_AddStringToObject(f, "description", k ? "Look a word up" : "The weather of a city");
        cJSON_AddItemToObject(f, "parameters", cJSON_Parse(k ? LOOKUP_PARAMS : WEATHER_PARAMS));
        cJSON_AddItemToArray(a, t);
    }
    return a;
}

/* choice: "required", "none", "auto", a function name, or NULL (not sent);
 * parallel -1: not sent. */
static cJSON *tool_body(int both, const char *choice, int parallel, long long seed, int stream, int max_tokens) {
    cJSON *o = cJSON_CreateObject(), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", NAME);
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", "What is the weather in Paris?");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "messages"), m);
    cJSON_AddItemToObject(o, "tools", tools_array(both));
    if (choice && (!strcmp(choice, "required") || !strcmp(choice, "none") || !strcmp(choice, "auto"))) {
        cJSON_AddStringToObject(o, "tool_choice", choice);
    } else if (choice) {
        cJSON *c = cJSON_AddObjectToObject(o, "tool_choice");
        cJSON_AddStringToObject(c, "type", "function");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(c, "function"), "name", choice);
    }
    if (parallel >= 0) cJSON_AddBoolToObject(o, "parallel_tool_calls", parallel);
    cJSON_AddNumberToObject(o, "max_tokens", max_tokens);
    cJSON_AddNumberToObject(o, "temperature", 1);
    cJSON_AddNumberToObject(o, "seed", (double)seed);
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(o, "chat_template_kwargs"), "enable_thinking", 0);
    if (stream) cJSON_AddBoolToObject(o, "stream", 1);
    return o;
}

typedef struct {
    int n;
    char id[16][40], name[16][40];
    buf args[16];
    char finish[16];
    int content_null;   /* whole: message.content is null */
    buf content;
    int prompt_tokens;
} calls;

static void calls_free(calls *c) {
    for (int i = 0; i < 16; i++) buf_free(&c->args[i]);
    buf_free(&c->content);
    memset(c, 0, sizeof *c);
}

static int parse_calls_whole(const char *body, calls *c) {
    cJSON *o = cJSON_Parse(body);
    const cJSON *ch = cJSON_GetArrayItem(J(o, "choices"), 0), *m = J(ch, "message"), *tc, *k;
    int ok = o && envelope_ok(o, "chat.completion", NULL) && cJSON_GetArraySize(J(o, "choices")) == 1 &&
             jstr(m, "role") && !strcmp(jstr(m, "role"), "assistant") && jstr(ch, "finish_reason") &&
             J(J(o, "usage"), "prompt_tokens");
    memset(c, 0, sizeof *c);
    if (ok) {
        snprintf(c->finish, sizeof c->finish, "%s", jstr(ch, "finish_reason"));
        c->content_null = cJSON_IsNull(J(m, "content"));
        if (jstr(m, "content")) buf_str(&c->content, jstr(m, "content"));
        c->prompt_tokens = J(J(o, "usage"), "prompt_tokens")->valueint;
        tc = J(m, "tool_calls");
        cJSON_ArrayForEach(k, tc) {
            const cJSON *f = J(k, "function");
            if (c->n == 16 || !jstr(k, "id") || !jstr(k, "type") || strcmp(jstr(k, "type"), "function") ||
                !jstr(f, "name") || !jstr(f, "arguments") || J(k, "index")) {
                ok = 0;
                break;
            }
            snprintf(c->id[c->n], sizeof c->id[0], "%s", jstr(k, "id"));
            snprintf(c->name[c->n], sizeof c->name[0], "%s", jstr(f, "name"));
            buf_str(&c->args[c->n], jstr(f, "arguments"));
            c->n++;
        }
    }
    cJSON_Delete(o);
    if (!ok) FAILR("bad tool-call answer: %.600s", body);
    return 1;
}

/* A stream's tool_calls deltas joined: per call its index, id, type and name
 * first (arguments ""), then only arguments pieces of the newest call. */
static int parse_calls_stream(const char *body, calls *c) {
    const char *p = body;
    int n_ev = 0, done = 0;
    char id[64] = "";
    memset(c, 0, sizeof *c);
    while (*p) {
        const char *end = strstr(p, "\n\n");
        cJSON *o;
        const cJSON *ch, *d, *k;
        if (done || strncmp(p, "data: ", 6) || !end) FAILR("bad SSE framing at '%.60s'", p);
        if (end - p == 12 && !strncmp(p + 6, "[DONE]", 6)) {
            done = 1;
            p = end + 2;
            continue;
        }
        o = cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6));
        if (!o || !envelope_ok(o, "chat.completion.chunk", n_ev ? id : NULL)) {
            cJSON_Delete(o);
            FAILR("bad chunk '%.200s'", p);
        }
        snprintf(id, sizeof id, "%s", jstr(o, "id"));
        ch = cJSON_GetArrayItem(J(o, "choices"), 0);
        d = J(ch, "delta");
        if ((n_ev == 0) != (jstr(d, "role") != NULL) || c->finish[0]) {
            cJSON_Delete(o);
            FAILR("chunk %d out of order: '%.200s'", n_ev, p);
        }
        if (jstr(d, "content")) buf_str(&c->content, jstr(d, "content"));
        cJSON_ArrayForEach(k, J(d, "tool_calls")) {
            const cJSON *f = J(k, "function");
            const int idx = cJSON_IsNumber(J(k, "index")) ? J(k, "index")->valueint : -1;
            int ok;
            if (idx == c->n && c->n < 16) { /* a new call */
                ok = jstr(k, "id") && jstr(k, "type") && !strcmp(jstr(k, "type"), "function") && jstr(f, "name") &&
                     jstr(f, "arguments") && !jstr(f, "arguments")[0];
                if (ok) {
                    snprintf(c->id[c->n], sizeof c->id[0], "%s", jstr(k, "id"));
                    snprintf(c->name[c->n], sizeof c->name[0], "%s", jstr(f, "name"));
                    buf_str(&c->args[c->n], "");
                    c->n++;
                }
            } else {
                ok = idx == c->n - 1 && idx >= 0 && !J(k, "id") && !J(k, "type") && !J(f, "name") && jstr(f, "arguments");
                if (ok) buf_str(&c->args[idx], jstr(f, "arguments"));
            }
            if (!ok) {
                cJSON_Delete(o);
                FAILR("a tool_calls delta out of order: '%.300s'", p);
            }
        }
        if (jstr(ch, "finish_reason")) snprintf(c->finish, sizeof c->finish, "%s", jstr(ch, "finish_reason"));
        cJSON_Delete(o);
        n_ev++;
        p = end + 2;
    }
    if (!done || !c->finish[0]) FAILR("the stream has no finish or no [DONE]");
    return 1;
}

static int call_id_ok(const char *id) {
    if (strlen(id) != 29 || strncmp(id, "call_", 5)) return 0;
    for (int i = 5; i < 29; i++)
        if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') || (id[i] >= '0' && id[i] <= '9'))) return 0;
    return 1;
}

/* The calls of a constrained answer: finish tool_calls, each to `want` (NULL:
 * either tool), its id well-formed and unique, its arguments valid. */
static void check_calls(const char *what, const calls *c, const char *want, int one) {
    cJSON *ws = cJSON_Parse(WEATHER_PARAMS), *ls = cJSON_Parse(LOOKUP_PARAMS);
    CHECKF(!strcmp(c->finish, "tool_calls") && c->n >= 1 && (!one || c->n == 1) && c->content.n == 0,
           "%s: finish %s, %d calls, content '%s'", what, c->finish, c->n, buf_s(&c->content));
    for (int i = 0; i < c->n; i++) {
        char why[300] = "";
        const int lookup = !strcmp(c->name[i], "lookup");
        int uniq = 1;
        for (int k = 0; k < i; k++) uniq &= strcmp(c->id[k], c->id[i]) != 0;
        CHECKF(call_id_ok(c->id[i]) && uniq, "%s: call %d id '%s'", what, i, c->id[i]);
        CHECKF(want ? !strcmp(c->name[i], want) : lookup || !strcmp(c->name[i], "get_weather"), "%s: call %d to '%s'",
               what, i, c->name[i]);
        CHECKF(json_validates(buf_s(&c->args[i]), lookup ? ls : ws, why, sizeof why), "%s: call %d arguments '%s': %s",
               what, i, buf_s(&c->args[i]), why);
    }
    cJSON_Delete(ws);
    cJSON_Delete(ls);
}

static int tokenize_count(server *sv, const char *body) {
    buf out = {0};
    cJSON *o;
    int n = -1;
    if (post(sv, "/tokenize", body, &out) == 200 && (o = cJSON_Parse(buf_s(&out)))) {
        if (cJSON_IsNumber(J(o, "count"))) n = J(o, "count")->valueint;
        cJSON_Delete(o);
    }
    CHECKF(n > 0, "/tokenize %.200s: %s", body, buf_s(&out));
    buf_free(&out);
    return n;
}

/* The fixture model's folder (the server's -m), for `moe8 tokenize -m`. */
static const char *g_model_dir;

/* `moe8 tokenize --messages` on a request's messages (the CLI through the
 * library's normalisation) gives /tokenize's ids for the same messages
 * (neither with tools: the CLI reads messages only), and its rendering
 * holds the assistant's calls, <tool_call> blocks with their arguments. */
static void check_cli_messages(server *sv, const char *what, const cJSON *msgs, int gen, const cJSON *kw) {
    char path[4200], outp[4200], cmd[12000], kwarg[2100] = "";
    char *mj = cJSON_PrintUnformatted(msgs), *bs;
    cJSON *body = cJSON_CreateObject(), *ans;
    size_t n = 0;
    unsigned char *got = NULL;
    buf out = {0}, ids = {0};
    snprintf(path, sizeof path, "%s/api_cli_msgs.json", MOE8_TEST_TMP);
    snprintf(outp, sizeof outp, "%s/api_cli_out.txt", MOE8_TEST_TMP);
    test_write_file(path, mj, strlen(mj));
    if (cJSON_IsObject(kw)) {
        char *k = cJSON_PrintUnformatted(kw);
        snprintf(kwarg, sizeof kwarg, " --template-kwargs '%s'", k);
        free(k);
    }
    cJSON_AddItemToObject(body, "messages", cJSON_Duplicate(msgs, 1));
    cJSON_AddBoolToObject(body, "add_generation_prompt", gen);
    if (cJSON_IsObject(kw)) cJSON_AddItemToObject(body, "chat_template_kwargs", cJSON_Duplicate(kw, 1));
    bs = json_text(body);
    if (post(sv, "/tokenize", bs, &out) == 200 && (ans = cJSON_Parse(buf_s(&out)))) {
        const cJSON *t;
        cJSON_ArrayForEach(t, J(ans, "tokens")) {
            char num[24];
            snprintf(num, sizeof num, ids.n ? " %d" : "%d", t->valueint);
            buf_str(&ids, num);
        }
        buf_str(&ids, "\n");
        cJSON_Delete(ans);
    }
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' --messages '%s'%s%s >'%s' 2>&1", MOE8_CLI, g_model_dir,
             path, gen ? " --add-generation-prompt" : "", kwarg, outp);
    CHECKF(test_run(cmd) == 0 && (got = test_slurp(outp, &n)) && ids.n && !strcmp((char *)got, buf_s(&ids)),
           "tool history '%s': moe8 tokenize --messages gives [%.300s], /tokenize [%.300s]", what,
           got ? (char *)got : "-", buf_s(&ids));
    free(got);
    got = NULL;
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' --messages '%s'%s%s --render >'%s' 2>&1", MOE8_CLI,
             g_model_dir, path, gen ? " --add-generation-prompt" : "", kwarg, outp);
    CHECKF(test_run(cmd) == 0 && (got = test_slurp(outp, &n)) && strstr((char *)got, "<tool_call>\n{\"name\": \"") &&
           strstr((char *)got, "\"arguments\": {"), "tool history '%s': moe8 tokenize --messages --render drops "
           "the calls: %.400s", what, got ? (char *)got : "-");
    free(got);
    free(mj);
    free(bs);
    buf_free(&out);
    buf_free(&ids);
}

static void test_tools(server *sv, lib_env *L) {
    static const struct { int both; const char *choice; int parallel; const char *want; int one; } C[] = {
        {0, "required", -1, "get_weather", 0},
        {1, "required", -1, NULL, 0},
        {0, "required", 0, "get_weather", 1},
        {1, "lookup", -1, "lookup", 0},
        {1, "get_weather", 0, "get_weather", 1},
    };
    const int n_seeds = g_asan ? 1 : 3;
    for (size_t ci = 0; ci < sizeof C / sizeof *C; ci++) {
        if (g_asan && !C[ci].one) continue; /* ASan (-O0): one call per answer, one seed */
        for (int s = 0; s < n_seeds - !C[ci].one; s++) { /* answers of several calls: one seed fewer */
            char what[160];
            calls w, st;
            buf out = {0};
            char *body = json_text(tool_body(C[ci].both, C[ci].choice, C[ci].parallel, 20 + s, 0, 700));
            snprintf(what, sizeof what, "tool_choice %s, %d tools, parallel_tool_calls %d, seed %d", C[ci].choice,
                     C[ci].both + 1, C[ci].parallel, 20 + s);
            memset(&w, 0, sizeof w);
            memset(&st, 0, sizeof st);
            if (post(sv, CHAT, body, &out) == 200 && parse_calls_whole(buf_s(&out), &w)) {
                check_calls(what, &w, C[ci].want, C[ci].one);
                CHECKF(w.content_null, "%s: content is not null beside the calls", what);
            } else {
                CHECKF(0, "%s: %s", what, buf_s(&out));
            }
            free(body);
            /* streamed, the same seed: the deltas joined are the same calls */
            body = json_text(tool_body(C[ci].both, C[ci].choice, C[ci].parallel, 20 + s, 1, 700));
            if (post(sv, CHAT, body, &out) == 200 && parse_calls_stream(buf_s(&out), &st)) {
                int same = st.n == w.n && !strcmp(st.finish, w.finish);
                for (int i = 0; same && i < w.n; i++)
                    same = !strcmp(st.name[i], w.name[i]) && !strcmp(buf_s(&st.args[i]), buf_s(&w.args[i]));
                CHECKF(same, "%s, streamed: %d calls (%s), whole %d (%s); first args '%s' vs '%s'", what, st.n, st.finish,
                       w.n, w.finish, st.n ? buf_s(&st.args[0]) : "", w.n ? buf_s(&w.args[0]) : "");
                for (int i = 0; i < st.n; i++) CHECKF(call_id_ok(st.id[i]), "%s, streamed: id '%s'", what, st.id[i]);
            } else {
                CHECKF(0, "%s, streamed: %.600s", what, buf_s(&out));
            }
            free(body);
            calls_free(&w);
            calls_free(&st);
            buf_free(&out);
        }
    }
    /* none and auto: the tools are in the prompt (as /tokenize renders it) */
    {
        cJSON *t = tool_body(1, NULL, -1, 1, 0, 4), *plain;
        char *with, *without;
        int n_with, n_without;
        cJSON_DeleteItemFromObject(t, "max_tokens");
        cJSON_DeleteItemFromObject(t, "temperature");
        cJSON_DeleteItemFromObject(t, "seed");
        cJSON_DeleteItemFromObject(t, "model");
        plain = cJSON_Duplicate(t, 1);
        cJSON_DeleteItemFromObject(plain, "tools");
        with = json_text(t);
        without = json_text(plain);
        n_with = tokenize_count(sv, with);
        n_without = tokenize_count(sv, without);
        CHECKF(n_with > n_without + 50, "/tokenize with tools %d tokens, without %d", n_with, n_without);
        for (int k = 0; k < 2; k++) {
            char *body = json_text(tool_body(1, k ? "auto" : "none", -1, 3, 0, 6));
            buf out = {0};
            calls c;
            memset(&c, 0, sizeof c);
            if (post(sv, CHAT, body, &out) == 200 && parse_calls_whole(buf_s(&out), &c))
                CHECKF(c.prompt_tokens == n_with && (k || (c.n == 0 && !c.content_null)),
                       "tool_choice %s: prompt_tokens %d, /tokenize %d; %d calls", k ? "auto" : "none", c.prompt_tokens,
                       n_with, c.n);
            else
                CHECKF(0, "tool_choice %s: %s", k ? "auto" : "none", buf_s(&out));
            calls_free(&c);
            buf_free(&out);
            free(body);
        }
        free(with);
        free(without);
    }
    /* the 400s */
    {
        char *named = json_text(tool_body(0, "nope", -1, 1, 0, 8)), *req;
        cJSON *o = tool_body(0, "required", -1, 1, 0, 8);
        cJSON_DeleteItemFromObject(o, "tools");
        req = json_text(o);
        {
            const bad_case T[] = {
                {"POST", CHAT, named, 0, 400, INV, "tool_choice", NULL, "'nope', which is not in 'tools'"},
                {"POST", CHAT, req, 0, 400, INV, "tool_choice", NULL, "needs 'tools'"},
                {"POST", CHAT, "{" MSG ",\"tool_choice\":\"sometimes\",\"tools\":[{\"type\":\"function\",\"function\":"
                 "{\"name\":\"f\"}}]}", 0, 400, INV, "tool_choice", NULL, "'tool_choice' must be"},
                {"POST", CHAT, "{" MSG ",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\",\"function\":"
                 "{\"name\":\"f\"}}],\"response_format\":{\"type\":\"json_object\"}}", 0, 400, INV, "tool_choice", NULL,
                 "both constrain"},
            };
            for (size_t i = 0; i < sizeof T / sizeof *T; i++) check_bad(sv, &T[i], NULL);
        }
        free(named);
        free(req);
    }
    /* a tool-call history: what jinja2 renders with Qwen3's template (tool_goldens.json) */
    {
        char path[4200];
        size_t n = 0;
        unsigned char *txt;
        cJSON *g, *ch;
        int n_checked = 0;
        snprintf(path, sizeof path, "%s/tests/data/jinja/tool_goldens.json", MOE8_SOURCE_DIR);
        txt = test_slurp(path, &n);
        g = txt ? cJSON_Parse((char *)txt) : NULL;
        CHECKF(g != NULL, "cannot read %s", path);
        cJSON_ArrayForEach(ch, J(g, "chats")) {
            const char *tmpl = jstr(ch, "template"), *cs = jstr(ch, "case"), *want = jstr(ch, "output");
            const cJSON *cas = J(J(g, "cases"), cs ? cs : ""), *rq_ = J(cas, "request"), *kw = J(ch, "kwargs");
            cJSON *body;
            char *bs, *mj, *tj;
            static int32_t want_ids[8192];
            static char rendered[65536];
            size_t nw = 0, nr = 0;
            buf out = {0};
            cJSON *ans;
            int same = 0;
            if (!tmpl || strcmp(tmpl, "qwen3") || !want || !rq_ ||
                (strcmp(cs, "tool_call") && strcmp(cs, "parallel_calls") && strcmp(cs, "tool_call_answered")))
                continue;
            body = cJSON_CreateObject();
            cJSON_AddItemToObject(body, "messages", cJSON_Duplicate(J(rq_, "messages"), 1));
            if (J(rq_, "tools")) cJSON_AddItemToObject(body, "tools", cJSON_Duplicate(J(rq_, "tools"), 1));
            cJSON_AddBoolToObject(body, "add_generation_prompt", cJSON_IsTrue(J(ch, "add_generation_prompt")));
            if (cJSON_IsObject(kw)) cJSON_AddItemToObject(body, "chat_template_kwargs", cJSON_Duplicate(kw, 1));
            bs = json_text(body);
            CHECK(moe8_tokenize(L->tok, want, strlen(want), want_ids, 8192, &nw, NULL) == MOE8_OK);
            if (post(sv, "/tokenize", bs, &out) == 200 && (ans = cJSON_Parse(buf_s(&out)))) {
                const cJSON *t = J(ans, "tokens");
                same = cJSON_GetArraySize(t) == (int)nw;
                for (int i = 0; same && i < (int)nw; i++) same = cJSON_GetArrayItem(t, i)->valueint == want_ids[i];
                cJSON_Delete(ans);
            }
            CHECKF(same, "tool history '%s' (generation prompt %d, kwargs %s): /tokenize differs from jinja2's "
                   "rendering (%zu tokens): %.300s", cs, cJSON_IsTrue(J(ch, "add_generation_prompt")),
                   cJSON_IsObject(kw) ? "set" : "none", nw, buf_s(&out));
            check_cli_messages(sv, cs, J(rq_, "messages"), cJSON_IsTrue(J(ch, "add_generation_prompt")), kw);
            /* and the library renders the normalized conversation the file holds the same way */
            mj = cJSON_PrintUnformatted(J(cas, "messages"));
            tj = cJSON_IsArray(J(cas, "tools")) ? cJSON_PrintUnformatted(J(cas, "tools")) : NULL;
            {
                char *kj = cJSON_IsObject(kw) ? cJSON_PrintUnformatted(kw) : NULL;
                CHECKF(moe8_chat_apply_json(L->tok, mj, tj, NULL, cJSON_IsTrue(J(ch, "add_generation_prompt")), kj,
                                            rendered, sizeof rendered, &nr, NULL) == MOE8_OK &&
                       !strcmp(rendered, want), "moe8_chat_apply_json on '%s' differs from jinja2's", cs);
                free(kj);
            }
            free(mj);
            free(tj);
            free(bs);
            buf_free(&out);
            n_checked++;
        }
        CHECKF(n_checked == 9, "%d tool-history renderings checked, want 9", n_checked);
        cJSON_Delete(g);
        free(txt);
    }
}

/* parallel_tool_calls false where the output is not constrained to one call (tool_choice auto,
 * here with a GBNF grammar that writes two hermes calls): the request ends after the first
 * call (finish tool_calls, fewer tokens than the two calls take), and no stream shows the
 * second; with parallel calls on, both come. */
static void test_one_call(server *sv) {
    static const char two[] =
        "root ::= \"<tool_call>\\n{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": {\\\"city\\\": \\\"Paris\\\", "
        "\\\"days\\\": 2, \\\"unit\\\": \\\"C\\\"}}\\n</tool_call>\\n<tool_call>\\n{\\\"name\\\": \\\"lookup\\\", "
        "\\\"arguments\\\": {\\\"q\\\": \\\"rain\\\"}}\\n</tool_call>\"";
    int gen[2] = {0, 0};
    for (int parallel = 1; parallel >= 0; parallel--) {
        for (int stream = 0; stream < 2; stream++) {
            cJSON *o = tool_body(1, "auto", parallel, 7, stream, 200), *ans;
            char *body;
            buf out = {0};
            calls c;
            memset(&c, 0, sizeof c);
            cJSON_AddStringToObject(o, "grammar", two);
            body = json_text(o);
            if (post(sv, CHAT, body, &out) == 200 &&
                (stream ? parse_calls_stream(buf_s(&out), &c) : parse_calls_whole(buf_s(&out), &c))) {
                const int want = parallel ? 2 : 1;
                CHECKF(c.n == want && !strcmp(c.finish, "tool_calls") && !strcmp(c.name[0], "get_weather") &&
                       !strcmp(buf_s(&c.args[0]), "{\"city\": \"Paris\", \"days\": 2, \"unit\": \"C\"}") &&
                       (want == 1 || (!strcmp(c.name[1], "lookup") && !strcmp(buf_s(&c.args[1]), "{\"q\": \"rain\"}"))) &&
                       c.content.n == 0, "auto, parallel_tool_calls %d, stream %d: %d calls, finish %s, first '%s' %s, "
                       "content '%s'", parallel, stream, c.n, c.finish, c.name[0], buf_s(&c.args[0]), buf_s(&c.content));
                if (!parallel) CHECKF(!strstr(buf_s(&out), "lookup") && !strstr(buf_s(&out), "rain"),
                                      "parallel_tool_calls false, stream %d: the second call shows: %.600s", stream,
                                      buf_s(&out));
                if (!stream && (ans = cJSON_Parse(buf_s(&out)))) {
                    gen[parallel] = J(J(ans, "usage"), "completion_tokens") ? J(J(ans, "usage"), "completion_tokens")->valueint : 0;
                    cJSON_Delete(ans);
                }
            } else {
                CHECKF(0, "auto, parallel_tool_calls %d, stream %d: %.600s", parallel, stream, buf_s(&out));
            }
            calls_free(&c);
            buf_free(&out);
            free(body);
        }
    }
    CHECKF(gen[0] > 0 && gen[0] < gen[1], "parallel_tool_calls false: %d tokens generated, both calls take %d", gen[0],
           gen[1]);
    printf("test_serve_api: parallel_tool_calls false in auto: 1 call in %d tokens (the grammar's two take %d)\n", gen[0],
           gen[1]);
}

/* ---- 5b. thinking: the grammar starts after </think> ------------------------------------------- */

/* On the chain model (serve_test.h), whose chat answer is "<think>Let me think</think>Hello!" with
 * thinking on ("</think>" in three tokens) and " Hmm<think>Hello!" with it off, seeded at
 * temperature 1 (the chain's tokens lead by ~50):
 *   - thinking on, json_schema: reasoning_content "Let me think", as the unconstrained request
 *     with the same seed has it (nothing masked before </think>), then content that parses and
 *     validates; the whole text is the library's with grammar_after "</think>" (and not the
 *     library's without it, which is JSON from the first token); streamed the same;
 *   - a think block not closed within max_tokens: the unconstrained request's answer;
 *   - thinking off: the library's constrained run from the first token, as before;
 *   - tool_choice required with thinking on: the reasoning, then a valid call;
 *   - such requests beside plain ones equal themselves alone. */
static cJSON *think_body(int thinking, long long seed, int max_tokens, int json, int stream) {
    areq r = areq_default();
    cJSON *o;
    r.chat = 1, r.text = "Hi there", r.temp = 1.0, r.seed = seed, r.max_tokens = max_tokens, r.thinking = thinking;
    r.stream = stream;
    o = areq_json(&r);
    if (thinking < 0) cJSON_DeleteItemFromObject(o, "chat_template_kwargs"); /* the template's default: on */
    if (json) {
        cJSON *rf = cJSON_AddObjectToObject(o, "response_format"), *js;
        cJSON_AddStringToObject(rf, "type", "json_schema");
        js = cJSON_AddObjectToObject(rf, "json_schema");
        cJSON_AddStringToObject(js, "name", "record");
        cJSON_AddItemToObject(js, "schema", cJSON_Parse(RECORD_SCHEMA));
    }
    return o;
}

static int think_post(server *sv, cJSON *o, int stream, result *res) {
    char *body = json_text(o);
    buf out = {0};
    int ok;
    memset(res, 0, sizeof *res);
    ok = post(sv, CHAT, body, &out) == 200 &&
         (stream ? parse_stream(res, 1, 0, buf_s(&out)) : parse_whole(res, 1, buf_s(&out)));
    if (!ok) fprintf(stderr, "  request: %s\n  answer: %.1000s\n", body, buf_s(&out));
    free(body);
    buf_free(&out);
    return ok;
}

static void test_thinking(const char *chain) {
    const int n_seeds = g_asan ? 1 : 3;
    cJSON *sc = cJSON_Parse(RECORD_SCHEMA);
    moe8_grammar *g = NULL;
    lib_env L;
    lib_res *ref = lib_res_new();
    server sv;
    char args[4400];
    int n_ok = 0;
    lib_open(&L, chain, MOE8_DT_F16);
    CHECK(moe8_grammar_from_json_schema(RECORD_SCHEMA, strlen(RECORD_SCHEMA), &g, NULL) == MOE8_OK);
    snprintf(args, sizeof args, "-m '%s' --ctx-size 1024 --threads 2 --served-model-name " NAME, chain);
    if (server_start(&sv, "api_chain", NULL, args) != 0) goto out;
    for (int i = 0; i < n_seeds; i++) {
        const long long seed = 40 + i;
        result free_, whole, streamed;
        areq r = areq_default();
        char why[300] = "";
        buf want = {0};
        if (!think_post(&sv, think_body(-1, seed, 500, 0, 0), 0, &free_)) continue;
        if (!think_post(&sv, think_body(-1, seed, 500, 1, 0), 0, &whole)) {
            result_free(&free_);
            continue;
        }
        r.chat = 1, r.text = "Hi there", r.temp = 1.0, r.seed = seed, r.max_tokens = 500, r.thinking = 1;
        r.grammar = g, r.grammar_after = "</think>";
        lib_run(&L, &r, 0, ref);
        buf_str(&want, "<think>");
        buf_add(&want, whole.reason.p, whole.reason.n);
        buf_str(&want, "</think>");
        buf_add(&want, whole.text.p, whole.text.n);
        CHECKF(!strcmp(buf_s(&free_.reason), "Let me think") && !strcmp(buf_s(&free_.text), "Hello!"),
               "seed %lld unconstrained: reasoning '%s', content '%s'", seed, buf_s(&free_.reason), buf_s(&free_.text));
        CHECKF(!strcmp(buf_s(&whole.reason), buf_s(&free_.reason)), "seed %lld: reasoning '%s', unconstrained '%s'",
               seed, buf_s(&whole.reason), buf_s(&free_.reason));
        CHECKF(json_validates(buf_s(&whole.text), sc, why, sizeof why) && !strcmp(whole.finish, "stop"),
               "seed %lld, thinking on: content after </think> (%s): %s: '%s'", seed, whole.finish, why, buf_s(&whole.text));
        CHECKF(!strcmp(buf_s(&ref->text), buf_s(&want)) && whole.completion_tokens == ref->n,
               "seed %lld: the server's '%s' (%d tokens), the library's with grammar_after '%s' (%d)", seed,
               buf_s(&want), whole.completion_tokens, buf_s(&ref->text), ref->n);
        n_ok += !strcmp(buf_s(&whole.reason), "Let me think") && json_validates(buf_s(&whole.text), sc, why, sizeof why);
        if (think_post(&sv, think_body(-1, seed, 500, 1, 1), 1, &streamed))
            CHECKF(!strcmp(buf_s(&streamed.reason), buf_s(&whole.reason)) && !strcmp(buf_s(&streamed.text), buf_s(&whole.text)),
                   "seed %lld streamed: '%s' + '%s'", seed, buf_s(&streamed.reason), buf_s(&streamed.text));
        if (i == 0) { /* without grammar_after the library's answer is JSON from its first token */
            r.grammar_after = NULL;
            lib_run(&L, &r, 0, ref);
            CHECKF(buf_s(&ref->text)[0] == '{' && strcmp(buf_s(&ref->text), buf_s(&want)),
                   "the library without grammar_after: '%s'", buf_s(&ref->text));
        }
        result_free(&free_);
        result_free(&whole);
        result_free(&streamed);
        buf_free(&want);
    }
    CHECKF(n_ok == n_seeds, "thinking on, json_schema: %d of %d answers think, then validate", n_ok, n_seeds);
    /* a think block not closed within max_tokens (6: "</" "think" written, ">" not): the
     * unconstrained answer, to max_tokens */
    {
        result a, b;
        const int ok_a = think_post(&sv, think_body(-1, 60, 6, 1, 0), 0, &a),
                  ok_b = think_post(&sv, think_body(-1, 60, 6, 0, 0), 0, &b);
        if (ok_a && ok_b)
            CHECKF(!strcmp(buf_s(&a.reason), "Let me think</think") && !strcmp(buf_s(&b.reason), buf_s(&a.reason)) &&
                   a.text.n == 0 && b.text.n == 0 && !strcmp(a.finish, "length") && a.completion_tokens == 6,
                   "never closed: '%s' + '%s' (%s), unconstrained '%s' + '%s'", buf_s(&a.reason), buf_s(&a.text),
                   a.finish, buf_s(&b.reason), buf_s(&b.text));
        result_free(&a);
        result_free(&b);
    }
    /* thinking off: constrained from the first token, as the library without grammar_after */
    {
        result a;
        areq r = areq_default();
        char why[300] = "";
        r.chat = 1, r.text = "Hi there", r.temp = 1.0, r.seed = 61, r.max_tokens = 500, r.grammar = g;
        lib_run(&L, &r, 0, ref);
        if (think_post(&sv, think_body(0, 61, 500, 1, 0), 0, &a))
            CHECKF(!strcmp(buf_s(&a.text), buf_s(&ref->text)) && a.reason.n == 0 &&
                   json_validates(buf_s(&a.text), sc, why, sizeof why), "thinking off: '%s', the library's '%s' (%s)",
                   buf_s(&a.text), buf_s(&ref->text), why);
        result_free(&a);
    }
    /* tool_choice required with thinking on: the reasoning, then a valid call */
    {
        cJSON *o = tool_body(0, "required", -1, 62, 0, 700);
        char *body;
        buf out = {0};
        calls c;
        cJSON_DeleteItemFromObject(o, "chat_template_kwargs");
        body = json_text(o);
        if (post(&sv, CHAT, body, &out) == 200 && parse_calls_whole(buf_s(&out), &c)) {
            check_calls("tool_choice required, thinking on", &c, "get_weather", 0);
            CHECKF(strstr(buf_s(&out), "\"reasoning_content\":\"Let me think\""), "required, thinking on: %.600s",
                   buf_s(&out));
        } else {
            CHECKF(0, "required, thinking on: %.600s", buf_s(&out));
        }
        calls_free(&c);
        buf_free(&out);
        free(body);
    }
    /* batch invariance: 3 thinking json_schema requests among 6 plain ones */
    {
        mreq m[9];
        int n_same = 0;
        memset(m, 0, sizeof m);
        for (int i = 0; i < 9; i++) {
            m[i].path = CHAT;
            m[i].body = json_text(i < 3 ? think_body(-1, 70 + i, 500, 1, i == 1) : think_body(i % 2, 80 + i, 6 + i, 0, i % 3 == 0));
        }
        multi_run(&sv, m, 9);
        for (int i = 0; i < 9; i++) {
            result a, b;
            buf alone = {0};
            const int stream = strstr(m[i].body, "\"stream\":true") != NULL;
            memset(&a, 0, sizeof a);
            memset(&b, 0, sizeof b);
            if (m[i].status == 200 && post(&sv, CHAT, m[i].body, &alone) == 200 &&
                (stream ? parse_stream(&a, 1, 0, buf_s(&m[i].out)) : parse_whole(&a, 1, buf_s(&m[i].out))) &&
                (stream ? parse_stream(&b, 1, 0, buf_s(&alone)) : parse_whole(&b, 1, buf_s(&alone))) &&
                a.norm.n == b.norm.n && !memcmp(a.norm.p, b.norm.p, a.norm.n))
                n_same++;
            else
                fprintf(stderr, "  thinking batch %d: %s\n  together: %.600s\n  alone: %.600s\n", i, m[i].body,
                        buf_s(&m[i].out), buf_s(&alone));
            result_free(&a);
            result_free(&b);
            buf_free(&alone);
            buf_free(&m[i].out);
            free(m[i].body);
        }
        CHECKF(n_same == 9, "thinking batch: %d of 9 requests equal themselves alone", n_same);
    }
    printf("test_serve_api: thinking: %d json_schema answers reason freely then validate, as the library's "
           "grammar_after; never closed, thinking off, required tools, batch\n", n_ok);
    server_stop(&sv, 10);
out:
    moe8_grammar_free(g);
    lib_res_free(ref);
    lib_close(&L);
    cJSON_Delete(sc);
}

/* ---- 6. the field policy ---------------------------------------------------------------------- */

/* The prompt's token count of a chat request with `extra` fields. */
static int chat_prompt_tokens(server *sv, const char *extra) {
    char body[512];
    buf out = {0};
    cJSON *o;
    int n = -1;
    snprintf(body, sizeof body, "{%s,\"max_tokens\":1%s}", MSG, extra);
    if (post(sv, CHAT, body, &out) == 200 && (o = cJSON_Parse(buf_s(&out)))) {
        const cJSON *pt = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "prompt_tokens");
        if (cJSON_IsNumber(pt)) n = pt->valueint;
        cJSON_Delete(o);
    }
    buf_free(&out);
    return n;
}

/* reasoning_effort is Qwen3's thinking switch: "none" and "minimal" close the
 * think block in the prompt (enable_thinking false: "<think>\n\n</think>\n\n",
 * 4 tokens more), the other levels leave it to the model (the template's
 * default); chat_template_kwargs wins over it. */
static void test_reasoning_effort(server *sv) {
    const int base = chat_prompt_tokens(sv, ""), off = chat_prompt_tokens(sv, ",\"chat_template_kwargs\":"
                                                                           "{\"enable_thinking\":false}");
    static const struct { const char *extra; int closed; } E[] = {
        {",\"reasoning_effort\":\"none\"", 1}, {",\"reasoning_effort\":\"minimal\"", 1},
        {",\"reasoning_effort\":\"low\"", 0}, {",\"reasoning_effort\":\"medium\"", 0},
        {",\"reasoning_effort\":\"high\"", 0}, {",\"reasoning_effort\":\"xhigh\"", 0},
        {",\"reasoning_effort\":\"none\",\"chat_template_kwargs\":{\"enable_thinking\":true}", 0},
        {",\"reasoning_effort\":\"high\",\"chat_template_kwargs\":{\"enable_thinking\":false}", 1},
    };
    CHECKF(base > 0 && off == base + 4, "prompt tokens %d, with thinking off %d", base, off);
    for (size_t i = 0; i < sizeof E / sizeof *E; i++) {
        const int n = chat_prompt_tokens(sv, E[i].extra);
        CHECKF(n == (E[i].closed ? off : base), "%s: %d prompt tokens, want %d", E[i].extra, n,
               E[i].closed ? off : base);
    }
}

static int warnings(server *sv, const char *needle) {
    buf e = {0};
    int n = 0;
    read_text(sv->err, &e);
    for (const char *p = buf_s(&e); p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        const char *eol = strchr(p, '\n');
        size_t k = eol ? (size_t)(eol - p) : strlen(p);
        char line[600];
        snprintf(line, sizeof line, "%.*s", (int)(k < 599 ? k : 599), p);
        if (!strncmp(line, "moe8 serve: warning: ", 21) && (!needle || strstr(line, needle))) n++;
    }
    buf_free(&e);
    return n;
}

static void test_fields(server *sv) {
    static const struct { const char *path, *field, *value; } R[] = {
        {CHAT, "audio", "{\"voice\":\"alloy\",\"format\":\"wav\"}"},
        {CHAT, "prediction", "{\"type\":\"content\",\"content\":\"x\"}"},
        {CHAT, "web_search_options", "{}"},
        {CHAT, "functions", "[{\"name\":\"f\",\"parameters\":{}}]"},
        {CHAT, "function_call", "\"auto\""},
        {CHAT, "reasoning_effort", "\"huge\""},
        {CHAT, "reasoning_effort", "3"},
        {CHAT, "verbosity", "\"low\""},
        {CMPL, "suffix", "\"the end\""},
        {CMPL, "best_of", "2"},
        {CHAT, "modalities", "[\"audio\"]"},
        {CHAT, "modalities", "[\"text\",\"audio\"]"},
    };
    static const struct { const char *field, *value; } A[] = {
        {"user", "\"u-1\""}, {"metadata", "{\"k\":\"v\"}"}, {"store", "true"}, {"service_tier", "\"auto\""},
        {"best_of", "1"}, {"modalities", "[\"text\"]"}, {"reasoning_effort", "\"high\""},
        {"reasoning_effort", "null"},
    };
    char body[512];
    buf out = {0};
    for (size_t i = 0; i < sizeof R / sizeof *R; i++) {
        bad_case b = {"POST", R[i].path, body, 0, 400, INV, R[i].field, NULL, ""};
        char msg[64];
        snprintf(body, sizeof body, "{%s,\"max_tokens\":1,\"%s\":%s}",
                 strcmp(R[i].path, CHAT) ? "\"prompt\":\"hi\"" : MSG, R[i].field, R[i].value);
        snprintf(msg, sizeof msg, "'%s'", R[i].field);
        b.msg = msg;
        check_bad(sv, &b, NULL);
    }
    for (size_t i = 0; i < sizeof A / sizeof *A; i++) {
        for (int chat = 0; chat < 2; chat++) {
            int w0 = warnings(sv, NULL);
            long st;
            if (!chat && (!strcmp(A[i].field, "modalities") || !strcmp(A[i].field, "reasoning_effort")))
                continue; /* a chat field */
            if (chat && !strcmp(A[i].field, "best_of")) continue;     /* a completions field */
            snprintf(body, sizeof body, "{%s,\"max_tokens\":2,\"%s\":%s}", chat ? MSG : "\"prompt\":\"hi\"",
                     A[i].field, A[i].value);
            st = post(sv, chat ? CHAT : CMPL, body, &out);
            CHECKF(st == 200 && strstr(buf_s(&out), "\"completion_tokens\":2"), "%s: %ld %s", body, st, buf_s(&out));
            CHECKF(warnings(sv, NULL) == w0, "%s: a warning for a known field", body);
        }
    }
    for (int chat = 0; chat < 2; chat++) {
        int w0 = warnings(sv, "unknown field 'foo'"), a0 = warnings(sv, NULL);
        long st;
        snprintf(body, sizeof body, "{%s,\"max_tokens\":2,\"foo\":{\"bar\":1}}", chat ? MSG : "\"prompt\":\"hi\"");
        st = post(sv, chat ? CHAT : CMPL, body, &out);
        CHECKF(st == 200, "an unknown field: %ld %s", st, buf_s(&out));
        CHECKF(warnings(sv, "unknown field 'foo'") == w0 + 1 && warnings(sv, NULL) == a0 + 1,
               "%s: want one 'moe8 serve: warning: ... unknown field 'foo'' line", body);
    }
    buf_free(&out);
}

/* ---- 7. small ones ---------------------------------------------------------------------------- */

static void test_models(server *sv) {
    buf out = {0};
    cJSON *o;
    const bad_case T[] = {
        {"POST", CMPL, "{\"prompt\":\"hi\",\"model\":\"gpt-4o\"}", 0, 404, INV, "model", "model_not_found", "'gpt-4o' does not exist"},
        {"POST", CHAT, "{" MSG ",\"model\":\"gpt-4o\"}", 0, 404, INV, "model", "model_not_found", "this server serves 'serve_text'"},
        {"GET", "/v1/models/other", NULL, 0, 404, INV, NULL, "model_not_found", "'other'"},
    };
    for (size_t i = 0; i < sizeof T / sizeof *T; i++) check_bad(sv, &T[i], NULL);
    CHECK(http(sv, "GET", "/v1/models/" NAME, NULL, 0, NULL, &out) == 200);
    o = cJSON_Parse(buf_s(&out));
    CHECKF(o && jstr(o, "object") && !strcmp(jstr(o, "object"), "model") && jstr(o, "id") &&
           !strcmp(jstr(o, "id"), NAME) && jstr(o, "owned_by"), "GET /v1/models/" NAME ": %s", buf_s(&out));
    cJSON_Delete(o);
    buf_free(&out);
}

static long long row_value(const char *text, const char *label) {
    const char *p = strstr(text, label);
    return p ? strtoll(p + strlen(label), NULL, 10) : -1;
}

static void test_bench(server *sv) {
    char cmd[8192], outp[4200];
    buf out = {0};
    long long seeds[4], cached[4], total[4];
    const int a0 = access_lines(sv, 1);
    snprintf(outp, sizeof outp, "%s/api_bench.out", MOE8_TEST_TMP);
    for (int k = 0; k < 4; k++) { /* no seed twice, then --seed 7 twice */
        snprintf(cmd, sizeof cmd, "'%s' bench serve --url http://127.0.0.1:%d -n 3 --input-len 40 --output-len 4%s "
                 ">'%s' 2>&1", MOE8_CLI, sv->port, k >= 2 ? " --seed 7" : "", outp);
        const int rc = test_run(cmd);
        read_text(outp, &out);
        CHECKF(rc == 0, "moe8 bench serve exited %d: %s", rc, buf_s(&out));
        CHECKF(strstr(buf_s(&out), "Cached input tokens:") && strstr(buf_s(&out), "Seed:") &&
               row_value(buf_s(&out), "Successful requests:") == 3 && row_value(buf_s(&out), "Total generated tokens:") == 12,
               "moe8 bench serve printed: %s", buf_s(&out));
        seeds[k] = row_value(buf_s(&out), "Seed:");
        cached[k] = row_value(buf_s(&out), "Cached input tokens:");
        total[k] = row_value(buf_s(&out), "Total input tokens:");
    }
    CHECKF(seeds[0] != seeds[1], "two runs without --seed printed the same seed %lld", seeds[0]);
    CHECKF(seeds[2] == 7 && seeds[3] == 7, "--seed 7 printed seeds %lld and %lld", seeds[2], seeds[3]);
    {
        const long long per = total[3] / 3, want = 3 * MOE8_KV_BLOCK_TOKENS * ((per - 1) / MOE8_KV_BLOCK_TOKENS);
        CHECKF(total[2] == total[3] && per >= 40 && cached[3] == want && cached[2] < want,
               "--seed 7 again: cached %lld of %lld input tokens, want %lld (the first run %lld)", cached[3], total[3],
               want, cached[2]);
    }
    /* structured output: --json-schema FILE (the dozen-field schema of tests/data) and
     * --json-object reach the server as response_format (a schema it refuses fails every
     * request with its message); bad flags are refused */
    {
        static const struct { const char *flags; int rc, ok; const char *needle; } T[] = {
            {"--json-schema '" MOE8_SOURCE_DIR "/tests/data/bench_schema12.json'", 0, 3, "json_schema"},
            {"--json-object --endpoint chat", 0, 3, "json_object"},
            {"--json-schema '%s'", 1, 0, "'pattern' at /properties/zip"},
            {"--json-schema '%s' --json-object", 2, -1, "give one"},
            {"--json-schema '%s.none'", 2, -1, "api_bench_bad.json.none"},
            {"--json-schema '" MOE8_SOURCE_DIR "/README.md'", 2, -1, "not one JSON value"},
        };
        char bad_schema[4200], flags[4400], cmd2[16384];
        snprintf(bad_schema, sizeof bad_schema, "%s/api_bench_bad.json", MOE8_TEST_TMP);
        test_write_file(bad_schema, "{\"type\":\"object\",\"properties\":{\"zip\":{\"type\":\"string\",\"pattern\":\"x\"}}}",
                        strlen("{\"type\":\"object\",\"properties\":{\"zip\":{\"type\":\"string\",\"pattern\":\"x\"}}}"));
        for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
            int rc;
            snprintf(flags, sizeof flags, T[i].flags, bad_schema);
            snprintf(cmd2, sizeof cmd2, "'%s' bench serve --url http://127.0.0.1:%d -n 3 --input-len 40 --output-len 12 "
                     "--seed 3 %s >'%s' 2>&1", MOE8_CLI, sv->port, flags, outp);
            rc = test_run(cmd2);
            read_text(outp, &out);
            CHECKF(rc == T[i].rc && strstr(buf_s(&out), T[i].needle) &&
                   (T[i].ok < 0 || row_value(buf_s(&out), "Successful requests:") == T[i].ok) &&
                   (T[i].ok <= 0 || (row_value(buf_s(&out), "Total generated tokens:") >= 3 &&
                                     row_value(buf_s(&out), "Total generated tokens:") <= 36 &&
                                     strstr(buf_s(&out), "Structured output:"))),
                   "bench serve %s: exit %d (want %d): %s", flags, rc, T[i].rc, buf_s(&out));
        }
    }
    sv->n_req += access_lines(sv, 1) - a0;
    buf_free(&out);
}

/* One request on its own connection (Connection: close): the whole answer in
 * out; its status (0: none). */
static int raw_exchange(server *sv, const char *req, buf *out) {
    int fd = raw_connect(sv->port);
    size_t n = strlen(req);
    out->n = 0;
    buf_add(out, "", 0);
    if (fd < 0) return 0;
    if (write(fd, req, n) != (ssize_t)n) {
        close(fd);
        return 0;
    }
    raw_read_until(fd, out, NULL, g_asan ? 60 : 15);
    close(fd);
    return strncmp(buf_s(out), "HTTP/1.1 ", 9) ? 0 : atoi(out->p + 9);
}

/* The answer's head holds the header line `line` (name in any case, the value as given). */
static int head_has(const buf *b, const char *line) {
    const char *head_end = strstr(buf_s(b), "\r\n\r\n"), *colon = strchr(line, ':');
    const size_t nk = (size_t)(colon - line);
    for (const char *p = strstr(buf_s(b), "\r\n"); p && head_end && p < head_end; p = strstr(p + 2, "\r\n")) {
        const char *h = p + 2, *eol = strstr(h, "\r\n");
        if (!strncasecmp(h, line, nk) && h[nk] == ':' && eol &&
            (size_t)(eol - h) == strlen(line) && !strncmp(h + nk, colon, strlen(colon)))
            return 1;
    }
    return 0;
}

static int head_has_name(const buf *b, const char *name) {
    const char *head_end = strstr(buf_s(b), "\r\n\r\n");
    const size_t nk = strlen(name);
    for (const char *p = strstr(buf_s(b), "\r\n"); p && head_end && p < head_end; p = strstr(p + 2, "\r\n"))
        if (!strncasecmp(p + 2, name, nk) && p[2 + nk] == ':') return 1;
    return 0;
}

static void cors_post(char *req, size_t cap, const char *origin, const char *auth) {
    const char *body = "{\"prompt\":\"hi\",\"max_tokens\":1}";
    char o[128] = "", a[128] = "";
    if (origin) snprintf(o, sizeof o, "Origin: %s\r\n", origin);
    if (auth) snprintf(a, sizeof a, "Authorization: %s\r\n", auth);
    snprintf(req, cap, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%sContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", o, a, strlen(body), body);
}

static void test_cors_auth(const char *dir, server *plain) {
    static const char preflight[] =
        "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: %s\r\n"
        "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, content-type\r\n"
        "Connection: close\r\n\r\n";
    server sv;
    char args[4400], req[1024];
    buf out = {0};
    int st;
    /* without --allowed-origins: no CORS header at all */
    cors_post(req, sizeof req, "http://a.example", NULL);
    st = raw_exchange(plain, req, &out);
    plain->n_req++;
    CHECKF(st == 200 && !head_has_name(&out, "Access-Control-Allow-Origin"), "no --allowed-origins: %d %.300s", st,
           buf_s(&out));
    snprintf(req, sizeof req, preflight, "http://a.example");
    st = raw_exchange(plain, req, &out);
    CHECKF(st != 204 && st != 0 && !head_has_name(&out, "Access-Control-Allow-Origin"),
           "no --allowed-origins: a preflight got %d %.300s", st, buf_s(&out));

    snprintf(args, sizeof args, "-m '%s' --ctx-size 256 --threads 2 --served-model-name " NAME
             " --allowed-origins http://a.example --api-key sekret", dir);
    if (server_start(&sv, "api_cors", NULL, args)) return;
    /* the preflight needs no key */
    snprintf(req, sizeof req, preflight, "http://a.example");
    st = raw_exchange(&sv, req, &out);
    CHECKF(st == 204 && head_has(&out, "Access-Control-Allow-Origin: http://a.example") &&
           head_has_name(&out, "Access-Control-Allow-Methods") && strstr(buf_s(&out), "POST") &&
           head_has_name(&out, "Access-Control-Allow-Headers") && strstr(buf_s(&out), "Authorization"),
           "preflight from an allowed origin: %d %.600s", st, buf_s(&out));
    /* the request itself: the key, and the header */
    cors_post(req, sizeof req, "http://a.example", "Bearer sekret");
    st = raw_exchange(&sv, req, &out);
    sv.n_req++;
    CHECKF(st == 200 && head_has(&out, "Access-Control-Allow-Origin: http://a.example"),
           "POST from an allowed origin: %d %.400s", st, buf_s(&out));
    cors_post(req, sizeof req, "http://a.example", NULL);
    st = raw_exchange(&sv, req, &out);
    sv.n_req++;
    CHECKF(st == 401, "POST from an allowed origin without the key: %d %.300s", st, buf_s(&out));
    /* another origin: no header, the preflight refused */
    cors_post(req, sizeof req, "http://b.example", "Bearer sekret");
    st = raw_exchange(&sv, req, &out);
    sv.n_req++;
    CHECKF(st == 200 && !head_has_name(&out, "Access-Control-Allow-Origin"), "POST from another origin: %d %.300s", st,
           buf_s(&out));
    snprintf(req, sizeof req, preflight, "http://b.example");
    st = raw_exchange(&sv, req, &out);
    CHECKF(st == 403 && !head_has_name(&out, "Access-Control-Allow-Origin"), "preflight from another origin: %d %.300s",
           st, buf_s(&out));
    /* --api-key: probes and scrapers are open, the API is not */
    CHECK(http(&sv, "GET", "/health", NULL, 0, NULL, &out) == 200);
    CHECK(http(&sv, "GET", "/version", NULL, 0, NULL, &out) == 200 && strstr(buf_s(&out), "\"version\""));
    CHECK(http(&sv, "GET", "/metrics", NULL, 0, NULL, &out) == 200 && strstr(buf_s(&out), "moe8:"));
    {
        bad_case b = {"GET", "/v1/models", NULL, 0, 401, INV, NULL, "invalid_api_key", "API key"};
        bad_case m = {"GET", "/v1/models/" NAME, NULL, 0, 401, INV, NULL, "invalid_api_key", "API key"};
        check_bad(&sv, &b, NULL);
        check_bad(&sv, &m, NULL);
    }
    CHECK(http(&sv, "GET", "/v1/models", NULL, 0, "Bearer sekret", &out) == 200);
    buf_free(&out);
    server_stop(&sv, 10);
}

/* --kv-type f32 (the library's f32 context, bit for bit) and
 * --default-chat-template-kwargs, on one server. */
static void test_f32_kwargs(const char *dir, server *f16, lib_env *L16) {
    server sv;
    lib_env L;
    char args[4400];
    lib_res *r32 = lib_res_new(), *r16 = lib_res_new();
    areq r = areq_default();
    result a, b;
    snprintf(args, sizeof args, "-m '%s' --ctx-size 1024 --threads 2 --served-model-name " NAME
             " --kv-type f32 --default-chat-template-kwargs '{\"enable_thinking\": false}'", dir);
    if (server_start(&sv, "api_f32", NULL, args)) {
        lib_res_free(r32);
        lib_res_free(r16);
        return;
    }
    lib_open(&L, dir, MOE8_DT_F32);
    r.text = "A longer prompt, so that the rounding of the cached keys and values to half precision shows in "
             "the attention of the later positions of this request";
    r.max_tokens = g_asan ? 4 : 10, r.logprobs = 5;
    case_vs_lib(&sv, &L, "--kv-type f32, greedy", &r, r32);
    lib_run(L16, &r, 0, r16);
    {
        int differ = !same_tokens(r32, r16);
        for (int i = 0; i < r32->n && i < r16->n && !differ; i++) differ = r32->lp[i] != r16->lp[i];
        CHECKF(differ, "the fixture's f32 and f16 KV runs are identical: --kv-type is not tested");
    }
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    if (run_areq(&sv, &r, &a) && run_areq(f16, &r, &b))
        CHECKF(!cJSON_Compare(a.lp, b.lp, 1), "--kv-type f32 and the f16 server give the same log-probs");
    result_free(&a);
    result_free(&b);
    r.seed = 9, r.temp = 1.0;
    case_vs_lib(&sv, &L, "--kv-type f32, seeded", &r, r32);
    /* the default kwargs: thinking off unless a request says otherwise */
    {
        static const char *kw[3] = {"", ",\"chat_template_kwargs\":{\"enable_thinking\":false}",
                                    ",\"chat_template_kwargs\":{\"enable_thinking\":true}"};
        int pt[3] = {-1, -1, -1}, on_default = -1, want_off, want_on;
        char body[512];
        buf out = {0};
        int32_t ids[256];
        char text[1024];
        size_t n = 0;
        moe8_chat_message m = {"user", "hi there"};
        for (int k = 0; k < 4; k++) {
            cJSON *o;
            snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi there\"}],\"max_tokens\":1%s}",
                     kw[k < 3 ? k : 0]);
            if (post(k < 3 ? &sv : f16, CHAT, body, &out) == 200 && (o = cJSON_Parse(buf_s(&out)))) {
                if (J(J(o, "usage"), "prompt_tokens")) {
                    if (k < 3) pt[k] = J(J(o, "usage"), "prompt_tokens")->valueint;
                    else on_default = J(J(o, "usage"), "prompt_tokens")->valueint;
                }
                cJSON_Delete(o);
            }
        }
        CHECK(moe8_chat_format(&m, 1, MOE8_CHAT_ADD_ASSISTANT | MOE8_CHAT_NO_THINKING, text, sizeof text, &n, NULL) == MOE8_OK);
        CHECK(moe8_tokenize(L.tok, text, n, ids, 256, &n, NULL) == MOE8_OK);
        want_off = (int)n;
        CHECK(moe8_chat_format(&m, 1, MOE8_CHAT_ADD_ASSISTANT, text, sizeof text, &n, NULL) == MOE8_OK);
        CHECK(moe8_tokenize(L.tok, text, n, ids, 256, &n, NULL) == MOE8_OK);
        want_on = (int)n;
        CHECKF(pt[0] == want_off && pt[1] == want_off && pt[2] == want_on && on_default == want_on && want_on < want_off,
               "--default-chat-template-kwargs thinking off: prompt tokens %d (none), %d (false), %d (true), "
               "%d (no flag, none); want %d, %d, %d, %d", pt[0], pt[1], pt[2], on_default, want_off, want_off, want_on,
               want_on);
        buf_free(&out);
    }
    lib_close(&L);
    lib_res_free(r32);
    lib_res_free(r16);
    server_stop(&sv, 10);
}

/* ---- 8. the application clients --------------------------------------------------------------- */

static void test_apps(server *sv) {
    char args[4400];
    const char *missing;
    cJSON *o;
    int n = 0, n_ok = 0;
    if (g_asan) { /* some hundred requests of up to 300 tokens: minutes at -O0 */
        printf("test_serve_api: application clients: in the release build only\n");
        return;
    }
    if ((missing = node_missing(""))) {
        printf("test_serve_api: application clients: skipped: %s\n", missing);
        return;
    }
    snprintf(args, sizeof args, "'%s/.deps/clients' 'http://127.0.0.1:%d/v1' " NAME, MOE8_SOURCE_DIR, sv->port);
    o = node_checks("apps.mjs", args, 240, &sv, 1, 12, &n_ok, &n);
    printf("test_serve_api: application clients (OpenAI, AI SDK, LangChain): %d of %d checks pass\n", n_ok, n);
    cJSON_Delete(o);
}

/* ---- main ------------------------------------------------------------------------------------- */

/* --part clients: apps.mjs against its own server */
static void clients_part(void) {
    fx_opts ot = serve_fixture_opts();
    server sv;
    char args[4400];
    const char *dir = fx_test_model("serve_api_clients", &ot, 1);
    snprintf(args, sizeof args, "-m '%s' --ctx-size 1024 --threads 2 --served-model-name " NAME, dir);
    if (server_start(&sv, "api_clients", NULL, args) == 0) {
        test_apps(&sv);
        phase("application clients");
        CHECK(wait_idle(&sv, 5));
        server_stop(&sv, 10);
    }
}

int main(int argc, char **argv) {
    fx_opts ot = serve_fixture_opts();
    server sv;
    lib_env L;
    char args[4400];
    const char *dir;
    serve_test_parts(argc, argv);
    serve_test_init("test_serve_api");
    if (g_part_clients) {
        if (g_asan) printf("test_serve_api: application clients: in the release build only\n");
        else clients_part();
    }
    if (!g_part_c) {
        curl_global_cleanup();
        return test_summary();
    }
    dir = fx_test_model("serve_api", &ot, 1);
    g_model_dir = dir;
    lib_open(&L, dir, MOE8_DT_F16);
    snprintf(args, sizeof args, "-m '%s' --ctx-size 1024 --threads 2 --served-model-name " NAME, dir);
    if (server_start(&sv, "api_main", NULL, args) == 0) {
        test_processors(&sv, &L);
        phase("logits processors");
        test_n(&sv, &L);
        phase("n");
        test_echo(&sv, &L);
        phase("echo");
        test_structured(&sv, &L);
        phase("structured outputs");
        test_batch(&sv);
        phase("batch invariance");
        test_tools(&sv, &L);
        test_one_call(&sv);
        phase("tool calling");
        test_fields(&sv);
        test_reasoning_effort(&sv);
        test_models(&sv);
        phase("fields, models");
        test_bench(&sv);
        phase("bench serve");
        test_f32_kwargs(dir, &sv, &L);
        phase("kv-type f32, default kwargs");
        test_cors_auth(dir, &sv);
        phase("cors, api key");
        {
            fx_opts oc = ot;
            oc.tensor_hook = chain_hook;
            test_thinking(fx_test_model("serve_api_chain", &oc, 1));
            phase("thinking and grammars");
        }
        CHECK(wait_idle(&sv, 5));
        CHECK(metric(&sv, "moe8:request_success_total", "finished_reason=\"abort\"") == 0);
        server_stop(&sv, 10);
    }
    lib_close(&L);
    curl_global_cleanup();
    printf("test_serve_api: %.1f s\n", now_s() - g_t0);
    return test_summary();
}
