/*
 * context.c — contexts, batches and moe8_decode of moe8.h.
 *
 * A context owns the paged KV cache (model/kv_pool.h: a pool of blocks of
 * MOE8_KV_BLOCK_TOKENS positions shared by its n_seq_max sequences, each with
 * a block table; elements of kv_type; gpt_oss's sliding-window layers in a
 * group of their own whose blocks left of the window go back after each
 * decode, SEMANTICS §10), the RoPE table [n_ctx][R/2][2], the
 * length of each sequence, and the forward scratch (forward.h) sized for n_batch tokens and
 * n_outputs logits rows — all allocated at create, so decode never
 * allocates. moe8_decode reserves the blocks a batch needs before the
 * forward (all or nothing) and registers the blocks it filled in the prefix
 * cache after it; the scheduler (sched/) decides who may use the pool.
 * Hybrid models also have a recurrent-state pool (model/state_pool.h, sized
 * by state_bytes): a slot per running sequence, taken at position 0 or when
 * prefix blocks are attached (restored from their snapshot), given back at
 * truncate to 0; snapshots asked for a forward are kept with the registered
 * block that ends at their position, and evicted with it or least recently
 * used first. With the disk tier (kv_disk.h) a block's snapshot is written
 * with it, and the deepest one a load gives is put back with its block.
 *
 * Prepared weights (load/weights.h) are the model's, one set per
 * float_experts setting: a context takes a reference at create (the first
 * builds them, under the model's lock) and drops it when freed.
 *
 * Does not: reorder or split a batch (the caller's order is the forward
 * order), keep logits of earlier calls, sample, or schedule (sched/).
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/core.h"
#include "dist/dist.h"
#include "model/context.h"
#include "model/forward.h"
#include "model/gdn.h"
#include "model/kv_disk.h"
#include "model/kv_pool.h"
#include "model/state_pool.h"

/* ---- context --------------------------------------------------------------- */

struct moe8_context {
    moe8_model *model;            /* referenced (moe8_model_ref) while the context lives */
    const moe8_weights *w;
    moe8_context_params p;        /* zeros resolved */
    kv_pool kv;                   /* the paged KV cache */
    int32_t *kv_slot;             /* [n_kv_layers] two groups: a KV layer's place in its block */
    uint8_t *kv_group;            /* [n_kv_layers] its group (0 full, 1 sliding), or NULL */
    moe8_state_pool state;        /* Gated DeltaNet layers' per-sequence state (hybrids) */
    moe8_kv_disk *disk;           /* the prompt cache's disk tier (kv_disk.h), or NULL */
    moe8_kvd_key *disk_keys;      /* [max_blocks] a prompt's block keys */
    int32_t *disk_tok;            /* [max_blocks * BS] a released sequence's ids */
    void **disk_data;             /* [max_blocks] its blocks' K/V (saving, loading) */
    const void **disk_snap;       /* [max_blocks] hybrids: their snapshots, or NULL (saving) */
    const int32_t *disk_prompt;   /* the prompt moe8_context_prefix_load reads for */
    int32_t disk_nb;              /* its blocks there */
    float *rope;                  /* [n_ctx][R/2][2], R the rotary width */
    int32_t *seq_len;             /* [n_seq] */
    int32_t *seq_next;            /* [n_seq] batch validation */
    int32_t *out_idx;             /* [n_outputs] batch rows with logits */
    int32_t *logit_row;           /* [n_batch] row of s.logits, or -1 */
    int32_t n_last;               /* tokens of the last batch (0 after a failure) */
    moe8_fwd_scratch s;
};

moe8_context_params moe8_context_params_default(void) {
    moe8_context_params p;
    memset(&p, 0, sizeof p);
    p.n_ctx = 4096;
    p.n_seq_max = 1;
    p.prefix_cache = 1;
    p.kv_type = MOE8_DT_F16;
    return p;
}

static moe8_status resolve_params(const moe8_model *m, moe8_context_params *p, moe8_error *err) {
    const int64_t max_pos = m->cfg.max_position_embeddings;
    if (p->n_ctx < 1 || p->n_ctx > max_pos)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "n_ctx %d must be in [1, max_position_embeddings %lld]", p->n_ctx,
                         (long long)max_pos);
    if (p->n_seq_max < 1 || p->n_batch < 0 || p->n_outputs < 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "n_seq_max (%d) must be >= 1; n_batch, n_outputs >= 0", p->n_seq_max);
    if (p->n_threads < 0 || p->n_threads > MOE8_MAX_THREADS)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "n_threads %d must be in [0, %d] (0 = "
                         "default)", p->n_threads, MOE8_MAX_THREADS);
    if (p->kv_type != MOE8_DT_F32 && p->kv_type != MOE8_DT_F16 && p->kv_type != MOE8_DT_BF16)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "kv_type %s must be F32, F16 or BF16",
                         moe8_dtype_name(p->kv_type));
    if (!moe8_model_kv_block_bytes(m, p->kv_type)) /* e.g. a 2-layer slice of a 3:1 hybrid */
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "model of %d layers has no full-attention "
                         "layer (no KV cache): not supported yet", (int)m->cfg.num_hidden_layers);
    if (p->n_batch == 0) p->n_batch = p->n_ctx;
    if (p->n_outputs == 0) p->n_outputs = p->n_seq_max;
    if (p->n_outputs > p->n_batch) p->n_outputs = p->n_batch;
    if (p->n_threads == 0) p->n_threads = m->params.n_threads;
    if (p->n_threads == 0) p->n_threads = omp_get_max_threads();
    if (p->n_threads < 1) p->n_threads = 1;
    if (p->n_threads > MOE8_MAX_THREADS) p->n_threads = MOE8_MAX_THREADS; /* OMP_NUM_THREADS */
    return MOE8_OK;
}

/* Sizes of the one scratch block; `base` NULL only measures. */
typedef struct {
    char *base;
    size_t used;
    int overflow;
} carver;

