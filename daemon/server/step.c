/* SPDX-License-Identifier: MIT */
/*
 * step — the life of a step on this node once its ranks are saved (see
 * step.h): what WAIT and COMMIT look at, a single node's commit, this
 * node's side of the cluster-wide commit (docs/commit.md), and the local
 * tier's deleter under the one retention policy.  The saves themselves
 * are save.c's; they tell this file when a rank landed (step_notify,
 * step_rank_landed) and ask it before answering a first SAVE_BEGIN
 * (step_begin_parked).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "retention/retention.h"
#include "server/conn.h"
#include "server/save.h"
#include "server/server.h"
#include "metrics/metrics.h"
#include "server/step.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/msgid.h"

/* How long a first SAVE_BEGIN of a step waits for the coordinator's word
 * on its world_size before it goes ahead without it. */
#define CLUSTER_VERDICT_MS 2000
/* While trainers wait in ckpt_commit, their node asks node 0 again this
 * often: its answer (what is missing) is then at most this old when a
 * commit times out, and an ask lost with a link is repeated. */
#define CLUSTER_ASK_AGAIN_MS 500

static void cluster_commit_check(struct conn *c, struct step_state *st);
static void cluster_begin_timeout(struct conn *c);
static void cluster_record(struct server *srv, const char *job, const struct peer_step_state *m);
static void cluster_ask_again(struct loop_timer *t);
static void cluster_report_due(struct loop_timer *t);
static int cluster_report_step(struct server *srv, const char *job, uint64_t step,
                               uint32_t world_size, uint32_t uid, uint8_t flags);
static uint8_t cluster_flags(const struct step_state *st);
static uint8_t cluster_waiter_flags(const struct step_state *st);
static void wait_join(struct conn *c, struct step_state *st, uint8_t tier, uint32_t timeout_ms);
static void step_try_commit(struct conn *c, struct step_state *st);
static int step_commit_now(struct step_state *st, const char **why);
static void commit_request_pursue(struct step_state *st);
static void commit_request_done(struct step_state *st);

struct step_state *step_find(struct server *srv, const char *job, uint64_t step) {
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &srv->steps) {
                struct step_state *st = list_entry(pos, struct step_state, link);
                if (st->step == step && !strcmp(st->job, job))
                        return st;
        }
        return NULL;
}

struct step_state *step_new(struct server *srv, const char *job, uint64_t step,
                                   uint32_t world_size) {
        struct step_state *st = calloc(1, sizeof(*st));
        if (!st)
                return NULL;
        st->srv = srv;
        snprintf(st->job, sizeof(st->job), "%s", job);
        st->step = step;
        st->world_size = world_size;
        list_init(&st->saves);
        list_init(&st->waiters);
        list_add_tail(&srv->steps, &st->link);
        return st;
}

/* ---- steps: WAIT and COMMIT -------------------------------------------------------------- */

/* 1: (job, step) reached tier; 0: not yet; <0: it never will (a rank failed,
 * no such step); *why is set for errors. */
static int step_reached(struct server *srv, const char *job, uint64_t step, uint8_t tier,
                        const char **why) {
        struct ckpt_ckpt_entry e;
        int r = catalog_ckpt_get(srv->catalog, job, step, &e);

        *why = NULL;
        srv->repl_why[0] = 0;
        if (tier == CKPT_TIER_REMOTE && !srv->flusher) {
                *why = "no object store is configured ([remote] endpoint)";
                return -EOPNOTSUPP;
        }
        if (tier == CKPT_TIER_REPLICATED && !srv->peers) {
                *why = "replication is off ([cluster] replication_factor 1 or no peers)";
                return -EOPNOTSUPP;
        }
        if (r == 0 && e.state == CKPT_STATE_COMMITTED && tier == CKPT_TIER_REPLICATED) {
                int q = peers_replicated(srv->peers, job, step, srv->repl_why,
                                         sizeof(srv->repl_why));
                if (q < 0 && q != -ENOENT)
                        *why = srv->repl_why;
                return q;
        }
        if (r == 0 && e.state == CKPT_STATE_COMMITTED) {
                if (tier != CKPT_TIER_REMOTE)
                        return 1;
                uint8_t rs = 0;
                if (catalog_ckpt_remote_get(srv->catalog, job, step, &rs, srv->remote_why,
                                            sizeof(srv->remote_why)) < 0)
                        return -EIO;
                if (rs == CATALOG_REMOTE_DONE)
                        return 1;
                if (rs == CATALOG_REMOTE_FAILED) {
                        *why = srv->remote_why;
                        return -EIO;
                }
                return 0;
        }
        struct step_state *st = step_find(srv, job, step);
        if (st && !list_empty(&st->saves)) {
                uint8_t lowest = CKPT_TIER_LOCAL;
                struct list *pos, *tmp;
                list_for_each_safe(pos, tmp, &st->saves) {
                        struct save *s = list_entry(pos, struct save, step_link);
                        uint8_t t;
                        if (s->state == SAVE_FAILED) {
                                *why = s->errmsg;
                                return s->error;
                        }
                        if (s->state == SAVE_DONE)
                                t = CKPT_TIER_LOCAL;
                        else if (s->state == SAVE_STAGING)
                                t = 0;
                        else
                                t = CKPT_TIER_STAGED;
                        lowest = MIN(lowest, t);
                }
                if (tier == CKPT_TIER_COMMITTED)
                        return st->committed;
                return lowest >= tier;
        }
        if (r == -ENOENT) {
                *why = "no such step";
                return -ENOENT;
        }
        if (r < 0)
                return r;
        if (tier >= CKPT_TIER_COMMITTED)
                return 0;
        return e.ranks_local > 0 ? 1 : 0;
}

static void wait_leave(struct conn *c) {
        list_unlink(&c->step_link);
        loop_timer_cancel(&c->timer);
        c->wait_step = NULL;
}

