/* SPDX-License-Identifier: MIT */
/*
 * flush — committed steps from the local tier to the object store.  See
 * flush.h for the protocol.  This file owns the queue of steps (struct
 * flusher, struct fstep) and the upload of this node's part of each:
 *
 *   object  TODO -> (CreateMultipartUpload | ListParts) -> PARTS -> COMPLETING -> DONE
 *           TODO -> PutObject -> DONE                          (size <= part_size)
 *   step    OBJECTS -> MANIFEST -> COMMIT -> DONE | FAILED
 *
 * The step's COMMIT phase is remote/cluster_commit (coordinator: list,
 * read, PUT If-None-Match; others: HEAD); after a COMMIT the coordinator
 * runs the store's retention, remote/bucket_retention.  Both report back
 * through callbacks and write no catalog state; the step's remote_state is
 * written here only.
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
#include "util/cleanup.h"
#include "util/list.h"
#include "util/log.h"

/* The catalog keeps its own types; this is where the object store's records
 * cross into it, so the bounds must agree here. */
_Static_assert(CATALOG_KEY_MAX == S3_KEY_MAX, "object key bound");
_Static_assert(CATALOG_UPLOAD_ID_MAX == S3_UPLOAD_ID_MAX, "upload id bound");
_Static_assert(CATALOG_ETAG_MAX == S3_ETAG_MAX, "etag bound");
_Static_assert(CATALOG_PART_NUMBER_MAX == S3_PART_NUMBER_MAX, "part number bound");

#define FLUSH_STALL_MIN_MS 1000
#define FLUSH_STALL_MAX_MS 60000

enum obj_phase {
        OBJ_TODO,
        OBJ_STARTING,   /* CreateMultipartUpload or ListParts in flight */
        OBJ_PARTS,
        OBJ_COMPLETING, /* CompleteMultipartUpload (or a HEAD after it) */
        OBJ_PUTTING,    /* the single PutObject */
        OBJ_DONE,
};

enum part_state { PART_TODO, PART_INFLIGHT, PART_DONE };

struct fstep;

struct fobj {
        struct fstep *st;
        uint32_t rank;
        char shard[CKPT_NAME_MAX + 1];
        uint64_t size;
        char key[OBJECT_KEY_MAX + 1];
        enum obj_phase phase;
        int fd;
        bool multipart;
        char upload_id[S3_UPLOAD_ID_MAX + 1];
        uint64_t part_size;
        uint32_t nparts, parts_done, parts_inflight, next_part;
        uint8_t *part_state;      /* nparts entries */
        struct s3_part *parts;    /* index number - 1; etag valid when done */
        struct s3_request req;    /* PUT / create / list / complete / head */
        bool req_busy;
        struct s3_part_list list;
        unsigned list_marker;
};

struct fpart {
        struct list link;         /* on fstep.parts while in flight */
        struct s3_request req;
        struct fobj *o;
        uint32_t number;
};

enum step_phase { STEP_OBJECTS, STEP_MANIFEST, STEP_COMMIT, STEP_DONE, STEP_FAILED };

