# SPDX-License-Identifier: MIT
"""`ckptctl status` shows a uid nothing of another uid's jobs.

Root saves a job and then tears a save of it (a client that begins a save
and goes away: the daemon logs "trainer (pid N) disconnected ..." naming the
job); so does uid 65534 with a job of its own.  `ckptctl status` and
`ckptctl --json status`, run as 65534 (setpriv), must show neither root's
job name nor root's trainer pid -- not in the last error, not in the job
table, nowhere -- and must show 65534's own torn save.  Root still sees
both, and the daemon-wide facts (pool, clients) stay visible to both
(docs/ckptctl.1, "What status shows to whom")."""
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import (RAWCLIENT, Daemon, SkipTest, as_user, check,  # noqa: E402
                     check_log_clean, log, run_test, shards_arg, wait_until)

NOBODY = 65534
ROOT_JOB = "rootsecret-llama"
NOBODY_JOB = "nobody-own-job"


def torn_save(d, job, step, user=None):
    """Begin a save of job on a fresh connection and hang up: the daemon fails
    it, naming the job and the client's pid.  Returns that pid."""
    cmd = as_user(user) + [RAWCLIENT, "--socket", d.socket, "many-shards", job, str(step), "1"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=60)
    check(p.returncode == 0 and "SHARD_BEGIN OK x1" in out,
          "%s: could not begin the save to tear: %s%s" % (" ".join(cmd), out, err))
    # setpriv execs the client: the pid the daemon saw is the child's
    return p.pid


def status(d, user=None):
    text = d.ctl("status", user=user).stdout
    doc = json.loads(d.ctl("--json", "status", user=user).stdout)
    return text, doc


def mentions(out, job, pid):
    """What of (job, pid) appears in out."""
    found = []
    if job in out:
        found.append("job name %r" % job)
    if re.search(r"\bpid %d\b" % pid, out) or re.search(r"(?<![0-9])%d(?![0-9])" % pid, out):
        found.append("pid %d" % pid)
    return found


def main(tmp):
    if os.getuid() != 0:
        raise SkipTest("needs root to run ckptctl as uid %d (setpriv)" % NOBODY)
    os.chmod(tmp, 0o755)  # nobody must reach the socket
    d = Daemon(tmp, pool="64M", slot="4M", extra=["--socket-mode", "0666"]).start()

    d.rank("save", "--job", ROOT_JOB, "--step", 1, "--shards", shards_arg([("w", 100000)]),
           "--commit")
    root_pid = torn_save(d, ROOT_JOB, 2)
    wait_until(lambda: ROOT_JOB in d.ctl("--json", "status").stdout, timeout=10,
               what="root's torn save to show in root's status")
    text, doc = status(d)
    check(ROOT_JOB in doc["last_error"] and "pid %d" % root_pid in doc["last_error"],
          "root's status does not name its own torn save (job %s, pid %d): %r"
          % (ROOT_JOB, root_pid, doc["last_error"]))
    check(doc["errors"] >= 1, "root's status counts no error: %s" % doc)
    log("root sees its torn save: %s" % doc["last_error"])

    # another uid: nothing of root's job, in either form
    text, doc = status(d, user=NOBODY)
    for form, out in (("status", text), ("--json status", json.dumps(doc))):
        found = mentions(out, ROOT_JOB, root_pid)
        check(not found, "ckptctl %s as uid %d shows root's %s:\n%s"
              % (form, NOBODY, " and ".join(found), out))
    check(doc["last_error"] == "" and doc["errors"] == 0,
          "uid %d is shown errors it did not cause: errors=%s last_error=%r"
          % (NOBODY, doc["errors"], doc["last_error"]))
    check(doc["jobs"] == [], "uid %d is shown jobs: %s" % (NOBODY, doc["jobs"]))
    # daemon-wide facts stay visible
    check(doc["pool"]["slots"] == 16 and doc["clients"] >= 1,
          "uid %d does not see the daemon's pool and load: %s" % (NOBODY, doc))
    log("uid %d sees nothing of root's job" % NOBODY)

    # its own torn save it does see, and root sees that one too
    d.rank("save", "--job", NOBODY_JOB, "--step", 1, "--shards", shards_arg([("w", 1000)]),
           "--commit", user=NOBODY)
    nobody_pid = torn_save(d, NOBODY_JOB, 2, user=NOBODY)
    wait_until(lambda: NOBODY_JOB in d.ctl("--json", "status", user=NOBODY).stdout, timeout=10,
               what="uid %d's torn save to show in its status" % NOBODY)
    text, doc = status(d, user=NOBODY)
    check("pid %d" % nobody_pid in doc["last_error"] and doc["errors"] == 1,
          "uid %d's status: want its own torn save (pid %d) as the one error, got errors=%s %r"
          % (NOBODY, nobody_pid, doc["errors"], doc["last_error"]))
    check([j["name"] for j in doc["jobs"]] == [NOBODY_JOB], "uid %d's job table: %s"
          % (NOBODY, doc["jobs"]))
    for form, out in (("status", text), ("--json status", json.dumps(doc))):
        found = mentions(out, ROOT_JOB, root_pid)
        check(not found, "ckptctl %s as uid %d shows root's %s:\n%s"
              % (form, NOBODY, " and ".join(found), out))
    text, doc = status(d)
    check(NOBODY_JOB in doc["last_error"] and doc["errors"] >= 2,
          "root's status does not show the daemon's last error (uid %d's torn save): %s"
          % (NOBODY, doc["last_error"]))
    check(sorted(j["name"] for j in doc["jobs"]) == sorted([ROOT_JOB, NOBODY_JOB]),
          "root's job table: %s" % doc["jobs"])
    log("uid %d sees its own error; root sees everything" % NOBODY)

    rc = d.stop()
    check(rc == 0, "ckptd exited %s on SIGTERM" % rc)
    check_log_clean(d)


run_test(main)