static void wait_timeout(struct loop_timer *t) {
        struct conn *c = container_of(t, struct conn, timer);
        struct step_state *st = c->wait_step;

        if (c->busy_type == CKPT_MSG_SAVE_BEGIN) {
                cluster_begin_timeout(c);
                return;
        }
        list_unlink(&c->step_link);
        c->wait_step = NULL;
        if (c->busy_type == CKPT_MSG_COMMIT && !step_clustered(c->srv) && st->cluster_why[0]) {
                conn_error(c, -ETIMEDOUT, "step %" PRIu64 " of job '%s' was not committed within "
                           "%u ms: %s",
                           st->step, st->job, c->wait_ms, st->cluster_why);
        } else if (c->busy_type == CKPT_MSG_COMMIT && step_clustered(c->srv)) {
                bool up = c->srv->cluster_reachable(c->srv);
                conn_error(c, -ETIMEDOUT, "step %" PRIu64 " of job '%s' was not committed within "
                           "%u ms: %s%s%s%s",
                           st->step, st->job, c->wait_ms,
                           up ? "" : "the coordinator (node 0) is unreachable",
                           !up && st->cluster_why[0] ? " (its last word: " : "",
                           st->cluster_why[0] ? st->cluster_why
                                              : up ? "no word from the coordinator (node 0)" : "",
                           !up && st->cluster_why[0] ? ")" : "");
        } else {
                /* a target that refused the step says why (it is sent
                 * again when its link comes back) */
                const char *why = NULL;
                bool repl = c->wait_tier == CKPT_TIER_REPLICATED &&
                            step_reached(c->srv, st->job, st->step, c->wait_tier, &why) == 0 &&
                            c->srv->repl_why[0];
                conn_error(c, -ETIMEDOUT, "step %" PRIu64 " of job '%s' did not reach tier %s "
                           "in time%s%s",
                           st->step, st->job, ckpt_tier_name(c->wait_tier), repl ? ": " : "",
                           repl ? c->srv->repl_why : "");
        }
        if (!st->committed)
                step_free_if_idle(st);
}

static void wait_join(struct conn *c, struct step_state *st, uint8_t tier, uint32_t timeout_ms) {
        c->wait_step = st;
        c->wait_tier = tier;
        c->wait_ms = timeout_ms;
        list_add_tail(&st->waiters, &c->step_link);
        loop_timer_start(c->srv->loop, &c->timer, timeout_ms, wait_timeout);
}

void step_notify(struct server *srv, struct step_state *st) {
        struct list *pos, *tmp;
        const char *why;

        if (st->decision_due) {
                /* recorded once no save of it is on its way (it may free
                 * nothing: st lives on while it commits) */
                struct peer_step_state m = { .step = st->step, .world_size = st->world_size,
                                             .committed_at = st->decision_at };
                cluster_record(srv, st->job, &m);
        }
        /* a commit request commits the step the moment its last rank is
         * on disk here (in a cluster the rank's report carries it) */
        if (!step_clustered(srv))
                commit_request_pursue(st);

        list_for_each_safe(pos, tmp, &st->waiters) {
                struct conn *c = list_entry(pos, struct conn, step_link);
                if (c->busy_type == CKPT_MSG_SAVE_BEGIN)
                        continue; /* the coordinator's word answers it */
                if (c->busy_type == CKPT_MSG_COMMIT) {
                        if (step_clustered(srv))
                                cluster_commit_check(c, st);
                        else
                                step_try_commit(c, st);
                        continue;
                }
                int r = step_reached(srv, st->job, st->step, c->wait_tier, &why);
                if (r == 0)
                        continue;
                wait_leave(c);
                if (r < 0) {
                        conn_error(c, r, "step %" PRIu64 " of job '%s': %s", st->step, st->job,
                                   why ? why : strerror(-r));
                } else {
                        struct ckpt_reply rep = { 0 };
                        rep.wait.tier = c->wait_tier;
                        conn_reply(c, &rep, -1);
                }
        }
}

void step_changed(struct server *srv, const char *job, uint64_t step) {
        struct step_state *st = step_find(srv, job, step);
        if (st)
                step_notify(srv, st);
        /* a flushed step may let retention remove older local ones */
        step_retention_run(srv, job);
}

void step_handle_wait(struct conn *c, const struct ckpt_req_wait *req) {
        struct server *srv = c->srv;
        const char *why;
        int r = conn_check_job(c, req->job.str, false);

        if (r == -EACCES) {
                conn_error(c, r, "job '%s' belongs to another user", req->job.str);
                return;
        }
        if (r < 0) {
                conn_error(c, r, "no job named '%s'", req->job.str);
                return;
        }
        r = step_reached(srv, req->job.str, req->step, req->tier, &why);
        if (r < 0) {
                conn_error(c, r, "step %" PRIu64 " of job '%s': %s", req->step, req->job.str,
                           why ? why : strerror(-r));
                return;
        }
        if (r > 0) {
                struct ckpt_reply rep = { 0 };
                rep.wait.tier = req->tier;
                conn_reply(c, &rep, -1);
                return;
        }
        if (req->timeout_ms == 0) {
                conn_error(c, -ETIMEDOUT, "step %" PRIu64 " of job '%s' has not reached tier %s",
                           req->step, req->job.str, ckpt_tier_name(req->tier));
                return;
        }
        struct step_state *st = step_find(srv, req->job.str, req->step);
        if (!st) {
                struct ckpt_ckpt_entry e;
                if (catalog_ckpt_get(srv->catalog, req->job.str, req->step, &e) < 0 ||
                    !(st = step_new(srv, req->job.str, req->step, e.world_size))) {
                        conn_error(c, -ENOENT, "no step %" PRIu64 " of job '%s'", req->step,
                                   req->job.str);
                        return;
                }
        }
        wait_join(c, st, req->tier, req->timeout_ms);
}

