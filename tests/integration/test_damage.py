#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Damaged copies on one node: what a read, a restart and retention do
with them (issue 12, reproductions 4 and 5).

  1. ranged reads after a read-ahead: a rank's shard "w" of 48 MiB with
     one flipped byte in block 40.  Reads of whole slots from 0 make the
     daemon read ahead; a read of [32 MiB, 36 MiB) is then served from the
     read-ahead of [32 MiB, 48 MiB), which holds the bad block.  The read
     touches only clean blocks: it returns the saved bytes (before the
     fix: EIO for block 40).  A read that touches block 40 fails with EIO
     naming the shard and the block, and a clean range read afresh still
     succeeds.
  2. a damaged step is neither uncommitted nor deleted: world 2 on one
     node, --local-keep 3, steps 1..3 committed.  Step 2's rank-1
     directory is moved away and step 3's rank-1 MANIFEST overwritten;
     after a SIGKILL and a restart, steps 2 and 3 are still committed
     (ckptctl list), their rank 0 reads back bit-exact, latest_rank for
     rank 1 skips them (falls back to step 1) while rank 0's names step 3.
     Committing steps 4 and 5 removes nothing (before the fix: step 2 was
     "NOT considered committed" and removed by retention with 2 committed
     steps); step 6 makes 4..6 the three newest intact steps, and 1, 2 and
     3 go.
  3. read-ahead that fits the reader (issue 13): a rank with shards "a"
     and "b" of 64 MiB each, bytes the daemon reads from disk measured by
     /proc/<pid>/io read_bytes (its reads are O_DIRECT, so the page cache
     hides nothing).  A random 4 KiB read in the middle of "a" reads at
     most 4 blocks (before: ~158 MB, three 64 MiB windows ahead and on into
     "b"); reading the whole of "a" returns the saved bytes and reads about
     its size, never into "b"; its last 4 KiB read alone reads one block.
  4. read-ahead across the shards of a restore walking them (issue 13): a
     rank of six 16 MiB shards s0..s5 with 16 MiB slots, each read whole in
     one READ.  One connection reading s0, s1, s2 in turn gets the bytes
     saved, and the daemon, having seen it go on from the end of s0 to the
     start of s1, reads s3 ahead (more than the 48 MiB asked for, at most
     three pieces more).  A connection reading s0, s2, s4 (every other
     shard) reads nothing ahead (its bytes, within a block each), and one
     reading s3, s4, s5 nothing past s5, the rank's last shard.
