/*
 * forward.c — the forward pass of every family (SEMANTICS §7; docs/MODELS.md)
 * and the prepared weights it reads. What differs between families comes
 * from the model's descriptor through the loaded layers: q/k norms present
 * or not, q/k/v biases, a shared expert.
 *
 * moe8_weights_build turns a loaded model (model.h: tensors checked, still
 * mapped) into what the loop runs: W8A8 static linears packed (linear.c),
 * MoE layers built with moe8_moe_layer_create (experts repacked), norm
 * vectors converted to fp32 (a few KB); the mapped pages of every packed int8
 * weight are released (SEMANTICS §6b).
 * The packed int8 weights come from the model's packed cache when it has a
 * valid one (cache.h: section i = layer i, then lm_head), and go to it when
 * it is being written.
 * Embeddings, the router, FLOAT linears and a tied lm_head stay in the map in
 * their stored dtype; an untied FLOAT lm_head is copied into owned memory (it
 * streams faster there) and its pages released; a W8A8_DYNAMIC lm_head is packed like the W8A8 linears
 * and runs per-token dynamic quantization of the final-normed rows. In float-experts mode W8A8 experts are dequantized to fp32,
 * W = S·(Wq + O), and run as FLOAT experts (a comparison aid; 4x the memory).
 *
 * moe8_forward, for T tokens each tagged (seq, pos):
 *   x = embed[token]
 *   per layer: h = rmsnorm(x); q,k,v = h@W^T (+ bias); per-head rmsnorm of
 *              q,k (qwen3_moe); NEOX RoPE; k,v -> cache at (seq, pos); causal
 *              GQA attention;
 *              x += o_proj(att); h = rmsnorm(x); x += MoE(h) (+ the gated
 *              shared expert, qwen2_moe) or SwiGLU MLP(h)
 *   logits[i] = rmsnorm(x[out_idx[i]]) @ lm_head^T
 * Every buffer comes from the context's scratch: nothing is allocated here.
 *
 * Tensor / expert parallelism (SEMANTICS §8, model.h shard): each rank builds
 * only its share — q/k/v rows of its heads, o_proj columns (quant_bias on
 * rank 0 only), dense gate/up rows and down columns of its F slice (the
 * shared expert's likewise of its S slice, under TP and EP), its MoE part
 * (an I slice, or a block of whole experts) — and the forward
 * all-reduces the three partial sums (o_proj, dense down, MoE output) before
 * adding them to x. Embeddings, norms and the router are replicated; lm_head
 * is split by vocabulary rows and the logits all-gathered, so every rank ends
 * with the same logits. With one rank nothing communicates.
 *
 * Does not: validate the batch (context.c does), sample, or agree on errors
 * (context.c and the model load do).
 */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/core.h"
#include "dist/dist.h"
#include "model/cache.h"
#include "model/forward.h"
#include "moe/moe.h"

/* ---- building ------------------------------------------------------------ */

static moe8_status norm_copy(float **dst, const moe8_tensor *t, int n, moe8_error *err) {
    if (!t || t->n_elements != n)
        return moe8_fail(err, MOE8_ERR_FORMAT, -1, "tensor '%s': expected %d elements",
                         t ? t->name : "(norm)", n);
    *dst = malloc((size_t)n * sizeof(float));
    if (!*dst) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate norm weight");
    return moe8_convert_to_f32(*dst, t->data, t->dtype, (size_t)n, err);
}

static moe8_status build_moe(moe8_pcache *pc, moe8_fwd_layer *fl, const moe8_model *m, int li,
                             int float_experts, int n_threads, moe8_error *err) {
    const moe8_dist_shard *sh = &m->shard;
    moe8_moe_part part = {0, 0, 0, 0, n_threads, float_experts};
    if (sh->size > 1) {
        part.i_begin = sh->i_begin, part.i_end = sh->i_end;
        part.expert_first = sh->expert_first, part.expert_last = sh->expert_last;
    }
    return moe8_moe_layer_from_model_cached(m, li, &part, pc, &fl->moe, err);
}

/* This rank's block of a linear: rows [r0, r1) (column-parallel) or columns
 * [c0, c1) (row-parallel: the bias on rank 0 only). Whole with one rank. */
static moe8_status proj_rows(moe8_pcache *pc, moe8_proj *p, const moe8_model *m,
                             const moe8_linear *src, int r0, int r1, moe8_error *err) {
    moe8_status st = moe8_proj_init_cached(p, src, r0, r1, 0, (int)src->n_in, 1, pc, err);
    if (!st && p->type != MOE8_QUANT_FLOAT) moe8_st_release(m->st, src->weight);
    return st;
}

static moe8_status proj_cols(moe8_pcache *pc, moe8_proj *p, const moe8_model *m,
                             const moe8_linear *src, int c0, int c1, moe8_error *err) {
    moe8_status st = moe8_proj_init_cached(p, src, 0, (int)src->n_out, c0, c1,
                                           m->shard.rank == 0, pc, err);
    if (!st && p->type != MOE8_QUANT_FLOAT) moe8_st_release(m->st, src->weight);
    return st;
}

static moe8_status build_attn(moe8_pcache *pc, moe8_fwd_layer *fl, const moe8_model *m,
                              const moe8_layer *L, int D, moe8_error *err) {
    const moe8_dist_shard *sh = &m->shard;
    moe8_status st;
    if ((st = proj_rows(pc, &fl->q, m, &L->q, sh->head_begin * D, sh->head_end * D, err)) ||
        (st = proj_rows(pc, &fl->k, m, &L->k, sh->kv_begin * D, sh->kv_end * D, err)) ||
        (st = proj_rows(pc, &fl->v, m, &L->v, sh->kv_begin * D, sh->kv_end * D, err)))
        return st;
    return proj_cols(pc, &fl->o, m, &L->o, sh->head_begin * D, sh->head_end * D, err);
}

/* kv_b_proj of the local heads [h0, h1), absorbed (SEMANTICS §7d): uk[h][c][d]
 * = W[h(DN+DV) + d][c] (k_nope rows, transposed) and uv[h][v][c] =
 * W[h(DN+DV) + DN + v][c]. A FLOAT weight keeps its dtype; a W8A8 one is
 * dequantized, W = deq_scale[j] / input_scale * Wq[j][c], its quant_bias
 * beyond the input offset's term, deq_scale[j] * (quant_bias[j] +
 * input_offset * sum_c Wq[j][c]), a bias: on k_nope it adds the same to
 * every score of a query and cancels in the softmax; on v it is added to
 * the output (uv_bias). */
