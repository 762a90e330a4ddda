/* SPDX-License-Identifier: MIT */
/*
 * ckptctl drain [JOB] [--tier local|replicated|remote] [--timeout T]: wait
 * until the newest committed step of every job (or JOB) has reached the
 * tier on this node — what a job script runs before its allocation ends
 * and the node's disks are wiped.  Exit 0 when every one made it, 1 at the
 * timeout (saying which steps are short and how far they got) or when a
 * step can never make it (its flush failed for good), 2 on usage.
 *
 * Built on requests every daemon of protocol 2 on answers, no new message:
 * JOB_LIST gives each job's newest committed step, WAIT with timeout 0 says
 * whether it reached the tier (and fails at once when it never will),
 * CKPT_LIST says how far it is (its object-store state, the targets that
 * hold it), STATUS which tiers are configured.  Polling, rather than one
 * long WAIT per job, keeps the progress bar moving, follows a step
 * committed while drain runs (a trainer's ckpt_commit_async landing late),
 * and lets one deadline cover every job.
 *
 * The default tier is the highest this node has: remote with an object
 * store (it survives every node's disk), else replicated with
 * replication, else local (committed on this node's disk, which a
 * committed step already is: drain then only reports).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl/ctl.h"

#define DRAIN_POLL_MS 250u
/* a plain line (not a tty) at least this often, and whenever it changes */
#define DRAIN_LINE_EVERY_MS 5000u
#define DRAIN_BAR_WIDTH 30
/* WAIT for every step short of the tier this often (each "not yet" is a
 * line in the daemon's log), besides when the list says it is there */
#define DRAIN_WAIT_EVERY_MS 10000u

struct drain_job {
        struct ckpt_name name;
        uint64_t step;
        bool reached;
        double fraction;  /* 0..1, how far towards the tier */
        char how[160];    /* how far, for the progress line and the timeout */
};

struct drain {
        const char *only;   /* JOB, or NULL: every job */
        uint8_t tier;       /* CKPT_TIER_COMMITTED (local), _REMOTE, _REPLICATED */
        uint32_t peers_total;
        char store_error[CKPT_ERRMSG_MAX + 1]; /* STATUS remote_error (tier remote) */
        struct drain_job *jobs;
        uint32_t njobs;
};

static uint64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static const char *tier_word(uint8_t tier) {
        return tier == CKPT_TIER_REMOTE ? "remote" : tier == CKPT_TIER_REPLICATED ? "replicated"
                                                                                 : "local";
}

/* How far one step is towards dr->tier, from its CKPT_LIST entry. */
static void drain_describe(const struct drain *dr, struct drain_job *j,
                           const struct ckpt_ckpt_entry *e) {
        if (!e) {
                j->fraction = 0;
                snprintf(j->how, sizeof(j->how), "not listed on this node");
                return;
        }
        if (dr->tier == CKPT_TIER_REPLICATED) {
                uint32_t total = dr->peers_total ? dr->peers_total : 1;
                j->fraction = (double)e->replicas / total;
                snprintf(j->how, sizeof(j->how), "on %u of %u replication targets", e->replicas,
                         dr->peers_total);
                return;
        }
        switch (e->remote_state) {
        case CKPT_REMOTE_FLUSHING:
                j->fraction = 1.0 / 3;
                snprintf(j->how, sizeof(j->how), "uploading its shards to the object store");
                break;
        case CKPT_REMOTE_MANIFEST:
                j->fraction = 2.0 / 3;
                snprintf(j->how, sizeof(j->how), "this node's part is in the object store, waiting "
                         "for the other nodes' (no COMMIT object yet)");
                break;
        default:
                j->fraction = 0;
                snprintf(j->how, sizeof(j->how), "not uploaded yet (waiting for its turn)");
                break;
        }
}

/*
 * One look: the jobs' newest committed steps and whether each reached the
 * tier (WAIT asked of every step short of it with ask_wait, else only of
 * those the list says are there).  0, or EXIT_* after reporting (a step
 * that never will make it, a request that failed).
 */
