/* SPDX-License-Identifier: MIT */
/*
 * replication — the policy of the neighbour tier's connecting side: which
 * committed steps each replication target is owed (catalog schema 3),
 * pushing their ranks over the target's link (up to TRANSFER_WINDOW in
 * flight), the catch-up of what is owed when a link comes up, re-seeding
 * a target that lost its replicas, and the replication state a step's
 * acknowledged ranks move to "replicated".
 *
 * Uses peer/transfer to send each rank and peer/link for the targets'
 * links (a struct dialer each, borrowed from peers.c).  Knows nothing of
 * restores: what a target's listing says it holds arrives as an rkeys.
 *
 * Ownership: struct replication belongs to peers.c, which fills the
 * fields above "replication-owned"; the steps owed (struct rstep) are
 * this module's.
 *
 * Loop thread only.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "io/worker.h"
#include "local/rank_check.h"
#include "local/store.h"
#include "memory/memtier.h"
#include "peer/link.h"
#include "peer/rkeys.h"
#include "util/list.h"

/* What is owed to one target node. */
struct repl_target {
        struct dialer *d;          /* its link (borrowed) */
        /* replication-owned */
        struct list steps;         /* struct rstep owed to this node, oldest first */
        uint32_t steps_pending;    /* of them, the refused (failed) ones included */
        uint32_t steps_failed;     /* of them, refused or failed: reported, not retried yet */
};

/* This node's copy of (job, step, rank) failed its re-check after target
 * `node` refused it (fault: where; refusal: the target's reason).  Repair
 * it from another copy: 0, and done(ctx, error) runs exactly once later
 * (error 0: the copy is good again and is sent again); or -errno now: it
 * cannot be repaired, and the step stays refused for that target. */
typedef void (*replication_repaired_fn)(void *ctx, int error);
typedef int (*replication_copy_bad_fn)(void *userdata, const char *job, uint64_t step,
                                       uint32_t rank, uint32_t node,
                                       const struct rank_fault *fault, const char *refusal,
                                       replication_repaired_fn done, void *ctx);

struct replication {
        struct store *store;       /* the local tier: what is replicated */
        struct memtier *memory;    /* its newest steps in memory (NULL: tier off) */
        struct catalog *catalog;
        uint32_t self;
        uint32_t keep;             /* committed steps kept per job on a target */
        /* the link of target slot needs a pump (peers.c: the restore's
         * asks first, then this module's sends) */
        void (*pump)(void *owner, size_t slot);
        void *owner;
        /* the step's replication state moved */
        void (*on_changed)(void *userdata, const char *job, uint64_t step);
        void *userdata;
        /* re-checks of a refused rank run here */
        struct worker_pool *workers;
        /* this node's copy of a refused rank is bad (NULL: nothing can
         * repair it here) */
        replication_copy_bad_fn copy_bad;
        void *copy_bad_userdata;
        struct repl_target targets[LINK_NODES_MAX];
        size_t ntargets;
};

/* Set up target slot of r for node d->node. */
void replication_target_init(struct replication *r, size_t slot, struct dialer *d);
/* Forget every step owed (shutting down). */
void replication_clear(struct replication *r);

/* A step was committed here: record it pending for every target and send. */
int replication_step_committed(struct replication *r, const char *job, uint64_t step);
/* 1: every target holds every local rank; 0: not yet; -ENOENT no such step;
 * another -errno: a target refused a rank for its CRC and it is not being
 * sent again.  why (size bytes) names the target, the rank and the reason
 * of a failure, also of one that the next connect retries (then 0, and ""
 * when nothing failed). */
int replication_replicated(struct replication *r, const char *job, uint64_t step, char *why,
                           size_t size);

/* Retention removed (job, step) here: a step a target refused is owed no
 * more (one still on its way is dropped when its rank cannot be read). */
void replication_step_removed(struct replication *r, const char *job, uint64_t step);
/* Steps of job owed to the targets, summed over them (refused ones
 * included, as steps_pending counts them). */
uint32_t replication_job_owed(const struct replication *r, const char *job);
/* Target slot's link came up: queue everything owed to it, from the catalog. */
void replication_connected(struct replication *r, size_t slot);
/* Start rank transfers of the steps owed to target slot, oldest first,
 * until its link l has TRANSFER_WINDOW open. */
void replication_pump(struct replication *r, size_t slot, struct plink *l);
/* RANK_ACK on l. */
void replication_rank_acked(struct replication *r, struct plink *l, const struct peer_msg *m);
/* Target slot listed every rank of this node it holds (held): what it
 * lacks of the steps it should keep is owed again. */
void replication_reseed(struct replication *r, size_t slot, const struct rkeys *held);
