/* SPDX-License-Identifier: MIT */
/*
 * neighbour_restore — LIST_REQ / GET_RANK against the targets, and the
 * answers to them (see neighbour_restore.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer/neighbour_restore.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/msgid.h"

/* One rank to pull from a target. */
struct rget {
        struct list link;
        struct restore_job *rj;
        size_t tidx;               /* index of the target it is queued on */
        uint32_t stream;           /* while asked */
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t rank, world_size;
        /* a copy sent before failed its CRC32C (what the restore reports
         * if no other target has a good one); "" none */
        char bad_copy[PEER_ERRMSG_MAX + 1];
};

struct restore_job {
        struct list link;
        struct neighbour_restore *nr;
        char job[CKPT_NAME_MAX + 1];      /* "" all */
        uint64_t step;                    /* CKPT_STEP_LATEST: all missing */
        uint32_t lists_pending;
        uint32_t gets_pending;
        uint32_t ranks_done;
        uint32_t present;                 /* listed ranks already here */
        bool single;                      /* one rank, asked of target after target */
        bool replacing;                   /* a corrupt copy here (heal) */
        struct replica_area *into;        /* where it lands; NULL: the local tier */
        int error;
        char msg[PEER_ERRMSG_MAX + 1];
        struct rkeys claimed;             /* already asked for somewhere */
        restore_done_fn *done;
        void *userdata;
};

static void restore_job_check(struct restore_job *rj);

void neighbour_restore_init(struct neighbour_restore *nr) {
        list_init(&nr->restores);
        nr->startup_rj = NULL;
}

void neighbour_restore_target_init(struct neighbour_restore *nr, size_t slot, struct dialer *d) {
        struct restore_target *t = &nr->targets[slot];
        t->d = d;
        list_init(&t->gets);
        list_init(&t->gets_active);
}

void neighbour_restore_clear(struct neighbour_restore *nr) {
        for (size_t i = 0; i < nr->ntargets; i++) {
                struct restore_target *t = &nr->targets[i];
                while (!list_empty(&t->gets)) {
                        struct rget *g = list_first_entry(&t->gets, struct rget, link);
                        list_unlink(&g->link);
                        free(g);
                }
                while (!list_empty(&t->gets_active)) {
                        struct rget *g = list_first_entry(&t->gets_active, struct rget, link);
                        list_unlink(&g->link);
                        free(g);
                }
                t->ngets_active = 0;
                t->rj_listing = NULL;
                free(t->held.v);
                t->held.v = NULL;
        }
}

void neighbour_restore_drop_jobs(struct neighbour_restore *nr) {
        struct list *pos, *tmp;

        list_for_each_safe(pos, tmp, &nr->restores) {
                struct restore_job *rj = list_entry(pos, struct restore_job, link);
                list_unlink(&rj->link);
                free(rj->claimed.v);
                free(rj);
        }
}

/* ---- asking ------------------------------------------------------------------------------ */

/* The rank asked of t on stream, or NULL. */
static struct rget *target_get(struct restore_target *t, uint32_t stream) {
        struct list *pos;
        if (!t)
                return NULL;
        list_for_each(pos, &t->gets_active) {
                struct rget *g = list_entry(pos, struct rget, link);
                if (g->stream == stream)
                        return g;
        }
        return NULL;
}

static struct restore_target *target_of(struct neighbour_restore *nr, const struct plink *l) {
        return l->dialer ? &nr->targets[l->dialer->slot] : NULL;
}

/* Queue g on the next connected target after the one it was on: true if
 * there is one. */
static bool rget_next_target(struct rget *g) {
        struct neighbour_restore *nr = g->rj->nr;
        for (size_t i = g->tidx + 1; i < nr->ntargets; i++) {
                struct restore_target *t = &nr->targets[i];
                if (dialer_up(t->d)) {
                        g->tidx = i;
                        list_add_tail(&t->gets, &g->link);
                        nr->pump(nr->owner, i);
                        return true;
                }
        }
        return false;
}

