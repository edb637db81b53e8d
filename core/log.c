/*
 * log.c - the logging callback, the clock and the assertion handler.
 *
 * The callback and its user pointer are stored together in one atomic pointer to a slot taken
 * from a small static array, so a reader never sees a new fn with an old user pointer. Slots are
 * never freed (there are few installs in a process's life); once all are used, the last slot is
 * rewritten, which can only race with a reader in a program that keeps replacing its logger from
 * several threads, which the header forbids.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "rill_log.h"

typedef struct sink {
    rill_log_fn fn;
    void *user;
} sink_t;

#define N_SLOTS 64
static sink_t g_slots[N_SLOTS];
static _Atomic int g_next_slot;
static _Atomic(sink_t *) g_sink;
static _Atomic int g_level = RILL_LOG_INFO;

void rill_log_set(rill_log_fn fn, void *user) {
    if (fn == NULL) {
        atomic_store(&g_sink, NULL);
        return;
    }
    int i = atomic_fetch_add(&g_next_slot, 1);
    if (i >= N_SLOTS) {
        i = N_SLOTS - 1;
    }
    g_slots[i].fn = fn;
    g_slots[i].user = user;
    atomic_store(&g_sink, &g_slots[i]);
}

void rill_log_set_level(rill_log_level_t level) {
    atomic_store(&g_level, (int)level);
}

const char *rill_log_level_name(rill_log_level_t level) {
    switch (level) {
    case RILL_LOG_DEBUG:
        return "debug";
    case RILL_LOG_INFO:
        return "info";
    case RILL_LOG_WARN:
        return "warn";
    case RILL_LOG_ERROR:
        return "error";
    case RILL_LOG_NONE:
        return "none";
    }
    return "?";
}

void rill_log_to_file(void *user, rill_log_level_t level, const char *file, int line,
                      const char *msg) {
    FILE *f = user != NULL ? (FILE *)user : stderr;
    fprintf(f, "%s %s:%d: %s\n", rill_log_level_name(level), file, line, msg);
}

void rill__log(rill_log_level_t level, const char *file, int line, const char *fmt, ...) {
    if ((int)level < atomic_load_explicit(&g_level, memory_order_relaxed) ||
        level >= RILL_LOG_NONE) {
        return;
    }
    sink_t *s = atomic_load_explicit(&g_sink, memory_order_acquire);
    if (s == NULL) {
        return;
    }
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->fn(s->user, level, file, line, msg);
}

uint64_t rill_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

_Noreturn void rill__assert_fail(const char *expr, const char *file, int line) {
    rill__log(RILL_LOG_ERROR, file, line, "invariant broken: %s", expr);
    abort();
}
