/*
 * cmd_bench_forward.c — `moe8 bench forward -m DIR`: the whole forward pass
 * on a real model folder, phase by phase, against this machine's ceilings.
 *
 * For each T > 1 of --tokens: prefill of T tokens from position 0 (best of
 * --reps, the prefix cache off so every rep computes). For T = 1: decode
 * steps at each context length of --ctx (the context is filled first, then
 * --steps steps are timed). Each run prints one Markdown table, per layer:
 * the phases of moe8.h's moe8_phase (the library's forward-phase accounting),
 * their share of the layer, the rate they reached, and their roofline — the
 * time the phase would take at the ceiling that bounds it, measured by the
 * same probes as `bench moe` (streaming read bandwidth, exact int8 peak) and
 * the fp32 FMA probe, probed before and after each run with the higher kept
 * (on a shared machine the ceilings move):
 *   attention projections  max(2 MACs / int8 (or fp32) peak, weight bytes / BW)
 *   attention core         max(4 NH D (pos+1) flops per token / fp32 peak,
 *                              K/V bytes read once / BW)
 *   norms + RoPE + resid.  bytes moved (x, h, q, k, v, codes) / BW
 *   router + top-k         max(2 T E H / fp32 peak, router bytes / BW)
 *   experts                max(2 T K 3 I H / int8 peak, distinct experts'
 *                              bytes / BW) — distinct experts as counted; a
 *                              shared expert (qwen2_moe) adds its 3 S H
 *   dense MLP              as the projections
 *   lm_head (per forward)  max(2 n_out V H / peak, lm_head bytes / BW)
 *   communication          no roofline (TP/EP only)
 * then the layer total against the sum of its phases' rooflines, and the
 * whole forward (moe8_decode wall time) against the sum over the forward.
 * The router is taken to be stored as BF16 (ModelSlim keeps it FLOAT in the
 * checkpoint dtype) unless lm_head is FLOAT F32/F16, whose dtype it then
 * shares. Uses the public API only.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CMD "bench forward"
#define MAX_LIST 16

typedef struct {
    const char *dir;
    int tokens[MAX_LIST], n_tokens;
    int ctx[MAX_LIST], n_ctx;
    int threads, steps, reps, bw_mb;
    moe8_dtype kv_type;
} fwd_opts;

typedef struct {
    double bw, int8, f32; /* GB/s, GOP/s, GFLOP/s */
} ceilings;

/* --flag LIST into out[*n]; 0, or -1 after saying what it wants. */
#define SYNOPSIS "moe8 bench forward -m DIR [--tokens 1,512,4096] [--ctx 512,8192]\n" \
                 "                          [--threads N] [--steps 8] [--reps 2] [--kv-type f16]\n" \
                 "                          [--bw-mb 1024]"

/* A value only some families have (moe8.h moe8_config_get_int / _num). */
static int64_t fam_i(const moe8_config *c, const char *name) {
    return moe8_config_get_int(c, name, NULL);
}

static int parse(int argc, char **argv, fwd_opts *o) {
    memset(o, 0, sizeof *o);
    o->tokens[0] = 1, o->tokens[1] = 512, o->tokens[2] = 4096, o->n_tokens = 3;
    o->ctx[0] = 512, o->n_ctx = 1;
    o->steps = 8, o->reps = 2, o->bw_mb = 1024;
    o->kv_type = MOE8_DT_F16;
    const cli_opt opts[] = {
        {"-m", NULL, CLI_STR, &o->dir, .arg = "DIR", .help = "the model folder"},
        {"--tokens", NULL, CLI_LIST, o->tokens, 1, 1 << 20, .count = &o->n_tokens, .cap = MAX_LIST,
         .arg = "LIST", .help = "T > 1: prefill of T tokens; 1: decode steps at each --ctx"},
        {"--ctx", NULL, CLI_LIST, o->ctx, 1, 1 << 24, .count = &o->n_ctx, .cap = MAX_LIST,
         .arg = "LIST", .help = "context lengths of the decode runs (default 512)"},
        {"--threads", NULL, CLI_INT, &o->threads, 1, 4096, .arg = "N", .help = "threads (default: OpenMP's)"},
        {"--steps", NULL, CLI_INT, &o->steps, 1, 1 << 20, .arg = "N",
         .help = "timed decode steps per context (default 8)"},
        {"--reps", NULL, CLI_INT, &o->reps, 1, 1000, .arg = "N",
         .help = "prefill repetitions, the best kept (default 2)"},
        {"--kv-type", NULL, CLI_KV, &o->kv_type, .arg = "T", .help = "f16 (default), bf16 or f32"},
        {"--bw-mb", NULL, CLI_INT, &o->bw_mb, 16, 1 << 16, .arg = "N",
         .help = "buffer of the bandwidth probe in MB (default 1024)"},
        {0},
    };
    const int rc = cli_parse(CMD, SYNOPSIS, opts, NULL, argc - 1, argv + 1);
    if (rc) return rc;
    if (!o->dir) {
        cli_err(CMD, "-m DIR is required");
        cli_usage(stderr, SYNOPSIS, opts, NULL);
        return 2;
    }
    return 0;
}

