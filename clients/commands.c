/*
 * commands.c - one typed wrapper per command of docs/protocol.md (contract: rill_client.h).
 *
 * Each wrapper checks its arguments (nothing is sent when they are bad), packs the args map,
 * makes the call (client.c) and then reads the result field by field: a result that lacks a
 * field the wrapper needs, or has it with another type, is RILL_EFORMAT ("malformed result"),
 * never a crash or a made-up value. Strings of results are copied NUL-terminated into the reply
 * zone, so they are borrowed until the next call.
 */
#include <string.h>

#include "client_internal.h"
#include "rill_msgpack.h"

static rill_err_t bad_result(rill_client_t *c, const char *cmd, const char *what) {
    return rill__client_fail(c, RILL_EFORMAT, "malformed %s result: %s", cmd, what);
}

static bool str_arg_ok(rill_client_t *c, const char *s, const char *what) {
    if (s == NULL || s[0] == '\0') {
        rill__client_fail(c, RILL_EINVAL, "%s: a non-empty string is required", what);
        return false;
    }
    return true;
}

static void pack_kv_str(msgpack_packer *pk, const char *k, const char *v) {
    rill__client_pack_str(pk, k);
    rill__client_pack_str(pk, v);
}

static void pack_kv_u64(msgpack_packer *pk, const char *k, uint64_t v) {
    rill__client_pack_str(pk, k);
    msgpack_pack_uint64(pk, v);
}

/* The commands that take just the session. */
static rill_err_t session_call(rill_client_t *c, const char *cmd, const char *session) {
    rill__client_begin(c);
    if (!rill__client_name_ok(c, session)) {
        return RILL_EINVAL;
    }
    msgpack_packer pk;
    rill__client_args(c, &pk, 1);
    pack_kv_str(&pk, "session", session);
    return rill__client_call(c, cmd, true, NULL);
}

rill_err_t rill_client_session_create(rill_client_t *c, const char *name, int64_t window,
                                      int64_t sinks, const char *system, const char **session) {
    return rill_client_session_create_on(c, NULL, name, window, sinks, system, session);
}

rill_err_t rill_client_session_create_on(rill_client_t *c, const char *model, const char *name,
                                         int64_t window, int64_t sinks, const char *system,
                                         const char **session) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    rill__client_begin(c);
    if (name != NULL && !rill__client_name_ok(c, name)) {
        return RILL_EINVAL;
    }
    if (model != NULL && (strlen(model) > 63 || !rill__client_name_ok(c, model))) {
        return rill__client_fail(c, RILL_EINVAL,
                                 "model name '%.80s': 1..63 bytes of [A-Za-z0-9_.-]", model);
    }
    if (window < -1 || sinks < -1) {
        return rill__client_fail(c, RILL_EINVAL, "window and sinks are >= 0, or -1 (default)");
    }
    msgpack_packer pk;
    rill__client_args(c, &pk,
                      (size_t)((name != NULL) + (window >= 0) + (sinks >= 0) + (system != NULL) +
                               (model != NULL)));
    if (name != NULL) {
        pack_kv_str(&pk, "session", name);
    }
    if (model != NULL) {
        pack_kv_str(&pk, "model", model);
    }
    if (window >= 0) {
        pack_kv_u64(&pk, "window", (uint64_t)window);
    }
    if (sinks >= 0) {
        pack_kv_u64(&pk, "sinks", (uint64_t)sinks);
    }
    if (system != NULL) {
        pack_kv_str(&pk, "system", system);
    }
    rill_err_t st = rill__client_call(c, "session.create", true, NULL);
    if (st != RILL_OK) {
        return st;
    }
    const char *s;
    if (!rill__client_str(&c->rzone, rill__client_get(&c->result, "session"), &s, NULL)) {
        return bad_result(c, "session.create", "no session name");
    }
    if (session != NULL) {
        *session = s;
    }
    return RILL_OK;
}

rill_err_t rill_client_session_close(rill_client_t *c, const char *session) {
    return c != NULL ? session_call(c, "session.close", session) : RILL_EINVAL;
}

