/* SPDX-License-Identifier: MIT */
/*
 * conn — see conn.h.  One request in flight; replies are matched by seq and
 * type, so a confused daemon cannot make the client misread a reply.  Every
 * wait (connect, send, receive) is bounded by the exchange's deadline:
 * poll() before a non-blocking send or receive, never a blocking recvmsg.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
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

/* Milliseconds on the monotonic clock: deadlines survive a change of the
 * wall clock. */
static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A deadline timeout_ms from now; -1 (none) for 0. */
static int64_t deadline_after(uint32_t timeout_ms) {
        return timeout_ms ? now_ms() + timeout_ms : -1;
}

int wire_timeout_from_env(uint32_t *out, char *errmsg, size_t errmsg_len) {
        const char *env = getenv("CKPT_TIMEOUT_MS");
        char *end;

        if (!env || !*env) {
                *out = WIRE_TIMEOUT_DEFAULT_MS;
                return 0;
        }
        errno = 0;
        unsigned long long v = strtoull(env, &end, 10);
        if (*env < '0' || *env > '9' || *end || errno || v > UINT32_MAX) {
                snprintf(errmsg, errmsg_len,
                         "CKPT_TIMEOUT_MS='%.64s' is not a number of milliseconds below 2^32 "
                         "(0: no deadline)",
                         env);
                return -EINVAL;
        }
        *out = (uint32_t)v;
        return 0;
}

/* The connection is broken (deadline, daemon gone, nonsense reply): close
 * it so that nothing late is ever read as an answer, and remember why for
 * the calls that follow.  Returns r. */
static int wire_fail(struct wire *w, int r) {
        snprintf(w->closed_why, sizeof(w->closed_why), "%s", w->errmsg);
        wire_close(w);
        return r;
}

/* Wait until fd is ready for events or the deadline (-1: none) passes:
 * 0 or -ETIMEDOUT.  An error or hang-up counts as ready: the send or
 * receive that follows reports it. */
static int wire_wait(struct wire *w, short events, int64_t deadline) {
        for (;;) {
                int ms = -1;
                if (deadline >= 0) {
                        int64_t left = deadline - now_ms();
                        if (left <= 0)
                                return -ETIMEDOUT;
                        ms = left > INT_MAX ? INT_MAX : (int)left;
                }
                struct pollfd p = { .fd = w->fd, .events = events };
                int n = poll(&p, 1, ms);
                if (n > 0)
                        return 0;
                if (n < 0 && errno != EINTR)
                        return -errno;
        }
}

/* connect(), bounded by the deadline: a stopped daemon's listen queue fills
 * up, and then a blocking connect on AF_UNIX waits for room in it.
 * SO_SNDTIMEO bounds that wait (the kernel answers -EAGAIN when it runs
 * out), and it is cleared again: sends below never block. */
static int connect_within(int fd, const struct sockaddr_un *sa, int64_t deadline) {
        for (;;) {
                if (deadline >= 0) {
                        int64_t left = deadline - now_ms();
                        if (left <= 0)
                                return -ETIMEDOUT;
                        struct timeval tv = { .tv_sec = left / 1000,
                                              .tv_usec = (suseconds_t)(left % 1000) * 1000 };
                        if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
                                return -errno;
                }
                if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0)
                        break;
                if (errno == EAGAIN && deadline >= 0)
                        continue; /* the kernel's wait ran out: ours decides */
                if (errno != EINTR)
                        return -errno;
        }
        if (deadline >= 0) {
                struct timeval none = { 0 };
                (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));
        }
        return 0;
}

static int exchange(struct wire *w, const char *what, int64_t deadline, int64_t timeout_ms,
                    struct ckpt_request *req, struct ckpt_reply *rep, int *fd_out);

