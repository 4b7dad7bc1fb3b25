/*
 * test_model_load.c — moe8_model_load on synthetic folders (fixture_model.h):
 * good folders in every storage variant (int8 lm_head included), checked tensor
 * by tensor against the generator's own bytes; one bad folder per contract defect (status + message);
 * and the built `moe8 inspect` on a good and a bad folder.
 */
#include "test.h"

#include <signal.h>
#include <sys/wait.h>

#include "fixture_model.h"
#include "load/model.h"

/* ======================================================================== */
/* Good folders                                                              */
/* ======================================================================== */

static const char *make(const char *name, const fx_opts *o) {
    const char *dir = test_tmpdir(name);
    if (fx_write_model(dir, o) != 0) {
        fprintf(stderr, "cannot write fixture %s\n", name);
        exit(2);
    }
    return dir;
}

/* Every generated tensor is in the checkpoint with the same bytes. */
static void check_bytes(const moe8_model *m, const fx_opts *o) {
    fx_list L;
    int bad = 0;
    memset(&L, 0, sizeof L);
    L.o = o;
    fx_build(&L);
    for (int i = 0; i < L.n; i++) {
        const moe8_tensor *t = moe8_st_find(m->st, L.t[i].name);
        if (!t || t->dtype != L.t[i].dtype || t->n_bytes != L.t[i].n_bytes ||
            memcmp(t->data, L.t[i].data, t->n_bytes) != 0) {
            if (bad++ < 3) fprintf(stderr, "tensor %s differs\n", L.t[i].name);
        }
    }
    CHECKF(bad == 0, "%d tensors differ", bad);
    CHECK((int64_t)moe8_st_count(m->st) == L.n);
    fx_list_free(&L);
}

static const moe8_tensor *T(const moe8_model *m, const char *fmt, long long a, long long b) {
    char name[160];
    snprintf(name, sizeof name, fmt, a, b);
    return moe8_st_find(m->st, name);
}

/* Pointers of layer l bound to the tensors of the right names. */
static void check_binding(const moe8_model *m, const fx_opts *o, int64_t l) {
    const moe8_layer *ly = &m->layers[l];
    const char *p = "model.layers.%lld.self_attn.%s";
    CHECK(ly->attn_norm == T(m, "model.layers.%lld.input_layernorm.weight%.0lld", l, 0));
    CHECK(ly->ffn_norm == T(m, "model.layers.%lld.post_attention_layernorm.weight%.0lld", l, 0));
    CHECK(ly->q_norm == T(m, "model.layers.%lld.self_attn.q_norm.weight%.0lld", l, 0));
    CHECK(ly->k_norm == T(m, "model.layers.%lld.self_attn.k_norm.weight%.0lld", l, 0));
    CHECK(ly->q.weight == T(m, "model.layers.%lld.self_attn.q_proj.weight%.0lld", l, 0));
    CHECK(ly->k.weight == T(m, "model.layers.%lld.self_attn.k_proj.weight%.0lld", l, 0));
    CHECK(ly->v.weight == T(m, "model.layers.%lld.self_attn.v_proj.weight%.0lld", l, 0));
    CHECK(ly->o.weight == T(m, "model.layers.%lld.self_attn.o_proj.weight%.0lld", l, 0));
    (void)p;
    CHECK(ly->q.n_out == o->n_heads * o->head_dim && ly->q.n_in == o->hidden);
    CHECK(ly->k.n_out == o->n_kv_heads * o->head_dim && ly->o.n_in == o->n_heads * o->head_dim);
    if (o->quant) {
        CHECK(ly->q.input_scale == T(m, "model.layers.%lld.self_attn.q_proj.input_scale%.0lld", l, 0));
        CHECK(ly->o.deq_scale == T(m, "model.layers.%lld.self_attn.o_proj.deq_scale%.0lld", l, 0));
        CHECK(ly->v.quant_bias == T(m, "model.layers.%lld.self_attn.v_proj.quant_bias%.0lld", l, 0));
        CHECK(ly->k.input_offset == T(m, "model.layers.%lld.self_attn.k_proj.input_offset%.0lld", l, 0));
    } else {
        CHECK(ly->q.input_scale == NULL && ly->o.deq_scale == NULL && ly->q.weight_scale == NULL);
    }
    if (!ly->info.is_moe) {
        CHECK(ly->experts == NULL && ly->router == NULL);
        CHECK(ly->mlp_gate.weight == T(m, "model.layers.%lld.mlp.gate_proj.weight%.0lld", l, 0));
        CHECK(ly->mlp_up.weight == T(m, "model.layers.%lld.mlp.up_proj.weight%.0lld", l, 0));
        CHECK(ly->mlp_down.weight == T(m, "model.layers.%lld.mlp.down_proj.weight%.0lld", l, 0));
        CHECK(ly->mlp_down.n_out == o->hidden && ly->mlp_down.n_in == o->inter);
        return;
    }
    CHECK(ly->router == T(m, "model.layers.%lld.mlp.gate.weight%.0lld", l, 0));
    for (int64_t e = 0; e < o->n_experts; e++) {
        const moe8_expert *x = &ly->experts[e];
        CHECK(x->gate.weight == T(m, "model.layers.%lld.mlp.experts.%lld.gate_proj.weight", l, e));
        CHECK(x->up.weight == T(m, "model.layers.%lld.mlp.experts.%lld.up_proj.weight", l, e));
        CHECK(x->down.weight == T(m, "model.layers.%lld.mlp.experts.%lld.down_proj.weight", l, e));
        CHECK(x->gate.n_out == o->moe_inter && x->gate.n_in == o->hidden);
        CHECK(x->down.n_out == o->hidden && x->down.n_in == o->moe_inter);
        if (o->quant) {
            CHECK(x->down.weight_scale ==
                  T(m, "model.layers.%lld.mlp.experts.%lld.down_proj.weight_scale", l, e));
            CHECK(x->up.weight_offset ==
                  T(m, "model.layers.%lld.mlp.experts.%lld.up_proj.weight_offset", l, e));
            CHECK(x->down.weight->dtype == MOE8_DT_I8 && x->gate.quant == MOE8_QUANT_W8A8_DYNAMIC);
        } else {
            CHECK(x->down.weight_scale == NULL && x->gate.quant == MOE8_QUANT_FLOAT);
        }
    }
}

