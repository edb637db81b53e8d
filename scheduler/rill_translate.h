/*
 * rill_translate.h - simultaneous translation of a talk on one scheduler session, InfiniSST's
 * shape (DESIGN.md section 7, issue 22 item 2; docs/translation.md).
 *
 * A rill_translate_t turns a stream of source words into target words as the words arrive, on
 * one persistent session of a rill_sched_t, so a talk of any length costs each word once:
 *
 *   [instruction]                  the system message, the session's attention sinks (never
 *                                  evicted)
 *   user: segment 1 | assistant: translation 1 | user: segment 2 | ...
 *                                  alternating turns in the session's window: a segment is a
 *                                  source sentence (rill_translate_end_sentence), its
 *                                  translation is the assistant's reply
 *
 * Source words are ingested into the open user turn as they arrive (one text input each,
 * flushed, so the session evaluates them at INGEST class while the talk goes on). The
 * simultaneous policy decides when to write: it asks the session (rill_sched_ask, on a fork: the
 * session is not changed) for a draft of the current segment's translation, after the target
 * words already emitted, and emits words it will not take back. When the segment ends, one
 * rill_sched_turn() closes the user turn, feeds the emitted words as the start of the reply and
 * decodes the rest of it; the session adopts input and reply, so the next segment continues
 * after the translation actually emitted. Nothing of the past is ever re-encoded; a draft
 * re-encodes only the few template tokens and the current segment's emitted words.
 *
 * Memory. The session has a window (params.window recent tokens beside the sinks): when it is
 * full, sessions/ evicts whole pages from the front of the recent part and re-bases the rest
 * (rill_session.h, "Window policy"). Eviction is at page boundaries, not turn boundaries: the
 * scheduler's sessions offer no eviction at a chosen token, and a page-rounded cut inside an old
 * turn costs nothing measurable (docs/translation.md). The instruction is the sinks: S = its
 * tokens, rounded up to pages by sessions/ (so up to P - 1 tokens of the first segment are kept
 * with it). So a talk runs in S' + W' cells, however long. The object itself holds the current
 * segment's words and text (bounded by params.max_segment_words) and nothing of earlier ones.
 *
 * Policies (rill_translate_policy_t), over source words read in the current segment (n) and
 * target words emitted for it (e):
 *   WAIT_K           when n - k + 1 > e, a draft is decoded until it has n - k + 1 - e new
 *                    complete words (a word is complete when whitespace follows it or the draft
 *                    ended), and those are emitted.
 *   LOCAL_AGREEMENT  every la_chunk new words a draft of the whole segment is decoded; the words
 *                    the new draft and the previous one agree on (their longest common prefix,
 *                    word by word, byte for byte) beyond e are emitted.
 *   SENTENCE         nothing until the segment ends: whole-sentence translation in the same
 *                    session (the offline reference point).
 * Every policy emits the rest of the segment's translation when it ends. Emitted words are never
 * taken back: drafts and the closing turn continue after them.
 *
 * Source revisions (rill_translate_replace). The source is replaceable text, as a streaming
 * recognizer delivers it: the words of the current segment from a word on may be replaced. The
 * session is rolled back exactly (rill_sched_ingest_replace from the input that brought that
 * word: the longest common token prefix is kept, the rest re-fed), so its tokens are those of a
 * session that got the revised words from the start; emitted words stay emitted. Words of a
 * closed segment cannot be revised (their translation is part of the session and of the output).
 *
 * Tokens. Words are fed with a leading space (none for the first of a segment) and flushed one by
 * one; for byte-level BPE vocabularies (every pre-tokenizer rill supports splits before " word")
 * that is the tokenization of the whole line. SentencePiece vocabularies get each word without
 * the space (their flush starts a new text with the space prefix); revisions need byte-level BPE
 * (RILL_EUNSUPPORTED otherwise).
 *
 * Time. Every emission carries the engine's busy time since the object was created
 * (rill_sched_stats busy_ns, so it counts every session's work on the engine: exact when the
 * talk is the engine's only work, as in `rill translate`), for computation-aware latency.
 *
 * Thread safety: one thread at a time (except rill_translate_interrupt, any thread). Every call
 * except the getters and rill_translate_interrupt blocks on the scheduler
 * (engine passes, forward passes of drafts and turns); none may be made from a scheduler
 * callback. Callbacks (on_emit, on_draft) run on the calling thread, inside the call that
 * produced them.
 */
#ifndef RILL_TRANSLATE_H
#define RILL_TRANSLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_chat.h"
#include "rill_err.h"
#include "rill_scheduler.h"
#include "rill_tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_translate rill_translate_t;

typedef enum rill_translate_policy {
    RILL_TRANSLATE_WAIT_K = 0,
    RILL_TRANSLATE_LOCAL_AGREEMENT = 1,
    RILL_TRANSLATE_SENTENCE = 2
} rill_translate_policy_t;

