#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Smoke test of the test object store: a real radosgw (tests/s3/radosgw.sh)
driven by the stdlib S3 client (tests/s3/s3check.py).

Why: before the object-store tier's own tests rely on this gateway, prove
that it comes up from nothing, keeps bytes exactly (whole, ranged, and
multipart objects), really checks SigV4 signatures and payload hashes, and
goes away cleanly; and record how fast it starts and moves data, since the
tier's tests and benchmark budgets depend on it.

Installs the packages if needed (exit 77 when that is impossible), starts
radosgw in a temporary directory, stops it at the end.  If awscli or rclone
are installed, they are tried as well and reported, without deciding the
result.  Run by hand:  python3 tests/integration/test_radosgw_smoke.py
"""
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
S3DIR = os.path.join(os.path.dirname(HERE), "s3")
SCRIPT = os.path.join(S3DIR, "radosgw.sh")
sys.path.insert(0, S3DIR)
import s3check  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import SKIP, TestFailure, check, log  # noqa: E402

MiB = 1 << 20
BUCKET = "ckptd-smoke"


def expect_error(fn, status, code, what):
    try:
        fn()
    except s3check.S3Error as e:
        codes = code if isinstance(code, tuple) else (code,)
        check(e.status == status and e.code in codes,
              "%s: want %d %s, got %d %s" % (what, status, code, e.status, e.code))
        return
    raise TestFailure("%s: succeeded, want %d %s" % (what, status, code))


def rate(nbytes, seconds):
    return "%.0f MB/s" % (nbytes / 1e6 / seconds) if seconds > 0 else "inf"


def timed(fn, *args, **kw):
    t = time.monotonic()
    out = fn(*args, **kw)
    return out, time.monotonic() - t


def smoke(c, env, timings):
    rnd = random.Random(20261129)

    # bucket
    c.create_bucket(BUCKET)
    check(BUCKET in c.list_buckets(), "new bucket missing from the bucket list")
    check(c.list_objects(BUCKET) == [], "new bucket is not empty")

    # the first object written makes radosgw create its data pool: a small
    # one first, so the timing below is of the transfer
    _, t = timed(c.put_object, BUCKET, "first", b"1")
    timings["first put"] = "%.1f s" % t
    c.delete_object(BUCKET, "first")

    # 16 MiB object, bit-exact both ways; it spans several 4 MiB rados stripes
    size = 16 * MiB
    data = rnd.randbytes(size)
    etag, t = timed(c.put_object, BUCKET, "whole", data)
    timings["put 16 MiB"] = rate(size, t)
    check(etag == '"%s"' % hashlib.md5(data).hexdigest(),
          "put ETag %s is not the MD5 of the body" % etag)
    back, t = timed(c.get_object, BUCKET, "whole")
    timings["get 16 MiB"] = rate(size, t)
    check(back == data, "16 MiB object came back different (%d bytes)" % len(back))
    head = c.head_object(BUCKET, "whole")
    check(int(head["content-length"]) == size and head["etag"] == etag,
          "HEAD: %s" % head)

    # ranges: first byte, inside, across a stripe boundary, open-ended tail
    for first, last in [(0, 0), (1000, 1000 + 4095), (4 * MiB - 100, 4 * MiB + 100),
                        (size - 10, None), (size - 1, size - 1)]:
        got = c.get_object(BUCKET, "whole", first, last)
        want = data[first:(size if last is None else last + 1)]
        check(got == want, "range %s-%s: %d bytes, wrong content" % (first, last, len(got)))

    # multipart: 3 parts >= 5 MiB, uploaded out of order, listed, completed
    parts_data = [rnd.randbytes(n) for n in (5 * MiB, 6 * MiB + 1, 5 * MiB + 3)]
    key = "multi/part object"       # a space and a slash: path encoding
    uid = c.create_multipart_upload(BUCKET, key)
    check(uid, "no UploadId")
    check((key, uid) in c.list_multipart_uploads(BUCKET),
          "?uploads listing lacks the new upload: %s" % c.list_multipart_uploads(BUCKET))
    etags = {}
    t0 = time.monotonic()
    for n in (2, 1, 3):
        etags[n] = c.upload_part(BUCKET, key, uid, n, parts_data[n - 1])
        check(etags[n] == '"%s"' % hashlib.md5(parts_data[n - 1]).hexdigest(),
              "part %d ETag %s" % (n, etags[n]))
    listed = c.list_parts(BUCKET, key, uid)
    check(listed == [(n, etags[n], len(parts_data[n - 1])) for n in (1, 2, 3)],
          "list parts: %s" % listed)
    final = c.complete_multipart_upload(BUCKET, key, uid, [(n, etags[n]) for n in (1, 2, 3)])
    total = sum(len(p) for p in parts_data)
    timings["multipart 16 MiB"] = rate(total, time.monotonic() - t0)
    want_etag = '"%s-3"' % hashlib.md5(b"".join(
        hashlib.md5(p).digest() for p in parts_data)).hexdigest()
    # radosgw 16.2 answers an empty <ETag> here; HEAD has the real one
    check(final in ("", want_etag), "complete: ETag %s, want %s" % (final, want_etag))
    check(c.head_object(BUCKET, key)["etag"] == want_etag,
          "multipart ETag %s, want %s" % (c.head_object(BUCKET, key)["etag"], want_etag))
    check(c.get_object(BUCKET, key) == b"".join(parts_data),
          "multipart object came back different")
    check(c.get_object(BUCKET, key, 5 * MiB - 5, 5 * MiB + 5) ==
          b"".join(parts_data)[5 * MiB - 5:5 * MiB + 6], "range across parts")
    check(c.list_multipart_uploads(BUCKET) == [], "completed upload still listed")

    # abort: the upload and its parts are gone
    uid2 = c.create_multipart_upload(BUCKET, "aborted")
    c.upload_part(BUCKET, "aborted", uid2, 1, parts_data[0])
    c.abort_multipart_upload(BUCKET, "aborted", uid2)
    check(c.list_multipart_uploads(BUCKET) == [], "aborted upload still listed")
    # S3 says NoSuchUpload; radosgw 16.2 says NoSuchKey
    expect_error(lambda: c.list_parts(BUCKET, "aborted", uid2), 404,
                 ("NoSuchUpload", "NoSuchKey"), "list parts of an aborted upload")

    listing = c.list_objects(BUCKET)
    check([k for k, _, _ in listing] == sorted(["whole", key]), "listing: %s" % listing)

    # authentication: wrong secret, unknown key, tampered payload
    wrong = s3check.S3Client(env["endpoint"], env["access_key"], "not-the-secret",
                             env["region"])
    expect_error(lambda: wrong.get_object(BUCKET, "whole"), 403, "SignatureDoesNotMatch",
                 "GET with a wrong secret")
    expect_error(lambda: wrong.put_object(BUCKET, "evil", b"x"), 403,
                 "SignatureDoesNotMatch", "PUT with a wrong secret")
    stranger = s3check.S3Client(env["endpoint"], "NOSUCHACCESSKEY00000", env["secret_key"],
                                env["region"])
    expect_error(lambda: stranger.list_buckets(), 403, "InvalidAccessKeyId",
                 "unknown access key")
    r = c.request("PUT", BUCKET, "evil", body=b"tampered",
                  payload_hash=hashlib.sha256(b"original").hexdigest())
    check(r.status == 400 and s3check.xml_text(r.body, "Code") == "XAmzContentSHA256Mismatch",
          "body not matching x-amz-content-sha256: %d %s" % (r.status, r.body[:200]))
    expect_error(lambda: c.get_object(BUCKET, "evil"), 404, "NoSuchKey",
                 "object of a rejected PUT")

    # delete
    c.delete_object(BUCKET, "whole")
    c.delete_object(BUCKET, key)
    expect_error(lambda: c.get_object(BUCKET, "whole"), 404, "NoSuchKey", "deleted object")
    check(c.list_objects(BUCKET) == [], "bucket not empty after deletes")
    c.delete_bucket(BUCKET)
    check(BUCKET not in c.list_buckets(), "deleted bucket still listed")


def try_tools(env, tmp):
    """awscli and rclone against the gateway: reported, never failing."""
    path = os.path.join(tmp, "tool-object")
    data = random.Random(7).randbytes(20 * MiB)
    with open(path, "wb") as f:
        f.write(data)
    results = {}
    c = s3check.S3Client(env["endpoint"], env["access_key"], env["secret_key"], env["region"])

    def run(name, argv, extra_env, drop=()):
        e = dict(os.environ, **extra_env)
        for k in drop:
            e.pop(k, None)
        t = time.monotonic()
        r = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("%s: exit %d: %s" % (name, r.returncode,
                                                   (r.stderr or r.stdout)[-300:]))
        return time.monotonic() - t

    # Debian's awscli is /usr/bin/aws; a pip one may shadow it in PATH
    aws = "/usr/bin/aws" if os.access("/usr/bin/aws", os.X_OK) else shutil.which("aws")
    if aws:
        cfg = os.path.join(tmp, "aws-config")
        with open(cfg, "w") as f:
            f.write("[default]\nregion = %s\ns3 =\n    addressing_style = path\n"
                    % env["region"])
        aws_env = {"AWS_CONFIG_FILE": cfg, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                   "AWS_ACCESS_KEY_ID": env["access_key"],
                   "AWS_SECRET_ACCESS_KEY": env["secret_key"]}
        base = [aws, "--endpoint-url", env["endpoint"]]
        try:
            run("aws mb", base + ["s3", "mb", "s3://tool-aws"], aws_env)
            t = run("aws cp up", base + ["s3", "cp", "--only-show-errors", path,
                                          "s3://tool-aws/obj"], aws_env)
            check(c.get_object("tool-aws", "obj") == data, "aws upload differs")
            t2 = run("aws cp down", base + ["s3", "cp", "--only-show-errors",
                                             "s3://tool-aws/obj", path + ".aws"],
                     aws_env)
            with open(path + ".aws", "rb") as f:
                check(f.read() == data, "aws download differs")
            results["awscli"] = "ok (20 MiB up %s, down %s)" % (rate(len(data), t),
                                                               rate(len(data), t2))
        except Exception as e:  # noqa: BLE001 - report only
            results["awscli"] = "FAILED: %s" % e
    else:
        results["awscli"] = "not installed"

    rclone = shutil.which("rclone")
    if rclone:
        rc_env = {"RCLONE_CONFIG": os.devnull, "RCLONE_CONFIG_RGW_TYPE": "s3",
                  "RCLONE_CONFIG_RGW_PROVIDER": "Ceph",
                  "RCLONE_CONFIG_RGW_ENDPOINT": env["endpoint"],
                  "RCLONE_CONFIG_RGW_ACCESS_KEY_ID": env["access_key"],
                  "RCLONE_CONFIG_RGW_SECRET_ACCESS_KEY": env["secret_key"],
                  "RCLONE_CONFIG_RGW_REGION": env["region"],
                  "RCLONE_CONFIG_RGW_FORCE_PATH_STYLE": "true"}
        # rclone 1.60 cannot use AWS_CA_BUNDLE with its own HTTP transport
        # ("LoadCustomCABundleError") even for http:// endpoints
        drop = ("AWS_CA_BUNDLE",)
        try:
            run("rclone mkdir", [rclone, "mkdir", "rgw:tool-rclone"], rc_env, drop)
            t = run("rclone copyto", [rclone, "copyto", "--s3-upload-cutoff", "5M",
                                      "--s3-chunk-size", "5M", path, "rgw:tool-rclone/obj"],
                    rc_env, drop)
            check(c.get_object("tool-rclone", "obj") == data, "rclone upload differs")
            t2 = run("rclone copyto down", [rclone, "copyto", "rgw:tool-rclone/obj",
                                            path + ".rclone"], rc_env, drop)
            with open(path + ".rclone", "rb") as f:
                check(f.read() == data, "rclone download differs")
            results["rclone"] = "ok (20 MiB multipart up %s, down %s)" % (
                rate(len(data), t), rate(len(data), t2))
        except Exception as e:  # noqa: BLE001 - report only
            results["rclone"] = "FAILED: %s" % e
    else:
        results["rclone"] = "not installed"
    return results


def main():
    try:
        s3check.selftest()
    except AssertionError as e:
        log("FAIL: %s" % e)
        return 1
    r = subprocess.run([SCRIPT, "install"])
    if r.returncode == SKIP:
        log("SKIP: radosgw packages unavailable")
        return SKIP
    if r.returncode != 0:
        log("FAIL: radosgw.sh install exited %d" % r.returncode)
        return 1

    tmp = tempfile.mkdtemp(prefix="rgw-smoke-")
    rgw_dir = os.path.join(tmp, "rgw")
    timings = {}
    rc = 1
    try:
        t0 = time.monotonic()
        r = subprocess.run([SCRIPT, "start", rgw_dir], stdout=subprocess.PIPE, text=True,
                           timeout=300)
        timings["startup"] = "%.1f s" % (time.monotonic() - t0)
        if r.returncode == SKIP:
            log("SKIP: radosgw.sh start: not installed")
            return SKIP
        check(r.returncode == 0, "radosgw.sh start exited %d" % r.returncode)
        env = dict(line.split("=", 1) for line in r.stdout.split() if "=" in line)
        check(set(env) == {"endpoint", "access_key", "secret_key", "region"},
              "start printed %r" % r.stdout)
        check(s3check.read_env_file(os.path.join(rgw_dir, "env")) == env,
              "DIR/env differs from what start printed")
        c = s3check.S3Client(env["endpoint"], env["access_key"], env["secret_key"],
                             env["region"])
        check(c.list_buckets() == [], "start must create no bucket")
        st = subprocess.run([SCRIPT, "status", rgw_dir], capture_output=True, text=True)
        check(st.returncode == 0, "status of a running gateway: %d %s" % (
            st.returncode, st.stdout + st.stderr))

        smoke(c, env, timings)
        for tool, result in try_tools(env, tmp).items():
            log("optional %s: %s" % (tool, result))
        rc = 0
    except (TestFailure, s3check.S3Error, OSError, subprocess.TimeoutExpired) as e:
        log("FAIL: %s" % e)
        rc = 1
    finally:
        t0 = time.monotonic()
        r = subprocess.run([SCRIPT, "stop", rgw_dir])
        timings["stop"] = "%.1f s" % (time.monotonic() - t0)
        st = subprocess.run([SCRIPT, "status", rgw_dir], capture_output=True, text=True)
        if r.returncode != 0 or st.returncode != 3:
            log("FAIL: stop exited %d, status after stop %d:\n%s" % (
                r.returncode, st.returncode, st.stdout))
            rc = 1
        if rc == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            log("left for inspection: %s" % tmp)
    log("timings: " + ", ".join("%s %s" % kv for kv in timings.items()))
    log("PASS" if rc == 0 else "FAIL")
    return rc


if __name__ == "__main__":
    sys.exit(main())
