/*
 * test_isa.h — the kernel table a test runs under. ctest runs the kernel,
 * attention, MoE-layer and forward tests once per table with MOE8_ISA set
 * (CMakeLists.txt); a table this CPU lacks makes the program exit 77, which
 * ctest reports as skipped. An unknown name is a failure.
 */
#ifndef MOE8_TEST_ISA_H
#define MOE8_TEST_ISA_H

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

#endif
