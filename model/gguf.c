/*
 * gguf.c - GGUF v2/v3 reader: validate everything at open, then answer from indexes.
 *
 * Design. The file is parsed once, front to back, by a cursor that never moves past `size` and
 * checks every length against the bytes left before using it. Counts read from the file (keys,
 * tensors, array elements) are checked against the smallest encoding their items can have
 * (13 bytes per key/value, 24 bytes per tensor info, 8 per string, 12 per nested array) before
 * anything is allocated, so a corrupt count cannot make us allocate more than a small multiple
 * of the file size, nor loop longer than the file is long. Nothing from the file is copied:
 * keys, strings and tensor data stay in the mapping, and the reader keeps pointers into it.
 *
 * After open, the reader is immutable. Lookups by key and by tensor name use a sorted array of
 * (pointer, length, index) built at open, searched by bisection: O(log n), no hash-flooding worst
 * case for a hostile file, and duplicates fall out of the sort as neighbours. Top-level string
 * arrays (the tokenizer's tokens and merges, up to ~150k entries) get an offset table so that
 * element i is O(1); all of those tables share one allocation, filled by a second walk over the
 * already validated arrays.
 *
 * Tensors: the data section starts at the first multiple of the alignment after the tensor
 * infos. Each tensor must lie inside it at an aligned offset, and no two may overlap (checked by
 * sorting a temporary array by offset). Unlike ggml we do not require the tensors to be stored
 * in order and back to back: nothing in rill depends on it.
 *
 * Rejected: reading with fread into owned buffers (doubles the memory of a 100 MB-10 GB file and
 * loses mmap's page sharing between processes); lazy validation on first access (every accessor
 * would then need an error path, and a fuzzer could not tell a bad file from a bad caller).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rill_alloc.h"
#include "rill_gguf.h"

#define GGUF_MAGIC        0x46554747u /* "GGUF" read as a little-endian u32 */
#define DEFAULT_ALIGNMENT 32u
#define MIN_KV_BYTES      13u /* key length (8) + value type (4) + smallest value (1) */
#define MIN_TENSOR_BYTES  24u /* name length (8) + n_dims (4) + type (4) + offset (8) */
#define MIN_ARRAY_BYTES   12u /* element type (4) + length (8) */

typedef struct kv {
    rill_gguf_str_t key;
    rill_gguf_type_t type;
    rill_gguf_type_t elem_type; /* arrays only */
    uint64_t len;               /* strings: bytes; arrays: elements; scalars: 0 */
    const uint8_t *val;         /* scalars: value bytes; strings: chars; arrays: first element */
    const uint64_t *str_offs;   /* top-level string arrays: offset of element i from val */
} kv_t;

typedef struct name_ix {
    const char *ptr;
    uint64_t len;
    int64_t idx;
} name_ix_t;

struct rill_gguf {
    const uint8_t *base;
    uint64_t size;
    void *map; /* non-NULL when we mapped the file ourselves */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    kv_t *kv;
    name_ix_t *kv_ix; /* sorted by name */
    int64_t n_tensors;
    rill_gguf_tensor_t *tensors;
    name_ix_t *t_ix; /* sorted by name */
    uint64_t *offs;  /* pooled offset tables of the string arrays */
};

/* ---- the cursor ---- */

typedef struct parser {
    const uint8_t *buf;
    uint64_t size;
    uint64_t pos; /* invariant: pos <= size */
    char *err;
    size_t errlen;
} parser_t;

