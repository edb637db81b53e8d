/*
 * rill_scheduler.h - many sessions on one engine: the step loop (DESIGN.md section 5).
 *
 * A rill_sched_t runs one engine thread over one or more models, each a session pool (and through
 * it a forward pass and backend; a speech recognizer and a language model, say). Every step the
 * engine builds, per model, one batch from the work of that model's sessions - answer tokens
 * being decoded, questions being prefilled, ingested data, standing-query refreshes,
 * speculative replies - and evaluates it with one rill_session_step() (one forward pass). Other
 * threads talk to it through the calls below; the engine alone touches sessions.
 *
 * Work classes, highest first (rill_sched_class_t). A step takes the highest classes first;
 * lower ones only fill the token budget the higher leave, so a lower class is preempted at the
 * next step boundary whenever higher work arrives:
 *   DECODE    one token per answer being decoded (questions, turns, committed speculation)
 *   PREFILL   question tokens (and a session's queued data a question waits for)
 *   INGEST    data fed to sessions (rill_sched_ingest*), shared system prompts
 *   STANDING  refreshes of standing queries
 *   SPEC      speculative replies (endpoint anticipation)
 * A step that carries question work (DECODE, PREFILL) takes no STANDING or SPEC tokens, and
 * INGEST tokens only as far as the delay bound below reaches (stats.question_step_filler counts
 * them): lower work would lengthen the step every waiting answer shares. A step of lower work
 * alone is also preempted inside: when a question or turn is submitted while it runs, its
 * forward pass stops at the next layer (rill_forward_set_cancel on the pool's forward), its
 * tokens stay queued and are evaluated again later, and the question goes into the next step
 * at once (stats.preempted counts these steps). So a question waits about one layer's time for
 * lower work alone, not a step.
 *
 * Step size (adaptive chunked prefill). The engine fits its step times to t = a + b * tokens
 * (least squares over recent steps, older ones weighted down by 0.97 per step) and caps a step
 * at (max_delay_ns - a) / b tokens (never below min_chunk, never above step_tokens), so a
 * question that arrives while a step runs waits at most about max_delay_ns for the engine to
 * take it, and a question that is decoding loses at most that per token to another's prefill.
 * min_chunk's floor is for steps without question work (so that ingest progresses however slow
 * a token is); ingest joining a question's step stops at the unfloored (max_delay_ns - a) / b,
 * which may be none. A question's own tokens are not held to the cap: the oldest question
 * prefilling goes into a step whole (up to step_tokens), because the cap bounds what a question
 * waits behind, not the question itself (prefilling 50 tokens in chunks of 16 pays the per-step
 * cost four times); other questions and the session data questions wait for take what the cap
 * leaves, so several questions at once still make steps of one question beyond the cap.
 *
 * Several models (rill_sched_new_models). A session belongs to the model it was created on
 * (rill_sched_session_params_t.model); budgets, templates, the step-time model and the cap are
 * per model. A step runs one pass per model with work (params.model_steps, RILL_SCHED_EVERY_MODEL),
 * the models whose batch carries question work first (then by their batch's highest class,
 * ties in rotation), and the delay bound is the step's: once a pass with question work has run,
 * a later model's pass keeps its own question work, takes ingest only as far as its time model
 * fits in what is left of max_delay_ns (possibly none), and no standing refreshes or
 * speculation - the rules of one model's question step. So a question on one model waits for
 * another model's lower work about as long as for its own model's. A model whose pool is
 * exhausted with no fork to reclaim sits out until a command arrives; the others go on. With
 * RILL_SCHED_TOP_MODEL a step runs only the first of those passes: a model whose work is
 * always outranked by another's (its ingest, a shared prompt a creation waits for) then waits
 * as long as that lasts.
 *
 * Cell-budget admission. A session reserves the pages its window can occupy
 * (ceil((sinks + window) / P), or ceil(n_ctx / P) without a window) when it is created; the
 * reservations never exceed the pool's pages less overflow_pages, and creation beyond that
 * fails with RILL_EFULL and the numbers. Forks - questions, standing refreshes, speculative
 * branches - use the rest. When a step finds the pool exhausted, the engine reclaims forks,
 * lowest class first (speculation, then standing refreshes, which are retried later), and only
 * then fails a question with RILL_EFULL; a session's own data always fits its reservation, so
 * exhaustion never fails or corrupts ingest.
 *
 * Sleeping sessions (params.sleep_dir). A session's pages may leave RAM while it is not used:
 * the engine writes its snapshot to a sleep file (rill_session_snapshot), destroys the session
 * (its log is synced and closed) and keeps only its id, counters and how to rebuild it. The next
 * command that needs it - ingest, a question, a turn, a standing query's registration, a
 * replace, a snapshot, its tokens; not rill_sched_session_info, which reports it asleep - wakes
 * it first: rill_session_restore of the sleep file and the log after it, so the session is
 * exactly what it was (bit for bit: same tokens, K/V bytes, logits, version, identity) and
 * callers see no difference but the time. The cell budget counts awake sessions only: when a
 * creation, a restore or a wake needs pages reserved that are not free, the least recently
 * used awake sessions of that model sleep first (least recently: the oldest command that
 * touched it). A session sleeps only when nothing is in flight on it: no open question, turn
 * or speculation, its standing queries fresh and idle, no recognizer writing into it, not
 * pinned (rill_sched_session_params_t.pin, rill_sched_session_pin); data queued on it is
 * evaluated first, in one go, by the command that needs the room (a session that cannot sleep
 * after all is passed over for the rest of that command and counts as just used). With
 * sleep_idle_ns, sessions untouched that long (and with nothing queued) sleep too, without
 * pressure; the engine's wait ends when the next one is due.
 *
 * Tiers. Sleep files together stay within sleep_disk_bytes: to make room the coldest sleepers
 * that have an ingest log able to rebuild them (a log that starts at record 1, or continues the
 * snapshot the session was restored from or the ".base" of a shared prompt) lose their sleep
 * file, and such a session sleeping when no room can be made keeps only its log: its wake
 * re-prefills the window from the log (rill_session_restore of base and log; replayed records
 * recompute what they computed, see rill_session_restore). A session without such a log cannot
 * sleep without room for its file (it stays awake; admission then fails with RILL_EFULL). A
 * sleep file that cannot be written (RILL_EIO, ...) leaves a session with such a log in the log
 * tier and any other awake (stats.sleep_errors). A sleep file found truncated or corrupt at
 * wake (RILL_EFORMAT, RILL_ECORRUPT, RILL_ENOTFOUND, RILL_EUNSUPPORTED) is logged with its
 * error, deleted and counted (stats.wake_fallbacks), and the session re-prefills from its log;
 * without a log the command that woke it fails with that error (the session stays asleep). A
 * wake that fails for memory or pages (RILL_ENOMEM, RILL_EFULL) fails the command that caused
 * it and leaves the session asleep and intact; the next command tries again.
 *
 * Shared prefixes. Sessions of one model created with the same system prompt and window policy
 * share the
 * prompt's pages: the first such creation evaluates the prompt once in a template session (at
 * INGEST class) and every session is a fork of it (copy-on-write). The template lives while
 * any of its sessions does and counts against the reservations with its own pages.
 *
 * Data version. A session's version is rill_session_seq(): it grows with every input call
 * (ingest, a committed turn, a replace). Answers carry the version they saw.
 *
 * Questions see every input acknowledged before them: a question on a session with queued data
 * waits until the data acknowledged before it is evaluated (that session's data is raised to
 * PREFILL class meanwhile), then runs on a fork at that point; data acknowledged after the
 * question is not waited for (the fork drops it). The session itself is never changed by a
 * question. Held-back text (the unstable tail of text input, see rill_session_append_text) is
 * not part of it until flushed. A question asked with RILL_SCHED_EVALUATED consistency waits
 * for nothing: it runs on a fork of what the engine has evaluated when it takes the question
 * (queued data keeps its class and is not part of it), its answer.version is the newest
 * version wholly in that context and its answer.backlog is 0, so a caller trades freshness for
 * a time to first token that does not include other data's prefill. A standing query's fresh
 * cache serves it as it serves any question (the cache is used only when nothing is queued).
 *
 * Standing queries. After a session's version changes, each of its standing queries is marked
 * stale; when a step has budget left after the higher classes, the engine starts a refresh on
 * a fork (one per query at a time; refreshes coalesce: only the newest version is computed).
 * If newer data arrives while the refresh is still prefilling, it is abandoned (counted) and
 * restarted later; once it decodes its answer it finishes (so a stream that never pauses still
 * gets answers) and the next refresh follows. The answer is cached with its version, compute
 * time and finish time, and delivered to the query's on_done. rill_sched_ask() with the same
 * question tokens while the version still matches answers from the cache without touching the
 * model (answer.cached).
 *
 * Standing budget. Refreshes use idle capacity, but two limits keep them from taking all of it,
 * so that the engine has room left when ingest or a question arrives (params):
 *   standing_min_interval_ns  a query's refresh starts no sooner than this after its previous
 *                             one started (abandoned ones included); newer data meanwhile
 *                             coalesces into the one refresh that follows. 0: no interval.
 *   standing_max_share        refreshes start only while the standing share of engine time is
 *                             below this (0, 1]; 1: no cap. The share is an exponentially
 *                             decayed average over wall time with time constant
 *                             RILL_SCHED_SHARE_TAU_NS: share = S / W where, at the end of
 *                             every pass (and, for reading it, at any time), both decay by
 *                             d = exp(-dt / tau) over the dt since the last pass, W grows by tau *
 * (1 - d) (the weight of that interval) and S by the interval's standing time spread over it (a
 * pass's time times its STANDING tokens over its tokens, times tau * (1 - d) / dt). W starts at tau
 * (as if the engine had idled one time constant before it was created), so a fresh engine may spend
 * about max_share * tau on refreshes at once. A refresh that has started finishes as without the
 * limits (its steps count in the share). A stale query held back by a limit waits without busy
 * waiting: when nothing else is to be done the engine sleeps until the interval ends or the share
 * has decayed below the maximum (or a command arrives) and starts it then, without new input.
 * rill_sched_wait_idle() counts such a query as work (it returns once it is fresh).
 * stats.standing_deferred_interval and stats.standing_deferred_share count refreshes that a limit
 * held back (each refresh at most once per limit), stats.standing_share is the share now and
 * stats.standing_ns the engine time refreshes took. The defaults (250 ms, 0.5) were chosen by
 * measurement (docs/benchmarks.md, "Standing budget").
 *
 * Speculation. rill_sched_spec_start() guesses the rest of a speaker's input: the engine forks
 * the session, feeds the guessed input and decodes a reply at SPEC class, holding the reply
 * tokens back. rill_sched_spec_commit() gives the real input: if it equals the guess, the held
 * tokens are delivered and decoding continues at DECODE class; otherwise the branch is rolled
 * back to the longest common prefix of guess and input (the reply goes too), the rest of the
 * input is fed and the reply is decoded anew. At the end the session adopts the branch (input
 * and reply become its own input, logged: rill_session_adopt), exactly what rill_sched_turn()
 * does without speculation, so a session that speculated ends with the tokens of one that did
 * not. Counters: tokens computed on branches, kept by commits, wasted (rolled back, cancelled).
 *
 * Callbacks (on_token, on_done) run on the engine thread, in order per request; they must
 * return quickly and must not call the blocking functions below (they may call the
 * non-blocking ones: rill_sched_cancel, rill_sched_ask, rill_sched_spec_commit, ...). Pointers
 * they receive are borrowed for the call.
 *
 * Errors: every blocking call's detail (which budget, which session, what the log or snapshot
 * said) is the calling thread's rill_last_error (core/rill_err.h) when it returns; callbacks
 * get theirs as arguments (rill_sched_answer_t.message, the ack functions' message).
 *
 * Thread safety: every function may be called from any thread, concurrently; blocking calls
 * wait for the engine to carry them out between two steps (at most about one step: one pass
 * per model).
 *
 * Decoding. An answer is greedy (arg-max, lowest id on ties) unless its rill_sched_ask_t sets
 * `sampling` with temp > 0: then the engine gives the request its own rill_sampler
 * (model/rill_sampler.h) for the session's vocabulary, created when the engine takes the
 * request, tells it the question tokens (rill_sampler_accept: the repetition penalty sees
 * them; the session's earlier context is not part of its window), and picks every answer token
 * with rill_sampler_sample, accepting each pick. So an answer is a function of the session's
 * state, the question and the parameters (seed included), whatever other requests, sampled
 * or greedy, share its steps (as far as logits are: a batch may change their last bits,
 * rill_session_step). With temp <= 0 the request is greedy exactly as without
 * `sampling` (no sampler; the penalty does not apply either). Sampled questions are never
 * served from a standing query's cache. Standing queries refuse sampling (temp > 0:
 * RILL_EINVAL): their answers are cached and shared by every asker of the question, so they
 * stay greedy. Speculation samples as the turn it stands for: on a commit that keeps the
 * guess the held reply was drawn by a sampler that saw the same input; on a miss the sampler
 * restarts from its seed and accepts the real input before the reply is decoded anew. Every
 * step's items that ask for logits get the full row on the host (rill_session_step), so a
 * sampled request costs its draw, not a change of the pass.
 */
