#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A replica refused for a bad CRC reaches its sender (issue 12,
reproduction 3, "Replication refusals").

Why: node 0 replicates a step whose own local copy went bad on disk after
the commit.  Node 1 checks every block against the manifest's CRC32C and
refuses it.  Before this change node 0 dropped the refusal on the floor:
its status said "0 step copies owed" and not DEGRADED, ckpt_wait(tier
replicated) timed out instead of failing, and node 0 never re-read its own
copy.  A trainer waiting for its checkpoint to be safe on two nodes must
learn promptly that it is not, and why.

Two real daemons on the loopback, replication factor 2, PSK and frame
MACs on.  The corruption is a byte flipped in node 0's committed shard file
(not a frame altered on the link: the link's MAC catches that, see
test_peer_mac.py).  Node 1 is started only after the flip, so the step
waits on node 0 until then.

1. refused: ckpt_wait(REPLICATED) on node 0 fails within a few seconds of
   node 1 coming up with EIO and a message naming node 1, the rank and the
   shard and block; node 0's status is DEGRADED, counts the step owed
   (refused) and its last error names the shard and block; node 0's log
   says node 1 refused it and that its own copy is bad; node 1's log blames
   node 0 (the sender), and node 1 stores nothing of the rank; `ckptctl
   list` shows REPL 0 for the step; a second wait fails at once.
