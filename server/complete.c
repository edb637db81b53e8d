/*
 * complete.c - the command `complete`: stateless completions, as OpenAI's completions and chat
 * completions want them (contract: server_internal.h; wire: docs/protocol.md).
 *
 * A completion is a question on a session nobody else sees: the shared prompt. For chat
 * messages it is the system message (or the template's default one) rendered as session.create
 * renders a system prompt, so completions with one system prompt - and sessions created with
 * it - share its KV pages and it is evaluated once; the other messages and the generation
 * prompt are the question. A plain prompt is the question of an empty shared prompt. The ask
 * forks the shared prompt and never changes it, so completions are independent of each other
 * and of every session. At most SRV_MAX_TMPLS shared prompts are kept; the one used longest
 * ago with no completion running is closed to make room, and when all are busy the request is
 * refused (RILL_EFULL). A shared prompt reserves a session window of KV pages like any session
 * (rilld --window); when the budget is full - for a shared prompt or for a client's session -
 * the idle ones are closed and the creation is tried once more before RILL_EFULL is returned,
 * so they never keep a client's session out.
 *
 * The answer streams through the door's progress hook as text pieces. Stop strings end it:
 * the text up to the first one is the answer, and the engine is told to stop. A piece whose end
 * could be the start of a stop string is held back until the next piece decides, so a stream
 * never shows text the final answer does not have.
 */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "server_internal.h"

#define COMPLETE_DEFAULT_TOKENS 256

/* ---- shared prompts ------------------------------------------------------------------------ */

static void tmpl_close(srv_t *s, srv_tmpl_t *t) {
    for (srv_tmpl_t **pp = &s->tmpls; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            break;
        }
    }
    rill_sched_session_close(s->sch, t->sid);
    rill_free(t->system);
    rill_free(t);
}

/* Closes the shared prompts no completion runs on; returns how many. */
static int release_idle(srv_t *s) {
    int n = 0;
    for (srv_tmpl_t *o = s->tmpls, *next; o != NULL; o = next) {
        next = o->next;
        if (o->in_flight == 0) {
            tmpl_close(s, o);
            n++;
        }
    }
    return n;
}

rill_err_t srv_session_create(srv_t *s, const rill_sched_session_params_t *sp,
                              rill_sched_sid_t *sid) {
    rill_err_t err = rill_sched_session_create(s->sch, sp, sid);
    if (err == RILL_EFULL && release_idle(s) > 0) {
        err = rill_sched_session_create(s->sch, sp, sid); /* once more, with their pages */
    }
    return err;
}

void srv_complete_stop(srv_t *s) {
    while (s->tmpls != NULL) {
        tmpl_close(s, s->tmpls);
    }
}

/* Tokenizes text[0, len) for model m (special tokens parsed when chat). Caller frees *out.
 * Returns the count or a negative rill_err_t. */
static int64_t tokens_of(const srv_model_t *m, const char *text, size_t len, bool bos, bool chat,
                         int32_t **out) {
    *out = NULL;
    int64_t n = rill_tokenizer_encode(m->tok, text, len, bos, chat, NULL, 0);
    if (n <= 0) {
        return n;
    }
    *out = rill_malloc(RILL_MEM_SERVER, (size_t)n * sizeof **out);
    if (*out == NULL) {
        return RILL_ENOMEM;
    }
    return rill_tokenizer_encode(m->tok, text, len, bos, chat, *out, n);
}

