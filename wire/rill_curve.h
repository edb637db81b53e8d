/*
 * rill_curve.h - CURVE key files: the one reader of the keys rilld (--curve-keys DIR) and the
 * client (rill_client_params_t's curve_* keys) are given (docs/protocol.md, Security).
 *
 * A key file holds one key in Z85 (ZeroMQ's RFC 32 encoding: 40 characters for 32 bytes), as
 * `rill keygen PREFIX` writes them (PREFIX.pub public, PREFIX.key secret), with optional
 * whitespace (spaces, tabs, line ends) around it and nothing else. The Z85 text is decoded with
 * libzmq's zmq_z85_decode, which refuses characters outside the alphabet and groups whose value
 * exceeds 32 bits, so a key that passes is one libzmq's zmq_setsockopt will take.
 *
 * Thread safety: pure functions (rill_curve_key_read reads the file and keeps nothing).
 */
#ifndef RILL_CURVE_H
#define RILL_CURVE_H

#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RILL_CURVE_KEY_Z85  40   /* characters of a key in Z85 */
#define RILL_CURVE_KEY_FILE 4096 /* a key file longer than this is refused */

/* Parses text[0, len) (not NUL-terminated; NUL bytes are not whitespace) as one Z85 key with
 * optional whitespace around it. On success writes the key's 40 characters and a NUL into z85
 * (optional) and its 32 bytes into raw (optional). Errors: RILL_EFORMAT (anything else: no key,
 * a key of another length, a character outside Z85, two words), RILL_EINVAL (text NULL with
 * len > 0); z85 and raw are then untouched. */
rill_err_t rill_curve_key_parse(const char *text, size_t len, char z85[RILL_CURVE_KEY_Z85 + 1],
                                uint8_t raw[32]);

/* Reads the key file at path (see the top of this file) into z85 and raw (each optional) as
 * rill_curve_key_parse does; on error rill_last_error(err) names path. Errors:
 * RILL_EIO (the file cannot be opened or read, with the system's reason), RILL_EFORMAT (not one
 * Z85 key, or longer than RILL_CURVE_KEY_FILE bytes), RILL_EINVAL (path NULL). Blocks on the
 * read; allocates nothing. */
rill_err_t rill_curve_key_read(const char *path, char z85[RILL_CURVE_KEY_Z85 + 1], uint8_t raw[32]);

#ifdef __cplusplus
}
#endif
#endif /* RILL_CURVE_H */
