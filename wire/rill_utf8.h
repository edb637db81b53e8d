/*
 * rill_utf8.h - UTF-8 as the protocol needs it: every str rilld sends is valid UTF-8
 * (docs/protocol.md), because strict msgpack readers refuse a str that is not, and some of what
 * rilld sends echoes bytes a client sent (an unknown command's name, a standing question).
 *
 * Valid UTF-8 is RFC 3629's (Unicode's Table 3-7): U+0000..U+10FFFF in the shortest form, no
 * surrogates (U+D800..U+DFFF). Invalid, byte by byte: a continuation byte where a character
 * must start, C0, C1 and F5..FF, an overlong form (E0 80..9F, F0 80..8F), a surrogate (ED
 * A0..BF), a code point above U+10FFFF (F4 90..BF), a sequence cut short by its end or by a
 * byte that cannot continue it.
 *
 * The escape: valid characters are kept byte for byte; each byte of what is not valid becomes
 * the four characters \xNN (lower-case hex), so a reader sees which bytes were sent. The
 * escape is for people, not a reversible encoding: text that already holds the characters
 * "\x80" is kept as it is.
 *
 * Thread safety: pure functions; nothing allocates.
 */
#ifndef RILL_UTF8_H
#define RILL_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes of the valid character that starts s[0, n) (1..4), or 0 when none starts there (n == 0
 * included). */
size_t rill_utf8_char_len(const char *s, size_t n);

/* Whether s[0, n) is all valid UTF-8 (n == 0: true). When it is not and bad_at != NULL,
 * *bad_at is the offset of the first byte that does not start a valid character. s may be NULL
 * when n is 0. */
bool rill_utf8_valid(const char *s, size_t n, size_t *bad_at);

/* Length of the escaped form of s[0, n) (see the top of this file): n when s is valid, up to
 * 4 * n. */
size_t rill_utf8_escaped_len(const char *s, size_t n);

/* Writes the escaped form of s[0, n) and a NUL into out[0, cap). Returns its length (without
 * the NUL), or RILL_EFULL (negative) when cap <= rill_utf8_escaped_len(s, n) (out is then
 * unspecified), RILL_EINVAL for out NULL or s NULL with n > 0. */
int64_t rill_utf8_escape(const char *s, size_t n, char *out, size_t cap);

/* The longest length <= max at which s[0, n) can be cut without cutting a valid character in
 * two: n when n <= max; else max, less the bytes of a valid character that starts before max
 * and ends after it (bytes that are not valid UTF-8 are cut anywhere: they are escaped one by
 * one). For cutting echoed text to a display length. */
size_t rill_utf8_cut(const char *s, size_t n, size_t max);

#ifdef __cplusplus
}
#endif
#endif /* RILL_UTF8_H */
