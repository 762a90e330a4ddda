/* SPDX-License-Identifier: MIT */
/*
 * flush — committed steps from the local tier to the object store.  See
 * flush.h for the protocol.  This file owns the queue of steps (struct
 * flusher, struct fstep), each step's way through
 *
 *   OBJECTS -> MANIFEST -> COMMIT -> DONE | FAILED
 *
 * and its remote_state in the catalog (written here only).  The phases'
 * requests belong to the modules below, which report back through the ops
 * given to them: OBJECTS is remote/upload (this node's shards, PutObject or
 * multipart), MANIFEST this node's manifest PUT (here), COMMIT
 * remote/cluster_commit (coordinator: list, read, PUT If-None-Match;
 * others: HEAD); after a COMMIT the coordinator runs the store's retention,
 * remote/bucket_retention.
 *
 * One step uploads objects at a time (the queue's head), so an older step
 * reaches the store first; steps waiting for other nodes' manifests only
 * poll and do not hold the queue.  The flusher keeps at most
 * 2 * concurrency requests outstanding at the S3 client: the client has
 * `concurrency` on the wire, and the rest are being hashed (Content-MD5 on
 * the worker pool), so the wire never waits for a hash.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "remote/bucket_retention.h"
#include "remote/cluster_commit.h"
#include "remote/flush.h"
#include "remote/objects.h"
#include "remote/upload.h"
#include "util/cleanup.h"
#include "util/list.h"
#include "util/log.h"
#include "util/msgid.h"

#define FLUSH_STALL_MIN_MS 1000
#define FLUSH_STALL_MAX_MS 60000

enum step_phase { STEP_OBJECTS, STEP_MANIFEST, STEP_COMMIT, STEP_DONE, STEP_FAILED };

struct fstep {
        struct list link;
        struct flusher *f;
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t world_size;
        enum step_phase phase;
        struct upload_batch uploads; /* STEP_OBJECTS: this node's shards */
        bool stalled;             /* waiting out a retryable failure */
        uint64_t stall_ms;
        struct loop_timer timer;  /* a stall's pause, then the reap */
        struct s3_request req;    /* the node manifest PUT */
        bool req_busy;
        char *text;               /* our node manifest */
        size_t text_len;
        int text_fd;              /* memfd body for a manifest over 1 MiB */
        struct cluster_commit *commit; /* STEP_COMMIT, and after */
};

struct flusher {
        struct loop *loop;
        struct s3_client *s3;
        struct catalog *catalog;
        struct store *store;
        char prefix[OBJECT_KEY_MAX + 1];
        char bucket[64];
        struct flush_options opts;
        void (*on_changed)(void *userdata, const char *job, uint64_t step);
        void *userdata;
        struct list steps;        /* struct fstep, FIFO */
        struct bucket_retention *retention; /* the coordinator runs it after each COMMIT */
        struct upload_counters uploads; /* of every step's objects */
        uint32_t steps_failed;
        char last_error[CKPT_ERRMSG_MAX + 1];
        char last_error_job[CKPT_NAME_MAX + 1]; /* whose it is: STATUS shows it to them */
        bool freeing;
};

static void step_pump(struct fstep *st);
static void flusher_pump(struct flusher *f);
static void step_commit_start(struct fstep *st);

/* ---- helpers ----------------------------------------------------------------------------- */

