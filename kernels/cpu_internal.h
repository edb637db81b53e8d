/*
 * cpu_internal.h - the fast CPU backend's kernel table, one per instruction set.
 *
 * The backend (cpu_backend.c, cpu_matmul.c) owns threading, tiling and scratch; a kernel table
 * holds the innermost loops. cpu_scalar.c fills one in portable C; cpu_avx2.c one with
 * AVX2/FMA/F16C intrinsics, compiled with per-function target attributes so the library builds
 * with baseline x86-64 flags and only calls them after a CPUID check; cpu_avx512.c copies the
 * AVX2 table and swaps its flash attention kernel and (with AVX-512 VNNI) its Q8_0, Q4_1 and
 * 8-row Q4_0 matmul kernels. Every table gives the reference's bits (the
 * backend-ops test of tests/test_kernels.c runs the backend at each level against "ref").
 *
 * Includes backend_internal.h (the handle, the weight, and through it ggml_internal.h, the
 * arithmetic the tables reproduce) and core's rill_pool.h; the graph is drawn at the top of
 * backend_internal.h. The .c files of the CPU backend include this header only.
 */
#ifndef RILL_CPU_INTERNAL_H
#define RILL_CPU_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend_internal.h"
#include "rill_pool.h"

/* Tokens one matmul micro-kernel call handles against one weight row. */
#define RILL__TILE_T 4

/* Most query heads one attention task handles (a GQA group larger than this is split). */
#define RILL__ATTN_MAX_Q 16

/* Floats of attention scratch per thread (256 KiB). Exact kernel: the softmax row of every query
 * of a task (n_kv rounded up to 8 each) and, for an F16 pool, an f32 copy of the V rows they
 * share; a task that does not fit is split (tokens, then heads); a single row longer than this
 * (65536 slots) takes the slower scratch-free path. Flash kernel: per query its f32 q, acc and
 * one block's scores, plus the block's K/V rows in f32 (F16 pool); a task that does not fit is
 * split the same way, and one query (< 17000 floats at D = 256) always fits. */
#define RILL__ATTN_SCRATCH 65536

/* y[t * y_stride] = dot(weight row w, act row t) for t < nt (1..RILL__TILE_T); act row t starts
 * at (const char *)act + t * act_stride. n values per row. */
typedef void (*rill__tile_fn)(int64_t n, const void *w, const void *act, size_t act_stride, int nt,
                              float *y, int64_t y_stride);

/* Eight consecutive weight rows (row r at (const char *)w + r * w_stride) against up to 4 tokens:
 * y[t * y_stride + r] for r < 8, t < nt. Used only when the matrix has a multiple of 8 rows. */
typedef void (*rill__tile8_fn)(int64_t n, const void *w, size_t w_stride, const void *act,
                               size_t act_stride, int nt, float *y, int64_t y_stride);

/* Where the AVX2 table's act rows keep their f32 side data (cpu_avx2.c, "act rows with f32
 * side data"): after nb blocks of block_bytes, at a 32-byte boundary. The AVX-512 table uses the
 * same act rows. */
static inline size_t rill__act_side_offset(int64_t nb, size_t block_bytes) {
    return ((size_t)nb * block_bytes + 31u) & ~(size_t)31u;
}

/* Converts one f32 row of n values into the act row of a weight type (quant_internal.h). */
typedef void (*rill__act_fn)(const float *x, void *act, int64_t n);

/* Most consecutive tokens of one sequence an attention task handles: the task converts and
 * loads each K/V row once for all of them. */
#define RILL__ATTN_MAX_T 16

/* One attention task: n_q consecutive query heads, all sharing KV head kv_head, of n_t
 * consecutive batch tokens of one sequence. */
typedef struct rill__attn_task {
    const rill_kv_layout_t *kv;
    const void *pool;
    const int32_t *pages;          /* the sequence's page table */
    const rill_batch_token_t *tok; /* the n_t tokens; token i sees slots [0, tok[i].n_kv) */
    int32_t n_t;                   /* 1..RILL__ATTN_MAX_T */
    int32_t kv_head;
    int32_t n_q;       /* 1..RILL__ATTN_MAX_Q */
    bool batched;      /* the batch has 2+ tokens: llama.cpp's tinyBLAS order for the V sum */
    size_t tok_stride; /* floats from one token's q (and out) rows to the next's */
    const float *q;    /* token 0: (n_q, D) */
    float *out;        /* token 0: (n_q, D) */
    float *scratch;    /* RILL__ATTN_SCRATCH floats, 64-byte aligned, owned by the running thread */
} rill__attn_task_t;

