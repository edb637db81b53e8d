/*
 * speech.c - rilld's speech sessions (contract: server_internal.h; wire: docs/protocol.md,
 * "Speech"): a session's recognizer, the command ingest.audio, and the <session>/transcript
 * events.
 *
 * Shape (decided here, docs/protocol.md "Speech sessions"). A session created on a language
 * model with `asr: NAME` (a Whisper model of this daemon) gets a recognizer whose transcript is
 * that session's own input (rill_scheduler.h, "speech recognizers": committed text as text,
 * the tentative tail as replaces), so questions, standing queries and completions on the
 * session see what was said; a session created on a Whisper model (`model: NAME`) is
 * transcript-only: it has a recognizer and no language-model state, takes ingest.audio,
 * session.stats and session.close, and publishes transcript events. Rejected: a separate
 * "speech session" object that a language-model session subscribes to (two names, two owners
 * to check, and a consumer whose producer may vanish); it can be layered on top later.
 *
 * Packets. One packet decoder per stream (ingest/rill_audio.h: loss concealment, duplicates and
 * late packets dropped and counted), made from the stream's first packet, dropped at a flush, so
 * the next packet starts a new stream (its own codec, rate and numbering). A packet is taken
 * only when the recognizer's queue has room for the most the decoder can write
 * (rill_audio_packet_out_max), checked before decoding, so a full queue is RILL_EFULL with the
 * decoder unchanged and the client may send the same packet again: the decoder's all-or-nothing
 * contract carries through to the reply. The socket thread is the queue's only producer.
 *
 * Transcript updates come from the engine thread through a lock-free list (one record per
 * update, never dropped: a caption that loses a committed delta is wrong forever) and are
 * published by the socket thread, which finds the session by its key (srv_sess_t.key) rather
 * than a pointer, so an update of a session closed meanwhile is dropped harmlessly.
 */
#include <stdio.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "server_internal.h"

/* The recognizer's callback argument: the server and the session's key. */
typedef struct srv_asr_ctx {
    srv_t *s;
    uint64_t key;
} srv_asr_ctx_t;

rill_err_t srv_speech_attach(srv_t *s, srv_sess_t *x, int32_t asr_model, const char **why) {
    srv_model_t *m = &s->models[asr_model];
    srv_asr_ctx_t *ctx = rill_calloc(RILL_MEM_SERVER, 1, sizeof *ctx);
    if (ctx == NULL) {
        *why = "out of memory";
        return RILL_ENOMEM;
    }
    if (x->key == 0) {
        x->key = ++s->next_key;
    }
    ctx->s = s;
    ctx->key = x->key;
    rill_sched_asr_params_t p = rill_sched_asr_default_params();
    p.whisper = m->whisper;
    p.model = m->model;
    p.asr.language = NULL; /* English (a multilingual model's other languages: not yet) */
    p.consumer = x->sid;
    p.on_update = srv_cb_transcript;
    p.user = ctx;
    rill_err_t err = rill_sched_asr_attach(s->sch, &p, &x->asr);
    if (err != RILL_OK) {
        rill_free(ctx);
        *why = rill_last_error(err);
        return err;
    }
    x->asr_ctx = ctx;
    x->asr_model = asr_model;
    return RILL_OK;
}

/* Folds the current decoder's counters into x->audio and drops it (the stream ended). */
static void end_stream(srv_sess_t *x) {
    if (x->pdec == NULL) {
        return;
    }
    const rill_audio_stats_t a = rill_audio_packet_stats(x->pdec);
    x->audio.frames_in += a.frames_in;
    x->audio.samples_out += a.samples_out;
    x->audio.packets += a.packets;
    x->audio.packets_lost += a.packets_lost;
    x->audio.packets_concealed += a.packets_concealed;
    x->audio.concealed_ms += a.concealed_ms;
    x->audio.packets_duplicate += a.packets_duplicate;
    x->audio.packets_late += a.packets_late;
    x->audio.resyncs += a.resyncs;
    x->audio.packets_bad += a.packets_bad;
    rill_audio_packet_decoder_destroy(&x->pdec);
}

void srv_speech_detach(srv_t *s, srv_sess_t *x) {
    if (x->asr != NULL) {
        rill_sched_asr_detach(s->sch, &x->asr);
        srv_transcripts_drain(s); /* its last updates, while the session is still listed */
    }
    rill_free(x->asr_ctx);
    x->asr_ctx = NULL;
    end_stream(x);
    rill_free(x->pcm);
    x->pcm = NULL;
    x->pcm_cap = 0;
}

/* The counters of every stream of x, the current one included. */
static rill_audio_stats_t audio_stats(const srv_sess_t *x) {
    rill_audio_stats_t t = x->audio;
    if (x->pdec != NULL) {
        const rill_audio_stats_t a = rill_audio_packet_stats(x->pdec);
        t.frames_in += a.frames_in;
        t.samples_out += a.samples_out;
        t.packets += a.packets;
        t.packets_lost += a.packets_lost;
        t.packets_concealed += a.packets_concealed;
        t.concealed_ms += a.concealed_ms;
        t.packets_duplicate += a.packets_duplicate;
        t.packets_late += a.packets_late;
        t.resyncs += a.resyncs;
        t.packets_bad += a.packets_bad;
    }
    return t;
}

