/* SPDX-License-Identifier: MIT */
/*
 * store — the local tier: checkpoint bytes on this node's disk.
 *
 * Layout (docs/on-disk.md):
 *     <state>/jobs/<job>/<step:020>/.rank-<r>.tmp/   a rank being written
 *     <state>/jobs/<job>/<step:020>/rank-<r>/        MANIFEST + one file per shard
 *     <state>/jobs/<job>/<step:020>/COMMITTED        the job committed this step
 *     <state>/trash/                                 deleted asynchronously
 *
 * Shard bytes go from pool slots straight to disk: O_DIRECT, registered
 * buffers, split into io_size requests with at most queue_depth in flight
 * across all shards.  The store never copies shard bytes.  An unaligned
 * tail is padded to 4 KiB in the slot (the padding is not part of the
 * shard) and the file truncated to its size before fsync.
 *
 * Blocking metadata work — fsync of shards, MANIFEST write, rename into
 * place, directory fsync, COMMITTED record, removal of old trees — runs on
 * the worker pool so the loop never waits for the disk.
 *
 * Not thread-safe: loop thread only (workers get self-contained items).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "io/loop.h"
#include "io/worker.h"
#include "local/manifest.h"
#include "pool/pool.h"

struct store;

struct store_options {
        uint64_t io_size;
        uint32_t queue_depth;
        bool direct_io;
};

int store_open(struct store **out, const char *state_dir, struct loop *loop,
               struct worker_pool *workers, struct pool *pool,
               const struct store_options *opts);
struct store *store_free(struct store *s);
void store_set_options(struct store *s, const struct store_options *opts);

/* The state directory the store was opened on (borrowed; valid until
 * store_free): <dir>/jobs/... is its layout, for a reader on another
 * thread (the scrub's) that opens files by path. */
const char *store_dir(const struct store *s);

/* Bytes moved since start, for status. */
uint64_t store_bytes_written(const struct store *s);
uint64_t store_bytes_read(const struct store *s);

/* ---- writing a rank ------------------------------------------------------ */

struct rank_writer;

/* Descriptors a rank writer holds from store_rank_begin() until finish or
 * abort, besides one per shard file: the job, step and tmp directories. */
#define STORE_RANK_DIR_FDS 3

/* Create <step>/.rank-<r>.<pid>-<n>.tmp, this attempt's own: attempts at
 * the same rank run side by side, and the last to finish is kept.
 * -ENOSPC, -EIO ... */
int store_rank_begin(struct store *s, const char *job, uint64_t step, uint32_t rank,
                     struct rank_writer **out);
/* Remove the tmp dir and everything in it (asynchronously); frees rw.
 * The caller guarantees no I/O of rw is in flight. */
void store_rank_abort(struct store *s, struct rank_writer *rw);

/* Create the file for a shard of `size` bytes, preallocated; returns an fd
 * owned by rw (closed by finish/abort). */
int store_shard_create(struct store *s, struct rank_writer *rw, const char *name, uint64_t size,
                       int *fd_out);

/* One asynchronous slot-sized transfer between a slot and a file. */
struct store_xfer {
        struct list link;       /* store's queue */
        int fd;
        struct slot *slot;
        uint64_t slot_offset;   /* where in the slot the bytes start (4K aligned) */
        uint64_t file_offset;   /* 4K aligned */
        uint64_t length;        /* bytes to transfer (rounded up to 4K for O_DIRECT writes) */
        uint64_t submitted;     /* bytes handed to the ring */
        uint64_t completed;     /* bytes done */
        uint32_t inflight;
        bool write;
        int error;
        void (*done)(struct store_xfer *x, int error);
};

/* Queue a write of x->length bytes (the caller pads the tail, see
 * store_pad_tail()).  done() runs once all of it is on the device or on the
 * first error. */
void store_write(struct store *s, struct store_xfer *x);
/* Queue a read (x->length may run past EOF: the tail is zero-filled). */
void store_read(struct store *s, struct store_xfer *x);
/* Length to write for `len` shard bytes: rounded up to 4K under O_DIRECT,
 * with the padding in the slot zeroed. */
uint64_t store_pad_tail(struct store *s, void *window, uint64_t len);

/* Finish a rank: fsync shards, write MANIFEST (m is borrowed until done),
 * rename into place, fsync the step directory — on a worker.  cb runs on
 * the loop thread with 0 or -errno; rw is freed either way (on failure the
 * tmp dir is removed). */
void store_rank_finish(struct store *s, struct rank_writer *rw, const struct manifest *m,
                       void (*cb)(void *userdata, int error), void *userdata);

/* ---- steps --------------------------------------------------------------- */

/* Write the COMMITTED record of a step (worker), cb as above.  r is
 * borrowed until cb runs. */
void store_step_commit(struct store *s, const struct commit_record *r,
                       void (*cb)(void *userdata, int error), void *userdata);
/* Move a step's directory to trash and delete it in the background. */
int store_step_delete(struct store *s, const char *job, uint64_t step);
/* The same for a job's whole directory, every step at once (one rename:
 * a crash leaves all of them or none).  No such job: 0. */
int store_job_delete(struct store *s, const char *job);
bool store_step_committed(struct store *s, const char *job, uint64_t step);

/* ---- reading --------------------------------------------------------------- */

