# SPDX-License-Identifier: MIT
"""An HTTP proxy between an S3 client and radosgw that records every
request and injects faults.

Why: the object-store tests must show that the daemon survives what real
networks and stores do (resets, 500/503 answers, stalls, slow links) and
that it does not send more than it should (no retry storms, no part
uploaded twice, one COMMIT).  radosgw itself neither fails on demand nor
tells which requests it acted on; a proxy that sees every request and the
gateway's answer to it can do both.

It handles one HTTP request per connection (it asks the gateway for
"Connection: close").  For each request it calls pick(req), which names
what to do with it:

  forward         relay it to the gateway (also what pass-through does)
  slowdown        answer 503 SlowDown itself
  error500        answer 500 InternalError itself
  reset           reset the connection right after the request head
  body-reset      relay half of the body, then reset (the gateway discards
                  the partial object or part)
  response-reset  relay a GET, but reset after 256 KiB of a response body of
                  1 MiB or more (a smaller answer is relayed whole and
                  fault_unused() is told, so the fault can be kept for later)
  stall           read the whole request and never answer
  delay           wait `delay_s` seconds, then forward
  answer-lost     relay the whole request, wait for the gateway's answer,
                  then reset instead of passing it on: the gateway acted,
                  the client does not know

Only answer-lost (asked for by name) and response-reset (GETs only) cut
the answer to a request the gateway acted on: a lost answer to
CompleteMultipartUpload or a conditional PUT is a real hazard, but the
caller's to resolve (see docs/object-store.md), not a retry's, so a fault
schedule for a client's retries must not produce it by accident.  Faults
that answer or reset before forwarding reach the gateway not at all.

Every request is logged as a Request in `log`, with the status the gateway
answered (None when it was never forwarded or never answered), so a test
can count, say, the UploadPart requests of one key that got a 2xx.
`body_rate` (bytes/s, 0 = none) throttles all request bodies together: a
slow uplink.  When the client goes away in the middle of a request body
(a killed daemon), the proxy resets the gateway connection, so the gateway
never completes that request.
"""
import re
import select
import socket
import struct
import threading
import time
import urllib.parse
from collections import Counter

MiB = 1024 * 1024


def reset(sock):
    """Close with an RST instead of a FIN: what a crashed peer or a
    middlebox looks like."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def read_head(sock, limit=64 * 1024):
    """Bytes up to the end of an HTTP head, and what came after it."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return None, b""
        buf += data
        if len(buf) > limit:
            return None, b""
    end = buf.index(b"\r\n\r\n") + 4
    return buf[:end], buf[end:]


def header(head, name):
    m = re.search(rb"\r\n" + name.encode() + rb":[ \t]*([^\r\n]*)", head, re.IGNORECASE)
    return m.group(1).strip().decode("latin-1") if m else None


class Request:
    """One request the proxy received, as a path-style S3 request."""

    def __init__(self, n, head):
        self.n = n
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split(" ")
        self.method = parts[0]
        self.target = parts[1] if len(parts) > 1 else "/"
        path, _, qs = self.target.partition("?")
        self.query = dict(urllib.parse.parse_qsl(qs, keep_blank_values=True))
        segs = path.lstrip("/").split("/", 1)
        self.bucket = urllib.parse.unquote(segs[0]) if segs[0] else None
        self.key = urllib.parse.unquote(segs[1]) if len(segs) > 1 and segs[1] else None
        self.length = int(header(head, "Content-Length") or 0)
        self.if_none_match = header(head, "If-None-Match")
        self.content_md5 = header(head, "Content-MD5")
        self.fault = None
        self.status = None      # the gateway's (or the proxy's own) answer
        self.from_gateway = False
        self.t_start = time.monotonic()
        self.t_answer = None

    @property
    def kind(self):
        """The S3 operation, by method and subresource."""
        q = self.query
        if self.key is None:
            if self.bucket is None:
                return "ListBuckets"
            if self.method == "GET":
                return "ListMultipartUploads" if "uploads" in q else "ListObjects"
            return self.method + "Bucket"
        if self.method == "PUT":
            return "UploadPart" if "partNumber" in q and "uploadId" in q else "PutObject"
        if self.method == "POST":
            if "uploads" in q:
                return "CreateMultipartUpload"
            if "uploadId" in q:
                return "CompleteMultipartUpload"
            return "PostObject"
        if self.method == "GET":
            return "ListParts" if "uploadId" in q else "GetObject"
        if self.method == "DELETE":
            return "AbortMultipartUpload" if "uploadId" in q else "DeleteObject"
        if self.method == "HEAD":
            return "HeadObject"
        return self.method

    @property
    def part(self):
        p = self.query.get("partNumber")
        return int(p) if p and p.isdigit() else None

    @property
    def ok(self):
        """The gateway answered 2xx."""
        return self.from_gateway and self.status is not None and 200 <= self.status < 300

    def __repr__(self):
        return "#%d %s %s %s%s -> %s%s" % (
            self.n, self.kind, self.key or self.bucket or "/",
            "part %d " % self.part if self.part else "", self.length, self.status,
            " (%s)" % self.fault if self.fault and self.fault != "forward" else "")


