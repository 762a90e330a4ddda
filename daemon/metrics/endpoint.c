/* SPDX-License-Identifier: MIT */
/*
 * endpoint — GET /metrics over HTTP on the event loop (endpoint.h).
 *
 * A connection goes through two states: reading the request into a fixed
 * buffer until the blank line that ends the headers, then writing the
 * answer (header and body in one malloc'd buffer) until it is all sent.
 * Both are non-blocking reads and writes on readiness; one timer per
 * connection bounds the whole exchange.
 */
#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/acceptor.h"
#include "metrics/endpoint.h"
#include "metrics/metrics.h"
#include "util/cleanup.h"
#include "util/list.h"
#include "util/log.h"

struct http_conn {
        struct list link;
        struct metrics_endpoint *ep;
        int fd;
        struct loop_watch watch;
        struct loop_timer deadline;
        char request[METRICS_REQUEST_MAX];
        size_t request_len;
        char *answer; /* NULL while reading the request */
        size_t answer_len, answer_sent;
        bool lingering; /* answer sent, reading to EOF before closing */
};

struct metrics_endpoint {
        struct loop *loop;
        int listen_fd;
        struct acceptor acceptor;
        struct list conns;
        uint32_t nconns;
        struct list zombies; /* closed, freed before the loop sleeps */
        struct loop_hook reap_hook;
        metrics_render_fn render;
        void *userdata;
};

static void http_conn_close(struct http_conn *hc) {
        struct metrics_endpoint *ep = hc->ep;

        if (hc->fd < 0)
                return;
        loop_watch_del(ep->loop, &hc->watch);
        loop_timer_cancel(&hc->deadline);
        hc->fd = safe_close(hc->fd);
        free(hc->answer);
        hc->answer = NULL;
        list_unlink(&hc->link);
        list_add_tail(&ep->zombies, &hc->link);
        ep->nconns--;
}

static void http_reap(struct loop_hook *h) {
        struct metrics_endpoint *ep = container_of(h, struct metrics_endpoint, reap_hook);
        struct list *pos, *tmp;

        list_for_each_safe(pos, tmp, &ep->zombies) {
                struct http_conn *hc = list_entry(pos, struct http_conn, link);
                list_unlink(&hc->link);
                free(hc);
        }
}

