/* SPDX-License-Identifier: MIT */
/*
 * replication — the steps owed to each target and their ranks' journey
 * (see replication.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer/replication.h"
#include "peer/transfer.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/msgid.h"

/* A step owed to one target: each rank to send, in flight, acknowledged,
 * or refused for its CRC and this node's copy being re-checked. */
enum { RANK_TODO, RANK_SENDING, RANK_ACKED, RANK_CHECKING };

/* A rank the target refused for its CRC whose copy here verifies good
 * (the link or the target damaged it) is sent again this many times. */
#define REFUSAL_RESENDS 2

struct rstep {
        struct list link;
        struct replication *r;
        struct repl_target *t;
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t *ranks;
        uint8_t *rstate;           /* RANK_* per entry of ranks */
        size_t nranks;
        uint8_t *resends;          /* per entry of ranks: REFUSAL_RESENDS used */
        uint32_t inflight, acked;  /* inflight: sending or being re-checked */
        int status;                /* the first failure; reported once nothing is in flight */
        char msg[PEER_ERRMSG_MAX + 1];
        /* reported failed: kept (and owed) until it is sent again; a
         * bad copy here is not sent again by a reconnect */
        bool failed, copy_bad;
        /* failed for a CRC refusal (the copy here bad, or damaged on the
         * way every time): a wait for tier replicated learns it at once */
        bool crc_refused;
        bool gone;                 /* retention removed it here: dropped from the debt */
        struct list checks;        /* struct rcheck of its refused ranks */
};

/* One refused rank's copy here being re-checked (on a worker), then
 * perhaps repaired (the copy_bad hook). */
struct rcheck {
        struct work w;
        struct list link;          /* rstep.checks */
        struct rstep *rs;          /* NULL: the step was dropped; the callback frees it */
        size_t idx;
        struct store *store;
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t rank;
        char refusal[PEER_ERRMSG_MAX + 1];
        int result;                /* rank_check()'s */
        struct rank_fault fault;
};

void replication_target_init(struct replication *r, size_t slot, struct dialer *d) {
        struct repl_target *t = &r->targets[slot];
        t->d = d;
        list_init(&t->steps);
        t->steps_pending = 0;
        t->steps_failed = 0;
}

static void rstep_free(struct rstep *rs) {
        /* re-checks still running finish on their own, into nothing */
        while (!list_empty(&rs->checks)) {
                struct rcheck *rc = list_first_entry(&rs->checks, struct rcheck, link);
                list_unlink(&rc->link);
                rc->rs = NULL;
        }
        if (rs->failed)
                rs->t->steps_failed--;
        list_unlink(&rs->link);
        free(rs->ranks);
        free(rs->rstate);
        free(rs->resends);
        free(rs);
}

void replication_clear(struct replication *r) {
        for (size_t i = 0; i < r->ntargets; i++) {
                struct repl_target *t = &r->targets[i];
                while (!list_empty(&t->steps))
                        rstep_free(list_first_entry(&t->steps, struct rstep, link));
        }
}

/* The step owed to t, or NULL. */
static struct rstep *rstep_find(struct repl_target *t, const char *job, uint64_t step) {
        struct list *pos;
        list_for_each(pos, &t->steps) {
                struct rstep *o = list_entry(pos, struct rstep, link);
                if (o->step == step && !strcmp(o->job, job))
                        return o;
        }
        return NULL;
}

/* A step reported failed is owed again: its ranks not acknowledged go out
 * again (on a reconnect, or committed anew). */
static void rstep_retry(struct rstep *rs) {
        rs->failed = false;
        rs->crc_refused = false;
        rs->t->steps_failed--;
        rs->status = 0;
        rs->msg[0] = 0;
        for (size_t i = 0; i < rs->nranks; i++) {
                rs->resends[i] = 0;
                if (rs->rstate[i] != RANK_ACKED)
                        rs->rstate[i] = RANK_TODO;
        }
}

