/* SPDX-License-Identifier: MIT */
/*
 * ckptctl restore and latest: what a restore would read, and pulling a
 * committed step back from the object store.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl/ctl.h"

/* restore JOB [STEP] [--node N | --rank R | --all]: pull a committed step
 * from the object store into this node's local tier. */
int cmd_restore(int nargs, char **args) {
        const char *job = NULL;
        uint64_t step = CKPT_STEP_LATEST, v;
        uint8_t which = 0;
        uint32_t index = 0;

        for (int i = 0; i < nargs; i++) {
                if (!strcmp(args[i], "--all") || !strcmp(args[i], "--from-peers")) {
                        if (which)
                                goto usage;
                        which = args[i][2] == 'a' ? CKPT_FETCH_ALL : CKPT_FETCH_PEERS;
                } else if (!strcmp(args[i], "--node") || !strcmp(args[i], "--rank")) {
                        if (which || i + 1 >= nargs)
                                goto usage;
                        which = args[i][2] == 'n' ? CKPT_FETCH_NODE : CKPT_FETCH_RANK;
                        if (parse_u64(args[i] + 2, args[i + 1], UINT32_MAX - 1, &v) < 0)
                                return EXIT_USAGE;
                        index = (uint32_t)v;
                        i++;
                } else if (!job) {
                        job = args[i];
                } else if (step == CKPT_STEP_LATEST) {
                        if (parse_u64("STEP", args[i], CKPT_STEP_MAX, &step) < 0)
                                return EXIT_USAGE;
                } else {
                        goto usage;
                }
        }
        if (!job)
                goto usage;
        struct ckpt_request req = { .hdr.type = CKPT_MSG_FETCH };
        struct ckpt_reply rep;
        if (ctl_job_name(&req.fetch.job, job) < 0)
                return EXIT_USAGE;
        if (!which) {
                /* this node's share, as the job was laid out when it saved */
                struct ckpt_request sreq = { .hdr.type = CKPT_MSG_STATUS };
                struct ckpt_reply *srep = malloc(sizeof(*srep));
                int r = srep ? wire_call(&ctl.wire, &sreq, srep, NULL) : -ENOMEM;
                if (r < 0) {
                        free(srep);
                        return ctl_report(r, "status");
                }
                which = CKPT_FETCH_NODE;
                index = srep->status.node_index;
                free(srep);
        }
        req.fetch.step = step;
        req.fetch.which = which;
        req.fetch.index = which == CKPT_FETCH_ALL || which == CKPT_FETCH_PEERS ? 0 : index;
        /* Fetching a whole step can rightly take far longer than any
         * default: only an explicit --timeout bounds it.  (The STATUS above
         * did have the deadline, so a stopped daemon is still found out.) */
        int r = wire_call_within(&ctl.wire, NULL, ctl.timeout_given ? WIRE_TIMEOUT_CONN : 0, &req, &rep,
                                 NULL);
        if (r < 0)
                return ctl_report(r, "restore");
        char b[32];
        if (which == CKPT_FETCH_PEERS) {
                if (ctl.json)
                        fprintf(ctl.out, "{\"job\":\"%s\",\"ranks\":%u,\"from\":\"peers\"}\n",
                                req.fetch.job.str, rep.fetch.ranks);
                else
                        fprintf(ctl.out, "job %s: %u ranks restored from the neighbours into the local "
                                "tier\n", job, rep.fetch.ranks);
                return 0;
        }
        if (ctl.json)
                fprintf(ctl.out, "{\"job\":\"%s\",\"step\":%" PRIu64 ",\"world_size\":%u,\"ranks\":%u,"
                        "\"shards\":%u,\"bytes\":%" PRIu64 "}\n", req.fetch.job.str, rep.fetch.step,
                        rep.fetch.world_size, rep.fetch.ranks, rep.fetch.shards, rep.fetch.bytes);
        else
                fprintf(ctl.out, "job %s step %" PRIu64 " (world size %u): %u ranks, %u shards, %s "
                        "restored from the object store into the local tier\n", job, rep.fetch.step,
                        rep.fetch.world_size, rep.fetch.ranks, rep.fetch.shards,
                        human_bytes(rep.fetch.bytes, b));
        return 0;
usage:
        return ctl_usage("restore JOB [STEP] [--node N | --rank R | --all | --from-peers]");
}

