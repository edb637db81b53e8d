/*
 * utf8.c - UTF-8 validation, escaping and cutting (contract: rill_utf8.h).
 *
 * Design: one decision, rill_utf8_char_len, says whether a valid character starts at a byte
 * and how long it is, from the byte ranges of Unicode's Table 3-7 (the second byte's range
 * depends on the first: that is where overlongs, surrogates and code points above U+10FFFF are
 * refused, without computing the code point). Everything else walks with it: a valid character
 * is kept whole, a byte where none starts is escaped alone and the walk goes on at the next
 * byte, so a sequence cut short costs its own bytes only and what follows is read as it is.
 * Rejected: U+FFFD replacement (the model's stream detokenizer does that for text it makes),
 * because an echo of what a client sent should show the bytes that were sent.
 */
#include "rill_utf8.h"

#include <string.h>

size_t rill_utf8_char_len(const char *s, size_t n) {
    if (s == NULL || n == 0) {
        return 0;
    }
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[0];
    if (c < 0x80) {
        return 1;
    }
    size_t need;
    unsigned lo = 0x80, hi = 0xbf; /* the second byte's range */
    if (c < 0xc2) {
        return 0; /* a continuation byte, or C0/C1 (overlong two-byte forms) */
    } else if (c < 0xe0) {
        need = 2;
    } else if (c < 0xf0) {
        need = 3;
        lo = c == 0xe0 ? 0xa0 : 0x80; /* E0 80..9F: overlong */
        hi = c == 0xed ? 0x9f : 0xbf; /* ED A0..BF: surrogates */
    } else if (c < 0xf5) {
        need = 4;
        lo = c == 0xf0 ? 0x90 : 0x80; /* F0 80..8F: overlong */
        hi = c == 0xf4 ? 0x8f : 0xbf; /* F4 90..BF: above U+10FFFF */
    } else {
        return 0;
    }
    if (n < need || p[1] < lo || p[1] > hi) {
        return 0;
    }
    for (size_t i = 2; i < need; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            return 0;
        }
    }
    return need;
}

bool rill_utf8_valid(const char *s, size_t n, size_t *bad_at) {
    size_t i = 0;
    while (i < n) {
        if ((unsigned char)s[i] < 0x80) { /* ASCII runs, the common case, byte by byte */
            i++;
            continue;
        }
        size_t l = rill_utf8_char_len(s + i, n - i);
        if (l == 0) {
            if (bad_at != NULL) {
                *bad_at = i;
            }
            return false;
        }
        i += l;
    }
    return true;
}

size_t rill_utf8_escaped_len(const char *s, size_t n) {
    size_t out = 0;
    for (size_t i = 0; i < n;) {
        size_t l = rill_utf8_char_len(s + i, n - i);
        out += l > 0 ? l : 4;
        i += l > 0 ? l : 1;
    }
    return out;
}

int64_t rill_utf8_escape(const char *s, size_t n, char *out, size_t cap) {
    static const char hex[] = "0123456789abcdef";
    if (out == NULL || (s == NULL && n > 0)) {
        return RILL_EINVAL;
    }
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t l = rill_utf8_char_len(s + i, n - i);
        size_t w = l > 0 ? l : 4;
        if (cap - o <= w) { /* the NUL needs room too */
            return RILL_EFULL;
        }
        if (l > 0) {
            memcpy(out + o, s + i, l);
            i += l;
        } else {
            unsigned char c = (unsigned char)s[i++];
            out[o] = '\\';
            out[o + 1] = 'x';
            out[o + 2] = hex[c >> 4];
            out[o + 3] = hex[c & 15];
        }
        o += w;
    }
    if (cap == 0) {
        return RILL_EFULL;
    }
    out[o] = '\0';
    return (int64_t)o;
}

size_t rill_utf8_cut(const char *s, size_t n, size_t max) {
    if (n <= max) {
        return n;
    }
    /* a character crossing max starts at most 3 bytes before it */
    for (size_t back = 1; back <= 3 && back <= max; back++) {
        size_t at = max - back;
        size_t l = rill_utf8_char_len(s + at, n - at);
        if (l > 0) {
            return at + l > max ? at : max;
        }
    }
    return max;
}
