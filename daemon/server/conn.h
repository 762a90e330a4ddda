/* SPDX-License-Identifier: MIT */
/*
 * conn — one client connection of the IPC socket, and the calls that
 * answer its request.
 *
 * A connection carries at most one request at a time (libckpt is
 * synchronous per connection); while a request waits — for a slot, a tier,
 * a commit — the connection is not read, which is all the flow control the
 * protocol needs.  Replies may be queued when the socket is full.
 *
 * server.c owns the connection (accept, read, close) and implements the
 * calls below; save.c and restore.c fill in the fields that name their
 * own work (saves, wait_step, fetch, reads) and answer through them.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt-proto.h"
#include "io/loop.h"
#include "pool/pool.h"
#include "util/list.h"

#define SERVER_SAVES_PER_CONN 64
#define SERVER_READS_PER_CONN 8
/* Windows a restore reads ahead at most: enough that the disk queue never
 * drains while the client copies and the daemon checksums.  The read-ahead
 * grows to depth x slot only for a reader that reads on (struct read_ahead). */
#define SERVER_PREFETCH_DEPTH 3

struct server;
struct step_state;
struct shard;
struct memtier_shard;
struct conn_fetch;
struct peer_fetch;
struct read_op;
struct verify_op;
struct cluster_view;
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
        uint64_t read_asked_us; /* the READ being served came in (restore-read histogram) */
        /* the metrics document METRICS pages through (offset 0 renders it
         * anew); owned, freed with the connection */
        char *metrics_doc;
        size_t metrics_len;

        /* the request being served asynchronously, if any */
        bool busy;
        uint16_t busy_type;
        uint32_t busy_seq;
        uint16_t busy_version;      /* the request's protocol version: the reply's */
        struct pool_waiter waiter;  /* CHUNK_GET / READ waiting for a slot */
        struct loop_timer timer;    /* WAIT / COMMIT timeout */
        struct list step_link;      /* on step_state.waiters */
        struct step_state *wait_step;
        uint8_t wait_tier;
        uint32_t wait_ms;           /* the WAIT / COMMIT timeout asked for */
        void *pending;              /* what the pending request works on */

        struct list outq;
        bool want_out;
        /* its unfinished saves were dropped at SIGTERM and it has not been
         * answered since: the drain waits (a grace) to tell it -ESHUTDOWN */
        bool owed_shutdown;
        /* what the farewell at the end of a drain adds to "ckptd is
         * stopping: " for this client (its dropped save); "" for the rest */
        char farewell[CKPT_NAME_MAX + 96];

        uint32_t *slot_gen_sent;    /* per slot id: generation + 1 already sent */
        uint32_t open_windows;      /* lent by CHUNK_GET, not yet put */
        uint64_t open_units;        /* pool units those windows hold */
        struct list saves;          /* saves this client has not finished */
        struct shard *last_shard;   /* the shard CHUNK_GET/PUT named last */
        uint32_t nsaves;
        struct pool_extent reads[SERVER_READS_PER_CONN]; /* lent by READ (.slot NULL: free) */
        struct read_lease read_leases[SERVER_READS_PER_CONN];
        /* per read lease: the memory tier's shard a READ pointed the client
         * at (the extent is the tier's, pinned until READ_DONE; no lease
         * timer: the tier revokes it if it must give it back), or NULL */
        struct memtier_shard *read_resident[SERVER_READS_PER_CONN];
        /* the memory tier's blocks checked ahead of this reader, while it
         * copies the piece before them (restore.c read_from_memory):
         * bytes [start, end) of shard (pinned), or shard NULL */
        struct memory_ahead {
                struct memtier_shard *shard;
                uint64_t start, end;
        } mem_ahead;
        /* per read lease: slot id + 1 of a READ window taken back and not
         * yet asked about (0: none), for READ_DONE's error */
        uint32_t read_revoked[SERVER_READS_PER_CONN];
        /* the next windows of a restore, read ahead, in order */
        struct read_op *prefetch[SERVER_PREFETCH_DEPTH];
        unsigned nprefetch;
        /* How this connection reads its current shard (restore.c
         * read_ahead_note): a READ starting where the previous one of the
         * same shard ended, or at the start of the shard that follows a
         * shard read whole, doubles the window; any other starts it over. */
        struct read_ahead {
                char job[CKPT_NAME_MAX + 1];
                char shard[CKPT_NAME_MAX + 1];
                uint64_t step;
                uint32_t rank;
                uint64_t next;      /* where the previous READ of it ended */
                uint64_t window;    /* bytes to read ahead past a READ; 0: none */
                uint64_t piece;     /* whole blocks of the last READ: one read-ahead */
                bool from_start;    /* the shard was read on from offset 0 */
                bool at_end;        /* ... and the previous READ ended at its end */
                /* a READ went on from one shard's end to the start of the
                 * next (by name, SHARD_LIST's order): the read-ahead may go
                 * on into the shard after the one being read */
                bool across;
                char following[CKPT_NAME_MAX + 1]; /* at_end: the next shard ("": none) */
        } ra;
        struct conn_fetch *fetch;   /* restoring for this request (object store,
                                     * neighbours, or LATEST_RANK's walk) */
        struct peer_fetch *peer_fetch; /* restoring from the neighbours (ckptctl) */
        bool fetch_retry;     /* serving a request again after its fetch */
        struct verify_op *verify;   /* VERIFY being served (verify.c) */
        struct cluster_view *cluster; /* CLUSTER's view, gathering or read (cluster_view.c) */
        char errmsg[CKPT_ERRMSG_MAX + 1];
};

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
