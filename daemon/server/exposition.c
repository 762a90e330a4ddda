/* SPDX-License-Identifier: MIT */
/*
 * exposition — the metrics document (exposition.h).
 *
 * Families are written in one fixed order, each with its HELP and TYPE
 * line and all of its samples together, as the text format requires.
 * Names follow Prometheus' conventions: ckptd_ prefix, base units
 * (_bytes, _seconds), _total on counters only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptd-config.h"
#include "metrics/metrics.h"
#include "server/exposition.h"
#include "server/save.h"
#include "server/server.h"
#include "server/step.h"
#include "util/log.h"

/* Tiers with per-job series, in the order they are written. */
static const uint8_t job_tiers[] = { CKPT_TIER_STAGED, CKPT_TIER_LOCAL, CKPT_TIER_COMMITTED,
                                     CKPT_TIER_REMOTE, CKPT_TIER_REPLICATED };
#define NTIERS (sizeof(job_tiers) / sizeof(job_tiers[0]))

struct job_row {
        char job[CKPT_NAME_MAX + 1];
        uint64_t steps[NTIERS], bytes[NTIERS];
};

struct jobs_gather {
        struct server *srv;
        int64_t uid;
        struct job_row rows[EXPOSITION_JOBS_MAX + 1]; /* the last: "/other" */
        size_t nrows;
        bool other;
        uint64_t remote_backlog_bytes;
};

/* Staged: steps with a save of a rank still on its way to disk, and the
 * bytes of those saves, from the server's step list (the catalog knows
 * only what is on disk). */
static void staged_of(struct server *srv, const char *job, uint64_t *steps, uint64_t *bytes) {
        struct list *pos, *p2;

        *steps = *bytes = 0;
        list_for_each(pos, &srv->steps) {
                struct step_state *st = list_entry(pos, struct step_state, link);
                bool staging = false;
                if (strcmp(st->job, job) != 0)
                        continue;
                list_for_each(p2, &st->saves) {
                        struct save *s = list_entry(p2, struct save, step_link);
                        if (s->state == SAVE_DONE || s->state == SAVE_FAILED)
                                continue;
                        staging = true;
                        *bytes += s->bytes;
                }
                *steps += staging;
        }
}

static int jobs_gather_one(void *userdata, const struct catalog_job_tiers *t) {
        struct jobs_gather *g = userdata;

        if (g->uid >= 0 && t->uid != (uint32_t)g->uid)
                return 0;
        g->remote_backlog_bytes += t->remote_backlog_bytes;
        struct job_row *row;
        if (g->nrows < EXPOSITION_JOBS_MAX) {
                row = &g->rows[g->nrows++];
                snprintf(row->job, sizeof(row->job), "%s", t->job);
        } else {
                row = &g->rows[EXPOSITION_JOBS_MAX];
                snprintf(row->job, sizeof(row->job), "/other");
                g->other = true;
        }
        for (size_t i = 0; i < NTIERS; i++) {
                uint8_t tier = job_tiers[i];
                if (tier == CKPT_TIER_STAGED) {
                        uint64_t steps, bytes;
                        staged_of(g->srv, t->job, &steps, &bytes);
                        row->steps[i] += steps;
                        row->bytes[i] += bytes;
                } else {
                        row->steps[i] += t->steps[tier];
                        row->bytes[i] += t->bytes[tier];
                }
        }
        return 0;
}

static void render_jobs(struct text *t, const struct jobs_gather *g) {
        char job[2 * CKPT_NAME_MAX + 16], labels[sizeof(job) + 32];
        size_t n = g->nrows + (g->other ? 1 : 0);

        for (int pass = 0; pass < 2; pass++) {
                const char *name = pass ? "ckptd_step_bytes" : "ckptd_steps";
                metrics_family(t, name, "gauge",
                               pass ? "Bytes on this node of the steps in ckptd_steps (staged: "
                                      "of the ranks still being saved)"
                                    : "Steps this node holds that reached the tier (a committed "
                                      "step counts in local too; staged: a rank still on its "
                                      "way to disk)");
                for (size_t r = 0; r < n; r++) {
                        const struct job_row *row =
                                r < g->nrows ? &g->rows[r] : &g->rows[EXPOSITION_JOBS_MAX];
                        metrics_label(job, sizeof(job), "ckpt_job", row->job);
                        for (size_t i = 0; i < NTIERS; i++) {
                                snprintf(labels, sizeof(labels), "%s,tier=\"%s\"", job,
                                         ckpt_tier_name(job_tiers[i]));
                                metrics_sample(t, name, labels,
                                               pass ? row->bytes[i] : row->steps[i]);
                        }
                }
        }
}

