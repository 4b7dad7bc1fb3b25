/*
 * test_quantize.c — moe8_quantize / `moe8 quantize` on a tiny synthetic
 * model (2 layers: layer 0 dense, layer 1 MoE; vocabulary cut to 16384 for
 * speed): layer types after load, FLOAT tensors byte-identical, int8 codes
 * and scales, deq_scale and quant_bias recomputed here, layer 0's
 * calibration range recomputed from the embeddings, SEMANTICS §5's formula
 * cancelling the offset, W8A8 vs float logits and greedy tokens, the
 * float32-deq_scale, float-linear, int8-lm_head and sharded variants, W4A8
 * experts (`--experts w4a8`: msModelSlim's int4 layout, the clip search
 * recomputed here, scale_bias, logits near the float model's), cancellation, bad
 * inputs (library and CLI), and the input folder unchanged afterwards.
 */
#include <dirent.h>

#include "test.h"
#include "fixture_model.h"   /* before V and H below */

#include "moe8.h"

#define TOK MOE8_TOKENIZER_DIR
#define V 16384
#define H 256
#define FMT(buf, ...)                                                             \
    do {                                                                          \
        if (snprintf(buf, sizeof buf, __VA_ARGS__) >= (int)sizeof buf) abort();   \
    } while (0)

static const char calib[] =
    "It was a bright cold day in April, and the clocks were striking thirteen. The quick brown "
    "fox jumps over the lazy dog; 42 apples cost $3.50 at the market on 5th Avenue.\n"
    "for (int i = 0; i < n; i++) sum += x[i];\n";

/* ---- helpers --------------------------------------------------------------- */

/* FNV-1a over every file name and content of a folder (sorted names). */
static uint64_t hash_folder(const char *dir) {
    struct dirent **list;
    int n = scandir(dir, &list, NULL, alphasort);
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        char path[4200];
        size_t len = 0;
        unsigned char *b;
        for (const char *c = list[i]->d_name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
        FMT(path, "%s/%s", dir, list[i]->d_name);
        if (list[i]->d_type == DT_REG && (b = test_slurp(path, &len))) {
            for (size_t j = 0; j < len; j++) h = (h ^ b[j]) * 1099511628211ull;
            free(b);
        }
        free(list[i]);
    }
    free(list);
    return n < 0 ? 0 : h;
}

static const int32_t prompt[] = {9707, 11, 847, 829, 374}; /* "Hello, my name is" */
#define N_PROMPT 5

/* Last-token logits of the prompt, and n_greedy (5 unless given) greedy tokens. */
static void run_model_n(const char *dir, float *logits, int32_t *greedy, int n_greedy) {
    moe8_model *m = test_load_model(dir);
    moe8_context_params cp = moe8_context_params_default();
    moe8_context *c = NULL;
    moe8_sampler *s = NULL;
    int32_t pos[N_PROMPT], seq[N_PROMPT] = {0}, n_out = 0;
    const int32_t *pp = prompt, np = N_PROMPT;
    moe8_error e;
    cp.n_ctx = 32; /* 5 prompt + at most 16 generated tokens */
    if (moe8_context_create(m, &cp, &c, &e) != MOE8_OK) {
        fprintf(stderr, "context %s: %s\n", dir, e.message);
        exit(2);
    }
    for (int i = 0; i < N_PROMPT; i++) pos[i] = i;
    {
        moe8_batch b = {N_PROMPT, prompt, pos, seq, NULL};
        CHECK(moe8_decode(c, &b, NULL) == MOE8_OK);
        memcpy(logits, moe8_context_logits(c, N_PROMPT - 1), V * sizeof(float));
    }
    CHECK(moe8_sampler_create(NULL, V, &s, NULL) == MOE8_OK);
    {
        moe8_generate_request r = {1, &pp, &np, n_greedy, NULL, 0, NULL, NULL, greedy, &n_out, NULL};
        CHECK(moe8_generate(c, s, &r, NULL) == MOE8_OK && n_out == n_greedy);
    }
    moe8_sampler_free(s);
    moe8_context_free(c);
    moe8_model_free(m);
}

static void run_model(const char *dir, float *logits, int32_t *greedy) {
    run_model_n(dir, logits, greedy, 5);
}

static float f32_at(const moe8_tensor *t, int64_t i) {
    if (t->dtype == MOE8_DT_BF16) return moe8_bf16_to_f32(((const uint16_t *)t->data)[i]);
    return ((const float *)t->data)[i];
}

/* ---- tensor-level checks ----------------------------------------------------- */

/* The test's own rule for what is quantized: 0 FLOAT, 1 W8A8, 2 W8A8_DYNAMIC. */
static int kind_of(const char *name, int linear_float, int lm_head) {
    if (strstr(name, ".mlp.experts.") && strstr(name, "_proj.weight")) return 2;
    if (lm_head && !strcmp(name, "lm_head.weight")) return 2;
    if (linear_float) return 0;
    if (strstr(name, ".self_attn.") && strstr(name, "_proj.weight")) return 1;
    if (!strncmp(name, "model.layers.0.mlp.", 19) && strstr(name, "_proj.weight")) return 1;
    return 0;
}

static const moe8_tensor *companion(const moe8_st *q, const char *wname, const char *suffix) {
    char n[512];
    FMT(n, "%.*s%s", (int)(strlen(wname) - 6), wname, suffix);
    return moe8_st_find(q, n);
}

/* Codes and scales of one quantized weight against an independent recomputation;
 * for W8A8 also deq_scale and quant_bias from the stored input scale/offset. */
