/* SPDX-License-Identifier: MIT */
/*
 * suspect — a bad copy found after a target refused it (see suspect.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/heal.h"
#include "server/suspect.h"

/* heal's answer, handed on to peer/replication (error 0: the copy is good
 * again and goes to the target once more). */
struct suspect_repair {
        replication_repaired_fn done;
        void *ctx;
};

static void suspect_healed(void *userdata, int error, const char *msg) {
        struct suspect_repair *sr = userdata;
        (void)msg; /* heal logged it, naming the copy and the source */
        sr->done(sr->ctx, error);
        free(sr);
}

int suspect_repair(struct server *srv, const char *job, uint64_t step, uint32_t rank,
                   const struct rank_fault *fault, replication_repaired_fn done, void *ctx) {
        char why[CKPT_NAME_MAX + 160];
        struct suspect_repair *sr = calloc(1, sizeof(*sr));

        if (!sr)
                return -ENOMEM;
        sr->done = done;
        sr->ctx = ctx;
        snprintf(why, sizeof(why), "shard %s block %" PRId64 " %.100s", fault->shard,
                 fault->block, fault->why);
        int r = heal_copy(srv, job, step, rank, CATALOG_COPY_LOCAL, why, suspect_healed, sr);
        if (r < 0)
                free(sr);
        return r;
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
