/*
 * synth.c — moe8_make_model: a synthetic checkpoint of any supported family
 * in Hugging Face layout, deterministic in a seed (moe8.h "Model tools").
 *
 * Folder written (through a temporary folder, folder.c):
 *   config.json              the family's keys as Hugging Face writes them
 *                            (its descriptor's config_json, src/arch)
 *   generation_config.json   the family's (Qwen3: eos [151645, 151643])
 *   model.safetensors        or shards + model.safetensors.index.json
 *   tokenizer.json, tokenizer_config.json (+ vocab.json, merges.txt,
 *                            chat_template.jinja if there)
 *                            copied from the tokenizer folder
 * Tensors, in order: embed, per layer (input norm, q/k/v/o with their biases,
 * q/k norms, post-attention norm, a Gated DeltaNet layer's projections, conv
 * [C][1][K], A_log, dt_bias and norm, router + experts + shared expert or
 * dense MLP; each where the family and layer have it), final norm, lm_head. Names come from
 * the descriptor. Values: element j of row r of
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
 *   q/k/v biases: N(0, 0.1²); shared-expert gate: N(0, (1/sqrt(H))²), so
 *           its sigmoid spreads over (0, 1).
 *   e_score_correction_bias (deepseek_v3): N(0.02, 0.01²).
 *   zero-centred norms (hybrids: x (1 + w)): N(0, 0.05²); A_log, dt_bias:
 *           N(0, 0.5²); the DeltaNet conv: N(0, 1/K).
 *
 * gpt_oss: its experts stacked, as released in MXFP4 (U8 _blocks and
 * _scales, synth_gptoss.c) or, with float_experts, gate_up_proj [E][H][2I]
 * and down_proj [E][I][H] holding exactly the values the MXFP4 form decodes
 * to (a folder of each with one seed is one model); their biases N(0, 0.1²),
 * the router's N(0, 0.1²), q/k/v/o biases N(0, 0.1²), sinks N(0, 1).
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

#include "arch/arch.h"
#include "core/core.h"
#include "convert/convert.h"

#define MAX_VOCAB 201088  /* the largest family vocabulary (gpt-oss's) */

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

moe8_status moe8_make_model_config(const moe8_make_model_params *p, moe8_config *c,
                                   moe8_error *err) {
    const moe8_arch_desc *a;
    moe8_status st;
    if (!p || !c) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: NULL argument");
    if (!(a = moe8_arch_get(p->arch)))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: unknown architecture %d",
                         (int)p->arch);
    if (p->preset != MOE8_PRESET_TINY && p->preset != MOE8_PRESET_A3B_SLICE &&
        p->preset != MOE8_PRESET_SLICE)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: unknown preset %d", (int)p->preset);
    if (p->n_layers && (p->n_layers < 1 || p->n_layers > MOE8_MAX_LAYERS))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: layers %lld not in [1, %d]",
                         (long long)p->n_layers, MOE8_MAX_LAYERS);
    if (p->dtype != MOE8_DT_BF16 && p->dtype != MOE8_DT_F32)
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: dtype %s not supported "
                         "(expected BF16 or F32)", moe8_dtype_name(p->dtype));
    if (p->vocab_size && (p->vocab_size < 1024 || p->vocab_size > MAX_VOCAB))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "make-model: vocab %lld not in [1024, %d]",
                         (long long)p->vocab_size, MAX_VOCAB);
    memset(c, 0, sizeof *c);
    c->arch = a->id;
    snprintf(c->model_type, sizeof c->model_type, "%s", a->model_type);
    if ((st = a->preset(p->preset, c, err))) return st;
    if (p->vocab_size) c->vocab_size = p->vocab_size;
    /* layers: the caller's, else the preset's num_hidden_layers, else 4; a
     * dense layer needs a MoE one beside it */
    if (p->n_layers) c->num_hidden_layers = p->n_layers;
    else if (!c->num_hidden_layers) c->num_hidden_layers = 4;
    if (c->num_hidden_layers < 2) {
        c->n_mlp_only_layers = 0;
        MOE8_FAM(c)->first_k_dense_replace = 0;
    }
    moe8_arch_fill_derived(c);
    c->bos_token_id %= c->vocab_size;
    for (int i = 0; i < c->n_eos_ids; i++) c->eos_token_ids[i] %= c->vocab_size;
    return MOE8_OK;
}