static void check_quantized(const moe8_tensor *src, const moe8_st *q, int kind, int deq_f32) {
    const moe8_tensor *w = moe8_st_find(q, src->name);
    const moe8_tensor *ws = companion(q, src->name, "weight_scale");
    const moe8_tensor *wo = companion(q, src->name, "weight_offset");
    const int64_t N = src->shape[0], K = src->shape[1];
    int bad_code = 0, bad_scale = 0, bad_off = 0, bad_deq = 0, bad_bias = 0;
    float is = 0;
    int io = 0;
    const moe8_tensor *dq = NULL, *qb = NULL;
    CHECKF(w && w->dtype == MOE8_DT_I8 && w->shape[0] == N && w->shape[1] == K, "%s", src->name);
    CHECKF(ws && ws->dtype == MOE8_DT_F32 && ws->n_dims == 2 && ws->shape[0] == N &&
           ws->shape[1] == 1, "%s scale", src->name);
    CHECKF(wo && wo->dtype == MOE8_DT_F32 && wo->n_dims == 2 && wo->shape[0] == N, "%s offset", src->name);
    if (!w || !ws || !wo) return;
    if (kind == 1) {
        const moe8_tensor *a = companion(q, src->name, "input_scale");
        const moe8_tensor *b = companion(q, src->name, "input_offset");
        dq = companion(q, src->name, "deq_scale");
        qb = companion(q, src->name, "quant_bias");
        CHECKF(a && b && dq && qb && a->dtype == MOE8_DT_F32 && a->n_elements == 1 &&
               b->dtype == MOE8_DT_I8 && b->n_elements == 1 && qb->dtype == MOE8_DT_I32 &&
               dq->dtype == (deq_f32 ? MOE8_DT_F32 : MOE8_DT_I64) && dq->n_elements == N,
               "%s static companions", src->name);
        if (!a || !b || !dq || !qb) return;
        is = ((const float *)a->data)[0];
        io = ((const int8_t *)b->data)[0];
        CHECK(is > 0 && isfinite(is));
    }
    for (int64_t i = 0; i < N; i++) {
        float amax = 0, scale;
        int64_t sum = 0;
        for (int64_t k = 0; k < K; k++) amax = fmaxf(amax, fabsf(f32_at(src, i * K + k)));
        scale = amax / 127.0f;
        for (int64_t k = 0; k < K; k++) {
            float c = scale > 0 ? rintf(f32_at(src, i * K + k) / scale) : 0.0f;
            int8_t got = ((const int8_t *)w->data)[i * K + k];
            bad_code += got != (int8_t)c;
            sum += got;
        }
        bad_scale += ((const float *)ws->data)[i] != scale;
        bad_off += ((const float *)wo->data)[i] != 0.0f;
        if (kind == 1) {
            float d = is * scale, got;
            if (deq_f32) {
                got = ((const float *)dq->data)[i];
            } else {
                int64_t v = ((const int64_t *)dq->data)[i];
                uint32_t lo = (uint32_t)v;
                memcpy(&got, &lo, 4);
                bad_deq += (v >> 32) != 0;   /* positive fp32 bits: high word zero */
            }
            bad_deq += memcmp(&got, &d, 4) != 0;
            bad_bias += ((const int32_t *)qb->data)[i] != (int32_t)(-(int64_t)io * sum);
        }
    }
    CHECKF(!bad_code && !bad_scale && !bad_off && !bad_deq && !bad_bias,
           "%s: %d codes, %d scales, %d offsets, %d deq, %d bias differ", src->name, bad_code,
           bad_scale, bad_off, bad_deq, bad_bias);
}

/* Every source tensor: FLOAT ones byte-identical, quantized ones recomputed. */
static void check_tensors(const char *src_dir, const char *q_dir, int linear_float, int deq_f32,
                          int lm_head) {
    moe8_st *s = NULL, *q = NULL;
    int n_float = 0, n_q = 0;
    CHECK(moe8_st_open(src_dir, &s, NULL) == MOE8_OK);
    CHECK(moe8_st_open(q_dir, &q, NULL) == MOE8_OK);
    if (!s || !q) return;
    for (size_t i = 0; i < moe8_st_count(s); i++) {
        const moe8_tensor *t = moe8_st_get(s, i), *o;
        int kind = kind_of(t->name, linear_float, lm_head);
        if (kind) {
            check_quantized(t, q, kind, deq_f32);
            n_q++;
            continue;
        }
        o = moe8_st_find(q, t->name);
        CHECKF(o && o->dtype == t->dtype && o->n_bytes == t->n_bytes && o->n_dims == t->n_dims &&
               !memcmp(o->data, t->data, t->n_bytes), "FLOAT tensor %s differs", t->name);
        n_float++;
    }
    CHECKF(n_float == (linear_float ? 23 : 12) - lm_head && n_q == (linear_float ? 48 : 59) + lm_head,
           "%d float, %d quantized", n_float, n_q);
    moe8_st_free(s);
    moe8_st_free(q);
}