class Proxy:
    """Pass-through by default; subclass pick() (or set policy) for faults."""

    def __init__(self, upstream_port, policy=None, delay_s=3.0):
        self.upstream_port = upstream_port
        self.policy = policy
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.requests = 0
        self.log = []
        self.counts = Counter()
        self.errors = []
        self.body_rate = 0
        self._next_send = 0.0
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.endpoint = "http://127.0.0.1:%d" % self.port
        self.stopping = False
        self.thread = threading.Thread(target=self.accept_loop, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stopping = True
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            pass
        self.thread.join(timeout=5)
        self.listener.close()

    def accept_loop(self):
        while True:
            conn, _ = self.listener.accept()
            if self.stopping:
                conn.close()
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def count(self, what):
        with self.lock:
            self.counts[what] += 1

    # ---- what to do with a request

    def pick(self, req):
        """Called with self.lock held; returns a fault name."""
        return self.policy(req) if self.policy else "forward"

    def fault_unused(self, req, fault):
        """A response-reset did not apply (a small or failed answer): the
        policy's own fault_unused(req, fault), if it has one, is told."""
        cb = getattr(self.policy, "fault_unused", None)
        if cb:
            with self.lock:
                cb(req, fault)

    # ---- queries for the tests

    def select(self, kind=None, key=None, ok=None, since=0):
        """Logged requests (from index since) matching kind/key/ok."""
        with self.lock:
            log = list(self.log[since:])
        return [r for r in log
                if (kind is None or r.kind == kind) and (key is None or r.key == key)
                and (ok is None or r.ok == ok)]

    def mark(self):
        """An index into the log: select(since=mark()) sees what came after."""
        with self.lock:
            return len(self.log)

    # ---- relaying

    def throttle(self, n):
        rate = self.body_rate
        if not rate:
            return
        with self.lock:
            now = time.monotonic()
            start = max(now, self._next_send)
            self._next_send = start + n / rate
            until = self._next_send
        delay = until - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def handle(self, client):
        try:
            self.serve(client)
        except OSError:
            pass  # the client gave up on a connection we were relaying
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.errors.append(repr(e))
        finally:
            try:
                client.close()
            except OSError:
                pass

    def answer(self, client, req, status, reason, code, message):
        body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code>'
                b"<Message>%s</Message></Error>" % (code.encode(), message.encode()))
        req.status = status
        req.t_answer = time.monotonic()
        client.sendall(b"HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\n"
                       b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                       % (status, reason.encode(), len(body), body))
        # read what the client still sends, so that closing sends no RST
        client.shutdown(socket.SHUT_WR)
        client.settimeout(2)
        try:
            while client.recv(65536):
                pass
        except OSError:
            pass

    def serve(self, client):
        head, rest = read_head(client)
        if head is None:
            return
        with self.lock:
            self.requests += 1
            req = Request(self.requests, head)
            self.log.append(req)
            fault = self.pick(req)
            req.fault = fault

        if fault == "slowdown":
            self.count("slowdown")
            self.answer(client, req, 503, "Slow Down", "SlowDown",
                        "Please reduce your request rate.")
            return
        if fault == "error500":
            self.count("error500")
            self.answer(client, req, 500, "Internal Server Error", "InternalError",
                        "We encountered an internal error. Please try again.")
            return
        if fault == "reset":
            self.count("reset")
            reset(client)
            return
        if fault == "stall":
            self.count("stall")
            client.settimeout(300)
            try:
                while client.recv(65536):
                    pass
            except OSError:
                pass
            return
        if fault == "delay":
            self.count("delay")
            time.sleep(self.delay_s)

        # forward, one request per connection
        lines = [line for line in head[:-4].split(b"\r\n")
                 if not line.lower().startswith(b"connection:")]
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        try:
            upstream.sendall(b"\r\n".join(lines) + b"\r\nConnection: close\r\n\r\n")
            self.relay(client, upstream, req, rest, fault)
        finally:
            upstream.close()

    def relay(self, client, upstream, req, rest, fault):
        length = req.length
        cut_body_at = length // 2 if fault == "body-reset" else None
        cut_response = fault == "response-reset"
        chunk = 64 * 1024 if self.body_rate else 256 * 1024
        body_sent = 0
        resp_head = b""       # the response head, while it is arriving
        resp_decided = False  # head seen
        resp_body = 0
        pending = rest
        client_open = True
        self.count("forwarded")
        while True:
            if pending:
                if cut_body_at is not None and body_sent + len(pending) >= cut_body_at:
                    upstream.sendall(pending[:cut_body_at - body_sent])
                    self.count("body-reset")
                    reset(client)
                    return
                self.throttle(len(pending))
                upstream.sendall(pending)
                body_sent += len(pending)
                pending = b""
            watch = [upstream] + ([client] if client_open else [])
            readable, _, _ = select.select(watch, [], [], 120)
            if not readable:
                return
            if client in readable:
                pending = client.recv(chunk)
                if not pending:
                    client_open = False
                    if body_sent < length and not resp_decided:
                        # the client died half-way through its body: the
                        # gateway must not complete this request
                        self.count("client-gone")
                        reset(upstream)
                        return
            if upstream in readable:
                data = upstream.recv(256 * 1024)
                if not data:
                    break
                if not resp_decided:
                    resp_head += data
                    while not resp_decided and b"\r\n\r\n" in resp_head:
                        end = resp_head.index(b"\r\n\r\n") + 4
                        try:
                            status = int(resp_head.split(b" ", 2)[1])
                        except (IndexError, ValueError):
                            status = -1
                        if 100 <= status < 200:
                            # "100 Continue" to an Expect: the answer is still to come
                            resp_head = resp_head[end:]
                            continue
                        resp_decided = True
                        resp_body = len(resp_head) - end
                        req.status = status
                        req.from_gateway = True
                        req.t_answer = time.monotonic()
                        if cut_response:
                            big = int(header(resp_head[:end], "Content-Length") or 0) >= MiB
                            cut_response = 200 <= req.status < 300 and big
                        if fault == "answer-lost":
                            self.count("answer-lost")
                            reset(client)
                            return
                else:
                    resp_body += len(data)
                if cut_response and resp_decided and resp_body >= 256 * 1024:
                    client.sendall(data[:len(data) - (resp_body - 256 * 1024)])
                    self.count("response-reset")
                    reset(client)
                    return
                client.sendall(data)
        if fault == "response-reset" and not cut_response:
            # the response was not worth cutting: keep the fault for later
            self.fault_unused(req, fault)
        client.shutdown(socket.SHUT_WR)


