/*
 * cmd_export_gguf.c — `moe8 export-gguf -m DIR -o FILE.gguf [--type q8_0|f16|bf16]`:
 * write a float model folder (config.json, safetensors, tokenizer.json) as one
 * GGUF file that llama.cpp loads, so the same weights can be timed and
 * cross-checked there (docs/BENCHMARKS.md). Families exported, each as the
 * llama.cpp architecture its converter (convert_hf_to_gguf.py) writes:
 * qwen3_moe as "qwen3moe" (export_gguf_qwen3moe.c), glm4_moe as "glm4moe"
 * (export_gguf_glm4moe.c), minimax_m2 as "minimax-m2"
 * (export_gguf_minimax_m2.c), qwen3_next as "qwen3next"
 * (export_gguf_qwen3next.c), qwen3_5_moe as "qwen35moe"
 * (export_gguf_qwen35moe.c), gpt_oss as "gpt-oss" (export_gguf_gptoss.c:
 * MXFP4 experts as released stay MXFP4, repacked bit for bit; --type is
 * then the other matrices'). The file's layout and
 * types: export_gguf_write.c; the tensors: export_gguf_plan.c; the
 * tokenizer: export_gguf_vocab.c.
 *
 * --layers N writes only the first N decoder layers (block_count N): timing
 * files of two depths and taking the difference gives llama.cpp's time per
 * layer without the embedding and lm_head (scripts/bench_llamacpp.mjs).
 *
 * Not done: the other families (mixtral, qwen2_moe, deepseek) are refused;
 * quantized (W8A8) checkpoints — export the float model they were made from.
 * Reads the model through the public headers only; writes
 * "<FILE>.tmp.<pid>" and renames it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export_gguf.h"

/* The families exported (a family not here is refused). */
static const xg_family *const families[] = {&xg_qwen3moe, &xg_glm4moe, &xg_minimax_m2,
                                            &xg_qwen3next, &xg_qwen35moe, &xg_gpt_oss};

static const char *base_name(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    const char *s = dir + n;
    while (s > dir && s[-1] != '/') s--;
    static char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(dir + n - s), s);
    return name;
}

/* ------------------------------------------------------------------------ */
/* The command                                                               */
/* ------------------------------------------------------------------------ */

#define SYNOPSIS "moe8 export-gguf -m DIR -o FILE.gguf [--type q8_0|f16|bf16] [--layers N] [--force]"

/* Refuse an output that is a file of the model folder, or exists without --force. */
static int check_output(const char *dir, const char *out, int force) {
    struct stat so, si;
    if (stat(out, &so) != 0) return 0;
    if (S_ISDIR(so.st_mode)) return xg_fail("'%s' is a folder", out);
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[4096];
    while (d && (e = readdir(d))) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
            /* the message before closedir, which frees e */
            xg_fail("'%s' is '%s' of the model folder: refusing to overwrite the input", out,
                 e->d_name);
            closedir(d);
            return -1;
        }
    }
    if (d) closedir(d);
    if (!force) return xg_fail("'%s' exists (--force replaces it)", out);
    return 0;
}

static int load_config(const char *dir, moe8_config *cfg) {
    char path[4096];
    char *buf = NULL;
    size_t len = 0;
    moe8_error err;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (moe8_read_file(path, (size_t)16 << 20, &buf, &len, &err) != MOE8_OK ||
        moe8_config_parse(buf, len, path, cfg, &err) != MOE8_OK) {
        free(buf);
        return xg_fail("%s", err.message);
    }
    free(buf);
    return 0;
}


/* The family exporting cfg, or NULL after a message. */
static const xg_family *find_family(const char *dir, const moe8_config *cfg) {
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (families[i]->model_arch == (int)cfg->arch) return families[i];
    xg_fail("'%s/config.json': model_type '%s': only qwen3_moe (as llama.cpp's qwen3moe), "
            "glm4_moe (as glm4moe), minimax_m2 (as minimax-m2), qwen3_next (as "
            "qwen3next), qwen3_5_moe (as qwen35moe) and gpt_oss (as gpt-oss) are exported", dir,
            cfg->model_type);
    return NULL;
}

/* general.* then the family's hyper-parameters. */
static void hparams(xg_kvs *k, const xg_plan *p) {
    xg_kv_str(k, "general.architecture", p->fam->arch);
    xg_kv_str(k, "general.type", "model");
    xg_kv_str(k, "general.name", base_name(p->dir));
    xg_kv_u32(k, "general.file_type",
              p->wtype == GGML_Q8_0 ? FTYPE_Q8_0 : p->wtype == GGML_F16 ? FTYPE_F16 : FTYPE_BF16);
    xg_kv_u32(k, "general.quantization_version", 2);
    xg_kv_u32(k, "general.alignment", GGUF_ALIGN);
    p->fam->hparams(k, p);
}

