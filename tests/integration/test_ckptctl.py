# SPDX-License-Identifier: MIT
"""ckptctl against a daemon holding known checkpoints.

Two jobs with committed and uncommitted steps; every command (status, list,
list JOB, show JOB STEP) in table and --json form must report exactly what
was saved: versions, pool geometry, per-job latest committed step, counts,
bytes on local disk equal to the sum of the shard sizes, and per-rank
shards whose sizes and CRC32Cs match what a client sees (ckpt-testrank
list); a step that is not committed is shown without shards, and a client's
shard list of it is refused.  Exit statuses follow ckptctl(1): 3 and a clear message when no
daemon listens, 2 for usage errors, 1 for errors the daemon reports.
Finally, as another user: root's jobs are not shown or described."""
import json
import re
import os
import re
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import (CKPTCTL, CKPTD, Daemon, check, ctl_json, log, pool_at_rest,  # noqa: E402
                     run_test, shards_arg)

MiB = 1024 * 1024
A, B = "ctl-job.a", "ctl_job+b"
NOBODY = 65534


def layout_a(rank):
    return [("model", 3 * MiB + rank), ("opt", MiB + 17), ("empty", 0)]


def layout_b(rank):
    return [("x", 12345)]


# job -> world, layout, {step: (ranks saved, committed)}
CKPTS = {
    A: (2, layout_a, {10: ([0, 1], True), 20: ([0, 1], True), 30: ([0], False)}),
    B: (1, layout_b, {5: ([0], True)}),
}


def ctl_raw(args, env=None, user=None):
    kw = {"user": user} if user is not None else {}
    e = dict(os.environ)
    e.pop("CKPT_SOCKET", None)
    if env:
        e.update(env)
    return subprocess.run([CKPTCTL] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=60, env=e, **kw)


def populate(d):
    t0 = int(time.time())
    for job, (world, layout, steps) in CKPTS.items():
        for step, (ranks, committed) in sorted(steps.items()):
            for r in ranks:
                d.rank("save", "--job", job, "--step", step, "--rank", r, "--world", world,
                       "--seed", step, "--shards", shards_arg(layout(r)), "--wait-local")
            if committed:
                d.rank("commit", "--job", job, "--step", step)
    return t0, int(time.time()) + 1


def testrank_list(d, job, step, rank):
    """[(name, size, crc)] as a client sees it."""
    out = d.rank("list", "--job", job, "--step", step, "--rank", rank).stdout
    rows = []
    for line in out.splitlines():
        name, size, crc = line.split()
        rows.append((name, int(size), crc))
    return rows


def job_bytes(job):
    world, layout, steps = CKPTS[job]
    return sum(s for ranks, _ in steps.values() for r in ranks for _, s in layout(r))


def check_job_entry(j, job):
    world, layout, steps = CKPTS[job]
    committed = [s for s, (_, c) in steps.items() if c]
    want = {"name": job, "uid": os.getuid(), "latest_committed": max(committed),
            "checkpoints": len(steps), "committed": len(committed),
            "tiers": {"local": {"bytes": job_bytes(job)}}, "errors": 0}
    check(j == want, "job entry for %s: %s\nwant %s" % (job, j, want))


