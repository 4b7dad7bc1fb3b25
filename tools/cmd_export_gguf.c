/*
 * cmd_export_gguf.c — `moe8 export-gguf -m DIR -o FILE.gguf [--type q8_0|f16|bf16]`:
 * write a float Qwen3-MoE model folder (config.json, safetensors, tokenizer.json)
 * as one GGUF file that llama.cpp loads as architecture "qwen3moe", so the
 * same weights can be timed and cross-checked there (docs/BENCHMARKS.md).
 *
 * The file (GGUF version 3, little-endian; ggml's gguf.h / gguf-py):
 *   u32 magic "GGUF", u32 version 3, u64 n_tensors, u64 n_kv
 *   n_kv x  { str key, u32 value type, value }          str = u64 length + bytes
 *           (arrays: u32 element type, u64 count, elements)
 *   n_tensors x { str name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset }
 *   zero padding to general.alignment (32), then the tensor data, each tensor
 *   at its offset from the start of the data, offsets multiples of 32.
 * ne[] is ggml's order, the reverse of the row-major shape: a Hugging Face
 * weight [out][in] is ne {in, out}, the stacked experts [E][out][in] are
 * ne {in, out, E} (convert_hf_to_gguf.py's Qwen3MoeModel merges
 * mlp.experts.N.{gate,up,down}_proj into ffn_{gate,up,down}_exps).
 *
 * Types: norms (1-D) and the router (ffn_gate_inp) stay F32, as
 * convert_hf_to_gguf.py keeps them; every other matrix is --type: Q8_0
 * (default; blocks of 32 along a row: f16 scale d = max|x| / 127, then 32
 * int8 roundf(x / d), as ggml's quantize_row_q8_0_ref), F16 or BF16 (round to
 * nearest even; a BF16 input is copied byte for byte).
 *
 * The tokenizer comes from tokenizer.json (byte-level BPE: vocab, merges,
 * added tokens) as tokenizer.ggml.model "gpt2", pre "qwen2" (what
 * convert_hf_to_gguf.py names the Qwen2/Qwen3 pre-tokenizer); ids the
 * tokenizer lacks up to config.json's vocab_size become "[PADn]" (UNUSED).
 *
 * --layers N writes only the first N decoder layers (block_count N): timing
 * files of two depths and taking the difference gives llama.cpp's time per
 * layer without the embedding and lm_head (scripts/bench_llamacpp.mjs).
 *
 * Not done: other families (llama.cpp's qwen3moe has no dense layers, no q/k/v
 * biases and always renormalizes the top-k weights: dense layers and biases
 * are refused, norm_topk_prob false is warned about); quantized (W8A8)
 * checkpoints — export the float model they were made from. Reads the model
 * through the public headers only; writes "<FILE>.tmp.<pid>" and renames it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"

#define CMD "export-gguf"
#define GGUF_ALIGN 32
#define TOKENIZER_MAX_BYTES ((size_t)256 << 20)

/* ggml_type and gguf value types (append-only enums of ggml). */
enum { GGML_F32 = 0, GGML_F16 = 1, GGML_Q8_0 = 8, GGML_BF16 = 30 };
enum { GV_U8 = 0, GV_I8, GV_U16, GV_I16, GV_U32, GV_I32, GV_F32, GV_BOOL, GV_STR, GV_ARR,
       GV_U64, GV_I64, GV_F64 };
/* llama_ftype of general.file_type. */
enum { FTYPE_F16 = 1, FTYPE_Q8_0 = 7, FTYPE_BF16 = 32 };
/* llama_token_type of tokenizer.ggml.token_type. */
enum { TOK_NORMAL = 1, TOK_CONTROL = 3, TOK_USER_DEFINED = 4, TOK_UNUSED = 5 };

#define Q8_0_BLOCK 32
#define Q8_0_BYTES 34 /* f16 d + 32 int8 */

/* ------------------------------------------------------------------------ */
/* A growable byte buffer for the header                                     */
/* ------------------------------------------------------------------------ */

typedef struct {
    unsigned char *p;
    size_t n, cap;
    int oom;
} bytes;

