/*
 * test_pull.c — `moe8 pull` and `-m OWNER/NAME --pull` against a hub this
 * test serves itself on 127.0.0.1 (tests/hub_server.mjs: the Hugging Face and
 * ModelScope API paths and headers, 302s to a CDN path, Range requests, and
 * faults: a wrong published sha256 or git blob id, a connection dropped
 * halfway, a 401). The hub computes the hashes with node's crypto: an
 * independent SHA-256 and SHA-1.
 *
 * The reference is the fixture: every downloaded file is compared byte for
 * byte with the file the test wrote; the hub's request log says which
 * requests were made (Range after a drop or a partial file, downloads
 * overlapping). Skipped (77) without node.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>

#include <cjson/cJSON.h>

#include "test.h"

static char g_root[1100], g_tmp[1024];
static int g_port;
static pid_t g_hub;
static int g_hub_in = -1;

static int run(const char *cmd) {
    fflush(NULL);
    const int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    char *p = NULL;
    long len;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (p = malloc((size_t)len + 1)) && fread(p, 1, (size_t)len, f) == (size_t)len) {
        p[len] = '\0';
        if (n) *n = (size_t)len;
    } else {
        free(p);
        p = NULL;
    }
    fclose(f);
    return p;
}

static void put(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECKF(f && fwrite(p, 1, n, f) == n, "cannot write %s", path);
    if (f) fclose(f);
}

/* A file of n pseudo-random bytes (seeded) at ROOT/repo/name. */
static void put_random(const char *repo, const char *name, size_t n, unsigned seed) {
    char path[2048];
    unsigned char *p = malloc(n);
    uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (unsigned char)x;
    }
    snprintf(path, sizeof path, "%s/%s/%s", g_root, repo, name);
    put(path, p, n);
    free(p);
}

static void put_text(const char *repo, const char *name, const char *text) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s/%s", g_root, repo, name);
    put(path, text, strlen(text));
}

/* Is DIR/name byte for byte ROOT/repo/name? */
static int same(const char *dir, const char *repo, const char *name) {
    char a[2048], b[2048];
    size_t na = 0, nb = 0;
    snprintf(a, sizeof a, "%s/%s", dir, name);
    snprintf(b, sizeof b, "%s/%s/%s", g_root, repo, name);
    char *pa = slurp(a, &na), *pb = slurp(b, &nb);
    const int ok = pa && pb && na == nb && !memcmp(pa, pb, na);
    free(pa), free(pb);
    return ok;
}

static int exists(const char *dir, const char *name) {
    char p[2048];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return !stat(p, &st);
}

/* The shard names of the fixture repositories. */
static const char *const SHARDS[3] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                      "model-00003-of-00003.safetensors"};
enum { SHARD_BYTES = 600 * 1024 + 123 };

static void make_repo(const char *repo, unsigned seed) {
    char dir[2048];
    snprintf(dir, sizeof dir, "mkdir -p '%s/%s/original'", g_root, repo);
    run(dir);
    put_text(repo, "config.json", "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"model_type\": \"qwen3_moe\"}\n");
    put_text(repo, "tokenizer_config.json", "{\"eos_token\": \"<|im_end|>\"}\n");
    put_text(repo, "model.safetensors.index.json", "{\"weight_map\": {}}\n");
    put_text(repo, "quant_model_description.json", "{\"model_quant_type\": \"W8A8_DYNAMIC\"}\n");
    put_text(repo, "README.md", "# not downloaded\n");
    put_text(repo, "original/params.json", "{}\n"); /* a folder: not downloaded */
    for (int i = 0; i < 3; i++) put_random(repo, SHARDS[i], SHARD_BYTES + (size_t)i * 4099, seed * 3 + (unsigned)i);
}

