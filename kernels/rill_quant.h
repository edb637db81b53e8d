/*
 * rill_quant.h - element conversions and the quantization formats, in plain C.
 *
 * Every type of rill_dtype.h can be read back to f32 (rill_dequantize_row) and written from f32
 * (rill_quantize_row). The block layouts are GGML's, byte for byte, so rows taken from a GGUF file
 * decode exactly as llama.cpp decodes them; docs/quantization.md describes each block (fields,
 * bytes, how a value is reconstructed).
 *
 * Quantizers come in two kinds:
 *   - activation types (Q8_0, Q8_1, Q8_K) and F16/BF16: the same bytes llama.cpp's CPU backend
 *     produces on x86 (AVX2 build) for the same floats. The matmul of a weight type first turns
 *     its f32 input row into that weight type's "vec_dot type" (rill_dtype_vec_dot_type), as
 *     llama.cpp does, so that rill's logits follow llama.cpp's rounding.
 *   - weight types (Q4_0, Q4_1, Q5_0, Q5_1 bit-exact with ggml's reference quantizer; Q4_K,
 *     Q5_K, Q6_K a simpler scale search than ggml's, same layout): meant for tests and tools, not
 *     for making model files that must match llama-quantize byte for byte.
 *
 * Conversions: f32 -> f16 rounds to nearest even (overflow gives infinity, NaN stays NaN, quiet),
 * exactly like the F16C instruction VCVTPS2PH; f32 -> bf16 rounds to nearest even and keeps
 * subnormals, NaN becomes a quiet NaN (ggml's ggml_compute_fp32_to_bf16).
 *
 * Thread safety: every function here is pure (no state); any thread.
 */
#ifndef RILL_QUANT_H
#define RILL_QUANT_H

#include <stdint.h>

#include "rill_dtype.h"
#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* IEEE binary16 bits -> f32 (exact). */
float rill_fp16_to_f32(uint16_t h);

/* f32 -> IEEE binary16 bits, round to nearest even; |x| >= 65520 gives +-inf; NaN stays NaN. */
uint16_t rill_f32_to_fp16(float x);

/* bfloat16 bits -> f32 (exact: the bits are the top half of an f32). */
float rill_bf16_to_f32(uint16_t h);

/* f32 -> bfloat16 bits, round to nearest even, subnormals kept; NaN gives a quiet NaN. */
uint16_t rill_f32_to_bf16(float x);

/* The type llama.cpp converts the f32 activations to before multiplying them with a weight of
 * type t: Q4_0/Q5_0 -> Q8_0, Q4_1/Q5_1 -> Q8_1, Q8_0 -> Q8_0, Q4_K/Q5_K/Q6_K -> Q8_K,
 * F16 -> F16, BF16 -> BF16, F32 -> F32. Returns t itself for the activation types Q8_1 and Q8_K,
 * and -1 when t is not a type of rill_dtype.h. */
int rill_dtype_vec_dot_type(rill_dtype_t t);

/* True when t can be the weight of a matmul (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q4_K, Q5_K, Q6_K). Q8_1 and Q8_K are activation-only types. */
bool rill_dtype_is_weight(rill_dtype_t t);

/* Decodes n values of type t from src (rill_dtype_row_bytes(t, n) bytes) into dst[n].
 * Errors: RILL_EINVAL (unknown t, NULL pointer, n < 0 or not a whole number of blocks).
 * Borrowed pointers; nothing is kept. */
rill_err_t rill_dequantize_row(rill_dtype_t t, const void *src, float *dst, int64_t n);

/* Encodes src[n] as type t into dst (rill_dtype_row_bytes(t, n) bytes). Every type is
 * supported (see the note at the top on which ones are bit-exact with ggml). Non-finite inputs
 * give unspecified (but memory-safe) blocks for the quantized types.
 * Errors: as rill_dequantize_row(). */
rill_err_t rill_quantize_row(rill_dtype_t t, const float *src, void *dst, int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* RILL_QUANT_H */
