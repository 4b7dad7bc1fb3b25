/* test_core.c — version, status strings, error filling, dtype helpers. */
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
    const char *isa = moe8_kernel_isa();
    CHECK(!strcmp(isa, "avx2") || !strcmp(isa, "ref"));
    return test_summary();
}