class FaultProxy(Proxy):
    """The fixed fault schedule of the S3 client test (test_s3_client.py),
    by request number:
      - answers the first `slowdowns` requests itself with 503 SlowDown;
      - resets every `reset_every`-th connection right after the request
        head, before anything reaches the gateway;
      - resets `body_resets` uploads of 1 MiB or more half-way through the
        body, so a retry must send the body again from its first byte;
      - resets `response_resets` GETs of 1 MiB or more after 256 KiB of
        the response body, so a retry must refill the buffer from its start;
      - never answers the first request without a body from number
        `stall_at` on (the client's low-speed timeout must fire)."""

    def __init__(self, upstream_port, slowdowns=3, reset_every=7, body_resets=2,
                 response_resets=2, stall_at=12):
        super().__init__(upstream_port)
        self.slowdowns = slowdowns
        self.reset_every = reset_every
        self.stall_at = stall_at
        self.body_resets_left = body_resets
        self.response_resets_left = response_resets
        self.stall_pending = True

    def pick(self, req):
        n, method, length = req.n, req.method, req.length
        if n <= self.slowdowns:
            return "slowdown"
        if n >= self.stall_at and self.stall_pending and length == 0:
            self.stall_pending = False
            return "stall"
        if n % self.reset_every == 0:
            return "reset"
        if length >= MiB and self.body_resets_left > 0:
            self.body_resets_left -= 1
            return "body-reset"
        if method == "GET" and self.response_resets_left > 0:
            self.response_resets_left -= 1
            return "response-reset"
        return "forward"

    def fault_unused(self, req, fault):
        with self.lock:
            self.response_resets_left += 1
