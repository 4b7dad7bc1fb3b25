/*
 * entry_check.c — what the kernels built without sanitizer instrumentation
 * check on entry in the sanitizer build (CMakeLists.txt: MOE8_KERNEL_ENTRY_CHECK).
 * The float GEMM's per-load checks made the lm_head of every decode step
 * about 8 times slower there than in release; instead it runs uninstrumented
 * after one check here, itself instrumented, that every byte its contract
 * lets it read or write is addressable: the reads of x rows r < m (k floats
 * each) and of W rows [n0, n1) (k elements each), the writes of y rows r < m
 * at columns [n0, n1), each as the one span from its first byte to its last.
 * A kernel that strays outside its contract is caught by test_kernels, whose
 * buffers end at an unmapped page. Without ASan these are no-ops.
 */
#include "core/core.h"
#include "kernels/kernels.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>

/* The ASan report of the first unaddressable byte of [p, p + n), as if the
 * kernel had touched it. */
static void check_span(const void *p, size_t n, int is_write) {
    void *bad = n ? __asan_region_is_poisoned((void *)p, n) : NULL;
    if (bad)
        __asan_report_error(__builtin_return_address(0), __builtin_frame_address(0),
                            __builtin_frame_address(0), bad, is_write, 1);
}

void moe8_gemm_f32_wf_check(const float *y, int ldy, const float *x, int ldx, const void *w,
                            moe8_dtype wdt, int ldw, int m, int n0, int n1, int k) {
    const size_t es = moe8_dtype_size(wdt);
    if (m <= 0 || n1 <= n0 || k <= 0) return;
    check_span(x, ((size_t)(m - 1) * (size_t)ldx + (size_t)k) * sizeof *x, 0);
    check_span((const char *)w + (size_t)n0 * (size_t)ldw * es,
               ((size_t)(n1 - 1 - n0) * (size_t)ldw + (size_t)k) * es, 0);
    check_span(y + n0, ((size_t)(m - 1) * (size_t)ldy + (size_t)(n1 - n0)) * sizeof *y, 1);
}
#else
void moe8_gemm_f32_wf_check(const float *y, int ldy, const float *x, int ldx, const void *w,
                            moe8_dtype wdt, int ldw, int m, int n0, int n1, int k) {
    (void)y, (void)ldy, (void)x, (void)ldx, (void)w, (void)wdt, (void)ldw, (void)m, (void)n0,
        (void)n1, (void)k;
}
#endif
