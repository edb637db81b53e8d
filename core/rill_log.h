/*
 * rill_log.h - logging through a callback, the monotonic clock, and invariant checks.
 *
 * The library never prints (STYLE.md rule 19): it hands each message to the callback that the
 * application installed with rill_log_set(). With no callback, messages are dropped. Messages
 * below the threshold (rill_log_set_level) are not even formatted.
 *
 * Thread safety: rill_log() and rill_now_ns() are thread-safe. rill_log_set() and
 * rill_log_set_level() are thread-safe too (atomics), but a callback may still be running on
 * another thread right after it was replaced; replace it before starting threads that log.
 */
#ifndef RILL_LOG_H
#define RILL_LOG_H

#include <stdint.h>

#include "rill_compat.h"
#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rill_log_level {
    RILL_LOG_DEBUG = 0,
    RILL_LOG_INFO = 1,
    RILL_LOG_WARN = 2,
    RILL_LOG_ERROR = 3,
    RILL_LOG_NONE = 4 /* threshold only: nothing is delivered */
} rill_log_level_t;

/* Receives one formatted message (no trailing newline), borrowed for the call only. `file` and
 * `line` name the call site. Called on the thread that logged; must not call rill_log(). */
typedef void (*rill_log_fn)(void *user, rill_log_level_t level, const char *file, int line,
                            const char *msg);

/* Installs fn (NULL: drop all messages). `user` is passed back to fn. */
void rill_log_set(rill_log_fn fn, void *user);

/* Messages below `level` are dropped before formatting. Default: RILL_LOG_INFO. */
void rill_log_set_level(rill_log_level_t level);

/* "debug", "info", "warn", "error" or "none". Static string. */
const char *rill_log_level_name(rill_log_level_t level);

/* A ready-made callback that writes "LEVEL file:line: msg" lines to the FILE * passed as user
 * (stderr when user is NULL). For programs, never called by the library on its own. */
void rill_log_to_file(void *user, rill_log_level_t level, const char *file, int line,
                      const char *msg);

/* Formats (printf-style) and delivers a message. Messages longer than 1023 bytes are cut.
 * Does not allocate. */
void rill__log(rill_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define RILL_LOGD(...) rill__log(RILL_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)
#define RILL_LOGI(...) rill__log(RILL_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define RILL_LOGW(...) rill__log(RILL_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define RILL_LOGE(...) rill__log(RILL_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)

/* Monotonic clock in nanoseconds (CLOCK_MONOTONIC): only differences are meaningful. */
uint64_t rill_now_ns(void);

/* Reports a broken invariant (logs at ERROR, then abort()s). For corrupted internal state only,
 * never for bad input from files, the network or users (STYLE.md rule 14). */
RILL_NORETURN void rill__assert_fail(const char *expr, const char *file, int line);

/* Always on, also in release builds. */
#define RILL_ASSERT(expr)                                 \
    do {                                                  \
        if (!(expr)) {                                    \
            rill__assert_fail(#expr, __FILE__, __LINE__); \
        }                                                 \
    } while (0)

/* Runs an expression returning rill_err_t; on error stores it in the function's local `err` and
 * jumps to the function's `cleanup` label (STYLE.md rule 15: no macro hides a return). */
#define RILL_TRY(expr)        \
    do {                      \
        err = (expr);         \
        if (err != RILL_OK) { \
            goto cleanup;     \
        }                     \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif /* RILL_LOG_H */
