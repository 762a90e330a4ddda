/* SPDX-License-Identifier: MIT */
/*
 * libckpt — hand checkpoint shards to the node's ckptd and read them back.
 *
 * A save, from one trainer rank:
 *
 *     struct ckpt_conn *c;
 *     struct ckpt_save *s;
 *     ckpt_connect(NULL, &c);                          // CKPT_SOCKET or default
 *     ckpt_save_begin(c, "llama", step, rank, world_size, &s);
 *     ckpt_save_write(s, "model.pt", data, size);      // one copy into shared memory
 *     ...                                              // more shards
 *     ckpt_save_finish(s);     // every shard staged: the daemon owns the bytes
 *     // one rank (or all: idempotent), no barrier needed: it waits for
 *     // every rank of the step, on every node of the job
 *     ckpt_commit(c, "llama", step, timeout_ms);
 *     // or, to exit at once: the daemons commit it when the last rank lands
 *     ckpt_commit_async(c, "llama", step);
 *
 * The only time a trainer waits for is the copy into the daemon's shared
 * memory slots (plus a CRC32C folded into that copy).  Writing to disk,
 * fsync and retention happen in the daemon afterwards; ckpt_wait() waits for
 * a tier when the trainer wants to know.
 *
 * Zero-copy variant: ckpt_shard_begin() / ckpt_shard_buffer() give a pointer
 * into a slot; the trainer produces its bytes there directly and calls
 * ckpt_shard_commit().  A shard larger than one slot arrives as several
 * windows: buffer, fill, commit, repeat until the whole size is committed.
 * Do not touch a window after committing it: the daemon checks the CRC32C
 * the library computed at commit before it writes anything, and a window
 * that changed after commit fails the save (a "torn" shard): ckpt_wait()
 * reports -EBADMSG, ckpt_commit() refuses with -EPROTO, and the step is
 * never committed.
 *
 * Restore: ckpt_latest() finds the newest committed step, passing over one
 * with a rank the daemon holds no good copy of (ckpt_latest_rank()
 * the newest a given rank can be restored from, falling back to an older
 * one when a node and its copies are lost); ckpt_shard_list()
 * names a rank's shards; ckpt_read() copies any byte range into the caller's
 * buffer (verified against the block checksums on the way); ckpt_map() maps
 * a whole shard read-only (verified once when mapped).
 *
 * Errors: every function returns 0 (or a non-negative count) on success and a
 * negative errno on failure; ckpt_strerror() explains one, and
 * ckpt_last_error() gives the daemon's own words about the last failure on a
 * connection.  Common ones:
 *   -ENOENT / -ECONNREFUSED  daemon not running (connect), or no such
 *                            job/step/rank/shard, or (restore) the step
 *                            is not committed
 *   -EINVAL                  invalid name or argument
 *   -EACCES                  the job belongs to another user
 *   -ETIMEDOUT               no shared-memory slot freed up within the
 *                            daemon's pool wait timeout, or a wait timed out,
 *                            or the daemon did not answer within the
 *                            client's deadline (below; the connection is
 *                            then closed)
 *   -ENOTCONN                the connection was closed by an earlier
 *                            deadline or a lost daemon; reconnect
 *   -ETIME                   a zero-copy window was not committed within
 *                            the daemon's window lease ([pool] window_lease,
 *                            20 s): the save failed; start it again
 *   -EMFILE                  too many saves, reads or open windows on one
 *                            connection (the message names the limit)
 *   -EBADMSG                 torn shard: bytes changed after commit (from
 *                            ckpt_wait(); ckpt_commit() says -EPROTO)
 *   -EIO                     stored data failed its checksum
 *   -ENOSPC                  the daemon's disk is full
 *   -EPROTONOSUPPORT         daemon and library speak different protocols
 *   -ECONNRESET / -EPIPE     the daemon went away; reconnect
 *
 * Deadlines: no call waits for a stopped or hung daemon forever.  Every
 * request and its reply (one call may make several: ckpt_save_write() one
 * pair per window) must complete within the connection's timeout —
 * $CKPT_TIMEOUT_MS when ckpt_connect() ran, else 60000 ms, changed with
 * ckpt_set_timeout(); it is long enough for the daemon's own waits with
 * default settings (a free slot: 30 s).  ckpt_connect() itself, connecting
 * and greeting included, has the same deadline.  ckpt_wait() and
 * ckpt_commit() wait for the daemon as long as their timeout_ms says, plus
 * CKPT_REPLY_GRACE_MS for the reply.  Running out returns -ETIMEDOUT and
 * ckpt_last_error() says which call and how long ("ckpt_latest: no reply
 * from ckptd within 60000 ms ...").  The connection is then closed: what
 * the unanswered request did is unknown, and a late reply must never pass
 * for the answer to a later request.  So saves not finished on it fail (as
 * on any disconnect), mapped slots stay mapped until ckpt_disconnect(), and
 * every further call on it returns -ENOTCONN: reconnect.  A timeout of 0
 * (ckpt_set_timeout(conn, 0) or CKPT_TIMEOUT_MS=0) means no client-side
 * deadline at all, as before libckpt 0.3.
 *
 * Thread-safety: a struct ckpt_conn may be shared between threads; calls on
 * it are serialised by an internal lock (one request at a time), so give
 * each thread its own connection when they should run in parallel.  A
 * struct ckpt_save and its shards must be used by one thread at a time.
 * ckpt_strerror() is thread-safe.
 */
