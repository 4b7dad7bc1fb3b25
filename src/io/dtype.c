/*
 * dtype.c — safetensors dtypes (size, name, parsing) and scalar conversions
 * between fp32 and the 16-bit float formats.
 *
 * Bit layouts (sign | exponent | mantissa):
 *   fp32  1 | 8 (bias 127) | 23
 *   bf16  1 | 8 (bias 127) | 7    (the top half of an fp32)
 *   fp16  1 | 5 (bias 15)  | 10   (subnormals below 2^-14, max finite 65504)
 * Widening is exact. Narrowing rounds to nearest, ties to even; values past
 * the largest finite number become inf; NaN stays NaN (made quiet).
 * Does not: vectorize (SIMD kernels live in src/kernels), or convert the
 * integer or fp8 dtypes.
 */
#include <string.h>

#include "core/core.h"

/* ======================================================================== */
/* dtype table                                                               */
/* ======================================================================== */

static const struct {
    const char *name;
    size_t size;
} dtype_info[MOE8_DT_COUNT] = {
    [MOE8_DT_F64] = {"F64", 8},         [MOE8_DT_F32] = {"F32", 4},
    [MOE8_DT_F16] = {"F16", 2},         [MOE8_DT_BF16] = {"BF16", 2},
    [MOE8_DT_I64] = {"I64", 8},         [MOE8_DT_I32] = {"I32", 4},
    [MOE8_DT_I16] = {"I16", 2},         [MOE8_DT_I8] = {"I8", 1},
    [MOE8_DT_U64] = {"U64", 8},         [MOE8_DT_U32] = {"U32", 4},
    [MOE8_DT_U16] = {"U16", 2},         [MOE8_DT_U8] = {"U8", 1},
    [MOE8_DT_BOOL] = {"BOOL", 1},       [MOE8_DT_F8_E4M3] = {"F8_E4M3", 1},
    [MOE8_DT_F8_E5M2] = {"F8_E5M2", 1},
};

size_t moe8_dtype_size(moe8_dtype dt) {
    if ((unsigned)dt >= MOE8_DT_COUNT) return 0;
    return dtype_info[dt].size;
}

const char *moe8_dtype_name(moe8_dtype dt) {
    if ((unsigned)dt >= MOE8_DT_COUNT) return "?";
    return dtype_info[dt].name;
}

int moe8_dtype_parse(const char *name, moe8_dtype *out) {
    if (!name) return -1;
    for (int i = 0; i < MOE8_DT_COUNT; i++) {
        if (strcmp(name, dtype_info[i].name) == 0) {
            if (out) *out = (moe8_dtype)i;
            return 0;
        }
    }
    return -1;
}

/* ======================================================================== */
/* Scalar conversions                                                        */
/* ======================================================================== */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float moe8_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

float moe8_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in fp32 */
        float v = (float)mant * 0x1p-24f;
        return f32_from_bits(f32_bits(v) | sign);
    }
    if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13)); /* inf, NaN */
    return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t moe8_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040); /* quiet NaN */
    /* Round to nearest even on the dropped 16 bits; a carry into the exponent
     * is the right answer, including overflow of the largest values to inf. */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

uint16_t moe8_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t x = u & 0x7fffffffu;
    if (x > 0x7f800000u) return sign | 0x7e00 | (uint16_t)((x >> 13) & 0x3ff); /* NaN */
    if (x >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds past 65504: inf */
    if (x >= 0x38800000u) {                     /* normal in fp16 (>= 2^-14) */
        x -= (uint32_t)112 << 23;               /* rebias the exponent 127 -> 15 */
        x += 0xfffu + ((x >> 13) & 1);
        return sign | (uint16_t)(x >> 13);
    }
    if (x <= 0x33000000u) return sign; /* <= 2^-25: rounds to zero (the tie goes to even 0) */
    /* fp16 subnormal: result = round(value * 2^24) with value = m * 2^(e-150). */
    uint32_t e = x >> 23, m = (x & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return sign | (uint16_t)q; /* q == 0x400 is the smallest normal, as it should be */
}

moe8_status moe8_convert_to_f32(float *dst, const void *src, moe8_dtype dt, size_t n,
                                moe8_error *err) {
    const unsigned char *s = src;
    if (n && (!dst || !src))
        return moe8_fail(err, MOE8_ERR_INVALID_ARG, -1, "convert to f32: null buffer");
    switch (dt) {
    case MOE8_DT_F32:
        if (n) memmove(dst, src, n * sizeof(float));
        return MOE8_OK;
    case MOE8_DT_F16:
    case MOE8_DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2); /* source may be unaligned */
            dst[i] = dt == MOE8_DT_F16 ? moe8_f16_to_f32(h) : moe8_bf16_to_f32(h);
        }
        return MOE8_OK;
    case MOE8_DT_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, s + 8 * i, 8);
            dst[i] = (float)d;
        }
        return MOE8_OK;
    default:
        return moe8_fail(err, MOE8_ERR_UNSUPPORTED, -1,
                         "cannot convert dtype %s to f32 (expected F32, F16, BF16 or F64)",
                         moe8_dtype_name(dt));
    }
}
