/* SPDX-License-Identifier: MIT */
/*
 * loop — one io_uring, one thread (see loop.h for the model).
 *
 * The ring does the heavy lifting (disk I/O from registered buffers); socket
 * readiness funnels through a single epoll fd that the ring polls, which
 * keeps fd lifetimes synchronous.  Timers are a short list whose nearest
 * deadline bounds each wait.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <time.h>

#include "io/loop.h"
#include "util/cleanup.h"
#include "util/log.h"

#define LOOP_EPOLL_BATCH 64

struct loop {
        struct io_uring ring;
        bool ring_ready;
        bool stop;
        unsigned inflight;
        int epoll_fd;
        struct loop_req epoll_req;
        bool epoll_armed;
        struct list hooks;
        struct list timers;
        /* events fetched by the current epoll_wait, so loop_watch_del can
         * drop the ones of a watcher that goes away mid-batch */
        struct epoll_event events[LOOP_EPOLL_BATCH];
        int nevents;
};

uint64_t loop_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void loop_epoll_arm(struct loop *l);

static void loop_epoll_done(struct loop_req *req, int res) {
        struct loop *l = container_of(req, struct loop, epoll_req);

        l->epoll_armed = false;
        if (res < 0 && res != -ECANCELED)
                log_warn("loop: poll on epoll fd failed: %s", strerror(-res));

        int n = epoll_wait(l->epoll_fd, l->events, LOOP_EPOLL_BATCH, 0);
        if (n < 0) {
                if (errno != EINTR)
                        log_error("loop: epoll_wait: %m");
                n = 0;
        }
        l->nevents = n;
        for (int i = 0; i < l->nevents; i++) {
                struct loop_watch *w = l->events[i].data.ptr;
                if (w)
                        w->cb(w, l->events[i].events);
        }
        l->nevents = 0;
        if (!l->stop)
                loop_epoll_arm(l);
}

static void loop_epoll_arm(struct loop *l) {
        if (l->epoll_armed)
                return;
        struct io_uring_sqe *sqe = loop_sqe(l, &l->epoll_req);
        io_uring_prep_poll_add(sqe, l->epoll_fd, POLLIN);
        l->epoll_armed = true;
}

int loop_new(struct loop **out, unsigned entries) {
        _cleanup_free_ struct loop *l = calloc(1, sizeof(*l));
        if (!l)
                return -ENOMEM;
        list_init(&l->hooks);
        list_init(&l->timers);
        l->epoll_fd = -1;

        struct io_uring_params p = { 0 };
        /* One thread submits and reaps, so the kernel may run task work only
         * when we wait: fewer interrupts, better batching. */
        p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
        int r = io_uring_queue_init_params(entries, &l->ring, &p);
        if (r == -EINVAL) {
                memset(&p, 0, sizeof(p));
                r = io_uring_queue_init_params(entries, &l->ring, &p);
        }
        if (r < 0) {
                log_error("loop: io_uring_queue_init(%u): %s", entries, strerror(-r));
                return r;
        }
        l->ring_ready = true;

        l->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        if (l->epoll_fd < 0) {
                r = -errno;
                io_uring_queue_exit(&l->ring);
                return r;
        }
        l->epoll_req.done = loop_epoll_done;
        *out = TAKE_PTR(l);
        return 0;
}

struct loop *loop_free(struct loop *l) {
        if (!l)
                return NULL;
        if (l->ring_ready)
                io_uring_queue_exit(&l->ring);
        safe_close(l->epoll_fd);
        free(l);
        return NULL;
}

struct io_uring *loop_ring(struct loop *l) {
        return &l->ring;
}

unsigned loop_inflight(struct loop *l) {
        return l->inflight;
}

struct io_uring_sqe *loop_sqe(struct loop *l, struct loop_req *req) {
        struct io_uring_sqe *sqe;

        while (!(sqe = io_uring_get_sqe(&l->ring))) {
                int r = io_uring_submit(&l->ring);
                if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY)
                        log_error("loop: submit: %s", strerror(-r));
        }
        io_uring_sqe_set_data(sqe, req);
        l->inflight++;
        return sqe;
}

void loop_hook_add(struct loop *l, struct loop_hook *h) {
        list_add_tail(&l->hooks, &h->link);
}

