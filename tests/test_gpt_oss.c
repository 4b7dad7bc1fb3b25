/*
 * test_gpt_oss.c — the gpt_oss family (src/arch/gpt_oss.c) end to end:
 *
 *   config     gpt-oss-20b's config.json parsed: layer_types, the window,
 *              YaRN (truncate false) against transformers' formulas in double
 *   forward    make-model's tiny preset (MXFP4 experts as released) against
 *              the double-precision reference of gptoss_ref.h over 140
 *              positions: sinks on every layer, windows on the sliding ones,
 *              positions 126 / 127 / 128 (127, 128 and 129 positions seen:
 *              the window's edges); prefilled, and prefilled then decoded
 *              across the boundary; the reference without windows differs
 *   prefix     a prompt of 150 positions, then one sharing its first 144 (nine
 *              blocks, past the window) through the scheduler with the prefix
 *              cache: 144 positions reused, the last six prompt positions'
 *              logits against the reference of the second prompt
 *   forms      the bf16 stacked form of the same seed gives the same logits
 *              (the MXFP4 folder with float experts: its exact values)
 *   W8A8       the MXFP4 folder as downloaded (experts converted to W8A8_DYNAMIC
 *              when packed) gives the logits of moe8 quantize --linear float
 *              of it, bit for bit; moe8 quantize of the MXFP4 folder (experts W8A8_DYNAMIC per
 *              expert with their biases, attention W8A8 static with q/k/v/o
 *              biases folded; and with linear_float) against the float model
 *   corrupt    an MXFP4 scales tensor of the wrong shape, and a scale of 255,
 *              refused naming the tensor
 *   cache      the packed cache of an MXFP4 folder: the second load decodes
 *              nothing (the log says so), its logits bit-identical to the
 *              first's and to a load without the cache; a rewritten MXFP4
 *              file invalidates it (decoded again, new logits)
 */
#include "test.h"

#include "arch/arch.h"
#include "gptoss_ref.h"

#define V 1024
#define NT 140
#define TOK MOE8_TOKENIZER_DIR

static const char cfg20b[] =
    "{\"architectures\":[\"GptOssForCausalLM\"],\"attention_bias\":true,\"attention_dropout\":0.0,"
    "\"eos_token_id\":200002,\"experts_per_token\":4,\"head_dim\":64,\"hidden_act\":\"silu\","
    "\"hidden_size\":2880,\"initial_context_length\":4096,\"initializer_range\":0.02,"
    "\"intermediate_size\":2880,\"layer_types\":[\"sliding_attention\",\"full_attention\","
    "\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\","
    "\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\","
    "\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\","
    "\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\","
    "\"sliding_attention\",\"full_attention\",\"sliding_attention\",\"full_attention\","
    "\"sliding_attention\",\"full_attention\"],\"max_position_embeddings\":131072,"
    "\"model_type\":\"gpt_oss\",\"num_attention_heads\":64,\"num_experts_per_tok\":4,"
    "\"num_hidden_layers\":24,\"num_key_value_heads\":8,\"num_local_experts\":32,"
    "\"output_router_logits\":false,\"pad_token_id\":199999,\"quantization_config\":"
    "{\"modules_to_not_convert\":[\"model.layers.*.self_attn\",\"model.layers.*.mlp.router\","
    "\"model.embed_tokens\",\"lm_head\"],\"quant_method\":\"mxfp4\"},\"rms_norm_eps\":1e-05,"
    "\"rope_scaling\":{\"beta_fast\":32.0,\"beta_slow\":1.0,\"factor\":32.0,"
    "\"original_max_position_embeddings\":4096,\"rope_type\":\"yarn\",\"truncate\":false},"
    "\"rope_theta\":150000,\"router_aux_loss_coef\":0.9,\"sliding_window\":128,"
    "\"swiglu_limit\":7.0,\"tie_word_embeddings\":false,\"transformers_version\":\"4.55.0.dev0\","
    "\"use_cache\":true,\"vocab_size\":201088}";

