/*
 * queries.c - questions and standing queries in rilld (contract: server_internal.h; wire:
 * docs/protocol.md `ask`, `standing.*`, events `token`, `answer`, `standing`).
 *
 * How a question is put to the model. With a chat template rill renders (model/rill_chat.h)
 * and no --question-format, the question is a user turn continuing the session's conversation
 * (rill_chat_apply_turns: no default system message, whose tokens every question would pay
 * for) followed by the assistant's header, tokenized with special tokens parsed, and the
 * answer ends at the model's end-of-turn token. Otherwise it is spliced into the fixed (or
 * given) format and the answer ends at a blank line or a new "Question:" (the model would go
 * on writing questions of its own): the socket thread sees that in the streamed text and
 * cancels the rest of the decoding (`cut`).
 *
 * An answer's text is decoded from the tokens its end carries (events.c), so it is complete
 * even when the token events were dropped; the streamed pieces come from the token events.
 */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "rill_utf8.h"
#include "server_internal.h"

pend_t *srv_find_pend(srv_t *s, rill_sched_rid_t rid) {
    for (pend_t *p = s->pends; p != NULL; p = p->next) {
        if (p->rid == rid) {
            return p;
        }
    }
    return NULL;
}

void srv_drop_pend(srv_t *s, pend_t *p) {
    for (pend_t **pp = &s->pends; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    }
    rill_free(p->answer);
    rill_free(p->qtext);
    rill_free(p->last);
    rill_free(p);
}

/* The prompt text of question q for model m: the chat turn, or the format. Caller frees;
 * NULL when out of memory. *fixed says which. */
static char *question_text(const srv_t *s, const srv_model_t *m, const rill_proto_str_t *q,
                           size_t *len, bool *fixed) {
    *fixed = s->p.question_format != NULL || m->chat == NULL;
    if (!*fixed) {
        char *content = rill_malloc(RILL_MEM_SERVER, q->len + 1);
        if (content == NULL) {
            return NULL;
        }
        memcpy(content, q->p, q->len);
        content[q->len] = '\0';
        rill_chat_msg_t msg = { .role = "user", .content = content };
        int64_t n = rill_chat_apply_turns(m->chat, &msg, 1, true, NULL, 0);
        char *text = n >= 0 ? rill_malloc(RILL_MEM_SERVER, (size_t)n + 1) : NULL;
        if (text != NULL) {
            rill_chat_apply_turns(m->chat, &msg, 1, true, text, (size_t)n + 1);
            *len = (size_t)n;
        }
        rill_free(content);
        return text;
    }
    const char *fmt =
        s->p.question_format != NULL ? s->p.question_format : RILL_SERVER_QUESTION_FORMAT;
    char *text = rill_malloc(RILL_MEM_SERVER, q->len + strlen(fmt) + 1);
    if (text == NULL) {
        return NULL;
    }
    const char *pct = strstr(fmt, "%s");
    size_t a = pct != NULL ? (size_t)(pct - fmt) : strlen(fmt);
    memcpy(text, fmt, a);
    memcpy(text + a, q->p, q->len);
    *len = a + q->len;
    if (pct != NULL) {
        size_t b = strlen(pct + 2);
        memcpy(text + *len, pct + 2, b);
        *len += b;
    }
    return text;
}

/* Tokenizes question q for the session's model. Returns the count or a negative error. */
static int64_t question_tokens(srv_t *s, const srv_sess_t *x, const rill_proto_str_t *q,
                               int32_t **out, bool *fixed) {
    const srv_model_t *m = &s->models[x->model];
    size_t len = 0;
    char *text = question_text(s, m, q, &len, fixed);
    if (text == NULL) {
        return RILL_ENOMEM;
    }
    bool special = !*fixed; /* the chat markers are special tokens; user text never is */
    int64_t n = rill_tokenizer_encode(m->tok, text, len, false, special, NULL, 0);
    *out = n > 0 ? rill_malloc(RILL_MEM_SERVER, (size_t)n * 4) : NULL;
    if (n > 0 && *out == NULL) {
        n = RILL_ENOMEM;
    } else if (n > 0) {
        n = rill_tokenizer_encode(m->tok, text, len, false, special, *out, n);
    }
    rill_free(text);
    return n;
}

