/*
 * cpu_backend.c - the fast CPU backend: kernel-table selection, memory, and the op drivers that
 * split work over the thread pool (matmul lives in cpu_matmul.c).
 *
 * Choices:
 *   - The kernel table (AVX-512, AVX2 or scalar) is picked once at creation: CPUID decides
 *     under RILL_SIMD_AUTO, and RILL_SIMD=scalar|avx2|avx512 in the environment overrides AUTO
 *     so that CI can run the whole suite on every path on one machine. The AVX-512 table is the
 *     AVX2 one with its flash attention kernel and, with VNNI, its Q8_0/Q4_1/Q4_0 matmul
 *     kernels in 512-bit vectors (the same bits).
 *   - Small ops run inline on the calling thread: waking workers costs microseconds, and for one
 *     decode token an RMSNorm or a residual add over 576 floats is far cheaper than that. Work is
 *     handed to the pool from PAR_MIN_WORK elements on.
 *   - Scratch is allocated once: max_batch act rows of max_n_in * 4 bytes (rounded to 64) for the
 *     matmul's quantized inputs, and RILL__ATTN_SCRATCH floats per thread for attention's
 *     softmax rows. Ops allocate nothing; attention and RoPE keep their other per-task buffers
 *     on the stack (bounded by RILL_KV_MAX_HEAD_DIM and RILL__ATTN_MAX_Q).
 *   - Attention tasks are (up to 16 consecutive tokens of one sequence, KV head, group of query
 *     heads): a task converts and reads each K/V row once for all its queries. When that gives
 *     too few tasks to keep the threads busy, blocks shrink first, then groups are split
 *     (decode: 1 token x 3 KV heads). Both attention kernels (params.attn) run on this split;
 *     neither's bits depend on it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "rill_alloc.h"
#include "rill_log.h"
#include "rill_pool.h"

#define PAR_MIN_WORK 32768 /* elements below which an op stays on the calling thread */

typedef struct cpu_backend {
    struct rill_backend base; /* first member */
    const rill__cpu_kernels_t *k;
    rill_pool_t *pool;
    void *act;        /* max_batch act rows */
    float *attn_rows; /* RILL__ATTN_SCRATCH floats per thread */
} cpu_backend_t;

static cpu_backend_t *cpu(rill_backend_t *b) {
    return (cpu_backend_t *)b;
}

/* The pool when `work` elements justify waking the workers, else NULL (inline). */
static rill_pool_t *pool_for_work(rill_backend_t *b, int64_t work) {
    return work >= PAR_MIN_WORK ? cpu(b)->pool : NULL;
}

static void cpu_destroy(rill_backend_t *b) {
    cpu_backend_t *c = cpu(b);
    rill_pool_destroy(&c->pool);
    rill_free(c->act);
    rill_free(c->attn_rows);
    rill__backend_deinit_common(b);
    rill_free(c);
}

/* ---- row-wise and elementwise ops ----------------------------------------------------------- */

typedef struct rows_job {
    const rill__cpu_kernels_t *k;
    float *y;
    const float *x, *w;
    int64_t n;
    float eps;
} rows_job_t;

static void rms_rows(void *ctx, int64_t begin, int64_t end, int thread) {
    const rows_job_t *j = ctx;
    (void)thread;
    j->k->rms_norm_rows(j->y + begin * j->n, j->x + begin * j->n, j->w, end - begin, j->n, j->eps);
}

static rill_err_t cpu_rms_norm(rill_backend_t *b, float *y, const float *x, const float *w,
                               int64_t n_rows, int64_t n, float eps) {
    rows_job_t j = { cpu(b)->k, y, x, w, n, eps };
    rill_pool_for(pool_for_work(b, n_rows * n), n_rows, 0, rms_rows, &j);
    return RILL_OK;
}

static void bias_rows(void *ctx, int64_t begin, int64_t end, int thread) {
    const rows_job_t *j = ctx;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        j->k->add(j->y + r * j->n, j->y + r * j->n, j->w, j->n);
    }
}

static rill_err_t cpu_add_bias(rill_backend_t *b, float *x, const float *bias, int64_t n_rows,
                               int64_t n) {
    rows_job_t j = { cpu(b)->k, x, x, bias, n, 0.0f };
    rill_pool_for(pool_for_work(b, n_rows * n), n_rows, 0, bias_rows, &j);
    return RILL_OK;
}

