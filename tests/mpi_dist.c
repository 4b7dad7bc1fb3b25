/*
 * mpi_dist.c — tensor and expert parallelism through the library API (SEMANTICS
 * §8), run by ctest under mpirun with 2 and 3 ranks. Every rank loads each
 * fixture twice: alone (the single-process reference, computed in this
 * process) and as its rank's shard, and compares:
 *   - float model, TP: logits of a 7-token prompt and one decode step
 *     within 1e-5 relative (max|a-b| / max|b|) of the single process;
 *   - float and W8A8 models, EP over 5 experts (uneven for 2 and 3 ranks):
 *     within 1e-5 relative; the packed expert bytes of the ranks sum to the
 *     single process's and each rank holds its block's share;
 *   - W8A8 model, TP: logits cosine >= 0.999 and 5 greedy tokens of
 *     moe8_generate equal to the single process's; packed expert bytes of a
 *     rank about 1/N;
 *   - the same with an int8 (W8A8_DYNAMIC) lm_head: float body TP and EP within
 *     1e-5 relative, W8A8 body TP cosine >= 0.999 and the same tokens; each
 *     rank packs only its ceil(V/N) vocabulary rows, together all V;
 *   - kv heads fewer than ranks (replicated) at 3 ranks, split at 2;
 *   - the other families (fixture o.arch): Qwen2-MoE (q/k/v biases, the
 *     shared expert split like a dense MLP under TP and EP) float and W8A8,
 *     TP and EP, with the bounds above (W8A8 EP with TP's: the shared
 *     expert's activation is quantized per slice); Mixtral (block_sparse_moe,
 *     every layer MoE) likewise; the layout of quantize --down-proj float
 *     (FLOAT down_proj beside W8A8_DYNAMIC gate/up) under TP and EP;
 *     DeepSeek-V2 (MLA with q_proj, YaRN, greedy softmax routing over 5
 *     experts, a shared expert, layer 0 dense) and DeepSeek-V3 (q_lora,
 *     sigmoid routing with the correction bias in 3 groups of 2, a W8A8
 *     kv_b_proj) float and W8A8, TP and EP, with Qwen2-MoE's bounds;
 *     GLM-4.5 (q/k/v biases, per-head q/k norm, partial rotary, sigmoid
 *     routing with the correction bias over 6 experts in 3 groups keep 2, a
 *     shared expert, layer 0 dense) and MiniMax-M2 (q/k RMSNorm over the whole
 *     projection: each rank's sums of squares all-reduced, with the kv head
 *     replicated at 3 ranks and, again, 3 kv heads split one per rank;
 *     rotary_dim 8 of 16; sigmoid routing with the block's correction bias)
 *     float and W8A8, TP and EP, with Qwen2-MoE's bounds;
 *   - the hybrids Qwen3-Next (grouped in_proj_qkvz, layer 1 full attention
 *     and dense) float TP and EP, W8A8 TP, and Qwen3.5-MoE (flat projections
 *     gathered per rank, fused experts) float and W8A8 TP: one key-head
 *     group of the Gated DeltaNet layers per rank, with Qwen2-MoE's bounds;
 *   - failures agreed by every rank: a corrupt shard on rank 1 (the message
 *     names the file and the rank), a model folder that differs on one rank
 *     (config.json fingerprint), an impossible split, different settings;
 *   - moe8 pack --tp N --rank R (moe8_dist_create_offline): each rank's shard
 *     packed in one process without MPI is mapped unchanged by the group's
 *     rank, logits bit-identical to no cache; decoding offline fails cleanly;
 *   - moe8_dist_bcast: rank 0's bytes on every rank (odd and large sizes),
 *     0 bytes and a NULL dist leave the buffer alone; under a set timeout
 *     the group stays healthy (moe8_dist_failure).
 * Each rank writes its own fixture folders (no shared files between ranks).
 */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "fixture_model.h"
#include "dist/dist.h"
#include "model/forward.h"

