/*
 * tick_decode.c - msgpack ticks to validated rill_tick_t (rill_market.h, "msgpack ticks").
 *
 * Two passes over a buffer:
 *
 *   1. A structure check (check_structure) that reads msgpack headers only: the type byte and
 *      the lengths and counts that follow it. It decodes no value. It exists because msgpack-c,
 *      on a container header, allocates count * sizeof(msgpack_object) bytes (24 per element)
 *      before it reads an element, from libc malloc, with the count taken on trust: the 5 bytes
 *      dd ff ff ff ff would ask for 96 GiB. Checking every count against the bytes that remain
 *      (every element takes at least one byte) bounds what msgpack-c allocates by 24 times the
 *      buffer's length. It also enforces max_depth below msgpack-c's fixed stack of 32 (so a
 *      msgpack-c error afterwards can only mean out of memory), finds trailing bytes, and gives
 *      errors a byte offset and a record index, which msgpack-c's PARSE_ERROR does not.
 *   2. msgpack-c's msgpack_unpack() into a zone kept by the decoder (its first chunk is reused,
 *      so small batches allocate nothing), then validation of each record's fields with the
 *      checks shared with the CSV reader (tick.c).
 *
 * Rejected: decoding values in the structure check (that would be a second msgpack parser; it
 * only needs lengths), and msgpack-c's unpack template with custom callbacks (it could count
 * elements against the length too, but its macros are an internal interface that changed
 * between msgpack-c releases). msgpack-c's strings point into the caller's buffer (msgpack_unpack
 * references, never copies), so a decode copies only the accepted symbols.
 */
#include <inttypes.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "market_internal.h"
#include "rill_msgpack.h"
#include "rill_alloc.h"

#define ZONE_CHUNK  (64 * 1024)
#define MSG_CAP     320
#define BATCH_LIMIT (1 << 24)

struct rill_tick_decoder {
    rill_tick_decoder_params_t params;
    msgpack_zone zone;
    rill_tick_decoder_stats_t stats;
    char msg[MSG_CAP];
};

rill_tick_decoder_params_t rill_tick_decoder_default_params(void) {
    rill_tick_decoder_params_t p = {
        .max_bytes = 1 << 20,
        .max_batch = 4096,
        .max_depth = 8,
        .strict = false,
        .reject_unknown = false,
    };
    return p;
}

rill_err_t rill_tick_decoder_new(const rill_tick_decoder_params_t *params,
                                 rill_tick_decoder_t **out) {
    rill_tick_decoder_params_t p = params != NULL ? *params : rill_tick_decoder_default_params();
    if (out == NULL || p.max_bytes == 0 || p.max_batch < 1 || p.max_batch > BATCH_LIMIT ||
        p.max_depth < 1 || p.max_depth > RILL_MSGPACK_MAX_DEPTH) {
        return RILL_EINVAL;
    }
    rill_tick_decoder_t *d = rill_calloc(RILL_MEM_INGEST, 1, sizeof *d);
    if (d == NULL) {
        return RILL_ENOMEM;
    }
    if (!msgpack_zone_init(&d->zone, ZONE_CHUNK)) {
        rill_free(d);
        return RILL_ENOMEM;
    }
    d->params = p;
    *out = d;
    return RILL_OK;
}

void rill_tick_decoder_destroy(rill_tick_decoder_t **dp) {
    if (dp == NULL || *dp == NULL) {
        return;
    }
    msgpack_zone_destroy(&(*dp)->zone);
    rill_free(*dp);
    *dp = NULL;
}

const char *rill_tick_decoder_last_reject(const rill_tick_decoder_t *d) {
    return d != NULL ? d->msg : "";
}

rill_tick_decoder_stats_t rill_tick_decoder_stats(const rill_tick_decoder_t *d) {
    rill_tick_decoder_stats_t z = { 0 };
    return d != NULL ? d->stats : z;
}

static void count_code(rill_tick_decoder_t *d, rill_err_t err) {
    if (err == RILL_EFORMAT) {
        d->stats.n_eformat++;
    } else if (err == RILL_ERANGE) {
        d->stats.n_erange++;
    } else if (err == RILL_EINVAL) {
        d->stats.n_einval++;
    }
}