#define EW_BLOCK 4096 /* elements per elementwise work item */

typedef struct ew_job {
    const rill__cpu_kernels_t *k;
    float *y;
    const float *a, *c;
    int64_t n;
    bool swiglu;
} ew_job_t;

static void ew_blocks(void *ctx, int64_t begin, int64_t end, int thread) {
    const ew_job_t *j = ctx;
    (void)thread;
    const int64_t i0 = begin * EW_BLOCK;
    const int64_t i1 = end * EW_BLOCK < j->n ? end * EW_BLOCK : j->n;
    if (j->swiglu) {
        j->k->swiglu(j->y + i0, j->a + i0, j->c + i0, i1 - i0);
    } else {
        j->k->add(j->y + i0, j->a + i0, j->c + i0, i1 - i0);
    }
}

static rill_err_t elementwise(rill_backend_t *b, float *y, const float *a, const float *c,
                              int64_t n, bool swiglu) {
    ew_job_t j = { cpu(b)->k, y, a, c, n, swiglu };
    rill_pool_for(pool_for_work(b, n), (n + EW_BLOCK - 1) / EW_BLOCK, 0, ew_blocks, &j);
    return RILL_OK;
}

static rill_err_t cpu_add(rill_backend_t *b, float *y, const float *a, const float *c, int64_t n) {
    return elementwise(b, y, a, c, n, false);
}

static rill_err_t cpu_swiglu(rill_backend_t *b, float *y, const float *g, const float *u,
                             int64_t n) {
    return elementwise(b, y, g, u, n, true);
}

static rill_err_t cpu_matmul(rill_backend_t *b, float *y, const float *x, const rill_weight_t *w,
                             int64_t n_tok) {
    rill__cpu_matmul(cpu(b)->k, cpu(b)->pool, cpu(b)->act, y, x, w, n_tok);
    return RILL_OK;
}

/* ---- RoPE and the KV pool ------------------------------------------------------------------- */

typedef struct tok_job {
    rill_backend_t *b;
    const rill_kv_layout_t *kv;
    float *x;
    const float *k, *v;
    void *pool;
    int32_t n_heads, head_dim;
    const rill_rope_t *rope;
} tok_job_t;

static void rope_tokens(void *ctx, int64_t begin, int64_t end, int thread) {
    const tok_job_t *j = ctx;
    (void)thread;
    float cs[RILL_KV_MAX_HEAD_DIM];
    for (int64_t t = begin; t < end; t++) {
        rill__rope_cos_sin(j->rope, j->b->tok[t].pos, cs);
        for (int32_t h = 0; h < j->n_heads; h++) {
            cpu(j->b)->k->rope_apply(j->x + ((size_t)t * j->n_heads + h) * j->head_dim, j->rope,
                                     cs);
        }
    }
}

static rill_err_t cpu_rope(rill_backend_t *b, float *x, int32_t n_heads, int32_t head_dim,
                           const rill_rope_t *rope) {
    tok_job_t j = { .b = b, .x = x, .n_heads = n_heads, .head_dim = head_dim, .rope = rope };
    rill_pool_for(pool_for_work(b, (int64_t)b->n_tok * n_heads * head_dim), b->n_tok, 0,
                  rope_tokens, &j);
    return RILL_OK;
}

/* One row into the pool as type t: F16 by the table's converter, the block types by
 * rill_quantize_row (llama.cpp's quantizers, see rill_backend.h), F32 copied. */
static void store_row(const rill__cpu_kernels_t *k, const rill_kv_layout_t *kv, rill_dtype_t t,
                      uint8_t *dst, const float *src) {
    if (t == RILL_DTYPE_F16) {
        k->to_f16((uint16_t *)dst, src, kv->head_dim);
    } else if (t == RILL_DTYPE_F32) {
        memcpy(dst, src, (size_t)kv->head_dim * sizeof(float));
    } else {
        (void)rill_quantize_row(t, src, dst, kv->head_dim);
    }
}

