/* SPDX-License-Identifier: MIT */
/*
 * ckptctl cluster: every node of the cluster as the daemon asked sees it
 * now (server/cluster_view.c): reachable, unreachable (no answer within
 * 2 s), down (its link is down) or unknown (no link from the asked node:
 * ask node 0), the newest committed step and the steps owed to
 * replication targets of each job, the links that are down, the errors.
 *
 * One node per reply (CLUSTER, docs/protocol.md): node 0's request
 * gathers the view, the others read it.  Exit 1 when a node is
 * unreachable or down, with the output printed all the same: the table is
 * the finding.  An unknown node is not a finding about that node.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "ctl/ctl.h"

static const char *const reach_names[CKPT_NODE_REACH_MAX_] = {
        [CKPT_NODE_REACHABLE] = "reachable",
        [CKPT_NODE_UNREACHABLE] = "unreachable",
        [CKPT_NODE_DOWN] = "down",
        [CKPT_NODE_UNKNOWN] = "unknown",
};

static void print_json(const struct ckpt_rep_cluster *nodes, uint32_t total,
                       uint32_t reachable) {
        fprintf(ctl.out, "{\"total\":%u,\"reachable\":%u,\"nodes\":[", total, reachable);
        for (uint32_t n = 0; n < total; n++) {
                const struct ckpt_rep_cluster *cl = &nodes[n];
                fprintf(ctl.out, "%s{\"index\":%u,\"node\":", n ? "," : "", cl->index);
                json_str(cl->node);
                fprintf(ctl.out, ",\"state\":\"%s\",\"jobs\":[", reach_names[cl->reach]);
                for (uint32_t i = 0; i < cl->njobs; i++) {
                        fprintf(ctl.out, "%s{\"job\":", i ? "," : "");
                        json_str(cl->jobs[i].job.str);
                        fprintf(ctl.out, ",\"newest_step\":%" PRIu64 ",\"steps_owed\":%u}",
                                cl->jobs[i].newest_step, cl->jobs[i].steps_owed);
                }
                fprintf(ctl.out, "],\"jobs_omitted\":%u,\"degraded_links\":[", cl->jobs_omitted);
                for (uint32_t i = 0; i < cl->nlinks; i++)
                        fprintf(ctl.out, "%s%u", i ? "," : "", cl->links[i]);
                fprintf(ctl.out, "],\"errors\":%u,\"last_error\":", cl->errors);
                json_str(cl->last_error);
                fprintf(ctl.out, "}");
        }
        fprintf(ctl.out, "]}\n");
}

static void print_human(const struct ckpt_rep_cluster *nodes, uint32_t total,
                        uint32_t reachable) {
        fprintf(ctl.out, "%u of %u nodes reachable\n\n", reachable, total);
        fprintf(ctl.out, "%-5s %-22s %-12s %5s %5s %-11s %6s  %s\n", "NODE", "ADDRESS", "STATE",
                "JOBS", "OWED", "LINKS DOWN", "ERRORS", "LAST ERROR");
        for (uint32_t n = 0; n < total; n++) {
                const struct ckpt_rep_cluster *cl = &nodes[n];
                uint32_t owed = 0;
                for (uint32_t i = 0; i < cl->njobs; i++)
                        owed += cl->jobs[i].steps_owed;
                char links[64] = "-";
                size_t off = 0;
                for (uint32_t i = 0; i < cl->nlinks && off < sizeof(links) - 12; i++)
                        off += (size_t)snprintf(links + off, sizeof(links) - off, "%s%u",
                                                i ? "," : "", cl->links[i]);
                fprintf(ctl.out, "%-5u %-22s %-12s %5u %5u %-11s %6u  %s\n", cl->index, cl->node,
                        reach_names[cl->reach], cl->njobs + cl->jobs_omitted, owed, links,
                        cl->errors, cl->last_error[0] ? cl->last_error : "-");
        }
        bool header = false;
        for (uint32_t n = 0; n < total; n++) {
                const struct ckpt_rep_cluster *cl = &nodes[n];
                for (uint32_t i = 0; i < cl->njobs; i++) {
                        if (!header)
                                fprintf(ctl.out, "\n%-5s %-32s %14s %5s\n", "NODE", "JOB",
                                        "NEWEST STEP", "OWED");
                        header = true;
                        fprintf(ctl.out, "%-5u %-32s %14" PRIu64 " %5u\n", cl->index,
                                cl->jobs[i].job.str, cl->jobs[i].newest_step,
                                cl->jobs[i].steps_owed);
                }
                if (cl->jobs_omitted)
                        fprintf(ctl.out, "%-5u (%u more jobs not shown)\n", cl->index,
                                cl->jobs_omitted);
        }
}

int cmd_cluster(int nargs, char **args) {
        (void)nargs;
        (void)args;
        int need = ctl_need_proto(CKPT_PROTO_VERSION_CLUSTER, "cluster needs");
        if (need)
                return need;
        struct ckpt_reply *rep = malloc(sizeof(*rep));
        struct ckpt_rep_cluster *nodes = NULL;
        uint32_t total = 1, reachable = 0, unknown = 0;
        int status = 0;
        if (!rep)
                return ctl_fail(EXIT_DAEMON_ERROR, ENOMEM, "out of memory");
        for (uint32_t n = 0; n < total; n++) {
                struct ckpt_request req = { .hdr.type = CKPT_MSG_CLUSTER };
                req.cluster.index = n;
                int r = wire_call(&ctl.wire, &req, rep, NULL);
                if (r < 0) {
                        status = ctl_report(r, "cluster");
                        goto out;
                }
                if (n == 0) {
                        total = rep->cluster.total;
                        nodes = calloc(total, sizeof(*nodes));
                        if (!nodes) {
                                status = ctl_fail(EXIT_DAEMON_ERROR, ENOMEM, "out of memory");
                                goto out;
                        }
                }
                if (rep->cluster.total != total || rep->cluster.index != n) {
                        status = ctl_fail(EXIT_DAEMON_ERROR, EPROTO, "the daemon sent node %u "
                                          "of %u for node %u of %u", rep->cluster.index,
                                          rep->cluster.total, n, total);
                        goto out;
                }
                nodes[n] = rep->cluster;
                reachable += rep->cluster.reach == CKPT_NODE_REACHABLE;
                unknown += rep->cluster.reach == CKPT_NODE_UNKNOWN;
        }
        if (ctl.json)
                print_json(nodes, total, reachable);
        else
                print_human(nodes, total, reachable);
        if (reachable + unknown < total) {
                fprintf(stderr, "ckptctl: %u of %u nodes not reachable\n",
                        total - reachable - unknown, total);
                ctl.keep_output = true;
                status = EXIT_DAEMON_ERROR;
        }
out:
        free(nodes);
        free(rep);
        return status;
}
