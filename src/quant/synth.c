/*
 * synth.c — moe8_make_model: a synthetic Qwen3-MoE checkpoint in Hugging
 * Face layout, deterministic in a seed (moe8.h "Model tools").
 *
 * Folder written (through a temporary folder, folder.c):
 *   config.json              every SEMANTICS §7 field (+ architectures, torch_dtype)
 *   generation_config.json   Qwen3's (eos [151645, 151643])
 *   model.safetensors        or shards + model.safetensors.index.json
 *   tokenizer.json, tokenizer_config.json (+ vocab.json, merges.txt if there)
 *                            copied from the tokenizer folder
 * Tensors, in order: embed, per layer (norms, q/k/v/o, q/k norms, router +
 * experts or dense MLP), final norm, lm_head. Values: element j of row r of
 * tensor "name" comes from a generator seeded by (seed, name, r), so rows
 * are generated in parallel and the bytes never depend on the thread count.
 * Normal draws are Irwin-Hall (sum of 4 uniforms, scaled to unit variance):
 * cheap, and bounded at ±3.46 sigma.
 *   linears (attention, experts, dense MLP): N(0, 0.02²)
 *   embed: N(0, 0.06²) — three times the linears, so the residual stream
 *           keeps the current token's direction against the layers' outputs
 *           (at 0.02 the top logits of the tiny model were 0.5% apart and
 *           W8A8 and float diverged after 2 greedy tokens; from 0.08 on the
 *           layers no longer change the choice at all)
 *   lm_head: row v = embed row (v·a + b) mod V + N(0, 0.02²) — a fixed
 *           random "bigram" bias on top of noise, so logits have a clear
 *           top token (greedy decoding is stable under quantization noise)
 *           without repeating one token (the map is a permutation)
 *   norms: 1 + N(0, 0.05²)
 *   router: N(0, (2/sqrt(H))²), so router logits of a unit-RMS hidden state
 *           have a standard deviation near 2 and routing is far from uniform.
 *
 * Does not: hold more than one tensor in memory, or produce a model that
 * says anything meaningful.
 */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "quant/quant.h"

#define QWEN3_VOCAB 151936
#define QWEN3_BOS 151643
#define QWEN3_EOS 151645

/* ======================================================================== */
/* Presets                                                                   */
/* ======================================================================== */

moe8_make_model_params moe8_make_model_params_default(void) {
    moe8_make_model_params p;
    memset(&p, 0, sizeof p);
    p.preset = MOE8_PRESET_TINY;
    p.dtype = MOE8_DT_BF16;
    return p;
}

static void fill_dims(moe8_config *c, moe8_preset preset) {
    if (preset == MOE8_PRESET_TINY) {
        c->hidden_size = 256;
        c->num_attention_heads = 8;
        c->num_key_value_heads = 2;
        c->head_dim = 32;
        c->num_experts = 16;
        c->num_experts_per_tok = 4;
        c->moe_intermediate_size = 128;
        c->intermediate_size = 512;
    } else {
        c->hidden_size = 2048;
        c->num_attention_heads = 32;
        c->num_key_value_heads = 4;
        c->head_dim = 128;
        c->num_experts = 128;
        c->num_experts_per_tok = 8;
        c->moe_intermediate_size = 768;
        c->intermediate_size = 6144;
    }
}

