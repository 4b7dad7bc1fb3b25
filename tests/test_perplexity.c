/*
 * test_perplexity.c — `moe8 perplexity` against the test's own computation.
 *
 * The reference runs each chunk through moe8_decode with the logits of every
 * position and computes llama-perplexity's numbers in double precision:
 * chunks of c tokens of the tokenized text (the first replaced by BOS when
 * the tokenizer adds one), positions c/2 .. c-2 scored against the next
 * token. Checked: the final PPL and its uncertainty (1e-4 relative), that
 * shifting the scored range by one position changes the answer (so the
 * positions are exactly those), BOS substitution, the base file (header,
 * tokens, every uint16 row within its quantization step of the true
 * log-probabilities), the KL divergence of a model against its own base
 * (<= 1e-5, same top token everywhere) and of W8A8 against float vs the
 * test's own KLD from the decoded base rows, of W4A8 (experts and linears)
 * against float vs the exact KLD from both models' logits, bad base files and arguments,
 * and TP=2 vs one process (with MPI); the PPL of glm4_moe and minimax_m2
 * (float and W8A8) against the same reference, minimax_m2's under TP=2 too
 * (its whole-projection q/k norm sums squares across the ranks); gpt_oss's
 * (sinks, 128-position windows: chunks of 256) against gptoss_ref.h, every
 * scored token's nll in double, the reference without windows differing.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "test.h"
#include "fixture_model.h"
#include "gptoss_ref.h"

#define C 64            /* tokens per chunk */
#define CHUNKS 4
#define TEXT "/usr/share/common-licenses/GPL-3"

static char g_out[1 << 16];

/* Run the CLI; stdout+stderr into g_out; the exit status. */
static int cli(const char *args) {
    char cmd[8192], path[4096];
    size_t n = 0;
    unsigned char *b;
    int rc;
    snprintf(path, sizeof path, "%s/ppl_out.txt", test_tmpdir("ppl_run"));
    snprintf(cmd, sizeof cmd, "timeout 300 %s perplexity %s >'%s' 2>&1",
             MOE8_CLI, args, path);
    rc = test_run(cmd);
    b = test_slurp(path, &n);
    snprintf(g_out, sizeof g_out, "%s", b ? (char *)b : "");
    free(b);
    return rc;
}

static double field(const char *label) {
    const char *p = strstr(g_out, label);
    return p ? atof(p + strlen(label)) : NAN;
}

/* The text's tokens as the CLI makes them. */
static int32_t *text_tokens(const moe8_tokenizer *tok, size_t *n) {
    size_t len = 0, need = 0;
    unsigned char *text = test_slurp(TEXT, &len);
    const int bos = moe8_tokenizer_add_bos(tok);
    int32_t *ids;
    moe8_tokenize(tok, (const char *)text, len, NULL, 0, &need, NULL);
    ids = malloc((need + 1) * sizeof *ids);
    CHECK(moe8_tokenize(tok, (const char *)text, len, ids + bos, need, &need, NULL) == MOE8_OK);
    if (bos) ids[0] = moe8_tokenizer_bos_id(tok);
    *n = need + (size_t)bos;
    free(text);
    return ids;
}

