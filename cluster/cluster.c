/*
 * cluster.c - rill's use of NATS JetStream through libnats 3.4 (contract: rill_cluster.h; the
 * design and what remains: docs/architecture.md, "Cluster").
 *
 * Design. Everything that must survive a node is JetStream's: the input stream holds each
 * session's records (one message per record, the ingest log's framing), the lease bucket holds
 * who owns each session. rill adds no replication or agreement of its own; it only chooses the
 * conditions of each write so that JetStream refuses the unsafe ones:
 *   - lease writes are revision-checked (kvStore_Create / kvStore_Update): of two nodes writing
 *     from one revision exactly one wins;
 *   - record writes carry the expected last subject sequence, so a record stored by another
 *     writer since this owner last wrote makes the next write fail instead of interleaving;
 *   - record writes carry a de-duplication id (session token and version), so a retry after a
 *     lost acknowledgement stores the record once; a duplicate acknowledgement is checked
 *     against the stored bytes (a different record with the same version is another writer's).
 * libnats reports a failed revision check as a plain NATS_ERR for key-value calls; rather than
 * match its message text, a failed write is classified by reading the key again: a revision
 * other than the one written from means another node won (RILL_EBUSY / RILL_EPERM), the same
 * revision means the write failed for another reason (RILL_EIO).
 *
 * Replay reads through an ordered push consumer (no acknowledgements, in order, recreated by
 * libnats on a gap) filtered on the session's subject and bounded by the subject's last stream
 * sequence read first; consumers are served by the stream leader, which holds every
 * acknowledged message. Rejected: direct get (AllowDirect), which followers may answer before
 * they have the newest messages, so a replay could miss acknowledged input; and a stream per
 * session (each replicated stream is its own Raft group: 100,000 of them is not what JetStream
 * is built for; docs/architecture.md has the numbers).
 */
#include <stdio.h>
#include <string.h>

#include <nats/nats.h>

#include "rill_alloc.h"
#include "rill_cluster.h"
#include "rill_log.h"

#define MAX_URLS 16

struct rill_cluster {
    natsOptions *opts;
    natsConnection *nc;
    jsCtx *js;
    kvStore *kv;
    char node[RILL_CLUSTER_NAME_MAX + 1];
    char stream[48];      /* P_input */
    char bucket[48];      /* P_leases */
    char subj_prefix[48]; /* P.in. */
    int64_t timeout_ms;
    int64_t ttl_ms;
    unsigned char *buf; /* one record being published */
    size_t cap;
};

/* ---- names ---------------------------------------------------------------------------------- */

static bool name_char(char ch, bool dot) {
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-' || (dot && ch == '.');
}

static bool name_ok(const char *s, size_t max, bool dot) {
    if (s == NULL) {
        return false;
    }
    size_t n = strlen(s);
    if (n == 0 || n > max) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (!name_char(s[i], dot)) {
            return false;
        }
    }
    return true;
}

rill_err_t rill_cluster_subject_token(const char *name, char *out, size_t cap) {
    if (out == NULL || !name_ok(name, RILL_CLUSTER_NAME_MAX, true)) {
        return rill__error(RILL_EINVAL, "session name must be 1..%d of [A-Za-z0-9_.-]",
                           RILL_CLUSTER_NAME_MAX);
    }
    size_t need = 1;
    for (const char *p = name; *p != '\0'; p++) {
        need += (*p == '_' || *p == '.') ? 2 : 1;
    }
    if (need > cap) {
        return rill__error(RILL_ERANGE, "subject token of '%s' needs %zu bytes, %zu given", name,
                           need, cap);
    }
    size_t k = 0;
    for (const char *p = name; *p != '\0'; p++) {
        if (*p == '_') {
            out[k++] = '_';
            out[k++] = '_';
        } else if (*p == '.') {
            out[k++] = '_';
            out[k++] = 'd';
        } else {
            out[k++] = *p;
        }
    }
    out[k] = '\0';
    return RILL_OK;
}

/* ---- NATS statuses -------------------------------------------------------------------------- */

