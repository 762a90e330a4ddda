/* SPDX-License-Identifier: MIT */
/*
 * ckptctl list, show, pin, unpin: the checkpoints this node holds.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl/ctl.h"
#include "util/cleanup.h"

/* One list page's entries: where they start, how many, and of how many in all. */
struct page {
        const void *entries;
        uint32_t count, total;
};

/* Every page of the list request *req (list.start advanced page by page),
 * their entries of entry_size bytes each appended to one array: the job list
 * and a job's checkpoint list page the same way (protocol.md "Lists"). */
static int fetch_pages(struct ckpt_request *req, size_t entry_size,
                       struct page (*page_of)(const struct ckpt_reply *rep), void **out,
                       uint32_t *n_out) {
        _cleanup_free_ struct ckpt_reply *rep = malloc(sizeof(*rep));
        _cleanup_free_ char *all = NULL;
        uint32_t n = 0;

        if (!rep)
                return -ENOMEM;
        for (;;) {
                req->list.start = n;
                int r = wire_call(&ctl.wire, req, rep, NULL);
                if (r < 0)
                        return r;
                struct page pg = page_of(rep);
                char *grown = realloc(all, ((size_t)n + pg.count + 1) * entry_size);
                if (!grown)
                        return -ENOMEM;
                all = grown;
                memcpy(all + (size_t)n * entry_size, pg.entries, (size_t)pg.count * entry_size);
                n += pg.count;
                if (pg.count == 0 || n >= pg.total)
                        break;
        }
        *out = TAKE_PTR(all);
        *n_out = n;
        return 0;
}

static struct page job_page(const struct ckpt_reply *rep) {
        return (struct page){ rep->job_list.entries, rep->job_list.count, rep->job_list.total };
}

static struct page ckpt_page(const struct ckpt_reply *rep) {
        return (struct page){ rep->ckpt_list.entries, rep->ckpt_list.count,
                              rep->ckpt_list.total };
}

int fetch_jobs(struct ckpt_job_entry **jobs_out, uint32_t *n_out) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_JOB_LIST };
        void *all;
        int r = fetch_pages(&req, sizeof(**jobs_out), job_page, &all, n_out);
        if (r >= 0)
                *jobs_out = all;
        return r;
}

int fetch_ckpts(const char *job, struct ckpt_ckpt_entry **ckpts_out, uint32_t *n_out) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_CKPT_LIST };
        int r = ckpt_name_set(&req.list.job, job);
        if (r < 0) {
                snprintf(ctl.wire.errmsg, sizeof(ctl.wire.errmsg), "invalid job name '%s'", job);
                return r;
        }
        void *all;
        r = fetch_pages(&req, sizeof(**ckpts_out), ckpt_page, &all, n_out);
        if (r >= 0)
                *ckpts_out = all;
        return r;
}

void print_job_table(const struct ckpt_job_entry *jobs, uint32_t n) {
        char b[32];
        fprintf(ctl.out, "%-24s %6s %12s %6s %9s %12s %6s\n", "JOB", "UID", "LATEST", "CKPTS", "COMMITTED",
               "LOCAL", "ERRORS");
        for (uint32_t i = 0; i < n; i++) {
                char latest[24] = "-";
                if (jobs[i].latest_committed >= 0)
                        snprintf(latest, sizeof(latest), "%" PRId64, jobs[i].latest_committed);
                fprintf(ctl.out, "%-24s %6u %12s %6u %9u %12s %6u\n", jobs[i].name.str, jobs[i].uid, latest,
                       jobs[i].checkpoints, jobs[i].committed, human_bytes(jobs[i].bytes_local, b),
                       jobs[i].errors);
        }
        if (n == 0)
                fprintf(ctl.out, "(no jobs)\n");
}

void print_job_json(const struct ckpt_job_entry *j) {
        fprintf(ctl.out, "{\"name\":");
        json_str(j->name.str);
        fprintf(ctl.out, ",\"uid\":%u,\"latest_committed\":", j->uid);
        if (j->latest_committed >= 0)
                fprintf(ctl.out, "%" PRId64, j->latest_committed);
        else
                fprintf(ctl.out, "null");
        fprintf(ctl.out, ",\"checkpoints\":%u,\"committed\":%u,\"tiers\":{\"local\":{\"bytes\":%" PRIu64
               "}},\"errors\":%u}",
               j->checkpoints, j->committed, j->bytes_local, j->errors);
}

