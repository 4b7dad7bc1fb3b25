/*
 * moe8_bench.h — benchmark helpers for `moe8 bench`: roofline probes and kernel / forward-phase
 * accounting.
 *
 * Unstable: what the benchmarks measure changes with the kernels; no promise.
 */
#ifndef MOE8_API_BENCH_H
#define MOE8_API_BENCH_H

#include "moe8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Benchmark helpers (for `moe8 bench`; they allocate and take time)         */
/* ======================================================================== */

/* Streaming-read bandwidth in GB/s (1e9 bytes/s): n_threads threads (0 =
 * OpenMP default) each read their contiguous share of an n_bytes buffer with
 * the widest loads of the kernel set in use; best of `reps` passes. Make
 * n_bytes several times the last-level cache to measure DRAM. 0 on failure. */
double moe8_bench_read_gbs(size_t n_bytes, int n_threads, int reps);

/* Exact int8 peak in GOP/s (1 multiply-accumulate = 2 ops) of n_threads
 * threads each running the instruction sequence the int8 GEMM of the kernel
 * set in use is built on, on registers only; *how (may be NULL) names it. */
double moe8_bench_int8_peak_gops(int n_threads, const char **how);

/* Kernel-time accounting: while on, every kernel call that goes through the
 * dispatch table adds its wall time to process-wide counters (two clock
 * reads per call). Turn it on before creating what you measure (a caller may
 * keep the table it got). Times are summed over threads. */
typedef struct {
    double quant_s;      /* per-row activation quantization */
    double gemm_q8_s;    /* int8 GEMMs (both variants) */
    double gemm_f32_s;   /* float GEMMs */
    int64_t n_calls;
    double attn_s;       /* flash-attention tiles */
} moe8_kernel_times;
void moe8_bench_kernel_timing(int on);
void moe8_bench_kernel_times(moe8_kernel_times *out, int reset);

/* Exact fp32 FMA peak in GFLOP/s (1 FMA = 2 flops) of n_threads threads each
 * running independent fused multiply-add chains of the widest float vectors
 * of the kernel set in use, on registers only; *how (may be NULL) names it. */
double moe8_bench_f32_peak_gflops(int n_threads, const char **how);

/* Forward-phase accounting (for `moe8 bench forward`): while on, every
 * moe8_decode adds the wall time of each phase of its forward pass, as seen
 * by the calling thread (the phases run one after another, each on all
 * threads), to process-wide counters. Layer phases are summed over layers.
 * Costs two clock reads per phase when on, one branch when off. */
typedef enum {
    MOE8_PHASE_ATTN_PROJ,   /* q/k/v/o linears, their activation quantization */
    MOE8_PHASE_ATTN_CORE,   /* causal attention over the KV cache */
    MOE8_PHASE_ELEMENTWISE, /* embedding, RMSNorms, q/k norms, RoPE, KV writes, residual adds */
    MOE8_PHASE_ROUTER,      /* router GEMM, top-k, token quantization */
    MOE8_PHASE_EXPERTS,     /* dispatch, expert MLPs, combine */
    MOE8_PHASE_DENSE_MLP,   /* dense (non-MoE) layers' gate/up/SwiGLU/down */
    MOE8_PHASE_LM_HEAD,     /* final norm, lm_head, its quantization */
    MOE8_PHASE_COMM,        /* TP/EP all-reduces and the logits all-gather */
    MOE8_PHASE_COUNT
} moe8_phase;
typedef struct {
    double phase_s[MOE8_PHASE_COUNT];
    double forward_s;        /* whole moe8_decode calls */
    int64_t n_forward;       /* moe8_decode calls */
    int64_t expert_blocks;   /* sum over MoE layer calls of local experts with >= 1 row */
    int64_t moe_calls;       /* MoE layer calls */
} moe8_forward_times;
const char *moe8_phase_name(moe8_phase phase); /* "attention projections", ... */
void moe8_bench_forward_timing(int on);
void moe8_bench_forward_times(moe8_forward_times *out, int reset);

#ifdef __cplusplus
}
#endif

#endif /* MOE8_API_BENCH_H */