static void put(bytes *b, const void *d, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

/* Host order is written as is: moe8 runs on little-endian CPUs only. */
static void put_u32(bytes *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(bytes *b, uint64_t v) { put(b, &v, 8); }
static void put_strn(bytes *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}
static void put_str(bytes *b, const char *s) { put_strn(b, s, strlen(s)); }

/* The metadata: each kv_* appends one key/value and counts it. */
typedef struct {
    bytes b;
    uint64_t n;
} kvs;

static void kv_key(kvs *k, const char *key, uint32_t type) {
    put_str(&k->b, key);
    put_u32(&k->b, type);
    k->n++;
}
static void kv_u32(kvs *k, const char *key, uint32_t v) {
    kv_key(k, key, GV_U32);
    put_u32(&k->b, v);
}
static void kv_f32(kvs *k, const char *key, float v) {
    kv_key(k, key, GV_F32);
    put(&k->b, &v, 4);
}
static void kv_bool(kvs *k, const char *key, int v) {
    unsigned char c = v ? 1 : 0;
    kv_key(k, key, GV_BOOL);
    put(&k->b, &c, 1);
}
static void kv_str(kvs *k, const char *key, const char *v) {
    kv_key(k, key, GV_STR);
    put_str(&k->b, v);
}
/* An array's header; the caller appends its n elements. */
static void kv_arr(kvs *k, const char *key, uint32_t elem_type, uint64_t n) {
    kv_key(k, key, GV_ARR);
    put_u32(&k->b, elem_type);
    put_u64(&k->b, n);
}

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cli_verr(CMD, fmt, ap);
    va_end(ap);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* The tensors of the GGUF file and where their data comes from              */
/* ------------------------------------------------------------------------ */

typedef struct {
    char name[64];              /* "blk.3.ffn_up_exps.weight" */
    int type;                   /* GGML_* */
    int n_dims;
    uint64_t ne[3];             /* ggml order: ne[0] = row length */
    const moe8_tensor **src;    /* [n_src]: one tensor, or the experts in order */
    int n_src;
    uint64_t offset, n_bytes;   /* in the data section */
} gg_tensor;

typedef struct {
    const char *dir;
    const moe8_config *cfg;
    moe8_st *st;
    gg_tensor *t;               /* [n] */
    int n, cap;
    int wtype;                  /* GGML_* of the matrices */
    int64_t n_layers;           /* layers written: the first n_layers of the model */
} plan;

static uint64_t type_row_bytes(int type, uint64_t ne0) {
    switch (type) {
    case GGML_F32: return 4 * ne0;
    case GGML_F16:
    case GGML_BF16: return 2 * ne0;
    default: return ne0 / Q8_0_BLOCK * Q8_0_BYTES;
    }
}

static const char *type_name(int type) {
    switch (type) {
    case GGML_F32: return "F32";
    case GGML_F16: return "F16";
    case GGML_BF16: return "BF16";
    default: return "Q8_0";
    }
}

/* The float tensor `name` of shape [rows][cols] (cols = 0: 1-D [rows]), or
 * NULL after a message naming it. */
static const moe8_tensor *need(plan *p, const char *name, int64_t rows, int64_t cols) {
    const moe8_tensor *t = moe8_st_find(p->st, name);
    int want_dims = cols ? 2 : 1;
    if (!t) {
        fail("'%s': tensor '%s' is missing", p->dir, name);
        return NULL;
    }
    if (t->dtype != MOE8_DT_F32 && t->dtype != MOE8_DT_F16 && t->dtype != MOE8_DT_BF16) {
        fail("'%s': tensor '%s' is %s: only float models (F32/F16/BF16) are exported; for a "
             "quantized checkpoint export the float model it was made from",
             p->dir, name, moe8_dtype_name(t->dtype));
        return NULL;
    }
    if (t->n_dims != want_dims || t->shape[0] != rows || (cols && t->shape[1] != cols)) {
        char got[96] = "", *g = got;
        for (int i = 0; i < t->n_dims && g < got + sizeof got - 24; i++)
            g += sprintf(g, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        if (cols)
            fail("'%s': tensor '%s' has shape [%s], expected [%lld, %lld]", p->dir, name, got,
                 (long long)rows, (long long)cols);
        else
            fail("'%s': tensor '%s' has shape [%s], expected [%lld]", p->dir, name, got,
                 (long long)rows);
        return NULL;
    }
    return t;
}

/* Append a GGUF tensor of n_src sources, each [rows][cols] (cols = 0: 1-D). */
static gg_tensor *add(plan *p, const char *gname, int type, int n_src, int64_t rows,
                      int64_t cols) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        gg_tensor *t = realloc(p->t, (size_t)cap * sizeof *t);
        if (!t) {
            fail("out of memory");
            return NULL;
        }
        p->t = t;
        p->cap = cap;
    }
    gg_tensor *g = &p->t[p->n];
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "%s", gname);
    g->src = calloc((size_t)n_src, sizeof *g->src);
    if (!g->src) {
        fail("out of memory");
        return NULL;
    }
    p->n++;
    g->n_src = n_src;
    g->type = cols ? type : GGML_F32;
    g->n_dims = cols ? (n_src > 1 ? 3 : 2) : 1;
    g->ne[0] = (uint64_t)(cols ? cols : rows);
    g->ne[1] = cols ? (uint64_t)rows : 1;
    g->ne[2] = (uint64_t)n_src;
    if (g->type == GGML_Q8_0 && g->ne[0] % Q8_0_BLOCK) {
        fail("tensor '%s': row length %llu is not a multiple of %d (Q8_0 blocks); use --type f16",
             gname, (unsigned long long)g->ne[0], Q8_0_BLOCK);
        return NULL;
    }
    g->n_bytes = type_row_bytes(g->type, g->ne[0]) * g->ne[1] * g->ne[2];
    return g;
}