#ifndef CKPT_H
#define CKPT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CKPT_BUILDING_LIBRARY)
#define CKPT_EXPORT __attribute__((visibility("default")))
#else
#define CKPT_EXPORT
#endif

#define CKPT_VERSION_MAJOR 0
/* 0.2: ckpt_latest_rank(); 0.3: ckpt_set_timeout(); 0.4: ckpt_save_replaced()
 * (protocol version 3); 0.5: ckpt_save_writev(), ckpt_pin(), ckpt_jobs(),
 * ckpt_steps(), ckpt_commit_async() (protocol version 4) */
#define CKPT_VERSION_MINOR 5

/* What ckpt_wait() and ckpt_commit() allow the daemon beyond their own
 * timeout_ms to deliver its reply (see "Deadlines" above). */
#define CKPT_REPLY_GRACE_MS 250u

struct ckpt_conn;
struct ckpt_save;
struct ckpt_shard;

/* Tiers a step can be waited for, in order of durability. */
enum ckpt_wait_tier {
        CKPT_STAGED = 1,    /* every shard is in daemon-owned memory */
        CKPT_LOCAL = 2,     /* on this node's disk, fsynced */
        CKPT_COMMITTED = 3, /* local and committed by ckpt_commit() */
        CKPT_REMOTE = 4,    /* in the object store: every node flushed its
                             * ranks and the step's COMMIT object exists */
        CKPT_REPLICATED = 5, /* committed, and every neighbour the replication
                              * rule names holds every rank of this node */
};

/*
 * Connect to the daemon.  socket_path NULL means $CKPT_SOCKET, else the
 * per-user socket ($XDG_RUNTIME_DIR/ckptd.sock or
 * ~/.local/state/ckptd/ckptd.sock) if it exists, else the system socket
 * /run/ckptd/ckptd.sock.  On success *out owns the connection.  Connecting
 * and the greeting must finish within $CKPT_TIMEOUT_MS (default 60000,
 * 0: no deadline), which also becomes the connection's timeout; -ETIMEDOUT
 * when they did not, -EINVAL when CKPT_TIMEOUT_MS is not a number.  On
 * failure ckpt_last_error(NULL) says why.
 */
CKPT_EXPORT int ckpt_connect(const char *socket_path, struct ckpt_conn **out);