static rill_err_t nats_fail(natsStatus st, const char *what) {
    const char *detail = nats_GetLastError(NULL);
    rill_err_t err = RILL_EIO;
    if (st == NATS_TIMEOUT) {
        err = RILL_ETIMEDOUT;
    } else if (st == NATS_NO_MEMORY) {
        err = RILL_ENOMEM;
    }
    bool more = detail != NULL && detail[0] != '\0';
    return rill__error(err, "NATS: %s: %s%s%s", what, natsStatus_GetText(st), more ? " - " : "",
                       more ? detail : "");
}

/* ---- connection ----------------------------------------------------------------------------- */

rill_cluster_params_t rill_cluster_default_params(void) {
    rill_cluster_params_t p;
    memset(&p, 0, sizeof p);
    p.prefix = "rill";
    p.replicas = 1;
    p.timeout_ms = 2000;
    p.lease_ttl_ms = 10000;
    return p;
}

/* Splits urls into list (pointers into copy). Returns the count, or -1 for a bad list. */
static int split_urls(char *copy, const char **list) {
    int n = 0;
    for (char *tok = copy;;) {
        char *comma = strchr(tok, ',');
        if (comma != NULL) {
            *comma = '\0';
        }
        if (tok[0] == '\0' || strpbrk(tok, " \t\r\n") != NULL || n == MAX_URLS) {
            return -1;
        }
        list[n++] = tok;
        if (comma == NULL) {
            return n;
        }
        tok = comma + 1;
    }
}

static rill_err_t open_stream(rill_cluster_t *c, int replicas) {
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus st = js_GetStreamInfo(&si, c->js, c->stream, NULL, &jerr);
    if (st == NATS_OK) {
        jsStreamInfo_Destroy(si);
        return RILL_OK;
    }
    if (st != NATS_NOT_FOUND && jerr != JSStreamNotFoundErr) {
        return nats_fail(st, "reading the input stream's information (is JetStream enabled?)");
    }
    char subjects[64];
    snprintf(subjects, sizeof subjects, "%s>", c->subj_prefix);
    const char *subj[1] = { subjects };
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = c->stream;
    cfg.Subjects = subj;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.Replicas = replicas;
    cfg.Retention = js_LimitsPolicy;
    st = js_AddStream(&si, c->js, &cfg, NULL, &jerr);
    if (st != NATS_OK && jerr != JSStreamNameExistErr) {
        return nats_fail(st, "creating the input stream");
    }
    jsStreamInfo_Destroy(si);
    return RILL_OK;
}

static rill_err_t open_bucket(rill_cluster_t *c, int replicas) {
    natsStatus st = js_KeyValue(&c->kv, c->js, c->bucket);
    if (st == NATS_OK) {
        return RILL_OK;
    }
    if (st != NATS_NOT_FOUND) {
        return nats_fail(st, "opening the lease bucket");
    }
    kvConfig cfg;
    kvConfig_Init(&cfg);
    cfg.Bucket = c->bucket;
    cfg.History = 1;
    cfg.StorageType = js_FileStorage;
    cfg.Replicas = replicas;
    st = js_CreateKeyValue(&c->kv, c->js, &cfg);
    if (st != NATS_OK) {
        /* another node may have created it meanwhile */
        st = js_KeyValue(&c->kv, c->js, c->bucket);
    }
    return st == NATS_OK ? RILL_OK : nats_fail(st, "creating the lease bucket");
}