static int rstep_queue(struct replication *r, struct repl_target *t, const char *job,
                       uint64_t step) {
        struct rstep *o = rstep_find(t, job, step);
        if (o) {
                /* a copy found bad here would only be refused again: it
                 * stays failed until it is repaired (or the daemon restarts
                 * and checks it anew) */
                if (o->failed && !o->copy_bad)
                        rstep_retry(o);
                return 0;
        }
        struct rstep *rs = calloc(1, sizeof(*rs));
        if (!rs)
                return -ENOMEM;
        rs->r = r;
        rs->t = t;
        snprintf(rs->job, sizeof(rs->job), "%s", job);
        rs->step = step;
        rs->ranks = calloc(256, sizeof(uint32_t));
        rs->rstate = calloc(256, 1);
        rs->resends = calloc(256, 1);
        if (!rs->ranks || !rs->rstate || !rs->resends ||
            catalog_ranks(r->catalog, job, step, rs->ranks, 256, &rs->nranks) < 0) {
                free(rs->ranks);
                free(rs->rstate);
                free(rs->resends);
                free(rs);
                return -EIO;
        }
        list_init(&rs->checks);
        list_init(&rs->link);
        list_add_tail(&t->steps, &rs->link);
        t->steps_pending++;
        return 0;
}

static void rstep_done(struct rstep *rs, int status, const char *msg) {
        struct repl_target *t = rs->t;
        struct replication *r = rs->r;
        uint32_t node = t->d->node;
        char job[CKPT_NAME_MAX + 1];
        uint64_t step = rs->step;

        snprintf(job, sizeof(job), "%s", rs->job);
        if (status == 0) {
                /* (void): a replication state a fault lost (catalog.c logs it) leaves the step
                 * pending, so it is offered to the target again at the next connect */
                (void)catalog_repl_set(r->catalog, job, step, node, CATALOG_REPL_DONE, NULL);
                log_event(LOG_INFO, LOG_CTX(.id = LOG_ID_REPL_SENT, .job = job, LOG_STEP(step),
                                            LOG_PEER(node)),
                          "peers: job %s step %" PRIu64 " replicated to node %u", job, step, node);
        } else if (rs->gone) {
                log_notice("peers: job %s step %" PRIu64 " was removed here before it reached "
                           "node %u: dropped from what is owed to it", job, step, node);
        } else {
                /* (void): a replication state a fault lost (catalog.c logs it) leaves the step
                 * pending, so it is offered to the target again at the next connect */
                (void)catalog_repl_set(r->catalog, job, step, node, CATALOG_REPL_FAILED, msg);
                log_error("peers: node %u refused job %s step %" PRIu64 ": %s (%s); it stays "
                          "degraded until %s", node, job, step, msg, strerror(-status),
                          rs->copy_bad ? "this node's copy is repaired"
                                       : "the node is back or the step is retried");
                /* kept: still owed (status counts it), and a ckpt_wait for
                 * tier replicated learns why (replication_replicated) */
                rs->failed = true;
                t->steps_failed++;
        }
        if (!rs->failed) {
                t->steps_pending--;
                rstep_free(rs);
        }
        if (r->on_changed)
                r->on_changed(r->userdata, job, step);
}

/* Nothing of rs in flight: report it if every rank was acknowledged or
 * one failed.  true: rs is gone. */
static bool rstep_check(struct rstep *rs) {
        if (rs->inflight || rs->failed)
                return false;
        if (rs->status < 0) {
                rstep_done(rs, rs->status, rs->msg);
                return true;
        }
        if (rs->acked == rs->nranks) {
                rstep_done(rs, 0, NULL);
                return true;
        }
        return false;
}

static void rstep_fail(struct rstep *rs, int status, const char *msg) {
        if (rs->status < 0)
                return; /* the first failure is the one reported */
        rs->status = status < 0 ? status : -EIO;
        snprintf(rs->msg, sizeof(rs->msg), "%s", msg);
}

/* The link closed with tx's rank unacknowledged: it is sent again after
 * the reconnect. */
