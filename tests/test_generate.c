/*
 * test_generate.c — `moe8 generate` (the CLI binary at MOE8_CLI) against the
 * library API called directly here: greedy and seeded-sampling ids equal
 * moe8_generate's, --dump-logits equals moe8_decode's logits bit for bit, a
 * batch of prompts equals each prompt alone, stop ids (config.json,
 * generation_config.json, the tokenizer's <|im_end|>) end generation exactly
 * at the first stop id, -n 0, the stats line, text output (streamed and
 * batched) equals the library's detokenization, every bad input fails with a
 * message naming it, and 500 decode steps run clean with a flat peak RSS.
 *
 * Models: tiny fixtures (fixture_model.h) — "small" (W8A8, vocab 256, no
 * tokenizer: driven with --prompt-ids and --ids) and "text" (vocab 151669 =
 * the Qwen3 tokenizer's, with the real tokenizer files).
 */
#include <dirent.h>
#include <sys/wait.h>

#include "test.h"
#include "fixture_model.h"

#define MAXN 512
#define QWEN_VOCAB 151669

static char g_out[1 << 20], g_err[1 << 16];

/* ---- helpers --------------------------------------------------------------- */

static void read_text(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
}

/* Run `moe8 generate ARGS` (killed after `seconds` when > 0: exit 124);
 * stdout in g_out, stderr in g_err; exit status. */
static int cli_within(int seconds, const char *args) {
    char cmd[24576], out[4200], err[4200], limit[32] = "";
    int rc;
    snprintf(out, sizeof out, "%s/gen_stdout.txt", MOE8_TEST_TMP);
    snprintf(err, sizeof err, "%s/gen_stderr.txt", MOE8_TEST_TMP);
    if (seconds > 0) snprintf(limit, sizeof limit, "timeout %d ", seconds);
    snprintf(cmd, sizeof cmd, "%s'%s' generate %s >'%s' 2>'%s'", limit, MOE8_CLI, args, out, err);
    rc = system(cmd);
    read_text(out, g_out, sizeof g_out);
    read_text(err, g_err, sizeof g_err);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static int cli(const char *args) { return cli_within(0, args); }

/* 1 when no entry of `dir` has a name containing `part`. */
static int no_tmp_files(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d))) found |= strstr(e->d_name, part) != NULL;
    if (d) closedir(d);
    return d && !found;
}

/* Parse space-separated ids of one line; returns the count. */
static int parse_ids(const char *line, int32_t *ids, int cap) {
    int n = 0;
    char *end;
    while (*line && *line != '\n' && n < cap) {
        long v = strtol(line, &end, 10);
        if (end == line) break;
        ids[n++] = (int32_t)v;
        line = end;
    }
    return n;
}

/* The library's own generation: n_predict tokens of one prompt, a KV cache of kv_type. */
static int lib_generate_kv(const char *dir, const int32_t *prompt, int n_prompt, int n_predict,
                           const int32_t *stops, int n_stop, const moe8_sampler_params *sp,
                           int float_experts, moe8_dtype kv_type, int32_t *out) {
    moe8_model *m = test_load_model(dir);
    moe8_context_params cp = moe8_context_params_default();
    moe8_context *c = NULL;
    moe8_sampler *s = NULL;
    int32_t n_out = -1;
    cp.n_ctx = 1024;
    cp.float_experts = float_experts;
    cp.kv_type = kv_type;
    moe8_generate_request r = {1, &prompt, &n_prompt, n_predict, stops, n_stop, NULL, NULL,
                               out, &n_out, NULL};
    CHECK(moe8_context_create(m, &cp, &c, NULL) == MOE8_OK);
    CHECK(c && moe8_sampler_create(sp, moe8_context_n_vocab(c), &s, NULL) == MOE8_OK);
    CHECK(s && moe8_generate(c, s, &r, NULL) == MOE8_OK);
    moe8_sampler_free(s);
    moe8_context_free(c);
    moe8_model_free(m);
    return n_out;
}

static int lib_generate(const char *dir, const int32_t *prompt, int n_prompt, int n_predict,
                        const int32_t *stops, int n_stop, const moe8_sampler_params *sp,
                        int float_experts, int32_t *out) {
    return lib_generate_kv(dir, prompt, n_prompt, n_predict, stops, n_stop, sp, float_experts,
                           moe8_context_params_default().kv_type, out);
}

static const char *ids_arg(const int32_t *ids, int n) {
    static char buf[4096];
    size_t u = 0;
    for (int i = 0; i < n; i++) u += (size_t)snprintf(buf + u, sizeof buf - u, "%s%d", i ? "," : "", ids[i]);
    return buf;
}

/* The last stderr line: exactly the 8 keys, in order, each a number. */
static int check_stats(const char *err, double *vals) {
    static const char *keys[8] = {"load_s", "prompt_tokens", "prefill_s", "prefill_tok_s",
                                  "gen_tokens", "decode_s", "decode_tok_s", "peak_rss_mb"};
    size_t n = strlen(err);
    const char *line, *p;
    if (n == 0 || err[n - 1] != '\n') return 0;
    for (line = err + n - 1; line > err && line[-1] != '\n'; line--) {}
    p = line;
    for (int k = 0; k < 8; k++) {
        char *end;
        size_t kl = strlen(keys[k]);
        if (strncmp(p, keys[k], kl) || p[kl] != '=') return 0;
        vals[k] = strtod(p + kl + 1, &end);
        if (end == p + kl + 1 || !isfinite(vals[k]) || vals[k] < 0) return 0;
        p = end;
        if (*p != (k == 7 ? '\n' : ' ')) return 0;
        p++;
    }
    return *p == '\0';
}

