/*
 * curve_key.c - CURVE key files (contract: rill_curve.h).
 *
 * Design: the file is read whole into a stack buffer (a key file is 41 bytes; anything above
 * RILL_CURVE_KEY_FILE is not one) and parsed as exactly one word of 40 characters between
 * optional whitespace; that word is decoded with libzmq's zmq_z85_decode. libzmq is used
 * rather than a Z85 decoder of our own because rilld and the client hand the key to libzmq
 * anyway, and its decoder is the one whose acceptance matters; it stays a private dependency
 * of this module (nothing in rill_curve.h names it).
 *
 * Rejected: taking the first word and ignoring what follows it (the readers before this one
 * did): a file holding a key and more is not what `rill keygen` writes, and a second word is
 * more likely a mistake (two keys pasted into one file) than a comment.
 */
#include "rill_curve.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

static bool blank(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

rill_err_t rill_curve_key_parse(const char *text, size_t len, char z85[RILL_CURVE_KEY_Z85 + 1],
                                uint8_t raw[32]) {
    if (text == NULL && len > 0) {
        return RILL_EINVAL;
    }
    size_t a = 0;
    while (a < len && blank(text[a])) {
        a++;
    }
    size_t b = a;
    while (b < len && !blank(text[b])) {
        b++;
    }
    size_t c = b;
    while (c < len && blank(text[c])) {
        c++;
    }
    if (b - a != RILL_CURVE_KEY_Z85 || c != len) {
        return RILL_EFORMAT;
    }
    char z[RILL_CURVE_KEY_Z85 + 1];
    memcpy(z, text + a, RILL_CURVE_KEY_Z85);
    z[RILL_CURVE_KEY_Z85] = '\0';
    if (memchr(z, '\0', RILL_CURVE_KEY_Z85) != NULL) {
        return RILL_EFORMAT; /* zmq_z85_decode would see a shorter string */
    }
    uint8_t r[32];
    if (zmq_z85_decode(r, z) == NULL) {
        return RILL_EFORMAT;
    }
    if (z85 != NULL) {
        memcpy(z85, z, sizeof z);
    }
    if (raw != NULL) {
        memcpy(raw, r, sizeof r);
    }
    return RILL_OK;
}

static rill_err_t key_read(const char *path, char z85[RILL_CURVE_KEY_Z85 + 1], uint8_t raw[32],
                           char *msg, size_t msglen) {
    if (msg != NULL && msglen > 0) {
        msg[0] = '\0';
    }
    if (path == NULL) {
        if (msg != NULL && msglen > 0) {
            snprintf(msg, msglen, "no key file given");
        }
        return RILL_EINVAL;
    }
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        if (msg != NULL && msglen > 0) {
            snprintf(msg, msglen, "%s: %s", path, strerror(errno));
        }
        return RILL_EIO;
    }
    char buf[RILL_CURVE_KEY_FILE + 1];
    size_t n = fread(buf, 1, sizeof buf, f);
    int read_errno = ferror(f) ? errno : 0;
    bool failed = ferror(f) != 0;
    fclose(f);
    if (failed) {
        if (msg != NULL && msglen > 0) {
            snprintf(msg, msglen, "%s: %s", path,
                     read_errno != 0 ? strerror(read_errno) : "read error");
        }
        return RILL_EIO;
    }
    if (n > RILL_CURVE_KEY_FILE || rill_curve_key_parse(buf, n, z85, raw) != RILL_OK) {
        if (msg != NULL && msglen > 0) {
            snprintf(msg, msglen, "%s: not a Z85 key file (one key of %d characters)", path,
                     RILL_CURVE_KEY_Z85);
        }
        return RILL_EFORMAT;
    }
    return RILL_OK;
}

rill_err_t rill_curve_key_read(const char *path, char z85[RILL_CURVE_KEY_Z85 + 1],
                               uint8_t raw[32]) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(key_read(path, z85, raw, msg, sizeof msg), msg);
}
