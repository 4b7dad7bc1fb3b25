/*
 * test_family_identity.c — the logits of every family, bit for bit, against
 * values committed before the families became declarations (issue 34): a
 * refactor of the descriptors, the loader or the forward that changes one bit
 * of one logit of one family under one kernel table fails here.
 *
 * What it runs: make-model's tiny preset of each family (qwen3_moe,
 * qwen2_moe, mixtral, deepseek_v2, deepseek_v3; 2 layers, vocabulary 2048,
 * seed 7, bf16) and `moe8 quantize` of it (experts W8A8_DYNAMIC, attention
 * and dense MLP W8A8 static, calibrated on the built-in text), both built
 * under the reference table so the W8A8 weights are the same on any CPU.
 * Each model then runs a prefill of 4 tokens and 2 decode steps under each
 * kernel table of the build (a child process per table, MOE8_ISA set), with
 * 1 thread, 2 threads and 2 threads again, which must agree bit for bit; the
 * logits of the 6 positions [6][2048] give a line:
 *
 *   <table> <family> <float|w8a8> <FNV-1a 64 of the logits' bytes> <12 logits' fp32 bits>
 *
 * (positions 0 and 5, 6 ids each), compared with
 * tests/data/family_identity/logits.txt. A table the CPU lacks is skipped
 * and said so; a table the CPU runs but the file has no lines for (a machine
 * with AMX, say) is reported and skipped, not failed.
 *
 * Under the sanitizers only the first table the CPU runs (the best) is
 * evaluated, as for the other whole-model tests (CMakeLists.txt): each
 * table's kernels run under ASan in the kernel-level tests, and every
 * table's bits are checked here in the release build.
 *
 * Before that, the plan each family's declaration resolves to (arch/plan.h)
 * for layers 0 and 1 of its tiny preset: attention and rotary kinds, the
 * feed-forward kind, the router's options.
 *
 * The generator: `test_family_identity --record` writes the file's lines for
 * the tables this machine runs to stdout (the committed file: those lines,
 * with this comment's header lines of '#').
 */
#include "test.h"

#include "arch/plan.h"

#ifndef MOE8_TEST_SANITIZE
#define MOE8_TEST_SANITIZE ""
#endif

#define V 2048
#define N_POS 6
#define N_PRE 4
#define N_SAMPLE 6

static const int32_t prompt[N_POS] = {5, 17, 200, 3, 99, 42};
static const char *const families[] = {"qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v2",
                                       "deepseek_v3"};
#define N_FAM 5

/* ---- building the models (parent, reference table) ----------------------- */

static void model_dir(char *buf, size_t cap, const char *fam, int quant) {
    snprintf(buf, cap, "%s/family_identity/%s_%s", MOE8_TEST_TMP, fam, quant ? "w8a8" : "float");
}

static void build_models(void) {
    char fdir[4096], qdir[4096], cmd[8300];
    moe8_error e;
    snprintf(cmd, sizeof cmd, "rm -rf '%s/family_identity' && mkdir -p '%s/family_identity'",
             MOE8_TEST_TMP, MOE8_TEST_TMP);
    if (system(cmd) != 0) exit(2);
    for (int f = 0; f < N_FAM; f++) {
        moe8_make_model_params mp = moe8_make_model_params_default();
        moe8_quantize_params qp = moe8_quantize_params_default();
        model_dir(fdir, sizeof fdir, families[f], 0);
        model_dir(qdir, sizeof qdir, families[f], 1);
        mp.arch = (moe8_arch)f;
        CHECK(!strcmp(moe8_arch_name(mp.arch), families[f]));
        mp.preset = MOE8_PRESET_TINY;
        mp.n_layers = 2;
        mp.seed = 7;
        mp.vocab_size = V;
        mp.tokenizer_dir = MOE8_TOKENIZER_DIR;
        mp.force = 1;
        if (moe8_make_model(&mp, fdir, &e) != MOE8_OK) {
            fprintf(stderr, "make-model %s: %s\n", families[f], e.message);
            exit(2);
        }
        qp.force = 1;
        qp.n_threads = 2;
        if (moe8_quantize(fdir, qdir, &qp, NULL, &e) != MOE8_OK) {
            fprintf(stderr, "quantize %s: %s\n", families[f], e.message);
            exit(2);
        }
    }
}