#ifndef RILL_SCHEDULER_H
#define RILL_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_asr.h"
#include "rill_err.h"
#include "rill_hist.h"
#include "rill_sampler.h"
#include "rill_session.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_sched rill_sched_t;
typedef uint64_t rill_sched_sid_t; /* a session, never 0 */
typedef uint64_t rill_sched_rid_t; /* a request (question, turn, standing query, speculation),
                                      never 0; unique for the scheduler's lifetime */

typedef enum rill_sched_class {
    RILL_SCHED_DECODE = 0,
    RILL_SCHED_PREFILL = 1,
    RILL_SCHED_INGEST = 2,
    RILL_SCHED_STANDING = 3,
    RILL_SCHED_SPEC = 4,
    RILL_SCHED_N_CLASSES = 5
} rill_sched_class_t;

/* Name of a class ("decode", "prefill", "ingest", "standing", "spec"). */
const char *rill_sched_class_name(rill_sched_class_t c);

/* How a step treats several models (see "Several models"). */
typedef enum rill_sched_model_steps {
    RILL_SCHED_EVERY_MODEL = 0, /* one pass per model with work, under one delay bound */
    RILL_SCHED_TOP_MODEL = 1    /* only the pass of the model with the highest work */
} rill_sched_model_steps_t;

typedef struct rill_sched_params {
    int32_t step_tokens;    /* most tokens per pass; 0 (default): each pool's max_batch; else
                               at most every pool's */
    int32_t min_chunk;      /* fewest tokens the adaptive cap allows per step; default 16 */
    int64_t max_delay_ns;   /* target step time bounding a waiting question's delay; default
                               50 ms; 0: no cap (steps of step_tokens) */
    int32_t overflow_pages; /* pages of each pool sessions may not reserve (forks use them); -1
                               (default): an eighth of the pool, at least
                               2 * ceil(step_tokens / P) */
    int32_t max_sessions;   /* over all models; default 1024 */
    rill_sched_model_steps_t model_steps; /* default RILL_SCHED_EVERY_MODEL */
    int64_t standing_min_interval_ns;     /* least time between the starts of one standing
                                             query's refreshes (>= 0; 0: none); default
                                             250 ms ("Standing budget") */
    double standing_max_share;            /* most share of engine time refreshes may hold
                                             before no new one starts, in (0, 1] (1: no
                                             cap); default 0.5 ("Standing budget") */
    /* Sleeping sessions ("Sleeping sessions" above): */
    const char *sleep_dir;    /* folder (it must exist) of the sleep files "s<sid>.sleep";
                                 copied (at most 3,800 bytes). NULL (default): sessions never
                                 sleep, admission fails with RILL_EFULL as without sleeping */
    int64_t sleep_idle_ns;    /* a session no command touched for this long sleeps (>= 0);
                                 0 (default): only under memory pressure */
    int64_t sleep_disk_bytes; /* most bytes of sleep files at once (>= 0); past it the coldest
                                 sleepers keep only their ingest log. 0 (default): no limit */
} rill_sched_params_t;

