/*
 * quant_internal.h - block structs of the GGML formats and the reference dot products.
 *
 * Private to kernels/ (and its tests). The structs mirror ggml-common.h field for field; sizes are
 * checked against rill_dtype.h's table at compile time. Every field is at most 2-byte aligned
 * except block_q8_K's float, so a row taken from an mmapped GGUF file (tensor data aligned to 32
 * bytes) can be read through these structs directly.
 *
 * Activation rows ("act rows"): a matmul with a weight of type W first converts its f32 input
 * row into W's vec_dot type. For the block types the act row is that type's blocks; for F16 and
 * BF16 it is kept as f32 values that have been rounded through f16/bf16 (the same numbers, without
 * converting them again in every dot product); for F32 it is the input itself.
 */
#ifndef RILL_QUANT_INTERNAL_H
#define RILL_QUANT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rill_quant.h"

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K  256

typedef struct block_q4_0 {
    uint16_t d;            /* f16 scale */
    uint8_t qs[QK4_0 / 2]; /* nibbles: low = values 0..15, high = values 16..31 */
} block_q4_0;

typedef struct block_q4_1 {
    uint16_t d; /* f16 scale */
    uint16_t m; /* f16 minimum */
    uint8_t qs[QK4_1 / 2];
} block_q4_1;

typedef struct block_q5_0 {
    uint16_t d;            /* f16 scale */
    uint8_t qh[4];         /* bit 4 of value j is bit j of this little-endian uint32 */
    uint8_t qs[QK5_0 / 2]; /* bits 0..3, nibbles as in Q4_0 */
} block_q5_0;

typedef struct block_q5_1 {
    uint16_t d; /* f16 scale */
    uint16_t m; /* f16 minimum */
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;

typedef struct block_q8_0 {
    uint16_t d; /* f16 scale */
    int8_t qs[QK8_0];
} block_q8_0;

typedef struct block_q8_1 {
    uint16_t d; /* f16 scale */
    uint16_t s; /* f16 of d * sum(qs) */
    int8_t qs[QK8_1];
} block_q8_1;

typedef struct block_q4_K {
    uint16_t d;         /* f16 super-scale of the 6-bit scales */
    uint16_t dmin;      /* f16 super-scale of the 6-bit mins */
    uint8_t scales[12]; /* 8 scales + 8 mins, 6 bits each (see get_scale_min_k4) */
    uint8_t qs[QK_K / 2];
} block_q4_K;

typedef struct block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[QK_K / 8]; /* bit 4 of each value */
    uint8_t qs[QK_K / 2]; /* bits 0..3 */
} block_q5_K;

typedef struct block_q6_K {
    uint8_t ql[QK_K / 2];     /* bits 0..3 */
    uint8_t qh[QK_K / 4];     /* bits 4..5 */
    int8_t scales[QK_K / 16]; /* 8-bit signed scales of the 16-value sub-blocks */
    uint16_t d;               /* f16 super-scale */
} block_q6_K;

typedef struct block_q8_K {
    float d; /* f32 scale */
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16]; /* sums of qs in groups of 16 */
} block_q8_K;

_Static_assert(sizeof(block_q4_0) == 18, "q4_0 block size");
_Static_assert(sizeof(block_q4_1) == 20, "q4_1 block size");
_Static_assert(sizeof(block_q5_0) == 22, "q5_0 block size");
_Static_assert(sizeof(block_q5_1) == 24, "q5_1 block size");
_Static_assert(sizeof(block_q8_0) == 34, "q8_0 block size");
_Static_assert(sizeof(block_q8_1) == 36, "q8_1 block size");
_Static_assert(sizeof(block_q4_K) == 144, "q4_K block size");
_Static_assert(sizeof(block_q5_K) == 176, "q5_K block size");
_Static_assert(sizeof(block_q6_K) == 210, "q6_K block size");
_Static_assert(sizeof(block_q8_K) == 292, "q8_K block size");

/* Slots of per-type tables indexed by a dtype id (the largest id is BF16 = 30). */
#define RILL__DTYPE_SLOTS 31

/* Round to nearest, ties to even, for |x| < 2^22 (ggml's nearest_int: the float addition does the
 * rounding, so the result does not depend on the FPU rounding-mode functions of libm). */
static inline int rill__nearest_int(float x) {
    float v = x + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* The 32 five-bit codes (0..31) of a Q5_0/Q5_1 block in value order: value j < 16 is the low
 * nibble of qs[j], value j >= 16 the high nibble of qs[j - 16]; bit 4 is bit j of qh. */
static inline void rill__q5_codes(const uint8_t qs[16], const uint8_t qh[4], uint8_t q[32]) {
    const uint32_t h =
        (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
    for (int j = 0; j < 16; j++) {
        q[j] = (uint8_t)((qs[j] & 0xF) | (((h >> j) & 1u) << 4));
        q[j + 16] = (uint8_t)((qs[j] >> 4) | (((h >> (j + 16)) & 1u) << 4));
    }
}

/* The j-th (0..7) 6-bit scale and min of a Q4_K/Q5_K block's 12 packed bytes. */
static inline void rill__get_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Bytes of one act row of n values for a weight of type wt (see the note at the top), or -1 when
 * wt is not a weight type or n is not a whole number of its blocks. */
int64_t rill__act_row_bytes(rill_dtype_t wt, int64_t n);

/* Converts x[n] into the act row of weight type wt (plain C; bit-exact with the AVX2 version).
 * n must be valid for wt (caller checks). For F32 it copies. */
void rill__act_quantize_ref(rill_dtype_t wt, const float *x, void *act, int64_t n);

/* Exact dot product of one weight row of type wt with one act row, both n values long, with
 * llama.cpp's formula for that pair of types (integer block sums, then the block scales),
 * accumulated in double: the bound tests hold llama.cpp's f32 sums (rill__dot_ggml) to. n must
 * be valid for wt. */
double rill__dot_ref(rill_dtype_t wt, const void *w, const void *act, int64_t n);

/* Per-type quantizers/dequantizers (n a whole number of blocks; no checks). */
void rill__quantize_row_q8_0(const float *x, block_q8_0 *y, int64_t n);
void rill__quantize_row_q8_1(const float *x, block_q8_1 *y, int64_t n);
void rill__quantize_row_q8_K(const float *x, block_q8_K *y, int64_t n);
void rill__quantize_row_q4_K(const float *x, block_q4_K *y, int64_t n);
void rill__quantize_row_q5_K(const float *x, block_q5_K *y, int64_t n);
void rill__quantize_row_q6_K(const float *x, block_q6_K *y, int64_t n);
void rill__dequantize_row_q4_K(const block_q4_K *x, float *y, int64_t n);
void rill__dequantize_row_q5_K(const block_q5_K *x, float *y, int64_t n);
void rill__dequantize_row_q6_K(const block_q6_K *x, float *y, int64_t n);
void rill__dequantize_row_q8_K(const block_q8_K *x, float *y, int64_t n);

#endif /* RILL_QUANT_INTERNAL_H */