static void kv_store_tokens(void *ctx, int64_t begin, int64_t end, int thread) {
    const tok_job_t *j = ctx;
    const rill_kv_layout_t *kv = j->kv;
    const rill__cpu_kernels_t *k = cpu(j->b)->k;
    (void)thread;
    for (int64_t t = begin; t < end; t++) {
        const rill_batch_token_t *tk = &j->b->tok[t];
        const int32_t page = j->b->seq[tk->seq].pages[tk->slot / kv->page_size];
        const int32_t row = tk->slot % kv->page_size;
        for (int32_t h = 0; h < kv->n_kv_heads; h++) {
            const size_t off = ((size_t)t * kv->n_kv_heads + h) * kv->head_dim;
            store_row(k, kv, kv->k_dtype, rill__kv_ptr(kv, j->pool, page, h, row, 0), j->k + off);
            store_row(k, kv, kv->v_dtype, rill__kv_ptr(kv, j->pool, page, h, row, 1), j->v + off);
        }
    }
}

static rill_err_t cpu_kv_store(rill_backend_t *b, const rill_kv_layout_t *kv, void *pool,
                               const float *k, const float *v) {
    tok_job_t j = { .b = b, .kv = kv, .pool = pool, .k = k, .v = v };
    rill_pool_for(pool_for_work(b, (int64_t)b->n_tok * kv->n_kv_heads * kv->head_dim * 2), b->n_tok,
                  0, kv_store_tokens, &j);
    return RILL_OK;
}

typedef struct attn_job {
    rill_backend_t *b;
    const rill_kv_layout_t *kv;
    const void *pool;
    float *out;
    const float *q;
    int32_t n_head, group, q_per_task, n_sub, t_per_block;
} attn_job_t;

/* A task over a quantized (or mixed-type) cache: the reference's per-head functions, which
 * read quantized K by its integer dot and decode one V row at a time (see rill_backend.h,
 * quantized caches), so every backend of the exact class gives the reference's bits. */
static void per_head_ref(const rill__attn_task_t *a, bool flash) {
    const int32_t D = a->kv->head_dim;
    for (int32_t i = 0; i < a->n_t; i++) {
        for (int32_t h = 0; h < a->n_q; h++) {
            const float *q = a->q + (size_t)i * a->tok_stride + (size_t)h * D;
            float *o = a->out + (size_t)i * a->tok_stride + (size_t)h * D;
            if (flash) {
                rill__attention_head_flash_ref(a->kv, a->pool, a->pages, a->kv_head, a->tok[i].n_kv,
                                               q, o);
            } else {
                rill__attention_head_ref(a->kv, a->pool, a->pages, a->kv_head, a->tok[i].n_kv,
                                         a->batched, q, o);
            }
        }
    }
}

static void attn_tasks(void *ctx, int64_t begin, int64_t end, int thread) {
    const attn_job_t *j = ctx;
    float *rows = cpu(j->b)->attn_rows + (size_t)thread * RILL__ATTN_SCRATCH;
    const int32_t hkv = j->kv->n_kv_heads, D = j->kv->head_dim;
    for (int64_t task = begin; task < end; task++) {
        const int64_t blk = task / ((int64_t)hkv * j->n_sub);
        const int32_t g = (int32_t)(task / j->n_sub % hkv), sub = (int32_t)(task % j->n_sub);
        const int32_t h0 = g * j->group + sub * j->q_per_task;
        const int32_t h1 =
            h0 + j->q_per_task < (g + 1) * j->group ? h0 + j->q_per_task : (g + 1) * j->group;
        const int32_t t_end =
            (int32_t)((blk + 1) * j->t_per_block < j->b->n_tok ? (blk + 1) * j->t_per_block
                                                               : j->b->n_tok);
        /* the block's runs of consecutive tokens of one sequence */
        for (int32_t t0 = (int32_t)(blk * j->t_per_block), t1; t0 < t_end; t0 = t1) {
            const rill_batch_token_t *tk = &j->b->tok[t0];
            for (t1 = t0 + 1; t1 < t_end && j->b->tok[t1].seq == tk->seq; t1++) {
            }
            rill__attn_task_t a = {
                .kv = j->kv,
                .pool = j->pool,
                .pages = j->b->seq[tk->seq].pages,
                .tok = tk,
                .n_t = t1 - t0,
                .kv_head = g,
                .n_q = h1 - h0,
                .batched = j->b->n_tok >= 2, /* llama.cpp: tinyBLAS for KQV from 2 tokens on */
                .tok_stride = (size_t)j->n_head * D,
                .q = j->q + ((size_t)t0 * j->n_head + h0) * D,
                .out = j->out + ((size_t)t0 * j->n_head + h0) * D,
                .scratch = rows,
            };
            if (!rill__kv_plain(j->kv)) {
                per_head_ref(&a, j->b->params.attn == RILL_ATTN_FLASH);
            } else if (j->b->params.attn == RILL_ATTN_FLASH) {
                cpu(j->b)->k->attention_flash(&a);
            } else {
                cpu(j->b)->k->attention(&a);
            }
        }
    }
}

