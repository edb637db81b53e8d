/*
 * pool.c - thread pool for parallel-for (contract in rill_pool.h).
 *
 * Completion is counted per chunk, not per worker. The caller describes job G in slot G % 2
 * (fn, ctx, n, grain, chunks: relaxed atomics), then publishes it with one store of `claim` =
 * (G << 32 | 0) and a bump of `gen` (seq_cst, for the sleepers). Whoever runs chunks (the caller
 * and the workers alike) loads `claim`, reads the slot of the generation it names, and takes
 * chunk i with a compare-and-swap of (G, i) to (G, i + 1); it runs the chunk and adds one to
 * `done` (release). The caller returns when done reaches the job's chunk count (acquire), so
 * it waits for the chunks, never for a worker: a worker that the OS has descheduled, or that
 * is still asleep, holds nothing up; it finds the job finished (or the next one) when it runs.
 *
 * Why a late worker cannot run a stale job: the slot of G is written again only for job G + 2,
 * after G + 1 was published, so `claim` then names G + 1 or later. A worker that read the slot
 * while it was being rewritten therefore fails its compare-and-swap against (G, i), and one
 * whose swap succeeds read the slot while `claim` still named G, that is before G + 1 was
 * published: G's own fields. The chunk bound is checked against the slot's count before the
 * swap, and a release fence before the caller rewrites a slot pairs with an acquire fence
 * between a thread's field reads and its swap, so the relaxed reads are covered by the same
 * argument in the memory model, not only on x86. `claim` cannot go back to (G, i) (generations only
 * grow; 2^32 jobs would have to pass while one worker sleeps between its load and its swap). `done`
 * belongs to the current job: every chunk of G was counted before the caller returns, so no late
 * increment reaches G + 1's count. (This replaces a full barrier per job, where the caller waited
 * until every worker had seen the job and decremented a pending count: on a machine where another
 * process takes a core, every dispatch then waited for a descheduled worker's next time slice.)
 *
 * Sleeping: after a job a worker spins for spin_us on `gen`, then sleeps on the condition
 * variable. Both sides use sequentially consistent operations on `gen` and `sleeping` in
 * opposite order (the caller stores gen then loads sleeping; a worker stores sleeping then loads
 * gen, under the mutex), so either the caller sees a sleeper and broadcasts, or the sleeper sees
 * the new job.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "rill_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

typedef struct worker_arg {
    struct rill_pool *pool;
    int index;
} worker_arg_t;

/* One job's description; written by the caller before it publishes the job (see the top). */
typedef struct job {
    _Atomic(rill_pool_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int64_t n;
    _Atomic int64_t grain;
    _Atomic int64_t chunks; /* ceil(n / grain), < 2^32 */
} job_t;

struct rill_pool {
    int n_threads;
    pthread_t *threads; /* n_threads - 1 workers */
    worker_arg_t *args; /* their start arguments; owned by the pool so that no worker frees
                           memory behind the creator's back (the counters stay exact) */

    job_t jobs[2]; /* job G is described in jobs[G % 2] */

    _Alignas(64) _Atomic uint64_t claim; /* generation << 32 | next chunk to claim */
    _Alignas(64) _Atomic int64_t done;   /* chunks of the current job finished */
    _Alignas(64) _Atomic uint64_t gen;   /* job generation (the sleepers' signal) */
    _Atomic int sleeping;
    _Atomic bool stop;
    _Atomic int spin_us;

    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* Claims and runs chunks of the job `claim` names, as long as there are any (see the top). */
static void run_chunks(rill_pool_t *p, int thread) {
    uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        const job_t *j = &p->jobs[(c >> 32) & 1];
        int64_t chunks = atomic_load_explicit(&j->chunks, memory_order_relaxed);
        int64_t i = (int64_t)(c & 0xffffffffu);
        if (i >= chunks) {
            return;
        }
        rill_pool_fn fn = atomic_load_explicit(&j->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&j->ctx, memory_order_relaxed);
        int64_t n = atomic_load_explicit(&j->n, memory_order_relaxed);
        int64_t grain = atomic_load_explicit(&j->grain, memory_order_relaxed);
        /* pairs with the caller's release fence before it rewrites a slot: if a field read
         * above saw a later job's value, the swap below sees the claim word that job's
         * predecessor published, and fails */
        atomic_thread_fence(memory_order_acquire);
        /* on failure c is reloaded: another thread took chunk i, or a new job came */
        if (atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acquire,
                                                  memory_order_acquire)) {
            int64_t begin = i * grain, end = begin + grain < n ? begin + grain : n;
            fn(ctx, begin, end, thread);
            atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
            c++;
        }
    }
}

