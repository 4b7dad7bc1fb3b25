/*
 * gemm_q8_avx512.c — exact int8 x int8 -> int32 GEMM over the packed weight
 * layout k4u (qlayout.c: panels of 16 channels, K in quads, each byte the
 * biased weight W + 128, 64 bytes per quad):
 *     acc[r][j] = sum_k xq[r][k] * W[j][k]
 * the fused dequant epilogue of SEMANTICS §4, and the int8 roofline probe.
 *
 * Why vpdpbusd: it multiplies 4 unsigned by 4 signed bytes and adds the
 * 4 products (each |.| <= 255*128, their sum < 2^17, no saturation in the
 * non-"s" form) to an int32 lane, wrapping modulo 2^32. The weight chunk is
 * the unsigned operand (W + 128 in 0..255), the activation quad xq[r][4kq..]
 * broadcast to all lanes the signed one. So the lanes sum (W + 128) x, and
 *     sum_k W x = sum_k (W + 128) x - 128 * sum_k x        (mod 2^32)
 * where sum_k x is the row sum of xq over k_pad, computed here from xq (xsum
 * is only for weight offsets: static W8A8 callers pass 1s). Every step wraps
 * modulo 2^32 and the true result fits in int32, so it is exact for any
 * codes in [-128, 127]. Beyond k the packed bytes are 128 (W = 0), so
 * whatever the activation tail holds cancels too. The accumulators start at
 * -128 * rowsum.
 *
 * Tiling, outermost first: blocks of panels of ~L2_BLOCK bytes that stay in
 * L2 while every row tile passes over them (one row tile needs no blocks);
 * rows in tiles of MR = 4; 4 panels (64 channels) side by side: 16 zmm
 * accumulators, 4 weight chunks loaded once per quad and used by every row,
 * one broadcast per row and quad, the whole K in one pass (the 4 activation
 * rows, 4 x k bytes, stay in L1). Each weight stream is prefetched PF_DIST
 * bytes ahead into L1, and a second, far prefetch into L2 keeps DRAM busy:
 * the next block is spread evenly over the row tiles of this one (so it
 * streams during the whole block, not only during its first tile), while a
 * tile that reads DRAM itself (the first of the first block, or a lone tile)
 * prefetches the next group of 4 panels at its own K: 8 streams. One or two
 * rows (decode) walk NPD = 8 panels side by side: 8 sequential weight
 * streams, each prefetched PF_DECODE bytes ahead; bandwidth-bound. Row and
 * panel remainders are compile-time variants of the same inline kernel,
 * written with named registers (gcc 12 keeps arrays of __m512i in memory);
 * the generated code has no zmm spill.
 * Results do not depend on the tiling (integer sums), so the kernels are
 * deterministic and the caller may split [n0, n1) across threads at panel
 * boundaries. Writes only rows < m and columns [n0, n1) (ragged n1 under a
 * lane mask). Does not allocate; uses well under 1 KB of stack.
 */
#include <immintrin.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "kernels/x86/avx512/avx512_load.h"
#include "kernels/x86/avx512/kernels_avx512.h"

#define NR 16 /* channels per panel of the k4u layout */
#define MR 4  /* rows per tile */
#define NP 4  /* panels per tile */
#define NPD 8 /* panels side by side on the 1-2 row path */

#define L2_BLOCK (768 * 1024) /* weight bytes per block of panels */
#define PF_DIST 1024          /* bytes ahead in each weight stream of the tiles */
#define PF_DECODE 2048        /* bytes ahead in each stream of the few-row path */
#define INLINE static inline __attribute__((always_inline))

/* Output of a row tile, at its row 0: int32 sums or the dequantized floats. */
typedef struct {
    int32_t *acc; int ldc;                       /* i32 variant, or NULL */
    float *y; int ldy;                           /* f32 variant */
    const float *sx; const int32_t *xsum;        /* [mr] of this tile */
} tile_out;

