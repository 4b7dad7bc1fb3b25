/*
 * cmd_generate.c — `moe8 generate -m DIR`: run a model folder on one prompt
 * or a batch of prompts and print what it generates.
 *
 * Flow: parse flags (strictly: every number checked for syntax and range) ->
 * collect the prompts (-p TEXT, -f FILE with one prompt per line, or
 * --prompt-ids[-file]) -> load the model and, when text is involved, the tokenizer
 * -> tokenize (with --chat, a user turn in the model's chat template, which
 * writes any BOS itself; else BOS only when the tokenizer says add_bos) -> one
 * context (a sequence per prompt, a paged KV pool of --kv-mb
 * or what the prompts need) -> every prompt a request of one scheduler
 * (moe8_sched, the library's one scheduling path, as moe8_generate): steps
 * until all end, its events streamed (one prompt) or gathered per prompt.
 * The first step that has given every prompt its first token ends the
 * "prefill" time; the prompt's logits for --dump-logits come with its first
 * token's event.
 *
 * Output: text (or ids with --ids) on stdout; errors, notes and the final
 * stats line (key=value pairs, always the last line of stderr) on stderr.
 * Uses only the public headers. Does not: echo the prompt, hold a
 * conversation, or stop on strings (only on stop ids; the library can).
 *
 * Input files (-f, --prompt-ids-file) are read whole through moe8_read_file:
 * regular files only (a FIFO or a device is refused at once, never read), at
 * most 64 MiB each. --dump-logits writes only over a regular file or a new name.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"

#define CMD "generate"
#define DEFAULT_N_PREDICT 64
#define DEFAULT_N_CTX 4096
#define MAX_N_BATCH 4096 /* most prompt tokens per forward pass */

#define STR_(x) #x
#define STR(x) STR_(x)
#define SYNOPSIS "moe8 generate -m DIR (-p TEXT | -f FILE | --prompt-ids IDS |\n" \
                 "                             --prompt-ids-file FILE) [options]"
#define NOTES                                                                                 \
    "output: one prompt streams its text as it is generated; a batch prints each\n"          \
    "completion when it finishes, every line prefixed '[i] ' (i = prompt index from 0);\n"   \
    "--ids prints one line per prompt, in prompt order. Stop ids are not printed.\n"         \
    "stderr ends with one line: load_s= prompt_tokens= prefill_s= prefill_tok_s=\n"          \
    "gen_tokens= decode_s= decode_tok_s= peak_rss_mb= (load_s: model, tokenizer and\n"       \
    "weight preparation; decode excludes each prompt's first token, which comes from\n"      \
    "the prompt pass). With --tp, rank 0 alone prints; a line before it gives each\n"        \
    "rank's resident and peak memory and its time in communication.\n"

/* ======================================================================== */
/* Options                                                                   */
/* ======================================================================== */

typedef struct {
    const char *dir, *text, *file, *prompt_ids, *ids_file, *dump, *chat_kwargs;
    char dump_real[PATH_MAX + 256]; /* dump's canonical path (check_dump_path) */
    int64_t n_predict, n_ctx, kv_mb, max_batch;
    int ctx_set, chat, ignore_eos, print_ids, float_experts, n_threads, tp, expert_parallel;
    moe8_dtype kv_type;
    moe8_sampler_params sp;
    float comm_timeout; /* seconds, 0 = none */
} opts;

