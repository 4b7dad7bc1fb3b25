/*
 * cmd_bench_sampler.c — `moe8 bench sampler`: one token's choice over a
 * vocabulary (151,936 ids by default, Qwen3's), on one core.
 *
 * Rows (Markdown on stdout): the softmax's exponentials and their sum as the
 * plain loop writes them (fmaxf, libm expf, the sum in double in id order:
 * SEMANTICS §10's definition), then as moe8 computes them
 * (moe8_logits_max + moe8_logits_exp_sum, the kernel table in use), with
 * whether the two sums are the same double; then moe8_sampler_sample greedy,
 * without filters, with top-k, top-p and min-p. Median and p99 µs over
 * --reps calls on fixed pseudo-random logits (uniform in [-12, 12)).
 * Uses the public API only.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CMD "bench sampler"
#define SYNOPSIS "moe8 bench sampler [--n-vocab N] [--reps N] [--temperature T]"
#define NOTES "One core; the kernel table is the machine's best (MOE8_ISA=NAME picks one).\n"

static void row(const char *what, double *t, int reps, const char *note) {
    double med, p99;
    cli_median_p99(t, reps, &med, &p99);
    printf("| %s | %.1f | %.1f | %s |\n", what, med, p99, note);
}

int cmd_bench_sampler(int argc, char **argv) {
    int n_vocab = 151936, reps = 200;
    double temp = 0.7;
    const cli_opt opts[] = {
        {"--n-vocab", NULL, CLI_INT, &n_vocab, 1, 1 << 24, .arg = "N", .help = "logits per call (default 151936)"},
        {"--reps", NULL, CLI_INT, &reps, 1, 1000000, .arg = "N", .help = "calls timed per row (default 200)"},
        {"--temperature", NULL, CLI_DOUBLE, &temp, .dlo = 0.01, .dhi = 100, .arg = "T", .help = "of the sampling rows (default 0.7)"},
        {0},
    };
    const int rc = cli_parse(CMD, SYNOPSIS, opts, NOTES, argc - 1, argv + 1);
    if (rc) return rc < 0 ? 0 : 2;
    float *l = malloc((size_t)n_vocab * sizeof *l), *p = malloc((size_t)n_vocab * sizeof *p);
    double *t = malloc((size_t)reps * sizeof *t), sum_plain = 0, sum_moe8 = 0;
    uint64_t s = 1;
    if (!l || !p || !t) return cli_err(CMD, "out of memory for %d logits", n_vocab);
    for (int i = 0; i < n_vocab; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        l[i] = (float)((double)(s >> 11) * 0x1p-53 * 24.0 - 12.0);
    }
    const float T = (float)temp;
    printf("| %d logits, temperature %g | median µs | p99 µs | |\n|---|---:|---:|---|\n", n_vocab, temp);
    for (int r = 0; r < reps; r++) {
        const double t0 = moe8_time_s();
        float mx = -INFINITY;
        double sum = 0;
        for (int i = 0; i < n_vocab; i++) mx = fmaxf(mx, l[i]);
        for (int i = 0; i < n_vocab; i++) sum += p[i] = expf((l[i] - mx) / T);
        t[r] = (moe8_time_s() - t0) * 1e6;
        sum_plain = sum;
    }
    row("softmax sum: fmaxf, libm expf loop", t, reps, "the definition");
    for (int r = 0; r < reps; r++) {
        const double t0 = moe8_time_s();
        sum_moe8 = moe8_logits_exp_sum(l, n_vocab, moe8_logits_max(l, n_vocab), T);
        t[r] = (moe8_time_s() - t0) * 1e6;
    }
    row("softmax sum: moe8_logits_max + moe8_logits_exp_sum", t, reps,
        sum_moe8 == sum_plain ? "the same double" : "DIFFERS");
    {
        static const struct { const char *what; int top_k; float top_p, min_p, temp; } S[] = {
            {"moe8_sampler_sample greedy", 0, 1.0f, 0.0f, 0.0f},
            {"moe8_sampler_sample, no filter", 0, 1.0f, 0.0f, -1.0f},
            {"moe8_sampler_sample, top-k 40", 40, 1.0f, 0.0f, -1.0f},
            {"moe8_sampler_sample, top-p 0.9", 0, 0.9f, 0.0f, -1.0f},
            {"moe8_sampler_sample, min-p 0.05", 0, 1.0f, 0.05f, -1.0f},
        };
        for (size_t k = 0; k < sizeof S / sizeof S[0]; k++) {
            moe8_sampler_params sp = moe8_sampler_params_default();
            moe8_sampler *sm = NULL;
            moe8_error e;
            sp.temperature = S[k].temp < 0 ? T : S[k].temp;
            sp.top_k = S[k].top_k, sp.top_p = S[k].top_p, sp.min_p = S[k].min_p, sp.seed = 7;
            if (moe8_sampler_create(&sp, n_vocab, &sm, &e) != MOE8_OK) {
                return cli_err(CMD, "%s", e.message);
            }
            for (int r = 0; r < reps; r++) {
                const double t0 = moe8_time_s();
                (void)moe8_sampler_sample(sm, l);
                t[r] = (moe8_time_s() - t0) * 1e6;
            }
            row(S[k].what, t, reps, "");
            moe8_sampler_free(sm);
        }
    }
    free(l);
    free(p);
    free(t);
    return sum_moe8 == sum_plain ? 0 : 1;
}