int wire_open_within(struct wire *w, const char *path, const char *what, uint32_t timeout_ms,
                     struct ckpt_rep_hello *hello) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char def[sizeof(sa.sun_path)];
        int64_t deadline = deadline_after(timeout_ms);
        int r;

        memset(w, 0, sizeof(*w));
        w->fd = -1;
        w->proto = CKPT_PROTO_VERSION_MIN;
        w->timeout_ms = timeout_ms;
        if (!path)
                path = wire_default_path(def, sizeof(def));
        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        w->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (w->fd < 0)
                return -errno;
        r = connect_within(w->fd, &sa, deadline);
        if (r == -ETIMEDOUT)
                snprintf(w->errmsg, sizeof(w->errmsg),
                         "%s: ckptd at %s did not accept the connection within %" PRIu32
                         " ms (its listen queue is full: is it stopped, hung or overloaded?); "
                         "allow more time with CKPT_TIMEOUT_MS",
                         what, path, timeout_ms);
        else if (r < 0)
                snprintf(w->errmsg, sizeof(w->errmsg), "cannot connect to ckptd at %s: %s", path,
                         strerror(-r));
        if (r < 0) {
                wire_close(w);
                return r;
        }
        struct ckpt_request req = { .hdr.type = CKPT_MSG_HELLO };
        struct ckpt_reply rep;
        req.hello.proto_min = CKPT_PROTO_VERSION_MIN;
        req.hello.proto_max = CKPT_PROTO_VERSION;
        r = exchange(w, what, deadline, timeout_ms, &req, &rep, NULL);
        if (r == 0 && (rep.hello.proto < CKPT_PROTO_VERSION_MIN ||
                       rep.hello.proto > CKPT_PROTO_VERSION)) {
                snprintf(w->errmsg, sizeof(w->errmsg), "ckptd chose protocol version %u, not one "
                         "of the versions %u..%u this library speaks", rep.hello.proto,
                         CKPT_PROTO_VERSION_MIN, CKPT_PROTO_VERSION);
                r = -EPROTONOSUPPORT;
        }
        if (r < 0) {
                wire_close(w);
                return r;
        }
        w->proto = rep.hello.proto;
        if (hello)
                *hello = rep.hello;
        return 0;
}

int wire_open(struct wire *w, const char *path, struct ckpt_rep_hello *hello) {
        uint32_t timeout_ms;
        int r;

        memset(w, 0, sizeof(*w));
        w->fd = -1;
        r = wire_timeout_from_env(&timeout_ms, w->errmsg, sizeof(w->errmsg));
        if (r < 0)
                return r;
        return wire_open_within(w, path, "connect", timeout_ms, hello);
}

void wire_close(struct wire *w) {
        if (w->fd >= 0)
                close(w->fd);
        w->fd = -1;
}

int64_t wire_timeout_plus_grace(const struct wire *w, uint32_t timeout_ms) {
        return w->timeout_ms ? (int64_t)timeout_ms + WIRE_REPLY_GRACE_MS : 0;
}

int wire_call_within(struct wire *w, const char *what, int64_t timeout_ms,
                     struct ckpt_request *req, struct ckpt_reply *rep, int *fd_out) {
        if (timeout_ms == WIRE_TIMEOUT_CONN)
                timeout_ms = w->timeout_ms;
        if (timeout_ms < 0 || timeout_ms > UINT32_MAX + (int64_t)WIRE_REPLY_GRACE_MS)
                return -EINVAL;
        int64_t deadline = timeout_ms ? now_ms() + timeout_ms : -1;
        return exchange(w, what, deadline, timeout_ms, req, rep, fd_out);
}

int wire_call(struct wire *w, struct ckpt_request *req, struct ckpt_reply *rep, int *fd_out) {
        return wire_call_within(w, NULL, WIRE_TIMEOUT_CONN, req, rep, fd_out);
}

/* A daemon that stops says so last (docs/protocol.md, "Farewell"): an ERROR
 * with seq 0 and -ESHUTDOWN.  Whether rep is it. */
static bool is_farewell(const struct ckpt_reply *rep) {
        return rep->hdr.type == CKPT_MSG_ERROR && rep->hdr.seq == 0 &&
               rep->error.error == -ESHUTDOWN;
}

/* The connection broke (r): a farewell the daemon left in the socket
 * before it closed says why, and makes it -ESHUTDOWN; otherwise "lost the
 * connection".  Either way the connection is closed. */
static int wire_lost(struct wire *w, int r) {
        uint8_t buf[CKPT_MSG_MAX + 1];
        struct ckpt_reply rep;
        ssize_t n;
        /* a reply to an earlier request cannot be there (one in flight), so
         * the first packet is the farewell or nothing */
        do
                n = recv(w->fd, buf, sizeof(buf), MSG_DONTWAIT);
        while (n < 0 && errno == EINTR);
        if (n > 0 && ckpt_reply_decode(&rep, buf, (size_t)n) == 0 && is_farewell(&rep)) {
                snprintf(w->errmsg, sizeof(w->errmsg), "%s", rep.error.message);
                return wire_fail(w, -ESHUTDOWN);
        }
        snprintf(w->errmsg, sizeof(w->errmsg), "lost the connection to ckptd: %s", strerror(-r));
        return wire_fail(w, r == -EPIPE ? -ECONNRESET : r);
}

/* One request and its reply, by the deadline (-1: none); timeout_ms is what
 * the messages say it was. */
