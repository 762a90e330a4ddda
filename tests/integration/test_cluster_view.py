#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`ckptctl cluster` (issue 14, "A cluster view"): from one node, every
node's reachability, newest committed step per job, steps owed to
replication targets, degraded links and errors, gathered over the
authenticated peer links within a 2 s deadline.

Three real daemons on the loopback (clique, replication factor 3: every
node replicates to both others):

  1. a step committed and replicated everywhere: `ckptctl --json cluster`
     on node 0 lists the 3 nodes reachable, each with the job's newest
     committed step and nothing owed, and exits 0; the human table has a
     row per node;
  2. node 2 SIGSTOPped: within about 3 s node 2 shows "unreachable" (its
     link is up, it does not answer), the others still reachable, exit 1;
     SIGCONT: all reachable again (its late answer to the first view
     changes nothing);
     then SIGKILLed: node 2 shows "down" (its link is gone), node 1's
     link to it degraded, exit 1; the human output names it down; a job
     of node 0's ranks alone committed then shows 1 step owed (to node 2);
  3. privacy, as STATUS's: uid 65534 sees every node reachable but none
     of root's jobs on any node; root sees them (skipped unless root);
  4. four nodes in two replication cliques: node 0 (linked to all for the
     commit) sees every node reachable; node 2, with no link to node 1,
     asks node 0 about it: reachable; stopped: unreachable (node 0's
     deadline), killed: down.
