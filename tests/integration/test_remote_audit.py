#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The audit of the object store's copies (issue 12, daemon/remote/audit.c),
against a real radosgw (tests/s3/radosgw.sh; skips without Ceph).

One daemon flushes step 1 of a job (world 1) with three shards: "w"
(3 MiB + 17, one PutObject), "big" (12 MiB + 5, a multipart upload of 5 MiB
parts, whose ETag radosgw does not return at Complete) and "opt" (4 KiB + 5).
Then the objects are damaged through the S3 API, each a different way:

  - "w" overwritten with its bytes but one flipped in block 2 (same size:
    the ETag tells);
  - "big" overwritten by a single PUT with one byte flipped in its last
    block (same size, no ETag recorded: the sampled last block's CRC32C
    tells);
  - "opt" deleted.

With `audit_interval` 1 s, the daemon's log names each object and what is
wrong with it, the job's error count grows, the step is flushed again, and
afterwards every object's bytes equal the local shard file's (repaired).
Last, the local copy of "w" is damaged as well and its object overwritten
again: the audit reports the object and says the local copy fails too, and
uploads nothing (the damaged object is left as it was, not replaced by bad
bytes); `ckptctl --json status` counts the passes, the findings and the 3
objects uploaded again.  Before the audit, none of this was noticed: the objects stayed
wrong and the log silent.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (CKPTD, RAWCLIENT, TESTRANK, check, ctl_json, log,  # noqa: E402
                     run_cases, save_node, step_path, wait_until)
from objstore import start_store, step_prefix, wait_remote  # noqa: E402

MiB = 1 << 20
JOB = "audited"
LAYOUT = [("w", 3 * MiB + 17), ("big", 12 * MiB + 5), ("opt", 4096 + 5)]


def flip(data, at):
    b = bytearray(data)
    b[at] ^= 0x20
    return bytes(b)


def case_audit(ctx):
    t0 = time.monotonic()
    rctx = start_store(ctx)
    ctx.cleanups.append(rctx.cleanup)
    log("   radosgw up after %.1f s" % (time.monotonic() - t0))
    bucket = "audit"
    s3 = rctx.store.s3
    s3.create_bucket(bucket)
    d = rctx.daemon("audit", bucket, pool="128M", slot="8M",
                    flags=["--remote-part-size=5M", "--remote-audit-interval=1s",
                           "--remote-audit-sample=3"]).start()
    ctx.daemons.append(d)
    save_node(d, JOB, 1, [0], 1, {0: LAYOUT})
    wait_remote(d, JOB, 1)
    prefix = step_prefix("", JOB, 1) + "ranks/0/"
    local = os.path.join(step_path(d.state_dir, JOB, 1), "rank-0")

    def original(name):
        with open(os.path.join(local, name), "rb") as f:
            return f.read()

    # a pass over intact objects finds nothing
    time.sleep(2.5)
    check("the object-store copy is bad" not in d.read_log(),
          "the audit reported an intact object:\n" + d.read_log()[-2000:])
    def job_errors():
        return {j["name"]: j["errors"] for j in ctl_json(d, "list")}[JOB]

    errors0 = job_errors()

    s3.put_object(bucket, prefix + "w", flip(original("w"), 2 * MiB + 100))
    big = original("big")
    s3.put_object(bucket, prefix + "big", flip(big, len(big) - 3))
    s3.delete_object(bucket, prefix + "opt")
    want = {
        "w": "object %sw has ETag" % prefix,
        "big": "object %sbig fails its CRC32C at block 12" % prefix,
        "opt": "object %sopt is missing" % prefix,
    }
    for name, text in want.items():
        wait_until(lambda text=text: text in d.read_log(), 30, interval=0.2,
                   what=lambda text=text: "the audit's finding %r in the log:\n%s"
                   % (text, d.read_log()[-3000:]))
        wait_until(lambda name=name: "shard %s: the local copy verifies; the object %s%s is "
                   "uploaded again" % (name, prefix, name) in d.read_log(), 30, interval=0.2,
                   what="the re-upload of %s" % name)
    for name, _ in LAYOUT:
        wait_until(lambda name=name: s3.get_object(bucket, prefix + name) == original(name)
                   if rctx.store.exists(bucket, prefix + name) else False, 60, interval=0.5,
                   what="object %s repaired (its bytes equal the local shard's)" % name)
    wait_remote(d, JOB, 1)
    errors1 = job_errors()
    check(errors1 == errors0 + 3, "the job's errors grew by the 3 findings: %d -> %d"
          % (errors0, errors1))
    log("   three damaged objects found and uploaded again, bytes equal the local copy")

    # the local copy bad too: nothing is uploaded from it
    with open(os.path.join(local, "w"), "r+b") as f:
        f.seek(1 * MiB + 7)
        b = f.read(1)
        f.seek(1 * MiB + 7)
        f.write(bytes([b[0] ^ 0x01]))
    damaged = flip(original("w"), 5)
    s3.put_object(bucket, prefix + "w", damaged)
    wait_until(lambda: "shard w: the local copy fails its CRC32C at block 1 as well; not "
               "uploaded again" in d.read_log(), 30, interval=0.2,
               what=lambda: "the audit refusing to upload a bad local copy:\n"
               + d.read_log()[-3000:])
    time.sleep(1.5)
    check(s3.get_object(bucket, prefix + "w") == damaged,
          "the audit replaced the object although the local copy is bad too")
    audit = ctl_json(d, "status")["remote"]["audit"]
    check(audit["passes"] >= 2 and audit["bad"] >= 4 and audit["repaired"] == 3
          and audit["checked"] > 0, "ckptctl status: audit %s, want >= 4 bad, 3 uploaded again"
          % audit)
    log("   a bad local copy is not uploaded; status: %s" % audit)
    check(d.stop() == 0, "unclean exit")


CASES = [
    (1, "the audit finds damaged objects and has them uploaded again", case_audit),
]


if __name__ == "__main__":
    sys.exit(run_cases(CASES, "CKPT_AUDIT_CASES", "ckptd-audit-", (CKPTD, TESTRANK, RAWCLIENT)))