/* Independent recomputation of what load decodes for one W8A8 linear. */
static void check_w8a8_values(const moe8_model *m, const moe8_linear *L) {
    float s = moe8_tensor_f32_at(L->input_scale, 0);
    CHECK(L->in_scale == s && s > 0);
    CHECK(L->in_offset == (int32_t)moe8_tensor_f32_at(L->input_offset, 0));
    for (int64_t i = 0; i < L->n_out; i++) {
        /* deq_scale = weight_scale * input_scale (fixture), as fp32 */
        float want = moe8_tensor_f32_at(L->weight_scale, i) * L->in_scale;
        if (moe8_deq_scale_at(L->deq_scale, i) != want) {
            CHECKF(0, "deq_scale[%lld] %g vs %g", (long long)i, moe8_deq_scale_at(L->deq_scale, i), want);
            break;
        }
    }
    (void)m;
}

static void test_good(const char *name, fx_opts o) {
    const char *dir = make(name, &o);
    moe8_model *m = NULL;
    moe8_error e;
    moe8_status st = moe8_model_load(dir, NULL, &m, &e);
    CHECKF(st == MOE8_OK, "%s: %s", name, e.message);
    if (st != MOE8_OK) return;
    const moe8_config *c = moe8_model_config(m);
    CHECK(c->hidden_size == o.hidden && c->num_hidden_layers == o.n_layers);
    CHECK(c->num_experts == o.n_experts && c->num_experts_per_tok == o.top_k);
    check_bytes(m, &o);
    for (int64_t l = 0; l < o.n_layers; l++) {
        moe8_layer_info li;
        CHECK(moe8_model_layer_info(m, l, &li) == 0);
        CHECK(li.is_moe == (o.n_experts > 0 && l != o.dense_layer));
        CHECK(li.qkv == (o.quant ? MOE8_QUANT_W8A8 : MOE8_QUANT_FLOAT));
        CHECK(li.o == li.qkv && li.router == MOE8_QUANT_FLOAT);
        if (li.is_moe) CHECK(li.experts == (o.quant ? MOE8_QUANT_W8A8_DYNAMIC : MOE8_QUANT_FLOAT));
        else CHECK(li.mlp_gate_up == li.qkv && li.mlp_down == li.qkv);
        check_binding(m, &o, l);
        if (o.quant) {
            const moe8_layer *ly = &m->layers[l];
            check_w8a8_values(m, &ly->q);
            check_w8a8_values(m, &ly->o);
            CHECK(ly->qkv_input_differ == !o.qkv_same_input);
            if (ly->info.is_moe) CHECK(ly->experts[0].gate.nonzero_offset == o.nonzero_offsets);
        }
    }
    moe8_layer_info li;
    CHECK(moe8_model_layer_info(m, o.n_layers, &li) == -1);
    CHECK(moe8_model_layer_info(m, -1, &li) == -1);
    CHECK(m->embed == moe8_st_find(m->st, "model.embed_tokens.weight"));
    CHECK(m->final_norm == moe8_st_find(m->st, "model.norm.weight"));
    CHECK(m->lm_head.weight == (o.tie ? m->embed : moe8_st_find(m->st, "lm_head.weight")));
    CHECK(m->lm_head.n_out == o.vocab && m->lm_head.n_in == o.hidden);
    {
        moe8_lm_head_info lh;
        const int q = o.lm_head_w8a8 && !o.tie;
        CHECK(moe8_model_lm_head_info(m, &lh) == 0 && moe8_model_lm_head_info(NULL, &lh) == -1);
        CHECK(lh.tied == o.tie && lh.quant == (q ? MOE8_QUANT_W8A8_DYNAMIC : MOE8_QUANT_FLOAT));
        CHECK(m->lm_head.quant == lh.quant);
        CHECK(lh.dtype == (q ? MOE8_DT_I8 : o.float_dtype));
        CHECK(lh.weight_bytes == (uint64_t)(o.vocab * o.hidden) * moe8_dtype_size(lh.dtype));
        CHECK(lh.scale_bytes == (q ? 2 * (uint64_t)o.vocab * moe8_dtype_size(o.scale_dtype) : 0));
        CHECK(m->lm_head.weight_scale == (q ? moe8_st_find(m->st, "lm_head.weight_scale") : NULL));
        CHECK(m->lm_head.weight_offset == (q ? moe8_st_find(m->st, "lm_head.weight_offset") : NULL));
        CHECK(m->lm_head.nonzero_offset == (q && o.nonzero_offsets));
    }
    CHECK(m->embed->dtype == o.float_dtype);
    moe8_model_free(m);
}

static void test_good_folders(void) {
    fx_opts o = fx_default_opts();
    test_good("float_single_bf16", o);
    o.n_shards = 2;
    o.float_dtype = MOE8_DT_F32;
    o.tie = 1;
    o.dense_layer = 0;
    test_good("float_sharded_f32_tied", o);
    o = fx_default_opts();
    o.quant = 1;
    test_good("w8a8_single", o);
    o.n_shards = 2;
    o.scale_2d = 1;
    o.deq_i64 = 1;
    o.dense_layer = 1;
    o.float_dtype = MOE8_DT_F32;
    test_good("w8a8_sharded_2d_i64", o);
    o = fx_default_opts();
    o.quant = 1;
    o.scale_dtype = MOE8_DT_BF16;
    o.nonzero_offsets = 1;
    o.qkv_same_input = 0;
    o.n_layers = 3;
    o.dense_layer = 2;
    test_good("w8a8_bf16_scales_offsets", o);
    o.scale_dtype = MOE8_DT_F16;
    o.scale_2d = 1;
    test_good("w8a8_f16_scales_2d", o);
    o = fx_default_opts();
    o.float_desc = 1;
    test_good("float_with_desc", o);
    o = fx_default_opts();
    o.n_experts = 0; /* a dense model: every layer a SwiGLU MLP */
    o.quant = 1;
    test_good("dense_w8a8", o);
    /* int8 lm_head (moe8 quantize --lm-head w8a8), on a W8A8 and on a float body */
    o = fx_default_opts();
    o.quant = 1;
    o.lm_head_w8a8 = 1;
    test_good("w8a8_lmhead", o);
    o.quant = 0;
    o.scale_dtype = MOE8_DT_BF16;
    o.scale_2d = 1;
    o.nonzero_offsets = 1;
    o.n_shards = 2;
    test_good("float_lmhead_bf16_2d_offsets", o);
}

/* n_threads outside [0, 4096]: MOE8_ERR_INVALID_ARG from model load and
 * context create (no OpenMP team of that size is ever asked for). */
