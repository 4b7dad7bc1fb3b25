/*
 * cmd_perplexity.c — `moe8 perplexity`: perplexity of a model on a text,
 * and the KL divergence of a (quantized) model against a base model's
 * log-probabilities, with llama-perplexity's procedure, base-file layout and
 * printed labels, so numbers compare directly.
 *
 * Procedure: the text is tokenized (BOS first when the tokenizer adds one)
 * and cut into chunks of -c tokens (at least 2 chunks; --chunks N at most);
 * chunk i is tokens [i*c, (i+1)*c) with its first token replaced by BOS
 * when the tokenizer adds BOS. Only the second half is scored: position p
 * in [c/2, c-2] predicts token p+1, so c - 1 - c/2 tokens per chunk, with
 *     nll = log(sum_j exp(l_j - m)) + m - l_target       (m = max_j l_j)
 *     PPL = exp(mean nll),  +/- PPL * sqrt((mean nll^2 - mean^2) / (N - 1))
 * Chunks run as parallel requests of one scheduler (their prompt logits come
 * as PROMPT_LOGITS events), and are summed in chunk order, so the result
 * does not depend on --parallel or the thread count.
 *
 * Base file (--kl-divergence-base FILE with -f), little-endian:
 *     "_logits_"  int32 n_ctx  int32 n_vocab  int32 n_chunk
 *     int32 tokens[n_chunk * n_ctx]            (the text's tokens, BOS not substituted)
 *     per chunk, per scored position: uint16 row[nv], nv = 2*((n_vocab+1)/2) + 4:
 *         row[0..1] float scale, row[2..3] float min_log_prob,
 *         row[4 + i] = round((l_i - l_min) / scale) for l_i > l_min, else 0,
 *         l_min = max(min_i l_i, max_i l_i - 16), scale = (max - l_min) / 65535,
 *         log p_i ~ scale * row[4 + i] + min_log_prob
 * written to FILE.tmp.<pid> and renamed at the end. --kl-divergence runs the
 * model on the file's tokens and prints llama-perplexity's statistics.
 *
 * Uses only the public headers. Under --tp every rank runs the same requests;
 * rank 0 prints and writes.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define CMD "perplexity"
#define MAX_TEXT (256u << 20)

typedef struct {
    const char *dir, *file, *base;
    int kld, n_ctx, ctx_set, chunks, threads, parallel, tp, expert_parallel;
    moe8_dtype kv_type;
    const char *pc_dir; /* --prompt-cache-dir, or NULL */
    double pc_gb;
} opts;

/* llama-perplexity's kl_divergence_result. */
typedef struct {
    double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_nll_nll_base;
    double sum_kld, sum_kld2, sum_p_diff, sum_p_diff2, sum_p_diff4;
    float max_p_diff;
    size_t n_same_top, count;
} kld_acc;

typedef struct {
    const opts *o;
    int rank0;
    int32_t n_ctx, n_vocab, n_chunk, first, n_score, nv;
    int32_t *tokens;            /* [n_chunk * n_ctx] */
    int add_bos;
    int32_t bos;
    /* per chunk, summed in position order */
    double *nll, *nll2;         /* [n_chunk] */
    kld_acc *acc;               /* [n_chunk] (KL mode) */
    float *kld_values, *p_diff_values; /* [n_chunk * n_score] */
    uint16_t *row;              /* [nv] scratch */
    int fd_out, fd_base;        /* base file being written / read */
    char tmp[4200], out[4096];
    int done_upto;              /* chunks reported, in order */
    int *done;                  /* [n_chunk] */
    kld_acc tot;
    double tot_nll, tot_nll2;
    int64_t count;
    double t0;
} run;


#define SYNOPSIS "moe8 perplexity -m DIR -f TEXT [-c 512] [--chunks N] [--threads N] [--parallel N]\n" \
    "                       [--kl-divergence-base FILE] [--tp N [--expert-parallel]]\n" \
    "       moe8 perplexity -m DIR --kl-divergence-base FILE --kl-divergence [...]"
#define NOTES "output: stdout the running table and the final estimate; stderr a progress line.\n"

