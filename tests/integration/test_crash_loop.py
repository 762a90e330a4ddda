# SPDX-License-Identifier: MIT
"""SIGKILL the daemon at random moments of concurrent saves and commits,
again and again, on the same state directory.

Each iteration starts ckptd, starts 2-4 trainer ranks that save step N
(shards of a few MiB, some zero-copy) and commit it, kills the daemon with
SIGKILL after a random 0-300 ms (at most 1.5x what an undisturbed save and
commit takes here, so most kills land mid-flight), and waits for the ranks
to notice.  After
every restart:

  - every step the test saw committed (a rank's commit returned 0) that
    retention should still keep is listed committed and restores bit-exact
    (the newest fully, every rank; one older one spot-checked);
  - `latest` is at least the newest step seen committed, and whatever step
    it names restores fully (a commit that was in flight may have landed or
    not: both are fine, a half-landed one is not);
  - no step shows as committed without its COMMITTED file, and every
    committed step has all its ranks;
  - no `.rank-*.tmp` directory survived the start;
  - the catalog passes PRAGMA integrity_check;
  - a new save and commit work.

The RNG seed is printed (set CKPT_CRASH_SEED to replay a run); iterations
default to 60 (CKPT_CRASH_ITERATIONS)."""
import json
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import Daemon, TestFailure, check, log, run_test, shards_arg  # noqa: E402

MiB = 1 << 20
JOB = "crashy"
PROBE_JOB = "probe"
KEEP = 3
ITERATIONS = int(os.environ.get("CKPT_CRASH_ITERATIONS", "60"))


def shard_spec(step, rank):
    # a few MiB: more than a 4 MiB slot for some, odd sizes for all
    return [("weights", 5 * MiB + 4097 * rank + step % 1000),
            ("optim", 300000 + 13 * rank),
            ("tiny", 1 + rank)]


def ckpt_list(d, job):
    p = d.ctl("--json", "list", job, check_rc=False)
    if p.returncode != 0:
        if "no job" in p.stderr or "ENOENT" in p.stderr or "not found" in p.stderr:
            return []
        raise TestFailure("ckptctl list %s failed: %s%s" % (job, p.stdout, p.stderr))
    return json.loads(p.stdout)


def verify_ranks(d, step, world, ranks):
    procs = [(r, d.rank_async("verify", "--job", JOB, "--step", step, "--rank", r,
                              "--shards", shards_arg(shard_spec(step, r))))
             for r in ranks]
    for r, p in procs:
        out, err = p.communicate(timeout=120)
        check(p.returncode == 0, "step %d rank %d (world %d) does not restore: rc=%d %s"
              % (step, r, world, p.returncode, err[-1500:]))


def tmp_dirs(state_dir):
    out = []
    for root, dirs, _ in os.walk(os.path.join(state_dir, "jobs")):
        out += [os.path.join(root, x) for x in dirs if x.startswith(".rank-")]
    return out


def check_after_start(d, rng, seen, worlds, it):
    """Everything the test knows must hold right after a (re)start."""
    state = d.state_dir
    left = tmp_dirs(state)
    check(not left, "iteration %d: tmp dirs survived the start: %s" % (it, left))

    entries = ckpt_list(d, JOB)
    committed = sorted(e["step"] for e in entries if e["state"] == "committed")
    by_step = {e["step"]: e for e in entries}
    for s in committed:
        e = by_step[s]
        check(os.path.exists(os.path.join(state, "jobs", JOB, "%020d" % s, "COMMITTED")),
              "iteration %d: step %d listed committed without a COMMITTED file" % (it, s))
        check(e["ranks_local"] == e["world_size"] == worlds[s],
              "iteration %d: committed step %d has %d of %d ranks (world %d)"
              % (it, s, e["ranks_local"], e["world_size"], worlds[s]))
    # a COMMITTED file on disk means committed in the listing, too: the
    # catalog is rebuilt from the disk at start
    job_dir = os.path.join(state, "jobs", JOB)
    if os.path.isdir(job_dir):
        for name in os.listdir(job_dir):
            if os.path.exists(os.path.join(job_dir, name, "COMMITTED")):
                check(int(name) in committed, "iteration %d: step %s has a COMMITTED file but "
                      "is listed as %s" % (it, name, by_step.get(int(name), {}).get("state")))

    # every step seen committed is still there unless KEEP newer ones are
    for s in seen:
        newer = sum(1 for c in committed if c > s)
        if newer < KEEP:
            check(s in committed, "iteration %d: step %d was committed (a commit returned 0) "
                  "but is listed as %s; committed now: %s"
                  % (it, s, by_step.get(s, {}).get("state", "missing"), committed))

    if seen or committed:
        p = d.rank("latest", "--job", JOB, check_rc=False)
        check(p.returncode == 0, "iteration %d: no latest although steps %s were committed: %s"
              % (it, sorted(seen)[-3:], p.stderr))
        latest, world = (int(x) for x in p.stdout.split())
        check(not seen or latest >= max(seen), "iteration %d: latest %d < %d, the newest step "
              "seen committed" % (it, latest, max(seen) if seen else -1))
        check(latest in committed and committed[-1] == latest,
              "iteration %d: latest %d is not the newest committed step %s"
              % (it, latest, committed))
        check(world == worlds[latest], "iteration %d: latest world %d, step %d had %d"
              % (it, world, latest, worlds[latest]))
        verify_ranks(d, latest, world, range(world))
        older = [s for s in committed if s != latest]
        if older:
            s = rng.choice(older)
            verify_ranks(d, s, worlds[s], [rng.randrange(worlds[s])])

    check(d.catalog_integrity() == "ok", "iteration %d: catalog integrity check failed" % it)

    # a new save and commit work (another job, one rank, zero-copy)
    spec = [("p", MiB + it)]
    d.rank("save", "--job", PROBE_JOB, "--step", it, "--shards", shards_arg(spec),
           "--zero-copy", "--commit", timeout=60)
    d.rank("verify", "--job", PROBE_JOB, "--step", it, "--shards", shards_arg(spec))