/* Store the 16 sums v of row r at columns j..j+nc (nc in 1..16). */
INLINE void store16(const tile_out *o, const moe8_qmat *w, __m512i v, int r, int j, int nc) {
    if (o->acc) moe8_avx512_q8_out16(o->acc + (size_t)r * o->ldc, NULL, 0, 0, w, v, j, nc);
    else moe8_avx512_q8_out16(NULL, o->y + (size_t)r * o->ldy, o->sx[r], o->xsum[r], w, v, j, nc);
}

/* Named registers of a tile, row r < 4 and panel p < 8: gcc 12 keeps arrays
 * of __m512i in memory, so the tile is written out with names and the
 * unused ones (r >= mr or p >= np, compile-time constants) fold away. */
#define FOR_P(X, r) X(r, 0) X(r, 1) X(r, 2) X(r, 3) X(r, 4) X(r, 5) X(r, 6) X(r, 7)
#define FOR_RP(X) FOR_P(X, 0) FOR_P(X, 1) FOR_P(X, 2) FOR_P(X, 3)
#define FOR_R(X) X(0) X(1) X(2) X(3)
#define FOR_W(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define USED(r, p) ((r) < mr && (p) < np)

/* The far (L2) prefetch of one tile call: at quad step kq, the n (0..4)
 * lines base + kq * step + i * istride, i < n, while below end. */
typedef struct { const uint8_t *base, *end; size_t step, istride; int n; } far_pf;

/* Rows [0, mr) x panels [j0/16, j0/16 + np) over the whole K: mr * np <= 16
 * accumulators; pfd > 0 prefetches each weight stream pfd bytes ahead (L1),
 * fp (when not NULL) is the far prefetch of this call. rs[r] is the row sum
 * of xq[r] over k_pad. Columns >= n1 are not stored. */
INLINE void tile(const tile_out *o, const int8_t *xq, int ldq, const int32_t *rs,
                 const moe8_qmat *w, int j0, int n1, const far_pf *fp, const int mr,
                 const int np, const int pfd) {
    const int n_kq = w->k_pad / 4;
    const size_t ps = (size_t)n_kq * 64; /* bytes per panel */
    const uint8_t *wk = (const uint8_t *)w->data + (size_t)(j0 / NR) * ps;
    const __m512i zero = _mm512_setzero_si512();
#define BIAS(r) const __m512i bias##r = \
        (r) < mr ? _mm512_set1_epi32((int32_t)(0u - 128u * (uint32_t)rs[(r) < mr ? (r) : 0])) : zero;
    FOR_R(BIAS)
#define INIT(r, p) __m512i a##r##p = USED(r, p) ? bias##r : zero;
    FOR_RP(INIT)
    const uint8_t *fq = fp ? fp->base : NULL;
    for (int kq = 0; kq < n_kq; kq++, wk += 64) {
        if (fp && fq < fp->end) {
            const int nf = fp->n;
            if (nf > 0) _mm_prefetch((const char *)fq, _MM_HINT_T1);
            if (nf > 1) _mm_prefetch((const char *)(fq + fp->istride), _MM_HINT_T1);
            if (nf > 2) _mm_prefetch((const char *)(fq + 2 * fp->istride), _MM_HINT_T1);
            if (nf > 3) _mm_prefetch((const char *)(fq + 3 * fp->istride), _MM_HINT_T1);
            fq += fp->step;
        }
#define LOADW(p) __m512i w##p = zero; \
        if ((p) < np) { \
            if (pfd) _mm_prefetch((const char *)(wk + (p) * ps + pfd), _MM_HINT_T0); \
            w##p = _mm512_loadu_si512(wk + (p) * ps); \
        }
        FOR_W(LOADW)
#define BCAST(r) __m512i b##r = zero; \
        if ((r) < mr) { \
            int32_t quad; \
            memcpy(&quad, xq + (size_t)(r) * ldq + 4 * (size_t)kq, sizeof quad); \
            b##r = _mm512_set1_epi32(quad); \
        }
        FOR_R(BCAST)
#define MAC(r, p) if (USED(r, p)) a##r##p = _mm512_dpbusd_epi32(a##r##p, w##p, b##r);
        FOR_RP(MAC)
    }
#define STORE(r, p) if (USED(r, p)) { \
        const int j = j0 + (p) * NR; \
        store16(o, w, a##r##p, r, j, n1 - j < NR ? n1 - j : NR); \
    }
    FOR_RP(STORE)
}