static rill_err_t cpu_attention(rill_backend_t *b, const rill_kv_layout_t *kv, const void *pool,
                                float *out, const float *q, int32_t n_head) {
    const int n_threads = rill_pool_threads(cpu(b)->pool);
    attn_job_t j = { .b = b, .kv = kv, .pool = pool, .out = out, .q = q, .n_head = n_head };
    j.group = n_head / kv->n_kv_heads;
    j.q_per_task = j.group < RILL__ATTN_MAX_Q ? j.group : RILL__ATTN_MAX_Q;
    j.t_per_block = RILL__ATTN_MAX_T;
    /* enough tasks for the threads: fewer tokens per task first, then fewer heads */
    for (;;) {
        j.n_sub = (j.group + j.q_per_task - 1) / j.q_per_task;
        const int64_t n_blocks = (b->n_tok + j.t_per_block - 1) / j.t_per_block;
        const int64_t n_tasks = n_blocks * kv->n_kv_heads * j.n_sub;
        if (n_threads == 1 || n_tasks >= 4 * n_threads ||
            (j.t_per_block == 1 && j.q_per_task == 1)) {
            break;
        }
        if (j.t_per_block > 1) {
            j.t_per_block /= 2;
        } else {
            j.q_per_task = (j.q_per_task + 1) / 2;
        }
    }
    const int64_t n_blocks = (b->n_tok + j.t_per_block - 1) / j.t_per_block;
    rill_pool_for(cpu(b)->pool, n_blocks * kv->n_kv_heads * j.n_sub, 1, attn_tasks, &j);
    return RILL_OK;
}

static rill_err_t cpu_kv_rope_shift(rill_backend_t *b, const rill_kv_layout_t *kv, void *pool,
                                    const int32_t *pages, int32_t n_pages, int32_t delta,
                                    const rill_rope_t *rope) {
    float cs[RILL_KV_MAX_HEAD_DIM], kr[RILL_KV_MAX_HEAD_DIM];
    rill__rope_cos_sin(rope, delta, cs);
    for (int32_t i = 0; i < n_pages; i++) {
        for (int32_t h = 0; h < kv->n_kv_heads; h++) {
            for (int32_t row = 0; row < kv->page_size; row++) {
                uint8_t *p = rill__kv_ptr(kv, pool, pages[i], h, row, 0);
                (void)rill_dequantize_row(kv->k_dtype, p, kr, kv->head_dim);
                cpu(b)->k->rope_apply(kr, rope, cs);
                store_row(cpu(b)->k, kv, kv->k_dtype, p, kr);
            }
        }
    }
    return RILL_OK;
}

/* Page copies: one work item per (pool, page) pair, on the workers when the bytes justify it. */
typedef struct copy_job {
    void *const *pools;
    const int32_t *src, *dst;
    int32_t n;
    size_t page;
} copy_job_t;

static void copy_items(void *ctx, int64_t begin, int64_t end, int thread) {
    const copy_job_t *j = ctx;
    (void)thread;
    for (int64_t item = begin; item < end; item++) {
        uint8_t *base = j->pools[item / j->n];
        const int32_t i = (int32_t)(item % j->n);
        memcpy(base + (size_t)j->dst[i] * j->page, base + (size_t)j->src[i] * j->page, j->page);
    }
}