/*
 * Set how long each later request on conn waits for the daemon's reply
 * when the call has no timeout of its own (every call but ckpt_wait() and
 * ckpt_commit(), whose deadline is their timeout_ms + CKPT_REPLY_GRACE_MS):
 * timeout_ms, or no deadline at all for 0 (which also lifts the deadline of
 * ckpt_wait() and ckpt_commit()).  Raise it when the daemon's own waits are
 * longer than the default allows (a [pool] wait_timeout over 60 s; a
 * restore that first fetches a large rank from the object store).  Waits
 * for a call in progress on conn in another thread.  0, or -EINVAL for a
 * NULL conn.  Since libckpt 0.3.
 */
CKPT_EXPORT int ckpt_set_timeout(struct ckpt_conn *conn, uint32_t timeout_ms);

/* Close the connection and unmap its slots.  Saves not finished on it are
 * aborted by the daemon.  Accepts NULL. */
CKPT_EXPORT void ckpt_disconnect(struct ckpt_conn *conn);

/* The daemon's message about the last error on this connection ("" if
 * none), or libckpt's own (a deadline, a closed connection).  Valid until
 * the next call on conn.  With conn NULL: why this thread's last
 * ckpt_connect() failed, valid until its next ckpt_connect(). */
CKPT_EXPORT const char *ckpt_last_error(struct ckpt_conn *conn);

/* Text for a negative errno returned by this library.  Never NULL. */
CKPT_EXPORT const char *ckpt_strerror(int err);

/* ---- save -------------------------------------------------------------- */

/*
 * Start saving rank `rank` of `world_size` for (job, step).  The job is
 * created on first use and belongs to the calling uid.  Saving a step that
 * is already committed fails with -EEXIST.  Saving a rank of a step that is
 * not committed again replaces the earlier copy of that rank (once the new
 * save is on disk; until then a restore could not read the step anyway, as
 * it is not committed): ckpt_save_replaced() tells whether this happened,
 * and the daemon logs it.
 */
CKPT_EXPORT int ckpt_save_begin(struct ckpt_conn *conn, const char *job, uint64_t step,
                                uint32_t rank, uint32_t world_size, struct ckpt_save **out);

/*
 * Whether the save begun as `save` replaces an earlier copy of its rank:
 * 1 when the daemon held one (saved before in this step, which is not
 * committed, by this daemon run or an earlier one), 0 when this is the
 * rank's first copy.  -EOPNOTSUPP when the daemon speaks only protocol
 * version 2 and cannot say; -EINVAL for NULL.  Ask before
 * ckpt_save_finish() or ckpt_save_abort(), which free save.  Makes no
 * request; thread-safe as far as save is not being freed.  Since libckpt
 * 0.4.
 */
CKPT_EXPORT int ckpt_save_replaced(const struct ckpt_save *save);

/*
 * Save a whole shard by copying `size` bytes from `data` (the only copy on
 * the trainer's time; the CRC32C is folded into it).  Waits for free slots
 * when the pool is busy.  `data` is not used after return.
 */
CKPT_EXPORT int ckpt_save_write(struct ckpt_save *save, const char *shard, const void *data,
                                uint64_t size);

/*
 * Save one shard made of iovcnt buffers back to back (a packed shard of many
 * small tensors, say): like ckpt_save_write() of their concatenation, with
 * each byte copied once (CRC32C folded in) and no concatenated copy made
 * first.  -EINVAL for a NULL base with a length, -EFBIG past the shard size
 * limit.  The buffers are not used after return.  Since libckpt 0.5.
 */
CKPT_EXPORT int ckpt_save_writev(struct ckpt_save *save, const char *shard,
                                 const struct iovec *iov, int iovcnt);

/* Zero-copy: declare a shard of `size` bytes.  *out stays valid until the
 * last window is committed or the save ends. */
CKPT_EXPORT int ckpt_shard_begin(struct ckpt_save *save, const char *shard, uint64_t size,
                                 struct ckpt_shard **out);