moe8_status moe8_make_model_config(const moe8_make_model_params *p, moe8_config *c,
                                   moe8_error *err) {
    int64_t layers;
    if (!p || !c) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: NULL argument");
    if (p->preset != MOE8_PRESET_TINY && p->preset != MOE8_PRESET_A3B_SLICE)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: unknown preset %d", (int)p->preset);
    layers = p->n_layers ? p->n_layers : 4;
    if (layers < 1 || layers > MOE8_MAX_LAYERS)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: layers %lld not in [1, %d]",
                         (long long)layers, MOE8_MAX_LAYERS);
    if (p->dtype != MOE8_DT_BF16 && p->dtype != MOE8_DT_F32)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: dtype %s not supported "
                         "(expected BF16 or F32)", moe8_dtype_name(p->dtype));
    if (p->vocab_size && (p->vocab_size < 1024 || p->vocab_size > QWEN3_VOCAB))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: vocab %lld not in [1024, %d]",
                         (long long)p->vocab_size, QWEN3_VOCAB);
    memset(c, 0, sizeof *c);
    snprintf(c->model_type, sizeof c->model_type, "qwen3_moe");
    fill_dims(c, p->preset);
    c->vocab_size = p->vocab_size ? p->vocab_size : QWEN3_VOCAB;
    c->num_hidden_layers = layers;
    c->norm_topk_prob = 1;
    c->decoder_sparse_step = 1;
    c->max_position_embeddings = 40960;
    c->rms_norm_eps = 1e-6;
    c->rope_theta = 1e6;
    c->tie_word_embeddings = 0;
    c->bos_token_id = QWEN3_BOS % c->vocab_size;
    c->n_eos_ids = 1;
    c->eos_token_ids[0] = QWEN3_EOS % c->vocab_size;
    if (p->preset == MOE8_PRESET_TINY && layers >= 2) {
        c->n_mlp_only_layers = 1;   /* exercise the dense path too */
        c->mlp_only_layers[0] = 0;
    }
    return MOE8_OK;
}

/* ======================================================================== */
/* JSON files                                                                */
/* ======================================================================== */

static char *config_json(const moe8_config *c, moe8_dtype dt) {
    cJSON *j = cJSON_CreateObject(), *arr;
    char *text;
    if (!j) return NULL;
    arr = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arr, cJSON_CreateString("Qwen3MoeForCausalLM"));
    cJSON_AddBoolToObject(j, "attention_bias", 0);
    cJSON_AddNumberToObject(j, "attention_dropout", 0);
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    cJSON_AddNumberToObject(j, "decoder_sparse_step", (double)c->decoder_sparse_step);
    cJSON_AddNumberToObject(j, "eos_token_id", (double)c->eos_token_ids[0]);
    cJSON_AddNumberToObject(j, "head_dim", (double)c->head_dim);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddNumberToObject(j, "hidden_size", (double)c->hidden_size);
    cJSON_AddNumberToObject(j, "initializer_range", 0.02);
    cJSON_AddNumberToObject(j, "intermediate_size", (double)c->intermediate_size);
    cJSON_AddNumberToObject(j, "max_position_embeddings", (double)c->max_position_embeddings);
    cJSON_AddNumberToObject(j, "max_window_layers", (double)c->num_hidden_layers);
    arr = cJSON_AddArrayToObject(j, "mlp_only_layers");
    for (int i = 0; i < c->n_mlp_only_layers; i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber((double)c->mlp_only_layers[i]));
    cJSON_AddStringToObject(j, "model_type", "qwen3_moe");
    cJSON_AddNumberToObject(j, "moe_intermediate_size", (double)c->moe_intermediate_size);
    cJSON_AddBoolToObject(j, "norm_topk_prob", c->norm_topk_prob);
    cJSON_AddNumberToObject(j, "num_attention_heads", (double)c->num_attention_heads);
    cJSON_AddNumberToObject(j, "num_experts", (double)c->num_experts);
    cJSON_AddNumberToObject(j, "num_experts_per_tok", (double)c->num_experts_per_tok);
    cJSON_AddNumberToObject(j, "num_hidden_layers", (double)c->num_hidden_layers);
    cJSON_AddNumberToObject(j, "num_key_value_heads", (double)c->num_key_value_heads);
    cJSON_AddBoolToObject(j, "output_router_logits", 0);
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNullToObject(j, "rope_scaling");
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_theta);
    cJSON_AddNumberToObject(j, "router_aux_loss_coef", 0.001);
    cJSON_AddNullToObject(j, "sliding_window");
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddStringToObject(j, "torch_dtype", dt == MOE8_DT_F32 ? "float32" : "bfloat16");
    cJSON_AddBoolToObject(j, "use_cache", 1);
    cJSON_AddBoolToObject(j, "use_sliding_window", 0);
    cJSON_AddNumberToObject(j, "vocab_size", (double)c->vocab_size);
    text = cJSON_Print(j);
    cJSON_Delete(j);
    return text;
}