static void *carve(carver *c, size_t n, size_t size) {
    size_t bytes, end;
    void *p;
    if (moe8_mul_size(n, size, &bytes) || moe8_add_size(bytes, 63, &bytes) ||
        moe8_add_size(c->used, bytes & ~(size_t)63, &end)) {
        c->overflow = 1;
        return NULL;
    }
    p = c->base ? c->base + c->used : NULL;
    c->used = end;
    return p;
}

/* The Gated DeltaNet layers' buffers (forward.h g_*). */
static void carve_gdn(carver *c, moe8_context *x) {
    const moe8_weights *w = x->w;
    const moe8_gdn_dims d = {w->gdn_nk, w->gdn_nv, w->gdn_dk, w->gdn_dv, w->gdn_k};
    const size_t B = (size_t)x->p.n_batch, NV = (size_t)w->gdn_nv;
    const size_t C = (size_t)moe8_gdn_conv_channels(&d), Z = NV * (size_t)w->gdn_dv;
    moe8_fwd_scratch *s = &x->s;
    s->g_raw = w->gdn_grouped ? carve(c, B * (C + Z), 4) : NULL;
    s->g_mix = carve(c, B * C, 4);
    s->g_conv = carve(c, B * C, 4);
    s->g_z = carve(c, B * Z, 4);
    s->g_o = carve(c, B * Z, 4);
    s->g_ba = w->gdn_grouped ? carve(c, B * 2 * NV, 4) : NULL;
    s->g_b = carve(c, B * NV, 4);
    s->g_a = carve(c, B * NV, 4);
    s->g_g = carve(c, B * NV, 4);
    s->g_beta = carve(c, B * NV, 4);
    s->g_work = carve(c, moe8_gdn_chunk_work_floats(&d, x->p.n_threads), 4);
    s->g_S = carve(c, B, sizeof(float *));
}

static void carve_scratch(carver *c, moe8_context *x) {
    const moe8_weights *w = x->w;
    const size_t B = (size_t)x->p.n_batch, H = (size_t)w->H;
    const size_t QD = (size_t)w->n_head * w->D, KD = (size_t)w->n_kv * w->D;
    const size_t QC = (size_t)w->n_head * w->C; /* MLA: absorbed queries / latent outputs */
    moe8_fwd_scratch *s = &x->s;
    s->x = carve(c, B * H, 4);
    s->h = carve(c, B * H, 4);
    s->tmp = carve(c, B * H, 4);
    s->q = carve(c, B * QD, 4);
    s->att = carve(c, B * (QC > QD ? QC : QD), 4);
    s->k = w->mla ? NULL : carve(c, B * KD, 4);
    s->v = w->mla ? NULL : carve(c, B * KD, 4);
    if (w->mla) {
        s->qa = w->QL ? carve(c, B * (size_t)w->QL, 4) : NULL;
        s->kva = carve(c, B * (size_t)w->C, 4);
        s->qc = carve(c, B * QC, 4);
        s->attv = carve(c, B * (size_t)w->n_head * (size_t)w->DV, 4);
    }
    s->mlp = w->F_max ? carve(c, B * 2 * (size_t)w->F_max, 4) : NULL;
    s->xq = carve(c, B, (size_t)s->ldq);
    s->ones = carve(c, B, 4);
    s->ones_i = carve(c, B, 4);
    s->attn_work_floats = moe8_attention_work_floats(w->C, w->n_head / w->n_kv);
    s->attn_work = carve(c, (size_t)x->p.n_threads, s->attn_work_floats * 4);
    s->attn_tiles = carve(c, 2 * B, 4);
    s->logits = carve(c, (size_t)x->p.n_outputs, (size_t)w->V * 4);
    s->lm_part = w->v_chunk ? carve(c, (size_t)x->p.n_outputs, (size_t)w->v_chunk * 4) : NULL;
    s->lm_all = w->v_chunk ? carve(c, (size_t)x->p.n_outputs * w->n_ranks, (size_t)w->v_chunk * 4)
                           : NULL;
    if (w->lm_head.type == MOE8_QUANT_W8A8_DYNAMIC) { /* codes go to xq */
        s->lm_sx = carve(c, (size_t)x->p.n_outputs, 4);
        s->lm_xsum = carve(c, (size_t)x->p.n_outputs, 4);
    }
    if (w->has_dynamic) { /* codes go to xq */
        s->dyn_sx = carve(c, B, 4);
        s->dyn_xsum = carve(c, B, 4);
    }
    if (w->has_shared) {
        s->sh_out = carve(c, B * H, 4);
        s->sh_score = carve(c, B, 4);
    }
    if (w->out_gate) {
        s->qg = carve(c, B * 2 * QD, 4);
        s->gate = carve(c, B * QD, 4);
    }
    if (w->n_gdn) carve_gdn(c, x);
    x->rope = carve(c, (size_t)x->p.n_ctx * (size_t)(w->rope_dim / 2), 8);
    x->seq_len = carve(c, (size_t)x->p.n_seq_max, 4);
    x->seq_next = carve(c, (size_t)x->p.n_seq_max, 4);
    x->out_idx = carve(c, (size_t)x->p.n_outputs, 4);
    x->logit_row = carve(c, B, 4);
}

