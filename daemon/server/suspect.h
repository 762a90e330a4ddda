/* SPDX-License-Identifier: MIT */
/*
 * suspect — what the server does when a copy of this node's own rank
 * turned out bad after a replication target refused it (the target found a
 * block failing its CRC32C; peer/replication re-read the copy here and it
 * fails too; docs/replication.md, "A refused replica"): the job's error is
 * recorded (log naming the rank, shard, block and the refusing node; the
 * catalog's error count; the last error `ckptctl status` shows the job's
 * owner), and the copy is handed to the repair.
 *
 * The repair itself is heal's (daemon/server/heal.h, heal_copy(): replace
 * the bad copy with a good one from a neighbour or the object store; it
 * records the fault in the catalog).  Repaired, the rank goes to the target
 * again; with no good copy anywhere the step stays refused (DEGRADED) for
 * that target and ckpt_wait(REPLICATED) fails with the reason.
 *
 * Loop thread only.
 */
#pragma once

#include <stdint.h>

#include "peer/replication.h"
#include "server/server.h"

/* The peers' copy_bad hook (peers_set_copy_bad(), userdata: the struct
 * server): record the bad copy, then suspect_repair().  0: done(ctx, error)
 * runs later; -errno: it cannot be repaired (done() is not called). */
int suspect_copy_bad(void *userdata, const char *job, uint64_t step, uint32_t rank,
                     uint32_t node, const struct rank_fault *fault, const char *refusal,
                     replication_repaired_fn done, void *ctx);

/*
 * Repair this node's bad copy of (job, step, rank) from another copy
 * (heal_copy of the local tier's copy): 0, and done(ctx, error) runs
 * exactly once later, error 0 when the copy is good again (which sends it
 * to the target again), -EIO when no good copy was found, -ECANCELED at
 * shutdown; or -errno now (-ENOENT: no local copy; done() is not called).
 */
int suspect_repair(struct server *srv, const char *job, uint64_t step, uint32_t rank,
                   const struct rank_fault *fault, replication_repaired_fn done, void *ctx);
