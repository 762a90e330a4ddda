/* SPDX-License-Identifier: MIT */
/* retention_request — RETENTION: what retention keeps and removes, and why
 * (see retention_request.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "retention/retention.h"
#include "server/conn.h"
#include "server/retention_request.h"
#include "server/server.h"
#include "server/step.h"
#include "util/cleanup.h"
#include "util/log.h"

struct report {
        struct ckpt_rep_retention *out;
        bool dry_run;
        const struct ckpt_req_retention *req; /* its preview policy */
};

/* A tier's policy, or the preview's in its place (the tier's mode for
 * uncommitted steps kept). */
static struct retention_policy report_policy(const struct report *rp,
                                             struct retention_policy tier) {
        if (rp->req->preview) {
                tier.keep = rp->req->keep_latest;
                tier.every_steps = rp->req->every_steps;
                tier.every_seconds = rp->req->every_seconds;
        }
        return tier;
}

static void report_add(struct report *rp, const char *job, uint8_t tier, uint32_t area,
                       const struct retention_policy *p, const struct retention_step *s,
                       enum retention_verdict v) {
        struct ckpt_rep_retention *out = rp->out;
        bool goes = retention_verdict_drops(v);

        if (out->count < CKPT_RETENTION_PAGE) {
                struct ckpt_retention_entry *e = &out->entries[out->count++];
                (void)ckpt_name_set(&e->job, job);
                e->tier = tier;
                e->area = area;
                e->step = s->step;
                e->committed_at = s->committed_at > 0 ? s->committed_at : 0;
                e->action = !goes        ? CKPT_RETENTION_KEPT
                            : rp->dry_run ? CKPT_RETENTION_GOES
                            : tier == CKPT_RETENTION_STORE ? CKPT_RETENTION_QUEUED
                                                           : CKPT_RETENTION_BUSY;
                retention_reason(e->reason, sizeof(e->reason), p, s, v);
        }
        out->total++;
}

/* A tier whose steps are a catalog's rows: decide, report, and (not a
 * dry run) let the tier's own pass remove them, then see which went. */
static void report_catalog_tier(struct report *rp, struct server *srv, const char *job,
                                uint8_t tier, const struct replica_area *area) {
        struct catalog *catalog = area ? area->catalog : srv->catalog;
        const struct retention_policy policy = report_policy(
                rp, area ? replica_area_policy(peers_retention(srv->peers))
                         : step_retention_policy(srv));
        struct retention_plan plan;

        if (retention_plan_from_catalog(&plan, catalog, job, &policy) < 0) {
                retention_plan_clear(&plan);
                return;
        }
        /* commit times for the report, whatever the policy reads */
        retention_times_from_catalog(plan.steps, plan.n, catalog, job);
        uint32_t first = rp->out->count;
        for (size_t i = 0; i < plan.n; i++)
                report_add(rp, job, tier, area ? area->src : 0, &policy, &plan.steps[i],
                           plan.verdicts[i]);
        if (!rp->dry_run) {
                if (area)
                        replica_area_retention(area->store, area->catalog, job,
                                               peers_retention(srv->peers));
                else
                        step_retention_run(srv, job);
                for (uint32_t i = first; i < rp->out->count; i++) {
                        struct ckpt_retention_entry *e = &rp->out->entries[i];
                        struct ckpt_ckpt_entry row;
                        if (e->action == CKPT_RETENTION_BUSY &&
                            catalog_ckpt_get(catalog, job, e->step, &row) == -ENOENT) {
                                e->action = CKPT_RETENTION_REMOVED;
                                rp->out->removed++;
                        }
                }
        }
        retention_plan_clear(&plan);
}

/* The store, on the coordinator: the steps this node's catalog records
 * as in the store, under the store's policy. */
