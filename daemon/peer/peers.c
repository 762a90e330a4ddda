/* SPDX-License-Identifier: MIT */
/*
 * peers — the neighbour tier (see peers.h).  Sections:
 *
 *   links    TCP connections: non-blocking, framed (proto/peer.c), the PSK
 *            handshake, then a GMAC tag after every frame (peer/framemac.h:
 *            sealed as a frame goes on the wire, checked before a frame is
 *            acted on), an output queue (control messages between frames,
 *            rank frames produced on demand so memory stays bounded),
 *            reconnect with backoff on the connecting side;
 *   tx       sending one rank: RANK_BEGIN with the MANIFEST text, DATA
 *            frames whose payload goes file -> socket with sendfile (no
 *            copy through user space), RANK_END; several per link, their
 *            frames taking turns;
 *   rx       receiving one rank: payload straight into pool memory,
 *            every 1 MiB block checked against the manifest's CRC32C on a
 *            worker, O_DIRECT write from the registered slot, then the
 *            local tier's own finish (fsync, MANIFEST, rename), COMMITTED;
 *   replication  per target: the steps owed (catalog schema 3), up to
 *            TX_WINDOW ranks in flight on the link, acknowledged ranks move
 *            the step to "replicated";
 *   restore  LIST_REQ / GET_RANK against the targets, ranks spread over the
 *            links that hold them.
 *
 * A link carries up to TX_WINDOW rank transfers at once in each direction,
 * each on its own stream; the sender interleaves their frames at frame
 * boundaries (4 MiB), so a small rank does not wait behind a large one and
 * the receiver's fsync and rename of one rank overlap the data of the
 * next.  Within a transfer, ordering stays strict, which keeps the
 * receiver's checks tight: shards in manifest order, DATA frames contiguous
 * and starting on a block boundary.  Anything else is a protocol error
 * that closes the link (logged).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/acceptor.h"
#include "crc32c.h"
#include "peer-proto.h"
#include "peer/auth.h"
#include "peer/framemac.h"
#include "peer/peers.h"
#include "util/cleanup.h"
#include "util/list.h"
#include "util/log.h"

#define RECONNECT_MIN_MS 100
#define RECONNECT_MAX_MS 5000
#define FRAME_PAYLOAD PEER_DATA_MAX /* 4 MiB, a multiple of the block size */
/* Rank transfers a sender keeps open on a link (replication pushes and
 * restore pulls alike): enough that one rank's fsync, rename and round
 * trip overlap the data of others, few enough that a link's transfers
 * make progress together.  The receiver accepts up to PEER_STREAMS_MAX. */
#define TX_WINDOW 4
#define TARGETS_MAX 16
/* Keepalive on the connecting side: a PING every PING_EVERY_MS; a link
 * that answers nothing for PING_TIMEOUT_MS is closed (and reconnected), so
 * a cut cable shows as a target down within seconds rather than when TCP
 * gives up.  Generous: a receiver waiting for pool memory stops reading. */
#define PING_EVERY_MS 5000
#define PING_TIMEOUT_MS 20000
/* Before authentication only the handshake messages may arrive, and the
 * largest of them is an ERROR (a 512-byte message): a link starts with a
 * buffer this big and grows it to PEER_MSG_MAX (or a RANK_BEGIN) only once
 * authenticated, so an unauthenticated connection costs one small
 * allocation whatever length its header claims. */
#define PREAUTH_BODY_MAX 1024
_Static_assert(PREAUTH_BODY_MAX >= 4 + 2 + PEER_ERRMSG_MAX + 1 &&
                       PREAUTH_BODY_MAX >= 16 + 2 * PEER_NONCE_SIZE + PEER_MAC_SIZE +
                                                   PEER_CLUSTER_ID_MAX + 2,
               "every handshake message must fit the pre-authentication buffer");
/* TCP keepalive probes: every KEEPALIVE_CNT-th unanswered probe after
 * idle + cnt * interval kills a link whose other end vanished without a
 * FIN (power loss, a cut cable), before or after authentication.
 * TCP_USER_TIMEOUT bounds data left unacknowledged; it stays above
 * PING_TIMEOUT_MS so that the application's own keepalive, which knows
 * about receivers waiting for pool memory, decides first. */
#define KEEPALIVE_CNT 3
#define USER_TIMEOUT_MIN_MS 60000
/* The listen backlog: a flood of connects that outpaces the accept loop
 * for a moment overflows a short queue, and then the kernel drops SYNs —
 * a real neighbour's among them, retried only after a second.  Pending
 * connections cost the kernel little and the acceptor drains them fast. */
#define PEER_BACKLOG 1024

enum link_state { L_CONNECTING, L_HELLO, L_AUTH, L_READY, L_DEAD };

struct peers;
struct plink;

/* ---- output items ---------------------------------------------------------------------- */

struct ctl {
        struct list link;
        uint8_t *buf;              /* room for a tag after len when mac */
        size_t len;
        bool mac;                  /* queued after the handshake: gets its tag
                                    * when it goes on the wire */
};

/* ---- a rank being sent ------------------------------------------------------------------ */

/* tx->small holds a RANK_END and its tag, or a DATA's two headers. */
_Static_assert(PEER_HDR_SIZE + PEER_TAG_SIZE <= PEER_HDR_SIZE + PEER_DATA_HDR_SIZE,
               "a RANK_END and its tag fit tx->small");

struct tx {
        struct list link;          /* plink.txs */
        struct plink *l;
        uint32_t stream;
        uint8_t purpose;
        uint32_t src_node;
        struct store *store;
        struct manifest *m;
        uint32_t shard;
        uint64_t offset;
        int fd;
        bool begun, ended;
        /* the frame on its way: buf (header [+ data header] or the whole
         * RANK_BEGIN), then flen payload bytes from fd at foff */
        uint8_t *buf;
        size_t len, sent;
        uint8_t small[PEER_HDR_SIZE + PEER_DATA_HDR_SIZE];
        uint64_t foff, flen, fsent;
        /* a DATA frame's tag, sent after its payload; map: a read-only
         * mapping of the payload's file range, MACed as sendfile moves it */
        uint8_t trailer[PEER_TAG_SIZE];
        size_t trailer_len, trailer_sent;
        void *map;
        /* replication: the step this rank belongs to, its index there */
        struct rstep *rs;
        size_t rank_idx;
};

/* ---- a rank being received ---------------------------------------------------------------- */

struct rx {
        struct list link;          /* plink.rxs while l is set */
        struct peers *ps;
        struct plink *l;           /* NULL once acknowledged or the link died */
        uint32_t stream;
        uint8_t purpose;
        uint32_t src;              /* whose rank it is */
        uint32_t from;             /* the node that sent it */
        struct store *store;
        struct catalog *catalog;
        bool local;                /* into the local tier (restore) */
        struct manifest *m;
        struct rank_writer *rw;
        int *fds;
        uint32_t shard;            /* next expected */
        uint64_t offset;
        uint32_t inflight;         /* chunks being checked or written */
        bool ended, finishing;
        int error;
        char msg[PEER_ERRMSG_MAX + 1];
        /* restore: whom to tell.  Set when RANK_END arrives: until then
         * the rank is its rget's (asked again if the link breaks), from
         * then on the rx reports how it ended, once. */
        struct restore_job *rj;
        struct commit_record record;
        /* peers.commits, from the rank's finish to its step's commit record:
         * the record of a step is written by one rank at a time */
        struct list clink;
        bool committing, commit_waiting;
};

struct rchunk {
        struct work work;
        struct store_xfer xfer;
        struct rx *rx;
        struct pool_extent ext;
        bool has_ext;
        uint32_t shard;
        uint64_t offset;
        uint32_t length;
        int64_t bad_block;
};

/* ---- a connection -------------------------------------------------------------------------- */

struct plink {
        struct list link;          /* peers.links */
        struct peers *ps;
        int fd;
        struct loop_watch watch;
        bool watching;
        uint32_t events;
        bool client;
        uint32_t node;             /* the other side */
        char addr[80];
        char host[64];             /* the other side's address, numeric */
        enum link_state state;
        bool unauth_counted;       /* accepted, counted in peers.nunauth */
        struct loop_timer handshake; /* the handshake deadline, until L_READY */
        uint8_t nonce_own[PEER_NONCE_SIZE], nonce_peer[PEER_NONCE_SIZE];
        /* frame MACs, from the handshake's end on (NULL before) */
        struct frame_mac *mac_tx, *mac_rx;
        /* input */
        uint8_t *in;
        size_t in_cap, in_got, in_want;
        struct peer_hdr hdr;
        bool hdr_done;
        /* DATA payload being read */
        struct rchunk *pay;
        uint64_t pay_got;
        uint64_t pay_frame;        /* its frame counter, for the log */
        uint8_t pay_tag[PEER_TAG_SIZE];
        size_t pay_tag_got;
        bool rx_blocked;           /* waiting for pool memory */
        struct pool_waiter waiter;
        struct list rxs;           /* struct rx arriving (or finishing) on this link */
        uint32_t nrx;
        /* output */
        struct list ctlq;
        struct ctl *cur;
        size_t cur_sent;
        struct list txs;           /* struct tx leaving on this link; turns in order */
        uint32_t ntx;
        struct tx *tx_cur;         /* whose frame is on its way, NULL between frames */
        uint32_t next_stream;
        uint64_t seq;
        /* client side */
        struct ptarget *target;
};

/* A set of ranks, each of one step of a job: the kept steps' ranks of one
 * node, a few thousand at most, looked up linearly. */
struct rkey {
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t rank;
};

struct rkeys {
        struct rkey *v;
        size_t n, cap;
};

/* The connecting side's view of one target node. */
struct ptarget {
        struct peers *ps;
        uint32_t node;
        struct plink *l;           /* NULL while down */
        struct loop_timer timer;   /* reconnect */
        struct loop_timer ping;    /* keepalive while up */
        uint64_t last_heard_ms;    /* loop_now_ms() of the last message received */
        uint64_t backoff_ms;
        int64_t down_since;        /* unix seconds; 0: never up yet */
        char last_error[256];      /* why the link last went down, for status */
        struct list steps;         /* struct rstep owed to this node, oldest first */
        uint32_t steps_pending;
        /* restore */
        bool list_sent;
        uint32_t list_stream;
        struct restore_job *rj_listing;
        /* what the listing says this node's ranks the target holds: at its
         * end, committed steps of ours it lacks are sent again */
        struct rkeys held;
        bool listing_all;          /* the listing covers every job */
        struct list gets;          /* struct rget queued on this link */
        struct list gets_active;   /* struct rget asked, RANK_END not yet here */
        uint32_t ngets_active;
};

/* A step owed to one target: each rank to send, in flight, or acknowledged. */
enum { RANK_TODO, RANK_SENDING, RANK_ACKED };

struct rstep {
        struct list link;
        struct ptarget *t;
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t *ranks;
        uint8_t *rstate;           /* RANK_* per entry of ranks */
        size_t nranks;
        uint32_t inflight, acked;
        int status;                /* the first failure; reported once nothing is in flight */
        char msg[PEER_ERRMSG_MAX + 1];
};

/* One rank to pull from a target. */
struct rget {
        struct list link;
        struct restore_job *rj;
        size_t tidx;               /* index of the target it is queued on */
        uint32_t stream;           /* while asked */
        char job[CKPT_NAME_MAX + 1];
        uint64_t step;
        uint32_t rank, world_size;
};

struct restore_job {
        struct list link;
        struct peers *ps;
        char job[CKPT_NAME_MAX + 1];      /* "" all */
        uint64_t step;                    /* CKPT_STEP_LATEST: all missing */
        uint32_t lists_pending;
        uint32_t gets_pending;
        uint32_t ranks_done;
        uint32_t present;                 /* listed ranks already here */
        bool single;                      /* one rank, asked of target after target */
        int error;
        char msg[PEER_ERRMSG_MAX + 1];
        struct rkeys claimed;             /* already asked for somewhere */
        void (*done)(void *userdata, int error, uint32_t ranks, const char *message);
        void *userdata;
};

struct peers {
        struct loop *loop;
        struct worker_pool *workers;
        struct pool *pool;
        struct store *store;
        struct catalog *catalog;
        struct replica_area *areas;
        size_t nareas;
        struct peers_options opts;
        struct node_address *addrs;
        uint8_t psk[PEER_PSK_MAX];
        size_t psk_len;
        int listen_fd;
        struct acceptor acceptor;
        /* accepted links not authenticated yet, from addresses other than
         * the replication sources' (those count only per address) */
        uint32_t nunauth;
        /* the replication sources' addresses, numeric: their connections
         * are never crowded out by strangers' */
        char source_hosts[TARGETS_MAX][64];
        size_t nsource_hosts;
        struct list links;
        struct ptarget targets[TARGETS_MAX];
        size_t ntargets;
        struct list restores;
        struct list commits;      /* struct rx whose step's commit record is due */
        void (*on_changed)(void *userdata, const char *job, uint64_t step);
        void *userdata;
        bool freeing;
        bool paused;              /* peers_pause(): no new frame leaves */
        struct restore_job *startup_rj; /* the restore targets join as they come up */
};