static int parse(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->n_ctx = 512;
    o->chunks = -1;
    o->tp = 1;
    o->kv_type = moe8_context_params_default().kv_type;
    o->n_ctx = 0; /* 512 unless given */
    const cli_opt opts[] = {
        {"-m", NULL, CLI_STR, &o->dir, .arg = "DIR", .help = "the model folder"},
        {"-f", NULL, CLI_STR, &o->file, .arg = "TEXT", .help = "a UTF-8 text file (regular, at most 256 MiB)"},
        {"-c", NULL, CLI_INT, &o->n_ctx, 8, 1 << 20, .arg = "N",
         .help = "tokens per chunk (default 512); the second half is scored"},
        {"--chunks", NULL, CLI_INT, &o->chunks, 1, 1 << 24, .arg = "N",
         .help = "at most N chunks (default: all whole chunks of the text)"},
        {"--threads", NULL, CLI_INT, &o->threads, 1, 4096, .arg = "N", .help = "threads (default: the CPUs it may use)"},
        {"--parallel", NULL, CLI_INT, &o->parallel, 1, 4096, .arg = "N",
         .help = "chunks decoded together (default max(1, 2048 / c))"},
        {"--kv-type", NULL, CLI_KV, &o->kv_type, .arg = "T",
         .help = "KV cache elements: f16 (default), bf16, or f32 (exact: for\na KL-divergence base)"},
        {"--prompt-cache-dir", NULL, CLI_STR, &o->pc_dir, .arg = "DIR",
         .help = "keep full KV blocks of finished prompts as verified files in\n"
         "DIR (made when missing; processes may share it) and load them\n"
         "for a prompt whose prefix is not in memory (default: off)"},
        {"--prompt-cache-gb", NULL, CLI_DOUBLE, &o->pc_gb, .dlo = 0, .dhi = 1e9, .arg = "N",
         .help = "bound DIR's block files to N GiB, least recently used removed\n"
         "first (default: no bound)"},
        {"--kl-divergence-base", NULL, CLI_STR, &o->base, .arg = "F",
         .help = "with -f: write the model's log-probabilities of every\n"
         "scored token to F (llama-perplexity's layout)"},
        {"--kl-divergence", NULL, CLI_FLAG, &o->kld,
         .help = "with --kl-divergence-base and no -f: score F's tokens and\n"
         "print the KL divergence statistics against F"},
        {"--tp", NULL, CLI_INT, &o->tp, 1, 4096, .arg = "N", .help = "tensor-parallel ranks (under mpirun)"},
        {"--expert-parallel", NULL, CLI_FLAG, &o->expert_parallel, .help = "with --tp: experts split by rank"},
        {0},
    };
    const int rc = cli_parse(CMD, SYNOPSIS, opts, NOTES, argc, argv);
    if (rc) return rc < 0 ? 1 : rc;
    o->ctx_set = o->n_ctx != 0;
    if (!o->ctx_set) o->n_ctx = 512;
    if (!o->dir) return cli_usage_err(CMD, "-m DIR is required (see -h)");
    if (o->kld ? (o->file || !o->base) : !o->file) {
        return cli_usage_err(CMD, "%s", o->kld ? "--kl-divergence takes --kl-divergence-base FILE "
                                                 "and no -f (the tokens come from FILE)"
                                               : "-f TEXT is required (see -h)");
    }
    return 0;
}

/* ---- log-softmax pieces (llama-perplexity's arithmetic) --------------------------- */