static void test_thread_counts(const char *dir, moe8_model *m) {
    static const int bad[] = {-1, 4097, 100000, INT32_MAX, INT32_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        moe8_model_params mp = moe8_model_params_default();
        moe8_context_params cp = moe8_context_params_default();
        moe8_model *m2 = NULL;
        moe8_context *c = NULL;
        moe8_error e;
        mp.n_threads = bad[i];
        CHECKF(moe8_model_load(dir, &mp, &m2, &e) == MOE8_ERR_INVALID_ARG && !m2 &&
                   strstr(e.message, "n_threads") && strstr(e.message, "[0, 4096]"),
               "load %d: %s", bad[i], e.message);
        cp.n_ctx = 16;
        cp.n_threads = bad[i];
        CHECKF(moe8_context_create(m, &cp, &c, &e) == MOE8_ERR_INVALID_ARG && !c &&
                   strstr(e.message, "n_threads") && strstr(e.message, "[0, 4096]"),
               "context %d: %s", bad[i], e.message);
        moe8_model_free(m2);
        moe8_context_free(c);
    }
}

/* Stop ids, stats and the memory estimate on one folder. */
static void test_queries(void) {
    fx_opts o = fx_default_opts();
    o.quant = 1;
    o.generation_config = 1;
    const char *dir = make("queries", &o);
    moe8_model *m = NULL;
    moe8_model_stats s;
    moe8_memory_estimate me;
    moe8_model_params mp = moe8_model_params_default();
    moe8_error e;
    fx_list L;
    uint64_t bytes[MOE8_DT_COUNT] = {0}, total = 0;
    mp.n_threads = 1;
    CHECKF(moe8_model_load(dir, &mp, &m, &e) == MOE8_OK, "%s", e.message);
    if (!m) return;
    const moe8_config *c = moe8_model_config(m);
    /* config.json eos 2, generation_config.json [2, 7] -> {2, 7} */
    CHECK(c->n_eos_ids == 2 && c->eos_token_ids[0] == 2 && c->eos_token_ids[1] == 7);
    CHECK(c->bos_token_id == 1);
    memset(&L, 0, sizeof L);
    L.o = &o;
    fx_build(&L);
    for (int i = 0; i < L.n; i++) {
        bytes[L.t[i].dtype] += L.t[i].n_bytes;
        total += L.t[i].n_bytes;
    }
    moe8_model_get_stats(m, &s);
    CHECK(s.n_files == 1 && s.n_tensors == L.n && s.total_bytes == total);
    for (int d = 0; d < MOE8_DT_COUNT; d++) CHECKF(s.bytes_by_dtype[d] == bytes[d], "dtype %d", d);
    CHECK(s.bytes_by_dtype[MOE8_DT_I8] > 0 && s.bytes_by_dtype[MOE8_DT_I64] == 0);
    fx_list_free(&L);
    CHECK(moe8_model_memory(m, 4096, MOE8_DT_F32, &me, &e) == MOE8_OK);
    CHECK(me.weight_bytes == total);
    CHECK(me.kv_bytes == 2ull * 2 * 2 * 16 * 4096 * 4);
    CHECK(me.scratch_bytes >= (1u << 20) && me.scratch_bytes < (4u << 20));
    CHECK(me.total_bytes == me.weight_bytes + me.kv_bytes + me.scratch_bytes);
    CHECK(moe8_model_memory(m, 4096, MOE8_DT_F16, &me, &e) == MOE8_OK);
    CHECK(me.kv_bytes == 2ull * 2 * 2 * 16 * 4096 * 2);
    CHECK(moe8_model_memory(m, 4096, MOE8_DT_BF16, &me, &e) == MOE8_OK);
    CHECK(me.kv_bytes == 2ull * 2 * 2 * 16 * 4096 * 2);
    CHECK(moe8_model_kv_block_bytes(m, MOE8_DT_F32) == 2u * 2 * 2 * 16 * 16 * 4);
    CHECK(moe8_model_kv_block_bytes(m, MOE8_DT_F16) == 2u * 2 * 2 * 16 * 16 * 2);
    CHECK(moe8_model_kv_block_bytes(m, MOE8_DT_I8) == 0);
    CHECK(moe8_model_memory(m, 4096, MOE8_DT_I8, &me, &e) == MOE8_ERR_INVALID_ARG &&
          strstr(e.message, "kv type I8"));
    CHECK(moe8_model_memory(m, 0, MOE8_DT_F16, &me, &e) == MOE8_ERR_INVALID_ARG);
    test_thread_counts(dir, m);
    moe8_model_free(m);
    moe8_model_free(NULL);
}

/* ======================================================================== */
/* Bad folders: one defect each                                              */
/* ======================================================================== */

enum { D_NONE, D_OMIT, D_RENAME, D_SET, D_RETYPE };

typedef struct {
    const char *label;
    fx_opts (*opts)(void);
    int action;
    const char *tensor;       /* exact name */
    double value;             /* D_SET: value of element `index` */
    int64_t index;
    moe8_dtype dtype;         /* D_RETYPE */
    int n_dims;
    int64_t shape[2];
    const char *json_file;    /* json edit: file, key, JSON text (NULL = delete key) */
    const char *json_key, *json_value;
    moe8_status code;
    const char *msg;
} defect;

static void hook_tensor(void *user, fx_tensor *t) {
    const defect *d = (const defect *)user;
    if (!d->tensor || strcmp(t->name, d->tensor) != 0) return;
    if (d->action == D_OMIT) t->omit = 1;
    if (d->action == D_RENAME) snprintf(t->name, sizeof t->name, "%s_renamed", d->tensor);
    if (d->action == D_SET) fx_set(t, d->index, d->value);
    if (d->action == D_RETYPE) fx_retype(t, d->dtype, d->n_dims, d->shape);
}

static void hook_json(void *user, const char *file, cJSON *root) {
    const defect *d = (const defect *)user;
    if (!d->json_file || strcmp(file, d->json_file) != 0) return;
    cJSON_DeleteItemFromObjectCaseSensitive(root, d->json_key);
    if (d->json_value) cJSON_AddItemToObject(root, d->json_key, cJSON_Parse(d->json_value));
}

static fx_opts q_opts(void) {
    fx_opts o = fx_default_opts();
    o.quant = 1;
    o.dense_layer = 1;
    return o;
}
static fx_opts f_opts(void) { return fx_default_opts(); }
static fx_opts ql_opts(void) {
    fx_opts o = q_opts();
    o.lm_head_w8a8 = 1;
    return o;
}
static fx_opts q64_opts(void) {
    fx_opts o = q_opts();
    o.deq_i64 = 1;
    return o;
}

