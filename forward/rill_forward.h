/*
 * rill_forward.h - the transformer forward pass, written once against the backend interface.
 *
 * A rill_forward_t binds a loaded model (rill_model.h) to a compute backend (rill_backend.h):
 * it prepares every weight for the backend (zero copy on the CPU backends: the weights stay in
 * the model's mapping) and allocates the activation buffers for batches of up to max_batch
 * tokens. rill_forward_eval() then runs one batch through all layers: the tokens may belong to
 * different sequences at different positions (the batch's page tables say where each sequence's
 * K/V live in a rill_kv_cache_t), so prefill chunks and decode steps of many sessions share one
 * pass. Logits are computed only for the tokens the caller asks for, and copied to the host, or
 * (rill_forward_eval_ids) reduced to arg-max ids that stay in backend memory for the next step.
 *
 * The KV cache here is storage only: n_layer paged pools with one layout (rill_kv_layout_t).
 * Which pages belong to which sequence is the caller's business (a contiguous cache is the
 * identity page table; sessions/ manages pages with reference counts).
 *
 * Scratch (backend memory, allocated at creation, nothing per token), with T = max_batch,
 * E = n_embd, Q = n_head * head_dim, KV = n_head_kv * head_dim, F = n_ff, V = n_vocab,
 * L = max_logits:  4 * (T * (2E + 2Q + 2KV + 2F) + L * (E + V)) bytes. For SmolLM2-135M with the
 * defaults (T = 512, L = 32): 4 * (512 * (1152 + 1152 + 384 + 3072) + 32 * (576 + 49152)) =
 * 18.2 MiB, plus the backend's own scratch (rill_backend.h) and the KV cache:
 * 2 * n_layer * KV * (2 bytes for F16) per token = 22.5 KiB per token for SmolLM2-135M (30
 * layers, KV = 192); Q8_0 K and V take 34 / 32 bytes a value (12.0 KiB a token), Q4_0 18 / 32
 * (6.3 KiB): rill_kv_cache_new_types.
 *
 * Thread safety: a rill_forward_t and its KV caches belong to one thread at a time (the thread
 * that owns the backend). The model may be shared with other forwards on other threads.
 */
#ifndef RILL_FORWARD_H
#define RILL_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "rill_backend.h"
#include "rill_compat.h"
#include "rill_err.h"
#include "rill_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_forward rill_forward_t;
typedef struct rill_kv_cache rill_kv_cache_t;

typedef struct rill_forward_params {
    int32_t max_batch;  /* most tokens per rill_forward_eval(); default: the backend's max_batch */
    int32_t max_logits; /* rows of logits computed per output matmul (a larger request is done in
                           several passes); default 32 */
} rill_forward_params_t;

rill_forward_params_t rill_forward_default_params(void);

/* Binds model to backend. Takes a reference to model (released by rill_forward_destroy); the
 * backend is borrowed and must outlive the forward. Errors: RILL_EINVAL (NULL, max_batch < 1 or
 * above the backend's, max_logits < 1, the model is wider than the backend's max_n_in),
 * RILL_EUNSUPPORTED (a model feature the forward pass does not implement, e.g. rope_freqs, or a
 * whisper model, which rill_whisper_new() of rill_whisper.h runs),
 * RILL_ENOMEM. On error nothing is left allocated. Caller owns *out; destroy with
 * rill_forward_destroy(). */
rill_err_t rill_forward_new(rill_model_t *model, rill_backend_t *backend,
                            const rill_forward_params_t *params, rill_forward_t **out);

/* Frees the forward's buffers and prepared weights, drops its model reference, sets *fp = NULL.
 * NULL-safe. KV caches made for it must be destroyed first. */
void rill_forward_destroy(rill_forward_t **fp);

const rill_model_t *rill_forward_model(const rill_forward_t *fw);
rill_backend_t *rill_forward_backend(rill_forward_t *fw);
int32_t rill_forward_max_batch(const rill_forward_t *fw);

/* Allocates a KV cache of n_pages pages of page_size positions for every layer of the model,
 * elements of dtype (RILL_DTYPE_F16, llama.cpp's default, or RILL_DTYPE_F32). Contents are
 * undefined until written. Errors: RILL_EINVAL (bad dtype or sizes), RILL_ENOMEM. Caller owns
 * *out; destroy with rill_kv_cache_destroy() before the forward. */
rill_err_t rill_kv_cache_new(rill_forward_t *fw, rill_dtype_t dtype, int32_t page_size,
                             int32_t n_pages, rill_kv_cache_t **out);

