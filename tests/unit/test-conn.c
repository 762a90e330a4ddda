/* SPDX-License-Identifier: MIT */
/*
 * conn (client/conn.c), the request/reply layer of libckpt and ckptctl:
 * $CKPT_TIMEOUT_MS parsing, and the deadline of one exchange against the
 * other end of a real SOCK_SEQPACKET socketpair that plays a daemon which
 * never answers, answers late, or answers nonsense.  What must hold: the
 * call returns -ETIMEDOUT on time with a message naming the call and the
 * milliseconds, the connection is closed (the "daemon" sees end-of-file),
 * nothing sent afterwards is read as a reply, and later calls say why the
 * connection is gone.  The integration test client-deadlines does the same
 * against a real, stopped ckptd.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"

#include "check.h"

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void env_case(const char *value, int want_r, uint32_t want_ms) {
        char msg[256] = "";
        uint32_t ms = 12345;

        if (value)
                setenv("CKPT_TIMEOUT_MS", value, 1);
        else
                unsetenv("CKPT_TIMEOUT_MS");
        int r = wire_timeout_from_env(&ms, msg, sizeof(msg));
        CHECK(r == want_r, "CKPT_TIMEOUT_MS=%s: %d, want %d", value ? value : "(unset)", r,
              want_r);
        if (want_r == 0)
                CHECK(ms == want_ms, "CKPT_TIMEOUT_MS=%s: %u ms, want %u", value ? value : "",
                      ms, want_ms);
        else
                CHECK(strstr(msg, "is not a number of milliseconds") && strstr(msg, value),
                      "CKPT_TIMEOUT_MS=%s: message '%s'", value, msg);
}

/* A connection whose "daemon" is the other end of a socketpair. */
static void wire_pair(struct wire *w, int *daemon_fd, uint32_t timeout_ms) {
        int sv[2];
        memset(w, 0, sizeof(*w));
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
                perror("socketpair");
                exit(1);
        }
        w->fd = sv[0];
        w->timeout_ms = timeout_ms;
        *daemon_fd = sv[1];
}

static struct ckpt_request latest_req(void) {
        struct ckpt_request req = { .hdr.type = CKPT_MSG_LATEST };
        ckpt_name_set(&req.job_step.job, "j");
        return req;
}

/* The daemon reads one request; returns its seq. */
static uint32_t daemon_read(int fd) {
        uint8_t buf[CKPT_MSG_MAX];
        struct ckpt_request req;
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        CHECK(n > 0, "the request was not sent (%zd)", n);
        if (n <= 0 || ckpt_request_decode(&req, buf, (size_t)n) < 0)
                return 0;
        return req.hdr.seq;
}

