/*
 * err.c - rill_strerror / rill_err_name, generated from the table in rill_err.h so the names and
 * messages cannot drift from the enum; and the per-thread error detail (rill_last_error).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rill_err.h"

/* The calling thread's last detail and the code it was recorded for. */
static _Thread_local char g_detail[RILL_ERR_DETAIL];
static _Thread_local rill_err_t g_detail_err = RILL_OK;

const char *rill_last_error(rill_err_t err) {
    if (err == RILL_OK) {
        return g_detail; /* whatever was recorded last ("" when nothing was) */
    }
    return err == g_detail_err && g_detail[0] != '\0' ? g_detail : rill_strerror(err);
}

rill_err_t rill__error(rill_err_t err, const char *fmt, ...) {
    char tmp[sizeof g_detail];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    memcpy(g_detail, tmp, sizeof g_detail);
    g_detail_err = err;
    return err;
}

const char *rill_strerror(rill_err_t err) {
    switch (err) {
#define RILL_ERR_MSG_(name, value, msg) \
    case RILL_##name:                   \
        return msg;
        RILL_ERR_TABLE(RILL_ERR_MSG_)
#undef RILL_ERR_MSG_
    }
    return "unknown error";
}

const char *rill_err_name(rill_err_t err) {
    switch (err) {
#define RILL_ERR_NAME_(name, value, msg) \
    case RILL_##name:                    \
        return #name;
        RILL_ERR_TABLE(RILL_ERR_NAME_)
#undef RILL_ERR_NAME_
    }
    return "EUNKNOWN";
}

bool rill_err_from_name(const char *name, rill_err_t *out) {
    if (name == NULL) {
        return false;
    }
    if (strncmp(name, "RILL_", 5) == 0) {
        name += 5;
    }
#define RILL_ERR_LOOKUP_(ename, value, msg) \
    if (strcmp(name, #ename) == 0) {        \
        *out = RILL_##ename;                \
        return true;                        \
    }
    RILL_ERR_TABLE(RILL_ERR_LOOKUP_)
#undef RILL_ERR_LOOKUP_
    return false;
}

rill_err_t rill__error_str(rill_err_t err, const char *msg) {
    if (err != RILL_OK && msg != NULL && msg[0] != '\0') {
        rill__error(err, "%s", msg);
    }
    return err;
}
