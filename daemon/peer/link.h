/* SPDX-License-Identifier: MIT */
/*
 * link — the transport of the neighbour tier: TCP connections between
 * daemons, framed (proto/peer.c), the PSK handshake (peer/auth.h), then a
 * GMAC tag after every frame (peer/framemac.h: sealed as a frame goes on
 * the wire, checked before a frame is acted on), an output queue (control
 * messages between frames, streams' frames produced on demand so memory
 * stays bounded), the listener with its caps on unauthenticated
 * connections, and on the connecting side reconnect with backoff and
 * keepalive PINGs.
 *
 * A link knows frames and streams, nothing of ranks, steps or catalogs:
 * what a frame means is the business of the layers above (peer/transfer
 * for a rank's frames, peer/replication and peer/neighbour_restore for the
 * requests), which it calls through struct link_ops, and whose streams of
 * outgoing frames (struct link_out) it asks for their next frame when it
 * is their turn.
 *
 * Ownership: struct link_env (the links of one daemon, its listener and
 * the shared handshake parameters) belongs to its creator (peers.c);
 * struct plink and its queues to this module; a struct link_out or
 * link_in to the layer that embeds it, lent to the link between
 * link_out_add()/link_in_add() and its release()/closed() callback;
 * struct dialer to the layer that embeds it, its fields below "link-owned"
 * written only here.
 *
 * Loop thread only.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "cluster/node_address.h"
#include "io/acceptor.h"
#include "io/loop.h"
#include "peer-proto.h"
#include "util/list.h"

/* The most nodes one daemon replicates to or holds replicas of. */
#define LINK_NODES_MAX 16

enum link_state { L_CONNECTING, L_HELLO, L_AUTH, L_READY, L_DEAD };

struct plink;
struct dialer;
struct ctl;
struct frame_mac;

/* What the layers above make of an authenticated link's frames. */
struct link_ops {
        /* a whole message other than DATA, PING and PONG, after the handshake */
        void (*message)(struct plink *l, const struct peer_msg *m);
        /* a DATA header: it calls link_payload_expect() (and may block the
         * input with link_payload_block()) or closes the link.  false: stop
         * reading (blocked or closed). */
        bool (*data)(struct plink *l, const struct peer_msg *m);
        /* the payload announced by link_payload_expect(cookie) is in
         * memory and passed its MAC: the cookie is the caller's again */
        void (*payload)(struct plink *l, void *cookie);
        /* the link closed with that payload not in: the cookie is the
         * caller's again */
        void (*payload_drop)(struct plink *l, void *cookie);
};

/* The links of one daemon and what every handshake needs.  Filled by the
 * creator before link_env_listen(); the fields after "link-owned" are this
 * module's. */
struct link_env {
        struct loop *loop;
        const struct link_ops *ops;
        const struct node_address *addrs; /* node_count entries */
        uint32_t self, node_count;
        const uint8_t *psk;
        size_t psk_len;
        const char *listen_host;          /* NULL: any */
        uint16_t listen_port;
        uint64_t connect_timeout_ms;
        uint64_t handshake_timeout_ms;    /* 0: none */
        uint64_t keepalive_ms;            /* TCP keepalive idle time; 0: off */
        bool frames_unsealed;             /* no frame MACs (peers_options) */
        uint32_t unauth_max;              /* 0: no cap */
        uint32_t unauth_per_address;      /* 0: no cap */
        /* the nodes that may connect here (they replicate to this one, or,
         * on the commit's coordinator, any node: its control link);
         * borrowed */
        const uint32_t *sources;
        size_t nsources;
        bool paused;                      /* link_env_pause(): no new frame leaves */
        bool freeing;                     /* shutting down: nothing is retried or logged */
        /* link-owned */
        int listen_fd;
        struct acceptor acceptor;
        /* accepted links not authenticated yet, from addresses other than
         * the replication sources' (those count only per address) */
        uint32_t nunauth;
        /* the replication sources' addresses, numeric: their connections
         * are never crowded out by strangers' */
        char source_hosts[LINK_NODES_MAX][64];
        size_t nsource_hosts;
        struct list links;
};

/* A stream of frames leaving on a link (a rank being sent): when it is its
 * turn the link asks it for its next frame, seals it and writes it. */
struct link_out {
        struct list link;          /* plink.outs */
        uint32_t stream;
        bool ended;                /* its last frame is produced */
        bool keep;                 /* stays on the link after its last frame (an
                                    * answer is due); else released once it is out */
        /* the frame on its way: buf (header [+ data header] or the whole
         * message, with room for a tag after len), then, when payload, flen
         * bytes: of mem when set (memory the link_out owns and leaves alone
         * until its next frame is asked for; sent with send()), else of fd
         * from foff (a multiple of the page size; sent with sendfile) */
        uint8_t *buf;
        size_t len, sent;
        bool payload;
        const uint8_t *mem;
        int fd;
        uint64_t foff, flen, fsent;
        /* link-owned: a DATA frame's tag (computed before its payload is
         * sent), sent after its payload */
        uint8_t trailer[PEER_TAG_SIZE];
        size_t trailer_len, trailer_sent;
        /* produce the next frame into buf (or the headers into buf and the
         * payload's range): 1, or -errno.  Called only while !ended. */
        int (*next)(struct link_out *o, struct plink *l);
        /* what it carries, for the log ("rank 3 of job j step 7") */
        void (*describe)(const struct link_out *o, char *buf, size_t size);
        /* the link is done with it (removed, or the link closed) */
        void (*release)(struct link_out *o, struct plink *l);
};