static int drain_poll(struct drain *dr, bool ask_wait) {
        struct ckpt_job_entry *jobs = NULL;
        uint32_t n = 0;
        int r = fetch_jobs(&jobs, &n);

        if (r < 0)
                return ctl_report(r, "listing jobs");
        free(dr->jobs);
        dr->jobs = calloc(n + 1, sizeof(*dr->jobs));
        dr->njobs = 0;
        if (!dr->jobs) {
                free(jobs);
                return ctl_fail(EXIT_DAEMON_ERROR, ENOMEM, "out of memory");
        }
        bool found = false;
        for (uint32_t i = 0; i < n; i++) {
                const struct ckpt_job_entry *je = &jobs[i];
                if (dr->only && strcmp(je->name.str, dr->only))
                        continue;
                found = true;
                /* another uid's jobs are not this caller's to wait for (the
                 * daemon refuses WAIT on them) */
                if (je->latest_committed < 0 || (getuid() != 0 && je->uid != getuid()))
                        continue;
                struct drain_job *j = &dr->jobs[dr->njobs++];
                j->name = je->name;
                j->step = (uint64_t)je->latest_committed;
        }
        free(jobs);
        if (dr->only && !found)
                return ctl_fail(EXIT_DAEMON_ERROR, ENOENT, "drain: no job named '%s' on this node",
                                dr->only);

        struct ckpt_reply *rep = malloc(sizeof(*rep));
        if (!rep)
                return ctl_fail(EXIT_DAEMON_ERROR, ENOMEM, "out of memory");
        for (uint32_t i = 0; i < dr->njobs; i++) {
                struct drain_job *j = &dr->jobs[i];
                struct ckpt_ckpt_entry *ckpts = NULL;
                uint32_t nc = 0;
                r = fetch_ckpts(j->name.str, &ckpts, &nc);
                if (r < 0) {
                        free(rep);
                        return ctl_report(r, "listing checkpoints");
                }
                const struct ckpt_ckpt_entry *e = NULL;
                for (uint32_t k = 0; k < nc && !e; k++)
                        if (ckpts[k].step == j->step)
                                e = &ckpts[k];
                drain_describe(dr, j, e);
                /* The list says how far; WAIT has the last word (and the
                 * reason a step never will make it).  WAIT is asked only
                 * when the list says the step is there or has failed, or
                 * when asked to: every "not yet" is a line in the
                 * daemon's log. */
                bool listed = e && (dr->tier == CKPT_TIER_COMMITTED
                                    || (dr->tier == CKPT_TIER_REMOTE &&
                                        (e->remote_state == CKPT_REMOTE_DONE ||
                                         e->remote_state == CKPT_REMOTE_FAILED))
                                    || (dr->tier == CKPT_TIER_REPLICATED &&
                                        e->replicas >= dr->peers_total));
                free(ckpts);
                if (!listed && !ask_wait)
                        continue;
                struct ckpt_request req = { .hdr.type = CKPT_MSG_WAIT };
                req.wait.job = j->name;
                req.wait.step = j->step;
                req.wait.tier = dr->tier;
                req.wait.timeout_ms = 0; /* just check */
                r = wire_call(&ctl.wire, &req, rep, NULL);
                if (r == 0) {
                        j->reached = true;
                        j->fraction = 1;
                        continue;
                }
                if (r != -ETIMEDOUT || ctl.wire.fd < 0) {
                        /* it never will (a flush failed for good, a target
                         * refused a damaged rank), or the daemon is gone */
                        char what[CKPT_NAME_MAX + 64];
                        snprintf(what, sizeof(what), "drain: job '%s' step %" PRIu64, j->name.str,
                                 j->step);
                        free(rep);
                        return ctl_report(r, what);
                }
                ctl.wire.errmsg[0] = '\0';
        }
        /* the object store's last error says why uploads do not progress */
        struct ckpt_request sreq = { .hdr.type = CKPT_MSG_STATUS };
        r = wire_call(&ctl.wire, &sreq, rep, NULL);
        if (r < 0) {
                free(rep);
                return ctl_report(r, "status");
        }
        snprintf(dr->store_error, sizeof(dr->store_error), "%s",
                 dr->tier == CKPT_TIER_REMOTE ? rep->status.remote_error : "");
        free(rep);
        return 0;
}

static uint32_t drain_short(const struct drain *dr, double *fraction) {
        uint32_t n = 0;
        double sum = 0;
        for (uint32_t i = 0; i < dr->njobs; i++) {
                n += !dr->jobs[i].reached;
                sum += dr->jobs[i].fraction;
        }
        *fraction = dr->njobs ? sum / dr->njobs : 1;
        return n;
}