int loop_watch_add(struct loop *l, struct loop_watch *w, int fd, uint32_t events,
                   void (*cb)(struct loop_watch *w, uint32_t events)) {
        struct epoll_event ev = { .events = events, .data.ptr = w };

        w->fd = fd;
        w->cb = cb;
        if (epoll_ctl(l->epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0)
                return -errno;
        loop_epoll_arm(l);
        return 0;
}

int loop_watch_mod(struct loop *l, struct loop_watch *w, uint32_t events) {
        struct epoll_event ev = { .events = events, .data.ptr = w };

        if (epoll_ctl(l->epoll_fd, EPOLL_CTL_MOD, w->fd, &ev) < 0)
                return -errno;
        return 0;
}

void loop_watch_del(struct loop *l, struct loop_watch *w) {
        if (w->fd < 0)
                return;
        epoll_ctl(l->epoll_fd, EPOLL_CTL_DEL, w->fd, NULL);
        for (int i = 0; i < l->nevents; i++)
                if (l->events[i].data.ptr == w)
                        l->events[i].data.ptr = NULL;
        w->fd = -1;
}

void loop_timer_start(struct loop *l, struct loop_timer *t, uint64_t ms,
                      void (*cb)(struct loop_timer *t)) {
        loop_timer_cancel(t);
        t->deadline_ms = loop_now_ms() + ms;
        t->cb = cb;
        list_add_tail(&l->timers, &t->link);
}

void loop_timer_cancel(struct loop_timer *t) {
        if (loop_timer_armed(t))
                list_unlink(&t->link);
}

/* Fire due timers; return ms until the next one (or -1: none). */
static int64_t loop_timers_run(struct loop *l) {
        uint64_t now = loop_now_ms();
        int64_t next = -1;
        struct list *pos, *tmp;
        bool fired;

        do {
                fired = false;
                list_for_each_safe(pos, tmp, &l->timers) {
                        struct loop_timer *t = list_entry(pos, struct loop_timer, link);
                        if (t->deadline_ms <= now) {
                                list_unlink(&t->link);
                                t->cb(t);
                                /* the callback may have changed the list */
                                fired = true;
                                break;
                        }
                }
        } while (fired);

        list_for_each_safe(pos, tmp, &l->timers) {
                struct loop_timer *t = list_entry(pos, struct loop_timer, link);
                int64_t d = (int64_t)(t->deadline_ms - now);
                if (next < 0 || d < next)
                        next = d;
        }
        return next;
}

void loop_stop(struct loop *l) {
        l->stop = true;
}

int loop_run(struct loop *l) {
        loop_epoll_arm(l);
        while (!l->stop) {
                int64_t next = loop_timers_run(l);
                if (l->stop)
                        break;

                struct list *pos, *tmp;
                list_for_each_safe(pos, tmp, &l->hooks) {
                        struct loop_hook *h = list_entry(pos, struct loop_hook, link);
                        h->run(h);
                }

                struct io_uring_cqe *cqe;
                int r;
                if (next >= 0) {
                        struct __kernel_timespec ts = {
                                .tv_sec = next / 1000,
                                .tv_nsec = (next % 1000) * 1000000,
                        };
                        r = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts, NULL);
                } else {
                        r = io_uring_submit_and_wait(&l->ring, 1);
                }
                if (r < 0 && r != -EINTR && r != -ETIME && r != -EAGAIN && r != -EBUSY) {
                        log_error("loop: io_uring wait: %s", strerror(-r));
                        return r;
                }

                /* Copy each CQE out and mark it seen before dispatch:
                 * done() may submit, and must never see its CQE twice. */
                while (!l->stop && io_uring_peek_cqe(&l->ring, &cqe) == 0) {
                        struct loop_req *req = io_uring_cqe_get_data(cqe);
                        int res = cqe->res;
                        io_uring_cqe_seen(&l->ring, cqe);
                        if (req) {
                                l->inflight--;
                                req->done(req, res);
                        }
                }
        }
        /* stopped: a later loop_run() runs again (the fuzz target of the
         * peer link runs the loop in pieces, one input at a time) */
        l->stop = false;
        return 0;
}
