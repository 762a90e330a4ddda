/* SPDX-License-Identifier: MIT */
/*
 * verify — VERIFY: check every copy of what the request names, repair on
 * demand (verify.h).
 *
 * The copies are listed from the catalogs (the node's and each replica
 * area's) when the request arrives, then read one after another on a
 * worker: a verify of a large job never holds more than one worker, and
 * the loop only hands over and collects.  Repairs run side by side
 * afterwards (heal.c coalesces them with any other heal of the copy).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/conn.h"
#include "server/heal.h"
#include "server/server.h"
#include "server/verify.h"
#include "util/cleanup.h"
#include "util/log.h"

/* A copy and what its check found: the reply's entry as it will be sent
 * (e.area: CKPT_COPY_LOCAL or the replica area's source) and the store
 * that holds it. */
struct verify_copy {
        struct ckpt_verify_entry e;
        struct store *store;
};

struct verify_op {
        struct conn *c;         /* NULL: the client left; freed when the work ends */
        struct server *srv;
        struct work work;
        bool working;           /* a copy is on a worker */
        char job[CKPT_NAME_MAX + 1];
        bool repair;
        struct verify_copy *copies;
        size_t n, cap, next;
        uint32_t heals;         /* repairs not yet answered */
};

/* One repair's answer goes to its copy. */
struct verify_heal {
        struct verify_op *op;
        size_t index;
};

_Static_assert(CATALOG_COPY_LOCAL == CKPT_COPY_LOCAL, "one name for the local tier's copy");

static void verify_op_free(struct verify_op *op) {
        free(op->copies);
        free(op);
}

/* ---- which copies ------------------------------------------------------------------- */

struct collect {
        struct verify_op *op;
        const struct ckpt_req_verify *req;
        struct catalog *catalog;
        struct store *store;
        uint32_t area;
        int error;
};

static int collect_step(void *userdata, const char *job, uint64_t step, uint8_t state) {
        struct collect *co = userdata;
        struct verify_op *op = co->op;
        uint32_t ranks[256];
        size_t n = 0;
        (void)state;

        if (co->req->step != CKPT_STEP_LATEST && co->req->step != step)
                return 0;
        int r = catalog_ranks(co->catalog, job, step, ranks, 256, &n);
        if (r < 0 && r != -ENOBUFS) {
                co->error = r;
                return 1;
        }
        _cleanup_free_ uint32_t *all = NULL;
        if (r == -ENOBUFS) {
                /* a step with more ranks here than the quick buffer holds */
                all = calloc(n, sizeof(*all));
                if (!all || catalog_ranks(co->catalog, job, step, all, n, &n) < 0) {
                        co->error = all ? -EIO : -ENOMEM;
                        return 1;
                }
        }
        const uint32_t *list = all ? all : ranks;
        for (size_t i = 0; i < n; i++) {
                if (co->req->rank != CKPT_VERIFY_ALL_RANKS && co->req->rank != list[i])
                        continue;
                if (op->n == op->cap) {
                        size_t cap = op->cap ? op->cap * 2 : 16;
                        struct verify_copy *v = realloc(op->copies, cap * sizeof(*v));
                        if (!v) {
                                co->error = -ENOMEM;
                                return 1;
                        }
                        op->copies = v;
                        op->cap = cap;
                }
                op->copies[op->n++] = (struct verify_copy){
                        .e = { .step = step, .rank = list[i], .area = co->area },
                        .store = co->store,
                };
        }
        return 0;
}

/* By step, rank, then the local tier (UINT32_MAX, wrapping to 0) first. */
static int copy_cmp(const void *a, const void *b) {
        const struct ckpt_verify_entry *x = &((const struct verify_copy *)a)->e;
        const struct ckpt_verify_entry *y = &((const struct verify_copy *)b)->e;
        if (x->step != y->step)
                return x->step < y->step ? -1 : 1;
        if (x->rank != y->rank)
                return x->rank < y->rank ? -1 : 1;
        uint32_t ax = x->area + 1, ay = y->area + 1;
        return ax < ay ? -1 : ax > ay;
}

/* The copies of c's request in catalog (the node's, or an area's).
 * 0, or -errno with the error reply sent. */
