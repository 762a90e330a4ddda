#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The object-store tier end to end: real ckptd daemons flushing committed
steps to a real radosgw (tests/s3/radosgw.sh) and restoring from it.

Why: the tier exists so that a checkpoint survives the loss of a node's
disk.  These cases check what a user of it relies on, with real bytes:
what lands in the bucket (keys of docs/object-layout.md, exact content),
that a wiped node restores bit-exact from the store alone, that big shards
go up as multipart uploads and small ones as single PUTs, that a wrong
secret or a missing bucket is reported clearly without a retry storm, that
a daemon killed in the middle of an upload resumes it without sending a
completed part again, that resets, 5xx answers and stalls lose or
duplicate nothing, and that with two nodes COMMIT is written once, only
after both node manifests exist.

One radosgw serves the whole file (a fresh bucket per case); a recording,
fault-injecting proxy (tests/s3/faultproxy.py) sits between the daemons
and the gateway where a case counts requests or injects faults.  The
bucket is inspected with the independent stdlib client tests/s3/s3check.py.

Cases can be chosen with CKPT_REMOTE_CASES=1,4 (by number) when run by hand.
Skips (77) when the Ceph binaries are not installed.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (SKIP, TestFailure, check, check_log_clean, ctl_json, log,  # noqa: E402
                     save_node, shards_arg, step_path, wait_until)
from objstore import (RADOSGW_SH, Store, StoreCtx, ceph_missing,  # noqa: E402
                      loopback_cluster, radosgw_env, s3check, step_prefix, wait_remote)

MiB = 1024 * 1024


# --------------------------------------------------------------------------
# helpers of this file only (the store's are in objstore.py)


def expected_objects(prefix, job, step, layouts, nodes=(0,)):
    """{key: size or None} of a committed step: layouts {rank: [(shard, size)]}."""
    sp = step_prefix(prefix, job, step)
    want = {sp + "ranks/%d/%s" % (r, name): size
            for r, spec in layouts.items() for name, size in spec}
    for n in nodes:
        want[sp + "nodes/%d.manifest" % n] = None
    want[sp + "COMMIT"] = None
    return want


def check_bucket_holds(store, bucket, prefix, job, step, layouts, nodes=(0,)):
    """The step's keys are exactly the documented ones, with the shard
    sizes; manifests and COMMIT are not empty."""
    want = expected_objects(prefix, job, step, layouts, nodes)
    have = store.objects(bucket, step_prefix(prefix, job, step))
    missing = sorted(set(want) - set(have))
    extra = sorted(set(have) - set(want))
    check(not missing and not extra,
          "bucket %s: step %d keys differ from docs/object-layout.md: missing %s, unexpected %s"
          % (bucket, step, missing[:10], extra[:10]))
    for key, size in want.items():
        if size is None:
            check(have[key] > 0, "%s is empty" % key)
        else:
            check(have[key] == size, "%s has %d bytes, the shard %d" % (key, have[key], size))
    return have


def check_objects_match_local(store, bucket, prefix, job, step, layouts, state_dir):
    """Every shard object's bytes equal the daemon's local file of it (which
    ckpt-testrank verify checked against the generator)."""
    sp = step_prefix(prefix, job, step)
    for r, spec in layouts.items():
        for name, size in spec:
            local = os.path.join(step_path(state_dir, job, step), "rank-%d" % r, name)
            with open(local, "rb") as f:
                want = f.read()
            check(len(want) == size, "local %s has %d bytes, not %d" % (local, len(want), size))
            got = store.s3.get_object(bucket, sp + "ranks/%d/%s" % (r, name))
            if got != want:
                at = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
                          min(len(got), len(want)))
                raise TestFailure("object ranks/%d/%s differs from the local shard at byte %d "
                                  "(%d vs %d bytes)" % (r, name, at, len(got), len(want)))


def save_ranks(d, job, step, world, layouts, seed=0, commit=True):
    """Every rank of layouts saves through d, then the step is committed."""
    save_node(d, job, step, sorted(layouts), world, layouts, seed, commit)


def verify_ranks(d, job, step, layouts, seed=0, extra=()):
    for r, spec in sorted(layouts.items()):
        d.rank("verify", "--job", job, "--step", step, "--rank", r, "--shards",
               shards_arg(spec), "--seed", seed, *extra)


def latest(d, job):
    return d.rank("latest", "--job", job).stdout.split()


def stop(*daemons):
    """SIGTERM; a clean exit is 0 (a sanitizer report is not)."""
    for d in daemons:
        rc = d.stop()
        check(rc == 0, "ckptd (%s) exited %s on SIGTERM:\n%s" % (d.log_path, rc,
                                                                 d.read_log()[-3000:]))


def wipe(d):
    """Stop the daemon and lose its whole state directory (a dead disk)."""
    stop(d)
    shutil.rmtree(d.state_dir)