typedef struct rill__cpu_kernels {
    const char *name;                      /* "scalar", "avx2" or "avx512" */
    rill__tile_fn tile[RILL__DTYPE_SLOTS]; /* by weight dtype */
    /* Optional 8-row kernels (NULL: use tile). For Q4_0 this reproduces llama.cpp's repacked
     * (q4_0_8x8) numerics, which it uses exactly when the row count is a multiple of 8. */
    rill__tile8_fn tile8[RILL__DTYPE_SLOTS];
    /* Optional 2-row kernels (NULL: use tile): two consecutive rows against up to 4 tokens, with
     * exactly tile's bits for each row (y[t * y_stride + r], r < 2). cpu_matmul.c runs them where
     * every token of the matmul takes tile (the vec_dot path) and tile8 does not apply; an odd
     * last row of a chunk goes to tile. */
    rill__tile8_fn tile2[RILL__DTYPE_SLOTS];
    /* tile reproduces llama.cpp's vec_dot kernel; these its other kernels (rill__mm_path_t),
     * whose f32 sums round differently; NULL means "as tile", which is exact for the types
     * where llama.cpp's kernels agree:
     *   tile_gemm    RILL__MM_GEMM: tinyBLAS (F32/F16/BF16), the tiled kernel (K-quants);
     *   tile_repack  RILL__MM_REPACK: q4_K_8x8's gemv (the AVX2 Q4_0 takes tile8 instead);
     *   tile_repack4 RILL__MM_REPACK4: q4_K_8x8's gemm.
     * cpu_matmul.c picks with rill__mm_path_for (rill__cpu_tiles_for). */
    rill__tile_fn tile_gemm[RILL__DTYPE_SLOTS];
    rill__tile_fn tile_repack[RILL__DTYPE_SLOTS];
    rill__tile_fn tile_repack4[RILL__DTYPE_SLOTS];
    rill__act_fn act[RILL__DTYPE_SLOTS]; /* by weight dtype; NULL for F32 (x is the act row) */
    /* Bytes of one act row as this table's act/tile functions lay it out (>= the standard
     * rill__act_row_bytes: a table may append side data, e.g. scales already in f32). */
    int64_t (*act_row_bytes)(rill_dtype_t wt, int64_t n);
    /* RMSNorm of n_rows rows of n (rill__ggml_rms_norm_row's bits) */
    void (*rms_norm_rows)(float *y, const float *x, const float *w, int64_t n_rows, int64_t n,
                          float eps);
    /* RoPE of one head vector (rill__rope_apply's bits) */
    void (*rope_apply)(float *x, const rill_rope_t *rope, const float *cs);
    void (*swiglu)(float *y, const float *g, const float *u, int64_t n);
    void (*add)(float *y, const float *a, const float *c, int64_t n);
    void (*to_f16)(uint16_t *dst, const float *src, int64_t n);
    /* llama.cpp's non-flash attention of one task: rill__attention_head_ref's bits per head */
    void (*attention)(const rill__attn_task_t *task);
    /* the flash kernel of one task: rill__attention_head_flash_ref's bits per head (batched is
     * ignored); needs at most RILL__ATTN_SCRATCH floats of scratch for any n_kv */
    void (*attention_flash)(const rill__attn_task_t *task);
} rill__cpu_kernels_t;

/* The portable table; always available. */
const rill__cpu_kernels_t *rill__cpu_kernels_scalar(void);

/* The AVX2/FMA/F16C table, or NULL when this CPU (or OS) lacks any of them. */
const rill__cpu_kernels_t *rill__cpu_kernels_avx2(void);

/* The tile kernels of k that reproduce what llama.cpp runs for w in a matmul of n_tok tokens:
 * tokens [0, *split) use *head, tokens [*split, n_tok) *tail (split is a multiple of 4). */
void rill__cpu_tiles_for(const rill__cpu_kernels_t *k, const rill_weight_t *w, int64_t n_tok,
                         rill__tile_fn *head, rill__tile_fn *tail, int64_t *split);

/* y (T, O) = x (T, E) . W^T with the kernels k on the pool (cpu_matmul.c). scratch holds
 * n_tok act rows, each rounded up to 64 bytes. */
void rill__cpu_matmul(const rill__cpu_kernels_t *k, rill_pool_t *pool, void *scratch, float *y,
                      const float *x, const rill_weight_t *w, int64_t n_tok);

/* True when the CPU and OS support AVX2, FMA and F16C (CPUID + XGETBV). */
bool rill__cpu_has_avx2(void);

/* The AVX2 table with the flash attention kernel, and with AVX-512 VNNI the Q8_0/Q4_1/Q4_0
 * matmul kernels, in AVX-512 (cpu_avx512.c), or NULL when this CPU (or OS) lacks AVX2 or
 * AVX-512 F/VL/BW. */
const rill__cpu_kernels_t *rill__cpu_kernels_avx512(void);

/* True when rill__cpu_kernels_avx512() is available (CPUID + XGETBV). */
bool rill__cpu_has_avx512(void);

#endif /* RILL_CPU_INTERNAL_H */
