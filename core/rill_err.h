/*
 * rill_err.h - the one project-wide error type.
 *
 * Every action function in rill returns rill_err_t: 0 on success, a negative code on failure.
 * The codes, their names and their messages come from one X-macro table below, so a new code is
 * one line and rill_strerror() / rill_err_name() can never disagree with the enum.
 *
 * RILL_EAGAIN ("nothing yet") and RILL_EFULL ("budget or queue full") are flow control: callers
 * are expected to retry later or back off, not to treat them as failures.
 *
 * Thread safety: everything here is immutable and may be called from any thread.
 */
#ifndef RILL_ERR_H
#define RILL_ERR_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, value, message). Values are stable: they travel on the wire by name, and are logged. */
#define RILL_ERR_TABLE(X)                                             \
    X(OK, 0, "success")                                               \
    X(EINVAL, -1, "invalid argument")                                 \
    X(ENOMEM, -2, "out of memory")                                    \
    X(EFULL, -3, "budget or queue full")                              \
    X(EAGAIN, -4, "nothing available yet")                            \
    X(EIO, -5, "input/output error")                                  \
    X(EFORMAT, -6, "malformed input")                                 \
    X(EUNSUPPORTED, -7, "unsupported feature or version")             \
    X(ENOTFOUND, -8, "not found")                                     \
    X(EEXIST, -9, "already exists")                                   \
    X(ERANGE, -10, "value out of range")                              \
    X(ECANCELED, -11, "operation canceled")                           \
    X(EPERM, -12, "permission denied")                                \
    X(ETIMEDOUT, -13, "timed out")                                    \
    X(EBUSY, -14, "resource busy")                                    \
    X(ECORRUPT, -15, "data corrupt (checksum or invariant mismatch)") \
    X(ECLOSED, -16, "peer or object closed")                          \
    X(EDEVICE, -17, "accelerator device error")                       \
    X(EINTERNAL, -18, "internal error")

typedef enum rill_err {
#define RILL_ERR_ENUM_(name, value, msg) RILL_##name = (value),
    RILL_ERR_TABLE(RILL_ERR_ENUM_)
#undef RILL_ERR_ENUM_
} rill_err_t;

/* Human-readable message for err, e.g. "out of memory". Never NULL: unknown codes give
 * "unknown error". The string is static; do not free it. */
const char *rill_strerror(rill_err_t err);

/* Symbolic name for err without the RILL_ prefix, e.g. "ENOMEM" (the name used on the wire).
 * Never NULL: unknown codes give "EUNKNOWN". Static string. */
const char *rill_err_name(rill_err_t err);

/* Looks up a code by its symbolic name ("ENOMEM" or "RILL_ENOMEM"). Returns true and sets *out
 * when found; returns false and leaves *out unaltered otherwise. */
bool rill_err_from_name(const char *name, rill_err_t *out);

#ifdef __cplusplus
}
#endif
#endif /* RILL_ERR_H */