rill_err_t rill_client_session_list(rill_client_t *c, const char *const **names, int64_t *n) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    rill__client_begin(c);
    rill_err_t st = rill__client_call(c, "session.list", false, NULL);
    if (st != RILL_OK) {
        return st;
    }
    if (c->result.type != MSGPACK_OBJECT_ARRAY) {
        return bad_result(c, "session.list", "not an array");
    }
    uint32_t m = c->result.via.array.size;
    const char **v = msgpack_zone_malloc(&c->rzone, sizeof *v * (m > 0 ? m : 1));
    if (v == NULL) {
        return rill__client_fail(c, RILL_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < m; i++) {
        if (!rill__client_str(&c->rzone, &c->result.via.array.ptr[i], &v[i], NULL)) {
            return bad_result(c, "session.list", "a name that is not a string");
        }
    }
    if (names != NULL) {
        *names = v;
    }
    if (n != NULL) {
        *n = m;
    }
    return RILL_OK;
}

rill_err_t rill_client_session_stats(rill_client_t *c, const char *session,
                                     rill_client_session_stats_t *out) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    rill_err_t st = session_call(c, "session.stats", session);
    if (st != RILL_OK) {
        return st;
    }
    rill_client_session_stats_t s = { .held_text = -1 };
    const msgpack_object *r = &c->result;
    bool ok = rill__client_i64(rill__client_get(r, "version"), &s.version) &&
              rill__client_i64(rill__client_get(r, "n_seen"), &s.n_seen) &&
              rill__client_i64(rill__client_get(r, "n_resident"), &s.n_resident) &&
              rill__client_i64(rill__client_get(r, "n_pending"), &s.n_pending) &&
              rill__client_i64(rill__client_get(r, "pages"), &s.pages) &&
              rill__client_i64(rill__client_get(r, "bytes"), &s.bytes) &&
              rill__client_i64(rill__client_get(r, "window"), &s.window) &&
              rill__client_i64(rill__client_get(r, "sinks"), &s.sinks) &&
              rill__client_i64(rill__client_get(r, "standing"), &s.standing);
    if (!ok) {
        return bad_result(c, "session.stats", "a field is missing or not an integer");
    }
    rill__client_i64(rill__client_get(r, "held_text"), &s.held_text); /* optional */
    const char *model = NULL;
    size_t model_len = 0;
    if (rill__client_str(&c->rzone, rill__client_get(r, "model"), &model, &model_len)) {
        snprintf(s.model, sizeof s.model, "%.*s", (int)model_len, model); /* optional */
    }
    if (out != NULL) {
        *out = s;
    }
    return RILL_OK;
}

rill_err_t rill_client_session_snapshot(rill_client_t *c, const char *session, const char **path) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    rill_err_t st = session_call(c, "session.snapshot", session);
    if (st != RILL_OK) {
        return st;
    }
    const char *p;
    if (!rill__client_str(&c->rzone, rill__client_get(&c->result, "path"), &p, NULL)) {
        return bad_result(c, "session.snapshot", "no path");
    }
    if (path != NULL) {
        *path = p;
    }
    return RILL_OK;
}

rill_err_t rill_client_ingest_text(rill_client_t *c, const char *session, const char *text,
                                   size_t len, bool flush, int64_t *version) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    rill__client_begin(c);
    if (!rill__client_name_ok(c, session)) {
        return RILL_EINVAL;
    }
    if (text == NULL && len > 0) {
        return rill__client_fail(c, RILL_EINVAL, "text is NULL");
    }
    if (len > UINT32_MAX) {
        return rill__client_fail(c, RILL_ERANGE, "text of %zu bytes", len);
    }
    msgpack_packer pk;
    rill__client_args(c, &pk, flush ? 3 : 2);
    pack_kv_str(&pk, "session", session);
    rill__client_pack_str(&pk, "text");
    msgpack_pack_str(&pk, len);
    msgpack_pack_str_body(&pk, text, len);
    if (flush) {
        rill__client_pack_str(&pk, "flush");
        msgpack_pack_true(&pk);
    }
    rill_err_t st = rill__client_call(c, "ingest.text", true, NULL);
    if (st != RILL_OK) {
        return st;
    }
    int64_t v;
    if (!rill__client_i64(rill__client_get(&c->result, "version"), &v)) {
        return bad_result(c, "ingest.text", "no version");
    }
    if (version != NULL) {
        *version = v;
    }
    return RILL_OK;
}