__attribute__((format(printf, 3, 4))) static rill_err_t fail(parser_t *p, rill_err_t code,
                                                             const char *fmt, ...) {
    if (p->err != NULL && p->errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err, p->errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* A printable, bounded copy of a name from the file, for messages. */
static const char *printable(char out[72], const char *s, uint64_t len) {
    size_t n = len < 64 ? (size_t)len : 64;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        out[i] = (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
    }
    if (len > 64) {
        memcpy(out + n, "...", 4);
    } else {
        out[n] = '\0';
    }
    return out;
}

static uint64_t left(const parser_t *p) {
    return p->size - p->pos;
}

static uint16_t le16(const uint8_t *b) {
    return (uint16_t)(b[0] | (b[1] << 8));
}

static uint32_t le32(const uint8_t *b) {
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}

static uint64_t le64(const uint8_t *b) {
    return (uint64_t)le32(b) | ((uint64_t)le32(b + 4) << 32);
}

static rill_err_t rd_u32(parser_t *p, uint32_t *v, const char *what) {
    if (left(p) < 4) {
        return fail(p, RILL_EFORMAT, "truncated at offset %llu reading %s",
                    (unsigned long long)p->pos, what);
    }
    *v = le32(p->buf + p->pos);
    p->pos += 4;
    return RILL_OK;
}

static rill_err_t rd_u64(parser_t *p, uint64_t *v, const char *what) {
    if (left(p) < 8) {
        return fail(p, RILL_EFORMAT, "truncated at offset %llu reading %s",
                    (unsigned long long)p->pos, what);
    }
    *v = le64(p->buf + p->pos);
    p->pos += 8;
    return RILL_OK;
}

static rill_err_t rd_str(parser_t *p, rill_gguf_str_t *s, const char *what) {
    uint64_t at = p->pos;
    uint64_t n = 0;
    rill_err_t err = rd_u64(p, &n, what);
    if (err != RILL_OK) {
        return err;
    }
    if (n > left(p)) {
        return fail(p, RILL_EFORMAT, "%s at offset %llu: length %llu runs past the end (%llu left)",
                    what, (unsigned long long)at, (unsigned long long)n,
                    (unsigned long long)left(p));
    }
    s->ptr = (const char *)(p->buf + p->pos);
    s->len = n;
    p->pos += n;
    return RILL_OK;
}

/* Bytes of a fixed-size value type; 0 for strings and arrays; -1 for an unknown type. */
static int scalar_size(uint32_t t) {
    switch (t) {
    case RILL_GGUF_U8:
    case RILL_GGUF_I8:
    case RILL_GGUF_BOOL:
        return 1;
    case RILL_GGUF_U16:
    case RILL_GGUF_I16:
        return 2;
    case RILL_GGUF_U32:
    case RILL_GGUF_I32:
    case RILL_GGUF_F32:
        return 4;
    case RILL_GGUF_U64:
    case RILL_GGUF_I64:
    case RILL_GGUF_F64:
        return 8;
    case RILL_GGUF_STRING:
    case RILL_GGUF_ARRAY:
        return 0;
    default:
        return -1;
    }
}

/* Validates one value of type t at the cursor and moves past it. `kn` is the printable key for
 * messages. */
static rill_err_t skip_value(parser_t *p, uint32_t t, int depth, const char *kn) {
    int sz = scalar_size(t);
    if (sz < 0) {
        return fail(p, RILL_EUNSUPPORTED, "key '%s': unknown value type %u at offset %llu", kn, t,
                    (unsigned long long)p->pos);
    }
    if (sz > 0) {
        if (left(p) < (uint64_t)sz) {
            return fail(p, RILL_EFORMAT, "key '%s': truncated value at offset %llu", kn,
                        (unsigned long long)p->pos);
        }
        if (t == RILL_GGUF_BOOL && p->buf[p->pos] > 1) {
            return fail(p, RILL_EFORMAT, "key '%s': bool value %u at offset %llu is not 0 or 1", kn,
                        p->buf[p->pos], (unsigned long long)p->pos);
        }
        p->pos += (uint64_t)sz;
        return RILL_OK;
    }
    if (t == RILL_GGUF_STRING) {
        rill_gguf_str_t s;
        return rd_str(p, &s, "a string value");
    }
    /* An array. */
    if (depth >= RILL_GGUF_MAX_DEPTH) {
        return fail(p, RILL_EFORMAT, "key '%s': arrays nested deeper than %d at offset %llu", kn,
                    RILL_GGUF_MAX_DEPTH, (unsigned long long)p->pos);
    }
    uint32_t et = 0;
    uint64_t n = 0;
    rill_err_t err = rd_u32(p, &et, "an array element type");
    if (err == RILL_OK) {
        err = rd_u64(p, &n, "an array length");
    }
    if (err != RILL_OK) {
        return err;
    }
    int esz = scalar_size(et);
    if (esz < 0) {
        return fail(p, RILL_EUNSUPPORTED, "key '%s': unknown array element type %u", kn, et);
    }
    uint64_t min = esz > 0 ? (uint64_t)esz : (et == RILL_GGUF_STRING ? 8u : MIN_ARRAY_BYTES);
    if (n > left(p) / min) {
        return fail(p, RILL_EFORMAT,
                    "key '%s': array of %llu elements at offset %llu cannot fit in the %llu bytes "
                    "left",
                    kn, (unsigned long long)n, (unsigned long long)p->pos,
                    (unsigned long long)left(p));
    }
    if (esz > 0) {
        if (et == RILL_GGUF_BOOL) {
            for (uint64_t i = 0; i < n; i++) {
                if (p->buf[p->pos + i] > 1) {
                    return fail(p, RILL_EFORMAT, "key '%s': bool element %llu is not 0 or 1", kn,
                                (unsigned long long)i);
                }
            }
        }
        p->pos += n * (uint64_t)esz;
        return RILL_OK;
    }
    for (uint64_t i = 0; i < n; i++) {
        err = skip_value(p, et, depth + 1, kn);
        if (err != RILL_OK) {
            return err;
        }
    }
    return RILL_OK;
}

/* ---- the name index ---- */

static int cmp_bytes(const char *a, uint64_t alen, const char *b, uint64_t blen) {
    uint64_t n = alen < blen ? alen : blen;
    int c = n > 0 ? memcmp(a, b, (size_t)n) : 0;
    if (c != 0) {
        return c;
    }
    return (alen > blen) - (alen < blen);
}

static int cmp_ix(const void *x, const void *y) {
    const name_ix_t *a = x;
    const name_ix_t *b = y;
    int c = cmp_bytes(a->ptr, a->len, b->ptr, b->len);
    if (c != 0) {
        return c;
    }
    return (a->idx > b->idx) - (a->idx < b->idx); /* a total order: qsort is then deterministic */
}

static int64_t ix_find(const name_ix_t *ix, int64_t n, const char *name) {
    uint64_t len = strlen(name);
    int64_t lo = 0;
    int64_t hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = cmp_bytes(ix[mid].ptr, ix[mid].len, name, len);
        if (c == 0) {
            return ix[mid].idx;
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return -1;
}

/* Sorts the index; returns the position of the first of two equal names, or -1. */
static int64_t ix_sort(name_ix_t *ix, int64_t n) {
    if (n > 1) {
        qsort(ix, (size_t)n, sizeof *ix, cmp_ix);
    }
    for (int64_t i = 1; i < n; i++) {
        if (cmp_bytes(ix[i - 1].ptr, ix[i - 1].len, ix[i].ptr, ix[i].len) == 0) {
            return i;
        }
    }
    return -1;
}

/* ---- open ---- */

typedef struct span {
    uint64_t off;
    uint64_t end;
    int64_t idx;
} span_t;

static int cmp_span(const void *x, const void *y) {
    const span_t *a = x;
    const span_t *b = y;
    if (a->off != b->off) {
        return a->off < b->off ? -1 : 1;
    }
    return (a->idx > b->idx) - (a->idx < b->idx);
}

static void gguf_free(rill_gguf_t *g) {
    if (g == NULL) {
        return;
    }
    rill_free(g->kv);
    rill_free(g->kv_ix);
    rill_free(g->tensors);
    rill_free(g->t_ix);
    rill_free(g->offs);
    if (g->map != NULL) {
        munmap(g->map, (size_t)g->size);
    }
    rill_free(g);
}

static rill_err_t parse_header(parser_t *p, rill_gguf_t *g, uint64_t *n_tensors, uint64_t *n_kv) {
    uint32_t magic = 0;
    rill_err_t err = rd_u32(p, &magic, "the magic");
    if (err != RILL_OK) {
        return err;
    }
    if (magic != GGUF_MAGIC) {
        return fail(p, RILL_EFORMAT, "bad magic 0x%08x (not a GGUF file)", magic);
    }
    err = rd_u32(p, &g->version, "the version");
    if (err != RILL_OK) {
        return err;
    }
    if (g->version != 0 && (g->version & 0xffffu) == 0) {
        return fail(p, RILL_EUNSUPPORTED, "big-endian GGUF files are not supported");
    }
    if (g->version != 2 && g->version != 3) {
        return fail(p, RILL_EUNSUPPORTED, "GGUF version %u is not supported (2 and 3 are)",
                    g->version);
    }
    err = rd_u64(p, n_tensors, "the tensor count");
    if (err == RILL_OK) {
        err = rd_u64(p, n_kv, "the key/value count");
    }
    if (err != RILL_OK) {
        return err;
    }
    if (*n_kv > left(p) / MIN_KV_BYTES) {
        return fail(p, RILL_EFORMAT, "%llu key/value pairs cannot fit in the %llu bytes left",
                    (unsigned long long)*n_kv, (unsigned long long)left(p));
    }
    if (*n_tensors > left(p) / MIN_TENSOR_BYTES) {
        return fail(p, RILL_EFORMAT, "%llu tensor infos cannot fit in the %llu bytes left",
                    (unsigned long long)*n_tensors, (unsigned long long)left(p));
    }
    return RILL_OK;
}

static rill_err_t parse_kvs(parser_t *p, rill_gguf_t *g, uint64_t *n_strings) {
    char kn[72];
    *n_strings = 0;
    for (int64_t i = 0; i < g->n_kv; i++) {
        kv_t *k = &g->kv[i];
        rill_err_t err = rd_str(p, &k->key, "a key");
        if (err != RILL_OK) {
            return err;
        }
        printable(kn, k->key.ptr, k->key.len);
        uint32_t t = 0;
        err = rd_u32(p, &t, "a value type");
        if (err != RILL_OK) {
            return err;
        }
        if (scalar_size(t) < 0) {
            return fail(p, RILL_EUNSUPPORTED, "key '%s': unknown value type %u", kn, t);
        }
        k->type = (rill_gguf_type_t)t;
        k->elem_type = RILL_GGUF_NONE;
        uint64_t start = p->pos;
        if (t == RILL_GGUF_ARRAY) {
            /* Header fields first (validated again by skip_value, which is cheap). */
            if (left(p) < MIN_ARRAY_BYTES) {
                return fail(p, RILL_EFORMAT, "key '%s': truncated array header at offset %llu", kn,
                            (unsigned long long)p->pos);
            }
            k->elem_type = (rill_gguf_type_t)le32(p->buf + p->pos);
            k->len = le64(p->buf + p->pos + 4);
            k->val = p->buf + p->pos + MIN_ARRAY_BYTES;
        } else if (t == RILL_GGUF_STRING) {
            if (left(p) >= 8) {
                k->len = le64(p->buf + p->pos);
                k->val = p->buf + p->pos + 8;
            }
        } else {
            k->val = p->buf + p->pos;
        }
        p->pos = start;
        err = skip_value(p, t, 0, kn);
        if (err != RILL_OK) {
            return err;
        }
        if (t == RILL_GGUF_ARRAY && k->elem_type == RILL_GGUF_STRING) {
            *n_strings += k->len; /* cannot overflow: each string took >= 8 bytes of the file */
        }
    }
    return RILL_OK;
}

/* Fills the string-array offset tables (the arrays were validated by parse_kvs). */
static void index_strings(rill_gguf_t *g) {
    uint64_t *o = g->offs;
    for (int64_t i = 0; i < g->n_kv; i++) {
        kv_t *k = &g->kv[i];
        if (k->type != RILL_GGUF_ARRAY || k->elem_type != RILL_GGUF_STRING) {
            continue;
        }
        k->str_offs = o;
        uint64_t off = 0;
        for (uint64_t j = 0; j < k->len; j++) {
            o[j] = off;
            off += 8 + le64(k->val + off);
        }
        o += k->len;
    }
}

static rill_err_t read_alignment(parser_t *p, rill_gguf_t *g) {
    g->alignment = DEFAULT_ALIGNMENT;
    int64_t i = ix_find(g->kv_ix, g->n_kv, "general.alignment");
    if (i < 0) {
        return RILL_OK;
    }
    const kv_t *k = &g->kv[i];
    if (k->type != RILL_GGUF_U32) {
        return fail(p, RILL_EFORMAT, "general.alignment has type %d, expected u32", (int)k->type);
    }
    uint32_t a = le32(k->val);
    if (a == 0 || (a & (a - 1)) != 0) {
        return fail(p, RILL_EFORMAT, "general.alignment %u is not a power of two", a);
    }
    g->alignment = a;
    return RILL_OK;
}

static rill_err_t parse_tensor_infos(parser_t *p, rill_gguf_t *g) {
    char tn[72];
    for (int64_t i = 0; i < g->n_tensors; i++) {
        rill_gguf_tensor_t *t = &g->tensors[i];
        uint64_t at = p->pos;
        rill_err_t err = rd_str(p, &t->name, "a tensor name");
        if (err != RILL_OK) {
            return err;
        }
        printable(tn, t->name.ptr, t->name.len);
        uint32_t n_dims = 0;
        err = rd_u32(p, &n_dims, "a tensor's n_dims");
        if (err != RILL_OK) {
            return err;
        }
        if (n_dims > RILL_GGUF_MAX_DIMS) {
            return fail(p, RILL_EFORMAT,
                        "tensor '%s' (info at offset %llu): %u dimensions, at most "
                        "%d supported",
                        tn, (unsigned long long)at, n_dims, RILL_GGUF_MAX_DIMS);
        }
        t->n_dims = (int)n_dims;
        for (int d = 0; d < RILL_GGUF_MAX_DIMS; d++) {
            t->ne[d] = 1;
        }
        for (uint32_t d = 0; d < n_dims; d++) {
            uint64_t ne = 0;
            err = rd_u64(p, &ne, "a tensor dimension");
            if (err != RILL_OK) {
                return err;
            }
            if (ne > (uint64_t)INT64_MAX) {
                return fail(p, RILL_EFORMAT, "tensor '%s': dimension %u is %llu (negative)", tn, d,
                            (unsigned long long)ne);
            }
            t->ne[d] = (int64_t)ne;
        }
        uint32_t type = 0;
        err = rd_u32(p, &type, "a tensor type");
        if (err == RILL_OK) {
            err = rd_u64(p, &t->offset, "a tensor offset");
        }
        if (err != RILL_OK) {
            return err;
        }
        if (type > 0x7fffffffu || !rill_dtype_valid((int)type)) {
            return fail(p, RILL_EUNSUPPORTED, "tensor '%s': unsupported tensor type %u", tn, type);
        }
        t->type = (rill_dtype_t)type;
    }
    return RILL_OK;
}

static rill_err_t check_tensor_extents(parser_t *p, rill_gguf_t *g) {
    char tn[72];
    uint64_t data_size = g->size - g->data_offset;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        rill_gguf_tensor_t *t = &g->tensors[i];
        printable(tn, t->name.ptr, t->name.len);
        int64_t row = rill_dtype_row_bytes(t->type, t->ne[0]);
        if (row < 0) {
            return fail(p, RILL_EFORMAT,
                        "tensor '%s': ne[0] = %lld is not a whole number of %s blocks (%lld)", tn,
                        (long long)t->ne[0], rill_dtype_name(t->type),
                        (long long)rill_dtype_block_elems(t->type));
        }
        /* Rows = ne[1] * ne[2] * ne[3]; then bytes = rows * row, all within int64_t. */
        int64_t rows = 1;
        bool zero = t->ne[0] == 0;
        for (int d = 1; d < RILL_GGUF_MAX_DIMS; d++) {
            if (t->ne[d] == 0) {
                zero = true;
            }
        }
        int64_t nbytes = 0;
        if (!zero) {
            int64_t elems = t->ne[0];
            for (int d = 1; d < RILL_GGUF_MAX_DIMS; d++) {
                if (rows > INT64_MAX / t->ne[d] || elems > INT64_MAX / t->ne[d]) {
                    return fail(p, RILL_EFORMAT, "tensor '%s': element count overflows", tn);
                }
                rows *= t->ne[d];
                elems *= t->ne[d];
            }
            if (rows > INT64_MAX / row) {
                return fail(p, RILL_EFORMAT, "tensor '%s': byte size overflows", tn);
            }
            nbytes = rows * row;
        }
        t->nbytes = (uint64_t)nbytes;
        if (t->offset % g->alignment != 0) {
            return fail(p, RILL_EFORMAT,
                        "tensor '%s': offset %llu is not a multiple of the "
                        "alignment %u",
                        tn, (unsigned long long)t->offset, g->alignment);
        }
        if (t->offset > data_size || t->nbytes > data_size - t->offset) {
            return fail(p, RILL_EFORMAT,
                        "tensor '%s': %llu bytes at offset %llu run past the end of the data "
                        "section (%llu bytes; file truncated?)",
                        tn, (unsigned long long)t->nbytes, (unsigned long long)t->offset,
                        (unsigned long long)data_size);
        }
        t->data = g->base + g->data_offset + t->offset;
    }
    return RILL_OK;
}

static rill_err_t check_overlaps(parser_t *p, rill_gguf_t *g) {
    if (g->n_tensors < 2) {
        return RILL_OK;
    }
    span_t *s = rill_malloc(RILL_MEM_MODEL, (size_t)g->n_tensors * sizeof *s);
    if (s == NULL) {
        return fail(p, RILL_ENOMEM, "out of memory sorting %lld tensors", (long long)g->n_tensors);
    }
    int64_t n = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        if (g->tensors[i].nbytes > 0) {
            s[n].off = g->tensors[i].offset;
            s[n].end = g->tensors[i].offset + g->tensors[i].nbytes;
            s[n].idx = i;
            n++;
        }
    }
    if (n > 1) {
        qsort(s, (size_t)n, sizeof *s, cmp_span);
    }
    rill_err_t err = RILL_OK;
    for (int64_t i = 1; i < n; i++) {
        if (s[i].off < s[i - 1].end) {
            char a[72];
            char b[72];
            const rill_gguf_tensor_t *ta = &g->tensors[s[i - 1].idx];
            const rill_gguf_tensor_t *tb = &g->tensors[s[i].idx];
            err = fail(p, RILL_EFORMAT, "tensors '%s' and '%s' overlap at offset %llu",
                       printable(a, ta->name.ptr, ta->name.len),
                       printable(b, tb->name.ptr, tb->name.len), (unsigned long long)s[i].off);
            break;
        }
    }
    rill_free(s);
    return err;
}

static rill_err_t parse(const uint8_t *buf, uint64_t size, rill_gguf_t *g, char *errbuf,
                        size_t errlen) {
    parser_t p = { .buf = buf, .size = size, .pos = 0, .err = errbuf, .errlen = errlen };
    char nm[72];
    uint64_t n_tensors = 0;
    uint64_t n_kv = 0;
    rill_err_t err = parse_header(&p, g, &n_tensors, &n_kv);
    if (err != RILL_OK) {
        return err;
    }
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;

    /* Key/value pairs, their index, and the string-array offset tables. */
    g->kv = rill_calloc(RILL_MEM_MODEL, (size_t)n_kv + 1, sizeof *g->kv);
    g->kv_ix = rill_malloc(RILL_MEM_MODEL, ((size_t)n_kv + 1) * sizeof *g->kv_ix);
    if (g->kv == NULL || g->kv_ix == NULL) {
        return fail(&p, RILL_ENOMEM, "out of memory for %llu key/value pairs",
                    (unsigned long long)n_kv);
    }
    uint64_t n_strings = 0;
    err = parse_kvs(&p, g, &n_strings);
    if (err != RILL_OK) {
        return err;
    }
    for (int64_t i = 0; i < g->n_kv; i++) {
        g->kv_ix[i] = (name_ix_t){ g->kv[i].key.ptr, g->kv[i].key.len, i };
    }
    int64_t dup = ix_sort(g->kv_ix, g->n_kv);
    if (dup >= 0) {
        return fail(&p, RILL_EFORMAT, "duplicate key '%s'",
                    printable(nm, g->kv_ix[dup].ptr, g->kv_ix[dup].len));
    }
    g->offs = rill_malloc(RILL_MEM_MODEL, ((size_t)n_strings + 1) * sizeof *g->offs);
    if (g->offs == NULL) {
        return fail(&p, RILL_ENOMEM, "out of memory indexing %llu strings",
                    (unsigned long long)n_strings);
    }
    index_strings(g);
    err = read_alignment(&p, g);
    if (err != RILL_OK) {
        return err;
    }

    /* Tensor infos: the count was checked against the bytes left after the header, and the
     * key/value pairs only shrank what is left, so check again before allocating. */
    if (n_tensors > left(&p) / MIN_TENSOR_BYTES) {
        return fail(&p, RILL_EFORMAT, "%llu tensor infos cannot fit in the %llu bytes left",
                    (unsigned long long)n_tensors, (unsigned long long)left(&p));
    }
    g->tensors = rill_calloc(RILL_MEM_MODEL, (size_t)n_tensors + 1, sizeof *g->tensors);
    g->t_ix = rill_malloc(RILL_MEM_MODEL, ((size_t)n_tensors + 1) * sizeof *g->t_ix);
    if (g->tensors == NULL || g->t_ix == NULL) {
        return fail(&p, RILL_ENOMEM, "out of memory for %llu tensor infos",
                    (unsigned long long)n_tensors);
    }
    err = parse_tensor_infos(&p, g);
    if (err != RILL_OK) {
        return err;
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        g->t_ix[i] = (name_ix_t){ g->tensors[i].name.ptr, g->tensors[i].name.len, i };
    }
    dup = ix_sort(g->t_ix, g->n_tensors);
    if (dup >= 0) {
        return fail(&p, RILL_EFORMAT, "duplicate tensor name '%s'",
                    printable(nm, g->t_ix[dup].ptr, g->t_ix[dup].len));
    }

    /* The data section: at the next multiple of the alignment (pos <= size, so no overflow). */
    uint64_t a = g->alignment;
    uint64_t data_offset = p.pos + (a - p.pos % a) % a;
    if (data_offset > size) {
        if (g->n_tensors > 0) {
            return fail(&p, RILL_EFORMAT,
                        "file ends at %llu, before its data section (at %llu); truncated?",
                        (unsigned long long)size, (unsigned long long)data_offset);
        }
        data_offset = size; /* a vocabulary-only file may stop right after its metadata */
    }
    g->data_offset = data_offset;
    err = check_tensor_extents(&p, g);
    if (err != RILL_OK) {
        return err;
    }
    return check_overlaps(&p, g);
}

static rill_err_t open_memory(const void *buf, size_t len, rill_gguf_t **out, char *err,
                              size_t errlen) {
    if (out == NULL || (buf == NULL && len > 0)) {
        if (err != NULL && errlen > 0) {
            snprintf(err, errlen, "invalid argument");
        }
        return RILL_EINVAL;
    }
    *out = NULL;
    if (err != NULL && errlen > 0) {
        err[0] = '\0';
    }
    rill_gguf_t *g = rill_calloc(RILL_MEM_MODEL, 1, sizeof *g);
    if (g == NULL) {
        if (err != NULL && errlen > 0) {
            snprintf(err, errlen, "out of memory");
        }
        return RILL_ENOMEM;
    }
    static const uint8_t empty[1] = { 0 };
    g->base = len > 0 ? buf : empty;
    g->size = len;
    rill_err_t e = parse(g->base, g->size, g, err, errlen);
    if (e != RILL_OK) {
        gguf_free(g);
        return e;
    }
    *out = g;
    return RILL_OK;
}

rill_err_t rill_gguf_open_memory(const void *buf, size_t len, rill_gguf_t **out) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(open_memory(buf, len, out, msg, sizeof msg), msg);
}