static void link_close(struct plink *l, int error, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void link_refuse_frame(struct plink *l, uint16_t type, uint64_t frame);
static void link_refuse_version(struct plink *l);
static void link_update_events(struct plink *l);
static void link_flush(struct plink *l);
static void target_pump(struct ptarget *t);
static void target_connect(struct ptarget *t);
static void target_timer(struct loop_timer *timer);
static void rx_free(struct rx *rx);
static void restore_job_check(struct restore_job *rj);
static void target_reseed(struct ptarget *t);
static bool rget_next_target(struct rget *g);

static bool node_is_source(struct peers *ps, uint32_t node) {
        for (size_t i = 0; i < ps->nareas; i++)
                if (ps->areas[i].src == node)
                        return true;
        return false;
}

static struct replica_area *area_for(struct peers *ps, uint32_t src) {
        for (size_t i = 0; i < ps->nareas; i++)
                if (ps->areas[i].src == src)
                        return &ps->areas[i];
        return NULL;
}

/* ---- sending messages ------------------------------------------------------------------------ */

static int link_send(struct plink *l, struct peer_msg *m) {
        uint8_t tmp[PEER_HDR_SIZE + PEER_MSG_MAX];

        m->hdr.seq = ++l->seq;
        int n = peer_msg_encode(m, tmp, sizeof(tmp));
        if (n < 0) {
                log_error("peers: cannot encode %s for node %u: %s",
                          peer_msg_type_name(m->hdr.type), l->node, strerror(-n));
                return n;
        }
        struct ctl *c = calloc(1, sizeof(*c));
        if (!c || !(c->buf = malloc((size_t)n + PEER_TAG_SIZE))) {
                free(c);
                return -ENOMEM;
        }
        memcpy(c->buf, tmp, (size_t)n);
        c->len = (size_t)n;
        c->mac = l->mac_tx != NULL;
        list_init(&c->link);
        list_add_tail(&l->ctlq, &c->link);
        link_flush(l);
        return 0;
}

static void send_error(struct plink *l, uint32_t stream, int error, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void send_error(struct plink *l, uint32_t stream, int error, const char *fmt, ...) {
        struct peer_msg m = { .hdr.type = PEER_MSG_ERROR, .hdr.stream = stream };
        va_list ap;

        m.error.error = error < 0 ? error : -EIO;
        m.error.stream = stream;
        va_start(ap, fmt);
        vsnprintf(m.error.message, sizeof(m.error.message), fmt, ap);
        va_end(ap);
        link_send(l, &m);
}

/* ---- tx: one rank out ---------------------------------------------------------------------- */

static struct tx *tx_new(struct plink *l, struct store *store, const char *job, uint64_t step,
                         uint32_t rank, uint8_t purpose, uint32_t src, uint32_t stream, int *err) {
        struct tx *tx = calloc(1, sizeof(*tx));
        if (!tx) {
                *err = -ENOMEM;
                return NULL;
        }
        *err = store_rank_manifest(store, job, step, rank, &tx->m);
        if (*err < 0) {
                free(tx);
                return NULL;
        }
        tx->l = l;
        tx->store = store;
        tx->purpose = purpose;
        tx->src_node = src;
        tx->stream = stream;
        tx->fd = -1;
        list_init(&tx->link);
        return tx;
}

static void tx_free(struct tx *tx) {
        if (!tx)
                return;
        list_unlink(&tx->link);
        if (tx->map)
                munmap(tx->map, tx->flen);
        if (tx->fd >= 0)
                close(tx->fd);
        if (tx->buf != tx->small)
                free(tx->buf);
        manifest_free(tx->m);
        free(tx);
}

/* A RANK_BEGIN or RANK_END in tx->buf is complete: append its tag (room
 * for it was left).  1, or -errno. */
static int tx_seal(struct tx *tx) {
        tx->trailer_len = tx->trailer_sent = 0;
        if (!tx->l->mac_tx)
                return 1;
        int r = frame_mac_seal(tx->l->mac_tx, tx->buf, tx->len, tx->buf + tx->len);
        if (r < 0)
                return r;
        tx->len += PEER_TAG_SIZE;
        return 1;
}

/*
 * A DATA frame: header and data header in tx->small, payload bytes
 * [foff, foff + flen) of tx->fd.  The payload goes out with sendfile; its
 * MAC is begun here over the headers and continued over a read-only
 * mapping of the same file range as sendfile moves each piece
 * (tx_mac_payload), so the bytes are MACed where they lie, never copied,
 * and read while sendfile just brought them into the page cache (nothing
 * more is read from disk on the loop thread than before).  foff is a
 * multiple of FRAME_PAYLOAD, so page-aligned.  From here until the frame
 * is out the link's MAC belongs to this frame: link_flush lets no control
 * message in between.  1, or -errno.
 */
static int tx_seal_data(struct tx *tx) {
        struct frame_mac *fm = tx->l->mac_tx;

        tx->trailer_len = tx->trailer_sent = 0;
        if (!fm)
                return 1;
        /* a mapping past the end of the file would fault (SIGBUS) where
         * sendfile just stops short: check the file still holds the range */
        struct stat st;
        if (fstat(tx->fd, &st) < 0)
                return -errno;
        if ((uint64_t)st.st_size < tx->foff + tx->flen)
                return -EIO;
        void *map = mmap(NULL, tx->flen, PROT_READ, MAP_SHARED, tx->fd, (off_t)tx->foff);
        if (map == MAP_FAILED)
                return -errno;
        int r = frame_mac_begin(fm);
        if (r < 0) {
                munmap(map, tx->flen);
                return r;
        }
        frame_mac_update(fm, tx->small, tx->len);
        tx->map = map;
        return 1;
}

/* sendfile moved n more payload bytes (from tx->fsent on): MAC them; at
 * the payload's end the tag is the frame's trailer. */
static void tx_mac_payload(struct tx *tx, size_t n) {
        struct frame_mac *fm = tx->l->mac_tx;

        if (!tx->map)
                return;
        frame_mac_update(fm, (const uint8_t *)tx->map + tx->fsent, n);
        if (tx->fsent + n < tx->flen)
                return;
        frame_mac_end(fm, tx->trailer);
        tx->trailer_len = PEER_TAG_SIZE;
        munmap(tx->map, tx->flen);
        tx->map = NULL;
}

/* Produce the next frame of tx into its buffer: 1 produced, 0 nothing left. */
static int tx_next_frame(struct tx *tx) {
        struct plink *l = tx->l;
        struct peer_msg m = { .hdr.stream = tx->stream, .hdr.seq = ++l->seq };
        int n;

        tx->sent = tx->fsent = tx->flen = 0;
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
                tx->buf = malloc(cap);
                n = tx->buf ? peer_msg_encode(&m, tx->buf, cap - PEER_TAG_SIZE) : -ENOMEM;
                free(text);
                if (n < 0)
                        return n;
                tx->len = (size_t)n;
                tx->begun = true;
                return tx_seal(tx);
        }
        if (tx->buf != tx->small) {
                free(tx->buf);
                tx->buf = tx->small;
        }
        while (tx->shard < tx->m->nshards && tx->offset >= tx->m->shards[tx->shard].size) {
                tx->shard++;
                tx->offset = 0;
                if (tx->fd >= 0) {
                        close(tx->fd);
                        tx->fd = -1;
                }
        }
        if (tx->shard >= tx->m->nshards) {
                if (tx->ended)
                        return 0;
                m.hdr.type = PEER_MSG_RANK_END;
                n = peer_msg_encode(&m, tx->small, sizeof(tx->small) - PEER_TAG_SIZE);
                if (n < 0)
                        return n;
                tx->len = (size_t)n;
                tx->ended = true;
                return tx_seal(tx);
        }
        const struct manifest_shard *sh = &tx->m->shards[tx->shard];
        if (tx->fd < 0) {
                int r = store_shard_open_buffered(tx->store, tx->m->job, tx->m->step, tx->m->rank,
                                                  sh->name, &tx->fd);
                if (r < 0)
                        return r;
        }
        uint64_t len = MIN((uint64_t)FRAME_PAYLOAD, sh->size - tx->offset);
        m.hdr.type = PEER_MSG_DATA;
        m.data.shard = tx->shard;
        m.data.offset = tx->offset;
        m.data.length = (uint32_t)len;
        n = peer_msg_encode(&m, tx->small, sizeof(tx->small));
        if (n < 0)
                return n;
        tx->len = (size_t)n;
        tx->foff = tx->offset;
        tx->flen = len;
        tx->offset += len;
        return tx_seal_data(tx);
}

/* ---- links: output ---------------------------------------------------------------------------- */

static void link_tx_add(struct plink *l, struct tx *tx) {
        list_add_tail(&l->txs, &tx->link);
        l->ntx++;
}

static void link_tx_remove(struct plink *l, struct tx *tx) {
        if (l->tx_cur == tx)
                l->tx_cur = NULL;
        l->ntx--;
        tx_free(tx);
}

static struct tx *link_tx(struct plink *l, uint32_t stream) {
        struct list *pos;
        list_for_each(pos, &l->txs) {
                struct tx *tx = list_entry(pos, struct tx, link);
                if (tx->stream == stream)
                        return tx;
        }
        return NULL;
}

/* The first transfer with frames still to produce, or NULL. */
static struct tx *link_frames_left(struct plink *l) {
        struct list *pos;
        list_for_each(pos, &l->txs) {
                struct tx *tx = list_entry(pos, struct tx, link);
                if (!tx->ended)
                        return tx;
        }
        return NULL;
}

/* Whose turn it is to produce a frame: the first transfer with frames left,
 * which then goes to the back of the line. */
static struct tx *link_next_turn(struct plink *l) {
        struct tx *tx = link_frames_left(l);
        if (tx) {
                list_unlink(&tx->link);
                list_add_tail(&l->txs, &tx->link);
        }
        return tx;
}

/* Send more of buf[*sent .. len).  1: some went out (*sent advanced), 0:
 * the socket is full, -1: the link failed and is closed. */
static int link_write(struct plink *l, const uint8_t *buf, size_t len, size_t *sent, int flags) {
        ssize_t n = send(l->fd, buf + *sent, len - *sent, MSG_NOSIGNAL | flags);
        if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                        return 0;
                link_close(l, -errno, "send: %m");
                return -1;
        }
        *sent += (size_t)n;
        return 1;
}

/* Write what can be written now: control messages between frames, then
 * the transfers' frames in turn.  A failed link is closed here. */
static void link_flush(struct plink *l) {
        if (l->state == L_DEAD || l->state == L_CONNECTING)
                return;
        for (;;) {
                if (l->cur) {
                        int w = link_write(l, l->cur->buf, l->cur->len, &l->cur_sent, 0);
                        if (w < 0)
                                return;
                        if (l->cur_sent < l->cur->len)
                                break;
                        free(l->cur->buf);
                        free(l->cur);
                        l->cur = NULL;
                        continue;
                }
                struct tx *tx = l->tx_cur;
                /* A frame once produced goes out before any control
                 * message: its tag was (or is being) computed with the
                 * direction's next frame counter, so nothing may pass it.
                 * (A frame is produced only when no control message
                 * waits, so they wait at most one frame.) */
                bool started = tx != NULL;
                if (!started && !list_empty(&l->ctlq)) {
                        l->cur = list_first_entry(&l->ctlq, struct ctl, link);
                        list_unlink(&l->cur->link);
                        l->cur_sent = 0;
                        /* sealed now, not when queued: frame counters must
                         * follow the order frames go on the wire */
                        if (l->cur->mac) {
                                int r = frame_mac_seal(l->mac_tx, l->cur->buf, l->cur->len,
                                                       l->cur->buf + l->cur->len);
                                if (r < 0) {
                                        link_close(l, r, "cannot MAC a frame: %s", strerror(-r));
                                        return;
                                }
                                l->cur->len += PEER_TAG_SIZE;
                        }
                        continue;
                }
                if (l->state != L_READY)
                        break;
                if (!tx) {
                        /* paused between frames: control messages still flow */
                        if (l->ps->paused)
                                break;
                        tx = link_next_turn(l);
                        if (!tx)
                                break;
                        int r = tx_next_frame(tx);
                        if (r < 0) {
                                link_close(l, r, "cannot read rank %u of job %s step %" PRIu64
                                           ": %s", tx->m->rank, tx->m->job, tx->m->step,
                                           strerror(-r));
                                return;
                        }
                        l->tx_cur = tx; /* r == 1: a transfer not ended has a frame */
                        continue;
                }
                if (tx->sent < tx->len) {
                        int w = link_write(l, tx->buf, tx->len, &tx->sent,
                                           tx->flen ? MSG_MORE : 0);
                        if (w < 0)
                                return;
                        if (w == 0)
                                break;
                        continue;
                }
                if (tx->fsent < tx->flen) {
                        off_t off = (off_t)(tx->foff + tx->fsent);
                        ssize_t n = sendfile(l->fd, tx->fd, &off, tx->flen - tx->fsent);
                        if (n < 0) {
                                if (errno == EAGAIN || errno == EINTR)
                                        break;
                                link_close(l, -errno, "sendfile: %m");
                                return;
                        }
                        if (n == 0) {
                                link_close(l, -EIO, "shard file ended early");
                                return;
                        }
                        tx_mac_payload(tx, (size_t)n);
                        tx->fsent += (uint64_t)n;
                        continue;
                }
                if (tx->trailer_sent < tx->trailer_len) {
                        int w = link_write(l, tx->trailer, tx->trailer_len, &tx->trailer_sent, 0);
                        if (w < 0)
                                return;
                        if (w == 0)
                                break;
                        continue;
                }
                /* the frame is out */
                l->tx_cur = NULL;
                /* all of an answer to GET_RANK sent: it has no acknowledgement
                 * (a replicated rank waits for its RANK_ACK) */
                if (tx->ended && tx->purpose != PEER_PURPOSE_REPLICATE)
                        link_tx_remove(l, tx);
        }
        link_update_events(l);
}