/* rmsnorm(embed[id]) * w over the calibration tokens: layer 0's q/k/v input. */
static void check_layer0_range(const char *src_dir, const char *q_dir) {
    moe8_tokenizer *tok = NULL;
    moe8_st *s = NULL, *q = NULL;
    int32_t ids[512];
    size_t n = 0;
    double lo = 0, hi = 0;
    CHECK(moe8_tokenizer_load(src_dir, &tok, NULL) == MOE8_OK);
    CHECK(moe8_tokenize(tok, calib, strlen(calib), ids, 512, &n, NULL) == MOE8_OK);
    CHECK(moe8_st_open(src_dir, &s, NULL) == MOE8_OK && moe8_st_open(q_dir, &q, NULL) == MOE8_OK);
    {
        const moe8_tensor *emb = moe8_st_find(s, "model.embed_tokens.weight");
        const moe8_tensor *nw = moe8_st_find(s, "model.layers.0.input_layernorm.weight");
        const moe8_tensor *wq = moe8_st_find(s, "model.layers.0.self_attn.q_proj.weight");
        const moe8_tensor *qw = moe8_st_find(q, "model.layers.0.self_attn.q_proj.weight");
        const char *names[3] = {"q_proj", "k_proj", "v_proj"};
        float is = 0, x[H];
        int io = 0;
        double err2 = 0, ref2 = 0;
        for (size_t t = 0; t < n; t++) {
            const int64_t id = ids[t] % V;
            double ss = 0;
            for (int k = 0; k < H; k++) ss += (double)f32_at(emb, id * H + k) * f32_at(emb, id * H + k);
            for (int k = 0; k < H; k++) {
                double h = f32_at(emb, id * H + k) / sqrt(ss / H + 1e-6) * f32_at(nw, k);
                lo = fmin(lo, h);
                hi = fmax(hi, h);
            }
        }
        for (int i = 0; i < 3; i++) {
            char nm[128];
            const moe8_tensor *a, *b;
            FMT(nm, "model.layers.0.self_attn.%s.input_scale", names[i]);
            a = moe8_st_find(q, nm);
            FMT(nm, "model.layers.0.self_attn.%s.input_offset", names[i]);
            b = moe8_st_find(q, nm);
            CHECK(a && b);
            if (!a || !b) return;
            if (i == 0) {
                is = ((const float *)a->data)[0];
                io = ((const int8_t *)b->data)[0];
            }
            CHECK(((const float *)a->data)[0] == is && ((const int8_t *)b->data)[0] == io);
        }
        CHECK_NEAR(is, (hi - lo) / 255.0, 1e-5 * (hi - lo));
        CHECKF(abs(io - (int)rint(-128.0 - lo / ((hi - lo) / 255.0))) <= 1, "offset %d", io);
        /* SEMANTICS §5 on the last calibration token: (xq·Wq^T + bias)·deq ≈ x·W^T */
        {
            const int64_t id = ids[n - 1] % V;
            const moe8_tensor *dq = moe8_st_find(q, "model.layers.0.self_attn.q_proj.deq_scale");
            const moe8_tensor *qb = moe8_st_find(q, "model.layers.0.self_attn.q_proj.quant_bias");
            double ss = 0;
            for (int k = 0; k < H; k++) ss += (double)f32_at(emb, id * H + k) * f32_at(emb, id * H + k);
            for (int k = 0; k < H; k++)
                x[k] = (float)(f32_at(emb, id * H + k) / sqrt(ss / H + 1e-6) * f32_at(nw, k));
            for (int64_t r = 0; r < wq->shape[0]; r++) {
                double ref = 0;
                int64_t acc = 0;
                float d;
                uint32_t lo32 = (uint32_t)((const int64_t *)dq->data)[r];
                memcpy(&d, &lo32, 4);
                for (int k = 0; k < H; k++) {
                    float c = fminf(fmaxf(rintf(x[k] / is + (float)io), -128), 127);
                    ref += (double)x[k] * f32_at(wq, r * H + k);
                    acc += (int64_t)c * ((const int8_t *)qw->data)[r * H + k];
                }
                acc += ((const int32_t *)qb->data)[r];
                err2 += ((double)acc * d - ref) * ((double)acc * d - ref);
                ref2 += ref * ref;
            }
            CHECKF(sqrt(err2 / ref2) < 0.02, "q_proj W8A8 relative error %.4f", sqrt(err2 / ref2));
        }
    }
    moe8_st_free(s);
    moe8_st_free(q);
    moe8_tokenizer_free(tok);
}

/* ---- model-level checks ----------------------------------------------------- */

static void check_types(const char *dir, moe8_quant_type attn) {
    moe8_model *m = test_load_model(dir);
    moe8_layer_info a, b;
    CHECK(moe8_model_layer_info(m, 0, &a) == 0 && moe8_model_layer_info(m, 1, &b) == 0);
    CHECK(!a.is_moe && a.qkv == attn && a.o == attn && a.mlp_gate_up == attn && a.mlp_down == attn);
    CHECK(b.is_moe && b.qkv == attn && b.o == attn && b.experts == MOE8_QUANT_W8A8_DYNAMIC &&
          b.router == MOE8_QUANT_FLOAT);
    moe8_model_free(m);
}

typedef struct {
    int calls, cancel_at;
    uint64_t last_done, last_total;
    int calibrated;
} prog;

static int on_progress(void *user, const char *stage, uint64_t done, uint64_t total) {
    prog *p = user;
    p->calls++;
    if (!strcmp(stage, "calibrate")) p->calibrated |= done == total;
    else {
        CHECK(done >= p->last_done && done <= total);
        p->last_done = done;
        p->last_total = total;
    }
    return p->cancel_at && p->calls >= p->cancel_at;
}