static moe8_status alloc_scratch(moe8_context *x, moe8_error *err) {
    const moe8_weights *w = x->w;
    int kmax = w->H > w->n_head * w->D ? w->H : w->n_head * w->D;
    carver c = {0};
    if (w->F_max > kmax) kmax = w->F_max;
    if (w->QL > kmax) kmax = w->QL;                        /* MLA: q_b_proj's input */
    if (w->n_head * w->DV > kmax) kmax = w->n_head * w->DV; /* o_proj's input */
    if (w->gdn_nv * w->gdn_dv > kmax) kmax = w->gdn_nv * w->gdn_dv; /* out_proj's input */
    x->s.ldq = moe8_round_up(kmax, 64);
    x->s.n_batch = x->p.n_batch;
    x->s.n_out = x->p.n_outputs;
    carve_scratch(&c, x);
    if (c.overflow || !(c.base = moe8_alloc_aligned(c.used)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate %zu bytes of scratch for "
                         "n_batch %d", c.used, x->p.n_batch);
    x->s.block = c.base;
    c.used = 0;
    carve_scratch(&c, x);
    moe8_touch_pages(c.base, c.used, x->p.n_threads); /* not in the first forward */
    memset(x->seq_len, 0, (size_t)x->p.n_seq_max * sizeof(int32_t));
    for (int i = 0; i < x->p.n_batch; i++) {
        x->s.ones[i] = 1.0f;
        x->s.ones_i[i] = 1;
    }
    moe8_rope_table_cfg(x->rope, x->p.n_ctx, &x->model->cfg);
    return MOE8_OK;
}

static moe8_status alloc_moe_ws(moe8_context *x, moe8_error *err) {
    const moe8_weights *w = x->w;
    x->s.moe_ws = calloc((size_t)w->n_layer, sizeof *x->s.moe_ws);
    if (!x->s.moe_ws) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    for (int i = 0; i < w->n_layer; i++) {
        const moe8_fwd_layer *L = &w->layers[i];
        moe8_status st;
        if (!L->is_moe || L->ws_layer != i) continue;
        st = moe8_moe_workspace_create(L->moe, x->p.n_batch, x->p.n_threads, &x->s.moe_ws[i], err);
        if (st) return st;
    }
    return MOE8_OK;
}

/* Sized from the whole model's kv heads, so every rank of a TP group derives
 * the same block count from the same budget. */
size_t moe8_model_kv_block_bytes(const moe8_model *m, moe8_dtype kv_type) {
    const moe8_config *c = &m->cfg;
    if (kv_type != MOE8_DT_F32 && kv_type != MOE8_DT_F16 && kv_type != MOE8_DT_BF16) return 0;
    const moe8_kv_shape k = moe8_arch_kv_shape(c);
    return (size_t)moe8_arch_kv_layers(c) * (size_t)k.planes * (size_t)k.heads *
           MOE8_KV_BLOCK_TOKENS * (size_t)k.dim * moe8_dtype_size(kv_type);
}

/* Layer groups (kv_pool.h): sliding-window layers beside full ones get a
 * group of their own (each KV layer's slot in its group's blocks filled);
 * one group when the layers are alike, when the window spans n_ctx, or with
 * the disk tier (its files hold one group's blocks). Returns the groups and
 * the layers of a block; *window the sliding layers' widest. */
static int kv_groups(moe8_context *x, int *per_block, int32_t *window) {
    const moe8_weights *w = x->w;
    int n_full = 0, n_slide = 0;
    int64_t win = 0;
    for (int l = 0; l < w->n_layer; l++) {
        const moe8_fwd_layer *L = &w->layers[l];
        if (L->kv_layer < 0) continue;
        if (L->plan.window > 0) n_slide++;
        else n_full++;
        if (L->plan.window > win) win = L->plan.window;
    }
    *per_block = w->n_kv_layers;
    *window = 0;
    if (!n_slide || !n_full || win >= x->p.n_ctx || x->p.prompt_cache_dir) return 1;
    x->kv_slot = malloc((size_t)w->n_kv_layers * sizeof *x->kv_slot);
    x->kv_group = malloc((size_t)w->n_kv_layers);
    if (!x->kv_slot || !x->kv_group) return -1;
    n_full = n_slide = 0;
    for (int l = 0; l < w->n_layer; l++) {
        const moe8_fwd_layer *L = &w->layers[l];
        if (L->kv_layer < 0) continue;
        x->kv_group[L->kv_layer] = L->plan.window > 0;
        x->kv_slot[L->kv_layer] = L->plan.window > 0 ? n_slide++ : n_full++;
    }
    *per_block = n_full > n_slide ? n_full : n_slide;
    *window = (int32_t)win;
    return 2;
}

static moe8_status alloc_kv(moe8_context *x, moe8_error *err) {
    const moe8_weights *w = x->w;
    const int64_t per_seq = (x->p.n_ctx + MOE8_KV_BLOCK_TOKENS - 1) / MOE8_KV_BLOCK_TOKENS;
    int per_block;
    int32_t window;
    const int n_group = kv_groups(x, &per_block, &window);
    const size_t bytes = (size_t)per_block * (size_t)w->kv_planes * (size_t)w->n_kv *
                         MOE8_KV_BLOCK_TOKENS * (size_t)w->C * moe8_dtype_size(x->p.kv_type);
    const size_t model_block = moe8_model_kv_block_bytes(x->model, x->p.kv_type) /
                               (size_t)w->n_kv_layers * (size_t)per_block;
    /* the sliding group: the window and a batch of n_batch positions */
    const int64_t slide = (window + x->p.n_batch - 1 + MOE8_KV_BLOCK_TOKENS - 1) /
                          MOE8_KV_BLOCK_TOKENS + 1;
    int64_t n_blocks = (int64_t)x->p.n_seq_max * (per_seq + (n_group < 2      ? 0
                                                             : slide < per_seq ? slide
                                                                               : per_seq));
    moe8_status st;
    if (n_group < 0) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    if (x->p.kv_bytes) {
        n_blocks = (int64_t)(x->p.kv_bytes / model_block);
        if (n_blocks < 1)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "kv_bytes %llu holds no kv block "
                             "(one block of %d positions takes %zu bytes as %s)",
                             (unsigned long long)x->p.kv_bytes, MOE8_KV_BLOCK_TOKENS, model_block,
                             moe8_dtype_name(x->p.kv_type));
    }
    if (n_blocks > INT32_MAX / 2)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "kv cache of %lld blocks is too large",
                         (long long)n_blocks);
    st = moe8_kv_pool_init(&x->kv, (int32_t)n_blocks, x->p.n_seq_max, x->p.n_ctx, bytes,
                           (uint64_t)(uintptr_t)x->w, n_group, window, err);
    if (st) return st;
    x->kv.prefix_cache = x->p.prefix_cache != 0;
    return MOE8_OK;
}

/* ---- the prompt cache's disk tier (kv_disk.h, SEMANTICS §10b) ---------------------- */

