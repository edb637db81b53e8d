/*
 * rill_transcript.h - a streaming transcript that revises itself: local agreement over the
 * hypotheses a recognizer gives for a rolling audio window (DESIGN.md section 7, issue 17
 * item 3).
 *
 * A streaming recognizer decodes its audio window again every second or so; each decode is a
 * hypothesis for the whole window. Early words of a window rarely change between decodes; the
 * last ones often do. A rill_transcript_t keeps what is settled apart from what is not:
 *   committed   words two consecutive hypotheses agreed on (LocalAgreement-2: the longest
 *               common prefix of the previous and the new hypothesis, past what is already
 *               committed). Never taken back.
 *   tentative   the rest of the newest hypothesis. Replaced by every update; consumers get it
 *               as replaceable text (rill_sched_ingest_replace), so they roll back exactly when
 *               the recognizer changes its mind.
 * Agreement is on words (runs of non-space bytes, compared byte for byte), so a word is never
 * committed half.
 *
 * The window. Hypotheses come as segments with times in ms relative to the window's start (the
 * recognizer's timestamps; one segment of unknown end when it has none). A word's time is
 * interpolated within its segment by its byte offset. The hypothesis of a window re-transcribes
 * words of it that are already committed: the update skips them (the words ending before the
 * last committed word's end, less a margin, then any repeat of up to 5 of the last committed
 * words at its start). Once the committed words cover a segment of the hypothesis wholly, the
 * audio before that segment's end is not needed any more: the update says so
 * (rill_transcript_update_t.trim_ms, absolute) and the caller drops that audio and calls
 * rill_transcript_trim() with where its next window starts. A window longer than max_window_ms
 * is trimmed at its last committed word even inside a segment; when nothing was committed in it
 * the tentative words are committed first (the window cannot grow without bound: Whisper sees at
 * most 30 s).
 *
 * The decoder prompt: rill_transcript_prompt() gives the tail of the committed text, cut at a
 * word boundary; rill_transcript_prompt_before() the tail of the committed text that lies
 * before the window (what the recognizer passes as its previous-text prompt: committed words
 * whose audio is still in the window stay out of it).
 *
 * Memory: the committed text grows with the stream; rill_transcript_drop_committed() lets a
 * caller that has handed committed text on (to a session, a file) drop all but the tail the
 * prompt needs, so hours of speech stay bounded. Buffers grow geometrically; an update allocates
 * only when a buffer must grow (never per word).
 *
 * Errors: RILL_EINVAL (NULL, bad params, segments with t1 < t0 or negative times),
 * RILL_ENOMEM; on error the transcript is unchanged.
 *
 * Thread safety: a transcript belongs to one thread at a time.
 */
#ifndef RILL_TRANSCRIPT_H
#define RILL_TRANSCRIPT_H

#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_transcript rill_transcript_t;

typedef struct rill_transcript_params {
    int64_t max_window_ms; /* longest window before a forced trim; default 24000 (Whisper's
                              30 s less room for the next second of audio) */
    int64_t margin_ms;     /* words ending this close before the last committed word's end are
                              taken for re-transcriptions of it; default 200 */
    size_t prompt_bytes;   /* most bytes rill_transcript_prompt() gives; default 600 (about
                              150 tokens: a third of Whisper's 448-token context) */
} rill_transcript_params_t;

rill_transcript_params_t rill_transcript_default_params(void);

/* One segment of a hypothesis: text[0, len) (UTF-8, borrowed for the call) spoken from t0_ms to
 * t1_ms after the window's start; t1_ms < 0: the end is unknown (the window's end is used). */
typedef struct rill_transcript_seg {
    const char *text;
    size_t len;
    int64_t t0_ms, t1_ms;
} rill_transcript_seg_t;

/* What one update changed. Pointers are borrowed until the next call on the transcript. */
typedef struct rill_transcript_update {
    const char *committed; /* the words committed by this update, joined by single spaces and
                              led by one when something was committed before ("" when none) */
    size_t committed_len;
    const char *tentative; /* the whole tentative tail now ("" when none) */
    size_t tentative_len;
    int64_t trim_ms; /* absolute ms before which audio is no longer needed; -1: keep it all */
    int32_t n_committed, n_tentative; /* words */
} rill_transcript_update_t;

/* Creates an empty transcript whose first window starts at 0 ms. params NULL: the defaults.
 * Errors: RILL_EINVAL (NULL out, max_window_ms < 1000, margin_ms < 0, prompt_bytes < 16),
 * RILL_ENOMEM. Caller owns *out; destroy with rill_transcript_destroy(). */
rill_err_t rill_transcript_new(const rill_transcript_params_t *params, rill_transcript_t **out);

/* Frees it and sets *tp = NULL. NULL-safe. */
void rill_transcript_destroy(rill_transcript_t **tp);

/* A new hypothesis for the window [window_start, window_start + window_ms) (see the top):
 * commits what it agrees on with the previous hypothesis, replaces the tentative tail, and
 * reports the change in *out (optional). segs[0, n_segs) in time order; n_segs 0 is a window
 * with no speech (everything tentative is dropped). Errors: see the top. */
rill_err_t rill_transcript_update(rill_transcript_t *t, const rill_transcript_seg_t *segs,
                                  int32_t n_segs, int64_t window_ms, rill_transcript_update_t *out);

/* The caller dropped the audio before start_ms (absolute, >= the current window's start): the
 * next hypothesis is for a window starting there. The previous hypothesis stays (its words' times
 * are kept absolute, and they lie after the committed words), so the next update can commit.
 * Errors: RILL_EINVAL (before the current window's start). */
rill_err_t rill_transcript_trim(rill_transcript_t *t, int64_t start_ms);

/* End of the stream: commits the tentative tail. *out as for an update (trim_ms -1). */
rill_err_t rill_transcript_finish(rill_transcript_t *t, rill_transcript_update_t *out);

/* The committed text (words joined by single spaces) and the current tentative tail; *len
 * (optional) gets the length. Borrowed until the next call that changes the transcript. Never
 * NULL for a valid t. */
const char *rill_transcript_committed(const rill_transcript_t *t, size_t *len);
const char *rill_transcript_tentative(const rill_transcript_t *t, size_t *len);

/* Bytes of committed text ever (dropped ones included), words committed ever, and where the
 * current window starts (ms). */
int64_t rill_transcript_committed_total(const rill_transcript_t *t);
int64_t rill_transcript_n_words(const rill_transcript_t *t);
int64_t rill_transcript_window_start(const rill_transcript_t *t);

/* The previous-text prompt: the last at most prompt_bytes of the committed text, starting at a
 * word. Borrowed like rill_transcript_committed(). */
const char *rill_transcript_prompt(const rill_transcript_t *t, size_t *len);

/* The prompt a recognizer should give when the window holds committed words (after a trim at a
 * segment's end, the words committed from later segments are still in the window): the last at
 * most prompt_bytes of the committed text that lies before the window, i.e. up to the last
 * committed word that ends at or before the window's start (rill_transcript_trim()), starting at
 * a word. Empty before the first trim. Borrowed like rill_transcript_committed(). */
const char *rill_transcript_prompt_before(const rill_transcript_t *t, size_t *len);

/* Drops the committed text except what the prompts need (rill_transcript_committed() then
 * returns that tail only; totals keep counting). */
void rill_transcript_drop_committed(rill_transcript_t *t);

#ifdef __cplusplus
}
#endif

#endif