/* The shared prompt of (model, system[0, len)), made when missing. NULL with *err and *why. */
static srv_tmpl_t *tmpl_get(srv_t *s, int32_t model, const char *system, size_t len, bool chat,
                            rill_err_t *err, const char **why) {
    int n = 0;
    srv_tmpl_t *idle = NULL;
    for (srv_tmpl_t *t = s->tmpls; t != NULL; t = t->next, n++) {
        if (t->model == model && t->len == len && memcmp(t->system, system, len) == 0) {
            t->last_used = ++s->tmpl_clock;
            return t;
        }
        if (t->in_flight == 0 && (idle == NULL || t->last_used < idle->last_used)) {
            idle = t;
        }
    }
    if (n >= SRV_MAX_TMPLS) {
        if (idle == NULL) {
            *err = RILL_EFULL;
            *why = "every shared prompt is busy: try again when a completion has finished";
            return NULL;
        }
        tmpl_close(s, idle);
    }
    const srv_model_t *m = &s->models[model];
    int32_t *ids = NULL;
    int64_t k = len > 0 ? tokens_of(m, system, len, true, chat, &ids) : 0;
    srv_tmpl_t *t = k >= 0 ? rill_calloc(RILL_MEM_SERVER, 1, sizeof *t) : NULL;
    char *copy = t != NULL ? rill_malloc(RILL_MEM_SERVER, len + 1) : NULL;
    if (copy == NULL) {
        rill_free(ids);
        rill_free(t);
        *err = k < 0 ? (rill_err_t)k : RILL_ENOMEM;
        *why = "the shared prompt: tokenizing failed";
        return NULL;
    }
    memcpy(copy, system, len);
    copy[len] = '\0';
    rill_sched_session_params_t sp = rill_sched_session_default_params();
    sp.model = m->sched;
    sp.session.window = s->p.default_window;
    sp.session.n_sink = s->p.default_window > 0 ? s->p.default_sinks : 0;
    sp.session.prompt = ids;
    sp.session.n_prompt = (int32_t)k;
    *err = srv_session_create(s, &sp, &t->sid);
    rill_free(ids);
    if (*err != RILL_OK) {
        rill_free(copy);
        rill_free(t);
        *why = rill_last_error(*err);
        return NULL;
    }
    t->model = model;
    t->system = copy;
    t->len = len;
    t->n_tokens = (int32_t)k;
    t->last_used = ++s->tmpl_clock;
    t->next = s->tmpls;
    s->tmpls = t;
    return t;
}

/* ---- rendering ----------------------------------------------------------------------------- */

/* NUL-terminated copies of the messages' strings (rill_chat_msg_t wants C strings). */
typedef struct msgs {
    rill_chat_msg_t *m;
    char *store;
    size_t n;
} msgs_t;

static bool msgs_copy(msgs_t *out, const rill_proto_req_t *r) {
    size_t bytes = 0;
    for (int32_t i = 0; i < r->n_messages; i++) {
        bytes += r->messages[i].role.len + r->messages[i].content.len + 2;
    }
    out->n = (size_t)r->n_messages;
    out->m = rill_calloc(RILL_MEM_SERVER, out->n, sizeof *out->m);
    out->store = rill_malloc(RILL_MEM_SERVER, bytes);
    if (out->m == NULL || out->store == NULL) {
        return false;
    }
    char *p = out->store;
    for (int32_t i = 0; i < r->n_messages; i++) {
        const rill_proto_str_t *f[2] = { &r->messages[i].role, &r->messages[i].content };
        const char **to[2] = { &out->m[i].role, &out->m[i].content };
        for (int j = 0; j < 2; j++) {
            memcpy(p, f[j]->p, f[j]->len);
            p[f[j]->len] = '\0';
            *to[j] = p;
            p += f[j]->len + 1;
        }
    }
    return true;
}

/* snprintf-style renderers into a new string. */
static char *render(const rill_chat_t *chat, const rill_chat_msg_t *m, size_t n, bool gen,
                    bool turns, size_t *len) {
    int64_t k = turns ? rill_chat_apply_turns(chat, m, n, gen, NULL, 0)
                      : rill_chat_apply(chat, m, n, gen, NULL, 0);
    char *t = k >= 0 ? rill_malloc(RILL_MEM_SERVER, (size_t)k + 1) : NULL;
    if (t != NULL) {
        if (turns) {
            rill_chat_apply_turns(chat, m, n, gen, t, (size_t)k + 1);
        } else {
            rill_chat_apply(chat, m, n, gen, t, (size_t)k + 1);
        }
        *len = (size_t)k;
    }
    return t;
}

/* ---- the command --------------------------------------------------------------------------- */