static void test_library(const char *base, const char *src) {
    static float lf[V], lq[V], lv[V];
    int32_t gf[5], gq[5], gv[5];
    char out[4096], out2[4096];
    moe8_quantize_params p = moe8_quantize_params_default();
    moe8_quantize_stats st;
    prog pr = {0};
    moe8_error e;
    FMT(out, "%s/w8", base);
    p.calib_text = calib;
    p.calib_len = strlen(calib);
    p.progress = on_progress;
    p.progress_user = &pr;
    CHECKF(moe8_quantize(src, out, &p, &st, &e) == MOE8_OK, "%s", e.message);
    CHECK(pr.calibrated && pr.last_done == pr.last_total && pr.last_total == st.bytes_in);
    CHECK(st.n_files == 1 && st.n_tensors_in == 71 && st.n_calib_tokens > 40);
    CHECK(st.n_tensors_out == 12 + 48 * 3 + 11 * 7);
    check_types(out, MOE8_QUANT_W8A8);
    check_tensors(src, out, 0, 0, 0);
    check_layer0_range(src, out);
    run_model(src, lf, gf);
    run_model(out, lq, gq);
    CHECKF(test_cosine(lf, lq, V) >= 0.99, "W8A8 vs float logits cosine %.5f", test_cosine(lf, lq, V));
    CHECK(!memcmp(gf, gq, sizeof gf));
    printf("W8A8 vs float: cosine %.5f, greedy %d %d %d %d %d vs %d %d %d %d %d\n",
           test_cosine(lf, lq, V), gq[0], gq[1], gq[2], gq[3], gq[4], gf[0], gf[1], gf[2], gf[3], gf[4]);

    /* deq_scale as float32: same values, same logits */
    FMT(out2, "%s/w8f", base);
    p.deq_scale_f32 = 1;
    p.progress = NULL;
    CHECKF(moe8_quantize(src, out2, &p, NULL, &e) == MOE8_OK, "%s", e.message);
    check_tensors(src, out2, 0, 1, 0);
    run_model(out2, lv, gv);
    CHECK(!memcmp(lv, lq, sizeof lv) && !memcmp(gv, gq, sizeof gv));

    /* float attention: only the experts quantized */
    FMT(out2, "%s/w8lf", base);
    p.deq_scale_f32 = 0;
    p.linear_float = 1;
    CHECKF(moe8_quantize(src, out2, &p, &st, &e) == MOE8_OK, "%s", e.message);
    CHECK(st.n_calib_tokens == 0);
    check_types(out2, MOE8_QUANT_FLOAT);
    check_tensors(src, out2, 1, 0, 0);
    run_model(out2, lv, gv);
    CHECKF(test_cosine(lf, lv, V) >= 0.995, "float-linear vs float cosine %.5f", test_cosine(lf, lv, V));

    /* cancelled: nothing left behind */
    FMT(out2, "%s/cancelled", base);
    p.linear_float = 0;
    p.progress = on_progress;
    memset(&pr, 0, sizeof pr);
    pr.cancel_at = 5;
    CHECK(moe8_quantize(src, out2, &p, NULL, &e) == MOE8_ERR_CANCELLED);
    CHECK(access(out2, F_OK) != 0);

    /* an already quantized input */
    FMT(out2, "%s/again", base);
    CHECKF(moe8_quantize(out, out2, NULL, NULL, &e) == MOE8_ERR_UNSUPPORTED &&
           strstr(e.message, "already quantized"), "%s", e.message);
    /* non-empty output without force; with force it is replaced */
    CHECKF(moe8_quantize(src, out, NULL, NULL, &e) == MOE8_ERR_INVALID_ARG &&
           strstr(e.message, "not empty"), "%s", e.message);
}

/* The quant type the description records for `name`, "" if none. */
static const char *desc_type(const char *dir, const char *name) {
    static char out[32];
    char path[4200];
    size_t len = 0;
    char *text;
    cJSON *root, *it;
    FMT(path, "%s/quant_model_description.json", dir);
    text = (char *)test_slurp(path, &len);
    root = text ? cJSON_ParseWithLength(text, len) : NULL;
    it = cJSON_GetObjectItemCaseSensitive(root, name);
    snprintf(out, sizeof out, "%s", cJSON_IsString(it) ? it->valuestring : "");
    cJSON_Delete(root);
    free(text);
    return out;
}

/* lm_head_w8a8: lm_head.weight W8A8_DYNAMIC with the experts' rules (codes,
 * per-row scales and zero offsets recomputed here), listed so in the
 * description; its logits vs the bf16 lm_head's of the same W8A8 body:
 * cosine >= 0.999 and the same 16 greedy tokens; the CLI's --lm-head w8a8
 * the same bytes of logits; a tied model and an int8 lm_head input refused. */
