/*
 * cpu_internal.h - the fast CPU backend's kernel table, one per instruction set.
 *
 * The backend (cpu_backend.c, cpu_matmul.c) owns threading, tiling and scratch; a kernel table
 * holds the innermost loops. cpu_scalar.c fills one in portable C; cpu_avx2.c one with
 * AVX2/FMA/F16C intrinsics, compiled with per-function target attributes so the library builds
 * with baseline x86-64 flags and only calls them after a CPUID check. Tests call both tables
 * directly to prove they agree.
 */
#ifndef RILL_CPU_INTERNAL_H
#define RILL_CPU_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant_internal.h"
#include "rill_backend.h"
#include "rill_pool.h"

/* Tokens one matmul micro-kernel call handles against one weight row. */
#define RILL__TILE_T 4

/* Most query heads one attention task handles (a GQA group larger than this is split). */
#define RILL__ATTN_MAX_Q 16

/* y[t * y_stride] = dot(weight row w, act row t) for t < nt (1..RILL__TILE_T); act row t starts
 * at (const char *)act + t * act_stride. n values per row. */
typedef void (*rill__tile_fn)(int64_t n, const void *w, const void *act, size_t act_stride, int nt,
                              float *y, int64_t y_stride);

/* Eight consecutive weight rows (row r at (const char *)w + r * w_stride) against up to 4 tokens:
 * y[t * y_stride + r] for r < 8, t < nt. Used only when the matrix has a multiple of 8 rows. */
typedef void (*rill__tile8_fn)(int64_t n, const void *w, size_t w_stride, const void *act,
                               size_t act_stride, int nt, float *y, int64_t y_stride);

/* Converts one f32 row of n values into the act row of a weight type (quant_internal.h). */
typedef void (*rill__act_fn)(const float *x, void *act, int64_t n);

/* One attention task: n_q consecutive query heads of one token sharing KV head kv_head. */
typedef struct rill__attn_task {
    const rill_kv_layout_t *kv;
    const void *pool;
    const int32_t *pages; /* the token's page table */
    int32_t n_kv;         /* slots [0, n_kv) are visible */
    int32_t kv_head;
    int32_t n_q;    /* 1..RILL__ATTN_MAX_Q */
    const float *q; /* (n_q, D) */
    float *out;     /* (n_q, D) */
} rill__attn_task_t;

typedef struct rill__cpu_kernels {
    const char *name;                      /* "scalar" or "avx2" */
    rill__tile_fn tile[RILL__DTYPE_SLOTS]; /* by weight dtype */
    /* Optional 8-row kernels (NULL: use tile). For Q4_0 this reproduces llama.cpp's repacked
     * (q4_0_8x8) numerics, which it uses exactly when the row count is a multiple of 8. */
    rill__tile8_fn tile8[RILL__DTYPE_SLOTS];
    rill__act_fn act[RILL__DTYPE_SLOTS]; /* by weight dtype; NULL for F32 (x is the act row) */
    /* Bytes of one act row as this table's act/tile functions lay it out (>= the standard
     * rill__act_row_bytes: a table may append side data, e.g. scales already in f32). */
    int64_t (*act_row_bytes)(rill_dtype_t wt, int64_t n);
    void (*rms_norm_row)(float *y, const float *x, const float *w, int64_t n, float eps);
    void (*swiglu)(float *y, const float *g, const float *u, int64_t n);
    void (*add)(float *y, const float *a, const float *c, int64_t n);
    void (*to_f16)(uint16_t *dst, const float *src, int64_t n);
    void (*attention)(const rill__attn_task_t *task);
} rill__cpu_kernels_t;

/* The portable table; always available. */
const rill__cpu_kernels_t *rill__cpu_kernels_scalar(void);

/* The AVX2/FMA/F16C table, or NULL when this CPU (or OS) lacks any of them. */
const rill__cpu_kernels_t *rill__cpu_kernels_avx2(void);

/* y (T, O) = x (T, E) . W^T with the kernels k on the pool (cpu_matmul.c). scratch holds
 * n_tok act rows, each rounded up to 64 bytes. */
void rill__cpu_matmul(const rill__cpu_kernels_t *k, rill_pool_t *pool, void *scratch, float *y,
                      const float *x, const rill_weight_t *w, int64_t n_tok);

/* True when the CPU and OS support AVX2, FMA and F16C (CPUID + XGETBV). */
bool rill__cpu_has_avx2(void);

#endif /* RILL_CPU_INTERNAL_H */
