/*
 * test_cluster.c - cluster/ against real nats-server processes that the suite starts itself
 * (JetStream, a temporary store, a free loopback port each; skipped when nats-server is not
 * installed): records published and acknowledged, then replayed exactly (types, versions,
 * payload bytes, stream sequences, from any sequence), damaged messages refused by replay;
 * leases created, renewed, polled, taken over only after the TTL, released; the old owner
 * fenced both ways (its renewal, and JetStream's last-subject-sequence check on its publish);
 * a server stopped and restarted under a live handle (nothing acknowledged lost, a retried
 * record stored once); a 3-server JetStream cluster with R3 keeping quorum while one server is
 * down; and clear errors when no server is reachable or the arguments are bad.
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <nats/nats.h>

#include "rill_alloc.h"
#include "rill_cluster.h"
#include "rill_log.h"
#include "test_util.h"

/* Short leases keep the suite fast; a stall of three quarters of one under load (2 shared cores)
 * is still no takeover while the owner renews every quarter. */
#define TTL_MS 1500

static char g_dir[64];
static const char *g_server; /* path of nats-server */

/* ---- nats-server processes ------------------------------------------------------------------ */

typedef struct srv {
    char name[16];
    int port, cluster_port;
    char store[TEST_PATH_MAX];
    char log[TEST_PATH_MAX + 8];
    char routes[256]; /* "" : no cluster */
    pid_t pid;
} srv_t;

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t n = sizeof a;
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &n), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static bool port_open(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

static void sleep_ms(int64_t ms) {
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static void srv_init(srv_t *s, const char *name) {
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->port = free_port();
    s->cluster_port = free_port();
    snprintf(s->store, sizeof s->store, "%s", test_path_in(g_dir, name));
    snprintf(s->log, sizeof s->log, "%s.log", s->store);
}

static void srv_start(srv_t *s) {
    char port[16], cport[32];
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(cport, sizeof cport, "nats://127.0.0.1:%d", s->cluster_port);
    const char *argv[24];
    int k = 0;
    argv[k++] = g_server;
    argv[k++] = "-js";
    argv[k++] = "-a";
    argv[k++] = "127.0.0.1";
    argv[k++] = "-p";
    argv[k++] = port;
    argv[k++] = "-sd";
    argv[k++] = s->store;
    argv[k++] = "-n";
    argv[k++] = s->name;
    argv[k++] = "-l";
    argv[k++] = s->log;
    if (s->routes[0] != '\0') {
        argv[k++] = "--cluster_name";
        argv[k++] = "rilltest";
        argv[k++] = "--cluster";
        argv[k++] = cport;
        argv[k++] = "--routes";
        argv[k++] = s->routes;
    }
    argv[k] = NULL;
    /* fork rather than posix_spawn: the server must die with the suite (a sanitizer that halts
     * skips every teardown), and must not hold the suite's output pipe (CTest would wait for it) */
    fflush(NULL);
    s->pid = fork();
    ck_assert_int_ge(s->pid, 0);
    if (s->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, STDIN_FILENO);
            dup2(null, STDOUT_FILENO);
            dup2(null, STDERR_FILENO);
        }
        execv(g_server, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 200 && !port_open(s->port); i++) {
        sleep_ms(50);
    }
    ck_assert_msg(port_open(s->port), "nats-server %s did not listen on %d (log %s)", s->name,
                  s->port, s->log);
}

static void srv_stop(srv_t *s, int sig) {
    if (s->pid > 0) {
        kill(s->pid, sig);
        int st = 0;
        waitpid(s->pid, &st, 0);
        s->pid = 0;
    }
}

static void url_of(const srv_t *s, char *out, size_t cap) {
    snprintf(out, cap, "nats://127.0.0.1:%d", s->port);
}

/* A handle for node `node` on urls; JetStream may need a moment after a start (a cluster elects
 * its meta leader), so connecting is retried for a few seconds. */
static rill_cluster_t *connect_node(const char *urls, const char *node, int replicas,
                                    int64_t ttl_ms) {
    rill_cluster_params_t p = rill_cluster_default_params();
    p.urls = urls;
    p.node = node;
    p.replicas = replicas;
    p.timeout_ms = 1000;
    p.lease_ttl_ms = ttl_ms;
    rill_cluster_t *c = NULL;
    rill_err_t err = RILL_OK;
    for (int i = 0; i < 60; i++) {
        if ((err = rill_cluster_new(&p, &c)) == RILL_OK) {
            return c;
        }
        sleep_ms(250);
    }
    ck_abort_msg("connecting %s to %s: %s", node, urls, rill_last_error(err));
    return NULL;
}

static rill_cluster_lease_t held_lease(rill_cluster_t *c, const char *session) {
    rill_cluster_lease_t l;
    ck_assert_int_eq(rill_cluster_lease_init(&l, session), RILL_OK);
    rill_err_t err = rill_cluster_lease_acquire(c, &l);
    ck_assert_msg(err == RILL_OK, "acquire %s: %s", session, rill_last_error(err));
    ck_assert(l.held);
    return l;
}

/* ---- replay capture ------------------------------------------------------------------------- */

#define MAX_RECS 64

typedef struct rec_copy {
    uint32_t type;
    uint64_t seq, stream_seq;
    unsigned char payload[64];
    uint32_t len;
} rec_copy_t;

typedef struct capture {
    rec_copy_t r[MAX_RECS];
    int n;
    int stop_after; /* > 0: return RILL_ECANCELED after that many */
} capture_t;

static rill_err_t on_record(void *user, const rill_session_record_t *rec, uint64_t stream_seq) {
    capture_t *cap = user;
    ck_assert_int_lt(cap->n, MAX_RECS);
    ck_assert_uint_le(rec->len, sizeof cap->r[0].payload);
    rec_copy_t *r = &cap->r[cap->n++];
    r->type = rec->type;
    r->seq = rec->seq;
    r->stream_seq = stream_seq;
    r->len = rec->len;
    memcpy(r->payload, rec->payload, rec->len);
    return cap->stop_after > 0 && cap->n == cap->stop_after ? RILL_ECANCELED : RILL_OK;
}

/* The records a test published, to compare replays with. */
typedef struct sent {
    rec_copy_t r[MAX_RECS];
    int n;
} sent_t;

static void publish_ok(rill_cluster_t *c, rill_cluster_lease_t *l, sent_t *sent, uint32_t type,
                       const void *payload, uint32_t len) {
    rec_copy_t *r = &sent->r[sent->n];
    r->type = type;
    r->seq = (uint64_t)sent->n + 1;
    r->len = len;
    if (len > 0) {
        memcpy(r->payload, payload, len);
    }
    rill_err_t err = rill_cluster_publish(c, l, type, r->seq, payload, len, &r->stream_seq);
    ck_assert_msg(err == RILL_OK, "publish %llu: %s", (unsigned long long)r->seq,
                  rill_last_error(err));
    ck_assert_uint_eq(l->last_seq, r->stream_seq);
    sent->n++;
}

/* Asserts that replaying `session` from from_seq gives exactly sent's records from index i0.
 * With patience (the 3-server case: after a server is lost JetStream elects new leaders, and
 * creating the replay's consumer may time out meanwhile: RILL_ETIMEDOUT / RILL_EIO, which the
 * header says to retry), retries those for up to 10 s; the records must still be exact. */
static void replay_check(rill_cluster_t *c, const char *session, uint64_t from_seq,
                         const sent_t *sent, int i0, bool patience) {
    capture_t *cap = calloc(1, sizeof *cap);
    ck_assert_ptr_nonnull(cap);
    uint64_t last = 0;
    rill_err_t err = RILL_OK;
    for (int i = 0; i < (patience ? 40 : 1); i++) {
        cap->n = 0;
        err = rill_cluster_replay(c, session, from_seq, on_record, cap, &last);
        if (err != RILL_ETIMEDOUT && err != RILL_EIO) {
            break;
        }
        sleep_ms(250);
    }
    ck_assert_msg(err == RILL_OK, "replay %s: %s", session, rill_last_error(err));
    ck_assert_int_eq(cap->n, sent->n - i0);
    for (int i = 0; i < cap->n; i++) {
        const rec_copy_t *a = &cap->r[i], *b = &sent->r[i0 + i];
        ck_assert_uint_eq(a->type, b->type);
        ck_assert_uint_eq(a->seq, b->seq);
        ck_assert_uint_eq(a->stream_seq, b->stream_seq);
        ck_assert_uint_eq(a->len, b->len);
        ck_assert_mem_eq(a->payload, b->payload, a->len);
    }
    ck_assert_uint_eq(last, sent->n > 0 ? sent->r[sent->n - 1].stream_seq : 0);
    free(cap);
}

static void replay_equals(rill_cluster_t *c, const char *session, uint64_t from_seq,
                          const sent_t *sent, int i0) {
    replay_check(c, session, from_seq, sent, i0, false);
}

/* ---- one server ----------------------------------------------------------------------------- */

static srv_t g_one;
static char g_one_url[64];

static void one_setup(void) {
    srv_init(&g_one, "one");
    srv_start(&g_one);
    url_of(&g_one, g_one_url, sizeof g_one_url);
}

static void one_teardown(void) {
    srv_stop(&g_one, SIGTERM);
}

START_TEST(names_and_arguments_are_checked) {
    char tok[RILL_CLUSTER_TOKEN_MAX + 1];
    ck_assert_int_eq(rill_cluster_subject_token("a.b_c-9", tok, sizeof tok), RILL_OK);
    ck_assert_str_eq(tok, "a_db__c-9");
    /* names that a naive escape would merge stay apart */
    const char *names[] = { "a_d", "a.", "a__", "a_.", "a._", "x" };
    char toks[6][RILL_CLUSTER_TOKEN_MAX + 1];
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(rill_cluster_subject_token(names[i], toks[i], sizeof toks[i]), RILL_OK);
        ck_assert_ptr_null(strchr(toks[i], '.'));
        for (int j = 0; j < i; j++) {
            ck_assert_str_ne(toks[i], toks[j]);
        }
    }
    ck_assert_int_eq(rill_cluster_subject_token("", tok, sizeof tok), RILL_EINVAL);
    ck_assert_int_eq(rill_cluster_subject_token("a b", tok, sizeof tok), RILL_EINVAL);
    ck_assert_int_eq(rill_cluster_subject_token("a>", tok, sizeof tok), RILL_EINVAL);
    ck_assert_int_eq(rill_cluster_subject_token("a.b", tok, 4), RILL_ERANGE);
    char longname[80];
    memset(longname, 'a', 65);
    longname[65] = '\0';
    ck_assert_int_eq(rill_cluster_subject_token(longname, tok, sizeof tok), RILL_EINVAL);
    rill_cluster_lease_t l;
    ck_assert_int_eq(rill_cluster_lease_init(&l, "bad name"), RILL_EINVAL);

    rill_cluster_t *c = (rill_cluster_t *)0x1;
    rill_cluster_params_t p = rill_cluster_default_params();
    p.urls = "nats://127.0.0.1:1";
    p.node = "n1";
    ck_assert_int_eq(rill_cluster_new(&p, NULL), RILL_EINVAL);
    p.node = "bad.node";
    ck_assert_int_eq(rill_cluster_new(&p, &c), RILL_EINVAL);
    ck_assert_ptr_null(c);
    p.node = "n1";
    p.urls = "nats://127.0.0.1:1,,nats://127.0.0.1:2";
    ck_assert_int_eq(rill_cluster_new(&p, &c), RILL_EINVAL);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EINVAL), "URL list"));
    p.urls = "nats://127.0.0.1:1";
    p.replicas = 0;
    ck_assert_int_eq(rill_cluster_new(&p, &c), RILL_EINVAL);
    p.replicas = 1;
    p.lease_ttl_ms = 0;
    ck_assert_int_eq(rill_cluster_new(&p, &c), RILL_EINVAL);
    p.lease_ttl_ms = 1000;
    p.prefix = "a.b";
    ck_assert_int_eq(rill_cluster_new(&p, &c), RILL_EINVAL);
    ck_assert_ptr_null(c);
    rill_cluster_destroy(NULL);
    rill_cluster_destroy(&c); /* NULL-safe on a NULL handle */
}
END_TEST

