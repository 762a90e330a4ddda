/* SPDX-License-Identifier: MIT */
/*
 * heal — replacing a corrupt copy of a rank with a good one (heal.h).
 *
 * One struct heal per copy being replaced, on server.heals; callers that
 * ask while it runs join its waiters.  The heal moves through its sources
 * in order (neighbours, then the object store), each
 * landing the rank through the tiers' own receiving code, then verifies
 * the result in full on a worker.  It answers once, then frees itself.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/heal.h"
#include "server/server.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/msgid.h"

/* How often, and how many times, a heal waiting behind another fetch of
 * the step from the object store looks again (as restore.c's walk). */
#define HEAL_STORE_RETRY_MS 200
#define HEAL_STORE_RETRIES 150

enum heal_stage {
        HEAL_START,   /* nothing tried yet */
        HEAL_PEERS,   /* asking the neighbours */
        HEAL_STORE,   /* fetching from the object store */
        HEAL_DONE,    /* every source tried */
};

struct heal_waiter {
        struct list link;
        heal_done_fn *done;
        void *userdata;
};

struct heal {
        struct list link; /* server.heals */
        struct server *srv;
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t rank;
        uint32_t area;             /* CATALOG_COPY_LOCAL, or the replica area's source */
        struct replica_area *ra;   /* NULL: the local tier */
        char copy[64];             /* "the local tier" / "the replica area of node 1" */
        char why[256];
        struct list waiters;       /* struct heal_waiter */
        enum heal_stage stage;     /* the source being tried */
        bool verifying;            /* a worker checks what a source sent */
        bool orphan;               /* the server went away: free when the worker ends */
        char source[64];           /* the source of the copy being verified */
        char tried[1024];          /* "; "-separated: each source and what it said */
        struct loop_timer timer;   /* start, and the object store's retry */
        uint32_t store_retries;
        struct fetch_request fr;
        struct work work;
        struct store *verify_store; /* the worker's: srv may be gone by its end */
        int verify_error;
        char verify_detail[256];
};

static void heal_next(struct heal *h);

static struct heal *heal_find(const struct server *srv, const char *job, uint64_t step,
                              uint32_t rank, uint32_t area) {
        struct list *pos;
        list_for_each(pos, &srv->heals) {
                struct heal *h = list_entry(pos, struct heal, link);
                if (h->step == step && h->rank == rank && h->area == area && !strcmp(h->job, job))
                        return h;
        }
        return NULL;
}

static struct store *heal_store(const struct heal *h) {
        return h->ra ? h->ra->store : h->srv->store;
}

/* Record what a source said. */
__attribute__((format(printf, 2, 3))) static void heal_tried(struct heal *h, const char *fmt,
                                                             ...) {
        size_t used = strlen(h->tried);
        va_list ap;

        if (used && used + 2 < sizeof(h->tried)) {
                memcpy(h->tried + used, "; ", 3);
                used += 2;
        }
        va_start(ap, fmt);
        vsnprintf(h->tried + used, sizeof(h->tried) - used, fmt, ap);
        va_end(ap);
}

/* An answer's text, cut at the protocol's bound (the whole of it is in
 * the log). */
__attribute__((format(printf, 3, 4))) static void heal_text(char *buf, size_t size,
                                                            const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, size, fmt, ap);
        va_end(ap);
}

static void heal_free(struct heal *h) {
        while (!list_empty(&h->waiters)) {
                struct heal_waiter *w = list_first_entry(&h->waiters, struct heal_waiter, link);
                list_unlink(&w->link);
                free(w);
        }
        loop_timer_cancel(&h->timer);
        free(h);
}

/* Answer every waiter (h off server.heals already). */
static void heal_tell(struct heal *h, int error, const char *msg) {
        while (!list_empty(&h->waiters)) {
                struct heal_waiter *w = list_first_entry(&h->waiters, struct heal_waiter, link);
                list_unlink(&w->link);
                w->done(w->userdata, error, msg);
                free(w);
        }
}