/* list [JOB] */
int cmd_list(int nargs, char **args) {
        const char *job = nargs ? args[0] : NULL;
        if (!job) {
                struct ckpt_job_entry *jobs;
                uint32_t n;
                int r = fetch_jobs(&jobs, &n);
                if (r < 0)
                        return ctl_report(r, "list");
                if (ctl.json) {
                        fprintf(ctl.out, "[");
                        for (uint32_t i = 0; i < n; i++) {
                                if (i)
                                        fputc(',', ctl.out);
                                print_job_json(&jobs[i]);
                        }
                        fprintf(ctl.out, "]\n");
                } else {
                        print_job_table(jobs, n);
                }
                free(jobs);
                return 0;
        }
        struct ckpt_ckpt_entry *c;
        uint32_t n;
        char b[32], t[32];
        int r = fetch_ckpts(job, &c, &n);
        if (r < 0)
                return ctl_report(r, "list");
        if (ctl.json) {
                fprintf(ctl.out, "[");
                for (uint32_t i = 0; i < n; i++) {
                        fprintf(ctl.out, "%s{\"step\":%" PRIu64 ",\"state\":", i ? "," : "", c[i].step);
                        json_str(ckpt_state_name(c[i].state));
                        fprintf(ctl.out, ",\"world_size\":%u,\"ranks_local\":%u,\"shards\":%u,\"bytes\":%" PRIu64
                               ",\"committed_at\":%" PRId64 ",\"remote\":",
                               c[i].world_size, c[i].ranks_local, c[i].shards, c[i].bytes,
                               c[i].committed_at);
                        json_str(ckpt_remote_state_name(c[i].remote_state));
                        fprintf(ctl.out, ",\"pinned\":%s,\"replicas\":%u,\"memory\":%s}",
                                c[i].pinned ? "true" : "false", c[i].replicas,
                                c[i].memory ? "true" : "false");
                }
                fprintf(ctl.out, "]\n");
        } else {
                fprintf(ctl.out, "%-20s %-10s %6s %6s %7s %12s  %-20s  %-6s  %4s  %-8s  %s\n", "STEP",
                       "STATE", "WORLD", "RANKS", "SHARDS", "BYTES", "COMMITTED AT", "PIN", "REPL",
                       "REMOTE", "MEMORY");
                for (uint32_t i = 0; i < n; i++)
                        fprintf(ctl.out, "%-20" PRIu64 " %-10s %6u %6u %7u %12s  %-20s  %-6s  %4u  %-8s  %s\n", c[i].step,
                               ckpt_state_name(c[i].state), c[i].world_size, c[i].ranks_local,
                               c[i].shards, human_bytes(c[i].bytes, b), fmt_time(c[i].committed_at, t),
                               c[i].pinned ? "pinned" : "", c[i].replicas,
                               ckpt_remote_state_name(c[i].remote_state), c[i].memory ? "memory" : "");
                if (n == 0)
                        fprintf(ctl.out, "(no checkpoints)\n");
        }
        free(c);
        return 0;
}

