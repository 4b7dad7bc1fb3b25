/*
 * test_cache.c — the packed cache (SEMANTICS §6c, src/model/cache.c):
 * logits of a prefill + decode steps and greedy tokens bit-identical with no
 * cache, a cache being built, a mapped cache and one read into memory, for
 * qwen3_moe, qwen2_moe (W8A8 linears, a shared expert), mixtral and
 * deepseek_v2/v3 (MLA, a W8A8 kv_b), under the default table and (a child
 * process each) every other table the CPU has; every corruption
 * (truncated at each section boundary, a flipped byte in each section and in
 * the header, a wrong version, another table, another shard, a changed
 * source file) detected, reported and rebuilt; 3 racing builders; the
 * fallback locations; --no-cache, --no-mmap, --mlock; `moe8 pack` (build,
 * --verify, --tp N --rank R without MPI, bad flags); a process limited by a
 * cgroup to 60% of the cache's size (skipped where none can be created).
 * The header fields are read here from the format's description in cache.c,
 * and its hash (XXH3 64, libxxhash) is written again here.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "fixture_model.h"
#include "model_test.h"

static char g_log[8192];
static char g_ref_file[4096];

static void on_log(moe8_log_level lv, const char *msg, void *user) {
    (void)user;
    if (lv >= MOE8_LOG_WARN && strlen(g_log) + strlen(msg) + 2 < sizeof g_log) {
        strcat(g_log, msg);
        strcat(g_log, "\n");
    }
}

typedef struct {
    const char *cache_dir;
    int no_cache, no_mmap, mlock;
    int prepare; /* moe8_model_prepare (twice) before the contexts */
} opts;

static moe8_status load(const char *dir, const opts *o, moe8_model **m, moe8_error *e) {
    moe8_model_params p = moe8_model_params_default();
    p.cache_dir = o->cache_dir;
    p.no_cache = o->no_cache;
    p.no_mmap = o->no_mmap;
    p.mlock = o->mlock;
    return moe8_model_load(dir, &p, m, e);
}

/* Logits of PROMPT (6 prefilled, 3 decoded) + 5 greedy tokens. */
#define N_OUT(V) (9 * (size_t)(V) + 5)
static void outputs(const char *dir, const opts *o, int V, float *out) {
    moe8_model *m;
    moe8_error e;
    if (load(dir, o, &m, &e)) {
        fprintf(stderr, "load %s: %s\n", dir, e.message);
        exit(2);
    }
    for (int i = 0; i < 2 * o->prepare; i++)
        CHECKF(moe8_model_prepare(m, 0, 0, &e) == MOE8_OK, "prepare: %s", e.message);
    run_logits(m, PROMPT, 9, 6, out);
    int32_t t[5] = {0};
    CHECK(greedy(m, PROMPT, 5, t, 5) == 5);
    for (int i = 0; i < 5; i++) out[9 * (size_t)V + i] = (float)t[i];
    moe8_model_free(m);
}

static const char *table_name(void) { return moe8_kernel_isa(); }

static void cache_path(char *out, size_t cap, const char *dir, const char *table) {
    snprintf(out, cap, "%s/.moe8-cache/%s-tp1r0.pkc", dir, table);
}

static int exists(const char *p) { return access(p, F_OK) == 0; }

static long file_size(const char *p) {
    struct stat sb;
    return stat(p, &sb) ? -1 : (long)sb.st_size;
}

static unsigned char *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n ? *n : 1);
    if (fread(b, 1, *n, f) != *n) *n = 0;
    fclose(f);
    return b;
}

static void spit(const char *p, const unsigned char *b, size_t n) {
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(b, 1, n, f) != n) exit(2);
    fclose(f);
}

/* ---- the header, as cache.c describes it --------------------------------- */

#define H_VERSION 8
#define H_NSECT 12
#define H_TABLE 16
#define H_TP 48
#define H_HEADER_BYTES 88
#define H_HASH 96
#define H_SIZE 104
#define S_SIZE 32

static uint64_t rd64(const unsigned char *b) {
    uint64_t v;
    memcpy(&v, b, 8);
    return v;
}

/* The header checksum as cache.c computes it: XXH3 64 (libxxhash), seed 5. */
static uint64_t hash64(const unsigned char *b, size_t n, uint64_t seed) {
    return (uint64_t)XXH3_64bits_withSeed(b, n, seed);
}

static void rehash_header(unsigned char *b) {
    const size_t hb = rd64(b + H_HEADER_BYTES);
    memset(b + H_HASH, 0, 8);
    uint64_t h = hash64(b, hb, 5);
    memcpy(b + H_HASH, &h, 8);
}

