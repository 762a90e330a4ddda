/* SPDX-License-Identifier: MIT */
/*
 * transfer — one rank over a peer link (see transfer.h).  Sections: tx
 * (one rank out: the frames a link asks for), rx (one rank in: checked,
 * written, finished and committed like a save), and the handlers of a
 * transfer's messages.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "peer-proto.h"
#include "peer/link.h"
#include "peer/transfer.h"
#include "util/cleanup.h"
#include "util/list.h"
#include "util/log.h"
#include "util/msgid.h"

#define FRAME_PAYLOAD PEER_DATA_MAX /* 4 MiB, a multiple of the block size */

/* One DATA frame's payload: read into pool memory (ic.ext), then checked
 * against the manifest and written by the ingest (step/ingest.h). */
struct rchunk {
        struct ingest_chunk ic;
        struct rx *rx;
        bool has_ext;
        struct pool_waiter waiter;
        bool waiting;              /* for pool memory, the link's input blocked */
};

/* ---- tx: one rank out ---------------------------------------------------------------------- */

/*
 * The shard file's page cache below end (0: all of it) is sent: drop it.
 * A sender streams GBs it will not read again (the local tier reads and
 * writes with O_DIRECT), and the pages it lets go are the ones the next
 * frames' read-ahead gets back from the allocator.  That matters more
 * than tidiness: on this project's VMs the first CPU touch of a page the
 * guest never used costs ~1 µs (0.7-2.4 s per GB read into new page
 * cache, paid by the MAC's read on the sender or the receiver's copy on
 * loopback), while a recycled page costs nothing (a cold 1 GiB file read
 * through mmap frame by frame: 0.68-2.37 s/GB first-touch keeping the
 * cache, 0.004 s/GB dropping each frame).  Pages still held by the socket
 * (not yet acknowledged, or on loopback not yet copied out) stay; the
 * next call or the one at the shard's end gets them.
 */
static void tx_drop_sent(int fd, uint64_t end) {
        /* (void): only a hint; a page it cannot drop stays cached */
        (void)posix_fadvise(fd, 0, (off_t)end, POSIX_FADV_DONTNEED);
}

/*
 * The frame [tx->offset, + len) of shard ms from the memory tier: copied
 * into the tx's own buffer and checked there (memtier_copy), the buffer
 * set as the frame's payload.  false: the tier does not hold all of it, or
 * the copy failed its check (the shard is dropped from the tier; the frame
 * then comes from the file, which has its own check at the receiver).
 * The buffer is the tx's alone and stays untouched until its next frame is
 * asked for, which is after this one is out (link.h, struct link_out).
 */
static bool tx_frame_from_memory(struct tx *tx, struct link_out *o,
                                 const struct manifest_shard *ms, uint64_t len) {
        if (!tx->memory)
                return false;
        struct memtier_shard *sh = memtier_find(tx->memory, tx->memory_src, tx->m->job,
                                                tx->m->step, tx->m->rank, ms->name);
        if (!sh || memtier_shard_size(sh) != ms->size || memtier_shard_crc32c(sh) != ms->crc32c)
                return false;
        if (!tx->mem_buf) {
                tx->mem_buf = aligned_alloc(4096, FRAME_PAYLOAD);
                if (!tx->mem_buf)
                        return false; /* the file will do */
        }
        uint64_t bad = 0;
        int r = memtier_copy(sh, tx->offset, len, tx->mem_buf, &bad);
        if (r == -EBADMSG) {
                log_error("peers: job %s step %" PRIu64 " rank %u shard %s: block %" PRIu64
                          " in memory does not match its CRC32C (a trainer wrote into the slot "
                          "after the save?); sending from disk", tx->m->job, tx->m->step,
                          tx->m->rank, ms->name, bad);
                memtier_drop_shard(tx->memory, sh);
        }
        if (r < 0)
                return false;
        o->mem = tx->mem_buf;
        return true;
}

