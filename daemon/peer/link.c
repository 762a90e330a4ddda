/* SPDX-License-Identifier: MIT */
/*
 * link — TCP links between daemons (see link.h).  Sections: sending
 * (control messages, the streams' frames in turn, sendfile for payloads),
 * lifecycle (close, reap), input (framing, MAC checks, the handshake,
 * PING/PONG, DATA payloads), and connecting/accepting (the dialer's
 * reconnect with backoff, the listener's caps on strangers).
 *
 * A link carries several streams at once in each direction; the sender
 * interleaves their frames at frame boundaries (4 MiB), so a small rank
 * does not wait behind a large one.  What a stream's frames must look like
 * is checked above (peer/transfer); anything a link cannot make sense of
 * is a protocol error that closes it (logged).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "peer-proto.h"
#include "peer/auth.h"
#include "peer/framemac.h"
#include "peer/link.h"
#include "util/cleanup.h"
#include "util/list.h"
#include "util/log.h"
#include "util/msgid.h"

#define RECONNECT_MIN_MS 100
#define RECONNECT_MAX_MS 5000
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

/* A control message queued on a link. */
struct ctl {
        struct list link;
        uint8_t *buf;              /* room for a tag after len when mac */
        size_t len;
        bool mac;                  /* queued after the handshake: gets its tag
                                    * when it goes on the wire */
};

static void link_refuse_frame(struct plink *l, uint16_t type, uint64_t frame);
static void link_refuse_version(struct plink *l);
static void link_update_events(struct plink *l);
static void link_read(struct plink *l);
static void dialer_timer(struct loop_timer *timer);

static bool env_is_source(const struct link_env *env, uint32_t node) {
        for (size_t i = 0; i < env->nsources; i++)
                if (env->sources[i] == node)
                        return true;
        return false;
}

/* ---- sending messages ------------------------------------------------------------------------ */

uint64_t link_next_seq(struct plink *l) {
        return ++l->seq;
}

