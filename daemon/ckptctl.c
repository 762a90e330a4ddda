/* SPDX-License-Identifier: MIT */
/*
 * ckptctl — the operator's view of a running ckptd.
 *
 *   ckptctl [--socket PATH] [--json] status
 *   ckptctl [--socket PATH] [--json] list [JOB]
 *   ckptctl [--socket PATH] [--json] show JOB STEP
 *   ckptctl [--socket PATH] [--json] latest JOB [--rank R [--below STEP]]
 *   ckptctl [--socket PATH] [--json] restore JOB [STEP] [--node N | --rank R | --all]
 *   ckptctl [--socket PATH] pin|unpin JOB STEP
 *   (any of them with --timeout DURATION: how long each request may wait for
 *   the daemon's reply; default $CKPT_TIMEOUT_MS, else 60 s)
 *
 * Tables for people, --json for scripts.  Exit status: 0 ok, 1 the daemon
 * reported an error, 2 usage, 3 no daemon is running at the socket.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckptd-config.h"
#include "conn.h"

#define EXIT_DAEMON_ERROR 1
#define EXIT_USAGE 2
#define EXIT_NOT_RUNNING 3

static bool json;
/* Everything a command prints goes here first and reaches stdout only if
 * the whole command succeeded: a failure halfway never leaves half a table
 * or half a JSON document behind. */
static FILE *out;
static struct wire wire;

static void json_str(const char *s) {
        fputc('"', out);
        for (; *s; s++) {
                unsigned char ch = (unsigned char)*s;
                if (ch == '"' || ch == '\\')
                        fprintf(out, "\\%c", ch);
                else if (ch < 0x20)
                        fprintf(out, "\\u%04x", ch);
                else
                        fputc(ch, out);
        }
        fputc('"', out);
}

static const char *human_bytes(uint64_t b, char buf[32]) {
        static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
        double v = (double)b;
        int u = 0;
        while (v >= 1024 && u < 5) {
                v /= 1024;
                u++;
        }
        if (u == 0)
                snprintf(buf, 32, "%" PRIu64 " B", b);
        else
                snprintf(buf, 32, "%.1f %s", v, units[u]);
        return buf;
}

static const char *human_duration(uint64_t ms, char buf[32]) {
        uint64_t s = ms / 1000;
        if (s >= 86400)
                snprintf(buf, 32, "%" PRIu64 "d %" PRIu64 "h", s / 86400, s % 86400 / 3600);
        else if (s >= 3600)
                snprintf(buf, 32, "%" PRIu64 "h %" PRIu64 "m", s / 3600, s % 3600 / 60);
        else if (s >= 60)
                snprintf(buf, 32, "%" PRIu64 "m %" PRIu64 "s", s / 60, s % 60);
        else
                snprintf(buf, 32, "%" PRIu64 ".%01" PRIu64 "s", s, ms % 1000 / 100);
        return buf;
}

/* The deadline of each request (--timeout, else $CKPT_TIMEOUT_MS, else
 * conn.h's default): a stopped or hung daemon must not hang ckptctl, and
 * so whatever script or monitor runs it. */
static uint32_t timeout_ms;
static bool timeout_given;

/* "1500", "1500ms" or "2s" -> milliseconds. */
static int parse_timeout(const char *s, uint32_t *ms_out) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        unsigned long long scale = !strcmp(end, "s") ? 1000 : 1;
        if (*s < '0' || *s > '9' || errno || (*end && strcmp(end, "ms") && strcmp(end, "s")) ||
            v > UINT32_MAX / scale) {
                fprintf(stderr, "ckptctl: --timeout '%s': want milliseconds (1500, 1500ms) or "
                                "seconds (2s) below 2^32 ms; 0: wait forever\n",
                        s);
                return -EINVAL;
        }
        *ms_out = (uint32_t)(v * scale);
        return 0;
}

static int report(int r, const char *what) {
        fprintf(stderr, "ckptctl: %s: %s\n", what, wire.errmsg[0] ? wire.errmsg : strerror(-r));
        return EXIT_DAEMON_ERROR;
}

/* Fetch every page of the job list (caller frees). */
static int fetch_jobs(struct ckpt_job_entry **jobs_out, uint32_t *n_out) {
        struct ckpt_reply *rep = malloc(sizeof(*rep));
        struct ckpt_job_entry *all = NULL;
        uint32_t n = 0;
        int r = 0;

        if (!rep)
                return -ENOMEM;
        for (;;) {
                struct ckpt_request req = { .hdr.type = CKPT_MSG_JOB_LIST };
                req.list.start = n;
                r = wire_call(&wire, &req, rep, NULL);
                if (r < 0)
                        break;
                const struct ckpt_rep_job_list *l = &rep->job_list;
                struct ckpt_job_entry *grown = realloc(all, (n + l->count + 1) * sizeof(*all));
                if (!grown) {
                        r = -ENOMEM;
                        break;
                }
                all = grown;
                memcpy(all + n, l->entries, l->count * sizeof(*all));
                n += l->count;
                if (l->count == 0 || n >= l->total)
                        break;
        }
        free(rep);
        if (r < 0) {
                free(all);
                return r;
        }
        *jobs_out = all;
        *n_out = n;
        return 0;
}

