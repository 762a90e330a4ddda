/* SPDX-License-Identifier: MIT */
/*
 * endpoint — the HTTP listener that serves GET /metrics on the daemon's
 * event loop ([metrics] listen, ckptd.conf(5)).
 *
 * It speaks just enough HTTP/1.0 and 1.1 for a Prometheus scraper: one
 * request per connection, answered and closed (Connection: close), so
 * there is no keep-alive state to bound.  Whoever can reach the port is
 * untrusted, and nothing it does may stall the loop or grow memory:
 *
 *   - at most METRICS_CONNS_MAX connections at once; more are accepted and
 *     closed at once through the acceptor (counted, logged rate-limited);
 *   - a request (line and headers) of at most METRICS_REQUEST_MAX bytes,
 *     else 431 and close;
 *   - METRICS_DEADLINE_MS from accept to the last byte of the answer, else
 *     the connection is closed: a client trickling its request one byte a
 *     second (slowloris) or never reading the answer holds one of the few
 *     places for that long and no longer;
 *   - a request body is never read; any method but GET (and HEAD) is 405,
 *     any path but /metrics (a query string is ignored) 404, a line that is
 *     not "METHOD SP TARGET SP HTTP/1.x" 400.
 *
 * The body comes from the render callback at the time of the request.
 *
 * Not thread-safe: loop thread only.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "io/loop.h"

#define METRICS_CONNS_MAX 16
#define METRICS_REQUEST_MAX 4096
#define METRICS_DEADLINE_MS 5000

struct metrics_endpoint;

/* Render the exposition text into a malloc'd buffer (*out, *len; the
 * endpoint frees it).  0 or -errno (the client gets a 500). */
typedef int (*metrics_render_fn)(void *userdata, char **out, size_t *len);

/* Listen on host:port (host a name or an IPv4/IPv6 literal without
 * brackets).  0 or -errno, logged (cannot resolve, bind, listen). */
int metrics_endpoint_new(struct metrics_endpoint **out, struct loop *loop, const char *host,
                         uint16_t port, metrics_render_fn render, void *userdata);
/* Close the listener and every connection.  NULL-safe; returns NULL. */
struct metrics_endpoint *metrics_endpoint_free(struct metrics_endpoint *e);
