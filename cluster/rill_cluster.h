/*
 * rill_cluster.h - what rill needs of NATS JetStream (libnats) to share sessions between rilld
 * nodes (../shared/DESIGN.md section 7, docs/architecture.md "Cluster"): a connection to a list
 * of NATS servers; each session's input records on a JetStream subject of their own,
 * published and acknowledged by JetStream before the caller acknowledges its client, and
 * replayed in order from a stream sequence; and one owner per session by a lease in a
 * JetStream key-value bucket, with revision-checked create and update.
 *
 * JetStream is the truth: rill keeps no copy of its own of who owns what or which input was
 * acknowledged, and builds no replication or consensus of its own.
 *
 * Names (params.prefix "rill" by default; P below):
 *   stream  P_input, subjects P.in.>     every session's input records, one message per record
 *   subject P.in.<token>                 one session's records; <token> is the session name
 *                                        with '_' written "__" and '.' written "_d"
 *                                        (rill_cluster_subject_token), so a name of
 *                                        [A-Za-z0-9_.-] is one subject token
 *   bucket  P_leases, key <token>        the session's lease: the owning node's name, or empty
 *                                        when released
 * Both are created at rill_cluster_new() when absent, with params.replicas replicas (3 in a
 * 3-server JetStream cluster: an acknowledged record is then on a quorum of servers), file
 * storage, and a lease bucket keeping one revision per key.
 *
 * Records. A message's data is one input record exactly as the ingest log frames it
 * (sessions/rill_session.h, "records as bytes"): the same header, checksum and payloads, so the
 * stream and the local log hold one encoding. The record's sequence number is the version the
 * input makes on the session; the message's stream sequence is JetStream's (it counts every
 * session's messages) and is what replay starts from and snapshots will record.
 *
 * Leases (one owner per session). A lease is a key in the bucket whose value names the owner;
 * every write is revision-checked (create only when absent, update only from the revision last
 * seen), so two nodes can never both win one revision. The owner renews it (an update from its
 * revision) well within the TTL. libnats 3.4 and nats-server 2.9 have no per-key expiry, so
 * expiry is observed: a node that wants a held lease polls it (rill_cluster_lease_acquire), and
 * takes it over (an update from the revision it saw) once the same revision has stood for a
 * TTL on its own monotonic clock - no clock is compared between machines. Fencing, two ways:
 * an owner considers its lease valid for a TTL after it SENT the renewal that succeeded (the
 * taker's wait starts after that renewal was stored, so the two never overlap on clocks that
 * run at the same rate), and refuses to publish once that has passed; and every publish
 * carries JetStream's expected-last-subject-sequence, the stream sequence of the session's
 * last record as the owner knows it, so a write from an owner that lost the race to a newer
 * one's first record is refused by JetStream itself. An owner whose renewal finds the revision
 * moved, or whose publish is refused by that check, is fenced: the lease is no longer held and
 * every later publish on it fails until it is acquired again.
 *
 * Errors. Every call returns a rill_err_t and records the detail (with the NATS status text)
 * for rill_last_error(). NATS unreachable or a request unanswered in time: RILL_EIO or
 * RILL_ETIMEDOUT, nothing changed on this side; the connection reconnects by itself (for as
 * long as the handle lives) and a later call may succeed.
 *
 * Memory: the handle owns its NATS connection, JetStream context, bucket handle and one record
 * buffer (grown to the largest record published); libnats allocates with its own allocator.
 * Our own allocations are charged to RILL_MEM_SERVER (cluster membership is rilld's). libnats
 * also keeps process-wide state (its threads, timers) that outlives every handle; a program that
 * is done with all of them may release it with libnats' nats_Close() (the tests do, so that the
 * leak checker sees a clean exit).
 *
 * Thread safety: a rill_cluster_t is used by one thread at a time (libnats runs threads of its
 * own inside; none of them calls back into rill). A lease struct belongs to the thread using it.
 * Every call that talks to NATS blocks for at most params.timeout_ms per request.
 */
#ifndef RILL_CLUSTER_H
#define RILL_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"
#include "rill_session.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rill_cluster rill_cluster_t;

/* Longest node name, prefix and session name (bytes, without the terminating NUL). */
#define RILL_CLUSTER_NAME_MAX 64
/* Longest subject token of a session name (every byte escaped). */
#define RILL_CLUSTER_TOKEN_MAX (2 * RILL_CLUSTER_NAME_MAX)

