/*
 * phase.c — forward-phase accounting of moe8.h (moe8_bench_forward_timing):
 * process-wide counters in nanoseconds, added to by the thread that runs a
 * forward pass (forward.c, context.c) or by thread 0 of the MoE layer's
 * parallel region (moe_layer.c). Off by default; when off a phase mark is one
 * relaxed atomic load. And the clock they (and every timing) read.
 */
#include <stdatomic.h>
#include <time.h>

#include "core/core.h"

double moe8_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static atomic_int g_on;
static atomic_llong g_ns[MOE8_PHASE_COUNT], g_fwd_ns, g_fwd_n, g_blocks, g_moe_calls;

static const char *const g_names[MOE8_PHASE_COUNT] = {
    "attention projections", "attention core", "norms + RoPE + residuals", "router + top-k",
    "experts", "dense MLP", "lm_head", "communication",
};

const char *moe8_phase_name(moe8_phase phase) {
    return phase >= 0 && phase < MOE8_PHASE_COUNT ? g_names[phase] : "?";
}

int moe8_phase_on(void) { return atomic_load_explicit(&g_on, memory_order_relaxed); }

void moe8_phase_add(moe8_phase phase, double seconds) {
    if (phase >= 0 && phase < MOE8_PHASE_COUNT)
        atomic_fetch_add_explicit(&g_ns[phase], (long long)(seconds * 1e9), memory_order_relaxed);
}

void moe8_phase_forward(double seconds) {
    atomic_fetch_add_explicit(&g_fwd_ns, (long long)(seconds * 1e9), memory_order_relaxed);
    atomic_fetch_add_explicit(&g_fwd_n, 1, memory_order_relaxed);
}

void moe8_phase_moe(int active_experts) {
    atomic_fetch_add_explicit(&g_blocks, active_experts, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_moe_calls, 1, memory_order_relaxed);
}

void moe8_bench_forward_timing(int on) { atomic_store(&g_on, on ? 1 : 0); }

void moe8_bench_forward_times(moe8_forward_times *out, int reset) {
    for (int i = 0; i < MOE8_PHASE_COUNT; i++) {
        out->phase_s[i] = 1e-9 * (double)atomic_load(&g_ns[i]);
        if (reset) atomic_store(&g_ns[i], 0);
    }
    out->forward_s = 1e-9 * (double)atomic_load(&g_fwd_ns);
    out->n_forward = atomic_load(&g_fwd_n);
    out->expert_blocks = atomic_load(&g_blocks);
    out->moe_calls = atomic_load(&g_moe_calls);
    if (reset) {
        atomic_store(&g_fwd_ns, 0);
        atomic_store(&g_fwd_n, 0);
        atomic_store(&g_blocks, 0);
        atomic_store(&g_moe_calls, 0);
    }
}