def main(tmp):
    seed = int(os.environ.get("CKPT_CRASH_SEED", str(int(time.time() * 1000) % 1000000007)))
    log("crash loop: seed %d (CKPT_CRASH_SEED=%d to replay), %d iterations"
        % (seed, seed, ITERATIONS))
    rng = random.Random(seed)
    state = os.path.join(tmp, "state")
    extra = ["--local-keep", str(KEEP)]

    seen = set()    # steps whose commit returned 0 to some rank
    worlds = {}     # step -> world size
    outcomes = {"committed": 0, "not committed": 0}
    started = time.monotonic()

    def start_ranks(d, step, world, it):
        procs = []
        for r in range(world):
            args = ["save", "--job", JOB, "--step", step, "--rank", r, "--world", world,
                    "--shards", shards_arg(shard_spec(step, r)), "--commit", "--timeout", 20000]
            if (r + it) % 2:
                args.append("--zero-copy")
            procs.append(d.rank_async(*args))
        return procs

    # Calibrate: how long does an undisturbed 4-rank save + commit take
    # here?  Kills are spread over 0..300 ms, but no further than a little
    # past that, so most land while something is in flight rather than
    # after everything is done.
    d = Daemon(tmp, name="crash", state_dir=state, pool="64M", slot="4M", extra=extra).start()
    worlds[100] = 4
    t0 = time.monotonic()
    for r, p in enumerate(start_ranks(d, 100, 4, 0)):
        out, err = p.communicate(timeout=120)
        check(p.returncode == 0, "calibration rank %d failed: %s" % (r, err))
    full = time.monotonic() - t0
    seen.add(100)
    window = min(0.3, max(0.05, 1.5 * full))
    log("an undisturbed save + commit takes %.0f ms; kills land in 0..%.0f ms"
        % (full * 1000, window * 1000))
    d.kill(signal.SIGKILL)

    it = 0
    for it in range(1, ITERATIONS + 1):
        d = Daemon(tmp, name="crash", state_dir=state, pool="64M", slot="4M",
                   extra=extra).start()
        check_after_start(d, rng, seen, worlds, it)

        step = 100 + it
        world = rng.randint(2, 4)
        worlds[step] = world
        procs = start_ranks(d, step, world, it)
        delay = rng.uniform(0, window)
        time.sleep(delay)
        d.kill(signal.SIGKILL)

        committed = False
        for r, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=60)
            except Exception:
                p.kill()
                raise TestFailure("iteration %d: rank %d hung after the daemon died" % (it, r))
            if p.returncode == 0:
                committed = True
            elif p.returncode != 1 or "ERROR " not in err:
                # 1 + "ERROR ...": the daemon went away; anything else
                # (a content mismatch, a crash) is a failure
                raise TestFailure("iteration %d: rank %d exited %d: %s"
                                  % (it, r, p.returncode, err[-1500:]))
        if committed:
            seen.add(step)
        outcomes["committed" if committed else "not committed"] += 1
        log("iteration %d: step %d world %d killed after %3.0f ms: %s"
            % (it, step, world, delay * 1000, "committed" if committed else "not committed"))

    # a last start: the same checks, then a clean shutdown
    d = Daemon(tmp, name="crash", state_dir=state, pool="64M", slot="4M", extra=extra).start()
    check_after_start(d, rng, seen, worlds, it + 1)
    check(d.stop() == 0, "ckptd did not exit cleanly on SIGTERM")
    text = d.read_log()
    for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
        check(marker not in text, "daemon log holds a sanitizer report (%s)" % marker)
    log("crash loop: %d iterations in %.0f s, %s; seed %d"
        % (it, time.monotonic() - started, outcomes, seed))
    check(outcomes["committed"] > 0, "no iteration committed before the kill: the test "
          "exercised nothing but startup (seed %d)" % seed)


run_test(main)