rill_err_t rill_client_ingest_replace(rill_client_t *c, const char *session, int64_t from_version,
                                      const char *text, size_t len, int64_t *version) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    rill__client_begin(c);
    if (!rill__client_name_ok(c, session)) {
        return RILL_EINVAL;
    }
    if (from_version < 1) {
        return rill__client_fail(c, RILL_EINVAL, "from_version %lld (versions start at 1)",
                                 (long long)from_version);
    }
    if (text == NULL && len > 0) {
        return rill__client_fail(c, RILL_EINVAL, "text is NULL");
    }
    if (len > UINT32_MAX) {
        return rill__client_fail(c, RILL_ERANGE, "text of %zu bytes", len);
    }
    msgpack_packer pk;
    rill__client_args(c, &pk, 3);
    pack_kv_str(&pk, "session", session);
    rill__client_pack_str(&pk, "from_version");
    msgpack_pack_int64(&pk, from_version);
    rill__client_pack_str(&pk, "text");
    msgpack_pack_str(&pk, len);
    msgpack_pack_str_body(&pk, text, len);
    rill_err_t st = rill__client_call(c, "ingest.replace", true, NULL);
    if (st != RILL_OK) {
        return st;
    }
    int64_t v;
    if (!rill__client_i64(rill__client_get(&c->result, "version"), &v)) {
        return bad_result(c, "ingest.replace", "no version");
    }
    if (version != NULL) {
        *version = v;
    }
    return RILL_OK;
}

static rill_err_t ticks_result(rill_client_t *c, rill_client_ticks_result_t *out) {
    rill_client_ticks_result_t t;
    const msgpack_object *r = &c->result;
    bool ok = rill__client_i64(rill__client_get(r, "version"), &t.version) &&
              rill__client_i64(rill__client_get(r, "accepted"), &t.accepted) &&
              rill__client_i64(rill__client_get(r, "rejected"), &t.rejected) &&
              rill__client_i64(rill__client_get(r, "lines"), &t.lines);
    if (!ok) {
        return bad_result(c, "ingest.ticks", "version, accepted, rejected and lines are required");
    }
    if (out != NULL) {
        *out = t;
    }
    return RILL_OK;
}

/* Sends ingest.ticks with batch[0, len), an array already checked. */
static rill_err_t send_ticks(rill_client_t *c, const char *session, const void *batch, size_t len,
                             rill_client_ticks_result_t *out) {
    msgpack_packer pk;
    rill__client_args(c, &pk, 2);
    pack_kv_str(&pk, "session", session);
    rill__client_pack_str(&pk, "ticks");
    msgpack_pack_str_body(&pk, batch, len); /* raw bytes: the encoded array */
    rill_err_t st = rill__client_call(c, "ingest.ticks", true, NULL);
    return st == RILL_OK ? ticks_result(c, out) : st;
}

rill_err_t rill_client_ingest_ticks(rill_client_t *c, const char *session, const rill_tick_t *ticks,
                                    int64_t n, rill_client_ticks_result_t *out) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    rill__client_begin(c);
    if (!rill__client_name_ok(c, session)) {
        return RILL_EINVAL;
    }
    if (ticks == NULL || n < 1 || n > 4096) {
        return rill__client_fail(c, RILL_EINVAL, "1..4096 ticks per batch");
    }
    /* at most 15 + 9 + 9 + 9 + 1 bytes of values and 25 of keys per tick */
    size_t cap = (size_t)n * 96 + 8;
    void *buf = msgpack_zone_malloc(&c->ezone, cap);
    if (buf == NULL) {
        return rill__client_fail(c, RILL_ENOMEM, "out of memory");
    }
    int64_t len = rill_tick_encode(ticks, n, true, buf, cap);
    if (len < 0) {
        for (int64_t i = 0; i < n; i++) {
            rill_err_t te = rill_tick_check(&ticks[i]);
            if (te != RILL_OK) {
                return rill__client_fail(c, RILL_EINVAL, "tick %lld: %s", (long long)i,
                                         rill_last_error(te));
            }
        }
        return rill__client_fail(c, (rill_err_t)len, "encoding the ticks failed");
    }
    return send_ticks(c, session, buf, (size_t)len, out);
}

rill_err_t rill_client_ingest_ticks_msgpack(rill_client_t *c, const char *session,
                                            const void *batch, size_t len,
                                            rill_client_ticks_result_t *out) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    rill__client_begin(c);
    if (!rill__client_name_ok(c, session)) {
        return RILL_EINVAL;
    }
    rill_msgpack_shape_t sh;
    if (batch == NULL || rill_msgpack_check(batch, len, CL_MAX_DEPTH, &sh) != RILL_OK ||
        sh.top != RILL_MSGPACK_ARRAY) {
        return rill__client_fail(c, RILL_EFORMAT, "the batch must be one msgpack array");
    }
    return send_ticks(c, session, batch, len, out);
}

#define AUDIO_MAX_PACKET (1u << 20) /* docs/protocol.md: data at most 1 MiB */