bool neighbour_restore_pump(struct neighbour_restore *nr, size_t slot, struct plink *l) {
        struct restore_target *t = &nr->targets[slot];

        /* restore: a node with missing steps wants them back; the answers
         * arriving or being finished here stay within the window */
        while (!list_empty(&t->gets) && t->ngets_active < TRANSFER_WINDOW &&
               l->nin < TRANSFER_WINDOW) {
                struct rget *g = list_first_entry(&t->gets, struct rget, link);
                list_unlink(&g->link);
                list_add_tail(&t->gets_active, &g->link);
                t->ngets_active++;
                struct peer_msg m = { .hdr.type = PEER_MSG_GET_RANK, .hdr.stream = ++l->next_stream };
                g->stream = m.hdr.stream;
                ckpt_name_set(&m.get_rank.job, g->job);
                m.get_rank.step = g->step;
                m.get_rank.rank = g->rank;
                link_send(l, &m);
                if (t->d->l != l || l->state != L_READY)
                        return false; /* the send failed and closed the link */
        }
        return true;
}

int neighbour_restore_fetch_rank(struct neighbour_restore *nr, const char *job, uint64_t step,
                                 uint32_t rank, bool replacing, struct replica_area *into,
                                 restore_done_fn *done, void *userdata) {
        struct restore_job *rj = calloc(1, sizeof(*rj));
        struct rget *g = calloc(1, sizeof(*g));
        if (!rj || !g) {
                free(rj);
                free(g);
                return -ENOMEM;
        }
        rj->nr = nr;
        rj->single = true;
        rj->into = into;
        rj->replacing = replacing;
        snprintf(rj->job, sizeof(rj->job), "%s", job);
        rj->step = step;
        rj->done = done;
        rj->userdata = userdata;
        g->rj = rj;
        snprintf(g->job, sizeof(g->job), "%s", job);
        g->step = step;
        g->rank = rank;
        list_init(&g->link);
        /* tidx is unsigned: start "before" target 0 */
        g->tidx = (size_t)-1;
        if (!rget_next_target(g)) {
                free(g);
                free(rj);
                return -EHOSTUNREACH;
        }
        list_init(&rj->link);
        list_add_tail(&nr->restores, &rj->link);
        rj->gets_pending = 1;
        return 0;
}

static void restore_job_check(struct restore_job *rj) {
        struct neighbour_restore *nr = rj->nr;
        if (rj->lists_pending || rj->gets_pending)
                return;
        list_unlink(&rj->link);
        int error = rj->error;
        if (!error && rj->ranks_done == 0 && rj->present == 0 && rj->step != CKPT_STEP_LATEST) {
                error = -ENOENT;
                snprintf(rj->msg, sizeof(rj->msg), "no neighbour holds step %" PRIu64
                         " of job '%s' for node %u", rj->step, rj->job, nr->self);
        }
        if (rj->ranks_done)
                log_info("peers: restored %u ranks from neighbours", rj->ranks_done);
        /* every step restored gets its local commit record (rx did it per
         * rank); the catalog flush makes it visible */
        /* (void): catalog_flush() logs a failed commit and drops the batch; reconcile
         * re-derives the rows from the manifests at the next start */
        (void)catalog_flush(nr->catalog);
        if (rj->done)
                rj->done(rj->userdata, error, rj->ranks_done, error ? rj->msg : NULL);
        free(rj->claimed.v);
        free(rj);
}

/* An asked-for rank ended (rx.report): landed (error 0) or not.  A copy
 * whose block failed its CRC32C (-EBADMSG) is asked of the next target:
 * another copy may be good (the holder of the bad one has been told). */
static void rank_reported(void *ctx, int error, const char *msg) {
        struct rget *g = ctx;
        struct restore_job *rj = g->rj;

        if (error == -EBADMSG) {
                snprintf(g->bad_copy, sizeof(g->bad_copy), "%s", msg);
                if (rget_next_target(g)) {
                        log_info("peers: job %s step %" PRIu64 " rank %u: asking node %u for "
                                 "another copy (%s)", g->job, g->step, g->rank,
                                 rj->nr->targets[g->tidx].d->node, msg);
                        return;
                }
        }
        free(g);

        if (error && !rj->error) {
                rj->error = error;
                snprintf(rj->msg, sizeof(rj->msg), "%s", msg);
        }
        if (!error)
                rj->ranks_done++;
        rj->gets_pending--;
        restore_job_check(rj);
}

