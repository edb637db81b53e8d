/*
 * cmd_client.c - the client sub-commands of `rill`, which talk to a running rilld through
 * clients/rill_client.h: `rill session new|close|list|stats|snapshot`, `rill ingest`, `rill ask`,
 * `rill standing add|rm|ls`, `rill watch` and `rill server-stats`.
 *
 * Every command takes the same connection options (--connect, --events, --curve-server-key,
 * --curve-key, --timeout-ms) and exits 0 on success, 1 on failure with "rill CMD: STATUS:
 * message" on stderr (STATUS is the server's status name, e.g. ENOTFOUND, or the client's, e.g.
 * ETIMEDOUT), 2 on a usage error. Results go to stdout, progress and figures to stderr.
 */
#include <errno.h>
#include <math.h>
#include <msgpack.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "rill_client.h"
#include "rill_log.h"
#include "rill_market.h"
#include "rill_msgpack.h"

/* ---- shared: connection options, errors ------------------------------------------------------ */

typedef struct conn {
    const char *connect, *events, *server_key, *key_prefix;
    int64_t timeout_ms;
} conn_t;

static conn_t conn_defaults(void) {
    return (conn_t){ .connect = RILL_CLIENT_DEFAULT_REQUESTS,
                     .events = RILL_CLIENT_DEFAULT_EVENTS,
                     .timeout_ms = 30000 };
}

/* The connection options, spliced into each command's table (before CLI_END). */
#define K_SERVER_KEY "CURVE: the server's public key (a file such as server.pub, or Z85)"
#define K_KEY        "CURVE: this client's key pair PREFIX.key / PREFIX.pub (rill keygen PREFIX)"
// clang-format off
#define CONN_OPTS(k)                                                                              \
    { "connect", NULL, CLI_STRING, &(k).connect, "rilld's request endpoint", 1, 0 },              \
    { "events", NULL, CLI_STRING, &(k).events, "rilld's event endpoint", 1, 0 },                  \
    { "curve-server-key", NULL, CLI_STRING, &(k).server_key, K_SERVER_KEY, 1, 0 },                \
    { "curve-key", NULL, CLI_STRING, &(k).key_prefix, K_KEY, 1, 0 },                              \
    { "timeout-ms", NULL, CLI_INT, &(k).timeout_ms, "how long a request may wait", 1, 1e9 }
#define CLI_END { NULL, NULL, 0, NULL, NULL, 0, 0 }
// clang-format on

/* Connects; NULL with a message on stderr and *rc set (1: failure, 2: usage) otherwise. */
static rill_client_t *open_client(const char *prog, const conn_t *k, int *rc) {
    if ((k->server_key != NULL) != (k->key_prefix != NULL)) {
        fprintf(stderr, "%s: CURVE needs both --curve-server-key and --curve-key\n", prog);
        *rc = 2;
        return NULL;
    }
    static char pub[4200], sec[4200];
    rill_client_params_t p = rill_client_default_params();
    p.request_ep = k->connect;
    p.event_ep = k->events;
    p.timeout_ms = (int32_t)k->timeout_ms;
    if (k->key_prefix != NULL) {
        snprintf(pub, sizeof pub, "%s.pub", k->key_prefix);
        snprintf(sec, sizeof sec, "%s.key", k->key_prefix);
        p.curve_server_key = k->server_key;
        p.curve_public_key = pub;
        p.curve_secret_key = sec;
    }
    rill_client_t *c = NULL;
    rill_err_t e = rill_client_new(&p, &c);
    if (e != RILL_OK) {
        fprintf(stderr, "%s: %s: %s\n", prog, rill_err_name(e), rill_last_error(e));
        *rc = e == RILL_EINVAL ? 2 : 1;
        return NULL;
    }
    return c;
}

/* Reports a failed call and returns the exit code 1. */
static int failed(const char *prog, rill_client_t *c, rill_err_t e) {
    (void)c;
    fprintf(stderr, "%s: %s: %s\n", prog, rill_err_name(e), rill_last_error(e));
    return 1;
}

/* Parses argv with a table; returns -1 to go on, or the exit code (0 after --help). */
static int parse(int argc, char **argv, const cli_opt_t *opts, const char *usage,
                 const char *summary, const char **pos, int max_pos, int *n_pos, int min_pos) {
    int rc = cli_parse(argc, argv, 1, opts, usage, summary, pos, max_pos, n_pos);
    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    if (*n_pos < min_pos) {
        fprintf(stderr, "rill: missing arguments\nusage: %s\n(try --help)\n", usage);
        return 2;
    }
    return -1;
}

/* ---- rill session ------------------------------------------------------------------------ */

static int session_new_run(rill_client_t *c, const char *model, const char *name, int64_t window,
                           int64_t sinks, const char *system) {
    const char *got = NULL;
    rill_err_t e = rill_client_session_create_on(c, model, name, window, sinks, system, &got);
    if (e != RILL_OK) {
        return failed("rill session new", c, e);
    }
    printf("%s\n", got);
    return 0;
}

