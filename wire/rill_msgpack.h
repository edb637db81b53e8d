/*
 * rill_msgpack.h - a structure check for msgpack from untrusted sources (network frames, files),
 * run before msgpack-c unpacks them.
 *
 * msgpack-c trusts a container's declared count: it allocates count * 24 bytes as soon as it
 * reads the header, so five bytes claiming an array of four billion elements cost 96 GiB of
 * malloc. rill_msgpack_check() walks the headers only and refuses such a buffer: every string,
 * binary and extension length and every container count is checked against the bytes that
 * remain, nesting against a depth limit, and there must be exactly one value with no trailing
 * byte. It decodes nothing and allocates nothing; after it passes, msgpack-c's allocations are
 * bounded by about 24 bytes per input byte. rill_msgpack_check_utf8 also holds every str to
 * valid UTF-8, as strict msgpack readers do.
 *
 * The other way, rill_msgpack_pack_str packs a str that is valid UTF-8 whatever bytes it is
 * given (rill_utf8.h's escape): every string rilld sends goes through it (docs/protocol.md).
 *
 * Thread safety: the checks are pure; rill_msgpack_pack_str uses the packer it is given.
 */
#ifndef RILL_MSGPACK_H
#define RILL_MSGPACK_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RILL_MSGPACK_MAX_DEPTH 31 /* msgpack-c's unpacker holds 32 open containers */

typedef enum rill_msgpack_top {
    RILL_MSGPACK_SCALAR = 0,
    RILL_MSGPACK_ARRAY = 1,
    RILL_MSGPACK_MAP = 2
} rill_msgpack_top_t;

typedef struct rill_msgpack_shape {
    rill_msgpack_top_t top; /* kind of the top-level value */
    const char *top_what;   /* its name ("map", "array", "str", ...; static) */
    uint64_t top_count;     /* elements of a top-level array, pairs of a top-level map */
    int64_t element;        /* on error: index of the top-level array element where it was
                               found (-1: not inside one) */
    size_t at;              /* on error: byte offset (SIZE_MAX: none) */
} rill_msgpack_shape_t;

/* Checks that buf[0, len) is exactly one msgpack value whose declared lengths fit the buffer
 * and whose nesting is at most max_depth (1..RILL_MSGPACK_MAX_DEPTH; the top-level value is
 * depth 1 when it is a container). shape (optional) receives the top-level kind and count, or
 * where the error was found; rill_last_error(err) says what. Errors: RILL_EFORMAT (truncated,
 * trailing bytes, too deep, the reserved byte 0xc1, empty), RILL_EINVAL (bad arguments). */
rill_err_t rill_msgpack_check(const void *buf, size_t len, int max_depth,
                              rill_msgpack_shape_t *shape);

/* As rill_msgpack_check, and every str (map keys too) must be valid UTF-8 (rill_utf8.h): one
 * that is not is RILL_EFORMAT, with shape->at the offset of the str's header and a message
 * naming the first bad byte's offset. For what comes from rilld, which promises UTF-8. */
rill_err_t rill_msgpack_check_utf8(const void *buf, size_t len, int max_depth,
                                   rill_msgpack_shape_t *shape);

/* Packs s[0, len) as one msgpack str that is valid UTF-8: s itself when it is valid, else its
 * escaped form (rill_utf8.h: each byte of what is not valid as the four characters \xNN).
 * s may be NULL when len is 0. Returns 0, or nonzero when the packer's writer failed (out of
 * memory for an sbuffer; the packer's output then ends inside the str) or for pk NULL, s NULL
 * with len > 0, or a str longer than msgpack allows (2^32 - 1 bytes, escaped). Allocates
 * nothing itself. */
int rill_msgpack_pack_str(msgpack_packer *pk, const char *s, size_t len);

/* True when k is a str equal to name (NUL-terminated). Pure. */
bool rill_msgpack_key_is(const msgpack_object *k, const char *name);

/* The value of the first str key equal to key in map, or NULL (also when map is NULL or not a
 * map). Borrowed from map. Pure. */
const msgpack_object *rill_msgpack_get(const msgpack_object *map, const char *key);

#ifdef __cplusplus
}
#endif
#endif /* RILL_MSGPACK_H */
