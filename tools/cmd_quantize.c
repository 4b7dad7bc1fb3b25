/*
 * cmd_quantize.c — `moe8 quantize -i DIR -o DIR`: write a ModelSlim-layout
 * W8A8 copy of a float model folder of any supported family
 * (moe8_quantize): experts (routed and shared) W8A8_DYNAMIC, their down_proj
 * FLOAT with --down-proj float, attention (and dense MLP) W8A8 static
 * calibrated on a built-in text or --calib FILE, lm_head FLOAT or
 * (--lm-head w8a8) W8A8_DYNAMIC, the rest FLOAT. Progress on stderr, a
 * summary on stdout. Uses only moe8.h.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: moe8 quantize -i DIR -o DIR [options]\n"
            "  -i DIR              float model folder (only read)\n"
            "  -o DIR              output folder (must not exist or be empty, unless --force;\n"
            "                      never the input or inside it)\n"
            "  --calib FILE        calibration text for the W8A8 attention, a regular file of\n"
            "                      at most 64 MiB (default: built in)\n"
            "  --linear w8a8|float attention and dense MLP: W8A8 static (default) or FLOAT\n"
            "  --lm-head float|w8a8  lm_head: FLOAT (default, as ModelSlim) or W8A8_DYNAMIC\n"
            "                      (int8 rows, per-row scale; refused with tie_word_embeddings)\n"
            "  --down-proj w8a8|float  every expert's down_proj (routed and shared): W8A8_DYNAMIC\n"
            "                      (default) or FLOAT beside W8A8_DYNAMIC gate/up\n"
            "  --deq-dtype int64|float32  storage of deq_scale (default int64: fp32 bits)\n"
            "  --shard-size N[K|M|G]      most tensor bytes per safetensors file (default 4G)\n"
            "  -t N                threads for calibration, 1 to 4096 (default: all)\n"
            "  --force             replace a non-empty output folder\n");
}

typedef struct {
    int tty, last;
    char stage[16];
} progress_state;

static int progress(void *user, const char *stage, uint64_t done, uint64_t total) {
    progress_state *p = user;
    int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
    if (pct == p->last && !strcmp(stage, p->stage)) return 0;
    p->last = pct;
    snprintf(p->stage, sizeof p->stage, "%s", stage);
    if (!p->tty) return 0;
    if (!strcmp(stage, "calibrate"))
        fprintf(stderr, "\rmoe8 quantize: calibrating%s", done == total ? " done\n" : "...");
    else
        fprintf(stderr, "\rmoe8 quantize: %s %3d%% (%.1f / %.1f MiB)%s", stage, pct,
                (double)done / 1048576.0, (double)total / 1048576.0, done == total ? "\n" : "");
    return 0;
}

#define CALIB_MAX_BYTES ((size_t)64 << 20) /* --calib: 64 MiB */

/* The whole calibration file, or NULL after a message saying why. Regular
 * files only (a FIFO or /dev/zero is refused at once, never read). */
static char *read_text(const char *path, size_t *len) {
    moe8_error err;
    char *buf = NULL;
    if (moe8_read_file(path, CALIB_MAX_BYTES, &buf, len, &err) != MOE8_OK) {
        fprintf(stderr, "moe8 quantize: --calib: %s\n", err.message);
        return NULL;
    }
    return buf;
}

/* Whole string a decimal integer in [lo, hi]. */
static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    long v;
    if (!*s || isspace((unsigned char)*s)) return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* Options into p; returns 0, or the exit status for a usage error / --help. */
static int parse_args(int argc, char **argv, moe8_quantize_params *p, const char **in,
                      const char **out, const char **calib) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        }
        if (!strcmp(a, "--force")) {
            p->force = 1;
            continue;
        }
        if (!val) {
            fprintf(stderr, "moe8 quantize: %s needs a value (or is unknown)\n", a);
            return 2;
        }
        if (!strcmp(a, "-i")) *in = val;
        else if (!strcmp(a, "-o")) *out = val;
        else if (!strcmp(a, "--calib")) *calib = val;
        else if (!strcmp(a, "--linear") && (!strcmp(val, "w8a8") || !strcmp(val, "float")))
            p->linear_float = !strcmp(val, "float");
        else if (!strcmp(a, "--lm-head") && (!strcmp(val, "w8a8") || !strcmp(val, "float")))
            p->lm_head_w8a8 = !strcmp(val, "w8a8");
        else if (!strcmp(a, "--down-proj") && (!strcmp(val, "w8a8") || !strcmp(val, "float")))
            p->down_proj_float = !strcmp(val, "float");
        else if (!strcmp(a, "--deq-dtype") && (!strcmp(val, "int64") || !strcmp(val, "float32")))
            p->deq_scale_f32 = !strcmp(val, "float32");
        else if (!strcmp(a, "--shard-size") && !cli_parse_size(val, &p->shard_bytes)) {
        } else if (!strcmp(a, "-t")) {
            if (parse_int(val, 1, 4096, &p->n_threads)) {
                fprintf(stderr, "moe8 quantize: -t '%s': expected an integer in [1, 4096]\n", val);
                return 2;
            }
        } else {
            fprintf(stderr, "moe8 quantize: bad option '%s %s'\n", a, val);
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (!*in || !*out) {
        usage(stderr);
        return 2;
    }
    return 0;
}

int cmd_quantize(int argc, char **argv) {
    moe8_quantize_params p = moe8_quantize_params_default();
    moe8_quantize_stats s;
    const char *in = NULL, *out = NULL, *calib = NULL;
    char *text = NULL;
    progress_state ps = {isatty(2), -1, ""};
    moe8_error err;
    int rc = parse_args(argc, argv, &p, &in, &out, &calib);
    if (rc) return rc < 0 ? 0 : rc;
    if (calib) {
        if (!(text = read_text(calib, &p.calib_len))) return 1;
        p.calib_text = text;
    }
    p.progress = progress;
    p.progress_user = &ps;
    cli_log_warnings("quantize"); /* e.g. a removed leftover of a killed run */
    if (moe8_quantize(in, out, &p, &s, &err) != MOE8_OK) {
        free(text);
        if (ps.tty && ps.last >= 0 && ps.last < 100) fputc('\n', stderr);
        return cli_fail("quantize", &err);
    }
    free(text);
    printf("wrote %s: %lld tensors in %d file%s, %.1f MiB (input %lld tensors, %.1f MiB)",
           out, (long long)s.n_tensors_out, s.n_files, s.n_files == 1 ? "" : "s",
           (double)s.bytes_out / 1048576.0, (long long)s.n_tensors_in,
           (double)s.bytes_in / 1048576.0);
    if (s.n_calib_tokens) printf(", calibrated on %lld tokens", (long long)s.n_calib_tokens);
    printf("\n");
    return 0;
}
