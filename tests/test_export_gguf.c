/*
 * test_export_gguf.c — `moe8 export-gguf` read back by the test's own GGUF
 * reader (header, metadata key/values, tensor infos, data at the aligned
 * offset; it shares no code with the exporter). The model: moe8's tiny
 * qwen3_moe preset with its dense layer 0 dropped (llama.cpp's qwen3moe has
 * MoE layers only), rewritten here through the public safetensors writer.
 * Checked: magic/version/alignment, architecture and every hyper-parameter
 * key against config.json (read with cJSON, not moe8_config), every tensor's
 * name, type and ggml shape (the row-major shape reversed, experts stacked),
 * and its data against the source weights: F32/F16/BF16 bit-equal to a
 * round-to-nearest-even conversion written here (in double arithmetic), Q8_0
 * blocks with d = f16(amax / 127) and codes roundf(x / d) as ggml's
 * quantize_row_q8_0_ref, decoding to within half a step (a BF16 model as
 * f16/bf16/q8_0; an F32 one with tied embeddings as f16/bf16, where rounding
 * happens and output.weight is absent; F32 sources' two vocabulary matrices
 * every 16th row, for time; under the sanitizers every type's, the release
 * build checking the rest); the token list,
 * token types and merges against tokenizer.json; --layers N; bad inputs
 * (W8A8 folder, missing folder, existing output without --force, output
 * equal to a file of the model folder, a NaN weight found mid-write) each a
 * non-zero exit naming the file/tensor with the existing output untouched;
 * no temporary file left in the output folder. glm4_moe as glm4moe and
 * minimax_m2 as minimax-m2 (their tiny presets) the same way, against
 * llama.cpp's loaders' names, shapes and keys; qwen3_next as qwen3next with
 * the converter's transforms (1 + w norms, -exp(A_log), in_proj_qkvz split
 * into attn_qkv / attn_gate, conv1d squeezed); qwen3_5_moe as qwen35moe with
 * its value heads reordered grouped -> tiled (the converter's
 * _reorder_v_heads, written here: rows, conv channels, 1-D values and
 * out_proj's columns), rope.dimension_sections, pre "qwen35", and a copy
 * with stacked experts giving the same tensors; gpt_oss as gpt-oss (its tiny
 * preset: MXFP4 experts repacked, every value decoded by ggml's convention
 * written here against the checkpoint's and every scale byte kept; Q8_0 /
 * BF16 other matrices; sinks, biases, the split gate / up and their biases;
 * a float-experts folder of the same seed as BF16, the same values; YaRN
 * and window keys; refusals of what llama.cpp fixes); whether llama.cpp runs
 * them as moe8 does: test_export_gguf_llamacpp.c. `--part
 * qwen3|glm|mm|q3n|q35|oss` runs one family's checks (ctest runs the six side
 * by side).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "test.h"

#include "moe8.h"

#define TOK MOE8_TOKENIZER_DIR
#ifndef MOE8_TEST_SANITIZE
#define MOE8_TEST_SANITIZE ""
#endif
#define FMT(buf, ...)                                                             \
    do {                                                                          \
        if (snprintf(buf, sizeof buf, __VA_ARGS__) >= (int)sizeof buf) abort();   \
    } while (0)

/* ggml types and GGUF value types (ggml's gguf.h) */
enum { T_F32 = 0, T_F16 = 1, T_Q8_0 = 8, T_BF16 = 30 };
enum { V_U8 = 0, V_I8, V_U16, V_I16, V_U32, V_I32, V_F32, V_BOOL, V_STR, V_ARR, V_U64, V_I64,
       V_F64 };

/* ---- the test's GGUF reader ------------------------------------------------ */

typedef struct {
    const char *key;            /* into the buffer, key_len bytes */
    size_t key_len;
    uint32_t type;
    size_t at;                  /* offset of the value (arrays: of the first element) */
    uint32_t arr_type;
    uint64_t arr_n;
} gkv;

typedef struct {
    char name[128];
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
    uint64_t offset;            /* from the data section */
} gti;

typedef struct {
    unsigned char *b;
    size_t n, pos;
    int bad;                    /* a read went past the end or a field was absurd */
    uint32_t version, align;
    uint64_t n_tensors, n_kv;
    gkv *kv;
    gti *ti;
    size_t data0;
} gguf;

static const unsigned char *rd(gguf *g, size_t n) {
    if (g->bad || n > g->n - g->pos) {
        g->bad = 1;
        return NULL;
    }
    g->pos += n;
    return g->b + g->pos - n;
}
static uint32_t rd_u32(gguf *g) {
    uint32_t v = 0;
    const unsigned char *p = rd(g, 4);
    if (p) memcpy(&v, p, 4);
    return v;
}
static uint64_t rd_u64(gguf *g) {
    uint64_t v = 0;
    const unsigned char *p = rd(g, 8);
    if (p) memcpy(&v, p, 8);
    return v;
}
/* A string: its bytes (not NUL-terminated) and length. */
static const char *rd_str(gguf *g, size_t *len) {
    uint64_t n = rd_u64(g);
    const unsigned char *p = rd(g, (size_t)n);
    *len = p ? (size_t)n : 0;
    return (const char *)p;
}

static size_t scalar_size(uint32_t t) {
    switch (t) {
    case V_U8: case V_I8: case V_BOOL: return 1;
    case V_U16: case V_I16: return 2;
    case V_U32: case V_I32: case V_F32: return 4;
    case V_U64: case V_I64: case V_F64: return 8;
    default: return 0;
    }
}

static void skip_value(gguf *g, uint32_t t) {
    size_t len;
    if (t == V_STR) rd_str(g, &len);
    else if (scalar_size(t)) rd(g, scalar_size(t));
    else g->bad = 1;
}

static void gguf_free(gguf *g) {
    if (g->b) munmap(g->b, g->n ? g->n : 1);
    free(g->kv);
    free(g->ti);
    memset(g, 0, sizeof *g);
}

/* Parse the file, mapped (read through the page cache the export filled:
 * a copy into the heap cost as much system time as the checks' user time);
 * 0 on success. */
static int gguf_read(gguf *g, const char *path) {
    struct stat sb;
    int fd = open(path, O_RDONLY);
    memset(g, 0, sizeof *g);
    g->align = 32;
    if (fd < 0) return -1;
    if (fstat(fd, &sb) == 0 && sb.st_size > 0) {
        void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p != MAP_FAILED) g->b = p, g->n = (size_t)sb.st_size;
    }
    close(fd);
    if (!g->b) return -1;
    const unsigned char *m = rd(g, 4);
    if (!m || memcmp(m, "GGUF", 4)) return -1;
    g->version = rd_u32(g);
    g->n_tensors = rd_u64(g);
    g->n_kv = rd_u64(g);
    if (g->bad || g->n_tensors > 100000 || g->n_kv > 100000) return -1;
    g->kv = calloc(g->n_kv + 1, sizeof *g->kv);
    g->ti = calloc(g->n_tensors + 1, sizeof *g->ti);
    for (uint64_t i = 0; i < g->n_kv && !g->bad; i++) {
        gkv *k = &g->kv[i];
        k->key = rd_str(g, &k->key_len);
        k->type = rd_u32(g);
        if (k->type == V_ARR) {
            k->arr_type = rd_u32(g);
            k->arr_n = rd_u64(g);
            k->at = g->pos;
            for (uint64_t j = 0; j < k->arr_n && !g->bad; j++) skip_value(g, k->arr_type);
        } else {
            k->at = g->pos;
            skip_value(g, k->type);
        }
        if (k->key_len == 17 && !memcmp(k->key, "general.alignment", 17) && k->type == V_U32)
            memcpy(&g->align, g->b + k->at, 4);
    }
    for (uint64_t i = 0; i < g->n_tensors && !g->bad; i++) {
        gti *t = &g->ti[i];
        size_t len;
        const char *s = rd_str(g, &len);
        if (len >= sizeof t->name) g->bad = 1;
        if (g->bad) break;
        memcpy(t->name, s, len);
        t->n_dims = rd_u32(g);
        if (t->n_dims > 4) g->bad = 1;
        for (uint32_t d = 0; d < t->n_dims && !g->bad; d++) t->ne[d] = rd_u64(g);
        t->type = rd_u32(g);
        t->offset = rd_u64(g);
    }
    if (g->bad || !g->align) return -1;
    g->data0 = (g->pos + g->align - 1) / g->align * g->align;
    for (size_t i = g->pos; i < g->data0 && i < g->n; i++)
        if (g->b[i]) return -1; /* the padding is zeros */
    return g->data0 <= g->n ? 0 : -1;
}

static const gkv *kv_find(const gguf *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (g->kv[i].key_len == strlen(key) && !memcmp(g->kv[i].key, key, g->kv[i].key_len))
            return &g->kv[i];
    return NULL;
}
/* The u32 value of key, or -1 when absent or of another type. */
static int64_t kv_u32(const gguf *g, const char *key) {
    const gkv *k = kv_find(g, key);
    uint32_t v;
    if (!k || k->type != V_U32) return -1;
    memcpy(&v, g->b + k->at, 4);
    return v;
}
static double kv_f32(const gguf *g, const char *key) {
    const gkv *k = kv_find(g, key);
    float v;
    if (!k || k->type != V_F32) return NAN;
    memcpy(&v, g->b + k->at, 4);
    return v;
}
static int kv_str_is(const gguf *g, const char *key, const char *want) {
    const gkv *k = kv_find(g, key);
    uint64_t n;
    if (!k || k->type != V_STR) return 0;
    memcpy(&n, g->b + k->at, 8);
    return n == strlen(want) && !memcmp(g->b + k->at + 8, want, n);
}
static const gti *ti_find(const gguf *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->ti[i].name, name)) return &g->ti[i];
    return NULL;
}

/* ---- conversions written here (double arithmetic, not bit tricks) --------- */

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Round |f| to a float with `mant` stored mantissa bits, exponent bias `bias`,
 * biased exponents 1..max_exp-1 normal; round to nearest even. */
static uint32_t ref_round(float f, int mant, int bias, int max_exp) {
    uint32_t sign = f32_bits(f) >> 31;
    double a = fabs((double)f), min_normal = ldexp(1.0, 1 - bias), q;
    uint32_t r;
    int e;
    if (isnan(f)) return 0xffffffffu; /* the sources hold no NaN: never equal */
    if (a < min_normal) {
        q = nearbyint(ldexp(a, bias - 1 + mant)); /* units of the smallest subnormal */
        r = (uint32_t)q;                           /* 1 << mant: the smallest normal */
    } else {
        frexp(a, &e);                              /* a in [2^(e-1), 2^e) */
        q = nearbyint(ldexp(a, mant + 1 - e));     /* [2^mant, 2^(mant+1)] */
        int be = e - 1 + bias;
        if (q == ldexp(1.0, mant + 1)) q /= 2, be++;
        if (be >= max_exp) r = (uint32_t)max_exp << mant; /* infinity */
        else r = ((uint32_t)be << mant) | ((uint32_t)q - (1u << mant));
    }
    return (sign << (mant + (max_exp == 31 ? 5 : 8))) | r;
}
static uint16_t ref_f16(float f) { return (uint16_t)ref_round(f, 10, 15, 31); }
static uint16_t ref_bf16(float f) { return (uint16_t)ref_round(f, 7, 127, 255); }
static double ref_f16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return (h & 0x8000) ? -v : v;
}

/* ref_f16 and ref_bf16 of every BF16 bit pattern (filled once in main). */
static uint16_t f16_of_bf16[65536], bf16_of_bf16[65536];
static void fill_tables(void) {
    for (uint32_t u = 0; u < 65536; u++) {
        float x = bits_f32(u << 16);
        f16_of_bf16[u] = isnan(x) ? 0xffff : ref_f16(x);
        bf16_of_bf16[u] = isnan(x) ? 0xffff : ref_bf16(x);
    }
}

/* Element i of a float source tensor as f32. */
static float src_at(const moe8_tensor *t, int64_t i) {
    if (t->dtype == MOE8_DT_BF16) return bits_f32((uint32_t)((const uint16_t *)t->data)[i] << 16);
    if (t->dtype == MOE8_DT_F16) return (float)ref_f16_value(((const uint16_t *)t->data)[i]);
    return ((const float *)t->data)[i];
}

/* ---- model folders ------------------------------------------------------------ */

/* A pure-MoE qwen3_moe folder at `dst`: make the tiny preset with n_moe + 1
 * layers at `src` (layer 0 dense; make 0: `src` is already there), drop
 * layer 0, renumber the rest, set mlp_only_layers []. poison: one NaN in the
 * last expert's down_proj; tie: no lm_head, tie_word_embeddings true. */
static void make_moe_model(const char *src, const char *dst, int n_moe, moe8_dtype dt,
                           int poison, int make, int tie) {
    moe8_make_model_params p = moe8_make_model_params_default();
    moe8_st *st = NULL;
    moe8_st_writer *w = NULL;
    moe8_error e;
    char path[4096], name[256], cmd[16384], poison_name[256];
    p.n_layers = n_moe + 1;
    p.dtype = dt;
    p.tokenizer_dir = TOK;
    p.force = 1;
    if (make && moe8_make_model(&p, src, &e) != MOE8_OK) {
        fprintf(stderr, "make-model %s: %s\n", src, e.message);
        exit(2);
    }
    FMT(cmd, "rm -rf '%s' && mkdir -p '%s' && cp '%s/tokenizer.json' '%s/tokenizer_config.json' "
        "'%s/generation_config.json' '%s/'", dst, dst, src, src, src, dst);
    if (test_run(cmd) != 0) exit(2);
    FMT(poison_name, "model.layers.%d.mlp.experts.15.down_proj.weight", n_moe - 1);
    FMT(path, "%s/model.safetensors", dst);
    if (moe8_st_open(src, &st, &e) != MOE8_OK || moe8_st_writer_open(path, &w, &e) != MOE8_OK) {
        fprintf(stderr, "rewrite %s: %s\n", dst, e.message);
        exit(2);
    }
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < moe8_st_count(st); i++) {
            const moe8_tensor *t = moe8_st_get(st, i);
            int l, n = 0;
            if (sscanf(t->name, "model.layers.%d.%n", &l, &n) == 1 && n > 0) {
                if (l == 0 || l > n_moe) continue;
                FMT(name, "model.layers.%d.%s", l - 1, t->name + n);
            } else {
                if (tie && !strcmp(t->name, "lm_head.weight")) continue;
                FMT(name, "%s", t->name);
            }
            moe8_status s;
            if (pass == 0) {
                s = moe8_st_writer_declare(w, name, t->dtype, t->n_dims, t->shape, &e);
            } else if (poison && !strcmp(name, poison_name)) {
                unsigned char *b = malloc(t->n_bytes);
                memcpy(b, t->data, t->n_bytes);
                if (t->dtype == MOE8_DT_BF16) ((uint16_t *)b)[77] = 0x7fc0;
                else ((float *)b)[77] = NAN;
                s = moe8_st_writer_write(w, name, b, t->n_bytes, &e);
                free(b);
            } else {
                s = moe8_st_writer_write(w, name, t->data, t->n_bytes, &e);
            }
            if (s != MOE8_OK) {
                fprintf(stderr, "rewrite %s: %s\n", name, e.message);
                exit(2);
            }
        }
    }
    if (moe8_st_writer_finish(w, &e) != MOE8_OK) {
        fprintf(stderr, "rewrite %s: %s\n", dst, e.message);
        exit(2);
    }
    moe8_st_writer_free(w);
    moe8_st_free(st);

    size_t len = 0;
    FMT(path, "%s/config.json", src);
    unsigned char *b = test_slurp(path, &len);
    cJSON *c = b ? cJSON_ParseWithLength((const char *)b, len) : NULL;
    if (!c) exit(2);
    cJSON_ReplaceItemInObject(c, "num_hidden_layers", cJSON_CreateNumber(n_moe));
    cJSON_ReplaceItemInObject(c, "max_window_layers", cJSON_CreateNumber(n_moe));
    cJSON_ReplaceItemInObject(c, "mlp_only_layers", cJSON_CreateArray());
    cJSON_ReplaceItemInObject(c, "tie_word_embeddings", cJSON_CreateBool(tie));
    char *out = cJSON_Print(c);
    FMT(path, "%s/config.json", dst);
    test_write_file(path, out, strlen(out));
    free(out);
    cJSON_Delete(c);
    free(b);
}

