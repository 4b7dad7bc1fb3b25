/*
 * attention.c — the attention block's arithmetic (SEMANTICS §7): RMSNorm (whole
 * rows and per head), K/V rows into the paged cache (F32, F16 or BF16), and causal grouped-query
 * attention over it.
 *
 * Cache layout (attention.h moe8_kv_view): blocks of MOE8_KV_BLOCK_TOKENS
 * positions, [n_kv][BS][D] per layer and k/v, found through the sequence's
 * block table. Query head h reads kv head h / G, G = n_head / n_kv.
 *
 * Attention work is cut into items (query tile, kv head[, part of its head
 * group]): a tile is a run of consecutive tokens of one sequence (at most
 * 128 / G of them, cut at positions that are multiples of that), and each
 * item is one call of the flash-attention kernel (kernels.h), a chunk of the
 * thread pool (core/pool.h) claimed by whichever thread is free,
 * writing its own rows of out. Nothing is summed across items, and the
 * kernel computes each row the same way whatever rows share its tile, so the
 * result depends neither on the thread count nor on the batch around a token.
 *
 * Multi-head latent attention (DeepSeek, SEMANTICS §7d) runs here in its
 * absorbed form as one kv head of width L + R whose first L values are also
 * the value (v_off 0), with the model's softmax scale.
 *
 * moe8_attention_sinks adds gpt_oss's sinks (SEMANTICS §7i) to the same
 * kernel calls: the kernel hands back each row's max and sum (kernels.h
 * moe8_kv_pages.stats) and the sink joins the denominator after it.
 *
 * Does not: handle sliding windows (attn_sink.c), rotate (rotary.c), or derive the
 * softmax scale from a config (arch/rope.c).
 */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "core/pool.h"

#include "model/attention.h"

void moe8_rmsnorm_rows(float *y, int ldy, const float *x, int ldx, int T, int n, const float *w,
                       float eps) {
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * ldx;
        float *yr = y + (size_t)t * ldy;
        double ss = 0.0;
        for (int j = 0; j < n; j++) ss += (double)xr[j] * xr[j];
        float r = (float)(1.0 / sqrt(ss / n + (double)eps));
        for (int j = 0; j < n; j++) yr[j] = (xr[j] * r) * w[j];
    }
}

void moe8_rmsnorm_heads(float *x, int T, int n_head, int D, const float *w, float eps) {
    moe8_rmsnorm_rows(x, D, x, D, T * n_head, D, w, eps);
}

/* ---- the KV cache ---------------------------------------------------------- */

moe8_attn_cache moe8_attn_cache_layer_ex(const moe8_kv_view *kv, int n_head, int n_kv, int D,
                                         int planes, float scale, int layer) {
    const size_t head = (size_t)MOE8_KV_BLOCK_TOKENS * (size_t)D * moe8_dtype_size(kv->dt);
    const int at = kv->slot ? kv->slot[layer] : layer;
    const int32_t *table = kv->slot && kv->group[layer] ? kv->table2 : kv->table;
    moe8_attn_cache c = {n_head, n_kv, D, kv->dt, scale,
                         kv->data + (size_t)at * (size_t)planes * n_kv * head, kv->block_bytes,
                         planes == 2 ? (size_t)n_kv * head : 0, head, table, kv->max_blocks};
    return c;
}

moe8_attn_cache moe8_attn_cache_layer(const moe8_kv_view *kv, int n_head, int n_kv, int D,
                                      int layer) {
    return moe8_attn_cache_layer_ex(kv, n_head, n_kv, D, 2, (float)(1.0 / sqrt((double)D)), layer);
}

void moe8_kv_store(void *dst, const float *src, int D, moe8_dtype dt) {
    uint16_t *h = dst;
    switch (dt) {
    case MOE8_DT_F32: memcpy(dst, src, (size_t)D * sizeof(float)); break;
    case MOE8_DT_F16: for (int d = 0; d < D; d++) h[d] = moe8_f32_to_f16(src[d]); break;
    case MOE8_DT_BF16: for (int d = 0; d < D; d++) h[d] = moe8_f32_to_bf16(src[d]); break;
    default: MOE8_ASSERT(!"kv type must be F32, F16 or BF16");
    }
}

/* ---- attention --------------------------------------------------------------- */

#define TILE_ROWS 128 /* query rows (tokens x heads of a group) per kernel call */

/* Tokens per query tile: TILE_ROWS / G, a multiple of the block size when it
 * reaches one, at least 1. */
static int tile_tokens(int G) {
    int n = G < TILE_ROWS ? TILE_ROWS / G : 1;
    return n >= MOE8_KV_BLOCK_TOKENS ? n / MOE8_KV_BLOCK_TOKENS * MOE8_KV_BLOCK_TOKENS : n;
}

/* Enough for every table of the registry (a test may run any of them). */
size_t moe8_attention_work_floats(int D, int G) {
    size_t n = 0;
    for (int i = 0; i < moe8_kernels_n_tables(); i++) {
        const size_t t = moe8_kernels_table(i)->attn_work_floats(D, tile_tokens(G) * G);
        n = t > n ? t : n;
    }
    return n;
}

/* Cut the batch into tiles: start[i], len[i] (consecutive batch rows of one
 * sequence at consecutive positions, a new tile at each multiple of n_tok). */