/* Answer every waiter and free h. */
static void heal_answer(struct heal *h, int error, const char *msg) {
        list_unlink(&h->link);
        /* (void): catalog_flush() logs a failed commit; the event is in
         * the log either way */
        (void)catalog_flush(h->srv->catalog);
        heal_tell(h, error, msg);
        heal_free(h);
}

static void heal_repaired(struct heal *h) {
        struct server *srv = h->srv;
        char msg[CKPT_ERRMSG_MAX];

        /* (void): a fault row lost to a catalog error is logged there; the
         * copy on disk is good either way */
        (void)catalog_copy_fault_set(srv->catalog, h->job, h->step, h->rank, h->area,
                                     CATALOG_FAULT_REPAIRED, h->why, h->source);
        log_event(LOG_NOTICE, LOG_CTX(.id = LOG_ID_HEAL, .job = h->job, LOG_STEP(h->step),
                                      LOG_RANK(h->rank)),
                  "node %u: job %s step %" PRIu64 " rank %u: the copy in %s was corrupt (%s); "
                   "repaired from %s", srv->opts.node_index, h->job, h->step, h->rank, h->copy,
                   h->why, h->source);
        heal_text(msg, sizeof(msg), "node %u's copy in %s was corrupt (%s) and has been "
                 "repaired from %s", srv->opts.node_index, h->copy, h->why, h->source);
        heal_answer(h, 0, msg);
}

static void heal_unrepaired(struct heal *h) {
        struct server *srv = h->srv;
        char msg[CKPT_ERRMSG_MAX];

        /* (void): a row lost to a catalog error is logged there; the log
         * line below and the client's error say it all the same */
        (void)catalog_copy_fault_set(srv->catalog, h->job, h->step, h->rank, h->area,
                                     CATALOG_FAULT_UNREPAIRABLE, h->why, h->tried);
        server_job_error(srv, h->job, "node %u: job %s step %" PRIu64 " rank %u: the copy in %s "
                         "is corrupt (%s) and no good copy was found (%s): the step is no "
                         "longer offered for this rank", srv->opts.node_index, h->job, h->step,
                         h->rank, h->copy, h->why, h->tried);
        heal_text(msg, sizeof(msg), "no good copy of rank %u of step %" PRIu64 " of job '%s' "
                 "exists: node %u's copy in %s: %s; %s", h->rank, h->step, h->job,
                 srv->opts.node_index, h->copy, h->why, h->tried);
        heal_answer(h, -EIO, msg);
}

/* ---- verifying what a source sent ---------------------------------------------------- */

static void heal_verify_run(struct work *w) {
        struct heal *h = container_of(w, struct heal, work);
        h->verify_error = store_rank_verify(h->verify_store, h->job, h->step, h->rank, 0,
                                            h->verify_detail, sizeof(h->verify_detail), NULL,
                                            NULL, NULL, NULL);
}

static void heal_verify_done(struct work *w) {
        struct heal *h = container_of(w, struct heal, work);

        h->verifying = false;
        if (h->orphan) {
                heal_free(h);
                return;
        }
        if (h->verify_error == 0) {
                heal_repaired(h);
                return;
        }
        heal_tried(h, "%s sent a copy that fails verification (%s)", h->source,
                   h->verify_error == -EIO ? h->verify_detail : strerror(-h->verify_error));
        heal_next(h);
}

/* A source landed the rank in place of the bad copy: check it all. */
static void heal_verify(struct heal *h, const char *source) {
        snprintf(h->source, sizeof(h->source), "%s", source);
        h->verifying = true;
        h->verify_store = heal_store(h);
        h->work.run = heal_verify_run;
        h->work.done = heal_verify_done;
        worker_pool_submit(h->srv->workers, &h->work);
}

/* ---- the sources --------------------------------------------------------------------- */

static void heal_peers_done(void *userdata, int error, uint32_t ranks, const char *message) {
        struct heal *h = userdata;
        (void)ranks;

        if (error == 0) {
                heal_verify(h, "a neighbour");
                return;
        }
        heal_tried(h, "the neighbours: %s", message ? message : strerror(-error));
        heal_next(h);
}

