/* SPDX-License-Identifier: MIT */
/*
 * save — the per-save state machine (staging -> verified -> on disk ->
 * done).  save.c owns every struct here; step.c (the step a save belongs
 * to) and restore.c only read them, apart from the calls at the end.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "ckpt-proto.h"
#include "peer-proto.h"
#include "io/loop.h"
#include "local/manifest.h"
#include "local/store.h"
#include "pool/pool.h"
#include "server/step.h"
#include "step/ingest.h"
#include "util/list.h"

struct server;
struct conn;

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
        struct ingest ingest;     /* the rank landing on disk (its writer, until finished) */
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
        bool replaced;            /* it replaces an earlier copy of the rank (the reply says so) */
        uint64_t begun_us;        /* SAVE_BEGIN, for the staging-time histogram */
};

void save_handle_begin(struct conn *c, const struct ckpt_req_save_begin *req);
void save_handle_shard_begin(struct conn *c, const struct ckpt_req_shard_begin *req);
void save_handle_chunk_get(struct conn *c, const struct ckpt_req_chunk_get *req);
void save_handle_chunk_put(struct conn *c, const struct ckpt_req_chunk_put *req);
void save_handle_finish(struct conn *c, const struct ckpt_req_save_id *req);
void save_handle_abort(struct conn *c, const struct ckpt_req_save_id *req);
/* The connection is going away: abort its unfinished saves, leave waits. */
void save_conn_closed(struct conn *c);
void save_abort_all(struct server *srv, int error);
/* What holds the pool, for the message of a request of uid that found no
 * memory: the largest holders, their open windows, bytes not yet on disk,
 * uid's share.  Returns the length written (truncated to len - 1). */
int save_describe_pool(struct server *srv, uint32_t uid, char *buf, size_t len);
/* Someone waits for pool memory: start checking and writing every deferred
 * chunk, so it frees up (server_relieve_memory also drops read-ahead). */
void save_relieve_memory(struct server *srv);
/* For step.c, which fails, frees and answers saves of its steps: */
void save_fail(struct save *s, int error, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void save_free(struct save *s);
/* the save no longer belongs to its connection (finished, refused, gone) */
void conn_drop_save(struct conn *c, struct save *s);
/* SAVE_BEGIN's reply: the save id, and whether it replaced a copy */
void save_begin_reply(struct conn *c, const struct save *s);
