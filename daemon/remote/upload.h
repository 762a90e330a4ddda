/* SPDX-License-Identifier: MIT */
/*
 * upload — this node's shards of one step becoming objects in the store
 * (docs/object-layout.md): one PutObject per shard up to part_size bytes,
 * else a multipart upload whose parts are sent several at a time.  Bodies
 * are streamed from the shard files (never copied whole into memory); the
 * S3 client adds Content-MD5.
 *
 * Progress is in the catalog (remote_objects, remote_parts), written as
 * each request completes: a finished object is not sent again, and an
 * interrupted multipart upload is resumed with ListParts (parts the store
 * already holds, with the size we would send, are not sent again).  An
 * upload the store lost (NoSuchUpload, or gone by the time of a retried
 * CompleteMultipartUpload) starts over.
 *
 * Owns: struct upload (one shard's object, its requests and its parts in
 * flight) and the objects of a struct upload_batch.  The batch itself is
 * embedded in its owner (remote/flush, one per step), which decides what a
 * failure means for the step and when to start more (upload_batch_pump).
 * Writes the catalog's remote_objects and remote_parts rows only; never a
 * step's remote_state.  Loop thread only.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "local/manifest.h"
#include "local/store.h"
#include "remote/s3.h"
#include "util/list.h"

struct upload;

/* Shared by every batch of one owner (the flusher); owned by it, updated
 * by upload.c as requests start and end. */
struct upload_counters {
        uint32_t inflight;        /* object requests at the S3 client */
        uint32_t budget;          /* no request starts while inflight >= budget */
        uint32_t uploads_active;  /* objects begun and not done */
        uint64_t bytes_uploaded;  /* bodies the store accepted */
};

/* Calls to the owner, each from a done() callback or from a call into this
 * module (failed, when a request cannot even start). */
struct upload_ops {
        /* Permanent: the owner stops the batch (upload_batch_stop,
         * upload_batch_cancel). */
        void (*failed)(void *userdata, const char *msg);
        /* A request failed after the S3 client's own retries: the owner
         * pauses (retryable) or stops (res->permanent).  -ECANCELED never
         * comes here. */
        void (*request_failed)(void *userdata, const char *what, const char *key,
                               const struct s3_result *res, int error);
        /* A retryable failure the batch already recovered from (the upload
         * starts over): the owner pauses. */
        void (*stall)(void *userdata, const char *what, const struct s3_result *res, int error);
        /* A request ended and the batch may start more: the owner calls
         * upload_batch_pump() unless it pauses. */
        void (*pump)(void *userdata);
        /* A request ended after upload_batch_stop(). */
        void (*idle)(void *userdata);
};

/* The objects of one step.  Fields are written by upload.c only; the owner
 * reads nobjs, objs_done and inflight, and sets nothing but through the
 * calls below. */
struct upload_batch {
        struct s3_client *s3;
        struct catalog *catalog;
        struct store *store;
        const char *job;          /* the owner's, outlives the batch */
        uint64_t step;
        struct upload_counters *counters;
        const struct upload_ops *ops;
        void *userdata;
        struct upload *objs;
        size_t nobjs, cap, next_obj, objs_done;
        uint32_t inflight;        /* requests of this batch at the S3 client */
        struct list parts;        /* parts in flight */
        bool stopped;             /* upload_batch_stop(): requests end quietly */
};

/* Everything borrowed must outlive the batch; nothing is sent yet. */
void upload_batch_init(struct upload_batch *b, struct s3_client *s3, struct catalog *catalog,
                       struct store *store, const char *job, uint64_t step,
                       struct upload_counters *counters, const struct upload_ops *ops,
                       void *userdata);
/* Room for `count` objects in all; once, before the first upload_batch_add. */
int upload_batch_reserve(struct upload_batch *b, size_t count);
/* The shards of one rank's manifest, keys under `prefix`: objects the
 * catalog records as stored count as done, a recorded multipart upload is
 * resumed with the part size it began with, the others are recorded as
 * pending.  Shards larger than part_size go multipart. */
int upload_batch_add_rank(struct upload_batch *b, const struct manifest *m, const char *prefix,
                          uint64_t part_size);
/* Start what can start within counters->budget. */
void upload_batch_pump(struct upload_batch *b);
/* True when every object is stored and nothing of the batch is in flight. */
bool upload_batch_done(const struct upload_batch *b);
/* Stop: objects in progress go back to their start (their catalog rows
 * stay, for the next run); requests still in flight end quietly (ops->idle)
 * when they end or upload_batch_cancel() cancels them. */
void upload_batch_stop(struct upload_batch *b);
/* Cancel every request in flight; each done() runs before this returns.
 * Only after upload_batch_stop(). */
void upload_batch_cancel(struct upload_batch *b);
/* Free the objects; nothing may be in flight (upload_batch_stop first). */
void upload_batch_clear(struct upload_batch *b);

/* A stored object found bad (remote/audit): record it as pending again
 * under its key, its parts forgotten, `why` as its error, so that the
 * step's next flush sends it from nothing.  Catalog errors. */
int upload_object_reset(struct catalog *catalog, const char *job, uint64_t step, uint32_t rank,
                        const char *shard, const char *key, uint64_t size, const char *why);
