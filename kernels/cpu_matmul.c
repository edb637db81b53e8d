/*
 * cpu_matmul.c - the fast backend's matmul driver: y (T, O) = x (T, E) . W^T.
 *
 * Two phases, both on the pool:
 *   1. quantize every input row once into the act scratch (the weight type's vec_dot type; F32
 *      weights read x directly). llama.cpp does the same: quantizing per dot product instead
 *      would cost O(T x O) conversions instead of O(T). The act row layout belongs to the kernel
 *      table (k->act_row_bytes): the AVX2 table appends the block scales already converted to
 *      f32, which takes the f16 conversions out of the inner loop.
 *   2. work items = (token block, row chunk) pairs, claimed dynamically by the threads. Inside an
 *      item the loop runs tiles of 4 tokens x 1 row (x 8 rows where the table has an 8-row
 *      kernel and O is a multiple of 8: Q4_0), rows innermost: the chunk's weight rows (<= ~16
 *      KiB) stay in L1 while the act rows of a tile are reused against each of them (x 2 rows where
 *      the table has a 2-row kernel for a vec_dot-path matmul: AVX-512), and a
 *      token block's act rows (64 rows, ~100 KiB for E = 1536) stay in L2 across chunks. For
 *      decode (T = 1) an item is simply a run of rows, sized so every thread gets several.
 * Every output element is written by exactly one thread and computed by the same kernel
 * regardless of the split, so results do not depend on the thread count. They do depend on the
 * batch size where llama.cpp's do: the tile kernels are picked per matmul by rill__mm_path_for
 * (vec_dot / tinyBLAS / tiled / repacked gemv and gemm), and repacked Q4_K switches kernel at
 * token n_tok - n_tok % 4, a multiple of 4, so a 4-token tile never straddles the switch.
 * Rejected: a static split of rows between threads (dynamic claiming absorbs a worker that is
 * late because the machine is shared) and software prefetch of rows in decode (no measurable
 * gain on the development machine; the 8-row Q4_0 kernel does prefetch, as its access pattern
 * defeats the hardware prefetchers).
 */
#include "cpu_internal.h"

typedef struct mm_job {
    rill__tile_fn tile;      /* tokens [split, n_tok) */
    rill__tile_fn tile_head; /* tokens [0, split): llama.cpp's kernel may differ there */
    int64_t split;
    rill__tile8_fn tile8; /* non-NULL: rows go 8 at a time (chunks are multiples of 8) */
    rill__tile8_fn tile2; /* non-NULL: rows go 2 at a time, an odd last one through tile */
    rill__act_fn act_fn;
    const uint8_t *w;
    size_t w_row_bytes;
    const float *x;
    const uint8_t *act; /* act rows (x itself for F32) */
    uint8_t *act_out;   /* where phase 1 writes them */
    size_t act_stride;
    float *y;
    int64_t n_in, n_out, n_tok;
    int64_t rows_per_chunk, n_chunks, toks_per_block;
} mm_job_t;

static void quantize_rows(void *ctx, int64_t begin, int64_t end, int thread) {
    const mm_job_t *j = ctx;
    (void)thread;
    for (int64_t t = begin; t < end; t++) {
        j->act_fn(j->x + t * j->n_in, j->act_out + (size_t)t * j->act_stride, j->n_in);
    }
}