static int start_hub(void) {
    int in[2], out[2];
    char line[128] = "", script[1024];
    if (pipe(in) || pipe(out)) return -1;
    snprintf(script, sizeof script, "%s/tests/hub_server.mjs", MOE8_SOURCE_DIR);
    fflush(NULL);
    if ((g_hub = fork()) == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(in[0], 0), dup2(out[1], 1);
        close(in[1]), close(out[0]);
        execlp("node", "node", script, g_root, (char *)NULL);
        _exit(127);
    }
    close(in[0]), close(out[1]);
    g_hub_in = in[1];
    FILE *f = fdopen(out[0], "r");
    if (!f || !fgets(line, sizeof line, f)) return -1;
    fclose(f);
    return sscanf(line, "port %d", &g_port) == 1 ? 0 : -1;
}

static void stop_hub(void) {
    if (g_hub_in >= 0) close(g_hub_in); /* the hub exits when its stdin closes */
    if (g_hub > 0) waitpid(g_hub, NULL, 0);
}

/* `moe8 ARGS` with the hub's environment ENV; stdout into *out, stderr into *err; the exit status. */
static int moe8(const char *env, const char *args, char **out, char **err) {
    char cmd[8192], fo[1200], fe[1200];
    snprintf(fo, sizeof fo, "%s/pull.out", g_tmp);
    snprintf(fe, sizeof fe, "%s/pull.err", g_tmp);
    snprintf(cmd, sizeof cmd, "env -u HF_TOKEN -u HUGGING_FACE_HUB_TOKEN -u MODELSCOPE_API_TOKEN "
             "HF_ENDPOINT=http://127.0.0.1:%d MODELSCOPE_DOMAIN=http://127.0.0.1:%d %s '%s' %s >'%s' 2>'%s'",
             g_port, g_port, env ? env : "", MOE8_CLI, args, fo, fe);
    const int rc = run(cmd);
    if (out) *out = slurp(fo, NULL);
    if (err) *err = slurp(fe, NULL);
    return rc;
}

/* The hub's request log. */
static cJSON *hub_log(void) {
    char cmd[1400], path[1200];
    snprintf(path, sizeof path, "%s/hub_log.json", g_tmp);
    snprintf(cmd, sizeof cmd, "curl -s http://127.0.0.1:%d/__log >'%s'", g_port, path);
    run(cmd);
    char *t = slurp(path, NULL);
    cJSON *j = t ? cJSON_Parse(t) : NULL;
    free(t);
    return j;
}

/* Requests whose url contains `needle` and whose Range header starts with `range` ("" any, NULL none). */
static int count_requests(const cJSON *log, const char *needle, const char *range) {
    const cJSON *r;
    int n = 0;
    cJSON_ArrayForEach(r, cJSON_GetObjectItem(log, "requests")) {
        const cJSON *u = cJSON_GetObjectItem(r, "url"), *g = cJSON_GetObjectItem(r, "range");
        if (!strstr(u->valuestring, needle)) continue;
        if (!range) n += !cJSON_IsString(g);
        else n += cJSON_IsString(g) && !strncmp(g->valuestring, range, strlen(range));
    }
    return n;
}

/* ---- the checks -------------------------------------------------------------------------- */

/* A whole repository over the Hugging Face API: the files moe8 reads, none other,
 * the LFS ones through the 302, several at once. */