rill_err_t rill_client_ingest_audio(rill_client_t *c, const char *session, const char *codec,
                                    int64_t rate, int64_t channels, int64_t seq, const void *data,
                                    size_t len, bool flush, rill_client_audio_result_t *out) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    rill__client_begin(c);
    if (!rill__client_name_ok(c, session)) {
        return RILL_EINVAL;
    }
    if (data == NULL && len > 0) {
        return rill__client_fail(c, RILL_EINVAL, "data is NULL");
    }
    const bool packet = data != NULL;
    if (!packet && !flush) {
        return rill__client_fail(c, RILL_EINVAL, "neither a packet nor flush: nothing to send");
    }
    if (packet) {
        if (!str_arg_ok(c, codec, "codec")) {
            return RILL_EINVAL;
        }
        if (rate < 0 || rate > UINT32_MAX || channels < 0 || channels > UINT32_MAX || seq < 0 ||
            seq > UINT32_MAX) {
            return rill__client_fail(c, RILL_EINVAL,
                                     "rate %lld, channels %lld, seq %lld: each 0..2^32-1",
                                     (long long)rate, (long long)channels, (long long)seq);
        }
        if (len > AUDIO_MAX_PACKET) {
            return rill__client_fail(c, RILL_ERANGE, "a packet of %zu bytes (at most %u)", len,
                                     AUDIO_MAX_PACKET);
        }
    }
    msgpack_packer pk;
    rill__client_args(c, &pk, 1 + (packet ? 5 : 0) + (flush ? 1 : 0));
    pack_kv_str(&pk, "session", session);
    if (packet) {
        pack_kv_str(&pk, "codec", codec);
        pack_kv_u64(&pk, "rate", (uint64_t)rate);
        pack_kv_u64(&pk, "channels", (uint64_t)channels);
        pack_kv_u64(&pk, "seq", (uint64_t)seq);
        rill__client_pack_str(&pk, "data");
        msgpack_pack_bin(&pk, len);
        msgpack_pack_bin_body(&pk, data, len);
    }
    if (flush) {
        rill__client_pack_str(&pk, "flush");
        msgpack_pack_true(&pk);
    }
    rill_err_t st = rill__client_call(c, "ingest.audio", true, NULL);
    if (st != RILL_OK) {
        return st;
    }
    rill_client_audio_result_t r = { 0 };
    const msgpack_object *res = &c->result;
    if (!rill__client_i64(rill__client_get(res, "samples"), &r.samples) ||
        !rill__client_str(&c->rzone, rill__client_get(res, "packet"), &r.packet, NULL) ||
        !rill__client_i64(rill__client_get(res, "lost"), &r.lost) ||
        !rill__client_i64(rill__client_get(res, "concealed_ms"), &r.concealed_ms) ||
        !rill__client_i64(rill__client_get(res, "expected"), &r.expected) ||
        !rill__client_i64(rill__client_get(res, "queue_free"), &r.queue_free)) {
        return bad_result(c, "ingest.audio", "a field is missing or not a number");
    }
    if (out != NULL) {
        *out = r;
    }
    return RILL_OK;
}

/* session + question + max_tokens (+ consistency when evaluated) */
static rill_err_t question_args(rill_client_t *c, const char *session, const char *question,
                                int32_t max_tokens, bool evaluated) {
    rill__client_begin(c);
    if (!rill__client_name_ok(c, session) || !str_arg_ok(c, question, "question")) {
        return RILL_EINVAL;
    }
    if (max_tokens < 0 || max_tokens > 1024) {
        return rill__client_fail(c, RILL_EINVAL, "max_tokens: 1..1024, or 0 for the default");
    }
    msgpack_packer pk;
    rill__client_args(c, &pk, 2 + (max_tokens > 0) + evaluated);
    pack_kv_str(&pk, "session", session);
    pack_kv_str(&pk, "question", question);
    if (max_tokens > 0) {
        pack_kv_u64(&pk, "max_tokens", (uint64_t)max_tokens);
    }
    if (evaluated) {
        pack_kv_str(&pk, "consistency", "evaluated");
    }
    return RILL_OK;
}

rill_err_t rill_client_ask(rill_client_t *c, const char *session, const char *question,
                           int32_t max_tokens, rill_client_token_fn on_token, void *user,
                           rill_client_answer_t *out) {
    rill_client_ask_opts_t o = { .max_tokens = max_tokens };
    return rill_client_ask_with(c, session, question, &o, on_token, user, out);
}

