/*
 * tokenizer_utf8.c - the two UTF-8 decoders the tokenizer needs.
 *
 * Encoding must see the text exactly as llama.cpp's unicode_cpts_from_utf8() does, which is
 * lenient in its own way: a lead byte is trusted for the sequence length, continuation bytes
 * are checked, overlong forms and surrogates are accepted as the code points they spell, and a
 * byte that starts no complete sequence becomes U+FFFD and consumes one byte. The code points
 * are then re-encoded (so an overlong comes out shortest). rill__utf8_llama_clean() reproduces
 * that; code points above U+10FFFF (where llama.cpp throws) become U+FFFD. Because almost all
 * real input is already clean, rill__utf8_clean_prefix() finds the part that needs no rewrite,
 * and the caller only copies when something is dirty.
 *
 * Output of the stream detokenizer must be strictly valid, so rill__utf8_unit() implements the
 * Unicode "maximal subpart" rule (table 3-7 of the standard): each maximal prefix of a
 * well-formed sequence that cannot be completed is one ill-formed unit.
 */
#include "tokenizer_internal.h"

size_t rill__utf8_clean_prefix(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned char b = p[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        bool valid = false;
        size_t len = rill__utf8_unit(p + i, n - i, &valid);
        if (len == 0 || !valid) {
            return i;
        }
        i += len;
    }
    return n;
}

static size_t put_cpt(uint32_t c, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (c <= 0x7f) {
        o[0] = (unsigned char)c;
        return 1;
    }
    if (c <= 0x7ff) {
        o[0] = (unsigned char)(0xc0 | (c >> 6));
        o[1] = (unsigned char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c <= 0xffff) {
        o[0] = (unsigned char)(0xe0 | (c >> 12));
        o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
        o[2] = (unsigned char)(0x80 | (c & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | (c >> 18));
    o[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3f));
    o[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3f));
    o[3] = (unsigned char)(0x80 | (c & 0x3f));
    return 4;
}

static bool is_cont(unsigned char b) {
    return (b & 0xc0) == 0x80;
}

size_t rill__utf8_llama_clean(const char *s, size_t n, char *out, char *subj, bool *has_surrogate) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    bool sur = false;
    while (i < n) {
        unsigned char b = p[i];
        uint32_t c = 0xfffd;
        size_t adv = 1;
        if (b < 0x80) {
            c = b;
        } else if (b < 0xc0) {
            /* stray continuation byte: U+FFFD */
        } else if (b < 0xe0) {
            if (i + 1 < n && is_cont(p[i + 1])) {
                c = ((uint32_t)(b & 0x1f) << 6) | (p[i + 1] & 0x3f);
                adv = 2;
            }
        } else if (b < 0xf0) {
            if (i + 2 < n && is_cont(p[i + 1]) && is_cont(p[i + 2])) {
                c = ((uint32_t)(b & 0x0f) << 12) | ((uint32_t)(p[i + 1] & 0x3f) << 6) |
                    (p[i + 2] & 0x3f);
                adv = 3;
            }
        } else if (b < 0xf8) {
            if (i + 3 < n && is_cont(p[i + 1]) && is_cont(p[i + 2]) && is_cont(p[i + 3])) {
                c = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(p[i + 1] & 0x3f) << 12) |
                    ((uint32_t)(p[i + 2] & 0x3f) << 6) | (p[i + 3] & 0x3f);
                adv = 4;
                if (c > 0x10ffff) {
                    c = 0xfffd; /* llama.cpp throws here; we pick the replacement character */
                }
            }
        }
        size_t k = put_cpt(c, out + o);
        if (subj != NULL) {
            if (c >= 0xd800 && c <= 0xdfff) {
                /* PCRE2 rejects surrogates; U+FFFD has the same class in every pattern we
                 * use (not a letter, digit or space) and the same length */
                put_cpt(0xfffd, subj + o);
                sur = true;
            } else {
                for (size_t j = 0; j < k; j++) {
                    subj[o + j] = out[o + j];
                }
            }
        }
        o += k;
        i += adv;
    }
    if (has_surrogate != NULL) {
        *has_surrogate = sur;
    }
    return o;
}

size_t rill__utf8_unit(const unsigned char *s, size_t n, bool *valid) {
    unsigned char b = s[0];
    *valid = false;
    if (b < 0x80) {
        *valid = true;
        return 1;
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (b >= 0xc2 && b <= 0xdf) {
        need = 2;
    } else if (b >= 0xe0 && b <= 0xef) {
        need = 3;
        if (b == 0xe0) {
            lo = 0xa0;
        } else if (b == 0xed) {
            hi = 0x9f;
        }
    } else if (b >= 0xf0 && b <= 0xf4) {
        need = 4;
        if (b == 0xf0) {
            lo = 0x90;
        } else if (b == 0xf4) {
            hi = 0x8f;
        }
    } else {
        return 1; /* 80..C1, F5..FF never start a character */
    }
    for (size_t k = 1; k < need; k++) {
        if (k >= n) {
            return 0; /* valid so far, incomplete */
        }
        unsigned char c = s[k];
        bool ok = k == 1 ? (c >= lo && c <= hi) : is_cont(c);
        if (!ok) {
            return k; /* the maximal subpart ends before c */
        }
    }
    *valid = true;
    return need;
}