int cmd_export_gguf(int argc, char **argv) {
    const char *dir = NULL, *out = NULL;
    int force = 0, n_layers = 0, type = 0;
    const cli_opt opts[] = {
        {"-m", NULL, CLI_STR, &dir, .arg = "DIR", .help = "float qwen3_moe, glm4_moe, minimax_m2, qwen3_next, qwen3_5_moe or gpt_oss\n"
         "model folder (config.json, *.safetensors, tokenizer.json; only read;\n"
         "gpt_oss's MXFP4 experts as released are kept MXFP4)"},
        {"-o", NULL, CLI_STR, &out, .arg = "FILE", .help = "the GGUF file for llama.cpp (qwen3moe, "
         "glm4moe, minimax-m2); written to\nFILE.tmp.<pid>, then renamed"},
        {"--type", NULL, CLI_CHOICE, &type, .choices = "q8_0,f16,bf16", .arg = "T",
         .help = "matrices as q8_0 (default), f16 or bf16; norms, biases and\nthe router stay f32, "
         "MXFP4 experts MXFP4"},
        {"--layers", NULL, CLI_INT, &n_layers, 1, 512, .arg = "N",
         .help = "only the first N layers (default all): two files of different\n"
         "depths give a per-layer time by difference"},
        {"--force", NULL, CLI_FLAG, &force,
         .help = "replace an existing FILE (never a file of the model folder)"},
        {0},
    };
    const int prc = cli_parse(CMD, SYNOPSIS, opts, NULL, argc, argv);
    if (prc) return prc < 0 ? 0 : prc;
    if (!dir || !out) {
        cli_usage(stderr, SYNOPSIS, opts, NULL);
        return 2;
    }
    static const int wtypes[3] = {GGML_Q8_0, GGML_F16, GGML_BF16};
    xg_plan p = {.dir = dir};
    p.wtype = wtypes[type];

    moe8_config cfg;
    moe8_error err;
    xg_vocab v = {0};
    xg_kvs k = {0};
    xg_writer w = {.tty = isatty(2), .last_pct = -1};
    char tmp[4096] = "";
    int rc = 1, fd = -1;
    if (check_output(dir, out, force) || load_config(dir, &cfg)) goto out;
    p.cfg = &cfg;
    if (!(p.fam = find_family(dir, &cfg)) || p.fam->check(&p)) goto out;
    p.n_layers = cfg.num_hidden_layers;
    if (n_layers > p.n_layers) {
        xg_fail("--layers %d: the model has %lld layers", n_layers, (long long)p.n_layers);
        goto out;
    }
    if (n_layers) p.n_layers = n_layers;
    if (moe8_st_open(dir, &p.st, &err) != MOE8_OK) {
        cli_fail(CMD, &err);
        goto out;
    }
    if (xg_make_plan(&p) || xg_load_vocab(&v, dir, cfg.vocab_size)) goto out;
    hparams(&k, &p);
    if (xg_tokenizer_kvs(&k, &v, &p)) goto out;

    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid()) >= sizeof tmp) {
        xg_fail("'%s': path too long", out);
        tmp[0] = 0;
        goto out;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0 || !(w.f = fdopen(fd, "wb"))) {
        xg_fail("cannot create '%s': %s", tmp, strerror(errno));
        if (fd < 0) tmp[0] = 0;
        goto out;
    }
    fd = -1;
    w.path = tmp;
    setvbuf(w.f, NULL, _IOFBF, (size_t)4 << 20);
    if (xg_write_file(&w, &p, &k)) goto out;
    if (fflush(w.f) || fsync(fileno(w.f))) {
        xg_fail("cannot write '%s': %s", tmp, strerror(errno));
        goto out;
    }
    int cerr = fclose(w.f);
    w.f = NULL;
    if (cerr) {
        xg_fail("cannot write '%s': %s", tmp, strerror(errno));
        goto out;
    }
    if (rename(tmp, out)) {
        xg_fail("cannot rename '%s' to '%s': %s", tmp, out, strerror(errno));
        goto out;
    }
    tmp[0] = 0;
    if (w.tty) fputc('\n', stderr);
    printf("wrote %s: %d tensors, %llu metadata keys, %.1f MiB of %s matrices (%s, %lld "
           "layers, %lld experts)\n",
           out, p.n, (unsigned long long)k.n, (double)w.total / 1048576.0, xg_type_name(p.wtype), p.fam->arch,
           (long long)p.n_layers, (long long)cfg.num_experts);
    rc = 0;
out:
    if (w.f) fclose(w.f);
    if (fd >= 0) close(fd);
    if (tmp[0]) unlink(tmp);
    free(w.row);
    free(w.out);
    free(k.b.p);
    free(v.text);
    free(v.type);
    cJSON_Delete(v.json);
    cJSON_Delete(v.config);
    for (int i = 0; i < p.n; i++) free(p.t[i].src), free(p.t[i].row_of), free(p.t[i].col_of);
    free(p.t);
    if (p.st) moe8_st_free(p.st);
    return rc;
}