#define EXP "model.layers.0.mlp.experts."
#define ATT "model.layers.0.self_attn."
static const defect defects[] = {
    {"scale_dtype", q_opts, D_RETYPE, EXP "2.up_proj.weight_scale", 0, 0, MOE8_DT_I32, 1, {32, 0},
     NULL, NULL, NULL, MOE8_ERR_FORMAT,
     "tensor '" EXP "2.up_proj.weight_scale': expected dtype F32, BF16 or F16, found I32"},
    {"scale_shape", q_opts, D_RETYPE, EXP "1.gate_proj.weight_scale", 0, 0, MOE8_DT_F32, 2, {32, 2},
     NULL, NULL, NULL, MOE8_ERR_FORMAT, "expected shape [32], found [32, 2]"},
    {"scale_len", q_opts, D_RETYPE, EXP "0.down_proj.weight_scale", 0, 0, MOE8_DT_F32, 1, {32, 0},
     NULL, NULL, NULL, MOE8_ERR_FORMAT, "expected shape [64], found [32]"},
    {"missing_e3_down_scale", q_opts, D_OMIT, EXP "3.down_proj.weight_scale", 0, 0, 0, 0, {0, 0},
     NULL, NULL, NULL, MOE8_ERR_NOT_FOUND, "tensor '" EXP "3.down_proj.weight_scale' not found"},
    {"missing_e3_down", q_opts, D_OMIT, EXP "3.down_proj.weight", 0, 0, 0, 0, {0, 0}, NULL, NULL,
     NULL, MOE8_ERR_NOT_FOUND, "tensor '" EXP "3.down_proj.weight' not found"},
    {"offset_fraction", q_opts, D_SET, EXP "1.up_proj.weight_offset", 0.5, 7, 0, 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT,
     "tensor '" EXP "1.up_proj.weight_offset': element 7 is 0.5, expected an integer in [-128, 127]"},
    {"offset_200", q_opts, D_SET, EXP "2.down_proj.weight_offset", 200, 3, 0, 0, {0, 0}, NULL, NULL,
     NULL, MOE8_ERR_FORMAT, "element 3 is 200, expected an integer in [-128, 127]"},
    {"offset_shape", q_opts, D_RETYPE, EXP "2.down_proj.weight_offset", 0, 0, MOE8_DT_F32, 2, {64, 1},
     NULL, NULL, NULL, MOE8_ERR_FORMAT, "shape differs from '" EXP "2.down_proj.weight_scale'"},
    {"scale_nan", q_opts, D_SET, EXP "0.gate_proj.weight_scale", NAN, 4, 0, 0, {0, 0}, NULL, NULL,
     NULL, MOE8_ERR_FORMAT, "element 4 is nan, expected a finite value"},
    {"expert_weight_bf16", q_opts, D_RETYPE, EXP "1.up_proj.weight", 0, 0, MOE8_DT_BF16, 2, {32, 64},
     NULL, NULL, NULL, MOE8_ERR_FORMAT, "expected dtype I8 (W8A8_DYNAMIC), found BF16"},
    {"expert_weight_shape", q_opts, D_RETYPE, EXP "0.down_proj.weight", 0, 0, MOE8_DT_I8, 2, {32, 64},
     NULL, NULL, NULL, MOE8_ERR_FORMAT,
     "tensor '" EXP "0.down_proj.weight': expected shape [64, 32], found [32, 64]"},
    {"input_scale_0", q_opts, D_SET, ATT "k_proj.input_scale", 0, 0, 0, 0, {0, 0}, NULL, NULL, NULL,
     MOE8_ERR_FORMAT, "tensor '" ATT "k_proj.input_scale': value 0, expected a finite scale > 0"},
    {"input_scale_inf", q_opts, D_SET, ATT "q_proj.input_scale", INFINITY, 0, 0, 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT, "value inf, expected a finite scale > 0"},
    {"input_offset_frac", q_opts, D_SET, ATT "v_proj.input_offset", 2.5, 0, 0, 0, {0, 0}, NULL, NULL,
     NULL, MOE8_ERR_FORMAT, "element 0 is 2.5, expected an integer in [-128, 127]"},
    {"input_offset_shape", q_opts, D_RETYPE, ATT "o_proj.input_offset", 0, 0, MOE8_DT_BF16, 1, {2, 0},
     NULL, NULL, NULL, MOE8_ERR_FORMAT, "tensor '" ATT "o_proj.input_offset': expected shape [1], found [2]"},
    {"input_offset_i32", q_opts, D_RETYPE, ATT "o_proj.input_offset", 0, 0, MOE8_DT_I32, 1, {1, 0},
     NULL, NULL, NULL, MOE8_ERR_FORMAT, "expected dtype I8, F32, BF16 or F16, found I32"},
    {"deq_scale_i32", q_opts, D_RETYPE, ATT "q_proj.deq_scale", 0, 0, MOE8_DT_I32, 1, {64, 0}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT, "tensor '" ATT "q_proj.deq_scale': expected dtype I64 or F32, found I32"},
    {"deq_scale_len", q_opts, D_RETYPE, ATT "k_proj.deq_scale", 0, 0, MOE8_DT_F32, 1, {64, 0}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT, "expected shape [32], found [64]"},
    /* int32 accumulator: |bias| + 16384 x 64 <= INT32_MAX, i.e. |bias| <= 2146435071 */
    {"quant_bias_max", q_opts, D_SET, ATT "q_proj.quant_bias", 2147483647.0, 3, 0, 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT, "tensor '" ATT "q_proj.quant_bias': element 3 is 2147483647: "
     "|bias| + 16384 x 64 inputs must be <= 2147483647 (int32 accumulator), so |bias| <= 2146435071"},
    {"quant_bias_room_plus1", q_opts, D_SET, ATT "o_proj.quant_bias", 2146435072.0, 0, 0, 0, {0, 0},
     NULL, NULL, NULL, MOE8_ERR_FORMAT, "element 0 is 2146435072: |bias| + 16384 x 64 inputs"},
    {"quant_bias_neg", q_opts, D_SET, "model.layers.1.mlp.down_proj.quant_bias", -2146435072.0, 63,
     0, 0, {0, 0}, NULL, NULL, NULL, MOE8_ERR_FORMAT,
     "tensor 'model.layers.1.mlp.down_proj.quant_bias': element 63 is -2146435072: |bias| + 16384 x 96"},
    {"quant_bias_int32_min", q_opts, D_SET, ATT "k_proj.quant_bias", -2147483648.0, 1, 0, 0, {0, 0},
     NULL, NULL, NULL, MOE8_ERR_FORMAT, "element 1 is -2147483648"},
    /* deq_scale: finite and > 0; I64 high word 0 or the sign extension of the low word */
    {"deq_scale_neg", q_opts, D_SET, ATT "v_proj.deq_scale", -0.5, 2, 0, 0, {0, 0}, NULL, NULL, NULL,
     MOE8_ERR_FORMAT, "tensor '" ATT "v_proj.deq_scale': element 2 is -0.5, expected a finite scale > 0"},
    {"deq_scale_zero", q_opts, D_SET, ATT "q_proj.deq_scale", 0.0, 5, 0, 0, {0, 0}, NULL, NULL, NULL,
     MOE8_ERR_FORMAT, "element 5 is 0, expected a finite scale > 0"},
    {"deq_scale_inf", q_opts, D_SET, ATT "o_proj.deq_scale", INFINITY, 0, 0, 0, {0, 0}, NULL, NULL,
     NULL, MOE8_ERR_FORMAT, "element 0 is inf, expected a finite scale > 0"},
    /* 2^32 + bits(0.01f): the low word alone would read as 0.01 */
    {"deq_i64_high_word", q64_opts, D_SET, ATT "k_proj.deq_scale", 4294967296.0 + 1008981770.0, 4, 0,
     0, {0, 0}, NULL, NULL, NULL, MOE8_ERR_FORMAT,
     "tensor '" ATT "k_proj.deq_scale': element 4 is 0x000000013c23d70a: high 32 bits must be 0 or "
     "the sign extension of the low 32 (fp32 bits)"},
    /* 0xffffffff'3c23d70a: all-ones high word over a positive float */
    {"deq_i64_bad_ext", q64_opts, D_SET, ATT "q_proj.deq_scale", -4294967296.0 + 1008981770.0, 0, 0,
     0, {0, 0}, NULL, NULL, NULL, MOE8_ERR_FORMAT, "element 0 is 0xffffffff3c23d70a: high 32 bits"},
    /* sign-extended -0.5f (0xbf000000): a well-formed I64, but not > 0 */
    {"deq_i64_neg", q64_opts, D_SET, ATT "v_proj.deq_scale", -1090519040.0, 1, 0, 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT, "element 1 is -0.5, expected a finite scale > 0"},
    /* zero-extended 0x7fc00000: NaN */
    {"deq_i64_nan", q64_opts, D_SET, ATT "o_proj.deq_scale", 2143289344.0, 7, 0, 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT, "element 7 is nan, expected a finite scale > 0"},
    {"quant_bias_f32", q_opts, D_RETYPE, ATT "o_proj.quant_bias", 0, 0, MOE8_DT_F32, 1, {64, 0}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT, "expected dtype I32, found F32"},
    {"missing_quant_bias", q_opts, D_OMIT, "model.layers.1.mlp.down_proj.quant_bias", 0, 0, 0, 0,
     {0, 0}, NULL, NULL, NULL, MOE8_ERR_NOT_FOUND, "tensor 'model.layers.1.mlp.down_proj.quant_bias' not found"},
    {"linear_bf16_but_w8a8", q_opts, D_RETYPE, ATT "v_proj.weight", 0, 0, MOE8_DT_BF16, 2, {32, 64},
     NULL, NULL, NULL, MOE8_ERR_FORMAT, "expected dtype I8 (W8A8), found BF16"},
    {"renamed_o_proj", q_opts, D_RENAME, "model.layers.1.self_attn.o_proj.weight", 0, 0, 0, 0, {0, 0},
     NULL, NULL, NULL, MOE8_ERR_NOT_FOUND, "tensor 'model.layers.1.self_attn.o_proj.weight' not found"},
    {"router_shape", f_opts, D_RETYPE, "model.layers.1.mlp.gate.weight", 0, 0, MOE8_DT_BF16, 2, {3, 64},
     NULL, NULL, NULL, MOE8_ERR_FORMAT, "expected shape [4, 64], found [3, 64]"},
    {"router_i8", f_opts, D_RETYPE, "model.layers.1.mlp.gate.weight", 0, 0, MOE8_DT_I8, 2, {4, 64},
     NULL, NULL, NULL, MOE8_ERR_FORMAT, "expected dtype BF16, F16 or F32, found I8"},
    {"q_shape", f_opts, D_RETYPE, ATT "q_proj.weight", 0, 0, MOE8_DT_BF16, 2, {64, 32}, NULL, NULL,
     NULL, MOE8_ERR_FORMAT, "tensor '" ATT "q_proj.weight': expected shape [64, 64], found [64, 32]"},
    {"int8_without_desc", f_opts, D_RETYPE, ATT "k_proj.weight", 0, 0, MOE8_DT_I8, 2, {32, 64}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT, "no quant_model_description.json"},
    {"norm_shape", f_opts, D_RETYPE, "model.layers.1.input_layernorm.weight", 0, 0, MOE8_DT_BF16, 1,
     {16, 0}, NULL, NULL, NULL, MOE8_ERR_FORMAT, "expected shape [64], found [16]"},
    {"k_norm_shape", f_opts, D_RETYPE, ATT "k_norm.weight", 0, 0, MOE8_DT_BF16, 1, {64, 0}, NULL, NULL,
     NULL, MOE8_ERR_FORMAT, "expected shape [16], found [64]"},
    {"embed_vocab", f_opts, D_RETYPE, "model.embed_tokens.weight", 0, 0, MOE8_DT_BF16, 2, {255, 64},
     NULL, NULL, NULL, MOE8_ERR_FORMAT, "expected shape [256, 64], found [255, 64]"},
    {"embed_u8", f_opts, D_RETYPE, "model.embed_tokens.weight", 0, 0, MOE8_DT_U8, 2, {256, 64}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT, "found U8"},
    {"missing_lm_head", f_opts, D_OMIT, "lm_head.weight", 0, 0, 0, 0, {0, 0}, NULL, NULL, NULL,
     MOE8_ERR_NOT_FOUND, "tensor 'lm_head.weight' not found"},
    /* int8 lm_head: the experts' contract */
    {"lmhead_bf16_but_dyn", ql_opts, D_RETYPE, "lm_head.weight", 0, 0, MOE8_DT_BF16, 2, {256, 64},
     NULL, NULL, NULL, MOE8_ERR_FORMAT,
     "tensor 'lm_head.weight': expected dtype I8 (W8A8_DYNAMIC), found BF16"},
    {"lmhead_shape", ql_opts, D_RETYPE, "lm_head.weight", 0, 0, MOE8_DT_I8, 2, {255, 64}, NULL, NULL,
     NULL, MOE8_ERR_FORMAT, "tensor 'lm_head.weight': expected shape [256, 64], found [255, 64]"},
    {"lmhead_missing_scale", ql_opts, D_OMIT, "lm_head.weight_scale", 0, 0, 0, 0, {0, 0}, NULL, NULL,
     NULL, MOE8_ERR_NOT_FOUND, "tensor 'lm_head.weight_scale' not found"},
    {"lmhead_scale_len", ql_opts, D_RETYPE, "lm_head.weight_scale", 0, 0, MOE8_DT_F32, 1, {128, 0},
     NULL, NULL, NULL, MOE8_ERR_FORMAT,
     "tensor 'lm_head.weight_scale': expected shape [256], found [128]"},
    {"lmhead_scale_i32", ql_opts, D_RETYPE, "lm_head.weight_scale", 0, 0, MOE8_DT_I32, 1, {256, 0},
     NULL, NULL, NULL, MOE8_ERR_FORMAT, "expected dtype F32, BF16 or F16, found I32"},
    {"lmhead_scale_inf", ql_opts, D_SET, "lm_head.weight_scale", INFINITY, 9, 0, 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT,
     "tensor 'lm_head.weight_scale': element 9 is inf, expected a finite value"},
    {"lmhead_offset_frac", ql_opts, D_SET, "lm_head.weight_offset", 0.25, 3, 0, 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT,
     "tensor 'lm_head.weight_offset': element 3 is 0.25, expected an integer in [-128, 127]"},
    {"lmhead_offset_300", ql_opts, D_SET, "lm_head.weight_offset", 300, 200, 0, 0, {0, 0}, NULL,
     NULL, NULL, MOE8_ERR_FORMAT, "element 200 is 300, expected an integer in [-128, 127]"},
    {"lmhead_offset_shape", ql_opts, D_RETYPE, "lm_head.weight_offset", 0, 0, MOE8_DT_F32, 2,
     {256, 1}, NULL, NULL, NULL, MOE8_ERR_FORMAT,
     "tensor 'lm_head.weight_offset': shape differs from 'lm_head.weight_scale'"},
    {"lmhead_desc_w8a8", ql_opts, D_NONE, NULL, 0, 0, 0, 0, {0, 0}, "quant_model_description.json",
     "lm_head.weight", "\"W8A8\"", MOE8_ERR_UNSUPPORTED,
     "tensor 'lm_head.weight': quant type W8A8 not supported (expected FLOAT or W8A8_DYNAMIC)"},
    {"lmhead_desc_float_int8", ql_opts, D_NONE, NULL, 0, 0, 0, 0, {0, 0},
     "quant_model_description.json", "lm_head.weight", "\"FLOAT\"", MOE8_ERR_FORMAT,
     "tensor 'lm_head.weight': expected dtype BF16, F16 or F32 (FLOAT), found I8"},
    {"lmhead_desc_dyn_bf16", q_opts, D_NONE, NULL, 0, 0, 0, 0, {0, 0},
     "quant_model_description.json", "lm_head.weight", "\"W8A8_DYNAMIC\"", MOE8_ERR_FORMAT,
     "tensor 'lm_head.weight': expected dtype I8 (W8A8_DYNAMIC), found BF16"},
    {"lmhead_dyn_tied", ql_opts, D_NONE, NULL, 0, 0, 0, 0, {0, 0}, "config.json",
     "tie_word_embeddings", "true", MOE8_ERR_UNSUPPORTED,
     "lm_head.weight is W8A8_DYNAMIC but tie_word_embeddings is true: a tied lm_head is the "
     "float embedding"},
    {"missing_final_norm", f_opts, D_OMIT, "model.norm.weight", 0, 0, 0, 0, {0, 0}, NULL, NULL, NULL,
     MOE8_ERR_NOT_FOUND, "tensor 'model.norm.weight' not found"},
    {"config_topk", f_opts, D_NONE, NULL, 0, 0, 0, 0, {0, 0}, "config.json", "num_experts_per_tok", "10",
     MOE8_ERR_FORMAT, "num_experts_per_tok (10) > num_experts (4)"},
    {"config_dense_layer", f_opts, D_NONE, NULL, 0, 0, 0, 0, {0, 0}, "config.json", "mlp_only_layers",
     "[0]", MOE8_ERR_NOT_FOUND, "tensor 'model.layers.0.mlp.gate_proj.weight' not found"},
    {"config_model_type", f_opts, D_NONE, NULL, 0, 0, 0, 0, {0, 0}, "config.json", "model_type",
     "\"llama\"", MOE8_ERR_UNSUPPORTED, "model_type \"llama\" not supported (expected one of"},
    /* a Qwen3 folder read as DeepSeek-V3 (q_lora_rank 1536 by default): its MLA tensors */
    {"config_model_type_mla", f_opts, D_NONE, NULL, 0, 0, 0, 0, {0, 0}, "config.json",
     "model_type", "\"deepseek_v3\"", MOE8_ERR_NOT_FOUND,
     "tensor 'model.layers.0.self_attn.q_a_proj.weight' not found"},
    {"config_head_dim", f_opts, D_NONE, NULL, 0, 0, 0, 0, {0, 0}, "config.json", "head_dim", "8",
     MOE8_ERR_FORMAT, "q_norm.weight': expected shape [8], found [16]"},
    {"desc_missing_key", q_opts, D_NONE, NULL, 0, 0, 0, 0, {0, 0}, "quant_model_description.json",
     EXP "0.up_proj.weight", NULL, MOE8_ERR_NOT_FOUND,
     "required key '" EXP "0.up_proj.weight' missing"},
    {"desc_w4a16", q_opts, D_NONE, NULL, 0, 0, 0, 0, {0, 0}, "quant_model_description.json",
     EXP "2.gate_proj.weight", "\"W4A16\"", MOE8_ERR_UNSUPPORTED,
     "tensor '" EXP "2.gate_proj.weight': quant type \"W4A16\" not supported"},
    {"desc_fa_quant", q_opts, D_NONE, NULL, 0, 0, 0, 0, {0, 0}, "quant_model_description.json",
     "fa_quant_type", "\"FAQuant\"", MOE8_ERR_UNSUPPORTED, "fa_quant_type FAQuant not supported"},
    {"desc_float_attn_int8", q_opts, D_NONE, NULL, 0, 0, 0, 0, {0, 0}, "quant_model_description.json",
     "model.layers.0.self_attn.o_proj.weight", "\"FLOAT\"", MOE8_ERR_FORMAT,
     "tensor '" ATT "o_proj.weight': expected dtype BF16, F16 or F32 (FLOAT), found I8"},
    {"gen_config_eos", f_opts, D_NONE, NULL, 0, 0, 0, 0, {0, 0}, "generation_config.json",
     "eos_token_id", "\"<|im_end|>\"", MOE8_ERR_FORMAT,
     "generation_config.json': eos_token_id must be an integer or a list"},
};

