/*
 * sleep.c - sessions that sleep (contract: rill_scheduler.h, "Sleeping sessions"; engine thread).
 *
 * A sleeping session is a sess_t without a rill_session_t: its state is in its sleep file (a
 * snapshot, sessions/snapshot.c) or, in the log tier, only in its ingest log and the snapshot the
 * log continues (its base). It lives on its own list, sch->sleeping, so that everything that
 * walks sch->sessions (the batch builder, the stats, the recognizers' consumer lookups) sees
 * awake sessions only and never a NULL session; the commands that address a session come through
 * rill__sched_use(), which wakes it first. The session's reservation is released while it
 * sleeps, so the cell budget counts awake sessions only, and taken again at wake.
 *
 * Invariants: x->asleep == (x on sch->sleeping) == (x->s == NULL); sch->sleep_disk is the sum of
 * the sleepers' sleep_bytes, and a sleeper has a sleep file exactly when its tier is
 * RILL_SCHED_TIER_SNAPSHOT; a sleeper in the log tier has a log. A session sleeps only with
 * nothing in flight on it (may_sleep), between steps, so no batch or fork points at its pages.
 *
 * Least recently used: every command that touches a session stamps it with the next value of
 * sch->use_clock; pressure sleeps the smallest stamp first, and the disk budget drops the
 * smallest stamps' files first. A linear scan per victim: sleeping is rare next to steps, and
 * thousands of sessions scan in microseconds; rejected: an ordered structure kept on every touch
 * (a cost on every command for a rare event).
 *
 * Rejected: sleeping inside sessions/ (a session handle that keeps its struct and drops its
 * pages): the handle keeps its logits row (n_vocab floats: 192 KiB with the default model), its
 * token array and its replace window, which is most of an idle session's host memory; a
 * destroyed session costs only its sess_t, which is what lets thousands stay alive.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "sched_internal.h"

static char *dup_str(const char *s) {
    if (s == NULL) {
        return NULL;
    }
    size_t n = strlen(s) + 1;
    char *d = rill_malloc(RILL_MEM_SCHEDULER, n);
    if (d != NULL) {
        memcpy(d, s, n);
    }
    return d;
}

bool rill__sched_set_paths(sess_t *x, const char *log_path, const char *base_path,
                           rill_session_fsync_t fsync) {
    char *l = dup_str(log_path);
    char *b = dup_str(base_path);
    if ((log_path != NULL && l == NULL) || (base_path != NULL && b == NULL)) {
        rill_free(l);
        rill_free(b);
        return false;
    }
    rill_free(x->log_path);
    rill_free(x->base_path);
    x->log_path = l;
    x->base_path = b;
    x->fsync = fsync;
    return true;
}

static void sleep_path(const rill_sched_t *sch, const sess_t *x, char *out, size_t cap) {
    snprintf(out, cap, "%s/s%llu.sleep", sch->sleep_dir, (unsigned long long)x->id);
}

static int32_t budget(const model_t *m) {
    return m->n_pages - m->overflow;
}

void rill__sched_touch(rill_sched_t *sch, sess_t *x) {
    x->used = ++sch->use_clock;
    x->used_ns = rill__sched_now();
}

sess_t *rill__sched_find_any(rill_sched_t *sch, rill_sched_sid_t id) {
    sess_t *x = rill__sched_find_sess(sch, id);
    for (sess_t *y = sch->sleeping; x == NULL && y != NULL; y = y->next) {
        x = y->id == id ? y : NULL;
    }
    return x;
}

/* Unlinks x from the list at *head. */
static void unlink_from(sess_t **head, sess_t *x) {
    for (sess_t **pp = head; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == x) {
            *pp = x->next;
            x->next = NULL;
            return;
        }
    }
}

/* Inserts x into the list at *head, keeping id (creation) order. */
static void insert_into(sess_t **head, sess_t *x) {
    sess_t **pp = head;
    while (*pp != NULL && (*pp)->id < x->id) {
        pp = &(*pp)->next;
    }
    x->next = *pp;
    *pp = x;
}

/* True when nothing is in flight on x and nothing keeps it awake; queued data (evaluated first
 * by do_sleep) counts as in flight unless queued_ok. */
static bool may_sleep(const rill_sched_t *sch, const sess_t *x, bool queued_ok) {
    if (x->pinned || x->asleep || x->n_waiting > 0 ||
        (!queued_ok && rill_session_pending(x->s) > 0)) {
        return false;
    }
    for (const req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->sess == x && !(r->kind == REQ_STANDING && r->phase == PH_IDLE && !r->stale)) {
            return false;
        }
    }
    for (const rill_sched_asr_t *a = sch->asrs; a != NULL; a = a->next) {
        if (a->consumer == x->id) {
            return false;
        }
    }
    return true;
}