/* ---- the work of one forward, from the config ------------------------------ */

typedef struct {
    double macs, bytes; /* multiply-accumulates and bytes read (or moved) */
    int int8;           /* 1: int8 peak, 0: fp32 peak, -1: bandwidth only / none */
} work;

typedef struct {
    work ph[MOE8_PHASE_COUNT];
} fwd_work;

/* Bytes per weight: the float dtype's size, half a byte for int4 (W4A8), one
 * for int8. */
static double qsize(moe8_quant_type q, double float_size) {
    return q == MOE8_QUANT_FLOAT ? float_size : q == MOE8_QUANT_W4A8_DYNAMIC ? 0.5 : 1.0;
}

/* Work of a forward of T tokens of one sequence whose first position is p0,
 * n_out logits rows; `experts_per_moe` distinct experts per MoE layer call. */
static fwd_work forward_work(const moe8_model *m, int T, int p0, int n_out, double experts_per_moe,
                             moe8_dtype kv_type) {
    const moe8_config *c = moe8_model_config(m);
    const double H = (double)c->hidden_size, NH = (double)c->num_attention_heads;
    const double NKV = (double)c->num_key_value_heads, D = (double)c->head_dim;
    const double E = (double)c->num_experts, K = (double)c->num_experts_per_tok;
    const double I = (double)c->moe_intermediate_size, F = (double)c->intermediate_size;
    const double kvs = (double)moe8_dtype_size(kv_type), Tn = T;
    moe8_lm_head_info lm;
    fwd_work w;
    double fsz = 2.0, pos_sum = 0.0;
    memset(&w, 0, sizeof w);
    moe8_model_lm_head_info(m, &lm);
    if (lm.quant == MOE8_QUANT_FLOAT) fsz = (double)moe8_dtype_size(lm.dtype);
    for (int t = 0; t < T; t++) pos_sum += (double)(p0 + t + 1);
    for (int64_t l = 0; l < c->num_hidden_layers; l++) {
        moe8_layer_info li;
        moe8_model_layer_info(m, l, &li);
        work *a = &w.ph[MOE8_PHASE_ATTN_PROJ], *at = &w.ph[MOE8_PHASE_ATTN_CORE];
        work *e = &w.ph[MOE8_PHASE_ELEMENTWISE];
        a->int8 = li.qkv != MOE8_QUANT_FLOAT;
        at->int8 = 0;
        e->int8 = -1;
        if (li.mla) { /* SEMANTICS §7d: the absorbed products count as attention core */
            const double QL = (double)fam_i(c, "q_lora_rank"), L = (double)fam_i(c, "kv_lora_rank");
            const double C = L + (double)fam_i(c, "qk_rope_head_dim"),
                         DN = (double)fam_i(c, "qk_nope_head_dim");
            const double DV = (double)fam_i(c, "v_head_dim"), o = H * NH * DV;
            const double qa = QL > 0 ? QL * H : NH * D * H, qb = QL > 0 ? NH * D * QL : 0.0;
            const double kvb = NH * L * (DN + DV), kvb_sz = li.kv_b == MOE8_QUANT_FLOAT ? fsz : 4.0;
            a->macs += Tn * (qa + C * H + qb + o);
            a->bytes += (qa + C * H) * qsize(li.qkv, fsz) + qb * qsize(li.q_b, fsz) +
                        o * qsize(li.o, fsz);
            at->macs += 2.0 * NH * C * pos_sum + Tn * kvb;       /* q c^T, p c; absorbs */
            at->bytes += (double)(p0 + T) * C * kvs + kvb * kvb_sz;
            e->bytes += Tn * (2 * 16 * H + 8 * (NH * D + C) + C * kvs + 5 * H + 4 * NH * C);
        } else {
            const double qkv = H * D * (NH + 2 * NKV), o = H * NH * D;
            a->macs += Tn * (qkv + o);
            a->bytes += qkv * qsize(li.qkv, fsz) + o * qsize(li.o, fsz);
            at->macs += 2.0 * NH * D * pos_sum;                       /* q k^T and p v */
            at->bytes += (double)(p0 + T) * NKV * D * 2.0 * kvs;      /* each K/V row once */
            e->bytes += Tn * (2 * 16 * H + 8 * (NH + 2 * NKV) * D + 2 * NKV * D * kvs + 5 * H +
                              5 * NH * D);
        }
        if (li.is_moe) {
            work *r = &w.ph[MOE8_PHASE_ROUTER], *x = &w.ph[MOE8_PHASE_EXPERTS];
            r->macs += Tn * E * H;
            r->bytes += E * H * fsz;
            r->int8 = 0;
            x->macs += Tn * K * 3 * I * H;
            x->bytes += experts_per_moe * 3 * I * H * qsize(li.experts, fsz);
            x->int8 = li.experts != MOE8_QUANT_FLOAT;
            if (fam_i(c, "shared_expert_intermediate_size") > 0) { /* read once per forward */
                const double S = (double)fam_i(c, "shared_expert_intermediate_size");
                x->macs += Tn * (3 * S * H + H);
                x->bytes += 3 * S * H * qsize(li.experts, fsz) + H * fsz;
            }
        } else {
            work *d = &w.ph[MOE8_PHASE_DENSE_MLP];
            d->macs += Tn * 3 * F * H;
            d->bytes += 3 * F * H * qsize(li.mlp_gate_up, fsz);
            d->int8 = li.mlp_gate_up != MOE8_QUANT_FLOAT;
        }
    }
    work *h = &w.ph[MOE8_PHASE_LM_HEAD];
    h->macs = (double)n_out * (double)c->vocab_size * H;
    h->bytes = (double)lm.weight_bytes;
    h->int8 = lm.quant != MOE8_QUANT_FLOAT;
    w.ph[MOE8_PHASE_COMM].int8 = -1;
    return w;
}