def find_values(obj, name):
    """Every value of key `name` anywhere in a JSON document."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == name:
                out.append(v)
            out += find_values(v, name)
    elif isinstance(obj, list):
        for v in obj:
            out += find_values(v, name)
    return out


def remote_error(d):
    """The remote error `ckptctl --json status` reports ("remote_error", or
    "error" of its "remote" object), or None."""
    doc = ctl_json(d, "status")
    errs = find_values(doc, "remote_error")
    if isinstance(doc.get("remote"), dict):
        errs.append(doc["remote"].get("error"))
    errs = [e for e in errs if e]
    return errs[0] if errs else None


def check_no_secret(d, *secrets):
    text = d.read_log()
    for s in list(secrets) + ["Signature=", "X-Amz-Credential"]:
        check(s not in text, "the daemon log of %s contains %r" % (d.log_path, s[:6] + "..."))


def proxy_summary(p):
    from collections import Counter
    c = Counter((r.kind, r.status) for r in p.select())
    return ", ".join("%s %s: %d" % (k, s, n) for (k, s), n in sorted(c.items(), key=str))


# --------------------------------------------------------------------------
# 1. save -> flush -> wipe -> restore from the store


def case_roundtrip(ctx):
    store = ctx.store
    bucket, prefix = "remote-roundtrip", "ckpt/cluster-a"
    job, step, world = "llama-7b.run_3", 4200, 4
    store.s3.create_bucket(bucket)
    layouts = {r: [("empty", 0), ("one", 1), ("odd", 4096 * 3 + 17 + r),
                   ("few-mib", 3 * MiB + 12345 * r + 1),
                   # a name with the characters the signer must percent-encode
                   ("opt:state+v=1@x", 777 + r)] for r in range(world)}
    layouts[0].append(("big", 11 * MiB + 7))  # 3 parts of 5M, the last one odd

    # keys from a credentials file (the profile, not [default]), the rest
    # from the config file: what a restarted daemon gets back unchanged
    creds = os.path.join(ctx.tmp, "aws-credentials")
    with open(creds, "w") as f:
        f.write("[default]\naws_access_key_id = NOTTHISONE0000000000\n"
                "aws_secret_access_key = wrongwrongwrongwrongwrongwrong\n\n"
                "[ckpt-test]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
                % (store.access_key, store.secret_key))
    os.chmod(creds, 0o600)
    conf = os.path.join(ctx.tmp, "roundtrip.conf")
    with open(conf, "w") as f:
        f.write("[remote]\nendpoint = %s\nregion = %s\nbucket = %s\nprefix = %s\n"
                "addressing = path\ncredentials_file = %s\nprofile = ckpt-test\n"
                "part_size = 5M\n\n[cluster]\nnode_index = 0\nnode_count = 1\n"
                % (store.endpoint, store.region, bucket, prefix, creds))
    os.chmod(conf, 0o600)

    d = ctx.daemon("rt", bucket, conf=conf, creds=None).start()
    save_ranks(d, job, step, world, layouts)
    wait_remote(d, job, step)
    verify_ranks(d, job, step, layouts)

    check_bucket_holds(store, bucket, prefix, job, step, layouts)
    stray = [k for k in store.objects(bucket) if not k.startswith(prefix + "/jobs/" + job + "/")]
    check(not stray, "objects outside %s/jobs/%s/: %s" % (prefix, job, stray[:10]))
    check_objects_match_local(store, bucket, prefix, job, step, layouts, d.state_dir)
    check(store.s3.list_multipart_uploads(bucket) == [],
          "multipart uploads left open: %s" % store.s3.list_multipart_uploads(bucket))

    total = sum(size for spec in layouts.values() for _, size in spec)
    up = find_values(ctl_json(d, "status"), "bytes_uploaded")
    check(up and up[0] >= total, "ckptctl --json status: bytes_uploaded %s, the step has %d"
          % (up, total))
    text = d.ctl("status").stdout
    check(bucket in text and store.endpoint in text,
          "ckptctl status does not name the endpoint and bucket:\n" + text)
    lst = d.ctl("list", job).stdout
    check(any(str(step) in line and "remote" in line for line in lst.splitlines()),
          "ckptctl list %s does not show step %d as remote:\n%s" % (job, step, lst))
    check_no_secret(d, store.secret_key)

    # the disk dies; a fresh daemon with the same config restores on demand
    wipe(d)
    d = ctx.daemon("rt", bucket, conf=conf, creds=None, state_dir=d.state_dir).start()
    got = latest(d, job)
    check(got == [str(step), str(world)], "latest after wipe is %s, want %d %d"
          % (got, step, world))
    # a ranged read across 1 MiB blocks triggers the fetch of rank 3
    d.rank("read", "--job", job, "--step", step, "--rank", 3, "--shard", "few-mib",
           "--offset", MiB - 1, "--length", 2 * MiB + 3)
    verify_ranks(d, job, step, layouts)
    d.rank("verify", "--job", job, "--step", step, "--rank", 0, "--shards",
           shards_arg(layouts[0]), "--piece", 3 * MiB + 7)
    down = find_values(ctl_json(d, "status"), "bytes_downloaded")
    check(down and down[0] >= total, "ckptctl --json status: bytes_downloaded %s after "
          "restoring %d bytes" % (down, total))
    check(d.catalog_integrity() == "ok", "catalog integrity check failed")

    # and `ckptctl restore` pulls the whole step into the local tier
    wipe(d)
    d = ctx.daemon("rt", bucket, conf=conf, creds=None, state_dir=d.state_dir).start()
    p = d.ctl("restore", job)
    log("  ckptctl restore: " + p.stdout.strip().replace("\n", " | ")[:300])
    check(str(step) in p.stdout, "ckptctl restore %s does not say it fetched step %d: %r"
          % (job, step, p.stdout))
    for r, spec in layouts.items():
        for name, size in spec:
            path = os.path.join(step_path(d.state_dir, job, step), "rank-%d" % r, name)
            check(os.path.isfile(path), "after ckptctl restore %s is missing" % path)
            check(os.path.getsize(path) == size, "%s has %d bytes, want %d"
                  % (path, os.path.getsize(path), size))
    check_objects_match_local(store, bucket, prefix, job, step, layouts, d.state_dir)
    check(latest(d, job) == [str(step), str(world)], "latest after ckptctl restore")
    verify_ranks(d, job, step, {2: layouts[2]})
    check_no_secret(d, store.secret_key)
    stop(d)


# --------------------------------------------------------------------------
# 2. multipart for a big shard, one PUT per small shard


def case_multipart(ctx):
    store = ctx.store
    bucket, job, step, world = "remote-multipart", "multipart-job", 7, 2
    store.s3.create_bucket(bucket)
    sizes = [(i * 97) % 5000 for i in range(300)]  # 0..4999 bytes, including 0
    small = [("s%03d" % i, sizes[i]) for i in range(300)]
    layouts = {0: [("big", 256 * MiB)] + small[:150], 1: small[150:]}
    proxy = ctx.proxy()
    d = ctx.daemon("mp", bucket, endpoint=proxy.endpoint, pool="512M", slot="32M",
                   flags=["--remote-part-size=32M"]).start()
    t0 = time.monotonic()
    save_ranks(d, job, step, world, layouts)
    wait_remote(d, job, step, 400)
    log("  %d MiB flushed in %.1f s; proxy: %s"
        % (256 + sum(sizes) // MiB, time.monotonic() - t0, proxy_summary(proxy)))

    sp = step_prefix("", job, step)
    big = sp + "ranks/0/big"
    parts = proxy.select("UploadPart", big, ok=True)
    numbers = sorted(r.part for r in parts)
    check(len(parts) >= 8, "big shard: %d UploadParts got a 2xx, want >= 8" % len(parts))
    check(numbers == list(range(1, 9)),
          "big shard: parts with a 2xx are %s, want 1..8 once each" % numbers)
    check(all(r.length == 32 * MiB for r in parts),
          "part sizes %s, want 32 MiB each" % sorted(r.length for r in parts))
    check(len(proxy.select("CreateMultipartUpload", big)) == 1,
          "big shard: %d CreateMultipartUploads" % len(proxy.select("CreateMultipartUpload", big)))
    check(len(proxy.select("CompleteMultipartUpload", big, ok=True)) == 1,
          "big shard: multipart upload not completed once")
    check(not proxy.select("PutObject", big), "the big shard was also sent as a single PUT")
    for r, spec in layouts.items():
        for name, _ in spec:
            if name == "big":
                continue
            key = sp + "ranks/%d/%s" % (r, name)
            puts = proxy.select("PutObject", key)
            check(len(puts) == 1 and puts[0].ok,
                  "small shard %s: %d PUTs (%s), want exactly one with a 2xx"
                  % (key, len(puts), puts))
            check(not proxy.select("UploadPart", key) and
                  not proxy.select("CreateMultipartUpload", key),
                  "small shard %s went multipart" % key)
    bodies = proxy.select("PutObject") + proxy.select("UploadPart")
    no_md5 = [r for r in bodies if not r.content_md5]
    check(not no_md5, "%d of %d uploads without Content-MD5, e.g. %s"
          % (len(no_md5), len(bodies), no_md5[:3]))
    check_bucket_holds(store, bucket, "", job, step, layouts)

    wipe(d)
    d = ctx.daemon("mp", bucket, endpoint=proxy.endpoint, pool="512M", slot="32M",
                   flags=["--remote-part-size=32M"], state_dir=d.state_dir).start()
    mark = proxy.mark()
    t0 = time.monotonic()
    verify_ranks(d, job, step, layouts)
    log("  restored and verified in %.1f s (%d GETs of the big shard)"
        % (time.monotonic() - t0, len(proxy.select("GetObject", big, since=mark))))
    stop(d)


# --------------------------------------------------------------------------
# 3. permanent errors: wrong secret, missing bucket


def wait_remote_error(d, what):
    return wait_until(lambda: remote_error(d), timeout=90, interval=0.5,
                      what=lambda: "a remote_error in ckptctl --json status (%s); status:\n%s"
                      "\n--- daemon log ---\n%s" % (what, d.ctl("status").stdout,
                                                    d.read_log()[-3000:]))


def check_local_still_works(d, job, step, layouts):
    save_ranks(d, job, step, len(layouts), layouts)
    got = latest(d, job)
    check(got == [str(step), str(len(layouts))],
          "with the store failing, latest is %s, want step %d" % (got, step))
    verify_ranks(d, job, step, layouts)


def case_permanent_errors(ctx):
    store = ctx.store
    layouts = {0: [("w", 100000), ("e", 0)], 1: [("w", 3 * MiB + 1)]}

    # wrong secret: 403 SignatureDoesNotMatch, reported, not retried
    bucket, job = "remote-denied", "denied-job"
    store.s3.create_bucket(bucket)
    proxy = ctx.proxy()
    wrong = store.secret_key[::-1] + "Z"
    d = ctx.daemon("denied", bucket, endpoint=proxy.endpoint, secret=wrong).start()
    save_ranks(d, job, 1, 2, layouts)
    err = wait_remote_error(d, "wrong secret")
    text = d.ctl("status").stdout
    log("  wrong secret: remote_error %r" % err)
    low = (text + "\n" + str(err)).lower()
    check(any(s in low for s in ("403", "signaturedoesnotmatch", "access denied",
                                 "accessdenied")),
          "the error does not say 403 / SignatureDoesNotMatch / access denied:\n%s\n%r"
          % (text, err))
    check(any(line.lstrip().lower().startswith("remote") and "error" in line.lower()
              for line in text.splitlines()) or "remote" in low and "error:" in low,
          "ckptctl status has no 'remote: ... error: ...':\n" + text)
    show = d.ctl("show", job, 1).stdout
    check("failed" in show.lower(), "ckptctl show %s 1 does not say failed:\n%s" % (job, show))
    seen = len(proxy.select())
    mark = proxy.mark()
    time.sleep(5)
    storm = proxy.select(since=mark)
    log("  %d requests before the error showed, %d in the 5 s after" % (seen, len(storm)))
    check(len(storm) < 10, "%d requests in the 5 s after the error (a retry storm): %s"
          % (len(storm), storm[:12]))
    t0 = time.monotonic()
    p = d.rank("wait", "--job", job, "--step", 1, "--tier", "remote", "--timeout", 3000,
               check_rc=False, timeout=60)
    check(p.returncode != 0, "wait --tier remote succeeded for a step the store refused")
    log("  wait --tier remote on the failed step: rc %d after %.1f s: %s"
        % (p.returncode, time.monotonic() - t0, p.stderr.strip()))
    check_local_still_works(d, job, 2, layouts)
    check(store.objects(bucket) == {}, "objects were written with a wrong secret: %s"
          % store.objects(bucket))
    check_no_secret(d, store.secret_key, wrong)
    stop(d)

    # a bucket that does not exist
    missing, job = "ckptd-no-such-bucket", "nobucket-job"
    proxy = ctx.proxy()
    d = ctx.daemon("nobucket", missing, endpoint=proxy.endpoint).start()
    save_ranks(d, job, 1, 2, layouts)
    err = wait_remote_error(d, "missing bucket")
    text = d.ctl("status").stdout
    log("  missing bucket: remote_error %r" % err)
    both = text + "\n" + str(err)
    check(missing in both, "the error does not name the bucket %s:\n%s\n%r" % (missing, text, err))
    check("NoSuchBucket" in both or "does not exist" in both.lower(),
          "the error says neither NoSuchBucket nor 'does not exist':\n%s\n%r" % (text, err))
    mark = proxy.mark()
    time.sleep(5)
    storm = proxy.select(since=mark)
    check(len(storm) < 10, "%d requests in the 5 s after the error (a retry storm): %s"
          % (len(storm), storm[:12]))
    check_local_still_works(d, job, 2, layouts)
    check(missing not in store.s3.list_buckets(), "the daemon created bucket %s" % missing)
    # the operator fixes the cause and tells the daemon: the failed steps go up
    store.s3.create_bucket(missing)
    d.proc.send_signal(signal.SIGHUP)
    wait_remote(d, job, 1, 120)
    wait_remote(d, job, 2, 120)
    check(remote_error(d) is None, "after the fix and SIGHUP, status still shows %r"
          % remote_error(d))
    check_bucket_holds(store, missing, "", job, 2, layouts)
    stop(d)


# --------------------------------------------------------------------------
# 4. SIGKILL in the middle of a multipart upload, then resume


def case_kill_resume(ctx):
    store = ctx.store
    bucket, job, step = "remote-resume", "resume-job", 11
    nparts = 12
    store.s3.create_bucket(bucket)
    layouts = {0: [("big", nparts * 8 * MiB), ("small", 1000)]}
    proxy = ctx.proxy()
    proxy.body_rate = 12 * MiB  # ~8 s for the whole shard
    flags = ["--remote-part-size=8M", "--remote-concurrency=2"]
    d = ctx.daemon("kill", bucket, endpoint=proxy.endpoint, flags=flags).start()
    save_ranks(d, job, step, 1, layouts)
    big = step_prefix("", job, step) + "ranks/0/big"

    def parts_ok():
        return proxy.select("UploadPart", big, ok=True)
    wait_until(lambda: len(parts_ok()) >= 2, timeout=120, interval=0.01,
               what=lambda: "2 parts uploaded; proxy: %s\n--- daemon log ---\n%s"
               % (proxy_summary(proxy), d.read_log()[-3000:]))
    d.kill(signal.SIGKILL)
    time.sleep(0.5)  # answers already on their way are counted
    before = sorted(r.part for r in parts_ok())
    log("  killed ckptd with parts %s of %d stored" % (before, nparts))
    check(len(before) < nparts, "the upload finished before the kill (test timing)")
    check(not proxy.select("CompleteMultipartUpload", big),
          "the upload was completed before the kill (test timing)")
    proxy.body_rate = 0

    mark = proxy.mark()
    d = ctx.daemon("kill", bucket, endpoint=proxy.endpoint, flags=flags,
                   state_dir=d.state_dir).start()
    wait_remote(d, job, step, 180)
    log("  proxy: %s" % proxy_summary(proxy))

    ok = parts_ok()
    per_part = {}
    for r in ok:
        per_part.setdefault(r.part, []).append(r)
    twice = {n: len(rs) for n, rs in per_part.items() if len(rs) > 1}
    check(not twice, "parts stored more than once (part: times): %s" % twice)
    check(sorted(per_part) == list(range(1, nparts + 1)),
          "parts stored: %s, want 1..%d" % (sorted(per_part), nparts))
    resent = [r for r in proxy.select("UploadPart", big, since=mark) if r.part in before]
    check(not resent, "after the restart, parts stored before the kill were sent again: %s"
          % resent)
    check(len(proxy.select("CreateMultipartUpload", big, ok=True)) == 1,
          "the upload was started over instead of resumed: %s"
          % proxy.select("CreateMultipartUpload", big))
    check(proxy.select("ListParts", big, since=mark),
          "the restarted daemon did not ask the store which parts it has (ListParts)")
    check(len(proxy.select("CompleteMultipartUpload", big, ok=True)) == 1,
          "CompleteMultipartUpload did not succeed exactly once")
    check(store.s3.list_multipart_uploads(bucket) == [],
          "multipart uploads left open: %s" % store.s3.list_multipart_uploads(bucket))

    verify_ranks(d, job, step, layouts)  # the local copy is the generator's bytes
    check_bucket_holds(store, bucket, "", job, step, layouts)
    check_objects_match_local(store, bucket, "", job, step, layouts, d.state_dir)
    stop(d)


# --------------------------------------------------------------------------
# 5. resets, 5xx answers and stalls


class Faults:
    """A fault schedule for the daemon's requests, by request number, with
    a budget so that it ends: resets before the gateway sees anything, 500
    and 503 answers, two uploads cut half-way through the body, one upload
    stalled for good (the daemon's low-speed timeout must notice), a few
    delayed requests, and GET responses cut after 256 KiB; and fixed faults
    for the first request of some kinds, such as a lost answer to
    CompleteMultipartUpload and to the COMMIT PUT (the gateway acted, the
    daemon's retry sees NoSuchUpload / 412: docs/object-store.md says the
    daemon must recognise its own success)."""

    def __init__(self, budget=40, stalls=1, body_resets=2, response_resets=3, targeted=None):
        self.left = budget
        self.stalls = stalls
        self.body_resets = body_resets
        self.response_resets = response_resets
        # the first request of a kind ("COMMIT" and "manifest" are PUTs of
        # those objects) gets this fault
        self.targeted = dict(targeted or {})
        self.hit = []
        self.slowed = False

    @staticmethod
    def what(req):
        if req.kind == "PutObject" and req.key and req.key.endswith("/COMMIT"):
            return "COMMIT"
        if req.kind == "PutObject" and req.key and req.key.endswith(".manifest"):
            return "manifest"
        return req.kind

    def __call__(self, req):
        target = self.targeted.pop(self.what(req), None)
        if target:
            self.hit.append((self.what(req), target, req.key))
            return target
        if self.left <= 0:
            return "forward"
        n = req.n
        fault = "forward"
        if self.stalls and req.method == "PUT" and req.length >= MiB and n >= 4:
            self.stalls -= 1
            fault = "stall"
        elif n % 9 == 4:
            fault = "reset"
        elif n % 9 == 7:
            fault = "error500"
        elif n % 13 == 5 or (not self.slowed and n >= 6):
            # by number, and at least once whatever order the requests
            # came in (under ASan the stall took the one numbered slot)
            self.slowed = True
            fault = "slowdown"
        elif req.length >= MiB and self.body_resets:
            self.body_resets -= 1
            fault = "body-reset"
        elif req.kind == "GetObject" and "/ranks/" in req.key and self.response_resets:
            self.response_resets -= 1
            fault = "response-reset"
        elif n % 17 == 0:
            fault = "delay"
        if fault != "forward":
            self.left -= 1
        return fault

    def fault_unused(self, req, fault):
        # the answer was too small to cut: cut a later one
        if fault == "response-reset":
            self.response_resets += 1
            self.left += 1


def case_faults(ctx):
    store = ctx.store
    bucket, job, step, world = "remote-faults", "faulty-net", 500, 2
    store.s3.create_bucket(bucket)
    layouts = {0: [("big", 12 * MiB + 3), ("mid1", MiB + MiB // 2), ("mid2", 2 * MiB + 1),
                   ("small", 100), ("empty", 0)],
               1: [("big", 11 * MiB), ("mid", MiB + 5), ("tiny", 1)]}
    targeted = {"CreateMultipartUpload": "reset", "CompleteMultipartUpload": "answer-lost",
                "manifest": "error500", "COMMIT": "answer-lost"}
    faults = Faults(targeted=targeted)
    proxy = ctx.proxy(policy=faults)
    proxy.delay_s = 2.0
    flags = ["--remote-part-size=5M", "--remote-retry-attempts=10"]
    d = ctx.daemon("faults", bucket, endpoint=proxy.endpoint, flags=flags).start()
    t0 = time.monotonic()
    save_ranks(d, job, step, world, layouts)
    wait_remote(d, job, step, 400)
    log("  flushed through faults in %.1f s; injected %s" % (time.monotonic() - t0,
                                                             dict(proxy.counts)))
    for fault in ("reset", "error500", "slowdown", "body-reset", "stall"):
        check(proxy.counts[fault] >= 1, "the proxy never injected a %s" % fault)
    check(not faults.targeted, "never injected the faults for %s" % faults.targeted)
    check(proxy.counts["answer-lost"] == 2, "answers lost: %d, want 2 (%s)"
          % (proxy.counts["answer-lost"], faults.hit))
    check(not proxy.errors, "proxy errors: %s" % proxy.errors)

    have = check_bucket_holds(store, bucket, "", job, step, layouts)
    check(store.s3.list_multipart_uploads(bucket) == [],
          "multipart uploads left open: %s" % store.s3.list_multipart_uploads(bucket))
    # nothing the store acknowledged to the daemon was stored again (where
    # an answer was lost, the retry may succeed again: the daemon could not
    # know; it must not do so twice)
    def once(kind, key):
        ok = proxy.select(kind, key, ok=True)
        told = [r for r in ok if r.fault != "answer-lost"]
        if any(r.fault == "answer-lost" for r in ok):
            return len(told) <= 1
        return len(ok) == 1

    for key in have:
        if proxy.select("CreateMultipartUpload", key):
            per_part = {}
            for r in proxy.select("UploadPart", key, ok=True):
                per_part[r.part] = per_part.get(r.part, 0) + 1
            check(all(v == 1 for v in per_part.values()),
                  "%s: parts stored more than once: %s" % (key, per_part))
            check(once("CompleteMultipartUpload", key), "%s completed more than once: %s"
                  % (key, proxy.select("CompleteMultipartUpload", key)))
        else:
            check(once("PutObject", key), "%s was stored more than once: %s"
                  % (key, proxy.select("PutObject", key)))
    check_objects_match_local(store, bucket, "", job, step, layouts, d.state_dir)

    # restore after a wipe, through a fresh set of faults
    wipe(d)
    proxy.policy = Faults(budget=20, stalls=0, body_resets=0, response_resets=3)
    before = dict(proxy.counts)
    d = ctx.daemon("faults", bucket, endpoint=proxy.endpoint, flags=flags,
                   state_dir=d.state_dir).start()
    check(latest(d, job) == [str(step), str(world)], "latest after wipe")
    verify_ranks(d, job, step, layouts)
    injected = {k: v - before.get(k, 0) for k, v in proxy.counts.items() if v != before.get(k, 0)}
    log("  restored through faults: %s" % injected)
    check(injected.get("response-reset", 0) >= 1,
          "no GET response was cut during the restore (test did not test it)")
    stop(d)


# --------------------------------------------------------------------------
# 6. two nodes, one COMMIT


def case_two_nodes(ctx):
    store = ctx.store
    bucket, job, step, world = "remote-cluster", "dist-job", 300, 4
    store.s3.create_bucket(bucket)
    layouts = {r: [("model", 2 * MiB + 1000 * r), ("opt", 4096 + r), ("e", 0)]
               for r in range(world)}
    p0, p1 = ctx.proxy(), ctx.proxy()
    # two nodes of one cluster (they agree on commits over the peer port)
    cl = loopback_cluster(ctx.tmp, 2)
    d0 = ctx.daemon("node0", bucket, endpoint=p0.endpoint, node=(0, 2), cluster=cl).start()
    d1 = ctx.daemon("node1", bucket, endpoint=p1.endpoint, node=(1, 2), cluster=cl).start()
    sp = step_prefix("", job, step)

    # node 0's ranks saved, node 1's not.  With the cluster-wide commit
    # (issue 10) node 0 cannot commit the step alone any more (it used to,
    # and flushed its manifest): its commit times out naming node 1's ranks,
    # and the step is committed nowhere, in the store neither
    save_ranks(d0, job, step, world, {0: layouts[0], 1: layouts[1]}, commit=False)
    p = d0.rank("commit", "--job", job, "--step", step, "--timeout", 2000, check_rc=False,
                timeout=60)
    check(p.returncode == 1 and "ETIMEDOUT" in p.stderr and "2-3" in p.stderr,
          "node 0's commit with ranks 2-3 unsaved: exit %d, expected ETIMEDOUT naming them: %s"
          % (p.returncode, p.stderr.strip()))
    t_end = time.monotonic() + 4
    p = d0.rank("wait", "--job", job, "--step", step, "--tier", "remote", "--timeout", 2000,
                check_rc=False, timeout=60)
    check(p.returncode != 0, "node 0 reports tier remote with node 1's ranks missing")
    while time.monotonic() < t_end:
        check(not store.exists(bucket, sp + "COMMIT"),
              "COMMIT exists while only node 0's manifest does")
        time.sleep(0.2)
    check(not store.exists(bucket, sp + "nodes/1.manifest"), "node 1 wrote a manifest unasked")

    # node 1's ranks saved, the step committed (from node 1), flushed by both
    save_ranks(d1, job, step, world, {2: layouts[2], 3: layouts[3]})
    wait_remote(d1, job, step, 180)
    wait_remote(d0, job, step, 180)
    log("  node 0 proxy: %s" % proxy_summary(p0))
    log("  node 1 proxy: %s" % proxy_summary(p1))

    commit = sp + "COMMIT"
    n0 = len(p0.select("PutObject", commit, ok=True))
    n1 = len(p1.select("PutObject", commit, ok=True))
    check(n0 + n1 == 1, "COMMIT was stored %d times (node 0 %d, node 1 %d)" % (n0 + n1, n0, n1))
    check(n0 == 1, "COMMIT was not written by node 0, the coordinator")
    inm = [r.if_none_match for r in p0.select("PutObject", commit)]
    check(all(v == "*" for v in inm), "COMMIT PUTs without If-None-Match: * (%s)" % inm)
    for node, px, ranks in ((0, p0, (0, 1)), (1, p1, (2, 3))):
        up = {r.key for r in px.select("PutObject", ok=True) if "/ranks/" in r.key}
        want = {sp + "ranks/%d/%s" % (r, n) for r in ranks for n, _ in layouts[r]}
        check(up == want, "node %d uploaded shard objects %s, want those of ranks %s"
              % (node, sorted(up - want) or sorted(want - up), ranks))
    check_bucket_holds(store, bucket, "", job, step, layouts, nodes=(0, 1))

    # a single node (another cluster size) restores all four ranks
    d = ctx.daemon("single", bucket, node=(0, 1)).start()
    check(latest(d, job) == [str(step), str(world)], "latest on a 1-node restore")
    verify_ranks(d, job, step, layouts)
    stop(d, d0, d1)


# --------------------------------------------------------------------------


# --------------------------------------------------------------------------
# 7. retention in the store: keep k committed steps plus pinned ones


def case_retention(ctx):
    store = ctx.store
    bucket, job = "remote-retention", "kept-job"
    store.s3.create_bucket(bucket)
    d = ctx.daemon("keeper", bucket, flags=["--remote-keep=2", "--local-keep=5"]).start()
    layouts = {0: [("w", 3 * MiB + 7), ("b", 100)]}
    steps_dir = "jobs/%s/steps/" % job

    def steps_in_store():
        return sorted({int(k[len(steps_dir):].split("/")[0])
                       for k in store.objects(bucket, steps_dir)})

    save_ranks(d, job, 1, 1, layouts)
    wait_remote(d, job, 1)
    d.ctl("pin", job, 1)
    for step in (2, 3, 4, 5):
        save_ranks(d, job, step, 1, layouts)
        wait_remote(d, job, step)
    # keep 2: steps 4 and 5, and the pinned 1; 2 and 3 go (asynchronously),
    # every object of theirs
    wait_until(lambda: steps_in_store() == [1, 4, 5], timeout=60,
               what=lambda: "the store to hold steps [1, 4, 5] (holds %s)" % steps_in_store())
    for step in (1, 4, 5):
        check_bucket_holds(store, bucket, "", job, step, layouts)
    # unpinned, step 1 goes at the next retention pass (the next step)
    d.ctl("unpin", job, 1)
    save_ranks(d, job, 6, 1, layouts)
    wait_remote(d, job, 6)
    wait_until(lambda: steps_in_store() == [5, 6], timeout=60,
               what=lambda: "the store to hold steps [5, 6] (holds %s)" % steps_in_store())
    # the newest is always restorable from the store alone
    wipe(d)
    d2 = ctx.daemon("keeper2", bucket, state_dir=d.state_dir).start()
    check(latest(d2, job)[0] == "6", "latest after a wipe: %s" % latest(d2, job))
    verify_ranks(d2, job, 6, layouts)


# --------------------------------------------------------------------------
# 10. retention in the store with keep_every (a step window), and what
#     ckptctl retention --dry-run says of the store's steps


def case_retention_every(ctx):
    store = ctx.store
    bucket, job = "remote-every", "every-job"
    store.s3.create_bucket(bucket)
    d = ctx.daemon("every", bucket, flags=["--remote-keep-latest=1", "--remote-keep-every=10",
                                           "--local-keep-latest=100"]).start()
    layouts = {0: [("w", 1 * MiB + 3), ("b", 64)]}
    steps_dir = "jobs/%s/steps/" % job

    def steps_in_store():
        return sorted({int(k[len(steps_dir):].split("/")[0])
                       for k in store.objects(bucket, steps_dir)})

    for step in (5, 12, 15, 21, 27):
        save_ranks(d, job, step, 1, layouts)
        wait_remote(d, job, step)
    # newest 1: 27; the first of each window of 10: 5, 12, 21; 15 goes
    wait_until(lambda: steps_in_store() == [5, 12, 21, 27], timeout=60,
               what=lambda: "the store to hold [5, 12, 21, 27] (holds %s)" % steps_in_store())
    for step in (5, 12, 21, 27):
        check_bucket_holds(store, bucket, "", job, step, layouts)
    r = ctl_json(d, "retention", job, "--dry-run")
    rows = {e["step"]: (e["action"], e["reason"]) for e in r["steps"] if e["tier"] == "store"}
    want = {27: ("kept", "kept: newest 1"),
            21: ("kept", "kept: every 10 steps (window 20-29)"),
            15: ("goes", "goes: older than the newest 1 and not the first of its window "
                         "(every 10)"),
            12: ("kept", "kept: every 10 steps (window 10-19)"),
            5: ("kept", "kept: every 10 steps (window 0-9)")}
    check(rows == want, "store rows of the dry run: %s, want %s" % (rows, want))
    # the local tier kept everything (keep_latest 100)
    local = sorted(e["step"] for e in r["steps"] if e["tier"] == "local" and e["action"] == "kept")
    check(local == [5, 12, 15, 21, 27], "local rows: %s" % local)

    # ckptctl delete on node 0: the local copy and the store's objects go
    tombstones = os.path.join(d.state_dir, "deleting")
    d.ctl("delete", job, 12)
    wait_until(lambda: steps_in_store() == [5, 21, 27], timeout=60,
               what=lambda: "the store to hold [5, 21, 27] (holds %s)" % steps_in_store())
    wait_until(lambda: os.listdir(tombstones) == [], timeout=10,
               what=lambda: "the tombstones to go (%s)" % os.listdir(tombstones))
    check("store: job %s step 12 deleted" % job in d.read_log(), "no log line for the store")
    for step in (5, 21, 27):
        check_bucket_holds(store, bucket, "", job, step, layouts)
    # killed right after a delete's reply: the next start finishes it
    d.ctl("delete", job, 21)
    d.kill(signal.SIGKILL)
    d = ctx.daemon("every", bucket, state_dir=d.state_dir,
                   flags=["--remote-keep-latest=1", "--remote-keep-every=10",
                          "--local-keep-latest=100"]).start()
    wait_until(lambda: steps_in_store() == [5, 27], timeout=60,
               what=lambda: "the store to hold [5, 27] (holds %s)" % steps_in_store())
    wait_until(lambda: os.listdir(tombstones) == [], timeout=10,
               what=lambda: "the tombstones to go (%s)" % os.listdir(tombstones))
    got = sorted(c["step"] for c in ctl_json(d, "list", job))
    check(got == [5, 15, 27], "local steps after the restart: %s" % got)
    log("  the restart %s an interrupted delete" %
        ("finished" if "finishing a delete a restart interrupted" in d.read_log() else
         "found no"))
    verify_ranks(d, job, 27, layouts)
    stop(d)


# --------------------------------------------------------------------------
# 8. a restore from the store writes the rank with all its shard files
#    open: they count against the uid's [daemon] open_files_per_uid


def case_open_files(ctx):
    if os.geteuid() != 0:
        log("   skipped: needs root to run the client as uid 65534 (setpriv)")
        return
    store = ctx.store
    bucket, job = "remote-open-files", "files.job"
    store.s3.create_bucket(bucket)
    for path in (os.path.dirname(ctx.tmp), ctx.tmp):
        os.chmod(path, 0o755)
    layout = [("s%02d" % i, 1000 + i) for i in range(40)]
    flags = ["--socket-mode=0666"]

    d = ctx.daemon("files", bucket, flags=flags + ["--open-files-per-uid=64"]).start()
    d.rank("save", "--job", job, "--step", 1, "--rank", 0, "--world", 1,
           "--shards", shards_arg(layout), "--commit", user=65534)
    wait_remote(d, job, 1)
    wipe(d)

    # 40 shards and the rank's 3 directories do not fit 32
    d = ctx.daemon("files", bucket, flags=flags + ["--open-files-per-uid=32"],
                   state_dir=d.state_dir).start()
    p = d.rank("verify", "--job", job, "--step", 1, "--rank", 0, "--shards", shards_arg(layout),
               user=65534, check_rc=False)
    out = p.stdout + p.stderr
    log("  restore within a budget of 32: " + out.strip().replace("\n", " | ")[:300])
    check(p.returncode != 0, "uid 65534 restored 40 shards from the store within a budget of "
          "32 open files")
    for part in ("43 open files", "open_files_per_uid", "uid 65534"):
        check(part in out, "the refused restore does not say %r: %s" % (part, out))
    rank_dir = os.path.join(step_path(d.state_dir, job, 1), "rank-0")
    check(not os.path.exists(rank_dir), "the refused restore left %s" % rank_dir)
    tmps = [n for n in os.listdir(step_path(d.state_dir, job, 1)) if n.endswith(".tmp")] \
        if os.path.isdir(step_path(d.state_dir, job, 1)) else []
    check(not tmps, "the refused restore left %s" % tmps)
    stop(d)

    # within the budget it restores, and the budget is whole again after
    d = ctx.daemon("files", bucket, flags=flags + ["--open-files-per-uid=64"],
                   state_dir=d.state_dir).start()
    d.rank("verify", "--job", job, "--step", 1, "--rank", 0, "--shards", shards_arg(layout),
           user=65534)
    d.rank("save", "--job", job, "--step", 2, "--rank", 0, "--world", 1,
           "--shards", shards_arg([("n%02d" % i, 10) for i in range(61)]), "--commit",
           user=65534)
    # flushed before the stop: a stop in the middle of a flush is case 4's
    wait_remote(d, job, 2)
    stop(d)


# --------------------------------------------------------------------------
# 9. SIGTERM in the middle of a flush


def case_stop_mid_flush(ctx):
    """A SIGTERM while a flush has requests at every stage (on the wire,
    hashed, waiting for their Content-MD5): the daemon cancels them, exits
    0 with nothing for the sanitizers to report, and the next start
    finishes the flush from what the catalog recorded.

    Once a heap-use-after-free that only ASan sees: the daemon freed its
    worker pool before the flusher, and cancelling the flusher's requests
    made the S3 client hand the next body waiting for its hash to the freed
    pool.  To be sure bodies wait at the stop: 40 shards of 8 MiB, each one
    PutObject (no CreateMultipartUpload first), are all handed to the S3
    client at the commit (budget 2 * concurrency = 64), one worker thread
    hashes them one at a time (~40 * 15 ms), and the stop comes right
    after the commit returns."""
    store = ctx.store
    bucket, job, step = "remote-stop", "stop-job", 3
    store.s3.create_bucket(bucket)
    layouts = {r: [("s%02d" % i, 8 * MiB) for i in range(20)] for r in (0, 1)}
    proxy = ctx.proxy()
    proxy.body_rate = 4 * MiB  # nothing much lands before the stop
    flags = ["--remote-part-size=8M", "--remote-concurrency=32", "--workers=1"]
    d = ctx.daemon("stop", bucket, endpoint=proxy.endpoint, flags=flags).start()
    save_ranks(d, job, step, 2, layouts, commit=False)
    d.rank("commit", "--job", job, "--step", step)
    rc = d.stop()
    text = d.read_log()
    puts = len(proxy.select("PutObject", ok=True))
    log("  stopped with %d of 40 shards in the store" % puts)
    check("objects to upload" in text,
          "the flush of step %d had not started at the stop:\n%s" % (step, text[-3000:]))
    check(puts < 40 and "is in the object store" not in text,
          "the flush finished before the stop (test timing):\n%s" % text[-3000:])
    check_log_clean(d)
    check(rc == 0, "ckptd exited %s on SIGTERM in the middle of a flush:\n%s"
          % (rc, text[-3000:]))
    sp = step_prefix("", job, step)
    check(not store.exists(bucket, sp + "COMMIT"), "COMMIT written before the stop")

    proxy.body_rate = 0
    d = ctx.daemon("stop", bucket, endpoint=proxy.endpoint, flags=flags,
                   state_dir=d.state_dir).start()
    wait_remote(d, job, step, 180)
    check_bucket_holds(store, bucket, "", job, step, layouts)
    check_objects_match_local(store, bucket, "", job, step, layouts, d.state_dir)
    stop(d)
    check_log_clean(d)

CASES = [
    (1, "save, flush, wipe, restore from the store", case_roundtrip),
    (2, "multipart big shard and 300 small shards", case_multipart),
    (3, "wrong secret and missing bucket", case_permanent_errors),
    (4, "SIGKILL in the middle of a multipart upload", case_kill_resume),
    (5, "resets, 5xx and stalls", case_faults),
    (6, "two nodes, one COMMIT", case_two_nodes),
    (7, "retention: keep k plus pinned", case_retention),
    (8, "a restore from the store within the uid's open files", case_open_files),
    (9, "SIGTERM in the middle of a flush", case_stop_mid_flush),
    (10, "retention: keep_every in the store, dry run, delete", case_retention_every),
]


def main():
    for exe in (os.environ.get("CKPTD", "build/daemon/ckptd"),
                os.environ.get("CKPT_TESTRANK", "build/tests/ckpt-testrank")):
        if not os.access(exe, os.X_OK):
            log("FAIL: %s is not an executable" % exe)
            return 1
    missing = ceph_missing()
    if missing:
        log("SKIP: %s not installed (tests/s3/radosgw.sh install)" % ", ".join(missing))
        return SKIP
    wanted = os.environ.get("CKPT_REMOTE_CASES")
    wanted = {int(x) for x in wanted.split(",")} if wanted else None

    tmp = tempfile.mkdtemp(prefix="ckptd-remote-")
    rgw_dir = os.path.join(tmp, "rgw")
    failures = []
    rc = 1
    try:
        t0 = time.monotonic()
        r = subprocess.run([RADOSGW_SH, "start", rgw_dir], stdout=subprocess.PIPE, text=True,
                           timeout=300)
        if r.returncode == 1:
            # the bootstrap (not what this file tests) sometimes loses a mon
            # command on a loaded machine; one more try, said out loud
            log("radosgw.sh start failed once; starting it again")
            r = subprocess.run([RADOSGW_SH, "start", rgw_dir], stdout=subprocess.PIPE,
                               text=True, timeout=300)
        if r.returncode == SKIP:
            log("SKIP: radosgw.sh start: Ceph not installed")
            return SKIP
        check(r.returncode == 0, "radosgw.sh start exited %d" % r.returncode)
        env = radosgw_env(r.stdout)
        check({"endpoint", "access_key", "secret_key", "region"} <= set(env),
              "radosgw.sh start printed %r" % r.stdout)
        log("radosgw up at %s after %.1f s" % (env["endpoint"], time.monotonic() - t0))
        store = Store(env)

        for num, title, fn in CASES:
            if wanted and num not in wanted:
                continue
            log("== case %d: %s" % (num, title))
            ctx = StoreCtx(os.path.join(tmp, "c%d" % num), store)
            os.mkdir(ctx.tmp)
            t1 = time.monotonic()
            try:
                fn(ctx)
                log("   ok (%.1f s)" % (time.monotonic() - t1))
            except (TestFailure, OSError, subprocess.TimeoutExpired, ValueError,
                    s3check.S3Error) as e:
                log("   FAIL case %d (%.1f s): %s" % (num, time.monotonic() - t1, e))
                for p in ctx.proxies:
                    log("   proxy %s: %s" % (p.endpoint, proxy_summary(p)))
                failures.append(num)
            except Exception:  # noqa: BLE001 - a bug in the test itself
                log("   FAIL case %d: the test raised\n%s" % (num, traceback.format_exc()))
                failures.append(num)
            finally:
                ctx.cleanup()
        rc = 1 if failures else 0
    except (TestFailure, OSError, subprocess.TimeoutExpired, ValueError) as e:
        log("FAIL: %s" % e)
        rc = 1
    finally:
        r = subprocess.run([RADOSGW_SH, "stop", rgw_dir])
        if r.returncode != 0:
            log("FAIL: radosgw.sh stop exited %d" % r.returncode)
            rc = 1
        if rc in (0, SKIP):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            log("left for inspection: %s" % tmp)
    if failures:
        log("failed cases: %s" % ", ".join(map(str, failures)))
    log("PASS" if rc == 0 else "SKIP" if rc == SKIP else "FAIL")
    return rc


if __name__ == "__main__":
    sys.exit(main())
