/*
 * cmd_serve.c - `rill serve` (also run as `rilld`): the daemon (server/rill_server.h), and
 * `rill keygen`: a CURVE key pair for it or its clients.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

#include "cli.h"
#include "commands.h"
#include "local.h"
#include "rill_log.h"
#include "rill_server.h"

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

/* One line of "key = value" per option (# comments, blank lines). Values may not contain
 * spaces around them; the keys are the long option names. */
static int read_config(const char *path, const cli_opt_t *opts) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "rill serve: --config %s: cannot open\n", path);
        return 2;
    }
    static char store[64][512]; /* values outlive the call: the options borrow them */
    int n_store = 0, lineno = 0, rc = 0;
    char line[600];
    while (rc == 0 && fgets(line, sizeof line, f) != NULL) {
        lineno++;
        char key[64], val[512];
        char *hash = strchr(line, '#');
        if (hash != NULL) {
            *hash = '\0';
        }
        int k = sscanf(line, " %63[^= \t] = %511s", key, val);
        if (k <= 0) {
            continue;
        }
        const cli_opt_t *o = opts;
        while (o->name != NULL && strcmp(o->name, key) != 0) {
            o++;
        }
        if (k != 2 || o->name == NULL || strcmp(key, "config") == 0 || n_store == 64) {
            fprintf(stderr, "rill serve: %s:%d: unknown or malformed setting '%s'\n", path, lineno,
                    key);
            rc = 2;
            break;
        }
        snprintf(store[n_store], sizeof store[n_store], "%s", val);
        char arg[80];
        snprintf(arg, sizeof arg, "--%s", key);
        char *argv[3] = { "config", arg, store[n_store++] };
        int argc = o->kind == CLI_FLAG ? 2 : 3;
        if (o->kind == CLI_FLAG && strcmp(val, "true") != 0) {
            continue; /* "flag = false" leaves it off */
        }
        int n_pos = 0;
        rc = cli_parse(argc, argv, 1, opts, "", "", NULL, 0, &n_pos);
    }
    fclose(f);
    return rc;
}

/* rilld's log: its own messages ("rilld: ...") as they are, from INFO up; the library's warnings
 * and errors with their level (RILL_LOG sets the threshold, as for every rill command). */
static void serve_log(void *user, rill_log_level_t level, const char *file, int line,
                      const char *msg) {
    bool explicit_level = user != NULL;
    if (strncmp(msg, "rilld: ", 7) == 0) {
        fprintf(stderr, "%s\n", msg);
    } else if (explicit_level || level >= RILL_LOG_WARN) {
        rill_log_to_file(NULL, level, file, line, msg);
    }
}

/* --model FILE or NAME=FILE: NAME is what comes before the first '=' when that is a name (no
 * '/', 1..63 bytes); otherwise the whole value is the file. */
static int parse_model(const char *v, rill_server_model_t *out, char name[64]) {
    const char *eq = strchr(v, '=');
    size_t n = eq != NULL ? (size_t)(eq - v) : 0;
    if (eq != NULL && n >= 1 && n < 64 && memchr(v, '/', n) == NULL) {
        memcpy(name, v, n);
        name[n] = '\0';
        out->name = name;
        out->path = eq + 1;
    } else {
        out->name = NULL;
        out->path = v;
    }
    if (out->path[0] == '\0') {
        fprintf(stderr, "rill serve: --model %s: no file\n", v);
        return 2;
    }
    return 0;
}

/* "BYTES" or a size with a binary suffix (K, M, G, T; KB/KiB etc. alike): 0 or -1 (reported). */
static int parse_size(const char *text, int64_t *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno != 0 || !(v >= 0)) {
        fprintf(stderr, "rill serve: --sleep-disk: not a size: '%s'\n", text);
        return -1;
    }
    double mult = 1;
    const char *u = end;
    switch (*u == '\0' ? '\0' : (char)(*u | 0x20)) {
    case '\0':
    case 'b':
        break;
    case 'k':
        mult = 1024.0;
        break;
    case 'm':
        mult = 1024.0 * 1024;
        break;
    case 'g':
        mult = 1024.0 * 1024 * 1024;
        break;
    case 't':
        mult = 1024.0 * 1024 * 1024 * 1024;
        break;
    default:
        mult = -1;
    }
    if (mult > 1) {
        u++;
        u += (*u | 0x20) == 'i';
    }
    u += *u != '\0' && (*u | 0x20) == 'b';
    if (mult < 0 || *u != '\0' || v * mult > 9.0e18) {
        fprintf(stderr,
                "rill serve: --sleep-disk: '%s' is not BYTES or a size like 512M, 20G, 1TiB\n",
                text);
        return -1;
    }
    *out = (int64_t)(v * mult);
    return 0;
}

