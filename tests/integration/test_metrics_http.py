#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Hostile clients of the metrics endpoint (issue 14, metrics/endpoint.h):
whoever reaches [metrics] listen must not stall or crash the daemon.

  1. the protocol's edges: 404 for another path, 405 (with Allow) for
     another method, 400 for a line that is not HTTP/1.x, HEAD without a
     body, HTTP/1.0, a query string.
  2. slowloris: a request trickled a byte at a time is cut at the
     deadline (5 s), and meanwhile other scrapes are answered at once.
  3. oversized requests (64 KiB of headers, a 10 KiB request line) get
     431 and are closed; the daemon goes on.
  4. many connections: 200 idle ones at once; 16 are held (until their
     deadline), the rest closed at once; the client socket answers all
     along, the daemon does not spin, its log stays small, and scrapes
     work again once the held ones time out.
  5. clients that reset the connection right after asking.
"""
import os
import socket
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import Daemon, check, check_log_clean, free_ports, log, run_cases  # noqa: E402
from metricsdoc import http_get, parse, scrape, value  # noqa: E402

DEADLINE_S = 5.0   # METRICS_DEADLINE_MS
CONNS_MAX = 16     # METRICS_CONNS_MAX


def start(ctx):
    port = free_ports(1)[0]
    d = Daemon(ctx.tmp, name="h", pool="64M", slot="4M",
               extra=["--metrics-listen=127.0.0.1:%d" % port])
    d.metrics_port = port
    ctx.daemons.append(d)
    return d.start()


def raw_exchange(port, data, timeout=10):
    """Send data, read to EOF; the bytes answered."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


def status_of(answer):
    line = answer.split(b"\r\n", 1)[0].decode(errors="replace")
    return int(line.split()[1]) if line.startswith("HTTP/1.1 ") else None


def closed_within(s, seconds):
    """Whether the daemon closes s within seconds (EOF or reset)."""
    s.settimeout(seconds)
    try:
        while True:
            if not s.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def healthy(d, what):
    t0 = time.monotonic()
    d.ctl("status")
    dt = time.monotonic() - t0
    check(dt < 2.0, "%s: ckptctl status took %.1f s" % (what, dt))
    check(d.alive(), "%s: the daemon died" % what)


def case_edges(ctx):
    d = start(ctx)
    port = d.metrics_port
    st, _, body = http_get(port, "/")
    check(st == 404, "GET / answered %d" % st)
    st, _, _ = http_get(port, "/metrics/")
    check(st == 404, "GET /metrics/ answered %d" % st)
    st, headers, _ = http_get(port, "/metrics", method="POST")
    check(st == 405 and "GET" in headers.get("allow", ""), "POST answered %d %s" % (st, headers))
    st, _, _ = http_get(port, "/metrics", method="DELETE")
    check(st == 405, "DELETE answered %d" % st)
    st, headers, body = http_get(port, "/metrics", method="HEAD")
    check(st == 200 and body == "" and int(headers["content-length"]) > 1000,
          "HEAD answered %d, %d body bytes, %s" % (st, len(body), headers))
    st, _, body = http_get(port, "/metrics?name[]=ckptd_up")
    check(st == 200 and body.startswith("# HELP "), "a query string answered %d" % st)
    for bad in (b"hello\r\n\r\n", b"GET /metrics HTTP/2.0\r\n\r\n", b"GET  /metrics HTTP/1.1\r\n\r\n",
                b"GET /metrics\r\n\r\n", b"\r\n\r\n"):
        ans = raw_exchange(port, bad)
        check(status_of(ans) == 400, "%r answered %r" % (bad, ans[:60]))
    ans = raw_exchange(port, b"GET /metrics HTTP/1.0\n\n")
    check(status_of(ans) == 200 and b"\r\n\r\n# HELP " in ans, "HTTP/1.0 with bare LFs: %r"
          % ans[:80])
    s = parse(scrape(port))
    check(value(s, "ckptd_metrics_http_requests_total", code="error") >= 9,
          "the refused requests are not counted")
    healthy(d, "after the edge cases")
    check_log_clean(d)


def case_slowloris(ctx):
    d = start(ctx)
    port = d.metrics_port
    slow = socket.create_connection(("127.0.0.1", port))
    t0 = time.monotonic()
    request = b"GET /metrics HTTP/1.1\r\nHost: slow\r\nX-Slow: " + b"a" * 100
    slow.setblocking(False)
    sent, fastest = 0, 0.0
    cut = None
    while time.monotonic() - t0 < DEADLINE_S + 3:
        try:
            slow.send(request[sent % len(request):][:1])
            sent += 1
        except (BrokenPipeError, ConnectionResetError):
            cut = time.monotonic() - t0
            break
        try:
            if slow.recv(4096) == b"":
                cut = time.monotonic() - t0
                break
        except BlockingIOError:
            pass
        except ConnectionResetError:
            cut = time.monotonic() - t0
            break
        t1 = time.monotonic()
        scrape(port)
        fastest = max(fastest, time.monotonic() - t1)
        time.sleep(0.3)
    slow.close()
    check(cut is not None, "a trickled request was not cut within %.0f s" % (DEADLINE_S + 3))
    check(DEADLINE_S - 0.5 <= cut <= DEADLINE_S + 1.5, "cut after %.1f s, expected ~%.0f s"
          % (cut, DEADLINE_S))
    check(fastest < 1.0, "a scrape took %.2f s while the slow client trickled" % fastest)
    log("   trickled %d bytes, cut after %.1f s; slowest scrape meanwhile %.3f s"
        % (sent, cut, fastest))
    s = parse(scrape(port))
    check(value(s, "ckptd_metrics_http_timeouts_total") >= 1, "the timeout is not counted")
    healthy(d, "after slowloris")
    check_log_clean(d)