/* One GGUF tensor from one Hugging Face tensor. */
static int add1(plan *p, const char *gname, int type, const char *hname, int64_t rows,
                int64_t cols) {
    const moe8_tensor *t = need(p, hname, rows, cols);
    gg_tensor *g = t ? add(p, gname, type, 1, rows, cols) : NULL;
    if (!g) return -1;
    g->src[0] = t;
    return 0;
}

/* Every tensor llama.cpp's qwen3moe reads, in convert_hf_to_gguf.py's order. */
static int make_plan(plan *p) {
    const moe8_config *c = p->cfg;
    int64_t H = c->hidden_size, V = c->vocab_size, D = c->head_dim;
    int64_t nq = c->num_attention_heads * D, nkv = c->num_key_value_heads * D;
    int64_t E = c->num_experts, I = c->moe_intermediate_size;
    int w = p->wtype;
    char g[64], h[160];

    if (add1(p, "token_embd.weight", w, "model.embed_tokens.weight", V, H)) return -1;
    for (int64_t l = 0; l < p->n_layers; l++) {
        static const struct { const char *g, *h; int kind; } lin[] = {
            {"attn_norm", "input_layernorm", 0},      {"attn_q", "self_attn.q_proj", 1},
            {"attn_k", "self_attn.k_proj", 2},        {"attn_v", "self_attn.v_proj", 2},
            {"attn_output", "self_attn.o_proj", 3},   {"attn_q_norm", "self_attn.q_norm", 4},
            {"attn_k_norm", "self_attn.k_norm", 4},   {"ffn_norm", "post_attention_layernorm", 0},
            {"ffn_gate_inp", "mlp.gate", 5},
        };
        for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
            int64_t rows = H, cols = 0;
            int type = w;
            switch (lin[i].kind) {
            case 1: rows = nq, cols = H; break;
            case 2: rows = nkv, cols = H; break;
            case 3: rows = H, cols = nq; break;
            case 4: rows = D; break;
            case 5: rows = E, cols = H, type = GGML_F32; break;
            }
            snprintf(g, sizeof g, "blk.%lld.%s.weight", (long long)l, lin[i].g);
            snprintf(h, sizeof h, "model.layers.%lld.%s.weight", (long long)l, lin[i].h);
            if (add1(p, g, type, h, rows, cols)) return -1;
        }
        static const struct { const char *g, *h; int down; } exps[] = {
            {"ffn_gate_exps", "gate_proj", 0}, {"ffn_up_exps", "up_proj", 0},
            {"ffn_down_exps", "down_proj", 1},
        };
        for (size_t i = 0; i < 3; i++) {
            int64_t rows = exps[i].down ? H : I, cols = exps[i].down ? I : H;
            snprintf(g, sizeof g, "blk.%lld.%s.weight", (long long)l, exps[i].g);
            gg_tensor *t = add(p, g, w, (int)E, rows, cols);
            if (!t) return -1;
            for (int64_t e = 0; e < E; e++) {
                snprintf(h, sizeof h, "model.layers.%lld.mlp.experts.%lld.%s.weight",
                         (long long)l, (long long)e, exps[i].h);
                if (!(t->src[e] = need(p, h, rows, cols))) return -1;
            }
        }
    }
    if (add1(p, "output_norm.weight", GGML_F32, "model.norm.weight", H, 0)) return -1;
    if (!c->tie_word_embeddings && add1(p, "output.weight", w, "lm_head.weight", V, H)) return -1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Metadata: the model's hyper-parameters                                    */
/* ------------------------------------------------------------------------ */