static void link_update_events(struct plink *l) {
        if (l->state == L_DEAD || !l->watching)
                return;
        uint32_t ev = 0;
        bool pending_out = l->cur || !list_empty(&l->ctlq) ||
                           (l->state == L_READY &&
                            (l->tx_cur || (!l->ps->paused && link_frames_left(l))));
        if (l->state == L_CONNECTING)
                ev = EPOLLOUT;
        else {
                if (!l->rx_blocked)
                        ev |= EPOLLIN;
                if (pending_out)
                        ev |= EPOLLOUT;
        }
        if (ev != l->events) {
                l->events = ev;
                loop_watch_mod(l->ps->loop, &l->watch, ev);
        }
}

/* ---- links: lifecycle ------------------------------------------------------------------------- */

/* The handshake is over (authenticated or closed): the deadline goes, and
 * an accepted link no longer counts against the unauthenticated caps. */
static void link_unauth_done(struct plink *l) {
        loop_timer_cancel(&l->handshake);
        if (l->unauth_counted) {
                l->unauth_counted = false;
                l->ps->nunauth--;
        }
}

static void link_free(struct plink *l) {
        list_unlink(&l->link);
        frame_mac_free(l->mac_tx);
        frame_mac_free(l->mac_rx);
        free(l->in);
        free(l);
}

static void link_reap(struct loop_timer *t);

struct reaper {
        struct loop_timer timer;
        struct plink *l;
};

/* An accepted connection that has not authenticated: anyone who can reach
 * the port makes one, so what it does wrong is logged only through
 * link_close's rate-limited line, never once per connection. */
static bool link_stranger(const struct plink *l) {
        return !l->client && l->state != L_READY;
}

static void link_close(struct plink *l, int error, const char *fmt, ...) {
        struct peers *ps = l->ps;
        char why[256];
        va_list ap;

        if (l->state == L_DEAD)
                return;
        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        if (ps->freeing)
                ;
        else if (l->state == L_CONNECTING)
                /* a neighbour not up yet: retried with backoff, logged
                 * once it was up and went away */
                log_debug("peers: node %u (%s) not reachable: %s", l->node, l->addr, why);
        else if (link_stranger(l)) {
                /* anyone can connect: above debug, rate-limited, so that an
                 * attack grows the log by a bounded amount */
                log_debug("peers: connection from unauthenticated peer %s closed: %s", l->addr,
                          why);
                acceptor_refuse(&ps->acceptor, "unauthenticated connection from %s closed: %s",
                                l->addr, why);
        } else if (l->client && l->state == L_HELLO && error == -ECONNRESET)
                /* a daemon of peer protocol version 1 closes on our HELLO
                 * without a word (later ones answer ERROR, see link_read) */
                log_warn("peers: link to node %u (%s) closed during the handshake: %s (a "
                         "daemon of another peer protocol version? this one speaks version %u)",
                         l->node, l->addr, why, PEER_PROTO_VERSION);
        else
                log_warn("peers: link %s node %u (%s) closed: %s", l->client ? "to" : "from",
                         l->node, l->addr, why);
        link_unauth_done(l);
        if (l->target && l->state != L_CONNECTING && !ps->freeing)
                snprintf(l->target->last_error, sizeof(l->target->last_error), "%s", why);
        l->state = L_DEAD;
        (void)error;
        if (l->watching)
                loop_watch_del(ps->loop, &l->watch);
        l->watching = false;
        close(l->fd);
        l->fd = -1;
        while (!list_empty(&l->ctlq)) {
                struct ctl *c = list_first_entry(&l->ctlq, struct ctl, link);
                list_unlink(&c->link);
                free(c->buf);
                free(c);
        }
        if (l->cur) {
                free(l->cur->buf);
                free(l->cur);
                l->cur = NULL;
        }
        if (l->rx_blocked)
                pool_wait_cancel(ps->pool, &l->waiter);
        if (l->pay) {
                struct rchunk *ch = l->pay;
                l->pay = NULL;
                if (ch->has_ext)
                        pool_release(ps->pool, &ch->ext);
                ch->rx->inflight--;
                free(ch);
        }
        while (!list_empty(&l->rxs)) {
                struct rx *rx = list_first_entry(&l->rxs, struct rx, link);
                list_unlink(&rx->link);
                rx->l = NULL;
                /* A rank whose data all arrived needs the link no more: it
                 * finishes (only its RANK_ACK is lost; the sender sends it
                 * again).  One cut short is dropped. */
                if (rx->ended && !ps->freeing)
                        continue;
                if (!rx->error) {
                        rx->error = -ECONNRESET;
                        snprintf(rx->msg, sizeof(rx->msg), "the link broke mid-transfer");
                }
                rx_free(rx); /* frees now or when its chunks finish */
        }
        l->nrx = 0;
        l->tx_cur = NULL;
        while (!list_empty(&l->txs)) {
                struct tx *tx = list_first_entry(&l->txs, struct tx, link);
                /* its rank is sent again after the reconnect (the steps are
                 * gone already when shutting down) */
                if (tx->rs && !ps->freeing) {
                        tx->rs->rstate[tx->rank_idx] = RANK_TODO;
                        tx->rs->inflight--;
                }
                tx_free(tx);
        }
        l->ntx = 0;
        struct ptarget *t = l->target;
        if (t) {
                loop_timer_cancel(&t->ping);
                t->l = NULL;
                t->down_since = time(NULL);
                t->list_sent = false;
                /* asked, not answered: ask again on reconnect */
                while (!list_empty(&t->gets_active)) {
                        struct rget *g = list_first_entry(&t->gets_active, struct rget, link);
                        list_unlink(&g->link);
                        list_add_tail(&t->gets, &g->link);
                }
                t->ngets_active = 0;
                /* A rank a client waits for goes to the next neighbour, or
                 * fails (the store may have it): this one may never come
                 * back (a lost node).  A node's own restore waits for it. */
                struct list *pos, *tmp;
                list_for_each_safe(pos, tmp, &t->gets) {
                        struct rget *g = list_entry(pos, struct rget, link);
                        if (!g->rj->single || ps->freeing)
                                continue;
                        list_unlink(&g->link);
                        if (rget_next_target(g))
                                continue;
                        struct restore_job *rj = g->rj;
                        if (!rj->error) {
                                rj->error = -EHOSTUNREACH;
                                snprintf(rj->msg, sizeof(rj->msg), "the link to node %u broke and "
                                         "no other neighbour is up", t->node);
                        }
                        free(g);
                        rj->gets_pending--;
                        restore_job_check(rj);
                }
                if (t->rj_listing) {
                        struct restore_job *rj = t->rj_listing;
                        t->rj_listing = NULL;
                        rj->lists_pending--;
                        restore_job_check(rj);
                }
                t->backoff_ms = t->backoff_ms ? MIN(t->backoff_ms * 2, RECONNECT_MAX_MS)
                                              : RECONNECT_MIN_MS;
        }
        if (ps->freeing) {
                link_free(l);
                return;
        }
        /* Freed from a timer: the caller may still be inside a callback of l. */
        struct reaper *rp = calloc(1, sizeof(*rp));
        if (rp) {
                rp->l = l;
                loop_timer_start(ps->loop, &rp->timer, 0, link_reap);
        }
        if (t)
                loop_timer_start(ps->loop, &t->timer, t->backoff_ms, target_timer);
}

static void link_reap(struct loop_timer *timer) {
        struct reaper *rp = container_of(timer, struct reaper, timer);
        link_free(rp->l);
        free(rp);
}

/* ---- rx: one rank in ----------------------------------------------------------------------- */

static struct rx *link_rx(struct plink *l, uint32_t stream) {
        struct list *pos;
        list_for_each(pos, &l->rxs) {
                struct rx *rx = list_entry(pos, struct rx, link);
                if (rx->stream == stream)
                        return rx;
        }
        return NULL;
}

static void rx_free(struct rx *rx) {
        if (rx->inflight || rx->finishing)
                return; /* the last chunk or the finish frees it */
        if (rx->rw) {
                store_rank_abort(rx->store, rx->rw);
                rx->rw = NULL;
        }
        struct restore_job *rj = rx->rj;
        if (rj && rx->error && !rj->error) {
                rj->error = rx->error;
                snprintf(rj->msg, sizeof(rj->msg), "%s", rx->msg);
        }
        free(rx->fds);
        manifest_free(rx->m);
        commit_record_clear(&rx->record);
        free(rx);
        /* the one place a restore transfer ends, whichever way */
        if (rj) {
                rj->gets_pending--;
                restore_job_check(rj);
        }
}

static void rx_ack(struct rx *rx) {
        struct plink *l = rx->l;
        if (!l)
                return;
        if (rx->purpose == PEER_PURPOSE_REPLICATE) {
                struct peer_msg m = { .hdr.type = PEER_MSG_RANK_ACK, .hdr.stream = rx->stream };
                m.rank_ack.status = rx->error;
                snprintf(m.rank_ack.message, sizeof(m.rank_ack.message), "%s",
                         rx->error ? rx->msg : "");
                link_send(l, &m);
        }
        list_unlink(&rx->link);
        l->nrx--;
        rx->l = NULL;
        /* a restoring link keeps at most TX_WINDOW ranks arriving or finishing */
        if (l->target)
                target_pump(l->target);
}

static void area_retention(struct store *store, struct catalog *catalog, const char *job,
                           uint32_t keep);

static void rx_committed(void *userdata, int error);
static void rx_step_commit(struct rx *rx);