static cJSON *read_json(const char *dir, const char *file) {
    char path[4096];
    size_t len = 0;
    FMT(path, "%s/%s", dir, file);
    unsigned char *b = test_slurp(path, &len);
    cJSON *j = b ? cJSON_ParseWithLength((const char *)b, len) : NULL;
    free(b);
    if (!j) {
        fprintf(stderr, "cannot parse %s\n", path);
        exit(2);
    }
    return j;
}
static double jnum(const cJSON *c, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Run export-gguf with `args`; its exit status; stderr in `err_path`. */
static int export(const char *args, const char *err_path) {
    char cmd[8192];
    FMT(cmd, "'%s' export-gguf %s >/dev/null 2>'%s'", MOE8_CLI, args, err_path);
    return test_run(cmd);
}

/* The number of "*.tmp.*" names in a folder. */
static int n_temp_files(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) n++;
    if (d) closedir(d);
    return n;
}

/* ---- the file against the model ----------------------------------------------- */

/* One tensor's data against its sources (the experts in order). */
static void check_data(const gguf *g, const gti *t, const moe8_tensor *const *src, int n_src) {
    uint64_t ne0 = t->ne[0], rows = t->ne[1] ? t->ne[1] : 1;
    uint64_t per = t->type == T_Q8_0 ? ne0 / 32 * 34 * rows
                 : (t->type == T_F32 ? 4 : 2) * ne0 * rows; /* bytes per source */
    const unsigned char *base = g->b + g->data0 + t->offset;
    long bad = 0, bad_d = 0, bad_q = 0, bad_step = 0;
    CHECKF(t->offset % g->align == 0 && g->data0 + t->offset + per * (uint64_t)n_src <= g->n,
           "%s: offset %llu", t->name, (unsigned long long)t->offset);
    if (t->offset % g->align || g->data0 + t->offset + per * (uint64_t)n_src > g->n) return;
    for (int s = 0; s < n_src; s++) {
        const moe8_tensor *m = src[s];
        const unsigned char *d = base + per * (uint64_t)s;
        if ((uint64_t)m->n_elements != ne0 * rows) {
            bad++;
            continue;
        }
        /* F32 sources of the two vocabulary matrices: every 16th row (the
         * double-arithmetic rounding is slow); BF16 sources: every value, via a
         * table over the 65536 inputs. Under the sanitizers the exporter still
         * writes every value, but these two matrices (151936 rows) are checked
         * every 16th row of every type: the release build checks all of them. */
        const int big = m->n_elements > (1 << 20);
        uint64_t step = big && (m->dtype == MOE8_DT_F32 || MOE8_TEST_SANITIZE[0]) ? 16 : 1;
        for (uint64_t r = 0; r < rows && t->type != T_Q8_0; r += step) {
            for (uint64_t i = r * ne0; i < (r + 1) * ne0; i++) {
                float x = src_at(m, (int64_t)i);
                if (t->type == T_F32) {
                    float v;
                    memcpy(&v, d + 4 * i, 4);
                    bad += f32_bits(v) != f32_bits(x);
                } else {
                    uint16_t v, want;
                    memcpy(&v, d + 2 * i, 2);
                    if (m->dtype == MOE8_DT_BF16)
                        want = (t->type == T_F16 ? f16_of_bf16 : bf16_of_bf16)[((const uint16_t *)m->data)[i]];
                    else
                        want = t->type == T_F16 ? ref_f16(x) : ref_bf16(x);
                    bad += v != want;
                }
            }
        }
        if (t->type != T_Q8_0) continue;
        step = big && MOE8_TEST_SANITIZE[0] ? 16 : 1;
        for (uint64_t b = 0; b < (uint64_t)m->n_elements / 32; b++) {
            if ((b * 32 / ne0) % step) continue;   /* its row */
            const unsigned char *blk = d + 34 * b;
            uint16_t dh;
            float amax = 0;
            memcpy(&dh, blk, 2);
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(src_at(m, (int64_t)(32 * b + i))));
            float d32 = amax / 127.0f, id = d32 != 0.0f ? 1.0f / d32 : 0.0f;
            double d16 = ref_f16_value(dh);
            bad_d += dh != ref_f16(d32);
            for (int i = 0; i < 32; i++) {
                float x = src_at(m, (int64_t)(32 * b + i));
                int q = (int8_t)blk[2 + i];
                bad_q += q != (int)roundf(x * id) || q > 127 || q < -127;
                /* half a step of the f32 scale, plus what rounding d to f16 moved q*d */
                bad_step += fabs(q * d16 - x) > 0.5 * d32 * (1 + 1e-5) + 127 * fabs(d16 - d32) + 1e-30;
            }
        }
    }
    CHECKF(!bad && !bad_d && !bad_q && !bad_step,
           "%s: %ld values, %ld scales, %ld codes, %ld beyond half a step differ", t->name, bad,
           bad_d, bad_q, bad_step);
}

/* One expected tensor: its type and ggml shape, then its data. */
static void check_tensor(const gguf *g, const moe8_st *st, const char *name, uint32_t type,
                         int n_dims, uint64_t ne0, uint64_t ne1, uint64_t ne2, const char *hf,
                         int n_src, int *n_checked) {
    const gti *t = ti_find(g, name);
    const moe8_tensor *src[64];
    char h[256];
    CHECKF(t != NULL, "tensor %s missing", name);
    if (!t) return;
    CHECKF(t->type == type && t->n_dims == (uint32_t)n_dims && t->ne[0] == ne0 &&
           (n_dims < 2 || t->ne[1] == ne1) && (n_dims < 3 || t->ne[2] == ne2),
           "%s: type %u, %u dims {%llu, %llu, %llu}", name, t->type, t->n_dims,
           (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (unsigned long long)t->ne[2]);
    for (int e = 0; e < n_src; e++) {
        if (n_src > 1) FMT(h, hf, e);
        else FMT(h, "%s", hf);
        src[e] = moe8_st_find(st, h);
        CHECKF(src[e] != NULL, "source %s missing", h);
        if (!src[e]) return;
        /* the row-major shape is ne reversed */
        CHECKF(src[e]->n_dims == (n_dims == 1 ? 1 : 2) &&
               (uint64_t)src[e]->shape[src[e]->n_dims - 1] == ne0 &&
               (n_dims == 1 || (uint64_t)src[e]->shape[0] == ne1), "%s vs %s shape", name, h);
    }
    check_data(g, t, src, n_src);
    (*n_checked)++;
}

/* The whole file: keys against config.json, tokens against tokenizer.json,
 * every tensor against the model folder's; n_layers written. */
static void check_file(const char *path, const char *dir, uint32_t wtype, int n_layers) {
    gguf g;
    moe8_st *st = NULL;
    cJSON *cfg = read_json(dir, "config.json");
    int rc = gguf_read(&g, path), n_checked = 0;
    CHECKF(rc == 0, "cannot parse %s", path);
    if (rc) {
        gguf_free(&g);
        cJSON_Delete(cfg);
        return;
    }
    uint64_t H = (uint64_t)jnum(cfg, "hidden_size"), V = (uint64_t)jnum(cfg, "vocab_size");
    uint64_t D = (uint64_t)jnum(cfg, "head_dim"), E = (uint64_t)jnum(cfg, "num_experts");
    uint64_t NQ = (uint64_t)jnum(cfg, "num_attention_heads") * D;
    uint64_t NKV = (uint64_t)jnum(cfg, "num_key_value_heads") * D;
    uint64_t I = (uint64_t)jnum(cfg, "moe_intermediate_size");
    CHECK(g.version == 3 && g.align == 32 && g.data0 % 32 == 0);
    CHECK(kv_str_is(&g, "general.architecture", "qwen3moe"));
    CHECK(kv_u32(&g, "general.file_type") == (wtype == T_Q8_0 ? 7 : wtype == T_F16 ? 1 : 32));
    CHECK(kv_u32(&g, "qwen3moe.block_count") == n_layers);
    CHECK(kv_u32(&g, "qwen3moe.context_length") == (int64_t)jnum(cfg, "max_position_embeddings"));
    CHECK(kv_u32(&g, "qwen3moe.embedding_length") == (int64_t)H);
    CHECK(kv_u32(&g, "qwen3moe.feed_forward_length") == (int64_t)jnum(cfg, "intermediate_size"));
    CHECK(kv_u32(&g, "qwen3moe.attention.head_count") == (int64_t)jnum(cfg, "num_attention_heads"));
    CHECK(kv_u32(&g, "qwen3moe.attention.head_count_kv") ==
          (int64_t)jnum(cfg, "num_key_value_heads"));
    CHECK(kv_u32(&g, "qwen3moe.attention.key_length") == (int64_t)D);
    CHECK(kv_u32(&g, "qwen3moe.attention.value_length") == (int64_t)D);
    CHECK(kv_u32(&g, "qwen3moe.rope.dimension_count") == (int64_t)D);
    CHECK(kv_f32(&g, "qwen3moe.rope.freq_base") == (float)jnum(cfg, "rope_theta"));
    CHECK(kv_f32(&g, "qwen3moe.attention.layer_norm_rms_epsilon") == (float)jnum(cfg, "rms_norm_eps"));
    CHECK(kv_u32(&g, "qwen3moe.expert_count") == (int64_t)E);
    CHECK(kv_u32(&g, "qwen3moe.expert_used_count") == (int64_t)jnum(cfg, "num_experts_per_tok"));
    CHECK(kv_u32(&g, "qwen3moe.expert_feed_forward_length") == (int64_t)I);
    CHECK(H == 256 && D == 32 && E == 16 && I == 128 && NQ == 256 && NKV == 64 && V == 151936);

    /* tokenizer */
    cJSON *tj = read_json(dir, "tokenizer.json");
    cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model"), *e;
    cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const char **want = calloc(V, sizeof *want);
    int *want_type = malloc(V * sizeof *want_type);
    for (uint64_t i = 0; i < V; i++) want_type[i] = 5; /* unused padding */
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(model, "vocab")) {
        want[(uint64_t)e->valuedouble] = e->string;
        want_type[(uint64_t)e->valuedouble] = 1;
    }
    int n_added = 0, n_pad = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(tj, "added_tokens")) {
        uint64_t id = (uint64_t)jnum(e, "id");
        want[id] = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
        want_type[id] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")) ? 3 : 4;
        n_added++;
    }
    CHECK(kv_str_is(&g, "tokenizer.ggml.model", "gpt2") && kv_str_is(&g, "tokenizer.ggml.pre", "qwen2"));
    const gkv *tk = kv_find(&g, "tokenizer.ggml.tokens");
    const gkv *tt = kv_find(&g, "tokenizer.ggml.token_type");
    const gkv *mg = kv_find(&g, "tokenizer.ggml.merges");
    CHECK(tk && tk->type == V_ARR && tk->arr_type == V_STR && tk->arr_n == V);
    CHECK(tt && tt->type == V_ARR && tt->arr_type == V_I32 && tt->arr_n == V);
    CHECK(mg && mg->type == V_ARR && mg->arr_type == V_STR &&
          mg->arr_n == (uint64_t)cJSON_GetArraySize(merges));
    if (tk && tk->arr_n == V && tt && tt->arr_n == V) {
        size_t at = tk->at;
        long bad_tok = 0, bad_type = 0;
        char pad[32];
        for (uint64_t i = 0; i < V; i++) {
            uint64_t n;
            memcpy(&n, g.b + at, 8);
            const char *w = want[i];
            if (!w) {
                snprintf(pad, sizeof pad, "[PAD%llu]", (unsigned long long)i);
                w = pad;
                n_pad++;
            }
            bad_tok += n != strlen(w) || memcmp(g.b + at + 8, w, n);
            at += 8 + n;
            int32_t ty;
            memcpy(&ty, g.b + tt->at + 4 * i, 4);
            bad_type += ty != want_type[i];
        }
        CHECKF(!bad_tok && !bad_type, "%ld tokens, %ld token types differ", bad_tok, bad_type);
        CHECK(n_added == 26 && n_pad == (int)(V - 151643 - 26));
    }
    if (mg && mg->arr_n) { /* the first merge "a b" from ["a", "b"] */
        cJSON *m0 = cJSON_GetArrayItem(merges, 0);
        char first[256];
        uint64_t n;
        FMT(first, "%s %s", cJSON_GetArrayItem(m0, 0)->valuestring,
            cJSON_GetArrayItem(m0, 1)->valuestring);
        memcpy(&n, g.b + mg->at, 8);
        CHECK(n == strlen(first) && !memcmp(g.b + mg->at + 8, first, n));
    }
    CHECK(kv_u32(&g, "tokenizer.ggml.eos_token_id") >= 0 &&
          kv_u32(&g, "tokenizer.ggml.eos_token_id") < (int64_t)V);
    free(want);
    free(want_type);
    cJSON_Delete(tj);

    /* tensors */
    int tie = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings"));
    CHECKF(g.n_tensors == 3 - (uint64_t)tie + 12 * (uint64_t)n_layers, "%llu tensors",
           (unsigned long long)g.n_tensors);
    CHECK(moe8_st_open(dir, &st, NULL) == MOE8_OK);
    if (st) {
        char name[128], hf[256];
        check_tensor(&g, st, "token_embd.weight", wtype, 2, H, V, 0, "model.embed_tokens.weight",
                     1, &n_checked);
        for (int l = 0; l < n_layers; l++) {
            static const struct { const char *g, *h; int kind; } lin[] = {
                {"attn_norm", "input_layernorm", 0},     {"attn_q", "self_attn.q_proj", 1},
                {"attn_k", "self_attn.k_proj", 2},       {"attn_v", "self_attn.v_proj", 2},
                {"attn_output", "self_attn.o_proj", 3},  {"attn_q_norm", "self_attn.q_norm", 4},
                {"attn_k_norm", "self_attn.k_norm", 4},  {"ffn_norm", "post_attention_layernorm", 0},
                {"ffn_gate_inp", "mlp.gate", 5},
            };
            for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
                uint64_t ne0 = H, ne1 = 0;
                uint32_t ty = wtype;
                int nd = 2;
                switch (lin[i].kind) {
                case 0: nd = 1, ty = T_F32; break;
                case 1: ne1 = NQ; break;
                case 2: ne1 = NKV; break;
                case 3: ne0 = NQ, ne1 = H; break;
                case 4: nd = 1, ne0 = D, ty = T_F32; break;
                case 5: ne1 = E, ty = T_F32; break;
                }
                FMT(name, "blk.%d.%s.weight", l, lin[i].g);
                FMT(hf, "model.layers.%d.%s.weight", l, lin[i].h);
                check_tensor(&g, st, name, ty, nd, ne0, ne1, 0, hf, 1, &n_checked);
            }
            static const char *const exps[3][2] = {
                {"ffn_gate_exps", "gate_proj"}, {"ffn_up_exps", "up_proj"}, {"ffn_down_exps", "down_proj"}};
            for (int i = 0; i < 3; i++) {
                FMT(name, "blk.%d.%s.weight", l, exps[i][0]);
                FMT(hf, "model.layers.%d.mlp.experts.%%d.%s.weight", l, exps[i][1]);
                check_tensor(&g, st, name, wtype, 3, i == 2 ? I : H, i == 2 ? H : I, E, hf,
                             (int)E, &n_checked);
            }
        }
        check_tensor(&g, st, "output_norm.weight", T_F32, 1, H, 0, 0, "model.norm.weight", 1,
                     &n_checked);
        if (tie) CHECK(ti_find(&g, "output.weight") == NULL && !moe8_st_find(st, "lm_head.weight"));
        else check_tensor(&g, st, "output.weight", wtype, 2, H, V, 0, "lm_head.weight", 1, &n_checked);
        CHECKF(n_checked == 3 - tie + 12 * n_layers, "%d tensors checked", n_checked);
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", n_layers);
        CHECK(ti_find(&g, name) == NULL);
        moe8_st_free(st);
    }
    /* offsets: increasing, non-overlapping, the last one ending at the file's end (padded) */
    uint64_t end = 0;
    int ordered = 1;
    for (uint64_t i = 0; i < g.n_tensors; i++) {
        const gti *t = &g.ti[i];
        uint64_t n = t->ne[0] * (t->n_dims > 1 ? t->ne[1] : 1) * (t->n_dims > 2 ? t->ne[2] : 1);
        uint64_t bytes = t->type == T_Q8_0 ? n / 32 * 34 : n * (t->type == T_F32 ? 4 : 2);
        ordered &= t->offset >= end;
        end = t->offset + bytes;
    }
    CHECK(ordered && g.data0 + end <= g.n && g.n - (g.data0 + end) < 32);
    gguf_free(&g);
    cJSON_Delete(cfg);
}


