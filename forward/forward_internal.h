/*
 * forward_internal.h - what the forward passes share (forward.c: llama/qwen2; whisper.c: the
 * Whisper decoder): the KV cache's struct and its constructor. A cache belongs to the forward
 * (or whisper) that made it: `owner` is that object, and each pass refuses a cache of another.
 * Private to forward/.
 */
#ifndef RILL_FORWARD_INTERNAL_H
#define RILL_FORWARD_INTERNAL_H

#include <stdint.h>

#include "rill_backend.h"
#include "rill_forward.h"

struct rill_kv_cache {
    rill_backend_t *be;
    const void *owner; /* the rill_forward_t or rill_whisper_t it was made for */
    int32_t n_layer;
    rill_kv_layout_t layout;
    int64_t pool_bytes; /* per layer */
    void *mem;          /* n_layer pools back to back */
    void **pools;       /* host: [n_layer] layer pools (backend pointers), for page copies */
};

/* n_layer pools of the layout (dtype for K and V: F16 or F32 only, page_size, n_kv_heads,
 * head_dim, n_pages) in be's memory, tagged with owner. Errors: RILL_EINVAL (bad layout, another
 * dtype), RILL_ENOMEM; *out NULL on error. */
rill_err_t rill__kv_cache_new(rill_backend_t *be, const void *owner, int32_t n_layer,
                              int32_t n_kv_heads, int32_t head_dim, rill_dtype_t dtype,
                              int32_t page_size, int32_t n_pages, rill_kv_cache_t **out);

/* rill__kv_cache_new() with K and V of their own types (each F32, F16, Q8_0 or Q4_0:
 * rill_kv_type_ok). Errors: as rill__kv_cache_new(). */
rill_err_t rill__kv_cache_new_types(rill_backend_t *be, const void *owner, int32_t n_layer,
                                    int32_t n_kv_heads, int32_t head_dim, rill_dtype_t k_dtype,
                                    rill_dtype_t v_dtype, int32_t page_size, int32_t n_pages,
                                    rill_kv_cache_t **out);

#endif /* RILL_FORWARD_INTERNAL_H */