static int make_tiles(int32_t *start, int32_t *len, const int32_t *seq, const int32_t *pos,
                      int T, int n_tok) {
    int n = 0;
    for (int t = 0; t < T;) {
        int k = 1;
        while (t + k < T && k < n_tok && seq[t + k] == seq[t] && pos[t + k] == pos[t] + k &&
               pos[t + k] % n_tok != 0)
            k++;
        start[n] = t;
        len[n++] = k;
        t += k;
    }
    return n;
}

/* One work item: query tile `tile`, kv head kvh, part `part` of its head group. */
typedef struct {
    const moe8_kernels *kt;
    float *out;
    const float *q;
    const moe8_attn_cache *c;
    const int32_t *seq, *pos, *tiles;
    int T, split, Gs;
    float scale;
    float *work;
    size_t work_floats;
    int64_t n_items;
    const float *sinks; /* [n_head] or NULL (moe8_attention_sinks) */
} attn_items;

/* Row o[D] = the kernel's sum_p e^(s_p - m) v_p / l, with the sink's term
 * joining the denominator (SEMANTICS §7i): o * l / (l + e^(sink - m)), the
 * factor formed on the side of the larger exponent so nothing overflows. */
static void fold_sink(float *o, int D, float sink, float m, float l) {
    float f;
    if (sink > m) {
        const float e = l * expf(m - sink);
        f = e / (e + 1.0f);
    } else {
        f = l / (l + expf(sink - m));
    }
    for (int d = 0; d < D; d++) o[d] *= f;
}

/* Chunk c runs item n_items - 1 - c: later tiles of a sequence read more
 * blocks, so they are handed out first. */
static void attn_item(void *ctx, int64_t chunk, int thread) {
    const attn_items *a = ctx;
    const int64_t it = a->n_items - 1 - chunk;
    moe8_kernels_thread_init(a->kt);
    const moe8_attn_cache *c = a->c;
    const int NH = c->n_head, NKV = c->n_kv, G = NH / NKV, D = c->D;
    const int tile = (int)(it / (NKV * a->split)), kvh = (int)(it / a->split % NKV);
    const int part = (int)(it % a->split), t0 = a->tiles[tile];
    const size_t row = ((size_t)t0 * NH + (size_t)kvh * G + (size_t)part * a->Gs) * D;
    moe8_kv_pages kv = {(const char *)c->k0 + (size_t)kvh * c->head_bytes, c->block_bytes,
                              c->v_off, c->table + (size_t)a->seq[t0] * c->max_blocks, c->dt,
                              NULL};
    const int n_tok = a->tiles[a->T + tile];
    float stats[2 * TILE_ROWS];
    if (!a->sinks) {
        a->kt->flash_attn(a->out + row, NH * D, a->q + row, NH * D, n_tok, a->Gs, D, a->pos[t0],
                          a->scale, &kv, a->work + (size_t)thread * a->work_floats);
        return;
    }
    kv.stats = stats; /* n_tok * Gs <= TILE_ROWS (moe8_attention_sinks) */
    a->kt->flash_attn(a->out + row, NH * D, a->q + row, NH * D, n_tok, a->Gs, D, a->pos[t0],
                      a->scale, &kv, a->work + (size_t)thread * a->work_floats);
    const int h0 = kvh * G + part * a->Gs;
    for (int r = 0; r < n_tok * a->Gs; r++)
        fold_sink(a->out + row + (size_t)(r / a->Gs) * NH * D + (size_t)(r % a->Gs) * D, D,
                  a->sinks[h0 + r % a->Gs], stats[2 * r], stats[2 * r + 1]);
}

static void run_items(const moe8_kernels *kt, float *out, const float *q,
                      const moe8_attn_cache *c, const int32_t *seq, const int32_t *pos, int T,
                      int32_t *tiles, float *work, size_t work_floats, int n_threads,
                      const float *sinks) {
    const int NH = c->n_head, NKV = c->n_kv, G = NH / NKV;
    const int n_tiles = make_tiles(tiles, tiles + T, seq, pos, T, tile_tokens(G));
    int split = 1; /* parts of a head group, when tiles x kv heads leave threads idle */
    while ((int64_t)n_tiles * NKV * split < n_threads && split < G)
        do split++; while (G % split);
    const int64_t n_items = (int64_t)n_tiles * NKV * split;
    const attn_items a = {kt, out, q, c, seq, pos, tiles, T, split, G / split, c->scale, work,
                          work_floats, n_items, sinks};
    moe8_pool_run(n_threads, n_items, attn_item, (void *)&a); /* claimed one item at a time */
}

void moe8_attention(const moe8_kernels *kt, float *out, const float *q, const moe8_attn_cache *c,
                    const int32_t *seq, const int32_t *pos, int T, int32_t *tiles, float *work,
                    size_t work_floats, int n_threads) {
    run_items(kt, out, q, c, seq, pos, T, tiles, work, work_floats, n_threads, NULL);
}

void moe8_attention_sinks(const moe8_kernels *kt, float *out, const float *q,
                          const moe8_attn_cache *c, const int32_t *seq, const int32_t *pos, int T,
                          const float *sinks, int32_t *tiles, float *work, size_t work_floats,
                          int n_threads) {
    MOE8_ASSERT(c->n_head / c->n_kv <= TILE_ROWS); /* a tile's rows fit attn_item's stats */
    run_items(kt, out, q, c, seq, pos, T, tiles, work, work_floats, n_threads, sinks);
}
