/*
 * cmd_tokenize.c — `moe8 tokenize`: the token ids of a text as a model reads
 * it, space-separated on one line of stdout: BOS first when
 * tokenizer_config.json says add_bos_token (as Hugging Face tokenizers add
 * it), then moe8_tokenize's ids.
 *
 * The text comes from -p, -f or --messages, in one place (input_text):
 * --messages FILE.json (an OpenAI-style [{"role", "content"}, ...] list,
 * assistant tool_calls and OpenAI's other message fields included) is
 * normalized as moe8 serve normalizes a chat request's messages
 * (moe8_chat_messages_normalize) and rendered with the model's own chat
 * template (moe8_chat_apply_json, with --add-generation-prompt and
 * --template-kwargs JSON, as llama-server's /apply-template and
 * transformers' apply_chat_template); the rendered text holds the
 * template's own BOS, so none is added to it. --render prints the rendered
 * text instead of ids.
 *
 * Uses only the public headers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"

#define CMD "tokenize"
#define MAX_TEXT (256u << 20)

typedef struct {
    const char *dir;       /* -m: model folder or tokenizer folder */
    const char *prompt;    /* -p TEXT */
    const char *file;      /* -f FILE */
    const char *messages;  /* --messages FILE.json */
    const char *kwargs;    /* --template-kwargs JSON */
    int add_gen;           /* --add-generation-prompt */
    int render;            /* --render */
    int no_special;        /* --no-special */
    int no_bos;            /* --no-bos */
} opts;

#define SYNOPSIS "moe8 tokenize -m DIR (-p TEXT | -f FILE | --messages FILE.json)\n" \
                 "                     [--add-generation-prompt] [--template-kwargs JSON] [--render]\n" \
                 "                     [--no-special] [--no-bos]"
#define NOTES "output: stdout the ids, space-separated on one line (BOS first when the tokenizer\n" \
              "adds one to a text).\n"

/* 0: parsed; 1: help printed; 2: bad command line (said on stderr). */
static int parse(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    const cli_opt opts[] = {
        {"-m", NULL, CLI_STR, &o->dir, .arg = "DIR",
         .help = "a model folder, or a folder holding just tokenizer.json\n(+ tokenizer_config.json)"},
        {"-p", NULL, CLI_STR, &o->prompt, .arg = "TEXT", .help = "the text (UTF-8)"},
        {"-f", NULL, CLI_STR, &o->file, .arg = "FILE",
         .help = "the text of a file (UTF-8, regular, at most 256 MiB)"},
        {"--messages", NULL, CLI_STR, &o->messages, .arg = "FILE.json",
         .help = "a conversation, [{\"role\": ..., \"content\": ...}, ...], rendered with\n"
         "the model's chat template (its text carries the template's BOS)"},
        {"--add-generation-prompt", NULL, CLI_FLAG, &o->add_gen,
         .help = "end with the assistant's turn opening"},
        {"--template-kwargs", NULL, CLI_STR, &o->kwargs, .arg = "JSON",
         .help = "extra template variables, e.g. '{\"enable_thinking\": false}'"},
        {"--render", NULL, CLI_FLAG, &o->render,
         .help = "print the rendered conversation instead of its ids"},
        {"--no-special", NULL, CLI_FLAG, &o->no_special,
         .help = "special tokens' text is plain text (\"<|im_end|>\" is not one token)"},
        {"--no-bos", NULL, CLI_FLAG, &o->no_bos,
         .help = "no BOS, even when tokenizer_config.json says add_bos_token"},
        {0},
    };
    const int rc = cli_parse(CMD, SYNOPSIS, opts, NOTES, argc, argv);
    if (rc) return rc < 0 ? 1 : rc;
    if (!o->dir) {
        fprintf(stderr, "moe8 " CMD ": -m DIR is required (see -h)\n");
        return 2;
    }
    if (!!o->prompt + !!o->file + !!o->messages != 1) {
        fprintf(stderr, "moe8 " CMD ": give the text with -p TEXT, -f FILE or --messages "
                "FILE.json (one of them)\n");
        return 2;
    }
    if (!o->messages && (o->add_gen || o->kwargs || o->render)) {
        fprintf(stderr, "moe8 " CMD ": --add-generation-prompt, --template-kwargs and --render "
                "apply to --messages\n");
        return 2;
    }
    return 0;
}

/* --messages FILE.json -> *json, the conversation as the chat template gets
 * it (moe8_chat_messages_normalize: tool calls' arguments parsed, content
 * parts joined, ... as moe8 serve does); 0, or 1 after saying what is wrong
 * where. */
static int read_messages(const char *path, char **json) {
    moe8_error err;
    char *text = NULL, *tools = NULL, *docs = NULL;
    size_t len = 0;
    int i = 0, rc = 0;
    const cJSON *m;
    cJSON *root;
    *json = NULL;
    if (moe8_read_file(path, MAX_TEXT, &text, &len, &err) != MOE8_OK) return cli_fail(CMD, &err);
    root = cJSON_ParseWithLength(text, len);
    if (!root || !cJSON_IsArray(root)) {
        fprintf(stderr, "moe8 " CMD ": '%s': expected a JSON array of {\"role\", \"content\"} "
                "messages\n", path);
        rc = 1;
    }
    if (!rc) cJSON_ArrayForEach(m, root) {
        if (!cJSON_IsObject(m) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(m, "role"))) {
            fprintf(stderr, "moe8 " CMD ": '%s': message %d: expected an object with a string "
                    "\"role\"\n", path, i);
            rc = 1;
            break;
        }
        i++;
    }
    cJSON_Delete(root);
    if (!rc && moe8_chat_messages_normalize(text, NULL, NULL, json, &tools, &docs, &err) != MOE8_OK) {
        fprintf(stderr, "moe8 " CMD ": '%s': %s\n", path, err.message);
        rc = 1;
    }
    free(text);
    return rc;
}

/* The conversation rendered with the tokenizer's template into a heap buffer. */
static int render_messages(const opts *o, const moe8_tokenizer *tok, char **text, size_t *len) {
    moe8_error err;
    char *msgs = NULL;
    size_t need = 0;
    int rc = read_messages(o->messages, &msgs);
    if (!rc && moe8_chat_apply_json(tok, msgs, NULL, NULL, o->add_gen, o->kwargs, NULL, 0, &need, &err) !=
                   MOE8_OK && need == 0)
        rc = cli_fail(CMD, &err);
    if (!rc && !(*text = malloc(need + 1))) {
        fprintf(stderr, "moe8 " CMD ": out of memory\n");
        rc = 1;
    }
    if (!rc && moe8_chat_apply_json(tok, msgs, NULL, NULL, o->add_gen, o->kwargs, *text, need + 1, len,
                                    &err) != MOE8_OK) {
        free(*text);
        *text = NULL;
        rc = cli_fail(CMD, &err);
    }
    free(msgs);
    return rc;
}

/* The text to tokenize into a heap buffer; 0, or 1 after saying why not. */
static int input_text(const opts *o, const moe8_tokenizer *tok, char **text, size_t *len) {
    moe8_error err;
    if (o->messages) return render_messages(o, tok, text, len);
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
    if ((rc = input_text(&o, tok, &text, &len)) != 0) goto free_tok;
    if (o.render) {
        if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
            fprintf(stderr, "moe8 " CMD ": cannot write the rendered text to stdout\n");
            rc = 1;
        }
        goto free_text;
    }
    bos = moe8_tokenizer_add_bos(tok) && !o.no_bos && !o.messages;
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
