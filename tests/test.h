/*
 * test.h — the tiny harness every tests/test_*.c uses. A test program runs
 * its checks, prints "N passed, N failed" and exits non-zero on any failure.
 *
 *   CHECK(cond)                 count one check
 *   CHECKF(cond, fmt, ...)      same, with a message on failure
 *   CHECK_NEAR(a, b, tol)       |a-b| <= tol
 *   return test_summary();
 */
#ifndef MOE8_TEST_H
#define MOE8_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "moe8.h" /* and the other levels the tests reach: */
#include "moe8_bench.h"
#include "moe8_dist.h"
#include "moe8_moe.h"
#include "moe8_safetensors.h"
#include "moe8_tools.h"

static int test_n_pass, test_n_fail;

#define CHECKF(cond, ...)                                                         \
    do {                                                                          \
        if (cond) {                                                               \
            test_n_pass++;                                                        \
        } else {                                                                  \
            test_n_fail++;                                                        \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);       \
            fprintf(stderr, __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                  \
        }                                                                         \
    } while (0)
#define CHECK(cond) CHECKF(cond, "check failed")
#define CHECK_NEAR(a, b, tol)                                                     \
    CHECKF(fabs((double)(a) - (double)(b)) <= (tol), "%.9g vs %.9g (tol %g)",       \
           (double)(a), (double)(b), (double)(tol))

/* Cosine similarity of a and b in double (the tests' accuracy measure). */
static inline double test_cosine(const float *a, const float *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++)
        ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return ab / sqrt(aa * bb);
}

/* The same against a double-precision reference. */
static inline double test_cosine_ref(const float *a, const double *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++) ab += a[i] * b[i], aa += (double)a[i] * a[i], bb += b[i] * b[i];
    return ab / sqrt(aa * bb);
}

/* Undo the vector files' escapes ("\\" and "\xNN") of s[0..n) into out; its length. */
static inline size_t test_unescape(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n && s[i + 1] == '\\') {
            out[o++] = '\\';
            i++;
        } else if (s[i] == '\\' && i + 3 < n && s[i + 1] == 'x') {
            char hex[3] = {s[i + 2], s[i + 3], 0};
            out[o++] = (char)strtol(hex, NULL, 16);
            i += 3;
        } else {
            out[o++] = s[i];
        }
    }
    return o;
}

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_n_pass, test_n_fail);
    return test_n_fail ? 1 : 0;
}

/* Checks that mostly wait (on a server's timers, say) run side by side in
 * child processes: test_fork(fn, arg) starts fn(arg) in one (in this process
 * when it cannot fork), test_fork_join() waits for every child and adds its
 * counts to this process's; a child that ends without them counts as a
 * failure. A child ends with _exit: no exit handlers, no leak report. */
#define TEST_MAX_FORKS 16
static struct { pid_t pid; int fd; } test_forks[TEST_MAX_FORKS];
static int test_n_forks;

static inline void test_fork(void (*fn)(void *), void *arg) {
    int p[2];
    pid_t pid;
    fflush(NULL);
    if (test_n_forks == TEST_MAX_FORKS || pipe(p) != 0) {
        fn(arg);
        return;
    }
    if ((pid = fork()) < 0) {
        close(p[0]);
        close(p[1]);
        fn(arg);
        return;
    }
    if (pid == 0) {
        int counts[2];
        close(p[0]);
        test_n_pass = test_n_fail = 0;
        fn(arg);
        counts[0] = test_n_pass, counts[1] = test_n_fail;
        fflush(NULL);
        _exit(write(p[1], counts, sizeof counts) == (ssize_t)sizeof counts ? 0 : 3);
    }
    close(p[1]);
    test_forks[test_n_forks].pid = pid;
    test_forks[test_n_forks++].fd = p[0];
}

static inline void test_fork_join(void) {
    for (int i = 0; i < test_n_forks; i++) {
        int counts[2] = {0, 0}, st = 0;
        const ssize_t n = read(test_forks[i].fd, counts, sizeof counts);
        close(test_forks[i].fd);
        waitpid(test_forks[i].pid, &st, 0);
        if (n != (ssize_t)sizeof counts || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            test_n_fail++;
            fprintf(stderr, "FAIL a forked check (pid %d) ended without its counts (status %d)\n",
                    (int)test_forks[i].pid, st);
        } else {
            test_n_pass += counts[0], test_n_fail += counts[1];
        }
    }
    test_n_forks = 0;
}

/* n bytes (n > 0) ending where an unmapped page begins: touching the byte
 * after the end faults (SIGSEGV) in every build, instrumented or not; the
 * start is aligned to any element size that divides n. NULL if mmap fails.
 * Free with test_guarded_free(p, n). */
static inline size_t test_guard_pages(size_t n, size_t *page) { /* bytes before the guard */
    *page = (size_t)sysconf(_SC_PAGESIZE);
    return (n + *page - 1) / *page * *page;
}

