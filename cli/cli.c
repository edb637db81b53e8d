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
#include <unistd.h>

#include "cli.h"

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