/* ---- small model: ids, sampling, float experts, logits ------------------------ */

static const int32_t PROMPT[6] = {5, 17, 99, 3, 200, 42};

static void test_ids_vs_library(const char *dir) {
    int32_t lib[MAXN], got[MAXN], stop = 2;
    char args[8192];
    double st[8];
    int n_lib, n_got;
    moe8_sampler_params sp = moe8_sampler_params_default();

    n_lib = lib_generate(dir, PROMPT, 6, 16, NULL, 0, NULL, 0, lib);
    snprintf(args, sizeof args, "-m '%s' --prompt-ids %s -n 16 --ids --ignore-eos", dir,
             ids_arg(PROMPT, 6));
    CHECKF(cli(args) == 0, "%s", g_err);
    n_got = parse_ids(g_out, got, MAXN);
    CHECKF(n_lib == 16 && n_got == 16 && !memcmp(lib, got, 16 * sizeof(int32_t)),
           "greedy ids: cli %d vs library %d tokens", n_got, n_lib);
    CHECK(check_stats(g_err, st) && st[1] == 6 && st[4] == 16);

    /* without --ignore-eos: config.json's eos id 2 is a stop id */
    n_lib = lib_generate(dir, PROMPT, 6, 16, &stop, 1, NULL, 0, lib);
    snprintf(args, sizeof args, "-m '%s' --prompt-ids %s -n 16 --ids", dir, ids_arg(PROMPT, 6));
    CHECK(cli(args) == 0);
    n_got = parse_ids(g_out, got, MAXN);
    CHECK(n_got == n_lib && !memcmp(lib, got, (size_t)n_got * sizeof(int32_t)));

    /* seeded sampling */
    sp.temperature = 0.9f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.min_p = 0.01f;
    sp.seed = 77;
    n_lib = lib_generate(dir, PROMPT, 6, 24, NULL, 0, &sp, 0, lib);
    snprintf(args, sizeof args, "-m '%s' --prompt-ids %s -n 24 --ids --ignore-eos --temp 0.9 "
             "--top-k 40 --top-p 0.95 --min-p 0.01 --seed 77 --threads 1", dir, ids_arg(PROMPT, 6));
    CHECKF(cli(args) == 0, "%s", g_err);
    n_got = parse_ids(g_out, got, MAXN);
    CHECKF(n_lib == 24 && n_got == 24 && !memcmp(lib, got, 24 * sizeof(int32_t)),
           "sampled ids differ from the library's");

    /* --kv-type: the library with the same cache type */
    static const char *kv_names[3] = {"f32", "f16", "bf16"};
    static const moe8_dtype kv_types[3] = {MOE8_DT_F32, MOE8_DT_F16, MOE8_DT_BF16};
    for (int k = 0; k < 3; k++) {
        n_lib = lib_generate_kv(dir, PROMPT, 6, 16, NULL, 0, NULL, 0, kv_types[k], lib);
        snprintf(args, sizeof args, "-m '%s' --prompt-ids %s -n 16 --ids --ignore-eos --kv-type %s",
                 dir, ids_arg(PROMPT, 6), kv_names[k]);
        CHECKF(cli(args) == 0, "%s", g_err);
        n_got = parse_ids(g_out, got, MAXN);
        CHECKF(n_lib == 16 && n_got == 16 && !memcmp(lib, got, 16 * sizeof(int32_t)),
               "--kv-type %s: ids differ from the library's", kv_names[k]);
    }
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1 --ids --kv-type f8", dir);
    CHECK(cli(args) == 2 && strstr(g_err, "--kv-type wants one of f32|f16|bf16, got 'f8'"));

    /* --float-experts */
    n_lib = lib_generate(dir, PROMPT, 6, 12, NULL, 0, NULL, 1, lib);
    snprintf(args, sizeof args, "-m '%s' --prompt-ids %s -n 12 --ids --ignore-eos --float-experts",
             dir, ids_arg(PROMPT, 6));
    CHECKF(cli(args) == 0, "%s", g_err);
    n_got = parse_ids(g_out, got, MAXN);
    CHECK(n_lib == 12 && n_got == 12 && !memcmp(lib, got, 12 * sizeof(int32_t)));
}