static void step_committed(void *userdata, int error) {
        struct step_state *st = userdata;
        struct server *srv = st->srv;
        struct list *pos, *tmp;

        st->committing = false;

        if (error < 0) {
                list_for_each_safe(pos, tmp, &st->waiters) {
                        struct conn *c = list_entry(pos, struct conn, step_link);
                        if (c->busy_type != CKPT_MSG_COMMIT)
                                continue;
                        wait_leave(c);
                        conn_error(c, error, "cannot write the commit record of step %" PRIu64
                                   " of job '%s': %s", st->step, st->job, strerror(-error));
                }
                server_check_drained(srv);
                return;
        }
        st->committed = true; /* and in the catalog: the ingest marked it */
        if (srv->memtier)
                memtier_step_committed(srv->memtier, MEMTIER_OWN, st->job, st->step);
        metrics_count(METRIC_STEPS_COMMITTED, 1);
        metrics_observe_us(METRIC_COMMIT_SECONDS, metrics_now_us() - st->commit_started_us);
        log_event(LOG_INFO, LOG_CTX(.id = LOG_ID_STEP_COMMITTED, .job = st->job, LOG_STEP(st->step)),
                  "job %s step %" PRIu64 ": committed (%u ranks%s%s)", st->job, st->step,
                 st->world_size, step_clustered(srv) ? ", the cluster's decision" : "",
                 st->commit_asked ? ", asked by ckpt_commit_async" : "");
        commit_request_done(st);
        list_for_each_safe(pos, tmp, &st->waiters) {
                struct conn *c = list_entry(pos, struct conn, step_link);
                /* in a cluster, ckpt_commit returns once every node
                 * holding ranks has recorded it (STEP_STATE EVERYWHERE) */
                if (step_clustered(srv) && !st->everywhere && c->busy_type == CKPT_MSG_COMMIT)
                        continue;
                if (c->busy_type == CKPT_MSG_SAVE_BEGIN)
                        continue;
                wait_leave(c);
                struct ckpt_reply rep = { 0 };
                if (c->busy_type == CKPT_MSG_WAIT)
                        rep.wait.tier = c->wait_tier;
                conn_reply(c, &rep, -1);
        }
        char job[CKPT_NAME_MAX + 1];
        snprintf(job, sizeof(job), "%s", st->job);
        uint64_t step = st->step;
        if (step_clustered(srv)) {
                /* the acknowledgement: the coordinator counts this node
                 * as having recorded it (-ENOTCONN: the next sync says so) */
                (void)cluster_report_step(srv, job, step, st->world_size, st->uid, 0);
        }
        /* The catalog now knows; the in-memory step is no longer needed,
         * unless trainers wait on it for the rest of the cluster. */
        if (list_empty(&st->waiters))
                step_state_free(st);
        if (srv->peers) {
                int q = peers_step_committed(srv->peers, job, step);
                if (q < 0)
                        log_error("job %s step %" PRIu64 ": cannot queue replication: %s", job,
                                  step, strerror(-q));
        }
        if (srv->flusher) {
                int q = flush_step(srv->flusher, job, step);
                if (q < 0)
                        log_error("job %s step %" PRIu64 ": cannot queue the flush to the "
                                  "object store: %s", job, step, strerror(-q));
        }
        step_retention_run(srv, job);
        server_check_drained(srv);
}

/* What a single node's commit waits for, for its timeout's message:
 * "ranks 1, 3 of 4 are not saved" (from the catalog's ranks on disk). */
static void local_missing(struct server *srv, struct step_state *st, uint32_t saved) {
        _cleanup_free_ uint32_t *have = calloc(saved ? saved : 1, sizeof(*have));
        size_t n = 0, at = 0, k = 0;
        int w;

        if (!have || catalog_ranks(srv->catalog, st->job, st->step, have, saved, &n) < 0)
                n = 0;
        n = MIN(n, (size_t)saved);
        bool one = st->world_size - n == 1;
        w = snprintf(st->cluster_why, sizeof(st->cluster_why), one ? "rank" : "ranks");
        at = w > 0 ? (size_t)w : 0;
        bool first = true;
        for (uint32_t rk = 0; rk < st->world_size && at + 64 < sizeof(st->cluster_why); rk++) {
                while (k < n && have[k] < rk)
                        k++;
                if (k < n && have[k] == rk)
                        continue;
                w = snprintf(st->cluster_why + at, sizeof(st->cluster_why) - at, "%s %u",
                             first ? "" : ",", rk);
                at += w > 0 ? (size_t)w : 0;
                first = false;
        }
        snprintf(st->cluster_why + at, sizeof(st->cluster_why) - at, " of %u %s not saved",
                 st->world_size, one ? "is" : "are");
}

/*
 * A single node's commit: start writing st's COMMITTED record if every
 * rank 0..world_size-1 is on this node's disk.  It needs no connection: a
 * COMMIT waiting on st and a commit request (COMMIT_ASYNC) both come here.
 * 1: started, or under way or done already (step_committed() answers);
 * 0: ranks are missing (st->cluster_why names them for a timeout);
 * -EPROTO: a save of a rank failed here (*why says how); -ENOMEM.
 */
static int step_commit_now(struct step_state *st, const char **why) {
        struct server *srv = st->srv;

        *why = NULL;
        if (st->committing || st->committed)
                return 1;
        int r = step_reached(srv, st->job, st->step, CKPT_TIER_LOCAL, why);
        if (r == 0)
                return 0; /* not all ranks on disk yet */
        if (r < 0) {
                if (!*why)
                        *why = strerror(-r);
                return -EPROTO;
        }
        struct ckpt_ckpt_entry e;
        r = catalog_ckpt_get(srv->catalog, st->job, st->step, &e);
        if (r < 0 || e.ranks_local != st->world_size) {
                /* Ranks missing: without a barrier before it, a commit
                 * waits for them (up to its timeout, which names them). */
                local_missing(srv, st, r < 0 ? 0 : e.ranks_local);
                return 0;
        }
        commit_record_clear(&st->record);
        snprintf(st->record.job, sizeof(st->record.job), "%s", st->job);
        st->record.step = st->step;
        st->record.world_size = st->world_size;
        st->record.committed_at = (int64_t)time(NULL);
        st->record.ranks = calloc(st->world_size, sizeof(uint32_t));
        if (!st->record.ranks)
                return -ENOMEM;
        for (uint32_t i = 0; i < st->world_size; i++)
                st->record.ranks[i] = i;
        st->record.nranks = st->world_size;
        st->committing = true;
        st->commit_started_us = metrics_now_us();
        ingest_commit_step(&st->commit, srv->store, srv->catalog, &st->record, step_committed,
                           st);
        return 1;
}