/* 0 ok, 1 help printed, 2 bad usage (message printed). */
static int parse_args(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = DEFAULT_N_PREDICT;
    o->n_ctx = 0; /* DEFAULT_N_CTX unless given */
    o->tp = 1;
    o->comm_timeout = 60;
    o->kv_type = moe8_context_params_default().kv_type;
    o->sp = moe8_sampler_params_default();
    const cli_opt opts[] = {
        {"-m", NULL, CLI_STR, &o->dir, .arg = "DIR",
         .help = "model folder (config.json, *.safetensors, tokenizer.json, ...)"},
        {"-p", NULL, CLI_STR, &o->text, .arg = "TEXT",
         .help = "one prompt (the output is the completion; the prompt is not echoed)"},
        {"-f", NULL, CLI_STR, &o->file, .arg = "FILE",
         .help = "one prompt per line (blank lines skipped), run together as\n"
         "requests of one scheduler (decode tokens first, then prompt\n"
         "chunks, within --max-batch-tokens)\n(a regular file of at most 64 MiB, no NUL bytes)"},
        {"--prompt-ids", NULL, CLI_STR, &o->prompt_ids, .arg = "IDS",
         .help = "one prompt as token ids '1,2,3' (no tokenizer needed),\n"
         "separated by commas and/or whitespace"},
        {"--prompt-ids-file", NULL, CLI_STR, &o->ids_file, .arg = "FILE",
         .help = "one prompt as token ids read from FILE, same syntax (for\n"
         "prompts longer than a command line; at most 64 MiB)"},
        {"-n", NULL, CLI_I64, &o->n_predict, 0, INT32_MAX, .arg = "N",
         .help = "tokens to generate per prompt, the first included (default " STR(DEFAULT_N_PREDICT)
         ";\n0 runs only the prompt)"},
        {"-c", NULL, CLI_I64, &o->n_ctx, 1, INT32_MAX, .arg = "N",
         .help = "context length per prompt (default " STR(DEFAULT_N_CTX) ", at most the model's\n"
         "max_position_embeddings)"},
        {"--chat", NULL, CLI_FLAG, &o->chat,
         .help = "wrap each prompt as a user turn in the model's chat template\n"
         "(chat_template of tokenizer_config.json, or chat_template.jinja),\n"
         "with the generation prompt and the template's defaults (Qwen3:\n"
         "thinking on, as moe8 serve; '{\"enable_thinking\": false}' turns it off)"},
        {"--chat-template-kwargs", NULL, CLI_STR, &o->chat_kwargs, .arg = "JSON",
         .help = "with --chat: variables for the template, a JSON object, e.g.\n"
         "'{\"enable_thinking\": true}' (as vLLM's chat_template_kwargs)"},
        {"--temp", NULL, CLI_FLOAT, &o->sp.temperature, .dlo = 0, .dhi = 1e6, .arg = "T",
         .help = "temperature (default 0: greedy)"},
        {"--top-k", NULL, CLI_INT, &o->sp.top_k, 0, INT32_MAX, .arg = "K",
         .help = "keep the K most likely tokens (default 0: off)"},
        {"--top-p", NULL, CLI_FLOAT, &o->sp.top_p, .dlo = 0, .dhi = 1, .open_lo = 1, .arg = "P",
         .help = "nucleus mass in (0, 1] (default 1: off)"},
        {"--min-p", NULL, CLI_FLOAT, &o->sp.min_p, .dlo = 0, .dhi = 1, .arg = "P",
         .help = "keep p >= P * p_max, P in [0, 1] (default 0: off)"},
        {"--seed", NULL, CLI_U64, &o->sp.seed, .arg = "S", .help = "sampling seed (default 0)"},
        {"--ignore-eos", NULL, CLI_FLAG, &o->ignore_eos,
         .help = "do not stop on the stop ids (the model's eos ids + <|im_end|>)"},
        {"--threads", NULL, CLI_INT, &o->n_threads, 1, 4096, .arg = "N",
         .help = "threads (default: OpenMP's)"},
        {"--kv-mb", NULL, CLI_I64, &o->kv_mb, 1, (long)1 << 24, .arg = "N",
         .help = "KV cache budget in MiB, paged in blocks of 16 positions and\n"
         "shared by the prompts (default: what every prompt needs for\n"
         "its whole length); prompts wait or are recomputed when it is\n"
         "short, with the same output"},
        {"--kv-type", NULL, CLI_KV, &o->kv_type, .arg = "T",
         .help = "KV cache elements: f16 (default), bf16 (half the memory of f32,\n"
         "K/V rounded to nearest even) or f32 (exact)"},
        {"--max-batch-tokens", NULL, CLI_I64, &o->max_batch, 1, MAX_N_BATCH, .arg = "N",
         .help = "most tokens per forward pass (default " STR(MAX_N_BATCH) "): longer prompts are\n"
         "read in chunks, with the same output"},
        {"--ids", NULL, CLI_FLAG, &o->print_ids,
         .help = "print generated token ids instead of text (no tokenizer needed\n"
         "with token id prompts): space-separated, one line per prompt"},
        {"--dump-logits", NULL, CLI_STR, &o->dump, .arg = "FILE",
         .help = "write the logits of the last prompt position, one 'id value'\n"
         "line per vocabulary id (%.9g), single prompt only; FILE is a\n"
         "regular file or a new name, never inside the model folder or a\n"
         "prompt file (written whole, then renamed over FILE)"},
        {"--float-experts", NULL, CLI_FLAG, &o->float_experts,
         .help = "run W8A8 experts dequantized to fp32 (to compare)"},
        {"--tp", NULL, CLI_INT, &o->tp, 1, 4096, .arg = "N",
         .help = "run as N ranks started by mpirun -np N (tensor parallel:\n"
         "attention heads, dense MLPs and experts split over the ranks;\n"
         "every rank gets the same flags and model folder)"},
        {"--expert-parallel", NULL, CLI_FLAG, &o->expert_parallel,
         .help = "with --tp: split the experts as whole experts instead"},
        {"--comm-timeout", NULL, CLI_FLOAT, &o->comm_timeout, .dlo = 0, .dhi = 1e6, .arg = "S",
         .help = "with --tp: seconds a rank waits for the others in a collective\n"
         "before the job ends, naming the rank that stopped answering\n"
         "while generating (default 60, also the limit while loading;\n0: wait forever)"},
        {0},
    };
    const int rc = cli_parse(CMD, SYNOPSIS, opts, NOTES, argc, argv);
    if (rc) return rc < 0 ? 1 : rc;
    o->ctx_set = o->n_ctx != 0;
    if (!o->ctx_set) o->n_ctx = DEFAULT_N_CTX;
    if (o->chat_kwargs) {
        cJSON *kw = cJSON_ParseWithOpts(o->chat_kwargs, NULL, 1); /* nothing after the value */
        const int ok = cJSON_IsObject(kw);
        cJSON_Delete(kw);
        if (!ok) return cli_bad_value(CMD, "--chat-template-kwargs", "a JSON object", o->chat_kwargs);
    }
    if (!o->dir) {
        fprintf(stderr, "moe8 " CMD ": no model folder (-m DIR)\n");
        return 2;
    }
    if (!!o->text + !!o->file + !!o->prompt_ids + !!o->ids_file != 1) {
        fprintf(stderr, "moe8 " CMD ": give exactly one of -p TEXT, -f FILE, --prompt-ids IDS, "
                "--prompt-ids-file FILE\n");
        return 2;
    }
    if (o->expert_parallel && o->tp < 2) {
        fprintf(stderr, "moe8 " CMD ": --expert-parallel needs --tp N with N >= 2\n");
        return 2;
    }
    if (o->chat_kwargs && !o->chat) {
        fprintf(stderr, "moe8 " CMD ": --chat-template-kwargs goes with --chat\n");
        return 2;
    }
    if (o->chat && (o->prompt_ids || o->ids_file)) {
        fprintf(stderr, "moe8 " CMD ": --chat formats text prompts; it cannot wrap %s\n",
                o->prompt_ids ? "--prompt-ids" : "--prompt-ids-file");
        return 2;
    }
    return 0;
}

/* ======================================================================== */
/* Prompts                                                                   */
/* ======================================================================== */

typedef struct {
    int n;              /* prompts */
    char **text;        /* [n] NUL-terminated, or NULL with --prompt-ids */
    int32_t **ids;      /* [n] token ids */
    int32_t *len;       /* [n] */
    int64_t n_tokens;   /* sum of len */
} prompts;

static void prompts_free(prompts *p) {
    for (int i = 0; i < p->n; i++) {
        if (p->text) free(p->text[i]);
        if (p->ids) free(p->ids[i]);
    }
    free(p->text);
    free(p->ids);
    free(p->len);
    memset(p, 0, sizeof *p);
}

static int prompts_alloc(prompts *p, int n, int with_text) {
    p->n = n;
    p->ids = calloc((size_t)n, sizeof *p->ids);
    p->len = calloc((size_t)n, sizeof *p->len);
    p->text = with_text ? calloc((size_t)n, sizeof *p->text) : NULL;
    if (p->ids && p->len && (p->text || !with_text)) return 0;
    fprintf(stderr, "moe8 " CMD ": out of memory\n");
    return -1;
}

