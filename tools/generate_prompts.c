/*
 * generate_prompts.c — the prompts of `moe8 generate`: read as given (-p TEXT,
 * -f FILE with one prompt per non-blank line, --prompt-ids IDS,
 * --prompt-ids-file FILE), tokenized (with --chat, a user turn in the model's
 * chat template, which writes any BOS itself; else BOS only when the tokenizer
 * says add_bos), and checked against the context and the vocabulary.
 *
 * Input files are read whole through moe8_read_file: regular files only (a
 * FIFO or a device is refused at once, never read), at most 64 MiB each. Does
 * not run anything or print output.
 */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"

void gen_prompts_free(prompts *p) {
    for (int i = 0; i < p->n; i++) {
        if (p->text) free(p->text[i]);
        if (p->ids) free(p->ids[i]);
    }
    free(p->text);
    free(p->ids);
    free(p->len);
    memset(p, 0, sizeof *p);
}

static int prompts_alloc(prompts *p, int n, int with_text) {
    p->n = n;
    p->ids = calloc((size_t)n, sizeof *p->ids);
    p->len = calloc((size_t)n, sizeof *p->len);
    p->text = with_text ? calloc((size_t)n, sizeof *p->text) : NULL;
    if (p->ids && p->len && (p->text || !with_text)) return 0;
    cli_err(CMD, "out of memory");
    return -1;
}

/* Token ids "1,2,3", "1 2 3" or "1, 2,\n3": decimal ids in [0, INT32_MAX]
 * (checked against the vocabulary later) separated by whitespace and/or one
 * comma. Fills ids[] when it is not NULL; *n gets the count. 0, or -1 after a
 * message naming `what` (the flag, and the file) and the offending id's
 * position: its index from 1 and its byte offset. */
static int scan_ids(const char *what, const char *s, size_t len, int32_t *ids, size_t *n) {
    size_t i = 0, k = 0;
    *n = 0;
    while (i < len && isspace((unsigned char)s[i])) i++;
    if (i == len) {
        cli_err(CMD, "%s: no token ids", what);
        return -1;
    }
    while (i < len) {
        size_t start = i, d;
        long long v = -1;
        while (i < len && s[i] != ',' && !isspace((unsigned char)s[i])) i++;
        d = i - start;
        if (d > 0 && d < 16) {
            char buf[16], *end;
            memcpy(buf, s + start, d);
            buf[d] = '\0';
            v = isdigit((unsigned char)buf[0]) ? strtoll(buf, &end, 10) : -1;
            if (v >= 0 && *end) v = -1;
        }
        if (v < 0 || v > INT32_MAX) {
            char shown[40];
            size_t m = d < 32 ? d : 32;
            for (size_t j = 0; j < m; j++)
                shown[j] = isprint((unsigned char)s[start + j]) ? s[start + j] : '?';
            shown[m] = '\0';
            cli_err(CMD, "%s: token %zu (byte offset %zu): expected a token id in [0, %d] (ids "
                    "separated by commas or whitespace), got '%s%s'", what, k + 1, start, INT32_MAX,
                    shown, d > m ? "..." : "");
            return -1;
        }
        if (ids) ids[k] = (int32_t)v;
        k++;
        while (i < len && isspace((unsigned char)s[i])) i++;
        if (i < len && s[i] == ',') { /* a comma: another id must follow */
            i++;
            while (i < len && isspace((unsigned char)s[i])) i++;
            if (i == len) {
                cli_err(CMD, "%s: token %zu (byte offset %zu): expected a token id after the last "
                        "comma, got the end", what, k + 1, i);
                return -1;
            }
        }
    }
    *n = k;
    return 0;
}

/* One prompt of ids: `s` from --prompt-ids or a --prompt-ids-file's text. */
static int parse_prompt_ids(const char *what, const char *s, size_t len, prompts *p) {
    size_t n = 0;
    if (scan_ids(what, s, len, NULL, &n)) return -1;
    if (n > INT32_MAX) {
        cli_err(CMD, "%s: %zu token ids, more than a prompt holds", what, n);
        return -1;
    }
    if (prompts_alloc(p, 1, 0)) return -1;
    if (!(p->ids[0] = malloc(n * sizeof(int32_t)))) {
        cli_err(CMD, "out of memory for %zu token ids", n);
        return -1;
    }
    scan_ids(what, s, len, p->ids[0], &n);
    p->len[0] = (int32_t)n;
    p->n_tokens = (int64_t)n;
    return 0;
}

#define PROMPT_FILE_MAX ((size_t)64 << 20) /* -f: 64 MiB */
#define IDS_FILE_MAX ((size_t)64 << 20)    /* --prompt-ids-file: 64 MiB */

/* A whole input file (regular files only: a FIFO or a device is refused at
 * once, never read), or NULL after a message naming the flag and the file. */
static char *read_input(const char *flag, const char *path, size_t max, size_t *n_out) {
    moe8_error err;
    char *buf = NULL;
    if (moe8_read_file(path, max, &buf, n_out, &err) != MOE8_OK) {
        cli_err(CMD, "%s: %s", flag, err.message);
        return NULL;
    }
    return buf;
}

/* --prompt-ids-file: one prompt of ids, the --prompt-ids syntax. */
static int read_ids_file(const char *path, prompts *p) {
    char what[PATH_MAX + 32];
    size_t n_bytes = 0;
    char *buf = read_input("--prompt-ids-file", path, IDS_FILE_MAX, &n_bytes);
    int rc;
    if (!buf) return -1;
    snprintf(what, sizeof what, "--prompt-ids-file '%s'", path);
    rc = parse_prompt_ids(what, buf, n_bytes, p);
    free(buf);
    return rc;
}

