/*
 * rill_session.h - sessions: persistent KV state that data advances and questions only read
 * (../shared/DESIGN.md section 4).
 *
 * Two objects:
 *
 *   rill_session_pool_t  the paged KV pool of one forward pass: a fixed budget of cells allocated
 *                        once (a rill_kv_cache_t of n_pages pages of P positions, every layer
 *                        alike), a free list and a reference count per page. It is the page
 *                        allocator of every session made from it.
 *   rill_session_t       one stream: a page table (slot s lives in page pages[s / P], row s % P),
 *                        the resident token ids, the logits of its last resident position, a
 *                        window policy, and the text held back by boundary-safe text append.
 *
 * Positions. A session's resident tokens occupy slots [0, n) with no holes, and the token in
 * slot s is at RoPE position s: pos_next == n_resident. When the window evicts tokens, the kept
 * ones are re-based (their keys re-rotated) so they follow the sinks contiguously; positions
 * never reach the pool's context length n_ctx.
 *
 * Fork and copy-on-write. rill_session_fork() copies the page table and adds one reference to
 * each page: O(pages), no tensor data moves. A page with more than one reference is never
 * written: the first write into it (an append into a shared, partially filled last page, or the
 * re-rotation of a shared page by a window shift) first copies it, in every layer, into a page of
 * the writer's own. Hence a query (fork, prefill, decode, drop) leaves the session it ran on
 * bit-identical: same pages, same positions, same K/V bytes, same logits.
 *
 * Window policy (rill_session_params_t): n_sink sink tokens plus `window` recent tokens, both
 * rounded UP to whole pages (S' and W'), so that sinks and recent part start on page boundaries
 * and attention covers slots [0, n) of the page table with no holes. When the recent part is
 * full (n == S' + W') and more tokens arrive, evict_pages whole pages are dropped from the front
 * of the recent part; the pages after them move down in the page table and their keys are
 * re-rotated by -evict_pages * P positions with rill_backend_kv_rope_shift() (one call per layer
 * for all kept pages, so each token's keys are re-rotated about W' / (evict_pages * P) times in
 * its life). Sinks are never evicted nor re-rotated. Memory is bounded by S' + W' cells per
 * session. With window == 0 there is no eviction and a session holds at most n_ctx tokens
 * (appending more is RILL_ERANGE).
 *
 * Budget. Every operation that needs pages (append, a query's fork and prefill, copy-on-write)
 * computes the pages it will need before it changes anything: when the pool cannot supply them
 * it returns RILL_EFULL and the session and pool are exactly as before.
 *
 * Text (rill_session_append_text). Text may arrive in arbitrary chunks and must give the tokens
 * of the whole text tokenized at once (add_special false, parse_special false). The session
 * holds back the unstable tail: only text before the last space that follows an ASCII letter or
 * digit is tokenized; the rest waits for more text or rill_session_flush_text(). This is exact
 * for byte-level BPE (every pre-tokenizer rill supports splits before such a space and has no
 * look-behind) and for SentencePiece vocabularies whose pieces carry U+2581 only in front (true
 * of SentencePiece-trained vocabularies; the held-back part is tokenized with its leading space
 * turned into the tokenizer's own space prefix). A flush is a text boundary: text appended after
 * it is tokenized as a new text (SPM: it gets the space prefix again).
 *
 * Inputs are records (DESIGN.md section 7). Every input call (append, append_text, flush_text,
 * append_text_end, rollback, adopt, replace_text, and their feed variants; generate appends through
 * append) is one record, applied by one function whether it comes from a live call or from log
 * replay, and makes the next version: rill_session_seq() after the call is the version that call
 * created (what an ingest reply carries). A call that fails makes no version and changes nothing
 * (exceptions: a forward-pass failure, stated per call).
 *
 * Replace (rill_session_replace_text). "From the input that made version V on, the text is T":
 * afterwards the session is what it would be if the inputs before V had been given and then T
 * as one text input (rill_session_append_text) instead of inputs V, V+1, ... whatever their
 * kind (text, tokens, generated tokens, flushes, rollbacks, adopts, replaces). The token stream
 * is therefore the stream before input V followed by the tokens of (the text held back before
 * input V, then T), cut and held back as text append does: what a fresh session given the same
 * final text in any chunks would hold. It is computed exactly and cheaply: the session rolls
 * back to the longest common prefix of its stream and the new one and evaluates only the rest,
 * so a recognizer that rewrites its tentative tail pays for the changed tokens. The replace is
 * itself an input with the next version; the inputs it replaced are gone, so a later replace
 * from any of their versions (or from the replace's own) returns to the same point as one from
 * V. To find that point a session remembers its last RILL_SESSION_REPLACE_INPUTS inputs (where
 * their tokens start, and the held-back text before each, at most RILL_SESSION_REPLACE_HELD
 * bytes of it in all): a replace may not reach an input it no longer remembers, one whose
 * earlier tokens a later rollback removed, or one that starts in tokens the window has evicted
 * (judged as if every input had been evaluated at once, so that replay decides the same); those
 * are RILL_ERANGE and change nothing. With a window, evictions the replaced inputs caused are
 * not undone (as with rollback): the stream is exact, the resident part may be shorter than a
 * fresh session's. A fork inherits the remembered inputs, a snapshot stores them, restore and
 * replay rebuild them.
 *
 * Durability (DESIGN.md section 4; file formats in docs/architecture.md, "Sessions:
 * durability"). Every input call has a sequence number, rill_session_seq(). With an ingest log
 * open (rill_session_open_log), the call first writes one record of its raw input (text as
 * text, not the tokens derived from it) with its sequence number and a CRC-32C, then applies
 * it; a call that fails removes its record again. A call that returned RILL_OK is
 * acknowledged: its record is in the file, so it survives the process being killed; under
 * RILL_SESSION_FSYNC_ALWAYS it was also fsynced, so it survives the machine. A snapshot
 * (rill_session_snapshot) writes the session's metadata and page contents, with checksums,
 * atomically (temporary file, fsync, rename). rill_session_restore() loads a snapshot into fresh
 * pages and replays the log records after the snapshot's sequence number, or rebuilds a session
 * from its log alone. A torn last record (a crash in the middle of a write) is dropped with a
 * warning; damage anywhere else is an error (RILL_ECORRUPT with the byte offset), as is a snapshot
 * of another model (RILL_EUNSUPPORTED) or a truncated one (RILL_EFORMAT). Forks are not logged: a
 * fork starts with no log and a new identity, so a fork that must survive a crash opens its own log
 * and takes a snapshot. The durability calls follow the thread rule below (one thread at a time per
 * pool); a log file is locked (flock) by the one session that has it open.
 *
 * Memory. The pool allocates its KV cache and tables at creation; a session allocates its page
 * table, token array, logits (n_vocab floats) and replace window (32 bytes per remembered
 * input) at creation or fork. Appending tokens, decoding and evicting allocate nothing; text
 * input and replace grow the session's text buffers only when an input is longer than any
 * before, and the store of remembered held-back text up to twice RILL_SESSION_REPLACE_HELD. All
 * memory is charged to RILL_MEM_SESSIONS (host) and the backend (the KV cache).
 *
 * Thread safety: one thread at a time. A pool and all its sessions (and the forward pass and
 * backend under them) belong to the engine thread that owns the backend. Page reference counts
 * are plain integers, not atomics: pages are shared between sessions of one pool, never between
 * threads (a deliberate departure from STYLE.md rule 9, which is about objects other threads
 * can reach).
 */
