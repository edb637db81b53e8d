/*
 * hist.c - log-linear latency histogram (layout described in rill_hist.h).
 *
 * Bucket b < 2^S holds the exact value b. Above, with e = floor(log2 v) >= S, the octave
 * [2^e, 2^(e+1)) is split into 2^S buckets of width 2^(e-S): b = ((e - S + 1) << S) + sub, where
 * sub is the S bits below the leading one. This is the HdrHistogram idea with one fixed precision,
 * chosen so that the whole table fits in the struct and recording is a few instructions.
 */
#include <string.h>

#include "rill_hist.h"

#define S RILL_HIST_SUB_BITS

void rill_hist_init(rill_hist_t *h) {
    memset(h, 0, sizeof *h);
    h->min = UINT64_MAX;
}

int rill_hist_bucket_of(uint64_t v) {
    if (v < ((uint64_t)1 << S)) {
        return (int)v;
    }
    int e = 63 - __builtin_clzll(v);
    int sub = (int)((v >> (e - S)) & (((uint64_t)1 << S) - 1));
    return ((e - S + 1) << S) + sub;
}

void rill_hist_bucket_range(int b, uint64_t *lo, uint64_t *hi) {
    if (b < (1 << S)) {
        *lo = *hi = (uint64_t)(b < 0 ? 0 : b);
        return;
    }
    int g = b >> S;
    uint64_t sub = (uint64_t)(b & ((1 << S) - 1));
    uint64_t start = (((uint64_t)1 << S) + sub) << (g - 1);
    *lo = start;
    *hi = start + (((uint64_t)1 << (g - 1)) - 1);
}

void rill_hist_record(rill_hist_t *h, uint64_t v) {
    h->buckets[rill_hist_bucket_of(v)]++;
    h->count++;
    h->sum += (double)v;
    if (v < h->min) {
        h->min = v;
    }
    if (v > h->max) {
        h->max = v;
    }
}

uint64_t rill_hist_rank(const rill_hist_t *h, uint64_t rank) {
    if (h->count == 0) {
        return 0;
    }
    if (rank <= 1) {
        return h->min; /* exact: the upper edge of its bucket may hold larger samples */
    }
    if (rank >= h->count) {
        return h->max;
    }
    uint64_t seen = 0;
    for (int b = 0; b < RILL_HIST_BUCKETS; b++) {
        seen += h->buckets[b];
        if (seen >= rank) {
            uint64_t lo, hi;
            rill_hist_bucket_range(b, &lo, &hi);
            if (hi > h->max) {
                hi = h->max;
            }
            if (hi < h->min) {
                hi = h->min;
            }
            return hi;
        }
    }
    return h->max;
}

uint64_t rill_hist_count_le(const rill_hist_t *h, uint64_t value) {
    if (h->count == 0 || value >= h->max) {
        return h->count;
    }
    uint64_t n = 0;
    for (int b = 0; b < RILL_HIST_BUCKETS; b++) {
        uint64_t lo, hi;
        rill_hist_bucket_range(b, &lo, &hi);
        if (hi > value) {
            break; /* buckets ascend: none after this one lies at or below value either */
        }
        n += h->buckets[b];
    }
    return n;
}

uint64_t rill_hist_quantile(const rill_hist_t *h, double q) {
    if (h->count == 0) {
        return 0;
    }
    if (!(q > 0.0)) { /* also catches NaN */
        return h->min;
    }
    if (q >= 1.0) {
        return h->max;
    }
    /* Rank of the sample we want, 1-based: the smallest r with r >= q * count. */
    double want = q * (double)h->count;
    uint64_t rank = (uint64_t)want;
    if ((double)rank < want) {
        rank++;
    }
    return rill_hist_rank(h, rank);
}

double rill_hist_mean(const rill_hist_t *h) {
    return h->count == 0 ? 0.0 : h->sum / (double)h->count;
}

void rill_hist_merge(rill_hist_t *dst, const rill_hist_t *src) {
    for (int b = 0; b < RILL_HIST_BUCKETS; b++) {
        dst->buckets[b] += src->buckets[b];
    }
    dst->count += src->count;
    dst->sum += src->sum;
    if (src->min < dst->min) {
        dst->min = src->min;
    }
    if (src->max > dst->max) {
        dst->max = src->max;
    }
}