/* Time constant of the standing share's decayed average ("Standing budget"): 2 s. */
#define RILL_SCHED_SHARE_TAU_NS (2LL * 1000 * 1000 * 1000)

/* Defaults as documented per field. */
rill_sched_params_t rill_sched_default_params(void);

/* Creates a scheduler over pool (borrowed: it must outlive the scheduler and have no
 * sessions; from now on only the engine thread uses it, its forward and its backend) and
 * starts the engine thread. It installs its preemption flag on the pool's forward
 * (rill_forward_set_cancel) and removes it when destroyed. params NULL: the defaults. Errors:
 * RILL_EINVAL (NULL, a field out of range, overflow_pages >= the pool's pages), RILL_ENOMEM,
 * RILL_EINTERNAL (the thread could not start). Caller owns *out; destroy with rill_sched_destroy().
 */
rill_err_t rill_sched_new(rill_session_pool_t *pool, const rill_sched_params_t *params,
                          rill_sched_t **out);

/* Bytes of a model name's buffer (names are 1..63 bytes) and most models of one scheduler. */
#define RILL_SCHED_MODEL_NAME 64
#define RILL_SCHED_MAX_MODELS 8

typedef struct rill_sched_model {
    const char *name;          /* 1..RILL_SCHED_MODEL_NAME - 1 bytes, unique; copied */
    rill_session_pool_t *pool; /* borrowed, as the pool of rill_sched_new() */
} rill_sched_model_t;

/* As rill_sched_new(), over models[0, n_models) (1..RILL_SCHED_MAX_MODELS distinct pools with
 * distinct forwards; model i is index i of rill_sched_session_params_t.model, model 0 the
 * default). rill_sched_new(pool, ...) is this with one model named "default". Errors: those of
 * rill_sched_new(), RILL_EINVAL also for a bad name or count, a duplicate name, pool or forward
 * (each forward carries the scheduler's one preemption flag). */
rill_err_t rill_sched_new_models(const rill_sched_model_t *models, int32_t n_models,
                                 const rill_sched_params_t *params, rill_sched_t **out);

/* Models of the scheduler, and the index of the one named name (RILL_ENOTFOUND: none). Never
 * block; the names are fixed at creation (borrowed for the scheduler's lifetime). */
int32_t rill_sched_n_models(const rill_sched_t *sch);
const char *rill_sched_model_name(const rill_sched_t *sch, int32_t model);
int32_t rill_sched_find_model(const rill_sched_t *sch, const char *name);

/* Stops the engine: every open request ends with RILL_ECANCELED (on_done is called), every
 * recognizer still attached is freed (its handle is invalid afterwards; no on_update), every
 * session is destroyed (their logs synced and closed), then frees the scheduler and sets
 * *sp = NULL. NULL-safe. Must not be called from a callback. */
void rill_sched_destroy(rill_sched_t **sp);

/* ---- end-of-turn mass (endpoint anticipation: scheduler/rill_endpoint.h) -------------------
 *
 * A session created with an end watch (rill_sched_session_params_t.end_watch) has the logits of
 * its last evaluated position computed whenever a step evaluates the end of its queued data
 * (the last token of what was fed to it: ingest, a replace), and the engine keeps two probability
 * masses of that row in the watch: p_sentence, the softmax probability summed over the watch's
 * sentence-final tokens, and p_turn, summed over its end-of-turn tokens (a chat template's
 * <|im_end|>, say). The watch is read at any time, from any thread, without waiting for the engine
 * (rill_sched_end_watch_read). Cost: one row of the output projection per such step (the forward
 * pass computes hidden states for every token anyway; without a watch an ingest item asks for no
 * logits) and one pass over the row; nothing is allocated per step. Steps that evaluate only part
 * of the queue (the step cap cut it) do not update the watch: the mass is always that of the end of
 * some input. A replace that only shortens the stream (nothing new to evaluate) and a flush that
 * tokenizes nothing evaluate no token and so leave the watch at the older position: compare its
 * version with the input's. Questions, turns and speculation on the session's forks never update
 * it.
 *
 * Thread safety: the watch is thread-safe (a mutex held for a copy of the mass). One watch
 * serves one session (giving it to two interleaves their updates). */
typedef struct rill_sched_end_watch rill_sched_end_watch_t;

/* Most token ids per set of a watch. */
#define RILL_SCHED_END_TOKENS 1024