/* true: the rank is this job's to ask for (no earlier listing offered it) */
static bool rj_claim(struct restore_job *rj, const struct peer_list_entry *e) {
        return !rkeys_has(&rj->claimed, e->job.str, e->step, e->rank) &&
               rkeys_add(&rj->claimed, e->job.str, e->step, e->rank) == 0;
}

void neighbour_restore_list_reply(struct neighbour_restore *nr, struct plink *l,
                                  const struct peer_msg *m) {
        struct restore_target *t = target_of(nr, l);
        struct restore_job *rj = t ? t->rj_listing : NULL;

        if (!rj || m->hdr.stream != t->list_stream) {
                link_close(l, -EPROTO, "LIST_REP nobody asked for");
                return;
        }
        for (uint32_t i = 0; i < m->list_rep.count; i++) {
                const struct peer_list_entry *e = &m->list_rep.entries[i];
                if (!e->committed)
                        continue;
                if (t->listing_all && rkeys_add(&t->held, e->job.str, e->step, e->rank) < 0)
                        t->listing_all = false; /* no memory: no re-seeding this time */
                if (rj->job[0] && strcmp(rj->job, e->job.str))
                        continue;
                if (rj->step != CKPT_STEP_LATEST && rj->step != e->step)
                        continue;
                if (catalog_rank_exists(nr->catalog, e->job.str, e->step, e->rank) == 1) {
                        rj->present++;
                        continue;
                }
                /* a step deleted here by retention must not come back:
                 * only steps newer than the newest local committed one, or
                 * the one asked for */
                uint64_t latest;
                uint32_t ws;
                struct ckpt_ckpt_entry ce;
                if (rj->step == CKPT_STEP_LATEST &&
                    catalog_latest_committed(nr->catalog, e->job.str, &latest, &ws) == 0 &&
                    e->step < latest && catalog_ckpt_get(nr->catalog, e->job.str, e->step, &ce) < 0)
                        continue;
                if (!rj_claim(rj, e))
                        continue;
                struct rget *g = calloc(1, sizeof(*g));
                if (!g)
                        continue;
                g->rj = rj;
                snprintf(g->job, sizeof(g->job), "%s", e->job.str);
                g->step = e->step;
                g->rank = e->rank;
                g->world_size = e->world_size;
                list_init(&g->link);
                list_add_tail(&t->gets, &g->link);
                rj->gets_pending++;
        }
        if (!m->list_rep.more) {
                size_t slot = l->dialer->slot;
                t->rj_listing = NULL;
                rj->lists_pending--;
                if (t->listing_all)
                        nr->listed(nr->owner, slot, &t->held);
                nr->pump(nr->owner, slot);
                restore_job_check(rj);
        }
}

static void target_list(struct neighbour_restore *nr, struct restore_target *t,
                        struct restore_job *rj) {
        struct plink *l = t->d->l;
        struct peer_msg m = { .hdr.type = PEER_MSG_LIST_REQ };

        t->list_stream = m.hdr.stream = ++l->next_stream;
        t->held.n = 0;
        t->listing_all = !rj->job[0];
        if (rj->job[0])
                ckpt_name_set(&m.list_req.job, rj->job);
        m.list_req.src_node = nr->self;
        t->rj_listing = rj;
        rj->lists_pending++;
        link_send(l, &m);
}

int neighbour_restore_start(struct neighbour_restore *nr, const char *job, uint64_t step,
                            restore_done_fn *done, void *userdata) {
        struct restore_job *rj = calloc(1, sizeof(*rj));
        if (!rj)
                return -ENOMEM;
        rj->nr = nr;
        snprintf(rj->job, sizeof(rj->job), "%s", job ? job : "");
        rj->step = step;
        rj->done = done;
        rj->userdata = userdata;
        list_init(&rj->link);
        list_add_tail(&nr->restores, &rj->link);
        uint32_t asked = 0;
        for (size_t i = 0; i < nr->ntargets; i++) {
                struct restore_target *t = &nr->targets[i];
                if (dialer_up(t->d) && !t->rj_listing) {
                        target_list(nr, t, rj);
                        asked++;
                }
        }
        if (!asked) {
                rj->error = -EHOSTUNREACH;
                snprintf(rj->msg, sizeof(rj->msg), "no neighbour is connected (targets: %zu)",
                         nr->ntargets);
        }
        restore_job_check(rj);
        return 0;
}