/*
 * Get the next window of the shard to fill: *buf points into shared memory,
 * *offset is where in the shard it starts, *len how many bytes it holds
 * (up to the daemon's slot size).  Calling it again before committing
 * returns the same window.  -ERANGE when the shard is already complete.
 */
CKPT_EXPORT int ckpt_shard_buffer(struct ckpt_shard *shard, void **buf, uint64_t *offset,
                                  uint64_t *len);

/* Commit the current window (CRC32C computed now).  Returns 1 when the shard
 * is complete, 0 when more windows remain. */
CKPT_EXPORT int ckpt_shard_commit(struct ckpt_shard *shard);

/*
 * Finish this rank's save: returns 0 as soon as every shard is staged.  From
 * then on the daemon owns the bytes; the trainer may exit.  The daemon
 * checks each window's CRC32C afterwards, before writing it (so the check
 * never competes with the trainer's copy); a torn window shows up in
 * ckpt_wait() and ckpt_commit().  Frees save (also on error).  -EPROTO when
 * a shard was begun but not completely committed.
 */
CKPT_EXPORT int ckpt_save_finish(struct ckpt_save *save);

/* Abandon a save: nothing of it is kept.  Frees save.  Accepts NULL. */
CKPT_EXPORT void ckpt_save_abort(struct ckpt_save *save);

/*
 * Wait until every rank this node holds for (job, step) reaches `tier`, at
 * most timeout_ms (0: just check).  0 when reached, -ETIMEDOUT, -ENOENT (no
 * such step), or the error that made the step fail (for CKPT_REPLICATED:
 * -EIO when a replication target refused a rank for its CRC and it is not
 * sent again; the message names the target, the rank and why).  The reply
 * must arrive
 * within timeout_ms + CKPT_REPLY_GRACE_MS, or the call returns -ETIMEDOUT
 * and closes conn (see "Deadlines").
 */
CKPT_EXPORT int ckpt_wait(struct ckpt_conn *conn, const char *job, uint64_t step,
                          enum ckpt_wait_tier tier, uint32_t timeout_ms);

/*
 * Commit (job, step): any rank on any node may call it, once or every
 * rank, with or without a barrier before it, after its own
 * ckpt_save_finish() (-ENOENT on a node where no save of the step began).  It returns 0 once every rank
 * 0..world_size-1 is on disk and the step is committed — on a job of
 * several nodes, once node 0 has decided it and every node holding ranks
 * of it has recorded it, so ckpt_latest() on any of them names it
 * (docs/commit.md).  Until then it waits, at most timeout_ms: -ETIMEDOUT,
 * and ckpt_last_error() names the ranks (and nodes) still missing, or that
 * node 0 cannot be reached.  -EPROTO at once if a save of a rank of it
 * failed on this node (a torn shard).  Idempotent.  The reply must arrive
 * within timeout_ms + CKPT_REPLY_GRACE_MS, or the call returns -ETIMEDOUT
 * and closes conn (see "Deadlines").
 */
CKPT_EXPORT int ckpt_commit(struct ckpt_conn *conn, const char *job, uint64_t step,
                            uint32_t timeout_ms);

/*
 * Ask the daemon to commit (job, step) as soon as every rank
 * 0..world_size-1 is saved — on a job of several nodes, on some node —
 * whether or not any trainer is still connected then, and return at once.
 * Call it after this rank's ckpt_save_finish(), and the trainer may exit
 * right away: a trainer that crashes after staging loses nothing.  Every
 * rank may call it (idempotent); no barrier is needed.  It returns 0 once
 * the daemon has recorded the request (in its catalog, so a restart of the
 * daemon keeps it too); the commit itself comes later, when the last rank
 * lands: ckpt_wait(..., CKPT_COMMITTED, ...) or ckpt_commit() wait for it
 * (docs/commit.md, "Commit requests that outlive the trainer").  0 too if
 * the step is committed already.  Errors, as ckpt_commit()'s: -ENOENT (no
 * such job, or no save of the step on this node), -EACCES (another
 * user's job), -EPROTO (a save of a rank of it failed on this node, a
 * torn shard say: save it again, then ask again), -EOPNOTSUPP against a
 * daemon that speaks protocol version < 4 (ckpt_last_error() says so; use
 * ckpt_commit()).  The reply must arrive within the connection's timeout
 * (see "Deadlines").  Since libckpt 0.5.
 */
