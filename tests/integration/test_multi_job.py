# SPDX-License-Identifier: MIT
"""Several jobs through one daemon at once.

Three jobs (2, 3 and 4 ranks) with different shard layouts and seeds save
concurrently through a small pool, so their windows interleave in the same
slots; two of them even use the same step number and shard names.  Every
job must commit and every rank restore bit-exact in a fresh process — a
mix-up between jobs, ranks or shards shows as a content mismatch.

Then the re-save rules: a rank saved again before its step is committed
replaces the first copy (the restore returns the NEW bytes and layout, and
not the old ones), and a save of a step that is already committed is
refused with -EEXIST and changes nothing."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import (Daemon, check, ctl_json, log, run_test, shards_arg,  # noqa: E402
                     step_path, wait_until)

MiB = 1024 * 1024

# job -> (step, world, seed, layout(rank) -> [(shard, size)])
JOBS = {
    "bert-large.a": (100, 2, 11, lambda r: [("model", 9 * MiB + 4097 * r),
                                            ("optim", 3 * MiB + 7), ("rng", 16)]),
    # same step as bert, and a shard also called "model"
    "gpt2_xl-run@2": (100, 3, 22, lambda r: [("model", 5 * MiB + 1), ("layers.0", 12 * MiB + r),
                                             ("empty", 0)]),
    "t5:small": (7, 4, 33, lambda r: [("model", 7 * MiB - 3 + r), ("x", 1)]),
}


def save_args(job, step, world, seed, rank, layout, extra=()):
    return ["save", "--job", job, "--step", step, "--rank", rank, "--world", world,
            "--seed", seed, "--shards", shards_arg(layout)] + list(extra)


def verify_args(job, step, rank, seed, layout, extra=()):
    return ["verify", "--job", job, "--step", step, "--rank", rank, "--seed", seed,
            "--shards", shards_arg(layout)] + list(extra)


def wait_all(procs, what):
    for name, p in procs:
        out, err = p.communicate(timeout=300)
        check(p.returncode == 0, "%s %s failed (%d): %s%s" % (what, name, p.returncode, out, err))


def concurrent_jobs(d):
    # every rank of every job at once; odd ranks use the zero-copy API
    procs = []
    for job, (step, world, seed, layout) in JOBS.items():
        for r in range(world):
            extra = ["--zero-copy"] if r % 2 else []
            procs.append(("%s rank %d" % (job, r),
                          d.rank_async(*save_args(job, step, world, seed, r, layout(r), extra))))
    wait_all(procs, "save")
    log("saved %d ranks of %d jobs concurrently" % (len(procs), len(JOBS)))

    # commit the three jobs concurrently too
    wait_all([(job, d.rank_async("commit", "--job", job, "--step", step))
              for job, (step, _, _, _) in JOBS.items()], "commit")

    for job, (step, world, seed, layout) in JOBS.items():
        out = d.rank("latest", "--job", job).stdout.split()
        check(out == [str(step), str(world)], "job %s: latest is %s, want %d %d"
              % (job, out, step, world))

    # restore every rank in fresh processes, concurrently
    procs = []
    for job, (step, world, seed, layout) in JOBS.items():
        for r in range(world):
            extra = ["--map"] if r == 0 else []
            procs.append(("%s rank %d" % (job, r),
                          d.rank_async(*verify_args(job, step, r, seed, layout(r), extra))))
    wait_all(procs, "verify")

    # the verify really compares bytes: the wrong seed, or another job's
    # layout under the same step, is a mismatch (exit 3)
    p = d.rank(*verify_args("bert-large.a", 100, 0, 22, JOBS["bert-large.a"][3](0)),
               check_rc=False)
    check(p.returncode == 3, "verify with a wrong seed exited %d, want 3 (mismatch): %s"
          % (p.returncode, p.stderr))
    p = d.rank(*verify_args("gpt2_xl-run@2", 100, 1, 22, JOBS["bert-large.a"][3](1)),
               check_rc=False)
    check(p.returncode == 3, "verify with another job's layout exited %d, want 3: %s"
          % (p.returncode, p.stderr))

    jobs = {j["name"]: j for j in ctl_json(d, "list")}
    check(set(jobs) == set(JOBS),
          "ckptctl list shows jobs %s, want %s" % (sorted(jobs), sorted(JOBS)))
    for job, (step, world, seed, layout) in JOBS.items():
        j = jobs[job]
        want_bytes = sum(s for r in range(world) for _, s in layout(r))
        check(j["latest_committed"] == step and j["checkpoints"] == 1 and j["committed"] == 1,
              "job %s in ckptctl list: %s" % (job, j))
        check(j["tiers"]["local"]["bytes"] == want_bytes, "job %s holds %d bytes, want %d"
              % (job, j["tiers"]["local"]["bytes"], want_bytes))


def resave(d):
    job, step, world = "resave-job", 5, 2
    old = [("weights", 6 * MiB + 123), ("opt", 2 * MiB)]
    new1 = [("weights", 4 * MiB + 5), ("extra", 777)]  # rank 1's second layout

    for r in range(world):
        d.rank(*save_args(job, step, world, 1, r, old))
    d.rank("wait", "--job", job, "--step", step, "--tier", "local")
    # the first copies are on disk, but not readable before the commit
    # (issue 10: a restore reads only committed steps)
    p = d.rank(*verify_args(job, step, 0, 1, old), check_rc=False)
    check(p.returncode == 1 and "ENOENT" in p.stderr and "is not committed" in p.stderr,
          "rank 0 of the uncommitted step: rc %d %s" % (p.returncode, p.stderr.strip()))

    # rank 0 again with other bytes; rank 1 again with another layout: each
    # says it replaced the first copy
    for rank, seed, layout, extra in ((0, 2, old, ["--zero-copy"]), (1, 3, new1, [])):
        p = d.rank(*save_args(job, step, world, seed, rank, layout, extra))
        check("replaced" in p.stdout.split(), "saving rank %d again does not say it replaced "
              "the first copy: %r" % (rank, p.stdout))
    d.rank("commit", "--job", job, "--step", step)

    d.rank(*verify_args(job, step, 0, 2, old, ["--map"]))
    d.rank(*verify_args(job, step, 1, 3, new1))
    p = d.rank(*verify_args(job, step, 0, 1, old), check_rc=False)
    check(p.returncode == 3, "rank 0 still restores the FIRST save's bytes (verify with seed 1 "
          "exited %d, want 3)" % p.returncode)
    p = d.rank(*verify_args(job, step, 1, 1, old), check_rc=False)
    check(p.returncode == 3, "rank 1 still has the first save's layout (exit %d, want 3): %s"
          % (p.returncode, p.stderr))

    # only the final ranks remain in the step directory (replaced copies and
    # tmp dirs are gone once the trash is emptied)
    sp = step_path(d.state_dir, job, step)
    wait_until(lambda: sorted(os.listdir(sp)) == ["COMMITTED", "rank-0", "rank-1"], 5,
               what=lambda: "step dir to hold exactly COMMITTED, rank-0, rank-1 (has %s)"
               % sorted(os.listdir(sp)))
    check(sorted(os.listdir(os.path.join(sp, "rank-1"))) == ["MANIFEST", "extra", "weights"],
          "rank-1 holds %s" % sorted(os.listdir(os.path.join(sp, "rank-1"))))

    # a committed step cannot be saved again, by any rank, and nothing changes
    for r, layout in ((0, old), (1, new1)):
        p = d.rank(*save_args(job, step, world, 9, r, layout), check_rc=False)
        check(p.returncode == 1 and "ERROR EEXIST" in p.stderr,
              "re-saving rank %d of a committed step: exit %d, stderr %r; want ERROR EEXIST"
              % (r, p.returncode, p.stderr))
    d.rank(*verify_args(job, step, 0, 2, old))
    d.rank(*verify_args(job, step, 1, 3, new1))
    out = d.rank("latest", "--job", job).stdout.split()
    check(out == [str(step), str(world)], "latest of %s is %s" % (job, out))

    # the other jobs were not disturbed
    for job2, (step2, world2, seed2, layout2) in JOBS.items():
        d.rank(*verify_args(job2, step2, world2 - 1, seed2, layout2(world2 - 1)))


def main(tmp):
    # 64 MiB pool of 4 MiB slots for ~130 MiB of concurrent saves: slots are
    # reused across jobs while other jobs' windows are still in flight
    d = Daemon(tmp, pool="64M", slot="4M").start()
    concurrent_jobs(d)
    resave(d)
    check(d.alive(), "ckptd died")
    check(d.stop() == 0, "ckptd did not exit cleanly on SIGTERM")
    check(d.catalog_integrity() == "ok", "catalog integrity check failed")


run_test(main)