/* Drops the coldest sleepers' files (those a log can rebuild) until `bytes` more fit the disk
 * budget; false when they cannot. */
static bool disk_room(rill_sched_t *sch, int64_t bytes) {
    int64_t limit = sch->prm.sleep_disk_bytes;
    if (limit == 0) {
        return true;
    }
    if (bytes > limit) {
        return false;
    }
    while (sch->sleep_disk + bytes > limit) {
        sess_t *cold = NULL;
        for (sess_t *y = sch->sleeping; y != NULL; y = y->next) {
            if (y->tier == RILL_SCHED_TIER_SNAPSHOT && y->log_path != NULL &&
                (cold == NULL || y->used < cold->used)) {
                cold = y;
            }
        }
        if (cold == NULL) {
            return false;
        }
        char path[4096];
        sleep_path(sch, cold, path, sizeof path);
        unlink(path);
        sch->sleep_disk -= cold->sleep_bytes;
        cold->sleep_bytes = 0;
        cold->tier = RILL_SCHED_TIER_LOG;
        sch->st.tier_drops++;
    }
    return true;
}

static void fill_zzz(const rill_sched_t *sch, sess_t *x) {
    rill_sched_session_info_t *o = &x->zzz;
    memset(o, 0, sizeof *o);
    o->model = x->m->index;
    rill_session_stats(x->s, &o->st);
    o->version = rill_session_seq(x->s);
    o->reserved_pages = x->reserved;
    o->held_text = rill_session_pending_text(x->s);
    for (const req_t *r = sch->reqs; r != NULL; r = r->next) {
        o->n_standing += r->sess == x && r->kind == REQ_STANDING;
    }
}

/* Puts awake x to sleep (may_sleep checked by the caller). On error x is awake and unchanged.
 * The file is written first and measured, then room is made for what it measured (an estimate
 * would have to bound the replace window's held text, up to 128 KiB, and refuse files that fit);
 * only its K/V pages, a lower bound, decide beforehand that no file can fit. */
static rill_err_t do_sleep(rill_sched_t *sch, sess_t *x, bool idle) {
    /* a snapshot holds evaluated pages only: queued data is evaluated now, in one go (the price
     * of sleeping a session that was fed but not yet evaluated, paid by the command that needed
     * the room) */
    rill_err_t derr = rill_session_drain(x->s);
    if (derr != RILL_OK) {
        return derr;
    }
    rill_session_stats_t st;
    rill_session_stats(x->s, &st);
    int64_t least = (int64_t)st.pages * rill_session_pool_page_bytes(x->m->pool);
    int64_t limit = sch->prm.sleep_disk_bytes;
    int32_t tier = RILL_SCHED_TIER_LOG;
    int64_t bytes = 0;
    rill_err_t err = RILL_OK;
    char path[4096];
    sleep_path(sch, x, path, sizeof path);
    if (limit == 0 || least <= limit) {
        err = rill_session_snapshot_volatile(x->s, path); /* gone at restart anyway */
        struct stat fst;
        if (err == RILL_OK && stat(path, &fst) != 0) {
            err = rill__error(RILL_EIO, "sleep file %s: %s", path, strerror(errno));
        }
        if (err != RILL_OK) {
            unlink(path); /* also a file in place whose folder's fsync failed */
            sch->st.sleep_errors++;
            RILL_LOGW("scheduler: session %llu: sleep file not written (%s: %s)%s",
                      (unsigned long long)x->id, rill_err_name(err), rill_last_error(err),
                      x->log_path != NULL ? "; it sleeps on its log" : "; it stays awake");
            if (x->log_path == NULL) {
                return err;
            }
        } else if (disk_room(sch, (int64_t)fst.st_size)) {
            tier = RILL_SCHED_TIER_SNAPSHOT;
            bytes = (int64_t)fst.st_size;
        } else {
            unlink(path);
        }
    }
    if (tier == RILL_SCHED_TIER_LOG && x->log_path == NULL) {
        return rill__error(RILL_EFULL,
                           "no room for session %llu's sleep file within the disk budget "
                           "(%lld of %lld bytes used) and no log to sleep on",
                           (unsigned long long)x->id, (long long)sch->sleep_disk, (long long)limit);
    }
    fill_zzz(sch, x);
    rill_session_destroy(&x->s); /* syncs and closes its log */
    x->m->reserved -= x->reserved;
    x->asleep = true;
    x->tier = tier;
    x->sleep_bytes = bytes;
    x->sleeps++;
    sch->sleep_disk += bytes;
    sch->st.sleeps++;
    sch->st.sleeps_idle += idle;
    unlink_from(&sch->sessions, x);
    insert_into(&sch->sleeping, x);
    return RILL_OK;
}