static int g_rank, g_size;
static int g_arch;   /* fixture family of compare(): FX_QWEN3, FX_QWEN2, FX_MIXTRAL */
static int g_down_float; /* compare(): quantized experts with FLOAT down_proj */
static int g_kvb_w8a8;   /* compare(), deepseek: kv_b_proj W8A8 static */
static int g_n_kv;       /* compare(): num_key_value_heads when > 0 */

static double rel_max(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0 ? num / den : num;
}

static fx_opts opts_for(int quant) {
    fx_opts o = fx_default_opts();
    o.arch = g_arch;
    /* the default seed's W8A8 Qwen2-MoE fixture has a near-tie at its 5th
     * greedy token, which the per-slice quantization of 3 ranks flips */
    if (g_arch == FX_QWEN2 && quant) o.seed = 78;
    o.quant = quant;
    o.down_float = g_down_float;
    o.float_dtype = MOE8_DT_F32;
    o.n_layers = 3;
    o.dense_layer = 1;
    o.n_experts = 5;
    o.top_k = 2;
    o.moe_inter = 48;
    o.inter = 96;
    o.n_heads = g_size == 3 ? 6 : 4;
    o.n_kv_heads = g_size == 3 ? 1 : 2;   /* replicated at 3 ranks, split at 2 */
    if (g_n_kv > 0) o.n_kv_heads = g_n_kv;
    if (g_arch == FX_GLM4_MOE) /* sigmoid routing in 3 groups keep 2, layer 0 dense */
        o.n_experts = 6, o.n_group = 3, o.topk_group = 2, o.first_dense = 1;
    if (g_arch == FX_MINIMAX_M2) o.rotary_dim = 8; /* of head_dim 16 */
    if (g_arch == FX_QWEN3_NEXT || g_arch == FX_QWEN3_5_MOE) { /* layer 1 full, 0 and 2 linear */
        o.lin_k_heads = g_size, o.lin_v_heads = 2 * g_size, o.full_interval = 2;
        o.partial_rotary = 0.25, o.shared_inter = 48;
    }
    if (fx_deepseek(&o)) {   /* num_key_value_heads = heads; layer 0 dense */
        o.kvb_w8a8 = g_kvb_w8a8;
        /* seed 1234's W8A8 V2 fixture has a near-tie at its 3rd greedy token
         * (logits cosine 0.99997 to one process) that 2 ranks' per-slice
         * shared-expert quantization flips; seed 3 has none at 2 or 3 ranks */
        o.seed = 3;
        o.moe_inter = 48;    /* the shared expert too: 48 splits by 2 and 3 */
        if (g_arch == FX_DEEPSEEK_V2) {
            o.yarn = 1;
            o.no_renorm = 1;
        } else {
            o.n_experts = 6, o.n_group = 3, o.topk_group = 2;
            o.q_lora = 24;
        }
    }
    return o;
}

static const char *write_fixture(const char *name, const fx_opts *o) {
    static char dirs[8][4096];
    static int next;
    char tag[128], *dir = dirs[next++ % 8];
    snprintf(tag, sizeof tag, "dist_%s_n%d_r%d", name, g_size, g_rank);
    snprintf(dir, 4096, "%s", test_tmpdir(tag));
    if (fx_write_model(dir, o) != 0) exit(2);
    return dir;
}

static moe8_model *load(const char *dir, moe8_dist *d) {
    moe8_model_params mp = moe8_model_params_default();
    moe8_model *m = NULL;
    moe8_error e;
    mp.n_threads = 1;
    mp.dist = d;
    if (moe8_model_load(dir, &mp, &m, &e) != MOE8_OK) {
        fprintf(stderr, "rank %d: load %s: %s\n", g_rank, dir, e.message);
        exit(2);
    }
    return m;
}

enum { NP = 7, MAXV = 256 };