/* logits[CHUNKS][C][V] of every chunk position (BOS substituted). */
static float *compute_logits(const char *dir, moe8_dtype kv, int32_t *V_out, int32_t **tokens_out) {
    moe8_model *m = test_load_model(dir);
    moe8_tokenizer *tok = NULL;
    moe8_context_params cp = moe8_context_params_default();
    moe8_context *x = NULL;
    int32_t V = (int32_t)moe8_model_config(m)->vocab_size, pos[C], seq[C], chunk[C];
    int8_t want[C];
    size_t n;
    float *out;
    int32_t *ids;
    CHECK(moe8_tokenizer_load(dir, &tok, NULL) == MOE8_OK);
    ids = text_tokens(tok, &n);
    CHECK(n >= (size_t)C * CHUNKS);
    cp.n_ctx = C, cp.n_batch = C, cp.n_outputs = C;
    cp.kv_type = kv;
    CHECK(moe8_context_create(m, &cp, &x, NULL) == MOE8_OK);
    out = malloc((size_t)CHUNKS * C * V * sizeof *out);
    for (int i = 0; i < CHUNKS; i++) {
        moe8_batch b = {C, chunk, pos, seq, want};
        memcpy(chunk, ids + (size_t)i * C, sizeof chunk);
        if (moe8_tokenizer_add_bos(tok)) chunk[0] = moe8_tokenizer_bos_id(tok);
        for (int p = 0; p < C; p++) pos[p] = p, seq[p] = 0, want[p] = 1;
        CHECK(moe8_context_seq_truncate(x, 0, 0, NULL) == MOE8_OK);
        CHECK(moe8_decode(x, &b, NULL) == MOE8_OK);
        for (int p = 0; p < C; p++)
            memcpy(out + ((size_t)i * C + p) * V, moe8_context_logits(x, p), (size_t)V * sizeof *out);
    }
    moe8_context_free(x);
    moe8_tokenizer_free(tok);
    moe8_model_free(m);
    *V_out = V;
    *tokens_out = ids;
    return out;
}

/* compute_logits, once per model folder (the callers keep nothing: the
 * cache owns the arrays until the program ends). */
static float *all_logits_kv(const char *dir, moe8_dtype kv, int32_t *V_out, int32_t **tokens_out) {
    static struct { char dir[4096]; moe8_dtype kv; float *lg; int32_t V, *ids; } cache[9];
    static int n;
    for (int i = 0; i < n; i++)
        if (!strcmp(cache[i].dir, dir) && cache[i].kv == kv) {
            *V_out = cache[i].V;
            *tokens_out = cache[i].ids;
            return cache[i].lg;
        }
    if (n == 9) exit(2);
    snprintf(cache[n].dir, sizeof cache[n].dir, "%s", dir);
    cache[n].kv = kv;
    cache[n].lg = compute_logits(dir, kv, &cache[n].V, &cache[n].ids);
    *V_out = cache[n].V;
    *tokens_out = cache[n].ids;
    return cache[n++].lg;
}

static float *all_logits(const char *dir, int32_t *V_out, int32_t **tokens_out) {
    return all_logits_kv(dir, moe8_context_params_default().kv_type, V_out, tokens_out);
}

/* log sum_j exp(l_j) of the logits of chunk i, position p (in double, max subtracted), computed
 * once per logits array and position: the scored range, its two shifts, the base rows and the
 * KLD all use it. */
static double lse_at(const float *lg, int32_t V, int i, int p) {
    static struct { const float *lg; double v[CHUNKS * C]; } memo[10];
    static int n;
    const float *l = lg + ((size_t)i * C + p) * V;
    double mx = l[0], s = 0;
    int k = 0;
    while (k < n && memo[k].lg != lg) k++;
    if (k < n && !isnan(memo[k].v[i * C + p])) return memo[k].v[i * C + p];
    for (int32_t j = 1; j < V; j++) mx = fmax(mx, l[j]);
    for (int32_t j = 0; j < V; j++) s += exp((double)l[j] - mx);
    if (k == n && n < 10) {
        memo[n].lg = lg;
        for (int j = 0; j < CHUNKS * C; j++) memo[n].v[j] = NAN;
        n++;
    }
    if (k < n) memo[k].v[i * C + p] = mx + log(s);
    return mx + log(s);
}

static double nll_at(const float *lg, int32_t V, const int32_t *ids, int i, int p) {
    return lse_at(lg, V, i, p) - lg[((size_t)i * C + p) * V + ids[i * C + p + 1]];
}

/* PPL and its uncertainty over positions [p0, p1] of every chunk. */
static void ref_ppl(const float *lg, int32_t V, const int32_t *ids, int p0, int p1, double *ppl,
                    double *unc) {
    double s = 0, s2 = 0;
    int n = 0;
    for (int i = 0; i < CHUNKS; i++)
        for (int p = p0; p <= p1; p++) {
            double v = nll_at(lg, V, ids, i, p);
            s += v, s2 += v * v, n++;
        }
    s /= n, s2 = s2 / n - s * s;
    *ppl = exp(s);
    *unc = sqrt(s2 / (n - 1)) * *ppl;
}