rill_err_t srv_submit_query(srv_t *s, pend_t *p, const rill_proto_str_t *q, int32_t n_max,
                            const char **why) {
    int32_t *ids = NULL;
    int64_t n = question_tokens(s, p->sess, q, &ids, &p->fixed_format);
    if (n <= 0) {
        rill_free(ids);
        *why = "question: tokenizing failed";
        return n < 0 ? (rill_err_t)n : RILL_EINVAL;
    }
    if (p->standing && (p->qtext = rill_malloc(RILL_MEM_SERVER, q->len + 1)) == NULL) {
        rill_free(ids);
        *why = "out of memory";
        return RILL_ENOMEM;
    }
    if (p->standing) {
        memcpy(p->qtext, q->p, q->len);
        p->qtext[q->len] = '\0';
        p->qlen = q->len;
    }
    p->n_max = n_max;
    snprintf(p->question, sizeof p->question, "%.*s",
             (int)rill_utf8_cut(q->p, q->len, sizeof p->question - 1), q->p);
    rill_tokenizer_stream_init(&p->stream, 0);
    /* standing answers are published whole: their tokens need no events */
    rill_sched_ask_t a = { .question = ids,
                           .n_question = (int32_t)n,
                           .n_max = n_max,
                           .stop_at_eog = true,
                           .on_token = p->standing ? NULL : srv_cb_token,
                           .on_done = srv_cb_done,
                           .user = s,
                           .consistency =
                               p->evaluated ? RILL_SCHED_EVALUATED : RILL_SCHED_ACKNOWLEDGED };
    rill_err_t err = p->standing ? rill_sched_standing_register(s->sch, p->sess->sid, &a, &p->rid)
                                 : rill_sched_ask(s->sch, p->sess->sid, &a, &p->rid);
    rill_free(ids);
    if (err != RILL_OK) {
        rill_free(p->qtext);
        p->qtext = NULL;
        *why = "the engine refused the question";
        return err;
    }
    p->next = s->pends;
    s->pends = p;
    return RILL_OK;
}

bool srv_pend_append(pend_t *p, const char *t, size_t n) {
    if (p->answer_len + n + 1 > p->answer_cap) {
        size_t cap = (p->answer_len + n + 1) * 2;
        char *g = rill_realloc(RILL_MEM_SERVER, p->answer, cap);
        if (g == NULL) {
            return false;
        }
        p->answer = g;
        p->answer_cap = cap;
    }
    memcpy(p->answer + p->answer_len, t, n);
    p->answer_len += n;
    p->answer[p->answer_len] = '\0';
    return true;
}

/* Leading spaces and newlines of an answer, which are not part of it. */
static size_t answer_skip(const char *a, size_t n) {
    size_t skip = 0;
    while (skip < n && (a[skip] == ' ' || a[skip] == '\n')) {
        skip++;
    }
    return skip;
}

/* The length of a fixed-format answer a[0, n) (after answer_skip): up to "\n\n" or a new
 * "\nQuestion:". Both are ASCII, so the cut falls between characters. */
static size_t answer_len(const char *a, size_t n) {
    const char *cut = memmem(a, n, "\n\n", 2);
    const char *q = memmem(a, n, "\nQuestion:", 10);
    size_t m = n;
    m = cut != NULL && (size_t)(cut - a) < m ? (size_t)(cut - a) : m;
    m = q != NULL && (size_t)(q - a) < m ? (size_t)(q - a) : m;
    return m;
}