/* Logits of the prompt's NP positions, then of one decode step: out[NP+1][V]. */
static void run_logits(moe8_model *m, float *out) {
    static const int32_t prompt[NP + 1] = {5, 17, 42, 3, 99, 200, 11, 64};
    int32_t pos[NP], seq[NP] = {0};
    int8_t want[NP];
    moe8_context_params cp = moe8_context_params_default();
    moe8_context *c = NULL;
    moe8_error e;
    cp.n_ctx = 64;
    /* Without q/k norms, an f16 K rounded on a different side of a half-ulp
     * under TP moves Mixtral's float logits by ~4e-5: compare the maths in F32. */
    if (g_arch != FX_QWEN3) cp.kv_type = MOE8_DT_F32;
    cp.n_batch = NP;
    cp.n_outputs = NP;
    cp.n_threads = 1;
    for (int i = 0; i < NP; i++) pos[i] = i, want[i] = 1;
    CHECK(moe8_context_create(m, &cp, &c, &e) == MOE8_OK);
    moe8_batch b = {NP, prompt, pos, seq, want};
    CHECK(moe8_decode(c, &b, &e) == MOE8_OK);
    for (int i = 0; i < NP; i++) memcpy(out + (size_t)i * MAXV, moe8_context_logits(c, i), MAXV * 4);
    int32_t p1 = NP;
    moe8_batch b1 = {1, prompt + NP, &p1, seq, NULL};
    CHECK(moe8_decode(c, &b1, &e) == MOE8_OK);
    memcpy(out + (size_t)NP * MAXV, moe8_context_logits(c, 0), MAXV * 4);
    moe8_context_free(c);
}

static int greedy(moe8_model *m, int32_t *out) {
    static const int32_t prompt[5] = {9, 8, 7, 6, 5};
    const int32_t *pp = prompt;
    int32_t n_prompt = 5, n_out = 0;
    moe8_context *c = NULL;
    moe8_sampler *s = NULL;
    moe8_context_params cp = moe8_context_params_default();
    cp.n_ctx = 64;
    cp.n_threads = 1;
    if (g_arch != FX_QWEN3) cp.kv_type = MOE8_DT_F32;
    moe8_generate_request r = {1, &pp, &n_prompt, 5, NULL, 0, NULL, NULL, out, &n_out, NULL};
    CHECK(moe8_context_create(m, &cp, &c, NULL) == MOE8_OK);
    CHECK(moe8_sampler_create(NULL, moe8_context_n_vocab(c), &s, NULL) == MOE8_OK);
    CHECK(moe8_generate(c, s, &r, NULL) == MOE8_OK);
    moe8_sampler_free(s);
    moe8_context_free(c);
    return n_out;
}

/* Packed bytes of the MoE layers a model's shard holds. */
static size_t moe_bytes(moe8_model *m) {
    moe8_weights *w = NULL;
    size_t n = 0;
    CHECK(moe8_weights_build(m, 0, 1, &w, NULL) == MOE8_OK);
    for (int i = 0; w && i < w->n_layer; i++)
        if (w->layers[i].moe) {
            moe8_moe_layer_info info;
            moe8_moe_layer_get_info(w->layers[i].moe, &info);
            n += info.packed_bytes;
        }
    moe8_weights_free(w);
    return n;
}

/* Rows of the int8 lm_head this rank packed (its vocabulary chunk). */
static int lm_head_rows(moe8_model *m) {
    moe8_weights *w = NULL;
    int n = -1;
    CHECK(moe8_weights_build(m, 0, 1, &w, NULL) == MOE8_OK);
    if (w && w->v_chunk && w->v_count == 0) n = 0;
    else if (w && w->lm_head.type == MOE8_QUANT_W8A8_DYNAMIC) n = w->lm_head.n;
    moe8_weights_free(w);
    return n;
}

