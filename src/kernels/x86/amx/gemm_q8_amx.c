/*
 * gemm_q8_amx.c — exact int8 x int8 -> int32 GEMM on AMX tiles over the
 * AVX-512 table's k4u layout (qlayout.c: panels of 16 channels, K in quads,
 * each byte W + 128):
 *     acc[r][j] = sum_k xq[r][k] * W[j][k]
 * with the fused dequant epilogue of SEMANTICS §4, and the AMX int8 probe.
 *
 * Why tdpbsud: it multiplies signed bytes of A by unsigned bytes of B, four
 * products at a time, and adds them to int32 lanes of C, wrapping modulo
 * 2^32 (no saturation). A is 16 activation rows x 64 inputs (xq read in
 * packed, below); B is one panel's 64-input chunk, 16 quads x 16 channels x
 * 4 bytes — exactly 1 KB of k4u, read in place, stride 64. So C holds
 * sum (W + 128) x, and, as in the AVX-512 kernel (SEMANTICS §4),
 *     sum_k W x = sum_k (W + 128) x - 128 * sum_k x        (mod 2^32)
 * with sum_k x the row sum of xq over k_pad; exact for any codes. Inputs
 * at or past k_pad are zero in the packed A, and the last chunk of a k_pad
 * that is not a multiple of 64 comes from a zero-padded copy of B (no load
 * reaches past a panel): zero activations times whatever B holds add 0.
 *
 * Tiles (one configuration per thread, tile_cfg): C 0-3 (2 row blocks x 2
 * panels), A 4-5 (the two row blocks), B 6-7 (the two panels); A and C have
 * R rows, 16 normally, fewer for the last row block of a call (m % 16):
 * the tiles then read and write only the rows that exist. Per 64-input step
 * a 32 x 32 block does 4 tile loads and 4 tdpbsud (64K MACs). Tile loads,
 * not tdpbsud, bound it on the machines measured (docs/BENCHMARKS.md).
 * Blocking, outermost first: NB columns (their C in a 32 KB stack buffer
 * between K blocks); row blocks of 32 (then 16, then the rest); K blocks
 * of KB chunks, whose A (32 rows x 512, packed contiguous: rows of xq
 * 2 KB apart would share a few L1 sets) stays in L1 while every panel pair
 * passes; panel pairs, each prefetching the next pair's chunks. The
 * AVX-512 epilogue (avx512_load.h) dequantizes after the last K block.
 * Fewer than MIN_ROWS rows: the AVX-512 VNNI kernel, which streams the
 * weights at read bandwidth where tiles would wait on them (the results are
 * the same integers, so the choice by m keeps every output bit-identical).
 * Writes only rows < m and columns [n0, n1); n0 a multiple of 16. Does not
 * allocate; uses about 52 KB of stack.
 */
#include <immintrin.h>
#include <string.h>

#include "core/core.h"
#include "kernels/x86/amx/kernels_amx.h"
#include "kernels/x86/avx512/avx512_load.h"
#include "kernels/x86/avx512/kernels_avx512.h"

#define NR 16                 /* channels per panel (k4u) */
#define KC 64                 /* inputs per tile step */
#define MIN_ROWS 8            /* fewer rows: the AVX-512 VNNI kernel */
#define KB 8                  /* 64-input chunks per K block: A's block (32 x 512) stays in L1 */
#define NB 256                /* columns per block: their C (32 x 256 int32) in a stack buffer */
#define INLINE static inline __attribute__((always_inline))

/* The LDTILECFG operand (palette 1). */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_cfg;

/* Rows of the A and C tiles in this thread's configuration; 0: none yet. */
static _Thread_local int cfg_rows;

static void configure(int rows) {
    tile_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.colsb[t] = 64;
        c.rows[t] = (uint8_t)(t < 6 ? rows : 16);
    }
    /* ldtilecfg in asm with c as its memory operand: gcc 12 does not see that
     * _tile_loadconfig reads its argument and drops the stores into c. */
    __asm__ volatile("ldtilecfg %0" : : "m"(c));
    cfg_rows = rows;
}

INLINE void use_rows(int rows) {
    if (cfg_rows != rows) configure(rows);
}

void moe8_amx_thread_init(void) { use_rows(16); }

/* Output of a call: int32 sums or the dequantized floats, at row 0. */
typedef struct {
    int32_t *acc; int ldc;                  /* i32 variant, or NULL */
    float *y; int ldy;                      /* f32 variant */
    const float *sx; const int32_t *xsum;   /* [m] */
} gemm_out;