static void test_dump_logits(const char *dir) {
    char args[8192], path[4200];
    static char text[1 << 16 << 2];
    moe8_model *m = test_load_model(dir);
    moe8_context *c = NULL;
    int32_t pos[6], seq[6] = {0};
    int V, n_lines = 0, bit_equal = 1, sorted = 1;
    const float *ref;
    for (int i = 0; i < 6; i++) pos[i] = i;
    moe8_batch b = {6, PROMPT, pos, seq, NULL};
    CHECK(moe8_context_create(m, NULL, &c, NULL) == MOE8_OK);
    CHECK(moe8_decode(c, &b, NULL) == MOE8_OK);
    V = moe8_context_n_vocab(c);
    ref = moe8_context_logits(c, 5);
    snprintf(path, sizeof path, "%s/logits.txt", MOE8_TEST_TMP);
    test_write_file(path, "old contents, longer than nothing\n", 34); /* replaced whole */
    snprintf(args, sizeof args, "-m '%s' --prompt-ids %s -n 3 --ids --dump-logits '%s'", dir,
             ids_arg(PROMPT, 6), path);
    CHECKF(cli(args) == 0, "%s", g_err);
    read_text(path, text, sizeof text);
    for (char *p = text, *end; *p; p = end + 1) {
        long id = strtol(p, &end, 10);
        float v = strtof(end, &end);
        if (*end != '\n') break;
        sorted &= id == n_lines;
        bit_equal &= id == n_lines && id < V && !memcmp(&v, &ref[id], sizeof v);
        n_lines++;
    }
    CHECKF(n_lines == V && sorted && bit_equal, "dump: %d lines (vocab %d), sorted %d, equal %d",
           n_lines, V, sorted, bit_equal);
    CHECK(no_tmp_files(MOE8_TEST_TMP, "logits.txt.tmp."));
    moe8_context_free(c);
    moe8_model_free(m);
}

/* --dump-logits must not destroy the model (mmapped: a truncated file is a
 * SIGBUS) nor the prompt file: refused before anything is loaded, both left
 * byte for byte as they were. */
static void test_dump_refused(const char *dir, const char *text) {
    char args[16384], st_path[4200], prompt[4200], link[4200], sub[4200];
    size_t n0 = 0, n1 = 0, p0 = 0, p1 = 0;
    unsigned char *before, *after, *pb, *pa;
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    before = test_slurp(st_path, &n0);
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1,2 -n 1 --ids --dump-logits '%s'", dir, st_path);
    CHECKF(cli(args) == 1 && strstr(g_err, "lies inside the model folder"), "%s", g_err);
    /* through a relative path with '..', a new name, a symlink, the folder itself */
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1 --ids --dump-logits '%s/../%s/config.json'",
             dir, dir, strrchr(dir, '/') + 1);
    CHECKF(cli(args) == 1 && strstr(g_err, "lies inside the model folder"), "%s", g_err);
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1 --ids --dump-logits '%s/new.txt'", dir, dir);
    CHECKF(cli(args) == 1 && strstr(g_err, "lies inside the model folder"), "%s", g_err);
    snprintf(link, sizeof link, "%s/dump_link.txt", MOE8_TEST_TMP);
    unlink(link);
    CHECK(symlink(st_path, link) == 0);
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1 --ids --dump-logits '%s'", dir, link);
    CHECKF(cli(args) == 1 && strstr(g_err, "lies inside the model folder"), "%s", g_err);
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1 --ids --dump-logits '%s'", dir, dir);
    CHECKF(cli(args) == 1 && strstr(g_err, "is a folder"), "%s", g_err);
    snprintf(sub, sizeof sub, "%s/no_such_dir/x.txt", MOE8_TEST_TMP);
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1 --ids --dump-logits '%s'", dir, sub);
    CHECKF(cli(args) == 1 && strstr(g_err, "cannot resolve the path"), "%s", g_err);
    after = test_slurp(st_path, &n1);
    CHECK(before && after && n0 == n1 && !memcmp(before, after, n0));
    CHECK(no_tmp_files(dir, ".tmp."));
    /* the -f prompt file */
    snprintf(prompt, sizeof prompt, "%s/dump_prompt.txt", MOE8_TEST_TMP);
    test_write_file(prompt, "Hello there\n", 12);
    pb = test_slurp(prompt, &p0);
    snprintf(args, sizeof args, "-m '%s' -f '%s' -n 1 --dump-logits '%s'", text, prompt, prompt);
    CHECKF(cli(args) == 1 && strstr(g_err, "is the prompt file"), "%s", g_err);
    pa = test_slurp(prompt, &p1);
    CHECK(pb && pa && p0 == p1 && !memcmp(pb, pa, p0));
    free(before);
    free(after);
    free(pb);
    free(pa);
}

/* ---- stop ids ---------------------------------------------------------------- */

static int g_eos = -1;

static void eos_hook(void *user, const char *file, cJSON *root) {
    const char *which = user;
    if (strcmp(file, which)) return;
    cJSON_DeleteItemFromObject(root, "eos_token_id");
    cJSON_AddNumberToObject(root, "eos_token_id", g_eos);
}

/* The greedy token of step k as eos (in config.json, then in
 * generation_config.json): output ends just before its first occurrence. */
static void test_stop(const char *base_dir, fx_opts o) {
    static const char *files[2] = {"config.json", "generation_config.json"};
    int32_t base[20], got[MAXN];
    char args[8192];
    int first = 0, n_base = lib_generate(base_dir, PROMPT, 6, 20, NULL, 0, NULL, 0, base);
    CHECK(n_base == 20);
    g_eos = base[5];
    while (base[first] != g_eos) first++;
    for (int f = 0; f < 2; f++) {
        fx_opts oe = o;
        oe.json_hook = eos_hook;
        oe.user = (void *)files[f];
        oe.generation_config = f == 1;
        const char *dir = fx_test_model(f ? "gen_eos_genconf" : "gen_eos_config", &oe, 0);
        snprintf(args, sizeof args, "-m '%s' --prompt-ids %s -n 20 --ids", dir, ids_arg(PROMPT, 6));
        CHECKF(cli(args) == 0, "%s", g_err);
        int n = parse_ids(g_out, got, MAXN);
        CHECKF(n == first && !memcmp(got, base, (size_t)n * sizeof(int32_t)),
               "%s eos %d: %d tokens, expected %d", files[f], g_eos, n, first);
        snprintf(args, sizeof args, "-m '%s' --prompt-ids %s -n 20 --ids --ignore-eos", dir,
                 ids_arg(PROMPT, 6));
        CHECK(cli(args) == 0);
        n = parse_ids(g_out, got, MAXN);
        CHECK(n == 20 && !memcmp(got, base, 20 * sizeof(int32_t)));
    }
}