/* ---- one table (child) ----------------------------------------------------- */

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Logits [N_POS][V] of the prompt: N_PRE tokens as one batch, then one per step. */
static int run_logits(moe8_model *m, int n_threads, float *out) {
    moe8_context_params p = moe8_context_params_default();
    moe8_context *c = NULL;
    moe8_error e;
    int32_t pos[N_POS], seq[N_POS] = {0};
    int8_t want[N_POS];
    p.kv_type = MOE8_DT_F32;
    p.n_ctx = 32;
    p.n_outputs = 8;
    p.n_threads = n_threads;
    if (moe8_context_create(m, &p, &c, &e) != MOE8_OK) {
        fprintf(stderr, "context: %s\n", e.message);
        return -1;
    }
    for (int i = 0; i < N_POS; i++) pos[i] = i, want[i] = 1;
    moe8_batch b = {N_PRE, prompt, pos, seq, want};
    if (moe8_decode(c, &b, &e) != MOE8_OK) goto fail;
    for (int i = 0; i < N_PRE; i++) memcpy(out + (size_t)i * V, moe8_context_logits(c, i), sizeof(float) * V);
    for (int i = N_PRE; i < N_POS; i++) {
        moe8_batch b1 = {1, prompt + i, pos + i, seq, want};
        if (moe8_decode(c, &b1, &e) != MOE8_OK) goto fail;
        memcpy(out + (size_t)i * V, moe8_context_logits(c, 0), sizeof(float) * V);
    }
    moe8_context_free(c);
    return 0;
fail:
    fprintf(stderr, "decode: %s\n", e.message);
    moe8_context_free(c);
    return -1;
}

/* One line per family and dtype on stdout; exit status 0, or 1 when a model
 * fails to run or the thread counts disagree. */
static int eval_table(void) {
    const char *isa = moe8_kernel_isa();
    float *a = malloc(sizeof(float) * N_POS * V), *b = malloc(sizeof(float) * N_POS * V);
    int bad = 0;
    for (int f = 0; f < N_FAM; f++)
        for (int q = 0; q < 2; q++) {
            char dir[4096];
            moe8_model_params mp = moe8_model_params_default();
            moe8_model *m = NULL;
            moe8_error e;
            model_dir(dir, sizeof dir, families[f], q);
            mp.no_cache = 1;
            if (moe8_model_load(dir, &mp, &m, &e) != MOE8_OK) {
                fprintf(stderr, "load %s: %s\n", dir, e.message);
                bad = 1;
                continue;
            }
            if (run_logits(m, 1, a)) bad = 1;
            for (int rep = 0; rep < 2 && !bad; rep++) {
                if (run_logits(m, 2, b)) bad = 1;
                else if (memcmp(a, b, sizeof(float) * N_POS * V)) {
                    fprintf(stderr, "%s %s %s: 1 and 2 threads differ (run %d)\n", isa,
                            families[f], q ? "w8a8" : "float", rep + 1);
                    bad = 1;
                }
            }
            printf("%s %s %s %016llx", isa, families[f], q ? "w8a8" : "float",
                   (unsigned long long)fnv1a(a, sizeof(float) * N_POS * V));
            for (int s = 0; s < 2 * N_SAMPLE; s++) {
                const int t = s < N_SAMPLE ? 0 : N_POS - 1, id = (s % N_SAMPLE) * (V / N_SAMPLE) + 13;
                uint32_t bits;
                memcpy(&bits, &a[(size_t)t * V + id], 4);
                printf(" %08x", bits);
            }
            printf("\n");
            moe8_model_free(m);
        }
    free(a);
    free(b);
    return bad;
}

