/*
 * rill_pool.h - thread pool for data-parallel kernels.
 *
 * One job at a time: rill_pool_for() splits [0, n) into chunks that the calling thread and the
 * pool's workers claim with an atomic counter, and returns when every chunk has run. It is built
 * for the per-layer matmuls of a forward pass, where a dispatch happens hundreds of times per
 * token, so a dispatch allocates nothing and takes no lock on the fast path: workers spin on a
 * generation counter for a short while after each job (about 50 microseconds by default) and only
 * then sleep on a condition variable; the caller wakes sleepers only when there are some.
 * Completion is counted per chunk: the call waits for the chunks, never for a worker, so a
 * worker that another process's thread has pushed off its core (or that is still waking) does
 * not hold a dispatch up; the caller runs the chunks it would have taken. bench/bench_pool
 * measures the dispatch overhead and, with real work in the chunks, the efficiency.
 *
 * Thread safety: a pool is used by one thread at a time (its owner, typically an engine thread);
 * calls from several threads must be serialized by the caller. The body runs concurrently on up
 * to rill_pool_threads() threads and must only touch its own chunk's outputs.
 */
#ifndef RILL_POOL_H
#define RILL_POOL_H

#include <stdint.h>

#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_pool rill_pool_t;

/* Runs the half-open index range [begin, end) on thread `thread` (0 = the calling thread,
 * 1..n-1 = workers). */
typedef void (*rill_pool_fn)(void *ctx, int64_t begin, int64_t end, int thread);

/* Starts a pool of n_threads threads in all, the caller included (n_threads - 1 workers are
 * created). n_threads = 0 means one per online CPU. Errors: RILL_EINVAL (n_threads < 0 or > 512),
 * RILL_ENOMEM, RILL_EINTERNAL (thread creation failed; nothing is left running).
 * Caller owns *out; destroy with rill_pool_destroy(). */
rill_err_t rill_pool_new(int n_threads, rill_pool_t **out);

/* Stops and joins the workers, frees the pool, sets *pp = NULL. NULL-safe. Must not be called
 * while a rill_pool_for() is running. */
void rill_pool_destroy(rill_pool_t **pp);

/* Threads in the pool, the caller included (>= 1). */
int rill_pool_threads(const rill_pool_t *pool);

/* Runs fn over [0, n) in chunks of `grain` indices (grain <= 0: about four chunks per thread)
 * and blocks until all have finished. n <= 0 returns at once. With one thread, or when there is
 * only one chunk, fn runs inline on the caller. pool may be NULL: runs inline. Never allocates. */
void rill_pool_for(rill_pool_t *pool, int64_t n, int64_t grain, rill_pool_fn fn, void *ctx);

/* Sets how long idle workers spin before sleeping, in microseconds (0: sleep at once).
 * Takes effect from the next job. */
void rill_pool_set_spin_us(rill_pool_t *pool, int spin_us);

#ifdef __cplusplus
}
#endif
#endif /* RILL_POOL_H */