static int session_new(int argc, char **argv) {
    conn_t k = conn_defaults();
    int64_t window = -1, sinks = -1;
    const char *system = NULL, *model = NULL, *pos[1];
    int n_pos = 0;
    const cli_opt_t opts[] = {
        { "model", NULL, CLI_STRING, &model,
          "the daemon's model to run it on, by name (rill server-stats lists them; default: "
          "the daemon's default model)",
          1, 0 },
        { "window", NULL, CLI_INT, &window,
          "tokens kept by the sliding window (0: none; -1: the server's default)", -1, 1048576 },
        { "sinks", NULL, CLI_INT, &sinks,
          "sink tokens kept at the start (-1: the server's default)", -1, 1048576 },
        { "system", NULL, CLI_STRING, &system, "a system prompt the session starts with", 1, 0 },
        CONN_OPTS(k),
        CLI_END,
    };
    int rc = parse(argc, argv, opts, "rill session new [NAME] [options]",
                   "Creates a session on rilld and prints its name (the server picks one, s<N>, "
                   "without NAME).",
                   pos, 1, &n_pos, 0);
    if (rc >= 0) {
        return rc;
    }
    rill_client_t *c = open_client("rill session new", &k, &rc);
    if (c == NULL) {
        return rc;
    }
    rc = session_new_run(c, model, n_pos > 0 ? pos[0] : NULL, window, sinks, system);
    rill_client_destroy(&c);
    return rc;
}

static int session_simple_run(rill_client_t *c, const char *what, const char *name) {
    char prog[64];
    snprintf(prog, sizeof prog, "rill session %s", what);
    rill_err_t e;
    if (strcmp(what, "close") == 0) {
        e = rill_client_session_close(c, name);
    } else if (strcmp(what, "snapshot") == 0) {
        const char *path = NULL;
        e = rill_client_session_snapshot(c, name, &path);
        if (e == RILL_OK) {
            printf("%s\n", path);
        }
    } else if (strcmp(what, "list") == 0) {
        const char *const *names = NULL;
        int64_t n = 0;
        e = rill_client_session_list(c, &names, &n);
        for (int64_t i = 0; e == RILL_OK && i < n; i++) {
            printf("%s\n", names[i]);
        }
    } else {
        rill_client_session_stats_t st;
        e = rill_client_session_stats(c, name, &st);
        if (e == RILL_OK) {
            printf("version %lld\nn_seen %lld\nn_resident %lld\nn_pending %lld\npages %lld\n"
                   "bytes %lld\nwindow %lld\nsinks %lld\nstanding %lld\n",
                   (long long)st.version, (long long)st.n_seen, (long long)st.n_resident,
                   (long long)st.n_pending, (long long)st.pages, (long long)st.bytes,
                   (long long)st.window, (long long)st.sinks, (long long)st.standing);
            if (st.held_text >= 0) {
                printf("held_text %lld\n", (long long)st.held_text);
            }
            if (st.model[0] != '\0') {
                printf("model %s\n", st.model);
            }
        }
    }
    return e == RILL_OK ? 0 : failed(prog, c, e);
}

static int session_simple(int argc, char **argv, const char *what, const char *summary) {
    conn_t k = conn_defaults();
    const char *pos[1];
    int n_pos = 0;
    const cli_opt_t opts[] = { CONN_OPTS(k), CLI_END };
    bool list = strcmp(what, "list") == 0;
    char usage[96];
    snprintf(usage, sizeof usage, "rill session %s%s [options]", what, list ? "" : " NAME");
    int rc = parse(argc, argv, opts, usage, summary, pos, list ? 0 : 1, &n_pos, list ? 0 : 1);
    if (rc >= 0) {
        return rc;
    }
    rill_client_t *c = open_client("rill session", &k, &rc);
    if (c == NULL) {
        return rc;
    }
    rc = session_simple_run(c, what, list ? NULL : pos[0]);
    rill_client_destroy(&c);
    return rc;
}

#define SESSION_USAGE                                                                   \
    "usage: rill session new [NAME] [options]   create a session (prints its name)\n"   \
    "       rill session close NAME             close it and remove its files\n"        \
    "       rill session list                   the sessions of this client's key\n"    \
    "       rill session stats NAME             its version, tokens, pages, window\n"   \
    "       rill session snapshot NAME          write its snapshot (prints the path)\n" \
    "(rill session SUBCOMMAND --help for the options)\n"