/* Where a row tile's far prefetch goes (pf_plan): own = 1: ahead of its own
 * stream, the next group of NP panels at the same K (a tile that reads DRAM
 * itself: the first one of the first block, or a lone one); else the region
 * [base, end) of the next block, n lines a quad step. */
typedef struct { int own; const uint8_t *base, *end; int n; } pf_plan;

/* One row tile of mr rows (MR-row path) over the panels covering [ja, jb). */
INLINE void row_tile(const tile_out *o, const int8_t *xq, int ldq, const int32_t *rs,
                     const moe8_qmat *w, int ja, int jb, const pf_plan *pp, const int mr) {
    const size_t ps = (size_t)w->k_pad * NR, call = (size_t)(w->k_pad / 4) * 64;
    const uint8_t *data = (const uint8_t *)w->data, *rb = pp->base;
    const uint8_t *mat_end = data + (size_t)(w->n_pad / NR) * ps;
    for (int j0 = ja; j0 < jb; j0 += NP * NR) {
        far_pf f = {NULL, NULL, 64, ps, 0}; /* own: the next group, NP streams */
        if (pp->own) {
            f.base = data + (size_t)(j0 / NR + NP) * ps;
            f.end = f.base + call;
            f.n = NP;
            if (f.base >= mat_end) f.n = 0;
        } else if (rb) { /* a slice of the next block, n lines a step */
            f = (far_pf){rb, pp->end, 64 * (size_t)pp->n, 64, pp->n};
            rb += call * (size_t)pp->n;
        }
        const far_pf *fp = f.n ? &f : NULL;
        switch ((jb - j0 + NR - 1) / NR) {
        case 1: tile(o, xq, ldq, rs, w, j0, jb, fp, mr, 1, PF_DIST); break;
        case 2: tile(o, xq, ldq, rs, w, j0, jb, fp, mr, 2, PF_DIST); break;
        case 3: tile(o, xq, ldq, rs, w, j0, jb, fp, mr, 3, PF_DIST); break;
        default: tile(o, xq, ldq, rs, w, j0, jb, fp, mr, 4, PF_DIST); break;
        }
    }
}

/* The few-row path: mr (1 or 2) rows over [n0, n1), NPD panels at a time. */
INLINE void decode_rows(const tile_out *o, const int8_t *xq, int ldq, const int32_t *rs,
                        const moe8_qmat *w, int n0, int n1, const int mr) {
    for (int j0 = n0; j0 < n1; j0 += NPD * NR) {
        switch ((n1 - j0 + NR - 1) / NR) {
        case 1: tile(o, xq, ldq, rs, w, j0, n1, NULL, mr, 1, PF_DECODE); break;
        case 2: tile(o, xq, ldq, rs, w, j0, n1, NULL, mr, 2, PF_DECODE); break;
        case 3: tile(o, xq, ldq, rs, w, j0, n1, NULL, mr, 3, PF_DECODE); break;
        case 4: tile(o, xq, ldq, rs, w, j0, n1, NULL, mr, 4, PF_DECODE); break;
        case 5: tile(o, xq, ldq, rs, w, j0, n1, NULL, mr, 5, PF_DECODE); break;
        case 6: tile(o, xq, ldq, rs, w, j0, n1, NULL, mr, 6, PF_DECODE); break;
        case 7: tile(o, xq, ldq, rs, w, j0, n1, NULL, mr, 7, PF_DECODE); break;
        default: tile(o, xq, ldq, rs, w, j0, n1, NULL, mr, NPD, PF_DECODE); break;
        }
    }
}

