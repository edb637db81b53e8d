/*
 * proto.c - request decoding (contract: rill_proto.h, docs/protocol.md).
 *
 * Design: the frame's structure is checked first (rill_msgpack_check, rill_msgpack.h), so
 * msgpack-c never sees a length it would trust; then msgpack-c unpacks it into the decoder's
 * zone (reused: cleared per frame) and a table per command says which arguments it takes, with
 * their types. ingest.ticks' array is re-packed into the decoder's buffer for the tick decoder.
 * Messages that quote request bytes (an unknown command or argument) cut them at a character
 * boundary (rill_utf8_cut) and leave the rest to the sender's packer, which escapes what is not
 * UTF-8 (rill_msgpack_pack_str); the decoder itself accepts any bytes in a str.
 */
#include "rill_proto.h"

#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_msgpack.h"
#include "rill_utf8.h"

struct rill_proto_dec {
    size_t max_bytes;
    msgpack_zone zone;
    msgpack_sbuffer ticks;                              /* ingest.ticks re-packed */
    rill_proto_msg_t messages[RILL_PROTO_MAX_MESSAGES]; /* complete: messages */
};

static const char *const k_cmd[RILL_PROTO_N_CMDS] = {
    "session.create",    "session.close",
    "session.list",      "session.stats",
    "session.snapshot",  "ingest.text",
    "ingest.ticks",      "ask",
    "standing.register", "standing.unregister",
    "standing.list",     "server.stats",
    "ingest.replace",    "complete",
    "server.metrics",    "ingest.audio",
};

/* Arguments, and which commands take them (R required, O optional). */
typedef enum arg {
    A_SESSION,
    A_WINDOW,
    A_SINKS,
    A_SYSTEM,
    A_TEXT,
    A_FLUSH,
    A_TICKS,
    A_QUESTION,
    A_MAX_TOKENS,
    A_QID,
    A_MODEL,
    A_FROM_VERSION,
    A_PROMPT,
    A_MESSAGES,
    A_TEMPERATURE,
    A_TOP_P,
    A_SEED,
    A_STOP,
    A_CONSISTENCY,
    A_ASR,
    A_CODEC,
    A_RATE,
    A_CHANNELS,
    A_SEQ,
    A_DATA,
    A_PIN,
    A_TRANSLATE,
    A_COUNT
} arg_t;

static const char *const k_arg[A_COUNT] = {
    "session",     "window",     "sinks", "system", "text",         "flush",    "ticks",
    "question",    "max_tokens", "qid",   "model",  "from_version", "prompt",   "messages",
    "temperature", "top_p",      "seed",  "stop",   "consistency",  "asr",      "codec",
    "rate",        "channels",   "seq",   "data",   "pin",          "translate"
};