static void startup_restore_done(void *userdata, int error, uint32_t ranks, const char *message) {
        struct neighbour_restore *nr = userdata;
        (void)error;
        (void)ranks;
        (void)message;
        nr->startup_rj = NULL;
}

/* Restore at start: each target, when its link comes up, is asked for
 * what it holds of this node.  Targets that come up while that restore
 * runs join it, so a rank listed by two of them is pulled once (from the
 * first that listed it). */
void neighbour_restore_connected(struct neighbour_restore *nr, size_t slot) {
        struct restore_target *t = &nr->targets[slot];
        if (!nr->restore_on_start || t->rj_listing)
                return;
        struct restore_job *rj = nr->startup_rj;
        if (!rj) {
                rj = calloc(1, sizeof(*rj));
                if (!rj)
                        return;
                rj->nr = nr;
                rj->step = CKPT_STEP_LATEST;
                rj->done = startup_restore_done;
                rj->userdata = nr;
                list_init(&rj->link);
                list_add_tail(&nr->restores, &rj->link);
                nr->startup_rj = rj;
        }
        target_list(nr, t, rj);
}

void neighbour_restore_disconnected(struct neighbour_restore *nr, size_t slot) {
        struct restore_target *t = &nr->targets[slot];
        bool freeing = t->d->env->freeing;

        t->list_sent = false;
        /* asked, not answered: ask again on reconnect */
        while (!list_empty(&t->gets_active)) {
                struct rget *g = list_first_entry(&t->gets_active, struct rget, link);
                list_unlink(&g->link);
                list_add_tail(&t->gets, &g->link);
        }
        t->ngets_active = 0;
        /* A rank a client waits for goes to the next neighbour, or
         * fails (the store may have it): this one may never come
         * back (a lost node).  A node's own restore waits for it. */
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &t->gets) {
                struct rget *g = list_entry(pos, struct rget, link);
                if (!g->rj->single || freeing)
                        continue;
                list_unlink(&g->link);
                if (rget_next_target(g))
                        continue;
                struct restore_job *rj = g->rj;
                if (!rj->error) {
                        rj->error = -EHOSTUNREACH;
                        snprintf(rj->msg, sizeof(rj->msg), "the link to node %u broke and "
                                 "no other neighbour is up", t->d->node);
                }
                free(g);
                rj->gets_pending--;
                restore_job_check(rj);
        }
        if (t->rj_listing) {
                struct restore_job *rj = t->rj_listing;
                t->rj_listing = NULL;
                rj->lists_pending--;
                restore_job_check(rj);
        }
}

bool neighbour_restore_asked(struct neighbour_restore *nr, struct plink *l, uint32_t stream) {
        return target_get(target_of(nr, l), stream) != NULL;
}

struct replica_area *neighbour_restore_into(struct neighbour_restore *nr, struct plink *l,
                                            uint32_t stream, bool *replacing) {
        struct rget *g = target_get(target_of(nr, l), stream);
        *replacing = g && g->rj->replacing;
        return g ? g->rj->into : NULL;
}

void neighbour_restore_rank_end(struct neighbour_restore *nr, struct plink *l, struct rx *rx) {
        struct restore_target *t = target_of(nr, l);
        /* an asked-for rank is all here: from now on its rx reports to
         * the restore, and the ask is answered */
        struct rget *g = rx && rx->local ? target_get(t, rx->in.stream) : NULL;
        if (g) {
                /* g stays with the rx until it reports (rank_reported) */
                rx->report = rank_reported;
                rx->report_ctx = g;
                list_unlink(&g->link);
                list_init(&g->link);
                t->ngets_active--;
        }
}