typedef struct rill_cluster_params {
    const char *urls;     /* NATS servers, comma-separated: "nats://h1:4222,nats://h2:4222" */
    const char *node;     /* this node's name, 1..64 of [A-Za-z0-9_-] */
    const char *prefix;   /* names' prefix, 1..32 of [A-Za-z0-9_-]; default "rill" */
    int replicas;         /* JetStream replicas of the stream and the bucket (1..5); default 1 */
    int64_t timeout_ms;   /* connect and per-request limit; default 2000 */
    int64_t lease_ttl_ms; /* lease time to live; default 10000 */
} rill_cluster_params_t;

/* Defaults as commented above; urls and node are NULL and must be set. */
rill_cluster_params_t rill_cluster_default_params(void);

/* Connects to the servers of p->urls (the first that answers; libnats reconnects to any of them
 * later, for as long as the handle lives), opens JetStream, and creates the input stream and
 * the lease bucket when absent (an existing one is used as it is). Errors (*out = NULL, nothing
 * left allocated): RILL_EINVAL (NULL, an empty or bad URL list, a bad node name or prefix,
 * replicas outside 1..5, timeout or TTL <= 0), RILL_EIO (no server reachable at any URL, or
 * JetStream not enabled or not ready: the detail names the URLs and NATS's reason),
 * RILL_ETIMEDOUT, RILL_ENOMEM. Caller owns *out; destroy with rill_cluster_destroy(). Blocks up
 * to about timeout_ms per server and per request. */
rill_err_t rill_cluster_new(const rill_cluster_params_t *p, rill_cluster_t **out);

/* Closes the connection and frees c; *cp = NULL. NULL-safe. Leases are left as they are (they
 * expire by their TTL; release them first to hand them over at once). */
void rill_cluster_destroy(rill_cluster_t **cp);

/* This node's name (borrowed; valid while c lives). */
const char *rill_cluster_node(const rill_cluster_t *c);

/* The lease TTL in milliseconds. */
int64_t rill_cluster_lease_ttl_ms(const rill_cluster_t *c);

/* True while the connection to a NATS server is up (it may drop and come back by itself). */
bool rill_cluster_connected(const rill_cluster_t *c);

/* Writes the subject token of session name `name` (1..64 of [A-Za-z0-9_.-]) into
 * out[0, cap): '_' becomes "__", '.' becomes "_d", other bytes stay; distinct names give
 * distinct tokens. Errors: RILL_EINVAL (NULL, a bad name; out unchanged), RILL_ERANGE (cap too
 * small). Pure. */
rill_err_t rill_cluster_subject_token(const char *name, char *out, size_t cap);

/* ---- leases --------------------------------------------------------------------------------- */

/* What this node knows of one session's lease. Initialise with rill_cluster_lease_init(); then
 * only the functions below change it. Fields are for reading. */
typedef struct rill_cluster_lease {
    char session[RILL_CLUSTER_NAME_MAX + 1];
    char owner[RILL_CLUSTER_NAME_MAX + 1]; /* the holder last seen ("" none or released) */
    uint64_t revision;                     /* the lease's KV revision last seen (0: none seen) */
    uint64_t seen_ns;                      /* rill_now_ns() when this node first saw `revision` */
    uint64_t renewed_ns; /* held: rill_now_ns() just before the write that made `revision` */
    uint64_t last_seq;   /* held: stream sequence of the session's last record (0: none) */
    bool held;           /* this node owns the session (until renewal fails or the TTL passes) */
    bool fenced;         /* this node held it and found it taken (cleared by a new acquire) */
} rill_cluster_lease_t;

/* Sets up l for session `name` (1..64 of [A-Za-z0-9_.-]): nothing seen, not held. Errors:
 * RILL_EINVAL (NULL or a bad name; l unchanged). */
rill_err_t rill_cluster_lease_init(rill_cluster_lease_t *l, const char *name);

/* Tries to own l's session. Reads the lease: absent, or released (empty owner) -> written with
 * this node's name (revision-checked); held by this node at the revision l holds -> renewed;
 * held by another node (or by this node's name at a revision l did not write: a previous run)
 * -> taken over only when that revision has stood for a TTL since this node first saw it
 * (l->seen_ns), otherwise RILL_EBUSY with l->owner, l->revision and l->seen_ns updated: call
 * again later to poll. On success l->held, l->revision is the new revision, l->renewed_ns the
 * time just before the write, and l->last_seq the stream sequence of the session's last record
 * (read from JetStream after the write, so a takeover continues after whatever the old owner
 * had acknowledged). Errors: RILL_EINVAL (NULL), RILL_EBUSY (another node holds it, or won the
 * revision race: not a failure, poll again), RILL_EIO / RILL_ETIMEDOUT (NATS; l->held false
 * unless it was held and still valid). Blocks (two or three requests). */
