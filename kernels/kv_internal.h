/*
 * kv_internal.h - byte addresses inside a paged KV pool (the layout rill_backend.h documents:
 * per page K (Hkv, P, one K row) then V (Hkv, P, one V row); a row is head_dim values of
 * the part's type: F32, F16, or whole Q8_0 / Q4_0 blocks).
 *
 * A layout header: it depends on the public rill_backend.h only (for rill_kv_layout_t) and is
 * shared by the reference arithmetic (ggml_ref.c) and every backend. Private to kernels/ and its
 * tests. Where it sits among the other headers: kernels/backend_internal.h, top comment.
 */
#ifndef RILL_KV_INTERNAL_H
#define RILL_KV_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_backend.h"

/* Bytes of one row (head_dim values) of a KV part of type t: F32 4 D, F16 2 D, Q8_0 34 D / 32,
 * Q4_0 18 D / 32 (D a multiple of 32 for the block types; the layout check enforces it). */
static inline size_t rill__kv_type_row_bytes(rill_dtype_t t, int32_t head_dim) {
    switch (t) {
    case RILL_DTYPE_F16:
        return 2u * (size_t)head_dim;
    case RILL_DTYPE_Q8_0:
        return 34u * (size_t)(head_dim / 32);
    case RILL_DTYPE_Q4_0:
        return 18u * (size_t)(head_dim / 32);
    default:
        return 4u * (size_t)head_dim;
    }
}

/* True when K and V are both F16 or both F32: the layouts the SIMD attention kernels read (the
 * others go through the reference's per-head functions). */
static inline bool rill__kv_plain(const rill_kv_layout_t *kv) {
    return kv->k_dtype == kv->v_dtype &&
           (kv->k_dtype == RILL_DTYPE_F16 || kv->k_dtype == RILL_DTYPE_F32);
}

/* Element size of a plain pool (2 or 4 bytes; rill__kv_plain layouts only). */
static inline size_t rill__kv_elt(const rill_kv_layout_t *kv) {
    return kv->k_dtype == RILL_DTYPE_F16 ? 2u : 4u;
}

/* Bytes of K (v = 0) or of V (v = 1) in one page: Hkv * P rows. */
static inline size_t rill__kv_part_bytes(const rill_kv_layout_t *kv, int v) {
    return (size_t)kv->n_kv_heads * (size_t)kv->page_size *
           rill__kv_type_row_bytes(v ? kv->v_dtype : kv->k_dtype, kv->head_dim);
}

/* Bytes of one page (K and V). */
static inline size_t rill__kv_page_size_bytes(const rill_kv_layout_t *kv) {
    return rill__kv_part_bytes(kv, 0) + rill__kv_part_bytes(kv, 1);
}

/* Address of K (v = 0) or V (v = 1) of slot `row` of KV head h in page `page` of pool. */
static inline uint8_t *rill__kv_ptr(const rill_kv_layout_t *kv, const void *pool, int32_t page,
                                    int32_t h, int32_t row, int v) {
    const size_t rb = rill__kv_type_row_bytes(v ? kv->v_dtype : kv->k_dtype, kv->head_dim);
    return (uint8_t *)pool + (size_t)page * rill__kv_page_size_bytes(kv) +
           (v ? rill__kv_part_bytes(kv, 0) : 0u) +
           ((size_t)h * (size_t)kv->page_size + (size_t)row) * rb;
}

#endif /* RILL_KV_INTERNAL_H */
