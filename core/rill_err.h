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
 * Thread safety: the table is immutable and may be used from any thread; error details
 * (rill_last_error) are per thread.
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

/* ---- error details: one way for the whole library ----------------------------------------------
 *
 * A function that fails returns its rill_err_t and records a sentence saying what went wrong
 * (which argument, field, byte offset, file, budget) for the calling thread; rill_last_error()
 * reads it. One mechanism for every public function - constructors that have no handle yet,
 * operations on a handle, thread-safe objects called from many threads (the scheduler), pure
 * validators - so no call takes a caller's buffer and no handle keeps a message.
 *
 * Read it right after the failing call, on the same thread, passing the code the call returned:
 * when the last detail recorded on this thread was recorded for that code it is returned, else
 * rill_strerror(err) (a failure with nothing to say beyond its code records nothing). With
 * RILL_OK: the last detail recorded on this thread whatever its code ("" when none), for a
 * caller that did not keep the code. Borrowed: valid until the next rill call on this thread.
 * Never NULL. Thread safety: per thread. */
const char *rill_last_error(rill_err_t err);

/* Records the detail of err for the calling thread (printf-style; cut at 511 bytes) and returns
 * err, so that a failure path reads `return rill__error(RILL_EINVAL, "window %d", w);`. The
 * arguments may point into the current detail (it is formatted into a scratch buffer first).
 * Library use only. */
rill_err_t rill__error(rill_err_t err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* For a function that formats its detail into a buffer of its own: records msg as the detail of
 * err and returns err; an empty msg leaves the detail a deeper call recorded. RILL_OK: no-op.
 * Library use only. */
rill_err_t rill__error_str(rill_err_t err, const char *msg);

/* Bytes of a detail buffer (what rill_last_error can return, NUL included). */
#define RILL_ERR_DETAIL 512

#ifdef __cplusplus
}
#endif
#endif /* RILL_ERR_H */