def json_forms(d, t0, t1):
    version = subprocess.run([CKPTD, "--version"], capture_output=True, text=True).stdout.split()
    ctl_version = ctl_raw(["--version"]).stdout.split()
    check(len(version) == 2 and ctl_version == ["ckptctl", version[1]],
          "ckptd --version %s, ckptctl --version %s" % (version, ctl_version))

    st = ctl_json(d, "status")
    check(st["version"] == version[1], "status version %r, want %r" % (st["version"], version[1]))
    check(st["state_dir"] == d.state_dir, "status state_dir %r" % st["state_dir"])
    # at rest: only the memory tier holds pool memory, the newest committed
    # step of each job (A's 20, B's 5)
    check(st["pool"]["bytes"] == 64 * MiB and st["pool"]["slots"] == 8,
          "status pool %s" % st["pool"])
    held = pool_at_rest(st)
    check(st["memory"]["steps"] == 2 and held > 0, "status memory %s" % st["memory"])
    check(st["in_flight"] == {"bytes": 0, "shards": 0, "saves": 0},
          "status in_flight %s (every save is on disk)" % st["in_flight"])
    check(st["uptime_ms"] > 0 and st["errors"] == 0 and st["last_error"] == "",
          "status uptime/errors: %s" % st)
    total = job_bytes(A) + job_bytes(B)
    check(st["bytes_written"] >= total,
          "bytes_written %d < %d saved" % (st["bytes_written"], total))
    check(st["clients"] >= 1, "status counts %d clients (ckptctl itself is one)" % st["clients"])
    jobs = {j["name"]: j for j in st["jobs"]}
    check(sorted(jobs) == sorted(CKPTS), "status jobs %s" % sorted(jobs))
    for job in CKPTS:
        check_job_entry(jobs[job], job)
    st2 = ctl_json(d, "status")
    check(st2["uptime_ms"] >= st["uptime_ms"], "uptime went backwards")

    lst = ctl_json(d, "list")
    check(sorted(lst, key=lambda j: j["name"]) == sorted(st["jobs"], key=lambda j: j["name"]),
          "list and status disagree:\n%s\n%s" % (lst, st["jobs"]))

    for job, (world, layout, steps) in CKPTS.items():
        cl = ctl_json(d, "list", job)
        check([c["step"] for c in cl] == sorted(steps, reverse=True),
              "list %s steps %s, want newest first %s" % (job, [c["step"] for c in cl],
                                                           sorted(steps, reverse=True)))
        for c in cl:
            ranks, committed = steps[c["step"]]
            want_bytes = sum(s for r in ranks for _, s in layout(r))
            check(c["state"] == ("committed" if committed else "local")
                  and c["world_size"] == world and c["ranks_local"] == len(ranks)
                  and c["shards"] == sum(len(layout(r)) for r in ranks)
                  and c["bytes"] == want_bytes,
                  "list %s entry %s (want %d ranks, %d bytes)" % (job, c, len(ranks), want_bytes))
            if committed:
                check(t0 <= c["committed_at"] <= t1, "committed_at %d not in [%d, %d]"
                      % (c["committed_at"], t0, t1))
            else:
                check(c["committed_at"] == 0, "uncommitted step has committed_at %d"
                      % c["committed_at"])

        for step, (ranks, committed) in steps.items():
            sh = ctl_json(d, "show", job, step)
            want_bytes = sum(s for r in ranks for _, s in layout(r))
            check(sh["job"] == job and sh["step"] == step and sh["world_size"] == world
                  and sh["bytes"] == want_bytes
                  and sh["state"] == ("committed" if committed else "local"),
                  "show %s %d: %s" % (job, step, {k: v for k, v in sh.items() if k != "ranks"}))
            if not committed:
                # a step that is not committed is shown, but its shards are
                # not listed: neither ckptctl nor a client reads it (issue 10)
                check(sh["ranks"] == [], "show %s %d (not committed) lists ranks %s"
                      % (job, step, sh["ranks"]))
                for r in ranks:
                    p = d.rank("list", "--job", job, "--step", step, "--rank", r,
                               check_rc=False)
                    check(p.returncode == 1 and "ENOENT" in p.stderr
                          and "is not committed" in p.stderr,
                          "list of rank %d of uncommitted step %s %d: rc %d, %s"
                          % (r, job, step, p.returncode, p.stderr.strip()))
                continue
            check([r["rank"] for r in sh["ranks"]] == ranks, "show %s %d ranks %s, want %s"
                  % (job, step, [r["rank"] for r in sh["ranks"]], ranks))
            for r in sh["ranks"]:
                got = [(s["name"], s["size"], s["crc32c"]) for s in r["shards"]]
                want = testrank_list(d, job, step, r["rank"])
                check(got == want, "show %s %d rank %d shards %s\nclient sees %s"
                      % (job, step, r["rank"], got, want))
                # (the order of shards in a listing is not specified)
                check(sorted((n, s) for n, s, _ in got) == sorted(layout(r["rank"])),
                      "show %s %d rank %d: %s, saved %s" % (job, step, r["rank"], got,
                                                            layout(r["rank"])))
    # different seeds per step: the same shard has different CRCs in 10 and 20
    c10 = dict((n, c) for n, _, c in testrank_list(d, A, 10, 0))["model"]
    c20 = dict((n, c) for n, _, c in testrank_list(d, A, 20, 0))["model"]
    check(c10 != c20, "steps 10 and 20 report the same CRC32C %s for different bytes" % c10)