int cmd_session(int argc, char **argv) {
    const char *sub = argc >= 2 ? argv[1] : "";
    if (strcmp(sub, "new") == 0) {
        return session_new(argc - 1, argv + 1);
    }
    if (strcmp(sub, "close") == 0) {
        return session_simple(argc - 1, argv + 1, "close",
                              "Closes a session: its open questions are canceled, its log, "
                              "snapshot and metadata removed.");
    }
    if (strcmp(sub, "list") == 0) {
        return session_simple(argc - 1, argv + 1, "list",
                              "Lists the sessions that belong to this client's key, one a line.");
    }
    if (strcmp(sub, "stats") == 0) {
        return session_simple(argc - 1, argv + 1, "stats",
                              "Prints a session's figures, one 'name value' a line.");
    }
    if (strcmp(sub, "snapshot") == 0) {
        return session_simple(argc - 1, argv + 1, "snapshot",
                              "Snapshots a session in the server's state directory and prints "
                              "the path.");
    }
    if (strcmp(sub, "-h") == 0 || strcmp(sub, "--help") == 0) {
        printf(SESSION_USAGE);
        return 0;
    }
    fprintf(stderr, SESSION_USAGE);
    return 2;
}

/* ---- rill ingest ------------------------------------------------------------------------- */

typedef struct progress {
    bool tty;
    int64_t total; /* bytes of the input (0: unknown) */
    int64_t done;
    uint64_t last_ns;
} progress_t;

static void progress_show(progress_t *p, const char *what, int64_t count, bool last) {
    if (!p->tty) {
        return;
    }
    uint64_t now = rill_now_ns();
    if (!last && now - p->last_ns < 100000000ull) {
        return;
    }
    p->last_ns = now;
    if (p->total > 0) {
        int pct = (int)(100 * p->done / p->total);
        int bar = pct * 30 / 100;
        fprintf(stderr, "\r[%.*s%.*s] %3d%%  %lld %s", bar, "##############################",
                30 - bar, "..............................", pct, (long long)count, what);
    } else {
        fprintf(stderr, "\r%lld bytes  %lld %s", (long long)p->done, (long long)count, what);
    }
    if (last) {
        fprintf(stderr, "\n");
    }
    fflush(stderr);
}

static int64_t file_size(FILE *f) {
    struct stat sb;
    return fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) ? (int64_t)sb.st_size : 0;
}

/* Sends stdin as it comes: each read(2) returns what is there (a whole chunk of a file, a line
 * of `tail -f`), so a live feed reaches the session without waiting for a chunk to fill. EOF
 * sends an empty flush, which ends the text the server holds back at an unstable end. */
static int ingest_text_run(rill_client_t *c, const char *name, int64_t chunk) {
    const char *prog = "rill ingest";
    char *buf = malloc((size_t)chunk);
    if (buf == NULL) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 1;
    }
    progress_t pr = { .tty = isatty(2) != 0, .total = file_size(stdin) };
    int64_t version = 0, requests = 0;
    for (;;) {
        ssize_t n = read(0, buf, (size_t)chunk);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            fprintf(stderr, "%s%s: reading stdin: %s\n", pr.tty ? "\n" : "", prog, strerror(errno));
            free(buf);
            return 1;
        }
        rill_err_t e = rill_client_ingest_text(c, name, buf, (size_t)n, n == 0, &version);
        if (e != RILL_OK) {
            free(buf);
            if (pr.tty) {
                fprintf(stderr, "\n");
            }
            return failed(prog, c, e);
        }
        requests++;
        pr.done += n;
        progress_show(&pr, "requests", requests, n == 0);
        if (n == 0) {
            break;
        }
    }
    free(buf);
    printf("ingested %lld bytes in %lld requests, version %lld\n", (long long)pr.done,
           (long long)requests, (long long)version);
    return 0;
}

typedef struct tick_totals {
    int64_t ticks, accepted, rejected_here, rejected_server, lines, version, batches;
} tick_totals_t;

static rill_err_t send_batch(rill_client_t *c, const char *name, const rill_tick_t *t, int64_t n,
                             tick_totals_t *tt) {
    if (n == 0) {
        return RILL_OK;
    }
    rill_client_ticks_result_t r;
    rill_err_t e = rill_client_ingest_ticks(c, name, t, n, &r);
    if (e == RILL_OK) {
        tt->accepted += r.accepted;
        tt->rejected_server += r.rejected;
        tt->lines += r.lines;
        tt->version = r.version;
        tt->batches++;
    }
    return e;
}

static int ingest_csv(rill_client_t *c, const char *name, FILE *f, int64_t batch, tick_totals_t *tt,
                      progress_t *pr) {
    rill_tick_csv_t *csv = NULL;
    rill_tick_t *ticks = malloc(sizeof *ticks * (size_t)batch);
    if (ticks == NULL || rill_tick_csv_new(&csv) != RILL_OK) {
        free(ticks);
        fprintf(stderr, "rill ingest: out of memory\n");
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t n = 0;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
        pr->done += len;
        rill_tick_t t;
        rill_err_t e = rill_tick_csv_line(csv, line, (size_t)len, &t);
        if (e == RILL_EAGAIN) {
            continue;
        }
        tt->ticks++;
        if (e != RILL_OK) {
            if (tt->rejected_here++ < 5) {
                fprintf(stderr, "%srill ingest: rejected: %s\n", pr->tty ? "\n" : "",
                        rill_last_error(RILL_OK));
            }
            continue;
        }
        ticks[n++] = t;
        if (n == batch) {
            e = send_batch(c, name, ticks, n, tt);
            rc = e != RILL_OK ? failed("rill ingest", c, e) : 0;
            n = 0;
            progress_show(pr, "ticks", tt->ticks, false);
        }
    }
    if (rc == 0) {
        rill_err_t e = send_batch(c, name, ticks, n, tt);
        rc = e != RILL_OK ? failed("rill ingest", c, e) : 0;
    }
    free(line);
    free(ticks);
    rill_tick_csv_destroy(&csv);
    return rc;
}