/* One emission: target words the policy will not take back. */
typedef struct rill_translate_emit {
    const char *text;   /* the new words, separated by one space, no space at either end
                           (borrowed for the callback) */
    size_t len;         /* bytes of text (>= 1) */
    int32_t n_words;    /* words in text (>= 1) */
    int64_t src_words;  /* source words read in the talk when they were emitted (closed segments
                           and the current one's words now) */
    int64_t segment;    /* index of the segment they translate (0: the first) */
    int64_t seg_start;  /* source words before that segment (src_words - seg_start: read of it) */
    bool segment_end;   /* emitted when the segment ended (its last emission) */
    int64_t compute_ns; /* engine busy time since rill_translate_new (see "Time") */
} rill_translate_emit_t;

typedef void (*rill_translate_emit_fn)(void *user, const rill_translate_emit_t *e);

/* A draft the policy decoded for segment `segment`: its hypothesis (emitted words, then the
 * draft's continuation; a last word the draft may have cut is left out; borrowed for the call),
 * with the source words read of the segment. For tests and evaluation. */
typedef void (*rill_translate_draft_fn)(void *user, int64_t segment, const char *text, size_t len,
                                        int32_t seg_words);

typedef struct rill_translate_params {
    const rill_tokenizer_t *tok; /* the model's tokenizer (borrowed; must outlive the object) */
    const rill_chat_t *chat;     /* its chat template (borrowed; must outlive the object) */
    int32_t model;               /* the scheduler's model index; default 0 */
    const char *instruction;     /* the system message (copied); NULL: RILL_TRANSLATE_INSTRUCTION */
    rill_translate_policy_t policy;   /* default RILL_TRANSLATE_LOCAL_AGREEMENT */
    int32_t k;                        /* wait-k's k (>= 1); default 3 */
    int32_t la_chunk;                 /* local agreement: new source words between drafts (>= 1);
                                         default 4 */
    int32_t window;                   /* recent tokens the session keeps beside the sinks (at
                                         least max_reply_tokens + 64, so that a turn fits it;
                                         rounded up to pages; sinks + window + room for a draft
                                         must fit the pool's n_ctx); default 1024 */
    int32_t evict_pages;              /* as rill_session_params_t; default 0 (sessions/' default) */
    int32_t max_segment_words;        /* most source words of one segment (1..1024): a word beyond
                                         closes the segment first; default 96 */
    int32_t max_reply_tokens;         /* most tokens of a segment's translation, emitted words
                                         (as re-tokenized) and the closing reply together
                                         (1..4096); default 256 */
    rill_translate_emit_fn on_emit;   /* optional */
    rill_translate_draft_fn on_draft; /* optional */
    void *user;                       /* for both callbacks */
} rill_translate_params_t;

/* The default instruction: English into Spanish, the translation only. */
#define RILL_TRANSLATE_INSTRUCTION                                                            \
    "You are a simultaneous interpreter. Translate each English message into Spanish. Reply " \
    "with the Spanish translation only."

/* Defaults as documented per field (tok and chat NULL: the caller must set them). */
rill_translate_params_t rill_translate_default_params(void);

/* Sets p->policy (and p->k) from a name: "wait-k" (wait-k with p->k), "wait-N" (N in
 * 1..1000: wait-k with k = N), "local-agreement" (alias "la"), "sentence". Errors: RILL_EINVAL
 * (NULL, unknown name; *p unchanged). */
rill_err_t rill_translate_policy_parse(rill_translate_params_t *p, const char *name);

/* "wait-k", "local-agreement", "sentence"; NULL out of range. Static strings. */
const char *rill_translate_policy_name(rill_translate_policy_t policy);

/* Creates the session on sch (rill_sched_session_create: instruction as system prompt and
 * sinks, params->window) and opens the first user turn. Errors (nothing left): RILL_EINVAL
 * (NULL, a field out of range, no tok or chat), RILL_ENOMEM, those of the session's creation
 * (RILL_EFULL: the window does not fit the pool's budget) and of rill_sched_ingest. Caller owns
 * *out; destroy with rill_translate_destroy() before the scheduler. Blocks. */
rill_err_t rill_translate_new(rill_sched_t *sch, const rill_translate_params_t *params,
                              rill_translate_t **out);

/* Closes the session (rill_sched_session_close), frees t and sets *tp = NULL. Words not yet
 * translated are dropped (call rill_translate_end_sentence and step first). NULL-safe. Blocks. */
void rill_translate_destroy(rill_translate_t **tp);

/* Reads one source word of the current segment: word[0, len), UTF-8 without whitespace. It is
 * fed to the session at once. When the segment already holds max_segment_words words, the
 * segment is closed first (as rill_translate_end_sentence then rill_translate_step: its
 * emission comes out of this call). Errors (nothing read): RILL_EINVAL (NULL, len 0, whitespace
 * in it), RILL_ENOMEM, those of rill_sched_ingest_text and of closing the segment. Blocks. */
