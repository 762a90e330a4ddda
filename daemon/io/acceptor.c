/* SPDX-License-Identifier: MIT */
/*
 * acceptor — see acceptor.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "io/acceptor.h"
#include "util/cleanup.h"
#include "util/log.h"

static void acceptor_on_ready(struct loop_watch *w, uint32_t events);

static int reserve_open(void) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static void acceptor_report(struct acceptor *a) {
        if (!a->refused)
                return;
        log_warn("%s: refused %" PRIu64 " more connection(s) since the last report (latest: %s)",
                 a->what, a->refused, a->refused_why);
        a->refused = 0;
}

static void acceptor_on_report(struct loop_timer *t) {
        struct acceptor *a = container_of(t, struct acceptor, report);

        /* re-armed while refusals keep coming; after a quiet period the
         * next refusal is logged at once again */
        if (!a->refused)
                return;
        acceptor_report(a);
        loop_timer_start(a->loop, &a->report, ACCEPTOR_REPORT_MS, acceptor_on_report);
}

void acceptor_refuse(struct acceptor *a, const char *fmt, ...) {
        va_list ap;

        a->refused_total++;
        if (loop_timer_armed(&a->report)) {
                a->refused++;
                va_start(ap, fmt);
                vsnprintf(a->refused_why, sizeof(a->refused_why), fmt, ap);
                va_end(ap);
                return;
        }
        char why[sizeof(a->refused_why)];
        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        log_warn("%s: refused a connection: %s (further refusals are counted and reported "
                 "every %u s)",
                 a->what, why, ACCEPTOR_REPORT_MS / 1000);
        loop_timer_start(a->loop, &a->report, ACCEPTOR_REPORT_MS, acceptor_on_report);
}

static void acceptor_on_resume(struct loop_timer *t) {
        struct acceptor *a = container_of(t, struct acceptor, resume);

        if (a->reserve_fd < 0) {
                int fd = reserve_open();
                a->reserve_fd = fd < 0 ? -1 : fd;
        }
        a->paused = false;
        if (loop_watch_add(a->loop, &a->watch, a->listen_fd, EPOLLIN, acceptor_on_ready) < 0) {
                /* still short of something: try again later */
                a->paused = true;
                loop_timer_start(a->loop, &a->resume, a->backoff_ms, acceptor_on_resume);
                return;
        }
        /* whatever is queued is taken now, not at the next connect */
        acceptor_on_ready(&a->watch, EPOLLIN);
}

/* Stop watching the listener and look again after a backoff: the way out
 * when the reserve trick is not available. */
static void acceptor_pause(struct acceptor *a, int err) {
        a->backoff_ms = a->backoff_ms ? a->backoff_ms * 2 : ACCEPTOR_BACKOFF_MIN_MS;
        if (a->backoff_ms > ACCEPTOR_BACKOFF_MAX_MS)
                a->backoff_ms = ACCEPTOR_BACKOFF_MAX_MS;
        a->paused = true;
        loop_watch_del(a->loop, &a->watch);
        acceptor_refuse(a, "accept: %s; not accepting for %" PRIu64 " ms", strerror(err),
                        a->backoff_ms);
        loop_timer_start(a->loop, &a->resume, a->backoff_ms, acceptor_on_resume);
}

/* Out of fds: give the reserve back, take the pending connection and
 * close it, take the reserve again.  1: one shed, go on; 0: the backlog
 * is empty (accept4() reports EMFILE before it looks at the backlog, so
 * an empty one looks the same as a full one until the reserve is spent);
 * -1: no reserve to give. */
static int acceptor_shed(struct acceptor *a, int err) {
        if (a->reserve_fd < 0)
                return -1;
        close(a->reserve_fd);
        a->reserve_fd = -1;
        int fd = accept4(a->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        int accept_errno = errno;
        if (fd >= 0)
                close(fd);
        int r = reserve_open();
        a->reserve_fd = r < 0 ? -1 : r;
        if (fd >= 0) {
                acceptor_refuse(a, "accept: %s (out of file descriptors: raise LimitNOFILE or "
                                   "lower the connection limits)",
                                strerror(err));
                return 1;
        }
        if (accept_errno == EAGAIN)
                return 0;
        /* still no fd (another thread took it): pause */
        return -1;
}

static void acceptor_on_ready(struct loop_watch *w, uint32_t events) {
        struct acceptor *a = container_of(w, struct acceptor, watch);
        (void)events;

        for (unsigned i = 0; i < ACCEPTOR_BATCH && !a->paused; i++) {
                struct sockaddr_storage sa;
                socklen_t len = sizeof(sa);
                int fd = accept4(a->listen_fd, (struct sockaddr *)&sa, &len,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd >= 0) {
                        a->backoff_ms = 0;
                        a->on_conn(a, fd, &sa, len);
                        continue;
                }
                int err = errno;
                switch (err) {
                case EAGAIN:
                        return;
                case EINTR:
                /* accept(2): errors pending on the new connection, to be
                 * treated like EAGAIN by retrying */
                case ECONNABORTED:
                case EPROTO:
                case ENETDOWN:
                case ENOPROTOOPT:
                case EHOSTDOWN:
                case ENONET:
                case EHOSTUNREACH:
                case EOPNOTSUPP:
                case ENETUNREACH:
                case EPERM: /* a firewall rule refused it */
                case ETIMEDOUT:
                        continue;
                case EMFILE:
                case ENFILE: {
                        int shed = acceptor_shed(a, err);
                        if (shed > 0)
                                continue;
                        if (shed < 0)
                                acceptor_pause(a, err);
                        return;
                }
                default: /* ENOBUFS, ENOMEM, or something unexpected */
                        acceptor_pause(a, err);
                        return;
                }
        }
}

int acceptor_start(struct acceptor *a, struct loop *loop, int listen_fd, const char *what,
                   acceptor_conn_fn on_conn) {
        memset(a, 0, sizeof(*a));
        a->loop = loop;
        a->what = what;
        a->listen_fd = listen_fd;
        a->on_conn = on_conn;
        a->watch.fd = -1;
        list_init(&a->resume.link);
        list_init(&a->report.link);
        a->reserve_fd = reserve_open();
        if (a->reserve_fd < 0)
                return a->reserve_fd;
        int r = loop_watch_add(loop, &a->watch, listen_fd, EPOLLIN, acceptor_on_ready);
        if (r < 0) {
                close(a->reserve_fd);
                a->reserve_fd = -1;
                return r;
        }
        return 0;
}

void acceptor_stop(struct acceptor *a) {
        if (!a->loop)
                return;
        loop_watch_del(a->loop, &a->watch);
        loop_timer_cancel(&a->resume);
        loop_timer_cancel(&a->report);
        acceptor_report(a);
        if (a->reserve_fd >= 0)
                close(a->reserve_fd);
        a->reserve_fd = -1;
        a->loop = NULL;
}