/* Sends objs[0, n) (tick maps) as one batch. */
static rill_err_t send_objs(rill_client_t *c, const char *name, const msgpack_object *objs,
                            int64_t n, msgpack_sbuffer *sb, tick_totals_t *tt) {
    if (n == 0) {
        return RILL_OK;
    }
    msgpack_sbuffer_clear(sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_array(&pk, (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        msgpack_pack_object(&pk, objs[i]);
    }
    rill_client_ticks_result_t r;
    rill_err_t e = rill_client_ingest_ticks_msgpack(c, name, sb->data, sb->size, &r);
    if (e == RILL_OK) {
        tt->accepted += r.accepted;
        tt->rejected_server += r.rejected;
        tt->lines += r.lines;
        tt->version = r.version;
        tt->batches++;
    }
    return e;
}

/* A .msgpack file: msgpack values one after another, each a tick map or an array of them (what
 * producers write). Each value is checked (rill_msgpack_check) before msgpack-c reads it; the
 * records go to the server in batches as they are, so it validates them and counts the bad. */
static int ingest_msgpack(rill_client_t *c, const char *name, FILE *f, int64_t batch,
                          tick_totals_t *tt, progress_t *pr) {
    const char *prog = "rill ingest";
    int64_t size = file_size(f);
    if (size <= 0 || size > (INT64_C(1) << 30)) {
        fprintf(stderr, "%s: a .msgpack tick file must be a regular file of 1 byte to 1 GiB\n",
                prog);
        return 1;
    }
    char *data = malloc((size_t)size);
    msgpack_object *objs = malloc(sizeof *objs * (size_t)batch);
    msgpack_zone z;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    bool zone = msgpack_zone_init(&z, 65536);
    int rc = 0;
    if (data == NULL || objs == NULL || !zone || fread(data, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "%s: cannot read the tick file\n", prog);
        rc = 1;
    }
    size_t off = 0;
    int64_t n = 0;
    while (rc == 0 && off < (size_t)size) {
        size_t rest = (size_t)size - off, vlen = rest;
        rill_msgpack_shape_t sh;
        rill_err_t e = rill_msgpack_check(data + off, rest, 8, &sh);
        char msg[RILL_ERR_DETAIL];
        snprintf(msg, sizeof msg, "%s", rill_last_error(e)); /* before the second check */
        if (e == RILL_EFORMAT && sh.at != SIZE_MAX && sh.at > 0 && sh.at < rest &&
            rill_msgpack_check(data + off, sh.at, 8, NULL) == RILL_OK) {
            e = RILL_OK; /* trailing bytes: the next value */
            vlen = sh.at;
        }
        if (e != RILL_OK) {
            fprintf(stderr, "%s: the tick file at byte %zu: %s\n", prog, off, msg);
            rc = 1;
            break;
        }
        /* a batch's objects live in the zone until sent */
        msgpack_object v;
        size_t voff = 0;
        if (msgpack_unpack(data + off, vlen, &voff, &z, &v) != MSGPACK_UNPACK_SUCCESS) {
            fprintf(stderr, "%s: the tick file at byte %zu: not msgpack\n", prog, off);
            rc = 1;
            break;
        }
        off += vlen;
        pr->done = (int64_t)off;
        const msgpack_object *recs = v.type == MSGPACK_OBJECT_ARRAY ? v.via.array.ptr : &v;
        uint32_t m = v.type == MSGPACK_OBJECT_ARRAY ? v.via.array.size : 1;
        for (uint32_t i = 0; rc == 0 && i < m; i++) {
            tt->ticks++;
            if (recs[i].type != MSGPACK_OBJECT_MAP) {
                tt->rejected_here++; /* not a record at all: the server would refuse the batch */
                continue;
            }
            objs[n++] = recs[i];
            if (n == batch) {
                e = send_objs(c, name, objs, n, &sb, tt);
                rc = e != RILL_OK ? failed(prog, c, e) : 0;
                n = 0;
                progress_show(pr, "ticks", tt->ticks, false);
            }
        }
        if (n == 0) {
            msgpack_zone_clear(&z);
        }
    }
    if (rc == 0) {
        rill_err_t e = send_objs(c, name, objs, n, &sb, tt);
        rc = e != RILL_OK ? failed(prog, c, e) : 0;
    }
    if (zone) {
        msgpack_zone_destroy(&z);
    }
    msgpack_sbuffer_destroy(&sb);
    free(objs);
    free(data);
    return rc;
}

static int ingest_ticks_run(rill_client_t *c, const char *name, const char *path, int64_t batch) {
    size_t pl = strlen(path);
    bool mp = (pl > 8 && strcmp(path + pl - 8, ".msgpack") == 0) ||
              (pl > 3 && strcmp(path + pl - 3, ".mp") == 0);
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "rill ingest: cannot open %s\n", path);
        return 1;
    }
    progress_t pr = { .tty = isatty(2) != 0, .total = file_size(f) };
    tick_totals_t tt = { 0 };
    int rc =
        mp ? ingest_msgpack(c, name, f, batch, &tt, &pr) : ingest_csv(c, name, f, batch, &tt, &pr);
    if (f != stdin) {
        fclose(f);
    }
    if (rc != 0) {
        return rc;
    }
    progress_show(&pr, "ticks", tt.ticks, true);
    printf("ticks %lld: accepted %lld, rejected %lld (%lld here, %lld by the server), lines %lld, "
           "version %lld\n",
           (long long)tt.ticks, (long long)tt.accepted,
           (long long)(tt.rejected_here + tt.rejected_server), (long long)tt.rejected_here,
           (long long)tt.rejected_server, (long long)tt.lines, (long long)tt.version);
    return 0;
}