static void test_config(void) {
    moe8_config c;
    moe8_error e;
    CHECKF(moe8_config_parse(cfg20b, strlen(cfg20b), "config.json", &c, &e) == MOE8_OK, "%s",
           e.message);
    CHECK(c.arch == MOE8_ARCH_GPT_OSS && c.hidden_size == 2880 && c.moe_intermediate_size == 2880);
    CHECK(c.num_experts == 32 && c.num_experts_per_tok == 4 && c.num_hidden_layers == 24);
    CHECK(moe8_config_get_int(&c, "sliding_window", NULL) == 128);
    CHECK(moe8_config_get_num(&c, "swiglu_limit", NULL) == 7.0);
    CHECK(moe8_config_get_num(&c, "yarn_factor", NULL) == 32.0);
    CHECK(moe8_config_get_int(&c, "qkv_bias", NULL) == 1);
    CHECK(c.eos_token_ids[0] == 200002 && c.vocab_size == 201088);
    {   /* YaRN (truncate false) against transformers' formulas in double */
        double f[32], r[32], worst = 0;
        gref g = {0};
        g.D = 64, g.theta = 150000, g.yarn_factor = 32, g.beta_fast = 32, g.beta_slow = 1;
        g.orig = 4096;
        const double s = moe8_rope_freqs(&c, f), af = gref_yarn(&g, r);
        for (int i = 0; i < 32; i++) worst = fmax(worst, fabs(f[i] - r[i]) / r[i]);
        CHECKF(worst <= 1e-14 && fabs(s - af) <= 1e-15, "yarn: rel %.3g, scale %.17g vs %.17g",
               worst, s, af);
        CHECK(moe8_attn_scale(&c) == (float)(1.0 / 8.0));
        CHECK(moe8_arch_is_sliding_layer(&c, 0) && !moe8_arch_is_sliding_layer(&c, 1) &&
              moe8_arch_is_sliding_layer(&c, 22) && !moe8_arch_is_sliding_layer(&c, 23));
    }
    /* a layer_types entry of another family is refused, naming it */
    char bad[sizeof cfg20b + 16];
    snprintf(bad, sizeof bad, "%s", cfg20b);
    char *p = strstr(bad, "\"full_attention\"");
    memcpy(p, "\"full_attentiox\"", 16);
    CHECK(moe8_config_parse(bad, strlen(bad), "config.json", &c, &e) == MOE8_ERR_FORMAT &&
          strstr(e.message, "layer_types[1]"));
}

/* Logits of every position of ids[NT]: the first n_pre in one batch, the rest one by one. */
static int g_float_experts; /* logits_of's contexts: MXFP4 experts as their exact fp32 values */

static void logits_of(moe8_model *m, const int32_t *ids, int n_pre, float *out) {
    moe8_context_params cp = moe8_context_params_default();
    moe8_context *c = NULL;
    moe8_error e;
    int32_t pos[NT], seq[NT] = {0};
    int8_t want[NT];
    cp.kv_type = MOE8_DT_F32;
    cp.n_ctx = 256;
    cp.n_batch = NT;
    cp.n_outputs = NT;
    cp.n_threads = 2;
    cp.float_experts = g_float_experts;
    CHECKF(moe8_context_create(m, &cp, &c, &e) == MOE8_OK, "context: %s", e.message);
    if (!c) exit(2);
    for (int i = 0; i < NT; i++) pos[i] = i, want[i] = 1;
    moe8_batch b = {n_pre, ids, pos, seq, want};
    CHECKF(moe8_decode(c, &b, &e) == MOE8_OK, "decode: %s", e.message);
    for (int i = 0; i < n_pre; i++) memcpy(out + (size_t)i * V, moe8_context_logits(c, i), sizeof(float) * V);
    for (int i = n_pre; i < NT; i++) {
        moe8_batch b1 = {1, ids + i, pos + i, seq, want};
        CHECKF(moe8_decode(c, &b1, &e) == MOE8_OK, "decode %d: %s", i, e.message);
        memcpy(out + (size_t)i * V, moe8_context_logits(c, 0), sizeof(float) * V);
    }
    moe8_context_free(c);
}

static double rel(const float *a, const double *b, int n) {
    double d = 0, m = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs(a[i] - b[i])), m = fmax(m, fabs(b[i]));
    return d / m;
}

static void make(const char *dir, int float_experts) {
    test_make_tiny(dir, MOE8_ARCH_GPT_OSS, V, 11, 0, float_experts);
}