int link_send(struct plink *l, struct peer_msg *m) {
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

void link_send_error(struct plink *l, uint32_t stream, int error, const char *fmt, ...) {
        struct peer_msg m = { .hdr.type = PEER_MSG_ERROR, .hdr.stream = stream };
        va_list ap;

        m.error.error = error < 0 ? error : -EIO;
        m.error.stream = stream;
        va_start(ap, fmt);
        vsnprintf(m.error.message, sizeof(m.error.message), fmt, ap);
        va_end(ap);
        link_send(l, &m);
}

/* ---- a stream's frames --------------------------------------------------------------------- */

/* A frame without payload in o->buf is complete: append its tag (room
 * for it was left).  1, or -errno. */
static int out_seal(struct plink *l, struct link_out *o) {
        o->trailer_len = o->trailer_sent = 0;
        if (!l->mac_tx)
                return 1;
        int r = frame_mac_seal(l->mac_tx, o->buf, o->len, o->buf + o->len);
        if (r < 0)
                return r;
        o->len += PEER_TAG_SIZE;
        return 1;
}

/*
 * A frame with payload (DATA): headers in o->buf, payload bytes
 * [foff, foff + flen) of o->fd.  The payload goes out with sendfile (no
 * copy through user space); its MAC is computed here, before the first
 * byte of it is sent, over the headers and a read-only mapping of the same
 * file range, so the bytes are MACed where they lie, never copied, and the
 * tag is the frame's trailer from the start.
 *
 * Before, not while, sendfile moves them: the MAC's read is the CPU's
 * first touch of pages the disk just filled, and that first touch is the
 * expensive one (on this project's VMs a first read of freshly read-in
 * page-cache pages costs 0.6-0.9 s per GB, a second one nothing).  MACed
 * after sendfile, the receiver of a loopback link raced the MAC to those
 * pages and paid that cost in its own copy out of the socket: 75 % of a
 * receiver's CPU sat in _copy_to_iter at 1.8 s/GB.  MACed first, the bytes
 * are also warm in the shared cache when the other side copies them.  The
 * range is asked for (MADV_WILLNEED) before it is read, and the next
 * frame's too, so the disk reads ahead while this one is MACed and sent.
 * foff is a multiple of the frame payload, so page-aligned.  A payload in
 * the link_out's own memory (o->mem: a frame from the memory tier, copied
 * and checked by peer/transfer) is MACed where it lies and sent with
 * send().  1, or -errno.
 */
static int out_seal_payload(struct plink *l, struct link_out *o) {
        struct frame_mac *fm = l->mac_tx;

        o->trailer_len = o->trailer_sent = 0;
        if (!fm)
                return 1;
        if (o->mem) {
                /* in the link_out's own memory: MACed where it lies */
                int r = frame_mac_begin(fm);
                if (r < 0)
                        return r;
                frame_mac_update(fm, o->buf, o->len);
                frame_mac_update(fm, o->mem, o->flen);
                frame_mac_end(fm, o->trailer);
                o->trailer_len = PEER_TAG_SIZE;
                return 1;
        }
        /* a mapping past the end of the file would fault (SIGBUS) where
         * sendfile just stops short: check the file still holds the range */
        struct stat st;
        if (fstat(o->fd, &st) < 0)
                return -errno;
        if ((uint64_t)st.st_size < o->foff + o->flen)
                return -EIO;
        void *map = mmap(NULL, o->flen, PROT_READ, MAP_SHARED, o->fd, (off_t)o->foff);
        if (map == MAP_FAILED)
                return -errno;
        /* (void): read-ahead hints; without them the faults read on demand */
        (void)madvise(map, o->flen, MADV_WILLNEED);
        (void)posix_fadvise(o->fd, (off_t)(o->foff + o->flen), (off_t)o->flen,
                            POSIX_FADV_WILLNEED);
        int r = frame_mac_begin(fm);
        if (r == 0) {
                frame_mac_update(fm, o->buf, o->len);
                frame_mac_update(fm, map, o->flen);
                frame_mac_end(fm, o->trailer);
                o->trailer_len = PEER_TAG_SIZE;
        }
        munmap(map, o->flen);
        return r < 0 ? r : 1;
}

/* Produce and seal o's next frame: 1, or -errno. */
static int out_next_frame(struct plink *l, struct link_out *o) {
        o->sent = o->fsent = o->flen = 0;
        o->payload = false;
        o->mem = NULL;
        int r = o->next(o, l);
        if (r <= 0)
                return r;
        return o->payload ? out_seal_payload(l, o) : out_seal(l, o);
}

static void out_release(struct plink *l, struct link_out *o) {
        list_unlink(&o->link);
        o->release(o, l);
}

void link_out_add(struct plink *l, struct link_out *o) {
        list_add_tail(&l->outs, &o->link);
        l->nout++;
}

void link_out_remove(struct plink *l, struct link_out *o) {
        if (l->out_cur == o)
                l->out_cur = NULL;
        l->nout--;
        out_release(l, o);
}

struct link_out *link_out_find(struct plink *l, uint32_t stream) {
        struct list *pos;
        list_for_each(pos, &l->outs) {
                struct link_out *o = list_entry(pos, struct link_out, link);
                if (o->stream == stream)
                        return o;
        }
        return NULL;
}

bool link_out_on_wire(const struct plink *l, const struct link_out *o) {
        return l->out_cur == o;
}

void link_in_add(struct plink *l, struct link_in *in) {
        list_add_tail(&l->ins, &in->link);
        l->nin++;
}

void link_in_remove(struct plink *l, struct link_in *in) {
        list_unlink(&in->link);
        l->nin--;
}

struct link_in *link_in_find(struct plink *l, uint32_t stream) {
        struct list *pos;
        list_for_each(pos, &l->ins) {
                struct link_in *in = list_entry(pos, struct link_in, link);
                if (in->stream == stream)
                        return in;
        }
        return NULL;
}

/* ---- links: output ---------------------------------------------------------------------------- */

/* The first stream with frames still to produce, or NULL. */
static struct link_out *link_frames_left(struct plink *l) {
        struct list *pos;
        list_for_each(pos, &l->outs) {
                struct link_out *o = list_entry(pos, struct link_out, link);
                if (!o->ended)
                        return o;
        }
        return NULL;
}

/* Whose turn it is to produce a frame: the first stream with frames left,
 * which then goes to the back of the line. */
static struct link_out *link_next_turn(struct plink *l) {
        struct link_out *o = link_frames_left(l);
        if (o) {
                list_unlink(&o->link);
                list_add_tail(&l->outs, &o->link);
        }
        return o;
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
 * the streams' frames in turn.  A failed link is closed here. */
void link_flush(struct plink *l) {
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
                struct link_out *o = l->out_cur;
                /* A frame once produced goes out before any control
                 * message: its tag was (or is being) computed with the
                 * direction's next frame counter, so nothing may pass it.
                 * (A frame is produced only when no control message
                 * waits, so they wait at most one frame.) */
                bool started = o != NULL;
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
                if (!o) {
                        /* paused between frames: control messages still flow */
                        if (l->env->paused)
                                break;
                        o = link_next_turn(l);
                        if (!o)
                                break;
                        int r = out_next_frame(l, o);
                        if (r < 0) {
                                char what[160];
                                o->describe(o, what, sizeof(what));
                                link_close(l, r, "cannot read %s: %s", what, strerror(-r));
                                return;
                        }
                        l->out_cur = o; /* r == 1: a stream not ended has a frame */
                        continue;
                }
                if (o->sent < o->len) {
                        int w = link_write(l, o->buf, o->len, &o->sent, o->flen ? MSG_MORE : 0);
                        if (w < 0)
                                return;
                        if (w == 0)
                                break;
                        continue;
                }
                if (o->fsent < o->flen && o->mem) {
                        size_t sent = (size_t)o->fsent;
                        int w = link_write(l, o->mem, (size_t)o->flen, &sent,
                                           o->trailer_len ? MSG_MORE : 0);
                        if (w < 0)
                                return;
                        o->fsent = sent;
                        if (w == 0)
                                break;
                        continue;
                }
                if (o->fsent < o->flen) {
                        off_t off = (off_t)(o->foff + o->fsent);
                        ssize_t n = sendfile(l->fd, o->fd, &off, o->flen - o->fsent);
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
                        o->fsent += (uint64_t)n;
                        continue;
                }
                if (o->trailer_sent < o->trailer_len) {
                        int w = link_write(l, o->trailer, o->trailer_len, &o->trailer_sent, 0);
                        if (w < 0)
                                return;
                        if (w == 0)
                                break;
                        continue;
                }
                /* the frame is out */
                l->out_cur = NULL;
                /* all of a stream that expects no answer sent (a
                 * replicated rank waits for its RANK_ACK) */
                if (o->ended && !o->keep)
                        link_out_remove(l, o);
        }
        link_update_events(l);
}

static void link_update_events(struct plink *l) {
        if (l->state == L_DEAD || !l->watching)
                return;
        uint32_t ev = 0;
        bool pending_out = l->cur || !list_empty(&l->ctlq) ||
                           (l->state == L_READY &&
                            (l->out_cur || (!l->env->paused && link_frames_left(l))));
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
                loop_watch_mod(l->env->loop, &l->watch, ev);
        }
}

