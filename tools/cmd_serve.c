/*
 * cmd_serve.c — `moe8 serve -m DIR`: an OpenAI-compatible HTTP server
 * (moe8_serve, libmoe8_server) on a model folder.
 *
 * Flow: parse flags (every number checked) -> MPI only with --tp > 1 ->
 * load the tokenizer and the model (every rank) -> moe8_serve until SIGINT
 * or SIGTERM, which stop accepting, let running requests finish for a few
 * seconds (then cancel them, streams with a final event) and exit 0.
 * The log (serve_log.c; stderr or --log-file, text or JSON): a start-up
 * banner (version, kernels, layout, the load's time, then the server's own:
 * model, context, parallel, threads, KV and state pools), exactly one
 * "moe8 serve: listening on http://HOST:PORT ..." line when ready (with the
 * real port, also for --port 0), one access-log line per request, a "stopped"
 * line at the end. Uses only the public headers.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define CMD "serve"

static volatile int g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

#define SYNOPSIS "moe8 serve -m DIR [options]"
#define NOTES "endpoints: POST /v1/completions, /v1/chat/completions, /tokenize, /detokenize;\n" \
              "GET /v1/models, /v1/models/{id}, /health, /version, /metrics (Prometheus);\n" \
              "GET / the chat page (--no-webui turns it off).\n"

typedef struct {
    const char *dir;
    const char *log_level, *log_format, *log_file;
    int tp, expert_parallel, key_from_env;
    int64_t kv_mb, state_mb;
    double comm_timeout, pc_gb;
    moe8_serve_params sp;
} opts;

/* 0 ok, 1 help, 2 bad usage. */
/* The options' agreement with each other, after parsing: 0 or a usage error. */
static int check_opts(const opts *o) {
    if (o->sp.api_key && !o->sp.api_key[0]) {
        return cli_usage_err(CMD, "%s is empty: give a key, or leave it out to serve without "
                             "authentication", o->key_from_env ? "MOE8_API_KEY" : "--api-key");
    }
    if (o->sp.max_buffered < o->sp.max_body) {
        return cli_usage_err(CMD, "--max-buffered (%llu) must be at least --max-body (%llu)",
                             (unsigned long long)o->sp.max_buffered,
                             (unsigned long long)o->sp.max_body);
    }
    if (o->expert_parallel && o->tp < 2) {
        return cli_usage_err(CMD, "--expert-parallel needs --tp N with N > 1");
    }
    if (o->log_level && strcmp(o->log_level, "error") && strcmp(o->log_level, "warn") &&
        strcmp(o->log_level, "info") && strcmp(o->log_level, "debug"))
        return cli_bad_value(CMD, "--log-level", "one of error|warn|info|debug", o->log_level);
    if (o->log_format && strcmp(o->log_format, "text") && strcmp(o->log_format, "json"))
        return cli_bad_value(CMD, "--log-format", "one of text|json", o->log_format);
    return 0;
}

static const char *const parsers[9] = {"hermes", "deepseek_v3", "mistral", "glm45", "glm4_moe", "glm47",
                                       "minimax_m2", "qwen3_coder", "openai"};
static const char *const reasonings[6] = {"deepseek_r1", "qwen3", "glm45", "minimax_m2",
                                          "minimax_m2_append_think", "openai_gptoss"};

static int apply_opts(opts *o, int no_prefix, int webui, int no_webui, int parser, int reasoning,
                      const char *env_key);