static int collect_from(struct conn *c, struct verify_op *op, const struct ckpt_req_verify *req,
                        struct catalog *catalog, struct store *store, uint32_t area) {
        struct collect co = { .op = op, .req = req, .catalog = catalog, .store = store,
                              .area = area };
        int r = catalog_ckpt_foreach(catalog, req->job.str, collect_step, &co);
        if (co.error < 0 || r < 0) {
                r = co.error < 0 ? co.error : r;
                conn_error(c, r, "cannot list the copies of job '%s': %s", req->job.str,
                           r == -ENOMEM ? "out of memory" : "catalog error");
                return r;
        }
        return 0;
}

/* ---- the answer ---------------------------------------------------------------------- */

static void verify_reply(struct verify_op *op) {
        struct conn *c = op->c;
        struct ckpt_reply *rep = calloc(1, sizeof(*rep));

        if (!rep) {
                conn_error(c, -ENOMEM, "out of memory");
                verify_op_free(op);
                return;
        }
        /* every copy that was bad is in the one reply (up to a page),
         * the good ones fill the rest; the page is in step order */
        struct ckpt_rep_verify *v = &rep->verify;
        v->total = (uint32_t)op->n;
        for (int pass = 0; pass < 2; pass++)
                for (size_t i = 0; i < op->n && v->count < CKPT_VERIFY_PAGE; i++) {
                        const struct ckpt_verify_entry *e = &op->copies[i].e;
                        if ((e->state == CKPT_COPY_GOOD) == (pass == 1))
                                v->entries[v->count++] = *e;
                }
        conn_reply(c, rep, -1);
        free(rep);
        c->verify = NULL;
        verify_op_free(op);
}

static void verify_healed(void *userdata, int error, const char *msg) {
        struct verify_heal *vh = userdata;
        struct verify_op *op = vh->op;
        struct verify_copy *vc = &op->copies[vh->index];

        free(vh);
        if (error == 0) {
                vc->e.state = CKPT_COPY_REPAIRED;
        } else {
                size_t used = strlen(vc->e.detail);
                snprintf(vc->e.detail + used, sizeof(vc->e.detail) - used, "; not repaired: %s", msg);
        }
        if (--op->heals)
                return;
        if (!op->c) {
                verify_op_free(op);
                return;
        }
        verify_reply(op);
}

/* Every copy is checked: repair the bad ones if asked, then answer. */
static void verify_finish(struct verify_op *op) {
        if (op->repair) {
                for (size_t i = 0; i < op->n; i++) {
                        struct verify_copy *vc = &op->copies[i];
                        if (vc->e.state != CKPT_COPY_BAD)
                                continue;
                        struct verify_heal *vh = calloc(1, sizeof(*vh));
                        if (!vh) {
                                size_t used = strlen(vc->e.detail);
                                snprintf(vc->e.detail + used, sizeof(vc->e.detail) - used,
                                         "; not repaired: out of memory");
                                continue;
                        }
                        vh->op = op;
                        vh->index = i;
                        op->heals++;
                        int r = heal_copy(op->srv, op->job, vc->e.step, vc->e.rank, vc->e.area,
                                          vc->e.detail, verify_healed, vh);
                        if (r < 0) {
                                op->heals--;
                                free(vh);
                                size_t used = strlen(vc->e.detail);
                                snprintf(vc->e.detail + used, sizeof(vc->e.detail) - used,
                                         "; not repaired: %s", strerror(-r));
                        }
                }
                if (op->heals)
                        return; /* verify_healed answers */
        }
        verify_reply(op);
}

/* ---- checking, one copy at a time ------------------------------------------------------ */

static void verify_next(struct verify_op *op);

static void verify_copy_run(struct work *w) {
        struct verify_op *op = container_of(w, struct verify_op, work);
        struct verify_copy *vc = &op->copies[op->next];
        int r = store_rank_verify(vc->store, op->job, vc->e.step, vc->e.rank, vc->e.detail,
                                  sizeof(vc->e.detail), &vc->e.shards, &vc->e.bytes);
        vc->e.state = r == 0 ? CKPT_COPY_GOOD : CKPT_COPY_BAD;
        if (r < 0 && r != -EIO && !vc->e.detail[0])
                snprintf(vc->e.detail, sizeof(vc->e.detail), "cannot be checked: %s", strerror(-r));
}

