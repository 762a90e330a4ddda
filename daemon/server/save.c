/* SPDX-License-Identifier: MIT */
/*
 * save — one rank's save, from the first byte staged to the rank directory
 * renamed into place.  What happens to the step after that (WAIT, COMMIT,
 * the cluster-wide commit, local retention) is step.c's.
 *
 *   SAVE_BEGIN           rank writer created (tmp dir)
 *   SHARD_BEGIN          shard file created and preallocated
 *   CHUNK_GET/CHUNK_PUT  a slot lent to the client, filled, handed back with
 *                        the client's CRC32C ("staged": the daemon owns it)
 *   SAVE_FINISH          answered at once: every window is staged
 *   (checked)            a worker checksums each window per MANIFEST block;
 *                        a mismatch is a torn shard and fails the save (WAIT
 *                        and COMMIT report it); a match is queued to disk
 *
 * Checking waits until the trainer has finished staging (or memory runs
 * short): a checksum pass that re-reads every window while the trainer is
 * still copying the next ones competes with it for cores and memory
 * bandwidth, and the copy is the only part the trainer waits for.
 *   (all written)        fsync, MANIFEST, rename — the rank is "local"
 *                        (then step.c: COMMIT, the COMMITTED record, retention)
 *
 * A save that fails (torn shard, disk error, client gone before finishing,
 * shutdown) keeps its error for WAIT/COMMIT to report, and its tmp dir is
 * removed once no I/O of it is in flight.
 *
 * A window is the client's between CHUNK_GET and CHUNK_PUT, for at most
 * [pool] window_lease: one not handed back by then fails its save (-ETIME)
 * and goes back to the pool.  Every window that is taken back rather than
 * handed back (lease, abort, disconnect, shutdown) is returned with
 * pool_revoke(), so what the client may still write into it never reaches
 * another save.  How much of the pool one uid may hold is the pool's rule;
 * how much one connection may hold in open windows is checked here
 * ([pool] max_slots_per_connection), because only this module knows which
 * windows are whose.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crc32c.h"
#include "retention/retention.h"
#include "server/conn.h"
#include "metrics/metrics.h"
#include "server/save.h"
#include "server/server.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/msgid.h"

/* A window handed back: checked (CRC32C against the client's) and written
 * by the ingest (step/ingest.h). */
struct chunk {
        struct ingest_chunk ic;  /* the window (ic.ext), its shard file, offset, length */
        struct list link;        /* on save.deferred until checked */
        struct save *save;
        struct shard *shard;
        uint32_t claimed, computed;
        bool kept;               /* on disk and handed to the memory tier */
};


/* ---- lookup ---------------------------------------------------------------------- */

static struct save *conn_save(struct conn *c, uint32_t id) {
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &c->saves) {
                struct save *s = list_entry(pos, struct save, conn_link);
                if (s->id == id)
                        return s;
        }
        return NULL;
}

static struct shard *conn_shard(struct conn *c, uint32_t id) {
        struct list *pos, *tmp, *p2, *t2;

        /* A trainer fills one shard window after window: remember it, or
         * every request would walk all shards of all open saves. */
        if (c->last_shard && c->last_shard->id == id)
                return c->last_shard;
        list_for_each_safe(pos, tmp, &c->saves) {
                struct save *s = list_entry(pos, struct save, conn_link);
                list_for_each_safe(p2, t2, &s->shards) {
                        struct shard *sh = list_entry(p2, struct shard, link);
                        if (sh->id == id)
                                return c->last_shard = sh;
                }
        }
        return NULL;
}

/* The save no longer belongs to the connection (finished, aborted, gone). */
void conn_drop_save(struct conn *c, struct save *s) {
        list_unlink(&s->conn_link);
        c->nsaves--;
        if (c->last_shard && c->last_shard->save == s)
                c->last_shard = NULL;
}


/* ---- shard name index ---------------------------------------------------------------- */

static uint32_t name_hash(const char *n) {
        uint32_t h = 2166136261u;
        for (; *n; n++)
                h = (h ^ (uint8_t)*n) * 16777619u;
        return h;
}

static struct shard *save_shard_by_name(const struct save *s, const char *name) {
        if (!s->index_cap)
                return NULL;
        for (uint32_t i = name_hash(name) & (s->index_cap - 1);; i = (i + 1) & (s->index_cap - 1)) {
                struct shard *sh = s->name_index[i];
                if (!sh || !strcmp(sh->name, name))
                        return sh;
        }
}

/* Add sh to the index, growing it to keep the load under one half. */
static int save_index_shard(struct save *s, struct shard *sh) {
        if ((s->nshards + 1) * 2 > s->index_cap) {
                uint32_t cap = s->index_cap ? s->index_cap * 2 : 16;
                struct shard **idx = calloc(cap, sizeof(*idx));
                if (!idx)
                        return -ENOMEM;
                for (uint32_t i = 0; i < s->index_cap; i++) {
                        struct shard *old = s->name_index[i];
                        if (!old)
                                continue;
                        uint32_t j = name_hash(old->name) & (cap - 1);
                        while (idx[j])
                                j = (j + 1) & (cap - 1);
                        idx[j] = old;
                }
                free(s->name_index);
                s->name_index = idx;
                s->index_cap = cap;
        }
        uint32_t j = name_hash(sh->name) & (s->index_cap - 1);
        while (s->name_index[j])
                j = (j + 1) & (s->index_cap - 1);
        s->name_index[j] = sh;
        return 0;
}