static void test_ppl(const char *dir, const char *label) {
    int32_t V, *ids;
    float *lg = all_logits(dir, &V, &ids);
    double ppl, unc, lo, hi, u;
    char args[4200];
    snprintf(args, sizeof args, "-m '%s' -f %s -c %d --chunks %d --threads 2", dir, TEXT, C, CHUNKS);
    CHECK(cli(args) == 0);
    ref_ppl(lg, V, ids, C / 2, C - 2, &ppl, &unc);
    CHECKF(fabs(field("Final estimate: PPL = ") - ppl) <= 1e-4 * ppl, "%s: PPL %s vs reference %.6f",
           label, g_out, ppl);
    {
        const char *p = strstr(g_out, "+/- ");
        CHECKF(p && fabs(atof(p + 4) - unc) <= 1e-3 * unc, "%s: uncertainty vs %.6f", label, unc);
    }
    CHECK(strstr(g_out, "scored 124 tokens in 4 chunks") != NULL);
    ref_ppl(lg, V, ids, C / 2 - 1, C - 2, &lo, &u);   /* one position too early */
    ref_ppl(lg, V, ids, C / 2 + 1, C - 2, &hi, &u);   /* one too few */
    CHECKF(fabs(lo - ppl) > 1e-4 * ppl && fabs(hi - ppl) > 1e-4 * ppl,
           "%s: the scored range is not distinguishable (%.6f %.6f %.6f)", label, lo, ppl, hi);
    printf("%-10s PPL %.4f (reference %.4f, shifted ranges %.4f / %.4f)\n", label,
           field("Final estimate: PPL = "), ppl, lo, hi);
}

/* --kv-type f32: the PPL of an f32 KV cache (the exact base of a KL run). */
static void test_ppl_kv_f32(const char *dir) {
    int32_t V, *ids;
    float *lg = all_logits_kv(dir, MOE8_DT_F32, &V, &ids), *lg16 = all_logits(dir, &V, &ids);
    double ppl, ppl16, unc;
    char args[4200];
    snprintf(args, sizeof args, "-m '%s' -f %s -c %d --chunks %d --threads 2 --kv-type f32", dir, TEXT, C, CHUNKS);
    CHECK(cli(args) == 0);
    ref_ppl(lg, V, ids, C / 2, C - 2, &ppl, &unc);
    ref_ppl(lg16, V, ids, C / 2, C - 2, &ppl16, &unc);
    CHECKF(fabs(field("Final estimate: PPL = ") - ppl) <= 1e-5 * ppl, "--kv-type f32: PPL %s vs reference %.7f",
           g_out, ppl);
    printf("--kv-type f32 PPL %.6f (f32 reference %.6f, f16 reference %.6f)\n", field("Final estimate: PPL = "),
           ppl, ppl16);
    snprintf(args, sizeof args, "-m '%s' -f %s --kv-type f8", dir, TEXT);
    CHECKF(cli(args) == 2 && strstr(g_out, "--kv-type"), "--kv-type f8: %s", g_out);
}

/* The base file: header, tokens, rows within their step of the true log-probs. */
static void test_base_file(const char *dir, const char *base) {
    int32_t V, *ids;
    float *lg = all_logits(dir, &V, &ids);
    size_t n = 0;
    unsigned char *b = test_slurp(base, &n);
    const int nv = 2 * ((V + 1) / 2) + 4, first = C / 2, n_score = C - 1 - first;
    int32_t head[3];
    double worst = 0;
    CHECK(b && n == 8 + 12 + (size_t)CHUNKS * C * 4 + (size_t)CHUNKS * n_score * nv * 2);
    if (!b || n < 20) return;
    CHECK(!memcmp(b, "_logits_", 8));
    memcpy(head, b + 8, 12);
    CHECK(head[0] == C && head[1] == V && head[2] == CHUNKS);
    CHECK(!memcmp(b + 20, ids, (size_t)CHUNKS * C * 4));
    for (int i = 0; i < CHUNKS; i++)
        for (int k = 0; k < n_score; k++) {
            const uint16_t *row = (const uint16_t *)(b + 20 + (size_t)CHUNKS * C * 4) +
                                  ((size_t)i * n_score + k) * nv;
            const float *l = lg + ((size_t)i * C + first + k) * V;
            const double lse = lse_at(lg, V, i, first + k);
            float scale, min_lp;
            memcpy(&scale, row, 4);
            memcpy(&min_lp, row + 2, 4);
            for (int32_t j = 0; j < V; j += 97) {
                const double truth = l[j] - lse, got = scale * row[4 + j] + min_lp;
                if (truth >= min_lp) worst = fmax(worst, fabs(got - truth) / (0.5 * scale + 2e-5));
                else CHECK(row[4 + j] == 0);
            }
        }
    CHECKF(worst <= 1.0 + 1e-3, "base rows: worst error %.3f quantization steps", worst);
    printf("base file  %zu bytes, worst row error %.3f of half a step\n", n, worst);
    free(b);
}