/* Sets the decoder's message: "[record R: ][byte B: ]text". record < 0 / at == SIZE_MAX: none. */
static void set_msg(rill_tick_decoder_t *d, int64_t record, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void set_msg(rill_tick_decoder_t *d, int64_t record, size_t at, const char *fmt, ...) {
    int o = 0;
    if (record >= 0) {
        o += snprintf(d->msg, sizeof d->msg, "record %" PRId64 ": ", record);
    }
    if (at != SIZE_MAX && o < (int)sizeof d->msg) {
        o += snprintf(d->msg + o, sizeof d->msg - (size_t)o, "byte %zu: ", at);
    }
    if (o < (int)sizeof d->msg) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->msg + o, sizeof d->msg - (size_t)o, fmt, ap);
        va_end(ap);
    }
}

/* ---- pass 1: structure (rill_msgpack_check) ------------------------------------------------ */

/* Checks the buffer's structure; on success sets *n_records (the batch length, or 1 for a
 * single map) and *batch. */
static rill_err_t check_structure(rill_tick_decoder_t *d, const uint8_t *p, size_t len,
                                  int64_t *n_records, bool *batch) {
    rill_msgpack_shape_t sh;
    rill_err_t err = rill_msgpack_check(p, len, d->params.max_depth, &sh);
    if (err != RILL_OK) {
        set_msg(d, sh.top == RILL_MSGPACK_ARRAY ? sh.element : -1, sh.at, "%s",
                rill_last_error(err));
        return err;
    }
    if (sh.top == RILL_MSGPACK_SCALAR) {
        set_msg(d, -1, 0, "top-level value must be a map or an array of maps (got %s)",
                sh.top_what);
        return RILL_EFORMAT;
    }
    *batch = sh.top == RILL_MSGPACK_ARRAY;
    *n_records = *batch ? (int64_t)sh.top_count : 1;
    return RILL_OK;
}

/* ---- pass 2: records ------------------------------------------------------------------------ */

static const char *type_name(msgpack_object_type t) {
    switch (t) {
    case MSGPACK_OBJECT_NIL:
        return "nil";
    case MSGPACK_OBJECT_BOOLEAN:
        return "bool";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return "int";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return "float";
    case MSGPACK_OBJECT_STR:
        return "str";
    case MSGPACK_OBJECT_ARRAY:
        return "array";
    case MSGPACK_OBJECT_MAP:
        return "map";
    case MSGPACK_OBJECT_BIN:
        return "bin";
    case MSGPACK_OBJECT_EXT:
        return "ext";
    }
    return "?";
}

enum { F_SYMBOL, F_TS, F_PRICE, F_SIZE, F_SIDE, F_COUNT };
static const char *const k_fields[F_COUNT] = { "symbol", "ts", "price", "size", "side" };

static int field_of(const msgpack_object_str *k) {
    for (int f = 0; f < F_COUNT; f++) {
        size_t n = strlen(k_fields[f]);
        if (k->size == n && memcmp(k->ptr, k_fields[f], n) == 0) {
            return f;
        }
    }
    return -1;
}

/* A field of the wrong msgpack type. */
static rill_err_t wrong_type(rill_tick_decoder_t *d, int64_t rec, int f, const char *want,
                             msgpack_object_type got) {
    set_msg(d, rec, SIZE_MAX, "field '%s': must be %s (got %s)", k_fields[f], want, type_name(got));
    return RILL_EFORMAT;
}

/* A field whose shared check failed: prefix its message with the record. */
static rill_err_t failed(rill_tick_decoder_t *d, int64_t rec, rill_err_t err, const char *why) {
    set_msg(d, rec, SIZE_MAX, "%s", why);
    return err;
}

