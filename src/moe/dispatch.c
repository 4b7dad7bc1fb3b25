/*
 * dispatch.c — dispatch and combine of the MoE layer (SPEC §3, AllGather
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

void moe8_moe_combine(float *out, int ldo, const float *y2, int ldy, const float *w,
                      const int32_t *row_of, int n_tokens, int top_k, int c0, int c1) {
    for (int t = 0; t < n_tokens; t++) {
        float *o = out + (size_t)t * ldo;
        int j = 0;
        while (j < top_k && row_of[(size_t)t * top_k + j] < 0) j++;
        if (j == top_k) {
            for (int c = c0; c < c1; c++) o[c] = 0.0f;
            continue;
        }
        {
            const float wj = w[(size_t)t * top_k + j];
            const float *y = y2 + (size_t)row_of[(size_t)t * top_k + j] * ldy;
            for (int c = c0; c < c1; c++) o[c] = wj * y[c];
        }
        for (j++; j < top_k; j++) {
            const int32_t r = row_of[(size_t)t * top_k + j];
            if (r < 0) continue;
            const float wj = w[(size_t)t * top_k + j];
            const float *y = y2 + (size_t)r * ldy;
#pragma omp simd
            for (int c = c0; c < c1; c++) o[c] += wj * y[c];
        }
    }
}