/* KLD of `dir` against `base`, recomputed from the decoded base rows. */
static double ref_kld(const char *dir, const char *base, double *same_top) {
    int32_t V, *ids;
    float *lg = all_logits(dir, &V, &ids);
    size_t n = 0;
    unsigned char *b = test_slurp(base, &n);
    const int nv = 2 * ((V + 1) / 2) + 4, first = C / 2, n_score = C - 1 - first;
    double sum = 0;
    int count = 0, same = 0;
    for (int i = 0; i < CHUNKS; i++)
        for (int k = 0; k < n_score; k++) {
            const uint16_t *row = (const uint16_t *)(b + 20 + (size_t)CHUNKS * C * 4) +
                                  ((size_t)i * n_score + k) * nv;
            const float *l = lg + ((size_t)i * C + first + k) * V;
            const double lse = lse_at(lg, V, i, first + k);
            float scale, min_lp, mx = l[0];
            double kl = 0, bmax = -1e30;
            int32_t imax = 0, ibase = 0;
            memcpy(&scale, row, 4);
            memcpy(&min_lp, row + 2, 4);
            for (int32_t j = 1; j < V; j++)
                if (l[j] > mx) mx = l[j], imax = j;
            for (int32_t j = 0; j < V; j++) {
                const double lb = (double)scale * row[4 + j] + min_lp;
                if (lb > bmax) bmax = lb, ibase = j;
                if (lb > -16) kl += exp(lb) * (lb - (l[j] - lse));
            }
            sum += kl, count++, same += imax == ibase;
        }
    free(b);
    *same_top = 100.0 * same / count;
    return sum / count;
}

static void test_kld(const char *fdir, const char *qdir, const char *base) {
    char args[8400];
    double same, k_self, k_q;
    snprintf(args, sizeof args, "-m '%s' -f %s -c %d --chunks %d --kl-divergence-base '%s'", fdir, TEXT,
             C, CHUNKS, base);
    CHECK(cli(args) == 0);
    test_base_file(fdir, base);
    snprintf(args, sizeof args, "-m '%s' --kl-divergence-base '%s' --kl-divergence", fdir, base);
    CHECK(cli(args) == 0);
    k_self = field("Mean    KLD:");
    CHECKF(k_self >= 0 && k_self <= 1e-5 && field("Same top p:") == 100.0,
           "self KLD %g, same top %g", k_self, field("Same top p:"));
    CHECK(strstr(g_out, "====== Perplexity statistics ======") && strstr(g_out, "Mean PPL(Q)/PPL(base)") &&
          strstr(g_out, "RMS Δp") && strstr(g_out, "99.9%   KLD:") && strstr(g_out, "Cor(ln(PPL(Q)), ln(PPL(base)))"));
    snprintf(args, sizeof args, "-m '%s' --kl-divergence-base '%s' --kl-divergence --threads 2", qdir, base);
    CHECK(cli(args) == 0);
    k_q = field("Mean    KLD:");
    {
        const double ref = ref_kld(qdir, base, &same);
        CHECKF(k_q > 0 && fabs(k_q - ref) <= 1e-3 * ref + 1e-6, "W8A8 KLD %g vs reference %g", k_q, ref);
        CHECKF(fabs(field("Same top p:") - same) < 1e-3, "same top %g vs %g", field("Same top p:"), same);
        printf("KLD        self %.2e, W8A8 vs float %.6f (reference %.6f), same top %.3f%%\n", k_self,
               k_q, ref, same);
    }
}