CKPT_EXPORT int ckpt_commit_async(struct ckpt_conn *conn, const char *job, uint64_t step);

/* ---- restore ----------------------------------------------------------- */

/* Newest committed step of job that the job can restore from: a step with
 * a rank the daemon has recorded with no good copy left (a corrupt copy,
 * none good on the neighbours or in the object store) is passed over for
 * an older one.  -ENOENT if none (the message names such damaged steps). */
CKPT_EXPORT int ckpt_latest(struct ckpt_conn *conn, const char *job, uint64_t *step,
                            uint32_t *world_size);

/*
 * The step to restore rank `rank` of job from: the newest committed step
 * below `below` (CKPT_STEP_LATEST: no bound) of which this rank can be
 * restored through the daemon — from this node, a replica it holds for a
 * neighbour, a neighbour, or the object store (the daemon copies the rank
 * into its local tier on the way).  When no copy of the rank is left for
 * the newest committed step, the daemon falls back to an older one, and
 * says so: *newest is the newest committed step below `below` it knows of,
 * and *newest != *step means it fell back (the daemon's log says why).
 *
 * Every rank of the job must restore the same step: call this for each
 * rank (on the rank's own node) and take the minimum of the *step values
 * over all ranks (one all-reduce).  If all ranks got that step, restore it
 * everywhere; otherwise ask again with below = minimum + 1 (which answers
 * the minimum exactly when the rank can be restored from it) and repeat
 * until every rank gets the same step.
 *
 * step, world_size and newest may be NULL.  Returns 0; -ENOENT when no
 * committed step below `below` has a copy of the rank anywhere
 * (ckpt_last_error() names the newest committed step and why it was not
 * restorable); -EINVAL for an invalid job name, rank >= 2^20 or a bound
 * over 2^63 - 1 other than CKPT_STEP_LATEST; -EACCES when the job belongs to
 * another user; -EOPNOTSUPP when the daemon predates this request.
 */
#ifndef CKPT_STEP_LATEST
#define CKPT_STEP_LATEST UINT64_MAX /* the same as the protocol's */
#endif
CKPT_EXPORT int ckpt_latest_rank(struct ckpt_conn *conn, const char *job, uint32_t rank,
                                 uint64_t below, uint64_t *step, uint32_t *world_size,
                                 uint64_t *newest);

struct ckpt_shard_info {
        char name[256];
        uint64_t size;
        uint32_t crc32c;
};

/* The shards of one rank of (job, step), sorted by name.  *list is
 * malloc'd; free it with ckpt_shard_list_free().  Like ckpt_read() and
 * ckpt_map(): -ENOENT when the step is not committed (ckpt_last_error()
 * says "step S of job 'J' is not committed (N of W ranks saved on this
 * node)"), as for a step, rank or shard that does not exist. */
CKPT_EXPORT int ckpt_shard_list(struct ckpt_conn *conn, const char *job, uint64_t step,
                                uint32_t rank, struct ckpt_shard_info **list, size_t *count);
CKPT_EXPORT void ckpt_shard_list_free(struct ckpt_shard_info *list);

/*
 * Read bytes [offset, offset+len) of a shard of a committed step into buf.
 * Returns the number of bytes read (less than len only at the end of the
 * shard), or -errno: -ENOENT also for a step that is not committed yet
 * (see ckpt_shard_list()).  Every block read is checked against its
 * CRC32C: -EIO on a mismatch.
 */
