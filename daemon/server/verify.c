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

/* One shard of a copy and what its check found (why: "" when good). */
struct verify_shard {
        char name[CKPT_NAME_MAX + 1];
        uint64_t size;
        char why[CKPT_VERIFY_DETAIL_MAX + 1];
};

/* A copy and what its check found: the copy's entry as a version-5 reply
 * sends it (e.area: CKPT_COPY_LOCAL or the replica area's source; detail:
 * the first bad shard's), each shard's result for the per-shard entries of
 * version 6, and the store that holds it.  note: why a repair failed,
 * added to every bad entry of the copy. */
struct verify_copy {
        struct ckpt_verify_entry e;
        struct store *store;
        struct verify_shard *shards;
        size_t nshards, cap;
        char note[CKPT_VERIFY_DETAIL_MAX + 1];
};

/* Append src to the string in dst (size bytes), cutting what does not fit:
 * a detail is for reading, its end matters less than its start. */
static void detail_append(char *dst, size_t size, const char *src) {
        size_t used = strnlen(dst, size - 1), len = strlen(src);
        if (len > size - 1 - used)
                len = size - 1 - used;
        memcpy(dst + used, src, len);
        dst[used + len] = '\0';
}

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
        for (size_t i = 0; i < op->n; i++)
                free(op->copies[i].shards);
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

/* Append e to the page if there is room; total counts it either way. */
static void verify_page_add(struct ckpt_rep_verify *v, const struct ckpt_verify_entry *e) {
        if (v->count < CKPT_VERIFY_PAGE)
                v->entries[v->count++] = *e;
}

/* The entries of copy vc in pass 0 (the bad and repaired ones) or 1 (the
 * good ones): one per shard, or one with shard "" when the copy has no
 * shard results (its directory or MANIFEST is bad, or it lists none). */
static void verify_copy_entries(struct ckpt_rep_verify *v, const struct verify_copy *vc,
                                int pass) {
        bool any_bad = false;
        for (size_t j = 0; j < vc->nshards; j++)
                any_bad |= vc->shards[j].why[0] != '\0';
        /* a bad copy without a bad shard lost its results to memory:
         * its own entry names what was wrong */
        if (vc->nshards == 0 || (vc->e.state != CKPT_COPY_GOOD && !any_bad)) {
                if ((vc->e.state == CKPT_COPY_GOOD) == (pass == 1)) {
                        verify_page_add(v, &vc->e);
                }
                if (pass == 0)
                        v->total++;
                return;
        }
        for (size_t j = 0; j < vc->nshards; j++) {
                const struct verify_shard *sh = &vc->shards[j];
                struct ckpt_verify_entry e = vc->e;
                /* a repair replaces the whole copy: every shard of it is
                 * then a verified good one */
                if (vc->e.state == CKPT_COPY_REPAIRED)
                        e.state = CKPT_COPY_REPAIRED;
                else
                        e.state = sh->why[0] ? CKPT_COPY_BAD : CKPT_COPY_GOOD;
                if (pass == 0)
                        v->total++;
                if ((e.state == CKPT_COPY_GOOD) != (pass == 1))
                        continue;
                snprintf(e.shard, sizeof(e.shard), "%s", sh->name);
                e.bytes = sh->size;
                e.detail[0] = '\0';
                detail_append(e.detail, sizeof(e.detail), sh->why);
                if (sh->why[0])
                        detail_append(e.detail, sizeof(e.detail), vc->note);
                verify_page_add(v, &e);
        }
}

static void verify_reply(struct verify_op *op) {
        struct conn *c = op->c;
        struct ckpt_reply *rep = calloc(1, sizeof(*rep));

        if (!rep) {
                conn_error(c, -ENOMEM, "out of memory");
                verify_op_free(op);
                return;
        }
        /* every entry that was bad is in the one reply (up to a page),
         * the good ones fill the rest; each part is in step order.  A
         * client of version 5 gets one entry per copy, as it always did. */
        struct ckpt_rep_verify *v = &rep->verify;
        bool per_shard = c->busy_version >= CKPT_PROTO_VERSION_VERIFY_SHARDS;
        v->copies = (uint32_t)op->n;
        if (!per_shard)
                v->total = (uint32_t)op->n;
        for (int pass = 0; pass < 2; pass++)
                for (size_t i = 0; i < op->n; i++) {
                        const struct verify_copy *vc = &op->copies[i];
                        if (per_shard) {
                                verify_copy_entries(v, vc, pass);
                                continue;
                        }
                        if ((vc->e.state == CKPT_COPY_GOOD) == (pass == 1)) {
                                struct ckpt_verify_entry e = vc->e;
                                e.shard[0] = '\0';
                                verify_page_add(v, &e);
                        }
                }
        conn_reply(c, rep, -1);
        free(rep);
        c->verify = NULL;
        verify_op_free(op);
}

/* Why copy vc stays bad after --repair: added to the copy's detail (the
 * version-5 entry) and to each of its bad shards' entries. */
static void verify_copy_note(struct verify_copy *vc, const char *why) {
        vc->note[0] = '\0';
        detail_append(vc->note, sizeof(vc->note), "; not repaired: ");
        detail_append(vc->note, sizeof(vc->note), why);
        detail_append(vc->e.detail, sizeof(vc->e.detail), vc->note);
}

static void verify_healed(void *userdata, int error, const char *msg) {
        struct verify_heal *vh = userdata;
        struct verify_op *op = vh->op;
        struct verify_copy *vc = &op->copies[vh->index];

        free(vh);
        if (error == 0) {
                vc->e.state = CKPT_COPY_REPAIRED;
        } else {
                verify_copy_note(vc, msg);
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
                                verify_copy_note(vc, "out of memory");
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
                                verify_copy_note(vc, strerror(-r));
                        }
                }
                if (op->heals)
                        return; /* verify_healed answers */
        }
        verify_reply(op);
}

/* ---- checking, one copy at a time ------------------------------------------------------ */

static void verify_next(struct verify_op *op);

/* store_rank_verify's per-shard result, on the worker: kept for the
 * reply's per-shard entries.  Out of memory loses the shard's line, not
 * the copy's verdict (the copy's detail still names the first bad one). */
static void verify_shard_result(void *userdata, const char *shard, uint64_t size,
                                const char *why, int64_t block, int error) {
        (void)block; /* why names it already */
        (void)error;
        struct verify_copy *vc = userdata;
        if (vc->nshards == vc->cap) {
                size_t cap = vc->cap ? vc->cap * 2 : 8;
                struct verify_shard *v = realloc(vc->shards, cap * sizeof(*v));
                if (!v)
                        return;
                vc->shards = v;
                vc->cap = cap;
        }
        struct verify_shard *sh = &vc->shards[vc->nshards++];
        sh->name[0] = '\0';
        detail_append(sh->name, sizeof(sh->name), shard);
        sh->size = size;
        sh->why[0] = '\0';
        detail_append(sh->why, sizeof(sh->why), why);
}

static void verify_copy_run(struct work *w) {
        struct verify_op *op = container_of(w, struct verify_op, work);
        struct verify_copy *vc = &op->copies[op->next];
        int r = store_rank_verify(vc->store, op->job, vc->e.step, vc->e.rank, 0, vc->e.detail,
                                  sizeof(vc->e.detail), &vc->e.shards, &vc->e.bytes,
                                  verify_shard_result, vc);
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
