/* dtype.c - the type table of rill_dtype.h. */
#include <string.h>

#include "rill_dtype.h"

bool rill_dtype_valid(int t) {
    switch (t) {
#define CASE_(name, id, label, be, bb) case id:
        RILL_DTYPE_TABLE(CASE_)
#undef CASE_
        return true;
    default:
        return false;
    }
}

const char *rill_dtype_name(rill_dtype_t t) {
    switch (t) {
#define CASE_(name, id, label, be, bb) \
    case RILL_DTYPE_##name:            \
        return label;
        RILL_DTYPE_TABLE(CASE_)
#undef CASE_
    }
    return "?";
}

int rill_dtype_from_name(const char *name) {
    if (name == NULL) {
        return -1;
    }
#define FROM_(name_, id, label, be, bb) \
    if (strcmp(name, label) == 0) {     \
        return (id);                    \
    }
    RILL_DTYPE_TABLE(FROM_)
#undef FROM_
    return -1;
}

int64_t rill_dtype_block_elems(rill_dtype_t t) {
    switch (t) {
#define CASE_(name, id, label, be, bb) \
    case RILL_DTYPE_##name:            \
        return be;
        RILL_DTYPE_TABLE(CASE_)
#undef CASE_
    }
    return 0;
}

int64_t rill_dtype_block_bytes(rill_dtype_t t) {
    switch (t) {
#define CASE_(name, id, label, be, bb) \
    case RILL_DTYPE_##name:            \
        return bb;
        RILL_DTYPE_TABLE(CASE_)
#undef CASE_
    }
    return 0;
}

int64_t rill_dtype_row_bytes(rill_dtype_t t, int64_t n) {
    int64_t be = rill_dtype_block_elems(t);
    int64_t bb = rill_dtype_block_bytes(t);
    if (be == 0 || n < 0 || n % be != 0) {
        return -1;
    }
    int64_t blocks = n / be;
    if (blocks > INT64_MAX / bb) {
        return -1;
    }
    return blocks * bb;
}