#ifndef RILL_SESSION_H
#define RILL_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"
#include "rill_forward.h"
#include "rill_sampler.h"
#include "rill_tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_session_pool rill_session_pool_t;
typedef struct rill_session rill_session_t;

/* ---- the pool ------------------------------------------------------------------------------ */

/* rill_session_pool_params_t.kv_type_v: V has K's type. */
#define RILL_SESSION_KV_SAME (-1)

typedef struct rill_session_pool_params {
    int64_t n_cells;      /* KV budget in token cells, rounded up to whole pages (>= 1);
                             default 8192 */
    int32_t page_size;    /* P, positions per page (1..4096); default RILL_KV_PAGE_SIZE (16) */
    rill_dtype_t kv_type; /* K's cache type, and V's unless kv_type_v says otherwise:
                             RILL_DTYPE_F16 (default, llama.cpp's), _F32, _Q8_0 or _Q4_0 (the
                             block types need head_dim % 32 == 0); llama.cpp's --cache-type-k */
    int32_t kv_type_v;    /* V's cache type (a rill_dtype_t, the same four), or
                             RILL_SESSION_KV_SAME (default): kv_type; llama.cpp's
                             --cache-type-v */
    int32_t n_ctx;        /* most positions a session may use; 0 (default): the model's
                             training context. Must not exceed it. */
    const rill_tokenizer_t *tokenizer; /* borrowed (must outlive the pool); optional: needed by
                                          text append and stop-at-end-of-generation */
} rill_session_pool_params_t;

/* Defaults as documented per field. */
rill_session_pool_params_t rill_session_pool_default_params(void);

/* Creates a pool over fw (borrowed: it must outlive the pool): one rill_kv_cache_t of
 * ceil(n_cells / P) pages plus one private scratch page (used to recompute logits after a
 * rollback without writing a session's pages), in fw's backend. params NULL: the defaults.
 * Errors: RILL_EINVAL (NULL fw or out, a field out of range, n_ctx above the model's context or
 * below P), RILL_ENOMEM (host or backend memory). On error nothing is left allocated.
 * Caller owns *out; destroy with rill_session_pool_destroy() after every session of it. */