static void gauge(struct text *t, const char *name, const char *help, uint64_t v) {
        metrics_family(t, name, "gauge", help);
        metrics_sample(t, name, NULL, v);
}

static void counter(struct text *t, const char *name, const char *help, uint64_t v) {
        metrics_family(t, name, "counter", help);
        metrics_sample(t, name, NULL, v);
}

static void render_node(struct text *t, struct server *srv, const struct ckpt_rep_status *st) {
        char labels[128];

        metrics_family(t, "ckptd_build_info", "gauge", "Always 1; the version of ckptd");
        metrics_sample(t, "ckptd_build_info",
                       metrics_label(labels, sizeof(labels), "version", CKPTD_VERSION), 1);
        metrics_family(t, "ckptd_uptime_seconds", "gauge", "Seconds since the daemon started");
        metrics_sample_double(t, "ckptd_uptime_seconds", NULL, (double)st->uptime_ms / 1000.0);
        gauge(t, "ckptd_clients", "Client connections open", st->clients);
        gauge(t, "ckptd_saves_active", "Saves of ranks not yet on local disk", st->saves_active);

        gauge(t, "ckptd_pool_slots", "Slots of the shared-memory pool", st->slot_count);
        gauge(t, "ckptd_pool_slots_used", "Slots of the pool in use", st->slots_used);
        gauge(t, "ckptd_pool_waiters", "Requests waiting for a pool slot", st->slot_waiters);
        gauge(t, "ckptd_pool_bytes", "Size of the shared-memory pool", st->pool_bytes);
        gauge(t, "ckptd_pool_used_bytes", "Bytes of the pool in use", st->pool_used_bytes);
        gauge(t, "ckptd_unwritten_bytes", "Bytes staged in the pool, not yet on local disk",
              st->bytes_in_flight);
        gauge(t, "ckptd_unwritten_shards", "Shards staged, not yet on local disk",
              st->shards_in_flight);

        counter(t, "ckptd_disk_written_bytes_total", "Bytes written to the local tier",
                st->bytes_written);
        counter(t, "ckptd_disk_read_bytes_total", "Bytes read from the local tier",
                st->bytes_read);
        counter(t, "ckptd_saves_total", "Saves of ranks finished by their trainer (staged)",
                metrics_counter(METRIC_SAVES_FINISHED));
        counter(t, "ckptd_saved_bytes_total", "Bytes of the saves in ckptd_saves_total",
                metrics_counter(METRIC_SAVED_BYTES));
        counter(t, "ckptd_saves_failed_total", "Saves of ranks that failed or were aborted",
                metrics_counter(METRIC_SAVES_FAILED));
        counter(t, "ckptd_steps_committed_total", "Steps committed on this node",
                metrics_counter(METRIC_STEPS_COMMITTED));
        counter(t, "ckptd_restore_reads_total", "READ requests served to restoring trainers",
                metrics_counter(METRIC_READS));
        counter(t, "ckptd_restored_bytes_total", "Bytes those READ requests delivered",
                metrics_counter(METRIC_RESTORED_BYTES));
        (void)srv;
}

static void render_errors(struct text *t, struct server *srv, const struct ckpt_rep_status *st) {
        static const char *const name = "ckptd_errors_total";

        metrics_family(t, name, "counter",
                       "Errors by kind: job (a save or read of a job failed), request (a client "
                       "request refused), connection (a client connection refused over a "
                       "limit), remote (object-store requests failed for good)");
        metrics_sample(t, name, "kind=\"job\"", metrics_counter(METRIC_ERRORS_JOB));
        metrics_sample(t, name, "kind=\"request\"", metrics_counter(METRIC_ERRORS_REQUEST));
        metrics_sample(t, name, "kind=\"connection\"", acceptor_refused_total(&srv->acceptor));
        metrics_sample(t, name, "kind=\"remote\"", st->remote_failures);
        counter(t, "ckptd_log_errors_total", "Records logged at error level", st->errors);
}

