/*
 * commands.c - rilld's transport-neutral command layer (contract: server_internal.h; wire:
 * docs/protocol.md).
 *
 * A front door hands in one request frame (msgpack, the protocol's encoding) with who sent it
 * and where its reply goes (srv_call_t). srv_handle decodes and checks it once (wire/'s
 * rill_proto_decode: structure, types, ranges, names), checks that the caller owns the session
 * it names, carries the command out through the scheduler, and encodes the reply - also
 * msgpack - for the door to send as it is or to re-encode for its transport; events are
 * encoded once and go to every door (srv_publish). So a command is written once, whatever door
 * it came through, and ownership is checked in one place. Questions and standing queries are
 * queries.c's.
 *
 * Every string packed is valid UTF-8 (srv_pk_str: rill_msgpack_pack_str escapes what is not),
 * whatever bytes a client sent.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "rill_msgpack.h"
#include "server_internal.h"

/* ---- encoding ------------------------------------------------------------------------------ */

void srv_pk_str(msgpack_packer *pk, const char *str) {
    rill_msgpack_pack_str(pk, str, strlen(str));
}

void srv_pk_strn(msgpack_packer *pk, const char *str, size_t n) {
    rill_msgpack_pack_str(pk, str, n);
}

void srv_pk_kv_int(msgpack_packer *pk, const char *k, int64_t v) {
    srv_pk_str(pk, k);
    msgpack_pack_int64(pk, v);
}

void srv_pk_kv_str(msgpack_packer *pk, const char *k, const char *v) {
    srv_pk_str(pk, k);
    srv_pk_str(pk, v);
}

void srv_pk_kv_dbl(msgpack_packer *pk, const char *k, double v) {
    srv_pk_str(pk, k);
    msgpack_pack_double(pk, v);
}

void srv_reply_begin(srv_t *s, msgpack_packer *pk, uint64_t id, rill_err_t st,
                     const char *message) {
    msgpack_sbuffer_clear(&s->out);
    msgpack_packer_init(pk, &s->out, msgpack_sbuffer_write);
    msgpack_pack_map(pk, 5);
    srv_pk_kv_int(pk, "v", RILL_PROTO_VERSION);
    srv_pk_str(pk, "id");
    msgpack_pack_uint64(pk, id);
    if (st != RILL_OK && s->replying > 0) {
        s->cmd_errors[s->replying - 1]++;
    }
    srv_pk_kv_str(pk, "status", rill_err_name(st));
    srv_pk_kv_str(pk, "message", message != NULL ? message : "");
    srv_pk_str(pk, "result");
}

void srv_reply_send(srv_t *s, const srv_addr_t *to) {
    to->door->reply(s, to->door, to, s->out.data, s->out.size);
}

void srv_reply_err(srv_t *s, const srv_addr_t *to, uint64_t id, rill_err_t err, const char *msg) {
    msgpack_packer pk;
    srv_reply_begin(s, &pk, id, err, msg);
    msgpack_pack_nil(&pk);
    srv_reply_send(s, to);
}

void srv_event_begin(srv_t *s, msgpack_packer *pk, int n_fields, uint64_t seq, const srv_sess_t *x,
                     const char *kind) {
    msgpack_sbuffer_clear(&s->out);
    msgpack_packer_init(pk, &s->out, msgpack_sbuffer_write);
    msgpack_pack_map(pk, (size_t)(4 + n_fields));
    srv_pk_kv_int(pk, "v", RILL_PROTO_VERSION);
    srv_pk_kv_int(pk, "seq", (int64_t)seq);
    srv_pk_kv_str(pk, "session", x->name);
    srv_pk_kv_str(pk, "kind", kind);
}

void srv_publish(srv_t *s, const srv_sess_t *x, const char *kind) {
    char topic[128];
    snprintf(topic, sizeof topic, "%s/%s", x->name, kind);
    for (int i = 0; i < s->n_doors; i++) {
        s->doors[i]->publish(s, s->doors[i], topic, s->out.data, s->out.size);
    }
}

/* ---- sessions ------------------------------------------------------------------------------ */

srv_sess_t *srv_find_sess(srv_t *s, const char *name, size_t len) {
    for (srv_sess_t *x = s->sessions; x != NULL; x = x->next) {
        if (strlen(x->name) == len && memcmp(x->name, name, len) == 0) {
            return x;
        }
    }
    return NULL;
}

void srv_link_sess(srv_t *s, srv_sess_t *x) {
    srv_sess_t **pp = &s->sessions;
    while (*pp != NULL) {
        pp = &(*pp)->next;
    }
    *pp = x;
}