rill_err_t rill_session_pool_new(rill_forward_t *fw, const rill_session_pool_params_t *params,
                                 rill_session_pool_t **out);

/* Frees the pool and sets *pp = NULL. NULL-safe. Every session of the pool must have been
 * destroyed (asserted: a live session would point at freed memory). */
void rill_session_pool_destroy(rill_session_pool_t **pp);

/* The page budget (excluding the scratch page), the pages free now, P, and n_ctx. */
int32_t rill_session_pool_n_pages(const rill_session_pool_t *p);
int32_t rill_session_pool_n_free(const rill_session_pool_t *p);
int32_t rill_session_pool_page_size(const rill_session_pool_t *p);
int32_t rill_session_pool_n_ctx(const rill_session_pool_t *p);

/* Reference count of page `page` (0 when free; -1 when out of range). For tests and stats. */
int32_t rill_session_pool_page_refs(const rill_session_pool_t *p, int32_t page);

/* The KV cache the pages live in (for tests that read K/V back with rill_kv_cache_pool() and
 * rill_backend_copy_out()). Borrowed; valid for the pool's lifetime. Writing it bypasses
 * copy-on-write: don't. */
rill_kv_cache_t *rill_session_pool_cache(rill_session_pool_t *p);

/* Bytes of KV memory (all layers) one page holds. */
int64_t rill_session_pool_page_bytes(const rill_session_pool_t *p);

/* The pool's tokenizer (NULL without one; borrowed) and its forward's max_batch. */
const rill_tokenizer_t *rill_session_pool_tokenizer(const rill_session_pool_t *p);
int32_t rill_session_pool_max_batch(const rill_session_pool_t *p);

/* The model's vocabulary size (the length of a logits row). */
int32_t rill_session_pool_n_vocab(const rill_session_pool_t *p);

/* The forward the pool was made with (borrowed). */
rill_forward_t *rill_session_pool_forward(rill_session_pool_t *p);

/* ---- sessions ------------------------------------------------------------------------------ */

typedef struct rill_session_params {
    int32_t n_sink;        /* S: tokens at the start that are never evicted (rounded up to whole
                              pages; only meaningful with a window). Default 0 */
    int32_t window;        /* W: recent tokens kept (rounded up to whole pages); 0 (default): no
                              window, at most n_ctx tokens. S' + W' must not exceed n_ctx. */
    int32_t evict_pages;   /* pages evicted at a time when the window overflows (1..W'/P);
                              0 (default): max(1, W' / P / 4) */
    const int32_t *prompt; /* optional system prompt, appended at creation (borrowed for the
                              call); NULL for none */
    int32_t n_prompt;      /* ids in prompt */
} rill_session_params_t;

/* Defaults as documented per field. */
rill_session_params_t rill_session_default_params(void);

/* Creates an empty session of pool p and appends params->prompt if any (see
 * rill_session_append()). params NULL: the defaults. Errors: RILL_EINVAL (NULL, a field out of
 * range, a prompt id outside the vocabulary), RILL_ERANGE (a prompt longer than the session can
 * hold without a window), RILL_EFULL (not enough free pages for the prompt), RILL_ENOMEM, and
 * forward-pass errors. On error nothing is left allocated and the pool is as before. Caller owns
 * *out; destroy with rill_session_destroy() before the pool. */
rill_err_t rill_session_new(rill_session_pool_t *p, const rill_session_params_t *params,
                            rill_session_t **out);

/* Drops the session: releases its page references (pages nobody else holds return to the free
 * list), closes its ingest log as rill_session_close_log() does (an fsync error is logged),
 * frees it and sets *sp = NULL. NULL-safe. Forks of it are unaffected. */
void rill_session_destroy(rill_session_t **sp);

/* Appends tokens[0, n) at the next positions: runs the forward pass over them in chunks of the
 * forward's max_batch (each chunk attends to everything before it), evicting window pages as
 * needed, and keeps the logits of the last one (rill_session_logits). n == 0 is a no-op.
 * Allocates nothing. Blocks for the forward pass.
 * Errors (session and pool unchanged): RILL_EINVAL (NULL, n < 0, an id outside [0, n_vocab)),
 * RILL_ERANGE (no window and n_resident + n > n_ctx), RILL_EFULL (the pool lacks the pages,
 * counted in advance including copy-on-write), RILL_EIO (s has a log and the record could not be
 * written). A forward-pass failure (RILL_E* of
 * rill_forward_eval; not expected with valid ids) leaves the chunks before the failing one
 * appended, drops the failing chunk, and invalidates the logits until the next append (its log
 * record is removed: the log then lacks the chunks that were kept).
 * Held-back text (rill_session_append_text) is not flushed: tokens appended while text is held
 * go before it; call rill_session_flush_text() first to keep the order. */