/* A load of dir with the cache file replaced by (b, n): outputs equal ref,
 * a warning containing `want`, and a valid cache again afterwards. */
static void check_detected(const char *dir, const char *path, const unsigned char *b, size_t n,
                           const char *want, const float *ref, int V, const char *what) {
    float *got = malloc(sizeof(float) * N_OUT(V));
    opts o = {0};
    moe8_model *m;
    moe8_cache_info ci;
    moe8_error e;
    spit(path, b, n);
    g_log[0] = 0;
    outputs(dir, &o, V, got);
    CHECKF(!memcmp(got, ref, sizeof(float) * N_OUT(V)), "%s: outputs differ", what);
    CHECKF(strstr(g_log, want) != NULL, "%s: expected a warning with '%s', got: %s", what, want,
           g_log);
    CHECK(load(dir, &o, &m, &e) == MOE8_OK);
    CHECK(moe8_model_cache_check(m, 1, &ci, &e) == MOE8_OK);
    CHECKF(ci.valid, "%s: not rebuilt (%s)", what, ci.why);
    moe8_model_free(m);
    free(got);
}

static void test_corruption(const char *dir, const float *ref, int V) {
    char path[4096];
    size_t n;
    cache_path(path, sizeof path, dir, table_name());
    unsigned char *good = slurp(path, &n), *b = malloc(n);
    const uint32_t ns = (uint32_t)rd64(good + H_NSECT) & 0xffffffffu;
    int n_checked = 0;
    CHECK(n > H_SIZE && !memcmp(good, "MOE8PKC\n", 8) && ns >= 2);
    for (uint32_t i = 0; i < ns; i++) {
        const uint64_t off = rd64(good + H_SIZE + S_SIZE * i), bytes = rd64(good + H_SIZE + S_SIZE * i + 8);
        char what[64];
        snprintf(what, sizeof what, "truncated at section %u", i);
        check_detected(dir, path, good, off, "truncated", ref, V, what);
        if (!bytes) continue;
        memcpy(b, good, n);
        b[off + bytes / 2] ^= 0x10;
        snprintf(what, sizeof what, "byte flipped in section %u", i);
        check_detected(dir, path, b, n, "checksum mismatch (corrupt)", ref, V, what);
        n_checked++;
    }
    CHECKF(n_checked >= 2, "only %d sections hold data", n_checked);
    memcpy(b, good, n);
    b[H_TP] ^= 0x01;
    check_detected(dir, path, b, n, "corrupt header", ref, V, "byte flipped in the header");
    memcpy(b, good, n);
    b[H_VERSION] = 99;
    check_detected(dir, path, b, n, "format version 99", ref, V, "wrong version");
    memcpy(b, good, n);
    b[H_TP] = 2;
    rehash_header(b);
    check_detected(dir, path, b, n, "shard tp 2 rank 0", ref, V, "another shard");
    memcpy(b, good, n);
    memset(b + H_TABLE, 0, 32);
    memcpy(b + H_TABLE, "zz9", 3);
    memcpy(b + H_TABLE + 16, "q9", 2);
    rehash_header(b);
    check_detected(dir, path, b, n, "packed by table zz9 (layout q9)", ref, V, "another table");
    check_detected(dir, path, good, 8, "too short", ref, V, "8 bytes");
    /* the source changed: a safetensors file's mtime, then config.json's bytes */
    char st[4096], cfg[4096];
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    struct timespec ts[2] = {{1000000000, 0}, {1000000000, 0}};
    CHECK(utimensat(AT_FDCWD, st, ts, 0) == 0);
    check_detected(dir, path, good, n, "model folder changed", ref, V, "touched safetensors");
    size_t cn;
    unsigned char *c = slurp(cfg, &cn), *c2 = malloc(cn + 1);
    memcpy(c2, c, cn);
    c2[cn] = '\n';
    spit(cfg, c2, cn + 1);
    unsigned char *now = slurp(path, &n); /* valid for the touched file */
    check_detected(dir, path, now, n, "model folder changed", ref, V, "config.json rewritten");
    free(now);
    free(c);
    free(c2);
    free(good);
    free(b);
}

/* ---- racing builders ---------------------------------------------------- */

