/*
 * test_w4a8_linear.c — `moe8 quantize --linear w4a8` (moe8_quantize_params
 * .linear_w4a8, SEMANTICS §5b): the attention projections and dense MLPs of
 * a float model as W4A8_DYNAMIC (int4 per output channel, msModelSlim's
 * pairs along the output dimension; per-token int8 activations at run
 * time), on a Qwen3-MoE fixture and a DeepSeek-V3 one (MLA: q_a / q_b /
 * kv_a_proj_with_mqa / o_proj, with odd widths: q_lora 20 is no multiple of
 * 8, kv_a's 36 rows no multiple of 16; kv_b_proj stays FLOAT; layer 0
 * dense). For each:
 *   - the description lists every linear W4A8_DYNAMIC (group_size 0) and
 *     the loader resolves them so;
 *   - the whole forward of the quantized folder against forward_ref.h's
 *     double-precision forward fed with the folder's own tensors (its int4
 *     codes decoded by the reference itself, the exact integer sums);
 *   - the packed cache: a second load maps the int4 linears and gives the
 *     same logits bit for bit;
 *   - (Qwen3) under TP, two offline ranks' slices side by side are the
 *     single process's codes.
 */
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "test.h"
#include "test_isa.h"
#include "fixture_model.h"
#include "forward_ref.h"

#include "moe8.h"
#include "moe8_tools.h"
#include "moe8_safetensors.h"
#include "moe8_dist.h"

#include "load/weights.h"

static const int32_t IDS[7] = {5, 17, 200, 3, 99, 42, 7};

/* Logits of IDS (one batch) into out [7][V]. */
static void logits_of(const char *dir, float *out) {
    moe8_model *m = test_load_model(dir);
    moe8_context_params p = moe8_context_params_default();
    moe8_context *c = NULL;
    moe8_error e;
    int32_t pos[7], sq[7];
    int8_t lg[7];
    p.kv_type = MOE8_DT_F32;
    p.n_ctx = 16;
    p.n_seq_max = 1;
    p.n_outputs = 8;
    p.n_threads = 2;
    CHECKF(moe8_context_create(m, &p, &c, &e) == MOE8_OK, "context: %s", e.message);
    if (!c) exit(2);
    const int V = moe8_context_n_vocab(c);
    for (int i = 0; i < 7; i++) pos[i] = i, sq[i] = 0, lg[i] = 1;
    moe8_batch b = {7, IDS, pos, sq, lg};
    CHECKF(moe8_decode(c, &b, &e) == MOE8_OK, "decode: %s", e.message);
    for (int i = 0; i < 7; i++) memcpy(out + (size_t)i * V, moe8_context_logits(c, i), sizeof(float) * V);
    moe8_context_free(c);
    moe8_model_free(m);
}

/* The reference's tensors replaced by the folder's (names, dtypes, shapes,
 * bytes, and each one's type from its quant_model_description.json). */
static void ref_from_folder(ref_model *rm, const char *dir) {
    static const char *const types[] = {"FLOAT", "W8A8", "W8A8_DYNAMIC", "W4A8_DYNAMIC"};
    char path[4400];
    size_t len = 0;
    moe8_st *st = NULL;
    moe8_error e;
    snprintf(path, sizeof path, "%s/quant_model_description.json", dir);
    char *text = (char *)test_slurp(path, &len);
    cJSON *desc = text ? cJSON_ParseWithLength(text, len) : NULL;
    if (!desc || moe8_st_open(dir, &st, &e) != MOE8_OK) {
        fprintf(stderr, "cannot read the folder '%s'\n", dir);
        exit(2);
    }
    fx_list_free(&rm->L);
    rm->L.n = (int)moe8_st_count(st);
    rm->L.cap = rm->L.n;
    rm->L.t = calloc((size_t)rm->L.n, sizeof *rm->L.t);
    for (int i = 0; i < rm->L.n; i++) {
        const moe8_tensor *t = moe8_st_get(st, (size_t)i);
        fx_tensor *f = &rm->L.t[i];
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(desc, t->name);
        snprintf(f->name, sizeof f->name, "%s", t->name);
        f->dtype = t->dtype;
        f->n_dims = t->n_dims;
        for (int d = 0; d < t->n_dims && d < 4; d++) f->shape[d] = t->shape[d];
        f->n_bytes = t->n_bytes;
        f->data = malloc(t->n_bytes ? t->n_bytes : 1);
        memcpy(f->data, t->data, t->n_bytes);
        f->quant = "FLOAT";
        for (size_t k = 0; cJSON_IsString(q) && k < 4; k++)
            if (!strcmp(q->valuestring, types[k])) f->quant = types[k];
    }
    moe8_st_free(st);
    cJSON_Delete(desc);
    free(text);
}

