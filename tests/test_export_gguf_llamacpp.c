/*
 * test_export_gguf_llamacpp.c — llama.cpp runs what `moe8 export-gguf` writes
 * as moe8 runs the model folder: scripts/crosscheck_llamacpp.sh on the tiny
 * presets of glm4_moe (as glm4moe), minimax_m2 (as minimax-m2), qwen3_next
 * (as qwen3next), qwen3_5_moe (as qwen35moe, its value heads reordered as
 * llama.cpp's converter does) and gpt_oss (as gpt-oss: MXFP4 experts kept,
 * against moe8 on the float-experts folder of the same values), BF16
 * export, and its numbers checked here: the
 * last-position logits of a 15-id prompt within cosine 0.9999 of moe8's
 * (measured: 0.999993, 0.999995, 0.999991, 0.999991 and 0.999998;
 * BF16 weights are exact in both, what differs is llama.cpp's bf16
 * activations against moe8's f32), the same top-5, and the same 16 greedy
 * tokens. The reference is another implementation (llama.cpp through
 * node-llama-cpp, .deps/llamacpp, not part of `make deps`); its outputs of the
 * same script are committed in tests/data/llamacpp_crosscheck/. Exits 77
 * (skipped) without node or node-llama-cpp. What the file holds (names,
 * shapes, keys, data) is test_export_gguf.c's.
 */
#include <stdint.h>

#include "test.h"

#define FMT(buf, ...)                                                             \
    do {                                                                          \
        if (snprintf(buf, sizeof buf, __VA_ARGS__) >= (int)sizeof buf) abort();   \
    } while (0)

/* The script's table row for BF16: cosine, top-5 "same", greedy "a/b". */
static void check_arch(const char *root, const char *arch) {
    char dir[4096], out[4096], cmd[16384];
    FMT(dir, "%s/%s", root, arch);
    FMT(out, "%s/%s.md", root, arch);
    FMT(cmd, "cd '%s' && ARCH=%s TYPES=bf16 DIR='%s' MOE8='%s' sh scripts/crosscheck_llamacpp.sh "
        ">'%s'", MOE8_SOURCE_DIR, arch, dir, MOE8_CLI, out);
    int rc = test_run(cmd);
    CHECKF(rc == 0, "%s: crosscheck_llamacpp.sh exit %d", arch, rc);
    size_t n = 0;
    char *text = (char *)test_slurp(out, &n);
    const char *row = text ? strstr(text, "\n| BF16 |") : NULL;
    double cos = 0;
    int same = -1, of = -1;
    char top[64] = "";
    CHECKF(row != NULL, "%s: no BF16 row in %s", arch, out);
    if (row && sscanf(row, "\n| BF16 | %lf | %*[^|]| %*[^|]| %*[^|]| %63[^|]| %d/%d |", &cos, top,
                      &same, &of) == 4) {
        printf("%s: cosine %.6f, top-5 %s, greedy %d/%d\n", arch, cos, top, same, of);
        CHECKF(cos >= 0.9999 && cos <= 1.0000001, "%s: logits cosine %.6f", arch, cos);
        CHECKF(!strncmp(top, "same", 4), "%s: top-5 %s", arch, top);
        CHECKF(same == 16 && of == 16, "%s: %d of %d greedy tokens equal", arch, same, of);
    } else {
        CHECKF(0, "%s: cannot parse the BF16 row of %s", arch, out);
    }
    free(text);
}

int main(void) {
    char nlc[4096], cmd[8192];
    FMT(nlc, "%s/.deps/llamacpp/node_modules/node-llama-cpp/package.json", MOE8_SOURCE_DIR);
    if (access(nlc, R_OK) != 0 || test_run("command -v node >/dev/null 2>&1") != 0) {
        printf("SKIP: node or node-llama-cpp (.deps/llamacpp) missing\n");
        return 77;
    }
    const char *root = test_tmpdir("export_gguf_llamacpp");
    check_arch(root, "glm4_moe");
    check_arch(root, "minimax_m2");
    check_arch(root, "qwen3_next");
    check_arch(root, "qwen3_5_moe");
    check_arch(root, "gpt_oss");
    FMT(cmd, "rm -rf '%s'", root);
    test_run(cmd);
    return test_summary();
}
