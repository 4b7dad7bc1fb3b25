/*
 * qlayout.c — the packed int8 weight layouts of the kernel tables (kernels.h,
 * moe8_qlayout). Every layout is a family member "panels of NR output
 * channels, K in groups of G, optionally stored biased by +128":
 *     data[p][kg][c][t] = W[NR*p + c][G*kg + t] (+ 128)     (0 (+ 128) outside n x k)
 * Plain C, compiled for every target: the scalar reference reads any layout
 * through its `at`, and packing does not need the table's instruction set.
 *   k2  (NR 16, G 2)          the vpmaddwd operand after sign extension (AVX2, ref)
 *   k4u (NR 16, G 4, biased)  the unsigned operand of vpdpbusd (AVX-512 VNNI):
 *                             sum (W + 128) x = sum W x + 128 sum x, exact
 * and one int4 layout (W4A8, SEMANTICS §4b), every table's:
 *   q4k8 (NR 16, K in 8s)     two k4u quad-steps per 64 bytes, in the low and
 *                             high nibbles, each code stored as W + 8
 */
#include <string.h>

#include "core/core.h"
#include "kernels/kernels.h"

static size_t bytes16(int n, int k, int kalign) {
    return (size_t)moe8_round_up(n, 16) * (size_t)moe8_round_up(k, kalign);
}

/* Transpose 16 rows x (k_pad/G) groups of G bytes into (k_pad/G) x 16 groups:
 * whole groups move as words, the ragged edges (last panel, k % G, padding)
 * byte by byte. `bias` is XORed into every byte (0x80 adds 128 mod 256). */
static void pack16(int8_t *dst, const int8_t *w, int n, int k, int ldw, const int G,
                   const int kalign, const uint8_t bias) {
    const int n_pad = moe8_round_up(n, 16), k_pad = moe8_round_up(k, kalign);
    const int n_kg = k_pad / G, full_kg = k / G;
    for (int p = 0; p < n_pad / 16; p++) {
        int8_t *panel = dst + (size_t)p * n_kg * 16 * G;
        for (int c = 0; c < 16; c++) {
            const int i = p * 16 + c;
            const int8_t *row = i < n ? w + (size_t)i * ldw : NULL;
            int kg = 0;
            if (i < n)
                for (; kg < full_kg; kg++) {
                    int8_t *d = panel + ((size_t)kg * 16 + c) * G;
                    memcpy(d, row + (size_t)G * kg, (size_t)G);
                    if (bias)
                        for (int t = 0; t < G; t++) d[t] = (int8_t)((uint8_t)d[t] ^ bias);
                }
            for (; kg < n_kg; kg++)
                for (int t = 0; t < G; t++) {
                    const int j = G * kg + t;
                    const int8_t v = (i < n && j < k) ? row[j] : 0;
                    panel[((size_t)kg * 16 + c) * G + t] = (int8_t)((uint8_t)v ^ bias);
                }
        }
    }
}

static inline int8_t at16(const moe8_qmat *w, int i, int j, const int G, const uint8_t bias) {
    const size_t p = (size_t)(i / 16), c = (size_t)(i % 16), kg = (size_t)(j / G), t = (size_t)(j % G);
    return (int8_t)((uint8_t)w->data[((p * (size_t)(w->k_pad / G) + kg) * 16 + c) * G + t] ^ bias);
}

static size_t k2_bytes(int n, int k) { return bytes16(n, k, 4); }
static void k2_pack(int8_t *dst, const int8_t *w, int n, int k, int ldw) {
    pack16(dst, w, n, k, ldw, 2, 4, 0);
}
static int8_t k2_at(const moe8_qmat *w, int i, int j) { return at16(w, i, j, 2, 0); }

static size_t k4u_bytes(int n, int k) { return bytes16(n, k, 4); }
static void k4u_pack(int8_t *dst, const int8_t *w, int n, int k, int ldw) {
    pack16(dst, w, n, k, ldw, 4, 4, 0x80);
}
static int8_t k4u_at(const moe8_qmat *w, int i, int j) { return at16(w, i, j, 4, 0x80); }

const moe8_qlayout moe8_qlayout_k2 = {"k2", 16, 4, k2_bytes, k2_pack, k2_at, 8};
const moe8_qlayout moe8_qlayout_k4u = {"k4u", 16, 4, k4u_bytes, k4u_pack, k4u_at, 8};

/* ---- q4k8: int4 codes, two per byte ----------------------------------------
 * data[p][g][c][t] = (W[16p+c][8g+t] + 8) | (W[16p+c][8g+4+t] + 8) << 4
 * for panel p, group g of 8 inputs (64 bytes), channel c < 16, t < 4; 8 (W = 0)
 * outside n x k. The low nibbles of a block are the k4u chunk of quad 2g, the
 * high ones that of quad 2g + 1. */

static size_t q4k8_bytes(int n, int k) { return (size_t)moe8_round_up(n, 16) * (size_t)moe8_round_up(k, 8) / 2; }

static void q4k8_pack(int8_t *dst, const int8_t *w, int n, int k, int ldw) {
    const int n_pad = moe8_round_up(n, 16), n_g = moe8_round_up(k, 8) / 8;
    for (int p = 0; p < n_pad / 16; p++)
        for (int c = 0; c < 16; c++) {
            const int i = p * 16 + c;
            const int8_t *row = i < n ? w + (size_t)i * ldw : NULL;
            for (int g = 0; g < n_g; g++)
                for (int t = 0; t < 4; t++) {
                    const int j0 = 8 * g + t, j1 = j0 + 4;
                    const int lo = row && j0 < k ? row[j0] : 0, hi = row && j1 < k ? row[j1] : 0;
                    MOE8_ASSERT(lo >= -8 && lo <= 7 && hi >= -8 && hi <= 7);
                    dst[((size_t)p * n_g + g) * 64 + 4 * c + t] =
                        (int8_t)(uint8_t)((lo + 8) | (hi + 8) << 4);
                }
        }
}

static int8_t q4k8_at(const moe8_qmat *w, int i, int j) {
    const size_t p = (size_t)(i / 16), c = (size_t)(i % 16), g = (size_t)(j / 8);
    const int r = j % 8;
    const uint8_t b = (uint8_t)w->data[(p * (size_t)(w->k_pad / 8) + g) * 64 + 4 * c + r % 4];
    return (int8_t)((r < 4 ? b & 15 : b >> 4) - 8);
}

const moe8_qlayout moe8_qlayout_q4k8 = {"q4k8", 16, 8, q4k8_bytes, q4k8_pack, q4k8_at, 4};

void moe8_qmat_init(moe8_qmat *q, const moe8_qlayout *L, const int8_t *data, int n, int k,
                    const float *scale, const int32_t *offset) {
    *q = (moe8_qmat){n, k, moe8_round_up(n, L->nr), moe8_round_up(k, L->kalign), data, scale,
                     offset, L};
}