srv_sess_t *srv_new_sess(srv_t *s) {
    srv_sess_t *x = rill_calloc(RILL_MEM_SERVER, 1, sizeof *x);
    rill_market_gov_params_t gp = rill_market_gov_default_params();
    gp.target_lines_per_s = s->p.tick_rate;
    if (x == NULL || rill_market_gov_new(&gp, &x->gov) != RILL_OK) {
        rill_free(x);
        return NULL;
    }
    x->key = ++s->next_key;
    x->asr_model = -1;
    return x;
}

void srv_free_sess(srv_sess_t *x) {
    /* the recognizer itself is gone by now (srv_speech_detach, or the scheduler's end) */
    rill_market_gov_destroy(&x->gov);
    rill_audio_packet_decoder_destroy(&x->pdec);
    rill_free(x->asr_ctx);
    rill_free(x->pcm);
    rill_free(x);
}

/* The session a request names, owned by the caller; replies with the error otherwise. */
static srv_sess_t *own_sess(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r) {
    srv_sess_t *x = srv_find_sess(s, r->session.p, r->session.len);
    if (x == NULL) {
        srv_reply_err(s, &c->from, r->id, RILL_ENOTFOUND, "no such session");
        return NULL;
    }
    if (strcmp(x->owner, c->owner) != 0) {
        srv_reply_err(s, &c->from, r->id, RILL_EPERM, "not your session");
        return NULL;
    }
    return x;
}

/* The name a session.create asks for (or a fresh one); false (replied) when it is taken. */
static bool pick_name(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r, char *name,
                      size_t cap) {
    if (r->present & RILL_PROTO_HAS_SESSION) {
        snprintf(name, cap, "%.*s", (int)r->session.len, r->session.p);
    } else {
        do {
            snprintf(name, cap, "s%llu", (unsigned long long)++s->next_name);
        } while (srv_find_sess(s, name, strlen(name)) != NULL);
    }
    if (srv_find_sess(s, name, strlen(name)) != NULL) {
        srv_reply_err(s, &c->from, r->id, RILL_EEXIST, "a session of that name exists");
        return false;
    }
    for (const tomb_t *t = s->tombs; t != NULL; t = t->next) {
        if (strcmp(t->name, name) == 0 && strcmp(t->owner, c->owner) != 0) {
            srv_reply_err(s, &c->from, r->id, RILL_EEXIST,
                          "another key's session had that name (reserved until rilld restarts)");
            return false;
        }
    }
    return true;
}

/* The tokens of a session.create's system prompt for model m (*n = 0 without one). With a chat
 * template the prompt is the conversation's system turn. NULL with *n < 0 on failure. */
static int32_t *system_tokens(const srv_t *s, const srv_model_t *m, const rill_proto_req_t *r,
                              int64_t *n) {
    *n = 0;
    if (!(r->present & RILL_PROTO_HAS_SYSTEM)) {
        return NULL;
    }
    char *text = rill_malloc(RILL_MEM_SERVER, r->system.len + 1);
    if (text == NULL) {
        *n = RILL_ENOMEM;
        return NULL;
    }
    memcpy(text, r->system.p, r->system.len);
    text[r->system.len] = '\0';
    size_t len = r->system.len;
    bool chat = m->chat != NULL && s->p.question_format == NULL;
    if (chat) {
        rill_chat_msg_t msg = { .role = "system", .content = text };
        int64_t k = rill_chat_apply(m->chat, &msg, 1, false, NULL, 0);
        char *t = k >= 0 ? rill_malloc(RILL_MEM_SERVER, (size_t)k + 1) : NULL;
        if (t != NULL) {
            rill_chat_apply(m->chat, &msg, 1, false, t, (size_t)k + 1);
            len = (size_t)k;
        }
        rill_free(text);
        text = t;
    }
    int64_t k =
        text != NULL ? rill_tokenizer_encode(m->tok, text, len, true, chat, NULL, 0) : RILL_ENOMEM;
    int32_t *ids = k > 0 ? rill_malloc(RILL_MEM_SERVER, (size_t)k * 4) : NULL;
    if (k > 0 &&
        (ids == NULL || rill_tokenizer_encode(m->tok, text, len, true, chat, ids, k) != k)) {
        rill_free(ids);
        ids = NULL;
        k = RILL_ENOMEM;
    }
    rill_free(text);
    *n = k;
    return ids;
}