static moe8_status build_absorbed(const moe8_weights *w, moe8_fwd_layer *fl, const moe8_model *m,
                                  const moe8_linear *kvb, int h0, int h1, moe8_error *err) {
    const int Lr = w->L, DN = w->DN, DV = w->DV, NHl = h1 - h0;
    const moe8_tensor *t = kvb->weight;
    const int quant = kvb->quant != MOE8_QUANT_FLOAT;
    const moe8_dtype dt = quant ? MOE8_DT_F32 : t->dtype;
    const size_t es = moe8_dtype_size(dt), ld = (size_t)Lr;
    unsigned char *uk = moe8_alloc_aligned((size_t)NHl * Lr * DN * es + 64);
    unsigned char *uv = moe8_alloc_aligned((size_t)NHl * DV * Lr * es + 64);
    int any_bias = 0;
    fl->uk = uk;
    fl->uv = uv;
    fl->uk_dt = dt;
    if (!uk || !uv || (quant && !(fl->uv_bias = calloc((size_t)NHl * DV, sizeof(float)))))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': cannot allocate its absorbed "
                         "form", t->name);
    for (int h = 0; h < NHl; h++)
        for (int i = 0; i < DN + DV; i++) {
            const size_t j = (size_t)(h0 + h) * (DN + DV) + (size_t)i;
            unsigned char *dst = i < DN ? uk + ((size_t)h * Lr * DN + (size_t)i) * es
                                        : uv + ((size_t)h * DV + (size_t)(i - DN)) * ld * es;
            const size_t step = i < DN ? (size_t)DN * es : es; /* between latent columns */
            if (!quant) {
                const unsigned char *src = (const unsigned char *)t->data + j * ld * es;
                for (int c = 0; c < Lr; c++) memcpy(dst + (size_t)c * step, src + (size_t)c * es, es);
                continue;
            }
            const int8_t *row = (const int8_t *)t->data + j * ld;
            const float deq = moe8_deq_scale_at(kvb->deq_scale, (int64_t)j), s = deq / kvb->in_scale;
            int64_t sum = 0;
            int32_t qb;
            for (int c = 0; c < Lr; c++) {
                const float v = s * (float)row[c];
                memcpy(dst + (size_t)c * step, &v, 4);
                sum += row[c];
            }
            memcpy(&qb, (const char *)kvb->quant_bias->data + j * 4, 4);
            const double b = (double)deq * ((double)qb + (double)kvb->in_offset * (double)sum);
            if (i >= DN) fl->uv_bias[(size_t)h * DV + (size_t)(i - DN)] = (float)b;
            any_bias |= i >= DN && b != 0.0;
        }
    if (!any_bias) {
        free(fl->uv_bias);
        fl->uv_bias = NULL;
    }
    moe8_st_release(m->st, t);
    return MOE8_OK;
}

/* Multi-head latent attention of this rank's heads: q_proj or q_a_proj
 * (replicated) + q_b_proj rows of its heads; kv_a_proj_with_mqa and the
 * norms replicated; kv_b_proj absorbed for its heads; o_proj columns. */
static moe8_status build_mla(moe8_weights *w, moe8_fwd_layer *fl, const moe8_model *m,
                             const moe8_layer *L, moe8_error *err) {
    const int h0 = m->shard.head_begin, h1 = m->shard.head_end, D = w->D;
    moe8_status st;
    if (w->QL) {
        if ((st = proj_rows(w->cache, &fl->q_a, m, &L->q_a, 0, w->QL, err)) ||
            (st = norm_copy(&fl->q_a_norm, L->q_a_norm, w->QL, err)) ||
            (st = proj_rows(w->cache, &fl->q_b, m, &L->q_b, h0 * D, h1 * D, err)))
            return st;
    } else if ((st = proj_rows(w->cache, &fl->q, m, &L->q, h0 * D, h1 * D, err))) {
        return st;
    }
    if ((st = proj_rows(w->cache, &fl->kv_a, m, &L->kv_a, 0, w->C, err)) ||
        (st = norm_copy(&fl->kv_a_norm, L->kv_a_norm, w->L, err)) ||
        (st = build_absorbed(w, fl, m, &L->kv_b, h0, h1, err)))
        return st;
    return proj_cols(w->cache, &fl->o, m, &L->o, h0 * w->DV, h1 * w->DV, err);
}

/* The shared expert: gate/up rows and down columns of this rank's S slice,
 * like a dense MLP; its gate [1][H] whole. */
static moe8_status build_shared(moe8_weights *w, moe8_fwd_layer *fl, const moe8_model *m,
                                const moe8_layer *L, moe8_error *err) {
    const moe8_dist_shard *sh = &m->shard;
    const int s0 = sh->size > 1 ? sh->s_begin : 0;
    const int s1 = sh->size > 1 ? sh->s_end : (int)L->sh_gate.n_out;
    moe8_status st;
    if ((st = proj_rows(w->cache, &fl->sh_gate, m, &L->sh_gate, s0, s1, err)) ||
        (st = proj_rows(w->cache, &fl->sh_up, m, &L->sh_up, s0, s1, err)) ||
        (st = proj_cols(w->cache, &fl->sh_down, m, &L->sh_down, s0, s1, err)))
        return st;
    if (L->sh_score) { /* qwen2_moe's sigmoid gate; deepseek's shared experts have none */
        const moe8_linear score = {.quant = MOE8_QUANT_FLOAT, .n_out = 1,
                                   .n_in = L->sh_score->shape[1], .weight = L->sh_score};
        if ((st = moe8_proj_init(&fl->sh_score, &score, 0, err))) return st;
    }
    fl->has_shared = 1;
    w->has_shared = 1;
    w->has_dynamic |= fl->sh_gate.type == MOE8_QUANT_W8A8_DYNAMIC ||
                      fl->sh_down.type == MOE8_QUANT_W8A8_DYNAMIC;
    if (fl->sh_gate.n > w->F_max) w->F_max = fl->sh_gate.n;
    return MOE8_OK;
}