void srv_cmd_ingest_audio(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r, srv_sess_t *x) {
    if (x->asr == NULL) {
        srv_reply_err(s, &c->from, r->id, RILL_EUNSUPPORTED,
                      "the session has no recognizer (session.create with asr: NAME, or on a "
                      "Whisper model)");
        return;
    }
    int64_t n = 0;
    const char *packet = "none";
    rill_audio_stats_t before = { 0 }, after = { 0 };
    if (r->present & RILL_PROTO_HAS_PACKET) {
        rill_audio_codec_t codec;
        if (rill_audio_codec_from_name(r->codec.p, r->codec.len, &codec) != RILL_OK) {
            x->audio.packets_bad++;
            srv_reply_err(s, &c->from, r->id, RILL_EUNSUPPORTED,
                          "args.codec: \"opus\" or \"pcm16\"");
            return;
        }
        rill_audio_packet_decoder_t *d = x->pdec;
        const bool fresh = d == NULL;
        if (fresh) {
            rill_err_t err = rill_audio_packet_decoder_new(NULL, codec, r->rate, r->channels, &d);
            if (err != RILL_OK) {
                x->audio.packets_bad++;
                srv_reply_err(s, &c->from, r->id, err, rill_last_error(err));
                return;
            }
        }
        const size_t need = rill_audio_packet_out_max(d);
        if (need > x->pcm_cap) {
            float *g = rill_realloc(RILL_MEM_SERVER, x->pcm, need * sizeof *g);
            if (g == NULL) {
                if (fresh) {
                    rill_audio_packet_decoder_destroy(&d);
                }
                srv_reply_err(s, &c->from, r->id, RILL_ENOMEM, "out of memory");
                return;
            }
            x->pcm = g;
            x->pcm_cap = need;
        }
        const int64_t room = rill_sched_asr_room(x->asr);
        if (room < (int64_t)need) {
            if (fresh) {
                rill_audio_packet_decoder_destroy(&d);
            }
            char msg[160];
            snprintf(msg, sizeof msg,
                     "the recognizer's queue is full (%lld samples free, a packet may need "
                     "%zu): send seq %lld again later",
                     (long long)room, need, (long long)r->seq);
            srv_reply_err(s, &c->from, r->id, RILL_EFULL, msg);
            return;
        }
        before = rill_audio_packet_stats(d);
        n = rill_audio_packet_decode(d, codec, r->rate, r->channels, r->seq, r->data, r->data_len,
                                     x->pcm, x->pcm_cap);
        if (n < 0) {
            if (fresh) {
                rill_audio_packet_decoder_destroy(&d);
                x->audio.packets_bad++;
            }
            srv_reply_err(s, &c->from, r->id, (rill_err_t)n, rill_last_error((rill_err_t)n));
            return;
        }
        x->pdec = d;
        after = rill_audio_packet_stats(d);
        packet = after.packets_duplicate > before.packets_duplicate ? "duplicate"
                 : after.packets_late > before.packets_late         ? "late"
                 : after.resyncs > before.resyncs                   ? "resync"
                 : after.packets_lost > before.packets_lost         ? "gap"
                                                                    : "ok";
        rill_err_t err = rill_sched_asr_feed(x->asr, x->pcm, n);
        if (err != RILL_OK) { /* room was checked: only a recognizer that failed to restart */
            srv_reply_err(s, &c->from, r->id, err, rill_last_error(err));
            return;
        }
    }
    const int64_t expected = x->pdec != NULL ? rill_audio_packet_expected(x->pdec) : -1;
    if (r->flush) {
        rill_err_t err = rill_sched_asr_finish(x->asr);
        if (err != RILL_OK) {
            srv_reply_err(s, &c->from, r->id, err, rill_last_error(err));
            return;
        }
        end_stream(x);
    }
    msgpack_packer pk;
    srv_reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_map(&pk, 6);
    srv_pk_kv_int(&pk, "samples", n);
    srv_pk_kv_str(&pk, "packet", packet);
    srv_pk_kv_int(&pk, "lost", after.packets_lost - before.packets_lost);
    srv_pk_kv_int(&pk, "concealed_ms", after.concealed_ms - before.concealed_ms);
    srv_pk_kv_int(&pk, "expected", r->flush ? -1 : expected);
    srv_pk_kv_int(&pk, "queue_free", rill_sched_asr_room(x->asr));
    srv_reply_send(s, &c->from);
}