rill_err_t rill_session_append(rill_session_t *s, const int32_t *tokens, int32_t n);

/* Appends UTF-8 text (any bytes) of len bytes, boundary-safe as described at the top: the
 * stable part is tokenized and appended now, the tail is held in the session. Errors: as
 * rill_session_append() (session unchanged, text not taken), RILL_EUNSUPPORTED (the pool has no
 * tokenizer), RILL_ENOMEM (a text buffer could not grow; unchanged). With a log, the record
 * holds the text as given, not its tokens. */
rill_err_t rill_session_append_text(rill_session_t *s, const char *text, size_t len);

/* Inputs a session remembers for rill_session_replace_text(), and the most bytes of held-back
 * text it keeps for them (the text held back before each remembered input). */
#define RILL_SESSION_REPLACE_INPUTS 64
#define RILL_SESSION_REPLACE_HELD   65536

/* Replaces the session's input from the input that made version from_version on by the UTF-8
 * text[0, len) (any bytes; len 0: no text), as described under "Replace" at the top: the state
 * becomes that of the inputs before from_version followed by rill_session_append_text(text),
 * with the stream rolled back to the longest common prefix of the old and new token streams and
 * only the rest evaluated. It is an input call: it makes the next version, and with a log its
 * record holds from_version and the text. Blocks for the forward pass over the new tokens.
 * Errors (session, pool and log unchanged):
 *   RILL_EINVAL (NULL s, NULL text with len > 0, from_version outside [1, rill_session_seq(s)]:
 *   version 0 or one not made yet),
 *   RILL_ERANGE (from_version before the inputs the session remembers: more than
 *   RILL_SESSION_REPLACE_INPUTS inputs ago, or made before a restore from a version-1
 *   snapshot; tokens given before that input were removed by a later rollback; the text held
 *   back before it was longer than RILL_SESSION_REPLACE_HELD; it starts in tokens the window
 *   has evicted; without a window, the new stream would exceed n_ctx),
 *   RILL_EUNSUPPORTED (the pool has no tokenizer), RILL_EFULL (the pool lacks the pages for the
 *   new tokens, counted after the rollback frees its pages), RILL_ENOMEM, RILL_EIO (log).
 * A forward-pass failure (not expected) leaves the session rolled back to the common prefix with
 * the chunks before the failing one appended, held-back text discarded as by a rollback, the
 * logits invalid, and no version made (the log record is removed). Forks of s are unaffected:
 * pages they share are copied before s writes them. */
rill_err_t rill_session_replace_text(rill_session_t *s, int64_t from_version, const char *text,
                                     size_t len);

/* Tokenizes and appends all held-back text and ends the current text (see above). No-op when
 * nothing is held and no text is in progress (otherwise an input call, logged). Errors: as
 * rill_session_append_text(); on error the text stays held. */
rill_err_t rill_session_flush_text(rill_session_t *s);

/* rill_session_append_text(text) then rill_session_flush_text() as one input call: one version,
 * one log record, so that a producer's "this text, final" is a version that
 * rill_session_replace_text() can name as a whole (a replace from it replaces the text too; from
 * the version of a separate flush it would replace only the flush). len 0: as
 * rill_session_flush_text(). Errors: as rill_session_append_text(); on error nothing changed. */
rill_err_t rill_session_append_text_end(rill_session_t *s, const char *text, size_t len);

/* Bytes of text held back now. */
size_t rill_session_pending_text(const rill_session_t *s);

/* Forks src: a new session sharing all of src's pages (one reference more each), with its
 * tokens (resident and queued), logits, window policy, counters, sequence number and held-back
 * text. O(pages); copies no K/V. The fork has no ingest log and a new identity (its own log would
 * not replay src's). Errors: RILL_EINVAL, RILL_ENOMEM (src unchanged). Caller owns *out; destroy
 * with rill_session_destroy(). */
rill_err_t rill_session_fork(rill_session_t *src, rill_session_t **out);

/* As rill_session_fork(), but the fork has no window: it may grow to n_ctx positions without
 * evicting (RILL_ERANGE beyond), so a question on a full window costs no eviction and no copy
 * of shared pages. For branches that are dropped afterwards (questions). */
rill_err_t rill_session_fork_unwindowed(rill_session_t *src, rill_session_t **out);

/* Keeps positions [0, pos) and drops the rest, releasing the pages past ceil(pos / P). When
 * pos < n_resident, held-back text is discarded (it continued the dropped part) and the next
 * text appended starts a new text. pos == n_resident is a no-op. The logits become those of
 * position pos - 1, recomputed on demand by rill_session_logits() without writing any page. Errors:
 * RILL_EINVAL (NULL, pos < 0 or pos > n_resident; unchanged), RILL_EIO (the log record could not
 * be written; unchanged). Allocates nothing. */