static void report_store(struct report *rp, struct server *srv, const char *job) {
        if (!srv->flusher || !flush_runs_retention(srv->flusher) ||
            (rp->req->preview && rp->req->every_seconds))
                return;
        const struct retention_policy policy =
                report_policy(rp, flush_retention_policy(srv->flusher));
        struct retention_plan plan;
        if (retention_plan_from_catalog(&plan, srv->catalog, job, &policy) < 0 || plan.n == 0) {
                retention_plan_clear(&plan);
                return;
        }
        /* keep only the rows in the store, as committed there */
        size_t n = 0;
        for (size_t i = 0; i < plan.n; i++) {
                uint8_t rs = 0;
                if (plan.steps[i].commit == RETENTION_COMMITTED &&
                    catalog_ckpt_remote_get(srv->catalog, job, plan.steps[i].step, &rs, NULL, 0) ==
                            0 &&
                    rs == CATALOG_REMOTE_DONE)
                        plan.steps[n++] = plan.steps[i];
        }
        retention_times_from_catalog(plan.steps, n, srv->catalog, job);
        if (retention_decide(&policy, plan.steps, n, plan.verdicts) >= 0)
                for (size_t i = 0; i < n; i++)
                        report_add(rp, job, CKPT_RETENTION_STORE, 0, &policy, &plan.steps[i],
                                   plan.verdicts[i]);
        if (!rp->dry_run)
                flush_retention_run(srv->flusher, job);
        retention_plan_clear(&plan);
}

static void report_job(struct report *rp, struct server *srv, const char *job) {
        size_t n = 0;
        const struct replica_area *areas = srv->peers ? peers_areas(srv->peers, &n) : NULL;

        report_catalog_tier(rp, srv, job, CKPT_RETENTION_LOCAL, NULL);
        for (size_t i = 0; i < n; i++)
                report_catalog_tier(rp, srv, job, CKPT_RETENTION_REPLICA, &areas[i]);
        report_store(rp, srv, job);
}

void retention_request_handle(struct conn *c, const struct ckpt_req_retention *req) {
        struct server *srv = c->srv;
        _cleanup_free_ struct ckpt_reply *rep = calloc(1, sizeof(*rep));
        _cleanup_free_ struct ckpt_rep_job_list *page = calloc(1, sizeof(*page));
        struct report rp = { .dry_run = req->dry_run, .req = req };
        int r;

        if (!rep || !page) {
                conn_error(c, -ENOMEM, "out of memory");
                return;
        }
        rp.out = &rep->retention;
        if (req->job.len) {
                /* its owner or root, for a look and to apply alike */
                uint32_t owner;
                r = catalog_job_uid(srv->catalog, req->job.str, &owner);
                if (r == -ENOENT) {
                        conn_error(c, r, "no job named '%s' on this node (ckptctl list shows the "
                                         "jobs)", req->job.str);
                        return;
                }
                if (r < 0) {
                        conn_error(c, r, "cannot look up job '%s': catalog error", req->job.str);
                        return;
                }
                if (c->uid != 0 && owner != (uint32_t)c->uid) {
                        conn_error(c, -EACCES, "job '%s' belongs to uid %u: only its owner or "
                                               "root may see or apply its retention",
                                   req->job.str, owner);
                        return;
                }
                report_job(&rp, srv, req->job.str);
        } else {
                /* every job the caller owns (root: all), a page at a time;
                 * the names are copied first: applying retention writes the
                 * catalog the pages come from */
                char (*names)[CKPT_NAME_MAX + 1] = NULL;
                size_t n = 0;
                for (uint32_t start = 0;;) {
                        r = catalog_job_list(srv->catalog, start, c->uid == 0 ? -1 : (int64_t)c->uid, page);
                        if (r < 0) {
                                free(names);
                                conn_error(c, r, "cannot list jobs: catalog error");
                                return;
                        }
                        void *grown = realloc(names, (n + page->count + 1) * sizeof(*names));
                        if (!grown) {
                                free(names);
                                conn_error(c, -ENOMEM, "out of memory");
                                return;
                        }
                        names = grown;
                        for (uint32_t i = 0; i < page->count; i++)
                                snprintf(names[n++], sizeof(names[0]), "%s",
                                         page->entries[i].name.str);
                        start += page->count;
                        if (page->count == 0 || start >= page->total)
                                break;
                }
                for (size_t i = 0; i < n; i++)
                        report_job(&rp, srv, names[i]);
                free(names);
        }
        if (!req->dry_run)
                log_info("retention applied by uid %u%s%s: %u steps removed", c->uid,
                         req->job.len ? " to job " : "", req->job.str, rp.out->removed);
        rep->hdr.type = 0;
        conn_reply(c, rep, -1);
}