/* "job 'a' step 3 (how); job 'b' step 9 (how)" of the steps still short. */
static void drain_short_text(const struct drain *dr, char *buf, size_t len) {
        size_t pos = 0;
        buf[0] = '\0';
        for (uint32_t i = 0; i < dr->njobs && pos < len; i++) {
                const struct drain_job *j = &dr->jobs[i];
                if (j->reached)
                        continue;
                int w = snprintf(buf + pos, len - pos, "%sjob '%s' step %" PRIu64 " (%s)",
                                 pos ? "; " : "", j->name.str, j->step, j->how);
                if (w < 0)
                        break;
                pos += (size_t)w;
        }
}

/* The progress line: a bar redrawn in place on a tty, a plain line
 * otherwise. */
static void drain_progress(const struct drain *dr, bool tty, uint64_t elapsed_ms) {
        double fraction;
        uint32_t short_of = drain_short(dr, &fraction);
        char detail[1024], b1[32];

        drain_short_text(dr, detail, sizeof(detail));
        if (tty) {
                int fill = (int)(fraction * DRAIN_BAR_WIDTH + 0.5);
                printf("\r\033[K[%.*s%*s] %u/%u at %s, %s%s%.60s", fill,
                       "##############################", DRAIN_BAR_WIDTH - fill, "",
                       dr->njobs - short_of, dr->njobs, tier_word(dr->tier),
                       human_duration(elapsed_ms, b1), detail[0] ? ": " : "", detail);
        } else {
                printf("drain: %u of %u jobs at tier %s after %s%s%s\n", dr->njobs - short_of,
                       dr->njobs, tier_word(dr->tier), human_duration(elapsed_ms, b1),
                       detail[0] ? "; short: " : "", detail);
        }
        fflush(stdout);
}

static void drain_result(const struct drain *dr, uint64_t elapsed_ms) {
        char b1[32];
        if (ctl.json) {
                fprintf(ctl.out, "{\"tier\":\"%s\",\"elapsed_ms\":%" PRIu64 ",\"jobs\":[",
                        tier_word(dr->tier), elapsed_ms);
                for (uint32_t i = 0; i < dr->njobs; i++) {
                        fprintf(ctl.out, "%s{\"job\":", i ? "," : "");
                        json_str(dr->jobs[i].name.str);
                        fprintf(ctl.out, ",\"step\":%" PRIu64 "}", dr->jobs[i].step);
                }
                fprintf(ctl.out, "]}\n");
                return;
        }
        if (dr->njobs == 0) {
                fprintf(ctl.out, "drained: no committed step%s%s%s to wait for\n",
                        dr->only ? " of job '" : "", dr->only ? dr->only : "",
                        dr->only ? "'" : "");
                return;
        }
        fprintf(ctl.out, "drained: %u %s at tier %s in %s:", dr->njobs,
                dr->njobs == 1 ? "job" : "jobs", tier_word(dr->tier),
                human_duration(elapsed_ms, b1));
        for (uint32_t i = 0; i < dr->njobs; i++)
                fprintf(ctl.out, "%s %s step %" PRIu64, i ? "," : "", dr->jobs[i].name.str,
                        dr->jobs[i].step);
        fputc('\n', ctl.out);
}

