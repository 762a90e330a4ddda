/* SPDX-License-Identifier: MIT */
/*
 * step — the life of a step on this node once its saves are under way:
 * what WAIT and COMMIT look at (the tiers a step reached), a single node's
 * commit, this node's side of the cluster-wide commit (reports to node 0,
 * recording its decisions, docs/commit.md) and the local tier's deleter
 * under the one retention policy (retention/).
 *
 * Ownership: step.c owns every struct step_state (srv->steps) and the
 * connections waiting on one (WAIT, COMMIT, a SAVE_BEGIN parked for node
 * 0's word) while they wait; the saves on st->saves are save.c's, which
 * tells this file when one changed (step_notify) or landed
 * (step_rank_landed).  What the step is in each tier is the catalog's;
 * the decision across nodes is step/coordinator's.  A commit request
 * (COMMIT_ASYNC, ckpt_commit_async) is st->commit_asked and a row of the
 * catalog's commit_requests, both written only here: it needs no
 * connection, and outlives the trainer and a restart of the daemon.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "ckpt-proto.h"
#include "peer-proto.h"
#include "io/loop.h"
#include "local/store.h"
#include "step/ingest.h"
#include "util/list.h"

struct server;
struct conn;
struct save;

struct step_state {
        struct list link;
        struct server *srv;
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t world_size;
        struct list saves;    /* struct save, by step_link */
        struct list waiters;  /* struct conn, by step_link */
        bool committing, committed;
        /* a trainer asked for the commit with COMMIT_ASYNC and it has not
         * happened yet: the step commits once every rank is saved, whoever
         * is still connected (recorded in the catalog, re-armed at start) */
        bool commit_asked;
        struct commit_record record;
        struct ingest_commit commit; /* record being written, while committing */
        /* the cluster-wide commit (docs/commit.md); conns parked in
         * SAVE_BEGIN for the coordinator's word on world_size are on
         * `waiters` too (busy_type CKPT_MSG_SAVE_BEGIN) */
        uint32_t uid;              /* whose saves these are */
        bool everywhere;           /* every node holding ranks recorded it */
        bool verdict_asked;        /* a BEGIN report went out, no word back yet */
        struct loop_timer ask_again; /* trainers wait in ckpt_commit: ask again */
        struct loop_timer report_due; /* ranks landed: one report for them all */
        /* node 0's decision came while a save of a rank of it was still
         * on its way here (saved again): recorded once that one lands */
        bool decision_due;
        int64_t decision_at;
        char cluster_why[CKPT_ERRMSG_MAX + 1]; /* the coordinator's last word on it */
        uint64_t commit_started_us; /* for the commit-latency histogram */
};

struct step_state *step_find(struct server *srv, const char *job, uint64_t step);
struct step_state *step_new(struct server *srv, const char *job, uint64_t step,
                            uint32_t world_size);
/* A save of st changed state (on disk, failed): answer whom it concerns. */
void step_notify(struct server *srv, struct step_state *st);
void step_state_free(struct step_state *st);
/* Free st if nothing needs it in memory any more: no save, no waiter, no
 * commit record being written, no commit request still to carry out. */
void step_free_if_idle(struct step_state *st);
void step_state_free_all(struct server *srv);

void step_handle_wait(struct conn *c, const struct ckpt_req_wait *req);
void step_handle_commit(struct conn *c, const struct ckpt_req_job_step *req);
/* COMMIT_ASYNC: record that (job, step) is to be committed once every rank
 * is saved, and answer at once. */
void step_handle_commit_async(struct conn *c, const struct ckpt_req_job_step *req);
/* At start, after reconcile and once the cluster's links are set up: take
 * up the commit requests recorded before the restart (those whose ranks
 * are all saved commit now; in a cluster node 0 hears of them). */
void step_commit_requests_resume(struct server *srv);
/* The flusher or the replication moved (job, step): wake its waiters. */
void step_changed(struct server *srv, const char *job, uint64_t step);
/* Remove the local steps of job that retention (retention/) drops and
 * nothing works on any more; run after each commit and flush, after a pin
 * changes, at start and on reload. */
void step_retention_run(struct server *srv, const char *job);
/* The local tier's policy, its mode for uncommitted steps set. */
struct retention_policy step_retention_policy(const struct server *srv);
/* Something works on (job, step) in memory: a save not finished, a commit
 * being written, a WAIT or COMMIT waiting on it.  Retention and DELETE
 * leave such a step alone. */
bool step_in_use(struct server *srv, const char *job, uint64_t step);

/* The cluster-wide commit (node_count > 1): */
bool step_clustered(const struct server *srv);
/* A rank of st is on this node's disk: node 0 hears of it (one report for
 * the ranks landing in a turn of the loop). */
void step_rank_landed(struct step_state *st);
/* Before SAVE_BEGIN's reply: ask node 0 whether s's world_size is the
 * cluster's (ask: the step's first save here).  true: the reply is parked
 * until its word (or CLUSTER_VERDICT_MS); false: answer now. */
bool step_begin_parked(struct conn *c, struct save *s, bool ask);
/* The coordinator's word on a step (STEP_STATE) for this node. */
void step_cluster_state(struct server *srv, const struct peer_step_state *m);
/* The control link to the coordinator is up (or this node is it and just
 * started): report every step this node holds ranks of, and what its
 * trainers wait for. */
void step_cluster_sync(struct server *srv);