/* Creates a watch over sentence[0, n_sentence) and turn[0, n_turn), token ids of the model of
 * the sessions it will serve (copied; 0..RILL_SCHED_END_TOKENS each, not both empty; ids >= 0;
 * duplicates within a set are refused so that no probability counts twice). The ids are checked
 * against the model's vocabulary when a session is created with the watch. Errors: RILL_EINVAL
 * (NULL out, a count out of range, a NULL set with a count > 0, a negative or duplicate id),
 * RILL_ENOMEM; *out untouched on error. Caller owns *out; destroy with
 * rill_sched_end_watch_destroy() after the session it serves is closed. */
rill_err_t rill_sched_end_watch_new(const int32_t *sentence, int32_t n_sentence,
                                    const int32_t *turn, int32_t n_turn,
                                    rill_sched_end_watch_t **out);

/* Frees it and sets *wp = NULL. NULL-safe. */
void rill_sched_end_watch_destroy(rill_sched_end_watch_t **wp);

typedef struct rill_sched_end_mass {
    int64_t updates;  /* steps that updated the watch so far (0: none yet; the rest is 0) */
    int64_t version;  /* the session's data version (rill_session_seq) at that step: the mass
                         is at the end of every input up to it, so it covers an input whose
                         version is <= this */
    int32_t position; /* resident tokens of the session then (the row is of position
                         position - 1) */
    float p_sentence; /* softmax mass of the sentence-final tokens, [0, 1] */
    float p_turn;     /* softmax mass of the end-of-turn tokens, [0, 1] */
    int64_t at_ns;    /* rill_now_ns() of the update */
} rill_sched_end_mass_t;

/* Copies the latest mass into *out. Never blocks on the engine. Errors: RILL_EINVAL (NULL). */
rill_err_t rill_sched_end_watch_read(const rill_sched_end_watch_t *w, rill_sched_end_mass_t *out);

/* ---- sessions ---------------------------------------------------------------------------- */

typedef struct rill_sched_session_params {
    int32_t model;                 /* index of its model (rill_sched_find_model); default 0 */
    rill_session_params_t session; /* window policy and optional system prompt (shared with
                                      sessions created with the same prompt, policy and model) */
    const char *log_path;          /* optional ingest log (rill_session_open_log: must not
                                      exist); with a shared prompt a snapshot of the start
                                      state is also written to log_path + ".base" so that
                                      rill_sched_session_restore() can rebuild it */
    rill_session_fsync_t fsync;    /* policy of the log */
    /* Optional (NULL: none): keeps the end-of-turn mass of the session's last evaluated
     * position ("End-of-turn mass" above); borrowed: it must outlive the session (until
     * rill_sched_session_close returns or the scheduler is destroyed). */
    rill_sched_end_watch_t *end_watch;
    bool pin; /* never sleeps ("Sleeping sessions"); default false */
} rill_sched_session_params_t;

/* Defaults: model 0, rill_session_default_params(), no log, RILL_SESSION_FSYNC_EVERYSEC, no end
 * watch. */
rill_sched_session_params_t rill_sched_session_default_params(void);

/* Creates a session and returns once it is ready (its shared prompt evaluated). Errors:
 * RILL_EINVAL (NULL, bad params), RILL_EFULL (its reservation does not fit: the message
 * gives pages needed, reserved and budget; or max_sessions reached), RILL_ENOMEM, log and
 * forward errors; RILL_EINVAL for a model index out of range, or an end watch holding a token
 * id outside the model's vocabulary. On error nothing is left. */
rill_err_t rill_sched_session_create(rill_sched_t *sch, const rill_sched_session_params_t *params,
                                     rill_sched_sid_t *out);

/* Rebuilds a session of model `model` from a snapshot and/or its log (rill_session_restore into
 * that model's pool, replay done by the engine before it returns), reserving its window like
 * creation. Errors: those of rill_session_restore() (RILL_EUNSUPPORTED for files of another
 * model) and of creation. A restored session has no end watch. */
rill_err_t rill_sched_session_restore(rill_sched_t *sch, int32_t model, const char *snapshot_path,
                                      const char *log_path, rill_session_fsync_t fsync,
                                      rill_sched_sid_t *out);

/* Closes a session: its open requests end with RILL_ECANCELED, its log is synced and closed,
 * its reservation is released. Errors: RILL_ENOTFOUND. Blocks. */
rill_err_t rill_sched_session_close(rill_sched_t *sch, rill_sched_sid_t sid);

typedef struct rill_sched_session_info {
    int32_t model;           /* its model's index */
    rill_session_stats_t st; /* rill_session_stats() of the session */
    int64_t version;         /* rill_session_seq() */
    int32_t reserved_pages;
    int32_t n_requests; /* open questions, turns and speculations on it */
    int32_t n_standing; /* registered standing queries */
    size_t held_text;   /* bytes of held-back text */
    /* sleeping ("Sleeping sessions"); while asleep st, version and held_text are as the
     * session fell asleep, and reserved_pages is what its wake will reserve */
    bool asleep;
    bool pinned;
    int32_t tier;         /* asleep: RILL_SCHED_TIER_SNAPSHOT or _LOG; awake: -1 */
    int64_t sleep_bytes;  /* bytes of its sleep file (0: none) */
    int64_t sleeps;       /* times it fell asleep */
    int64_t wakes;        /* times it woke */
    int64_t last_wake_ns; /* duration of its latest wake (0: none) */
} rill_sched_session_info_t;

/* How a sleeping session comes back (rill_sched_session_info_t.tier). */
#define RILL_SCHED_TIER_SNAPSHOT 0 /* its sleep file, then the log after it */
#define RILL_SCHED_TIER_LOG      1 /* its ingest log alone: the window is re-prefilled */

/* Fills *out. Errors: RILL_ENOTFOUND. Blocks. */
rill_err_t rill_sched_session_info(rill_sched_t *sch, rill_sched_sid_t sid,
                                   rill_sched_session_info_t *out);

/* Pins a session awake (pin true: it is woken now if asleep, and never sleeps until
 * unpinned) or lets it sleep again (false). Errors: RILL_ENOTFOUND, and a wake's errors
 * ("Sleeping sessions"). Blocks. */
rill_err_t rill_sched_session_pin(rill_sched_t *sch, rill_sched_sid_t sid, bool pin);

/* Puts a session to sleep now, as memory pressure would ("Sleeping sessions"; for tests,
 * benchmarks and operators). Errors: RILL_ENOTFOUND, RILL_EUNSUPPORTED (no sleep_dir),
 * RILL_EBUSY (pinned, or something in flight on it), RILL_EFULL (no room for its sleep file and
 * no log to fall back on), and the sleep file's errors for a session without such a log. A
 * session already asleep: RILL_OK. Blocks. */
rill_err_t rill_sched_session_sleep(rill_sched_t *sch, rill_sched_sid_t sid);

/* Evaluates the session's queued data, then snapshots it (rill_session_snapshot). Errors:
 * RILL_ENOTFOUND and those of the snapshot. Blocks (the engine does the evaluation in one go). */
