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
 * of the spec (u8..u64, i8..i64, f32, f64, bool, string, arrays of those, nested arrays up to
 * RILL_GGUF_MAX_DEPTH levels), tensor types of rill_dtype.h, at most RILL_GGUF_MAX_DIMS
 * dimensions. Validation rules, beyond "everything lies inside the file":
 *   - bool values (scalars and array elements) are 0 or 1;
 *   - general.alignment, when present, is a u32 and a non-zero power of two (default 32);
 *   - keys are unique, tensor names are unique;
 *   - a tensor's ne[0] is a whole number of blocks of its type, the product of its dims and its
 *     byte size fit in int64_t, its offset is a multiple of the alignment, its data lies inside
 *     the data section (which starts at the first aligned offset after the tensor infos), and
 *     no two tensors' byte ranges overlap (tensors need not be stored in order or contiguously).
 * Errors: RILL_EINVAL (NULL arguments), RILL_EIO (open/stat/mmap failed, not a regular file),
 * RILL_EFORMAT (bad magic, truncation, a count or offset that does not fit, duplicate keys or
 * tensor names, misaligned data, overlapping tensors, bad bool, bad alignment, nesting too deep),
 * RILL_EUNSUPPORTED (version 1 or > 3, big-endian file, unknown value type, unknown tensor type),
 * RILL_ENOMEM. The message written to `err` (when given) names the offending key or tensor and
 * the file offset.
 *
 * Memory: the reader allocates O(n_kv + n_tensors + number of strings in top-level string
 * arrays) words, all bounded by the file size (counts are checked against the bytes left before
 * anything is allocated). Lookups by key or tensor name use a sorted index built at open:
 * O(log n) per lookup, with no adversarial worst case.
 *
 * A mapped file must not be truncated by another process while it is open (the kernel would
 * raise SIGBUS on access; no reader of mmapped files can prevent that).
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

/* GGUF metadata value types, values as in the specification. RILL_GGUF_NONE is not in files: it
 * is what rill_gguf_kv_type() answers for an index out of range. */