def case_oversized(ctx):
    d = start(ctx)
    port = d.metrics_port
    big = b"GET /metrics HTTP/1.1\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"b" * 60)
                                                  for i in range(1000)) + b"\r\n"
    ans = raw_exchange(port, big)
    check(status_of(ans) == 431, "64 KiB of headers answered %r" % ans[:80])
    ans = raw_exchange(port, b"GET /" + b"m" * 10240 + b" HTTP/1.1\r\n\r\n")
    check(status_of(ans) == 431, "a 10 KiB request line answered %r" % ans[:80])
    # one that never stops sending: answered, then closed within the deadline
    s = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S + 3)
    t0 = time.monotonic()
    got = b""
    try:
        while time.monotonic() - t0 < DEADLINE_S + 2:
            s.sendall(b"X" * 4096)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    try:
        got = s.recv(4096)
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    dt = time.monotonic() - t0
    check(dt < DEADLINE_S + 3, "an endless request held the connection %.1f s" % dt)
    log("   endless sender: cut after %.1f s, answer %r" % (dt, got[:40]))
    scrape(port)
    healthy(d, "after oversized requests")
    check_log_clean(d)


def case_many(ctx):
    d = start(ctx)
    port = d.metrics_port
    log0 = d.log_size()
    socks = []
    t0 = time.monotonic()
    for _ in range(200):
        socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    cpu0 = d.cpu_seconds()
    # those past the cap are closed at once; the first CONNS_MAX are held
    closed = [s for s in socks[CONNS_MAX + 8:] if closed_within(s, 1.0)]
    check(len(closed) == len(socks) - CONNS_MAX - 8,
          "%d of %d connections past the cap were not closed at once"
          % (len(socks) - CONNS_MAX - 8 - len(closed), len(socks) - CONNS_MAX - 8))
    healthy(d, "with 200 HTTP connections")
    time.sleep(1.0)
    cpu = d.cpu_seconds() - cpu0
    check(cpu < 0.5, "the daemon used %.2f s of CPU while held connections sat idle" % cpu)
    # the held ones go at their deadline, and scrapes work again
    held_open = [s for s in socks[:CONNS_MAX] if not closed_within(s, 0.01)]
    check(len(held_open) >= CONNS_MAX - 1, "only %d connections were held" % len(held_open))
    left = DEADLINE_S + 1.5 - (time.monotonic() - t0)
    for s in held_open:
        check(closed_within(s, max(left, 0.1)), "a held connection outlived its deadline")
        left = DEADLINE_S + 1.5 - (time.monotonic() - t0)
    for s in socks:
        s.close()
    s = parse(scrape(port))
    refused = value(s, "ckptd_metrics_http_refused_total")
    check(refused >= 200 - CONNS_MAX - 8, "only %d refusals counted" % refused)
    grown = d.log_size() - log0
    check(grown < 64 * 1024, "the log grew %d bytes for 200 connections" % grown)
    log("   200 connections: %d refused, %d held until the deadline, log +%d bytes, "
        "CPU %.2f s" % (refused, len(held_open), grown, cpu))
    healthy(d, "after the flood")
    check_log_clean(d)


def case_resets(ctx):
    d = start(ctx)
    port = d.metrics_port
    resets = 0
    for _ in range(50):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        try:
            s.send(b"GET /metrics HTTP/1.1\r\n\r\n")
        except ConnectionResetError:
            resets += 1  # refused over the cap while earlier ones were still open
        s.close()  # RST, perhaps before the answer is written
    log("   50 resets (%d refused before the request went out)" % resets)
    time.sleep(0.5)
    scrape(port)
    healthy(d, "after 50 resets")
    check_log_clean(d)


CASES = [
    (1, "404, 405, 400, HEAD, HTTP/1.0", case_edges),
    (2, "slowloris is cut at the deadline", case_slowloris),
    (3, "oversized requests get 431", case_oversized),
    (4, "200 connections at once", case_many),
    (5, "connections reset right after the request", case_resets),
]

if __name__ == "__main__":
    sys.exit(run_cases(CASES, "CKPT_METRICS_HTTP_CASES", "ckptd-metrics-http-"))