/* Roofline seconds of one phase's work. */
static double roofline_s(const work *w, const ceilings *c) {
    double t_mem = w->bytes / (c->bw * 1e9), t_ops = 0.0;
    if (w->int8 == 1) t_ops = 2.0 * w->macs / (c->int8 * 1e9);
    if (w->int8 == 0) t_ops = 2.0 * w->macs / (c->f32 * 1e9);
    return t_ops > t_mem ? t_ops : t_mem;
}

static const char *bound_name(const work *w, const ceilings *c) {
    double t_mem = w->bytes / (c->bw * 1e9);
    if (w->int8 < 0 || roofline_s(w, c) <= t_mem) return w->bytes > 0 ? "read BW" : "-";
    return w->int8 ? "int8 peak" : "fp32 FMA peak";
}

/* The ceilings around one run: probes just before and just after it, the
 * higher of each kept (on a shared machine they move between runs; a probe
 * that lands in a slow moment must not make the run look faster than the
 * machine). */
static void measure(ceilings *c, int n_threads, int bw_mb) {
    c->bw = moe8_bench_read_gbs((size_t)bw_mb << 20, n_threads, 3);
    c->int8 = moe8_bench_int8_peak_gops(n_threads, NULL);
    c->f32 = moe8_bench_f32_peak_gflops(n_threads, NULL);
}

static void measure_max(ceilings *c, const ceilings *before, int n_threads, int bw_mb) {
    measure(c, n_threads, bw_mb);
    c->bw = c->bw > before->bw ? c->bw : before->bw;
    c->int8 = c->int8 > before->int8 ? c->int8 : before->int8;
    c->f32 = c->f32 > before->f32 ? c->f32 : before->f32;
}