static void rx_finished(void *userdata, int error) {
        struct rx *rx = userdata;

        rx->rw = NULL; /* finish frees it either way */
        if (error < 0) {
                rx->finishing = false;
                rx->error = error;
                snprintf(rx->msg, sizeof(rx->msg), "cannot finish the rank on disk: %s",
                         strerror(-error));
                log_error("peers: job %s step %" PRIu64 " rank %u from node %u: %s", rx->m->job,
                          rx->m->step, rx->m->rank, rx->src, rx->msg);
                rx_ack(rx);
                rx_free(rx);
                return;
        }
        /* (void): the rank's files and MANIFEST, written first, are the truth; catalog.c logs
         * a fault and reconcile re-adds the row at the next start */
        (void)catalog_job_add(rx->catalog, rx->m->job, rx->m->uid);
        /* (void): the rank's files and MANIFEST, written first, are the truth; catalog.c logs
         * a fault and reconcile re-adds the row at the next start */
        (void)catalog_rank_add(rx->catalog, rx->m);
        list_add_tail(&rx->ps->commits, &rx->clink);
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
        list_for_each(pos, &rx->ps->commits) {
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
        store_step_commit(rx->store, &rx->record, rx_committed, rx);
}

static void rx_committed(void *userdata, int error) {
        struct rx *rx = userdata;
        struct list *pos;

        rx->finishing = false;
        rx->committing = false;
        list_unlink(&rx->clink);
        list_for_each(pos, &rx->ps->commits) {
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
                /* (void): the rank's files and MANIFEST, written first, are the truth;
                 * catalog.c logs a fault and reconcile re-adds the row at the next start */
                (void)catalog_ckpt_upsert(rx->catalog, rx->m->job, rx->m->step, rx->m->world_size,
                                          CKPT_STATE_COMMITTED, (int64_t)time(NULL));
                if (rx->local) {
                        /* the neighbour it came from holds it: nothing to
                         * send back there */
                        /* (void): a replication state a fault lost (catalog.c logs it) leaves
                         * the step pending, so it is offered to the target again at the next
                         * connect */
                        (void)catalog_repl_set(rx->catalog, rx->m->job, rx->m->step, rx->from,
                                               CATALOG_REPL_DONE, NULL);
                        /* and the object store has it already (or its node
                         * will flush it): a flush from here would rewrite
                         * this node's manifest of an old step */
                        if (rx->ps->opts.store_configured)
                                /* (void): catalog.c logs a fault; the step then looks
                                 * unflushed here and may be flushed again, which costs
                                 * uploads, not data (issue 10 gives this column one owner) */
                                (void)catalog_ckpt_remote_set(rx->catalog, rx->m->job, rx->m->step,
                                                              CATALOG_REMOTE_DONE, NULL);
                }
                /* (void): catalog_flush() logs a failed commit and drops the batch; reconcile
                 * re-derives the rows from the manifests at the next start */
                (void)catalog_flush(rx->catalog);
                log_info("peers: job %s step %" PRIu64 " rank %u %s node %u (%u shards)",
                         rx->m->job, rx->m->step, rx->m->rank,
                         rx->local ? "restored from" : "replicated from", rx->from,
                         rx->m->nshards);
        }
        struct restore_job *rj = rx->rj;
        struct peers *ps = rx->ps;
        char job[CKPT_NAME_MAX + 1];
        snprintf(job, sizeof(job), "%s", rx->m->job);
        struct store *store = rx->store;
        struct catalog *catalog = rx->catalog;
        bool area = !rx->local;

        rx_ack(rx);
        if (rj && !error)
                rj->ranks_done++;
        rx_free(rx); /* reports to rj */
        /* replicas follow the same retention as local checkpoints */
        if (area && !error)
                area_retention(store, catalog, job, ps->opts.keep);
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
        store_rank_finish(rx->store, rx->rw, rx->m, rx_finished, rx);
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

static void rchunk_written(struct store_xfer *x, int error) {
        struct rchunk *ch = container_of(x, struct rchunk, xfer);
        struct rx *rx = ch->rx;

        if (error < 0 && !rx->error) {
                rx->error = error;
                snprintf(rx->msg, sizeof(rx->msg), "writing shard %s: %s",
                         rx->m->shards[ch->shard].name, strerror(-error));
        }
        pool_release(rx->ps->pool, &ch->ext);
        free(ch);
        rx_chunk_done(rx);
}

static void rchunk_verify_run(struct work *w) {
        struct rchunk *ch = container_of(w, struct rchunk, work);

        ch->bad_block = manifest_shard_check(&ch->rx->m->shards[ch->shard], ch->offset, pool_extent_addr(&ch->ext),
                                             ch->length);
}

static void rchunk_verify_done(struct work *w) {
        struct rchunk *ch = container_of(w, struct rchunk, work);
        struct rx *rx = ch->rx;

        if (ch->bad_block >= 0 && !rx->error) {
                rx->error = -EBADMSG;
                snprintf(rx->msg, sizeof(rx->msg), "shard %s block %" PRId64 " failed its CRC32C",
                         rx->m->shards[ch->shard].name, ch->bad_block);
                log_error("peers: job %s step %" PRIu64 " rank %u from node %u: %s", rx->m->job,
                          rx->m->step, rx->m->rank, rx->src, rx->msg);
        }
        if (rx->error) {
                pool_release(rx->ps->pool, &ch->ext);
                free(ch);
                rx_chunk_done(rx);
                return;
        }
        ch->xfer = (struct store_xfer){
                .fd = rx->fds[ch->shard],
                .slot = ch->ext.slot,
                .slot_offset = pool_extent_offset(&ch->ext),
                .file_offset = ch->offset,
                .length = store_pad_tail(rx->store, pool_extent_addr(&ch->ext), ch->length),
                .done = rchunk_written,
        };
        store_write(rx->store, &ch->xfer);
}

/* ---- rx: the messages of a transfer ------------------------------------------------------ */

/* RANK_BEGIN: where it goes, what it must be. */
static void rx_begin(struct plink *l, const struct peer_msg *m, bool asked) {
        struct peers *ps = l->ps;
        const struct peer_rank_begin *b = &m->rank_begin;
        int r;

        if (link_rx(l, m->hdr.stream)) {
                link_close(l, -EPROTO, "RANK_BEGIN on stream %u, which is still open",
                           m->hdr.stream);
                return;
        }
        if (l->nrx >= PEER_STREAMS_MAX) {
                link_close(l, -EPROTO, "RANK_BEGIN while %u rank transfers are open (at most %u)",
                           l->nrx, PEER_STREAMS_MAX);
                return;
        }
        struct rx *rx = calloc(1, sizeof(*rx));
        if (!rx) {
                link_close(l, -ENOMEM, "out of memory");
                return;
        }
        rx->ps = ps;
        rx->l = l;
        rx->stream = m->hdr.stream;
        rx->purpose = b->purpose;
        rx->src = b->src_node;
        rx->from = l->node;
        list_init(&rx->clink);
        list_add_tail(&l->rxs, &rx->link);
        l->nrx++;

        if (b->purpose == PEER_PURPOSE_REPLICATE) {
                /* only the sender's own ranks, and only from a node whose
                 * replicas this node is meant to hold */
                struct replica_area *a = l->client ? NULL : area_for(ps, l->node);
                if (!a || b->src_node != l->node) {
                        link_close(l, -EPERM, "node %u may not replicate node %u's ranks here",
                                   l->node, b->src_node);
                        return;
                }
                rx->store = a->store;
                rx->catalog = a->catalog;
        } else {
                if (!l->client || !asked) {
                        link_close(l, -EPROTO, "a restore transfer nobody asked for");
                        return;
                }
                rx->store = ps->store;
                rx->catalog = ps->catalog;
                rx->local = true;
        }
        r = manifest_parse(&rx->m, b->manifest, b->manifest_len);
        if (r < 0 || strcmp(rx->m->job, b->job.str) || rx->m->step != b->step ||
            rx->m->rank != b->rank || rx->m->world_size != b->world_size) {
                link_close(l, -EBADMSG, "RANK_BEGIN with a manifest that is malformed or "
                           "names another rank");
                return;
        }
        r = store_rank_begin(rx->store, rx->m->job, rx->m->step, rx->m->rank, &rx->rw);
        rx->fds = calloc(rx->m->nshards ? rx->m->nshards : 1, sizeof(int));
        if (r == 0 && !rx->fds)
                r = -ENOMEM;
        for (uint32_t i = 0; r == 0 && i < rx->m->nshards; i++)
                r = store_shard_create(rx->store, rx->rw, rx->m->shards[i].name,
                                       rx->m->shards[i].size, &rx->fds[i]);
        if (r < 0) {
                /* Refuse the rank, not the link: the data that follows is
                 * read and dropped, and RANK_ACK says why. */
                rx->error = r;
                snprintf(rx->msg, sizeof(rx->msg), "cannot store job %s step %" PRIu64
                         " rank %u: %s", rx->m->job, rx->m->step, rx->m->rank, strerror(-r));
                log_error("peers: %s (from node %u)", rx->msg, l->node);
                if (rx->rw) {
                        store_rank_abort(rx->store, rx->rw);
                        rx->rw = NULL;
                }
        }
}

static void link_resume_rx(struct pool_waiter *w, const struct pool_extent *e, int error);

/* DATA header: check it follows on, then find memory for its payload.
 * false: stop reading until the memory comes (link_resume_rx). */
static bool rx_data(struct plink *l, const struct peer_msg *m) {
        struct peers *ps = l->ps;
        struct rx *rx = link_rx(l, m->hdr.stream);
        const struct peer_data *d = &m->data;

        if (l->target)
                l->target->last_heard_ms = loop_now_ms();
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
        ch->shard = d->shard;
        ch->offset = d->offset;
        ch->length = d->length;
        rx->inflight++;
        l->pay = ch;
        l->pay_got = 0;
        /* the whole frame or nothing: its payload is read into the extent
         * (config_validate keeps slots at least a frame large) */
        uint32_t units = pool_units_for(ps->pool, d->length);
        if ((uint64_t)units * POOL_UNIT < d->length) {
                link_close(l, -EMSGSIZE, "a %u-byte frame does not fit a pool slot", d->length);
                return false;
        }
        int r = pool_try_acquire_whole(ps->pool, rx->m->uid, units, &ch->ext);
        if (r == 1) {
                ch->has_ext = true;
                return true;
        }
        if (r < 0) {
                link_close(l, r, "no pool memory for incoming data: %s", strerror(-r));
                return false;
        }
        l->rx_blocked = true;
        pool_wait_whole(ps->pool, &l->waiter, rx->m->uid, units, ps->opts.pool_wait_ms,
                        link_resume_rx);
        link_update_events(l);
        return false;
}

static void link_read(struct plink *l);

static void link_resume_rx(struct pool_waiter *w, const struct pool_extent *e, int error) {
        struct plink *l = container_of(w, struct plink, waiter);

        l->rx_blocked = false;
        if (!e) {
                link_close(l, error, "no pool memory for incoming data");
                return;
        }
        l->pay->ext = *e;
        l->pay->has_ext = true;
        link_update_events(l);
        link_read(l);
}

/* The payload of the DATA in l->pay is in memory: check, then write. */
static void rx_payload_done(struct plink *l) {
        struct rchunk *ch = l->pay;
        struct rx *rx = ch->rx;

        l->pay = NULL;
        if (rx->error) {
                pool_release(rx->ps->pool, &ch->ext);
                free(ch);
                rx->inflight--;
                return;
        }
        ch->work.run = rchunk_verify_run;
        ch->work.done = rchunk_verify_done;
        worker_pool_submit(rx->ps->workers, &ch->work);
}

static void rx_end(struct plink *l, const struct peer_msg *m) {
        struct rx *rx = link_rx(l, m->hdr.stream);
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

/* ---- area retention ---------------------------------------------------------------------- */

struct ret_list {
        uint64_t *steps;
        size_t n, cap;
};

static int ret_collect(void *userdata, const char *job, uint64_t step, uint8_t state) {
        struct ret_list *l = userdata;
        (void)job;
        if (state != CKPT_STATE_COMMITTED)
                return 0;
        if (l->n == l->cap) {
                size_t cap = l->cap ? l->cap * 2 : 16;
                uint64_t *n = realloc(l->steps, cap * sizeof(*n));
                if (!n)
                        return -ENOMEM;
                l->steps = n;
                l->cap = cap;
        }
        l->steps[l->n++] = step;
        return 0;
}

/* Keep the newest `keep` committed steps of job in a replica area
 * (catalog_ckpt_foreach lists newest first); pinned ones stay. */
static void area_retention(struct store *store, struct catalog *catalog, const char *job,
                           uint32_t keep) {
        struct ret_list l = { 0 };
        if (keep == 0 || catalog_ckpt_foreach(catalog, job, ret_collect, &l) < 0) {
                free(l.steps);
                return;
        }
        for (size_t i = keep; i < l.n; i++) {
                if (catalog_pinned(catalog, job, l.steps[i]) == 1)
                        continue;
                if (store_step_delete(store, job, l.steps[i]) == 0) {
                        /* (void): the files are gone; a row a fault left behind (catalog.c
                         * logs it) is forgotten by reconcile at the next start */
                        (void)catalog_ckpt_delete(catalog, job, l.steps[i]);
                        log_info("peers: replica of job %s step %" PRIu64 " removed by retention "
                                 "(keep %u)", job, l.steps[i], keep);
                }
        }
        free(l.steps);
}

/* ---- replication (the connecting side) ----------------------------------------------------- */

static void rstep_free(struct rstep *rs) {
        list_unlink(&rs->link);
        free(rs->ranks);
        free(rs->rstate);
        free(rs);
}

/* The step owed to t, or NULL. */
static struct rstep *rstep_find(struct ptarget *t, const char *job, uint64_t step) {
        struct list *pos;
        list_for_each(pos, &t->steps) {
                struct rstep *o = list_entry(pos, struct rstep, link);
                if (o->step == step && !strcmp(o->job, job))
                        return o;
        }
        return NULL;
}

static int rstep_queue(struct ptarget *t, const char *job, uint64_t step) {
        struct peers *ps = t->ps;

        if (rstep_find(t, job, step))
                return 0;
        struct rstep *rs = calloc(1, sizeof(*rs));
        if (!rs)
                return -ENOMEM;
        rs->t = t;
        snprintf(rs->job, sizeof(rs->job), "%s", job);
        rs->step = step;
        rs->ranks = calloc(256, sizeof(uint32_t));
        rs->rstate = calloc(256, 1);
        if (!rs->ranks || !rs->rstate ||
            catalog_ranks(ps->catalog, job, step, rs->ranks, 256, &rs->nranks) < 0) {
                free(rs->ranks);
                free(rs->rstate);
                free(rs);
                return -EIO;
        }
        list_init(&rs->link);
        list_add_tail(&t->steps, &rs->link);
        t->steps_pending++;
        return 0;
}

static void rstep_done(struct rstep *rs, int status, const char *msg) {
        struct ptarget *t = rs->t;
        struct peers *ps = t->ps;
        char job[CKPT_NAME_MAX + 1];
        uint64_t step = rs->step;

        snprintf(job, sizeof(job), "%s", rs->job);
        if (status == 0) {
                /* (void): a replication state a fault lost (catalog.c logs it) leaves the step
                 * pending, so it is offered to the target again at the next connect */
                (void)catalog_repl_set(ps->catalog, job, step, t->node, CATALOG_REPL_DONE, NULL);
                log_info("peers: job %s step %" PRIu64 " replicated to node %u", job, step, t->node);
        } else {
                /* (void): a replication state a fault lost (catalog.c logs it) leaves the step
                 * pending, so it is offered to the target again at the next connect */
                (void)catalog_repl_set(ps->catalog, job, step, t->node, CATALOG_REPL_FAILED, msg);
                log_error("peers: node %u refused job %s step %" PRIu64 ": %s (%s); it stays "
                          "degraded until the node is back or the step is retried", t->node, job,
                          step, msg, strerror(-status));
        }
        t->steps_pending--;
        rstep_free(rs);
        if (ps->on_changed)
                ps->on_changed(ps->userdata, job, step);
}

/* Nothing of rs in flight: report it if every rank was acknowledged or
 * one failed.  true: rs is gone. */
static bool rstep_check(struct rstep *rs) {
        if (rs->inflight)
                return false;
        if (rs->status < 0) {
                rstep_done(rs, rs->status, rs->msg);
                return true;
        }
        if (rs->acked == rs->nranks) {
                rstep_done(rs, 0, NULL);
                return true;
        }
        return false;
}

static void rstep_fail(struct rstep *rs, int status, const char *msg) {
        if (rs->status < 0)
                return; /* the first failure is the one reported */
        rs->status = status < 0 ? status : -EIO;
        snprintf(rs->msg, sizeof(rs->msg), "%s", msg);
}

/* Start rank transfers of the steps owed to t, oldest first, until its
 * link has TX_WINDOW open; ask for ranks to restore likewise. */
static void target_pump(struct ptarget *t) {
        struct peers *ps = t->ps;
        struct plink *l = t->l;
        struct list *pos, *tmp;

        if (!l || l->state != L_READY || ps->freeing)
                return;
        /* restore: a node with missing steps wants them back; the answers
         * arriving or being finished here stay within the window */
        while (!list_empty(&t->gets) && t->ngets_active < TX_WINDOW && l->nrx < TX_WINDOW) {
                struct rget *g = list_first_entry(&t->gets, struct rget, link);
                list_unlink(&g->link);
                list_add_tail(&t->gets_active, &g->link);
                t->ngets_active++;
                struct peer_msg m = { .hdr.type = PEER_MSG_GET_RANK, .hdr.stream = ++l->next_stream };
                g->stream = m.hdr.stream;
                ckpt_name_set(&m.get_rank.job, g->job);
                m.get_rank.step = g->step;
                m.get_rank.rank = g->rank;
                link_send(l, &m);
                if (t->l != l || l->state != L_READY)
                        return; /* the send failed and closed the link */
        }
        list_for_each_safe(pos, tmp, &t->steps) {
                struct rstep *rs = list_entry(pos, struct rstep, link);
                for (size_t i = 0; i < rs->nranks && l->ntx < TX_WINDOW && rs->status == 0; i++) {
                        if (rs->rstate[i] != RANK_TODO)
                                continue;
                        int err = 0;
                        struct tx *tx = tx_new(l, ps->store, rs->job, rs->step, rs->ranks[i],
                                               PEER_PURPOSE_REPLICATE, ps->opts.topo.index,
                                               ++l->next_stream, &err);
                        if (!tx) {
                                /* gone locally (retention) or unreadable: nothing to owe */
                                log_warn("peers: job %s step %" PRIu64 " rank %u cannot be read "
                                         "for replication: %s", rs->job, rs->step, rs->ranks[i],
                                         strerror(-err));
                                rstep_fail(rs, err, "the rank cannot be read on its node");
                                break;
                        }
                        tx->rs = rs;
                        tx->rank_idx = i;
                        rs->rstate[i] = RANK_SENDING;
                        rs->inflight++;
                        link_tx_add(l, tx);
                }
                rstep_check(rs);
                if (l->ntx >= TX_WINDOW)
                        break;
        }
        link_flush(l);
}

static void rank_acked(struct plink *l, const struct peer_msg *m) {
        struct tx *tx = link_tx(l, m->hdr.stream);
        if (!tx || !tx->ended || !tx->rs || tx == l->tx_cur) {
                link_close(l, -EPROTO, "RANK_ACK for a transfer not in flight");
                return;
        }
        struct rstep *rs = tx->rs;
        size_t i = tx->rank_idx;
        link_tx_remove(l, tx);
        rs->inflight--;
        if (m->rank_ack.status < 0) {
                rs->rstate[i] = RANK_TODO;
                rstep_fail(rs, m->rank_ack.status, m->rank_ack.message);
        } else {
                rs->rstate[i] = RANK_ACKED;
                rs->acked++;
        }
        rstep_check(rs);
        target_pump(l->target);
}

static int pending_cb(void *userdata, const char *job, uint64_t step) {
        rstep_queue(userdata, job, step);
        return 0;
}

int peers_step_committed(struct peers *ps, const char *job, uint64_t step) {
        for (size_t i = 0; i < ps->ntargets; i++) {
                struct ptarget *t = &ps->targets[i];
                int r = catalog_repl_set(ps->catalog, job, step, t->node, CATALOG_REPL_PENDING, NULL);
                if (r < 0)
                        return r;
                rstep_queue(t, job, step);
                target_pump(t);
        }
        return 0;
}

int peers_replicated(struct peers *ps, const char *job, uint64_t step) {
        uint32_t done, total;
        int r = catalog_repl_counts(ps->catalog, job, step, &done, &total);
        if (r < 0)
                return r;
        return total >= ps->ntargets && done >= ps->ntargets ? 1 : 0;
}

struct replica_area *peers_area_of(struct peers *ps, const char *job, uint64_t step,
                                   uint32_t rank) {
        for (size_t i = 0; ps && i < ps->nareas; i++)
                if (catalog_rank_exists(ps->areas[i].catalog, job, step, rank) == 1)
                        return &ps->areas[i];
        return NULL;
}

/* ---- restore (the connecting side) ------------------------------------------------------- */

/* The rank asked of t on stream, or NULL. */
static struct rget *target_get(struct ptarget *t, uint32_t stream) {
        struct list *pos;
        if (!t)
                return NULL;
        list_for_each(pos, &t->gets_active) {
                struct rget *g = list_entry(pos, struct rget, link);
                if (g->stream == stream)
                        return g;
        }
        return NULL;
}

/* Queue g on the next connected target after the one it was on: true if
 * there is one. */
static bool rget_next_target(struct rget *g) {
        struct peers *ps = g->rj->ps;
        for (size_t i = g->tidx + 1; i < ps->ntargets; i++) {
                struct ptarget *t = &ps->targets[i];
                if (t->l && t->l->state == L_READY) {
                        g->tidx = i;
                        list_add_tail(&t->gets, &g->link);
                        target_pump(t);
                        return true;
                }
        }
        return false;
}

int peers_fetch_rank(struct peers *ps, const char *job, uint64_t step, uint32_t rank,
                     void (*done)(void *userdata, int error, uint32_t ranks, const char *message),
                     void *userdata) {
        struct restore_job *rj = calloc(1, sizeof(*rj));
        struct rget *g = calloc(1, sizeof(*g));
        if (!rj || !g) {
                free(rj);
                free(g);
                return -ENOMEM;
        }
        rj->ps = ps;
        rj->single = true;
        snprintf(rj->job, sizeof(rj->job), "%s", job);
        rj->step = step;
        rj->done = done;
        rj->userdata = userdata;
        g->rj = rj;
        snprintf(g->job, sizeof(g->job), "%s", job);
        g->step = step;
        g->rank = rank;
        list_init(&g->link);
        /* tidx is unsigned: start "before" target 0 */
        g->tidx = (size_t)-1;
        if (!rget_next_target(g)) {
                free(g);
                free(rj);
                return -EHOSTUNREACH;
        }
        list_init(&rj->link);
        list_add_tail(&ps->restores, &rj->link);
        rj->gets_pending = 1;
        return 0;
}

static void restore_job_check(struct restore_job *rj) {
        struct peers *ps = rj->ps;
        if (rj->lists_pending || rj->gets_pending)
                return;
        list_unlink(&rj->link);
        int error = rj->error;
        if (!error && rj->ranks_done == 0 && rj->present == 0 && rj->step != CKPT_STEP_LATEST) {
                error = -ENOENT;
                snprintf(rj->msg, sizeof(rj->msg), "no neighbour holds step %" PRIu64
                         " of job '%s' for node %u", rj->step, rj->job, ps->opts.topo.index);
        }
        if (rj->ranks_done)
                log_info("peers: restored %u ranks from neighbours", rj->ranks_done);
        /* every step restored gets its local commit record (rx did it per
         * rank); the catalog flush makes it visible */
        /* (void): catalog_flush() logs a failed commit and drops the batch; reconcile
         * re-derives the rows from the manifests at the next start */
        (void)catalog_flush(ps->catalog);
        if (rj->done)
                rj->done(rj->userdata, error, rj->ranks_done, error ? rj->msg : NULL);
        free(rj->claimed.v);
        free(rj);
}

static bool rkeys_has(const struct rkeys *ks, const char *job, uint64_t step, uint32_t rank) {
        for (size_t i = 0; i < ks->n; i++)
                if (ks->v[i].step == step && ks->v[i].rank == rank && !strcmp(ks->v[i].job, job))
                        return true;
        return false;
}

static int rkeys_add(struct rkeys *ks, const char *job, uint64_t step, uint32_t rank) {
        if (ks->n == ks->cap) {
                size_t cap = ks->cap ? ks->cap * 2 : 64;
                void *n = realloc(ks->v, cap * sizeof(*ks->v));
                if (!n)
                        return -ENOMEM;
                ks->v = n;
                ks->cap = cap;
        }
        struct rkey *k = &ks->v[ks->n++];
        snprintf(k->job, sizeof(k->job), "%s", job);
        k->step = step;
        k->rank = rank;
        return 0;
}

/* true: the rank is this job's to ask for (no earlier listing offered it) */
static bool rj_claim(struct restore_job *rj, const struct peer_list_entry *e) {
        return !rkeys_has(&rj->claimed, e->job.str, e->step, e->rank) &&
               rkeys_add(&rj->claimed, e->job.str, e->step, e->rank) == 0;
}

/* The newest `keep` committed steps of each job (all if keep is 0): what
 * a target keeps of this node's after its own retention. */
struct step_list {
        struct rkeys steps;        /* rank unused */
        uint32_t keep, in_job;
};

static int step_list_committed(void *userdata, const char *job, uint64_t step, uint8_t state) {
        struct step_list *sl = userdata;
        const struct rkeys *ks = &sl->steps;
        if (state != CKPT_STATE_COMMITTED)
                return 0;
        /* by job, newest step first */
        if (ks->n == 0 || strcmp(ks->v[ks->n - 1].job, job))
                sl->in_job = 0;
        if (sl->keep && sl->in_job >= sl->keep)
                return 0;
        sl->in_job++;
        return rkeys_add(&sl->steps, job, step, 0);
}

/*
 * The target listed every rank of this node it holds.  A committed step
 * of ours with a rank it lacks, and not on its way there already, lost its
 * replica there (a replaced disk, a wiped replica area): it is owed again,
 * from its ranks the target lacks.  Without this a replacement target
 * would hold this node's checkpoints only from the next save on.  Only
 * the steps the target's retention keeps: an older one (pinned here) would
 * be sent and deleted there on every reconnect.
 */
static void target_reseed(struct ptarget *t) {
        struct peers *ps = t->ps;
        struct step_list sl = { .keep = ps->opts.keep };
        uint32_t ranks[256];

        if (catalog_ckpt_foreach(ps->catalog, NULL, step_list_committed, &sl) < 0) {
                free(sl.steps.v);
                return;
        }
        for (size_t i = 0; i < sl.steps.n; i++) {
                const char *job = sl.steps.v[i].job;
                uint64_t step = sl.steps.v[i].step;
                size_t n = 0, lacking = 0;

                if (rstep_find(t, job, step) ||
                    catalog_ranks(ps->catalog, job, step, ranks, 256, &n) < 0)
                        continue;
                for (size_t k = 0; k < MIN(n, (size_t)256); k++)
                        lacking += !rkeys_has(&t->held, job, step, ranks[k]);
                if (!lacking)
                        continue;
                log_notice("peers: node %u lacks %zu of this node's %zu ranks of job %s step %" PRIu64
                           " (a new disk?): sending them again", t->node, lacking, n, job, step);
                if (catalog_repl_set(ps->catalog, job, step, t->node, CATALOG_REPL_PENDING, NULL) < 0 ||
                    rstep_queue(t, job, step) < 0)
                        continue;
                struct rstep *rs = rstep_find(t, job, step);
                for (size_t k = 0; k < rs->nranks; k++) {
                        if (rkeys_has(&t->held, job, step, rs->ranks[k])) {
                                rs->rstate[k] = RANK_ACKED;
                                rs->acked++;
                        }
                }
        }
        free(sl.steps.v);
}

static void list_reply(struct plink *l, const struct peer_msg *m) {
        struct ptarget *t = l->target;
        struct restore_job *rj = t ? t->rj_listing : NULL;
        struct peers *ps = l->ps;

        if (!rj || m->hdr.stream != t->list_stream) {
                link_close(l, -EPROTO, "LIST_REP nobody asked for");
                return;
        }
        for (uint32_t i = 0; i < m->list_rep.count; i++) {
                const struct peer_list_entry *e = &m->list_rep.entries[i];
                if (!e->committed)
                        continue;
                if (t->listing_all && rkeys_add(&t->held, e->job.str, e->step, e->rank) < 0)
                        t->listing_all = false; /* no memory: no re-seeding this time */
                if (rj->job[0] && strcmp(rj->job, e->job.str))
                        continue;
                if (rj->step != CKPT_STEP_LATEST && rj->step != e->step)
                        continue;
                if (catalog_rank_exists(ps->catalog, e->job.str, e->step, e->rank) == 1) {
                        rj->present++;
                        continue;
                }
                /* a step deleted here by retention must not come back:
                 * only steps newer than the newest local committed one, or
                 * the one asked for */
                uint64_t latest;
                uint32_t ws;
                struct ckpt_ckpt_entry ce;
                if (rj->step == CKPT_STEP_LATEST &&
                    catalog_latest_committed(ps->catalog, e->job.str, &latest, &ws) == 0 &&
                    e->step < latest && catalog_ckpt_get(ps->catalog, e->job.str, e->step, &ce) < 0)
                        continue;
                if (!rj_claim(rj, e))
                        continue;
                struct rget *g = calloc(1, sizeof(*g));
                if (!g)
                        continue;
                g->rj = rj;
                snprintf(g->job, sizeof(g->job), "%s", e->job.str);
                g->step = e->step;
                g->rank = e->rank;
                g->world_size = e->world_size;
                list_init(&g->link);
                list_add_tail(&t->gets, &g->link);
                rj->gets_pending++;
        }
        if (!m->list_rep.more) {
                t->rj_listing = NULL;
                rj->lists_pending--;
                if (t->listing_all)
                        target_reseed(t);
                target_pump(t);
                restore_job_check(rj);
        }
}

static void target_list(struct ptarget *t, struct restore_job *rj) {
        struct plink *l = t->l;
        struct peer_msg m = { .hdr.type = PEER_MSG_LIST_REQ };

        t->list_stream = m.hdr.stream = ++l->next_stream;
        t->held.n = 0;
        t->listing_all = !rj->job[0];
        if (rj->job[0])
                ckpt_name_set(&m.list_req.job, rj->job);
        m.list_req.src_node = t->ps->opts.topo.index;
        t->rj_listing = rj;
        rj->lists_pending++;
        link_send(l, &m);
}

int peers_restore(struct peers *ps, const char *job, uint64_t step,
                  void (*done)(void *userdata, int error, uint32_t ranks, const char *message),
                  void *userdata) {
        struct restore_job *rj = calloc(1, sizeof(*rj));
        if (!rj)
                return -ENOMEM;
        rj->ps = ps;
        snprintf(rj->job, sizeof(rj->job), "%s", job ? job : "");
        rj->step = step;
        rj->done = done;
        rj->userdata = userdata;
        list_init(&rj->link);
        list_add_tail(&ps->restores, &rj->link);
        uint32_t asked = 0;
        for (size_t i = 0; i < ps->ntargets; i++) {
                struct ptarget *t = &ps->targets[i];
                if (t->l && t->l->state == L_READY && !t->rj_listing) {
                        target_list(t, rj);
                        asked++;
                }
        }
        if (!asked) {
                rj->error = -EHOSTUNREACH;
                snprintf(rj->msg, sizeof(rj->msg), "no neighbour is connected (targets: %zu)",
                         ps->ntargets);
        }
        restore_job_check(rj);
        return 0;
}

static void startup_restore_done(void *userdata, int error, uint32_t ranks, const char *message) {
        struct peers *ps = userdata;
        (void)error;
        (void)ranks;
        (void)message;
        ps->startup_rj = NULL;
}

/* Restore at start: each target, when its link comes up, is asked for
 * what it holds of this node.  Targets that come up while that restore
 * runs join it, so a rank listed by two of them is pulled once (from the
 * first that listed it). */
static void restore_on_connect(struct ptarget *t) {
        struct peers *ps = t->ps;
        if (!ps->opts.restore_on_start || t->rj_listing)
                return;
        struct restore_job *rj = ps->startup_rj;
        if (!rj) {
                rj = calloc(1, sizeof(*rj));
                if (!rj)
                        return;
                rj->ps = ps;
                rj->step = CKPT_STEP_LATEST;
                rj->done = startup_restore_done;
                rj->userdata = ps;
                list_init(&rj->link);
                list_add_tail(&ps->restores, &rj->link);
                ps->startup_rj = rj;
        }
        target_list(t, rj);
}

/* ---- the answering side: LIST_REQ, GET_RANK ---------------------------------------------- */

struct list_fill {
        struct peer_msg *m;
        struct plink *l;
        struct catalog *catalog;
        int error;
};

static int list_fill_cb(void *userdata, const char *job, uint64_t step, uint8_t state) {
        struct list_fill *lf = userdata;
        uint32_t ranks[256];
        size_t n = 0;
        struct ckpt_ckpt_entry e;

        if (state != CKPT_STATE_COMMITTED || catalog_ckpt_get(lf->catalog, job, step, &e) < 0 ||
            catalog_ranks(lf->catalog, job, step, ranks, 256, &n) < 0)
                return 0;
        for (size_t i = 0; i < MIN(n, (size_t)256); i++) {
                struct peer_list_rep *r = &lf->m->list_rep;
                /* a page is full at PEER_LIST_PAGE entries or when one more
                 * long name would not fit the message bound */
                if (r->count == PEER_LIST_PAGE ||
                    peer_list_rep_size(r, r->count) + 19 + strlen(job) > PEER_MSG_MAX) {
                        r->more = 1;
                        link_send(lf->l, lf->m);
                        r->count = 0;
                }
                struct peer_list_entry *le = &r->entries[r->count++];
                ckpt_name_set(&le->job, job);
                le->step = step;
                le->rank = ranks[i];
                le->world_size = e.world_size;
                le->committed = 1;
        }
        return 0;
}

static void answer_list(struct plink *l, const struct peer_msg *req) {
        struct peers *ps = l->ps;
        struct replica_area *a = area_for(ps, req->list_req.src_node);
        struct peer_msg *m = calloc(1, sizeof(*m));

        if (!m) {
                send_error(l, req->hdr.stream, -ENOMEM, "out of memory");
                return;
        }
        m->hdr.type = PEER_MSG_LIST_REP;
        m->hdr.stream = req->hdr.stream;
        if (a) {
                struct list_fill lf = { .m = m, .l = l, .catalog = a->catalog };
                /* list_fill_cb never stops the walk: a non-zero result is
                 * the catalog's, and the neighbour gets a short list */
                int r = catalog_ckpt_foreach(a->catalog,
                                             req->list_req.job.len ? req->list_req.job.str : NULL,
                                             list_fill_cb, &lf);
                if (r < 0)
                        log_warn("peers: node %u's replica list for %s may be incomplete: %s",
                                 req->list_req.src_node, l->addr, strerror(-r));
        }
        m->list_rep.more = 0;
        link_send(l, m);
        free(m);
}

static void answer_get(struct plink *l, const struct peer_msg *req) {
        struct peers *ps = l->ps;
        const struct peer_get_rank *g = &req->get_rank;
        struct store *store = NULL;
        uint32_t src = ps->opts.topo.index;

        if (l->ntx >= PEER_STREAMS_MAX || link_tx(l, req->hdr.stream)) {
                send_error(l, req->hdr.stream, -EBUSY, "%u transfers are running on this "
                           "connection (at most %u), or stream %u is in use", l->ntx,
                           PEER_STREAMS_MAX, req->hdr.stream);
                return;
        }
        if (catalog_rank_exists(ps->catalog, g->job.str, g->step, g->rank) == 1) {
                store = ps->store;
        } else {
                struct replica_area *a = peers_area_of(ps, g->job.str, g->step, g->rank);
                if (a) {
                        store = a->store;
                        src = a->src;
                }
        }
        if (!store) {
                send_error(l, req->hdr.stream, -ENOENT, "node %u holds no rank %u of job %s step "
                           "%" PRIu64, ps->opts.topo.index, g->rank, g->job.str, g->step);
                return;
        }
        int err = 0;
        struct tx *tx = tx_new(l, store, g->job.str, g->step, g->rank, PEER_PURPOSE_RESTORE, src,
                               req->hdr.stream, &err);
        if (!tx) {
                send_error(l, req->hdr.stream, err, "cannot read rank %u: %s", g->rank,
                           strerror(-err));
                return;
        }
        link_tx_add(l, tx);
        link_flush(l);
}

/* ---- links: input ---------------------------------------------------------------------------- */

static void target_ping(struct loop_timer *timer) {
        struct ptarget *t = container_of(timer, struct ptarget, ping);
        struct plink *l = t->l;

        if (!l || l->state != L_READY)
                return;
        if (loop_now_ms() - t->last_heard_ms > PING_TIMEOUT_MS) {
                link_close(l, -ETIMEDOUT, "no answer for %u s", PING_TIMEOUT_MS / 1000);
                return;
        }
        struct peer_msg m = { .hdr.type = PEER_MSG_PING };
        m.ping.value = loop_now_ms();
        link_send(l, &m);
        loop_timer_start(t->ps->loop, &t->ping, PING_EVERY_MS, target_ping);
}

/* The handshake succeeded: from the next frame on, each direction is
 * MACed under its own key (peer/framemac.h).  0 or -errno. */
static int link_keys(struct plink *l) {
        struct peers *ps = l->ps;
        uint32_t self = ps->opts.topo.index;
        uint8_t c2s[PEER_FRAME_KEY_SIZE], s2c[PEER_FRAME_KEY_SIZE];
        int r;

        /* [cluster] peer_frame_mac = no: frames go without tags (both sides
         * agreed: the handshake MAC covers the setting) */
        if (ps->opts.frames_unsealed)
                return 0;
        if (l->client)
                r = peer_frame_keys(ps->psk, ps->psk_len, l->nonce_own, l->nonce_peer, self,
                                    l->node, c2s, s2c);
        else
                r = peer_frame_keys(ps->psk, ps->psk_len, l->nonce_peer, l->nonce_own, l->node,
                                    self, c2s, s2c);
        if (r == 0)
                r = frame_mac_new(&l->mac_tx, l->client ? c2s : s2c);
        if (r == 0)
                r = frame_mac_new(&l->mac_rx, l->client ? s2c : c2s);
        explicit_bzero(c2s, sizeof(c2s));
        explicit_bzero(s2c, sizeof(s2c));
        return r;
}

static void link_ready(struct plink *l) {
        struct ptarget *t = l->target;

        link_unauth_done(l);
        int r = link_keys(l);
        if (r < 0) {
                link_close(l, r, "cannot derive the frame keys: %s", strerror(-r));
                return;
        }
        l->state = L_READY;
        log_info("peers: link %s node %u (%s) authenticated", l->client ? "to" : "from", l->node,
                 l->addr);
        if (!t)
                return;
        t->backoff_ms = 0;
        t->down_since = 0;
        t->last_heard_ms = loop_now_ms();
        loop_timer_start(l->ps->loop, &t->ping, PING_EVERY_MS, target_ping);
        /* catch up: everything owed to this node, from the catalog */
        r = catalog_repl_pending_foreach(l->ps->catalog, t->node, pending_cb, t);
        /* pending_cb never stops the walk: a non-zero result is the
         * catalog's; what was not queued now is queued at the next connect */
        if (r < 0)
                log_warn("peers: node %u: cannot list the steps owed to it: %s", t->node,
                         strerror(-r));
        restore_on_connect(t);
        target_pump(t);
}

static void handle_handshake(struct plink *l, const struct peer_msg *m) {
        struct peers *ps = l->ps;
        uint32_t self = ps->opts.topo.index;

        if (!l->client && l->state == L_HELLO && m->hdr.type == PEER_MSG_HELLO) {
                const struct peer_hello *h = &m->hello;
                if (h->node_count != ps->opts.topo.count || !node_is_source(ps, h->node_index)) {
                        send_error(l, 0, -EPERM, "node %u of %u does not replicate to node %u",
                                   h->node_index, h->node_count, self);
                        link_close(l, -EPERM, "refused: it says it is node %u of %u; this is "
                                   "node %u of %u and holds replicas only of its replication "
                                   "sources",
                                   h->node_index, h->node_count, self, ps->opts.topo.count);
                        return;
                }
                l->node = h->node_index;
                memcpy(l->nonce_peer, h->nonce, PEER_NONCE_SIZE);
                struct peer_msg r = { .hdr.type = PEER_MSG_HELLO_REPLY };
                r.hello_reply.node_index = self;
                r.hello_reply.node_count = ps->opts.topo.count;
                memcpy(r.hello_reply.nonce, l->nonce_own, PEER_NONCE_SIZE);
                peer_mac_sealed(ps->psk, ps->psk_len, true, l->nonce_peer, l->nonce_own, l->node,
                                self, !ps->opts.frames_unsealed, r.hello_reply.mac);
                l->state = L_AUTH;
                link_send(l, &r);
                return;
        }
        if (!l->client && l->state == L_AUTH && m->hdr.type == PEER_MSG_AUTH) {
                uint8_t want[PEER_MAC_SIZE];
                peer_mac_sealed(ps->psk, ps->psk_len, false, l->nonce_peer, l->nonce_own, l->node,
                                self, !ps->opts.frames_unsealed, want);
                if (!peer_mac_equal(want, m->auth.mac)) {
                        send_error(l, 0, -EACCES, "authentication failed");
                        link_close(l, -EACCES, "authentication failed: claiming node %u, it does "
                                   "not know the pre-shared key (or its [cluster] "
                                   "peer_frame_mac differs)", l->node);
                        return;
                }
                struct peer_msg ok = { .hdr.type = PEER_MSG_AUTH_OK };
                link_send(l, &ok);
                link_ready(l);
                return;
        }
        if (l->client && l->state == L_HELLO && m->hdr.type == PEER_MSG_HELLO_REPLY) {
                const struct peer_hello_reply *h = &m->hello_reply;
                uint8_t want[PEER_MAC_SIZE];
                if (h->node_index != l->node || h->node_count != ps->opts.topo.count) {
                        link_close(l, -EPROTO, "%s answered as node %u of %u, expected node %u of %u",
                                   l->addr, h->node_index, h->node_count, l->node,
                                   ps->opts.topo.count);
                        return;
                }
                memcpy(l->nonce_peer, h->nonce, PEER_NONCE_SIZE);
                peer_mac_sealed(ps->psk, ps->psk_len, true, l->nonce_own, l->nonce_peer, self, l->node,
                                !ps->opts.frames_unsealed, want);
                if (!peer_mac_equal(want, h->mac)) {
                        log_error("peers: authentication failed: node %u at %s does not know the "
                                  "pre-shared key (or its [cluster] peer_frame_mac differs)",
                                  l->node, l->addr);
                        link_close(l, -EACCES, "authentication failed");
                        return;
                }
                struct peer_msg a = { .hdr.type = PEER_MSG_AUTH };
                peer_mac_sealed(ps->psk, ps->psk_len, false, l->nonce_own, l->nonce_peer, self, l->node,
                                !ps->opts.frames_unsealed, a.auth.mac);
                l->state = L_AUTH;
                link_send(l, &a);
                return;
        }
        if (l->client && l->state == L_AUTH && m->hdr.type == PEER_MSG_AUTH_OK) {
                link_ready(l);
                return;
        }
        if (m->hdr.type == PEER_MSG_ERROR) {
                if (link_stranger(l)) {
                        link_close(l, m->error.error, "it sent ERROR during the handshake");
                        return;
                }
                log_error("peers: node %u (%s) refused the connection: %s", l->node, l->addr,
                          m->error.message);
                link_close(l, m->error.error, "refused by the other side");
                return;
        }
        link_close(l, -EPROTO, "%s during the handshake", peer_msg_type_name(m->hdr.type));
}

static void handle_message(struct plink *l, const struct peer_msg *m) {
        if (l->target)
                l->target->last_heard_ms = loop_now_ms();
        if (l->state != L_READY) {
                handle_handshake(l, m);
                return;
        }
        switch (m->hdr.type) {
        case PEER_MSG_RANK_BEGIN:
                if (m->rank_begin.purpose == PEER_PURPOSE_RESTORE) {
                        rx_begin(l, m, target_get(l->target, m->hdr.stream) != NULL);
                } else {
                        rx_begin(l, m, false);
                }
                break;
        case PEER_MSG_RANK_END: {
                /* an asked-for rank is all here: from now on its rx
                 * reports to the restore, and the ask is answered */
                struct rx *rx = link_rx(l, m->hdr.stream);
                struct rget *g = rx && rx->local ? target_get(l->target, m->hdr.stream) : NULL;
                if (g) {
                        rx->rj = g->rj;
                        list_unlink(&g->link);
                        l->target->ngets_active--;
                        free(g);
                }
                rx_end(l, m);
                if (l->state == L_READY && l->target)
                        target_pump(l->target);
                break;
        }
        case PEER_MSG_RANK_ACK:
                rank_acked(l, m);
                break;
        case PEER_MSG_LIST_REQ:
                if (l->client) {
                        link_close(l, -EPROTO, "LIST_REQ sent to the connecting side");
                        return;
                }
                answer_list(l, m);
                break;
        case PEER_MSG_LIST_REP:
                list_reply(l, m);
                break;
        case PEER_MSG_GET_RANK:
                if (l->client) {
                        link_close(l, -EPROTO, "GET_RANK sent to the connecting side");
                        return;
                }
                answer_get(l, m);
                break;
        case PEER_MSG_PING: {
                struct peer_msg p = { .hdr.type = PEER_MSG_PONG };
                p.ping.value = m->ping.value;
                link_send(l, &p);
                break;
        }
        case PEER_MSG_PONG:
                break;
        case PEER_MSG_ERROR: {
                struct ptarget *t = l->target;
                struct rget *g = m->hdr.stream ? target_get(t, m->hdr.stream) : NULL;
                if (g) {
                        /* that neighbour does not have it: another might */
                        list_unlink(&g->link);
                        t->ngets_active--;
                        log_debug("peers: node %u cannot send job %s step %" PRIu64 " rank %u: %s",
                                  l->node, g->job, g->step, g->rank, m->error.message);
                        if (g->rj->single && rget_next_target(g)) {
                                target_pump(t);
                                break;
                        }
                        g->rj->gets_pending--;
                        restore_job_check(g->rj);
                        free(g);
                        target_pump(t);
                        break;
                }
                log_error("peers: node %u (%s) reports: %s", l->node, l->addr, m->error.message);
                /* an ERROR about the connection ends it (the other side
                 * closes it after sending); the reason goes to status */
                if (m->hdr.stream == 0)
                        link_close(l, m->error.error, "node %u reports: %s", l->node,
                                   m->error.message);
                break;
        }
        default:
                link_close(l, -EPROTO, "unexpected %s", peer_msg_type_name(m->hdr.type));
                break;
        }
}

/*
 * A frame failed its MAC: it was altered, injected, replayed, reordered or
 * reflected on the way (or the peer is broken).  The link cannot be
 * trusted from here on, so it is closed; nothing of the frame is kept (a
 * DATA's memory goes back with the link, transfers cut short are dropped
 * and sent again by the sender after it reconnects).  The ERROR tells the
 * sender why; it travels in the other direction, under its own MAC.
 */
static void link_refuse_frame(struct plink *l, uint16_t type, uint64_t frame) {
        log_error("peers: frame %" PRIu64 " (%s) from node %u (%s) failed its MAC: altered, "
                  "injected or replayed on the way; closing the link, nothing of it is kept",
                  frame, peer_msg_type_name(type), l->node, l->addr);
        send_error(l, 0, -EBADMSG, "frame %" PRIu64 " (%s) from node %u failed its MAC at node "
                   "%u; the link is closed", frame, peer_msg_type_name(type),
                   l->ps->opts.topo.index, l->node);
        link_close(l, -EBADMSG, "frame %" PRIu64 " (%s) failed its MAC", frame,
                   peer_msg_type_name(type));
}

/* A header of another protocol version: say so in that version's framing
 * (peer_error_encode_as), straight to the socket, and close. */
static void link_refuse_version(struct plink *l) {
        struct peer_msg m = { .hdr.type = PEER_MSG_ERROR };
        uint8_t buf[PEER_HDR_SIZE + 16 + PEER_ERRMSG_MAX];
        uint16_t theirs = l->hdr.version;

        m.error.error = -EPROTONOSUPPORT;
        snprintf(m.error.message, sizeof(m.error.message), "node %u speaks ckptd peer protocol "
                 "version %u, this peer version %u: run the same ckptd version on every node",
                 l->ps->opts.topo.index, PEER_PROTO_VERSION, theirs);
        if (!link_stranger(l))
                log_error("peers: %s (node %d) speaks peer protocol version %u, this daemon "
                          "version %u: refused; run the same ckptd version on every node",
                          l->addr, l->node == UINT32_MAX ? -1 : (int)l->node, theirs,
                          PEER_PROTO_VERSION);
        /* only before the handshake ends: after it, the answer would need a
         * tag the other version does not know, and nothing of ours is in
         * flight yet, so the bytes are not interleaved with a frame */
        int n = l->state != L_READY && !l->cur ? peer_error_encode_as(&m, theirs, buf, sizeof(buf))
                                               : -EALREADY;
        if (n > 0)
                (void)send(l->fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
        link_close(l, -EPROTONOSUPPORT, "it speaks peer protocol version %u, this daemon "
                   "version %u", theirs, PEER_PROTO_VERSION);
}

/* Read and dispatch until the socket is empty or the link blocks. */
static void link_read(struct plink *l) {
        while (l->state != L_DEAD && l->state != L_CONNECTING && !l->rx_blocked) {
                if (l->pay) {
                        struct rchunk *ch = l->pay;
                        uint8_t *dst = pool_extent_addr(&ch->ext);
                        bool tag = l->pay_got == ch->length;
                        /* the payload, then (after the handshake) its tag */
                        ssize_t n = tag ? recv(l->fd, l->pay_tag + l->pay_tag_got,
                                               PEER_TAG_SIZE - l->pay_tag_got, 0)
                                        : recv(l->fd, dst + l->pay_got, ch->length - l->pay_got, 0);
                        if (n <= 0) {
                                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                                        return;
                                link_close(l, n ? -errno : -ECONNRESET, "%s",
                                           n ? strerror(errno) : "closed by the other side");
                                return;
                        }
                        if (tag) {
                                l->pay_tag_got += (size_t)n;
                        } else {
                                /* MACed as it arrives, while the bytes are in cache */
                                if (l->mac_rx)
                                        frame_mac_update(l->mac_rx, dst + l->pay_got, (size_t)n);
                                l->pay_got += (uint64_t)n;
                        }
                        if (l->pay_got < ch->length ||
                            (l->mac_rx && l->pay_tag_got < PEER_TAG_SIZE))
                                continue;
                        /* verified before anything looks at the bytes: a
                         * refused frame is dropped with the link (link_close
                         * releases its memory), nothing of it is stored */
                        if (l->mac_rx && !frame_mac_check(l->mac_rx, l->pay_tag)) {
                                link_refuse_frame(l, PEER_MSG_DATA, l->pay_frame);
                                return;
                        }
                        rx_payload_done(l);
                        continue;
                }
                if (l->in_got < l->in_want) {
                        ssize_t n = recv(l->fd, l->in + l->in_got, l->in_want - l->in_got, 0);
                        if (n <= 0) {
                                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                                        return;
                                link_close(l, n ? -errno : -ECONNRESET, "%s",
                                           n ? strerror(errno) : "closed by the other side");
                                return;
                        }
                        l->in_got += (size_t)n;
                        continue;
                }
                if (!l->hdr_done) {
                        int r = peer_hdr_decode(&l->hdr, l->in, PEER_HDR_SIZE);
                        if (r == -EPROTONOSUPPORT) {
                                link_refuse_version(l);
                                return;
                        }
                        if (r < 0) {
                                link_close(l, r, "bad frame header (%s)", strerror(-r));
                                return;
                        }
                        size_t body = l->hdr.type == PEER_MSG_DATA ? PEER_DATA_HDR_SIZE
                                                                   : l->hdr.length;
                        /* after the handshake a tag follows every frame; a
                         * DATA's comes after its payload (read above) */
                        size_t tag = l->mac_rx && l->hdr.type != PEER_MSG_DATA ? PEER_TAG_SIZE
                                                                                : 0;
                        /* a handshake message is small: nobody unauthenticated
                         * makes this daemon allocate 16 MiB */
                        if (l->state != L_READY && body > PREAUTH_BODY_MAX) {
                                link_close(l, -EBADMSG, "oversized message before authentication");
                                return;
                        }
                        if (PEER_HDR_SIZE + body + tag > l->in_cap) {
                                uint8_t *n = realloc(l->in, PEER_HDR_SIZE + body + tag);
                                if (!n) {
                                        link_close(l, -ENOMEM, "out of memory");
                                        return;
                                }
                                l->in = n;
                                l->in_cap = PEER_HDR_SIZE + body + tag;
                        }
                        l->hdr_done = true;
                        l->in_want = PEER_HDR_SIZE + body + tag;
                        continue;
                }
                /* Authenticate before decoding: nothing of a frame that
                 * fails its MAC is acted on.  A DATA's MAC covers its
                 * headers and its payload; it is checked once the payload
                 * is in (above). */
                size_t msg_len = l->in_got;
                uint64_t frame = 0;
                if (l->mac_rx) {
                        frame = frame_mac_count(l->mac_rx);
                        if (l->hdr.type == PEER_MSG_DATA) {
                                if (frame_mac_begin(l->mac_rx) < 0) {
                                        link_refuse_frame(l, l->hdr.type, frame);
                                        return;
                                }
                                frame_mac_update(l->mac_rx, l->in, msg_len);
                        } else {
                                msg_len -= PEER_TAG_SIZE;
                                if (frame_mac_open(l->mac_rx, l->in, msg_len, l->in + msg_len) < 0) {
                                        link_refuse_frame(l, l->hdr.type, frame);
                                        return;
                                }
                        }
                }
                /* a whole message (for DATA: header and data header) */
                struct peer_msg *m = calloc(1, sizeof(*m));
                if (!m) {
                        link_close(l, -ENOMEM, "out of memory");
                        return;
                }
                int r = peer_msg_decode(m, l->in, msg_len);
                l->hdr_done = false;
                l->in_got = 0;
                l->in_want = PEER_HDR_SIZE;
                if (r < 0) {
                        free(m);
                        link_close(l, r, "malformed %s (%s)", peer_msg_type_name(l->hdr.type),
                                   strerror(-r));
                        return;
                }
                if (m->hdr.type == PEER_MSG_DATA) {
                        if (l->state != L_READY) {
                                free(m);
                                link_close(l, -EPROTO, "DATA before authentication");
                                return;
                        }
                        bool go = rx_data(l, m);
                        free(m);
                        if (l->pay) {
                                l->pay_frame = frame;
                                l->pay_tag_got = 0;
                        }
                        if (!go)
                                return;
                        continue;
                }
                handle_message(l, m);
                free(m);
                /* shrink after a big RANK_BEGIN */
                if (l->in_cap > PEER_HDR_SIZE + PEER_MSG_MAX) {
                        free(l->in);
                        l->in = malloc(PEER_HDR_SIZE + PEER_MSG_MAX);
                        l->in_cap = l->in ? PEER_HDR_SIZE + PEER_MSG_MAX : 0;
                        if (!l->in) {
                                link_close(l, -ENOMEM, "out of memory");
                                return;
                        }
                }
        }
}

static void link_on_event(struct loop_watch *w, uint32_t events) {
        struct plink *l = container_of(w, struct plink, watch);

        if (l->state == L_CONNECTING) {
                int err = 0;
                socklen_t len = sizeof(err);
                getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err) {
                        link_close(l, -err, "connect: %s", strerror(err));
                        return;
                }
                l->state = L_HELLO;
                struct peer_msg m = { .hdr.type = PEER_MSG_HELLO };
                m.hello.node_index = l->ps->opts.topo.index;
                m.hello.node_count = l->ps->opts.topo.count;
                memcpy(m.hello.nonce, l->nonce_own, PEER_NONCE_SIZE);
                link_send(l, &m);
                link_update_events(l);
                return;
        }
        if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                link_read(l);
        if (l->state != L_DEAD && (events & EPOLLOUT))
                link_flush(l);
}

static void link_handshake_timeout(struct loop_timer *t) {
        struct plink *l = container_of(t, struct plink, handshake);
        link_close(l, -ETIMEDOUT, "no handshake within %" PRIu64 " ms",
                   l->ps->opts.handshake_timeout_ms);
}

/* Keepalive from the first byte on: a peer that vanishes without a FIN
 * (or an attacker's half-open connection) is found by the kernel, not
 * only by the handshake deadline or the application's PINGs. */
static void link_keepalive(struct peers *ps, int fd) {
        int one = 1;
        int idle = (int)((ps->opts.keepalive_ms + 999) / 1000);
        int intvl = idle / KEEPALIVE_CNT > 0 ? idle / KEEPALIVE_CNT : 1;
        int cnt = KEEPALIVE_CNT;
        unsigned user_timeout = (unsigned)(idle + intvl * cnt) * 1000u;
        if (user_timeout < USER_TIMEOUT_MIN_MS)
                user_timeout = USER_TIMEOUT_MIN_MS;

        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (!idle)
                return;
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout));
}

/* Takes ownership of fd only on success. */
static struct plink *link_new(struct peers *ps, int fd, bool client, uint32_t node,
                              const char *host, uint16_t port) {
        struct plink *l = calloc(1, sizeof(*l));
        if (!l)
                return NULL;
        l->ps = ps;
        l->fd = fd;
        l->client = client;
        l->node = node;
        snprintf(l->host, sizeof(l->host), "%s", host);
        snprintf(l->addr, sizeof(l->addr), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
        list_init(&l->ctlq);
        list_init(&l->rxs);
        list_init(&l->txs);
        list_init(&l->handshake.link);
        /* small until authenticated: link_read() grows it */
        l->in = malloc(PEER_HDR_SIZE + PREAUTH_BODY_MAX);
        l->in_cap = PEER_HDR_SIZE + PREAUTH_BODY_MAX;
        l->in_want = PEER_HDR_SIZE;
        if (!l->in || peer_nonce(l->nonce_own) < 0) {
                free(l->in);
                free(l);
                return NULL;
        }
        link_keepalive(ps, fd);
        list_init(&l->link);
        list_add_tail(&ps->links, &l->link);
        l->state = client ? L_CONNECTING : L_HELLO;
        l->events = client ? EPOLLOUT : EPOLLIN;
        if (loop_watch_add(ps->loop, &l->watch, fd, l->events, link_on_event) < 0) {
                list_unlink(&l->link);
                free(l->in);
                free(l);
                return NULL;
        }
        l->watching = true;
        /* the connecting side's deadline also covers the TCP connect */
        uint64_t deadline = ps->opts.handshake_timeout_ms;
        if (client)
                deadline += ps->opts.connect_timeout_ms;
        if (deadline)
                loop_timer_start(ps->loop, &l->handshake, deadline, link_handshake_timeout);
        return l;
}

/* ---- connecting and accepting ------------------------------------------------------------- */

static void target_connect(struct ptarget *t) {
        struct peers *ps = t->ps;
        const struct node_address *a = &ps->addrs[t->node];
        char port[8], addr[80];
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;

        if (ps->freeing || t->l)
                return;
        snprintf(port, sizeof(port), "%u", a->port);
        snprintf(addr, sizeof(addr), "%s:%u", a->host, a->port);
        /* names resolve synchronously: a cluster's peer list is IP
         * addresses or names in /etc/hosts in practice */
        int r = getaddrinfo(a->host, port, &hints, &res);
        if (r != 0 || !res) {
                log_warn("peers: cannot resolve node %u's address %s: %s", t->node, addr,
                         gai_strerror(r));
                goto retry;
        }
        int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                freeaddrinfo(res);
                goto retry;
        }
        if (connect(fd, res->ai_addr, res->ai_addrlen) < 0 && errno != EINPROGRESS) {
                freeaddrinfo(res);
                close(fd);
                goto retry;
        }
        freeaddrinfo(res);
        t->l = link_new(ps, fd, true, t->node, a->host, a->port);
        if (!t->l) {
                close(fd);
                goto retry;
        }
        t->l->target = t;
        return;
retry:
        t->backoff_ms = t->backoff_ms ? MIN(t->backoff_ms * 2, RECONNECT_MAX_MS) : RECONNECT_MIN_MS;
        loop_timer_start(ps->loop, &t->timer, t->backoff_ms, target_timer);
}

static void target_timer(struct loop_timer *timer) {
        target_connect(container_of(timer, struct ptarget, timer));
}

/* How many accepted links from host have not authenticated yet. */
static uint32_t peers_unauth_from(struct peers *ps, const char *host) {
        uint32_t n = 0;
        struct list *pos;
        list_for_each(pos, &ps->links) {
                struct plink *l = list_entry(pos, struct plink, link);
                n += !l->client && l->state != L_READY && l->state != L_DEAD &&
                     strcmp(l->host, host) == 0;
        }
        return n;
}

static bool peers_is_source_host(struct peers *ps, const char *host) {
        for (size_t i = 0; i < ps->nsource_hosts; i++)
                if (strcmp(ps->source_hosts[i], host) == 0)
                        return true;
        return false;
}

/* Takes ownership of fd.  The caps on connections that have not
 * authenticated keep strangers from taking the file descriptors, the
 * memory and the loop that authenticated links need; a connection over a
 * cap is closed at once (the other side sees a reset or EOF). */
static void on_accept(struct acceptor *a, int fd, const struct sockaddr_storage *sa,
                      socklen_t len) {
        struct peers *ps = container_of(a, struct peers, acceptor);
        char host[64] = "?";
        uint16_t port = 0;
        (void)len;

        if (sa->ss_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
                inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
                port = ntohs(in->sin_port);
        } else if (sa->ss_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
                inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
                port = ntohs(in6->sin6_port);
        }
        uint32_t from_host = peers_unauth_from(ps, host);
        if (ps->opts.unauth_per_address && from_host >= ps->opts.unauth_per_address) {
                acceptor_refuse(a, "%s:%u: %u connections from that address not authenticated "
                                   "yet, the limit ([cluster] peer_unauthenticated_per_address)",
                                host, port, from_host);
                close(fd);
                return;
        }
        /* a replication source's address is held to the per-address cap
         * only, so that strangers filling the total cannot keep the real
         * neighbours out */
        bool source = peers_is_source_host(ps, host);
        if (!source && ps->opts.unauth_max && ps->nunauth >= ps->opts.unauth_max) {
                acceptor_refuse(a, "%s:%u: %u connections not authenticated yet, the limit "
                                   "([cluster] peer_unauthenticated_max)",
                                host, port, ps->nunauth);
                close(fd);
                return;
        }
        struct plink *l = link_new(ps, fd, false, UINT32_MAX, host, port);
        if (!l) {
                close(fd);
                return;
        }
        if (!source) {
                l->unauth_counted = true;
                ps->nunauth++;
        }
}

/* The numeric addresses of the nodes that replicate here (they are the
 * ones that connect to this node's listener). */
static void peers_resolve_sources(struct peers *ps) {
        for (size_t i = 0; i < ps->nareas; i++) {
                const struct node_address *p = &ps->addrs[ps->areas[i].src];
                struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL, *ai;
                if (!p->host || getaddrinfo(p->host, NULL, &hints, &res) != 0)
                        continue;
                for (ai = res; ai && ps->nsource_hosts < TARGETS_MAX; ai = ai->ai_next) {
                        char *h = ps->source_hosts[ps->nsource_hosts];
                        const void *addr = ai->ai_family == AF_INET
                                ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                                : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
                        if (inet_ntop(ai->ai_family, addr, h, 64) && !peers_is_source_host(ps, h))
                                ps->nsource_hosts++;
                }
                freeaddrinfo(res);
        }
}

int peers_adopt(struct peers *ps, int fd, const char *host) {
        struct plink *l = link_new(ps, fd, false, UINT32_MAX, host, 0);
        if (!l) {
                close(fd);
                return -ENOMEM;
        }
        /* counted like a stranger's connection from the listener */
        l->unauth_counted = true;
        ps->nunauth++;
        return 0;
}

static int peers_listen(struct peers *ps) {
        char port[8];
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *res = NULL;

        snprintf(port, sizeof(port), "%u", ps->opts.listen_port);
        int r = getaddrinfo(ps->opts.listen_host, port, &hints, &res);
        if (r != 0 || !res) {
                log_error("peers: cannot resolve the listen address %s: %s",
                          ps->opts.listen_host ? ps->opts.listen_host : "*", gai_strerror(r));
                return -EINVAL;
        }
        int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int one = 1;
        if (fd >= 0)
                setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) < 0 ||
            listen(fd, PEER_BACKLOG) < 0) {
                r = -errno;
                log_error("peers: cannot listen on %s:%u: %s",
                          ps->opts.listen_host ? ps->opts.listen_host : "*", ps->opts.listen_port,
                          strerror(-r));
                if (fd >= 0)
                        close(fd);
                freeaddrinfo(res);
                return r;
        }
        freeaddrinfo(res);
        ps->listen_fd = fd;
        r = acceptor_start(&ps->acceptor, ps->loop, fd, "peers", on_accept);
        if (r < 0) {
                log_error("peers: cannot watch the listening socket: %s", strerror(-r));
                return r;
        }
        log_info("peers: node %u of %u listening on %s:%u", ps->opts.topo.index,
                 ps->opts.topo.count, ps->opts.listen_host ? ps->opts.listen_host : "*",
                 ps->opts.listen_port);
        return 0;
}