typedef enum rill_gguf_type {
    RILL_GGUF_NONE = -1,
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

#define RILL_GGUF_MAX_DIMS  4
#define RILL_GGUF_MAX_DEPTH 8 /* arrays nested deeper than this are refused (RILL_EFORMAT) */

typedef struct rill_gguf_tensor {
    rill_gguf_str_t name;
    rill_dtype_t type;
    int n_dims;                     /* 0..RILL_GGUF_MAX_DIMS as stored (0: a scalar) */
    int64_t ne[RILL_GGUF_MAX_DIMS]; /* elements per dimension, ne[0] fastest; unused dims = 1 */
    uint64_t offset;                /* from the start of the data section */
    uint64_t nbytes;
    const void *data; /* borrowed; valid until rill_gguf_destroy() */
} rill_gguf_tensor_t;

/* Opens and validates a file (mapped read-only, MAP_PRIVATE; the descriptor is closed before
 * returning). Blocks on file I/O only for the header and metadata pages it touches. On success
 * the caller owns *out; destroy with rill_gguf_destroy(). On failure *out is NULL and
 * rill_last_error(err) says what is wrong and where. */
rill_err_t rill_gguf_open(const char *path, rill_gguf_t **out);

/* Same over a caller's buffer, which must outlive the reader (nothing is copied). buf may be
 * NULL only when len is 0 (which gives RILL_EFORMAT). */
rill_err_t rill_gguf_open_memory(const void *buf, size_t len, rill_gguf_t **out);

/* Unmaps and frees; sets *gp = NULL. NULL-safe (gp or *gp). */
void rill_gguf_destroy(rill_gguf_t **gp);

/* Header facts. Each returns 0 for g == NULL. */
uint32_t rill_gguf_version(const rill_gguf_t *g);
uint64_t rill_gguf_file_size(const rill_gguf_t *g);
uint32_t rill_gguf_alignment(const rill_gguf_t *g);
/* Offset of the data section from the start of the file. */
uint64_t rill_gguf_data_offset(const rill_gguf_t *g);

/* ---- metadata ---- */

/* Number of key/value pairs; keys are indexed 0..n-1 in file order. 0 for g == NULL. */
int64_t rill_gguf_n_kv(const rill_gguf_t *g);

/* Index of a key, or -1 when absent (or g or key is NULL). Keys holding a NUL byte can never be
 * found by name; walk them by index. */
int64_t rill_gguf_find_key(const rill_gguf_t *g, const char *key);

/* Key i (borrowed), or {NULL, 0} when i is out of range. */
rill_gguf_str_t rill_gguf_key(const rill_gguf_t *g, int64_t i);

/* Value type of key i, or RILL_GGUF_NONE when i is out of range. */
rill_gguf_type_t rill_gguf_kv_type(const rill_gguf_t *g, int64_t i);

/* Typed getters by key. Each returns RILL_ENOTFOUND when the key is absent, RILL_EFORMAT when it
 * has another type (integers are converted between widths and signedness; rill_gguf_get_f32 also
 * accepts f64, rounded), RILL_ERANGE when an integer does not fit the requested type, RILL_EINVAL
 * for NULL arguments, and leaves *out unaltered on error. Strings are borrowed. */
rill_err_t rill_gguf_get_u32(const rill_gguf_t *g, const char *key, uint32_t *out);
rill_err_t rill_gguf_get_u64(const rill_gguf_t *g, const char *key, uint64_t *out);
rill_err_t rill_gguf_get_i64(const rill_gguf_t *g, const char *key, int64_t *out);
rill_err_t rill_gguf_get_f32(const rill_gguf_t *g, const char *key, float *out);
rill_err_t rill_gguf_get_bool(const rill_gguf_t *g, const char *key, bool *out);
rill_err_t rill_gguf_get_str(const rill_gguf_t *g, const char *key, rill_gguf_str_t *out);

/* Arrays: element type and length. Nested arrays report RILL_GGUF_ARRAY as element type (their
 * elements are validated but not otherwise accessible). Errors as for the getters; either out
 * pointer may be NULL. */
rill_err_t rill_gguf_get_arr(const rill_gguf_t *g, const char *key, rill_gguf_type_t *elem_type,
                             uint64_t *len);

/* Element i of a top-level string array, O(1) (an offset table is built at open for every
 * top-level array of strings). RILL_EFORMAT when the key is not an array of strings,
 * RILL_ERANGE when i >= len. */
rill_err_t rill_gguf_get_arr_str(const rill_gguf_t *g, const char *key, uint64_t i,
                                 rill_gguf_str_t *out);

/* Raw element storage of a numeric array (u8..f64, bool), little-endian, *len elements,
 * borrowed and not necessarily aligned (copy with memcpy). RILL_EFORMAT for arrays of strings or
 * arrays. */
rill_err_t rill_gguf_get_arr_data(const rill_gguf_t *g, const char *key, const void **data,
                                  uint64_t *len);

/* ---- tensors ---- */

/* Number of tensors; 0 for g == NULL. */
int64_t rill_gguf_n_tensors(const rill_gguf_t *g);

/* Tensor i in file order (0 <= i < n_tensors), or NULL. Borrowed. Tensor infos are stored in one
 * array, so rill_gguf_tensor(g, i) - rill_gguf_tensor(g, 0) == i. */
const rill_gguf_tensor_t *rill_gguf_tensor(const rill_gguf_t *g, int64_t i);

/* Tensor by name, or NULL. Borrowed. */
const rill_gguf_tensor_t *rill_gguf_find_tensor(const rill_gguf_t *g, const char *name);

/* True when the string equals the NUL-terminated s (false when s is NULL). */
bool rill_gguf_str_eq(rill_gguf_str_t a, const char *s);

#ifdef __cplusplus
}
#endif
#endif /* RILL_GGUF_H */