static void compare(const char *what, int quant, int ep, int lm_head, moe8_dist *d1,
                    moe8_dist *dn) {
    fx_opts o = opts_for(quant);
    o.lm_head_w8a8 = lm_head;
    o.nonzero_offsets = lm_head && !quant; /* a W8A8 body stays w8a8_tp's */
    const char *dir = write_fixture(what, &o);
    moe8_model *ref = load(dir, NULL), *m = load(dir, ep ? d1 : dn);
    static float a[(NP + 1) * MAXV], b[(NP + 1) * MAXV];
    moe8_dist_shard sh;
    run_logits(ref, b);
    run_logits(m, a);
    moe8_model_shard(m, &sh);
    CHECK(sh.size == g_size && sh.rank == g_rank && sh.expert_parallel == ep);
    /* A W8A8 shared expert is split like a dense MLP under EP too: its second
     * quantization sees each rank's slice, as TP's experts do. */
    if (quant && (!ep || g_arch == FX_QWEN2 || g_arch == FX_GLM4_MOE || fx_deepseek(&o))) {
        int32_t t1[5], tn[5];
        double cmin = 1;
        for (int r = 0; r <= NP; r++) {
            double cs = test_cosine(a + r * MAXV, b + r * MAXV, MAXV);
            if (cs < cmin) cmin = cs;
        }
        CHECKF(cmin >= 0.999, "%s: logits cosine %.6f < 0.999", what, cmin);
        CHECKF(greedy(m, tn) == 5 && greedy(ref, t1) == 5 && !memcmp(t1, tn, sizeof t1),
               "%s: greedy tokens %d %d %d %d %d, single process %d %d %d %d %d (cosine %.6f)",
               what, tn[0], tn[1], tn[2], tn[3], tn[4], t1[0], t1[1], t1[2], t1[3], t1[4], cmin);
    } else {
        double rel = rel_max(a, b, sizeof a / sizeof a[0]);
        CHECKF(rel <= 1e-5, "%s: logits differ by %.3g relative", what, rel);
    }
    /* int8 lm_head: each rank packs its vocabulary rows, together all of them */
    if (lm_head) {
        int mine = lm_head_rows(m), all[3], sum = 0;
        CHECK(moe8_dist_allgather(ep ? d1 : dn, &mine, all, sizeof mine, NULL) == MOE8_OK);
        for (int r = 0; r < g_size; r++) sum += all[r];
        CHECKF(sum == (int)o.vocab && mine == ((int)o.vocab + g_size - 1) / g_size -
                   (g_rank == g_size - 1 ? g_size * (((int)o.vocab + g_size - 1) / g_size) - (int)o.vocab : 0),
               "%s: rank %d packed %d lm_head rows, all ranks %d of %d", what, g_rank, mine, sum,
               (int)o.vocab);
        CHECK(lm_head_rows(ref) == (int)o.vocab);
    }
    /* Expert memory: each rank packs only its share (quantized experts). */
    if (quant) {
        size_t mine = moe_bytes(m), whole = moe_bytes(ref), sum = 0, all[3];
        CHECK(moe8_dist_allgather(ep ? d1 : dn, &mine, all, sizeof mine, NULL) == MOE8_OK);
        for (int r = 0; r < g_size; r++) sum += all[r];
        if (ep) {
            CHECKF(sum == whole, "%s: EP packed bytes %zu summed, single %zu", what, sum, whole);
            CHECK(mine * (size_t)o.n_experts == whole * (size_t)(sh.expert_last - sh.expert_first));
        } else if (!g_down_float) {
            CHECKF(mine < whole / (size_t)g_size + whole / 8, "%s: rank packs %zu of %zu bytes",
                   what, mine, whole);
        } else {   /* gate/up only: a slice of 16-24 rows is padded to the kernel's panels */
            CHECKF(mine < whole, "%s: rank packs %zu of %zu bytes", what, mine, whole);
        }
    }
    moe8_model_free(m);
    moe8_model_free(ref);
}

/* moe8 pack --tp N --rank R: each rank's shard packed offline (no MPI, this
 * process alone) is the file the group's rank then maps, unchanged, with
 * logits bit-identical to the same group without a cache; a decode with the
 * offline handle fails cleanly. TP and EP, a W8A8 model with an int8 lm_head. */