static int fetch_ckpts(const char *job, struct ckpt_ckpt_entry **ckpts_out, uint32_t *n_out) {
        struct ckpt_reply *rep = malloc(sizeof(*rep));
        struct ckpt_ckpt_entry *all = NULL;
        uint32_t n = 0;
        int r = 0;

        if (!rep)
                return -ENOMEM;
        for (;;) {
                struct ckpt_request req = { .hdr.type = CKPT_MSG_CKPT_LIST };
                r = ckpt_name_set(&req.list.job, job);
                if (r < 0) {
                        snprintf(wire.errmsg, sizeof(wire.errmsg), "invalid job name '%s'", job);
                        break;
                }
                req.list.start = n;
                r = wire_call(&wire, &req, rep, NULL);
                if (r < 0)
                        break;
                const struct ckpt_rep_ckpt_list *l = &rep->ckpt_list;
                struct ckpt_ckpt_entry *grown = realloc(all, (n + l->count + 1) * sizeof(*all));
                if (!grown) {
                        r = -ENOMEM;
                        break;
                }
                all = grown;
                memcpy(all + n, l->entries, l->count * sizeof(*all));
                n += l->count;
                if (l->count == 0 || n >= l->total)
                        break;
        }
        free(rep);
        if (r < 0) {
                free(all);
                return r;
        }
        *ckpts_out = all;
        *n_out = n;
        return 0;
}

static void print_job_table(const struct ckpt_job_entry *jobs, uint32_t n) {
        char b[32];
        fprintf(out, "%-24s %6s %12s %6s %9s %12s %6s\n", "JOB", "UID", "LATEST", "CKPTS", "COMMITTED",
               "LOCAL", "ERRORS");
        for (uint32_t i = 0; i < n; i++) {
                char latest[24] = "-";
                if (jobs[i].latest_committed >= 0)
                        snprintf(latest, sizeof(latest), "%" PRId64, jobs[i].latest_committed);
                fprintf(out, "%-24s %6u %12s %6u %9u %12s %6u\n", jobs[i].name.str, jobs[i].uid, latest,
                       jobs[i].checkpoints, jobs[i].committed, human_bytes(jobs[i].bytes_local, b),
                       jobs[i].errors);
        }
        if (n == 0)
                fprintf(out, "(no jobs)\n");
}

static void print_job_json(const struct ckpt_job_entry *j) {
        fprintf(out, "{\"name\":");
        json_str(j->name.str);
        fprintf(out, ",\"uid\":%u,\"latest_committed\":", j->uid);
        if (j->latest_committed >= 0)
                fprintf(out, "%" PRId64, j->latest_committed);
        else
                fprintf(out, "null");
        fprintf(out, ",\"checkpoints\":%u,\"committed\":%u,\"tiers\":{\"local\":{\"bytes\":%" PRIu64
               "}},\"errors\":%u}",
               j->checkpoints, j->committed, j->bytes_local, j->errors);
}

static const char *scrub_state_name(uint8_t state) {
        static const char *const names[] = { "off", "waiting", "running", "paused" };
        return state < sizeof(names) / sizeof(names[0]) ? names[state] : "?";
}

/* "scrub": the pass, its progress, the rate, the last findings (null when
 * the scrub is off, or the daemon predates it). */
static void print_scrub_json(const struct ckpt_rep_status *s) {
        if (s->scrub_state == CKPT_SCRUB_OFF) {
                fprintf(out, ",\"scrub\":null");
                return;
        }
        fprintf(out, ",\"scrub\":{\"state\":\"%s\",\"pass\":%" PRIu64
                ",\"bytes_verified\":%" PRIu64 ",\"bytes_total\":%" PRIu64
                ",\"copies_verified\":%" PRIu64 ",\"copies_bad\":%" PRIu64 ",\"rate\":%" PRIu64
                ",\"rate_measured\":%" PRIu64 ",\"pass_started_at\":%" PRId64
                ",\"pass_finished_at\":%" PRId64 ",\"next_pass_at\":%" PRId64
                ",\"findings\":%" PRIu64 ",\"last_findings\":",
                scrub_state_name(s->scrub_state), s->scrub_pass, s->scrub_bytes_verified,
                s->scrub_bytes_total, s->scrub_copies_verified, s->scrub_copies_bad, s->scrub_rate,
                s->scrub_rate_measured, s->scrub_pass_started_at, s->scrub_pass_finished_at,
                s->scrub_next_pass_at, s->scrub_findings);
        json_str(s->scrub_last_findings);
        fprintf(out, "}");
}

