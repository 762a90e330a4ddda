/* SPDX-License-Identifier: MIT */
/*
 * conn — the synchronous request/reply layer shared by libckpt and ckptctl:
 * connect, send one request, receive its reply (and an attached fd).
 * Internal: not part of libckpt's ABI.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "ckpt-proto.h"

struct wire {
        int fd;
        uint32_t seq;
        char errmsg[CKPT_ERRMSG_MAX + 1];
};

/* Where the daemon listens when nobody said: $CKPT_SOCKET, else the
 * per-user socket if it exists, else the system one.  Writes into buf. */
const char *wire_default_path(char *buf, size_t len);

/* Connect (path NULL: default) and say HELLO.  -ENOENT / -ECONNREFUSED when
 * no daemon listens.  hello may be NULL. */
int wire_open(struct wire *w, const char *path, struct ckpt_rep_hello *hello);
void wire_close(struct wire *w);

/* Send req (type set by caller), wait for the reply.  Returns 0 and fills
 * rep, or the daemon's error (message in w->errmsg), or a transport error
 * (-ECONNRESET when the daemon went away).  *fd_out receives an attached fd
 * (or -1) if fd_out is not NULL; otherwise any fd is closed. */
int wire_call(struct wire *w, struct ckpt_request *req, struct ckpt_reply *rep, int *fd_out);