rill_err_t rill_cluster_new(const rill_cluster_params_t *p, rill_cluster_t **out) {
    if (out == NULL) {
        return rill__error(RILL_EINVAL, "cluster: NULL out");
    }
    *out = NULL;
    if (p == NULL || p->urls == NULL) {
        return rill__error(RILL_EINVAL, "cluster: no NATS URL given");
    }
    if (!name_ok(p->node, RILL_CLUSTER_NAME_MAX, false)) {
        return rill__error(RILL_EINVAL, "cluster: node name must be 1..%d of [A-Za-z0-9_-]",
                           RILL_CLUSTER_NAME_MAX);
    }
    if (!name_ok(p->prefix, 32, false)) {
        return rill__error(RILL_EINVAL, "cluster: prefix must be 1..32 of [A-Za-z0-9_-]");
    }
    if (p->replicas < 1 || p->replicas > 5 || p->timeout_ms <= 0 || p->lease_ttl_ms <= 0) {
        return rill__error(RILL_EINVAL,
                           "cluster: replicas %d (1..5), timeout %lld ms, lease TTL %lld ms "
                           "(both > 0)",
                           p->replicas, (long long)p->timeout_ms, (long long)p->lease_ttl_ms);
    }
    size_t ulen = strlen(p->urls);
    char *copy = rill_malloc(RILL_MEM_SERVER, ulen + 1);
    rill_cluster_t *c = rill_calloc(RILL_MEM_SERVER, 1, sizeof *c);
    if (copy == NULL || c == NULL) {
        rill_free(copy);
        rill_free(c);
        return rill__error(RILL_ENOMEM, "cluster: out of memory");
    }
    memcpy(copy, p->urls, ulen + 1);
    const char *urls[MAX_URLS];
    int n_urls = split_urls(copy, urls);
    rill_err_t err = RILL_OK;
    if (n_urls < 0) {
        err = rill__error(RILL_EINVAL,
                          "cluster: bad NATS URL list '%s' (comma-separated, at "
                          "most %d, no spaces)",
                          p->urls, MAX_URLS);
        goto fail;
    }
    snprintf(c->node, sizeof c->node, "%s", p->node);
    snprintf(c->stream, sizeof c->stream, "%s_input", p->prefix);
    snprintf(c->bucket, sizeof c->bucket, "%s_leases", p->prefix);
    snprintf(c->subj_prefix, sizeof c->subj_prefix, "%s.in.", p->prefix);
    c->timeout_ms = p->timeout_ms;
    c->ttl_ms = p->lease_ttl_ms;

    natsStatus st = natsOptions_Create(&c->opts);
    if (st == NATS_OK) {
        st = natsOptions_SetServers(c->opts, urls, n_urls);
    }
    if (st == NATS_OK) {
        st = natsOptions_SetTimeout(c->opts, p->timeout_ms);
    }
    if (st == NATS_OK) {
        st = natsOptions_SetMaxReconnect(c->opts, -1); /* for as long as the handle lives */
    }
    if (st == NATS_OK) {
        st = natsOptions_SetReconnectWait(c->opts, 100);
    }
    if (st == NATS_OK) {
        st = natsOptions_SetName(c->opts, c->node);
    }
    if (st != NATS_OK) {
        err = nats_fail(st, "connection options");
        goto fail;
    }
    st = natsConnection_Connect(&c->nc, c->opts);
    if (st != NATS_OK) {
        err = nats_fail(st, "connecting");
        rill__error(err, "NATS: no server reachable at %s (%s)", p->urls, rill_last_error(err));
        goto fail;
    }
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = p->timeout_ms;
    st = natsConnection_JetStream(&c->js, c->nc, &jo);
    if (st != NATS_OK) {
        err = nats_fail(st, "opening JetStream");
        goto fail;
    }
    if ((err = open_stream(c, p->replicas)) != RILL_OK ||
        (err = open_bucket(c, p->replicas)) != RILL_OK) {
        goto fail;
    }
    rill_free(copy);
    *out = c;
    return RILL_OK;
fail:
    rill_free(copy);
    rill_cluster_destroy(&c);
    return err;
}

void rill_cluster_destroy(rill_cluster_t **cp) {
    if (cp == NULL || *cp == NULL) {
        return;
    }
    rill_cluster_t *c = *cp;
    kvStore_Destroy(c->kv);
    jsCtx_Destroy(c->js);
    natsConnection_Destroy(c->nc);
    natsOptions_Destroy(c->opts);
    rill_free(c->buf);
    rill_free(c);
    *cp = NULL;
}

const char *rill_cluster_node(const rill_cluster_t *c) {
    return c != NULL ? c->node : "";
}

int64_t rill_cluster_lease_ttl_ms(const rill_cluster_t *c) {
    return c != NULL ? c->ttl_ms : 0;
}

bool rill_cluster_connected(const rill_cluster_t *c) {
    return c != NULL && natsConnection_Status(c->nc) == NATS_CONN_STATUS_CONNECTED;
}

/* ---- leases --------------------------------------------------------------------------------- */

