/* SPDX-License-Identifier: MIT */
/*
 * test-acceptor — the accept loop with the process out of file descriptors,
 * on a real AF_UNIX listener and the real io_uring loop: the pending
 * connections are shed (each client sees its connection closed), the loop
 * does not spin, refusals are counted, and connections are accepted again
 * as soon as descriptors are free.  Then the fallback: with the reserve fd
 * gone (taken away by the test, which is the one state a real part cannot
 * be driven into on purpose: another thread grabbing the freed fd), the
 * listener pauses and resumes by itself after the backoff.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "io/acceptor.h"
#include "io/loop.h"
#include "util/cleanup.h"

#include "check.h"

#define CLIENTS 8

static struct loop *the_loop;
static int accepted[64];
static int naccepted;

static void on_conn(struct acceptor *a, int fd, const struct sockaddr_storage *sa,
                    socklen_t len) {
        (void)a;
        (void)sa;
        (void)len;
        CHECK(naccepted < 64, "more connections than the test makes");
        accepted[naccepted++] = fd;
}

static long cpu_ms(void) {
        struct rusage r;
        getrusage(RUSAGE_SELF, &r);
        return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000L +
               (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1000;
}

static int devnull = -1;

/* Take every free descriptor (dups of /dev/null); returns how many. */
static int fill_fds(int *held, int cap) {
        int n = 0;
        while (n < cap) {
                int fd = dup(devnull);
                if (fd < 0) {
                        CHECK(errno == EMFILE, "dup: %s", strerror(errno));
                        break;
                }
                held[n++] = fd;
        }
        /* the limit was reached, not the array's end */
        CHECK(n < cap, "the table did not fill (%d)", n);
        return n;
}

static void release_fds(int *held, int *n, int count) {
        while (count-- > 0 && *n > 0)
                close(held[--*n]);
}

/* The daemon closed this client's connection: EOF or reset. */
static bool client_closed(int fd) {
        char b;
        ssize_t r = recv(fd, &b, 1, MSG_DONTWAIT);
        return r == 0 || (r < 0 && errno != EAGAIN);
}

static int client_new(void) {
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        CHECK(fd >= 0, "socket: %s", strerror(errno));
        return fd;
}

static void client_connect(int fd, const struct sockaddr_un *sa) {
        CHECK(connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0, "connect: %s",
              strerror(errno));
}

/* The test runs as a chain of timer callbacks inside one loop_run(), so
 * that the acceptor sees the loop exactly as the daemon runs it. */
static struct acceptor acc;
static struct sockaddr_un addr = { .sun_family = AF_UNIX };
static int held[4096];
static int nheld;
static int clients[CLIENTS + 4];
static long cpu0;
static uint64_t refused0;
static struct loop_timer step_timer, guard_timer;

static void next(uint64_t ms, void (*fn)(struct loop_timer *t)) {
        loop_timer_start(the_loop, &step_timer, ms, fn);
}

static void step_done(struct loop_timer *t) {
        (void)t;
        /* resumed by itself after the backoff, reserve back */
        CHECK(!acc.paused && acc.reserve_fd >= 0, "paused %d reserve %d", acc.paused,
              acc.reserve_fd);
        CHECK(naccepted == 4, "accepted %d", naccepted);
        loop_timer_cancel(&guard_timer);
        loop_stop(the_loop);
}

static void step_paused(struct loop_timer *t) {
        (void)t;
        CHECK(acc.paused, "the listener did not pause without a reserve fd");
        CHECK(naccepted == 3, "accepted %d", naccepted);
        CHECK(acceptor_refused_total(&acc) == refused0 + 1, "refused %llu, want %llu",
              (unsigned long long)acceptor_refused_total(&acc),
              (unsigned long long)refused0 + 1);
        /* it waits in the backlog */
        CHECK(!client_closed(clients[CLIENTS + 1]), "a paused listener closed a connection");
        release_fds(held, &nheld, nheld);
        next(ACCEPTOR_BACKOFF_MIN_MS + 200, step_done);
}