static void test_race(const char *dir, const float *ref, int V) {
    char cdir[4096], cmd[8300];
    snprintf(cdir, sizeof cdir, "%s/.moe8-cache", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cdir);
    CHECK(system(cmd) == 0);
    /* three fresh processes (fork after OpenMP is not safe: exec ourselves) */
    char exe[64];
    pid_t pid[3];
    snprintf(exe, sizeof exe, "/proc/%d/exe", (int)getpid());
    spit(g_ref_file, (const unsigned char *)ref, sizeof(float) * N_OUT(V));
    for (int i = 0; i < 3; i++)
        if ((pid[i] = fork()) == 0) {
            execl(exe, exe, "--racer", dir, g_ref_file, (char *)NULL);
            _exit(127);
        }
    for (int i = 0; i < 3; i++) {
        int st = 0;
        waitpid(pid[i], &st, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "racer %d: status %d", i, st);
    }
    char out[4096];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c pkc$; ls '%s' | grep -c tmp", cdir, cdir);
    run(cmd, out, sizeof out);
    CHECKF(!strcmp(out, "1\n0\n"), "racers left: %s", out);
}

/* ---- moe8 pack ------------------------------------------------------------------- */

/* `moe8 pack ARGS` (stderr folded in): its exit status, its output in out. */
static int pack_cli(const char *args, char *out, size_t cap) {
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "'%s' pack %s 2>&1", MOE8_CLI, args);
    return run(cmd, out, cap);
}

/* Builds, verifies, reports a corrupt file (exit 1, the reason), rebuilds it,
 * packs another shard without MPI, refuses bad flags naming them. */
static void test_pack_cli(const char *dir) {
    char args[4400], out[8192], path[4096], shard[4200];
    cache_path(path, sizeof path, dir, table_name());
    unlink(path);
    snprintf(args, sizeof args, "-m '%s' --verify", dir);
    CHECKF(pack_cli(args, out, sizeof out) == 1 && strstr(out, "absent"), "verify, no file: %s", out);
    snprintf(args, sizeof args, "-m '%s'", dir);
    CHECKF(pack_cli(args, out, sizeof out) == 0 && strstr(out, ": valid") && strstr(out, path),
           "pack: %s", out);
    snprintf(args, sizeof args, "-m '%s' --verify", dir);
    CHECKF(pack_cli(args, out, sizeof out) == 0 && strstr(out, ": valid"), "verify: %s", out);
    size_t n;
    unsigned char *b = slurp(path, &n);
    const uint64_t off = rd64(b + H_SIZE), bytes = rd64(b + H_SIZE + 8);
    b[off + bytes / 3] ^= 0x01;
    spit(path, b, n);
    CHECKF(pack_cli(args, out, sizeof out) == 1 && strstr(out, "invalid") &&
           strstr(out, "section 0 (a layer) checksum mismatch (corrupt)"), "verify, corrupt: %s", out);
    snprintf(args, sizeof args, "-m '%s'", dir);
    CHECKF(pack_cli(args, out, sizeof out) == 0 && strstr(out, ": valid"), "pack over a corrupt "
           "file: %s", out);
    free(b);
    /* rank 1 of 2, and its expert-parallel split: their own files */
    snprintf(shard, sizeof shard, "%s/.moe8-cache/%s-tp2r1.pkc", dir, table_name());
    snprintf(args, sizeof args, "-m '%s' --tp 2 --rank 1", dir);
    CHECKF(pack_cli(args, out, sizeof out) == 0 && strstr(out, ": valid") && strstr(out, shard),
           "pack --tp 2 --rank 1: %s", out);
    CHECK(file_size(shard) > 0 && file_size(shard) < file_size(path));
    snprintf(shard, sizeof shard, "%s/.moe8-cache/%s-tp2r1-ep.pkc", dir, table_name());
    snprintf(args, sizeof args, "-m '%s' --tp 2 --rank 1 --expert-parallel", dir);
    CHECKF(pack_cli(args, out, sizeof out) == 0 && strstr(out, shard), "pack --expert-parallel: %s",
           out);
    static const struct { const char *flags, *want; } bad[] = {
        {"--tp 2", "--tp N (N >= 2) and --rank R go together"},
        {"--rank 0", "--tp N (N >= 2) and --rank R go together"},
        {"--tp 2 --rank 2", "--rank must be below --tp"},
        {"--tp 0 --rank 0", "--tp wants an integer in 1..4096, got '0'"},
        {"--tp 2 --rank x", "--rank wants an integer in 0..4095, got 'x'"},
        {"--expert-parallel", "--expert-parallel needs --tp N with N >= 2"},
        {"--threads 0", "--threads wants an integer in 1..4096, got '0'"},
        {"--isa nosuch", "nosuch"},
        {"--tp", "--tp wants a value (N)"},
        {"--bogus", "unknown option '--bogus'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "-m '%s' %s", dir, bad[i].flags);
        const int rc = pack_cli(args, out, sizeof out);
        CHECKF(rc != 0 && strstr(out, bad[i].want), "pack %s: exit %d, %s", bad[i].flags, rc, out);
    }
    printf("moe8 pack: build, --verify (valid, absent, corrupt), --tp 2 --rank 1 [--expert-parallel] "
           "and %zu bad flags checked\n", sizeof bad / sizeof bad[0]);
}

/* ---- a memory limit below the cache's size ----------------------------------- */

/* Write `val` to the cgroup file dir/name; 0 on success. */
static int cg_write(const char *dir, const char *name, const char *val) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f) return -1;
    const int bad = fputs(val, f) < 0;
    return (fclose(f) != 0 || bad) ? -1 : 0;
}

