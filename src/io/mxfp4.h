/*
 * mxfp4.h — internal: OCP Microscaling FP4 (MXFP4) as the gpt-oss checkpoints
 * store their experts (SEMANTICS §6e; mxfp4.c).
 *
 *   *_blocks  U8 [..., R, C/32, 16]: row r's C values in blocks of 32, two
 *             e2m1 codes a byte, value 2j in the low nibble of byte j, 2j + 1
 *             in the high one
 *   *_scales  U8 [..., R, C/32]: one e8m0 exponent per block, 2^(s - 127)
 *
 * Encoding (make-model's synthetic checkpoints) rounds to nearest.
 *
 * e2m1 (sign | 2 exponent bits, bias 1 | 1 mantissa bit): 0, 0.5, 1, 1.5, 2,
 * 3, 4, 6 and their negatives (codes 8-15). e8m0 255 is NaN.
 */
#ifndef MOE8_MXFP4_H
#define MOE8_MXFP4_H

#include <stdint.h>

/* Values per scale and bytes per block of 32 values. */
#define MOE8_MXFP4_BLOCK 32
#define MOE8_MXFP4_BLOCK_BYTES 16
/* Largest e8m0 exponent the loader accepts: 6 x 2^(252-127) is finite in
 * fp32, 6 x 2^(253-127) is not (255 is NaN). */
#define MOE8_MXFP4_MAX_SCALE 252

/* The value of an e2m1 code (its low 4 bits). */
float moe8_e2m1_value(unsigned code);
/* The factor of an e8m0 scale byte: 2^(s - 127) (2^-127 is a subnormal
 * fp32, exact), NaN for 255. */
float moe8_e8m0_value(unsigned s);
/* dst[n] = row of n values (n a multiple of 32) from its n/2 block bytes and
 * n/32 scale bytes: each value exactly e2m1 x 2^(s - 127), rounded only where
 * fp32 overflows (inf) or underflows (below 2^-149: never, the smallest
 * non-zero product is 2^-128). */
void moe8_mxfp4_decode_row(float *dst, const uint8_t *blocks, const uint8_t *scales, int64_t n);
/* One block of 32 values x encoded: q[16] codes (low nibble first), returning
 * its scale byte: the smallest s (<= MOE8_MXFP4_MAX_SCALE) with
 * max|x| / 2^(s - 127) <= 6, each value then rounded to the nearest e2m1
 * magnitude (ties to the even code). All-zero blocks get 127. */
uint8_t moe8_mxfp4_encode_block(uint8_t *q, const float *x);

#endif