/* KL divergence of a W4A8 copy of the float model (`quantize --experts w4a8
 * --linear w4a8`) against the float model's base file: the CLI's mean,
 * maximum and top-1 agreement against the test's own, computed in double
 * from both models' logits (not from the base rows: the rows quantize each
 * log-probability to a step of at most 16 / 65535, so within 2.5e-4). */
static void test_kld_w4a8(const char *fdir, const char *base) {
    char qdir[4200], args[8600];
    moe8_quantize_params qp = moe8_quantize_params_default();
    moe8_error e;
    snprintf(qdir, sizeof qdir, "%s-w4a8", fdir);
    qp.experts_w4a8 = 1, qp.linear_w4a8 = 1, qp.force = 1, qp.n_threads = 2;
    CHECKF(moe8_quantize(fdir, qdir, &qp, NULL, &e) == MOE8_OK, "quantize: %s", e.message);
    snprintf(args, sizeof args, "-m '%s' --kl-divergence-base '%s' --kl-divergence", qdir, base);
    CHECK(cli(args) == 0);
    int32_t V, *ids;
    const float *lf = all_logits(fdir, &V, &ids), *lq = all_logits(qdir, &V, &ids);
    const int first = C / 2, n_score = C - 1 - first;
    double sum = 0, mx = 0;
    int count = 0, same = 0;
    for (int i = 0; i < CHUNKS; i++)
        for (int k = 0; k < n_score; k++) {
            const float *a = lf + ((size_t)i * C + first + k) * V, *b = lq + ((size_t)i * C + first + k) * V;
            double ma = a[0], mb = b[0], za = 0, zb = 0, kl = 0;
            int32_t ia = 0, ib = 0;
            for (int32_t j = 1; j < V; j++) {
                if (a[j] > ma) ma = a[j], ia = j;
                if (b[j] > mb) mb = b[j], ib = j;
            }
            for (int32_t j = 0; j < V; j++) za += exp(a[j] - ma), zb += exp(b[j] - mb);
            for (int32_t j = 0; j < V; j++) {
                const double la = a[j] - ma - log(za), lb = b[j] - mb - log(zb);
                kl += exp(la) * (la - lb);
            }
            sum += kl, mx = fmax(mx, kl), count++, same += ia == ib;
        }
    const double mean = sum / count, top = 100.0 * same / count;
    const double k_cli = field("Mean    KLD:"), m_cli = field("Maximum KLD:"), t_cli = field("Same top p:");
    printf("KLD        W4A8 (experts and linears) vs float %.6f (exact %.6f), max %.6f (%.6f), "
           "same top %.3f%% (%.3f%%)\n", k_cli, mean, m_cli, mx, t_cli, top);
    CHECKF(mean > 0 && fabs(k_cli - mean) <= 2.5e-4 + 0.01 * mean, "W4A8 KLD %g vs exact %g",
           k_cli, mean);
    CHECKF(fabs(m_cli - mx) <= 2.5e-4 + 0.01 * mx, "W4A8 max KLD %g vs exact %g", m_cli, mx);
    CHECKF(fabs(t_cli - top) <= 100.0 / count + 1e-3, "W4A8 same top %g vs exact %g", t_cli, top);
}