static void offline_pack(moe8_dist *group, int ep) {
    fx_opts o = opts_for(1);
    o.lm_head_w8a8 = 1;
    const char *dir = write_fixture(ep ? "offline_pack_ep" : "offline_pack_tp", &o);
    char cache_dir[4200], cmd[8600];
    snprintf(cache_dir, sizeof cache_dir, "%s-cache", dir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_dir);
    CHECK(system(cmd) == 0);
    moe8_dist *off = NULL;
    moe8_error e;
    moe8_model *m = NULL;
    moe8_model_params mp = moe8_model_params_default();
    moe8_context *c = NULL;
    moe8_context_params cp = moe8_context_params_default();
    moe8_cache_info ci;
    struct stat before, after;
    mp.n_threads = 1;
    mp.cache_dir = cache_dir;
    CHECK(moe8_dist_create_offline(g_size, g_rank, ep, &off, &e) == MOE8_OK);
    CHECK(moe8_dist_rank(off) == g_rank && moe8_dist_size(off) == g_size);
    mp.dist = off;
    CHECK(moe8_model_load(dir, &mp, &m, &e) == MOE8_OK);
    cp.n_ctx = 64;
    cp.n_threads = 1;
    CHECK(m && moe8_context_create(m, &cp, &c, &e) == MOE8_OK);
    if (c) { /* an offline shard cannot compute: a clean error, no crash */
        const int32_t tok = 5, pos = 0, seq = 0;
        moe8_batch b = {1, &tok, &pos, &seq, NULL};
        CHECKF(moe8_decode(c, &b, &e) == MOE8_ERR_UNSUPPORTED && strstr(e.message, "offline"),
               "decode with an offline shard: %s", e.message);
    }
    moe8_context_free(c);
    CHECK(m && moe8_model_cache_check(m, 1, &ci, &e) == MOE8_OK && ci.valid);
    char want[64];
    snprintf(want, sizeof want, "tp%dr%d%s.pkc", g_size, g_rank, ep ? "-ep" : "");
    CHECKF(strstr(ci.path, want) != NULL, "offline shard cache %s, expected ...%s", ci.path, want);
    moe8_model_free(m);
    moe8_dist_free(off);
    CHECK(stat(ci.path, &before) == 0);
    /* the group: maps what was packed offline; the same logits as without a cache */
    static float a[(NP + 1) * MAXV], b[(NP + 1) * MAXV];
    moe8_dist view = *group;
    view.expert_parallel = ep;
    mp.dist = &view;
    CHECK(moe8_model_load(dir, &mp, &m, &e) == MOE8_OK);
    run_logits(m, a);
    CHECK(moe8_model_cache_check(m, 1, &ci, &e) == MOE8_OK && ci.valid);
    moe8_model_free(m);
    CHECK(stat(ci.path, &after) == 0);
    CHECKF(before.st_ino == after.st_ino && before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
           before.st_mtim.tv_nsec == after.st_mtim.tv_nsec && before.st_size == after.st_size,
           "rank %d: the offline-packed %s was rebuilt by the group's load", g_rank, ci.path);
    mp.no_cache = 1;
    CHECK(moe8_model_load(dir, &mp, &m, &e) == MOE8_OK);
    run_logits(m, b);
    moe8_model_free(m);
    CHECKF(!memcmp(a, b, sizeof a), "rank %d %s: logits with the offline-packed cache differ from "
           "no cache", g_rank, ep ? "EP" : "TP");
}

static void other_eps(void *user, const char *file, cJSON *root) {
    (void)user;
    if (!strcmp(file, "config.json")) cJSON_ReplaceItemInObject(root, "rms_norm_eps", cJSON_CreateNumber(1e-5));
}

