/*
 * test_lm_head_int8.c — `--lm-head int8` (moe8_model_params.lm_head_int8,
 * SEMANTICS §6d): a float lm_head quantized per row to int8 when the weights
 * are packed, run as a W8A8_DYNAMIC lm_head on the per-token codes of the
 * final hidden state.
 *   - the packed lm_head itself: every code and row scale against the rows
 *     quantized here from the fixture's float weights (fp32, as §4 says),
 *     and its GEMM on random rows against a double-precision reference of
 *     the exact integer sum (so they agree to float rounding: rel 1e-6);
 *     under TP (two offline ranks) each rank's rows are those of its chunk;
 *   - the whole forward (untied and tied lm_head) against forward_ref.h's
 *     double-precision forward with the same int8 lm_head (ref_head_int8);
 *   - the packed cache: a float model gets one only with --lm-head int8
 *     (<table>-tp1r0-lm8.pkc), a second load maps it and gives the same
 *     logits bit for bit; on a W8A8 model the two choices have a file each,
 *     and each load maps its own (logits equal to a --no-cache run).
 */
#include <sys/stat.h>

#include "test.h"
#include "test_isa.h"
#include "fixture_model.h"
#include "forward_ref.h"

#include "load/weights.h"
#include "model/linear.h"
#include "moe8_dist.h"

static const int32_t IDS[7] = {5, 17, 200, 3, 99, 42, 7};

static moe8_model *load(const char *dir, int int8, int no_cache) {
    moe8_model_params mp = moe8_model_params_default();
    moe8_model *m = NULL;
    moe8_error e;
    mp.lm_head_int8 = int8;
    mp.no_cache = no_cache;
    mp.n_threads = 2;
    if (moe8_model_load(dir, &mp, &m, &e) != MOE8_OK) {
        fprintf(stderr, "load '%s': %s\n", dir, e.message);
        exit(2);
    }
    return m;
}

/* Logits of IDS (one batch) into out [7][V]. */
static void logits_of(moe8_model *m, float *out) {
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
}

static const char *fixture(const char *name, const fx_opts *o) {
    static char dirs[4][4096];
    static int n;
    char *slot = dirs[n++ % 4];
    snprintf(slot, 4096, "%s", test_tmpdir(name));
    if (fx_write_model(slot, o) != 0) exit(2);
    return slot;
}

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* ---- the packed lm_head against rows quantized here ------------------------------ */

static void test_packed(void) {
    fx_opts o = fx_default_opts();
    o.seed = 8181;
    o.vocab = 300; /* not a multiple of 16: a ragged last panel */
    const char *dir = fixture("lmi8_packed", &o);
    ref_model rm;
    ref_init(&rm, &o);
    const fx_tensor *head = ref_t(&rm, "lm_head.weight", 0, 0);
    const int V = (int)o.vocab, H = (int)o.hidden, T = 5;
    moe8_model *m = load(dir, 1, 1);
    const moe8_weights *w = NULL;
    moe8_error e;
    CHECKF(moe8_weights_acquire(m, 0, 2, &w, &e) == MOE8_OK, "weights: %s", e.message);
    const moe8_proj *p = &w->lm_head;
    CHECK(p->type == MOE8_QUANT_W8A8_DYNAMIC && p->n == V && p->k == H && !p->bias);
    int bad_code = 0, bad_scale = 0;
    float *sw = malloc(sizeof(float) * V);
    for (int i = 0; i < V; i++) {
        float amax = 0.0f;
        for (int j = 0; j < H; j++) amax = fmaxf(amax, fabsf((float)fx_get(head, (int64_t)i * H + j)));
        sw[i] = amax / 127.0f;
        bad_scale += memcmp(&sw[i], &p->deq[i], sizeof(float)) != 0;
        for (int j = 0; j < H; j++) {
            const float c = rintf((float)fx_get(head, (int64_t)i * H + j) / sw[i]);
            bad_code += moe8_qmat_at(&p->q, i, j) != (int8_t)fminf(fmaxf(c, -127.0f), 127.0f);
        }
    }
    CHECKF(bad_scale == 0 && bad_code == 0, "int8 lm_head: %d scales and %d codes differ",
           bad_scale, bad_code);
    /* its GEMM on T random rows (one all zero) against the exact sum */
    const int ldq = moe8_round_up(H, 64);
    float *x = malloc(sizeof(float) * T * H), *y = malloc(sizeof(float) * T * V), sx[8];
    int8_t *xq = malloc((size_t)T * ldq);
    int32_t xsum[8];
    test_rng rng = {77};
    for (int i = 0; i < T * H; i++) x[i] = i / H == 2 ? 0.0f : (float)test_rng_normal(&rng);
    w->kt->quant_rows(xq, ldq, sx, xsum, x, H, T, H);
    CHECK(moe8_proj_apply(p, w->kt, y, V, x, H, xq, ldq, sx, xsum, T, 2) == MOE8_OK);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        float amax = 0.0f;
        for (int j = 0; j < H; j++) amax = fmaxf(amax, fabsf(x[t * H + j]));
        const float s = amax / 127.0f;
        for (int i = 0; i < V; i++) {
            int64_t acc = 0;
            for (int j = 0; j < H; j++) {
                const float cx = s > 0.0f ? fminf(fmaxf(rintf(x[t * H + j] / s), -127.0f), 127.0f) : 0.0f;
                const float cw = fminf(fmaxf(rintf((float)fx_get(head, (int64_t)i * H + j) / sw[i]),
                                             -127.0f), 127.0f);
                acc += (int64_t)cx * (int64_t)cw;
            }
            const double want = (double)acc * (double)s * (double)sw[i];
            const double d = fabs(y[t * V + i] - want) / fmax(fabs(want), 1e-30);
            if (want == 0.0) CHECKF(y[t * V + i] == 0.0f, "row %d col %d: %g, want 0", t, i, y[t * V + i]);
            else if (d > worst) worst = d;
        }
    }
    printf("int8 lm_head GEMM: worst relative error %.3g against the exact sum\n", worst);
    CHECKF(worst <= 1e-6, "int8 lm_head GEMM: relative error %.3g", worst);
    moe8_weights_release(m, w);
    moe8_model_free(m);
    ref_free(&rm);
    free(sw); free(x); free(y); free(xq);
}