/* The first number in dir/name after `key` (NULL: the file's first number); -1 if none. */
static long long cg_read(const char *dir, const char *name, const char *key) {
    char p[4200], buf[4096];
    size_t n;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *at = key ? strstr(buf, key) : buf;
    return at ? strtoll(at + (key ? strlen(key) : 0), NULL, 10) : -1;
}

/* A cgroup (v2 memory.max, or v1 memory.limit_in_bytes) of `limit` bytes in
 * cg; 2 for v2, 1 for v1, 0 (why filled) where this machine does not allow one. */
static int cg_create(char *cg, size_t cap, long long limit, char *why, size_t wcap) {
    char v[32];
    snprintf(v, sizeof v, "%lld", limit);
    const char *roots[2] = {"/sys/fs/cgroup", "/sys/fs/cgroup/memory"};
    for (int ver = 2; ver >= 1; ver--) {
        const char *root = roots[2 - ver];
        char probe[256];
        snprintf(probe, sizeof probe, "%s/%s", root, ver == 2 ? "cgroup.controllers" : "memory.limit_in_bytes");
        if (!exists(probe)) continue;
        if (ver == 2 && cg_read(root, "cgroup.controllers", "memory") == -1) continue;
        snprintf(cg, cap, "%s/moe8-test-%d", root, (int)getpid());
        if (mkdir(cg, 0755) != 0) {
            snprintf(why, wcap, "cannot create %s: %s", cg, strerror(errno));
            return 0;
        }
        const int ok = ver == 2 ? cg_write(cg, "memory.max", v) == 0
                                : cg_write(cg, "memory.limit_in_bytes", v) == 0;
        if (ver == 2) cg_write(cg, "memory.swap.max", "0"); /* where swap exists */
        if (ok) return ver;
        snprintf(why, wcap, "cannot set the memory limit of %s", cg);
        rmdir(cg);
        return 0;
    }
    snprintf(why, wcap, "no cgroup memory controller mounted under /sys/fs/cgroup");
    return 0;
}

/* Write `size` bytes to path and sync them; the exit status of a child. */
static int write_probe(const char *path, long size) {
    static char block[1 << 20];
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return 2;
    for (long done = 0; done < size; done += (long)sizeof block)
        if (write(fd, block, sizeof block) != (ssize_t)sizeof block) return 3;
    return fsync(fd) == 0 && close(fd) == 0 ? 0 : 4;
}

/* A fresh process run inside the cgroup cg: test_race's --racer (outputs
 * against g_ref_file) or, with probe set, write_probe(probe, probe_size); its
 * wait status. */
static int cg_run(const char *cg, const char *dir, const char *probe, long probe_size) {
    char exe[64], pid_s[32];
    int pfd[2], st = 0;
    snprintf(exe, sizeof exe, "/proc/%d/exe", (int)getpid());
    if (pipe(pfd) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) { /* wait until the parent has moved us into the cgroup, then run */
        char c;
        close(pfd[1]);
        if (read(pfd[0], &c, 1) != 1) _exit(126);
        if (probe) _exit(write_probe(probe, probe_size));
        execl(exe, exe, "--racer", dir, g_ref_file, (char *)NULL);
        _exit(127);
    }
    close(pfd[0]);
    snprintf(pid_s, sizeof pid_s, "%d", (int)pid);
    CHECKF(cg_write(cg, "cgroup.procs", pid_s) == 0, "cannot move the child into %s", cg);
    CHECK(write(pfd[1], "g", 1) == 1);
    close(pfd[1]);
    waitpid(pid, &st, 0);
    return st;
}