/* Failures every rank must see with the failing rank's message. */
static void failures(moe8_dist *d) {
    fx_opts o = opts_for(1);
    moe8_model_params mp = moe8_model_params_default();
    moe8_model *m = NULL;
    moe8_error e;
    char path[4200];
    const char *dir = write_fixture("corrupt", &o);
    mp.dist = d;
    if (g_rank == 1) {   /* truncate rank 1's shard: its header no longer fits */
        FILE *f;
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        f = fopen(path, "r+b");
        CHECK(f && ftruncate(fileno(f), 100) == 0);
        if (f) fclose(f);
    }
    CHECK(moe8_model_load(dir, &mp, &m, &e) != MOE8_OK && !m);
    CHECKF(strstr(e.message, "rank 1: ") && strstr(e.message, "model.safetensors"),
           "corrupt shard: '%s'", e.message);
    /* A different model folder on the last rank: the fingerprint differs. */
    o = opts_for(1);
    if (g_rank == g_size - 1) o.json_hook = other_eps;
    dir = write_fixture("fingerprint", &o);
    CHECK(moe8_model_load(dir, &mp, &m, &e) == MOE8_ERR_INVALID_ARG && !m);
    snprintf(path, sizeof path, "rank %d: the model's config.json differs", g_size - 1);
    CHECKF(strstr(e.message, path), "fingerprint: '%s'", e.message);
    /* An impossible split: heads not divisible by the rank count. */
    o = opts_for(1);
    o.n_heads = g_size == 3 ? 4 : 6, o.n_kv_heads = g_size == 3 ? 2 : 3;
    dir = write_fixture("split", &o);
    CHECK(moe8_model_load(dir, &mp, &m, &e) == MOE8_ERR_INVALID_ARG && !m);
    CHECKF(strstr(e.message, g_size == 3 ? "num_attention_heads 4 is not divisible by 3"
                                         : "num_key_value_heads 3"), "split: '%s'", e.message);
    /* Settings that differ. */
    int32_t flags[2] = {7, g_rank == 1 ? 8 : 7};
    CHECK(moe8_dist_check_same(d, flags, sizeof flags, "the flags", &e) == MOE8_ERR_INVALID_ARG);
    CHECK(strstr(e.message, "rank 1: the flags differs") != NULL);
    flags[1] = 7;
    CHECK(moe8_dist_check_same(d, flags, sizeof flags, "the flags", &e) == MOE8_OK);
    /* A local failure is everyone's. */
    moe8_fail(&e, MOE8_ERR_NOMEM, -1, "boom on %d", g_rank);
    CHECK(moe8_dist_agree(d, g_rank == g_size - 1 ? MOE8_ERR_NOMEM : MOE8_OK, &e) == MOE8_ERR_NOMEM);
    char want[64];
    snprintf(want, sizeof want, "rank %d: boom on %d", g_size - 1, g_size - 1);
    CHECK(strcmp(e.message, want) == 0);
}

/* The token callback runs on every rank; rank 0's answer decides, so a rank
 * whose callback says otherwise neither diverges nor hangs. */
typedef struct { int cancel_rank, stop_rank, calls; } cb_state;

static int on_token(void *user, int32_t seq, int32_t tok) {
    cb_state *cs = user;
    (void)seq, (void)tok;
    cs->calls++;
    if (g_rank == cs->cancel_rank && cs->calls == 2) return MOE8_GEN_CANCEL;
    if (g_rank == cs->stop_rank && cs->calls == 3) return MOE8_GEN_STOP_SEQ;
    return MOE8_GEN_CONTINUE;
}