static void test_lm_head(const char *base, const char *src) {
    static float lq[V], ll[V], lf[V], lc[V];
    int32_t gq[16], gl[16], gf[16], gc[16];
    char out[4096], dir[4096], cmd[16384], log[4200], cf[4200];
    moe8_quantize_params p = moe8_quantize_params_default();
    moe8_quantize_stats st;
    moe8_lm_head_info li;
    moe8_model *m;
    moe8_error e;
    FMT(out, "%s/w8lm", base);
    p.calib_text = calib;
    p.calib_len = strlen(calib);
    CHECK(moe8_quantize_params_default().lm_head_w8a8 == 0);   /* off by default */
    p.lm_head_w8a8 = 1;
    CHECKF(moe8_quantize(src, out, &p, &st, &e) == MOE8_OK, "%s", e.message);
    CHECK(st.n_tensors_out == 12 + 48 * 3 + 11 * 7 + 2);
    check_types(out, MOE8_QUANT_W8A8);
    check_tensors(src, out, 0, 0, 1);
    CHECK(!strcmp(desc_type(out, "lm_head.weight"), "W8A8_DYNAMIC") &&
          !strcmp(desc_type(out, "lm_head.weight_scale"), "W8A8_DYNAMIC") &&
          !strcmp(desc_type(out, "lm_head.weight_offset"), "W8A8_DYNAMIC") &&
          !strcmp(desc_type(out, "model.embed_tokens.weight"), "FLOAT"));
    m = test_load_model(out);
    CHECK(moe8_model_lm_head_info(m, &li) == 0 && li.quant == MOE8_QUANT_W8A8_DYNAMIC && !li.tied &&
          li.dtype == MOE8_DT_I8 && li.weight_bytes == (uint64_t)V * H && li.scale_bytes == 8 * V);
    moe8_model_free(m);
    FMT(dir, "%s/w8", base);   /* test_library's: the same body, bf16 lm_head */
    CHECK(!strcmp(desc_type(dir, "lm_head.weight"), "FLOAT"));
    run_model_n(dir, lq, gq, 16);
    run_model_n(out, ll, gl, 16);
    run_model_n(src, lf, gf, 16);
    printf("int8 vs bf16 lm_head: cosine %.6f, 16 greedy tokens %s; vs float model: cosine %.5f\n",
           test_cosine(ll, lq, V), memcmp(gl, gq, sizeof gl) ? "DIFFER" : "equal", test_cosine(ll, lf, V));
    CHECKF(test_cosine(ll, lq, V) >= 0.999, "int8 vs bf16 lm_head cosine %.6f", test_cosine(ll, lq, V));
    CHECK(!memcmp(gl, gq, sizeof gl));
    CHECKF(test_cosine(ll, lf, V) >= 0.99, "int8 lm_head vs float model cosine %.5f", test_cosine(ll, lf, V));
    CHECK(memcmp(ll, lq, sizeof ll) != 0);   /* it did change lm_head */

    /* the CLI flag: the same checkpoint, the same logits */
    FMT(cf, "%s/calib_lm.txt", base);
    test_write_file(cf, calib, strlen(calib));
    FMT(dir, "%s/w8lm_cli", base);
    FMT(cmd, "'%s' quantize -i '%s' -o '%s' --calib '%s' --lm-head w8a8 >/dev/null", MOE8_CLI, src,
        dir, cf);
    CHECK(test_run(cmd) == 0);
    run_model_n(dir, lc, gc, 16);
    CHECK(!memcmp(lc, ll, sizeof lc) && !memcmp(gc, gl, sizeof gc));

    /* tied embeddings: refused, nothing written */
    FMT(dir, "%s/tied", base);
    FMT(cmd, "rm -rf '%s' && cp -r '%s' '%s' && sed -i 's/\"tie_word_embeddings\":[[:space:]]*false/"
        "\"tie_word_embeddings\": true/' '%s/config.json' && grep -q '\"tie_word_embeddings\": true' "
        "'%s/config.json'", dir, src, dir, dir, dir);
    CHECK(test_run(cmd) == 0);
    FMT(out, "%s/tied_out", base);
    CHECKF(moe8_quantize(dir, out, &p, NULL, &e) == MOE8_ERR_UNSUPPORTED &&
               strstr(e.message, "cannot quantize lm_head: tie_word_embeddings is true and the "
                                 "shared embedding must stay float"), "%s", e.message);
    CHECK(access(out, F_OK) != 0);
    FMT(log, "%s/lm_err.log", base);
    FMT(cmd, "'%s' quantize -i '%s' -o '%s' --lm-head w8a8 2>'%s' >/dev/null", MOE8_CLI, dir, out,
        log);
    CHECK(test_run(cmd) == 1 && test_file_contains(log, "tie_word_embeddings is true"));
    CHECK(access(out, F_OK) != 0);
    FMT(cmd, "'%s' quantize -i '%s' -o '%s' --lm-head int4 2>'%s' >/dev/null", MOE8_CLI, src, out,
        log);
    CHECK(test_run(cmd) == 2 && test_file_contains(log, "--lm-head wants one of float|w8a8, got 'int4'"));

    /* an input whose lm_head alone is int8 is already quantized */
    {
        fx_opts o = fx_default_opts();
        char fxdir[1024];   /* the fixture's own paths add a file name */
        o.lm_head_w8a8 = 1;
        FMT(fxdir, "%s/lmhead_in", base);
        FMT(cmd, "mkdir -p '%s' && cp '%s/tokenizer.json' '%s/'", fxdir, TOK, fxdir);
        CHECK(test_run(cmd) == 0 && fx_write_model(fxdir, &o) == 0);
        CHECKF(moe8_quantize(fxdir, out, &p, NULL, &e) == MOE8_ERR_UNSUPPORTED &&
                   strstr(e.message, "lm_head is already quantized"), "%s", e.message);
        CHECK(access(out, F_OK) != 0);
    }
    FMT(cmd, "rm -rf '%s/tied' '%s/w8lm_cli' '%s/lmhead_in'", base, base, base);
    CHECK(test_run(cmd) == 0);
}

/* Sharded output through the CLI: several files + index, same logits. */
static void test_cli_shards(const char *base, const char *src) {
    static float l1[V], l2[V];
    int32_t g1[5], g2[5];
    char cmd[16384], out[4096], path[4200], cf[4096];
    moe8_model *m;
    moe8_model_stats s;
    FMT(cf, "%s/calib.txt", base);
    test_write_file(cf, calib, strlen(calib));
    FMT(out, "%s/w8s", base);
    FMT(cmd, "'%s' quantize -i '%s' -o '%s' --calib '%s' --shard-size 1M >/dev/null", MOE8_CLI,
        src, out, cf);
    CHECK(test_run(cmd) == 0);
    FMT(path, "%s/model.safetensors.index.json", out);
    CHECK(access(path, F_OK) == 0);
    m = test_load_model(out);
    moe8_model_get_stats(m, &s);
    moe8_model_free(m);
    CHECKF(s.n_files >= 3, "%d files", s.n_files);
    FMT(path, "%s/w8", base);
    run_model(path, l1, g1);
    run_model(out, l2, g2);
    CHECK(!memcmp(l1, l2, sizeof l1) && !memcmp(g1, g2, sizeof g1));
}