/* A model whose packed cache is about 150 MB, under a cgroup limit of 60% of
 * it: a fresh process builds the cache (one section in memory at a time) and
 * gives the unconstrained answers; another, after the cache's pages are
 * dropped from the page cache (so its faults are charged to its own cgroup),
 * pages experts in from the mapping and gives them too. 8 layers: the
 * process's own memory besides the cache (~44 MB) must sit well below the
 * limit — with 4 (an 80 MB cache, a 46 MB limit) it was OOM-killed in some
 * checkouts. */
static void test_cgroup(void) {
    fx_opts fo = fx_default_opts();
    fo.quant = 1;
    fo.hidden = 256;
    fo.n_heads = 4;
    fo.n_kv_heads = 2;
    fo.head_dim = 64;
    fo.n_layers = 8;
    fo.n_experts = 64;
    fo.top_k = 8;
    fo.moe_inter = 384;
    fo.seed = 4242;
    const char *dir = write_fixture("cache_cgroup", &fo);
    const int V = 256;
#if defined(__SANITIZE_ADDRESS__)
    /* ASan's shadow memory and quarantine are not the program's: no limit fits */
    (void)dir;
    printf("memory limit below the cache size: skipped (AddressSanitizer build)\n");
    return;
#endif
    float *ref = malloc(sizeof(float) * N_OUT(V));
    char path[4096], cg[4096], why[4400];
    outputs(dir, &(opts){0}, V, ref); /* builds the cache */
    cache_path(path, sizeof path, dir, table_name());
    const long size = file_size(path);
    const long long limit = size / 10 * 6;
    int fd;
    const int ver = cg_create(cg, sizeof cg, limit, why, sizeof why);
    if (!ver) {
        printf("memory limit below the cache size: skipped (%s)\n", why);
        free(ref);
        return;
    }
    /* where written files stay in memory (tmpfs, or an overlay on one) a cache
     * larger than the limit cannot be written under it at all: a child writes a
     * file of the cache's size first, and the test is skipped if it is killed */
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/cgroup-probe", dir);
    const int pst = cg_run(cg, dir, probe, size);
    unlink(probe);
    if (!WIFEXITED(pst) || WEXITSTATUS(pst) != 0) {
        printf("memory limit below the cache size: skipped (writing %ld bytes to %s under a "
               "%lld-byte limit: child status %d; its file system keeps written files in memory)\n",
               size, dir, limit, pst);
        rmdir(cg);
        free(ref);
        return;
    }
    const long long base = ver == 2 ? cg_read(cg, "memory.events", "max ") : cg_read(cg, "memory.failcnt", NULL);
    spit(g_ref_file, (const unsigned char *)ref, sizeof(float) * N_OUT(V));
    /* first the cache is built under the limit (one section in memory at a time),
     * then a fresh process maps it (its pages dropped first) */
    long long hits[2] = {0, 0};
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0) {
            CHECK(unlink(path) == 0);
        } else {
            fd = open(path, O_RDONLY);
            CHECK(fd >= 0 && fdatasync(fd) == 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0);
            if (fd >= 0) close(fd);
        }
        const int st = cg_run(cg, dir, NULL, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0,
               "%s under a %lld-byte limit (60%% of the %ld-byte cache): child status %d (%s)",
               pass ? "mapping" : "building", limit, size, st,
               WIFSIGNALED(st) ? "killed: out of memory?" : "outputs differ");
        /* the limit was reached: the kernel reclaimed pages to stay under it */
        hits[pass] = (ver == 2 ? cg_read(cg, "memory.events", "max ") : cg_read(cg, "memory.failcnt", NULL)) - base;
    }
    CHECK(file_size(path) == size);
    const long long peak = ver == 2 ? cg_read(cg, "memory.peak", NULL)
                                    : cg_read(cg, "memory.max_usage_in_bytes", NULL);
    CHECKF(hits[0] > 0 && hits[1] > hits[0], "the limit of %lld bytes was reached %lld times "
           "building, %lld in all", limit, hits[0], hits[1]);
    CHECKF(peak <= limit, "peak %lld above the limit %lld", peak, limit);
    printf("cgroup v%d limit %lld bytes (60%% of the %ld-byte cache): built, then mapped by a fresh "
           "process, outputs identical, peak %lld bytes, limit reached %lld + %lld times\n", ver,
           limit, size, peak, hits[0], hits[1] - hits[0]);
    if (rmdir(cg) != 0) printf("note: cannot remove %s: %s\n", cg, strerror(errno));
    free(ref);
}

