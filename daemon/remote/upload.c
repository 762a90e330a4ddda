/* SPDX-License-Identifier: MIT */
/*
 * upload — one step's shards becoming objects; see upload.h.  The state
 * machine of one object:
 *
 *   TODO -> (CreateMultipartUpload | ListParts) -> PARTS -> COMPLETING -> DONE
 *   TODO -> PutObject -> DONE                              (size <= part_size)
 *
 * A CompleteMultipartUpload whose earlier attempt's answer was lost asks
 * HEAD whether the object is there; ListParts answering NoSuchUpload asks
 * the same (completed just before a crash, or aborted).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt-proto.h"
#include "remote/objects.h"
#include "remote/upload.h"
#include "util/cleanup.h"
#include "util/log.h"

/* The catalog keeps its own types; this is where the object store's records
 * cross into it, so the bounds must agree here. */
_Static_assert(CATALOG_KEY_MAX == S3_KEY_MAX, "object key bound");
_Static_assert(CATALOG_UPLOAD_ID_MAX == S3_UPLOAD_ID_MAX, "upload id bound");
_Static_assert(CATALOG_ETAG_MAX == S3_ETAG_MAX, "etag bound");
_Static_assert(CATALOG_PART_NUMBER_MAX == S3_PART_NUMBER_MAX, "part number bound");

enum obj_phase {
        OBJ_TODO,
        OBJ_STARTING,   /* CreateMultipartUpload or ListParts in flight */
        OBJ_PARTS,
        OBJ_COMPLETING, /* CompleteMultipartUpload (or a HEAD after it) */
        OBJ_PUTTING,    /* the single PutObject */
        OBJ_DONE,
};

enum part_state { PART_TODO, PART_INFLIGHT, PART_DONE };