static moe8_status alloc_disk(moe8_context *x, moe8_error *err) {
    const char *dir = x->p.prompt_cache_dir;
    moe8_kvd_fp fp;
    uint64_t mfp[3];
    moe8_status st;
    if (!dir) return MOE8_OK;
    if (x->model->shard.size > 1)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "prompt_cache_dir: the disk tier under "
                         "TP/EP (%d ranks) not supported yet (each rank would write its own "
                         "shard, and the ranks would have to agree on the blocks they load)",
                         x->model->shard.size);
    if (!x->p.prefix_cache)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "prompt_cache_dir needs prefix_cache");
    if ((st = moe8_model_fingerprint(x->model, 1, mfp, err))) return st;
    memset(&fp, 0, sizeof fp);
    fp.model_fp = moe8_hash64(mfp, sizeof mfp, 3);
    snprintf(fp.isa, sizeof fp.isa, "%s", x->w->kt ? x->w->kt->isa : "none");
    fp.kv_type = (int32_t)x->p.kv_type;
    fp.tp_rank = 0;
    fp.tp_size = 1;
    fp.float_experts = x->p.float_experts != 0;
    fp.block_bytes = x->kv.block_bytes;
    fp.snap_bytes = x->state.n_layer ? x->state.slot_floats * sizeof(float) : 0;
    x->disk_snap = malloc((size_t)x->kv.max_blocks * sizeof *x->disk_snap);
    x->disk_keys = malloc((size_t)x->kv.max_blocks * sizeof *x->disk_keys);
    x->disk_tok = malloc((size_t)x->kv.max_blocks * KV_BS * sizeof *x->disk_tok);
    x->disk_data = malloc((size_t)x->kv.max_blocks * sizeof *x->disk_data);
    if (!x->disk_keys || !x->disk_tok || !x->disk_data || !x->disk_snap)
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    return moe8_kvd_open(dir, x->p.prompt_cache_bytes, &fp, &x->disk, err);
}

/* Queue the registered blocks of seq not yet on disk (its prefix up to its
 * first unregistered block) for the writer. */
static void disk_save(moe8_context *x, int32_t seq) {
    const int32_t *t = x->kv.table + (size_t)seq * x->kv.max_blocks;
    int32_t n = 0, first = -1, k;
    while (n < x->kv.n_held[seq] && x->kv.b[t[n]].registered) n++;
    for (int32_t i = 0; i < n; i++) {
        memcpy(x->disk_tok + (size_t)i * KV_BS, x->kv.tokens + (size_t)t[i] * KV_BS,
               KV_BS * sizeof *x->disk_tok);
        if (first < 0 && !x->kv.b[t[i]].on_disk) first = i;
        if (first < 0) continue;
        x->disk_data[i - first] = x->kv.data + (size_t)t[i] * x->kv.block_bytes;
        x->disk_snap[i - first] = x->kv.b[t[i]].snap < 0 ? NULL : /* hybrids: its state */
                                  x->state.data + (size_t)x->kv.b[t[i]].snap * x->state.slot_floats;
    }
    if (first < 0) return;
    k = moe8_kvd_save(x->disk, x->disk_tok, first, n - first, (const void *const *)x->disk_data,
                      x->disk_snap);
    for (int32_t i = first; i < first + k; i++) x->kv.b[t[i]].on_disk = 1;
}

struct moe8_kv_disk *moe8_context_disk(const moe8_context *x) { return x->disk; }

static int32_t disk_avail(void *user, int32_t b) {
    moe8_context *x = user;
    return moe8_kvd_open_run(x->disk, x->disk_keys, x->disk_prompt, b, x->disk_nb);
}

static int32_t disk_fill(void *user, int32_t b, int32_t n, void *const *data, int *kept) {
    moe8_context *x = user;
    (void)b;
    return moe8_kvd_read_run(x->disk, n, data, kept);
}

static void state_unsnap(moe8_context *x, int32_t slot);

/* Hybrids: the deepest snapshot the loads gave goes with its block (a state
 * slot: a free one, else the least recently used snapshot but the match's
 * last); the match out[0..k) then ends at its deepest block with a snapshot,
 * as moe8_context_prefix_match's does. */
static int32_t disk_snap_attach(moe8_context *x, int32_t *out, int32_t m, int32_t k) {
    moe8_state_pool *sp = &x->state;
    int32_t b, slot = -1;
    const void *snap = moe8_kvd_snap(x->disk, &b);
    if (snap && b >= m && b < k && x->kv.b[out[b]].snap < 0) {
        const int32_t keep = m > 0 ? x->kv.b[out[m - 1]].snap : -1;
        if ((slot = moe8_state_take(sp, MOE8_STATE_SNAP(out[b]))) < 0 &&
            (slot = moe8_state_lru_snapshot(sp, keep)) >= 0) {
            state_unsnap(x, slot);
            slot = moe8_state_take(sp, MOE8_STATE_SNAP(out[b]));
        }
    }
    if (slot >= 0) {
        memcpy(sp->data + (size_t)slot * sp->slot_floats, snap, sp->slot_floats * sizeof(float));
        x->kv.b[out[b]].snap = slot;
        sp->used[slot] = ++sp->clock;
    }
    while (k > m && ((k * KV_BS) % MOE8_GDN_CHUNK || x->kv.b[out[k - 1]].snap < 0)) k--;
    return k;
}

int32_t moe8_context_prefix_load(moe8_context *x, const int32_t *tokens, int32_t n, int32_t *out,
                                 int32_t m) {
    int32_t nb = n / KV_BS < x->kv.max_blocks ? n / KV_BS : x->kv.max_blocks;
    const kv_source src = {disk_avail, disk_fill, x, x->disk_data};
    if (!x->disk || m >= nb) return m;
    moe8_kvd_keys(x->disk, tokens, nb, x->disk_keys);
    x->disk_prompt = tokens;
    x->disk_nb = nb;
    moe8_kvd_use_now(x->disk);
    const int32_t k = moe8_kv_extend(&x->kv, tokens, n, out, m, nb, &src);
    return x->state.n_layer ? disk_snap_attach(x, out, m, k) : k;
}