static void test_hf_whole(void) {
    char dir[1200], args[2400], *out = NULL, *err = NULL;
    snprintf(dir, sizeof dir, "%s/out_good", g_tmp);
    snprintf(args, sizeof args, "pull org/good -o '%s' --jobs 3", dir);
    const int rc = moe8(NULL, args, &out, &err);
    CHECKF(rc == 0, "pull org/good: exit %d: %s", rc, err ? err : "");
    CHECKF(out && !strncmp(out, dir, strlen(dir)), "stdout names the folder: %s", out ? out : "");
    static const char *const small[] = {"config.json", "tokenizer_config.json", "model.safetensors.index.json",
                                        "quant_model_description.json"};
    for (int i = 0; i < 4; i++) CHECKF(same(dir, "org/good", small[i]), "%s differs", small[i]);
    for (int i = 0; i < 3; i++) CHECKF(same(dir, "org/good", SHARDS[i]), "%s differs", SHARDS[i]);
    CHECK(!exists(dir, "README.md") && !exists(dir, "original") && !exists(dir, ".moe8-partial"));
    CHECK(exists(dir, ".moe8-pull"));
    CHECKF(err && strstr(err, "sha256 ok") && strstr(err, "config.json: 70 bytes, git blob id ok") &&
           strstr(err, "7 of 7 files"), "progress on stderr: %s", err ? err : "");
    cJSON *log = hub_log();
    CHECK(log != NULL);
    if (log) {
        CHECK(count_requests(log, "/api/models/org/good/revision/main?blobs=true", NULL) == 1);
        CHECK(count_requests(log, "/org/good/resolve/", NULL) == 7);
        CHECK(count_requests(log, "/cdn/org/good/", NULL) == 3); /* the 302s followed */
        const cJSON *mi = cJSON_GetObjectItem(log, "max_inflight");
        CHECKF(cJSON_IsNumber(mi) && mi->valueint >= 2, "downloads at once: %d", mi ? mi->valueint : -1);
        cJSON_Delete(log);
    }
    /* again: every file is there, nothing is downloaded */
    cJSON *before = hub_log();
    const int n0 = before ? count_requests(before, "/org/good/resolve/", NULL) : -1;
    cJSON_Delete(before);
    free(out), free(err);
    CHECK(moe8(NULL, args, &out, &err) == 0);
    cJSON *after = hub_log();
    CHECK(after && count_requests(after, "/org/good/resolve/", NULL) == n0);
    cJSON_Delete(after);
    free(out), free(err);
}

/* A partial file from an earlier run is resumed with Range, and a wrong
 * published sha256 is refused: the file is not renamed into place. */
static void test_resume_and_bad_sum(void) {
    char dir[1200], args[2400], part[1600], src[1600], *out = NULL, *err = NULL;
    size_t n = 0;
    snprintf(dir, sizeof dir, "%s/out_resume", g_tmp);
    snprintf(part, sizeof part, "mkdir -p '%s/.moe8-partial'", dir);
    run(part);
    snprintf(src, sizeof src, "%s/org/good/%s", g_root, SHARDS[1]);
    snprintf(part, sizeof part, "%s/.moe8-partial/%s.part", dir, SHARDS[1]);
    char *whole = slurp(src, &n);
    put(part, whole, 100000);
    free(whole);
    snprintf(args, sizeof args, "pull org/good -o '%s' -q", dir);
    CHECK(moe8(NULL, args, &out, &err) == 0);
    CHECK(same(dir, "org/good", SHARDS[1]));
    cJSON *log = hub_log();
    CHECKF(log && count_requests(log, "/cdn/org/good/model-00002", "bytes=100000-") == 1, "one GET with Range: bytes=100000-");
    cJSON_Delete(log);
    CHECKF(err && !*err, "--quiet: nothing on stderr: %s", err ? err : "");
    free(out), free(err);

    snprintf(dir, sizeof dir, "%s/out_bad", g_tmp);
    snprintf(args, sizeof args, "pull org/bad -o '%s'", dir);
    const int rc = moe8(NULL, args, &out, &err);
    CHECKF(rc == 1, "a wrong sha256: exit %d", rc);
    CHECKF(err && strstr(err, SHARDS[0]) && strstr(err, "sha256") && strstr(err, "not renamed"), "%s", err ? err : "");
    CHECK(!exists(dir, SHARDS[0]));
    CHECKF(err && strstr(err, "tokenizer_config.json: git blob id") && strstr(err, "not renamed"), "%s", err ? err : "");
    CHECK(!exists(dir, "tokenizer_config.json"));
    CHECK(same(dir, "org/bad", SHARDS[1]) && same(dir, "org/bad", "config.json"));
    CHECK(!exists(dir, ".moe8-pull"));
    free(out), free(err);
}

