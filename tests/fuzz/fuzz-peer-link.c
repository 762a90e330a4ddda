/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the peer link state machine (daemon/peer/link.c, transfer.c) -- the
 * framing, the handshake, the frame MACs and what an authenticated node's
 * messages make the daemon do (rank transfers into a replica area, LIST,
 * GET_RANK, PING, ERROR).  fuzz-peer covers the codec alone.
 *
 * The daemon's side is real: the peers module of node 1 of 2, with its
 * loop, worker threads, pool, local store and catalogs on a temporary
 * directory, and a replica area for node 0.  Each input gets a fresh
 * connection, a socketpair adopted with peers_adopt() (the seam that
 * stands for accept()); this file plays node 0 on the other end, in the
 * same loop:
 *
 *   input[0] % 3 == 0  the rest goes to the daemon as it is, from the first
 *                      byte: everything an unauthenticated peer can send;
 *   input[0] % 3 == 1  the harness first runs the handshake with the known
 *                      PSK, as node 0; the rest is then cut into frames by
 *                      their header's length and each one sent with its
 *                      valid MAC tag (c2s key, frame counter), so the
 *                      fuzzer reaches the states after authentication
 *                      without having to forge a MAC; a tail too short for
 *                      its header's length goes as it is;
 *   input[0] % 3 == 2  the same, with the last frame's tag flipped.
 *
 * Then the harness closes its sending side and runs the loop until the
 * daemon closed the connection or a short deadline passed.  Properties:
 * nothing crashes or trips a sanitizer, and a frame with a bad tag ends
 * the connection (abort() otherwise).  Without io_uring (an old kernel,
 * a sandbox) the replay exits 77.
 *
 * State carries over between inputs (a stored replica, catalog rows), as
 * it would on a daemon that meets many connections.
 */
#include <errno.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <syslog.h>
#include <unistd.h>

#include "catalog/catalog.h"
#include "config.h"
#include "io/loop.h"
#include "io/worker.h"
#include "local/store.h"
#include "peer-proto.h"
#include "peer/auth.h"
#include "peer/framemac.h"
#include "peer/peers.h"
#include "pool/pool.h"
#include "util/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The PSK of the test cluster (40 printable characters). */
static const char psk[] = "fuzz-peer-link-0123456789abcdefghijklmno";
/* Only a connection the daemon does not hang up on after the harness's
 * end of input takes this long: one waiting for pool memory (pool_wait_ms
 * below) or a bug. */
#define DEADLINE_MS 2000

static struct {
        bool ready;
        struct loop *loop;
        struct worker_pool *workers;
        struct pool *pool;
        struct store *store, *area_store;
        struct catalog *catalog, *area_catalog;
        struct replica_area area;
        struct peers *peers;
        char dir[256];
} H;

/* One connection: node 0's side. */
static struct {
        int fd;
        struct loop_watch watch;
        struct loop_timer deadline;
        const uint8_t *rest;
        size_t rest_len;
        bool flip_last;
        bool flipped;      /* a whole frame went with a bad tag */
        enum { C_HELLO, C_AUTH, C_SENT } state;
        uint8_t nonce_c[PEER_NONCE_SIZE], nonce_s[PEER_NONCE_SIZE];
        uint8_t in[PEER_HDR_SIZE + PEER_MSG_MAX];
        size_t in_got;
        bool eof;
} C;

static void die(const char *what, int r) {
        fprintf(stderr, "fuzz-peer-link: %s: %s\n", what, strerror(r < 0 ? -r : r));
        exit(1);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void)st;
        (void)flag;
        (void)ftw;
        remove(path);
        return 0;
}

/* The state directory goes at exit (daemon threads may still hold files
 * open; removing them is harmless then). */