static void daemon_reply_latest(int fd, uint32_t seq, uint64_t step) {
        /* a wire that said no HELLO speaks the oldest version; the reply is
         * in the request's */
        struct ckpt_reply rep = { .hdr.type = CKPT_MSG_LATEST | CKPT_MSG_REPLY, .hdr.seq = seq,
                                  .hdr.version = CKPT_PROTO_VERSION_MIN };
        uint8_t buf[256];
        rep.latest.step = step;
        rep.latest.world_size = 1;
        int n = ckpt_reply_encode(&rep, buf, sizeof(buf));
        CHECK(n > 0, "encode: %d", n);
        /* EPIPE once the client has closed: that is the point */
        (void)send(fd, buf, (size_t)(n > 0 ? n : 0), MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void test_silent_daemon(void) {
        struct wire w;
        struct ckpt_request req = latest_req();
        struct ckpt_reply rep;
        int dfd;

        wire_pair(&w, &dfd, 300);
        int64_t t0 = now_ms();
        int r = wire_call_within(&w, "ckpt_latest", WIRE_TIMEOUT_CONN, &req, &rep, NULL);
        int64_t took = now_ms() - t0;
        CHECK(r == -ETIMEDOUT, "silent daemon: %d", r);
        CHECK(took >= 300 && took < 800, "took %lld ms for a 300 ms deadline", (long long)took);
        CHECK(!strncmp(w.errmsg, "ckpt_latest: no reply from ckptd within 300 ms",
                       strlen("ckpt_latest: no reply from ckptd within 300 ms")),
              "message '%s'", w.errmsg);
        CHECK(w.fd == -1, "the connection is still open after the deadline");

        /* the daemon got the request, then sees the close */
        uint32_t seq = daemon_read(dfd);
        char b;
        CHECK(recv(dfd, &b, 1, MSG_DONTWAIT) == 0, "the daemon does not see end-of-file");

        /* its late answer goes nowhere; the next call says why */
        daemon_reply_latest(dfd, seq, 7);
        req = latest_req();
        r = wire_call_within(&w, "ckpt_read", WIRE_TIMEOUT_CONN, &req, &rep, NULL);
        CHECK(r == -ENOTCONN, "call after the deadline: %d", r);
        CHECK(strstr(w.errmsg, "ckpt_read: the connection to ckptd was closed") &&
                      strstr(w.errmsg, "ckpt_latest: no reply from ckptd within 300 ms"),
              "message after the deadline '%s'", w.errmsg);
        close(dfd);
}

static void test_own_timeout(void) {
        struct wire w;
        struct ckpt_request req = latest_req();
        struct ckpt_reply rep;
        int dfd;

        /* a request's own timeout wins over the connection's, both ways */
        wire_pair(&w, &dfd, 5000);
        CHECK(wire_timeout_plus_grace(&w, 100) == 100 + WIRE_REPLY_GRACE_MS, "grace");
        int64_t t0 = now_ms();
        int r = wire_call_within(&w, "ckpt_wait", wire_timeout_plus_grace(&w, 100), &req, &rep,
                                 NULL);
        int64_t took = now_ms() - t0;
        CHECK(r == -ETIMEDOUT && took >= 350 && took < 850, "ckpt_wait 100 ms: %d after %lld ms",
              r, (long long)took);
        CHECK(strstr(w.errmsg, "within 350 ms"), "message '%s'", w.errmsg);
        close(dfd);

        /* no deadline on the connection: none for the grace either */
        wire_pair(&w, &dfd, 0);
        CHECK(wire_timeout_plus_grace(&w, 100) == 0, "no deadline, yet a grace");
        close(dfd);
}

static void test_answers(void) {
        struct wire w;
        struct ckpt_request req = latest_req();
        struct ckpt_reply rep;
        int dfd;

        /* an answer in time is read, and the connection stays open */
        wire_pair(&w, &dfd, 1000);
        req.hdr.seq = 0;
        /* the reply must carry the seq the client picks: 1 on a fresh wire */
        daemon_reply_latest(dfd, 1, 42);
        int r = wire_call_within(&w, "ckpt_latest", WIRE_TIMEOUT_CONN, &req, &rep, NULL);
        CHECK(r == 0 && rep.latest.step == 42, "answer in time: %d, step %llu", r,
              (unsigned long long)rep.latest.step);
        CHECK(w.fd >= 0, "closed after a good answer");
        (void)daemon_read(dfd);

        /* a reply to another request (wrong seq) closes the connection */
        daemon_reply_latest(dfd, 99, 43);
        req = latest_req();
        r = wire_call_within(&w, "ckpt_latest", WIRE_TIMEOUT_CONN, &req, &rep, NULL);
        CHECK(r == -EBADMSG && w.fd == -1, "wrong seq: %d, fd %d", r, w.fd);
        close(dfd);
}

int main(void) {
        env_case(NULL, 0, WIRE_TIMEOUT_DEFAULT_MS);
        env_case("", 0, WIRE_TIMEOUT_DEFAULT_MS);
        env_case("0", 0, 0);
        env_case("1500", 0, 1500);
        env_case("4294967295", 0, 4294967295u);
        env_case("4294967296", -EINVAL, 0);
        env_case("soon", -EINVAL, 0);
        env_case("-1", -EINVAL, 0);
        env_case("1500ms", -EINVAL, 0);
        env_case(" 15", -EINVAL, 0);
        unsetenv("CKPT_TIMEOUT_MS");

        test_silent_daemon();
        test_own_timeout();
        test_answers();
        return check_exit_code();
}