static moe8_status build_layer(moe8_weights *w, int li, int float_experts, int n_threads,
                               moe8_error *err) {
    const moe8_model *m = w->model;
    const moe8_layer *L = &m->layers[li];
    const moe8_dist_shard *sh = &m->shard;
    moe8_fwd_layer *fl = &w->layers[li];
    moe8_status st;
    int f0, f1;
    if ((st = norm_copy(&fl->attn_norm, L->attn_norm, w->H, err)) ||
        (st = norm_copy(&fl->ffn_norm, L->ffn_norm, w->H, err)) ||
        (L->q_norm && (st = norm_copy(&fl->q_norm, L->q_norm, w->D, err))) ||
        (L->k_norm && (st = norm_copy(&fl->k_norm, L->k_norm, w->D, err))) ||
        (st = w->mla ? build_mla(w, fl, m, L, err) : build_attn(w->cache, fl, m, L, w->D, err)))
        return st;
    fl->is_moe = L->info.is_moe;
    if (fl->is_moe && L->info.has_shared && (st = build_shared(w, fl, m, L, err))) return st;
    if (fl->is_moe) return build_moe(w->cache, fl, m, li, float_experts, n_threads, err);
    f0 = sh->size > 1 ? sh->f_begin : 0;
    f1 = sh->size > 1 ? sh->f_end : (int)L->mlp_gate.n_out;
    if ((st = proj_rows(w->cache, &fl->gate, m, &L->mlp_gate, f0, f1, err)) ||
        (st = proj_rows(w->cache, &fl->up, m, &L->mlp_up, f0, f1, err)) ||
        (st = proj_cols(w->cache, &fl->down, m, &L->mlp_down, f0, f1, err)))
        return st;
    if (fl->gate.n > w->F_max) w->F_max = fl->gate.n;
    return MOE8_OK;
}

static void assign_workspaces(moe8_weights *w) {
    for (int i = 0; i < w->n_layer; i++) {
        moe8_fwd_layer *fl = &w->layers[i];
        fl->ws_layer = i;
        for (int j = 0; fl->is_moe && j < i; j++)
            if (w->layers[j].is_moe && w->layers[j].ws_layer == j &&
                moe8_moe_layer_same_shape(fl->moe, w->layers[j].moe)) {
                fl->ws_layer = j;
                break;
            }
    }
}

static size_t layer_owned(const moe8_fwd_layer *fl, const moe8_weights *w) {
    size_t n = moe8_proj_owned_bytes(&fl->q) + moe8_proj_owned_bytes(&fl->k) +
               moe8_proj_owned_bytes(&fl->v) + moe8_proj_owned_bytes(&fl->o) +
               moe8_proj_owned_bytes(&fl->gate) + moe8_proj_owned_bytes(&fl->up) +
               moe8_proj_owned_bytes(&fl->down) + moe8_proj_owned_bytes(&fl->sh_gate) +
               moe8_proj_owned_bytes(&fl->sh_up) + moe8_proj_owned_bytes(&fl->sh_down) +
               moe8_proj_owned_bytes(&fl->q_a) + moe8_proj_owned_bytes(&fl->q_b) +
               moe8_proj_owned_bytes(&fl->kv_a) +
               (size_t)(2 * w->H + 2 * w->D + w->QL + w->L) * sizeof(float);
    if (fl->uk)
        n += (size_t)w->n_head * (size_t)w->L * (size_t)(w->DN + w->DV) *
             moe8_dtype_size(fl->uk_dt);
    if (fl->moe) {
        moe8_moe_layer_info info;
        moe8_moe_layer_get_info(fl->moe, &info);
        n += info.packed_bytes;
    }
    return n;
}

/* lm_head, FLOAT in place or W8A8_DYNAMIC packed (its mapped pages then
 * released). Under TP split by vocabulary: rank r computes rows [r*C, (r+1)*C)
 * of the logits and an all-gather assembles them (one token per step reads
 * 1/N of lm_head per rank). */
static moe8_status build_lm_head(moe8_weights *w, const moe8_model *m, moe8_error *err) {
    const moe8_linear *src = &m->lm_head;
    moe8_status st = MOE8_OK;
    if (w->n_ranks > 1) {
        w->v_chunk = (w->V + w->n_ranks - 1) / w->n_ranks;
        w->v_begin = m->shard.rank * w->v_chunk;
        w->v_count = w->V - w->v_begin < w->v_chunk ? w->V - w->v_begin : w->v_chunk;
        if (w->v_count < 0) w->v_count = 0;
        if (w->v_count > 0)
            st = moe8_proj_init_cached(&w->lm_head, src, w->v_begin, w->v_begin + w->v_count,
                                       0, w->H, 0, w->cache, err);
    } else {
        st = moe8_proj_init_cached(&w->lm_head, src, 0, (int)src->n_out, 0, (int)src->n_in, 0,
                                   w->cache, err);
    }
    /* A FLOAT lm_head (untied) is read in place from the checkpoint's map: it
     * streams as fast from there as from a copy (docs/BENCHMARKS.md, "Packed
     * cache"), and copying it was a third of a warm load. Under --no-mmap it is
     * copied into anonymous memory like everything else (moe8_proj_own_float). */
    if (!st && m->params.no_mmap && w->lm_head.type == MOE8_QUANT_FLOAT &&
        !m->cfg.tie_word_embeddings && w->lm_head.n)
        st = moe8_proj_own_float(&w->lm_head, m->st, src->weight, err);
    if (!st && w->lm_head.type != MOE8_QUANT_FLOAT && w->lm_head.n)
        moe8_st_release(m->st, src->weight);
    if (!st && w->lm_head.packed) {
        w->owned_bytes += moe8_proj_owned_bytes(&w->lm_head);
    }
    if (st) moe8_error_prefix(err, "lm_head");
    return st;
}

static void layer_free(moe8_fwd_layer *fl);

/* A streamed section's buffers, just freed, back to the system. glibc keeps
 * freed memory: once a buffer above its mmap threshold is freed, the
 * threshold rises to that size, later buffers come from the heap, and what is
 * freed there stays resident up to twice that. A build under a memory limit
 * (a cgroup at 60% of the cache size in test_cache) was OOM-killed or not
 * with the heap's layout (there, the length of the checkout's path). */