void link_env_pause(struct link_env *env, bool paused) {
        struct list *pos, *tmp;

        if (env->paused == paused)
                return;
        env->paused = paused;
        if (paused)
                return;
        list_for_each_safe(pos, tmp, &env->links) {
                struct plink *l = list_entry(pos, struct plink, link);
                link_flush(l);
        }
}

/* ---- links: lifecycle ------------------------------------------------------------------------- */

/* The handshake is over (authenticated or closed): the deadline goes, and
 * an accepted link no longer counts against the unauthenticated caps. */
static void link_unauth_done(struct plink *l) {
        loop_timer_cancel(&l->handshake);
        if (l->unauth_counted) {
                l->unauth_counted = false;
                l->env->nunauth--;
        }
}

static void link_free(struct plink *l) {
        loop_timer_cancel(&l->handshake);
        loop_timer_cancel(&l->reap);
        list_unlink(&l->link);
        frame_mac_free(l->mac_tx);
        frame_mac_free(l->mac_rx);
        free(l->in);
        free(l);
}

static void link_reap(struct loop_timer *t);

/* An accepted connection that has not authenticated: anyone who can reach
 * the port makes one, so what it does wrong is logged only through
 * link_close's rate-limited line, never once per connection. */
bool link_stranger(const struct plink *l) {
        return !l->client && l->state != L_READY;
}