2. regression: a step whose copy is good replicates (wait succeeds, the
   replica is byte-for-byte node 0's file, list shows REPL 1); retention
   (keep 1) then removes the refused step, which is owed no more (status
   not DEGRADED).
3. the copy is good and the way damaged it: two daemons with
   `peer_frame_mac = no` (so a flipped byte on the way is not caught by a
   frame MAC), node 0 reaching node 1 through peerproxy.py, which flips a
   payload byte of the first transfer only (a fake on the path, to inject
   the fault; both daemons are real).  Node 1 refuses it, node 0 re-checks
   its copy, finds it good, sends it again, and the step replicates
   byte-for-byte.
4. the same with every transfer damaged: node 0 sends it twice more, then
   the step fails for node 1 with EIO saying the copy verifies good.

On the daemon before this change case 1's wait times out (ETIMEDOUT after
its 20 s) and the status says "0 step copies owed": the test fails there.
"""
import errno
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.environ.get("CKPT_SOURCE_ROOT", "."), "client", "python"))
from harness import (Daemon, check, check_log_clean, cluster_flags, ctl_json,  # noqa: E402
                     flip_byte, free_ports, log, log_lines, run_test, shards_arg, step_path,
                     wait_until, write_psk)
import peerproxy  # noqa: E402

JOB = "refusal.job"
MiB = 1024 * 1024
# "w" has 4 blocks (the last one short); the flip lands in block 2
SHARDS = [("w", 3 * MiB + 5), ("s", 5000), ("empty", 0)]
FLIP_AT = 2 * MiB + 12345
WAIT_MS = 20000


def local_file(d, step, name):
    return os.path.join(step_path(d.state_dir, JOB, step), "rank-0", name)


def replica_rank(d, step):
    return os.path.join(d.state_dir, "replica", "node-0", "jobs", JOB, "%020d" % step, "rank-0")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def use_python_client():
    # a sanitizer-instrumented libckpt.so cannot be loaded into python:
    # there ckpt-testrank makes the same ckpt_wait() call
    return os.environ.get("CKPT_SANITIZE", "none") in ("", "none")


def wait_replicated_call(d, step, timeout_ms):
    """ckpt_wait(job, step, REPLICATED, timeout_ms) on d: (errno name or None, message)."""
    if use_python_client():
        import ckptd
        try:
            with ckptd.Client(d.socket) as c:
                c.wait(JOB, step, ckptd.REPLICATED, timeout_ms=timeout_ms)
            return None, ""
        except ckptd.CkptError as e:
            return errno.errorcode.get(e.errno, str(e.errno)), str(e)
    p = d.rank("wait", "--job", JOB, "--step", step, "--tier", "replicated", "--timeout",
               timeout_ms, check_rc=False, timeout=timeout_ms / 1000 + 60)
    if p.returncode == 0:
        return None, ""
    err = p.stderr.strip()
    return (err.split()[1] if err.startswith("ERROR ") else "?"), err


def stop_clean(*daemons):
    """Each daemon ran to here and stops cleanly, without a sanitizer report
    (leaks show at a clean exit)."""
    for d in daemons:
        check(d.alive(), "node %d exited: %s" % (d.node, d.read_log()[-2000:]))
        rc = d.stop()
        check_log_clean(d)
        check(rc == 0, "node %d exited with %s on SIGTERM: %s" % (d.node, rc,
                                                              d.read_log()[-2000:]))


def status_text(d):
    return d.ctl("status").stdout


def main(tmp):
    psk = write_psk(os.path.join(tmp, "psk"))
    ports = free_ports(2)
    peers = ",".join("127.0.0.1:%d" % p for p in ports)
    # keep 1: step 2 (case 2) makes retention remove the refused step 1.
    # The memory tier is off: with it, node 0 replicates the newest step
    # from memory, which holds the saved bytes whatever happened to the
    # file (docs/design-decisions.md, "The memory tier").
    n0, n1 = [Daemon(tmp, name="rf%d" % i, pool="64M", slot="4M",
                     extra=cluster_flags(peers, 2, i, 2, psk) +
                     ["--local-keep=1", "--pool-memory-tier=no"])
              for i in range(2)]
    for i, d in enumerate((n0, n1)):
        d.node = i
    n0.start()
    try:
        run(n0, n1)
    finally:
        for d in (n0, n1):
            if d.proc:
                d.kill()
    through_proxy(tmp, psk)


def through_proxy(tmp, psk):
    proxy = peerproxy.PeerProxy(free_ports(1)[0], tagged=False)
    # node 0 reaches node 1 through the proxy
    n0, n1 = peerproxy.two_daemons(tmp, proxy, psk, "px", ["--cluster-peer-frame-mac=no"])
    try:
        proxy.plan = ["flip"]
        n0.start()
        n1.start()
        wait_until(proxy.ready, 30, what="the link from node 0 through the proxy")

        log("3. node 0's copy is good, the way damages the first transfer: sent again")
        n0.rank("save", "--job", JOB, "--step", 3, "--rank", 0, "--world", 1,
                "--shards", shards_arg(SHARDS), "--seed", 3, "--commit")
        name, msg = wait_replicated_call(n0, 3, 30000)
        check(name is None, "step 3 did not replicate after one damaged transfer: %s %s\n"
              "--- node 0 log ---\n%s" % (name, msg, n0.read_log()[-3000:]))
        check(len(proxy.tampered) == 1, "the proxy damaged %d transfers, expected 1"
              % len(proxy.tampered))
        check(log_lines(n1, "rank 0 from node 0: node 0's copy: shard w block 0 failed its "
                        "CRC32C"),
              "node 1 did not refuse the damaged transfer:\n%s" % n1.read_log()[-3000:])
        check(log_lines(n0, "step 3 rank 0: this node's copy verifies good, so the link or "
                        "node 1 damaged it: sending it again \\(1 of 2\\)"),
              "node 0 does not say its copy verified good and it sent it again:\n%s"
              % n0.read_log()[-3000:])
        for shard, _ in SHARDS:
            check(read(os.path.join(replica_rank(n1, 3), shard)) ==
                  read(local_file(n0, 3, shard)),
                  "node 1's replica of step 3 shard %s differs from node 0's" % shard)
        rep = ctl_json(n0, "status")["replication"]
        check(rep["pending"] == 0 and rep["degraded"] is False,
              "node 0's replication status after the resent step replicated: %r" % rep)

        log("4. every transfer damaged: two resends, then the step fails for node 1")
        proxy.plan = ["flip"] * 3
        n0.rank("save", "--job", JOB, "--step", 4, "--rank", 0, "--world", 1,
                "--shards", shards_arg(SHARDS), "--seed", 4, "--commit")
        t0 = time.monotonic()
        name, msg = wait_replicated_call(n0, 4, 30000)
        log("   ckpt_wait(REPLICATED) returned %s after %.1f s: %s"
            % (name, time.monotonic() - t0, msg))
        check(name == "EIO" and "node 1 refused rank 0 3 times" in msg
              and "verifies good" in msg,
              "step 4, damaged on every transfer: %s %s" % (name, msg))
        check(len(proxy.tampered) == 4, "the proxy damaged %d transfers, expected 4"
              % len(proxy.tampered))
        rep = ctl_json(n0, "status")["replication"]
        check(rep["pending"] == 1 and rep["degraded"] is True,
              "node 0's replication status after step 4 failed: %r" % rep)
        stop_clean(n0, n1)
    finally:
        proxy.close()
        for d in (n0, n1):
            if d.proc:
                d.kill()


def run(n0, n1):
    log("1. node 0 commits step 1 while node 1 is down; its shard w then goes bad on disk")
    n0.rank("save", "--job", JOB, "--step", 1, "--rank", 0, "--world", 1,
            "--shards", shards_arg(SHARDS), "--seed", 1, "--commit")
    wait_until(lambda: ctl_json(n0, "status")["replication"]["pending"] == 1, 10,
               what="node 0 (node 1 down) to owe step 1")
    flip_byte(local_file(n0, 1, "w"), FLIP_AT)

    result = {}

    def waiter():
        result["r"] = wait_replicated_call(n0, 1, WAIT_MS)
        result["t"] = time.monotonic()

    th = threading.Thread(target=waiter)
    th.start()
    time.sleep(0.3)  # the wait is in before node 1 comes up
    n1.start()
    up = time.monotonic()
    th.join(WAIT_MS / 1000 + 70)
    check("r" in result, "ckpt_wait(REPLICATED) on node 0 did not return")
    name, msg = result["r"]
    took = result["t"] - up
    log("   ckpt_wait(REPLICATED) returned %s after %.1f s: %s" % (name, took, msg))
    check(name == "EIO", "ckpt_wait(REPLICATED) of the refused step: expected EIO, got %s: %s\n"
          "--- node 0 log ---\n%s" % (name, msg, n0.read_log()[-4000:]))
    check(took < 10, "ckpt_wait(REPLICATED) took %.1f s after node 1 came up" % took)
    for want in ("node 1", "rank 0", "shard w block 2", "CRC32C", "this node's copy is bad",
                 "no good copy was found to repair it"):
        check(want in msg, "ckpt_wait's message does not say %r: %s" % (want, msg))

    # a second wait fails at once, with the same reason
    t0 = time.monotonic()
    name2, msg2 = wait_replicated_call(n0, 1, WAIT_MS)
    check(name2 == "EIO" and "shard w block 2" in msg2 and time.monotonic() - t0 < 5,
          "a second ckpt_wait(REPLICATED) of the refused step: %s %s" % (name2, msg2))

    rep = ctl_json(n0, "status")["replication"]
    check(rep["peers_up"] == 1 and rep["pending"] == 1 and rep["degraded"] is True,
          "node 0's replication status after the refusal: %r" % rep)
    text = status_text(n0)
    peers = next((ln for ln in text.splitlines() if ln.startswith("peers:")), "")
    check("1 step copies owed" in peers and "(DEGRADED)" in peers,
          "node 0's status peers line after the refusal: %r" % peers)
    check("1 refused" in text, "node 0's status does not say a step was refused:\n%s" % text)
    errs = next((ln for ln in text.splitlines() if ln.startswith("errors:")), "")
    check("rank 0" in errs and "shard w block 2" in errs and "node 1" in errs,
          "node 0's status last error does not name the bad copy: %r" % errs)

    lines = log_lines(n0, "node 1 refused job %s step 1 rank 0: node 0's copy: shard w block 2 "
                      "failed its CRC32C" % JOB)
    check(lines, "node 0's log does not say node 1 refused rank 0 for shard w block 2:\n%s"
          % n0.read_log()[-3000:])
    check(log_lines(n0, "job %s step 1 rank 0: this node's copy is bad: shard w block 2 failed "
                    "its CRC32C" % JOB),
          "node 0's log does not say its own copy is bad:\n%s" % n0.read_log()[-3000:])
    check(log_lines(n1, "rank 0 from node 0: node 0's copy: shard w block 2 failed its CRC32C"),
          "node 1's log does not blame node 0 (the sender):\n%s" % n1.read_log()[-3000:])
    check(not os.path.exists(replica_rank(n1, 1)),
          "node 1 stored the refused rank: %s" % replica_rank(n1, 1))
    listing = ctl_json(n0, "list", JOB)
    s1 = next(e for e in listing if e["step"] == 1)
    check(s1["replicas"] == 0, "ckptctl list: step 1 should be held by no target: %r" % s1)
    log("   node 0: DEGRADED, 1 step owed (refused), last error names shard w block 2")

    log("2. a step whose copy is good still replicates")
    n0.rank("save", "--job", JOB, "--step", 2, "--rank", 0, "--world", 1,
            "--shards", shards_arg(SHARDS), "--seed", 2, "--commit")
    name, msg = wait_replicated_call(n0, 2, 30000)
    check(name is None, "step 2 (good copy) did not replicate: %s %s\n--- node 0 log ---\n%s"
          % (name, msg, n0.read_log()[-3000:]))
    for shard, _ in SHARDS:
        check(read(os.path.join(replica_rank(n1, 2), shard)) == read(local_file(n0, 2, shard)),
              "node 1's replica of step 2 shard %s differs from node 0's" % shard)
    listing = ctl_json(n0, "list", JOB)
    s2 = next(e for e in listing if e["step"] == 2)
    check(s2["replicas"] == 1, "ckptctl list: step 2 should be held by node 1: %r" % s2)
    # retention (keep 1) removed step 1 here: it is owed no more
    wait_until(lambda: "0 step copies owed" in status_text(n0), 10,
               what="node 0 to drop the refused step 1 once retention removed it")
    check(log_lines(n0, "step 1 was removed here before it reached node 1: dropped"),
          "node 0's log does not say the refused step 1 was dropped from the debt")
    rep = ctl_json(n0, "status")["replication"]
    check(rep["pending"] == 0 and rep["degraded"] is False,
          "node 0's replication status after retention removed step 1: %r" % rep)
    stop_clean(n0, n1)


if __name__ == "__main__":
    run_test(main)
