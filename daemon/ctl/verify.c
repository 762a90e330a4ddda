/* SPDX-License-Identifier: MIT */
/*
 * ckptctl verify: every shard of every copy this node holds, checked in
 * full (optionally repaired).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl/ctl.h"

static const char *const copy_states[CKPT_COPY_STATE_MAX_] = {
        [CKPT_COPY_GOOD] = "good",
        [CKPT_COPY_BAD] = "bad",
        [CKPT_COPY_REPAIRED] = "repaired",
};

/* Two verify entries of the same copy (step, rank, area). */
static bool same_copy(const struct ckpt_verify_entry *x, const struct ckpt_verify_entry *y) {
        return x->step == y->step && x->rank == y->rank && x->area == y->area;
}

/* By step, rank, then the local tier (UINT32_MAX, wrapping to 0) first;
 * a stable insertion sort, so a copy's shards keep the daemon's order (a
 * page holds at most CKPT_VERIFY_PAGE entries). */
static void verify_entries_sort(struct ckpt_verify_entry *v, uint32_t n) {
        for (uint32_t i = 1; i < n; i++) {
                struct ckpt_verify_entry e = v[i];
                uint32_t j = i;
                while (j > 0) {
                        const struct ckpt_verify_entry *p = &v[j - 1];
                        bool after = p->step != e.step ? p->step > e.step
                                     : p->rank != e.rank ? p->rank > e.rank
                                     : p->area + 1 > e.area + 1;
                        if (!after)
                                break;
                        v[j] = v[j - 1];
                        j--;
                }
                v[j] = e;
        }
}

/* verify JOB [STEP] [--rank R] [--repair]: every shard of every copy this node holds,
 * checked in full; exit 1 when a bad one remains. */
int cmd_verify(int nargs, char **args) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_VERIFY };
        const char *job = NULL;
        uint64_t v;

        req.verify.step = CKPT_STEP_LATEST;
        req.verify.rank = CKPT_VERIFY_ALL_RANKS;
        for (int i = 0; i < nargs; i++) {
                if (!strcmp(args[i], "--repair")) {
                        req.verify.repair = 1;
                } else if (!strcmp(args[i], "--rank")) {
                        if (i + 1 >= nargs || req.verify.rank != CKPT_VERIFY_ALL_RANKS)
                                goto usage;
                        if (parse_u64("rank", args[++i], CKPT_WORLD_MAX - 1, &v) < 0)
                                return EXIT_USAGE;
                        req.verify.rank = (uint32_t)v;
                } else if (!job) {
                        job = args[i];
                } else if (req.verify.step == CKPT_STEP_LATEST) {
                        if (parse_u64("STEP", args[i], CKPT_STEP_MAX, &req.verify.step) < 0)
                                return EXIT_USAGE;
                } else {
                        goto usage;
                }
        }
        if (!job)
                goto usage;
        if (ctl_job_name(&req.verify.job, job) < 0)
                return EXIT_USAGE;
        struct ckpt_reply *rep = malloc(sizeof(*rep));
        if (!rep)
                return ctl_report(-ENOMEM, "verify");
        /* reading every copy in full can rightly take long: only an
         * explicit --timeout bounds it */
        int r = wire_call_within(&ctl.wire, NULL, ctl.timeout_given ? WIRE_TIMEOUT_CONN : 0, &req, rep,
                                 NULL);
        if (r < 0) {
                free(rep);
                return ctl_report(r, "verify");
        }
        struct ckpt_rep_verify *vr = &rep->verify;
        /* the page has the bad entries first: group them back by step,
         * rank and copy (the daemon's shard order kept within a copy) */
        verify_entries_sort(vr->entries, vr->count);
        uint32_t bad = 0, repaired = 0;
        for (uint32_t i = 0; i < vr->count; i++) {
                const struct ckpt_verify_entry *e = &vr->entries[i];
                bool first = i == 0 || !same_copy(e, &vr->entries[i - 1]);
                bool seen_bad = false, seen_repaired = false;
                for (uint32_t j = i; !first && j-- > 0 && same_copy(e, &vr->entries[j]);) {
                        seen_bad |= vr->entries[j].state == CKPT_COPY_BAD;
                        seen_repaired |= vr->entries[j].state == CKPT_COPY_REPAIRED;
                }
                bad += e->state == CKPT_COPY_BAD && !seen_bad;
                repaired += e->state == CKPT_COPY_REPAIRED && !seen_repaired;
        }
        /* a daemon of version 5 sends one entry per copy and no count */
        uint32_t copies = vr->copies ? vr->copies : vr->total;
        if (ctl.json) {
                fprintf(ctl.out, "{\"job\":");
                json_str(job);
                fprintf(ctl.out, ",\"copies_checked\":%u,\"bad\":%u,\"repaired\":%u,\"shards\":[",
                        copies, bad, repaired);
        } else {
                fprintf(ctl.out, "job %s: %u cop%s checked, %u bad, %u repaired%s\n", job, copies,
                        copies == 1 ? "y" : "ies", bad, repaired,
                        vr->total > vr->count ? " (the good shards not all listed: name a step "
                                                "or a rank)" : "");
                fprintf(ctl.out, "%-20s %-6s %-18s %-24s %10s  %s\n", "STEP", "RANK", "COPY", "SHARD",
                        "BYTES", "STATE");
        }
        for (uint32_t i = 0; i < vr->count; i++) {
                const struct ckpt_verify_entry *e = &vr->entries[i];
                char where[32], b[32];
                if (e->area == CKPT_COPY_LOCAL)
                        snprintf(where, sizeof(where), "local");
                else
                        snprintf(where, sizeof(where), "replica of node %u", e->area);
                if (ctl.json) {
                        fprintf(ctl.out, "%s{\"step\":%" PRIu64 ",\"rank\":%u,\"copy\":", i ? "," : "",
                                e->step, e->rank);
                        json_str(where);
                        if (e->area == CKPT_COPY_LOCAL)
                                fprintf(ctl.out, ",\"replica_of\":null");
                        else
                                fprintf(ctl.out, ",\"replica_of\":%u", e->area);
                        fprintf(ctl.out, ",\"shard\":");
                        json_str(e->shard);
                        fprintf(ctl.out, ",\"bytes\":%" PRIu64 ",\"state\":\"%s\",\"detail\":",
                                e->bytes, copy_states[e->state]);
                        json_str(e->detail);
                        fprintf(ctl.out, "}");
                } else {
                        /* shard "": the copy as a whole (its MANIFEST or directory) */
                        fprintf(ctl.out, "%-20" PRIu64 " %-6u %-18s %-24s %10s  %s%s%s\n", e->step,
                                e->rank, where, e->shard[0] ? e->shard : "-",
                                human_bytes(e->bytes, b),
                                e->state == CKPT_COPY_BAD ? "BAD" : copy_states[e->state],
                                e->detail[0] ? ": " : "", e->detail);
                }
        }
        if (ctl.json)
                fprintf(ctl.out, "]}\n");
        free(rep);
        ctl.keep_output = true;
        return bad ? EXIT_DAEMON_ERROR : 0;
usage:
        return ctl_usage("verify JOB [STEP] [--rank R] [--repair]");
}