static rill_err_t cpu_kv_copy_pages(rill_backend_t *b, const rill_kv_layout_t *kv,
                                    void *const *pools, int32_t n_pools, const int32_t *src,
                                    const int32_t *dst, int32_t n) {
    copy_job_t j = { pools, src, dst, n, rill__kv_page_size_bytes(kv) };
    const int64_t items = (int64_t)n_pools * n;
    /* a float per 4 bytes, as the other ops count their work */
    rill_pool_for(pool_for_work(b, items * (int64_t)(j.page / 4)), items, 0, copy_items, &j);
    return RILL_OK;
}

/* ---- encoder-decoder ops: the reference's row functions on the threads, dense attention in
 * AVX2 where the table is not the scalar one (cpu_encdec.c) ---------------------------------- */

typedef struct ln_job {
    float *y;
    const float *x, *g, *beta;
    int64_t n;
    float eps;
} ln_job_t;

static void ln_rows(void *ctx, int64_t begin, int64_t end, int thread) {
    const ln_job_t *j = ctx;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        rill__layer_norm_row(j->y + r * j->n, j->x + r * j->n, j->g, j->beta, j->n, j->eps);
    }
}

static rill_err_t cpu_layer_norm(rill_backend_t *b, float *y, const float *x, const float *g,
                                 const float *beta, int64_t n_rows, int64_t n, float eps) {
    ln_job_t j = { y, x, g, beta, n, eps };
    rill_pool_for(pool_for_work(b, n_rows * n), n_rows, 0, ln_rows, &j);
    return RILL_OK;
}

static void gelu_blocks(void *ctx, int64_t begin, int64_t end, int thread) {
    const ln_job_t *j = ctx;
    (void)thread;
    const int64_t i1 = end * EW_BLOCK < j->n ? end * EW_BLOCK : j->n;
    for (int64_t i = begin * EW_BLOCK; i < i1; i++) {
        j->y[i] = rill__gelu(j->x[i]);
    }
}

static rill_err_t cpu_gelu(rill_backend_t *b, float *y, const float *x, int64_t n) {
    ln_job_t j = { .y = y, .x = x, .n = n };
    /* erff costs some ten times an add: parallel from a tenth of the usual size */
    rill_pool_for(pool_for_work(b, n * 10), (n + EW_BLOCK - 1) / EW_BLOCK, 0, gelu_blocks, &j);
    return RILL_OK;
}

typedef struct im2col_job {
    float *y;
    const float *x;
    const rill_conv1d_t *cv;
} im2col_job_t;

static void im2col_rows(void *ctx, int64_t begin, int64_t end, int thread) {
    const im2col_job_t *j = ctx;
    (void)thread;
    rill__im2col_1d_rows(j->y, j->x, j->cv, begin, end);
}

static rill_err_t cpu_im2col_1d(rill_backend_t *b, float *y, const float *x,
                                const rill_conv1d_t *cv) {
    im2col_job_t j = { y, x, cv };
    const int64_t n_out = rill_conv1d_n_out(cv);
    rill_pool_for(pool_for_work(b, n_out * cv->n_ch * cv->kernel), n_out, 0, im2col_rows, &j);
    return RILL_OK;
}

#define DENSE_MAX_Q 16 /* queries of one head per dense-attention task */

typedef struct dense_job {
    rill_backend_t *b;
    float *out;
    const float *q, *k, *v;
    int64_t n_q, n_kv, qb, n_qblocks;
    int32_t n_head, d;
} dense_job_t;

static void dense_tasks(void *ctx, int64_t begin, int64_t end, int thread) {
    const dense_job_t *j = ctx;
    float *scores = cpu(j->b)->attn_rows + (size_t)thread * RILL__ATTN_SCRATCH;
    const int64_t row = (int64_t)j->n_head * j->d;
    const bool vec = cpu(j->b)->k != rill__cpu_kernels_scalar();
    for (int64_t task = begin; task < end; task++) {
        const int32_t h = (int32_t)(task % j->n_head);
        const int64_t i0 = task / j->n_head * j->qb;
        const int64_t nq = j->n_q - i0 < j->qb ? j->n_q - i0 : j->qb;
        const int64_t off = i0 * row + (int64_t)h * j->d;
        if (vec && j->n_kv * nq <= RILL__ATTN_SCRATCH) {
            rill__attention_dense_rows_avx2(j->out + off, j->q + off, j->k + (int64_t)h * j->d,
                                            j->v + (int64_t)h * j->d, row, nq, j->n_kv, j->d,
                                            scores);
            continue;
        }
        float *sc = j->n_kv <= RILL__ATTN_SCRATCH ? scores : NULL;
        for (int64_t i = 0; i < nq; i++) {
            rill__attention_dense_row(j->out + off + i * row, j->q + off + i * row,
                                      j->k + (int64_t)h * j->d, j->v + (int64_t)h * j->d, row,
                                      j->n_kv, j->d, sc);
        }
    }
}

