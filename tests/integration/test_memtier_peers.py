#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The memory tier between nodes (issue 13): the newest step goes to a
neighbour, and comes back from one, without either daemon reading its disk.

Why: a trainer restarted on its own node already restores from memory
(test_memtier.py).  The other failures need the neighbours: replication
right after a commit used to read the step back from disk to send it, and
the restore of a lost node read every replica back from the holder's disk,
although both daemons had just had those bytes in their pools.

Two real daemons on the loopback (replication factor 2, PSK, frame MACs
on), each saving two ranks of one job; "no disk read" is the kernel's
read_bytes of the daemon's process (/proc/PID/io), which counts what it
made the block layer read: under META_SLACK (a few 4 KiB pages of MANIFEST,
COMMITTED and catalog files), against 32 MB of shards.

1. from memory: both nodes save step 1 and it commits.  Node 0 replicates
   its ranks from memory (its read_bytes stays put from before its save to
   REPLICATED).  Node 1 keeps the replica in its pool (status memory.bytes
   covers its own ranks and the replica; memory.steps counts its own step
   only).  Node 0 is lost
   (SIGKILL, state dir removed); its replacement restores ranks 0 and 1
   from node 1, which reads nothing from disk; the ranks read back
   bit-exact, from the replacement's memory (it keeps what it restored: no
   disk read there either, and `list` shows the step in memory).
2. from disk, the control: node 1 is restarted (its memory starts empty)
   and node 0 is lost again; the restore now comes from node 1's disk (its
   read_bytes grows by at least 90 % of the ranks' bytes), and reads back
   bit-exact.

Cases can be chosen with CKPT_MEMPEER_CASES=1,2 when run by hand.
"""
import os
import shutil
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (Daemon, check, check_log_clean, ctl_json, log, run_cases,  # noqa: E402
                     save_node, step_path, wait_until)
from cluster import MiB, Cluster, must_verify, rank_dirs, wait_replicated  # noqa: E402

JOB = "mempeer.job"
STEP = 1
# shards that end inside a block, one of several 4 MiB frames, an empty one
LAYOUTS = {0: [("weights", 21 * MiB + 4321), ("optim", MiB + 7), ("empty", 0)],
           1: [("weights", 9 * MiB + 1), ("tiny", 100)],
           2: [("weights", 6 * MiB + 3)],
           3: [("tiny", 4096)]}


# what a daemon may read of its metadata while the shards come from memory
META_SLACK = 64 * 1024


def read_bytes(d):
    """What the kernel read from storage for daemon d's process so far."""
    with open("/proc/%d/io" % d.proc.pid) as f:
        io = dict(line.split(": ") for line in f.read().splitlines())
    return int(io["read_bytes"])


def node0_bytes():
    return sum(size for r in (0, 1) for _, size in LAYOUTS[r])


def save_step(cl):
    # node 1 saves first without committing: the commit (node 0's, after
    # its saves) waits for every rank of the step
    n0, n1 = cl.nodes
    save_node(n1, JOB, STEP, cl.ranks_of(1), cl.world, LAYOUTS, seed=STEP, commit=False)
    before = read_bytes(n0)
    save_node(n0, JOB, STEP, cl.ranks_of(0), cl.world, LAYOUTS, seed=STEP)
    for d in cl.nodes:
        wait_replicated(d, JOB, STEP)
    return read_bytes(n0) - before


def replace_node0(ctx, cl):
    """Lose node 0 (SIGKILL, disk wiped) and start its replacement; returns
    it once ranks 0 and 1 are back and committed."""
    cl.nodes[0].kill(signal.SIGKILL)
    shutil.rmtree(cl.nodes[0].state_dir)
    repl = Daemon(ctx.tmp, name="n0-new%d" % len(ctx.daemons), pool="256M", slot="16M",
                  extra=cl.flags(0))
    repl.node = 0
    ctx.daemons.append(repl)
    repl.start()
    local = step_path(repl.state_dir, JOB, STEP)
    wait_until(lambda: rank_dirs(local)[0] == set(cl.ranks_of(0)) and
               os.path.exists(os.path.join(local, "COMMITTED")), timeout=90, interval=0.1,
               what=lambda: "the replacement to restore ranks %s (has %s)"
               % (cl.ranks_of(0), sorted(rank_dirs(local)[0])))
    cl.nodes[0] = repl
    return repl