void link_close(struct plink *l, int error, const char *fmt, ...) {
        struct link_env *env = l->env;
        char why[256];
        va_list ap;

        if (l->state == L_DEAD)
                return;
        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        if (env->freeing)
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
                acceptor_refuse(&env->acceptor, "unauthenticated connection from %s closed: %s",
                                l->addr, why);
        } else if (l->client && l->state == L_HELLO && error == -ECONNRESET)
                /* a daemon of peer protocol version 1 closes on our HELLO
                 * without a word (later ones answer ERROR, see link_read) */
                log_event(LOG_WARNING, LOG_CTX(.id = LOG_ID_PEER_DOWN, LOG_PEER(l->node)),
                          "peers: link to node %u (%s) closed during the handshake: %s (a "
                         "daemon of another peer protocol version? this one speaks version %u)",
                         l->node, l->addr, why, PEER_PROTO_VERSION);
        else
                log_event(LOG_WARNING, LOG_CTX(.id = LOG_ID_PEER_DOWN, LOG_PEER(l->node)),
                          "peers: link %s node %u (%s) closed: %s", l->client ? "to" : "from",
                          l->node, l->addr, why);
        link_unauth_done(l);
        if (l->dialer && l->state != L_CONNECTING && !env->freeing)
                snprintf(l->dialer->last_error, sizeof(l->dialer->last_error), "%s", why);
        l->state = L_DEAD;
        (void)error;
        if (l->watching)
                loop_watch_del(env->loop, &l->watch);
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
        l->rx_blocked = false;
        if (l->pay) {
                l->pay = false;
                l->pay_dst = NULL;
                env->ops->payload_drop(l, l->pay_cookie);
        }
        while (!list_empty(&l->ins)) {
                struct link_in *in = list_first_entry(&l->ins, struct link_in, link);
                list_unlink(&in->link);
                in->closed(in, l);
        }
        l->nin = 0;
        l->out_cur = NULL;
        while (!list_empty(&l->outs))
                out_release(l, list_first_entry(&l->outs, struct link_out, link));
        l->nout = 0;
        struct dialer *d = l->dialer;
        if (d) {
                loop_timer_cancel(&d->ping);
                d->l = NULL;
                d->down_since = time(NULL);
                if (d->down)
                        d->down(d);
                d->backoff_ms = d->backoff_ms ? MIN(d->backoff_ms * 2, RECONNECT_MAX_MS)
                                              : RECONNECT_MIN_MS;
        }
        if (env->freeing) {
                link_free(l);
                return;
        }
        /* Freed from a timer: the caller may still be inside a callback
         * of l.  The timer is l's own, so that link_env_close() can free a
         * link that died just before the shutdown (its timer never fires). */
        loop_timer_start(env->loop, &l->reap, 0, link_reap);
        if (d)
                loop_timer_start(env->loop, &d->timer, d->backoff_ms, dialer_timer);
}

static void link_reap(struct loop_timer *timer) {
        link_free(container_of(timer, struct plink, reap));
}

/* ---- links: input ---------------------------------------------------------------------------- */

void link_payload_expect(struct plink *l, void *cookie, uint32_t length, uint8_t *dst) {
        l->pay = true;
        l->pay_cookie = cookie;
        l->pay_dst = dst;
        l->pay_len = length;
        l->pay_got = 0;
}

void link_payload_set_memory(struct plink *l, uint8_t *dst) {
        l->pay_dst = dst;
}

void link_payload_block(struct plink *l) {
        l->rx_blocked = true;
        link_update_events(l);
}

void link_payload_memory(struct plink *l, uint8_t *dst) {
        l->rx_blocked = false;
        l->pay_dst = dst;
        link_update_events(l);
        link_read(l);
}

static void dialer_ping(struct loop_timer *timer) {
        struct dialer *d = container_of(timer, struct dialer, ping);
        struct plink *l = d->l;

        if (!l || l->state != L_READY)
                return;
        if (loop_now_ms() - d->last_heard_ms > PING_TIMEOUT_MS) {
                link_close(l, -ETIMEDOUT, "no answer for %u s", PING_TIMEOUT_MS / 1000);
                return;
        }
        struct peer_msg m = { .hdr.type = PEER_MSG_PING };
        m.ping.value = loop_now_ms();
        link_send(l, &m);
        loop_timer_start(d->env->loop, &d->ping, PING_EVERY_MS, dialer_ping);
}

/* The handshake succeeded: from the next frame on, each direction is
 * MACed under its own key (peer/framemac.h).  0 or -errno. */