rill_err_t rill_sched_session_snapshot(rill_sched_t *sch, rill_sched_sid_t sid, const char *path);

/* Copies the session's resident token ids (rill_session_tokens) into out[0, cap); returns how
 * many there are (may exceed cap) or a negative rill_err_t (RILL_ENOTFOUND). Blocks. */
int64_t rill_sched_session_tokens(rill_sched_t *sch, rill_sched_sid_t sid, int32_t *out,
                                  int64_t cap);

/* Fills ids[0, cap) with the open sessions' ids in creation order; returns how many there are
 * (may exceed cap), or a negative rill_err_t. Blocks. */
int64_t rill_sched_session_list(rill_sched_t *sch, rill_sched_sid_t *ids, int64_t cap);

/* ---- data -------------------------------------------------------------------------------- */

/* Back-pressure: input to a session that already has more than this many tokens queued (fed,
 * not yet evaluated) is refused with RILL_EFULL, so a feed that outruns the engine for long
 * gets an error instead of growing memory without bound. */
#define RILL_SCHED_MAX_QUEUED (1 << 20)

/* Feeds tokens (or text, tokenized with the pool's tokenizer and held back at an unstable end;
 * flush ends the text so nothing is held, text and flush being one input,
 * rill_session_feed_text_end, whose version a replace can name) to a session: returns once the
 * input is checked, logged (acknowledged: a crash after the return loses none of it) and
 * queued; the engine evaluates it at INGEST class. version (text only; may be NULL): the session's
 * data version right after this input (rill_sched_session_info's version), so a caller that reports
 * it needs no second call and waits for one engine pass, not two. Errors (nothing taken; *version
 * untouched): RILL_ENOTFOUND, RILL_EFULL (more than RILL_SCHED_MAX_QUEUED tokens queued on the
 * session already), those of rill_session_feed*(). Blocks. */
rill_err_t rill_sched_ingest(rill_sched_t *sch, rill_sched_sid_t sid, const int32_t *tokens,
                             int32_t n);
rill_err_t rill_sched_ingest_text(rill_sched_t *sch, rill_sched_sid_t sid, const char *text,
                                  size_t len, bool flush, int64_t *version);

/* Called on the engine thread once asynchronous input is acknowledged (status RILL_OK: logged
 * and queued) or refused (the rill_sched_ingest errors, nothing taken; RILL_ECANCELED when the
 * scheduler was destroyed first). message: detail for an error, "" otherwise (borrowed). Must
 * not block or call back into the scheduler's blocking functions. */
typedef void (*rill_sched_ack_fn)(void *user, rill_err_t status, const char *message);

/* rill_sched_ingest without waiting: copies tokens[0, n) and returns. The engine checks, logs
 * and queues them at its next step boundary, in submission order with every other call, so a
 * question asked after this returns (from any thread that saw the return) waits for this input
 * like for acknowledged input, and is not held up by the wait for an acknowledgement. on_ack
 * (may be NULL) reports the outcome. Returns RILL_EINVAL (n < 1, tokens NULL), RILL_ENOMEM or
 * RILL_ECLOSED (nothing queued, on_ack not called); RILL_OK otherwise. */
rill_err_t rill_sched_ingest_async(rill_sched_t *sch, rill_sched_sid_t sid, const int32_t *tokens,
                                   int32_t n, rill_sched_ack_fn on_ack, void *user);

/* Replace (rill_session_replace_text): "from the input that made version from_version on, the
 * text is text[0, len)". The session rolls back to the longest common token prefix of its stream
 * and the new one and queues the rest (evaluated at INGEST class like any input); the replace is
 * an input of its own, logged, with the next version. Like text ingest, it holds back the
 * unstable end of its text until more text or a flush (rill_sched_ingest_text) ends it, and a
 * turn is adopted only while nothing is held. Requests on the session: one waiting for its data
 * (a stream length: what was acknowledged when it was asked) waits for no more than the stream
 * holds after the replace (it may have got shorter), so it answers on the replaced text; one
 * already on a fork answers on what it forked; a turn or committed speculation on a fork taken
 * before the replace is not adopted (answer.adopted false), as with any other input meanwhile,
 * while a speculation committed after it is decoded anew on the replaced state and adopted
 * (rill_sched_spec_commit). Standing answers become stale and are refreshed. version
 * (may be NULL): the session's version after the replace. Errors (nothing changed, *version
 * untouched): RILL_ENOTFOUND, RILL_EFULL (more than RILL_SCHED_MAX_QUEUED tokens queued),
 * those of rill_session_feed_replace_text(): RILL_EINVAL (from_version not one of the
 * session's versions), RILL_ERANGE (the session no longer reaches back that far), RILL_ENOMEM,
 * RILL_EIO, RILL_EUNSUPPORTED. Blocks (one engine pass). */
rill_err_t rill_sched_ingest_replace(rill_sched_t *sch, rill_sched_sid_t sid, int64_t from_version,
                                     const char *text, size_t len, int64_t *version);

/* Called on the engine thread once an asynchronous replace is taken (status RILL_OK; version:
 * the session's version after it) or refused (the errors above, nothing changed, version -1;
 * RILL_ECANCELED when the scheduler was destroyed first). message: detail for an error, ""
 * otherwise (borrowed). Must not block or call back into the scheduler's blocking functions. */
typedef void (*rill_sched_replace_fn)(void *user, rill_err_t status, int64_t version,
                                      const char *message);

/* rill_sched_ingest_replace without waiting: copies text and returns; the engine carries it out
 * at its next step boundary, in submission order with every other call (a question asked after
 * this returns sees the replaced text). on_ack (may be NULL) reports the outcome. Returns
 * RILL_EINVAL (NULL sch, text NULL with len > 0), RILL_ENOMEM or RILL_ECLOSED (nothing queued,
 * on_ack not called); RILL_OK otherwise. */
rill_err_t rill_sched_ingest_replace_async(rill_sched_t *sch, rill_sched_sid_t sid,
                                           int64_t from_version, const char *text, size_t len,
                                           rill_sched_replace_fn on_ack, void *user);

/* ---- questions, turns, standing queries, speculation -------------------------------------- */

typedef struct rill_sched_answer {
    rill_err_t status;     /* RILL_OK, RILL_ECANCELED, RILL_EFULL, ... */
    const char *message;   /* detail when status != RILL_OK (borrowed) */
    const int32_t *tokens; /* the answer (borrowed for the callback); for a request that ended
                              early (cancelled, failed) the tokens decoded before it ended */
    int32_t n_tokens;
    int64_t version;    /* data version the answer saw */
    int32_t n_context;  /* tokens resident in the session when it was answered */
    bool cached;        /* served from a standing query's cache */
    bool adopted;       /* turn / speculation: the session took input and reply */
    int64_t submit_ns;  /* rill_now_ns() of the submission */
    int64_t ttft_ns;    /* submission to first answer token */
    int64_t total_ns;   /* submission to completion */
    int64_t compute_ns; /* engine time of the steps it took part in */
    int64_t done_ns;    /* rill_now_ns() at completion (answer age = now - done_ns) */
    /* Where the time to the first token went (0 for a cached answer): */
    int64_t backlog;         /* tokens of its session acknowledged but not yet evaluated when it
                                was asked: it waited for them to be evaluated first */
    int64_t ttft_compute_ns; /* engine time of the steps before its first token that evaluated
                                its input or that backlog; ttft_ns - ttft_compute_ns it spent
                                behind other work (steps already running, other questions) */
} rill_sched_answer_t;