/* ======================================================================== */
/* JSON files                                                                */
/* ======================================================================== */

/* cJSON_Print of a descriptor's JSON object (NULL when it could not be made). */
static char *print_json(cJSON *j) {
    char *text = j ? cJSON_Print(j) : NULL;
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
    int64_t shape[4];         /* rows = shape[0], a row the product of the rest */
    float std, mean;
    int lm_head;          /* built from the embedding (gen_row) */
    int gx;               /* gpt_oss's stacked experts (convert.h MOE8_SYN_GX_*), 0: none */
    int u8;               /* stored U8 (MXFP4 blocks and scales) */
} syn_tensor;

/* What every row generator needs besides its tensor. */
typedef struct {
    uint64_t seed, embed_hash;
    uint64_t perm_mul, perm_add, vocab;  /* lm_head row v mirrors embed row (v*mul + add) % vocab */
} syn_gen;

#define MAX_COLS 16384      /* widest row of any preset (H, I, F): Mixtral-8x7B's down_proj
                            * 14336, DeepSeek-V2-Lite's dense MLP 10944 */

typedef struct {
    syn_tensor *t;
    size_t n, cap;
    int oom;
    int float_experts;        /* gpt_oss: stacked float experts, not MXFP4 */
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
    t->shape[2] = 1;
    t->std = std;
    t->mean = mean;
}

#define W_STD 0.02f
#define NORM_STD 0.05f
#define EMBED_STD 0.06f
#define LM_EMBED 1.0f     /* lm_head = LM_EMBED * permuted embed + N(0, LM_NOISE²) */
#define LM_NOISE 0.02f

#define BIAS_STD 0.1f

/* The Gated DeltaNet tensors that are not plain matrices or norms: A_log and
 * dt_bias (whole names, N(0, 0.5²): decays e^-(e^A softplus(a + dt)) spread
 * over (0, 1)) and the conv weight [C][1][K] (N(0, 1/K)). 1 when r is one. */
static int add_gdn_extra(syn_list *L, const moe8_arch_desc *a, const moe8_config *c,
                         moe8_role r, int64_t l) {
    const int64_t K = MOE8_FAM(c)->linear_conv_kernel_dim;
    char name[160];
    if (r != MOE8_R_GDN_A_LOG && r != MOE8_R_GDN_DT_BIAS && r != MOE8_R_GDN_CONV) return 0;
    if (moe8_arch_tensor_name(a, r, l, -1, r == MOE8_R_GDN_CONV ? "weight" : NULL, name,
                              sizeof name))
        return 1;
    if (r != MOE8_R_GDN_CONV) {
        add(L, moe8_dim_of(c, MOE8_DIM_GNV), 0, 0.5f, 0.0f, "%s", name);
        return 1;
    }
    add(L, moe8_dim_of(c, MOE8_DIM_GC), 1, 1.0f / sqrtf((float)K), 0.0f, "%s", name);
    if (!L->oom) L->t[L->n - 1].n_dims = 3, L->t[L->n - 1].shape[2] = K;
    return 1;
}