static int link_keys(struct plink *l) {
        struct link_env *env = l->env;
        uint32_t self = env->self;
        uint8_t c2s[PEER_FRAME_KEY_SIZE], s2c[PEER_FRAME_KEY_SIZE];
        int r;

        /* [cluster] peer_frame_mac = no: frames go without tags (both sides
         * agreed: the handshake MAC covers the setting) */
        if (env->frames_unsealed)
                return 0;
        if (l->client)
                r = peer_frame_keys(env->psk, env->psk_len, l->nonce_own, l->nonce_peer, self,
                                    l->node, c2s, s2c);
        else
                r = peer_frame_keys(env->psk, env->psk_len, l->nonce_peer, l->nonce_own, l->node,
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
        struct dialer *d = l->dialer;

        link_unauth_done(l);
        int r = link_keys(l);
        if (r < 0) {
                link_close(l, r, "cannot derive the frame keys: %s", strerror(-r));
                return;
        }
        l->state = L_READY;
        log_event(LOG_INFO, LOG_CTX(.id = LOG_ID_PEER_UP, LOG_PEER(l->node)),
                  "peers: link %s node %u (%s) authenticated", l->client ? "to" : "from", l->node,
                  l->addr);
        if (!d)
                return;
        d->backoff_ms = 0;
        d->down_since = 0;
        d->last_heard_ms = loop_now_ms();
        loop_timer_start(l->env->loop, &d->ping, PING_EVERY_MS, dialer_ping);
        if (d->up)
                d->up(d);
}

static void handle_handshake(struct plink *l, const struct peer_msg *m) {
        struct link_env *env = l->env;
        uint32_t self = env->self;

        if (!l->client && l->state == L_HELLO && m->hdr.type == PEER_MSG_HELLO) {
                const struct peer_hello *h = &m->hello;
                if (h->node_count != env->node_count || !env_is_source(env, h->node_index)) {
                        link_send_error(l, 0, -EPERM, "node %u of %u does not replicate to node %u",
                                        h->node_index, h->node_count, self);
                        link_close(l, -EPERM, "refused: it says it is node %u of %u; this is "
                                   "node %u of %u and holds replicas only of its replication "
                                   "sources",
                                   h->node_index, h->node_count, self, env->node_count);
                        return;
                }
                l->node = h->node_index;
                memcpy(l->nonce_peer, h->nonce, PEER_NONCE_SIZE);
                struct peer_msg r = { .hdr.type = PEER_MSG_HELLO_REPLY };
                r.hello_reply.node_index = self;
                r.hello_reply.node_count = env->node_count;
                memcpy(r.hello_reply.nonce, l->nonce_own, PEER_NONCE_SIZE);
                peer_mac_sealed(env->psk, env->psk_len, true, l->nonce_peer, l->nonce_own, l->node,
                                self, !env->frames_unsealed, r.hello_reply.mac);
                l->state = L_AUTH;
                link_send(l, &r);
                return;
        }
        if (!l->client && l->state == L_AUTH && m->hdr.type == PEER_MSG_AUTH) {
                uint8_t want[PEER_MAC_SIZE];
                peer_mac_sealed(env->psk, env->psk_len, false, l->nonce_peer, l->nonce_own, l->node,
                                self, !env->frames_unsealed, want);
                if (!peer_mac_equal(want, m->auth.mac)) {
                        link_send_error(l, 0, -EACCES, "authentication failed");
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
                if (h->node_index != l->node || h->node_count != env->node_count) {
                        link_close(l, -EPROTO, "%s answered as node %u of %u, expected node %u of %u",
                                   l->addr, h->node_index, h->node_count, l->node,
                                   env->node_count);
                        return;
                }
                memcpy(l->nonce_peer, h->nonce, PEER_NONCE_SIZE);
                peer_mac_sealed(env->psk, env->psk_len, true, l->nonce_own, l->nonce_peer, self,
                                l->node, !env->frames_unsealed, want);
                if (!peer_mac_equal(want, h->mac)) {
                        log_error("peers: authentication failed: node %u at %s does not know the "
                                  "pre-shared key (or its [cluster] peer_frame_mac differs)",
                                  l->node, l->addr);
                        link_close(l, -EACCES, "authentication failed");
                        return;
                }
                struct peer_msg a = { .hdr.type = PEER_MSG_AUTH };
                peer_mac_sealed(env->psk, env->psk_len, false, l->nonce_own, l->nonce_peer, self,
                                l->node, !env->frames_unsealed, a.auth.mac);
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
        if (l->dialer)
                l->dialer->last_heard_ms = loop_now_ms();
        if (l->state != L_READY) {
                handle_handshake(l, m);
                return;
        }
        switch (m->hdr.type) {
        case PEER_MSG_PING: {
                struct peer_msg p = { .hdr.type = PEER_MSG_PONG };
                p.ping.value = m->ping.value;
                link_send(l, &p);
                break;
        }
        case PEER_MSG_PONG:
                break;
        default:
                l->env->ops->message(l, m);
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
        link_send_error(l, 0, -EBADMSG, "frame %" PRIu64 " (%s) from node %u failed its MAC at "
                        "node %u; the link is closed", frame, peer_msg_type_name(type),
                        l->env->self, l->node);
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
                 l->env->self, PEER_PROTO_VERSION, theirs);
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

/* The payload of the DATA being read is in memory and passed its MAC. */
static void link_payload_done(struct plink *l) {
        void *cookie = l->pay_cookie;

        l->pay = false;
        l->pay_dst = NULL;
        l->env->ops->payload(l, cookie);
}

/*
 * How much must be queued on the socket before the loop hears of it.  In
 * a DATA payload (whose frame the sender sends whole) the rest of it, up
 * to LINK_RCVLOWAT_MAX: the loop then wakes, and recv() returns, once per
 * that many bytes, instead of once per few dozen KiB as TCP delivers them
 * (each wake-up is a completion, a dispatch and two recv calls, and each
 * piece a MAC update).  Never more than is sure to come, or the link would
 * wait for bytes the sender has no reason to send; a closed or failed
 * socket wakes the loop whatever the mark.  Between payloads, 1.  The
 * kernel grows the receive buffer to hold twice the mark.
 */
#define LINK_RCVLOWAT_MAX (1 << 20)

static void link_set_rcvlowat(struct plink *l) {
        int want = 1;
        if (l->pay && l->pay_dst) {
                uint64_t rest = l->pay_len - l->pay_got +
                                (l->mac_rx ? PEER_TAG_SIZE - l->pay_tag_got : 0);
                want = (int)MIN(rest, (uint64_t)LINK_RCVLOWAT_MAX);
        }
        if (want == MAX(l->rcvlowat, 1))
                return;
        /* (void): a mark that cannot be set only costs wake-ups */
        (void)setsockopt(l->fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want));
        l->rcvlowat = want;
}

/* Read and dispatch until the socket is empty or the link blocks. */
static void link_read(struct plink *l) {
        while (l->state != L_DEAD && l->state != L_CONNECTING && !l->rx_blocked) {
                if (l->pay) {
                        uint8_t *dst = l->pay_dst;
                        bool tag = l->pay_got == l->pay_len;
                        /* the payload, then (after the handshake) its tag */
                        ssize_t n = tag ? recv(l->fd, l->pay_tag + l->pay_tag_got,
                                               PEER_TAG_SIZE - l->pay_tag_got, 0)
                                        : recv(l->fd, dst + l->pay_got, l->pay_len - l->pay_got, 0);
                        if (n <= 0) {
                                if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
                                        link_set_rcvlowat(l);
                                        return;
                                }
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
                        if (l->pay_got < l->pay_len ||
                            (l->mac_rx && l->pay_tag_got < PEER_TAG_SIZE))
                                continue;
                        /* verified before anything looks at the bytes: a
                         * refused frame is dropped with the link (link_close
                         * gives its memory back), nothing of it is stored */
                        if (l->mac_rx && !frame_mac_check(l->mac_rx, l->pay_tag)) {
                                link_refuse_frame(l, PEER_MSG_DATA, l->pay_frame);
                                return;
                        }
                        link_payload_done(l);
                        continue;
                }
                if (l->in_got < l->in_want) {
                        ssize_t n = recv(l->fd, l->in + l->in_got, l->in_want - l->in_got, 0);
                        if (n <= 0) {
                                if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
                                        link_set_rcvlowat(l);
                                        return;
                                }
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
                        if (l->dialer)
                                l->dialer->last_heard_ms = loop_now_ms();
                        bool go = l->env->ops->data(l, m);
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
                m.hello.node_index = l->env->self;
                m.hello.node_count = l->env->node_count;
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
                   l->env->handshake_timeout_ms);
}

/* Keepalive from the first byte on: a peer that vanishes without a FIN
 * (or an attacker's half-open connection) is found by the kernel, not
 * only by the handshake deadline or the application's PINGs. */
static void link_keepalive(struct link_env *env, int fd) {
        int one = 1;
        int idle = (int)((env->keepalive_ms + 999) / 1000);
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
static struct plink *link_new(struct link_env *env, int fd, bool client, uint32_t node,
                              const char *host, uint16_t port) {
        struct plink *l = calloc(1, sizeof(*l));
        if (!l)
                return NULL;
        l->env = env;
        l->fd = fd;
        l->client = client;
        l->node = node;
        snprintf(l->host, sizeof(l->host), "%s", host);
        snprintf(l->addr, sizeof(l->addr), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
        list_init(&l->ctlq);
        list_init(&l->ins);
        list_init(&l->outs);
        list_init(&l->handshake.link);
        list_init(&l->reap.link);
        /* small until authenticated: link_read() grows it */
        l->in = malloc(PEER_HDR_SIZE + PREAUTH_BODY_MAX);
        l->in_cap = PEER_HDR_SIZE + PREAUTH_BODY_MAX;
        l->in_want = PEER_HDR_SIZE;
        if (!l->in || peer_nonce(l->nonce_own) < 0) {
                free(l->in);
                free(l);
                return NULL;
        }
        link_keepalive(env, fd);
        list_init(&l->link);
        list_add_tail(&env->links, &l->link);
        l->state = client ? L_CONNECTING : L_HELLO;
        l->events = client ? EPOLLOUT : EPOLLIN;
        if (loop_watch_add(env->loop, &l->watch, fd, l->events, link_on_event) < 0) {
                list_unlink(&l->link);
                free(l->in);
                free(l);
                return NULL;
        }
        l->watching = true;
        /* the connecting side's deadline also covers the TCP connect */
        uint64_t deadline = env->handshake_timeout_ms;
        if (client)
                deadline += env->connect_timeout_ms;
        if (deadline)
                loop_timer_start(env->loop, &l->handshake, deadline, link_handshake_timeout);
        return l;
}

/* ---- connecting and accepting ------------------------------------------------------------- */

void dialer_connect(struct dialer *d) {
        struct link_env *env = d->env;
        const struct node_address *a = &env->addrs[d->node];
        char port[8], addr[80];
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;

        if (env->freeing || d->l)
                return;
        snprintf(port, sizeof(port), "%u", a->port);
        snprintf(addr, sizeof(addr), "%s:%u", a->host, a->port);
        /* names resolve synchronously: a cluster's peer list is IP
         * addresses or names in /etc/hosts in practice */
        int r = getaddrinfo(a->host, port, &hints, &res);
        if (r != 0 || !res) {
                log_warn("peers: cannot resolve node %u's address %s: %s", d->node, addr,
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
        d->l = link_new(env, fd, true, d->node, a->host, a->port);
        if (!d->l) {
                close(fd);
                goto retry;
        }
        d->l->dialer = d;
        return;
retry:
        d->backoff_ms = d->backoff_ms ? MIN(d->backoff_ms * 2, RECONNECT_MAX_MS) : RECONNECT_MIN_MS;
        loop_timer_start(env->loop, &d->timer, d->backoff_ms, dialer_timer);
}

static void dialer_timer(struct loop_timer *timer) {
        dialer_connect(container_of(timer, struct dialer, timer));
}

void dialer_stop(struct dialer *d) {
        loop_timer_cancel(&d->timer);
        loop_timer_cancel(&d->ping);
}

bool dialer_up(const struct dialer *d) {
        return d->l && d->l->state == L_READY;
}

/* How many accepted links from host have not authenticated yet. */
static uint32_t env_unauth_from(struct link_env *env, const char *host) {
        uint32_t n = 0;
        struct list *pos;
        list_for_each(pos, &env->links) {
                struct plink *l = list_entry(pos, struct plink, link);
                n += !l->client && l->state != L_READY && l->state != L_DEAD &&
                     strcmp(l->host, host) == 0;
        }
        return n;
}

static bool env_is_source_host(struct link_env *env, const char *host) {
        for (size_t i = 0; i < env->nsource_hosts; i++)
                if (strcmp(env->source_hosts[i], host) == 0)
                        return true;
        return false;
}

/* Takes ownership of fd.  The caps on connections that have not
 * authenticated keep strangers from taking the file descriptors, the
 * memory and the loop that authenticated links need; a connection over a
 * cap is closed at once (the other side sees a reset or EOF). */
static void on_accept(struct acceptor *a, int fd, const struct sockaddr_storage *sa,
                      socklen_t len) {
        struct link_env *env = container_of(a, struct link_env, acceptor);
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
        uint32_t from_host = env_unauth_from(env, host);
        if (env->unauth_per_address && from_host >= env->unauth_per_address) {
                acceptor_refuse(a, "%s:%u: %u connections from that address not authenticated "
                                   "yet, the limit ([cluster] peer_unauthenticated_per_address)",
                                host, port, from_host);
                close(fd);
                return;
        }
        /* a replication source's address is held to the per-address cap
         * only, so that strangers filling the total cannot keep the real
         * neighbours out */
        bool source = env_is_source_host(env, host);
        if (!source && env->unauth_max && env->nunauth >= env->unauth_max) {
                acceptor_refuse(a, "%s:%u: %u connections not authenticated yet, the limit "
                                   "([cluster] peer_unauthenticated_max)",
                                host, port, env->nunauth);
                close(fd);
                return;
        }
        struct plink *l = link_new(env, fd, false, UINT32_MAX, host, port);
        if (!l) {
                close(fd);
                return;
        }
        if (!source) {
                l->unauth_counted = true;
                env->nunauth++;
        }
}

/* The numeric addresses of the nodes that replicate here (they are the
 * ones that connect to this node's listener). */
static void env_resolve_sources(struct link_env *env) {
        /* (node 0 lists every node: it stops resolving once the table is full) */
        for (size_t i = 0; i < env->nsources && env->nsource_hosts < LINK_NODES_MAX; i++) {
                const struct node_address *p = &env->addrs[env->sources[i]];
                struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL, *ai;
                if (!p->host || getaddrinfo(p->host, NULL, &hints, &res) != 0)
                        continue;
                for (ai = res; ai && env->nsource_hosts < LINK_NODES_MAX; ai = ai->ai_next) {
                        char *h = env->source_hosts[env->nsource_hosts];
                        const void *addr = ai->ai_family == AF_INET
                                ? (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr
                                : (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
                        if (inet_ntop(ai->ai_family, addr, h, 64) && !env_is_source_host(env, h))
                                env->nsource_hosts++;
                }
                freeaddrinfo(res);
        }
}

int link_adopt(struct link_env *env, int fd, const char *host) {
        struct plink *l = link_new(env, fd, false, UINT32_MAX, host, 0);
        if (!l) {
                close(fd);
                return -ENOMEM;
        }
        /* counted like a stranger's connection from the listener */
        l->unauth_counted = true;
        env->nunauth++;
        return 0;
}

int link_env_listen(struct link_env *env) {
        char port[8];
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *res = NULL;

        env->listen_fd = -1;
        list_init(&env->links);
        env_resolve_sources(env);
        snprintf(port, sizeof(port), "%u", env->listen_port);
        int r = getaddrinfo(env->listen_host, port, &hints, &res);
        if (r != 0 || !res) {
                log_error("peers: cannot resolve the listen address %s: %s",
                          env->listen_host ? env->listen_host : "*", gai_strerror(r));
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
                          env->listen_host ? env->listen_host : "*", env->listen_port,
                          strerror(-r));
                if (fd >= 0)
                        close(fd);
                freeaddrinfo(res);
                return r;
        }
        freeaddrinfo(res);
        env->listen_fd = fd;
        r = acceptor_start(&env->acceptor, env->loop, fd, "peers", on_accept);
        if (r < 0) {
                log_error("peers: cannot watch the listening socket: %s", strerror(-r));
                return r;
        }
        log_info("peers: node %u of %u listening on %s:%u", env->self, env->node_count,
                 env->listen_host ? env->listen_host : "*", env->listen_port);
        return 0;
}

void link_env_close(struct link_env *env) {
        struct list *pos, *tmp;

        env->freeing = true;
        if (env->listen_fd >= 0) {
                acceptor_stop(&env->acceptor);
                close(env->listen_fd);
                env->listen_fd = -1;
        }
        list_for_each_safe(pos, tmp, &env->links) {
                struct plink *l = list_entry(pos, struct plink, link);
                l->dialer = NULL;
                if (l->state == L_DEAD)
                        link_free(l); /* closed, its reap timer not run yet */
                else
                        link_close(l, -ECANCELED, "shutting down");
        }
}