static void test_bad(const char *dir, const char *base) {
    char args[8400], bad[4200];
    size_t n = 0;
    unsigned char *b = test_slurp(base, &n);
    int32_t v;
    snprintf(bad, sizeof bad, "%s/bad.kld", test_tmpdir("ppl_bad"));
    /* truncated */
    test_write_file(bad, b, n - 100);
    snprintf(args, sizeof args, "-m '%s' --kl-divergence-base '%s' --kl-divergence", dir, bad);
    CHECKF(cli(args) != 0 && strstr(g_out, "truncated") && strstr(g_out, "n_vocab"), "truncated: %s", g_out);
    /* foreign */
    memcpy(b, "_logitz_", 8);
    test_write_file(bad, b, n);
    CHECKF(cli(args) != 0 && strstr(g_out, "\"_logits_\""), "foreign: %s", g_out);
    memcpy(b, "_logits_", 8);
    /* another vocabulary */
    memcpy(&v, b + 12, 4);
    v += 8;
    memcpy(b + 12, &v, 4);
    test_write_file(bad, b, n);
    CHECKF(cli(args) != 0 && strstr(g_out, "n_vocab"), "vocab: %s", g_out);
    /* another context size */
    snprintf(args, sizeof args, "-m '%s' --kl-divergence-base '%s' --kl-divergence -c 32", dir, base);
    CHECKF(cli(args) != 0 && strstr(g_out, "n_ctx 64, not -c 32"), "ctx: %s", g_out);
    /* a token out of range */
    v -= 8;
    memcpy(b + 12, &v, 4);
    v = 1 << 30;
    memcpy(b + 20 + 4 * 5, &v, 4);
    test_write_file(bad, b, n);
    snprintf(args, sizeof args, "-m '%s' --kl-divergence-base '%s' --kl-divergence", dir, bad);
    CHECKF(cli(args) != 0 && strstr(g_out, "token 5"), "token: %s", g_out);
    free(b);
    /* arguments */
    snprintf(args, sizeof args, "-m '%s' -f %s -c 100000", dir, TEXT);
    CHECKF(cli(args) != 0 && strstr(g_out, "you need at least 200000 tokens"), "short text: %s", g_out);
    snprintf(args, sizeof args, "-m '%s' -f %s --kl-divergence", dir, TEXT);
    CHECKF(cli(args) == 2 && strstr(g_out, "--kl-divergence takes"), "flags: %s", g_out);
    snprintf(args, sizeof args, "-m '%s' -f /dev/zero", dir);
    CHECKF(cli(args) != 0 && strstr(g_out, "regular"), "device: %s", g_out);
    snprintf(args, sizeof args, "-m '%s' -f %s --kl-divergence-base /dev/null", dir, TEXT);
    CHECKF(cli(args) != 0 && strstr(g_out, "not a regular file"), "base /dev/null: %s", g_out);
}

/* The first chunk token becomes BOS when the tokenizer adds one. */
static const char *bos_model(fx_opts *o) {
    const char *dir = fx_test_model("ppl_bos", o, 1);
    char path[4200];
    size_t n = 0;
    unsigned char *b;
    cJSON *root;
    char *txt;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    b = test_slurp(path, &n);
    root = cJSON_ParseWithLength((const char *)b, n);
    cJSON_DeleteItemFromObject(root, "add_bos_token");
    cJSON_DeleteItemFromObject(root, "bos_token");
    cJSON_AddTrueToObject(root, "add_bos_token");
    cJSON_AddStringToObject(root, "bos_token", "<|endoftext|>");
    txt = cJSON_PrintUnformatted(root);
    test_write_file(path, txt, strlen(txt));
    free(txt);
    cJSON_Delete(root);
    free(b);
    return dir;
}

static void test_tp(const char *dir) {
#ifdef MOE8_MPIEXEC
    char cmd[8400], path[4200];
    double one;
    snprintf(cmd, sizeof cmd, "-m '%s' -f %s -c %d --chunks %d", dir, TEXT, C, CHUNKS);
    CHECK(cli(cmd) == 0);
    one = field("Final estimate: PPL = ");
    snprintf(path, sizeof path, "%s/tp.txt", test_tmpdir("ppl_tp"));
    snprintf(cmd, sizeof cmd, "timeout 300 %s --oversubscribe -np 2 %s perplexity -m '%s' -f %s -c %d "
             "--chunks %d --tp 2 --threads 1 >'%s' 2>&1", MOE8_MPIEXEC, MOE8_CLI, dir, TEXT, C, CHUNKS, path);
    CHECK(test_run(cmd) == 0);
    {
        size_t n = 0;
        unsigned char *b = test_slurp(path, &n);
        snprintf(g_out, sizeof g_out, "%s", b ? (char *)b : "");
        free(b);
    }
    CHECKF(fabs(field("Final estimate: PPL = ") - one) <= 1e-4 * one, "TP=2 PPL %g vs %g",
           field("Final estimate: PPL = "), one);
    printf("TP=2       PPL %.4f, one process %.4f\n", field("Final estimate: PPL = "), one);
#else
    (void)dir;
    printf("TP=2       skipped: built without MPI\n");
#endif
}

