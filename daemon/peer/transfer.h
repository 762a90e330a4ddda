/* SPDX-License-Identifier: MIT */
/*
 * transfer — one rank over a peer link, either way.
 *
 *   sending (struct tx): RANK_BEGIN with the MANIFEST text, DATA frames
 *            whose payload the link moves file -> socket with sendfile (no
 *            copy through user space), RANK_END.  A frame whose bytes the
 *            memory tier holds (the newest step: memory/memtier.h) is
 *            copied from there into the tx's own buffer, checked against
 *            the manifest's block CRC32Cs and sent from that copy, so the
 *            disk is not read (a copy, because trainers of the job can
 *            write the slot's memory; the bytes sent are the bytes that
 *            passed);
 *   receiving (struct rx): payload straight into pool memory, every 1 MiB
 *            block checked against the manifest's CRC32C on a worker,
 *            O_DIRECT write from the registered slot, then the local
 *            tier's own finish (fsync, MANIFEST, rename), the step's
 *            commit record and the catalog rows — all of it through
 *            step/ingest, the path a trainer's save takes too.  Written
 *            extents are kept by the memory tier, when it wants them, as
 *            a save's are: under the source node for a replica, as this
 *            node's own for a restore.
 *
 * Within a transfer, ordering stays strict, which keeps the receiver's
 * checks tight: shards in manifest order, DATA frames contiguous and
 * starting on a block boundary.  Anything else is a protocol error that
 * closes the link (logged).
 *
 * Sits on peer/link (a tx is a link_out, an rx a link_in); knows which
 * store and catalog a rank goes to only as the layer above tells it
 * (struct transfer_hooks: replication puts it in a replica area, a restore
 * in the local tier), and reports how a rank ended back up the same way.
 *
 * Ownership: struct transfer_env belongs to its creator (peers.c); a tx is
 * this module's (the link holds it until it is released), the fields
 * under "the owner's" belong to whoever started it (replication); an rx
 * is this module's from RANK_BEGIN until it has reported, its report
 * callback its starter's.
 *
 * Loop thread only.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "catalog/catalog.h"
#include "io/worker.h"
#include "local/store.h"
#include "memory/memtier.h"
#include "peer-proto.h"
#include "peer/link.h"
#include "pool/pool.h"
#include "step/ingest.h"
#include "util/list.h"

/* Rank transfers a sender keeps open on a link (replication pushes and
 * restore pulls alike): enough that one rank's fsync, rename and round
 * trip overlap the data of others, few enough that a link's transfers
 * make progress together.  The receiver accepts up to PEER_STREAMS_MAX. */
#define TRANSFER_WINDOW 4

struct rx;

/* Where the layer above decides, and hears, what becomes of received ranks. */
struct transfer_hooks {
        /* RANK_BEGIN of b (asked: a restore transfer this node asked for):
         * set rx->store, rx->catalog, rx->local and rx->memory_src, or
         * close the link.
         * 0, or -1 with the link closed. */
        int (*place)(void *owner, struct plink *l, const struct peer_rank_begin *b, bool asked,
                     struct rx *rx);
        /* rx's step is committed in rx->catalog (the row just written):
         * the catalog state that follows from where it came from */
        void (*committed)(void *owner, const struct rx *rx);
        /* a rank landed in a replica area: its retention may run */
        void (*landed_in_area)(void *owner, struct store *store, struct catalog *catalog,
                               const char *job);
        /* a transfer on l ended (acknowledged): room in its window */
        void (*window)(void *owner, struct plink *l);
};

struct transfer_env {
        struct worker_pool *workers;
        struct pool *pool;
        struct memtier *memory;        /* NULL: the tier is off */
        uint64_t pool_wait_ms;
        const struct transfer_hooks *hooks;
        void *owner;
        /* transfer-owned: struct rx whose step's commit record is due */
        struct list commits;
};

/* ---- a rank being sent ------------------------------------------------------------------ */

/* tx->small holds a RANK_END and its tag, or a DATA's two headers. */
_Static_assert(PEER_HDR_SIZE + PEER_TAG_SIZE <= PEER_HDR_SIZE + PEER_DATA_HDR_SIZE,
               "a RANK_END and its tag fit tx->small");

