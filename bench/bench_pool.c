/*
 * bench_pool.c - dispatch overhead of rill_pool_for().
 *
 * A forward pass dispatches a parallel-for per matmul: hundreds per token. This measures the cost
 * of one dispatch whose body does (almost) nothing, so the figure is pure overhead: waking the
 * workers, claiming chunks, and the completion barrier. Side by side in the same run it measures
 * the naive alternative, creating and joining a thread per dispatch, as the baseline the ratio is
 * quoted against, and the pool with spinning disabled (every dispatch wakes sleeping workers).
 *
 * An empty body says what a dispatch costs when the caller can run every chunk itself before a
 * worker arrives (with completion counted per chunk it then need not wait for one). So a second
 * figure gives every chunk --work-ns of busy work (a decode matmul's chunk is a few
 * microseconds) over four chunks per thread: its ns per dispatch beside the ideal, the work
 * split evenly over the threads (efficiency = ideal / measured). On a machine where other
 * processes take cores, that figure is what a dispatch that waits for a descheduled worker
 * loses.
 *
 * Usage: bench_pool [--threads N] [--iters N] [--work-ns NS] [--work-iters N]
 * (--work-iters fixes the work per chunk in rounds of the recurrence instead of calibrating it
 * to --work-ns on this machine now: use it to pair two builds on a loaded machine.)
 * Prints a table, then one JSON line.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_core.h"

typedef struct sink {
    _Atomic int64_t touched;
    _Atomic uint64_t mix; /* keeps the work's result alive */
} sink_t;

static void body(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    sink_t *s = ctx;
    atomic_fetch_add_explicit(&s->touched, end - begin, memory_order_relaxed);
}

/* Work of about g_work_ns per chunk: g_work_iters rounds of a dependent integer recurrence,
 * calibrated on the main thread before the pool runs (CPU work, not a wait on the clock, so a
 * descheduled thread's chunk takes longer, as a matmul's would). */
static int64_t g_work_ns = 5000, g_work_iters = 0;

static uint64_t spin_work(int64_t iters, uint64_t x) {
    for (int64_t i = 0; i < iters; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    }
    return x;
}

static void calibrate_work(void) {
    int64_t iters = 1 << 16;
    for (;;) {
        uint64_t t0 = rill_now_ns();
        volatile uint64_t x = spin_work(iters, t0);
        (void)x;
        uint64_t dt = rill_now_ns() - t0;
        if (dt > 20000000 || iters > (1ll << 40)) { /* 20 ms: enough to divide */
            g_work_iters = (int64_t)((double)iters * (double)g_work_ns / (double)dt);
            return;
        }
        iters *= 2;
    }
}

static void work_body(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    sink_t *s = ctx;
    uint64_t x = spin_work(g_work_iters * (end - begin), (uint64_t)begin);
    atomic_fetch_add_explicit(&s->touched, end - begin, memory_order_relaxed);
    atomic_fetch_xor_explicit(&s->mix, x, memory_order_relaxed);
}

/* ns per dispatch of 4 chunks per thread of g_work_ns each. */
static double time_pool_work(rill_pool_t *p, int iters, sink_t *s) {
    int nt = rill_pool_threads(p);
    for (int i = 0; i < iters / 10; i++) {
        rill_pool_for(p, 4 * nt, 1, work_body, s);
    }
    uint64_t t0 = rill_now_ns();
    for (int i = 0; i < iters; i++) {
        rill_pool_for(p, 4 * nt, 1, work_body, s);
    }
    return (double)(rill_now_ns() - t0) / iters;
}

static void *thread_body(void *ctx) {
    body(ctx, 0, 1, 1);
    return NULL;
}

/* ns per dispatch of rill_pool_for over n_threads chunks. */
static double time_pool(rill_pool_t *p, int iters, sink_t *s) {
    int nt = rill_pool_threads(p);
    for (int i = 0; i < iters / 10; i++) { /* warm up */
        rill_pool_for(p, nt, 1, body, s);
    }
    uint64_t t0 = rill_now_ns();
    for (int i = 0; i < iters; i++) {
        rill_pool_for(p, nt, 1, body, s);
    }
    return (double)(rill_now_ns() - t0) / iters;
}