static void step_try_commit(struct conn *c, struct step_state *st) {
        const char *why;

        if (st->committed) {
                wait_leave(c);
                conn_reply_empty(c);
                return;
        }
        int r = step_commit_now(st, &why);
        if (r >= 0)
                return; /* step_committed() answers, or it waits for ranks */
        wait_leave(c);
        if (r == -ENOMEM)
                conn_error(c, -ENOMEM, "out of memory");
        else
                conn_error(c, -EPROTO, "cannot commit step %" PRIu64 " of job '%s': %s", st->step,
                           st->job, why);
}

static void commit_no_save(struct conn *c, const char *job, uint64_t step) {
        conn_error(c, -ENOENT, "no save of step %" PRIu64 " of job '%s' to commit%s", step, job,
                   step_clustered(c->srv) ? " on this node: commit on a node that saves ranks "
                                            "of it" : "");
}

/* What COMMIT and COMMIT_ASYNC check first: the job is c's, the step is
 * known here.  The step to commit (found, or made from its catalog row),
 * or NULL once c is answered: an error, or 0 for a step committed already. */
static struct step_state *commit_step_of(struct conn *c, const struct ckpt_req_job_step *req) {
        struct server *srv = c->srv;
        const char *job = req->job.str;
        int r = conn_check_job(c, job, true);

        if (r == -EACCES) {
                conn_error(c, r, "job '%s' belongs to another user", job);
                return NULL;
        }
        if (r < 0) {
                conn_error(c, r, "no job named '%s'", job);
                return NULL;
        }
        struct ckpt_ckpt_entry e;
        r = catalog_ckpt_get(srv->catalog, job, req->step, &e);
        if (r == 0 && e.state == CKPT_STATE_COMMITTED) {
                conn_reply_empty(c);
                return NULL;
        }
        struct step_state *st = step_find(srv, job, req->step);
        if (!st) {
                if (r < 0 || !(st = step_new(srv, job, req->step, e.world_size))) {
                        commit_no_save(c, job, req->step);
                        return NULL;
                }
                st->uid = (uint32_t)c->uid;
        }
        return st;
}

void step_handle_commit(struct conn *c, const struct ckpt_req_job_step *req) {
        struct server *srv = c->srv;
        const char *job = req->job.str;
        struct step_state *st = commit_step_of(c, req);

        if (!st)
                return;
        wait_join(c, st, CKPT_TIER_COMMITTED, req->timeout_ms ? req->timeout_ms : 1);
        if (!step_clustered(srv)) {
                step_try_commit(c, st);
                return;
        }
        /* The coordinator decides; this node tells it what it holds and
         * that a trainer asks.  Ranks still on their way to disk are
         * reported as they land (save_on_disk). */
        cluster_commit_check(c, st);
        if (c->wait_step != st)
                return; /* answered: a rank here failed */
        if (cluster_report_step(srv, job, st->step, st->world_size, st->uid,
                                cluster_flags(st)) == -ENOTCONN && !st->cluster_why[0])
                snprintf(st->cluster_why, sizeof(st->cluster_why),
                         "the coordinator (node 0) is unreachable");
        if (!loop_timer_armed(&st->ask_again))
                loop_timer_start(srv->loop, &st->ask_again, CLUSTER_ASK_AGAIN_MS,
                                 cluster_ask_again);
}

/* ---- commit requests that outlive the trainer (COMMIT_ASYNC, docs/commit.md) ---------------
 *
 * ckpt_commit_async() asks for the commit and returns once the request is
 * recorded: st->commit_asked in memory, a row of commit_requests in the
 * catalog (on stable storage before the reply, so a daemon killed, or a
 * node losing power, right after still has it).  From then on no
 * connection is needed: on one node the step commits when its last rank
 * lands (step_notify), through the same step_commit_now() as COMMIT; in a
 * cluster every report of the step to node 0 carries PEER_REPORT_COMMIT
 * (cluster_flags), the sync after a reconnect included, so node 0 decides
 * it when the last rank lands on any node.  The request is done when the
 * step commits here (or, on a node that holds none of its ranks any more,
 * when node 0 says it is recorded everywhere); it goes with the step when
 * retention removes it.
 */

/* Carry a commit request as far as this node can now. */
static void commit_request_pursue(struct step_state *st) {
        struct server *srv = st->srv;
        const char *why;

        if (!st->commit_asked || st->committing || st->committed)
                return;
        if (!step_clustered(srv)) {
                /* 0: ranks missing; <0: a rank failed here, and the request
                 * waits for it to be saved again (or for retention) */
                (void)step_commit_now(st, &why);
                return;
        }
        /* -ENOTCONN: the sync after the reconnect carries the ask */
        (void)cluster_report_step(srv, st->job, st->step, st->world_size, st->uid,
                                  cluster_flags(st));
}

/* The step is committed: the request is carried out. */
static void commit_request_done(struct step_state *st) {
        if (!st->commit_asked)
                return;
        st->commit_asked = false;
        /* (void): a row left behind (catalog.c logs it) names a committed
         * step, which the resume at the next start drops */
        (void)catalog_commit_request_set(st->srv->catalog, st->job, st->step, false);
}

