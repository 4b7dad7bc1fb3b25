/*
 * calib.c — calibration for W8A8 static linears: run the float model over a
 * text and record the min/max of the input of each quantized linear
 * (convert.h: q/k/v input, o_proj input, dense gate/up and down inputs), per
 * layer, through the forward pass's observer hook (forward.h).
 *
 * The whole text is one sequence, prefilled in one batch (the forward pass
 * sees every token; no logits are computed). The built-in text is a few
 * hundred tokens of varied English: prose, dialogue, numbers, code, a list.
 *
 * Each layer's mapped weight pages are released when the pass reaches the
 * next layer, so resident memory stays near one layer of float weights.
 *
 * A non-finite activation (inf/nan weights in the float model) or a range
 * too wide for a finite fp32 scale is an error naming the layer and site.
 *
 * Does not: percentile or MSE observers (ModelSlim's default for W8A8
 * activations is min/max), per-channel activation ranges, or smoothing.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "load/model.h"
#include "model/forward.h"
#include "convert/convert.h"

static const char calib_text[] =
    "The old lighthouse keeper climbed the spiral stairs every evening at dusk, counting the "
    "hundred and twelve steps under his breath. From the gallery he could see the fishing boats "
    "returning, their lamps bobbing like fireflies over the dark water.\n\n"
    "\"Do you think the storm will reach us tonight?\" asked Maria, pulling her coat tighter.\n"
    "\"Not before midnight,\" he answered. \"The barometer fell only three millibars since "
    "noon.\"\n\n"
    "In 1869 the Suez Canal opened, shortening the voyage between London and Bombay by roughly "
    "7,000 kilometres. Trade patterns changed within a decade: steamships, which needed coaling "
    "stations, replaced many sailing vessels on eastern routes.\n\n"
    "To bake a simple loaf, mix 500 g of flour, 10 g of salt, 7 g of dried yeast and 350 ml of "
    "warm water. Knead for ten minutes, let it rise for an hour, shape it, then bake at 220 "
    "degrees Celsius for about 35 minutes.\n\n"
    "def mean(values):\n"
    "    if not values:\n"
    "        return 0.0\n"
    "    return sum(values) / len(values)\n\n"
    "Photosynthesis converts light energy into chemical energy: carbon dioxide and water become "
    "glucose and oxygen inside the chloroplasts of plant cells. Mitochondria later release that "
    "energy through respiration.\n\n"
    "Meeting notes (Tuesday): 1. Budget review postponed. 2. New hires start on the 14th. "
    "3. Ask Priya about the server migration; the backup job failed twice last week with "
    "error code 137.\n\n"
    "She laughed, shook the rain from her umbrella, and said that nobody in their right mind "
    "would cross the mountains in February. Yet by morning the three of them were already on "
    "the pass, breathing clouds of frost, the valley far below still asleep.\n\n"
    "Q: What is the capital of Australia?\nA: Canberra, not Sydney, although many people "
    "guess the latter.\n";

const char *moe8_calib_default_text(void) { return calib_text; }

int moe8_range_params(const moe8_range *r, float *scale, int *offset) {
    float lo = r->min < 0.0f ? r->min : 0.0f, hi = r->max > 0.0f ? r->max : 0.0f;
    float s = (hi - lo) / 255.0f, o;
    *scale = 1.0f / 255.0f;
    *offset = 0;
    if (r->n_nonfinite > 0 || !isfinite(s)) return -1;
    if (!(s > 0.0f)) return 0;   /* never seen, or all zeros */
    o = moe8_round_even(-128.0f - lo / s);
    *scale = s;
    *offset = o < -128.0f ? -128 : o > 127.0f ? 127 : (int)o;
    return 0;
}

static const char *site_name(int site) {
    static const char *names[MOE8_CALIB_SITES] = {"q/k/v input", "o_proj input",
                                                  "mlp gate/up input", "mlp down_proj input",
                                                  "q_b_proj input"};
    return names[site];
}

/* Every observed range usable: no non-finite activation, a finite scale. */
static moe8_status check_ranges(const moe8_range *ranges, int n_layer, moe8_error *err) {
    for (int l = 0; l < n_layer; l++)
        for (int site = 0; site < MOE8_CALIB_SITES; site++) {
            const moe8_range *r = &ranges[(size_t)l * MOE8_CALIB_SITES + site];
            float s;
            int o;
            if (r->n_nonfinite > 0)
                return moe8_fail(err, MOE8_ERR_FORMAT, -1, "layer %d, %s: %lld of %lld activations "
                                 "are not finite (inf or nan in the float model)", l,
                                 site_name(site), (long long)r->n_nonfinite,
                                 (long long)(r->n + r->n_nonfinite));
            if (moe8_range_params(r, &s, &o))
                return moe8_fail(err, MOE8_ERR_FORMAT, -1, "layer %d, %s: activation range [%g, %g] "
                                 "too wide for an fp32 int8 scale", l, site_name(site), r->min,
                                 r->max);
        }
    return MOE8_OK;
}

