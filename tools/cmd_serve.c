/*
 * cmd_serve.c — `moe8 serve -m DIR`: an OpenAI-compatible HTTP server
 * (moe8_serve, libmoe8_server) on a model folder.
 *
 * Flow: parse flags (every number checked) -> MPI only with --tp > 1 ->
 * load the tokenizer and the model (every rank) -> moe8_serve until SIGINT
 * or SIGTERM, which stop accepting, let running requests finish for a few
 * seconds (then cancel them, streams with a final event) and exit 0.
 * stderr: exactly one "moe8 serve: listening on http://HOST:PORT" line when
 * ready (with the real port, also for --port 0), then one access-log line
 * per request. Uses only the public header.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

#define CMD "serve"

static volatile int g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *f) {
    fprintf(f,
        "usage: moe8 serve -m DIR [options]\n"
        "  -m DIR                 model folder (config.json, *.safetensors, tokenizer.json)\n"
        "  --host ADDR            address to listen on (default 127.0.0.1)\n"
        "  --port N               port (default 8080; 0 picks a free one, printed when ready)\n"
        "  --parallel N           most requests running at once (default 16)\n"
        "  --ctx-size N           longest prompt + completion (default min(4096, the model's))\n"
        "  --max-batch-tokens N   most tokens per forward pass (default 2048)\n"
        "  --kv-mb N              KV cache budget in MiB (default: parallel x ctx-size)\n"
        "  --threads N            threads (default: OpenMP's)\n"
        "  --api-key KEY          require 'Authorization: Bearer KEY' (or env MOE8_API_KEY),\n"
        "                         checked from the headers before any body byte; /health,\n"
        "                         /version and /metrics stay open\n"
        "  --served-model-name N  the model's name in the API (default: the folder's name)\n"
        "  --max-queue N          waiting requests before 503 (default 256)\n"
        "  --no-prefix-cache      do not reuse the KV of shared prompt prefixes\n"
        "  --kv-type T            KV cache elements: f16 (default), bf16, or f32 (exact)\n"
        "  --default-chat-template-kwargs JSON\n"
        "                         template variables under each request's chat_template_kwargs,\n"
        "                         e.g. '{\"enable_thinking\": false}' (default: the template's)\n"
        "  --tool-call-parser F   the model's tool-call format: hermes (Qwen), deepseek_v3,\n"
        "                         mistral (default: the one its chat template teaches)\n"
        "  --allowed-origins LIST comma-separated origins browsers may call from (CORS), or '*'\n"
        "                         (default: none)\n"
        "  --timeout S            close a kept-alive connection idle this long, and one whose\n"
        "                         client stops reading its answer or sending its body (default 30)\n"
        "  --header-timeout S     the request line and headers must arrive within S of the\n"
        "                         connection (or of the request's first byte): else 408 (default 10)\n"
        "  --body-min-rate B      bytes/s a body must average after --header-timeout of grace:\n"
        "                         else 408 (default 4096; 0: no minimum)\n"
        "  --max-body N[K|M|G]    largest request body: else 413 (default 4M)\n"
        "  --max-buffered N[K|M|G]  bytes of unfinished request heads and bodies held at once:\n"
        "                         past it new connections and bodies get 503 (default 256M)\n"
        "  --max-connections N    open connections: past it 503 (default 8192, within ulimit -n)\n"
        "  --max-connections-per-ip N  open connections from one address: past it 503\n"
        "                         (default 1024; 0: no limit)\n"
        "  --tp N                 run as N ranks under mpirun -np N (rank 0 serves HTTP)\n"
        "  --comm-timeout S       with --tp: a rank silent this long in a collective ends the\n"
        "                         server, named (default 60; 0 waits forever)\n"
        "  --expert-parallel      with --tp: split the experts as whole experts\n"
        "  -h, --help             this text\n"
        "endpoints: POST /v1/completions, /v1/chat/completions, /tokenize, /detokenize;\n"
        "GET /v1/models, /v1/models/{id}, /health, /version, /metrics (Prometheus).\n");
}

typedef struct {
    const char *dir;
    int tp, expert_parallel, key_from_env;
    int64_t kv_mb;
    double comm_timeout;
    moe8_serve_params sp;
} opts;

static int num(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (!*s || *end || errno || !(v >= lo && v <= hi)) {
        fprintf(stderr, "moe8 " CMD ": %s wants a number in [%g, %g], got '%s'\n", flag, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int integer(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    long long v;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "moe8 " CMD ": %s wants an integer in [%lld, %lld], got '%s'\n", flag,
                (long long)lo, (long long)hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* 0 ok, 1 help, 2 bad usage. */