static void heal_store_done(struct fetch_request *fr, int error, const char *message) {
        struct heal *h = container_of(fr, struct heal, fr);

        if (error == -ECANCELED) {
                /* the daemon is stopping (fetch_free): the copy stays
                 * recorded bad, not unrepairable */
                heal_answer(h, error, "ckptd is shutting down");
                return;
        }
        if (error == 0) {
                heal_verify(h, "the object store");
                return;
        }
        heal_tried(h, "the object store: %s", message ? message : strerror(-error));
        heal_next(h);
}

static void heal_timer(struct loop_timer *t) {
        heal_next(container_of(t, struct heal, timer));
}

/* Try the object store; true: its answer comes later. */
static bool heal_try_store(struct heal *h) {
        struct server *srv = h->srv;

        if (!srv->fetcher) {
                heal_tried(h, "the object store: none configured");
                return false;
        }
        h->fr = (struct fetch_request){
                .step = h->step,
                .which = CKPT_FETCH_RANK,
                .index = h->rank,
                .uid = 0,
                .replace = true,
                /* a replica area's copy lands in that area: the objects
                 * are the ones its source node flushed, which COMMIT's
                 * node manifests lead to (object-layout.md) */
                .into_store = h->ra ? h->ra->store : NULL,
                .into_catalog = h->ra ? h->ra->catalog : NULL,
                .done = heal_store_done,
        };
        snprintf(h->fr.job, sizeof(h->fr.job), "%s", h->job);
        int r = fetch_start(srv->fetcher, &h->fr);
        if (r == -EBUSY && h->store_retries++ < HEAL_STORE_RETRIES) {
                /* another request restores this step from the store: wait
                 * for it, then fetch (with replace) ourselves */
                h->stage = HEAL_PEERS; /* heal_next() comes back here */
                loop_timer_start(srv->loop, &h->timer, HEAL_STORE_RETRY_MS, heal_timer);
                return true;
        }
        if (r < 0) {
                heal_tried(h, "the object store: %s", strerror(-r));
                return false;
        }
        return true;
}

/* Try the source after the one just tried (h->stage), until one answers
 * later or none is left. */
static void heal_next(struct heal *h) {
        struct server *srv = h->srv;

        if (h->stage == HEAL_START) {
                h->stage = HEAL_PEERS;
                if (srv->peers) {
                        int r = peers_fetch_rank_into(srv->peers, h->ra, h->job, h->step, h->rank,
                                                      heal_peers_done, h);
                        if (r == 0)
                                return;
                        heal_tried(h, "the neighbours: %s",
                                   r == -EHOSTUNREACH ? "no neighbour is up" : strerror(-r));
                } else {
                        heal_tried(h, "the neighbours: replication is off");
                }
        }
        if (h->stage == HEAL_PEERS) {
                h->stage = HEAL_STORE;
                if (heal_try_store(h))
                        return;
        }
        h->stage = HEAL_DONE;
        heal_unrepaired(h);
}

/* ---- the API ------------------------------------------------------------------------- */

int heal_rank(struct server *srv, const char *job, uint64_t step, uint32_t rank, const char *why,
              heal_done_fn *done, void *userdata) {
        uint32_t area = CATALOG_COPY_LOCAL;

        if (catalog_rank_exists(srv->catalog, job, step, rank) != 1) {
                struct replica_area *ra =
                        srv->peers ? peers_area_of(srv->peers, job, step, rank) : NULL;
                if (!ra)
                        return -ENOENT;
                area = ra->src;
        }
        return heal_copy(srv, job, step, rank, area, why, done, userdata);
}