static void release_freed(void) {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

/* One build of the weights with the packed cache pc (NULL, reading or
 * writing; the caller's, and the weights' own once they are returned). Writing,
 * each section goes to the file as soon as it is built and is freed at once,
 * no weights are returned, and pc maps the new file when finish succeeds. */
static moe8_status build_all(const moe8_model *m, int float_experts, int n_threads,
                             moe8_pcache *pc, moe8_weights **out, moe8_error *err) {
    const moe8_config *c = &m->cfg;
    moe8_weights *w = calloc(1, sizeof *w);
    const int streaming = pc && !moe8_pcache_reading(pc);
    moe8_status st;
    *out = NULL;
    if (!w) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate model weights");
    w->cache = pc;
    w->model = m;
    w->H = (int)c->hidden_size;
    w->n_layer = (int)c->num_hidden_layers;
    w->comm = m->shard.size > 1 ? m->params.dist->comm : NULL;
    w->n_head = m->shard.head_end - m->shard.head_begin;
    w->n_kv = m->shard.kv_end - m->shard.kv_begin;
    w->D = (int)c->head_dim;
    w->V = (int)c->vocab_size;
    w->E = (int)c->num_experts;
    w->K = (int)c->num_experts_per_tok;
    w->eps = (float)c->rms_norm_eps;
    w->mla = c->kv_lora_rank > 0;
    w->L = (int)c->kv_lora_rank;
    w->R = (int)c->qk_rope_head_dim;
    w->rope_interleave = c->rope_interleave;
    w->DN = (int)c->qk_nope_head_dim;
    w->DV = (int)c->v_head_dim;
    w->QL = (int)c->q_lora_rank;
    w->kv_planes = w->mla ? 1 : 2;
    w->C = w->mla ? w->L + w->R : w->D;
    if (w->mla) w->n_kv = 1;       /* the latent row: one kv head, replicated under TP */
    w->rope_dim = moe8_rope_dim(c);
    w->attn_scale = moe8_attn_scale(c);
    w->float_experts = float_experts;
    w->embed = m->embed->data;
    w->embed_dt = m->embed->dtype;
    w->layers = calloc((size_t)w->n_layer, sizeof *w->layers);
    st = w->layers ? MOE8_OK : moe8_fail(err, MOE8_ERR_NOMEM, -1, "cannot allocate layers");
    if (!st && (w->rope_dim % 2 || w->rope_dim <= 0))
        st = moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1, "rotary width %d must be even",
                       w->rope_dim);
    w->n_ranks = m->shard.size > 1 ? m->shard.size : 1;
    if (!st) st = norm_copy(&w->final_norm, m->final_norm, w->H, err);
    for (int i = 0; !st && i < w->n_layer; i++) {
        moe8_pcache_section(w->cache, i);
        st = build_layer(w, i, float_experts, n_threads, err);
        if (st) {
            moe8_error_prefix(err, "layer %d", i);
        } else if (streaming) {
            moe8_pcache_section_done(w->cache);
            layer_free(&w->layers[i]);
            release_freed();
        } else {
            w->owned_bytes += layer_owned(&w->layers[i], w);
        }
    }
    /* last: its copy (or packing) then does not add to the transient of a
     * layer's mapped pages being packed (the peak resident memory of loading) */
    moe8_pcache_section(w->cache, w->n_layer);
    if (!st) st = build_lm_head(w, m, err);
    if (!st && streaming) {
        moe8_pcache_section_done(w->cache);
        moe8_proj_free(&w->lm_head);
        memset(&w->lm_head, 0, sizeof w->lm_head);
        release_freed();
    }
    if (!st) st = moe8_pcache_finish(w->cache, err);
    if (st || streaming) {
        w->cache = NULL; /* still the caller's */
        moe8_weights_free(w);
        return st;
    }
    assign_workspaces(w);
    *out = w;
    return MOE8_OK;
}

/* With no valid cache the weights are packed once, section by section into a
 * new cache file (never more than one section in memory), and then mapped from
 * it like any later load's; when the file cannot be written they are packed
 * again, in memory (the reason was logged). */
moe8_status moe8_weights_build(const moe8_model *m, int float_experts, int n_threads,
                               moe8_weights **out, moe8_error *err) {
    moe8_pcache *pc = NULL;
    moe8_weights *none = NULL;
    moe8_status st = moe8_pcache_open(m, float_experts, &pc, err);
    *out = NULL;
    if (st) return st;
    if (pc && !moe8_pcache_reading(pc)) st = build_all(m, float_experts, n_threads, pc, &none, err);
    if (!st && pc && !moe8_pcache_reading(pc)) { /* not written: pack in memory */
        moe8_pcache_free(pc);
        pc = NULL;
    }
    if (!st) st = build_all(m, float_experts, n_threads, pc, out, err);
    if (st) moe8_pcache_free(pc);
    return st;
}

static void layer_free(moe8_fwd_layer *fl) {
    free(fl->attn_norm);
    free(fl->ffn_norm);
    free(fl->q_norm);
    free(fl->k_norm);
    moe8_proj_free(&fl->q);
    moe8_proj_free(&fl->k);
    moe8_proj_free(&fl->v);
    moe8_proj_free(&fl->o);
    moe8_proj_free(&fl->gate);
    moe8_proj_free(&fl->up);
    moe8_proj_free(&fl->down);
    moe8_proj_free(&fl->sh_gate);
    moe8_proj_free(&fl->sh_up);
    moe8_proj_free(&fl->sh_down);
    moe8_proj_free(&fl->sh_score);
    moe8_proj_free(&fl->q_a);
    moe8_proj_free(&fl->q_b);
    moe8_proj_free(&fl->kv_a);
    free(fl->q_a_norm);
    free(fl->kv_a_norm);
    moe8_free_aligned(fl->uk);
    moe8_free_aligned(fl->uv);
    free(fl->uv_bias);
    moe8_moe_layer_free(fl->moe);
    memset(fl, 0, sizeof *fl);
}

void moe8_weights_free(moe8_weights *w) {
    if (!w) return;
    for (int i = 0; w->layers && i < w->n_layer; i++) layer_free(&w->layers[i]);
    free(w->layers);
    moe8_proj_free(&w->lm_head);
    free(w->final_norm);
    moe8_pcache_free(w->cache); /* after every weight that points into it */
    free(w);
}

/* ---- running ------------------------------------------------------------- */

typedef struct {
    const moe8_weights *w;
    moe8_fwd_scratch *s;
    const moe8_kernels *kt;
    int T, nt;
    double *clock;   /* phase accounting (moe8_bench_forward_timing): start of the
                      * current phase; NULL when off */
} fwd_run;

/* The phase that just ended: its time goes to `ph` (nothing when timing is
 * off); ph < 0 only restarts the clock (the MoE layer times itself). */
static void mark(const fwd_run *r, int ph) {
    if (!r->clock) return;
    const double now = moe8_time_s();
    if (ph >= 0) moe8_phase_add((moe8_phase)ph, now - *r->clock);
    *r->clock = now;
}

/* One row t of a row loop, with what the loop passes in ctx. */
typedef void (*row_fn)(const fwd_run *r, const void *ctx, int t);

/* The row loops between the GEMMs run on all threads (`omp parallel for`
 * over rows, split statically): a row's result is computed the same way
 * whichever thread takes it, so nothing depends on the thread count. One row
 * (decode) or one thread runs inline: libgomp allocates a team even for a
 * parallel region whose `if` is false, which would cost several allocations
 * per layer and step. */
static void for_rows(const fwd_run *r, int n, row_fn fn, const void *ctx) {
    if (r->nt > 1 && n > 1) {
#pragma omp parallel for schedule(static) num_threads(r->nt)
        for (int t = 0; t < n; t++) fn(r, ctx, t);
    } else {
        for (int t = 0; t < n; t++) fn(r, ctx, t);
    }
}

