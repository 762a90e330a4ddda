/* SPDX-License-Identifier: MIT */
/*
 * suspect — a bad copy found after a target refused it (see suspect.h).
 */
#include <errno.h>
#include <inttypes.h>

#include "server/suspect.h"

int suspect_repair(struct server *srv, const char *job, uint64_t step, uint32_t rank,
                   const struct rank_fault *fault, replication_repaired_fn done, void *ctx) {
        /* wire heal_rank(srv, job, step, rank, ...) here: issue 12 */
        (void)srv;
        (void)job;
        (void)step;
        (void)rank;
        (void)fault;
        (void)done;
        (void)ctx;
        return -EOPNOTSUPP;
}

int suspect_copy_bad(void *userdata, const char *job, uint64_t step, uint32_t rank,
                     uint32_t node, const struct rank_fault *fault, const char *refusal,
                     replication_repaired_fn done, void *ctx) {
        struct server *srv = userdata;

        server_job_error(srv, job, "job %s step %" PRIu64 " rank %u: this node's copy is bad: "
                         "shard %s block %" PRId64 " %s (found when node %u refused it: %s)",
                         job, step, rank, fault->shard, fault->block, fault->why, node, refusal);
        return suspect_repair(srv, job, step, rank, fault, done, ctx);
}
