/*
 * test_tokenize_cli.c — `moe8 tokenize` (the CLI binary at MOE8_CLI) against
 * the committed reference vectors of the real tokenizers
 * (tests/data/tokenizer_vectors_{llama2,deepseek_v3}.txt, made by their
 * JavaScript packages): BOS (both add one) then the vector's ids, with
 * --no-special the vector's ids with special tokens as text, with --no-bos no
 * BOS; Qwen3 (no BOS) with and without --no-special on ids from its package;
 * a model folder as -m; and the errors for bad flags, files and text.
 * Exits 77 (ctest: skipped) when .deps lacks the tokenizer files.
 */
#include <stdint.h>

#include "moe8.h"
#include "test.h"

static const char *TMP;

/* Run `moe8 tokenize ARGS` with the text in a file; stdout in out, the exit status returned. */
static int run_tokenize(const char *args, const char *text, size_t n, char *out, size_t cap) {
    char cmd[17000], in[4200], outp[4200], errp[4200];
    size_t got = 0;
    unsigned char *b;
    snprintf(in, sizeof in, "%s/text.txt", TMP);
    snprintf(outp, sizeof outp, "%s/out.txt", TMP);
    snprintf(errp, sizeof errp, "%s/err.txt", TMP);
    if (text) test_write_file(in, text, n);
    snprintf(cmd, sizeof cmd, "'%s' tokenize %s%s%s >'%s' 2>'%s'", MOE8_CLI, args,
             text ? " -f " : "", text ? in : "", outp, errp);
    int rc = test_run(cmd);
    b = test_slurp(outp, &got);
    snprintf(out, cap, "%s", b ? (char *)b : "");
    free(b);
    return rc;
}

static int err_has(const char *needle) {
    char path[4200];
    snprintf(path, sizeof path, "%s/err.txt", TMP);
    return test_file_contains(path, needle);
}

/* The expected line: "BOS IDS\n" (no BOS when bos < 0). */
static void expect_line(int32_t bos, const char *ids, char *out, size_t cap) {
    if (bos < 0) snprintf(out, cap, "%s\n", ids);
    else snprintf(out, cap, *ids ? "%d %s\n" : "%d\n", bos, ids);
}

/* Every step-th vector of the file and the first three with special tokens
 * through the CLI: as is, with --no-special when that differs, with --no-bos
 * for the first three. What is checked here is the CLI's path (the file
 * read as bytes, the flags, the line printed); the ids of every vector are
 * test_tokenizer_models' in process, so more vectors here would only load
 * the tokenizer again in more processes (a third of a CPU-second each, a
 * second under ASan). */
static void test_vectors(const char *name, const char *dir, int32_t bos, int step) {
    static char line[200000], text[70000], want[200000], got[200000];
    char path[4096], args[4300];
    int k = 0, n_special = 0, n_run = 0, n_bad = 0;
    snprintf(path, sizeof path, "%s/tests/data/tokenizer_vectors_%s.txt", MOE8_SOURCE_DIR, name);
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "cannot open %s", path);
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        char *col[6], *p = line;
        int nc = 0;
        if (line[0] == '#') continue;
        line[strcspn(line, "\n")] = '\0';
        for (; nc < 6 && p; nc++) {
            col[nc] = p;
            if ((p = strchr(p, '\t'))) *p++ = '\0';
        }
        if (nc != 6) continue;
        int special = strcmp(col[4], "=") != 0;
        if (k++ % step != 0 && !(special && n_special < 3)) continue;
        n_special += special;
        size_t n = test_unescape(col[0], strlen(col[0]), text);
        snprintf(args, sizeof args, "-m '%s'", dir);
        expect_line(bos, col[1], want, sizeof want);
        int ok = run_tokenize(args, text, n, got, sizeof got) == 0 && !strcmp(got, want);
        if (special) {
            snprintf(args, sizeof args, "-m '%s' --no-special", dir);
            expect_line(bos, col[4], want, sizeof want);
            ok = ok && run_tokenize(args, text, n, got, sizeof got) == 0 && !strcmp(got, want);
        }
        if (n_run < 3) {
            snprintf(args, sizeof args, "-m '%s' --no-bos", dir);
            expect_line(-1, col[1], want, sizeof want);
            ok = ok && run_tokenize(args, text, n, got, sizeof got) == 0 && !strcmp(got, want);
        }
        if (!ok && n_bad++ < 5) fprintf(stderr, "  %s: '%.60s': got '%.80s'\n", name, col[0], got);
        n_run++;
    }
    fclose(f);
    printf("%s: %d texts through moe8 tokenize\n", name, n_run);
    CHECKF(n_run >= 6 && n_special >= 3 && n_bad == 0, "%s: %d of %d texts differ", name, n_bad,
           n_run);
}

