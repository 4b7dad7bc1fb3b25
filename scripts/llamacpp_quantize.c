/* llamacpp_quantize.c — requantize a GGUF with llama.cpp's own quantizer, from
 * the libllama.so that node-llama-cpp ships (it carries no llama-quantize
 * binary), so that benchmarks can compare moe8 with llama.cpp's Q4_K_M of the
 * same weights. Run by hand or by scripts/bench_llamacpp_family.sh; not part
 * of the build.
 *
 *   cc -O1 -o /tmp/llamacpp_quantize scripts/llamacpp_quantize.c -ldl
 *   /tmp/llamacpp_quantize LIBLLAMA.so IN.gguf OUT.gguf FTYPE [THREADS]
 *
 * FTYPE is llama.cpp's llama_ftype number: 7 Q8_0, 15 Q4_K_M, 14 Q4_K_S,
 * 2 Q4_0. Only the first two fields of llama_model_quantize_params (nthread,
 * ftype) are set, over the library's defaults: they have kept their offsets in
 * every llama.h since the struct appeared; the rest is left as returned. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct params { int32_t nthread; int32_t ftype; unsigned char rest[504]; };

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s LIBLLAMA.so IN.gguf OUT.gguf FTYPE [THREADS]\n", argv[0]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "%s: %s\n", argv[1], dlerror());
        return 1;
    }
    struct params (*defaults)(void) = (struct params (*)(void))dlsym(lib, "llama_model_quantize_default_params");
    uint32_t (*quantize)(const char *, const char *, const struct params *) =
        (uint32_t (*)(const char *, const char *, const struct params *))dlsym(lib, "llama_model_quantize");
    void (*backend_init)(void) = (void (*)(void))dlsym(lib, "llama_backend_init");
    if (!defaults || !quantize) {
        fprintf(stderr, "%s: llama_model_quantize not exported\n", argv[1]);
        return 1;
    }
    if (backend_init)
        backend_init();
    struct params p = defaults();
    p.ftype = atoi(argv[4]);
    p.nthread = argc > 5 ? atoi(argv[5]) : 0;
    uint32_t rc = quantize(argv[2], argv[3], &p);
    if (rc) {
        fprintf(stderr, "llama_model_quantize %s -> %s failed (%u)\n", argv[2], argv[3], rc);
        return 1;
    }
    return 0;
}