/* Rows r0 .. r0 + mr of o (the tile's own view of the output). */
static tile_out at_row(const tile_out *o, int r0) {
    tile_out t = *o;
    if (t.acc) t.acc += (size_t)r0 * t.ldc;
    else { t.y += (size_t)r0 * t.ldy; t.sx += r0; t.xsum += r0; }
    return t;
}

static void run(const tile_out *o, const int8_t *xq, int ldq, const moe8_qmat *w, int m, int n0,
                int n1) {
    const int k_pad = w->k_pad;
    int32_t rs[MR];
    if (m <= 0 || n1 <= n0) return;
    if (m <= 2) {
        for (int r = 0; r < m; r++) rs[r] = moe8_avx512_row_sum(xq + (size_t)r * ldq, k_pad);
        if (m == 1) decode_rows(o, xq, ldq, rs, w, n0, n1, 1);
        else decode_rows(o, xq, ldq, rs, w, n0, n1, 2);
        return;
    }
    /* Blocks of whole tiles (NP panels) that stay in L2 while every row tile
     * passes over them; one row tile needs no blocks. */
    const size_t ps = (size_t)k_pad * NR, tile_bytes = ps * NP;
    const int nt = (m + MR - 1) / MR;
    int nb = NR * NP * (tile_bytes >= L2_BLOCK ? 1 : (int)(L2_BLOCK / tile_bytes));
    if (nt == 1) nb = n1 - n0;
    for (int ja = n0; ja < n1; ja += nb) {
        const int jb = n1 - ja < nb ? n1 : ja + nb, jc = n1 - jb < nb ? n1 : jb + nb;
        /* The next block [jb, jc) is spread evenly over the tiles first..nt-1,
         * so it is in L2 when its turn comes and DRAM streams during the whole
         * block; tile 0 of the first block reads its own from DRAM. */
        const int first = ja == n0, spread = nt - first;
        const uint8_t *next = (const uint8_t *)w->data + (size_t)(jb / NR) * ps;
        const size_t next_bytes = (size_t)((jc - jb + NR - 1) / NR) * ps;
        const size_t slice = spread > 0 ? (next_bytes + (size_t)spread - 1) / (size_t)spread : 0;
        for (int r0 = 0; r0 < m; r0 += MR) {
            const int ti = r0 / MR, mr = m - r0 < MR ? m - r0 : MR;
            const int8_t *xr = xq + (size_t)r0 * ldq;
            const tile_out t = at_row(o, r0);
            pf_plan pp = {nt == 1 || ti < first, NULL, NULL, 0};
            if (!pp.own && next_bytes > 0) {
                pp.base = next + (size_t)(ti - first) * slice;
                pp.end = next + (size_t)(ti - first + 1) * slice;
                pp.n = spread >= NP ? 1 : (NP + spread - 1) / spread;
            }
            for (int r = 0; r < mr; r++) rs[r] = moe8_avx512_row_sum(xr + (size_t)r * ldq, k_pad);
            switch (mr) {
            case 1: row_tile(&t, xr, ldq, rs, w, ja, jb, &pp, 1); break;
            case 2: row_tile(&t, xr, ldq, rs, w, ja, jb, &pp, 2); break;
            case 3: row_tile(&t, xr, ldq, rs, w, ja, jb, &pp, 3); break;
            default: row_tile(&t, xr, ldq, rs, w, ja, jb, &pp, MR); break;
            }
        }
    }
}

void moe8_gemm_q8_i32_avx512(int32_t *acc, int ldc, const int8_t *xq, int ldq,
                             const moe8_qmat *w, int m, int n0, int n1) {
    const tile_out o = {acc, ldc, NULL, 0, NULL, NULL};
    MOE8_ASSERT(w->layout == &moe8_qlayout_k4u);
    run(&o, xq, ldq, w, m, n0, n1);
}