static void rank_lost(struct tx *tx) {
        struct rstep *rs = tx->owner;
        rs->rstate[tx->owner_idx] = RANK_TODO;
        rs->inflight--;
}

void replication_pump(struct replication *r, size_t slot, struct plink *l) {
        struct repl_target *t = &r->targets[slot];
        struct list *pos, *tmp;

        list_for_each_safe(pos, tmp, &t->steps) {
                struct rstep *rs = list_entry(pos, struct rstep, link);
                for (size_t i = 0; i < rs->nranks && l->nout < TRANSFER_WINDOW && rs->status == 0 &&
                                   !rs->failed;
                     i++) {
                        if (rs->rstate[i] != RANK_TODO)
                                continue;
                        int err = 0;
                        const struct transfer_source from = { r->store, r->memory, MEMTIER_OWN };
                        struct tx *tx = transfer_tx_new(l, &from, rs->job, rs->step,
                                                        rs->ranks[i], PEER_PURPOSE_REPLICATE,
                                                        r->self, ++l->next_stream, &err);
                        if (!tx) {
                                /* gone locally (retention) or unreadable: nothing to owe */
                                rs->gone = err == -ENOENT;
                                log_warn("peers: job %s step %" PRIu64 " rank %u cannot be read "
                                         "for replication: %s", rs->job, rs->step, rs->ranks[i],
                                         strerror(-err));
                                rstep_fail(rs, err, "the rank cannot be read on its node");
                                break;
                        }
                        tx->owner = rs;
                        tx->owner_idx = i;
                        tx->lost = rank_lost;
                        rs->rstate[i] = RANK_SENDING;
                        rs->inflight++;
                        link_out_add(l, &tx->out);
                }
                rstep_check(rs);
                if (l->nout >= TRANSFER_WINDOW)
                        break;
        }
}

/* ---- a refused rank: is this node's copy bad? -------------------------------------------- */

static void rcheck_free(struct rcheck *rc) {
        list_unlink(&rc->link);
        free(rc);
}