typedef void (*rill_sched_token_fn)(void *user, rill_sched_rid_t rid, int32_t token);
typedef void (*rill_sched_done_fn)(void *user, rill_sched_rid_t rid, const rill_sched_answer_t *a);

/* What a question waits for (rill_sched_ask_t.consistency; see "Questions see ..."). */
typedef enum rill_sched_consistency {
    RILL_SCHED_ACKNOWLEDGED = 0, /* every input acknowledged before the question (default) */
    RILL_SCHED_EVALUATED = 1     /* what the engine has evaluated when it takes the question:
                                    answers at once; its version says what it saw */
} rill_sched_consistency_t;

/* Name of a consistency ("acknowledged", "evaluated"), NULL out of range; and its inverse
 * (RILL_EINVAL for an unknown name). */
const char *rill_sched_consistency_name(rill_sched_consistency_t c);
rill_err_t rill_sched_consistency_parse(const char *name, rill_sched_consistency_t *out);

typedef struct rill_sched_ask {
    const int32_t *question;      /* copied by the call */
    int32_t n_question;           /* >= 1 */
    int32_t n_max;                /* most answer tokens (>= 1) */
    bool stop_at_eog;             /* stop after an end-of-generation token (pool tokenizer) */
    bool stop_at_newline;         /* stop after the token whose text ends the answer's first
                                     line: a '\n' after a byte that is not blank (leading blank
                                     lines do not count; the '\n' is part of the answer) */
    rill_sched_token_fn on_token; /* optional, each answer token as it is decoded */
    rill_sched_done_fn on_done;   /* optional; exactly once per question (per refresh for a
                                     standing query) */
    void *user;
    const rill_sampler_params_t *sampling; /* optional; NULL or temp <= 0: greedy (see
                                              "Decoding"); copied by the call */
    rill_sched_consistency_t consistency;  /* questions only (rill_sched_ask): others take
                                              RILL_SCHED_ACKNOWLEDGED, the default */
} rill_sched_ask_t;

/* Asks a question on a session (it is not changed). Returns at once with *rid; the answer
 * streams through on_token and ends with on_done. Errors: RILL_EINVAL (also for sampling that
 * rill_sampler_params_valid() refuses, or a consistency out of range; nothing is queued),
 * RILL_ENOMEM; through on_done:
 * RILL_ENOTFOUND (no such session, checked by the engine), RILL_ENOMEM (the request or its
 * sampler could not be allocated when the engine took it; no token was decoded). */
rill_err_t rill_sched_ask(rill_sched_t *sch, rill_sched_sid_t sid, const rill_sched_ask_t *q,
                          rill_sched_rid_t *rid);

/* A conversational turn: feeds input (logged) and decodes a reply that becomes part of the
 * session (answer.adopted; not when other input reached the session meanwhile). As
 * rill_sched_ask() otherwise; q->question is the input. A turn follows every input before it:
 * q->consistency other than RILL_SCHED_ACKNOWLEDGED is RILL_EINVAL (so for standing queries,
 * whose refreshes start on evaluated data anyway, and speculation). */
rill_err_t rill_sched_turn(rill_sched_t *sch, rill_sched_sid_t sid, const rill_sched_ask_t *q,
                           rill_sched_rid_t *rid);

/* Ends a request: on_done with RILL_ECANCELED unless it already finished (then nothing
 * happens). Standing queries: see unregister. Never blocks. Errors: RILL_ENOTFOUND (an id
 * never issued). */
rill_err_t rill_sched_cancel(rill_sched_t *sch, rill_sched_rid_t rid);

/* Registers a standing query (q as for rill_sched_ask; on_done is called with each refreshed
 * answer). The first refresh is scheduled at once. Errors: as rill_sched_ask(), RILL_EINVAL
 * also for q->sampling with temp > 0 (standing answers are greedy; nothing is registered). */
rill_err_t rill_sched_standing_register(rill_sched_t *sch, rill_sched_sid_t sid,
                                        const rill_sched_ask_t *q, rill_sched_rid_t *qid);

/* Unregisters it; a refresh in flight is dropped without a callback. Errors: RILL_ENOTFOUND.
 * Blocks (no callback of it runs after the return). */
rill_err_t rill_sched_standing_unregister(rill_sched_t *sch, rill_sched_rid_t qid);

typedef struct rill_sched_standing_info {
    rill_sched_rid_t qid;
    int64_t version;    /* version of the cached answer (-1: none yet) */
    int64_t done_ns;    /* when it was computed (0: none) */
    int64_t compute_ns; /* engine time of that refresh */
    int64_t refreshes;  /* completed refreshes */
    int64_t abandoned;  /* refreshes abandoned for newer data or reclaimed */
    int64_t cache_hits; /* questions answered from the cache */
    bool in_flight;
} rill_sched_standing_info_t;

/* Fills out[0, cap) with the session's standing queries in registration order; returns how
 * many there are (may exceed cap) or a negative rill_err_t (RILL_ENOTFOUND). Blocks. */
int64_t rill_sched_standing_list(rill_sched_t *sch, rill_sched_sid_t sid,
                                 rill_sched_standing_info_t *out, int64_t cap);

/* Starts speculating: guess is the expected rest of the input, reply decodes the answer (its
 * question field is ignored; on_token sees nothing until a commit; reply->sampling as for a
 * turn, see "Decoding"). Returns at once. Errors: as rill_sched_ask() (guess in
 * reply->question is not used: pass the guess here). */
rill_err_t rill_sched_spec_start(rill_sched_t *sch, rill_sched_sid_t sid, const int32_t *guess,
                                 int32_t n_guess, const rill_sched_ask_t *reply,
                                 rill_sched_rid_t *spec);

/* The real input arrived (see the top): keeps the speculation's work that still matches and
 * finishes the reply at DECODE class. Copies input. Never blocks. Errors: RILL_EINVAL,
 * RILL_ENOTFOUND (no such speculation, or already committed or finished). */
rill_err_t rill_sched_spec_commit(rill_sched_t *sch, rill_sched_rid_t spec, const int32_t *input,
                                  int32_t n_input);