def table_forms(d):
    version = ctl_json(d, "status")["version"]
    out = d.ctl("status").stdout
    check(out.startswith("ckptd %s, up " % version), "status table header: %r" % out[:80])
    check(re.search(r"\d of 8 slots in use \([^)]* of 64\.0 MiB\), 0 waiting", out),
          "status pool line:\n" + out)
    check(re.search(r"memory: +2 committed steps resident, ", out), "status memory line:\n" + out)
    check(d.state_dir in out, "status does not show the state dir:\n" + out)

    def job_rows(text):
        rows = {}
        for line in text.splitlines():
            f = line.split()
            if f and f[0] in CKPTS:
                rows[f[0]] = f
        return rows

    for text in (out, d.ctl("list").stdout):
        rows = job_rows(text)
        check(sorted(rows) == sorted(CKPTS), "job table rows %s:\n%s" % (sorted(rows), text))
        # JOB UID LATEST CKPTS COMMITTED LOCAL(2 words) ERRORS
        check(rows[A][:5] == [A, str(os.getuid()), "20", "3", "2"] and rows[A][-1] == "0",
              "row of %s: %s" % (A, rows[A]))
        check(rows[B][:5] == [B, str(os.getuid()), "5", "1", "1"], "row of %s: %s" % (B, rows[B]))

    text = d.ctl("list", A).stdout
    rows = [line.split() for line in text.splitlines()[1:]]
    # the MEMORY column, last, says "memory" for the newest committed step only
    memory = [r[-1] == "memory" for r in rows]
    check(memory == [False, True, False], "list %s MEMORY column:\n%s" % (A, text))
    rows = [r[:-1] if m else r for r, m in zip(rows, memory)]
    check([r[:5] for r in rows] == [["30", "local", "2", "1", "3"],
                                    ["20", "committed", "2", "2", "6"],
                                    ["10", "committed", "2", "2", "6"]],
          "list %s table:\n%s" % (A, text))
    check(rows[0][-3] == "-", "uncommitted step shows a commit time: %s" % rows[0])
    check(all(r[-1] == "none" for r in rows),
          "no object store, yet a remote state other than none: %s" % rows)
    check(all(r[-2] == "0" for r in rows),
          "no replication, yet replicas counted: %s" % rows)

    text = d.ctl("show", A, 30).stdout
    check(text.startswith("job %s step 30: local, world size 2, 1 ranks here, 3 shards" % A)
          and "shards: not listed until the step is committed" in text,
          "show of the uncommitted step 30:\n%s" % text)

    text = d.ctl("show", A, 20).stdout
    check(text.startswith("job %s step 20: committed, world size 2, 2 ranks here, 6 shards" % A),
          "show header: %r" % text.splitlines()[0])
    for r in (0, 1):
        want = ["  %-40s %14d  %s" % (n, s, c) for n, s, c in testrank_list(d, A, 20, r)]
        part = text.split("rank %d:\n" % r)[1].split("\n\n")[0].splitlines()[1:]
        check(part == want, "show table rank %d:\n%s\nwant\n%s" % (r, "\n".join(part),
                                                                  "\n".join(want)))

    # $CKPT_SOCKET is used when --socket is not given
    p = ctl_raw(["--json", "list"], env={"CKPT_SOCKET": d.socket})
    check(p.returncode == 0 and sorted(j["name"] for j in json.loads(p.stdout)) == sorted(CKPTS),
          "ckptctl with $CKPT_SOCKET: %d %s%s" % (p.returncode, p.stdout, p.stderr))