CKPT_EXPORT int64_t ckpt_read(struct ckpt_conn *conn, const char *job, uint64_t step,
                              uint32_t rank, const char *shard, uint64_t offset, void *buf,
                              uint64_t len);

/* Map a whole shard of a committed step read-only (-ENOENT for a step not
 * committed, as for ckpt_read()).  Its CRC32C is checked before returning
 * (-EIO on mismatch).  Release with ckpt_unmap(). */
CKPT_EXPORT int ckpt_map(struct ckpt_conn *conn, const char *job, uint64_t step, uint32_t rank,
                         const char *shard, const void **addr, uint64_t *size);
CKPT_EXPORT void ckpt_unmap(const void *addr, uint64_t size);

/* ---- pins and listings ------------------------------------------------ */

/* Keep (job, step) whatever retention says (pinned != 0), here and in the
 * object store, or stop keeping it (0).  The job's owner or root.  0,
 * -ENOENT (no such job or step), -EACCES.  Since libckpt 0.5. */
CKPT_EXPORT int ckpt_pin(struct ckpt_conn *conn, const char *job, uint64_t step, int pinned);

/* What the daemon knows of a job (`ckptctl list`). */
struct ckpt_job_info {
        char name[256];
        uint32_t uid;             /* owner */
        int64_t latest_committed; /* -1: none */
        uint32_t checkpoints, committed;
        uint64_t bytes_local;     /* on this node's disk */
        uint32_t errors;          /* since the job was created */
};

/* States of a step on this node, as ckpt_steps() reports them. */
enum ckpt_step_state {
        CKPT_STEP_SAVING = 1,    /* some rank still staging or writing */
        CKPT_STEP_LOCAL = 2,     /* every rank here is on disk, not committed */
        CKPT_STEP_COMMITTED = 3,
        CKPT_STEP_FAILED = 4,    /* a rank's save failed or was aborted */
};

/* States of a step's copy in the object store. */
enum ckpt_step_remote {
        CKPT_STEP_REMOTE_NONE = 0,      /* not flushed (or no store configured) */
        CKPT_STEP_REMOTE_FLUSHING = 1,  /* shard objects being uploaded */
        CKPT_STEP_REMOTE_MANIFEST = 2,  /* this node's part is up; the step's COMMIT is not */
        CKPT_STEP_REMOTE_DONE = 3,      /* the step's COMMIT object exists */
        CKPT_STEP_REMOTE_FAILED = 4,    /* stopped on a permanent error */
};

struct ckpt_step_info {
        uint64_t step;
        uint32_t world_size;
        uint32_t ranks_local;  /* ranks of it on this node's disk */
        uint8_t state;         /* enum ckpt_step_state */
        uint8_t remote_state;  /* enum ckpt_step_remote */
        uint8_t pinned;
        uint8_t replicas;      /* replication targets holding every rank of this node */
        uint64_t bytes;
        uint32_t shards;
        int64_t committed_at;  /* unix seconds, 0 if not committed */
};

/* The jobs this daemon knows that the caller may see (its own; root: all),
 * and the steps of one job on this node, newest first.  *list is malloc'd
 * (free with ckpt_jobs_free() / ckpt_steps_free()); *count entries.  A list
 * that changes while it is paged in may repeat or miss an entry.  Since
 * libckpt 0.5. */
CKPT_EXPORT int ckpt_jobs(struct ckpt_conn *conn, struct ckpt_job_info **list, size_t *count);
CKPT_EXPORT void ckpt_jobs_free(struct ckpt_job_info *list);
CKPT_EXPORT int ckpt_steps(struct ckpt_conn *conn, const char *job, struct ckpt_step_info **list,
                           size_t *count);
CKPT_EXPORT void ckpt_steps_free(struct ckpt_step_info *list);

#ifdef __cplusplus
}
#endif
#endif