START_TEST(unreachable_servers_are_a_clear_error) {
    char urls[128];
    int a = free_port(), b = free_port();
    snprintf(urls, sizeof urls, "nats://127.0.0.1:%d,nats://127.0.0.1:%d", a, b);
    rill_cluster_params_t p = rill_cluster_default_params();
    p.urls = urls;
    p.node = "lonely";
    p.timeout_ms = 300;
    rill_cluster_t *c = (rill_cluster_t *)0x1;
    uint64_t t0 = rill_now_ns();
    rill_err_t err = rill_cluster_new(&p, &c);
    ck_assert_int_eq(err, RILL_EIO);
    ck_assert_ptr_null(c);
    const char *why = rill_last_error(err);
    ck_assert_msg(strstr(why, "no server reachable") != NULL && strstr(why, urls) != NULL, "%s",
                  why);
    ck_assert_uint_lt(rill_now_ns() - t0, 5000000000ull); /* it fails, it does not hang */
}
END_TEST

START_TEST(published_records_replay_exactly) {
    rill_cluster_t *c = connect_node(g_one_url, "n1", 1, TTL_MS);
    ck_assert(rill_cluster_connected(c));
    ck_assert_str_eq(rill_cluster_node(c), "n1");
    rill_cluster_lease_t la = held_lease(c, "sess.a"), lb = held_lease(c, "sess_b");
    ck_assert_uint_eq(la.last_seq, 0);
    sent_t *sa = calloc(1, sizeof *sa), *sb = calloc(1, sizeof *sb);
    ck_assert(sa != NULL && sb != NULL);
    const int32_t toks[4] = { 1, -2, 0x7fffffff, 0 };
    unsigned char repl[8 + 5] = { 3, 0, 0, 0, 0, 0, 0, 0, 'h', 'e', 'l', 'l', 'o' };
    const unsigned char bin[6] = { 0, 255, 0, 10, 13, 0 };
    int32_t pos = 2;
    /* interleaved with another session's records: each replays only its own */
    publish_ok(c, &la, sa, RILL_SESSION_REC_TOKENS, toks, sizeof toks);
    publish_ok(c, &lb, sb, RILL_SESSION_REC_TEXT, "other", 5);
    publish_ok(c, &la, sa, RILL_SESSION_REC_TEXT, "tick AAPL 101.5\n", 16);
    publish_ok(c, &la, sa, RILL_SESSION_REC_TEXT, bin, sizeof bin);
    publish_ok(c, &lb, sb, RILL_SESSION_REC_FLUSH, NULL, 0);
    publish_ok(c, &la, sa, RILL_SESSION_REC_FLUSH, NULL, 0);
    publish_ok(c, &la, sa, RILL_SESSION_REC_REPLACE, repl, sizeof repl);
    publish_ok(c, &la, sa, RILL_SESSION_REC_ROLLBACK, &pos, sizeof pos);
    publish_ok(c, &la, sa, RILL_SESSION_REC_TEXT_END, "end.", 4);
    for (int i = 1; i < sa->n; i++) {
        ck_assert_uint_gt(sa->r[i].stream_seq, sa->r[i - 1].stream_seq);
    }
    replay_equals(c, "sess.a", 0, sa, 0);
    replay_equals(c, "sess_b", 1, sb, 0);
    /* from a stream sequence in the middle (what a snapshot will record): only the rest */
    replay_equals(c, "sess.a", sa->r[3].stream_seq, sa, 3);
    replay_equals(c, "sess.a", sa->r[3].stream_seq - 1, sa, 3); /* b's record in between */
    sent_t none = { .n = 0 };
    capture_t *cap = calloc(1, sizeof *cap);
    ck_assert_ptr_nonnull(cap);
    uint64_t last = 99;
    ck_assert_int_eq(
        rill_cluster_replay(c, "sess.a", sa->r[sa->n - 1].stream_seq + 1, on_record, cap, &last),
        RILL_OK);
    ck_assert_int_eq(cap->n, 0);
    ck_assert_uint_eq(last, sa->r[sa->n - 1].stream_seq);
    replay_equals(c, "never.written", 0, &none, 0);
    /* the callback's error stops the replay and is returned */
    cap->stop_after = 2;
    ck_assert_int_eq(rill_cluster_replay(c, "sess.a", 0, on_record, cap, NULL), RILL_ECANCELED);
    ck_assert_int_eq(cap->n, 2);
    free(cap);

    /* a second handle (another node) reads the same: the stream is the truth, not the handle */
    rill_cluster_t *c2 = connect_node(g_one_url, "n2", 1, TTL_MS);
    replay_equals(c2, "sess.a", 0, sa, 0);

    /* a retry of an acknowledged record (its acknowledgement lost) is stored once */
    uint64_t again = 0;
    const rec_copy_t *tail = &sa->r[sa->n - 1];
    ck_assert_int_eq(
        rill_cluster_publish(c, &la, tail->type, tail->seq, tail->payload, tail->len, &again),
        RILL_OK);
    ck_assert_uint_eq(again, tail->stream_seq);
    replay_equals(c2, "sess.a", 0, sa, 0);
    /* but another record under an acknowledged version is another writer's: fenced */
    ck_assert_int_eq(
        rill_cluster_publish(c, &la, RILL_SESSION_REC_TEXT, tail->seq, "different", 9, NULL),
        RILL_EPERM);
    ck_assert(!la.held && la.fenced);
    ck_assert_int_eq(rill_cluster_publish(c, &la, RILL_SESSION_REC_TEXT, 99, "x", 1, NULL),
                     RILL_EPERM);
    replay_equals(c2, "sess.a", 0, sa, 0);

    /* bad arguments change nothing */
    ck_assert_int_eq(rill_cluster_publish(c, &lb, 0, 3, "x", 1, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_cluster_publish(c, &lb, RILL_SESSION_REC_TEXT, 3, NULL, 1, NULL),
                     RILL_EINVAL);
    ck_assert_int_eq(rill_cluster_replay(c, "bad name", 0, on_record, NULL, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_cluster_replay(c, "sess_b", 0, NULL, NULL, NULL), RILL_EINVAL);
    replay_equals(c2, "sess_b", 0, sb, 0);
    free(sa);
    free(sb);
    rill_cluster_destroy(&c2);
    rill_cluster_destroy(&c);
    ck_assert_ptr_null(c);
}
END_TEST

START_TEST(allocation_failures_change_nothing) {
    rill_cluster_params_t p = rill_cluster_default_params();
    p.urls = g_one_url;
    p.node = "n1";
    p.timeout_ms = 1000;
    p.lease_ttl_ms = TTL_MS;
    for (int n = 1; n <= 2; n++) { /* the URL list's copy, the handle */
        rill_cluster_t *c = (rill_cluster_t *)0x1;
        rill_mem_fail_nth(n);
        ck_assert_int_eq(rill_cluster_new(&p, &c), RILL_ENOMEM);
        rill_mem_fail_nth(0);
        ck_assert_ptr_null(c);
    }
    rill_cluster_t *c = connect_node(g_one_url, "n1", 1, TTL_MS);
    rill_cluster_lease_t l = held_lease(c, "alloc");
    sent_t *s = calloc(1, sizeof *s);
    ck_assert_ptr_nonnull(s);
    /* the record buffer cannot grow: nothing is published, the lease stays held */
    rill_mem_fail_nth(1);
    ck_assert_int_eq(rill_cluster_publish(c, &l, RILL_SESSION_REC_TEXT, 1, "lost", 4, NULL),
                     RILL_ENOMEM);
    rill_mem_fail_nth(0);
    ck_assert(l.held && !l.fenced);
    ck_assert_uint_eq(l.last_seq, 0);
    replay_equals(c, "alloc", 0, s, 0);
    publish_ok(c, &l, s, RILL_SESSION_REC_TEXT, "kept", 4);
    replay_equals(c, "alloc", 0, s, 0);
    free(s);
    rill_cluster_destroy(&c);
}
END_TEST

START_TEST(replay_refuses_a_message_that_is_not_a_record) {
    rill_cluster_t *c = connect_node(g_one_url, "n1", 1, TTL_MS);
    rill_cluster_lease_t l = held_lease(c, "damaged");
    sent_t *s = calloc(1, sizeof *s);
    ck_assert_ptr_nonnull(s);
    publish_ok(c, &l, s, RILL_SESSION_REC_TEXT, "good", 4);
    /* someone else's bytes on the session's subject, through plain NATS */
    natsConnection *nc = NULL;
    ck_assert_int_eq(natsConnection_ConnectTo(&nc, g_one_url), NATS_OK);
    jsCtx *js = NULL;
    ck_assert_int_eq(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
    jsPubAck *pa = NULL;
    ck_assert_int_eq(
        js_Publish(&pa, js, "rill.in.damaged", "not a record at all, long enough", 32, NULL, NULL),
        NATS_OK);
    uint64_t bad_seq = pa->Sequence;
    jsPubAck_Destroy(pa);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);

    capture_t *cap = calloc(1, sizeof *cap);
    ck_assert_ptr_nonnull(cap);
    rill_err_t err = rill_cluster_replay(c, "damaged", 0, on_record, cap, NULL);
    ck_assert_int_eq(err, RILL_EFORMAT);
    char want[64];
    snprintf(want, sizeof want, "stream sequence %llu", (unsigned long long)bad_seq);
    ck_assert_msg(strstr(rill_last_error(err), want) != NULL, "%s", rill_last_error(err));
    ck_assert_int_eq(cap->n, 1); /* the record before it was delivered */
    ck_assert_mem_eq(cap->r[0].payload, "good", 4);
    /* the owner's fence saw the foreign write too */
    ck_assert_int_eq(rill_cluster_publish(c, &l, RILL_SESSION_REC_TEXT, 2, "x", 1, NULL),
                     RILL_EPERM);
    free(cap);
    free(s);
    rill_cluster_destroy(&c);
}
END_TEST

START_TEST(leases_renew_take_over_after_the_ttl_and_fence_the_old_owner) {
    rill_cluster_t *a = connect_node(g_one_url, "node-a", 1, TTL_MS);
    rill_cluster_t *b = connect_node(g_one_url, "node-b", 1, TTL_MS);
    rill_cluster_lease_t la = held_lease(a, "leased.1");
    ck_assert_str_eq(la.owner, "node-a");
    uint64_t rev0 = la.revision;
    sent_t *s = calloc(1, sizeof *s);
    ck_assert_ptr_nonnull(s);
    publish_ok(a, &la, s, RILL_SESSION_REC_TEXT, "one", 3);

    rill_cluster_lease_t lb;
    ck_assert_int_eq(rill_cluster_lease_init(&lb, "leased.1"), RILL_OK);
    /* while a renews every quarter TTL, b polls for two TTLs and never gets it */
    uint64_t t_end = rill_now_ns() + 2ull * TTL_MS * 1000000ull;
    while (rill_now_ns() < t_end) {
        ck_assert_int_eq(rill_cluster_lease_acquire(b, &lb), RILL_EBUSY);
        ck_assert_str_eq(lb.owner, "node-a");
        ck_assert(!lb.held);
        ck_assert_int_eq(rill_cluster_lease_renew(a, &la), RILL_OK);
        ck_assert(rill_cluster_lease_valid(a, &la));
        sleep_ms(TTL_MS / 4);
    }
    ck_assert_uint_gt(la.revision, rev0);
    /* a's own acquire of a lease it holds renews it */
    uint64_t rev1 = la.revision;
    ck_assert_int_eq(rill_cluster_lease_acquire(a, &la), RILL_OK);
    ck_assert_uint_gt(la.revision, rev1);
    publish_ok(a, &la, s, RILL_SESSION_REC_TEXT, "two", 3);

    /* a stops renewing (a paused or dead owner): b takes over once the revision stood a TTL */
    uint64_t t_last = rill_now_ns();
    rill_err_t err = RILL_EBUSY;
    while ((err = rill_cluster_lease_acquire(b, &lb)) == RILL_EBUSY) {
        ck_assert_uint_lt(rill_now_ns() - t_last, 10ull * TTL_MS * 1000000ull);
        sleep_ms(TTL_MS / 10);
    }
    ck_assert_msg(err == RILL_OK, "%s", rill_last_error(err));
    ck_assert_uint_ge(rill_now_ns() - t_last, (uint64_t)TTL_MS * 1000000ull);
    ck_assert(lb.held);
    ck_assert_str_eq(lb.owner, "node-b");
    ck_assert_uint_eq(lb.last_seq, s->r[s->n - 1].stream_seq); /* continues after a's records */

    /* a's lease ran out on its own clock: it refuses to write before it even asks */
    ck_assert(!rill_cluster_lease_valid(a, &la));
    err = rill_cluster_publish(a, &la, RILL_SESSION_REC_TEXT, 3, "late", 4, NULL);
    ck_assert_int_eq(err, RILL_EPERM);
    ck_assert(!la.held && la.fenced);
    /* and a renewal finds the revision moved: fenced, the new holder named */
    la.held = true; /* as if a had not noticed the TTL: the renewal itself must fence it */
    err = rill_cluster_lease_renew(a, &la);
    ck_assert_int_eq(err, RILL_EPERM);
    ck_assert(!la.held && la.fenced);
    ck_assert_str_eq(la.owner, "node-b");
    ck_assert_int_eq(rill_cluster_lease_renew(a, &la), RILL_EINVAL); /* not held */

    publish_ok(b, &lb, s, RILL_SESSION_REC_TEXT, "three", 5);
    replay_equals(b, "leased.1", 0, s, 0);

    /* a release hands it over at once, without the TTL */
    ck_assert_int_eq(rill_cluster_lease_release(b, &lb), RILL_OK);
    ck_assert(!lb.held);
    uint64_t t_rel = rill_now_ns();
    ck_assert_int_eq(rill_cluster_lease_acquire(a, &la), RILL_OK);
    ck_assert_uint_lt(rill_now_ns() - t_rel, (uint64_t)TTL_MS * 1000000ull);
    ck_assert(la.held && !la.fenced);
    publish_ok(a, &la, s, RILL_SESSION_REC_TEXT, "four", 4);
    replay_equals(b, "leased.1", 0, s, 0);
    ck_assert_int_eq(rill_cluster_lease_release(b, &lb), RILL_EINVAL);
    free(s);
    rill_cluster_destroy(&a);
    rill_cluster_destroy(&b);
}
END_TEST

START_TEST(jetstream_refuses_an_owner_that_lost_the_race) {
    /* An owner whose clock lets it believe in its lease longer than the taker waited (here: a
     * longer TTL, standing for a pause between its validity check and its write) is still
     * stopped, by JetStream's last-subject-sequence check, once the new owner has written. */
    rill_cluster_t *slow = connect_node(g_one_url, "slow", 1, 60000);
    rill_cluster_t *fast = connect_node(g_one_url, "fast", 1, TTL_MS);
    rill_cluster_lease_t ls = held_lease(slow, "raced");
    sent_t *s = calloc(1, sizeof *s);
    ck_assert_ptr_nonnull(s);
    publish_ok(slow, &ls, s, RILL_SESSION_REC_TEXT, "a", 1);
    rill_cluster_lease_t lf;
    ck_assert_int_eq(rill_cluster_lease_init(&lf, "raced"), RILL_OK);
    rill_err_t err;
    while ((err = rill_cluster_lease_acquire(fast, &lf)) == RILL_EBUSY) {
        sleep_ms(TTL_MS / 10);
    }
    ck_assert_int_eq(err, RILL_OK);
    publish_ok(fast, &lf, s, RILL_SESSION_REC_TEXT, "b", 1);
    ck_assert(rill_cluster_lease_valid(slow, &ls)); /* it still believes */
    err = rill_cluster_publish(slow, &ls, RILL_SESSION_REC_TEXT, 3, "stale", 5, NULL);
    ck_assert_int_eq(err, RILL_EPERM);
    ck_assert_ptr_nonnull(strstr(rill_last_error(err), "another writer"));
    ck_assert(!ls.held && ls.fenced);
    replay_equals(fast, "raced", 0, s, 0); /* nothing of the stale owner's after the takeover */
    free(s);
    rill_cluster_destroy(&slow);
    rill_cluster_destroy(&fast);
}
END_TEST

START_TEST(a_restarted_server_loses_nothing_acknowledged) {
    rill_cluster_t *c = connect_node(g_one_url, "n1", 1, 30000);
    rill_cluster_lease_t l = held_lease(c, "restart");
    sent_t *s = calloc(1, sizeof *s);
    ck_assert_ptr_nonnull(s);
    publish_ok(c, &l, s, RILL_SESSION_REC_TEXT, "before 1", 8);
    publish_ok(c, &l, s, RILL_SESSION_REC_TEXT, "before 2", 8);
    srv_stop(&g_one, SIGTERM);
    for (int i = 0; i < 100 && rill_cluster_connected(c); i++) {
        sleep_ms(20);
    }
    ck_assert(!rill_cluster_connected(c));
    /* with the server gone a publish fails, within the timeout: the client is not acknowledged */
    uint64_t t0 = rill_now_ns();
    rill_err_t err = rill_cluster_publish(c, &l, RILL_SESSION_REC_TEXT, 3, "during", 6, NULL);
    ck_assert_msg(err == RILL_ETIMEDOUT || err == RILL_EIO, "%s", rill_err_name(err));
    ck_assert_uint_lt(rill_now_ns() - t0, 3000000000ull);
    ck_assert(l.held); /* a NATS failure is not a lost lease */
    srv_start(&g_one);
    for (int i = 0; i < 200 && !rill_cluster_connected(c); i++) {
        sleep_ms(50);
    }
    ck_assert(rill_cluster_connected(c));
    /* the record whose acknowledgement never came is published again; it is stored once even
     * if the first attempt reached the server after all (libnats buffers while reconnecting) */
    for (int i = 0; i < 40; i++) {
        err = rill_cluster_publish(c, &l, RILL_SESSION_REC_TEXT, 3, "during", 6, NULL);
        if (err != RILL_ETIMEDOUT && err != RILL_EIO) {
            break;
        }
        sleep_ms(250);
    }
    ck_assert_msg(err == RILL_OK, "%s", rill_last_error(err));
    rec_copy_t *r = &s->r[s->n++];
    r->type = RILL_SESSION_REC_TEXT;
    r->seq = 3;
    r->len = 6;
    memcpy(r->payload, "during", 6);
    r->stream_seq = l.last_seq;
    publish_ok(c, &l, s, RILL_SESSION_REC_TEXT, "after", 5);
    replay_equals(c, "restart", 0, s, 0);
    free(s);
    rill_cluster_destroy(&c);
}
END_TEST

/* ---- three servers, R3 ---------------------------------------------------------------------- */

static srv_t g_three[3];

static void three_teardown(void) {
    for (int i = 0; i < 3; i++) {
        srv_stop(&g_three[i], SIGTERM);
    }
}

START_TEST(r3_keeps_quorum_with_one_server_down) {
    srv_t *sv = g_three;
    const char *names[3] = { "r1", "r2", "r3" };
    for (int i = 0; i < 3; i++) {
        srv_init(&sv[i], names[i]);
    }
    for (int i = 0; i < 3; i++) {
        int k = 0;
        for (int j = 0; j < 3; j++) {
            if (j != i) {
                k += snprintf(sv[i].routes + k, sizeof sv[i].routes - (size_t)k,
                              "%snats://127.0.0.1:%d", k > 0 ? "," : "", sv[j].cluster_port);
            }
        }
    }
    for (int i = 0; i < 3; i++) {
        srv_start(&sv[i]);
    }
    char urls[3][64], all[200];
    for (int i = 0; i < 3; i++) {
        url_of(&sv[i], urls[i], sizeof urls[i]);
    }
    snprintf(all, sizeof all, "%s,%s,%s", urls[0], urls[1], urls[2]);
    rill_cluster_t *c = connect_node(all, "n1", 3, 30000);
    rill_cluster_lease_t l = held_lease(c, "replicated");
    {
        /* the stream and the bucket were made with three replicas */
        natsConnection *nc = NULL;
        ck_assert_int_eq(natsConnection_ConnectTo(&nc, all), NATS_OK);
        jsCtx *js = NULL;
        ck_assert_int_eq(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
        const char *names_js[2] = { "rill_input", "KV_rill_leases" };
        for (int i = 0; i < 2; i++) {
            jsStreamInfo *si = NULL;
            ck_assert_int_eq(js_GetStreamInfo(&si, js, names_js[i], NULL, NULL), NATS_OK);
            ck_assert_int_eq(si->Config->Replicas, 3);
            jsStreamInfo_Destroy(si);
        }
        jsCtx_Destroy(js);
        natsConnection_Destroy(nc);
    }
    sent_t *s = calloc(1, sizeof *s);
    ck_assert_ptr_nonnull(s);
    for (int i = 0; i < 5; i++) {
        publish_ok(c, &l, s, RILL_SESSION_REC_TEXT, "r3 rec", 6);
    }
    /* one server killed: two of three still acknowledge (the stream's leader may move) */
    srv_stop(&sv[2], SIGKILL);
    rill_err_t err = RILL_OK;
    for (int k = 0; k < 5; k++) {
        rec_copy_t *r = &s->r[s->n];
        r->type = RILL_SESSION_REC_TEXT;
        r->seq = (uint64_t)s->n + 1;
        r->len = 7;
        memcpy(r->payload, "quorum!", 7);
        for (int i = 0; i < 40; i++) { /* a leader election takes a few seconds at most */
            err = rill_cluster_publish(c, &l, r->type, r->seq, r->payload, r->len, &r->stream_seq);
            if (err != RILL_ETIMEDOUT && err != RILL_EIO) {
                break;
            }
            sleep_ms(250);
        }
        ck_assert_msg(err == RILL_OK, "%s", rill_last_error(err));
        s->n++;
    }
    replay_check(c, "replicated", 0, s, 0, true);
    /* it comes back and catches up; a node connected only to it reads everything */
    srv_start(&sv[2]);
    rill_cluster_t *c3 = connect_node(urls[2], "n3", 3, 30000);
    replay_check(c3, "replicated", 0, s, 0, true);
    free(s);
    rill_cluster_destroy(&c3);
    rill_cluster_destroy(&c);
}
END_TEST

static const char *find_server(void) {
    const char *env = getenv("RILL_NATS_SERVER");
    if (env != NULL && access(env, X_OK) == 0) {
        return env;
    }
    static const char *paths[] = { "/usr/sbin/nats-server", "/usr/bin/nats-server",
                                   "/usr/local/bin/nats-server" };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        if (access(paths[i], X_OK) == 0) {
            return paths[i];
        }
    }
    return NULL;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    g_server = find_server();
    if (g_server == NULL) {
        printf("SKIP: nats-server is not installed (scripts/setup.sh installs it)\n");
        return TEST_SKIP;
    }
    if (!test_tmpdir_make(g_dir, sizeof g_dir, "cluster")) {
        return EXIT_FAILURE;
    }
    test_log_quiet();
    Suite *su = suite_create("cluster");
    TCase *plain = tcase_create("plain");
    tcase_add_test(plain, names_and_arguments_are_checked);
    tcase_add_test(plain, unreachable_servers_are_a_clear_error);
    suite_add_tcase(su, plain);
    TCase *one = tcase_create("one_server");
    tcase_set_timeout(one, 60);
    tcase_add_checked_fixture(one, one_setup, one_teardown);
    tcase_add_test(one, published_records_replay_exactly);
    tcase_add_test(one, allocation_failures_change_nothing);
    tcase_add_test(one, replay_refuses_a_message_that_is_not_a_record);
    tcase_add_test(one, leases_renew_take_over_after_the_ttl_and_fence_the_old_owner);
    tcase_add_test(one, jetstream_refuses_an_owner_that_lost_the_race);
    tcase_add_test(one, a_restarted_server_loses_nothing_acknowledged);
    suite_add_tcase(su, one);
    TCase *three = tcase_create("three_servers");
    tcase_set_timeout(three, 120);
    tcase_add_checked_fixture(three, NULL, three_teardown);
    tcase_add_test(three, r3_keeps_quorum_with_one_server_down);
    suite_add_tcase(su, three);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    /* without fork, a failed test skips its teardown: no server may outlive the suite */
    one_teardown();
    three_teardown();
    test_log_release();
    nats_Close();
    test_dir_remove(g_dir);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
