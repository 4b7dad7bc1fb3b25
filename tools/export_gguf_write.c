/*
 * export_gguf_write.c — the GGUF file of `moe8 export-gguf` (export_gguf.h):
 * the metadata buffer, then the header and every tensor's data.
 *
 * The file (GGUF version 3, little-endian; ggml's gguf.h / gguf-py):
 *   u32 magic "GGUF", u32 version 3, u64 n_tensors, u64 n_kv
 *   n_kv x  { str key, u32 value type, value }          str = u64 length + bytes
 *           (arrays: u32 element type, u64 count, elements)
 *   n_tensors x { str name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset }
 *   zero padding to general.alignment (32), then the tensor data, each tensor
 *   at its offset from the start of the data, offsets multiples of 32.
 * ne[] is ggml's order, the reverse of the row-major shape: a Hugging Face
 * weight [out][in] is ne {in, out}, the stacked experts [E][out][in] are
 * ne {in, out, E}.
 *
 * Types: norms, biases (1-D) and the router stay F32, as convert_hf_to_gguf.py
 * keeps them; every other matrix is --type: Q8_0 (blocks of 32 along a row:
 * f16 scale d = max|x| / 127, then 32 int8 roundf(x / d), as ggml's
 * quantize_row_q8_0_ref), F16 or BF16 (round to nearest even; a BF16 input is
 * copied byte for byte). A weight that is not finite is refused, naming it.
 * A tensor with a transform (1 + w, -exp(w)) or a row or column order
 * (row_of, col_of) goes through fp32 row by row; a transposed source
 * (gpt_oss's float experts [E][in][out]) through fp32 a slab at a time.
 *
 * MXFP4 (ggml's block_mxfp4, 17 bytes per 32 values): the e8m0 scale byte as
 * the checkpoint's _scales holds it (ggml's value table is e2m1 doubled and
 * its scale 2^(e - 128), the same product), then 16 bytes whose low nibble is
 * value j and high nibble value j + 16, where the checkpoint's byte j holds
 * values 2j (low) and 2j + 1 (high): convert_hf_to_gguf.py's
 * transform_nibble_layout. The codes are moved, never requantized; a scale
 * of 255 (e8m0's NaN) is refused, naming the tensor.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "export_gguf.h"

/* ------------------------------------------------------------------------ */
/* A growable byte buffer for the header                                     */
/* ------------------------------------------------------------------------ */


void xg_put(xg_bytes *b, const void *d, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

/* Host order is written as is: moe8 runs on little-endian CPUs only. */
void xg_put_u32(xg_bytes *b, uint32_t v) { xg_put(b, &v, 4); }
void xg_put_u64(xg_bytes *b, uint64_t v) { xg_put(b, &v, 8); }
static void put_strn(xg_bytes *b, const char *s, size_t n) {
    xg_put_u64(b, n);
    xg_put(b, s, n);
}
void xg_put_str(xg_bytes *b, const char *s) { put_strn(b, s, strlen(s)); }



static void kv_key(xg_kvs *k, const char *key, uint32_t type) {
    xg_put_str(&k->b, key);
    xg_put_u32(&k->b, type);
    k->n++;
}
void xg_kv_u32(xg_kvs *k, const char *key, uint32_t v) {
    kv_key(k, key, GV_U32);
    xg_put_u32(&k->b, v);
}
void xg_kv_f32(xg_kvs *k, const char *key, float v) {
    kv_key(k, key, GV_F32);
    xg_put(&k->b, &v, 4);
}
void xg_kv_bool(xg_kvs *k, const char *key, int v) {
    unsigned char c = v ? 1 : 0;
    kv_key(k, key, GV_BOOL);
    xg_put(&k->b, &c, 1);
}
void xg_kv_str(xg_kvs *k, const char *key, const char *v) {
    kv_key(k, key, GV_STR);
    xg_put_str(&k->b, v);
}
/* An array's header; the caller appends its n elements. */
void xg_kv_arr(xg_kvs *k, const char *key, uint32_t elem_type, uint64_t n) {
    kv_key(k, key, GV_ARR);
    xg_put_u32(&k->b, elem_type);
    xg_put_u64(&k->b, n);
}
void xg_kv_au32(xg_kvs *k, const char *arch, const char *key, uint32_t v) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    xg_kv_u32(k, full, v);
}
void xg_kv_af32(xg_kvs *k, const char *arch, const char *key, float v) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    xg_kv_f32(k, full, v);
}
void xg_kv_abool(xg_kvs *k, const char *arch, const char *key, int v) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    xg_kv_bool(k, full, v);
}