static rill_err_t open_file(const char *path, rill_gguf_t **out, char *err, size_t errlen) {
    if (out == NULL || path == NULL) {
        if (err != NULL && errlen > 0) {
            snprintf(err, errlen, "invalid argument");
        }
        return RILL_EINVAL;
    }
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (err != NULL && errlen > 0) {
            snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        }
        return RILL_EIO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (err != NULL && errlen > 0) {
            snprintf(err, errlen, "%s: not a regular file", path);
        }
        close(fd);
        return RILL_EIO;
    }
    if (st.st_size == 0) {
        close(fd);
        if (err != NULL && errlen > 0) {
            snprintf(err, errlen, "%s: empty file", path);
        }
        return RILL_EFORMAT;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int mmap_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        if (err != NULL && errlen > 0) {
            snprintf(err, errlen, "%s: mmap failed: %s", path, strerror(mmap_errno));
        }
        return RILL_EIO;
    }
    rill_gguf_t *g = NULL;
    rill_err_t e = open_memory(map, (size_t)st.st_size, &g, err, errlen);
    if (e != RILL_OK) {
        munmap(map, (size_t)st.st_size);
        return e;
    }
    g->map = map;
    *out = g;
    return RILL_OK;
}

rill_err_t rill_gguf_open(const char *path, rill_gguf_t **out) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(open_file(path, out, msg, sizeof msg), msg);
}

