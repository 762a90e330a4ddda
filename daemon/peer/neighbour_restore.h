/* SPDX-License-Identifier: MIT */
/*
 * neighbour_restore — restore of this node's ranks from its neighbours,
 * both sides of it.
 *
 *   asking (the connecting side): LIST_REQ to the targets, what they hold
 *            of this node; GET_RANK for the ranks missing here, spread over
 *            the links that hold them, up to TRANSFER_WINDOW per link; the
 *            answers land in the local tier through peer/transfer.  At
 *            start (restore_on_start) every target is asked as its link
 *            comes up.  A single rank a client waits for (peers_fetch_rank)
 *            is asked of target after target.
 *   answering (the accepting side): LIST_REP from the replica areas,
 *            GET_RANK answered with a rank transfer from the local tier or
 *            a replica area.
 *
 * Uses peer/transfer for the ranks, peer/link for the messages and
 * peer/replica_area for what this node holds of others.  A full listing
 * of a target goes up through the listed hook (peers.c hands it to
 * peer/replication, which re-seeds what the target lacks).
 *
 * Ownership: struct neighbour_restore belongs to peers.c, which fills the
 * fields above "restore-owned"; restore jobs and the ranks asked for are
 * this module's.
 *
 * Loop thread only.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "local/store.h"
#include "peer/link.h"
#include "peer/replica_area.h"
#include "peer/rkeys.h"
#include "peer/transfer.h"
#include "util/list.h"

struct restore_job;

typedef void restore_done_fn(void *userdata, int error, uint32_t ranks, const char *message);

/* The asking side's state of one target node. */
struct restore_target {
        struct dialer *d;          /* its link (borrowed) */
        /* restore-owned */
        bool list_sent;
        uint32_t list_stream;
        struct restore_job *rj_listing;
        /* what the listing says this node's ranks the target holds: at its
         * end, committed steps of ours it lacks are sent again */
        struct rkeys held;
        bool listing_all;          /* the listing covers every job */
        struct list gets;          /* struct rget queued on this link */
        struct list gets_active;   /* struct rget asked, RANK_END not yet here */
        uint32_t ngets_active;
};

struct neighbour_restore {
        struct store *store;       /* the local tier: where restored ranks land */
        struct memtier *memory;    /* what GET_RANK answers from first (NULL: tier off) */
        struct catalog *catalog;
        uint32_t self;
        struct replica_area *areas; /* borrowed */
        size_t nareas;
        bool restore_on_start;
        /* a step landed in the local tier from a neighbour (the tier
         * above tells the object-store tier: nothing to flush); NULL: none */
        void (*restored)(void *userdata, const char *job, uint64_t step);
        void *restored_userdata;
        /* the link of target slot needs a pump (peers.c) */
        void (*pump)(void *owner, size_t slot);
        /* target slot listed every rank of this node it holds */
        void (*listed)(void *owner, size_t slot, const struct rkeys *held);
        void *owner;
        struct restore_target targets[LINK_NODES_MAX];
        size_t ntargets;
        /* restore-owned */
        struct list restores;
        struct restore_job *startup_rj; /* the restore targets join as they come up */
};

void neighbour_restore_init(struct neighbour_restore *nr);
void neighbour_restore_target_init(struct neighbour_restore *nr, size_t slot, struct dialer *d);
/* Drop every ask without a word (shutting down, before the links close). */
void neighbour_restore_clear(struct neighbour_restore *nr);
/* Drop every restore job without a word (shutting down, after the links). */
void neighbour_restore_drop_jobs(struct neighbour_restore *nr);

/* peers_restore() and peers_fetch_rank() (see peers.h). */
int neighbour_restore_start(struct neighbour_restore *nr, const char *job, uint64_t step,
                            restore_done_fn *done, void *userdata);
/* replacing: a corrupt copy is being replaced (server/heal.c), in the
 * replica area `into` or (NULL) the local tier; the rank is then no news
 * to the replication or object-store state of its step. */
int neighbour_restore_fetch_rank(struct neighbour_restore *nr, const char *job, uint64_t step,
                                 uint32_t rank, bool replacing, struct replica_area *into,
                                 restore_done_fn *done, void *userdata);

/* Target slot's link came up / went down. */
void neighbour_restore_connected(struct neighbour_restore *nr, size_t slot);
void neighbour_restore_disconnected(struct neighbour_restore *nr, size_t slot);
/* Ask target slot for ranks on l while its window has room.  false: the
 * link closed meanwhile. */
bool neighbour_restore_pump(struct neighbour_restore *nr, size_t slot, struct plink *l);

/* The messages of a restore on l. */
bool neighbour_restore_asked(struct neighbour_restore *nr, struct plink *l, uint32_t stream);
/* The replica area the rank asked for on l's stream is to land in, or
 * NULL (the local tier). */
struct replica_area *neighbour_restore_into(struct neighbour_restore *nr, struct plink *l,
                                            uint32_t stream, bool *replacing);
/* RANK_END of rx: an asked-for rank is all here, rx reports to its restore. */
void neighbour_restore_rank_end(struct neighbour_restore *nr, struct plink *l, struct rx *rx);
/* ERROR about a rank asked for: true if it was one (handled). */
bool neighbour_restore_error(struct neighbour_restore *nr, struct plink *l,
                             const struct peer_msg *m);
void neighbour_restore_list_reply(struct neighbour_restore *nr, struct plink *l,
                                  const struct peer_msg *m);
void neighbour_restore_answer_list(struct neighbour_restore *nr, struct plink *l,
                                   const struct peer_msg *req);
void neighbour_restore_answer_get(struct neighbour_restore *nr, struct plink *l,
                                  const struct peer_msg *req);
/* A received rank's step is committed here (a replica or a restore): a
 * copy of it recorded corrupt is good again; and for a restore, the
 * neighbour it came from (and the object store) hold it already. */
void neighbour_restore_landed(struct neighbour_restore *nr, const struct rx *rx);