static inline int nearest_int(float fval) {
    float val = fval + 12582912.f;
    int i;
    memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

/* nll of `tok`; the uint16 row of the base file when `row` is not NULL. */
static double log_softmax(int32_t V, const float *l, int32_t tok, uint16_t *row) {
    float mx = l[0], mn = l[0];
    double sum;
    for (int32_t i = 1; i < V; i++) {
        mx = fmaxf(mx, l[i]);
        mn = fminf(mn, l[i]);
    }
    sum = moe8_logits_exp_sum(l, V, mx, 1.0f);
    if (row) {
        const float lse = (float)log(sum), lo = fmaxf(mn, mx - 16);
        const float scale = (mx - lo) / 65535.f, min_lp = lo - mx - lse;
        memcpy(row, &scale, 4);
        memcpy(row + 2, &min_lp, 4);
        for (int32_t i = 0; i < V; i++)
            row[4 + i] = scale != 0 && l[i] > lo ? (uint16_t)nearest_int((1 / scale) * (l[i] - lo)) : 0;
        for (int32_t i = V; i < 2 * ((V + 1) / 2); i++) row[4 + i] = 0;
    }
    return (double)mx + log(sum) - (double)l[tok];
}

/* One scored token against the base row (llama-perplexity's statistics). */
static void kld_one(int32_t V, const float *l, const uint16_t *base, int32_t tok, kld_acc *k,
                    float *kld_out, float *pdiff_out) {
    float mx = l[0], scale, min_lp, p_log_base_max = 0;
    int32_t imax = 0, imax_base = -1;
    double sum = 0;
    for (int32_t i = 1; i < V; i++)
        if (l[i] > mx) mx = l[i], imax = i;
    const float lse = (float)log(moe8_logits_exp_sum(l, V, mx, 1.0f));
    memcpy(&scale, base, 4);
    memcpy(&min_lp, base + 2, 4);
    base += 4;
    const float nll = mx + lse - l[tok], nll_base = -(scale * base[tok] + min_lp);
    k->sum_nll += nll, k->sum_nll2 += nll * nll;
    k->sum_nll_base += nll_base, k->sum_nll_base2 += nll_base * nll_base;
    k->sum_nll_nll_base += nll * nll_base;
    mx += lse;
    for (int32_t i = 0; i < V; i++) {
        const float p_log_base = scale * base[i] + min_lp;
        if (i == 0 || p_log_base > p_log_base_max) p_log_base_max = p_log_base, imax_base = i;
        if (p_log_base > -16.f) sum += expf(p_log_base) * (p_log_base - l[i] + mx);
    }
    k->sum_kld += sum, k->sum_kld2 += sum * sum;
    k->count++;
    k->n_same_top += imax == imax_base;
    const float p_diff = expf(-nll) - expf(-nll_base);
    k->sum_p_diff += p_diff;
    k->sum_p_diff2 += (double)p_diff * p_diff;
    k->sum_p_diff4 += (double)p_diff * p_diff * p_diff * p_diff;
    k->max_p_diff = fmaxf(k->max_p_diff, fabsf(p_diff));
    *kld_out = (float)sum;
    *pdiff_out = p_diff;
}

static void kld_add(kld_acc *a, const kld_acc *b) {
    a->sum_nll += b->sum_nll, a->sum_nll2 += b->sum_nll2;
    a->sum_nll_base += b->sum_nll_base, a->sum_nll_base2 += b->sum_nll_base2;
    a->sum_nll_nll_base += b->sum_nll_nll_base;
    a->sum_kld += b->sum_kld, a->sum_kld2 += b->sum_kld2;
    a->sum_p_diff += b->sum_p_diff, a->sum_p_diff2 += b->sum_p_diff2, a->sum_p_diff4 += b->sum_p_diff4;
    a->max_p_diff = fmaxf(a->max_p_diff, b->max_p_diff);
    a->n_same_top += b->n_same_top, a->count += b->count;
}

static void mean_unc(double sum, double sum2, size_t n, double *f, double *df) {
    *f = n ? sum / n : 0;
    *df = n ? sum2 / n - *f * *f : 0;
    *df = *df > 0 && n > 10 ? sqrt(*df / (n - 1)) : 0;
}

static double covariance(double a, double b, double ab, size_t n) {
    return n < 10 ? 0 : (ab / n - (a / n) * (b / n)) / (n - 1);
}

/* ---- the base file ------------------------------------------------------------------- */

static size_t row_bytes(const run *r) { return (size_t)r->nv * sizeof(uint16_t); }
static off_t header_bytes(const run *r) { return 8 + 12 + (off_t)r->n_chunk * r->n_ctx * 4; }

static int write_all(int fd, const void *p, size_t n, off_t at) {
    while (n) {
        ssize_t k = pwrite(fd, p, n, at);
        if (k <= 0) return -1;
        p = (const char *)p + k, n -= (size_t)k, at += k;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n, off_t at) {
    while (n) {
        ssize_t k = pread(fd, p, n, at);
        if (k <= 0) return -1;
        p = (char *)p + k, n -= (size_t)k, at += k;
    }
    return 0;
}

static int base_create(run *r) {
    const char *path = r->o->base;
    struct stat sb;
    int32_t head[3] = {r->n_ctx, r->n_vocab, r->n_chunk};
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        cli_err(CMD, "--kl-divergence-base '%s' exists and is not a regular file", path);
        return -1;
    }
    snprintf(r->out, sizeof r->out, "%s", path);
    snprintf(r->tmp, sizeof r->tmp, "%s.tmp.%ld", path, (long)getpid());
    if ((r->fd_out = open(r->tmp, O_WRONLY | O_CREAT | O_EXCL, 0666)) < 0) {
        cli_err(CMD, "cannot write '%s': %s", r->tmp, strerror(errno));
        return -1;
    }
    if (write_all(r->fd_out, "_logits_", 8, 0) || write_all(r->fd_out, head, 12, 8) ||
        write_all(r->fd_out, r->tokens, (size_t)r->n_chunk * r->n_ctx * 4, 20)) {
        cli_err(CMD, "cannot write '%s': %s", r->tmp, strerror(errno));
        return -1;
    }
    return 0;
}

static int base_finish(run *r) {
    int rc = fsync(r->fd_out) || close(r->fd_out) || rename(r->tmp, r->out);
    r->fd_out = -1;
    if (rc) {
        cli_err(CMD, "cannot finish '%s': %s", r->out, strerror(errno));
        unlink(r->tmp);
        return -1;
    }
    return 0;
}

/* Header and tokens of the base file; every field checked against the model. */
static int base_open(run *r, int32_t model_vocab) {
    const char *path = r->o->base;
    char magic[8];
    int32_t head[3];
    struct stat sb;
    int64_t want;
    if ((r->fd_base = open(path, O_RDONLY | O_NONBLOCK)) < 0 || fstat(r->fd_base, &sb) ||
        !S_ISREG(sb.st_mode)) {
        cli_err(CMD, "cannot read base file '%s': %s", path,
                r->fd_base < 0 ? strerror(errno) : "not a regular file");
        return -1;
    }
    if (read_all(r->fd_base, magic, 8, 0) || memcmp(magic, "_logits_", 8)) {
        cli_err(CMD, "'%s' is not a log-probability file: it does not start with \"_logits_\"",
                path);
        return -1;
    }
    if (read_all(r->fd_base, head, 12, 8)) {
        cli_err(CMD, "'%s' is truncated: no n_ctx, n_vocab, n_chunk after the magic", path);
        return -1;
    }
    if (head[0] < 8 || head[0] > (1 << 20) || head[2] < 1) {
        cli_err(CMD, "'%s': n_ctx %d / n_chunk %d out of range", path, head[0], head[2]);
        return -1;
    }
    if (r->o->ctx_set && head[0] != r->o->n_ctx) {
        cli_err(CMD, "'%s' was made with n_ctx %d, not -c %d", path, head[0], r->o->n_ctx);
        return -1;
    }
    if (head[1] != model_vocab) {
        cli_err(CMD, "'%s' has n_vocab %d, the model's vocabulary has %d (another tokenizer or "
                "model family)", path, head[1], model_vocab);
        return -1;
    }
    r->n_ctx = head[0], r->n_vocab = head[1], r->n_chunk = head[2];
    r->first = r->n_ctx / 2, r->n_score = r->n_ctx - 1 - r->first;
    r->nv = 2 * ((r->n_vocab + 1) / 2) + 4;
    want = (int64_t)header_bytes(r) + (int64_t)r->n_chunk * r->n_score * (int64_t)row_bytes(r);
    if ((int64_t)sb.st_size != want) {
        cli_err(CMD, "'%s' is %lld bytes, expected %lld for n_ctx %d, n_vocab %d, n_chunk %d (%s)",
                path, (long long)sb.st_size, (long long)want, r->n_ctx, r->n_vocab, r->n_chunk,
                sb.st_size < want ? "truncated" : "trailing bytes");
        return -1;
    }
    if (!(r->tokens = malloc((size_t)r->n_chunk * r->n_ctx * 4)) ||
        read_all(r->fd_base, r->tokens, (size_t)r->n_chunk * r->n_ctx * 4, 20)) {
        cli_err(CMD, "cannot read the tokens of '%s'", path);
        return -1;
    }
    for (int64_t i = 0; i < (int64_t)r->n_chunk * r->n_ctx; i++)
        if (r->tokens[i] < 0 || r->tokens[i] >= model_vocab) {
            cli_err(CMD, "'%s': token %lld is %d, not in [0, %d)", path, (long long)i, r->tokens[i],
                    model_vocab);
            return -1;
        }
    return 0;
}

/* ---- output --------------------------------------------------------------------------- */

static void progress(const run *r, int n_done) {
    const double t = moe8_time_s() - r->t0;
    const double tok_s = t > 0 ? (double)n_done * r->n_ctx / t : 0;
    const double left = n_done ? t / n_done * (r->n_chunk - n_done) : 0;
    char bar[31];
    int k = r->n_chunk ? 30 * n_done / r->n_chunk : 30;
    for (int i = 0; i < 30; i++) bar[i] = i < k ? '#' : ' ';
    bar[30] = '\0';
    fprintf(stderr, "\rmoe8 " CMD ": [%s] %d/%d chunks, %.1f tok/s, %.0f s left ", bar, n_done,
            r->n_chunk, tok_s, left);
    if (n_done == r->n_chunk) fputc('\n', stderr);
    fflush(stderr);
}

/* Chunks that finished, summed and printed in chunk order. */
static void report(run *r) {
    while (r->done_upto < r->n_chunk && r->done[r->done_upto]) {
        const int i = r->done_upto++;
        if (!r->o->kld) {
            r->tot_nll += r->nll[i], r->tot_nll2 += r->nll2[i];
            r->count += r->n_score;
            printf("[%d]%.4lf,", i + 1, exp(r->tot_nll / r->count));
        } else {
            double lp, dlp, lb, dlb, kl, dkl, pm, dpm;
            kld_add(&r->tot, &r->acc[i]);
            mean_unc(r->tot.sum_nll, r->tot.sum_nll2, r->tot.count, &lp, &dlp);
            mean_unc(r->tot.sum_nll_base, r->tot.sum_nll_base2, r->tot.count, &lb, &dlb);
            const double cov = covariance(r->tot.sum_nll, r->tot.sum_nll_base, r->tot.sum_nll_nll_base, r->tot.count);
            mean_unc(r->tot.sum_kld, r->tot.sum_kld2, r->tot.count, &kl, &dkl);
            mean_unc(r->tot.sum_p_diff2, r->tot.sum_p_diff4, r->tot.count, &pm, &dpm);
            const double top = 1.0 * r->tot.n_same_top / r->tot.count;
            if (i == 0)
                printf("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence"
                       "              Δp RMS            Same top p\n");
            printf("%4d    %9.4lf ± %9.4lf    %10.5lf ± %10.5lf    %10.5lf ± %10.5lf    %6.3lf ± %6.3lf %%"
                   "    %6.3lf ± %6.3lf %%\n", i + 1, exp(lp), exp(lp) * dlp, lp - lb,
                   sqrt(dlp * dlp + dlb * dlb - 2.0 * cov), kl, dkl, 100.0 * sqrt(pm),
                   pm > 0 ? 100.0 * 0.5 / sqrt(pm) * dpm : 0.0, 100.0 * top,
                   100.0 * sqrt(top * (1 - top) / (r->tot.count - 1)));
        }
        fflush(stdout);
        progress(r, r->done_upto);
    }
}

static float percentile(const float *v, size_t n, float fraction) {
    float p;
    size_t ip;
    if (fraction <= 0) return v[0];
    if (fraction >= 1) return v[n - 1];
    p = fraction * (float)(n - 1);
    ip = (size_t)p;
    p -= (float)ip;
    return (1 - p) * v[ip] + p * v[ip + 1 < n ? ip + 1 : n - 1];
}

static void print_kld_final(run *r) {
    const kld_acc *k = &r->tot;
    const size_t n = k->count;
    float *kv = r->kld_values, *pv = r->p_diff_values;
    double lp, dlp, lb, dlb, kl, dkl, pd, dpd, pm, dpm;
    if (n < 100) {
        printf("\n(%zu scored tokens: too few for the statistics, as llama-perplexity)\n", n);
        return;
    }
    qsort(kv, n, sizeof *kv, cli_cmp_float);
    qsort(pv, n, sizeof *pv, cli_cmp_float);
    mean_unc(k->sum_nll, k->sum_nll2, n, &lp, &dlp);
    mean_unc(k->sum_nll_base, k->sum_nll_base2, n, &lb, &dlb);
    const double ppl = exp(lp), ppl_unc = ppl * dlp, pb = exp(lb), pb_unc = pb * dlb;
    const double cov = covariance(k->sum_nll, k->sum_nll_base, k->sum_nll_nll_base, n);
    const double ratio = lp - lb, ratio_unc = sqrt(dlp * dlp + dlb * dlb - 2.0 * cov);
    printf("\n====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6lf ± %10.6lf\n", ppl, ppl_unc);
    printf("Mean PPL(base)                : %10.6lf ± %10.6lf\n", pb, pb_unc);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2lf%%\n", 100.0 * cov / (dlp * dlb));
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6lf ± %10.6lf\n", ratio, ratio_unc);
    printf("Mean PPL(Q)/PPL(base)         : %10.6lf ± %10.6lf\n", exp(ratio), exp(ratio) * ratio_unc);
    printf("Mean PPL(Q)-PPL(base)         : %10.6lf ± %10.6lf\n", ppl - pb,
           sqrt(ppl_unc * ppl_unc + pb_unc * pb_unc - 2.0 * ppl * pb * cov));
    printf("\n====== KL divergence statistics ======\n");
    mean_unc(k->sum_kld, k->sum_kld2, n, &kl, &dkl);
    printf("Mean    KLD: %10.6lf ± %10.6lf\n", kl, dkl);
    printf("Maximum KLD: %10.6f\n", kv[n - 1]);
    printf("99.9%%   KLD: %10.6f\n", percentile(kv, n, 0.999f));
    printf("99.0%%   KLD: %10.6f\n", percentile(kv, n, 0.990f));
    printf("95.0%%   KLD: %10.6f\n", percentile(kv, n, 0.950f));
    printf("90.0%%   KLD: %10.6f\n", percentile(kv, n, 0.900f));
    printf("Median  KLD: %10.6f\n", n % 2 == 0 ? 0.5f * (kv[n / 2] + kv[n / 2 - 1]) : kv[n / 2]);
    printf("10.0%%   KLD: %10.6f\n", percentile(kv, n, 0.100f));
    printf(" 5.0%%   KLD: %10.6f\n", percentile(kv, n, 0.050f));
    printf(" 1.0%%   KLD: %10.6f\n", percentile(kv, n, 0.010f));
    printf(" 0.1%%   KLD: %10.6f\n", percentile(kv, n, 0.001f));
    printf("Minimum KLD: %10.6f\n", kv[0]);
    printf("\n====== Token probability statistics ======\n");
    mean_unc(k->sum_p_diff, k->sum_p_diff2, n, &pd, &dpd);
    printf("Mean    Δp: %6.3lf ± %5.3lf %%\n", 100.0 * pd, 100.0 * dpd);
    printf("Maximum Δp: %6.3lf%%\n", 100.0 * pv[n - 1]);
    static const float fr[] = {0.999f, 0.990f, 0.950f, 0.900f, 0.750f};
    static const char *const lab[] = {"99.9%", "99.0%", "95.0%", "90.0%", "75.0%"};
    for (int i = 0; i < 5; i++) printf("%-5s   Δp: %6.3lf%%\n", lab[i], 100.0 * percentile(pv, n, fr[i]));
    printf("Median  Δp: %6.3lf%%\n", 100.0 * (n % 2 == 0 ? 0.5f * (pv[n / 2] + pv[n / 2 - 1]) : pv[n / 2]));
    static const float fr2[] = {0.250f, 0.100f, 0.050f, 0.010f, 0.001f};
    static const char *const lab2[] = {"25.0%", "10.0%", " 5.0%", " 1.0%", " 0.1%"};
    for (int i = 0; i < 5; i++) printf("%-5s   Δp: %6.3lf%%\n", lab2[i], 100.0 * percentile(pv, n, fr2[i]));
    printf("Minimum Δp: %6.3lf%%\n", 100.0 * pv[0]);
    mean_unc(k->sum_p_diff2, k->sum_p_diff4, n, &pm, &dpm);
    printf("RMS Δp    : %6.3lf ± %5.3lf %%\n", 100.0 * sqrt(pm), 100.0 * 0.5 / sqrt(pm) * dpm);
    const double top = 1.0 * k->n_same_top / n;
    printf("Same top p: %6.3lf ± %5.3lf %%\n", 100.0 * top, 100.0 * sqrt(top * (1.0 - top) / (n - 1)));
}

/* ---- running ------------------------------------------------------------------------- */

static int on_logits(run *r, int chunk, int32_t pos, const float *logits) {
    const int32_t idx = pos - r->first;
    int32_t tok;
    if (idx < 0 || idx >= r->n_score) return 0; /* the last position predicts nothing */
    tok = r->tokens[(size_t)chunk * r->n_ctx + pos + 1];
    if (r->o->kld) {
        const size_t at = (size_t)chunk * r->n_score + (size_t)idx;
        if (read_all(r->fd_base, r->row, row_bytes(r), header_bytes(r) + (off_t)(at * row_bytes(r)))) {
            cli_err(CMD, "cannot read '%s' at chunk %d", r->o->base, chunk);
            return -1;
        }
        kld_one(r->n_vocab, logits, r->row, tok, &r->acc[chunk], &r->kld_values[at], &r->p_diff_values[at]);
        return 0;
    }
    {
        const double v = log_softmax(r->n_vocab, logits, tok, r->fd_out >= 0 ? r->row : NULL);
        r->nll[chunk] += v;
        r->nll2[chunk] += v * v;
        if (r->fd_out >= 0 &&
            write_all(r->fd_out, r->row, row_bytes(r), header_bytes(r) +
                      (off_t)(((size_t)chunk * r->n_score + (size_t)idx) * row_bytes(r)))) {
            cli_err(CMD, "cannot write '%s': %s", r->tmp, strerror(errno));
            return -1;
        }
    }
    return 0;
}

static int score(run *r, moe8_model *m) {
    const opts *o = r->o;
    int n_par = o->parallel ? o->parallel : (2048 / r->n_ctx > 1 ? 2048 / r->n_ctx : 1);
    moe8_context_params cp = moe8_context_params_default();
    moe8_context *ctx = NULL;
    moe8_sched *s = NULL;
    moe8_error err;
    int32_t *prompt = malloc((size_t)r->n_ctx * sizeof *prompt);
    int rc = 1;
    if (n_par > r->n_chunk) n_par = r->n_chunk;
    cp.n_ctx = r->n_ctx;
    cp.n_seq_max = n_par;
    cp.n_batch = r->n_ctx * n_par < 2048 ? r->n_ctx * n_par : 2048;
    cp.n_outputs = cp.n_batch < 256 ? cp.n_batch : 256;
    if (cp.n_outputs < n_par) cp.n_outputs = n_par;
    cp.n_threads = o->threads;
    cp.kv_type = o->kv_type;
    cp.prompt_cache_dir = o->pc_dir;
    cp.prompt_cache_bytes = (uint64_t)(o->pc_gb * 1073741824.0);
    if (!prompt || moe8_context_create(m, &cp, &ctx, &err) || moe8_sched_create(ctx, NULL, &s, &err)) {
        if (prompt && r->rank0) cli_fail(CMD, &err);
        goto done;
    }
    r->t0 = moe8_time_s();
    for (int i = 0; i < r->n_chunk; i++) {
        moe8_request q = moe8_request_default();
        int64_t id;
        memcpy(prompt, r->tokens + (size_t)i * r->n_ctx, (size_t)r->n_ctx * sizeof *prompt);
        if (r->add_bos) prompt[0] = r->bos;
        q.prompt = prompt;
        q.n_prompt = r->n_ctx;
        q.max_tokens = 0;
        q.n_prompt_logits = r->n_ctx - r->first;
        q.user = (void *)(intptr_t)i;
        if (moe8_sched_add(s, &q, &id, &err)) {
            if (r->rank0) cli_fail(CMD, &err);
            goto done;
        }
    }
    while (moe8_sched_pending(s) > 0) {
        const moe8_event *ev;
        int32_t n;
        if (moe8_sched_step(s, &ev, &n, &err)) {
            if (r->rank0) cli_fail(CMD, &err);
            goto done;
        }
        for (int32_t k = 0; r->rank0 && k < n; k++) {
            const int chunk = (int)(intptr_t)ev[k].user;
            if (ev[k].type == MOE8_EVENT_PROMPT_LOGITS && on_logits(r, chunk, ev[k].pos, ev[k].logits))
                goto done;
            if (ev[k].type == MOE8_EVENT_FINISH) r->done[chunk] = 1;
        }
        if (r->rank0) report(r);
    }
    rc = 0;
done:
    moe8_sched_free(s);
    moe8_context_free(ctx);
    free(prompt);
    return rc;
}

static int tokenize_text(run *r, const opts *o, const moe8_tokenizer *tok) {
    char *text = NULL;
    size_t len = 0, n = 0;
    int32_t *ids = NULL;
    moe8_error err;
    int rc = -1;
    if (moe8_read_file(o->file, MAX_TEXT, &text, &len, &err)) {
        cli_err(CMD, "-f: %s", err.message);
        return -1;
    }
    moe8_tokenize(tok, text, len, NULL, 0, &n, &err);
    if (!(ids = malloc((n + 1) * sizeof *ids)) ||
        moe8_tokenize(tok, text, len, ids + r->add_bos, n, &n, &err) != MOE8_OK) {
        cli_err(CMD, "-f '%s': %s", o->file, ids ? err.message : "out of memory");
        goto done;
    }
    if (r->add_bos) ids[0] = r->bos;
    n += (size_t)r->add_bos;
    if (n < 2 * (size_t)o->n_ctx) {
        cli_err(CMD, "you need at least %d tokens to evaluate perplexity with a context of %d; "
                "'%s' tokenizes to only %zu tokens", 2 * o->n_ctx, o->n_ctx, o->file, n);
        goto done;
    }
    r->n_ctx = o->n_ctx;
    r->n_chunk = (int32_t)(n / (size_t)o->n_ctx);
    if (o->chunks > 0 && o->chunks < r->n_chunk) r->n_chunk = o->chunks;
    r->first = r->n_ctx / 2, r->n_score = r->n_ctx - 1 - r->first;
    r->nv = 2 * ((r->n_vocab + 1) / 2) + 4;
    r->tokens = ids;
    ids = NULL;
    rc = 0;
done:
    free(ids);
    free(text);
    return rc;
}

int cmd_perplexity(int argc, char **argv) {
    opts o;
    run r;
    cli_session s;
    int rc = parse(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : 2;
    if (!o.threads) o.threads = cli_default_threads(0);
    memset(&r, 0, sizeof r);
    r.o = &o;
    r.fd_out = r.fd_base = -1;
    cli_open_params op = cli_open_params_of(o.dir, o.tp, o.expert_parallel, o.threads);
    op.tokenizer = CLI_TOK_REQUIRED;
    if (cli_open(CMD, &op, &s)) {
        cli_close(CMD, &s);
        return 1;
    }
    moe8_dist *d = s.dist;
    moe8_model *m = s.model;
    moe8_tokenizer *tok = s.tok;
    r.rank0 = s.rank0;
    rc = 1;
    r.n_vocab = (int32_t)moe8_model_config(m)->vocab_size;
    r.add_bos = moe8_tokenizer_add_bos(tok) && moe8_tokenizer_bos_id(tok) >= 0;
    r.bos = moe8_tokenizer_bos_id(tok);
    if (o.kld ? base_open(&r, r.n_vocab) : tokenize_text(&r, &o, tok)) {
        moe8_dist_abort(d, 1);
        goto done;
    }
    if (o.kld && o.chunks > 0 && o.chunks < r.n_chunk) r.n_chunk = o.chunks;
    r.nll = calloc((size_t)r.n_chunk, sizeof *r.nll);
    r.nll2 = calloc((size_t)r.n_chunk, sizeof *r.nll2);
    r.done = calloc((size_t)r.n_chunk, sizeof *r.done);
    r.row = malloc((size_t)r.nv * sizeof *r.row);
    if (o.kld) {
        r.acc = calloc((size_t)r.n_chunk, sizeof *r.acc);
        r.kld_values = malloc((size_t)r.n_chunk * r.n_score * sizeof(float));
        r.p_diff_values = malloc((size_t)r.n_chunk * r.n_score * sizeof(float));
    }
    if (!r.nll || !r.nll2 || !r.done || !r.row || (o.kld && (!r.acc || !r.kld_values || !r.p_diff_values))) {
        cli_err(CMD, "out of memory");
        goto done;
    }
    if (r.rank0) {
        fprintf(stderr, "moe8 " CMD ": %d chunks of %d tokens, %d scored per chunk%s\n", r.n_chunk,
                r.n_ctx, r.n_score, r.add_bos ? " (BOS first)" : "");
        if (!o.kld && o.base && base_create(&r)) {
            moe8_dist_abort(d, 1);
            goto done;
        }
    }
    if (score(&r, m)) goto done;
    if (r.rank0) {
        printf("\n");
        if (o.kld) {
            print_kld_final(&r);
        } else {
            double nll = r.tot_nll / r.count, nll2 = r.tot_nll2 / r.count - nll * nll;
            const double ppl = exp(nll);
            if (nll2 > 0) printf("Final estimate: PPL = %.4lf +/- %.5lf\n", ppl, sqrt(nll2 / (r.count - 1)) * ppl);
            else printf("Unexpected negative standard deviation of log(prob)\n");
            printf("scored %lld tokens in %d chunks\n", (long long)r.count, r.n_chunk);
        }
        if (r.fd_out >= 0 && base_finish(&r)) goto done;
    }
    rc = 0;
done:
    if (r.fd_out >= 0) {
        close(r.fd_out);
        unlink(r.tmp);
    }
    if (r.fd_base >= 0) close(r.fd_base);
    free(r.tokens);
    free(r.nll);
    free(r.nll2);
    free(r.done);
    free(r.row);
    free(r.acc);
    free(r.kld_values);
    free(r.p_diff_values);
    cli_close(CMD, &s);
    return rc;
}