void rill_gguf_destroy(rill_gguf_t **gp) {
    if (gp == NULL) {
        return;
    }
    gguf_free(*gp);
    *gp = NULL;
}

uint32_t rill_gguf_version(const rill_gguf_t *g) {
    return g != NULL ? g->version : 0;
}

uint64_t rill_gguf_file_size(const rill_gguf_t *g) {
    return g != NULL ? g->size : 0;
}

uint32_t rill_gguf_alignment(const rill_gguf_t *g) {
    return g != NULL ? g->alignment : 0;
}

uint64_t rill_gguf_data_offset(const rill_gguf_t *g) {
    return g != NULL ? g->data_offset : 0;
}

/* ---- metadata ---- */

int64_t rill_gguf_n_kv(const rill_gguf_t *g) {
    return g != NULL ? g->n_kv : 0;
}

int64_t rill_gguf_find_key(const rill_gguf_t *g, const char *key) {
    if (g == NULL || key == NULL) {
        return -1;
    }
    return ix_find(g->kv_ix, g->n_kv, key);
}

rill_gguf_str_t rill_gguf_key(const rill_gguf_t *g, int64_t i) {
    if (g == NULL || i < 0 || i >= g->n_kv) {
        return (rill_gguf_str_t){ NULL, 0 };
    }
    return g->kv[i].key;
}