int32_t srv_model_of_req(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r) {
    if (!(r->present & RILL_PROTO_HAS_MODEL)) {
        /* complete needs a language model: the first one when the default is a recognizer */
        return r->cmd == RILL_PROTO_COMPLETE ? s->default_llm : 0;
    }
    int32_t model = srv_model_find(s, r->model.p, r->model.len);
    if (model < 0) {
        char msg[120];
        snprintf(msg, sizeof msg, "no model named %.*s (server.stats and GET /v1/models list them)",
                 (int)r->model.len, r->model.p);
        srv_reply_err(s, &c->from, r->id, RILL_ENOTFOUND, msg);
    }
    return model;
}

/* session.create on a Whisper model: a recognizer and no language-model state (not persisted:
 * the transcript goes out as events only). window, sinks and system have no meaning there. */
static void create_transcript_only(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r,
                                   const char *name, int32_t model) {
    if (r->present & (RILL_PROTO_HAS_WINDOW | RILL_PROTO_HAS_SINKS | RILL_PROTO_HAS_SYSTEM)) {
        srv_reply_err(s, &c->from, r->id, RILL_EINVAL,
                      "a session on a Whisper model is transcript-only: window, sinks and system "
                      "belong to a language model's session (create one with asr: NAME)");
        return;
    }
    srv_sess_t *x = srv_new_sess(s);
    if (x == NULL) {
        srv_reply_err(s, &c->from, r->id, RILL_ENOMEM, "out of memory");
        return;
    }
    snprintf(x->name, sizeof x->name, "%s", name);
    snprintf(x->owner, sizeof x->owner, "%s", c->owner);
    x->model = model;
    const char *why = "";
    rill_err_t err = srv_speech_attach(s, x, model, &why);
    if (err != RILL_OK) {
        char msg[RILL_ERR_DETAIL];
        snprintf(msg, sizeof msg, "recognizer: %s", why);
        srv_free_sess(x);
        srv_reply_err(s, &c->from, r->id, err, msg);
        return;
    }
    srv_link_sess(s, x);
    msgpack_packer pk;
    srv_reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_map(&pk, 3);
    srv_pk_kv_str(&pk, "session", x->name);
    srv_pk_kv_str(&pk, "model", s->models[model].name);
    srv_pk_kv_str(&pk, "asr", s->models[model].name);
    srv_reply_send(s, &c->from);
}

/* session.create with translate: a transcript-only recognizer of asr and a translation on the
 * language model `model` (server/translation.c; not persisted, like transcript-only sessions).
 * system is the translation's instruction, window its window; sinks are the instruction. */
static void create_translation(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r,
                               const char *name, int32_t model, int32_t asr) {
    if (r->present & RILL_PROTO_HAS_SINKS) {
        srv_reply_err(s, &c->from, r->id, RILL_EINVAL,
                      "a translation session's sinks are its instruction (system): sinks is not "
                      "taken with translate");
        return;
    }
    srv_sess_t *x = srv_new_sess(s);
    if (x == NULL) {
        srv_reply_err(s, &c->from, r->id, RILL_ENOMEM, "out of memory");
        return;
    }
    snprintf(x->name, sizeof x->name, "%s", name);
    snprintf(x->owner, sizeof x->owner, "%s", c->owner);
    x->model = model;
    char msg[RILL_ERR_DETAIL];
    rill_err_t err = srv_translation_start(s, x, r, msg, sizeof msg);
    if (err == RILL_OK) {
        const char *why = "";
        if ((err = srv_speech_attach(s, x, asr, &why)) != RILL_OK) {
            snprintf(msg, sizeof msg, "recognizer: %s", why);
            srv_translation_stop(s, x);
        }
    }
    if (err != RILL_OK) {
        srv_free_sess(x);
        srv_reply_err(s, &c->from, r->id, err, msg);
        return;
    }
    srv_link_sess(s, x);
    msgpack_packer pk;
    srv_reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_map(&pk, 4);
    srv_pk_kv_str(&pk, "session", x->name);
    srv_pk_kv_str(&pk, "model", s->models[model].name);
    srv_pk_kv_str(&pk, "asr", s->models[asr].name);
    srv_pk_str(&pk, "translate");
    srv_pk_strn(&pk, r->translate.p, r->translate.len);
    srv_reply_send(s, &c->from);
}