/* Token ids "1,2,3", "1 2 3" or "1, 2,\n3": decimal ids in [0, INT32_MAX]
 * (checked against the vocabulary later) separated by whitespace and/or one
 * comma. Fills ids[] when it is not NULL; *n gets the count. 0, or -1 after a
 * message naming `what` (the flag, and the file) and the offending id's
 * position: its index from 1 and its byte offset. */
static int scan_ids(const char *what, const char *s, size_t len, int32_t *ids, size_t *n) {
    size_t i = 0, k = 0;
    *n = 0;
    while (i < len && isspace((unsigned char)s[i])) i++;
    if (i == len) {
        fprintf(stderr, "moe8 " CMD ": %s: no token ids\n", what);
        return -1;
    }
    while (i < len) {
        size_t start = i, d;
        long long v = -1;
        while (i < len && s[i] != ',' && !isspace((unsigned char)s[i])) i++;
        d = i - start;
        if (d > 0 && d < 16) {
            char buf[16], *end;
            memcpy(buf, s + start, d);
            buf[d] = '\0';
            v = isdigit((unsigned char)buf[0]) ? strtoll(buf, &end, 10) : -1;
            if (v >= 0 && *end) v = -1;
        }
        if (v < 0 || v > INT32_MAX) {
            char shown[40];
            size_t m = d < 32 ? d : 32;
            for (size_t j = 0; j < m; j++)
                shown[j] = isprint((unsigned char)s[start + j]) ? s[start + j] : '?';
            shown[m] = '\0';
            fprintf(stderr, "moe8 " CMD ": %s: token %zu (byte offset %zu): expected a token id "
                    "in [0, %d] (ids separated by commas or whitespace), got '%s%s'\n", what,
                    k + 1, start, INT32_MAX, shown, d > m ? "..." : "");
            return -1;
        }
        if (ids) ids[k] = (int32_t)v;
        k++;
        while (i < len && isspace((unsigned char)s[i])) i++;
        if (i < len && s[i] == ',') { /* a comma: another id must follow */
            i++;
            while (i < len && isspace((unsigned char)s[i])) i++;
            if (i == len) {
                fprintf(stderr, "moe8 " CMD ": %s: token %zu (byte offset %zu): expected a token "
                        "id after the last comma, got the end\n", what, k + 1, i);
                return -1;
            }
        }
    }
    *n = k;
    return 0;
}

/* One prompt of ids: `s` from --prompt-ids or a --prompt-ids-file's text. */
static int parse_prompt_ids(const char *what, const char *s, size_t len, prompts *p) {
    size_t n = 0;
    if (scan_ids(what, s, len, NULL, &n)) return -1;
    if (n > INT32_MAX) {
        fprintf(stderr, "moe8 " CMD ": %s: %zu token ids, more than a prompt holds\n", what, n);
        return -1;
    }
    if (prompts_alloc(p, 1, 0)) return -1;
    if (!(p->ids[0] = malloc(n * sizeof(int32_t)))) {
        fprintf(stderr, "moe8 " CMD ": out of memory for %zu token ids\n", n);
        return -1;
    }
    scan_ids(what, s, len, p->ids[0], &n);
    p->len[0] = (int32_t)n;
    p->n_tokens = (int64_t)n;
    return 0;
}

#define PROMPT_FILE_MAX ((size_t)64 << 20) /* -f: 64 MiB */
#define IDS_FILE_MAX ((size_t)64 << 20)    /* --prompt-ids-file: 64 MiB */

/* A whole input file (regular files only: a FIFO or a device is refused at
 * once, never read), or NULL after a message naming the flag and the file. */
static char *read_input(const char *flag, const char *path, size_t max, size_t *n_out) {
    moe8_error err;
    char *buf = NULL;
    if (moe8_read_file(path, max, &buf, n_out, &err) != MOE8_OK) {
        fprintf(stderr, "moe8 " CMD ": %s: %s\n", flag, err.message);
        return NULL;
    }
    return buf;
}

/* --prompt-ids-file: one prompt of ids, the --prompt-ids syntax. */
static int read_ids_file(const char *path, prompts *p) {
    char what[PATH_MAX + 32];
    size_t n_bytes = 0;
    char *buf = read_input("--prompt-ids-file", path, IDS_FILE_MAX, &n_bytes);
    int rc;
    if (!buf) return -1;
    snprintf(what, sizeof what, "--prompt-ids-file '%s'", path);
    rc = parse_prompt_ids(what, buf, n_bytes, p);
    free(buf);
    return rc;
}

/* One prompt per non-blank line ("\r\n" and "\r" endings accepted). A NUL
 * byte is refused: it would end the prompt there and drop the rest. */
static int read_prompt_file(const char *path, prompts *p) {
    size_t n_bytes = 0, line_no = 1;
    char *buf = read_input("-f", path, PROMPT_FILE_MAX, &n_bytes), *line;
    int n = 0, rc = -1;
    if (!buf) return -1;
    for (size_t i = 0; i < n_bytes; i++) {
        if (buf[i] == '\0') {
            fprintf(stderr, "moe8 " CMD ": -f: '%s' line %zu holds a NUL byte (byte offset %zu); "
                    "a prompt is text\n", path, line_no, i);
            goto done;
        }
        if (buf[i] != '\n' && buf[i] != '\r') continue;
        if (buf[i] == '\r' && i + 1 < n_bytes && buf[i + 1] == '\n') buf[i++] = '\0';
        buf[i] = '\0';
        line_no++;
    }
    for (size_t i = 0; i < n_bytes; i += strlen(buf + i) + 1) n += buf[i] != '\0';
    if (n == 0) {
        fprintf(stderr, "moe8 " CMD ": prompt file '%s' holds no prompt (empty or blank lines)\n",
                path);
        goto done;
    }
    if (prompts_alloc(p, n, 1)) goto done;
    n = 0;
    for (size_t i = 0; i < n_bytes; i += strlen(buf + i) + 1) {
        line = buf + i;
        if (*line && !(p->text[n++] = strdup(line))) goto done;
    }
    rc = 0;
done:
    free(buf);
    return rc;
}