rill_gguf_type_t rill_gguf_kv_type(const rill_gguf_t *g, int64_t i) {
    if (g == NULL || i < 0 || i >= g->n_kv) {
        return RILL_GGUF_NONE;
    }
    return g->kv[i].type;
}

/* Finds a key for a getter: RILL_OK with *k set, or the getter's error. */
static rill_err_t lookup(const rill_gguf_t *g, const char *key, const void *out, const kv_t **k) {
    if (g == NULL || key == NULL || out == NULL) {
        return RILL_EINVAL;
    }
    int64_t i = ix_find(g->kv_ix, g->n_kv, key);
    if (i < 0) {
        return RILL_ENOTFOUND;
    }
    *k = &g->kv[i];
    return RILL_OK;
}

/* An integer value as (negative?, magnitude or value). False when k is not an integer. */
static bool int_value(const kv_t *k, bool *neg, uint64_t *u, int64_t *s) {
    const uint8_t *v = k->val;
    int64_t sv = 0;
    switch (k->type) {
    case RILL_GGUF_U8:
        *u = v[0];
        *neg = false;
        return true;
    case RILL_GGUF_U16:
        *u = le16(v);
        *neg = false;
        return true;
    case RILL_GGUF_U32:
        *u = le32(v);
        *neg = false;
        return true;
    case RILL_GGUF_U64:
        *u = le64(v);
        *neg = false;
        return true;
    case RILL_GGUF_I8:
        sv = (int8_t)v[0];
        break;
    case RILL_GGUF_I16:
        sv = (int16_t)le16(v);
        break;
    case RILL_GGUF_I32:
        sv = (int32_t)le32(v);
        break;
    case RILL_GGUF_I64:
        sv = (int64_t)le64(v);
        break;
    default:
        return false;
    }
    *neg = sv < 0;
    *s = sv;
    *u = sv < 0 ? 0 : (uint64_t)sv;
    return true;
}