rill_err_t rill_cluster_lease_init(rill_cluster_lease_t *l, const char *name) {
    char tok[RILL_CLUSTER_TOKEN_MAX + 1];
    if (l == NULL) {
        return rill__error(RILL_EINVAL, "lease: NULL");
    }
    rill_err_t err = rill_cluster_subject_token(name, tok, sizeof tok);
    if (err != RILL_OK) {
        return err;
    }
    memset(l, 0, sizeof *l);
    snprintf(l->session, sizeof l->session, "%s", name);
    return RILL_OK;
}

static uint64_t ttl_ns(const rill_cluster_t *c) {
    return (uint64_t)c->ttl_ms * 1000000u;
}

bool rill_cluster_lease_valid(const rill_cluster_t *c, const rill_cluster_lease_t *l) {
    return c != NULL && l != NULL && l->held && rill_now_ns() - l->renewed_ns < ttl_ns(c);
}

/* The lease as the bucket has it now: *found false when the key is absent. */
static rill_err_t lease_read(rill_cluster_t *c, const char *key, bool *found, uint64_t *rev,
                             char owner[RILL_CLUSTER_NAME_MAX + 1]) {
    kvEntry *e = NULL;
    natsStatus st = kvStore_Get(&e, c->kv, key);
    *found = false;
    owner[0] = '\0';
    if (st == NATS_NOT_FOUND) {
        return RILL_OK;
    }
    if (st != NATS_OK) {
        return nats_fail(st, "reading a lease");
    }
    int n = kvEntry_ValueLen(e);
    if (n < 0 || n > RILL_CLUSTER_NAME_MAX) {
        kvEntry_Destroy(e);
        return rill__error(RILL_EFORMAT, "lease '%s' holds %d bytes, not a node name", key, n);
    }
    memcpy(owner, kvEntry_Value(e), (size_t)n);
    owner[n] = '\0';
    *rev = kvEntry_Revision(e);
    *found = true;
    kvEntry_Destroy(e);
    return RILL_OK;
}

/* Records what the bucket shows of a lease this node does not hold. */
static void observe(rill_cluster_lease_t *l, uint64_t rev, const char *owner) {
    if (rev != l->revision) {
        l->revision = rev;
        l->seen_ns = rill_now_ns();
    }
    snprintf(l->owner, sizeof l->owner, "%s", owner);
    if (l->held) {
        l->fenced = true;
    }
    l->held = false;
    l->renewed_ns = 0;
}

/* Writes `value` from revision `from` (0: create). RILL_OK with *rev, RILL_EBUSY when the
 * revision moved (l then shows the new one), or a NATS error. */
static rill_err_t lease_write(rill_cluster_t *c, rill_cluster_lease_t *l, const char *key,
                              const char *value, uint64_t from, uint64_t *rev) {
    natsStatus st = from == 0 ? kvStore_Create(rev, c->kv, key, value, (int)strlen(value))
                              : kvStore_Update(rev, c->kv, key, value, (int)strlen(value), from);
    if (st == NATS_OK) {
        return RILL_OK;
    }
    rill_err_t werr = nats_fail(st, "writing a lease");
    bool found = false;
    uint64_t now_rev = 0;
    char owner[RILL_CLUSTER_NAME_MAX + 1];
    if (st == NATS_ERR && lease_read(c, key, &found, &now_rev, owner) == RILL_OK &&
        (found ? now_rev != from : from != 0)) {
        observe(l, found ? now_rev : 0, owner);
        return rill__error(RILL_EBUSY, "lease of '%s': revision %llu is %s (held by '%s')",
                           l->session, (unsigned long long)from, found ? "gone" : "deleted", owner);
    }
    return werr;
}

/* The stream sequence of the session's last record (0: none). */
static rill_err_t last_subject_seq(rill_cluster_t *c, const char *subject, uint64_t *seq) {
    natsMsg *m = NULL;
    jsErrCode jerr = 0;
    natsStatus st = js_GetLastMsg(&m, c->js, c->stream, subject, NULL, &jerr);
    if (st == NATS_NOT_FOUND || jerr == JSNoMessageFoundErr) {
        *seq = 0;
        return RILL_OK;
    }
    if (st != NATS_OK) {
        return nats_fail(st, "reading a session's last record");
    }
    *seq = natsMsg_GetSequence(m);
    natsMsg_Destroy(m);
    return RILL_OK;
}