/* Under TP (two offline ranks: loaded and packed as `moe8 pack --tp 2
 * --rank R` does) each rank's int8 rows are the single process's rows of
 * its vocabulary chunk: the same codes and scales. */
static void test_tp(void) {
    fx_opts o = fx_default_opts();
    o.seed = 8787;
    o.vocab = 300;
    const char *dir = fixture("lmi8_tp", &o);
    moe8_model *one = load(dir, 1, 1);
    const moe8_weights *w1 = NULL;
    moe8_error e;
    CHECKF(moe8_weights_acquire(one, 0, 2, &w1, &e) == MOE8_OK, "weights: %s", e.message);
    int rows = 0;
    for (int r = 0; r < 2; r++) {
        moe8_dist *d = NULL;
        moe8_model_params mp = moe8_model_params_default();
        moe8_model *m = NULL;
        const moe8_weights *w = NULL;
        CHECK(moe8_dist_create_offline(2, r, 0, &d, &e) == MOE8_OK);
        mp.dist = d, mp.lm_head_int8 = 1, mp.no_cache = 1, mp.n_threads = 2;
        CHECKF(moe8_model_load(dir, &mp, &m, &e) == MOE8_OK, "rank %d load: %s", r, e.message);
        CHECKF(m && moe8_weights_acquire(m, 0, 2, &w, &e) == MOE8_OK, "rank %d weights: %s", r,
               e.message);
        if (!w) exit(2);
        const moe8_proj *p = &w->lm_head, *q = &w1->lm_head;
        int bad = p->type != MOE8_QUANT_W8A8_DYNAMIC || p->n != w->v_count;
        for (int j = 0; !bad && j < p->n; j++) {
            bad += p->deq[j] != q->deq[w->v_begin + j];
            for (int t = 0; t < p->k; t++)
                bad += moe8_qmat_at(&p->q, j, t) != moe8_qmat_at(&q->q, w->v_begin + j, t);
        }
        CHECKF(bad == 0, "TP rank %d: its int8 lm_head rows differ from the single process's", r);
        rows += p->n;
        moe8_weights_release(m, w);
        moe8_model_free(m);
        moe8_dist_free(d);
    }
    CHECKF(rows == (int)o.vocab, "TP ranks hold %d lm_head rows of %d", rows, (int)o.vocab);
    moe8_weights_release(one, w1);
    moe8_model_free(one);
}

/* ---- the whole forward ------------------------------------------------------------------ */