rill_err_t rill_gguf_get_u32(const rill_gguf_t *g, const char *key, uint32_t *out) {
    const kv_t *k = NULL;
    rill_err_t err = lookup(g, key, out, &k);
    if (err != RILL_OK) {
        return err;
    }
    bool neg;
    uint64_t u;
    int64_t s;
    if (!int_value(k, &neg, &u, &s)) {
        return RILL_EFORMAT;
    }
    if (neg || u > UINT32_MAX) {
        return RILL_ERANGE;
    }
    *out = (uint32_t)u;
    return RILL_OK;
}

rill_err_t rill_gguf_get_u64(const rill_gguf_t *g, const char *key, uint64_t *out) {
    const kv_t *k = NULL;
    rill_err_t err = lookup(g, key, out, &k);
    if (err != RILL_OK) {
        return err;
    }
    bool neg;
    uint64_t u;
    int64_t s;
    if (!int_value(k, &neg, &u, &s)) {
        return RILL_EFORMAT;
    }
    if (neg) {
        return RILL_ERANGE;
    }
    *out = u;
    return RILL_OK;
}

rill_err_t rill_gguf_get_i64(const rill_gguf_t *g, const char *key, int64_t *out) {
    const kv_t *k = NULL;
    rill_err_t err = lookup(g, key, out, &k);
    if (err != RILL_OK) {
        return err;
    }
    bool neg;
    uint64_t u;
    int64_t s;
    if (!int_value(k, &neg, &u, &s)) {
        return RILL_EFORMAT;
    }
    if (neg) {
        *out = s;
        return RILL_OK;
    }
    if (u > (uint64_t)INT64_MAX) {
        return RILL_ERANGE;
    }
    *out = (int64_t)u;
    return RILL_OK;
}