void srv_cmd_complete(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r) {
    const char *why = NULL;
    rill_err_t err = RILL_OK;
    int32_t model = srv_model_of_req(s, c, r);
    if (model < 0) {
        return; /* replied */
    }
    bool chat = (r->present & RILL_PROTO_HAS_MESSAGES) != 0;
    if (chat == ((r->present & RILL_PROTO_HAS_PROMPT) != 0)) {
        srv_reply_err(s, &c->from, r->id, RILL_EINVAL, "complete takes a prompt or messages");
        return;
    }
    const srv_model_t *m = &s->models[model];
    if (m->is_asr) {
        srv_reply_err(s, &c->from, r->id, RILL_EINVAL,
                      "model is a Whisper model (a recognizer): complete needs a language model");
        return;
    }
    if (chat && m->chat == NULL) {
        srv_reply_err(s, &c->from, r->id, RILL_EUNSUPPORTED,
                      "this model has no chat template rill renders: use a plain prompt "
                      "(/v1/completions)");
        return;
    }
    /* the shared prompt and the question, as text */
    msgs_t ms = { 0 };
    char *sys = NULL, *q = NULL;
    size_t sys_len = 0, q_len = 0;
    if (chat) {
        if (!msgs_copy(&ms, r)) {
            err = RILL_ENOMEM;
        } else {
            bool has_sys = strcmp(ms.m[0].role, "system") == 0;
            const char *dflt = rill_chat_default_system(m->chat);
            rill_chat_msg_t sm = { .role = "system", .content = has_sys ? ms.m[0].content : dflt };
            if (sm.content != NULL) {
                sys = render(m->chat, &sm, 1, false, false, &sys_len);
                err = sys == NULL ? RILL_ENOMEM : err;
            }
            size_t first = has_sys ? 1 : 0;
            if (err == RILL_OK) {
                q = render(m->chat, ms.m + first, ms.n - first, true, true, &q_len);
                err = q == NULL ? RILL_ENOMEM : err;
            }
        }
    }
    int32_t *ids = NULL;
    int64_t n = 0;
    srv_tmpl_t *t = NULL;
    if (err == RILL_OK) {
        t = tmpl_get(s, model, sys != NULL ? sys : "", sys_len, chat, &err, &why);
    }
    if (err == RILL_OK) {
        n = chat ? tokens_of(m, q, q_len, false, true, &ids)
                 : tokens_of(m, r->prompt.p, r->prompt.len, true, false, &ids);
        err = n < 0 ? (rill_err_t)n : n == 0 ? RILL_EINVAL : RILL_OK;
        why = n == 0 ? "the prompt is empty" : "tokenizing failed";
    }
    int32_t n_max =
        r->present & RILL_PROTO_HAS_MAX_TOKENS ? r->max_tokens : COMPLETE_DEFAULT_TOKENS;
    char msg[200];
    if (err == RILL_OK) {
        int64_t room =
            (int64_t)s->p.default_window + (s->p.default_window > 0 ? s->p.default_sinks : 0);
        if (t->n_tokens + n + n_max > room) {
            snprintf(msg, sizeof msg,
                     "prompt of %lld tokens + max_tokens %d exceed a completion's context of "
                     "%lld tokens (rilld --window)",
                     (long long)(t->n_tokens + n), n_max, (long long)room);
            err = RILL_ERANGE;
            why = msg;
        }
    }
    pend_t *p = NULL;
    if (err == RILL_OK && (p = rill_calloc(RILL_MEM_SERVER, 1, sizeof *p)) == NULL) {
        err = RILL_ENOMEM;
        why = "out of memory";
    }
    if (err == RILL_OK) {
        p->tmpl = t;
        p->model = model;
        p->to = c->from;
        p->req_id = r->id;
        p->n_max = n_max;
        p->n_prompt = t->n_tokens + (int32_t)n;
        p->n_stop = r->n_stop;
        for (int32_t i = 0; i < r->n_stop; i++) {
            memcpy(p->stop[i], r->stop[i].p, r->stop[i].len);
            p->stop[i][r->stop[i].len] = '\0';
        }
        rill_tokenizer_stream_init(&p->stream, 0);
        rill_sampler_params_t sp = rill_sampler_default_params();
        sp.temp = r->present & RILL_PROTO_HAS_TEMPERATURE ? (float)r->temperature : 1.0f;
        sp.top_p = r->present & RILL_PROTO_HAS_TOP_P ? (float)r->top_p : 1.0f;
        sp.top_k = 0; /* OpenAI has neither: off */
        sp.min_p = 0.0f;
        sp.seed = r->present & RILL_PROTO_HAS_SEED ? r->seed : (uint64_t)rill_now_ns();
        rill_sched_ask_t a = { .question = ids,
                               .n_question = (int32_t)n,
                               .n_max = n_max,
                               .stop_at_eog = true,
                               .sampling = &sp,
                               .on_token = srv_cb_token,
                               .on_done = srv_cb_done,
                               .user = s };
        err = rill_sched_ask(s->sch, t->sid, &a, &p->rid);
        why = "the engine refused the completion";
    }
    rill_free(ids);
    rill_free(sys);
    rill_free(q);
    rill_free(ms.m);
    rill_free(ms.store);
    if (err != RILL_OK) {
        rill_free(p);
        srv_reply_err(s, &c->from, r->id, err, why != NULL ? why : rill_last_error(err));
        return;
    }
    t->in_flight++;
    p->next = s->pends;
    s->pends = p;
}

