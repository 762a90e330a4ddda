/* SPDX-License-Identifier: MIT */
/*
 * conn — the synchronous request/reply layer shared by libckpt and ckptctl:
 * connect, send one request, receive its reply (and an attached fd).
 * Internal: not part of libckpt's ABI.
 *
 * Every exchange has a client-side deadline (docs/protocol.md, "Client-side
 * deadlines"): a stopped or hung daemon makes a call fail with -ETIMEDOUT
 * instead of blocking the trainer forever.  A connection whose exchange ran
 * out is closed at once and stays closed: its late reply could otherwise be
 * read as the answer to the next request, and what the lost request did in
 * the daemon (a save begun, a window lent) is unknown to the caller, while a
 * closed connection has a defined outcome (its unfinished saves fail and its
 * slots return).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "ckpt-proto.h"

/* Deadline of one exchange when neither the caller nor $CKPT_TIMEOUT_MS
 * says: above the daemon's default pool wait (30 s), the longest a request
 * waits in a healthy daemon with default settings. */
#define WIRE_TIMEOUT_DEFAULT_MS 60000u
/* What a request with its own timeout (WAIT, COMMIT) allows the daemon on
 * top of it to send the reply. */
#define WIRE_REPLY_GRACE_MS 250u
/* wire_call_within()'s timeout: use the connection's w->timeout_ms. */
#define WIRE_TIMEOUT_CONN (-1)

struct wire {
        int fd;
        uint32_t seq;
        /* The protocol version of every request (HELLO's answer); until
         * then CKPT_PROTO_VERSION_MIN, which every daemon of it reads. */
        uint16_t proto;
        /* Deadline of one exchange without a timeout of its own; 0: none. */
        uint32_t timeout_ms;
        char errmsg[CKPT_ERRMSG_MAX + 1];
        /* Why the connection was closed under its user (a deadline, a lost
         * daemon); "" while it is open or was never opened. */
        char closed_why[CKPT_ERRMSG_MAX + 1];
};

/* Where the daemon listens when nobody said: $CKPT_SOCKET, else the
 * per-user socket if it exists, else the system one.  Writes into buf. */
const char *wire_default_path(char *buf, size_t len);

/* The deadline $CKPT_TIMEOUT_MS asks for, WIRE_TIMEOUT_DEFAULT_MS when it is
 * unset or empty.  -EINVAL (message in errmsg, errmsg_len bytes) when it is
 * not a number of milliseconds below 2^32. */
int wire_timeout_from_env(uint32_t *out, char *errmsg, size_t errmsg_len);

/* Connect (path NULL: default) and say HELLO, all within timeout_ms (0: no
 * deadline), which then becomes w->timeout_ms.  what names the caller in
 * messages ("ckpt_connect").  -ENOENT / -ECONNREFUSED when no daemon
 * listens; -ETIMEDOUT when it did not accept or answer in time.  hello may
 * be NULL. */
int wire_open_within(struct wire *w, const char *path, const char *what, uint32_t timeout_ms,
                     struct ckpt_rep_hello *hello);
/* wire_open_within() with the deadline from $CKPT_TIMEOUT_MS. */
int wire_open(struct wire *w, const char *path, struct ckpt_rep_hello *hello);
void wire_close(struct wire *w);

/*
 * Send req (type set by caller), wait for the reply.  Returns 0 and fills
 * rep, or the daemon's error (message in w->errmsg), or a transport error
 * (-ECONNRESET when the daemon went away).  *fd_out receives an attached fd
 * (or -1) if fd_out is not NULL; otherwise any fd is closed.
 *
 * The exchange gets timeout_ms (0: no deadline; WIRE_TIMEOUT_CONN:
 * w->timeout_ms) from the moment it starts.  Running out is -ETIMEDOUT
 * with "<what>: no reply from ckptd within N ms ..." in w->errmsg; the
 * connection is then closed, as it is when the daemon goes away or answers
 * nonsense, and every later call returns -ENOTCONN naming why.  what names
 * the caller (NULL: the request type).
 */
int wire_call_within(struct wire *w, const char *what, int64_t timeout_ms,
                     struct ckpt_request *req, struct ckpt_reply *rep, int *fd_out);
/* wire_call_within(w, NULL, WIRE_TIMEOUT_CONN, ...) */
int wire_call(struct wire *w, struct ckpt_request *req, struct ckpt_reply *rep, int *fd_out);

/* The deadline of a request that carries its own timeout: the daemon
 * answers when that runs out, so allow it plus WIRE_REPLY_GRACE_MS — unless
 * the connection has no deadline at all (w->timeout_ms 0). */
int64_t wire_timeout_plus_grace(const struct wire *w, uint32_t timeout_ms);