void step_handle_commit_async(struct conn *c, const struct ckpt_req_job_step *req) {
        struct server *srv = c->srv;
        const char *job = req->job.str, *why;
        struct step_state *st = commit_step_of(c, req);

        if (!st)
                return;
        /* the checks a COMMIT makes while it waits, made once, now */
        int r = step_reached(srv, job, req->step, CKPT_TIER_LOCAL, &why);
        if (r == -ENOENT) {
                commit_no_save(c, job, req->step);
                step_free_if_idle(st);
                return;
        }
        if (r < 0) {
                conn_error(c, -EPROTO, "cannot commit step %" PRIu64 " of job '%s': %s", req->step,
                           job, why ? why : strerror(-r));
                step_free_if_idle(st);
                return;
        }
        if (st->committed) {
                conn_reply_empty(c);
                return;
        }
        /* recorded before the reply: the trainer may exit at once */
        r = catalog_commit_request_set(srv->catalog, job, req->step, true);
        if (r == 0)
                r = catalog_flush_durable(srv->catalog);
        if (r < 0) {
                conn_error(c, r, "cannot record the commit request of step %" PRIu64 " of job "
                           "'%s' in the catalog: %s", req->step, job, strerror(-r));
                step_free_if_idle(st);
                return;
        }
        if (!st->commit_asked)
                log_info("job %s step %" PRIu64 ": commit asked by ckpt_commit_async (uid %u, pid "
                         "%d): it commits once every rank of %u is saved%s", job, req->step,
                         (unsigned)c->uid, (int)c->pid, st->world_size,
                         step_clustered(srv) ? " on some node" : "");
        st->commit_asked = true;
        conn_reply_empty(c);
        commit_request_pursue(st);
}

static int commit_request_load(void *userdata, const char *job, uint64_t step) {
        struct server *srv = userdata;
        struct ckpt_ckpt_entry e;

        if (catalog_ckpt_get(srv->catalog, job, step, &e) < 0)
                return 0; /* gone with its step (the row cascades) */
        if (e.state == CKPT_STATE_COMMITTED) {
                /* committed just before the restart, the row not yet dropped */
                (void)catalog_commit_request_set(srv->catalog, job, step, false);
                return 0;
        }
        struct step_state *st = step_find(srv, job, step);
        if (!st && !(st = step_new(srv, job, step, e.world_size)))
                return -ENOMEM;
        /* (void): a job the catalog does not know keeps uid 0, as a report does */
        (void)catalog_job_uid(srv->catalog, job, &st->uid);
        st->commit_asked = true;
        log_info("job %s step %" PRIu64 ": commit asked by ckpt_commit_async before the restart "
                 "(%u of %u ranks on disk here): it commits once every rank is saved", job, step,
                 e.ranks_local, e.world_size);
        return 0;
}

void step_commit_requests_resume(struct server *srv) {
        struct list *pos, *tmp;

        int r = catalog_commit_request_foreach(srv->catalog, commit_request_load, srv);
        if (r < 0)
                log_error("cannot take up the recorded commit requests: %s", strerror(-r));
        list_for_each_safe(pos, tmp, &srv->steps) {
                struct step_state *st = list_entry(pos, struct step_state, link);
                commit_request_pursue(st);
        }
}

void step_state_free(struct step_state *st) {
        struct list *pos, *tmp;

        list_for_each_safe(pos, tmp, &st->waiters) {
                struct conn *c = list_entry(pos, struct conn, step_link);
                wait_leave(c);
                conn_error(c, -ENOENT, "step %" PRIu64 " of job '%s' was deleted", st->step,
                           st->job);
        }
        list_for_each_safe(pos, tmp, &st->saves) {
                struct save *s = list_entry(pos, struct save, step_link);
                save_free(s);
        }
        commit_record_clear(&st->record);
        loop_timer_cancel(&st->ask_again);
        if (loop_timer_armed(&st->report_due)) {
                loop_timer_cancel(&st->report_due);
                cluster_report_due(&st->report_due); /* what landed is still news */
        }
        list_unlink(&st->link);
        free(st);
}

void step_free_if_idle(struct step_state *st) {
        /* a commit request keeps it: what commits the step is a rank
         * landing on it, long after every trainer went away */
        if (!st->committing && !st->commit_asked && list_empty(&st->saves) &&
            list_empty(&st->waiters))
                step_state_free(st);
}

void step_state_free_all(struct server *srv) {
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &srv->steps) {
                struct step_state *st = list_entry(pos, struct step_state, link);
                step_state_free(st);
        }
}

/* ---- the cluster-wide commit: this node's side (docs/commit.md) ------------------------------
 *
 * With node_count > 1 a step is committed by the coordinator's decision,
 * not here: this node reports the ranks on its disk and its trainers'
 * commit requests (STEP_REPORT), records the decision when it comes
 * (its COMMITTED record, through the same step_committed() as a single
 * node's commit) and answers ckpt_commit once every holder has.
 */


bool step_clustered(const struct server *srv) {
        return srv->cluster_report != NULL;
}

/* What this node's connected trainers wait for on st, as report flags. */
static uint8_t cluster_waiter_flags(const struct step_state *st) {
        uint8_t flags = 0;
        const struct list *pos;
        for (pos = st->waiters.next; pos != &st->waiters; pos = pos->next) {
                const struct conn *c = list_entry(pos, struct conn, step_link);
                if (c->busy_type == CKPT_MSG_COMMIT)
                        flags |= PEER_REPORT_COMMIT;
                else if (c->busy_type == CKPT_MSG_SAVE_BEGIN)
                        flags |= PEER_REPORT_BEGIN;
        }
        return flags;
}

/* ... and what this node asks for st, a commit request included. */
static uint8_t cluster_flags(const struct step_state *st) {
        return cluster_waiter_flags(st) | (st->commit_asked ? PEER_REPORT_COMMIT : 0);
}