/* Role r of layer l (expert e) with the role table's shape, if the family has it. */
static void add_role(syn_list *L, const moe8_arch_desc *a, const moe8_config *c, moe8_role r,
                     int64_t l, int64_t e) {
    const moe8_role_info *ri = moe8_role_of(r);
    const int64_t d0 = moe8_dim_of(c, ri->out), d1 = moe8_dim_of(c, ri->in);
    char name[160];
    float std = W_STD, mean = 0.0f;
    if (l >= 0 && !moe8_arch_in_layer(a, c, r, l)) return;
    if (add_gdn_extra(L, a, c, r, l)) return;
    if (moe8_arch_tensor_name(a, r, l, e, "weight", name, sizeof name)) return;
    if (ri->kind == MOE8_KIND_NORM) std = NORM_STD, mean = 1.0f;
    /* zero-centred norms multiply by 1 + w (the Gated DeltaNet output norm is plain) */
    if (ri->kind == MOE8_KIND_NORM && (a->kinds.norm & MOE8_NORM_ZERO_CENTRED) &&
        r != MOE8_R_GDN_NORM)
        mean = 0.0f;
    if (r == MOE8_R_ROUTER) std = 2.0f / sqrtf((float)c->hidden_size);
    if (r == MOE8_R_SHEXP_SCORE) std = 1.0f / sqrtf((float)c->hidden_size);
    add(L, d0, d1, std, mean, "%s", name);
    if (MOE8_FAM(c)->qkv_bias &&
        (r == MOE8_R_Q || r == MOE8_R_K || r == MOE8_R_V ||
         (r == MOE8_R_O && (a->kinds.attn_opts & MOE8_ATTN_O_BIAS))) &&
        !moe8_arch_tensor_name(a, r, l, e, "bias", name, sizeof name))
        add(L, d0, 0, BIAS_STD, 0, "%s", name);
}

/* gpt_oss's tensors beyond the roles: sinks, the router's bias, the stacked
 * experts (MXFP4 blocks and scales, or float) and their biases. */
static void add_gptoss(syn_list *L, const moe8_arch_desc *a, const moe8_config *c, int64_t l,
                       int mxfp4) {
    const int64_t E = c->num_experts, H = c->hidden_size, I = c->moe_intermediate_size;
    char gu[160], dn[160], n[160];
    moe8_arch_tensor_name(a, MOE8_R_SINKS, l, -1, NULL, n, sizeof n);
    add(L, c->num_attention_heads, 0, 1.0f, 0, "%s", n);
    moe8_arch_tensor_name(a, MOE8_R_ROUTER, l, -1, "bias", n, sizeof n);
    add(L, E, 0, BIAS_STD, 0, "%s", n);
    snprintf(gu, sizeof gu, a->stacked_gate_up, (long long)l);
    snprintf(dn, sizeof dn, a->stacked_down, (long long)l);
    const int64_t shapes[4][4] = {{E, 2 * I, H / 32, 16}, {E, 2 * I, H / 32, 0},
                                  {E, H, I / 32, 16}, {E, H, I / 32, 0}};
    static const char *const sfx[4] = {"_blocks", "_scales", "_blocks", "_scales"};
    for (int k = 0; mxfp4 && k < 4; k++) {
        add(L, 1, 1, 0, 0, "%s%s", k < 2 ? gu : dn, sfx[k]);
        if (L->oom) return;
        syn_tensor *t = &L->t[L->n - 1];
        t->n_dims = k % 2 ? 3 : 4;
        memcpy(t->shape, shapes[k], sizeof shapes[k]);
        t->gx = MOE8_SYN_GX_GU_BLOCKS + k;
        t->u8 = 1;
    }
    for (int k = 0; !mxfp4 && k < 2; k++) {
        add(L, 1, 1, 0, 0, "%s", k ? dn : gu);
        if (L->oom) return;
        syn_tensor *t = &L->t[L->n - 1];
        const int64_t sh[3] = {E, k ? I : H, k ? H : 2 * I};
        t->n_dims = 3;
        memcpy(t->shape, sh, sizeof sh);
        t->gx = k ? MOE8_SYN_GX_DN_FLOAT : MOE8_SYN_GX_GU_FLOAT;
    }
    add(L, E, 2 * I, BIAS_STD, 0, "%s_bias", gu);
    add(L, E, H, BIAS_STD, 0, "%s_bias", dn);
}

