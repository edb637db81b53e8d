/*
 * cli.c - table-driven option parsing and the default model's location for the rill command.
 * The table is the single source of the --help text, so the help can only say what is parsed.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "rill_alloc.h"
#include "rill_log.h"

static const cli_opt_t *find_opt(const cli_opt_t *opts, const char *arg, size_t len) {
    for (const cli_opt_t *o = opts; o->name != NULL; o++) {
        if (arg[0] == '-' && arg[1] == '-' && strlen(o->name) == len - 2 &&
            strncmp(arg + 2, o->name, len - 2) == 0) {
            return o;
        }
        if (o->alias != NULL && strlen(o->alias) == len && strncmp(arg, o->alias, len) == 0) {
            return o;
        }
    }
    return NULL;
}

static int set_value(const cli_opt_t *o, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case CLI_FLAG:
        return 0;
    case CLI_STRING:
        *(const char **)o->dest = v;
        return 0;
    case CLI_LIST: {
        cli_list_t *l = o->dest;
        if (l->n == CLI_LIST_MAX) {
            fprintf(stderr, "rill: --%s given more than %d times\n", o->name, CLI_LIST_MAX);
            return 2;
        }
        l->v[l->n++] = v;
        return 0;
    }
    case CLI_INT: {
        long long x = strtoll(v, &end, 10);
        if (errno != 0 || end == v || *end != '\0') {
            fprintf(stderr, "rill: --%s expects an integer, got '%s'\n", o->name, v);
            return 2;
        }
        if (o->min <= o->max && ((double)x < o->min || (double)x > o->max)) {
            fprintf(stderr, "rill: --%s must be between %.0f and %.0f, got %lld\n", o->name, o->min,
                    o->max, x);
            return 2;
        }
        *(int64_t *)o->dest = (int64_t)x;
        return 0;
    }
    case CLI_FLOAT: {
        double x = strtod(v, &end);
        if (errno != 0 || end == v || *end != '\0' || !isfinite(x)) {
            fprintf(stderr, "rill: --%s expects a number, got '%s'\n", o->name, v);
            return 2;
        }
        if (o->min <= o->max && (x < o->min || x > o->max)) {
            fprintf(stderr, "rill: --%s must be between %g and %g, got %g\n", o->name, o->min,
                    o->max, x);
            return 2;
        }
        *(double *)o->dest = x;
        return 0;
    }
    }
    return 2;
}

void cli_print_help(const cli_opt_t *opts, const char *usage, const char *summary) {
    printf("usage: %s\n\n%s\n\noptions:\n", usage, summary);
    for (const cli_opt_t *o = opts; o->name != NULL; o++) {
        char left[64];
        const char *meta = o->kind == CLI_FLAG                            ? ""
                           : o->kind == CLI_STRING || o->kind == CLI_LIST ? " TEXT"
                           : o->kind == CLI_INT                           ? " N"
                                                                          : " X";
        snprintf(left, sizeof left, "%s%s--%s%s", o->alias ? o->alias : "", o->alias ? ", " : "",
                 o->name, meta);
        printf("  %-26s %s", left, o->help);
        switch (o->kind) {
        case CLI_STRING:
            if (*(const char **)o->dest != NULL) {
                printf(" (default %s)", *(const char **)o->dest);
            }
            break;
        case CLI_INT:
            printf(" (default %lld)", (long long)*(int64_t *)o->dest);
            break;
        case CLI_FLOAT:
            printf(" (default %g)", *(double *)o->dest);
            break;
        case CLI_LIST:
            printf(" (repeatable)");
            break;
        case CLI_FLAG:
            break;
        }
        printf("\n");
    }
    printf("  %-26s %s\n", "-h, --help", "print this help and exit");
}

int cli_parse(int argc, char **argv, int first, const cli_opt_t *opts, const char *usage,
              const char *summary, const char **positional, int max_pos, int *n_pos) {
    *n_pos = 0;
    bool only_positional = false;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!only_positional && strcmp(a, "--") == 0) {
            only_positional = true;
            continue;
        }
        if (!only_positional && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
            cli_print_help(opts, usage, summary);
            return 1;
        }
        if (only_positional || a[0] != '-' || a[1] == '\0') {
            if (*n_pos >= max_pos) {
                fprintf(stderr, "rill: unexpected argument '%s'\nusage: %s\n", a, usage);
                return 2;
            }
            positional[(*n_pos)++] = a;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq != NULL && a[1] == '-' ? (size_t)(eq - a) : strlen(a);
        const cli_opt_t *o = find_opt(opts, a, len);
        if (o == NULL) {
            fprintf(stderr, "rill: unknown option '%.*s'\nusage: %s\n(try --help)\n", (int)len, a,
                    usage);
            return 2;
        }
        if (o->kind == CLI_FLAG) {
            if (eq != NULL && a[1] == '-') {
                fprintf(stderr, "rill: --%s takes no value\n", o->name);
                return 2;
            }
            *(bool *)o->dest = true;
            continue;
        }
        const char *v;
        if (eq != NULL && a[1] == '-') {
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            fprintf(stderr, "rill: --%s needs a value\n", o->name);
            return 2;
        }
        int rc = set_value(o, v);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

static bool readable(const char *p) {
    return access(p, R_OK) == 0;
}

const char *cli_find_model(const char *file, const char *env_name) {
    static char path[PATH_MAX];
    const char *env = env_name != NULL ? getenv(env_name) : NULL;
    if (env != NULL && env[0] != '\0') {
        snprintf(path, sizeof path, "%s", env);
        return path;
    }
    snprintf(path, sizeof path, "models/%s", file);
    if (readable(path)) {
        return path;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        for (int up = 0; up < 4; up++) {
            char *slash = strrchr(exe, '/');
            if (slash == NULL) {
                break;
            }
            *slash = '\0';
            int w = snprintf(path, sizeof path, "%s/models/%s", exe, file);
            if (w > 0 && (size_t)w < sizeof path && readable(path)) {
                return path;
            }
        }
    }
    return NULL;
}

const char *cli_default_model(void) {
    const char *p = cli_find_model(RILL_DEFAULT_MODEL, "RILL_MODEL");
    if (p == NULL) {
        fprintf(stderr,
                "rill: no --model given and the default model (models/%s) was not found;\n"
                "      run scripts/setup.sh to fetch it, or set RILL_MODEL\n",
                RILL_DEFAULT_MODEL);
    }
    return p;
}

bool cli_buf_append(char **p, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap < 256 ? 256 : *cap;
        while (c < *len + n + 1) {
            c *= 2;
        }
        char *g = rill_realloc(RILL_MEM_OTHER, *p, c);
        if (g == NULL) {
            return false;
        }
        *p = g;
        *cap = c;
    }
    memcpy(*p + *len, s, n);
    *len += n;
    (*p)[*len] = '\0';
    return true;
}

/* Bytes of the valid UTF-8 sequence at s[0, n), or 0 when it is not one (overlong forms,
 * surrogates and values past U+10FFFF are not). */