static void print_ceilings(const ceilings *c) {
    printf("ceilings (best of the probes before and after the run): streaming read %.1f GB/s, "
           "int8 %.1f GOP/s, fp32 %.1f GFLOP/s\n\n",
           c->bw, c->int8, c->f32);
}

/* ---- running --------------------------------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static int32_t rand_token(int32_t n_vocab) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (int32_t)(g_rng % (uint64_t)n_vocab);
}

/* Append n tokens to sequence 0 in batches of at most n_batch (logits of the
 * last only). */
static int run_tokens(moe8_context *ctx, int n, int n_batch, int32_t *tok, int32_t *pos,
                      int32_t *seq) {
    moe8_error err;
    for (int done = 0; done < n;) {
        const int b = n - done < n_batch ? n - done : n_batch;
        const int32_t p0 = moe8_context_seq_len(ctx, 0);
        for (int i = 0; i < b; i++) {
            tok[i] = rand_token(moe8_context_n_vocab(ctx));
            pos[i] = p0 + i;
            seq[i] = 0;
        }
        moe8_batch batch = {b, tok, pos, seq, NULL};
        if (moe8_decode(ctx, &batch, &err)) return cli_fail(CMD, &err);
        done += b;
    }
    return 0;
}

/* One table: phase times (summed over n_runs forwards) against the work of
 * one forward. */
static void report(const moe8_model *m, const moe8_forward_times *ft, int n_runs, int T, int p0,
                   moe8_dtype kv_type, const ceilings *c) {
    const moe8_config *cfg = moe8_model_config(m);
    const double L = (double)cfg->num_hidden_layers, R = n_runs;
    const double per_moe = ft->moe_calls ? (double)ft->expert_blocks / (double)ft->moe_calls : 0;
    const fwd_work w = forward_work(m, T, p0, 1, per_moe, kv_type);
    double layer_s = 0.0, layer_roof = 0.0, layer_bytes = 0.0, all_roof = 0.0;
    for (int p = 0; p < MOE8_PHASE_COUNT; p++) {
        if (p == MOE8_PHASE_LM_HEAD) continue;
        layer_s += ft->phase_s[p] / R / L;
        layer_roof += roofline_s(&w.ph[p], c) / L;
        if (p != MOE8_PHASE_ELEMENTWISE) layer_bytes += w.ph[p].bytes / L;
    }
    for (int p = 0; p < MOE8_PHASE_COUNT; p++) all_roof += roofline_s(&w.ph[p], c);
    printf("| phase | ms / layer | share of layer | GB/s read | GOP/s | roofline ms | "
           "roofline / time | ceiling |\n|---|---:|---:|---:|---:|---:|---:|---|\n");
    for (int p = 0; p < MOE8_PHASE_COUNT; p++) {
        const int per_fwd = p == MOE8_PHASE_LM_HEAD;
        const double div = per_fwd ? 1.0 : L;
        const double t = ft->phase_s[p] / R / div, roof = roofline_s(&w.ph[p], c) / div;
        const double bytes = w.ph[p].bytes / div, ops = 2.0 * w.ph[p].macs / div;
        char share[32], gbs[32], gops[32], eff[32];
        if (t <= 0 && roof <= 0) continue;
        snprintf(share, sizeof share, per_fwd ? "(per forward)" : "%.1f%%",
                 layer_s > 0 ? 100.0 * t / layer_s : 0.0);
        snprintf(gbs, sizeof gbs, bytes > 0 && t > 0 ? "%.1f" : "-", bytes / t * 1e-9);
        snprintf(gops, sizeof gops, ops > 0 && t > 0 ? "%.1f" : "-", ops / t * 1e-9);
        snprintf(eff, sizeof eff, roof > 0 && t > 0 ? "%.0f%%" : "-", 100.0 * roof / t);
        printf("| %s%s | %.3f | %s | %s | %s | %.3f | %s | %s |\n", moe8_phase_name(p),
               per_fwd ? " (per forward)" : "", t * 1e3, share, gbs, gops, roof * 1e3, eff,
               bound_name(&w.ph[p], c));
    }
    printf("| **layer** | %.3f | 100%% | %.1f | | %.3f | %.0f%% | sum of phases |\n",
           layer_s * 1e3, layer_bytes / layer_s * 1e-9, layer_roof * 1e3,
           100.0 * layer_roof / layer_s);
    printf("| **whole forward** | %.3f ms | | | | %.3f | %.0f%% | %d layers + lm_head |\n\n",
           ft->forward_s / R * 1e3, all_roof * 1e3, 100.0 * all_roof / (ft->forward_s / R),
           (int)L);
    if (T == 1)
        printf("decode: %.2f tok/s; layer reads %.1f MB (weights + K/V) at %.1f GB/s = %.0f%% "
               "of streaming read bandwidth; %.1f distinct experts per MoE layer\n\n",
               R / ft->forward_s, layer_bytes * 1e-6, layer_bytes / layer_s * 1e-9,
               100.0 * layer_bytes / layer_s * 1e-9 / c->bw, per_moe);
    else
        printf("prefill: %.1f tok/s; %.3f ms per layer per token\n\n",
               (double)T * R / ft->forward_s, layer_s / T * 1e3);
}