/* Waits until gen differs from `seen`, spinning first. Returns the new generation. */
static uint64_t wait_for_job(rill_pool_t *p, uint64_t seen) {
    uint64_t deadline = rill_now_ns() + (uint64_t)atomic_load(&p->spin_us) * 1000u;
    for (unsigned i = 0;; i++) {
        uint64_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) {
            return g;
        }
        CPU_RELAX();
        if ((i & 255) == 0 && rill_now_ns() >= deadline) {
            break;
        }
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleeping, 1);
    uint64_t g;
    while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop)) {
        pthread_cond_wait(&p->cv, &p->mu);
    }
    atomic_fetch_sub(&p->sleeping, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg) {
    worker_arg_t wa = *(worker_arg_t *)arg;
    rill_pool_t *p = wa.pool;
    uint64_t seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) {
            break;
        }
        run_chunks(p, wa.index);
    }
    return NULL;
}

static void stop_workers(rill_pool_t *p, int n_started) {
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < n_started; i++) {
        pthread_join(p->threads[i], NULL);
    }
}

rill_err_t rill_pool_new(int n_threads, rill_pool_t **out) {
    *out = NULL;
    if (n_threads < 0 || n_threads > 512) {
        return RILL_EINVAL;
    }
    if (n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n < 1 ? 1 : (n > 512 ? 512 : (int)n);
    }
    rill_pool_t *p = rill_calloc(RILL_MEM_CORE, 1, sizeof *p);
    if (p == NULL) {
        return RILL_ENOMEM;
    }
    p->n_threads = n_threads;
    atomic_init(&p->spin_us, 50);
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        rill_free(p);
        return RILL_EINTERNAL;
    }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        rill_free(p);
        return RILL_EINTERNAL;
    }
    rill_err_t err = RILL_OK;
    int started = 0;
    if (n_threads > 1) {
        p->threads = rill_calloc(RILL_MEM_CORE, (size_t)(n_threads - 1), sizeof *p->threads);
        p->args = rill_calloc(RILL_MEM_CORE, (size_t)(n_threads - 1), sizeof *p->args);
        if (p->threads == NULL || p->args == NULL) {
            err = RILL_ENOMEM;
            goto cleanup;
        }
    }
    for (; started < n_threads - 1; started++) {
        worker_arg_t *wa = &p->args[started];
        wa->pool = p;
        wa->index = started + 1;
        if (pthread_create(&p->threads[started], NULL, worker_main, wa) != 0) {
            err = RILL_EINTERNAL;
            goto cleanup;
        }
    }
    *out = p;
    return RILL_OK;
cleanup:
    stop_workers(p, started);
    rill_free(p->threads);
    rill_free(p->args);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    rill_free(p);
    return err;
}

void rill_pool_destroy(rill_pool_t **pp) {
    if (pp == NULL || *pp == NULL) {
        return;
    }
    rill_pool_t *p = *pp;
    stop_workers(p, p->n_threads - 1);
    rill_free(p->threads);
    rill_free(p->args);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    rill_free(p);
    *pp = NULL;
}

int rill_pool_threads(const rill_pool_t *pool) {
    return pool == NULL ? 1 : pool->n_threads;
}

void rill_pool_set_spin_us(rill_pool_t *pool, int spin_us) {
    if (pool != NULL) {
        atomic_store(&pool->spin_us, spin_us < 0 ? 0 : spin_us);
    }
}

void rill_pool_for(rill_pool_t *p, int64_t n, int64_t grain, rill_pool_fn fn, void *ctx) {
    if (n <= 0) {
        return;
    }
    int nt = p == NULL ? 1 : p->n_threads;
    if (grain <= 0) {
        grain = (n + (int64_t)nt * 4 - 1) / ((int64_t)nt * 4);
        if (grain < 1) {
            grain = 1;
        }
    }
    if (nt == 1 || grain >= n) {
        fn(ctx, 0, n, 0);
        return;
    }
    int64_t chunks = (n + grain - 1) / grain;
    if (chunks > INT32_MAX) { /* the claim word holds a chunk index in 32 bits */
        grain = (n + INT32_MAX - 1) / INT32_MAX;
        chunks = (n + grain - 1) / grain;
    }
    uint64_t g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    job_t *j = &p->jobs[g & 1];
    /* orders the previous publication (the claim word of job g - 1) before these field stores,
     * for the acquire fence of run_chunks() */
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&j->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&j->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&j->n, n, memory_order_relaxed);
    atomic_store_explicit(&j->grain, grain, memory_order_relaxed);
    atomic_store_explicit(&j->chunks, chunks, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    /* publishes the slot: a thread that sees this claim word sees the slot's fields */
    atomic_store_explicit(&p->claim, (g & 0xffffffffu) << 32, memory_order_release);
    atomic_store(&p->gen, g); /* seq_cst: ordered before the load of `sleeping` */
    if (atomic_load(&p->sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    run_chunks(p, 0);
    for (unsigned i = 0; atomic_load_explicit(&p->done, memory_order_acquire) != chunks; i++) {
        /* the chunks still running are other threads'; on an oversubscribed machine one may be
         * descheduled mid-chunk: stop hogging the core */
        if (i < 4096) {
            CPU_RELAX();
        } else {
            sched_yield();
        }
    }
}