struct fstep {
        struct list link;
        struct flusher *f;
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t world_size;
        enum step_phase phase;
        struct fobj *objs;
        size_t nobjs, next_obj, objs_done;
        uint32_t inflight;        /* requests of this step at the S3 client */
        struct list parts;        /* struct fpart in flight */
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
        uint32_t inflight;        /* object requests outstanding */
        uint32_t budget;
        uint32_t uploads_active;
        uint64_t bytes_uploaded;
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

static void obj_close(struct fobj *o) {
        if (o->fd >= 0) {
                close(o->fd);
                o->fd = -1;
        }
}

static void obj_clear(struct fobj *o) {
        obj_close(o);
        free(o->part_state);
        free(o->parts);
        free(o->list.parts);
        o->part_state = NULL;
        o->parts = NULL;
        o->list.parts = NULL;
}

static void step_free(struct fstep *st) {
        loop_timer_cancel(&st->timer);
        list_unlink(&st->link);
        for (size_t i = 0; i < st->nobjs; i++)
                obj_clear(&st->objs[i]);
        free(st->objs);
        free(st->text);
        if (st->text_fd >= 0)
                close(st->text_fd);
        cluster_commit_free(st->commit);
        free(st);
}

/* A request of the step is at the S3 client. */
static bool step_busy(const struct fstep *st) {
        return st->inflight > 0 || st->req_busy || (st->commit && cluster_commit_busy(st->commit));
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
        struct list *pos, *tmp;

        for (size_t i = 0; i < st->nobjs; i++)
                if (st->objs[i].req_busy)
                        s3_request_cancel(f->s3, &st->objs[i].req);
        list_for_each_safe(pos, tmp, &st->parts) {
                struct fpart *p = list_entry(pos, struct fpart, link);
                s3_request_cancel(f->s3, &p->req);
        }
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
        for (size_t i = 0; i < st->nobjs; i++) {
                struct fobj *o = &st->objs[i];
                if (o->phase != OBJ_TODO && o->phase != OBJ_DONE) {
                        f->uploads_active--;
                        o->phase = OBJ_TODO;
                }
        }
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

/* The object's own request went to the S3 client. */
static void obj_req_started(struct fobj *o) {
        o->req_busy = true;
        o->st->inflight++;
        o->st->f->inflight++;
}

/* Bookkeeping every object request's done() starts with.  false: the step
 * failed meanwhile, and there is nothing more to do. */
static bool obj_req_ended(struct fobj *o) {
        struct fstep *st = o->st;

        o->req_busy = false;
        st->inflight--;
        st->f->inflight--;
        if (st->phase != STEP_FAILED)
                return true;
        step_maybe_free(st);
        flusher_pump(st->f);
        return false;
}

/* The same for the step's own request (manifest, listing, COMMIT). */
static bool step_req_ended(struct fstep *st) {
        st->req_busy = false;
        if (st->phase != STEP_FAILED)
                return true;
        step_maybe_free(st);
        return false;
}

/* ---- objects ------------------------------------------------------------------------------ */

static void obj_done(struct fobj *o, const char *etag) {
        struct fstep *st = o->st;
        struct flusher *f = st->f;

        o->phase = OBJ_DONE;
        obj_close(o);
        st->objs_done++;
        f->uploads_active--;
        /* (void): an upload record a fault lost (catalog.c logs it) costs uploading the object
         * again after a crash, not data */
        (void)catalog_remote_object_set(f->catalog, st->job, st->step, o->rank, o->shard, o->key,
                                        o->size, CATALOG_OBJECT_DONE,
                                        o->multipart ? o->upload_id : NULL,
                                        o->multipart ? o->part_size : 0, etag, NULL);
        log_debug("flush: %s done (%" PRIu64 " bytes%s)", o->key, o->size,
                  o->multipart ? ", multipart" : "");
}

static int obj_open(struct fobj *o) {
        struct fstep *st = o->st;
        if (o->fd >= 0)
                return 0;
        int r = store_shard_open_buffered(st->f->store, st->job, st->step, o->rank, o->shard,
                                          &o->fd);
        if (r < 0)
                step_fail(st, "cannot open shard %s of rank %u on local disk: %s", o->shard,
                          o->rank, strerror(-r));
        return r;
}

static void put_done(struct s3_request *req, int error) {
        struct fobj *o = container_of(req, struct fobj, req);
        struct fstep *st = o->st;
        struct flusher *f = st->f;

        if (!obj_req_ended(o))
                return;
        if (error == 0) {
                f->bytes_uploaded += o->size;
                obj_done(o, req->result.etag);
        } else {
                o->phase = OBJ_TODO;
                f->uploads_active--;
                obj_close(o);
                step_request_failed(st, "PutObject", o->key, &req->result, error);
        }
        step_pump(st);
}

static void obj_start_put(struct fobj *o) {
        struct fstep *st = o->st;
        struct flusher *f = st->f;
        struct s3_body body;

        if (o->size > 0) {
                if (obj_open(o) < 0)
                        return;
                body = s3_body_fd(o->fd, 0, o->size);
        } else {
                body = s3_body_mem("", 0);
        }
        o->req = (struct s3_request){ .done = put_done };
        int r = s3_put_object(f->s3, &o->req, o->key, &body, 0);
        if (r < 0) {
                step_fail(st, "cannot start PutObject %s: %s", o->key, strerror(-r));
                return;
        }
        o->phase = OBJ_PUTTING;
        o->req_busy = true;
        f->uploads_active++;
        st->inflight++;
        f->inflight++;
}

static uint64_t part_length(const struct fobj *o, uint32_t number) {
        uint64_t off = (uint64_t)(number - 1) * o->part_size;
        return MIN(o->part_size, o->size - off);
}

static int obj_parts_alloc(struct fobj *o) {
        o->nparts = (uint32_t)((o->size + o->part_size - 1) / o->part_size);
        o->part_state = calloc(o->nparts, 1);
        o->parts = calloc(o->nparts, sizeof(*o->parts));
        if (!o->part_state || !o->parts)
                return -ENOMEM;
        for (uint32_t i = 0; i < o->nparts; i++)
                o->parts[i].number = i + 1;
        o->parts_done = o->parts_inflight = o->next_part = 0;
        return 0;
}

static void part_mark_done(struct fobj *o, uint32_t number, const char *etag) {
        struct s3_part *p = &o->parts[number - 1];
        if (o->part_state[number - 1] == PART_DONE)
                return;
        o->part_state[number - 1] = PART_DONE;
        snprintf(p->etag, sizeof(p->etag), "%s", etag);
        p->size = part_length(o, number);
        o->parts_done++;
}

static void complete_done(struct s3_request *req, int error);

static void head_after_complete_done(struct s3_request *req, int error) {
        struct fobj *o = container_of(req, struct fobj, req);
        struct fstep *st = o->st;
        struct flusher *f = st->f;

        if (!obj_req_ended(o))
                return;
        if (error == 0 && req->result.bytes == o->size) {
                obj_done(o, req->result.etag);
        } else if (error == -ENOENT || (error == 0 && req->result.bytes != o->size)) {
                /* The upload is gone and the object is not there (or is
                 * someone else's): start the object over. */
                log_warn("flush: upload of %s vanished; uploading it again", o->key);
                o->upload_id[0] = 0;
                /* (void): parts left behind by a fault (catalog.c logs it) are of an upload id
                 * no longer recorded: never completed, and cleared with the next upload id */
                (void)catalog_remote_parts_clear(f->catalog, st->job, st->step, o->rank, o->shard);
                free(o->part_state);
                free(o->parts);
                o->part_state = NULL;
                o->parts = NULL;
                o->phase = OBJ_TODO;
                f->uploads_active--;
                obj_close(o);
        } else {
                o->phase = OBJ_PARTS;
                step_request_failed(st, "HeadObject", o->key, &req->result, error);
        }
        step_pump(st);
}

static void obj_head(struct fobj *o) {
        struct fstep *st = o->st;
        struct flusher *f = st->f;

        o->req = (struct s3_request){ .done = head_after_complete_done };
        int r = s3_head_object(f->s3, &o->req, o->key);
        if (r < 0) {
                step_fail(st, "cannot start HeadObject %s: %s", o->key, strerror(-r));
                return;
        }
        obj_req_started(o);
}

static void obj_complete(struct fobj *o) {
        struct fstep *st = o->st;
        struct flusher *f = st->f;

        o->phase = OBJ_COMPLETING;
        o->req = (struct s3_request){ .done = complete_done };
        int r = s3_complete_multipart_upload(f->s3, &o->req, o->key, o->upload_id, o->parts,
                                             o->nparts);
        if (r < 0) {
                step_fail(st, "cannot start CompleteMultipartUpload %s: %s", o->key, strerror(-r));
                return;
        }
        obj_req_started(o);
}

static void complete_done(struct s3_request *req, int error) {
        struct fobj *o = container_of(req, struct fobj, req);
        struct fstep *st = o->st;

        if (!obj_req_ended(o))
                return;
        if (error == 0) {
                /* radosgw answers with an empty ETag: the catalog keeps
                 * what there is; nothing depends on it. */
                obj_done(o, req->result.etag);
        } else if (error == -ENOENT && req->result.attempts > 1) {
                /* An earlier attempt completed it and its answer was lost. */
                obj_head(o);
        } else {
                o->phase = OBJ_PARTS;
                step_request_failed(st, "CompleteMultipartUpload", o->key, &req->result, error);
        }
        step_pump(st);
}

static void part_done(struct s3_request *req, int error) {
        struct fpart *p = container_of(req, struct fpart, req);
        struct fobj *o = p->o;
        struct fstep *st = o->st;
        struct flusher *f = st->f;
        uint32_t n = p->number;

        st->inflight--;
        f->inflight--;
        o->parts_inflight--;
        list_unlink(&p->link);
        if (st->phase == STEP_FAILED) {
                free(p);
                step_maybe_free(st);
                flusher_pump(f);
                return;
        }
        if (error == 0) {
                f->bytes_uploaded += part_length(o, n);
                part_mark_done(o, n, req->result.etag);
                /* (void): a part record a fault lost (catalog.c logs it) is found again by
                 * ListParts after a crash, or re-uploaded */
                (void)catalog_remote_part_add(f->catalog, st->job, st->step, o->rank, o->shard, n,
                                              req->result.etag, part_length(o, n));
        } else {
                o->part_state[n - 1] = PART_TODO;
                o->next_part = MIN(o->next_part, n - 1);
                if (error == -ENOENT) {
                        /* NoSuchUpload: aborted behind our back (lifecycle
                         * rule, operator).  The object starts over. */
                        struct s3_result res = req->result;
                        free(p);
                        res.permanent = false;
                        if (o->parts_inflight == 0) {
                                o->upload_id[0] = 0;
                                /* (void): parts left behind by a fault (catalog.c logs it) are
                                 * of an upload id no longer recorded: never completed, and
                                 * cleared with the next upload id */
                                (void)catalog_remote_parts_clear(f->catalog, st->job, st->step,
                                                                 o->rank, o->shard);
                                free(o->part_state);
                                free(o->parts);
                                o->part_state = NULL;
                                o->parts = NULL;
                                o->phase = OBJ_TODO;
                                f->uploads_active--;
                                obj_close(o);
                        }
                        step_stall(st, "UploadPart (upload vanished)", &res, error);
                        step_pump(st);
                        return;
                }
                char what[64];
                snprintf(what, sizeof(what), "UploadPart %u", n);
                step_request_failed(st, what, o->key, &req->result, error);
        }
        free(p);
        step_pump(st);
}

/* Start the next part of o that is neither done nor in flight: 1 started,
 * 0 none left to start, < 0 failed (step failed). */
static int obj_start_part(struct fobj *o) {
        struct fstep *st = o->st;
        struct flusher *f = st->f;

        while (o->next_part < o->nparts && o->part_state[o->next_part] != PART_TODO)
                o->next_part++;
        if (o->next_part >= o->nparts)
                return 0;
        uint32_t n = ++o->next_part;
        struct fpart *p = calloc(1, sizeof(*p));
        if (!p) {
                step_fail(st, "out of memory");
                return -ENOMEM;
        }
        p->o = o;
        p->number = n;
        list_init(&p->link);
        p->req.done = part_done;
        struct s3_body body = s3_body_fd(o->fd, (uint64_t)(n - 1) * o->part_size,
                                         part_length(o, n));
        int r = s3_upload_part(f->s3, &p->req, o->key, o->upload_id, n, &body);
        if (r < 0) {
                free(p);
                step_fail(st, "cannot start UploadPart %u of %s: %s", n, o->key, strerror(-r));
                return r;
        }
        o->part_state[n - 1] = PART_INFLIGHT;
        o->parts_inflight++;
        list_add_tail(&st->parts, &p->link);
        st->inflight++;
        f->inflight++;
        return 1;
}

static void create_done(struct s3_request *req, int error) {
        struct fobj *o = container_of(req, struct fobj, req);
        struct fstep *st = o->st;
        struct flusher *f = st->f;

        if (!obj_req_ended(o))
                return;
        if (error < 0) {
                o->phase = OBJ_TODO;
                f->uploads_active--;
                obj_close(o);
                step_request_failed(st, "CreateMultipartUpload", o->key, &req->result, error);
                step_pump(st);
                return;
        }
        snprintf(o->upload_id, sizeof(o->upload_id), "%s", req->result.upload_id);
        /* Recorded before any part is sent: after a crash the upload is
         * found again instead of orphaned. */
        /* (void): parts left behind by a fault (catalog.c logs it) are of an upload id no
         * longer recorded: never completed, and cleared with the next upload id */
        (void)catalog_remote_parts_clear(f->catalog, st->job, st->step, o->rank, o->shard);
        /* (void): an upload record a fault lost (catalog.c logs it) costs uploading the object
         * again after a crash, not data */
        (void)catalog_remote_object_set(f->catalog, st->job, st->step, o->rank, o->shard, o->key,
                                        o->size, CATALOG_OBJECT_UPLOADING, o->upload_id,
                                        o->part_size, NULL, NULL);
        /* (void): catalog_flush() logs a failed commit and drops the batch; reconcile
         * re-derives the rows from the manifests at the next start */
        (void)catalog_flush(f->catalog);
        o->phase = OBJ_PARTS;
        step_pump(st);
}

static void list_parts_next(struct fobj *o);

static void list_parts_done(struct s3_request *req, int error) {
        struct fobj *o = container_of(req, struct fobj, req);
        struct fstep *st = o->st;
        struct flusher *f = st->f;

        if (!obj_req_ended(o))
                return;
        if (error == -ENOENT) {
                /* The upload is gone: completed just before the crash (then
                 * the object is there), or aborted.  HEAD decides. */
                o->phase = OBJ_COMPLETING;
                obj_head(o);
                return;
        }
        if (error < 0) {
                o->phase = OBJ_TODO;
                f->uploads_active--;
                obj_close(o);
                step_request_failed(st, "ListParts", o->key, &req->result, error);
                step_pump(st);
                return;
        }
        /* A part the store lists with the size we would send is ours: it
         * was checked against its Content-MD5 when it arrived, and the
         * shard file never changes.  Anything else is sent (again). */
        for (size_t i = 0; i < o->list.count; i++) {
                const struct s3_part *p = &o->list.parts[i];
                if (p->number < 1 || p->number > o->nparts || p->size != part_length(o, p->number))
                        continue;
                if (o->part_state[p->number - 1] != PART_DONE)
                        /* (void): a part record a fault lost (catalog.c logs it) is found
                         * again by ListParts after a crash, or re-uploaded */
                        (void)catalog_remote_part_add(f->catalog, st->job, st->step, o->rank,
                                                      o->shard, p->number, p->etag, p->size);
                part_mark_done(o, p->number, p->etag);
        }
        if (o->list.truncated && o->list.next_marker > o->list_marker) {
                o->list_marker = o->list.next_marker;
                list_parts_next(o);
                return;
        }
        log_info("flush: resuming upload of %s: %u of %u parts already in the store", o->key,
                 o->parts_done, o->nparts);
        o->phase = OBJ_PARTS;
        step_pump(st);
}

static void list_parts_next(struct fobj *o) {
        struct fstep *st = o->st;
        struct flusher *f = st->f;

        if (!o->list.parts) {
                o->list.parts = calloc(S3_LIST_MAX, sizeof(*o->list.parts));
                if (!o->list.parts) {
                        step_fail(st, "out of memory");
                        return;
                }
                o->list.capacity = S3_LIST_MAX;
        }
        o->list.count = 0;
        o->req = (struct s3_request){ .done = list_parts_done };
        int r = s3_list_parts(f->s3, &o->req, o->key, o->upload_id, o->list_marker, &o->list);
        if (r < 0) {
                step_fail(st, "cannot start ListParts %s: %s", o->key, strerror(-r));
                return;
        }
        obj_req_started(o);
}

/* Begin a multipart object: resume the recorded upload or create one. */
static void obj_start_multipart(struct fobj *o) {
        struct fstep *st = o->st;
        struct flusher *f = st->f;

        if (obj_open(o) < 0)
                return;
        if (!o->parts && obj_parts_alloc(o) < 0) {
                step_fail(st, "out of memory");
                return;
        }
        f->uploads_active++;
        o->phase = OBJ_STARTING;
        if (o->upload_id[0]) {
                /* Parts the catalog recorded are done; ListParts adds any
                 * whose answer the crash lost. */
                size_t count = 0;
                struct catalog_part *rec = calloc(o->nparts, sizeof(*rec));
                if (rec && catalog_remote_parts(f->catalog, st->job, st->step, o->rank, o->shard,
                                                rec, o->nparts, &count) == 0) {
                        for (size_t i = 0; i < count; i++)
                                if (rec[i].number >= 1 && rec[i].number <= o->nparts &&
                                    rec[i].size == part_length(o, rec[i].number))
                                        part_mark_done(o, rec[i].number, rec[i].etag);
                }
                free(rec);
                o->list_marker = 0;
                list_parts_next(o);
                return;
        }
        o->req = (struct s3_request){ .done = create_done };
        int r = s3_create_multipart_upload(f->s3, &o->req, o->key);
        if (r < 0) {
                step_fail(st, "cannot start CreateMultipartUpload %s: %s", o->key, strerror(-r));
                return;
        }
        obj_req_started(o);
}

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
        st->objs = calloc(nobjs ? nobjs : 1, sizeof(*st->objs));
        if (!st->objs)
                return -ENOMEM;
        for (uint32_t i = 0; i < nm->nranks; i++) {
                const struct manifest *m = nm->ranks[i];
                for (uint32_t k = 0; k < m->nshards; k++) {
                        struct fobj *o = &st->objs[st->nobjs++];
                        const struct manifest_shard *sh = &m->shards[k];
                        o->st = st;
                        o->fd = -1;
                        o->rank = m->rank;
                        o->size = sh->size;
                        snprintf(o->shard, sizeof(o->shard), "%s", sh->name);
                        r = object_key_shard(o->key, sizeof(o->key), f->prefix, st->job, st->step,
                                             m->rank, sh->name);
                        if (r < 0)
                                return r;
                        o->part_size = f->opts.part_size;
                        o->multipart = o->size > o->part_size;

                        struct catalog_remote_object ro;
                        if (catalog_remote_object_get(f->catalog, st->job, st->step, m->rank,
                                                      sh->name, &ro) == 0 &&
                            !strcmp(ro.key, o->key) && ro.size == o->size) {
                                if (ro.state == CATALOG_OBJECT_DONE) {
                                        o->phase = OBJ_DONE;
                                        st->objs_done++;
                                        continue;
                                }
                                if (ro.upload_id[0] && ro.part_size >= (5u << 20)) {
                                        /* resume with the part size it began with */
                                        o->multipart = true;
                                        o->part_size = ro.part_size;
                                        snprintf(o->upload_id, sizeof(o->upload_id), "%s",
                                                 ro.upload_id);
                                        continue;
                                }
                        }
                        /* (void): an upload record a fault lost (catalog.c logs it) costs
                         * uploading the object again after a crash, not data */
                        (void)catalog_remote_object_set(f->catalog, st->job, st->step, m->rank,
                                                        sh->name, o->key, o->size,
                                                        CATALOG_OBJECT_PENDING, NULL, 0, NULL,
                                                        NULL);
                }
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
                 st->job, st->step, f->opts.node_index, st->nobjs);
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
        log_info("flush: job %s step %" PRIu64 " is in the object store (COMMIT present)",
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

static void step_commit_failed(void *userdata, const char *msg) {
        step_fail(userdata, "%s", msg);
}

static void step_commit_idle(void *userdata) {
        step_maybe_free(userdata);
}

static const struct cluster_commit_ops step_commit_ops = {
        .done = step_commit_done,
        .failed = step_commit_failed,
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
        /* multipart objects already open: parts, completion */
        for (size_t i = 0; i < st->nobjs && st->phase == STEP_OBJECTS; i++) {
                struct fobj *o = &st->objs[i];
                if (o->phase != OBJ_PARTS)
                        continue;
                while (f->inflight < f->budget && st->phase == STEP_OBJECTS)
                        if (obj_start_part(o) <= 0)
                                break;
                if (o->parts_done == o->nparts && o->parts_inflight == 0 && !o->req_busy)
                        obj_complete(o);
        }
        /* new objects */
        while (st->phase == STEP_OBJECTS && f->inflight < f->budget && st->next_obj < st->nobjs) {
                struct fobj *o = &st->objs[st->next_obj];
                if (o->phase != OBJ_TODO) {
                        st->next_obj++;
                        continue;
                }
                if (o->multipart || o->upload_id[0])
                        obj_start_multipart(o);
                else
                        obj_start_put(o);
                st->next_obj++;
                if (o->phase == OBJ_PARTS)
                        while (f->inflight < f->budget && st->phase == STEP_OBJECTS &&
                               obj_start_part(o) > 0)
                                ;
        }
        if (st->phase != STEP_OBJECTS)
                return;
        /* objects sent back to TODO by a stall are picked up again */
        if (st->next_obj >= st->nobjs && st->objs_done < st->nobjs) {
                for (size_t i = 0; i < st->nobjs; i++)
                        if (st->objs[i].phase == OBJ_TODO) {
                                st->next_obj = i;
                                if (f->inflight < f->budget) {
                                        step_pump(st);
                                        return;
                                }
                                break;
                        }
        }
        if (st->objs_done == st->nobjs && st->inflight == 0) {
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
        list_init(&st->parts);
        snprintf(st->job, sizeof(st->job), "%s", job);
        st->step = step;
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
                 job, step, st->nobjs - st->objs_done, st->objs_done);
        flusher_pump(f);
        return 0;
}

int flush_step(struct flusher *f, const char *job, uint64_t step) {
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
        out->remote_uploads_active = f->uploads_active;
        out->remote_requests_active = s.active;
        out->remote_bytes_uploaded = f->bytes_uploaded;
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

void flush_set_keep(struct flusher *f, uint32_t keep) {
        f->opts.keep = keep;
        bucket_retention_set_keep(f->retention, keep);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

int flush_new(struct flusher **out, struct loop *loop, struct s3_client *s3,
              struct catalog *catalog, struct store *store, const struct flush_options *opts,
              void (*on_changed)(void *userdata, const char *job, uint64_t step),
              void *userdata) {
        if (opts->node_count < 1 || opts->node_index >= opts->node_count ||
            opts->part_size < (5u << 20) || opts->concurrency < 1 || opts->keep < 1)
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
        f->budget = 2 * opts->concurrency;
        f->on_changed = on_changed;
        f->userdata = userdata;
        list_init(&f->steps);
        int r = bucket_retention_new(&f->retention, s3, catalog, f->prefix, opts->keep);
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
                step_cancel_all(st);
        }
        list_for_each_safe(pos, tmp, &f->steps) {
                struct fstep *st = list_entry(pos, struct fstep, link);
                step_free(st);
        }
        free(f);
        return NULL;
}