/* ---- -n 0, stats ------------------------------------------------------------- */

static void test_n0(const char *dir) {
    char args[8192];
    double st[8];
    snprintf(args, sizeof args, "-m '%s' --prompt-ids %s -n 0 --ids", dir, ids_arg(PROMPT, 6));
    CHECKF(cli(args) == 0, "%s", g_err);
    CHECKF(!strcmp(g_out, "\n"), "-n 0 printed '%s'", g_out);
    CHECKF(check_stats(g_err, st), "stats line: '%s'", g_err);
    CHECK(st[1] == 6 && st[4] == 0 && st[5] == 0 && st[6] == 0 && st[7] > 0);
}

/* ---- bad inputs ---------------------------------------------------------------- */

static void expect_fail(const char *args, const char *needle) {
    double st[8];
    int rc = cli(args);
    CHECKF(rc != 0 && strstr(g_err, needle) && !check_stats(g_err, st) &&
               !strstr(g_err, "Sanitizer") && !strstr(g_err, "runtime error"),
           "'%s': exit %d, stderr '%s' (wanted '%s')", args, rc, g_err, needle);
}

static void test_bad_inputs(const char *small, const char *text) {
    static const char *bad_nums[][2] = {
        {"-n abc", "-n"}, {"-n -1", "-n"}, {"-n 99999999999", "-n"}, {"-n 5x", "-n"},
        {"-n ''", "-n"}, {"-n ' 5'", "-n"}, {"-c 0", "-c"}, {"-c abc", "-c"},
        {"--temp -1", "--temp"}, {"--temp nan", "--temp"}, {"--top-p 0", "--top-p"},
        {"--top-p 1.5", "--top-p"}, {"--min-p 2", "--min-p"}, {"--top-k -3", "--top-k"},
        {"--seed -1", "--seed"}, {"--threads 0", "--threads"}, {"--threads x", "--threads"},
        {"--prompt-ids 1,,2", "--prompt-ids"}, {"--prompt-ids 1,x", "--prompt-ids"},
        {"--bogus", "unknown option '--bogus'"}, {"-n", "-n wants a value (N)"},
    };
    char args[8192], file[4200];
    for (size_t i = 0; i < sizeof bad_nums / sizeof bad_nums[0]; i++) {
        snprintf(args, sizeof args, "-m '%s' --ids --prompt-ids 1,2 %s", small, bad_nums[i][0]);
        expect_fail(args, bad_nums[i][1]);
    }
    expect_fail("-m /nonexistent/moe8-model --ids --prompt-ids 1", "/nonexistent/moe8-model");
    snprintf(args, sizeof args, "--ids --prompt-ids 1");
    expect_fail(args, "-m");
    snprintf(args, sizeof args, "-m '%s' --ids", small);
    expect_fail(args, "exactly one");
    snprintf(args, sizeof args, "-m '%s' -p hi --prompt-ids 1", small);
    expect_fail(args, "exactly one");
    snprintf(args, sizeof args, "-m '%s' -p hello --ids", small);
    expect_fail(args, "tokenizer.json");
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1,2", small); /* text output */
    expect_fail(args, "tokenizer.json");
    snprintf(args, sizeof args, "-m '%s' --chat --prompt-ids 1,2 --ids", small);
    expect_fail(args, "--chat");
    snprintf(args, sizeof args, "-m '%s' -p hi --chat-template-kwargs '{}' --ids", small);
    expect_fail(args, "--chat-template-kwargs goes with --chat");
    snprintf(args, sizeof args, "-m '%s' -p hi --chat --chat-template-kwargs '[1]' --ids", small);
    expect_fail(args, "--chat-template-kwargs wants a JSON object");
    snprintf(args, sizeof args, "-m '%s' --ids --prompt-ids 1,2,256", small);
    expect_fail(args, "256");
    snprintf(args, sizeof args, "-m '%s' --ids --prompt-ids 1,2,3,4,5,6,7,8,9 -c 8", small);
    expect_fail(args, "context length 8");
    snprintf(args, sizeof args, "-m '%s' --ids --prompt-ids 1 -c 5000", small);
    expect_fail(args, "max_position_embeddings");
    snprintf(args, sizeof args, "-m '%s' -p ''", text);
    expect_fail(args, "empty");
    snprintf(file, sizeof file, "%s/empty_prompts.txt", MOE8_TEST_TMP);
    test_write_file(file, "\n\n", 2);
    snprintf(args, sizeof args, "-m '%s' -f '%s'", text, file);
    expect_fail(args, "no prompt");
    snprintf(args, sizeof args, "-m '%s' -f '%s/missing.txt'", text, MOE8_TEST_TMP);
    expect_fail(args, "missing.txt");
    snprintf(file, sizeof file, "%s/bad_utf8.txt", MOE8_TEST_TMP);
    test_write_file(file, "hello\nab\xff c\n", 11);
    snprintf(args, sizeof args, "-m '%s' -f '%s'", text, file);
    expect_fail(args, "prompt 1: tokenize: invalid utf-8");
    snprintf(file, sizeof file, "%s/two_prompts.txt", MOE8_TEST_TMP);
    test_write_file(file, "one\ntwo\n", 8);
    snprintf(args, sizeof args, "-m '%s' -f '%s' --dump-logits '%s/x.txt'", text, file,
             MOE8_TEST_TMP);
    expect_fail(args, "single prompt");
    CHECK(cli("-h") == 0 && strstr(g_out, "usage: moe8 generate") && strstr(g_out, "--dump-logits"));
}