static void run_items(void *ctx, int64_t begin, int64_t end, int thread) {
    const mm_job_t *j = ctx;
    (void)thread;
    for (int64_t item = begin; item < end; item++) {
        const int64_t tb = item / j->n_chunks, rc = item % j->n_chunks;
        const int64_t r0 = rc * j->rows_per_chunk;
        const int64_t r1 = r0 + j->rows_per_chunk < j->n_out ? r0 + j->rows_per_chunk : j->n_out;
        const int64_t t0 = tb * j->toks_per_block;
        const int64_t t1 = t0 + j->toks_per_block < j->n_tok ? t0 + j->toks_per_block : j->n_tok;
        for (int64_t t = t0; t < t1; t += RILL__TILE_T) {
            const int nt = (int)(t1 - t < RILL__TILE_T ? t1 - t : RILL__TILE_T);
            const uint8_t *act = j->act + (size_t)t * j->act_stride;
            float *y = j->y + t * j->n_out;
            if (j->tile8 != NULL) {
                for (int64_t r = r0; r < r1; r += 8) {
                    j->tile8(j->n_in, j->w + (size_t)r * j->w_row_bytes, j->w_row_bytes, act,
                             j->act_stride, nt, y + r, j->n_out);
                }
                continue;
            }
            const rill__tile_fn tile = t < j->split ? j->tile_head : j->tile; /* never straddles */
            int64_t r = r0;
            if (j->tile2 != NULL) {
                for (; r + 2 <= r1; r += 2) {
                    j->tile2(j->n_in, j->w + (size_t)r * j->w_row_bytes, j->w_row_bytes, act,
                             j->act_stride, nt, y + r, j->n_out);
                }
            }
            for (; r < r1; r++) {
                tile(j->n_in, j->w + (size_t)r * j->w_row_bytes, act, j->act_stride, nt, y + r,
                     j->n_out);
            }
        }
    }
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

static rill__tile_fn tile_of(const rill__cpu_kernels_t *k, rill_dtype_t t, rill__mm_path_t path) {
    rill__tile_fn f = NULL;
    switch (path) {
    case RILL__MM_GEMM:
        f = k->tile_gemm[t];
        break;
    case RILL__MM_REPACK:
        f = k->tile_repack[t];
        break;
    case RILL__MM_REPACK4:
        f = k->tile_repack4[t];
        break;
    case RILL__MM_VEC:
        break;
    }
    return f != NULL ? f : k->tile[t];
}

void rill__cpu_tiles_for(const rill__cpu_kernels_t *k, const rill_weight_t *w, int64_t n_tok,
                         rill__tile_fn *head, rill__tile_fn *tail, int64_t *split) {
    /* llama.cpp's kernel can change only once along a batch: repacked Q4_K's gemm covers the
     * tokens in whole groups of 4, its gemv the rest */
    const rill__mm_path_t first = rill__mm_path_for(w, n_tok, 0);
    const rill__mm_path_t last = rill__mm_path_for(w, n_tok, n_tok - 1);
    *head = tile_of(k, w->dtype, first);
    *tail = tile_of(k, w->dtype, last);
    *split = first == last ? n_tok : n_tok - n_tok % 4;
}

void rill__cpu_matmul(const rill__cpu_kernels_t *k, rill_pool_t *pool, void *scratch, float *y,
                      const float *x, const rill_weight_t *w, int64_t n_tok) {
    const int n_threads = rill_pool_threads(pool);
    mm_job_t j = { 0 };
    rill__cpu_tiles_for(k, w, n_tok, &j.tile_head, &j.tile, &j.split);
    j.act_fn = k->act[w->dtype];
    j.w = w->data;
    j.w_row_bytes = w->row_bytes;
    j.x = x;
    j.y = y;
    j.n_in = w->ne0;
    j.n_out = w->ne1;
    j.n_tok = n_tok;
    if (j.act_fn == NULL) { /* F32 weights: the input rows are the act rows */
        j.act = (const uint8_t *)x;
        j.act_stride = (size_t)j.n_in * sizeof(float);
    } else {
        j.act_out = scratch;
        j.act = scratch;
        j.act_stride = ((size_t)k->act_row_bytes(w->dtype, j.n_in) + 63u) & ~(size_t)63u;
        const int64_t grain = n_tok / (4 * n_threads) > 1 ? n_tok / (4 * n_threads) : 1;
        rill_pool_for(n_tok >= 4 ? pool : NULL, n_tok, grain, quantize_rows, &j);
    }
    if (n_tok == 1) {
        j.toks_per_block = 1;
        j.rows_per_chunk = clamp64(j.n_out / (8 * n_threads), 8, 256);
    } else {
        j.toks_per_block = 64;
        const int64_t by_cache = clamp64(16384 / (int64_t)j.w_row_bytes, 4, 64);
        const int64_t n_tb = (n_tok + 63) / 64;
        const int64_t by_threads = clamp64(j.n_out * n_tb / (8 * n_threads), 4, 64);
        j.rows_per_chunk = by_cache < by_threads ? by_cache : by_threads;
    }
    if (k->tile8[w->dtype] != NULL && rill__mm_path_for(w, n_tok, 0) == RILL__MM_REPACK) {
        j.tile8 = k->tile8[w->dtype];
        j.rows_per_chunk = (j.rows_per_chunk + 7) / 8 * 8;
    } else if (k->tile2[w->dtype] != NULL && j.tile_head == k->tile[w->dtype] &&
               j.tile == k->tile[w->dtype]) {
        j.tile2 = k->tile2[w->dtype];
        j.rows_per_chunk = (j.rows_per_chunk + 1) / 2 * 2;
    }
    j.n_chunks = (j.n_out + j.rows_per_chunk - 1) / j.rows_per_chunk;
    const int64_t n_items = j.n_chunks * ((n_tok + j.toks_per_block - 1) / j.toks_per_block);
    rill_pool_for(pool, n_items, 1, run_items, &j);
}
