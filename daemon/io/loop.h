/* SPDX-License-Identifier: MIT */
/*
 * loop — the daemon's one io_uring and the thread that drives it.
 *
 * Every asynchronous operation (disk writes and reads, fsync, socket
 * readiness, timers) is an SQE whose user_data points at a struct loop_req
 * owned by the caller; its completion calls req->done(req, cqe->res).  The
 * request struct must live until done() runs (STYLE.md "Ownership").
 *
 * Readiness-style fds (sockets, signalfd, the worker eventfd) join through
 * poll requests; loop_poll_add() re-arms one-shot polls so no multishot
 * corner cases leak into callers.
 *
 * Before the loop sleeps it runs the before-sleep hooks (catalog commit,
 * STATUS= updates), so work batches naturally per wake-up (redis ae.c).
 *
 * Not thread-safe: only the loop thread touches the ring.
 */
#pragma once

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/list.h"

struct loop;
struct loop_req;

typedef void (*loop_done_fn)(struct loop_req *req, int res);

struct loop_req {
        loop_done_fn done;
        uint32_t flags; /* internal */
};

/* A before-sleep hook. */
struct loop_hook {
        struct list link;
        void (*run)(struct loop_hook *hook);
};

/* A readiness watcher.  All of them share one epoll fd, and that epoll fd
 * is what the ring polls: adding, changing and removing a watch is then a
 * synchronous epoll_ctl with no in-flight SQE to cancel, so an fd can be
 * closed the moment its owner is done with it. */
struct loop_watch {
        int fd;
        void (*cb)(struct loop_watch *w, uint32_t events);
};

/* A one-shot timer, kept on a list the loop scans before sleeping (there
 * are few: the watchdog, waiters on the pool, WAIT requests). */
struct loop_timer {
        struct list link;
        uint64_t deadline_ms;
        void (*cb)(struct loop_timer *t);
};

/* Create a ring with `entries` SQEs.  Tries SINGLE_ISSUER|DEFER_TASKRUN and
 * falls back when the kernel says -EINVAL. */
int loop_new(struct loop **out, unsigned entries);
struct loop *loop_free(struct loop *l);

struct io_uring *loop_ring(struct loop *l);

/* Get an SQE, submitting queued ones first when the SQ ring is full.  Never
 * returns NULL (it submits until there is space). */
struct io_uring_sqe *loop_sqe(struct loop *l, struct loop_req *req);

/* Run until loop_stop(), which it then forgets: a later call runs again.
 * Returns 0 or a fatal -errno from the ring. */
int loop_run(struct loop *l);
void loop_stop(struct loop *l);

void loop_hook_add(struct loop *l, struct loop_hook *h);

/* Watch fd for EPOLLIN/EPOLLOUT; cb runs on readiness. */
int loop_watch_add(struct loop *l, struct loop_watch *w, int fd, uint32_t events,
                   void (*cb)(struct loop_watch *w, uint32_t events));
int loop_watch_mod(struct loop *l, struct loop_watch *w, uint32_t events);
/* Stop watching.  Events already fetched for w in this iteration are
 * dropped, so the owner may free w after the current callback returns. */
void loop_watch_del(struct loop *l, struct loop_watch *w);

/* Arm t to fire after ms milliseconds (re-arming moves it). */
void loop_timer_start(struct loop *l, struct loop_timer *t, uint64_t ms,
                      void (*cb)(struct loop_timer *t));
void loop_timer_cancel(struct loop_timer *t);
static inline bool loop_timer_armed(const struct loop_timer *t) {
        return list_linked(&t->link);
}

/* Number of SQEs submitted but not completed. */
unsigned loop_inflight(struct loop *l);

uint64_t loop_now_ms(void); /* CLOCK_MONOTONIC */