/* Row i's int4 codes by the rule SEMANTICS §4b / quantize.c state (written
 * here again): clip ratios c/20 for c = 20..10, scale c/20 * amax / 7 in
 * fp32, codes clamp(rint(w / scale), -8, 7), least squared error wins, ties
 * to the larger c. Returns the scale. */
static float w4_row(int8_t *q, const float *w, int64_t K) {
    float amax = 0.0f, best = 0.0f;
    double best_e = INFINITY;
    for (int64_t j = 0; j < K; j++) amax = fabsf(w[j]) > amax ? fabsf(w[j]) : amax;
    if (amax == 0.0f) {
        memset(q, 0, (size_t)K);
        return 0.0f;
    }
    for (int c = 20; c >= 10; c--) {
        const float s = (float)c / 20.0f * amax / 7.0f;
        double e = 0.0;
        for (int64_t j = 0; j < K; j++) {
            float v = rintf(w[j] / s);
            v = v < -8.0f ? -8.0f : v > 7.0f ? 7.0f : v;
            e += ((double)w[j] - (double)s * v) * ((double)w[j] - (double)s * v);
        }
        if (e < best_e) best_e = e, best = s;
    }
    for (int64_t j = 0; j < K; j++) {
        float v = rintf(w[j] / best);
        q[j] = (int8_t)(v < -8.0f ? -8.0f : v > 7.0f ? 7.0f : v);
    }
    return best;
}

/* `--experts w4a8`: every routed expert tensor in msModelSlim's layout with
 * the codes and scales recomputed here, scale_bias [N][1] / [N][16], layer
 * types after load, and logits near the float model's. */
static void test_w4a8(const char *base, const char *src) {
    static float lf[V], l4[V];
    int32_t gf[5], g4[5];
    char out[4096], cmd[16384];
    moe8_st *s = NULL, *q = NULL;
    FMT(out, "%s/w4", base);
    FMT(cmd, "'%s' quantize -i '%s' -o '%s' --experts w4a8 --linear float >/dev/null", MOE8_CLI,
        src, out);
    CHECK(test_run(cmd) == 0);
    CHECK(!strcmp(desc_type(out, "model.layers.1.mlp.experts.0.gate_proj.weight"), "W4A8_DYNAMIC") &&
          !strcmp(desc_type(out, "model.layers.1.mlp.experts.3.down_proj.scale_bias"), "W4A8_DYNAMIC"));
    CHECK(moe8_st_open(src, &s, NULL) == MOE8_OK && moe8_st_open(out, &q, NULL) == MOE8_OK);
    int n_checked = 0, bad = 0;
    double sb_err = 0;
    for (size_t i = 0; s && q && i < moe8_st_count(s); i++) {
        const moe8_tensor *t = moe8_st_get(s, i);
        if (!strstr(t->name, ".mlp.experts.") || !strstr(t->name, "_proj.weight")) continue;
        const moe8_tensor *w = moe8_st_find(q, t->name), *ws = companion(q, t->name, "weight_scale");
        const moe8_tensor *sb = companion(q, t->name, "scale_bias");
        const int64_t N = t->shape[0], K = t->shape[1], nc = strstr(t->name, "down_proj") ? 16 : 1;
        if (!w || !ws || !sb || w->dtype != MOE8_DT_I8 || w->shape[0] != N / 2 || w->shape[1] != K ||
            sb->shape[0] != N || sb->shape[1] != nc) {
            bad++;
            continue;
        }
        float *row = malloc(sizeof(float) * K);
        int8_t *code = malloc((size_t)K);
        for (int64_t r = 0; r < N; r++) {
            double sum = 0;
            for (int64_t j = 0; j < K; j++) row[j] = f32_at(t, r * K + j);
            const float sc = w4_row(code, row, K);
            bad += memcmp(&sc, (const float *)ws->data + r, 4) != 0;
            for (int64_t j = 0; j < K; j++) {
                const uint8_t byte = ((const uint8_t *)w->data)[(r / 2) * K + j];
                const int v = r % 2 ? byte >> 4 : byte & 15;
                bad += (v >= 8 ? v - 16 : v) != code[j];
                sum += code[j];
            }
            double got = 0;
            for (int64_t c = 0; c < nc; c++) got += ((const float *)sb->data)[r * nc + c];
            sb_err = fmax(sb_err, fabs(got - 8.0 * sum * sc) / (8.0 * K * 8.0 * sc + 1e-30));
        }
        free(row);
        free(code);
        n_checked++;
    }
    CHECKF(n_checked == 3 * 16 && bad == 0, "%d W4A8 tensors checked, %d mismatches", n_checked, bad);
    CHECKF(sb_err < 1e-5, "scale_bias error %.3g", sb_err);
    moe8_st_free(s);
    moe8_st_free(q);
    moe8_model *m = test_load_model(out);
    moe8_layer_info li;
    CHECK(moe8_model_layer_info(m, 1, &li) == 0 && li.experts == MOE8_QUANT_W4A8_DYNAMIC &&
          li.experts_down == MOE8_QUANT_W4A8_DYNAMIC && li.qkv == MOE8_QUANT_FLOAT);
    moe8_model_free(m);
    FMT(cmd, "%s/float", base);
    run_model(src, lf, gf);
    run_model(out, l4, g4);
    printf("W4A8 experts vs float logits: cosine %.5f, greedy %d %d %d %d %d vs %d %d %d %d %d\n",
           test_cosine(lf, l4, V), g4[0], g4[1], g4[2], g4[3], g4[4], gf[0], gf[1], gf[2], gf[3], gf[4]);
    CHECKF(test_cosine(lf, l4, V) >= 0.999, "W4A8 vs float logits cosine %.5f", test_cosine(lf, l4, V));
    /* with --down-proj float: refused */
    FMT(cmd, "'%s' quantize -i '%s' -o '%s/w4f' --experts w4a8 --down-proj float 2>/dev/null",
        MOE8_CLI, src, base);
    CHECK(test_run(cmd) == 1);
}