static void subject_of(const rill_cluster_t *c, const char *tok, char *out, size_t cap) {
    snprintf(out, cap, "%s%s", c->subj_prefix, tok);
}

rill_err_t rill_cluster_lease_acquire(rill_cluster_t *c, rill_cluster_lease_t *l) {
    if (c == NULL || l == NULL) {
        return rill__error(RILL_EINVAL, "lease acquire: NULL");
    }
    char key[RILL_CLUSTER_TOKEN_MAX + 1], subject[RILL_CLUSTER_TOKEN_MAX + 64];
    rill_err_t err = rill_cluster_subject_token(l->session, key, sizeof key);
    if (err != RILL_OK) {
        return err;
    }
    subject_of(c, key, subject, sizeof subject);
    bool found = false;
    uint64_t rev = 0;
    char owner[RILL_CLUSTER_NAME_MAX + 1];
    uint64_t t0 = rill_now_ns();
    if ((err = lease_read(c, key, &found, &rev, owner)) != RILL_OK) {
        if (l->held && !rill_cluster_lease_valid(c, l)) {
            l->held = false;
        }
        return err;
    }
    /* ours: this handle wrote the revision the bucket shows */
    bool ours = found && l->renewed_ns != 0 && rev == l->revision && strcmp(owner, c->node) == 0;
    if (found && owner[0] != '\0' && !ours) {
        if (rev != l->revision || l->seen_ns == 0) {
            observe(l, rev, owner);
            return rill__error(RILL_EBUSY, "session '%s' is held by '%s' (revision %llu)",
                               l->session, owner, (unsigned long long)rev);
        }
        uint64_t stood = rill_now_ns() - l->seen_ns;
        if (stood < ttl_ns(c)) {
            observe(l, rev, owner);
            return rill__error(RILL_EBUSY,
                               "session '%s' is held by '%s' (revision %llu, unchanged for %llu "
                               "of %lld ms)",
                               l->session, owner, (unsigned long long)rev,
                               (unsigned long long)(stood / 1000000u), (long long)c->ttl_ms);
        }
        RILL_LOGI("cluster: taking over session '%s' from '%s' (revision %llu stood %llu ms)",
                  l->session, owner, (unsigned long long)rev,
                  (unsigned long long)(stood / 1000000u));
    }
    uint64_t new_rev = 0;
    t0 = rill_now_ns();
    err = lease_write(c, l, key, c->node, found ? rev : 0, &new_rev);
    if (err != RILL_OK) {
        return err;
    }
    l->revision = new_rev;
    l->renewed_ns = t0;
    l->seen_ns = rill_now_ns();
    snprintf(l->owner, sizeof l->owner, "%s", c->node);
    l->fenced = false;
    if (ours && l->held) {
        return RILL_OK; /* a renewal: this holder's publishes keep last_seq current */
    }
    /* held only once the session's last record is known, so that the first publish is fenced by
     * it; on failure the revision stays ours and the next acquire renews it */
    l->held = false;
    if ((err = last_subject_seq(c, subject, &l->last_seq)) != RILL_OK) {
        return err;
    }
    l->held = true;
    return RILL_OK;
}

rill_err_t rill_cluster_lease_renew(rill_cluster_t *c, rill_cluster_lease_t *l) {
    if (c == NULL || l == NULL || !l->held) {
        return rill__error(RILL_EINVAL, "lease renew: NULL or not held");
    }
    char key[RILL_CLUSTER_TOKEN_MAX + 1];
    rill_err_t err = rill_cluster_subject_token(l->session, key, sizeof key);
    if (err != RILL_OK) {
        return err;
    }
    uint64_t t0 = rill_now_ns(), rev = 0;
    uint64_t from = l->revision;
    err = lease_write(c, l, key, c->node, from, &rev);
    if (err == RILL_EBUSY) {
        l->fenced = true;
        RILL_LOGW("cluster: lease of '%s' was taken by '%s'; this node stops writing it",
                  l->session, l->owner);
        return rill__error(RILL_EPERM, "lease of '%s' was taken by '%s' (revision %llu)",
                           l->session, l->owner, (unsigned long long)l->revision);
    }
    if (err != RILL_OK) {
        return err;
    }
    l->revision = rev;
    l->renewed_ns = t0;
    l->seen_ns = rill_now_ns();
    return RILL_OK;
}

