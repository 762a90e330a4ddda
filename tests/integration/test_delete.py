# SPDX-License-Identifier: MIT
"""ckptctl delete against a real daemon and real saved steps.

keep_latest is large here, so only delete removes anything.  A step that
is neither the newest committed nor pinned goes: its bytes leave the disk
(the trash is emptied), ckptctl list stops showing it, LATEST is
unchanged and the remaining steps restore bit-exact.  The newest
committed step and a pinned one are refused without --force, with the
exact reason and the way out, and change nothing; with --force they go
and LATEST moves down to the newest step left.  Bad input (no such job,
no such step, a step that is not a number, a bad job name) gets its exact
error and changes nothing.  Another uid is refused (EACCES) and changes
nothing; root may delete.  A whole job: refused while it has a committed
step, gone with --force (its directory, its catalog row, `ckptctl list`).
Last, a daemon killed right after a delete comes back with the step
gone and everything else intact."""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import (CKPTCTL, Daemon, check, ctl_json, log, run_test, shards_arg,  # noqa: E402
                     step_dirs, wait_until)

JOB = "deleted-job"


def layout(step):
    return [("w", 4096 * 5 + step), ("b", 300 + step)]


def save(d, job, step):
    d.rank("save", "--job", job, "--step", step, "--rank", 0, "--world", 1,
           "--shards", shards_arg(layout(step)), "--commit")


def verify(d, job, step):
    d.rank("verify", "--job", job, "--step", step, "--rank", 0, "--shards",
           shards_arg(layout(step)))


def listed(d, job):
    return sorted(c["step"] for c in ctl_json(d, "list", job))


def latest(d, job):
    out = d.rank("latest", "--job", job).stdout.split()
    return int(out[0])


def trash_empty(d):
    trash = os.path.join(d.state_dir, "trash")
    return not os.path.isdir(trash) or os.listdir(trash) == []


def expect(d, job, steps, newest):
    """Disk, catalog and LATEST agree on steps; deletion is asynchronous on
    disk, so the directories and the trash are polled."""
    wait_until(lambda: step_dirs(d.state_dir, job) == steps, 10,
               what=lambda: "step dirs %s (are %s)" % (steps, step_dirs(d.state_dir, job)))
    wait_until(lambda: trash_empty(d), 10, what="the trash to be emptied")
    check(listed(d, job) == steps, "ckptctl list %s: %s, want %s" % (job, listed(d, job), steps))
    check(latest(d, job) == newest, "LATEST of %s: %d, want %d" % (job, latest(d, job), newest))
    verify(d, job, newest)


def refused(d, args, rc, text, user=None):
    p = d.ctl(*args, check_rc=False, user=user)
    check(p.returncode == rc and text in p.stderr,
          "ckptctl %s: rc %d %r, want rc %d and %r" % (" ".join(map(str, args)), p.returncode,
                                                     p.stderr.strip(), rc, text))
    return p


