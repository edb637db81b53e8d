/*
 * rill.c - the `rill` command: a dispatcher over sub-commands (cmd_*.c). Each sub-command parses
 * its own options from a table (cli.h), so `rill CMD --help` is always what CMD accepts.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "rill_log.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command_t;

static const command_t commands[] = {
    { "generate", cmd_generate, "generate text from a prompt, streamed as it is produced" },
    { "tokenize", cmd_tokenize, "print the tokens of a text (works on vocabulary-only GGUFs)" },
    { "logits", cmd_logits, "evaluate token ids from position 0 and write their logits" },
    { "bench", cmd_bench, "benchmarks: `rill bench model` (tokens/s), `rill bench stream`" },
    { "session-script", cmd_session_script, "run session commands from a script (tests, checks)" },
#ifdef RILL_HAVE_AUDIO
    { "devices", cmd_devices, "list audio input devices (PortAudio): index, name, channels, rate" },
#endif
#ifdef RILL_HAVE_TRANSCRIBE
    { "transcribe", cmd_transcribe, "speech to text from a file or the microphone (Whisper)" },
#endif
#ifdef RILL_HAVE_TRANSLATE
    { "translate", cmd_translate,
      "simultaneous translation of text or speech, English to Spanish" },
#endif
#ifdef RILL_HAVE_SERVER
    { "serve", cmd_serve, "run the daemon (rilld): sessions over ZeroMQ, docs/protocol.md" },
    { "keygen", cmd_keygen, "write a CURVE key pair for rilld or a client" },
#endif
#ifdef RILL_HAVE_CLIENT
    { "session", cmd_session, "sessions on a running rilld: new, close, list, stats, snapshot" },
    { "ingest", cmd_ingest, "feed a session text from stdin, or market ticks (--ticks FILE)" },
    { "ask", cmd_ask, "ask a question about a session's data; the answer streams" },
    { "standing", cmd_standing, "standing queries of a session: add, rm, ls" },
    { "watch", cmd_watch, "print the answers rilld pushes for a session's standing queries" },
    { "server-stats", cmd_server_stats, "rilld's counters" },
#endif
};

static void usage(FILE *f) {
    fprintf(f, "usage: rill COMMAND [options]   (rill COMMAND --help for its options)\n\n"
               "rill is a streaming session engine for transformer models (GGUF: llama, qwen2).\n"
               "Without --model, commands use the default model, models/SmolLM2-135M-Instruct."
               "Q4_1.gguf\n(fetched by scripts/setup.sh; RILL_MODEL overrides).\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].summary);
    }
    fprintf(f, "\nenvironment: RILL_MODEL (default model path), RILL_SIMD=scalar|avx2|avx512 (CPU "
               "kernels),\n             RILL_LOG=debug|info|warn|error (library log level; by "
               "default warnings only)\n");
}

/* Library errors come back as return codes, which the commands report with their context; by
 * default only warnings are shown from the log, so an error is not printed twice. RILL_LOG
 * shows everything from its level up. */
static void cli_log(void *user, rill_log_level_t level, const char *file, int line,
                    const char *msg) {
    bool explicit_level = user != NULL;
    if (level == RILL_LOG_ERROR && !explicit_level) {
        return;
    }
    rill_log_to_file(NULL, level, file, line, msg);
}

int main(int argc, char **argv) {
    const char *lvl = getenv("RILL_LOG");
    rill_log_set(cli_log, lvl != NULL ? (void *)lvl : NULL);
    rill_log_level_t level = RILL_LOG_WARN;
    if (lvl != NULL) {
        level = strcmp(lvl, "debug") == 0   ? RILL_LOG_DEBUG
                : strcmp(lvl, "info") == 0  ? RILL_LOG_INFO
                : strcmp(lvl, "error") == 0 ? RILL_LOG_ERROR
                                            : RILL_LOG_WARN;
    }
    rill_log_set_level(level);
#ifdef RILL_HAVE_SERVER
    const char *base = strrchr(argv[0], '/');
    if (strcmp(base != NULL ? base + 1 : argv[0], "rilld") == 0) {
        return cmd_serve(argc, argv); /* rilld [options] == rill serve [options] */
    }
#endif
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) == 0) {
            return commands[i].run(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "rill: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