/* ---- glm4_moe as llama.cpp's glm4moe ------------------------------------------- */

/* The tiny glm4_moe preset at `dir` (4 layers, layer 0 dense, q/k/v biases,
 * q/k norm, 4 groups keep 2, scaling 2.5, its MTP layer model.layers.4.*). */
static void make_glm_model(const char *dir) {
    moe8_make_model_params p = moe8_make_model_params_default();
    moe8_error e;
    p.arch = MOE8_ARCH_GLM4_MOE;
    p.tokenizer_dir = TOK;
    p.force = 1;
    if (moe8_make_model(&p, dir, &e) != MOE8_OK) {
        fprintf(stderr, "make-model %s: %s\n", dir, e.message);
        exit(2);
    }
}

/* `dst`: the folder `src` with its safetensors linked, tensor `drop` left out
 * (NULL: none; then the file is linked) and config.json's keys `set` (JSON
 * object text) replaced. */
static void glm_variant(const char *src, const char *dst, const char *drop, const char *set) {
    char path[4096], cmd[16384];
    FMT(cmd, "rm -rf '%s' && mkdir -p '%s' && cp '%s/tokenizer.json' '%s/tokenizer_config.json' "
        "'%s/'", dst, dst, src, src, dst);
    if (test_run(cmd) != 0) exit(2);
    if (!drop) {
        FMT(cmd, "ln -s '%s/model.safetensors' '%s/model.safetensors'", src, dst);
        if (test_run(cmd) != 0) exit(2);
    } else {
        moe8_st *st = NULL;
        moe8_st_writer *w = NULL;
        moe8_error e;
        FMT(path, "%s/model.safetensors", dst);
        if (moe8_st_open(src, &st, &e) != MOE8_OK || moe8_st_writer_open(path, &w, &e) != MOE8_OK)
            exit(2);
        for (int pass = 0; pass < 2; pass++)
            for (size_t i = 0; i < moe8_st_count(st); i++) {
                const moe8_tensor *t = moe8_st_get(st, i);
                if (!strcmp(t->name, drop)) continue;
                if ((pass == 0 ? moe8_st_writer_declare(w, t->name, t->dtype, t->n_dims, t->shape, &e)
                               : moe8_st_writer_write(w, t->name, t->data, t->n_bytes, &e)) != MOE8_OK)
                    exit(2);
            }
        if (moe8_st_writer_finish(w, &e) != MOE8_OK) exit(2);
        moe8_st_writer_free(w);
        moe8_st_free(st);
    }
    cJSON *c = read_json(src, "config.json"), *add = cJSON_Parse(set), *it;
    if (!add) exit(2);
    cJSON_ArrayForEach(it, add)
        cJSON_ReplaceItemInObject(c, it->string, cJSON_Duplicate(it, 1));
    char *out = cJSON_Print(c);
    FMT(path, "%s/config.json", dst);
    test_write_file(path, out, strlen(out));
    free(out);
    cJSON_Delete(c);
    cJSON_Delete(add);
}

static int jbool(const cJSON *c, const char *key) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, key));
}

/* One layer's tensors as llama.cpp's glm4moe loader creates them (names, ggml
 * shapes, types) and their data; the count checked. */