int cmd_ingest(int argc, char **argv) {
    conn_t k = conn_defaults();
    const char *ticks = NULL, *pos[1];
    int64_t chunk = 65536, batch = 256;
    int n_pos = 0;
    const cli_opt_t opts[] = {
        { "ticks", NULL, CLI_STRING, &ticks,
          "ingest market ticks from FILE.csv (symbol,ts,price,size,side; '-': stdin) or "
          "FILE.msgpack",
          1, 0 },
        { "batch", NULL, CLI_INT, &batch, "ticks per request", 1, 4096 },
        { "chunk", NULL, CLI_INT, &chunk, "most bytes of text per request", 1, 1000000 },
        CONN_OPTS(k),
        CLI_END,
    };
    int rc = parse(argc, argv, opts, "rill ingest NAME [--ticks FILE] [options]",
                   "Feeds a session: text from stdin as it comes, in chunks (the end flushes), or "
                   "market ticks\nwith --ticks. Bad ticks are counted as rejected (here by the "
                   "CSV reader, or by the server)\nand skipped. A progress bar goes to stderr "
                   "when it is a terminal; a summary line to stdout.",
                   pos, 1, &n_pos, 1);
    if (rc >= 0) {
        return rc;
    }
    rill_client_t *c = open_client("rill ingest", &k, &rc);
    if (c == NULL) {
        return rc;
    }
    rc = ticks != NULL ? ingest_ticks_run(c, pos[0], ticks, batch)
                       : ingest_text_run(c, pos[0], chunk);
    rill_client_destroy(&c);
    return rc;
}

/* ---- rill ask ---------------------------------------------------------------------------- */

/* Prints the streamed pieces as the server will trim the answer: without leading blanks, and
 * up to a blank line or a new "\nQuestion:" (held back while the text could still be one). */
typedef struct stream_out {
    bool started, cut;
    char hold[16];
    size_t n_hold;
    char *text; /* what was printed */
    size_t len, cap;
} stream_out_t;

static const char k_cut2[] = "\n\n", k_cutq[] = "\nQuestion:";

static void out_bytes(stream_out_t *s, const char *p, size_t n) {
    fwrite(p, 1, n, stdout);
    if (s->len + n > s->cap) {
        size_t cap = (s->len + n) * 2 + 64;
        char *g = realloc(s->text, cap);
        if (g == NULL) {
            return;
        }
        s->text = g;
        s->cap = cap;
    }
    memcpy(s->text + s->len, p, n);
    s->len += n;
}

static bool is_prefix(const char *h, size_t n, const char *marker) {
    return n <= strlen(marker) && memcmp(h, marker, n) == 0;
}

static void on_piece(void *user, const char *piece, size_t len) {
    stream_out_t *s = user;
    for (size_t i = 0; i < len && !s->cut; i++) {
        char ch = piece[i];
        if (!s->started && (ch == ' ' || ch == '\n')) {
            continue;
        }
        s->started = true;
        if (s->n_hold == 0 && ch != '\n') {
            out_bytes(s, &ch, 1);
            continue;
        }
        s->hold[s->n_hold++] = ch;
        while (s->n_hold > 0) {
            if ((s->n_hold == 2 && memcmp(s->hold, k_cut2, 2) == 0) ||
                (s->n_hold == strlen(k_cutq) && memcmp(s->hold, k_cutq, s->n_hold) == 0)) {
                s->cut = true;
                s->n_hold = 0;
                break;
            }
            if (is_prefix(s->hold, s->n_hold, k_cut2) || is_prefix(s->hold, s->n_hold, k_cutq)) {
                break; /* could still be a marker */
            }
            /* not a marker: print up to the next '\n', which may start one */
            size_t j = 1;
            while (j < s->n_hold && s->hold[j] != '\n') {
                j++;
            }
            out_bytes(s, s->hold, j);
            memmove(s->hold, s->hold + j, s->n_hold - j);
            s->n_hold -= j;
        }
    }
    fflush(stdout);
}