static rill_err_t cpu_attention_dense(rill_backend_t *b, float *out, const float *q, const float *k,
                                      const float *v, int64_t n_q, int64_t n_kv, int32_t n_head,
                                      int32_t head_dim) {
    dense_job_t j = { .b = b,
                      .out = out,
                      .q = q,
                      .k = k,
                      .v = v,
                      .n_q = n_q,
                      .n_kv = n_kv,
                      .n_head = n_head,
                      .d = head_dim };
    /* as many queries per task as their scores fit the scratch, up to DENSE_MAX_Q */
    j.qb = n_kv > RILL__ATTN_SCRATCH ? 1 : RILL__ATTN_SCRATCH / n_kv;
    j.qb = j.qb < DENSE_MAX_Q ? j.qb : DENSE_MAX_Q;
    j.qb = j.qb < n_q ? j.qb : n_q;
    j.n_qblocks = (n_q + j.qb - 1) / j.qb;
    rill_pool_for(cpu(b)->pool, j.n_qblocks * n_head, 1, dense_tasks, &j);
    return RILL_OK;
}

static const rill_backend_ops_t cpu_ops = {
    .destroy = cpu_destroy,
    .alloc = rill__host_alloc,
    .free = rill__host_free,
    .copy_in = rill__host_copy,
    .copy_out = rill__host_copy,
    .copy = rill__host_copy,
    .zero = rill__host_zero,
    .weight_prepare = rill__host_weight_prepare,
    .weight_release = rill__host_weight_release,
    .get_rows = rill__host_get_rows,
    .get_rows_resident = rill__host_get_rows_resident,
    .rms_norm = cpu_rms_norm,
    .matmul = cpu_matmul,
    .add_bias = cpu_add_bias,
    .add = cpu_add,
    .swiglu = cpu_swiglu,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .kv_rope_shift = cpu_kv_rope_shift,
    .kv_copy_pages = cpu_kv_copy_pages,
    .argmax = rill__host_argmax,
    .argmax_resident = rill__host_argmax,
    .layer_norm = cpu_layer_norm,
    .gelu = cpu_gelu,
    .im2col_1d = cpu_im2col_1d,
    .attention_dense = cpu_attention_dense,
};

/* The SIMD level asked for: simd, or under AUTO the RILL_SIMD override (AUTO when unset). */
static rill_simd_t requested(rill_simd_t simd) {
    const char *env = getenv("RILL_SIMD");
    if (simd != RILL_SIMD_AUTO || env == NULL || env[0] == '\0') {
        return simd;
    }
    if (strcmp(env, "scalar") == 0) {
        return RILL_SIMD_SCALAR;
    }
    if (strcmp(env, "avx2") == 0) {
        return RILL_SIMD_AVX2;
    }
    if (strcmp(env, "avx512") == 0) {
        return RILL_SIMD_AVX512;
    }
    RILL_LOGW("RILL_SIMD=%s is not scalar, avx2 or avx512: ignored", env);
    return RILL_SIMD_AUTO;
}

/* The kernel table for a SIMD level, or NULL when AVX2 or AVX-512 is demanded on a CPU without
 * it; AUTO: the widest the CPU has. */
static const rill__cpu_kernels_t *pick_kernels(rill_simd_t simd) {
    switch (simd) {
    case RILL_SIMD_SCALAR:
        return rill__cpu_kernels_scalar();
    case RILL_SIMD_AVX2:
        return rill__cpu_kernels_avx2();
    case RILL_SIMD_AVX512:
        return rill__cpu_kernels_avx512();
    case RILL_SIMD_AUTO:
        break;
    }
    const rill__cpu_kernels_t *k = rill__cpu_kernels_avx512();
    k = k != NULL ? k : rill__cpu_kernels_avx2();
    return k != NULL ? k : rill__cpu_kernels_scalar();
}