static void do_create(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r) {
    char name[RILL_PROTO_MAX_NAME + 1];
    if (!pick_name(s, c, r, name, sizeof name)) {
        return;
    }
    int32_t model = srv_model_of_req(s, c, r);
    if (model < 0) {
        return; /* replied */
    }
    int32_t asr = -1;
    if (r->present & RILL_PROTO_HAS_ASR) {
        asr = srv_model_find(s, r->asr.p, r->asr.len);
        char msg[160];
        if (asr < 0 || !s->models[asr].is_asr || s->models[model].is_asr) {
            snprintf(msg, sizeof msg,
                     asr < 0 ? "no model named %.*s (server.stats lists them)"
                     : !s->models[asr].is_asr
                         ? "args.asr: %.*s is not a Whisper model"
                         : "args.asr: the session's model is itself a recognizer (%.*s)",
                     (int)r->asr.len, r->asr.p);
            srv_reply_err(s, &c->from, r->id, asr < 0 ? RILL_ENOTFOUND : RILL_EINVAL, msg);
            return;
        }
    }
    if (r->present & RILL_PROTO_HAS_TRANSLATE) {
        if (asr < 0) {
            srv_reply_err(s, &c->from, r->id, RILL_EINVAL,
                          s->models[model].is_asr
                              ? "args.translate: name the language model that translates "
                                "(model: NAME) and the recognizer (asr: NAME)"
                              : "args.translate: a translation session needs a recognizer "
                                "(asr: NAME, a Whisper model)");
            return;
        }
        create_translation(s, c, r, name, model, asr);
        return;
    }
    if (s->models[model].is_asr) {
        create_transcript_only(s, c, r, name, model);
        return;
    }
    srv_sess_t *x = srv_new_sess(s);
    if (x == NULL) {
        srv_reply_err(s, &c->from, r->id, RILL_ENOMEM, "out of memory");
        return;
    }
    snprintf(x->name, sizeof x->name, "%s", name);
    snprintf(x->owner, sizeof x->owner, "%s", c->owner);
    x->model = model;
    x->window = r->present & RILL_PROTO_HAS_WINDOW ? (int32_t)r->window : s->p.default_window;
    x->sinks = r->present & RILL_PROTO_HAS_SINKS ? (int32_t)r->sinks
               : x->window > 0                   ? s->p.default_sinks
                                                 : 0;
    const srv_model_t *m = &s->models[model];
    int32_t n_ctx = rill_session_pool_n_ctx(m->pool);
    if (x->window > 0 && x->sinks + x->window > n_ctx - 256) {
        char msg[160];
        snprintf(msg, sizeof msg, "sinks %d + window %d exceed the model's context %d less 256",
                 x->sinks, x->window, n_ctx);
        srv_free_sess(x);
        srv_reply_err(s, &c->from, r->id, RILL_ERANGE, msg);
        return;
    }
    int64_t n_prompt = 0;
    int32_t *prompt = system_tokens(s, m, r, &n_prompt);
    if (n_prompt < 0) {
        srv_free_sess(x);
        srv_reply_err(s, &c->from, r->id, RILL_ENOMEM, "system prompt: tokenizing failed");
        return;
    }
    char logp[4096], base[4200], msg[RILL_ERR_DETAIL] = "";
    srv_state_path(s, name, ".log", logp, sizeof logp);
    unlink(logp); /* a leftover of a session that was closed */
    snprintf(base, sizeof base, "%s.base", logp);
    unlink(base);
    rill_sched_session_params_t sp = rill_sched_session_default_params();
    sp.model = m->sched;
    sp.session.window = x->window;
    sp.session.n_sink = x->window > 0 ? x->sinks : 0;
    sp.session.prompt = prompt;
    sp.session.n_prompt = (int32_t)n_prompt;
    sp.log_path = logp;
    sp.fsync = s->p.fsync;
    sp.pin = r->pin;
    x->asr_model = asr; /* for the metadata; the recognizer comes after */
    rill_err_t err = srv_session_create(s, &sp, &x->sid);
    rill_free(prompt);
    if (err != RILL_OK) {
        snprintf(msg, sizeof msg, "%s", rill_last_error(err));
    } else if ((err = srv_write_meta(s, x)) != RILL_OK) {
        snprintf(msg, sizeof msg, "writing the session's metadata failed");
        rill_sched_session_close(s->sch, x->sid);
    } else if (asr >= 0) {
        const char *why = "";
        x->asr_model = -1;
        if ((err = srv_speech_attach(s, x, asr, &why)) != RILL_OK) {
            snprintf(msg, sizeof msg, "recognizer: %s", why);
            rill_sched_session_close(s->sch, x->sid);
            srv_remove_files(s, x->name);
        }
    }
    if (err != RILL_OK) {
        srv_free_sess(x);
        srv_reply_err(s, &c->from, r->id, err, msg);
        return;
    }
    srv_link_sess(s, x);
    msgpack_packer pk;
    srv_reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_map(&pk, asr >= 0 ? 3 : 2);
    srv_pk_kv_str(&pk, "session", x->name);
    srv_pk_kv_str(&pk, "model", m->name);
    if (asr >= 0) {
        srv_pk_kv_str(&pk, "asr", s->models[asr].name);
    }
    srv_reply_send(s, &c->from);
}

