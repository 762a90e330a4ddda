/* SPDX-License-Identifier: MIT */
/*
 * ingest — a rank landing in a tier directory (see ingest.h): begin,
 * chunks checked then written, finish then catalog rows, commit record
 * then catalog state.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "step/ingest.h"
#include "util/cleanup.h"

/* ---- a rank -------------------------------------------------------------------------------- */

int ingest_begin(struct ingest *in, struct store *store, struct catalog *catalog,
                 struct worker_pool *workers, const struct ingest_ops *ops, const char *job,
                 uint64_t step, uint32_t rank, const struct manifest *m) {
        *in = (struct ingest){
                .store = store,
                .catalog = catalog,
                .workers = workers,
                .ops = ops,
                .m = m,
        };
        int r = store_rank_begin(store, job, step, rank, &in->rw);
        if (r < 0 || !m)
                return r;
        in->fds = calloc(m->nshards ? m->nshards : 1, sizeof(int));
        if (!in->fds)
                r = -ENOMEM;
        for (uint32_t i = 0; r == 0 && i < m->nshards; i++)
                r = store_shard_create(store, in->rw, m->shards[i].name, m->shards[i].size,
                                       &in->fds[i]);
        if (r < 0)
                ingest_abort(in);
        return r;
}

int ingest_shard_create(struct ingest *in, const char *name, uint64_t size, int *fd_out) {
        return store_shard_create(in->store, in->rw, name, size, fd_out);
}

void ingest_abort(struct ingest *in) {
        if (in->rw) {
                store_rank_abort(in->store, in->rw);
                in->rw = NULL;
        }
        free(in->fds);
        in->fds = NULL;
}

/* ---- chunks: checked, then written ----------------------------------------------------------- */

static void chunk_written(struct store_xfer *x, int error) {
        struct ingest_chunk *ch = container_of(x, struct ingest_chunk, xfer);

        ch->end = INGEST_WRITE;
        ch->ingest->ops->chunk_done(ch, error);
}

/* Worker thread. */
static void chunk_check_run(struct work *w) {
        struct ingest_chunk *ch = container_of(w, struct ingest_chunk, work);
        const struct ingest *in = ch->ingest;

        if (in->ops->check) {
                ch->check_error = in->ops->check(ch);
                return;
        }
        ch->bad_block = manifest_shard_check(&in->m->shards[ch->shard], ch->offset,
                                             pool_extent_addr(&ch->ext), ch->length);
        ch->check_error = ch->bad_block >= 0 ? -EBADMSG : 0;
}

static void chunk_check_done(struct work *w) {
        struct ingest_chunk *ch = container_of(w, struct ingest_chunk, work);
        struct ingest *in = ch->ingest;

        if (in->ops->failed && in->ops->failed(in)) {
                ch->end = INGEST_SKIPPED;
                in->ops->chunk_done(ch, 0);
                return;
        }
        if (ch->check_error < 0) {
                ch->end = INGEST_REJECTED;
                in->ops->chunk_done(ch, ch->check_error);
                return;
        }
        /* straight from the slot: the store pads the tail for O_DIRECT */
        ch->xfer = (struct store_xfer){
                .fd = ch->fd,
                .slot = ch->ext.slot,
                .slot_offset = pool_extent_offset(&ch->ext),
                .file_offset = ch->offset,
                .length = store_pad_tail(in->store, pool_extent_addr(&ch->ext), ch->length),
                .done = chunk_written,
        };
        store_write(in->store, &ch->xfer);
}

void ingest_chunk_submit(struct ingest *in, struct ingest_chunk *ch) {
        ch->ingest = in;
        if (in->fds)
                ch->fd = in->fds[ch->shard];
        ch->bad_block = -1;
        ch->check_error = 0;
        ch->work.run = chunk_check_run;
        ch->work.done = chunk_check_done;
        worker_pool_submit(in->workers, &ch->work);
}

/* ---- finish, then the catalog rows ------------------------------------------------------------ */

static void rank_finished(void *userdata, int error) {
        struct ingest *in = userdata;
        const struct manifest *m = in->finishing;

        in->finishing = NULL;
        /* the descriptors closed with the rank writer */
        free(in->fds);
        in->fds = NULL;
        if (error == 0) {
                /* (void): the rank's files and MANIFEST, written first, are the truth;
                 * catalog.c logs a fault and reconcile re-adds the row at the next start */
                (void)catalog_job_add(in->catalog, m->job, m->uid);
                /* (void): the rank's files and MANIFEST, written first, are the truth;
                 * catalog.c logs a fault and reconcile re-adds the row at the next start */
                (void)catalog_rank_add(in->catalog, m);
        }
        in->finished(in->finished_userdata, error);
}

void ingest_finish(struct ingest *in, const struct manifest *m,
                   void (*cb)(void *userdata, int error), void *userdata) {
        struct rank_writer *rw = in->rw;

        in->rw = NULL; /* store_rank_finish frees it either way */
        in->finishing = m;
        in->finished = cb;
        in->finished_userdata = userdata;
        store_rank_finish(in->store, rw, m, rank_finished, in);
}

/* ---- the step's commit record, then its catalog state ------------------------------------------ */

void ingest_mark_committed(struct catalog *catalog, const char *job, uint64_t step,
                           uint32_t world_size, int64_t committed_at) {
        /* (void): the COMMITTED record, written first, is the truth; catalog.c logs a fault
         * and reconcile re-derives the state from the record at the next start */
        (void)catalog_ckpt_upsert(catalog, job, step, world_size, CKPT_STATE_COMMITTED,
                                  committed_at);
}

static void step_recorded(void *userdata, int error) {
        struct ingest_commit *c = userdata;
        const struct commit_record *r = c->record;

        if (error == 0)
                ingest_mark_committed(c->catalog, r->job, r->step, r->world_size,
                                      r->committed_at);
        c->cb(c->userdata, error);
}

void ingest_commit_step(struct ingest_commit *c, struct store *store, struct catalog *catalog,
                        const struct commit_record *r, void (*cb)(void *userdata, int error),
                        void *userdata) {
        *c = (struct ingest_commit){
                .catalog = catalog,
                .record = r,
                .cb = cb,
                .userdata = userdata,
        };
        store_step_commit(store, r, step_recorded, c);
}