/* ---- status and lifecycle ------------------------------------------------------------------- */

void peers_status(struct peers *ps, char *text, size_t size, uint32_t *connected,
                  uint32_t *total, uint32_t *pending_steps) {
        size_t off = 0;

        *connected = *total = *pending_steps = 0;
        text[0] = 0;
        for (size_t i = 0; i < ps->ntargets; i++) {
                struct ptarget *t = &ps->targets[i];
                bool up = t->l && t->l->state == L_READY;
                char addr[80];
                node_address_format(&ps->addrs[t->node], addr, sizeof(addr));
                (*total)++;
                *connected += up;
                *pending_steps += t->steps_pending;
                int n = snprintf(text + off, size - off, "%snode %u %s %s%s, %u steps owed%s%s",
                                 i ? "; " : "", t->node, addr, up ? "up" : "down",
                                 !up && t->down_since ? " (since a disconnect)" : "",
                                 t->steps_pending, t->last_error[0] ? ", last link error: " : "",
                                 t->last_error);
                if (n < 0 || (size_t)n >= size - off)
                        break;
                off += (size_t)n;
        }
}

void peers_pause(struct peers *ps, bool paused) {
        struct list *pos, *tmp;

        if (ps->paused == paused)
                return;
        ps->paused = paused;
        if (paused)
                return;
        list_for_each_safe(pos, tmp, &ps->links) {
                struct plink *l = list_entry(pos, struct plink, link);
                link_flush(l);
        }
}