static void print_scrub_text(const struct ckpt_rep_status *s) {
        char b1[32], b2[32], b3[32], b4[32];

        if (s->scrub_state == CKPT_SCRUB_OFF) {
                fprintf(out, "scrub:     off\n");
                return;
        }
        if (s->scrub_rate)
                snprintf(b3, sizeof(b3), "%s/s", human_bytes(s->scrub_rate, b4));
        else
                snprintf(b3, sizeof(b3), "unlimited");
        char when[32] = "soon";
        time_t next = (time_t)s->scrub_next_pass_at;
        struct tm tm;
        if (next && localtime_r(&next, &tm))
                strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
        if (s->scrub_state == CKPT_SCRUB_WAITING && s->scrub_pass == 0) {
                fprintf(out, "scrub:     waiting; first pass %s; rate %s\n", when, b3);
        } else if (s->scrub_state == CKPT_SCRUB_WAITING) {
                fprintf(out, "scrub:     waiting; pass %" PRIu64 " verified %" PRIu64 " copies "
                        "(%s), %" PRIu64 " bad; next pass %s; rate %s\n", s->scrub_pass,
                        s->scrub_copies_verified, human_bytes(s->scrub_bytes_verified, b1),
                        s->scrub_copies_bad, when, b3);
        } else {
                fprintf(out, "scrub:     pass %" PRIu64 " %s, %s of %s verified, %" PRIu64
                        " copies, %" PRIu64 " bad; rate %s (measured %s/s)\n", s->scrub_pass,
                        scrub_state_name(s->scrub_state), human_bytes(s->scrub_bytes_verified, b1),
                        human_bytes(s->scrub_bytes_total, b2), s->scrub_copies_verified,
                        s->scrub_copies_bad, b3, human_bytes(s->scrub_rate_measured, b4));
        }
        if (s->scrub_last_findings[0])
                fprintf(out, "           %" PRIu64 " bad copies found since start, last: %s\n",
                        s->scrub_findings, s->scrub_last_findings);
}