/* show JOB STEP */
int cmd_show(int nargs, char **args) {
        const char *job = args[0];
        uint64_t step;
        (void)nargs;
        if (parse_u64("STEP", args[1], CKPT_STEP_MAX, &step) < 0)
                return EXIT_USAGE;
        struct ckpt_ckpt_entry *all;
        uint32_t n;
        int r = fetch_ckpts(job, &all, &n);
        if (r < 0)
                return ctl_report(r, "show");
        struct ckpt_ckpt_entry *c = NULL;
        for (uint32_t i = 0; i < n; i++)
                if (all[i].step == step)
                        c = &all[i];
        if (!c) {
                free(all);
                return ctl_fail(EXIT_DAEMON_ERROR, ENOENT, "job '%s' has no step %" PRIu64
                                " on this node", job, step);
        }
        char b[32], t[32];
        if (ctl.json) {
                fprintf(ctl.out, "{\"job\":");
                json_str(job);
                fprintf(ctl.out, ",\"step\":%" PRIu64 ",\"state\":", step);
                json_str(ckpt_state_name(c->state));
                fprintf(ctl.out, ",\"world_size\":%u,\"bytes\":%" PRIu64 ",\"committed_at\":%" PRId64
                       ",\"remote\":",
                       c->world_size, c->bytes, c->committed_at);
                json_str(ckpt_remote_state_name(c->remote_state));
                fprintf(ctl.out, ",\"reason\":");
                json_str(c->reason);
                fprintf(ctl.out, ",\"ranks\":[");
        } else {
                fprintf(ctl.out, "job %s step %" PRIu64 ": %s, world size %u, %u ranks here, %u shards, %s, "
                       "committed %s, object store: %s\n",
                       job, step, ckpt_state_name(c->state), c->world_size, c->ranks_local,
                       c->shards, human_bytes(c->bytes, b), fmt_time(c->committed_at, t),
                       ckpt_remote_state_name(c->remote_state));
                if (c->reason[0])
                        fprintf(ctl.out, "%s: %s\n",
                                c->state == CKPT_STATE_FAILED ? "failed" : "a rank is missing",
                                c->reason);
        }
        /* The daemon lists the shards of committed steps only (a restore
         * reads nothing else): say so instead of an empty list. */
        bool committed = c->state == CKPT_STATE_COMMITTED;
        if (!committed && !ctl.json)
                fprintf(ctl.out, "\nshards: not listed until the step is committed\n");
        struct ckpt_reply *rep = malloc(sizeof(*rep));
        bool first_rank = true;
        for (uint32_t rank = 0; committed && rep && rank < c->world_size; rank++) {
                uint32_t got = 0;
                bool header = false;
                for (;;) {
                        struct ckpt_request req = { .hdr.type = CKPT_MSG_SHARD_LIST };
                        ckpt_name_set(&req.shard_list.job, job);
                        req.shard_list.step = step;
                        req.shard_list.rank = rank;
                        req.shard_list.start = got;
                        r = wire_call(&ctl.wire, &req, rep, NULL);
                        if (r < 0)
                                break;
                        const struct ckpt_rep_shard_list *l = &rep->shard_list;
                        if (!header) {
                                header = true;
                                if (ctl.json)
                                        fprintf(ctl.out, "%s{\"rank\":%u,\"shards\":[", first_rank ? "" : ",", rank);
                                else
                                        fprintf(ctl.out, "\nrank %u:\n  %-40s %14s  %s\n", rank, "SHARD", "BYTES",
                                               "CRC32C");
                                first_rank = false;
                        }
                        for (uint32_t i = 0; i < l->count; i++) {
                                const struct ckpt_shard_entry *e = &l->entries[i];
                                if (ctl.json) {
                                        fprintf(ctl.out, "%s{\"name\":", got + i ? "," : "");
                                        json_str(e->name.str);
                                        fprintf(ctl.out, ",\"size\":%" PRIu64 ",\"crc32c\":\"%08x\"}", e->size,
                                               e->crc32c);
                                } else {
                                        fprintf(ctl.out, "  %-40s %14" PRIu64 "  %08x\n", e->name.str, e->size,
                                               e->crc32c);
                                }
                        }
                        got += l->count;
                        if (l->count == 0 || got >= l->total)
                                break;
                }
                if (header && ctl.json)
                        fprintf(ctl.out, "]}");
                if (r < 0 && r != -ENOENT) {
                        free(rep);
                        free(all);
                        return ctl_report(r, "listing shards");
                }
        }
        if (ctl.json)
                fprintf(ctl.out, "]}\n");
        free(rep);
        free(all);
        return 0;
}

static int pin(const char *job, const char *step_str, bool pinned) {
        uint64_t step;
        if (parse_u64("STEP", step_str, CKPT_STEP_MAX, &step) < 0)
                return EXIT_USAGE;
        struct ckpt_request req = { .hdr.type = CKPT_MSG_PIN };
        struct ckpt_reply rep;
        if (ctl_job_name(&req.pin.job, job) < 0)
                return EXIT_USAGE;
        req.pin.step = step;
        req.pin.pinned = pinned;
        int r = wire_call(&ctl.wire, &req, &rep, NULL);
        if (r < 0)
                return ctl_report(r, pinned ? "pin" : "unpin");
        if (!ctl.json)
                fprintf(ctl.out, "job %s step %" PRIu64 " %s\n", job, step,
                        pinned ? "pinned: retention keeps it here and in the object store"
                               : "unpinned");
        return 0;
}


/* pin JOB STEP, unpin JOB STEP */
int cmd_pin(int nargs, char **args) {
        (void)nargs;
        return pin(args[0], args[1], true);
}

int cmd_unpin(int nargs, char **args) {
        (void)nargs;
        return pin(args[0], args[1], false);
}
