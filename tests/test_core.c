/* test_core.c — version, status strings, error filling, dtype helpers. */
#include <fenv.h>

#include "test.h"
#include "core/core.h"

int main(void) {
    moe8_error err;
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", MOE8_VERSION_MAJOR, MOE8_VERSION_MINOR, MOE8_VERSION_PATCH);
    CHECK(strcmp(moe8_version(), v) == 0);
    CHECK(moe8_version_number() == MOE8_VERSION_NUMBER);
    CHECK(strcmp(moe8_status_str(MOE8_OK), "ok") == 0);
    CHECK(strcmp(moe8_status_str(MOE8_ERR_FORMAT), "format error") == 0);
    CHECK(strcmp(moe8_status_str((moe8_status)-1000), "unknown status") == 0);
    CHECK(moe8_fail(&err, MOE8_ERR_IO, 42, "cannot open '%s'", "x.bin") == MOE8_ERR_IO);
    CHECK(err.code == MOE8_ERR_IO && err.offset == 42);
    CHECK(strcmp(err.message, "cannot open 'x.bin'") == 0);
    moe8_error_prefix(&err, "layer %d", 3);
    CHECK(strcmp(err.message, "layer 3: cannot open 'x.bin'") == 0);
    CHECK(moe8_fail(NULL, MOE8_ERR_NOMEM, -1, "ignored") == MOE8_ERR_NOMEM);
    size_t s;
    CHECK(moe8_mul_size((size_t)1 << 40, (size_t)1 << 30, &s) == -1);
    CHECK(moe8_mul_size(3, 5, &s) == 0 && s == 15);
    CHECK(moe8_add_size(SIZE_MAX, 1, &s) == -1);
    void *p = moe8_alloc_aligned(100);
    CHECK(p && ((uintptr_t)p & 63) == 0);
    moe8_free_aligned(p);
    CHECK(moe8_alloc_aligned(SIZE_MAX) == NULL);
    /* Round half to even in every rounding mode. */
    {
        static const float in[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 2.4999998f, 126.5f, -127.5f, 3.0f, 8388609.0f, 0.0f};
        static const float want[] = {0.0f, 2.0f, 2.0f, -0.0f, -2.0f, -2.0f, 2.0f, 126.0f, -128.0f, 3.0f, 8388609.0f, 0.0f};
        static const int modes[] = {FE_TONEAREST, FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO};
        int bad = 0;
        for (size_t m = 0; m < 4; m++) {
            fesetround(modes[m]);
            for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) bad += moe8_round_even(in[i]) != want[i];
            fesetround(FE_TONEAREST);
        }
        CHECKF(bad == 0, "%d moe8_round_even results differ", bad);
        CHECK(isnan(moe8_round_even(NAN)));
    }
    /* the table in use is the first of this build's that the CPU supports (no MOE8_ISA here,
     * or the one it names), and the probe's features nest */
    const char *isa = moe8_kernel_isa(), *tables = moe8_kernel_tables();
    char first[32] = "";
    for (const char *t = tables; *t; t += strcspn(t, " ") + (t[strcspn(t, " ")] ? 1 : 0))
        if (strncmp(t + strcspn(t, " ("), "(unsupported)", 13) != 0) {
            snprintf(first, sizeof first, "%.*s", (int)strcspn(t, " ("), t);
            break;
        }
    const char *forced = getenv("MOE8_ISA");
    CHECKF(!strcmp(isa, forced && forced[0] ? forced : first), "in use %s, tables '%s'", isa, tables);
    CHECK(!strcmp(isa, "avx512") || !strcmp(isa, "avx2") || !strcmp(isa, "ref"));
    CHECK(strstr(tables, "ref") != NULL);
    CHECK(!moe8_cpu()->avx512 || moe8_cpu()->avx2);
    CHECK(!moe8_cpu()->amx_int8 || moe8_cpu()->avx512);
    CHECK(!moe8_cpu()->avx512_bf16 || moe8_cpu()->avx512);
    return test_summary();
}
