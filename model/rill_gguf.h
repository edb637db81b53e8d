/*
 * rill_gguf.h - GGUF v3 reader.
 *
 * Opens a GGUF file by mmap (or a caller's memory buffer, for fuzzing and tests) and validates
 * all of it before anything is returned: every count, string length, array length, tensor
 * offset, alignment and tensor extent is checked against the bytes actually present, so a
 * corrupt or truncated file gives an error, never a crash or an over-read. Tensor data is not
 * copied: tensor infos point into the mapping.
 *
 * Supported: GGUF version 3 (and 2, which has the same layout), little-endian, the value types
 * of the spec (u8..u64, i8..i64, f32, f64, bool, string, arrays of those, nested arrays), tensor
 * types of rill_dtype.h. Errors: RILL_EIO (open/stat/mmap failed), RILL_EFORMAT (bad magic,
 * truncation, a count or offset that does not fit, duplicate keys or tensor names, misaligned
 * data, overlapping tensors), RILL_EUNSUPPORTED (version, big-endian file, unknown tensor type),
 * RILL_ENOMEM. The message written to `err` (when given) names the offending key or tensor.
 *
 * Thread safety: a rill_gguf_t is immutable after open and may be shared by threads; destroy it
 * only when no thread uses it or anything borrowed from it.
 */
#ifndef RILL_GGUF_H
#define RILL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_dtype.h"
#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_gguf rill_gguf_t;

/* GGUF metadata value types, values as in the specification. */
typedef enum rill_gguf_type {
    RILL_GGUF_U8 = 0,
    RILL_GGUF_I8 = 1,
    RILL_GGUF_U16 = 2,
    RILL_GGUF_I16 = 3,
    RILL_GGUF_U32 = 4,
    RILL_GGUF_I32 = 5,
    RILL_GGUF_F32 = 6,
    RILL_GGUF_BOOL = 7,
    RILL_GGUF_STRING = 8,
    RILL_GGUF_ARRAY = 9,
    RILL_GGUF_U64 = 10,
    RILL_GGUF_I64 = 11,
    RILL_GGUF_F64 = 12
} rill_gguf_type_t;

/* A string inside the file: NOT NUL-terminated. Borrowed from the reader. */
typedef struct rill_gguf_str {
    const char *ptr;
    uint64_t len;
} rill_gguf_str_t;

#define RILL_GGUF_MAX_DIMS 4

typedef struct rill_gguf_tensor {
    rill_gguf_str_t name;
    rill_dtype_t type;
    int n_dims;
    int64_t ne[RILL_GGUF_MAX_DIMS]; /* elements per dimension, ne[0] fastest; unused dims = 1 */
    uint64_t offset;                /* from the start of the data section */
    uint64_t nbytes;
    const void *data; /* borrowed; valid until rill_gguf_destroy() */
} rill_gguf_tensor_t;

/* Opens and validates a file. On success the caller owns *out; destroy with rill_gguf_destroy().
 * On failure *out is NULL and, when err != NULL, a NUL-terminated message (at most errlen bytes)
 * says what is wrong and where. */
rill_err_t rill_gguf_open(const char *path, rill_gguf_t **out, char *err, size_t errlen);

/* Same over a caller's buffer, which must outlive the reader (nothing is copied). */
rill_err_t rill_gguf_open_memory(const void *buf, size_t len, rill_gguf_t **out, char *err,
                                 size_t errlen);

/* Unmaps and frees; sets *gp = NULL. NULL-safe. */
void rill_gguf_destroy(rill_gguf_t **gp);

uint32_t rill_gguf_version(const rill_gguf_t *g);
uint64_t rill_gguf_file_size(const rill_gguf_t *g);
uint32_t rill_gguf_alignment(const rill_gguf_t *g);

/* ---- metadata ---- */

/* Number of key/value pairs; keys are indexed 0..n-1 in file order. */
int64_t rill_gguf_n_kv(const rill_gguf_t *g);

/* Index of a key, or -1 when absent. */
int64_t rill_gguf_find_key(const rill_gguf_t *g, const char *key);

rill_gguf_str_t rill_gguf_key(const rill_gguf_t *g, int64_t i);
rill_gguf_type_t rill_gguf_kv_type(const rill_gguf_t *g, int64_t i);

/* Typed getters by key. Each returns RILL_ENOTFOUND when the key is absent, RILL_EFORMAT when it
 * has another type (integers are converted between widths and signedness when the value fits;
 * rill_gguf_get_f32 also accepts f64), and leaves *out unaltered on error. */
rill_err_t rill_gguf_get_u32(const rill_gguf_t *g, const char *key, uint32_t *out);
rill_err_t rill_gguf_get_u64(const rill_gguf_t *g, const char *key, uint64_t *out);
rill_err_t rill_gguf_get_i64(const rill_gguf_t *g, const char *key, int64_t *out);
rill_err_t rill_gguf_get_f32(const rill_gguf_t *g, const char *key, float *out);
rill_err_t rill_gguf_get_bool(const rill_gguf_t *g, const char *key, bool *out);
rill_err_t rill_gguf_get_str(const rill_gguf_t *g, const char *key, rill_gguf_str_t *out);

/* Arrays: element type and length. Nested arrays report RILL_GGUF_ARRAY as element type. */
rill_err_t rill_gguf_get_arr(const rill_gguf_t *g, const char *key, rill_gguf_type_t *elem_type,
                             uint64_t *len);

/* Element i of a string array (validated at open, so O(1) after the first call builds an offset
 * table; the table is built at open for arrays of strings). */
rill_err_t rill_gguf_get_arr_str(const rill_gguf_t *g, const char *key, uint64_t i,
                                 rill_gguf_str_t *out);

/* Raw element storage of a numeric array (u8..f64, bool), little-endian, len elements; borrowed. */
rill_err_t rill_gguf_get_arr_data(const rill_gguf_t *g, const char *key, const void **data,
                                  uint64_t *len);

/* ---- tensors ---- */

int64_t rill_gguf_n_tensors(const rill_gguf_t *g);

/* Tensor i in file order (0 <= i < n_tensors), or NULL. Borrowed. */
const rill_gguf_tensor_t *rill_gguf_tensor(const rill_gguf_t *g, int64_t i);

/* Tensor by name, or NULL. Borrowed. */
const rill_gguf_tensor_t *rill_gguf_find_tensor(const rill_gguf_t *g, const char *name);

/* True when the string equals the NUL-terminated s. */
bool rill_gguf_str_eq(rill_gguf_str_t a, const char *s);

#ifdef __cplusplus
}
#endif
#endif /* RILL_GGUF_H */