static void test_defects(void) {
    for (size_t i = 0; i < sizeof defects / sizeof defects[0]; i++) {
        const defect *d = &defects[i];
        fx_opts o = d->opts();
        char name[96];
        moe8_model *m = NULL;
        moe8_error e;
        moe8_status st;
        o.tensor_hook = hook_tensor;
        o.json_hook = hook_json;
        o.user = (void *)d;
        o.generation_config = 1;
        snprintf(name, sizeof name, "bad_%s", d->label);
        memset(&e, 0, sizeof e);
        st = moe8_model_load(make(name, &o), NULL, &m, &e);
        CHECKF(st == d->code, "%s: status %d, want %d (%s)", d->label, st, d->code, e.message);
        CHECKF(strstr(e.message, d->msg) != NULL, "%s: '%s' lacks '%s'", d->label, e.message, d->msg);
        CHECKF(m == NULL && e.code == st, "%s", d->label);
        moe8_model_free(m);
    }
}

/* The int8 GEMMs' int32 accumulators: the largest quant_bias and widths that
 * cannot wrap load; one more is refused, naming the tensor. */
static const defect bias_at_room = {"bias_room", q_opts, D_SET, ATT "q_proj.quant_bias",
                                    -2146435071.0, 9, 0, 0, {0, 0}, NULL, NULL, NULL, MOE8_OK, ""};

