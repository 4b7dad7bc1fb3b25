/*
 * dispatch.c — dispatch and combine of the MoE layer (SEMANTICS §3, AllGather
 * style), for the local experts [first, last).
 *
 * Slots are flat: i = t*K + j (token t, its j-th expert). Dispatch is a
 * stable counting sort of the local slots by expert id: rows of expert e are
 * offs[e-first] .. offs[e-first+1]-1, in slot order. Combine sums the rows
 * back per token in slot order, so the result does not depend on threads.
 * Does not: gather activations (moe_layer.c does, once per token, after
 * quantizing), or touch non-local slots (they contribute nothing).
 */
#include "moe/moe.h"

int moe8_moe_dispatch(const int32_t *ids, int n_tokens, int top_k, int first, int last,
                      int32_t *count, int32_t *offs, int32_t *order, int32_t *row_of) {
    const int n_slots = n_tokens * top_k, n_local = last - first;
    for (int e = 0; e < n_local; e++) count[e] = 0;
    for (int i = 0; i < n_slots; i++) {
        int32_t e = ids[i] - first;
        if ((uint32_t)e < (uint32_t)n_local) count[e]++;
    }
    offs[0] = 0;
    for (int e = 0; e < n_local; e++) offs[e + 1] = offs[e] + count[e];
    /* Second pass places each slot at its expert's next free row. `offs`
     * serves as the cursor, then is restored. */
    for (int i = 0; i < n_slots; i++) {
        int32_t e = ids[i] - first;
        if ((uint32_t)e < (uint32_t)n_local) {
            int32_t r = offs[e]++;
            order[r] = i;
            row_of[i] = r;
        } else {
            row_of[i] = -1;
        }
    }
    for (int e = n_local; e > 0; e--) offs[e] = offs[e - 1];
    offs[0] = 0;
    return offs[n_local];
}

/* o[c] = 0, then the local slots are added in slot order, up to 4 per pass
 * over the columns: o = (((o + w0*y0) + w1*y1) + w2*y2) + w3*y3. Four rows a
 * pass keep the loads and stores of o low; the order of the sum is the same
 * as one slot at a time. */
static void combine_pass(float *restrict o, const float *const *y, const float *w, int n,
                         int c0, int c1) {
    const float *y0 = y[0], *y1 = y[n > 1], *y2 = y[n > 2 ? 2 : 0], *y3 = y[n > 3 ? 3 : 0];
    const float w0 = w[0], w1 = w[n > 1], w2 = w[n > 2 ? 2 : 0], w3 = w[n > 3 ? 3 : 0];
    switch (n) {
    case 1:
#pragma omp simd
        for (int c = c0; c < c1; c++) o[c] = o[c] + w0 * y0[c];
        break;
    case 2:
#pragma omp simd
        for (int c = c0; c < c1; c++) o[c] = (o[c] + w0 * y0[c]) + w1 * y1[c];
        break;
    case 3:
#pragma omp simd
        for (int c = c0; c < c1; c++) o[c] = ((o[c] + w0 * y0[c]) + w1 * y1[c]) + w2 * y2[c];
        break;
    default:
#pragma omp simd
        for (int c = c0; c < c1; c++)
            o[c] = (((o[c] + w0 * y0[c]) + w1 * y1[c]) + w2 * y2[c]) + w3 * y3[c];
    }
}

static void combine_token(float *o, const float *y2, int ldy, const float *w, const int32_t *row_of,
                          int top_k, int c0, int c1) {
    const float *yp[4];
    float wv[4];
    int n = 0;
    for (int c = c0; c < c1; c++) o[c] = 0.0f;
    for (int j = 0; j < top_k; j++) {
        if (row_of[j] < 0) continue;
        yp[n] = y2 + (size_t)row_of[j] * ldy;
        wv[n++] = w[j];
        if (n == 4) {
            combine_pass(o, yp, wv, n, c0, c1);
            n = 0;
        }
    }
    if (n) combine_pass(o, yp, wv, n, c0, c1);
}

void moe8_moe_combine(float *out, int ldo, const float *y2, int ldy, const float *w,
                      const int32_t *row_of, int n_tokens, int top_k, int c0, int c1) {
    for (int t = 0; t < n_tokens; t++)
        combine_token(out + (size_t)t * ldo, y2, ldy, w + (size_t)t * top_k,
                      row_of + (size_t)t * top_k, top_k, c0, c1);
}