/* ---- the plans the families' declarations resolve to (arch/plan.h) ---------- */

/* Layer 0 and 1 of each tiny preset (2 layers): what each family is built of. */
static void test_plans(void) {
    static const struct {
        moe8_attn_kind attn;
        unsigned opts;
        moe8_rope_kind rope;
        moe8_ffn_kind ffn0, ffn1;
        moe8_shared_gate gate;
        int sigmoid, bias, grouped, top2, renorm;
        double scale;
    } want[N_FAM] = {
        {MOE8_ATTN_GQA, MOE8_ATTN_QK_NORM_HEAD, MOE8_ROPE_HALVES, MOE8_FFN_DENSE, MOE8_FFN_MOE,
         MOE8_SHARED_SUM, 0, 0, 0, 0, 1, 1.0},
        {MOE8_ATTN_GQA, MOE8_ATTN_QKV_BIAS, MOE8_ROPE_HALVES, MOE8_FFN_DENSE,
         MOE8_FFN_MOE_SHARED, MOE8_SHARED_SIGMOID_GATE, 0, 0, 0, 0, 0, 1.0},
        {MOE8_ATTN_GQA, 0, MOE8_ROPE_HALVES, MOE8_FFN_MOE, MOE8_FFN_MOE, MOE8_SHARED_SUM, 0, 0, 0,
         0, 1, 1.0},
        {MOE8_ATTN_MLA, 0, MOE8_ROPE_PAIRS, MOE8_FFN_DENSE, MOE8_FFN_MOE_SHARED, MOE8_SHARED_SUM,
         0, 0, 1, 0, 0, 1.0},
        {MOE8_ATTN_MLA, 0, MOE8_ROPE_PAIRS, MOE8_FFN_DENSE, MOE8_FFN_MOE_SHARED, MOE8_SHARED_SUM,
         1, 1, 1, 1, 1, 2.5},
    };
    for (int f = 0; f < N_FAM; f++) {
        moe8_make_model_params mp = moe8_make_model_params_default();
        moe8_config c;
        moe8_layer_plan p0, p1;
        moe8_error e;
        mp.arch = (moe8_arch)f;
        mp.n_layers = 2;
        CHECKF(moe8_make_model_config(&mp, &c, &e) == MOE8_OK, "%s: %s", families[f], e.message);
        moe8_plan_layer(&c, 0, &p0);
        moe8_plan_layer(&c, 1, &p1);
        CHECKF(p0.attn == want[f].attn && p0.attn_opts == want[f].opts && p0.rope == want[f].rope &&
                   p0.ffn == want[f].ffn0 && p1.ffn == want[f].ffn1 && p1.act == MOE8_ACT_SWIGLU,
               "%s: attention %s %#x, rotary %s, feed-forward %s / %s", families[f],
               moe8_attn_kind_name(p0.attn), p0.attn_opts, moe8_rope_kind_name(p0.rope),
               moe8_ffn_kind_name(p0.ffn), moe8_ffn_kind_name(p1.ffn));
        CHECKF(p1.ffn != MOE8_FFN_MOE_SHARED || p1.shared_gate == want[f].gate, "%s: shared gate",
               families[f]);
        CHECKF(p1.sigmoid == want[f].sigmoid && p1.correction_bias == want[f].bias &&
                   p1.grouped == want[f].grouped && p1.group_top2 == want[f].top2 &&
                   p1.renorm == want[f].renorm && p1.scale == want[f].scale,
               "%s: router sigmoid %d bias %d grouped %d top2 %d renorm %d scale %g", families[f],
               p1.sigmoid, p1.correction_bias, p1.grouped, p1.group_top2, p1.renorm, p1.scale);
        CHECKF(p0.rope_dim == (f >= 3 ? 16 : 32), "%s: rotary width %d", families[f], p0.rope_dim);
    }
}