/* ---- the recurrent-state pool (hybrids; state_pool.h, SEMANTICS §10) ------------- */

enum {
    SNAP_DEFAULT_MB = 256,   /* state_bytes 0: snapshots' share in MiB ... */
    SNAP_DEFAULT_MIN = 4,    /* ... but at least this many slots ... */
    SNAP_DEFAULT_MAX = 256,  /* ... and at most this many */
};

/* The pool of state_bytes (0: n_seq_max slots and the snapshots' default share). */
static moe8_status alloc_state(moe8_context *x, moe8_error *err) {
    const moe8_weights *w = x->w;
    const moe8_gdn_dims d = {w->gdn_nk, w->gdn_nv, w->gdn_dk, w->gdn_dv, w->gdn_k};
    const size_t conv = moe8_gdn_conv_state_floats(&d), ssm = moe8_gdn_state_floats(&d);
    const size_t slot = moe8_state_slot_bytes(w->n_gdn, conv, ssm);
    int64_t n_slot = x->p.n_seq_max;
    moe8_status st;
    if (moe8_gdn_dims_check(&d))
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "Gated DeltaNet widths (key heads %d, "
                         "value heads %d, dims %d / %d, conv %d) not supported", d.n_k_heads,
                         d.n_v_heads, d.dk, d.dv, d.conv_k);
    if (!slot) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "recurrent state too large");
    if (x->p.state_bytes) {
        n_slot = (int64_t)(x->p.state_bytes / slot);
        if (n_slot < 1)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "state_bytes %llu (--state-mb) holds "
                             "no sequence's recurrent state: one takes %zu bytes (%d Gated "
                             "DeltaNet layers)", (unsigned long long)x->p.state_bytes, slot,
                             w->n_gdn);
        if (n_slot > INT32_MAX / 4) n_slot = INT32_MAX / 4;
    } else if (x->p.prefix_cache) {
        int64_t share = (int64_t)(((uint64_t)SNAP_DEFAULT_MB << 20) / slot);
        n_slot += share < SNAP_DEFAULT_MIN ? SNAP_DEFAULT_MIN
                                            : share > SNAP_DEFAULT_MAX ? SNAP_DEFAULT_MAX : share;
    }
    st = moe8_state_pool_init(&x->state, (int)n_slot, x->p.n_seq_max, w->n_gdn, conv, ssm,
                              x->p.n_batch / MOE8_GDN_CHUNK + x->p.n_seq_max + 1, err);
    if (st) return st;
    x->p.state_bytes = moe8_state_pool_bytes(&x->state);
    x->s.state = &x->state;
    x->kv.state = &x->state;
    return MOE8_OK;
}

/* Snapshot slot back to the free ones, unlinked from its block. */
static void state_unsnap(moe8_context *x, int32_t slot) {
    x->kv.b[MOE8_STATE_SNAP(x->state.owner[slot])].snap = -1;
    moe8_state_evict(&x->state, slot);
}

/* A slot for sequence seq: a free one, else the least recently used snapshot
 * but `keep`; -1 when there is none. */
static int32_t state_acquire(moe8_context *x, int32_t seq, int32_t keep) {
    moe8_state_pool *sp = &x->state;
    int32_t slot = moe8_state_take(sp, seq);
    if (slot < 0 && (slot = moe8_state_lru_snapshot(sp, keep)) >= 0) {
        state_unsnap(x, slot);
        slot = moe8_state_take(sp, seq);
    }
    if (slot >= 0) sp->seq_slot[seq] = slot;
    return slot;
}

static void state_release(moe8_context *x, int32_t seq) {
    moe8_state_pool *sp = &x->state;
    if (!sp->n_layer || sp->seq_slot[seq] < 0) return;
    moe8_state_give(sp, sp->seq_slot[seq]);
    sp->seq_slot[seq] = -1;
}

/* Slots for the batch's sequences that start at position 0 without one (all
 * or none can start: the caller gives back the batch's KV otherwise). */
static moe8_status state_start_batch(moe8_context *x, const moe8_batch *b, moe8_error *err) {
    moe8_state_pool *sp = &x->state;
    int32_t need = 0;
    if (!sp->n_layer) return MOE8_OK;
    for (int32_t i = 0; i < b->n_tokens; i++)
        need += b->pos[i] == 0 && sp->seq_slot[b->seq_id[i]] < 0;
    if (need > sp->n_free + sp->n_snap)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "recurrent state pool full: the batch "
                         "starts %d sequences, %d of the %d slots of %zu bytes can be had "
                         "(raise state_bytes, --state-mb)", need, sp->n_free + sp->n_snap,
                         sp->n_slot, sp->slot_floats * sizeof(float));
    for (int32_t i = 0; i < b->n_tokens; i++)
        if (b->pos[i] == 0) {
            if (sp->seq_slot[b->seq_id[i]] < 0) state_acquire(x, b->seq_id[i], -1);
            moe8_state_clear(sp, b->seq_id[i]); /* a sequence (re)starting: a fresh state */
        }
    return MOE8_OK;
}

/* Slots for this forward's snapshot requests (free ones, else the least
 * recently used snapshots); requests that get none are dropped. */
static void state_snap_slots(moe8_context *x) {
    moe8_state_pool *sp = &x->state;
    int32_t k = 0;
    for (int32_t i = sp->n_req - 1; i >= 0; i--) { /* the deepest of a sequence first */
        int32_t slot = moe8_state_take(sp, MOE8_STATE_SNAP(x->kv.n_blocks));
        if (slot < 0) {
            int32_t old = -1;
            for (int32_t j = 0; j < sp->n_slot; j++) /* snapshots, not this forward's */
                if (sp->owner[j] < -1 && sp->used[j] != UINT64_MAX &&
                    (old < 0 || sp->used[j] < sp->used[old]))
                    old = j;
            if (old >= 0) {
                state_unsnap(x, old);
                slot = moe8_state_take(sp, MOE8_STATE_SNAP(x->kv.n_blocks));
            }
        }
        if (slot >= 0) sp->used[slot] = UINT64_MAX;
        sp->req_slot[i] = slot;
    }
    for (int32_t i = 0; i < sp->n_req; i++) /* those with a slot, in their order */
        if (sp->req_slot[i] >= 0) {
            sp->req_seq[k] = sp->req_seq[i], sp->req_pos[k] = sp->req_pos[i];
            sp->req_slot[k] = sp->req_slot[i], sp->req_hits[k++] = 0;
        }
    sp->n_req = k;
}