/* Produce the next frame of the rank into its buffer (link_out.next). */
static int tx_next(struct link_out *o, struct plink *l) {
        struct tx *tx = container_of(o, struct tx, out);
        struct peer_msg m = { .hdr.stream = o->stream, .hdr.seq = link_next_seq(l) };
        int n;

        if (!tx->begun) {
                char *text;
                size_t len;
                if (manifest_format(tx->m, &text, &len) < 0)
                        return -ENOMEM;
                m.hdr.type = PEER_MSG_RANK_BEGIN;
                ckpt_name_set(&m.rank_begin.job, tx->m->job);
                m.rank_begin.step = tx->m->step;
                m.rank_begin.rank = tx->m->rank;
                m.rank_begin.world_size = tx->m->world_size;
                m.rank_begin.src_node = tx->src_node;
                m.rank_begin.purpose = tx->purpose;
                m.rank_begin.manifest_len = (uint32_t)len;
                m.rank_begin.manifest = text;
                size_t cap = PEER_HDR_SIZE + PEER_RANK_BEGIN_FIXED_MAX + len + PEER_TAG_SIZE;
                o->buf = malloc(cap);
                n = o->buf ? peer_msg_encode(&m, o->buf, cap - PEER_TAG_SIZE) : -ENOMEM;
                free(text);
                if (n < 0)
                        return n;
                o->len = (size_t)n;
                tx->begun = true;
                return 1;
        }
        if (o->buf != tx->small) {
                free(o->buf);
                o->buf = tx->small;
        }
        while (tx->shard < tx->m->nshards && tx->offset >= tx->m->shards[tx->shard].size) {
                tx->shard++;
                tx->offset = 0;
                if (o->fd >= 0) {
                        tx_drop_sent(o->fd, 0);
                        close(o->fd);
                        o->fd = -1;
                }
        }
        if (tx->shard >= tx->m->nshards) {
                free(tx->mem_buf); /* no frame of it is in flight any more */
                tx->mem_buf = NULL;
                m.hdr.type = PEER_MSG_RANK_END;
                n = peer_msg_encode(&m, tx->small, sizeof(tx->small) - PEER_TAG_SIZE);
                if (n < 0)
                        return n;
                o->len = (size_t)n;
                o->ended = true;
                return 1;
        }
        const struct manifest_shard *sh = &tx->m->shards[tx->shard];
        uint64_t len = MIN((uint64_t)FRAME_PAYLOAD, sh->size - tx->offset);
        if (!tx_frame_from_memory(tx, o, sh, len)) {
                if (o->fd < 0) {
                        int r = store_shard_open_buffered(tx->store, tx->m->job, tx->m->step,
                                                          tx->m->rank, sh->name, &o->fd);
                        if (r < 0)
                                return r;
                }
                /* the frame before the last one is long out (the last one
                 * may still be on its way, its pages held by the socket) */
                if (tx->offset > FRAME_PAYLOAD)
                        tx_drop_sent(o->fd, tx->offset - FRAME_PAYLOAD);
        }
        m.hdr.type = PEER_MSG_DATA;
        m.data.shard = tx->shard;
        m.data.offset = tx->offset;
        m.data.length = (uint32_t)len;
        n = peer_msg_encode(&m, tx->small, sizeof(tx->small));
        if (n < 0)
                return n;
        o->len = (size_t)n;
        o->payload = true;
        o->foff = tx->offset;
        o->flen = len;
        tx->offset += len;
        return 1;
}

static void tx_describe(const struct link_out *o, char *buf, size_t size) {
        const struct tx *tx = container_of(o, struct tx, out);
        snprintf(buf, size, "rank %u of job %s step %" PRIu64, tx->m->rank, tx->m->job,
                 tx->m->step);
}

static void tx_release(struct link_out *o, struct plink *l) {
        struct tx *tx = container_of(o, struct tx, out);

        /* the link closed under it: its owner sends it again after the
         * reconnect (nothing is owed any more when shutting down) */
        if (l->state == L_DEAD && tx->lost && !l->env->freeing)
                tx->lost(tx);
        if (o->fd >= 0)
                close(o->fd);
        if (o->buf != tx->small)
                free(o->buf);
        free(tx->mem_buf);
        manifest_free(tx->m);
        free(tx);
}