static void verify_copy_done(struct work *w) {
        struct verify_op *op = container_of(w, struct verify_op, work);
        struct verify_copy *vc = &op->copies[op->next];

        op->working = false;
        if (!op->c) {
                verify_op_free(op);
                return;
        }
        if (vc->e.state == CKPT_COPY_BAD) {
                char where[48];
                if (vc->e.area == CKPT_COPY_LOCAL)
                        snprintf(where, sizeof(where), "the local tier");
                else
                        snprintf(where, sizeof(where), "the replica area of node %u", vc->e.area);
                server_job_error(op->srv, op->job, "node %u: job %s step %" PRIu64 " rank %u: "
                                 "the copy in %s is corrupt: %s (found by ckptctl verify)",
                                 op->srv->opts.node_index, op->job, vc->e.step, vc->e.rank, where,
                                 vc->e.detail);
                if (!op->repair)
                        /* (void): a row lost to a catalog error is logged there */
                        (void)catalog_copy_fault_set(op->srv->catalog, op->job, vc->e.step,
                                                     vc->e.rank, vc->e.area, CATALOG_FAULT_BAD,
                                                     vc->e.detail, NULL);
        }
        op->next++;
        verify_next(op);
}

static void verify_next(struct verify_op *op) {
        if (op->next == op->n) {
                verify_finish(op);
                return;
        }
        op->working = true;
        op->work.run = verify_copy_run;
        op->work.done = verify_copy_done;
        worker_pool_submit(op->srv->workers, &op->work);
}

/* ---- the request ----------------------------------------------------------------------- */

/* Root, or the job's owner as recorded with each copy. */
static bool verify_may(struct conn *c, struct catalog *catalog, const char *job) {
        uint32_t owner;
        return c->uid == 0 || (catalog_job_uid(catalog, job, &owner) == 0 && owner == c->uid);
}

void verify_handle(struct conn *c, const struct ckpt_req_verify *req) {
        struct server *srv = c->srv;
        uint32_t owner;
        bool known = false, refused = false;

        struct verify_op *op = calloc(1, sizeof(*op));
        if (!op) {
                conn_error(c, -ENOMEM, "out of memory");
                return;
        }
        op->c = c;
        op->srv = srv;
        op->repair = req->repair;
        snprintf(op->job, sizeof(op->job), "%s", req->job.str);

        if (catalog_job_uid(srv->catalog, req->job.str, &owner) == 0) {
                known = true;
                if (!verify_may(c, srv->catalog, req->job.str))
                        refused = true;
                else if (collect_from(c, op, req, srv->catalog, srv->store, CKPT_COPY_LOCAL) < 0)
                        goto fail;
        }
        size_t nareas;
        const struct replica_area *areas = peers_areas(srv->peers, &nareas);
        for (size_t i = 0; i < nareas; i++) {
                if (catalog_job_uid(areas[i].catalog, req->job.str, &owner) < 0)
                        continue;
                known = true;
                if (!verify_may(c, areas[i].catalog, req->job.str))
                        refused = true;
                else if (collect_from(c, op, req, areas[i].catalog, areas[i].store,
                                      areas[i].src) < 0)
                        goto fail;
        }
        if (refused && op->n == 0) {
                conn_error(c, -EACCES, "job '%s' belongs to another user: only its owner and "
                           "root verify it", req->job.str);
                goto fail;
        }
        if (!known) {
                conn_error(c, -ENOENT, "no job named '%s' on node %u", req->job.str,
                           srv->opts.node_index);
                goto fail;
        }
        if (op->n == 0) {
                char step[32] = "", rank[32] = "";
                if (req->step != CKPT_STEP_LATEST)
                        snprintf(step, sizeof(step), " step %" PRIu64, req->step);
                if (req->rank != CKPT_VERIFY_ALL_RANKS)
                        snprintf(rank, sizeof(rank), " rank %u", req->rank);
                conn_error(c, -ENOENT, "node %u holds no copy of job '%s'%s%s", srv->opts.node_index,
                           req->job.str, step, rank);
                goto fail;
        }
        qsort(op->copies, op->n, sizeof(*op->copies), copy_cmp);
        c->verify = op;
        verify_next(op);
        return;
fail:
        verify_op_free(op);
}

void verify_conn_closed(struct conn *c) {
        struct verify_op *op = c->verify;

        if (!op)
                return;
        c->verify = NULL;
        op->c = NULL;
        /* the worker's or the repairs' end frees it */
        if (!op->working && !op->heals)
                verify_op_free(op);
}
