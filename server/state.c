/*
 * state.c - rilld's state directory (contract: server_internal.h; docs/protocol.md, "State
 * directory"): per session NAME
 *   NAME.log         the ingest log (sessions/: every acknowledged input)
 *   NAME.log.base    a snapshot of the start state of a session made from a shared prompt
 *   NAME.snap        the snapshot written at shutdown
 *   NAME.meta        "owner window sinks model\n" (owner "-" for anonymous; a file without the
 *                    model, written before rilld had several, means the default model)
 *   NAME.standing    its standing queries, oldest first: "<max_tokens> <bytes>\n<bytes>\n" each
 *   sleep/s<id>.sleep  a sleeping session's snapshot (scheduler: "Sleeping sessions"); emptied
 *                    at start-up
 * Metadata and standing files are replaced atomically (temporary file, fsync, rename), so a
 * crash leaves the old or the new one. At start-up every NAME.meta is restored: snapshot, then
 * the log after it, into the model the metadata names.
 */
#include <dirent.h>
#include <sys/stat.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "server_internal.h"

void srv_state_path(const srv_t *s, const char *name, const char *ext, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s%s", s->p.state_dir, name, ext);
}

/* Writes body() into path atomically. */
static rill_err_t replace_file(const char *path, bool (*body)(FILE *f, const void *ctx),
                               const void *ctx) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        return RILL_EIO;
    }
    bool ok = body(f, ctx);
    ok = fflush(f) == 0 && fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return RILL_EIO;
    }
    return RILL_OK;
}

typedef struct meta_ctx {
    const srv_t *s;
    const srv_sess_t *x;
} meta_ctx_t;

static bool meta_body(FILE *f, const void *ctx) {
    const meta_ctx_t *c = ctx;
    /* a fifth field names the recognizer (older readers read four and ignore it) */
    return fprintf(f, "%s %d %d %s%s%s\n", c->x->owner[0] != '\0' ? c->x->owner : "-", c->x->window,
                   c->x->sinks, c->s->models[c->x->model].name, c->x->asr_model >= 0 ? " " : "",
                   c->x->asr_model >= 0 ? c->s->models[c->x->asr_model].name : "") > 0;
}

rill_err_t srv_write_meta(srv_t *s, const srv_sess_t *x) {
    char path[4096];
    srv_state_path(s, x->name, ".meta", path, sizeof path);
    meta_ctx_t c = { s, x };
    return replace_file(path, meta_body, &c);
}

typedef struct standing_ctx {
    const pend_t **qs;
    size_t n;
} standing_ctx_t;

static bool standing_body(FILE *f, const void *ctx) {
    const standing_ctx_t *c = ctx;
    bool ok = true;
    for (size_t i = 0; i < c->n && ok; i++) {
        ok = fprintf(f, "%d %zu\n", c->qs[i]->n_max, c->qs[i]->qlen) > 0 &&
             fwrite(c->qs[i]->qtext, 1, c->qs[i]->qlen, f) == c->qs[i]->qlen &&
             fputc('\n', f) != EOF;
    }
    return ok;
}

rill_err_t srv_write_standing(srv_t *s, const srv_sess_t *x) {
    char path[4096];
    srv_state_path(s, x->name, ".standing", path, sizeof path);
    size_t n = 0;
    for (const pend_t *p = s->pends; p != NULL; p = p->next) {
        n += p->standing && p->sess == x && !p->unlisted;
    }
    if (n == 0) {
        return unlink(path) == 0 || errno == ENOENT ? RILL_OK : RILL_EIO;
    }
    const pend_t **qs = rill_malloc(RILL_MEM_SERVER, n * sizeof *qs);
    if (qs == NULL) {
        return RILL_ENOMEM;
    }
    size_t k = n; /* the list is newest first */
    for (const pend_t *p = s->pends; p != NULL; p = p->next) {
        if (p->standing && p->sess == x && !p->unlisted) {
            qs[--k] = p;
        }
    }
    standing_ctx_t c = { qs, n };
    rill_err_t err = replace_file(path, standing_body, &c);
    rill_free(qs);
    return err;
}

void srv_remove_files(srv_t *s, const char *name) {
    static const char *const ext[] = { ".log", ".log.base", ".snap", ".meta", ".standing" };
    for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
        char path[4200];
        srv_state_path(s, name, ext[i], path, sizeof path);
        unlink(path);
    }
}

/* Registers the standing queries of a restored session from its state file; returns how many
 * were registered, or -1 when the file is unreadable (those before the damage are kept). */
static int restore_standing(srv_t *s, srv_sess_t *x) {
    char path[4096];
    srv_state_path(s, x->name, ".standing", path, sizeof path);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return errno == ENOENT ? 0 : -1;
    }
    int count = 0, n_max;
    size_t len;
    char *q = NULL;
    for (int got; (got = fscanf(f, "%d %zu", &n_max, &len)) != EOF;) {
        if (got != 2 || fgetc(f) != '\n' || n_max < 1 || n_max > RILL_PROTO_MAX_TOKENS ||
            len == 0 || len > RILL_PROTO_MAX_STR) {
            count = -1;
            break;
        }
        q = rill_malloc(RILL_MEM_SERVER, len);
        pend_t *p = rill_calloc(RILL_MEM_SERVER, 1, sizeof *p);
        const char *why = "";
        rill_proto_str_t qs = { q, len };
        if (q == NULL || p == NULL || fread(q, 1, len, f) != len || fgetc(f) != '\n') {
            rill_free(p);
            count = -1;
            break;
        }
        p->standing = true;
        p->sess = x;
        rill_err_t err = srv_submit_query(s, p, &qs, n_max, &why);
        if (err == RILL_OK) {
            count++;
        } else {
            RILL_LOGE("rilld: session %s: standing query not restored: %s (%s)", x->name, why,
                      rill_err_name(err));
            rill_free(p);
        }
        rill_free(q);
        q = NULL;
    }
    rill_free(q);
    fclose(f);
    return count;
}