struct tx *transfer_tx_new(struct plink *l, const struct transfer_source *from, const char *job,
                           uint64_t step, uint32_t rank, uint8_t purpose, uint32_t src,
                           uint32_t stream, int *err) {
        struct tx *tx = calloc(1, sizeof(*tx));
        (void)l;
        if (!tx) {
                *err = -ENOMEM;
                return NULL;
        }
        *err = store_rank_manifest(from->store, job, step, rank, &tx->m);
        if (*err < 0) {
                free(tx);
                return NULL;
        }
        tx->store = from->store;
        tx->memory = from->memory;
        tx->memory_src = from->memory_src;
        tx->purpose = purpose;
        tx->src_node = src;
        tx->out.stream = stream;
        tx->out.fd = -1;
        /* a replicated rank waits for its RANK_ACK; an answer to GET_RANK
         * has none */
        tx->out.keep = purpose == PEER_PURPOSE_REPLICATE;
        tx->out.next = tx_next;
        tx->out.describe = tx_describe;
        tx->out.release = tx_release;
        list_init(&tx->out.link);
        return tx;
}

struct tx *transfer_tx_find(struct plink *l, uint32_t stream) {
        struct link_out *o = link_out_find(l, stream);
        return o ? container_of(o, struct tx, out) : NULL;
}

/* ---- rx: one rank in ----------------------------------------------------------------------- */

struct rx *transfer_rx_find(struct plink *l, uint32_t stream) {
        struct link_in *in = link_in_find(l, stream);
        return in ? container_of(in, struct rx, in) : NULL;
}

static void rx_free(struct rx *rx) {
        if (rx->inflight || rx->finishing)
                return; /* the last chunk or the finish frees it */
        /* a rank that did not land gives back what the tier kept of it */
        if (rx->error && rx->kept)
                memtier_drop_rank(rx->te->memory, rx->memory_src, rx->m->job, rx->m->step,
                                  rx->m->rank);
        ingest_abort(&rx->ingest);
        void (*report)(void *ctx, int error, const char *msg) = rx->report;
        void *ctx = rx->report_ctx;
        int error = rx->error;
        char msg[sizeof(rx->msg)];
        snprintf(msg, sizeof(msg), "%s", rx->msg);
        manifest_free(rx->m);
        commit_record_clear(&rx->record);
        free(rx);
        /* the one place a restore transfer ends, whichever way */
        if (report)
                report(ctx, error, msg);
}

static void rx_ack(struct rx *rx) {
        struct plink *l = rx->l;
        if (!l)
                return;
        if (rx->purpose == PEER_PURPOSE_REPLICATE) {
                struct peer_msg m = { .hdr.type = PEER_MSG_RANK_ACK, .hdr.stream = rx->in.stream };
                m.rank_ack.status = rx->error;
                snprintf(m.rank_ack.message, sizeof(m.rank_ack.message), "%s",
                         rx->error ? rx->msg : "");
                link_send(l, &m);
        } else if (rx->copy_bad) {
                /* a restore has no acknowledgement: tell the holder its
                 * copy is bad, so it heals it or stops offering it */
                link_send_error(l, rx->in.stream, -EBADMSG, TRANSFER_COPY_BAD_FMT, rx->m->job,
                                rx->m->step, rx->m->rank, rx->msg);
        }
        link_in_remove(l, &rx->in);
        rx->l = NULL;
        /* a restoring link keeps at most TRANSFER_WINDOW ranks arriving or finishing */
        rx->te->hooks->window(rx->te->owner, l);
}

/* The link closed under rx (link_in.closed). */
static void rx_link_closed(struct link_in *in, struct plink *l) {
        struct rx *rx = container_of(in, struct rx, in);

        rx->l = NULL;
        /* A rank whose data all arrived needs the link no more: it
         * finishes (only its RANK_ACK is lost; the sender sends it
         * again).  One cut short is dropped. */
        if (rx->ended && !l->env->freeing)
                return;
        if (!rx->error) {
                rx->error = -ECONNRESET;
                snprintf(rx->msg, sizeof(rx->msg), "the link broke mid-transfer");
        }
        rx_free(rx); /* frees now or when its chunks finish */
}

