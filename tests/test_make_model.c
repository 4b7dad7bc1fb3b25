/*
 * test_make_model.c — moe8_make_model / `moe8 make-model`: config fields of
 * the presets (tiny, a3b-slice, slice: Mixtral-8x7B's shapes for mixtral),
 * determinism in the seed (bytes), weight statistics, routing far from
 * uniform (softmax entropy of the router on random hidden states, computed
 * here from the stored router tensor), greedy decoding not degenerate on the
 * tiny model, sharding, output-folder rules and CLI errors.
 */
#include "test.h"

#include "moe8.h"

#define TOK MOE8_TOKENIZER_DIR
/* snprintf into an array, aborting on truncation (test paths are short). */
#define FMT(buf, ...)                                                             \
    do {                                                                          \
        if (snprintf(buf, sizeof buf, __VA_ARGS__) >= (int)sizeof buf) abort();   \
    } while (0)

static moe8_status make(const char *dir, int64_t layers, uint64_t seed, int64_t vocab,
                        uint64_t shard, int force, moe8_error *e) {
    moe8_make_model_params p = moe8_make_model_params_default();
    p.n_layers = layers;
    p.seed = seed;
    p.vocab_size = vocab;
    p.tokenizer_dir = TOK;
    p.shard_bytes = shard;
    p.force = force;
    return moe8_make_model(&p, dir, e);
}