rill_err_t rill_client_ask_with(rill_client_t *c, const char *session, const char *question,
                                const rill_client_ask_opts_t *opts, rill_client_token_fn on_token,
                                void *user, rill_client_answer_t *out) {
    if (c == NULL || opts == NULL) {
        return RILL_EINVAL;
    }
    rill_err_t st = question_args(c, session, question, opts->max_tokens, opts->evaluated);
    if (st != RILL_OK) {
        return st;
    }
    cl_ask_t ask = { .fn = on_token, .user = user };
    snprintf(ask.token_topic, sizeof ask.token_topic, "%s/token", session);
    snprintf(ask.answer_topic, sizeof ask.answer_topic, "%s/answer", session);
    st = rill__client_call(c, "ask", true, on_token != NULL ? &ask : NULL);
    if (st != RILL_OK) {
        return st;
    }
    rill_client_answer_t a = { .pieces = ask.pieces };
    const msgpack_object *r = &c->result;
    bool ok =
        rill__client_str(&c->rzone, rill__client_get(r, "answer"), &a.answer, &a.answer_len) &&
        rill__client_i64(rill__client_get(r, "tokens"), &a.tokens) &&
        rill__client_i64(rill__client_get(r, "version"), &a.version) &&
        rill__client_i64(rill__client_get(r, "context"), &a.context) &&
        rill__client_f64(rill__client_get(r, "ttft_ms"), &a.ttft_ms) &&
        rill__client_f64(rill__client_get(r, "total_ms"), &a.total_ms) &&
        rill__client_ttft_parts(r, &a.backlog, &a.ttft_compute_ms);
    const msgpack_object *cached = rill__client_get(r, "cached");
    const msgpack_object *cons = rill__client_get(r, "consistency");
    const char *cs = NULL;
    size_t cn = 0;
    bool cons_ok =
        cons == NULL || (rill__client_str(&c->rzone, cons, &cs, &cn) &&
                         (strcmp(cs, "evaluated") == 0 || strcmp(cs, "acknowledged") == 0));
    if (!ok || (cached != NULL && cached->type != MSGPACK_OBJECT_BOOLEAN) || !cons_ok) {
        return bad_result(c, "ask",
                          "answer, tokens, version, context, ttft_ms and total_ms are "
                          "required (backlog and ttft_compute_ms, when there, numbers; "
                          "consistency \"acknowledged\" or \"evaluated\")");
    }
    a.cached = cached != NULL && cached->via.boolean;
    a.evaluated = cs != NULL && strcmp(cs, "evaluated") == 0;
    if (out != NULL) {
        *out = a;
    }
    return RILL_OK;
}

rill_err_t rill_client_standing_register(rill_client_t *c, const char *session,
                                         const char *question, int32_t max_tokens, uint64_t *qid) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    rill_err_t st = question_args(c, session, question, max_tokens, false);
    st = st == RILL_OK ? rill__client_call(c, "standing.register", true, NULL) : st;
    if (st != RILL_OK) {
        return st;
    }
    uint64_t q;
    if (!rill__client_u64(rill__client_get(&c->result, "qid"), &q)) {
        return bad_result(c, "standing.register", "no qid");
    }
    if (qid != NULL) {
        *qid = q;
    }
    return RILL_OK;
}

rill_err_t rill_client_standing_unregister(rill_client_t *c, const char *session, uint64_t qid) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    rill__client_begin(c);
    if (!rill__client_name_ok(c, session)) {
        return RILL_EINVAL;
    }
    if (qid == 0) {
        return rill__client_fail(c, RILL_EINVAL, "qid: a positive integer is required");
    }
    msgpack_packer pk;
    rill__client_args(c, &pk, 2);
    pack_kv_str(&pk, "session", session);
    pack_kv_u64(&pk, "qid", qid);
    return rill__client_call(c, "standing.unregister", true, NULL);
}