/* rill_kv_cache_new() with K and V of their own types, as llama.cpp's --cache-type-k and
 * --cache-type-v: each RILL_DTYPE_F32, _F16, _Q8_0 or _Q4_0 (the block types need the model's
 * head_dim to be a multiple of 32). Bytes per cached token and layer: Hkv * (row(K) + row(V)),
 * a row of D values being 4 D (f32), 2 D (f16), 34 D / 32 (q8_0), 18 D / 32 (q4_0). How the
 * quantized rows are written and read: rill_backend.h, Numerics, quantized caches.
 * Errors: RILL_EINVAL (NULL, another type, head_dim not a multiple of 32 for a block type, bad
 * sizes; the detail in rill_last_error), RILL_ENOMEM. Caller owns *out; destroy with
 * rill_kv_cache_destroy() before the forward. */
rill_err_t rill_kv_cache_new_types(rill_forward_t *fw, rill_dtype_t k_dtype, rill_dtype_t v_dtype,
                                   int32_t page_size, int32_t n_pages, rill_kv_cache_t **out);

void rill_kv_cache_destroy(rill_kv_cache_t **kvp);

/* The layout shared by every layer's pool, and layer l's pool (a backend pointer). */
const rill_kv_layout_t *rill_kv_cache_layout(const rill_kv_cache_t *kv);
void *rill_kv_cache_pool(rill_kv_cache_t *kv, int32_t layer);

/* Bytes of backend memory the cache holds. */
int64_t rill_kv_cache_bytes(const rill_kv_cache_t *kv);

/* Copies n whole pages in every layer at once (one rill_backend_kv_copy_pages() call over all
 * the layers' pools): page dst[i] of each layer becomes a copy of page src[i] of that layer.
 * src and dst are host arrays of n page indices in [0, n_pages); a source may repeat, a
 * destination may not, and no page may be both (the order of the copies never matters).
 * This is copy-on-write for many pages in one call (sessions/ uses it). n == 0 copies nothing.
 * Errors: RILL_EINVAL (NULL, n < 0, an index out of range, a repeated destination, a page both
 * read and written; detail in rill_last_error); on error
 * nothing is copied. Blocks until done. */
rill_err_t rill_kv_cache_copy_pages(rill_kv_cache_t *kv, const int32_t *src, const int32_t *dst,
                                    int32_t n);

/* Runs batch (rill_backend.h: per token its sequence, position, KV slot and visible KV count)
 * with tokens[i] the id of batch token i. Writes every token's K/V into kv. For each of the
 * n_out indices out_rows[j] (batch token indices, any order, repeats allowed) the logits of that
 * token are copied to logits_host[j * n_vocab .. + n_vocab) (host memory, caller-owned).
 * n_out may be 0 (ingest only: no output projection is computed).
 * Errors: RILL_EINVAL (NULL, a token id outside [0, n_vocab), an out_rows entry outside
 * [0, n_tok), anything rill_backend_set_batch or the ops reject), RILL_ERANGE (n_tok >
 * max_batch). On error the KV cache may hold partial writes at the batch's slots (the slots
 * the batch named, nothing else); the caller treats those slots as unwritten. Blocks until done. */
rill_err_t rill_forward_eval(rill_forward_t *fw, rill_kv_cache_t *kv, const rill_batch_t *batch,
                             const int32_t *tokens, const int32_t *out_rows, int32_t n_out,
                             float *logits_host);

/* ---- sampled ids that stay in backend memory ------------------------------------------------
 *
 * A greedy decode step needs only the arg-max of its logits, and the next step needs only that
 * id. rill_forward_eval_ids() runs the output projection and an arg-max in the backend and leaves
 * the ids in a rill_forward_ids_t (backend memory); the next call can take its input tokens from
 * that buffer. So a decode loop moves no logits and no ids across the host boundary (on a GPU:
 * no per-token copy to the host) until the caller asks for the ids with rill_forward_ids_read():
 *
 *     rill_forward_eval_ids(fw, kv, &step0, prompt, NULL, &last, 1, ids);    host prompt in
 *     for each next step:
 *         rill_forward_eval_ids(fw, kv, &step, NULL, ids, rows, n, ids);     ids in, ids out
 *     rill_forward_ids_read(ids, host, n);                                   when wanted
 *
 * The ids are what rill_backend_argmax() gives for the same logits: per row the index of the
 * largest logit, the lowest on ties, NaN never wins. */
typedef struct rill_forward_ids rill_forward_ids_t;