def verify_node0(d, what):
    for r in (0, 1):
        must_verify(d, JOB, STEP, r, LAYOUTS[r], seed=STEP, what=what)


def start_cluster(ctx):
    cl = Cluster(ctx, 2, 2, 1, "clique", ranks_per_node=2, pool="256M", slot="16M").start()
    cl.wait_control_links()
    return cl


def case_from_memory(ctx):
    cl = start_cluster(ctx)
    n0, n1 = cl.nodes
    read0 = save_step(cl)
    log("   node 0 read %d bytes from disk from its save to REPLICATED" % read0)
    check(read0 < META_SLACK, "node 0 read %d bytes from disk to replicate step %d; its "
          "memory holds the step" % (read0, STEP))

    # node 1 holds its own ranks and node 0's replica in memory
    mem = ctl_json(n1, "status")["memory"]
    own1 = sum(size for r in (2, 3) for _, size in LAYOUTS[r])
    check(mem["bytes"] >= own1 + node0_bytes() and mem["steps"] == 1,
          "node 1's memory after replication: %s (expected >= %d bytes, 1 step of its own)"
          % (mem, own1 + node0_bytes()))
    before1 = read_bytes(n1)
    repl = replace_node0(ctx, cl)
    read1 = read_bytes(n1) - before1
    log("   node 1 read %d bytes from disk to restore node 0 (%d bytes of ranks)"
        % (read1, node0_bytes()))
    check(read1 < META_SLACK, "node 1 read %d bytes from disk to restore node 0; its memory "
          "holds the replica" % read1)

    before = read_bytes(repl)
    verify_node0(repl, " (restored from node 1's memory)")
    check(read_bytes(repl) - before < META_SLACK, "the replacement read %d bytes from disk "
          "to serve the ranks it had just restored" % (read_bytes(repl) - before))
    steps = {e["step"]: e["memory"] for e in ctl_json(repl, "list", JOB)}
    check(steps == {STEP: True}, "the replacement's list does not show step %d in memory: %s"
          % (STEP, steps))
    for d in cl.nodes:
        check_log_clean(d)


def case_from_disk(ctx):
    cl = start_cluster(ctx)
    n1 = cl.nodes[1]
    save_step(cl)
    # memory starts empty after a restart: the replica is on disk only
    n1.stop()
    n1.start()
    cl.wait_control_links()
    check(ctl_json(n1, "status")["memory"]["bytes"] == 0, "node 1 restarted with memory held")
    before1 = read_bytes(n1)
    repl = replace_node0(ctx, cl)
    read1 = read_bytes(n1) - before1
    log("   node 1 read %d bytes from disk to restore node 0 (%d bytes of ranks)"
        % (read1, node0_bytes()))
    # (a small file's page may still be in the page cache: 90 %, not all)
    check(read1 >= 0.9 * node0_bytes(), "node 1 read only %d bytes from disk to restore %d "
          "bytes of node 0's ranks after a restart (its memory was empty)"
          % (read1, node0_bytes()))
    verify_node0(repl, " (restored from node 1's disk)")
    for d in cl.nodes:
        check_log_clean(d)


CASES = [
    (1, "replication and a lost node's restore from memory", case_from_memory),
    (2, "after the holder restarts, the restore reads its disk", case_from_disk),
]

if __name__ == "__main__":
    sys.exit(run_cases(CASES, "CKPT_MEMPEER_CASES", "ckptd-mempeer-"))