/* Bad inputs: clear message, exit status 1, nothing written. */
static void test_cli_errors(const char *base, const char *src) {
    char cmd[16384], log[4200], dir[4096];
    FMT(log, "%s/err.log", base);
#define QZ(in, out) FMT(cmd, "'%s' quantize -i '%s' -o '%s' 2>'%s' >/dev/null", MOE8_CLI, in, out, log)
    FMT(dir, "%s/nope", base);
    QZ(dir, "/tmp/moe8-never-written");
    CHECK(test_run(cmd) == 1 && test_file_contains(log, "does not exist"));
    QZ(src, src);
    CHECK(test_run(cmd) == 1 && test_file_contains(log, "is the input"));
    FMT(dir, "%s/sub", src);
    QZ(src, dir);
    CHECK(test_run(cmd) == 1 && test_file_contains(log, "inside the input"));
    CHECK(access(dir, F_OK) != 0);
    FMT(dir, "%s/notok", base);
    FMT(cmd, "cp -r '%s' '%s' && rm '%s/tokenizer.json'", src, dir, dir);
    CHECK(test_run(cmd) == 0);
    QZ(dir, "/tmp/moe8-never-written");
    CHECK(test_run(cmd) == 1 && test_file_contains(log, "tokenizer.json"));
    FMT(dir, "%s/badcfg", base);
    FMT(cmd, "cp -r '%s' '%s' && printf '{\"model_type\": ' > '%s/config.json'", src, dir, dir);
    CHECK(test_run(cmd) == 0);
    QZ(dir, "/tmp/moe8-never-written");
    CHECK(test_run(cmd) == 1 && test_file_contains(log, "config.json"));
    CHECK(access("/tmp/moe8-never-written", F_OK) != 0);
    FMT(cmd, "'%s' quantize -i '%s' 2>'%s'", MOE8_CLI, src, log);
    CHECK(test_run(cmd) == 2);
    FMT(cmd, "'%s' quantize -i '%s' -o x --deq-dtype float16 2>'%s'", MOE8_CLI, src, log);
    CHECK(test_run(cmd) == 2 && test_file_contains(log, "float16"));
    {
        static const char *bad_t[] = {"100000", "99999999999", "4x", "0", "-2", "", " 3", "4097"};
        for (size_t i = 0; i < sizeof bad_t / sizeof bad_t[0]; i++) {
            char want[64];
            FMT(cmd, "'%s' quantize -i '%s' -o '%s/t_out' -t '%s' 2>'%s'", MOE8_CLI, src, base,
                bad_t[i], log);
            FMT(want, "-t wants an integer in 1..4096, got '%s'", bad_t[i]);
            CHECKF(test_run(cmd) == 2 && test_file_contains(log, want), "-t '%s'", bad_t[i]);
        }
        FMT(dir, "%s/t_out", base);
        CHECK(access(dir, F_OK) != 0);
    }
    /* calibration text: only a regular file of at most 64 MiB, refused before anything is
     * read: a folder, a FIFO without a writer (used to block forever: run under timeout),
     * /dev/zero (used to read until memory ran out), a sparse file of 64 MiB + 1, a
     * missing file */
    FMT(cmd, "'%s' quantize -i '%s' -o '%s/c_out' --calib '%s' 2>'%s'", MOE8_CLI, src, base, base,
        log);
    CHECK(test_run(cmd) == 1 && test_file_contains(log, "--calib: '") &&
          test_file_contains(log, "' is not a regular file (a directory)") &&
          test_file_contains(log, base));
    FMT(dir, "%s/calib.fifo", base);
    unlink(dir);
    CHECK(mkfifo(dir, 0600) == 0);
    FMT(cmd, "timeout 60 '%s' quantize -i '%s' -o '%s/c_out' --calib '%s' 2>'%s'", MOE8_CLI, src,
        base, dir, log);
    CHECK(test_run(cmd) == 1 && test_file_contains(log, "calib.fifo' is not a regular file (a fifo)"));
    unlink(dir);
    FMT(cmd, "timeout 60 '%s' quantize -i '%s' -o '%s/c_out' --calib /dev/zero 2>'%s'", MOE8_CLI,
        src, base, log);
    CHECK(test_run(cmd) == 1 &&
          test_file_contains(log, "--calib: '/dev/zero' is not a regular file (a character device)"));
    FMT(dir, "%s/big_calib.txt", base);
    test_write_file(dir, "", 0);
    CHECK(truncate(dir, (64 << 20) + 1) == 0);
    FMT(cmd, "'%s' quantize -i '%s' -o '%s/c_out' --calib '%s' 2>'%s'", MOE8_CLI, src, base, dir,
        log);
    CHECK(test_run(cmd) == 1 && test_file_contains(log, "big_calib.txt' is 67108865 bytes, more "
                                                        "than the 67108864 allowed"));
    unlink(dir);
    FMT(cmd, "'%s' quantize -i '%s' -o '%s/c_out' --calib '%s/missing.txt' 2>'%s'", MOE8_CLI, src,
        base, base, log);
    CHECK(test_run(cmd) == 1 && test_file_contains(log, "missing.txt': No such file or directory"));
    FMT(dir, "%s/c_out", base);
    CHECK(access(dir, F_OK) != 0);
#undef QZ
}

/* A copy of src in base/name with the bf16 weight `tensor`[row][col] set to
 * `bits` (inf 0x7f80, nan 0x7fc0). */