/* --dump-logits renames its file over PATH: anything there but a regular file
 * (a FIFO, a device) is refused before the model loads and left as it was. The
 * /dev/null cases run on an empty model folder, so even a regressed check
 * fails on the model and never reaches the rename over /dev/null. */
static void test_dump_special(const char *dir) {
    char args[16384], fifo[4200], link[4200], empty[4200];
    struct stat sb;
    snprintf(fifo, sizeof fifo, "%s/dump.fifo", MOE8_TEST_TMP);
    unlink(fifo);
    CHECK(mkfifo(fifo, 0600) == 0);
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1,2 -n 1 --ids --dump-logits '%s'", dir, fifo);
    CHECKF(cli_within(60, args) == 1 && strstr(g_err, "--dump-logits '") &&
               strstr(g_err, "dump.fifo' is a fifo, expected a regular file") &&
               !strstr(g_err, "load_s="), "%s", g_err);
    CHECK(lstat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode));
    CHECK(no_tmp_files(MOE8_TEST_TMP, "dump.fifo.tmp."));
    unlink(fifo);
    snprintf(empty, sizeof empty, "%s/dump_empty_model", MOE8_TEST_TMP);
    mkdir(empty, 0755);
    snprintf(link, sizeof link, "%s/dump_devnull", MOE8_TEST_TMP);
    unlink(link);
    CHECK(symlink("/dev/null", link) == 0);
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1 --ids --dump-logits '%s'", empty, link);
    CHECKF(cli_within(60, args) == 1 && strstr(g_err, "dump_devnull' is a character device"),
           "%s", g_err);
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1 --ids --dump-logits /dev/null", empty);
    CHECKF(cli_within(60, args) == 1 &&
               strstr(g_err, "--dump-logits '/dev/null' is a character device"), "%s", g_err);
    CHECK(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode));
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
    unlink(link);
    rmdir(empty);
}

/* A sparse file of `size` bytes (no disk used). */
static void make_sparse(const char *path, off_t size) {
    test_write_file(path, "", 0);
    CHECK(truncate(path, size) == 0);
}

/* -f and --prompt-ids-file read only regular files within their cap, refused
 * at once otherwise (a FIFO used to block forever, /dev/zero or a huge sparse
 * file to read until memory ran out); a NUL byte in a -f line is refused. */
static void test_prompt_files(const char *small, const char *text) {
    static const char *flags[] = {"-f", "--prompt-ids-file"};
    char args[16384], path[4200];
    for (int f = 0; f < (int)(sizeof flags / sizeof flags[0]); f++) {
        const char *model = f ? small : text, *extra = f ? "--ids" : "-n 1";
        snprintf(path, sizeof path, "%s/prompts.fifo", MOE8_TEST_TMP);
        unlink(path);
        CHECK(mkfifo(path, 0600) == 0);
        snprintf(args, sizeof args, "-m '%s' %s '%s' %s", model, flags[f], path, extra);
        CHECKF(cli_within(60, args) == 1 && strstr(g_err, flags[f]) &&
                   strstr(g_err, "prompts.fifo' is not a regular file (a fifo)"),
               "%s fifo: %s", flags[f], g_err);
        unlink(path);
        snprintf(args, sizeof args, "-m '%s' %s /dev/zero %s", model, flags[f], extra);
        CHECKF(cli_within(60, args) == 1 &&
                   strstr(g_err, "'/dev/zero' is not a regular file (a character device)"),
               "%s /dev/zero: %s", flags[f], g_err);
        snprintf(path, sizeof path, "%s/prompts_big.txt", MOE8_TEST_TMP);
        make_sparse(path, f ? (64 << 20) + 1 : (off_t)2 << 30);
        snprintf(args, sizeof args, "-m '%s' %s '%s' %s", model, flags[f], path, extra);
        CHECKF(cli_within(60, args) == 1 &&
                   strstr(g_err, f ? "prompts_big.txt' is 67108865 bytes, more than the 67108864 "
                                     "allowed"
                                   : "prompts_big.txt' is 2147483648 bytes, more than the "
                                     "67108864 allowed"),
               "%s sparse: %s", flags[f], g_err);
        unlink(path);
    }
    /* a NUL inside a -f line: refused, naming the file and the line */
    snprintf(path, sizeof path, "%s/nul_prompts.txt", MOE8_TEST_TMP);
    test_write_file(path, "hello\r\n\nab\0cd\nlast\n", 19);
    snprintf(args, sizeof args, "-m '%s' -f '%s' -n 1", text, path);
    expect_fail(args, "nul_prompts.txt' line 3 holds a NUL byte (byte offset 10)");
}

