#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The S3 client (daemon/remote/s3.c) against a real radosgw, directly and
through a proxy that injects faults.

Starts a throw-away radosgw with tests/s3/radosgw.sh, puts a fault-injecting
TCP proxy in front of it, and runs the C test program ($CKPT_TEST_S3_CLIENT,
tests/s3/test-s3-client.c) with the gateway's endpoint and keys in its
environment and CKPT_S3_FAULTY=1 / CKPT_S3_FAULTY_ENDPOINT pointing at the
proxy.  The C program checks the results; this script checks that the proxy
really injected every kind of fault, and that no secret reached the output.

The proxy handles one HTTP request per connection (it asks the gateway for
"Connection: close") and, by the request's number:
  - answers the first SLOWDOWNS requests itself with 503 SlowDown;
  - resets every RESET_EVERY-th connection right after reading the request
    head, before anything reaches the gateway;
  - resets BODY_RESETS uploads of 1 MiB or more half-way through the body
    (the gateway discards the partial object), so a retry must send the body
    again from its first byte;
  - resets RESPONSE_RESETS GETs of 1 MiB or more after 256 KiB of the
    response body, so a retry must refill the buffer from its start;
  - never answers the first request without a body from number STALL_AT
    on (the client's low-speed timeout must fire).
It never cuts the response of a request the gateway acted on other than a
GET: a lost answer to CompleteMultipartUpload or a conditional PUT is a real
hazard, but the caller's to resolve (see docs/object-store.md), not a
retry's.

Skips (77) when the Ceph binaries are not installed: CI must not install
packages from a test (`tests/s3/radosgw.sh install` does that by hand).
"""
import os
import re
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import SKIP, TestFailure, check, log  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.environ.get("CKPT_SOURCE_ROOT") or os.path.dirname(os.path.dirname(HERE))
RADOSGW_SH = os.path.join(SOURCE_ROOT, "tests", "s3", "radosgw.sh")
CLIENT = os.environ.get("CKPT_TEST_S3_CLIENT", "build/tests/test-s3-client")
MiB = 1024 * 1024

SLOWDOWNS = 3
RESET_EVERY = 7
BODY_RESETS = 2
RESPONSE_RESETS = 2
STALL_AT = 12


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


class FaultProxy:
    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.lock = threading.Lock()
        self.requests = 0
        self.body_resets_left = BODY_RESETS
        self.response_resets_left = RESPONSE_RESETS
        self.stall_pending = True
        self.counts = {"slowdown": 0, "reset": 0, "body-reset": 0, "response-reset": 0,
                       "stall": 0, "forwarded": 0}
        self.errors = []
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.stopping = False
        self.thread = threading.Thread(target=self.accept_loop, daemon=True)

    def start(self):
        self.thread.start()

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

    def pick(self, method, length):
        with self.lock:
            self.requests += 1
            n = self.requests
            if n <= SLOWDOWNS:
                return n, "slowdown"
            if n >= STALL_AT and self.stall_pending and length == 0:
                self.stall_pending = False
                return n, "stall"
            if n % RESET_EVERY == 0:
                return n, "reset"
            if length >= MiB and self.body_resets_left > 0:
                self.body_resets_left -= 1
                return n, "body-reset"
            if method == "GET" and self.response_resets_left > 0:
                self.response_resets_left -= 1
                return n, "response-reset"
            return n, "forward"

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

    def serve(self, client):
        head, rest = read_head(client)
        if head is None:
            return
        method = head.split(b" ", 1)[0].decode("latin-1")
        length = int(header(head, "Content-Length") or 0)
        n, fault = self.pick(method, length)

        if fault == "slowdown":
            body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
                    b"<Message>Please reduce your request rate.</Message></Error>")
            client.sendall(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                           b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
            self.count("slowdown")
            # read what the client still sends, so that closing sends no RST
            client.shutdown(socket.SHUT_WR)
            client.settimeout(2)
            try:
                while client.recv(65536):
                    pass
            except OSError:
                pass
            return
        if fault == "reset":
            self.count("reset")
            reset(client)
            return
        if fault == "stall":
            self.count("stall")
            client.settimeout(60)
            try:
                while client.recv(65536):
                    pass
            except OSError:
                pass
            return

        # forward, one request per connection
        lines = [line for line in head[:-4].split(b"\r\n")
                 if not line.lower().startswith(b"connection:")]
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        try:
            upstream.sendall(b"\r\n".join(lines) + b"\r\nConnection: close\r\n\r\n")
            self.relay(client, upstream, rest, length, fault)
        finally:
            upstream.close()

    def relay(self, client, upstream, rest, length, fault):
        cut_body_at = length // 2 if fault == "body-reset" else None
        cut_response = fault == "response-reset"
        body_sent = 0
        resp_head = b""       # the response head, while it is arriving
        resp_decided = False  # head seen: cut this response or not
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
                upstream.sendall(pending)
                body_sent += len(pending)
                pending = b""
            watch = [upstream] + ([client] if client_open else [])
            readable, _, _ = select.select(watch, [], [], 120)
            if not readable:
                return
            if client in readable:
                pending = client.recv(256 * 1024)
                if not pending:
                    client_open = False
            if upstream in readable:
                data = upstream.recv(256 * 1024)
                if not data:
                    break
                if cut_response and not resp_decided:
                    resp_head += data
                    if b"\r\n\r\n" in resp_head:
                        resp_decided = True
                        end = resp_head.index(b"\r\n\r\n") + 4
                        resp_body = len(resp_head) - end
                        status = resp_head.split(b" ", 2)[1]
                        big = int(header(resp_head[:end], "Content-Length") or 0) >= MiB
                        cut_response = status.startswith(b"2") and big
                elif cut_response:
                    resp_body += len(data)
                if cut_response and resp_decided and resp_body >= 256 * 1024:
                    client.sendall(data[:len(data) - (resp_body - 256 * 1024)])
                    self.count("response-reset")
                    reset(client)
                    return
                client.sendall(data)
        if fault == "response-reset":
            # the response was not worth cutting: keep the fault for a later GET
            with self.lock:
                self.response_resets_left += 1
        client.shutdown(socket.SHUT_WR)


def main():
    if not os.access(CLIENT, os.X_OK):
        log("FAIL: %s is not an executable (build test-s3-client first)" % CLIENT)
        return 1
    missing = [b for b in ("radosgw", "ceph-mon", "ceph-osd", "radosgw-admin")
               if shutil.which(b) is None]
    if missing:
        log("SKIP: %s not installed (tests/s3/radosgw.sh install)" % ", ".join(missing))
        return SKIP

    tmp = tempfile.mkdtemp(prefix="s3-client-")
    rgw_dir = os.path.join(tmp, "rgw")
    proxy = None
    rc = 1
    try:
        t0 = time.monotonic()
        r = subprocess.run([RADOSGW_SH, "start", rgw_dir], stdout=subprocess.PIPE, text=True,
                           timeout=300)
        if r.returncode == SKIP:
            log("SKIP: radosgw.sh start: Ceph not installed")
            rc = SKIP
            return rc
        check(r.returncode == 0, "radosgw.sh start exited %d" % r.returncode)
        env = dict(line.split("=", 1) for line in r.stdout.split() if "=" in line)
        check({"endpoint", "access_key", "secret_key", "region"} <= set(env),
              "radosgw.sh start printed %r" % r.stdout)
        log("radosgw up at %s after %.1f s" % (env["endpoint"], time.monotonic() - t0))
        port = int(env["endpoint"].rsplit(":", 1)[1])

        proxy = FaultProxy(port)
        proxy.start()
        child_env = dict(os.environ,
                         CKPT_S3_ENDPOINT=env["endpoint"],
                         CKPT_S3_ACCESS_KEY=env["access_key"],
                         CKPT_S3_SECRET_KEY=env["secret_key"],
                         CKPT_S3_REGION=env["region"],
                         CKPT_S3_FAULTY="1",
                         CKPT_S3_FAULTY_ENDPOINT="http://127.0.0.1:%d" % proxy.port,
                         TMPDIR=tmp)
        t0 = time.monotonic()
        r = subprocess.run([CLIENT], env=child_env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, errors="replace", timeout=700)
        log(r.stdout)
        log("test-s3-client exited %d after %.1f s" % (r.returncode, time.monotonic() - t0))
        log("proxy: %d requests, %s" % (proxy.requests, proxy.counts))
        check(r.returncode == 0, "test-s3-client exited %d" % r.returncode)
        check(not proxy.errors, "proxy errors: %s" % proxy.errors)
        check(proxy.counts["slowdown"] == SLOWDOWNS, "503s sent: %d" % proxy.counts["slowdown"])
        for fault in ("reset", "body-reset", "response-reset", "stall"):
            check(proxy.counts[fault] >= 1, "the proxy never injected a %s" % fault)
        m = re.search(r"^FAULTY-RETRIES (\d+)$", r.stdout, re.MULTILINE)
        check(m and int(m.group(1)) > 0, "the faulty phase did not run or retried nothing")
        # what the client logs must never carry a credential
        for secret in (env["secret_key"], "Signature=", "Authorization", "X-Amz-Credential",
                       "x-amz-security-token"):
            check(secret not in r.stdout, "the output contains %r" % secret)
        rc = 0
    except (TestFailure, OSError, subprocess.TimeoutExpired, ValueError) as e:
        log("FAIL: %s" % e)
        rc = 1
    finally:
        if proxy:
            proxy.stop()
        r = subprocess.run([RADOSGW_SH, "stop", rgw_dir])
        if r.returncode != 0:
            log("FAIL: radosgw.sh stop exited %d" % r.returncode)
            rc = 1
        if rc in (0, SKIP):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            log("left for inspection: %s" % tmp)
    log("PASS" if rc == 0 else "SKIP" if rc == SKIP else "FAIL")
    return rc


if __name__ == "__main__":
    sys.exit(main())