rill_err_t rill_session_rollback(rill_session_t *s, int32_t pos);

/* The logits (n_vocab floats) of the last resident position. After a rollback they are
 * recomputed here (one token through the forward pass, its K/V written to the pool's scratch
 * page, not to the session's). Borrowed: valid until the next call on s.
 * Errors: RILL_EINVAL (NULL), RILL_EAGAIN (the session holds no token), forward errors. */
rill_err_t rill_session_logits(rill_session_t *s, const float **out);

/* Called with each generated token id, in order; return false to stop after this token. */
typedef bool (*rill_session_token_fn)(void *user, int32_t token);

typedef struct rill_session_gen {
    int32_t n_max;                  /* most tokens to generate (>= 0) */
    rill_sampler_t *sampler;        /* borrowed; NULL: greedy (arg-max, lowest id on ties) */
    bool stop_at_eog;               /* stop after an end-of-generation token (needs the pool's
                                       tokenizer; ignored without one) */
    rill_session_token_fn on_token; /* optional streaming callback */
    void *user;                     /* passed to on_token */
    int32_t *out;                   /* optional: receives the generated ids (room for n_max) */
    int32_t n_out;                  /* set by the call: tokens generated */
} rill_session_gen_t;

/* Decodes on s: picks a token from the current logits (greedy or gen->sampler, which is told
 * of each picked token with rill_sampler_accept), reports it, appends it (so it becomes part
 * of the session, window included), and repeats until n_max tokens, the callback says stop, or
 * an end-of-generation token when asked. Allocates nothing. Errors: RILL_EINVAL, RILL_EAGAIN
 * (empty session), and those of rill_session_append() (gen->n_out then counts the tokens
 * appended before the error). */
rill_err_t rill_session_generate(rill_session_t *s, rill_session_gen_t *gen);

/* ---- deferred input and batched steps (for a scheduler) ------------------------------------ *
 * Taking input and evaluating it can be split: the feed calls check, log (acknowledge) and
 * tokenize input at once and queue the tokens on the session; rill_session_step() then
 * evaluates queued tokens of many sessions of one pool in one forward pass. The synchronous
 * calls above are "feed, then drain" (queued tokens of earlier feeds first, in order). A fork
 * copies the queue; rollback may cut into it; rill_session_snapshot() refuses a session with a
 * queue (RILL_EAGAIN). The ingest log holds fed input like appended input, so a restore
 * evaluates it. */

/* As rill_session_append() / _append_text() / _flush_text() / _append_text_end() /
 * _replace_text(), but the tokens
 * are queued, not evaluated, and the cell budget is not checked (the step is). A fed replace
 * rolls back at once (resident tokens past the common prefix are dropped, and queued ones) and
 * queues the new tokens after the common prefix. Errors: RILL_EINVAL (an id outside the
 * vocabulary; replace: as rill_session_replace_text), RILL_ERANGE (no window and resident +
 * queued + n > n_ctx; replace: as rill_session_replace_text), RILL_EUNSUPPORTED (text without a
 * tokenizer), RILL_ENOMEM, RILL_EIO (log); on error nothing is queued, rolled back or logged. */
rill_err_t rill_session_feed(rill_session_t *s, const int32_t *tokens, int32_t n);
rill_err_t rill_session_feed_text(rill_session_t *s, const char *text, size_t len);
rill_err_t rill_session_feed_flush(rill_session_t *s);
rill_err_t rill_session_feed_text_end(rill_session_t *s, const char *text, size_t len);
rill_err_t rill_session_feed_replace_text(rill_session_t *s, int64_t from_version, const char *text,
                                          size_t len);

/* Queued tokens of s. */
int32_t rill_session_pending(const rill_session_t *s);

/* Most queued tokens one step may evaluate for s: min(queued, max_batch, the room left before
 * the window (or the context) is full; when it is full, the room the next eviction makes). */
int32_t rill_session_step_room(const rill_session_t *s);

/* Most step items that may ask for logits. */
#define RILL_SESSION_STEP_MAX_LOGITS 32

typedef struct rill_session_step {
    rill_session_t *s; /* a session of the pool, at most once per step */
    int32_t n;         /* queued tokens to evaluate: 1..rill_session_step_room(s) */
    bool logits;       /* keep the logits of the last one (rill_session_logits) */
} rill_session_step_t;

