/*
 * embed_app.c — a program outside the moe8 tree that uses only the installed headers
 * (moe8.h, moe8_dist.h, moe8_safetensors.h) and
 * links the installed library through pkg-config (tests/test_install.sh
 * builds it against moe8.pc and against moe8-mpi.pc). Needs no model: it
 * reads a safetensors image built in memory and checks the error paths of a
 * tokenizer and a model load, which pull the tokenizer, the loader and the
 * kernels (PCRE2, utf8proc, cJSON, OpenMP) into the link.
 *
 *   embed_app         one "key value" line per check, exit 0 when all work
 *   embed_app dist2   moe8_dist_create(2, ...): prints its status and message
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <moe8.h>
#include <moe8_dist.h>
#include <moe8_safetensors.h>

/* A safetensors image with one F32 tensor "w" of shape [2][3] = 1..6. */
static size_t make_image(unsigned char *buf, size_t cap) {
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
    uint64_t n = strlen(hdr);
    float v[6] = {1, 2, 3, 4, 5, 6};
    if (8 + n + sizeof v > cap) return 0;
    for (int b = 0; b < 8; b++) buf[b] = (unsigned char)(n >> (8 * b));
    memcpy(buf + 8, hdr, n);
    memcpy(buf + 8 + n, v, sizeof v);
    return 8 + n + sizeof v;
}

static int read_tensor(void) {
    unsigned char img[256];
    size_t n = make_image(img, sizeof img);
    moe8_st *st;
    moe8_error err;
    const moe8_tensor *t;
    float v[6], sum = 0;
    if (moe8_st_open_buffer(img, n, "embedded", &st, &err) != MOE8_OK) {
        fprintf(stderr, "embed_app: %s\n", err.message);
        return 1;
    }
    t = moe8_st_find(st, "w");
    if (!t || t->dtype != MOE8_DT_F32 || t->n_elements != 6) {
        fprintf(stderr, "embed_app: tensor 'w' is wrong\n");
        moe8_st_free(st);
        return 1;
    }
    memcpy(v, t->data, sizeof v);
    for (int i = 0; i < 6; i++) sum += v[i];
    printf("tensor %s %s [%lld,%lld] sum %g\n", t->name, moe8_dtype_name(t->dtype),
           (long long)t->shape[0], (long long)t->shape[1], (double)sum);
    moe8_st_free(st);
    return 0;
}

static int dist2(void) {
    moe8_dist *d = NULL;
    moe8_error err = {0};
    moe8_status st = moe8_dist_create(2, 0, &d, &err);
    printf("dist_init 2: status %d (%s): %s\n", (int)st, moe8_status_str(st), err.message);
    moe8_dist_free(d);
    return st == MOE8_ERR_UNSUPPORTED ? 0 : 1;
}

int main(int argc, char **argv) {
    moe8_error err = {0};
    moe8_tokenizer *tok = NULL;
    moe8_model *m = NULL;
    moe8_dist *d = NULL;
    if (argc > 1 && strcmp(argv[1], "dist2") == 0) return dist2();
    printf("version %s\n", moe8_version());
    printf("version_number %d\n", moe8_version_number());
    printf("status %d %s\n", (int)MOE8_ERR_UNSUPPORTED, moe8_status_str(MOE8_ERR_UNSUPPORTED));
    if (read_tensor()) return 1;
    if (moe8_tokenizer_load("/nonexistent-moe8-tokenizer", &tok, &err) == MOE8_OK) return 1;
    printf("tokenizer error: %s\n", err.message);
    if (moe8_model_load("/nonexistent-moe8-model", NULL, &m, &err) == MOE8_OK) return 1;
    printf("model error: %s\n", err.message);
    if (moe8_dist_create(1, 0, &d, &err) != MOE8_OK) return 1;
    moe8_dist_abort(d, 3); /* one rank: returns */
    printf("abort returned, ranks %d\n", moe8_dist_size(d));
    moe8_dist_free(d);
    printf("mpi_available %d\n", moe8_dist_mpi_available());
    return 0;
}