/* After the forward (ok: it succeeded and its blocks are registered): each
 * snapshot every layer took goes with the registered block that ends at its
 * position, when that block has none yet; the others go back. */
static void state_snap_keep(moe8_context *x, int ok) {
    moe8_state_pool *sp = &x->state;
    for (int32_t i = 0; i < sp->n_req; i++) {
        const int32_t slot = sp->req_slot[i];
        kv_block *b = NULL;
        if (ok && sp->req_hits[i] == sp->n_layer)
            b = &x->kv.b[kv_block_of(&x->kv, sp->req_seq[i], sp->req_pos[i] - 1)];
        if (b && b->registered && b->snap < 0) {
            b->snap = slot;
            sp->owner[slot] = MOE8_STATE_SNAP((int32_t)(b - x->kv.b));
            sp->used[slot] = ++sp->clock;
        } else {
            moe8_state_give(sp, slot);
        }
    }
    sp->n_req = 0;
}

int32_t moe8_context_state_slots(const moe8_context *x) { return x->state.n_slot; }

int32_t moe8_context_state_available(const moe8_context *x) {
    return x->state.n_layer ? x->state.n_free + x->state.n_snap : 0;
}

void moe8_context_snapshot_at(moe8_context *x, int32_t seq, int32_t pos) {
    moe8_state_pool *sp = &x->state;
    if (!sp->n_layer || !x->kv.prefix_cache || pos <= 0 || pos % MOE8_GDN_CHUNK ||
        sp->n_req >= sp->max_req || seq < 0 || seq >= x->p.n_seq_max)
        return;
    sp->req_seq[sp->n_req] = seq;
    sp->req_pos[sp->n_req++] = pos;
}

moe8_status moe8_context_create(moe8_model *model, const moe8_context_params *params,
                                moe8_context **out, moe8_error *err) {
    moe8_context *x;
    const moe8_weights *w = NULL;
    moe8_status st;
    if (!out || !model) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "context: no model");
    *out = NULL;
    if (!(x = calloc(1, sizeof *x))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    x->model = model;
    moe8_model_ref(model);
    x->p = params ? *params : moe8_context_params_default();
    st = resolve_params(model, &x->p, err);
    if (!st) st = moe8_weights_acquire(model, x->p.float_experts != 0, x->p.n_threads, &w, err);
    x->w = w;
    if (!st) st = alloc_kv(x, err);
    if (!st) st = alloc_scratch(x, err);
    if (!st) st = alloc_moe_ws(x, err);
    if (!st && w->n_gdn) st = alloc_state(x, err);
    if (!st) st = alloc_disk(x, err); /* after the state pool: the snapshots' size */
    /* Under TP/EP every rank learns whether every rank has a context. */
    if (moe8_dist_size(model->params.dist) > 1) st = moe8_dist_agree(model->params.dist, st, err);
    if (st) {
        moe8_context_free(x);
        return st;
    }
    *out = x;
    return MOE8_OK;
}

void moe8_context_free(moe8_context *x) {
    if (!x) return;
    for (int i = 0; x->s.moe_ws && i < x->w->n_layer; i++) moe8_moe_workspace_free(x->s.moe_ws[i]);
    free(x->s.moe_ws);
    moe8_free_aligned(x->s.block);
    if (x->disk) moe8_kvd_close(x->disk); /* writes what is queued */
    free(x->disk_keys);
    free(x->disk_tok);
    free(x->disk_data);
    free(x->disk_snap);
    moe8_kv_pool_free(&x->kv);
    free(x->kv_slot);
    free(x->kv_group);
    moe8_state_pool_free(&x->state);
    moe8_weights_release(x->model, x->w);
    moe8_model_unref(x->model);
    free(x);
}

void moe8_context_set_observer(moe8_context *x, moe8_observe_fn fn, void *user) {
    x->s.observe = fn;
    x->s.observe_user = user;
}

moe8_context_params moe8_context_get_params(const moe8_context *x) { return x->p; }
int32_t moe8_context_n_vocab(const moe8_context *x) { return x->w->V; }

int32_t moe8_context_seq_len(const moe8_context *x, int32_t seq) {
    return seq >= 0 && seq < x->p.n_seq_max ? x->seq_len[seq] : -1;
}

moe8_status moe8_context_seq_truncate(moe8_context *x, int32_t seq, int32_t n_keep,
                                      moe8_error *err) {
    if (seq < 0 || seq >= x->p.n_seq_max || n_keep < 0)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1,
                         "truncate: sequence %d (of %d) / n_keep %d out of range", seq,
                         x->p.n_seq_max, n_keep);
    if (n_keep >= x->seq_len[seq]) return MOE8_OK;
    if (x->disk && n_keep == 0) disk_save(x, seq); /* a finished prefix: to the disk tier */
    if (x->state.n_layer && n_keep > 0) /* the recurrent state cannot be rewound */
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "truncate: sequence %d of a hybrid "
                         "model (%s) to %d of its %d positions: rewinding the recurrent state "
                         "not supported yet (only to 0)", seq, x->model->cfg.model_type, n_keep,
                         x->seq_len[seq]);
    const int kt = moe8_kv_truncate(&x->kv, seq, n_keep);
    if (kt == -2)
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "truncate: sequence %d to %d of its %d "
                         "positions: the K/V of its sliding-window layers (window %d) before "
                         "position %d were given back; rewinding past them not supported yet",
                         seq, n_keep, x->seq_len[seq], x->kv.window,
                         x->seq_len[seq] - x->kv.window + 1);
    if (kt)
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "truncate: sequence %d shares its block at "
                         "position %d and the kv cache has no free block to copy it to", seq,
                         n_keep);
    x->seq_len[seq] = n_keep;
    if (n_keep == 0) state_release(x, seq);
    return MOE8_OK;
}