/* The prompt as one user turn in the model's chat template (malloc'd), or
 * NULL with err filled. */
static char *render_chat(const moe8_tokenizer *tok, const char *text, const char *kwargs,
                         moe8_error *err) {
    moe8_chat_message msg = {"user", text};
    size_t cap = strlen(text) + 4096, need = 0;
    for (int k = 0; k < 2; k++) {
        char *buf = malloc(cap);
        if (!buf) break;
        if (moe8_chat_apply(tok, &msg, 1, 1, kwargs, buf, cap, &need, err) == MOE8_OK) return buf;
        free(buf);
        if (need < cap) return NULL; /* a real error: err says it */
        cap = need + 1;
    }
    snprintf(err->message, sizeof err->message, "cannot format the prompt: out of memory");
    return NULL;
}

/* Text -> ids (the chat template with --chat, else BOS when the tokenizer asks). */
static int tokenize_one(const moe8_tokenizer *tok, int index, const char *text, const char *kwargs,
                        int32_t **ids, int32_t *len) {
    moe8_error err;
    char *chat_buf = NULL;
    size_t n = 0, bos = !kwargs && moe8_tokenizer_add_bos(tok) && moe8_tokenizer_bos_id(tok) >= 0;
    int rc = -1;
    if (kwargs) {
        if (!(chat_buf = render_chat(tok, text, kwargs, &err))) {
            fprintf(stderr, "moe8 " CMD ": prompt %d: %s\n", index, err.message);
            return -1;
        }
        text = chat_buf;
    }
    moe8_tokenize(tok, text, strlen(text), NULL, 0, &n, NULL); /* count */
    if (n > INT32_MAX - 1 || !(*ids = malloc((n + bos + 1) * sizeof(int32_t)))) goto fail;
    if (moe8_tokenize(tok, text, strlen(text), *ids + bos, n, &n, &err) != MOE8_OK) {
        fprintf(stderr, "moe8 " CMD ": prompt %d: %s\n", index, err.message);
        goto done;
    }
    if (bos) (*ids)[0] = moe8_tokenizer_bos_id(tok);
    *len = (int32_t)(n + bos);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "moe8 " CMD ": cannot tokenize the prompt (out of memory)\n");
done:
    free(chat_buf);
    return rc;
}

/* Every prompt is non-empty, fits the context and uses ids of the model. */
static int check_prompts(const prompts *p, int64_t n_ctx, int64_t n_vocab) {
    for (int i = 0; i < p->n; i++) {
        if (p->len[i] == 0) {
            fprintf(stderr, "moe8 " CMD ": prompt %d is empty (no tokens)\n", i);
            return -1;
        }
        if (p->len[i] > n_ctx) {
            fprintf(stderr, "moe8 " CMD ": prompt %d has %d tokens, more than the context "
                    "length %lld (-c)\n", i, p->len[i], (long long)n_ctx);
            return -1;
        }
        for (int32_t j = 0; j < p->len[i]; j++)
            if (p->ids[i][j] >= n_vocab) {
                fprintf(stderr, "moe8 " CMD ": prompt %d: token id %d is not in the model's "
                        "vocabulary [0, %lld)\n", i, p->ids[i][j], (long long)n_vocab);
                return -1;
            }
    }
    return 0;
}

/* ======================================================================== */
/* Generation state                                                          */
/* ======================================================================== */

/* The prompts run as requests of one scheduler (moe8_sched): events drive
 * the output, rank 0 prints. */
typedef struct {
    const opts *o;
    const prompts *pr;
    moe8_dist *dist;
    int quiet;             /* ranks other than 0 print nothing */
    moe8_context *ctx;
    moe8_sched *sched;
    int32_t stop[MOE8_MAX_STOP_IDS + 1]; /* eos ids: the model's + <|im_end|> */
    int n_stop;
    int32_t n_ctx;
    int32_t *count;        /* [n_seq] tokens generated */
    int32_t *fin;          /* [n_seq] moe8_finish, 0 while running */
    int32_t *out;          /* [n_seq][cap_out] generated ids (--ids batch) */
    int32_t cap_out;
    int n_started;         /* prompts with their first token (or ended) */
    char **text;           /* [n_seq] batch: each completion's text so far */
    size_t *text_len, *text_cap;
} runner;

static int runner_alloc(runner *r) {
    const int n_seq = r->pr->n;
    int64_t cap = r->o->n_predict < (int64_t)r->n_ctx + 1 ? r->o->n_predict : r->n_ctx + 1;
    r->cap_out = (int32_t)(cap > 0 ? cap : 1);
    r->count = calloc((size_t)n_seq, sizeof(int32_t));
    r->fin = calloc((size_t)n_seq, sizeof(int32_t));
    r->out = malloc((size_t)n_seq * (size_t)r->cap_out * sizeof(int32_t));
    r->text = calloc((size_t)n_seq, sizeof *r->text);
    r->text_len = calloc((size_t)n_seq, sizeof *r->text_len);
    r->text_cap = calloc((size_t)n_seq, sizeof *r->text_cap);
    if (r->count && r->fin && r->out && r->text && r->text_len && r->text_cap) return 0;
    fprintf(stderr, "moe8 " CMD ": out of memory for %d prompts\n", n_seq);
    return -1;
}

static void runner_free(runner *r) {
    for (int i = 0; r->text && i < r->pr->n; i++) free(r->text[i]);
    free(r->text);
    free(r->text_len);
    free(r->text_cap);
    free(r->count);
    free(r->fin);
    free(r->out);
}

/* ======================================================================== */
/* Output                                                                    */
/* ======================================================================== */

static void text_append(runner *r, int i, const char *s, size_t n) {
    if (r->text_len[i] + n + 1 > r->text_cap[i]) {
        size_t cap = 2 * (r->text_len[i] + n + 1) + 256;
        char *nb = realloc(r->text[i], cap);
        if (!nb) return; /* output truncated rather than a crash */
        r->text[i] = nb;
        r->text_cap[i] = cap;
    }
    memcpy(r->text[i] + r->text_len[i], s, n);
    r->text_len[i] += n;
    r->text[i][r->text_len[i]] = '\0';
}