static int bench_prefill(moe8_model *m, moe8_context *ctx, const fwd_opts *o, int T,
                         ceilings *c, int32_t *tok, int32_t *pos, int32_t *seq) {
    moe8_forward_times best, ft;
    moe8_error err;
    double best_s = 0.0;
    ceilings before;
    measure(&before, moe8_context_get_params(ctx).n_threads, o->bw_mb);
    for (int rep = 0; rep < o->reps; rep++) {
        if (moe8_context_seq_truncate(ctx, 0, 0, &err)) return cli_fail(CMD, &err);
        moe8_bench_forward_times(&ft, 1);
        moe8_bench_forward_timing(1);
        int rc = run_tokens(ctx, T, T, tok, pos, seq);
        moe8_bench_forward_timing(0);
        if (rc) return rc;
        moe8_bench_forward_times(&ft, 1);
        if (rep == 0 || ft.forward_s < best_s) best = ft, best_s = ft.forward_s;
        fprintf(stderr, "moe8 " CMD ": prefill T=%d rep %d: %.3f s\n", T, rep + 1, ft.forward_s);
    }
    measure_max(c, &before, moe8_context_get_params(ctx).n_threads, o->bw_mb);
    printf("### prefill, T = %d tokens (best of %d)\n\n", T, o->reps);
    print_ceilings(c);
    report(m, &best, 1, T, 0, o->kv_type, c);
    return 0;
}

static int bench_decode(moe8_model *m, moe8_context *ctx, const fwd_opts *o, int n_ctx,
                        ceilings *c, int32_t *tok, int32_t *pos, int32_t *seq, int n_batch) {
    moe8_forward_times ft;
    moe8_error err;
    int rc;
    if (moe8_context_seq_truncate(ctx, 0, 0, &err)) return cli_fail(CMD, &err);
    fprintf(stderr, "moe8 " CMD ": filling a context of %d tokens\n", n_ctx);
    if ((rc = run_tokens(ctx, n_ctx - 1, n_batch, tok, pos, seq))) return rc;
    if ((rc = run_tokens(ctx, 1, 1, tok, pos, seq))) return rc; /* warm-up step */
    ceilings before;
    measure(&before, moe8_context_get_params(ctx).n_threads, o->bw_mb);
    moe8_bench_forward_times(&ft, 1);
    moe8_bench_forward_timing(1);
    rc = run_tokens(ctx, o->steps, 1, tok, pos, seq);
    moe8_bench_forward_timing(0);
    if (rc) return rc;
    moe8_bench_forward_times(&ft, 1);
    measure_max(c, &before, moe8_context_get_params(ctx).n_threads, o->bw_mb);
    printf("### decode, context %d (mean of %d steps)\n\n", n_ctx, o->steps);
    print_ceilings(c);
    report(m, &ft, o->steps, 1, n_ctx + o->steps / 2, o->kv_type, c);
    return 0;
}