size_t moe8_context_sleep(moe8_context *x) {
    kv_pool *p = &x->kv;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (kv_used(p) > 0) return 0;
    moe8_kv_drop_cached(p);
    const uintptr_t a = ((uintptr_t)p->data + page - 1) & ~(page - 1);
    const uintptr_t e = ((uintptr_t)p->data + (uintptr_t)p->n_blocks * p->block_bytes) & ~(page - 1);
    if (e <= a || madvise((void *)a, e - a, MADV_DONTNEED)) return 0;
    return (size_t)(e - a);
}

void moe8_context_kv_stats(const moe8_context *x, moe8_kv_stats *out) {
    memset(out, 0, sizeof *out);
    out->n_blocks = x->kv.n_blocks;
    out->block_tokens = MOE8_KV_BLOCK_TOKENS;
    out->block_bytes = x->kv.block_bytes;
    out->n_used = kv_used(&x->kv);
    out->n_cached = x->kv.n_cached;
    out->n_free = x->kv.n_free;
    out->window = x->kv.window;
    for (int32_t s = 0; x->kv.n_group > 1 && s < x->kv.n_seq; s++)
        out->n_window_used += moe8_kv_held(&x->kv, 1, s);
    if (x->state.n_layer) {
        out->state_slots = x->state.n_slot;
        out->state_snapshots = x->state.n_snap;
        out->state_running = x->state.n_slot - x->state.n_free - x->state.n_snap;
        out->state_slot_bytes = x->state.slot_floats * sizeof(float);
        out->state_snap_hits = (int64_t)x->state.n_hits;
        out->state_snap_misses = (int64_t)x->state.n_misses;
        out->state_snap_evictions = (int64_t)x->state.n_evicted;
    }
    moe8_kvd_stats(x->disk, &out->disk);
}

moe8_model *moe8_context_model(const moe8_context *x) { return x->model; }
moe8_dist *moe8_context_group(const moe8_context *x, int *rank, int *size) {
    const int multi = x->model->shard.size > 1;
    *rank = multi ? x->model->shard.rank : 0;
    *size = multi ? x->model->shard.size : 1;
    return multi ? x->model->params.dist : NULL;
}
int32_t moe8_context_kv_blocks(const moe8_context *x) { return x->kv.n_blocks; }
int32_t moe8_context_kv_seq_blocks(const moe8_context *x) { return x->kv.max_blocks; }
int32_t moe8_context_kv_available(const moe8_context *x) { return kv_available(&x->kv); }
int32_t moe8_context_kv_held(const moe8_context *x, int32_t seq) { return x->kv.n_held[seq]; }
int moe8_context_kv_groups(const moe8_context *x) { return x->kv.n_group; }
int32_t moe8_context_kv_held_group(const moe8_context *x, int32_t seq, int g) {
    return g < x->kv.n_group ? moe8_kv_held(&x->kv, g, seq) : 0;
}
int32_t moe8_context_kv_blocks_for(const moe8_context *x, int32_t n_tokens) {
    const int32_t n = (n_tokens + KV_BS - 1) / KV_BS;
    return x->kv.n_group < 2 || n_tokens < 1 ? n : 2 * n - kv_window_first(&x->kv, n_tokens - 1);
}
int moe8_context_kv_reserve(moe8_context *x, int32_t seq, int32_t n_tokens) {
    return moe8_kv_reserve(&x->kv, seq, n_tokens);
}

int32_t moe8_context_prefix_match(const moe8_context *x, const int32_t *tokens, int32_t n,
                                  int32_t *out) {
    int32_t m = x->kv.prefix_cache ? moe8_kv_match(&x->kv, tokens, n, out, x->kv.max_blocks) : 0;
    /* hybrids: only up to the deepest block that ends with a state snapshot */
    while (x->state.n_layer && m > 0 &&
           ((m * MOE8_KV_BLOCK_TOKENS) % MOE8_GDN_CHUNK || x->kv.b[out[m - 1]].snap < 0))
        m--;
    return m;
}

int32_t moe8_context_kv_unheld(const moe8_context *x, const int32_t *blocks, int32_t n) {
    const int32_t *sw = blocks + x->kv.max_blocks;
    int32_t k = 0;
    for (int32_t j = 0; j < n; j++) k += x->kv.b[blocks[j]].ref == 0;
    for (int32_t j = kv_window_first(&x->kv, n * KV_BS); x->kv.n_group > 1 && j < n; j++)
        k += x->kv.b[sw[j]].ref == 0;
    return k;
}

int moe8_context_seq_attach(moe8_context *x, int32_t seq, const int32_t *blocks, int32_t n) {
    moe8_state_pool *sp = &x->state;
    MOE8_ASSERT(x->seq_len[seq] == 0);
    if (sp->n_layer) { /* a slot, with the snapshot's state when blocks are attached */
        const int32_t snap = n > 0 ? x->kv.b[blocks[n - 1]].snap : -1;
        MOE8_ASSERT(n == 0 || snap >= 0);
        if (x->kv.prefix_cache) *(snap >= 0 ? &sp->n_hits : &sp->n_misses) += 1;
        if (sp->seq_slot[seq] < 0 && state_acquire(x, seq, snap) < 0) {
            if (snap < 0) return -1;
            state_unsnap(x, snap); /* the only slot left: it becomes the sequence's */
            MOE8_ASSERT(state_acquire(x, seq, -1) == snap);
        } else if (snap >= 0) {
            moe8_state_slot_copy(sp, sp->seq_slot[seq], snap);
            sp->used[snap] = ++sp->clock;
        } else {
            moe8_state_clear(sp, seq);
        }
    }
    moe8_kv_attach(&x->kv, seq, blocks, n);
    x->seq_len[seq] = n * MOE8_KV_BLOCK_TOKENS;
    return 0;
}