"""
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (Daemon, check, ctl_json, log, run_test, save_node,  # noqa: E402
                     shards_arg, step_dirs, step_path, wait_until)

MiB = 1 << 20


def rank_step(d, job, rank, below=None):
    """(step, newest) that ckpt_latest_rank names for rank."""
    args = ["latest", "--job", job, "--rank", rank] + (["--below", below] if below else [])
    out = dict(line.split(" ", 1) for line in d.rank(*args).stdout.splitlines()
               if line.startswith(("step ", "newest ")))
    return int(out["step"]), int(out["newest"])


def case_ranged_read(tmp):
    d = Daemon(tmp, name="ranged", pool="256M", slot="16M",
               extra=["--pool-memory-tier=no"]).start()
    job = "ranged"
    layout = [("w", 48 * MiB)]
    try:
        save_node(d, job, 1, [0], 1, {0: layout})
        path = os.path.join(step_path(d.state_dir, job, 1), "rank-0", "w")
        with open(path, "r+b") as f:
            f.seek(40 * MiB + 12345)
            b = f.read(1)
            f.seek(40 * MiB + 12345)
            f.write(bytes([b[0] ^ 0x40]))
            os.fsync(f.fileno())
        # one connection reads [0, 16), [16, 32) and [32, 36) MiB: after the
        # first two the daemon has read ahead [32, 48), bad block 40 in it
        p = d.rank("read", "--job", job, "--step", 1, "--rank", 0, "--shard", "w", "--offset", 0,
                   "--length", 36 * MiB, "--piece", 16 * MiB, check_rc=False)
        check(p.returncode == 0, "a read of [32, 36) MiB, clean blocks only, failed after the "
              "read-ahead met block 40 (%d): %s" % (p.returncode, p.stderr.strip()))
        p = d.rank("read", "--job", job, "--step", 1, "--rank", 0, "--shard", "w",
                   "--offset", 39 * MiB, "--length", 2 * MiB, check_rc=False)
        check(p.returncode == 1 and p.stderr.startswith("ERROR EIO")
              and "shard w block 40" in p.stderr,
              "a read touching the flipped block 40 fails naming it (%d): %s"
              % (p.returncode, p.stderr.strip()))
        d.rank("read", "--job", job, "--step", 1, "--rank", 0, "--shard", "w",
               "--offset", 41 * MiB, "--length", 7 * MiB)
        log("ranged reads: only a read touching block 40 fails")
    finally:
        d.stop()


def disk_read_bytes(d):
    """Bytes the daemon (all its threads, io_uring workers included) has
    read from the block device."""
    with open("/proc/%d/io" % d.proc.pid) as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    raise AssertionError("no read_bytes in /proc/%d/io" % d.proc.pid)


def read_costs(d, what, *args):
    """Disk bytes the daemon read for one `testrank read` (a connection of
    its own, closed when it ends: nothing read ahead is left in flight)."""
    before = disk_read_bytes(d)
    d.rank("read", *args)
    # an unclaimed read-ahead may still be completing after the client left
    time.sleep(0.3)
    n = disk_read_bytes(d) - before
    log("%s: %d bytes read from disk" % (what, n))
    return n


def case_read_ahead(tmp):
    d = Daemon(tmp, name="readahead", pool="256M", slot="16M",
               extra=["--pool-memory-tier=no"]).start()
    job = "readahead"
    try:
        save_node(d, job, 1, [0], 1, {0: [("a", 64 * MiB), ("b", 64 * MiB)]})
        base = ["--job", job, "--step", 1, "--rank", 0, "--shard", "a"]
        n = read_costs(d, "random 4 KiB of a", *base, "--offset", 30 * MiB + 123 * 4096,
                       "--length", 4096)
        check(n <= 4 * MiB, "a random 4 KiB read made the daemon read %d bytes from disk "
              "(at most 4 blocks of 1 MiB)" % n)
        n = read_costs(d, "all of a", *base, "--offset", 0, "--length", 64 * MiB,
                       "--piece", 16 * MiB)
        check(60 * MiB <= n <= 64 * MiB + 16 * MiB,
              "a sequential read of the 64 MiB shard a read %d bytes from disk (its size, at "
              "most one window more, nothing of b)" % n)
        n = read_costs(d, "last 4 KiB of a", *base, "--offset", 64 * MiB - 4096,
                       "--length", 4096)
        check(n <= MiB, "the last 4 KiB of a read %d bytes from disk (one block, none of b)" % n)
        log("read-ahead: a random read costs its blocks, a stream its shard")
    finally:
        d.stop()


def case_read_ahead_across(tmp):
    d = Daemon(tmp, name="across", pool="256M", slot="16M",
               extra=["--pool-memory-tier=no"]).start()
    job = "across"
    try:
        save_node(d, job, 1, [0], 1, {0: [("s%d" % i, 16 * MiB) for i in range(6)]})
        base = ["--job", job, "--step", 1, "--rank", 0, "--offset", 0, "--length", 16 * MiB]
        n = read_costs(d, "s0, s1, s2 whole", *base, "--shard", "s0,s1,s2")
        check(48 * MiB + 8 * MiB <= n <= 48 * MiB + 3 * 16 * MiB,
              "reading s0, s1, s2 whole on one connection made the daemon read %d bytes from "
              "disk (expected their 48 MiB and s3 read ahead, at most 3 pieces of 16 MiB more)"
              % n)
        n = read_costs(d, "s0, s2, s4 whole", *base, "--shard", "s0,s2,s4")
        check(n <= 48 * MiB + 3 * MiB,
              "reading every other shard read %d bytes from disk (48 MiB: nothing ahead)" % n)
        n = read_costs(d, "s3, s4, s5 whole", *base, "--shard", "s3,s4,s5")
        check(n <= 48 * MiB + 3 * MiB,
              "reading the last three shards read %d bytes from disk (48 MiB: nothing past s5)"
              % n)
        log("read-ahead: a walk over whole shards is read ahead into the next, no further")
    finally:
        d.stop()


def case_damaged_step(tmp):
    job = "damaged"
    layout = [("w", 3 * MiB + 17), ("opt", 4096 + 5)]
    layouts = {0: layout, 1: layout}
    state = os.path.join(tmp, "damaged-state")
    d = Daemon(tmp, name="damaged", state_dir=state, extra=["--local-keep", "3", "--pool-memory-tier=no"]).start()
    try:
        for step in (1, 2, 3):
            save_node(d, job, step, [0, 1], 2, layouts)
        d.kill()
        aside = os.path.join(tmp, "moved-away")
        shutil.move(os.path.join(step_path(state, job, 2), "rank-1"), aside)
        with open(os.path.join(step_path(state, job, 3), "rank-1", "MANIFEST"), "w") as f:
            f.write("not a manifest\n")
        d = Daemon(tmp, name="damaged", state_dir=state, extra=["--local-keep", "3", "--pool-memory-tier=no"]).start()
        listed = {e["step"]: e for e in ctl_json(d, "list", job)}
        for step in (1, 2, 3):
            check(step in listed and listed[step]["state"] == "committed",
                  "step %d after the restart: %s" % (step, listed.get(step)))
        text = d.read_log()
        check("NOT considered committed" not in text,
              "a damaged step was treated as not committed:\n" + text[-2000:])
        check("rank 1, named by the commit record, is missing" in text,
              "the log names the missing rank:\n" + text[-2000:])
        for step in (2, 3):
            d.rank("verify", "--job", job, "--step", step, "--rank", 0, "--shards",
                   shards_arg(layout))
        got = rank_step(d, job, 1)
        check(got == (1, 3), "latest_rank for rank 1 falls back to step 1: %s" % (got,))
        got = rank_step(d, job, 0)
        check(got == (3, 3), "latest_rank for rank 0 names step 3: %s" % (got,))
        for step in (4, 5):
            save_node(d, job, step, [0, 1], 2, layouts)
            # retention runs after the commit and deletes in the background:
            # give a deletion time to show before looking
            time.sleep(0.5)
            check(step_dirs(state, job) == list(range(1, step + 1)),
                  "after step %d: steps on disk %s" % (step, step_dirs(state, job)))
        check("removed by retention" not in d.read_log(),
              "retention removed a step while fewer than 3 intact steps were newer")
        save_node(d, job, 6, [0, 1], 2, layouts)
        wait_until(lambda: step_dirs(state, job) == [4, 5, 6], 10,
                   what=lambda: "steps 4..6 only on disk (%s)" % step_dirs(state, job))
        d.rank("verify", "--job", job, "--step", 6, "--rank", 1, "--shards", shards_arg(layout))
        log("damaged steps: committed, served, not counted, dropped once old")
    finally:
        d.stop()


def main(tmp):
    case_ranged_read(tmp)
    case_damaged_step(tmp)
    case_read_ahead(tmp)
    case_read_ahead_across(tmp)


if __name__ == "__main__":
    run_test(main)