static const char *base_name(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    const char *s = dir + n;
    while (s > dir && s[-1] != '/') s--;
    static char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(dir + n - s), s);
    return name;
}

static void hparams(kvs *k, const plan *p) {
    const moe8_config *c = p->cfg;
    kv_str(k, "general.architecture", "qwen3moe");
    kv_str(k, "general.type", "model");
    kv_str(k, "general.name", base_name(p->dir));
    kv_u32(k, "general.file_type",
           p->wtype == GGML_Q8_0 ? FTYPE_Q8_0 : p->wtype == GGML_F16 ? FTYPE_F16 : FTYPE_BF16);
    kv_u32(k, "general.quantization_version", 2);
    kv_u32(k, "general.alignment", GGUF_ALIGN);
    kv_u32(k, "qwen3moe.block_count", (uint32_t)p->n_layers);
    kv_u32(k, "qwen3moe.context_length", (uint32_t)c->max_position_embeddings);
    kv_u32(k, "qwen3moe.embedding_length", (uint32_t)c->hidden_size);
    kv_u32(k, "qwen3moe.feed_forward_length", (uint32_t)c->intermediate_size);
    kv_u32(k, "qwen3moe.attention.head_count", (uint32_t)c->num_attention_heads);
    kv_u32(k, "qwen3moe.attention.head_count_kv", (uint32_t)c->num_key_value_heads);
    kv_u32(k, "qwen3moe.attention.key_length", (uint32_t)c->head_dim);
    kv_u32(k, "qwen3moe.attention.value_length", (uint32_t)c->head_dim);
    kv_u32(k, "qwen3moe.rope.dimension_count", (uint32_t)c->head_dim);
    kv_f32(k, "qwen3moe.rope.freq_base", (float)c->rope_theta);
    kv_f32(k, "qwen3moe.attention.layer_norm_rms_epsilon", (float)c->rms_norm_eps);
    kv_u32(k, "qwen3moe.expert_count", (uint32_t)c->num_experts);
    kv_u32(k, "qwen3moe.expert_used_count", (uint32_t)c->num_experts_per_tok);
    kv_u32(k, "qwen3moe.expert_feed_forward_length", (uint32_t)c->moe_intermediate_size);
}

/* Refuse what llama.cpp's qwen3moe cannot run as moe8 does. */
static int check_config(const plan *p) {
    const moe8_config *c = p->cfg;
    if (c->arch != MOE8_ARCH_QWEN3_MOE)
        return fail("'%s/config.json': model_type '%s': only qwen3_moe is exported (as llama.cpp's "
                    "qwen3moe)", p->dir, c->model_type);
    if (c->num_experts <= 0)
        return fail("'%s/config.json': num_experts is 0: a dense model is not a qwen3moe", p->dir);
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        if (!moe8_config_is_moe_layer(c, l))
            return fail("'%s/config.json': layer %lld has a dense MLP (mlp_only_layers / "
                        "decoder_sparse_step): llama.cpp's qwen3moe has MoE layers only",
                        p->dir, (long long)l);
    if (moe8_config_get_int(c, "qkv_bias", NULL))
        return fail("'%s/config.json': q/k/v biases: llama.cpp's qwen3moe has none", p->dir);
    if (c->num_hidden_layers > UINT32_MAX || c->vocab_size > INT32_MAX ||
        c->max_position_embeddings > UINT32_MAX)
        return fail("'%s/config.json': sizes beyond GGUF's u32 fields", p->dir);
    if (!c->norm_topk_prob)
        fprintf(stderr, "moe8 " CMD ": warning: norm_topk_prob is false, but llama.cpp's qwen3moe "
                        "always renormalizes the top-k weights: its outputs will differ\n");
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Metadata: the tokenizer                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    cJSON *json, *config;       /* tokenizer.json, tokenizer_config.json (may be NULL) */
    const char **text;          /* [n_vocab] token strings (into json), NULL = padding */
    unsigned char *type;        /* [n_vocab] TOK_* */
    int64_t n_vocab;
} vocab;

static cJSON *read_json(const char *path, int required) {
    moe8_error err;
    char *buf = NULL;
    size_t len = 0;
    moe8_status s = moe8_read_file(path, TOKENIZER_MAX_BYTES, &buf, &len, &err);
    if (s != MOE8_OK) {
        if (required || s != MOE8_ERR_NOT_FOUND) fail("%s", err.message);
        return NULL;
    }
    cJSON *j = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!j) fail("'%s': not valid JSON", path);
    return j;
}

/* The id of a tokenizer_config.json special token ("<|im_end|>" or
 * {"content": ...}), or -1. */