/* ---- save lifecycle ------------------------------------------------------------------- */

void save_free(struct save *s) {
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &s->shards) {
                struct shard *sh = list_entry(pos, struct shard, link);
                list_unlink(&sh->link);
                loop_timer_cancel(&sh->lease);
                free(sh->block_crcs);
                free(sh);
        }
        list_unlink(&s->conn_link);
        list_unlink(&s->step_link);
        manifest_free(s->manifest);
        free(s->name_index);
        free(s);
}

static void save_set_inactive(struct save *s) {
        struct server *srv = s->srv;

        /* Each save leaves "active" exactly once: on disk, or failed and
         * cleaned up. */
        srv->saves_active--;
        srv->shards_in_flight -= s->nshards;
        /* the rank writer is gone, and its descriptors with it */
        fd_budget_give(&srv->files, s->uid, s->files);
        s->files = 0;
        if (srv->saves_active == 0 && srv->on_saving)
                srv->on_saving(srv, false);
        server_check_drained(srv);
}

/* A failed save: once nothing of it is in flight, remove its tmp dir. */
static void save_cleanup_failed(struct save *s) {
        if (s->state != SAVE_FAILED || s->chunks_pending > 0 || !ingest_open(&s->ingest))
                return;
        ingest_abort(&s->ingest);
        save_set_inactive(s);
}

static void ckpt_state_update(struct server *srv, struct step_state *st) {
        uint8_t state = CKPT_STATE_LOCAL;
        const struct save *failed = NULL;
        struct list *pos, *tmp;

        if (st->committed)
                return;
        list_for_each_safe(pos, tmp, &st->saves) {
                struct save *s = list_entry(pos, struct save, step_link);
                if (s->state == SAVE_FAILED) {
                        state = CKPT_STATE_FAILED;
                        failed = s;
                        break;
                }
                if (s->state != SAVE_DONE)
                        state = CKPT_STATE_SAVING;
        }
        /* (void): the rank's files and MANIFEST, written first, are the truth; catalog.c logs
         * a fault and reconcile re-adds the row at the next start */
        (void)catalog_ckpt_upsert(srv->catalog, st->job, st->step, st->world_size, state, 0);
        if (failed) {
                /* what `ckptctl show` tells an operator, the log's words */
                char why[sizeof(failed->errmsg) + 32];
                snprintf(why, sizeof(why), "rank %u: %s", failed->rank, failed->errmsg);
                /* the entry's bound: cut (at a character boundary, it ends up in JSON) */
                size_t cut = CKPT_FAIL_REASON_MAX;
                while (cut > 0 && ((unsigned char)why[cut] & 0xc0) == 0x80)
                        cut--;
                if (strlen(why) > cut)
                        why[cut] = '\0';
                /* (void): a reason is for the operator; catalog.c logs a fault, and the log
                 * record of the failure (save_fail) says the same */
                (void)catalog_ckpt_set_fail_reason(srv->catalog, st->job, st->step, why);
        }
}

static void chunk_release(struct chunk *ch);

/* sh's window is no longer the client's (handed back, or taken back). */
static void window_close(struct shard *sh) {
        struct conn *c = sh->save->conn;

        sh->granted = false;
        loop_timer_cancel(&sh->lease);
        if (c) {
                c->open_windows--;
                c->open_units -= sh->window.count;
        }
}

void save_fail(struct save *s, int error, const char *fmt, ...) {
        struct server *srv = s->srv;
        va_list ap;

        if (s->state == SAVE_FAILED || s->state == SAVE_DONE)
                return;
        va_start(ap, fmt);
        vsnprintf(s->errmsg, sizeof(s->errmsg), fmt, ap);
        va_end(ap);
        s->error = error;
        metrics_count(METRIC_SAVES_FAILED, 1);
        bool was_writing = s->state == SAVE_WRITING;
        s->state = SAVE_FAILED;
        /* what the memory tier kept of it is of no use to a restore */
        if (srv->memtier)
                memtier_drop_rank(srv->memtier, MEMTIER_OWN, s->step->job, s->step->step,
                                  s->rank);
        server_job_event(srv, LOG_CTX(.id = LOG_ID_SAVE_FAILED, .job = s->step->job,
                                      LOG_STEP(s->step->step), LOG_RANK(s->rank)),
                         "job %s step %" PRIu64 " rank %u: save failed: %s", s->step->job, s->step->step, s->rank, s->errmsg);

        /* First the client's request for another window of this save: the
         * memory returned below could otherwise be lent to it. */
        struct conn *c = s->conn;
        if (c && c->busy && c->busy_type == CKPT_MSG_CHUNK_GET && c->pending &&
            ((struct shard *)c->pending)->save == s) {
                pool_wait_cancel(srv->pool, &c->waiter);
                conn_error(c, error, "%s", s->errmsg);
        }
        /* Windows lent to the client and never handed back: the client
         * may still write into them, so their memory is not lent again. */
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &s->shards) {
                struct shard *sh = list_entry(pos, struct shard, link);
                if (sh->granted) {
                        window_close(sh);
                        pool_revoke(srv->pool, &sh->window);
                }
        }
        /* Windows staged but never checked: nothing of them is kept. */
        list_for_each_safe(pos, tmp, &s->deferred) {
                struct chunk *ch = list_entry(pos, struct chunk, link);
                list_unlink(&ch->link);
                srv->bytes_deferred -= ch->ic.length;
                chunk_release(ch);
        }
        if (!was_writing)
                save_cleanup_failed(s);
        ckpt_state_update(srv, s->step);
        step_notify(srv, s->step);
}

