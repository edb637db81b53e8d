/*
 * rill_dtype.h - tensor element types and their block layouts.
 *
 * The values are GGML's type ids (the numbers stored in GGUF tensor infos), so a GGUF type field
 * maps to rill_dtype_t without a table. Quantized types store blocks of `block_elems` values in
 * `block_bytes` bytes; a row of a quantized matrix is a whole number of blocks. Layouts follow
 * the GGUF/ggml specification (see docs/quantization.md for each block's fields).
 *
 * Thread safety: immutable; any thread.
 */
#ifndef RILL_DTYPE_H
#define RILL_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, ggml id, "label", block elements, block bytes) */
#define RILL_DTYPE_TABLE(X)       \
    X(F32, 0, "f32", 1, 4)        \
    X(F16, 1, "f16", 1, 2)        \
    X(Q4_0, 2, "q4_0", 32, 18)    \
    X(Q4_1, 3, "q4_1", 32, 20)    \
    X(Q5_0, 6, "q5_0", 32, 22)    \
    X(Q5_1, 7, "q5_1", 32, 24)    \
    X(Q8_0, 8, "q8_0", 32, 34)    \
    X(Q8_1, 9, "q8_1", 32, 36)    \
    X(Q4_K, 12, "q4_k", 256, 144) \
    X(Q5_K, 13, "q5_k", 256, 176) \
    X(Q6_K, 14, "q6_k", 256, 210) \
    X(Q8_K, 15, "q8_k", 256, 292) \
    X(BF16, 30, "bf16", 1, 2)

typedef enum rill_dtype {
#define RILL_DTYPE_ENUM_(name, id, label, be, bb) RILL_DTYPE_##name = (id),
    RILL_DTYPE_TABLE(RILL_DTYPE_ENUM_)
#undef RILL_DTYPE_ENUM_
} rill_dtype_t;

/* True when t is one of the types above. */
bool rill_dtype_valid(int t);

/* Label ("q4_k"), or "?" for an unknown type. Static string. */
const char *rill_dtype_name(rill_dtype_t t);

/* The type whose label is name (rill_dtype_name's inverse, exact and lower-case: "q8_0"), or
 * -1 for NULL or an unknown label. */
int rill_dtype_from_name(const char *name);

/* Elements per block (1 for plain float types); 0 for an unknown type. */
int64_t rill_dtype_block_elems(rill_dtype_t t);

/* Bytes per block; 0 for an unknown type. */
int64_t rill_dtype_block_bytes(rill_dtype_t t);

/* Bytes taken by a row of n elements: -1 when t is unknown, n < 0, n is not a whole number of
 * blocks, or the size would overflow int64_t. */
int64_t rill_dtype_row_bytes(rill_dtype_t t, int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* RILL_DTYPE_H */