rill_err_t rill_cluster_lease_release(rill_cluster_t *c, rill_cluster_lease_t *l) {
    if (c == NULL || l == NULL || !l->held) {
        return rill__error(RILL_EINVAL, "lease release: NULL or not held");
    }
    char key[RILL_CLUSTER_TOKEN_MAX + 1];
    rill_err_t err = rill_cluster_subject_token(l->session, key, sizeof key);
    if (err != RILL_OK) {
        return err;
    }
    uint64_t rev = 0;
    err = lease_write(c, l, key, "", l->revision, &rev);
    l->held = false;
    l->renewed_ns = 0;
    if (err == RILL_EBUSY) {
        l->fenced = true;
        return rill__error(RILL_EPERM, "lease of '%s' had been taken by '%s'", l->session,
                           l->owner);
    }
    if (err != RILL_OK) {
        return err;
    }
    l->owner[0] = '\0';
    l->revision = rev;
    l->seen_ns = rill_now_ns();
    return RILL_OK;
}

/* ---- input records -------------------------------------------------------------------------- */

static void fence(rill_cluster_lease_t *l) {
    l->held = false;
    l->fenced = true;
    l->renewed_ns = 0;
}

/* Whether the message stored at stream sequence seq is exactly rec[0, n). */
static rill_err_t stored_equals(rill_cluster_t *c, uint64_t seq, const void *rec, size_t n,
                                bool *equal) {
    natsMsg *m = NULL;
    jsErrCode jerr = 0;
    natsStatus st = js_GetMsg(&m, c->js, c->stream, seq, NULL, &jerr);
    if (st != NATS_OK) {
        return nats_fail(st, "reading a duplicate record back");
    }
    *equal = (size_t)natsMsg_GetDataLength(m) == n && memcmp(natsMsg_GetData(m), rec, n) == 0;
    natsMsg_Destroy(m);
    return RILL_OK;
}

rill_err_t rill_cluster_publish(rill_cluster_t *c, rill_cluster_lease_t *l, uint32_t type,
                                uint64_t seq, const void *payload, size_t len,
                                uint64_t *stream_seq) {
    if (c == NULL || l == NULL) {
        return rill__error(RILL_EINVAL, "publish: NULL");
    }
    if (!l->held) {
        return rill__error(RILL_EPERM, "publish: this node does not hold the lease of '%s'%s",
                           l->session, l->fenced ? " (taken by another node)" : "");
    }
    if (!rill_cluster_lease_valid(c, l)) {
        fence(l);
        return rill__error(RILL_EPERM,
                           "publish: the lease of '%s' ran out (%lld ms since its last renewal "
                           "was sent): this node stops writing",
                           l->session, (long long)c->ttl_ms);
    }
    unsigned char hdr[RILL_SESSION_RECORD_HEADER];
    rill_err_t err = rill_session_record_header(hdr, type, seq, payload, len);
    if (err != RILL_OK) {
        return err;
    }
    size_t n = sizeof hdr + len;
    if (n > c->cap) {
        unsigned char *grown = rill_realloc(RILL_MEM_SERVER, c->buf, n);
        if (grown == NULL) {
            return rill__error(RILL_ENOMEM, "publish: out of memory (%zu-byte record)", n);
        }
        c->buf = grown;
        c->cap = n;
    }
    memcpy(c->buf, hdr, sizeof hdr);
    if (len > 0) {
        memcpy(c->buf + sizeof hdr, payload, len);
    }
    char tok[RILL_CLUSTER_TOKEN_MAX + 1], subject[RILL_CLUSTER_TOKEN_MAX + 64];
    char msg_id[RILL_CLUSTER_TOKEN_MAX + 32];
    if ((err = rill_cluster_subject_token(l->session, tok, sizeof tok)) != RILL_OK) {
        return err;
    }
    subject_of(c, tok, subject, sizeof subject);
    snprintf(msg_id, sizeof msg_id, "%s-%llu", tok, (unsigned long long)seq);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MsgId = msg_id;
    po.ExpectLastSubjectSeq = l->last_seq;
    po.MaxWait = c->timeout_ms;
    jsPubAck *pa = NULL;
    jsErrCode jerr = 0;
    natsStatus st = js_Publish(&pa, c->js, subject, c->buf, (int)n, &po, &jerr);
    if (st != NATS_OK) {
        if (jerr == JSStreamWrongLastSequenceErr) {
            fence(l);
            return rill__error(RILL_EPERM,
                               "publish: another writer stored a record of '%s' after stream "
                               "sequence %llu: this node stops writing",
                               l->session, (unsigned long long)l->last_seq);
        }
        return nats_fail(st, "publishing a record");
    }
    uint64_t at = pa->Sequence;
    bool dup = pa->Duplicate;
    jsPubAck_Destroy(pa);
    if (dup) {
        bool equal = false;
        if ((err = stored_equals(c, at, c->buf, n, &equal)) != RILL_OK) {
            return err;
        }
        if (!equal) {
            fence(l);
            return rill__error(RILL_EPERM,
                               "publish: version %llu of '%s' was stored by another writer "
                               "(stream sequence %llu): this node stops writing",
                               (unsigned long long)seq, l->session, (unsigned long long)at);
        }
    }
    l->last_seq = at;
    if (stream_seq != NULL) {
        *stream_seq = at;
    }
    return RILL_OK;
}

