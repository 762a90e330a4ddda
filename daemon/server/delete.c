/* SPDX-License-Identifier: MIT */
/*
 * delete — the DELETE request (`ckptctl delete JOB [STEP]`): remove a step,
 * or a whole job, from the tiers this node manages (see delete.h).
 *
 * Every check is made before anything is removed, so a refused request
 * changes nothing.  Removal is a rename into the store's trash (one per
 * copy: the replica areas' first, then the local tier's; for a whole job
 * one rename of the job's directory) and the catalog rows; the files are
 * unlinked on the worker pool afterwards.  A rename is atomic, so a crash
 * at any point leaves each copy whole or gone, never a half-deleted step
 * that LATEST or a restore could name: the reconcile at the next start
 * indexes what is still there and empties the trash.
 *
 * On the coordinator with an object store, the step's objects go too
 * (flush_delete_step, COMMIT first).  That part outlives the request, so
 * it is recorded first: a tombstone <state>/deleting/<step>.<job>, synced,
 * before any copy moves, removed once the store's objects are gone.  At
 * start delete_resume() finishes every tombstone left by a crash: the
 * copies still here go, the store's objects go, then the tombstone.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/conn.h"
#include "server/delete.h"
#include "server/server.h"
#include "server/step.h"
#include "util/cleanup.h"
#include "util/errbuf.h"
#include "util/log.h"

struct delete_list {
        uint64_t *steps;
        size_t n, cap;
};

static int delete_collect(void *userdata, const char *job, uint64_t step, uint8_t state) {
        struct delete_list *l = userdata;
        (void)job;
        (void)state;
        if (l->n == l->cap) {
                size_t cap = l->cap ? 2 * l->cap : 32;
                uint64_t *n = realloc(l->steps, cap * sizeof(*n));
                if (!n)
                        return -ENOMEM;
                l->steps = n;
                l->cap = cap;
        }
        l->steps[l->n++] = step;
        return 0;
}

/* Why step may not go now (error set, message in why), or 0.  The
 * newest committed step and a pinned one go only with force; one that
 * something works on never does. */
static int delete_refusal(struct server *srv, const char *job, uint64_t step, bool force,
                          bool has_latest, uint64_t latest, char *why, size_t n) {
        if (step_in_use(srv, job, step))
                return errbuf_fail(-EBUSY, why, n, "step %" PRIu64 " of job %s is being saved "
                                   "or committed, or a client waits on it: try again once it is "
                                   "done", step, job);
        if (srv->flusher && flush_busy(srv->flusher, job, step))
                return errbuf_fail(-EBUSY, why, n, "step %" PRIu64 " of job %s is being "
                                   "uploaded to the object store: try again once the upload is "
                                   "done (ckptctl show %s %" PRIu64 ")", step, job, job, step);
        if (force)
                return 0;
        if (has_latest && step == latest)
                return errbuf_fail(-EPERM, why, n, "step %" PRIu64 " is job %s's newest "
                                   "committed step: a restart would restore it; --force deletes "
                                   "it anyway", step, job);
        if (catalog_pinned(srv->catalog, job, step) == 1)
                return errbuf_fail(-EPERM, why, n, "step %" PRIu64 " of job %s is pinned: "
                                   "ckptctl unpin %s %" PRIu64 " first, or --force deletes it "
                                   "anyway", step, job, job, step);
        return 0;
}

/* The copies this node holds of (job, step) in its replica areas. */
static void delete_from_areas(struct server *srv, const char *job, uint64_t step) {
        size_t n = 0;
        const struct replica_area *areas = srv->peers ? peers_areas(srv->peers, &n) : NULL;

        for (size_t i = 0; i < n; i++) {
                struct ckpt_ckpt_entry e;
                if (catalog_ckpt_get(areas[i].catalog, job, step, &e) < 0)
                        continue;
                if (store_step_delete(areas[i].store, job, step) == 0) {
                        /* (void): the files are gone; a row a fault left behind (catalog.c
                         * logs it) is forgotten by reconcile at the next start */
                        (void)catalog_ckpt_delete(areas[i].catalog, job, step);
                        log_info("job %s step %" PRIu64 ": replica of node %u's ranks deleted",
                                 job, step, areas[i].src);
                }
        }
}

#define DELETING_DIR "deleting"

/* Does this node remove a deleted step's objects from the store? */
static bool delete_in_store(const struct server *srv) {
        return srv->flusher && flush_runs_retention(srv->flusher) && srv->opts.state_dir;
}