rill_err_t rill_translate_word(rill_translate_t *t, const char *word, size_t len);

/* Replaces the current segment's source words from talk-wide word index from_word on (words
 * before the segment: rill_translate_emit_t.seg_start) by the words of text[0, len) (separated by
 * whitespace; none: the words are dropped), rolling the session back exactly (see "Source
 * revisions"). from_word == the words read appends. Errors (nothing changed): RILL_EINVAL (NULL,
 * text NULL with len > 0, from_word beyond the words read), RILL_ERANGE (from_word in a closed
 * segment; the session no longer remembers that input), RILL_EFULL (more than max_segment_words
 * words), RILL_EUNSUPPORTED (a SentencePiece vocabulary), RILL_ENOMEM, those of
 * rill_sched_ingest_replace. The replace is followed by a flush (its own input) so that drafts
 * see every word; should only that flush fail, the words are replaced and its error returned.
 * Blocks. */
rill_err_t rill_translate_replace(rill_translate_t *t, int64_t from_word, const char *text,
                                  size_t len);

/* Ends the current segment (a sentence): the next rill_translate_step() closes its turn. No-op
 * on a segment without words. Never fails on a valid t (RILL_EINVAL for NULL). */
rill_err_t rill_translate_end_sentence(rill_translate_t *t);

/* Reads newly committed transcript text of a streaming recognizer (the delta each update
 * commits, rill_asr_update_t.committed or rill_sched_asr_update_t.committed: words separated by
 * whitespace, a leading space allowed): each word is read as by rill_translate_word, and the
 * policy is stepped until it waits (as a caller of rill_translate_step would) after each run of
 * words up to a sentence end and after the last word (the words of one delta were committed
 * together: a draft between them would be outdated by the next), so only committed words drive
 * the policy; a recognizer's tentative tail is not given here. A word that
 * ends a sentence (its last character, after any closing quotes or brackets, is '.', '?', '!',
 * or one of U+2026 "...", U+3002, U+FF1F, U+FF01) ends the segment and its turn is closed before
 * the next word (no draft is made on that word: the closing turn writes the rest); so does pause (a
 * long pause or the end of the utterance, as the caller judges: after the words, the open segment,
 * if it has words, is ended and closed). text may be empty (len 0) to give only a pause.
 * Abbreviations ("Mr.") end a segment too: the recognizer's punctuation is taken as it is. *used
 * (optional) gets the bytes of text consumed: len on success; on error up to the end of the last
 * word read (words read stay read; a step that failed is retried by the next call or
 * rill_translate_step, and an ended segment stays ended). Errors: RILL_EINVAL (NULL t, text NULL
 * with len > 0; nothing read), those of rill_translate_word and rill_translate_step. Blocks. */
rill_err_t rill_translate_feed_text(rill_translate_t *t, const char *text, size_t len, bool pause,
                                    size_t *used);

/* Interrupts the translation from any thread: the request in flight (a draft or a turn) is
 * cancelled at the engine's next step, and every later call on t that would put work to the
 * engine returns RILL_ECANCELED at once (rill_translate_destroy still closes the session). For
 * a daemon's worker that must stop promptly. Idempotent; NULL-safe. Thread-safe: the one call
 * on t that may be made while another thread is inside a call on it. Never blocks. */
void rill_translate_interrupt(rill_translate_t *t);

/* Does the next piece of work the policy wants: a draft (and its emission) or the turn that
 * closes an ended segment (and the emission of the rest). Returns RILL_OK when it did some,
 * RILL_EAGAIN when the policy waits for more source. Call it after every word or replace until
 * it returns RILL_EAGAIN. Errors: those of the scheduler's requests (RILL_EFULL: the pool could
 * not hold the draft; RILL_ECANCELED: the scheduler was destroyed), RILL_ENOMEM; a failed draft
 * emits nothing and may be retried; a failed turn leaves the segment ended and unclosed (the
 * next step retries it); when only feeding the turn's end and the next user header fails, the
 * segment is closed and that feed is retried by the next call (step, word or replace). Blocks. */
rill_err_t rill_translate_step(rill_translate_t *t);

typedef struct rill_translate_stats {
    int64_t src_words;    /* source words read (closed segments and the current one) */
    int64_t segments;     /* segments closed */
    int64_t emitted;      /* target words emitted */
    int64_t drafts;       /* drafts decoded */
    int64_t draft_tokens; /* tokens those drafts decoded */
    int64_t revisions;    /* rill_translate_replace calls taken */
    int64_t compute_ns;   /* engine busy time since creation, as of the last request */
} rill_translate_stats_t;

/* Fills *out. Never blocks. */
void rill_translate_stats(const rill_translate_t *t, rill_translate_stats_t *out);

/* The session's id on the scheduler (for rill_sched_session_info / _tokens). Never blocks. */
rill_sched_sid_t rill_translate_sid(const rill_translate_t *t);

#ifdef __cplusplus
}
#endif
#endif /* RILL_TRANSLATE_H */
