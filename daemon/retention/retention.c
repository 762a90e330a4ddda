/* SPDX-License-Identifier: MIT */
/* retention — the one retention policy of every tier (see retention.h). */
#include <errno.h>
#include <stdlib.h>

#include "catalog/catalog.h"
#include "retention/retention.h"

const char *retention_verdict_str(enum retention_verdict v) {
        switch (v) {
        case RETENTION_KEEP_NEWEST:
                return "among the newest kept";
        case RETENTION_KEEP_UNCOMMITTED:
                return "not committed, kept";
        case RETENTION_KEEP_PINNED:
                return "pinned";
        case RETENTION_KEEP_DAMAGED:
                return "damaged, kept besides the newest";
        case RETENTION_DROP_OLD:
                return "older than the newest kept";
        case RETENTION_DROP_ABANDONED:
                return "not committed, older than a committed step";
        }
        return "unknown";
}

bool retention_seen_enough(const struct retention_policy *p, uint32_t committed_seen) {
        return p->keep > 0 && committed_seen >= p->keep;
}

/* A step that is not known to be committed, with `committed_seen` newer
 * committed steps above it. */
static bool uncommitted_drops(const struct retention_policy *p, enum retention_commit commit,
                              uint32_t committed_seen) {
        /* below the cut whether it is committed does not matter: it goes
         * (the store never learns it); above it an unknown step stays */
        if (commit == RETENTION_UNKNOWN)
                return retention_seen_enough(p, committed_seen);
        switch (p->uncommitted) {
        case RETENTION_UNCOMMITTED_KEEP:
                return false;
        case RETENTION_UNCOMMITTED_BELOW_NEWEST:
                return committed_seen > 0;
        case RETENTION_UNCOMMITTED_BELOW_KEPT:
                return retention_seen_enough(p, committed_seen);
        }
        return false;
}

int retention_decide(const struct retention_policy *p, const struct retention_step *steps,
                     size_t n, enum retention_verdict *verdicts) {
        uint32_t committed_seen = 0;
        int drops = 0;

        if (n == 0)
                return 0;
        if (!p || !steps || !verdicts)
                return -EINVAL;
        for (size_t i = 1; i < n; i++)
                if (steps[i].step >= steps[i - 1].step)
                        return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                enum retention_verdict v;
                if (steps[i].commit == RETENTION_COMMITTED && steps[i].damaged) {
                        /* kept while an intact step could still be missing
                         * below it, never counted: repaired, it becomes one
                         * of the newest again */
                        v = retention_seen_enough(p, committed_seen) ? RETENTION_DROP_OLD
                                                                     : RETENTION_KEEP_DAMAGED;
                } else if (steps[i].commit == RETENTION_COMMITTED) {
                        /* a pinned step counts as one of the kept: pinning an old
                         * step does not make retention keep one more */
                        committed_seen++;
                        v = p->keep == 0 || committed_seen <= p->keep ? RETENTION_KEEP_NEWEST
                                                                      : RETENTION_DROP_OLD;
                } else {
                        v = uncommitted_drops(p, steps[i].commit, committed_seen)
                                    ? RETENTION_DROP_ABANDONED
                                    : RETENTION_KEEP_UNCOMMITTED;
                }
                if (retention_verdict_drops(v) && steps[i].pinned)
                        v = RETENTION_KEEP_PINNED;
                if (retention_verdict_drops(v))
                        drops++;
                verdicts[i] = v;
        }
        return drops;
}

struct plan_list {
        struct retention_step *steps;
        size_t n, cap;
};

static int plan_collect(void *userdata, const char *job, uint64_t step, uint8_t state) {
        struct plan_list *l = userdata;
        (void)job;
        if (l->n == l->cap) {
                size_t cap = l->cap ? l->cap * 2 : 32;
                struct retention_step *n = realloc(l->steps, cap * sizeof(*n));
                if (!n)
                        return -ENOMEM;
                l->steps = n;
                l->cap = cap;
        }
        l->steps[l->n++] = (struct retention_step){
                .step = step,
                .commit = state == CKPT_STATE_COMMITTED ? RETENTION_COMMITTED
                                                        : RETENTION_UNCOMMITTED,
        };
        return 0;
}

void retention_pins_from_catalog(struct retention_step *steps, size_t n, struct catalog *catalog,
                                 const char *job) {
        /* after the listing, not inside its callback: one statement at a time */
        for (size_t i = 0; i < n; i++)
                steps[i].pinned = catalog_pinned(catalog, job, steps[i].step) == 1;
}

void retention_damage_from_catalog(struct retention_step *steps, size_t n,
                                   struct catalog *catalog, const char *job) {
        for (size_t i = 0; i < n; i++)
                steps[i].damaged = steps[i].commit == RETENTION_COMMITTED &&
                                   catalog_ckpt_damaged(catalog, job, steps[i].step) == 1;
}

int retention_plan_from_catalog(struct retention_plan *plan, struct catalog *catalog,
                                const char *job, const struct retention_policy *p) {
        struct plan_list l = { 0 };

        *plan = (struct retention_plan){ 0 };
        int r = catalog_ckpt_foreach(catalog, job, plan_collect, &l);
        if (r < 0) {
                free(l.steps);
                return r;
        }
        plan->steps = l.steps;
        plan->n = l.n;
        if (l.n == 0)
                return 0;
        plan->verdicts = calloc(l.n, sizeof(*plan->verdicts));
        if (!plan->verdicts)
                return -ENOMEM;
        retention_pins_from_catalog(plan->steps, plan->n, catalog, job);
        retention_damage_from_catalog(plan->steps, plan->n, catalog, job);
        return retention_decide(p, plan->steps, plan->n, plan->verdicts);
}

void retention_plan_clear(struct retention_plan *plan) {
        free(plan->steps);
        free(plan->verdicts);
        *plan = (struct retention_plan){ 0 };
}