int heal_copy(struct server *srv, const char *job, uint64_t step, uint32_t rank, uint32_t area,
              const char *why, heal_done_fn *done, void *userdata) {
        struct replica_area *ra = NULL;

        if (area == CATALOG_COPY_LOCAL) {
                if (catalog_rank_exists(srv->catalog, job, step, rank) != 1)
                        return -ENOENT;
        } else {
                size_t n;
                const struct replica_area *areas = peers_areas(srv->peers, &n);
                for (size_t i = 0; i < n && !ra; i++)
                        if (areas[i].src == area &&
                            catalog_rank_exists(areas[i].catalog, job, step, rank) == 1)
                                /* peers_areas() hands them out read-only for
                                 * lookups; the heal writes through the
                                 * area's own store, as replication does */
                                ra = (struct replica_area *)&areas[i];
                if (!ra)
                        return -ENOENT;
        }
        struct heal_waiter *w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        w->done = done;
        w->userdata = userdata;
        struct heal *h = heal_find(srv, job, step, rank, area);
        if (h) {
                list_add_tail(&h->waiters, &w->link);
                return 0;
        }
        h = calloc(1, sizeof(*h));
        if (!h) {
                free(w);
                return -ENOMEM;
        }
        *h = (struct heal){ .srv = srv, .step = step, .rank = rank, .area = area, .ra = ra };
        snprintf(h->job, sizeof(h->job), "%s", job);
        if (ra)
                snprintf(h->copy, sizeof(h->copy), "the replica area of node %u", ra->src);
        else
                snprintf(h->copy, sizeof(h->copy), "the local tier");
        snprintf(h->why, sizeof(h->why), "%s", why && *why ? why : "found corrupt");
        list_init(&h->waiters);
        list_add_tail(&h->waiters, &w->link);
        list_init(&h->link);
        list_add_tail(&srv->heals, &h->link);
        /* (void): a row lost to a catalog error is logged there; the
         * repair goes on and records its outcome */
        (void)catalog_copy_fault_set(srv->catalog, job, step, rank, area, CATALOG_FAULT_BAD,
                                     h->why, NULL);
        log_error("node %u: job %s step %" PRIu64 " rank %u: the copy in %s is corrupt (%s); "
                  "repairing it from another copy", srv->opts.node_index, job, step, rank,
                  h->copy, h->why);
        /* done() never runs from inside this call */
        loop_timer_start(srv->loop, &h->timer, 0, heal_timer);
        return 0;
}

bool heal_running(const struct server *srv, const char *job, uint64_t step, uint32_t rank) {
        struct list *pos;
        list_for_each(pos, &srv->heals) {
                struct heal *h = list_entry(pos, struct heal, link);
                if (h->step == step && h->rank == rank && !strcmp(h->job, job))
                        return true;
        }
        return false;
}

void heal_forget(struct server *srv, heal_done_fn *done, void *userdata) {
        struct list *pos, *wpos, *wtmp;
        list_for_each(pos, &srv->heals) {
                struct heal *h = list_entry(pos, struct heal, link);
                list_for_each_safe(wpos, wtmp, &h->waiters) {
                        struct heal_waiter *w = list_entry(wpos, struct heal_waiter, link);
                        if (w->done == done && w->userdata == userdata) {
                                list_unlink(&w->link);
                                free(w);
                        }
                }
        }
}

bool heal_unrepairable(struct server *srv, const char *job, uint64_t step, uint32_t rank) {
        /* a catalog fault is logged there and reads as "not recorded" */
        return catalog_copy_unrepairable(srv->catalog, job, step, rank) == 1;
}

bool heal_step_unrepairable(struct server *srv, const char *job, uint64_t step) {
        return catalog_step_unrepairable(srv->catalog, job, step) == 1;
}

void heal_free_all(struct server *srv) {
        /* By now (daemon_free) the worker pool has run every done() and
         * the fetcher has cancelled its fetches (heal_store_done), and
         * the peers dropped their asks without a call: what is left
         * waits for nothing that will come. */
        while (!list_empty(&srv->heals)) {
                struct heal *h = list_first_entry(&srv->heals, struct heal, link);
                list_unlink(&h->link);
                heal_tell(h, -ECANCELED, "ckptd is shutting down");
                if (h->verifying) {
                        h->orphan = true; /* heal_verify_done frees it */
                        continue;
                }
                heal_free(h);
        }
}
