/* SPDX-License-Identifier: MIT */
/*
 * ckptctl retention: per job and tier, which steps retention keeps and
 * which go, and why; applied now unless --dry-run.  The daemon decides
 * (server/retention_request.c, with the policy every tier's pass uses).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ctl/ctl.h"
#include "retention/retention.h"

#define RETENTION_USAGE "retention [JOB] [--dry-run [--keep-latest N] [--keep-every N|DURATION]]"

static const char *const tier_names[CKPT_RETENTION_TIER_MAX_] = {
        [CKPT_RETENTION_LOCAL] = "local",
        [CKPT_RETENTION_REPLICA] = "replica",
        [CKPT_RETENTION_STORE] = "store",
};

static const char *const action_names[CKPT_RETENTION_ACTION_MAX_] = {
        [CKPT_RETENTION_KEPT] = "kept",
        [CKPT_RETENTION_GOES] = "goes",
        [CKPT_RETENTION_REMOVED] = "removed",
        [CKPT_RETENTION_BUSY] = "busy",
        [CKPT_RETENTION_QUEUED] = "queued",
};

/* "local", "replica node 3", "store" */
static const char *tier_label(const struct ckpt_retention_entry *e, char buf[32]) {
        if (e->tier == CKPT_RETENTION_REPLICA)
                snprintf(buf, 32, "replica node %u", e->area);
        else
                snprintf(buf, 32, "%s", tier_names[e->tier]);
        return buf;
}

/* retention [JOB] [--dry-run [--keep-latest N] [--keep-every N|DURATION]] */
int cmd_retention(int nargs, char **args) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_RETENTION };
        const char *job = NULL, *every = NULL;
        uint64_t v;

        for (int i = 0; i < nargs; i++) {
                if (!strcmp(args[i], "--dry-run")) {
                        req.retention.dry_run = 1;
                } else if (!strcmp(args[i], "--keep-latest")) {
                        if (i + 1 >= nargs || req.retention.keep_latest)
                                return ctl_usage(RETENTION_USAGE);
                        if (parse_u64("--keep-latest", args[++i], 1000000, &v) < 0)
                                return EXIT_USAGE;
                        if (v == 0)
                                return ctl_fail(EXIT_USAGE, EINVAL, "--keep-latest must be at "
                                                "least 1: the newest committed step is always "
                                                "kept");
                        req.retention.keep_latest = (uint32_t)v;
                        req.retention.preview = 1;
                } else if (!strcmp(args[i], "--keep-every")) {
                        if (i + 1 >= nargs || every)
                                return ctl_usage(RETENTION_USAGE);
                        every = args[++i];
                        char why[160];
                        if (retention_every_parse(every, &req.retention.every_steps,
                                                  &req.retention.every_seconds, why,
                                                  sizeof(why)) < 0)
                                return ctl_fail(EXIT_USAGE, EINVAL, "--keep-every: %s", why);
                        req.retention.preview = 1;
                } else if (!job)
                        job = args[i];
                else
                        return ctl_usage(RETENTION_USAGE);
        }
        if (job && ctl_job_name(&req.retention.job, job) < 0)
                return EXIT_USAGE;
        if (req.retention.preview && !req.retention.dry_run)
                return ctl_fail(EXIT_USAGE, EINVAL, "--keep-latest and --keep-every preview a "
                                "policy: give them with --dry-run (the configuration decides "
                                "what is applied)");
        if (req.retention.preview && !req.retention.keep_latest)
                return ctl_fail(EXIT_USAGE, EINVAL, "--keep-every needs --keep-latest N beside "
                                "it (a preview names the whole policy)");
        struct ckpt_reply *rep = malloc(sizeof(*rep));
        if (!rep)
                return ctl_report(-ENOMEM, "retention");
        int r = wire_call(&ctl.wire, &req, rep, NULL);
        if (r < 0) {
                free(rep);
                return ctl_report(r, "retention");
        }
        const struct ckpt_rep_retention *l = &rep->retention;
        char tier[32], t[32];
        if (ctl.json) {
                fprintf(ctl.out, "{\"dry_run\":%s,\"total\":%u,\"removed\":%u,\"steps\":[",
                        req.retention.dry_run ? "true" : "false", l->total, l->removed);
                for (uint32_t i = 0; i < l->count; i++) {
                        const struct ckpt_retention_entry *e = &l->entries[i];
                        fprintf(ctl.out, "%s{\"job\":", i ? "," : "");
                        json_str(e->job.str);
                        fprintf(ctl.out, ",\"tier\":\"%s\"", tier_names[e->tier]);
                        if (e->tier == CKPT_RETENTION_REPLICA)
                                fprintf(ctl.out, ",\"node\":%u", e->area);
                        fprintf(ctl.out, ",\"step\":%" PRIu64 ",\"committed_at\":", e->step);
                        if (e->committed_at > 0)
                                json_str(fmt_time(e->committed_at, t));
                        else
                                fprintf(ctl.out, "null");
                        fprintf(ctl.out, ",\"action\":\"%s\",\"reason\":",
                                action_names[e->action]);
                        json_str(e->reason);
                        fprintf(ctl.out, "}");
                }
                fprintf(ctl.out, "]}\n");
        } else {
                const char *last_job = "";
                int last_tier = -1;
                uint32_t last_area = 0;
                for (uint32_t i = 0; i < l->count; i++) {
                        const struct ckpt_retention_entry *e = &l->entries[i];
                        if (strcmp(last_job, e->job.str) || last_tier != e->tier ||
                            last_area != e->area) {
                                fprintf(ctl.out, "%sjob %s, %s:\n", i ? "\n" : "", e->job.str,
                                        tier_label(e, tier));
                                fprintf(ctl.out, "  %20s  %-20s  %-7s  %s\n", "STEP", "COMMITTED",
                                        "ACTION", "WHY");
                                last_job = e->job.str;
                                last_tier = e->tier;
                                last_area = e->area;
                        }
                        fprintf(ctl.out, "  %20" PRIu64 "  %-20s  %-7s  %s\n", e->step,
                                fmt_time(e->committed_at, t), action_names[e->action],
                                e->reason);
                }
                if (l->count == 0)
                        fprintf(ctl.out, "no steps\n");
                if (l->total > l->count)
                        fprintf(ctl.out, "(%u more not shown: name a job to see them)\n",
                                l->total - l->count);
                if (!req.retention.dry_run)
                        fprintf(ctl.out, "%u step%s removed\n", l->removed,
                                l->removed == 1 ? "" : "s");
        }
        free(rep);
        return 0;
}