/*
 * Report (job, step) to the coordinator: the ranks on this node's disk
 * (from the catalog, which gets a rank's row once it is durable), whether
 * this node recorded the decision, and flags.  world_size and uid are used
 * when the catalog does not know the step.  0 or -errno (-ENOTCONN: the
 * coordinator cannot be reached now; the sync at the reconnect reports).
 */
static int cluster_report_step(struct server *srv, const char *job, uint64_t step,
                               uint32_t world_size, uint32_t uid, uint8_t flags) {
        _cleanup_free_ struct peer_msg *m = NULL;
        _cleanup_free_ uint32_t *ranks = NULL;
        struct ckpt_ckpt_entry e;
        size_t n = 0;

        if (!step_clustered(srv))
                return -ENOTCONN; /* shutting down */
        if (!(m = calloc(1, sizeof(*m))))
                return -ENOMEM;
        struct peer_step_report *p = &m->step_report;
        m->hdr.type = PEER_MSG_STEP_REPORT;
        p->job.len = (uint16_t)strlen(job);
        memcpy(p->job.str, job, p->job.len);
        p->step = step;
        /* (void): a job the catalog does not know keeps the caller's uid */
        (void)catalog_job_uid(srv->catalog, job, &uid);
        if (catalog_ckpt_get(srv->catalog, job, step, &e) == 0) {
                world_size = e.world_size;
                if (e.state == CKPT_STATE_COMMITTED) {
                        flags |= PEER_REPORT_COMMITTED;
                        p->committed_at = e.committed_at > 0 ? e.committed_at : 1;
                }
                if (e.ranks_local) {
                        ranks = calloc(e.ranks_local, sizeof(*ranks));
                        if (!ranks)
                                return -ENOMEM;
                        int r = catalog_ranks(srv->catalog, job, step, ranks, e.ranks_local, &n);
                        if (r < 0)
                                return r;
                }
        }
        if (world_size == 0)
                return -EINVAL; /* nothing known of the step here */
        if (n == 0 && flags == 0)
                return 0; /* nothing to say */
        p->uid = uid;
        p->world_size = world_size;
        p->flags = flags;
        /* several reports when this node holds more ranks than one names:
         * the coordinator adds them up; the flags go with the last one */
        size_t at = 0;
        do {
                size_t k = MIN(n - at, (size_t)PEER_REPORT_RANKS_MAX);
                memcpy(p->ranks, ranks ? ranks + at : p->ranks, k * sizeof(*ranks));
                p->nranks = (uint32_t)k;
                at += k;
                p->flags = at < n ? (flags & PEER_REPORT_COMMITTED) : flags;
                int r = srv->cluster_report(srv, m);
                if (r < 0)
                        return r;
        } while (at < n);
        return 0;
}

/* A COMMIT waiter in a cluster: fail it now if a rank saved here failed
 * (as a single node's commit does); else it waits for the coordinator. */
static void cluster_commit_check(struct conn *c, struct step_state *st) {
        const char *why;
        int r = step_reached(c->srv, st->job, st->step, CKPT_TIER_LOCAL, &why);
        if (r >= 0 || r == -ENOENT)
                return;
        wait_leave(c);
        conn_error(c, -EPROTO, "cannot commit step %" PRIu64 " of job '%s': %s", st->step,
                   st->job, why ? why : strerror(-r));
}

/* Answer the SAVE_BEGINs parked for the coordinator's word: go ahead
 * (error 0), or refuse their saves with the coordinator's reason. */
static void cluster_verdict(struct step_state *st, int error, const char *why) {
        struct server *srv = st->srv;
        struct list *pos, *tmp;

        struct list parked;

        st->verdict_asked = false;
        /* taken off first: failing a save below wakes the step's other
         * waiters, which may leave the list as it is walked */
        list_init(&parked);
        list_for_each_safe(pos, tmp, &st->waiters) {
                struct conn *c = list_entry(pos, struct conn, step_link);
                if (c->busy_type != CKPT_MSG_SAVE_BEGIN)
                        continue;
                list_unlink(&c->step_link);
                list_add_tail(&parked, &c->step_link);
        }
        while (!list_empty(&parked)) {
                struct conn *c = list_entry(parked.next, struct conn, step_link);
                struct save *s = c->pending;
                c->pending = NULL;
                wait_leave(c);
                if (!error) {
                        save_begin_reply(c, s);
                        continue;
                }
                conn_drop_save(c, s);
                s->conn = NULL;
                save_fail(s, error, "%s", why);
                conn_error(c, error, "%s", why);
                /* nothing of it was written: it leaves no trace */
                if (!ingest_open(&s->ingest) && s->chunks_pending == 0)
                        save_free(s);
        }
        if (!error || !list_empty(&st->saves))
                return;
        struct ckpt_ckpt_entry e;
        if (catalog_ckpt_get(srv->catalog, st->job, st->step, &e) == 0 && e.ranks_local == 0 &&
            e.state != CKPT_STATE_COMMITTED) {
                /* (void): an empty row; reconcile forgets it at the next start */
                (void)catalog_ckpt_delete(srv->catalog, st->job, st->step);
                st->commit_asked = false; /* its row went with the step's */
        }
        step_free_if_idle(st);
}

static void cluster_report_due(struct loop_timer *t) {
        struct step_state *st = container_of(t, struct step_state, report_due);
        if (!step_clustered(st->srv))
                return; /* shutting down */
        /* -ENOTCONN: the sync after the reconnect reports it */
        (void)cluster_report_step(st->srv, st->job, st->step, st->world_size, st->uid,
                                  cluster_flags(st));
}