static int ask_run(rill_client_t *c, const char *name, const char *question, int64_t max_tokens,
                   bool evaluated, bool stream) {
    stream_out_t s = { 0 };
    rill_client_answer_t a;
    rill_client_ask_opts_t o = { .max_tokens = (int32_t)max_tokens, .evaluated = evaluated };
    rill_err_t e = rill_client_ask_with(c, name, question, &o, stream ? on_piece : NULL, &s, &a);
    if (e != RILL_OK) {
        if (s.len > 0) {
            printf("\n");
        }
        free(s.text);
        return failed("rill ask", c, e);
    }
    if (s.len <= a.answer_len && memcmp(s.text != NULL ? s.text : "", a.answer, s.len) == 0) {
        fwrite(a.answer + s.len, 1, a.answer_len - s.len, stdout); /* what the stream missed */
    } else {
        fprintf(stderr, "\nrill ask: the stream missed pieces; the whole answer follows\n");
        fwrite(a.answer, 1, a.answer_len, stdout);
    }
    printf("\n");
    fflush(stdout);
    free(s.text);
    fprintf(stderr, "ttft %.1f ms, total %.1f ms, %lld tokens, context %lld, version %lld%s%s",
            a.ttft_ms, a.total_ms, (long long)a.tokens, (long long)a.context, (long long)a.version,
            a.cached ? ", cached" : "", a.evaluated ? ", on evaluated data" : "");
    if (a.backlog >= 0 && !isnan(a.ttft_compute_ms)) { /* a server that says */
        fprintf(stderr, "; ttft: waited for %lld tokens of backlog, own steps %.1f ms",
                (long long)a.backlog, a.ttft_compute_ms);
    }
    fprintf(stderr, "\n");
    return 0;
}

int cmd_ask(int argc, char **argv) {
    conn_t k = conn_defaults();
    int64_t max_tokens = 0;
    bool no_stream = false;
    const char *consistency = NULL;
    const char *pos[2];
    int n_pos = 0;
    const cli_opt_t opts[] = {
        { "max-tokens", "-n", CLI_INT, &max_tokens,
          "most tokens of the answer (0: the server's default, 48)", 0, 1024 },
        { "no-stream", NULL, CLI_FLAG, &no_stream, "print the answer when it is complete", 1, 0 },
        { "consistency", NULL, CLI_STRING, &consistency,
          "acknowledged (default: wait for every input acknowledged before the question) or "
          "evaluated (answer at once on what the engine has evaluated)",
          1, 0 },
        CONN_OPTS(k),
        CLI_END,
    };
    int rc = parse(argc, argv, opts, "rill ask NAME QUESTION [options]",
                   "Asks a question about a session's data: the answer streams to stdout as it is "
                   "generated,\nthen its figures (time to first token, total, tokens, context, "
                   "data version) go to stderr.",
                   pos, 2, &n_pos, 2);
    if (rc >= 0) {
        return rc;
    }
    bool evaluated = false;
    if (consistency != NULL) {
        if (strcmp(consistency, "evaluated") != 0 && strcmp(consistency, "acknowledged") != 0) {
            fprintf(stderr,
                    "rill ask: --consistency: '%s' is neither 'acknowledged' nor 'evaluated'\n",
                    consistency);
            return 2;
        }
        evaluated = strcmp(consistency, "evaluated") == 0;
    }
    rill_client_t *c = open_client("rill ask", &k, &rc);
    if (c == NULL) {
        return rc;
    }
    rc = ask_run(c, pos[0], pos[1], max_tokens, evaluated, !no_stream);
    rill_client_destroy(&c);
    return rc;
}

/* ---- rill standing ----------------------------------------------------------------------- */