static void render_remote(struct text *t, const struct ckpt_rep_status *st,
                          uint64_t backlog_bytes) {
        gauge(t, "ckptd_remote_enabled", "1 when an object store is configured",
              st->remote_enabled);
        if (!st->remote_enabled)
                return;
        gauge(t, "ckptd_remote_backlog_bytes",
              "Bytes committed steps still have to upload to the object store", backlog_bytes);
        gauge(t, "ckptd_remote_steps_pending", "Committed steps whose COMMIT object is not "
              "yet in the store", st->remote_steps_pending);
        gauge(t, "ckptd_remote_steps_failed", "Steps whose flush stopped on a permanent error",
              st->remote_steps_failed);
        gauge(t, "ckptd_remote_uploads_active", "Shard objects being uploaded",
              st->remote_uploads_active);
        counter(t, "ckptd_remote_uploaded_bytes_total", "Bytes of shard objects uploaded "
                "(upload rate: rate() of it)", st->remote_bytes_uploaded);
        counter(t, "ckptd_remote_downloaded_bytes_total", "Bytes received from the store",
                st->remote_bytes_downloaded);
        counter(t, "ckptd_remote_requests_total", "Object-store requests made",
                st->remote_requests);
        counter(t, "ckptd_remote_retries_total", "Object-store requests retried",
                st->remote_retries);
        counter(t, "ckptd_audit_passes_total", "Audit passes over this node's objects finished",
                st->audit_passes);
        counter(t, "ckptd_audit_objects_checked_total", "Objects that passed every audit check",
                st->audit_objects_checked);
        counter(t, "ckptd_audit_objects_bad_total", "Objects the audit found bad",
                st->audit_objects_bad);
        counter(t, "ckptd_audit_objects_repaired_total",
                "Bad objects the audit queued for a new upload", st->audit_objects_repaired);
}

static void render_replication(struct text *t, struct server *srv,
                               const struct ckpt_rep_status *st) {
        gauge(t, "ckptd_replication_enabled", "1 when replication targets are configured",
              st->replication_enabled);
        if (!srv->peers)
                return;
        uint32_t n = peers_target_count(srv->peers);
        char labels[32];

        for (int pass = 0; pass < 2; pass++) {
                const char *name = pass ? "ckptd_replication_steps_owed" : "ckptd_replication_target_up";
                metrics_family(t, name, "gauge",
                               pass ? "Committed steps not yet acknowledged by the target node "
                                      "(refused ones included)"
                                    : "1 while the link to the replication target node is up");
                for (uint32_t i = 0; i < n; i++) {
                        uint32_t node, owed;
                        bool up;
                        peers_target(srv->peers, i, &node, &up, &owed);
                        snprintf(labels, sizeof(labels), "node=\"%u\"", node);
                        metrics_sample(t, name, labels, pass ? owed : up);
                }
        }
}

static void render_scrub(struct text *t, const struct ckpt_rep_status *st) {
        static const char *const states[CKPT_SCRUB_MAX_] = {
                [CKPT_SCRUB_OFF] = "off", [CKPT_SCRUB_WAITING] = "waiting",
                [CKPT_SCRUB_RUNNING] = "running", [CKPT_SCRUB_PAUSED] = "paused",
        };
        char labels[32];

        metrics_family(t, "ckptd_scrub_state", "gauge", "1 for the background scrub's state");
        for (int i = 0; i < CKPT_SCRUB_MAX_; i++) {
                snprintf(labels, sizeof(labels), "state=\"%s\"", states[i]);
                metrics_sample(t, "ckptd_scrub_state", labels, st->scrub_state == i);
        }
        gauge(t, "ckptd_scrub_pass", "The scrub pass under way or last finished (0: none)",
              st->scrub_pass);
        gauge(t, "ckptd_scrub_pass_verified_bytes", "Bytes verified in this pass",
              st->scrub_bytes_verified);
        gauge(t, "ckptd_scrub_pass_bytes", "Bytes this pass has to verify",
              st->scrub_bytes_total);
        gauge(t, "ckptd_scrub_pass_copies_verified", "Copies of ranks verified in this pass",
              st->scrub_copies_verified);
        counter(t, "ckptd_scrub_findings_total", "Bad copies the scrub found since start",
                st->scrub_findings);
        metrics_family(t, "ckptd_copy_faults", "gauge",
                       "Copies of ranks on this node found corrupt, by what became of them");
        metrics_sample(t, "ckptd_copy_faults", "state=\"bad\"", st->copies_bad);
        metrics_sample(t, "ckptd_copy_faults", "state=\"repaired\"", st->copies_repaired);
        metrics_sample(t, "ckptd_copy_faults", "state=\"unrepairable\"", st->copies_unrepairable);
}

