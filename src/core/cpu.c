/*
 * cpu.c — run-time CPU feature probe. One binary runs on any x86-64: a
 * kernel table is used only when the CPU has its instructions and the OS
 * saves their register state (XCR0: ymm for AVX2, opmask + zmm for AVX-512;
 * for AMX, tile data that the process was granted with
 * arch_prctl(ARCH_REQ_XCOMP_PERM), which Linux asks for before first use).
 */
#include <stdlib.h>
#include <string.h>

#include "core.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

static unsigned int xcr0(void) {
    unsigned int eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return eax;
}

/* Linux: ask for the AMX tile data state (XFEATURE 18); 1 when granted. */
static int amx_permitted(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    const long ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XTILEDATA = 18;
    unsigned long bits = 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XTILEDATA) != 0) return 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bits) != 0) return 0;
    return (bits >> XTILEDATA) & 1;
#else
    return 0;
#endif
}

static void probe(moe8_cpu_features *f) {
    unsigned int a, b, c, d, x = 0;
    int fma = 0, f16c = 0, osxsave = 0, avx = 0;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        fma = (c >> 12) & 1;
        osxsave = (c >> 27) & 1;
        avx = (c >> 28) & 1;
        f16c = (c >> 29) & 1;
    }
    if (osxsave) x = xcr0();
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
    f->avx2 = ((b >> 5) & 1) && fma && f16c && avx && (x & 0x6) == 0x6;
    /* F (b16), BW (b30), VL (b31), VNNI (c11); XCR0 opmask, ZMM_Hi256, Hi16_ZMM */
    f->avx512 = f->avx2 && ((b >> 16) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1) &&
                ((c >> 11) & 1) && (x & 0xe0) == 0xe0;
    /* AMX-BF16 (d22), AMX-TILE (d24), AMX-INT8 (d25); XCR0 XTILECFG + XTILEDATA */
    f->amx_int8 = f->avx512 && ((d >> 24) & 1) && ((d >> 25) & 1) &&
                  (x & 0x60000) == 0x60000 && amx_permitted();
    f->amx_bf16 = f->amx_int8 && ((d >> 22) & 1);
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f->avx512_bf16 = f->avx512 && ((a >> 5) & 1);
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
