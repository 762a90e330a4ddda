/* SPDX-License-Identifier: MIT */
/*
 * ingest — the one way a rank lands in a tier directory (a struct store
 * and its struct catalog: the local tier, or a replica area), whoever
 * brings its bytes: a trainer's save (server/save), a neighbour's
 * transfer (peer/transfer), an object-store fetch (remote/fetch).
 *
 *   ingest_begin         the rank's .tmp directory (and, when the manifest
 *                        is known up front, every shard file)
 *   ingest_chunk_submit  per chunk of pool memory: checked on a worker,
 *                        then written with O_DIRECT at its offset
 *   ingest_finish        fsync, MANIFEST, rename (store_rank_finish), then
 *                        the rank's catalog rows
 *   ingest_commit_step   the step's COMMITTED record, then its catalog
 *                        state
 *
 * Why one module: the order is what makes a rank safe to read — no byte
 * reaches the disk unchecked, no catalog row describes files that are not
 * durable, no catalog state says committed before the record is down —
 * and written three times it was fixed three times (issue 10).  The
 * callers keep what differs: where the bytes come from, the pool memory
 * they travel in, how a failure is told (their own messages), and what
 * follows (acks, replication, waiters).
 *
 * The catalog is an index, not the truth: its rows follow the files, and
 * a row that fails to be written after them is logged by catalog.c and
 * re-derived by reconcile at the next start — not a failure of the rank.
 *
 * Ownership: struct ingest, struct ingest_chunk and struct ingest_commit
 * are embedded in the caller's own objects (a save, an rx, a fetch op, a
 * step) and stay the caller's memory; between ingest_begin and
 * ingest_finish/ingest_abort the ingest owns the rank writer and its shard
 * descriptors.  A chunk's pool extent stays the caller's: lent to the
 * ingest from ingest_chunk_submit until ops->chunk_done, returned to the
 * pool by the caller.  Manifests and commit records are borrowed until
 * the callback that ends the call runs.
 *
 * Loop thread only, except ops->check, which runs on a worker.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "io/worker.h"
#include "local/manifest.h"
#include "local/store.h"
#include "pool/pool.h"

struct ingest;
struct ingest_chunk;

/* How a chunk ended, for ops->chunk_done. */
enum ingest_chunk_end {
        /* ops->failed said the rank had failed already: not written */
        INGEST_SKIPPED,
        /* the check refused the bytes (error is its result): not written */
        INGEST_REJECTED,
        /* written, or the write failed (error is the store's: 0 or -errno) */
        INGEST_WRITE,
};

/* What differs between the callers; one static table each. */
struct ingest_ops {
        /* Worker thread: check ch's bytes, touching only what ch (and the
         * object it is embedded in) owns.  0, or -errno to refuse them.
         * NULL: against the block CRC32Cs of the manifest given to
         * ingest_begin, ch->bad_block set to the first block that fails
         * (-EBADMSG) or -1. */
        int (*check)(struct ingest_chunk *ch);
        /* Loop thread, after the check: true when the rank has failed
         * already (a checked chunk of it is then not written).  NULL:
         * never. */
        bool (*failed)(const struct ingest *in);
        /* Loop thread: ch ended (ch->end says how); its extent is the
         * caller's again.  Required. */
        void (*chunk_done)(struct ingest_chunk *ch, int error);
};

struct ingest {
        struct store *store;
        struct catalog *catalog;
        struct worker_pool *workers;
        const struct ingest_ops *ops;
        /* the ingest's, from ingest_begin until finish or abort */
        struct rank_writer *rw;
        const struct manifest *m;  /* known up front (borrowed), or NULL */
        int *fds;                  /* one per shard of m, owned by rw */
        /* the finish in progress */
        const struct manifest *finishing;
        void (*finished)(void *userdata, int error);
        void *finished_userdata;
};

/* A chunk of a rank: length bytes of shard `shard` at `offset` (a
 * multiple of MANIFEST_BLOCK_SIZE), held at the start of ext. */
struct ingest_chunk {
        struct work work;          /* the check */
        struct store_xfer xfer;    /* the write */
        struct ingest *ingest;
        struct pool_extent ext;
        uint32_t shard;            /* index in the manifest given to ingest_begin */
        int fd;                    /* the shard's file; filled from the shard index when
                                    * the manifest was given to ingest_begin */
        uint64_t offset, length;
        int64_t bad_block;         /* the default check's finding */
        int check_error;
        enum ingest_chunk_end end;
};

/* Start a rank of job/step/rank in store (catalog: the index of the same
 * tier directory): its .tmp directory, this attempt's own (store.h).
 * With m (borrowed until finish or abort) every shard file of it is
 * created too, preallocated; without, the caller adds them one by one
 * (ingest_shard_create).  in is overwritten, so it must not be open: an
 * ingest is begun again only after it finished or was aborted (a fetch
 * lands its ranks one after another through one).  0, or -errno with
 * nothing left behind (-ENOSPC, -EIO, -ENOMEM ...); not logged: the
 * caller says which rank and where. */
int ingest_begin(struct ingest *in, struct store *store, struct catalog *catalog,
                 struct worker_pool *workers, const struct ingest_ops *ops, const char *job,
                 uint64_t step, uint32_t rank, const struct manifest *m);
/* The file of a shard of `size` bytes, for a rank begun without a
 * manifest; *fd_out is owned by the ingest (closed at finish or abort). */
int ingest_shard_create(struct ingest *in, const char *name, uint64_t size, int *fd_out);
/* True from ingest_begin until ingest_finish starts or ingest_abort. */
static inline bool ingest_open(const struct ingest *in) {
        return in->rw != NULL;
}
/* Drop the rank: the .tmp directory goes (asynchronously).  The caller
 * guarantees no chunk of it is in flight.  Does nothing when the ingest
 * is not open (never begun, finishing or finished). */
void ingest_abort(struct ingest *in);

/* Check ch (ops->check, on a worker), then, unless refused or the rank
 * failed meanwhile, write it; ops->chunk_done runs once either way, never
 * from inside this call.  The caller has set ext, shard (or fd), offset
 * and length. */
void ingest_chunk_submit(struct ingest *in, struct ingest_chunk *ch);

/* Every chunk is written: fsync the shards, write m as the MANIFEST,
 * rename the rank into place, fsync the step (store_rank_finish, on a
 * worker), then add the job and rank rows to the catalog.  cb runs on the
 * loop thread with 0 or -errno (the store's; the .tmp directory is gone
 * then).  The ingest is closed from this call on either way. */
void ingest_finish(struct ingest *in, const struct manifest *m,
                   void (*cb)(void *userdata, int error), void *userdata);

/* A step's COMMITTED record in progress. */
struct ingest_commit {
        struct catalog *catalog;
        const struct commit_record *record;
        void (*cb)(void *userdata, int error);
        void *userdata;
};

/* Write r as the COMMITTED record of its step in store (on a worker),
 * then mark the step committed in catalog at r->committed_at; cb runs on
 * the loop thread with 0 or -errno (the store's).  c and r are the
 * caller's, borrowed until cb runs. */
void ingest_commit_step(struct ingest_commit *c, struct store *store, struct catalog *catalog,
                        const struct commit_record *r, void (*cb)(void *userdata, int error),
                        void *userdata);
/* The catalog half alone, for a step whose record is on disk already. */
void ingest_mark_committed(struct catalog *catalog, const char *job, uint64_t step,
                           uint32_t world_size, int64_t committed_at);