static int parse(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->sp = moe8_serve_params_default();
    o->tp = 1;
    o->comm_timeout = 60;
    o->sp.api_key = getenv("MOE8_API_KEY");
    o->key_from_env = o->sp.api_key != NULL;
    const char *env_key = o->sp.api_key;
    int no_prefix = 0, parser = -1, reasoning = -1, webui = 0, no_webui = 0;
    const cli_opt opts[] = {
        {"-m", NULL, CLI_STR, &o->dir, .arg = "DIR",
         .help = "model folder (config.json, *.safetensors, tokenizer.json)"},
        {"--host", NULL, CLI_STR, &o->sp.host, .arg = "ADDR",
         .help = "address to listen on (default 127.0.0.1)"},
        {"--port", NULL, CLI_INT, &o->sp.port, 0, 65535, .arg = "N",
         .help = "port (default 8080; 0 picks a free one, printed when ready)"},
        {"--parallel", NULL, CLI_INT, &o->sp.parallel, 1, 4096, .arg = "N",
         .help = "most requests running at once (default 16)"},
        {"--ctx-size", NULL, CLI_INT, &o->sp.ctx_size, 1, INT32_MAX, .arg = "N",
         .help = "longest prompt + completion (default min(4096, the model's))"},
        {"--max-batch-tokens", NULL, CLI_INT, &o->sp.max_batch_tokens, 1, 65536, .arg = "N",
         .help = "most tokens per forward pass (default 2048)"},
        {"--kv-mb", NULL, CLI_I64, &o->kv_mb, 1, (long)1 << 24, .arg = "N",
         .help = "KV cache budget in MiB (default: parallel x ctx-size)"},
        {"--state-mb", NULL, CLI_I64, &o->state_mb, 1, (long)1 << 24, .arg = "N",
         .help = "hybrid models (Gated DeltaNet): recurrent-state pool in MiB;\n"
         "each running request holds a slot, the rest keep prefix-cache\n"
         "snapshots (default: a slot per sequence + 256 MiB of snapshots)"},
        {"--threads", NULL, CLI_INT, &o->sp.n_threads, 1, 4096, .arg = "N",
         .help = "threads (default: the CPUs it may use, less one from 4 up)"},
        {"--api-key", NULL, CLI_STR, &o->sp.api_key, .arg = "KEY",
         .help = "require 'Authorization: Bearer KEY' (or env MOE8_API_KEY),\n"
         "checked from the headers before any body byte; /health,\n/version, /metrics and the page at / stay open"},
        {"--served-model-name", NULL, CLI_STR, &o->sp.served_model_name, .arg = "N",
         .help = "the model's name in the API (default: the folder's name)"},
        {"--max-queue", NULL, CLI_INT, &o->sp.max_queue, 1, 1 << 20, .arg = "N",
         .help = "waiting requests before 503 (default 256)"},
        {"--no-prefix-cache", NULL, CLI_FLAG, &no_prefix,
         .help = "do not reuse the KV of shared prompt prefixes"},
        {"--kv-type", NULL, CLI_KV, &o->sp.kv_type, .arg = "T",
         .help = "KV cache elements: f16 (default), bf16, or f32 (exact)"},
        {"--prompt-cache-dir", NULL, CLI_STR, &o->sp.prompt_cache_dir, .arg = "DIR",
         .help = "keep full KV blocks of finished prompts as verified files in\n"
         "DIR (made when missing; processes may share it) and load them\n"
         "for a prompt whose prefix is not in memory (default: off)"},
        {"--prompt-cache-gb", NULL, CLI_DOUBLE, &o->pc_gb, .dlo = 0, .dhi = 1e9, .arg = "N",
         .help = "bound DIR's block files to N GiB, least recently used removed\n"
         "first (default: no bound)"},
        {"--default-chat-template-kwargs", NULL, CLI_STR, &o->sp.default_chat_template_kwargs,
         .arg = "JSON", .help = "template variables under each request's chat_template_kwargs,\n"
         "e.g. '{\"enable_thinking\": false}' (default: the template's)"},
        {"--tool-call-parser", NULL, CLI_CHOICE, &parser,
         .choices = "hermes,deepseek_v3,mistral,glm45,glm4_moe,glm47,minimax_m2,qwen3_coder,openai", .arg = "F",
         .help = "the model's tool-call format: hermes (Qwen3, Qwen3-Next),\n"
         "deepseek_v3, mistral, glm45 (GLM-4.5/4.6; or glm4_moe), glm47,\n"
         "minimax_m2, qwen3_coder (Qwen3.5/3.6, Qwen3-Coder), openai\n"
         "(gpt-oss's harmony channels: reasoning, calls and content)\n"
         "(default: the one its chat template teaches)"},
        {"--reasoning-parser", NULL, CLI_CHOICE, &reasoning,
         .choices = "deepseek_r1,qwen3,glm45,minimax_m2,minimax_m2_append_think,openai_gptoss", .arg = "R",
         .help = "minimax_m2_append_think keeps the think block in content;\n"
         "the others split it off into reasoning_content (default: the\n"
         "first for MiniMax-M2's template, a split for any other)"},
        {"--responses-store", NULL, CLI_INT, &o->sp.responses_store, 0, 1 << 20, .arg = "N",
         .help = "responses kept for previous_response_id (least recently used\n"
         "dropped first; default 128; 0: none)"},
        {"--allowed-origins", NULL, CLI_STR, &o->sp.allowed_origins, .arg = "LIST",
         .help = "comma-separated origins browsers may call from (CORS), or '*'\n(default: none)"},
        {"--timeout", NULL, CLI_DOUBLE, &o->sp.timeout_s, .dlo = 0.001, .dhi = 86400, .arg = "S",
         .help = "close a kept-alive connection idle this long, and one whose\n"
         "client stops reading its answer or sending its body (default 30)"},
        {"--header-timeout", NULL, CLI_DOUBLE, &o->sp.header_timeout_s, .dlo = 0.001, .dhi = 86400,
         .arg = "S", .help = "the request line and headers must arrive within S of the\n"
         "connection (or of the request's first byte): else 408 (default 10)"},
        {"--body-min-rate", NULL, CLI_DOUBLE, &o->sp.body_min_rate, .dlo = 0, .dhi = 1e12, .arg = "B",
         .help = "bytes/s a body must average after --header-timeout of grace:\n"
         "else 408 (default 4096; 0: no minimum)"},
        {"--max-body", NULL, CLI_SIZE, &o->sp.max_body, .arg = "N[K|M|G]",
         .help = "largest request body: else 413 (default 4M)"},
        {"--max-buffered", NULL, CLI_SIZE, &o->sp.max_buffered, .arg = "N[K|M|G]",
         .help = "bytes of unfinished request heads and bodies held at once:\n"
         "past it new connections and bodies get 503 (default 256M)"},
        {"--max-connections", NULL, CLI_INT, &o->sp.max_connections, 1, 1 << 24, .arg = "N",
         .help = "open connections: past it 503 (default 8192, within ulimit -n)"},
        {"--max-connections-per-ip", NULL, CLI_INT, &o->sp.max_connections_per_ip, 0, 1 << 24,
         .arg = "N", .help = "open connections from one address: past it 503\n(default 1024; 0: no limit)"},
        {"--webui", NULL, CLI_FLAG, &webui,
         .help = "serve the chat page at GET / (the default)"},
        {"--no-webui", NULL, CLI_FLAG, &no_webui,
         .help = "no chat page: GET / is a 404"},
        {"--tp", NULL, CLI_INT, &o->tp, 1, 4096, .arg = "N",
         .help = "run as N ranks under mpirun -np N (rank 0 serves HTTP)"},
        {"--comm-timeout", NULL, CLI_DOUBLE, &o->comm_timeout, .dlo = 0, .dhi = 86400, .arg = "S",
         .help = "with --tp: a rank silent this long in a collective ends the\n"
         "server, named (default 60; 0 waits forever)"},
        {"--expert-parallel", NULL, CLI_FLAG, &o->expert_parallel,
         .help = "with --tp: split the experts as whole experts"},
        {"--log-level", NULL, CLI_STR, &o->log_level, .arg = "L",
         .help = "error, warn, info (default: the start-up banner, one line per\n"
         "request, notes) or debug (also a line when each request arrives)"},
        {"--log-format", NULL, CLI_STR, &o->log_format, .arg = "F",
         .help = "text (default: 'moe8 serve: MESSAGE key=value... id=REQUEST-ID\n"
         "ts=UTC-TIME level=L') or json (one object per line)"},
        {"--log-file", NULL, CLI_STR, &o->log_file, .arg = "FILE",
         .help = "append the log to FILE instead of stderr"},
        {"--sleep-idle-seconds", NULL, CLI_DOUBLE, &o->sp.sleep_idle_s, .dlo = 0, .dhi = 1e9, .arg = "S",
         .help = "after S idle seconds drop the KV pool and page out the mapped\nweights; the next request wakes it (default 0: never)"},
        {0},
    };
    const int rc = cli_parse(CMD, SYNOPSIS, opts, NOTES, argc, argv);
    if (rc) return rc < 0 ? 1 : rc;
    return apply_opts(o, no_prefix, webui, no_webui, parser, reasoning, env_key);
}

