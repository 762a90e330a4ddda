# SPDX-License-Identifier: MIT
"""The memory tier: the newest committed step of a job stays in the pool.

A trainer killed and restarted on the same node restores its newest step
from the daemon's memory: ckpt_read is pointed at the slot and ckpt_map
maps it, bit-exact, and the daemon reads nothing from disk (its own
bytes_read counter and the kernel's /proc/PID/io read_bytes both stay
put).  status and list show what memory holds.  A save that needs the
memory tier's slots takes them (staging always wins) and succeeds, and the
newer step is then the one in memory.  Memory a trainer wrote into after
the save is caught by the block checksums and the READ goes to the disk.
A daemon restart starts with nothing in memory and restores from disk."""
import os
import re
import signal
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import (Daemon, check, check_log_clean, ctl_json, log, run_test,  # noqa: E402
                     shards_arg)

MiB = 1024 * 1024
JOB = "memtier-job"
# unaligned sizes: a shard that ends inside a block, and one smaller than one
LAYOUT = [("weights", 40 * MiB + 12345), ("optim", 3 * MiB + 1), ("tiny", 100)]


def disk_reads(d):
    """(the daemon's own counter of bytes read from its disk, the kernel's)"""
    st = ctl_json(d, "status")
    with open("/proc/%d/io" % d.proc.pid) as f:
        io = dict(line.split(": ") for line in f.read().splitlines())
    return st["bytes_read"], int(io["read_bytes"])


def save(d, step, layout, seed=0):
    d.rank("save", "--job", JOB, "--step", step, "--rank", 0, "--world", 1,
           "--shards", shards_arg(layout), "--seed", seed, "--commit")


def verify(d, step, layout, *extra, seed=0):
    d.rank("verify", "--job", JOB, "--step", step, "--rank", 0,
           "--shards", shards_arg(layout), "--seed", seed, *extra)


def memory_steps(d):
    """{step: memory flag} from `ckptctl list JOB`, and status's memory."""
    steps = {e["step"]: e["memory"] for e in ctl_json(d, "list", JOB)}
    return steps, ctl_json(d, "status")["memory"]


def test(tmp):
    d = Daemon(tmp, pool="256M", slot="64M")
    d.start()
    try:
        save(d, 1, LAYOUT)
        steps, mem = memory_steps(d)
        check(steps == {1: True}, "step 1 is not shown in memory: %s" % steps)
        check(mem["steps"] == 1 and mem["bytes"] >= sum(s for _, s in LAYOUT),
              "status shows no memory: %s" % mem)
        text = d.ctl("status").stdout
        check(re.search(r"memory:\s+1 committed steps? resident", text), "status text: " + text)
        check("memory" in d.ctl("list", JOB).stdout.splitlines()[1],
              "list text shows no memory: " + d.ctl("list", JOB).stdout)

        # A trainer dies in the middle of its next save (SIGKILL while it
        # sits on a window); its restart restores step 1 from memory.
        p = d.rank_async("save", "--job", JOB, "--step", 2, "--rank", 0, "--world", 1,
                         "--shards", shards_arg(LAYOUT), "--zero-copy", "--hold", 60000)
        check(p.stdout.readline().strip() == "holding", "trainer did not get its window")
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=30)
        before = disk_reads(d)
        verify(d, 1, LAYOUT)                          # ckpt_read
        verify(d, 1, LAYOUT, "--piece", 5 * MiB + 7)  # unaligned pieces
        verify(d, 1, LAYOUT, "--map")                 # ckpt_map
        after = disk_reads(d)
        log("disk reads (daemon counter, /proc io) before %s after %s" % (before, after))
        check(after == before, "the restore read the disk: %s -> %s" % (before, after))
        steps, mem = memory_steps(d)
        check(steps.get(1) is True and mem["steps"] == 1, "step 1 left memory: %s %s"
              % (steps, mem))

        # A save that needs the memory tier's slots: 240 MiB of a 256 MiB
        # pool, step 1's 44 MiB in it.  It takes them and succeeds.
        big = [("a", 120 * MiB), ("b", 120 * MiB - 3)]
        save(d, 3, big, seed=3)
        steps, mem = memory_steps(d)
        log("after the big save: %s %s" % (steps, mem))
        check(steps.get(1) is False, "step 1 still shown in memory: %s" % steps)
        before = disk_reads(d)
        verify(d, 1, LAYOUT)
        check(disk_reads(d)[0] > before[0], "step 1 was not read from disk")
        # step 3 is the newest committed step; how much of it stayed in
        # memory depends on which windows the pool gave back for its own
        # staging, but it restores bit-exact either way
        verify(d, 3, big, seed=3)
        verify(d, 3, big, "--map", seed=3)

        # The newest step, small again: all of it in memory, served from there.
        save(d, 4, LAYOUT, seed=4)
        steps, mem = memory_steps(d)
        check(steps.get(4) is True and not steps.get(3), "step 4 not in memory: %s" % steps)
        before = disk_reads(d)
        verify(d, 4, LAYOUT, seed=4)
        check(disk_reads(d) == before, "step 4 was read from disk")

        # Memory changed after the save (a trainer writing through its
        # mapping of the slot, as a buggy one could): every slot's memfd is
        # scribbled on at the start of every 1 MiB unit.  The READ finds
        # the mismatch, says so, and serves the disk's copy, bit-exact.
        scribble_slots(d)
        verify(d, 4, LAYOUT, seed=4)
        check(disk_reads(d)[0] > before[0], "the changed memory was not replaced by the disk")
        check(re.search(r"changed in memory after it was saved", d.read_log()),
              "no log line naming the changed memory")

        # A restart starts with nothing in memory: the restore reads the disk.
        save(d, 5, LAYOUT, seed=5)
        check(d.stop() == 0, "ckptd did not exit cleanly:\n" + d.read_log()[-3000:])
        check_log_clean(d)
        d.start()
        steps, mem = memory_steps(d)
        check(mem == {"bytes": 0, "steps": 0} and not any(steps.values()),
              "memory after a restart: %s %s" % (steps, mem))
        before = disk_reads(d)
        verify(d, 5, LAYOUT, seed=5)
        verify(d, 5, LAYOUT, "--map", seed=5)
        check(disk_reads(d)[0] > before[0], "the restore after a restart did not read the disk")
        # a clean exit gives every kept extent back (pool_free insists)
        check(d.stop() == 0, "ckptd did not exit cleanly:\n" + d.read_log()[-3000:])
        check_log_clean(d)
    finally:
        d.stop()


def scribble_slots(d):
    """Flip the first byte of every MiB of every slot the daemon has."""
    fd_dir = "/proc/%d/fd" % d.proc.pid
    n = 0
    for name in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, name))
        except OSError:
            continue
        if "ckptd-slot" not in target:
            continue
        fd = os.open(os.path.join(fd_dir, name), os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            for off in range(0, size, MiB):
                b = os.pread(fd, 1, off)
                os.pwrite(fd, bytes([b[0] ^ 0xff]), off)
        finally:
            os.close(fd)
        n += 1
    check(n > 0, "no slot memfd found in " + fd_dir)
    log("scribbled on %d slots" % n)


if __name__ == "__main__":
    run_test(test)