static void add_layer(syn_list *L, const moe8_arch_desc *a, const moe8_config *c, int64_t l) {
    const moe8_family_cfg *fc = MOE8_FAM(c);
    static const moe8_role attn[] = {
        MOE8_R_ATTN_NORM, MOE8_R_Q,        MOE8_R_K,    MOE8_R_V,         MOE8_R_Q_A,
        MOE8_R_Q_A_NORM,  MOE8_R_Q_B,      MOE8_R_KV_A, MOE8_R_KV_A_NORM, MOE8_R_KV_B,
        MOE8_R_O,         MOE8_R_Q_NORM,   MOE8_R_K_NORM, MOE8_R_FFN_NORM};
    static const moe8_role shared[] = {MOE8_R_SHEXP_GATE, MOE8_R_SHEXP_UP, MOE8_R_SHEXP_DOWN,
                                       MOE8_R_SHEXP_SCORE};
    for (size_t i = 0; i < sizeof attn / sizeof attn[0]; i++) add_role(L, a, c, attn[i], l, -1);
    for (int r = MOE8_R_GDN_QKVZ; r <= MOE8_R_GDN_OUT; r++) add_role(L, a, c, (moe8_role)r, l, -1);
    if (!moe8_config_is_moe_layer(c, l)) {
        for (int r = MOE8_R_MLP_GATE; r <= MOE8_R_MLP_DOWN; r++) add_role(L, a, c, (moe8_role)r, l, -1);
        return;
    }
    add_role(L, a, c, MOE8_R_ROUTER, l, -1);
    if (a->kinds.tensors & MOE8_TENSORS_GPTOSS_EXPERTS) {
        add_gptoss(L, a, c, l, !L->float_experts);
        return;
    }
    if (fc->e_score_bias) { /* deepseek_v3: small, so sigmoid scores + bias stay positive */
        char name[160];
        if (!moe8_arch_router_bias_name(a, l, name, sizeof name))
            add(L, c->num_experts, 0, BIAS_STD / 10, BIAS_STD / 5, "%s", name);
    }
    for (int64_t e = 0; e < c->num_experts; e++)
        for (int r = MOE8_R_EXP_GATE; r <= MOE8_R_EXP_DOWN; r++) add_role(L, a, c, (moe8_role)r, l, e);
    for (size_t i = 0; fc->shared_expert_intermediate_size > 0 && i < sizeof shared / sizeof shared[0];
         i++)
        add_role(L, a, c, shared[i], l, -1);
}

/* The multi-token-prediction layers a checkpoint carries after the decoder's
 * (glm4_moe's num_nextn_predict_layers; the loader skips them): their own
 * norms and projection (DeepSeek-V3's MTP module) and an attention block. */
static void add_mtp(syn_list *L, const moe8_arch_desc *a, const moe8_config *c) {
    static const moe8_role attn[] = {MOE8_R_ATTN_NORM, MOE8_R_Q, MOE8_R_K, MOE8_R_V, MOE8_R_O};
    const int64_t H = c->hidden_size, n = MOE8_FAM(c)->num_nextn_predict_layers;
    for (int64_t l = c->num_hidden_layers; l < c->num_hidden_layers + n; l++) {
        add(L, H, 0, NORM_STD, 1.0f, "model.layers.%lld.enorm.weight", (long long)l);
        add(L, H, 0, NORM_STD, 1.0f, "model.layers.%lld.hnorm.weight", (long long)l);
        add(L, H, 2 * H, W_STD, 0, "model.layers.%lld.eh_proj.weight", (long long)l);
        add(L, H, 0, NORM_STD, 1.0f, "model.layers.%lld.shared_head.norm.weight", (long long)l);
        for (size_t i = 0; i < sizeof attn / sizeof attn[0]; i++) add_role(L, a, c, attn[i], l, -1);
    }
}