/* One prompt per non-blank line ("\r\n" and "\r" endings accepted). A NUL
 * byte is refused: it would end the prompt there and drop the rest. */
static int read_prompt_file(const char *path, prompts *p) {
    size_t n_bytes = 0, line_no = 1;
    char *buf = read_input("-f", path, PROMPT_FILE_MAX, &n_bytes), *line;
    int n = 0, rc = -1;
    if (!buf) return -1;
    for (size_t i = 0; i < n_bytes; i++) {
        if (buf[i] == '\0') {
            cli_err(CMD, "-f: '%s' line %zu holds a NUL byte (byte offset %zu); a prompt is text",
                    path, line_no, i);
            goto done;
        }
        if (buf[i] != '\n' && buf[i] != '\r') continue;
        if (buf[i] == '\r' && i + 1 < n_bytes && buf[i + 1] == '\n') buf[i++] = '\0';
        buf[i] = '\0';
        line_no++;
    }
    for (size_t i = 0; i < n_bytes; i += strlen(buf + i) + 1) n += buf[i] != '\0';
    if (n == 0) {
        cli_err(CMD, "prompt file '%s' holds no prompt (empty or blank lines)", path);
        goto done;
    }
    if (prompts_alloc(p, n, 1)) goto done;
    n = 0;
    for (size_t i = 0; i < n_bytes; i += strlen(buf + i) + 1) {
        line = buf + i;
        if (*line && !(p->text[n++] = strdup(line))) goto done;
    }
    rc = 0;
done:
    free(buf);
    return rc;
}


/* The prompt as one user turn in the model's chat template (malloc'd), or
 * NULL with err filled. */
static char *render_chat(const moe8_tokenizer *tok, const char *text, const char *kwargs,
                         moe8_error *err) {
    moe8_chat_message msg = {"user", text};
    size_t cap = strlen(text) + 4096, need = 0;
    for (int k = 0; k < 2; k++) {
        char *buf = malloc(cap);
        if (!buf) break;
        if (moe8_chat_apply(tok, &msg, 1, 1, kwargs, buf, cap, &need, err) == MOE8_OK) return buf;
        free(buf);
        if (need < cap) return NULL; /* a real error: err says it */
        cap = need + 1;
    }
    snprintf(err->message, sizeof err->message, "cannot format the prompt: out of memory");
    return NULL;
}

/* Text -> ids (the chat template with --chat, else BOS when the tokenizer asks). */
static int tokenize_one(const moe8_tokenizer *tok, int index, const char *text, const char *kwargs,
                        int32_t **ids, int32_t *len) {
    moe8_error err;
    char *chat_buf = NULL;
    size_t n = 0, bos = !kwargs && moe8_tokenizer_add_bos(tok) && moe8_tokenizer_bos_id(tok) >= 0;
    int rc = -1;
    if (kwargs) {
        if (!(chat_buf = render_chat(tok, text, kwargs, &err))) {
            cli_err(CMD, "prompt %d: %s", index, err.message);
            return -1;
        }
        text = chat_buf;
    }
    moe8_tokenize(tok, text, strlen(text), NULL, 0, &n, NULL); /* count */
    if (n > INT32_MAX - 1 || !(*ids = malloc((n + bos + 1) * sizeof(int32_t)))) goto fail;
    if (moe8_tokenize(tok, text, strlen(text), *ids + bos, n, &n, &err) != MOE8_OK) {
        cli_err(CMD, "prompt %d: %s", index, err.message);
        goto done;
    }
    if (bos) (*ids)[0] = moe8_tokenizer_bos_id(tok);
    *len = (int32_t)(n + bos);
    rc = 0;
    goto done;
fail:
    cli_err(CMD, "cannot tokenize the prompt (out of memory)");
done:
    free(chat_buf);
    return rc;
}

int gen_check_prompts(const prompts *p, int64_t n_ctx, int64_t n_vocab) {
    for (int i = 0; i < p->n; i++) {
        if (p->len[i] == 0) {
            cli_err(CMD, "prompt %d is empty (no tokens)", i);
            return -1;
        }
        if (p->len[i] > n_ctx) {
            cli_err(CMD, "prompt %d has %d tokens, more than the context length %lld (-c)", i,
                    p->len[i], (long long)n_ctx);
            return -1;
        }
        for (int32_t j = 0; j < p->len[i]; j++)
            if (p->ids[i][j] >= n_vocab) {
                cli_err(CMD, "prompt %d: token id %d is not in the model's vocabulary [0, %lld)", i,
                        p->ids[i][j], (long long)n_vocab);
                return -1;
            }
    }
    return 0;
}

int gen_read_prompts(const opts *o, prompts *p) {
    if (o->prompt_ids)
        return parse_prompt_ids("--prompt-ids", o->prompt_ids, strlen(o->prompt_ids), p);
    if (o->ids_file) return read_ids_file(o->ids_file, p);
    if (o->file) return read_prompt_file(o->file, p);
    if (prompts_alloc(p, 1, 1) || !(p->text[0] = strdup(o->text))) return -1;
    return 0;
}

int gen_tokenize_prompts(const opts *o, const moe8_tokenizer *tok, prompts *p) {
    int rc = 0;
    for (int i = 0; p->text && i < p->n && !rc; i++) {
        rc = tokenize_one(tok, i, p->text[i], o->chat ? (o->chat_kwargs ? o->chat_kwargs : "{}") : NULL,
                          &p->ids[i], &p->len[i]);
        p->n_tokens += p->len[i];
    }
    return rc;
}