/* A stream arriving on a link (a rank being received). */
struct link_in {
        struct list link;          /* plink.ins */
        uint32_t stream;
        /* the link closed: it is unlinked already and the caller's again */
        void (*closed)(struct link_in *in, struct plink *l);
};

/* The connecting side's view of one node: its link while up, reconnect
 * with backoff, keepalive PINGs.  Embedded by the layer above. */
struct dialer {
        struct link_env *env;
        uint32_t node;
        size_t slot;               /* the embedder's index for it */
        /* the link is up (authenticated) / went down: the layers above
         * start or drop what they had on it */
        void (*up)(struct dialer *d);
        void (*down)(struct dialer *d);
        /* link-owned */
        struct plink *l;           /* NULL while down */
        struct loop_timer timer;   /* reconnect */
        struct loop_timer ping;    /* keepalive while up */
        uint64_t last_heard_ms;    /* loop_now_ms() of the last message received */
        uint64_t backoff_ms;
        int64_t down_since;        /* unix seconds; 0: never up yet */
        char last_error[256];      /* why the link last went down, for status */
};

struct plink {
        struct list link;          /* link_env.links */
        struct link_env *env;
        int fd;
        struct loop_watch watch;
        bool watching;
        uint32_t events;
        bool client;
        uint32_t node;             /* the other side */
        char addr[80];
        char host[64];             /* the other side's address, numeric */
        enum link_state state;
        bool unauth_counted;       /* accepted, counted in env.nunauth */
        struct loop_timer handshake; /* the handshake deadline, until L_READY */
        struct loop_timer reap;    /* frees a dead link from the loop (link_close) */
        uint8_t nonce_own[PEER_NONCE_SIZE], nonce_peer[PEER_NONCE_SIZE];
        /* frame MACs, from the handshake's end on (NULL before) */
        struct frame_mac *mac_tx, *mac_rx;
        /* input */
        uint8_t *in;
        size_t in_cap, in_got, in_want;
        struct peer_hdr hdr;
        bool hdr_done;
        /* DATA payload being read: into pay_dst (NULL until the memory
         * is there), for pay_cookie */
        bool pay;
        void *pay_cookie;
        uint8_t *pay_dst;
        uint32_t pay_len;
        uint64_t pay_got;
        uint64_t pay_frame;        /* its frame counter, for the log */
        uint8_t pay_tag[PEER_TAG_SIZE];
        size_t pay_tag_got;
        bool rx_blocked;           /* waiting for memory for the payload */
        int rcvlowat;              /* the socket's SO_RCVLOWAT (0: never set, i.e. 1) */
        struct list ins;           /* struct link_in arriving (or finishing) */
        uint32_t nin;
        /* output */
        struct list ctlq;
        struct ctl *cur;
        size_t cur_sent;
        struct list outs;          /* struct link_out leaving; turns in order */
        uint32_t nout;
        struct link_out *out_cur;  /* whose frame is on its way, NULL between frames */
        uint32_t next_stream;
        uint64_t seq;
        /* the connecting side */
        struct dialer *dialer;
};

/* Start listening on env->listen_host:listen_port.  0 or -errno (logged). */
int link_env_listen(struct link_env *env);
/* Stop listening and close every link, shutting down (env->freeing set). */
void link_env_close(struct link_env *env);
/* Hold outgoing stream frames between frames, or let them go again. */
void link_env_pause(struct link_env *env, bool paused);

/* Take fd, a connected stream socket (ownership passes, closed on failure
 * too), as a connection accepted from host.  0 or -errno. */
int link_adopt(struct link_env *env, int fd, const char *host);

/* Connect d to its node now (and keep it connected). */
void dialer_connect(struct dialer *d);
/* Cancel d's timers (shutting down). */
void dialer_stop(struct dialer *d);
/* d has an authenticated link. */
bool dialer_up(const struct dialer *d);

/* Queue a message (encoded now, sealed when it goes out).  0 or -errno;
 * a failure to send closes the link. */
int link_send(struct plink *l, struct peer_msg *m);
void link_send_error(struct plink *l, uint32_t stream, int error, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
/* Close l (once): every stream on it is released or told, the dialer
 * reconnects with backoff.  The struct is freed later, from a timer. */
void link_close(struct plink *l, int error, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* An accepted connection that has not authenticated yet. */
bool link_stranger(const struct plink *l);

/* The next frame counter of the header to encode. */
uint64_t link_next_seq(struct plink *l);
/* Write what can be written now. */
void link_flush(struct plink *l);

void link_out_add(struct plink *l, struct link_out *o);
/* Remove o from l and release it. */
void link_out_remove(struct plink *l, struct link_out *o);
struct link_out *link_out_find(struct plink *l, uint32_t stream);
/* o's current frame is on its way (an answer about o would be early). */
bool link_out_on_wire(const struct plink *l, const struct link_out *o);

void link_in_add(struct plink *l, struct link_in *in);
/* Unlink in from l (it is the caller's again, closed() is not called). */
void link_in_remove(struct plink *l, struct link_in *in);
struct link_in *link_in_find(struct plink *l, uint32_t stream);

/* From ops->data: the DATA's length-byte payload is read next, for cookie,
 * into dst (NULL: memory not there yet). */
void link_payload_expect(struct plink *l, void *cookie, uint32_t length, uint8_t *dst);
/* From ops->data, after link_payload_expect(): the memory is there now. */
void link_payload_set_memory(struct plink *l, uint8_t *dst);
/* From ops->data: no memory for it yet; stop reading until
 * link_payload_memory(). */
void link_payload_block(struct plink *l);
/* The memory for the expected payload came: reading goes on.  (When none
 * comes, the caller closes the link.) */
void link_payload_memory(struct plink *l, uint8_t *dst);