typedef struct {
    const moe8_proj *p;
    const float *x;
} quant_ctx;

static void quant_row(const fwd_run *r, const void *ctx, int t) {
    const quant_ctx *c = ctx;
    moe8_fwd_scratch *s = r->s;
    moe8_proj_quant(s->xq + (size_t)t * s->ldq, s->ldq, c->x + (size_t)t * c->p->k, c->p->k, 1,
                    c->p->k, c->p->in_scale, c->p->in_offset);
}

/* Activation codes of a W8A8 static linear for T rows, on all threads. */
static void quant_static(const fwd_run *r, const moe8_proj *p, const float *x, int T) {
    const quant_ctx c = {p, x};
    for_rows(r, T, quant_row, &c);
}

typedef struct {
    const float *x;
    int k;
} dyn_ctx;

static void quant_dyn_row(const fwd_run *r, const void *ctx, int t) {
    const dyn_ctx *c = ctx;
    moe8_fwd_scratch *s = r->s;
    r->kt->quant_rows(s->xq + (size_t)t * s->ldq, s->ldq, s->dyn_sx + t, s->dyn_xsum + t,
                      c->x + (size_t)t * c->k, c->k, 1, c->k);
}

/* Per-token codes of a W8A8_DYNAMIC linear (SEMANTICS §4) for T rows, on all threads. */
static void quant_dynamic(const fwd_run *r, const float *x, int k, int T) {
    const dyn_ctx c = {x, k};
    for_rows(r, T, quant_dyn_row, &c);
}

/* y[T][p->n] = p(x[T][p->k]); int8 codes are reused when `prev` was applied
 * to the same x and quantized it the same way (W8A8: the same input
 * scale/offset; W8A8_DYNAMIC: per token, so any dynamic prev of that x). */
static void lin(const fwd_run *r, const moe8_proj *p, const moe8_proj *prev, float *y,
                const float *x, int T) {
    moe8_fwd_scratch *s = r->s;
    if (p->type == MOE8_QUANT_W8A8_DYNAMIC) {
        if (!(prev && prev->type == MOE8_QUANT_W8A8_DYNAMIC && prev->k == p->k))
            quant_dynamic(r, x, p->k, T);
        moe8_proj_apply(p, r->kt, y, p->n, x, p->k, s->xq, s->ldq, s->dyn_sx, s->dyn_xsum, T,
                        r->nt);
        return;
    }
    if (p->type == MOE8_QUANT_W8A8 && !(prev && moe8_proj_same_input(p, prev)))
        quant_static(r, p, x, T);
    moe8_proj_apply(p, r->kt, y, p->n, x, p->k, s->xq, s->ldq, s->ones, s->ones_i, T, r->nt);
}

/* y[i] = p[i](x) for n projections of the same input (q/k/v; MLA's q_proj or
 * q_a_proj with kv_a_proj_with_mqa): one pass over all of them when they are
 * FLOAT or W8A8 with one input scale/offset, each on its own otherwise
 * (codes shared where lin can). */
static void lin_group(const fwd_run *r, const moe8_proj *const *p, float *const *y, int n,
                      const float *x, int T) {
    moe8_fwd_scratch *s = r->s;
    int one_pass = 1;
    int ldy[3];
    MOE8_ASSERT(n <= 3);
    for (int i = 0; i < n; i++) {
        ldy[i] = p[i]->n;
        if (i && (p[i]->type != p[0]->type ||
                  (p[0]->type != MOE8_QUANT_FLOAT && !moe8_proj_same_input(p[i - 1], p[i]))))
            one_pass = 0;
    }
    if (p[0]->type == MOE8_QUANT_W8A8_DYNAMIC) one_pass = 0;
    if (!one_pass) {
        for (int i = 0; i < n; i++) lin(r, p[i], i ? p[i - 1] : NULL, y[i], x, T);
        return;
    }
    if (p[0]->type == MOE8_QUANT_W8A8) quant_static(r, p[0], x, T);
    moe8_proj_apply_group(p, y, ldy, n, r->kt, x, p[0]->k, s->xq, s->ldq, s->ones, s->ones_i, T,
                          r->nt);
}

static void qkv_bias_row(const fwd_run *r, const void *layer, int t) {
    const moe8_fwd_layer *L = layer;
    moe8_fwd_scratch *s = r->s;
    moe8_proj_add_bias(&L->q, s->q + (size_t)t * L->q.n, L->q.n, 1);
    moe8_proj_add_bias(&L->k, s->k + (size_t)t * L->k.n, L->k.n, 1);
    moe8_proj_add_bias(&L->v, s->v + (size_t)t * L->v.n, L->v.n, 1);
}

/* q/k/v biases (FLOAT q/k/v of qwen2_moe), added after the products. */
static void qkv_bias(const fwd_run *r, const moe8_fwd_layer *L) {
    if (!L->q.fbias && !L->k.fbias && !L->v.fbias) return;
    for_rows(r, r->T, qkv_bias_row, L);
}

static void observe(const fwd_run *r, const moe8_fwd_layer *L, int site, const float *x, int n) {
    if (r->s->observe) r->s->observe(r->s->observe_user, (int)(L - r->w->layers), site, x, r->T, n);
}

static void add_norm_row(const fwd_run *r, const void *norm, int t) {
    const int H = r->w->H;
    float *xr = r->s->x + (size_t)t * H;
    const float *yr = r->s->tmp + (size_t)t * H;
    for (int j = 0; j < H; j++) xr[j] += yr[j];
    if (norm) moe8_rmsnorm_rows(r->s->h + (size_t)t * H, H, xr, H, 1, H, norm, r->w->eps);
}

/* The residual add x += tmp, then (norm != NULL) h = rmsnorm(x) * norm: one
 * pass over each row, on all threads. */
static void add_norm(const fwd_run *r, const float *norm) {
    for_rows(r, r->T, add_norm_row, norm);
}

/* Sum a partial [T][H] result over the ranks (nothing with one rank). */
static moe8_status allreduce(const fwd_run *r, float *y, moe8_error *err) {
    if (!r->w->comm) return MOE8_OK;
    moe8_status st = moe8_comm_allreduce_sum_f32(r->w->comm, y, (size_t)r->T * (size_t)r->w->H, err);
    mark(r, MOE8_PHASE_COMM);
    return st;
}

typedef struct {
    const moe8_fwd_layer *L;
    const moe8_attn_cache *cache;
    int64_t n_ctx;
    const float *rope;
    const int32_t *seq, *pos;
} qk_ctx;