static void test_qwen(void) {
    static const char chat[] = "<|im_start|>user\nHi<|im_end|>\n<think>x</think>";
    char args[4300], got[4096];
    snprintf(args, sizeof args, "-m '%s'", MOE8_TOKENIZER_DIR);
    CHECK(run_tokenize(args, chat, strlen(chat), got, sizeof got) == 0);
    CHECK(!strcmp(got, "151644 872 198 13048 151645 198 151667 87 151668\n"));
    snprintf(args, sizeof args, "-m '%s' --no-special", MOE8_TOKENIZER_DIR);
    CHECK(run_tokenize(args, chat, strlen(chat), got, sizeof got) == 0);
    CHECKF(!strcmp(got, "27 91 318 4906 91 29 872 198 13048 27 91 318 6213 91 397 151667 87 "
                        "151668\n"), "got %s", got);   /* <think> is added, not special */
    snprintf(args, sizeof args, "-m '%s' -p 'a<|endoftext|>b' --no-special", MOE8_TOKENIZER_DIR);
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 0);
    CHECK(!strcmp(got, "64 27 91 8691 723 427 91 29 65\n"));
    snprintf(args, sizeof args, "-m '%s' -p ''", MOE8_TOKENIZER_DIR);
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 0 && !strcmp(got, "\n"));
}

/* A model folder: the tokenizer files beside config.json and the weights. */
static void test_model_folder(const char *llama_dir) {
    char cmd[9000], args[4300], got[256];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/model' && cp '%s/tokenizer.json' '%s/tokenizer_config.json'"
             " '%s/model/' && echo '{}' >'%s/model/config.json'", TMP, llama_dir, llama_dir, TMP, TMP);
    CHECK(test_run(cmd) == 0);
    snprintf(args, sizeof args, "-m '%s/model' -p 'Hello world'", TMP);
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 0 && !strcmp(got, "1 22557 1526\n"));
}

static void test_errors(const char *dir) {
    char args[4300], got[256];
    snprintf(args, sizeof args, "-m '%s' -p x --bogus", dir);
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 2 && !*got);
    CHECK(err_has("moe8 tokenize: unknown option '--bogus'"));
    snprintf(args, sizeof args, "-m '%s' -p", dir);
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 2 && err_has("-p wants a value (TEXT)"));
    snprintf(args, sizeof args, "-m '%s' -p x -f y", dir);
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 2 && err_has("give the text with -p TEXT"));
    snprintf(args, sizeof args, "-m '%s'", dir);
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 2 && err_has("give the text with -p TEXT"));
    CHECK(run_tokenize("-p x", NULL, 0, got, sizeof got) == 2 && err_has("-m DIR is required"));
    snprintf(args, sizeof args, "-m '%s' -f '%s/no_such_file'", dir, TMP);
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 1 && err_has("no_such_file"));
    snprintf(args, sizeof args, "-m '%s' -f '%s'", dir, TMP);   /* a folder */
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 1 && err_has("not a regular file"));
    snprintf(args, sizeof args, "-m '%s/nowhere' -p x", TMP);
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 1 && err_has("nowhere/tokenizer.json"));
    snprintf(args, sizeof args, "-m '%s'", dir);
    CHECK(run_tokenize(args, "ok \xff", 4, got, sizeof got) == 1 &&
          err_has("moe8 tokenize: tokenize: invalid utf-8 at byte 3 (0xff)"));
    CHECK(run_tokenize("-h", NULL, 0, got, sizeof got) == 0 && strstr(got, "--no-special"));
}