/* The least recently used awake session of m that may sleep and was not refused this round. */
static sess_t *victim(rill_sched_t *sch, const model_t *m, uint64_t refused_from) {
    sess_t *v = NULL;
    for (sess_t *x = sch->sessions; x != NULL; x = x->next) {
        if (x->m == m && x->used < refused_from && (v == NULL || x->used < v->used) &&
            may_sleep(sch, x, true)) {
            v = x;
        }
    }
    return v;
}

bool rill__sched_make_room(rill_sched_t *sch, model_t *m, int32_t need) {
    if (sch->sleep_dir[0] == '\0') {
        return m->reserved + need <= budget(m);
    }
    /* a session that cannot sleep now (no disk room, no log) is stamped past the clock's value
     * at the start, so that the scan skips it for the rest of this call */
    uint64_t start = sch->use_clock + 1;
    while (m->reserved + need > budget(m)) {
        sess_t *v = victim(sch, m, start);
        if (v == NULL) {
            return false;
        }
        if (do_sleep(sch, v, false) != RILL_OK) {
            v->used = ++sch->use_clock; /* >= start: skipped from now on */
        }
    }
    return true;
}

bool rill__sched_sleep_one(rill_sched_t *sch, model_t *m) {
    if (sch->sleep_dir[0] == '\0') {
        return false;
    }
    uint64_t start = sch->use_clock + 1;
    for (;;) {
        sess_t *v = victim(sch, m, start);
        if (v == NULL) {
            return false;
        }
        if (do_sleep(sch, v, false) == RILL_OK) {
            return true;
        }
        v->used = ++sch->use_clock;
    }
}

/* True for the errors of a sleep file that is damaged or gone (not of memory or pages). */
static bool file_damaged(rill_err_t err) {
    return err == RILL_EFORMAT || err == RILL_ECORRUPT || err == RILL_ENOTFOUND ||
           err == RILL_EUNSUPPORTED || err == RILL_EIO || err == RILL_ERANGE;
}

/* Wakes sleeping x. On error x is asleep and unchanged (except that a damaged sleep file is gone
 * and x is in the log tier, when it has a log). */
static rill_err_t do_wake(rill_sched_t *sch, sess_t *x, cmd_t *c) {
    model_t *m = x->m;
    if (m->reserved + x->reserved > budget(m) && !rill__sched_make_room(sch, m, x->reserved)) {
        sch->st.wake_errors++;
        rill__sched_msg(c,
                        "KV budget of model %s: waking session %llu needs %d page(s), %d of %d "
                        "reservable pages are reserved and nothing else may sleep",
                        m->name, (unsigned long long)x->id, x->reserved, m->reserved, budget(m));
        return rill__error(RILL_EFULL, "waking session %llu: KV budget full",
                           (unsigned long long)x->id);
    }
    int64_t t0 = rill__sched_now();
    char path[4096];
    sleep_path(sch, x, path, sizeof path);
    rill_session_t *s = NULL;
    rill_err_t err = RILL_OK;
    for (int pass = 0; pass < 2; pass++) {
        bool snap = x->tier == RILL_SCHED_TIER_SNAPSHOT;
        do {
            err = snap ? rill_session_restore(m->pool, path, x->log_path, x->fsync, &s)
                       : rill_session_restore(m->pool, x->base_path, x->log_path, x->fsync, &s);
            /* forks hold the pages the reservation leaves free: more sleepers free them */
        } while (err == RILL_EFULL && rill__sched_sleep_one(sch, m));
        if (err == RILL_OK || !snap || !file_damaged(err) || x->log_path == NULL) {
            break;
        }
        RILL_LOGE("scheduler: session %llu: sleep file %s unusable (%s: %s); re-prefilling it "
                  "from its log",
                  (unsigned long long)x->id, path, rill_err_name(err), rill_last_error(err));
        unlink(path);
        sch->sleep_disk -= x->sleep_bytes;
        x->sleep_bytes = 0;
        x->tier = RILL_SCHED_TIER_LOG;
        sch->st.wake_fallbacks++;
    }
    if (err != RILL_OK) {
        sch->st.wake_errors++;
        char detail[RILL_ERR_DETAIL];
        snprintf(detail, sizeof detail, "%s", rill_last_error(err));
        rill__sched_msg(c, "waking session %llu: %s", (unsigned long long)x->id, detail);
        return rill__error(err, "waking session %llu: %s", (unsigned long long)x->id, detail);
    }
    bool snap = x->tier == RILL_SCHED_TIER_SNAPSHOT;
    if (snap) {
        unlink(path);
        sch->sleep_disk -= x->sleep_bytes;
    }
    int64_t dt = rill__sched_now() - t0;
    x->s = s;
    x->sleep_bytes = 0;
    x->asleep = false;
    x->wakes++;
    x->last_wake_ns = dt;
    m->reserved += x->reserved;
    unlink_from(&sch->sleeping, x);
    insert_into(&sch->sessions, x);
    sch->st.wakes++;
    rill_hist_record(&sch->st.wake_ns, (uint64_t)dt);
    if (!snap) {
        sch->st.wakes_log++;
        rill_hist_record(&sch->st.wake_log_ns, (uint64_t)dt);
    }
    return RILL_OK;
}