def exit_codes(d, tmp):
    # usage errors: 2, a message on stderr, nothing on stdout
    for args in (["bogus"], ["show", A], ["show", A, "abc"], ["show", A, "-1"],
                 ["show", A, "12x"], ["list", A, "extra"], ["status", "extra"], [],
                 ["--no-such-option", "status"]):
        p = ctl_raw(["--socket", d.socket] + args)
        check(p.returncode == 2 and p.stderr.strip() and not p.stdout,
              "ckptctl %s: exit %d (want 2), stdout %r, stderr %r"
              % (" ".join(args), p.returncode, p.stdout, p.stderr))
    p = ctl_raw(["--socket", d.socket, "show", A, "abc"])
    check("abc" in p.stderr, "usage error does not name the bad STEP: %r" % p.stderr)

    # errors the daemon reports: 1 with a message naming what is missing
    for args, needle in ((["show", "nosuchjob", "1"], "nosuchjob"),
                         (["list", "nosuchjob"], "nosuchjob"),
                         (["show", A, "999"], "999")):
        p = ctl_raw(["--socket", d.socket] + args)
        check(p.returncode == 1 and needle in p.stderr and not p.stdout,
              "ckptctl %s: exit %d (want 1), stdout %r, stderr %r"
              % (" ".join(args), p.returncode, p.stdout, p.stderr))

    # with --json (anywhere on the line) an error is a JSON document on
    # stdout, the same line on stderr, and the same exit status
    for args, code, errno_name, needle in (
            (["--json", "show", "nosuchjob", "1"], 1, "ENOENT", "no job named 'nosuchjob'"),
            (["show", A, "999", "--json"], 1, "ENOENT", "has no step 999"),
            (["list", "--json", "nosuchjob"], 1, "ENOENT", "nosuchjob"),
            (["show", A, "abc", "--json"], 2, "EINVAL", "STEP must be an integer"),
            (["bogus", "--json"], 2, "EINVAL", "unknown command 'bogus'"),
            (["--json", "list", A, "extra"], 2, "EINVAL", "usage: list [JOB]")):
        p = ctl_raw(["--socket", d.socket] + args)
        try:
            doc = json.loads(p.stdout)
        except ValueError:
            doc = None
        err = doc.get("error") if isinstance(doc, dict) else None
        check(p.returncode == code and isinstance(err, dict) and err.get("errno") == errno_name
              and err.get("exit") == code and needle in err.get("message", "")
              and needle in p.stderr,
              "ckptctl %s: exit %d (want %d), stdout %r (want an error document with %s and "
              "%r), stderr %r" % (" ".join(args), p.returncode, code, p.stdout, errno_name,
                                   needle, p.stderr))
    p = ctl_raw(["--json", "--socket", os.path.join(tmp, "nothing.sock"), "status"])
    check(p.returncode == 3 and '"errno":"ENOENT"' in p.stdout and '"exit":3' in p.stdout,
          "--json with no daemon: exit %d, stdout %r" % (p.returncode, p.stdout))

    # the options that apply to every command stand anywhere on the line
    want = json.loads(ctl_raw(["--socket", d.socket, "--json", "list", A]).stdout)
    for args in (["list", A, "--json", "--socket", d.socket],
                 ["list", "--json", A, "--socket=" + d.socket],
                 ["--timeout", "5s", "list", A, "--json", "-s", d.socket]):
        p = ctl_raw(args)
        check(p.returncode == 0 and json.loads(p.stdout or "null") == want,
              "ckptctl %s: exit %d, stdout %r, stderr %r (want the same list as --json "
              "before the command)" % (" ".join(args), p.returncode, p.stdout, p.stderr))
    # "--" ends them: what follows is an argument, here a job name no job has
    p = ctl_raw(["--socket", d.socket, "list", "--", "--json"])
    check(p.returncode == 1 and "invalid job name '--json'" in p.stderr and not p.stdout,
          "list -- --json: exit %d, stdout %r, stderr %r" % (p.returncode, p.stdout, p.stderr))
    p = ctl_raw(["--socket", d.socket, "list", A, "--timeout"])
    check(p.returncode == 2 and "--timeout needs a value" in p.stderr,
          "list A --timeout: exit %d, stderr %r" % (p.returncode, p.stderr))
    p = ctl_raw(["--socket", d.socket, "list", "../etc"])
    check(p.returncode in (1, 2) and "invalid job name" in p.stderr,
          "list ../etc: exit %d, stderr %r" % (p.returncode, p.stderr))

    # no daemon: 3 and "not running", for a missing socket and a stale one
    missing = os.path.join(tmp, "nothing-here.sock")
    stale = os.path.join(tmp, "stale.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(stale)
    s.close()
    for path in (missing, stale):
        for args in (["status"], ["--json", "list"], ["show", A, "20"]):
            p = ctl_raw(["--socket", path] + args)
            check(p.returncode == 3 and "not running" in p.stderr and path in p.stderr
                  and (not p.stdout if "--json" not in args
                       else json.loads(p.stdout)["error"]["exit"] == 3),
                  "ckptctl --socket %s %s with no daemon: exit %d (want 3), stdout %r, stderr %r"
                  % (path, " ".join(args), p.returncode, p.stdout, p.stderr))
    p = ctl_raw(["status"], env={"CKPT_SOCKET": missing})
    check(p.returncode == 3 and "not running" in p.stderr,
          "$CKPT_SOCKET without daemon: exit %d %r" % (p.returncode, p.stderr))


def other_user(d, tmp):
    """A job belongs to its creator: another uid sees none of root's jobs."""
    if os.getuid() != 0:
        log("not root: skipping the other-user checks")
        return
    env = {"CKPT_SOCKET": d.socket}
    p = ctl_raw(["--json", "list"], env=env, user=NOBODY)
    check(p.returncode == 0, "list as uid %d failed (%d): %s" % (NOBODY, p.returncode, p.stderr))
    names = [j["name"] for j in json.loads(p.stdout)]
    check(names == [], "uid %d is shown root's jobs %s (ckptctl(1): the daemon answers for the "
          "jobs the calling user may see)" % (NOBODY, names))
    p = ctl_raw(["--json", "status"], env=env, user=NOBODY)
    check(p.returncode == 0 and json.loads(p.stdout)["jobs"] == [],
          "status as uid %d shows jobs: %s" % (NOBODY, p.stdout))
    for args in (["list", A], ["show", A, "20"], ["--json", "show", A, "20"]):
        p = ctl_raw(args, env=env, user=NOBODY)
        want_out = (not p.stdout if "--json" not in args
                    else p.stdout.startswith('{"error":{"errno":"EACCES"'))
        check(p.returncode == 1 and p.stderr.strip() and want_out,
              "ckptctl %s as uid %d: exit %d (want 1 and nothing on stdout but an error "
              "document), stdout %r, stderr %r"
              % (" ".join(args), NOBODY, p.returncode, p.stdout, p.stderr))


def single_node_cluster(d):
    """ckptctl cluster on a daemon without [cluster]: itself, reachable,
    each job with a committed step at its newest one, nothing owed."""
    doc = ctl_json(d, "cluster")
    check(doc["total"] == 1 and doc["reachable"] == 1 and len(doc["nodes"]) == 1,
          "cluster of one node: %r" % doc)
    n = doc["nodes"][0]
    check(n["index"] == 0 and n["state"] == "reachable" and n["degraded_links"] == [],
          "the node itself: %r" % n)
    want = {}
    for job, (_, _, steps) in CKPTS.items():
        committed = [s for s, (_, c) in steps.items() if c]
        if committed:
            want[job] = max(committed)
    got = {j["job"]: j["newest_step"] for j in n["jobs"]}
    check(got == want, "newest committed steps %r, want %r" % (got, want))
    check(all(j["steps_owed"] == 0 for j in n["jobs"]), "steps owed without targets: %r" % n)
    text = d.ctl("cluster").stdout
    check(re.search(r"^0\s+\S+\s+reachable\b", text, re.M), "no row for node 0:\n" + text)


def main(tmp):
    os.chmod(tmp, 0o711)  # the other-user checks need to reach the socket
    d = Daemon(tmp, pool="64M", slot="8M", extra=["--socket-mode", "0666"]).start()
    t0, t1 = populate(d)
    json_forms(d, t0, t1)
    single_node_cluster(d)
    table_forms(d)
    exit_codes(d, tmp)
    other_user(d, tmp)
    check(d.stop() == 0, "ckptd did not exit cleanly")
    # and after it stopped, ckptctl says so
    p = ctl_raw(["--socket", d.socket, "status"])
    check(p.returncode == 3 and "not running" in p.stderr,
          "status after ckptd stopped: exit %d, %r" % (p.returncode, p.stderr))


run_test(main)