void srv_speech_pack_stats(srv_t *s, msgpack_packer *pk, srv_sess_t *x) {
    srv_pk_str(pk, "asr");
    rill_sched_asr_stats_t st;
    if (x->asr == NULL || rill_sched_asr_stats(s->sch, x->asr, &st) != RILL_OK) {
        msgpack_pack_nil(pk);
        return;
    }
    const rill_audio_stats_t a = audio_stats(x);
    msgpack_pack_map(pk, 21);
    srv_pk_kv_str(pk, "model", s->models[x->asr_model].name);
    srv_pk_kv_int(pk, "packets", a.packets);
    srv_pk_kv_int(pk, "packets_lost", a.packets_lost);
    srv_pk_kv_int(pk, "packets_concealed", a.packets_concealed);
    srv_pk_kv_int(pk, "concealed_ms", a.concealed_ms);
    srv_pk_kv_int(pk, "packets_duplicate", a.packets_duplicate);
    srv_pk_kv_int(pk, "packets_late", a.packets_late);
    srv_pk_kv_int(pk, "resyncs", a.resyncs);
    srv_pk_kv_int(pk, "packets_bad", a.packets_bad);
    srv_pk_kv_dbl(pk, "audio_s", (double)st.audio_ms / 1000);
    srv_pk_kv_int(pk, "samples_queued", st.samples_queued);
    srv_pk_kv_int(pk, "queue_samples", st.queue_samples);
    srv_pk_kv_int(pk, "steps", st.steps);
    srv_pk_kv_int(pk, "decodes", st.asr.decodes);
    srv_pk_kv_int(pk, "skipped_silence", st.asr.skipped_silence + st.asr.skipped_settled);
    srv_pk_kv_int(pk, "finishes", st.finishes);
    srv_pk_kv_int(pk, "step_errors", st.step_errors);
    srv_pk_kv_dbl(pk, "step_ms", (double)st.step_ns / 1e6);
    srv_pk_kv_int(pk, "consumer_inputs", st.consumer_inputs);
    srv_pk_kv_int(pk, "consumer_replaces", st.consumer_replaces);
    srv_pk_kv_int(pk, "consumer_errors", st.consumer_errors);
}

/* ---- transcript events ----------------------------------------------------------------- */

void srv_cb_transcript(void *user, const rill_sched_asr_update_t *u) {
    srv_asr_ctx_t *ctx = user;
    srv_t *s = ctx->s;
    srv_tr_t *e = rill_malloc(RILL_MEM_SERVER, sizeof *e + u->committed_len + u->tentative_len + 2);
    if (e == NULL) {
        RILL_LOGE("rilld: out of memory delivering a transcript update");
        return;
    }
    e->key = ctx->key;
    e->status = u->status;
    e->consumer_status = u->consumer_status;
    e->final = u->final;
    e->audio_ms = u->audio_ms;
    e->version = u->consumer_version;
    e->committed = (char *)(e + 1);
    memcpy(e->committed, u->committed, u->committed_len);
    e->committed[u->committed_len] = '\0';
    e->committed_len = u->committed_len;
    e->tentative = e->committed + u->committed_len + 1;
    memcpy(e->tentative, u->tentative, u->tentative_len);
    e->tentative[u->tentative_len] = '\0';
    e->tentative_len = u->tentative_len;
    snprintf(e->message, sizeof e->message, "%s", u->message != NULL ? u->message : "");
    srv_tr_t *head = atomic_load(&s->trs);
    do {
        e->next = head;
    } while (!atomic_compare_exchange_weak(&s->trs, &head, e));
    srv_events_wake(s);
}

void srv_transcripts_drain(srv_t *s) {
    srv_tr_t *list = atomic_exchange(&s->trs, NULL), *order = NULL;
    while (list != NULL) { /* newest first: publish in the order they were made */
        srv_tr_t *nx = list->next;
        list->next = order;
        order = list;
        list = nx;
    }
    while (order != NULL) {
        srv_tr_t *nx = order->next;
        srv_sess_t *x = s->sessions;
        while (x != NULL && x->key != order->key) {
            x = x->next;
        }
        if (x != NULL) {
            msgpack_packer pk;
            const rill_err_t st = order->status != RILL_OK ? order->status : order->consumer_status;
            srv_event_begin(s, &pk, 7, ++x->seq_transcript, x, "transcript");
            srv_pk_str(&pk, "committed");
            srv_pk_strn(&pk, order->committed, order->committed_len);
            srv_pk_str(&pk, "tentative");
            srv_pk_strn(&pk, order->tentative, order->tentative_len);
            srv_pk_kv_dbl(&pk, "audio_s", (double)order->audio_ms / 1000);
            srv_pk_str(&pk, "final");
            if (order->final) {
                msgpack_pack_true(&pk);
            } else {
                msgpack_pack_false(&pk);
            }
            srv_pk_kv_int(&pk, "version", order->version);
            srv_pk_kv_str(&pk, "status", rill_err_name(st));
            srv_pk_kv_str(&pk, "message", order->message);
            srv_publish(s, x, "transcript");
            /* a translation session translates what was committed; a final update is a pause */
            srv_translation_feed(s, x, order->committed, order->committed_len, order->final,
                                 order->audio_ms);
        }
        rill_free(order);
        order = nx;
    }
}

void srv_transcripts_free(srv_t *s) {
    srv_tr_t *e = atomic_exchange(&s->trs, NULL);
    while (e != NULL) {
        srv_tr_t *nx = e->next;
        rill_free(e);
        e = nx;
    }
}
