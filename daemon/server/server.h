/* SPDX-License-Identifier: MIT */
/*
 * server — the IPC side of ckptd: the listening socket, one struct conn per
 * client, request dispatch, and the per-save state machine behind it.
 *
 * A connection carries at most one request at a time (libckpt is
 * synchronous per connection); while a request waits — for a slot, a tier,
 * a commit — the connection is not read, which is all the flow control the
 * protocol needs.  Replies may be queued when the socket is full.
 *
 * save.c owns saves (staging -> verified -> on disk -> done), steps (what
 * WAIT and COMMIT look at) and retention; restore.c serves reads.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "catalog/catalog.h"
#include "ckpt-proto.h"
#include "io/acceptor.h"
#include "io/loop.h"
#include "io/worker.h"
#include "local/manifest.h"
#include "local/store.h"
#include "pool/pool.h"
#include "peer/peers.h"
#include "remote/fetch.h"
#include "remote/flush.h"
#include "util/fd_budget.h"
#include "util/list.h"

#define SERVER_SAVES_PER_CONN 64
/* At SIGTERM, how long a client whose unfinished save was dropped has to
 * send its next request and be told -ESHUTDOWN, before the daemon exits
 * and the client would see only a broken connection. */
#define SERVER_DRAIN_GRACE_MS 5000
#define SERVER_READS_PER_CONN 8
/* Windows a restore reads ahead: enough that the disk queue never drains
 * while the client copies and the daemon checksums. */
#define SERVER_PREFETCH_DEPTH 3

struct server_options {
        uint64_t pool_wait_ms;
        uint64_t window_lease_ms;          /* 0: windows are never revoked */
        uint32_t max_slots_per_connection; /* open windows, in slots' worth; 0: no cap */
        uint32_t keep;
        uint32_t socket_mode;
        const char *socket_group; /* NULL: leave as is */
        const char *state_dir;    /* for status */
        uint32_t node_index, node_count;
        const char *remote_target; /* "endpoint bucket/prefix", NULL: no store */
        uint32_t conn_max;         /* client connections at once; 0: no limit */
        uint32_t conn_per_uid;     /* of them held by one uid (root exempt); 0: no limit */
        uint32_t files_per_uid;    /* descriptors held for one uid's saves and reads (root
                                    * exempt); 0: no limit */
};

struct server {
        struct loop *loop;
        struct pool *pool;
        struct store *store;
        struct catalog *catalog;
        struct worker_pool *workers;
        struct server_options opts;
        struct flusher *flusher;  /* NULL: no object store */
        struct fetcher *fetcher;
        struct peers *peers;      /* NULL: no replication */
        char remote_why[CKPT_ERRMSG_MAX + 1];

        int listen_fd;
        bool listen_fd_owned; /* false when systemd passed it */
        char *socket_path;    /* unlinked at exit if we created it */
        struct acceptor acceptor;

        struct list conns;
        struct list zombies;  /* closed conns, freed before the loop sleeps */
        struct loop_hook reap_hook;
        uint32_t nconns;
        uint32_t next_id;
        struct list steps;   /* struct step_state */
        struct list uid_errors; /* struct uid_errors: what STATUS tells a non-root uid */
        struct fd_budget files; /* descriptors held for each uid's saves and reads */
        uint32_t saves_active;
        uint32_t read_ops;       /* restore reads alive (incl. read-ahead) */
        uint64_t bytes_in_flight;
        uint64_t bytes_deferred;  /* staged, checksum not started yet */
        uint32_t shards_in_flight;
        uint64_t start_ms;
        bool draining;
        bool drain_grace_over;          /* SERVER_DRAIN_GRACE_MS since server_drain */
        struct loop_timer drain_timer;
        void (*on_drained)(struct server *srv); /* set by the daemon */
        /* saves_active went from 0 to 1 (true) or back to 0 (false) */
        void (*on_saving)(struct server *srv, bool saving);
        void *userdata;
};

struct read_op;
struct conn;

/* How long a READ window may stay lent: [pool] window_lease, like a save's. */
struct read_lease {
        struct loop_timer timer;
        struct conn *conn;
};

struct conn {
        struct server *srv;
        struct list link;
        int fd;
        struct loop_watch watch;
        uid_t uid;
        gid_t gid;
        pid_t pid;
        uint32_t id;
        bool hello;
        bool closing;

