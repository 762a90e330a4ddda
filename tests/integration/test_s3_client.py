#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The S3 client (daemon/remote/s3*.c) against a real radosgw, directly and
through a proxy that injects faults.

Starts a throw-away radosgw with tests/s3/radosgw.sh, puts a fault-injecting
TCP proxy in front of it, and runs the C test program ($CKPT_TEST_S3_CLIENT,
tests/s3/test-s3-client.c) with the gateway's endpoint and keys in its
environment and CKPT_S3_FAULTY=1 / CKPT_S3_FAULTY_ENDPOINT pointing at the
proxy.  The C program checks the results; this script checks that the proxy
really injected every kind of fault, and that no secret reached the output.

The proxy (tests/s3/faultproxy.py, FaultProxy) handles one HTTP request per
connection (it asks the gateway for "Connection: close") and, by the
request's number:
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
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import SKIP, TestFailure, check, log  # noqa: E402
from objstore import RADOSGW_SH, ceph_missing, radosgw_env  # noqa: E402
# tests/s3, on the path objstore sets
from faultproxy import FaultProxy  # noqa: E402
CLIENT = os.environ.get("CKPT_TEST_S3_CLIENT", "build/tests/test-s3-client")

SLOWDOWNS = 3
RESET_EVERY = 7
BODY_RESETS = 2
RESPONSE_RESETS = 2
STALL_AT = 12


def main():
    if not os.access(CLIENT, os.X_OK):
        log("FAIL: %s is not an executable (build test-s3-client first)" % CLIENT)
        return 1
    missing = ceph_missing()
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
        env = radosgw_env(r.stdout)
        check({"endpoint", "access_key", "secret_key", "region"} <= set(env),
              "radosgw.sh start printed %r" % r.stdout)
        log("radosgw up at %s after %.1f s" % (env["endpoint"], time.monotonic() - t0))
        port = int(env["endpoint"].rsplit(":", 1)[1])

        proxy = FaultProxy(port, slowdowns=SLOWDOWNS, reset_every=RESET_EVERY,
                           body_resets=BODY_RESETS, response_resets=RESPONSE_RESETS,
                           stall_at=STALL_AT)
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