struct tx {
        struct link_out out;       /* stream, frames, the shard file being sent */
        uint8_t purpose;
        uint32_t src_node;
        struct store *store;
        struct memtier *memory;    /* NULL: from the files only */
        uint32_t memory_src;       /* the rank's key there (MEMTIER_OWN or a node) */
        uint8_t *mem_buf;          /* FRAME_PAYLOAD bytes: a frame copied from memory */
        struct manifest *m;
        uint32_t shard;
        uint64_t offset;
        bool begun;
        uint8_t small[PEER_HDR_SIZE + PEER_DATA_HDR_SIZE];
        /* the owner's: a replicated rank's step and its index there, and
         * what to do when the link closes with the rank unacknowledged */
        void *owner;
        size_t owner_idx;
        void (*lost)(struct tx *tx);
};

/* Where a rank to send lies: its files in store, and its newest step's
 * bytes in memory (NULL: the tier is off) under memory_src. */
struct transfer_source {
        struct store *store;
        struct memtier *memory;
        uint32_t memory_src;
};

/* A tx of (job, step, rank) from `from` on l's stream (not yet queued: the
 * caller sets the owner's fields, then link_out_add()).  NULL with *err
 * set (the rank is gone or unreadable). */
struct tx *transfer_tx_new(struct plink *l, const struct transfer_source *from, const char *job,
                           uint64_t step, uint32_t rank, uint8_t purpose, uint32_t src,
                           uint32_t stream, int *err);
/* The tx on l's stream, or NULL. */
struct tx *transfer_tx_find(struct plink *l, uint32_t stream);

/* ---- a rank being received ---------------------------------------------------------------- */

struct rx {
        struct link_in in;         /* plink.ins while l is set */
        struct transfer_env *te;
        struct plink *l;           /* NULL once acknowledged or the link died */
        uint8_t purpose;
        uint32_t src;              /* whose rank it is */
        uint32_t from;             /* the node that sent it */
        struct store *store;
        struct catalog *catalog;
        bool local;                /* asked for (restore), not pushed (replica) */
        bool replacing;            /* replaces a corrupt copy (heal) */
        bool copy_bad;             /* a block failed its CRC32C: the sender's copy is bad */
        bool kept;                 /* the memory tier kept some of its extents */
        uint32_t memory_src;       /* its key there: MEMTIER_OWN when it lands in the
                                    * local tier, else the area's node (place() sets it) */
        struct manifest *m;
        struct ingest ingest;      /* the rank landing in store (its writer and files) */
        uint32_t shard;            /* next expected */
        uint64_t offset;
        uint32_t inflight;         /* chunks being checked or written */
        bool ended, finishing;
        int error;
        char msg[PEER_ERRMSG_MAX + 1];
        /* restore: whom to tell.  Set when RANK_END arrives: until then
         * the rank is its asker's (asked again if the link breaks), from
         * then on the rx reports how it ended, once: error 0 when the rank
         * landed */
        void (*report)(void *ctx, int error, const char *msg);
        void *report_ctx;
        struct commit_record record;
        struct ingest_commit commit; /* record being written, while committing */
        /* transfer_env.commits, from the rank's finish to its step's
         * commit record: the record of a step is written by one rank at a
         * time */
        struct list clink;
        bool committing, commit_waiting;
};

/* The handlers of a rank's frames arriving on l (the link's ops and the
 * dispatch call them). */
void transfer_rx_begin(struct transfer_env *te, struct plink *l, const struct peer_msg *m,
                       bool asked);
bool transfer_rx_data(struct transfer_env *te, struct plink *l, const struct peer_msg *m);
void transfer_rx_payload(struct transfer_env *te, struct plink *l, void *cookie);
void transfer_rx_payload_drop(struct transfer_env *te, struct plink *l, void *cookie);
void transfer_rx_end(struct plink *l, const struct peer_msg *m);
/* What a restoring node tells the node that sent it a rank whose block
 * failed its CRC32C: an ERROR (-EBADMSG) on the transfer's stream with
 * this text (a job name has no spaces), so that the holder can mark its
 * copy bad and heal it.  A daemon that predates it logs the ERROR and
 * goes on. */
#define TRANSFER_COPY_BAD_FMT "copy of job %s step %" PRIu64 " rank %u is corrupt: %s"
/* Parse that text: 0 with job (CKPT_NAME_MAX + 1 bytes), step, rank and
 * *detail (into text) set, or -EINVAL. */
int transfer_copy_bad_parse(const char *text, char *job, uint64_t *step, uint32_t *rank,
                            const char **detail);

/* The rx on l's stream, or NULL. */
struct rx *transfer_rx_find(struct plink *l, uint32_t stream);
