/* SPDX-License-Identifier: MIT */
/*
 * ckptctl status: the daemon, its pool, saves in flight, peers, the object
 * store, the scrub and a line per job (--watch: watch.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl/ctl.h"

static const char *scrub_state_name(uint8_t state) {
        static const char *const names[] = { "off", "waiting", "running", "paused" };
        return state < sizeof(names) / sizeof(names[0]) ? names[state] : "?";
}

/* "scrub": the pass, its progress, the rate, the last findings (null when
 * the scrub is off, or the daemon predates it). */
static void print_scrub_json(const struct ckpt_rep_status *s) {
        if (s->scrub_state == CKPT_SCRUB_OFF) {
                fprintf(ctl.out, ",\"scrub\":null");
                return;
        }
        fprintf(ctl.out, ",\"scrub\":{\"state\":\"%s\",\"pass\":%" PRIu64
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
        fprintf(ctl.out, "}");
}

static void print_scrub_text(const struct ckpt_rep_status *s) {
        char b1[32], b2[32], b3[32], b4[32];

        if (s->scrub_state == CKPT_SCRUB_OFF) {
                fprintf(ctl.out, "scrub:     off\n");
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
                fprintf(ctl.out, "scrub:     waiting; first pass %s; rate %s\n", when, b3);
        } else if (s->scrub_state == CKPT_SCRUB_WAITING) {
                fprintf(ctl.out, "scrub:     waiting; pass %" PRIu64 " verified %" PRIu64 " copies "
                        "(%s), %" PRIu64 " bad; next pass %s; rate %s\n", s->scrub_pass,
                        s->scrub_copies_verified, human_bytes(s->scrub_bytes_verified, b1),
                        s->scrub_copies_bad, when, b3);
        } else {
                fprintf(ctl.out, "scrub:     pass %" PRIu64 " %s, %s of %s verified, %" PRIu64
                        " copies, %" PRIu64 " bad; rate %s (measured %s/s)\n", s->scrub_pass,
                        scrub_state_name(s->scrub_state), human_bytes(s->scrub_bytes_verified, b1),
                        human_bytes(s->scrub_bytes_total, b2), s->scrub_copies_verified,
                        s->scrub_copies_bad, b3, human_bytes(s->scrub_rate_measured, b4));
        }
        if (s->scrub_last_findings[0])
                fprintf(ctl.out, "           %" PRIu64 " bad copies found since start, last: %s\n",
                        s->scrub_findings, s->scrub_last_findings);
}

int cmd_status(int nargs, char **args) {
        bool watch = false;
        for (int i = 0; i < nargs; i++)
                watch |= !strcmp(args[i], "--watch");
        if (nargs && !watch)
                return ctl_usage("status [--watch [--interval S]]");
        if (watch)
                return status_watch(nargs, args);
        struct ckpt_request req = { .hdr.type = CKPT_MSG_STATUS };
        struct ckpt_reply *rep = malloc(sizeof(*rep));
        struct ckpt_job_entry *jobs = NULL;
        uint32_t njobs = 0;
        char b1[32], b2[32], b3[32];

        if (!rep)
                return EXIT_DAEMON_ERROR;
        int r = wire_call(&ctl.wire, &req, rep, NULL);
        if (r < 0) {
                free(rep);
                return ctl_report(r, "status");
        }
        r = fetch_jobs(&jobs, &njobs);
        if (r < 0) {
                free(rep);
                return ctl_report(r, "listing jobs");
        }
        const struct ckpt_rep_status *s = &rep->status;
        if (ctl.json) {
                fprintf(ctl.out, "{\"version\":");
                json_str(s->daemon_version);
                fprintf(ctl.out, ",\"uptime_ms\":%" PRIu64 ",\"state_dir\":", s->uptime_ms);
                json_str(s->state_dir);
                fprintf(ctl.out, ",\"pool\":{\"bytes\":%" PRIu64 ",\"used_bytes\":%" PRIu64
                       ",\"slots\":%u,\"slots_used\":%u,\"waiters\":%u}",
                       s->pool_bytes, s->pool_used_bytes, s->slot_count, s->slots_used,
                       s->slot_waiters);
                fprintf(ctl.out, ",\"memory\":{\"bytes\":%" PRIu64 ",\"steps\":%u}",
                        s->memory_bytes, s->memory_steps);
                fprintf(ctl.out, ",\"in_flight\":{\"bytes\":%" PRIu64 ",\"shards\":%u,\"saves\":%u}",
                       s->bytes_in_flight, s->shards_in_flight, s->saves_active);
                fprintf(ctl.out, ",\"clients\":%u,\"bytes_written\":%" PRIu64 ",\"bytes_read\":%" PRIu64
                       ",\"errors\":%" PRIu64 ",\"last_error\":",
                       s->clients, s->bytes_written, s->bytes_read, s->errors);
                json_str(s->last_error);
                fprintf(ctl.out, ",\"node_index\":%u,\"node_count\":%u", s->node_index, s->node_count);
                fprintf(ctl.out, ",\"copies\":{\"bad\":%u,\"repaired\":%u,\"unrepairable\":%u}",
                        s->copies_bad, s->copies_repaired, s->copies_unrepairable);
                if (s->replication_enabled) {
                        fprintf(ctl.out, ",\"replication\":{\"peers_up\":%u,\"peers_total\":%u,"
                                "\"pending\":%u,\"degraded\":%s,\"peers\":", s->peers_up,
                                s->peers_total, s->repl_steps_pending,
                                s->repl_steps_pending || s->peers_up < s->peers_total ? "true"
                                                                                     : "false");
                        json_str(s->peers);
                        fprintf(ctl.out, "}");
                } else {
                        fprintf(ctl.out, ",\"replication\":null");
                }
                if (s->remote_enabled) {
                        fprintf(ctl.out, ",\"remote\":{\"target\":");
                        json_str(s->remote_target);
                        fprintf(ctl.out, ",\"steps_pending\":%u,\"steps_failed\":%u,\"uploads_active\":%u"
                                ",\"requests_active\":%u,\"bytes_uploaded\":%" PRIu64
                                ",\"bytes_downloaded\":%" PRIu64 ",\"requests\":%" PRIu64
                                ",\"retries\":%" PRIu64 ",\"failures\":%" PRIu64 ",\"error\":",
                                s->remote_steps_pending, s->remote_steps_failed,
                                s->remote_uploads_active, s->remote_requests_active,
                                s->remote_bytes_uploaded, s->remote_bytes_downloaded,
                                s->remote_requests, s->remote_retries, s->remote_failures);
                        json_str(s->remote_error);
                        fprintf(ctl.out, ",\"audit\":{\"passes\":%" PRIu64 ",\"checked\":%" PRIu64
                                ",\"bad\":%" PRIu64 ",\"repaired\":%" PRIu64 "}}",
                                s->audit_passes, s->audit_objects_checked, s->audit_objects_bad,
                                s->audit_objects_repaired);
                } else {
                        fprintf(ctl.out, ",\"remote\":null");
                }
                print_scrub_json(s);
                fprintf(ctl.out, ",\"jobs\":[");
                for (uint32_t i = 0; i < njobs; i++) {
                        if (i)
                                fputc(',', ctl.out);
                        print_job_json(&jobs[i]);
                }
                fprintf(ctl.out, "]}\n");
        } else {
                fprintf(ctl.out, "ckptd %s, up %s\n", s->daemon_version, human_duration(s->uptime_ms, b1));
                if (s->state_dir[0])
                        fprintf(ctl.out, "state:     %s\n", s->state_dir);
                fprintf(ctl.out, "pool:      %u of %u slots in use (%s of %s), %u waiting\n", s->slots_used,
                       s->slot_count, human_bytes(s->pool_used_bytes, b1),
                       human_bytes(s->pool_bytes, b2), s->slot_waiters);
                fprintf(ctl.out, "memory:    %u committed steps resident, %s of the pool\n",
                        s->memory_steps, human_bytes(s->memory_bytes, b1));
                fprintf(ctl.out, "in flight: %u saves, %u shards, %s not yet on disk; %u clients\n",
                       s->saves_active, s->shards_in_flight, human_bytes(s->bytes_in_flight, b1),
                       s->clients);
                fprintf(ctl.out, "traffic:   %s written, %s read since start\n",
                       human_bytes(s->bytes_written, b2), human_bytes(s->bytes_read, b3));
                /* the daemon tells a uid other than root only of its own
                 * jobs' errors (docs/protocol.md, STATUS reply) */
                fprintf(ctl.out, "errors:    %" PRIu64 "%s%s%s\n", s->errors,
                        getuid() == 0 ? "" : " in your jobs", s->last_error[0] ? ", last: " : "",
                        s->last_error);
                if (s->node_count > 1)
                        fprintf(ctl.out, "node:      %u of %u\n", s->node_index, s->node_count);
                if (s->copies_bad || s->copies_repaired || s->copies_unrepairable)
                        fprintf(ctl.out, "copies:    %u corrupt copies repaired, %u being repaired, "
                                "%u with no good copy left%s\n", s->copies_repaired,
                                s->copies_bad, s->copies_unrepairable,
                                s->copies_unrepairable ? " (CORRUPT)" : "");
                if (s->replication_enabled) {
                        bool degraded = s->repl_steps_pending || s->peers_up < s->peers_total;
                        fprintf(ctl.out, "peers:     %u of %u replication targets up, %u step copies "
                                "owed%s\n", s->peers_up, s->peers_total, s->repl_steps_pending,
                                degraded ? " (DEGRADED)" : "");
                        fprintf(ctl.out, "           %s\n", s->peers);
                }
                if (s->remote_enabled) {
                        fprintf(ctl.out, "remote:    %s\n", s->remote_target);
                        fprintf(ctl.out, "           %u steps pending, %u failed, %u uploads active, %s up, "
                                "%s down, %" PRIu64 " requests (%" PRIu64 " retried, %" PRIu64
                                " failed)\n", s->remote_steps_pending, s->remote_steps_failed,
                                s->remote_uploads_active, human_bytes(s->remote_bytes_uploaded, b1),
                                human_bytes(s->remote_bytes_downloaded, b2), s->remote_requests,
                                s->remote_retries, s->remote_failures);
                        if (s->remote_error[0])
                                fprintf(ctl.out, "           error: %s\n", s->remote_error);
                        fprintf(ctl.out, "           audit: %" PRIu64 " passes, %" PRIu64 " objects "
                                "checked, %" PRIu64 " bad, %" PRIu64 " uploaded again\n",
                                s->audit_passes, s->audit_objects_checked, s->audit_objects_bad,
                                s->audit_objects_repaired);
                } else {
                        fprintf(ctl.out, "remote:    none configured\n");
                }
                print_scrub_text(s);
                fprintf(ctl.out, "\n");
                print_job_table(jobs, njobs);
        }
        free(jobs);
        free(rep);
        return 0;
}