/* Where the first stop string starts in a[0, n), or n. */
static size_t stop_at(const pend_t *p, const char *a, size_t n) {
    size_t best = n;
    for (int32_t i = 0; i < p->n_stop; i++) {
        const char *at = memmem(a, n, p->stop[i], strlen(p->stop[i]));
        if (at != NULL && (size_t)(at - a) < best) {
            best = (size_t)(at - a);
        }
    }
    return best;
}

/* Bytes at the end of a[0, n) that could begin a stop string (held back). */
static size_t stop_prefix(const pend_t *p, const char *a, size_t n) {
    size_t hold = 0;
    for (int32_t i = 0; i < p->n_stop; i++) {
        size_t l = strlen(p->stop[i]);
        for (size_t k = l - 1 < n ? l - 1 : n; k > hold; k--) {
            if (memcmp(a + n - k, p->stop[i], k) == 0) {
                hold = k;
                break;
            }
        }
    }
    return hold;
}

/* Hands answer[p->sent, upto) to the door's progress hook as one piece. */
static void send_piece(srv_t *s, pend_t *p, size_t upto) {
    if (upto <= p->sent || p->to.door->progress == NULL) {
        p->sent = upto > p->sent ? upto : p->sent;
        return;
    }
    msgpack_sbuffer_clear(&s->out);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &s->out, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 1);
    srv_pk_str(&pk, "piece");
    srv_pk_strn(&pk, p->answer + p->sent, upto - p->sent);
    p->to.door->progress(s, p->to.door, &p->to, s->out.data, s->out.size);
    p->sent = upto;
}

void srv_complete_token(srv_t *s, pend_t *p, int32_t token) {
    if (p->cut) {
        return;
    }
    const srv_model_t *m = &s->models[p->model];
    p->n_decoded++;
    if (rill_tokenizer_is_eog(m->tok, token)) {
        p->eog = true; /* not part of the answer */
        return;
    }
    char piece[64];
    int64_t k = rill_tokenizer_stream_feed(m->tok, &p->stream, token, piece, sizeof piece);
    if (k <= 0) {
        return;
    }
    if (!srv_pend_append(p, piece, (size_t)k)) {
        p->cut = true; /* out of memory: end it; done reports what was kept */
        rill_sched_cancel(s->sch, p->rid);
        return;
    }
    size_t end = stop_at(p, p->answer, p->answer_len);
    if (end < p->answer_len) {
        p->answer_len = end;
        p->answer[end] = '\0';
        p->cut = true;
        rill_sched_cancel(s->sch, p->rid);
        send_piece(s, p, end);
        return;
    }
    send_piece(s, p, p->answer_len - stop_prefix(p, p->answer, p->answer_len));
}

void srv_complete_done(srv_t *s, pend_t *p, srv_done_t *e) {
    rill_sched_answer_t *a = &e->a;
    const srv_model_t *m = &s->models[p->model];
    bool stopped = p->cut || p->eog;
    if (p->cut && a->status == RILL_ECANCELED) {
        a->status = RILL_OK; /* ended by a stop string */
    }
    if (a->status == RILL_OK && !p->cut) {
        char piece[64];
        int64_t k = rill_tokenizer_stream_flush(&p->stream, piece, sizeof piece);
        if (k > 0) {
            (void)srv_pend_append(p, piece, (size_t)k);
        }
        send_piece(s, p, p->answer_len); /* what was held back for a stop string that never
                                            came */
    }
    msgpack_packer pk;
    int replying = s->replying; /* counted under complete, whatever command is running */
    s->replying = 1 + RILL_PROTO_COMPLETE;
    srv_reply_begin(s, &pk, p->req_id, a->status, a->status == RILL_OK ? "" : e->message);
    s->replying = replying;
    if (a->status == RILL_OK) {
        msgpack_pack_map(&pk, 5);
        srv_pk_str(&pk, "text");
        srv_pk_strn(&pk, p->answer != NULL ? p->answer : "", p->answer_len);
        srv_pk_kv_str(&pk, "finish_reason", stopped ? "stop" : "length");
        srv_pk_kv_int(&pk, "prompt_tokens", p->n_prompt);
        srv_pk_kv_int(&pk, "completion_tokens", p->n_decoded);
        srv_pk_kv_str(&pk, "model", m->name);
    } else {
        msgpack_pack_nil(&pk);
    }
    srv_reply_send(s, &p->to);
    p->tmpl->in_flight--;
    srv_drop_pend(s, p);
}