static void cluster_ask_again(struct loop_timer *t) {
        struct step_state *st = container_of(t, struct step_state, ask_again);
        struct server *srv = st->srv;

        /* only for a trainer waiting in ckpt_commit, whose timeout wants
         * fresh news: a commit request alone is asked again by every report
         * and every sync, and asking every 500 ms for a node that is down
         * would never stop */
        if (!(cluster_waiter_flags(st) & PEER_REPORT_COMMIT) || st->everywhere)
                return; /* nobody waits any more */
        (void)cluster_report_step(srv, st->job, st->step, st->world_size, st->uid,
                                  cluster_flags(st));
        loop_timer_start(srv->loop, &st->ask_again, CLUSTER_ASK_AGAIN_MS, cluster_ask_again);
}

static void cluster_begin_timeout(struct conn *c) {
        struct step_state *st = c->wait_step;
        struct save *s = c->pending;

        c->pending = NULL;
        wait_leave(c);
        log_warn("job %s step %" PRIu64 ": no word from the coordinator (node 0) on world_size %u "
                 "within %u ms; saving without it",
                 st->job, st->step, st->world_size, CLUSTER_VERDICT_MS);
        save_begin_reply(c, s);
}

/* The decision reached this node: record it for the ranks held here. */
static void cluster_record(struct server *srv, const char *job, const struct peer_step_state *m) {
        struct ckpt_ckpt_entry e;

        if (catalog_ckpt_get(srv->catalog, job, m->step, &e) < 0 || e.ranks_local == 0)
                return; /* no rank of it here: nothing to record */
        if (e.state == CKPT_STATE_COMMITTED) {
                /* recorded before: say so again (the coordinator restarted,
                 * or the first word got lost with a link) */
                (void)cluster_report_step(srv, job, m->step, e.world_size, 0, 0);
                return;
        }
        if (e.world_size != m->world_size) {
                log_error("job %s step %" PRIu64 ": the coordinator decided it with world_size %u, "
                          "but this node holds ranks saved with world_size %u: not recorded",
                          job, m->step, m->world_size, e.world_size);
                return;
        }
        struct step_state *st = step_find(srv, job, m->step);
        if (!st && !(st = step_new(srv, job, m->step, e.world_size)))
                return; /* out of memory: the next report gets the word again */
        if (st->committing || st->committed)
                return;
        /* A rank saved here again (it replaces its copy) is still on its
         * way: the record must name what is on disk once it lands, so
         * the decision waits for it (step_notify() brings it back). */
        struct list *pos;
        for (pos = st->saves.next; pos != &st->saves; pos = pos->next) {
                const struct save *s = list_entry(pos, struct save, step_link);
                if (s->state != SAVE_DONE && s->state != SAVE_FAILED) {
                        st->decision_due = true;
                        st->decision_at = m->committed_at;
                        return;
                }
        }
        st->decision_due = false;
        commit_record_clear(&st->record);
        st->record.ranks = calloc(e.ranks_local, sizeof(uint32_t));
        size_t n = 0;
        if (!st->record.ranks ||
            catalog_ranks(srv->catalog, job, m->step, st->record.ranks, e.ranks_local, &n) < 0) {
                commit_record_clear(&st->record);
                step_free_if_idle(st);
                return;
        }
        snprintf(st->record.job, sizeof(st->record.job), "%s", job);
        st->record.step = m->step;
        st->record.world_size = e.world_size;
        st->record.committed_at = m->committed_at;
        st->record.nranks = (uint32_t)n;
        st->committing = true;
        st->commit_started_us = metrics_now_us();
        ingest_commit_step(&st->commit, srv->store, srv->catalog, &st->record, step_committed,
                           st);
}

/* Every node holding ranks recorded it: ckpt_commit returns. */
static void cluster_everywhere(struct step_state *st) {
        struct list *pos, *tmp;

        st->everywhere = true;
        /* carried out, also on a node whose own rank of it failed */
        commit_request_done(st);
        list_for_each_safe(pos, tmp, &st->waiters) {
                struct conn *c = list_entry(pos, struct conn, step_link);
                if (c->busy_type != CKPT_MSG_COMMIT)
                        continue;
                wait_leave(c);
                conn_reply_empty(c);
        }
        step_free_if_idle(st);
}

static void cluster_refused(struct step_state *st, int error, const char *why) {
        struct list *pos, *tmp;

        snprintf(st->cluster_why, sizeof(st->cluster_why), "%s", why);
        list_for_each_safe(pos, tmp, &st->waiters) {
                struct conn *c = list_entry(pos, struct conn, step_link);
                if (c->busy_type != CKPT_MSG_COMMIT)
                        continue;
                wait_leave(c);
                conn_error(c, error, "cannot commit step %" PRIu64 " of job '%s': %s", st->step,
                           st->job, why);
        }
        cluster_verdict(st, error, why); /* may free st */
}

void step_cluster_state(struct server *srv, const struct peer_step_state *m) {
        char job[CKPT_NAME_MAX + 1];

        memcpy(job, m->job.str, m->job.len);
        job[m->job.len] = 0;
        struct step_state *st = step_find(srv, job, m->step);
        switch (m->state) {
        case PEER_STEP_PENDING:
                if (!st)
                        return;
                snprintf(st->cluster_why, sizeof(st->cluster_why), "%s", m->message);
                cluster_verdict(st, 0, NULL);
                return;
        case PEER_STEP_DECIDED:
                if (st) {
                        /* node 0's word when it has one: whose record is missing */
                        snprintf(st->cluster_why, sizeof(st->cluster_why), "%s",
                                 m->message[0] ? m->message
                                               : "decided; not every node holding ranks of "
                                                 "it has recorded it");
                        cluster_verdict(st, 0, NULL);
                }
                cluster_record(srv, job, m);
                return;
        case PEER_STEP_EVERYWHERE:
                if (st)
                        cluster_everywhere(st);
                return;
        case PEER_STEP_REFUSED:
                log_error("job %s step %" PRIu64 ": the coordinator refuses this node's report: %s",
                          job, m->step, m->message);
                if (st)
                        cluster_refused(st, m->error, m->message);
                return;
        default:
                return;
        }
}