static void save_on_disk(void *userdata, int error) {
        struct save *s = userdata;
        struct server *srv = s->srv;

        if (error < 0) {
                /* the store already removed the tmp dir */
                save_fail(s, error, "cannot write rank %u to disk: %s", s->rank, strerror(-error));
                save_set_inactive(s);
                return;
        }
        s->state = SAVE_DONE;
        if (srv->memtier)
                memtier_rank_landed(srv->memtier, MEMTIER_OWN, s->manifest);
        /* the ingest added the rank's catalog rows */
        s->manifest = manifest_free(s->manifest);
        ckpt_state_update(srv, s->step);
        log_event(LOG_INFO, LOG_CTX(.id = LOG_ID_RANK_SAVED, .job = s->step->job,
                                    LOG_STEP(s->step->step), LOG_RANK(s->rank)),
                  "job %s step %" PRIu64 " rank %u: on local disk (%" PRIu64 " bytes)", s->step->job, s->step->step, s->rank, s->bytes);
        step_rank_landed(s->step);
        save_set_inactive(s);
        step_notify(srv, s->step);
}

static void save_maybe_finalize(struct save *s) {
        int r;

        if (s->state != SAVE_FINISHED || s->chunks_pending > 0)
                return;
        struct step_state *st = s->step;
        r = manifest_new(&s->manifest, st->job, st->step, s->rank, st->world_size, s->uid);
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &s->shards) {
                struct shard *sh = list_entry(pos, struct shard, link);
                if (r < 0)
                        break;
                uint32_t crc = 0;
                for (uint64_t i = 0; i < sh->nblocks; i++) {
                        uint64_t len = MIN((uint64_t)MANIFEST_BLOCK_SIZE,
                                           sh->size - i * MANIFEST_BLOCK_SIZE);
                        crc = i == 0 ? sh->block_crcs[0] : crc32c_combine(crc, sh->block_crcs[i], len);
                }
                /* names are unique already (the index), skip the O(n) check */
                r = manifest_add_unique_shard(s->manifest, sh->name, sh->size, crc, sh->block_crcs);
        }
        if (r < 0) {
                save_fail(s, r, "cannot build MANIFEST: %s", strerror(-r));
                return;
        }
        s->state = SAVE_WRITING;
        ingest_finish(&s->ingest, s->manifest, save_on_disk, s);
}

/* ---- chunks ----------------------------------------------------------------------- */

static void chunk_release(struct chunk *ch) {
        struct save *s = ch->save;
        struct server *srv = s->srv;

        if (!ch->kept)
                pool_release(srv->pool, &ch->ic.ext);
        srv->bytes_in_flight -= ch->ic.length;
        s->chunks_pending--;
        free(ch);
        if (s->state == SAVE_FAILED)
                save_cleanup_failed(s);
        else
                save_maybe_finalize(s);
}

/* Worker thread: checksum the slot per MANIFEST block.  Touches only the
 * slot memory and this chunk's part of the shard's block array. */
static int chunk_check(struct ingest_chunk *ic) {
        struct chunk *ch = container_of(ic, struct chunk, ic);
        const uint8_t *p = pool_extent_addr(&ic->ext);
        uint32_t *blocks = ch->shard->block_crcs + ic->offset / MANIFEST_BLOCK_SIZE;
        uint32_t total = 0;

        for (uint64_t off = 0, i = 0; off < ic->length; off += MANIFEST_BLOCK_SIZE, i++) {
                uint64_t len = MIN((uint64_t)MANIFEST_BLOCK_SIZE, ic->length - off);
                blocks[i] = crc32c(0, p + off, len);
                total = i == 0 ? blocks[i] : crc32c_combine(total, blocks[i], len);
        }
        ch->computed = total;
        return ch->computed == ch->claimed ? 0 : -EBADMSG;
}

static bool save_ingest_failed(const struct ingest *in) {
        return container_of(in, struct save, ingest)->state == SAVE_FAILED;
}