/* use[cmd][arg]: 0 not taken, 1 optional, 2 required */
static const unsigned char k_use[RILL_PROTO_N_CMDS][A_COUNT] = {
    [RILL_PROTO_SESSION_CREATE] = { [A_SESSION] = 1,
                                    [A_WINDOW] = 1,
                                    [A_SINKS] = 1,
                                    [A_SYSTEM] = 1,
                                    [A_MODEL] = 1,
                                    [A_ASR] = 1,
                                    [A_PIN] = 1,
                                    [A_TRANSLATE] = 1 },
    [RILL_PROTO_SESSION_CLOSE] = { [A_SESSION] = 2 },
    [RILL_PROTO_SESSION_LIST] = { 0 },
    [RILL_PROTO_SESSION_STATS] = { [A_SESSION] = 2 },
    [RILL_PROTO_SESSION_SNAPSHOT] = { [A_SESSION] = 2 },
    [RILL_PROTO_INGEST_TEXT] = { [A_SESSION] = 2, [A_TEXT] = 2, [A_FLUSH] = 1 },
    [RILL_PROTO_INGEST_TICKS] = { [A_SESSION] = 2, [A_TICKS] = 2 },
    [RILL_PROTO_ASK] = { [A_SESSION] = 2,
                         [A_QUESTION] = 2,
                         [A_MAX_TOKENS] = 1,
                         [A_CONSISTENCY] = 1 },
    [RILL_PROTO_STANDING_REGISTER] = { [A_SESSION] = 2, [A_QUESTION] = 2, [A_MAX_TOKENS] = 1 },
    [RILL_PROTO_STANDING_UNREGISTER] = { [A_SESSION] = 2, [A_QID] = 2 },
    [RILL_PROTO_STANDING_LIST] = { [A_SESSION] = 2 },
    [RILL_PROTO_SERVER_STATS] = { 0 },
    [RILL_PROTO_INGEST_REPLACE] = { [A_SESSION] = 2, [A_FROM_VERSION] = 2, [A_TEXT] = 2 },
    [RILL_PROTO_COMPLETE] = { [A_MODEL] = 1,
                              [A_PROMPT] = 1,
                              [A_MESSAGES] = 1,
                              [A_MAX_TOKENS] = 1,
                              [A_TEMPERATURE] = 1,
                              [A_TOP_P] = 1,
                              [A_SEED] = 1,
                              [A_STOP] = 1 },
    [RILL_PROTO_SERVER_METRICS] = { 0 },
    [RILL_PROTO_INGEST_AUDIO] = { [A_SESSION] = 2,
                                  [A_CODEC] = 1,
                                  [A_RATE] = 1,
                                  [A_CHANNELS] = 1,
                                  [A_SEQ] = 1,
                                  [A_DATA] = 1,
                                  [A_FLUSH] = 1 },
};

const char *rill_proto_cmd_name(rill_proto_cmd_t cmd) {
    return (unsigned)cmd < (unsigned)RILL_PROTO_N_CMDS ? k_cmd[cmd] : NULL;
}

rill_err_t rill_proto_dec_new(size_t max_bytes, rill_proto_dec_t **out) {
    if (out == NULL || max_bytes < 16) {
        return RILL_EINVAL;
    }
    *out = NULL;
    rill_proto_dec_t *d = rill_calloc(RILL_MEM_SERVER, 1, sizeof *d);
    if (d == NULL) {
        return RILL_ENOMEM;
    }
    d->max_bytes = max_bytes;
    if (!msgpack_zone_init(&d->zone, 8192)) {
        rill_free(d);
        return RILL_ENOMEM;
    }
    msgpack_sbuffer_init(&d->ticks);
    *out = d;
    return RILL_OK;
}

void rill_proto_dec_destroy(rill_proto_dec_t **dp) {
    if (dp == NULL || *dp == NULL) {
        return;
    }
    msgpack_zone_destroy(&(*dp)->zone);
    msgpack_sbuffer_destroy(&(*dp)->ticks);
    rill_free(*dp);
    *dp = NULL;
}

static rill_err_t fail(char *msg, size_t msglen, rill_err_t err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static rill_err_t fail(char *msg, size_t msglen, rill_err_t err, const char *fmt, ...) {
    if (msg != NULL && msglen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, msglen, fmt, ap);
        va_end(ap);
    }
    return err;
}

/* An unsigned integer field (positive ints of either msgpack kind). */
static bool as_uint(const msgpack_object *o, uint64_t *v) {
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
        *v = o->via.u64;
        return true;
    }
    return false;
}

static bool name_ok(const msgpack_object_str *s) {
    if (s->size < 1 || s->size > RILL_PROTO_MAX_NAME) {
        return false;
    }
    for (uint32_t i = 0; i < s->size; i++) {
        char c = s->ptr[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-')) {
            return false;
        }
    }
    return true;
}

static bool str_is(const rill_proto_str_t *s, const char *t) {
    return s->len == strlen(t) && memcmp(s->p, t, s->len) == 0;
}

static int pack_ticks(void *data, const char *buf, size_t len) {
    return msgpack_sbuffer_write(data, buf, len);
}