static void do_close(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r, srv_sess_t *x) {
    /* its recognizer first (its last updates are published), then pending requests of it end
     * through the engine (ECANCELED) */
    srv_speech_detach(s, x);
    srv_translation_stop(s, x);
    rill_err_t err = x->sid != 0 ? rill_sched_session_close(s->sch, x->sid) : RILL_OK;
    srv_events_drain(s);
    for (srv_sess_t **pp = &s->sessions; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == x) {
            *pp = x->next;
            break;
        }
    }
    for (pend_t *p = s->pends, *nx; p != NULL; p = nx) {
        nx = p->next;
        if (p->sess == x) {
            srv_drop_pend(s, p);
        }
    }
    srv_remove_files(s, x->name);
    if (s->curve) {
        bool known = false;
        for (const tomb_t *t = s->tombs; t != NULL && !known; t = t->next) {
            known = strcmp(t->name, x->name) == 0; /* then its owner is x's too */
        }
        tomb_t *t = known ? NULL : rill_calloc(RILL_MEM_SERVER, 1, sizeof *t);
        if (t != NULL) {
            snprintf(t->name, sizeof t->name, "%s", x->name);
            snprintf(t->owner, sizeof t->owner, "%s", x->owner);
            t->next = s->tombs;
            s->tombs = t;
        } else if (!known) {
            RILL_LOGE("rilld: out of memory: the name %s is not reserved", x->name);
        }
    }
    srv_free_sess(x);
    srv_reply_err(s, &c->from, r->id, err, "");
}

static void do_list(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r) {
    int n = 0;
    for (srv_sess_t *y = s->sessions; y != NULL; y = y->next) {
        n += strcmp(y->owner, c->owner) == 0;
    }
    msgpack_packer pk;
    srv_reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_array(&pk, (size_t)n);
    for (srv_sess_t *y = s->sessions; y != NULL; y = y->next) {
        if (strcmp(y->owner, c->owner) == 0) {
            srv_pk_str(&pk, y->name);
        }
    }
    srv_reply_send(s, &c->from);
}

static void do_stats(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r, srv_sess_t *x) {
    rill_sched_session_info_t info;
    memset(&info, 0, sizeof info);
    rill_err_t err = x->sid != 0 ? rill_sched_session_info(s->sch, x->sid, &info) : RILL_OK;
    if (err != RILL_OK) {
        srv_reply_err(s, &c->from, r->id, err, "");
        return;
    }
    msgpack_packer pk;
    srv_reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_map(&pk, 19);
    srv_speech_pack_stats(s, &pk, x);
    srv_translation_pack_stats(x, &pk);
    srv_pk_str(&pk, "asleep");
    info.asleep ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
    srv_pk_str(&pk, "pinned");
    info.pinned ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
    srv_pk_kv_str(&pk, "sleep_tier",
                  !info.asleep                            ? "awake"
                  : info.tier == RILL_SCHED_TIER_SNAPSHOT ? "snapshot"
                                                          : "log");
    srv_pk_kv_int(&pk, "wakes", info.wakes);
    srv_pk_kv_dbl(&pk, "last_wake_ms", (double)info.last_wake_ns / 1e6);
    srv_pk_str(&pk, "transcript_only");
    if (x->sid == 0) {
        msgpack_pack_true(&pk);
    } else {
        msgpack_pack_false(&pk);
    }
    srv_pk_kv_int(&pk, "version", info.version);
    srv_pk_kv_int(&pk, "n_seen", info.st.n_seen);
    srv_pk_kv_int(&pk, "n_resident", info.st.n_resident);
    srv_pk_kv_int(&pk, "n_pending", info.st.n_pending);
    srv_pk_kv_int(&pk, "pages", info.st.pages);
    srv_pk_kv_int(&pk, "bytes", info.st.bytes);
    srv_pk_kv_int(&pk, "window", x->window);
    srv_pk_kv_int(&pk, "sinks", x->sinks);
    srv_pk_kv_int(&pk, "standing", info.n_standing);
    srv_pk_kv_int(&pk, "held_text", (int64_t)info.held_text);
    srv_pk_kv_str(&pk, "model", s->models[x->model].name);
    srv_reply_send(s, &c->from);
}

