/*
 * roofline_avx2.c — the machine ceilings the benchmarks compare against:
 *   - streaming read: ymm loads over a buffer in 4 side-by-side sequential
 *     streams, OR-reduced so they cannot be dropped (no stores);
 *   - exact int8 MAC peak of the instruction sequence the q8 GEMM uses:
 *     vpmaddwd (16 int16 x int16 products summed in pairs to 8 int32) +
 *     vpaddd into an accumulator, in asm (the compiler would merge the
 *     identical products), enough independent work that only throughput
 *     counts. Operands hold int8-range values; each vpmaddwd counts 16 MACs;
 *   - fp32 FMA peak: independent vfmadd231ps ymm chains (the instruction of
 *     the float GEMM and of flash attention), 8 FMAs each.
 * Timing only: no allocation, no threads (the caller runs one per thread).
 */
#include <immintrin.h>
#include <time.h>

#include "core/core.h"
#include "kernels/x86/avx2/kernels_avx2.h"

double moe8_read_stream_avx2(const void *buf, size_t n_bytes, uint32_t *sink) {
    /* Four sequential streams, one per quarter, read side by side (one stream
     * alone leaves DRAM bandwidth unused), each prefetched 2 KB ahead. */
    const size_t q = n_bytes / 4 / 64 * 64;
    const char *p0 = (const char *)buf, *p1 = p0 + q, *p2 = p1 + q, *p3 = p2 + q;
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    const double t0 = moe8_time_s();
    for (size_t i = 0; i < q; i += 64) {
        _mm_prefetch(p0 + i + 2048, _MM_HINT_T0);
        _mm_prefetch(p1 + i + 2048, _MM_HINT_T0);
        _mm_prefetch(p2 + i + 2048, _MM_HINT_T0);
        _mm_prefetch(p3 + i + 2048, _MM_HINT_T0);
        a = _mm256_or_si256(a, _mm256_or_si256(_mm256_load_si256((const __m256i *)(p0 + i)),
                                               _mm256_load_si256((const __m256i *)(p0 + i + 32))));
        b = _mm256_or_si256(b, _mm256_or_si256(_mm256_load_si256((const __m256i *)(p1 + i)),
                                               _mm256_load_si256((const __m256i *)(p1 + i + 32))));
        c = _mm256_or_si256(c, _mm256_or_si256(_mm256_load_si256((const __m256i *)(p2 + i)),
                                               _mm256_load_si256((const __m256i *)(p2 + i + 32))));
        d = _mm256_or_si256(d, _mm256_or_si256(_mm256_load_si256((const __m256i *)(p3 + i)),
                                               _mm256_load_si256((const __m256i *)(p3 + i + 32))));
    }
    const double t = moe8_time_s() - t0;
    a = _mm256_or_si256(_mm256_or_si256(a, b), _mm256_or_si256(c, d));
    *sink ^= (uint32_t)_mm256_extract_epi32(a, 0) ^ (uint32_t)_mm256_extract_epi32(a, 5);
    return t;
}

/* One vpmaddwd into a scratch register and one vpaddd into chain acc (asm, so
 * the compiler cannot merge the identical products). */
#define PAIR(acc) "vpmaddwd %%ymm13, %%ymm14, %%ymm15\n\tvpaddd %%ymm15, " acc ", " acc "\n\t" \
                  "vpmaddwd %%ymm12, %%ymm14, %%ymm15\n\tvpaddd %%ymm15, " acc ", " acc "\n\t"