int cmd_serve(int argc, char **argv) {
    rill_server_params_t p = rill_server_default_params();
    const char *config = NULL, *fsync = "everysec", *attn = "flash";
    local_opts_t kvo = { .kv_type = "f16" }; /* only the cache types are read */
    cli_list_t models = { .n = 0 };
    int64_t threads = 0, kv_cells = p.kv_cells, hwm = p.hwm, max_msg = p.max_msg,
            window = p.default_window, sinks = p.default_sinks, max_sessions = p.max_sessions,
            max_delay = p.max_delay_ms, http_replay = p.http_replay,
            http_stream_max = p.http_stream_max, standing_interval = p.standing_interval_ms,
            sleep_idle = p.sleep_idle_s;
    const char *sleep_disk = NULL;
    double tick_rate = p.tick_rate, standing_share = p.standing_share;
    bool insecure = false;
    int n_pos = 0;
    const cli_opt_t opts[] = {
        { "model", "-m", CLI_LIST, &models,
          "GGUF model, FILE or NAME=FILE; repeat for several (the first is the default; "
          "without: the default model). A Whisper GGUF (tools/whisper_to_gguf.py), e.g. "
          "--model asr=models/whisper-tiny.en.gguf, is a speech recognizer: session.create "
          "with asr: NAME (or model: NAME, transcript-only) gives a session that takes "
          "ingest.audio",
          1, 0 },
        { "config", NULL, CLI_STRING, &config,
          "read settings from a file first: 'option = value' per line (flags: 'true')", 1, 0 },
        { "listen", NULL, CLI_STRING, &p.request_ep, "ROUTER endpoint for requests", 1, 0 },
        { "events", NULL, CLI_STRING, &p.event_ep, "XPUB endpoint for events", 1, 0 },
        { "curve-keys", NULL, CLI_STRING, &p.curve_dir,
          "CURVE: DIR/server.key and DIR/clients/*.pub (see docs/protocol.md)", 1, 0 },
        { "insecure-bind", NULL, CLI_FLAG, &insecure,
          "allow non-loopback endpoints without CURVE (anyone can connect)", 1, 0 },
        { "http", NULL, CLI_STRING, &p.http_ep,
          "also serve HTTP on HOST:PORT: OpenAI-compatible API, sessions, SSE, /metrics, status "
          "page at / (docs/protocol.md); loopback only unless --http-tokens",
          1, 0 },
        { "http-tokens", NULL, CLI_STRING, &p.http_tokens,
          "HTTP bearer tokens, lines 'TOKEN OWNER'; a token's sessions are its own", 1, 0 },
        { "http-replay", NULL, CLI_INT, &http_replay,
          "events kept per session for an SSE client's Last-Event-ID", 0, 1e6 },
        { "http-stream-buffer", NULL, CLI_INT, &http_stream_max,
          "bytes an SSE stream may queue for a slow client before it is cut off", 4096, 1 << 30 },
        { "state", NULL, CLI_STRING, &p.state_dir,
          "directory of session logs, snapshots and metadata (restored at start)", 1, 0 },
        { "fsync", NULL, CLI_STRING, &fsync, "ingest log fsync: always, everysec or never", 1, 0 },
        { "threads", "-t", CLI_INT, &threads, "compute threads (0: one per CPU)", 0, 512 },
        { "attn", NULL, CLI_STRING, &attn,
          "attention kernel: flash (faster on long contexts) or exact (llama.cpp's bits)", 1, 0 },
        { "kv-cells", NULL, CLI_INT, &kv_cells, "KV budget in token cells", 16, 1e9 },
        { "kv-type", NULL, CLI_STRING, &kvo.kv_type,
          "KV cache type of K and V: f16, f32, q8_0 or q4_0", 1, 0 },
        { "cache-type-k", NULL, CLI_STRING, &kvo.cache_type_k,
          "K cache type: f32, f16, q8_0 or q4_0 (default: --kv-type's)", 1, 0 },
        { "cache-type-v", NULL, CLI_STRING, &kvo.cache_type_v,
          "V cache type: f32, f16, q8_0 or q4_0 (default: --kv-type's)", 1, 0 },
        { "max-sessions", NULL, CLI_INT, &max_sessions, "most open sessions", 1, 1e6 },
        { "window", NULL, CLI_INT, &window, "window of a session created without one", 0, 1e6 },
        { "sinks", NULL, CLI_INT, &sinks, "sink tokens of such a session", 0, 1e6 },
        { "tick-rate", NULL, CLI_FLOAT, &tick_rate,
          "lines per second per session before ticks are aggregated into bars", 0.001, 1e6 },
        { "question-format", NULL, CLI_STRING, &p.question_format,
          "how a question is put to every model (one %s; \\n is a newline); default: the "
          "model's chat template, or \"\\nQuestion: %s\\nAnswer:\" without one",
          1, 0 },
        { "max-delay-ms", NULL, CLI_INT, &max_delay,
          "bound on a step, hence on a waiting question's delay (0: none)", 0, 1e6 },
        { "standing-interval-ms", NULL, CLI_INT, &standing_interval,
          "least time between the starts of one standing query's refreshes; newer data "
          "meanwhile waits for the next (0: none)",
          0, 1e9 },
        { "standing-share", NULL, CLI_FLOAT, &standing_share,
          "most share of engine time standing refreshes may take (decayed over ~2 s) before "
          "new ones wait, leaving the rest for ingest and questions (1: no cap)",
          0.001, 1 },
        { "sleep-idle-s", NULL, CLI_INT, &sleep_idle,
          "a session no request touched for this many seconds leaves RAM for its snapshot "
          "(it wakes on its next request; 0: only when the KV budget is full); default 300",
          0, 1e9 },
        { "sleep-disk", NULL, CLI_STRING, &sleep_disk,
          "most bytes of sleeping sessions' snapshots (BYTES or SIZE: 512M, 20G); past it the "
          "coldest keep only their log and re-prefill on wake (default: no limit)",
          1, 0 },
        { "hwm", NULL, CLI_INT, &hwm, "high-water mark of both sockets (messages)", 1, 1e7 },
        { "max-msg", NULL, CLI_INT, &max_msg, "largest request frame (bytes)", 1024, 1 << 30 },
        { "ready-file", NULL, CLI_STRING, &p.ready_file,
          "write the pid here once listening (for scripts)", 1, 0 },
        { NULL, NULL, 0, NULL, NULL, 0, 0 },
    };
    /* a --config first, then the command line over it */
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--config") == 0) {
            int rc = read_config(argv[i + 1], opts);
            if (rc != 0) {
                return rc;
            }
        }
    }
    int rc = cli_parse(argc, argv, 1, opts, "rill serve [options]   (also: rilld [options])",
                       "Serves sessions over ZeroMQ: requests on a ROUTER socket, events on an "
                       "XPUB socket\n(docs/protocol.md), and with --http over HTTP too. Without "
                       "--curve-keys (--http-tokens\nfor HTTP) it binds loopback "
                       "endpoints only, unless --insecure-bind. SIGINT/SIGTERM: snapshots every "
                       "session and exits.\nSpeech: with a Whisper model (--model asr=FILE), "
                       "sessions take audio packets (ingest.audio: opus or pcm16, flush ends a "
                       "stream)\nand publish <session>/transcript events {committed, tentative, "
                       "audio_s}; session.stats has their asr figures.",
                       NULL, 0, &n_pos);
    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    static char names[RILL_SERVER_MAX_MODELS][64];
    if (models.n > RILL_SERVER_MAX_MODELS) {
        fprintf(stderr, "rill serve: at most %d --model\n", RILL_SERVER_MAX_MODELS);
        return 2;
    }
    for (int i = 0; i < models.n; i++) {
        if (parse_model(models.v[i], &p.models[i], names[i]) != 0) {
            return 2;
        }
    }
    p.n_models = models.n;
    if (p.n_models == 0) {
        p.models[0] = (rill_server_model_t){ .name = NULL, .path = cli_default_model() };
        if (p.models[0].path == NULL) {
            return 1;
        }
        p.n_models = 1;
    }
    if (strcmp(fsync, "always") == 0) {
        p.fsync = RILL_SESSION_FSYNC_ALWAYS;
    } else if (strcmp(fsync, "never") == 0) {
        p.fsync = RILL_SESSION_FSYNC_NEVER;
    } else if (strcmp(fsync, "everysec") != 0) {
        fprintf(stderr, "rill serve: --fsync must be always, everysec or never\n");
        return 2;
    }
    if (strcmp(attn, "flash") == 0 || strcmp(attn, "exact") == 0) {
        p.attn = attn[0] == 'f' ? RILL_ATTN_FLASH : RILL_ATTN_EXACT;
    } else {
        fprintf(stderr, "rill serve: --attn must be flash or exact, got '%s'\n", attn);
        return 2;
    }
    if (local_cache_types(&kvo, &p.kv_type_k, &p.kv_type_v) != 0) {
        return 2;
    }
    p.threads = (int32_t)threads;
    p.kv_cells = kv_cells;
    p.hwm = (int32_t)hwm;
    p.max_msg = max_msg;
    p.default_window = (int32_t)window;
    p.default_sinks = (int32_t)sinks;
    p.max_sessions = (int32_t)max_sessions;
    p.max_delay_ms = max_delay;
    p.standing_interval_ms = standing_interval;
    p.standing_share = standing_share;
    p.sleep_idle_s = sleep_idle;
    if (sleep_disk != NULL && parse_size(sleep_disk, &p.sleep_disk) != 0) {
        return 2;
    }
    p.http_replay = (int32_t)http_replay;
    p.http_stream_max = http_stream_max;
    p.tick_rate = tick_rate;
    p.insecure_bind = insecure;
    /* the format may spell newlines as \n (so --help and config files show it on one line) */
    static char qfmt[1024];
    size_t qn = 0;
    for (const char *c = p.question_format; c != NULL && *c != '\0' && qn + 1 < sizeof qfmt; c++) {
        if (c[0] == '\\' && c[1] == 'n') {
            qfmt[qn++] = '\n';
            c++;
        } else {
            qfmt[qn++] = *c;
        }
    }
    qfmt[qn] = '\0';
    p.question_format = p.question_format != NULL ? qfmt : NULL;
    if (p.question_format != NULL && strstr(p.question_format, "%s") == NULL) {
        fprintf(stderr, "rill serve: --question-format needs a %%s for the question\n");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    const char *lvl = getenv("RILL_LOG");
    rill_log_set(serve_log, (void *)lvl);
    if (lvl == NULL) {
        rill_log_set_level(RILL_LOG_INFO); /* rilld's own messages; the library's from WARN */
    }
    return rill_server_run(&p, &g_stop);
}