static void forward_case(const char *name, fx_opts o) {
    const char *dir = fixture(name, &o);
    const int V = (int)o.vocab;
    float *got = malloc(sizeof(float) * 7 * V), *flt = malloc(sizeof(float) * 7 * V);
    double *want = malloc(sizeof(double) * 7 * V);
    ref_model rm;
    ref_init(&rm, &o);
    rm.lm_head_int8 = 1;
    ref_forward(&rm, IDS, 7, want);
    moe8_model *m = load(dir, 1, 1);
    logits_of(m, got);
    moe8_model_free(m);
    m = load(dir, 0, 1);
    logits_of(m, flt);
    moe8_model_free(m);
    double worst = 1, moved = 0;
    for (int t = 0; t < 7; t++) worst = fmin(worst, test_cosine_ref(got + t * V, want + t * V, V));
    for (int i = 0; i < 7 * V; i++) moved = fmax(moved, fabs(got[i] - flt[i]));
    printf("%-24s worst-position cosine %.8f (int8 vs float lm_head: max |diff| %.3g)\n", name,
           worst, moved);
    CHECKF(worst >= 0.99999, "%s: cosine %.8f against the int8 reference", name, worst);
    CHECKF(moved > 0, "%s: --lm-head int8 changed no logit", name);
    ref_free(&rm);
    free(got); free(flt); free(want);
}

static void test_forward(void) {
    fx_opts o = fx_default_opts();
    o.seed = 8282;
    forward_case("lmi8_untied", o);
    o.tie = 1;
    o.seed = 8383;
    forward_case("lmi8_tied", o);
    o = fx_default_opts();
    o.quant = 1;   /* W8A8 linears and experts beside it */
    o.seed = 8484;
    forward_case("lmi8_w8a8", o);
}

/* ---- the packed cache -------------------------------------------------------------------- */

static void test_cache(void) {
    fx_opts o = fx_default_opts();
    o.seed = 8585;
    const char *dir = fixture("lmi8_cache", &o);
    const int V = (int)o.vocab;
    const char *isa = moe8_kernel_isa();
    char lm8[4300], plain[4300];
    float *a = malloc(sizeof(float) * 7 * V), *b = malloc(sizeof(float) * 7 * V);
    snprintf(lm8, sizeof lm8, "%s/.moe8-cache/%s-tp1r0-lm8.pkc", dir, isa);
    snprintf(plain, sizeof plain, "%s/.moe8-cache/%s-tp1r0.pkc", dir, isa);
    /* a float model: no cache without --lm-head int8, one with it */
    moe8_model *m = load(dir, 0, 0);
    logits_of(m, a);
    moe8_model_free(m);
    CHECKF(!exists(plain) && !exists(lm8), "a float model got a packed cache");
    m = load(dir, 1, 0);
    logits_of(m, a);
    moe8_cache_info ci;
    moe8_error e;
    CHECKF(moe8_model_cache_check(m, 1, &ci, &e) == MOE8_OK && ci.valid, "cache check: %s",
           ci.why);
    CHECKF(strstr(ci.path, "-lm8.pkc") != NULL, "cache path %s", ci.path);
    moe8_model_free(m);
    CHECKF(exists(lm8), "no %s", lm8);
    m = load(dir, 1, 0); /* maps it */
    logits_of(m, b);
    moe8_model_free(m);
    CHECKF(memcmp(a, b, sizeof(float) * 7 * V) == 0, "int8 lm_head from the cache: logits differ");
    /* a W8A8 model: a file per choice, each load its own */
    fx_opts q = fx_default_opts();
    q.quant = 1;
    q.seed = 8686;
    dir = fixture("lmi8_cache_q", &q);
    snprintf(lm8, sizeof lm8, "%s/.moe8-cache/%s-tp1r0-lm8.pkc", dir, isa);
    snprintf(plain, sizeof plain, "%s/.moe8-cache/%s-tp1r0.pkc", dir, isa);
    for (int round = 0; round < 2; round++)
        for (int int8 = 0; int8 < 2; int8++) {
            m = load(dir, int8, 1);
            logits_of(m, a);
            moe8_model_free(m);
            m = load(dir, int8, 0);
            logits_of(m, b);
            moe8_model_free(m);
            CHECKF(memcmp(a, b, sizeof(float) * 7 * V) == 0, "W8A8 model, int8 %d, round %d: "
                   "cached logits differ from --no-cache ones", int8, round);
        }
    CHECKF(exists(lm8) && exists(plain), "W8A8 model: expected both %s and %s", plain, lm8);
    free(a); free(b);
}

int main(void) {
    test_table_or_skip();
    test_packed();
    test_tp();
    test_forward();
    test_cache();
    return test_summary();
}