static rill_err_t decode_arg(rill_proto_dec_t *d, rill_proto_req_t *r, arg_t a,
                             const msgpack_object *v, char *msg, size_t msglen) {
    uint64_t u = 0;
    switch (a) {
    case A_SESSION:
    case A_MODEL:
    case A_ASR:
    case A_CODEC:
    case A_TRANSLATE:
    case A_SYSTEM:
    case A_TEXT:
    case A_PROMPT:
    case A_QUESTION: {
        if (v->type != MSGPACK_OBJECT_STR) {
            return fail(msg, msglen, RILL_EFORMAT, "args.%s: must be a string", k_arg[a]);
        }
        size_t max = a == A_TEXT || a == A_PROMPT ? RILL_PROTO_MAX_TEXT : RILL_PROTO_MAX_STR;
        if (v->via.str.size > max) {
            return fail(msg, msglen, RILL_ERANGE, "args.%s: %u bytes (at most %zu)", k_arg[a],
                        v->via.str.size, max);
        }
        rill_proto_str_t s = { v->via.str.ptr, v->via.str.size };
        if (a == A_SESSION) {
            if (!name_ok(&v->via.str)) {
                return fail(msg, msglen, RILL_EINVAL,
                            "args.session: 1..64 bytes of [A-Za-z0-9_.-] required");
            }
            r->session = s;
            r->present |= RILL_PROTO_HAS_SESSION;
        } else if (a == A_MODEL || a == A_ASR) {
            if (!name_ok(&v->via.str) || v->via.str.size >= RILL_PROTO_MAX_NAME) {
                return fail(msg, msglen, RILL_EINVAL,
                            "args.%s: 1..63 bytes of [A-Za-z0-9_.-] required", k_arg[a]);
            }
            if (a == A_MODEL) {
                r->model = s;
                r->present |= RILL_PROTO_HAS_MODEL;
            } else {
                r->asr = s;
                r->present |= RILL_PROTO_HAS_ASR;
            }
        } else if (a == A_CODEC) {
            r->codec = s; /* the packet decoder names the codecs it knows */
        } else if (a == A_TRANSLATE) {
            r->translate = s; /* the server names the policies it knows */
            r->present |= RILL_PROTO_HAS_TRANSLATE;
        } else if (a == A_SYSTEM) {
            r->system = s;
            r->present |= RILL_PROTO_HAS_SYSTEM;
        } else if (a == A_TEXT) {
            r->text = s;
        } else if (a == A_PROMPT) {
            r->prompt = s;
            r->present |= RILL_PROTO_HAS_PROMPT;
        } else {
            if (s.len == 0) {
                return fail(msg, msglen, RILL_EINVAL, "args.question: empty");
            }
            r->question = s;
        }
        return RILL_OK;
    }
    case A_CONSISTENCY:
        if (v->type != MSGPACK_OBJECT_STR) {
            return fail(msg, msglen, RILL_EFORMAT, "args.consistency: must be a string");
        }
        rill_proto_str_t c = { v->via.str.ptr, v->via.str.size };
        if (str_is(&c, "evaluated")) {
            r->evaluated = true;
        } else if (str_is(&c, "acknowledged")) {
            r->evaluated = false;
        } else {
            return fail(msg, msglen, RILL_EINVAL,
                        "args.consistency: \"acknowledged\" or \"evaluated\" required");
        }
        r->present |= RILL_PROTO_HAS_CONSISTENCY;
        return RILL_OK;
    case A_WINDOW:
    case A_SINKS:
        if (!as_uint(v, &u)) {
            return fail(msg, msglen, RILL_EFORMAT, "args.%s: must be an unsigned integer",
                        k_arg[a]);
        }
        if (u > RILL_PROTO_MAX_WINDOW) {
            return fail(msg, msglen, RILL_ERANGE, "args.%s: %llu (at most %d)", k_arg[a],
                        (unsigned long long)u, RILL_PROTO_MAX_WINDOW);
        }
        if (a == A_WINDOW) {
            r->window = (int64_t)u;
            r->present |= RILL_PROTO_HAS_WINDOW;
        } else {
            r->sinks = (int64_t)u;
            r->present |= RILL_PROTO_HAS_SINKS;
        }
        return RILL_OK;
    case A_MAX_TOKENS:
        if (!as_uint(v, &u)) {
            return fail(msg, msglen, RILL_EFORMAT, "args.max_tokens: must be an unsigned integer");
        }
        if (u < 1 || u > RILL_PROTO_MAX_TOKENS) {
            return fail(msg, msglen, RILL_ERANGE, "args.max_tokens: %llu outside [1, %d]",
                        (unsigned long long)u, RILL_PROTO_MAX_TOKENS);
        }
        r->max_tokens = (int32_t)u;
        r->present |= RILL_PROTO_HAS_MAX_TOKENS;
        return RILL_OK;
    case A_QID:
        if (!as_uint(v, &u) || u == 0) {
            return fail(msg, msglen, RILL_EFORMAT, "args.qid: must be a positive integer");
        }
        r->qid = u;
        return RILL_OK;
    case A_FROM_VERSION:
        if (!as_uint(v, &u)) {
            return fail(msg, msglen, RILL_EFORMAT,
                        "args.from_version: must be an unsigned integer");
        }
        if (u < 1 || u > (uint64_t)INT64_MAX) {
            return fail(msg, msglen, RILL_ERANGE, "args.from_version: %llu outside [1, 2^63)",
                        (unsigned long long)u);
        }
        r->from_version = (int64_t)u;
        return RILL_OK;
    case A_FLUSH:
        if (v->type != MSGPACK_OBJECT_BOOLEAN) {
            return fail(msg, msglen, RILL_EFORMAT, "args.flush: must be a boolean");
        }
        r->flush = v->via.boolean;
        r->present |= RILL_PROTO_HAS_FLUSH;
        return RILL_OK;
    case A_PIN:
        if (v->type != MSGPACK_OBJECT_BOOLEAN) {
            return fail(msg, msglen, RILL_EFORMAT, "args.pin: must be a boolean");
        }
        r->pin = v->via.boolean;
        return RILL_OK;
    case A_TICKS: {
        if (v->type != MSGPACK_OBJECT_ARRAY) {
            return fail(msg, msglen, RILL_EFORMAT, "args.ticks: must be an array of tick maps");
        }
        msgpack_sbuffer_clear(&d->ticks);
        msgpack_packer pk;
        msgpack_packer_init(&pk, &d->ticks, pack_ticks);
        if (msgpack_pack_object(&pk, *v) != 0) {
            return fail(msg, msglen, RILL_ENOMEM, "args.ticks: out of memory");
        }
        r->ticks = d->ticks.data;
        r->ticks_len = d->ticks.size;
        return RILL_OK;
    }
    case A_TEMPERATURE:
    case A_TOP_P: {
        double x;
        if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64) {
            x = v->via.f64;
        } else if (as_uint(v, &u)) {
            x = (double)u;
        } else {
            return fail(msg, msglen, RILL_EFORMAT, "args.%s: must be a number", k_arg[a]);
        }
        bool ok = a == A_TEMPERATURE ? x >= 0 && x <= 2 : x > 0 && x <= 1; /* NaN fails both */
        if (!ok) {
            return fail(msg, msglen, RILL_ERANGE, "args.%s: %g outside %s", k_arg[a], x,
                        a == A_TEMPERATURE ? "[0, 2]" : "(0, 1]");
        }
        if (a == A_TEMPERATURE) {
            r->temperature = x;
            r->present |= RILL_PROTO_HAS_TEMPERATURE;
        } else {
            r->top_p = x;
            r->present |= RILL_PROTO_HAS_TOP_P;
        }
        return RILL_OK;
    }
    case A_SEED:
        if (!as_uint(v, &u)) {
            return fail(msg, msglen, RILL_EFORMAT, "args.seed: must be an unsigned integer");
        }
        r->seed = u;
        r->present |= RILL_PROTO_HAS_SEED;
        return RILL_OK;
    case A_STOP:
        if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > RILL_PROTO_MAX_STOP) {
            return fail(msg, msglen, RILL_EFORMAT,
                        "args.stop: must be an array of at most %d "
                        "strings",
                        RILL_PROTO_MAX_STOP);
        }
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            const msgpack_object *e = &v->via.array.ptr[i];
            if (e->type != MSGPACK_OBJECT_STR || e->via.str.size < 1 ||
                e->via.str.size > RILL_PROTO_MAX_STOP_LEN) {
                return fail(msg, msglen, RILL_EINVAL, "args.stop[%u]: 1..%d bytes of text", i,
                            RILL_PROTO_MAX_STOP_LEN);
            }
            r->stop[i] = (rill_proto_str_t){ e->via.str.ptr, e->via.str.size };
        }
        r->n_stop = (int32_t)v->via.array.size;
        return RILL_OK;
    case A_MESSAGES:
        if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size < 1 ||
            v->via.array.size > RILL_PROTO_MAX_MESSAGES) {
            return fail(msg, msglen, RILL_EFORMAT,
                        "args.messages: must be an array of 1..%d "
                        "messages",
                        RILL_PROTO_MAX_MESSAGES);
        }
        for (uint32_t i = 0; i < v->via.array.size; i++) {
            const msgpack_object *m = &v->via.array.ptr[i];
            rill_proto_msg_t *out = &d->messages[i];
            bool role = false, content = false;
            if (m->type != MSGPACK_OBJECT_MAP) {
                return fail(msg, msglen, RILL_EFORMAT, "args.messages[%u]: must be a map", i);
            }
            for (uint32_t j = 0; j < m->via.map.size; j++) {
                const msgpack_object *k = &m->via.map.ptr[j].key, *x = &m->via.map.ptr[j].val;
                bool is_role = rill_msgpack_key_is(k, "role"),
                     is_content = rill_msgpack_key_is(k, "content");
                if (!is_role && !is_content && !rill_msgpack_key_is(k, "name")) {
                    return fail(msg, msglen, RILL_EINVAL,
                                "args.messages[%u]: keys are role, content (and name)", i);
                }
                if (x->type != MSGPACK_OBJECT_STR || x->via.str.size > RILL_PROTO_MAX_TEXT) {
                    return fail(msg, msglen, RILL_EFORMAT,
                                "args.messages[%u]: role and content are strings", i);
                }
                if (is_role) {
                    role = true;
                    out->role = (rill_proto_str_t){ x->via.str.ptr, x->via.str.size };
                } else if (is_content) {
                    content = true;
                    out->content = (rill_proto_str_t){ x->via.str.ptr, x->via.str.size };
                }
            }
            bool known = role && (str_is(&out->role, "system") || str_is(&out->role, "user") ||
                                  str_is(&out->role, "assistant"));
            if (!known || !content) {
                return fail(msg, msglen, RILL_EINVAL,
                            "args.messages[%u]: needs a role (system, "
                            "user or assistant) and a content",
                            i);
            }
        }
        r->messages = d->messages;
        r->n_messages = (int32_t)v->via.array.size;
        r->present |= RILL_PROTO_HAS_MESSAGES;
        return RILL_OK;
    case A_RATE:
    case A_CHANNELS:
    case A_SEQ:
        if (!as_uint(v, &u)) {
            return fail(msg, msglen, RILL_EFORMAT, "args.%s: must be an unsigned integer",
                        k_arg[a]);
        }
        if (u > (uint64_t)INT64_MAX - 1) {
            return fail(msg, msglen, RILL_ERANGE, "args.%s: %llu outside [0, 2^63 - 1)", k_arg[a],
                        (unsigned long long)u);
        }
        *(a == A_RATE ? &r->rate : a == A_CHANNELS ? &r->channels : &r->seq) = (int64_t)u;
        return RILL_OK;
    case A_DATA:
        if (v->type != MSGPACK_OBJECT_BIN) {
            return fail(msg, msglen, RILL_EFORMAT, "args.data: must be bin (the packet's bytes)");
        }
        if (v->via.bin.size > RILL_PROTO_MAX_AUDIO) {
            return fail(msg, msglen, RILL_ERANGE, "args.data: %u bytes (at most %d)",
                        v->via.bin.size, RILL_PROTO_MAX_AUDIO);
        }
        r->data = (const uint8_t *)v->via.bin.ptr;
        r->data_len = v->via.bin.size;
        return RILL_OK;
    case A_COUNT:
        break;
    }
    return RILL_EINTERNAL;
}