static void test_forward(const char *mx, const char *bf, gref *gout) {
    int32_t ids[NT];
    float *got = malloc(sizeof(float) * NT * V), *got2 = malloc(sizeof(float) * NT * V);
    double *want = malloc(sizeof(double) * NT * V), *nowin = malloc(sizeof(double) * NT * V);
    moe8_error e;
    for (int i = 0; i < NT; i++) ids[i] = (i * 37 + 11) % V;
    moe8_model *m = test_load_model_n(mx, 2);
    const moe8_config *c = moe8_model_config(m);
    gref g = {V, (int)c->hidden_size, (int)c->num_attention_heads, (int)c->num_key_value_heads,
              (int)c->head_dim, (int)c->num_experts, (int)c->num_experts_per_tok,
              (int)c->moe_intermediate_size, (int)c->num_hidden_layers, 128, c->rms_norm_eps,
              c->rope_theta, 32, 32, 1, 4096, moe8_config_get_num(c, "swiglu_limit", NULL),
              {1, 0, 1, 0}, 0, NULL};
    CHECKF(moe8_st_open(mx, &g.st, &e) == MOE8_OK, "%s", e.message);
    gref_forward(&g, ids, NT, want);
    g.no_window = 1;
    gref_forward(&g, ids, NT, nowin);
    moe8_st_free(g.st);
    *gout = g;
    g_float_experts = 1;
    logits_of(m, ids, NT, got);
    double worst = 0, edge[3];
    for (int t = 0; t < NT; t++) worst = fmax(worst, rel(got + t * V, want + t * V, V));
    for (int i = 0; i < 3; i++) edge[i] = rel(got + (126 + i) * V, want + (126 + i) * V, V);
    printf("gpt_oss tiny MXFP4, prefill %d: worst rel err %.3g; positions 126/127/128 (127, 128, "
           "129 seen) %.3g %.3g %.3g\n", NT, worst, edge[0], edge[1], edge[2]);
    CHECKF(worst <= 1e-4, "prefill vs double reference: rel err %.3g", worst);
    /* the window matters past 128 positions only */
    CHECKF(rel(got + 127 * V, nowin + 127 * V, V) <= 1e-4, "window shows before its edge");
    CHECKF(rel(got + 139 * V, nowin + 139 * V, V) > 1e-3, "window does not matter at 140: %.3g",
           rel(got + 139 * V, nowin + 139 * V, V));
    logits_of(m, ids, 100, got2); /* decode steps across the window's edge */
    worst = 0;
    for (int t = 0; t < NT; t++) worst = fmax(worst, rel(got2 + t * V, want + t * V, V));
    printf("gpt_oss tiny MXFP4, prefill 100 + 40 decode steps: worst rel err %.3g\n", worst);
    CHECKF(worst <= 1e-4, "decode vs double reference: rel err %.3g", worst);
    moe8_model_free(m);
    m = test_load_model_n(bf, 2); /* the bf16 stacked form of the same seed: the same model */
    logits_of(m, ids, NT, got2);
    worst = 0;
    for (int t = 0; t < NT * V; t++) worst = fmax(worst, fabs(got[t] - got2[t]));
    printf("gpt_oss tiny: bf16 stacked form vs MXFP4 (fp32 experts): max |diff| %.3g\n", worst);
    CHECKF(worst <= 1e-5, "bf16 stacked form differs from MXFP4: %.3g", worst);
    moe8_model_free(m);
    g_float_experts = 0;
    free(got), free(got2), free(want), free(nowin);
}

/* A copy of folder `src`'s model.safetensors into `dst` (with its JSON files)
 * where tensor `name` gets shape d[n] (data truncated) or its byte 0 set to `byte`. */