static void do_snapshot(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r, srv_sess_t *x) {
    char path[4096];
    srv_state_path(s, x->name, ".snap", path, sizeof path);
    rill_err_t err = rill_sched_session_snapshot(s->sch, x->sid, path);
    if (err != RILL_OK) {
        srv_reply_err(s, &c->from, r->id, err, rill_last_error(err));
        return;
    }
    msgpack_packer pk;
    srv_reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_map(&pk, 1);
    srv_pk_kv_str(&pk, "path", path);
    srv_reply_send(s, &c->from);
}

static void reply_version(srv_t *s, const srv_call_t *c, uint64_t id, int64_t version) {
    msgpack_packer pk;
    srv_reply_begin(s, &pk, id, RILL_OK, "");
    msgpack_pack_map(&pk, 1);
    srv_pk_kv_int(&pk, "version", version);
    srv_reply_send(s, &c->from);
}

static void do_ingest_text(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r,
                           srv_sess_t *x) {
    int64_t version = 0;
    rill_err_t err =
        rill_sched_ingest_text(s->sch, x->sid, r->text.p, r->text.len, r->flush, &version);
    if (err != RILL_OK) {
        srv_reply_err(s, &c->from, r->id, err, rill_last_error(err));
        return;
    }
    reply_version(s, c, r->id, version);
}

static void do_ingest_replace(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r,
                              srv_sess_t *x) {
    int64_t version = 0;
    rill_err_t err = rill_sched_ingest_replace(s->sch, x->sid, r->from_version, r->text.p,
                                               r->text.len, &version);
    if (err != RILL_OK) {
        srv_reply_err(s, &c->from, r->id, err, rill_last_error(err));
        return;
    }
    reply_version(s, c, r->id, version);
}

static void do_ingest_ticks(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r,
                            srv_sess_t *x) {
    rill_tick_decoder_stats_t st0 = rill_tick_decoder_stats(s->tdec);
    int64_t n = rill_tick_decode(s->tdec, r->ticks, r->ticks_len, s->ticks, SRV_MAX_TICKS);
    if (n < 0) {
        srv_reply_err(s, &c->from, r->id, (rill_err_t)n, rill_last_error((rill_err_t)n));
        return;
    }
    int64_t rejected = rill_tick_decoder_stats(s->tdec).rejected - st0.rejected, accepted = 0;
    /* the governor's lines, concatenated: at most one tick line and a bar per symbol each */
    size_t cap = (size_t)(n + 1) * RILL_MARKET_LINE_MAX * 2;
    char *text = rill_malloc(RILL_MEM_SERVER, cap);
    if (text == NULL) {
        srv_reply_err(s, &c->from, r->id, RILL_ENOMEM, "out of memory");
        return;
    }
    size_t len = 0;
    int64_t lines = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *t = NULL;
        int64_t m = rill_market_gov_push(x->gov, &s->ticks[i], &t);
        if (m < 0 || len + (size_t)m > cap) {
            rejected++;
            continue;
        }
        accepted++;
        memcpy(text + len, t, (size_t)m);
        len += (size_t)m;
        for (int64_t j = 0; j < m; j++) {
            lines += t[j] == '\n';
        }
    }
    /* nothing accepted: the version is read with an empty input, in one engine pass too */
    int64_t version = 0;
    rill_err_t err = rill_sched_ingest_text(s->sch, x->sid, text, len, false, &version);
    rill_free(text);
    if (err != RILL_OK) {
        srv_reply_err(s, &c->from, r->id, err, rill_last_error(err));
        return;
    }
    msgpack_packer pk;
    srv_reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_map(&pk, 4);
    srv_pk_kv_int(&pk, "version", version);
    srv_pk_kv_int(&pk, "accepted", accepted);
    srv_pk_kv_int(&pk, "rejected", rejected);
    srv_pk_kv_int(&pk, "lines", lines);
    srv_reply_send(s, &c->from);
}