static void step_recovered(struct loop_timer *t) {
        (void)t;
        /* descriptors free again: accepted at once, no timer to wait for */
        CHECK(naccepted == 3, "accepted %d", naccepted);
        /* now the reserve is taken away and the table filled again */
        close(acc.reserve_fd);
        acc.reserve_fd = -1;
        nheld += fill_fds(held + nheld, 4096 - nheld);
        refused0 = acceptor_refused_total(&acc);
        client_connect(clients[CLIENTS + 1], &addr);
        next(50, step_paused);
}

static void step_shed(struct loop_timer *t) {
        (void)t;
        long cpu = cpu_ms() - cpu0;
        fprintf(stderr, "out of fds: %ld ms CPU in 300 ms, %llu refused\n", cpu,
                (unsigned long long)acceptor_refused_total(&acc));
        CHECK(naccepted == 2, "accepted %d", naccepted);
        CHECK(acceptor_refused_total(&acc) == CLIENTS - 2, "refused %llu, want %d",
              (unsigned long long)acceptor_refused_total(&acc), CLIENTS - 2);
        for (int i = 2; i < CLIENTS; i++)
                CHECK(client_closed(clients[i]), "client %d was not shed", i);
        CHECK(!client_closed(clients[0]), "an accepted client was closed");
        CHECK(acc.reserve_fd >= 0 && !acc.paused, "paused %d reserve %d", acc.paused,
              acc.reserve_fd);
        CHECK(cpu < 100, "%ld ms of CPU in 300 ms: the loop spins", cpu);
        release_fds(held, &nheld, 8);
        client_connect(clients[CLIENTS], &addr);
        next(50, step_recovered);
}

static void step_plain(struct loop_timer *t) {
        (void)t;
        CHECK(naccepted == 2, "accepted %d", naccepted);
        CHECK(acceptor_refused_total(&acc) == 0, "refused %llu",
              (unsigned long long)acceptor_refused_total(&acc));
        /* out of descriptors: shed, no spin */
        nheld = fill_fds(held, 4096);
        for (int i = 2; i < CLIENTS; i++)
                client_connect(clients[i], &addr);
        cpu0 = cpu_ms();
        next(300, step_shed);
}

static void guard(struct loop_timer *t) {
        (void)t;
        fprintf(stderr, "test-acceptor: a step never came (%u checks failed)\n", failures);
        exit(1);
}

int main(void) {
        /* a low limit keeps filling the table cheap */
        struct rlimit rl = { 256, 256 };
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
                perror("setrlimit");
                return 1;
        }
        devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        CHECK(devnull >= 0, "/dev/null: %s", strerror(errno));
        CHECK(loop_new(&the_loop, 64) == 0, "loop_new");
        snprintf(addr.sun_path, sizeof(addr.sun_path), "/tmp/test-acceptor-%d.sock",
                 (int)getpid());
        unlink(addr.sun_path);
        int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        CHECK(lfd >= 0, "socket: %s", strerror(errno));
        CHECK(bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) == 0, "bind: %s",
              strerror(errno));
        CHECK(listen(lfd, 64) == 0, "listen: %s", strerror(errno));
        CHECK(acceptor_start(&acc, the_loop, lfd, "test", on_conn) == 0, "acceptor_start");
        /* every client socket exists before the table is filled */
        for (int i = 0; i < CLIENTS + 4; i++)
                clients[i] = client_new();
        list_init(&step_timer.link);
        list_init(&guard_timer.link);
        client_connect(clients[0], &addr);
        client_connect(clients[1], &addr);
        next(50, step_plain);
        loop_timer_start(the_loop, &guard_timer, 10000, guard);
        CHECK(loop_run(the_loop) == 0, "loop_run");

        acceptor_stop(&acc);
        acceptor_stop(&acc); /* harmless twice */
        for (int i = 0; i < naccepted; i++)
                close(accepted[i]);
        for (int i = 0; i < CLIENTS + 4; i++)
                close(clients[i]);
        close(lfd);
        unlink(addr.sun_path);
        loop_free(the_loop);
        close(devnull);
        if (!failures)
                fprintf(stderr, "test-acceptor: ok\n");
        return check_exit_code();
}
