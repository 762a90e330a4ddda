/* SPDX-License-Identifier: MIT */
/*
 * server — the IPC side of ckptd: the listening socket, the connections,
 * request dispatch, and the state the save and restore paths share.
 *
 * The files of server/ are layered, and their headers say so:
 *   server.h   struct server (this file): what daemon.c creates and drives.
 *   conn.h     one client connection and how to answer it (conn_*).
 *   save.h     saves, steps (what WAIT and COMMIT look at), retention.
 *   restore.h  reads: LATEST, SHARD_LIST, READ, MAP, FETCH.
 * server.c includes all of them and dispatches requests to save.c and
 * restore.c; those two answer through conn.h and reach each other only in
 * one direction (restore.c asks save.c to describe the pool); what both
 * need from the other (relieving memory pressure) goes through
 * server_relieve_memory(), so there is no include circle (see
 * docs/architecture.md and tests/lint/include-graph.py).
 *
 * Who owns which field of struct server: server.c the listening socket,
 * conns, zombies, uid_errors and draining; save.c steps, saves_active,
 * bytes_in_flight, bytes_deferred and shards_in_flight; restore.c
 * read_ops.  The others read them.
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
#include "local/store.h"
#include "memory/memtier.h"
#include "pool/pool.h"
#include "peer/peers.h"
#include "remote/audit.h"
#include "remote/fetch.h"
#include "remote/flush.h"
#include "retention/retention.h"
#include "util/fd_budget.h"
#include "util/list.h"
#include "util/log.h"

/* At SIGTERM, how long a client whose unfinished save was dropped has to
 * send its next request and be told -ESHUTDOWN, before the daemon exits
 * and the client would see only a broken connection. */
#define SERVER_DRAIN_GRACE_MS 5000
/* At most this many clients still in the listen queue at SIGTERM are accepted
 * to be told why (the rest see the socket close). */
#define SERVER_BACKLOG_FAREWELLS 256

struct scrub;

struct server_options {
        uint64_t pool_wait_ms;
        uint64_t window_lease_ms;          /* 0: windows are never revoked */
        uint32_t max_slots_per_connection; /* open windows, in slots' worth; 0: no cap */
        /* the local tier's keep_latest / keep_every (step.c sets the
         * mode for uncommitted steps) */
        struct retention_policy retention;
        uint32_t socket_mode;
        const char *socket_group; /* NULL: leave as is */
        const char *state_dir;    /* for status */
        uint32_t node_index, node_count;
        const char *remote_target; /* "endpoint bucket/prefix", NULL: no store */
        uint32_t conn_max;         /* client connections at once; 0: no limit */
        uint32_t conn_per_uid;     /* of them held by one uid (root exempt); 0: no limit */
        uint32_t files_per_uid;    /* descriptors held for one uid's saves and reads (root
                                    * exempt); 0: no limit */
        bool memory_tier;          /* keep the newest committed step in the pool */
};

struct server {
        struct loop *loop;
        struct pool *pool;
        struct store *store;
        struct catalog *catalog;
        struct worker_pool *workers;
        struct server_options opts;
        struct flusher *flusher;  /* NULL: no object store */
        struct audit *audit;      /* NULL: no object store (set by daemon.c; STATUS reports it) */
        struct fetcher *fetcher;
        struct peers *peers;      /* NULL: no replication */
        struct scrub *scrub;      /* NULL: none (set by daemon.c; STATUS reports it) */
        /* the memory tier ([pool] memory_tier), NULL when off: save.c hands
         * it the windows on disk and tells it of landed and failed ranks,
         * step.c and delete.c of commits and removals, restore.c serves
         * READ and MAP from it */
        struct memtier *memtier;
        /* The cluster-wide commit (node_count > 1, docs/commit.md), set by
         * daemon.c; NULL on a single node.  cluster_report sends a
         * STEP_REPORT to the coordinator (over the control link, or to
         * this node's own coordinator): 0, or -ENOTCONN while it cannot be
         * reached.  cluster_reachable: whether it can now. */
        int (*cluster_report)(struct server *srv, struct peer_msg *m);
        bool (*cluster_reachable)(struct server *srv);
        char remote_why[CKPT_ERRMSG_MAX + 1];
        char repl_why[CKPT_ERRMSG_MAX + 1];   /* why a step is not replicated */

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
        struct list heals;   /* struct heal: corrupt copies being replaced (heal.c) */
        struct list uid_errors; /* struct uid_errors: what STATUS tells a non-root uid */
        struct list cluster_views; /* struct cluster_view being gathered (cluster_view.c) */
        struct list cluster_relays; /* struct cluster_relay waiting (cluster_view.c) */
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
/* The same for an event with journal fields (ctx->job names the job; the
 * record goes out through log_event(), util/log.h). */
void server_job_event(struct server *srv, const struct log_ctx *ctx, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* What STATUS reports, gathered from the modules that own it (the pool,
 * the store, the flusher, the peers, the scrub, the catalog), for STATUS
 * and the metrics (server/exposition.c).  uid -1: every job counts; else
 * the jobs and scrub findings of that uid.  The last error fields are the
 * daemon's (the caller restricts them). */
void server_status_gather(struct server *srv, int64_t uid, struct ckpt_rep_status *st);
/* The errors uid may see (-1: root, the daemon's own), as STATUS shows
 * them: how many since start and the last one ("" if none; valid until
 * the next error). */
void server_errors_seen(struct server *srv, int64_t uid, uint64_t *count, const char **last);
/* Copy a text into a field of cap bytes (NUL included), cut at a UTF-8
 * character boundary. */
void text_copy(char *dst, size_t cap, const char *src);
/* Someone waits for pool memory: have save.c start checking and writing
 * every deferred chunk, and restore.c give back read-ahead memory. */
void server_relieve_memory(struct server *srv);