/* An integer field as int64: *ok false (and an ERANGE message) when it does not fit. */
static rill_err_t int_field(rill_tick_decoder_t *d, int64_t rec, int f, const msgpack_object *v,
                            int64_t *out) {
    if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        if (v->via.u64 > (uint64_t)INT64_MAX) {
            set_msg(d, rec, SIZE_MAX, "field '%s': out of range (got %" PRIu64 ")", k_fields[f],
                    v->via.u64);
            return RILL_ERANGE;
        }
        *out = (int64_t)v->via.u64;
        return RILL_OK;
    }
    if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *out = v->via.i64;
        return RILL_OK;
    }
    return wrong_type(d, rec, f, "an integer", v->type);
}

static rill_err_t decode_record(rill_tick_decoder_t *d, int64_t rec, const msgpack_object *o,
                                rill_tick_t *t) {
    rill_err_t err;
    bool seen[F_COUNT] = { false };

    if (o->type != MSGPACK_OBJECT_MAP) {
        set_msg(d, rec, SIZE_MAX, "must be a map (got %s)", type_name(o->type));
        return RILL_EFORMAT;
    }
    memset(t, 0, sizeof *t);
    t->side = RILL_SIDE_UNKNOWN;
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key;
        const msgpack_object *v = &o->via.map.ptr[i].val;
        if (k->type != MSGPACK_OBJECT_STR) {
            set_msg(d, rec, SIZE_MAX, "key %u: must be a str (got %s)", i, type_name(k->type));
            return RILL_EFORMAT;
        }
        int f = field_of(&k->via.str);
        if (f < 0) {
            if (d->params.reject_unknown) {
                char q[128];
                rill_tick_quote(k->via.str.ptr, k->via.str.size, q, sizeof q);
                set_msg(d, rec, SIZE_MAX, "unknown key '%s'", q);
                return RILL_EINVAL;
            }
            continue;
        }
        if (seen[f]) {
            set_msg(d, rec, SIZE_MAX, "field '%s': given twice", k_fields[f]);
            return RILL_EINVAL;
        }
        seen[f] = true;
        switch (f) {
        case F_SYMBOL:
            if (v->type != MSGPACK_OBJECT_STR) {
                return wrong_type(d, rec, f, "a str", v->type);
            }
            err = rill_tick_check_symbol(v->via.str.ptr, v->via.str.size);
            if (err != RILL_OK) {
                return failed(d, rec, err, rill_last_error(err));
            }
            memcpy(t->symbol, v->via.str.ptr, v->via.str.size);
            t->symbol[v->via.str.size] = '\0';
            break;
        case F_TS:
            err = int_field(d, rec, f, v, &t->ts_ns);
            if (err == RILL_OK) {
                err = rill_tick_check_ts(t->ts_ns);
                if (err != RILL_OK) {
                    return failed(d, rec, err, rill_last_error(err));
                }
            }
            if (err != RILL_OK) {
                return err;
            }
            break;
        case F_PRICE:
            if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64) {
                t->price = v->via.f64;
            } else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
                t->price = (double)v->via.u64;
            } else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
                t->price = (double)v->via.i64;
            } else {
                return wrong_type(d, rec, f, "a float or an integer", v->type);
            }
            err = rill_tick_check_price(t->price);
            if (err != RILL_OK) {
                return failed(d, rec, err, rill_last_error(err));
            }
            break;
        case F_SIZE:
            err = int_field(d, rec, f, v, &t->size);
            if (err == RILL_OK) {
                err = rill_tick_check_size(t->size);
                if (err != RILL_OK) {
                    return failed(d, rec, err, rill_last_error(err));
                }
            }
            if (err != RILL_OK) {
                return err;
            }
            break;
        default: /* F_SIDE */
            if (v->type == MSGPACK_OBJECT_NIL) {
                t->side = RILL_SIDE_UNKNOWN;
            } else if (v->type == MSGPACK_OBJECT_STR) {
                err = rill_tick_parse_side(v->via.str.ptr, v->via.str.size, &t->side);
                if (err != RILL_OK) {
                    return failed(d, rec, err, rill_last_error(err));
                }
            } else {
                return wrong_type(d, rec, f, "a str or nil", v->type);
            }
            break;
        }
    }
    for (int f = F_SYMBOL; f <= F_SIZE; f++) {
        if (!seen[f]) {
            set_msg(d, rec, SIZE_MAX, "field '%s': missing", k_fields[f]);
            return RILL_EINVAL;
        }
    }
    return RILL_OK;
}

