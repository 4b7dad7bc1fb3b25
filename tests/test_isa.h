/*
 * test_isa.h — the kernel table a test runs under. ctest runs the kernel,
 * attention, MoE-layer and forward tests once per table with MOE8_ISA set
 * (CMakeLists.txt); a table this CPU lacks makes the program exit 77, which
 * ctest reports as skipped. An unknown name is a failure.
 */
#ifndef MOE8_TEST_ISA_H
#define MOE8_TEST_ISA_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

/* The table under test (moe8_kernels_get()); exits 77 when MOE8_ISA names a
 * table the CPU cannot run. */
static inline const moe8_kernels *test_table_or_skip(void) {
    moe8_error e;
    if (moe8_kernels_check(&e) != MOE8_OK) {
        printf("%s\n", e.message);
        exit(e.code == MOE8_ERR_UNSUPPORTED ? 77 : 1);
    }
    printf("kernel table under test: %s (weight layout %s)\n", moe8_kernels_get()->isa,
           moe8_kernels_get()->qlayout->name);
    return moe8_kernels_get();
}

/* The table under test, or NULL when it is the scalar reference itself. */
static inline const moe8_kernels *test_table_besides_ref(void) {
    const moe8_kernels *t = test_table_or_skip();
    return strcmp(t->isa, "ref") ? t : NULL;
}

/* The later table of the registry (one the machine runs, so ctest runs it
 * too) whose kernel at `off` in moe8_kernels is the very function of table
 * t's, or NULL: t's amx table borrows the AVX-512 table's quantization, float
 * GEMM, attention and exponential, and that table's run checks them already,
 * on the same inputs. Use TEST_SHARED(t, field). */
static inline const char *test_shared_by(const moe8_kernels *t, size_t off) {
    int after = 0;
    if (!t) return NULL;
    for (int i = 0; i < moe8_kernels_n_tables(); i++) {
        const moe8_kernels *u = moe8_kernels_table(i);
        if (u == t) {
            after = 1;
        } else if (after && strcmp(u->isa, "ref") && moe8_kernels_supported(u) &&
                   !memcmp((const char *)u + off, (const char *)t + off, sizeof(void (*)(void)))) {
            return u->isa;
        }
    }
    return NULL;
}
#define TEST_SHARED(t, field) test_shared_by((t), offsetof(moe8_kernels, field))

#endif