typedef struct {
    moe8_range *ranges;   /* [n_layer][MOE8_CALIB_SITES] */
    int n_layer;
    const moe8_model *m;
} calib_state;

/* Give back the mapped pages of layer l's weights once the pass has moved
 * on: calibration reads every expert of every layer, and without this the
 * whole float model would end up resident. */
static void release_layer(const moe8_model *m, int l) {
    const moe8_layer *L = &m->layers[l];
    const moe8_linear *lin[] = {&L->q,        &L->k,     &L->v,     &L->o,    &L->mlp_gate,
                                &L->mlp_up,   &L->mlp_down, &L->sh_gate, &L->sh_up, &L->sh_down,
                                &L->q_a,      &L->q_b,   &L->kv_a,  &L->kv_b};
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++)
        if (lin[i]->weight) moe8_st_release(m->st, lin[i]->weight);
    if (!L->info.is_moe) return;
    moe8_st_release(m->st, L->router);
    for (int64_t e = 0; e < m->cfg.num_experts; e++) {
        moe8_st_release(m->st, L->experts[e].gate.weight);
        moe8_st_release(m->st, L->experts[e].up.weight);
        moe8_st_release(m->st, L->experts[e].down.weight);
    }
}

static void observe(void *user, int layer, int site, const float *x, int n_rows, int n_cols) {
    calib_state *c = user;
    moe8_range *r;
    size_t n = (size_t)n_rows * (size_t)n_cols;
    if (layer < 0 || layer >= c->n_layer || site < 0 || site >= MOE8_CALIB_SITES) return;
    if (site == MOE8_CALIB_QKV && layer > 0) release_layer(c->m, layer - 1);
    r = &c->ranges[(size_t)layer * MOE8_CALIB_SITES + site];
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        if (!isfinite(v)) {
            r->n_nonfinite++;
            continue;
        }
        if (r->n++ == 0) r->min = r->max = v;
        if (v < r->min) r->min = v;
        if (v > r->max) r->max = v;
    }
}

static moe8_status tokenize(const moe8_tokenizer *tok, const char *text, size_t len,
                            int32_t **ids, size_t *n, moe8_error *err) {
    moe8_status st = moe8_tokenize(tok, text, len, NULL, 0, n, err);
    if (st && st != MOE8_ERR_INVALID_ARG) return st;
    if (*n == 0) return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "calibration text is empty");
    if (!(*ids = malloc(*n * sizeof **ids))) return moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
    return moe8_tokenize(tok, text, len, *ids, *n, n, err);
}

moe8_status moe8_calibrate(moe8_model *m, const moe8_tokenizer *tok, const char *text,
                           size_t len, int n_threads, moe8_range *ranges, int64_t *n_tokens,
                           moe8_error *err) {
    const moe8_config *c = moe8_model_config(m);
    calib_state cs = {ranges, (int)c->num_hidden_layers, m};
    moe8_context_params cp = moe8_context_params_default();
    moe8_context *ctx = NULL;
    int32_t *ids = NULL, *pos = NULL, *seq = NULL;
    int8_t *want = NULL;
    size_t n = 0;
    moe8_status st;
    memset(ranges, 0, (size_t)cs.n_layer * MOE8_CALIB_SITES * sizeof *ranges);
    if ((st = tokenize(tok, text, len, &ids, &n, err))) goto done;
    if ((int64_t)n > c->max_position_embeddings) n = (size_t)c->max_position_embeddings;
    pos = malloc(n * sizeof *pos);
    seq = calloc(n, sizeof *seq);
    want = calloc(n, 1);
    if (!pos || !seq || !want) {
        st = moe8_fail(err, MOE8_ERR_NOMEM, -1, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        pos[i] = (int32_t)i;
        ids[i] = (int32_t)((int64_t)ids[i] % c->vocab_size);
    }
    cp.n_ctx = (int32_t)n;
    cp.n_batch = (int32_t)n;
    cp.n_threads = n_threads;
    cp.kv_type = MOE8_DT_F32; /* the ranges of the model as computed, not of a rounded cache */
    if ((st = moe8_context_create(m, &cp, &ctx, err))) goto done;
    moe8_context_set_observer(ctx, observe, &cs);
    {
        const moe8_batch b = {(int32_t)n, ids, pos, seq, want};
        st = moe8_decode(ctx, &b, err);
    }
    release_layer(m, cs.n_layer - 1);
    if (!st) st = check_ranges(ranges, cs.n_layer, err);
    *n_tokens = (int64_t)n;
done:
    if (st) moe8_error_prefix(err, "calibration");
    moe8_context_free(ctx);
    free(ids);
    free(pos);
    free(seq);
    free(want);
    return st;
}