/* --prompt-ids-file: the --prompt-ids syntax from a file, same output; errors
 * name the file and the token's position. */
static void test_ids_file(const char *dir) {
    static const struct { const char *content, *want; } bad[] = {
        {"5,17,x,3", "token 3 (byte offset 5): expected a token id in [0, 2147483647]"},
        {"5,,3", "token 2 (byte offset 2): expected a token id"},
        {"5\n17\n-1\n", "token 3 (byte offset 5): expected a token id"},
        {"5 17 99999999999", "token 3 (byte offset 5): expected a token id"},
        {"5,3,\n", "token 3 (byte offset 5): expected a token id after the last comma"},
        {",5", "token 1 (byte offset 0)"},
        {" \n\t\n", "no token ids"},
        {"", "no token ids"},
        {"5 +3", "token 2 (byte offset 2)"},
    };
    static char expect[sizeof g_out];
    char args[16384], file[4200], want[4400];
    snprintf(args, sizeof args, "-m '%s' --prompt-ids %s -n 8 --ids --ignore-eos", dir,
             ids_arg(PROMPT, 6));
    CHECKF(cli(args) == 0, "%s", g_err);
    snprintf(expect, sizeof expect, "%s", g_out);
    snprintf(file, sizeof file, "%s/prompt_ids.txt", MOE8_TEST_TMP);
    snprintf(want, sizeof want, " %d, %d\n%d %d,%d\r\n\t%d\n", PROMPT[0], PROMPT[1], PROMPT[2],
             PROMPT[3], PROMPT[4], PROMPT[5]);
    test_write_file(file, want, strlen(want));
    snprintf(args, sizeof args, "-m '%s' --prompt-ids-file '%s' -n 8 --ids --ignore-eos", dir, file);
    CHECKF(cli(args) == 0 && !strcmp(g_out, expect), "ids file: '%s' vs '%s' (%s)", g_out, expect,
           g_err);
    /* --prompt-ids takes the same syntax */
    snprintf(args, sizeof args, "-m '%s' --prompt-ids '%d %d, %d,%d  %d,%d' -n 8 --ids --ignore-eos",
             dir, PROMPT[0], PROMPT[1], PROMPT[2], PROMPT[3], PROMPT[4], PROMPT[5]);
    CHECKF(cli(args) == 0 && !strcmp(g_out, expect), "spaced --prompt-ids: '%s' (%s)", g_out, g_err);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        test_write_file(file, bad[i].content, strlen(bad[i].content));
        snprintf(args, sizeof args, "-m '%s' --prompt-ids-file '%s' --ids", dir, file);
        snprintf(want, sizeof want, "--prompt-ids-file '%s': %s", file, bad[i].want);
        expect_fail(args, want);
    }
    test_write_file(file, "1 2 256", 7); /* a valid id outside the model's vocabulary */
    snprintf(args, sizeof args, "-m '%s' --prompt-ids-file '%s' --ids", dir, file);
    expect_fail(args, "token id 256 is not in the model's vocabulary");
    snprintf(args, sizeof args, "-m '%s' --prompt-ids-file '%s/missing_ids.txt' --ids", dir,
             MOE8_TEST_TMP);
    expect_fail(args, "--prompt-ids-file: cannot open '");
    snprintf(args, sizeof args, "-m '%s' --prompt-ids-file '%s' --chat --ids", dir, file);
    expect_fail(args, "cannot wrap --prompt-ids-file");
    snprintf(args, sizeof args, "-m '%s' --prompt-ids-file '%s' --prompt-ids 1 --ids", dir, file);
    expect_fail(args, "exactly one");
    test_write_file(file, "1 2", 3);
    snprintf(args, sizeof args, "-m '%s' --prompt-ids-file '%s' --ids --dump-logits '%s'", dir,
             file, file);
    expect_fail(args, "is the prompt file (--prompt-ids-file");
    CHECK(test_file_contains(file, "1 2"));
    CHECK(cli("-h") == 0 && strstr(g_out, "--prompt-ids-file FILE"));
}

/* ---- text model: tokenizer, chat, batch ---------------------------------------- */

static int lib_tokenize(const moe8_tokenizer *t, const char *text, int32_t *ids) {
    size_t n = 0;
    CHECK(moe8_tokenize(t, text, strlen(text), ids, MAXN, &n, NULL) == MOE8_OK);
    return (int)n;
}