static int cluster_sync_step(void *userdata, const char *job, uint64_t step, uint8_t state) {
        struct server *srv = userdata;
        struct step_state *st = step_find(srv, job, step);
        (void)state;
        int r = cluster_report_step(srv, job, step, 0, 0, st ? cluster_flags(st) : 0);
        /* a step the catalog lists without ranks here is nothing to report;
         * a lost link stops the walk: the reconnect walks again */
        return r == -ENOTCONN ? r : 0;
}

void step_cluster_sync(struct server *srv) {
        struct list *pos, *tmp;

        if (!step_clustered(srv))
                return;
        if (catalog_ckpt_foreach(srv->catalog, NULL, cluster_sync_step, srv) == -ENOTCONN)
                return;
        /* steps this node knows only in memory: saves begun, none on disk */
        list_for_each_safe(pos, tmp, &srv->steps) {
                struct step_state *st = list_entry(pos, struct step_state, link);
                struct ckpt_ckpt_entry e;
                uint8_t flags = cluster_flags(st);
                if (!flags || (catalog_ckpt_get(srv->catalog, st->job, st->step, &e) == 0 &&
                               e.ranks_local > 0))
                        continue;
                if (cluster_report_step(srv, st->job, st->step, st->world_size, st->uid,
                                        flags) == -ENOTCONN)
                        return;
        }
}

void step_rank_landed(struct step_state *st) {
        if (step_clustered(st->srv) && !loop_timer_armed(&st->report_due))
                /* one report for the ranks that land in this turn of the
                 * loop, not one each (node 0 hears from every node) */
                loop_timer_start(st->srv->loop, &st->report_due, 0, cluster_report_due);
}

bool step_begin_parked(struct conn *c, struct save *s, bool ask) {
        struct step_state *st = s->step;
        struct server *srv = st->srv;

        if (ask && cluster_report_step(srv, st->job, st->step, st->world_size, st->uid,
                                       PEER_REPORT_BEGIN) == 0)
                st->verdict_asked = true;
        if (!st->verdict_asked)
                return false;
        /* answered by the coordinator's word (step_cluster_state), or at
         * CLUSTER_VERDICT_MS without it: saving never waits long for a
         * coordinator that is away */
        c->pending = s;
        wait_join(c, st, 0, CLUSTER_VERDICT_MS);
        return true;
}

/* ---- retention ------------------------------------------------------------------------------ */

/* May a step's files be removed now?  Not while anything works on it —
 * including a flush to the object store that has not finished: the local
 * files are its only source.  A flush that failed permanently does not
 * pin the disk (status shows the failure).  Pins are the policy's
 * (retention/). */
static bool step_idle(struct server *srv, const char *job, uint64_t step) {
        if (srv->flusher) {
                uint8_t rs = 0;
                if (flush_busy(srv->flusher, job, step))
                        return false;
                struct ckpt_ckpt_entry e;
                if (catalog_ckpt_get(srv->catalog, job, step, &e) == 0 &&
                    e.state == CKPT_STATE_COMMITTED &&
                    catalog_ckpt_remote_get(srv->catalog, job, step, &rs, NULL, 0) == 0 &&
                    rs != CATALOG_REMOTE_DONE && rs != CATALOG_REMOTE_FAILED)
                        return false;
        }
        return !step_in_use(srv, job, step);
}

bool step_in_use(struct server *srv, const char *job, uint64_t step) {
        struct step_state *st = step_find(srv, job, step);
        if (!st)
                return false;
        if (st->committing || !list_empty(&st->waiters))
                return true;
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &st->saves) {
                struct save *s = list_entry(pos, struct save, step_link);
                if (s->state != SAVE_DONE && !(s->state == SAVE_FAILED && s->chunks_pending == 0 &&
                                                  !ingest_open(&s->ingest)))
                        return true;
        }
        return false;
}

/*
 * The local tier's deleter under the one policy (retention/): keep the
 * newest `keep` committed steps of job, and uncommitted steps newer than
 * the newest committed one (a trainer that moved on will never commit the
 * older ones).  A step the policy drops goes only once nothing works on it.
 */
struct retention_policy step_retention_policy(const struct server *srv) {
        /* In a cluster, a step this node holds uncommitted may be one whose
         * decision has not reached it yet (it was down, or the link): it
         * stays until it is older than the kept committed steps. */
        struct retention_policy policy = srv->opts.retention;
        policy.uncommitted = step_clustered(srv) ? RETENTION_UNCOMMITTED_BELOW_KEPT
                                                 : RETENTION_UNCOMMITTED_BELOW_NEWEST;
        return policy;
}

void step_retention_run(struct server *srv, const char *job) {
        const struct retention_policy policy = step_retention_policy(srv);
        struct retention_plan plan;

        if (retention_plan_from_catalog(&plan, srv->catalog, job, &policy) <= 0) {
                retention_plan_clear(&plan);
                return;
        }
        for (size_t i = 0; i < plan.n; i++) {
                uint64_t step = plan.steps[i].step;
                if (!retention_verdict_drops(plan.verdicts[i]) || !step_idle(srv, job, step))
                        continue;
                struct step_state *st = step_find(srv, job, step);
                log_info("job %s step %" PRIu64 ": removed by retention (%s)%s", job, step,
                         retention_verdict_str(plan.verdicts[i]), st && st->commit_asked ? "; its commit request "
                         "(ckpt_commit_async) goes with it" : "");
                if (st)
                        step_state_free(st);
                if (srv->memtier)
                        memtier_drop_step(srv->memtier, MEMTIER_OWN, job, step);
                if (store_step_delete(srv->store, job, step) == 0)
                        /* (void): the files are gone; a row a fault left behind (catalog.c
                         * logs it) is forgotten by reconcile at the next start */
                        (void)catalog_ckpt_delete(srv->catalog, job, step);
                if (srv->peers)
                        peers_step_removed(srv->peers, job, step);
        }
        retention_plan_clear(&plan);
}