sess_t *rill__sched_use(rill_sched_t *sch, cmd_t *c, rill_sched_sid_t id, rill_err_t *err) {
    *err = RILL_OK;
    sess_t *x = rill__sched_find_any(sch, id);
    if (x == NULL) {
        *err = RILL_ENOTFOUND;
        return NULL;
    }
    if (x->asleep && (*err = do_wake(sch, x, c)) != RILL_OK) {
        return NULL;
    }
    rill__sched_touch(sch, x);
    return x;
}

int64_t rill__sched_sleep_idle(rill_sched_t *sch) {
    int64_t idle = sch->prm.sleep_idle_ns;
    if (idle <= 0 || sch->sleep_dir[0] == '\0') {
        return 0;
    }
    int64_t now = rill__sched_now(), next = 0;
    for (sess_t *x = sch->sessions, *nx; x != NULL; x = nx) {
        nx = x->next; /* do_sleep moves x to the other list */
        if (!may_sleep(sch, x, false)) {
            continue; /* busy (the engine has its work) or pinned */
        }
        int64_t due = x->used_ns + idle;
        if (due <= now) {
            if (do_sleep(sch, x, true) == RILL_OK) {
                continue;
            }
            x->used_ns = now; /* tried: again after another idle time */
            due = now + idle;
        }
        next = next == 0 || due < next ? due : next;
    }
    return next;
}

void rill__sched_sleep_forget(rill_sched_t *sch, sess_t *x) {
    if (x->asleep && x->tier == RILL_SCHED_TIER_SNAPSHOT) {
        char path[4096];
        sleep_path(sch, x, path, sizeof path);
        unlink(path);
        sch->sleep_disk -= x->sleep_bytes;
    }
    if (x->asleep) {
        unlink_from(&sch->sleeping, x);
    }
    rill_free(x->log_path);
    rill_free(x->base_path);
    x->log_path = x->base_path = NULL;
}

void rill__sched_sleep_cmd(rill_sched_t *sch, cmd_t *c) {
    sess_t *x = rill__sched_find_any(sch, c->u.sleep.sid);
    if (x == NULL) {
        c->err = RILL_ENOTFOUND;
        rill__sched_msg(c, "no session %llu", (unsigned long long)c->u.sleep.sid);
        return;
    }
    if (c->kind == CMD_PIN) {
        if (c->u.sleep.pin && x->asleep) {
            rill_err_t err = RILL_OK;
            if (rill__sched_use(sch, c, x->id, &err) == NULL) {
                c->err = err;
                return;
            }
        }
        x->pinned = c->u.sleep.pin;
        return;
    }
    if (x->asleep) {
        return;
    }
    if (sch->sleep_dir[0] == '\0') {
        c->err = RILL_EUNSUPPORTED;
        rill__sched_msg(c, "sessions do not sleep (no sleep_dir)");
        return;
    }
    if (!may_sleep(sch, x, true)) {
        c->err = RILL_EBUSY;
        rill__sched_msg(c, "session %llu is %s", (unsigned long long)x->id,
                        x->pinned ? "pinned awake" : "busy (open requests or a recognizer)");
        return;
    }
    c->err = do_sleep(sch, x, false);
    if (c->err != RILL_OK) {
        rill__sched_msg(c, "%s", rill_last_error(c->err));
    }
}