/* Evaluates items[i].n queued tokens of each items[i].s in one forward pass (evicting window
 * pages first where a window is full), as if each were appended alone: the tokens' positions,
 * pages and copy-on-write are each session's own. Logits of a token depend on the batch it was
 * computed in (rill_backend.h, Numerics), so they may differ from a lone append in the last
 * bits. Errors: RILL_EINVAL (NULL, an item out of range, a session twice or of another pool),
 * RILL_ERANGE (more than max_batch tokens or RILL_SESSION_STEP_MAX_LOGITS logits rows),
 * RILL_EFULL (the free pages cannot cover every item's worst case: nothing changed), forward
 * errors, RILL_ECANCELED among them (rill_forward_set_cancel): the tokens stay queued, the pages
 * the step took are returned (copy-on-write copies made for it stay, holding the same rows),
 * window evictions done first stay done; logits invalid. The detail is in
 * rill_last_error(). Allocates nothing. */
rill_err_t rill_session_step(rill_session_pool_t *p, rill_session_step_t *items, int32_t n_items);

/* Evaluates every queued token of s (steps of rill_session_step_room()). Errors: as
 * rill_session_step(). */
rill_err_t rill_session_drain(rill_session_t *s);

/* Makes branch's state s's own input: branch must be a rill_session_fork() of s taken when s
 * was at its current sequence number (s unchanged since), not rolled back below the fork, with
 * nothing queued or held back on either. The tokens branch added (its stream beyond s's,
 * evictions included) are logged on s as one record (an input call), then s holds branch's
 * pages (shared, reference-counted: no copy), tokens, counters and logits. branch is unchanged
 * (destroy it). Used to commit a reply computed on a branch (turns, speculation). Errors:
 * RILL_EINVAL (NULL, not such a fork), RILL_EUNSUPPORTED (the other conditions), RILL_EIO;
 * on error s is unchanged. */
rill_err_t rill_session_adopt(rill_session_t *s, rill_session_t *branch);

/* Answers a question without changing s: forks s, appends question[0, n_q) to the fork,
 * decodes with gen on the fork (see rill_session_generate), and destroys the fork. Held-back
 * text of s is not part of the question's context (flush first to include it). Afterwards s is
 * bit-identical to before (pages, K/V bytes, positions, logits). Errors: as
 * rill_session_fork(), rill_session_append() (RILL_EFULL when the pool lacks the fork's pages)
 * and rill_session_generate(); s is unchanged in every case. */
rill_err_t rill_session_query(rill_session_t *s, const int32_t *question, int32_t n_q,
                              rill_session_gen_t *gen);

typedef struct rill_session_stats {
    int64_t n_seen;       /* length of the session's token stream: tokens appended (prompt and
                             generated included) minus those rolled back; evicted ones count */
    int32_t n_resident;   /* tokens in the KV cache now */
    int32_t n_sink;       /* resident sink tokens: min(S', n_resident) */
    int64_t kept_from;    /* index in the stream of the first resident non-sink token
                             (n_sink + n_evicted) */
    int32_t pos_next;     /* position the next token gets (== n_resident) */
    int32_t pages;        /* pages in the page table */
    int32_t pages_shared; /* of those, pages with other references (forks) */
    int64_t bytes;        /* KV bytes of those pages, all layers (shared pages counted whole) */
    int64_t n_evicted;    /* tokens evicted by the window so far */
    int32_t n_sink_cfg;   /* S' (sinks rounded up to pages) */
    int32_t window_cfg;   /* W' (window rounded up to pages; 0: none) */
    int32_t n_pending;    /* tokens fed but not evaluated yet (rill_session_feed) */
} rill_session_stats_t;

/* Fills *out. Does not block or allocate. */
void rill_session_stats(const rill_session_t *s, rill_session_stats_t *out);

/* The resident token ids by slot (n_resident of them; *n receives the count). Borrowed; valid
 * until the next call that changes s. */
const int32_t *rill_session_tokens(const rill_session_t *s, int32_t *n);

/* The page table (*n entries, == ceil(n_resident / P)). Borrowed as rill_session_tokens(). */
const int32_t *rill_session_pages(const rill_session_t *s, int32_t *n);

/* The pool s belongs to. */
rill_session_pool_t *rill_session_pool(rill_session_t *s);

/* ---- durability ---------------------------------------------------------------------------- */

/* When an ingest log is fsynced (fdatasync). Whatever the policy, a record is written (in the
 * operating system's page cache) before its call returns, so killing the process loses no
 * acknowledged input; the policy decides what a power loss or kernel crash may lose. */
typedef enum rill_session_fsync {
    RILL_SESSION_FSYNC_EVERYSEC = 0, /* default: fsync on an input call when at least 1 s has
                                        passed since the last fsync, and on sync / close; a
                                        machine crash may lose the last second of input */
    RILL_SESSION_FSYNC_ALWAYS = 1,   /* every record before its call returns: one fsync per
                                        input call; nothing acknowledged is ever lost */
    RILL_SESSION_FSYNC_NEVER = 2     /* never (the operating system writes back when it likes) */
} rill_session_fsync_t;

