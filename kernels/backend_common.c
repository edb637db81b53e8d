/*
 * backend_common.c - what the backends share below the dispatch layer: the common part of the
 * handle (the installed batch's arrays), the check of the CPU part of the parameters, and the
 * host-memory implementations of the memory, lookup, copy and arg-max hooks that both CPU
 * backends (ref and cpu) plug into their tables.
 *
 * These are host loops with no numerics of their own (copies, dequantization through
 * rill_quant.h, comparisons), so every backend that lives in host memory gets the same bits
 * from them; a device backend brings its own versions. Nothing here allocates on an op path.
 */
#include <math.h>
#include <string.h>

#include "backend_internal.h"
#include "rill_alloc.h"
#include "rill_quant.h"

rill_err_t rill__backend_init_common(rill_backend_t *b, const rill_backend_params_t *p) {
    b->params = *p;
    b->tok = rill_calloc(RILL_MEM_KERNELS, (size_t)p->max_batch, sizeof *b->tok);
    b->seq = rill_calloc(RILL_MEM_KERNELS, (size_t)p->max_batch, sizeof *b->seq);
    if (b->tok == NULL || b->seq == NULL) {
        rill__backend_deinit_common(b);
        return RILL_ENOMEM;
    }
    return RILL_OK;
}

void rill__backend_deinit_common(rill_backend_t *b) {
    rill_free(b->tok);
    rill_free(b->seq);
    b->tok = NULL;
    b->seq = NULL;
}

const char *rill__cpu_params_invalid(const rill_backend_params_t *p) {
    if (p->cpu.n_threads < 0 || p->cpu.n_threads > 512) {
        return "cpu.n_threads must be in [0, 512] (0: one per online CPU)";
    }
    if (p->cpu.simd != RILL_SIMD_AUTO && p->cpu.simd != RILL_SIMD_SCALAR &&
        p->cpu.simd != RILL_SIMD_AVX2 && p->cpu.simd != RILL_SIMD_AVX512) {
        return "cpu.simd is not a rill_simd_t value";
    }
    return NULL;
}

/* ---- host memory hooks ------------------------------------------------------------------- */

rill_err_t rill__host_alloc(rill_backend_t *b, size_t bytes, void **out) {
    (void)b;
    *out = rill_malloc_aligned(RILL_MEM_KERNELS, bytes, 64);
    return *out != NULL ? RILL_OK : RILL_ENOMEM;
}

void rill__host_free(rill_backend_t *b, void *p) {
    (void)b;
    rill_free(p);
}

rill_err_t rill__host_copy(rill_backend_t *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    memmove(dst, src, bytes);
    return RILL_OK;
}

rill_err_t rill__host_zero(rill_backend_t *b, void *dst, size_t bytes) {
    (void)b;
    memset(dst, 0, bytes);
    return RILL_OK;
}

rill_err_t rill__host_weight_prepare(rill_backend_t *b, rill_weight_t *w, const void *host) {
    (void)b;
    w->data = host; /* zero copy: the kernels read the mmapped layout as is */
    return RILL_OK;
}

void rill__host_weight_release(rill_backend_t *b, rill_weight_t *w) {
    (void)b;
    (void)w;
}

rill_err_t rill__host_get_rows(rill_backend_t *b, float *y, const rill_weight_t *w,
                               const int32_t *ids, int64_t n) {
    (void)b;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)ids[i] * w->row_bytes;
        (void)rill_dequantize_row(w->dtype, row, y + i * w->ne0, w->ne0);
    }
    return RILL_OK;
}

rill_err_t rill__host_get_rows_resident(rill_backend_t *b, float *y, const rill_weight_t *w,
                                        const int32_t *ids, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= w->ne1) {
            return RILL_EINVAL; /* before any write: y is untouched */
        }
    }
    return rill__host_get_rows(b, y, w, ids, n);
}

rill_err_t rill__host_argmax(rill_backend_t *b, const float *x, int64_t n_rows, int64_t n_cols,
                             int32_t *out) {
    (void)b;
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * n_cols;
        int64_t best = 0;
        float bv = -INFINITY;
        for (int64_t i = 0; i < n_cols; i++) {
            if (xr[i] > bv) { /* the first on ties; NaN never wins */
                bv = xr[i];
                best = i;
            }
        }
        out[r] = (int32_t)best;
    }
    return RILL_OK;
}

rill_err_t rill__host_kv_copy_pages(rill_backend_t *b, const rill_kv_layout_t *kv,
                                    void *const *pools, int32_t n_pools, const int32_t *src,
                                    const int32_t *dst, int32_t n) {
    (void)b;
    const size_t page = rill__kv_page_size_bytes(kv);
    for (int32_t p = 0; p < n_pools; p++) {
        uint8_t *base = pools[p];
        for (int32_t i = 0; i < n; i++) {
            memcpy(base + (size_t)dst[i] * page, base + (size_t)src[i] * page, page);
        }
    }
    return RILL_OK;
}