int cmd_drain(int nargs, char **args) {
        static const char usage[] = "drain [JOB] [--tier local|replicated|remote] [--timeout T]";
        struct drain dr = { 0 };
        const char *tier_arg = NULL;

        for (int i = 0; i < nargs; i++) {
                if (!strcmp(args[i], "--tier") && i + 1 < nargs)
                        tier_arg = args[++i];
                else if (!strncmp(args[i], "--tier=", 7))
                        tier_arg = args[i] + 7;
                else if (args[i][0] == '-' || dr.only)
                        return ctl_usage(usage);
                else
                        dr.only = args[i];
        }
        struct ckpt_name check;
        if (dr.only && ctl_job_name(&check, dr.only) < 0)
                return EXIT_USAGE;
        if (tier_arg && strcmp(tier_arg, "local") && strcmp(tier_arg, "replicated") &&
            strcmp(tier_arg, "remote"))
                return ctl_fail(EXIT_USAGE, EINVAL, "drain: --tier '%s': want local, replicated "
                                "or remote", tier_arg);

        struct ckpt_request req = { .hdr.type = CKPT_MSG_STATUS };
        struct ckpt_reply *rep = malloc(sizeof(*rep));
        if (!rep)
                return ctl_fail(EXIT_DAEMON_ERROR, ENOMEM, "out of memory");
        int r = wire_call(&ctl.wire, &req, rep, NULL);
        if (r < 0) {
                free(rep);
                return ctl_report(r, "status");
        }
        bool remote = rep->status.remote_enabled, repl = rep->status.replication_enabled;
        dr.peers_total = rep->status.peers_total;
        free(rep);
        if (!tier_arg)
                dr.tier = remote ? CKPT_TIER_REMOTE : repl ? CKPT_TIER_REPLICATED
                                                          : CKPT_TIER_COMMITTED;
        else
                dr.tier = !strcmp(tier_arg, "remote") ? CKPT_TIER_REMOTE
                        : !strcmp(tier_arg, "replicated") ? CKPT_TIER_REPLICATED
                                                          : CKPT_TIER_COMMITTED;
        if (dr.tier == CKPT_TIER_REMOTE && !remote)
                return ctl_fail(EXIT_DAEMON_ERROR, EOPNOTSUPP, "drain: --tier remote: this node "
                                "has no object store configured ([remote] endpoint)");
        if (dr.tier == CKPT_TIER_REPLICATED && !repl)
                return ctl_fail(EXIT_DAEMON_ERROR, EOPNOTSUPP, "drain: --tier replicated: "
                                "replication is off on this node ([cluster] replication_factor "
                                "1 or no peers)");

        /* the global --timeout bounds the whole drain; without it, drain
         * waits as long as it takes (the allocation's end bounds it) */
        uint64_t start = now_ms(), last_line = 0;
        uint64_t limit = ctl.timeout_given ? ctl.timeout_ms : 0;
        bool tty = !ctl.json && isatty(STDOUT_FILENO);
        char last_text[1024] = "";
        uint64_t last_wait = 0;
        bool first = true;
        int status;
        for (;;) {
                uint64_t before = now_ms() - start;
                /* WAIT for every step at the start, now and then, and in
                 * the last round before the deadline */
                bool ask = first || before - last_wait >= DRAIN_WAIT_EVERY_MS ||
                           (limit && before + DRAIN_POLL_MS >= limit);
                if (ask)
                        last_wait = before;
                first = false;
                status = drain_poll(&dr, ask);
                if (status)
                        break;
                double fraction;
                uint32_t short_of = drain_short(&dr, &fraction);
                uint64_t elapsed = now_ms() - start;
                if (short_of == 0) {
                        if (tty && dr.njobs) {
                                drain_progress(&dr, true, elapsed);
                                printf("\n");
                        }
                        drain_result(&dr, elapsed);
                        break;
                }
                if (limit && elapsed >= limit) {
                        char detail[1024], b1[32];
                        if (tty)
                                printf("\n");
                        drain_short_text(&dr, detail, sizeof(detail));
                        status = ctl_fail(EXIT_DAEMON_ERROR, ETIMEDOUT, "drain: %u of %u %s not "
                                          "at tier %s after %s: %s%s%s", short_of, dr.njobs,
                                          dr.njobs == 1 ? "job" : "jobs", tier_word(dr.tier),
                                          human_duration(limit, b1), detail,
                                          dr.store_error[0] ? "; the object store's last error: "
                                                            : "", dr.store_error);
                        break;
                }
                if (tty) {
                        drain_progress(&dr, true, elapsed);
                } else if (!ctl.json) {
                        char text[1024];
                        drain_short_text(&dr, text, sizeof(text));
                        if (strcmp(text, last_text) || elapsed - last_line >= DRAIN_LINE_EVERY_MS) {
                                drain_progress(&dr, false, elapsed);
                                snprintf(last_text, sizeof(last_text), "%s", text);
                                last_line = elapsed;
                        }
                }
                uint64_t nap = DRAIN_POLL_MS;
                if (limit && limit - elapsed < nap)
                        nap = limit - elapsed;
                struct timespec ts = { .tv_sec = (time_t)(nap / 1000),
                                       .tv_nsec = (long)(nap % 1000) * 1000000L };
                nanosleep(&ts, NULL);
        }
        free(dr.jobs);
        return status;
}