/* ---- where, and the options ------------------------------------------------ */

/* A write that fails part way (RLIMIT_FSIZE: the disk "fills" after 64 KiB):
 * the weights are packed in memory instead, the answers unchanged, nothing
 * left behind; the next load builds the cache. */
static void test_write_failure(const char *dir, const float *ref, int V) {
    char cdir[4096], cmd[8400], out[4096], path[4096];
    float *got = malloc(sizeof(float) * N_OUT(V));
    struct rlimit old, low;
    snprintf(cdir, sizeof cdir, "%s/.moe8-cache", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cdir);
    CHECK(system(cmd) == 0);
    cache_path(path, sizeof path, dir, table_name());
    getrlimit(RLIMIT_FSIZE, &old);
    low = old;
    low.rlim_cur = 64 << 10;
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &low) == 0);
    g_log[0] = 0;
    outputs(dir, &(opts){0}, V, got);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, was);
    CHECKF(!memcmp(got, ref, sizeof(float) * N_OUT(V)), "a failed cache write: outputs differ");
    CHECKF(strstr(g_log, "packed cache not written: cannot write") != NULL, "no warning: %s", g_log);
    CHECK(!exists(path));
    snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -v '\\.lock$' | wc -l", cdir);
    run(cmd, out, sizeof out);
    CHECKF(!strcmp(out, "0\n"), "left in %s after a failed write: %s", cdir, out);
    /* what a killed builder leaves (<name>.tmp.<pid>) goes with the next build;
     * names that are not its are kept */
    char stale[4200], keep1[4200], keep2[4200];
    snprintf(stale, sizeof stale, "%s.tmp.4194305", path);
    snprintf(keep1, sizeof keep1, "%s.tmp.12x", path);
    snprintf(keep2, sizeof keep2, "%s/other-tp1r0.pkc.tmp.7", cdir);
    spit(stale, (const unsigned char *)"x", 1);
    spit(keep1, (const unsigned char *)"x", 1);
    spit(keep2, (const unsigned char *)"x", 1);
    g_log[0] = 0;
    outputs(dir, &(opts){0}, V, got);
    CHECKF(exists(path) && !memcmp(got, ref, sizeof(float) * N_OUT(V)), "after a failed write, "
           "the next load: cache %d, outputs %s", exists(path),
           memcmp(got, ref, sizeof(float) * N_OUT(V)) ? "differ" : "equal");
    CHECKF(!exists(stale) && exists(keep1) && exists(keep2) && strstr(g_log, "did not finish"),
           "a stale temporary: removed %d, others kept %d %d, log '%s'", !exists(stale), exists(keep1),
           exists(keep2), g_log);
    unlink(keep1);
    unlink(keep2);
    printf("a cache write failing at 64 KiB: packed in memory instead, outputs identical, nothing "
           "left; the next load built it and removed a killed build's temporary\n");
    free(got);
}

