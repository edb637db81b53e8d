/*
 * msgpack_check.c - the structure check of untrusted msgpack (contract: rill_msgpack.h).
 *
 * Design: headers only. Each type byte is classified (scalar with a fixed or declared payload,
 * or a container with a declared count); payloads are skipped after checking their length
 * against the bytes left; a container pushes its element count (a map counts keys and values),
 * and a container of n elements must have n bytes left (every element takes at least one), so
 * a 5-byte "array of 4 billion" fails here before msgpack-c allocates count * 24 bytes for it.
 * Values are not decoded: msgpack-c still does that, after this says the lengths are honest.
 * The UTF-8 variant reads one kind of payload, a str's, once its length is known to fit.
 */
#include "rill_msgpack.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rill_utf8.h"

static rill_err_t fail(rill_msgpack_shape_t *sh, char *msg, size_t msglen, int64_t element,
                       size_t at, rill_err_t err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 7, 8)))
#endif
    ;

static rill_err_t fail(rill_msgpack_shape_t *sh, char *msg, size_t msglen, int64_t element,
                       size_t at, rill_err_t err, const char *fmt, ...) {
    sh->element = element;
    sh->at = at;
    if (msg != NULL && msglen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, msglen, fmt, ap);
        va_end(ap);
    }
    return err;
}