static void qk_row(const fwd_run *r, const void *ctx, int t) {
    const qk_ctx *c = ctx;
    const moe8_weights *w = r->w;
    moe8_fwd_scratch *s = r->s;
    const int NH = w->n_head, NKV = w->n_kv, D = w->D;
    const float *cs = c->rope + (size_t)c->pos[t] * (size_t)w->rope_dim;
    float *q = s->q + (size_t)t * NH * D, *k = s->k + (size_t)t * NKV * D;
    unsigned char *kc = c->cache->k0;
    MOE8_ASSERT(c->pos[t] < c->n_ctx); /* its rope row and its block exist */
    if (c->L->q_norm) moe8_rmsnorm_heads(q, 1, NH, D, c->L->q_norm, w->eps);
    if (c->L->k_norm) moe8_rmsnorm_heads(k, 1, NKV, D, c->L->k_norm, w->eps);
    moe8_rope_neox(q, NH, D, cs);
    moe8_rope_neox(k, NKV, D, cs);
    for (int h = 0; h < NKV; h++) {
        size_t off = moe8_kv_row(c->cache, c->seq[t], h, c->pos[t]);
        moe8_kv_store(kc + off, k + (size_t)h * D, D, c->cache->dt);
        moe8_kv_store(kc + off + c->cache->v_off, s->v + ((size_t)t * NKV + h) * D, D,
                      c->cache->dt);
    }
}

/* Per token: RMSNorm of each q and k head, NEOX RoPE, K/V into the cache. */
static void qk_rope_store(const fwd_run *r, const moe8_fwd_layer *L, const moe8_attn_cache *cache,
                          int64_t n_ctx, const float *rope, const int32_t *seq,
                          const int32_t *pos) {
    const qk_ctx c = {L, cache, n_ctx, rope, seq, pos};
    for_rows(r, r->T, qk_row, &c);
}

/* x += o_proj(attention(rmsnorm(x))); on entry h = rmsnorm(x) * attn_norm, on
 * exit h = rmsnorm(x) * ffn_norm. */
static moe8_status attn_block(const fwd_run *r, const moe8_fwd_layer *L,
                              const moe8_attn_cache *cache, int64_t n_ctx, const float *rope,
                              const int32_t *seq, const int32_t *pos, moe8_error *err) {
    moe8_fwd_scratch *s = r->s;
    moe8_status st;
    const int T = r->T;
    observe(r, L, 0, s->h, r->w->H);
    {
        const moe8_proj *p[3] = {&L->q, &L->k, &L->v};
        float *const y[3] = {s->q, s->k, s->v};
        lin_group(r, p, y, 3, s->h, T);
    }
    qkv_bias(r, L);
    mark(r, MOE8_PHASE_ATTN_PROJ);
    qk_rope_store(r, L, cache, n_ctx, rope, seq, pos);
    mark(r, MOE8_PHASE_ELEMENTWISE);
    moe8_attention(r->kt, s->att, s->q, cache, seq, pos, T, s->attn_tiles, s->attn_work,
                   s->attn_work_floats, r->nt);
    mark(r, MOE8_PHASE_ATTN_CORE);
    observe(r, L, 1, s->att, r->w->n_head * r->w->D);
    lin(r, &L->o, NULL, s->tmp, s->att, T);
    mark(r, MOE8_PHASE_ATTN_PROJ);
    if ((st = allreduce(r, s->tmp, err))) return st;
    add_norm(r, L->ffn_norm);
    mark(r, MOE8_PHASE_ELEMENTWISE);
    return MOE8_OK;
}


/* ---- multi-head latent attention (SEMANTICS §7d) --------------------------- */

static void q_a_norm_row(const fwd_run *r, const void *layer, int t) {
    const moe8_fwd_layer *L = layer;
    float *x = r->s->qa + (size_t)t * r->w->QL;
    moe8_rmsnorm_rows(x, r->w->QL, x, r->w->QL, 1, r->w->QL, L->q_a_norm, MOE8_MLA_NORM_EPS);
}

/* Per token: the latent c normed (kv_a_layernorm), k_pe and each head's q_pe
 * rotated, the cache row [c, k_pe] stored, q_pe copied beside the head's
 * absorbed query in qc. */
static void mla_rope_row(const fwd_run *r, const void *ctx, int t) {
    const qk_ctx *c = ctx;
    const moe8_weights *w = r->w;
    moe8_fwd_scratch *s = r->s;
    const int NH = w->n_head, D = w->D, C = w->C, Lr = w->L, R = w->R;
    const float *cs = c->rope + (size_t)c->pos[t] * (size_t)R;
    float *kv = s->kva + (size_t)t * C, *q = s->q + (size_t)t * NH * D;
    float *qc = s->qc + (size_t)t * NH * C;
    MOE8_ASSERT(c->pos[t] < c->n_ctx);
    moe8_rmsnorm_rows(kv, Lr, kv, Lr, 1, Lr, c->L->kv_a_norm, MOE8_MLA_NORM_EPS);
    if (w->rope_interleave) {
        moe8_rope_pairs(kv + Lr, 1, R, R, cs);
        moe8_rope_pairs(q + w->DN, NH, D, R, cs);
    } else {
        moe8_rope_halves(kv + Lr, 1, R, R, cs);
        moe8_rope_halves(q + w->DN, NH, D, R, cs);
    }
    moe8_kv_store(c->cache->k0 + moe8_kv_row(c->cache, c->seq[t], 0, c->pos[t]), kv, C,
                  c->cache->dt);
    for (int h = 0; h < NH; h++)
        memcpy(qc + (size_t)h * C + Lr, q + (size_t)h * D + w->DN, (size_t)R * sizeof(float));
}

/* Head h: qc[t][h][0:L] = q_nope[t][h] @ uk[h]^T (the query in latent space). */
static void absorb_q_head(const fwd_run *r, const void *layer, int h) {
    const moe8_fwd_layer *L = layer;
    const moe8_weights *w = r->w;
    const size_t es = moe8_dtype_size(L->uk_dt);
    r->kt->gemm_f32_wf(r->s->qc + (size_t)h * w->C, w->n_head * w->C, r->s->q + (size_t)h * w->D,
                       w->n_head * w->D, (const char *)L->uk + (size_t)h * w->L * w->DN * es,
                       L->uk_dt, w->DN, r->T, 0, w->L, w->DN);
}

/* Head h: attv[t][h] = att[t][h][0:L] @ uv[h]^T (+ a folded v bias). */
static void absorb_v_head(const fwd_run *r, const void *layer, int h) {
    const moe8_fwd_layer *L = layer;
    const moe8_weights *w = r->w;
    const size_t es = moe8_dtype_size(L->uk_dt);
    const int ldv = w->n_head * w->DV;
    float *y = r->s->attv + (size_t)h * w->DV;
    r->kt->gemm_f32_wf(y, ldv, r->s->att + (size_t)h * w->C, w->n_head * w->C,
                       (const char *)L->uv + (size_t)h * w->DV * w->L * es, L->uk_dt, w->L, r->T,
                       0, w->DV, w->L);
    for (int t = 0; L->uv_bias && t < r->T; t++)
        for (int j = 0; j < w->DV; j++) y[(size_t)t * ldv + j] += L->uv_bias[(size_t)h * w->DV + j];
}