int transfer_copy_bad_parse(const char *text, char *job, uint64_t *step, uint32_t *rank,
                            const char **detail) {
        int used = -1;

        if (sscanf(text, "copy of job %255s step %" SCNu64 " rank %u is corrupt: %n", job, step,
                   rank, &used) != 3 || used < 0 || ckpt_name_validate(job, strlen(job)) < 0)
                return -EINVAL;
        *detail = text + used;
        return 0;
}

static void rx_committed(void *userdata, int error);
static void rx_step_commit(struct rx *rx);

static void rx_finished(void *userdata, int error) {
        struct rx *rx = userdata;

        if (error < 0) {
                rx->finishing = false;
                rx->error = error;
                snprintf(rx->msg, sizeof(rx->msg), "cannot finish the rank on disk: %s",
                         strerror(-error));
                log_error("peers: job %s step %" PRIu64 " rank %u from node %u: %s", rx->m->job,
                          rx->m->step, rx->m->rank, rx->from, rx->msg);
                rx_ack(rx);
                rx_free(rx);
                return;
        }
        /* the ingest added the rank's catalog rows */
        if (rx->kept)
                memtier_rank_landed(rx->te->memory, rx->memory_src, rx->m);
        list_add_tail(&rx->te->commits, &rx->clink);
        rx_step_commit(rx);
}

static bool rx_same_step(const struct rx *a, const struct rx *b) {
        return a->store == b->store && a->m->step == b->m->step && !strcmp(a->m->job, b->m->job);
}

/*
 * The step is committed on the sender (replication starts after the
 * commit; a restore pulls only committed steps): the copy is committed
 * too, its record listing the ranks it has so far.  Ranks of one step
 * finish concurrently (several transfers per link, several links); their
 * records are written one after another, each listing every rank finished
 * before it, so the last one written is complete.
 */
static void rx_step_commit(struct rx *rx) {
        struct list *pos;
        list_for_each(pos, &rx->te->commits) {
                struct rx *o = list_entry(pos, struct rx, clink);
                if (o != rx && o->committing && rx_same_step(o, rx)) {
                        rx->commit_waiting = true;
                        return;
                }
        }
        rx->commit_waiting = false;
        rx->committing = true;
        size_t n = 0;
        uint32_t ranks[256];
        int r = catalog_ranks(rx->catalog, rx->m->job, rx->m->step, ranks, 256, &n);
        /* The record then lists fewer ranks than this area holds (the first
         * 256 on -ENOBUFS, none on a fault); say so, as a restore from this
         * replica will miss the others. */
        if (r < 0)
                log_warn("peers: job %s step %" PRIu64 " from node %u: commit record lists "
                         "%zu of the ranks held: %s", rx->m->job, rx->m->step, rx->from,
                         r == -ENOBUFS ? (size_t)256 : (size_t)0, strerror(-r));
        commit_record_clear(&rx->record);
        snprintf(rx->record.job, sizeof(rx->record.job), "%s", rx->m->job);
        rx->record.step = rx->m->step;
        rx->record.world_size = rx->m->world_size;
        rx->record.committed_at = (int64_t)time(NULL);
        rx->record.ranks = calloc(n ? n : 1, sizeof(uint32_t));
        if (rx->record.ranks) {
                memcpy(rx->record.ranks, ranks, MIN(n, (size_t)256) * sizeof(uint32_t));
                rx->record.nranks = (uint32_t)MIN(n, (size_t)256);
        }
        ingest_commit_step(&rx->commit, rx->store, rx->catalog, &rx->record, rx_committed, rx);
}