static int cmd_status(void) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_STATUS };
        struct ckpt_reply *rep = malloc(sizeof(*rep));
        struct ckpt_job_entry *jobs = NULL;
        uint32_t njobs = 0;
        char b1[32], b2[32], b3[32];

        if (!rep)
                return EXIT_DAEMON_ERROR;
        int r = wire_call(&wire, &req, rep, NULL);
        if (r < 0) {
                free(rep);
                return report(r, "status");
        }
        r = fetch_jobs(&jobs, &njobs);
        if (r < 0) {
                free(rep);
                return report(r, "listing jobs");
        }
        const struct ckpt_rep_status *s = &rep->status;
        if (json) {
                fprintf(out, "{\"version\":");
                json_str(s->daemon_version);
                fprintf(out, ",\"uptime_ms\":%" PRIu64 ",\"state_dir\":", s->uptime_ms);
                json_str(s->state_dir);
                fprintf(out, ",\"pool\":{\"bytes\":%" PRIu64 ",\"used_bytes\":%" PRIu64
                       ",\"slots\":%u,\"slots_used\":%u,\"waiters\":%u}",
                       s->pool_bytes, s->pool_used_bytes, s->slot_count, s->slots_used,
                       s->slot_waiters);
                fprintf(out, ",\"in_flight\":{\"bytes\":%" PRIu64 ",\"shards\":%u,\"saves\":%u}",
                       s->bytes_in_flight, s->shards_in_flight, s->saves_active);
                fprintf(out, ",\"clients\":%u,\"bytes_written\":%" PRIu64 ",\"bytes_read\":%" PRIu64
                       ",\"errors\":%" PRIu64 ",\"last_error\":",
                       s->clients, s->bytes_written, s->bytes_read, s->errors);
                json_str(s->last_error);
                fprintf(out, ",\"node_index\":%u,\"node_count\":%u", s->node_index, s->node_count);
                fprintf(out, ",\"copies\":{\"bad\":%u,\"repaired\":%u,\"unrepairable\":%u}",
                        s->copies_bad, s->copies_repaired, s->copies_unrepairable);
                if (s->replication_enabled) {
                        fprintf(out, ",\"replication\":{\"peers_up\":%u,\"peers_total\":%u,"
                                "\"pending\":%u,\"degraded\":%s,\"peers\":", s->peers_up,
                                s->peers_total, s->repl_steps_pending,
                                s->repl_steps_pending || s->peers_up < s->peers_total ? "true"
                                                                                     : "false");
                        json_str(s->peers);
                        fprintf(out, "}");
                } else {
                        fprintf(out, ",\"replication\":null");
                }
                if (s->remote_enabled) {
                        fprintf(out, ",\"remote\":{\"target\":");
                        json_str(s->remote_target);
                        fprintf(out, ",\"steps_pending\":%u,\"steps_failed\":%u,\"uploads_active\":%u"
                                ",\"requests_active\":%u,\"bytes_uploaded\":%" PRIu64
                                ",\"bytes_downloaded\":%" PRIu64 ",\"requests\":%" PRIu64
                                ",\"retries\":%" PRIu64 ",\"failures\":%" PRIu64 ",\"error\":",
                                s->remote_steps_pending, s->remote_steps_failed,
                                s->remote_uploads_active, s->remote_requests_active,
                                s->remote_bytes_uploaded, s->remote_bytes_downloaded,
                                s->remote_requests, s->remote_retries, s->remote_failures);
                        json_str(s->remote_error);
                        fprintf(out, ",\"audit\":{\"passes\":%" PRIu64 ",\"checked\":%" PRIu64
                                ",\"bad\":%" PRIu64 ",\"repaired\":%" PRIu64 "}}",
                                s->audit_passes, s->audit_objects_checked, s->audit_objects_bad,
                                s->audit_objects_repaired);
                } else {
                        fprintf(out, ",\"remote\":null");
                }
                print_scrub_json(s);
                fprintf(out, ",\"jobs\":[");
                for (uint32_t i = 0; i < njobs; i++) {
                        if (i)
                                fputc(',', out);
                        print_job_json(&jobs[i]);
                }
                fprintf(out, "]}\n");
        } else {
                fprintf(out, "ckptd %s, up %s\n", s->daemon_version, human_duration(s->uptime_ms, b1));
                if (s->state_dir[0])
                        fprintf(out, "state:     %s\n", s->state_dir);
                fprintf(out, "pool:      %u of %u slots in use (%s of %s), %u waiting\n", s->slots_used,
                       s->slot_count, human_bytes(s->pool_used_bytes, b1),
                       human_bytes(s->pool_bytes, b2), s->slot_waiters);
                fprintf(out, "in flight: %u saves, %u shards, %s not yet on disk; %u clients\n",
                       s->saves_active, s->shards_in_flight, human_bytes(s->bytes_in_flight, b1),
                       s->clients);
                fprintf(out, "traffic:   %s written, %s read since start\n",
                       human_bytes(s->bytes_written, b2), human_bytes(s->bytes_read, b3));
                /* the daemon tells a uid other than root only of its own
                 * jobs' errors (docs/protocol.md, STATUS reply) */
                fprintf(out, "errors:    %" PRIu64 "%s%s%s\n", s->errors,
                        getuid() == 0 ? "" : " in your jobs", s->last_error[0] ? ", last: " : "",
                        s->last_error);
                if (s->node_count > 1)
                        fprintf(out, "node:      %u of %u\n", s->node_index, s->node_count);
                if (s->copies_bad || s->copies_repaired || s->copies_unrepairable)
                        fprintf(out, "copies:    %u corrupt copies repaired, %u being repaired, "
                                "%u with no good copy left%s\n", s->copies_repaired,
                                s->copies_bad, s->copies_unrepairable,
                                s->copies_unrepairable ? " (CORRUPT)" : "");
                if (s->replication_enabled) {
                        bool degraded = s->repl_steps_pending || s->peers_up < s->peers_total;
                        fprintf(out, "peers:     %u of %u replication targets up, %u step copies "
                                "owed%s\n", s->peers_up, s->peers_total, s->repl_steps_pending,
                                degraded ? " (DEGRADED)" : "");
                        fprintf(out, "           %s\n", s->peers);
                }
                if (s->remote_enabled) {
                        fprintf(out, "remote:    %s\n", s->remote_target);
                        fprintf(out, "           %u steps pending, %u failed, %u uploads active, %s up, "
                                "%s down, %" PRIu64 " requests (%" PRIu64 " retried, %" PRIu64
                                " failed)\n", s->remote_steps_pending, s->remote_steps_failed,
                                s->remote_uploads_active, human_bytes(s->remote_bytes_uploaded, b1),
                                human_bytes(s->remote_bytes_downloaded, b2), s->remote_requests,
                                s->remote_retries, s->remote_failures);
                        if (s->remote_error[0])
                                fprintf(out, "           error: %s\n", s->remote_error);
                        fprintf(out, "           audit: %" PRIu64 " passes, %" PRIu64 " objects "
                                "checked, %" PRIu64 " bad, %" PRIu64 " uploaded again\n",
                                s->audit_passes, s->audit_objects_checked, s->audit_objects_bad,
                                s->audit_objects_repaired);
                } else {
                        fprintf(out, "remote:    none configured\n");
                }
                print_scrub_text(s);
                fprintf(out, "\n");
                print_job_table(jobs, njobs);
        }
        free(jobs);
        free(rep);
        return 0;
}

static const char *fmt_time(int64_t t, char buf[32]) {
        if (t <= 0)
                return "-";
        time_t tt = (time_t)t;
        struct tm tm;
        gmtime_r(&tt, &tm);
        strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
        return buf;
}