static void render_catalog(struct text *t, struct server *srv) {
        struct catalog_rows rows;
        const char *name = "ckptd_catalog_rows";

        /* (void): a catalog error is logged there; the rows read 0 */
        (void)catalog_row_counts(srv->catalog, &rows);
        metrics_family(t, name, "gauge", "Rows of the catalog's tables");
        metrics_sample(t, name, "table=\"jobs\"", rows.jobs);
        metrics_sample(t, name, "table=\"checkpoints\"", rows.checkpoints);
        metrics_sample(t, name, "table=\"ranks\"", rows.ranks);
        metrics_sample(t, name, "table=\"shards\"", rows.shards);
        metrics_sample(t, name, "table=\"remote_objects\"", rows.remote_objects);
        metrics_sample(t, name, "table=\"replication\"", rows.replication);
}

static void render_histograms(struct text *t) {
        metrics_render_histogram(t, METRIC_SAVE_STAGING_SECONDS, "ckptd_save_staging_seconds",
                                 "Time from SAVE_BEGIN to SAVE_FINISH of one rank");
        metrics_render_histogram(t, METRIC_COMMIT_SECONDS, "ckptd_commit_seconds",
                                 "Time from a step's commit starting (every rank on disk) to "
                                 "its commit record written");
        metrics_render_histogram(t, METRIC_READ_SECONDS, "ckptd_restore_read_seconds",
                                 "Time from a READ request to its data in the slot (restore "
                                 "throughput: ckptd_restored_bytes_total over it)");
}

static void render_http(struct text *t) {
        const char *name = "ckptd_metrics_http_requests_total";

        metrics_family(t, name, "counter", "HTTP requests answered by the metrics endpoint");
        metrics_sample(t, name, "code=\"200\"", metrics_counter(METRIC_HTTP_REQUESTS_OK));
        metrics_sample(t, name, "code=\"error\"", metrics_counter(METRIC_HTTP_REQUESTS_BAD));
        counter(t, "ckptd_metrics_http_timeouts_total",
                "HTTP connections closed at their deadline", metrics_counter(METRIC_HTTP_TIMEOUTS));
        counter(t, "ckptd_metrics_http_refused_total",
                "HTTP connections refused over the connection limit",
                metrics_counter(METRIC_HTTP_REFUSED));
}

int exposition_render(struct server *srv, int64_t uid, char **out, size_t *len) {
        struct ckpt_rep_status *st = calloc(1, sizeof(*st));
        struct jobs_gather *g = calloc(1, sizeof(*g));
        struct text t;
        int r = -ENOMEM;

        if (!st || !g || text_init(&t, 16384) < 0)
                goto out;
        server_status_gather(srv, uid, st);
        g->srv = srv;
        g->uid = uid;
        /* (void): a catalog error is logged there; the jobs read as none */
        (void)catalog_job_tiers_foreach(srv->catalog, jobs_gather_one, g);

        render_node(&t, srv, st);
        render_jobs(&t, g);
        gauge(&t, "ckptd_jobs", "Jobs in the catalog (visible to the asker)", st->jobs);
        render_remote(&t, st, g->remote_backlog_bytes);
        render_replication(&t, srv, st);
        render_errors(&t, srv, st);
        render_scrub(&t, st);
        render_catalog(&t, srv);
        render_histograms(&t);
        render_http(&t);
        if (t.failed) {
                free(t.buf);
                goto out;
        }
        *out = t.buf;
        *len = t.len;
        r = 0;
out:
        free(st);
        free(g);
        return r;
}