/* A connection dropped halfway: the download resumes from where it stopped. */
static void test_drop(void) {
    char dir[1200], args[2400], *out = NULL, *err = NULL;
    snprintf(dir, sizeof dir, "%s/out_drop", g_tmp);
    snprintf(args, sizeof args, "pull org/drop -o '%s'", dir);
    const int rc = moe8(NULL, args, &out, &err);
    CHECKF(rc == 0, "after a drop: exit %d: %s", rc, err ? err : "");
    CHECK(same(dir, "org/drop", SHARDS[2]) && same(dir, "org/drop", "config.json"));
    CHECKF(err && strstr(err, "resuming"), "the drop is said: %s", err ? err : "");
    cJSON *log = hub_log();
    char want[64];
    snprintf(want, sizeof want, "bytes=%d-", (SHARD_BYTES + 2 * 4099) / 2);
    CHECKF(log && count_requests(log, "/cdn/org/drop/model-00003", want) == 1, "one GET with Range: %s", want);
    cJSON_Delete(log);
    free(out), free(err);
}

/* A gated repository: 401 said with HF_TOKEN; with the token it works. */
static void test_auth(void) {
    char dir[1200], args[2400], *out = NULL, *err = NULL;
    snprintf(dir, sizeof dir, "%s/out_private", g_tmp);
    snprintf(args, sizeof args, "pull org/private -o '%s'", dir);
    int rc = moe8(NULL, args, &out, &err);
    CHECKF(rc == 1 && err && strstr(err, "401") && strstr(err, "HF_TOKEN") && strstr(err, "org/private"),
           "exit %d: %s", rc, err ? err : "");
    free(out), free(err);
    rc = moe8("HF_TOKEN=sesame", args, &out, &err);
    CHECKF(rc == 0, "with the token: exit %d: %s", rc, err ? err : "");
    CHECK(same(dir, "org/private", SHARDS[0]));
    free(out), free(err);
    snprintf(args, sizeof args, "pull org/private -o '%s/out_private2'", g_tmp);
    rc = moe8("HF_TOKEN=wrong", args, &out, &err);
    CHECKF(rc == 1 && err && strstr(err, "was refused"), "a refused token: %s", err ? err : "");
    free(out), free(err);
}

/* ModelScope's API, the default cache folder, bad specs. */
static void test_modelscope_and_cache(void) {
    char dir[1200], args[2400], env[1300], want[1400], *out = NULL, *err = NULL;
    snprintf(dir, sizeof dir, "%s/out_ms", g_tmp);
    snprintf(args, sizeof args, "pull org/good --hub modelscope -o '%s'", dir);
    int rc = moe8(NULL, args, &out, &err);
    CHECKF(rc == 0, "modelscope: exit %d: %s", rc, err ? err : "");
    for (int i = 0; i < 3; i++) CHECK(same(dir, "org/good", SHARDS[i]));
    CHECK(same(dir, "org/good", "quant_model_description.json") && !exists(dir, "README.md"));
    cJSON *log = hub_log();
    CHECK(log && count_requests(log, "/api/v1/models/org/good/repo/files?Revision=master&Recursive=true", NULL) == 1);
    CHECK(log && count_requests(log, "/api/v1/models/org/good/repo?Revision=master&FilePath=", NULL) == 7);
    cJSON_Delete(log);
    free(out), free(err);

    snprintf(env, sizeof env, "MOE8_MODELS_DIR='%s/cache'", g_tmp);
    rc = moe8(env, "pull org/good@v1 -q", &out, &err);
    snprintf(want, sizeof want, "%s/cache/hf/org/good@v1\n", g_tmp);
    CHECKF(rc == 0 && out && !strcmp(out, want), "cache folder: '%s' want '%s': %s", out ? out : "", want,
           err ? err : "");
    free(out), free(err);
    static const char *const bad[] = {"pull", "pull org", "pull ../x", "pull a/b/c", "pull org/good --hub nope"};
    for (int i = 0; i < 5; i++) {
        rc = moe8(NULL, bad[i], &out, &err);
        CHECKF(rc == 2 && err && *err, "'%s': exit %d, %s", bad[i], rc, err ? err : "");
        free(out), free(err);
    }
    rc = moe8(NULL, "pull org/nothere -q -o /dev/null/x", &out, &err);
    CHECKF(rc == 1 && err && strstr(err, "org/nothere"), "%s", err ? err : "");
    free(out), free(err);
}

