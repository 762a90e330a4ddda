/* SPDX-License-Identifier: MIT */
/*
 * acceptor — the accept loop of a listening socket that never spins.
 *
 * Both listeners (the client socket in server.c and the peer port in
 * peer/link.c) accept through one of these.  What it adds to a bare accept4()
 * loop is what a hostile or merely busy machine needs:
 *
 *   - EMFILE/ENFILE: the epoll watch stays readable while the backlog
 *     holds connections we cannot accept, so returning would spin the loop
 *     (issue 9: one core at 100 % and 881 MB of log in 5 s).  The acceptor
 *     keeps a reserve fd (/dev/null): it closes it, accepts the pending
 *     connection, closes that at once, and reopens the reserve — the
 *     backlog drains and the caller's clients see a closed connection
 *     instead of a hang.  When the reserve is gone (another thread took
 *     the fd) or memory is short (ENOBUFS/ENOMEM), it stops watching the
 *     socket and looks again after a backoff (100 ms doubling to 1 s).
 *   - errors a pending connection carries (ECONNABORTED, EPROTO, ENETDOWN,
 *     ...) are skipped, as accept(2) advises; anything else pauses too.
 *   - at most ACCEPTOR_BATCH connections per wake-up, so a flood of
 *     connects shares the loop with the connections already served.
 *   - refusals (the fd trick above, or the owner's own connection caps
 *     through acceptor_refuse()) are logged once, then counted and
 *     reported every ACCEPTOR_REPORT_MS, so an attack grows the log by a
 *     bounded amount.
 *
 * Not thread-safe: loop thread only.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "io/loop.h"

#define ACCEPTOR_BATCH 64
#define ACCEPTOR_REPORT_MS 10000
#define ACCEPTOR_BACKOFF_MIN_MS 100
#define ACCEPTOR_BACKOFF_MAX_MS 1000

struct acceptor;

/* A new connection; takes ownership of fd (non-blocking, close-on-exec).
 * sa holds the peer's address (len bytes; 0 for an unnamed AF_UNIX peer). */
typedef void (*acceptor_conn_fn)(struct acceptor *a, int fd, const struct sockaddr_storage *sa,
                                 socklen_t len);

struct acceptor {
        struct loop *loop;
        const char *what;       /* "server", "peers": the log prefix */
        int listen_fd;          /* borrowed */
        struct loop_watch watch;
        acceptor_conn_fn on_conn;
        int reserve_fd;         /* /dev/null, -1 while spent */
        bool paused;
        uint64_t backoff_ms;
        struct loop_timer resume;
        /* refusals since the last report */
        uint64_t refused;
        char refused_why[160];  /* the latest reason */
        uint64_t refused_total;
        struct loop_timer report;
};

/* Start accepting on listen_fd (borrowed; it must outlive the acceptor).
 * 0 or -errno (the reserve fd cannot be opened, epoll refuses the fd). */
int acceptor_start(struct acceptor *a, struct loop *loop, int listen_fd, const char *what,
                   acceptor_conn_fn on_conn);
/* Stop watching, close the reserve, report what is still counted.
 * Harmless on a zeroed or already stopped acceptor. */
void acceptor_stop(struct acceptor *a);

/* Count a connection refused by the owner (over one of its caps) and log
 * it rate-limited: the first refusal of a quiet period at once, then a
 * count every ACCEPTOR_REPORT_MS.  The caller closes the fd. */
void acceptor_refuse(struct acceptor *a, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* Connections refused since start (for status and tests). */
static inline uint64_t acceptor_refused_total(const struct acceptor *a) {
        return a->refused_total;
}