int cmd_keygen(int argc, char **argv) {
    const char *pos[2];
    int n_pos = 0;
    const cli_opt_t opts[] = { { NULL, NULL, 0, NULL, NULL, 0, 0 } };
    int rc = cli_parse(argc, argv, 1, opts, "rill keygen PATH",
                       "Writes a CURVE key pair: PATH.key (secret, mode 0600) and PATH.pub "
                       "(public), Z85.\nFor rilld: --curve-keys DIR needs DIR/server.key; put "
                       "each client's .pub in DIR/clients/.",
                       pos, 1, &n_pos);
    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    if (n_pos != 1) {
        fprintf(stderr, "rill keygen: give the path prefix (e.g. keys/server)\n");
        return 2;
    }
    char pub[41], sec[41], path[4096];
    if (zmq_curve_keypair(pub, sec) != 0) {
        fprintf(stderr, "rill keygen: this libzmq has no CURVE support\n");
        return 1;
    }
    snprintf(path, sizeof path, "%s.key", pos[0]);
    mode_t old = umask(077);
    FILE *f = fopen(path, "wx");
    umask(old);
    if (f == NULL) {
        fprintf(stderr, "rill keygen: cannot create %s (it must not exist)\n", path);
        return 1;
    }
    fprintf(f, "%s\n", sec);
    fclose(f);
    snprintf(path, sizeof path, "%s.pub", pos[0]);
    f = fopen(path, "wx");
    if (f == NULL) {
        fprintf(stderr, "rill keygen: cannot create %s (it must not exist)\n", path);
        return 1;
    }
    fprintf(f, "%s\n", pub);
    fclose(f);
    printf("%s\n", pub);
    return 0;
}