/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

int xg_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    cli_verr(CMD, fmt, ap);
    va_end(ap);
    return -1;
}

uint64_t xg_type_row_bytes(int type, uint64_t ne0) {
    switch (type) {
    case GGML_F32: return 4 * ne0;
    case GGML_F16:
    case GGML_BF16: return 2 * ne0;
    case GGML_MXFP4: return ne0 / 32 * MXFP4_BYTES;
    default: return ne0 / Q8_0_BLOCK * Q8_0_BYTES;
    }
}

const char *xg_type_name(int type) {
    switch (type) {
    case GGML_F32: return "F32";
    case GGML_F16: return "F16";
    case GGML_BF16: return "BF16";
    case GGML_MXFP4: return "MXFP4";
    default: return "Q8_0";
    }
}

/* ------------------------------------------------------------------------ */
/* Tensor data                                                               */
/* ------------------------------------------------------------------------ */

/* One row of n fp32 values (n a multiple of 32) as Q8_0 blocks. */
static void q8_0_row(unsigned char *dst, const float *x, int64_t n) {
    for (int64_t b = 0; b < n; b += Q8_0_BLOCK, dst += Q8_0_BYTES) {
        float amax = 0.0f;
        for (int i = 0; i < Q8_0_BLOCK; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t h = moe8_f32_to_f16(d);
        memcpy(dst, &h, 2);
        for (int i = 0; i < Q8_0_BLOCK; i++) dst[2 + i] = (unsigned char)(int8_t)roundf(x[b + i] * id);
    }
}

static int wr(xg_writer *w, const void *d, size_t n) {
    if (n && fwrite(d, 1, n, w->f) != n) return xg_fail("cannot write '%s': %s", w->path, strerror(errno));
    return 0;
}

static int pad_to(xg_writer *w, uint64_t at, uint64_t *pos) {
    static const unsigned char zero[GGUF_ALIGN];
    if (at < *pos || at - *pos > GGUF_ALIGN) return xg_fail("internal: bad padding");
    if (wr(w, zero, (size_t)(at - *pos))) return -1;
    *pos = at;
    return 0;
}

static void progress(xg_writer *w) {
    int pct = w->total ? (int)(100.0 * (double)w->done / (double)w->total) : 100;
    if (!w->tty || pct == w->last_pct) return;
    w->last_pct = pct;
    fprintf(stderr, "\rmoe8 " CMD ": writing %3d%% (%.0f / %.0f MiB)", pct,
            (double)w->done / 1048576.0, (double)w->total / 1048576.0);
}

/* One MXFP4 tensor: each row's blocks repacked (the file's comment). */
static int write_mxfp4(xg_writer *w, const xg_tensor *g) {
    const moe8_tensor *q = g->src[0], *sc = g->scales;
    const int64_t rows = (int64_t)(g->ne[1] * g->ne[2]), nb = (int64_t)g->ne[0] / 32;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t sr = g->row_of ? g->row_of[r] : r;
        const uint8_t *qb = (const uint8_t *)q->data + (size_t)(sr * nb * 16);
        const uint8_t *sb = (const uint8_t *)sc->data + (size_t)(sr * nb);
        unsigned char *o = w->out;
        for (int64_t b = 0; b < nb; b++, o += MXFP4_BYTES, qb += 16) {
            if (sb[b] == 255)
                return xg_fail("tensor '%s': row %lld block %lld has scale 255 (e8m0 NaN)",
                               sc->name, (long long)sr, (long long)b);
            o[0] = sb[b];
            for (int j = 0; j < 16; j++) {
                const unsigned lo = j % 2 ? qb[j / 2] >> 4 : qb[j / 2] & 15u;
                const unsigned hi = j % 2 ? qb[8 + j / 2] >> 4 : qb[8 + j / 2] & 15u;
                o[1 + j] = (unsigned char)(lo | hi << 4);
            }
        }
        if (wr(w, w->out, (size_t)(nb * MXFP4_BYTES))) return -1;
    }
    return 0;
}

