/* SPDX-License-Identifier: MIT */
/* replica_area — the replica areas and their retention (see replica_area.h). */
#include <inttypes.h>
#include <stdlib.h>

#include "peer/replica_area.h"
#include "retention/retention.h"
#include "util/log.h"

struct replica_area *replica_area_for(struct replica_area *areas, size_t n, uint32_t src) {
        for (size_t i = 0; i < n; i++)
                if (areas[i].src == src)
                        return &areas[i];
        return NULL;
}

struct replica_area *replica_area_holding(struct replica_area *areas, size_t n, const char *job,
                                          uint64_t step, uint32_t rank) {
        for (size_t i = 0; i < n; i++)
                if (catalog_rank_exists(areas[i].catalog, job, step, rank) == 1)
                        return &areas[i];
        return NULL;
}

struct retention_policy replica_area_policy(const struct retention_policy *p) {
        struct retention_policy policy = *p;
        policy.uncommitted = RETENTION_UNCOMMITTED_KEEP;
        return policy;
}

/* The areas' deleter under the one policy (retention/). */
void replica_area_retention(struct store *store, struct catalog *catalog, const char *job,
                            const struct retention_policy *p) {
        const struct retention_policy policy = replica_area_policy(p);
        struct retention_plan plan;

        if (policy.keep == 0) /* keeps all: not even worth listing */
                return;
        if (retention_plan_from_catalog(&plan, catalog, job, &policy) <= 0) {
                retention_plan_clear(&plan);
                return;
        }
        for (size_t i = 0; i < plan.n; i++) {
                uint64_t step = plan.steps[i].step;
                if (!retention_verdict_drops(plan.verdicts[i]))
                        continue;
                if (store_step_delete(store, job, step) == 0) {
                        /* (void): the files are gone; a row a fault left behind (catalog.c
                         * logs it) is forgotten by reconcile at the next start */
                        (void)catalog_ckpt_delete(catalog, job, step);
                        log_info("peers: replica of job %s step %" PRIu64 " removed by retention "
                                 "(%s)", job, step, retention_verdict_str(plan.verdicts[i]));
                }
        }
        retention_plan_clear(&plan);
}