static void width_case(const char *name, int64_t inter, int64_t moe_inter, moe8_status want,
                       const char *msg) {
    fx_opts o = q_opts();
    moe8_model *m = NULL;
    moe8_error e;
    o.hidden = 8;
    o.n_heads = 1;
    o.n_kv_heads = 1;
    o.head_dim = 8;
    o.n_experts = 1;
    o.top_k = 1;
    o.inter = inter;
    o.moe_inter = moe_inter;
    o.vocab = 16;
    memset(&e, 0, sizeof e);
    CHECKF(moe8_model_load(make(name, &o), NULL, &m, &e) == want, "%s: %s", name, e.message);
    CHECKF(want == MOE8_OK || strstr(e.message, msg), "%s: '%s' lacks '%s'", name, e.message, msg);
    moe8_model_free(m);
}

static void test_int32_bounds(void) {
    fx_opts o = q_opts();
    moe8_model *m = NULL;
    moe8_error e;
    o.tensor_hook = hook_tensor;
    o.user = (void *)&bias_at_room;
    CHECKF(moe8_model_load(make("bias_room", &o), NULL, &m, &e) == MOE8_OK, "%s", e.message);
    CHECK(m && ((const int32_t *)m->layers[0].q.quant_bias->data)[9] == -2146435071);
    moe8_model_free(m);
    /* W8A8 static: 16384 x 131071 <= INT32_MAX < 16384 x 131072 (dense down_proj) */
    width_case("width_w8a8_ok", 131071, 32, MOE8_OK, "");
    width_case("width_w8a8_over", 131072, 32, MOE8_ERR_UNSUPPORTED,
               "tensor 'model.layers.1.mlp.down_proj.weight': 131072 inputs: W8A8 int8 products "
               "would overflow the int32 accumulator (at most 131071 inputs)");
    /* W8A8_DYNAMIC experts: the MoE layer's 65536 (expert down_proj) */
    width_case("width_dyn_ok", 96, 65536, MOE8_OK, "");
    width_case("width_dyn_over", 96, 65537, MOE8_ERR_UNSUPPORTED,
               "tensor 'model.layers.0.mlp.experts.0.down_proj.weight': 65537 inputs: W8A8_DYNAMIC");
}