static void chunk_done(struct ingest_chunk *ic, int error) {
        struct chunk *ch = container_of(ic, struct chunk, ic);
        struct save *s = ch->save;

        if (ic->end == INGEST_REJECTED)
                save_fail(s, -EBADMSG,
                          "torn shard: bytes %" PRIu64 "..%" PRIu64 " of shard '%s' changed after "
                          "they were committed (client CRC32C %08x, daemon %08x); do not modify a "
                          "buffer after committing it",
                          ic->offset, ic->offset + ic->length, ch->shard->name, ch->claimed,
                          ch->computed);
        else if (ic->end == INGEST_WRITE && error < 0)
                save_fail(s, error, "writing shard '%s' at offset %" PRIu64 " failed: %s",
                          ch->shard->name, ic->offset, strerror(-error));
        else if (ic->end == INGEST_WRITE) {
                ch->shard->written += ic->length;
                /* The memory tier keeps the window for a restore from
                 * memory, unless someone waits for pool memory: a waiter
                 * is served by releases (which a kept window is not), and
                 * staging wins. */
                struct step_state *st = s->step;
                ch->kept = s->srv->memtier && s->state != SAVE_FAILED &&
                           pool_waiters(s->srv->pool) == 0 &&
                           memtier_keep(s->srv->memtier, MEMTIER_OWN, st->job, st->step,
                                        s->rank, s->uid, ch->shard->name, ch->shard->size,
                                        ic->offset, ic->length, &ic->ext);
        }
        chunk_release(ch);
}

static const struct ingest_ops save_ingest_ops = {
        .check = chunk_check,
        .failed = save_ingest_failed,
        .chunk_done = chunk_done,
};

/* Hand every deferred chunk of s to the workers for checking. */
static void save_check_deferred(struct save *s) {
        struct server *srv = s->srv;
        struct list *pos, *tmp;

        list_for_each_safe(pos, tmp, &s->deferred) {
                struct chunk *ch = list_entry(pos, struct chunk, link);
                list_unlink(&ch->link);
                srv->bytes_deferred -= ch->ic.length;
                ingest_chunk_submit(&s->ingest, &ch->ic);
        }
}

/* More than three quarters of the pool staged but unchecked, or someone
 * waiting: time to write out. */
static bool save_memory_tight(struct server *srv) {
        uint64_t pool = (uint64_t)pool_slot_count(srv->pool) * pool_slot_size(srv->pool);
        return pool_waiters(srv->pool) > 0 || srv->bytes_deferred > pool / 4 * 3;
}

void save_relieve_memory(struct server *srv) {
        struct list *pos, *tmp, *p2, *t2;

        list_for_each_safe(pos, tmp, &srv->conns) {
                struct conn *c = list_entry(pos, struct conn, link);
                list_for_each_safe(p2, t2, &c->saves) {
                        struct save *s = list_entry(p2, struct save, conn_link);
                        save_check_deferred(s);
                }
        }
}

/* ---- handlers --------------------------------------------------------------------------- */

