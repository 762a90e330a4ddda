#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Which step a restore uses when a node is lost: LATEST_RANK
(ckpt_latest_rank(), `ckpt-testrank latest --rank R`, `ckptctl latest JOB
--rank R`) gives, per rank, the newest committed step that rank can still
be restored from, and falls back to an older committed step — saying so —
when no copy of the newest is left anywhere (docs/replication.md, "Which
step a restore uses").

Why: after a node is lost, a trainer that restores "the latest step" must
not hang or fail on ranks whose only copies went with the node, and it must
not silently mix steps either.  Every rank asks for its own newest
restorable step and the job takes the minimum; READ and SHARD_LIST never
substitute a step on their own.

Real daemons on the loopback (two nodes, one clique, no object store):
  1. A lost node whose newest step never reached its neighbour: node 0
     answers step 20 for its own rank 0 and step 10 for the lost node's
     rank 1 (newest 20), logs why, serves rank 1 of step 10 bit-exact, still
     refuses rank 1 of step 20 for READ and SHARD_LIST, honours the `below`
     bound, and refuses bad input with the exact error (through libckpt and
     raw on the socket, where the daemon's own checks answer).
  2. The walk asks a live neighbour: a rank held only by the other node is
     pulled into this node's local tier and its step answered, not fallen
     back; a client that leaves while the neighbour is asked harms nothing.
  3. With an object store (a real radosgw, tests/s3/radosgw.sh; skipped
     without Ceph): a step whose COMMIT never reached the store is skipped,
     the rank of the older step comes from the store; a node with an empty
     disk gets the store's newest COMMIT, and below a bound the newest
     under it.
Helpers (cluster, saves, verification, sanitizer log, case runner) come
from cluster.py and harness.py, the object store's from objstore.py.

Cases can be chosen with CKPT_FALLBACK_CASES=1,3 (by number) when run by hand.
"""
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (CKPTD, RAWCLIENT, TESTRANK, SkipTest, check,  # noqa: E402
                     check_log_clean, log, log_lines, run_cases, save_node,
                     step_path, wait_until)
from cluster import (Cluster, layout, must_verify, rank_dirs, repl_status,  # noqa: E402
                     replica_step_path, wait_not_replicated, wait_replicated)
from objstore import (loopback_cluster, start_store, step_prefix,  # noqa: E402
                      wait_remote)

JOB = "fallback.job-1"
AREA_JOB = "fallback.area-job"  # saved only by node 1: node 0 knows it from its replica area
NOBODY = 65534
CKPT_MSG_HELLO, CKPT_MSG_LATEST_RANK = 1, 20
CKPT_PROTO_MAGIC, CKPT_PROTO_VERSION = 0x54504B43, 2
STEP_LATEST = (1 << 64) - 1


# --------------------------------------------------------------------------
# helpers


def latest_rank(d, rank, below=None, job=JOB, user=None):
    """`ckpt-testrank latest --rank` through daemon d: ({key: value}, the
    fell-back line or None), or raise with its error."""
    args = ["latest", "--job", job, "--rank", rank]
    if below is not None:
        args += ["--below", below]
    p = d.rank(*args, user=user)
    lines = p.stdout.splitlines()
    kv = {}
    fell = None
    for ln in lines:
        if ln.startswith("fell back from step "):
            fell = ln
        else:
            k, _, v = ln.partition(" ")
            kv[k] = int(v)
    check(set(kv) == {"step", "world", "newest"},
          "latest --rank %s printed %r" % (rank, p.stdout))
    return kv, fell


def rank_fails(d, args, ename, code, snippets=(), user=None, what=""):
    """ckpt-testrank ARGS fails with ERROR ename code whose text has every snippet;
    returns the error line."""
    p = d.rank(*args, check_rc=False, user=user)
    check(p.returncode == 1, "%s: exit %d, expected 1 (%s %d): %s%s"
          % (what, p.returncode, ename, code, p.stdout, p.stderr))
    first = [ln for ln in p.stderr.splitlines() if ln.startswith("ERROR ")]
    want = "ERROR %s %d:" % (ename, code)
    check(first and first[0].startswith(want), "%s: expected %s..., got %r"
          % (what, want, p.stderr))
    for s in snippets:
        check(s in first[0], "%s: %r does not say %r" % (what, first[0], s))
    return first[0]


def name_bytes(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<H", len(b)) + b


def packet(typ, body, seq):
    return struct.pack("<IHHII", CKPT_PROTO_MAGIC, CKPT_PROTO_VERSION, typ, 16 + len(body),
                       seq) + body


def latest_rank_packet(job, rank, below, seq=0x4242):
    """A LATEST_RANK request encoded here, by hand (docs/protocol.md), so
    values libckpt refuses to send reach the daemon's own checks."""
    return packet(CKPT_MSG_LATEST_RANK, name_bytes(job) + struct.pack("<IQ", rank, below), seq)


def raw_send(d, data):
    """ckpt-rawclient send-hex: HELLO, the packet, then STATUS on the same
    connection.  Returns (the reply line, the rest)."""
    cmd = [RAWCLIENT, "--socket", d.socket, "--then-ping", "send-hex", data.hex()]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, "%s exited %d: %s%s" % (" ".join(cmd)[:200], p.returncode,
                                                      p.stdout, p.stderr))
    lines = p.stdout.splitlines()
    check(len(lines) >= 3 and lines[1] == "SEQ OK" and lines[-1].startswith("PING OK"),
          "raw LATEST_RANK: the reply did not echo the seq, or the connection did not "
          "survive (STATUS after it): %r" % lines)
    return lines[0]


def raw_rejects(d, data, ename, code, snippets, what):
    line = raw_send(d, data)
    want = "ERROR %s %d " % (ename, code)
    check(line.startswith(want), "%s: expected %s..., got %r" % (what, want, line))
    for s in snippets:
        check(s in line, "%s: %r does not say %r" % (what, line, s))
    log("   raw %s: %s" % (what, line))


def recv_exact_packet(s):
    data = s.recv(65536)
    check(len(data) >= 16, "short reply on the raw socket: %r" % data)
    return data


def stop_clean(ctx, nodes):
    for d in nodes:
        check_log_clean(d)
        rc = d.stop()
        check(rc == 0, "node %d exited %s on SIGTERM:\n%s" % (d.node, rc, d.read_log()[-3000:]))
        # a clean exit runs LeakSanitizer in the ASan build: look again
        check_log_clean(d)


def commit_both(cl, job, step, layouts, seed):
    """Both nodes save their ranks of step, then one commit (a commit waits
    for every rank of the step, issue 10: one node cannot commit before the
    other saved)."""
    for d in cl.nodes:
        save_node(d, job, step, cl.ranks_of(d.node), cl.world, layouts, seed=seed, commit=False)
    cl.nodes[0].rank("commit", "--job", job, "--step", step)


def refuse_replicas(ctx, d, src, job):
    """d's replica area of node src takes no new step of job: its job
    directory is made immutable (chattr +i; even root cannot add to it),
    so src's ranks never reach d while the link, and with it the commit's
    control messages, stays up.  Skips when chattr cannot do it."""
    path = os.path.join(d.state_dir, "replica", "node-%d" % src, "jobs", job)
    os.makedirs(path, exist_ok=True)
    p = subprocess.run(["chattr", "+i", path], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise SkipTest("cannot make %s immutable (needs root and a file system with "
                       "chattr +i): %s" % (path, p.stderr.strip()))
    ctx.cleanups.append(lambda: subprocess.run(["chattr", "-i", path], capture_output=True))


def python_binding_check(d, rank, want):
    """The Python bindings' latest_rank() (plain build only: an
    ASan-instrumented libckpt cannot be loaded into python)."""
    lib = os.environ.get("CKPT_LIBRARY")
    if not lib or not os.path.exists(lib):
        log("   python bindings: skipped (no $CKPT_LIBRARY)")
        return
    ldd = subprocess.run(["ldd", lib], capture_output=True, text=True).stdout
    if "libasan" in ldd or "libubsan" in ldd:
        log("   python bindings: skipped (sanitizer build)")
        return
    root = os.environ.get("CKPT_SOURCE_ROOT", os.path.join(HERE, "..", ".."))
    code = ("import json, ckptd\n"
            "with ckptd.Client() as c:\n"
            "    print(json.dumps(c.latest_rank(%r, %d)))\n"
            "    try:\n"
            "        c.latest_rank(%r, %d, below=10)\n"
            "        print('no error')\n"
            "    except ckptd.CkptError as e:\n"
            "        print(json.dumps([e.errno, str(e)]))\n") % (JOB, rank, JOB, rank)
    env = d.client_env({"PYTHONPATH": os.path.join(root, "client", "python")})
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 0, "python bindings: %s%s" % (p.stdout, p.stderr))
    out = p.stdout.splitlines()
    got = json.loads(out[0])
    check(got == list(want), "python latest_rank(%r, %d) = %r, expected %r"
          % (JOB, rank, got, list(want)))
    err = json.loads(out[1])
    check(err[0] == 2 and "below 10" in err[1], "python latest_rank(below=10): %r" % out[1])
    log("   python bindings: latest_rank -> %r; below 10 -> ENOENT" % (got,))


# --------------------------------------------------------------------------
# 1. a lost node whose newest step never reached its neighbour


def case_lost_node(ctx):
    cl = Cluster(ctx, 2, 2, 1, "clique", ranks_per_node=1, pool="64M", slot="4M")
    n0, n1 = cl.nodes
    # nobody (the case of another uid) must reach node 0's socket
    os.chmod(os.path.dirname(ctx.tmp), 0o755)
    os.chmod(ctx.tmp, 0o755)
    n0.extra += ["--socket-mode", "0666"]
    cl.start()
    world = cl.world
    layouts = {r: layout(r, big=3 * 1024 * 1024 + 5) for r in range(world)}

    # step 10: saved, committed and replicated both ways
    commit_both(cl, JOB, 10, layouts, seed=10)
    for d in cl.nodes:
        wait_replicated(d, JOB, 10)
    ranks, _ = rank_dirs(replica_step_path(n0.state_dir, 1, JOB, 10))
    check(ranks == {1}, "node 0 holds ranks %s of node 1's step 10, expected {1}" % ranks)
    # a job only node 1 ran (as if it moved there; both its ranks saved
    # there): node 0 has it in its replica area and nowhere else
    save_node(n1, AREA_JOB, 7, [0, 1], world, layouts, seed=7)
    wait_replicated(n1, AREA_JOB, 7)

    # node 0's replica area of node 1 takes no new step of JOB: rank 1 of
    # step 20 never reaches node 0.  (Before the cluster-wide commit node 1
    # was restarted unable to reach node 0; now that would keep step 20
    # from being committed at all, node 0 coordinating commits.)
    refuse_replicas(ctx, n0, 1, JOB)
    commit_both(cl, JOB, 20, layouts, seed=20)
    wait_replicated(n0, JOB, 20)            # rank 0 of step 20 reached node 1
    wait_not_replicated(n1, JOB, 20)        # rank 1 of step 20 did not reach node 0
    ranks, _ = rank_dirs(replica_step_path(n0.state_dir, 1, JOB, 20))
    check(not ranks, "node 0 holds ranks %s of node 1's step 20 although node 1 cannot reach "
          "it" % ranks)
    ranks, _ = rank_dirs(replica_step_path(n1.state_dir, 0, JOB, 20))
    check(ranks == {0}, "node 1 holds ranks %s of node 0's step 20, expected {0}" % ranks)
    log("   step 10 replicated both ways; step 20 (committed) only from node 0 to node 1")

    # node 1 is lost, disk and all
    n1.kill(signal.SIGKILL)
    shutil.rmtree(n1.state_dir)
    wait_until(lambda: repl_status(n0).get("peers_up") == 0, timeout=30,
               what="node 0 to notice that node 1 is gone")
    log("   node 1 killed, its state directory deleted")

    # rank 0: its newest step is right here
    kv, fell = latest_rank(n0, 0)
    check(kv == {"step": 20, "world": world, "newest": 20} and fell is None,
          "latest --rank 0 on node 0: %r %r, expected step 20, not fallen back" % (kv, fell))
    # rank 1: step 20 is gone with node 1; step 10 survives in node 0's replica area
    t0 = time.monotonic()
    kv, fell = latest_rank(n0, 1)
    check(kv == {"step": 10, "world": world, "newest": 20},
          "latest --rank 1 on node 0: %r, expected step 10 of world %d, newest 20"
          % (kv, world))
    check(fell == "fell back from step 20 (rank 1 not restorable there)",
          "latest --rank 1: the fell-back line is %r" % fell)
    log("   latest --rank 0: step 20; --rank 1: step 10, %s (%.2f s)"
        % (fell, time.monotonic() - t0))
    # the job restores min over ranks = 10; every rank of it is served
    for r in range(world):
        must_verify(n0, JOB, 10, r, layouts[r], seed=10, what=" (the fallback step)")
    must_verify(n0, JOB, 20, 0, layouts[0], seed=20)
    # a job known here only from the replica area
    kv, fell = latest_rank(n0, 1, job=AREA_JOB)
    check(kv == {"step": 7, "world": world, "newest": 7} and fell is None,
          "latest --rank 1 of a job node 0 holds only in its replica area: %r %r" % (kv, fell))
    must_verify(n0, AREA_JOB, 7, 1, layouts[1], seed=7, what=" (from the replica area)")
    log("   a job known only from the replica area: rank 1 -> step 7")

    # node 0's log says which step and why, at NOTICE
    why = log_lines(n0, r" notice: job %s rank 1: step 20 is not restorable \(not on this "
                    r"node, no neighbour is up, no object store configured\); trying an older "
                    r"step" % re.escape(JOB))
    check(why, "node 0's log has no NOTICE saying why step 20 was skipped for rank 1:\n%s"
          % "\n".join(log_lines(n0, "rank 1")[-20:]))
    used = log_lines(n0, r" notice: job %s rank 1: restorable from step 10, not from the newest "
                     r"committed step 20: 1 newer step passed over" % re.escape(JOB))
    check(used, "node 0's log does not say at NOTICE which step rank 1 uses:\n%s"
          % "\n".join(log_lines(n0, "rank 1")[-20:]))
    log("   log: %s" % why[-1].split(": ", 2)[-1])

    # no silent substitution: the step a request names, or ENOENT
    rank_fails(n0, ["list", "--job", JOB, "--step", 20, "--rank", 1], "ENOENT", -2,
               ["rank 1 of step 20"], what="SHARD_LIST of rank 1 step 20")
    rank_fails(n0, ["read", "--job", JOB, "--step", 20, "--rank", 1, "--shard", "opt.state",
                    "--offset", 0, "--length", 100], "ENOENT", -2, ["rank 1 of step 20"],
               what="READ of rank 1 step 20")

    # the bound: below 20 is step 10, not a fallback; below 10 there is nothing
    kv, fell = latest_rank(n0, 1, below=20)
    check(kv == {"step": 10, "world": world, "newest": 10} and fell is None,
          "latest --rank 1 --below 20: %r %r" % (kv, fell))
    kv, fell = latest_rank(n0, 0, below=20)
    check(kv == {"step": 10, "world": world, "newest": 10} and fell is None,
          "latest --rank 0 --below 20: %r %r" % (kv, fell))
    line = rank_fails(n0, ["latest", "--job", JOB, "--rank", 1, "--below", 10], "ENOENT", -2,
                      ["job '%s' has no committed step below 10 of which rank 1 can be "
                       "restored" % JOB], what="latest --rank 1 --below 10")
    log("   latest --rank 1 --below 10: %s" % line)
    # a rank the job does not have: every step is skipped, and the error says why
    line = rank_fails(n0, ["latest", "--job", JOB, "--rank", 5], "ENOENT", -2,
                      ["of which rank 5 can be restored", "newest committed: 20",
                       "world size is 2"], what="latest --rank 5 of a world of 2")
    log("   latest --rank 5: %s" % line)

    # ckptctl, for the operator
    p = n0.ctl("latest", JOB, "--rank", 1)
    check(p.stdout.startswith("job %s rank 1: restore from step 10 (world size 2)" % JOB)
          and "fell back from step 20" in p.stdout, "ckptctl latest --rank 1: %r" % p.stdout)
    doc = json.loads(n0.ctl("--json", "latest", JOB, "--rank", 1).stdout)
    want = {"job": JOB, "rank": 1, "step": 10, "world_size": 2, "newest": 20, "skipped": 1,
            "fell_back": True}
    check(doc == want, "ckptctl --json latest --rank 1: %r, expected %r" % (doc, want))
    doc = json.loads(n0.ctl("--json", "latest", JOB).stdout)
    check(doc == {"job": JOB, "step": 20, "world_size": 2}, "ckptctl --json latest: %r" % doc)
    p = n0.ctl("latest", JOB, "--rank", 1, "--below", 10, check_rc=False)
    check(p.returncode == 1 and "has no committed step below 10" in p.stderr,
          "ckptctl latest --rank 1 --below 10: exit %d %r" % (p.returncode, p.stderr))
    p = n0.ctl("latest", JOB, "--rank", 1 << 20, check_rc=False)
    check(p.returncode == 2, "ckptctl latest --rank 2^20: exit %d %r" % (p.returncode, p.stderr))
    python_binding_check(n0, 1, (10, 2, 20))

    # bad input through libckpt, which refuses it before sending
    rank_fails(n0, ["latest", "--job", JOB, "--rank", 1 << 20], "EINVAL", -22, ["rank < 2^20"],
               what="libckpt: rank 2^20")
    rank_fails(n0, ["latest", "--job", JOB, "--rank", 1, "--below", 1 << 63], "EINVAL", -22,
               ["below"], what="libckpt: below 2^63")
    rank_fails(n0, ["latest", "--job", "../" + JOB, "--rank", 1], "EINVAL", -22,
               ["invalid name"], what="libckpt: job name with a slash")
    # ... and raw, where the daemon's decoder must refuse it and keep the connection
    raw_rejects(n0, latest_rank_packet(JOB, 1 << 20, STEP_LATEST), "EINVAL", -22,
                ["invalid value LATEST_RANK request"], "rank 2^20")
    raw_rejects(n0, latest_rank_packet(JOB, 0xFFFFFFFF, 10), "EINVAL", -22,
                ["invalid value LATEST_RANK request"], "rank 2^32-1")
    raw_rejects(n0, latest_rank_packet("../" + JOB, 1, STEP_LATEST), "EINVAL", -22,
                ["invalid value LATEST_RANK request"], "job name with a slash")
    raw_rejects(n0, latest_rank_packet("", 1, STEP_LATEST), "EINVAL", -22,
                ["invalid value LATEST_RANK request"], "empty job name")
    raw_rejects(n0, latest_rank_packet(JOB, 1, 1 << 63), "EINVAL", -22,
                ["invalid value LATEST_RANK request"], "below 2^63")
    raw_rejects(n0, latest_rank_packet(JOB, 1, 10)[:-3], "EBADMSG", -74,
                ["malformed message LATEST_RANK request"], "cut short")
    # a well-formed one on the raw socket is answered (the raw encoder is right)
    line = raw_send(n0, latest_rank_packet(JOB, 1, STEP_LATEST))
    check(line == "OK LATEST_RANK_REPLY", "raw LATEST_RANK: %r" % line)
    # a job nobody knows
    rank_fails(n0, ["latest", "--job", "no-such-job", "--rank", 0], "ENOENT", -2,
               ["job 'no-such-job' has no committed step of which rank 0 can be restored",
                "none known on this node"], what="a job nobody knows")
    # another uid may not even learn the step numbers
    if os.geteuid() == 0:
        rank_fails(n0, ["latest", "--job", JOB, "--rank", 1], "EACCES", -13,
                   ["belongs to another user"], user=NOBODY, what="nobody asking root's job")
        # root's copy in the replica area is not nobody's either
        rank_fails(n0, ["latest", "--job", AREA_JOB, "--rank", 1], "ENOENT", -2,
                   ["none known on this node"], user=NOBODY,
                   what="nobody asking root's job held in the replica area")
        log("   another uid: EACCES; root's replica not offered")
    else:
        log("   another uid: not checked (needs root)")

    check(n0.alive(), "node 0 exited:\n%s" % n0.read_log()[-3000:])
    stop_clean(ctx, [n0])


# --------------------------------------------------------------------------
# 2. the walk asks a live neighbour


def case_neighbour(ctx):
    job = "fallback.job-2"
    cl = Cluster(ctx, 2, 2, 1, "clique", ranks_per_node=1, pool="64M", slot="4M")
    n0, n1 = cl.nodes
    # node 0's replica area of node 1 takes nothing of this job: node 1's
    # ranks never get there (before the cluster-wide commit node 1 could not
    # reach node 0 at all; now it must, node 0 coordinating commits)
    refuse_replicas(ctx, n0, 1, job)
    cl.start()
    world = cl.world
    # rank 1 is large enough that pulling it takes longer than noticing a
    # client that hung up
    layouts = {0: layout(0), 1: layout(1, big=48 * 1024 * 1024 + 1)}
    for step in (5, 6):
        commit_both(cl, job, step, layouts, seed=step)
        wait_replicated(n0, job, step)
    wait_until(lambda: repl_status(n0).get("peers_up") == 1, timeout=30,
               what="node 0 to be connected to node 1")
    for step in (5, 6):
        ranks, _ = rank_dirs(step_path(n0.state_dir, job, step))
        check(ranks == {0}, "node 0 holds ranks %s of step %d locally, expected {0}"
              % (ranks, step))

    # a client that asks and leaves at once: node 0 is still pulling rank 1
    # of step 6 from node 1 when the connection goes
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(n0.socket)
    s.send(packet(CKPT_MSG_HELLO, struct.pack("<HH", 2, 2), 1))
    recv_exact_packet(s)
    s.send(latest_rank_packet(job, 1, STEP_LATEST, seq=2))
    s.close()
    # the neighbour's copy still lands in the local tier; nothing is answered
    landed = "job %s step 6 rank 1 restored from node 1" % job
    wait_until(lambda: log_lines(n0, re.escape(landed)), timeout=120,
               what=lambda: "rank 1 of step 6 to land on node 0 after its client left:\n%s"
               % "\n".join(log_lines(n0, "rank 1|peers:")[-20:]))
    check(1 in rank_dirs(step_path(n0.state_dir, job, 6))[0],
          "node 0 logged rank 1 of step 6 restored, but its local tier lacks it")
    lines = n0.read_log().splitlines()
    asked = [i for i, ln in enumerate(lines)
             if "job %s step 6 rank 1 not on this node; asking the neighbours" % job in ln]
    gone = [i for i, ln in enumerate(lines)
            if re.search(r"client \d+ \(pid %d\) disconnected" % os.getpid(), ln)]
    landed = [i for i, ln in enumerate(lines) if landed in ln]
    check(asked and gone and landed and asked[0] < gone[-1] < landed[0],
          "node 0 should have noticed the client leave while it pulled the rank (asked at "
          "line %s, client gone at %s, rank landed at %s)" % (asked, gone, landed))
    check(not [ln for ln in lines if "send failed" in ln],
          "node 0 tried to answer the client that had left: %s"
          % [ln for ln in lines if "send failed" in ln])
    check(n0.alive(), "node 0 exited after a client left mid-walk:\n%s"
          % n0.read_log()[-3000:])
    check_log_clean(n0)
    log("   a client that left while the neighbour was asked: noticed at once, the rank "
        "landed anyway")

    # the real question: rank 1 of step 6 is here now
    kv, fell = latest_rank(n0, 1, job=job)
    check(kv == {"step": 6, "world": world, "newest": 6} and fell is None,
          "latest --rank 1 on node 0 (step 6 pulled already): %r %r" % (kv, fell))
    # below 6: step 5, whose rank 1 only node 1 holds: the walk pulls it over
    t0 = time.monotonic()
    kv, fell = latest_rank(n0, 1, below=6, job=job)
    check(kv == {"step": 5, "world": world, "newest": 5} and fell is None,
          "latest --rank 1 --below 6 on node 0: %r %r, expected step 5 from the neighbour"
          % (kv, fell))
    ranks, _ = rank_dirs(step_path(n0.state_dir, job, 5))
    check(ranks == {0, 1}, "after the walk, node 0's local tier holds ranks %s of step 5" % ranks)
    check(log_lines(n0, r"job %s step 5 rank 1 not on this node; asking the neighbours"
                    % re.escape(job)),
          "node 0's log does not say it asked the neighbours for rank 1 of step 5")
    log("   latest --rank 1 --below 6: step 5, pulled from node 1 (%.2f s)"
        % (time.monotonic() - t0))
    for step in (5, 6):
        must_verify(n0, job, step, 1, layouts[1], seed=step, what=" (pulled by the walk)")

    stop_clean(ctx, cl.nodes)


# --------------------------------------------------------------------------
# 3. with an object store


def case_store(ctx):
    t0 = time.monotonic()
    rctx = start_store(ctx)
    ctx.cleanups.append(rctx.cleanup)  # runs first: daemons before the gateway
    log("   radosgw up after %.1f s" % (time.monotonic() - t0))
    bucket, job, world = "fallback", "fallback.job-3", 2
    rctx.store.s3.create_bucket(bucket)
    layouts = {r: layout(r, big=2 * 1024 * 1024 + 3) for r in range(world)}
    # two nodes of one cluster flushing to one store, no neighbour
    # replication; node 1 reaches the store through a proxy that can hold
    # its requests of step 20
    sp = step_prefix("", job, 20)
    hold = {"on": False}
    proxy = rctx.proxy(policy=lambda req: "stall" if hold["on"] and req.key and
                       req.key.startswith(sp) else "forward")
    cl = loopback_cluster(ctx.tmp, 2)
    n0 = rctx.daemon("n0", bucket, node=(0, 2), cluster=cl, pool="64M", slot="4M").start()
    n1 = rctx.daemon("n1", bucket, endpoint=proxy.endpoint, node=(1, 2), cluster=cl,
                     pool="64M", slot="4M").start()
    n0.node, n1.node = 0, 1
    for step in (5, 10, 20):
        hold["on"] = step == 20
        save_node(n0, job, step, [0], world, layouts, seed=step, commit=False)
        save_node(n1, job, step, [1], world, layouts, seed=step, commit=False)
        n0.rank("commit", "--job", job, "--step", step)
        if step != 20:
            wait_remote(n0, job, step)
    # step 20 is committed on both nodes (the cluster-wide commit); node 1
    # is lost before its rank of it reached the store: the store has node
    # 0's manifest of it and never a COMMIT.  (Before the cluster-wide
    # commit node 1 was lost before saving step 20 and node 0 committed its
    # rank alone; now that step would be committed nowhere.)
    wait_until(lambda: rctx.store.exists(bucket, sp + "nodes/0.manifest"), timeout=120,
               interval=0.2, what="node 0's manifest of step 20 in the bucket")
    n1.kill(signal.SIGKILL)
    shutil.rmtree(n1.state_dir)
    check(not rctx.store.exists(bucket, sp + "COMMIT"), "step 20 has a COMMIT object")
    check(not rctx.store.exists(bucket, sp + "nodes/1.manifest"),
          "node 1's manifest of step 20 reached the store through the holding proxy")
    log("   steps 5 and 10 in the store; step 20 committed on both nodes, in the store only "
        "node 0's part; node 1 lost")

    # node 0: step 20 is nowhere for rank 1; the store has rank 1 of step 10
    kv, fell = latest_rank(n0, 1, job=job)
    check(kv == {"step": 10, "world": world, "newest": 20}
          and fell == "fell back from step 20 (rank 1 not restorable there)",
          "latest --rank 1 on node 0 with the store: %r %r, expected step 10, newest 20"
          % (kv, fell))
    check(log_lines(n0, r" notice: job %s rank 1: step 20 is not restorable \(not on this "
                    r"node, replication is off, not in the object store\); trying an older step"
                    % re.escape(job)),
          "node 0's log does not say why step 20 was skipped:\n%s"
          % "\n".join(log_lines(n0, "rank 1")[-20:]))
    ranks, _ = rank_dirs(step_path(n0.state_dir, job, 10))
    check(ranks == {0, 1}, "rank 1 of step 10 was not fetched into node 0's local tier: %s"
          % ranks)
    must_verify(n0, job, 10, 1, layouts[1], seed=10, what=" (fetched from the store)")
    kv, fell = latest_rank(n0, 0, job=job)
    check(kv == {"step": 20, "world": world, "newest": 20} and fell is None,
          "latest --rank 0 on node 0: %r %r" % (kv, fell))
    log("   node 0: rank 1 -> step 10 from the store (fell back from 20); rank 0 -> step 20")

    # a node with an empty disk knows no step: the store's newest COMMIT
    fresh = rctx.daemon("fresh", bucket, node=(0, 1), pool="64M", slot="4M").start()
    fresh.node = 2
    kv, fell = latest_rank(fresh, 1, job=job)
    check(kv == {"step": 10, "world": world, "newest": 10} and fell is None,
          "latest --rank 1 on an empty node: %r %r, expected step 10" % (kv, fell))
    check(log_lines(fresh, r"job %s rank 1: no committed step here to restore it from; "
                    r"asking the object store" % re.escape(job)),
          "the empty node did not say it asked the object store")
    # below a bound: the store's newest under it, not 10
    kv, fell = latest_rank(fresh, 1, below=10, job=job)
    check(kv == {"step": 5, "world": world, "newest": 5} and fell is None,
          "latest --rank 1 --below 10 on an empty node: %r %r, expected step 5" % (kv, fell))
    must_verify(fresh, job, 5, 1, layouts[1], seed=5, what=" (fetched below a bound)")
    check(not rank_dirs(step_path(fresh.state_dir, job, 10))[0] - {1},
          "the empty node fetched more than rank 1 of step 10")
    rank_fails(fresh, ["latest", "--job", job, "--rank", 1, "--below", 5], "ENOENT", -2,
               ["has no committed step below 5 of which rank 1 can be restored",
                "none known on this node or in the object store"],
               what="latest --rank 1 --below 5 with the store")
    log("   empty node: rank 1 -> step 10; below 10 -> step 5; below 5 -> ENOENT")
    stop_clean(ctx, [n0, fresh])


# --------------------------------------------------------------------------

CASES = [
    (1, "a lost node: rank 1 falls back to the step its neighbour holds", case_lost_node),
    (2, "the walk pulls a rank from a live neighbour; a client leaving mid-walk",
     case_neighbour),
    (3, "with an object store: a step without COMMIT skipped, ranks from the store",
     case_store),
]


def main():
    return run_cases(CASES, "CKPT_FALLBACK_CASES", "ckptd-fallback-", (CKPTD, TESTRANK, RAWCLIENT))


if __name__ == "__main__":
    sys.exit(main())