static uint64_t be(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

typedef struct head {
    size_t hdr;       /* bytes of the header: type byte + length/count field */
    size_t len_bytes; /* size of the big-endian length field after the type byte (0: none) */
    uint64_t payload; /* bytes after the header (fixed for scalars, read for str/bin/ext) */
    int elems;        /* 0 scalar, 1 array, 2 map (elements per declared count) */
    bool str;         /* a str: its payload is text */
    const char *what;
} head_t;

/* Classifies the type byte c. Returns false for 0xc1, which msgpack never uses. */
static bool classify(uint8_t c, head_t *h) {
    memset(h, 0, sizeof *h);
    h->hdr = 1;
    if (c <= 0x7f || c >= 0xe0) {
        h->what = "int";
    } else if (c <= 0x8f) {
        h->elems = 2;
        h->what = "map";
    } else if (c <= 0x9f) {
        h->elems = 1;
        h->what = "array";
    } else if (c <= 0xbf) {
        h->payload = c & 0x1f;
        h->str = true;
        h->what = "str";
    } else {
        switch (c) {
        case 0xc0:
            h->what = "nil";
            break;
        case 0xc2:
        case 0xc3:
            h->what = "bool";
            break;
        case 0xc4:
        case 0xc5:
        case 0xc6:
            h->len_bytes = (size_t)1 << (c - 0xc4);
            h->what = "bin";
            break;
        case 0xc7:
        case 0xc8:
        case 0xc9:
            h->len_bytes = (size_t)1 << (c - 0xc7);
            h->payload = 1; /* the ext type byte, plus the length read later */
            h->what = "ext";
            break;
        case 0xca:
            h->payload = 4;
            h->what = "float";
            break;
        case 0xcb:
            h->payload = 8;
            h->what = "float";
            break;
        case 0xcc:
        case 0xcd:
        case 0xce:
        case 0xcf:
            h->payload = (uint64_t)1 << (c - 0xcc);
            h->what = "int";
            break;
        case 0xd0:
        case 0xd1:
        case 0xd2:
        case 0xd3:
            h->payload = (uint64_t)1 << (c - 0xd0);
            h->what = "int";
            break;
        case 0xd4:
        case 0xd5:
        case 0xd6:
        case 0xd7:
        case 0xd8:
            h->payload = 1 + ((uint64_t)1 << (c - 0xd4));
            h->what = "ext";
            break;
        case 0xd9:
        case 0xda:
        case 0xdb:
            h->len_bytes = (size_t)1 << (c - 0xd9);
            h->str = true;
            h->what = "str";
            break;
        case 0xdc:
        case 0xdd:
            h->len_bytes = (size_t)2 << (c - 0xdc);
            h->elems = 1;
            h->what = "array";
            break;
        case 0xde:
        case 0xdf:
            h->len_bytes = (size_t)2 << (c - 0xde);
            h->elems = 2;
            h->what = "map";
            break;
        default:
            return false; /* 0xc1 */
        }
    }
    h->hdr += h->len_bytes;
    return true;
}

static rill_err_t check(const void *buf, size_t len, int max_depth, bool utf8,
                        rill_msgpack_shape_t *shape, char *msg, size_t msglen) {
    const uint8_t *p = buf;
    rill_msgpack_shape_t sh_local;
    rill_msgpack_shape_t *sh = shape != NULL ? shape : &sh_local;
    memset(sh, 0, sizeof *sh);
    sh->element = -1;
    sh->at = SIZE_MAX;
    if (msg != NULL && msglen > 0) {
        msg[0] = '\0';
    }
    if ((buf == NULL && len > 0) || max_depth < 1 || max_depth > RILL_MSGPACK_MAX_DEPTH) {
        return fail(sh, msg, msglen, -1, SIZE_MAX, RILL_EINVAL, "bad arguments");
    }
    uint64_t left[RILL_MSGPACK_MAX_DEPTH + 1] = { 0 }; /* elements left per open container */
    uint64_t total0 = 0;                               /* elements of the top-level container */
    int depth = 0;                                     /* open containers */
    size_t pos = 0;
    int64_t record = -1;
    head_t h;

    if (len == 0) {
        return fail(sh, msg, msglen, -1, SIZE_MAX, RILL_EFORMAT, "empty buffer: no msgpack value");
    }
    if (!classify(p[0], &h)) {
        return fail(sh, msg, msglen, -1, 0, RILL_EFORMAT, "reserved type byte 0xc1");
    }
    sh->top = h.elems == 0   ? RILL_MSGPACK_SCALAR
              : h.elems == 1 ? RILL_MSGPACK_ARRAY
                             : RILL_MSGPACK_MAP;
    sh->top_what = h.what;
    bool batch = h.elems == 1;
    for (;;) {
        if (batch && depth == 1 && left[0] > 0) {
            record = (int64_t)(total0 - left[0]);
        }
        if (pos >= len) {
            return fail(sh, msg, msglen, record, pos, RILL_EFORMAT,
                        "truncated: a value is missing (%zu bytes in all)", len);
        }
        if (!classify(p[pos], &h)) {
            return fail(sh, msg, msglen, record, pos, RILL_EFORMAT, "reserved type byte 0xc1");
        }
        size_t rest = len - pos;
        if (rest < h.hdr) {
            return fail(sh, msg, msglen, record, pos, RILL_EFORMAT,
                        "truncated: %s header of %zu bytes with %zu left", h.what, h.hdr, rest);
        }
        uint64_t n = h.len_bytes > 0 ? be(p + pos + 1, h.len_bytes) : 0;
        if (h.elems == 0) {
            uint64_t payload = h.payload + n; /* fixed part + declared length (<= 2^32 + 17) */
            if (payload > rest - h.hdr) {
                return fail(sh, msg, msglen, record, pos, RILL_EFORMAT,
                            "truncated: %s of %" PRIu64 " bytes with %zu left", h.what, payload,
                            rest - h.hdr);
            }
            size_t bad = 0;
            if (utf8 && h.str &&
                !rill_utf8_valid((const char *)p + pos + h.hdr, (size_t)payload, &bad)) {
                return fail(sh, msg, msglen, record, pos, RILL_EFORMAT,
                            "str of %" PRIu64 " bytes is not valid UTF-8 (byte %zu)", payload,
                            pos + h.hdr + bad);
            }
            pos += h.hdr + (size_t)payload;
        } else {
            if (h.len_bytes == 0) {
                n = p[pos] & 0x0f;
            }
            uint64_t elems = n * (uint64_t)h.elems;
            pos += h.hdr;
            if (depth + 1 > max_depth) {
                return fail(sh, msg, msglen, record, pos - h.hdr, RILL_EFORMAT,
                            "%s nested %d deep (max_depth %d)", h.what, depth + 1, max_depth);
            }
            if (elems > len - pos) {
                return fail(sh, msg, msglen, record, pos - h.hdr, RILL_EFORMAT,
                            "%s declares %" PRIu64 " elements with only %zu bytes left", h.what, n,
                            len - pos);
            }
            if (depth == 0) {
                total0 = elems;
            }
            if (elems > 0) {
                left[depth++] = elems;
                continue;
            }
        }
        /* A value is complete: close every container it completes. */
        while (depth > 0 && --left[depth - 1] == 0) {
            depth--;
        }
        if (depth == 0) {
            break;
        }
    }
    if (pos != len) {
        return fail(sh, msg, msglen, -1, pos, RILL_EFORMAT, "%zu trailing bytes after the value",
                    len - pos);
    }
    sh->top_count = sh->top == RILL_MSGPACK_MAP ? total0 / 2 : total0;
    return RILL_OK;
}

static rill_err_t check_plain(const void *buf, size_t len, int max_depth,
                              rill_msgpack_shape_t *shape, char *msg, size_t msglen) {
    return check(buf, len, max_depth, false, shape, msg, msglen);
}

rill_err_t rill_msgpack_check(const void *buf, size_t len, int max_depth,
                              rill_msgpack_shape_t *shape) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(check_plain(buf, len, max_depth, shape, msg, sizeof msg), msg);
}

static rill_err_t check_utf8(const void *buf, size_t len, int max_depth,
                             rill_msgpack_shape_t *shape, char *msg, size_t msglen) {
    return check(buf, len, max_depth, true, shape, msg, msglen);
}

rill_err_t rill_msgpack_check_utf8(const void *buf, size_t len, int max_depth,
                                   rill_msgpack_shape_t *shape) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(check_utf8(buf, len, max_depth, shape, msg, sizeof msg), msg);
}
