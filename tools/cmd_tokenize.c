/*
 * cmd_tokenize.c — `moe8 tokenize`: the token ids of a text as a model reads
 * it, space-separated on one line of stdout: BOS first when
 * tokenizer_config.json says add_bos_token (as Hugging Face tokenizers add
 * it), then moe8_tokenize's ids.
 *
 * The text comes from -p or -f, in one place (input_text): the chat-template
 * options (--messages, --render, --add-generation-prompt, --template-kwargs)
 * are to become a third source there, rendering the messages to the text that
 * is then tokenized as any other.
 *
 * Uses only the public header.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define CMD "tokenize"
#define MAX_TEXT (256u << 20)

typedef struct {
    const char *dir;       /* -m: model folder or tokenizer folder */
    const char *prompt;    /* -p TEXT */
    const char *file;      /* -f FILE */
    int no_special;        /* --no-special */
    int no_bos;            /* --no-bos */
} opts;

static void usage(FILE *f) {
    fprintf(f,
        "usage: moe8 tokenize -m DIR (-p TEXT | -f FILE) [--no-special] [--no-bos]\n"
        "  -m DIR        a model folder, or a folder holding just tokenizer.json\n"
        "                (+ tokenizer_config.json)\n"
        "  -p TEXT       the text (UTF-8)\n"
        "  -f FILE       the text of a file (UTF-8, regular, at most 256 MiB)\n"
        "  --no-special  special tokens' text is plain text (\"<|im_end|>\" is not one token)\n"
        "  --no-bos      no BOS, even when tokenizer_config.json says add_bos_token\n"
        "output: stdout the ids, space-separated on one line (BOS first when the tokenizer\n"
        "adds one).\n");
}

/* 0: parsed; 1: help printed; 2: bad command line (said on stderr). */
static int parse(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        }
        const char **value = !strcmp(a, "-m") ? &o->dir : !strcmp(a, "-p") ? &o->prompt
                           : !strcmp(a, "-f") ? &o->file : NULL;
        if (!strcmp(a, "--no-special")) {
            o->no_special = 1;
        } else if (!strcmp(a, "--no-bos")) {
            o->no_bos = 1;
        } else if (!value) {
            fprintf(stderr, "moe8 " CMD ": unknown option '%s' (see -h)\n", a);
            return 2;
        } else if (!v) {
            fprintf(stderr, "moe8 " CMD ": %s needs a value\n", a);
            return 2;
        } else {
            *value = v;
            i++;
        }
    }
    if (!o->dir) {
        fprintf(stderr, "moe8 " CMD ": -m DIR is required (see -h)\n");
        return 2;
    }
    if (!o->prompt == !o->file) {
        fprintf(stderr, "moe8 " CMD ": give the text with -p TEXT or -f FILE (one of them)\n");
        return 2;
    }
    return 0;
}

/* The text to tokenize into a heap buffer; 0, or 1 after saying why not. */
static int input_text(const opts *o, char **text, size_t *len) {
    moe8_error err;
    if (o->prompt) {
        *len = strlen(o->prompt);
        if (!(*text = strdup(o->prompt))) {
            fprintf(stderr, "moe8 " CMD ": out of memory\n");
            return 1;
        }
        return 0;
    }
    if (moe8_read_file(o->file, MAX_TEXT, text, len, &err) != MOE8_OK) return cli_fail(CMD, &err);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    opts o;
    moe8_tokenizer *tok = NULL;
    moe8_error err;
    char *text = NULL;
    size_t len = 0, n = 0;
    int32_t *ids = NULL;
    unsigned flags;
    int rc = parse(argc, argv, &o), bos;
    if (rc) return rc == 1 ? 0 : 2;
    flags = o.no_special ? MOE8_TOKENIZE_NO_SPECIAL : 0;
    if (moe8_tokenizer_load(o.dir, &tok, &err) != MOE8_OK) return cli_fail(CMD, &err);
    if ((rc = input_text(&o, &text, &len)) != 0) goto free_tok;
    bos = moe8_tokenizer_add_bos(tok) && !o.no_bos;
    moe8_tokenize_ex(tok, text, len, flags, NULL, 0, &n, NULL);   /* count */
    if (!(ids = malloc((n + 1) * sizeof *ids))) {
        fprintf(stderr, "moe8 " CMD ": out of memory for %zu ids\n", n + 1);
        rc = 1;
        goto free_text;
    }
    if (moe8_tokenize_ex(tok, text, len, flags, ids + bos, n, &n, &err) != MOE8_OK) {
        rc = cli_fail(CMD, &err);
        goto free_ids;
    }
    if (bos) ids[0] = moe8_tokenizer_bos_id(tok);
    for (size_t i = 0; i < n + (size_t)bos; i++) printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "moe8 " CMD ": cannot write the ids to stdout\n");
        rc = 1;
    }
free_ids:
    free(ids);
free_text:
    free(text);
free_tok:
    moe8_tokenizer_free(tok);
    return rc;
}
