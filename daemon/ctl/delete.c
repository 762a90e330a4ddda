/* SPDX-License-Identifier: MIT */
/*
 * ckptctl delete: a step, or a whole job, removed from the tiers this node
 * manages (the daemon's server/delete.c decides and removes).
 */
#include <inttypes.h>
#include <string.h>

#include "ctl/ctl.h"

#define DELETE_USAGE "delete JOB [STEP] [--force]"

/* delete JOB [STEP] [--force] */
int cmd_delete(int nargs, char **args) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_DELETE };
        struct ckpt_reply rep;
        const char *job = NULL, *step = NULL;
        char b[32];

        for (int i = 0; i < nargs; i++) {
                if (!strcmp(args[i], "--force"))
                        req.del.force = 1;
                else if (!job)
                        job = args[i];
                else if (!step)
                        step = args[i];
                else
                        return ctl_usage(DELETE_USAGE);
        }
        if (!job)
                return ctl_usage(DELETE_USAGE);
        if (ctl_job_name(&req.del.job, job) < 0)
                return EXIT_USAGE;
        if (step) {
                if (parse_u64("STEP", step, CKPT_STEP_MAX, &req.del.step) < 0)
                        return EXIT_USAGE;
        } else {
                req.del.whole_job = 1;
        }
        int r = wire_call(&ctl.wire, &req, &rep, NULL);
        if (r < 0)
                return ctl_report(r, "delete");
        if (ctl.json) {
                fprintf(ctl.out, "{\"job\":");
                json_str(job);
                if (step)
                        fprintf(ctl.out, ",\"step\":%" PRIu64, req.del.step);
                fprintf(ctl.out, ",\"steps\":%u,\"bytes\":%" PRIu64 "}\n", rep.del.steps,
                        rep.del.bytes);
        } else if (step) {
                fprintf(ctl.out, "job %s step %" PRIu64 " deleted (%s being removed in the "
                                 "background)\n", job, req.del.step, human_bytes(rep.del.bytes, b));
        } else {
                fprintf(ctl.out, "job %s deleted: %u steps (%s being removed in the "
                                 "background)\n", job, rep.del.steps,
                        human_bytes(rep.del.bytes, b));
        }
        return 0;
}