static void tombstone_path(char *buf, size_t n, const struct server *srv, const char *job,
                           uint64_t step) {
        snprintf(buf, n, "%s/" DELETING_DIR "/%020" PRIu64 ".%s", srv->opts.state_dir, step, job);
}

/* Record, on stable storage, that (job, step) is being deleted from the
 * store.  0 or -errno (logged). */
static int tombstone_write(const struct server *srv, const char *job, uint64_t step) {
        char path[4096], dir[4096];

        snprintf(dir, sizeof(dir), "%s/" DELETING_DIR, srv->opts.state_dir);
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                goto fail;
        tombstone_path(path, sizeof(path), srv, job, step);
        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
                goto fail;
        int r = fsync(fd);
        close(fd);
        if (r < 0)
                goto fail;
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                goto fail;
        r = fsync(fd);
        close(fd);
        if (r < 0)
                goto fail;
        return 0;
fail:
        r = -errno;
        log_error("delete: job %s step %" PRIu64 ": cannot record the delete in %s: %s", job,
                  step, dir, strerror(-r));
        return r;
}

/* What a store delete's completion needs: the tombstone's path (the
 * server may be gone by then, at shutdown). */
struct store_delete {
        char path[4096];
};

static void store_deleted(void *userdata, const char *job, uint64_t step, int error) {
        struct store_delete *sd = userdata;
        if (error == 0) {
                if (unlink(sd->path) < 0 && errno != ENOENT)
                        log_warn("delete: %s: %s", sd->path, strerror(errno));
        } else if (error != -ECANCELED) {
                log_warn("delete: job %s step %" PRIu64 ": objects left in the store (%s); "
                         "the next start tries again", job, step, strerror(-error));
        }
        free(sd);
}

/* Start removing (job, step)'s objects from the store; its tombstone goes
 * when they are gone. */
static void delete_start_in_store(struct server *srv, const char *job, uint64_t step) {
        struct store_delete *sd = calloc(1, sizeof(*sd));
        if (!sd)
                return; /* the tombstone stays: the next start does it */
        tombstone_path(sd->path, sizeof(sd->path), srv, job, step);
        if (flush_delete_step(srv->flusher, job, step, store_deleted, sd) < 0)
                free(sd);
}

void delete_resume(struct server *srv) {
        char dir[4096];

        if (!srv->opts.state_dir)
                return;
        snprintf(dir, sizeof(dir), "%s/" DELETING_DIR, srv->opts.state_dir);
        DIR *d = opendir(dir);
        if (!d)
                return;
        struct dirent *e;
        while ((e = readdir(d))) {
                char *end;
                unsigned long long step = strtoull(e->d_name, &end, 10);
                const char *job = end + 1;
                if (end - e->d_name != 20 || *end != '.' ||
                    ckpt_name_validate(job, strlen(job)) < 0)
                        continue;
                log_info("delete: job %s step %llu: finishing a delete a restart interrupted",
                         job, step);
                delete_from_areas(srv, job, step);
                if (store_step_delete(srv->store, job, step) == 0)
                        /* (void): the files are in the trash; a row a fault left
                         * behind (catalog.c logs it) goes at the next reconcile */
                        (void)catalog_ckpt_delete(srv->catalog, job, step);
                if (delete_in_store(srv)) {
                        delete_start_in_store(srv, job, step);
                } else {
                        char path[4096];
                        tombstone_path(path, sizeof(path), srv, job, step);
                        (void)unlink(path); /* no store here any more: nothing left to do */
                }
        }
        closedir(d);
}