/* ---- gpt_oss (issue 37): sinks and sliding windows --------------------------------- */

#define GO_C 256 /* positions 128..254 scored: every one past the window's edge */
#define GO_CHUNKS 2
#define GO_V 1024

/* make-model's gpt_oss tiny (vocab GO_V, seed 3): MXFP4 experts, or bf16 ones of the same values. */
static void go_make(const char *dir, int float_experts) {
    test_make_tiny(dir, MOE8_ARCH_GPT_OSS, GO_V, 3, 0, float_experts);
}

/* PPL over the chunks of ids by the double-precision reference (nll of every
 * scored token in double, as llama-perplexity scores them). */
static double go_ref_ppl(gref *g, const int32_t *ids) {
    double *lg = malloc(sizeof(double) * GO_C * GO_V), s = 0;
    int n = 0;
    for (int i = 0; i < GO_CHUNKS; i++) {
        gref_forward(g, ids + i * GO_C, GO_C, lg);
        for (int p = GO_C / 2; p <= GO_C - 2; p++, n++) {
            const double *l = lg + (size_t)p * GO_V;
            double mx = l[0], z = 0;
            for (int j = 1; j < GO_V; j++) mx = fmax(mx, l[j]);
            for (int j = 0; j < GO_V; j++) z += exp(l[j] - mx);
            s += mx + log(z) - l[ids[i * GO_C + p + 1]];
        }
    }
    free(lg);
    return exp(s / n);
}

/* moe8 perplexity on the float-experts folder (f32 KV) against gptoss_ref.h
 * on the MXFP4 folder of the same seed (the same values); the reference
 * without windows differs (so the windows are exercised); the MXFP4 folder
 * as downloaded (experts W8A8 at load, f16 KV) near it. A text of digits and
 * punctuation keeps every id of the qwen3 tokenizer below GO_V. */
static void test_gptoss(void) {
    char mx[4096], fl[4096], text[4200], args[8800];
    snprintf(mx, sizeof mx, "%s", test_tmpdir("ppl_gptoss_mx"));
    snprintf(fl, sizeof fl, "%s", test_tmpdir("ppl_gptoss_float"));
    snprintf(text, sizeof text, "%s/digits.txt", test_tmpdir("ppl_gptoss_text"));
    go_make(mx, 0);
    go_make(fl, 1);
    static const char *const sep[5] = {" ", ", ", ". ", "; ", "\n"};
    char *buf = malloc(1 << 16);
    size_t len = 0;
    for (uint32_t i = 0, x = 12345; len < 12000; i++) {
        x = x * 1103515245u + 12345u;
        len += (size_t)sprintf(buf + len, "%u%s", (x >> 16) % 1000u, sep[(x >> 8) % 5u]);
    }
    test_write_file(text, buf, len);
    moe8_tokenizer *tok = NULL;
    size_t need = 0;
    CHECK(moe8_tokenizer_load(fl, &tok, NULL) == MOE8_OK);
    moe8_tokenize(tok, buf, len, NULL, 0, &need, NULL);
    int32_t *ids = malloc((need + 1) * sizeof *ids), top = 0;
    CHECK(moe8_tokenize(tok, buf, len, ids, need, &need, NULL) == MOE8_OK);
    CHECK(!moe8_tokenizer_add_bos(tok) && need >= (size_t)GO_C * GO_CHUNKS);
    for (size_t i = 0; i < need; i++) top = ids[i] > top ? ids[i] : top;
    CHECKF(top < GO_V, "the digits text has id %d >= %d", top, GO_V);
    moe8_tokenizer_free(tok);
    free(buf);

    moe8_model *m = test_load_model(fl);
    const moe8_config *c = moe8_model_config(m);
    gref g = {GO_V, (int)c->hidden_size, (int)c->num_attention_heads, (int)c->num_key_value_heads,
              (int)c->head_dim, (int)c->num_experts, (int)c->num_experts_per_tok,
              (int)c->moe_intermediate_size, (int)c->num_hidden_layers, 128, c->rms_norm_eps,
              c->rope_theta, 32, 32, 1, 4096, moe8_config_get_num(c, "swiglu_limit", NULL),
              {1, 0, 1, 0}, 0, NULL};
    moe8_model_free(m);
    moe8_error e;
    CHECKF(moe8_st_open(mx, &g.st, &e) == MOE8_OK, "%s", e.message);
    const double ref = go_ref_ppl(&g, ids);
    g.no_window = 1;
    const double nowin = go_ref_ppl(&g, ids);
    moe8_st_free(g.st);
    free(ids);
    snprintf(args, sizeof args, "-m '%s' -f '%s' -c %d --chunks %d --threads 2 --kv-type f32", fl,
             text, GO_C, GO_CHUNKS);
    CHECK(cli(args) == 0);
    const double got = field("Final estimate: PPL = ");
    CHECKF(fabs(got - ref) <= 1e-4 * ref, "gpt_oss: PPL %.6f vs reference %.6f", got, ref);
    CHECK(strstr(g_out, "scored 254 tokens in 2 chunks") != NULL);
    CHECKF(fabs(nowin - ref) > 1e-3 * ref, "gpt_oss: windows do not matter (%.6f, %.6f)", nowin,
           ref);
    snprintf(args, sizeof args, "-m '%s' -f '%s' -c %d --chunks %d --threads 2", mx, text, GO_C,
             GO_CHUNKS);
    CHECK(cli(args) == 0);
    const double w8 = field("Final estimate: PPL = ");
    CHECKF(fabs(w8 - ref) <= 1e-2 * ref, "gpt_oss MXFP4 as downloaded (W8A8 experts): PPL %.6f "
           "vs reference %.6f", w8, ref);
    printf("gpt_oss    PPL %.4f (reference %.4f, without windows %.4f); MXFP4 folder (W8A8 "
           "experts) %.4f\n", got, ref, nowin, w8);
}

