#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`ckptctl drain` (issue 14): what a job script runs before its
allocation ends and the node's disks are wiped.  It waits until the
newest committed step of every job has reached a tier on this node and
says by its exit status whether it made it.

Cases (real daemons, real clients):
  1. the store unreachable (the daemon points at a closed port): drain
     gives up at its --timeout with exit 1 and the exact message naming the
     step, how far it got and the store's error; --json gives the error
     document; a line per change on a non-tty stdout.
  2. radosgw (tests/s3/radosgw.sh): drain, default tier remote, returns 0
     once the step's COMMIT object is in the bucket; it follows a step
     committed while it waits.
  3. two daemons replicating on the loopback: drain (default tier
     replicated) returns 0 once the neighbour holds the step, and 1 when
     the neighbour is gone ("on 0 of 1 replication targets").
  4. usage errors exit 2; a tier the node does not have exits 1 saying so;
     without store or replication the tier is local.

CKPT_DRAIN_CASES=1,3 picks cases.  Case 2 skips without Ceph.
"""
import json
import os
import pty
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (CKPTCTL, CKPTD, TESTRANK, Daemon, check, free_ports, log,  # noqa: E402
                     run_cases, save_node)
from cluster import Cluster  # noqa: E402
from objstore import start_store, step_prefix  # noqa: E402

JOB = "llama"
MiB = 1024 * 1024
LAYOUT = {0: [("w", 2 * MiB + 3), ("opt", 4099)]}


def drain(d, *args, timeout=120):
    p = subprocess.run([CKPTCTL, "--socket", d.socket, "drain"] + [str(a) for a in args],
                       capture_output=True, text=True, timeout=timeout)
    return p


def case_unreachable(ctx):
    port = free_ports(1)[0]  # nothing listens there
    d = Daemon(ctx.tmp, name="closed", pool="64M", slot="1M",
               extra=["--remote-endpoint=http://127.0.0.1:%d" % port, "--remote-bucket=drain",
                      "--remote-region=us-east-1", "--remote-addressing=path"],
               env={"AWS_ACCESS_KEY_ID": "drain", "AWS_SECRET_ACCESS_KEY": "drain-secret",
                    "HOME": ctx.tmp})
    d.start()
    ctx.daemons.append(d)
    save_node(d, JOB, 3, [0], 1, LAYOUT)
    t0 = time.monotonic()
    p = drain(d, "--timeout", "2s")
    took = time.monotonic() - t0
    check(p.returncode == 1, "drain exited %d, want 1: %s%s" % (p.returncode, p.stdout, p.stderr))
    check(1.9 <= took < 10, "drain --timeout 2s took %.1f s" % took)
    want = ("ckptctl: drain: 1 of 1 job not at tier remote after 2.0s: job 'llama' step 3 "
            "(uploading its shards to the object store); the object store's last error: "
            "job llama step 3: PutObject: ")
    err = p.stderr.strip()
    check(err.startswith(want) and "Connection refused" in err and err.endswith("(will retry)")
          and "\n" not in err, "drain's message:\n  %s\nwant it to start with\n  %s" % (err, want))
    # a non-tty stdout: plain lines, the first at once
    lines = p.stdout.splitlines()
    check(lines and lines[0] == "drain: 0 of 1 jobs at tier remote after 0.0s; short: "
          "job 'llama' step 3 (uploading its shards to the object store)"
          or lines and lines[0].startswith("drain: 0 of 1 jobs at tier remote after 0."),
          "progress lines: %s" % lines)
    log("   at the timeout: %s" % err)

    # on a terminal: a bar redrawn in place, the line ended before the message
    master, slave = pty.openpty()
    p = subprocess.Popen([CKPTCTL, "--socket", d.socket, "drain", "--timeout", "1s"],
                         stdout=slave, stderr=subprocess.PIPE, text=True)
    os.close(slave)
    tty_out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the other end closed
            break
        if not chunk:
            break
        tty_out += chunk
    os.close(master)
    p.wait(timeout=30)
    redraws = tty_out.count(b"\r\x1b[K[")
    check(p.returncode == 1 and redraws >= 3 and tty_out.endswith(b"\r\n")
          and b"] 0/1 at remote, " in tty_out,
          "drain on a tty: exit %d, %d redraws: %r" % (p.returncode, redraws, tty_out[-300:]))

    p = drain(d, "--timeout", "1s", "--json")
    doc = json.loads(p.stdout)
    check(p.returncode == 1 and doc["error"]["errno"] == "ETIMEDOUT" and doc["error"]["exit"] == 1
          and "job 'llama' step 3 (uploading" in doc["error"]["message"]
          and len(p.stdout.splitlines()) == 1,
          "drain --json at the timeout: %d %s" % (p.returncode, p.stdout))
    check(d.stop() == 0, "unclean exit")


def case_radosgw(ctx):
    rctx = start_store(ctx)
    ctx.cleanups.append(rctx.cleanup)
    bucket = "drain"
    rctx.store.s3.create_bucket(bucket)
    d = rctx.daemon("rgw", bucket, pool="64M", slot="1M").start()
    ctx.daemons.append(d)
    save_node(d, JOB, 3, [0], 1, LAYOUT)
    save_node(d, JOB, 5, [0], 1, LAYOUT)
    p = drain(d, "--timeout", "240s", timeout=300)
    out = p.stdout
    check(p.returncode == 0, "drain exited %d: %s%s\n%s" % (p.returncode, out, p.stderr,
                                                          d.read_log()[-3000:]))
    last = out.splitlines()[-1]
    check(last.startswith("drained: 1 job at tier remote in ") and last.endswith(": llama step 5"),
          "drain's result: %r" % out)
    for step in (3, 5):
        check(rctx.store.exists(bucket, step_prefix("", JOB, step) + "COMMIT"),
              "drain returned 0 but step %d has no COMMIT object" % step)
    p = drain(d, JOB, "--tier", "remote", "--json")
    doc = json.loads(p.stdout)
    check(p.returncode == 0 and doc["tier"] == "remote" and doc["jobs"] == [{"job": JOB, "step": 5}],
          "drain --json: %s" % p.stdout)
    log("   %s" % last)
    check(d.stop() == 0, "unclean exit")


def case_replicated(ctx):
    cl = Cluster(ctx, 2, 2, 1, "clique", ranks_per_node=1).start()
    cl.wait_control_links()
    a, b = cl.nodes
    layouts = {0: LAYOUT[0], 1: [("w", MiB + 1)]}
    save_node(b, JOB, 4, [1], 2, layouts, commit=False)
    save_node(a, JOB, 4, [0], 2, layouts)
    p = drain(a, "--timeout", "60s")
    check(p.returncode == 0 and p.stdout.splitlines()[-1].startswith(
          "drained: 1 job at tier replicated in "), "drain on node 0: %d %s%s"
          % (p.returncode, p.stdout, p.stderr))
    p = drain(b, JOB, "--tier", "replicated", "--timeout", "60s")
    check(p.returncode == 0, "drain on node 1: %d %s%s" % (p.returncode, p.stdout, p.stderr))
    # the neighbour gone: node 0's newest step cannot reach it
    b.kill()
    save_node(a, JOB, 6, [0], 1, {0: LAYOUT[0]})
    p = drain(a, "--timeout", "1500ms")
    check(p.returncode == 1 and p.stderr.strip() ==
          "ckptctl: drain: 1 of 1 job not at tier replicated after 1.5s: job 'llama' step 6 "
          "(on 0 of 1 replication targets)", "drain with the neighbour gone: %d %r"
          % (p.returncode, p.stderr))
    log("   neighbour gone: %s" % p.stderr.strip())


def case_usage(ctx):
    d = Daemon(ctx.tmp, name="plain", pool="64M", slot="1M").start()
    ctx.daemons.append(d)
    p = drain(d)
    check(p.returncode == 0 and p.stdout == "drained: no committed step to wait for\n",
          "drain with no jobs: %d %r" % (p.returncode, p.stdout))
    save_node(d, JOB, 1, [0], 1, LAYOUT)
    p = drain(d)
    check(p.returncode == 0 and p.stdout.startswith("drained: 1 job at tier local in ")
          and p.stdout.endswith(": llama step 1\n"), "drain, tier local: %r" % p.stdout)
    for args, rc, msg in (
            (["--tier", "cloud"], 2, "ckptctl: drain: --tier 'cloud': want local, replicated or "
             "remote"),
            (["a", "b"], 2, "ckptctl: usage: drain [JOB] [--tier local|replicated|remote] "
             "[--timeout T]"),
            (["--tier", "remote"], 1, "ckptctl: drain: --tier remote: this node has no object "
             "store configured ([remote] endpoint)"),
            (["--tier", "replicated"], 1, "ckptctl: drain: --tier replicated: replication is "
             "off on this node ([cluster] replication_factor 1 or no peers)"),
            (["nosuchjob"], 1, "ckptctl: drain: no job named 'nosuchjob' on this node")):
        p = drain(d, *args)
        check(p.returncode == rc and p.stderr.strip() == msg and p.stdout == "",
              "drain %s: exit %d %r, want %d %r" % (args, p.returncode, p.stderr, rc, msg))
    check(d.stop() == 0, "unclean exit")


CASES = [
    (1, "the store unreachable: exit 1 at the timeout, saying what is short", case_unreachable),
    (2, "radosgw: exit 0 once the newest step's COMMIT is in the bucket", case_radosgw),
    (3, "replication on the loopback: 0 when the neighbour holds it, 1 when it is gone",
     case_replicated),
    (4, "usage, missing tiers, the local tier", case_usage),
]


if __name__ == "__main__":
    sys.exit(run_cases(CASES, "CKPT_DRAIN_CASES", "ckptd-drain-", (CKPTD, TESTRANK, CKPTCTL)))