void srv_on_token(srv_t *s, pend_t *p, int32_t token) {
    if (p->tmpl != NULL) {
        srv_complete_token(s, p, token);
        return;
    }
    if (p->cut || p->standing) {
        return; /* decoded before the cancel reached the engine; standing: published whole */
    }
    char piece[64];
    const rill_tokenizer_t *tok = s->models[p->sess->model].tok;
    int64_t n = rill_tokenizer_stream_feed(tok, &p->stream, token, piece, sizeof piece);
    if (n <= 0) {
        return;
    }
    size_t before = p->answer_len;
    (void)srv_pend_append(p, piece, (size_t)n);
    if (p->fixed_format) {
        size_t skip = answer_skip(p->answer, p->answer_len);
        size_t end = skip + answer_len(p->answer + skip, p->answer_len - skip);
        if (end < p->answer_len) {
            /* the answer ended with this piece: the engine need not decode the rest; publish
             * what of the piece is still answer (whole characters: the end is ASCII) */
            p->cut = true;
            rill_sched_cancel(s->sch, p->rid);
            n = end > before ? (int64_t)(end - before) : 0;
            if (n == 0) {
                return;
            }
        }
    }
    msgpack_packer pk;
    srv_event_begin(s, &pk, 2, ++p->sess->seq_token, p->sess, "token");
    srv_pk_kv_int(&pk, "rid", (int64_t)p->req_id); /* the ask's request id, as the client knows */
    srv_pk_str(&pk, "piece");
    srv_pk_strn(&pk, piece, (size_t)n);
    srv_publish(s, p->sess, "token");
    if (p->to.door != NULL && p->to.door->progress != NULL) {
        p->to.door->progress(s, p->to.door, &p->to, s->out.data, s->out.size);
    }
}

/* The text of tokens[0, n) of model m into p->answer (replacing it). */
static void decode_answer(const srv_model_t *m, pend_t *p, const int32_t *tokens, int32_t n) {
    rill_tokenizer_stream_t st;
    rill_tokenizer_stream_init(&st, 0);
    p->answer_len = 0;
    char piece[64];
    for (int32_t i = 0; i < n; i++) {
        int64_t k = rill_tokenizer_stream_feed(m->tok, &st, tokens[i], piece, sizeof piece);
        if (k > 0) {
            (void)srv_pend_append(p, piece, (size_t)k);
        }
    }
    int64_t k = rill_tokenizer_stream_flush(&st, piece, sizeof piece);
    if (k > 0) {
        (void)srv_pend_append(p, piece, (size_t)k);
    }
}

/* The answer's text: without leading blanks and, for the fixed format, up to its end; for a
 * chat turn without the end-of-turn marker if the detokenizer spelled it. */
static void answer_span(const srv_model_t *m, const pend_t *p, const char **text, size_t *len) {
    const char *t = p->answer != NULL ? p->answer : "";
    size_t skip = answer_skip(t, p->answer_len);
    size_t n = p->answer_len - skip;
    if (p->fixed_format) {
        n = answer_len(t + skip, n);
    } else if (m->chat != NULL) {
        const char *eot = rill_chat_end_of_turn(m->chat);
        const char *at = memmem(t + skip, n, eot, strlen(eot));
        n = at != NULL ? (size_t)(at - (t + skip)) : n;
        while (n > 0 && (t[skip + n - 1] == '\n' || t[skip + n - 1] == ' ')) {
            n--;
        }
    }
    *text = t + skip;
    *len = n;
}

static void standing_done(srv_t *s, pend_t *p, const rill_sched_answer_t *a, const char *text,
                          size_t len) {
    if (a->status == RILL_OK) {
        rill_sched_session_info_t info;
        int64_t dv = rill_sched_session_info(s->sch, p->sess->sid, &info) == RILL_OK ? info.version
                                                                                     : a->version;
        msgpack_packer pk;
        srv_event_begin(s, &pk, 7, ++p->sess->seq_standing, p->sess, "standing");
        srv_pk_kv_int(&pk, "qid", (int64_t)p->rid);
        srv_pk_kv_str(&pk, "question", p->question);
        srv_pk_str(&pk, "answer");
        srv_pk_strn(&pk, text, len);
        srv_pk_kv_int(&pk, "version", a->version);
        srv_pk_kv_dbl(&pk, "compute_ms", (double)a->compute_ns / 1e6);
        srv_pk_kv_dbl(&pk, "age_ms", (double)(rill_now_ns() - (uint64_t)a->done_ns) / 1e6);
        srv_pk_kv_int(&pk, "data_version", dv);
        srv_publish(s, p->sess, "standing");
        char *keep = rill_malloc(RILL_MEM_SERVER, len + 1);
        if (keep != NULL) { /* for standing.list; without memory it keeps the older one */
            memcpy(keep, text, len);
            keep[len] = '\0';
            rill_free(p->last);
            p->last = keep;
            p->last_len = len;
            p->last_version = a->version;
        }
    }
    p->answer_len = 0; /* the next refresh starts afresh */
}

