/*
 * cmd_generate.c — `moe8 generate -m DIR`: run a model folder on one prompt
 * or a batch of prompts and print what it generates.
 *
 * Flow: parse flags (strictly: every number checked for syntax and range) ->
 * open the group, check the folder, collect the prompts (-p TEXT, -f FILE with
 * one prompt per line, or --prompt-ids[-file]) and check --dump-logits ->
 * load the model and, when text is involved, the tokenizer (cli_open: the
 * tokenizer loads and the prompts are tokenized on a second thread while the
 * model loads and prepares) -> the same flags and prompts on every rank ->
 * run them (generate_run.c) and print (generate_output.c). The prompts are
 * read and tokenized in generate_prompts.c.
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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "generate.h"

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
         "'{\"enable_thinking\": false}' (as vLLM's chat_template_kwargs)"},
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
         .help = "threads (default: the CPUs it may use)"},
        {"--kv-mb", NULL, CLI_I64, &o->kv_mb, 1, (long)1 << 24, .arg = "N",
         .help = "KV cache budget in MiB, paged in blocks of 16 positions and\n"
         "shared by the prompts (default: what every prompt needs for\n"
         "its whole length); prompts wait or are recomputed when it is\n"
         "short, with the same output"},
        {"--state-mb", NULL, CLI_I64, &o->state_mb, 1, (long)1 << 24, .arg = "N",
         .help = "hybrid models (Gated DeltaNet): recurrent-state pool in MiB;\n"
         "each running request holds a slot, the rest keep prefix-cache\n"
         "snapshots (default: a slot per sequence + 256 MiB of snapshots)"},
        {"--kv-type", NULL, CLI_KV, &o->kv_type, .arg = "T",
         .help = "KV cache elements: f16 (default), bf16 (half the memory of f32,\n"
         "K/V rounded to nearest even) or f32 (exact)"},
        {"--prompt-cache-dir", NULL, CLI_STR, &o->pc_dir, .arg = "DIR", .help = "keep prompts' KV "
         "blocks as verified files in DIR, reused after a restart (default: off)"},
        {"--prompt-cache-gb", NULL, CLI_DOUBLE, &o->pc_gb, .dlo = 0, .dhi = 1e9, .arg = "N",
         .help = "bound DIR to N GiB, least recently used first (default: none)"},
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
    if (!o->dir) return cli_usage_err(CMD, "no model folder (-m DIR)");
    if (!!o->text + !!o->file + !!o->prompt_ids + !!o->ids_file != 1) {
        return cli_usage_err(CMD, "give exactly one of -p TEXT, -f FILE, --prompt-ids IDS, "
                             "--prompt-ids-file FILE");
    }
    if (o->expert_parallel && o->tp < 2) {
        return cli_usage_err(CMD, "--expert-parallel needs --tp N with N >= 2");
    }
    if (o->chat_kwargs && !o->chat) {
        return cli_usage_err(CMD, "--chat-template-kwargs goes with --chat");
    }
    if (o->chat && (o->prompt_ids || o->ids_file)) {
        return cli_usage_err(CMD, "--chat formats text prompts; it cannot wrap %s",
                             o->prompt_ids ? "--prompt-ids" : "--prompt-ids-file");
    }
    return 0;
}

/* The settings every rank must share, and the prompt ids, compared across
 * ranks (a different flag or prompt file on one rank is refused at start). */
static int check_same_settings(moe8_dist *d, const opts *o, const prompts *p) {
    int64_t head[17] = {o->n_predict, o->n_ctx, o->ctx_set, o->chat, o->ignore_eos,
                        o->float_experts, o->tp, o->expert_parallel, o->sp.top_k,
                        (int64_t)o->sp.seed, p->n, p->n_tokens, o->print_ids, o->kv_mb,
                        o->max_batch, o->kv_type, o->state_mb};
    float f[4] = {o->sp.temperature, o->sp.top_p, o->sp.min_p, o->comm_timeout};
    size_t n = sizeof head + sizeof f + (size_t)p->n_tokens * sizeof(int32_t), u = 0;
    char *buf = malloc(n);
    moe8_error err;
    int rc = 0;
    if (moe8_dist_size(d) == 1) {
        free(buf);
        return 0;
    }
    if (cli_agree(CMD, d, !buf)) {
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

/* What the start-up hooks work on. */
typedef struct {
    opts *o;
    prompts *p;
} gen_inputs;

/* Before loading, on each rank: the prompts read, and --dump-logits checked. */
static int check_inputs(void *user, cli_session *s) {
    gen_inputs *in = user;
    (void)s;
    if (gen_read_prompts(in->o, in->p)) return 1;
    if (in->o->dump && in->p->n > 1)
        return cli_err(CMD, "--dump-logits takes a single prompt, '%s' holds %d", in->o->file,
                       in->p->n);
    return gen_check_dump_path(in->o) != 0;
}

/* On the tokenizer's thread, while the model loads. */
static int tokenize(void *user, const cli_session *s) {
    gen_inputs *in = user;
    return gen_tokenize_prompts(in->o, s->tok, in->p) != 0;
}

int cmd_generate(int argc, char **argv) {
    opts o;
    prompts p;
    cli_session s;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : 2;
    if (!o.n_threads) o.n_threads = cli_default_threads(0);
    memset(&p, 0, sizeof p);
    gen_inputs in = {&o, &p};
    cli_open_params op = cli_open_params_of(o.dir, o.tp, o.expert_parallel, o.n_threads);
    op.prepare = 1;
    op.float_experts = o.float_experts;
    /* Text in or out needs the tokenizer; else it loads when present (the <|im_end|> stop id). */
    op.tokenizer = !(o.prompt_ids || o.ids_file) || !o.print_ids ? CLI_TOK_REQUIRED
                                                                   : CLI_TOK_IF_PRESENT;
    op.tok_hint = "text prompts and text output need the tokenizer (use --prompt-ids or "
                  "--prompt-ids-file with --ids without one)";
    op.check = check_inputs;
    op.with_tok = tokenize;
    op.user = &in;
    rc = cli_open(CMD, &op, &s);
    if (!rc) rc = check_same_settings(s.dist, &o, &p);
    if (!rc) rc = gen_run(&o, s.dist, s.model, s.tok, &p, s.t_load);
    gen_prompts_free(&p);
    cli_close(CMD, &s);
    return rc;
}