void save_handle_begin(struct conn *c, const struct ckpt_req_save_begin *req) {
        struct server *srv = c->srv;
        const char *job = req->job.str;
        int r;

        if (srv->draining) {
                conn_error(c, -ESHUTDOWN, "ckptd is shutting down; retry when it is back");
                return;
        }
        if (c->nsaves >= SERVER_SAVES_PER_CONN) {
                conn_error(c, -EMFILE, "too many unfinished saves on one connection (limit %u)",
                           SERVER_SAVES_PER_CONN);
                return;
        }
        r = conn_check_job(c, job, true);
        if (r == -EACCES) {
                conn_error(c, r, "job '%s' belongs to another user", job);
                return;
        }
        /* before anything changes (the job's record, an old save of the
         * rank): a save refused for its files leaves nothing behind */
        if (conn_check_files(c, STORE_RANK_DIR_FDS, "a new save") < 0)
                return;
        if (r < 0 && r != -ENOENT) {
                conn_error(c, r, "catalog error looking up job '%s'", job);
                return;
        }

        struct ckpt_ckpt_entry e;
        r = catalog_ckpt_get(srv->catalog, job, req->step, &e);
        bool step_known = r == 0;
        if (r == 0 && e.state == CKPT_STATE_COMMITTED) {
                conn_error(c, -EEXIST, "step %" PRIu64 " of job '%s' is already committed",
                           req->step, job);
                return;
        }
        if (r == 0 && e.world_size != req->world_size) {
                conn_error(c, -EINVAL,
                           "step %" PRIu64 " of job '%s' has world_size %u, not %u", req->step, job,
                           e.world_size, req->world_size);
                return;
        }

        /* An earlier copy of the rank (saved in this run, or on disk from an
         * earlier one): the new save replaces it, and the reply says so
         * (issue 10: never silently). */
        bool replaced = false;
        struct step_state *st = step_find(srv, job, req->step);
        if (st) {
                if (st->committing || st->committed) {
                        conn_error(c, -EBUSY, "step %" PRIu64 " of job '%s' is being committed",
                                   req->step, job);
                        return;
                }
                if (st->world_size != req->world_size) {
                        conn_error(c, -EINVAL, "step %" PRIu64 " of job '%s' has world_size %u, not %u",
                                   req->step, job, st->world_size, req->world_size);
                        return;
                }
                struct list *pos, *tmp;
                list_for_each_safe(pos, tmp, &st->saves) {
                        struct save *old = list_entry(pos, struct save, step_link);
                        if (old->rank != req->rank)
                                continue;
                        bool idle = old->state == SAVE_DONE ||
                                    (old->state == SAVE_FAILED && old->chunks_pending == 0 &&
                                     !ingest_open(&old->ingest));
                        if (!idle) {
                                conn_error(c, -EBUSY,
                                           "rank %u of step %" PRIu64 " of job '%s' is already being "
                                           "saved",
                                           req->rank, req->step, job);
                                return;
                        }
                        /* saving a rank again replaces the old copy */
                        replaced |= old->state == SAVE_DONE;
                        save_free(old);
                }
        }

        r = catalog_job_add(srv->catalog, job, (uint32_t)c->uid);
        if (r < 0) {
                conn_error(c, r, "catalog error creating job '%s'", job);
                return;
        }
        /* the memory tier's copy of the rank is the old one's */
        if (srv->memtier)
                memtier_drop_rank(srv->memtier, MEMTIER_OWN, job, req->step, req->rank);
        bool ask_verdict = false;
        if (!st) {
                st = step_new(srv, job, req->step, req->world_size);
                if (!st) {
                        conn_error(c, -ENOMEM, "out of memory");
                        return;
                }
                st->uid = (uint32_t)c->uid;
                /* the first save of the step here: is its world_size the
                 * cluster's? (asked once the save exists, below) */
                ask_verdict = step_clustered(srv) && !step_known;
        }
        struct save *s = calloc(1, sizeof(*s));
        if (!s) {
                conn_error(c, -ENOMEM, "out of memory");
                return;
        }
        list_init(&s->shards);
        list_init(&s->deferred);
        s->srv = srv;
        s->conn = c;
        s->step = st;
        s->id = ++srv->next_id;
        s->uid = (uint32_t)c->uid;
        s->rank = req->rank;
        s->state = SAVE_STAGING;
        s->begun_us = metrics_now_us();
        r = conn_take_files(c, STORE_RANK_DIR_FDS, "a new save");
        if (r < 0) {
                free(s);
                step_free_if_idle(st);
                return;
        }
        s->files = STORE_RANK_DIR_FDS;
        r = ingest_begin(&s->ingest, srv->store, srv->catalog, srv->workers, &save_ingest_ops,
                         job, req->step, req->rank, NULL);
        if (r < 0) {
                fd_budget_give(&srv->files, s->uid, s->files);
                free(s);
                step_free_if_idle(st);
                conn_error(c, r, "cannot start saving rank %u of step %" PRIu64 " of '%s': %s",
                           req->rank, req->step, job, strerror(-r));
                return;
        }
        list_add_tail(&st->saves, &s->step_link);
        list_add_tail(&c->saves, &s->conn_link);
        c->nsaves++;
        if (srv->saves_active++ == 0 && srv->on_saving)
                srv->on_saving(srv, true);
        ckpt_state_update(srv, st);

        /* -EIO (logged by the catalog) counts as no copy: the flag is news
         * for the trainer, the save goes on either way */
        replaced |= catalog_rank_exists(srv->catalog, job, req->step, req->rank) == 1;
        if (replaced)
                log_notice("job %s step %" PRIu64 " rank %u saved again (uid %u): the new save "
                           "replaces the copy saved before (the step is not committed)", job,
                           req->step, req->rank, s->uid);
        s->replaced = replaced;

        if (step_begin_parked(c, s, ask_verdict))
                return; /* the coordinator's word on world_size answers it */
        save_begin_reply(c, s);
}

void save_begin_reply(struct conn *c, const struct save *s) {
        struct ckpt_reply rep = { 0 };
        rep.id.id = s->id;
        /* a version-2 SAVE_BEGIN reply has no room for the flag */
        rep.id.replaced = s->replaced && c->busy_version >= CKPT_PROTO_VERSION_REPLACED;
        conn_reply(c, &rep, -1);
}