/* server.stats' "models": per model its name, file, sessions and engine counters. */
static void pack_models(srv_t *s, msgpack_packer *pk) {
    srv_pk_str(pk, "models");
    msgpack_pack_array(pk, (size_t)s->n_models);
    for (int32_t i = 0; i < s->n_models; i++) {
        rill_sched_model_info_t mi;
        if (s->models[i].sched < 0 ||
            rill_sched_model_info(s->sch, s->models[i].sched, &mi) != RILL_OK) {
            memset(&mi, 0, sizeof mi);
        }
        if (s->models[i].is_asr) { /* its sessions: those with a recognizer of it */
            for (const srv_sess_t *y = s->sessions; y != NULL; y = y->next) {
                mi.n_sessions += y->asr_model == i;
            }
        }
        msgpack_pack_map(pk, 11);
        srv_pk_kv_str(pk, "name", s->models[i].name);
        srv_pk_kv_str(pk, "kind", s->models[i].is_asr ? "asr" : "llm");
        srv_pk_kv_str(pk, "file", s->models[i].path);
        srv_pk_kv_str(pk, "chat_template",
                      s->models[i].chat != NULL
                          ? rill_chat_template_name(rill_chat_kind(s->models[i].chat))
                          : "none");
        srv_pk_kv_int(pk, "sessions", mi.n_sessions);
        srv_pk_kv_int(pk, "steps", mi.steps);
        srv_pk_kv_dbl(pk, "busy_ms", (double)mi.busy_ns / 1e6);
        srv_pk_kv_int(pk, "tokens_ingest", mi.tokens[RILL_SCHED_INGEST]);
        srv_pk_kv_int(pk, "tokens_decode", mi.tokens[RILL_SCHED_DECODE]);
        srv_pk_kv_int(pk, "free_pages", mi.free_pages);
        srv_pk_kv_int(pk, "total_pages", mi.total_pages);
    }
}

static void do_server_stats(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r) {
    rill_sched_stats_t st;
    rill_sched_stats(s->sch, &st);
    int n_sess = 0;
    for (srv_sess_t *x = s->sessions; x != NULL; x = x->next) {
        n_sess++;
    }
    msgpack_packer pk;
    srv_reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_map(&pk, 37);
    srv_pk_kv_int(&pk, "sessions", n_sess);
    srv_pk_kv_int(&pk, "sessions_awake", st.awake);
    srv_pk_kv_int(&pk, "sessions_asleep", st.asleep);
    srv_pk_kv_int(&pk, "sessions_asleep_log", st.asleep_log);
    srv_pk_kv_int(&pk, "sleep_disk_bytes", st.sleep_disk_bytes);
    srv_pk_kv_int(&pk, "sleeps", st.sleeps);
    srv_pk_kv_int(&pk, "wakes", st.wakes);
    srv_pk_kv_int(&pk, "wakes_log", st.wakes_log);
    srv_pk_kv_int(&pk, "wake_fallbacks", st.wake_fallbacks);
    srv_pk_kv_int(&pk, "wake_errors", st.wake_errors);
    srv_pk_kv_int(&pk, "sleep_errors", st.sleep_errors);
    srv_pk_kv_dbl(&pk, "wake_ms_p50", (double)rill_hist_quantile(&st.wake_ns, 0.5) / 1e6);
    srv_pk_kv_dbl(&pk, "wake_ms_p99", (double)rill_hist_quantile(&st.wake_ns, 0.99) / 1e6);
    srv_pk_kv_int(&pk, "requests", s->requests);
    srv_pk_kv_int(&pk, "bad_requests", s->bad_requests);
    srv_pk_kv_int(&pk, "events", s->events);
    srv_pk_kv_int(&pk, "event_drops", s->event_drops);
    srv_pk_kv_int(&pk, "reply_drops", s->reply_drops);
    srv_pk_kv_int(&pk, "engine_drops", atomic_load(&s->engine_drops));
    srv_pk_kv_int(&pk, "steps", st.steps);
    srv_pk_kv_dbl(&pk, "busy_ms", (double)st.busy_ns / 1e6);
    srv_pk_kv_dbl(&pk, "idle_ms", (double)st.idle_ns / 1e6);
    srv_pk_kv_int(&pk, "tokens_decode", st.tokens[RILL_SCHED_DECODE]);
    srv_pk_kv_int(&pk, "tokens_prefill", st.tokens[RILL_SCHED_PREFILL]);
    srv_pk_kv_int(&pk, "tokens_ingest", st.tokens[RILL_SCHED_INGEST]);
    srv_pk_kv_int(&pk, "tokens_standing", st.tokens[RILL_SCHED_STANDING]);
    srv_pk_kv_int(&pk, "free_pages", st.free_pages);
    srv_pk_kv_int(&pk, "total_pages", st.total_pages);
    srv_pk_kv_int(&pk, "reserved_pages", st.reserved_pages);
    srv_pk_kv_int(&pk, "questions", st.questions + s->asks_cut);
    srv_pk_kv_int(&pk, "standing_refreshes", st.standing_refreshes);
    srv_pk_kv_int(&pk, "standing_cache_hits", st.standing_cache_hits);
    srv_pk_kv_int(&pk, "standing_deferred_interval", st.standing_deferred_interval);
    srv_pk_kv_int(&pk, "standing_deferred_share", st.standing_deferred_share);
    srv_pk_kv_dbl(&pk, "standing_share", st.standing_share);
    srv_pk_kv_int(&pk, "admission_rejects", st.admission_rejects);
    pack_models(s, &pk);
    srv_reply_send(s, &c->from);
}

