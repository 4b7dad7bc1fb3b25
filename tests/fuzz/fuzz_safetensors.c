/*
 * fuzz_safetensors.c — libFuzzer target: moe8_st_open_buffer on arbitrary
 * bytes. A successful open must describe only tensors that lie inside the
 * buffer, agree with their shapes, and be found again by name.
 */
#include <stdint.h>
#include <stdlib.h>

#include "moe8.h"
#include "moe8_safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    moe8_st *st;
    moe8_error e;
    volatile uint8_t sink = 0;
    if (moe8_st_open_buffer(data, size, "fuzz", &st, &e) != MOE8_OK) return 0;
    for (size_t i = 0; i < moe8_st_count(st); i++) {
        const moe8_tensor *t = moe8_st_get(st, i);
        const uint8_t *p = t->data;
        int64_t n = 1;
        for (int d = 0; d < t->n_dims; d++) n *= t->shape[d];
        if (t->n_dims < 0 || t->n_dims > MOE8_MAX_DIMS || n != t->n_elements ||
            t->n_bytes != (size_t)n * moe8_dtype_size(t->dtype) || p < data ||
            t->n_bytes > size || p - data > (ptrdiff_t)(size - t->n_bytes) ||
            t->file_offset != p - data || moe8_st_find(st, t->name) != t)
            abort();
        if (t->n_bytes) sink ^= p[0] ^ p[t->n_bytes - 1]; /* ASan checks the bounds */
    }
    (void)moe8_st_metadata(st, 0, "format");
    (void)sink;
    moe8_st_free(st);
    return 0;
}