void save_handle_shard_begin(struct conn *c, const struct ckpt_req_shard_begin *req) {
        struct save *s = conn_save(c, req->save_id);
        int r;

        if (!s) {
                conn_error(c, -ENOENT, "no unfinished save with id %u on this connection",
                           req->save_id);
                return;
        }
        if (s->state == SAVE_FAILED) {
                conn_error(c, s->error, "%s", s->errmsg);
                return;
        }
        if (s->nshards >= MANIFEST_SHARDS_MAX) {
                conn_error(c, -E2BIG, "too many shards in one rank (limit %u)", MANIFEST_SHARDS_MAX);
                return;
        }
        if (!strcmp(req->shard.str, MANIFEST_FILE)) {
                conn_error(c, -EINVAL, "'%s' is reserved for the rank's manifest; name the shard "
                           "differently", MANIFEST_FILE);
                return;
        }
        if (save_shard_by_name(s, req->shard.str)) {
                conn_error(c, -EEXIST, "shard '%s' was already begun in this save", req->shard.str);
                return;
        }
        if (conn_take_files(c, 1, "a new shard") < 0)
                return;
        struct shard *sh = calloc(1, sizeof(*sh));
        if (!sh) {
                fd_budget_give(&c->srv->files, s->uid, 1);
                conn_error(c, -ENOMEM, "out of memory");
                return;
        }
        sh->save = s;
        sh->id = ++c->srv->next_id;
        snprintf(sh->name, sizeof(sh->name), "%s", req->shard.str);
        sh->size = req->size;
        sh->nblocks = (req->size + MANIFEST_BLOCK_SIZE - 1) / MANIFEST_BLOCK_SIZE;
        if (sh->nblocks > 0) {
                sh->block_crcs = calloc(sh->nblocks, sizeof(uint32_t));
                if (!sh->block_crcs) {
                        uint64_t nblocks = sh->nblocks;
                        free(sh);
                        fd_budget_give(&c->srv->files, s->uid, 1);
                        conn_error(c, -ENOMEM, "out of memory for %" PRIu64 " block checksums",
                                   nblocks);
                        return;
                }
        }
        r = ingest_shard_create(&s->ingest, sh->name, sh->size, &sh->fd);
        if (r < 0) {
                fd_budget_give(&c->srv->files, s->uid, 1);
                free(sh->block_crcs);
                free(sh);
                if (r == -ENOSPC)
                        conn_error(c, r, "no space left for shard '%s' (%" PRIu64 " bytes) in the "
                                   "state directory; free space or lower [local] keep",
                                   req->shard.str, req->size);
                else
                        conn_error(c, r, "cannot create shard '%s': %s", req->shard.str,
                                   strerror(-r));
                return;
        }
        /* the file is the rank writer's now, until the rank is on disk */
        s->files++;
        if (save_index_shard(s, sh) < 0) {
                /* the file exists in the tmp dir; the save fails as a whole */
                free(sh->block_crcs);
                free(sh);
                save_fail(s, -ENOMEM, "out of memory indexing shard names");
                conn_error(c, -ENOMEM, "out of memory");
                return;
        }
        list_add_tail(&s->shards, &sh->link);
        s->nshards++;
        s->bytes += sh->size;
        c->srv->shards_in_flight++;

        struct ckpt_reply rep = { 0 };
        rep.id.id = sh->id;
        conn_reply(c, &rep, -1);
}

static void window_lease_expired(struct loop_timer *t) {
        struct shard *sh = container_of(t, struct shard, lease);
        struct save *s = sh->save;
        struct server *srv = s->srv;

        save_fail(s, -ETIME,
                  "the window of shard '%s' at offset %" PRIu64 " (%" PRIu64 " bytes in slot %u) "
                  "was not committed within %" PRIu64 " ms of being lent ([pool] window_lease): "
                  "the save of rank %u failed and its memory went back to the pool; commit "
                  "each window as soon as it is filled",
                  sh->name, sh->granted_offset, sh->granted_length, sh->window.slot->id,
                  srv->opts.window_lease_ms, s->rank);
}

static void chunk_grant(struct conn *c, struct shard *sh, const struct pool_extent *e) {
        sh->granted = true;
        sh->window = *e;
        sh->granted_offset = sh->put_offset;
        sh->granted_length = MIN(pool_extent_bytes(e), sh->size - sh->put_offset);
        c->open_windows++;
        c->open_units += e->count;
        if (c->srv->opts.window_lease_ms)
                loop_timer_start(c->srv->loop, &sh->lease, c->srv->opts.window_lease_ms,
                                 window_lease_expired);
        conn_reply_slot(c, e, 0, sh->granted_offset, sh->granted_length);
}

/* Open windows of uid's connections: how many, and their bytes. */
static void uid_open_windows(struct server *srv, uint32_t uid, uint32_t *windows,
                             uint64_t *bytes) {
        struct list *pos, *tmp;

        *windows = 0;
        *bytes = 0;
        list_for_each_safe(pos, tmp, &srv->conns) {
                struct conn *c = list_entry(pos, struct conn, link);
                if ((uint32_t)c->uid != uid)
                        continue;
                *windows += c->open_windows;
                *bytes += c->open_units * POOL_UNIT;
        }
}