/* --messages: the conversation rendered with the model's own template (Qwen3's
 * gives ChatML for turns without an assistant message; thinking off writes the
 * empty think block), --render prints that text, the ids are those of the text
 * tokenized as it is (no BOS added); errors name the file and message. */
static void test_messages(const char *llama_dir) {
    static const char conv[] =
        "[{\"role\": \"system\", \"content\": \"You are terse.\"},"
        " {\"role\": \"user\", \"content\": \"Hi there\"}]";
    static const char want[] = "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n"
                               "Hi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
    char msgs[4200], args[9000], got[4096], ids_text[4096];
    snprintf(msgs, sizeof msgs, "%s/msgs.json", TMP);
    test_write_file(msgs, conv, strlen(conv));
    snprintf(args, sizeof args, "-m '%s' --messages '%s' --add-generation-prompt "
             "--template-kwargs '{\"enable_thinking\": false}' --render", MOE8_TOKENIZER_DIR, msgs);
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 0);
    CHECKF(!strcmp(got, want), "rendered: [%s]", got);
    snprintf(args, sizeof args, "-m '%s' --messages '%s' --add-generation-prompt "
             "--template-kwargs '{\"enable_thinking\": false}'", MOE8_TOKENIZER_DIR, msgs);
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 0);
    snprintf(args, sizeof args, "-m '%s' --no-bos", MOE8_TOKENIZER_DIR);
    CHECK(run_tokenize(args, want, strlen(want), ids_text, sizeof ids_text) == 0);
    CHECKF(!strcmp(got, ids_text) && !strncmp(got, "151644 8948 198", 15),
           "--messages ids [%s] vs the rendered text's [%s]", got, ids_text);
    snprintf(args, sizeof args, "-m '%s' --messages '%s'", llama_dir, msgs); /* no template */
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 1 && err_has("has no chat template"));
    test_write_file(msgs, "[{\"role\": 1}]", 13);
    snprintf(args, sizeof args, "-m '%s' --messages '%s'", MOE8_TOKENIZER_DIR, msgs);
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 1 &&
          err_has("msgs.json': message 0: expected an object with a string \"role\""));
    test_write_file(msgs, "{\"role\": \"user\"}", 17);
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 1 && err_has("expected a JSON array"));
    snprintf(args, sizeof args, "-m '%s' -p hi --render", MOE8_TOKENIZER_DIR);
    CHECK(run_tokenize(args, NULL, 0, got, sizeof got) == 2 && err_has("apply to --messages"));
}

int main(void) {
    char llama[4096], deepseek[4096], path[4200];
    snprintf(llama, sizeof llama, "%s/.deps/llama2-tokenizer", MOE8_SOURCE_DIR);
    snprintf(deepseek, sizeof deepseek, "%s/.deps/deepseek-v3-tokenizer", MOE8_SOURCE_DIR);
    const char *need[3] = {llama, deepseek, MOE8_TOKENIZER_DIR};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/tokenizer.json", need[i]);
        if (access(path, R_OK) != 0) {
            printf("SKIP: %s is missing (run make deps)\n", path);
            return 77;
        }
    }
    TMP = test_tmpdir("tokenize_cli");
    test_vectors("llama2", llama, 1, 100);
    test_vectors("deepseek_v3", deepseek, 0, 100);
    test_qwen();
    test_model_folder(llama);
    test_errors(llama);
    test_messages(llama);
    return test_summary();
}