static void rx_committed(void *userdata, int error) {
        struct rx *rx = userdata;
        struct transfer_env *te = rx->te;
        struct list *pos;

        rx->finishing = false;
        rx->committing = false;
        list_unlink(&rx->clink);
        list_for_each(pos, &te->commits) {
                struct rx *o = list_entry(pos, struct rx, clink);
                if (o->commit_waiting && rx_same_step(o, rx)) {
                        rx_step_commit(o);
                        break;
                }
        }
        if (error < 0) {
                rx->error = error;
                snprintf(rx->msg, sizeof(rx->msg), "cannot write the commit record: %s",
                         strerror(-error));
        } else {
                /* committed in rx->catalog too: the ingest marked it */
                te->hooks->committed(te->owner, rx);
                if (te->memory)
                        memtier_step_committed(te->memory, rx->memory_src, rx->m->job,
                                               rx->m->step);
                /* (void): catalog_flush() logs a failed commit and drops the batch; reconcile
                 * re-derives the rows from the manifests at the next start */
                (void)catalog_flush(rx->catalog);
                log_event(LOG_INFO, LOG_CTX(.id = LOG_ID_REPL_RECEIVED, .job = rx->m->job,
                                            LOG_STEP(rx->m->step), LOG_RANK(rx->m->rank),
                                            LOG_PEER(rx->from)),
                          "peers: job %s step %" PRIu64 " rank %u %s node %u (%u shards)", rx->m->job, rx->m->step, rx->m->rank,
                         rx->local ? "restored from" : "replicated from", rx->from,
                         rx->m->nshards);
        }
        char job[CKPT_NAME_MAX + 1];
        snprintf(job, sizeof(job), "%s", rx->m->job);
        struct store *store = rx->store;
        struct catalog *catalog = rx->catalog;
        bool area = !rx->local;

        rx_ack(rx);
        rx_free(rx); /* reports how it ended */
        /* replicas follow the same retention as local checkpoints */
        if (area && !error)
                te->hooks->landed_in_area(te->owner, store, catalog, job);
}

/* All data arrived and was written: finish like a save. */
static void rx_maybe_finish(struct rx *rx) {
        if (!rx->ended || rx->inflight || rx->finishing)
                return;
        if (rx->error) {
                rx_ack(rx);
                rx_free(rx);
                return;
        }
        rx->finishing = true;
        ingest_finish(&rx->ingest, rx->m, rx_finished, rx);
}

/* One chunk checked or written: a transfer cut short is freed after its
 * last one, a complete one finishes. */
static void rx_chunk_done(struct rx *rx) {
        rx->inflight--;
        if (!rx->l && !rx->ended)
                rx_free(rx);
        else
                rx_maybe_finish(rx);
}

static bool rx_ingest_failed(const struct ingest *in) {
        return container_of(in, struct rx, ingest)->error != 0;
}

static void rchunk_done(struct ingest_chunk *ic, int error) {
        struct rchunk *ch = container_of(ic, struct rchunk, ic);
        struct rx *rx = ch->rx;

        if (ic->end == INGEST_REJECTED && !rx->error) {
                rx->error = -EBADMSG;
                rx->copy_bad = true;
                snprintf(rx->msg, sizeof(rx->msg), "shard %s block %" PRId64 " failed its CRC32C",
                         rx->m->shards[ic->shard].name, ic->bad_block);
                /* the copy that is bad is the sending node's (rx->from),
                 * whoever saved the rank (rx->src) */
                if (rx->src == rx->from)
                        log_error("peers: job %s step %" PRIu64 " rank %u from node %u: node %u's "
                                  "copy: %s", rx->m->job, rx->m->step, rx->m->rank, rx->from,
                                  rx->from, rx->msg);
                else
                        log_error("peers: job %s step %" PRIu64 " rank %u (node %u's) from node "
                                  "%u: node %u's copy: %s", rx->m->job, rx->m->step, rx->m->rank,
                                  rx->src, rx->from, rx->from, rx->msg);
                snprintf(rx->msg, sizeof(rx->msg), "node %u's copy: shard %s block %" PRId64
                         " failed its CRC32C", rx->from, rx->m->shards[ic->shard].name,
                         ic->bad_block);
        } else if (ic->end == INGEST_WRITE && error < 0 && !rx->error) {
                rx->error = error;
                snprintf(rx->msg, sizeof(rx->msg), "writing shard %s: %s",
                         rx->m->shards[ic->shard].name, strerror(-error));
        }
        /* Written: the memory tier keeps the extent for the next reader
         * (a neighbour's restore, or a trainer here after a restore), on
         * the terms a save's windows are kept (server/save.c): not while
         * someone waits for pool memory, and not for a heal, whose rank is
         * on disk already. */
        struct transfer_env *te = rx->te;
        bool kept = ic->end == INGEST_WRITE && error == 0 && !rx->error && te->memory &&
                    !rx->replacing && pool_waiters(te->pool) == 0 &&
                    memtier_keep(te->memory, rx->memory_src, rx->m->job, rx->m->step,
                                 rx->m->rank, rx->m->uid, rx->m->shards[ic->shard].name,
                                 rx->m->shards[ic->shard].size, ic->offset, ic->length, &ic->ext);
        if (kept)
                rx->kept = true;
        else
                pool_release(te->pool, &ic->ext);
        free(ch);
        rx_chunk_done(rx);
}