void srv_on_done(srv_t *s, pend_t *p, srv_done_t *e) {
    if (p->tmpl != NULL) {
        srv_complete_done(s, p, e);
        return;
    }
    rill_sched_answer_t *a = &e->a;
    const srv_model_t *m = &s->models[p->sess->model];
    decode_answer(m, p, e->tokens, a->n_tokens);
    if (p->cut && a->status == RILL_ECANCELED) {
        /* cancelled by srv_on_token once the answer was complete */
        a->status = RILL_OK;
        s->asks_cut++; /* the engine counts it as cancelled, not as answered */
    }
    const char *text;
    size_t len;
    answer_span(m, p, &text, &len);
    if (p->standing) {
        standing_done(s, p, a, text, len);
        return;
    }
    msgpack_packer pk;
    if (a->status == RILL_OK) {
        rill_hist_record(&s->ttft, a->ttft_ns > 0 ? (uint64_t)a->ttft_ns : 0);
        srv_event_begin(s, &pk, 7, ++p->sess->seq_answer, p->sess, "answer");
        srv_pk_kv_int(&pk, "rid", (int64_t)p->req_id);
        srv_pk_str(&pk, "answer");
        srv_pk_strn(&pk, text, len);
        srv_pk_kv_dbl(&pk, "ttft_ms", (double)a->ttft_ns / 1e6);
        srv_pk_kv_dbl(&pk, "total_ms", (double)a->total_ns / 1e6);
        srv_pk_kv_int(&pk, "version", a->version);
        srv_pk_kv_int(&pk, "backlog", a->backlog);
        srv_pk_kv_dbl(&pk, "ttft_compute_ms", (double)a->ttft_compute_ns / 1e6);
        srv_publish(s, p->sess, "answer");
    }
    int replying = s->replying; /* this may run inside another command (a close drains) */
    s->replying = 1 + RILL_PROTO_ASK;
    srv_reply_begin(s, &pk, p->req_id, a->status, a->status == RILL_OK ? "" : e->message);
    s->replying = replying;
    if (a->status == RILL_OK) {
        msgpack_pack_map(&pk, 10);
        srv_pk_str(&pk, "answer");
        srv_pk_strn(&pk, text, len);
        srv_pk_kv_int(&pk, "tokens", a->n_tokens);
        srv_pk_kv_int(&pk, "version", a->version);
        srv_pk_kv_int(&pk, "context", a->n_context);
        srv_pk_kv_dbl(&pk, "ttft_ms", (double)a->ttft_ns / 1e6);
        srv_pk_kv_dbl(&pk, "total_ms", (double)a->total_ns / 1e6);
        srv_pk_kv_int(&pk, "backlog", a->backlog);
        srv_pk_kv_dbl(&pk, "ttft_compute_ms", (double)a->ttft_compute_ns / 1e6);
        srv_pk_str(&pk, "cached");
        a->cached ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
        srv_pk_str(&pk, "consistency");
        srv_pk_str(&pk, p->evaluated ? "evaluated" : "acknowledged");
    } else {
        msgpack_pack_nil(&pk);
    }
    srv_reply_send(s, &p->to);
    srv_drop_pend(s, p);
}

/* ---- the commands ---------------------------------------------------------------------------- */