/* Append to buf[0, len) at *at, truncating; *at counts what was wanted. */
static void describe_append(char *buf, size_t len, size_t *at, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void describe_append(char *buf, size_t len, size_t *at, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        int w = vsnprintf(buf + MIN(*at, len), *at < len ? len - *at : 0, fmt, ap);
        va_end(ap);
        *at += w > 0 ? (size_t)w : 0;
}

int save_describe_pool(struct server *srv, uint32_t uid, char *buf, size_t len) {
        struct pool_holder top[3];
        uint32_t n = pool_holders(srv->pool, top, 3), slots = pool_slot_count(srv->pool);
        size_t at = 0;

        if (len)
                buf[0] = 0;
        for (uint32_t i = 0; i < n; i++) {
                uint32_t windows;
                uint64_t bytes;
                if (top[i].slots == 0)
                        continue;
                uid_open_windows(srv, top[i].uid, &windows, &bytes);
                describe_append(buf, len, &at, "%suid %u holds %u of %u slots", at ? "; " : "",
                                top[i].uid, top[i].slots, slots);
                if (windows)
                        describe_append(buf, len, &at, " (%u open window%s not committed, %" PRIu64
                                        " MiB)", windows, windows == 1 ? "" : "s", bytes >> 20);
        }
        if (at == 0)
                describe_append(buf, len, &at, "no uid holds a slot now");
        describe_append(buf, len, &at, "; %" PRIu64 " bytes staged and not yet on disk; uid %u's "
                        "share is %u of %u slots", srv->bytes_in_flight, uid,
                        pool_uid_share(srv->pool, uid), slots);
        if (srv->opts.window_lease_ms)
                describe_append(buf, len, &at, "; a window not committed goes back after [pool] "
                                "window_lease = %" PRIu64 " ms", srv->opts.window_lease_ms);
        describe_append(buf, len, &at, "; for more room raise [pool] size or wait_timeout");
        return (int)MIN(at, len ? len - 1 : 0);
}

static void chunk_slot_ready(struct pool_waiter *w, const struct pool_extent *e, int error) {
        struct conn *c = container_of(w, struct conn, waiter);
        struct shard *sh = c->pending;

        if (!e) {
                if (error == -ETIMEDOUT) {
                        char why[CKPT_ERRMSG_MAX];
                        save_describe_pool(c->srv, (uint32_t)c->uid, why, sizeof(why));
                        conn_error(c, error,
                                   "no shared-memory slot became free within %" PRIu64 " ms: %s",
                                   c->srv->opts.pool_wait_ms, why);
                } else {
                        conn_error(c, error, "cannot get a slot: %s", strerror(-error));
                }
                return;
        }
        chunk_grant(c, sh, e);
}

void save_handle_chunk_get(struct conn *c, const struct ckpt_req_chunk_get *req) {
        struct shard *sh = conn_shard(c, req->shard_id);
        struct pool_extent e;

        if (!sh) {
                conn_error(c, -ENOENT, "no shard with id %u in an unfinished save on this "
                           "connection", req->shard_id);
                return;
        }
        struct save *s = sh->save;
        if (s->state == SAVE_FAILED) {
                conn_error(c, s->error, "%s", s->errmsg);
                return;
        }
        if (sh->granted) {
                if (req->offset == sh->granted_offset) {
                        conn_reply_slot(c, &sh->window, 0, sh->granted_offset, sh->granted_length);
                        return;
                }
                conn_error(c, -EINVAL, "shard '%s': the window at offset %" PRIu64 " is still "
                           "open; commit it first", sh->name, sh->granted_offset);
                return;
        }
        if (req->offset >= sh->size) {
                conn_error(c, -ERANGE, "shard '%s' is %" PRIu64 " bytes; offset %" PRIu64 " is "
                           "beyond it (a shard cannot grow past its declared size)",
                           sh->name, sh->size, req->offset);
                return;
        }
        if (req->offset != sh->put_offset) {
                conn_error(c, -EINVAL, "shard '%s': next window starts at %" PRIu64 ", not %" PRIu64,
                           sh->name, sh->put_offset, req->offset);
                return;
        }
        uint32_t want = pool_units_for(c->srv->pool, sh->size - sh->put_offset);
        uint32_t max_slots = c->srv->opts.max_slots_per_connection;
        if (max_slots) {
                /* Waiting would not help: only this client can hand its
                 * windows back, and it is waiting for this reply.  A
                 * shorter window is just one more round trip. */
                uint64_t units_per_slot = pool_slot_size(c->srv->pool) / POOL_UNIT;
                uint64_t allowed = (uint64_t)max_slots * units_per_slot;
                if (c->open_units >= allowed) {
                        conn_error(c, -EMFILE,
                                   "this connection holds %u open windows (%" PRIu64 " MiB), its "
                                   "limit ([pool] max_slots_per_connection = %u slots of %" PRIu64
                                   " MiB); commit one (CHUNK_PUT) first",
                                   c->open_windows, c->open_units * POOL_UNIT >> 20, max_slots,
                                   pool_slot_size(c->srv->pool) >> 20);
                        return;
                }
                want = (uint32_t)MIN((uint64_t)want, allowed - c->open_units);
        }
        int r = pool_try_acquire(c->srv->pool, (uint32_t)c->uid, want, &e);
        if (r > 0) {
                chunk_grant(c, sh, &e);
                return;
        }
        if (r < 0) {
                conn_error(c, r, "cannot prepare a slot: %s", strerror(-r));
                return;
        }
        /* memory staged but unchecked, or read ahead, is the first to go */
        server_relieve_memory(c->srv);
        r = pool_try_acquire(c->srv->pool, (uint32_t)c->uid, want, &e);
        if (r > 0) {
                chunk_grant(c, sh, &e);
                return;
        }
        c->pending = sh;
        pool_wait(c->srv->pool, &c->waiter, (uint32_t)c->uid, want, c->srv->opts.pool_wait_ms,
                  chunk_slot_ready);
}

void save_handle_chunk_put(struct conn *c, const struct ckpt_req_chunk_put *req) {
        struct shard *sh = conn_shard(c, req->shard_id);

        if (!sh) {
                conn_error(c, -ENOENT, "no shard with id %u in an unfinished save on this "
                           "connection", req->shard_id);
                return;
        }
        struct save *s = sh->save;
        if (s->state == SAVE_FAILED) {
                conn_error(c, s->error, "%s", s->errmsg);
                return;
        }
        if (!sh->granted || sh->window.slot->id != req->slot_id ||
            sh->granted_offset != req->offset) {
                conn_error(c, -EINVAL, "shard '%s': no open window in slot %u at offset %" PRIu64,
                           sh->name, req->slot_id, req->offset);
                return;
        }
        if (req->length != sh->granted_length) {
                conn_error(c, -EINVAL, "shard '%s': window at offset %" PRIu64 " holds %" PRIu64
                           " bytes, not %" PRIu64 " (shard declared as %" PRIu64 " bytes)",
                           sh->name, req->offset, sh->granted_length, req->length, sh->size);
                return;
        }
        struct chunk *ch = calloc(1, sizeof(*ch));
        if (!ch) {
                conn_error(c, -ENOMEM, "out of memory");
                return;
        }
        ch->save = s;
        ch->shard = sh;
        ch->ic.ext = sh->window;
        ch->ic.fd = sh->fd;
        ch->ic.offset = req->offset;
        ch->ic.length = req->length;
        ch->claimed = req->crc32c;
        window_close(sh);
        sh->put_offset += req->length;
        s->chunks_pending++;
        c->srv->bytes_in_flight += req->length;
        list_add_tail(&s->deferred, &ch->link);
        c->srv->bytes_deferred += req->length;
        /* Check now rather than after the finish when memory runs short:
         * the pool must not fill with windows nobody is writing out. */
        if (save_memory_tight(c->srv))
                server_relieve_memory(c->srv);
        conn_reply_empty(c);
}

void save_handle_finish(struct conn *c, const struct ckpt_req_save_id *req) {
        struct save *s = conn_save(c, req->save_id);

        if (!s) {
                conn_error(c, -ENOENT, "no unfinished save with id %u on this connection",
                           req->save_id);
                return;
        }
        if (s->state == SAVE_FAILED) {
                conn_drop_save(c, s);
                s->conn = NULL;
                conn_error(c, s->error, "%s", s->errmsg);
                return;
        }
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &s->shards) {
                struct shard *sh = list_entry(pos, struct shard, link);
                if (sh->put_offset != sh->size) {
                        conn_error(c, -EPROTO, "shard '%s' has %" PRIu64 " of %" PRIu64 " bytes "
                                   "committed; commit every window before finishing the save",
                                   sh->name, sh->put_offset, sh->size);
                        return;
                }
        }
        conn_drop_save(c, s);
        s->state = SAVE_FINISHED;
        s->conn = NULL;
        metrics_count(METRIC_SAVES_FINISHED, 1);
        metrics_count(METRIC_SAVED_BYTES, s->bytes);
        metrics_observe_us(METRIC_SAVE_STAGING_SECONDS, metrics_now_us() - s->begun_us);
        conn_reply_empty(c);
        save_check_deferred(s);
        save_maybe_finalize(s);
}