static int same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    unsigned char *x = test_slurp(a, &na), *y = test_slurp(b, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

/* ---- config of the presets ------------------------------------------------- */

static void test_configs(void) {
    moe8_make_model_params p = moe8_make_model_params_default();
    moe8_config c;
    moe8_error e;
    CHECK(moe8_make_model_config(&p, &c, &e) == MOE8_OK);
    CHECK(!strcmp(c.model_type, "qwen3_moe"));
    CHECK(c.hidden_size == 256 && c.num_attention_heads == 8 && c.num_key_value_heads == 2);
    CHECK(c.head_dim == 32 && c.num_experts == 16 && c.num_experts_per_tok == 4);
    CHECK(c.moe_intermediate_size == 128 && c.intermediate_size == 512);
    CHECK(c.num_hidden_layers == 4 && c.vocab_size == 151936 && !c.tie_word_embeddings);
    CHECK(c.n_mlp_only_layers == 1 && c.mlp_only_layers[0] == 0);
    CHECK(moe8_config_is_moe_layer(&c, 0) == 0 && moe8_config_is_moe_layer(&c, 1) == 1);
    p.preset = MOE8_PRESET_A3B_SLICE;
    CHECK(moe8_make_model_config(&p, &c, &e) == MOE8_OK);
    CHECK(c.hidden_size == 2048 && c.num_attention_heads == 32 && c.num_key_value_heads == 4);
    CHECK(c.head_dim == 128 && c.num_experts == 128 && c.num_experts_per_tok == 8);
    CHECK(c.moe_intermediate_size == 768 && c.vocab_size == 151936 && c.num_hidden_layers == 4);
    CHECK(c.rms_norm_eps == 1e-6 && c.rope_theta == 1e6 && !c.tie_word_embeddings);
    CHECK(c.bos_token_id == 151643 && c.n_eos_ids == 1 && c.eos_token_ids[0] == 151645);
    CHECK(c.norm_topk_prob == 1 && c.decoder_sparse_step == 1 && c.n_mlp_only_layers == 0);
    p.n_layers = 7;
    CHECK(moe8_make_model_config(&p, &c, &e) == MOE8_OK && c.num_hidden_layers == 7);
    p.n_layers = MOE8_MAX_LAYERS + 1;
    CHECKF(moe8_make_model_config(&p, &c, &e) == MOE8_ERR_INVALID_ARG && strstr(e.message, "layers"),
           "%s", e.message);
    p.n_layers = 0;
    p.dtype = MOE8_DT_F16;
    CHECKF(moe8_make_model_config(&p, &c, &e) == MOE8_ERR_INVALID_ARG && strstr(e.message, "F16"),
           "%s", e.message);
}

/* slice: the family's reference model. qwen3_moe's is a3b-slice; mixtral's
 * is Mixtral-8x7B-v0.1 (its config.json) with 2 layers by default. */
static void test_slice_configs(void) {
    moe8_make_model_params p = moe8_make_model_params_default();
    moe8_config c, a3b;
    moe8_error e;
    p.preset = MOE8_PRESET_A3B_SLICE;
    CHECK(moe8_make_model_config(&p, &a3b, &e) == MOE8_OK);
    p.preset = MOE8_PRESET_SLICE;
    CHECK(moe8_make_model_config(&p, &c, &e) == MOE8_OK);
    CHECK(!memcmp(&c, &a3b, sizeof c) && c.num_hidden_layers == 4);

    p.arch = MOE8_ARCH_MIXTRAL;
    CHECKF(moe8_make_model_config(&p, &c, &e) == MOE8_OK, "%s", e.message);
    CHECK(c.arch == MOE8_ARCH_MIXTRAL && !strcmp(c.model_type, "mixtral"));
    CHECK(c.hidden_size == 4096 && c.moe_intermediate_size == 14336 && c.intermediate_size == 0);
    CHECK(c.num_attention_heads == 32 && c.num_key_value_heads == 8 && c.head_dim == 128);
    CHECK(c.num_experts == 8 && c.num_experts_per_tok == 2 && c.norm_topk_prob);
    CHECK(c.vocab_size == 32000 && c.rope_theta == 1e6 && c.rms_norm_eps == 1e-5);
    CHECK(c.max_position_embeddings == 32768 && !c.tie_word_embeddings);
    CHECK(c.bos_token_id == 1 && c.n_eos_ids == 1 && c.eos_token_ids[0] == 2);
    CHECK(c.num_hidden_layers == 2 && c.n_mlp_only_layers == 0);
    CHECK(moe8_config_get_int(&c, "shared_expert_intermediate_size", NULL) == 0);
    for (int l = 0; l < 2; l++) CHECK(moe8_config_is_moe_layer(&c, l));
    p.n_layers = 5;
    CHECK(moe8_make_model_config(&p, &c, &e) == MOE8_OK && c.num_hidden_layers == 5 &&
          c.hidden_size == 4096);
    p.n_layers = 0;
    p.preset = MOE8_PRESET_TINY;   /* the tiny preset keeps its 4 layers */
    CHECK(moe8_make_model_config(&p, &c, &e) == MOE8_OK && c.num_hidden_layers == 4 &&
          c.hidden_size == 256 && c.head_dim == 32);
    p.preset = MOE8_PRESET_A3B_SLICE;
    CHECKF(moe8_make_model_config(&p, &c, &e) == MOE8_ERR_INVALID_ARG &&
           strstr(e.message, "mixtral has only the tiny and slice presets"), "%s", e.message);
    p.arch = MOE8_ARCH_QWEN2_MOE;
    p.preset = MOE8_PRESET_SLICE;
    CHECKF(moe8_make_model_config(&p, &c, &e) == MOE8_ERR_INVALID_ARG &&
           strstr(e.message, "qwen2_moe has only the tiny preset"), "%s", e.message);
    p.preset = (moe8_preset)3;
    CHECKF(moe8_make_model_config(&p, &c, &e) == MOE8_ERR_INVALID_ARG &&
           strstr(e.message, "unknown preset 3"), "%s", e.message);
}

/* ---- written folder -------------------------------------------------------- */

/* config.json on disk == moe8_make_model_config; weight statistics. */
static void test_folder(const char *dir) {
    moe8_make_model_params p = moe8_make_model_params_default();
    moe8_config want;
    moe8_model *m = test_load_model(dir);
    const moe8_config *c = moe8_model_config(m);
    moe8_st *st = NULL;
    char path[4096];
    p.n_layers = 2;
    moe8_make_model_config(&p, &want, NULL);
    CHECK(c->hidden_size == want.hidden_size && c->num_hidden_layers == 2);
    CHECK(c->vocab_size == 151936 && c->num_experts == 16 && c->head_dim == 32);
    CHECK(c->n_mlp_only_layers == 1 && c->rms_norm_eps == 1e-6 && c->rope_theta == 1e6);
    /* stop ids: config.json's 151645 + generation_config.json's 151643 */
    CHECK(c->n_eos_ids == 2 && c->eos_token_ids[0] == 151645 && c->eos_token_ids[1] == 151643);
    FMT(path, "%s/tokenizer.json", dir);
    CHECK(same_file(path, TOK "/tokenizer.json"));
    FMT(path, "%s/tokenizer_config.json", dir);
    CHECK(same_file(path, TOK "/tokenizer_config.json"));
    CHECK(moe8_st_open(dir, &st, NULL) == MOE8_OK);
    {
        const moe8_tensor *w = moe8_st_find(st, "model.layers.1.self_attn.q_proj.weight");
        const moe8_tensor *n = moe8_st_find(st, "model.layers.1.input_layernorm.weight");
        double s = 0, s2 = 0, ns = 0;
        CHECK(w && w->dtype == MOE8_DT_BF16 && w->shape[0] == 256 && w->shape[1] == 256);
        for (int64_t i = 0; w && i < w->n_elements; i++) {
            double v = moe8_bf16_to_f32(((const uint16_t *)w->data)[i]);
            s += v;
            s2 += v * v;
        }
        CHECK_NEAR(s / 65536, 0.0, 1e-3);
        CHECK_NEAR(sqrt(s2 / 65536), 0.02, 1e-3);
        for (int64_t i = 0; n && i < 256; i++) ns += moe8_bf16_to_f32(((const uint16_t *)n->data)[i]);
        CHECK_NEAR(ns / 256, 1.0, 0.02);
    }
    moe8_st_free(st);
    moe8_model_free(m);
}

/* Router softmax entropy on random unit-RMS hidden states, and the top-k
 * weights the MoE layer picks on them, well away from uniform. */
static void test_routing(const char *dir) {
    enum { T = 64, E = 16, H = 256 };
    moe8_model *m = test_load_model(dir);
    moe8_st *st = NULL;
    const moe8_tensor *g;
    test_rng r = {12345};
    static float h[T][H];
    double ent = 0, top1 = 0;
    CHECK(moe8_st_open(dir, &st, NULL) == MOE8_OK);
    g = moe8_st_find(st, "model.layers.1.mlp.gate.weight");
    CHECK(g && g->shape[0] == E && g->shape[1] == H);
    for (int t = 0; t < T; t++)
        for (int k = 0; k < H; k++) h[t][k] = (float)test_rng_normal(&r);
    for (int t = 0; g && t < T; t++) {
        double lg[E], mx = -1e30, z = 0;
        for (int e = 0; e < E; e++) {
            lg[e] = 0;
            for (int k = 0; k < H; k++)
                lg[e] += h[t][k] * moe8_bf16_to_f32(((const uint16_t *)g->data)[e * H + k]);
            mx = fmax(mx, lg[e]);
        }
        for (int e = 0; e < E; e++) z += exp(lg[e] - mx);
        for (int e = 0; e < E; e++) {
            double p = exp(lg[e] - mx) / z;
            ent -= p > 0 ? p * log(p) : 0;
        }
    }
    ent /= T;
    printf("router entropy %.3f (log E = %.3f)\n", ent, log((double)E));
    CHECKF(ent < 0.75 * log((double)E), "mean router entropy %.3f vs log(E) %.3f", ent, log((double)E));
    {
        moe8_moe_layer *L = NULL;
        moe8_moe_workspace *ws = NULL;
        static float out[T][H];
        const int32_t *ids;
        const float *w;
        int n;
        CHECK(moe8_moe_layer_from_model(m, 1, NULL, &L, NULL) == MOE8_OK);
        CHECK(moe8_moe_workspace_create(L, T, 1, &ws, NULL) == MOE8_OK);
        CHECK(moe8_moe_layer_forward(L, ws, &h[0][0], T, NULL, &out[0][0], NULL) == MOE8_OK);
        moe8_moe_workspace_routing(ws, &n, &ids, &w);
        for (int t = 0; t < n; t++) top1 += w[t * 4];
        top1 /= n;
        /* renormalized top-4: uniform routing would give 0.25 */
        CHECKF(top1 > 0.4, "mean top-1 weight %.3f", top1);
        moe8_moe_workspace_free(ws);
        moe8_moe_layer_free(L);
    }
    moe8_st_free(st);
    moe8_model_free(m);
}

/* 16 greedy tokens from "Hello, my name is" are not one token repeated. */
static void test_greedy(const char *dir) {
    moe8_model *m = test_load_model(dir);
    moe8_tokenizer *tok = NULL;
    moe8_context *c = NULL;
    moe8_sampler *s = NULL;
    moe8_context_params cp = moe8_context_params_default();
    int32_t ids[16], out[16], n_out = 0, distinct = 0;
    size_t n = 0;
    const char *prompt = "Hello, my name is";
    CHECK(moe8_tokenizer_load(dir, &tok, NULL) == MOE8_OK);
    CHECK(moe8_tokenize(tok, prompt, strlen(prompt), ids, 16, &n, NULL) == MOE8_OK);
    cp.n_ctx = 64;
    CHECK(moe8_context_create(m, &cp, &c, NULL) == MOE8_OK);
    CHECK(moe8_sampler_create(NULL, moe8_context_n_vocab(c), &s, NULL) == MOE8_OK);
    {
        const int32_t *pp = ids, np = (int32_t)n;
        moe8_generate_request r = {1, &pp, &np, 16, NULL, 0, NULL, NULL, out, &n_out, NULL};
        CHECK(moe8_generate(c, s, &r, NULL) == MOE8_OK);
    }
    CHECK(n_out == 16);
    for (int i = 0; i < n_out; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= out[j] == out[i];
        distinct += !seen;
    }
    CHECKF(distinct >= 3, "%d distinct tokens in 16 greedy steps", distinct);
    printf("greedy from \"%s\" (%d distinct):", prompt, distinct);
    for (int i = 0; i < n_out; i++) printf(" %d", out[i]);
    printf("\n");
    moe8_sampler_free(s);
    moe8_context_free(c);
    moe8_tokenizer_free(tok);
    moe8_model_free(m);
}

/* ---- determinism, sharding, folder rules ---------------------------------- */

static void test_determinism(const char *base) {
    char a[4096], b[4096], d[4096], fa[4200], fb[4200];
    moe8_error e;
    FMT(a, "%s/seed7a", base);
    FMT(b, "%s/seed7b", base);
    FMT(d, "%s/seed8", base);
    CHECKF(make(a, 2, 7, 4096, 0, 0, &e) == MOE8_OK, "%s", e.message);
    CHECK(make(b, 2, 7, 4096, 0, 0, &e) == MOE8_OK);
    CHECK(make(d, 2, 8, 4096, 0, 0, &e) == MOE8_OK);
    FMT(fa, "%s/model.safetensors", a);
    FMT(fb, "%s/model.safetensors", b);
    CHECK(same_file(fa, fb));
    FMT(fb, "%s/model.safetensors", d);
    CHECK(!same_file(fa, fb));
    FMT(fa, "%s/config.json", a);
    FMT(fb, "%s/config.json", d);
    CHECK(same_file(fa, fb));
    /* folded stop ids stay in a small vocabulary */
    CHECK(test_file_contains(fa, "\"vocab_size\":\t4096"));
}

static void test_shards(const char *base) {
    char dir[4096], path[4200], one[4096];
    moe8_model *m;
    moe8_model_stats s1, s2;
    moe8_error e;
    FMT(dir, "%s/sharded", base);
    FMT(one, "%s/seed7a", base);
    CHECKF(make(dir, 2, 7, 4096, 1 << 20, 0, &e) == MOE8_OK, "%s", e.message);
    FMT(path, "%s/model.safetensors.index.json", dir);
    CHECK(access(path, F_OK) == 0);
    FMT(path, "%s/model.safetensors", dir);
    CHECK(access(path, F_OK) != 0);
    m = test_load_model(dir);
    moe8_model_get_stats(m, &s1);
    moe8_model_free(m);
    m = test_load_model(one);
    moe8_model_get_stats(m, &s2);
    moe8_model_free(m);
    CHECKF(s1.n_files >= 3, "%d files", s1.n_files);
    CHECK(s1.n_tensors == s2.n_tensors && s1.total_bytes == s2.total_bytes && s2.n_files == 1);
}

static void test_folder_rules(const char *base) {
    char dir[4096], path[4200];
    moe8_make_model_params p = moe8_make_model_params_default();
    moe8_error e;
    FMT(dir, "%s/seed7a", base);
    /* non-empty output refused without force, replaced with it */
    CHECKF(make(dir, 2, 9, 4096, 0, 0, &e) == MOE8_ERR_INVALID_ARG && strstr(e.message, "not empty"),
           "%s", e.message);
    CHECK(make(dir, 2, 9, 4096, 0, 1, &e) == MOE8_OK);
    FMT(path, "%s/seed8/model.safetensors", base);
    {
        char mine[4200];
        FMT(mine, "%s/model.safetensors", dir);
        CHECK(!same_file(path, mine));
    }
    /* the tokenizer folder is never an output, even with force */
    CHECKF(make(TOK, 2, 9, 4096, 0, 1, &e) == MOE8_ERR_INVALID_ARG, "%s", e.message);
    CHECK(access(TOK "/tokenizer.json", F_OK) == 0);
    /* missing tokenizer */
    p.tokenizer_dir = "/nonexistent-tokenizer";
    FMT(dir, "%s/notok", base);
    CHECKF(moe8_make_model(&p, dir, &e) == MOE8_ERR_NOT_FOUND && strstr(e.message, "tokenizer.json"),
           "%s", e.message);
    CHECK(access(dir, F_OK) != 0);
    /* missing parent folder */
    FMT(dir, "%s/no/such/parent", base);
    p.tokenizer_dir = TOK;
    CHECKF(moe8_make_model(&p, dir, &e) == MOE8_ERR_NOT_FOUND && strstr(e.message, "parent"),
           "%s", e.message);
}

static void test_cli(const char *base) {
    char cmd[8192], log[4200];
    FMT(log, "%s/cli.log", base);
    FMT(cmd, "'%s' make-model --preset tiny --layers 1 --vocab 2048 -o '%s/cli' "
             "--tokenizer '%s' 2>'%s'", MOE8_CLI, base, TOK, log);
    CHECK(test_run(cmd) == 0);
    FMT(cmd, "'%s' inspect -m '%s/cli' >/dev/null", MOE8_CLI, base);
    CHECK(test_run(cmd) == 0);
    FMT(cmd, "'%s' make-model --preset tiny --layers 1 --vocab 2048 -o '%s/cli' "
             "2>'%s'", MOE8_CLI, base, log);
    CHECK(test_run(cmd) == 1);
    CHECK(test_file_contains(log, "not empty"));
    FMT(cmd, "'%s' make-model --preset tiny -o '%s/cli2' --tokenizer /nonexistent "
             "2>'%s'", MOE8_CLI, base, log);
    CHECK(test_run(cmd) == 1);
    CHECK(test_file_contains(log, "tokenizer.json"));
    FMT(cmd, "'%s' make-model --preset huge -o '%s/cli2' 2>'%s'", MOE8_CLI, base, log);
    CHECK(test_run(cmd) == 2);
    CHECK(test_file_contains(log, "huge") && test_file_contains(log, "--preset wants one of tiny|slice|a3b-slice"));
    /* --preset slice reaches the family's preset (qwen2_moe has none: refused before writing) */
    FMT(cmd, "'%s' make-model --arch qwen2_moe --preset slice -o '%s/cli2' --tokenizer '%s' "
             "2>'%s'", MOE8_CLI, base, TOK, log);
    CHECK(test_run(cmd) == 1);
    CHECK(test_file_contains(log, "qwen2_moe has only the tiny preset"));
    FMT(cmd, "%s/cli2", base);
    CHECK(access(cmd, F_OK) != 0);
    FMT(cmd, "'%s' make-model --preset tiny 2>'%s'", MOE8_CLI, log);
    CHECK(test_run(cmd) == 2);
    /* numbers: strict, out of range refused with the value as given (never clamped) */
    {
        static const char *bad[][3] = {
            {"--layers", "0", "1..512"},
            {"--layers", "513", "1..512"},
            {"--layers", "100001", "1..512"},
            {"--layers", "99999999999999999999999", "1..512"},
            {"--layers", "4x", "1..512"},
            {"--layers", "-1", "1..512"},
            {"--layers", " 2", "1..512"},
            {"--layers", "", "1..512"},
            {"--vocab", "1023", "1024..201088"},
            {"--vocab", "201089", "1024..201088"},
            {"--vocab", "100000001", "1024..201088"},
            {"--seed", "18446744073709551616", "0..18446744073709551615"},
            {"--seed", "+5", "0..18446744073709551615"},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            char want[128];
            FMT(cmd, "'%s' make-model --preset tiny -o '%s/cli3' --tokenizer '%s' %s '%s' 2>'%s'",
                MOE8_CLI, base, TOK, bad[i][0], bad[i][1], log);
            FMT(want, "%s wants an integer in %s, got '%s'", bad[i][0], bad[i][2], bad[i][1]);
            CHECKF(test_run(cmd) == 2 && test_file_contains(log, want), "%s '%s'", bad[i][0], bad[i][1]);
        }
        FMT(cmd, "%s/cli3", base);
        CHECK(access(cmd, F_OK) != 0);
    }
    /* the other kinds of the option table: a choice, an unknown option, a missing value */
    static const char *bad_opt[][2] = {
        {"--dtype f16", "--dtype wants one of bf16|f32, got 'f16'"},
        {"--arch llama", "--arch wants one of qwen3_moe|qwen2_moe|mixtral|deepseek_v2|deepseek_v3"},
        {"--bogus 1", "unknown option '--bogus'"},
        {"--seed", "--seed wants a value (S)"},
    };
    for (size_t i = 0; i < sizeof bad_opt / sizeof bad_opt[0]; i++) {
        FMT(cmd, "'%s' make-model --preset tiny -o '%s/cli3' %s 2>'%s'", MOE8_CLI, base,
            bad_opt[i][0], log);
        CHECKF(test_run(cmd) == 2 && test_file_contains(log, bad_opt[i][1]), "%s", bad_opt[i][0]);
    }
    /* the usage comes from the same table: every option, -h too */
    FMT(cmd, "'%s' make-model --help >'%s'", MOE8_CLI, log);
    CHECK(test_run(cmd) == 0 && test_file_contains(log, "  --layers N ") &&
          test_file_contains(log, "  -h, --help ") && !test_file_contains(log, "--vocab"));
}

/* A pid that no process has: a child that has exited and been reaped (a
 * pid is not reused that soon). */
static long dead_pid(void) {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    CHECK(pid > 0 && waitpid(pid, NULL, 0) == pid);
    return (long)pid;
}

/* A run killed with SIGKILL leaves ".<name>.tmp.<pid>": the next run into
 * the same output removes it when that process is gone (saying so on
 * stderr) and never touches the folder of a live process. */
static void test_leftovers(const char *base) {
    char cmd[8192], log[4200], dead[4200], live[4200], other[4200], want[4400];
    struct stat sb;
    long pid = dead_pid();
    FMT(log, "%s/leftover.log", base);
    FMT(dead, "%s/.left.tmp.%ld", base, pid);
    FMT(live, "%s/.left.tmp.%ld", base, (long)getpid());
    FMT(other, "%s/.other.tmp.%ld", base, pid); /* another output's: not ours to remove */
    CHECK(mkdir(dead, 0755) == 0 && mkdir(live, 0755) == 0 && mkdir(other, 0755) == 0);
    FMT(cmd, "%s/model.safetensors", dead);
    test_write_file(cmd, "partial", 7);
    FMT(cmd, "%s/model.safetensors", live);
    test_write_file(cmd, "in use", 6);
    FMT(cmd, "'%s' make-model --preset tiny --layers 1 --vocab 2048 -o '%s/left' "
             "--tokenizer '%s' 2>'%s'", MOE8_CLI, base, TOK, log);
    CHECK(test_run(cmd) == 0);
    CHECKF(stat(dead, &sb) != 0, "%s still exists", dead);
    FMT(want, "/.left.tmp.%ld' of process %ld (no longer running)", pid, pid);
    CHECK(test_file_contains(log, "moe8 make-model: removed leftover temporary folder '") &&
          test_file_contains(log, want));
    {
        size_t n = 0;
        unsigned char *text = test_slurp(log, &n);
        FMT(want, ".left.tmp.%ld'", (long)getpid());
        CHECKF(text && !strstr((char *)text, want), "%s", text ? (char *)text : "(no log)");
        free(text);
    }
    FMT(cmd, "%s/model.safetensors", live);
    CHECK(test_file_contains(cmd, "in use"));
    CHECK(stat(other, &sb) == 0 && S_ISDIR(sb.st_mode));
    FMT(cmd, "rm -rf '%s' '%s'", live, other);
    CHECK(test_run(cmd) == 0);
}

int main(void) {
    const char *base = test_tmpdir("make_model");
    char tiny[4096];
    moe8_error e;
    test_configs();
    test_slice_configs();
    FMT(tiny, "%s/tiny", base);
    CHECKF(make(tiny, 2, 0, 0, 0, 0, &e) == MOE8_OK, "%s", e.message);
    test_folder(tiny);
    test_routing(tiny);
    test_greedy(tiny);
    test_determinism(base);
    test_shards(base);
    test_folder_rules(base);
    test_cli(base);
    test_leftovers(base);
    return test_summary();
}