/* Starts an ingest log for s in a new file at path (it must not exist): writes the header (the
 * model fingerprint, s's window policy and identity, the sequence number of the first record =
 * rill_session_seq(s) + 1), fsyncs the file and its directory, and takes an exclusive lock
 * (flock) on it for as long as it is open. From then on every input call on s writes its record
 * first (see "Durability" at the top); a call that cannot write it fails with RILL_EIO and
 * changes nothing. A log already open on s is synced and closed once the new one is open (on
 * error it stays). To be able to restore from the log alone, open it before the first input
 * (create the session without a prompt, open the log, then append the prompt); otherwise take a
 * snapshot after opening it. Errors: RILL_EINVAL (NULL, unknown policy), RILL_EEXIST (path
 * exists), RILL_ENOTFOUND (no such directory), RILL_EPERM, RILL_EIO, RILL_ENOMEM; on error s is
 * unchanged and no file is left at path. Blocks on the file system. */
rill_err_t rill_session_open_log(rill_session_t *s, const char *path, rill_session_fsync_t policy);

/* Fsyncs s's log now, whatever its policy. RILL_OK without a log. Errors: RILL_EIO; the log is
 * then unusable (input calls fail with RILL_EIO) until it is closed or replaced. Blocks. */
rill_err_t rill_session_sync_log(rill_session_t *s);

/* Closes s's log, fsynced first unless its policy is NEVER; later input is not logged (a log
 * that is not continued can still be restored from). rill_session_destroy() does the same.
 * RILL_OK without a log. Errors: RILL_EIO from the fsync (the log is closed anyway). */
rill_err_t rill_session_close_log(rill_session_t *s);

/* True when s has an ingest log open. */
bool rill_session_has_log(const rill_session_t *s);

/* Sequence number of the last input call applied to s (0: none yet). It counts with or without
 * a log; a fork inherits it, a snapshot records it, restore continues it. */
int64_t rill_session_seq(const rill_session_t *s);

/* The newest version whose inputs all lie within the first len tokens of s's stream (stream
 * indices as rill_session_stats' n_seen: evicted tokens count): what a fork rolled back to len
 * has seen. len at or past the stream's end (queued tokens included): rill_session_seq(s). -1
 * when the inputs around len are older than the replace window remembers
 * (RILL_SESSION_REPLACE_INPUTS), or for NULL s or len < 0. Text held back is part of the
 * version of the input that brought it, as for rill_session_seq(). Pure. */
int64_t rill_session_version_at(const rill_session_t *s, int64_t len);

/* Writes a snapshot of s to path, atomically (path.tmp.PID, fsync, rename over path, fsync of
 * the directory): the model fingerprint, s's window policy, counters, identity and sequence
 * number, resident tokens, held-back text, logits (when valid), and every layer's K and V of
 * every page in s's table, each part with a CRC-32C. s's log, if any, is fsynced first so that
 * it holds every record the snapshot covers. s is not changed. Shared pages are written whole;
 * a restore gives the session pages of its own. Size: pages * rill_session_pool_page_bytes()
 * plus 4 * (n_resident + n_vocab) plus the held-back text and 200 bytes, plus 32 bytes per
 * remembered input and the text held back before them.
 * Errors: RILL_EINVAL (NULL), RILL_ENOMEM, RILL_ENOTFOUND (no such directory), RILL_EPERM,
 * RILL_EIO, backend errors of rill_backend_copy_out; on error the file at path (if any) is
 * unchanged and no temporary file is left, except when only the final fsync of the directory
 * fails (RILL_EIO): the new snapshot is then in place but may not survive a power loss. Allocates
 * one page of host memory for the call. Blocks on copies and the file system. */
rill_err_t rill_session_snapshot(rill_session_t *s, const char *path);

/* As rill_session_snapshot(), the same file, written the same way (temporary file, rename) but
 * with no fsync: not of s's log first, not of the file, not of its directory. So the file is
 * whole or absent after a crash of the process, but a machine crash may leave it empty or old.
 * For snapshots that need not outlive the process (a sleeping session's, which are deleted at
 * start-up: rill_scheduler.h "Sleeping sessions"), where three fsyncs would cost more than the
 * write. Errors: as rill_session_snapshot(), less the fsync ones. Blocks on copies and writes. */
rill_err_t rill_session_snapshot_volatile(rill_session_t *s, const char *path);