void peers_set_keep(struct peers *ps, uint32_t keep) {
        ps->opts.keep = keep;
}

int peers_new(struct peers **out, struct loop *loop, struct worker_pool *workers,
              struct pool *pool, struct store *store, struct catalog *catalog,
              struct replica_area *areas, size_t nareas, const struct peers_options *opts,
              void (*on_changed)(void *userdata, const char *job, uint64_t step),
              void *userdata) {
        struct peers *ps = calloc(1, sizeof(*ps));
        uint32_t targets[TARGETS_MAX];
        int r;

        if (!ps)
                return -ENOMEM;
        ps->loop = loop;
        ps->workers = workers;
        ps->pool = pool;
        ps->store = store;
        ps->catalog = catalog;
        ps->areas = areas;
        ps->nareas = nareas;
        ps->opts = *opts;
        ps->on_changed = on_changed;
        ps->userdata = userdata;
        ps->listen_fd = -1;
        ps->addrs = (struct node_address *)opts->addrs;
        if (opts->psk_len > sizeof(ps->psk)) {
                free(ps);
                return -EINVAL;
        }
        memcpy(ps->psk, opts->psk, opts->psk_len);
        ps->psk_len = opts->psk_len;
        list_init(&ps->links);
        list_init(&ps->restores);
        list_init(&ps->commits);
        peers_resolve_sources(ps);
        r = peers_listen(ps);
        if (r < 0) {
                free(ps);
                return r;
        }
        size_t n = topology_targets(&opts->topo, opts->topo.index, targets, TARGETS_MAX);
        for (size_t i = 0; i < n && i < TARGETS_MAX; i++) {
                struct ptarget *t = &ps->targets[ps->ntargets++];
                t->ps = ps;
                t->node = targets[i];
                list_init(&t->steps);
                list_init(&t->gets);
                list_init(&t->gets_active);
                target_connect(t);
        }
        *out = ps;
        return 0;
}