#ifndef MOE8_TEST_SANITIZE
#define MOE8_TEST_SANITIZE ""
#endif

int main(void) {
    fx_opts o = fx_default_opts();
    const char *fdir, *qdir, *bdir;
    char base[4200];
    o.vocab = 151936;
    o.dense_layer = 1;
    fdir = fx_test_model("ppl_float", &o, 1);
    o.quant = 1;
    qdir = fx_test_model("ppl_w8a8", &o, 1);
    o.quant = 0;
    bdir = bos_model(&o);
    snprintf(base, sizeof base, "%s/base.kld", test_tmpdir("ppl_base"));
    test_ppl(fdir, "float");
    test_ppl(qdir, "W8A8");
    test_ppl_kv_f32(qdir);
    test_ppl(bdir, "BOS");
    test_kld(fdir, qdir, base);
    test_kld_w4a8(fdir, base);
    test_bad(fdir, base);
    test_gptoss();
    test_tp(fdir); /* float: W8A8 under TP quantizes each rank's expert slice on its own (SEMANTICS §8) */
    /* the families of issue 34 (fixture_model.h): GLM-4.5 (2 groups keep 1,
     * layer 0 dense) and MiniMax-M2, float and W8A8. In the release build
     * only: the sanitizers run their forward in test_glm4_moe and
     * test_minimax_m2 and their TP in mpi_dist, and the paths of
     * `moe8 perplexity` above (here 100 of their 180 s). */
    for (int f = 0; f < 2 && !MOE8_TEST_SANITIZE[0]; f++) {
        fx_opts g = fx_default_opts();
        const char *d;
        g.vocab = 151936;
        g.arch = f ? FX_MINIMAX_M2 : FX_GLM4_MOE;
        g.n_group = 2, g.topk_group = 1;
        d = fx_test_model(f ? "ppl_minimax_float" : "ppl_glm_float", &g, 1);
        test_ppl(d, f ? "minimax_m2" : "glm4_moe");
        if (f) test_tp(d);
        g.quant = 1;
        test_ppl(fx_test_model(f ? "ppl_minimax_w8a8" : "ppl_glm_w8a8", &g, 1),
                 f ? "minimax W8A8" : "glm W8A8");
    }
    return test_summary();
}