/* ---- every table (parent) -------------------------------------------------- */

/* The committed line of `key` ("<table> <family> <dtype>"), or NULL. */
static const char *committed(const char *file, const char *key) {
    size_t k = strlen(key);
    for (const char *p = file; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (*p != '#' && !strncmp(p, key, k) && p[k] == ' ') return p;
    return NULL;
}

static int line_eq(const char *a, const char *b) {
    size_t i = 0;
    while (a[i] && a[i] != '\n' && a[i] == b[i]) i++;
    return (!a[i] || a[i] == '\n') && (!b[i] || b[i] == '\n');
}

int main(int argc, char **argv) {
    const int record = argc > 1 && !strcmp(argv[1], "--record");
    char tables[256], path[4096], *file = NULL;
    if (argc > 1 && !strcmp(argv[1], "--eval")) return eval_table();
    setenv("MOE8_ISA", "ref", 1); /* the models: the same bytes on every CPU */
    if (!record) test_plans();
    build_models();
    snprintf(path, sizeof path, "%s/tests/data/family_identity/logits.txt", MOE8_SOURCE_DIR);
    if (!record) CHECKF(moe8_read_file(path, 1 << 20, &file, NULL, NULL) == MOE8_OK, "cannot read %s", path);
    snprintf(tables, sizeof tables, "%s", moe8_kernel_tables());
    for (char *save = NULL, *t = strtok_r(tables, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        char cmd[8400], out[16384];
        int n_lines = 0;
        if (strchr(t, '(')) {
            fprintf(stderr, "table %s: skipped (this CPU lacks it)\n", t);
            continue;
        }
        if (!record && !committed(file, t)) {
            fprintf(stderr, "table %s: skipped (no committed values for it; record them with "
                            "--record on a machine that has it)\n", t);
            continue;
        }
        snprintf(cmd, sizeof cmd, "MOE8_ISA=%s '%s' --eval", t, argv[0]);
        FILE *p = popen(cmd, "r");
        size_t n = 0;
        if (!p) exit(2);
        while (n + 1 < sizeof out && !feof(p)) n += fread(out + n, 1, sizeof out - 1 - n, p);
        out[n] = '\0';
        CHECKF(pclose(p) == 0, "table %s: the run failed", t);
        for (char *l = out; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
            const char *want;
            char k[128];
            int f1 = 0, f2 = 0, f3 = 0;
            if (*l == '\n') continue;
            if (record) {
                printf("%.*s\n", (int)strcspn(l, "\n"), l);
                n_lines++;
                continue;
            }
            /* key: the first three words */
            for (f1 = 0; l[f1] && l[f1] != ' '; f1++) {}
            for (f2 = f1 + 1; l[f2] && l[f2] != ' '; f2++) {}
            for (f3 = f2 + 1; l[f3] && l[f3] != ' '; f3++) {}
            snprintf(k, sizeof k, "%.*s", f3, l);
            want = committed(file, k);
            CHECKF(want && line_eq(l, want), "%s: logits changed\n  got  %.*s\n  want %.*s", k,
                   (int)strcspn(l, "\n"), l, want ? (int)strcspn(want, "\n") : 6,
                   want ? want : "(none)");
            n_lines++;
        }
        CHECKF(n_lines == 2 * N_FAM, "table %s: %d lines of %d", t, n_lines, 2 * N_FAM);
        if (!record) fprintf(stderr, "table %s: %d family x dtype logits bit-identical\n", t, n_lines);
        if (MOE8_TEST_SANITIZE[0] && !record) {
            fprintf(stderr, "the other tables: in the release build (sanitizers: the best table only)\n");
            break;
        }
    }
    free(file);
    if (record) return test_n_fail ? 1 : 0;
    return test_summary();
}