static const char *patched_copy(const char *base, const char *src, const char *name,
                                const char *tensor, int64_t row, int64_t col, uint16_t bits) {
    static char dir[4096];
    char cmd[12288], path[4200];
    moe8_st *st = NULL;
    const moe8_tensor *t;
    int64_t off = -1;
    FILE *f;
    FMT(dir, "%s/%s", base, name);
    FMT(cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, src, dir);
    CHECK(test_run(cmd) == 0);
    CHECK(moe8_st_open(dir, &st, NULL) == MOE8_OK);
    t = st ? moe8_st_find(st, tensor) : NULL;
    CHECKF(t && t->dtype == MOE8_DT_BF16 && t->n_dims == 2, "%s", tensor);
    if (t) off = t->file_offset + (row * t->shape[1] + col) * 2;
    moe8_st_free(st);
    FMT(path, "%s/model.safetensors", dir);
    f = fopen(path, "r+b");
    CHECK(f && off > 0 && fseek(f, (long)off, SEEK_SET) == 0 && fwrite(&bits, 2, 1, f) == 1);
    if (f) fclose(f);
    return dir;
}

/* Non-finite weights: refused (MOE8_ERR_FORMAT) naming the tensor and row,
 * or, seen through calibration, the layer and site; nothing written. */
static void test_nonfinite(const char *base, const char *src) {
    moe8_quantize_params p = moe8_quantize_params_default();
    char out[4096];
    moe8_error e;
    const char *d;
    FMT(out, "%s/nonfinite_out", base);
    p.calib_text = calib;
    p.calib_len = strlen(calib);
    /* layer 1 (the last) is MoE: its experts' output reaches no calibrated site */
    d = patched_copy(base, src, "inf_expert", "model.layers.1.mlp.experts.3.up_proj.weight", 5, 7,
                     0x7f80);
    CHECKF(moe8_quantize(d, out, &p, NULL, &e) == MOE8_ERR_FORMAT &&
               strstr(e.message, "tensor 'model.layers.1.mlp.experts.3.up_proj.weight': row 5, "
                                 "column 7 is inf: cannot quantize a non-finite weight") &&
               strstr(e.message, "model.safetensors"),
           "%s", e.message);
    CHECK(access(out, F_OK) != 0);
    p.linear_float = 1;
    d = patched_copy(base, src, "nan_expert", "model.layers.1.mlp.experts.0.down_proj.weight", 200,
                     0, 0x7fc0);
    CHECKF(moe8_quantize(d, out, &p, NULL, &e) == MOE8_ERR_FORMAT &&
               strstr(e.message, "experts.0.down_proj.weight': row 200, column 0 is nan"),
           "%s", e.message);
    CHECK(access(out, F_OK) != 0);
    /* an inf in layer 0's q_proj: its attention output is not finite */
    p.linear_float = 0;
    d = patched_copy(base, src, "inf_q", "model.layers.0.self_attn.q_proj.weight", 0, 0, 0x7f80);
    CHECKF(moe8_quantize(d, out, &p, NULL, &e) == MOE8_ERR_FORMAT &&
               strstr(e.message, "calibration: layer 0, o_proj input: ") &&
               strstr(e.message, "activations are not finite"),
           "%s", e.message);
    CHECK(access(out, F_OK) != 0);
    /* with float linears that weight is copied as it is (FLOAT), not quantized */
    p.linear_float = 1;
    CHECKF(moe8_quantize(d, out, &p, NULL, &e) == MOE8_OK, "%s", e.message);
    FMT(out, "rm -rf '%s/nonfinite_out' '%s/inf_expert' '%s/nan_expert' '%s/inf_q'", base, base,
        base, base);
    CHECK(test_run(out) == 0);
}

/* n_threads outside [0, 4096]: MOE8_ERR_INVALID_ARG before anything is read. */
static void test_threads(const char *base, const char *src) {
    moe8_quantize_params p = moe8_quantize_params_default();
    char out[4096];
    moe8_error e;
    static const int bad[] = {-1, 4097, 100000, INT32_MAX};
    FMT(out, "%s/threads_out", base);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p.n_threads = bad[i];
        CHECKF(moe8_quantize(src, out, &p, NULL, &e) == MOE8_ERR_INVALID_ARG &&
                   strstr(e.message, "n_threads") && strstr(e.message, "[0, 4096]"),
               "%d: %s", bad[i], e.message);
        CHECK(access(out, F_OK) != 0);
    }
}

/* No temporary folders left next to the outputs. */
static void check_no_leftovers(const char *base) {
    DIR *d = opendir(base);
    struct dirent *e;
    int left = 0;
    while (d && (e = readdir(d)))
        if (e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) left++;
    if (d) closedir(d);
    CHECKF(left == 0, "%d temporary entries left", left);
}

int main(void) {
    const char *base = test_tmpdir("quantize");
    moe8_make_model_params mp = moe8_make_model_params_default();
    char src[4096];
    uint64_t before;
    moe8_error e;
    FMT(src, "%s/src", base);
    mp.n_layers = 2;
    mp.vocab_size = V;
    mp.seed = 3;
    mp.tokenizer_dir = TOK;
    if (moe8_make_model(&mp, src, &e) != MOE8_OK) {
        fprintf(stderr, "make-model: %s\n", e.message);
        return 2;
    }
    before = hash_folder(src);
    test_library(base, src);
    test_lm_head(base, src);
    test_w4a8(base, src);
    test_cli_shards(base, src);
    test_cli_errors(base, src);
    test_nonfinite(base, src);
    test_threads(base, src);
    CHECK(hash_folder(src) == before);
    check_no_leftovers(base);
    return test_summary();
}