/* Reads NAME.meta into x; false (logged) when it is unreadable or names a model not loaded. */
static bool read_meta(srv_t *s, srv_sess_t *x) {
    char path[4096], owner[64] = "", model[RILL_SCHED_MODEL_NAME + 1] = "",
                     asr[RILL_SCHED_MODEL_NAME + 1] = "";
    srv_state_path(s, x->name, ".meta", path, sizeof path);
    FILE *f = fopen(path, "r");
    int got =
        f != NULL ? fscanf(f, "%63s %d %d %64s %64s", owner, &x->window, &x->sinks, model, asr) : 0;
    if (f != NULL) {
        fclose(f);
    }
    if (got < 3) {
        RILL_LOGE("rilld: %s: unreadable metadata, session skipped", path);
        return false;
    }
    /* written before models had names: the default language model */
    x->model = got >= 4 ? srv_model_find(s, model, strlen(model)) : s->default_llm;
    x->asr_model = got == 5 ? srv_model_find(s, asr, strlen(asr)) : -1;
    if (got == 5 && (x->asr_model < 0 || !s->models[x->asr_model].is_asr)) {
        RILL_LOGE("rilld: session %s's recognizer %s is not loaded: restored without one", x->name,
                  asr);
        x->asr_model = -1;
    }
    if (x->model >= 0 && s->models[x->model].is_asr) {
        RILL_LOGE("rilld: session %s names the recognizer %s as its model: session skipped",
                  x->name, model);
        return false;
    }
    if (x->model < 0) {
        RILL_LOGE("rilld: session %s is on model %s, which is not loaded: session skipped "
                  "(its files are kept)",
                  x->name, model);
        return false;
    }
    snprintf(x->owner, sizeof x->owner, "%s", strcmp(owner, "-") == 0 ? "" : owner);
    char name[SRV_OWNER_LEN];
    if (s->p.curve_dir != NULL && strlen(x->owner) == 40 &&
        srv_auth_name_of_key(s->p.curve_dir, x->owner, name, sizeof name)) {
        /* written when a CURVE owner was its key: now the key file's name */
        snprintf(x->owner, sizeof x->owner, "%s", name);
        srv_write_meta(s, x);
    }
    return true;
}

int srv_sleep_dir_prepare(srv_t *s) {
    snprintf(s->sleep_dir, sizeof s->sleep_dir, "%s/sleep", s->p.state_dir);
    if (mkdir(s->sleep_dir, 0700) != 0 && errno != EEXIST) {
        RILL_LOGE("rilld: cannot create %s: %s", s->sleep_dir, strerror(errno));
        return -1;
    }
    DIR *dir = opendir(s->sleep_dir);
    if (dir == NULL) {
        RILL_LOGE("rilld: cannot read %s: %s", s->sleep_dir, strerror(errno));
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n > 6 && strcmp(e->d_name + n - 6, ".sleep") == 0) {
            char path[4400];
            snprintf(path, sizeof path, "%s/%s", s->sleep_dir, e->d_name);
            unlink(path);
        }
    }
    closedir(dir);
    return 0;
}

void srv_restore_all(srv_t *s) {
    DIR *dir = opendir(s->p.state_dir);
    if (dir == NULL) {
        return;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".meta") != 0 || n - 5 > RILL_PROTO_MAX_NAME) {
            continue;
        }
        srv_sess_t *x = srv_new_sess(s);
        if (x == NULL) {
            RILL_LOGE("rilld: out of memory restoring sessions");
            break;
        }
        memcpy(x->name, e->d_name, n - 5);
        if (!read_meta(s, x)) {
            srv_free_sess(x);
            continue;
        }
        char snap[4096], logp[4096];
        srv_state_path(s, x->name, ".snap", snap, sizeof snap);
        srv_state_path(s, x->name, ".log", logp, sizeof logp);
        if (access(snap, F_OK) != 0) {
            srv_state_path(s, x->name, ".log.base", snap, sizeof snap);
        }
        rill_err_t err = rill_sched_session_restore(
            s->sch, s->models[x->model].sched, access(snap, F_OK) == 0 ? snap : NULL,
            access(logp, F_OK) == 0 ? logp : NULL, s->p.fsync, &x->sid);
        if (err != RILL_OK) {
            RILL_LOGE("rilld: session %s not restored: %s %s", x->name, rill_err_name(err),
                      rill_last_error(err));
            srv_free_sess(x);
            continue;
        }
        srv_link_sess(s, x);
        if (x->asr_model >= 0) {
            /* a new recognizer: what the old one left tentative stays as the session's text */
            const char *why = "";
            const int32_t asr = x->asr_model;
            x->asr_model = -1;
            if (srv_speech_attach(s, x, asr, &why) != RILL_OK) {
                RILL_LOGE("rilld: session %s: recognizer not attached: %s", x->name, why);
            }
        }
        int n_standing = restore_standing(s, x);
        if (n_standing < 0) {
            RILL_LOGE("rilld: session %s: unreadable %s.standing, its later standing queries "
                      "not restored",
                      x->name, x->name);
        }
        RILL_LOGI("rilld: restored session %s (%d standing queries)", x->name,
                  n_standing > 0 ? n_standing : 0);
    }
    closedir(dir);
}