static int exchange(struct wire *w, const char *what, int64_t deadline, int64_t timeout_ms,
                    struct ckpt_request *req, struct ckpt_reply *rep, int *fd_out) {
        uint8_t buf[CKPT_MSG_MAX + 1];
        union {
                char buf[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } ctrl;
        int r, fd = -1;

        if (fd_out)
                *fd_out = -1;
        w->errmsg[0] = 0;
        if (w->fd < 0) {
                if (w->closed_why[0])
                        snprintf(w->errmsg, sizeof(w->errmsg),
                                 "%s%sthe connection to ckptd was closed after an earlier "
                                 "failure (%.400s): reconnect",
                                 what ? what : "", what ? ": " : "", w->closed_why);
                return -ENOTCONN;
        }
        /* seq 0 is the daemon's: errors to packets without a header, and
         * the farewell */
        if (++w->seq == 0)
                w->seq = 1;
        req->hdr.seq = w->seq;
        req->hdr.version = w->proto ? w->proto : CKPT_PROTO_VERSION_MIN;
        r = ckpt_request_encode(req, buf, sizeof(buf));
        if (r < 0) {
                snprintf(w->errmsg, sizeof(w->errmsg), "invalid request: %s", strerror(-r));
                return r;
        }
        size_t len = (size_t)r;
        ssize_t n;
        for (;;) {
                n = send(w->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n >= 0 || (errno != EINTR && errno != EAGAIN))
                        break;
                if (errno == EAGAIN && (r = wire_wait(w, POLLOUT, deadline)) < 0)
                        goto timed_out;
        }
        if (n < 0)
                return wire_lost(w, -errno);

        struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
        struct msghdr msg = {
                .msg_iov = &iov,
                .msg_iovlen = 1,
                .msg_control = ctrl.buf,
                .msg_controllen = sizeof(ctrl.buf),
        };
        for (;;) {
                if ((r = wire_wait(w, POLLIN, deadline)) < 0)
                        goto timed_out;
                n = recvmsg(w->fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
                if (n >= 0 || (errno != EINTR && errno != EAGAIN))
                        break;
        }
        if (n <= 0)
                return wire_lost(w, n == 0 ? -ECONNRESET : -errno);
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
                    cm->cmsg_len == CMSG_LEN(sizeof(int)))
                        memcpy(&fd, CMSG_DATA(cm), sizeof(int));

        r = ckpt_reply_decode(rep, buf, (size_t)n);
        if (r == 0 && is_farewell(rep)) {
                if (fd >= 0)
                        close(fd);
                snprintf(w->errmsg, sizeof(w->errmsg), "%s", rep->error.message);
                return wire_fail(w, -ESHUTDOWN);
        }
        if (r == 0 && (rep->hdr.seq != req->hdr.seq || rep->hdr.version != req->hdr.version))
                r = -EBADMSG;
        if (r == 0 && rep->hdr.type != CKPT_MSG_ERROR &&
            rep->hdr.type != (req->hdr.type | CKPT_MSG_REPLY))
                r = -EBADMSG;
        if (r < 0) {
                if (fd >= 0)
                        close(fd);
                snprintf(w->errmsg, sizeof(w->errmsg), "malformed reply from ckptd (%s)",
                         strerror(-r));
                /* the protocol's rule: a mismatch is a broken connection */
                return wire_fail(w, r);
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

timed_out:
        if (r != -ETIMEDOUT) {
                snprintf(w->errmsg, sizeof(w->errmsg), "cannot wait for ckptd: %s", strerror(-r));
                return wire_fail(w, r);
        }
        if (req->hdr.type == CKPT_MSG_HELLO)
                snprintf(w->errmsg, sizeof(w->errmsg),
                         "%s: no reply from ckptd within %" PRId64 " ms (is it stopped, hung "
                         "or overloaded?); allow more time with CKPT_TIMEOUT_MS",
                         what ? what : "connect", timeout_ms);
        else if (what)
                snprintf(w->errmsg, sizeof(w->errmsg),
                         "%s: no reply from ckptd within %" PRId64 " ms (is it stopped, hung "
                         "or overloaded?); the connection is closed and saves not finished on "
                         "it fail: reconnect, or allow more time with CKPT_TIMEOUT_MS",
                         what, timeout_ms);
        else
                snprintf(w->errmsg, sizeof(w->errmsg),
                         "no reply from ckptd to %s within %" PRId64 " ms (is it stopped, hung "
                         "or overloaded?); the connection is closed: allow more time with "
                         "CKPT_TIMEOUT_MS",
                         ckpt_msg_type_name(req->hdr.type), timeout_ms);
        return wire_fail(w, -ETIMEDOUT);
}