static int standing_run(rill_client_t *c, const char *what, const char *name, const char *arg,
                        int64_t max_tokens) {
    char prog[64];
    snprintf(prog, sizeof prog, "rill standing %s", what);
    rill_err_t e;
    if (strcmp(what, "add") == 0) {
        uint64_t qid = 0;
        e = rill_client_standing_register(c, name, arg, (int32_t)max_tokens, &qid);
        if (e == RILL_OK) {
            printf("%llu\n", (unsigned long long)qid);
        }
    } else if (strcmp(what, "rm") == 0) {
        char *end = NULL;
        unsigned long long q = strtoull(arg, &end, 10);
        if (end == arg || *end != '\0' || q == 0) {
            fprintf(stderr, "%s: QID must be a positive integer, got '%s'\n", prog, arg);
            return 2;
        }
        e = rill_client_standing_unregister(c, name, (uint64_t)q);
    } else {
        const rill_client_standing_t *q = NULL;
        int64_t n = 0;
        e = rill_client_standing_list(c, name, &q, &n);
        if (e == RILL_OK && n > 0) {
            printf("%-6s %-8s %-10s %-9s %-9s %-6s %s\n", "qid", "version", "age_ms", "refreshes",
                   "abandoned", "hits", "question");
        }
        for (int64_t i = 0; e == RILL_OK && i < n; i++) {
            printf("%-6llu %-8lld %-10.1f %-9lld %-9lld %-6lld %s\n", (unsigned long long)q[i].qid,
                   (long long)q[i].version, q[i].age_ms, (long long)q[i].refreshes,
                   (long long)q[i].abandoned, (long long)q[i].cache_hits, q[i].question);
        }
    }
    return e == RILL_OK ? 0 : failed(prog, c, e);
}

#define STANDING_USAGE                                                                            \
    "usage: rill standing add NAME QUESTION [options]   register a standing query (prints qid)\n" \
    "       rill standing rm NAME QID                   unregister it\n"                          \
    "       rill standing ls NAME                       the session's standing queries\n"         \
    "(rill standing SUBCOMMAND --help for the options; rill watch NAME prints their answers)\n"

int cmd_standing(int argc, char **argv) {
    const char *sub = argc >= 2 ? argv[1] : "";
    bool add = strcmp(sub, "add") == 0, rm = strcmp(sub, "rm") == 0, ls = strcmp(sub, "ls") == 0;
    if (!add && !rm && !ls) {
        bool help = strcmp(sub, "-h") == 0 || strcmp(sub, "--help") == 0;
        fputs(STANDING_USAGE, help ? stdout : stderr);
        return help ? 0 : 2;
    }
    conn_t k = conn_defaults();
    int64_t max_tokens = 0;
    const char *pos[2];
    int n_pos = 0;
    cli_opt_t opts[] = {
        { "max-tokens", "-n", CLI_INT, &max_tokens,
          "most tokens of each answer (0: the server's default, 48)", 0, 1024 },
        CONN_OPTS(k),
        CLI_END,
    };
    const cli_opt_t *table = add ? opts : opts + 1;
    const char *usage = add  ? "rill standing add NAME QUESTION [options]"
                        : rm ? "rill standing rm NAME QID [options]"
                             : "rill standing ls NAME [options]";
    const char *summary = add  ? "Registers a standing query: the server re-answers QUESTION after "
                                 "data updates and publishes\neach answer (rill watch NAME). "
                                 "Prints the query's id."
                          : rm ? "Unregisters a standing query."
                               : "Lists a session's standing queries: id, data version of the "
                                 "last answer, its age, refreshes.";
    int want = ls ? 1 : 2;
    int rc = parse(argc - 1, argv + 1, table, usage, summary, pos, want, &n_pos, want);
    if (rc >= 0) {
        return rc;
    }
    rill_client_t *c = open_client("rill standing", &k, &rc);
    if (c == NULL) {
        return rc;
    }
    rc = standing_run(c, sub, pos[0], ls ? NULL : pos[1], max_tokens);
    rill_client_destroy(&c);
    return rc;
}

/* ---- rill watch -------------------------------------------------------------------------- */

static volatile sig_atomic_t g_watch_stop;

static void on_sigint(int sig) {
    (void)sig;
    g_watch_stop = 1;
}

static void print_one_line(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n') {
            fputs("\\n", stdout);
        } else {
            fputc(s[i], stdout);
        }
    }
}