/* checked against the manifest's block CRCs (the default check) */
static const struct ingest_ops rx_ingest_ops = {
        .failed = rx_ingest_failed,
        .chunk_done = rchunk_done,
};

/* ---- rx: the messages of a transfer ------------------------------------------------------ */

/* RANK_BEGIN: where it goes, what it must be. */
void transfer_rx_begin(struct transfer_env *te, struct plink *l, const struct peer_msg *m,
                       bool asked) {
        const struct peer_rank_begin *b = &m->rank_begin;
        int r;

        if (transfer_rx_find(l, m->hdr.stream)) {
                link_close(l, -EPROTO, "RANK_BEGIN on stream %u, which is still open",
                           m->hdr.stream);
                return;
        }
        if (l->nin >= PEER_STREAMS_MAX) {
                link_close(l, -EPROTO, "RANK_BEGIN while %u rank transfers are open (at most %u)",
                           l->nin, PEER_STREAMS_MAX);
                return;
        }
        struct rx *rx = calloc(1, sizeof(*rx));
        if (!rx) {
                link_close(l, -ENOMEM, "out of memory");
                return;
        }
        rx->te = te;
        rx->l = l;
        rx->in.stream = m->hdr.stream;
        rx->in.closed = rx_link_closed;
        rx->purpose = b->purpose;
        rx->src = b->src_node;
        rx->memory_src = b->src_node; /* a replica's; place() says otherwise */
        rx->from = l->node;
        list_init(&rx->clink);
        list_init(&rx->in.link);
        link_in_add(l, &rx->in);

        if (te->hooks->place(te->owner, l, b, asked, rx) < 0)
                return;
        r = manifest_parse(&rx->m, b->manifest, b->manifest_len);
        if (r < 0 || strcmp(rx->m->job, b->job.str) || rx->m->step != b->step ||
            rx->m->rank != b->rank || rx->m->world_size != b->world_size) {
                link_close(l, -EBADMSG, "RANK_BEGIN with a manifest that is malformed or "
                           "names another rank");
                return;
        }
        r = ingest_begin(&rx->ingest, rx->store, rx->catalog, te->workers, &rx_ingest_ops,
                         rx->m->job, rx->m->step, rx->m->rank, rx->m);
        if (r < 0) {
                /* Refuse the rank, not the link: the data that follows is
                 * read and dropped, and RANK_ACK says why. */
                rx->error = r;
                snprintf(rx->msg, sizeof(rx->msg), "cannot store job %s step %" PRIu64
                         " rank %u: %s", rx->m->job, rx->m->step, rx->m->rank, strerror(-r));
                log_error("peers: %s (from node %u)", rx->msg, l->node);
        }
}

static void rchunk_memory(struct pool_waiter *w, const struct pool_extent *e, int error) {
        struct rchunk *ch = container_of(w, struct rchunk, waiter);
        struct plink *l = ch->rx->l;

        ch->waiting = false;
        if (!e) {
                link_close(l, error, "no pool memory for incoming data");
                return;
        }
        ch->ic.ext = *e;
        ch->has_ext = true;
        link_payload_memory(l, pool_extent_addr(&ch->ic.ext));
}

/* DATA header: check it follows on, then find memory for its payload.
 * false: stop reading until the memory comes (rchunk_memory). */