/* One K block of a 32 x 32 (nb x np tiles) block of C: tiles 2b + q for row
 * blocks b < nb and panels q < np, loaded from c (tile t at c + 256 t, 16
 * int32 a row) or zeroed (first), then nc 64-input chunks: A from the
 * packed block ap (chunk kc, row block b at ap + 2048 kc + 1024 b), B from
 * panel 0 at b (panels ps bytes apart, chunk kc at 1024 kc) — the last
 * chunk from bt (panel q at bt + 1024 q) when bt is not NULL — and stored
 * back to c. Prefetches the next panel pair's chunks at the same K. */
INLINE void micro(int32_t *c, const int8_t *ap, const uint8_t *b, size_t ps, int nc, int first,
                  const uint8_t *bt, const int nb, const int np) {
    if (first) {
        _tile_zero(0);
        if (np > 1) _tile_zero(1);
        if (nb > 1) _tile_zero(2);
        if (nb > 1 && np > 1) _tile_zero(3);
    } else {
        _tile_loadd(0, c, 64);
        if (np > 1) _tile_loadd(1, c + 256, 64);
        if (nb > 1) _tile_loadd(2, c + 512, 64);
        if (nb > 1 && np > 1) _tile_loadd(3, c + 768, 64);
    }
    for (int kc = 0; kc < nc; kc++) {
        const uint8_t *b0 = b + (size_t)kc * 1024, *b1 = b0 + ps;
        const char *pf = (const char *)b0 + 2 * ps;
        if (bt && kc == nc - 1) b0 = bt, b1 = bt + 1024;
        for (int l = 0; l < 1024; l += 64) {
            _mm_prefetch(pf + l, _MM_HINT_T0);
            _mm_prefetch(pf + ps + l, _MM_HINT_T0);
        }
        _tile_loadd(4, ap + (size_t)kc * 2048, 64);
        _tile_loadd(6, b0, 64);
        _tile_dpbsud(0, 4, 6);
        if (np > 1) {
            _tile_loadd(7, b1, 64);
            _tile_dpbsud(1, 4, 7);
        }
        if (nb > 1) {
            _tile_loadd(5, ap + (size_t)kc * 2048 + 1024, 64);
            _tile_dpbsud(2, 5, 6);
            if (np > 1) _tile_dpbsud(3, 5, 7);
        }
    }
    _tile_stored(0, c, 64);
    if (np > 1) _tile_stored(1, c + 256, 64);
    if (nb > 1) _tile_stored(2, c + 512, 64);
    if (nb > 1 && np > 1) _tile_stored(3, c + 768, 64);
}

/* Rows r0 .. r0 + rows (rows <= 32, 16 to a block) x panels j0 / 16 .. + np
 * from c (one pair's 4 tiles): the bias taken out (rs: the rows' sums), then
 * stored or dequantized. Columns >= n1 are not written. */
static void epilogue(const gemm_out *o, const moe8_qmat *w, const int32_t *c, const int32_t *rs,
                     int r0, int rows, int j0, int n1, int np) {
    for (int q = 0; q < np; q++) {
        const int j = j0 + q * NR, ncol = n1 - j < NR ? n1 - j : NR; /* >= 1: q < np */
        for (int i = 0; i < rows; i++) {
            const int r = r0 + i;
            const int32_t *ci = c + ((i / 16) * 2 + q) * 256 + (i % 16) * 16;
            const __m512i v = _mm512_sub_epi32(
                _mm512_loadu_si512(ci), _mm512_set1_epi32((int32_t)(128u * (uint32_t)rs[i])));
            if (o->acc) moe8_avx512_q8_out16(o->acc + (size_t)r * o->ldc, NULL, 0, 0, w, v, j, ncol);
            else moe8_avx512_q8_out16(NULL, o->y + (size_t)r * o->ldy, o->sx[r], o->xsum[r], w, v,
                                      j, ncol);
        }
    }
}

/* Chunks c0 .. c0 + nc of rows a[0 .. rows) (stride lda) into ap as A tiles
 * (chunk kc, row i at ap + 2048 kc + 1024 (i / 16) + 64 (i % 16)); inputs
 * at or past k_pad are 0. */
static void pack_a(int8_t *ap, const int8_t *a, size_t lda, int rows, int c0, int nc, int k_pad) {
    for (int kc = 0; kc < nc; kc++) {
        const int k0 = (c0 + kc) * KC, len = k_pad - k0 < KC ? k_pad - k0 : KC;
        const __mmask64 mk = len >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << len) - 1);
        for (int i = 0; i < rows; i++)
            _mm512_store_si512(ap + (size_t)kc * 2048 + (i / 16) * 1024 + (i % 16) * 64,
                               _mm512_maskz_loadu_epi8(mk, a + (size_t)i * lda + k0));
    }
}