static int64_t special_id(const vocab *v, const char *key) {
    cJSON *t = v->config ? cJSON_GetObjectItemCaseSensitive(v->config, key) : NULL;
    if (cJSON_IsObject(t)) t = cJSON_GetObjectItemCaseSensitive(t, "content");
    if (!cJSON_IsString(t)) return -1;
    for (int64_t i = 0; i < v->n_vocab; i++)
        if (v->text[i] && !strcmp(v->text[i], t->valuestring)) return i;
    return -1;
}

static int load_vocab(vocab *v, const char *dir, int64_t n_vocab) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (!(v->json = read_json(path, 1))) return -1;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    v->config = read_json(path, 0);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);

    cJSON *model = cJSON_GetObjectItemCaseSensitive(v->json, "model");
    cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "type");
    cJSON *dec = cJSON_GetObjectItemCaseSensitive(v->json, "decoder");
    cJSON *dtype = cJSON_GetObjectItemCaseSensitive(dec, "type");
    if (!cJSON_IsString(mtype) || strcmp(mtype->valuestring, "BPE"))
        return fail("'%s': model.type is not \"BPE\"", path);
    if (!cJSON_IsString(dtype) || strcmp(dtype->valuestring, "ByteLevel"))
        return fail("'%s': decoder.type is not \"ByteLevel\": only byte-level BPE (gpt2-style) "
                    "tokenizers are exported", path);
    cJSON *vj = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vj)) return fail("'%s': model.vocab is not an object", path);

    v->n_vocab = n_vocab;
    v->text = calloc((size_t)n_vocab, sizeof *v->text);
    v->type = malloc((size_t)n_vocab);
    if (!v->text || !v->type) return fail("out of memory");
    memset(v->type, TOK_UNUSED, (size_t)n_vocab);

    cJSON *e;
    cJSON_ArrayForEach(e, vj) {
        double id = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (id < 0 || id >= (double)n_vocab || id != (double)(int64_t)id)
            return fail("'%s': model.vocab['%s'] = %g is not an id below vocab_size %lld", path,
                        e->string, id, (long long)n_vocab);
        if (v->text[(int64_t)id])
            return fail("'%s': id %lld appears twice in model.vocab", path, (long long)id);
        v->text[(int64_t)id] = e->string;
        v->type[(int64_t)id] = TOK_NORMAL;
    }
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(v->json, "added_tokens")) {
        cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(content) || id->valuedouble < 0 ||
            id->valuedouble >= (double)n_vocab)
            return fail("'%s': an added token without a content string or an id below "
                        "vocab_size %lld", path, (long long)n_vocab);
        int64_t i = (int64_t)id->valuedouble;
        v->text[i] = content->valuestring;
        v->type[i] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special"))
                         ? TOK_CONTROL : TOK_USER_DEFINED;
    }
    return 0;
}