rill_err_t rill_client_standing_list(rill_client_t *c, const char *session,
                                     const rill_client_standing_t **items, int64_t *n) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    rill_err_t st = session_call(c, "standing.list", session);
    if (st != RILL_OK) {
        return st;
    }
    if (c->result.type != MSGPACK_OBJECT_ARRAY) {
        return bad_result(c, "standing.list", "not an array");
    }
    uint32_t m = c->result.via.array.size;
    rill_client_standing_t *v = msgpack_zone_malloc(&c->rzone, sizeof *v * (m > 0 ? m : 1));
    if (v == NULL) {
        return rill__client_fail(c, RILL_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < m; i++) {
        const msgpack_object *e = &c->result.via.array.ptr[i];
        rill_client_standing_t *s = &v[i];
        bool ok =
            rill__client_u64(rill__client_get(e, "qid"), &s->qid) &&
            rill__client_str(&c->rzone, rill__client_get(e, "question"), &s->question, NULL) &&
            rill__client_i64(rill__client_get(e, "version"), &s->version) &&
            rill__client_f64(rill__client_get(e, "age_ms"), &s->age_ms) &&
            rill__client_i64(rill__client_get(e, "refreshes"), &s->refreshes) &&
            rill__client_i64(rill__client_get(e, "abandoned"), &s->abandoned) &&
            rill__client_i64(rill__client_get(e, "cache_hits"), &s->cache_hits);
        if (!ok) {
            return bad_result(c, "standing.list", "an entry lacks a field or has a wrong type");
        }
    }
    if (items != NULL) {
        *items = v;
    }
    if (n != NULL) {
        *n = m;
    }
    return RILL_OK;
}

/* server.stats' optional "models" list into s (at most RILL_CLIENT_MAX_MODELS kept). */
static bool models_of(rill_client_t *c, const msgpack_object *o, rill_client_server_stats_t *s) {
    if (o == NULL) {
        return true; /* an older server */
    }
    if (o->type != MSGPACK_OBJECT_ARRAY) {
        return false;
    }
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *m = &o->via.array.ptr[i];
        if (m->type != MSGPACK_OBJECT_MAP) {
            return false;
        }
        const char *name = NULL;
        size_t len = 0;
        rill_client_model_stats_t ms;
        memset(&ms, 0, sizeof ms);
        if (!rill__client_str(&c->rzone, rill__client_get(m, "name"), &name, &len) ||
            !rill__client_i64(rill__client_get(m, "sessions"), &ms.sessions) ||
            !rill__client_i64(rill__client_get(m, "steps"), &ms.steps) ||
            !rill__client_i64(rill__client_get(m, "tokens_ingest"), &ms.tokens_ingest) ||
            !rill__client_i64(rill__client_get(m, "tokens_decode"), &ms.tokens_decode)) {
            return false;
        }
        snprintf(ms.name, sizeof ms.name, "%.*s", (int)len, name);
        if (s->n_models < RILL_CLIENT_MAX_MODELS) {
            s->models[s->n_models++] = ms;
        }
    }
    return true;
}

rill_err_t rill_client_server_stats(rill_client_t *c, rill_client_server_stats_t *out) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    rill__client_begin(c);
    rill_err_t st = rill__client_call(c, "server.stats", false, NULL);
    if (st != RILL_OK) {
        return st;
    }
    if (c->result.type != MSGPACK_OBJECT_MAP) {
        return bad_result(c, "server.stats", "not a map");
    }
    rill_client_server_stats_t s;
    memset(&s, 0, sizeof s);
    static const struct {
        const char *key;
        size_t off;
    } ints[] = {
#define F_(name) { #name, offsetof(rill_client_server_stats_t, name) }
        F_(sessions),
        F_(requests),
        F_(bad_requests),
        F_(events),
        F_(event_drops),
        F_(reply_drops),
        F_(steps),
        F_(tokens_decode),
        F_(tokens_prefill),
        F_(tokens_ingest),
        F_(tokens_standing),
        F_(free_pages),
        F_(total_pages),
        F_(reserved_pages),
        F_(questions),
        F_(standing_refreshes),
        F_(standing_cache_hits),
        F_(admission_rejects),
        F_(engine_drops),
#undef F_
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const msgpack_object *o = rill__client_get(&c->result, ints[i].key);
        if (o != NULL && !rill__client_i64(o, (int64_t *)((char *)&s + ints[i].off))) {
            return bad_result(c, "server.stats", "a counter that is not an integer");
        }
    }
    const msgpack_object *busy = rill__client_get(&c->result, "busy_ms");
    const msgpack_object *idle = rill__client_get(&c->result, "idle_ms");
    if ((busy != NULL && !rill__client_f64(busy, &s.busy_ms)) ||
        (idle != NULL && !rill__client_f64(idle, &s.idle_ms))) {
        return bad_result(c, "server.stats", "busy_ms / idle_ms not a number");
    }
    if (!models_of(c, rill__client_get(&c->result, "models"), &s)) {
        return bad_result(c, "server.stats", "models: not a list of model maps");
    }
    if (out != NULL) {
        *out = s;
    }
    return RILL_OK;
}