static void callbacks(moe8_dist *d) {
    fx_opts o = opts_for(1);
    const char *dir = write_fixture("callbacks", &o);
    moe8_model *m = load(dir, d);
    static const int32_t prompt[3] = {4, 5, 6};
    const int32_t *pp = prompt;
    /* {cancel on rank, stop on rank} -> expected status, tokens generated */
    const struct { int cancel_rank, stop_rank; moe8_status st; int n; } cases[] = {
        {g_size - 1, -1, MOE8_OK, 6},          /* a non-zero rank cancels: ignored */
        {0, -1, MOE8_ERR_CANCELLED, 2},        /* rank 0 cancels: everyone stops */
        {-1, g_size - 1, MOE8_OK, 6},          /* a non-zero rank stops the sequence: ignored */
        {-1, 0, MOE8_OK, 3},                   /* rank 0 stops it: everyone stops after 3 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cb_state cs = {cases[i].cancel_rank, cases[i].stop_rank, 0};
        int32_t n_prompt = 3, n_out = 0, out[6], all[3];
        moe8_context *c = NULL;
        moe8_sampler *s = NULL;
        moe8_context_params cp = moe8_context_params_default();
        moe8_generate_request r = {1, &pp, &n_prompt, 6, NULL, 0, on_token, &cs, out, &n_out, NULL};
        moe8_status st;
        cp.n_ctx = 32;
        cp.n_threads = 1;
        CHECK(moe8_context_create(m, &cp, &c, NULL) == MOE8_OK);
        CHECK(moe8_sampler_create(NULL, moe8_context_n_vocab(c), &s, NULL) == MOE8_OK);
        st = moe8_generate(c, s, &r, NULL);
        CHECKF(st == cases[i].st, "callback case %zu: status %d, expected %d", i, (int)st,
               (int)cases[i].st);
        CHECK(moe8_dist_allgather(d, &n_out, all, sizeof n_out, NULL) == MOE8_OK);
        for (int k = 0; k < g_size; k++)
            CHECKF(all[k] == cases[i].n, "callback case %zu: rank %d generated %d, expected %d", i,
                   k, all[k], cases[i].n);
        moe8_sampler_free(s);
        moe8_context_free(c);
    }
    moe8_model_free(m);
}

/* moe8_dist_bcast: every rank ends with rank 0's bytes. */
static void bcast(moe8_dist *d) {
    static const size_t sizes[] = {1, 1001, (size_t)3 << 20};
    moe8_error e;
    moe8_dist_set_timeout(d, 30);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const size_t n = sizes[k];
        unsigned char *buf = malloc(n);
        size_t bad = 0;
        for (size_t i = 0; buf && i < n; i++) buf[i] = (unsigned char)(i * 7 + (size_t)g_rank * 13);
        CHECK(buf && moe8_dist_bcast(d, buf, n, &e) == MOE8_OK);
        for (size_t i = 0; buf && i < n; i++) bad += buf[i] != (unsigned char)(i * 7);
        CHECKF(bad == 0, "bcast of %zu bytes: %zu differ from rank 0's on rank %d", n, bad, g_rank);
        free(buf);
    }
    int32_t v[2] = {g_rank, g_rank};
    CHECK(moe8_dist_bcast(d, v, 0, &e) == MOE8_OK && v[0] == g_rank);  /* 0 bytes: no-op */
    CHECK(moe8_dist_bcast(NULL, v, sizeof v, &e) == MOE8_OK && v[1] == g_rank); /* one rank */
    CHECK(moe8_dist_bcast(d, v, sizeof v, &e) == MOE8_OK && v[0] == 0 && v[1] == 0);
    CHECK(moe8_dist_failure(d, &e) == MOE8_OK);
    moe8_dist_set_timeout(d, 60);
}

int main(void) {
    const char *env = getenv("OMPI_COMM_WORLD_SIZE");
    moe8_dist *tp = NULL;
    moe8_error e;
    int n = env ? atoi(env) : 0;
    if (n < 2) {
        fprintf(stderr, "mpi_dist: run under mpirun with 2 or 3 ranks\n");
        return 1;
    }
    if (moe8_dist_create(n, 0, &tp, &e) != MOE8_OK) {
        fprintf(stderr, "%s\n", e.message);
        return 1;
    }
    g_rank = moe8_dist_rank(tp), g_size = moe8_dist_size(tp);
    CHECK(g_size == n && !moe8_dist_expert_parallel(tp));
    /* EP uses the same communicator under another mode. */
    moe8_dist ep_view = *tp;
    ep_view.expert_parallel = 1;
    compare("float_tp", 0, 0, 0, &ep_view, tp);
    compare("float_ep", 0, 1, 0, &ep_view, tp);
    compare("w8a8_tp", 1, 0, 0, &ep_view, tp);
    compare("w8a8_ep", 1, 1, 0, &ep_view, tp);
    /* int8 lm_head (W8A8_DYNAMIC, non-zero offsets), split by vocabulary rows */
    compare("float_lmhead_tp", 0, 0, 1, &ep_view, tp);
    compare("float_lmhead_ep", 0, 1, 1, &ep_view, tp);
    compare("w8a8_lmhead_tp", 1, 0, 1, &ep_view, tp);
    /* the other families: q/k/v biases and a shared expert split like a
     * dense MLP (qwen2_moe) */
    g_arch = FX_QWEN2;
    compare("qwen2_float_tp", 0, 0, 0, &ep_view, tp);
    compare("qwen2_float_ep", 0, 1, 0, &ep_view, tp);
    compare("qwen2_w8a8_tp", 1, 0, 0, &ep_view, tp);
    compare("qwen2_w8a8_ep", 1, 1, 0, &ep_view, tp);
    g_down_float = 1;   /* the mixed layout of quantize --down-proj float */
    compare("qwen2_w8a8_down_float_tp", 1, 0, 0, &ep_view, tp);
    g_arch = FX_QWEN3;
    compare("w8a8_down_float_tp", 1, 0, 0, &ep_view, tp);
    compare("w8a8_down_float_ep", 1, 1, 0, &ep_view, tp);
    g_down_float = 0;
    g_arch = FX_MIXTRAL;
    compare("mixtral_float_tp", 0, 0, 0, &ep_view, tp);
    compare("mixtral_float_ep", 0, 1, 0, &ep_view, tp);
    compare("mixtral_w8a8_tp", 1, 0, 0, &ep_view, tp);
    compare("mixtral_w8a8_ep", 1, 1, 0, &ep_view, tp);
    /* multi-head latent attention: heads split under TP (q/q_b, kv_b and
     * o_proj by heads, kv_a and the latent cache replicated) */
    g_arch = FX_DEEPSEEK_V2;
    compare("deepseek_v2_float_tp", 0, 0, 0, &ep_view, tp);
    compare("deepseek_v2_float_ep", 0, 1, 0, &ep_view, tp);
    compare("deepseek_v2_w8a8_tp", 1, 0, 0, &ep_view, tp);
    compare("deepseek_v2_w8a8_ep", 1, 1, 0, &ep_view, tp);
    g_arch = FX_DEEPSEEK_V3;
    g_kvb_w8a8 = 1;
    compare("deepseek_v3_float_tp", 0, 0, 0, &ep_view, tp);
    compare("deepseek_v3_float_ep", 0, 1, 0, &ep_view, tp);
    compare("deepseek_v3_w8a8_tp", 1, 0, 0, &ep_view, tp);
    compare("deepseek_v3_w8a8_ep", 1, 1, 0, &ep_view, tp);
    g_kvb_w8a8 = 0;
    g_arch = FX_GLM4_MOE;
    compare("glm4_moe_float_tp", 0, 0, 0, &ep_view, tp);
    compare("glm4_moe_float_ep", 0, 1, 0, &ep_view, tp);
    compare("glm4_moe_w8a8_tp", 1, 0, 0, &ep_view, tp);
    compare("glm4_moe_w8a8_ep", 1, 1, 0, &ep_view, tp);
    /* q/k RMSNorm over the whole projection: the ranks' sums of squares */
    g_arch = FX_MINIMAX_M2;
    compare("minimax_m2_float_tp", 0, 0, 0, &ep_view, tp);
    compare("minimax_m2_float_ep", 0, 1, 0, &ep_view, tp);
    compare("minimax_m2_w8a8_tp", 1, 0, 0, &ep_view, tp);
    compare("minimax_m2_w8a8_ep", 1, 1, 0, &ep_view, tp);
    g_n_kv = g_size; /* one kv head per rank: k's sum split too, none replicated */
    compare("minimax_m2_kv_split_float_tp", 0, 0, 0, &ep_view, tp);
    compare("minimax_m2_kv_split_w8a8_tp", 1, 0, 0, &ep_view, tp);
    g_n_kv = 0;
    /* hybrid linear attention: key-head groups, their conv channels and states per rank */
    g_arch = FX_QWEN3_NEXT;
    compare("qwen3_next_float_tp", 0, 0, 0, &ep_view, tp);
    compare("qwen3_next_float_ep", 0, 1, 0, &ep_view, tp);
    compare("qwen3_next_w8a8_tp", 1, 0, 0, &ep_view, tp);
    g_arch = FX_QWEN3_5_MOE;
    compare("qwen3_5_moe_float_tp", 0, 0, 0, &ep_view, tp);
    compare("qwen3_5_moe_w8a8_tp", 1, 0, 0, &ep_view, tp);
    g_arch = FX_QWEN3;
    offline_pack(tp, 0);
    offline_pack(tp, 1);
    callbacks(tp);
    bcast(tp);
    failures(tp);
    moe8_dist_free(tp);
    if (g_rank == 0) return test_summary();
    return test_n_fail ? 1 : 0;
}