/* Allocates room for `capacity` ids (1..max_batch; capacity * 4 bytes) in fw's backend memory;
 * count starts at 0.
 * Errors: RILL_EINVAL (NULL, capacity out of range), RILL_ENOMEM. Caller owns *out; destroy it
 * with rill_forward_ids_destroy() before the forward. Thread class: as the forward's. */
rill_err_t rill_forward_ids_new(rill_forward_t *fw, int32_t capacity, rill_forward_ids_t **out);

/* Frees the buffer and sets *idp = NULL. NULL-safe. */
void rill_forward_ids_destroy(rill_forward_ids_t **idp);

/* Ids the buffer holds: those the last rill_forward_eval_ids() (or rill_forward_ids_write())
 * put there, 0 after creation or after a failed pass. */
int32_t rill_forward_ids_count(const rill_forward_ids_t *ids);

/* Copies the first n ids (n <= count) to host_out[n] (host, caller-owned). Blocking: on a device
 * this is the one transfer of a decode loop. Errors: RILL_EINVAL (NULL, n < 0), RILL_ERANGE
 * (n > count). */
rill_err_t rill_forward_ids_read(rill_forward_ids_t *ids, int32_t *host_out, int32_t n);

/* Sets the buffer to host[n] (n <= capacity; count becomes n), e.g. to seed a loop with ids the
 * host sampled. The ids are checked when a pass embeds them, not here. Errors: RILL_EINVAL (NULL,
 * n < 1), RILL_ERANGE (n > capacity). */
rill_err_t rill_forward_ids_write(rill_forward_ids_t *ids, const int32_t *host, int32_t n);

/* rill_forward_eval() whose output is arg-max ids in backend memory instead of host logits.
 * Input tokens: exactly one of tokens_host (host, n_tok ids, checked as rill_forward_eval checks
 * them) and tokens (batch token i takes id i of the buffer, which must hold at least n_tok; the
 * backend checks each against [0, n_vocab) before the pass embeds anything). Output: for each of
 * the n_out rows out_rows[j] (1 <= n_out <= next's capacity; batch token indices, any order,
 * repeats allowed), id j of next = the arg-max of that token's logits (ties: the lowest id; NaN
 * never wins); next's count becomes n_out. next may be the very buffer `tokens` is (the inputs
 * are read before any output is written); it must belong to fw. Errors: as rill_forward_eval()
 * (RILL_EINVAL for a resident id outside the vocabulary too), RILL_EINVAL (both or neither
 * token source, a buffer of another forward, tokens holding fewer than n_tok ids, n_out < 1 or
 * out_rows NULL), RILL_ERANGE (n_out > next's capacity). Argument errors change nothing; after
 * an error in the pass the KV cache is as after rill_forward_eval's errors and next's count is
 * 0. Blocks until the ids are in backend memory (nothing crosses to the host). */
rill_err_t rill_forward_eval_ids(rill_forward_t *fw, rill_kv_cache_t *kv, const rill_batch_t *batch,
                                 const int32_t *tokens_host, const rill_forward_ids_t *tokens,
                                 const int32_t *out_rows, int32_t n_out, rill_forward_ids_t *next);

/* Lets another thread stop a pass: rill_forward_eval (and _eval_ids) loads *flag (acquire) before
 * each layer and, when it is non-zero, returns RILL_ECANCELED there, the KV cache as after any
 * error (partial writes at the batch's slots only). flag NULL (the default): never. fw keeps the
 * pointer; the caller resets the flag. Used by the scheduler to preempt background steps. */
void rill_forward_set_cancel(rill_forward_t *fw, const RILL_ATOMIC(int) * flag);

/* Convenience for one sequence whose slot of position p is p (no re-basing): evaluates
 * tokens[0, n) at positions [pos0, pos0 + n) through the page table pt (host; it must cover slot
 * pos0 + n - 1), in chunks of max_batch, each chunk attending to everything before it. Writes
 * the logits of the last token (all == false: n_vocab floats) or of every token (all == true:
 * n * n_vocab floats, row after row) to logits_host, or none when logits_host is NULL.
 * Errors: as rill_forward_eval(), plus RILL_ERANGE when the page table is too short. On error,
 * chunks before the failing one have been stored. Does not allocate. */
rill_err_t rill_forward_eval_sequence(rill_forward_t *fw, rill_kv_cache_t *kv,
                                      const rill_page_table_t *pt, int32_t pos0,
                                      const int32_t *tokens, int32_t n, bool all,
                                      float *logits_host);

#ifdef __cplusplus
}
#endif
#endif /* RILL_FORWARD_H */