static int cmd_list(const char *job) {
        if (!job) {
                struct ckpt_job_entry *jobs;
                uint32_t n;
                int r = fetch_jobs(&jobs, &n);
                if (r < 0)
                        return report(r, "list");
                if (json) {
                        fprintf(out, "[");
                        for (uint32_t i = 0; i < n; i++) {
                                if (i)
                                        fputc(',', out);
                                print_job_json(&jobs[i]);
                        }
                        fprintf(out, "]\n");
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
                return report(r, "list");
        if (json) {
                fprintf(out, "[");
                for (uint32_t i = 0; i < n; i++) {
                        fprintf(out, "%s{\"step\":%" PRIu64 ",\"state\":", i ? "," : "", c[i].step);
                        json_str(ckpt_state_name(c[i].state));
                        fprintf(out, ",\"world_size\":%u,\"ranks_local\":%u,\"shards\":%u,\"bytes\":%" PRIu64
                               ",\"committed_at\":%" PRId64 ",\"remote\":",
                               c[i].world_size, c[i].ranks_local, c[i].shards, c[i].bytes,
                               c[i].committed_at);
                        json_str(ckpt_remote_state_name(c[i].remote_state));
                        fprintf(out, ",\"pinned\":%s,\"replicas\":%u}", c[i].pinned ? "true" : "false",
                                c[i].replicas);
                }
                fprintf(out, "]\n");
        } else {
                fprintf(out, "%-20s %-10s %6s %6s %7s %12s  %-20s  %-6s  %4s  %s\n", "STEP", "STATE",
                       "WORLD", "RANKS", "SHARDS", "BYTES", "COMMITTED AT", "PIN", "REPL", "REMOTE");
                for (uint32_t i = 0; i < n; i++)
                        fprintf(out, "%-20" PRIu64 " %-10s %6u %6u %7u %12s  %-20s  %-6s  %4u  %s\n", c[i].step,
                               ckpt_state_name(c[i].state), c[i].world_size, c[i].ranks_local,
                               c[i].shards, human_bytes(c[i].bytes, b), fmt_time(c[i].committed_at, t),
                               c[i].pinned ? "pinned" : "", c[i].replicas,
                               ckpt_remote_state_name(c[i].remote_state));
                if (n == 0)
                        fprintf(out, "(no checkpoints)\n");
        }
        free(c);
        return 0;
}

static int cmd_show(const char *job, const char *step_str) {
        char *end;
        errno = 0;
        uint64_t step = strtoull(step_str, &end, 10);
        if (errno || *end || !*step_str || step_str[0] == '-') {
                fprintf(stderr, "ckptctl: STEP must be a non-negative integer, not '%s'\n", step_str);
                return EXIT_USAGE;
        }
        struct ckpt_ckpt_entry *all;
        uint32_t n;
        int r = fetch_ckpts(job, &all, &n);
        if (r < 0)
                return report(r, "show");
        struct ckpt_ckpt_entry *c = NULL;
        for (uint32_t i = 0; i < n; i++)
                if (all[i].step == step)
                        c = &all[i];
        if (!c) {
                fprintf(stderr, "ckptctl: job '%s' has no step %" PRIu64 " on this node\n", job, step);
                free(all);
                return EXIT_DAEMON_ERROR;
        }
        char b[32], t[32];
        if (json) {
                fprintf(out, "{\"job\":");
                json_str(job);
                fprintf(out, ",\"step\":%" PRIu64 ",\"state\":", step);
                json_str(ckpt_state_name(c->state));
                fprintf(out, ",\"world_size\":%u,\"bytes\":%" PRIu64 ",\"committed_at\":%" PRId64
                       ",\"remote\":",
                       c->world_size, c->bytes, c->committed_at);
                json_str(ckpt_remote_state_name(c->remote_state));
                fprintf(out, ",\"ranks\":[");
        } else {
                fprintf(out, "job %s step %" PRIu64 ": %s, world size %u, %u ranks here, %u shards, %s, "
                       "committed %s, object store: %s\n",
                       job, step, ckpt_state_name(c->state), c->world_size, c->ranks_local,
                       c->shards, human_bytes(c->bytes, b), fmt_time(c->committed_at, t),
                       ckpt_remote_state_name(c->remote_state));
        }
        /* The daemon lists the shards of committed steps only (a restore
         * reads nothing else): say so instead of an empty list. */
        bool committed = c->state == CKPT_STATE_COMMITTED;
        if (!committed && !json)
                fprintf(out, "\nshards: not listed until the step is committed\n");
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
                        r = wire_call(&wire, &req, rep, NULL);
                        if (r < 0)
                                break;
                        const struct ckpt_rep_shard_list *l = &rep->shard_list;
                        if (!header) {
                                header = true;
                                if (json)
                                        fprintf(out, "%s{\"rank\":%u,\"shards\":[", first_rank ? "" : ",", rank);
                                else
                                        fprintf(out, "\nrank %u:\n  %-40s %14s  %s\n", rank, "SHARD", "BYTES",
                                               "CRC32C");
                                first_rank = false;
                        }
                        for (uint32_t i = 0; i < l->count; i++) {
                                const struct ckpt_shard_entry *e = &l->entries[i];
                                if (json) {
                                        fprintf(out, "%s{\"name\":", got + i ? "," : "");
                                        json_str(e->name.str);
                                        fprintf(out, ",\"size\":%" PRIu64 ",\"crc32c\":\"%08x\"}", e->size,
                                               e->crc32c);
                                } else {
                                        fprintf(out, "  %-40s %14" PRIu64 "  %08x\n", e->name.str, e->size,
                                               e->crc32c);
                                }
                        }
                        got += l->count;
                        if (l->count == 0 || got >= l->total)
                                break;
                }
                if (header && json)
                        fprintf(out, "]}");
                if (r < 0 && r != -ENOENT) {
                        free(rep);
                        free(all);
                        return report(r, "listing shards");
                }
        }
        if (json)
                fprintf(out, "]}\n");
        free(rep);
        free(all);
        return 0;
}