/* ---- speech recognizers ------------------------------------------------------------------- *
 *
 * A recognizer (scheduler/rill_asr.h, Whisper over a rolling window) runs on the engine thread
 * as a work class of its own, below ingest: after each step's forward passes the engine runs at
 * most one recognizer step (one rill_asr_step or rill_asr_finish: an encode and a greedy decode,
 * tens of ms to a second), taking the ready recognizers in rotation. So a question that arrives
 * meanwhile waits for at most about one encode beyond its usual step, however many recognizers
 * there are, and recognizers share the engine with every model's passes instead of waiting for
 * them to idle (a live caption must not stop while questions are answered). A recognizer is
 * ready when step_ms of new audio has come (rill_asr_ready), when its window is full and audio
 * waits, or when a finish is due.
 *
 * Audio reaches it through a lock-free single-producer queue of 16 kHz samples sized at attach
 * (queue_ms): rill_sched_asr_feed copies into it and returns, never waiting for the engine or a
 * decode; a feed that does not fit is refused whole with RILL_EFULL (flow control: retry after
 * the engine has taken some; rill_sched_asr_room says how much fits now). The engine moves the
 * queue into the recognizer's window as the window has room.
 *
 * Each step that changes the transcript (new committed words or a different tentative tail),
 * each error, and each finish is reported through on_update on the engine thread. With a
 * consumer session (params.consumer, a session of any language model of this scheduler), the
 * engine also writes the transcript into that session as its input, before on_update:
 *   - committed text as ordinary text input, flushed (rill_session_feed_text_end), so it is
 *     never taken back and a question sees it at once;
 *   - the tentative tail as replaceable input: the first tail after committed text is a flushed
 *     text input of its own; each later change of the tail is a replace from the version of
 *     the first one on (rill_session_feed_replace_text, then a flush), so the session is rolled
 *     back to the longest common token prefix exactly when the recognizer changes its mind,
 *     and re-evaluates only the rest. When words are committed the tail inputs are replaced by
 *     the committed text, and the new tail (if any) follows as a new input.
 * So the consumer's text after the inputs it had before is always the committed transcript,
 * then " " and the tentative tail (when there is one); committed pieces are joined with one
 * space. These are inputs like any other (logged, versioned, they make standing answers stale).
 * A consumer input that fails (RILL_EFULL: more than RILL_SCHED_MAX_QUEUED tokens queued on it,
 * a log error) is reported in the update (consumer_status) and counted, and the transcript goes
 * on: that update's committed text is lost to the consumer; after RILL_EFULL or RILL_ENOMEM the
 * next update replaces the tail input again, after any other error (a replace the session can
 * no longer take) the old tail stays in the session as text and the next tail is a new input.
 * A consumer that is closed is let go: the recognizer goes on transcript-only.
 *
 * A finish (rill_sched_asr_finish) takes effect once the audio fed before it has been moved into
 * the recognizer: rill_asr_finish decodes the rest and commits the tentative tail (update.final),
 * then the recognizer starts a new stream in a fresh rill_asr_t (an utterance ended; audio fed
 * later is the next one). Memory: the queue, the recognizer (bounded with
 * asr.keep_committed false, which the consumer or the update's receiver makes unnecessary) and
 * a text buffer as long as the longest update; nothing grows with the stream's length. */

typedef struct rill_sched_asr rill_sched_asr_t;

/* One change of a recognizer's transcript (pointers borrowed for the callback). */
typedef struct rill_sched_asr_update {
    rill_err_t status;     /* RILL_OK, or the error of the step or finish that failed (the
                              audio stays and the step is tried again when more audio comes; a
                              failed restart after a finish leaves the recognizer refusing
                              audio: RILL_ECLOSED from rill_sched_asr_feed) */
    const char *message;   /* detail when status != RILL_OK, "" otherwise */
    const char *committed; /* text committed by this step, led by one space when text was
                              committed before on this recognizer ("" when none): append it */
    size_t committed_len;
    const char *tentative; /* the whole tentative tail now ("" when none) */
    size_t tentative_len;
    int64_t audio_ms; /* audio the recognizer has taken so far over all its streams, ms */
    bool final;       /* the update of a finish: the tail is committed, the next audio is a
                         new stream */
    rill_err_t consumer_status; /* RILL_OK, or the consumer input's error (nothing of this update
                                   reached it) */
    int64_t consumer_version;   /* the consumer's version after this update (-1: no consumer) */
} rill_sched_asr_update_t;

/* Called on the engine thread (rules of "Callbacks" above). */
typedef void (*rill_sched_asr_fn)(void *user, const rill_sched_asr_update_t *u);

typedef struct rill_sched_asr_params {
    rill_whisper_t *whisper;     /* borrowed: must outlive the recognizer; from attach to detach
                                    only the engine thread uses it (one rill_whisper_t may serve
                                    many recognizers); its backend must be the one the scheduler's
                                    pools use, or one no other thread touches */
    const rill_model_t *model;   /* the whisper model whisper was made from (borrowed: must
                                    outlive the recognizer; each new stream reads it) */
    rill_asr_params_t asr;       /* the recognizer's parameters (default rill_asr_default_params()
                                    with keep_committed false) */
    rill_sched_sid_t consumer;   /* a session that takes the transcript as input (0: none) */
    int32_t queue_ms;            /* audio the feed queue holds, ms, 100..120000; default 30000 */
    rill_sched_asr_fn on_update; /* optional */
    void *user;
} rill_sched_asr_params_t;

/* Defaults as documented per field (whisper and model NULL: the caller sets them). */
rill_sched_asr_params_t rill_sched_asr_default_params(void);

/* Creates a recognizer on the engine thread (rill_asr_new over p->whisper) and, with a consumer,
 * binds it to that session. Errors: RILL_EINVAL (NULL, queue_ms out of range, and
 * rill_asr_new's RILL_EINVAL), RILL_ENOTFOUND (no session p->consumer; a language the model
 * lacks), RILL_ENOMEM, RILL_ECLOSED, and rill_asr_new()'s errors; the detail in
 * rill_last_error(). On error nothing is left. Caller owns *out; end it with
 * rill_sched_asr_detach(). Blocks (one engine pass). */
rill_err_t rill_sched_asr_attach(rill_sched_t *sch, const rill_sched_asr_params_t *p,
                                 rill_sched_asr_t **out);

/* Ends a recognizer: audio still queued is dropped, no finish is run, no on_update of it runs
 * after the return (the consumer keeps the inputs it has, tail included). Frees it and sets
 * *ap = NULL. NULL-safe. Blocks (one engine pass). Must not be called from a callback. */
void rill_sched_asr_detach(rill_sched_t *sch, rill_sched_asr_t **ap);

/* 16 kHz samples rill_sched_asr_feed can take now (a lower bound: the engine only frees room).
 * 0 for NULL. Any thread. */
int64_t rill_sched_asr_room(const rill_sched_asr_t *a);

/* Queues x[0, n) (16 kHz mono, finite, as the sources of rill_audio.h give it) for the
 * recognizer and wakes the engine; never waits for it. All or nothing. Errors: RILL_EINVAL
 * (NULL a, x NULL with n > 0, n < 0, a non-finite sample), RILL_EFULL (n > room now),
 * RILL_ECLOSED (the recognizer failed to restart after a finish). Does not allocate. One
 * producer at a time per recognizer (feed and finish from one thread, or serialised). */