static rill_err_t decode_buf(rill_proto_dec_t *d, const void *buf, size_t len,
                             rill_proto_req_t *req, char *msg, size_t msglen) {
    if (msg != NULL && msglen > 0) {
        msg[0] = '\0';
    }
    if (d == NULL || req == NULL || (buf == NULL && len > 0)) {
        return RILL_EINVAL;
    }
    memset(req, 0, sizeof *req);
    if (len > d->max_bytes) {
        return fail(msg, msglen, RILL_ERANGE, "frame of %zu bytes (at most %zu)", len,
                    d->max_bytes);
    }
    rill_err_t err = rill_msgpack_check(buf, len, RILL_PROTO_MAX_DEPTH, NULL);
    if (err != RILL_OK) {
        snprintf(msg, msglen, "%s", rill_last_error(err));
    }
    if (err != RILL_OK) {
        return err;
    }
    msgpack_zone_clear(&d->zone);
    msgpack_object root;
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack(buf, len, &off, &d->zone, &root);
    if (ur != MSGPACK_UNPACK_SUCCESS || off != len) {
        return fail(msg, msglen, RILL_EFORMAT, "not one msgpack value");
    }
    if (root.type != MSGPACK_OBJECT_MAP) {
        return fail(msg, msglen, RILL_EFORMAT, "the request must be a map");
    }
    /* The envelope is read in full before it is judged: the id first (so that every error
     * reply carries it), then the version (a later version may add envelope keys, and must get
     * EUNSUPPORTED, not EINVAL for a key this version does not know), then the rest. */
    const msgpack_object *v = NULL, *id = NULL, *cmd = NULL, *args = NULL;
    const char *envelope_err = NULL;
    for (uint32_t i = 0; i < root.via.map.size; i++) {
        const msgpack_object *k = &root.via.map.ptr[i].key, *val = &root.via.map.ptr[i].val;
        const msgpack_object **slot = rill_msgpack_key_is(k, "v")      ? &v
                                      : rill_msgpack_key_is(k, "id")   ? &id
                                      : rill_msgpack_key_is(k, "cmd")  ? &cmd
                                      : rill_msgpack_key_is(k, "args") ? &args
                                                                       : NULL;
        if (slot == NULL) {
            envelope_err = envelope_err != NULL ? envelope_err
                                                : "unknown key in the request (keys: v, id, "
                                                  "cmd, args)";
        } else if (*slot != NULL) {
            envelope_err = envelope_err != NULL ? envelope_err : "a key given twice";
        } else {
            *slot = val;
        }
    }
    uint64_t u = 0;
    if (id != NULL && as_uint(id, &u) && u < (UINT64_C(1) << 63)) {
        req->id = u;
    } else {
        return fail(msg, msglen, id == NULL ? RILL_EINVAL : RILL_EFORMAT,
                    "id: an unsigned integer below 2^63 is required");
    }
    if (v == NULL || !as_uint(v, &u)) {
        return fail(msg, msglen, RILL_EINVAL, "v: the protocol version is required");
    }
    if (u != RILL_PROTO_VERSION) {
        return fail(msg, msglen, RILL_EUNSUPPORTED, "protocol version %llu (this is %d)",
                    (unsigned long long)u, RILL_PROTO_VERSION);
    }
    if (envelope_err != NULL) {
        return fail(msg, msglen, RILL_EINVAL, "%s", envelope_err);
    }
    if (cmd == NULL || cmd->type != MSGPACK_OBJECT_STR) {
        return fail(msg, msglen, RILL_EINVAL, "cmd: a string is required");
    }
    int c = 0;
    for (; c < RILL_PROTO_N_CMDS; c++) {
        if (rill_msgpack_key_is(cmd, k_cmd[c])) {
            break;
        }
    }
    if (c == RILL_PROTO_N_CMDS) {
        return fail(msg, msglen, RILL_EINVAL, "unknown command '%.*s'",
                    (int)rill_utf8_cut(cmd->via.str.ptr, cmd->via.str.size, 40), cmd->via.str.ptr);
    }
    req->cmd = (rill_proto_cmd_t)c;
    if (args != NULL && args->type != MSGPACK_OBJECT_MAP && args->type != MSGPACK_OBJECT_NIL) {
        return fail(msg, msglen, RILL_EFORMAT, "args: must be a map");
    }
    bool seen[A_COUNT] = { false };
    uint32_t n_args = args != NULL && args->type == MSGPACK_OBJECT_MAP ? args->via.map.size : 0;
    for (uint32_t i = 0; i < n_args; i++) {
        const msgpack_object *k = &args->via.map.ptr[i].key;
        int a = 0;
        for (; a < A_COUNT; a++) {
            if (rill_msgpack_key_is(k, k_arg[a])) {
                break;
            }
        }
        if (a == A_COUNT || k_use[c][a] == 0) {
            char name[48] = "?";
            if (k->type == MSGPACK_OBJECT_STR) {
                snprintf(name, sizeof name, "%.*s",
                         (int)rill_utf8_cut(k->via.str.ptr, k->via.str.size, 40), k->via.str.ptr);
            }
            return fail(msg, msglen, RILL_EINVAL, "%s takes no argument '%s'", k_cmd[c], name);
        }
        if (seen[a]) {
            return fail(msg, msglen, RILL_EINVAL, "args.%s given twice", k_arg[a]);
        }
        seen[a] = true;
        err = decode_arg(d, req, (arg_t)a, &args->via.map.ptr[i].val, msg, msglen);
        if (err != RILL_OK) {
            return err;
        }
    }
    for (int a = 0; a < A_COUNT; a++) {
        if (k_use[c][a] == 2 && !seen[a]) {
            return fail(msg, msglen, RILL_EINVAL, "%s needs args.%s", k_cmd[c], k_arg[a]);
        }
    }
    if (c == RILL_PROTO_INGEST_AUDIO) {
        /* a packet is all five fields; without one, the request only ends the stream */
        const int n_packet =
            seen[A_CODEC] + seen[A_RATE] + seen[A_CHANNELS] + seen[A_SEQ] + seen[A_DATA];
        if (n_packet != 0 && n_packet != 5) {
            return fail(msg, msglen, RILL_EINVAL,
                        "ingest.audio: a packet needs args.codec, rate, channels, seq and data");
        }
        if (n_packet == 0 && !req->flush) {
            return fail(msg, msglen, RILL_EINVAL,
                        "ingest.audio needs a packet (codec, rate, channels, seq, data) or "
                        "flush: true");
        }
        req->present |= n_packet == 5 ? RILL_PROTO_HAS_PACKET : 0;
    }
    return RILL_OK;
}

rill_err_t rill_proto_decode(rill_proto_dec_t *d, const void *buf, size_t len,
                             rill_proto_req_t *req) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(decode_buf(d, buf, len, req, msg, sizeof msg), msg);
}