/* What parse() read, cross-checked and put into the serve parameters. */
static int apply_opts(opts *o, int no_prefix, int webui, int no_webui, int parser, int reasoning,
                      const char *env_key) {
    if (no_prefix) o->sp.prefix_cache = 0;
    if (webui && no_webui) return cli_usage_err(CMD, "--webui and --no-webui contradict each other");
    if (no_webui) o->sp.webui = 0;
    if (parser >= 0) o->sp.tool_call_parser = parsers[parser];
    if (reasoning >= 0) o->sp.reasoning_parser = reasonings[reasoning];
    if (o->sp.api_key != env_key) o->key_from_env = 0; /* --api-key given */
    if (!o->dir) return cli_usage_err(CMD, "-m DIR is required (see -h)");

    const int bad = check_opts(o);
    if (bad) return bad;
    o->sp.kv_bytes = (uint64_t)o->kv_mb << 20;
    o->sp.state_bytes = (uint64_t)o->state_mb << 20;
    o->sp.prompt_cache_bytes = (uint64_t)(o->pc_gb * 1073741824.0);
    o->sp.model_dir = o->dir;
    return 0;
}

/* Before the load (which can take long): what runs, on rank 0 (mpirun's rank
 * variables: only the first rank speaks before the group exists). */
static void start_banner(const opts *o) {
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    const char *isa_env = getenv("MOE8_ISA");
    if (!rank) rank = getenv("PMI_RANK");
    if (rank && strcmp(rank, "0")) return;
    cli_log(MOE8_LOG_INFO, "banner", "moe8 %s, pid %d, kernels %s (%s%s; this build has %s)", moe8_version(),
            (int)getpid(), moe8_kernel_isa(), isa_env ? "MOE8_ISA=" : "the best table this CPU runs",
            isa_env ? isa_env : "", moe8_kernel_tables());
    if (o->tp > 1)
        cli_log(MOE8_LOG_INFO, "banner", "layout: --tp %d, %s; rank 0 serves HTTP, every rank computes", o->tp,
                o->expert_parallel ? "experts split as whole experts (expert parallel), attention split by heads"
                                   : "every weight split by columns/rows (tensor parallel)");
    else cli_log(MOE8_LOG_INFO, "banner", "layout: one process (no --tp)");
    cli_log(MOE8_LOG_INFO, "banner", "loading %s", o->dir);
}