/* latest JOB [--rank R [--below STEP]]: the newest committed step, or the
 * one rank R restores from (LATEST_RANK) and whether that fell back. */
int cmd_latest(int nargs, char **args) {
        const char *job = NULL;
        bool by_rank = false;
        uint64_t rank = 0, below = CKPT_STEP_LATEST;

        for (int i = 0; i < nargs; i++) {
                if (!strcmp(args[i], "--rank") && i + 1 < nargs) {
                        if (parse_u64("RANK", args[++i], CKPT_WORLD_MAX - 1, &rank) < 0)
                                return EXIT_USAGE;
                        by_rank = true;
                } else if (!strcmp(args[i], "--below") && i + 1 < nargs) {
                        if (parse_u64("STEP", args[++i], CKPT_STEP_MAX, &below) < 0)
                                return EXIT_USAGE;
                } else if (!job && args[i][0] != '-') {
                        job = args[i];
                } else {
                        goto usage;
                }
        }
        if (!job || (below != CKPT_STEP_LATEST && !by_rank))
                goto usage;
        struct ckpt_request req = { .hdr.type = by_rank ? CKPT_MSG_LATEST_RANK : CKPT_MSG_LATEST };
        struct ckpt_reply rep;
        struct ckpt_name *name = by_rank ? &req.latest_rank.job : &req.job_step.job;
        if (ctl_job_name(name, job) < 0)
                return EXIT_USAGE;
        if (!by_rank) {
                int r = wire_call(&ctl.wire, &req, &rep, NULL);
                if (r < 0)
                        return ctl_report(r, "latest");
                if (ctl.json)
                        fprintf(ctl.out, "{\"job\":\"%s\",\"step\":%" PRIu64 ",\"world_size\":%u}\n",
                                name->str, rep.latest.step, rep.latest.world_size);
                else
                        fprintf(ctl.out, "job %s: newest committed step %" PRIu64 " (world size %u)\n",
                                job, rep.latest.step, rep.latest.world_size);
                return 0;
        }
        req.latest_rank.rank = (uint32_t)rank;
        req.latest_rank.below = below;
        rep.hdr.type = 0;
        int r = wire_call(&ctl.wire, &req, &rep, NULL);
        if (r == -EBADMSG && rep.hdr.type == CKPT_MSG_ERROR) {
                return ctl_fail(EXIT_DAEMON_ERROR, EPROTO, "latest --rank: this ckptd predates "
                                "the request (LATEST_RANK); upgrade it");
        }
        if (r < 0)
                return ctl_report(r, "latest");
        const struct ckpt_rep_latest_rank *l = &rep.latest_rank;
        if (ctl.json) {
                fprintf(ctl.out, "{\"job\":\"%s\",\"rank\":%u,\"step\":%" PRIu64 ",\"world_size\":%u,"
                        "\"newest\":%" PRIu64 ",\"skipped\":%u,\"fell_back\":%s}\n", name->str,
                        req.latest_rank.rank, l->step, l->world_size, l->newest, l->skipped,
                        l->step != l->newest ? "true" : "false");
        } else {
                fprintf(ctl.out, "job %s rank %u: restore from step %" PRIu64 " (world size %u)\n",
                        job, req.latest_rank.rank, l->step, l->world_size);
                if (l->step != l->newest)
                        fprintf(ctl.out, "fell back from step %" PRIu64 ": the rank is not "
                                "restorable from the %u newer committed step%s (the daemon's "
                                "log says why)\n", l->newest, l->skipped,
                                l->skipped == 1 ? "" : "s");
        }
        return 0;
usage:
        return ctl_usage("latest JOB [--rank R [--below STEP]]");
}