void save_handle_abort(struct conn *c, const struct ckpt_req_save_id *req) {
        struct save *s = conn_save(c, req->save_id);

        if (!s) {
                conn_error(c, -ENOENT, "no unfinished save with id %u on this connection",
                           req->save_id);
                return;
        }
        conn_drop_save(c, s);
        save_fail(s, -ECANCELED, "save of rank %u aborted by the trainer", s->rank);
        s->conn = NULL;
        conn_reply_empty(c);
}

void save_conn_closed(struct conn *c) {
        struct list *pos, *tmp;

        list_for_each_safe(pos, tmp, &c->saves) {
                struct save *s = list_entry(pos, struct save, conn_link);
                conn_drop_save(c, s);
                s->conn = NULL;
                save_fail(s, -ECONNRESET,
                          "trainer (pid %d) disconnected before finishing its save of rank %u",
                          (int)c->pid, s->rank);
        }
        if (list_linked(&c->step_link)) {
                struct step_state *st = c->wait_step;
                list_unlink(&c->step_link);
                c->wait_step = NULL;
                if (st)
                        step_free_if_idle(st);
        }
}

void save_abort_all(struct server *srv, int error) {
        struct list *pos, *tmp, *p2, *t2;
        list_for_each_safe(pos, tmp, &srv->conns) {
                struct conn *c = list_entry(pos, struct conn, link);
                /* set first: an answer to a request waiting on the save
                 * (below) is the client's news already */
                if (!list_empty(&c->saves))
                        c->owed_shutdown = true;
                list_for_each_safe(p2, t2, &c->saves) {
                        struct save *s = list_entry(p2, struct save, conn_link);
                        /* the farewell names the first (a client rarely has more) */
                        if (!c->farewell[0])
                                snprintf(c->farewell, sizeof(c->farewell),
                                         "the unfinished save of job %s step %" PRIu64
                                         " rank %u was dropped (never acknowledged)",
                                         s->step->job, s->step->step, s->rank);
                        save_fail(s, error, "ckptd is stopping: unfinished save of rank %u "
                                  "dropped (never acknowledged; save it again once ckptd "
                                  "is back)", s->rank);
                }
        }
}