/* -m OWNER/NAME --pull on a model-loading command: pulled on first use,
 * then found in the cache; without --pull said; a GGUF file refused. */
static void test_model_pull(void) {
    char env[1300], args[2400], *out = NULL, *err = NULL;
    snprintf(env, sizeof env, "MOE8_MODELS_DIR='%s/cache'", g_tmp);
    int rc = moe8(env, "inspect -m org/tiny", &out, &err);
    CHECKF(rc == 2 && err && strstr(err, "--pull"), "without --pull: %s", err ? err : "");
    free(out), free(err);
    rc = moe8(env, "inspect -m org/tiny --pull", &out, &err);
    CHECKF(rc == 0 && out && (strstr(out, "qwen3_moe") || strstr(out, "mixtral")), "inspect -m org/tiny --pull: exit %d: %s %s", rc,
           out ? out : "", err ? err : "");
    free(out), free(err);
    cJSON *log = hub_log();
    const int n0 = log ? count_requests(log, "/org/tiny/resolve/", NULL) : -1;
    cJSON_Delete(log);
    rc = moe8(env, "inspect -m org/tiny --pull", &out, &err);
    log = hub_log();
    CHECKF(rc == 0 && n0 > 0 && log && count_requests(log, "/org/tiny/resolve/", NULL) == n0,
           "the second use downloads nothing (%d)", n0);
    cJSON_Delete(log);
    free(out), free(err);
    snprintf(args, sizeof args, "generate -m '%s/w.gguf' -p hi", g_tmp);
    rc = moe8(NULL, args, &out, &err);
    CHECKF(rc == 2 && err && strstr(err, "GGUF is not a moe8 input") && strstr(err, "moe8 pull"), "%s",
           err ? err : "");
    free(out), free(err);
}

int main(void) {
    char cmd[4096];
    if (run("command -v node >/dev/null 2>&1")) {
        printf("test_pull: skipped: node not found (make deps installs it)\n");
        return 77;
    }
    snprintf(g_tmp, sizeof g_tmp, "%s/pull", MOE8_TEST_TMP);
    snprintf(g_root, sizeof g_root, "%s/hub", g_tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", g_tmp, g_root);
    run(cmd);
    const char *repos[] = {"org/good", "org/bad", "org/drop", "org/private"};
    for (int i = 0; i < 4; i++) make_repo(repos[i], (unsigned)i);
    put_text("", "hub.json", "{\"token\": \"sesame\", \"repos\": {\"org/good\": {\"slow\": true}, "
             "\"org/bad\": {\"bad_sha\": [\"model-00001-of-00003.safetensors\", \"tokenizer_config.json\"]}, "
             "\"org/drop\": {\"drop_once\": [\"model-00003-of-00003.safetensors\"]}, "
             "\"org/private\": {\"private\": true}}}\n");
    /* Mixtral's 32k vocabulary: a 36 MB folder (Qwen3's 151k: 160 MB) */
    struct stat st;
    snprintf(cmd, sizeof cmd, "%s/.deps/llama2-tokenizer/tokenizer.json", MOE8_SOURCE_DIR);
    const char *arch = stat(cmd, &st) ? "qwen3_moe" : "mixtral";
    snprintf(cmd, sizeof cmd, "'%s' make-model --arch %s --preset tiny --layers 1 -o '%s/org/tiny' >/dev/null 2>&1",
             MOE8_CLI, arch, g_root);
    CHECKF(run(cmd) == 0, "make-model for org/tiny");
    signal(SIGPIPE, SIG_IGN);
    if (start_hub()) {
        CHECKF(0, "the hub did not start");
        return test_summary();
    }
    test_hf_whole();
    test_resume_and_bad_sum();
    test_drop();
    test_auth();
    test_modelscope_and_cache();
    test_model_pull();
    stop_hub();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (!test_n_fail) run(cmd);
    return test_summary();
}