bool neighbour_restore_error(struct neighbour_restore *nr, struct plink *l,
                             const struct peer_msg *m) {
        struct restore_target *t = target_of(nr, l);
        struct rget *g = m->hdr.stream ? target_get(t, m->hdr.stream) : NULL;
        if (!g)
                return false;
        size_t slot = l->dialer->slot;
        /* that neighbour does not have it: another might */
        list_unlink(&g->link);
        t->ngets_active--;
        log_debug("peers: node %u cannot send job %s step %" PRIu64 " rank %u: %s",
                  l->node, g->job, g->step, g->rank, m->error.message);
        if ((g->rj->single || g->bad_copy[0]) && rget_next_target(g)) {
                nr->pump(nr->owner, slot);
                return true;
        }
        if (g->bad_copy[0] && !g->rj->error) {
                /* no other good copy: the one that was bad is the news */
                g->rj->error = -EIO;
                snprintf(g->rj->msg, sizeof(g->rj->msg), "%s", g->bad_copy);
        }
        g->rj->gets_pending--;
        restore_job_check(g->rj);
        free(g);
        nr->pump(nr->owner, slot);
        return true;
}

/* A copy recorded corrupt that a transfer replaced — replication sent the
 * rank again (the target's listing left the unrepairable copy out), or a
 * restore pulled it — is good again: every block was checked against the
 * sender's MANIFEST.  (A heal's own landing is recorded by heal.c after
 * its full check.) */
static void landed_over_fault(struct neighbour_restore *nr, const struct rx *rx) {
        struct catalog_copy_fault f;
        uint32_t area = rx->store == nr->store ? CATALOG_COPY_LOCAL : rx->src;

        if (rx->replacing ||
            catalog_copy_fault_get(nr->catalog, rx->m->job, rx->m->step, rx->m->rank, area,
                                   &f) < 0 ||
            f.state == CATALOG_FAULT_REPAIRED)
                return;
        char source[64];
        snprintf(source, sizeof(source), "node %u (%s)", rx->from,
                 rx->local ? "restored" : "replicated again");
        /* (void): a row lost to a catalog error is logged there; the copy
         * on disk is good either way */
        (void)catalog_copy_fault_set(nr->catalog, rx->m->job, rx->m->step, rx->m->rank, area,
                                     CATALOG_FAULT_REPAIRED, f.detail, source);
        log_event(LOG_NOTICE, LOG_CTX(.id = LOG_ID_HEAL, .job = rx->m->job, LOG_STEP(rx->m->step),
                                      LOG_RANK(rx->m->rank)),
                  "peers: job %s step %" PRIu64 " rank %u: the copy recorded corrupt (%s) was "
                   "replaced by one from %s", rx->m->job, rx->m->step, rx->m->rank, f.detail,
                   source);
}

void neighbour_restore_landed(struct neighbour_restore *nr, const struct rx *rx) {
        landed_over_fault(nr, rx);
        /* a corrupt copy replaced (heal) changes nothing of the step's
         * replication or object-store state */
        if (!rx->local || rx->replacing)
                return;
        /* the neighbour it came from holds it: nothing to
         * send back there */
        /* (void): a replication state a fault lost (catalog.c logs it) leaves
         * the step pending, so it is offered to the target again at the next
         * connect */
        (void)catalog_repl_set(rx->catalog, rx->m->job, rx->m->step, rx->from,
                               CATALOG_REPL_DONE, NULL);
        /* and the object store has it already (or its node will flush
         * it): the object-store tier, which owns that state, is told */
        if (nr->restored)
                nr->restored(nr->restored_userdata, rx->m->job, rx->m->step);
}

/* ---- answering: LIST_REQ, GET_RANK ------------------------------------------------------- */

struct list_fill {
        struct peer_msg *m;
        struct plink *l;
        struct catalog *catalog;
        struct catalog *faults;   /* the node's own: copies recorded unrepairable */
        int error;
};

