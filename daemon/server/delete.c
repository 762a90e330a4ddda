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
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        for (size_t i = 0; i < l.n; i++) {
                struct ckpt_ckpt_entry e;
                if (catalog_ckpt_get(srv->catalog, job, steps[i], &e) == 0)
                        bytes += e.bytes;
                struct step_state *st = step_find(srv, job, steps[i]);
                if (st)
                        step_state_free(st);
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
        struct ckpt_reply rep = { 0 };
        rep.del.steps = (uint32_t)l.n;
        rep.del.bytes = bytes;
        conn_reply(c, &rep, -1);
}
