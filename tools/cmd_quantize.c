/*
 * cmd_quantize.c — `moe8 quantize -i DIR -o DIR`: write a ModelSlim-layout
 * W8A8 copy of a float model folder of any supported family
 * (moe8_quantize): experts (routed and shared) W8A8_DYNAMIC, their down_proj
 * FLOAT with --down-proj float, attention (and dense MLP) W8A8 static
 * calibrated on a built-in text or --calib FILE (W4A8_DYNAMIC with --linear
 * w4a8: moe8's own, nothing calibrated), lm_head FLOAT or
 * (--lm-head w8a8) W8A8_DYNAMIC, the rest FLOAT; the hybrids by msModelSlim's
 * recipe (NOTES). Progress on stderr, a
 * summary on stdout. Uses only the public headers.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define SYNOPSIS "moe8 quantize -i DIR -o DIR [options]"
#define NOTES                                                                             \
    "qwen3_next / qwen3_5_moe (hybrid linear attention) follow msModelSlim's W8A8 recipe:\n" \
    "W8A8_DYNAMIC full-attention q/k/v, routed experts and (qwen3_next) in_proj_qkvz\n"     \
    "(--linear float keeps q/k/v and in_proj_qkvz float), everything else FLOAT;\n"        \
    "smoothing not applied, nothing calibrated; qwen3_5_moe's stacked experts are\n"       \
    "written per expert; --experts w4a8 makes their routed experts W4A8_DYNAMIC.\n"

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
        cli_err("quantize", "--calib: %s", err.message);
        return NULL;
    }
    return buf;
}

/* Options into p; returns 0, or the exit status for a usage error / --help. */
static int parse_args(int argc, char **argv, moe8_quantize_params *p, const char **in,
                      const char **out, const char **calib) {
    int linear = p->linear_float != 0, lm_head = p->lm_head_w8a8 != 0, down = p->down_proj_float != 0,
        deq = p->deq_scale_f32 != 0, experts = p->experts_w4a8 != 0;
    const cli_opt opts[] = {
        {"-i", NULL, CLI_STR, in, .arg = "DIR", .help = "float model folder (only read)"},
        {"-o", NULL, CLI_STR, out, .arg = "DIR", .help = "output folder (must not exist or be empty, unless --force;\n"
         "never the input or inside it)"},
        {"--calib", NULL, CLI_STR, calib, .arg = "FILE", .help = "calibration text for the W8A8 attention, a regular file\n"
         "of at most 64 MiB (default: built in)"},
        {"--linear", NULL, CLI_CHOICE, &linear, .choices = "w8a8,float,w4a8",
         .arg = "w8a8|float|w4a8", .help = "attention and dense MLP: W8A8 static (default), FLOAT,\n"
         "or W4A8_DYNAMIC (int4 per channel, per-token int8 activations)"},
        {"--lm-head", NULL, CLI_CHOICE, &lm_head, .choices = "float,w8a8", .arg = "float|w8a8",
         .help = "lm_head: FLOAT (default, as ModelSlim) or W8A8_DYNAMIC\n"
         "(int8 rows, per-row scale; refused with tie_word_embeddings)"},
        {"--down-proj", NULL, CLI_CHOICE, &down, .choices = "w8a8,float", .arg = "w8a8|float",
         .help = "every expert's down_proj (routed and shared): W8A8_DYNAMIC\n"
         "(default) or FLOAT beside W8A8_DYNAMIC gate/up"},
        {"--experts", NULL, CLI_CHOICE, &experts, .choices = "w8a8,w4a8", .arg = "w8a8|w4a8",
         .help = "routed experts: W8A8_DYNAMIC (default) or W4A8_DYNAMIC\n"
         "(int4 per channel with a clip search, msModelSlim's layout)"},
        {"--deq-dtype", NULL, CLI_CHOICE, &deq, .choices = "int64,float32", .arg = "int64|float32",
         .help = "storage of deq_scale (default int64: fp32 bits)"},
        {"--shard-size", NULL, CLI_SIZE, &p->shard_bytes, .arg = "N[K|M|G]",
         .help = "most tensor bytes per safetensors file (default 4G)"},
        {"--threads", "-t", CLI_INT, &p->n_threads, 1, 4096, .arg = "N",
         .help = "threads for calibration (default: all)"},
        {"--force", NULL, CLI_FLAG, &p->force, .help = "replace a non-empty output folder"},
        {0},
    };
    const int rc = cli_parse("quantize", SYNOPSIS, opts, NOTES, argc, argv);
    if (rc) return rc;
    p->linear_float = linear == 1;
    p->linear_w4a8 = linear == 2;
    p->lm_head_w8a8 = lm_head == 1;
    p->down_proj_float = down == 1;
    p->deq_scale_f32 = deq == 1;
    p->experts_w4a8 = experts == 1;
    if (!*in || !*out) {
        cli_usage(stderr, SYNOPSIS, opts, NOTES);
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