/* Batch mode: the whole completion of prompt i, each line prefixed "[i] ". */
static void print_completion(const runner *r, int i) {
    for (const char *line = r->text[i] ? r->text[i] : "", *nl;; line = nl + 1) {
        nl = strchr(line, '\n');
        printf("[%d] ", i);
        fwrite(line, 1, nl ? (size_t)(nl - line) : strlen(line), stdout);
        putchar('\n');
        if (!nl) break;
    }
    fflush(stdout);
}

static void print_ids_batch(const runner *r) {
    for (int i = 0; i < r->pr->n; i++) {
        for (int32_t k = 0; k < r->count[i] && k < r->cap_out; k++)
            printf("%s%d", k ? " " : "", r->out[(size_t)i * r->cap_out + k]);
        putchar('\n');
    }
    fflush(stdout);
}

/* Text of an event: streamed (one prompt) or kept for the completion. */
static void put_text(runner *r, int i, const moe8_event *e) {
    if (r->quiet || r->o->print_ids || !e->text_len) return;
    if (r->pr->n == 1) {
        fwrite(e->text, 1, e->text_len, stdout);
        fflush(stdout);
    } else {
        text_append(r, i, e->text, e->text_len);
    }
}

static void on_token(runner *r, int i, const moe8_event *e) {
    if (r->count[i] < r->cap_out) r->out[(size_t)i * r->cap_out + r->count[i]] = e->token;
    r->count[i]++;
    if (r->pr->n == 1 && r->o->print_ids && !r->quiet) {
        printf("%s%d", r->count[i] > 1 ? " " : "", e->token);
        fflush(stdout);
    }
    put_text(r, i, e);
}

static void on_finish(runner *r, int i, const moe8_event *e) {
    r->fin[i] = e->finish;
    put_text(r, i, e);
    if (r->quiet) return;
    if (e->finish == MOE8_FINISH_CONTEXT)
        fprintf(stderr, "moe8 " CMD ": prompt %d stopped at the context length %d\n", i, r->n_ctx);
    if (r->pr->n == 1) {
        putchar('\n');
        fflush(stdout);
    } else if (!r->o->print_ids) {
        print_completion(r, i);
    }
}

/* NULL when `path` (canonical) is missing or a regular file; else what it is.
 * The dump is renamed over its path, so anything else there (a FIFO, a
 * device such as /dev/null, a socket) would be replaced by a text file. */
static const char *dump_target_kind(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISREG(sb.st_mode)) return NULL;
    return S_ISDIR(sb.st_mode)    ? "a folder"
           : S_ISFIFO(sb.st_mode) ? "a fifo"
           : S_ISCHR(sb.st_mode)  ? "a character device"
           : S_ISBLK(sb.st_mode)  ? "a block device"
           : S_ISSOCK(sb.st_mode) ? "a socket"
                                  : "a special file";
}

/* Prompt logits of every vocabulary id, "id value" per line, %.9g (round-trips
 * a float), written to "<path>.tmp.<pid>" and renamed over `path` (the
 * canonical path check_dump_path found): a failed run leaves no half file. */