/* ---- decode ---------------------------------------------------------------- */

/* Check every token of the batch before anything changes; fill seq_next (the
 * lengths after the batch), out_idx and logit_row. */
static moe8_status check_batch(moe8_context *x, const moe8_batch *b, int *n_out, moe8_error *err) {
    const int32_t T = b->n_tokens;
    int n = 0;
    if (T < 1 || !b->token || !b->pos || !b->seq_id)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "batch: expected n_tokens >= 1 (got %d) "
                         "and token, pos, seq_id arrays", T);
    if (T > x->p.n_batch)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "batch of %d tokens exceeds n_batch %d",
                         T, x->p.n_batch);
    memcpy(x->seq_next, x->seq_len, (size_t)x->p.n_seq_max * sizeof(int32_t));
    for (int32_t i = 0; i < T; i++) {
        int32_t s = b->seq_id[i], tok = b->token[i];
        if (tok < 0 || tok >= x->w->V)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "batch token %d: id %d not in "
                             "[0, %d)", i, tok, x->w->V);
        if (s < 0 || s >= x->p.n_seq_max)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "batch token %d: sequence id %d not "
                             "in [0, n_seq_max %d)", i, s, x->p.n_seq_max);
        if (b->pos[i] != x->seq_next[s])
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "batch token %d: sequence %d "
                             "continues at position %d, got %d", i, s, x->seq_next[s], b->pos[i]);
        if (b->pos[i] >= x->p.n_ctx)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "context overflow: sequence %d is "
                             "full (position %d, n_ctx %d)", s, b->pos[i], x->p.n_ctx);
        x->seq_next[s]++;
    }
    for (int32_t i = 0; i < T; i++) {
        int want = b->logits ? b->logits[i] != 0 : b->pos[i] == x->seq_next[b->seq_id[i]] - 1;
        x->logit_row[i] = -1;
        if (!want) continue;
        if (n == x->p.n_outputs)
            return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "batch asks for more than n_outputs "
                             "%d logits rows", x->p.n_outputs);
        x->logit_row[i] = n;
        x->out_idx[n++] = i;
    }
    *n_out = n;
    return MOE8_OK;
}

/* Blocks for every sequence of the batch up to its new length, all or none. */
static moe8_status reserve_batch(moe8_context *x, const moe8_batch *b, moe8_error *err) {
    int64_t need = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int32_t s = b->seq_id[i];
        if (b->pos[i] == x->seq_len[s]) need += moe8_kv_blocks_needed(&x->kv, s, x->seq_next[s]);
    }
    if (need > kv_available(&x->kv))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "kv cache full: the batch needs %lld "
                         "more blocks of %d positions, %d are free", (long long)need,
                         MOE8_KV_BLOCK_TOKENS, kv_available(&x->kv));
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int32_t s = b->seq_id[i];
        if (b->pos[i] == x->seq_len[s]) MOE8_ASSERT(moe8_kv_reserve(&x->kv, s, x->seq_next[s]) == 0);
    }
    return MOE8_OK;
}

moe8_status moe8_decode(moe8_context *x, const moe8_batch *b, moe8_error *err) {
    const moe8_kv_view kv = {x->kv.data, x->kv.block_bytes, x->p.kv_type, x->kv.table,
                             x->kv.max_blocks,
                             x->kv.n_group > 1 ? kv_table(&x->kv, 1, 0) : NULL, x->kv_slot,
                             x->kv_group};
    const double t0 = moe8_phase_on() ? moe8_time_s() : 0.0;
    int n_out = 0;
    moe8_status st;
    x->n_last = 0;
    if (!b) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "batch: NULL");
    if ((st = check_batch(x, b, &n_out, err)) || (st = reserve_batch(x, b, err))) {
        x->state.n_req = 0;
        return st;
    }
    if ((st = state_start_batch(x, b, err))) { /* nothing ran: new blocks go back */
        x->state.n_req = 0;
        for (int32_t i = 0; i < b->n_tokens; i++)
            moe8_kv_truncate(&x->kv, b->seq_id[i], x->seq_len[b->seq_id[i]]);
        return st;
    }
    state_snap_slots(x);
    st = moe8_forward(x->w, &x->s, &kv, x->p.n_ctx, x->rope, b->token, b->seq_id, b->pos,
                      b->n_tokens, x->out_idx, n_out, x->p.n_threads, err);
    if (st) { /* the sequences keep their old positions; new blocks go back */
        if (x->state.n_layer) state_snap_keep(x, 0);
        for (int32_t i = 0; i < b->n_tokens; i++) {
            const int32_t s = b->seq_id[i];
            if (x->state.n_layer && x->seq_len[s]) { /* a state half advanced: start over */
                moe8_kv_truncate(&x->kv, s, 0);
                state_release(x, s);
                x->seq_len[s] = 0;
            }
            moe8_kv_truncate(&x->kv, s, x->seq_len[s]);
        }
        return st;
    }
    for (int32_t i = 0; i < b->n_tokens; i++)
        moe8_kv_commit(&x->kv, b->seq_id[i], b->pos[i], &b->token[i], 1);
    if (x->state.n_layer) state_snap_keep(x, 1);
    for (int32_t i = 0; x->kv.n_group > 1 && i < b->n_tokens; i++) /* registered: then given back */
        if (b->pos[i] == x->seq_next[b->seq_id[i]] - 1)
            moe8_kv_slide(&x->kv, b->seq_id[i], x->seq_next[b->seq_id[i]]);
    memcpy(x->seq_len, x->seq_next, (size_t)x->p.n_seq_max * sizeof(int32_t));
    x->n_last = b->n_tokens;
    if (t0 > 0) moe8_phase_forward(moe8_time_s() - t0);
    return MOE8_OK;
}

const float *moe8_context_logits(const moe8_context *x, int32_t i) {
    if (i < 0 || i >= x->n_last || x->logit_row[i] < 0) return NULL;
    return x->s.logits + (size_t)x->logit_row[i] * (size_t)x->w->V;
}