static void test_text(const char *dir) {
    static const char *prompts[3] = {"Hello, world! 你好", "The quick brown fox",
                                     "Qwen3-30B-A3B W8A8 🚀 and more words here"};
    moe8_tokenizer *tok = NULL;
    int32_t ids[MAXN], lib[MAXN], got[MAXN], alone[3][8];
    char args[8192], file[4200], expect[4096];
    size_t n_text;
    int n, n_lib;
    CHECK(moe8_tokenizer_load(dir, &tok, NULL) == MOE8_OK);
    if (!tok) return;

    /* text prompt -> same ids as the library's tokenize + generate */
    n = lib_tokenize(tok, prompts[0], ids);
    n_lib = lib_generate(dir, ids, n, 8, NULL, 0, NULL, 0, lib);
    snprintf(args, sizeof args, "-m '%s' -p '%s' -n 8 --ids --ignore-eos", dir, prompts[0]);
    CHECKF(cli(args) == 0, "%s", g_err);
    CHECK(n_lib == 8 && parse_ids(g_out, got, MAXN) == 8 && !memcmp(got, lib, sizeof alone[0]));

    /* streamed text == the library's detokenization of those ids */
    snprintf(args, sizeof args, "-m '%s' -p '%s' -n 8 --ignore-eos", dir, prompts[0]);
    CHECKF(cli(args) == 0, "%s", g_err);
    CHECK(moe8_detokenize(tok, lib, 8, 0, expect, sizeof expect - 1, &n_text, NULL) == MOE8_OK);
    strcat(expect, "\n");
    CHECKF(!strcmp(g_out, expect), "text '%s' vs '%s'", g_out, expect);

    /* --chat: the model's template (Qwen3's; for one user turn the ChatML of
     * moe8_chat_format) with its own default (thinking on, as moe8 serve),
     * off when --chat-template-kwargs says so */
    for (int think = 0; think < 2; think++) {
        moe8_chat_message msg = {"user", "Hi"};
        char chat[256];
        size_t nc;
        CHECK(moe8_chat_format(&msg, 1, MOE8_CHAT_ADD_ASSISTANT | (think ? 0 : MOE8_CHAT_NO_THINKING),
                               chat, sizeof chat, &nc, NULL) == MOE8_OK);
        n = lib_tokenize(tok, chat, ids);
        n_lib = lib_generate(dir, ids, n, 5, NULL, 0, NULL, 0, lib);
        snprintf(args, sizeof args, "-m '%s' --chat -p Hi -n 5 --ids --ignore-eos%s", dir,
                 think ? " --chat-template-kwargs '{\"x\": [1]}'" : " --chat-template-kwargs '{\"enable_thinking\": false}'");
        CHECKF(cli(args) == 0, "%s", g_err);
        CHECK(n_lib == 5 && parse_ids(g_out, got, MAXN) == 5 && !memcmp(got, lib, 5 * sizeof(int32_t)));
        double st[8];
        CHECK(check_stats(g_err, st) && st[1] == n);
    }

    /* a batch of 3 (-f) gives each prompt's tokens alone */
    snprintf(file, sizeof file, "%s/batch_prompts.txt", MOE8_TEST_TMP);
    snprintf(expect, sizeof expect, "%s\n\n%s\r\n%s\n", prompts[0], prompts[1], prompts[2]);
    test_write_file(file, expect, strlen(expect));
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, "-m '%s' -p '%s' -n 8 --ids --ignore-eos", dir, prompts[i]);
        CHECKF(cli(args) == 0, "%s", g_err);
        CHECK(parse_ids(g_out, alone[i], 8) == 8);
    }
    snprintf(args, sizeof args, "-m '%s' -f '%s' -n 8 --ids --ignore-eos", dir, file);
    CHECKF(cli(args) == 0, "%s", g_err);
    {
        const char *line = g_out;
        double st[8];
        for (int i = 0; i < 3; i++) {
            CHECKF(parse_ids(line, got, MAXN) == 8 && !memcmp(got, alone[i], sizeof alone[i]),
                   "batch prompt %d: tokens differ from alone", i);
            line = strchr(line, '\n');
            if (!line) break;
            line++;
        }
        CHECK(line && *line == '\0');
        CHECK(check_stats(g_err, st) && st[4] == 24);
    }

    /* batch text: each completion's lines prefixed "[i] " */
    snprintf(args, sizeof args, "-m '%s' -f '%s' -n 8 --ignore-eos", dir, file);
    CHECKF(cli(args) == 0, "%s", g_err);
    for (int i = 0; i < 3; i++) {
        char text[2048], want[4096];
        size_t u = 0;
        CHECK(moe8_detokenize(tok, alone[i], 8, 0, text, sizeof text, &n_text, NULL) == MOE8_OK);
        u += (size_t)snprintf(want + u, sizeof want - u, "[%d] ", i);
        for (const char *c = text; *c && u < sizeof want - 8; c++)
            u += (size_t)snprintf(want + u, sizeof want - u, *c == '\n' ? "\n[%d] " : "%c",
                                  *c == '\n' ? i : *c);
        snprintf(want + u, sizeof want - u, "\n");
        CHECKF(strstr(g_out, want) != NULL, "batch text of prompt %d ('%s') not in '%s'", i, want, g_out);
    }

    /* -n 0 in text mode prints an empty line */
    snprintf(args, sizeof args, "-m '%s' -p hello -n 0", dir);
    CHECK(cli(args) == 0 && !strcmp(g_out, "\n"));

    /* a template's raise_exception, or no template at all: --chat fails with the message */
    {
        static const char raising[] = "{\"chat_template\": \"{% if messages[0].role == 'user' %}"
                                      "{{ raise_exception('Only system turns, please') }}{% endif %}\"}";
        snprintf(file, sizeof file, "%s/tokenizer_config.json", dir);
        test_write_file(file, raising, strlen(raising));
        snprintf(args, sizeof args, "-m '%s' --chat -p Hi -n 2 --ids", dir);
        expect_fail(args, "prompt 0: chat template: Only system turns, please");
        test_write_file(file, "{}", 2);
        expect_fail(args, "prompt 0: this model has no chat template");
    }

    /* a tokenizer that asks for BOS gets it prepended (last: edits the folder) */
    {
        static const char cfg[] = "{\"add_bos_token\": true, \"bos_token\": \"<|endoftext|>\"}";
        double st[8];
        snprintf(file, sizeof file, "%s/tokenizer_config.json", dir);
        test_write_file(file, cfg, strlen(cfg));
        ids[0] = moe8_tokenizer_token_id(tok, "<|endoftext|>");
        n = 1 + lib_tokenize(tok, prompts[1], ids + 1);
        n_lib = lib_generate(dir, ids, n, 4, NULL, 0, NULL, 0, lib);
        snprintf(args, sizeof args, "-m '%s' -p '%s' -n 4 --ids --ignore-eos", dir, prompts[1]);
        CHECKF(cli(args) == 0, "%s", g_err);
        CHECK(n_lib == 4 && parse_ids(g_out, got, MAXN) == 4 && !memcmp(got, lib, 4 * sizeof(int32_t)));
        CHECK(check_stats(g_err, st) && st[1] == n);
    }
    moe8_tokenizer_free(tok);
}