def main(tmp):
    os.chmod(tmp, 0o711)  # the other-uid checks need to reach the socket
    extra = ["--local-keep-latest", "100", "--socket-mode", "0666"]
    d = Daemon(tmp, name="delete", extra=extra).start()
    for step in (10, 20, 30, 40):
        save(d, JOB, step)
    d.ctl("pin", JOB, 10)
    expect(d, JOB, [10, 20, 30, 40], 40)

    # an ordinary step: gone from disk and list, LATEST unchanged
    out = d.ctl("delete", JOB, 20).stdout
    check(out.startswith("job %s step 20 deleted" % JOB), "delete says %r" % out)
    expect(d, JOB, [10, 30, 40], 40)
    check("job %s step 20: deleted by uid %d" % (JOB, os.getuid()) in d.read_log(),
          "no log line for the delete")

    # the newest committed step: refused, nothing changes
    refused(d, ["delete", JOB, 40], 1,
            "delete: step 40 is job %s's newest committed step: a restart would restore it; "
            "--force deletes it anyway" % JOB)
    # a pinned step: refused, nothing changes
    refused(d, ["delete", JOB, 10], 1,
            "delete: step 10 of job %s is pinned: ckptctl unpin %s 10 first, or --force "
            "deletes it anyway" % (JOB, JOB))
    # JSON errors on stdout
    p = d.ctl("--json", "delete", JOB, 40, check_rc=False)
    err = json.loads(p.stdout)["error"]
    check(p.returncode == 1 and err["errno"] == "EPERM", "json refusal: %r" % p.stdout)
    expect(d, JOB, [10, 30, 40], 40)

    # bad input: exact errors, nothing changes
    refused(d, ["delete", "no-such-job", 1], 1,
            "delete: no job named 'no-such-job' on this node (ckptctl list shows the jobs)")
    refused(d, ["delete", JOB, 25], 1,
            "delete: job '%s' has no step 25 on this node (ckptctl list %s shows its steps)"
            % (JOB, JOB))
    refused(d, ["delete", JOB, "x"], 2, "STEP must be an integer from 0 to")
    refused(d, ["delete", JOB, "-3"], 2, "STEP must be an integer from 0 to")
    refused(d, ["delete", "a/b", 1], 2, "'a/b' is not a valid job name")
    refused(d, ["delete"], 2, "usage: delete JOB [STEP] [--force]")
    refused(d, ["delete", JOB, 1, 2], 2, "usage: delete JOB [STEP] [--force]")
    expect(d, JOB, [10, 30, 40], 40)

    # another uid: refused, nothing changes (root can run as another uid)
    if os.getuid() == 0:
        refused(d, ["delete", JOB, 30, "--force"], 1,
                "delete: job '%s' belongs to uid 0: only its owner or root may delete its "
                "checkpoints" % JOB, user=65534)
        refused(d, ["delete", JOB, "--force"], 1, "belongs to uid 0", user=65534)
        expect(d, JOB, [10, 30, 40], 40)
    else:
        log("not root: the other-uid refusal is not tried")

    # --force: the pinned step and the newest committed one go
    d.ctl("delete", JOB, 10, "--force")
    expect(d, JOB, [30, 40], 40)
    r = ctl_json(d, "delete", JOB, 40, "--force")
    check(r["steps"] == 1 and r["bytes"] == sum(s for _, s in layout(40)),
          "json reply of a forced delete: %s" % r)
    expect(d, JOB, [30], 30)  # LATEST moved down to the newest step left

    # a whole job: refused while it has a committed step, then with --force
    other = "whole-job"
    for step in (1, 2, 3):
        save(d, other, step)
    refused(d, ["delete", other], 1,
            "delete: cannot delete job %s: step 3 is job %s's newest committed step" % (other, other))
    check(step_dirs(d.state_dir, other) == [1, 2, 3], "refused whole-job delete changed disk")
    out = d.ctl("delete", other, "--force").stdout
    check(out.startswith("job %s deleted: 3 steps" % other), "whole-job delete says %r" % out)
    wait_until(lambda: not os.path.exists(os.path.join(d.state_dir, "jobs", other)), 10,
               what="the job's directory to go")
    wait_until(lambda: trash_empty(d), 10, what="the trash to be emptied")
    jobs = [j["name"] for j in ctl_json(d, "list")]
    check(other not in jobs and JOB in jobs, "jobs after the whole-job delete: %s" % jobs)
    refused(d, ["delete", other, 1], 1, "no job named '%s'" % other)
    # the other job was not touched
    expect(d, JOB, [30], 30)

    # a crash right after a delete: the step stays gone, the rest intact
    save(d, JOB, 50)
    save(d, JOB, 60)
    d.ctl("delete", JOB, 50)
    d.kill(signal.SIGKILL)
    d = Daemon(tmp, name="delete", extra=extra).start()
    expect(d, JOB, [30, 60], 60)
    verify(d, JOB, 30)
    check(d.stop() == 0, "ckptd did not exit cleanly")
    check(d.catalog_integrity() == "ok", "catalog integrity check failed")


run_test(main)