static int parse_u64(const char *what, const char *str, uint64_t max, uint64_t *value) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(str, &end, 10);
        if (errno || *end || !*str || str[0] == '-' || v > max) {
                fprintf(stderr, "ckptctl: %s must be an integer from 0 to %" PRIu64 ", not '%s'\n",
                        what, max, str);
                return -EINVAL;
        }
        *value = v;
        return 0;
}

/* restore JOB [STEP] [--node N | --rank R | --all]: pull a committed step
 * from the object store into this node's local tier. */
static int cmd_restore(int nargs, char **args) {
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
        if (ckpt_name_set(&req.fetch.job, job) < 0) {
                fprintf(stderr, "ckptctl: '%s' is not a valid job name\n", job);
                return EXIT_USAGE;
        }
        if (!which) {
                /* this node's share, as the job was laid out when it saved */
                struct ckpt_request sreq = { .hdr.type = CKPT_MSG_STATUS };
                struct ckpt_reply *srep = malloc(sizeof(*srep));
                int r = srep ? wire_call(&wire, &sreq, srep, NULL) : -ENOMEM;
                if (r < 0) {
                        free(srep);
                        return report(r, "status");
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
        int r = wire_call_within(&wire, NULL, timeout_given ? WIRE_TIMEOUT_CONN : 0, &req, &rep,
                                 NULL);
        if (r < 0)
                return report(r, "restore");
        char b[32];
        if (which == CKPT_FETCH_PEERS) {
                if (json)
                        fprintf(out, "{\"job\":\"%s\",\"ranks\":%u,\"from\":\"peers\"}\n",
                                req.fetch.job.str, rep.fetch.ranks);
                else
                        fprintf(out, "job %s: %u ranks restored from the neighbours into the local "
                                "tier\n", job, rep.fetch.ranks);
                return 0;
        }
        if (json)
                fprintf(out, "{\"job\":\"%s\",\"step\":%" PRIu64 ",\"world_size\":%u,\"ranks\":%u,"
                        "\"shards\":%u,\"bytes\":%" PRIu64 "}\n", req.fetch.job.str, rep.fetch.step,
                        rep.fetch.world_size, rep.fetch.ranks, rep.fetch.shards, rep.fetch.bytes);
        else
                fprintf(out, "job %s step %" PRIu64 " (world size %u): %u ranks, %u shards, %s "
                        "restored from the object store into the local tier\n", job, rep.fetch.step,
                        rep.fetch.world_size, rep.fetch.ranks, rep.fetch.shards,
                        human_bytes(rep.fetch.bytes, b));
        return 0;
usage:
        fprintf(stderr, "ckptctl: usage: restore JOB [STEP] [--node N | --rank R | --all | "
                "--from-peers]\n");
        return EXIT_USAGE;
}

/* latest JOB [--rank R [--below STEP]]: the newest committed step, or the
 * one rank R restores from (LATEST_RANK) and whether that fell back. */
static int cmd_latest(int nargs, char **args) {
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
        if (ckpt_name_set(name, job) < 0) {
                fprintf(stderr, "ckptctl: '%s' is not a valid job name\n", job);
                return EXIT_USAGE;
        }
        if (!by_rank) {
                int r = wire_call(&wire, &req, &rep, NULL);
                if (r < 0)
                        return report(r, "latest");
                if (json)
                        fprintf(out, "{\"job\":\"%s\",\"step\":%" PRIu64 ",\"world_size\":%u}\n",
                                name->str, rep.latest.step, rep.latest.world_size);
                else
                        fprintf(out, "job %s: newest committed step %" PRIu64 " (world size %u)\n",
                                job, rep.latest.step, rep.latest.world_size);
                return 0;
        }
        req.latest_rank.rank = (uint32_t)rank;
        req.latest_rank.below = below;
        rep.hdr.type = 0;
        int r = wire_call(&wire, &req, &rep, NULL);
        if (r == -EBADMSG && rep.hdr.type == CKPT_MSG_ERROR) {
                fprintf(stderr, "ckptctl: latest --rank: this ckptd predates the request "
                        "(LATEST_RANK); upgrade it\n");
                return EXIT_DAEMON_ERROR;
        }
        if (r < 0)
                return report(r, "latest");
        const struct ckpt_rep_latest_rank *l = &rep.latest_rank;
        if (json) {
                fprintf(out, "{\"job\":\"%s\",\"rank\":%u,\"step\":%" PRIu64 ",\"world_size\":%u,"
                        "\"newest\":%" PRIu64 ",\"skipped\":%u,\"fell_back\":%s}\n", name->str,
                        req.latest_rank.rank, l->step, l->world_size, l->newest, l->skipped,
                        l->step != l->newest ? "true" : "false");
        } else {
                fprintf(out, "job %s rank %u: restore from step %" PRIu64 " (world size %u)\n",
                        job, req.latest_rank.rank, l->step, l->world_size);
                if (l->step != l->newest)
                        fprintf(out, "fell back from step %" PRIu64 ": the rank is not "
                                "restorable from the %u newer committed step%s (the daemon's "
                                "log says why)\n", l->newest, l->skipped,
                                l->skipped == 1 ? "" : "s");
        }
        return 0;
usage:
        fprintf(stderr, "ckptctl: usage: latest JOB [--rank R [--below STEP]]\n");
        return EXIT_USAGE;
}

static int cmd_pin(const char *job, const char *step_str, bool pinned) {
        uint64_t step;
        if (parse_u64("STEP", step_str, CKPT_STEP_MAX, &step) < 0)
                return EXIT_USAGE;
        struct ckpt_request req = { .hdr.type = CKPT_MSG_PIN };
        struct ckpt_reply rep;
        if (ckpt_name_set(&req.pin.job, job) < 0) {
                fprintf(stderr, "ckptctl: '%s' is not a valid job name\n", job);
                return EXIT_USAGE;
        }
        req.pin.step = step;
        req.pin.pinned = pinned;
        int r = wire_call(&wire, &req, &rep, NULL);
        if (r < 0)
                return report(r, pinned ? "pin" : "unpin");
        if (!json)
                fprintf(out, "job %s step %" PRIu64 " %s\n", job, step,
                        pinned ? "pinned: retention keeps it here and in the object store"
                               : "unpinned");
        return 0;
}

/* The whole output of a command that reports a finding by its exit
 * status (verify: 1 when a bad copy remains) reaches stdout anyway. */
static bool keep_output;

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
static int cmd_verify(int nargs, char **args) {
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
        if (ckpt_name_set(&req.verify.job, job) < 0) {
                fprintf(stderr, "ckptctl: '%s' is not a valid job name\n", job);
                return EXIT_USAGE;
        }
        struct ckpt_reply *rep = malloc(sizeof(*rep));
        if (!rep)
                return report(-ENOMEM, "verify");
        /* reading every copy in full can rightly take long: only an
         * explicit --timeout bounds it */
        int r = wire_call_within(&wire, NULL, timeout_given ? WIRE_TIMEOUT_CONN : 0, &req, rep,
                                 NULL);
        if (r < 0) {
                free(rep);
                return report(r, "verify");
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
        if (json) {
                fprintf(out, "{\"job\":");
                json_str(job);
                fprintf(out, ",\"copies_checked\":%u,\"bad\":%u,\"repaired\":%u,\"shards\":[",
                        copies, bad, repaired);
        } else {
                fprintf(out, "job %s: %u cop%s checked, %u bad, %u repaired%s\n", job, copies,
                        copies == 1 ? "y" : "ies", bad, repaired,
                        vr->total > vr->count ? " (the good shards not all listed: name a step "
                                                "or a rank)" : "");
                fprintf(out, "%-20s %-6s %-18s %-24s %10s  %s\n", "STEP", "RANK", "COPY", "SHARD",
                        "BYTES", "STATE");
        }
        for (uint32_t i = 0; i < vr->count; i++) {
                const struct ckpt_verify_entry *e = &vr->entries[i];
                char where[32], b[32];
                if (e->area == CKPT_COPY_LOCAL)
                        snprintf(where, sizeof(where), "local");
                else
                        snprintf(where, sizeof(where), "replica of node %u", e->area);
                if (json) {
                        fprintf(out, "%s{\"step\":%" PRIu64 ",\"rank\":%u,\"copy\":", i ? "," : "",
                                e->step, e->rank);
                        json_str(where);
                        if (e->area == CKPT_COPY_LOCAL)
                                fprintf(out, ",\"replica_of\":null");
                        else
                                fprintf(out, ",\"replica_of\":%u", e->area);
                        fprintf(out, ",\"shard\":");
                        json_str(e->shard);
                        fprintf(out, ",\"bytes\":%" PRIu64 ",\"state\":\"%s\",\"detail\":",
                                e->bytes, copy_states[e->state]);
                        json_str(e->detail);
                        fprintf(out, "}");
                } else {
                        /* shard "": the copy as a whole (its MANIFEST or directory) */
                        fprintf(out, "%-20" PRIu64 " %-6u %-18s %-24s %10s  %s%s%s\n", e->step,
                                e->rank, where, e->shard[0] ? e->shard : "-",
                                human_bytes(e->bytes, b),
                                e->state == CKPT_COPY_BAD ? "BAD" : copy_states[e->state],
                                e->detail[0] ? ": " : "", e->detail);
                }
        }
        if (json)
                fprintf(out, "]}\n");
        free(rep);
        keep_output = true;
        return bad ? EXIT_DAEMON_ERROR : 0;
usage:
        fprintf(stderr, "ckptctl: usage: verify JOB [STEP] [--rank R] [--repair]\n");
        return EXIT_USAGE;
}

static void usage(FILE *f) {
        fprintf(f, "Usage: ckptctl [--socket PATH] [--json] COMMAND\n\n"
                   "Commands:\n"
                   "  status           daemon state, pool, in-flight saves, per-job summary\n"
                   "  list [JOB]       jobs, or the checkpoints of JOB (newest first)\n"
                   "  show JOB STEP    one checkpoint: ranks and shards\n"
                   "  latest JOB [--rank R [--below STEP]]\n"
                   "                   the newest committed step; with --rank, the newest\n"
                   "                   one rank R can be restored from (through this node,\n"
                   "                   its neighbours or the object store) and whether\n"
                   "                   that fell back to an older step\n"
                   "  restore JOB [STEP] [--node N | --rank R | --all]\n"
                   "                   copy a committed step (default: the newest) from the\n"
                   "                   object store to local disk: the ranks node N held\n"
                   "                   (default: this node's index), one rank, or all\n"
                   "  verify JOB [STEP] [--rank R] [--repair]\n"
                   "                   read and check every copy this node holds (local tier,\n"
                   "                   replica areas) in full, a line per shard of each;\n"
                   "                   --repair replaces bad copies with a good one;\n"
                   "                   exit 1 while a bad copy remains\n"
                   "  pin JOB STEP     keep a step whatever retention says (local and store)\n"
                   "  unpin JOB STEP   let retention decide again\n\n"
                   "Options:\n"
                   "  --socket PATH    daemon socket (default: $CKPT_SOCKET, the per-user socket,\n"
                   "                   or /run/ckptd/ckptd.sock)\n"
                   "  --json           machine-readable output\n"
                   "  --timeout DURATION\n"
                   "                   how long each request waits for the daemon's reply\n"
                   "                   (N ms, Nms or Ns; 0: forever; default $CKPT_TIMEOUT_MS,\n"
                   "                   else 60s; restore's fetch: forever unless given)\n"
                   "  --version, --help\n");
}

int main(int argc, char **argv) {
        static const struct option longopts[] = {
                { "socket", required_argument, NULL, 's' },
                { "json", no_argument, NULL, 'j' },
                { "timeout", required_argument, NULL, 't' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {}
        };
        const char *socket_path = NULL;
        char def[108];
        int c;

        while ((c = getopt_long(argc, argv, "+s:jh", longopts, NULL)) != -1) {
                switch (c) {
                case 's':
                        socket_path = optarg;
                        break;
                case 'j':
                        json = true;
                        break;
                case 't':
                        if (parse_timeout(optarg, &timeout_ms) < 0)
                                return EXIT_USAGE;
                        timeout_given = true;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                case 'V':
                        printf("ckptctl %s\n", CKPTD_VERSION);
                        return 0;
                default:
                        usage(stderr);
                        return EXIT_USAGE;
                }
        }
        if (optind >= argc) {
                usage(stderr);
                return EXIT_USAGE;
        }
        const char *cmd = argv[optind];
        int nargs = argc - optind - 1;
        char **args = argv + optind + 1;
        if (!((!strcmp(cmd, "status") && nargs == 0) || (!strcmp(cmd, "list") && nargs <= 1) ||
              (!strcmp(cmd, "show") && nargs == 2) || (!strcmp(cmd, "restore") && nargs >= 1) ||
              (!strcmp(cmd, "latest") && nargs >= 1) || (!strcmp(cmd, "verify") && nargs >= 1) ||
              ((!strcmp(cmd, "pin") || !strcmp(cmd, "unpin")) && nargs == 2))) {
                fprintf(stderr, "ckptctl: unknown command or wrong arguments: %s\n", cmd);
                usage(stderr);
                return EXIT_USAGE;
        }

        if (!socket_path)
                socket_path = wire_default_path(def, sizeof(def));
        if (!timeout_given && wire_timeout_from_env(&timeout_ms, wire.errmsg,
                                                    sizeof(wire.errmsg)) < 0) {
                fprintf(stderr, "ckptctl: %s\n", wire.errmsg);
                return EXIT_USAGE;
        }
        int r = wire_open_within(&wire, socket_path, "connect", timeout_ms, NULL);
        if (r == -ENOENT || r == -ECONNREFUSED) {
                fprintf(stderr, "ckptctl: ckptd is not running (nothing listens on %s); start it "
                                "with 'systemctl start ckptd' or run ckptd\n",
                        socket_path);
                return EXIT_NOT_RUNNING;
        }
        if (r < 0) {
                fprintf(stderr, "ckptctl: cannot talk to ckptd at %s: %s\n", socket_path,
                        wire.errmsg[0] ? wire.errmsg : strerror(-r));
                return EXIT_DAEMON_ERROR;
        }
        char *text = NULL;
        size_t len = 0;
        out = open_memstream(&text, &len);
        if (!out) {
                fprintf(stderr, "ckptctl: out of memory\n");
                return EXIT_DAEMON_ERROR;
        }
        if (!strcmp(cmd, "status"))
                r = cmd_status();
        else if (!strcmp(cmd, "list"))
                r = cmd_list(nargs ? args[0] : NULL);
        else if (!strcmp(cmd, "restore"))
                r = cmd_restore(nargs, args);
        else if (!strcmp(cmd, "latest"))
                r = cmd_latest(nargs, args);
        else if (!strcmp(cmd, "verify"))
                r = cmd_verify(nargs, args);
        else if (!strcmp(cmd, "pin") || !strcmp(cmd, "unpin"))
                r = cmd_pin(args[0], args[1], !strcmp(cmd, "pin"));
        else
                r = cmd_show(args[0], args[1]);
        wire_close(&wire);
        fclose(out);
        if (r == 0 || keep_output)
                fwrite(text, 1, len, stdout);
        free(text);
        return r;
}
