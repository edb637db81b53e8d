/*
 * cli.h - shared pieces of the `rill` command: option parsing, the default model's location,
 * error reporting. Private to cli/.
 *
 * Options are described by a table (name, kind, destination, help). Parsing accepts
 * `--name value`, `--name=value`, short aliases and flags, rejects unknown options and malformed
 * numbers with a message naming the option, and prints --help from the same table, so the help
 * text cannot drift from what is parsed.
 *
 * Thread safety: single-threaded program code.
 */
#ifndef RILL_CLI_H
#define RILL_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>

typedef enum cli_kind {
    CLI_FLAG,   /* bool, no value */
    CLI_STRING, /* const char * (borrowed from argv) */
    CLI_INT,    /* int64_t */
    CLI_FLOAT,  /* double */
    CLI_LIST    /* cli_list_t: a string option that may be given several times */
} cli_kind_t;

/* The values of a CLI_LIST option in the order given (borrowed from argv). */
#define CLI_LIST_MAX 16
typedef struct cli_list {
    const char *v[CLI_LIST_MAX];
    int n;
} cli_list_t;

typedef struct cli_opt {
    const char *name;  /* long name without "--" */
    const char *alias; /* short name with "-" (e.g. "-n"), or NULL */
    cli_kind_t kind;
    void *dest;
    const char *help; /* one line; "(default ...)" is appended from the current dest value */
    double min, max;  /* for CLI_INT / CLI_FLOAT: accepted range (min > max: unchecked) */
} cli_opt_t;

/* Parses argv[first..argc) against opts (terminated by an entry with name == NULL).
 * Positional arguments are stored in *positional (up to max_pos; more is an error).
 * Returns 0 on success, 1 when --help/-h was given (help already printed to stdout),
 * 2 on a usage error (message already printed to stderr). */
int cli_parse(int argc, char **argv, int first, const cli_opt_t *opts, const char *usage,
              const char *summary, const char **positional, int max_pos, int *n_pos);

/* Prints usage, summary and the option table to stdout. */
void cli_print_help(const cli_opt_t *opts, const char *usage, const char *summary);

/* Finds the default model: $RILL_MODEL when set, else models/<RILL_DEFAULT_MODEL> in the current
 * directory or up to three directories above the rill executable. Returns a static buffer, or
 * NULL (with a message on stderr saying how to get the model) when it cannot be found. */
const char *cli_default_model(void);

/* Finds models/<file> as cli_default_model() does ($<env_name> first when env_name is not NULL
 * and the variable is set). Returns a static buffer (overwritten by the next call), or NULL
 * without a message when it is not found. */
const char *cli_find_model(const char *file, const char *env_name);

/* Appends s[0, n) to the growing NUL-ended buffer *p (length *len, capacity *cap; *p NULL with
 * both 0 to start; the caller frees *p with rill_free). Returns false when out of memory, with
 * nothing appended. */
bool cli_buf_append(char **p, size_t *len, size_t *cap, const char *s, size_t n);

/* Writes s[0, n) to f as a JSON string, quotes included. Bytes that are not valid UTF-8 (a model
 * or a recognizer may emit any) become U+FFFD, so every line written is valid JSON. */
void cli_json_str(FILE *f, const char *s, size_t n);

/* Sleeps until the wall clock (rill_now_ns) reaches t0_ns + samples / rate / pace seconds:
 * reading a file at pace times real time (pace <= 0: returns at once). A signal ends the sleep
 * early when *stop is set (stop may be NULL). */
void cli_pace_to(uint64_t t0_ns, int64_t samples, int rate, double pace,
                 const volatile sig_atomic_t *stop);

#define RILL_DEFAULT_MODEL "SmolLM2-135M-Instruct.Q4_1.gguf"

#endif /* RILL_CLI_H */