static char *generation_json(const moe8_config *c) {
    cJSON *j = cJSON_CreateObject(), *eos;
    char *text;
    if (!j) return NULL;
    cJSON_AddNumberToObject(j, "bos_token_id", (double)c->bos_token_id);
    cJSON_AddBoolToObject(j, "do_sample", 1);
    eos = cJSON_AddArrayToObject(j, "eos_token_id");
    cJSON_AddItemToArray(eos, cJSON_CreateNumber((double)c->eos_token_ids[0]));
    cJSON_AddItemToArray(eos, cJSON_CreateNumber((double)c->bos_token_id));
    cJSON_AddNumberToObject(j, "pad_token_id", (double)c->bos_token_id);
    cJSON_AddNumberToObject(j, "temperature", 0.6);
    cJSON_AddNumberToObject(j, "top_k", 20);
    cJSON_AddNumberToObject(j, "top_p", 0.95);
    text = cJSON_Print(j);
    cJSON_Delete(j);
    return text;
}

static moe8_status write_json(const char *dir, const char *name, char *text, moe8_error *err) {
    moe8_status st;
    if (!text) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    st = moe8_write_text(dir, name, text, err);
    free(text);
    return st;
}

/* ======================================================================== */
/* Tensors                                                                   */
/* ======================================================================== */

typedef struct {
    char name[128];
    int n_dims;
    int64_t shape[2];
    float std, mean;
    int lm_head;          /* built from the embedding (gen_row) */
} syn_tensor;

/* What every row generator needs besides its tensor. */
typedef struct {
    uint64_t seed, embed_hash;
    uint64_t perm_mul, perm_add, vocab;  /* lm_head row v mirrors embed row (v*mul + add) % vocab */
} syn_gen;

#define MAX_COLS 8192       /* widest row of any preset (H, I, F) */

typedef struct {
    syn_tensor *t;
    size_t n, cap;
    int oom;
} syn_list;

static void add(syn_list *L, int64_t d0, int64_t d1, float std, float mean, const char *fmt, ...)
    MOE8_PRINTF(6, 7);
static void add(syn_list *L, int64_t d0, int64_t d1, float std, float mean, const char *fmt, ...) {
    syn_tensor *t;
    va_list ap;
    if (L->oom) return;
    if (L->n == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 256;
        syn_tensor *p = realloc(L->t, cap * sizeof *p);
        if (!p) {
            L->oom = 1;
            return;
        }
        L->t = p;
        L->cap = cap;
    }
    t = &L->t[L->n++];
    memset(t, 0, sizeof *t);
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->n_dims = d1 > 0 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->std = std;
    t->mean = mean;
}

#define W_STD 0.02f
#define NORM_STD 0.05f
#define EMBED_STD 0.06f
#define LM_EMBED 1.0f     /* lm_head = LM_EMBED * permuted embed + N(0, LM_NOISE²) */
#define LM_NOISE 0.02f

static void add_layer(syn_list *L, const moe8_config *c, int64_t l) {
    const int64_t H = c->hidden_size, D = c->head_dim, I = c->moe_intermediate_size;
    const int64_t QD = c->num_attention_heads * D, KD = c->num_key_value_heads * D;
    const long long li = (long long)l;
    add(L, H, 0, NORM_STD, 1, "model.layers.%lld.input_layernorm.weight", li);
    add(L, QD, H, W_STD, 0, "model.layers.%lld.self_attn.q_proj.weight", li);
    add(L, KD, H, W_STD, 0, "model.layers.%lld.self_attn.k_proj.weight", li);
    add(L, KD, H, W_STD, 0, "model.layers.%lld.self_attn.v_proj.weight", li);
    add(L, H, QD, W_STD, 0, "model.layers.%lld.self_attn.o_proj.weight", li);
    add(L, D, 0, NORM_STD, 1, "model.layers.%lld.self_attn.q_norm.weight", li);
    add(L, D, 0, NORM_STD, 1, "model.layers.%lld.self_attn.k_norm.weight", li);
    add(L, H, 0, NORM_STD, 1, "model.layers.%lld.post_attention_layernorm.weight", li);
    if (!moe8_config_is_moe_layer(c, l)) {
        add(L, c->intermediate_size, H, W_STD, 0, "model.layers.%lld.mlp.gate_proj.weight", li);
        add(L, c->intermediate_size, H, W_STD, 0, "model.layers.%lld.mlp.up_proj.weight", li);
        add(L, H, c->intermediate_size, W_STD, 0, "model.layers.%lld.mlp.down_proj.weight", li);
        return;
    }
    add(L, c->num_experts, H, 2.0f / sqrtf((float)H), 0, "model.layers.%lld.mlp.gate.weight", li);
    for (long long e = 0; e < c->num_experts; e++) {
        add(L, I, H, W_STD, 0, "model.layers.%lld.mlp.experts.%lld.gate_proj.weight", li, e);
        add(L, I, H, W_STD, 0, "model.layers.%lld.mlp.experts.%lld.up_proj.weight", li, e);
        add(L, H, I, W_STD, 0, "model.layers.%lld.mlp.experts.%lld.down_proj.weight", li, e);
    }
}

