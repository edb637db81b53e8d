/*
 * msgpack_pack.c - strings out: rill_msgpack_pack_str (contract: rill_msgpack.h).
 *
 * Design: a valid string (all rilld's own text, every answer: the stream detokenizer completes
 * characters) is checked once and packed as msgpack-c would; only a string that is not valid
 * takes the second walk, which packs the header for the escaped length first (msgpack needs
 * the length before the body) and then writes runs of valid characters as they are and each
 * other byte as \xNN, straight into the packer: no buffer, no allocation.
 */
#include <stdint.h>
#include <string.h>

#include "rill_msgpack.h"
#include "rill_utf8.h"

int rill_msgpack_pack_str(msgpack_packer *pk, const char *s, size_t len) {
    static const char hex[] = "0123456789abcdef";
    if (pk == NULL || (s == NULL && len > 0)) {
        return -1;
    }
    if (rill_utf8_valid(s, len, NULL)) {
        if (len > UINT32_MAX) {
            return -1;
        }
        if (msgpack_pack_str(pk, len) != 0) {
            return -1;
        }
        return len > 0 ? msgpack_pack_str_body(pk, s, len) : 0; /* s may be NULL then */
    }
    size_t out = rill_utf8_escaped_len(s, len);
    if (out > UINT32_MAX || msgpack_pack_str(pk, out) != 0) {
        return -1;
    }
    size_t run = 0; /* start of the run of valid characters not yet written */
    for (size_t i = 0; i < len;) {
        size_t l = rill_utf8_char_len(s + i, len - i);
        if (l > 0) {
            i += l;
            continue;
        }
        unsigned char c = (unsigned char)s[i];
        char esc[4] = { '\\', 'x', hex[c >> 4], hex[c & 15] };
        if ((i > run && msgpack_pack_str_body(pk, s + run, i - run) != 0) ||
            msgpack_pack_str_body(pk, esc, sizeof esc) != 0) {
            return -1;
        }
        run = ++i;
    }
    return len > run ? msgpack_pack_str_body(pk, s + run, len - run) : 0;
}

bool rill_msgpack_key_is(const msgpack_object *k, const char *name) {
    size_t n = strlen(name);
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
           (n == 0 || memcmp(k->via.str.ptr, name, n) == 0);
}

const msgpack_object *rill_msgpack_get(const msgpack_object *map, const char *key) {
    if (map == NULL || map->type != MSGPACK_OBJECT_MAP) {
        return NULL;
    }
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        if (rill_msgpack_key_is(&map->via.map.ptr[i].key, key)) {
            return &map->via.map.ptr[i].val;
        }
    }
    return NULL;
}