/* Send what the socket takes; close when all is sent or the peer is gone. */
static void http_conn_write(struct http_conn *hc) {
        while (hc->answer_sent < hc->answer_len) {
                ssize_t n = send(hc->fd, hc->answer + hc->answer_sent,
                                 hc->answer_len - hc->answer_sent, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        return; /* EPOLLOUT brings us back */
                if (n <= 0) {
                        http_conn_close(hc);
                        return;
                }
                hc->answer_sent += (size_t)n;
        }
        /* All sent.  Closing now with unread bytes in the socket (a client
         * still sending an oversized request) would reset the connection
         * and could destroy the answer before the client read it: half-close
         * instead and read to its EOF, within the same deadline. */
        shutdown(hc->fd, SHUT_WR);
        hc->lingering = true;
        loop_watch_mod(hc->ep->loop, &hc->watch, EPOLLIN);
}

static void http_conn_linger(struct http_conn *hc) {
        char sink[1024];

        for (;;) {
                ssize_t n = recv(hc->fd, sink, sizeof(sink), MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        return;
                if (n <= 0) {
                        http_conn_close(hc);
                        return;
                }
        }
}

/* Build the answer: status line, the few headers, and body (NULL: a short
 * text naming the status).  Takes ownership of body. */
static void http_conn_answer(struct http_conn *hc, int status, const char *reason, char *body,
                             size_t body_len, bool head) {
        char header[256];
        const char *type = "text/plain; charset=utf-8";
        char fallback[128];

        if (!body) {
                int n = snprintf(fallback, sizeof(fallback), "%d %s\n", status, reason);
                body_len = n > 0 ? (size_t)n : 0;
        } else {
                type = "text/plain; version=0.0.4; charset=utf-8";
        }
        int hn = snprintf(header, sizeof(header),
                          "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                          "%sConnection: close\r\n\r\n",
                          status, reason, type, body_len,
                          status == 405 ? "Allow: GET, HEAD\r\n" : "");
        size_t send_body = head ? 0 : body_len;
        char *answer = malloc((size_t)hn + send_body);
        if (!answer) {
                free(body);
                http_conn_close(hc);
                return;
        }
        memcpy(answer, header, (size_t)hn);
        if (send_body)
                memcpy(answer + hn, body ? body : fallback, send_body);
        free(body);
        metrics_count(status == 200 ? METRIC_HTTP_REQUESTS_OK : METRIC_HTTP_REQUESTS_BAD, 1);
        hc->answer = answer;
        hc->answer_len = (size_t)hn + send_body;
        hc->answer_sent = 0;
        /* from now on only writability matters: the rest of what the
         * client sends is never read */
        loop_watch_mod(hc->ep->loop, &hc->watch, EPOLLOUT);
        http_conn_write(hc);
}

/* The request is complete (headers end at hc->request + len): judge the
 * request line and answer. */
static void http_conn_handle(struct http_conn *hc) {
        char *line = hc->request;
        char *eol = memchr(line, '\n', hc->request_len);
        if (!eol) {
                http_conn_answer(hc, 400, "Bad Request", NULL, 0, false);
                return;
        }
        *eol = '\0';
        if (eol > line && eol[-1] == '\r')
                eol[-1] = '\0';

        /* METHOD SP TARGET SP HTTP/1.x, exactly one space each */
        char *sp1 = strchr(line, ' ');
        char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
        if (!sp1 || !sp2 || sp1 == line || sp2 == sp1 + 1 || strchr(sp2 + 1, ' ') ||
            (strcmp(sp2 + 1, "HTTP/1.0") != 0 && strcmp(sp2 + 1, "HTTP/1.1") != 0)) {
                http_conn_answer(hc, 400, "Bad Request", NULL, 0, false);
                return;
        }
        *sp1 = *sp2 = '\0';
        const char *method = line, *target = sp1 + 1;
        bool head = strcmp(method, "HEAD") == 0;
        if (strcmp(method, "GET") != 0 && !head) {
                http_conn_answer(hc, 405, "Method Not Allowed", NULL, 0, false);
                return;
        }
        size_t path_len = strcspn(target, "?#");
        if (path_len != strlen("/metrics") || memcmp(target, "/metrics", path_len) != 0) {
                http_conn_answer(hc, 404, "Not Found", NULL, 0, head);
                return;
        }
        char *body = NULL;
        size_t body_len = 0;
        int r = hc->ep->render(hc->ep->userdata, &body, &body_len);
        if (r < 0) {
                log_warn("metrics: cannot render the metrics: %s", strerror(-r));
                http_conn_answer(hc, 500, "Internal Server Error", NULL, 0, head);
                return;
        }
        http_conn_answer(hc, 200, "OK", body, body_len, head);
}

/* The headers end at the first empty line ("\r\n\r\n", or "\n\n" from a
 * lenient client). */
static bool request_complete(const char *p, size_t len) {
        for (size_t i = 1; i < len; i++)
                if (p[i] == '\n' && (p[i - 1] == '\n' ||
                                     (i >= 2 && p[i - 1] == '\r' && p[i - 2] == '\n')))
                        return true;
        return false;
}

static void http_conn_read(struct http_conn *hc) {
        for (;;) {
                size_t room = sizeof(hc->request) - hc->request_len;
                if (room == 0) {
                        http_conn_answer(hc, 431, "Request Header Fields Too Large", NULL, 0,
                                         false);
                        return;
                }
                ssize_t n = recv(hc->fd, hc->request + hc->request_len, room, MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        return;
                if (n <= 0) {
                        http_conn_close(hc); /* gone before asking anything */
                        return;
                }
                size_t before = hc->request_len;
                hc->request_len += (size_t)n;
                /* only the new bytes (and the 2 before them) can end it */
                size_t from = before > 2 ? before - 2 : 0;
                if (request_complete(hc->request + from, hc->request_len - from)) {
                        http_conn_handle(hc);
                        return;
                }
        }
}

static void http_conn_on_event(struct loop_watch *w, uint32_t events) {
        struct http_conn *hc = container_of(w, struct http_conn, watch);

        if (hc->lingering) {
                http_conn_linger(hc);
                return;
        }
        if (hc->answer) {
                if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
                        http_conn_write(hc);
                return;
        }
        if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                http_conn_read(hc);
}

static void http_conn_deadline(struct loop_timer *t) {
        struct http_conn *hc = container_of(t, struct http_conn, deadline);

        if (!hc->lingering)
                metrics_count(METRIC_HTTP_TIMEOUTS, 1);
        log_debug("metrics: HTTP connection closed after %u ms without a complete exchange",
                  METRICS_DEADLINE_MS);
        http_conn_close(hc);
}

/* Takes ownership of fd. */
static void endpoint_on_accept(struct acceptor *a, int fd, const struct sockaddr_storage *sa,
                               socklen_t salen) {
        struct metrics_endpoint *ep = container_of(a, struct metrics_endpoint, acceptor);
        (void)sa;
        (void)salen;

        if (ep->nconns >= METRICS_CONNS_MAX) {
                metrics_count(METRIC_HTTP_REFUSED, 1);
                acceptor_refuse(a, "%u HTTP connections open, the limit", ep->nconns);
                close(fd);
                return;
        }
        struct http_conn *hc = calloc(1, sizeof(*hc));
        if (!hc) {
                close(fd);
                return;
        }
        hc->ep = ep;
        hc->fd = fd;
        list_init(&hc->deadline.link);
        if (loop_watch_add(ep->loop, &hc->watch, fd, EPOLLIN, http_conn_on_event) < 0) {
                close(fd);
                free(hc);
                return;
        }
        list_add_tail(&ep->conns, &hc->link);
        ep->nconns++;
        loop_timer_start(ep->loop, &hc->deadline, METRICS_DEADLINE_MS, http_conn_deadline);
}

int metrics_endpoint_new(struct metrics_endpoint **out, struct loop *loop, const char *host,
                         uint16_t port, metrics_render_fn render, void *userdata) {
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
        struct addrinfo *res = NULL;
        char portstr[8];
        int r;

        snprintf(portstr, sizeof(portstr), "%u", port);
        r = getaddrinfo(host, portstr, &hints, &res);
        if (r != 0 || !res) {
                log_error("metrics: cannot resolve the listen address %s: %s", host,
                          gai_strerror(r));
                return -EINVAL;
        }
        _cleanup_close_ int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                                        0);
        int one = 1;
        if (fd >= 0)
                setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 64) < 0) {
                r = -errno;
                log_error("metrics: cannot listen on %s port %u: %s", host, port, strerror(-r));
                freeaddrinfo(res);
                return r;
        }
        freeaddrinfo(res);

        _cleanup_free_ struct metrics_endpoint *ep = calloc(1, sizeof(*ep));
        if (!ep)
                return -ENOMEM;
        ep->loop = loop;
        ep->render = render;
        ep->userdata = userdata;
        list_init(&ep->conns);
        list_init(&ep->zombies);
        r = acceptor_start(&ep->acceptor, loop, fd, "metrics", endpoint_on_accept);
        if (r < 0) {
                log_error("metrics: cannot watch the listening socket: %s", strerror(-r));
                return r;
        }
        ep->listen_fd = TAKE_FD(fd);
        ep->reap_hook.run = http_reap;
        loop_hook_add(loop, &ep->reap_hook);
        log_info("metrics: serving GET /metrics on %s port %u", host, port);
        *out = TAKE_PTR(ep);
        return 0;
}

struct metrics_endpoint *metrics_endpoint_free(struct metrics_endpoint *e) {
        if (!e)
                return NULL;
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &e->conns)
                http_conn_close(list_entry(pos, struct http_conn, link));
        http_reap(&e->reap_hook);
        list_unlink(&e->reap_hook.link);
        acceptor_stop(&e->acceptor);
        safe_close(e->listen_fd);
        free(e);
        return NULL;
}