static void build_list(syn_list *L, const moe8_config *c) {
    const moe8_arch_desc *a = moe8_arch_get(c->arch);
    add_role(L, a, c, MOE8_R_EMBED, -1, -1);
    if (!L->oom) L->t[0].std = EMBED_STD;
    for (int64_t l = 0; l < c->num_hidden_layers; l++) add_layer(L, a, c, l);
    if (a->kinds.tensors & MOE8_TENSORS_SKIP_MTP) add_mtp(L, a, c);
    add_role(L, a, c, MOE8_R_FINAL_NORM, -1, -1);
    add_role(L, a, c, MOE8_R_LM_HEAD, -1, -1);
    if (!L->oom) {
        L->t[L->n - 1].std = LM_NOISE;
        L->t[L->n - 1].lm_head = 1;
    }
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
    if (t->gx) return moe8_syn_gptoss(sh, t->name, t->gx, t->shape, dt, g->seed, err);
    const int64_t rows = t->n_dims >= 2 ? t->shape[0] : 1;
    const int64_t cols = t->n_dims >= 2 ? t->shape[1] * t->shape[2] : t->shape[0];
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

static uint64_t syn_bytes(const syn_tensor *t, size_t esz) {
    uint64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= (uint64_t)t->shape[i];
    return n * (t->u8 ? 1 : esz);
}

static moe8_status write_tensors(const moe8_make_model_params *p, const moe8_config *c,
                                 const char *dir, moe8_error *err) {
    syn_list L = {0};
    L.float_experts = p->float_experts;
    moe8_shards *sh = NULL;
    moe8_status st;
    uint64_t done = 0, total;
    const size_t esz = moe8_dtype_size(p->dtype);
    build_list(&L, c);
    if (L.oom) {
        free(L.t);
        return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    }
    syn_gen g = {p->seed, name_hash(L.t[0].name, p->seed), 0, 0,
                 (uint64_t)c->vocab_size};
    g.perm_mul = 40503;   /* odd prime: coprime with any vocab it does not divide */
    while (gcd(g.perm_mul, g.vocab) != 1) g.perm_mul += 2;
    g.perm_add = mix64(p->seed) % g.vocab;
    st = moe8_shards_new(dir, p->shard_bytes, &sh, err);
    for (size_t i = 0; !st && i < L.n; i++) {
        const syn_tensor *t = &L.t[i];
        moe8_shards_group(sh, syn_bytes(t, esz));
        st = moe8_shards_plan(sh, t->name, t->u8 ? MOE8_DT_U8 : p->dtype, t->n_dims, t->shape,
                              err);
    }
    total = st ? 0 : moe8_shards_total_bytes(sh);
    for (size_t i = 0; !st && i < L.n; i++) {
        const syn_tensor *t = &L.t[i];
        st = gen_tensor(sh, t, p->dtype, &g, err);
        done += syn_bytes(t, esz);
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
    static const char *optional[] = {"tokenizer_config.json", "vocab.json", "merges.txt",
                                     "chat_template.jinja"};
    moe8_status st;
    if ((st = moe8_copy_file(p->tokenizer_dir, dir, "tokenizer.json", 0, err))) return st;
    for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++)
        if ((st = moe8_copy_file(p->tokenizer_dir, dir, optional[i], 1, err))) return st;
    const moe8_arch_desc *a = moe8_arch_get(c->arch);
    /* gpt_oss's MXFP4 experts: config_json writes quantization_config for U8 */
    const int mx = (a->kinds.tensors & MOE8_TENSORS_GPTOSS_EXPERTS) && !p->float_experts;
    if ((st = write_json(dir, "config.json", print_json(a->config_json(c, mx ? MOE8_DT_U8 : p->dtype)),
                         err)))
        return st;
    if ((st = write_json(dir, "generation_config.json", print_json(a->generation_json(c)), err)))
        return st;
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