void moe8_gemm_q8_f32_avx512(float *y, int ldy, const int8_t *xq, int ldq, const float *sx,
                             const int32_t *xsum, const moe8_qmat *w, int m, int n0, int n1) {
    const tile_out o = {NULL, 0, y, ldy, sx, xsum};
    MOE8_ASSERT(w->layout == &moe8_qlayout_k4u);
    run(&o, xq, ldq, w, m, n0, n1);
}

/* ---- roofline probe --------------------------------------------------------- */

/* One vpdpbusd into chain acc: unsigned operand zmm14, signed zmm13 (asm, so
 * the compiler cannot merge the identical products). */
#define DPB(acc) "vpdpbusd %%zmm13, %%zmm14, " acc "\n\t"

double moe8_dpbusd_peak_avx512(long n_iter, uint32_t *sink) {
    uint32_t out[16];
    long n = n_iter;
    const uint32_t wv = 0xff80017fu ^ (*sink & 1), xv = 0x7f80817fu;
    const double t0 = moe8_time_s();
    /* Per iteration 12 independent vpdpbusd chains (latency 5 x 2 ports needs
     * >= 10 in flight): 12 x 64 = 768 int8 MACs. */
    __asm__ volatile(
        "vpbroadcastd (%2), %%zmm14\n\t"
        "vpbroadcastd (%3), %%zmm13\n\t"
        "vpxord %%zmm0, %%zmm0, %%zmm0\n\tvmovdqa64 %%zmm0, %%zmm1\n\tvmovdqa64 %%zmm0, %%zmm2\n\t"
        "vmovdqa64 %%zmm0, %%zmm3\n\tvmovdqa64 %%zmm0, %%zmm4\n\tvmovdqa64 %%zmm0, %%zmm5\n\t"
        "vmovdqa64 %%zmm0, %%zmm6\n\tvmovdqa64 %%zmm0, %%zmm7\n\tvmovdqa64 %%zmm0, %%zmm8\n\t"
        "vmovdqa64 %%zmm0, %%zmm9\n\tvmovdqa64 %%zmm0, %%zmm10\n\tvmovdqa64 %%zmm0, %%zmm11\n\t"
        "test %0, %0\n\tjle 2f\n\t"
        "1:\n\t"
        DPB("%%zmm0") DPB("%%zmm1") DPB("%%zmm2") DPB("%%zmm3") DPB("%%zmm4") DPB("%%zmm5")
        DPB("%%zmm6") DPB("%%zmm7") DPB("%%zmm8") DPB("%%zmm9") DPB("%%zmm10") DPB("%%zmm11")
        "dec %0\n\tjnz 1b\n\t"
        "2:\n\t"
        "vpaddd %%zmm1, %%zmm0, %%zmm0\n\tvpaddd %%zmm3, %%zmm2, %%zmm2\n\t"
        "vpaddd %%zmm5, %%zmm4, %%zmm4\n\tvpaddd %%zmm7, %%zmm6, %%zmm6\n\t"
        "vpaddd %%zmm9, %%zmm8, %%zmm8\n\tvpaddd %%zmm11, %%zmm10, %%zmm10\n\t"
        "vpaddd %%zmm2, %%zmm0, %%zmm0\n\tvpaddd %%zmm6, %%zmm4, %%zmm4\n\t"
        "vpaddd %%zmm10, %%zmm8, %%zmm8\n\tvpaddd %%zmm4, %%zmm0, %%zmm0\n\t"
        "vpaddd %%zmm8, %%zmm0, %%zmm0\n\tvmovdqu32 %%zmm0, (%1)\n\tvzeroupper\n\t"
        : "+r"(n)
        : "r"(out), "r"(&wv), "r"(&xv)
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
          "xmm10", "xmm11", "xmm13", "xmm14", "memory", "cc");
    const double t = moe8_time_s() - t0;
    *sink ^= out[0] ^ out[15];
    return t;
}