bool transfer_rx_data(struct transfer_env *te, struct plink *l, const struct peer_msg *m) {
        struct rx *rx = transfer_rx_find(l, m->hdr.stream);
        const struct peer_data *d = &m->data;

        if (!rx || rx->ended) {
                link_close(l, -EPROTO, "DATA outside a rank transfer");
                return false;
        }
        /* in order: this shard or the next non-empty one, contiguous,
         * starting on a block boundary */
        while (rx->shard < rx->m->nshards && rx->offset >= rx->m->shards[rx->shard].size) {
                rx->shard++;
                rx->offset = 0;
        }
        if (d->shard != rx->shard || d->offset != rx->offset || rx->shard >= rx->m->nshards ||
            d->offset % MANIFEST_BLOCK_SIZE || d->length > rx->m->shards[rx->shard].size - d->offset ||
            (d->length % MANIFEST_BLOCK_SIZE &&
             d->offset + d->length != rx->m->shards[rx->shard].size)) {
                link_close(l, -EPROTO, "DATA for shard %u at %" PRIu64 "+%u, expected shard %u "
                           "at %" PRIu64, d->shard, d->offset, d->length, rx->shard, rx->offset);
                return false;
        }
        rx->offset += d->length;
        struct rchunk *ch = calloc(1, sizeof(*ch));
        if (!ch) {
                link_close(l, -ENOMEM, "out of memory");
                return false;
        }
        ch->rx = rx;
        ch->ic.shard = d->shard;
        ch->ic.offset = d->offset;
        ch->ic.length = d->length;
        rx->inflight++;
        link_payload_expect(l, ch, d->length, NULL);
        /* the whole frame or nothing: its payload is read into the extent
         * (config_validate keeps slots at least a frame large) */
        uint32_t units = pool_units_for(te->pool, d->length);
        if ((uint64_t)units * POOL_UNIT < d->length) {
                link_close(l, -EMSGSIZE, "a %u-byte frame does not fit a pool slot", d->length);
                return false;
        }
        int r = pool_try_acquire_whole(te->pool, rx->m->uid, units, &ch->ic.ext);
        if (r == 1) {
                ch->has_ext = true;
                link_payload_set_memory(l, pool_extent_addr(&ch->ic.ext));
                return true;
        }
        if (r < 0) {
                link_close(l, r, "no pool memory for incoming data: %s", strerror(-r));
                return false;
        }
        ch->waiting = true;
        link_payload_block(l);
        pool_wait_whole(te->pool, &ch->waiter, rx->m->uid, units, te->pool_wait_ms,
                        rchunk_memory);
        return false;
}

/* The payload of a DATA is in memory: check, then write. */
void transfer_rx_payload(struct transfer_env *te, struct plink *l, void *cookie) {
        struct rchunk *ch = cookie;
        struct rx *rx = ch->rx;
        (void)l;

        if (rx->error) {
                pool_release(te->pool, &ch->ic.ext);
                free(ch);
                rx->inflight--;
                return;
        }
        ingest_chunk_submit(&rx->ingest, &ch->ic);
}

/* The link closed with a DATA's payload not (all) in: its memory goes back. */
void transfer_rx_payload_drop(struct transfer_env *te, struct plink *l, void *cookie) {
        struct rchunk *ch = cookie;
        (void)l;

        if (ch->waiting)
                pool_wait_cancel(te->pool, &ch->waiter);
        if (ch->has_ext)
                pool_release(te->pool, &ch->ic.ext);
        ch->rx->inflight--;
        free(ch);
}

void transfer_rx_end(struct plink *l, const struct peer_msg *m) {
        struct rx *rx = transfer_rx_find(l, m->hdr.stream);
        if (!rx || rx->ended) {
                link_close(l, -EPROTO, "RANK_END outside a rank transfer");
                return;
        }
        while (rx->shard < rx->m->nshards && rx->offset >= rx->m->shards[rx->shard].size) {
                rx->shard++;
                rx->offset = 0;
        }
        if (rx->shard < rx->m->nshards) {
                link_close(l, -EPROTO, "RANK_END before shard %u was complete", rx->shard);
                return;
        }
        rx->ended = true;
        rx_maybe_finish(rx);
}