/* ns per dispatch when each dispatch creates and joins n_threads - 1 threads. */
static double time_spawn(int n_threads, int iters, sink_t *s) {
    pthread_t th[512];
    uint64_t t0 = rill_now_ns();
    for (int i = 0; i < iters; i++) {
        for (int t = 0; t < n_threads - 1; t++) {
            pthread_create(&th[t], NULL, thread_body, s);
        }
        body(s, 0, 1, 0);
        for (int t = 0; t < n_threads - 1; t++) {
            pthread_join(th[t], NULL);
        }
    }
    return (double)(rill_now_ns() - t0) / iters;
}

int main(int argc, char **argv) {
    int n_threads = 2, iters = 200000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            n_threads = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--work-ns") == 0 && i + 1 < argc) {
            g_work_ns = atoll(argv[++i]);
        } else if (strcmp(argv[i], "--work-iters") == 0 && i + 1 < argc) {
            g_work_iters = atoll(argv[++i]); /* fixed work, for pairs of builds: no calibration */
        } else {
            fprintf(stderr, "usage: %s [--threads N] [--iters N] [--work-ns NS] [--work-iters N]\n",
                    argv[0]);
            return 2;
        }
    }
    if (n_threads < 1 || n_threads > 512 || iters < 10 || g_work_ns < 0 || g_work_ns > 10000000) {
        fprintf(stderr, "bench_pool: need 1 <= threads <= 512, iters >= 10 and 0 <= work-ns <= "
                        "1e7\n");
        return 2;
    }
    sink_t s = { 0, 0 };
    rill_pool_t *p = NULL;
    rill_err_t err = rill_pool_new(n_threads, &p);
    if (err != RILL_OK) {
        fprintf(stderr, "bench_pool: %s\n", rill_strerror(err));
        return 1;
    }
    if (g_work_iters <= 0) {
        calibrate_work();
    }
    double spin = time_pool(p, iters, &s);
    int work_iters = (int)(2e9 / (double)(4 * n_threads * (g_work_ns > 100 ? g_work_ns : 100)));
    work_iters = work_iters < 10 ? 10 : work_iters > iters ? iters : work_iters; /* ~1-2 s */
    double work = time_pool_work(p, work_iters, &s);
    double ideal = 4.0 * (double)g_work_ns;
    rill_pool_set_spin_us(p, 0);
    double sleep = time_pool(p, iters / 10, &s);
    rill_pool_destroy(&p);
    double spawn = time_spawn(n_threads, iters / 100 > 100 ? iters / 100 : 100, &s);

    printf("%-28s %8s %14s %10s\n", "configuration", "threads", "ns/dispatch", "vs spawn");
    printf("%-28s %8d %14.0f %9.1fx\n", "pool (spin 50us, default)", n_threads, spin, spawn / spin);
    printf("%-28s %8d %14.0f %9.1fx\n", "pool (no spin: wake each)", n_threads, sleep,
           spawn / sleep);
    printf("%-28s %8d %14.0f %9.1fx\n", "pthread_create per dispatch", n_threads, spawn, 1.0);
    printf("with %lld ns of work per chunk, 4 chunks per thread: %.0f ns per dispatch, ideal %.0f "
           "(efficiency %.2f)\n",
           (long long)g_work_ns, work, ideal, ideal / work);
    printf("{\"bench\":\"pool\",\"threads\":%d,\"spin_ns\":%.0f,\"nospin_ns\":%.0f,"
           "\"spawn_ns\":%.0f,\"spawn_over_spin\":%.2f,\"work_ns\":%lld,\"work_dispatch_ns\":%.0f,"
           "\"work_ideal_ns\":%.0f,\"work_efficiency\":%.3f,\"work_iters\":%lld}\n",
           n_threads, spin, sleep, spawn, spawn / spin, (long long)g_work_ns, work, ideal,
           ideal / work, (long long)g_work_iters);
    return s.touched > 0 ? 0 : 1;
}