static void check_glm_layer(const gguf *g, const moe8_st *st, const cJSON *cfg, uint32_t wtype,
                            int l, int *n_checked) {
    uint64_t H = (uint64_t)jnum(cfg, "hidden_size"), D = (uint64_t)jnum(cfg, "head_dim");
    uint64_t NQ = (uint64_t)jnum(cfg, "num_attention_heads") * D;
    uint64_t NKV = (uint64_t)jnum(cfg, "num_key_value_heads") * D;
    uint64_t E = (uint64_t)jnum(cfg, "n_routed_experts"), I = (uint64_t)jnum(cfg, "moe_intermediate_size");
    uint64_t F = (uint64_t)jnum(cfg, "intermediate_size");
    uint64_t S = (uint64_t)jnum(cfg, "n_shared_experts") * I;
    int bias = jbool(cfg, "attention_bias"), qkn = jbool(cfg, "use_qk_norm");
    int moe = l >= (int)jnum(cfg, "first_k_dense_replace");
    char name[128], hf[256];
    const uint32_t W = 99; /* the matrices' --type */
    /* gguf suffix, hf suffix, type (W: wtype), dims, ne0, ne1, when (0 always, 1 bias, 2 qk
     * norm, 3 dense, 4 moe) */
    const struct { const char *g, *h; uint32_t ty; int nd; uint64_t ne0, ne1; int when; } t[] = {
        {"attn_norm.weight", "input_layernorm.weight", T_F32, 1, H, 0, 0},
        {"attn_q.weight", "self_attn.q_proj.weight", W, 2, H, NQ, 0},
        {"attn_q.bias", "self_attn.q_proj.bias", T_F32, 1, NQ, 0, 1},
        {"attn_k.weight", "self_attn.k_proj.weight", W, 2, H, NKV, 0},
        {"attn_k.bias", "self_attn.k_proj.bias", T_F32, 1, NKV, 0, 1},
        {"attn_v.weight", "self_attn.v_proj.weight", W, 2, H, NKV, 0},
        {"attn_v.bias", "self_attn.v_proj.bias", T_F32, 1, NKV, 0, 1},
        {"attn_output.weight", "self_attn.o_proj.weight", W, 2, NQ, H, 0},
        {"attn_q_norm.weight", "self_attn.q_norm.weight", T_F32, 1, D, 0, 2},
        {"attn_k_norm.weight", "self_attn.k_norm.weight", T_F32, 1, D, 0, 2},
        {"post_attention_norm.weight", "post_attention_layernorm.weight", T_F32, 1, H, 0, 0},
        {"ffn_gate.weight", "mlp.gate_proj.weight", W, 2, H, F, 3},
        {"ffn_up.weight", "mlp.up_proj.weight", W, 2, H, F, 3},
        {"ffn_down.weight", "mlp.down_proj.weight", W, 2, F, H, 3},
        {"ffn_gate_inp.weight", "mlp.gate.weight", T_F32, 2, H, E, 4},
        {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias", T_F32, 1, E, 0, 4},
        {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight", W, 2, H, S, 4},
        {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight", W, 2, H, S, 4},
        {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight", W, 2, S, H, 4},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        int on = t[i].when == 0 || (t[i].when == 1 && bias) || (t[i].when == 2 && qkn) ||
                 (t[i].when == 3 && !moe) || (t[i].when == 4 && moe);
        FMT(name, "blk.%d.%s", l, t[i].g);
        FMT(hf, "model.layers.%d.%s", l, t[i].h);
        if (!on) {
            CHECKF(ti_find(g, name) == NULL, "%s written", name);
            continue;
        }
        check_tensor(g, st, name, t[i].ty == W ? wtype : t[i].ty, t[i].nd, t[i].ne0, t[i].ne1, 0, hf, 1,
                     n_checked);
    }
    static const char *const exps[3][2] = {
        {"ffn_gate_exps", "gate_proj"}, {"ffn_up_exps", "up_proj"}, {"ffn_down_exps", "down_proj"}};
    for (int i = 0; i < 3; i++) {
        FMT(name, "blk.%d.%s.weight", l, exps[i][0]);
        if (!moe) {
            CHECKF(ti_find(g, name) == NULL, "%s in a dense layer", name);
            continue;
        }
        FMT(hf, "model.layers.%d.mlp.experts.%%d.%s.weight", l, exps[i][1]);
        check_tensor(g, st, name, wtype, 3, i == 2 ? I : H, i == 2 ? H : I, E, hf, (int)E,
                     n_checked);
    }
}

/* A glm4moe file against its folder: llama.cpp's keys (llama-model's
 * glm4_moe hparams: block_count the decoder's layers with
 * nextn_predict_layers 0, the rotary dims head_dim x partial_rotary_factor,
 * shared count, leading dense count, scale, norm, sigmoid gating, groups),
 * the tokenizer (pre glm4, ids at or above vocab_size left out), every
 * tensor, none of the MTP layer's. */
static void check_glm_file(const char *path, const char *dir, uint32_t wtype, int n_layers) {
    gguf g;
    moe8_st *st = NULL;
    cJSON *cfg = read_json(dir, "config.json");
    int rc = gguf_read(&g, path), n_checked = 0;
    CHECKF(rc == 0, "cannot parse %s", path);
    if (rc) {
        gguf_free(&g);
        cJSON_Delete(cfg);
        return;
    }
    uint64_t H = (uint64_t)jnum(cfg, "hidden_size"), V = (uint64_t)jnum(cfg, "vocab_size");
    uint64_t D = (uint64_t)jnum(cfg, "head_dim");
    int first_k = (int)jnum(cfg, "first_k_dense_replace"), groups = (int)jnum(cfg, "n_group");
    CHECK(g.version == 3 && g.align == 32 && g.data0 % 32 == 0);
    CHECK(kv_str_is(&g, "general.architecture", "glm4moe"));
    CHECK(kv_u32(&g, "general.file_type") == (wtype == T_Q8_0 ? 7 : wtype == T_F16 ? 1 : 32));
    CHECK(kv_u32(&g, "glm4moe.block_count") == n_layers);
    CHECK(kv_u32(&g, "glm4moe.nextn_predict_layers") == 0 && jnum(cfg, "num_nextn_predict_layers") == 1);
    CHECK(kv_u32(&g, "glm4moe.context_length") == (int64_t)jnum(cfg, "max_position_embeddings"));
    CHECK(kv_u32(&g, "glm4moe.embedding_length") == (int64_t)H);
    CHECK(kv_u32(&g, "glm4moe.feed_forward_length") == (int64_t)jnum(cfg, "intermediate_size"));
    CHECK(kv_u32(&g, "glm4moe.attention.head_count") == (int64_t)jnum(cfg, "num_attention_heads"));
    CHECK(kv_u32(&g, "glm4moe.attention.head_count_kv") == (int64_t)jnum(cfg, "num_key_value_heads"));
    CHECK(kv_u32(&g, "glm4moe.attention.key_length") == (int64_t)D);
    CHECK(kv_u32(&g, "glm4moe.attention.value_length") == (int64_t)D);
    CHECK(kv_u32(&g, "glm4moe.rope.dimension_count") ==
          (int64_t)((double)D * jnum(cfg, "partial_rotary_factor")));
    CHECK(kv_u32(&g, "glm4moe.rope.dimension_count") == 16 && D == 32);
    CHECK(kv_f32(&g, "glm4moe.rope.freq_base") == (float)jnum(cfg, "rope_theta"));
    CHECK(kv_f32(&g, "glm4moe.attention.layer_norm_rms_epsilon") == (float)jnum(cfg, "rms_norm_eps"));
    CHECK(kv_u32(&g, "glm4moe.expert_count") == (int64_t)jnum(cfg, "n_routed_experts"));
    CHECK(kv_u32(&g, "glm4moe.expert_used_count") == (int64_t)jnum(cfg, "num_experts_per_tok"));
    CHECK(kv_u32(&g, "glm4moe.expert_feed_forward_length") == (int64_t)jnum(cfg, "moe_intermediate_size"));
    CHECK(kv_u32(&g, "glm4moe.expert_shared_count") == (int64_t)jnum(cfg, "n_shared_experts"));
    CHECK(kv_u32(&g, "glm4moe.leading_dense_block_count") == first_k);
    CHECK(kv_f32(&g, "glm4moe.expert_weights_scale") == (float)jnum(cfg, "routed_scaling_factor"));
    const gkv *norm = kv_find(&g, "glm4moe.expert_weights_norm");
    CHECK(norm && norm->type == V_BOOL && g.b[norm->at] == jbool(cfg, "norm_topk_prob"));
    CHECK(kv_u32(&g, "glm4moe.expert_gating_func") == 2); /* sigmoid */
    if (groups > 1) {
        CHECK(kv_u32(&g, "glm4moe.expert_group_count") == groups);
        CHECK(kv_u32(&g, "glm4moe.expert_group_used_count") == (int64_t)jnum(cfg, "topk_group"));
    } else {
        CHECK(!kv_find(&g, "glm4moe.expert_group_count") && !kv_find(&g, "glm4moe.expert_group_used_count"));
    }

    /* tokenizer: pre glm4, V = 151552 entries: the qwen3 tokenizer's ids below it */
    CHECK(kv_str_is(&g, "tokenizer.ggml.model", "gpt2") && kv_str_is(&g, "tokenizer.ggml.pre", "glm4"));
    const gkv *tk = kv_find(&g, "tokenizer.ggml.tokens");
    CHECK(V == 151552 && tk && tk->type == V_ARR && tk->arr_type == V_STR && tk->arr_n == V);
    if (tk && tk->arr_n == V) {
        cJSON *tj = read_json(dir, "tokenizer.json"), *e;
        const char **want = calloc(V, sizeof *want);
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "vocab"))
            if (e->valuedouble < (double)V) want[(uint64_t)e->valuedouble] = e->string;
        size_t at = tk->at;
        long bad_tok = 0;
        for (uint64_t i = 0; i < V; i++) {
            uint64_t n;
            memcpy(&n, g.b + at, 8);
            bad_tok += !want[i] || n != strlen(want[i]) || memcmp(g.b + at + 8, want[i], n);
            at += 8 + n;
        }
        CHECKF(!bad_tok, "%ld tokens differ", bad_tok);
        free(want);
        cJSON_Delete(tj);
    }
    CHECK(kv_u32(&g, "tokenizer.ggml.eos_token_id") == 151329); /* config.json's first eos */

    /* tensors */
    CHECK(moe8_st_open(dir, &st, NULL) == MOE8_OK);
    if (st) {
        char name[128];
        check_tensor(&g, st, "token_embd.weight", wtype, 2, H, V, 0, "model.embed_tokens.weight",
                     1, &n_checked);
        for (int l = 0; l < n_layers; l++) check_glm_layer(&g, st, cfg, wtype, l, &n_checked);
        check_tensor(&g, st, "output_norm.weight", T_F32, 1, H, 0, 0, "model.norm.weight", 1,
                     &n_checked);
        check_tensor(&g, st, "output.weight", wtype, 2, H, V, 0, "lm_head.weight", 1, &n_checked);
        CHECKF(g.n_tensors == (uint64_t)n_checked, "%llu tensors, %d expected",
               (unsigned long long)g.n_tensors, n_checked);
        /* the MTP layer is in the folder, not in the file */
        int mtp = (int)jnum(cfg, "num_hidden_layers");
        FMT(name, "model.layers.%d.eh_proj.weight", mtp);
        CHECK(moe8_st_find(st, name) != NULL);
        for (uint64_t i = 0; i < g.n_tensors; i++) {
            int l = -1;
            CHECKF(!strstr(g.ti[i].name, "nextn") &&
                   (sscanf(g.ti[i].name, "blk.%d.", &l) != 1 || l < n_layers),
                   "%s written", g.ti[i].name);
        }
        moe8_st_free(st);
    }
    gguf_free(&g);
    cJSON_Delete(cfg);
}

/* glm4_moe: the tiny preset as BF16 and Q8_0; a variant without biases, q/k
 * norm, groups and renormalization; --layers 2; a missing correction bias. */
static void test_glm(const char *root, const char *out, const char *err) {
    char glm[4096], var[4096], nobias[4096], file[4096], args[16384];
    FMT(glm, "%s/glm", root);
    FMT(var, "%s/glm_plain", root);
    FMT(nobias, "%s/glm_no_bias", root);
    make_glm_model(glm);
    static const struct { const char *name; uint32_t type; } types[] = {
        {"bf16", T_BF16}, {"q8_0", T_Q8_0}}; /* F16: the qwen3moe cases */
    for (int i = 0; i < 2; i++) {
        FMT(file, "%s/glm_%s.gguf", out, types[i].name);
        FMT(args, "-m '%s' -o '%s' --type %s", glm, file, types[i].name);
        CHECKF(export(args, err) == 0, "glm export --type %s", types[i].name);
        CHECK(test_file_contains(err, "multi-token-prediction") &&
              test_file_contains(err, "at or above vocab_size 151552"));
        check_glm_file(file, glm, types[i].type, 4);
    }
    FMT(file, "%s/glm_l2.gguf", out);
    FMT(args, "-m '%s' -o '%s' --layers 2 --type bf16", glm, file);
    CHECK(export(args, err) == 0);
    check_glm_file(file, glm, T_BF16, 2);

    glm_variant(glm, var, NULL, "{\"attention_bias\": false, \"use_qk_norm\": false, \"n_group\": 1, "
                "\"topk_group\": 1, \"norm_topk_prob\": false}");
    FMT(file, "%s/glm_plain.gguf", out);
    FMT(args, "-m '%s' -o '%s' --type bf16", var, file);
    CHECK(export(args, err) == 0);
    check_glm_file(file, var, T_BF16, 4);

    /* a missing correction bias: refused naming it, nothing written */
    glm_variant(glm, nobias, "model.layers.2.mlp.gate.e_score_correction_bias", "{}");
    FMT(file, "%s/glm_no_bias.gguf", out);
    FMT(args, "-m '%s' -o '%s'", nobias, file);
    CHECK(export(args, err) != 0);
    CHECK(test_file_contains(err, "model.layers.2.mlp.gate.e_score_correction_bias") &&
          test_file_contains(err, "missing"));
    CHECK(access(file, F_OK) != 0 && n_temp_files(out) == 0);
}

/* ---- minimax_m2 as llama.cpp's minimax-m2 ---------------------------------------- */

/* One layer's tensors as llama.cpp's minimax-m2 loader creates them: q/k norms
 * over the whole projection ([heads x head_dim], [kv heads x head_dim]),
 * ffn_norm, the router F32, exp_probs_b.bias from the block's
 * e_score_correction_bias, the experts w1/w3/w2 stacked as gate/up/down. */
static void check_mm_layer(const gguf *g, const moe8_st *st, const cJSON *cfg, uint32_t wtype,
                           int l, int *n_checked) {
    uint64_t H = (uint64_t)jnum(cfg, "hidden_size"), D = (uint64_t)jnum(cfg, "head_dim");
    uint64_t NQ = (uint64_t)jnum(cfg, "num_attention_heads") * D;
    uint64_t NKV = (uint64_t)jnum(cfg, "num_key_value_heads") * D;
    uint64_t E = (uint64_t)jnum(cfg, "num_local_experts"), I = (uint64_t)jnum(cfg, "intermediate_size");
    char name[128], hf[256];
    const uint32_t W = 99; /* the matrices' --type */
    const struct { const char *g, *h; uint32_t ty; int nd; uint64_t ne0, ne1; } t[] = {
        {"attn_norm.weight", "input_layernorm.weight", T_F32, 1, H, 0},
        {"attn_q.weight", "self_attn.q_proj.weight", W, 2, H, NQ},
        {"attn_k.weight", "self_attn.k_proj.weight", W, 2, H, NKV},
        {"attn_v.weight", "self_attn.v_proj.weight", W, 2, H, NKV},
        {"attn_output.weight", "self_attn.o_proj.weight", W, 2, NQ, H},
        {"attn_q_norm.weight", "self_attn.q_norm.weight", T_F32, 1, NQ, 0},
        {"attn_k_norm.weight", "self_attn.k_norm.weight", T_F32, 1, NKV, 0},
        {"ffn_norm.weight", "post_attention_layernorm.weight", T_F32, 1, H, 0},
        {"ffn_gate_inp.weight", "block_sparse_moe.gate.weight", T_F32, 2, H, E},
        {"exp_probs_b.bias", "block_sparse_moe.e_score_correction_bias", T_F32, 1, E, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        FMT(name, "blk.%d.%s", l, t[i].g);
        FMT(hf, "model.layers.%d.%s", l, t[i].h);
        check_tensor(g, st, name, t[i].ty == W ? wtype : t[i].ty, t[i].nd, t[i].ne0, t[i].ne1, 0, hf,
                     1, n_checked);
    }
    static const char *const exps[3][2] = {
        {"ffn_gate_exps", "w1"}, {"ffn_up_exps", "w3"}, {"ffn_down_exps", "w2"}};
    for (int i = 0; i < 3; i++) {
        FMT(name, "blk.%d.%s.weight", l, exps[i][0]);
        FMT(hf, "model.layers.%d.block_sparse_moe.experts.%%d.%s.weight", l, exps[i][1]);
        check_tensor(g, st, name, wtype, 3, i == 2 ? I : H, i == 2 ? H : I, E, hf, (int)E, n_checked);
    }
}

/* A minimax-m2 file against its folder: llama.cpp's keys (feed_forward_length
 * and expert_feed_forward_length both intermediate_size, the experts' width,
 * by which llama.cpp sizes the stacked experts; rope.dimension_count
 * rotary_dim; sigmoid gating; no scale, groups or dense layers), the
 * tokenizer (pre minimax-m2; the qwen3 test tokenizer padded to vocab_size),
 * every tensor (output.weight from lm_head, or from the embedding when tied),
 * none of the MTP module's. */
static void check_mm_file(const char *path, const char *dir, uint32_t wtype, int n_layers) {
    gguf g;
    moe8_st *st = NULL;
    cJSON *cfg = read_json(dir, "config.json");
    int rc = gguf_read(&g, path), n_checked = 0;
    CHECKF(rc == 0, "cannot parse %s", path);
    if (rc) {
        gguf_free(&g);
        cJSON_Delete(cfg);
        return;
    }
    uint64_t H = (uint64_t)jnum(cfg, "hidden_size"), V = (uint64_t)jnum(cfg, "vocab_size");
    uint64_t D = (uint64_t)jnum(cfg, "head_dim"), I = (uint64_t)jnum(cfg, "intermediate_size");
    CHECK(g.version == 3 && g.align == 32 && g.data0 % 32 == 0);
    CHECK(kv_str_is(&g, "general.architecture", "minimax-m2"));
    CHECK(kv_u32(&g, "general.file_type") == (wtype == T_Q8_0 ? 7 : wtype == T_F16 ? 1 : 32));
    CHECK(kv_u32(&g, "minimax-m2.block_count") == n_layers);
    CHECK(kv_u32(&g, "minimax-m2.context_length") == (int64_t)jnum(cfg, "max_position_embeddings"));
    CHECK(kv_u32(&g, "minimax-m2.embedding_length") == (int64_t)H);
    CHECK(kv_u32(&g, "minimax-m2.feed_forward_length") == (int64_t)I && I == 64);
    CHECK(kv_u32(&g, "minimax-m2.expert_feed_forward_length") == (int64_t)I);
    CHECK(kv_u32(&g, "minimax-m2.attention.head_count") == (int64_t)jnum(cfg, "num_attention_heads"));
    CHECK(kv_u32(&g, "minimax-m2.attention.head_count_kv") == (int64_t)jnum(cfg, "num_key_value_heads"));
    CHECK(kv_u32(&g, "minimax-m2.attention.key_length") == (int64_t)D);
    CHECK(kv_u32(&g, "minimax-m2.attention.value_length") == (int64_t)D);
    CHECK(kv_u32(&g, "minimax-m2.rope.dimension_count") == (int64_t)jnum(cfg, "rotary_dim"));
    CHECK(kv_u32(&g, "minimax-m2.rope.dimension_count") == 16 && D == 32);
    CHECK(kv_f32(&g, "minimax-m2.rope.freq_base") == (float)jnum(cfg, "rope_theta"));
    CHECK(kv_f32(&g, "minimax-m2.attention.layer_norm_rms_epsilon") == (float)jnum(cfg, "rms_norm_eps"));
    CHECK(kv_u32(&g, "minimax-m2.expert_count") == (int64_t)jnum(cfg, "num_local_experts"));
    CHECK(kv_u32(&g, "minimax-m2.expert_used_count") == (int64_t)jnum(cfg, "num_experts_per_tok"));
    CHECK(kv_u32(&g, "minimax-m2.expert_gating_func") == 2); /* sigmoid */
    static const char *const absent[] = {
        "minimax-m2.expert_weights_scale", "minimax-m2.expert_group_count",
        "minimax-m2.expert_group_used_count", "minimax-m2.leading_dense_block_count",
        "minimax-m2.expert_shared_count", "minimax-m2.nextn_predict_layers"};
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
        CHECKF(!kv_find(&g, absent[i]), "%s written", absent[i]);

    /* tokenizer: pre minimax-m2; V = 200064 entries, the qwen3 test tokenizer's
     * ids then padding; eos <|im_end|> (tokenizer_config.json), bos config.json's */
    CHECK(kv_str_is(&g, "tokenizer.ggml.model", "gpt2") && kv_str_is(&g, "tokenizer.ggml.pre", "minimax-m2"));
    const gkv *tk = kv_find(&g, "tokenizer.ggml.tokens");
    CHECK(V == 200064 && tk && tk->type == V_ARR && tk->arr_type == V_STR && tk->arr_n == V);
    if (tk && tk->arr_n == V) {
        cJSON *tj = read_json(dir, "tokenizer.json"), *e;
        const char **want = calloc(V, sizeof *want);
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "vocab"))
            if (e->valuedouble < (double)V) want[(uint64_t)e->valuedouble] = e->string;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(tj, "added_tokens")) {
            double id = jnum(e, "id");
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
            if (id >= 0 && id < (double)V && cJSON_IsString(c)) want[(uint64_t)id] = c->valuestring;
        }
        size_t at = tk->at;
        long bad_tok = 0, n_pad = 0;
        for (uint64_t i = 0; i < V; i++) {
            uint64_t n;
            memcpy(&n, g.b + at, 8);
            if (want[i]) bad_tok += n != strlen(want[i]) || memcmp(g.b + at + 8, want[i], n);
            else n_pad += n > 4 && !memcmp(g.b + at + 8, "[PAD", 4);
            at += 8 + n;
        }
        CHECKF(!bad_tok, "%ld tokens differ", bad_tok);
        CHECKF(n_pad > 48000, "%ld padding tokens", n_pad);
        free(want);
        cJSON_Delete(tj);
    }
    CHECK(kv_u32(&g, "tokenizer.ggml.eos_token_id") == 151645);
    CHECK(kv_u32(&g, "tokenizer.ggml.bos_token_id") == (int64_t)jnum(cfg, "bos_token_id"));

    /* tensors */
    CHECK(moe8_st_open(dir, &st, NULL) == MOE8_OK);
    if (st) {
        char name[128];
        check_tensor(&g, st, "token_embd.weight", wtype, 2, H, V, 0, "model.embed_tokens.weight",
                     1, &n_checked);
        for (int l = 0; l < n_layers; l++) check_mm_layer(&g, st, cfg, wtype, l, &n_checked);
        check_tensor(&g, st, "output_norm.weight", T_F32, 1, H, 0, 0, "model.norm.weight", 1,
                     &n_checked);
        check_tensor(&g, st, "output.weight", wtype, 2, H, V, 0,
                     jbool(cfg, "tie_word_embeddings") ? "model.embed_tokens.weight" : "lm_head.weight",
                     1, &n_checked);
        CHECKF(g.n_tensors == (uint64_t)n_checked, "%llu tensors, %d expected",
               (unsigned long long)g.n_tensors, n_checked);
        /* the MTP module is in the folder, not in the file */
        FMT(name, "model.layers.%d.input_layernorm.weight", (int)jnum(cfg, "num_hidden_layers"));
        CHECK(moe8_st_find(st, name) != NULL);
        for (uint64_t i = 0; i < g.n_tensors; i++) {
            int l = -1;
            CHECKF(sscanf(g.ti[i].name, "blk.%d.", &l) != 1 || l < n_layers, "%s written",
                   g.ti[i].name);
        }
        moe8_st_free(st);
    }
    gguf_free(&g);
    cJSON_Delete(cfg);
}

/* minimax_m2: the tiny preset as BF16 and Q8_0; --layers 2; tied embeddings
 * (output.weight = the embedding: llama.cpp's minimax-m2 requires it); a
 * missing correction bias and use_routing_bias false refused. */
