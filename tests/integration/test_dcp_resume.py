# SPDX-License-Identifier: MIT
"""Exact resume through ckptd.dcp (issue 11): the example trainer
(client/python/examples/train.py: FSDP2 on gloo, 2 ranks, dcp.async_save
every few steps through CkptdWriter) trains N steps uninterrupted; then a
second job trains again, one rank is SIGKILLed at a random step after a
checkpoint (a step that is not itself a checkpoint), every rank is
restarted and resumes from the newest committed step (CkptdReader,
checkpoint_id None).  The loss of every step, as the trainer prints it
(float.hex()), equals the uninterrupted run's bit for bit — the steps the
crashed run printed, and those the resumed run printed again.

Skips (77) when torch or ckptd.dcp cannot be imported.
CKPT_TEST_DCP_BACKEND=fs runs the same against DCP's FileSystemWriter
(no daemon is used then; for working on the test itself)."""
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
SRC = os.environ.get("CKPT_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "client", "python"))
from harness import Daemon, SkipTest, check, log, run_test  # noqa: E402

TRAIN = os.path.join(SRC, "client", "python", "examples", "train.py")
STEPS = 14
EVERY = 3
LINE = re.compile(r"^step (\d+) loss (\S+)$")


def losses(text):
    """{step: hex loss} of a trainer's stdout; a step printed twice must agree."""
    out = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            step = int(m.group(1))
            check(out.get(step, m.group(2)) == m.group(2),
                  "step %d printed twice with different losses" % step)
            out[step] = m.group(2)
    return out


def train(env, backend, tmp, job, *extra, expect_ok=True):
    cmd = [sys.executable, TRAIN, "--nproc", "2", "--job", job, "--steps", str(STEPS),
           "--ckpt-every", str(EVERY), "--backend", backend, "--dir", os.path.join(tmp, "fs"),
           "--pg-timeout", "30"] + [str(a) for a in extra]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if expect_ok:
        check(p.returncode == 0, "%s failed (%d):\n%s\n%s" % (" ".join(cmd), p.returncode,
                                                               p.stdout, p.stderr[-4000:]))
    return p


def main(tmp):
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise SkipTest("torch is not importable (%s); DEVELOPERS.md installs torch==2.13.0" % e)
    backend = os.environ.get("CKPT_TEST_DCP_BACKEND", "ckptd")
    env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "client", "python"), OMP_NUM_THREADS="1")
    d = None
    if backend == "ckptd":
        try:
            import ckptd.dcp  # noqa: F401
        except ImportError as e:
            raise SkipTest("ckptd.dcp is not importable: %s" % e)
        d = Daemon(tmp, pool="128M", slot="8M", extra=["--local-keep", "2"]).start()
        env["CKPT_SOCKET"] = d.socket

    ref = losses(train(env, backend, tmp, "exact-ref").stdout)
    check(sorted(ref) == list(range(1, STEPS + 1)),
          "the uninterrupted run printed steps %s" % sorted(ref))

    rnd = random.Random(os.environ.get("CKPT_TEST_SEED"))
    crash_at = rnd.choice([s for s in range(EVERY + 1, STEPS) if s % EVERY])
    crash_rank = rnd.randrange(2)
    log("SIGKILL rank %d after step %d (checkpoints every %d steps)" % (crash_rank, crash_at, EVERY))
    p = train(env, backend, tmp, "exact-crash", "--crash-at", crash_at, "--crash-rank", crash_rank,
              expect_ok=False)
    check(p.returncode != 0, "the run that should have crashed exited 0:\n%s" % p.stderr[-2000:])
    crashed = losses(p.stdout)
    check(crash_at in crashed,
          "the crashed run did not get to step %d: %s" % (crash_at, sorted(crashed)))

    p = train(env, backend, tmp, "exact-crash")
    resumed = losses(p.stdout)
    m = re.search(r"resumed from step (\d+)", p.stderr)
    check(m is not None, "the restarted run did not resume:\n%s" % p.stderr[-2000:])
    start = int(m.group(1))
    check(EVERY <= start <= crash_at and start % EVERY == 0,
          "resumed from step %d, not a checkpoint at or before the crash at %d" % (start, crash_at))
    check(sorted(resumed) == list(range(start + 1, STEPS + 1)),
          "the resumed run printed steps %s, not %d..%d" % (sorted(resumed), start + 1, STEPS))
    for step in range(1, STEPS + 1):
        got = [("crashed run", crashed[step])] if step in crashed else []
        got += [("resumed run", resumed[step])] if step in resumed else []
        check(got, "step %d was printed by neither run" % step)
        for who, value in got:
            check(value == ref[step], "step %d: the %s's loss %s differs from the uninterrupted "
                  "run's %s" % (step, who, value, ref[step]))
    log("resumed from step %d; all %d losses equal the uninterrupted run's (%d printed again)"
        % (start, STEPS, len(set(crashed) & set(resumed))))
    if d is not None:
        d.stop()


if __name__ == "__main__":
    run_test(main)