struct upload {
        struct upload_batch *b;
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

struct upload_part {
        struct list link;         /* on upload_batch.parts while in flight */
        struct s3_request req;
        struct upload *o;
        uint32_t number;
};

static void batch_fail(struct upload_batch *b, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
static void batch_fail(struct upload_batch *b, const char *fmt, ...) {
        char msg[CKPT_ERRMSG_MAX + 1];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        b->ops->failed(b->userdata, msg);
}

/* May another request start?  The budget is the owner's, over all its
 * batches. */
static bool batch_budget_left(const struct upload_batch *b) {
        return b->counters->inflight < b->counters->budget;
}

static void obj_close(struct upload *o) {
        if (o->fd >= 0) {
                close(o->fd);
                o->fd = -1;
        }
}

static void obj_clear(struct upload *o) {
        obj_close(o);
        free(o->part_state);
        free(o->parts);
        free(o->list.parts);
        o->part_state = NULL;
        o->parts = NULL;
        o->list.parts = NULL;
}

/* A request of o failed: the owner pauses or stops the batch. */
static void obj_request_failed(struct upload *o, const char *what, const struct s3_result *res,
                               int error) {
        o->b->ops->request_failed(o->b->userdata, what, o->key, res, error);
}

/* The object's own request went to the S3 client. */
static void obj_req_started(struct upload *o) {
        o->req_busy = true;
        o->b->inflight++;
        o->b->counters->inflight++;
}

/* Bookkeeping every object request's done() starts with.  false: the
 * batch was stopped meanwhile (the step failed), and there is nothing more
 * to do. */
static bool obj_req_ended(struct upload *o) {
        struct upload_batch *b = o->b;

        o->req_busy = false;
        b->inflight--;
        b->counters->inflight--;
        if (!b->stopped)
                return true;
        b->ops->idle(b->userdata);
        return false;
}

static void obj_done(struct upload *o, const char *etag) {
        struct upload_batch *b = o->b;

        o->phase = OBJ_DONE;
        obj_close(o);
        b->objs_done++;
        b->counters->uploads_active--;
        /* (void): an upload record a fault lost (catalog.c logs it) costs uploading the object
         * again after a crash, not data */
        (void)catalog_remote_object_set(b->catalog, b->job, b->step, o->rank, o->shard, o->key,
                                        o->size, CATALOG_OBJECT_DONE,
                                        o->multipart ? o->upload_id : NULL,
                                        o->multipart ? o->part_size : 0, etag, NULL);
        log_debug("flush: %s done (%" PRIu64 " bytes%s)", o->key, o->size,
                  o->multipart ? ", multipart" : "");
}

/* The store lost the multipart upload (aborted, or never completed): the
 * object goes back to TODO and is uploaded again under a new upload id. */
static void obj_start_over(struct upload *o) {
        struct upload_batch *b = o->b;

        o->upload_id[0] = 0;
        /* (void): parts left behind by a fault (catalog.c logs it) are of an upload id no
         * longer recorded: never completed, and cleared with the next upload id */
        (void)catalog_remote_parts_clear(b->catalog, b->job, b->step, o->rank, o->shard);
        free(o->part_state);
        free(o->parts);
        o->part_state = NULL;
        o->parts = NULL;
        o->phase = OBJ_TODO;
        b->counters->uploads_active--;
        obj_close(o);
}

static int obj_open(struct upload *o) {
        struct upload_batch *b = o->b;
        if (o->fd >= 0)
                return 0;
        int r = store_shard_open_buffered(b->store, b->job, b->step, o->rank, o->shard,
                                          &o->fd);
        if (r < 0)
                batch_fail(b, "cannot open shard %s of rank %u on local disk: %s", o->shard,
                           o->rank, strerror(-r));
        return r;
}

static void put_done(struct s3_request *req, int error) {
        struct upload *o = container_of(req, struct upload, req);
        struct upload_batch *b = o->b;

        if (!obj_req_ended(o))
                return;
        if (error == 0) {
                b->counters->bytes_uploaded += o->size;
                obj_done(o, req->result.etag);
        } else {
                o->phase = OBJ_TODO;
                b->counters->uploads_active--;
                obj_close(o);
                obj_request_failed(o, "PutObject", &req->result, error);
        }
        b->ops->pump(b->userdata);
}

static void obj_start_put(struct upload *o) {
        struct upload_batch *b = o->b;
        struct s3_body body;

        if (o->size > 0) {
                if (obj_open(o) < 0)
                        return;
                body = s3_body_fd(o->fd, 0, o->size);
        } else {
                body = s3_body_mem("", 0);
        }
        o->req = (struct s3_request){ .done = put_done };
        int r = s3_put_object(b->s3, &o->req, o->key, &body, 0);
        if (r < 0) {
                batch_fail(b, "cannot start PutObject %s: %s", o->key, strerror(-r));
                return;
        }
        o->phase = OBJ_PUTTING;
        o->req_busy = true;
        b->counters->uploads_active++;
        b->inflight++;
        b->counters->inflight++;
}

static uint64_t part_length(const struct upload *o, uint32_t number) {
        uint64_t off = (uint64_t)(number - 1) * o->part_size;
        return MIN(o->part_size, o->size - off);
}

static int obj_parts_alloc(struct upload *o) {
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

static void part_mark_done(struct upload *o, uint32_t number, const char *etag) {
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
        struct upload *o = container_of(req, struct upload, req);
        struct upload_batch *b = o->b;

        if (!obj_req_ended(o))
                return;
        if (error == 0 && req->result.bytes == o->size) {
                obj_done(o, req->result.etag);
        } else if (error == -ENOENT || (error == 0 && req->result.bytes != o->size)) {
                /* The upload is gone and the object is not there (or is
                 * someone else's): start the object over. */
                log_warn("flush: upload of %s vanished; uploading it again", o->key);
                obj_start_over(o);
        } else {
                o->phase = OBJ_PARTS;
                obj_request_failed(o, "HeadObject", &req->result, error);
        }
        b->ops->pump(b->userdata);
}

static void obj_head(struct upload *o) {
        struct upload_batch *b = o->b;

        o->req = (struct s3_request){ .done = head_after_complete_done };
        int r = s3_head_object(b->s3, &o->req, o->key);
        if (r < 0) {
                batch_fail(b, "cannot start HeadObject %s: %s", o->key, strerror(-r));
                return;
        }
        obj_req_started(o);
}

static void obj_complete(struct upload *o) {
        struct upload_batch *b = o->b;

        o->phase = OBJ_COMPLETING;
        o->req = (struct s3_request){ .done = complete_done };
        int r = s3_complete_multipart_upload(b->s3, &o->req, o->key, o->upload_id, o->parts,
                                             o->nparts);
        if (r < 0) {
                batch_fail(b, "cannot start CompleteMultipartUpload %s: %s", o->key, strerror(-r));
                return;
        }
        obj_req_started(o);
}

static void complete_done(struct s3_request *req, int error) {
        struct upload *o = container_of(req, struct upload, req);
        struct upload_batch *b = o->b;

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
                obj_request_failed(o, "CompleteMultipartUpload", &req->result, error);
        }
        b->ops->pump(b->userdata);
}

static void part_done(struct s3_request *req, int error) {
        struct upload_part *p = container_of(req, struct upload_part, req);
        struct upload *o = p->o;
        struct upload_batch *b = o->b;
        uint32_t n = p->number;

        b->inflight--;
        b->counters->inflight--;
        o->parts_inflight--;
        list_unlink(&p->link);
        if (b->stopped) {
                free(p);
                b->ops->idle(b->userdata);
                return;
        }
        if (error == 0) {
                b->counters->bytes_uploaded += part_length(o, n);
                part_mark_done(o, n, req->result.etag);
                /* (void): a part record a fault lost (catalog.c logs it) is found again by
                 * ListParts after a crash, or re-uploaded */
                (void)catalog_remote_part_add(b->catalog, b->job, b->step, o->rank, o->shard, n,
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
                                obj_start_over(o);
                        }
                        b->ops->stall(b->userdata, "UploadPart (upload vanished)", &res, error);
                        b->ops->pump(b->userdata);
                        return;
                }
                char what[64];
                snprintf(what, sizeof(what), "UploadPart %u", n);
                obj_request_failed(o, what, &req->result, error);
        }
        free(p);
        b->ops->pump(b->userdata);
}

/* Start the next part of o that is neither done nor in flight: 1 started,
 * 0 none left to start, < 0 failed (batch failed). */
static int obj_start_part(struct upload *o) {
        struct upload_batch *b = o->b;

        while (o->next_part < o->nparts && o->part_state[o->next_part] != PART_TODO)
                o->next_part++;
        if (o->next_part >= o->nparts)
                return 0;
        uint32_t n = ++o->next_part;
        struct upload_part *p = calloc(1, sizeof(*p));
        if (!p) {
                batch_fail(b, "out of memory");
                return -ENOMEM;
        }
        p->o = o;
        p->number = n;
        list_init(&p->link);
        p->req.done = part_done;
        struct s3_body body = s3_body_fd(o->fd, (uint64_t)(n - 1) * o->part_size,
                                         part_length(o, n));
        int r = s3_upload_part(b->s3, &p->req, o->key, o->upload_id, n, &body);
        if (r < 0) {
                free(p);
                batch_fail(b, "cannot start UploadPart %u of %s: %s", n, o->key, strerror(-r));
                return r;
        }
        o->part_state[n - 1] = PART_INFLIGHT;
        o->parts_inflight++;
        list_add_tail(&b->parts, &p->link);
        b->inflight++;
        b->counters->inflight++;
        return 1;
}

static void create_done(struct s3_request *req, int error) {
        struct upload *o = container_of(req, struct upload, req);
        struct upload_batch *b = o->b;

        if (!obj_req_ended(o))
                return;
        if (error < 0) {
                o->phase = OBJ_TODO;
                b->counters->uploads_active--;
                obj_close(o);
                obj_request_failed(o, "CreateMultipartUpload", &req->result, error);
                b->ops->pump(b->userdata);
                return;
        }
        snprintf(o->upload_id, sizeof(o->upload_id), "%s", req->result.upload_id);
        /* Recorded before any part is sent: after a crash the upload is
         * found again instead of orphaned. */
        /* (void): parts left behind by a fault (catalog.c logs it) are of an upload id no
         * longer recorded: never completed, and cleared with the next upload id */
        (void)catalog_remote_parts_clear(b->catalog, b->job, b->step, o->rank, o->shard);
        /* (void): an upload record a fault lost (catalog.c logs it) costs uploading the object
         * again after a crash, not data */
        (void)catalog_remote_object_set(b->catalog, b->job, b->step, o->rank, o->shard, o->key,
                                        o->size, CATALOG_OBJECT_UPLOADING, o->upload_id,
                                        o->part_size, NULL, NULL);
        /* (void): catalog_flush() logs a failed commit and drops the batch; reconcile
         * re-derives the rows from the manifests at the next start */
        (void)catalog_flush(b->catalog);
        o->phase = OBJ_PARTS;
        b->ops->pump(b->userdata);
}

static void list_parts_next(struct upload *o);

static void list_parts_done(struct s3_request *req, int error) {
        struct upload *o = container_of(req, struct upload, req);
        struct upload_batch *b = o->b;

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
                b->counters->uploads_active--;
                obj_close(o);
                obj_request_failed(o, "ListParts", &req->result, error);
                b->ops->pump(b->userdata);
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
                        (void)catalog_remote_part_add(b->catalog, b->job, b->step, o->rank,
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
        b->ops->pump(b->userdata);
}

static void list_parts_next(struct upload *o) {
        struct upload_batch *b = o->b;

        if (!o->list.parts) {
                o->list.parts = calloc(S3_LIST_MAX, sizeof(*o->list.parts));
                if (!o->list.parts) {
                        batch_fail(b, "out of memory");
                        return;
                }
                o->list.capacity = S3_LIST_MAX;
        }
        o->list.count = 0;
        o->req = (struct s3_request){ .done = list_parts_done };
        int r = s3_list_parts(b->s3, &o->req, o->key, o->upload_id, o->list_marker, &o->list);
        if (r < 0) {
                batch_fail(b, "cannot start ListParts %s: %s", o->key, strerror(-r));
                return;
        }
        obj_req_started(o);
}

/* Begin a multipart object: resume the recorded upload or create one. */
static void obj_start_multipart(struct upload *o) {
        struct upload_batch *b = o->b;

        if (obj_open(o) < 0)
                return;
        if (!o->parts && obj_parts_alloc(o) < 0) {
                batch_fail(b, "out of memory");
                return;
        }
        b->counters->uploads_active++;
        o->phase = OBJ_STARTING;
        if (o->upload_id[0]) {
                /* Parts the catalog recorded are done; ListParts adds any
                 * whose answer the crash lost. */
                size_t count = 0;
                struct catalog_part *rec = calloc(o->nparts, sizeof(*rec));
                if (rec && catalog_remote_parts(b->catalog, b->job, b->step, o->rank, o->shard,
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
        int r = s3_create_multipart_upload(b->s3, &o->req, o->key);
        if (r < 0) {
                batch_fail(b, "cannot start CreateMultipartUpload %s: %s", o->key, strerror(-r));
                return;
        }
        obj_req_started(o);
}

/* ---- the batch ---------------------------------------------------------------------------- */

void upload_batch_init(struct upload_batch *b, struct s3_client *s3, struct catalog *catalog,
                       struct store *store, const char *job, uint64_t step,
                       struct upload_counters *counters, const struct upload_ops *ops,
                       void *userdata) {
        *b = (struct upload_batch){
                .s3 = s3,
                .catalog = catalog,
                .store = store,
                .job = job,
                .step = step,
                .counters = counters,
                .ops = ops,
                .userdata = userdata,
        };
        list_init(&b->parts);
}

int upload_batch_reserve(struct upload_batch *b, size_t count) {
        if (b->objs)
                return -EINVAL;
        b->objs = calloc(count ? count : 1, sizeof(*b->objs));
        if (!b->objs)
                return -ENOMEM;
        b->cap = count;
        return 0;
}

int upload_batch_add_rank(struct upload_batch *b, const struct manifest *m, const char *prefix,
                          uint64_t part_size) {
        int r;

        if (m->nshards > b->cap - b->nobjs)
                return -ENOBUFS;
        for (uint32_t k = 0; k < m->nshards; k++) {
                struct upload *o = &b->objs[b->nobjs++];
                const struct manifest_shard *sh = &m->shards[k];
                o->b = b;
                o->fd = -1;
                o->rank = m->rank;
                o->size = sh->size;
                snprintf(o->shard, sizeof(o->shard), "%s", sh->name);
                r = object_key_shard(o->key, sizeof(o->key), prefix, b->job, b->step, m->rank,
                                     sh->name);
                if (r < 0)
                        return r;
                o->part_size = part_size;
                o->multipart = o->size > o->part_size;

                struct catalog_remote_object ro;
                if (catalog_remote_object_get(b->catalog, b->job, b->step, m->rank, sh->name,
                                              &ro) == 0 &&
                    !strcmp(ro.key, o->key) && ro.size == o->size) {
                        if (ro.state == CATALOG_OBJECT_DONE) {
                                o->phase = OBJ_DONE;
                                b->objs_done++;
                                continue;
                        }
                        if (ro.upload_id[0] && ro.part_size >= (5u << 20)) {
                                /* resume with the part size it began with */
                                o->multipart = true;
                                o->part_size = ro.part_size;
                                snprintf(o->upload_id, sizeof(o->upload_id), "%s", ro.upload_id);
                                continue;
                        }
                }
                /* (void): an upload record a fault lost (catalog.c logs it) costs uploading
                 * the object again after a crash, not data */
                (void)catalog_remote_object_set(b->catalog, b->job, b->step, m->rank, sh->name,
                                                o->key, o->size, CATALOG_OBJECT_PENDING, NULL, 0,
                                                NULL, NULL);
        }
        return 0;
}

void upload_batch_pump(struct upload_batch *b) {
        /* multipart objects already open: parts, completion */
        for (size_t i = 0; i < b->nobjs && !b->stopped; i++) {
                struct upload *o = &b->objs[i];
                if (o->phase != OBJ_PARTS)
                        continue;
                while (batch_budget_left(b) && !b->stopped)
                        if (obj_start_part(o) <= 0)
                                break;
                if (o->parts_done == o->nparts && o->parts_inflight == 0 && !o->req_busy)
                        obj_complete(o);
        }
        /* new objects */
        while (!b->stopped && batch_budget_left(b) && b->next_obj < b->nobjs) {
                struct upload *o = &b->objs[b->next_obj];
                if (o->phase != OBJ_TODO) {
                        b->next_obj++;
                        continue;
                }
                if (o->multipart || o->upload_id[0])
                        obj_start_multipart(o);
                else
                        obj_start_put(o);
                b->next_obj++;
                if (o->phase == OBJ_PARTS)
                        while (batch_budget_left(b) && !b->stopped &&
                               obj_start_part(o) > 0)
                                ;
        }
        if (b->stopped)
                return;
        /* objects sent back to TODO by a stall are picked up again */
        if (b->next_obj >= b->nobjs && b->objs_done < b->nobjs) {
                for (size_t i = 0; i < b->nobjs; i++)
                        if (b->objs[i].phase == OBJ_TODO) {
                                b->next_obj = i;
                                if (batch_budget_left(b)) {
                                        upload_batch_pump(b);
                                        return;
                                }
                                break;
                        }
        }
}

bool upload_batch_done(const struct upload_batch *b) {
        return b->objs_done == b->nobjs && b->inflight == 0;
}

void upload_batch_stop(struct upload_batch *b) {
        b->stopped = true;
        for (size_t i = 0; i < b->nobjs; i++) {
                struct upload *o = &b->objs[i];
                if (o->phase != OBJ_TODO && o->phase != OBJ_DONE) {
                        b->counters->uploads_active--;
                        o->phase = OBJ_TODO;
                }
        }
}

void upload_batch_cancel(struct upload_batch *b) {
        struct list *pos, *tmp;

        for (size_t i = 0; i < b->nobjs; i++)
                if (b->objs[i].req_busy)
                        s3_request_cancel(b->s3, &b->objs[i].req);
        list_for_each_safe(pos, tmp, &b->parts) {
                struct upload_part *p = list_entry(pos, struct upload_part, link);
                s3_request_cancel(b->s3, &p->req);
        }
}

void upload_batch_clear(struct upload_batch *b) {
        for (size_t i = 0; i < b->nobjs; i++)
                obj_clear(&b->objs[i]);
        free(b->objs);
        b->objs = NULL;
        b->nobjs = b->cap = 0;
}

int upload_object_reset(struct catalog *catalog, const char *job, uint64_t step, uint32_t rank,
                        const char *shard, const char *key, uint64_t size, const char *why) {
        int r = catalog_remote_parts_clear(catalog, job, step, rank, shard);
        if (r < 0)
                return r;
        return catalog_remote_object_set(catalog, job, step, rank, shard, key, size,
                                         CATALOG_OBJECT_PENDING, NULL, 0, NULL, why);
}