/* "403 SignatureDoesNotMatch: The request signature we calculated..." */
static void set_last_error(struct flusher *f, const char *job, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void set_last_error(struct flusher *f, const char *job, const char *fmt, ...) {
        va_list ap;
        snprintf(f->last_error_job, sizeof(f->last_error_job), "%s", job);
        va_start(ap, fmt);
        vsnprintf(f->last_error, sizeof(f->last_error), fmt, ap);
        va_end(ap);
}

static void step_free(struct fstep *st) {
        loop_timer_cancel(&st->timer);
        list_unlink(&st->link);
        upload_batch_clear(&st->uploads);
        free(st->text);
        if (st->text_fd >= 0)
                close(st->text_fd);
        cluster_commit_free(st->commit);
        free(st);
}

/* A request of the step is at the S3 client. */
static bool step_busy(const struct fstep *st) {
        return st->uploads.inflight > 0 || st->req_busy ||
               (st->commit && cluster_commit_busy(st->commit));
}

static void step_reap(struct loop_timer *t) {
        struct fstep *st = container_of(t, struct fstep, timer);
        if ((st->phase == STEP_DONE || st->phase == STEP_FAILED) && !step_busy(st))
                step_free(st);
}

/* Drop a finished or failed step once nothing of it is at the S3 client —
 * from a timer, never right away: the caller is often a done() callback
 * that still touches the step after this returns. */
static void step_maybe_free(struct fstep *st) {
        if (st->f->freeing)
                return; /* flush_free() frees every step itself */
        if ((st->phase == STEP_DONE || st->phase == STEP_FAILED) && !step_busy(st))
                loop_timer_start(st->f->loop, &st->timer, 0, step_reap);
}

/* Cancel every request of the step: each done() runs before this returns
 * and, seeing STEP_FAILED, only drops its accounting. */
static void step_cancel_all(struct fstep *st) {
        struct flusher *f = st->f;

        upload_batch_cancel(&st->uploads);
        if (st->req_busy)
                s3_request_cancel(f->s3, &st->req);
        if (st->commit)
                cluster_commit_stop(st->commit);
}

static void step_fail(struct fstep *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void step_fail(struct fstep *st, const char *fmt, ...) {
        struct flusher *f = st->f;
        char msg[CKPT_ERRMSG_MAX + 1];
        va_list ap;

        if (st->phase == STEP_FAILED || st->phase == STEP_DONE)
                return;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        st->phase = STEP_FAILED;
        f->steps_failed++;
        upload_batch_stop(&st->uploads);
        set_last_error(f, st->job, "job %s step %" PRIu64 ": %s", st->job, st->step, msg);
        log_error("flush: job %s step %" PRIu64 " stopped: %s (fix the cause, then SIGHUP "
                  "or restart ckptd to retry)", st->job, st->step, msg);
        /* (void): remote_state only records the flusher's progress; an update a fault lost
         * (catalog.c logs it) makes a later flush redo work, it loses no data */
        (void)catalog_ckpt_remote_set(f->catalog, st->job, st->step, CATALOG_REMOTE_FAILED, msg);
        loop_timer_cancel(&st->timer);
        /* Stop what is still in flight; their done() see STEP_FAILED. */
        step_cancel_all(st);
        if (f->on_changed)
                f->on_changed(f->userdata, st->job, st->step);
        step_maybe_free(st);
        flusher_pump(f);
}

/* A retryable failure the S3 client gave up on: pause this step, then go
 * on (the store may be restarting, the network may be cut). */
static void manifest_put(struct fstep *st);

static void step_stall_timeout(struct loop_timer *t) {
        struct fstep *st = container_of(t, struct fstep, timer);
        st->stalled = false;
        if (st->phase == STEP_MANIFEST && !st->req_busy)
                manifest_put(st);
        else
                step_pump(st);
}

static void step_stall(struct fstep *st, const char *what, const struct s3_result *res,
                       int error) {
        struct flusher *f = st->f;
        char why[400];

        s3_result_describe(res, error, why, sizeof(why));
        set_last_error(f, st->job, "job %s step %" PRIu64 ": %s: %s (will retry)", st->job,
                       st->step, what, why);
        st->stall_ms = st->stall_ms ? MIN(st->stall_ms * 2, FLUSH_STALL_MAX_MS)
                                    : FLUSH_STALL_MIN_MS;
        log_warn("flush: job %s step %" PRIu64 ": %s failed after %u attempts: %s; "
                    "retrying in %" PRIu64 " ms", st->job, st->step, what, res->attempts, why,
                    st->stall_ms);
        if (!st->stalled) {
                st->stalled = true;
                loop_timer_start(f->loop, &st->timer, st->stall_ms, step_stall_timeout);
        }
}

/* Permanent failure of a request: the step stops.  -ECANCELED (shutdown,
 * or the step already failed) is silent. */
static void step_request_failed(struct fstep *st, const char *what, const char *key,
                                const struct s3_result *res, int error) {
        char why[400];

        if (error == -ECANCELED)
                return;
        if (!res->permanent) {
                step_stall(st, what, res, error);
                return;
        }
        s3_result_describe(res, error, why, sizeof(why));
        step_fail(st, "%s %s (bucket %s): %s", what, key, st->f->bucket, why);
}

/* Bookkeeping the step's own request's done() starts with (the node
 * manifest PUT).  false: the step failed meanwhile. */
static bool step_req_ended(struct fstep *st) {
        st->req_busy = false;
        if (st->phase != STEP_FAILED)
                return true;
        step_maybe_free(st);
        return false;
}

/* ---- objects (remote/upload) ------------------------------------------------------------- */

/* ops->failed of both remote/upload and remote/cluster_commit. */
static void step_failed(void *userdata, const char *msg) {
        step_fail(userdata, "%s", msg);
}

static void step_upload_request_failed(void *userdata, const char *what, const char *key,
                                       const struct s3_result *res, int error) {
        step_request_failed(userdata, what, key, res, error);
}

static void step_upload_stall(void *userdata, const char *what, const struct s3_result *res,
                              int error) {
        step_stall(userdata, what, res, error);
}

static void step_upload_pump(void *userdata) {
        step_pump(userdata);
}

/* A request of a failed step ended: it may go now, and the next step may
 * have the budget. */
static void step_upload_idle(void *userdata) {
        struct fstep *st = userdata;
        struct flusher *f = st->f;

        step_maybe_free(st);
        flusher_pump(f);
}

static const struct upload_ops step_upload_ops = {
        .failed = step_failed,
        .request_failed = step_upload_request_failed,
        .stall = step_upload_stall,
        .pump = step_upload_pump,
        .idle = step_upload_idle,
};

/* ---- the step ----------------------------------------------------------------------------- */

static void manifest_put_done(struct s3_request *req, int error);

static void node_manifest_freep(struct node_manifest **nm) {
        node_manifest_free(*nm);
}

static int step_load(struct fstep *st) {
        struct flusher *f = st->f;
        uint32_t ranks[256];
        size_t nranks = 0;
        int r;

        r = catalog_ranks(f->catalog, st->job, st->step, ranks, 256, &nranks);
        if (r < 0)
                return r;
        _cleanup_(node_manifest_freep) struct node_manifest *nm = NULL;

        r = node_manifest_new(&nm, st->job, st->step, f->opts.node_index, f->opts.node_count,
                              st->world_size);
        if (r < 0)
                return r;
        size_t nobjs = 0;
        for (size_t i = 0; i < nranks; i++) {
                struct manifest *m = NULL;
                r = store_rank_manifest(f->store, st->job, st->step, ranks[i], &m);
                if (r < 0) {
                        log_error("flush: job %s step %" PRIu64 " rank %u: cannot read its "
                                  "manifest: %s", st->job, st->step, ranks[i], strerror(-r));
                        return r;
                }
                r = node_manifest_add_rank(nm, m);
                if (r < 0) {
                        manifest_free(m);
                        return r;
                }
                nobjs += m->nshards;
        }
        r = upload_batch_reserve(&st->uploads, nobjs);
        if (r < 0)
                return r;
        for (uint32_t i = 0; i < nm->nranks; i++) {
                r = upload_batch_add_rank(&st->uploads, nm->ranks[i], f->prefix,
                                          f->opts.part_size);
                if (r < 0)
                        return r;
        }
        r = node_manifest_format(nm, &st->text, &st->text_len);
        if (r < 0)
                return r;
        return 0;
}

static void manifest_put(struct fstep *st) {
        struct flusher *f = st->f;
        char key[OBJECT_KEY_MAX + 1];
        struct s3_body body;
        int r;

        r = object_key_node_manifest(key, sizeof(key), f->prefix, st->job, st->step,
                                     f->opts.node_index);
        if (r < 0) {
                step_fail(st, "node manifest key: %s", strerror(-r));
                return;
        }
        if (st->text_len <= S3_MEMORY_BODY_MAX) {
                body = s3_body_mem(st->text, st->text_len);
        } else {
                if (st->text_fd < 0) {
                        st->text_fd = memfd_create("ckptd-manifest", MFD_CLOEXEC);
                        if (st->text_fd < 0 ||
                            write(st->text_fd, st->text, st->text_len) != (ssize_t)st->text_len) {
                                step_fail(st, "cannot stage the node manifest: %m");
                                return;
                        }
                }
                body = s3_body_fd(st->text_fd, 0, st->text_len);
        }
        st->req = (struct s3_request){ .done = manifest_put_done };
        r = s3_put_object(f->s3, &st->req, key, &body, 0);
        if (r < 0) {
                step_fail(st, "cannot start PutObject %s: %s", key, strerror(-r));
                return;
        }
        st->req_busy = true;
}

static void manifest_put_done(struct s3_request *req, int error) {
        struct fstep *st = container_of(req, struct fstep, req);
        struct flusher *f = st->f;

        if (!step_req_ended(st))
                return;
        if (error < 0) {
                if (error == -ECANCELED)
                        return;
                if (!req->result.permanent) {
                        step_stall(st, "PutObject (node manifest)", &req->result, error);
                        return;
                }
                char why[400];
                s3_result_describe(&req->result, error, why, sizeof(why));
                step_fail(st, "PutObject of the node manifest: %s", why);
                return;
        }
        log_info("flush: job %s step %" PRIu64 ": node %u manifest stored (%zu objects)",
                 st->job, st->step, f->opts.node_index, st->uploads.nobjs);
        /* (void): remote_state only records the flusher's progress; an update a fault lost
         * (catalog.c logs it) makes a later flush redo work, it loses no data */
        (void)catalog_ckpt_remote_set(f->catalog, st->job, st->step, CATALOG_REMOTE_MANIFEST, NULL);
        free(st->text);
        st->text = NULL;
        step_commit_start(st);
        /* The object queue may move to the next step now. */
        flusher_pump(f);
}

static void step_done(struct fstep *st) {
        struct flusher *f = st->f;
        char job[CKPT_NAME_MAX + 1];

        st->phase = STEP_DONE;
        /* (void): remote_state only records the flusher's progress; an update a fault lost
         * (catalog.c logs it) makes a later flush redo work, it loses no data */
        (void)catalog_ckpt_remote_set(f->catalog, st->job, st->step, CATALOG_REMOTE_DONE, NULL);
        log_event(LOG_INFO, LOG_CTX(.id = LOG_ID_UPLOAD_DONE, .job = st->job, LOG_STEP(st->step)),
                  "flush: job %s step %" PRIu64 " is in the object store (COMMIT present)",
                  st->job, st->step);
        snprintf(job, sizeof(job), "%s", st->job);
        uint64_t step = st->step;
        step_maybe_free(st);
        if (f->on_changed)
                f->on_changed(f->userdata, job, step);
        if (f->opts.node_index == 0)
                bucket_retention_run(f->retention, job);
}

/* ---- COMMIT (remote/cluster_commit) ------------------------------------------------------- */

static void step_commit_done(void *userdata) {
        step_done(userdata);
}

static void step_commit_idle(void *userdata) {
        step_maybe_free(userdata);
}

static const struct cluster_commit_ops step_commit_ops = {
        .done = step_commit_done,
        .failed = step_failed,
        .idle = step_commit_idle,
};

/* This node's manifest is in the store (or was before a restart). */
static void step_commit_start(struct fstep *st) {
        struct flusher *f = st->f;

        st->phase = STEP_COMMIT;
        if (!st->commit) {
                const struct cluster_commit_options co = {
                        .prefix = f->prefix,
                        .job = st->job,
                        .step = st->step,
                        .node_index = f->opts.node_index,
                        .node_count = f->opts.node_count,
                };
                int r = cluster_commit_new(&st->commit, f->loop, f->s3, &co, &step_commit_ops, st);
                if (r < 0) {
                        step_fail(st, "out of memory");
                        return;
                }
        }
        cluster_commit_start(st->commit);
}

/* ---- the pump ------------------------------------------------------------------------------ */

/* Start what the head step can start within the request budget. */
static void step_pump(struct fstep *st) {
        struct flusher *f = st->f;

        if (f->freeing)
                return;
        if (st->phase != STEP_OBJECTS) {
                step_maybe_free(st);
                if (st->phase == STEP_FAILED || st->phase == STEP_DONE)
                        flusher_pump(f);
                return;
        }
        if (st->stalled)
                return;
        upload_batch_pump(&st->uploads);
        if (st->phase != STEP_OBJECTS)
                return;
        if (upload_batch_done(&st->uploads)) {
                st->phase = STEP_MANIFEST;
                st->stall_ms = 0;
                manifest_put(st);
        }
}

/* The head of the queue that still uploads objects gets the budget. */
static void flusher_pump(struct flusher *f) {
        struct list *pos, *tmp;

        if (f->freeing)
                return;
        list_for_each_safe(pos, tmp, &f->steps) {
                struct fstep *st = list_entry(pos, struct fstep, link);
                if (st->phase == STEP_OBJECTS) {
                        step_pump(st);
                        return;
                }
        }
}

/* ---- queueing ------------------------------------------------------------------------------ */

static struct fstep *step_find(struct flusher *f, const char *job, uint64_t step) {
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &f->steps) {
                struct fstep *st = list_entry(pos, struct fstep, link);
                if (st->step == step && !strcmp(st->job, job))
                        return st;
        }
        return NULL;
}

static int step_queue(struct flusher *f, const char *job, uint64_t step, uint8_t remote_state) {
        struct ckpt_ckpt_entry e;
        int r;

        if (step_find(f, job, step))
                return 0;
        r = catalog_ckpt_get(f->catalog, job, step, &e);
        if (r < 0)
                return r;
        if (e.state != CKPT_STATE_COMMITTED)
                return -EINVAL;
        struct fstep *st = calloc(1, sizeof(*st));
        if (!st)
                return -ENOMEM;
        st->f = f;
        st->text_fd = -1;
        snprintf(st->job, sizeof(st->job), "%s", job);
        st->step = step;
        upload_batch_init(&st->uploads, f->s3, f->catalog, f->store, st->job, step, &f->uploads,
                          &step_upload_ops, st);
        st->world_size = e.world_size;
        list_init(&st->link);
        list_add_tail(&f->steps, &st->link);

        if (remote_state == CATALOG_REMOTE_MANIFEST) {
                /* our part is in the store; only COMMIT is missing */
                step_commit_start(st);
                return 0;
        }
        r = step_load(st);
        if (r < 0) {
                step_fail(st, "cannot list the step's shards on local disk: %s", strerror(-r));
                return r;
        }
        /* (void): remote_state only records the flusher's progress; an update a fault lost
         * (catalog.c logs it) makes a later flush redo work, it loses no data */
        (void)catalog_ckpt_remote_set(f->catalog, job, step, CATALOG_REMOTE_FLUSHING, NULL);
        log_info("flush: job %s step %" PRIu64 ": %zu objects to upload (%zu already in the store)",
                 job, step, st->uploads.nobjs - st->uploads.objs_done, st->uploads.objs_done);
        flusher_pump(f);
        return 0;
}

int flush_step(struct flusher *f, const char *job, uint64_t step) {
        return step_queue(f, job, step, CATALOG_REMOTE_NONE);
}

int flush_step_again(struct flusher *f, const char *job, uint64_t step) {
        if (flush_busy(f, job, step))
                return -EBUSY;
        struct fstep *done = step_find(f, job, step);
        if (done && step_busy(done))
                return -EBUSY; /* finished, a request of it still at the client */
        if (done)
                step_free(done); /* finished, its reap timer not run yet */
        /* (void): remote_state only records the flusher's progress; step_queue
         * below sets it again */
        (void)catalog_ckpt_remote_set(f->catalog, job, step, CATALOG_REMOTE_NONE, NULL);
        return step_queue(f, job, step, CATALOG_REMOTE_NONE);
}

static int resume_cb(void *userdata, const char *job, uint64_t step, uint8_t remote_state) {
        struct flusher *f = userdata;
        int r = step_queue(f, job, step, remote_state);
        if (r < 0)
                log_warn("flush: cannot resume job %s step %" PRIu64 ": %s", job, step,
                            strerror(-r));
        return 0;
}

void flush_step_in_store(struct flusher *f, const char *job, uint64_t step) {
        uint8_t rs = CATALOG_REMOTE_NONE;

        if (flush_busy(f, job, step) ||
            catalog_ckpt_remote_get(f->catalog, job, step, &rs, NULL, 0) < 0 ||
            rs == CATALOG_REMOTE_DONE)
                return;
        /* a flush from here would rewrite this node's manifest of an old
         * step.  (void): catalog.c logs a fault; the step then looks
         * unflushed and may be flushed again, which costs uploads, not data */
        (void)catalog_ckpt_remote_set(f->catalog, job, step, CATALOG_REMOTE_DONE, NULL);
}

int flush_resume(struct flusher *f) {
        return catalog_remote_pending_foreach(f->catalog, resume_cb, f);
}

static int retry_cb(void *userdata, const char *job, uint64_t step, uint8_t state) {
        struct flusher *f = userdata;
        uint8_t rs;

        if (state != CKPT_STATE_COMMITTED)
                return 0;
        if (catalog_ckpt_remote_get(f->catalog, job, step, &rs, NULL, 0) == 0 &&
            rs == CATALOG_REMOTE_FAILED && !step_find(f, job, step)) {
                log_info("flush: retrying job %s step %" PRIu64, job, step);
                /* (void): remote_state only records the flusher's progress; an update a fault
                 * lost (catalog.c logs it) makes a later flush redo work, it loses no data */
                (void)catalog_ckpt_remote_set(f->catalog, job, step, CATALOG_REMOTE_NONE, NULL);
                step_queue(f, job, step, CATALOG_REMOTE_NONE);
        }
        return 0;
}

int flush_retry_failed(struct flusher *f) {
        f->last_error[0] = 0;
        f->last_error_job[0] = 0;
        f->steps_failed = 0;
        return catalog_ckpt_foreach(f->catalog, NULL, retry_cb, f);
}

bool flush_busy(struct flusher *f, const char *job, uint64_t step) {
        struct fstep *st = f ? step_find(f, job, step) : NULL;
        return st && st->phase != STEP_DONE && st->phase != STEP_FAILED;
}

void flush_status(struct flusher *f, struct ckpt_rep_status *out) {
        struct s3_stats s;
        struct list *pos, *tmp;
        uint32_t pending = 0;

        s3_client_stats(f->s3, &s);
        list_for_each_safe(pos, tmp, &f->steps) {
                struct fstep *st = list_entry(pos, struct fstep, link);
                pending += st->phase != STEP_DONE && st->phase != STEP_FAILED;
        }
        out->remote_steps_pending = pending;
        out->remote_steps_failed = f->steps_failed;
        out->remote_uploads_active = f->uploads.uploads_active;
        out->remote_requests_active = s.active;
        out->remote_bytes_uploaded = f->uploads.bytes_uploaded;
        out->remote_bytes_downloaded = s.bytes_received;
        for (int i = 0; i < S3_OP_COUNT; i++) {
                out->remote_requests += s.requests[i];
                out->remote_retries += s.retries[i];
                out->remote_failures += s.failed[i];
        }
        snprintf(out->remote_error, sizeof(out->remote_error), "%s", f->last_error);
}

const char *flush_last_error(struct flusher *f) {
        return f->last_error;
}

const char *flush_last_error_job(struct flusher *f) {
        return f->last_error_job;
}

bool flush_runs_retention(const struct flusher *f) {
        return f->opts.node_index == 0;
}

struct retention_policy flush_retention_policy(const struct flusher *f) {
        return bucket_retention_policy(&f->opts.retention);
}

void flush_retention_run(struct flusher *f, const char *job) {
        if (flush_runs_retention(f))
                bucket_retention_run(f->retention, job);
}

int flush_delete_step(struct flusher *f, const char *job, uint64_t step,
                      bucket_retention_deleted_fn deleted, void *userdata) {
        if (!flush_runs_retention(f))
                return -EOPNOTSUPP;
        return bucket_retention_delete(f->retention, job, step, deleted, userdata);
}

void flush_set_retention(struct flusher *f, const struct retention_policy *p) {
        f->opts.retention = *p;
        bucket_retention_set_policy(f->retention, p);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

int flush_new(struct flusher **out, struct loop *loop, struct s3_client *s3,
              struct catalog *catalog, struct store *store, const struct flush_options *opts,
              void (*on_changed)(void *userdata, const char *job, uint64_t step),
              void *userdata) {
        if (opts->node_count < 1 || opts->node_index >= opts->node_count ||
            opts->part_size < (5u << 20) || opts->concurrency < 1 || opts->retention.keep < 1)
                return -EINVAL;
        struct flusher *f = calloc(1, sizeof(*f));
        if (!f)
                return -ENOMEM;
        f->loop = loop;
        f->s3 = s3;
        f->catalog = catalog;
        f->store = store;
        f->opts = *opts;
        snprintf(f->prefix, sizeof(f->prefix), "%s", opts->prefix ? opts->prefix : "");
        snprintf(f->bucket, sizeof(f->bucket), "%s", opts->bucket ? opts->bucket : "");
        f->opts.prefix = f->prefix;
        f->uploads.budget = 2 * opts->concurrency;
        f->on_changed = on_changed;
        f->userdata = userdata;
        list_init(&f->steps);
        int r = bucket_retention_new(&f->retention, s3, catalog, f->prefix, &opts->retention);
        if (r < 0) {
                free(f);
                return r;
        }
        *out = f;
        return 0;
}

struct flusher *flush_free(struct flusher *f) {
        struct list *pos, *tmp;

        if (!f)
                return NULL;
        /* Cancel everything; every done() runs now, sees f->freeing and
         * only drops its accounting (no step frees itself meanwhile).  The
         * catalog keeps each step's progress for the next start. */
        f->freeing = true;
        f->retention = bucket_retention_free(f->retention);
        list_for_each_safe(pos, tmp, &f->steps) {
                struct fstep *st = list_entry(pos, struct fstep, link);
                st->phase = STEP_FAILED;
                upload_batch_stop(&st->uploads);
                step_cancel_all(st);
        }
        list_for_each_safe(pos, tmp, &f->steps) {
                struct fstep *st = list_entry(pos, struct fstep, link);
                step_free(st);
        }
        free(f);
        return NULL;
}
