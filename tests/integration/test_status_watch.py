#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`ckptctl status --watch` (issue 14): a refreshing view of a live daemon.

On a non-tty stdout it prints a block per interval (a blank line between);
the test reads the blocks while a slow trainer saves and checks that they
follow the save (a save in flight, bytes written growing, the total at the
end), that SIGINT and SIGTERM stop it with exit 0 after a whole block, and
that a daemon going away is shown and retried, not a crash: the watch
picks the daemon up again once it is back.

CKPT_WATCH_CASES=1,2 picks cases.
"""
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (CKPTCTL, CKPTD, TESTRANK, Daemon, check, log, run_cases,  # noqa: E402
                     wait_until)

JOB = "watch"
MiB = 1024 * 1024


class Watch:
    """ckptctl status --watch with its stdout read into blocks."""

    def __init__(self, d, interval="0.5"):
        self.proc = subprocess.Popen([CKPTCTL, "--socket", d.socket, "status", "--watch",
                                      "--interval", interval], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.blocks, self.cur = [], []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            with self.lock:
                if line == "":
                    self.blocks.append(self.cur)
                    self.cur = []
                else:
                    self.cur.append(line)

    def count(self):
        with self.lock:
            return len(self.blocks)

    def since(self, n):
        with self.lock:
            return list(self.blocks[n:])

    def stop(self, sig):
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=10)
        self.thread.join(5)
        return rc, self.proc.stderr.read()


def field(block, name):
    for line in block:
        if line.startswith(name + " "):
            return line[len(name):].strip()
    return None


def written_total(block):
    m = re.search(r"written \S+(?: \S+)? \((\d+(?:\.\d)? \S+)\)", field(block, "saves") or "")
    return m.group(1) if m else None


def case_under_save(ctx):
    d = Daemon(ctx.tmp, pool="64M", slot="1M").start()
    ctx.daemons.append(d)
    w = Watch(d)
    ctx.cleanups.append(lambda: w.proc.poll() is None and w.proc.kill())
    wait_until(lambda: w.count() >= 1, 10, what="the first block")
    # a slow trainer: 12 windows of 1 MiB, holding each 0.25 s
    saver = d.rank_async("save", "--job", JOB, "--step", 1, "--shards", "w:%d" % (12 * MiB),
                         "--zero-copy", "--hold", 250, "--commit")
    n0 = w.count()
    out, err = saver.communicate(timeout=120)
    check(saver.returncode == 0, "the save failed: %s" % err)
    # two blocks after the save, so that one shows its end state
    wait_until(lambda: w.count() >= n0 + 0 and len(w.since(n0)) >= 2 and
               written_total(w.since(n0)[-1]) == "12.0 MiB", 10,
               what=lambda: "a block after the save showing 12.0 MiB written: %s"
               % w.since(n0)[-1:])
    blocks = w.since(0)
    check(len(blocks) >= 4, "%d blocks over a 3 s save at 0.5 s intervals" % len(blocks))
    for b in blocks:
        check(len(b) == 8 and b[0].endswith("every 0.5 s (Ctrl-C stops)")
              and b[1].startswith("ckptd ") and [ln.split()[0] for ln in b[2:]] ==
              ["saves", "replication", "uploads", "restores", "scrub", "errors"],
              "a block of the wrong shape:\n%s" % "\n".join(b))
        check("\033" not in "".join(b), "ANSI escapes on a non-tty")
    totals = [written_total(b) for b in blocks]
    during = [b for b in blocks if re.search(r"; 1 saves, ", field(b, "saves"))]
    check(during, "no block showed the save in flight: %s" % [field(b, "saves") for b in blocks])
    # staged bytes pile up (each window waits for the whole rank to be
    # checked) and the pool bar with them; written once the rank is on disk
    staged = [re.search(r"1 shards, (\S+ \S+) not yet on disk", field(b, "saves")).group(1)
              for b in during]
    fill = [int(re.search(r"\] +(\d+)% of the pool", field(b, "saves")).group(1))
            for b in during]
    check(len(set(staged)) >= 3 and len(set(fill)) >= 3 and fill == sorted(fill),
          "the blocks during the save should show the staged bytes and the pool fill "
          "growing: %s, %s%%" % (staged, fill))
    check(totals[0] == "0 B" and totals[-1] == "12.0 MiB",
          "written total: %s, want 0 B first and 12.0 MiB at the end" % totals)
    check(re.search(r"written [1-9][\d.]* \S+/s", field(blocks[-1], "saves")
                    + field(blocks[-2], "saves")),
          "no write rate once the rank is on disk: %s" % [field(b, "saves") for b in blocks[-2:]])
    log("   staged over the blocks: %s; pool %s%%" % (staged, fill))
    log("   written over the blocks: %s" % totals)
    n = w.count()
    rc, err = w.stop(signal.SIGINT)
    check(rc == 0 and err == "", "SIGINT: exit %d, stderr %r" % (rc, err))
    check(w.cur == [], "the output ends inside a block: %s" % w.cur)
    check(d.stop() == 0, "unclean exit")
    log("   %d blocks, SIGINT -> 0" % n)


def case_daemon_gone(ctx):
    d = Daemon(ctx.tmp, pool="64M", slot="1M").start()
    ctx.daemons.append(d)
    w = Watch(d, interval="0.3")
    ctx.cleanups.append(lambda: w.proc.poll() is None and w.proc.kill())
    wait_until(lambda: w.count() >= 2, 10, what="two blocks")
    d.kill()
    n = w.count()
    gone = wait_until(lambda: [b for b in w.since(n) if len(b) == 2], 10,
                      what="a block saying the daemon is gone")
    check(gone[0][1].startswith("ckptd unreachable at %s: " % d.socket)
          and gone[0][1].endswith("; trying again every 0.3 s"), "gone block: %s" % gone[0])
    check(w.proc.poll() is None, "the watch exited with the daemon")
    d.start()
    n = w.count()
    wait_until(lambda: [b for b in w.since(n) if len(b) == 8], 10,
               what="a full block once the daemon is back")
    rc, err = w.stop(signal.SIGTERM)
    check(rc == 0, "SIGTERM: exit %d %s" % (rc, err))
    log("   gone: %s" % gone[0][1])
    check(d.stop() == 0, "unclean exit")


def case_tty(ctx):
    """On a terminal each block replaces the last (ANSI home + clear)."""
    d = Daemon(ctx.tmp, pool="64M", slot="1M").start()
    ctx.daemons.append(d)
    master, slave = pty.openpty()
    p = subprocess.Popen([CKPTCTL, "--socket", d.socket, "status", "--watch", "--interval",
                          "0.2"], stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 10
    while out.count(b"\x1b[H\x1b[2J") < 3 and time.monotonic() < deadline:
        out += os.read(master, 4096)
    p.send_signal(signal.SIGINT)
    rc = p.wait(timeout=10)
    os.close(master)
    screens = out.split(b"\x1b[H\x1b[2J")
    check(rc == 0 and len(screens) >= 4 and screens[0] == b""
          and all(b"\r\nsaves " in sc for sc in screens[1:3]),
          "status --watch on a tty: exit %d, %r" % (rc, out[:400]))
    check(d.stop() == 0, "unclean exit")


def case_usage(ctx):
    d = Daemon(ctx.tmp, pool="64M", slot="1M").start()
    ctx.daemons.append(d)
    for args, msg in ((["--interval", "1"], "ckptctl: usage: status [--watch [--interval S]]"),
                      (["--watch", "--interval", "0"], "ckptctl: --interval '0': want seconds "
                       "(2, 0.5, 2s) or milliseconds (500ms), from 0.1 s to a day"),
                      (["--watch", "--json"], "ckptctl: status --watch is for people; scripts "
                       "poll 'ckptctl status --json'")):
        p = d.ctl("status", *args, check_rc=False)
        check(p.returncode == 2 and p.stderr.strip() == msg,
              "status %s: %d %r" % (args, p.returncode, p.stderr))
    check(d.stop() == 0, "unclean exit")


CASES = [
    (1, "blocks follow a save; SIGINT stops with 0", case_under_save),
    (2, "a daemon gone is shown and retried; SIGTERM stops with 0", case_daemon_gone),
    (3, "usage errors", case_usage),
    (4, "on a terminal each block replaces the last", case_tty),
]


if __name__ == "__main__":
    sys.exit(run_cases(CASES, "CKPT_WATCH_CASES", "ckptd-watch-", (CKPTD, TESTRANK, CKPTCTL)))