/* The MLA form of attn_block: the projections of the layer input (q_proj or
 * q_a_proj, kv_a_proj_with_mqa: one pass when they can share it), q_b_proj
 * of the normed q_a, RoPE and the cache row, the absorbed query, MQA flash
 * attention over the latent rows (one kv head of width L + R, value = its
 * first L), back to each head's v, o_proj. */
static moe8_status attn_block_mla(const fwd_run *r, const moe8_fwd_layer *L,
                                  const moe8_attn_cache *cache, int64_t n_ctx, const float *rope,
                                  const int32_t *seq, const int32_t *pos, moe8_error *err) {
    const moe8_weights *w = r->w;
    moe8_fwd_scratch *s = r->s;
    const int T = r->T;
    const moe8_proj *qa = w->QL ? &L->q_a : &L->q;
    float *qa_out = w->QL ? s->qa : s->q;
    moe8_status st;
    observe(r, L, 0, s->h, w->H);
    {
        const moe8_proj *p[2] = {qa, &L->kv_a};
        float *const y[2] = {qa_out, s->kva};
        lin_group(r, p, y, 2, s->h, T);
    }
    if (w->QL) {
        for_rows(r, T, q_a_norm_row, L);
        observe(r, L, 4, s->qa, w->QL);
        lin(r, &L->q_b, NULL, s->q, s->qa, T);
    }
    mark(r, MOE8_PHASE_ATTN_PROJ);
    {
        const qk_ctx c = {L, cache, n_ctx, rope, seq, pos};
        for_rows(r, T, mla_rope_row, &c);
    }
    mark(r, MOE8_PHASE_ELEMENTWISE);
    /* the absorbed products are timed with the attention core they replace */
    for_rows(r, w->n_head, absorb_q_head, L);
    moe8_attention(r->kt, s->att, s->qc, cache, seq, pos, T, s->attn_tiles, s->attn_work,
                   s->attn_work_floats, r->nt);
    for_rows(r, w->n_head, absorb_v_head, L);
    mark(r, MOE8_PHASE_ATTN_CORE);
    observe(r, L, 1, s->attv, w->n_head * w->DV);
    lin(r, &L->o, NULL, s->tmp, s->attv, T);
    mark(r, MOE8_PHASE_ATTN_PROJ);
    if ((st = allreduce(r, s->tmp, err))) return st;
    add_norm(r, L->ffn_norm);
    mark(r, MOE8_PHASE_ELEMENTWISE);
    return MOE8_OK;
}

typedef struct {
    float *g;
    const float *u;
    int F;
} swiglu_ctx;

static void swiglu_row(const fwd_run *r, const void *ctx, int t) {
    const swiglu_ctx *c = ctx;
    (void)r;
    for (size_t i = (size_t)t * c->F; i < (size_t)(t + 1) * c->F; i++)
        c->g[i] = c->g[i] / (1.0f + expf(-c->g[i])) * c->u[i];
}

static void dense_mlp(const fwd_run *r, const moe8_fwd_layer *L) {
    moe8_fwd_scratch *s = r->s;
    const int T = r->T, F = L->gate.n;
    float *g = s->mlp, *u = s->mlp + (size_t)T * F;
    const swiglu_ctx sc = {g, u, F};
    observe(r, L, 2, s->h, L->gate.k);
    lin(r, &L->gate, NULL, g, s->h, T);
    lin(r, &L->up, &L->gate, u, s->h, T);
    for_rows(r, T, swiglu_row, &sc);
    observe(r, L, 3, g, F);
    lin(r, &L->down, NULL, s->tmp, g, T);
}

/* tmp[t] += gate * shared_out[t]: gate = sigmoid(score[t]) with a shared
 * expert gate (qwen2_moe), 1 without (deepseek; 1 * y is y exactly). */
static void shared_add_row(const fwd_run *r, const void *layer, int t) {
    const moe8_fwd_layer *L = layer;
    moe8_fwd_scratch *s = r->s;
    const int H = r->w->H;
    const float gate = L->sh_score.n ? 1.0f / (1.0f + expf(-s->sh_score[t])) : 1.0f;
    float *o = s->tmp + (size_t)t * H;
    const float *y = s->sh_out + (size_t)t * H;
    for (int j = 0; j < H; j++) o[j] += gate * y[j];
}

/* The shared expert, added to the MoE output in s->tmp:
 * tmp[t] += sigmoid(h[t] . g) * down(silu(gate(h[t])) * up(h[t])) (qwen2_moe),
 * in fp32, the sigmoid as 1 / (1 + expf(-z)); without a gate (deepseek's
 * shared experts) tmp[t] += down(silu(gate(h[t])) * up(h[t])). Under TP each rank adds its S slice's
 * partial down product; the all-reduce after it sums the parts. */
static void shared_expert(const fwd_run *r, const moe8_fwd_layer *L) {
    moe8_fwd_scratch *s = r->s;
    const int T = r->T, S = L->sh_gate.n, H = r->w->H;
    float *g = s->mlp, *u = s->mlp + (size_t)T * S;
    lin(r, &L->sh_gate, NULL, g, s->h, T);
    lin(r, &L->sh_up, &L->sh_gate, u, s->h, T);
    const swiglu_ctx sc = {g, u, S};
    if (L->sh_score.n)
        moe8_proj_apply(&L->sh_score, r->kt, s->sh_score, 1, s->h, H, NULL, 0, NULL, NULL, T,
                        r->nt);
    for_rows(r, T, swiglu_row, &sc);
    lin(r, &L->sh_down, NULL, s->sh_out, g, T);
    for_rows(r, T, shared_add_row, L);
}

/* x += MLP(h) (MoE or dense), then h = rmsnorm(x) * next_norm (NULL after
 * the last layer: the final norm reads only the output rows). */