        /* the request being served asynchronously, if any */
        bool busy;
        uint16_t busy_type;
        uint32_t busy_seq;
        struct pool_waiter waiter;  /* CHUNK_GET / READ waiting for a slot */
        struct loop_timer timer;    /* WAIT / COMMIT timeout */
        struct list step_link;      /* on step_state.waiters */
        struct step_state *wait_step;
        uint8_t wait_tier;
        void *pending;              /* what the pending request works on */

        struct list outq;
        bool want_out;
        /* its unfinished saves were dropped at SIGTERM and it has not been
         * answered since: the drain waits (a grace) to tell it -ESHUTDOWN */
        bool owed_shutdown;

        uint32_t *slot_gen_sent;    /* per slot id: generation + 1 already sent */
        uint32_t open_windows;      /* lent by CHUNK_GET, not yet put */
        uint64_t open_units;        /* pool units those windows hold */
        struct list saves;          /* saves this client has not finished */
        struct shard *last_shard;   /* the shard CHUNK_GET/PUT named last */
        uint32_t nsaves;
        struct pool_extent reads[SERVER_READS_PER_CONN]; /* lent by READ (.slot NULL: free) */
        struct read_lease read_leases[SERVER_READS_PER_CONN];
        /* per read lease: slot id + 1 of a READ window taken back and not
         * yet asked about (0: none), for READ_DONE's error */
        uint32_t read_revoked[SERVER_READS_PER_CONN];
        /* the next windows of a restore, read ahead, in order */
        struct read_op *prefetch[SERVER_PREFETCH_DEPTH];
        unsigned nprefetch;
        bool no_shard_guess;  /* a guess of the next shard was wrong once */
        struct conn_fetch *fetch;   /* restoring for this request (object store,
                                     * neighbours, or LATEST_RANK's walk) */
        struct peer_fetch *peer_fetch; /* restoring from the neighbours (ckptctl) */
        bool fetch_retry;     /* serving a request again after its fetch */
        char errmsg[CKPT_ERRMSG_MAX + 1];
};

enum save_state {
        SAVE_STAGING,   /* client sending shards */
        SAVE_FINISHED,  /* client finished; chunks may still be verifying/writing */
        SAVE_WRITING,   /* rank being finished on disk (fsync, MANIFEST, rename) */
        SAVE_DONE,      /* on local disk */
        SAVE_FAILED,
};

struct shard {
        struct list link;
        struct save *save;
        uint32_t id;
        char name[CKPT_NAME_MAX + 1];
        uint64_t size;
        int fd;                 /* owned by the rank writer */
        uint64_t put_offset;    /* bytes handed over */
        uint64_t written;       /* bytes on disk */
        bool granted;           /* a window is lent to the client, not yet put */
        struct pool_extent window;
        struct loop_timer lease;  /* revokes the window when it runs out */
        uint64_t granted_offset, granted_length;
        uint64_t nblocks;
        uint32_t *block_crcs;
};

struct step_state {
        struct list link;
        struct server *srv;
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t world_size;
        struct list saves;    /* struct save, by step_link */
        struct list waiters;  /* struct conn, by step_link */
        bool committing, committed;
        struct commit_record record;
};

struct save {
        struct list conn_link;  /* on conn.saves until finished */
        struct list step_link;
        struct server *srv;
        struct conn *conn;      /* NULL once finished or orphaned */
        struct step_state *step;
        uint32_t id;
        uint32_t uid;
        uint32_t rank;
        enum save_state state;
        int error;
        char errmsg[CKPT_ERRMSG_MAX + 1];
        struct rank_writer *rw;
        struct list shards;
        uint32_t nshards;
        /* open-addressing index of shard names, so SHARD_BEGIN's duplicate
         * check stays O(1) for ranks with thousands of shards */
        struct shard **name_index;
        uint32_t index_cap;
        struct list deferred;     /* chunks handed over, not yet checked (struct chunk) */
        uint32_t chunks_pending;  /* deferred, verifying or writing */
        uint64_t bytes;
        uint32_t files;           /* descriptors taken from srv->files for the rank writer */
        struct manifest *manifest;
};

/* server.c */
int server_new(struct server **out, struct loop *loop, struct pool *pool, struct store *store,
               struct catalog *catalog, struct worker_pool *workers,
               const struct server_options *opts);
/* Listen on path (created, mode/group applied), or on an inherited fd. */
int server_listen_path(struct server *srv, const char *path);
int server_listen_fd(struct server *srv, int fd);
struct server *server_free(struct server *srv);
/* Stop accepting, abort unfinished saves; on_drained runs once nothing
 * acknowledged is still on its way to disk and every client whose save was
 * dropped has been told -ESHUTDOWN (or SERVER_DRAIN_GRACE_MS have passed). */