/* One fp32 row (w->row, ne[0] values) in the GGUF type, after the checks. */
static int encode_row(xg_writer *w, const xg_tensor *g, const moe8_tensor *t, int64_t r) {
    const int64_t cols = (int64_t)g->ne[0];
    const size_t rb = (size_t)xg_type_row_bytes(g->type, g->ne[0]);
    for (int64_t i = 0; g->xform && i < cols; i++)
        w->row[i] = g->xform == XG_X_PLUS1 ? 1.0f + w->row[i] : -expf(w->row[i]);
    for (int64_t i = 0; i < cols; i++)
        if (!isfinite(w->row[i]))
            return xg_fail("tensor '%s': row %lld column %lld is not finite (%g)", t->name,
                           (long long)r, (long long)i, (double)w->row[i]);
    if (g->type == GGML_Q8_0) {
        q8_0_row(w->out, w->row, cols);
    } else if (g->type == GGML_F32) {
        memcpy(w->out, w->row, rb);
    } else {
        uint16_t *o = (uint16_t *)(void *)w->out;
        for (int64_t i = 0; i < cols; i++)
            o[i] = g->type == GGML_F16 ? moe8_f32_to_f16(w->row[i]) : moe8_f32_to_bf16(w->row[i]);
    }
    return wr(w, w->out, rb);
}

/* A transposed source: each slab [ne0][src_cols] to fp32, then its columns as rows. */
static int write_transposed(xg_writer *w, const xg_tensor *g, const moe8_tensor *t) {
    const int64_t cols = (int64_t)g->ne[0], rows = (int64_t)g->ne[1], sc = g->src_cols;
    const size_t es = moe8_dtype_size(t->dtype), slab = (size_t)(cols * sc);
    float *f = malloc(slab * sizeof *f);
    moe8_error err;
    int rc = 0;
    if (!f) return xg_fail("out of memory");
    for (int64_t e = 0; e < (int64_t)g->ne[2] && !rc; e++) {
        if (moe8_convert_to_f32(f, (const char *)t->data + (size_t)e * slab * es, t->dtype, slab,
                                &err) != MOE8_OK) {
            rc = xg_fail("tensor '%s': %s", t->name, err.message);
            break;
        }
        for (int64_t r = 0; r < rows && !rc; r++) {
            const int64_t c = g->row_of[e * rows + r];
            for (int64_t i = 0; i < cols; i++) w->row[i] = f[i * sc + c];
            rc = encode_row(w, g, t, e * rows + r);
        }
    }
    free(f);
    return rc;
}