/* <|im_end|> (a stop id from the tokenizer, not the config): its lm_head row
 * becomes 10x the row of the first greedy token, so greedy picks it first. */
static int g_first = -1;

static void im_end_hook(void *user, fx_tensor *t) {
    int32_t im_end = *(const int32_t *)user;
    int64_t H = t->shape[1];
    if (strcmp(t->name, "lm_head.weight")) return;
    for (int64_t j = 0; j < H; j++) fx_set(t, im_end * H + j, 10.0 * fx_get(t, g_first * H + j));
}

static void test_im_end(const char *base_dir, fx_opts o) {
    static const char *prompt = "Hello, world!";
    moe8_tokenizer *tok = NULL;
    int32_t ids[MAXN], lib[4], im_end, got[MAXN];
    char args[8192];
    double st[8];
    int n;
    CHECK(moe8_tokenizer_load(base_dir, &tok, NULL) == MOE8_OK);
    if (!tok) return;
    im_end = moe8_tokenizer_token_id(tok, "<|im_end|>");
    n = lib_tokenize(tok, prompt, ids);
    CHECK(lib_generate(base_dir, ids, n, 1, NULL, 0, NULL, 0, lib) == 1);
    g_first = lib[0];
    o.tensor_hook = im_end_hook;
    o.user = &im_end;
    const char *dir = fx_test_model("gen_im_end", &o, 1);
    CHECK(lib_generate(dir, ids, n, 3, NULL, 0, NULL, 0, lib) == 3);
    CHECKF(lib[0] == im_end, "precondition: greedy picks %d, not <|im_end|> %d", lib[0], im_end);
    snprintf(args, sizeof args, "-m '%s' -p '%s' -n 3", dir, prompt);
    CHECKF(cli(args) == 0, "%s", g_err);
    CHECKF(!strcmp(g_out, "\n") && check_stats(g_err, st) && st[4] == 0,
           "stopped at <|im_end|>: '%s'", g_out);
    snprintf(args, sizeof args, "-m '%s' -p '%s' -n 3 --ids --ignore-eos", dir, prompt);
    CHECKF(cli(args) == 0, "%s", g_err);
    CHECK(parse_ids(g_out, got, MAXN) == 3 && !memcmp(got, lib, sizeof lib[0] * 3));
    moe8_tokenizer_free(tok);
}

/* ---- long run: 500 steps, flat RSS --------------------------------------------- */

static void test_long_run(const char *dir) {
    char args[8192];
    int32_t *got = malloc(600 * sizeof(int32_t));
    double s50[8], s500[8];
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1,2,3 -n 50 -c 600 --ids --ignore-eos", dir);
    CHECKF(cli(args) == 0, "%s", g_err);
    CHECK(check_stats(g_err, s50));
    snprintf(args, sizeof args, "-m '%s' --prompt-ids 1,2,3 -n 500 -c 600 --ids --ignore-eos", dir);
    CHECKF(cli(args) == 0, "%s", g_err);
    CHECK(parse_ids(g_out, got, 600) == 500);
    CHECK(check_stats(g_err, s500) && s500[4] == 500);
    printf("peak rss: %.1f MB at -n 50, %.1f MB at -n 500\n", s50[7], s500[7]);
    CHECKF(s500[7] <= s50[7] + 2.0 + 0.02 * s50[7], "peak rss grew: %.1f -> %.1f MB", s50[7],
           s500[7]);
    free(got);
}

int main(void) {
    fx_opts o = fx_default_opts();
    o.quant = 1;
    const char *small = fx_test_model("gen_small", &o, 0);
    fx_opts ot = fx_default_opts();
    ot.quant = 1;
    ot.vocab = QWEN_VOCAB;
    ot.hidden = 32; /* embed + lm_head: 2 x 151669 x 32 */
    const char *text = fx_test_model("gen_text", &ot, 1);
    test_ids_vs_library(small);
    test_dump_logits(small);
    test_stop(small, o);
    test_n0(small);
    test_bad_inputs(small, text);
    test_dump_refused(small, text);
    test_dump_special(small);
    test_prompt_files(small, text);
    test_ids_file(small);
    test_im_end(text, ot);
    test_text(text); /* last user of `text`: edits its tokenizer_config.json */
    test_long_run(small);
    return test_summary();
}