static void run(const gemm_out *o, const int8_t *xq, int ldq, const moe8_qmat *w, int m, int n0,
                int n1) {
    const int k_pad = w->k_pad, n_ch = (k_pad + KC - 1) / KC, kt = k_pad % KC;
    const size_t ps = (size_t)k_pad * NR, lda = (size_t)ldq;
    _Alignas(64) int32_t cbuf[NB / 32 * 1024];
    _Alignas(64) int8_t ap[KB * 2048];
    _Alignas(64) uint8_t bt[2 * 1024];
    int32_t rs[32];
    if (kt) memset(bt, 0, sizeof bt);
    for (int ja = n0; ja < n1; ja += NB) {
        const int jb = n1 - ja < NB ? n1 : ja + NB;
        for (int r0 = 0; r0 < m;) {
            const int rem = m - r0, rows = rem >= 32 ? 32 : rem >= 16 ? 16 : rem;
            const int8_t *a = xq + (size_t)r0 * lda;
            use_rows(rows >= 16 ? 16 : rows);
            for (int i = 0; i < rows; i++) rs[i] = moe8_avx512_row_sum(a + (size_t)i * lda, k_pad);
            for (int c0 = 0; c0 < n_ch; c0 += KB) {
                const int nc = n_ch - c0 < KB ? n_ch - c0 : KB, last = c0 + nc == n_ch;
                pack_a(ap, a, lda, rows, c0, nc, k_pad);
                for (int j0 = ja; j0 < jb; j0 += 2 * NR) {
                    const int np = jb - j0 > NR ? 2 : 1;
                    const uint8_t *b = (const uint8_t *)w->data + (size_t)(j0 / NR) * ps;
                    int32_t *c = cbuf + (j0 - ja) / 32 * 1024;
                    const uint8_t *tail = NULL;
                    if (last && kt) { /* the partial last chunk, zero-padded */
                        for (int q = 0; q < np; q++)
                            memcpy(bt + q * 1024, b + q * ps + (size_t)(n_ch - 1) * 1024,
                                   (size_t)kt * NR);
                        tail = bt;
                    }
                    b += (size_t)c0 * 1024;
                    if (rows == 32) {
                        if (np == 2) micro(c, ap, b, ps, nc, c0 == 0, tail, 2, 2);
                        else micro(c, ap, b, ps, nc, c0 == 0, tail, 2, 1);
                    } else {
                        if (np == 2) micro(c, ap, b, ps, nc, c0 == 0, tail, 1, 2);
                        else micro(c, ap, b, ps, nc, c0 == 0, tail, 1, 1);
                    }
                    if (last) epilogue(o, w, c, rs, r0, rows, j0, n1, np);
                }
            }
            r0 += rows;
        }
    }
}

void moe8_gemm_q8_i32_amx(int32_t *acc, int ldc, const int8_t *xq, int ldq, const moe8_qmat *w,
                          int m, int n0, int n1) {
    const gemm_out o = {acc, ldc, NULL, 0, NULL, NULL};
    MOE8_ASSERT(w->layout == &moe8_qlayout_k4u);
    if (m <= 0 || n1 <= n0) return;
    if (m < MIN_ROWS) moe8_gemm_q8_i32_avx512(acc, ldc, xq, ldq, w, m, n0, n1);
    else run(&o, xq, ldq, w, m, n0, n1);
}

void moe8_gemm_q8_f32_amx(float *y, int ldy, const int8_t *xq, int ldq, const float *sx,
                          const int32_t *xsum, const moe8_qmat *w, int m, int n0, int n1) {
    const gemm_out o = {NULL, 0, y, ldy, sx, xsum};
    MOE8_ASSERT(w->layout == &moe8_qlayout_k4u);
    if (m <= 0 || n1 <= n0) return;
    if (m < MIN_ROWS) moe8_gemm_q8_f32_avx512(y, ldy, xq, ldq, sx, xsum, w, m, n0, n1);
    else run(&o, xq, ldq, w, m, n0, n1);
}

/* ---- roofline probe --------------------------------------------------------- */

double moe8_tdpbsud_peak_amx(long n_iter, uint32_t *sink) {
    _Alignas(64) int8_t buf[1024];
    _Alignas(64) int32_t out[256];
    for (int i = 0; i < 1024; i++) buf[i] = (int8_t)(i * 37 + (int)(*sink & 1));
    use_rows(16);
    _tile_loadd(4, buf, 64);
    _tile_loadd(5, buf, 64);
    _tile_loadd(6, buf, 64);
    _tile_loadd(7, buf, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const double t0 = moe8_time_s();
    for (long i = 0; i < n_iter; i++) {
        _tile_dpbsud(0, 4, 6);
        _tile_dpbsud(1, 4, 7);
        _tile_dpbsud(2, 5, 6);
        _tile_dpbsud(3, 5, 7);
    }
    const double t = moe8_time_s() - t0;
    _tile_stored(0, out, 64);
    *sink ^= (uint32_t)out[0] ^ (uint32_t)out[255];
    return t;
}