static int64_t tick_decode_impl(rill_tick_decoder_t *d, const void *data, size_t len,
                                rill_tick_t *out, int64_t cap) {
    if (d == NULL) {
        return RILL_EINVAL;
    }
    d->msg[0] = '\0';
    if ((data == NULL && len > 0) || out == NULL || cap < 0) {
        set_msg(d, -1, SIZE_MAX, "NULL data or out, or cap < 0");
        return RILL_EINVAL;
    }
    d->stats.buffers++;
    rill_err_t err = RILL_OK;
    int64_t n_records = 0;
    bool batch = false;
    if (len > d->params.max_bytes) {
        set_msg(d, -1, SIZE_MAX, "buffer of %zu bytes is larger than max_bytes %zu", len,
                d->params.max_bytes);
        err = RILL_ERANGE;
    } else {
        err = check_structure(d, data, len, &n_records, &batch);
    }
    if (err == RILL_OK && n_records > d->params.max_batch) {
        set_msg(d, -1, SIZE_MAX, "batch of %" PRId64 " records is larger than max_batch %d",
                n_records, (int)d->params.max_batch);
        err = RILL_ERANGE;
    }
    if (err == RILL_OK && n_records > cap) {
        set_msg(d, -1, SIZE_MAX, "batch of %" PRId64 " records does not fit cap %" PRId64,
                n_records, cap);
        d->stats.buffers_rejected++;
        return RILL_EFULL;
    }
    if (err != RILL_OK) {
        d->stats.buffers_rejected++;
        count_code(d, err);
        return err;
    }

    msgpack_zone_clear(&d->zone);
    msgpack_object root;
    size_t off = 0;
    msgpack_unpack_return r = msgpack_unpack(data, len, &off, &d->zone, &root);
    if (r != MSGPACK_UNPACK_SUCCESS) {
        /* The structure check passed, so only memory can fail here; anything else is a
         * disagreement between the two passes, reported as malformed input (never an abort:
         * the bytes came from outside). */
        d->stats.buffers_rejected++;
        msgpack_zone_clear(&d->zone);
        if (r == MSGPACK_UNPACK_NOMEM_ERROR) {
            set_msg(d, -1, SIZE_MAX, "out of memory in msgpack-c's zone");
            return RILL_ENOMEM;
        }
        set_msg(d, -1, SIZE_MAX, "msgpack-c refused the buffer (%d)", (int)r);
        count_code(d, RILL_EFORMAT);
        return RILL_EFORMAT;
    }
    d->stats.records += n_records;

    int64_t n_out = 0;
    bool skipped = false;
    for (int64_t i = 0; i < n_records; i++) {
        const msgpack_object *rec = batch ? &root.via.array.ptr[i] : &root;
        char keep[MSG_CAP];
        if (skipped) {
            memcpy(keep, d->msg, sizeof keep); /* the first skipped record's message stays */
        }
        err = decode_record(d, batch ? i : -1, rec, &out[n_out]);
        if (err == RILL_OK) {
            n_out++;
            continue;
        }
        d->stats.rejected++;
        count_code(d, err);
        if (d->params.strict) {
            d->stats.buffers_rejected++;
            msgpack_zone_clear(&d->zone);
            return err;
        }
        if (skipped) {
            memcpy(d->msg, keep, sizeof keep);
        }
        skipped = true;
    }
    d->stats.ticks += n_out;
    msgpack_zone_clear(&d->zone); /* give back chunks beyond the first now, not next call */
    return n_out;
}

int64_t rill_tick_decode(rill_tick_decoder_t *d, const void *data, size_t len, rill_tick_t *out,
                         int64_t cap) {
    int64_t n = tick_decode_impl(d, data, len, out, cap);
    if (n < 0 && d != NULL) {
        rill__error_str((rill_err_t)n, d->msg);
        d->msg[0] = '\0'; /* the error is rill_last_error's; last_reject is for skipped records */
    }
    return n;
}