static void test_mm(const char *root, const char *out, const char *err) {
    char mm[4096], var[4096], file[4096], args[16384];
    moe8_make_model_params p = moe8_make_model_params_default();
    moe8_error e;
    FMT(mm, "%s/mm", root);
    p.arch = MOE8_ARCH_MINIMAX_M2;
    p.tokenizer_dir = TOK;
    p.force = 1;
    if (moe8_make_model(&p, mm, &e) != MOE8_OK) {
        fprintf(stderr, "make-model %s: %s\n", mm, e.message);
        exit(2);
    }
    static const struct { const char *name; uint32_t type; } types[] = {
        {"bf16", T_BF16}, {"q8_0", T_Q8_0}};
    for (int i = 0; i < 2; i++) {
        FMT(file, "%s/mm_%s.gguf", out, types[i].name);
        FMT(args, "-m '%s' -o '%s' --type %s", mm, file, types[i].name);
        CHECKF(export(args, err) == 0, "minimax export --type %s", types[i].name);
        CHECK(test_file_contains(err, "multi-token-prediction"));
        check_mm_file(file, mm, types[i].type, 4);
    }
    FMT(file, "%s/mm_l2.gguf", out);
    FMT(args, "-m '%s' -o '%s' --layers 2 --type f16", mm, file);
    CHECK(export(args, err) == 0);
    check_mm_file(file, mm, T_F16, 2);

    FMT(var, "%s/mm_tied", root);
    glm_variant(mm, var, NULL, "{\"tie_word_embeddings\": true}");
    FMT(file, "%s/mm_tied.gguf", out);
    FMT(args, "-m '%s' -o '%s' --type bf16 --layers 1", var, file);
    CHECK(export(args, err) == 0);
    check_mm_file(file, var, T_BF16, 1);

    /* refused, naming what is missing; nothing written */
    FMT(var, "%s/mm_no_bias", root);
    glm_variant(mm, var, "model.layers.1.block_sparse_moe.e_score_correction_bias", "{}");
    FMT(file, "%s/mm_no_bias.gguf", out);
    FMT(args, "-m '%s' -o '%s'", var, file);
    CHECK(export(args, err) != 0);
    CHECK(test_file_contains(err, "model.layers.1.block_sparse_moe.e_score_correction_bias") &&
          test_file_contains(err, "missing"));
    CHECK(access(file, F_OK) != 0);
    FMT(var, "%s/mm_no_routing_bias", root);
    glm_variant(mm, var, NULL, "{\"use_routing_bias\": false}");
    FMT(args, "-m '%s' -o '%s'", var, file);
    CHECK(export(args, err) != 0);
    CHECK(test_file_contains(err, "use_routing_bias") && test_file_contains(err, "exp_probs_b"));
    CHECK(access(file, F_OK) != 0 && n_temp_files(out) == 0);
}

/* ---- qwen3_next as llama.cpp's qwen3next ------------------------------------------ */

/* The converter's transforms (Qwen3NextModel), written here from its text. */
enum { X_NONE, X_PLUS1, X_NEG_EXP };
static double q3n_xform(int x, float v) {
    return x == X_PLUS1 ? (double)(1.0f + v) : x == X_NEG_EXP ? -exp((double)v) : (double)v;
}

/* A tensor whose rows are rows row_of[r] of src (NULL: r), each value
 * transformed: its type and ggml shape {ne0, ne1} (ne1 0: 1-D), then for F32 /
 * BF16 every value (F32 of 1 + w bit-equal to the f32 sum, of -exp within
 * 2e-7 relative; BF16 round-to-nearest-even of the source value); Q8_0 shape
 * only (the row order is checked on the BF16 file). */
static void check_q3n_tensor(const gguf *g, const moe8_st *st, const char *name, uint32_t type,
                             uint64_t ne0, uint64_t ne1, const char *hf, const int64_t *row_of,
                             int x, int *n_checked) {
    const gti *t = ti_find(g, name);
    const moe8_tensor *m = moe8_st_find(st, hf);
    uint32_t nd = ne1 ? 2 : 1;
    long bad = 0;
    CHECKF(t != NULL && m != NULL, "tensor %s / source %s missing", name, hf);
    if (!t || !m) return;
    (*n_checked)++;
    CHECKF(t->type == type && t->n_dims == nd && t->ne[0] == ne0 && (nd < 2 || t->ne[1] == ne1),
           "%s: type %u, %u dims {%llu, %llu}", name, t->type, t->n_dims,
           (unsigned long long)t->ne[0], (unsigned long long)t->ne[1]);
    if (t->type != type || type == T_Q8_0) return;
    const unsigned char *d = g->b + g->data0 + t->offset;
    uint64_t rows = ne1 ? ne1 : 1, es = type == T_F32 ? 4 : 2;
    CHECKF(g->data0 + t->offset + rows * ne0 * es <= g->n, "%s: data beyond the file", name);
    if (g->data0 + t->offset + rows * ne0 * es > g->n) return;
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t i = 0; i < ne0; i++) {
            uint64_t sr = row_of ? (uint64_t)row_of[r] : r;
            double want = q3n_xform(x, src_at(m, (int64_t)(sr * ne0 + i)));
            if (type == T_F32) {
                float v;
                memcpy(&v, d + 4 * (r * ne0 + i), 4);
                bad += x == X_NEG_EXP ? fabs(v - want) > 2e-7 * fabs(want) : v != (float)want;
            } else {
                uint16_t v;
                memcpy(&v, d + 2 * (r * ne0 + i), 2);
                bad += v != ref_bf16((float)want);
            }
        }
    CHECKF(!bad, "%s: %ld values differ", name, bad);
}

/* One layer as llama.cpp's qwen3next loader creates it: layers 0-2 Gated
 * DeltaNet (full_attention_interval 4), layer 3 full attention. attn_qkv /
 * attn_gate: in_proj_qkvz's rows, grouped per key head as [q dk, k dk,
 * v r dv, z r dv], regrouped as all q, all k, all v / all z. */