/* Open a shard file of a rank on disk for O_DIRECT reads (fd owned by the
 * caller); also returns the rank's manifest (cached; valid until the next
 * store call that removes that rank).  -ENOENT. */
int store_shard_open(struct store *s, const char *job, uint64_t step, uint32_t rank,
                     const char *shard, bool direct, int *fd_out,
                     const struct manifest **m_out, const struct manifest_shard **sh_out);
/* A rank's manifest, read and parsed from disk (the caller owns *out;
 * the read cache is left alone).  -ENOENT, -EBADMSG. */
int store_rank_manifest(struct store *s, const char *job, uint64_t step, uint32_t rank,
                        struct manifest **out);
/* ---- verifying ------------------------------------------------------------ */

/* What store_shard_verify() found wrong with a shard file.  Each caller
 * words it for its own log (a refusal, a VERIFY reply, the audit), so this
 * carries the facts, not a text. */
enum store_shard_bad {
        STORE_SHARD_GOOD = 0,
        STORE_SHARD_SIZE,  /* the file's size is not the manifest's (size: the file's) */
        STORE_SHARD_SHORT, /* the file ended early while read (size: where) */
        STORE_SHARD_CRC,   /* a block failed its CRC32C */
        STORE_SHARD_IO,    /* it could not be examined or read (error says why) */
        STORE_SHARD_MISSING, /* the MANIFEST lists it, there is no such file */
};
struct store_shard_fault {
        enum store_shard_bad bad;
        int64_t block;  /* the bad block; -1: the whole file */
        int error;      /* STORE_SHARD_IO: the -errno */
        uint64_t size;  /* STORE_SHARD_SIZE / _SHORT, see above */
};
/* Read the shard itself, not the page cache (O_DIRECT where the file
 * system has it; tmpfs is read buffered): what a refused replica needs,
 * as the page cache is what sendfile sent from. */
#define STORE_VERIFY_DIRECT (1u << 0)
/* Check the blocks only, not that the file's size is the manifest's (the
 * audit's check of a local copy before a re-upload reads sh->size bytes). */
#define STORE_VERIFY_BLOCKS_ONLY (1u << 1)
/* Check one open shard file (fd, read from offset 0; STORE_VERIFY_DIRECT
 * sets O_DIRECT on it) against its entry sh in m: its size, then every
 * block's CRC32C, stopping at the first bad block (a repair replaces the
 * whole copy anyway).  The one per-shard check every verifier uses:
 * rank_check(), store_rank_verify(), the object-store audit.
 * 0: good.  -EBADMSG: bad (*fault says how).  -ENOMEM.  Other -errno: it
 * could not be read (fault->bad is STORE_SHARD_IO).  Blocking. */
int store_shard_verify(int fd, const struct manifest *m, const struct manifest_shard *sh,
                       unsigned flags, struct store_shard_fault *fault);

/* Verify the copy of (job, step, rank) on disk in full: the MANIFEST
 * parses and names this rank, every shard file exists with the size the
 * manifest gives, every block matches its CRC32C.  Blocking (reads the
 * whole rank): call it on a worker; it touches no state of s but its
 * directory fd, so it is safe there.  0: good; -EIO: bad, detail says
 * what (shard, block, what was wrong); -ENOENT: no such rank directory;
 * flags: STORE_VERIFY_* as for store_shard_verify();
 * -ENOMEM.  *shards and *bytes (either may be NULL): what the MANIFEST
 * lists, 0 when it does not parse.
 * on_shard (may be NULL): called once per shard the MANIFEST lists, in its
 * order, with why "" when the shard is good, else what is wrong with it
 * ("block 2 failed its CRC32C", "the file is missing", ...), block the bad
 * block (-1: the whole file) and error 0 (good), -EBADMSG (bad) or another
 * -errno (it could not be read); with it every
 * shard is checked, without it the check stops at the first bad shard.  A
 * copy whose directory or MANIFEST is bad calls it not at all. */
typedef void (*store_shard_result_fn)(void *userdata, const char *shard, uint64_t size,
                                      const char *why, int64_t block, int error);
int store_rank_verify(const struct store *s, const char *job, uint64_t step, uint32_t rank,
                      unsigned flags, char *detail, size_t detail_size, uint32_t *shards,
                      uint64_t *bytes, store_shard_result_fn on_shard, void *userdata);
/* Open a shard file for buffered reads (the flush streams it to the object
 * store; the page cache's read-ahead suits that better than O_DIRECT). */
int store_shard_open_buffered(struct store *s, const char *job, uint64_t step, uint32_t rank,
                              const char *shard, int *fd_out);
/* Forget cached manifests of (job, step) (after delete/replace). */
void store_manifest_forget(struct store *s, const char *job, uint64_t step);

/* ---- start-up -------------------------------------------------------------- */

/* Walk <state>/jobs: remove .tmp leftovers, move rank dirs whose manifest
 * does not parse to trash (logged), and call found() for every valid rank
 * and step (committed or not).  Runs synchronously, before serving. */
struct store_scan_ops {
        void (*rank)(void *userdata, const struct manifest *m);
        void (*step)(void *userdata, const char *job, uint64_t step,
                     const struct commit_record *committed /* NULL if not */);
};
int store_scan(struct store *s, const struct store_scan_ops *ops, void *userdata);

/* Empty the trash directory (also done at start). */
void store_trash_empty(struct store *s);