static inline void *test_guarded_alloc(size_t n) {
    size_t page;
    const size_t len = test_guard_pages(n, &page);
    char *base = mmap(NULL, len + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    if (mprotect(base + len, page, PROT_NONE) != 0) {
        munmap(base, len + page);
        return NULL;
    }
    return base + len - n;
}

static inline void test_guarded_free(void *p, size_t n) {
    size_t page;
    const size_t len = test_guard_pages(n, &page);
    if (p) munmap((char *)p + n - len, len + page);
}

/* The scratch root: MOE8_TEST_TMP, or MOE8_TEST_TMP/isa-NAME under MOE8_ISA=NAME,
 * so the runs of one test under each kernel table, which ctest runs side by
 * side, never write the same folder. Created on first use. */
static inline const char *test_tmp_root(void) {
    static char root[2048];
    if (!root[0]) {
        const char *isa = getenv("MOE8_ISA");
        if (isa && *isa && !strchr(isa, '/') && !strchr(isa, '\'')) {
            char cmd[sizeof root + 32];
            snprintf(root, sizeof root, "%s/isa-%s", MOE8_TEST_TMP, isa);
            snprintf(cmd, sizeof cmd, "mkdir -p '%s'", root);
            if (system(cmd) != 0) snprintf(root, sizeof root, "%s", MOE8_TEST_TMP);
        } else {
            snprintf(root, sizeof root, "%s", MOE8_TEST_TMP);
        }
    }
    return root;
}

/* A fresh, empty scratch folder under the build tree: test_tmp_root()/<name>. */
static inline const char *test_tmpdir(const char *name) {
    static char path[4096];
    char cmd[2 * sizeof path + 32];
    snprintf(path, sizeof path, "%s/%s", test_tmp_root(), name);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", path, path);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot create scratch folder %s\n", path);
        exit(2);
    }
    return path;
}

/* Write `n` bytes to `path`; aborts the test program on failure. */
static inline void test_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

/* Deterministic pseudo-random numbers for tests (xorshift64*, Box-Muller). */
typedef struct { unsigned long long s; } test_rng;
static inline unsigned long long test_rng_u64(test_rng *r) {
    r->s ^= r->s >> 12; r->s ^= r->s << 25; r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ULL;
}
static inline double test_rng_uniform(test_rng *r) { /* [0,1) */
    return (double)(test_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}
static inline double test_rng_normal(test_rng *r) {
    double u1 = test_rng_uniform(r), u2 = test_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Whole file into a NUL-terminated malloc'd buffer (NULL if it cannot be read). */
static inline unsigned char *test_slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    unsigned char *b;
    long len;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return NULL;
    }
    b = malloc((size_t)len + 1);
    if (!b) {
        fclose(f);
        return NULL;
    }
    *n = fread(b, 1, (size_t)len, f);
    b[*n] = 0;
    fclose(f);
    return b;
}

/* Run a shell command; its exit status, or -1 when it did not exit. */

static inline int test_run(const char *cmd) {
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* 1 when the file holds `needle` (printing the file when it does not). */
static inline int test_file_contains(const char *path, const char *needle) {
    size_t n = 0;
    unsigned char *b = test_slurp(path, &n);
    int found = b && strstr((char *)b, needle) != NULL;
    if (!found && b) fprintf(stderr, "  (%s holds: %s)\n", path, (char *)b);
    free(b);
    return found;
}

/* Load a model folder the test itself made; a failure ends the test program. */
/* Load a model folder or exit(2) saying why; n_threads 0: the default. */
static inline moe8_model *test_load_model_n(const char *dir, int n_threads) {
    moe8_model_params mp = moe8_model_params_default();
    moe8_model *m = NULL;
    moe8_error e;
    if (n_threads > 0) mp.n_threads = n_threads;
    if (moe8_model_load(dir, &mp, &m, &e) != MOE8_OK) {
        fprintf(stderr, "load %s: %s\n", dir, e.message);
        exit(2);
    }
    return m;
}

static inline moe8_model *test_load_model(const char *dir) { return test_load_model_n(dir, 0); }

/* make-model's tiny preset of `arch` into dir (replaced): vocabulary `vocab`,
 * weights seed `seed`, n_layers (0: the preset's), float_experts as the flag
 * (gpt_oss: stacked experts in the dtype instead of MXFP4); the tokenizer of
 * MOE8_TOKENIZER_DIR. */
static inline void test_make_tiny(const char *dir, moe8_arch arch, int64_t vocab, uint64_t seed,
                                  int n_layers, int float_experts) {
    moe8_make_model_params p = moe8_make_model_params_default();
    moe8_error e;
    p.arch = arch;
    p.vocab_size = vocab;
    p.tokenizer_dir = MOE8_TOKENIZER_DIR;
    p.force = 1;
    p.seed = seed;
    p.n_layers = n_layers;
    p.float_experts = float_experts;
    CHECKF(moe8_make_model(&p, dir, &e) == MOE8_OK, "make-model: %s", e.message);
}

#endif