void server_drain(struct server *srv);
bool server_drained(struct server *srv);
/* While draining: run on_drained if server_drained() now holds. */
void server_check_drained(struct server *srv);
/* A job's save or read failed: log it (error level), count it in the
 * catalog, and keep it as the last error STATUS shows the job's owner
 * (a non-root uid never sees another uid's errors: they name jobs and
 * trainer pids). */
void server_job_error(struct server *srv, const char *job, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

void conn_reply(struct conn *c, struct ckpt_reply *rep, int fd);
void conn_reply_empty(struct conn *c);
/* Reply with an error; fmt describes it for the user (and the log). */
void conn_error(struct conn *c, int error, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Re-enable reading after an asynchronous request was answered. */
void conn_done(struct conn *c);
/* Build a CHUNK_GET/READ slot reply (attaches the memfd when needed). */
void conn_reply_slot(struct conn *c, const struct pool_extent *e, uint64_t offset_in_extent,
                     uint64_t offset, uint64_t length);
/* Take n descriptors from uid's budget before opening them ([daemon]
 * open_files_per_uid): 0, or -EMFILE with msg saying so (naming the key
 * and what uid holds; `what` says what they are for), -ENOMEM. */
int server_take_files(struct server *srv, uint32_t uid, uint32_t n, const char *what, char *msg,
                      size_t msglen);
/* The same for c's uid, the error already sent to c. */
int conn_take_files(struct conn *c, uint32_t n, const char *what);
/* Only check, taking nothing (a request that changes other state before
 * it opens anything asks first): 0, or -EMFILE sent to c. */
int conn_check_files(struct conn *c, uint32_t n, const char *what);
/* Ownership: 0 when uid may write (owner) / read (owner or root) job. */
int conn_check_job(struct conn *c, const char *job, bool write);

/* save.c */
void save_handle_begin(struct conn *c, const struct ckpt_req_save_begin *req);
void save_handle_shard_begin(struct conn *c, const struct ckpt_req_shard_begin *req);
void save_handle_chunk_get(struct conn *c, const struct ckpt_req_chunk_get *req);
void save_handle_chunk_put(struct conn *c, const struct ckpt_req_chunk_put *req);
void save_handle_finish(struct conn *c, const struct ckpt_req_save_id *req);
void save_handle_abort(struct conn *c, const struct ckpt_req_save_id *req);
void save_handle_wait(struct conn *c, const struct ckpt_req_wait *req);
void save_handle_commit(struct conn *c, const struct ckpt_req_job_step *req);
/* The connection is going away: abort its unfinished saves, leave waits. */
void save_conn_closed(struct conn *c);
void save_abort_all(struct server *srv, int error);
/* What holds the pool, for the message of a request of uid that found no
 * memory: the largest holders, their open windows, bytes not yet on disk,
 * uid's share.  Returns the length written (truncated to len - 1). */
int save_describe_pool(struct server *srv, uint32_t uid, char *buf, size_t len);
/* Someone waits for pool memory: start checking and writing every deferred
 * chunk and give back read-ahead memory, so it frees up. */
void save_relieve_memory(struct server *srv);
/* The flusher moved (job, step) in the object store: wake its waiters. */
void save_step_changed(struct server *srv, const char *job, uint64_t step);
/* Rebuild step knowledge at start (committed steps come from the catalog). */
void save_retention_run(struct server *srv, const char *job);
void step_state_free_all(struct server *srv);

/* restore.c */
void restore_handle_latest(struct conn *c, const struct ckpt_req_job_step *req);
/* LATEST_RANK: the newest committed step the rank can be restored from,
 * falling back to older steps (docs/replication.md). */
void restore_handle_latest_rank(struct conn *c, const struct ckpt_req_latest_rank *req);
void restore_handle_shard_list(struct conn *c, const struct ckpt_req_shard_list *req);
void restore_handle_read(struct conn *c, const struct ckpt_req_read *req);
void restore_handle_read_done(struct conn *c, const struct ckpt_req_read_done *req);
void restore_handle_map(struct conn *c, const struct ckpt_req_read *req);
void restore_handle_fetch(struct conn *c, const struct ckpt_req_fetch *req);
void restore_conn_closed(struct conn *c);
/* Give back memory read ahead for restores (when someone waits for it). */
void restore_drop_prefetches(struct server *srv);
void restore_drop_prefetches_of(struct conn *c);
