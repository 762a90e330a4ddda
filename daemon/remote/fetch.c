/* SPDX-License-Identifier: MIT */
/*
 * fetch — a committed step from the object store into the local tier (see
 * fetch.h).  One struct fetch_op per request, a sequence of small metadata
 * requests (list/HEAD/GET of COMMIT and node manifests, one at a time),
 * then the shard bytes as chunks in parallel:
 *
 *   chunk: wait for pool units -> ranged GET into them -> CRC32C of each
 *          1 MiB block on a worker -> O_DIRECT write at the same offset ->
 *          units back to the pool
 *
 * The check, the write, the finish and the commit record are step/ingest's,
 * the same path a trainer's save and a neighbour's transfer take.
 *
 * Chunks start at multiples of FETCH_CHUNK (a multiple of the manifest's
 * block size), so each chunk holds whole blocks and is checked against the
 * manifest's block CRCs before a byte of it reaches the disk.  A rank is
 * written to its .tmp directory and renamed in by store_rank_finish, like
 * a save: an interrupted fetch leaves nothing a reader could see.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crc32c.h"
#include "remote/fetch.h"
#include "remote/objects.h"
#include "step/ingest.h"
#include "util/cleanup.h"
#include "util/log.h"

#define FETCH_CHUNK (16u << 20)
#define FETCH_META_MAX (256u << 20)

enum fetch_phase {
        PH_LIST_STEPS,
        PH_HEAD_STEPS,
        PH_COMMIT_HEAD,
        PH_COMMIT_GET,
        PH_MANIFESTS,
        PH_RANKS,
        PH_LOCAL_COMMIT,
};

/* A range of a shard: GET into pool memory (ic.ext), then checked against
 * the manifest and written by the ingest (step/ingest.h). */
struct fchunk {
        struct ingest_chunk ic;   /* ic.shard: index in the rank's manifest */
        struct fetch_op *op;
        struct pool_waiter waiter;
        bool has_ext;
        struct s3_request req;
        bool req_busy;
};

struct want {
        uint32_t rank;
        const struct manifest *m; /* in op->nms */
};

struct fetch_op {
        struct list link;
        struct loop_timer start;
        struct fetcher *f;
        struct fetch_request *fr; /* NULL once the requester left */
        enum fetch_phase phase;
        int error;
        char msg[CKPT_ERRMSG_MAX + 1];
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint64_t below;           /* 0: no bound (fetch_request.below) */
        uint32_t uid;
        bool replace;             /* fetch_request.replace */
        /* where the ranks land: the fetcher's local tier, or a replica
         * area (fetch_request.into_store) */
        struct store *store;
        struct catalog *catalog;
        bool into_area;
        struct s3_request req;
        bool req_busy;
        /* latest lookup */
        struct s3_object_list olist;
        uint64_t *steps;
        size_t nsteps, cap, cursor;
        /* COMMIT and manifests */
        char *buf;
        size_t buf_len;
        struct commit_object co;
        struct node_manifest **nms; /* co.node_count entries, NULL: not needed */
        uint32_t *need;             /* node indexes to read */
        uint32_t nneed, need_next;
        struct want *wants;
        uint32_t nwants, want_next;
        /* the rank being written */
        struct ingest ingest;       /* its writer and files, until finished */
        uint32_t files;             /* taken from f->files for the rank writer */
        uint32_t shard_next;
        uint64_t offset_next;
        uint32_t chunks_inflight;
        bool rank_finishing;
        struct manifest *rank_m;    /* copy for store_rank_finish */
        struct commit_record record;
        struct ingest_commit commit; /* record being written (PH_LOCAL_COMMIT) */
        uint64_t bytes;
        uint32_t shards;
        uint32_t ranks_fetched;
};

struct fetcher {
        struct loop *loop;
        struct s3_client *s3;
        struct catalog *catalog;
        struct store *store;
        struct pool *pool;
        struct worker_pool *workers;
        char prefix[OBJECT_KEY_MAX + 1];
        struct fetch_options opts;
        struct list ops;
        uint64_t bytes;
        bool freeing;
        struct fd_budget *files;    /* NULL: not counted */
};

