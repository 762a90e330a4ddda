# SPDX-License-Identifier: MIT
"""A step that is not committed, on one node (issue 10).

Reads, maps and shard lists of it fail with ENOENT and a message that says
the step is not committed (3 of 4 ranks saved), for the ranks saved and the
one missing alike; `ckptctl list` still shows it, `latest` and
`latest --rank` do not name it.  After the 4th rank and the commit the same
calls serve it bit-exact.

Saving a rank of a step that is not committed again replaces the old copy
and says so: ckpt_save_replaced() (ckpt-testrank save prints "replaced"),
and the daemon logs it; after the commit the new bytes are read, not the
old.  A rank's first save says nothing was replaced, and a rank on disk
from an earlier run of the daemon is replaced (and said so) too."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import Daemon, check, ctl_json, log, run_test, shards_arg  # noqa: E402

MiB = 1024 * 1024
JOB, STEP, WORLD = "uncommitted.j", 7, 4


def layout(rank):
    # a shard over a slot (8 MiB) and across blocks, and a tiny one
    return [("model", 9 * MiB + 4097 * rank), ("tiny", 5)]


def refused(p, what, saved=3, world=WORLD, step=STEP, job=JOB):
    """p (a ckpt-testrank run) failed with ENOENT saying the step is not committed."""
    want = "step %d of job '%s' is not committed (%d of %d ranks saved" % (step, job, saved,
                                                                           world)
    check(p.returncode == 1 and "ENOENT" in p.stderr and want in p.stderr,
          "%s: rc %d, stderr %r; want ENOENT and %r" % (what, p.returncode, p.stderr.strip(),
                                                        want))


def save(d, job, step, rank, world, seed=0):
    """Save one rank (on disk when it returns); True when it says it replaced
    an earlier copy."""
    p = d.rank("save", "--job", job, "--step", step, "--rank", rank, "--world", world,
               "--seed", seed, "--shards", shards_arg(layout(rank)), "--wait-local")
    return "replaced" in p.stdout.split()


def not_committed(d):
    for r in range(3):
        check(not save(d, JOB, STEP, r, WORLD), "the first save of rank %d says replaced" % r)
    entry = [e for e in ctl_json(d, "list", JOB) if e["step"] == STEP]
    check(len(entry) == 1 and entry[0]["state"] == "local" and entry[0]["ranks_local"] == 3,
          "ckptctl list does not show step %d as local with 3 ranks: %s" % (STEP, entry))

    for r in range(WORLD):  # rank 3 is not saved: the same answer
        refused(d.rank("list", "--job", JOB, "--step", STEP, "--rank", r, check_rc=False),
                "shard list of rank %d" % r)
        refused(d.rank("read", "--job", JOB, "--step", STEP, "--rank", r, "--shard", "model",
                       "--offset", 0, "--length", 4096, check_rc=False), "read of rank %d" % r)
        refused(d.rank("verify", "--job", JOB, "--step", STEP, "--rank", r, "--map",
                       "--shards", shards_arg(layout(r)), check_rc=False), "map of rank %d" % r)
    p = d.rank("latest", "--job", JOB, check_rc=False)
    check(p.returncode == 1 and "ENOENT" in p.stderr,
          "latest names the uncommitted step: rc %d %s%s" % (p.returncode, p.stdout, p.stderr))
    p = d.rank("latest", "--job", JOB, "--rank", 0, check_rc=False)
    check(p.returncode == 1 and "ENOENT" in p.stderr,
          "latest --rank 0 names the uncommitted step: rc %d %s%s"
          % (p.returncode, p.stdout, p.stderr))
    # a step that does not exist keeps its own message
    p = d.rank("list", "--job", JOB, "--step", STEP + 1, "--rank", 0, check_rc=False)
    check(p.returncode == 1 and "ENOENT" in p.stderr and "is not committed" not in p.stderr,
          "shard list of a step never saved: %s" % p.stderr.strip())
    log("3 of 4 ranks saved: list, read and map refused with 'is not committed'")

    check(not save(d, JOB, STEP, 3, WORLD), "the first save of rank 3 says replaced")
    d.rank("commit", "--job", JOB, "--step", STEP)
    for r in range(WORLD):
        d.rank("verify", "--job", JOB, "--step", STEP, "--rank", r,
               "--shards", shards_arg(layout(r)))
        d.rank("verify", "--job", JOB, "--step", STEP, "--rank", r, "--map",
               "--shards", shards_arg(layout(r)))
        got = d.rank("list", "--job", JOB, "--step", STEP, "--rank", r).stdout.split("\n")
        names = sorted((line.split()[0], int(line.split()[1])) for line in got if line)
        check(names == sorted(layout(r)), "rank %d lists %s, saved %s" % (r, names, layout(r)))
    d.rank("read", "--job", JOB, "--step", STEP, "--rank", 2, "--shard", "model",
           "--offset", 8 * MiB - 3, "--length", MiB + 10)
    log("after the 4th rank and the commit: restored bit-exact")


def replaced(d, tmp):
    job = "replace.j"
    check(not save(d, job, 5, 0, 2, seed=1), "the first save of rank 0 of step 5 says replaced")
    check(save(d, job, 5, 0, 2, seed=2), "saving rank 0 of step 5 again does not say replaced")
    check("step 5 rank 0 saved again" in d.read_log(),
          "the daemon did not log the replacement:\n" + d.read_log()[-2000:])
    check(not save(d, job, 5, 1, 2, seed=1), "a fresh rank (1) says replaced")
    d.rank("commit", "--job", job, "--step", 5)
    d.rank("verify", "--job", job, "--step", 5, "--rank", 0, "--seed", 2,
           "--shards", shards_arg(layout(0)))
    p = d.rank("verify", "--job", job, "--step", 5, "--rank", 0, "--seed", 1,
               "--shards", shards_arg(layout(0)), check_rc=False)
    check(p.returncode == 3, "rank 0 of step 5 still has the first save's bytes (rc %d %s)"
          % (p.returncode, p.stderr.strip()))
    d.rank("verify", "--job", job, "--step", 5, "--rank", 1, "--seed", 1,
           "--shards", shards_arg(layout(1)))
    log("a rank saved twice says replaced; the second copy is what is restored")

    # a rank on disk from an earlier run of the daemon
    check(not save(d, job, 6, 0, 2, seed=1), "the first save of rank 0 of step 6 says replaced")
    check(d.stop() == 0, "unclean exit")
    d2 = Daemon(tmp, name="ckptd2", state_dir=d.state_dir, pool="64M", slot="8M").start()
    check(save(d2, job, 6, 0, 2, seed=3),
          "saving rank 0 of step 6 again after a restart does not say replaced")
    check(not save(d2, job, 6, 1, 2, seed=3), "a fresh rank (1) of step 6 says replaced")
    d2.rank("commit", "--job", job, "--step", 6)
    for r in range(2):
        d2.rank("verify", "--job", job, "--step", 6, "--rank", r, "--seed", 3,
                "--shards", shards_arg(layout(r)))
    log("a rank on disk from an earlier run is replaced, and said so")
    return d2


def no_barrier(d):
    """A commit asked before every rank saved waits for them (no barrier is
    needed, docs/commit.md); one that runs out names the missing ranks."""
    log("commit without a barrier: waits for the missing ranks")
    job = "nobarrier.j"
    save(d, job, 3, 0, 3)
    p = d.rank("commit", "--job", job, "--step", 3, "--timeout", 300, check_rc=False)
    check(p.returncode == 1 and "ETIMEDOUT" in p.stderr and
          "step 3 of job 'nobarrier.j' was not committed within 300 ms: ranks 1, 2 of 3 are "
          "not saved" in p.stderr, "commit with ranks 1, 2 missing: %r" % p.stderr.strip())
    waiter = d.rank_async("commit", "--job", job, "--step", 3, "--timeout", 30000)
    save(d, job, 3, 2, 3)
    save(d, job, 3, 1, 3)
    out, err = waiter.communicate(timeout=60)
    check(waiter.returncode == 0, "the waiting commit failed: %s" % err.strip())
    p = d.rank("latest", "--job", job)
    check(p.stdout.split()[:2] == ["3", "3"], "latest after it: %r" % p.stdout)


def main(tmp):
    d = Daemon(tmp, pool="64M", slot="8M").start()
    not_committed(d)
    no_barrier(d)
    d = replaced(d, tmp)
    check(d.catalog_integrity() == "ok", "catalog integrity check failed")
    check(d.stop() == 0, "unclean exit")


run_test(main)
