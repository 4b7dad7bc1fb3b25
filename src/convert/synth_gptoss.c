/*
 * synth_gptoss.c — gpt_oss's stacked experts in a synthetic checkpoint
 * (convert.h moe8_syn_gptoss; synth.c writes everything else). Each expert's
 * matrix in [out][in] orientation — gate_up [2I][H] (row 2i gate i, 2i + 1
 * up i), down [H][I] — is drawn row by row, MXFP4-encoded by blocks of 32
 * (io/mxfp4.c, round to nearest), and written as the released checkpoints
 * store it (U8 _blocks [E][out][in/32][16], _scales [E][out][in/32]) or, as
 * float, the decoded values in transformers' parameter layout ([E][H][2I],
 * [E][I][H]). The same seed gives the same model in both forms.
 *
 * Does not: write biases, sinks or the router (synth.c's generic rows).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/convert.h"
#include "core/core.h"
#include "io/mxfp4.h"

#define EXPERT_STD 0.02f

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Row r of N(0, std²) (Irwin-Hall of 4 uniforms) seeded by h. */
static void draw(float *dst, int64_t n, uint64_t h, int64_t r) {
    uint64_t s = mix(h ^ mix((uint64_t)r));
    const float k = EXPERT_STD * 1.7320508f / 65536.0f;
    for (int64_t j = 0; j < n; j++) {
        uint64_t x = mix(s += 0x9e3779b97f4a7c15ull);
        dst[j] = k * (float)((int64_t)(x & 0xffff) + (int64_t)((x >> 16) & 0xffff) +
                             (int64_t)((x >> 32) & 0xffff) + (int64_t)(x >> 48) - 131070);
    }
}

/* Row r of expert e: its blocks q[in/2], scales sc[in/32] and decoded values f[in]. */
static void expert_row(uint8_t *q, uint8_t *sc, float *f, int64_t in, uint64_t h, int64_t row) {
    draw(f, in, h, row);
    for (int64_t b = 0; b < in / 32; b++) sc[b] = moe8_mxfp4_encode_block(q + b * 16, f + b * 32);
    moe8_mxfp4_decode_row(f, q, sc, in);
}

static void put(char *dst, moe8_dtype dt, size_t i, float v) {
    if (dt == MOE8_DT_F32) ((float *)dst)[i] = v;
    else ((uint16_t *)dst)[i] = moe8_f32_to_bf16(v); /* exact: an MXFP4 value */
}

moe8_status moe8_syn_gptoss(moe8_shards *sh, const char *name, int gx, const int64_t *shape,
                            moe8_dtype dt, uint64_t seed, moe8_error *err) {
    const int fl = gx >= MOE8_SYN_GX_GU_FLOAT;
    const int64_t E = shape[0];
    /* [out][in] of one expert: MXFP4 shapes give them directly, float ones transposed */
    const int64_t out = fl ? shape[2] : shape[1];
    const int64_t in = fl ? shape[1] : shape[2] * 32;
    const size_t esz = fl ? moe8_dtype_size(dt) : 1;
    const size_t per = fl ? (size_t)(out * in) * esz
                          : (size_t)out * (size_t)(gx % 2 ? in / 2 : in / 32);
    char base[160];
    uint64_t h = 1469598103934665603ull ^ mix(seed);
    moe8_status st;
    int nomem = 0;
    char *buf;
    snprintf(base, sizeof base, "%s", name);
    char *sfx = strstr(base, "_blocks");
    if (!sfx) sfx = strstr(base, "_scales");
    if (sfx) *sfx = 0;
    for (const char *p = base; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    if (!(buf = malloc(per * (size_t)E)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': cannot allocate it", name);
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t e = 0; e < E; e++) {
        uint8_t *q = malloc((size_t)in / 2 + (size_t)in / 32);
        float *f = malloc((size_t)in * sizeof(float));
        char *dst = buf + per * (size_t)e;
        for (int64_t r = 0; q && f && r < out; r++) {
            uint8_t *sc = q + in / 2;
            expert_row(q, sc, f, in, h, e * out + r);
            if (gx == MOE8_SYN_GX_GU_BLOCKS || gx == MOE8_SYN_GX_DN_BLOCKS)
                memcpy(dst + (size_t)r * (size_t)(in / 2), q, (size_t)in / 2);
            else if (!fl)
                memcpy(dst + (size_t)r * (size_t)(in / 32), sc, (size_t)in / 32);
            else /* transposed: [in][out] */
                for (int64_t j = 0; j < in; j++) put(dst, dt, (size_t)(j * out + r), f[j]);
        }
        if (!q || !f) {
#pragma omp atomic write
            nomem = 1;
        }
        free(q);
        free(f);
    }
    st = nomem ? moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': out of memory", name)
               : moe8_shards_write(sh, name, buf, per * (size_t)E, err);
    free(buf);
    return st;
}