/* Rebuilds a session in pool p. With snapshot_path: loads the snapshot into fresh pages of p
 * (none shared). With log_path: then replays the log records after the session's sequence
 * number through the same apply as the calls that wrote them (replace records included),
 * drops a torn last record (warning logged, and the file cut after the last whole record), and
 * keeps the log open on the new session with `policy`, so that it continues the same log;
 * without snapshot_path the session is built from the log alone (window policy from its header;
 * its first record must be record 1). When the log ends before the snapshot's sequence number
 * (it lost records the snapshot holds, e.g. with FSYNC_NEVER and a power loss), it is replaced,
 * atomically, by an empty log that continues after the snapshot. Either path may be NULL, not
 * both.
 * The result is the saved session: same tokens, positions, counters, held-back text, remembered
 * inputs, logits (bit for bit) and K/V bytes (a version-1 snapshot, written before replace
 * existed, restores with no remembered input); replayed records recompute what they computed
 * before (bit for bit with the same backend and forward max_batch). Its identity is the saved
 * one; its log, if any, is locked as by rill_session_open_log().
 * Errors (on every one: *out = NULL, nothing left allocated, p as before, the files unchanged
 * except that a torn log tail may have been cut, and the detail in rill_last_error(err)):
 *   RILL_EINVAL (NULL p or out, both paths NULL, unknown policy; a log of another session, with
 *   another window policy, or missing records between the snapshot and its first record),
 *   RILL_ENOTFOUND (a file does not exist), RILL_EBUSY (the log is open elsewhere), RILL_EIO,
 *   RILL_EFORMAT (not a rill snapshot or log, truncated snapshot or log header, inconsistent
 *   sizes), RILL_ECORRUPT (a checksum mismatch anywhere in the snapshot, or in the log before
 *   its last record; the message gives the byte offset), RILL_EUNSUPPORTED (a format version
 *   this build does not read; written for another model, KV cache types (the message names
 *   both pools' K and V types) or page size), RILL_ERANGE (the session does not fit p's
 *   context), RILL_EFULL (p lacks the pages the snapshot or the replay needs), RILL_ENOMEM, and
 *   the errors of replayed calls. Caller owns *out; destroy with rill_session_destroy().
 *   Blocks (reads, copies, forward passes of the replay). */
rill_err_t rill_session_restore(rill_session_pool_t *p, const char *snapshot_path,
                                const char *log_path, rill_session_fsync_t policy,
                                rill_session_t **out);

/* ---- records as bytes ------------------------------------------------------------------------
 * One input record framed exactly as the ingest log frames it (docs/architecture.md, "Ingest
 * log, version 1"), for carriers other than the log file (cluster/'s JetStream subjects): a
 * RILL_SESSION_RECORD_HEADER-byte header (u32 CRC-32C of everything after it, u32 payload
 * length, u32 type, u32 zero, u64 sequence number: the version the input made), then the
 * payload. Little-endian. Pure functions; thread-safe. */

#define RILL_SESSION_RECORD_HEADER 24

/* Record types and their payloads (the log's). */
typedef enum rill_session_record_type {
    RILL_SESSION_REC_TOKENS = 1,   /* int32 token ids */
    RILL_SESSION_REC_TEXT = 2,     /* the text bytes as given */
    RILL_SESSION_REC_FLUSH = 3,    /* empty */
    RILL_SESSION_REC_ROLLBACK = 4, /* int32 position */
    RILL_SESSION_REC_REPLACE = 5,  /* u64 from_version, then the text bytes */
    RILL_SESSION_REC_TEXT_END = 6  /* the text bytes, then the text ends (text + flush) */
} rill_session_record_type_t;

/* A parsed record. payload is borrowed from the parsed buffer. */
typedef struct rill_session_record {
    uint32_t type; /* rill_session_record_type_t */
    uint64_t seq;  /* the version this input made */
    const unsigned char *payload;
    uint32_t len; /* bytes of payload */
} rill_session_record_t;

/* Writes into hdr the header of record (type, seq) whose payload is payload[0, len); the record
 * is hdr followed by those bytes. Errors: RILL_EINVAL (NULL hdr, NULL payload with len > 0, a
 * type not in rill_session_record_type_t), RILL_ERANGE (len above the log's largest record,
 * 1 GiB); hdr is then unchanged. */
rill_err_t rill_session_record_header(unsigned char hdr[RILL_SESSION_RECORD_HEADER], uint32_t type,
                                      uint64_t seq, const void *payload, size_t len);

/* Parses one whole record buf[0, n) into *out (payload pointing into buf). Checks the frame only:
 * what a payload must hold is checked when the record is applied. Errors (*out unchanged):
 * RILL_EINVAL (NULL), RILL_EFORMAT (shorter than the header, a length that is not n minus the
 * header, a non-zero reserved field), RILL_ECORRUPT (checksum), RILL_EUNSUPPORTED (a type this
 * build does not know). */
rill_err_t rill_session_record_parse(const void *buf, size_t n, rill_session_record_t *out);

#ifdef __cplusplus
}
#endif
#endif /* RILL_SESSION_H */