/* One source tensor's rows in the GGUF type. */
static int write_src(xg_writer *w, const moe8_st *st, const xg_tensor *g, const moe8_tensor *t) {
    /* one source of a stacked tensor holds all its ne[2] slabs */
    int64_t cols = (int64_t)g->ne[0], rows = (int64_t)(g->ne[1] * (g->n_src == 1 ? g->ne[2] : 1));
    int64_t scols = g->src_cols ? g->src_cols : cols;
    size_t es = moe8_dtype_size(t->dtype), rb = (size_t)xg_type_row_bytes(g->type, g->ne[0]);
    int copy = !g->xform && !g->row_of && !g->col_of && !g->src_cols && !g->transposed;
    copy = copy && ((g->type == GGML_F32 && t->dtype == MOE8_DT_F32) ||
               (g->type == GGML_F16 && t->dtype == MOE8_DT_F16) ||
               (g->type == GGML_BF16 && t->dtype == MOE8_DT_BF16));
    moe8_error err;
    if (g->type == GGML_MXFP4) {
        if (write_mxfp4(w, g)) return -1;
        moe8_st_release(st, g->scales);
    } else if (g->transposed) {
        if (write_transposed(w, g, t)) return -1;
    } else if (copy) {
        if (wr(w, t->data, t->n_bytes)) return -1;
    } else {
        for (int64_t r = 0; r < rows; r++) {
            int64_t sr = g->row_of ? g->row_of[r] : r;
            const unsigned char *src = (const unsigned char *)t->data + (size_t)sr * (size_t)scols * es;
            float *tmp = (float *)(void *)w->out; /* free until the row is encoded */
            if (moe8_convert_to_f32(g->col_of ? tmp : w->row, src, t->dtype,
                                    (size_t)(g->col_of ? scols : cols), &err) != MOE8_OK)
                return xg_fail("tensor '%s': %s", t->name, err.message);
            for (int64_t i = 0; g->col_of && i < cols; i++) w->row[i] = tmp[g->col_of[i]];
            if (encode_row(w, g, t, r)) return -1;
        }
    }
    moe8_st_release(st, t); /* the mapped pages are not needed again */
    w->done += rb * (uint64_t)rows;
    progress(w);
    return 0;
}

/* The header, then every tensor's data, into the open temporary file. */
int xg_write_file(xg_writer *w, xg_plan *p, xg_kvs *k) {
    xg_bytes info = {0};
    uint64_t off = 0, maxcols = 0;
    for (int i = 0; i < p->n; i++) {
        xg_tensor *g = &p->t[i];
        g->offset = off;
        off = (off + g->n_bytes + GGUF_ALIGN - 1) / GGUF_ALIGN * GGUF_ALIGN;
        xg_put_str(&info, g->name);
        xg_put_u32(&info, (uint32_t)g->n_dims);
        for (int d = 0; d < g->n_dims; d++) xg_put_u64(&info, g->ne[d]);
        xg_put_u32(&info, (uint32_t)g->type);
        xg_put_u64(&info, g->offset);
        if (g->ne[0] > maxcols) maxcols = g->ne[0];
        if ((uint64_t)g->src_cols > maxcols) maxcols = (uint64_t)g->src_cols;
        w->total += g->n_bytes;
    }
    int rc = -1;
    xg_bytes head = {0};
    xg_put(&head, "GGUF", 4);
    xg_put_u32(&head, 3);
    xg_put_u64(&head, (uint64_t)p->n);
    xg_put_u64(&head, k->n);
    w->row = malloc(maxcols * sizeof *w->row);
    w->out = malloc(maxcols * sizeof(float));
    if (info.oom || head.oom || k->b.oom || !w->row || !w->out) {
        xg_fail("out of memory");
        goto out;
    }
    uint64_t pos = 0;
    if (wr(w, head.p, head.n) || wr(w, k->b.p, k->b.n) || wr(w, info.p, info.n)) goto out;
    pos = head.n + k->b.n + info.n;
    uint64_t data0 = (pos + GGUF_ALIGN - 1) / GGUF_ALIGN * GGUF_ALIGN;
    if (pad_to(w, data0, &pos)) goto out;
    for (int i = 0; i < p->n; i++) {
        xg_tensor *g = &p->t[i];
        if (pad_to(w, data0 + g->offset, &pos)) goto out;
        for (int s = 0; s < g->n_src; s++)
            if (write_src(w, p->st, g, g->src[s])) goto out;
        pos += g->n_bytes;
    }
    if (pad_to(w, data0 + off, &pos)) goto out;
    rc = 0;
out:
    free(info.p);
    free(head.p);
    return rc;
}