rill_err_t rill_cluster_replay(rill_cluster_t *c, const char *name, uint64_t from_seq,
                               rill_cluster_record_fn fn, void *user, uint64_t *last_seq) {
    if (c == NULL || fn == NULL) {
        return rill__error(RILL_EINVAL, "replay: NULL");
    }
    char tok[RILL_CLUSTER_TOKEN_MAX + 1], subject[RILL_CLUSTER_TOKEN_MAX + 64];
    rill_err_t err = rill_cluster_subject_token(name, tok, sizeof tok);
    if (err != RILL_OK) {
        return err;
    }
    subject_of(c, tok, subject, sizeof subject);
    uint64_t last = 0;
    if ((err = last_subject_seq(c, subject, &last)) != RILL_OK) {
        return err;
    }
    if (last_seq != NULL) {
        *last_seq = last;
    }
    if (last == 0 || from_seq > last) {
        return RILL_OK;
    }
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = c->stream;
    so.Ordered = true;
    if (from_seq > 1) {
        so.Config.DeliverPolicy = js_DeliverByStartSequence;
        so.Config.OptStartSeq = from_seq;
    } else {
        so.Config.DeliverPolicy = js_DeliverAll;
    }
    natsSubscription *sub = NULL;
    jsErrCode jerr = 0;
    natsStatus st = js_SubscribeSync(&sub, c->js, subject, NULL, &so, &jerr);
    if (st != NATS_OK) {
        return nats_fail(st, "subscribing to replay a session");
    }
    for (;;) {
        natsMsg *m = NULL;
        st = natsSubscription_NextMsg(&m, sub, c->timeout_ms);
        if (st != NATS_OK) {
            err = nats_fail(st, "replaying a session's records");
            break;
        }
        jsMsgMetaData *md = NULL;
        st = natsMsg_GetMetaData(&md, m);
        if (st != NATS_OK) {
            natsMsg_Destroy(m);
            err = nats_fail(st, "reading a replayed record's metadata");
            break;
        }
        uint64_t at = md->Sequence.Stream;
        jsMsgMetaData_Destroy(md);
        rill_session_record_t rec;
        err = rill_session_record_parse(natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m), &rec);
        if (err != RILL_OK) {
            rill__error(err, "session '%s', stream sequence %llu: %s", name, (unsigned long long)at,
                        rill_last_error(err));
        } else {
            err = fn(user, &rec, at);
        }
        natsMsg_Destroy(m);
        if (err != RILL_OK || at >= last) {
            break;
        }
    }
    natsSubscription_Unsubscribe(sub);
    natsSubscription_Destroy(sub);
    return err;
}