int cmd_bench_forward(int argc, char **argv) {
    fwd_opts o;
    moe8_model_params mp = moe8_model_params_default();
    cli_model_opts(&mp);
    moe8_context_params cp = moe8_context_params_default();
    moe8_model *m = NULL;
    moe8_context *ctx = NULL;
    moe8_error err;
    ceilings c;
    const char *how8 = "", *howf = "";
    int rc = parse(argc, argv, &o), max_t = 1, max_ctx = 0, has_decode = 0;
    int32_t *tok = NULL, *pos = NULL, *seq = NULL;
    if (rc) return rc < 0 ? 0 : rc;
    for (int i = 0; i < o.n_tokens; i++) {
        if (o.tokens[i] > max_t) max_t = o.tokens[i];
        has_decode |= o.tokens[i] == 1;
    }
    for (int i = 0; has_decode && i < o.n_ctx; i++)
        if (o.ctx[i] > max_ctx) max_ctx = o.ctx[i];
    mp.n_threads = o.threads;
    cli_log_warnings(CMD);
    if (moe8_model_load(o.dir, &mp, &m, &err)) return cli_fail(CMD, &err);
    cp.n_threads = o.threads;
    cp.kv_type = o.kv_type;
    cp.prefix_cache = 0;
    cp.n_ctx = (max_t > max_ctx + o.steps + 1 ? max_t : max_ctx + o.steps + 1);
    cp.n_batch = max_t > max_ctx ? max_t : max_ctx;
    if (cp.n_batch > 8192 && max_t <= 8192) cp.n_batch = 8192;
    if (moe8_context_create(m, &cp, &ctx, &err)) {
        moe8_model_free(m);
        return cli_fail(CMD, &err);
    }
    cp = moe8_context_get_params(ctx);
    tok = malloc((size_t)cp.n_batch * sizeof *tok);
    pos = malloc((size_t)cp.n_batch * sizeof *pos);
    seq = malloc((size_t)cp.n_batch * sizeof *seq);
    if (!tok || !pos || !seq) {
        cli_err(CMD, "out of memory");
        rc = 1;
    }
    c.bw = moe8_bench_read_gbs((size_t)o.bw_mb << 20, cp.n_threads, 3);
    c.int8 = moe8_bench_int8_peak_gops(cp.n_threads, &how8);
    c.f32 = moe8_bench_f32_peak_gflops(cp.n_threads, &howf);
    if (!rc) {
        const moe8_config *cfg = moe8_model_config(m);
        char attn[128];
        if (fam_i(cfg, "kv_lora_rank") > 0) /* MLA: the cached latent row per position */
            snprintf(attn, sizeof attn, "MLA %lld heads x %lld, latent %lld + rope %lld",
                     (long long)cfg->num_attention_heads, (long long)cfg->head_dim,
                     (long long)fam_i(cfg, "kv_lora_rank"),
                     (long long)fam_i(cfg, "qk_rope_head_dim"));
        else
            snprintf(attn, sizeof attn, "%lld/%lld heads x %lld", (long long)cfg->num_attention_heads,
                     (long long)cfg->num_key_value_heads, (long long)cfg->head_dim);
        printf("## moe8 bench forward: %s (%lld layers, H %lld, %s, %lld experts top-%lld x %lld)\n\n",
               o.dir, (long long)cfg->num_hidden_layers, (long long)cfg->hidden_size, attn,
               (long long)cfg->num_experts, (long long)cfg->num_experts_per_tok,
               (long long)cfg->moe_intermediate_size);
        printf("%d threads, %s kernels, KV %s; ceilings at start (probes of `bench moe`; each "
               "table has its own): streaming read %.1f GB/s, int8 %.1f GOP/s (%s), fp32 %.1f "
               "GFLOP/s (%s)\n\n",
               cp.n_threads, moe8_kernel_isa(), cli_kv_type_name(o.kv_type), c.bw, c.int8, how8,
               c.f32, howf);
    }
    for (int i = 0; !rc && i < o.n_tokens; i++) {
        if (o.tokens[i] > 1) {
            rc = bench_prefill(m, ctx, &o, o.tokens[i], &c, tok, pos, seq);
            continue;
        }
        for (int j = 0; !rc && j < o.n_ctx; j++)
            rc = bench_decode(m, ctx, &o, o.ctx[j], &c, tok, pos, seq, cp.n_batch);
    }
    free(tok);
    free(pos);
    free(seq);
    moe8_context_free(ctx);
    moe8_model_free(m);
    return rc;
}