double moe8_maddwd_peak_avx2(long n_iter, uint32_t *sink) {
    uint32_t out[8];
    long n = n_iter;
    const int16_t wv[2] = {-128, (int16_t)(127 - (int)(*sink & 1))}, xv[2] = {-127, 127};
    const double t0 = moe8_time_s();
    /* Per iteration 12 vpmaddwd + 12 vpaddd (6 accumulators, 2 adds each):
     * the instruction mix of one pair step of the 6-row x 16-channel tile. */
    __asm__ volatile(
        "vpbroadcastd (%2), %%ymm12\n\t"
        "vpbroadcastw 2(%2), %%ymm13\n\t"
        "vpbroadcastd (%3), %%ymm14\n\t"
        "vpxor %%ymm0, %%ymm0, %%ymm0\n\tvmovdqa %%ymm0, %%ymm1\n\tvmovdqa %%ymm0, %%ymm2\n\t"
        "vmovdqa %%ymm0, %%ymm3\n\tvmovdqa %%ymm0, %%ymm4\n\tvmovdqa %%ymm0, %%ymm5\n\t"
        "1:\n\t"
        PAIR("%%ymm0") PAIR("%%ymm1") PAIR("%%ymm2") PAIR("%%ymm3") PAIR("%%ymm4") PAIR("%%ymm5")
        "dec %0\n\tjnz 1b\n\t"
        "vpaddd %%ymm1, %%ymm0, %%ymm0\n\tvpaddd %%ymm3, %%ymm2, %%ymm2\n\t"
        "vpaddd %%ymm5, %%ymm4, %%ymm4\n\tvpaddd %%ymm2, %%ymm0, %%ymm0\n\t"
        "vpaddd %%ymm4, %%ymm0, %%ymm0\n\tvmovdqu %%ymm0, (%1)\n\tvzeroupper\n\t"
        : "+r"(n)
        : "r"(out), "r"(wv), "r"(xv)
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm12", "xmm13", "xmm14", "xmm15",
          "memory", "cc");
    const double t = moe8_time_s() - t0;
    *sink ^= out[0] ^ out[7];
    return t;
}

#define FMA(acc) "vfmadd231ps %%ymm13, %%ymm14, " acc "\n\t"

double moe8_fma_peak_avx2(long n_iter, uint32_t *sink) {
    float out[8];
    long n = n_iter;
    const float a = 1.0f + 1e-7f * (float)(*sink & 1), b = 0.999999f;
    const double t0 = moe8_time_s();
    /* Per iteration 10 independent vfmadd231ps chains (latency 4 x 2 ports
     * needs >= 8 in flight): 80 fp32 FMAs. */
    __asm__ volatile(
        "vbroadcastss (%2), %%ymm13\n\t"
        "vbroadcastss (%3), %%ymm14\n\t"
        "vxorps %%ymm0, %%ymm0, %%ymm0\n\tvmovaps %%ymm0, %%ymm1\n\tvmovaps %%ymm0, %%ymm2\n\t"
        "vmovaps %%ymm0, %%ymm3\n\tvmovaps %%ymm0, %%ymm4\n\tvmovaps %%ymm0, %%ymm5\n\t"
        "vmovaps %%ymm0, %%ymm6\n\tvmovaps %%ymm0, %%ymm7\n\tvmovaps %%ymm0, %%ymm8\n\t"
        "vmovaps %%ymm0, %%ymm9\n\t"
        "1:\n\t"
        FMA("%%ymm0") FMA("%%ymm1") FMA("%%ymm2") FMA("%%ymm3") FMA("%%ymm4")
        FMA("%%ymm5") FMA("%%ymm6") FMA("%%ymm7") FMA("%%ymm8") FMA("%%ymm9")
        "dec %0\n\tjnz 1b\n\t"
        "vaddps %%ymm1, %%ymm0, %%ymm0\n\tvaddps %%ymm3, %%ymm2, %%ymm2\n\t"
        "vaddps %%ymm5, %%ymm4, %%ymm4\n\tvaddps %%ymm7, %%ymm6, %%ymm6\n\t"
        "vaddps %%ymm9, %%ymm8, %%ymm8\n\tvaddps %%ymm2, %%ymm0, %%ymm0\n\t"
        "vaddps %%ymm6, %%ymm4, %%ymm4\n\tvaddps %%ymm8, %%ymm0, %%ymm0\n\t"
        "vaddps %%ymm4, %%ymm0, %%ymm0\n\tvmovups %%ymm0, (%1)\n\tvzeroupper\n\t"
        : "+r"(n)
        : "r"(out), "r"(&a), "r"(&b)
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
          "xmm13", "xmm14", "memory", "cc");
    const double t = moe8_time_s() - t0;
    uint32_t bits;
    __builtin_memcpy(&bits, &out[0], sizeof bits);
    *sink ^= bits;
    return t;
}
