/*
 * err.c - rill_strerror / rill_err_name, generated from the table in rill_err.h so the names and
 * messages cannot drift from the enum.
 */
#include <string.h>

#include "rill_err.h"

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
