#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The cluster-wide commit (issue 10): with [cluster] node_count > 1 a step
is committed only when every rank 0..world_size-1 is on some node's disk,
and then every node holding ranks of it says so.

Why: a trainer restores "the latest step" (ckpt_latest, the README, the
example trainer).  Before the cluster commit, a commit on one node made
that node name a step whose other ranks were never saved anywhere -- a
checkpoint that cannot be restored.  These cases check what a trainer
relies on, with four real daemons (two ranks each, world 8):

  1. commit from one rank only, from every rank at once, and without a
     barrier (each rank commits right after its own save, before the other
     nodes' ranks saved): the commit returns 0, every node's `latest` names
     the step, every rank reads back bit-exact through its node;
  2. one node's ranks never save: the commit times out (ETIMEDOUT) naming
     the missing ranks and the node, and no node calls the step committed;
  3. a save of a step with another world_size than the cluster's first
     save of it is refused with EINVAL naming both values; saved while node
     0 was away, the disagreement is refused once it is back, and the step
     is committed nowhere;
  4. case 1 with the daemons in network namespaces, then node 3's link goes
     down while a step is being decided: the commit waits (times out, or
     succeeds if the decision was out), and once the link is back every
     node converges on the step;
  5. a kill loop: >= 50 SIGKILLs of random daemons (node 0, the
     coordinator, included) while every node saves and commits steps; a
     commit that returned 0 is committed on every node after the restarts
     and restores bit-exact; a step with a rank never saved is committed
     nowhere, ever;
  6. the kill loop (25 kills) with replication factor 2: the same, and
     every committed step reaches its replica holders and reads back
     bit-exact through them too.

Cases can be chosen with CKPT_CC_CASES=2,3 (by number) when run by hand.
Case 4 skips itself when not run as root or when `ip netns` or a bridge
cannot be made; the file passes when the other cases pass.
"""
import json
import os
import random
import re
import shutil
import signal
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (SkipTest, TestFailure, check, check_log_clean, log,  # noqa: E402
                     run_cases, save_node, wait_until)
from cluster import Cluster, ip, must_verify, verify_rank, wait_replicated  # noqa: E402

JOB = "cc.job-1"
NODES, RPN = 4, 2


def small_layout(r):
    """KiB shards: the cases are about the commit, not the bytes."""
    return [("empty", 0), ("opt.state", 4096 + 17 * r + 5), ("w", 1024 * (1 + r % 3) + r)]


LAYOUTS = {r: small_layout(r) for r in range(NODES * RPN)}


# --------------------------------------------------------------------------
# helpers of this file only


def in_threads(fns):
    """Run the callables at once; raise the first failure."""
    errors = []

    def one(fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    ts = [threading.Thread(target=one, args=(fn,)) for fn in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0] if isinstance(errors[0], TestFailure) else TestFailure(repr(errors[0]))


def save_all(cl, job, step, seed=0, nodes=None, world=None):
    """The ranks of every node (or of those given) save, all nodes at once,
    without a commit."""
    in_threads([lambda d=d: save_node(d, job, step, cl.ranks_of(d.node), world or cl.world,
                                      LAYOUTS, seed=seed, commit=False)
                for d in (nodes or cl.nodes)])


def commit(d, job, step, timeout_ms=30000):
    return d.rank("commit", "--job", job, "--step", step, "--timeout", timeout_ms,
                  check_rc=False, timeout=timeout_ms / 1000 + 60)


def commit_async(d, job, step, timeout_ms=30000):
    return d.rank_async("commit", "--job", job, "--step", step, "--timeout", timeout_ms)


def must_commit(d, job, step, timeout_ms=30000):
    p = commit(d, job, step, timeout_ms)
    check(p.returncode == 0, "commit of step %d on node %d failed (%d): %s\n--- its log ---\n%s"
          % (step, d.node, p.returncode, p.stderr.strip(), d.read_log()[-3000:]))


def latest(d, job):
    """(step, world) that `latest` names on d, or the error text."""
    p = d.rank("latest", "--job", job, check_rc=False, timeout=60)
    if p.returncode != 0:
        return p.stderr.strip() or "exit %d" % p.returncode
    words = p.stdout.split()
    return (int(words[0]), int(words[1])) if len(words) == 2 else p.stdout


def states(d, job):
    """{step: state} of `ckptctl --json list JOB` on d; {} when d knows no
    such job (or is down)."""
    p = d.ctl("--json", "list", job, check_rc=False)
    if p.returncode != 0:
        return {}
    try:
        return {row["step"]: row["state"] for row in json.loads(p.stdout)}
    except (ValueError, KeyError, TypeError) as e:
        raise TestFailure("node %d: ckptctl --json list %s printed %r (%s)"
                          % (d.node, job, p.stdout, e))


def show_state(d, job, step):
    """The state `ckptctl --json show JOB STEP` gives on d, or None when d
    does not know the step."""
    p = d.ctl("--json", "show", job, step, check_rc=False)
    if p.returncode != 0:
        return None
    try:
        return json.loads(p.stdout).get("state")
    except (ValueError, AttributeError) as e:
        raise TestFailure("node %d: ckptctl --json show %s %d printed %r (%s)"
                          % (d.node, job, step, p.stdout, e))


def steps_text(steps, limit=240):
    """Steps as ranges ("1-4, 7"), cut at limit characters: failure
    messages of the kill loop stay readable."""
    runs = []
    for x in sorted(steps):
        if runs and x == runs[-1][1] + 1:
            runs[-1][1] = x
        else:
            runs.append([x, x])
    text = ", ".join("%d-%d" % (a, b) if b > a else "%d" % a for a, b in runs) or "none"
    return text if len(text) <= limit else text[:limit] + "... (%d steps)" % len(steps)


def committed_on(d, job):
    return {s for s, st in states(d, job).items() if st == "committed"}


def check_agree(cl, job, step, seed=0, world=None, what=""):
    """Right after a commit returned 0: every node names step as latest and
    lists it committed, and every rank reads back bit-exact through its node.
    The commit returns only once every holder recorded it, so no waiting."""
    world = world or cl.world
    for d in cl.nodes:
        got = latest(d, job)
        if got != (step, world):
            # say whether it is slow or wrong
            try:
                wait_until(lambda: latest(d, job) == (step, world), timeout=10, interval=0.2)
                later = "it did within 10 s"
            except TestFailure:
                later = "not even 10 s later (then %r)" % (latest(d, job),)
            raise TestFailure("%snode %d: latest of %s is %r right after the commit returned, "
                              "expected (%d, %d); %s" % (what, d.node, job, got, step, world,
                                                         later))
        st = states(d, job).get(step)
        check(st == "committed", "%snode %d: ckptctl --json list %s shows step %d as %r, not "
              "committed" % (what, d.node, job, step, st))
    for d in cl.nodes:
        for r in cl.ranks_of(d.node):
            must_verify(d, job, step, r, LAYOUTS[r], seed=seed, what=what)


def commit_variants(cl, job, first_step):
    """One commit, a commit from every rank, and commits without a barrier
    (case 1, and case 4 in namespaces).  Returns the last step committed."""
    # a. every rank saved; one rank of one node (not the coordinator) commits
    step = first_step
    save_all(cl, job, step, seed=step)
    t0 = time.monotonic()
    must_commit(cl.nodes[3], job, step)
    log("   step %d: one commit on node 3 returned after %.2f s" % (step, time.monotonic() - t0))
    check_agree(cl, job, step, seed=step, what="one commit: ")

    # b. every rank commits, all at once, after the barrier
    step += 1
    save_all(cl, job, step, seed=step)
    t0 = time.monotonic()
    procs = [(d, commit_async(d, job, step)) for d in cl.nodes for _ in range(cl.rpn)]
    for d, p in procs:
        out, err = p.communicate(timeout=120)
        check(p.returncode == 0, "commit of step %d by every rank: one on node %d failed (%d): %s"
              % (step, d.node, p.returncode, err.strip()))
    log("   step %d: %d concurrent commits returned after %.2f s"
        % (step, len(procs), time.monotonic() - t0))
    check_agree(cl, job, step, seed=step, what="every rank commits: ")

    # c. no barrier: each rank commits as soon as its own save returned,
    #    while the other nodes' ranks have not saved yet (the nodes save one
    #    after another); no commit may return before the last node's ranks
    #    saved, and all succeed
    step += 1
    procs = []
    for d in cl.nodes:
        early = [(n.node, p.returncode, p.stderr.read()) for n, p in procs
                 if p.poll() is not None]
        check(not early, "step %d without a barrier: commits returned before node %d's ranks "
              "saved: %s" % (step, d.node, early))
        save_node(d, job, step, cl.ranks_of(d.node), cl.world, LAYOUTS, seed=step,
                  commit=False)
        procs += [(d, commit_async(d, job, step, 60000)) for _ in range(cl.rpn)]
        time.sleep(0.5)
    for d, p in procs:
        out, err = p.communicate(timeout=120)
        check(p.returncode == 0, "step %d without a barrier: the commit on node %d failed (%d): %s"
              % (step, d.node, p.returncode, err.strip()))
    log("   step %d: %d commits, each started before the later nodes saved, all returned 0"
        % (step, len(procs)))
    check_agree(cl, job, step, seed=step, what="no barrier: ")
    return step


def stop_clean(cl):
    for d in cl.nodes:
        check_log_clean(d)
        rc = d.stop()
        check(rc == 0, "node %d exited %s on SIGTERM:\n%s" % (d.node, rc, d.read_log()[-3000:]))


# --------------------------------------------------------------------------
# 1. commit from one rank, from every rank, without a barrier (loopback)


def case_loopback(ctx):
    cl = Cluster(ctx, NODES, 2, ranks_per_node=RPN, prefix="lo").start()
    commit_variants(cl, JOB, 1)
    stop_clean(cl)


# --------------------------------------------------------------------------
# 2. one node's ranks never save


def case_missing_node(ctx):
    cl = Cluster(ctx, NODES, 1, ranks_per_node=RPN, prefix="miss").start()
    # a committed step first, so that `latest` has something to name
    save_all(cl, JOB, 4, seed=4)
    must_commit(cl.nodes[0], JOB, 4)
    check_agree(cl, JOB, 4, seed=4)

    step = 5
    save_all(cl, JOB, step, seed=step, nodes=[cl.nodes[n] for n in (0, 1, 3)])
    for n in (0, 1):  # the coordinator, and a node that is not
        d = cl.nodes[n]
        t0 = time.monotonic()
        p = commit(d, JOB, step, 3000)
        took = time.monotonic() - t0
        msg = p.stderr.strip()
        check(p.returncode == 1 and "ETIMEDOUT" in msg,
              "commit on node %d with node 2's ranks never saved: exit %d, expected ETIMEDOUT: "
              "%s%s" % (n, p.returncode, p.stdout, msg))
        check(2.5 <= took < 20, "commit --timeout 3000 on node %d returned after %.1f s"
              % (n, took))
        # "... ranks 4-5 of 8 are not saved (nodes with none saved: 2)"
        check(re.search(r"\branks? 4-5 of 8\b", msg) and "not saved" in msg,
              "node %d: the timeout does not name ranks 4-5 of 8 as not saved: %r" % (n, msg))
        check(re.search(r"nodes? with none saved: 2\b", msg),
              "node %d: the timeout does not name node 2 as the node with none saved: %r"
              % (n, msg))
        check("step %d" % step in msg and JOB in msg,
              "node %d: the timeout does not name the step and job: %r" % (n, msg))
        log("   node %d: %s (%.1f s)" % (n, msg.split(": ", 2)[-1], took))

    # nobody calls it committed, and `latest` still names step 4
    time.sleep(1)
    for d in cl.nodes:
        got = latest(d, JOB)
        check(got == (4, cl.world), "node %d: latest of %s is %r with step %d uncommitted, "
              "expected (4, %d)" % (d.node, JOB, got, step, cl.world))
        st = states(d, JOB).get(step)
        check(st != "committed", "node %d: ckptctl list calls step %d committed although ranks "
              "4-5 were never saved" % (d.node, step))
        if d.node != 2:
            check(st is not None, "node %d: ckptctl list does not show step %d it holds ranks of"
                  % (d.node, step))
        shown = show_state(d, JOB, step)
        check(shown != "committed", "node %d: ckptctl show calls step %d committed" % (d.node, step))
    log("   no node reports step %d committed; latest is step 4 everywhere" % step)
    stop_clean(cl)


# --------------------------------------------------------------------------
# 3. world_size disagreement


def case_world_size(ctx):
    cl = Cluster(ctx, NODES, 1, ranks_per_node=RPN, prefix="ws").start()
    # the check is the coordinator's: a save begun before a node's link to
    # it is up is not checked then (its commit is refused later, below)
    cl.wait_control_links()
    step = 7
    save_node(cl.nodes[0], JOB, step, cl.ranks_of(0), 8, LAYOUTS, seed=step, commit=False)
    late = cl.nodes[2]
    p = late.rank("save", "--job", JOB, "--step", step, "--rank", 4, "--world", 16,
                  "--shards", "opt.state:4096", "--seed", step, check_rc=False)
    msg = p.stderr.strip()
    check(p.returncode != 0 and "EINVAL" in msg,
          "node 2 saving step %d with world 16 after node 0 saved it with world 8: exit %d, "
          "expected EINVAL: %s%s" % (step, p.returncode, p.stdout, msg))
    check(re.search(r"\b8\b", msg.split("EINVAL", 1)[1]) and re.search(r"\b16\b", msg),
          "the refusal does not name both world sizes (8 and 16): %r" % msg)
    check("world_size" in msg or "world size" in msg,
          "the refusal does not say what disagrees: %r" % msg)
    log("   node 2: %s" % msg.split(": ", 2)[-1])
    # the refused save left nothing behind: with world 8 the step saves and
    # commits on every node
    save_all(cl, JOB, step, seed=step, nodes=cl.nodes[1:])
    must_commit(late, JOB, step)
    check_agree(cl, JOB, step, seed=step, what="after the refused save: ")

    # with node 0 away the saves cannot be checked: node 2 saves step 8
    # with world 16 and node 1 with world 8; once node 0 is back the step
    # is committed nowhere, and the commit says why
    step = 8
    cl.nodes[0].kill(signal.SIGKILL)
    save_node(cl.nodes[1], JOB, step, cl.ranks_of(1), 8, LAYOUTS, seed=step, commit=False)
    p = late.rank("save", "--job", JOB, "--step", step, "--rank", 4, "--world", 16,
                  "--shards", "opt.state:4096", "--seed", step, check_rc=False, timeout=60)
    log("   node 0 down: node 2's world-16 save of step %d: %s" % (
        step, "accepted" if p.returncode == 0 else p.stderr.strip().split(": ", 2)[-1]))
    cl.nodes[0].start(timeout=60)
    cl.wait_control_links({1: 2, 2: 2, 3: 2})
    # which world_size the cluster took depends on which report reached
    # node 0 first: the late saves (nodes 0 and 3, world 8) may be refused,
    # the commits on both sides fail; one refusal at least is EINVAL naming
    # both values
    msgs = []
    for n in (0, 3):
        for r in cl.ranks_of(n):
            p = cl.nodes[n].rank("save", "--job", JOB, "--step", step, "--rank", r, "--world", 8,
                                 "--shards", ",".join("%s:%d" % x for x in LAYOUTS[r]),
                                 "--seed", step, check_rc=False, timeout=60)
            check(p.returncode == 0 or "EINVAL" in p.stderr,
                  "node %d's save of rank %d of step %d (world 8) failed otherwise than with "
                  "EINVAL: %s" % (n, r, step, p.stderr.strip()))
            if p.returncode:
                msgs.append(p.stderr.strip())
    log("   node 0 back: %d of the saves on nodes 0 and 3 (world 8) refused%s"
        % (len(msgs), (": " + msgs[0].split(": ", 2)[-1]) if msgs else ""))
    procs = [(n, commit_async(cl.nodes[n], JOB, step, 5000)) for n in (1, 2)]
    for n, p in procs:
        out, err = p.communicate(timeout=60)
        check(p.returncode != 0, "step %d was committed (on node %d) although node 2 saved a "
              "rank of it with world 16 and the others with world 8" % (step, n))
        msgs.append(err.strip())
        log("   commit of step %d on node %d: %s" % (step, n, err.strip().split(": ", 2)[-1]))
    check(any("EINVAL" in m and re.search(r"world_size (8|16)\b.*\b(16|8)\b", m)
              for m in msgs),
          "the saves and commits of step %d (world sizes 8 and 16 saved while node 0 was away) "
          "should be refused, one at least with EINVAL naming both: %r" % (step, msgs))
    for d in cl.nodes:
        check(states(d, JOB).get(step) != "committed",
              "node %d lists step %d committed (world sizes 8 and 16)" % (d.node, step))
    stop_clean(cl)


# --------------------------------------------------------------------------
# 4. network namespaces; a partition during the decision


def make_netns(ctx, count):
    """count namespaces, each with one veth into a bridge in a namespace of
    its own (nothing touches the host's network); returns (namespaces,
    their veth names, addresses)."""
    if os.geteuid() != 0:
        raise SkipTest("network namespaces need root")
    if shutil.which("ip") is None:
        raise SkipTest("no ip(8)")
    tag = "%d" % (os.getpid() % 100000)
    br_ns = "ckcc%s-br" % tag
    probe = ip("netns", "add", br_ns, check_rc=False)
    if probe.returncode != 0:
        raise SkipTest("ip netns add failed: %s" % probe.stderr.strip())
    ctx.cleanups.append(lambda: ip("netns", "del", br_ns, check_rc=False))
    probe = ip("-n", br_ns, "link", "add", "br0", "type", "bridge", check_rc=False)
    if probe.returncode != 0:
        raise SkipTest("cannot make a bridge: %s" % probe.stderr.strip())
    ip("-n", br_ns, "link", "set", "br0", "up")
    ns = ["ckcc%s-%d" % (tag, i) for i in range(count)]
    veth = ["cc%sn%d" % (tag, i) for i in range(count)]
    addrs = ["10.201.0.%d" % (i + 1) for i in range(count)]
    for i in range(count):
        ip("netns", "add", ns[i])
        ctx.cleanups.append(lambda n=ns[i]: ip("netns", "del", n, check_rc=False))
        port = "cc%sb%d" % (tag, i)
        ip("link", "add", veth[i], "netns", ns[i], "type", "veth", "peer", "name", port,
           "netns", br_ns)
        ip("-n", br_ns, "link", "set", port, "master", "br0")
        ip("-n", br_ns, "link", "set", port, "up")
        ip("-n", ns[i], "link", "set", "lo", "up")
        ip("-n", ns[i], "addr", "add", addrs[i] + "/24", "dev", veth[i])
        ip("-n", ns[i], "link", "set", veth[i], "up")
    return ns, veth, addrs


def case_netns(ctx):
    ns, veth, addrs = make_netns(ctx, NODES)
    cl = Cluster(ctx, NODES, 2, ranks_per_node=RPN, hosts=addrs, netns=ns, prefix="ns").start()
    step = commit_variants(cl, JOB, 1)
    log("   one, every and barrier-less commits agree across namespaces")

    # every rank saves and reaches its node's disk (so each node reported
    # it), then node 3's link goes down, then node 0 commits
    step += 1
    save_all(cl, JOB, step, seed=step)
    for d in cl.nodes:
        d.rank("wait", "--job", JOB, "--step", step, "--tier", "local", "--timeout", 30000)
    ip("-n", ns[3], "link", "set", veth[3], "down")
    t0 = time.monotonic()
    p = commit(cl.nodes[0], JOB, step, 4000)
    took = time.monotonic() - t0
    msg = p.stderr.strip()
    check(p.returncode == 0 or (p.returncode == 1 and "ETIMEDOUT" in msg),
          "commit of step %d with node 3 cut off: exit %d, expected 0 or ETIMEDOUT: %s%s"
          % (step, p.returncode, p.stdout, msg))
    # what may be missing is node 3's word (its ranks' report, if the cut
    # caught it on the way, or its record of the decision), nothing of the
    # nodes still connected: their ranks were on disk before the cut
    check(p.returncode == 0 or "decided; not yet recorded by node 3" in msg or
          re.search(r"ranks 6-7 of 8 are not saved \(nodes with none saved: 3\)", msg),
          "commit of step %d with node 3 cut off: the coordinator misses more than node 3's "
          "ranks, although nodes 0-2 saved theirs before the cut and stayed connected: %s"
          % (step, msg))
    log("   node 3 cut off: the commit %s after %.1f s%s"
        % ("returned 0" if p.returncode == 0 else "timed out", took,
           "" if p.returncode == 0 else ": " + p.stderr.strip().split(": ", 2)[-1]))
    # node 3 cannot have heard of a decision taken after it was cut off
    got = latest(cl.nodes[3], JOB)
    check(got != (step, cl.world), "node 3 names step %d latest although it was cut off before "
          "the commit was asked for" % step)
    check(states(cl.nodes[3], JOB).get(step) != "committed",
          "node 3 lists step %d committed although it was cut off before the commit" % step)
    time.sleep(2)

    # the link comes back: every node converges on the step
    ip("-n", ns[3], "link", "set", veth[3], "up")
    t1 = time.monotonic()
    if p.returncode != 0:
        # the trainer retries its commit, as it would after a timeout
        must_commit(cl.nodes[1], JOB, step, 60000)
    for d in cl.nodes:
        wait_until(lambda: latest(d, JOB) == (step, cl.world) and
                   states(d, JOB).get(step) == "committed", timeout=60, interval=0.25,
                   what=lambda: "node %d to converge on step %d after the link came back "
                   "(latest %r, list %r)" % (d.node, step, latest(d, JOB), states(d, JOB)))
    log("   every node agrees on step %d %.1f s after the link came back"
        % (step, time.monotonic() - t1))
    check_agree(cl, JOB, step, seed=step, what="after the partition: ")
    # and the cluster goes on: a step committed from the node that was cut off
    step += 1
    save_all(cl, JOB, step, seed=step)
    must_commit(cl.nodes[3], JOB, step)
    check_agree(cl, JOB, step, seed=step, what="after the partition, a new step: ")
    stop_clean(cl)


# --------------------------------------------------------------------------
# 5. a kill loop across the cluster


KILLS = int(os.environ.get("CKPT_CC_KILLS", "50"))
KILL_COMMIT_MS = 2500


# steps a kill loop must see committed, or it tested little
MIN_ACKED = 5


class KillLoop:
    """The state shared by the trainer loop (main thread) and the killer."""

    def __init__(self, cl, job, kills):
        self.cl, self.job, self.want_kills = cl, job, kills
        self.lock = threading.Lock()
        self.acked = set()          # steps some commit returned 0 for
        self.skipped = set()        # steps one rank of which never saved
        self.kills = 0
        self.kills_by_node = [0] * cl.count
        self.stop = threading.Event()
        self.errors = []
        self.restart_checks = 0

    def killer(self, rnd):
        try:
            # the kills asked for, and on until MIN_ACKED steps committed
            # under them (a slow build, ASan, commits fewer between kills;
            # the loop's 400 s bound still holds)
            while ((self.kills < self.want_kills or len(self.acked) < MIN_ACKED)
                   and not self.stop.is_set()):
                time.sleep(rnd.uniform(0.2, 1.6))
                n = rnd.randrange(self.cl.count) if rnd.random() > 0.25 else 0
                d = self.cl.nodes[n]
                with self.lock:
                    before = set(self.acked)
                d.kill(signal.SIGKILL)
                self.kills += 1
                self.kills_by_node[n] += 1
                time.sleep(rnd.uniform(0.0, 0.8))
                d.start(timeout=60)
                # cheap check after each restart: the steps whose commits
                # had returned 0 before the kill are still committed here
                # (each holder recorded them durably before the commit
                # returned), and none with a rank left out is
                if before:
                    wait_until(lambda: before <= committed_on(d, self.job), timeout=10,
                               interval=0.1,
                               what=lambda: "node %d, restarted after kill %d, to list committed "
                               "the steps whose commits had returned 0 before the kill; it lacks "
                               "%s" % (n, self.kills,
                                       steps_text(before - committed_on(d, self.job))))
                    bad = committed_on(d, self.job) & self.skipped
                    check(not bad, "node %d, restarted after kill %d, lists steps %s committed, "
                          "but a rank of each was never saved" % (n, self.kills, steps_text(bad)))
                    self.restart_checks += 1
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            self.errors.append(e)
        finally:
            self.stop.set()

    def check_never_skipped(self):
        """No node lists committed a step one rank of which never saved."""
        for d in self.cl.nodes:
            bad = committed_on(d, self.job) & self.skipped
            check(not bad, "node %d lists steps %s committed, but a rank of each was never "
                  "saved" % (d.node, steps_text(bad)))


def trainer_step(kl, rnd, step):
    """One step of every rank: saves (some may fail while a daemon is down),
    perhaps a rank left out on purpose, commits from a random node or two."""
    cl = kl.cl
    skip = rnd.randrange(cl.world) if rnd.random() < 0.15 else None
    if skip is not None:
        with kl.lock:
            kl.skipped.add(step)
    procs = []
    for r in range(cl.world):
        if r == skip:
            continue
        d = cl.nodes[cl.node_of(r)]
        procs.append(d.rank_async("save", "--job", kl.job, "--step", step, "--rank", r,
                                  "--world", cl.world, "--shards",
                                  ",".join("%s:%d" % s for s in LAYOUTS[r]), "--seed", step,
                                  "--timeout", KILL_COMMIT_MS))
    saved = 0
    for p in procs:
        p.communicate(timeout=120)
        saved += p.returncode == 0
    committers = rnd.sample(cl.nodes, rnd.choice((1, 1, 2)))
    cps = [commit_async(d, kl.job, step, KILL_COMMIT_MS) for d in committers]
    ok = False
    for p in cps:
        out, err = p.communicate(timeout=KILL_COMMIT_MS / 1000 + 60)
        if p.returncode == 0:
            ok = True
    if ok:
        if skip is not None:
            raise TestFailure("a commit of step %d returned 0 although rank %d never saved"
                              % (step, skip))
        with kl.lock:
            kl.acked.add(step)
    return saved, ok


def kill_loop(ctx, factor, kills):
    cl = Cluster(ctx, NODES, factor, ranks_per_node=RPN, prefix="kill%d-" % factor,
                 extra=["--local-keep", "1000"]).start()
    seed = int(os.environ.get("CKPT_CC_SEED", str(random.randrange(1 << 30))))
    log("   seed %d (CKPT_CC_SEED to repeat)" % seed)
    rnd = random.Random(seed)
    kl = KillLoop(cl, JOB, kills)
    killer = threading.Thread(target=kl.killer, args=(random.Random(seed + 1),))
    t0 = time.monotonic()
    killer.start()
    step = 0
    try:
        while not kl.stop.is_set():
            step += 1
            trainer_step(kl, rnd, step)
            time.sleep(rnd.uniform(0.0, 0.15))  # steps start at random moments of the kills
            if step % 10 == 0:
                kl.check_never_skipped()
            check(time.monotonic() - t0 < 400, "the kill loop ran for 400 s (%d kills, %d steps)"
                  % (kl.kills, step))
    finally:
        kl.stop.set()
        killer.join()
    if kl.errors:
        e = kl.errors[0]
        raise e if isinstance(e, TestFailure) else TestFailure(repr(e))
    log("   %d kills (per node %s) over %d steps in %.0f s; %d steps acked, %d with a rank "
        "left out; %d restart checks" % (kl.kills, kl.kills_by_node, step,
                                         time.monotonic() - t0, len(kl.acked),
                                         len(kl.skipped), kl.restart_checks))
    check(kl.kills >= kills and kl.kills_by_node[0] >= 1,
          "only %d kills (node 0: %d)" % (kl.kills, kl.kills_by_node[0]))
    check(len(kl.acked) >= MIN_ACKED, "only %d of %d steps were committed: the loop tested little"
          % (len(kl.acked), step))

    # with every daemon up, one more step commits normally
    step += 1
    save_all(cl, JOB, step, seed=step)
    must_commit(cl.nodes[rnd.randrange(cl.count)], JOB, step)
    kl.acked.add(step)

    # convergence: every node lists every acked step committed, and all
    # nodes list the same committed steps (a decision some missed reaches them)
    def converged():
        sets = [committed_on(d, JOB) for d in cl.nodes]
        return all(kl.acked <= s for s in sets) and all(s == sets[0] for s in sets)
    t1 = time.monotonic()
    wait_until(converged, timeout=60, interval=0.5,
               what=lambda: "the nodes to converge: acked steps missing per node %s; committed "
               "on some node but not all: %s" % (
                   ["node %d: %s" % (d.node, steps_text(kl.acked - committed_on(d, JOB), 80))
                    for d in cl.nodes],
                   steps_text(set.union(*[committed_on(d, JOB) for d in cl.nodes]) -
                              set.intersection(*[committed_on(d, JOB) for d in cl.nodes]))))
    log("   converged %.1f s after the loop" % (time.monotonic() - t1))
    kl.check_never_skipped()
    committed = committed_on(cl.nodes[0], JOB)
    newest = max(committed)
    for d in cl.nodes:
        got = latest(d, JOB)
        check(got == (newest, cl.world), "node %d: latest %r, expected (%d, %d)"
              % (d.node, got, newest, cl.world))
    # every committed step (acked, or decided while its commits timed out)
    # restores bit-exact, every rank through its node
    unacked = committed - kl.acked
    t2 = time.monotonic()
    bad = []
    for s in sorted(committed):
        for d in cl.nodes:
            # with replication, through each holder of a copy too, once the
            # node says the step reached its targets
            holders = [d]
            if factor > 1:
                wait_replicated(d, JOB, s, timeout_s=60)
                holders += [cl.nodes[t] for t in cl.targets(d.node)]
            for r, h in [(r, h) for r in cl.ranks_of(d.node) for h in holders]:
                err = verify_rank(h, JOB, s, r, LAYOUTS[r], seed=s)
                if err:
                    bad.append("step %d rank %d through node %d%s: %s"
                               % (s, r, h.node, " (acked)" if s in kl.acked else "", err))
    check(not bad, "%d reads of committed steps failed: %s" % (len(bad), bad[:5]))
    log("   %d committed steps (%d acked, %d decided while their commits timed out) restore "
        "bit-exact on every node (%.1f s); none of the %d with a rank left out is committed"
        % (len(committed), len(kl.acked), len(unacked), time.monotonic() - t2,
           len(kl.skipped)))
    stop_clean(cl)


def case_kill_loop(ctx):
    kill_loop(ctx, 1, KILLS)


def case_kill_loop_replicated(ctx):
    # the same with neighbour replication (cliques {0,1} {2,3}): a killed
    # node's restart also resumes the replicas it owes and is owed, and
    # decisions reach the replica holders' areas; half the kills
    kill_loop(ctx, 2, max(1, KILLS // 2))


CASES = [
    (1, "commit from one rank, every rank, without a barrier (4 daemons, loopback)",
     case_loopback),
    (2, "one node's ranks never save: ETIMEDOUT naming them, committed nowhere",
     case_missing_node),
    (3, "world_size disagreement refused at save", case_world_size),
    (4, "network namespaces: the commits, and a partition during the decision", case_netns),
    (5, "kill loop: >= 50 SIGKILLs of random daemons while every node saves and commits",
     case_kill_loop),
    (6, "kill loop with replication factor 2: 25 SIGKILLs", case_kill_loop_replicated),
]


def main():
    return run_cases(CASES, "CKPT_CC_CASES", "ckptd-cc-")


if __name__ == "__main__":
    sys.exit(main())