static int dump_logits(const char *shown, const char *path, const float *logits, int32_t n_vocab) {
    char tmp[PATH_MAX + 300];
    const char *kind;
    FILE *f = NULL;
    int fd, ok;
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666)) < 0 || !(f = fdopen(fd, "w"))) {
        fprintf(stderr, "moe8 " CMD ": cannot write --dump-logits file '%s' (via '%s'): %s\n",
                shown, tmp, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        return -1;
    }
    for (int32_t v = 0; v < n_vocab; v++) fprintf(f, "%d %.9g\n", v, logits[v]);
    ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (ok && (kind = dump_target_kind(path))) { /* appeared since check_dump_path */
        fprintf(stderr, "moe8 " CMD ": --dump-logits '%s' is now %s; not replaced\n", shown, kind);
        unlink(tmp);
        return -1;
    }
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "moe8 " CMD ": error writing --dump-logits file '%s': %s\n", shown,
                strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* realpath of `path`; when it does not exist yet, its folder's realpath +
 * "/" + its name. 0, or -1 with errno set. */
static int canonical_path(const char *path, char *out, size_t cap) {
    char buf[PATH_MAX], *copy, *slash, *name;
    const char *folder;
    int rc = -1;
    if (realpath(path, buf)) {
        if ((size_t)snprintf(out, cap, "%s", buf) < cap) return 0;
        errno = ENAMETOOLONG;
        return -1;
    }
    if (errno != ENOENT || !(copy = strdup(path))) return -1;
    slash = strrchr(copy, '/');
    folder = !slash ? "." : slash == copy ? "/" : copy;
    name = slash ? slash + 1 : copy;
    if (slash && slash != copy) *slash = '\0';
    if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
        errno = EISDIR;
    else if (!realpath(folder, buf))
        ; /* errno from realpath: the folder is missing or unreadable */
    else if ((size_t)snprintf(out, cap, "%s%s%s", buf, strcmp(buf, "/") ? "/" : "", name) >= cap)
        errno = ENAMETOOLONG;
    else
        rc = 0;
    free(copy);
    return rc;
}

/* `path` is `dir` or below it (both canonical). */
static int path_inside(const char *path, const char *dir) {
    size_t n = strlen(dir);
    if (!strcmp(dir, "/")) return 1;
    return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

/* --dump-logits never overwrites the model (its files are memory-mapped: a
 * truncated one kills the run), the prompt file (-f, --prompt-ids-file), nor
 * anything but a regular file (as root, renaming over /dev/null replaced the
 * device with a text file). Fills o->dump_real. */
static int check_dump_path(opts *o) {
    char model[PATH_MAX], prompt[PATH_MAX];
    const char *kind;
    if (!o->dump) return 0;
    if (canonical_path(o->dump, o->dump_real, sizeof o->dump_real) != 0) {
        fprintf(stderr, "moe8 " CMD ": --dump-logits '%s': cannot resolve the path: %s\n", o->dump,
                strerror(errno));
        return -1;
    }
    if ((kind = dump_target_kind(o->dump_real))) {
        fprintf(stderr, "moe8 " CMD ": --dump-logits '%s' is %s, expected a regular file (or a "
                "new name): it would be replaced\n", o->dump, kind);
        return -1;
    }
    if (realpath(o->dir, model) && path_inside(o->dump_real, model)) {
        fprintf(stderr, "moe8 " CMD ": --dump-logits '%s' lies inside the model folder '%s' (-m); "
                "write it elsewhere\n", o->dump, o->dir);
        return -1;
    }
    if (o->file && realpath(o->file, prompt) && !strcmp(prompt, o->dump_real)) {
        fprintf(stderr, "moe8 " CMD ": --dump-logits '%s' is the prompt file (-f '%s')\n", o->dump,
                o->file);
        return -1;
    }
    if (o->ids_file && realpath(o->ids_file, prompt) && !strcmp(prompt, o->dump_real)) {
        fprintf(stderr, "moe8 " CMD ": --dump-logits '%s' is the prompt file "
                "(--prompt-ids-file '%s')\n", o->dump, o->ids_file);
        return -1;
    }
    return 0;
}

/* ======================================================================== */
/* Running                                                                   */
/* ======================================================================== */

/* One scheduler step; its events to the output. *dumped: this step gave
 * the prompt's logits to --dump-logits (1 ok, -1 failed; rank 0). */
static int step(runner *r, int *dumped) {
    const moe8_event *ev;
    int32_t n_ev;
    moe8_error err;
    if (moe8_sched_step(r->sched, &ev, &n_ev, &err) != MOE8_OK)
        return r->quiet ? 1 : cli_fail(CMD, &err);
    for (int32_t k = 0; k < n_ev; k++) {
        const int i = (int)(intptr_t)ev[k].user;
        const int first = ev[k].type == MOE8_EVENT_FINISH ? r->count[i] == 0 : r->count[i] == 0;
        if (first) r->n_started++;
        if (first && r->o->dump && ev[k].logits) {
            *dumped = r->quiet ? 1
                      : dump_logits(r->o->dump, r->o->dump_real, ev[k].logits,
                                    moe8_context_n_vocab(r->ctx)) ? -1 : 1;
        }
        if (ev[k].type == MOE8_EVENT_TOKEN) on_token(r, i, &ev[k]);
        else on_finish(r, i, &ev[k]);
    }
    return 0;
}

static int add_requests(runner *r) {
    for (int i = 0; i < r->pr->n; i++) {
        moe8_request q = moe8_request_default();
        moe8_error err;
        int64_t id;
        q.prompt = r->pr->ids[i];
        q.n_prompt = r->pr->len[i];
        q.sampling = r->o->sp;
        q.max_tokens = (int32_t)(r->o->n_predict < INT32_MAX ? r->o->n_predict : INT32_MAX);
        q.ignore_eos = r->o->ignore_eos;
        q.user = (void *)(intptr_t)i;
        if (moe8_sched_add(r->sched, &q, &id, &err) != MOE8_OK) {
            fprintf(stderr, "moe8 " CMD ": prompt %d: %s\n", i, err.message);
            return 1;
        }
    }
    return 0;
}

/* Every prompt to its end. *t_first, *n_first: when every prompt had its
 * first token (or ended), and the tokens generated by then. */
static int agree(moe8_dist *d, int failed);

static int run_all(runner *r, double *t_first, int64_t *n_first) {
    *t_first = 0;
    *n_first = 0;
    while (moe8_sched_pending(r->sched) > 0) {
        int dumped = 0;
        if (step(r, &dumped)) return 1;
        /* a failed dump on rank 0 ends every rank */
        if (dumped && agree(r->dist, dumped < 0)) return 1;
        if (*t_first == 0 && r->n_started == r->pr->n) {
            *t_first = moe8_time_s();
            for (int i = 0; i < r->pr->n; i++) *n_first += r->count[i];
        }
    }
    if (*t_first == 0) *t_first = moe8_time_s();
    return 0;
}

/* ======================================================================== */
/* Set-up and the command                                                    */
/* ======================================================================== */


static double peak_rss_mb(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_maxrss / 1024.0; /* Linux: kilobytes */
}

/* Every rank reports whether it failed (it printed its own message); 1 when
 * any did. Rank 0 names a failed peer so its own output says why it stops. */
static int agree(moe8_dist *d, int failed) {
    moe8_error err;
    moe8_status st;
    if (moe8_dist_size(d) == 1) return failed;
    snprintf(err.message, sizeof err.message, "failed (its message is above)");
    st = moe8_dist_agree(d, failed ? MOE8_ERR_INVALID_ARG : MOE8_OK, &err);
    if (st && !failed && moe8_dist_rank(d) == 0) cli_fail(CMD, &err);
    return st != MOE8_OK;
}

/* The settings every rank must share, and the prompt ids, compared across
 * ranks (a different flag or prompt file on one rank is refused at start). */
static int check_same_settings(moe8_dist *d, const opts *o, const prompts *p) {
    int64_t head[16] = {o->n_predict, o->n_ctx, o->ctx_set, o->chat, o->ignore_eos,
                        o->float_experts, o->tp, o->expert_parallel, o->sp.top_k,
                        (int64_t)o->sp.seed, p->n, p->n_tokens, o->print_ids, o->kv_mb,
                        o->max_batch, o->kv_type};
    float f[4] = {o->sp.temperature, o->sp.top_p, o->sp.min_p, o->comm_timeout};
    size_t n = sizeof head + sizeof f + (size_t)p->n_tokens * sizeof(int32_t), u = 0;
    char *buf = malloc(n);
    moe8_error err;
    int rc = 0;
    if (moe8_dist_size(d) == 1) {
        free(buf);
        return 0;
    }
    if (agree(d, !buf)) {
        free(buf);
        return 1;
    }
    memcpy(buf, head, sizeof head), u += sizeof head;
    memcpy(buf + u, f, sizeof f), u += sizeof f;
    for (int i = 0; i < p->n; i++, u += (size_t)p->len[i - 1] * sizeof(int32_t))
        memcpy(buf + u, p->ids[i], (size_t)p->len[i] * sizeof(int32_t));
    if (moe8_dist_check_same(d, buf, n, "the flags or prompts of 'moe8 generate'", &err))
        rc = moe8_dist_rank(d) == 0 ? cli_fail(CMD, &err) : 1;
    free(buf);
    return rc;
}

/* Load the tokenizer when text goes in or out (required), or when present
 * (for the <|im_end|> stop id). */
static int load_tokenizer(const opts *o, moe8_tokenizer **tok) {
    char path[4096];
    moe8_error err;
    int needed = !(o->prompt_ids || o->ids_file) || !o->print_ids;
    if (snprintf(path, sizeof path, "%s/tokenizer.json", o->dir) >= (int)sizeof path) {
        fprintf(stderr, "moe8 " CMD ": model folder path too long\n");
        return -1;
    }
    if (access(path, F_OK) != 0) {
        if (!needed) return 0;
        fprintf(stderr, "moe8 " CMD ": '%s' not found: text prompts and text output need the "
                "tokenizer (use --prompt-ids or --prompt-ids-file with --ids without one)\n", path);
        return -1;
    }
    if (moe8_tokenizer_load(o->dir, tok, &err) != MOE8_OK) {
        cli_fail(CMD, &err);
        return -1;
    }
    return 0;
}

/* The tokenizer's part of the start-up (cmd_generate runs it on a second thread). */
typedef struct {
    const opts *o;
    moe8_tokenizer **tok;
    prompts *p;
    int bad;
} tok_job;

static int tokenize_prompts(const opts *o, const moe8_tokenizer *tok, prompts *p);

static void *tok_job_run(void *arg) {
    tok_job *j = arg;
    j->bad = load_tokenizer(j->o, j->tok) != 0 || tokenize_prompts(j->o, *j->tok, j->p) != 0;
    return NULL;
}

/* The prompts as given: text (-p, -f) or ids (--prompt-ids, --prompt-ids-file). */
static int read_prompts(const opts *o, prompts *p) {
    if (o->prompt_ids)
        return parse_prompt_ids("--prompt-ids", o->prompt_ids, strlen(o->prompt_ids), p);
    if (o->ids_file) return read_ids_file(o->ids_file, p);
    if (o->file) return read_prompt_file(o->file, p);
    if (prompts_alloc(p, 1, 1) || !(p->text[0] = strdup(o->text))) return -1;
    return 0;
}

static int tokenize_prompts(const opts *o, const moe8_tokenizer *tok, prompts *p) {
    int rc = 0;
    for (int i = 0; p->text && i < p->n && !rc; i++) {
        rc = tokenize_one(tok, i, p->text[i], o->chat ? (o->chat_kwargs ? o->chat_kwargs : "{}") : NULL,
                          &p->ids[i], &p->len[i]);
        p->n_tokens += p->len[i];
    }
    return rc;
}

/* Stop ids: the model's eos ids (config + generation_config) and <|im_end|>. */
static void collect_stops(runner *r, const moe8_config *c, const moe8_tokenizer *tok) {
    int32_t im_end = tok ? moe8_tokenizer_token_id(tok, "<|im_end|>") : -1;
    for (int i = 0; i < c->n_eos_ids; i++) r->stop[r->n_stop++] = (int32_t)c->eos_token_ids[i];
    for (int i = 0; i < r->n_stop && im_end >= 0; i++)
        if (r->stop[i] == im_end) im_end = -1;
    if (im_end >= 0) r->stop[r->n_stop++] = im_end;
}

/* KV pool: --kv-mb, or what every prompt needs for its whole length. */
static uint64_t kv_budget(const opts *o, const moe8_model *m, const prompts *p, int32_t n_ctx) {
    const int64_t bs = MOE8_KV_BLOCK_TOKENS;
    int64_t blocks = 0;
    if (o->kv_mb) return (uint64_t)o->kv_mb << 20;
    for (int i = 0; i < p->n; i++) {
        int64_t n = p->len[i] + o->n_predict;
        blocks += ((n < n_ctx ? n : n_ctx) + bs - 1) / bs;
    }
    return (uint64_t)blocks * moe8_model_kv_block_bytes(m, o->kv_type);
}

static int make_context(const opts *o, moe8_model *m, moe8_tokenizer *tok, const prompts *p,
                        runner *r) {
    moe8_context_params cp = moe8_context_params_default();
    moe8_sched_params sp = moe8_sched_params_default();
    moe8_error err;
    int64_t nb = p->n_tokens < MAX_N_BATCH ? p->n_tokens : MAX_N_BATCH;
    if (o->max_batch && nb > o->max_batch) nb = o->max_batch;
    cp.n_ctx = r->n_ctx;
    cp.n_seq_max = p->n;
    cp.n_batch = (int32_t)(nb > p->n ? nb : p->n);
    cp.n_outputs = p->n;
    cp.n_threads = o->n_threads;
    cp.float_experts = o->float_experts;
    cp.kv_bytes = kv_budget(o, m, p, r->n_ctx);
    cp.kv_type = o->kv_type;
    if (moe8_context_create(m, &cp, &r->ctx, &err) != MOE8_OK) /* agreed by every rank */
        return r->quiet ? 1 : cli_fail(CMD, &err);
    sp.tok = o->print_ids ? NULL : tok;
    sp.eos_ids = r->stop;
    sp.n_eos_ids = r->n_stop;
    if (moe8_sched_create(r->ctx, &sp, &r->sched, &err) != MOE8_OK) return cli_fail(CMD, &err);
    return 0;
}

/* -c as given, or the default clamped to max_position_embeddings. */
static int resolve_n_ctx(const opts *o, const moe8_config *c, int32_t *n_ctx) {
    if (o->n_ctx > c->max_position_embeddings) {
        if (o->ctx_set) {
            fprintf(stderr, "moe8 " CMD ": -c %lld exceeds the model's max_position_embeddings "
                    "%lld\n", (long long)o->n_ctx, (long long)c->max_position_embeddings);
            return -1;
        }
        *n_ctx = (int32_t)c->max_position_embeddings;
        return 0;
    }
    *n_ctx = (int32_t)o->n_ctx;
    return 0;
}

static double rss_mb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

/* With --tp: one line from rank 0, before the stats line, with every rank's
 * resident and peak memory and its seconds in collectives. */
static int print_rank_memory(moe8_dist *d) {
    double mine[3] = {rss_mb(), peak_rss_mb(), moe8_dist_comm_seconds(d)}, *all;
    const int n = moe8_dist_size(d);
    moe8_error err;
    if (n == 1) return 0;
    if (!(all = malloc((size_t)n * sizeof mine))) {
        fprintf(stderr, "moe8 " CMD ": out of memory\n");
        moe8_dist_abort(d, 1); /* returns only with one rank */
        return 1;
    }
    if (moe8_dist_allgather(d, mine, all, sizeof mine, &err) != MOE8_OK) {
        free(all);
        return cli_fail(CMD, &err);
    }
    if (moe8_dist_rank(d) == 0) {
        fprintf(stderr, "ranks=%d mode=%s", n, moe8_dist_expert_parallel(d) ? "ep" : "tp");
        for (int r = 0; r < n; r++)
            fprintf(stderr, " rank%d_rss_mb=%.1f rank%d_peak_rss_mb=%.1f rank%d_comm_s=%.4f", r,
                    all[3 * r], r, all[3 * r + 1], r, all[3 * r + 2]);
        fputc('\n', stderr);
    }
    free(all);
    return 0;
}

static void print_stats(double load_s, const prompts *p, double prefill_s, const runner *r,
                        int64_t n_first, double decode_s) {
    int64_t gen = 0;
    for (int i = 0; i < p->n; i++) gen += r->count[i];
    fprintf(stderr,
            "load_s=%.4f prompt_tokens=%lld prefill_s=%.4f prefill_tok_s=%.2f gen_tokens=%lld "
            "decode_s=%.4f decode_tok_s=%.2f peak_rss_mb=%.1f\n",
            load_s, (long long)p->n_tokens, prefill_s,
            prefill_s > 0 ? (double)p->n_tokens / prefill_s : 0.0, (long long)gen, decode_s,
            decode_s > 0 ? (double)(gen - n_first) / decode_s : 0.0, peak_rss_mb());
}

static int run(const opts *o, moe8_dist *d, moe8_model *m, moe8_tokenizer *tok, prompts *p,
               double t0) {
    runner r;
    double t1, t2, t3;
    int64_t n_first = 0;
    int rc = 1, bad;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.pr = p;
    r.dist = d;
    r.quiet = moe8_dist_rank(d) != 0;
    collect_stops(&r, moe8_model_config(m), tok);
    /* Same model and prompts on every rank (checked at load): these agree. */
    if (resolve_n_ctx(o, moe8_model_config(m), &r.n_ctx) ||
        check_prompts(p, r.n_ctx, moe8_model_config(m)->vocab_size) ||
        make_context(o, m, tok, p, &r))
        goto done;
    bad = runner_alloc(&r) != 0 || add_requests(&r) != 0;
    if (agree(d, bad)) goto done;
    /* The watchdog times generation only: loading and packing a large model may keep a rank
     * away from the collectives far longer than --comm-timeout. */
    moe8_dist_set_timeout(d, o->comm_timeout);
    t1 = moe8_time_s();
    if (run_all(&r, &t2, &n_first)) goto done;
    t3 = moe8_time_s();
    if (p->n > 1 && o->print_ids && !r.quiet) print_ids_batch(&r);
    if (print_rank_memory(d)) goto done;
    if (!r.quiet) print_stats(t1 - t0, p, t2 - t1, &r, n_first, t3 - t2);
    rc = 0;
done:
    moe8_sched_free(r.sched);
    moe8_context_free(r.ctx);
    runner_free(&r);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    opts o;
    prompts p;
    moe8_dist *d = NULL;
    moe8_model *m = NULL;
    moe8_tokenizer *tok = NULL;
    moe8_model_params mp = moe8_model_params_default();
    cli_model_opts(&mp);
    moe8_error err;
    struct stat st;
    double t0;
    int rc = parse_args(argc, argv, &o), bad = 0;
    if (rc) return rc == 1 ? 0 : 2;
    /* MPI starts here, and only with --tp > 1. */
    if (moe8_dist_create(o.tp, o.expert_parallel, &d, &err) != MOE8_OK) return cli_fail(CMD, &err);
    memset(&p, 0, sizeof p);
    rc = 1;
    bad = read_prompts(&o, &p) != 0;
    if (!bad && o.dump && p.n > 1) {
        fprintf(stderr, "moe8 " CMD ": --dump-logits takes a single prompt, '%s' holds %d\n",
                o.file, p.n);
        bad = 1;
    }
    if (!bad && (stat(o.dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        fprintf(stderr, "moe8 " CMD ": model folder '%s' not found (-m)\n", o.dir);
        bad = 1;
    }
    bad = bad || check_dump_path(&o) != 0;
    if (agree(d, bad)) goto done; /* every rank goes on to the load, or none does */
    t0 = moe8_time_s();
    /* The tokenizer loads and the prompts are tokenized on a second thread while
     * the model loads and prepares (maps or builds its packed cache): the two meet
     * only in run(). A failure there is reported at once and agreed after the load. */
    tok_job tj = {&o, &tok, &p, 0};
    pthread_t th;
    const int threaded = pthread_create(&th, NULL, tok_job_run, &tj) == 0;
    if (!threaded) tok_job_run(&tj);
    mp.n_threads = o.n_threads;
    mp.dist = d;
    moe8_status ls = moe8_model_load(o.dir, &mp, &m, &err); /* each agreed by every rank */
    if (ls == MOE8_OK) ls = moe8_model_prepare(m, o.float_experts, o.n_threads, &err);
    if (threaded) pthread_join(th, NULL);
    if (ls != MOE8_OK) {
        if (moe8_dist_rank(d) == 0) cli_fail(CMD, &err);
        goto done;
    }
    if (agree(d, tj.bad) || check_same_settings(d, &o, &p)) goto done;
    rc = run(&o, d, m, tok, &p, t0);
done:
    if (moe8_dist_failure(d, &err)) { /* a rank stopped answering: nothing can finish */
        if (moe8_dist_rank(d) != 0) cli_fail(CMD, &err); /* rank 0 printed it where it failed */
        moe8_dist_abort(d, 1);
    }
    prompts_free(&p);
    moe8_tokenizer_free(tok);
    moe8_model_free(m);
    moe8_dist_free(d);
    return rc;
}