/* The re-check of rc's rank ended without the rank going out again. */
static void rcheck_fail(struct rcheck *rc, int status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static void rcheck_fail(struct rcheck *rc, int status, const char *fmt, ...) {
        struct rstep *rs = rc->rs;
        char msg[PEER_ERRMSG_MAX + 1];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        rs->rstate[rc->idx] = RANK_TODO;
        rs->inflight--;
        if (rs->status == 0)
                rs->crc_refused = status != -ENOENT;
        rstep_fail(rs, status, msg);
        rcheck_free(rc);
        rstep_check(rs);
}

/* rc's rank goes out again (its copy here is good, or good again). */
static void rcheck_resend(struct rcheck *rc) {
        struct rstep *rs = rc->rs;
        struct replication *r = rs->r;
        size_t slot = (size_t)(rs->t - r->targets);

        rs->rstate[rc->idx] = RANK_TODO;
        rs->inflight--;
        rcheck_free(rc);
        if (!rstep_check(rs))
                r->pump(r->owner, slot);
}

/* The copy_bad hook's answer: the copy was repaired from another, or not. */
static void rcheck_repaired(void *ctx, int error) {
        struct rcheck *rc = ctx;
        struct rstep *rs = rc->rs;

        if (!rs) {
                free(rc);
                return;
        }
        uint32_t node = rs->t->d->node;
        if (error < 0) {
                rcheck_fail(rc, -EIO, "node %u refused rank %u (%s); this node's copy is bad "
                            "too: shard %s block %" PRId64 " %s, and %s%s", node, rc->rank,
                            rc->refusal, rc->fault.shard, rc->fault.block, rc->fault.why,
                            error == -EIO ? "no good copy was found to repair it"
                                          : "repairing it failed: ",
                            error == -EIO ? "" : strerror(-error));
                return;
        }
        log_notice("peers: job %s step %" PRIu64 " rank %u: this node's copy was repaired; "
                   "sending it to node %u again", rc->job, rc->step, rc->rank, node);
        rs->copy_bad = false;
        rcheck_resend(rc);
}

static void rcheck_run(struct work *w) {
        struct rcheck *rc = container_of(w, struct rcheck, w);
        rc->result = rank_check(rc->store, rc->job, rc->step, rc->rank, &rc->fault);
}

static void rcheck_done(struct work *w) {
        struct rcheck *rc = container_of(w, struct rcheck, w);
        struct rstep *rs = rc->rs;

        if (!rs) {
                free(rc);
                return;
        }
        struct replication *r = rs->r;
        uint32_t node = rs->t->d->node;
        uint8_t *resends = &rs->resends[rc->idx];

        if (rc->result == 0 && *resends < REFUSAL_RESENDS) {
                (*resends)++;
                log_notice("peers: job %s step %" PRIu64 " rank %u: this node's copy verifies "
                           "good, so the link or node %u damaged it: sending it again (%u of "
                           "%u)", rc->job, rc->step, rc->rank, node, *resends, REFUSAL_RESENDS);
                rcheck_resend(rc);
                return;
        }
        if (rc->result == 0) {
                rcheck_fail(rc, -EIO, "node %u refused rank %u %u times (last: %s) although "
                            "this node's copy verifies good: the link or node %u damages it",
                            node, rc->rank, REFUSAL_RESENDS + 1, rc->refusal, node);
                return;
        }
        if (rc->result == -ENOENT) {
                rs->gone = true;
                rcheck_fail(rc, -ENOENT, "the rank was removed here");
                return;
        }
        if (rc->result != -EBADMSG) {
                rcheck_fail(rc, rc->result, "node %u refused rank %u (%s), and this node's copy "
                            "cannot be checked: %s", node, rc->rank, rc->refusal, rc->fault.why);
                return;
        }
        /* the copy here is bad: never offered again as it is */
        rs->copy_bad = true;
        int e = -EOPNOTSUPP;
        if (r->copy_bad)
                e = r->copy_bad(r->copy_bad_userdata, rc->job, rc->step, rc->rank, node,
                                &rc->fault, rc->refusal, rcheck_repaired, rc);
        else
                log_error("peers: job %s step %" PRIu64 " rank %u: this node's copy is bad: "
                          "shard %s block %" PRId64 " %s (node %u refused it: %s)", rc->job,
                          rc->step, rc->rank, rc->fault.shard, rc->fault.block, rc->fault.why,
                          node, rc->refusal);
        if (e < 0)
                rcheck_repaired(rc, e);
}

/* Target refused rank i of rs: a block failed its CRC32C there.  The copy
 * here is suspect: re-read it against its manifest, off the loop. */
static void rank_refused(struct replication *r, struct rstep *rs, size_t i, const char *why) {
        uint32_t node = rs->t->d->node;
        struct rcheck *rc = calloc(1, sizeof(*rc));

        log_warn("peers: node %u refused job %s step %" PRIu64 " rank %u: %s; checking this "
                 "node's copy", node, rs->job, rs->step, rs->ranks[i], why);
        if (!rc) {
                rs->rstate[i] = RANK_TODO;
                rstep_fail(rs, -ENOMEM, "out of memory checking a refused rank");
                return;
        }
        rc->rs = rs;
        rc->idx = i;
        rc->store = r->store;
        snprintf(rc->job, sizeof(rc->job), "%s", rs->job);
        rc->step = rs->step;
        rc->rank = rs->ranks[i];
        snprintf(rc->refusal, sizeof(rc->refusal), "%s", why);
        rc->w.run = rcheck_run;
        rc->w.done = rcheck_done;
        list_init(&rc->link);
        list_add_tail(&rs->checks, &rc->link);
        rs->rstate[i] = RANK_CHECKING;
        rs->inflight++;
        worker_pool_submit(r->workers, &rc->w);
}

void replication_rank_acked(struct replication *r, struct plink *l, const struct peer_msg *m) {
        struct tx *tx = transfer_tx_find(l, m->hdr.stream);
        if (!tx || !tx->out.ended || !tx->owner || link_out_on_wire(l, &tx->out)) {
                link_close(l, -EPROTO, "RANK_ACK for a transfer not in flight");
                return;
        }
        struct rstep *rs = tx->owner;
        size_t i = tx->owner_idx;
        link_out_remove(l, &tx->out);
        rs->inflight--;
        if (m->rank_ack.status == -EBADMSG && rs->status == 0) {
                /* a block failed its CRC32C on the target: the copy here
                 * may be what is bad */
                rank_refused(r, rs, i, m->rank_ack.message);
        } else if (m->rank_ack.status < 0) {
                rs->rstate[i] = RANK_TODO;
                rstep_fail(rs, m->rank_ack.status, m->rank_ack.message);
        } else {
                rs->rstate[i] = RANK_ACKED;
                rs->acked++;
        }
        rstep_check(rs);
        r->pump(r->owner, l->dialer->slot);
}

struct pending_walk {
        struct replication *r;
        struct repl_target *t;
};

static int pending_cb(void *userdata, const char *job, uint64_t step) {
        struct pending_walk *w = userdata;
        rstep_queue(w->r, w->t, job, step);
        return 0;
}

void replication_connected(struct replication *r, size_t slot) {
        struct repl_target *t = &r->targets[slot];
        struct pending_walk w = { .r = r, .t = t };

        /* catch up: everything owed to this node, from the catalog */
        int e = catalog_repl_pending_foreach(r->catalog, t->d->node, pending_cb, &w);
        /* pending_cb never stops the walk: a non-zero result is the
         * catalog's; what was not queued now is queued at the next connect */
        if (e < 0)
                log_warn("peers: node %u: cannot list the steps owed to it: %s", t->d->node,
                         strerror(-e));
}

int replication_step_committed(struct replication *r, const char *job, uint64_t step) {
        for (size_t i = 0; i < r->ntargets; i++) {
                struct repl_target *t = &r->targets[i];
                int e = catalog_repl_set(r->catalog, job, step, t->d->node, CATALOG_REPL_PENDING,
                                         NULL);
                if (e < 0)
                        return e;
                rstep_queue(r, t, job, step);
                r->pump(r->owner, i);
        }
        return 0;
}

void replication_step_removed(struct replication *r, const char *job, uint64_t step) {
        for (size_t i = 0; i < r->ntargets; i++) {
                struct repl_target *t = &r->targets[i];
                struct rstep *rs = rstep_find(t, job, step);
                if (!rs || !rs->failed)
                        continue;
                log_notice("peers: job %s step %" PRIu64 " was removed here before it reached "
                           "node %u: dropped from what is owed to it", job, step, t->d->node);
                t->steps_pending--;
                rstep_free(rs);
        }
}

int replication_replicated(struct replication *r, const char *job, uint64_t step, char *why,
                           size_t size) {
        uint32_t done, total;
        why[0] = 0;
        for (size_t i = 0; i < r->ntargets; i++) {
                const struct rstep *rs = rstep_find(&r->targets[i], job, step);
                if (!rs || !rs->failed)
                        continue;
                /* a refusal on the target's side (no space there) is sent
                 * again when the link comes back: a wait may yet see it
                 * replicated, and hears why only if it times out */
                snprintf(why, size, "replication to node %u failed: %s%s", r->targets[i].d->node,
                         rs->msg, rs->crc_refused ? "" : " (sent again when the link comes back)");
                if (rs->crc_refused)
                        return rs->status < 0 ? rs->status : -EIO;
        }
        int e = catalog_repl_counts(r->catalog, job, step, &done, &total);
        if (e < 0)
                return e;
        return total >= r->ntargets && done >= r->ntargets ? 1 : 0;
}

/* The newest `keep` committed steps of each job (all if keep is 0): what
 * a target keeps of this node's after its own retention. */
struct step_list {
        struct rkeys steps;        /* rank unused */
        uint32_t keep, in_job;
};

static int step_list_committed(void *userdata, const char *job, uint64_t step, uint8_t state) {
        struct step_list *sl = userdata;
        const struct rkeys *ks = &sl->steps;
        if (state != CKPT_STATE_COMMITTED)
                return 0;
        /* by job, newest step first */
        if (ks->n == 0 || strcmp(ks->v[ks->n - 1].job, job))
                sl->in_job = 0;
        if (sl->keep && sl->in_job >= sl->keep)
                return 0;
        sl->in_job++;
        return rkeys_add(&sl->steps, job, step, 0);
}

/*
 * A step the target holds whole but that this node has no record of for
 * it: a crash between the step's commit record and its rows here leaves it
 * committed (reconcile reads COMMITTED off the disk) with nothing owed, and
 * its replication, complete on the target, would never show.  Recorded
 * done, and a ckpt_wait for tier replicated hears of it.
 */
static void repl_record_held(struct replication *r, const struct repl_target *t, const char *job,
                             uint64_t step) {
        uint8_t state;
        if (catalog_repl_get(r->catalog, job, step, t->d->node, &state) != -ENOENT ||
            catalog_repl_set(r->catalog, job, step, t->d->node, CATALOG_REPL_DONE, NULL) < 0)
                return;
        log_info("peers: job %s step %" PRIu64 ": node %u holds every rank, recorded replicated "
                 "there", job, step, t->d->node);
        if (r->on_changed)
                r->on_changed(r->userdata, job, step);
}

/*
 * The target listed every rank of this node it holds.  A committed step
 * of ours with a rank it lacks, and not on its way there already, lost its
 * replica there (a replaced disk, a wiped replica area): it is owed again,
 * from its ranks the target lacks.  Without this a replacement target
 * would hold this node's checkpoints only from the next save on.  Only
 * the steps the target's retention keeps: an older one (pinned here) would
 * be sent and deleted there on every reconnect.  One it holds whole is
 * recorded replicated where no record says so (repl_record_held).
 */
void replication_reseed(struct replication *r, size_t slot, const struct rkeys *held) {
        struct repl_target *t = &r->targets[slot];
        struct step_list sl = { .keep = r->keep };
        uint32_t ranks[256];

        if (catalog_ckpt_foreach(r->catalog, NULL, step_list_committed, &sl) < 0) {
                free(sl.steps.v);
                return;
        }
        for (size_t i = 0; i < sl.steps.n; i++) {
                const char *job = sl.steps.v[i].job;
                uint64_t step = sl.steps.v[i].step;
                size_t n = 0, lacking = 0;

                if (rstep_find(t, job, step) ||
                    catalog_ranks(r->catalog, job, step, ranks, 256, &n) < 0)
                        continue;
                for (size_t k = 0; k < MIN(n, (size_t)256); k++)
                        lacking += !rkeys_has(held, job, step, ranks[k]);
                if (!lacking) {
                        if (n > 0)
                                repl_record_held(r, t, job, step);
                        continue;
                }
                log_notice("peers: node %u lacks %zu of this node's %zu ranks of job %s step %" PRIu64
                           " (a new disk?): sending them again", t->d->node, lacking, n, job, step);
                if (catalog_repl_set(r->catalog, job, step, t->d->node, CATALOG_REPL_PENDING, NULL) < 0 ||
                    rstep_queue(r, t, job, step) < 0)
                        continue;
                struct rstep *rs = rstep_find(t, job, step);
                for (size_t k = 0; k < rs->nranks; k++) {
                        if (rkeys_has(held, job, step, rs->ranks[k])) {
                                rs->rstate[k] = RANK_ACKED;
                                rs->acked++;
                        }
                }
        }
        free(sl.steps.v);
}

uint32_t replication_job_owed(const struct replication *r, const char *job) {
        uint32_t n = 0;
        for (size_t i = 0; i < r->ntargets; i++) {
                const struct list *pos;
                for (pos = r->targets[i].steps.next; pos != &r->targets[i].steps; pos = pos->next)
                        n += !strcmp(list_entry(pos, struct rstep, link)->job, job);
        }
        return n;
}