Cases can be chosen with CKPT_CV_CASES=1 (by number) when run by hand.
"""
import json
import os
import re
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (SkipTest, TestFailure, check, log, run_cases, save_node,  # noqa: E402
                     wait_until)
from cluster import Cluster, layout, stop_clean, wait_replicated  # noqa: E402

JOB = "cv.job-1"
JOB2 = "cv.job-2"
NOBODY = 65534
STEP = 7


def cluster_json(d, want_rc=None):
    p = d.ctl("--json", "cluster", check_rc=False)
    try:
        doc = json.loads(p.stdout)
    except ValueError as e:
        raise TestFailure("ckptctl --json cluster printed invalid JSON (%s): %r%s"
                             % (e, p.stdout, p.stderr))
    if want_rc is not None:
        check(p.returncode == want_rc, "ckptctl cluster exited %d, want %d: %s%s"
              % (p.returncode, want_rc, p.stdout, p.stderr))
    return doc, p.returncode


def node_of(doc, i):
    got = [n for n in doc["nodes"] if n["index"] == i]
    check(len(got) == 1, "node %d listed %d times in %r" % (i, len(got), doc))
    return got[0]


def committed_cluster(ctx, extra=None):
    cl = Cluster(ctx, 3, 3, 1, "clique", extra=extra).start()
    cl.wait_control_links()
    layouts = {r: layout(r) for r in range(cl.world)}
    for d in cl.nodes:
        save_node(d, JOB, STEP, cl.ranks_of(d.node), cl.world, layouts, commit=False)
    cl.nodes[0].rank("commit", "--job", JOB, "--step", STEP)
    for d in cl.nodes:
        wait_replicated(d, JOB, STEP)
    return cl


def check_all_reachable(cl, doc):
    check(len(doc["nodes"]) == 3, "want 3 nodes, got %r" % doc)
    for i in range(3):
        n = node_of(doc, i)
        check(n["state"] == "reachable", "node %d: state %r, want reachable: %r"
              % (i, n["state"], n))
        jobs = {j["job"]: j for j in n["jobs"]}
        check(JOB in jobs, "node %d lists no job %s: %r" % (i, JOB, n))
        check(jobs[JOB]["newest_step"] == STEP, "node %d: newest step %r, want %d"
              % (i, jobs[JOB]["newest_step"], STEP))
        check(jobs[JOB]["steps_owed"] == 0, "node %d owes %r steps after replication"
              % (i, jobs[JOB]["steps_owed"]))
        check(n["degraded_links"] == [], "node %d: degraded links %r with every node up"
              % (i, n["degraded_links"]))


def case_reachable(ctx):
    cl = committed_cluster(ctx)
    # every node's view sees the three (node 0's, and node 1's too)
    for d in cl.nodes[:2]:
        doc, _ = cluster_json(d, want_rc=0)
        check_all_reachable(cl, doc)
    text = cl.nodes[0].ctl("cluster").stdout
    log("   ckptctl cluster on node 0:\n" + text)
    for i in range(3):
        check(re.search(r"^\s*%d\s+\S+\s+reachable\b" % i, text, re.M),
              "no reachable row for node %d in:\n%s" % (i, text))
    check(JOB in text, "the human output does not name job %s:\n%s" % (JOB, text))
    # a clean exit: a view left on a connection or a late answer leaks
    # nothing (ASan's leak report at exit)
    stop_clean(cl.nodes)


def kill_stopped(victim):
    """SIGKILL a daemon the case SIGSTOPped (a stopped process takes the
    kill only once continued) and reap it."""
    victim.kill(signal.SIGKILL)
    try:
        os.kill(victim.proc.pid, signal.SIGCONT)
    except OSError:
        pass
    victim.proc.wait(30)


def case_stopped_then_killed(ctx):
    cl = committed_cluster(ctx)
    cluster_json(cl.nodes[0], want_rc=0)
    victim = cl.nodes[2]
    os.kill(victim.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        doc, _ = cluster_json(cl.nodes[0], want_rc=1)
        took = time.monotonic() - t0
        check(took < 4.0, "the answer with node 2 stopped took %.1f s (deadline 2 s)" % took)
        log("   with node 2 stopped: answered in %.1f s" % took)
        check(node_of(doc, 2)["state"] == "unreachable",
              "stopped node 2 should be unreachable: %r" % node_of(doc, 2))
        for i in (0, 1):
            n = node_of(doc, i)
            check(n["state"] == "reachable", "node %d should stay reachable: %r" % (i, n))
        # woken up, it answers the request it slept through (too late:
        # dropped) and the next one in time
        os.kill(victim.proc.pid, signal.SIGCONT)
        doc, _ = cluster_json(cl.nodes[0], want_rc=0)
        check_all_reachable(cl, doc)
    finally:
        kill_stopped(victim)

    def down():
        doc, rc = cluster_json(cl.nodes[0])
        return (doc, rc) if node_of(doc, 2)["state"] == "down" else None
    doc, rc = wait_until(down, timeout=15, interval=0.3, what="node 2 shown down")
    check(rc == 1, "ckptctl cluster with a node down exited %d, want 1" % rc)
    check(node_of(doc, 0)["state"] == "reachable", "node 0 itself: %r" % node_of(doc, 0))
    check(2 in node_of(doc, 1)["degraded_links"],
          "node 1's link to the killed node 2 should be degraded: %r" % node_of(doc, 1))
    p = cl.nodes[0].ctl("cluster", check_rc=False)
    log("   ckptctl cluster on node 0, node 2 killed:\n" + p.stdout)
    log("   --json: " + json.dumps(doc))
    check(p.returncode == 1, "human ckptctl cluster exit %d, want 1" % p.returncode)
    check(re.search(r"^\s*2\s+\S+\s+down\b", p.stdout, re.M),
          "no down row for node 2 in:\n%s" % p.stdout)

    # a job of node 0's ranks alone commits without node 2, and its step
    # stays owed to node 2 (node 1 acknowledges its copy)
    layouts = {r: layout(r) for r in cl.ranks_of(0)}
    save_node(cl.nodes[0], JOB2, 1, cl.ranks_of(0), len(layouts), layouts)

    def owed_one():
        doc, _ = cluster_json(cl.nodes[0])
        jobs = {j["job"]: j for j in node_of(doc, 0)["jobs"]}
        j = jobs.get(JOB2)
        return j if j and j["newest_step"] == 1 and j["steps_owed"] == 1 else None
    wait_until(owed_one, timeout=30, interval=0.3,
               what="node 0 listing %s step 1 with 1 step owed (to node 2)" % JOB2)
    stop_clean(cl.nodes[:2])


def case_privacy(ctx):
    if os.geteuid() != 0:
        raise SkipTest("needs root to run ckptctl as uid %d (setpriv)" % NOBODY)
    for path in (os.path.dirname(ctx.tmp), ctx.tmp):
        os.chmod(path, 0o755)  # nobody must reach the sockets
    cl = committed_cluster(ctx, extra=["--socket-mode", "0666"])
    p = cl.nodes[1].ctl("--json", "cluster", user=NOBODY, check_rc=False)
    check(p.returncode == 0, "ckptctl cluster as uid %d: exit %d: %s%s"
          % (NOBODY, p.returncode, p.stdout, p.stderr))
    check(JOB not in p.stdout, "uid %d sees root's job %s: %s" % (NOBODY, JOB, p.stdout))
    doc = json.loads(p.stdout)
    for i in range(3):
        n = node_of(doc, i)
        check(n["state"] == "reachable" and n["jobs"] == [] and n["jobs_omitted"] == 0,
              "uid %d's view of node %d: %r" % (NOBODY, i, n))
    text = cl.nodes[1].ctl("cluster", user=NOBODY).stdout
    check(JOB not in text, "uid %d sees root's job in:\n%s" % (NOBODY, text))
    doc, _ = cluster_json(cl.nodes[1], want_rc=0)
    check_all_reachable(cl, doc)
    stop_clean(cl.nodes)


def case_partial_links(ctx):
    """Replication factor 2 of 4 nodes: cliques {0,1} and {2,3}.  Node 0,
    which every node links to for the commit, sees all four; node 2 has
    no link to node 1 and asks node 0 about it (a relay): node 1 reachable
    with its jobs, exit 0.  Node 1 stopped: node 0's own deadline (1.5 s)
    makes it unreachable in node 2's view, in time; killed: down, with node
    0's reason."""
    cl = Cluster(ctx, 4, 2, 1, "clique").start()
    cl.wait_control_links()
    doc0, _ = cluster_json(cl.nodes[0], want_rc=0)
    for i in range(4):
        check(node_of(doc0, i)["state"] == "reachable", "node 0's view: %r" % node_of(doc0, i))
    doc, _ = cluster_json(cl.nodes[2], want_rc=0)
    for i in range(4):
        check(node_of(doc, i)["state"] == "reachable", "node 2's view: %r" % node_of(doc, i))
    check(node_of(doc, 1)["jobs"] == node_of(doc0, 1)["jobs"] and
          node_of(doc, 1)["node"] == node_of(doc0, 1)["node"],
          "node 2's view of node 1 through node 0 %r differs from node 0's %r"
          % (node_of(doc, 1), node_of(doc0, 1)))

    victim = cl.nodes[1]
    os.kill(victim.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        doc, _ = cluster_json(cl.nodes[2], want_rc=1)
        took = time.monotonic() - t0
        n1 = node_of(doc, 1)
        check(n1["state"] == "unreachable" and "no answer to node 0" in n1["last_error"],
              "node 2's view of the stopped node 1: %r; want unreachable, said by node 0" % n1)
        check(took < 4.0, "node 2's answer with node 1 stopped took %.1f s" % took)
        log("   node 2's view, node 1 stopped, through node 0: %.1f s, %r"
            % (took, n1["last_error"]))
    finally:
        kill_stopped(victim)

    def down():
        doc, rc = cluster_json(cl.nodes[2])
        return (doc, rc) if node_of(doc, 1)["state"] == "down" else None
    doc, rc = wait_until(down, timeout=15, interval=0.3, what="node 2 showing node 1 down")
    check(rc == 1 and node_of(doc, 1)["last_error"],
          "node 2's view of the killed node 1: exit %d, %r" % (rc, node_of(doc, 1)))
    for i in (0, 2, 3):
        check(node_of(doc, i)["state"] == "reachable", "node 2's view: %r" % node_of(doc, i))
    stop_clean([n for k, n in enumerate(cl.nodes) if k != 1])


CASES = [
    (1, "three nodes reachable, the newest committed step of each", case_reachable),
    (2, "a stopped node is unreachable, a killed one down", case_stopped_then_killed),
    (3, "a user sees only its own jobs, on every node", case_privacy),
    (4, "without a link: through node 0, which sees every node", case_partial_links),
]

if __name__ == "__main__":
    sys.exit(run_cases(CASES, "CKPT_CV_CASES", "ckptd-cluster-view-"))