/* The rank writer is gone: its files go back to the uid's budget. */
static void op_give_files(struct fetch_op *op) {
        if (op->files)
                fd_budget_give(op->f->files, op->uid, op->files);
        op->files = 0;
}

static void op_next(struct fetch_op *op);
static void chunks_pump(struct fetch_op *op);

static void op_free(struct fetch_op *op) {
        struct fetcher *f = op->f;

        loop_timer_cancel(&op->start);
        list_unlink(&op->link);
        free(op->olist.objects);
        free(op->olist.prefixes);
        free(op->steps);
        free(op->buf);
        if (op->nms)
                for (uint32_t i = 0; i < op->co.node_count; i++)
                        node_manifest_free(op->nms[i]);
        free(op->nms);
        commit_object_clear(&op->co);
        free(op->need);
        free(op->wants);
        manifest_free(op->rank_m);
        commit_record_clear(&op->record);
        free(op);
        if (f->freeing && list_empty(&f->ops))
                free(f); /* fetch_free() left it to the last op */
}

/* Report and free, once nothing of the op is in flight. */
static void op_finish(struct fetch_op *op) {
        struct fetch_request *fr = op->fr;

        if (op->chunks_inflight || op->req_busy || op->rank_finishing)
                return;
        ingest_abort(&op->ingest);
        op_give_files(op);
        if (fr) {
                fr->op = NULL;
                fr->out_step = op->step;
                fr->world_size = op->co.world_size;
                fr->ranks = op->ranks_fetched;
                fr->shards = op->shards;
                fr->bytes = op->bytes;
                fr->done(fr, op->error, op->error < 0 ? op->msg : NULL);
        }
        op_free(op);
}