struct peers *peers_free(struct peers *ps) {
        struct list *pos, *tmp;

        if (!ps)
                return NULL;
        ps->freeing = true;
        if (ps->listen_fd >= 0) {
                acceptor_stop(&ps->acceptor);
                close(ps->listen_fd);
        }
        for (size_t i = 0; i < ps->ntargets; i++) {
                struct ptarget *t = &ps->targets[i];
                loop_timer_cancel(&t->timer);
                loop_timer_cancel(&t->ping);
                while (!list_empty(&t->steps))
                        rstep_free(list_first_entry(&t->steps, struct rstep, link));
                while (!list_empty(&t->gets)) {
                        struct rget *g = list_first_entry(&t->gets, struct rget, link);
                        list_unlink(&g->link);
                        free(g);
                }
                while (!list_empty(&t->gets_active)) {
                        struct rget *g = list_first_entry(&t->gets_active, struct rget, link);
                        list_unlink(&g->link);
                        free(g);
                }
                t->ngets_active = 0;
                t->rj_listing = NULL;
                free(t->held.v);
        }
        list_for_each_safe(pos, tmp, &ps->links) {
                struct plink *l = list_entry(pos, struct plink, link);
                l->target = NULL;
                link_close(l, -ECANCELED, "shutting down");
        }
        list_for_each_safe(pos, tmp, &ps->restores) {
                struct restore_job *rj = list_entry(pos, struct restore_job, link);
                list_unlink(&rj->link);
                free(rj->claimed.v);
                free(rj);
        }
        explicit_bzero(ps->psk, sizeof(ps->psk));
        free(ps);
        return NULL;
}

const struct replica_area *peers_areas(const struct peers *ps, size_t *count) {
        *count = ps ? ps->nareas : 0;
        return ps ? ps->areas : NULL;
}