/* On the tokenizer's thread: a template the chat endpoint cannot use is said
 * at start (rank 0), and the server runs without it. */
static int note_template(void *user, const cli_session *s) {
    const moe8_chat_template *ct;
    moe8_error err;
    (void)user;
    if (moe8_tokenizer_chat_template(s->tok, &ct, &err) != MOE8_OK && s->rank0)
        cli_err(CMD, "note: /v1/chat/completions will answer 400: %s", err.message);
    return 0;
}

int cmd_serve(int argc, char **argv) {
    opts o;
    cli_session s;
    moe8_error err;
    struct sigaction sa;
    int rc = parse(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : 2;
    if (!o.sp.n_threads) o.sp.n_threads = cli_default_threads(1);
    /* The HTTP thread shares the cores with the OpenMP team: idle team
     * threads must sleep, not spin. libgomp reads OMP_WAIT_POLICY when it is
     * loaded, so the process starts again with it set (argv[-1] is the
     * program: main passes argv + 1). */
    if (!getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv - 1);
        /* exec failed: go on with the default policy */
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    cli_open_params op = cli_open_params_of(o.dir, o.tp, o.expert_parallel, o.sp.n_threads);
    op.timeout = o.comm_timeout;
    op.tokenizer = CLI_TOK_REQUIRED;
    op.with_tok = note_template;
    if ((rc = cli_log_setup(CMD, o.log_level, o.log_format, o.log_file))) return rc;
    start_banner(&o);
    rc = 1;
    if (cli_open(CMD, &op, &s)) goto done;
    if (s.rank0) cli_log(MOE8_LOG_INFO, "banner", "loaded in %.1f s", moe8_time_s() - s.t_load);
    o.sp.dist = s.dist;
    o.sp.on_record = cli_log_record;
    if (moe8_serve(s.model, s.tok, &o.sp, &g_stop, &err) != MOE8_OK) {
        cli_fail(CMD, &err);
        if (moe8_dist_size(s.dist) > 1) moe8_dist_abort(s.dist, 1); /* a rank left behind never hangs */
        goto done;
    }
    rc = 0;
done:
    cli_close(CMD, &s);
    cli_log_close();
    return rc;
}