void srv_handle_bad(srv_t *s, const srv_call_t *c, uint64_t id, rill_err_t err, const char *msg) {
    s->requests++;
    s->bad_requests++;
    s->cmd_requests[SRV_CMD_INVALID]++;
    s->replying = 1 + SRV_CMD_INVALID;
    srv_reply_err(s, &c->from, id, err, msg);
    s->replying = 0;
}

void srv_handle(srv_t *s, const srv_call_t *c, const void *buf, size_t len) {
    rill_proto_req_t r;
    rill_err_t err = rill_proto_decode(s->dec, buf, len, &r);
    if (err != RILL_OK) {
        srv_handle_bad(s, c, r.id, err, rill_last_error(err));
        return;
    }
    s->requests++;
    s->cmd_requests[r.cmd]++;
    s->replying = 1 + (int)r.cmd; /* replies sent from here on answer this command */
    srv_sess_t *x = NULL;
    if (r.cmd != RILL_PROTO_SESSION_CREATE && r.cmd != RILL_PROTO_SESSION_LIST &&
        r.cmd != RILL_PROTO_SERVER_STATS && r.cmd != RILL_PROTO_SERVER_METRICS &&
        r.cmd != RILL_PROTO_COMPLETE && (x = own_sess(s, c, &r)) == NULL) {
        s->replying = 0;
        return; /* replied */
    }
    if (x != NULL && x->sid == 0 && r.cmd != RILL_PROTO_SESSION_CLOSE &&
        r.cmd != RILL_PROTO_SESSION_STATS && r.cmd != RILL_PROTO_INGEST_AUDIO) {
        srv_reply_err(s, &c->from, r.id, RILL_EUNSUPPORTED,
                      x->tl != NULL
                          ? "the session translates its speech: it takes ingest.audio, "
                            "session.stats and session.close"
                          : "the session is transcript-only (created on a Whisper model): it "
                            "takes ingest.audio, session.stats and session.close; for questions "
                            "create a language model's session with asr: NAME");
        s->replying = 0;
        return;
    }
    switch (r.cmd) {
    case RILL_PROTO_SESSION_CREATE:
        do_create(s, c, &r);
        break;
    case RILL_PROTO_SESSION_CLOSE:
        do_close(s, c, &r, x);
        break;
    case RILL_PROTO_SESSION_LIST:
        do_list(s, c, &r);
        break;
    case RILL_PROTO_SESSION_STATS:
        do_stats(s, c, &r, x);
        break;
    case RILL_PROTO_SESSION_SNAPSHOT:
        do_snapshot(s, c, &r, x);
        break;
    case RILL_PROTO_INGEST_TEXT:
        do_ingest_text(s, c, &r, x);
        break;
    case RILL_PROTO_INGEST_TICKS:
        do_ingest_ticks(s, c, &r, x);
        break;
    case RILL_PROTO_INGEST_REPLACE:
        do_ingest_replace(s, c, &r, x);
        break;
    case RILL_PROTO_ASK:
        srv_cmd_ask(s, c, &r, x, false);
        break;
    case RILL_PROTO_STANDING_REGISTER:
        srv_cmd_ask(s, c, &r, x, true);
        break;
    case RILL_PROTO_STANDING_UNREGISTER:
        srv_cmd_unregister(s, c, &r, x);
        break;
    case RILL_PROTO_STANDING_LIST:
        srv_cmd_standing_list(s, c, &r, x);
        break;
    case RILL_PROTO_SERVER_STATS:
        do_server_stats(s, c, &r);
        break;
    case RILL_PROTO_COMPLETE:
        srv_cmd_complete(s, c, &r);
        break;
    case RILL_PROTO_SERVER_METRICS:
        srv_cmd_metrics(s, c, &r);
        break;
    case RILL_PROTO_INGEST_AUDIO:
        srv_cmd_ingest_audio(s, c, &r, x);
        break;
    case RILL_PROTO_N_CMDS:
        break;
    }
    s->replying = 0;
}