rill_err_t rill_cluster_lease_acquire(rill_cluster_t *c, rill_cluster_lease_t *l);

/* Renews a held lease: an update from l->revision, timed from just before it is sent. Call it
 * well within the TTL (a third of it is the usual period). Errors: RILL_EINVAL (NULL, l not
 * held), RILL_EPERM (fenced: the revision moved - another node took the session; l->held
 * false, l->fenced true, l->owner the new holder when it could be read), RILL_EIO /
 * RILL_ETIMEDOUT (NATS; l still held, valid until its TTL runs out from the last successful
 * renewal). Blocks (one request, two when fenced). */
rill_err_t rill_cluster_lease_renew(rill_cluster_t *c, rill_cluster_lease_t *l);

/* Hands a held lease back at once: an update to an empty owner from l->revision, so another
 * node may acquire it without waiting for the TTL. l is no longer held either way. Errors:
 * RILL_EINVAL (NULL, l not held), RILL_EPERM (it had been taken already), RILL_EIO /
 * RILL_ETIMEDOUT (it then expires by its TTL). Blocks (one request). */
rill_err_t rill_cluster_lease_release(rill_cluster_t *c, rill_cluster_lease_t *l);

/* True while l is held and its TTL, counted from the last successful renewal's send time, has
 * not run out: the condition for publishing. Pure but for the clock. */
bool rill_cluster_lease_valid(const rill_cluster_t *c, const rill_cluster_lease_t *l);

/* ---- input records ------------------------------------------------------------------------- */

/* Publishes one input record of l's session (type, seq = the version it makes, payload[0, len))
 * and waits for JetStream's acknowledgement: when this returns RILL_OK the record is stored (on
 * a quorum of the stream's replicas) and the caller may acknowledge its client; *stream_seq (if
 * not NULL) receives the message's stream sequence, and l->last_seq becomes it. The message
 * carries a de-duplication id (session and seq), so publishing the same record again after a
 * timeout stores it once (JetStream's duplicate window, two minutes); and the expected last
 * subject sequence l->last_seq (when non-zero), so it is refused when another writer stored a
 * record of the session since. Errors: RILL_EINVAL (NULL, bad type, NULL payload with len > 0),
 * RILL_ERANGE (len above 1 GiB), RILL_EPERM (l not held, its TTL ran out, or another writer
 * stored a record first: fenced, l->held false, l->fenced true), RILL_ETIMEDOUT (no
 * acknowledgement in time: the record may or may not be stored; publish it again with the same
 * seq), RILL_EIO (NATS refused or is unreachable), RILL_ENOMEM. Blocks for one round trip to
 * the stream's leader and its replication. */
rill_err_t rill_cluster_publish(rill_cluster_t *c, rill_cluster_lease_t *l, uint32_t type,
                                uint64_t seq, const void *payload, size_t len,
                                uint64_t *stream_seq);

/* Called once per replayed record, in stream order. rec and its payload are borrowed for the
 * call. A non-OK return stops the replay and is what rill_cluster_replay() returns. */
typedef rill_err_t (*rill_cluster_record_fn)(void *user, const rill_session_record_t *rec,
                                             uint64_t stream_seq);

/* Replays session `name`'s records whose stream sequence is >= from_seq (0 or 1: all), in
 * order, up to the last record stored when the call began, through fn. *last_seq (if not NULL)
 * receives the stream sequence of the session's last record (0: it has none), whether or not
 * any was replayed. Read through an ordered consumer served by the stream's leader, so every
 * acknowledged record is seen. Errors: RILL_EINVAL (NULL, bad name), RILL_ECORRUPT or
 * RILL_EFORMAT or RILL_EUNSUPPORTED (a message that is not a whole record: its stream sequence
 * is in the detail; records before it were delivered), RILL_ETIMEDOUT / RILL_EIO (NATS; records
 * delivered so far stay delivered), RILL_ENOMEM, or what fn returned. Blocks until the last
 * record is delivered. */
rill_err_t rill_cluster_replay(rill_cluster_t *c, const char *name, uint64_t from_seq,
                               rill_cluster_record_fn fn, void *user, uint64_t *last_seq);

#ifdef __cplusplus
}
#endif
#endif /* RILL_CLUSTER_H */