static void check_q3n_layer(const gguf *g, const moe8_st *st, const cJSON *cfg, uint32_t wtype,
                            int l, int *n_checked) {
    uint64_t H = (uint64_t)jnum(cfg, "hidden_size"), D = (uint64_t)jnum(cfg, "head_dim");
    uint64_t NQ = (uint64_t)jnum(cfg, "num_attention_heads") * D;
    uint64_t NKV = (uint64_t)jnum(cfg, "num_key_value_heads") * D;
    uint64_t E = (uint64_t)jnum(cfg, "num_experts"), I = (uint64_t)jnum(cfg, "moe_intermediate_size");
    uint64_t S = (uint64_t)jnum(cfg, "shared_expert_intermediate_size");
    uint64_t Kh = (uint64_t)jnum(cfg, "linear_num_key_heads"), Vh = (uint64_t)jnum(cfg, "linear_num_value_heads");
    uint64_t dk = (uint64_t)jnum(cfg, "linear_key_head_dim"), dv = (uint64_t)jnum(cfg, "linear_value_head_dim");
    uint64_t K = (uint64_t)jnum(cfg, "linear_conv_kernel_dim");
    uint64_t rv = Vh / Kh * dv, G = 2 * dk + 2 * rv, C = 2 * Kh * dk + Vh * dv;
    int linear = (l + 1) % (int)jnum(cfg, "full_attention_interval") != 0;
    char name[128], hf[256];
    const uint32_t W = 99; /* the matrices' --type */
    const struct { const char *g, *h; uint32_t ty; uint64_t ne0, ne1; int x, when; } t[] = {
        {"attn_norm.weight", "input_layernorm.weight", T_F32, H, 0, X_PLUS1, 2},
        {"post_attention_norm.weight", "post_attention_layernorm.weight", T_F32, H, 0, X_PLUS1, 2},
        {"ssm_dt.bias", "linear_attn.dt_bias", T_F32, Vh, 0, X_NONE, 1},
        {"ssm_a", "linear_attn.A_log", T_F32, Vh, 0, X_NEG_EXP, 1},
        {"ssm_ba.weight", "linear_attn.in_proj_ba.weight", W, H, 2 * Vh, X_NONE, 1},
        {"ssm_norm.weight", "linear_attn.norm.weight", T_F32, dv, 0, X_NONE, 1},
        {"ssm_out.weight", "linear_attn.out_proj.weight", W, Vh * dv, H, X_NONE, 1},
        {"attn_q.weight", "self_attn.q_proj.weight", W, H, 2 * NQ, X_NONE, 0},
        {"attn_k.weight", "self_attn.k_proj.weight", W, H, NKV, X_NONE, 0},
        {"attn_v.weight", "self_attn.v_proj.weight", W, H, NKV, X_NONE, 0},
        {"attn_output.weight", "self_attn.o_proj.weight", W, NQ, H, X_NONE, 0},
        {"attn_q_norm.weight", "self_attn.q_norm.weight", T_F32, D, 0, X_PLUS1, 0},
        {"attn_k_norm.weight", "self_attn.k_norm.weight", T_F32, D, 0, X_PLUS1, 0},
        {"ffn_gate_inp.weight", "mlp.gate.weight", T_F32, H, E, X_NONE, 2},
        {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", T_F32, H, 0, X_NONE, 2},
        {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", W, H, S, X_NONE, 2},
        {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", W, H, S, X_NONE, 2},
        {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", W, S, H, X_NONE, 2},
        {"ssm_conv1d.weight", "linear_attn.conv1d.weight", T_F32, K, C, X_NONE, 1},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        FMT(name, "blk.%d.%s", l, t[i].g);
        if (t[i].when != 2 && t[i].when != linear) {
            CHECKF(ti_find(g, name) == NULL, "%s written", name);
            continue;
        }
        FMT(hf, "model.layers.%d.%s", l, t[i].h);
        check_q3n_tensor(g, st, name, t[i].ty == W ? wtype : t[i].ty, t[i].ne0, t[i].ne1, hf, NULL,
                         t[i].x, n_checked);
    }
    if (linear) {
        int64_t *qkv = malloc(C * sizeof *qkv), *z = malloc(Vh * dv * sizeof *z);
        if (!qkv || !z) abort();
        for (uint64_t k = 0; k < Kh; k++) {
            for (uint64_t i = 0; i < dk; i++) {
                qkv[k * dk + i] = (int64_t)(k * G + i);
                qkv[Kh * dk + k * dk + i] = (int64_t)(k * G + dk + i);
            }
            for (uint64_t i = 0; i < rv; i++) {
                qkv[2 * Kh * dk + k * rv + i] = (int64_t)(k * G + 2 * dk + i);
                z[k * rv + i] = (int64_t)(k * G + 2 * dk + rv + i);
            }
        }
        FMT(hf, "model.layers.%d.linear_attn.in_proj_qkvz.weight", l);
        FMT(name, "blk.%d.attn_qkv.weight", l);
        check_q3n_tensor(g, st, name, wtype, H, C, hf, qkv, X_NONE, n_checked);
        FMT(name, "blk.%d.attn_gate.weight", l);
        check_q3n_tensor(g, st, name, wtype, H, Vh * dv, hf, z, X_NONE, n_checked);
        free(qkv);
        free(z);
    }
    static const char *const exps[3][2] = {
        {"ffn_gate_exps", "gate_proj"}, {"ffn_up_exps", "up_proj"}, {"ffn_down_exps", "down_proj"}};
    for (int i = 0; i < 3; i++) {
        FMT(name, "blk.%d.%s.weight", l, exps[i][0]);
        FMT(hf, "model.layers.%d.mlp.experts.%%d.%s.weight", l, exps[i][1]);
        check_tensor(g, st, name, wtype, 3, i == 2 ? I : H, i == 2 ? H : I, E, hf, (int)E, n_checked);
    }
}

static int64_t q3n_ku(const gguf *g, const char *key) {
    char k[128];
    FMT(k, "qwen3next.%s", key);
    return kv_u32(g, k);
}

/* A qwen3next file against its folder: llama.cpp's keys (the Qwen2-MoE ones,
 * the ssm.* of the Gated DeltaNet, full_attention_interval, rope over
 * head_dim x partial_rotary_factor), every tensor, output_norm 1 + w. */
static void check_q3n_file(const char *path, const char *dir, uint32_t wtype) {
    gguf g;
    moe8_st *st = NULL;
    cJSON *cfg = read_json(dir, "config.json");
    int rc = gguf_read(&g, path), n_checked = 0;
    CHECKF(rc == 0, "cannot parse %s", path);
    if (rc) {
        gguf_free(&g);
        cJSON_Delete(cfg);
        return;
    }
    uint64_t H = (uint64_t)jnum(cfg, "hidden_size"), V = (uint64_t)jnum(cfg, "vocab_size");
    const char *a = "qwen3next";
    char k[128];
    CHECK(kv_str_is(&g, "general.architecture", a));
    CHECK(kv_u32(&g, "general.file_type") == (wtype == T_Q8_0 ? 7 : 32));
    CHECK(q3n_ku(&g, "block_count") == 4 && q3n_ku(&g, "embedding_length") == (int64_t)H);
    CHECK(q3n_ku(&g, "context_length") == (int64_t)jnum(cfg, "max_position_embeddings"));
    CHECK(q3n_ku(&g, "feed_forward_length") == (int64_t)jnum(cfg, "intermediate_size"));
    CHECK(q3n_ku(&g, "expert_feed_forward_length") == (int64_t)jnum(cfg, "moe_intermediate_size"));
    CHECK(q3n_ku(&g, "expert_shared_feed_forward_length") == (int64_t)jnum(cfg, "shared_expert_intermediate_size"));
    CHECK(q3n_ku(&g, "expert_count") == (int64_t)jnum(cfg, "num_experts"));
    CHECK(q3n_ku(&g, "expert_used_count") == (int64_t)jnum(cfg, "num_experts_per_tok"));
    CHECK(q3n_ku(&g, "attention.head_count") == (int64_t)jnum(cfg, "num_attention_heads"));
    CHECK(q3n_ku(&g, "attention.head_count_kv") == (int64_t)jnum(cfg, "num_key_value_heads"));
    CHECK(q3n_ku(&g, "attention.key_length") == (int64_t)jnum(cfg, "head_dim"));
    CHECK(q3n_ku(&g, "attention.value_length") == (int64_t)jnum(cfg, "head_dim"));
    CHECK(q3n_ku(&g, "rope.dimension_count") == 16 && jnum(cfg, "head_dim") == 64 &&
          jnum(cfg, "partial_rotary_factor") == 0.25);
    CHECK(q3n_ku(&g, "ssm.conv_kernel") == (int64_t)jnum(cfg, "linear_conv_kernel_dim"));
    CHECK(q3n_ku(&g, "ssm.state_size") == (int64_t)jnum(cfg, "linear_key_head_dim"));
    CHECK(q3n_ku(&g, "ssm.group_count") == (int64_t)jnum(cfg, "linear_num_key_heads"));
    CHECK(q3n_ku(&g, "ssm.time_step_rank") == (int64_t)jnum(cfg, "linear_num_value_heads"));
    CHECK(q3n_ku(&g, "ssm.inner_size") ==
          (int64_t)(jnum(cfg, "linear_num_value_heads") * jnum(cfg, "linear_value_head_dim")));
    CHECK(q3n_ku(&g, "full_attention_interval") == 4);
    FMT(k, "%s.rope.freq_base", a);
    CHECK(kv_f32(&g, k) == (float)jnum(cfg, "rope_theta"));
    FMT(k, "%s.attention.layer_norm_rms_epsilon", a);
    CHECK(kv_f32(&g, k) == (float)jnum(cfg, "rms_norm_eps"));
    CHECK(kv_str_is(&g, "tokenizer.ggml.pre", "qwen2"));
    CHECK(moe8_st_open(dir, &st, NULL) == MOE8_OK);
    if (st) {
        check_tensor(&g, st, "token_embd.weight", wtype, 2, H, V, 0, "model.embed_tokens.weight",
                     1, &n_checked);
        for (int l = 0; l < 4; l++) check_q3n_layer(&g, st, cfg, wtype, l, &n_checked);
        check_q3n_tensor(&g, st, "output_norm.weight", T_F32, H, 0, "model.norm.weight", NULL,
                         X_PLUS1, &n_checked);
        check_tensor(&g, st, "output.weight", wtype, 2, H, V, 0, "lm_head.weight", 1, &n_checked);
        CHECKF(g.n_tensors == (uint64_t)n_checked, "%llu tensors, %d expected",
               (unsigned long long)g.n_tensors, n_checked);
        moe8_st_free(st);
    }
    gguf_free(&g);
    cJSON_Delete(cfg);
}

/* qwen3_next: the tiny preset as BF16 and Q8_0; linear value heads wider than
 * the key heads and a dense layer refused. */
static void test_q3n(const char *root, const char *out, const char *err) {
    char dir[4096], var[4096], file[4096], args[16384];
    moe8_make_model_params p = moe8_make_model_params_default();
    moe8_error e;
    FMT(dir, "%s/q3n", root);
    p.arch = MOE8_ARCH_QWEN3_NEXT;
    p.tokenizer_dir = TOK;
    p.force = 1;
    if (moe8_make_model(&p, dir, &e) != MOE8_OK) {
        fprintf(stderr, "make-model %s: %s\n", dir, e.message);
        exit(2);
    }
    static const struct { const char *name; uint32_t type; } types[] = {
        {"bf16", T_BF16}, {"q8_0", T_Q8_0}};
    for (int i = 0; i < 2; i++) {
        FMT(file, "%s/q3n_%s.gguf", out, types[i].name);
        FMT(args, "-m '%s' -o '%s' --type %s", dir, file, types[i].name);
        CHECKF(export(args, err) == 0, "qwen3_next export --type %s", types[i].name);
        check_q3n_file(file, dir, types[i].type);
        remove(file);
    }
    FMT(file, "%s/q3n_bad.gguf", out);
    FMT(var, "%s/q3n_dv", root);
    glm_variant(dir, var, NULL, "{\"linear_value_head_dim\": 64}");
    FMT(args, "-m '%s' -o '%s'", var, file);
    CHECK(export(args, err) != 0 && test_file_contains(err, "linear_value_head_dim 64"));
    FMT(var, "%s/q3n_dense", root);
    glm_variant(dir, var, NULL, "{\"mlp_only_layers\": [1]}");
    FMT(args, "-m '%s' -o '%s'", var, file);
    CHECK(export(args, err) != 0 && test_file_contains(err, "layer 1 has a dense MLP"));
    CHECK(access(file, F_OK) != 0 && n_temp_files(out) == 0);
}

/* ---- qwen3_5_moe as llama.cpp's qwen35moe ----------------------------------------- */

/* The converter's value-head reorder (_reorder_v_heads), written here from its
 * text: n = Kh r heads of width w, grouped by key head (head g r + j) in the
 * checkpoint, tiled in the file (head j Kh + g): the source index of each
 * destination index, after `keep` entries left as they are. */
static int64_t *q35_tiled(int64_t keep, int64_t Kh, int64_t r, int64_t w) {
    int64_t *o = malloc((size_t)(keep + Kh * r * w) * sizeof *o);
    if (!o) abort();
    for (int64_t i = 0; i < keep; i++) o[i] = i;
    for (int64_t g = 0; g < Kh; g++)
        for (int64_t j = 0; j < r; j++)
            for (int64_t d = 0; d < w; d++) o[keep + (j * Kh + g) * w + d] = keep + (g * r + j) * w + d;
    return o;
}

/* A 2-D (ne1 > 0) or 1-D tensor whose element (r, i) is source element
 * (row_of[r] or r) x ne0 + (col_of[i] or i), transformed: type, shape and,
 * for F32 / BF16, every value as check_q3n_tensor checks them. */
static void check_q35_tensor(const gguf *g, const moe8_st *st, const char *name, uint32_t type,
                             uint64_t ne0, uint64_t ne1, const char *hf, const int64_t *row_of,
                             const int64_t *col_of, int x, int *n_checked) {
    const gti *t = ti_find(g, name);
    const moe8_tensor *m = moe8_st_find(st, hf);
    uint32_t nd = ne1 ? 2 : 1;
    long bad = 0;
    CHECKF(t != NULL && m != NULL, "tensor %s / source %s missing", name, hf);
    if (!t || !m) return;
    (*n_checked)++;
    CHECKF(t->type == type && t->n_dims == nd && t->ne[0] == ne0 && (nd < 2 || t->ne[1] == ne1),
           "%s: type %u, %u dims {%llu, %llu}", name, t->type, t->n_dims,
           (unsigned long long)t->ne[0], (unsigned long long)t->ne[1]);
    if (t->type != type || type == T_Q8_0) return;
    const unsigned char *d = g->b + g->data0 + t->offset;
    uint64_t rows = ne1 ? ne1 : 1, es = type == T_F32 ? 4 : 2;
    if (g->data0 + t->offset + rows * ne0 * es > g->n) {
        CHECKF(0, "%s: data beyond the file", name);
        return;
    }
    for (uint64_t r = 0; r < rows; r++)
        for (uint64_t i = 0; i < ne0; i++) {
            uint64_t sr = row_of ? (uint64_t)row_of[r] : r, si = col_of ? (uint64_t)col_of[i] : i;
            double want = q3n_xform(x, src_at(m, (int64_t)(sr * ne0 + si)));
            if (type == T_F32) {
                float v;
                memcpy(&v, d + 4 * (r * ne0 + i), 4);
                bad += x == X_NEG_EXP ? fabs(v - want) > 2e-7 * fabs(want) : v != (float)want;
            } else {
                uint16_t v;
                memcpy(&v, d + 2 * (r * ne0 + i), 2);
                bad += v != ref_bf16((float)want);
            }
        }
    CHECKF(!bad, "%s: %ld values differ", name, bad);
}

/* One layer as llama.cpp's qwen35moe loader creates it (layers 0-2 Gated
 * DeltaNet, 3 full attention), the value heads tiled in attn_qkv's v rows,
 * attn_gate, ssm_beta, ssm_alpha, ssm_dt, ssm_a, the conv's v channels and
 * ssm_out's columns. */
static void check_q35_layer(const gguf *g, const moe8_st *st, const cJSON *cfg, uint32_t wtype,
                            int l, int *n_checked) {
    uint64_t H = (uint64_t)jnum(cfg, "hidden_size"), D = (uint64_t)jnum(cfg, "head_dim");
    uint64_t NQ = (uint64_t)jnum(cfg, "num_attention_heads") * D;
    uint64_t NKV = (uint64_t)jnum(cfg, "num_key_value_heads") * D;
    uint64_t E = (uint64_t)jnum(cfg, "num_experts"), I = (uint64_t)jnum(cfg, "moe_intermediate_size");
    uint64_t S = (uint64_t)jnum(cfg, "shared_expert_intermediate_size");
    uint64_t Kh = (uint64_t)jnum(cfg, "linear_num_key_heads"), Vh = (uint64_t)jnum(cfg, "linear_num_value_heads");
    uint64_t dk = (uint64_t)jnum(cfg, "linear_key_head_dim"), dv = (uint64_t)jnum(cfg, "linear_value_head_dim");
    uint64_t K = (uint64_t)jnum(cfg, "linear_conv_kernel_dim"), C = 2 * Kh * dk + Vh * dv, r = Vh / Kh;
    int linear = (l + 1) % (int)jnum(cfg, "full_attention_interval") != 0;
    char name[128], hf[256];
    const uint32_t W = 99;
    int64_t *vqkv = q35_tiled((int64_t)(2 * Kh * dk), (int64_t)Kh, (int64_t)r, (int64_t)dv);
    int64_t *vrow = q35_tiled(0, (int64_t)Kh, (int64_t)r, (int64_t)dv);
    int64_t *vhead = q35_tiled(0, (int64_t)Kh, (int64_t)r, 1);
    const struct { const char *g, *h; uint32_t ty; uint64_t ne0, ne1; const int64_t *ro, *co; int x, when; } t[] = {
        {"attn_norm.weight", "input_layernorm.weight", T_F32, H, 0, NULL, NULL, X_PLUS1, 2},
        {"post_attention_norm.weight", "post_attention_layernorm.weight", T_F32, H, 0, NULL, NULL, X_PLUS1, 2},
        {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight", W, H, C, vqkv, NULL, X_NONE, 1},
        {"attn_gate.weight", "linear_attn.in_proj_z.weight", W, H, Vh * dv, vrow, NULL, X_NONE, 1},
        {"ssm_beta.weight", "linear_attn.in_proj_b.weight", W, H, Vh, vhead, NULL, X_NONE, 1},
        {"ssm_alpha.weight", "linear_attn.in_proj_a.weight", W, H, Vh, vhead, NULL, X_NONE, 1},
        {"ssm_dt.bias", "linear_attn.dt_bias", T_F32, Vh, 0, NULL, vhead, X_NONE, 1},
        {"ssm_a", "linear_attn.A_log", T_F32, Vh, 0, NULL, vhead, X_NEG_EXP, 1},
        {"ssm_conv1d.weight", "linear_attn.conv1d.weight", T_F32, K, C, vqkv, NULL, X_NONE, 1},
        {"ssm_norm.weight", "linear_attn.norm.weight", T_F32, dv, 0, NULL, NULL, X_NONE, 1},
        {"ssm_out.weight", "linear_attn.out_proj.weight", W, Vh * dv, H, NULL, vrow, X_NONE, 1},
        {"attn_q.weight", "self_attn.q_proj.weight", W, H, 2 * NQ, NULL, NULL, X_NONE, 0},
        {"attn_k.weight", "self_attn.k_proj.weight", W, H, NKV, NULL, NULL, X_NONE, 0},
        {"attn_v.weight", "self_attn.v_proj.weight", W, H, NKV, NULL, NULL, X_NONE, 0},
        {"attn_output.weight", "self_attn.o_proj.weight", W, NQ, H, NULL, NULL, X_NONE, 0},
        {"attn_q_norm.weight", "self_attn.q_norm.weight", T_F32, D, 0, NULL, NULL, X_PLUS1, 0},
        {"attn_k_norm.weight", "self_attn.k_norm.weight", T_F32, D, 0, NULL, NULL, X_PLUS1, 0},
        {"ffn_gate_inp.weight", "mlp.gate.weight", T_F32, H, E, NULL, NULL, X_NONE, 2},
        {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", T_F32, H, 0, NULL, NULL, X_NONE, 2},
        {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", W, H, S, NULL, NULL, X_NONE, 2},
        {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", W, H, S, NULL, NULL, X_NONE, 2},
        {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", W, S, H, NULL, NULL, X_NONE, 2},
    };
    CHECK(r == 2); /* the tiny preset's: the reorder is not the identity */
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        FMT(name, "blk.%d.%s", l, t[i].g);
        if (t[i].when != 2 && t[i].when != linear) {
            CHECKF(ti_find(g, name) == NULL, "%s written", name);
            continue;
        }
        FMT(hf, "model.language_model.layers.%d.%s", l, t[i].h);
        check_q35_tensor(g, st, name, t[i].ty == W ? wtype : t[i].ty, t[i].ne0, t[i].ne1, hf, t[i].ro,
                         t[i].co, t[i].x, n_checked);
    }
    static const char *const exps[3][2] = {
        {"ffn_gate_exps", "gate_proj"}, {"ffn_up_exps", "up_proj"}, {"ffn_down_exps", "down_proj"}};
    for (int i = 0; i < 3; i++) {
        FMT(name, "blk.%d.%s.weight", l, exps[i][0]);
        FMT(hf, "model.language_model.layers.%d.mlp.experts.%%d.%s.weight", l, exps[i][1]);
        check_tensor(g, st, name, wtype, 3, i == 2 ? I : H, i == 2 ? H : I, E, hf, (int)E, n_checked);
    }
    free(vqkv);
    free(vrow);
    free(vhead);
}

static int64_t q35_ku(const gguf *g, const char *key) {
    char k[128];
    FMT(k, "qwen35moe.%s", key);
    return kv_u32(g, k);
}

/* A qwen35moe file against its (per-expert) folder: the keys qwen3next has
 * plus rope.dimension_sections (mrope_section padded to 4, I32), the
 * tokenizer's pre "qwen35", every tensor. */
static void check_q35_file(const char *path, const char *dir, uint32_t wtype) {
    gguf g;
    moe8_st *st = NULL;
    cJSON *root = read_json(dir, "config.json");
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(cfg, "rope_parameters");
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(rp, "mrope_section");
    int rc = gguf_read(&g, path), n_checked = 0;
    CHECKF(rc == 0 && cfg && ms, "cannot parse %s", path);
    if (rc || !cfg || !ms) {
        if (!rc) gguf_free(&g);
        cJSON_Delete(root);
        return;
    }
    uint64_t H = (uint64_t)jnum(cfg, "hidden_size"), V = (uint64_t)jnum(cfg, "vocab_size");
    CHECK(kv_str_is(&g, "general.architecture", "qwen35moe"));
    CHECK(q35_ku(&g, "block_count") == 4 && q35_ku(&g, "embedding_length") == (int64_t)H);
    CHECK(q35_ku(&g, "expert_feed_forward_length") == (int64_t)jnum(cfg, "moe_intermediate_size"));
    CHECK(q35_ku(&g, "expert_shared_feed_forward_length") == (int64_t)jnum(cfg, "shared_expert_intermediate_size"));
    CHECK(q35_ku(&g, "expert_count") == (int64_t)jnum(cfg, "num_experts"));
    CHECK(q35_ku(&g, "expert_used_count") == (int64_t)jnum(cfg, "num_experts_per_tok"));
    CHECK(q35_ku(&g, "attention.head_count") == (int64_t)jnum(cfg, "num_attention_heads"));
    CHECK(q35_ku(&g, "attention.head_count_kv") == (int64_t)jnum(cfg, "num_key_value_heads"));
    CHECK(q35_ku(&g, "attention.key_length") == (int64_t)jnum(cfg, "head_dim"));
    CHECK(q35_ku(&g, "rope.dimension_count") ==
          (int64_t)(jnum(cfg, "head_dim") * jnum(rp, "partial_rotary_factor")));
    CHECK(q35_ku(&g, "ssm.conv_kernel") == (int64_t)jnum(cfg, "linear_conv_kernel_dim"));
    CHECK(q35_ku(&g, "ssm.state_size") == (int64_t)jnum(cfg, "linear_key_head_dim"));
    CHECK(q35_ku(&g, "ssm.group_count") == (int64_t)jnum(cfg, "linear_num_key_heads"));
    CHECK(q35_ku(&g, "ssm.time_step_rank") == (int64_t)jnum(cfg, "linear_num_value_heads"));
    CHECK(q35_ku(&g, "ssm.inner_size") ==
          (int64_t)(jnum(cfg, "linear_num_value_heads") * jnum(cfg, "linear_value_head_dim")));
    CHECK(q35_ku(&g, "full_attention_interval") == 4);
    CHECK(kv_f32(&g, "qwen35moe.rope.freq_base") == (float)jnum(rp, "rope_theta"));
    CHECK(kv_f32(&g, "qwen35moe.attention.layer_norm_rms_epsilon") == (float)jnum(cfg, "rms_norm_eps"));
    CHECK(kv_str_is(&g, "tokenizer.ggml.pre", "qwen35"));
    {
        const gkv *s = kv_find(&g, "qwen35moe.rope.dimension_sections");
        int ok = s && s->type == V_ARR && s->arr_type == V_I32 && s->arr_n == 4;
        for (int i = 0; ok && i < 4; i++) {
            int32_t v;
            memcpy(&v, g.b + s->at + 4 * i, 4);
            const cJSON *e = cJSON_GetArrayItem(ms, i);
            ok = v == (e ? (int32_t)e->valuedouble : 0);
        }
        CHECKF(ok, "rope.dimension_sections is not mrope_section padded to 4");
    }
    CHECK(moe8_st_open(dir, &st, NULL) == MOE8_OK);
    if (st) {
        check_tensor(&g, st, "token_embd.weight", wtype, 2, H, V, 0,
                     "model.language_model.embed_tokens.weight", 1, &n_checked);
        for (int l = 0; l < 4; l++) check_q35_layer(&g, st, cfg, wtype, l, &n_checked);
        check_q3n_tensor(&g, st, "output_norm.weight", T_F32, H, 0, "model.language_model.norm.weight",
                         NULL, X_PLUS1, &n_checked);
        check_tensor(&g, st, "output.weight", wtype, 2, H, V, 0, "lm_head.weight", 1, &n_checked);
        CHECKF(g.n_tensors == (uint64_t)n_checked, "%llu tensors, %d expected",
               (unsigned long long)g.n_tensors, n_checked);
        moe8_st_free(st);
    }
    gguf_free(&g);
    cJSON_Delete(root);
}

/* `dst`: folder `src` (qwen3_5_moe, per-expert names) with its experts
 * stacked as Qwen3.5's float checkpoints store them: per layer
 * mlp.experts.gate_up_proj [E][2I][H] (each expert's gate rows, then its up
 * rows) and mlp.experts.down_proj [E][H][I]. */
static void q35_stack(const char *src, const char *dst, int64_t E) {
    char path[4096], cmd[16384], name[256];
    moe8_st *st = NULL;
    moe8_st_writer *w = NULL;
    moe8_error e;
    FMT(cmd, "rm -rf '%s' && mkdir -p '%s' && cp '%s/tokenizer.json' '%s/tokenizer_config.json' "
        "'%s/config.json' '%s/'", dst, dst, src, src, src, dst);
    if (test_run(cmd) != 0) exit(2);
    FMT(path, "%s/model.safetensors", dst);
    if (moe8_st_open(src, &st, &e) != MOE8_OK || moe8_st_writer_open(path, &w, &e) != MOE8_OK) exit(2);
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < moe8_st_count(st); i++) {
            const moe8_tensor *t = moe8_st_get(st, i);
            if (strstr(t->name, ".mlp.experts.")) continue;
            if ((pass == 0 ? moe8_st_writer_declare(w, t->name, t->dtype, t->n_dims, t->shape, &e)
                           : moe8_st_writer_write(w, t->name, t->data, t->n_bytes, &e)) != MOE8_OK)
                exit(2);
        }
        for (int l = 0; l < 4; l++)
            for (int down = 0; down < 2; down++) {
                const moe8_tensor *t0;
                FMT(name, "model.language_model.layers.%d.mlp.experts.0.%s.weight", l,
                    down ? "down_proj" : "gate_proj");
                if (!(t0 = moe8_st_find(st, name))) exit(2);
                const size_t one = t0->n_bytes;
                const int64_t shape[3] = {E, down ? t0->shape[0] : 2 * t0->shape[0], t0->shape[1]};
                FMT(name, "model.language_model.layers.%d.mlp.experts.%s", l, down ? "down_proj" : "gate_up_proj");
                if (pass == 0) {
                    if (moe8_st_writer_declare(w, name, t0->dtype, 3, shape, &e) != MOE8_OK) exit(2);
                    continue;
                }
                unsigned char *b = malloc(one * (size_t)E * (down ? 1 : 2));
                for (int64_t x = 0; x < E; x++)
                    for (int p = 0; p < (down ? 1 : 2); p++) {
                        char en[256];
                        FMT(en, "model.language_model.layers.%d.mlp.experts.%lld.%s.weight", l,
                            (long long)x, down ? "down_proj" : p ? "up_proj" : "gate_proj");
                        const moe8_tensor *t = moe8_st_find(st, en);
                        if (!t || t->n_bytes != one) exit(2);
                        memcpy(b + one * (size_t)(x * (down ? 1 : 2) + p), t->data, one);
                    }
                if (moe8_st_writer_write(w, name, b, one * (size_t)E * (down ? 1 : 2), &e) != MOE8_OK) exit(2);
                free(b);
            }
    }
    if (moe8_st_writer_finish(w, &e) != MOE8_OK) exit(2);
    moe8_st_writer_free(w);
    moe8_st_free(st);
}

/* The same tensors (names, types, shapes, data bytes) in two files. */
static int same_tensors(const char *a_path, const char *b_path) {
    gguf a, b;
    int ok = gguf_read(&a, a_path) == 0, ok_b = gguf_read(&b, b_path) == 0;
    ok = ok && ok_b && a.n_tensors == b.n_tensors;
    for (uint64_t i = 0; ok && i < a.n_tensors; i++) {
        const gti *x = &a.ti[i], *y = ti_find(&b, x->name);
        const gti *nx = i + 1 < a.n_tensors ? &a.ti[i + 1] : NULL;
        uint64_t n = (nx ? nx->offset : a.n - a.data0) - x->offset;
        ok = y && y->type == x->type && y->n_dims == x->n_dims &&
             !memcmp(y->ne, x->ne, sizeof x->ne) && b.data0 + y->offset + n <= b.n &&
             !memcmp(a.b + a.data0 + x->offset, b.b + b.data0 + y->offset, (size_t)n);
        if (!ok) fprintf(stderr, "  %s differs\n", x->name);
    }
    gguf_free(&b);
    gguf_free(&a);
    return ok;
}

/* qwen3_5_moe: the tiny preset as BF16; the same weights with stacked
 * experts give the same tensors byte for byte. */
static void test_q35(const char *root, const char *out, const char *err) {
    char dir[4096], var[4096], file[4096], file2[4096], args[16384];
    moe8_make_model_params p = moe8_make_model_params_default();
    moe8_error e;
    FMT(dir, "%s/q35", root);
    p.arch = MOE8_ARCH_QWEN3_5_MOE;
    p.tokenizer_dir = TOK;
    p.force = 1;
    if (moe8_make_model(&p, dir, &e) != MOE8_OK) {
        fprintf(stderr, "make-model %s: %s\n", dir, e.message);
        exit(2);
    }
    static const struct { const char *name; uint32_t type; } types[] = {{"bf16", T_BF16}};
    for (int i = 0; i < 1; i++) { /* Q8_0's rows: qwen3next's test (the same writer) */
        FMT(file, "%s/q35_%s.gguf", out, types[i].name);
        FMT(args, "-m '%s' -o '%s' --type %s", dir, file, types[i].name);
        CHECKF(export(args, err) == 0, "qwen3_5_moe export --type %s", types[i].name);
        check_q35_file(file, dir, types[i].type);
        if (i == 0) {
            cJSON *c = read_json(dir, "config.json");
            FMT(var, "%s/q35_stacked", root);
            q35_stack(dir, var, (int64_t)jnum(cJSON_GetObjectItem(c, "text_config"), "num_experts"));
            cJSON_Delete(c);
            FMT(file2, "%s/q35_stacked.gguf", out);
            FMT(args, "-m '%s' -o '%s' --type bf16", var, file2);
            CHECKF(export(args, err) == 0, "qwen3_5_moe stacked export");
            CHECK(same_tensors(file, file2));
            remove(file2);
        }
        remove(file);
    }
}

/* ---- gpt_oss as llama.cpp's gpt-oss ------------------------------------------------ */

/* e2m1 as the checkpoint reads it (the OCP table, scale 2^(s - 127), byte j
 * holding values 2j low and 2j + 1 high) and as ggml does (kvalues_mxfp4: the
 * table doubled, scale 2^(e - 128); a block's byte k holding values k low and
 * k + 16 high, after the scale byte). */
static const double e2m1_tab[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
static const int ggml_mxfp4_tab[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static double ck_mx(const moe8_tensor *b, const moe8_tensor *s, int64_t row, int64_t cols,
                    int64_t j) {
    const uint8_t byte = ((const uint8_t *)b->data)[row * cols / 2 + j / 2];
    const int sc = ((const uint8_t *)s->data)[row * cols / 32 + j / 32];
    return ldexp(e2m1_tab[j % 2 ? byte >> 4 : byte & 15], sc - 127);
}
static double gg_mx(const unsigned char *row, int64_t j) {
    const unsigned char *blk = row + j / 32 * 17;
    const int k = (int)(j % 32);
    const unsigned q = k < 16 ? blk[1 + k] & 15u : blk[1 + k - 16] >> 4;
    return ggml_mxfp4_tab[q] * ldexp(1.0, (int)blk[0] - 128);
}

/* A layer's stacked expert sources: MXFP4 pairs or the float stacked tensors. */
typedef struct {
    const moe8_tensor *gu_b, *gu_s, *dn_b, *dn_s, *gu, *dn, *gu_bias, *dn_bias;
    int64_t E, I, H;
} go_exps;

/* Value (e, r, c) of expert tensor k (0 gate, 1 up, 2 down) in [E][out][in]. */
static double go_want(const go_exps *x, int k, int64_t e, int64_t r, int64_t c) {
    const int64_t I = x->I, H = x->H;
    if (x->gu_b)
        return k == 2 ? ck_mx(x->dn_b, x->dn_s, e * H + r, I, c)
                      : ck_mx(x->gu_b, x->gu_s, e * 2 * I + 2 * r + k, H, c);
    return k == 2 ? src_at(x->dn, (e * I + c) * H + r) : src_at(x->gu, (e * H + c) * 2 * I + 2 * r + k);
}

/* blk.l's experts and their biases: every value (MXFP4 scale bytes as the
 * checkpoint's, values decoded both ways; BF16 exact), shapes and types. */
static void check_go_experts(const gguf *g, const go_exps *x, int l, uint32_t type) {
    static const char *const names[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    const int64_t E = x->E, I = x->I, H = x->H;
    char name[128];
    for (int k = 0; k < 3; k++) {
        const int64_t rows = k == 2 ? H : I, cols = k == 2 ? I : H;
        const uint64_t rb = type == 39 ? (uint64_t)cols / 32 * 17 : 2 * (uint64_t)cols;
        long bad = 0, bad_s = 0;
        FMT(name, "blk.%d.%s.weight", l, names[k]);
        const gti *t = ti_find(g, name);
        CHECKF(t && t->type == type && t->n_dims == 3 && t->ne[0] == (uint64_t)cols &&
               t->ne[1] == (uint64_t)rows && t->ne[2] == (uint64_t)E, "%s: type or shape", name);
        if (!t || g->data0 + t->offset + rb * (uint64_t)(E * rows) > g->n) continue;
        for (int64_t e = 0; e < E; e++)
            for (int64_t r = 0; r < rows; r++) {
                const unsigned char *row = g->b + g->data0 + t->offset + rb * (uint64_t)(e * rows + r);
                for (int64_t c = 0; c < cols; c++) {
                    double got;
                    if (type == 39) {
                        got = gg_mx(row, c);
                    } else {
                        uint16_t v;
                        memcpy(&v, row + 2 * c, 2);
                        got = bits_f32((uint32_t)v << 16);
                    }
                    bad += got != go_want(x, k, e, r, c);
                }
                if (type != 39) continue;
                const moe8_tensor *s = k == 2 ? x->dn_s : x->gu_s;
                const int64_t sr = k == 2 ? e * H + r : e * 2 * I + 2 * r + k;
                for (int64_t b = 0; b < cols / 32; b++)
                    bad_s += row[b * 17] != ((const uint8_t *)s->data)[sr * (cols / 32) + b];
            }
        CHECKF(!bad && !bad_s, "%s: %ld values, %ld scale bytes differ", name, bad, bad_s);
        FMT(name, "blk.%d.%s.bias", l, names[k]);
        t = ti_find(g, name);
        CHECKF(t && t->type == T_F32 && t->n_dims == 2 && t->ne[0] == (uint64_t)(k == 2 ? H : I) &&
               t->ne[1] == (uint64_t)E, "%s: type or shape", name);
        if (!t) continue;
        bad = 0;
        for (int64_t e = 0; e < E; e++)
            for (int64_t i = 0; i < (k == 2 ? H : I); i++) {
                float v;
                memcpy(&v, g->b + g->data0 + t->offset + 4 * (uint64_t)(e * (k == 2 ? H : I) + i), 4);
                bad += v != (k == 2 ? src_at(x->dn_bias, e * H + i)
                                    : src_at(x->gu_bias, e * 2 * I + 2 * i + k));
            }
        CHECKF(!bad, "%s: %ld values differ", name, bad);
    }
}

/* A gpt-oss file against its folder: llama.cpp's keys (openai-moe's hparams:
 * the window, YaRN; expert counts and widths), pre gpt-4o, every tensor
 * llama.cpp's loader creates; the experts MXFP4 (mx) or `wtype`. */
static void check_go_file(const char *path, const char *dir, uint32_t wtype, uint32_t etype) {
    gguf g;
    moe8_st *st = NULL;
    moe8_error e;
    cJSON *cfg = read_json(dir, "config.json");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    int rc = gguf_read(&g, path), n = 0;
    CHECKF(rc == 0 && moe8_st_open(dir, &st, &e) == MOE8_OK, "cannot parse %s", path);
    if (rc || !st) {
        gguf_free(&g);
        cJSON_Delete(cfg);
        return;
    }
    const int64_t H = (int64_t)jnum(cfg, "hidden_size"), V = (int64_t)jnum(cfg, "vocab_size");
    const int64_t D = (int64_t)jnum(cfg, "head_dim"), E = (int64_t)jnum(cfg, "num_local_experts");
    const int64_t NH = (int64_t)jnum(cfg, "num_attention_heads"), NQ = NH * D;
    const int64_t NKV = (int64_t)jnum(cfg, "num_key_value_heads") * D;
    const int64_t I = (int64_t)jnum(cfg, "intermediate_size"), L = (int64_t)jnum(cfg, "num_hidden_layers");
    CHECK(kv_str_is(&g, "general.architecture", "gpt-oss"));
    CHECK(kv_u32(&g, "gpt-oss.block_count") == L);
    CHECK(kv_u32(&g, "gpt-oss.context_length") == (int64_t)jnum(cfg, "max_position_embeddings"));
    CHECK(kv_u32(&g, "gpt-oss.embedding_length") == H);
    CHECK(kv_u32(&g, "gpt-oss.feed_forward_length") == I);
    CHECK(kv_u32(&g, "gpt-oss.expert_feed_forward_length") == I);
    CHECK(kv_u32(&g, "gpt-oss.attention.head_count") == NH);
    CHECK(kv_u32(&g, "gpt-oss.attention.head_count_kv") == (int64_t)jnum(cfg, "num_key_value_heads"));
    CHECK(kv_u32(&g, "gpt-oss.attention.key_length") == D && kv_u32(&g, "gpt-oss.attention.value_length") == D);
    CHECK(kv_u32(&g, "gpt-oss.expert_count") == E);
    CHECK(kv_u32(&g, "gpt-oss.expert_used_count") == (int64_t)jnum(cfg, "experts_per_token"));
    CHECK(kv_u32(&g, "gpt-oss.attention.sliding_window") == (int64_t)jnum(cfg, "sliding_window"));
    CHECK(kv_f32(&g, "gpt-oss.rope.freq_base") == (float)jnum(cfg, "rope_theta"));
    CHECK(kv_f32(&g, "gpt-oss.attention.layer_norm_rms_epsilon") == (float)jnum(cfg, "rms_norm_eps"));
    CHECK(kv_str_is(&g, "gpt-oss.rope.scaling.type", "yarn"));
    CHECK(kv_f32(&g, "gpt-oss.rope.scaling.factor") == (float)jnum(rs, "factor"));
    CHECK(kv_u32(&g, "gpt-oss.rope.scaling.original_context_length") ==
          (int64_t)jnum(rs, "original_max_position_embeddings"));
    CHECK(kv_f32(&g, "gpt-oss.rope.scaling.yarn_beta_fast") == (float)jnum(rs, "beta_fast"));
    CHECK(kv_f32(&g, "gpt-oss.rope.scaling.yarn_beta_slow") == (float)jnum(rs, "beta_slow"));
    CHECK(kv_str_is(&g, "tokenizer.ggml.pre", "gpt-4o"));
    CHECK(kv_find(&g, "tokenizer.ggml.tokens") && kv_find(&g, "tokenizer.ggml.tokens")->arr_n == (uint64_t)V);
    check_tensor(&g, st, "token_embd.weight", wtype, 2, H, V, 0, "model.embed_tokens.weight", 1, &n);
    check_tensor(&g, st, "output_norm.weight", T_F32, 1, H, 0, 0, "model.norm.weight", 1, &n);
    check_tensor(&g, st, "output.weight", wtype, 2, H, V, 0, "lm_head.weight", 1, &n);
    const uint32_t W = 99;
    const struct { const char *g, *h; uint32_t ty; int nd; int64_t ne0, ne1; } t[] = {
        {"attn_norm.weight", "input_layernorm.weight", T_F32, 1, H, 0},
        {"attn_q.weight", "self_attn.q_proj.weight", W, 2, H, NQ},
        {"attn_q.bias", "self_attn.q_proj.bias", T_F32, 1, NQ, 0},
        {"attn_k.weight", "self_attn.k_proj.weight", W, 2, H, NKV},
        {"attn_k.bias", "self_attn.k_proj.bias", T_F32, 1, NKV, 0},
        {"attn_v.weight", "self_attn.v_proj.weight", W, 2, H, NKV},
        {"attn_v.bias", "self_attn.v_proj.bias", T_F32, 1, NKV, 0},
        {"attn_output.weight", "self_attn.o_proj.weight", W, 2, NQ, H},
        {"attn_output.bias", "self_attn.o_proj.bias", T_F32, 1, H, 0},
        {"attn_sinks.weight", "self_attn.sinks", T_F32, 1, NH, 0},
        {"post_attention_norm.weight", "post_attention_layernorm.weight", T_F32, 1, H, 0},
        {"ffn_gate_inp.weight", "mlp.router.weight", T_F32, 2, H, E},
        {"ffn_gate_inp.bias", "mlp.router.bias", T_F32, 1, E, 0},
    };
    char name[128], hf[256];
    for (int l = 0; l < (int)L; l++) {
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            FMT(name, "blk.%d.%s", l, t[i].g);
            FMT(hf, "model.layers.%d.%s", l, t[i].h);
            check_tensor(&g, st, name, t[i].ty == W ? wtype : t[i].ty, t[i].nd, (uint64_t)t[i].ne0,
                         (uint64_t)t[i].ne1, 0, hf, 1, &n);
        }
        go_exps x = {.E = E, .I = I, .H = H};
        FMT(hf, "model.layers.%d.mlp.experts.gate_up_proj_blocks", l);
        x.gu_b = moe8_st_find(st, hf);
        FMT(hf, "model.layers.%d.mlp.experts.gate_up_proj_scales", l);
        x.gu_s = moe8_st_find(st, hf);
        FMT(hf, "model.layers.%d.mlp.experts.down_proj_blocks", l);
        x.dn_b = moe8_st_find(st, hf);
        FMT(hf, "model.layers.%d.mlp.experts.down_proj_scales", l);
        x.dn_s = moe8_st_find(st, hf);
        FMT(hf, "model.layers.%d.mlp.experts.gate_up_proj", l);
        x.gu = moe8_st_find(st, hf);
        FMT(hf, "model.layers.%d.mlp.experts.down_proj", l);
        x.dn = moe8_st_find(st, hf);
        FMT(hf, "model.layers.%d.mlp.experts.gate_up_proj_bias", l);
        x.gu_bias = moe8_st_find(st, hf);
        FMT(hf, "model.layers.%d.mlp.experts.down_proj_bias", l);
        x.dn_bias = moe8_st_find(st, hf);
        CHECKF((x.gu_b ? x.gu_s && x.dn_b && x.dn_s : x.gu && x.dn) && x.gu_bias && x.dn_bias,
               "%s: layer %d's expert tensors", dir, l);
        if ((x.gu_b ? !x.dn_s : !x.dn) || !x.gu_bias || !x.dn_bias) continue;
        CHECKF(!x.gu_b == (etype != 39), "%s: experts %s, file type %u", dir, x.gu_b ? "MXFP4" : "float", etype);
        check_go_experts(&g, &x, l, etype);
        n += 6;
    }
    /* 3 + 13 per layer + 6 per layer, and nothing else */
    CHECKF(n == 3 + 19 * (int)L && g.n_tensors == (uint64_t)(3 + 19 * L), "%d checked of %llu", n,
           (unsigned long long)g.n_tensors);
    moe8_st_free(st);
    gguf_free(&g);
    cJSON_Delete(cfg);
}

/* gpt_oss: the tiny preset as released (MXFP4 experts) exported with Q8_0 and
 * BF16 matrices, its experts MXFP4 bit for bit either way; the same seed with
 * float experts (make-model --float-experts) as BF16, its experts the same
 * values; what llama.cpp fixes refused when the checkpoint says otherwise. */
static void test_gptoss(const char *root, const char *out, const char *err) {
    char mx[4096], fl[4096], var[4096], file[4096], args[16384];
    moe8_make_model_params p = moe8_make_model_params_default();
    moe8_error e;
    FMT(mx, "%s/go_mx", root);
    FMT(fl, "%s/go_float", root);
    p.arch = MOE8_ARCH_GPT_OSS;
    p.tokenizer_dir = TOK;
    p.vocab_size = 1024;
    p.seed = 7;
    p.force = 1;
    if (moe8_make_model(&p, mx, &e) != MOE8_OK) {
        fprintf(stderr, "make-model %s: %s\n", mx, e.message);
        exit(2);
    }
    p.float_experts = 1;
    if (moe8_make_model(&p, fl, &e) != MOE8_OK) {
        fprintf(stderr, "make-model %s: %s\n", fl, e.message);
        exit(2);
    }
    static const struct { const char *name; uint32_t type; } types[] = {{"q8_0", T_Q8_0}, {"bf16", T_BF16}};
    for (int i = 0; i < 2; i++) {
        FMT(file, "%s/go_%s.gguf", out, types[i].name);
        FMT(args, "-m '%s' -o '%s' --type %s", mx, file, types[i].name);
        CHECKF(export(args, err) == 0, "gpt_oss export --type %s", types[i].name);
        check_go_file(file, mx, types[i].type, 39);
        remove(file);
    }
    FMT(file, "%s/go_float.gguf", out);
    FMT(args, "-m '%s' -o '%s' --type bf16", fl, file);
    CHECKF(export(args, err) == 0, "gpt_oss float experts export");
    check_go_file(file, fl, T_BF16, T_BF16);
    remove(file);
    /* a folder whose template is chat_template.jinja (gpt-oss's): the key is the file */
    {
        static const char tmpl[] = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}";
        char path[4200];
        gguf g;
        FMT(var, "%s/go_jinja", root);
        glm_variant(mx, var, NULL, "{}");
        cJSON *tc = read_json(var, "tokenizer_config.json");
        cJSON_DeleteItemFromObject(tc, "chat_template");
        char *txt = cJSON_Print(tc);
        FMT(path, "%s/tokenizer_config.json", var);
        test_write_file(path, txt, strlen(txt));
        free(txt);
        cJSON_Delete(tc);
        FMT(path, "%s/chat_template.jinja", var);
        test_write_file(path, tmpl, strlen(tmpl));
        FMT(args, "-m '%s' -o '%s' --type bf16", var, file);
        CHECKF(export(args, err) == 0, "gpt_oss export with chat_template.jinja");
        CHECK(gguf_read(&g, file) == 0 && kv_str_is(&g, "tokenizer.chat_template", tmpl));
        gguf_free(&g);
        remove(file);
    }
    static const struct { const char *set, *msg; } bad[] = {
        {"{\"attention_bias\": false}", "attention_bias false"},
        {"{\"swiglu_limit\": 6.0}", "swiglu_limit 6"},
        {"{\"layer_types\": [\"full_attention\", \"sliding_attention\", \"sliding_attention\", "
         "\"full_attention\"]}", "layer_types[0]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FMT(var, "%s/go_bad", root);
        glm_variant(mx, var, NULL, bad[i].set);
        FMT(args, "-m '%s' -o '%s'", var, file);
        CHECKF(export(args, err) != 0 && test_file_contains(err, bad[i].msg), "gpt_oss %s", bad[i].set);
    }
    CHECK(access(file, F_OK) != 0 && n_temp_files(out) == 0);
}

/* ---- main ---------------------------------------------------------------------- */

static int same_bytes(const char *path, const char *want) {
    size_t n = 0;
    unsigned char *b = test_slurp(path, &n);
    int same = b && n == strlen(want) && !memcmp(b, want, n);
    free(b);
    return same;
}

/* qwen3_moe as llama.cpp's qwen3moe: the three types, the F32 source, --layers,
 * --force, the bad inputs. */
static void test_qwen3(const char *root, const char *out, const char *err) {
    char src[4096], moe[4096], nan_dir[4096], f32_src[4096], f32_dir[4096], w8[4096];
    char file[4096], args[16384], cmd[16384], exists[4096];
    FMT(src, "%s/tiny", root);
    FMT(moe, "%s/moe", root);
    FMT(nan_dir, "%s/moe_nan", root);
    FMT(f32_src, "%s/tiny_f32", root);
    FMT(f32_dir, "%s/moe_f32", root);
    FMT(w8, "%s/w8a8", root);
    make_moe_model(src, moe, 2, MOE8_DT_BF16, 0, 1, 0);

    /* the three matrix types from a BF16 model */
    static const struct { const char *name; uint32_t type; } types[] = {
        {"f16", T_F16}, {"bf16", T_BF16}, {"q8_0", T_Q8_0}};
    for (int i = 0; i < 3; i++) {
        FMT(file, "%s/%s.gguf", out, types[i].name);
        FMT(args, "-m '%s' -o '%s' --type %s", moe, file, types[i].name);
        CHECKF(export(args, err) == 0, "export --type %s", types[i].name);
        check_file(file, moe, types[i].type, 2);
        CHECK(n_temp_files(out) == 0);
    }

    /* an F32 model with tied embeddings (no output.weight): F16 and BF16
     * rounded to nearest even here */
    make_moe_model(f32_src, f32_dir, 1, MOE8_DT_F32, 0, 1, 1);
    for (int i = 0; i < 2; i++) {
        FMT(file, "%s/f32_%s.gguf", out, types[i].name);
        FMT(args, "-m '%s' -o '%s' --type %s", f32_dir, file, types[i].name);
        CHECKF(export(args, err) == 0, "f32 export --type %s", types[i].name);
        check_file(file, f32_dir, types[i].type, 1);
        FMT(cmd, "rm -f '%s'", file);
        test_run(cmd);
    }

    /* an existing output: refused without --force and untouched */
    FMT(exists, "%s/exists.gguf", out);
    test_write_file(exists, "precious", 8);
    FMT(args, "-m '%s' -o '%s' --layers 1", moe, exists);
    CHECK(export(args, err) != 0);
    CHECK(test_file_contains(err, "exists.gguf") && test_file_contains(err, "--force"));
    CHECK(same_bytes(exists, "precious"));

    /* a NaN weight found while writing: non-zero, the tensor named, the old file kept */
    make_moe_model(src, nan_dir, 2, MOE8_DT_BF16, 1, 0, 0);
    FMT(args, "-m '%s' -o '%s' --force", nan_dir, exists);
    CHECK(export(args, err) != 0);
    CHECK(test_file_contains(err, "model.layers.1.mlp.experts.15.down_proj.weight") &&
          test_file_contains(err, "not finite"));
    CHECK(same_bytes(exists, "precious"));
    CHECK(n_temp_files(out) == 0);

    /* --layers 1 with --force replaces it: block_count 1, only blk.0 */
    FMT(args, "-m '%s' -o '%s' --layers 1 --force --type q8_0", moe, exists);
    CHECK(export(args, err) == 0);
    check_file(exists, moe, T_Q8_0, 1);
    CHECK(n_temp_files(out) == 0);
    FMT(args, "-m '%s' -o '%s/l3.gguf' --layers 3", moe, out);
    CHECK(export(args, err) != 0 && test_file_contains(err, "--layers 3"));

    /* the output is a file of the model folder: refused even with --force */
    {
        char st_path[4200], cfg_path[4200];
        size_t n0 = 0, n1 = 0;
        FMT(st_path, "%s/model.safetensors", moe);
        unsigned char *before = test_slurp(st_path, &n0), *after;
        FMT(args, "-m '%s' -o '%s' --force", moe, st_path);
        CHECK(export(args, err) != 0);
        CHECK(test_file_contains(err, "model.safetensors") &&
              test_file_contains(err, "of the model folder"));
        after = test_slurp(st_path, &n1);
        CHECK(before && after && n0 == n1 && !memcmp(before, after, n0));
        free(before);
        free(after);
        FMT(cfg_path, "%s/./config.json", moe);
        FMT(args, "-m '%s' -o '%s' --force", moe, cfg_path);
        CHECK(export(args, err) != 0 && test_file_contains(err, "config.json") &&
              test_file_contains(err, "of the model folder"));
        CHECK(n_temp_files(moe) == 0);
    }

    /* a missing folder */
    FMT(args, "-m '%s/nope' -o '%s/nope.gguf'", root, out);
    CHECK(export(args, err) != 0 && test_file_contains(err, "nope"));

    /* a W8A8 folder: the first quantized tensor named */
    FMT(cmd, "'%s' quantize -i '%s' -o '%s' >/dev/null 2>&1", MOE8_CLI, moe, w8);
    CHECK(test_run(cmd) == 0);
    FMT(args, "-m '%s' -o '%s/w8.gguf'", w8, out);
    CHECK(export(args, err) != 0);
    CHECK(test_file_contains(err, "model.layers.0.self_attn.q_proj.weight") &&
          test_file_contains(err, "I8") && test_file_contains(err, "float"));
    FMT(file, "%s/w8.gguf", out);
    CHECK(access(file, F_OK) != 0);
    CHECK(n_temp_files(out) == 0);
}

/* `--part NAME` runs one family's checks in its own scratch folder (ctest runs
 * the parts side by side: whole, this was the sanitizer stage's longest test
 * by far); no argument runs them all. */
int main(int argc, char **argv) {
    static const struct { const char *name; void (*fn)(const char *, const char *, const char *); }
        parts[] = {{"qwen3", test_qwen3}, {"glm", test_glm}, {"mm", test_mm}, {"q3n", test_q3n},
                   {"q35", test_q35}, {"oss", test_gptoss}};
    const int n_parts = (int)(sizeof parts / sizeof *parts);
    const char *part = argc == 3 && !strcmp(argv[1], "--part") ? argv[2] : NULL;
    int run = -1; /* all */
    for (int i = 0; part && i < n_parts; i++)
        if (!strcmp(part, parts[i].name)) run = i;
    if (argc != 1 && run < 0) {
        fprintf(stderr, "usage: test_export_gguf [--part qwen3|glm|mm|q3n|q35|oss]\n");
        return 2;
    }
    char scratch[64], out[4096], err[4096], cmd[8192];
    FMT(scratch, "export_gguf%s%s", run < 0 ? "" : "_", run < 0 ? "" : part);
    const char *root = test_tmpdir(scratch);
    FMT(out, "%s/out", root);
    FMT(err, "%s/stderr.txt", root);
    FMT(cmd, "mkdir -p '%s'", out);
    CHECK(test_run(cmd) == 0);

    fill_tables();
    for (int i = 0; i < n_parts; i++)
        if (run < 0 || run == i) parts[i].fn(root, out, err);

    FMT(cmd, "rm -rf '%s'", root);
    test_run(cmd);
    return test_summary();
}