static void remove_dir(void) {
        nftw(H.dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void setup(void) {
        struct store_options so = { .io_size = 1 << 20, .queue_depth = 8, .direct_io = false };
        static char host0[] = "127.0.0.1", host1[] = "127.0.0.1";
        /* node 0 at a port nobody listens on: the daemon's own connects to
         * its target fail and back off, as with a neighbour that is down */
        static struct node_address addrs[2] = { { host0, 1 }, { host1, 0 } };
        char path[512];
        int r;

        /* the least there is (errors): a refused input is logged as an
         * error, so a replay prints many lines; sanitizer reports need
         * stderr, so it stays */
        log_set_level(LOG_ERR);
        const char *tmp = getenv("TMPDIR");
        snprintf(H.dir, sizeof(H.dir), "%s/fuzz-peer-link.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(H.dir))
                die("mkdtemp", errno);
        atexit(remove_dir);
        r = loop_new(&H.loop, 256);
        if (r < 0) {
                fprintf(stderr, "fuzz-peer-link: no io_uring here (%s): skipped\n", strerror(-r));
                exit(77);
        }
        r = worker_pool_new(&H.workers, H.loop, 2);
        if (r >= 0)
                r = pool_new(&H.pool, H.loop, 16 << 20, 4 << 20, false, false);
        if (r >= 0)
                r = store_open(&H.store, H.dir, H.loop, H.workers, H.pool, &so);
        snprintf(path, sizeof(path), "%s/catalog.db", H.dir);
        if (r >= 0)
                r = catalog_open(&H.catalog, path);
        snprintf(path, sizeof(path), "%s/replica/node-0", H.dir);
        if (r >= 0)
                r = store_open(&H.area_store, path, H.loop, H.workers, H.pool, &so);
        snprintf(path, sizeof(path), "%s/replica/node-0/catalog.db", H.dir);
        if (r >= 0)
                r = catalog_open(&H.area_catalog, path);
        if (r < 0)
                die("setup", r);
        H.area = (struct replica_area){ .src = 0, .store = H.area_store,
                                        .catalog = H.area_catalog };
        struct peers_options po = {
                .topo = { .count = 2, .index = 1, .jump = 1, .factor = 2 },
                .addrs = addrs,
                .listen_host = "127.0.0.1",
                .listen_port = 0,
                .psk = (const uint8_t *)psk,
                .psk_len = strlen(psk),
                .connect_timeout_ms = 100,
                .retention = { .keep = 2 },
                .pool_wait_ms = 100,
        };
        r = peers_new(&H.peers, H.loop, H.workers, H.pool, H.store, H.catalog, &H.area, 1, &po,
                      NULL, NULL);
        if (r < 0)
                die("peers_new", r);
        H.ready = true;
}

static void client_write(const void *p, size_t n) {
        const uint8_t *b = p;
        while (n > 0) {
                ssize_t w = send(C.fd, b, n, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0)
                        return; /* the daemon closed already (or the buffer is full) */
                b += w;
                n -= (size_t)w;
        }
}

static void client_send_msg(struct peer_msg *m) {
        uint8_t buf[PEER_HDR_SIZE + 128];
        int n = peer_msg_encode(m, buf, sizeof(buf));
        if (n < 0)
                die("encode", n);
        client_write(buf, (size_t)n);
}

/* The input's frames, each with its tag (the handshake is done). */
static void client_send_frames(void) {
        uint8_t c2s[PEER_FRAME_KEY_SIZE], s2c[PEER_FRAME_KEY_SIZE];
        struct frame_mac *fm = NULL;
        const uint8_t *p = C.rest;
        size_t left = C.rest_len;

        if (peer_frame_keys((const uint8_t *)psk, strlen(psk), C.nonce_c, C.nonce_s, 0, 1, c2s,
                            s2c) < 0 ||
            frame_mac_new(&fm, c2s) < 0)
                die("frame keys", EIO);
        while (left > 0) {
                size_t len = left;
                if (left >= PEER_HDR_SIZE) {
                        uint32_t body = (uint32_t)p[8] | (uint32_t)p[9] << 8 |
                                        (uint32_t)p[10] << 16 | (uint32_t)p[11] << 24;
                        if ((uint64_t)PEER_HDR_SIZE + body <= left)
                                len = PEER_HDR_SIZE + body;
                }
                client_write(p, len);
                if (len == left && left < PEER_HDR_SIZE)
                        break;
                uint8_t tag[PEER_TAG_SIZE];
                if (frame_mac_seal(fm, p, len, tag) < 0)
                        die("seal", EIO);
                p += len;
                left -= len;
                if (left == 0 && C.flip_last) {
                        tag[0] ^= 1;
                        C.flipped = true;
                }
                client_write(tag, sizeof(tag));
        }
        frame_mac_free(fm);
}

static void client_done(void) {
        loop_timer_cancel(&C.deadline);
        loop_stop(H.loop);
}

/* A whole handshake message from the daemon is in C.in. */
static void client_handshake(const struct peer_msg *m) {
        if (C.state == C_HELLO && m->hdr.type == PEER_MSG_HELLO_REPLY) {
                struct peer_msg a = { .hdr.type = PEER_MSG_AUTH };
                memcpy(C.nonce_s, m->hello_reply.nonce, PEER_NONCE_SIZE);
                peer_mac((const uint8_t *)psk, strlen(psk), false, C.nonce_c, C.nonce_s, 0, 1,
                         a.auth.mac);
                client_send_msg(&a);
                C.state = C_AUTH;
        } else if (C.state == C_AUTH && m->hdr.type == PEER_MSG_AUTH_OK) {
                client_send_frames();
                shutdown(C.fd, SHUT_WR);
                C.state = C_SENT;
        } else {
                /* the handshake failed: the harness's fault, not the input's */
                fprintf(stderr, "fuzz-peer-link: handshake got %s\n",
                        peer_msg_type_name(m->hdr.type));
                abort();
        }
}

static void client_on_event(struct loop_watch *w, uint32_t events) {
        (void)w;
        (void)events;
        for (;;) {
                uint8_t *dst = C.state == C_SENT ? C.in : C.in + C.in_got;
                size_t room = C.state == C_SENT ? sizeof(C.in) : sizeof(C.in) - C.in_got;
                ssize_t n = recv(C.fd, dst, room, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0) {
                        C.eof = true;
                        client_done();
                        return;
                }
                if (C.state == C_SENT)
                        continue; /* answers after the handshake are drained */
                C.in_got += (size_t)n;
                struct peer_hdr h;
                while (C.state != C_SENT && C.in_got >= PEER_HDR_SIZE &&
                       peer_hdr_decode(&h, C.in, C.in_got) == 0 &&
                       C.in_got >= PEER_HDR_SIZE + h.length) {
                        static struct peer_msg m;
                        size_t len = PEER_HDR_SIZE + h.length;
                        if (peer_msg_decode(&m, C.in, len) < 0)
                                abort();
                        memmove(C.in, C.in + len, C.in_got - len);
                        C.in_got -= len;
                        client_handshake(&m);
                }
        }
}

static void client_deadline(struct loop_timer *t) {
        (void)t;
        loop_stop(H.loop);
}

/* After the connection: run until no disk write or CRC check of the
 * input's is in flight (or the deadline), so that nothing of one input is
 * still held only by the kernel's ring when the next starts or the process
 * exits (LeakSanitizer would call that a leak).  The loop keeps a few
 * requests of its own in flight all the time: idle is the fewest ever seen
 * before an input. */
static uint64_t settle_until;
static unsigned idle_inflight = UINT32_MAX;

static void settle_check(struct loop_timer *t) {
        if ((loop_inflight(H.loop) <= idle_inflight && worker_pool_pending(H.workers) == 0) ||
            loop_now_ms() >= settle_until) {
                loop_stop(H.loop);
                return;
        }
        loop_timer_start(H.loop, t, 1, settle_check);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        int sv[2];

        if (!H.ready)
                setup();
        if (size == 0)
                return 0;
        if (loop_inflight(H.loop) < idle_inflight)
                idle_inflight = loop_inflight(H.loop);
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
                die("socketpair", errno);
        /* room for a whole input and its tags, so the harness never blocks */
        int buf = 4 << 20;
        setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
        memset(&C, 0, sizeof(C));
        C.fd = sv[1];
        C.rest = data + 1;
        C.rest_len = size - 1;
        C.flip_last = data[0] % 3 == 2;
        if (peers_adopt(H.peers, sv[0], "fuzz") < 0)
                die("peers_adopt", ENOMEM);
        if (loop_watch_add(H.loop, &C.watch, C.fd, EPOLLIN, client_on_event) < 0)
                die("watch", EIO);
        if (data[0] % 3 == 0) {
                client_write(C.rest, C.rest_len);
                shutdown(C.fd, SHUT_WR);
                C.state = C_SENT;
        } else {
                struct peer_msg m = { .hdr.type = PEER_MSG_HELLO };
                m.hello.node_index = 0;
                m.hello.node_count = 2;
                for (int i = 0; i < PEER_NONCE_SIZE; i++)
                        C.nonce_c[i] = (uint8_t)(i * 7 + 3);
                memcpy(m.hello.nonce, C.nonce_c, PEER_NONCE_SIZE);
                client_send_msg(&m);
        }
        loop_timer_start(H.loop, &C.deadline, DEADLINE_MS, client_deadline);
        if (loop_run(H.loop) < 0)
                die("loop", EIO);
        loop_timer_cancel(&C.deadline);
        /* A bad tag on the last frame: the daemon must have hung up (a
         * sealed frame that is a valid ERROR on stream 0 would end the
         * link too, which is fine; so would a malformed frame before it). */
        if (C.flipped && !C.eof) {
                fprintf(stderr, "fuzz-peer-link: a frame with a bad tag did not end the link\n");
                abort();
        }
        loop_watch_del(H.loop, &C.watch);
        close(C.fd);
        struct loop_timer settle = { 0 };
        settle_until = loop_now_ms() + DEADLINE_MS;
        loop_timer_start(H.loop, &settle, 0, settle_check);
        if (loop_run(H.loop) < 0)
                die("loop", EIO);
        loop_timer_cancel(&settle);
        return 0;
}
