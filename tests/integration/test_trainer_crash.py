# SPDX-License-Identifier: MIT
"""A trainer that dies loses only what it had not handed over.

After ckpt_save_finish() returns the daemon owns the bytes (DESIGN.md,
"Failure semantics"): a trainer SIGKILLed right after its finish returned,
or one that _exit()s there, still gets its shards to disk — another process
waits for tier local, commits the step, and restores it bit-exact.

A trainer killed in the MIDDLE of staging a big shard must not hurt the
daemon: it stays up, returns the lent pool slots, discards the half-save
(no rank directory; its tmp directory disappears), reports the failure to
whoever waits for that step, and accepts a fresh save of the same rank,
which restores bit-exact."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import (Daemon, TestFailure, check, ctl_json, log, run_test, shards_arg,  # noqa: E402
                     pool_at_rest, step_path, wait_until)

MiB = 1024 * 1024
JOB = "crashy-trainer"


def kill_after_finish(d):
    """Rank 1 of step 1: SIGKILL the trainer as soon as its finish returned.

    The trainer (ckpt-testrank save --wait-local) goes on to wait for tier
    local after finish; the test polls the daemon for tier 'staged' (reached
    exactly when SAVE_FINISH is answered) and kills the trainer then.  The
    shard is big and the pool holds all of it, so the disk is normally still
    busy with it when the kill lands; if the trainer got to the end of its
    wait first, the kill proved nothing and the rank is saved again (which
    replaces it: the step is not committed)."""
    layout = [("big", 448 * MiB + 5), ("tail", 4097)]
    for attempt in range(3):
        p = d.rank_async("save", "--job", JOB, "--step", 1, "--rank", 1, "--world", 2,
                         "--shards", shards_arg(layout), "--zero-copy", "--wait-local")
        deadline = time.monotonic() + 120
        while True:
            if p.poll() is not None:
                raise TestFailure("trainer exited (%s) before it reached tier staged: %s"
                                  % (p.returncode, p.stderr.read()))
            check(time.monotonic() < deadline, "rank 1 never reached tier staged")
            q = d.rank("wait", "--job", JOB, "--step", 1, "--tier", "staged", "--timeout", 0,
                       check_rc=False)
            if q.returncode == 0:
                break
            time.sleep(0.005)
        p.send_signal(signal.SIGKILL)
        out, err = p.communicate(timeout=60)
        if p.returncode == -signal.SIGKILL:
            local = os.path.isdir(os.path.join(step_path(d.state_dir, JOB, 1), "rank-1"))
            log("trainer SIGKILLed right after finish (rank already on disk: %s)" % local)
            return layout
        check(p.returncode == 0, "trainer failed (%d): %s" % (p.returncode, err))
        log("attempt %d: the trainer's wait for tier local ended before the SIGKILL; again"
            % attempt)
    raise TestFailure("the trainer always reached tier local before it could be killed")


def exit_after_finish(d):
    """Rank 0 of step 1: the trainer _exit()s the moment finish returns."""
    layout = [("model", 200 * MiB + 3), ("odd", 12289), ("empty", 0)]
    p = d.rank("save", "--job", JOB, "--step", 1, "--rank", 0, "--world", 2,
               "--shards", shards_arg(layout), "--exit-after-finish")
    check(p.returncode == 0, "ckpt-testrank --exit-after-finish exited %d" % p.returncode)
    return layout


def kill_mid_staging(d):
    """Step 2: SIGKILL a trainer ~100 ms into staging a 2 GiB shard."""
    layout = [("huge", 2048 * MiB)]
    p = d.rank_async("save", "--job", JOB, "--step", 2, "--rank", 0, "--world", 1,
                     "--shards", shards_arg(layout), "--zero-copy")
    wait_until(lambda: ctl_json(d, "status")["in_flight"]["saves"] >= 1, 30,
               what="the 2 GiB save to begin")
    time.sleep(0.1)
    check(p.poll() is None, "the 2 GiB save ended (%s) before it could be killed" % p.returncode)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    log("trainer SIGKILLed in the middle of staging")

    check(d.alive(), "ckptd died when a trainer was killed mid-save")
    sp = step_path(d.state_dir, JOB, 2)
    # the half-save is discarded: no rank dir ever, tmp dir gone, slots back
    def rank0_tmp():
        try:
            return [n for n in os.listdir(sp) if n.startswith(".rank-0.") and n.endswith(".tmp")]
        except FileNotFoundError:
            return []
    wait_until(lambda: not rank0_tmp(), 10,
               what=lambda: "the killed save's tmp directory %s to be removed" % rank0_tmp())
    check(not os.path.exists(os.path.join(sp, "rank-0")), "the half-save became a rank directory")
    st = wait_until(lambda: (lambda s: s if s["in_flight"]["saves"] == 0 else None)(
        ctl_json(d, "status")), 10, what="the killed save to leave 'in flight'")
    # rank 1's copy, kept by the memory tier for when the step commits
    pool_at_rest(st)
    check(st["in_flight"] == {"bytes": 0, "shards": 0, "saves": 0},
          "pool slots / in-flight bytes leaked by the killed save: %s %s"
          % (st["pool"], st["in_flight"]))

    # whoever waits for the step is told it failed (not a timeout, not success)
    for tier in ("local", "committed"):
        q = d.rank("wait", "--job", JOB, "--step", 2, "--tier", tier, "--timeout", 5000,
                   check_rc=False)
        check(q.returncode == 1 and "ERROR ECONNRESET" in q.stderr and "disconnected" in q.stderr,
              "wait --tier %s for the killed save: exit %d, %r; want ERROR ECONNRESET"
              % (tier, q.returncode, q.stderr))
    q = d.rank("commit", "--job", JOB, "--step", 2, "--timeout", 5000, check_rc=False)
    check(q.returncode == 1 and "ETIMEDOUT" not in q.stderr,
          "commit of the killed save: exit %d, %r; want an error naming the failure"
          % (q.returncode, q.stderr))
    states = {c["step"]: c["state"] for c in ctl_json(d, "list", JOB)}
    check(states.get(2) == "failed", "ckptctl list shows step 2 as %r, want failed" % states.get(2))

    # the same rank saved again works and restores bit-exact
    layout2 = [("huge", 64 * MiB + 11)]
    d.rank("save", "--job", JOB, "--step", 2, "--rank", 0, "--world", 1, "--seed", 2,
           "--shards", shards_arg(layout2), "--commit")
    d.rank("verify", "--job", JOB, "--step", 2, "--rank", 0, "--seed", 2,
           "--shards", shards_arg(layout2))
    check(sorted(os.listdir(sp)) == ["COMMITTED", "rank-0"], "step 2 dir holds %s"
          % sorted(os.listdir(sp)))


def main(tmp):
    # the pool holds a whole 448 MiB shard, so finish returns long before the
    # disk is done with it
    d = Daemon(tmp, pool="512M", slot="16M").start()
    layout1 = kill_after_finish(d)
    layout0 = exit_after_finish(d)

    # another process: both dead trainers' ranks reach the disk
    d.rank("wait", "--job", JOB, "--step", 1, "--tier", "local", "--timeout", 60000)
    sp = step_path(d.state_dir, JOB, 1)
    check(sorted(os.listdir(sp)) == ["rank-0", "rank-1"], "step 1 dir holds %s"
          % sorted(os.listdir(sp)))
    d.rank("commit", "--job", JOB, "--step", 1)
    out = d.rank("latest", "--job", JOB).stdout.split()
    check(out == ["1", "2"], "latest is %s" % out)
    d.rank("verify", "--job", JOB, "--step", 1, "--rank", 0, "--shards", shards_arg(layout0))
    d.rank("verify", "--job", JOB, "--step", 1, "--rank", 1, "--shards", shards_arg(layout1))

    kill_mid_staging(d)

    check(d.stop() == 0, "ckptd did not exit cleanly")
    # and both steps are intact after a restart
    d2 = Daemon(tmp, state_dir=d.state_dir, pool="64M", slot="16M").start()
    states = {c["step"]: c["state"] for c in ctl_json(d2, "list", JOB)}
    check(states == {1: "committed", 2: "committed"}, "after restart: %s" % states)
    d2.rank("read", "--job", JOB, "--step", 1, "--rank", 1, "--shard", "big",
            "--offset", 448 * MiB - 7, "--length", 12)
    check(d2.stop() == 0, "ckptd did not exit cleanly")
    check(d2.catalog_integrity() == "ok", "catalog integrity check failed")


run_test(main)