/* Under TP (two offline ranks, packed as `moe8 pack --tp 2 --rank R` does)
 * the ranks' W4A8 q/k/v and dense gate/up rows, and o_proj / dense down
 * columns, laid side by side, are the single process's: the same codes. */
static void tp_case(const char *dir, int n_layers) {
    moe8_model *one = test_load_model(dir);
    const moe8_weights *w1 = NULL;
    moe8_error e;
    CHECKF(moe8_weights_acquire(one, 0, 2, &w1, &e) == MOE8_OK, "weights: %s", e.message);
    int at[64] = {0}, bad = 0; /* [layer][proj]: rows or columns seen so far */
    for (int r = 0; r < 2; r++) {
        moe8_dist *d = NULL;
        moe8_model_params mp = moe8_model_params_default();
        moe8_model *m = NULL;
        const moe8_weights *w = NULL;
        CHECK(moe8_dist_create_offline(2, r, 0, &d, &e) == MOE8_OK);
        mp.dist = d, mp.no_cache = 1, mp.n_threads = 2;
        CHECKF(moe8_model_load(dir, &mp, &m, &e) == MOE8_OK, "rank %d load: %s", r, e.message);
        CHECKF(m && moe8_weights_acquire(m, 0, 2, &w, &e) == MOE8_OK, "rank %d weights: %s", r,
               e.message);
        if (!w) exit(2);
        for (int l = 0; l < n_layers; l++) {
            const moe8_fwd_layer *a = &w->layers[l], *b = &w1->layers[l];
            const moe8_proj *pa[7] = {&a->q, &a->k, &a->v, &a->gate, &a->up, &a->o, &a->down};
            const moe8_proj *pb[7] = {&b->q, &b->k, &b->v, &b->gate, &b->up, &b->o, &b->down};
            for (int i = 0; i < 7; i++) {
                const int cols = i >= 5, n = pa[i]->n, k = pa[i]->k;
                if (!n) continue;
                bad += pa[i]->type != MOE8_QUANT_W4A8_DYNAMIC;
                for (int j = 0; j < n; j++)
                    for (int t = 0; t < k; t++)
                        bad += moe8_qmat_at(&pa[i]->q, j, t) !=
                               moe8_qmat_at(&pb[i]->q, cols ? j : at[l * 7 + i] + j,
                                            cols ? at[l * 7 + i] + t : t);
                at[l * 7 + i] += cols ? k : n;
            }
        }
        moe8_weights_release(m, w);
        moe8_model_free(m);
        moe8_dist_free(d);
    }
    for (int l = 0; l < n_layers; l++) {
        const moe8_fwd_layer *b = &w1->layers[l];
        const int whole[7] = {b->q.n, b->k.n, b->v.n, b->gate.n, b->up.n, b->o.k, b->down.k};
        for (int i = 0; i < 7; i++) bad += at[l * 7 + i] != whole[i];
    }
    CHECKF(bad == 0, "TP: %d codes or widths of the ranks' W4A8 linears differ", bad);
    moe8_weights_release(one, w1);
    moe8_model_free(one);
}

