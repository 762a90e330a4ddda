/* SPDX-License-Identifier: MIT */
/* retention — the one retention policy of every tier (see retention.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
        case RETENTION_KEEP_EVERY:
                return "the first of its keep_every window";
        case RETENTION_DROP_OLD:
                return "older than the newest kept";
        case RETENTION_DROP_ABANDONED:
                return "not committed, older than a committed step";
        }
        return "unknown";
}

/* Are `committed_seen` newer committed steps the newest `keep` already? */
static bool below_kept(const struct retention_policy *p, uint32_t committed_seen) {
        return p->keep > 0 && committed_seen >= p->keep;
}

bool retention_seen_enough(const struct retention_policy *p, uint32_t committed_seen) {
        /* a window needs every older step known: its first one may be the oldest */
        if (p->every_steps || p->every_seconds)
                return false;
        return below_kept(p, committed_seen);
}

/* The keep_every window of a committed step (0 without one). */
static uint64_t every_window(const struct retention_policy *p, const struct retention_step *s) {
        if (p->every_steps)
                return s->step / p->every_steps;
        if (p->every_seconds)
                return s->committed_at > 0 ? (uint64_t)s->committed_at / p->every_seconds : 0;
        return 0;
}

void retention_reason(char *buf, size_t n, const struct retention_policy *p,
                      const struct retention_step *s, enum retention_verdict v) {
        char every[32];
        uint64_t w = every_window(p, s);

        retention_every_format(p, every, sizeof(every));
        switch (v) {
        case RETENTION_KEEP_NEWEST:
                if (p->keep == 0)
                        snprintf(buf, n, "kept: keep_latest 0 keeps all");
                else
                        snprintf(buf, n, "kept: newest %u", p->keep);
                return;
        case RETENTION_KEEP_UNCOMMITTED:
                snprintf(buf, n, "kept: not committed, may still be");
                return;
        case RETENTION_KEEP_PINNED:
                snprintf(buf, n, "kept: pinned");
                return;
        case RETENTION_KEEP_DAMAGED:
                snprintf(buf, n, "kept: damaged (a rank missing here), not counted among the "
                                 "newest %u", p->keep);
                return;
        case RETENTION_KEEP_EVERY:
                if (p->every_steps) {
                        snprintf(buf, n, "kept: every %" PRIu64 " steps (window %" PRIu64 "-%" PRIu64
                                         ")", p->every_steps, w * p->every_steps,
                                 w * p->every_steps + p->every_steps - 1);
                } else {
                        time_t t = (time_t)(w * p->every_seconds);
                        struct tm tm;
                        char when[32] = "?";
                        if (gmtime_r(&t, &tm))
                                strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
                        snprintf(buf, n, "kept: every %s (window from %s UTC)", every, when);
                }
                return;
        case RETENTION_DROP_OLD:
                if (p->every_steps || p->every_seconds)
                        snprintf(buf, n, "goes: older than the newest %u and not the first of "
                                         "its window (every %s)", p->keep, every);
                else
                        snprintf(buf, n, "goes: older than the newest %u", p->keep);
                return;
        case RETENTION_DROP_ABANDONED:
                snprintf(buf, n, "goes: not committed, and a newer step is");
                return;
        }
        snprintf(buf, n, "unknown");
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
                return below_kept(p, committed_seen);
        }
        return false;
}

/* Mark the committed intact steps that open a keep_every window: walking
 * oldest first, a step whose window is later than every older step's. */
static void every_firsts(const struct retention_policy *p, const struct retention_step *steps,
                         size_t n, bool *first) {
        bool any = false;
        uint64_t last = 0;

        for (size_t i = n; i-- > 0;) {
                first[i] = false;
                if (steps[i].commit != RETENTION_COMMITTED || steps[i].damaged)
                        continue;
                uint64_t w = every_window(p, &steps[i]);
                if (!any || w > last) {
                        first[i] = true;
                        last = w;
                        any = true;
                }
        }
}

int retention_decide(const struct retention_policy *p, const struct retention_step *steps,
                     size_t n, enum retention_verdict *verdicts) {
        uint32_t committed_seen = 0;
        int drops = 0;

        if (n == 0)
                return 0;
        if (!p || !steps || !verdicts || (p->every_steps && p->every_seconds))
                return -EINVAL;
        for (size_t i = 1; i < n; i++)
                if (steps[i].step >= steps[i - 1].step)
                        return -EINVAL;
        bool *first = NULL;
        if (p->every_steps || p->every_seconds) {
                first = calloc(n, sizeof(*first));
                if (!first)
                        return -ENOMEM;
                every_firsts(p, steps, n, first);
        }
        for (size_t i = 0; i < n; i++) {
                enum retention_verdict v;
                if (steps[i].commit == RETENTION_COMMITTED && steps[i].damaged) {
                        /* kept while an intact step could still be missing
                         * below it, never counted: repaired, it becomes one
                         * of the newest again */
                        v = below_kept(p, committed_seen) ? RETENTION_DROP_OLD
                                                                     : RETENTION_KEEP_DAMAGED;
                } else if (steps[i].commit == RETENTION_COMMITTED) {
                        /* a pinned step counts as one of the kept: pinning an old
                         * step does not make retention keep one more */
                        committed_seen++;
                        v = p->keep == 0 || committed_seen <= p->keep ? RETENTION_KEEP_NEWEST
                            : first && first[i]                      ? RETENTION_KEEP_EVERY
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
        free(first);
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

void retention_times_from_catalog(struct retention_step *steps, size_t n,
                                  struct catalog *catalog, const char *job) {
        for (size_t i = 0; i < n; i++) {
                struct ckpt_ckpt_entry e;
                steps[i].committed_at = catalog_ckpt_get(catalog, job, steps[i].step, &e) == 0
                                                ? e.committed_at
                                                : 0;
        }
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
        if (p->every_seconds)
                retention_times_from_catalog(plan->steps, plan->n, catalog, job);
        return retention_decide(p, plan->steps, plan->n, plan->verdicts);
}

void retention_plan_clear(struct retention_plan *plan) {
        free(plan->steps);
        free(plan->verdicts);
        *plan = (struct retention_plan){ 0 };
}