static void fifo_blocked(int sig) {
    (void)sig;
    static const char msg[] = "FAIL test_model_load: load blocked on a fifo\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(1);
    _exit(1);
}

/* Defects made by editing files after writing. */
static void test_file_defects(void) {
    fx_opts o = q_opts();
    char path[4200];
    moe8_model *m = NULL;
    moe8_error e;
    const char *dir = make("bad_files", &o);

    snprintf(path, sizeof path, "%s/config.json", dir);
    test_write_file(path, "{\"model_type\": \"qwen3_moe\",", 27);
    CHECK(moe8_model_load(dir, NULL, &m, &e) == MOE8_ERR_FORMAT && !m);
    CHECKF(strstr(e.message, "config.json': invalid JSON near byte") != NULL, "%s", e.message);
    unlink(path);
    CHECK(moe8_model_load(dir, NULL, &m, &e) == MOE8_ERR_NOT_FOUND && !m);
    CHECKF(strstr(e.message, "config.json") != NULL, "%s", e.message);

    dir = make("bad_files2", &o);
    snprintf(path, sizeof path, "%s/quant_model_description.json", dir);
    test_write_file(path, "{\"a\": ", 6);
    CHECK(moe8_model_load(dir, NULL, &m, &e) == MOE8_ERR_FORMAT && !m);
    CHECKF(strstr(e.message, "quant_model_description.json': invalid JSON") != NULL, "%s", e.message);
    unlink(path);
    /* int8 tensors without a description: everything is FLOAT, refused */
    CHECK(moe8_model_load(dir, NULL, &m, &e) == MOE8_ERR_FORMAT && !m);
    CHECKF(strstr(e.message, "found I8") && strstr(e.message, "no quant_model_description.json"),
           "%s", e.message);

    dir = make("bad_files3", &o);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(truncate(path, 4096) == 0);
    CHECK(moe8_model_load(dir, NULL, &m, &e) != MOE8_OK && !m);
    CHECKF(strstr(e.message, "model.safetensors") != NULL, "%s", e.message);

    /* generation_config.json: a key twice (cJSON keeps the first, Python the last) */
    o.generation_config = 1;
    dir = make("bad_files4", &o);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    static const char dup[] = "{\"eos_token_id\":[2,7],\"eos_token_id\":3}";
    test_write_file(path, dup, strlen(dup));
    CHECK(moe8_model_load(dir, NULL, &m, &e) == MOE8_ERR_FORMAT && !m);
    CHECKF(strstr(e.message, "generation_config.json': duplicate key 'eos_token_id' at the top level"),
           "%s", e.message);
    test_write_file(path, "{\"eos_token_id\":[2,7]}\n\"\"", 25);
    CHECK(moe8_model_load(dir, NULL, &m, &e) == MOE8_ERR_FORMAT && !m);
    CHECKF(strstr(e.message, "generation_config.json': unexpected bytes after the JSON value at "
                             "byte 23"), "%s", e.message);
    /* FIFOs in place of the JSON files: refused at once, not waited on */
    signal(SIGALRM, fifo_blocked);
    alarm(20);
    unlink(path);
    CHECK(mkfifo(path, 0600) == 0);
    CHECK(moe8_model_load(dir, NULL, &m, &e) == MOE8_ERR_IO && !m);
    CHECKF(strstr(e.message, "generation_config.json' is not a regular file (a fifo)"), "%s",
           e.message);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    CHECK(mkfifo(path, 0600) == 0);
    CHECK(moe8_model_load(dir, NULL, &m, &e) == MOE8_ERR_IO && !m);
    CHECKF(strstr(e.message, "/config.json' is not a regular file (a fifo)"), "%s", e.message);
    alarm(0);
    signal(SIGALRM, SIG_DFL);

    CHECK(moe8_model_load(MOE8_TEST_TMP "/no_such_folder", NULL, &m, &e) == MOE8_ERR_NOT_FOUND);
    CHECK(moe8_model_load(NULL, NULL, &m, &e) == MOE8_ERR_INVALID_ARG);
}

