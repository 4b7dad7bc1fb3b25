/*
 * test_cli_opts.c — the subcommands' option table (tools/cli_opts.c) through
 * the moe8 binary: each command's -h lists its options with "-h, --help"
 * last and exits 0; a bad value of each kind (integer, size, number with an
 * open bound, choice, KV type, u64), an unknown option and a missing value
 * exit 2 before anything is loaded, each with the one message format
 * "moe8 CMD: FLAG wants WHAT, got 'VALUE'".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test.h"
#include "fixture_model.h"

static char g_out[1 << 16];

/* Run `moe8 ARGS` (stdout and stderr into g_out); its exit status. */
static int cli(const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", MOE8_CLI, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    const size_t n = fread(g_out, 1, sizeof g_out - 1, p);
    g_out[n] = '\0';
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void) {
    static const struct {
        const char *cmd, *first_opt;
    } helps[] = {
        {"generate", "  -m DIR "},   {"serve", "  --host ADDR "}, {"perplexity", "  -c N "},
        {"inspect", "  --kv-type T "}, {"tokenize", "  --no-bos "}, {"quantize", "  -t, --threads N "},
        {"make-model", "  --preset P "}, {"pack", "  --verify "},
        {"export-gguf", "  --type T "}, {"bench moe", "  --tokens LIST "},
        {"bench forward", "  --ctx LIST "}, {"bench sched", "  --running LIST "},
        {"bench grammar", "  -m, --tokenizer DIR"}, {"bench serve", "  -n, --num-prompts N "},
    };
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++) {
        char args[64];
        snprintf(args, sizeof args, "%s --help", helps[i].cmd);
        const int rc = cli(args);
        CHECKF(rc == 0 && strstr(g_out, "usage: moe8 ") && strstr(g_out, helps[i].first_opt) &&
                   strstr(g_out, "  -h, --help "),
               "%s: exit %d:\n%s", args, rc, g_out);
    }
    static const struct {
        const char *args, *want;
    } bad[] = {
        {"serve -m x --port 70000", "moe8 serve: --port wants an integer in 0..65535, got '70000'"},
        {"serve -m x --port ' 80'", "--port wants an integer in 0..65535, got ' 80'"},
        {"serve -m x --timeout 0", "--timeout wants a number in [0.001, 86400], got '0'"},
        {"serve -m x --body-min-rate -1", "--body-min-rate wants a number in [0, 1e+12], got '-1'"},
        {"serve -m x --max-body 0", "--max-body wants a positive byte count (optional K, M or G), got '0'"},
        {"serve -m x --max-buffered 5T", "--max-buffered wants a positive byte count"},
        {"serve -m x --tool-call-parser llama3", "--tool-call-parser wants one of hermes|deepseek_v3|mistral|glm45|glm4_moe|glm47|minimax_m2|qwen3_coder|openai, got 'llama3'"},
        {"serve -m x --kv-type f8", "--kv-type wants one of f32|f16|bf16, got 'f8'"},
        {"serve -m x --no-such-flag", "moe8 serve: unknown option '--no-such-flag'"},
        {"serve -m x --port", "moe8 serve: --port wants a value (N)"},
        {"generate -m x -p y --top-p 0", "--top-p wants a number in (0, 1], got '0'"},
        {"generate -m x -p y --temp inf", "--temp wants a number in [0, 1e+06], got 'inf'"},
        {"generate -m x -p y --seed 18446744073709551616", "--seed wants an integer in 0..18446744073709551615"},
        {"generate -m x -p y --kv-mb 0", "--kv-mb wants an integer in 1..16777216, got '0'"},
        {"perplexity -m x -f y -c 7", "moe8 perplexity: -c wants an integer in 8..1048576, got '7'"},
        {"inspect -m x -c -5", "moe8 inspect: -c wants an integer in 1..2147483647, got '-5'"},
        {"tokenize -m x -p", "moe8 tokenize: -p wants a value (TEXT)"},
        {"quantize -i a -o b --deq-dtype f16", "--deq-dtype wants one of int64|float32, got 'f16'"},
        {"make-model --preset tiny -o x --layers 513", "--layers wants an integer in 1..512, got '513'"},
        {"pack -m x --rank -1", "moe8 pack: --rank wants an integer in 0..4095, got '-1'"},
        {"export-gguf -m x -o y --type q4_0", "--type wants one of q8_0|f16|bf16, got 'q4_0'"},
        {"bench moe --tokens 1,,2", "moe8 bench: --tokens wants 1 to 32 comma-separated integers in 1..1048576, got '1,,2'"},
        {"bench forward -m x --kv-type f8", "moe8 bench forward: --kv-type wants one of f32|f16|bf16"},
        {"bench sched -m x --running 0", "moe8 bench sched: --running wants 1 to 16 comma-separated"},
        {"bench serve --url http://127.0.0.1:1 --request-rate 0", "moe8 bench serve: --request-rate wants a number in [0.01, inf], got '0'"},
        {"bench serve --url http://127.0.0.1:1 --endpoint embeddings", "--endpoint wants one of completions|chat|responses|messages, got 'embeddings'"},
        {"bench grammar --n-vocab 0", "moe8 bench grammar: --n-vocab wants an integer in 1..16777216"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const int rc = cli(bad[i].args);
        CHECKF(rc == 2 && strstr(g_out, bad[i].want), "moe8 %s: exit %d, wanted '%s':\n%s",
               bad[i].args, rc, bad[i].want, g_out);
    }
    /* JSON given on a command line takes the library's one policy: nothing after
     * the value, no key twice (checked once the model is loaded) */
    {
        fx_opts o = fx_default_opts();
        const char *dir = fx_test_model("cli_opts_model", &o, 1);
        char args[4400];
        snprintf(args, sizeof args, "serve -m '%s' --port 0 --default-chat-template-kwargs "
                 "'{\"a\": 1, \"a\": 2}'", dir);
        CHECKF(cli(args) != 0 && strstr(g_out, "duplicate key 'a'"), "%s", g_out);
        snprintf(args, sizeof args, "serve -m '%s' --port 0 --default-chat-template-kwargs "
                 "'{\"a\": 1} x'", dir);
        CHECKF(cli(args) != 0 && strstr(g_out, "unexpected bytes after the JSON value"), "%s", g_out);
        snprintf(args, sizeof args, "generate -m '%s' -p hi --chat --chat-template-kwargs '{} x'", dir);
        CHECKF(cli(args) == 2 && strstr(g_out, "--chat-template-kwargs wants a JSON object"), "%s", g_out);
    }
    printf("%zu commands' usage from their tables, %zu bad command lines refused\n",
           sizeof helps / sizeof helps[0], sizeof bad / sizeof bad[0]);
    return test_summary();
}
