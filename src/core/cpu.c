/*
 * cpu.c — run-time CPU feature probe and the MOE8_FORCE_REF switch.
 * One binary runs on any x86-64: AVX2 kernels are used only when the CPU
 * and the OS (XSAVE of ymm state) support them.
 */
#include <stdlib.h>
#include <string.h>

#include "core.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static int os_saves_ymm(void) {
    unsigned int eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return (eax & 0x6) == 0x6; /* XMM and YMM state enabled */
}

static void probe(moe8_cpu_features *f) {
    unsigned int a, b, c, d;
    int fma = 0, f16c = 0, osxsave = 0, avx = 0;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        fma = (c >> 12) & 1;
        osxsave = (c >> 27) & 1;
        avx = (c >> 28) & 1;
        f16c = (c >> 29) & 1;
    }
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d))
        f->avx2 = ((b >> 5) & 1) && fma && f16c && avx && osxsave && os_saves_ymm();
}
#else
static void probe(moe8_cpu_features *f) { (void)f; }
#endif

const moe8_cpu_features *moe8_cpu(void) {
    /* Probing is idempotent, so a benign race between threads is harmless. */
    static moe8_cpu_features features;
    static volatile int done;
    if (!done) {
        moe8_cpu_features f;
        memset(&f, 0, sizeof f);
        probe(&f);
        features = f;
        done = 1;
    }
    return &features;
}

int moe8_force_ref(void) {
    static volatile int cached = -1;
    if (cached < 0) {
        const char *v = getenv("MOE8_FORCE_REF");
        cached = (v && v[0] && strcmp(v, "0") != 0) ? 1 : 0;
    }
    return cached;
}

const char *moe8_kernel_isa(void) {
    return (!moe8_force_ref() && moe8_cpu()->avx2) ? "avx2" : "ref";
}