/* ======================================================================== */
/* moe8 inspect                                                              */
/* ======================================================================== */

/* Run a shell command; its stdout+stderr into buf. Returns the exit status. */
static int run(const char *cmd, char *buf, size_t n) {
    FILE *p = popen(cmd, "r");
    size_t got = 0;
    int st;
    if (!p) return -1;
    while (got + 1 < n) {
        size_t r = fread(buf + got, 1, n - 1 - got, p);
        if (r == 0) break;
        got += r;
    }
    buf[got] = '\0';
    st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_inspect(void) {
    static char out[16384];
    char cmd[4600];
    fx_opts o = fx_default_opts();
    o.quant = 1;
    o.n_layers = 4;
    o.dense_layer = 1;
    o.n_shards = 2;
    o.generation_config = 1;
    const char *dir = make("inspect_good", &o);
    snprintf(cmd, sizeof cmd, "'%s' inspect -m '%s' 2>&1", MOE8_CLI, dir);
    CHECK(run(cmd, out, sizeof out) == 0);
    const char *want[] = {
        "model_type: qwen3_moe",
        "layer 0: attn W8A8, experts W8A8_DYNAMIC, router FLOAT",
        "layer 1: attn W8A8, mlp W8A8",
        "layers 2-3: attn W8A8, experts W8A8_DYNAMIC, router FLOAT",
        "experts: 4, top-2, intermediate 32",
        "heads: 4 q, 2 kv, head_dim 16",
        "stop ids: 2 7",
        "safetensors files: 2",
        "I8 ",
        "context 4096",
        "KV cache 2.0 (f16)", /* 2 x 4 layers x 2 kv heads x 16 x 4096 x 2 bytes */
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECKF(strstr(out, want[i]) != NULL, "inspect output lacks '%s':\n%s", want[i], out);
    snprintf(cmd, sizeof cmd, "'%s' inspect -m '%s' -c 2048 --kv-type f32 2>&1", MOE8_CLI, dir);
    CHECK(run(cmd, out, sizeof out) == 0);
    CHECKF(strstr(out, "context 2048") && strstr(out, "KV cache 2.0 (f32)"), "%s", out);
    snprintf(cmd, sizeof cmd, "'%s' inspect -m '%s' --kv-type bf16 2>&1", MOE8_CLI, dir);
    CHECK(run(cmd, out, sizeof out) == 0);
    CHECKF(strstr(out, "KV cache 2.0 (bf16)") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "'%s' inspect -m '%s' --kv-type f8 2>&1", MOE8_CLI, dir);
    CHECK(run(cmd, out, sizeof out) == 2);
    CHECKF(strstr(out, "--kv-type wants one of f32|f16|bf16, got 'f8'") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "'%s' inspect -m '%s' -c 0 2>&1", MOE8_CLI, dir);
    CHECK(run(cmd, out, sizeof out) == 2);
    CHECKF(strstr(out, "-c wants an integer in 1..2147483647, got '0'") != NULL, "%s", out);

    o = fx_default_opts();
    dir = make("inspect_float", &o);
    snprintf(cmd, sizeof cmd, "'%s' inspect -m '%s' 2>&1", MOE8_CLI, dir);
    CHECK(run(cmd, out, sizeof out) == 0);
    CHECKF(strstr(out, "layers 0-1: attn FLOAT, experts FLOAT, router FLOAT") != NULL, "%s", out);
    CHECKF(strstr(out, "\nlm_head: FLOAT, BF16, 0.0 MiB (32768 bytes)\n") != NULL, "%s", out);

    o.lm_head_w8a8 = 1; /* V 256 x H 64 int8 + 256 F32 scales and offsets */
    dir = make("inspect_lmhead", &o);
    snprintf(cmd, sizeof cmd, "'%s' inspect -m '%s' 2>&1", MOE8_CLI, dir);
    CHECK(run(cmd, out, sizeof out) == 0);
    CHECKF(strstr(out, "\nlm_head: W8A8_DYNAMIC, I8, 0.0 MiB (16384 bytes) + scales 0.0 MiB "
                       "(2048 bytes)\n") != NULL, "%s", out);
    o = fx_default_opts();
    o.tie = 1;
    o.float_dtype = MOE8_DT_F32;
    dir = make("inspect_tied", &o);
    snprintf(cmd, sizeof cmd, "'%s' inspect -m '%s' 2>&1", MOE8_CLI, dir);
    CHECK(run(cmd, out, sizeof out) == 0);
    CHECKF(strstr(out, "\nlm_head: FLOAT, F32, 0.1 MiB (65536 bytes), tied to "
                       "model.embed_tokens.weight\n") != NULL, "%s", out);

    const defect *d = &defects[3]; /* missing expert 3 down_proj scale */
    o = d->opts();
    o.tensor_hook = hook_tensor;
    o.user = (void *)d;
    dir = make("inspect_bad", &o);
    snprintf(cmd, sizeof cmd, "'%s' inspect -m '%s' 2>&1", MOE8_CLI, dir);
    CHECK(run(cmd, out, sizeof out) != 0);
    CHECKF(strstr(out, "moe8 inspect: ") == out, "%s", out);
    CHECKF(strstr(out, "3.down_proj.weight_scale' not found") != NULL, "%s", out);

    snprintf(cmd, sizeof cmd, "'%s' inspect -h 2>&1", MOE8_CLI);
    CHECK(run(cmd, out, sizeof out) == 0 && strstr(out, "usage: moe8 inspect") != NULL);
    snprintf(cmd, sizeof cmd, "'%s' inspect 2>&1", MOE8_CLI);
    CHECK(run(cmd, out, sizeof out) != 0 && strstr(out, "usage: moe8 inspect") != NULL);
}

int main(void) {
    test_good_folders();
    test_queries();
    test_defects();
    test_file_defects();
    test_int32_bounds();
    test_inspect();
    return test_summary();
}