void delete_handle(struct conn *c, const struct ckpt_req_delete *req) {
        struct server *srv = c->srv;
        const char *job = req->job.str;
        struct delete_list l = { 0 };
        uint64_t latest = 0, bytes = 0;
        char why[CKPT_ERRMSG_MAX + 1];
        uint32_t owner = 0;
        int r;

        r = catalog_job_uid(srv->catalog, job, &owner);
        if (r == -ENOENT) {
                conn_error(c, r, "no job named '%s' on this node (ckptctl list shows the jobs)",
                           job);
                return;
        }
        if (r < 0) {
                conn_error(c, r, "cannot look up job '%s': catalog error", job);
                return;
        }
        /* its owner or root: deleting is not something another user of
         * the node may do to a job's checkpoints */
        if (c->uid != 0 && owner != (uint32_t)c->uid) {
                conn_error(c, -EACCES, "job '%s' belongs to uid %u: only its owner or root may "
                                       "delete its checkpoints", job, owner);
                return;
        }
        if (req->whole_job) {
                r = catalog_ckpt_foreach(srv->catalog, job, delete_collect, &l);
                if (r < 0) {
                        free(l.steps);
                        conn_error(c, r, "cannot list the steps of '%s': catalog error", job);
                        return;
                }
        } else {
                struct ckpt_ckpt_entry e;
                r = catalog_ckpt_get(srv->catalog, job, req->step, &e);
                if (r == -ENOENT) {
                        conn_error(c, r, "job '%s' has no step %" PRIu64 " on this node "
                                         "(ckptctl list %s shows its steps)", job, req->step,
                                   job);
                        return;
                }
                if (r < 0 || delete_collect(&l, job, req->step, e.state) < 0) {
                        conn_error(c, r < 0 ? r : -ENOMEM, "cannot look up step %" PRIu64
                                                           " of '%s'", req->step, job);
                        return;
                }
        }
        _cleanup_free_ uint64_t *steps = l.steps;
        bool has_latest = catalog_latest_committed(srv->catalog, job, &latest, NULL) == 0;

        /* every step is checked before any goes: a refusal changes nothing */
        for (size_t i = 0; i < l.n; i++) {
                r = delete_refusal(srv, job, steps[i], req->force, has_latest, latest, why,
                                   sizeof(why));
                if (r < 0) {
                        if (req->whole_job && r == -EPERM)
                                conn_error(c, r, "cannot delete job %s: %s", job, why);
                        else
                                conn_error(c, r, "%s", why);
                        return;
                }
        }
        bool in_store = delete_in_store(srv);
        for (size_t i = 0; i < l.n; i++) {
                /* before any copy moves: a crash from here on is finished at
                 * the next start */
                if (in_store && (r = tombstone_write(srv, job, steps[i])) < 0) {
                        conn_error(c, r, "cannot record the delete of step %" PRIu64 " of job "
                                         "%s: %s (see the daemon's log)", steps[i], job,
                                   strerror(-r));
                        return;
                }
        }
        for (size_t i = 0; i < l.n; i++) {
                struct ckpt_ckpt_entry e;
                if (catalog_ckpt_get(srv->catalog, job, steps[i], &e) == 0)
                        bytes += e.bytes;
                struct step_state *st = step_find(srv, job, steps[i]);
                if (st)
                        step_state_free(st);
                if (srv->memtier)
                        memtier_drop_step(srv->memtier, MEMTIER_OWN, job, steps[i]);
                /* the replicas first: a crash between the two leaves the
                 * local copy, the one this node restores from, as it was */
                delete_from_areas(srv, job, steps[i]);
                if (!req->whole_job) {
                        r = store_step_delete(srv->store, job, steps[i]);
                        if (r < 0) {
                                conn_error(c, r, "cannot delete step %" PRIu64 " of job %s: %s "
                                                 "(see the daemon's log)", steps[i], job,
                                           strerror(-r));
                                return;
                        }
                }
                /* (void): the files are in the trash; a row a fault left behind
                 * (catalog.c logs it) is forgotten by reconcile at the next start */
                (void)catalog_ckpt_delete(srv->catalog, job, steps[i]);
                if (srv->peers)
                        peers_step_removed(srv->peers, job, steps[i]);
        }
        if (req->whole_job) {
                r = store_job_delete(srv->store, job);
                if (r < 0) {
                        conn_error(c, r, "cannot delete job %s: %s (see the daemon's log)", job,
                                   strerror(-r));
                        return;
                }
                /* (void): as above; a job row left behind (logged) only lists the
                 * job with no steps */
                (void)catalog_job_delete(srv->catalog, job);
                log_info("job %s: deleted by uid %u (%zu steps, %" PRIu64 " bytes%s)", job, c->uid,
                         l.n, bytes, req->force ? ", forced" : "");
        } else {
                log_info("job %s step %" PRIu64 ": deleted by uid %u (%" PRIu64 " bytes%s)", job,
                         req->step, c->uid, bytes, req->force ? ", forced" : "");
        }
        if (in_store)
                for (size_t i = 0; i < l.n; i++)
                        delete_start_in_store(srv, job, steps[i]);
        struct ckpt_reply rep = { 0 };
        rep.del.steps = (uint32_t)l.n;
        rep.del.bytes = bytes;
        conn_reply(c, &rep, -1);
}
