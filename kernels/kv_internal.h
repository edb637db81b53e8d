/*
 * kv_internal.h - byte addresses inside a paged KV pool (the layout rill_backend.h documents:
 * per page K (Hkv, P, D) then V (Hkv, P, D), elements of the pool's dtype).
 *
 * A layout header: it depends on the public rill_backend.h only (for rill_kv_layout_t) and is
 * shared by the reference arithmetic (ggml_ref.c) and every backend. Private to kernels/ and its
 * tests. Where it sits among the other headers: kernels/backend_internal.h, top comment.
 */
#ifndef RILL_KV_INTERNAL_H
#define RILL_KV_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rill_backend.h"

/* Element size of a KV pool (2 or 4 bytes). */
static inline size_t rill__kv_elt(const rill_kv_layout_t *kv) {
    return kv->dtype == RILL_DTYPE_F16 ? 2u : 4u;
}

/* Bytes of K (or of V) in one page: Hkv * P * D elements. */
static inline size_t rill__kv_half_bytes(const rill_kv_layout_t *kv) {
    return (size_t)kv->n_kv_heads * (size_t)kv->page_size * (size_t)kv->head_dim * rill__kv_elt(kv);
}

/* Byte offset of slot `row` (0..P-1) of KV head h in a page; K part (V adds half a page). */
static inline size_t rill__kv_row_offset(const rill_kv_layout_t *kv, int32_t h, int32_t row) {
    return ((size_t)h * (size_t)kv->page_size + (size_t)row) * (size_t)kv->head_dim *
           rill__kv_elt(kv);
}

/* Address of K (v = 0) or V (v = 1) of slot `row` of KV head h in page `page` of pool. */
static inline uint8_t *rill__kv_ptr(const rill_kv_layout_t *kv, const void *pool, int32_t page,
                                    int32_t h, int32_t row, int v) {
    const size_t half = rill__kv_half_bytes(kv);
    return (uint8_t *)pool + (size_t)page * 2 * half + (size_t)v * half +
           rill__kv_row_offset(kv, h, row);
}

#endif /* RILL_KV_INTERNAL_H */