static void family_case(const char *name, fx_opts o, const char *const *linears, int n_linears) {
    char src[4096], out[4200];
    snprintf(src, sizeof src, "%s", test_tmpdir(name));
    snprintf(out, sizeof out, "%s-w4", src);
    if (fx_write_model(src, &o) != 0) exit(2);
    snprintf(out, sizeof out, "%s/tokenizer.json", src); /* copied, never read */
    test_write_file(out, "{}", 2);
    snprintf(out, sizeof out, "%s-w4", src);
    moe8_quantize_params qp = moe8_quantize_params_default();
    moe8_error e;
    qp.linear_w4a8 = 1;
    qp.force = 1;
    qp.n_threads = 2;
    CHECKF(moe8_quantize(src, out, &qp, NULL, &e) == MOE8_OK, "%s: quantize: %s", name, e.message);
    /* the description, and the loader's reading of it */
    ref_model rm;
    ref_init(&rm, &o);
    ref_from_folder(&rm, out);
    for (int l = 0; l < o.n_layers; l++)
        for (int i = 0; i < n_linears; i++) {
            const fx_tensor *w = ref_t(&rm, linears[i], l, 0);
            CHECKF(!strcmp(w->quant, "W4A8_DYNAMIC") && w->dtype == MOE8_DT_I8,
                   "%s: %s is %s", name, w->name, w->quant);
        }
    moe8_model *m = test_load_model(out);
    for (int l = 0; l < o.n_layers; l++) {
        moe8_layer_info li;
        CHECK(moe8_model_layer_info(m, l, &li) == MOE8_OK);
        CHECKF(li.qkv == MOE8_QUANT_W4A8_DYNAMIC && li.o == MOE8_QUANT_W4A8_DYNAMIC &&
               (li.is_moe || (li.mlp_gate_up == MOE8_QUANT_W4A8_DYNAMIC &&
                              li.mlp_down == MOE8_QUANT_W4A8_DYNAMIC)),
               "%s: layer %d resolved qkv %s o %s", name, l, moe8_quant_type_name(li.qkv),
               moe8_quant_type_name(li.o));
    }
    moe8_model_free(m);
    /* the whole forward against the reference on the folder's own tensors */
    const int V = (int)o.vocab;
    float *got = malloc(sizeof(float) * 7 * V), *again = malloc(sizeof(float) * 7 * V);
    double *want = malloc(sizeof(double) * 7 * V);
    ref_forward(&rm, IDS, 7, want);
    logits_of(out, got);
    double worst = 1;
    for (int t = 0; t < 7; t++) worst = fmin(worst, test_cosine_ref(got + t * V, want + t * V, V));
    printf("%-20s worst-position cosine %.8f against the double-precision W4A8 forward\n", name,
           worst);
    CHECKF(worst >= 0.9999, "%s: cosine %.8f", name, worst);
    /* the first context wrote the packed cache; this one maps it */
    char cache[4300];
    struct stat sb;
    snprintf(cache, sizeof cache, "%s/.moe8-cache", out);
    CHECKF(stat(cache, &sb) == 0, "%s: no packed cache in %s", name, cache);
    logits_of(out, again);
    CHECKF(memcmp(got, again, sizeof(float) * 7 * V) == 0, "%s: logits from the cache differ", name);
    if (o.arch == FX_QWEN3) tp_case(out, (int)o.n_layers);
    ref_free(&rm);
    free(got); free(again); free(want);
}

int main(void) {
    test_table_or_skip();
    static const char *const qwen[] = {
        "model.layers.%lld.self_attn.q_proj.weight", "model.layers.%lld.self_attn.k_proj.weight",
        "model.layers.%lld.self_attn.v_proj.weight", "model.layers.%lld.self_attn.o_proj.weight"};
    fx_opts o = fx_default_opts();
    o.seed = 9191;
    o.dense_layer = 1; /* a dense MLP too */
    family_case("w4lin_qwen3", o, qwen, 4);
    static const char *const ds[] = {
        "model.layers.%lld.self_attn.q_a_proj.weight", "model.layers.%lld.self_attn.q_b_proj.weight",
        "model.layers.%lld.self_attn.kv_a_proj_with_mqa.weight",
        "model.layers.%lld.self_attn.o_proj.weight"};
    o = fx_default_opts();
    o.arch = FX_DEEPSEEK_V3;
    o.n_layers = 2;   /* layer 0 dense (first_k_dense_replace 1), layer 1 MoE */
    o.n_experts = 8;
    o.top_k = 2;
    o.moe_inter = 32;
    o.inter = 96;
    o.q_lora = 20;    /* q_b_proj's K: no multiple of 8 */
    o.kv_lora = 28;   /* kv_a_proj_with_mqa: 28 + 8 rows, no multiple of 16 */
    o.seed = 9292;
    family_case("w4lin_deepseek", o, ds, 4);
    return test_summary();
}