const char *rill_backend_simd_unsupported(rill_simd_t simd) {
    const rill_simd_t want = requested(simd);
    if (pick_kernels(want) != NULL) {
        return NULL;
    }
    const bool env = simd == RILL_SIMD_AUTO, avx2 = want == RILL_SIMD_AVX2;
    return env && avx2 ? "RILL_SIMD=avx2 asks for kernels this CPU lacks (AVX2, FMA or F16C)"
           : env       ? "RILL_SIMD=avx512 asks for kernels this CPU lacks (AVX-512 F, VL or BW)"
           : avx2      ? "AVX2 kernels requested but this CPU lacks AVX2, FMA or F16C"
                       : "AVX-512 kernels requested but this CPU lacks AVX-512 F, VL or BW";
}

static int32_t cpu_available(void) {
    return 1; /* the host; its SIMD levels are a parameter of the one device */
}

static rill_err_t cpu_create(const rill_backend_params_t *p, rill_backend_t **out) {
    const char *why = rill__cpu_params_invalid(p);
    if (why != NULL) {
        return rill__error(RILL_EINVAL, "backend cpu: %s", why);
    }
    const rill__cpu_kernels_t *k = pick_kernels(requested(p->cpu.simd));
    if (k == NULL) {
        return rill__error(RILL_EUNSUPPORTED, "backend cpu: %s",
                           rill_backend_simd_unsupported(p->cpu.simd));
    }
    cpu_backend_t *c = rill_calloc(RILL_MEM_KERNELS, 1, sizeof *c);
    if (c == NULL) {
        return RILL_ENOMEM;
    }
    c->base.ops = &cpu_ops;
    c->k = k;
    const bool scalar = k == rill__cpu_kernels_scalar(), avx2 = k == rill__cpu_kernels_avx2();
    c->base.name = scalar ? "cpu-scalar" : avx2 ? "cpu-avx2" : "cpu-avx512";
    rill_err_t err = rill__backend_init_common(&c->base, p);
    if (err != RILL_OK) {
        rill_free(c);
        return err;
    }
    c->base.params.cpu.simd = scalar ? RILL_SIMD_SCALAR : avx2 ? RILL_SIMD_AVX2 : RILL_SIMD_AVX512;
    /* every table's act row fits in max_n_in floats plus its side data and alignment: the
     * largest (Q8_1 blocks + 2 floats per block) is 1.4 bytes per value + 96 */
    const size_t row = ((size_t)p->max_n_in * sizeof(float) + 96u + 63u) & ~(size_t)63u;
    c->act = rill_malloc_aligned(RILL_MEM_KERNELS, (size_t)p->max_batch * row, 64);
    if (c->act == NULL) {
        err = RILL_ENOMEM;
        goto cleanup;
    }
    err = rill_pool_new(p->cpu.n_threads, &c->pool);
    if (err != RILL_OK) {
        goto cleanup;
    }
    c->base.params.cpu.n_threads = rill_pool_threads(c->pool);
    c->attn_rows = rill_malloc_aligned(
        RILL_MEM_KERNELS, (size_t)c->base.params.cpu.n_threads * RILL__ATTN_SCRATCH * sizeof(float),
        64);
    if (c->attn_rows == NULL) {
        err = RILL_ENOMEM;
        goto cleanup;
    }
    *out = &c->base;
    return RILL_OK;
cleanup:
    rill_pool_destroy(&c->pool);
    rill_free(c->act);
    rill__backend_deinit_common(&c->base);
    rill_free(c);
    return err;
}

const rill__backend_entry_t rill__backend_entry_cpu = {
    .name = "cpu",
    .kind = RILL_BACKEND_CPU,
    .numerics = RILL_NUMERICS_EXACT,
    .summary = "fast CPU: AVX-512 / AVX2 / scalar kernels chosen at run time, threaded",
    .available = cpu_available,
    .create = cpu_create,
};