static int watch_run(rill_client_t *c, const char *name, int64_t count, bool all) {
    const char *prog = "rill watch";
    rill_err_t e = rill_client_session_stats(c, name, NULL); /* fail fast on a wrong name */
    char topic[96];
    snprintf(topic, sizeof topic, "%s/%s", name, all ? "" : "standing");
    e = e == RILL_OK ? rill_client_subscribe(c, topic) : e;
    if (e != RILL_OK) {
        return failed(prog, c, e);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int64_t seen = 0;
    while (!g_watch_stop && (count == 0 || seen < count)) {
        rill_client_event_t ev;
        e = rill_client_next_event(c, 200, &ev);
        if (e == RILL_EAGAIN) {
            continue;
        }
        if (e != RILL_OK) {
            return failed(prog, c, e);
        }
        if (ev.missed > 0) {
            fprintf(stderr, "%s: missed %lld events on %s\n", prog, (long long)ev.missed, ev.topic);
        }
        if (ev.kind == RILL_CLIENT_EVENT_STANDING) {
            printf("qid %llu  version %lld  data %lld  age %.1f ms  compute %.1f ms  | ",
                   (unsigned long long)ev.qid, (long long)ev.version, (long long)ev.data_version,
                   ev.age_ms, ev.compute_ms);
            print_one_line(ev.answer, ev.answer_len);
        } else if (ev.kind == RILL_CLIENT_EVENT_ANSWER) {
            printf("answer rid %llu  version %lld  ttft %.1f ms  total %.1f ms  | ",
                   (unsigned long long)ev.rid, (long long)ev.version, ev.ttft_ms, ev.total_ms);
            print_one_line(ev.answer, ev.answer_len);
        } else if (ev.kind == RILL_CLIENT_EVENT_TOKEN) {
            printf("token rid %llu  | ", (unsigned long long)ev.rid);
            print_one_line(ev.piece, ev.piece_len);
        } else {
            printf("%s seq %llu", ev.topic, (unsigned long long)ev.seq);
        }
        printf("\n");
        fflush(stdout);
        seen++;
    }
    return 0;
}

int cmd_watch(int argc, char **argv) {
    conn_t k = conn_defaults();
    int64_t count = 0;
    bool all = false;
    const char *pos[1];
    int n_pos = 0;
    const cli_opt_t opts[] = {
        { "count", NULL, CLI_INT, &count, "stop after N events (0: run until interrupted)", 0,
          1e12 },
        { "all", NULL, CLI_FLAG, &all, "also the session's tokens and answers of questions", 1, 0 },
        CONN_OPTS(k),
        CLI_END,
    };
    int rc = parse(argc, argv, opts, "rill watch NAME [options]",
                   "Prints the answers of a session's standing queries as the server pushes them, "
                   "one a line:\nqid, the version the answer saw, the session's data version, the "
                   "answer's age and compute time.\nRuns until interrupted, or --count events.",
                   pos, 1, &n_pos, 1);
    if (rc >= 0) {
        return rc;
    }
    rill_client_t *c = open_client("rill watch", &k, &rc);
    if (c == NULL) {
        return rc;
    }
    rc = watch_run(c, pos[0], count, all);
    rill_client_destroy(&c);
    return rc;
}

/* ---- rill server-stats ------------------------------------------------------------------- */

static int server_stats_run(rill_client_t *c) {
    rill_client_server_stats_t s;
    rill_err_t e = rill_client_server_stats(c, &s);
    if (e != RILL_OK) {
        return failed("rill server-stats", c, e);
    }
    printf("sessions %lld\nrequests %lld\nbad_requests %lld\nevents %lld\nevent_drops %lld\n"
           "reply_drops %lld\nsteps %lld\nbusy_ms %.1f\nidle_ms %.1f\ntokens_decode %lld\n"
           "tokens_prefill %lld\ntokens_ingest %lld\ntokens_standing %lld\nfree_pages %lld\n"
           "total_pages %lld\nreserved_pages %lld\nquestions %lld\nstanding_refreshes %lld\n"
           "standing_cache_hits %lld\nadmission_rejects %lld\n",
           (long long)s.sessions, (long long)s.requests, (long long)s.bad_requests,
           (long long)s.events, (long long)s.event_drops, (long long)s.reply_drops,
           (long long)s.steps, s.busy_ms, s.idle_ms, (long long)s.tokens_decode,
           (long long)s.tokens_prefill, (long long)s.tokens_ingest, (long long)s.tokens_standing,
           (long long)s.free_pages, (long long)s.total_pages, (long long)s.reserved_pages,
           (long long)s.questions, (long long)s.standing_refreshes,
           (long long)s.standing_cache_hits, (long long)s.admission_rejects);
    printf("engine_drops %lld\n", (long long)s.engine_drops);
    /* "key value" lines like the rest: the models, the default first, then each one's figures */
    printf("models ");
    for (int32_t i = 0; i < s.n_models; i++) {
        printf("%s%s", i > 0 ? "," : "", s.models[i].name);
    }
    printf("\n");
    for (int32_t i = 0; i < s.n_models; i++) {
        const rill_client_model_stats_t *m = &s.models[i];
        printf("model.%s.sessions %lld\nmodel.%s.steps %lld\nmodel.%s.tokens_ingest %lld\n"
               "model.%s.tokens_decode %lld\n",
               m->name, (long long)m->sessions, m->name, (long long)m->steps, m->name,
               (long long)m->tokens_ingest, m->name, (long long)m->tokens_decode);
    }
    return 0;
}

int cmd_server_stats(int argc, char **argv) {
    conn_t k = conn_defaults();
    const char *pos[1];
    int n_pos = 0;
    const cli_opt_t opts[] = { CONN_OPTS(k), CLI_END };
    int rc = parse(argc, argv, opts, "rill server-stats [options]",
                   "Prints rilld's counters: sessions, requests, events and drops, engine steps "
                   "and tokens, pages.",
                   pos, 0, &n_pos, 0);
    if (rc >= 0) {
        return rc;
    }
    rill_client_t *c = open_client("rill server-stats", &k, &rc);
    if (c == NULL) {
        return rc;
    }
    rc = server_stats_run(c);
    rill_client_destroy(&c);
    return rc;
}