static moe8_status ffn_block(const fwd_run *r, const moe8_fwd_layer *L, const float *next_norm,
                             moe8_error *err) {
    moe8_fwd_scratch *s = r->s;
    moe8_status st;
    if (L->is_moe) {
        st = moe8_moe_layer_forward(L->moe, s->moe_ws[L->ws_layer], s->h, r->T, NULL, s->tmp, err);
        mark(r, -1); /* the layer timed its router and experts itself */
        if (st) return st;
        if (L->has_shared) {
            shared_expert(r, L);
            mark(r, MOE8_PHASE_EXPERTS);
        }
    } else {
        dense_mlp(r, L);
        mark(r, MOE8_PHASE_DENSE_MLP);
    }
    if ((st = allreduce(r, s->tmp, err))) return st;
    add_norm(r, next_norm);
    mark(r, MOE8_PHASE_ELEMENTWISE);
    return MOE8_OK;
}

static void lm_quant_row(const fwd_run *r, const void *ctx, int i) {
    moe8_fwd_scratch *s = r->s;
    const int H = r->w->H;
    (void)ctx;
    r->kt->quant_rows(s->xq + (size_t)i * s->ldq, s->ldq, s->lm_sx + i, s->lm_xsum + i,
                      s->h + (size_t)i * H, H, 1, H);
}

/* y[n_out][ldy] = this rank's lm_head rows of the final-normed s->h. A
 * W8A8_DYNAMIC lm_head first quantizes each row per token (SEMANTICS §4);
 * under TP every rank computes the same codes of the same whole row. */
static void lm_head_apply(const fwd_run *r, float *y, int ldy, int n_out, int n_threads) {
    const moe8_weights *w = r->w;
    moe8_fwd_scratch *s = r->s;
    if (w->lm_head.type != MOE8_QUANT_W8A8_DYNAMIC) {
        moe8_proj_apply(&w->lm_head, r->kt, y, ldy, s->h, w->H, NULL, 0, NULL, NULL, n_out,
                        n_threads);
        return;
    }
    for_rows(r, n_out, lm_quant_row, NULL);
    moe8_proj_apply(&w->lm_head, r->kt, y, ldy, s->h, w->H, s->xq, s->ldq, s->lm_sx, s->lm_xsum,
                    n_out, n_threads);
}

/* TP logits: this rank's vocab rows, all-gathered into [n_out][V] on every rank. */
static moe8_status lm_head_split(const fwd_run *r, int n_out, int n_threads, moe8_error *err) {
    const moe8_weights *w = r->w;
    moe8_fwd_scratch *s = r->s;
    const int C = w->v_chunk;
    moe8_status st;
    if (w->v_count > 0) lm_head_apply(r, s->lm_part, C, n_out, n_threads);
    for (int i = 0; i < n_out; i++) /* the last rank's short chunk: no stale bytes on the wire */
        memset(s->lm_part + (size_t)i * C + w->v_count, 0, (size_t)(C - w->v_count) * sizeof(float));
    mark(r, MOE8_PHASE_LM_HEAD);
    st = moe8_comm_allgather(w->comm, s->lm_part, s->lm_all, (size_t)n_out * C * sizeof(float), err);
    mark(r, MOE8_PHASE_COMM);
    if (st) return st;
    for (int rk = 0; rk < w->n_ranks; rk++) {
        const int v0 = rk * C, cnt = w->V - v0 < C ? w->V - v0 : C;
        for (int i = 0; cnt > 0 && i < n_out; i++)
            memcpy(s->logits + (size_t)i * w->V + v0, s->lm_all + ((size_t)rk * n_out + i) * C,
                   (size_t)cnt * sizeof(float));
    }
    return MOE8_OK;
}

/* x = embed[token], h = rmsnorm(x) * the first layer's attn_norm. */
static void embed_row(const fwd_run *r, const void *token, int t) {
    const moe8_weights *w = r->w;
    const int H = w->H;
    const int32_t id = ((const int32_t *)token)[t];
    float *x = r->s->x + (size_t)t * H;
    moe8_convert_to_f32(x, (const char *)w->embed + (size_t)id * H * moe8_dtype_size(w->embed_dt),
                        w->embed_dt, (size_t)H, NULL);
    if (w->n_layer > 0)
        moe8_rmsnorm_rows(r->s->h + (size_t)t * H, H, x, H, 1, H, w->layers[0].attn_norm, w->eps);
}

/* h[i] = rmsnorm(x[out_idx[i]]) * final_norm. */
static void final_norm_row(const fwd_run *r, const void *out_idx, int i) {
    const int H = r->w->H;
    moe8_rmsnorm_rows(r->s->h + (size_t)i * H, H,
                      r->s->x + (size_t)((const int32_t *)out_idx)[i] * H, H, 1, H,
                      r->w->final_norm, r->w->eps);
}

moe8_status moe8_forward(const moe8_weights *w, moe8_fwd_scratch *s, const moe8_kv_view *kv,
                         int64_t n_ctx, const float *rope, const int32_t *token,
                         const int32_t *seq, const int32_t *pos, int T, const int32_t *out_idx,
                         int n_out, int n_threads, moe8_error *err) {
    double clock = moe8_time_s();
    const fwd_run r = {w, s, moe8_kernels_get(), T, n_threads, moe8_phase_on() ? &clock : NULL};
    moe8_status st = MOE8_OK;
    MOE8_ASSERT(T <= s->n_batch && n_out <= s->n_out);
    /* Weights paged in from the cache since the last forward (memory below the
     * model's size): this one tells the kernel which experts it will read. */
    struct rusage ru;
    const long majflt = w->cache && !getrusage(RUSAGE_SELF, &ru) ? ru.ru_majflt : 0;
    const int prefetch = majflt > s->majflt;
    s->majflt = majflt;
    for (int l = 0; l < w->n_layer && s->moe_ws; l++)
        if (s->moe_ws[l]) s->moe_ws[l]->prefetch = prefetch;
    for_rows(&r, T, embed_row, token);
    mark(&r, MOE8_PHASE_ELEMENTWISE);
    for (int l = 0; l < w->n_layer; l++) {
        const moe8_attn_cache cache = moe8_attn_cache_layer_ex(kv, w->n_head, w->n_kv, w->C,
                                                               w->kv_planes, w->attn_scale, l);
        const float *next_norm = l + 1 < w->n_layer ? w->layers[l + 1].attn_norm : NULL;
        if ((st = (w->mla ? attn_block_mla : attn_block)(&r, &w->layers[l], &cache, n_ctx, rope,
                                                         seq, pos, err)) ||
            (st = ffn_block(&r, &w->layers[l], next_norm, err))) {
            moe8_error_prefix(err, "layer %d", l);
            return st;
        }
    }
    for_rows(&r, n_out, final_norm_row, out_idx);
    if (n_out > 0 && !w->v_chunk) {
        lm_head_apply(&r, s->logits, w->V, n_out, n_threads);
    } else if (n_out > 0) {
        st = lm_head_split(&r, n_out, n_threads, err);
    }
    mark(&r, MOE8_PHASE_LM_HEAD);
    return st;
}