static int parse(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->sp = moe8_serve_params_default();
    o->tp = 1;
    o->comm_timeout = 60;
    o->sp.api_key = getenv("MOE8_API_KEY");
    o->key_from_env = o->sp.api_key != NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
        double d;
        int rc = 0, valued = 1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(a, "--no-prefix-cache")) o->sp.prefix_cache = 0, valued = 0;
        else if (!strcmp(a, "--expert-parallel")) o->expert_parallel = 1, valued = 0;
        else if (!v) {
            fprintf(stderr, "moe8 " CMD ": %s needs a value (or is unknown; see -h)\n", a);
            return 2;
        } else if (!strcmp(a, "-m")) o->dir = v;
        else if (!strcmp(a, "--host")) o->sp.host = v;
        else if (!strcmp(a, "--api-key")) o->sp.api_key = v, o->key_from_env = 0;
        else if (!strcmp(a, "--served-model-name")) o->sp.served_model_name = v;
        else if (!strcmp(a, "--allowed-origins")) o->sp.allowed_origins = v;
        else if (!strcmp(a, "--tool-call-parser")) {
            if (strcmp(v, "hermes") && strcmp(v, "deepseek_v3") && strcmp(v, "mistral")) {
                fprintf(stderr, "moe8 " CMD ": --tool-call-parser wants hermes, deepseek_v3 or mistral, got '%s'\n", v);
                return 2;
            }
            o->sp.tool_call_parser = v;
        }
        else if (!strcmp(a, "--default-chat-template-kwargs")) o->sp.default_chat_template_kwargs = v;
        else if (!strcmp(a, "--kv-type")) {
            if (cli_kv_type(v, &o->sp.kv_type)) {
                fprintf(stderr, "moe8 " CMD ": --kv-type wants f32, f16 or bf16, got '%s'\n", v);
                return 2;
            }
        }
        else if (!strcmp(a, "--port")) rc = integer(a, v, 0, 65535, &x), o->sp.port = (int)x;
        else if (!strcmp(a, "--parallel")) rc = integer(a, v, 1, 4096, &x), o->sp.parallel = (int)x;
        else if (!strcmp(a, "--ctx-size")) rc = integer(a, v, 1, INT32_MAX, &x), o->sp.ctx_size = (int32_t)x;
        else if (!strcmp(a, "--max-batch-tokens")) rc = integer(a, v, 1, 65536, &x), o->sp.max_batch_tokens = (int32_t)x;
        else if (!strcmp(a, "--kv-mb")) rc = integer(a, v, 1, (int64_t)1 << 24, &o->kv_mb);
        else if (!strcmp(a, "--threads")) rc = integer(a, v, 1, 4096, &x), o->sp.n_threads = (int)x;
        else if (!strcmp(a, "--max-queue")) rc = integer(a, v, 1, 1 << 20, &x), o->sp.max_queue = (int)x;
        else if (!strcmp(a, "--timeout")) rc = num(a, v, 0.001, 86400, &d), o->sp.timeout_s = d;
        else if (!strcmp(a, "--header-timeout")) rc = num(a, v, 0.001, 86400, &d), o->sp.header_timeout_s = d;
        else if (!strcmp(a, "--body-min-rate")) rc = num(a, v, 0, 1e12, &d), o->sp.body_min_rate = d;
        else if (!strcmp(a, "--max-body") || !strcmp(a, "--max-buffered")) {
            uint64_t b;
            if (cli_parse_size(v, &b)) {
                fprintf(stderr, "moe8 " CMD ": %s wants a byte count (N, or N with K, M or G), got '%s'\n",
                        a, v);
                return 2;
            }
            if (a[6] == 'b' && a[7] == 'o') o->sp.max_body = b;
            else o->sp.max_buffered = b;
        }
        else if (!strcmp(a, "--max-connections")) rc = integer(a, v, 1, 1 << 24, &x), o->sp.max_connections = (int)x;
        else if (!strcmp(a, "--max-connections-per-ip"))
            rc = integer(a, v, 0, 1 << 24, &x), o->sp.max_connections_per_ip = (int)x;
        else if (!strcmp(a, "--tp")) rc = integer(a, v, 1, 4096, &x), o->tp = (int)x;
        else if (!strcmp(a, "--comm-timeout")) rc = num(a, v, 0, 86400, &o->comm_timeout);
        else {
            fprintf(stderr, "moe8 " CMD ": unknown option '%s' (see -h)\n", a);
            return 2;
        }
        if (rc) return 2;
        i += valued;
    }
    if (!o->dir) {
        fprintf(stderr, "moe8 " CMD ": -m DIR is required (see -h)\n");
        return 2;
    }
    if (o->sp.api_key && !o->sp.api_key[0]) {
        fprintf(stderr, "moe8 " CMD ": %s is empty: give a key, or leave it out to serve without "
                "authentication\n", o->key_from_env ? "MOE8_API_KEY" : "--api-key");
        return 2;
    }
    if (o->sp.max_buffered < o->sp.max_body) {
        fprintf(stderr, "moe8 " CMD ": --max-buffered (%llu) must be at least --max-body (%llu)\n",
                (unsigned long long)o->sp.max_buffered, (unsigned long long)o->sp.max_body);
        return 2;
    }
    if (o->expert_parallel && o->tp < 2) {
        fprintf(stderr, "moe8 " CMD ": --expert-parallel needs --tp N with N > 1\n");
        return 2;
    }
    o->sp.kv_bytes = (uint64_t)o->kv_mb << 20;
    o->sp.model_dir = o->dir;
    return 0;
}