static int tokenizer_kvs(kvs *k, vocab *v, const plan *p) {
    char pad[32];
    cJSON *merges = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(v->json, "model"), "merges");
    if (!cJSON_IsArray(merges))
        return fail("'%s/tokenizer.json': model.merges is not an array", p->dir);

    kv_str(k, "tokenizer.ggml.model", "gpt2");
    kv_str(k, "tokenizer.ggml.pre", "qwen2");
    kv_arr(k, "tokenizer.ggml.tokens", GV_STR, (uint64_t)v->n_vocab);
    for (int64_t i = 0; i < v->n_vocab; i++) {
        if (v->text[i]) {
            put_str(&k->b, v->text[i]);
        } else {
            snprintf(pad, sizeof pad, "[PAD%lld]", (long long)i);
            put_str(&k->b, pad);
        }
    }
    kv_arr(k, "tokenizer.ggml.token_type", GV_I32, (uint64_t)v->n_vocab);
    for (int64_t i = 0; i < v->n_vocab; i++) put_u32(&k->b, v->type[i]);

    /* merges: "a b" strings, or (newer tokenizers) ["a", "b"] pairs */
    kv_arr(k, "tokenizer.ggml.merges", GV_STR, (uint64_t)cJSON_GetArraySize(merges));
    cJSON *m;
    int mi = 0;
    cJSON_ArrayForEach(m, merges) {
        if (cJSON_IsString(m)) {
            put_str(&k->b, m->valuestring);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
            const char *a = cJSON_GetArrayItem(m, 0)->valuestring;
            const char *b = cJSON_GetArrayItem(m, 1)->valuestring;
            size_t na = strlen(a), nb = strlen(b);
            put_u64(&k->b, na + 1 + nb);
            put(&k->b, a, na);
            put(&k->b, " ", 1);
            put(&k->b, b, nb);
        } else {
            return fail("'%s/tokenizer.json': model.merges[%d] is neither \"a b\" nor [\"a\", \"b\"]",
                        p->dir, mi);
        }
        mi++;
    }

    /* special ids as convert_hf_to_gguf.py's SpecialVocab: tokenizer_config.json's
     * tokens, else config.json's ids */
    int64_t bos = special_id(v, "bos_token"), eos = special_id(v, "eos_token");
    int64_t padid = special_id(v, "pad_token");
    if (bos < 0) bos = p->cfg->bos_token_id;
    if (eos < 0 && p->cfg->n_eos_ids) eos = p->cfg->eos_token_ids[0];
    if (bos >= 0 && bos < v->n_vocab) kv_u32(k, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (eos >= 0 && eos < v->n_vocab) kv_u32(k, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    if (padid >= 0) kv_u32(k, "tokenizer.ggml.padding_token_id", (uint32_t)padid);
    cJSON *add_bos = v->config ? cJSON_GetObjectItemCaseSensitive(v->config, "add_bos_token") : NULL;
    kv_bool(k, "tokenizer.ggml.add_bos_token", cJSON_IsTrue(add_bos));
    cJSON *tmpl = v->config ? cJSON_GetObjectItemCaseSensitive(v->config, "chat_template") : NULL;
    if (cJSON_IsString(tmpl)) kv_str(k, "tokenizer.chat_template", tmpl->valuestring);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Tensor data                                                               */
/* ------------------------------------------------------------------------ */

/* One row of n fp32 values (n a multiple of 32) as Q8_0 blocks. */
static void q8_0_row(unsigned char *dst, const float *x, int64_t n) {
    for (int64_t b = 0; b < n; b += Q8_0_BLOCK, dst += Q8_0_BYTES) {
        float amax = 0.0f;
        for (int i = 0; i < Q8_0_BLOCK; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t h = moe8_f32_to_f16(d);
        memcpy(dst, &h, 2);
        for (int i = 0; i < Q8_0_BLOCK; i++) dst[2 + i] = (unsigned char)(int8_t)roundf(x[b + i] * id);
    }
}

typedef struct {
    FILE *f;
    const char *path;           /* the temporary file, for messages */
    float *row;                 /* [max row length] */
    unsigned char *out;         /* [max row bytes] */
    uint64_t done, total;       /* bytes of tensor data */
    int tty, last_pct;
} writer;

static int wr(writer *w, const void *d, size_t n) {
    if (n && fwrite(d, 1, n, w->f) != n) return fail("cannot write '%s': %s", w->path, strerror(errno));
    return 0;
}

static int pad_to(writer *w, uint64_t at, uint64_t *pos) {
    static const unsigned char zero[GGUF_ALIGN];
    if (at < *pos || at - *pos > GGUF_ALIGN) return fail("internal: bad padding");
    if (wr(w, zero, (size_t)(at - *pos))) return -1;
    *pos = at;
    return 0;
}

static void progress(writer *w) {
    int pct = w->total ? (int)(100.0 * (double)w->done / (double)w->total) : 100;
    if (!w->tty || pct == w->last_pct) return;
    w->last_pct = pct;
    fprintf(stderr, "\rmoe8 " CMD ": writing %3d%% (%.0f / %.0f MiB)", pct,
            (double)w->done / 1048576.0, (double)w->total / 1048576.0);
}

/* One source tensor's rows in the GGUF type. */
static int write_src(writer *w, const moe8_st *st, const gg_tensor *g, const moe8_tensor *t) {
    int64_t cols = (int64_t)g->ne[0], rows = (int64_t)g->ne[1];
    size_t es = moe8_dtype_size(t->dtype), rb = (size_t)type_row_bytes(g->type, g->ne[0]);
    int copy = (g->type == GGML_F32 && t->dtype == MOE8_DT_F32) ||
               (g->type == GGML_F16 && t->dtype == MOE8_DT_F16) ||
               (g->type == GGML_BF16 && t->dtype == MOE8_DT_BF16);
    moe8_error err;
    if (copy) {
        if (wr(w, t->data, t->n_bytes)) return -1;
    } else {
        for (int64_t r = 0; r < rows; r++) {
            const unsigned char *src = (const unsigned char *)t->data + (size_t)r * (size_t)cols * es;
            if (moe8_convert_to_f32(w->row, src, t->dtype, (size_t)cols, &err) != MOE8_OK)
                return fail("tensor '%s': %s", t->name, err.message);
            for (int64_t i = 0; i < cols; i++)
                if (!isfinite(w->row[i]))
                    return fail("tensor '%s': row %lld column %lld is not finite (%g)", t->name,
                                (long long)r, (long long)i, (double)w->row[i]);
            if (g->type == GGML_Q8_0) {
                q8_0_row(w->out, w->row, cols);
            } else if (g->type == GGML_F32) {
                memcpy(w->out, w->row, rb);
            } else {
                uint16_t *o = (uint16_t *)(void *)w->out;
                for (int64_t i = 0; i < cols; i++)
                    o[i] = g->type == GGML_F16 ? moe8_f32_to_f16(w->row[i]) : moe8_f32_to_bf16(w->row[i]);
            }
            if (wr(w, w->out, rb)) return -1;
        }
    }
    moe8_st_release(st, t); /* the mapped pages are not needed again */
    w->done += rb * (uint64_t)rows;
    progress(w);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The command                                                               */
/* ------------------------------------------------------------------------ */

#define SYNOPSIS "moe8 export-gguf -m DIR -o FILE.gguf [--type q8_0|f16|bf16] [--layers N] [--force]"

/* Refuse an output that is a file of the model folder, or exists without --force. */
static int check_output(const char *dir, const char *out, int force) {
    struct stat so, si;
    if (stat(out, &so) != 0) return 0;
    if (S_ISDIR(so.st_mode)) return fail("'%s' is a folder", out);
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[4096];
    while (d && (e = readdir(d))) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
            /* the message before closedir, which frees e */
            fail("'%s' is '%s' of the model folder: refusing to overwrite the input", out,
                 e->d_name);
            closedir(d);
            return -1;
        }
    }
    if (d) closedir(d);
    if (!force) return fail("'%s' exists (--force replaces it)", out);
    return 0;
}

static int load_config(const char *dir, moe8_config *cfg) {
    char path[4096];
    char *buf = NULL;
    size_t len = 0;
    moe8_error err;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (moe8_read_file(path, (size_t)16 << 20, &buf, &len, &err) != MOE8_OK ||
        moe8_config_parse(buf, len, path, cfg, &err) != MOE8_OK) {
        free(buf);
        return fail("%s", err.message);
    }
    free(buf);
    return 0;
}

/* The header, then every tensor's data, into the open temporary file. */
static int write_file(writer *w, plan *p, kvs *k) {
    bytes info = {0};
    uint64_t off = 0, maxcols = 0;
    for (int i = 0; i < p->n; i++) {
        gg_tensor *g = &p->t[i];
        g->offset = off;
        off = (off + g->n_bytes + GGUF_ALIGN - 1) / GGUF_ALIGN * GGUF_ALIGN;
        put_str(&info, g->name);
        put_u32(&info, (uint32_t)g->n_dims);
        for (int d = 0; d < g->n_dims; d++) put_u64(&info, g->ne[d]);
        put_u32(&info, (uint32_t)g->type);
        put_u64(&info, g->offset);
        if (g->ne[0] > maxcols) maxcols = g->ne[0];
        w->total += g->n_bytes;
    }
    int rc = -1;
    bytes head = {0};
    put(&head, "GGUF", 4);
    put_u32(&head, 3);
    put_u64(&head, (uint64_t)p->n);
    put_u64(&head, k->n);
    w->row = malloc(maxcols * sizeof *w->row);
    w->out = malloc(maxcols * sizeof(float));
    if (info.oom || head.oom || k->b.oom || !w->row || !w->out) {
        fail("out of memory");
        goto out;
    }
    uint64_t pos = 0;
    if (wr(w, head.p, head.n) || wr(w, k->b.p, k->b.n) || wr(w, info.p, info.n)) goto out;
    pos = head.n + k->b.n + info.n;
    uint64_t data0 = (pos + GGUF_ALIGN - 1) / GGUF_ALIGN * GGUF_ALIGN;
    if (pad_to(w, data0, &pos)) goto out;
    for (int i = 0; i < p->n; i++) {
        gg_tensor *g = &p->t[i];
        if (pad_to(w, data0 + g->offset, &pos)) goto out;
        for (int s = 0; s < g->n_src; s++)
            if (write_src(w, p->st, g, g->src[s])) goto out;
        pos += g->n_bytes;
    }
    if (pad_to(w, data0 + off, &pos)) goto out;
    rc = 0;
out:
    free(info.p);
    free(head.p);
    return rc;
}

int cmd_export_gguf(int argc, char **argv) {
    const char *dir = NULL, *out = NULL;
    int force = 0, n_layers = 0, type = 0;
    const cli_opt opts[] = {
        {"-m", NULL, CLI_STR, &dir, .arg = "DIR", .help = "float Qwen3-MoE model folder (config.json, "
         "*.safetensors,\ntokenizer.json; only read)"},
        {"-o", NULL, CLI_STR, &out, .arg = "FILE", .help = "the GGUF file for llama.cpp (architecture "
         "qwen3moe); written to\nFILE.tmp.<pid>, then renamed"},
        {"--type", NULL, CLI_CHOICE, &type, .choices = "q8_0,f16,bf16", .arg = "T",
         .help = "matrices as q8_0 (default), f16 or bf16; norms and the router\nstay f32"},
        {"--layers", NULL, CLI_INT, &n_layers, 1, 512, .arg = "N",
         .help = "only the first N layers (default all): two files of different\n"
         "depths give a per-layer time by difference"},
        {"--force", NULL, CLI_FLAG, &force,
         .help = "replace an existing FILE (never a file of the model folder)"},
        {0},
    };
    const int prc = cli_parse(CMD, SYNOPSIS, opts, NULL, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;
    if (!dir || !out) {
        cli_usage(stderr, SYNOPSIS, opts, NULL);
        return 2;
    }
    static const int wtypes[3] = {GGML_Q8_0, GGML_F16, GGML_BF16};
    plan p = {.dir = dir};
    p.wtype = wtypes[type];

    moe8_config cfg;
    moe8_error err;
    vocab v = {0};
    kvs k = {0};
    writer w = {.tty = isatty(2), .last_pct = -1};
    char tmp[4096] = "";
    int rc = 1, fd = -1;
    if (check_output(dir, out, force) || load_config(dir, &cfg)) goto out;
    p.cfg = &cfg;
    if (check_config(&p)) goto out;
    p.n_layers = cfg.num_hidden_layers;
    if (n_layers > p.n_layers) {
        fail("--layers %d: the model has %lld layers", n_layers, (long long)p.n_layers);
        goto out;
    }
    if (n_layers) p.n_layers = n_layers;
    if (moe8_st_open(dir, &p.st, &err) != MOE8_OK) {
        cli_fail(CMD, &err);
        goto out;
    }
    if (make_plan(&p) || load_vocab(&v, dir, cfg.vocab_size)) goto out;
    hparams(&k, &p);
    if (tokenizer_kvs(&k, &v, &p)) goto out;

    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid()) >= sizeof tmp) {
        fail("'%s': path too long", out);
        tmp[0] = 0;
        goto out;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0 || !(w.f = fdopen(fd, "wb"))) {
        fail("cannot create '%s': %s", tmp, strerror(errno));
        if (fd < 0) tmp[0] = 0;
        goto out;
    }
    fd = -1;
    w.path = tmp;
    setvbuf(w.f, NULL, _IOFBF, (size_t)4 << 20);
    if (write_file(&w, &p, &k)) goto out;
    if (fflush(w.f) || fsync(fileno(w.f))) {
        fail("cannot write '%s': %s", tmp, strerror(errno));
        goto out;
    }
    int cerr = fclose(w.f);
    w.f = NULL;
    if (cerr) {
        fail("cannot write '%s': %s", tmp, strerror(errno));
        goto out;
    }
    if (rename(tmp, out)) {
        fail("cannot rename '%s' to '%s': %s", tmp, out, strerror(errno));
        goto out;
    }
    tmp[0] = 0;
    if (w.tty) fputc('\n', stderr);
    printf("wrote %s: %d tensors, %llu metadata keys, %.1f MiB of %s matrices (qwen3moe, %lld "
           "layers, %lld experts)\n",
           out, p.n, (unsigned long long)k.n, (double)w.total / 1048576.0, type_name(p.wtype),
           (long long)p.n_layers, (long long)cfg.num_experts);
    rc = 0;
out:
    if (w.f) fclose(w.f);
    if (fd >= 0) close(fd);
    if (tmp[0]) unlink(tmp);
    free(w.row);
    free(w.out);
    free(k.b.p);
    free(v.text);
    free(v.type);
    cJSON_Delete(v.json);
    cJSON_Delete(v.config);
    for (int i = 0; i < p.n; i++) free(p.t[i].src);
    free(p.t);
    if (p.st) moe8_st_free(p.st);
    return rc;
}