rill_err_t rill_gguf_get_f32(const rill_gguf_t *g, const char *key, float *out) {
    const kv_t *k = NULL;
    rill_err_t err = lookup(g, key, out, &k);
    if (err != RILL_OK) {
        return err;
    }
    if (k->type == RILL_GGUF_F32) {
        uint32_t bits = le32(k->val);
        memcpy(out, &bits, sizeof *out);
        return RILL_OK;
    }
    if (k->type == RILL_GGUF_F64) {
        uint64_t bits = le64(k->val);
        double d;
        memcpy(&d, &bits, sizeof d);
        /* Out-of-range finite doubles become +-inf rather than undefined behaviour. */
        if (isfinite(d) && fabs(d) > 3.4028234663852886e38) {
            *out = d > 0 ? INFINITY : -INFINITY;
        } else {
            *out = (float)d;
        }
        return RILL_OK;
    }
    return RILL_EFORMAT;
}

rill_err_t rill_gguf_get_bool(const rill_gguf_t *g, const char *key, bool *out) {
    const kv_t *k = NULL;
    rill_err_t err = lookup(g, key, out, &k);
    if (err != RILL_OK) {
        return err;
    }
    if (k->type != RILL_GGUF_BOOL) {
        return RILL_EFORMAT;
    }
    *out = k->val[0] != 0;
    return RILL_OK;
}