static void build_list(syn_list *L, const moe8_config *c) {
    add(L, c->vocab_size, c->hidden_size, EMBED_STD, 0, "model.embed_tokens.weight");
    for (int64_t l = 0; l < c->num_hidden_layers; l++) add_layer(L, c, l);
    add(L, c->hidden_size, 0, NORM_STD, 1, "model.norm.weight");
    add(L, c->vocab_size, c->hidden_size, LM_NOISE, 0, "lm_head.weight");
    if (!L->oom) L->t[L->n - 1].lm_head = 1;
}

static uint64_t mix64(uint64_t x) {   /* splitmix64 finalizer */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t gcd(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static uint64_t name_hash(const char *s, uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ mix64(seed);
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Row r of N(mean, std²) seeded by h, added to dst[n] (fp32). */
static void draw_row(float *dst, int64_t n, float mean, float std, uint64_t h, int64_t r) {
    uint64_t s = mix64(h ^ mix64((uint64_t)r));
    const float k = 1.7320508f / 65536.0f;  /* sqrt(3) / 2^16: unit variance */
    for (int64_t j = 0; j < n; j++) {
        uint64_t x;
        s += 0x9e3779b97f4a7c15ull;
        x = mix64(s);
        dst[j] += mean + std * (float)((int64_t)(x & 0xffff) + (int64_t)((x >> 16) & 0xffff) +
                                       (int64_t)((x >> 32) & 0xffff) + (int64_t)(x >> 48) - 131070) * k;
    }
}

/* Row r of tensor t into dst (dtype dt). lm_head row v is LM_EMBED x embed
 * row perm(v) plus its own noise (see the top). */
static void gen_row(void *dst, moe8_dtype dt, int64_t n, const syn_tensor *t, const syn_gen *g,
                    int64_t r) {
    float row[MAX_COLS];
    memset(row, 0, (size_t)n * sizeof(float));
    if (t->lm_head) {
        int64_t src = (int64_t)(((uint64_t)r * g->perm_mul + g->perm_add) % (uint64_t)g->vocab);
        draw_row(row, n, 0.0f, EMBED_STD, g->embed_hash, src);
        for (int64_t j = 0; j < n; j++) row[j] *= LM_EMBED;
    }
    draw_row(row, n, t->mean, t->std, name_hash(t->name, g->seed), r);
    for (int64_t j = 0; j < n; j++) {
        if (dt == MOE8_DT_F32) ((float *)dst)[j] = row[j];
        else ((uint16_t *)dst)[j] = moe8_f32_to_bf16(row[j]);
    }
}

static moe8_status gen_tensor(moe8_shards *sh, const syn_tensor *t, moe8_dtype dt,
                              const syn_gen *g, moe8_error *err) {
    const int64_t rows = t->n_dims == 2 ? t->shape[0] : 1;
    const int64_t cols = t->n_dims == 2 ? t->shape[1] : t->shape[0];
    const size_t esz = moe8_dtype_size(dt), row_bytes = (size_t)cols * esz;
    size_t n;
    char *buf;
    moe8_status st;
    if (moe8_mul_size(row_bytes, (size_t)rows, &n) || !(buf = malloc(n ? n : 1)))
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "tensor '%s': cannot allocate %lld x %lld",
                         t->name, (long long)rows, (long long)cols);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) gen_row(buf + (size_t)r * row_bytes, dt, cols, t, g, r);
    st = moe8_shards_write(sh, t->name, buf, n, err);
    free(buf);
    return st;
}

/* ======================================================================== */
/* moe8_make_model                                                           */
/* ======================================================================== */

static moe8_status write_tensors(const moe8_make_model_params *p, const moe8_config *c,
                                 const char *dir, moe8_error *err) {
    syn_list L = {0};
    moe8_shards *sh = NULL;
    moe8_status st;
    uint64_t done = 0, total;
    const size_t esz = moe8_dtype_size(p->dtype);
    build_list(&L, c);
    if (L.oom) {
        free(L.t);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    }
    syn_gen g = {p->seed, name_hash("model.embed_tokens.weight", p->seed), 0, 0,
                 (uint64_t)c->vocab_size};
    g.perm_mul = 40503;   /* odd prime: coprime with any vocab it does not divide */
    while (gcd(g.perm_mul, g.vocab) != 1) g.perm_mul += 2;
    g.perm_add = mix64(p->seed) % g.vocab;
    st = moe8_shards_new(dir, p->shard_bytes, &sh, err);
    for (size_t i = 0; !st && i < L.n; i++) {
        const syn_tensor *t = &L.t[i];
        uint64_t nb = (uint64_t)t->shape[0] * (uint64_t)(t->n_dims == 2 ? t->shape[1] : 1) * esz;
        moe8_shards_group(sh, nb);
        st = moe8_shards_plan(sh, t->name, p->dtype, t->n_dims, t->shape, err);
    }
    total = st ? 0 : moe8_shards_total_bytes(sh);
    for (size_t i = 0; !st && i < L.n; i++) {
        const syn_tensor *t = &L.t[i];
        st = gen_tensor(sh, t, p->dtype, &g, err);
        done += (uint64_t)t->shape[0] * (uint64_t)(t->n_dims == 2 ? t->shape[1] : 1) * esz;
        if (!st && p->progress && p->progress(p->progress_user, "write", done, total))
            st = moe8_fail(err, MOE8_ERR_CANCELLED, -1, "make-model cancelled");
    }
    if (!st) st = moe8_shards_finish(sh, err);
    moe8_shards_free(sh);
    free(L.t);
    return st;
}

static moe8_status write_folder(const moe8_make_model_params *p, const moe8_config *c,
                                const char *dir, moe8_error *err) {
    static const char *optional[] = {"tokenizer_config.json", "vocab.json", "merges.txt"};
    moe8_status st;
    if ((st = moe8_copy_file(p->tokenizer_dir, dir, "tokenizer.json", 0, err))) return st;
    for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++)
        if ((st = moe8_copy_file(p->tokenizer_dir, dir, optional[i], 1, err))) return st;
    if ((st = write_json(dir, "config.json", config_json(c, p->dtype), err))) return st;
    if ((st = write_json(dir, "generation_config.json", generation_json(c), err))) return st;
    return write_tensors(p, c, dir, err);
}

moe8_status moe8_make_model(const moe8_make_model_params *p, const char *out_dir,
                            moe8_error *err) {
    moe8_config c;
    moe8_outdir od;
    char tok_json[PATH_MAX];
    moe8_status st;
    if ((st = moe8_make_model_config(p, &c, err))) return st;
    if (!p->tokenizer_dir)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: no tokenizer folder given");
    snprintf(tok_json, sizeof tok_json, "%s/tokenizer.json", p->tokenizer_dir);
    if (access(tok_json, R_OK) != 0)
        return moe8_fail(err, MOE8_ERR_NOT_FOUND, -1, "make-model: tokenizer folder '%s' has no "
                         "readable tokenizer.json (fetch it with scripts/deps.sh or pass another "
                         "folder)", p->tokenizer_dir);
    if ((st = moe8_outdir_begin(&od, out_dir, p->force, &p->tokenizer_dir, 1, err))) return st;
    st = write_folder(p, &c, od.tmp, err);
    if (!st) st = moe8_outdir_commit(&od, err);
    if (st) moe8_outdir_abort(&od);
    return st;
}
