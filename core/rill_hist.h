/*
 * rill_hist.h - latency histogram with a fixed bucket layout.
 *
 * Records non-negative integer samples (nanoseconds, by convention) into log-linear buckets:
 * values below 2^RILL_HIST_SUB_BITS are exact; above that, each power of two is split into
 * 2^RILL_HIST_SUB_BITS equal buckets, so a reported percentile is within 1/32 (about 3%) of the
 * true sample value, for values up to 2^63. Recording is O(1) and never allocates: the buckets
 * live inside the struct (about 16 KiB), which is why this is a value type.
 *
 * Percentiles are reported as the upper edge of the bucket that holds the rank (clamped to the
 * exact max), so p100 == max; the first rank reports the exact min, so p0 == min.
 *
 * Thread safety: one thread at a time per histogram. Combine per-thread histograms with
 * rill_hist_merge().
 */
#ifndef RILL_HIST_H
#define RILL_HIST_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RILL_HIST_SUB_BITS 5
#define RILL_HIST_BUCKETS  ((64 - RILL_HIST_SUB_BITS + 1) << RILL_HIST_SUB_BITS)

typedef struct rill_hist {
    uint64_t count;
    uint64_t min; /* UINT64_MAX while empty */
    uint64_t max;
    double sum; /* for the mean; a double so it cannot overflow */
    uint64_t buckets[RILL_HIST_BUCKETS];
} rill_hist_t;

/* Empties h. Owns no memory: there is no deinit. */
void rill_hist_init(rill_hist_t *h);

/* Adds one sample. */
void rill_hist_record(rill_hist_t *h, uint64_t value);

/* Value at quantile q in [0, 1] (0.5 = p50, 0.99 = p99; values outside are clamped): the
 * nearest-rank sample, rank = the smallest integer >= q * count (at least 1), reported as
 * rill_hist_rank() reports it; q <= 0 (or NaN) gives the min, q >= 1 the max. 0 when empty. */
uint64_t rill_hist_quantile(const rill_hist_t *h, double q);

/* Value of the rank-th smallest sample (1-based: rank 1 is the min, rank == count the max;
 * 0 reads as 1, above count as count): the upper edge of the bucket that holds it, clamped to
 * [min, max], so at or above the sample and within 1/32 of it, exact below 2^RILL_HIST_SUB_BITS
 * and for the min and the max. For figures that need two ranks, e.g. the median of an even
 * count as the mean of ranks count/2 and count/2 + 1. 0 when empty. O(buckets). */
uint64_t rill_hist_rank(const rill_hist_t *h, uint64_t rank);

/* Mean of the samples; 0 when empty. */
double rill_hist_mean(const rill_hist_t *h);

/* How many samples are at most value, at the histogram's precision: the samples of every
 * bucket that lies wholly at or below value, or all of them when value >= max. So it never
 * counts a sample above value, and it leaves out only samples of value's own bucket (within
 * 1/32 below value; none when value is a bucket's upper edge, rill_hist_bucket_range, or below
 * 2^RILL_HIST_SUB_BITS). Non-decreasing in value; 0 when empty. For exporting cumulative
 * buckets (Prometheus `le`). O(buckets). */
uint64_t rill_hist_count_le(const rill_hist_t *h, uint64_t value);

/* Adds every sample of src into dst. */
void rill_hist_merge(rill_hist_t *dst, const rill_hist_t *src);

/* Index of the bucket that holds value, and the inclusive value range it covers (exposed for
 * tests and for exporting the histogram). */
int rill_hist_bucket_of(uint64_t value);
void rill_hist_bucket_range(int bucket, uint64_t *lo, uint64_t *hi);

#ifdef __cplusplus
}
#endif
#endif /* RILL_HIST_H */
