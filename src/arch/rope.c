/*
 * rope.c — the rotary geometry a config implies (arch.h; SEMANTICS §7, §7d):
 * the rotary width, the frequencies of each rotated pair (YaRN's blend when
 * rope_scaling is set) with the scale of their cos and sin, and the softmax
 * scale of attention. Numbers of the config only, computed in double, so the
 * weights' build (src/load) and the forward's rotary table (model/rotary.c)
 * read the same values.
 *
 * Does not: build the cos/sin table or rotate anything (model/rotary.c).
 */
#include <math.h>

#include "arch/arch.h"
#include "core/core.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

int moe8_rope_dim(const moe8_config *c) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    if (fc->kv_lora_rank > 0) return (int)fc->qk_rope_head_dim;
    if (fc->rotary_dim > 0) return (int)fc->rotary_dim; /* a count of dims (minimax_m2) */
    if (fc->partial_rotary_factor > 0) /* int(head_dim * factor), as transformers */
        return (int)((double)c->head_dim * fc->partial_rotary_factor);
    return (int)c->head_dim;
}

/* YaRN's attention factor: 0.1 m ln(s) + 1 (1 for s <= 1). */
static double yarn_mscale(double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * log(s) + 1.0; }

/* The dimension whose frequency turns n_rot times over the original context. */
static double yarn_dim(double n_rot, int R, double base, double orig) {
    return R * log(orig / (n_rot * 2 * M_PI)) / (2 * log(base));
}

double moe8_rope_freqs(const moe8_config *c, double *freq) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    const int R = moe8_rope_dim(c), half = R / 2;
    const double base = c->rope_theta, f = fc->yarn_factor;
    double lo = 0, hi = 0;
    MOE8_ASSERT(half <= MOE8_CAP_HEAD_DIM / 2);
    if (!(f > 0)) {
        for (int i = 0; i < half; i++) freq[i] = pow(base, -2.0 * i / R);
        return 1.0;
    }
    const double orig = (double)fc->yarn_original_max_position_embeddings;
    lo = yarn_dim(fc->yarn_beta_fast, R, base, orig);
    hi = yarn_dim(fc->yarn_beta_slow, R, base, orig);
    if (!fc->yarn_no_truncate) lo = floor(lo), hi = ceil(hi); /* gpt_oss: truncate false */
    if (lo < 0) lo = 0;
    if (hi > R - 1) hi = R - 1;
    if (lo == hi) hi += 0.001;
    for (int i = 0; i < half; i++) {
        const double extra = pow(base, -2.0 * i / R), inter = extra / f;
        double ramp = ((double)i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        const double mask = 1.0 - ramp; /* 1: keep the original frequency */
        freq[i] = inter * (1.0 - mask) + extra * mask;
    }
    return yarn_mscale(f, fc->yarn_mscale) / yarn_mscale(f, fc->yarn_mscale_all_dim);
}

float moe8_attn_scale(const moe8_config *c) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    double s = 1.0 / sqrt((double)c->head_dim);
    if (fc->yarn_factor > 0 && fc->yarn_mscale_all_dim != 0) {
        const double m = yarn_mscale(fc->yarn_factor, fc->yarn_mscale_all_dim);
        s *= m * m;
    }
    return (float)s;
}