static void print_line(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "moe8 " CMD ": %s\n", line);
    fflush(stderr);
}

int cmd_serve(int argc, char **argv) {
    opts o;
    moe8_dist *d = NULL;
    moe8_model *m = NULL;
    moe8_tokenizer *tok = NULL;
    moe8_model_params mp = moe8_model_params_default();
    cli_model_opts(&mp);
    moe8_error err;
    struct sigaction sa;
    struct stat sb;
    int rc = parse(argc, argv, &o), bad = 0;
    if (rc) return rc == 1 ? 0 : 2;
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
    if (moe8_dist_init(o.tp, o.expert_parallel, &d, &err) != MOE8_OK) return cli_fail(CMD, &err);
    moe8_dist_set_timeout(d, o.comm_timeout);
    o.sp.dist = d;
    o.sp.on_ready = print_line;
    o.sp.on_access = print_line;
    o.sp.on_log = print_line;
    rc = 1;
    if (stat(o.dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "moe8 " CMD ": model folder '%s' not found (-m)\n", o.dir);
        bad = 1;
    } else if (moe8_tokenizer_load(o.dir, &tok, &err) != MOE8_OK) {
        cli_fail(CMD, &err);
        bad = 1;
    } else {
        const moe8_chat_template *ct;
        if (moe8_tokenizer_chat_template(tok, &ct, &err) != MOE8_OK && moe8_dist_rank(d) == 0)
            fprintf(stderr, "moe8 " CMD ": note: /v1/chat/completions will answer 400: %s\n",
                    err.message);
    }
    if (moe8_dist_size(d) > 1 &&
        moe8_dist_agree(d, bad ? MOE8_ERR_INVALID_ARG : MOE8_OK, &err) != MOE8_OK && !bad) {
        if (moe8_dist_rank(d) == 0) cli_fail(CMD, &err);
        bad = 1;
    }
    if (bad) goto done;
    mp.n_threads = o.sp.n_threads;
    mp.dist = d;
    if (moe8_model_load(o.dir, &mp, &m, &err) != MOE8_OK) { /* agreed by every rank */
        if (moe8_dist_rank(d) == 0) cli_fail(CMD, &err);
        goto done;
    }
    if (moe8_serve(m, tok, &o.sp, &g_stop, &err) != MOE8_OK) {
        cli_fail(CMD, &err);
        if (moe8_dist_size(d) > 1) moe8_dist_abort(d, 1); /* a rank left behind never hangs */
        goto done;
    }
    rc = 0;
done:
    moe8_model_free(m);
    moe8_tokenizer_free(tok);
    moe8_dist_free(d);
    return rc;
}