static void test_locations(const char *dir, const float *ref, int V) {
    char cdir[4096], xdg[4200], cmd[8400], path[4200];
    float *got = malloc(sizeof(float) * N_OUT(V));
    opts o = {0};
    moe8_model *m;
    moe8_error e;
    moe8_cache_info ci;
    /* --no-cache: nothing written */
    snprintf(cdir, sizeof cdir, "%s/.moe8-cache", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cdir);
    CHECK(system(cmd) == 0);
    o.no_cache = 1;
    outputs(dir, &o, V, got);
    CHECK(!memcmp(got, ref, sizeof(float) * N_OUT(V)) && !exists(cdir));
    /* the model folder unusable (.moe8-cache a file): $XDG_CACHE_HOME/moe8 */
    spit(cdir, (const unsigned char *)"x", 1);
    FMT(xdg, "%s/xdg", test_tmpdir("cache_xdg"));
    setenv("XDG_CACHE_HOME", xdg, 1);
    o.no_cache = 0;
    outputs(dir, &o, V, got);
    CHECK(!memcmp(got, ref, sizeof(float) * N_OUT(V)));
    CHECK(load(dir, &o, &m, &e) == MOE8_OK && moe8_model_cache_check(m, 1, &ci, &e) == MOE8_OK);
    CHECKF(ci.valid && strstr(ci.path, "/xdg/moe8/") != NULL, "xdg: %s %s", ci.path, ci.why);
    moe8_model_free(m);
    outputs(dir, &o, V, got); /* mapped from XDG */
    CHECK(!memcmp(got, ref, sizeof(float) * N_OUT(V)));
    /* XDG unusable too: runs without a cache, says so */
    FMT(xdg, "%s/xdg", cdir); /* under a regular file */
    setenv("XDG_CACHE_HOME", xdg, 1);
    g_log[0] = 0;
    outputs(dir, &o, V, got);
    CHECK(!memcmp(got, ref, sizeof(float) * N_OUT(V)));
    CHECKF(strstr(g_log, "packing in memory") != NULL, "no warning: %s", g_log);
    unsetenv("XDG_CACHE_HOME");
    unlink(cdir);
    /* --cache-dir: there only; an unusable one is an error naming it */
    o.cache_dir = test_tmpdir("cache_dir");
    outputs(dir, &o, V, got);
    CHECK(!memcmp(got, ref, sizeof(float) * N_OUT(V)) && !exists(cdir));
    CHECK(load(dir, &o, &m, &e) == MOE8_OK && moe8_model_cache_check(m, 0, &ci, &e) == MOE8_OK);
    CHECKF(ci.valid && strstr(ci.path, o.cache_dir) == ci.path, "cache-dir: %s", ci.path);
    moe8_model_free(m);
    FMT(path, "%s/model.safetensors/sub", dir);
    o.cache_dir = path;
    CHECK(load(dir, &o, &m, &e) == MOE8_OK);
    moe8_context_params cp = moe8_context_params_default();
    moe8_context *c = NULL;
    cp.n_ctx = 16;
    CHECK(moe8_context_create(m, &cp, &c, &e) == MOE8_ERR_IO && strstr(e.message, path));
    moe8_model_free(m);
    /* --no-mmap reads the file into memory; --mlock pins the mapping */
    o = (opts){0};
    outputs(dir, &o, V, got); /* builds beside the model again */
    o.no_mmap = 1;
    outputs(dir, &o, V, got);
    CHECK(!memcmp(got, ref, sizeof(float) * N_OUT(V)));
    o.no_mmap = 0;
    o.mlock = 1;
    struct rlimit old, low = {4096, 4096};
    getrlimit(RLIMIT_MEMLOCK, &old);
    low.rlim_max = old.rlim_max;
    setrlimit(RLIMIT_MEMLOCK, &low);
    CHECK(load(dir, &o, &m, &e) == MOE8_OK);
    moe8_status st = moe8_context_create(m, &cp, &c, &e);
    if (st == MOE8_OK) {
        printf("mlock: allowed beyond RLIMIT_MEMLOCK (CAP_IPC_LOCK: root); refusal not tested\n");
        moe8_context_free(c);
    } else {
        CHECKF(st == MOE8_ERR_IO && strstr(e.message, "RLIMIT_MEMLOCK"), "mlock: %s", e.message);
    }
    moe8_model_free(m);
    setrlimit(RLIMIT_MEMLOCK, &old);
    outputs(dir, &o, V, got);
    CHECK(!memcmp(got, ref, sizeof(float) * N_OUT(V)));
    free(got);
}

/* ---- bit-identical outputs --------------------------------------------------- */

static const char *family_dir(int arch) {
    fx_opts o = fx_default_opts();
    char name[64];
    o.arch = arch;
    o.quant = 1;
    o.n_layers = 3;
    o.dense_layer = 1;
    o.nonzero_offsets = 1;
    o.lm_head_w8a8 = 1;
    o.seed = 900 + (uint64_t)arch;
    if (arch == MOE8_ARCH_DEEPSEEK_V3) { /* sigmoid routing in groups, q_lora, a W8A8 kv_b */
        o.n_experts = 6, o.n_group = 3, o.topk_group = 2;
        o.q_lora = 24;
        o.kvb_w8a8 = 1;
    } else if (arch == MOE8_ARCH_DEEPSEEK_V2) {
        o.yarn = 1;
    }
    snprintf(name, sizeof name, "cache_%s", moe8_arch_name((moe8_arch)arch));
    return write_fixture(name, &o);
}

/* No cache, building, mapped, read into memory: one answer. Returns the reference in ref. */
static void test_identical(const char *dir, int V, float *ref, const char *label) {
    float *got = malloc(sizeof(float) * N_OUT(V));
    char path[4096];
    opts o = {0};
    cache_path(path, sizeof path, dir, table_name());
    o.no_cache = 1;
    outputs(dir, &o, V, ref);
    CHECK(!exists(path));
    o.no_cache = 0;
    const char *mode[4] = {"building", "mapped", "read", "prepared, mapped"};
    for (int i = 0; i < 4; i++) {
        o.no_mmap = i == 2;
        o.prepare = i == 3;
        outputs(dir, &o, V, got);
        CHECKF(!memcmp(got, ref, sizeof(float) * N_OUT(V)), "%s (%s): outputs differ from no "
               "cache", label, mode[i]);
        CHECKF(exists(path), "%s: no cache at %s", label, path);
    }
    printf("%-12s %-8s cache %ld bytes: logits + greedy identical (no cache, building, mapped, "
           "read, moe8_model_prepare then mapped)\n", label, table_name(), file_size(path));
    free(got);
}