static void corrupt(const char *src, const char *dst, const char *name, int n, const int64_t *d,
                    int byte) {
    char path[4096], cmd[8300];
    moe8_st *st = NULL;
    moe8_st_writer *w = NULL;
    moe8_error e;
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cp '%s'/*.json '%s'/", dst, dst, src,
             dst);
    CHECK(system(cmd) == 0);
    CHECKF(moe8_st_open(src, &st, &e) == MOE8_OK, "%s", e.message);
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    CHECKF(moe8_st_writer_open(path, &w, &e) == MOE8_OK, "%s", e.message);
    for (size_t i = 0; i < moe8_st_count(st); i++) {
        const moe8_tensor *t = moe8_st_get(st, i);
        const int hit = !strcmp(t->name, name) && n > 0;
        CHECK(moe8_st_writer_declare(w, t->name, t->dtype, hit ? n : t->n_dims, hit ? d : t->shape,
                                     &e) == MOE8_OK);
    }
    for (size_t i = 0; i < moe8_st_count(st); i++) {
        const moe8_tensor *t = moe8_st_get(st, i);
        size_t nb = t->n_bytes;
        unsigned char *buf = malloc(nb ? nb : 1);
        memcpy(buf, t->data, nb);
        if (!strcmp(t->name, name) && n > 0) {
            nb = 1;
            for (int k = 0; k < n; k++) nb *= (size_t)d[k];
        }
        if (!strcmp(t->name, name) && byte >= 0) buf[0] = (unsigned char)byte;
        CHECKF(moe8_st_writer_write(w, t->name, buf, nb, &e) == MOE8_OK, "%s", e.message);
        free(buf);
    }
    CHECK(moe8_st_writer_finish(w, &e) == MOE8_OK);
    moe8_st_writer_free(w);
    moe8_st_free(st);
}

/* moe8 inspect names the kinds. */
static void test_inspect(const char *mx) {
    char cmd[8400], out[8192];
    snprintf(cmd, sizeof cmd, "'%s' inspect -m '%s' 2>&1", MOE8_CLI, mx);
    FILE *p = popen(cmd, "r");
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = 0;
    CHECK(p && pclose(p) == 0);
    CHECKF(strstr(out, "o bias, attention sinks, sliding window 128") &&
           strstr(out, "rope_scaling: yarn, factor 32") && strstr(out, "router bias") &&
           strstr(out, "clamped SwiGLU (limit 7, alpha 1.702)") &&
           strstr(out, "experts W8A8_DYNAMIC"), "inspect: %s", out);
}

static void test_corrupt(const char *mx) {
    static const char *sc = "model.layers.1.mlp.experts.down_proj_scales";
    const moe8_config *c;
    moe8_model_params mp = moe8_model_params_default();
    moe8_model *m = NULL;
    moe8_error e;
    char dst[4096];
    m = test_load_model_n(mx, 2);
    c = moe8_model_config(m);
    const int64_t d[3] = {c->num_experts, c->hidden_size, c->moe_intermediate_size / 32 - 1};
    moe8_model_free(m);
    snprintf(dst, sizeof dst, "%s", test_tmpdir("gptoss_bad_shape"));
    corrupt(mx, dst, sc, 3, d, -1);
    CHECK(moe8_model_load(dst, &mp, &m, &e) == MOE8_ERR_FORMAT && strstr(e.message, sc));
    printf("wrong scales shape: %s\n", e.message);
    snprintf(dst, sizeof dst, "%s", test_tmpdir("gptoss_bad_scale"));
    corrupt(mx, dst, sc, 0, NULL, 255);
    CHECK(moe8_model_load(dst, &mp, &m, &e) == MOE8_ERR_FORMAT && strstr(e.message, sc) &&
          strstr(e.message, "255"));
    printf("scale 255: %s\n", e.message);
}

/* Run one request to its end; the logits of its last n_pl prompt positions into pl. */
static int32_t sched_run(moe8_sched *s, const int32_t *prompt, int n, int n_pl, float *pl) {
    moe8_request rq = moe8_request_default();
    const moe8_event *ev;
    int32_t n_ev, cached = -1;
    int64_t id;
    moe8_error e;
    rq.prompt = prompt;
    rq.n_prompt = n;
    rq.max_tokens = 0;
    rq.n_prompt_logits = n_pl;
    CHECKF(moe8_sched_add(s, &rq, &id, &e) == MOE8_OK, "add: %s", e.message);
    for (int step = 0; step < 1000 && cached < 0; step++) {
        CHECKF(moe8_sched_step(s, &ev, &n_ev, &e) == MOE8_OK, "step: %s", e.message);
        for (int i = 0; i < n_ev; i++) {
            if (ev[i].type == MOE8_EVENT_PROMPT_LOGITS && ev[i].logits && ev[i].pos >= n - n_pl)
                memcpy(pl + (size_t)(ev[i].pos - (n - n_pl)) * V, ev[i].logits, sizeof(float) * V);
            if (ev[i].type == MOE8_EVENT_FINISH) cached = ev[i].n_cached;
        }
    }
    return cached;
}

static void test_prefix_cache(const char *mx, gref *g) {
    int32_t a[150], b[150];
    float *pl = malloc(sizeof(float) * 6 * V);
    double *want = malloc(sizeof(double) * 150 * V);
    moe8_context_params cp = moe8_context_params_default();
    moe8_sched_params sp = moe8_sched_params_default();
    moe8_context *c = NULL;
    moe8_sched *s = NULL;
    moe8_error e;
    for (int i = 0; i < 150; i++) a[i] = b[i] = (i * 37 + 11) % V;
    for (int i = 144; i < 150; i++) b[i] = (i * 53 + 5) % V; /* its own tail */
    moe8_model *m = test_load_model_n(mx, 2);
    cp.kv_type = MOE8_DT_F32;
    cp.n_ctx = 256;
    cp.n_threads = 2;
    cp.prefix_cache = 1;
    cp.float_experts = 1;
    CHECKF(moe8_context_create(m, &cp, &c, &e) == MOE8_OK, "context: %s", e.message);
    CHECKF(moe8_sched_create(c, &sp, &s, &e) == MOE8_OK, "sched: %s", e.message);
    if (!c || !s) exit(2);
    CHECK(sched_run(s, a, 150, 1, pl) == 0);
    const int32_t cached = sched_run(s, b, 150, 6, pl);
    g->no_window = 0;
    CHECKF(moe8_st_open(mx, &g->st, &e) == MOE8_OK, "%s", e.message);
    gref_forward(g, b, 150, want);
    moe8_st_free(g->st);
    double worst = 0;
    for (int t = 0; t < 6; t++) worst = fmax(worst, rel(pl + t * V, want + (144 + t) * V, V));
    printf("gpt_oss prefix cache: %d of 150 positions reused; positions 144..149 rel err %.3g\n",
           cached, worst);
    CHECKF(cached == 144, "prefix cache reused %d positions (want 144)", cached);
    CHECKF(worst <= 1e-4, "after the prefix cache: rel err %.3g", worst);
    moe8_sched_free(s);
    moe8_context_free(c);
    moe8_model_free(m);
    free(pl), free(want);
}

static void test_quantize(const char *mx) {
    static const char text[] =
        "It was a bright cold day in April, and the clocks were striking thirteen. The quick "
        "brown fox jumps over the lazy dog; 42 apples cost $3.50 at the market.\n";
    int32_t ids[NT];
    float *lf = malloc(sizeof(float) * NT * V), *lq = malloc(sizeof(float) * NT * V);
    moe8_quantize_params qp = moe8_quantize_params_default();
    moe8_error e;
    char q[4096];
    float *la = malloc(sizeof(float) * NT * V);
    for (int i = 0; i < NT; i++) ids[i] = (i * 37 + 11) % V;
    moe8_model *m = test_load_model_n(mx, 2);
    g_float_experts = 1;
    logits_of(m, ids, NT, lf);
    g_float_experts = 0; /* as downloaded: W8A8_DYNAMIC experts converted at load */
    logits_of(m, ids, 100, la);
    moe8_model_free(m);
    qp.force = 1;
    qp.n_threads = 2;
    qp.calib_text = text;
    qp.calib_len = strlen(text);
    for (int lin_float = 0; lin_float < 2; lin_float++) {
        snprintf(q, sizeof q, "%s", test_tmpdir(lin_float ? "gptoss_w8a8_experts" : "gptoss_w8a8"));
        qp.linear_float = lin_float;
        CHECKF(moe8_quantize(mx, q, &qp, NULL, &e) == MOE8_OK, "quantize: %s", e.message);
        m = test_load_model_n(q, 2);
        moe8_layer_info li;
        moe8_model_layer_info(m, 1, &li);
        CHECK(li.experts == MOE8_QUANT_W8A8_DYNAMIC &&
              li.qkv == (lin_float ? MOE8_QUANT_FLOAT : MOE8_QUANT_W8A8));
        logits_of(m, ids, 100, lq);
        moe8_model_free(m);
        double worst = 1;
        for (int t = 0; t < NT; t++) worst = fmin(worst, test_cosine(lq + t * V, lf + t * V, V));
        printf("gpt_oss tiny W8A8%s from MXFP4 vs the MXFP4 model: worst cosine %.8f\n",
               lin_float ? " (experts only)" : "", worst);
        CHECKF(worst >= (lin_float ? 0.999 : 0.99), "W8A8 vs float: cosine %.6f", worst);
        if (lin_float) /* the same int8 experts as the MXFP4 folder converted at load */
            CHECKF(!memcmp(la, lq, sizeof(float) * NT * V), "MXFP4 converted at load differs "
                   "from moe8 quantize --linear float");
    }
    free(lf), free(lq), free(la);
}

/* The log lines of a load: how many say the MXFP4 experts were decoded, how
 * many that their conversion came from the packed cache. */
static int g_decoded, g_from_cache;
static void count_log(moe8_log_level level, const char *msg, void *user) {
    (void)level, (void)user;
    g_decoded += strstr(msg, "gpt_oss MXFP4 experts decoded") != NULL;
    g_from_cache += strstr(msg, "conversion read from the packed cache (nothing decoded)") != NULL;
}

/* W8A8 logits of dir (its packed cache used, or none), with the load's log counted. */
static void cached_logits(const char *dir, int no_cache, const int32_t *ids, float *out) {
    moe8_model_params mp = moe8_model_params_default();
    moe8_model *m = NULL;
    moe8_error e;
    mp.n_threads = 2;
    mp.no_cache = no_cache;
    g_decoded = g_from_cache = 0;
    moe8_set_log(count_log, NULL);
    CHECKF(moe8_model_load(dir, &mp, &m, &e) == MOE8_OK, "load %s: %s", dir, e.message);
    if (!m) exit(2);
    g_float_experts = 0;
    logits_of(m, ids, 100, out);
    moe8_model_free(m);
    moe8_set_log(NULL, NULL);
}

/* The MXFP4 folder's packed cache keeps the converted experts with their row
 * scales: the first load decodes (into the cache, then reads it back), the
 * second decodes nothing, both bit-identical to a load without the cache; a
 * rewritten MXFP4 file (its fingerprint: mtime) is decoded again. */
static void test_mxfp4_cache(void) {
    static const char *blk = "model.layers.0.mlp.experts.gate_up_proj_blocks";
    int32_t ids[NT];
    float *l0 = malloc(sizeof(float) * NT * V), *l1 = malloc(sizeof(float) * NT * V),
          *l2 = malloc(sizeof(float) * NT * V);
    char dir[4096], alt[4096], cmd[8400];
    snprintf(dir, sizeof dir, "%s", test_tmpdir("gptoss_cache"));
    snprintf(alt, sizeof alt, "%s", test_tmpdir("gptoss_cache_changed"));
    make(dir, 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s/.moe8-cache'", dir);
    CHECK(system(cmd) == 0);
    for (int i = 0; i < NT; i++) ids[i] = (i * 53 + 7) % V;
    cached_logits(dir, 1, ids, l0);
    CHECKF(g_decoded == 1 && g_from_cache == 0, "no cache: %d decoded, %d from the cache", g_decoded, g_from_cache);
    cached_logits(dir, 0, ids, l1);
    CHECKF(g_decoded == 1 && g_from_cache == 1, "first load: %d decoded, %d from the cache", g_decoded,
           g_from_cache);
    cached_logits(dir, 0, ids, l2);
    CHECKF(g_decoded == 0 && g_from_cache == 1, "second load: %d decoded, %d from the cache", g_decoded,
           g_from_cache);
    CHECK(!memcmp(l0, l1, sizeof(float) * NT * V) && !memcmp(l1, l2, sizeof(float) * NT * V));
    /* one byte of layer 0's experts changed, the file rewritten */
    corrupt(dir, alt, blk, 0, NULL, 0x77);
    snprintf(cmd, sizeof cmd, "mv '%s/model.safetensors' '%s/model.safetensors'", alt, dir);
    CHECK(system(cmd) == 0);
    cached_logits(dir, 0, ids, l1);
    CHECKF(g_decoded == 1, "changed file: %d decoded, %d from the cache", g_decoded, g_from_cache);
    CHECK(memcmp(l1, l2, sizeof(float) * NT * V) != 0);
    cached_logits(dir, 1, ids, l0);
    CHECK(!memcmp(l0, l1, sizeof(float) * NT * V));
    printf("gpt_oss MXFP4 packed cache: second load decoded nothing, logits bit-identical; a changed "
           "file decoded again\n");
    free(l0), free(l1), free(l2);
}

int main(void) {
    char mx[4096], bf[4096];
    test_config();
    snprintf(mx, sizeof mx, "%s", test_tmpdir("gptoss_tiny_mxfp4"));
    snprintf(bf, sizeof bf, "%s", test_tmpdir("gptoss_tiny_bf16"));
    make(mx, 0);
    make(bf, 1);
    gref g;
    test_forward(mx, bf, &g);
    test_prefix_cache(mx, &g);
    test_quantize(mx);
    test_inspect(mx);
    test_corrupt(mx);
    test_mxfp4_cache();
    return test_summary();
}