static int list_fill_cb(void *userdata, const char *job, uint64_t step, uint8_t state) {
        struct list_fill *lf = userdata;
        uint32_t ranks[256];
        size_t n = 0;
        struct ckpt_ckpt_entry e;

        if (state != CKPT_STATE_COMMITTED || catalog_ckpt_get(lf->catalog, job, step, &e) < 0 ||
            catalog_ranks(lf->catalog, job, step, ranks, 256, &n) < 0)
                return 0;
        for (size_t i = 0; i < MIN(n, (size_t)256); i++) {
                struct peer_list_rep *r = &lf->m->list_rep;
                /* a copy with no good one left is not offered (heal.c) */
                if (catalog_copy_unrepairable(lf->faults, job, step, ranks[i]) == 1)
                        continue;
                /* a page is full at PEER_LIST_PAGE entries or when one more
                 * long name would not fit the message bound */
                if (r->count == PEER_LIST_PAGE ||
                    peer_list_rep_size(r, r->count) + 19 + strlen(job) > PEER_MSG_MAX) {
                        r->more = 1;
                        link_send(lf->l, lf->m);
                        r->count = 0;
                }
                struct peer_list_entry *le = &r->entries[r->count++];
                ckpt_name_set(&le->job, job);
                le->step = step;
                le->rank = ranks[i];
                le->world_size = e.world_size;
                le->committed = 1;
        }
        return 0;
}

void neighbour_restore_answer_list(struct neighbour_restore *nr, struct plink *l,
                                   const struct peer_msg *req) {
        struct replica_area *a = replica_area_for(nr->areas, nr->nareas, req->list_req.src_node);
        struct peer_msg *m = calloc(1, sizeof(*m));

        if (!m) {
                link_send_error(l, req->hdr.stream, -ENOMEM, "out of memory");
                return;
        }
        m->hdr.type = PEER_MSG_LIST_REP;
        m->hdr.stream = req->hdr.stream;
        if (a) {
                struct list_fill lf = { .m = m, .l = l, .catalog = a->catalog,
                                        .faults = nr->catalog };
                /* list_fill_cb never stops the walk: a non-zero result is
                 * the catalog's, and the neighbour gets a short list */
                int r = catalog_ckpt_foreach(a->catalog,
                                             req->list_req.job.len ? req->list_req.job.str : NULL,
                                             list_fill_cb, &lf);
                if (r < 0)
                        log_warn("peers: node %u's replica list for %s may be incomplete: %s",
                                 req->list_req.src_node, l->addr, strerror(-r));
        }
        m->list_rep.more = 0;
        link_send(l, m);
        free(m);
}

void neighbour_restore_answer_get(struct neighbour_restore *nr, struct plink *l,
                                  const struct peer_msg *req) {
        const struct peer_get_rank *g = &req->get_rank;
        struct store *store = NULL;
        uint32_t src = nr->self;

        if (l->nout >= PEER_STREAMS_MAX || link_out_find(l, req->hdr.stream)) {
                link_send_error(l, req->hdr.stream, -EBUSY, "%u transfers are running on this "
                                "connection (at most %u), or stream %u is in use", l->nout,
                                PEER_STREAMS_MAX, req->hdr.stream);
                return;
        }
        if (catalog_rank_exists(nr->catalog, g->job.str, g->step, g->rank) == 1) {
                store = nr->store;
        } else {
                struct replica_area *a = replica_area_holding(nr->areas, nr->nareas, g->job.str,
                                                              g->step, g->rank);
                if (a) {
                        store = a->store;
                        src = a->src;
                }
        }
        if (!store) {
                link_send_error(l, req->hdr.stream, -ENOENT, "node %u holds no rank %u of job %s "
                                "step %" PRIu64, nr->self, g->rank, g->job.str, g->step);
                return;
        }
        /* a copy found corrupt with no good one to repair it from is not
         * offered (server/heal.c records it) */
        if (catalog_copy_unrepairable(nr->catalog, g->job.str, g->step, g->rank) == 1) {
                link_send_error(l, req->hdr.stream, -EIO, "node %u's copy of rank %u of job %s "
                                "step %" PRIu64 " is corrupt and could not be repaired",
                                nr->self, g->rank, g->job.str, g->step);
                return;
        }
        int err = 0;
        /* the tier keys this node's own ranks MEMTIER_OWN, a replica by its node */
        const struct transfer_source from = { store, nr->memory,
                                              store == nr->store ? MEMTIER_OWN : src };
        struct tx *tx = transfer_tx_new(l, &from, g->job.str, g->step, g->rank,
                                        PEER_PURPOSE_RESTORE, src, req->hdr.stream, &err);
        if (!tx) {
                link_send_error(l, req->hdr.stream, err, "cannot read rank %u: %s", g->rank,
                                strerror(-err));
                return;
        }
        link_out_add(l, &tx->out);
        link_flush(l);
}