static void op_fail(struct fetch_op *op, int error, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void op_fail(struct fetch_op *op, int error, const char *fmt, ...) {
        va_list ap;

        if (op->error == 0) {
                op->error = error < 0 ? error : -EIO;
                va_start(ap, fmt);
                vsnprintf(op->msg, sizeof(op->msg), fmt, ap);
                va_end(ap);
                /* "not in the store" is an answer, not a fault: a restore
                 * walking down the steps asks about steps that may never
                 * have been flushed; the requester reports it */
                if (error == -ENOENT)
                        log_info("fetch: job %s: %s", op->job, op->msg);
                else if (error != -ECANCELED)
                        log_error("fetch: job %s: %s", op->job, op->msg);
        }
        op_finish(op);
}

/* ---- metadata ------------------------------------------------------------------------------ */

static void meta_done(struct s3_request *req, int error) {
        struct fetch_op *op = container_of(req, struct fetch_op, req);
        struct fetcher *f = op->f;
        char why[400];
        char dir[OBJECT_KEY_MAX + 1];

        op->req_busy = false;
        if (op->error) {
                op_finish(op);
                return;
        }
        if (error == -ECANCELED) {
                op_fail(op, error, "cancelled");
                return;
        }
        s3_result_describe(&req->result, error, why, sizeof(why));
        switch (op->phase) {
        case PH_LIST_STEPS:
                if (error < 0) {
                        op_fail(op, error, "listing the steps of job '%s' in the store: %s",
                                op->job, why);
                        return;
                }
                object_key_steps_dir(dir, sizeof(dir), f->prefix, op->job);
                for (size_t i = 0; i < op->olist.prefix_count; i++) {
                        uint64_t step;
                        if (object_key_parse_step_dir(dir, op->olist.prefixes[i].prefix, &step) < 0)
                                continue;
                        if (op->nsteps == op->cap) {
                                size_t cap = op->cap ? op->cap * 2 : 64;
                                uint64_t *n = realloc(op->steps, cap * sizeof(*n));
                                if (!n) {
                                        op_fail(op, -ENOMEM, "out of memory");
                                        return;
                                }
                                op->steps = n;
                                op->cap = cap;
                        }
                        op->steps[op->nsteps++] = step;
                }
                if (!op->olist.truncated) {
                        op->phase = PH_HEAD_STEPS;
                        op->cursor = 0;
                }
                break;
        case PH_HEAD_STEPS:
                if (error == 0) {
                        op->step = op->steps[op->nsteps - 1 - op->cursor];
                        op->buf_len = req->result.bytes;
                        op->phase = PH_COMMIT_GET;
                        break;
                }
                if (error != -ENOENT) {
                        op_fail(op, error, "looking for a COMMIT object of job '%s': %s",
                                op->job, why);
                        return;
                }
                op->cursor++;
                break;
        case PH_COMMIT_HEAD:
                if (error == -ENOENT) {
                        op_fail(op, -ENOENT, "step %" PRIu64 " of job '%s' has no COMMIT object "
                                "in the store (never flushed completely, or removed)",
                                op->step, op->job);
                        return;
                }
                if (error < 0) {
                        op_fail(op, error, "HEAD of step %" PRIu64 "'s COMMIT: %s", op->step, why);
                        return;
                }
                op->buf_len = req->result.bytes;
                op->phase = PH_COMMIT_GET;
                break;
        case PH_COMMIT_GET: {
                if (error < 0) {
                        op_fail(op, error, "GET of step %" PRIu64 "'s COMMIT: %s", op->step, why);
                        return;
                }
                int r = commit_object_parse(&op->co, op->buf, op->buf_len);
                if (r < 0 || strcmp(op->co.job, op->job) || op->co.step != op->step) {
                        op_fail(op, -EBADMSG, "the COMMIT object of step %" PRIu64 " is malformed "
                                "or names another step", op->step);
                        return;
                }
                op->phase = PH_MANIFESTS;
                op->need_next = 0;
                break;
        }
        case PH_MANIFESTS: {
                uint32_t node = op->need[op->need_next];
                const struct commit_object_node *cn = &op->co.nodes[node];
                if (error < 0) {
                        op_fail(op, error, "GET of node %u's manifest of step %" PRIu64 ": %s",
                                node, op->step, why);
                        return;
                }
                if (crc32c(0, op->buf, op->buf_len) != cn->manifest_crc32c) {
                        op_fail(op, -EBADMSG, "node %u's manifest of step %" PRIu64 " does not "
                                "match the CRC32C its COMMIT records", node, op->step);
                        return;
                }
                int r = node_manifest_parse(&op->nms[node], op->buf, op->buf_len);
                if (r < 0) {
                        op_fail(op, -EBADMSG, "node %u's manifest of step %" PRIu64
                                " is malformed", node, op->step);
                        return;
                }
                op->need_next++;
                break;
        }
        default:
                break;
        }
        op_next(op);
}

static int op_get_buf(struct fetch_op *op, const char *key, size_t len) {
        free(op->buf);
        op->buf = malloc(len ? len : 1);
        op->buf_len = len;
        if (!op->buf)
                return -ENOMEM;
        return s3_get_object(op->f->s3, &op->req, key, op->buf, len);
}

/* Which ranks: from the request and COMMIT. */
static int op_plan(struct fetch_op *op) {
        const struct commit_object *co = &op->co;
        uint32_t n = co->node_count;

        op->nms = calloc(n, sizeof(*op->nms));
        op->need = calloc(n, sizeof(*op->need));
        op->wants = calloc(co->world_size, sizeof(*op->wants));
        if (!op->nms || !op->need || !op->wants)
                return -ENOMEM;
        struct fetch_request *fr = op->fr;
        uint8_t which = fr ? fr->which : CKPT_FETCH_ALL;
        uint32_t index = fr ? fr->index : 0;
        for (uint32_t node = 0; node < n; node++) {
                const struct commit_object_node *cn = &co->nodes[node];
                bool needed = false;
                for (uint32_t i = 0; i < cn->nranks; i++) {
                        uint32_t rank = cn->ranks[i];
                        bool want = which == CKPT_FETCH_ALL ||
                                    (which == CKPT_FETCH_NODE && node == index) ||
                                    (which == CKPT_FETCH_RANK && rank == index);
                        if (!want)
                                continue;
                        needed = true;
                        op->wants[op->nwants++].rank = rank;
                }
                if (needed)
                        op->need[op->nneed++] = node;
        }
        if (op->nwants == 0 && fr && fr->lenient)
                return 0;
        if (op->nwants == 0) {
                if (which == CKPT_FETCH_NODE)
                        snprintf(op->msg, sizeof(op->msg), "step %" PRIu64 " was written by %u "
                                 "nodes; there is no node %u (or it held no rank)", op->step, n,
                                 index);
                else
                        snprintf(op->msg, sizeof(op->msg), "step %" PRIu64 " has world size %u; "
                                 "there is no rank %u", op->step, co->world_size, index);
                return -ENOENT;
        }
        return 0;
}

static void rank_next(struct fetch_op *op);

static void op_next(struct fetch_op *op) {
        struct fetcher *f = op->f;
        char key[OBJECT_KEY_MAX + 1];
        int r = 0;

        if (op->error) {
                op_finish(op);
                return;
        }
        op->req = (struct s3_request){ .done = meta_done };
        switch (op->phase) {
        case PH_LIST_STEPS: {
                object_key_steps_dir(key, sizeof(key), f->prefix, op->job);
                char token[S3_TOKEN_MAX + 1];
                snprintf(token, sizeof(token), "%s", op->olist.next_token);
                op->olist.count = op->olist.prefix_count = 0;
                r = s3_list_objects(f->s3, &op->req, key, "/", token, &op->olist);
                break;
        }
        case PH_HEAD_STEPS:
                /* newest first; a bound skips the newer steps unasked */
                while (op->below && op->cursor < op->nsteps &&
                       op->steps[op->nsteps - 1 - op->cursor] >= op->below)
                        op->cursor++;
                if (op->cursor >= op->nsteps) {
                        if (op->below && op->below != CKPT_STEP_LATEST)
                                op_fail(op, -ENOENT, "job '%s' has no committed step below %"
                                        PRIu64 " in the object store", op->job, op->below);
                        else
                                op_fail(op, -ENOENT, "job '%s' has no committed step in the "
                                        "object store", op->job);
                        return;
                }
                object_key_commit(key, sizeof(key), f->prefix, op->job,
                                  op->steps[op->nsteps - 1 - op->cursor]);
                r = s3_head_object(f->s3, &op->req, key);
                break;
        case PH_COMMIT_HEAD:
                object_key_commit(key, sizeof(key), f->prefix, op->job, op->step);
                r = s3_head_object(f->s3, &op->req, key);
                break;
        case PH_COMMIT_GET:
                if (op->buf_len > FETCH_META_MAX) {
                        op_fail(op, -EFBIG, "the COMMIT object of step %" PRIu64 " is too large",
                                op->step);
                        return;
                }
                object_key_commit(key, sizeof(key), f->prefix, op->job, op->step);
                r = op_get_buf(op, key, op->buf_len);
                break;
        case PH_MANIFESTS:
                if (!op->nms) {
                        r = op_plan(op);
                        if (r < 0) {
                                op_fail(op, r, "%s", r == -ENOMEM ? "out of memory" : op->msg);
                                return;
                        }
                }
                if (op->need_next >= op->nneed) {
                        /* every wanted rank now has its manifest */
                        for (uint32_t i = 0; i < op->nwants; i++) {
                                struct want *w = &op->wants[i];
                                for (uint32_t k = 0; k < op->nneed && !w->m; k++)
                                        w->m = node_manifest_find(op->nms[op->need[k]], w->rank);
                                if (!w->m) {
                                        op_fail(op, -EBADMSG, "rank %u is in COMMIT but in no "
                                                "node manifest", w->rank);
                                        return;
                                }
                        }
                        op->phase = PH_RANKS;
                        op->want_next = 0;
                        rank_next(op);
                        return;
                }
                uint32_t node = op->need[op->need_next];
                if (op->co.nodes[node].manifest_size > FETCH_META_MAX) {
                        op_fail(op, -EFBIG, "node %u's manifest is too large", node);
                        return;
                }
                object_key_node_manifest(key, sizeof(key), f->prefix, op->job, op->step, node);
                r = op_get_buf(op, key, op->co.nodes[node].manifest_size);
                break;
        default:
                return;
        }
        if (r < 0) {
                op_fail(op, r, "cannot start a request to the store: %s", strerror(-r));
                return;
        }
        op->req_busy = true;
}

/* ---- shard bytes --------------------------------------------------------------------------- */

static void chunk_free(struct fchunk *ch) {
        struct fetch_op *op = ch->op;
        if (ch->has_ext)
                pool_release(op->f->pool, &ch->ic.ext);
        free(ch);
        op->chunks_inflight--;
}

/* A chunk ended (well or not): on to the next. */
static void chunk_end(struct fchunk *ch) {
        struct fetch_op *op = ch->op;
        chunk_free(ch);
        if (op->error) {
                op_finish(op);
                return;
        }
        chunks_pump(op);
}

static bool op_ingest_failed(const struct ingest *in) {
        return container_of(in, struct fetch_op, ingest)->error != 0;
}

static void chunk_done(struct ingest_chunk *ic, int error) {
        struct fchunk *ch = container_of(ic, struct fchunk, ic);
        struct fetch_op *op = ch->op;

        if (ic->end == INGEST_REJECTED)
                op_fail(op, -EBADMSG, "shard '%s' of rank %u: block %" PRId64 " from the store "
                        "fails its CRC32C", op->rank_m->shards[ic->shard].name, op->rank_m->rank,
                        ic->bad_block);
        else if (ic->end == INGEST_WRITE && error < 0)
                op_fail(op, error, "writing rank %u to local disk: %s", op->rank_m->rank,
                        strerror(-error));
        else if (ic->end == INGEST_WRITE)
                op->bytes += ic->length;
        chunk_end(ch);
}

/* checked against the manifest's block CRCs (the default check) */
static const struct ingest_ops fetch_ingest_ops = {
        .failed = op_ingest_failed,
        .chunk_done = chunk_done,
};

static void chunk_got(struct s3_request *req, int error) {
        struct fchunk *ch = container_of(req, struct fchunk, req);
        struct fetch_op *op = ch->op;

        ch->req_busy = false;
        if (error < 0 || op->error) {
                char why[400];
                s3_result_describe(&req->result, error, why, sizeof(why));
                if (!op->error)
                        op_fail(op, error, "GET of shard '%s' of rank %u (bytes %" PRIu64 "+%"
                                PRIu64 "): %s", op->rank_m->shards[ch->ic.shard].name,
                                op->rank_m->rank, ch->ic.offset, ch->ic.length, why);
                chunk_end(ch);
                return;
        }
        op->f->bytes += ch->ic.length;
        ingest_chunk_submit(&op->ingest, &ch->ic);
}

static void chunk_window(struct pool_waiter *w, const struct pool_extent *e, int error) {
        struct fchunk *ch = container_of(w, struct fchunk, waiter);
        struct fetch_op *op = ch->op;
        char key[OBJECT_KEY_MAX + 1];

        if (!e) {
                op_fail(op, error, "no pool memory became free for the download");
                chunk_end(ch);
                return;
        }
        ch->ic.ext = *e;
        ch->has_ext = true;
        if (op->error) {
                chunk_end(ch);
                return;
        }
        object_key_shard(key, sizeof(key), op->f->prefix, op->job, op->step, op->rank_m->rank,
                         op->rank_m->shards[ch->ic.shard].name);
        ch->req.done = chunk_got;
        int r = s3_get_object_range(op->f->s3, &ch->req, key, ch->ic.offset,
                                    pool_extent_addr(&ch->ic.ext), ch->ic.length);
        if (r < 0) {
                op_fail(op, r, "cannot start a GET: %s", strerror(-r));
                chunk_end(ch);
                return;
        }
        ch->req_busy = true;
}

static void rank_finished(void *userdata, int error);

/* Start chunks of the current rank up to the concurrency; finish the rank
 * when all are written. */
static void chunks_pump(struct fetch_op *op) {
        struct fetcher *f = op->f;
        const struct manifest *m = op->rank_m;

        while (!op->error && op->chunks_inflight < f->opts.concurrency &&
               op->shard_next < m->nshards) {
                const struct manifest_shard *sh = &m->shards[op->shard_next];
                if (op->offset_next >= sh->size) {
                        op->shard_next++;
                        op->offset_next = 0;
                        continue;
                }
                struct fchunk *ch = calloc(1, sizeof(*ch));
                if (!ch) {
                        op_fail(op, -ENOMEM, "out of memory");
                        return;
                }
                ch->op = op;
                ch->ic.shard = op->shard_next;
                ch->ic.offset = op->offset_next;
                /* never more than a slot holds */
                uint64_t max = MIN((uint64_t)FETCH_CHUNK, pool_slot_size(f->pool));
                ch->ic.length = MIN(max, sh->size - ch->ic.offset);
                op->offset_next += ch->ic.length;
                op->chunks_inflight++;
                struct pool_extent e;
                uint32_t units = pool_units_for(f->pool, ch->ic.length);
                /* the whole range or nothing: it was planned above */
                int r = pool_try_acquire_whole(f->pool, op->uid, units, &e);
                if (r == 1)
                        chunk_window(&ch->waiter, &e, 0);
                else if (r == 0)
                        pool_wait_whole(f->pool, &ch->waiter, op->uid, units,
                                        f->opts.pool_wait_ms, chunk_window);
                else
                        chunk_window(&ch->waiter, NULL, r);
        }
        if (op->error) {
                op_finish(op);
                return;
        }
        if (op->chunks_inflight == 0 && op->shard_next >= m->nshards && !op->rank_finishing) {
                op->rank_finishing = true;
                ingest_finish(&op->ingest, op->rank_m, rank_finished, op);
        }
}

static void rank_finished(void *userdata, int error) {
        struct fetch_op *op = userdata;

        op->rank_finishing = false;
        op_give_files(op); /* finish freed the rank writer either way */
        if (error < 0) {
                op_fail(op, error, "cannot finish rank %u on local disk: %s", op->rank_m->rank,
                        strerror(-error));
                return;
        }
        /* the ingest added the rank's catalog rows */
        op->ranks_fetched++;
        op->shards += op->rank_m->nshards;
        log_info("fetch: job %s step %" PRIu64 " rank %u restored from the object store "
                 "(%u shards)", op->job, op->step, op->rank_m->rank, op->rank_m->nshards);
        manifest_free(op->rank_m);
        op->rank_m = NULL;
        op->want_next++;
        rank_next(op);
}

static int manifest_copy(const struct manifest *src, struct manifest **out) {
        struct manifest *m;
        int r = manifest_new(&m, src->job, src->step, src->rank, src->world_size, src->uid);
        if (r < 0)
                return r;
        for (uint32_t i = 0; i < src->nshards; i++) {
                const struct manifest_shard *sh = &src->shards[i];
                r = manifest_add_unique_shard(m, sh->name, sh->size, sh->crc32c, sh->block_crcs);
                if (r < 0) {
                        manifest_free(m);
                        return r;
                }
        }
        *out = m;
        return 0;
}

static void local_committed(void *userdata, int error);

static void rank_next(struct fetch_op *op) {
        struct fetcher *f = op->f;
        int r = 0;

        if (op->error) {
                op_finish(op);
                return;
        }
        while (op->want_next < op->nwants) {
                const struct want *w = &op->wants[op->want_next];
                uint32_t owner;
                if (op->uid != 0 && w->m->uid != op->uid) {
                        op_fail(op, -EACCES, "job '%s' belongs to another user", op->job);
                        return;
                }
                if (catalog_job_uid(op->catalog, op->job, &owner) == 0 && owner != w->m->uid) {
                        op_fail(op, -EACCES, "job '%s' here belongs to uid %u, in the store to "
                                "uid %u", op->job, owner, w->m->uid);
                        return;
                }
                if (!op->replace &&
                    catalog_rank_exists(op->catalog, op->job, op->step, w->rank) == 1) {
                        op->want_next++;
                        continue;
                }
                r = manifest_copy(w->m, &op->rank_m);
                if (r < 0)
                        break;
                /* every shard file stays open until the rank is on disk */
                uint32_t files = STORE_RANK_DIR_FDS + op->rank_m->nshards;
                if (f->files) {
                        r = fd_budget_take(f->files, op->uid, files);
                        if (r == -EMFILE) {
                                op_fail(op, r, "restoring rank %u of step %" PRIu64 " of '%s' "
                                        "(%u shards) from the object store needs %u open "
                                        "files, but uid %u holds %u of its limit of %u "
                                        "([daemon] open_files_per_uid): finish or abort some "
                                        "of its saves, or raise the limit",
                                        w->rank, op->step, op->job, op->rank_m->nshards, files,
                                        op->uid, fd_budget_held(f->files, op->uid),
                                        f->files->per_uid);
                                return;
                        }
                        if (r < 0)
                                break;
                        op->files = files;
                }
                r = ingest_begin(&op->ingest, op->store, op->catalog, f->workers,
                                 &fetch_ingest_ops, op->job, op->step, w->rank, op->rank_m);
                if (r < 0)
                        break;
                op->shard_next = 0;
                op->offset_next = 0;
                chunks_pump(op);
                return;
        }
        if (op->want_next < op->nwants) {
                op_fail(op, r, "cannot write rank %u to local disk: %s",
                        op->wants[op->want_next].rank, strerror(-r));
                return;
        }
        if (op->into_area) {
                /* a replica area's copy replaced: its step was committed
                 * there before, and stays as it was.  (void): as below */
                (void)catalog_flush(op->catalog);
                op_finish(op);
                return;
        }
        /* every wanted rank is local: commit the step here */
        op->phase = PH_LOCAL_COMMIT;
        if (store_step_committed(f->store, op->job, op->step)) {
                /* the record is down already: only the catalog is behind */
                ingest_mark_committed(f->catalog, op->job, op->step, op->co.world_size,
                                      op->co.committed_at);
                local_committed(op, 0);
                return;
        }
        size_t n = 0;
        commit_record_clear(&op->record);
        op->record.ranks = calloc(op->co.world_size, sizeof(uint32_t));
        if (!op->record.ranks ||
            catalog_ranks(f->catalog, op->job, op->step, op->record.ranks, op->co.world_size,
                          &n) < 0) {
                op_fail(op, -ENOMEM, "cannot list the ranks fetched");
                return;
        }
        snprintf(op->record.job, sizeof(op->record.job), "%s", op->job);
        op->record.step = op->step;
        op->record.world_size = op->co.world_size;
        op->record.nranks = (uint32_t)n;
        op->record.committed_at = op->co.committed_at;
        op->rank_finishing = true; /* keeps op alive until the record is down */
        ingest_commit_step(&op->commit, f->store, f->catalog, &op->record, local_committed, op);
}

static void local_committed(void *userdata, int error) {
        struct fetch_op *op = userdata;
        struct fetcher *f = op->f;

        op->rank_finishing = false;
        if (error < 0) {
                op_fail(op, error, "cannot write the local commit record: %s", strerror(-error));
                return;
        }
        /* committed in the catalog too (the ingest marked it); it came from the
         * store: nothing to flush back */
        /* (void): catalog.c logs a fault; the step then looks unflushed and may be
         * flushed again, which costs uploads, not data */
        (void)catalog_ckpt_remote_set(f->catalog, op->job, op->step, CATALOG_REMOTE_DONE, NULL);
        /* (void): catalog_flush() logs a failed commit and drops the batch; reconcile
         * re-derives the rows from the manifests at the next start */
        (void)catalog_flush(f->catalog);
        op_finish(op);
}

/* ---- requests ------------------------------------------------------------------------------ */

static void op_start(struct loop_timer *t) {
        op_next(container_of(t, struct fetch_op, start));
}

int fetch_start(struct fetcher *f, struct fetch_request *fr) {
        struct list *pos, *tmp;

        if (!fr->done || ckpt_name_validate(fr->job, strlen(fr->job)) < 0 ||
            fr->which < CKPT_FETCH_NODE || fr->which >= CKPT_FETCH_MAX_)
                return -EINVAL;
        list_for_each_safe(pos, tmp, &f->ops) {
                struct fetch_op *o = list_entry(pos, struct fetch_op, link);
                if (!strcmp(o->job, fr->job) && fr->step != CKPT_STEP_LATEST && o->step == fr->step)
                        return -EBUSY;
        }
        struct fetch_op *op = calloc(1, sizeof(*op));
        if (!op)
                return -ENOMEM;
        op->f = f;
        op->fr = fr;
        fr->op = op;
        op->uid = fr->uid;
        op->replace = fr->replace;
        op->into_area = fr->replace && fr->into_store && fr->into_catalog;
        op->store = op->into_area ? fr->into_store : f->store;
        op->catalog = op->into_area ? fr->into_catalog : f->catalog;
        op->below = fr->step == CKPT_STEP_LATEST ? fr->below : 0;
        snprintf(op->job, sizeof(op->job), "%s", fr->job);
        list_init(&op->link);
        list_add_tail(&f->ops, &op->link);
        if (fr->step == CKPT_STEP_LATEST) {
                op->olist.objects = calloc(S3_LIST_MAX, sizeof(*op->olist.objects));
                op->olist.prefixes = calloc(S3_LIST_MAX, sizeof(*op->olist.prefixes));
                op->olist.capacity = S3_LIST_MAX;
                if (!op->olist.objects || !op->olist.prefixes) {
                        fr->op = NULL;
                        op_free(op);
                        return -ENOMEM;
                }
                op->phase = PH_LIST_STEPS;
        } else {
                op->step = fr->step;
                op->phase = PH_COMMIT_HEAD;
        }
        /* done() must not run from inside this call, and op_next() may
         * fail at once: start from the loop. */
        loop_timer_start(f->loop, &op->start, 0, op_start);
        return 0;
}

bool fetch_running(const struct fetcher *f, const char *job, uint64_t step) {
        const struct list *pos;
        for (pos = f->ops.next; pos != &f->ops; pos = pos->next) {
                const struct fetch_op *o = list_entry(pos, struct fetch_op, link);
                if (!strcmp(o->job, job) && o->step == step)
                        return true;
        }
        return false;
}

void fetch_cancel(struct fetcher *f, struct fetch_request *fr) {
        (void)f;
        if (fr->op) {
                fr->op->fr = NULL; /* it finishes populating, quietly */
                fr->op = NULL;
        }
}

uint64_t fetch_bytes(const struct fetcher *f) {
        return f->bytes;
}

void fetch_set_files(struct fetcher *f, struct fd_budget *files) {
        f->files = files;
}

int fetch_new(struct fetcher **out, struct loop *loop, struct s3_client *s3,
              struct catalog *catalog, struct store *store, struct pool *pool,
              struct worker_pool *workers, const struct fetch_options *opts) {
        struct fetcher *f = calloc(1, sizeof(*f));
        if (!f)
                return -ENOMEM;
        f->loop = loop;
        f->s3 = s3;
        f->catalog = catalog;
        f->store = store;
        f->pool = pool;
        f->workers = workers;
        f->opts = *opts;
        if (f->opts.concurrency < 1)
                f->opts.concurrency = 1;
        snprintf(f->prefix, sizeof(f->prefix), "%s", opts->prefix ? opts->prefix : "");
        f->opts.prefix = f->prefix;
        list_init(&f->ops);
        *out = f;
        return 0;
}

struct fetcher *fetch_free(struct fetcher *f) {
        struct list *pos, *tmp;

        if (!f)
                return NULL;
        /* At exit.  Running fetches lose their requester and end as their
         * requests are cancelled (the S3 client is freed after this, the
         * store and the pool after that); the last one frees f. */
        list_for_each_safe(pos, tmp, &f->ops) {
                struct fetch_op *op = list_entry(pos, struct fetch_op, link);
                if (op->fr) {
                        op->fr->op = NULL;
                        op->fr = NULL;
                }
                loop_timer_cancel(&op->start);
                if (!op->error)
                        op->error = -ECANCELED;
        }
        if (list_empty(&f->ops)) {
                free(f);
                return NULL;
        }
        f->freeing = true;
        list_for_each_safe(pos, tmp, &f->ops) {
                struct fetch_op *op = list_entry(pos, struct fetch_op, link);
                if (op->req_busy)
                        s3_request_cancel(f->s3, &op->req); /* may free op, and f */
        }
        return NULL;
}