int main(int argc, char **argv) {
    moe8_set_log(on_log, NULL);
    FMT(g_ref_file, "%s/cache_ref.bin", MOE8_TEST_TMP);
    if (argc == 4 && !strcmp(argv[1], "--racer")) { /* test_race */
        size_t n;
        float *want = (float *)slurp(argv[3], &n), *got = malloc(n);
        outputs(argv[2], &(opts){0}, 256, got);
        const int bad = n != sizeof(float) * N_OUT(256) || memcmp(got, want, n) || test_n_fail;
        free(want);
        free(got);
        return bad ? 3 : 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "--table-child")) { /* under MOE8_ISA=... */
        float *ref = malloc(sizeof(float) * N_OUT(256));
        for (int i = 2; i < argc; i++) {
            const char *base = strrchr(argv[i], '/');
            test_identical(argv[i], 256, ref, base ? base + 1 + strlen("cache_") : argv[i]);
        }
        free(ref);
        return test_summary();
    }
    const int archs[5] = {MOE8_ARCH_QWEN3_MOE, MOE8_ARCH_QWEN2_MOE, MOE8_ARCH_MIXTRAL,
                          MOE8_ARCH_DEEPSEEK_V2, MOE8_ARCH_DEEPSEEK_V3};
    const int V = 256;
    float *ref = malloc(sizeof(float) * N_OUT(V));
    const char *dirs[5];
    for (int a = 0; a < 5; a++) {
        dirs[a] = family_dir(archs[a]);
        test_identical(dirs[a], V, ref, moe8_arch_name((moe8_arch)archs[a]));
    }
    /* every other table the CPU has: its own files beside the first, the same answers */
    char tables[256], *save = NULL;
    int n_other = 0;
    snprintf(tables, sizeof tables, "%s", moe8_kernel_tables());
    for (char *t = strtok_r(tables, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        if (strchr(t, '(') || !strcmp(t, table_name())) continue; /* unsupported, or this one */
        char cmd[8300], out[16384], p1[4096], p2[4096];
        int at = snprintf(cmd, sizeof cmd, "MOE8_ISA=%s /proc/%d/exe --table-child", t, (int)getpid());
        for (int a = 0; a < 5; a++) at += snprintf(cmd + at, sizeof cmd - at, " '%s'", dirs[a]);
        snprintf(cmd + at, sizeof cmd - at, " 2>&1");
        const int rc = run(cmd, out, sizeof out);
        fputs(out, stdout);
        CHECKF(rc == 0, "MOE8_ISA=%s child failed (%d)", t, rc);
        for (int a = 0; a < 5; a++) {
            cache_path(p1, sizeof p1, dirs[a], table_name());
            cache_path(p2, sizeof p2, dirs[a], t);
            CHECKF(exists(p1) && exists(p2), "%s: the %s and %s files", dirs[a], table_name(), t);
        }
        n_other++;
        if (strcmp(t, "avx2")) continue;
        /* the avx2 file under this table's name: refused, rebuilt */
        size_t n;
        cache_path(p1, sizeof p1, dirs[0], table_name());
        cache_path(p2, sizeof p2, dirs[0], "avx2");
        unsigned char *b = slurp(p2, &n);
        outputs(dirs[0], &(opts){.no_cache = 1}, V, ref);
        char want[64];
        snprintf(want, sizeof want, "packed by table avx2 (layout k2), this is %s", table_name());
        check_detected(dirs[0], p1, b, n, want, ref, V, "the avx2 table's file");
        free(b);
    }
    if (!n_other) printf("another table: skipped (no second table on this CPU)\n");
    outputs(dirs[0], &(opts){.no_cache = 1}, V, ref);
    test_corruption(dirs[0], ref, V);
    test_race(dirs[0], ref, V);
    test_locations(dirs[0], ref, V);
    test_write_failure(dirs[0], ref, V);
    free(ref);
    test_pack_cli(dirs[1]);
    test_cgroup();
    return test_summary();
}