void srv_cmd_ask(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r, srv_sess_t *x,
                 bool standing) {
    pend_t *p = rill_calloc(RILL_MEM_SERVER, 1, sizeof *p);
    if (p == NULL) {
        srv_reply_err(s, &c->from, r->id, RILL_ENOMEM, "out of memory");
        return;
    }
    p->standing = standing;
    p->evaluated = (r->present & RILL_PROTO_HAS_CONSISTENCY) != 0 && r->evaluated;
    p->sess = x;
    p->to = c->from;
    p->req_id = r->id;
    const char *why = "";
    rill_err_t err = srv_submit_query(
        s, p, &r->question, r->present & RILL_PROTO_HAS_MAX_TOKENS ? r->max_tokens : 48, &why);
    if (err != RILL_OK) {
        rill_free(p);
        srv_reply_err(s, &c->from, r->id, err, why);
        return;
    }
    if (standing) {
        /* registered only once the state file lists it: a restart must not lose it */
        if ((err = srv_write_standing(s, x)) != RILL_OK) {
            (void)rill_sched_standing_unregister(s->sch, p->rid);
            srv_events_drain(s);
            srv_drop_pend(s, p);
            srv_reply_err(s, &c->from, r->id, err, "writing the session's standing queries failed");
            return;
        }
        msgpack_packer pk;
        srv_reply_begin(s, &pk, r->id, RILL_OK, "");
        msgpack_pack_map(&pk, 1);
        srv_pk_kv_int(&pk, "qid", (int64_t)p->rid);
        srv_reply_send(s, &c->from);
    }
}

void srv_cmd_unregister(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r, srv_sess_t *x) {
    pend_t *p = srv_find_pend(s, r->qid);
    if (p == NULL || !p->standing || p->sess != x) {
        srv_reply_err(s, &c->from, r->id, RILL_ENOTFOUND, "no such standing query on the session");
        return;
    }
    p->unlisted = true; /* the state file first: a restart must not bring it back */
    rill_err_t err = srv_write_standing(s, x);
    if (err != RILL_OK) {
        p->unlisted = false;
        srv_reply_err(s, &c->from, r->id, err, "writing the session's standing queries failed");
        return;
    }
    err = rill_sched_standing_unregister(s->sch, r->qid);
    srv_events_drain(s);
    srv_drop_pend(s, p);
    srv_reply_err(s, &c->from, r->id, err, "");
}

void srv_cmd_standing_list(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r,
                           srv_sess_t *x) {
    rill_sched_standing_info_t info[64];
    int64_t n = rill_sched_standing_list(s->sch, x->sid, info, 64);
    if (n < 0) {
        srv_reply_err(s, &c->from, r->id, (rill_err_t)n, "");
        return;
    }
    n = n < 64 ? n : 64;
    msgpack_packer pk;
    srv_reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_array(&pk, (size_t)n);
    uint64_t now = rill_now_ns();
    for (int64_t i = 0; i < n; i++) {
        pend_t *p = srv_find_pend(s, info[i].qid);
        msgpack_pack_map(&pk, 9);
        srv_pk_kv_int(&pk, "qid", (int64_t)info[i].qid);
        srv_pk_kv_str(&pk, "question", p != NULL ? p->question : "");
        srv_pk_str(&pk, "answer"); /* the latest one published, nil before the first */
        if (p != NULL && p->last != NULL) {
            srv_pk_strn(&pk, p->last, p->last_len);
        } else {
            msgpack_pack_nil(&pk);
        }
        srv_pk_kv_int(&pk, "answer_version", p != NULL && p->last != NULL ? p->last_version : -1);
        srv_pk_kv_int(&pk, "version", info[i].version);
        srv_pk_kv_dbl(&pk, "age_ms",
                      info[i].done_ns > 0 ? (double)(now - (uint64_t)info[i].done_ns) / 1e6 : -1);
        srv_pk_kv_int(&pk, "refreshes", info[i].refreshes);
        srv_pk_kv_int(&pk, "abandoned", info[i].abandoned);
        srv_pk_kv_int(&pk, "cache_hits", info[i].cache_hits);
    }
    srv_reply_send(s, &c->from);
}