static size_t utf8_len(const unsigned char *s, size_t n) {
    size_t len = s[0] < 0x80             ? 1
                 : (s[0] & 0xE0) == 0xC0 ? 2
                 : (s[0] & 0xF0) == 0xE0 ? 3
                 : (s[0] & 0xF8) == 0xF0 ? 4
                                         : 0;
    if (len == 0 || len > n) {
        return 0;
    }
    uint32_t cp = len == 1 ? s[0] : s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            return 0;
        }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
    if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return 0;
    }
    return len;
}

void cli_json_str(FILE *f, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        const unsigned char c = u[i];
        size_t len = utf8_len(u + i, n - i);
        if (len == 0) {
            fputs("\\ufffd", f);
            i++;
        } else if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
            i++;
        } else if (c == '\n') {
            fputs("\\n", f);
            i++;
        } else if (c < 0x20 || c == 0x7F) {
            fprintf(f, "\\u%04x", c);
            i++;
        } else {
            fwrite(u + i, 1, len, f);
            i += len;
        }
    }
    fputc('"', f);
}

void cli_pace_to(uint64_t t0_ns, int64_t samples, int rate, double pace,
                 const volatile sig_atomic_t *stop) {
    if (pace <= 0 || rate <= 0) {
        return;
    }
    const double due = (double)samples / rate / pace;
    const double now = (double)(rill_now_ns() - t0_ns) * 1e-9;
    if (due > now) {
        const double d = due - now;
        struct timespec ts = { (time_t)d, (long)((d - (double)(time_t)d) * 1e9) };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR && (stop == NULL || !*stop)) {
        }
    }
}