rill_err_t rill_gguf_get_str(const rill_gguf_t *g, const char *key, rill_gguf_str_t *out) {
    const kv_t *k = NULL;
    rill_err_t err = lookup(g, key, out, &k);
    if (err != RILL_OK) {
        return err;
    }
    if (k->type != RILL_GGUF_STRING) {
        return RILL_EFORMAT;
    }
    out->ptr = (const char *)k->val;
    out->len = k->len;
    return RILL_OK;
}

rill_err_t rill_gguf_get_arr(const rill_gguf_t *g, const char *key, rill_gguf_type_t *elem_type,
                             uint64_t *len) {
    static const int dummy = 0;
    const kv_t *k = NULL;
    rill_err_t err = lookup(g, key, &dummy, &k);
    if (err != RILL_OK) {
        return err;
    }
    if (k->type != RILL_GGUF_ARRAY) {
        return RILL_EFORMAT;
    }
    if (elem_type != NULL) {
        *elem_type = k->elem_type;
    }
    if (len != NULL) {
        *len = k->len;
    }
    return RILL_OK;
}

rill_err_t rill_gguf_get_arr_str(const rill_gguf_t *g, const char *key, uint64_t i,
                                 rill_gguf_str_t *out) {
    const kv_t *k = NULL;
    rill_err_t err = lookup(g, key, out, &k);
    if (err != RILL_OK) {
        return err;
    }
    if (k->type != RILL_GGUF_ARRAY || k->elem_type != RILL_GGUF_STRING) {
        return RILL_EFORMAT;
    }
    if (i >= k->len) {
        return RILL_ERANGE;
    }
    const uint8_t *s = k->val + k->str_offs[i];
    out->len = le64(s);
    out->ptr = (const char *)(s + 8);
    return RILL_OK;
}

rill_err_t rill_gguf_get_arr_data(const rill_gguf_t *g, const char *key, const void **data,
                                  uint64_t *len) {
    const kv_t *k = NULL;
    rill_err_t err = lookup(g, key, data, &k);
    if (err != RILL_OK) {
        return err;
    }
    if (len == NULL) {
        return RILL_EINVAL;
    }
    if (k->type != RILL_GGUF_ARRAY || scalar_size((uint32_t)k->elem_type) <= 0) {
        return RILL_EFORMAT;
    }
    *data = k->val;
    *len = k->len;
    return RILL_OK;
}

/* ---- tensors ---- */

int64_t rill_gguf_n_tensors(const rill_gguf_t *g) {
    return g != NULL ? g->n_tensors : 0;
}

const rill_gguf_tensor_t *rill_gguf_tensor(const rill_gguf_t *g, int64_t i) {
    if (g == NULL || i < 0 || i >= g->n_tensors) {
        return NULL;
    }
    return &g->tensors[i];
}

const rill_gguf_tensor_t *rill_gguf_find_tensor(const rill_gguf_t *g, const char *name) {
    if (g == NULL || name == NULL) {
        return NULL;
    }
    int64_t i = ix_find(g->t_ix, g->n_tensors, name);
    return i >= 0 ? &g->tensors[i] : NULL;
}

bool rill_gguf_str_eq(rill_gguf_str_t a, const char *s) {
    if (s == NULL) {
        return false;
    }
    size_t n = strlen(s);
    return a.len == n && (n == 0 || memcmp(a.ptr, s, n) == 0);
}
