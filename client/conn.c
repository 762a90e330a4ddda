/* SPDX-License-Identifier: MIT */
/*
 * conn — see conn.h.  One request in flight; replies are matched by seq and
 * type, so a confused daemon cannot make the client misread a reply.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "conn.h"

const char *wire_default_path(char *buf, size_t len) {
        const char *env = getenv("CKPT_SOCKET");
        struct stat st;

        if (env && *env) {
                snprintf(buf, len, "%s", env);
                return buf;
        }
        if (geteuid() != 0) {
                const char *rt = getenv("XDG_RUNTIME_DIR");
                if (rt && *rt == '/') {
                        snprintf(buf, len, "%s/ckptd.sock", rt);
                        if (stat(buf, &st) == 0)
                                return buf;
                }
                const char *state = getenv("XDG_STATE_HOME");
                const char *home = getenv("HOME");
                if (state && *state == '/')
                        snprintf(buf, len, "%s/ckptd/ckptd.sock", state);
                else if (home && *home == '/')
                        snprintf(buf, len, "%s/.local/state/ckptd/ckptd.sock", home);
                else
                        buf[0] = 0;
                if (buf[0] && stat(buf, &st) == 0)
                        return buf;
        }
        snprintf(buf, len, "/run/ckptd/ckptd.sock");
        return buf;
}

int wire_open(struct wire *w, const char *path, struct ckpt_rep_hello *hello) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char def[sizeof(sa.sun_path)];
        int r;

        memset(w, 0, sizeof(*w));
        w->fd = -1;
        if (!path)
                path = wire_default_path(def, sizeof(def));
        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        w->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (w->fd < 0)
                return -errno;
        if (connect(w->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                r = -errno;
                snprintf(w->errmsg, sizeof(w->errmsg), "cannot connect to ckptd at %s: %s", path,
                         strerror(-r));
                close(w->fd);
                w->fd = -1;
                return r;
        }
        struct ckpt_request req = { .hdr.type = CKPT_MSG_HELLO };
        struct ckpt_reply rep;
        req.hello.proto_min = CKPT_PROTO_VERSION;
        req.hello.proto_max = CKPT_PROTO_VERSION;
        r = wire_call(w, &req, &rep, NULL);
        if (r < 0) {
                close(w->fd);
                w->fd = -1;
                return r;
        }
        if (hello)
                *hello = rep.hello;
        return 0;
}

void wire_close(struct wire *w) {
        if (w->fd >= 0)
                close(w->fd);
        w->fd = -1;
}

int wire_call(struct wire *w, struct ckpt_request *req, struct ckpt_reply *rep, int *fd_out) {
        uint8_t buf[CKPT_MSG_MAX + 1];
        union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } ctrl;
        int r, fd = -1;

        if (fd_out)
                *fd_out = -1;
        w->errmsg[0] = 0;
        if (w->fd < 0)
                return -ENOTCONN;
        req->hdr.seq = ++w->seq;
        r = ckpt_request_encode(req, buf, sizeof(buf));
        if (r < 0) {
                snprintf(w->errmsg, sizeof(w->errmsg), "invalid request: %s", strerror(-r));
                return r;
        }
        ssize_t n;
        do
                n = send(w->fd, buf, (size_t)r, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0) {
                r = -errno;
                snprintf(w->errmsg, sizeof(w->errmsg), "lost the connection to ckptd: %s",
                         strerror(-r));
                return r == -EPIPE ? -ECONNRESET : r;
        }

        struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
        struct msghdr msg = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = ctrl.buf,
                .msg_controllen = sizeof(ctrl.buf),
        };
        do
                n = recvmsg(w->fd, &msg, MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        if (n <= 0) {
                r = n == 0 ? -ECONNRESET : -errno;
                snprintf(w->errmsg, sizeof(w->errmsg), "lost the connection to ckptd: %s",
                         strerror(-r));
                return r;
        }
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
                    cm->cmsg_len == CMSG_LEN(sizeof(int)))
                        memcpy(&fd, CMSG_DATA(cm), sizeof(int));

        r = ckpt_reply_decode(rep, buf, (size_t)n);
        if (r == 0 && rep->hdr.seq != req->hdr.seq)
                r = -EBADMSG;
        if (r == 0 && rep->hdr.type != CKPT_MSG_ERROR &&
            rep->hdr.type != (req->hdr.type | CKPT_MSG_REPLY))
                r = -EBADMSG;
        if (r < 0) {
                if (fd >= 0)
                        close(fd);
                snprintf(w->errmsg, sizeof(w->errmsg), "malformed reply from ckptd (%s)",
                         strerror(-r));
                return r;
        }
        if (rep->hdr.type == CKPT_MSG_ERROR) {
                if (fd >= 0)
                        close(fd);
                snprintf(w->errmsg, sizeof(w->errmsg), "%s", rep->error.message);
                return rep->error.error;
        }
        if (fd_out)
                *fd_out = fd;
        else if (fd >= 0)
                close(fd);
        return 0;
}