rill_err_t rill_sched_asr_feed(rill_sched_asr_t *a, const float *x, int64_t n);

/* Ends the current stream once the audio queued before this call has reached the recognizer
 * (see "A finish" above): a final update follows. A second finish before the first took effect
 * moves the point to the audio queued now (one final update). Never blocks. Errors: RILL_EINVAL
 * (NULL), RILL_ECLOSED (as feed). Producer thread, as feed. */
rill_err_t rill_sched_asr_finish(rill_sched_asr_t *a);

/* A recognizer's counters. */
typedef struct rill_sched_asr_stats {
    rill_asr_stats_t asr;      /* rill_asr_stats summed over the streams (window_samples: the
                                  current one's; max_window_samples: the most of any) */
    int64_t samples_queued;    /* accepted by rill_sched_asr_feed, over all streams */
    int64_t samples_taken;     /* moved from the queue into the recognizer */
    int64_t queue_samples;     /* waiting in the queue now */
    int64_t steps;             /* recognizer steps the engine ran (finishes included) */
    int64_t updates;           /* on_update calls */
    int64_t finishes;          /* streams finished */
    int64_t step_errors;       /* steps or finishes that failed */
    int64_t consumer_inputs;   /* inputs written to the consumer (texts, replaces, flushes) */
    int64_t consumer_replaces; /* of them, replaces of the tentative tail */
    int64_t consumer_errors;   /* consumer inputs that failed */
    int64_t step_ns;           /* engine time in recognizer steps */
    int64_t audio_ms;          /* as the update's */
    bool has_consumer;         /* still bound to its consumer */
} rill_sched_asr_stats_t;

/* Fills *out (a consistent copy taken between steps). Errors: RILL_EINVAL (NULL), RILL_ECLOSED.
 * Blocks (one engine pass). */
rill_err_t rill_sched_asr_stats(rill_sched_t *sch, rill_sched_asr_t *a,
                                rill_sched_asr_stats_t *out);

/* ---- engine statistics --------------------------------------------------------------------- */

/* Over all models (per model: rill_sched_model_info); the time model's fields are model 0's. */
typedef struct rill_sched_stats {
    int64_t steps;                        /* forward passes */
    int64_t tokens[RILL_SCHED_N_CLASSES]; /* tokens evaluated per class */
    int64_t busy_ns;                      /* time in steps */
    int64_t idle_ns;                      /* time waiting for work */
    double ns_per_token;                  /* the step time model now: b */
    double ns_per_step;                   /* and a (fixed cost of a step) */
    int32_t chunk_cap;                    /* the step cap it gives now */
    int32_t n_sessions;
    int32_t reserved_pages, overflow_pages, free_pages, total_pages;
    int64_t admission_rejects;    /* creations refused with RILL_EFULL */
    int64_t reclaimed;            /* forks reclaimed at exhaustion */
    int64_t preempted;            /* steps of lower work stopped mid-pass for a question */
    int64_t question_step_filler; /* tokens of INGEST and lower classes in steps that carried
                                     question work (in their model's pass or an earlier one) */
    int64_t questions, questions_failed;
    int64_t standing_refreshes, standing_abandoned, standing_cache_hits;
    int64_t standing_deferred_interval; /* refreshes held back by standing_min_interval_ns */
    int64_t standing_deferred_share;    /* refreshes held back by standing_max_share */
    int64_t standing_ns;                /* engine time of refreshes: each pass's time times
                                           its STANDING tokens over its tokens */
    double standing_share;              /* the standing share of engine time now, [0, 1]
                                           ("Standing budget") */
    int64_t spec_started, spec_committed, spec_hits; /* hits: the guess matched entirely */
    int64_t spec_tokens_computed, spec_tokens_kept, spec_tokens_wasted;
    int64_t prefix_shared_pages; /* pages forks of shared prompts did not have to compute */
    int64_t backlog;             /* tokens acknowledged to the open sessions and not yet
                                    evaluated (their n_pending, summed), now */
    rill_hist_t step_ns;         /* duration of each forward pass counted in steps (ns; so
                                    step_ns.count == steps): the time busy_ns sums, less that of
                                    passes stopped by preemption */
    /* sleeping sessions ("Sleeping sessions"); n_sessions counts both */
    int32_t awake, asleep;    /* sessions awake / asleep now */
    int32_t asleep_log;       /* of the asleep, those in the log tier */
    int64_t sleep_disk_bytes; /* bytes of sleep files now */
    int64_t sleeps;           /* sessions put to sleep (pressure, idle time or asked) */
    int64_t sleeps_idle;      /* of them, for idle time */
    int64_t sleep_errors;     /* sleep files that could not be written */
    int64_t wakes, wakes_log; /* wakes, and of them from the log alone */
    int64_t wake_fallbacks;   /* sleep files found damaged at wake (re-prefilled instead) */
    int64_t wake_errors;      /* wakes that failed (the session stayed asleep) */
    int64_t tier_drops;       /* sleep files deleted to keep within sleep_disk_bytes */
    rill_hist_t wake_ns;      /* duration of each wake (ns), both tiers */
    rill_hist_t wake_log_ns;  /* of the log tier's wakes alone */
} rill_sched_stats_t;

/* Fills *out (a consistent copy taken between steps; about 48 KiB with its histograms). Blocks.
 */
void rill_sched_stats(rill_sched_t *sch, rill_sched_stats_t *out);

typedef struct rill_sched_model_info {
    const char *name; /* borrowed for the scheduler's lifetime */
    int64_t steps;    /* its forward passes */
    int64_t tokens[RILL_SCHED_N_CLASSES];
    int64_t busy_ns;
    double ns_per_token, ns_per_step; /* its step time model */
    int32_t chunk_cap;
    int32_t n_sessions;
    int32_t reserved_pages, overflow_pages, free_pages, total_pages;
    int64_t backlog; /* as rill_sched_stats_t's, over its sessions */
} rill_sched_model_info_t;

/* Fills *out for model `model` (a consistent copy taken between steps). Errors: RILL_EINVAL
 * (NULL, index out of range), RILL_ECLOSED. Blocks. */
rill_err_t rill_sched_model_info(rill_sched_t *sch, int32_t model, rill_sched_model_info_t *out);

/* Blocks until the engine has no work left (every queue empty, no request open, standing
 * queries fresh: one held back by the standing budget is waited for; every recognizer's fed
 * audio taken and none ready to step) or timeout_ns passes.
 * RILL_OK or RILL_ETIMEDOUT. For tests and benchmarks. */
rill_err_t rill_sched_wait_idle(rill_sched_t *sch, int64_t timeout_ns);

#ifdef __cplusplus
}
#endif
#endif /* RILL_SCHEDULER_H */
